"""bench_ep.py — expert parallelism (issue 25): resident memory per rank and bytes moved.

On the medium synthetic checkpoint (make-tiny --config medium: hidden 1024, 8 layers of 64
FP4 experts, ~520 MB; generated once into $DEEPINFER_BENCH_DIR, else
$XDG_CACHE_HOME/deepinfer/bench-medium, else ~/.cache/deepinfer/bench-medium), in one run:

1. Resident memory with every held expert resident (--ep-prefault): the single process
   (`mpirun -n 1 ... --expert-parallel`, which holds every expert and is the plain engine
   otherwise) against each rank of `mpirun -n 4` (rank 0 the engine, ranks 1-3 a third of the
   experts each).  Peak RSS (VmHWM) per rank; target: every rank <= 0.35x the single process.
2. The same with experts faulted in on first use, after a 64-token prompt (what a short run
   touches; the synthetic router uses a fraction of the experts, so this ratio is workload
   dependent and printed for reference).
3. Bytes moved per token per layer: dispatch (counts + payload, each token's row once per
   destination rank) with rows sent as FP8 (the default under the ref numerics: E4M3 codes and a
   UE8M0 scale byte per 32 values, hidden x 33/32 bytes a row) and as float32 (--ep-dispatch
   f32), and combine (one float32 row back per remote (token, expert) pair), against the minimum
   of tokens x chosen remote experts x hidden x 4 bytes (float32) or x 33/32 bytes (FP8).  Both
   formats must give the same ids.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "deepinfer")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def medium_dir():
    d = os.environ.get("DEEPINFER_BENCH_DIR")
    if not d:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.environ.get("HOME", "/tmp"), ".cache")
        d = os.path.join(cache, "deepinfer", "bench-medium")
    if not os.path.exists(os.path.join(d, "config.json")):
        subprocess.run([BIN, "make-tiny", "--config", "medium", "--out", d], check=True, capture_output=True)
    return d


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def run(n, model, prompt, extra):
    cmd = ["mpirun", "-n", str(n), "--oversubscribe", BIN, "generate", "--model", model, "--expert-parallel",
           "--prompt-ids", prompt, "--max-tokens", "2", "--draft-max", "0"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=240)
    if p.returncode != 0:
        sys.exit("bench_ep: %s failed (exit %d):\n%s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    peaks = {int(m.group(1)): float(m.group(2))
             for m in re.finditer(r"expert-parallel: rank (\d+): peak RSS ([\d.]+) MB", p.stderr)}
    traffic = re.search(r"(?P<tokens>\d+) tokens, (?P<rows>\d+) remote .*?dispatch format (?P<wire>\w+) .*?"
                        r"bytes per token per layer: dispatch (?P<disp>[\d.]+), combine (?P<comb>[\d.]+); "
                        r"minimum .*? (?P<min>[\d.]+): dispatch (?P<disp_x>[\d.]+)x, combine (?P<comb_x>[\d.]+)x; "
                        r"fp8 minimum .*? (?P<min8>[\d.]+): dispatch (?P<disp_x8>[\d.]+)x", p.stderr)
    if len(peaks) != n or (n > 1 and not traffic):
        sys.exit("bench_ep: no per-rank figures in:\n" + p.stderr[-2000:])
    return peaks, traffic, p.stdout.split()


def memory(label, model, prompt, extra, judge):
    one, _, ids1 = run(1, model, prompt, extra)
    four, traffic, ids4 = run(4, model, prompt, extra)
    if ids1 != ids4:
        sys.exit("bench_ep: 4 ranks generated %s, one process %s" % (ids4, ids1))
    base = one[0]
    worst = max(four.values())
    verdict = ("target <= 0.35x: " + ("met" if worst / base <= 0.35 else "MISSED")) if judge else "workload dependent"
    print("%s: single process %.1f MiB peak RSS; 4 ranks: %s; largest / single %.3fx (%s)" % (
        label, base, ", ".join("rank %d %.1f MiB (%.3fx)" % (k, v, v / base) for k, v in sorted(four.items())),
        worst / base, verdict))
    return traffic


def main():
    model = medium_dir()
    print("bench_ep on %s, medium checkpoint %s" % (cpu_model(), model))
    prompt64 = ",".join(str((i * 37) % 250 + 1) for i in range(64))
    memory("all held experts resident (--ep-prefault)", model, "1,2,3,4", ["--ep-prefault"], True)
    t = memory("first touch, 64-token prompt", model, prompt64, [], False)
    _, t32, ids32 = run(4, model, prompt64, ["--ep-dispatch", "f32"])
    _, _, ids8 = run(4, model, prompt64, [])
    if t["wire"] != "fp8" or t32["wire"] != "f32" or ids8 != ids32:
        sys.exit("bench_ep: formats %s / %s, ids %s / %s" % (t["wire"], t32["wire"], ids8, ids32))
    print("bytes per token per layer (4 ranks, 64-token prompt + 2 tokens, %s tokens x layers, %s remote rows): minimum "
          "%s as float32, %s as FP8" % (t["tokens"], t["rows"], t["min"], t["min8"]))
    print("  dispatch fp8: %s (%sx the float32 minimum, %sx the FP8 minimum)" % (t["disp"], t["disp_x"], t["disp_x8"]))
    print("  dispatch f32: %s (%sx the float32 minimum); fp8 / f32 = %.3fx" % (
        t32["disp"], t32["disp_x"], float(t["disp"]) / float(t32["disp"])))
    print("  combine (float32 either way): %s (%sx the float32 minimum)" % (t["comb"], t["comb_x"]))


if __name__ == "__main__":
    main()

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
   destination rank) and combine (one row back per remote (token, expert) pair), against the
   minimum of tokens x chosen remote experts x hidden x 4 bytes.
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
    traffic = re.search(r"(\d+) tokens, (\d+) remote .*dispatch ([\d.]+), combine ([\d.]+); minimum .*? ([\d.]+): "
                        r"dispatch ([\d.]+)x, combine ([\d.]+)x", p.stderr)
    if len(peaks) != n:
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
    print("bytes per token per layer (4 ranks, 64-token prompt + 2 tokens, %s tokens x layers, %s remote rows): "
          "dispatch %s (%sx the minimum %s), combine %s (%sx)" % (t.group(1), t.group(2), t.group(3), t.group(6),
                                                                  t.group(5), t.group(4), t.group(7)))


if __name__ == "__main__":
    main()

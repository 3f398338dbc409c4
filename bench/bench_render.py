"""bench_render.py — prompt render + encode time per request: deepinfer (di_render_json_ids through
ctypes: JSON parse, render to segments, BPE) against the official deepseek-recipe package
(DeepseekV4Encoding / DeepseekV41Encoding .encode with its Rust tokenizer), measured in the same
run, interleaved, median of rounds.  The oracle is timed on prebuilt Conversation objects (its
JSON-to-object conversion is not counted), so the ratio favours it.  Prints ratios only as
figures; absolute times are for orientation (the machine is shared)."""
import ctypes
import json
import os
import random
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
os.environ.setdefault("SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))

try:
    import deepseek_recipe as dr
    import test_render_oracle as ro
except ImportError as e:  # the oracle is a test dependency (tools/install-deps.sh)
    print("bench_render: skipped (%s)" % e)
    sys.exit(0)

TOKENIZER = os.path.join(ro.SHARED, "recipe-data", "tokenizer", "deepseek_v3_tokenizer.json")
ADDED = os.path.join(ro.SHARED, "recipe-data", "tokenizer", "v4_added_tokens.json")
LIB = ro.LIB
LIB.di_tokenizer_load_table.restype = ctypes.c_void_p
LIB.di_tokenizer_load_table.argtypes = [ctypes.c_char_p, ctypes.c_int]
LIB.di_tokenizer_free.argtypes = [ctypes.c_void_p]
LIB.di_render_json_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_void_p)]


def oracle_tokenizer(tmpdir):
    """V3 tokenizer.json plus the V4/V4.1 added tokens (the oracle needs them as added tokens)."""
    with open(TOKENIZER, encoding="utf-8") as f:
        spec = json.load(f)
    with open(ADDED, encoding="utf-8") as f:
        table = json.load(f)
    have = {t["id"]: t for t in spec["added_tokens"]}
    have[128799]["content"] = "<｜System｜>"
    for t in table["v4_named_additions"]:
        have[t["id"]] = {"id": t["id"], "content": t["content"], "single_word": False, "lstrip": False,
                         "rstrip": False, "normalized": False, "special": True}
    spec["added_tokens"] = [have[i] for i in sorted(have)]
    path = os.path.join(tmpdir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    return dr.Tokenizer.from_file(path)


def workloads():
    rng = random.Random(7)
    chat = {"encoding": "v41", "thinking_mode": "thinking",
            "messages": [{"role": "system", "content": "You are a helpful assistant."},
                         {"role": "user", "content": "What is the capital of France?"}]}
    agent = [ro.rand_conversation(rng) for _ in range(20)]
    words = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".", "\n", " 日本語",
             " 12345", " (x)", "  ", " naïve"]
    long_text = "".join(rng.choice(words) for _ in range(20000))
    long = {"encoding": "v4_0731", "thinking_mode": "chat",
            "messages": [{"role": "user", "content": long_text}]}
    return [("short chat (1 turn)", [chat]), ("generated agent histories (20)", agent),
            ("long prompt (~%d kB)" % (len(long_text.encode()) // 1024), [long])]


def time_per_request(fn, requests, min_seconds=0.2):
    n, start = 0, time.perf_counter()
    while True:
        for r in requests:
            fn(r)
        n += len(requests)
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / n


def main():
    tok = LIB.di_tokenizer_load_table(TOKENIZER.encode(), 2)
    if not tok:
        print("bench_render: cannot load tokenizer: %s" % LIB.di_last_error().decode())
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        otok = oracle_tokenizer(tmp)
    encodings = {"v41": dr.DeepseekV41Encoding().with_tokenizer(otok),
                 "v4_0731": dr.DeepseekV4Encoding().with_tokenizer(otok)}

    def ours(request):
        body = request["_body"]
        out = ctypes.c_void_p()
        if LIB.di_render_json_ids(tok, body, len(body), 0, ctypes.byref(out)) != 0:
            raise RuntimeError(LIB.di_last_error().decode())
        ro.LIBC.free(out)

    def theirs(request):
        encodings[request["encoding"]].encode(request["_conv"])

    print("render + encode per request, deepinfer vs deepseek-recipe %s (median of 7 interleaved rounds)"
          % dr.__version__)
    for name, requests in workloads():
        for r in requests:
            r["_body"] = json.dumps({k: v for k, v in r.items() if not k.startswith("_")}).encode()
            r["_conv"] = ro.oracle_conversation(r, ro.oracle_messages(r))
        ours(requests[0])
        theirs(requests[0])  # warm up
        mine, ref = [], []
        for _ in range(7):
            mine.append(time_per_request(ours, requests))
            ref.append(time_per_request(theirs, requests))
        m, o = statistics.median(mine), statistics.median(ref)
        print("  %-34s deepinfer %9.1f us  deepseek-recipe %9.1f us  ratio %.2fx (recipe time / deepinfer time)"
              % (name, m * 1e6, o * 1e6, o / m))
    LIB.di_tokenizer_free(tok)
    return 0


if __name__ == "__main__":
    sys.exit(main())

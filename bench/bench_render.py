"""bench_render.py — prompt render + encode time per request, and output parsing throughput.

Render: deepinfer (di_render_json_ids through
ctypes: JSON parse, render to segments, BPE) against the official deepseek-recipe package
(DeepseekV4Encoding / DeepseekV41Encoding .encode with its Rust tokenizer), measured in the same
run, interleaved, median of rounds.  The oracle is timed on prebuilt Conversation objects (its
JSON-to-object conversion is not counted), so the ratio favours it.
Parse: a long generated model output (reasoning, text, DSML tool calls) fed in 64-byte chunks to
deepinfer's streaming parser (di_output_parser_feed) and to the official StreamProcessor with a
Chat Completions generator (which also builds the protocol chunks, so that ratio favours us).
Ratios are the figures; absolute times are for orientation (the machine is shared)."""
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
LIB.di_output_parser_new.restype = ctypes.c_void_p
LIB.di_output_parser_new.argtypes = [ctypes.c_char_p]
LIB.di_output_parser_feed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
LIB.di_output_parser_finish.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
LIB.di_output_parser_free.argtypes = [ctypes.c_void_p]


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
    bench_parse()
    return 0


def long_output():
    rng = random.Random(11)
    d = "｜DSML｜"
    parts = ["Let me think about this carefully.\n" * 200, "</think>\n\n"]
    for i in range(300):
        parts.append("Step %d: the answer involves 日本 and 😀 and {\"json\": true}.\n" % i)
    parts.append("\n\n<%stool_calls>\n" % d)
    for i in range(100):
        parts.append('<%sinvoke name="get_weather">\n<%sparameter name="city" string="true">Paris "%d"\n</%sparameter>\n'
                     '<%sparameter name="days" string="false">%d</%sparameter>\n</%sinvoke>\n' % (d, d, i, d, d, i, d, d))
    parts.append("</%stool_calls>" % d)
    text = "".join(parts)
    data = text.encode()
    chunks = []
    i = 0
    while i < len(data):  # 64-byte chunks cut at character boundaries (the oracle takes str)
        j = min(len(data), i + 64)
        while j < len(data) and (data[j] & 0xC0) == 0x80:
            j += 1
        chunks.append(data[i:j])
        i = j
    return chunks


def bench_parse():
    chunks = long_output()
    text_chunks = [c.decode() for c in chunks]
    options = json.dumps({"initial": "start"}).encode()
    total = sum(len(c) for c in chunks)

    def ours():
        p = LIB.di_output_parser_new(options)
        for c in chunks:
            LIB.di_output_parser_feed(p, c, len(c))
        out = ctypes.c_void_p()
        LIB.di_output_parser_finish(p, ctypes.byref(out))
        ro.LIBC.free(out)
        LIB.di_output_parser_free(p)

    def theirs():
        body = {"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "user", "content": "hi"}]}
        request = dr.ChatCompletionRequest(body).convert(dr.ConversionOptions())
        gen = dr.ChatCompletionRequest.chunk_generator(request, "id", "m")
        sp = dr.StreamProcessor(gen, dr.ParsingOptions(thinking_initial_stage=dr.ThinkingInitialStage.ReasoningStart))
        sp.push(dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(prompt_tokens=1)))
        for c in text_chunks:
            sp.push(dr.InferenceChunk.text(c, 1))
        sp.push(dr.InferenceChunk.finish(dr.InferenceFinishReason.Stop))
        sp.finish()

    mine, ref = [], []
    for _ in range(7):
        mine.append(time_per_request(lambda _: ours(), [None]))
        ref.append(time_per_request(lambda _: theirs(), [None]))
    m, o = statistics.median(mine), statistics.median(ref)
    print("output parsing, %d kB in 64-byte chunks (median of 7 interleaved rounds)" % (total // 1024))
    print("  deepinfer %.1f MB/s  deepseek-recipe StreamProcessor %.1f MB/s  ratio %.2fx (recipe time / deepinfer time)"
          % (total / m / 1e6, total / o / 1e6, o / m))


if __name__ == "__main__":
    sys.exit(main())

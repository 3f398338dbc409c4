"""The KV block cache's reliability through `deepinfer serve` on the built-in tiny model (issue 22,
"Reliability"): each test starts and kills its own servers by pid on its own --kv-cache-dir.

The oracle for "no damaged record is served" is a clean server's answers: a request that hits the
same blocks (same prefix, same bounded replay) must give the same greedy completion, and one
whose blocks were all damaged must give the cold completion of a server without a cache.  Usage's
cached_tokens is compared with the whole blocks of the shared prefix, derived independently with
Hugging Face `tokenizers` from the model's tokenizer.json (as test_server_kv_cache does)."""
import glob
import json
import os
import signal
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Serve, post_json as post, wait_until  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")

BLOCK = 128
WINDOW = 8  # the built-in tiny model's sliding window (the replay before a hit)
REFRESH_S = 2  # how often an idle server looks for other processes' segments (kv_cache.c)
SYSTEM = "You are a careful assistant. Answer briefly, cite nothing, and never repeat the question. " * 8
QUESTIONS = ["Question one: what colour is the sky?", "Question two: how many legs has a cat?",
             "Question three: which is larger, ten or twelve?"]


def expected_hit(model_dir, first, second):
    """Whole blocks of the two prompts' common prefix (keeping the second's last token to compute)."""
    tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    bos = tok.token_to_id("<｜begin▁of▁sentence｜>")
    a, b = ([bos] + tok.encode(p, add_special_tokens=False).ids for p in (first, second))
    common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    hit = min(common, len(b) - 1) // BLOCK * BLOCK
    return hit if hit > WINDOW else 0


def ask(srv, prompt, **extra):
    """A greedy 6-token completion: (cached_tokens, text)."""
    status, r = post(srv, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 6,
                                              "temperature": 0, **extra})
    assert status == 200, r
    return r["usage"]["prompt_tokens_details"]["cached_tokens"], r["choices"][0]["text"]


def serve(tmp_path, reference, *args):
    """A server with its own log in tmp_path, on the reference's generated tiny model."""
    cache = tmp_path / f"cache{len(list(tmp_path.glob('cache*')))}"
    cache.mkdir()
    os.symlink(os.path.join(reference["model_cache"], "deepinfer"), cache / "deepinfer")
    return Serve(str(cache), *args)


def ask_dying(srv, prompt):
    """A request to a server about to be killed: its connection dies with it."""
    try:
        post(srv, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 1})
    except (OSError, ValueError):  # reset, or a body cut short
        pass


def kv_flags(kv_dir):
    return ("--kv-cache-dir", str(kv_dir), "--kv-block-tokens", BLOCK)


def kill9(srv):
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(timeout=10)
    srv.log.close()


def skipped(srv):
    m = srv.metrics()
    return m['deepinfer_kv_cache_skipped_total{what="record"}'], m['deepinfer_kv_cache_skipped_total{what="file"}']


def warnings(srv, needle):
    return sum(needle in line for line in open(srv.log_path))


def written(srv):
    return srv.metrics()['deepinfer_kv_cache_disk_bytes_total{op="write"}']


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One server, one directory: the cold answers of both prompts and the second's answer when it
    hits the first's blocks (the answers every other server must reproduce)."""
    tmp = tmp_path_factory.mktemp("ref")
    (tmp / "kv").mkdir()
    srv = Serve(str(tmp), *kv_flags(tmp / "kv"))
    try:
        prompts = [SYSTEM + q for q in QUESTIONS]
        hit = expected_hit(srv.model_dir, prompts[0], prompts[1])
        assert hit >= 2 * BLOCK  # the oracle's precondition: blocks to cache
        assert expected_hit(srv.model_dir, prompts[0], prompts[2]) == hit
        cold0 = ask(srv, prompts[0])
        sizes = [-1.0]  # the bytes the writer puts down for the first prompt's blocks, once settled
        assert wait_until(lambda: sizes.append(written(srv)) or sizes[-1] == sizes[-2] > 0, 10)
        warm1, warm2 = ask(srv, prompts[1]), ask(srv, prompts[2])
        assert cold0[0] == 0 and warm1[0] == hit and warm2[0] == hit
    finally:
        assert srv.stop() == 0
    cold = Serve(str(tmp))  # no cache at all: the cold answer of the second prompt
    try:
        cold1 = ask(cold, prompts[1])
    finally:
        cold.stop()
    return {"prompts": prompts, "hit": hit, "cold": [cold0[1], cold1[1]], "warm": warm1[1], "warm2": warm2[1], "bytes": sizes[-1],
            "model_cache": str(tmp)}


def test_kill_9_while_writing_then_restart_serves_no_torn_record(tmp_path, reference):
    """kill -9 once the first prompt's blocks are written (the segment stays .open, never sealed),
    then its tail torn as a kill inside a write leaves it.  Torn inside block 0's record: nothing is
    restored and the answer is the cold run's.  Torn inside the last record: the restarted server
    rebuilds its index by scanning, counts and logs the torn record once, restores only the whole
    blocks before it, stores the block it recomputes, and a next server reads those blocks back
    with the same answer (hits resume)."""
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    p0, p1, p2 = reference["prompts"]
    srv = serve(tmp_path, reference, *kv_flags(kv_dir))
    assert ask(srv, p0) == (0, reference["cold"][0])
    assert wait_until(lambda: written(srv) >= reference["bytes"], 10)
    kill9(srv)
    open_segs = glob.glob(str(kv_dir / "kv-*.open"))
    assert len(open_segs) == 1 and not glob.glob(str(kv_dir / "kv-*.kvs"))  # never sealed
    data = open(open_segs[0], "rb").read()
    # a kill inside block 0's record: nothing is restored, the answer is the cold run's
    torn0 = tmp_path / "kv0"
    torn0.mkdir()
    (torn0 / os.path.basename(open_segs[0])).write_bytes(data[: 2 * 4096 + 1000])
    srv = serve(tmp_path, reference, *kv_flags(torn0))
    try:
        assert ask(srv, p1) == (0, reference["cold"][1])
        assert skipped(srv)[0] == 1 and warnings(srv, "torn or damaged records") == 1
    finally:
        assert srv.stop() == 0
    os.truncate(open_segs[0], len(data) - 100)  # a kill inside the last record
    srv = serve(tmp_path, reference, *kv_flags(kv_dir))
    try:
        assert 0 < ask(srv, p1)[0] < reference["hit"]  # the blocks before the torn one are served
        assert skipped(srv)[0] >= 1  # the torn record, counted
        assert warnings(srv, "torn or damaged records") == 1
        assert wait_until(lambda: written(srv) > 0, 10)  # what it recomputed, stored again
        resumed = ask(srv, p2)
        assert resumed[0] == reference["hit"]
        assert warnings(srv, "torn or damaged records") == 1
    finally:
        assert srv.stop() == 0
    # the recomputed block came after a partial hit's bounded replay (an approximate state, spec
    # §2.4), so its answer has no cold oracle: a next server must read back exactly those blocks
    srv = serve(tmp_path, reference, *kv_flags(kv_dir))
    try:
        assert ask(srv, p2) == resumed
        assert skipped(srv)[0] >= 1 and srv.metrics()['deepinfer_kv_cache_disk_bytes_total{op="read"}'] > 0
    finally:
        assert srv.stop() == 0


def test_kill_9_racing_the_writer_serves_whole_records_only(tmp_path, reference):
    """kill -9 while the writer puts down a long prompt's blocks (12 blocks each; killed once the
    directory has grown past a record), three times on one directory: the restarted server restores whole blocks only, and when it
    restores none or all of a prompt's blocks its answer is the one a clean server gives (cold,
    or after the same blocks); a torn block would change it."""
    bases = [f"Round {r}. " + SYSTEM * 3 for r in range(3)]
    questions = [b + QUESTIONS[1] for b in bases]
    (tmp_path / "ref").mkdir()
    clean = serve(tmp_path, reference, *kv_flags(tmp_path / "ref"))
    try:  # the oracle: each question after its base on an undamaged directory
        warm = []
        for b, q in zip(bases, questions):
            ask(clean, b)
            warm.append(ask(clean, q))
    finally:
        assert clean.stop() == 0
    cold_srv = serve(tmp_path, reference)
    try:
        cold = [ask(cold_srv, q)[1] for q in questions]
    finally:
        assert cold_srv.stop() == 0
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    for r, b in enumerate(bases):
        srv = serve(tmp_path, reference, *kv_flags(kv_dir))
        asking = threading.Thread(target=ask_dying, args=(srv, b))
        asking.start()  # killed when the writer has put down part of the blocks: mid-record or between
        assert wait_until(lambda: sum(map(os.path.getsize, glob.glob(str(kv_dir / "kv-*")))) > 8192 * (r + 1), 20)
        kill9(srv)
        asking.join()
    srv = serve(tmp_path, reference, *kv_flags(kv_dir))
    try:
        for q, (hit, text_warm), text_cold in zip(questions, warm, cold):
            cached, text = ask(srv, q)
            assert cached % BLOCK == 0 and cached <= hit
            if cached in (0, hit):
                assert text == (text_warm if cached else text_cold)
    finally:
        assert srv.stop() == 0


def test_truncated_flipped_and_foreign_files_are_skipped_counted_and_logged_once(tmp_path, reference):
    """A sealed segment with block 0's payload flipped by one bit, a copy of it cut inside its first
    record under another segment name, a foreign file under a segment name and a README: the
    damaged block is never served (the request gets the cold answer, nothing cached), the block
    the server recomputes then serves the next request, and each bad file and record is counted
    and logged once, however often the directory is listed again."""
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    p0, p1, p2 = reference["prompts"]
    srv = serve(tmp_path, reference, *kv_flags(kv_dir))
    ask(srv, p0)
    assert srv.stop() == 0
    (seg,) = glob.glob(str(kv_dir / "kv-*.kvs"))
    data = bytearray(open(seg, "rb").read())
    hour, writer = os.path.basename(seg).split("-")[1:3]
    cut = kv_dir / f"kv-{hour}-{writer}-000999.kvs"
    cut.write_bytes(data[: 2 * 4096 + 1000])  # the file header, record 0's header, a bit of its payload
    data[2 * 4096 + 100] ^= 0x10  # block 0's payload: the file header and its record header take a page each
    open(seg, "wb").write(data)
    (kv_dir / "README.txt").write_text("not a segment\n")
    foreign = kv_dir / f"kv-{hour}-{writer}-000998.kvs"
    foreign.write_bytes(os.urandom(4096))
    srv = serve(tmp_path, reference, *kv_flags(kv_dir))
    try:
        assert ask(srv, p1) == (0, reference["cold"][1])  # block 0 is damaged: nothing to restore
        assert wait_until(lambda: written(srv) > 0, 10)
        assert ask(srv, p2) == (reference["hit"], reference["warm2"])  # the blocks it recomputed
        assert skipped(srv) == (2, 2)  # records: the flipped one, the cut one; files: README, foreign
        time.sleep(REFRESH_S + 1)  # the directory is listed again
        assert skipped(srv) == (2, 2)
        log = open(srv.log_path).read()
        assert [log.count(f) for f in ("README.txt", foreign.name, cut.name, "failed verification")] == [1, 1, 2, 1]
    finally:
        assert srv.stop() == 0


def test_unwritable_directory_degrades_to_ram_with_one_warning(tmp_path, reference):
    """A cache directory the server cannot write: mode 0500, or, as root (whom the mode bits do
    not stop), a regular file where the directory is expected.  The server starts, warns once,
    caches in RAM, and the second prompt hits with the reference's answer."""
    kv_dir = tmp_path / "kv"
    if os.geteuid() == 0:
        kv_dir.write_text("a file where the directory should be\n")
    else:
        kv_dir.mkdir(mode=0o500)
    p0, p1, p2 = reference["prompts"]
    srv = serve(tmp_path, reference, *kv_flags(kv_dir))
    try:
        assert ask(srv, p0) == (0, reference["cold"][0])
        assert ask(srv, p1) == (reference["hit"], reference["warm"])
        m = srv.metrics()
        assert m['deepinfer_kv_cache_hit_tokens_total{tier="ram"}'] == reference["hit"]
        assert written(srv) == 0
        assert warnings(srv, "RAM only") == 1
    finally:
        assert srv.stop() == 0


def test_two_servers_on_one_directory_share_blocks(tmp_path, reference):
    """Two servers at once on one directory: the second hits the blocks the first wrote (read
    from disk: the second never computed them), with the reference's warm answer."""
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    p0, p1, p2 = reference["prompts"]
    first = serve(tmp_path, reference, *kv_flags(kv_dir))
    second = None
    try:
        second = serve(tmp_path, reference, *kv_flags(kv_dir))
        assert ask(first, p0) == (0, reference["cold"][0])
        assert wait_until(lambda: written(first) > 0, 10)
        time.sleep(REFRESH_S + 1)  # an idle server lists the directory every REFRESH_S seconds
        assert ask(second, p1) == (reference["hit"], reference["warm"])
        m = second.metrics()
        assert m['deepinfer_kv_cache_disk_bytes_total{op="read"}'] > 0
    finally:
        assert first.stop() == 0
        if second:
            assert second.stop() == 0


def test_cache_salt_separates_tenants_on_every_protocol(tmp_path, reference):
    """vLLM's cache_salt: blocks stored under one salt are never restored under another (nor
    without one); under the same salt they are.  Accepted by Chat, Completions, Responses and
    Messages; a salt that is not a non-empty string is refused by name."""
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    p0, p1, p2 = reference["prompts"]
    srv = serve(tmp_path, reference, *kv_flags(kv_dir))
    try:
        assert ask(srv, p0, cache_salt="tenant-a") == (0, reference["cold"][0])
        assert ask(srv, p1, cache_salt="tenant-b") == (0, reference["cold"][1])
        assert ask(srv, p1)[0] == 0  # no salt is its own tenant
        assert ask(srv, p1, cache_salt="tenant-a") == (reference["hit"], reference["warm"])
        for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                           ("/v1/responses", {"input": "hi"}),
                           ("/v1/messages", {"messages": [{"role": "user", "content": "hi"}]})):
            base = {"model": MODEL, "max_tokens": 2, **body}
            if path == "/v1/responses":
                base["max_output_tokens"] = base.pop("max_tokens")
            status, r = post(srv, path, {**base, "cache_salt": "tenant-a"})
            assert status == 200, (path, r)
            for bad in ("", 7, ["x"], "x" * 257):
                status, r = post(srv, path, {**base, "cache_salt": bad})
                assert status == 400 and "cache_salt" in json.dumps(r), (path, bad, r)
    finally:
        assert srv.stop() == 0
    nocache = serve(tmp_path, reference)
    try:  # a salt without a block cache asks for something the server does not do: refused
        status, r = post(nocache, "/v1/completions", {"model": MODEL, "prompt": "x", "max_tokens": 1,
                                                      "cache_salt": "tenant-a"})
        assert status == 400 and "cache_salt" in json.dumps(r)
    finally:
        nocache.stop()

"""test_request_isolation.py — one request's failure ends that request alone (issue 30 item 0).

Eight requests share the engine's steps; one of them is poisoned.  The other seven must give the
tokens and logprobs they give when run without it (the engine is batch invariant, so a failure
that leaked into the step would show up as different bits or lost outputs), and the poisoned one
must end with its cause: finish_reason "error" and a message through the Python API, an HTTP
500 naming the failure through `serve` (never 503 "shutting down"), and the server stays up.

Two poisons: DEEPINFER_TEST_FAIL_SEED (a test-only fault that makes sampling fail for the
request with that seed, at every step it is in — a stand-in for any per-sequence runtime
failure: a masked-out constraint, an allocation) and a real constraint, the issue's
{"type": "string", "pattern": "^\\t$"}, which either works or must fail alone."""
import concurrent.futures
import os
import sys
import tempfile
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import Serve, engine_idle, post_json, wait_until  # noqa: E402

from deepinfer import LLM, SamplingParams  # noqa: E402

POISON_SEED = 4242
SEEDS = [11, 12, 13, 14, 15, 16, 17]
PROMPTS = [f"Request number {i} says:" for i in range(8)]
TAB_SCHEMA = {"type": "string", "pattern": "^\\t$"}


def params(seed, **extra):
    return SamplingParams(max_tokens=12, seed=seed, temperature=0.8, logprobs=2, **extra)


def answer(out):
    o = out.outputs[0]
    return o.token_ids, [{t: lp.logprob for t, lp in d.items()} for d in o.logprobs], o.finish_reason


@pytest.fixture(scope="module")
def llm():
    old = os.environ.get("DEEPINFER_TEST_FAIL_SEED")
    os.environ["DEEPINFER_TEST_FAIL_SEED"] = str(POISON_SEED)  # read when the engine is created
    try:
        engine = LLM(seed=1, enable_prefix_caching=False)
    finally:
        if old is None:
            del os.environ["DEEPINFER_TEST_FAIL_SEED"]
        else:
            os.environ["DEEPINFER_TEST_FAIL_SEED"] = old
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def baseline(llm):
    """The seven healthy requests, alone."""
    return [answer(o) for o in llm.generate(PROMPTS[:7], [params(s) for s in SEEDS])]


def with_poison(llm, poison_params, at=3):
    """The seven healthy requests with a poisoned eighth in the middle of the batch."""
    prompts = PROMPTS[:at] + [PROMPTS[7]] + PROMPTS[at:7]
    sps = [params(s) for s in SEEDS]
    sps.insert(at, poison_params)
    outs = llm.generate(prompts, sps)
    return outs[at], [answer(o) for i, o in enumerate(outs) if i != at]


def test_a_failed_request_ends_alone_in_generate(llm, baseline):
    assert all(fin in ("stop", "length") for _, _, fin in baseline)
    poisoned, others = with_poison(llm, params(POISON_SEED))
    assert others == baseline  # same tokens, same logprobs, bit for bit
    o = poisoned.outputs[0]
    assert o.finish_reason == "error"
    assert o.error and "DEEPINFER_TEST_FAIL_SEED" in o.error
    # the engine is still serving: the same batch again gives the same answers
    assert [answer(x) for x in llm.generate(PROMPTS[:7], [params(s) for s in SEEDS])] == baseline


def test_the_failure_is_reported_at_the_first_step_too(llm, baseline):
    """Poisoned first in the batch and alone in a later step both end it alone."""
    poisoned, others = with_poison(llm, params(POISON_SEED), at=0)
    assert others == baseline
    assert poisoned.outputs[0].finish_reason == "error"
    alone = llm.generate(PROMPTS[7], params(POISON_SEED))[0].outputs[0]
    assert alone.finish_reason == "error" and alone.token_ids == []


def test_an_unsatisfiable_looking_constraint_never_harms_the_others(llm, baseline):
    poisoned, others = with_poison(llm, params(99, so_args={"schema_type": "json_schema", "schema": TAB_SCHEMA}))
    assert others == baseline
    o = poisoned.outputs[0]
    if o.finish_reason == "error":
        assert o.error and "mask" in o.error  # its own cause, not a generic abort
    else:
        assert o.finish_reason in ("stop", "length") and o.error is None


# ---- through serve ---------------------------------------------------------------------------

def chat_body(i, seed, **extra):
    return {"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "user", "content": PROMPTS[i]}],
            "max_tokens": 12, "seed": seed, "temperature": 0.8, "logprobs": True, "top_logprobs": 2, **extra}


def answers_of(replies):
    out = []
    for status, body in replies:
        assert status == 200, body
        c = body["choices"][0]
        out.append((c["message"]["content"], [(t["token"], t["logprob"]) for t in c["logprobs"]["content"]],
                    c["finish_reason"]))
    return out


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryDirectory(prefix="deepinfer-isolation-") as cache:
        s = Serve(cache, "--prefix-cache", "off", extra_env={"DEEPINFER_TEST_FAIL_SEED": str(POISON_SEED)})
        yield s
        assert s.stop() == 0


def concurrently(server, bodies):
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: post_json(server, "/v1/chat/completions", b), bodies))


def test_a_failed_request_ends_alone_in_serve(server):
    baseline = answers_of(concurrently(server, [chat_body(i, s) for i, s in enumerate(SEEDS)]))
    bodies = [chat_body(i, s) for i, s in enumerate(SEEDS)]
    bodies.insert(3, chat_body(7, POISON_SEED))
    replies = concurrently(server, bodies)
    status, body = replies.pop(3)
    assert answers_of(replies) == baseline
    assert status == 500, body
    msg = body["error"]["message"]
    assert "DEEPINFER_TEST_FAIL_SEED" in msg and "shutting down" not in msg
    with urllib.request.urlopen(server.url + "/health", timeout=10) as r:
        assert r.status == 200
    assert wait_until(lambda: engine_idle(server.metrics), 20)  # its state was freed
    assert answers_of(concurrently(server, [chat_body(i, s) for i, s in enumerate(SEEDS)])) == baseline


def test_the_issue_schema_never_harms_the_others_in_serve(server):
    baseline = answers_of(concurrently(server, [chat_body(i, s) for i, s in enumerate(SEEDS)]))
    rf = {"type": "json_schema", "json_schema": {"name": "tab", "schema": TAB_SCHEMA}}
    bodies = [chat_body(i, s) for i, s in enumerate(SEEDS)]
    bodies.insert(5, chat_body(7, 99, response_format=rf))
    replies = concurrently(server, bodies)
    status, body = replies.pop(5)
    assert answers_of(replies) == baseline
    if status == 200:
        assert body["choices"][0]["finish_reason"] in ("stop", "length")
    else:
        assert status in (400, 500), body
        assert "shutting down" not in body["error"]["message"]


def test_a_failed_stream_ends_with_an_error_event(server):
    import json as _json
    req = urllib.request.Request(server.url + "/v1/chat/completions",
                                 data=_json.dumps(dict(chat_body(7, POISON_SEED), stream=True)).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read().decode()
        assert "DEEPINFER_TEST_FAIL_SEED" in text and "error" in text
    except urllib.error.HTTPError as e:  # failed before the first byte: an ordinary error reply
        assert e.code == 500 and "DEEPINFER_TEST_FAIL_SEED" in e.read().decode()

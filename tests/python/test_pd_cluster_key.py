"""The PD cluster key (`serve --cluster-key`, `gateway --cluster-key`, or DEEPINFER_CLUSTER_KEY):
prefill and decode workers and a gateway sharing a key serve a PD request exactly (the answer of
a cold single server); a prefill worker with another key cannot register with the decode
worker's transfer listener (its /internal/prefill answers 502 naming the mismatch, the decode
worker counts the refusal); worker-internal requests without the key's token are refused
(/internal/prefill 403, X-DI-Room 400).  The token is recomputed here with Python's hmac and
hashlib (the oracle of its format: HMAC-SHA256 of a fixed label, in hex)."""
import hashlib
import hmac
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import MODEL, Gateway, Serve, post_json, stop_all  # noqa: E402
from test_pd_workers import envelope, post_with_headers  # noqa: E402

KEY = b"0123456789abcdef0123456789abcdef"
OTHER = b"fedcba9876543210fedcba9876543210"
LABEL = b"deepinfer cluster: worker-internal HTTP, v1"
BODY = {"model": MODEL, "prompt": "Cluster. " + "the quick brown fox jumps over the lazy dog " * 14,
        "max_tokens": 12, "temperature": 0}


def token(key):
    return hmac.new(key, LABEL, hashlib.sha256).hexdigest()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    (root / "key").write_bytes(KEY + b"\n")  # a trailing newline is not part of the key
    (root / "other").write_bytes(OTHER)
    started = []

    def start(name, *args):
        s = Serve(str(tmp_path_factory.mktemp(name)), *args)
        started.append(s)
        return s

    try:
        ref = start("ref", "--prefix-cache", "off")
        pre = start("pre", "--role", "prefill", "--cluster-key", str(root / "key"))
        dec = start("dec", "--role", "decode", "--cluster-key", str(root / "key"))
        rogue = start("rogue", "--role", "prefill", "--cluster-key", str(root / "other"))
        yield {"root": root, "ref": ref, "pre": pre, "dec": dec, "rogue": rogue}
    finally:
        stop_all(started)


def test_a_gateway_with_the_key_drives_pd_exactly(cluster):
    dec = cluster["dec"]
    gw = Gateway(str(cluster["root"]), "--prefill", cluster["pre"].url, "--decode", dec.url, "--heartbeat-ms", 200,
                 "--cluster-key", str(cluster["root"] / "key"))
    try:
        before = dec.metrics()
        st, via = post_json(gw, "/v1/completions", BODY)
        assert st == 200, via
        after = dec.metrics()
        assert after["deepinfer_pd_states_imported_total"] == before["deepinfer_pd_states_imported_total"] + 1
        assert after["deepinfer_pd_local_prefills_total"] == before["deepinfer_pd_local_prefills_total"]
        st, cold = post_json(cluster["ref"], "/v1/completions", BODY)
        assert st == 200 and via["choices"][0]["text"] == cold["choices"][0]["text"]
        assert gw.metrics()["deepinfer_gateway_pd_requests_total"] == 1
    finally:
        assert gw.stop() == 0


def test_a_prefill_worker_with_another_key_cannot_register(cluster):
    dec, rogue = cluster["dec"], cluster["rogue"]
    before = dec.metrics()["deepinfer_pd_registrations_refused_total"]
    st, answer = post_with_headers(rogue, "/internal/prefill", envelope(501, dec, "/v1/completions", BODY),
                                   {"X-DI-Cluster-Key": token(OTHER)})
    assert st == 502, answer
    assert "cluster key mismatch" in answer["error"]["message"], answer
    assert dec.metrics()["deepinfer_pd_registrations_refused_total"] == before + 1


def test_internal_requests_need_the_keys_token(cluster):
    pre, dec = cluster["pre"], cluster["dec"]
    for headers in ({}, {"X-DI-Cluster-Key": token(OTHER)}, {"X-DI-Cluster-Key": KEY.decode()}):
        st, answer = post_with_headers(pre, "/internal/prefill", envelope(502, dec, "/v1/completions", BODY), headers)
        assert st == 403 and "X-DI-Cluster-Key" in answer["error"]["message"], answer
        st, answer = post_with_headers(dec, "/v1/completions", BODY, dict(headers, **{"X-DI-Room": "503"}))
        assert st == 400 and "X-DI-Cluster-Key" in answer["error"]["message"], answer


def test_a_short_key_or_a_key_on_a_whole_server_is_refused(tmp_path):
    short = tmp_path / "short"
    short.write_bytes(b"tiny")
    for args, needle in ((("--role", "decode", "--cluster-key", str(short)), "4 bytes, expected 16 to 4096"),
                         (("--cluster-key", str(short)), "secures the KV transfer of --role prefill and decode"),
                         (("--role", "prefill", "--cluster-key", str(tmp_path / "missing")), "--cluster-key")):
        with pytest.raises(RuntimeError) as e:
            Serve(str(tmp_path), *args)
        assert needle in str(e.value), str(e.value)

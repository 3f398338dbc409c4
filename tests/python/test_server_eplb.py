"""`deepinfer serve --eplb-ranks N` on the built-in tiny model: the live EPLB driver counts every
engine step's routed tokens and /metrics reports moe_lb per layer (one gauge per MoE layer of the
model, read from its config.json), its aggregate, the identity placement's, and replans_total,
which follows the configured schedule exactly: with window W and period P (W < P, no warm-up)
the policy replans at step W and at every multiple of P, so after S steps
replans = [S >= W] + floor(S / P) (src/cluster/eplb_policy.c)."""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from server_fixture import Serve, post_json, wait_until  # noqa: E402

WINDOW, PERIOD = 2, 5


def expected_replans(steps):
    return int(steps >= WINDOW) + steps // PERIOD


def complete(server, prompt):
    status, body = post_json(server, "/v1/completions",
                             {"model": "DeepSeek-V4.1-Flash", "prompt": prompt, "max_tokens": 12,
                              "ignore_eos": True, "temperature": 0})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 12


def test_metrics_report_moe_lb_per_layer_and_replans_on_the_schedule():
    with tempfile.TemporaryDirectory(prefix="deepinfer-eplb-") as cache:
        s = Serve(cache, "--eplb-ranks", 4, "--eplb-window", WINDOW, "--eplb-period", PERIOD)
        try:
            with open(os.path.join(s.model_dir, "config.json")) as f:
                layers = json.load(f)["text_config"]["num_hidden_layers"]
            m = s.metrics()
            names = [f'deepinfer_moe_lb{{layer="{layer}"}}' for layer in range(layers)]
            assert all(m[n] == 1.0 for n in names)  # no step yet: no load
            assert f'deepinfer_moe_lb{{layer="{layers}"}}' not in m
            assert m["deepinfer_eplb_replans_total"] == 0 and m["deepinfer_eplb_ranks"] == 4

            complete(s, "the first request")
            m1 = s.metrics()
            steps1 = m1["deepinfer_eplb_steps_total"]
            assert steps1 >= 12 - 5  # at least one step per output token, speculation aside
            assert m1["deepinfer_eplb_replans_total"] == expected_replans(int(steps1)) > 0
            assert m1["deepinfer_eplb_moved_slots_total"] > 0
            assert all(m1[n] >= 1.0 for n in names)
            assert m1["deepinfer_moe_lb_aggregate"] >= 1.0 and m1["deepinfer_moe_lb_identity"] >= 1.0

            complete(s, "a second, different request")
            m2 = s.metrics()
            steps2 = m2["deepinfer_eplb_steps_total"]
            assert steps2 > steps1
            assert m2["deepinfer_eplb_replans_total"] == expected_replans(int(steps2))
            assert m2["deepinfer_eplb_replans_total"] > m1["deepinfer_eplb_replans_total"]
            assert m2["deepinfer_eplb_apply_failures_total"] == 0
        finally:
            assert s.stop() == 0
        log = open(s.log_path).read()
        assert "EPLB: %d layers x" % layers in log


def test_eplb_flags_without_ranks_are_refused():
    with tempfile.TemporaryDirectory(prefix="deepinfer-eplb-") as cache:
        try:
            Serve(cache, "--eplb-window", 3)
            started = True
        except RuntimeError as e:
            started = False
            assert "need --eplb-ranks N" in str(e)
        assert not started

"""test_eplb_oracle.py — `deepinfer eplb` against an independent numpy statement of serving.md §8.1.

The oracle below is written from the spec text (balanced packing, greedy replication, the
hierarchical routine and the global fallback), not from deepseek-ai/EPLB's code, and uses plain
Python loops with linear scans where the C code uses heaps, so the two share no structure.  The
tie rules are the spec's: stable descending sort, lightest non-full pack with the lowest index,
first maximum of weight/count.  Loads are float32, as in the reference."""
import json
import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.path.join(ROOT, "build", "deepinfer")


def balanced_packing(w, m):
    n = len(w)
    per = n // m
    if per == 1:
        return list(range(n)), [0] * n
    order = sorted(range(n), key=lambda i: -float(w[i]))  # Python's sort is stable
    packw = [np.float32(0)] * m
    cnt = [0] * m
    pack, rank = [0] * n, [0] * n
    for i in order:
        best = None
        for p in range(m):
            if cnt[p] < per and (best is None or packw[p] < packw[best]):
                best = p
        pack[i], rank[i] = best, cnt[best]
        cnt[best] += 1
        packw[best] = np.float32(packw[best] + w[i])
    return pack, rank


def replicate(w, r):
    e = len(w)
    phy2log = list(range(e))
    rank = [0] * e
    cnt = [1] * e
    for _ in range(e, r):
        keys = [np.float32(w[i]) / np.float32(cnt[i]) for i in range(e)]
        best = int(np.argmax(keys))  # first maximum
        phy2log.append(best)
        rank.append(cnt[best])
        cnt[best] += 1
    return phy2log, rank, cnt


def plan_layer(w, R, G, N, P):
    E = len(w)
    gs, gpn, en, rn, spg = E // G, G // N, E // N, R // N, R // P
    gw = np.array([np.float32(np.sum(w[g * gs:(g + 1) * gs], dtype=np.float64)) for g in range(G)],
                  dtype=np.float32)
    gpack, grank = balanced_packing(gw, N)
    mlog2log = [0] * E
    for g in range(G):
        base = (gpack[g] * gpn + grank[g]) * gs
        for j in range(gs):
            mlog2log[base + j] = g * gs + j
    phy2log, phyrank, logcnt = [0] * R, [0] * R, [0] * E
    for node in range(N):
        experts = mlog2log[node * en:(node + 1) * en]
        mw = np.array([w[x] for x in experts], dtype=np.float32)
        p2m, prank, mcnt = replicate(mw, rn)
        rw = np.array([mw[p2m[i]] / np.float32(mcnt[p2m[i]]) for i in range(rn)], dtype=np.float32)
        gpu, grk = balanced_packing(rw, P // N)
        for i in range(rn):
            slot = node * rn + gpu[i] * spg + grk[i]
            phy2log[slot] = experts[p2m[i]]
            phyrank[slot] = prank[i]
        for k, x in enumerate(experts):
            logcnt[x] = mcnt[k]
    return phy2log, phyrank, logcnt


def oracle(weight, R, G, N, P):
    weight = np.asarray(weight, dtype=np.float32)
    if G % N != 0:
        G = N = 1
    layers = [plan_layer(row, R, G, N, P) for row in weight]
    X = max(max(c) for _, _, c in layers)
    log2phy = []
    for p2l, rk, cnt in layers:
        t = [[-1] * X for _ in cnt]
        for s, (e, k) in enumerate(zip(p2l, rk)):
            t[e][k] = s
        log2phy.append(t)
    return [l[0] for l in layers], log2phy, [l[2] for l in layers]


def run_cli(req):
    out = subprocess.run([CLI, "eplb"], input=json.dumps(req), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_oracle_reproduces_readme_example():
    w = [[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
         [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]]
    p2l, _, _ = oracle(w, 16, 4, 2, 8)
    assert p2l == [[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                   [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]]


SHAPES = [  # (E, R, G, N, P)
    (12, 16, 4, 2, 8), (16, 24, 4, 2, 4), (32, 48, 8, 4, 16), (64, 80, 8, 2, 16),
    (12, 16, 3, 2, 4),   # 2 does not divide 3: global policy
    (8, 8, 2, 1, 8),     # no redundancy, one slot per GPU
    (24, 32, 1, 1, 8), (48, 64, 6, 4, 8),
]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", SHAPES)
def test_cli_matches_oracle_on_random_loads(shape, seed):
    E, R, G, N, P = shape
    rng = np.random.default_rng(1000 * seed + E)
    if seed % 3 == 0:    # small integers: many exact ties exercise the tie rules
        w = rng.integers(0, 6, size=(3, E))
    elif seed % 3 == 1:  # Zipf-like token counts
        w = np.floor(1e4 / (1 + rng.permutation(E)) ** 1.1 * rng.uniform(0.5, 1.5, size=(3, E)))
    else:                # real-valued loads
        w = rng.gamma(0.7, 100.0, size=(3, E)).astype(np.float32)
    w = w.tolist()
    got = run_cli({"weight": w, "num_replicas": R, "num_groups": G, "num_nodes": N, "num_gpus": P})
    p2l, l2p, cnt = oracle(w, R, G, N, P)
    assert got["phy2log"] == p2l
    assert got["log2phy"] == l2p
    assert got["logcnt"] == cnt


@pytest.mark.parametrize("bad,needle", [
    ('{"weight":[[1,2],[3]],"num_replicas":2,"num_groups":1,"num_nodes":1,"num_gpus":1}', "weight[1]"),
    ('{"weight":[[1,-2]],"num_replicas":2,"num_groups":1,"num_nodes":1,"num_gpus":1}', "weight[0][1]"),
    ('{"weight":[[1,2]],"num_replicas":3,"num_groups":1,"num_nodes":1,"num_gpus":2}', "multiple of num_gpus"),
    ('{"weight":[[1,2]],"num_groups":1,"num_nodes":1,"num_gpus":1}', "num_replicas"),
    ('{"weight":[[1,2]],"num_replicas":1,"num_groups":1,"num_nodes":1,"num_gpus":1}', "smaller than"),
    ('{"weight":[[1,2]', "invalid JSON"),
])
def test_cli_rejects_bad_requests_with_cause(bad, needle):
    out = subprocess.run([CLI, "eplb"], input=bad, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert needle in out.stderr
    assert out.stdout == ""

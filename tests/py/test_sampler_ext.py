"""The general sampler chain (src/sample/chain.c) against a numpy reference.

numpy recomputes, from llama.cpp's definitions (llama-sampling.cpp) and
independently of the C code: logit bias, the penalties, DRY (by direct
suffix comparison), top-n-sigma, top-k, typical-p, top-p, min-p, XTC,
temperature in any order, min_keep, and mirostat v1/v2 with its running
mu. It compares the probabilities the sampler draws from (the kept set
and each token's probability, tests/tool_sampler.c `ext`), not one draw,
and replays mirostat's state over a run of draws.

The C code sums weights in 2^-63 fixed point; numpy in float64. Cases are
random normal logits, where a probability within 1e-9 of a threshold has
negligible chance; the comparison tolerance is 1e-9 absolute.
"""
import os
import subprocess
import tempfile

import numpy as np
import pytest

ROOT = os.environ.get("ANVIL_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TOOL = os.path.join(ROOT, "build", "release", "tests", "tool_sampler")

PEN, DRY, SIGMA, TOPK, TYP, TOPP, MINP, XTC, TEMP = range(1, 10)
DEFAULT_ORDER = [PEN, DRY, SIGMA, TOPK, TYP, TOPP, MINP, XTC, TEMP]
BASE = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0, repeat_last_n=64,
            presence_penalty=0.0, frequency_penalty=0.0, min_keep=0, typical_p=0.0, top_n_sigma=0.0,
            dry_multiplier=0.0, dry_base=1.75, dry_allowed_length=2, dry_last_n=4096,
            xtc_probability=0.0, xtc_threshold=0.1, mirostat=0, mirostat_tau=5.0, mirostat_eta=0.1,
            seed=1)


@pytest.fixture(scope="module")
def tool():
    if not os.path.exists(TOOL):
        pytest.skip("tool_sampler not built (make)")
    return TOOL


def fmt_case(c):
    p = dict(BASE)
    p.update(c.get("params", {}))
    kv = []
    for k, v in p.items():
        kv.append(f"{k}={v!r}" if not isinstance(v, float) else f"{k}={v:.9g}")
    if c.get("order"):
        kv.append("order=" + ",".join(str(x) for x in c["order"]))
    if c.get("bias"):
        kv.append("bias=" + ",".join(f"{i}:{b:.9g}" if np.isfinite(b) else f"{i}:-inf"
                                     for i, b in c["bias"]))
    if c.get("breakers"):
        kv.append("breakers=" + "|".join(",".join(str(t) for t in b) for b in c["breakers"]))
    lines = ["params " + " ".join(kv),
             "hist " + " ".join(str(t) for t in c.get("hist", [])),
             "logits " + " ".join(f"{x:.9g}" for x in c["logits"]),
             f"run {c.get('xtc_word', 0)} {c.get('draws', 0)}"]
    return "\n".join(lines) + "\n"


def run(tool, cases):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        for c in cases:
            f.write(fmt_case(c))
        path = f.name
    try:
        out = subprocess.run([tool, "ext", path], capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(path)
    lines = out.splitlines()
    assert len(lines) == 2 * len(cases), out[-2000:]
    res = []
    for i in range(len(cases)):
        k = lines[2 * i].split()
        assert k[0] == "K"
        n = int(k[1])
        kept = [(int(k[2 + 2 * j]), float(k[3 + 2 * j])) for j in range(n)]
        d = lines[2 * i + 1].split()[1:]
        draws = [(int(d[2 * j]), float(d[2 * j + 1])) for j in range(len(d) // 2)]
        res.append((kept, draws))
    return res


# ---------------------------------------------------------------------------
# the reference

def softmax(x):
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x.max())
    return e / e.sum()


def penalize(l, hist, p):
    if p["repeat_last_n"] == 0 or (p["repeat_penalty"] == 1.0 and p["presence_penalty"] == 0.0
                                   and p["frequency_penalty"] == 0.0):
        return l
    f32 = np.float32
    out = l.copy()
    win = hist[-p["repeat_last_n"]:] if hist else []
    ids, cnt = np.unique(np.asarray(win, dtype=np.int64), return_counts=True)
    for t, c in zip(ids, cnt):
        v = out[t]
        v = v * f32(p["repeat_penalty"]) if v <= 0 else v / f32(p["repeat_penalty"])
        out[t] = f32(v - (f32(c) * f32(p["frequency_penalty"]) + f32(p["presence_penalty"])))
    return out


def dry(l, hist, p, breakers):
    if not (p["dry_multiplier"] > 0 and p["dry_base"] >= 1 and p["dry_last_n"] > 0):
        return l
    a = list(hist[-p["dry_last_n"]:])
    n = len(a)
    if n < 2:
        return l
    lim = n
    for e in range(n - 1, -1, -1):
        if any(len(b) <= e + 1 and a[e - len(b) + 1:e + 1] == list(b) for b in breakers):
            lim = n - 1 - e
            break
    allowed = p["dry_allowed_length"]
    if lim <= allowed:
        return l
    best = {}
    for j in range(n - 1):
        length = 0
        while length <= j and length < lim and a[j - length] == a[n - 1 - length]:
            length += 1
        if length >= allowed:
            best[a[j + 1]] = max(best.get(a[j + 1], -1), length)
    out = l.copy()
    singles = {b[0] for b in breakers if len(b) == 1}
    for t, length in best.items():
        if t in singles:
            continue
        e = length - allowed
        if p["dry_base"] > 1.000001:
            e = min(e, int(np.float32(88.7228391) / np.log(np.float32(p["dry_base"]))))
        out[t] = np.float32(out[t] - np.float32(p["dry_multiplier"]) * np.float32(p["dry_base"]) ** e)
    return out


def reference(c, mu=None):
    """The kept set [(id, prob)] in candidate order (logit desc, id asc)."""
    p = dict(BASE)
    p.update(c.get("params", {}))
    l = np.asarray(c["logits"], dtype=np.float32).copy()
    hist = list(c.get("hist", []))
    for i, b in c.get("bias", []):
        l[i] = np.float32(l[i] + np.float32(b))
    order = list(c.get("order") or DEFAULT_ORDER)
    if p["mirostat"]:
        order = [TEMP]
    else:
        pen_at = order.index(PEN) if PEN in order else None
        dry_at = order.index(DRY) if DRY in order else None
        steps = sorted([(x, k) for x, k in ((pen_at, "pen"), (dry_at, "dry")) if x is not None])
        for _, k in steps:
            l = penalize(l, hist, p) if k == "pen" else dry(l, hist, p, c.get("breakers", []))
    ids = [i for i in range(len(l)) if not np.isnan(l[i]) and l[i] != -np.inf]
    ids.sort(key=lambda i: (-float(l[i]), i))
    S = np.array(ids, dtype=np.int64)
    tc = 1.0
    mk = p["min_keep"]

    def q(S):
        return softmax(l[S].astype(np.float64) / tc)

    for st in order:
        if len(S) == 0:
            break
        if st == SIGMA and p["top_n_sigma"] > 0 and len(S) > 1:
            v = l[S].astype(np.float64) / tc
            thr = v.max() - p["top_n_sigma"] * v.std()
            S = S[v >= thr]
        elif st == TOPK and 0 < p["top_k"] < len(S):
            S = S[:p["top_k"]]
        elif st == TYP and 0 < p["typical_p"] < 1:
            pr = q(S)
            h = -np.sum(pr[pr > 0] * np.log(pr[pr > 0]))
            score = np.where(pr > 0, np.abs(-np.log(np.where(pr > 0, pr, 1)) - h), np.inf)
            idx = sorted(range(len(S)), key=lambda i: (score[i], i))
            cum, keep = 0.0, len(S)
            for j, i in enumerate(idx):
                cum += pr[i]
                if cum > p["typical_p"] and j + 1 >= mk:
                    keep = j + 1
                    break
            chosen = set(idx[:keep])
            S = np.array([S[i] for i in range(len(S)) if i in chosen], dtype=np.int64)
        elif st == TOPP and p["top_p"] < 1:
            cum = np.cumsum(q(S))
            keep = int(np.argmax(cum >= p["top_p"] - 1e-15)) + 1 if cum[-1] >= p["top_p"] - 1e-15 else len(S)
            keep = max(keep, min(mk, len(S)))
            S = S[:keep]
        elif st == MINP and p["min_p"] > 0:
            x = (l[S].astype(np.float64) - float(l[S[0]])) / tc
            keep = int(np.sum(x >= np.log(np.float64(np.float32(p["min_p"])))))
            keep = max(keep, min(mk, len(S)))
            S = S[:keep]
        elif st == XTC and p["xtc_probability"] > 0 and p["xtc_threshold"] <= 0.5 and len(S) >= 2:
            u = (c.get("xtc_word", 0) >> 11) * 2.0 ** -53
            if u < np.float32(p["xtc_probability"]):
                pr = q(S)
                last = 0
                for i in range(len(S)):
                    if pr[i] >= np.float32(p["xtc_threshold"]):
                        last = i
                    else:
                        break
                if last > 0 and len(S) - last >= mk:
                    S = S[last:]
        elif st == TEMP:
            tc *= float(np.float32(p["temperature"]))
    if p["mirostat"]:
        m = 2 * p["mirostat_tau"] if mu is None else mu
        pr = q(S)
        if p["mirostat"] == 1:
            tb = tt = 0.0
            for i in range(min(99, len(S) - 1)):
                t = np.log((i + 2) / (i + 1))
                tb += t * np.log(pr[i] / pr[i + 1])
                tt += t * t
            sh = tb / tt if tt else np.nan
            eps = sh - 1
            with np.errstate(all="ignore"):
                k = (eps * 2.0 ** m / (1 - float(len(c["logits"])) ** -eps)) ** (1 / sh)
            keep = 1 if not k >= 1 else min(int(k), len(S))
        else:
            keep = max(1, int(np.sum(np.cumprod(-np.log2(pr) <= m))))
        S = S[:keep]
    pr = q(S)
    return [(int(i), float(v)) for i, v in zip(S, pr)]


def check(got, want, tol=1e-9):
    assert [i for i, _ in got] == [i for i, _ in want], (got[:8], want[:8])
    for (_, a), (_, b) in zip(got, want):
        assert abs(a - b) <= tol, (a, b)


def rand_logits(rng, n, scale=3.0):
    return list((scale * rng.standard_normal(n)).astype(np.float32))


# ---------------------------------------------------------------------------
# tests

def test_logit_bias(tool):
    rng = np.random.default_rng(1)
    cases = []
    for _ in range(20):
        n = int(rng.integers(5, 200))
        bias = [(int(i), float(rng.uniform(-100, 100)) if rng.random() < 0.7 else -np.inf)
                for i in rng.choice(n, size=min(n, 6), replace=False)]
        cases.append(dict(logits=rand_logits(rng, n), bias=bias,
                          params=dict(temperature=float(rng.choice([0.5, 1.0, 1.5])))))
    for c, (kept, _) in zip(cases, run(tool, cases)):
        check(kept, reference(c))
        banned = {i for i, b in c["bias"] if b == -np.inf}
        assert not banned & {i for i, _ in kept}


def test_typical_top_n_sigma_min_keep(tool):
    rng = np.random.default_rng(2)
    cases = []
    for _ in range(60):
        n = int(rng.integers(2, 400))
        cases.append(dict(logits=rand_logits(rng, n, float(rng.choice([0.5, 3.0, 8.0]))), params=dict(
            typical_p=float(rng.choice([0.0, 0.2, 0.5, 0.9])),
            top_n_sigma=float(rng.choice([0.0, 0.5, 1.0, 2.5])),
            min_keep=int(rng.integers(0, 5)),
            top_p=float(rng.choice([1.0, 0.7, 0.95])),
            min_p=float(rng.choice([0.0, 0.05, 0.3])),
            top_k=int(rng.choice([0, 3, 40])),
            temperature=float(rng.choice([0.7, 1.0, 1.3])))))
    for c, (kept, _) in zip(cases, run(tool, cases)):
        check(kept, reference(c))


def test_typical_changes_the_set(tool):
    """A test that can fail: typical_p really drops the most likely token
    when it is far more likely than typical (high surprise gap)."""
    l = [8.0] + [0.0] * 50
    c = dict(logits=l, params=dict(typical_p=0.5))
    kept, _ = run(tool, [c])[0]
    want = reference(c)
    check(kept, want)
    assert 0 in {i for i, _ in want}  # the peak is the typical token here
    c2 = dict(logits=[2.0, 1.9, 1.8] + [-1.0] * 40, params=dict(typical_p=0.3))
    check(run(tool, [c2])[0][0], reference(c2))


def test_xtc(tool):
    rng = np.random.default_rng(3)
    cases = []
    for _ in range(40):
        n = int(rng.integers(2, 100))
        cases.append(dict(logits=rand_logits(rng, n, 1.5), xtc_word=int(rng.integers(0, 2 ** 63)) * 2,
                          params=dict(xtc_probability=float(rng.choice([0.3, 0.7, 1.0])),
                                      xtc_threshold=float(rng.choice([0.01, 0.05, 0.1, 0.3])),
                                      min_keep=int(rng.integers(0, 3)))))
    res = run(tool, cases)
    cut = 0
    for c, (kept, _) in zip(cases, res):
        want = reference(c)
        check(kept, want)
        cut += len(want) < len(c["logits"])
    assert cut > 5  # XTC did remove tokens in many cases


def test_dry(tool):
    rng = np.random.default_rng(4)
    cases = []
    for _ in range(40):
        n = int(rng.integers(8, 60))
        motif = list(rng.integers(0, n, size=int(rng.integers(2, 6))))
        hist = (motif * 6)[: int(rng.integers(5, 30))] + list(rng.integers(0, n, size=3)) + motif[:3]
        breakers = [[int(rng.integers(0, n))] for _ in range(int(rng.integers(0, 2)))]
        if rng.random() < 0.3:
            breakers.append([int(x) for x in rng.integers(0, n, size=2)])
        cases.append(dict(logits=rand_logits(rng, n, 1.0), hist=[int(x) for x in hist],
                          breakers=breakers,
                          params=dict(dry_multiplier=float(rng.choice([0.3, 0.8, 2.0])),
                                      dry_base=float(rng.choice([1.0, 1.75, 3.0])),
                                      dry_allowed_length=int(rng.integers(0, 4)),
                                      dry_last_n=int(rng.choice([4, 16, 64])),
                                      repeat_penalty=float(rng.choice([1.0, 1.2])))))
    moved = 0
    for c, (kept, _) in zip(cases, run(tool, cases)):
        want = reference(c)
        check(kept, want)
        plain = dict(c, params=dict(c["params"], dry_multiplier=0.0, repeat_penalty=1.0))
        moved += reference(plain) != want
    assert moved > 10


def test_order(tool):
    """Temperature before the filters changes what top-p and min-p see."""
    rng = np.random.default_rng(5)
    cases = []
    for _ in range(40):
        n = int(rng.integers(5, 200))
        order = [int(x) for x in rng.choice([SIGMA, TOPK, TYP, TOPP, MINP, XTC, TEMP],
                                            size=int(rng.integers(1, 8)))]
        cases.append(dict(logits=rand_logits(rng, n), order=order, xtc_word=int(rng.integers(0, 2 ** 62)),
                          params=dict(temperature=float(rng.choice([0.5, 2.0])),
                                      top_p=0.8, min_p=0.05, top_k=20, typical_p=0.9,
                                      xtc_probability=0.5, top_n_sigma=2.0)))
    for c, (kept, _) in zip(cases, run(tool, cases)):
        check(kept, reference(c))
    a = dict(logits=rand_logits(rng, 100), params=dict(temperature=3.0, top_p=0.5), order=[TOPP, TEMP])
    b = dict(a, order=[TEMP, TOPP])
    ka, kb = (k for k, _ in run(tool, [a, b]))
    assert len(ka) != len(kb)
    check(ka, reference(a))
    check(kb, reference(b))


@pytest.mark.parametrize("version", [1, 2])
def test_mirostat(tool, version):
    rng = np.random.default_rng(6 + version)
    n = 300
    c = dict(logits=rand_logits(rng, n), draws=40,
             params=dict(mirostat=version, mirostat_tau=3.0, mirostat_eta=0.2, seed=99))
    (kept, draws), (kept2, draws2) = run(tool, [c, c])
    assert draws == draws2  # same seed, same draws and states
    check(kept, reference(c))
    mu = 2 * 3.0
    for tok, mu_after in draws:
        want = dict(reference(c, mu))
        assert tok in want
        mu = np.float32(mu - np.float32(0.2) * (np.float32(-np.log2(want[tok])) - np.float32(3.0)))
        assert abs(mu_after - mu) < 1e-4, (mu_after, mu)
        mu = mu_after
    assert len({m for _, m in draws}) > 5


def test_seeded_xtc_determinism(tool):
    rng = np.random.default_rng(8)
    c = dict(logits=rand_logits(rng, 50, 1.0), draws=64,
             params=dict(xtc_probability=0.5, xtc_threshold=0.05, seed=5))
    d1 = run(tool, [c])[0][1]
    d2 = run(tool, [c])[0][1]
    d3 = run(tool, [dict(c, params=dict(c["params"], seed=6))])[0][1]
    assert d1 == d2
    assert d1 != d3

"""HP1 gated attention end to end: tiny random-weight GGUF
files with HP1 layers, written by tests/gen/tiny_arch.py ("hp1": llama, every
layer HP1, one kv head, taps (1, -a, -a) with the ReLU, about 70% of the
p exactly zero; "hp1mix": qwen2 with layers hp1, softmax, hp1, five random
taps, no ReLU, lo < 0, almost no zeros). llama.cpp cannot run HP1: the
independent float64 numpy forward pass of tiny_arch.py is the oracle.

- anvil's logits match numpy at every position of a 520-token sequence
  (three 256-key chunks: the FIR history crosses chunk edges) for every
  kernel family the CPU runs, F32 and Q8_0 weights; the oracle has power
  (softmax in place of HP1 on the same weights is far off) and the sparse
  and dense PV paths are both reached (zero shares);
- the prompt in chunks (1, 7, 300 rows) on 1 and 2 threads gives the same
  bits as one batch: prefill tiles == decode rows == split-K decode (at
  2 threads the policy splits the long decode rows of the one-kv-head
  model: unit_attn_hp1's test_driver_policy_splits holds it to that);
- several sequences batched give each its own greedy continuation;
- the serving engine (tests/tool_engine.c): batched == serial for greedy
  and sampled requests, under preemption, and with prefix caching (the
  stats show reused positions);
- `anvil serve` on the mixed model: concurrent greedy completions equal
  the one-by-one ones and the engine's;
- bad HP1 metadata: exit status 2 and a message naming the key; float64
  taps and the documented defaults load;
- bench/hp1_model.py convert (the serving benchmarks' HP1 model): tensors
  and metadata copied exactly, a valid HP1 configuration added, the zero
  share it was asked for reached.

Tolerances as tests/py/test_archs.py: 1e-3 of the logit range with F32
weights, 4e-2 with Q8_0 (activations quantized per block of 32).
"""
import json
import os
import random
import sys

import numpy as np
import pytest

from conftest import ROOT, build_path, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402

# model-level numerics: .ci/run runs them again with each kernel family forced
pytestmark = pytest.mark.kernels

NAMES = ["hp1", "hp1mix"]
TOKS = [int(x) for x in np.random.default_rng(12).integers(0, 256, 520)]
TOL = {"F32": 1e-3, "Q8_0": 4e-2}
N_CTX = 1024


def kernel_families():
    fams = ["ref"]
    flags = open("/proc/cpuinfo").read()
    if " avx2 " in flags and " fma " in flags:
        fams.append("avx2")
    if all(f" {f} " in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni")):
        fams.append("avx512")
    return fams


def anvil_rows(path, toks, kernels=None, chunk=0, threads=1):
    args = [build_path("release", "tool_logits"), path, "-a", "-t", str(threads), "-c", str(N_CTX)]
    if kernels:
        args += ["-k", kernels]
    if chunk:
        args += ["-s", str(chunk)]
    p = run(args, input=" ".join(map(str, toks)) + "\n", text=True)
    assert p.returncode == 0, p.stderr
    return np.array(json.loads(p.stdout.splitlines()[0])["all"])


def rel_err(got, ref):
    rng = ref.max(axis=1) - ref.min(axis=1)
    return np.abs(got - ref).max(axis=1) / rng


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hp1")
    out = {}
    for name in NAMES:
        for wt in TOL:
            path = str(d / f"{name}-{wt}.gguf")
            out[name, wt] = (path, tiny_arch.make_gguf(path, name, wt, seed=7, n_ctx=N_CTX))
    return out


@pytest.mark.parametrize("wtype", list(TOL))
@pytest.mark.parametrize("name", NAMES)
def test_hp1_vs_numpy(files, name, wtype):
    path, w = files[name, wtype]
    ref = tiny_arch.forward(name, w, TOKS)
    for fam in kernel_families():
        err = rel_err(anvil_rows(path, TOKS, fam), ref)
        assert err.max() <= TOL[wtype], f"{name} {wtype} {fam}: worst row {err.argmax()} {err.max():.2e}"


@pytest.mark.parametrize("name", NAMES)
def test_oracle_has_power(files, name):
    """The comparison above can fail: the same weights with the softmax in
    place of HP1 are far outside the tolerance; and the two models reach
    the two PV paths (mostly zero p: the sparse walk; almost none: dense)."""
    _, w = files[name, "F32"]
    st = {}
    hp1 = tiny_arch.forward(name, w, TOKS, stats=st)
    soft = tiny_arch.forward(name, w, TOKS, cfg={"attn": None})
    assert rel_err(soft, hp1).max() > 50 * TOL["F32"]
    zero = st["hp1_zero"] / st["hp1_gate"]
    if name == "hp1":
        assert 0.55 <= zero <= 0.85, zero
    else:
        assert zero < 0.05, zero


@pytest.mark.parametrize("name", NAMES)
def test_hp1_prefill_equals_decode(files, name):
    path, _ = files[name, "Q8_0"]
    for fam in kernel_families():
        whole = anvil_rows(path, TOKS, fam)
        for chunk, threads in ((1, 2), (7, 2), (300, 1), (1, 1)):
            part = anvil_rows(path, TOKS, fam, chunk=chunk, threads=threads)
            assert np.array_equal(whole, part), f"{name} {fam}: chunks of {chunk} on {threads} threads"


@pytest.mark.parametrize("name", NAMES)
def test_hp1_batch_invariance(files, name):
    path, _ = files[name, "F32"]
    prompts = [TOKS[:40], TOKS[10:400], TOKS[:7], TOKS[100:370]]
    inp = "".join(" ".join(map(str, t)) + "\n" for t in prompts)
    tool = build_path("release", "tool_logits")
    one = run([tool, path, "-g", "24", "-t", "2"], input=inp, text=True)
    many = run([tool, path, "-g", "24", "-b", "-t", "2"], input=inp, text=True)
    assert one.returncode == 0 and many.returncode == 0, one.stderr + many.stderr
    a = [json.loads(l) for l in one.stdout.splitlines()]
    b = [json.loads(l) for l in many.stdout.splitlines()]
    assert len(a) == len(prompts) == len(b)
    for x, y in zip(a, b):
        assert x["gen"] == y["gen"]
        assert x["logits"] == y["logits"]


# ---------------------------------------------------------------------------
# the serving engine


def engine(path, lines, *args):
    p = run([build_path("release", "tool_engine"), path, "-x", str(N_CTX), *args],
            input="".join(lines), text=True)
    assert p.returncode == 0, p.stderr
    outs = []
    for l in p.stdout.splitlines():
        head, _, _ = l.partition("|")
        f = head.split()
        outs.append((int(f[0]), int(f[1]), list(map(int, f[2:]))))
    stats = {k: int(v) for k, v in (kv.split("=") for kv in p.stderr.split())}
    return outs, stats


def requests(n, seed, greedy=False, shared=None):
    """n requests over the tiny vocabulary; with shared, every prompt
    starts with that prefix."""
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        plen = rng.choice([1, 5, 17, 40, 130, 300])
        ids = (shared or []) + [rng.randrange(0, 256) for _ in range(plen)]
        temp = 0.0 if greedy or i % 2 else 0.9
        lines.append(f"{rng.choice([1, 6, 20, 40])} {temp} {500 + i} - " + " ".join(map(str, ids)) + "\n")
    return lines


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cfg", [
    ("-r", "4", "-s", "64", "-c", "16"),     # few slots, small chunks
    ("-r", "16", "-s", "512", "-c", "256"),  # everything at once
    ("-r", "3", "-s", "7", "-c", "5"),       # budget below the decode rows
])
def test_hp1_engine_batched_equals_serial(files, name, cfg):
    path, _ = files[name, "F32"]
    lines = requests(14, seed=3)
    serial, _ = engine(path, lines, "--serial", "-r", "1")
    batched, st = engine(path, lines, *cfg)
    assert serial == batched
    assert all(o[0] in (1, 2) for o in batched)  # LENGTH or STOP (EOS)
    assert sum(o[1] for o in batched) >= 100
    assert st["kv_used"] == 0


@pytest.mark.parametrize("name", NAMES)
def test_hp1_engine_preemption_and_prefix_cache(files, name):
    """A KV pool far below the load forces preemptions; every prompt shares
    a 64-token prefix and comes twice, so admissions reuse cached blocks.
    Outputs equal the serial run (which also reuses, one at a time, so the
    fresh-engine run of each request is the reference)."""
    path, _ = files[name, "F32"]
    shared = [random.Random(9).randrange(0, 256) for _ in range(64)]
    lines = requests(8, seed=4, greedy=True, shared=shared)
    lines = lines + lines
    alone = [engine(path, [l])[0][0] for l in lines[:8]]
    c = tiny_arch.cfg_of(name)
    block = c["n_layer"] * c["n_head_kv"] * 2 * 16 * c["head_dim"] * 2  # F16 K and V, 16 positions
    got, st = engine(path, lines, "-r", "8", "--kv-mem", str(40 * block))
    assert got == alone + alone
    assert st["preemptions"] > 0, st
    assert st["prefix_tokens"] > 0, st
    assert st["kv_used"] == 0


# ---------------------------------------------------------------------------
# bad input: exit status 2 and a message naming the key

NAN, INF = float("nan"), float("inf")
TAPS = 2 * 4 * 3  # hp1: n_layer x n_head x K

BAD = {
    "unknown_kind": ("hp1", {"attention.kind": "hp2"}, {}, "llama.attention.kind"),
    "kind_type": ("hp1", {"attention.kind": 1}, {}, "llama.attention.kind"),
    "kind_per_layer_count": ("hp1", {"attention.kind": ["hp1"]}, {}, "llama.attention.kind"),
    "kind_per_layer_unknown": ("hp1mix", {"attention.kind": ["hp1", "linear", "hp1"]}, {},
                               "qwen2.attention.kind[1]"),
    "taps_count": ("hp1", {"attention.hp1.taps": [0.5] * (TAPS - 1)}, {}, "llama.attention.hp1.taps"),
    "taps_shape": ("hp1", {"attention.hp1.fir_k": 4}, {}, "llama.attention.hp1.taps"),
    "taps_type": ("hp1", {"attention.hp1.taps": [1] * TAPS}, {}, "llama.attention.hp1.taps"),
    "taps_missing": ("hp1", {"attention.hp1.taps": None}, {}, "llama.attention.hp1.taps"),
    "taps_nan": ("hp1", {"attention.hp1.taps": [0.5] * 5 + [NAN] + [0.5] * (TAPS - 6)}, {},
                 "llama.attention.hp1.taps[5]"),
    "taps_inf": ("hp1", {"attention.hp1.taps": [0.5] * (TAPS - 1) + [-INF]}, {},
                 "llama.attention.hp1.taps[23]"),
    "gamma_nan": ("hp1", {"attention.hp1.gamma": NAN}, {}, "llama.attention.hp1.gamma"),
    "gamma_inf": ("hp1", {"attention.hp1.gamma": INF}, {}, "llama.attention.hp1.gamma"),
    "gamma_type": ("hp1", {"attention.hp1.gamma": "big"}, {}, "llama.attention.hp1.gamma"),
    "lo_above_hi": ("hp1", {"attention.hp1.lo": 0.75, "attention.hp1.hi": 0.25}, {},
                    "llama.attention.hp1.lo"),
    "lo_nan": ("hp1", {"attention.hp1.lo": NAN}, {}, "llama.attention.hp1.lo"),
    "hi_inf": ("hp1", {"attention.hp1.hi": INF}, {}, "llama.attention.hp1.hi"),
    "k_zero": ("hp1", {"attention.hp1.fir_k": 0}, {}, "llama.attention.hp1.fir_k"),
    "k_too_big": ("hp1", {"attention.hp1.fir_k": 9}, {}, "llama.attention.hp1.fir_k"),
    "k_missing": ("hp1", {"attention.hp1.fir_k": None}, {}, "llama.attention.hp1.fir_k"),
    "k_negative": ("hp1", {"attention.hp1.fir_k": ("i32", -3)}, {}, "llama.attention.hp1.fir_k"),
    "relu_type": ("hp1", {"attention.hp1.relu": "yes"}, {}, "llama.attention.hp1.relu"),
    "with_window": ("hp1", {}, {"llama.attention.sliding_window": 16}, "sliding-window"),
    "hp1_keys_without_kind": ("llama3", {"attention.hp1.fir_k": 3}, {}, "llama.attention.hp1.fir_k"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_hp1_bad_metadata(tmp_path, anvil_bins, case):
    name, meta, u32, want = BAD[case]
    path = str(tmp_path / f"{case}.gguf")
    tiny_arch.make_gguf(path, name, meta=meta, extra_u32=u32)
    for b in anvil_bins:
        p = run([b, "run", "-m", path, "-p", "hi", "-n", "1"], text=True)
        assert p.returncode == 2, (b, p.returncode, p.stderr)
        assert want in p.stderr, (case, p.stderr)
        assert "AddressSanitizer" not in p.stderr and "runtime error" not in p.stderr


def test_hp1_float64_taps_and_defaults(tmp_path, files):
    """Taps stored as float64 load (converted once), and gamma, lo, hi and
    relu left out take the documented defaults (1, 0, 1, true): the logits
    equal those of a file that writes them."""
    a, b = str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")
    c = tiny_arch.cfg_of("hp1")
    taps = tiny_arch.hp1_taps(c, 7)
    tiny_arch.make_gguf(a, "hp1", seed=7, meta={"attention.hp1.taps": ("f64s", [float(x) for x in taps.ravel()]),
                                                 "attention.hp1.gamma": 1.0, "attention.hp1.lo": 0.0,
                                                 "attention.hp1.hi": 1.0, "attention.hp1.relu": True})
    tiny_arch.make_gguf(b, "hp1", seed=7, meta={"attention.hp1.gamma": None, "attention.hp1.lo": None,
                                                 "attention.hp1.hi": None, "attention.hp1.relu": None})
    ra, rb = anvil_rows(a, TOKS[:60]), anvil_rows(b, TOKS[:60])
    assert np.array_equal(ra, rb)
    # and gamma matters: the file's own gamma (0.05) gives other logits
    rc = anvil_rows(files["hp1", "F32"][0], TOKS[:60])
    assert not np.array_equal(ra, rc)


# ---------------------------------------------------------------------------
# the HTTP server


def test_hp1_server(files, anvil_bin):
    """`anvil serve` on the mixed HP1 model: greedy completions sent all at
    once give the texts they give one by one, which are the engine's
    (tool_engine) for the same token ids; a clean stop."""
    import concurrent.futures as cf
    import http.client
    import re
    import subprocess
    import threading

    path, _ = files["hp1mix", "F32"]
    p = subprocess.Popen([anvil_bin, "serve", "-m", path, "--port", "0", "-t", "2", "--ctx", "512",
                          "--parallel", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = [b""]
    t = threading.Thread(target=lambda: line.__setitem__(0, p.stdout.readline()), daemon=True)
    t.start()
    t.join(120)
    m = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", line[0])
    if not m:
        p.kill()
        pytest.fail(f"server did not start: {line[0]!r} {p.stderr.read()!r}")
    port = int(m.group(1))
    rng = random.Random(21)
    prompts = [[rng.randrange(0, 256) for _ in range(rng.choice([3, 30, 200]))] for _ in range(8)]

    def complete(ids):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": ids, "max_tokens": 12, "temperature": 0, "ignore_eos": True}),
            headers={"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        assert r.status == 200, body
        return body["choices"][0]["text"], body["usage"]["completion_tokens"]

    try:
        one = [complete(ids) for ids in prompts]
        with cf.ThreadPoolExecutor(8) as ex:
            many = list(ex.map(complete, prompts))
    finally:
        p.terminate()
        rc = p.wait(60)
    assert rc == 0, p.stderr.read()
    assert one == many
    assert all(n == 12 for _, n in one)
    lines = [f"12 0 1 - {' '.join(map(str, ids))}\n" for ids in prompts]
    pe = run([build_path("release", "tool_engine"), path, "-x", "512"], input="".join(lines), text=True)
    assert pe.returncode == 0, pe.stderr
    texts = [bytes.fromhex(l.partition("|")[2].strip()).decode("utf-8", "replace")
             for l in pe.stdout.splitlines()]
    # tool_engine stops at EOS; the server ignored it: compare the common part
    for (a, _), b in zip(one, texts):
        assert a.startswith(b), (a, b)
    assert sum(len(b) >= 4 for b in texts) >= 4, texts


# ---------------------------------------------------------------------------
# bench/hp1_model.py convert: the serving benchmarks' HP1 model


def test_convert_script(tmp_path, anvil_bin):
    """The converter copies every tensor byte for byte and every metadata
    value, adds a valid HP1 configuration that anvil loads and runs, and
    reaches about the zero share it was asked for (on its calibration text,
    by its own numpy forward pass)."""
    import gguf
    src, out = str(tmp_path / "src.gguf"), str(tmp_path / "hp1.gguf")
    tiny_arch.make_gguf(src, "llama3", "Q8_0", seed=2, cfg={"rope_freqs": False})
    p = run([sys.executable, os.path.join(ROOT, "bench", "hp1_model.py"), "convert", "--model", src,
             "--out", out, "--zeros", "0.6"], text=True)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.splitlines()[-1])
    assert abs(res["zeros_reached"] - 0.6) <= 0.1, res
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(out)
    ta, tb = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
    assert ta.keys() == tb.keys()
    for name, t in ta.items():
        assert t.tensor_type == tb[name].tensor_type and bytes(t.data) == bytes(tb[name].data), name
    for name, f in a.fields.items():
        if not name.startswith("GGUF."):
            assert b.fields[name].contents() == f.contents(), name
    assert b.fields["llama.attention.kind"].contents() == "hp1"
    c = tiny_arch.cfg_of("llama3")
    assert len(b.fields["llama.attention.hp1.taps"].contents()) == c["n_layer"] * c["n_head"] * 3
    r = run([anvil_bin, "run", "-m", out, "-p", "hello", "-n", "4"], text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("name", NAMES)
def test_hp1_engine_speculation(files, name):
    """Speculative decoding (prompt lookup) verifies proposals as multi-row
    batches and drops the KV of rejected rows: greedy outputs equal plain
    decoding's on HP1 models too."""
    path, _ = files[name, "F32"]
    lines = requests(8, seed=5, greedy=True)
    plain, _ = engine(path, lines, "-r", "8")
    spec, st = engine(path, lines, "-r", "8", "--spec", "ngram")
    assert spec == plain
    assert st["spec_verify"] > 0 and st["spec_accepted"] > 0, st
    assert st["kv_used"] == 0

"""The benchmark charts: bench/plot.py draws what the records say (the
bars, lines and reference lines are read back from the matplotlib figure
and compared with numbers computed here from the same records), rejects
bad input with one line naming the file, and `--png` (of `anvil bench`
and `anvil-microbench`) finds a Python with matplotlib (or fails before
the run with a message that says how to get one) and runs the copy of
plot.py compiled into the binary, or $ANVIL_PLOT. Never asserts on speed."""
import importlib.util
import json
import os
import stat
import subprocess
import sys

import pytest

from conftest import ROOT, assert_chart, run

PLOT = os.path.join(ROOT, "bench", "plot.py")


@pytest.fixture(scope="module")
def plot():
    spec = importlib.util.spec_from_file_location("anvil_plot", PLOT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def plt(plot):
    p = plot.setup()
    assert p is not None, "matplotlib must be installed in the test venv"
    return p


def write_lines(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return str(path)


def tagged(recs):
    return [dict(r, _where="test") for r in recs]


# ---------------------------------------------------------------------------
# kernels

ROW = {"Q4_1": 20 / 32, "Q8_0": 34 / 32, "F16": 2.0}  # bytes per weight


def kernel_records():
    recs = [{"bench": "membw", "threads": 1, "gbps": 11.0, "gbps_sd": 0.1},
            {"bench": "membw", "threads": 2, "gbps": 19.5, "gbps_sd": 0.2}]
    us = 10.0
    for v in ("ref", "avx2"):
        for t in ("Q4_1", "Q8_0", "F16"):
            for shape, n, rows in (("qo", 576, 576), ("down", 1536, 576)):
                for m in (1, 4, 64):
                    if v == "ref" and m > 4:
                        continue
                    us += 3.0  # every case its own time
                    recs.append({"bench": "matmul", "variant": v, "type": t, "shape": shape,
                                 "n": n, "rows": rows, "m": m, "threads": 2, "weights": "cold",
                                 "clock": "wall", "us": us, "gflops": 2 * m * n * rows / us / 1e3,
                                 "gbps": n * rows * ROW[t] / us / 1e3, "commit": "abc",
                                 "cpu": "avx2"})
    return recs


def test_kernels_chart(plot, plt):
    recs = kernel_records()
    fig = plot.plot_kernels(plt, tagged(recs))
    dec, pre, scale = fig.axes[:3]
    mm = [r for r in recs if r["bench"] == "matmul"]

    def agg(v, t, m, what):
        rs = [r for r in mm if (r["variant"], r["type"], r["m"]) == (v, t, m)]
        assert len(rs) == 2
        work = sum(r["n"] * r["rows"] * ROW[t] if what == "gbps" else 2 * m * r["n"] * r["rows"]
                   for r in rs)
        return work / sum(r["us"] for r in rs) / 1e3

    # decode bars: GB/s at m = 1 for ref and avx2, per type, in record order
    got = [b.get_height() for b in dec.patches]
    want = [agg(v, t, 1, "gbps") for v in ("ref", "avx2") for t in ("Q4_1", "Q8_0", "F16")]
    assert got == pytest.approx(want, rel=1e-9)
    # prefill bars: m = 64, where only avx2 ran
    got = [b.get_height() for b in pre.patches]
    assert got == pytest.approx([agg("avx2", t, 64, "gflops") for t in ("Q4_1", "Q8_0", "F16")])
    # the bandwidth ceiling of the run's thread count (2), dashed
    hl = [l for l in dec.lines if list(l.get_xdata()) == [0, 1]]
    assert len(hl) == 1 and hl[0].get_ydata()[0] == 19.5 and hl[0].get_linestyle() == "--"
    # GFLOP/s against m, log x, one line per type for the best variant
    assert scale.get_xscale() == "log"
    assert [l.get_label() for l in scale.lines] == ["Q4_1", "Q8_0", "F16"]
    assert list(scale.lines[0].get_xdata()) == [1, 4, 64]
    assert list(scale.lines[1].get_ydata()) == pytest.approx(
        [agg("avx2", "Q8_0", m, "gflops") for m in (1, 4, 64)])
    assert scale.get_legend().get_title().get_text() == "avx2"


def test_kernels_png(tmp_path):
    data = write_lines(tmp_path / "k.json", kernel_records())
    out = tmp_path / "k.png"
    p = run([sys.executable, PLOT, "kernels", "--out", str(out), data], text=True)
    assert p.returncode == 0, p.stderr
    assert_chart(out)


# ---------------------------------------------------------------------------
# batched


def batched_own():
    return [{"bench": "batched", "engine": "anvil", "label": "anvil", "quant": "Q4_1",
             "model": "m", "threads": 2, "npp": 8, "ntg": 4, "npl": b,
             "s_pp_tok_s": 100.0 * b, "s_tg_tok_s": 30.0 * b} for b in (1, 2, 4)]


def test_batched_series(plot, plt, tmp_path):
    peers = [{"label": "peer", "quant": "Q4_1", "npl": b, "s_pp_tok_s": 50.0 * b,
              "s_tg_tok_s": 5.0 * b} for b in (4, 1, 2)]
    skipped = [{"label": "other quant", "quant": "Q8_0", "npl": 1, "s_pp_tok_s": 1,
                "s_tg_tok_s": 1},
               {"label": "anvil old", "engine": "anvil", "npl": 1, "s_pp_tok_s": 1,
                "s_tg_tok_s": 1},
               {"engine": "anvil", "quant": "Q8_0"}]  # skipped before its fields are checked
    cmp = write_lines(tmp_path / "peer.json", peers + skipped)
    rows = plot.peer_rows(cmp, "Q4_1")
    assert [r["label"] for r in rows] == ["peer"] * 3
    fig = plot.plot_batched(plt, tagged(batched_own()), rows, "Q4_1")
    pp, tg = fig.axes[:2]
    for ax, key, scale in ((pp, "s_pp_tok_s", 50.0), (tg, "s_tg_tok_s", 5.0)):
        assert ax.get_xscale() == "log" and ax.get_ylim()[0] == 0
        lines = {l.get_label(): l for l in ax.lines}
        assert sorted(lines) == ["anvil", "peer"]
        assert list(lines["anvil"].get_xdata()) == [1, 2, 4]
        assert list(lines["anvil"].get_ydata()) == [r[key] for r in batched_own()]
        assert list(lines["peer"].get_xdata()) == [1, 2, 4]  # sorted by B
        assert list(lines["peer"].get_ydata()) == [scale * b for b in (1, 2, 4)]


BAD_COMPARE = [
    ("{not json\n", ":1: not a JSON object"),
    ("[1, 2]\n", ":1: not a JSON object"),
    ('{"label": "x", "npl": 1}\n', ":1: needs label, npl, s_pp_tok_s and s_tg_tok_s"),
    ('\n{"label": "x", "npl": 1, "s_pp_tok_s": "fast", "s_tg_tok_s": 1}\n',
     ":2: needs label"),
]


@pytest.mark.parametrize("text,want", BAD_COMPARE, ids=range(len(BAD_COMPARE)))
def test_bad_compare(tmp_path, text, want):
    cmp = tmp_path / "peer.json"
    cmp.write_text(text)
    p = run([sys.executable, PLOT, "batched", "--check", "--quant", "Q4_1", "--compare",
             str(cmp)], text=True)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(cmp) + want in lines[0], p.stderr


def test_bad_data(tmp_path):
    out = str(tmp_path / "x.png")
    for args, want in ((["kernels", str(tmp_path / "missing.json")], "cannot open"),
                       (["scenarios", write_lines(tmp_path / "k.json", kernel_records())],
                        "no scenario records"),
                       (["kernels"], "needs --out FILE and at least one data file")):
        p = run([sys.executable, PLOT, "--out", out] + args, text=True)
        assert p.returncode == 2 and want in p.stderr, (args, p.stderr)
        assert not os.path.exists(out)
    p = run([sys.executable, PLOT, "kernels", "--check", "--out",
             str(tmp_path / "no" / "dir" / "x.png")], text=True)
    assert p.returncode == 2 and "not a writable directory" in p.stderr


# ---------------------------------------------------------------------------
# scenarios and attention


def test_scenarios_chart(plot, plt):
    rows, samples = [], []
    for i, name in enumerate(("decode_heavy_b32", "balanced_b32", "single_stream")):
        rows.append({"scenario": name, "model": "m", "threads": 2, "total_tok_s": 100.0 * (i + 1),
                     "prefill_tok_s": 30.0 * (i + 1), "decode_tok_s": 70.0 * (i + 1),
                     "ttft_p50_ms": 5.0, "ttft_p99_ms": 9.0, "itl_p50_ms": 1.0,
                     "itl_p99_ms": 2.0})
        if i < 2:  # the third keeps only its percentiles, as saved records do
            samples.append({"bench": "scenario_samples", "scenario": name,
                            "ttft_ms": [10.0 * (i + 1), 20.0, 40.0], "itl_ms": [1.0, 2.0, 4.0, 8.0]})
    fig = plot.plot_scenarios(plt, tagged(rows + samples))
    tput, ttft, itl = fig.axes[:3]
    # stacked bars: the prompt part, then the generated part starting where it ends
    pre, dec = tput.patches[:3], tput.patches[3:6]
    assert [b.get_width() for b in pre] == [30.0, 60.0, 90.0]
    assert [b.get_width() for b in dec] == [70.0, 140.0, 210.0]
    assert [b.get_x() for b in dec] == [30.0, 60.0, 90.0]
    for ax, key in ((ttft, "ttft_ms"), (itl, "itl_ms")):
        assert ax.get_xscale() == "log"
        lines = {l.get_label(): l for l in ax.lines if not l.get_label().startswith("_")}
        assert sorted(lines) == ["balanced_b32", "decode_heavy_b32", "single_stream (p50, p99)"]
        # an empirical CDF: reaches 1 at the largest sample, steps of 1/n
        s = sorted(samples[0][key])
        cdf = lines["decode_heavy_b32"]
        assert max(cdf.get_xdata()) == s[-1] and cdf.get_ydata()[-1] == 1.0
        assert list(cdf.get_ydata())[1:] == pytest.approx([(k + 1) / len(s) for k in range(len(s))])
        assert list(lines["single_stream (p50, p99)"].get_ydata()) == [0.5, 0.99]


def test_attention_chart(plot, plt):
    recs = [{"bench": "read_bw", "threads": 2, "gbs": 20.0}]
    for b in (1, 4):
        for c in (256, 1024):
            for split, us in (("off", 40.0), ("on", 20.0), ("auto", 20.0 if b == 1 else 40.0)):
                recs.append({"bench": "attention", "shape": "smollm2", "n_head": 9,
                             "n_head_kv": 3, "head_dim": 64, "batch": b, "ctx": c, "threads": 2,
                             "split": split, "split_used": split == "on" or (split == "auto" and b == 1),
                             "us": us * c / 256, "gbs": 5.0 * b, "kv_type": "f16"})
    fig = plot.plot_attention(plt, tagged(recs))
    bwax, spax = fig.axes[:2]
    lines = {l.get_label(): l for l in bwax.lines if l.get_label().startswith("batch")}
    assert list(lines["batch 4"].get_ydata()) == [20.0, 20.0]  # split auto's GB/s
    assert any(list(l.get_ydata()) == [20.0, 20.0] and l.get_linestyle() == "--"
               for l in bwax.lines)
    sp = {l.get_label(): l for l in spax.lines if l.get_label().startswith("batch")}
    assert list(sp["batch 1"].get_ydata()) == [2.0, 2.0]  # off / on


# ---------------------------------------------------------------------------
# `--png`: finding Python, matplotlib and the script


KERNEL_ARGS = ["--kernels", "--hot", "-r", "1", "--types", "Q8_0", "--shapes", "kv",
               "--m", "1", "--variants", "avx2", "--no-membw"]


def shim(path, body):
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def no_matplotlib_python(tmp_path):
    """A Python whose `import matplotlib` fails, as on a machine without it."""
    fake = tmp_path / "fake"
    (fake / "matplotlib").mkdir(parents=True)
    (fake / "matplotlib" / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    return shim(tmp_path / "python-nompl", f'PYTHONPATH={fake} exec "{sys.executable}" "$@"')


def test_missing_matplotlib(microbench_bin, tmp_path):
    env = dict(os.environ, ANVIL_PYTHON=no_matplotlib_python(tmp_path))
    png = tmp_path / "k.png"
    p = run([microbench_bin] + KERNEL_ARGS + ["--png", str(png)], text=True, env=env)
    assert p.returncode == 1, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs Python 3 with matplotlib" in lines[0], p.stderr
    assert "make deps" in lines[0] and "no matplotlib" in lines[0]
    assert p.stdout == "" and not png.exists()  # failed before the run, not after it
    env["ANVIL_PYTHON"] = str(tmp_path / "no-such-python")
    p = run([microbench_bin] + KERNEL_ARGS + ["--png", str(png)], text=True, env=env)
    assert p.returncode == 1 and "cannot run" in p.stderr, p.stderr


def test_python_search(microbench_bin, tmp_path):
    """Without ANVIL_PYTHON: the venv under $HOME first, then python3 on
    PATH, the first that imports matplotlib."""
    env = {k: v for k, v in os.environ.items() if k != "ANVIL_PYTHON"}
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "log"
    shim(bindir / "python3", f'echo python3 >> {log}; exec "{sys.executable}" "$@"')
    venv = tmp_path / "home" / ".cache" / "anvil" / "venv" / "bin"
    venv.mkdir(parents=True)
    env.update(HOME=str(tmp_path / "home"), PATH=f"{bindir}:{os.environ['PATH']}")
    png = tmp_path / "k.png"
    # a venv Python without matplotlib: passed over for python3
    nompl = no_matplotlib_python(tmp_path)
    shim(venv / "python", f'echo venv >> {log}; exec "{nompl}" "$@"')
    p = run([microbench_bin] + KERNEL_ARGS + ["--png", str(png)], text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert log.read_text().split() == ["venv", "python3", "python3"]  # check, check, draw
    assert_chart(png)
    # a venv Python with matplotlib: used for the check and the chart
    log.unlink()
    png.unlink()
    shim(venv / "python", f'echo venv >> {log}; exec "{sys.executable}" "$@"')
    p = run([microbench_bin] + KERNEL_ARGS + ["--png", str(png)], text=True, env=env)
    assert p.returncode == 0, p.stderr
    assert log.read_text().split() == ["venv", "venv"]
    assert_chart(png)


def test_png_needs_no_source_tree(microbench_bin, tmp_path):
    """A copy of the binary far from the source tree draws the same chart:
    plot.py is compiled in. Its temporary directory is gone afterwards."""
    exe = tmp_path / "elsewhere" / "bin" / "anvil-microbench"
    exe.parent.mkdir(parents=True)
    exe.write_bytes(open(microbench_bin, "rb").read())
    exe.chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    png = tmp_path / "k.png"
    p = run([str(exe)] + KERNEL_ARGS + ["--png", str(png)], text=True, cwd=str(tmp_path),
            env=dict(os.environ, TMPDIR=str(scratch)))
    assert p.returncode == 0, p.stderr
    assert_chart(png)
    assert list(scratch.iterdir()) == []


def test_anvil_plot_overrides_the_script(microbench_bin, tmp_path):
    """ANVIL_PLOT names the script to run instead (plot.py being changed);
    one that cannot be read fails before the run."""
    log = tmp_path / "argv"
    script = tmp_path / "myplot.py"
    script.write_text(f"import sys\nopen({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n")
    png = tmp_path / "k.png"
    p = run([microbench_bin] + KERNEL_ARGS + ["--png", str(png)], text=True,
            env=dict(os.environ, ANVIL_PLOT=str(script)))
    assert p.returncode == 0, p.stderr
    check, draw = log.read_text().splitlines()
    assert check.startswith("kernels --check") and draw.startswith("kernels --as")
    p = run([microbench_bin] + KERNEL_ARGS + ["--png", str(png)], text=True,
            env=dict(os.environ, ANVIL_PLOT=str(tmp_path / "missing.py")))
    assert p.returncode == 1 and "ANVIL_PLOT" in p.stderr and p.stdout == "", p.stderr


def test_micro_benchmarks_are_not_in_anvil(anvil_bin):
    for flag in ("--kernels", "--attention"):
        p = run([anvil_bin, "bench", flag], text=True)
        assert p.returncode == 2 and f"anvil-microbench {flag}" in p.stderr, p.stderr
    p = run(["nm", "-P", anvil_bin], text=True)
    assert p.returncode == 0
    defined = {l.split()[0] for l in p.stdout.splitlines() if len(l.split()) > 1 and l.split()[1] in "TtDdRr"}
    assert "main" in defined
    for sym in ("bench_kernels", "bench_attention", "bench_constrain"):
        assert sym not in defined, sym


def test_png_bad_directory(anvil_bin, microbench_bin, model_path, tmp_path):
    bad = str(tmp_path / "missing" / "x.png")
    for args in ([microbench_bin] + KERNEL_ARGS,
                 [anvil_bin, "bench", "-m", model_path, "--batched", "--npl", "1", "--npp", "4",
                  "--ntg", "2"],
                 [anvil_bin, "bench", "-m", model_path, "--scenario", "single_stream"]):
        p = run(args + ["--png", bad], text=True)
        assert p.returncode == 2, (args, p.stderr)
        assert "not a writable directory" in p.stderr and p.stdout == ""


def test_png_needs_a_chart_kind(anvil_bin, model_path, tmp_path):
    p = run([anvil_bin, "bench", "-m", model_path, "--png", str(tmp_path / "x.png")], text=True)
    assert p.returncode == 2 and "--png needs --scenario" in p.stderr


# ---------------------------------------------------------------------------
# end to end through anvil (small runs)


def test_scenario_png(anvil_bins, model_path, tmp_path):
    for b in anvil_bins:
        png = tmp_path / f"s-{os.path.basename(b)}.png"
        p = run([b, "bench", "-m", model_path, "--scenario", "single_stream", "-t", "2", "--json",
                 "--png", str(png)], text=True, timeout=600)
        assert p.returncode == 0, p.stderr
        rows = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
        # stdout keeps the one record of --json; the samples go to the chart only
        assert len(rows) == 1 and rows[0]["scenario"] == "single_stream"
        assert rows[0]["out_tokens"] == 128 and rows[0]["in_tokens"] == 512
        assert_chart(png)


def test_attention_png(microbench_bin, tmp_path):
    png = tmp_path / "a.png"
    p = run([microbench_bin, "--attention", "--shape", "smollm2", "--batch", "1,4", "--ctx",
             "64,128", "--threads", "2", "--footprint", "8", "-r", "3", "--no-bw", "--json",
             "--png", str(png)], text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    assert len([r for r in recs if r["bench"] == "attention"]) == 2 * 2 * 3
    assert_chart(png)


def test_attention_help_and_bad_input(microbench_bin):
    p = run([microbench_bin, "--attention", "--help"], text=True)
    assert p.returncode == 0 and "--footprint" in p.stdout and "--png" in p.stdout
    for args, want in ((["--batch", "1,,2"], "--batch"), (["--ctx", "0"], "--ctx"),
                       (["--threads", "x"], "--threads"), (["--block", "24"], "multiple of 16"),
                       (["--png"], "needs a value")):
        p = run([microbench_bin, "--attention"] + args, text=True)
        assert p.returncode == 2 and want in p.stderr, (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1

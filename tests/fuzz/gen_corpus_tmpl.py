#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/tmpl/: seeds for fuzz_tmpl, one per template of
llama.cpp's corpus (the pinned llama-cpp-python sdist's
vendor/llama.cpp/models/templates, unpacked by `make venv` under
~/.cache/anvil, or ANVIL_TEMPLATES), each the template, a NUL and one of
the conversations of tests/py/tmplref.py (rotating, so that every
conversation shape is seeded), plus a few small hand-written templates
that reach the limits and the sandbox. Standard library only."""
import glob
import json
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "tmpl")
ROOT = os.path.dirname(os.path.dirname(HERE))


def templates_dir():
    d = os.environ.get("ANVIL_TEMPLATES")
    if d:
        return d
    with open(os.path.join(ROOT, "tests", "requirements.txt")) as f:
        v = next(line.split("==")[1].strip() for line in f if line.startswith("llama-cpp-python=="))
    return os.path.join(os.path.expanduser("~"), ".cache", "anvil", f"llama_cpp_python-{v}",
                        "vendor", "llama.cpp", "models", "templates")


def conversations():
    # tmplref's conversations without importing pytest's conftest
    src = open(os.path.join(ROOT, "tests", "py", "tmplref.py")).read()
    ns = {}
    body = src[src.index("WEATHER = "):]
    exec(compile(body, "tmplref.py", "exec"), ns)
    return list(ns["conversations"]().values())


HAND = {
    "limits_loop.jinja": "{% for i in range(100000) %}{% for j in range(100) %}x{% endfor %}{% endfor %}",
    "limits_macro.jinja": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "sandbox.jinja": "{{ messages.append(1) }}{{ ''.__class__ }}{{ x.__dict__ }}",
    "namespace.jinja": "{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
}


def main():
    os.makedirs(OUT, exist_ok=True)
    convs = conversations()
    files = sorted(glob.glob(os.path.join(templates_dir(), "*.jinja")))
    assert files, f"no templates in {templates_dir()}"
    for i, p in enumerate(files):
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(p))
        with open(p, "rb") as f:
            t = f.read()
        ctx = json.dumps(convs[i % len(convs)], ensure_ascii=False).encode()
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(t + b"\0" + ctx)
    for name, t in HAND.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(t.encode() + b"\0" + json.dumps(convs[0]).encode())
    print(f"{len(files) + len(HAND)} seeds in {OUT}")


if __name__ == "__main__":
    main()

"""Every software prefetch written in the SIMD kernels is in the compiled
release objects.

A prefetch has no effect the compiler must keep, and GCC 12 deletes more
than that: its IPA mod-ref pass takes a helper that is `static inline` but
not `always_inline`, and whose only statements are prefetches, for a
function without effects, and removes its calls before inlining it. From
2026-11-28 (when the packed matmuls' prefetch macro became such a helper,
kn_pf) to 2026-12-01, the packed matmuls (matmul_p.c, matmul_pk.c)
held no prefetch at all, and matmul_q.c and the attention kernels lost
some: the 1B-shaped Q4_K_M model decoded at 28.6 tok/s instead of 36, and
no test could tell, since the results are the same bits either way.

So this test reads the release objects' disassembly with its inline chains
(objdump -dl --inlines, the build has -g) and checks that every line of the
kernel sources under src/kernels/cpu/{avx2,avx512,amx} that calls a
prefetch, directly or through a helper, is on the chain of at least one
prefetch instruction of its object. A call site that is dead code fails
too: then it should go."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT

ISA_DIRS = ("avx2", "avx512", "amx")
# a call of a prefetch or of a helper that issues them (the helpers'
# definitions are told apart below)
CALL = re.compile(r"\b(_mm_prefetch|__builtin_prefetch|kn_pf\w*|\w*prefetch\w*|pf_issue|pf_flush)\s*\(")
DEFN = re.compile(r"^\s*(static\s+)?(inline\s+)?(__attribute__\s*\(\(.*?\)\)\s*)?void\s+\w+\s*\(")
CHAIN = re.compile(r"^(?:inlined by )?(/\S+?):(\d+)")


def call_sites(path):
    """Line numbers of path that call a prefetch (comments and the helpers'
    own definition lines left out)."""
    lines = []
    in_comment = False
    with open(path) as f:
        for no, line in enumerate(f, 1):
            code = line
            if in_comment:
                if "*/" not in code:
                    continue
                code = code.split("*/", 1)[1]
                in_comment = False
            code = re.sub(r"/\*.*?\*/", "", code)
            if "/*" in code:
                code, in_comment = code.split("/*", 1)[0], True
            code = code.split("//", 1)[0]
            if CALL.search(code) and not DEFN.match(code) and not code.lstrip().startswith("#"):
                lines.append(no)
    return lines


def prefetch_chains(obj):
    """(file, line) pairs on the inline chains of obj's prefetch instructions."""
    out = subprocess.run(["objdump", "-dl", "--inlines", obj], check=True, capture_output=True,
                         text=True).stdout
    seen, chain = set(), []
    for line in out.splitlines():
        m = CHAIN.match(line)
        if m:
            chain.append((os.path.realpath(m.group(1)), int(m.group(2))))
            continue
        if re.match(r"^\s+[0-9a-f]+:\s", line):
            if "prefetch" in line:
                seen.update(chain)
            continue
        if line.endswith("():") or not line.strip():
            chain = []  # a new function name line starts the next chain
    return seen


def kernel_sources():
    for d in ISA_DIRS:
        base = os.path.join(ROOT, "src", "kernels", "cpu", d)
        for name in sorted(os.listdir(base)):
            if name.endswith(".c"):
                yield os.path.join(base, name)


def test_objdump_available():
    assert shutil.which("objdump"), "objdump (binutils) is needed to read the kernel objects"


@pytest.mark.parametrize("src", [p for p in kernel_sources() if call_sites(p)],
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_every_prefetch_is_compiled(src):
    rel = os.path.relpath(src, ROOT)
    obj = os.path.join(ROOT, "build", "release", rel[:-2] + ".o")
    assert os.path.exists(obj), f"{obj} is missing: build with make first"
    seen = prefetch_chains(obj)
    real = os.path.realpath(src)
    missing = [n for n in call_sites(src) if (real, n) not in seen]
    assert not missing, (f"{rel}: the prefetch calls at lines {missing} compiled to no instruction "
                         "(a helper that only prefetches must be always_inline; see this test's docstring)")


def test_the_check_sees_a_dropped_prefetch(tmp_path):
    """The check itself: a plain `static inline` prefetch helper, compiled as
    the release build compiles, loses its call (GCC 12), and the check
    reports that line; always_inline keeps it."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc
    body = ("#include <immintrin.h>\n"
            "static inline %s void pf(const void *p) { _mm_prefetch((const char *)p, _MM_HINT_T0); }\n"
            "float sum(const float *x, int n) {\n"
            "    float s = 0;\n"
            "    for (int i = 0; i < n; i++) {\n"
            "        pf(x + i + 1024);\n"
            "        s += x[i];\n"
            "    }\n"
            "    return s;\n"
            "}\n")
    results = {}
    for attr in ("", "__attribute__((always_inline))"):
        src = tmp_path / ("a%d.c" % len(results))
        src.write_text(body % attr)
        obj = str(src)[:-2] + ".o"
        subprocess.run([gcc, "-std=c11", "-O2", "-g", "-c", str(src), "-o", obj], check=True)
        results[attr] = (os.path.realpath(str(src)), 6) in prefetch_chains(obj)
    assert results["__attribute__((always_inline))"], "an always_inline prefetch helper must be seen"
    # with a compiler that keeps the plain helper's call the check has
    # nothing to catch here, but it must never report a kept call as lost
    if not results[""]:
        assert call_sites(str(tmp_path / "a0.c")) == [6]

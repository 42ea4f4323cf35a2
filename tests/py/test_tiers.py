"""The two tiers (docs/testing.md): every test conftest.py lists as `full`
exists (a renamed test must not fall silently into the fast tier, nor a
typo leave a slow one there), and run_all.py --fast deselects `full` while
keeping a marker expression of its own."""
import os
import re
import sys

import conftest
from conftest import ROOT

HERE = os.path.dirname(os.path.abspath(__file__))


def test_full_lists_name_real_tests():
    for f in conftest.FULL_FILES:
        assert os.path.exists(os.path.join(HERE, f)), f
    for entry in conftest.FULL_TESTS:
        f, name = entry.split("::")
        src = open(os.path.join(HERE, f)).read()
        assert re.search(r"^def %s\(" % re.escape(name), src, re.M), entry


def test_fast_args():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        import run_all
    finally:
        sys.path.pop(0)
    assert run_all.fast_args([]) == ["-m", "not full"]
    assert run_all.fast_args(["-x", "-m", "kernels"]) == ["-x", "-m", "(kernels) and not full"]

"""The whiteboard's rule as a test: no lower floor includes a higher one
(tests/layers/check_layers.py against tests/layers/floors.txt), and the
check itself fails when a core file includes the engine or a module has
no floor."""
import os
import shutil
import subprocess
import sys

from conftest import ROOT

CHECK = os.path.join(ROOT, "tests", "layers", "check_layers.py")


def check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


def copy_tree(tmp_path):
    for d in ("src", "tools", "bench", "include"):
        if os.path.isdir(os.path.join(ROOT, d)):
            shutil.copytree(os.path.join(ROOT, d), tmp_path / d,
                            ignore=shutil.ignore_patterns("results", "*.json", "*.png"))
    return tmp_path


def test_floors_hold():
    p = check(ROOT)
    assert p.returncode == 0, p.stdout


def test_core_including_the_engine_fails(tmp_path):
    root = copy_tree(tmp_path)
    f = root / "src" / "core" / "alloc.c"
    f.write_text('#include "engine/engine.c"\n' + f.read_text())
    p = check(str(root))
    assert p.returncode == 1
    assert "src/core/alloc.c:1: src/core (floor 0) includes engine/engine.c of src/engine (floor 7)" in p.stdout


def test_sibling_modules_may_not_lean_on_each_other(tmp_path):
    root = copy_tree(tmp_path)
    f = root / "src" / "kv" / "kv_cache.c"
    f.write_text('#include "tok/tok.h"\n' + f.read_text())
    p = check(str(root))
    assert p.returncode == 1 and "src/kv (floor 3) includes tok/tok.h of src/tok (floor 3)" in p.stdout


def test_a_module_without_a_floor_fails(tmp_path):
    root = copy_tree(tmp_path)
    (root / "src" / "newmod").mkdir()
    (root / "src" / "newmod" / "x.c").write_text('#include "core/core.h"\n')
    p = check(str(root))
    assert p.returncode == 1 and "src/newmod/x.c: its directory has no floor" in p.stdout

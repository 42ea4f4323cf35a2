"""The whiteboard's rules as a test (tests/layers/check_layers.py against
tests/layers/floors.txt): no lower floor includes a higher one, and no two
files of one room call each other, directly or round a circle. The check
itself must fail when a core file includes the engine, when a module has
no floor, and when a small synthetic circle is compiled."""
import os
import shutil
import subprocess
import sys

from conftest import ROOT

CHECK = os.path.join(ROOT, "tests", "layers", "check_layers.py")


def check(root, *args):
    return subprocess.run([sys.executable, CHECK, *args, str(root)], capture_output=True, text=True)


def copy_tree(tmp_path):
    for d in ("src", "tools", "bench", "include"):
        if os.path.isdir(os.path.join(ROOT, d)):
            shutil.copytree(os.path.join(ROOT, d), tmp_path / d,
                            ignore=shutil.ignore_patterns("results", "*.json", "*.png"))
    return tmp_path


def test_floors_hold():
    p = check(ROOT, "--only", "includes")
    assert p.returncode == 0, p.stdout


def test_no_circle_in_a_room():
    # reads the release objects: run_all.py builds them before the tests
    p = check(ROOT, "--only", "calls")
    assert p.returncode == 0, p.stdout


def test_core_including_the_engine_fails(tmp_path):
    root = copy_tree(tmp_path)
    f = root / "src" / "core" / "alloc.c"
    f.write_text('#include "engine/engine.c"\n' + f.read_text())
    p = check(root, "--only", "includes")
    assert p.returncode == 1
    assert "src/core/alloc.c:1: src/core (floor 0) includes engine/engine.c of src/engine (floor 7)" in p.stdout


def test_sibling_modules_may_not_lean_on_each_other(tmp_path):
    root = copy_tree(tmp_path)
    f = root / "src" / "kv" / "kv_cache.c"
    f.write_text('#include "tok/tok.h"\n' + f.read_text())
    p = check(root, "--only", "includes")
    assert p.returncode == 1 and "src/kv (floor 3) includes tok/tok.h of src/tok (floor 3)" in p.stdout


def test_a_module_without_a_floor_fails(tmp_path):
    root = copy_tree(tmp_path)
    (root / "src" / "newmod").mkdir()
    (root / "src" / "newmod" / "x.c").write_text('#include "core/core.h"\n')
    p = check(root, "--only", "includes")
    assert p.returncode == 1 and "src/newmod/x.c: its directory has no floor" in p.stdout


# --- the calls check, on objects compiled here ------------------------------

def compile_room(tmp_path, files):
    """Compile {"src/core/a.c": text, ...} into tmp_path/build/src/...o."""
    build = tmp_path / "build"
    for rel, text in files.items():
        src = tmp_path / rel
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(text)
        if not rel.endswith(".c"):
            continue
        obj = build / (rel[:-2] + ".o")
        obj.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-std=c11", "-O2", "-I", str(tmp_path), "-c", str(src), "-o", str(obj)],
                       check=True)
    return build


def test_a_circle_of_three_is_found_with_its_symbols(tmp_path):
    build = compile_room(tmp_path, {
        "src/core/a.c": "int b_f(int); int a_f(int x) { return x ? b_f(x - 1) : 0; }\n",
        "src/core/b.c": "int c_f(int); int b_f(int x) { return c_f(x) + 1; }\n",
        "src/core/c.c": "int a_f(int); int c_f(int x) { return a_f(x) * 2; }\n",
        # d calls into the circle but nothing calls d back: no circle of its own
        "src/core/d.c": "int a_f(int); int d_f(void) { return a_f(3); }\n",
    })
    p = check(tmp_path, "--only", "calls", "--build", build)
    assert p.returncode == 1, p.stdout
    assert "src/core: a.c -b_f-> b.c -c_f-> c.c -a_f-> a.c\n" in p.stdout
    assert "d.c" not in p.stdout
    assert "1 circle(s) between the files of a room" in p.stdout


def test_calls_up_a_chain_and_shared_inlines_are_no_circle(tmp_path):
    inline = "static inline int sq(int x) { return x * x; }\n"
    build = compile_room(tmp_path, {
        "src/core/sq.h": inline,
        "src/core/a.c": '#include "src/core/sq.h"\nint b_f(int); int a_f(int x) { return b_f(sq(x)); }\n',
        "src/core/b.c": '#include "src/core/sq.h"\nint b_f(int x) { return sq(x) + 1; }\n',
        # a circle between rooms is the includes check's business, not this one's
        "src/kv/k.c": "int a_f(int); int k_f(int x) { return a_f(x); }\n",
        "src/core/e.c": "int k_f(int); int e_f(int x) { return k_f(x); }\n",
    })
    p = check(tmp_path, "--only", "calls", "--build", build)
    assert p.returncode == 0, p.stdout


def test_objects_of_removed_files_are_ignored(tmp_path):
    build = compile_room(tmp_path, {
        "src/core/a.c": "int b_f(int); int a_f(int x) { return b_f(x); }\n",
        "src/core/b.c": "int a_f(int); int b_f(int x) { return x ? a_f(x - 1) : 0; }\n",
    })
    assert check(tmp_path, "--only", "calls", "--build", build).returncode == 1
    (tmp_path / "src" / "core" / "b.c").unlink()  # b.c moved away: its stale b.o is no file of the room
    p = check(tmp_path, "--only", "calls", "--build", build)
    assert p.returncode == 0, p.stdout


def test_missing_objects_fail(tmp_path):
    p = check(tmp_path, "--only", "calls", "--build", tmp_path / "nothing")
    assert p.returncode == 1 and "no objects" in p.stdout

#!/usr/bin/env python3
"""The layers as a test: no lower floor includes a higher one.

Reads floors.txt beside this script (directory -> floor), then every
`#include "..."` line of the C sources and headers under the given root
(default: the repository). An include resolves to the directory of the
file it names (against the root's include/ and src/, then the including
file's own directory). A file on floor f may include files of floors
<= f; on its own floor only from its own directory, since siblings on one
floor (tok and kv, say) must not lean on each other. Exit status 1 and
one line per violation when the rule breaks; unknown directories are
violations too, so a new module must be given its floor here.

Usage: check_layers.py [ROOT]
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SCAN = ("src", "tools", "bench", "include")


def load_floors():
    floors = {}
    with open(os.path.join(HERE, "floors.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                d, n = line.split()
                floors[d] = int(n)
    return floors


def module_of(rel, floors):
    """The longest floors.txt directory containing rel (a path from root)."""
    best = None
    for d in floors:
        if rel == d or rel.startswith(d + "/"):
            if best is None or len(d) > len(best):
                best = d
    return best


def resolve(root, src_rel, inc, floors):
    """The file an include names: against include/, src/, the including
    file's directory, then every directory of the floors table (the
    Makefile adds some with -I: a bare "args.h" must still be ranked)."""
    for base in ("include", "src", os.path.dirname(src_rel), *sorted(floors)):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None


def check(root):
    floors = load_floors()
    bad = []
    for top in SCAN:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for fn in sorted(files):
                if not fn.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                mod = module_of(rel, floors)
                if mod is None:
                    bad.append(f"{rel}: its directory has no floor in tests/layers/floors.txt")
                    continue
                with open(path, errors="replace") as f:
                    for no, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = resolve(root, rel, m.group(1), floors)
                        if target is None:
                            continue  # generated or system header: not ours to rank
                        tmod = module_of(target, floors)
                        if tmod is None:
                            bad.append(f"{rel}:{no}: includes {m.group(1)}, whose directory has no floor")
                        elif floors[tmod] > floors[mod] or (floors[tmod] == floors[mod] and tmod != mod
                                                             and floors[mod] != 0):
                            bad.append(f"{rel}:{no}: {mod} (floor {floors[mod]}) includes "
                                       f"{m.group(1)} of {tmod} (floor {floors[tmod]})")
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(HERE))
    bad = check(root)
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} include(s) break the floors")
        sys.exit(1)


if __name__ == "__main__":
    main()

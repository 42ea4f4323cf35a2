#!/usr/bin/env python3
"""The layers as a test: no arrow up a floor, no circle inside a room.

Rooms and floors come from floors.txt beside this script (directory ->
floor; a room is one of its directories, with everything under it that no
longer entry claims). Two checks:

includes  Every `#include "..."` line of the C sources and headers under
          the root (default: the repository). An include resolves to the
          file it names (against the root's include/ and src/, the
          including file's own directory, then every room). A file on
          floor f may include files of floors <= f; on its own floor only
          from its own room, since siblings on one floor (tok and kv, say)
          must not lean on each other (floor 0 excepted). Unknown
          directories are violations too: a new module must be given its
          floor here.

calls     The symbols of the compiled objects (`nm` over BUILD/src, BUILD/
          tools and BUILD/bench, BUILD = ROOT/build/release unless --build
          says otherwise): file A depends on file B of the same room when A
          has an undefined reference (U) to a global that B defines (T, D,
          B, R, ...). A circle is a strongly connected component of that
          graph; each is reported as cycles covering all of its arrows, one
          line each, one symbol per arrow:
            src/server: http.c -srv_reply-> generate.c -srv_route-> http.c
          A header's static inline is local to every object that uses it,
          so it is never an arrow. Arrows between rooms are the includes
          check's business. Missing objects are a violation: build first;
          an object whose source file is gone (moved, deleted) is ignored.

Exit status 1 and one line per violation when a rule breaks.

Usage: check_layers.py [--only includes|calls] [--build DIR] [--arrows] [ROOT]
"""
import argparse
import collections
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SCAN = ("src", "tools", "bench", "include")
OBJ_SCAN = ("src", "tools", "bench")
# nm -P types of a global definition (text, data, bss, read-only, common,
# weak, small data)
DEFINED = set("TDBRCWVGS")


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


def check_includes(root, floors):
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


def object_symbols(build, root):
    """{source path: (defined globals, undefined references)} for every
    object under build/{src,tools,bench} whose source is still in root; the
    source path is the object's path below build with .c for .o
    (build/release/src/kv/kv.o -> src/kv/kv.c). An object left behind by a
    file that moved or went is not read."""
    objs = []
    for top in OBJ_SCAN:
        for dirpath, _, files in os.walk(os.path.join(build, top)):
            for fn in sorted(files):
                o = os.path.join(dirpath, fn)
                if fn.endswith(".o") and os.path.exists(
                        os.path.join(root, os.path.relpath(o, build)[:-2] + ".c")):
                    objs.append(o)
    out = {}
    if not objs:
        return out
    # one nm for all objects: "obj.o:" headers (-A prefixes each line)
    p = subprocess.run(["nm", "-P", "-A", *objs], capture_output=True, text=True, check=True)
    for o in objs:
        out[os.path.relpath(o, build)[:-2] + ".c"] = (set(), set())
    for line in p.stdout.splitlines():
        head, _, rest = line.partition(": ")
        parts = rest.split()
        if len(parts) < 2:
            continue
        obj = head.split("[", 1)[0]
        src = os.path.relpath(obj, build)[:-2] + ".c"
        name, kind = parts[0], parts[1]
        if kind == "U":
            out[src][1].add(name)
        elif kind in DEFINED:
            out[src][0].add(name)
    return out


def sccs(nodes, edges):
    """Tarjan's strongly connected components (iterative), each of size > 1."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def shortest_path(src, dst, edges, allowed):
    """Breadth-first path src -> ... -> dst inside allowed (a list of nodes)."""
    prev = {src: None}
    q = collections.deque([src])
    while q:
        v = q.popleft()
        if v == dst:
            path = []
            while v is not None:
                path.append(v)
                v = prev[v]
            return path[::-1]
        for w in sorted(edges[v]):
            if w in allowed and w not in prev:
                prev[w] = v
                q.append(w)
    return None


def find_cycles(syms, floors, arrows_out=None):
    """[(room, [file, file, ..., file], [symbol per arrow])]: for each
    circle, cycles that together use every arrow inside it (an arrow
    u -> v closes with the shortest way back from v to u). arrows_out, when
    given, gets (room, u, v, [every symbol]) for each arrow inside a circle."""
    by_room = collections.defaultdict(list)
    for src in syms:
        room = module_of(src, floors)
        if room is not None:
            by_room[room].append(src)
    found = []
    for room in sorted(by_room):
        files = sorted(by_room[room])
        definer = {}
        for f in files:
            for s in syms[f][0]:
                definer.setdefault(s, f)
        edges = {f: set() for f in files}
        label = collections.defaultdict(list)
        for f in files:
            for s in sorted(syms[f][1]):
                g = definer.get(s)
                if g is not None and g != f:
                    edges[f].add(g)
                    label[(f, g)].append(s)
        for comp in sccs(files, edges):
            inside = set(comp)
            covered = set()
            for u in comp:
                for v in sorted(edges[u] & inside):
                    if (u, v) in covered:
                        continue
                    back = shortest_path(v, u, edges, inside)
                    cyc = [u] + back
                    # start each cycle at its smallest file, so lines sort stably
                    k = cyc.index(min(cyc[:-1]))
                    cyc = cyc[k:-1] + cyc[:k] + [cyc[k]]
                    arrows = list(zip(cyc, cyc[1:]))
                    covered.update(arrows)
                    found.append((room, cyc, [label[a][0] for a in arrows]))
            if arrows_out is not None:
                for u in comp:
                    for v in sorted(edges[u] & inside):
                        arrows_out.append((room, u, v, label[(u, v)]))
    return sorted(set((r, tuple(c), tuple(s)) for r, c, s in found))


def format_cycle(room, cyc, symbols):
    out = f"{room}: {os.path.relpath(cyc[0], room)}"
    for f, s in zip(cyc[1:], symbols):
        out += f" -{s}-> {os.path.relpath(f, room)}"
    return out


def check_calls(build, root, floors, all_arrows=False):
    syms = object_symbols(build, root)
    if not syms:
        return [f"{build}: no objects under src/, tools/ or bench/ to read calls from "
                "(build first: make all)"]
    arrows = [] if all_arrows else None
    bad = [format_cycle(r, c, s) for r, c, s in find_cycles(syms, floors, arrows)]
    for room, u, v, names in arrows or []:
        print(f"arrow {room}: {os.path.relpath(u, room)} -> {os.path.relpath(v, room)}: {' '.join(names)}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--build", help="the objects to read calls from (ROOT/build/release)")
    ap.add_argument("--only", choices=("includes", "calls"))
    ap.add_argument("--arrows", action="store_true",
                    help="also print every symbol of every arrow inside a circle")
    args = ap.parse_args()
    floors = load_floors()
    bad_inc, bad_calls = [], []
    if args.only != "calls":
        bad_inc = check_includes(args.root, floors)
    if args.only != "includes":
        bad_calls = check_calls(args.build or os.path.join(args.root, "build", "release"), args.root, floors,
                                args.arrows)
    for b in bad_inc + bad_calls:
        print(b)
    if bad_inc:
        print(f"{len(bad_inc)} include(s) break the floors")
    if bad_calls:
        print(f"{len(bad_calls)} circle(s) between the files of a room")
    if bad_inc or bad_calls:
        sys.exit(1)


if __name__ == "__main__":
    main()

"""The constraint engine against independent matchers (tests/tool_constrain.c).

- JSON Schema: random walks over the default model's real vocabulary (each
  step a random allowed token, EOG when allowed now and then); every
  completed output must parse with json.loads and validate with the
  jsonschema package (formats checked: date, time, date-time, email, uuid).
  The schemas' own "examples" must be accepted (compact and indented), and
  mutations that jsonschema rejects must be rejected.
- GBNF: the same walks, each completed output checked by a GBNF parser and
  Earley recognizer written here in Python (nothing shared with the C
  code); random strings compared on "complete match" and "viable prefix".
- Regexes: walks checked with Python's re.fullmatch (re.ASCII: \\d \\w \\s
  are ASCII, as documented).
- Brute force on small vocabularies: every token sequence up to a depth is
  enumerated by the tool; the allowed set at each node must equal the
  tokens t for which prefix+t can still complete, computed here from the
  language (regex: by enumerating strings; GBNF: Earley; schema: the
  finite language enumerated and filtered by jsonschema).
- Bad input gets exit status 2 and a message naming the problem;
  pathological inputs finish in bounded time.
"""
import glob
import itertools
import json
import os
import random
import re
import subprocess
import tempfile
from collections import defaultdict

import jsonschema
import pytest

from conftest import MODEL, ROOT, build_path

TOOL = build_path("release", "tool_constrain")
DATA = os.path.join(ROOT, "tests", "data", "constrain")
SCHEMAS = sorted(glob.glob(os.path.join(DATA, "schemas", "*.json")))
GRAMMARS = sorted(glob.glob(os.path.join(DATA, "grammars", "*.gbnf")))
with open(os.path.join(DATA, "regexes.txt"), encoding="utf-8") as _f:
    REGEXES = [line.rstrip("\n") for line in _f if line.strip()]

FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER


def tool(*args, stdin=None, timeout=900):
    if not os.path.exists(TOOL):
        pytest.fail(f"{TOOL} is not built (make)")
    return subprocess.run([TOOL, *args], input=stdin, capture_output=True, timeout=timeout)


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=FORMATS)


def walks(kind, sources, n, max_tokens, seed, extra=()):
    if not os.path.exists(MODEL):
        pytest.fail(f"default model missing: {MODEL}")
    p = tool("walk", kind, *sources, "--model", MODEL, "--n", str(n), "--max-tokens",
             str(max_tokens), "--seed", str(seed), *extra)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    out = []
    for line in p.stdout.decode().splitlines():
        idx, status, *rest = line.split(" ", 2)
        out.append((int(idx), status, rest[0] if rest else ""))
    return out


def match(kind, source, texts, extra=()):
    """'1' complete, 'p' viable prefix, '0' neither, per text (bytes)."""
    recs = b"".join(len(t).to_bytes(4, "little") + t for t in texts)
    p = tool("match", kind, source, *extra, stdin=recs)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    res = p.stdout.decode().strip()
    assert len(res) == len(texts)
    return res


# ---------------------------------------------------------------------------
# JSON Schema


def test_enough_inputs():
    assert len(SCHEMAS) >= 60, SCHEMAS
    assert len(GRAMMARS) + len(REGEXES) >= 20


def test_schema_examples_accepted():
    n = 0
    for path in SCHEMAS:
        schema = json.load(open(path, encoding="utf-8"))
        v = validator(schema)
        for ex in schema.get("examples", []) if isinstance(schema, dict) else []:
            v.validate(ex)  # the test data itself
            compact = json.dumps(ex, separators=(",", ":"), ensure_ascii=False).encode()
            indented = json.dumps(ex, indent=2, ensure_ascii=False).encode()
            spaced = json.dumps(ex, ensure_ascii=False).encode()
            assert match("schema", path, [compact], ["--compact"]) == "1", (path, compact)
            assert match("schema", path, [compact, indented, spaced]) == "111", (path, indented)
            n += 1
    assert n >= 60


def mutations(x, schema_has_props):
    """Values near x: drop a key, add a key, change a leaf's type."""
    out = []
    if isinstance(x, dict):
        for k in x:
            out.append({kk: vv for kk, vv in x.items() if kk != k})
        if schema_has_props:
            out.append({**x, "zz_extra": 1})
        for k, v in x.items():
            for m in mutations(v, True):
                out.append({**x, k: m})
    elif isinstance(x, list):
        if x:
            out.append(x[:-1])
            for i, v in enumerate(x):
                for m in mutations(v, True):
                    out.append(x[:i] + [m] + x[i + 1:])
        out.append(x + [x[0] if x else None])
    elif isinstance(x, bool):
        out += [not x, "true", None]
    elif isinstance(x, (int, float)):
        out += [str(x), x + 1000000, -x - 1, x + 0.5, None]
    elif isinstance(x, str):
        out += [x + "!", "", 5, None, x.upper()]
    else:
        out += [0, "null", False]
    return out[:40]


def test_schema_rejects_invalid_mutations():
    """Soundness: whatever jsonschema rejects, the automaton rejects."""
    checked = 0
    for path in SCHEMAS:
        schema = json.load(open(path, encoding="utf-8"))
        if not isinstance(schema, dict):
            continue
        v = validator(schema)
        texts = []
        for ex in schema.get("examples", []):
            for m in mutations(ex, "properties" in schema):
                if not v.is_valid(m):
                    texts.append(json.dumps(m, separators=(",", ":"), ensure_ascii=False).encode())
        if texts:
            res = match("schema", path, texts)
            for t, r in zip(texts, res):
                assert r != "1", (path, t)
            checked += len(texts)
    assert checked > 300


@pytest.mark.parametrize("ws", ["flex", "compact"])
def test_schema_walks_validate(ws):
    extra = ["--compact"] if ws == "compact" else []
    res = walks("schema", SCHEMAS, n=6, max_tokens=150, seed=11 if ws == "flex" else 12, extra=extra)
    ok = 0
    for idx, status, hx in res:
        path = SCHEMAS[idx]
        assert status in ("ok", "cut"), (path, status, hx)
        if status != "ok":
            continue
        text = bytes.fromhex(hx).decode("utf-8")
        outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
        if ws == "compact":  # no whitespace outside strings
            assert not re.search(r"\s", outside), text
        else:  # at most a newline and 20 spaces/tabs in a row
            assert all(len(run) <= 21 for run in re.findall(r"\s+", outside)), text
        value = json.loads(text)
        schema = json.load(open(path, encoding="utf-8"))
        errors = list(validator(schema).iter_errors(value))
        assert not errors, (path, text, errors[0].message)
        ok += 1
    assert ok >= 0.9 * len(res), f"only {ok} of {len(res)} walks completed"


def test_schema_whitespace_bounded():
    """Flex whitespace: nothing longer than a newline and 20 spaces/tabs."""
    res = walks("json", ["-"], n=12, max_tokens=200, seed=5, extra=["--text"])
    for _, status, hx in res:
        text = bytes.fromhex(hx).decode("utf-8")
        # outside strings, runs of whitespace are short
        outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
        for run in re.findall(r"\s+", outside):
            assert len(run) <= 21, repr(run)
        if status == "ok":
            assert isinstance(json.loads(text), dict)


# ---------------------------------------------------------------------------
# GBNF: an independent parser and Earley recognizer


class Term:
    """A set of code points: ranges, possibly negated."""

    def __init__(self, ranges, neg=False):
        self.ranges, self.neg = ranges, neg

    def match(self, ch):
        c = ord(ch)
        return any(lo <= c <= hi for lo, hi in self.ranges) != self.neg


class GbnfParser:
    ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}

    def __init__(self, text):
        self.s, self.i = text, 0
        self.rules = {}
        self.extra = 0

    def peek(self, k=0):
        return self.s[self.i + k] if self.i + k < len(self.s) else ""

    def space(self, nl):
        while True:
            c = self.peek()
            if c in (" ", "\t"):
                self.i += 1
            elif c == "#":
                while self.peek() not in ("", "\n", "\r"):
                    self.i += 1
            elif nl and c in ("\n", "\r"):
                self.i += 1
            else:
                return

    def char(self):
        c = self.peek()
        if c == "\\":
            e = self.peek(1)
            self.i += 2
            if e in "xuU":
                k = {"x": 2, "u": 4, "U": 8}[e]
                v = int(self.s[self.i:self.i + k], 16)
                self.i += k
                return v
            return ord(self.ESC[e])
        self.i += 1
        return ord(c)

    def word(self):
        b = self.i
        while self.peek() and (self.peek().isalnum() or self.peek() in "-_"):
            self.i += 1
        return self.s[b:self.i]

    def alternates(self, nested):
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.i += 1
            self.space(True)
            alts.append(self.sequence(nested))
        return ("alt", alts)

    def sequence(self, nested):
        items = []
        while True:
            c = self.peek()
            if c == '"':
                self.i += 1
                lit = []
                while self.peek() != '"':
                    lit.append(("t", Term([(self.char(),) * 2])))
                self.i += 1
                items.append(("seq", lit))
            elif c == "[":
                self.i += 1
                neg = self.peek() == "^"
                if neg:
                    self.i += 1
                ranges = []
                while self.peek() != "]":
                    lo = self.char()
                    hi = lo
                    if self.peek() == "-" and self.peek(1) != "]":
                        self.i += 1
                        hi = self.char()
                    ranges.append((lo, hi))
                self.i += 1
                items.append(("t", Term(ranges, neg)))
            elif c == ".":
                self.i += 1
                items.append(("t", Term([(0, 0x10FFFF)])))
            elif c == "(":
                self.i += 1
                self.space(True)
                items.append(self.alternates(True))
                assert self.peek() == ")"
                self.i += 1
            elif c and (c.isalnum() or c in "-_"):
                items.append(("ref", self.word()))
            elif c in ("*", "+", "?"):
                self.i += 1
                items[-1] = ("rep", items[-1], {"*": 0, "+": 1, "?": 0}[c], {"*": None, "+": None, "?": 1}[c])
            elif c == "{":
                m = re.compile(r"\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}").match(self.s, self.i)
                lo = int(m.group(1))
                hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
                self.i = m.end()
                items[-1] = ("rep", items[-1], lo, hi)
            else:
                break
            self.space(nested)
        return ("seq", items)

    def parse(self):
        self.space(True)
        while self.i < len(self.s):
            name = self.word()
            self.space(False)
            assert self.s.startswith("::=", self.i)
            self.i += 3
            self.space(True)
            self.rules[name] = self.alternates(False)
            self.space(True)
        return self.rules


class Earley:
    """Earley recognizer over code points, with nullable prediction
    (Aycock and Horspool) and unproductive productions removed, so that a
    non-empty chart set means "a viable prefix"."""

    def __init__(self, rules):
        self.prods = []  # (lhs, tuple of symbols): str nonterminal or Term
        self.n = 0
        for name, body in rules.items():
            self.prods.append((name, (self.lower(body),)))
        self.start = "^start"
        self.prods.append((self.start, ("root",)))
        productive = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.prods:
                if lhs not in productive and all(isinstance(s, Term) or s in productive for s in rhs):
                    productive.add(lhs)
                    changed = True
        self.prods = [(l, r) for l, r in self.prods
                      if all(isinstance(s, Term) or s in productive for s in r)]
        self.by = defaultdict(list)
        for k, (lhs, _) in enumerate(self.prods):
            self.by[lhs].append(k)
        self.nullable = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.prods:
                if lhs not in self.nullable and all(not isinstance(s, Term) and s in self.nullable for s in rhs):
                    self.nullable.add(lhs)
                    changed = True

    def new(self):
        self.n += 1
        return f"^{self.n}"

    def lower(self, node):
        kind = node[0]
        if kind == "t":
            return node[1]
        if kind == "ref":
            return node[1]
        nt = self.new()
        if kind == "seq":
            self.prods.append((nt, tuple(self.lower(x) for x in node[1])))
        elif kind == "alt":
            for a in node[1]:
                self.prods.append((nt, (self.lower(a),)))
        elif kind == "rep":
            x, lo, hi = self.lower(node[1]), node[2], node[3]
            tail = self.new()
            self.prods.append((nt, (x,) * lo + (tail,)))
            if hi is None:
                self.prods.append((tail, ()))
                self.prods.append((tail, (x, tail)))
            else:
                cur = tail
                for k in range(hi - lo):
                    nxt = self.new()
                    self.prods.append((cur, ()))
                    self.prods.append((cur, (x, nxt)))
                    cur = nxt
                self.prods.append((cur, ()))
        return nt

    def add(self, chart, waiting, i, it, work):
        if it in chart[i]:
            return
        chart[i].add(it)
        work.append(it)
        rhs = self.prods[it[0]][1]
        if it[1] < len(rhs) and not isinstance(rhs[it[1]], Term):
            waiting[i][rhs[it[1]]].append(it)

    def closure(self, chart, waiting, i, seeds):
        work = []
        for it in seeds:
            self.add(chart, waiting, i, it, work)
        while work:
            p, d, o = work.pop()
            lhs, rhs = self.prods[p]
            if d == len(rhs):
                # items waiting for lhs at the origin (a list that may grow
                # while o == i: nullable items are advanced at prediction)
                for (q, e, f) in list(waiting[o][lhs]):
                    self.add(chart, waiting, i, (q, e + 1, f), work)
            elif not isinstance(rhs[d], Term):
                for q in self.by[rhs[d]]:
                    self.add(chart, waiting, i, (q, 0, i), work)
                if rhs[d] in self.nullable:
                    self.add(chart, waiting, i, (p, d + 1, o), work)

    def run(self, text):
        """The chart for text, stopping at the first dead character."""
        chart, waiting = [set()], [defaultdict(list)]
        self.closure(chart, waiting, 0, [(k, 0, 0) for k in self.by[self.start]])
        for i, ch in enumerate(text):
            nxt = []
            for (p, d, o) in chart[i]:
                rhs = self.prods[p][1]
                if d < len(rhs) and isinstance(rhs[d], Term) and rhs[d].match(ch):
                    nxt.append((p, d + 1, o))
            chart.append(set())
            waiting.append(defaultdict(list))
            if not nxt:
                return chart
            self.closure(chart, waiting, i + 1, nxt)
        return chart

    def status(self, text):
        chart = self.run(text)
        if len(chart) <= len(text) or not chart[-1]:
            return "0"
        for (p, d, o) in chart[-1]:
            if self.prods[p][0] == self.start and o == 0 and d == 1:
                return "1"
        return "p"


def grammar(path):
    text = open(path, encoding="utf-8").read()
    ex = [m.replace("\\n", "\n") for m in re.findall(r"^# example: (.*)$", text, re.M)]
    return Earley(GbnfParser(text).parse()), ex


def test_gbnf_examples_and_random_strings():
    rng = random.Random(3)
    for path in GRAMMARS:
        e, examples = grammar(path)
        assert examples, path
        texts = []
        for ex in examples:
            assert e.status(ex) == "1", (path, ex)
            texts.append(ex)
            for _ in range(25):  # edits of the example: compare match / prefix / dead
                s = list(ex)
                for _ in range(rng.randint(1, 3)):
                    op = rng.randrange(3)
                    k = rng.randrange(len(s) + 1)
                    if op == 0 and s:
                        del s[min(k, len(s) - 1)]
                    elif op == 1:
                        s.insert(k, rng.choice(ex))
                    elif s:
                        s[min(k, len(s) - 1)] = rng.choice(ex + "x(,\"")
                t = "".join(s)
                texts.append(t)
                texts.append(t[:rng.randrange(len(t) + 1)])
        res = match("gbnf", path, [t.encode() for t in texts], ["--ref"])
        for t, r in zip(texts, res):
            assert r == e.status(t), (path, t, r)


def test_gbnf_walks():
    res = walks("gbnf", GRAMMARS, n=8, max_tokens=80, seed=21)
    ok = 0
    cache = {}
    for idx, status, hx in res:
        assert status in ("ok", "cut"), (GRAMMARS[idx], status)
        if status != "ok":
            continue
        if idx not in cache:
            cache[idx] = grammar(GRAMMARS[idx])[0]
        text = bytes.fromhex(hx).decode("utf-8")
        assert cache[idx].status(text) == "1", (GRAMMARS[idx], text)
        ok += 1
    assert ok >= 0.8 * len(res), f"{ok} of {len(res)}"


# ---------------------------------------------------------------------------
# regexes


def test_regex_walks():
    with tempfile.TemporaryDirectory() as d:
        files = []
        for i, rx in enumerate(REGEXES):
            f = os.path.join(d, f"{i}.re")
            open(f, "w", encoding="utf-8").write(rx)
            files.append(f)
        res = walks("regex", files, n=8, max_tokens=80, seed=31)
    ok = 0
    for idx, status, hx in res:
        assert status in ("ok", "cut"), (REGEXES[idx], status)
        if status != "ok":
            continue
        text = bytes.fromhex(hx).decode("utf-8")
        assert re.fullmatch(REGEXES[idx], text, re.ASCII), (REGEXES[idx], text)
        ok += 1
    assert ok >= 0.9 * len(res)


def test_regex_match_differential():
    rng = random.Random(4)
    for rx in REGEXES:
        alpha = sorted(set(re.sub(r"\\[dws]", "", rx)) | set("0aZ .-@é中"))
        texts = []
        for _ in range(300):
            texts.append("".join(rng.choice(alpha) for _ in range(rng.randint(0, 14))))
        res = match("regex", rx, [t.encode() for t in texts], ["--text", "--ref"])
        for t, r in zip(texts, res):
            assert (r == "1") == bool(re.fullmatch(rx, t, re.ASCII)), (rx, t, r)


# ---------------------------------------------------------------------------
# brute force on small vocabularies


def write_vocab(tokens):
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    for t in tokens:
        f.write("EOG\n" if t is None else t.encode().hex() + "\n")
    f.close()
    return f.name


def oracle(kind, source, tokens, depth, extra=()):
    path = write_vocab(tokens)
    try:
        p = tool("oracle", kind, source, "--vocab", path, "--depth", str(depth), *extra)
    finally:
        os.unlink(path)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    nodes = []
    for line in p.stdout.decode().splitlines():
        parts = line.split(" ")
        prefix = bytes.fromhex(parts[0]).decode("utf-8") if parts[0] else ""
        ids = [int(x) for x in parts[2].split(",")] if len(parts) > 2 and parts[2] else []
        nodes.append((prefix, parts[1] == "1", set(ids)))
    return nodes


def check_oracle(nodes, tokens, viable, complete):
    assert len(nodes) > 10
    for prefix, acc, ids in nodes:
        assert acc == complete(prefix), (prefix, acc)
        want = set()
        for k, t in enumerate(tokens):
            if t is None:
                if complete(prefix):
                    want.add(k)
            elif viable(prefix + t):
                want.add(k)
        assert ids == want, (prefix, sorted(ids), sorted(want))


@pytest.mark.parametrize("rx,alpha", [
    ("(a|b)*abb", "ab"), ("a{2,4}b?", "ab"), ("(ab|ba)+c?", "abc"),
    ("[ab]c*[ab]", "abc"), ("(a|bc)(b|ca)?", "abc"), ("a|ab|abc|b+", "abc"),
])
def test_oracle_regex(rx, alpha):
    # the language up to length 11; every viable prefix of length <= 8
    # completes within 3 characters for these expressions
    lang = set()
    for n in range(12 if len(alpha) == 2 else 11):
        for t in itertools.product(alpha, repeat=n):
            s = "".join(t)
            if re.fullmatch(rx, s):
                lang.add(s)
    prefixes = {s[:k] for s in lang for k in range(len(s) + 1)}
    # prefixes + token: at most 3 * 2 + 2 = 8 characters, + 3 to complete
    tokens = list(alpha) + [a + b for a in alpha for b in alpha][:6] + [None, alpha[0]]
    nodes = oracle("regex", rx, tokens, 3, ["--text"])
    check_oracle(nodes, tokens, lambda w: w in prefixes, lambda w: w in lang)


@pytest.mark.parametrize("g", [
    'root ::= "(" root ")" root | ""',
    'root ::= x "=" x\nx ::= [ab] | "(" x ")"',
    'root ::= item ("," item)*\nitem ::= "a" | "b" item',
    'root ::= s\ns ::= "a" s "b" | "c"',
])
def test_oracle_gbnf(g):
    e = Earley(GbnfParser(g).parse())
    alpha = sorted(set(re.findall(r'"([^"\\])"', g)) | set("ab"))
    tokens = alpha + ["".join(p) for p in itertools.product(alpha, repeat=2)][:10] + [None]
    nodes = oracle("gbnf", g, tokens, 3, ["--text"])
    check_oracle(nodes, tokens, lambda w: e.status(w) != "0", lambda w: e.status(w) == "1")


def finite_language(schema, candidates):
    v = validator(schema)
    return {json.dumps(c, separators=(",", ":")) for c in candidates if v.is_valid(c)}


def objects(keys, values):
    """Objects with keys in the given order (a subset), values from a pool."""
    out = []
    for r in range(len(keys) + 1):
        for ks in itertools.combinations(keys, r):
            for vs in itertools.product(values, repeat=r):
                out.append(dict(zip(ks, vs)))
    return out


@pytest.mark.parametrize("case", ["object", "array", "anyof", "pattern", "nested"])
def test_oracle_schema(case):
    pool = [True, False, None, 1, 2, -1, "x", "ab"]
    if case == "object":
        schema = {"type": "object", "properties": {"a": {"type": "boolean"}, "b": {"enum": [1, 2]}},
                  "required": ["b"], "additionalProperties": False}
        cands = objects(["a", "b"], pool)
    elif case == "array":
        schema = {"type": "array", "items": {"enum": ["x", 2]}, "maxItems": 2}
        cands = [list(t) for n in range(4) for t in itertools.product(pool, repeat=n)]
    elif case == "anyof":
        schema = {"anyOf": [{"const": "ab"}, {"type": "integer", "minimum": -2, "maximum": 12}]}
        cands = list(range(-30, 40)) + pool
    elif case == "pattern":
        schema = {"type": "string", "pattern": "^a[bc]?$"}
        cands = ["".join(t) for n in range(4) for t in itertools.product("abc", repeat=n)] + pool
    else:
        schema = {"type": "object", "properties": {"k": {"type": "array", "items": {"type": "null"},
                                                         "maxItems": 1}}, "additionalProperties": False}
        cands = objects(["k"], [[], [None], [None, None], None, 1])
    lang = finite_language(schema, cands)
    assert lang
    prefixes = {s[:k] for s in lang for k in range(len(s) + 1)}
    chars = sorted(set("".join(lang)))
    tokens = chars + sorted({s[i:i + 3] for s in lang for i in range(0, len(s), 2)})[:30] + [None]
    nodes = oracle("schema", json.dumps(schema), tokens, 4, ["--text", "--compact"])
    check_oracle(nodes, tokens, lambda w: w in prefixes, lambda w: w in lang)


# ---------------------------------------------------------------------------
# bad input and bounds

BAD = [
    ("schema", '{"type":"object","foo":1}', "unknown keyword 'foo'"),
    ("schema", '{"not":{}}', "keyword 'not' is not supported"),
    ("schema", '{"type":"strin"}', "unknown type"),
    ("schema", "{oops", "not valid JSON"),
    ("schema", '{"$ref":"#/$defs/none"}', "points at nothing"),
    ("schema", '{"type":"string","format":"ipv4"}', "format 'ipv4' is not supported"),
    ("schema", '{"type":"integer","minimum":3,"maximum":1}', "no integer"),
    ("gbnf", 'root ::= "a', "unterminated string"),
    ("gbnf", "root ::= foo", "undefined rule 'foo'"),
    ("gbnf", 'root ::= root "x" | "y"', "left recursion"),
    ("gbnf", 'start ::= "a"', "no 'root' rule"),
    ("regex", "(ab", "missing )"),
    ("regex", "(?=x)y", "lookaround"),
    ("regex", "(a|b)*a(a|b){20}", "too large"),
]


@pytest.mark.parametrize("kind,text,msg", BAD)
def test_bad_input(kind, text, msg):
    p = tool("check", kind, text, "--text", timeout=120)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    err = p.stderr.decode()
    assert err.startswith("error: ") and msg in err, err


def test_pathological_bounded(tmp_path):
    big_enum = {"enum": [f"v{i:05d}-{(i * 2654435761) % 2**32:08x}" for i in range(10000)]}
    deep = '{"type":"array","items":' * 1000 + '{"type":"null"}' + "}" * 1000
    cases = [("schema", json.dumps(big_enum), (0,)), ("schema", deep, (2,)),
             ("regex", "(a|b)*a(a|b){20}", (2,)), ("regex", "(x+x+)+y", (0,)),
             ("gbnf", "root ::= " + "(" * 300 + '"a"' + ")" * 300, (2,))]
    for kind, text, codes in cases:
        f = tmp_path / "src"
        f.write_text(text)
        p = tool("check", kind, str(f), timeout=60)
        assert p.returncode in codes, (kind, text[:80], p.returncode, p.stderr)
        if p.returncode == 2:
            assert p.stderr.startswith(b"error: ")

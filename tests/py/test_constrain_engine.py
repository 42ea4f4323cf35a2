"""Constraints in the serving engine (tests/tool_engine.c with c=KIND:FILE),
on the default model with real prompts:

- JSON Schema: a representative subset of tests/data/constrain/schemas
  (nested objects, arrays of objects, enums, optional fields, $ref
  recursion, anyOf of objects, formats, number ranges), greedy and
  sampled at temperature 1: every completion that ends with reason stop
  parses and validates with the jsonschema package (formats checked);
- regexes: every one of tests/data/constrain/regexes.txt, checked with
  Python's re.fullmatch (re.ASCII, as documented);
- GBNF: every grammar of tests/data/constrain/grammars, checked by the
  Earley recognizer written in Python in test_constrain.py;
- batching: constrained and free requests mixed in one batch give the
  same tokens as each run alone, greedy and seeded sampling;
- speculation (prompt lookup, and a draft model), preemption and prefix
  caching change nothing in a constrained greedy output;
- a request ends as soon as its output is complete (no step is spent on
  an end token the constraint forces), and enough outputs do end with
  stop for the validation to mean something;
- bad input: compile errors name the problem; ignore_eos is refused.
"""
import glob
import json
import os
import re
import tempfile

import jsonschema
import pytest

from conftest import ROOT, build_path, run
from test_constrain import grammar, validator

TOOL = build_path("release", "tool_engine")
DATA = os.path.join(ROOT, "tests", "data", "constrain")
STOP, LENGTH, ERROR = 2, 1, 4

# a spread of shapes (each a file of tests/data/constrain/schemas): flat
# objects, formats, anyOf/oneOf of objects, enums through $ref, a large
# enum with recursion, recursion through $ref, arrays of objects, bare
# numbers, integers and strings
SCHEMAS = ["person", "address", "shapes_anyof", "large_enum_recursive", "payment_oneof",
           "pydantic_enum_ref", "openai_strict", "int_enum", "exclusive_number", "uuid_only",
           "linked_list", "movie", "weather", "recipe", "tree"]
GRAMMARS = sorted(glob.glob(os.path.join(DATA, "grammars", "*.gbnf")))
with open(os.path.join(DATA, "regexes.txt"), encoding="utf-8") as _f:
    REGEXES = [line.rstrip("\n") for line in _f if line.strip()]


def schema_path(name):
    return os.path.join(DATA, "schemas", name + ".json")


def parse(out):
    rows = []
    for line in out.splitlines():
        head, _, hx = line.partition(" |")
        f = head.split()
        rows.append({"finish": int(f[0]), "n_gen": int(f[1]), "ids": [int(x) for x in f[2:]],
                     "text": bytes.fromhex(hx.strip())})
    return rows


def engine(model, lines, *args):
    p = run([TOOL, model, "-t", "2", *args], input="".join(lines), text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    st = [l for l in p.stderr.splitlines() if l.startswith("kv_used=")][-1]
    stats = {k: int(v) for k, v in (kv.split("=") for kv in st.split())}
    errors = [l for l in p.stderr.splitlines() if l.startswith("tool_engine: error")]
    return parse(p.stdout), stats, errors


def chat(vocab, text):
    p = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    return " ".join(map(str, vocab.tokenize(p.encode(), add_bos=False, special=True)))


def line(max_tokens, temp, seed, prompt, cons=None, stop="-"):
    c = f" c={cons}" if cons else ""
    return f"{max_tokens} {temp} {seed} {stop}{c} {prompt}\n"


@pytest.fixture(scope="module")
def runs(model_path, llama_vocab, tmp_path_factory):
    """Every schema, regex and grammar: one greedy request and two sampled
    at temperature 1, all in one batch. Returns {kind: [(source, temp,
    output)]} and the engine's stats."""
    d = tmp_path_factory.mktemp("regexes")
    lines, meta = [], []
    for i, name in enumerate(SCHEMAS):
        schema = json.load(open(schema_path(name), encoding="utf-8"))
        prompt = chat(llama_vocab, "Reply with a JSON value that follows this JSON schema:\n"
                      + json.dumps({k: v for k, v in schema.items() if k != "examples"}))
        for j, temp in enumerate((0, 1, 1)):
            lines.append(line(128, temp, 100 * i + j, prompt, f"schema:{schema_path(name)}"))
            meta.append(("schema", name, temp))
    for i, rx in enumerate(REGEXES):
        f = d / f"{i}.re"
        f.write_text(rx, encoding="utf-8")
        prompt = chat(llama_vocab, f"Write one string that matches the regular expression {rx}")
        for j, temp in enumerate((0, 1, 1)):
            lines.append(line(48, temp, 1000 + 10 * i + j, prompt, f"regex:{f}"))
            meta.append(("regex", rx, temp))
    for i, path in enumerate(GRAMMARS):
        prompt = chat(llama_vocab, "Write text in this grammar (GBNF):\n"
                      + open(path, encoding="utf-8").read())
        for j, temp in enumerate((0, 1, 1)):
            lines.append(line(96, temp, 2000 + 10 * i + j, prompt, f"gbnf:{path}"))
            meta.append(("gbnf", path, temp))
    outs, stats, errors = engine(model_path, lines, "-r", "64", "-s", "1024")
    assert not errors, errors
    assert stats["kv_used"] == 0
    res = {"schema": [], "regex": [], "gbnf": []}
    for (kind, src, temp), o in zip(meta, outs):
        assert o["finish"] in (STOP, LENGTH), (src, o)
        res[kind].append((src, temp, o))
    return res, stats


def complete(rows):
    return [(src, temp, o["text"].decode("utf-8")) for src, temp, o in rows if o["finish"] == STOP]


def test_schema_outputs_validate(runs):
    rows = runs[0]["schema"]
    done = complete(rows)
    for name, _, text in done:
        validator(json.load(open(schema_path(name), encoding="utf-8"))).validate(json.loads(text))
    # the test means something only when enough outputs are complete (the
    # 135M model loops on recursive schemas until max_tokens)
    assert len(done) >= 0.5 * len(rows), f"{len(done)} of {len(rows)} complete"
    assert {n for n, t, _ in done if t == 0} and {n for n, t, _ in done if t == 1}


def test_regex_outputs_match(runs):
    rows = runs[0]["regex"]
    done = complete(rows)
    for rx, _, text in done:
        assert re.fullmatch(rx, text, re.ASCII), (rx, text)
    assert len(done) >= 0.7 * len(rows), f"{len(done)} of {len(rows)}"


def test_grammar_outputs_parse(runs):
    rows = runs[0]["gbnf"]
    done = complete(rows)
    for path, _, text in done:
        assert grammar(path)[0].status(text) == "1", (path, text)
    assert len(done) >= 0.5 * len(rows), f"{len(done)} of {len(rows)}"


def test_greedy_masks_are_rare(runs):
    """Sampled requests build the mask for every token (guide.h says why);
    greedy ones only when the model's top token is refused. A third of
    the requests are greedy, so fewer masks than tokens means the
    candidate test works."""
    st = runs[1]
    assert st["cons_tokens"] > 0 and st["cons_masks"] < st["cons_tokens"], st


# ---------------------------------------------------------------------------
# the engine's other features do not change a constrained output


@pytest.fixture(scope="module")
def mixed(llama_vocab):
    """Constrained (schema, grammar, regex, any JSON) and free requests,
    greedy and seeded sampling, one with a stop string."""
    person = schema_path("person")
    tree = schema_path("tree")
    with tempfile.NamedTemporaryFile("w", suffix=".re", delete=False) as f:
        f.write(REGEXES[2])
    ask = chat(llama_vocab, "Describe a person as JSON, then a date.")
    copy = chat(llama_vocab, 'Repeat exactly: {"name": "Ada", "age": 36} {"name": "Ada", "age": 36}')
    free = chat(llama_vocab, "Tell me a short story.")
    return [
        line(64, 0, 1, ask, f"schema:{person}"),
        line(48, 0, 2, free),
        line(64, 0.8, 3, ask, f"schema:{person}"),
        line(64, 0, 4, copy, f"schema:{person}"),
        line(40, 0.8, 5, free),
        line(96, 0, 6, ask, f"schema:{tree}"),
        line(24, 0, 7, ask, f"regex:{f.name}"),
        line(64, 1.0, 8, ask, f"gbnf:{GRAMMARS[0]}"),
        line(48, 0, 9, ask, "json:/dev/null"),
        line(64, 0, 10, copy, f"schema:{person}", stop="age"),
        line(64, 0.7, 11, copy, f"schema:{tree}"),
    ]


@pytest.fixture(scope="module")
def alone(model_path, mixed):
    outs, stats, errors = engine(model_path, mixed, "--serial", "-r", "1")
    assert not errors, errors
    assert stats["kv_used"] == 0
    return outs


def same(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        assert (x["ids"], x["finish"], x["text"]) == (y["ids"], y["finish"], y["text"]), f"request {i}"
    assert len(a) == len(b)


def test_mixed_batch_equals_alone(model_path, mixed, alone):
    got, stats, _ = engine(model_path, mixed, "-r", "16")
    same(alone, got)
    assert stats["kv_used"] == 0
    assert any(o["finish"] == STOP for o in alone)


@pytest.mark.parametrize("mode", [["--spec", "ngram"], ["--spec", "ngram", "--spec-k", "3"],
                                  ["--spec", "draft", "--draft", "SELF"]])
def test_speculation_changes_nothing_greedy(model_path, mixed, alone, mode):
    """Greedy requests: identical tokens with proposals (the copy prompt
    gets many accepted). Sampled requests draw differently under
    speculation (the proposal is tested first) but must stay valid."""
    mode = [model_path if a == "SELF" else a for a in mode]
    got, stats, errors = engine(model_path, mixed, "-r", "16", *mode)
    assert not errors, errors
    for i, (a, b) in enumerate(zip(alone, got)):
        if float(mixed[i].split()[1]) == 0:
            assert (a["ids"], a["finish"]) == (b["ids"], b["finish"]), f"request {i}"
    assert stats["spec_accepted"] > 0, stats
    assert stats["kv_used"] == 0
    person = json.load(open(schema_path("person")))
    for i in (2,):  # a sampled schema request: valid when complete
        if got[i]["finish"] == STOP:
            validator(person).validate(json.loads(got[i]["text"]))


def test_preemption_and_prefix_cache(model_path, mixed, alone):
    """A KV pool small enough to preempt, every request twice (the second
    copy reuses the first one's prompt blocks): a preempted request keeps
    its constraint state (its generated tokens do not change) and
    recomputes only the cache."""
    # 12 blocks of 16 tokens: room for the largest request (a short
    # prompt and 96 tokens) but not for eight at once, even with the
    # prompts' shared blocks
    block = 30 * 3 * 4096
    got, stats, _ = engine(model_path, mixed + mixed, "-r", "8", "--kv-mem", str(12 * block))
    assert stats["preemptions"] > 0, stats
    same(alone + alone, got)
    assert stats["kv_used"] == 0


def test_ends_when_complete(model_path, llama_vocab, tmp_path):
    """A regex with one string: the request ends right after its last
    token, with reason stop, without a step for the end token."""
    f = tmp_path / "one.re"
    f.write_text("yes")
    prompt = chat(llama_vocab, "Say no.")
    outs, stats, _ = engine(model_path, [line(20, 0, 1, prompt, f"regex:{f}")])
    assert outs[0]["finish"] == STOP and outs[0]["text"] == b"yes"
    # one step per token (the prefill step makes the first): none for EOG
    assert stats["steps"] == outs[0]["n_gen"], stats


def test_or_text_either_branch(model_path, llama_vocab):
    """or_text (tool_choice auto): a JSON object under the schema, or any
    text that does not start with '{'. A few-shot prompt makes the model
    open an object, a code prompt makes it write text; sampled requests
    may go either way and must be valid in the branch they take."""
    path = schema_path("person")

    def raw(t):
        return " ".join(map(str, llama_vocab.tokenize(t.encode(), add_bos=False, special=True)))
    shot = raw("<|im_start|>user\nA person<|im_end|>\n<|im_start|>assistant\n"
               '{"name": "Bo", "age": 3}<|im_end|>\n<|im_start|>user\nAnother person<|im_end|>\n'
               "<|im_start|>assistant\n")
    lines = [line(40, 0, 1, shot, f"schema+text:{path}"),
             line(24, 0, 2, raw("const person = "), f"schema+text:{path}")]
    lines += [line(40, 1, 3 + i, shot, f"schema+text:{path}") for i in range(6)]
    outs, _, errors = engine(model_path, lines, "-r", "8")
    assert not errors
    person = json.load(open(path))
    for o in outs:
        t = o["text"].decode("utf-8")
        if t.startswith("{") and o["finish"] == STOP:
            validator(person).validate(json.loads(t))
    assert outs[0]["text"].startswith(b"{") and outs[0]["finish"] == STOP, outs[0]
    assert outs[1]["text"] and not outs[1]["text"].startswith(b"{"), outs[1]


@pytest.mark.parametrize("spec,msg", [
    ("schema:{}", None),
    ("regex:(", "regex"),
    ("gbnf:root ::= foo", "undefined"),
    ('schema:{"type": "object", "patternProperties": {}}', "patternProperties"),
    ('schema:{"type": "strin"}', "strin"),
])
def test_compile_errors(model_path, tmp_path, spec, msg):
    kind, text = spec.split(":", 1)
    f = tmp_path / "src"
    f.write_text(text)
    p = run([TOOL, model_path], input=line(4, 0, 1, "1 2 3", f"{kind}:{f}"), text=True)
    if msg is None:
        assert p.returncode == 0, p.stderr
        return
    assert p.returncode == 2, p.stderr
    assert "compile 0:" in p.stderr and msg in p.stderr, p.stderr


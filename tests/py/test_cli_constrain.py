"""`anvil run` / `anvil chat` with a constraint, and through the engine.

- --json-schema, --regex, --grammar: greedy and sampled outputs that end
  with "stop: eos (output complete)" validate with jsonschema, match with
  Python's re.fullmatch, parse with the Earley recognizer of
  test_constrain.py;
- --spec ngram and --spec draft change nothing in a greedy output, free or
  constrained, and keep the stats line;
- chat keeps the constraint for every turn and reuses the previous turns'
  cache;
- bad input: one error line naming the problem, exit status 2.
"""
import json
import os
import re

import pytest

from conftest import ROOT, run
from test_cli_errors import check_error
from test_constrain import grammar, validator

DATA = os.path.join(ROOT, "tests", "data", "constrain")
PERSON = os.path.join(DATA, "schemas", "person.json")
STATS = re.compile(r"\[prompt (\d+) tok \((\d+) reused\), prefill [\d.]+ tok/s \| generated (\d+) "
                   r"tok, decode [\d.]+ tok/s \| stop: ([a-z ()]+)\]")
DATE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"


def anvil(binary, model, *args, stdin=None):
    p = run([binary, *args[:1], "-m", model, "-t", "2", *args[1:]], input=stdin, text=True,
            timeout=300)
    assert p.returncode == 0, p.stderr
    stats = STATS.findall(p.stderr)
    assert stats, p.stderr
    return p.stdout, stats


@pytest.mark.parametrize("temp,seed", [("0", "1"), ("1", "5"), ("1", "6")])
def test_json_schema(anvil_bin, model_path, temp, seed):
    out, st = anvil(anvil_bin, model_path, "run", "--chat", "-p", "Describe a person as JSON.",
                    "--json-schema", PERSON, "-n", "96", "--temp", temp, "--seed", seed)
    assert len(st) == 1
    # (96 tokens leave room: each of these seeds completes the object)
    assert st[0][3] == "eos (output complete)", st
    validator(json.load(open(PERSON))).validate(json.loads(out))


def test_regex(anvil_bin, model_path):
    for temp in ("0", "1"):
        out, st = anvil(anvil_bin, model_path, "run", "--chat", "-p", "Write a date.",
                        "--regex", DATE, "-n", "32", "--temp", temp, "--seed", "2")
        assert st[0][3] == "eos (output complete)", st
        assert re.fullmatch(DATE, out, re.ASCII), out


def test_dead_end(anvil_bin, model_path):
    """A regex whose second byte (0x13) no token of SmolLM2 spells: "x" is
    printed, then the run stops with exit 2 and says why."""
    p = run([anvil_bin, "run", "-m", model_path, "-t", "2", "-p", "hi", "--regex", "x\x13",
             "-n", "8"], text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stdout == "x", p.stdout
    assert "stop: constraint dead end" in p.stderr and "no token of the vocabulary" in p.stderr, \
        p.stderr


def test_grammar(anvil_bin, model_path):
    path = os.path.join(DATA, "grammars", "arithmetic.gbnf")
    earley, _ = grammar(path)
    out, st = anvil(anvil_bin, model_path, "run", "--chat", "-p", "Write an arithmetic expression.",
                    "--grammar", path, "-n", "48", "--temp", "0")
    if st[0][3] == "eos (output complete)":
        assert earley.status(out) == "1", out
    else:
        assert st[0][3] == "length", st
        assert earley.status(out) in ("1", "p"), out  # complete but may go on


@pytest.mark.parametrize("cons", [[], ["--json-schema", PERSON]], ids=["free", "schema"])
def test_speculation_changes_nothing(anvil_bin, model_path, cons):
    prompt = 'Repeat exactly: {"name": "Ada", "age": 36} {"name": "Ada", "age": 36}'
    base = ["run", "--chat", "-p", prompt, "-n", "40", "--temp", "0", *cons]
    want, st0 = anvil(anvil_bin, model_path, *base)
    for mode in (["--spec", "ngram"], ["--spec", "ngram", "--spec-k", "3"],
                 ["--spec", "draft", "--draft", model_path]):
        got, st = anvil(anvil_bin, model_path, *base, *mode)
        assert got == want, mode
        assert st[0][2:] == st0[0][2:], (mode, st, st0)


def test_chat_keeps_constraint_and_cache(anvil_bin, model_path, tmp_path):
    path = tmp_path / "p.json"
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    path.write_text(json.dumps(schema))
    out, st = anvil(anvil_bin, model_path, "chat", "--json-schema", str(path), "-n", "64",
                    "--temp", "0", stdin="A person please.\nAnother one.\n")
    assert len(st) == 2, st
    assert 0 < int(st[1][1]) <= int(st[1][0]), st  # the second turn reuses the first's cache
    dec, pos, replies = json.JSONDecoder(), 0, []
    for _ in st:  # each reply is one JSON value, then a newline
        v, pos = dec.raw_decode(out, pos)
        replies.append(v)
        assert out[pos] == "\n", out
        pos += 1
    assert pos == len(out), out
    for r, s in zip(replies, st):
        assert s[3] == "eos (output complete)", st
        validator(schema).validate(r)


def test_bad_constraints(anvil_bins, model_path, tmp_path):
    bad_schema = tmp_path / "s.json"
    bad_schema.write_text('{"type": "object", "propertyNames": {"pattern": "a"}}')
    not_json = tmp_path / "n.json"
    not_json.write_text('{"type": ')
    undefined = tmp_path / "g.gbnf"
    undefined.write_text("root ::= foo\n")
    left = tmp_path / "l.gbnf"
    left.write_text('root ::= root "a" | "b"\n')
    cases = [
        (["--json-schema", str(bad_schema)], "propertyNames"),
        (["--json-schema", str(not_json)], "--json-schema"),
        (["--json-schema", str(tmp_path / "missing.json")], "cannot read"),
        (["--grammar", str(undefined)], "undefined rule 'foo'"),
        (["--grammar", str(left)], "left"),
        (["--regex", "(a"], "--regex"),
        (["--regex", DATE, "--json-schema", PERSON], "exclude each other"),
        (["--regex", DATE, "--ignore-eos"], "--ignore-eos"),
        (["--spec", "magic"], "--spec"),
        (["--spec", "draft"], "--draft"),
        (["--spec", "ngram", "--spec-k", "17"], "--spec-k"),
    ]
    for b in anvil_bins:
        for args, want in cases:
            check_error([b, "run", "-m", model_path, "-p", "hi", *args], want)

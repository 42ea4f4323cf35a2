"""Structured output through `anvil serve`, with the `openai` client as
users run it:

- client.chat.completions.parse and client.beta.chat.completions.parse
  with pydantic models (nested models, enums, Literal, Optional, lists,
  Field bounds): the parsed object comes back, and the raw content
  validates with jsonschema against the schema the client sent;
- the streaming helper (client.beta.chat.completions.stream) with a
  pydantic model;
- response_format json_schema / json_object by hand, on /v1/chat/completions
  and /v1/completions, streamed and not; the extensions grammar and regex;
- tool calling: required, a named function and auto, with
  openai.pydantic_function_tool and parse (parsed_arguments), streamed as
  tool_calls deltas, and a conversation that carries a call and its
  result back;
- many sampled completions (temperature 1) over schemas of
  tests/data/constrain: every one that ends with finish_reason stop
  validates;
- bad input: invalid schemas, unsupported keywords, grammar and regex
  errors, conflicting fields, unknown tools, pathological inputs (a
  10,000-value enum, an exploding regex) answered with a 400 naming the
  problem in bounded time, and the server still answers afterwards.
"""
import enum
import json
import os
import re
import time
from typing import List, Literal, Optional

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from anvil_server import ROOT, Server, check_error, serve_bin, sse_events

DATA = os.path.join(ROOT, "tests", "data", "constrain")


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "1024", "--parallel", "16", "--kv-mem", "256M")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def client(srv):
    return srv.client()


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


def ask(text):
    return [{"role": "user", "content": text}]


# ---------------------------------------------------------------------------
# pydantic models through the openai client


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Person(BaseModel):
    name: str = Field(max_length=30)
    age: int = Field(ge=0, le=120)


class Item(BaseModel):
    sku: str = Field(max_length=12)
    qty: int = Field(ge=1, le=99)


class Order(BaseModel):
    id: int
    status: Literal["open", "shipped", "closed"]
    color: Color
    items: List[Item] = Field(max_length=3)
    note: Optional[str] = Field(max_length=20)


def schema_sent(model):
    """The schema the client puts in response_format for a pydantic model."""
    from openai.lib._pydantic import to_strict_json_schema
    return to_strict_json_schema(model)


@pytest.mark.parametrize("api", ["chat", "beta"])
@pytest.mark.parametrize("model", [Person, Order])
def test_parse_pydantic(client, model_id, api, model):
    comp = (client.chat.completions if api == "chat" else client.beta.chat.completions).parse(
        model=model_id, messages=ask(f"Give me one {model.__name__.lower()} as JSON."),
        response_format=model, max_tokens=300, temperature=0)
    ch = comp.choices[0]
    assert ch.finish_reason == "stop", ch
    assert isinstance(ch.message.parsed, model)
    jsonschema.validate(json.loads(ch.message.content), schema_sent(model))


def test_parse_sampled(client, model_id):
    """Temperature 1, several seeds: every completion that stops parses."""
    done = 0
    for seed in range(6):
        try:
            comp = client.chat.completions.parse(
                model=model_id, messages=ask("Describe an order as JSON."), response_format=Order,
                max_tokens=200, temperature=1.0, seed=seed)
        except openai.LengthFinishReasonError:
            continue
        assert isinstance(comp.choices[0].message.parsed, Order)
        done += 1
    assert done >= 3, done


def test_stream_helper(client, model_id):
    with client.beta.chat.completions.stream(
            model=model_id, messages=ask("A person as JSON."), response_format=Person,
            max_tokens=200, temperature=0) as stream:
        n = sum(1 for _ in stream)
        final = stream.get_final_completion()
    assert n > 2
    assert isinstance(final.choices[0].message.parsed, Person)


# ---------------------------------------------------------------------------
# response_format, grammar and regex by hand


SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 40},
    "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
    "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}},
    "required": ["title", "year"], "additionalProperties": False}


def rf(schema):
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_chat(client, model_id, stream):
    kw = dict(model=model_id, messages=ask("A film as JSON."), max_tokens=120, temperature=0,
              response_format=rf(SCHEMA))
    if stream:
        text, finish = "", None
        for ch in client.chat.completions.create(stream=True, **kw):
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                finish = ch.choices[0].finish_reason or finish
    else:
        r = client.chat.completions.create(**kw)
        text, finish = r.choices[0].message.content, r.choices[0].finish_reason
    assert finish == "stop", text
    jsonschema.validate(json.loads(text), SCHEMA)


def test_json_object(client, model_id):
    """A prompt that the model answers with a complete object at temperature
    0 (to "Some JSON please." it nests until max_tokens, and a cut object
    proves little)."""
    r = client.chat.completions.create(
        model=model_id, messages=ask("A person as a JSON object with a name and an age."),
        max_tokens=200, temperature=0, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop", r
    assert isinstance(json.loads(r.choices[0].message.content), dict)


@pytest.mark.parametrize("stream", [False, True])
def test_completions_endpoint(srv, model_id, stream):
    """response_format and the extensions on /v1/completions."""
    cases = [({"regex": r" (19|20)[0-9]{2}\."}, lambda t: re.fullmatch(r" (19|20)[0-9]{2}\.", t)),
             ({"grammar": 'root ::= " " ("yes" | "no") "."'}, lambda t: t in (" yes.", " no.")),
             ({"response_format": rf(SCHEMA)}, lambda t: jsonschema.validate(json.loads(t), SCHEMA)
              is None)]
    for extra, ok in cases:
        body = dict(model=model_id, prompt="Answer: The first film was made in", max_tokens=60,
                    temperature=0, stream=stream, **extra)
        st, _, data = srv.post("/v1/completions", body)
        assert st == 200, data
        if stream:
            ev = sse_events(data)
            text = "".join(e["choices"][0]["text"] for e in ev if e["choices"])
            finish = [e["choices"][0]["finish_reason"] for e in ev if e["choices"]][-1]
        else:
            d = json.loads(data)
            text, finish = d["choices"][0]["text"], d["choices"][0]["finish_reason"]
        assert finish == "stop" and ok(text), (extra, text)


def test_sampled_schemas_validate(srv, model_id):
    """Temperature 1 over schemas of the test data, in parallel: every
    completion that stops validates."""
    import concurrent.futures as cf
    names = ["person", "address", "shapes_anyof", "payment_oneof", "movie", "int_enum"]
    jobs = []
    for name in names:
        schema = json.load(open(os.path.join(DATA, "schemas", name + ".json")))
        for seed in range(3):
            jobs.append((name, schema, seed))

    def one(job):
        name, schema, seed = job
        body = {"model": model_id, "messages": ask("Reply in JSON: " + json.dumps(schema)[:300]),
                "max_tokens": 160, "temperature": 1.0, "seed": seed,
                "response_format": rf(schema)}
        st, _, data = srv.post("/v1/chat/completions", body)
        assert st == 200, data
        return name, schema, json.loads(data)["choices"][0]

    with cf.ThreadPoolExecutor(8) as ex:
        res = list(ex.map(one, jobs))
    done = 0
    for name, schema, ch in res:
        if ch["finish_reason"] == "stop":
            jsonschema.validate(json.loads(ch["message"]["content"]), schema,
                                format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            done += 1
    assert done >= len(res) // 2, f"{done} of {len(res)}"


# ---------------------------------------------------------------------------
# tool calling


class GetWeather(BaseModel):
    city: str = Field(max_length=20)
    unit: Literal["celsius", "fahrenheit"]


class SendEmail(BaseModel):
    to: str = Field(max_length=30)
    subject: str = Field(max_length=30)


TOOLS = [openai.pydantic_function_tool(GetWeather), openai.pydantic_function_tool(SendEmail)]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "SendEmail"}}])
def test_tool_call_parse(client, model_id, choice):
    comp = client.chat.completions.parse(
        model=model_id, messages=ask("What is the weather in Paris? Use the tools."), tools=TOOLS,
        tool_choice=choice, max_tokens=120, temperature=0)
    ch = comp.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.content is None
    (call,) = ch.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    if isinstance(choice, dict):
        assert call.function.name == "SendEmail"
    want = {"GetWeather": GetWeather, "SendEmail": SendEmail}[call.function.name]
    assert isinstance(call.function.parsed_arguments, want)
    json.loads(call.function.arguments)


def test_tool_call_stream(client, model_id):
    args, name, ids, finish = "", None, set(), None
    for ch in client.chat.completions.create(
            model=model_id, messages=ask("Weather in Rome in celsius?"), tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "GetWeather"}},
            max_tokens=120, temperature=0, stream=True):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        for tc in d.tool_calls or []:
            assert tc.index == 0
            if tc.id:
                ids.add(tc.id)
                name = tc.function.name
            args += tc.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    assert finish == "tool_calls" and name == "GetWeather" and len(ids) == 1
    GetWeather.model_validate_json(args)


def test_tool_auto(client, model_id):
    """auto: either a complete call or an answer that is not JSON. The
    prompts and seeds are chosen so that both come out (SmolLM2 answers the
    first two in words; seed 2 of the third is a call)."""
    kinds = set()
    for q in ("Call GetWeather for Oslo.", "Say hello in one word.",
              'Reply with only this JSON: {"name": "GetWeather", "arguments": '
              '{"city": "Oslo", "unit": "celsius"}}'):
        for seed in range(3):
            comp = client.chat.completions.create(
                model=model_id, messages=ask(q), tools=TOOLS, tool_choice="auto", max_tokens=80,
                temperature=1.0, seed=seed)
            ch = comp.choices[0]
            if ch.message.tool_calls:
                (call,) = ch.message.tool_calls
                if ch.finish_reason == "tool_calls":
                    want = {"GetWeather": GetWeather, "SendEmail": SendEmail}[call.function.name]
                    want.model_validate_json(call.function.arguments)
                else:  # cut by max_tokens: a prefix of a call
                    assert ch.finish_reason == "length", ch
                kinds.add("call")
            else:
                assert ch.finish_reason in ("stop", "length"), ch
                assert not ch.message.content.startswith("{")
                kinds.add("text")
    assert kinds == {"call", "text"}


def test_tool_conversation(client, model_id):
    """A call and its result sent back: accepted, answered in words with
    tool_choice none."""
    msgs = ask("Weather in Paris?") + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "GetWeather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees, sunny"}]
    r = client.chat.completions.create(model=model_id, messages=msgs, tools=TOOLS,
                                       tool_choice="none", max_tokens=30, temperature=0)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls


# ---------------------------------------------------------------------------
# bad input


def chat(model_id, **kw):
    return dict({"model": model_id, "messages": ask("hi"), "max_tokens": 4}, **kw)


BAD = [
    ({"response_format": {"type": "xml"}}, "response_format", "xml"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "name"),
    ({"response_format": rf({"type": "object", "not": {}})}, "response_format", "not"),
    ({"response_format": rf({"type": "object", "patternProperties": {"a": {}}})}, "response_format",
     "patternProperties"),
    ({"response_format": rf({"type": "strin"})}, "response_format", "strin"),
    ({"response_format": rf({"$ref": "#/$defs/missing"})}, "response_format", "missing"),
    ({"response_format": rf({"type": "string", "pattern": "(a)\\1"})}, "response_format", "backreference"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}},
     "response_format.json_schema.schema", "schema"),
    ({"grammar": "root ::= foo"}, "grammar", "undefined"),
    ({"grammar": "root ::= root \"a\" | \"b\""}, "grammar", "left recursion"),
    ({"grammar": "root ::= \"a"}, "grammar", "line 1"),
    ({"grammar": 5}, "grammar", "string"),
    ({"regex": "a(b"}, "regex", "regex"),
    ({"regex": "(?=a)b"}, "regex", "lookaround"),
    ({"regex": "a", "grammar": "root ::= \"a\""}, None, "at most one"),
    ({"regex": "a", "response_format": {"type": "json_object"}}, None, "at most one"),
    ({"tool_choice": "required"}, "tool_choice", "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice", "nope"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "required"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0]", "name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                              "if": {}}}}],
      "tool_choice": "required"}, "tools", "if"),
    ({"tools": TOOLS, "tool_choice": "auto", "response_format": {"type": "json_object"}},
     "response_format", "auto"),
    ({"tools": TOOLS, "regex": "a"}, "regex", "tool"),
    ({"functions": [{"name": "f"}]}, "functions", "tools"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id", "tool_call_id"),
    ({"response_format": {"type": "json_object"}, "ignore_eos": True}, None, "ignore_eos"),
]


@pytest.mark.parametrize("patch,param,word", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input(srv, model_id, patch, param, word):
    st, _, data = srv.post("/v1/chat/completions", chat(model_id, **patch))
    e = check_error(st, data, 400, param=param)
    assert word.lower() in e["message"].lower(), e


@pytest.mark.parametrize("stream", [False, True])
def test_dead_end(srv, model_id, stream):
    """A regex that needs a byte no token spells (SmolLM2's vocabulary has
    no 0x13): the output "x" is drawn, then nothing can follow. The request
    ends with a 400 (in the stream: an error event after the text sent)
    saying why, never a hang or a 500, and the counter of such ends moves."""
    def dead_ends():
        return srv.metrics()['anvil_requests_finished_total{reason="constraint"}']
    before = dead_ends()
    body = chat(model_id, regex="x\x13", max_tokens=8, stream=stream)
    st, _, data = srv.post("/v1/chat/completions", body)
    if not stream:
        e = check_error(st, data, 400, code="constraint_unsatisfiable")
        assert e["type"] == "invalid_request_error"
    else:
        assert st == 200, data
        ev = sse_events(data)
        text = "".join(c["choices"][0]["delta"].get("content") or ""
                       for c in ev if c.get("choices"))
        assert text == "x", ev
        assert "error" in ev[-1] and ev[-1]["error"]["code"] == "constraint_unsatisfiable", ev
        e = ev[-1]["error"]
    assert "no token of the vocabulary" in e["message"], e
    t0 = time.time()  # counted just after the answer is released
    while dead_ends() == before and time.time() - t0 < 10:
        time.sleep(0.02)
    assert dead_ends() == before + 1
    st, _, data = srv.post("/v1/chat/completions", chat(model_id))
    assert st == 200, data


def test_pathological_bounded(srv, model_id):
    """Big constraints: within the bounds they simply work; past one
    (the state bound of the exploding regex) a 400 saying so; the server
    answers after. How long each compile takes is bench_constrain's
    business (compile:enum10k, refuse:work); the request timeout here is
    only a watchdog for a hang."""
    big_enum = {"enum": [f"value-{i:05d}-{'x' * (i % 7)}" for i in range(10000)]}
    cases = [
        ({"response_format": rf(big_enum)}, None),
        ({"regex": "(a|b)*a(a|b){24}"}, "regex"),
        ({"regex": "[a-z]{1,5000}[0-9]{1,5000}"}, None),
        ({"grammar": "root ::= " + " ".join(f'"{i}"' for i in range(20000))}, None),
    ]
    for extra, refused in cases:
        st, _, data = srv.post("/v1/chat/completions", chat(model_id, **extra), timeout=300)
        if refused:
            e = check_error(st, data, 400, param=refused)
            assert "too large" in e["message"], e
        else:
            assert st == 200, (list(extra), data)
    st, _, data = srv.post("/v1/chat/completions", chat(model_id))
    assert st == 200, data

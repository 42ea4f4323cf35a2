"""The OpenAI Responses API (POST /v1/responses, GET and DELETE
/v1/responses/{id}) through `anvil serve`, with the `openai` client and the
OpenAI Agents SDK as users run them:

- client.responses.create with a string, with items (messages with parts,
  instructions, developer role), text.format json_schema (the output
  validates with jsonschema) and json_object, max_output_tokens
  (status incomplete, incomplete_details);
- tools with tool_choice required and named: a function_call output item
  whose arguments validate against the tool's parameters; the call's
  result sent back as function_call_output by previous_response_id and as
  full items;
- streaming (client.responses.stream and stream=True): every event parsed
  by the client, sequence numbers 0, 1, 2, ..., the event order, the
  final response equal to the non-streamed one under a fixed seed, calls
  streamed as function_call_arguments deltas;
- retrieve and delete; store false; an unknown previous_response_id is a
  404; the store's bounds and expiry through the environment;
- bad input on every field: a 400 (or 404) in the OpenAI error shape
  naming the field, never a crash; the seed corpus of the fuzz harness
  (tests/fuzz/corpus/responses) answered without a 500;
- the Agents SDK: an Agent with one function tool runs to a final output.
"""
import asyncio
import json
import os

import jsonschema
import openai
import pytest

from anvil_server import ROOT, Server, check_error, serve_bin

CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "responses")

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "1024", "--parallel", "4", "--kv-mem", "128M")
    yield s
    assert s.stop() == 0, s.stderr()


M = {}  # the served model's id


@pytest.fixture(scope="module")
def client(srv):
    c = srv.client()
    M["id"] = c.models.list().data[0].id
    return c


def text_of(resp):
    return "".join(c.text for it in resp.output if it.type == "message" for c in it.content)


def check_shape(r, status=None):
    assert r.object == "response" and r.id.startswith("resp_")
    if status:
        assert r.status == status, r
    u = r.usage
    assert u.input_tokens > 0 and u.output_tokens > 0
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0
    for it in r.output:
        prefix = {"message": "msg_", "function_call": "fc_", "reasoning": "rs_"}[it.type]
        assert it.id.startswith(prefix)


def test_string_input(client):
    r = client.responses.create(model=M["id"], input="Say hello.", max_output_tokens=24,
                                temperature=0)
    check_shape(r)
    assert r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert text_of(r) and r.output_text == text_of(r)
    assert r.max_output_tokens == 24 and r.temperature == 0


def test_incomplete(client):
    r = client.responses.create(model=M["id"], input="Write a long story about a dragon.",
                                max_output_tokens=5, temperature=0)
    check_shape(r, "incomplete")
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 5
    assert r.output[-1].status == "incomplete"


def test_items_and_instructions(client, srv):
    items = [
        {"role": "developer", "content": "You answer in one word."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "What colour is the sky?"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "Blue."}]},
        {"role": "user", "content": "And grass?"},
    ]
    r = client.responses.create(model=M["id"], input=items, instructions="Be brief.",
                                max_output_tokens=16, temperature=0)
    check_shape(r)
    assert r.instructions == "Be brief."
    # the same conversation on the chat route gives the same text
    msgs = [{"role": "system", "content": "Be brief."},
            {"role": "system", "content": "You answer in one word."},
            {"role": "user", "content": "What colour is the sky?"},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "And grass?"}]
    c = client.chat.completions.create(model=M["id"], messages=msgs, max_tokens=16, temperature=0)
    assert c.choices[0].message.content == text_of(r)
    assert c.usage.prompt_tokens == r.usage.input_tokens


def test_json_schema(client):
    r = client.responses.create(
        model=M["id"], input="Make up a person with a name and an age, as JSON.",
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON,
                         "strict": True}},
        max_output_tokens=80, temperature=0)
    check_shape(r, "completed")
    jsonschema.validate(json.loads(r.output_text), PERSON)
    assert r.text.format.type == "json_schema"


def test_json_object(client):
    r = client.responses.create(model=M["id"], input="Reply with a JSON object.",
                                text={"format": {"type": "json_object"}}, max_output_tokens=60,
                                temperature=0)
    if r.status == "completed":
        assert isinstance(json.loads(r.output_text), dict)


def forced_call(client, **kw):
    r = client.responses.create(model=M["id"], input="What is the weather in Paris?",
                                tools=[WEATHER], max_output_tokens=64, temperature=0, **kw)
    check_shape(r, "completed")
    calls = [it for it in r.output if it.type == "function_call"]
    assert len(calls) >= 1, r.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_")
    assert call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    return r, call


def test_tool_required_then_output_by_previous_id(client):
    r, call = forced_call(client, tool_choice="required")
    assert r.tool_choice == "required" and r.tools[0].name == "get_weather"
    r2 = client.responses.create(
        model=M["id"], previous_response_id=r.id, tools=[WEATHER], tool_choice="none",
        input=[{"type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"temperature_c": 18, "sky": "clear"})}],
        max_output_tokens=32, temperature=0)
    check_shape(r2)
    assert r2.previous_response_id == r.id
    assert r2.output[0].type == "message" and text_of(r2)
    # the whole conversation was the prompt: longer than the first turn's
    assert r2.usage.input_tokens > r.usage.input_tokens
    # the same turn sent as full items gives the same answer
    items = [{"role": "user", "content": "What is the weather in Paris?"},
             {"type": "function_call", "call_id": call.call_id, "name": call.name,
              "arguments": call.arguments},
             {"type": "function_call_output", "call_id": call.call_id,
              "output": json.dumps({"temperature_c": 18, "sky": "clear"})}]
    r3 = client.responses.create(model=M["id"], input=items, tools=[WEATHER], tool_choice="none",
                                 max_output_tokens=32, temperature=0)
    assert text_of(r3) == text_of(r2)
    assert r3.usage.input_tokens == r2.usage.input_tokens


def test_tool_named(client):
    _, call = forced_call(client, tool_choice={"type": "function", "name": "get_weather"})
    assert call.name == "get_weather"


def strip_ids(d):
    d = dict(d)
    for k in ("id", "created_at"):
        d.pop(k, None)
    d["output"] = [{k: v for k, v in it.items() if k not in ("id", "call_id")}
                   for it in d["output"]]
    # the SDK's stream helper parses text parts into ParsedResponseOutputText,
    # which adds "parsed" (None without a text.format): not the server's
    for it in d["output"]:
        for part in it.get("content") or []:
            if part.get("parsed", 0) is None:
                del part["parsed"]
    # how much of the prompt the prefix cache held depends on what ran before
    d["usage"] = {k: v for k, v in d["usage"].items() if k != "input_tokens_details"}
    return d


def check_events(events):
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[1] == "response.in_progress"
    assert types[-1] in ("response.completed", "response.incomplete")
    ids = {e.response.id for e in events if hasattr(e, "response")}
    assert len(ids) == 1
    return types


@pytest.mark.parametrize("helper", [True, False])
def test_stream_equals_whole(client, helper):
    kw = dict(model=M["id"], input="Name three fruits.", max_output_tokens=20, temperature=0.8,
              extra_body={"seed": 11})
    whole = client.responses.create(**kw)
    if helper:
        with client.responses.stream(**kw) as st:
            events = list(st)
            final = events[-1].response
            if final.status == "completed":  # the helper's final needs response.completed
                assert st.get_final_response().output_text == final.output_text
    else:
        events = list(client.responses.create(stream=True, **kw))
        final = events[-1].response
    types = check_events(events)
    for t in ("response.output_item.added", "response.content_part.added",
              "response.output_text.delta", "response.output_text.done",
              "response.content_part.done", "response.output_item.done"):
        assert t in types, types
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == whole.output_text
    assert strip_ids(final.model_dump()) == strip_ids(whole.model_dump())
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [d.item.id for d in done] == [it.id for it in final.output]


def test_stream_tool_call(client):
    events = list(client.responses.create(
        model=M["id"], input="Weather in Oslo?", tools=[WEATHER], tool_choice="required",
        max_output_tokens=64, temperature=0, stream=True))
    types = check_events(events)
    assert "response.function_call_arguments.delta" in types
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.type == "function_call" and added.item.name == "get_weather"
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert done.arguments == args and done.item_id == added.item.id
    jsonschema.validate(json.loads(args), WEATHER["parameters"])
    final = events[-1].response
    assert final.status == "completed"
    assert final.output[-1].arguments == args


def test_retrieve_delete(client):
    r = client.responses.create(model=M["id"], input="Hi", max_output_tokens=4)
    got = client.responses.retrieve(r.id)
    assert got.model_dump() == r.model_dump()
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError) as ei:
        client.responses.create(model=M["id"], input="x", previous_response_id=r.id)
    assert ei.value.body["code"] == "previous_response_not_found"


def test_store_false(client, srv):
    r = client.responses.create(model=M["id"], input="Hi", max_output_tokens=4, store=False)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)
    st, _, data = srv.request("GET", "/v1/responses/" + r.id)
    check_error(st, data, 404)


def test_methods(srv):
    st, h, data = srv.request("PUT", "/v1/responses/resp_x", body="{}")
    assert st == 405
    assert "DELETE" in h.get("Allow", "") and "GET" in h.get("Allow", "")
    st, h, data = srv.request("GET", "/v1/responses")
    assert st == 405 and h.get("Allow") == "POST"
    st, _, data = srv.request("DELETE", "/v1/responses/nope")
    check_error(st, data, 404)


BAD = [
    ({}, "input"),
    ({"input": 3}, "input"),
    ({"input": []}, "input"),
    ({"input": [3]}, "input[0]"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0]"),
    ({"input": [{"role": "user"}]}, "input[0].content"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0]"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0]"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}]},
     "input[0]"),
    ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]"),
    ({"input": "x", "instructions": 5}, "instructions"),
    ({"input": "x", "model": 5}, "model"),
    ({"input": "x", "stream": "yes"}, "stream"),
    ({"input": "x", "store": 1}, "store"),
    ({"input": "x", "background": True}, "background"),
    ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "x", "max_output_tokens": 1.5}, "max_output_tokens"),
    ({"input": "x", "max_output_tokens": 100000}, "max_output_tokens"),
    ({"input": "x", "temperature": 5}, "temperature"),
    ({"input": "x", "top_p": "a"}, "top_p"),
    ({"input": "x", "tools": {}}, "tools"),
    ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"input": "x", "tools": [{"type": "function"}]}, "tools[0]"),
    ({"input": "x", "tools": [{"type": "function", "name": "bad name!"}]}, "tools[0]"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"input": "x", "tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice"),
    ({"input": "x", "tool_choice": "required"}, "tool_choice"),
    ({"input": "x", "text": 1}, "text"),
    ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "name": "a"}}},
     "text.format.schema"),
    ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "frob"}}}},
     "text.format"),
    ({"input": "x", "reasoning": {"effort": "max"}}, "reasoning.effort"),
    ({"input": "x", "reasoning": []}, "reasoning"),
    ({"input": "x", "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ({"input": "x", "truncation": "left"}, "truncation"),
    ({"input": "x", "metadata": {"a": 1}}, "metadata"),
    ({"input": "x", "top_logprobs": 3}, "top_logprobs"),
    ({"input": "x", "conversation": "conv_1"}, "conversation"),
    ({"input": "x", "previous_response_id": 7}, "previous_response_id"),
]


@pytest.mark.parametrize("body,param", BAD, ids=[p for _, p in BAD])
def test_bad_fields(srv, body, param):
    st, _, data = srv.request("POST", "/v1/responses", body)
    err = check_error(st, data, 400)
    assert err["param"] == param, err


def test_bad_bodies(srv):
    for raw in (b"", b"{", b"[]", b"{} x", b'{"input": "\\u0000"}', b"\xff\xfe"):
        st, _, data = srv.request("POST", "/v1/responses", raw)
        check_error(st, data, 400)
    st, _, data = srv.request("POST", "/v1/responses", {"input": "x", "model": "gpt-9"})
    check_error(st, data, 404, code="model_not_found")
    st, _, data = srv.request("POST", "/v1/responses",
                              {"input": "x", "previous_response_id": "resp_unknown"})
    check_error(st, data, 404, param="previous_response_id", code="previous_response_not_found")
    st, _, data = srv.request("POST", "/v1/responses", {"input": "word " * 3000})
    err = check_error(st, data, 400)
    assert err["code"] == "context_length_exceeded"


def test_corpus(srv):
    files = sorted(os.listdir(CORPUS))
    assert len(files) >= 10
    for f in files:
        with open(os.path.join(CORPUS, f), "rb") as fh:
            raw = fh.read()
        try:
            body = json.loads(raw)
            if isinstance(body, dict) and not body.get("stream"):
                body["max_output_tokens"] = min(int(body.get("max_output_tokens") or 4), 4) \
                    if isinstance(body.get("max_output_tokens"), int) else 4
                raw = json.dumps(body).encode()
        except (ValueError, TypeError):
            pass
        st, _, data = srv.request("POST", "/v1/responses", raw)
        assert st in (200, 400, 404), (f, st, data[:200])
        if st != 200:
            check_error(st, data, st)
    st, _, _ = srv.request("GET", "/health")
    assert st == 200


def test_store_bounds_and_expiry(model_path):
    env = dict(os.environ, ANVIL_RESPONSES_MAX="2", ANVIL_RESPONSES_TTL="2")
    s = Server(serve_bin(), model_path, "--ctx", "512", env=env)
    try:
        c = s.client()
        M["id"] = c.models.list().data[0].id
        ids = [c.responses.create(model=M["id"], input=f"Hi {i}", max_output_tokens=2).id
               for i in range(3)]
        with pytest.raises(openai.NotFoundError):  # the oldest was evicted
            c.responses.retrieve(ids[0])
        assert c.responses.retrieve(ids[1]).id == ids[1]
        assert c.responses.retrieve(ids[2]).id == ids[2]
        import time
        time.sleep(2.2)
        with pytest.raises(openai.NotFoundError):  # expired
            c.responses.retrieve(ids[2])
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.full
def test_agents_sdk(srv, client):
    from agents import (Agent, ModelSettings, Runner, function_tool, set_default_openai_api,
                        set_default_openai_client, set_tracing_disabled)

    calls = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"It is sunny and 21 C in {city}."

    async def run():
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none",
                                    max_retries=0)
        set_default_openai_client(client, use_for_tracing=False)
        set_default_openai_api("responses")
        set_tracing_disabled(True)
        agent = Agent(name="weather", instructions="Answer with the weather tool.",
                      model=M["id"], tools=[get_weather],
                      model_settings=ModelSettings(tool_choice="required", max_tokens=64,
                                                   temperature=0),
                      reset_tool_choice=True,
                      # the 135M model answers a tool result in "auto" with
                      # another call: the run ends on the first result
                      tool_use_behavior="stop_on_first_tool")
        return await Runner.run(agent, "What is the weather in Rome?", max_turns=4)

    result = asyncio.run(run())
    assert len(calls) == 1 and calls[0], calls
    assert result.final_output == f"It is sunny and 21 C in {calls[0]}."
    # the turn went through /v1/responses: its function_call item came back whole
    raw = result.raw_responses[0].output
    assert raw[-1].type == "function_call" and raw[-1].name == "get_weather"
    assert json.loads(raw[-1].arguments)["city"] == calls[0]


# ---------------------------------------------------------------------------
# the answers against src/server/openapi.json


def doc_validator(name):
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012
    with open(os.path.join(ROOT, "src", "server", "openapi.json")) as f:
        doc = json.load(f)
    uri = "urn:anvil:openapi"
    reg = Registry().with_resource(uri, Resource(doc, DRAFT202012))
    schema = {"$ref": f"{uri}#/components/schemas/{name}"}
    return Draft202012Validator(schema, registry=reg)


def sse_pairs(data):
    """(event, JSON data) of a Responses stream: every block has both lines."""
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        ev, payload = block.split("\n", 1)
        assert ev.startswith("event: ") and payload.startswith("data: "), block
        out.append((ev[7:], json.loads(payload[6:])))
    return out


def test_contract(srv, client):
    resp_v, ev_v = doc_validator("Response"), doc_validator("ResponseStreamEvent")
    err_v = doc_validator("Error")
    for body in ({"input": "Hi", "max_output_tokens": 6},
                 {"input": "Weather in Rome?", "tools": [WEATHER], "tool_choice": "required",
                  "max_output_tokens": 48, "temperature": 0},
                 {"input": "A person", "max_output_tokens": 60, "temperature": 0,
                  "text": {"format": {"type": "json_schema", "name": "p", "schema": PERSON}}}):
        body["model"] = M["id"]
        st, h, data = srv.request("POST", "/v1/responses", body)
        assert st == 200 and h["Content-Type"] == "application/json"
        r = json.loads(data)
        resp_v.validate(r)
        st, _, got = srv.request("GET", "/v1/responses/" + r["id"])
        assert st == 200 and json.loads(got) == r
        st, h, data = srv.request("POST", "/v1/responses", dict(body, stream=True))
        assert st == 200 and h["Content-Type"] == "text/event-stream"
        pairs = sse_pairs(data)
        for name, ev in pairs:
            assert name == ev["type"]
            ev_v.validate(ev)
        assert [ev["sequence_number"] for _, ev in pairs] == list(range(len(pairs)))
        st, _, data = srv.request("DELETE", "/v1/responses/" + pairs[-1][1]["response"]["id"])
        assert st == 200
        doc_validator("ResponseDeleted").validate(json.loads(data))
    st, _, data = srv.request("POST", "/v1/responses", {"input": 1})
    assert st == 400
    err_v.validate(json.loads(data))


def test_auth(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--api-key", "k1")
    try:
        for method, path in (("POST", "/v1/responses"), ("GET", "/v1/responses/resp_x"),
                             ("DELETE", "/v1/responses/resp_x")):
            st, _, data = s.request(method, path, {"input": "x"} if method == "POST" else None)
            check_error(st, data, 401, code="invalid_api_key")
        st, _, data = s.request("POST", "/v1/responses", {"input": "x", "max_output_tokens": 2},
                                headers={"Authorization": "Bearer k1"})
        assert st == 200, data
    finally:
        assert s.stop() == 0, s.stderr()


def test_unknown_fields(srv, model_path):
    # ignored by default (as OpenAI-compatible servers do)
    st, h, data = srv.request("POST", "/v1/responses",
                              {"input": "x", "max_output_tokens": 2, "frobnicate": 1,
                               "ignore_eos": True})
    assert st == 200, data
    # and named, as on chat completions
    assert h.get("X-Anvil-Ignored-Fields") == "frobnicate,ignore_eos", h
    st, h, data = srv.request("POST", "/v1/responses", {"input": "x", "max_output_tokens": 2,
                                                        "stream": True, "frobnicate": 1})
    assert st == 200 and h.get("X-Anvil-Ignored-Fields") == "frobnicate", h
    st, h, data = srv.request("POST", "/v1/responses", {"input": "x", "max_output_tokens": 2})
    assert st == 200 and "X-Anvil-Ignored-Fields" not in h, h
    s = Server(serve_bin(), model_path, "--ctx", "256", "--strict")
    try:
        st, _, data = s.request("POST", "/v1/responses", {"input": "x", "frobnicate": 1})
        check_error(st, data, 400, param="frobnicate")
        st, _, data = s.request("POST", "/v1/responses",
                                {"input": "x", "max_output_tokens": 2, "include": [],
                                 "store": False, "truncation": "auto"})
        assert st == 200, data
    finally:
        assert s.stop() == 0, s.stderr()

"""The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens)
through `anvil serve`, with the `anthropic` client as users run it:

- messages.create: a system prompt (string and text blocks), usage that
  agrees with messages.count_tokens, max_tokens (stop_reason max_tokens
  and exactly that many output tokens), ids msg_...;
- streaming: messages.stream (text_stream and the final message) and
  create(stream=True); the raw event sequence message_start, ping,
  content_block_start / delta / stop, message_delta, message_stop with
  "event:" lines naming each type;
- stop_sequences: stop_reason stop_sequence naming the string that
  matched, whole and streamed (greedy decoding, so the text without the
  stop is known);
- tools: tool_choice any and tool -> a tool_use block (toolu_...) whose
  input validates against input_schema, streamed as input_json_delta; a
  tool_result turn (string, blocks, is_error) answered; tool_choice none;
- output_config.format json_schema: the text validates;
- thinking enabled on a template without reasoning: no thinking block,
  no error;
- auth: x-api-key and Authorization: Bearer both accepted, a wrong key a
  401 authentication_error;
- bad input on every field: the right status and Anthropic's error shape
  {"type": "error", "error": {"type", "message"}}, the client's exception
  class, and the server still answers afterwards.
"""
import json

import anthropic
import jsonschema
import pytest

from anvil_server import Server, serve_bin

KEY = "test-key-anthropic"
# the anthropic client (2.x) no longer has sampling arguments: sent as extra body fields
T0 = {"temperature": 0}


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "1024", "--parallel", "4", "--kv-mem", "256M",
               "--api-key", KEY)
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def model_id(srv):
    st, _, data = srv.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert st == 200
    return json.loads(data)["data"][0]["id"]


@pytest.fixture(scope="module")
def client(srv):
    return anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key=KEY,
                               max_retries=0, timeout=600)


def ask(text):
    return [{"role": "user", "content": text}]


def post(srv, path, body, key=KEY, headers=None):
    h = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    h.update(headers or {})
    return srv.request("POST", path, body, headers=h)


def check_anth_error(status, data, want_status, want_type, fragment=None):
    """Anthropic's error shape; returns the message."""
    assert status == want_status, (status, data[:400])
    d = json.loads(data)
    assert d["type"] == "error" and set(d) <= {"type", "error", "request_id"}, d
    assert set(d["error"]) == {"type", "message"}, d
    assert d["error"]["type"] == want_type, d
    assert isinstance(d["error"]["message"], str) and d["error"]["message"]
    if fragment:
        assert fragment in d["error"]["message"], d
    return d["error"]["message"]


def sse(data):
    """(event name, payload) pairs of an Anthropic event stream."""
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: "), block
        name, payload = lines[0][7:], json.loads(lines[1][6:])
        assert payload["type"] == name, (name, payload)
        out.append((name, payload))
    return out


# ---------------------------------------------------------------------------
# text


def test_create(client, model_id):
    m = client.messages.create(model=model_id, max_tokens=24, extra_body=T0,
                               system="You are terse.", messages=ask("Name a color."))
    assert m.id.startswith("msg_") and len(m.id) > 8
    assert m.type == "message" and m.role == "assistant" and m.model == model_id
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.stop_sequence is None
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    assert m.usage.input_tokens > 0 and 0 < m.usage.output_tokens <= 24
    total = m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)
    n = client.messages.count_tokens(model=model_id, system="You are terse.",
                                     messages=ask("Name a color."))
    assert n.input_tokens == total


def test_system_blocks_and_multi_turn(client, model_id):
    sysb = [{"type": "text", "text": "You are terse."}, {"type": "text", "text": "Answer in English."}]
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
            {"role": "user", "content": "Name a fruit."}]
    m = client.messages.create(model=model_id, max_tokens=16, system=sysb, messages=msgs,
                               metadata={"user_id": "u1"},
                               extra_body={"top_k": 40, "top_p": 0.9, "temperature": 0.5})
    assert m.content and m.content[0].type == "text"
    n1 = client.messages.count_tokens(model=model_id, system=sysb, messages=msgs).input_tokens
    # (without a system turn the template writes its own default one)
    n2 = client.messages.count_tokens(model=model_id, system=sysb[:1], messages=msgs).input_tokens
    assert n1 > n2 > 0


def test_max_tokens(client, model_id):
    m = client.messages.create(model=model_id, max_tokens=3, extra_body=T0,
                               messages=ask("Write a long story about a dragon."))
    assert m.stop_reason == "max_tokens"
    assert m.usage.output_tokens == 3


def test_large_max_tokens_is_a_bound(client, model_id):
    # Anthropic clients ask for large budgets; the context (1024) bounds them
    m = client.messages.create(model=model_id, max_tokens=64000, extra_body=T0,
                               stop_sequences=["\n"], messages=ask("Say hi."))
    assert m.stop_reason in ("end_turn", "stop_sequence", "max_tokens")


def test_cache_read_tokens(client, model_id):
    # the same long prompt twice: the second reads its prefix from the cache,
    # and Anthropic's split keeps input + cache_read = the prompt
    msgs = ask("Tell me about the history of the city of Paris. " * 12)
    a = client.messages.create(model=model_id, max_tokens=2, messages=msgs)
    b = client.messages.create(model=model_id, max_tokens=2, messages=msgs)
    total = client.messages.count_tokens(model=model_id, messages=msgs).input_tokens
    assert a.usage.input_tokens + (a.usage.cache_read_input_tokens or 0) == total
    assert b.usage.input_tokens + b.usage.cache_read_input_tokens == total
    assert b.usage.cache_read_input_tokens > 0, b.usage


# ---------------------------------------------------------------------------
# streaming


def test_stream_helper(client, model_id):
    kw = dict(model=model_id, max_tokens=20, extra_body=T0, messages=ask("Name three animals."))
    whole = client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == whole.content[0].text
    assert final.content[0].text == text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.id.startswith("msg_")


def test_stream_true_events(client, model_id):
    events = list(client.messages.create(model=model_id, max_tokens=12, stream=True,
                                         messages=ask("Hello")))
    types = [e.type for e in events]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert events[-2].delta.stop_reason in ("end_turn", "max_tokens")
    assert events[-2].usage.output_tokens > 0


def test_stream_raw_sequence(srv, model_id):
    st, h, data = post(srv, "/v1/messages", {"model": model_id, "max_tokens": 10, "stream": True,
                                             "temperature": 0, "messages": ask("Hello")})
    assert st == 200 and h["Content-Type"].startswith("text/event-stream")
    ev = sse(data)
    names = [n for n, _ in ev]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    start = ev[0][1]["message"]
    assert start["id"].startswith("msg_") and start["content"] == [] and start["role"] == "assistant"
    assert start["usage"]["input_tokens"] > 0
    blocks = [p for n, p in ev if n == "content_block_start"]
    stops = [p for n, p in ev if n == "content_block_stop"]
    assert [b["index"] for b in blocks] == [s["index"] for s in stops] == list(range(len(blocks)))
    for n, p in ev:
        if n == "content_block_delta":
            assert p["delta"]["type"] == "text_delta"


# ---------------------------------------------------------------------------
# stop sequences


def _greedy(client, model_id, **kw):
    return client.messages.create(model=model_id, max_tokens=40, extra_body=T0,
                                  messages=ask("Count from 1 to 30, separated by spaces."), **kw)


def test_stop_sequence(client, model_id):
    base = _greedy(client, model_id).content[0].text
    assert len(base) > 12, base
    mid = len(base) // 2
    stop = base[mid:mid + 3]
    if not stop.strip():
        stop = base[mid - 3:mid]
    want = base[:base.find(stop)]
    m = _greedy(client, model_id, stop_sequences=["zzqq", stop])
    assert m.stop_reason == "stop_sequence", (m, stop)
    assert m.stop_sequence == stop
    got = m.content[0].text if m.content else ""
    assert got == want
    with client.messages.stream(model=model_id, max_tokens=40, extra_body=T0,
                                stop_sequences=[stop],
                                messages=ask("Count from 1 to 30, separated by spaces.")) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == want
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop
    # a stop that never appears: end_turn or max_tokens, no stop_sequence
    m = _greedy(client, model_id, stop_sequences=["zzqq"])
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None


# ---------------------------------------------------------------------------
# tools

WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20},
                       "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"],
    },
}
TIME = {"name": "get_time", "description": "The time in a timezone.",
        "input_schema": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 20}},
                         "required": ["tz"]}}


def test_tool_choice_any(client, model_id):
    m = client.messages.create(model=model_id, max_tokens=120, extra_body=T0,
                               tools=[WEATHER, TIME], tool_choice={"type": "any"},
                               messages=ask("What is the weather in Paris?"))
    uses = [b for b in m.content if b.type == "tool_use"]
    assert len(uses) == 1, m
    assert m.stop_reason == "tool_use"
    u = uses[0]
    assert u.id.startswith("toolu_") and len(u.id) > 10
    schema = {"get_weather": WEATHER, "get_time": TIME}[u.name]["input_schema"]
    jsonschema.validate(u.input, schema)


def test_tool_choice_tool_streamed(client, model_id):
    kw = dict(model=model_id, max_tokens=120, extra_body=T0, tools=[WEATHER, TIME],
              tool_choice={"type": "tool", "name": "get_weather",
                           "disable_parallel_tool_use": True},
              messages=ask("Weather in Oslo please."))
    whole = client.messages.create(**kw)
    with client.messages.stream(**kw) as s:
        events = list(s)
        final = s.get_final_message()
    deltas = [e for e in events if e.type == "content_block_delta"]
    assert deltas and all(d.delta.type == "input_json_delta" for d in deltas)
    uses = [b for b in final.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather"
    jsonschema.validate(uses[0].input, WEATHER["input_schema"])
    assert final.stop_reason == "tool_use"
    w = [b for b in whole.content if b.type == "tool_use"][0]
    assert w.input == uses[0].input


def test_tool_result_turn(client, model_id):
    first = client.messages.create(model=model_id, max_tokens=120, extra_body=T0,
                                   tools=[WEATHER], tool_choice={"type": "tool", "name": "get_weather"},
                                   messages=ask("Weather in Rome?"))
    use = [b for b in first.content if b.type == "tool_use"][0]
    for result in ("18 degrees and sunny", [{"type": "text", "text": "18 degrees"},
                                             {"type": "text", "text": "sunny"}]):
        msgs = ask("Weather in Rome?") + [
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": result},
                {"type": "text", "text": "Summarize it."}]},
        ]
        m = client.messages.create(model=model_id, max_tokens=24, tools=[WEATHER], messages=msgs)
        assert m.content and m.stop_reason in ("end_turn", "max_tokens", "tool_use")
    msgs = ask("Weather in Rome?") + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": use.id, "name": "get_weather",
                                           "input": use.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": "service unavailable", "is_error": True}]},
    ]
    m = client.messages.create(model=model_id, max_tokens=16, tools=[WEATHER],
                               tool_choice={"type": "none"}, messages=msgs)
    assert all(b.type == "text" for b in m.content)
    assert m.stop_reason in ("end_turn", "max_tokens")
    n = client.messages.count_tokens(model=model_id, tools=[WEATHER], messages=msgs)
    assert n.input_tokens > 0


def test_tool_result_without_content(srv, model_id):
    # a tool_result with no content (and one with empty text blocks) is an
    # empty result; fuzz_anthropic found the first read past its buffer
    for block in ({"type": "tool_result", "tool_use_id": "toolu_1"},
                  {"type": "tool_result", "tool_use_id": "toolu_1", "content": []}):
        msgs = ask("Weather?") + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                               "name": "get_weather", "input": {}}]},
            {"role": "user", "content": [block]}]
        for path, extra in (("/v1/messages", {"max_tokens": 4}), ("/v1/messages/count_tokens", {})):
            st, _, data = post(srv, path, {"model": model_id, "tools": [WEATHER], "messages": msgs,
                                           **extra})
            assert st == 200, data


# ---------------------------------------------------------------------------
# structured output and thinking


def test_output_config_json_schema(srv, model_id):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["name", "age"], "additionalProperties": False}
    st, _, data = post(srv, "/v1/messages", {
        "model": model_id, "max_tokens": 80, "temperature": 0,
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
        "messages": ask("Invent a person.")})
    assert st == 200, data
    m = json.loads(data)
    assert m["stop_reason"] == "end_turn", m
    jsonschema.validate(json.loads(m["content"][0]["text"]), schema)


def test_thinking_without_reasoning_template(client, model_id):
    # SmolLM2's template has no thoughts: no thinking block, an answer
    m = client.messages.create(model=model_id, max_tokens=2048, extra_body=T0,
                               thinking={"type": "enabled", "budget_tokens": 1024},
                               stop_sequences=["\n\n"], messages=ask("Say hi."))
    assert m.content and all(b.type == "text" for b in m.content)
    with client.messages.stream(model=model_id, max_tokens=2048, extra_body=T0,
                                thinking={"type": "enabled", "budget_tokens": 1024},
                                stop_sequences=["\n"], messages=ask("Say hi.")) as s:
        final = s.get_final_message()
    assert all(b.type == "text" for b in final.content)
    m = client.messages.create(model=model_id, max_tokens=8, thinking={"type": "disabled"},
                               messages=ask("Hi"))
    assert m.content is not None


# ---------------------------------------------------------------------------
# auth


def test_auth(srv, model_id):
    body = {"model": model_id, "max_tokens": 2, "messages": ask("Hi")}
    st, _, _ = srv.request("POST", "/v1/messages", body,
                           headers={"Authorization": f"Bearer {KEY}"})
    assert st == 200
    st, _, data = post(srv, "/v1/messages", body, key="wrong")
    check_anth_error(st, data, 401, "authentication_error")
    st, _, data = srv.request("POST", "/v1/messages/count_tokens", body)
    check_anth_error(st, data, 401, "authentication_error")
    bad = anthropic.Anthropic(base_url=f"http://127.0.0.1:{srv.port}", api_key="nope",
                              max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model=model_id, max_tokens=2, messages=ask("Hi"))
    # the OpenAI routes take x-api-key too
    st, _, _ = srv.request("GET", "/v1/models", headers={"x-api-key": KEY})
    assert st == 200


# ---------------------------------------------------------------------------
# bad input


def _bad_cases(model_id):
    ok = {"model": model_id, "max_tokens": 8, "messages": ask("Hi")}

    def w(**kw):
        b = dict(ok)
        for k, v in kw.items():
            if v is None:
                b.pop(k, None)
            else:
                b[k] = v
        return b

    return [
        ("missing max_tokens", w(max_tokens=None), "max_tokens"),
        ("max_tokens 0", w(max_tokens=0), "max_tokens"),
        ("max_tokens string", w(max_tokens="8"), "max_tokens"),
        ("missing messages", w(messages=None), "messages"),
        ("empty messages", w(messages=[]), "messages"),
        ("messages not a list", w(messages="hi"), "messages"),
        ("missing model", w(model=None), "model"),
        ("model number", w(model=3), "model"),
        ("bad role", w(messages=[{"role": "system", "content": "x"}]), "messages.0.role"),
        ("tool role", w(messages=[{"role": "tool", "content": "x"}]), "messages.0.role"),
        ("no content", w(messages=[{"role": "user"}]), "messages.0.content"),
        ("content number", w(messages=[{"role": "user", "content": 5}]), "messages.0.content"),
        ("extra message key", w(messages=[{"role": "user", "content": "x", "name": "a"}]),
         "messages.0.name"),
        ("image block", w(messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]),
         "messages.0.content.0"),
        ("unknown block", w(messages=[{"role": "user", "content": [{"type": "video"}]}]),
         "messages.0.content.0"),
        ("block without type", w(messages=[{"role": "user", "content": [{"text": "x"}]}]),
         "messages.0.content.0"),
        ("text not string", w(messages=[{"role": "user", "content": [{"type": "text", "text": 1}]}]),
         "messages.0.content.0"),
        ("tool_use in user turn", w(messages=[{"role": "user", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]), "messages.0.content.0"),
        ("tool_result in assistant turn", w(messages=ask("x") + [{"role": "assistant", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]), "messages.1.content.0"),
        ("tool_use input not object", w(messages=ask("x") + [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "t", "name": "f", "input": "{}"}]}]), "messages.1.content.0"),
        ("tool_result without id", w(messages=[{"role": "user", "content": [
            {"type": "tool_result", "content": "r"}]}]), "messages.0.content.0"),
        ("tool_result is_error string", w(messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]),
         "messages.0.content.0"),
        ("tool_result image", w(messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image"}]}]}]),
         "messages.0.content.0.content.0"),
        ("system number", w(system=1), "system"),
        ("system image block", w(system=[{"type": "image"}]), "system.0"),
        ("temperature 1.5", w(temperature=1.5), "temperature"),
        ("temperature string", w(temperature="1"), "temperature"),
        ("top_p 2", w(top_p=2), "top_p"),
        ("top_k fraction", w(top_k=1.5), "top_k"),
        ("top_k negative", w(top_k=-1), "top_k"),
        ("stream string", w(stream="yes"), "stream"),
        ("stop_sequences string", w(stop_sequences="x"), "stop_sequences"),
        ("stop_sequences number", w(stop_sequences=[1]), "stop_sequences.0"),
        ("stop_sequences empty string", w(stop_sequences=[""]), "stop_sequences.0"),
        ("stop_sequences too many", w(stop_sequences=[f"s{i}" for i in range(40)]), "stop"),
        ("metadata string", w(metadata="u"), "metadata"),
        ("metadata extra", w(metadata={"session": "x"}), "metadata.session"),
        ("metadata user_id number", w(metadata={"user_id": 1}), "metadata.user_id"),
        ("tools not list", w(tools={}), "tools"),
        ("tool without schema", w(tools=[{"name": "f"}]), "tools.0"),
        ("tool schema not object", w(tools=[{"name": "f", "input_schema": []}]), "tools.0"),
        ("server tool", w(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools.0"),
        ("tool bad name", w(tools=[{"name": "a b", "input_schema": {"type": "object"}}]), "tools"),
        ("tool extra key", w(tools=[{"name": "f", "input_schema": {}, "x": 1}]), "tools.0.x"),
        ("tool_choice string", w(tools=[WEATHER], tool_choice="any"), "tool_choice"),
        ("tool_choice bad type", w(tools=[WEATHER], tool_choice={"type": "required"}),
         "tool_choice.type"),
        ("tool_choice tool without name", w(tools=[WEATHER], tool_choice={"type": "tool"}),
         "tool_choice.name"),
        ("tool_choice unknown tool", w(tools=[WEATHER], tool_choice={"type": "tool", "name": "zz"}),
         "tool_choice"),
        ("tool_choice without tools", w(tool_choice={"type": "any"}), "tool_choice"),
        ("disable_parallel string", w(tools=[WEATHER], tool_choice={
            "type": "auto", "disable_parallel_tool_use": "y"}), "disable_parallel_tool_use"),
        ("thinking string", w(thinking="on"), "thinking"),
        ("thinking bad type", w(thinking={"type": "maybe"}), "thinking.type"),
        ("thinking no budget", w(thinking={"type": "enabled"}), "thinking.budget_tokens"),
        ("thinking small budget", w(max_tokens=4000, thinking={"type": "enabled", "budget_tokens": 10}),
         "thinking.budget_tokens"),
        ("thinking budget over max", w(thinking={"type": "enabled", "budget_tokens": 2048}),
         "max_tokens"),
        ("output_config format text", w(output_config={"format": {"type": "text"}}),
         "output_config.format.type"),
        ("output_config no schema", w(output_config={"format": {"type": "json_schema"}}),
         "output_config.format.schema"),
        ("output_config bad schema", w(output_config={"format": {
            "type": "json_schema", "schema": {"type": "object", "properties": {"a": {"$ref": "#/x"}}}}}),
         None),
        ("service_tier bad", w(service_tier="fast"), "service_tier"),
    ]


COUNT_KEYS = {"model", "messages", "system", "tools", "tool_choice", "thinking", "output_config"}
MAX_ONLY = ("missing max_tokens", "max_tokens 0", "max_tokens string", "thinking budget over max")


def test_bad_fields(srv, model_id):
    for name, body, fragment in _bad_cases(model_id):
        st, _, data = post(srv, "/v1/messages", body)
        check_anth_error(st, data, 400, "invalid_request_error", fragment)
        # the same mistake in a count_tokens body (which has no max_tokens)
        b = {k: v for k, v in body.items() if k != "max_tokens"}
        if not set(b) <= COUNT_KEYS:
            continue
        st, _, data = post(srv, "/v1/messages/count_tokens", b)
        if name in MAX_ONLY:
            assert st == 200, (name, data)
        else:
            assert st == 400, (name, data)
            check_anth_error(st, data, 400, "invalid_request_error", fragment)
    # max_tokens is not a count_tokens field: ignored, and said so
    st, h, data = post(srv, "/v1/messages/count_tokens",
                       {"model": model_id, "messages": ask("Hi"), "max_tokens": 5})
    assert st == 200 and h.get("X-Anvil-Ignored-Fields") == "max_tokens", (h, data)


def test_unknown_fields(srv, model_id, model_path):
    # ignored and named in a header, as on the chat route; --strict: Anthropic's 400
    body = {"model": model_id, "max_tokens": 2, "messages": ask("Hi"), "frequency_penalty": 1,
            "context_management": {"edits": []}}
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        b = body if path == "/v1/messages" else {k: v for k, v in body.items() if k != "max_tokens"}
        st, h, data = post(srv, path, b)
        assert st == 200, data
        assert h.get("X-Anvil-Ignored-Fields") == "frequency_penalty,context_management", h
    strict = Server(serve_bin(), model_path, "--ctx", "256", "--kv-mem", "64M", "--strict")
    try:
        st, _, data = post(strict, "/v1/messages", body)
        check_anth_error(st, data, 400, "invalid_request_error",
                         "frequency_penalty: Extra inputs are not permitted")
        st, _, data = post(strict, "/v1/messages", dict(body, frequency_penalty=None,
                                                        context_management=None))
        check_anth_error(st, data, 400, "invalid_request_error", "Extra inputs")
        ok = {"model": model_id, "max_tokens": 2, "messages": ask("Hi")}
        st, h, _ = post(strict, "/v1/messages", ok)
        assert st == 200 and "X-Anvil-Ignored-Fields" not in h
    finally:
        assert strict.stop() == 0, strict.stderr()


def test_bad_bodies(srv, model_id):
    for body in (b"", b"{", b"[1]", b'"x"', b'{"model": 1} x', b"\xff\xfe", b"null",
                 b'{"messages": [{"role": "user", "content": "\\u0000"}]}'):
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            st, _, data = post(srv, path, body)
            check_anth_error(st, data, 400, "invalid_request_error")
    deep = "[" * 200 + "]" * 200
    st, _, data = post(srv, "/v1/messages", '{"model": "%s", "max_tokens": 1, "messages": %s}'
                       % (model_id, deep))
    check_anth_error(st, data, 400, "invalid_request_error")


def test_unknown_model(srv, client):
    st, _, data = post(srv, "/v1/messages", {"model": "claude-opus-4", "max_tokens": 8,
                                             "messages": ask("Hi")})
    check_anth_error(st, data, 404, "not_found_error", "claude-opus-4")
    st, _, data = post(srv, "/v1/messages/count_tokens", {"model": "claude-opus-4",
                                                          "messages": ask("Hi")})
    check_anth_error(st, data, 404, "not_found_error")
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-opus-4", max_tokens=8, messages=ask("Hi"))


def test_client_errors(client, model_id):
    with pytest.raises(anthropic.BadRequestError) as ei:
        client.messages.create(model=model_id, max_tokens=8, extra_body={"temperature": 3}, messages=ask("Hi"))
    assert ei.value.body["error"]["type"] == "invalid_request_error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=model_id, messages=[])


def test_context_too_long(srv, model_id):
    st, _, data = post(srv, "/v1/messages", {"model": model_id, "max_tokens": 8,
                                             "messages": ask("word " * 3000)})
    check_anth_error(st, data, 400, "invalid_request_error", "context")
    st, _, data = post(srv, "/v1/messages/count_tokens", {"model": model_id,
                                                          "messages": ask("word " * 3000)})
    check_anth_error(st, data, 400, "invalid_request_error")


def test_method_and_alive(srv, client, model_id):
    st, _, _ = srv.request("GET", "/v1/messages", headers={"x-api-key": KEY})
    assert st == 405
    m = client.messages.create(model=model_id, max_tokens=4, messages=ask("Still there?"))
    assert m.usage.output_tokens > 0


# ---------------------------------------------------------------------------
# the OpenAPI document's schemas (src/server/openapi.json)


def _validator(name):
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    import anvil_server
    with open(f"{anvil_server.ROOT}/src/server/openapi.json") as f:
        doc = json.load(f)
    uri = "urn:anvil:openapi"
    reg = Registry().with_resource(uri, Resource.from_contents(doc, default_specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"{uri}#/components/schemas/{name}"}, registry=reg)


def test_answers_match_openapi(srv, model_id):
    msg, ev, err, cnt = (_validator(n) for n in ("AnthropicMessage", "AnthropicStreamEvent",
                                                 "AnthropicError", "AnthropicTokenCount"))
    req = _validator("AnthropicMessagesRequest")
    bodies = [
        {"model": model_id, "max_tokens": 6, "messages": ask("Hi"), "stop_sequences": ["."]},
        {"model": model_id, "max_tokens": 60, "temperature": 0, "messages": ask("Weather in Oslo?"),
         "tools": [WEATHER], "tool_choice": {"type": "any"}},
    ]
    for body in bodies:
        req.validate(body)
        st, _, data = post(srv, "/v1/messages", body)
        assert st == 200, data
        msg.validate(json.loads(data))
        st, _, data = post(srv, "/v1/messages", dict(body, stream=True))
        assert st == 200, data
        for _, payload in sse(data):
            ev.validate(payload)
        st, _, data = post(srv, "/v1/messages/count_tokens",
                           {k: v for k, v in body.items() if k in COUNT_KEYS})
        assert st == 200, data
        cnt.validate(json.loads(data))
    for body, key in (({"model": model_id, "messages": ask("Hi")}, KEY),
                      ({"model": "nope", "max_tokens": 1, "messages": ask("Hi")}, KEY),
                      ({"model": model_id, "max_tokens": 1, "messages": ask("Hi")}, "bad")):
        st, _, data = post(srv, "/v1/messages", body, key=key)
        assert st in (400, 401, 404)
        err.validate(json.loads(data))

"""test_toolfmt.py - tool calls and reasoning in the model's own format,
over HTTP (docs/tool-calls.md).

Tiny random-weight models (tests/gen/tiny_arch.py) carry the real chat
template of each family (llama.cpp's models/templates corpus, from the
llama-cpp-python source the venv's setup keeps); anvil detects the format
from the template. To make the parse path deterministic, the raw output
is fixed by a grammar (under tool_choice "auto" a grammar shapes the raw
text, markers included, and the parser reads the calls from it). Checked:

  - each family's call text -> tool_calls (name, JSON arguments),
    finish_reason "tool_calls", parallel calls, harmony's channels;
  - streamed deltas, put together, equal the whole response; each call's
    first delta has its id and name, its arguments come in pieces;
  - <think> -> reasoning_content, the rest -> content; reasoning_format
    "none" keeps the thought in the content;
  - tool_choice "required" / a named tool on an unconstrained random model:
    the family's marker is forced, the arguments validate against the
    tool's schema (jsonschema), parallel_tool_calls false -> one call;
  - malformed output (an unclosed call, invalid JSON, a call cut by
    max_tokens): 200 with a text answer or the call as far as it went;
    never a crash.
"""
import glob
import json
import os
import sys

import jsonschema
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gen"))
sys.path.insert(0, HERE)

import tiny_arch  # noqa: E402
from serve_util import Server, read_all, sse_data, stream_post  # noqa: E402

TEMPLATES = os.path.expanduser(
    "~/.cache/anvil/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates")

# family -> a template file of the corpus whose format anvil detects as it
FAMILIES = {
    "hermes": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "llama3": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "mistral": "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "harmony": "openai-gpt-oss-120b.jinja",
    "granite": "ibm-granite-granite-3.3-2B-Instruct.jinja",
    "deepseek_r1": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "functionary": "meetkai-functionary-medium-v3.1.jinja",
}

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                       "required": ["city"], "additionalProperties": False},
    },
}, {
    "type": "function",
    "function": {
        "name": "get_time",
        # gpt-oss's template writes "// " + description (jinja2 refuses an
        # undefined operand there, and so does anvil)
        "description": "The time in a zone.",
        "parameters": {"type": "object",
                       "properties": {"zone": {"type": "integer", "minimum": 0, "maximum": 9}},
                       "required": ["zone"], "additionalProperties": False},
    },
}]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

DS = "\uff5c"  # DeepSeek's full-width bar
DS_U = "\u2581"
PARIS = '{"city": "Paris"}'
ROME = '{"city": "Rome"}'

# family -> (raw output with one call, raw output with two calls or None)
CALL_TEXT = {
    "hermes": (f'<tool_call>\n{{"name": "get_weather", "arguments": {PARIS}}}\n</tool_call>',
               f'<tool_call>\n{{"name": "get_weather", "arguments": {PARIS}}}\n</tool_call>\n'
               f'<tool_call>\n{{"name": "get_weather", "arguments": {ROME}}}\n</tool_call>'),
    "qwen3": (f'<think>\nI look it up.\n</think>\n\n<tool_call>\n{{"name": "get_weather", '
              f'"arguments": {PARIS}}}\n</tool_call>', None),
    "llama3": (f'{{"name": "get_weather", "parameters": {PARIS}}}', None),
    "mistral": (f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {PARIS}}}]',
                f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {PARIS}}}, '
                f'{{"name": "get_weather", "arguments": {ROME}}}]'),
    "harmony": ('<|channel|>analysis<|message|>I look it up.<|end|><|start|>assistant'
                f'<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                f'{PARIS}<|call|>', None),
    "granite": (f'<|tool_call|>[{{"name": "get_weather", "arguments": {PARIS}}}]',
                f'<|tool_call|>[{{"name": "get_weather", "arguments": {PARIS}}}, '
                f'{{"name": "get_weather", "arguments": {ROME}}}]'),
    "deepseek_r1": (f'<{DS}tool{DS_U}calls{DS_U}begin{DS}><{DS}tool{DS_U}call{DS_U}begin{DS}>'
                    f'function<{DS}tool{DS_U}sep{DS}>get_weather\n```json\n{PARIS}\n```'
                    f'<{DS}tool{DS_U}call{DS_U}end{DS}><{DS}tool{DS_U}calls{DS_U}end{DS}>', None),
    "functionary": (f'<function=get_weather>{PARIS}</function>',
                    f'<function=get_weather>{PARIS}</function><function=get_weather>{ROME}'
                    '</function>'),
}


def gbnf_literal(s):
    """A GBNF grammar whose only sentence is s."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        else:
            out.append(ch)
    return 'root ::= "' + "".join(out) + '"'


def template_of(family):
    path = os.path.join(TEMPLATES, FAMILIES[family])
    if not os.path.exists(path):
        pytest.fail(f"template corpus missing: {path} (the venv setup keeps llama-cpp-python's "
                    "source)")
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """family -> a running server over a tiny model with that template."""
    d = tmp_path_factory.mktemp("toolfmt")
    out = {}
    try:
        for fam in FAMILIES:
            path = str(d / f"{fam}.gguf")
            tiny_arch.make_gguf_template(path, "llama3", template_of(fam), seed=3, n_ctx=4096)
            out[fam] = Server(model=path)
        yield out
    finally:
        for s in out.values():
            s.stop()


def chat(srv, **body):
    body.setdefault("messages", [{"role": "user", "content": "Weather in Paris?"}])
    body.setdefault("max_tokens", 400)
    body.setdefault("temperature", 0)
    st, _, data = srv.request("POST", "/v1/chat/completions", body)
    assert st == 200, data
    return json.loads(data)


def streamed(srv, **body):
    """The stream's deltas put together: (content, reasoning, calls, finish,
    first deltas of each call)."""
    body.setdefault("messages", [{"role": "user", "content": "Weather in Paris?"}])
    body.setdefault("max_tokens", 400)
    body.setdefault("temperature", 0)
    body["stream"] = True
    k = stream_post(srv.port, "/v1/chat/completions", body)
    raw = read_all(k)
    k.close()
    assert raw.split(b"\r\n", 1)[0].split()[1] == b"200", raw[:300]
    content, reasoning, calls, first, finish = "", "", {}, {}, None
    for ev in sse_data(raw):
        if ev == "[DONE]":
            break
        if ev == b"[DONE]":
            break
        ch = json.loads(ev)["choices"]
        if not ch:
            continue
        d = ch[0].get("delta", {})
        content += d.get("content") or ""
        reasoning += d.get("reasoning_content") or ""
        for tc in d.get("tool_calls") or []:
            i = tc["index"]
            if i not in calls:
                first[i] = tc
                calls[i] = {"id": tc.get("id"), "name": tc["function"].get("name"), "args": ""}
            calls[i]["args"] += tc["function"].get("arguments") or ""
        finish = ch[0].get("finish_reason") or finish
    return content, reasoning, [calls[i] for i in sorted(calls)], finish, first


@pytest.mark.parametrize("family", list(FAMILIES))
def test_call_parsed(servers, family):
    srv = servers[family]
    one, two = CALL_TEXT[family]
    r = chat(srv, tools=TOOLS, grammar=gbnf_literal(one))
    m = r["choices"][0]["message"]
    assert r["choices"][0]["finish_reason"] == "tool_calls", r
    calls = m["tool_calls"]
    assert len(calls) == 1
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    assert not (m.get("content") or "").strip()
    if family in ("qwen3", "harmony"):
        assert m.get("reasoning_content") == "I look it up."
    # the stream says the same
    content, reasoning, scalls, finish, first = streamed(srv, tools=TOOLS, grammar=gbnf_literal(one))
    assert finish == "tool_calls"
    # (ids are fresh per request)
    assert [(c["name"], json.loads(c["args"])) for c in scalls] == \
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
    assert all(c["id"] and c["id"].startswith("call_") for c in scalls)
    assert first[0]["id"] and first[0]["function"]["name"] == "get_weather"
    assert content.strip() == (m.get("content") or "").strip()
    assert reasoning == (m.get("reasoning_content") or "")
    if two:
        r = chat(srv, tools=TOOLS, grammar=gbnf_literal(two))
        calls = r["choices"][0]["message"]["tool_calls"]
        assert [json.loads(c["function"]["arguments"])["city"] for c in calls] == ["Paris", "Rome"]
        assert len({c["id"] for c in calls}) == 2
        _, _, scalls, _, _ = streamed(srv, tools=TOOLS, grammar=gbnf_literal(two))
        assert [json.loads(c["args"]) for c in scalls] == [{"city": "Paris"}, {"city": "Rome"}]
        assert len({c["id"] for c in scalls}) == 2


def test_reasoning_split(servers):
    srv = servers["qwen3"]
    g = gbnf_literal("<think>\nSunny, I think.\n</think>\n\nIt is sunny.")
    r = chat(srv, grammar=g)
    m = r["choices"][0]["message"]
    assert m["reasoning_content"] == "Sunny, I think."
    assert m["content"] == "It is sunny."
    content, reasoning, _, _, _ = streamed(srv, grammar=g)
    assert (content, reasoning) == ("It is sunny.", "Sunny, I think.")
    r = chat(srv, grammar=g, reasoning_format="none")
    m = r["choices"][0]["message"]
    assert "<think>" in m["content"] and not m.get("reasoning_content")
    st, _, data = srv.request("POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "x"}],
                               "reasoning_format": "loud"})
    assert st == 400 and b"reasoning_format" in data


@pytest.mark.parametrize("family", ["hermes", "qwen3", "mistral", "llama3", "granite", "harmony",
                                    "deepseek_r1", "functionary"])
def test_required_is_schema_valid(servers, family):
    """A random model under tool_choice required / named: the family's
    marker is forced and the arguments are valid by construction; with
    several tools, each call's name is one of them and its arguments
    validate under that tool's schema (an alternation of per-tool
    grammars); parallel_tool_calls false gives exactly one call."""
    srv = servers[family]
    choices = ["required", {"type": "function", "function": {"name": "get_time"}}]
    for choice in choices:
        for parallel in (True, False):
            # (Qwen 3's model may open a thought itself: a budget ends it)
            r = chat(srv, tools=TOOLS, tool_choice=choice, parallel_tool_calls=parallel,
                     max_tokens=300, reasoning_budget=8)
            ch = r["choices"][0]
            calls = ch["message"].get("tool_calls") or []
            assert ch["finish_reason"] == "tool_calls", r
            assert calls, r
            if not parallel:
                assert len(calls) == 1
            if parallel and len(calls) > 1 and r["usage"]["completion_tokens"] >= 300:
                calls = calls[:-1]  # the model's last call was cut by max_tokens
            for c in calls:
                name = c["function"]["name"]
                assert name in SCHEMAS, c
                if isinstance(choice, dict):
                    assert name == "get_time"
                jsonschema.validate(json.loads(c["function"]["arguments"]), SCHEMAS[name])


def token_ids(srv, text):
    st, _, data = srv.request("POST", "/tokenize", {"content": text})
    assert st == 200, data
    return [t if isinstance(t, int) else t["id"] for t in json.loads(data)["tokens"]]


@pytest.mark.parametrize("family", ["hermes", "harmony", "deepseek_r1"])
def test_required_masks_bad_name(servers, family):
    """The constraint refuses a name that is not a tool's: the tokens of
    "no" pushed up by logit_bias (+100: unconstrained greedy decoding
    writes them) never come out in the name; the call's name is still one
    of the tools."""
    srv = servers[family]
    ids = [t for w in (" no", "no", "\"no") for t in token_ids(srv, w)]
    bias = {str(t): 100 for t in ids}
    r = chat(srv, tools=TOOLS, tool_choice="required", logit_bias=bias, max_tokens=200)
    calls = r["choices"][0]["message"].get("tool_calls") or []
    assert calls, r
    for c in calls:
        assert c["function"]["name"] in SCHEMAS
        assert "no" not in c["function"]["name"]
    # the same bias unconstrained: the model does write the biased tokens
    r = chat(srv, logit_bias=bias, max_tokens=8)
    text = r["choices"][0]["message"].get("content") or ""
    assert text.strip() and set(text) <= set(' no"'), text


def test_auto_unconstrained(servers):
    """auto in a family format: nothing is forced; the random model's
    words come back as content (no marker: no call)."""
    srv = servers["hermes"]
    r = chat(srv, tools=TOOLS, max_tokens=12)
    ch = r["choices"][0]
    assert ch["finish_reason"] in ("length", "stop")
    assert not ch["message"].get("tool_calls")


@pytest.mark.parametrize("raw", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": ',   # unclosed
    '<tool_call>\n{nope}\n</tool_call>',                              # invalid JSON
    '<tool_call>\n{"name": "bad name!", "arguments": {}}\n</tool_call>',
    'Plain words, <tool_call',                                        # a marker cut short
])
def test_malformed(servers, raw):
    srv = servers["hermes"]
    r = chat(srv, tools=TOOLS, grammar=gbnf_literal(raw))
    m = r["choices"][0]["message"]
    for c in m.get("tool_calls") or []:
        assert c["function"]["name"] == "get_weather"
    if not m.get("tool_calls"):
        assert m["content"], r
    content, _, scalls, _, _ = streamed(srv, tools=TOOLS, grammar=gbnf_literal(raw))
    assert len(scalls) == len(m.get("tool_calls") or [])
    # cut by max_tokens inside a call
    r = chat(srv, tools=TOOLS, grammar=gbnf_literal(CALL_TEXT["hermes"][0]), max_tokens=30)
    assert r["choices"][0]["finish_reason"] in ("length", "tool_calls")


@pytest.mark.parametrize("raw,call", [
    (f'{{"name": "get_weather", "arguments": {PARIS}}}', True),
    (f'```json\n{{"name": "get_weather", "arguments": {PARIS}}}\n```', True),
    (f'  ```json\n{{"name": "get_weather", "arguments": {PARIS}}}\n```\n', True),
    (f'{{"name": "get_weather", "arguments": "{{\\"city\\": \\"Paris\\"}}"}}', True),
    # a name that is not a tool's: the object is the answer's text
    (f'{{"name": "get_news", "arguments": {PARIS}}}', False),
    (f'```json\n{{"name": "get_news", "arguments": {PARIS}}}\n```', False),
    ('{"city": "Paris"}', False),
    ('The answer: {"name": "get_weather", "arguments": {}}', False),
])
def test_hermes_bare_json(servers, raw, call):
    """Hermes/Qwen under auto: a call written without the <tool_call> tags,
    as a bare JSON object or in a ```json fence, is a call when its name is
    one of the tools (as llama.cpp and vLLM read it); anything else stays
    content, byte for byte. The stream says the same as the whole."""
    srv = servers["hermes"]
    r = chat(srv, tools=TOOLS, grammar=gbnf_literal(raw))
    ch = r["choices"][0]
    m = ch["message"]
    content, _, scalls, finish, _ = streamed(srv, tools=TOOLS, grammar=gbnf_literal(raw))
    if call:
        assert ch["finish_reason"] == "tool_calls", r
        assert [c["function"]["name"] for c in m["tool_calls"]] == ["get_weather"]
        assert json.loads(m["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
        assert not (m.get("content") or "").strip()
        assert finish == "tool_calls"
        assert [(c["name"], json.loads(c["args"])) for c in scalls] == \
            [("get_weather", {"city": "Paris"})]
    else:
        assert not m.get("tool_calls"), r
        assert m["content"] == raw.strip()
        assert not scalls and content == m["content"]
    # without tools nothing is a call
    r = chat(srv, grammar=gbnf_literal(raw))
    assert not r["choices"][0]["message"].get("tool_calls")


def test_model_opens_thought(servers):
    """Qwen 3's template leaves the thought to the model: when the model
    writes <think> itself while a constraint is pending (tool_choice
    required, a JSON schema), the constraint waits until </think> (here
    forced by the budget) and the thought goes to reasoning_content. The
    first token is pushed to the thought's '<' with logit_bias."""
    srv = servers["qwen3"]
    lt = token_ids(srv, "<think>")[0]
    bias = {str(lt): 30}
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    r = chat(srv, response_format=rf, logit_bias=bias, reasoning_budget=6, max_tokens=100)
    m = r["choices"][0]["message"]
    assert m.get("reasoning_content"), r
    jsonschema.validate(json.loads(m["content"]), schema)
    content, reasoning, _, _, _ = streamed(srv, response_format=rf, logit_bias=bias,
                                          reasoning_budget=6, max_tokens=100)
    assert (content, reasoning) == (m["content"], m["reasoning_content"])
    r = chat(srv, tools=TOOLS, tool_choice="required", logit_bias=bias, reasoning_budget=6,
             max_tokens=200)
    ch = r["choices"][0]
    assert ch["message"].get("reasoning_content"), r
    assert ch["finish_reason"] == "tool_calls", r
    for c in ch["message"]["tool_calls"]:
        assert c["function"]["name"] in SCHEMAS
        jsonschema.validate(json.loads(c["function"]["arguments"]), SCHEMAS[c["function"]["name"]])
    # reasoning_format none: no thought is split, the constraint holds from the start
    r = chat(srv, response_format=rf, logit_bias=bias, reasoning_format="none", max_tokens=100)
    m = r["choices"][0]["message"]
    jsonschema.validate(json.loads(m["content"]), schema)
    assert not m.get("reasoning_content")


def test_no_second_thought(servers):
    """Qwen 3 with enable_thinking false: the template writes an empty,
    closed thought, so the model is not offered another; the constraint
    holds from the first token (the biased '<' cannot start a JSON value)."""
    srv = servers["qwen3"]
    bias = {str(token_ids(srv, "<think>")[0]): 30}
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    r = chat(srv, response_format=rf, logit_bias=bias, reasoning_budget=6, max_tokens=100,
             chat_template_kwargs={"enable_thinking": False})
    m = r["choices"][0]["message"]
    assert not m.get("reasoning_content"), r
    jsonschema.validate(json.loads(m["content"]), schema)


HARMONY_SPECIALS = ["<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>",
                    "<|call|>", "<|return|>"]


@pytest.fixture(scope="module")
def harmony_srv(tmp_path_factory):
    """A tiny model with gpt-oss's template whose vocabulary has harmony's
    markers as control tokens (as the real gpt-oss file has them), in
    place of unused slots."""
    path = str(tmp_path_factory.mktemp("harmony") / "harmony.gguf")
    with tiny_arch.control_tokens(HARMONY_SPECIALS):
        tiny_arch.make_gguf_template(path, "llama3", template_of("harmony"), seed=5, n_ctx=4096)
    s = Server(model=path)
    yield s
    s.stop()


def test_harmony_required_control_tokens(harmony_srv):
    """gpt-oss's markers are control tokens: tool_choice "required" with
    several tools holds them inside the calls constraint (allowed by their
    text) instead of refusing the request; the name is one of the tools,
    the arguments validate, and the markers come out as the control tokens
    (the answer's ids hold <|constrain|> and <|message|>)."""
    srv = harmony_srv
    ids = {t: token_ids(srv, t) for t in HARMONY_SPECIALS}
    assert all(len(v) == 1 for v in ids.values()), ids
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        r = chat(srv, tools=TOOLS, tool_choice=choice, max_tokens=200, return_token_ids=True)
        ch = r["choices"][0]
        assert ch["finish_reason"] == "tool_calls", r
        calls = ch["message"]["tool_calls"]
        assert calls and len(calls) == 1, r
        name = calls[0]["function"]["name"]
        assert name in SCHEMAS
        if isinstance(choice, dict):
            assert name == "get_time"
        jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), SCHEMAS[name])
        out = ch["token_ids"]
        if choice == "required":
            # the forced prefix stops before the name; the model wrote the rest
            assert ids["<|constrain|>"][0] in out and ids["<|message|>"][0] in out, out
        # the end-of-generation token that ended the answer is kept last (vLLM's)
        assert out[-1] == ids["<|call|>"][0], out
        assert len(out) == r["usage"]["completion_tokens"] + 1
        # the stream says the same, and its chunks' token_ids put together
        # are the whole answer's
        _, _, scalls, finish, _ = streamed(srv, tools=TOOLS, tool_choice=choice, max_tokens=200)
        assert finish == "tool_calls"
        k = stream_post(srv.port, "/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "Weather in Paris?"}],
                         "tools": TOOLS, "tool_choice": choice, "max_tokens": 200,
                         "temperature": 0, "stream": True, "return_token_ids": True})
        raw = read_all(k)
        k.close()
        sids = []
        for ev in sse_data(raw):
            if ev in ("[DONE]", b"[DONE]"):
                break
            for c in json.loads(ev)["choices"]:
                sids += c.get("token_ids") or []
        assert sids == out
        assert [(c["name"], json.loads(c["args"])) for c in scalls] == \
            [(calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"]))]


def test_harmony_analysis_before_constrained_answer(harmony_srv):
    """gpt-oss thinks on the analysis channel before it answers: under a
    constraint (tool_choice required, a JSON schema) the model may open
    that channel after the generation prompt (<|channel|> is shared with
    the answer's prefix; the gate decides on the next token), the thought
    is free text up to <|end|><|start|>assistant (forced by the budget),
    then the answer's channel is forced and constrained. The first token of
    "analysis" pushed up by logit_bias opens the thought; the first token
    of "commentary"/"final" pushed up skips it."""
    srv = harmony_srv
    sp = {t: token_ids(srv, t)[0] for t in HARMONY_SPECIALS}
    ana = token_ids(srv, "analysis")[0]
    for choice in ("required", {"type": "function", "function": {"name": "get_time"}}):
        r = chat(srv, tools=TOOLS, tool_choice=choice, max_tokens=200, reasoning_budget=6,
                 logit_bias={str(ana): 50}, return_token_ids=True)
        ch = r["choices"][0]
        assert ch["finish_reason"] == "tool_calls", r
        assert ch["message"].get("reasoning_content"), r
        out = ch["token_ids"]
        assert out[:2] == [sp["<|channel|>"], ana], out
        # the thought closed as harmony closes a message, then the call's channel
        i = out.index(sp["<|end|>"])
        head = [sp["<|end|>"], sp["<|start|>"]] + token_ids(srv, "assistant") + [sp["<|channel|>"]]
        assert out[i:i + len(head)] == head, out
        calls = ch["message"]["tool_calls"]
        assert len(calls) == 1 and calls[0]["function"]["name"] in SCHEMAS
        if isinstance(choice, dict):
            assert calls[0]["function"]["name"] == "get_time"
        jsonschema.validate(json.loads(calls[0]["function"]["arguments"]),
                            SCHEMAS[calls[0]["function"]["name"]])
        # streamed: the same split
        _, reasoning, scalls, finish, _ = streamed(srv, tools=TOOLS, tool_choice=choice,
                                                   max_tokens=200, reasoning_budget=6,
                                                   logit_bias={str(ana): 50})
        assert finish == "tool_calls" and reasoning == ch["message"]["reasoning_content"]
        assert [json.loads(c["args"]) for c in scalls] == \
            [json.loads(c["function"]["arguments"]) for c in calls]
    # a JSON schema: the final channel after the thought
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    r = chat(srv, response_format=rf, max_tokens=100, reasoning_budget=6,
             logit_bias={str(ana): 50})
    m = r["choices"][0]["message"]
    assert m.get("reasoning_content"), r
    jsonschema.validate(json.loads(m["content"]), schema)
    # the answer's channel pushed up: no thought, the constraint from the start
    com = token_ids(srv, "commentary")[0]
    r = chat(srv, tools=TOOLS, tool_choice="required", max_tokens=200, reasoning_budget=6,
             logit_bias={str(com): 50, str(ana): -50}, return_token_ids=True)
    ch = r["choices"][0]
    assert ch["finish_reason"] == "tool_calls" and not ch["message"].get("reasoning_content"), r
    assert sp["<|end|>"] not in ch["token_ids"]
    # reasoning_format none: no gate, the channel is forced at once
    r = chat(srv, tools=TOOLS, tool_choice="required", max_tokens=200, reasoning_format="none",
             logit_bias={str(ana): 50}, return_token_ids=True)
    assert r["choices"][0]["token_ids"][1] != ana

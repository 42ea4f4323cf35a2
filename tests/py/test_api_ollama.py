"""Ollama's API (src/server/api_ollama.c) with the real `ollama` client.

The client's pydantic models parse every answer (ChatResponse,
GenerateResponse, ListResponse, ShowResponse, ProcessResponse), so a
field of the wrong type or shape fails here as it would in an Ollama
front end; the answers are also checked against src/server/openapi.json.

- /api/chat and /api/generate, streamed (newline-delimited JSON,
  application/x-ndjson, the default) and whole: the same text either way
  at temperature 0, a last object with done, done_reason and the counts
  and durations (ns, never 0);
- options mapped: num_predict caps eval_count (done_reason "length"),
  seed makes sampling at temperature 1 repeatable, num_ctx above the
  server's context is refused and at or below it accepted;
- format "json" gives a JSON object, a schema gives JSON valid under it;
- tools: a forced call (anvil's tool_choice extension) comes back in
  Ollama's shape, arguments an object valid under the function's
  parameters, streamed as one line with the whole call; a conversation
  with an assistant's tool_calls and a tool result is accepted;
- think on a model without thoughts is Ollama's 400, think false is fine;
- /api/tags, /api/show (with and without ":latest"), /api/ps,
  /api/version describe the served model; /api/embed on the chat model
  (no pooling) is a 400;
- bad input on every field: the right status (400, 404) and Ollama's
  error shape {"error": "..."}, never a crash (the fuzz corpus
  tests/fuzz/corpus/ollama is replayed, and mutated from a fixed seed).
"""
import glob
import json
import os
import random

import ollama
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from anvil_server import ROOT, Server, serve_bin

DOC_URI = "urn:anvil:openapi"
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "ollama")
CTX = 1024
G = {"temperature": 0, "seed": 7}  # greedy and repeatable


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", str(CTX), "--parallel", "2", "--kv-mem", "96M")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def cl(srv):
    return ollama.Client(host=f"http://127.0.0.1:{srv.port}", timeout=600)


@pytest.fixture(scope="module")
def name(cl):
    return cl.list().models[0].model


@pytest.fixture(scope="module")
def doc():
    with open(os.path.join(ROOT, "src", "server", "openapi.json")) as f:
        return json.load(f)


def schema(doc, name):
    reg = Registry().with_resource(DOC_URI, Resource.from_contents(
        doc, default_specification=DRAFT202012))
    return Draft202012Validator({"$ref": f"{DOC_URI}#/components/schemas/{name}"}, registry=reg)


def ndjson(data):
    lines = data.decode("utf-8").split("\n")
    assert lines[-1] == "", "a stream ends with a newline"
    return [json.loads(x) for x in lines[:-1]]


def err_of(status, data, want):
    assert status == want, (status, data)
    body = json.loads(data)
    assert list(body) == ["error"] and isinstance(body["error"], str) and body["error"], body
    return body["error"]


def check_final(r, n_predict=None):
    assert r.done is True and r.done_reason in ("stop", "length")
    for f in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
        assert isinstance(getattr(r, f), int) and getattr(r, f) > 0, f
    assert r.prompt_eval_count > 0 and r.eval_count >= 1
    assert r.total_duration >= r.eval_duration
    if n_predict is not None:
        assert r.eval_count <= n_predict


MSGS = [{"role": "user", "content": "Name three colors."}]

# ---------------------------------------------------------------------------
# the model's description


def test_version_tags_ps_show(srv, cl, doc):
    v = cl._client.get("/api/version")
    assert v.status_code == 200
    schema(doc, "OllamaVersion").validate(v.json())
    tags = cl.list()
    assert len(tags.models) == 1
    m = tags.models[0]
    assert m.model.endswith(":latest") and m.details.format == "gguf"
    assert m.details.family == "llama" and m.details.quantization_level == "Q4_1"
    assert m.details.parameter_size.endswith("M")
    assert m.size > 50_000_000 and len(m.digest) == 64  # the file was found
    schema(doc, "OllamaTags").validate(cl._client.get("/api/tags").json())
    ps = cl.ps()
    assert ps.models[0].model == m.model and ps.models[0].context_length == CTX
    schema(doc, "OllamaPs").validate(cl._client.get("/api/ps").json())
    for nm in (m.model, m.model[:-len(":latest")]):
        sh = cl.show(nm)
        assert "completion" in sh.capabilities
        assert sh.template and sh.details.family == "llama"
        assert sh.modelinfo["llama.context_length"] > 0
        assert sh.modelinfo["general.architecture"] == "llama"
    schema(doc, "OllamaShow").validate(cl._client.post("/api/show", json={"model": m.model}).json())


def test_show_errors(srv):
    err_of(*srv.post("/api/show", {"model": "nope:latest"})[::2], 404)
    err_of(*srv.post("/api/show", {})[::2], 400)
    err_of(*srv.post("/api/show", b"{not json")[::2], 400)
    err_of(*srv.post("/api/show", {"model": 3})[::2], 400)


def test_embed_chat_model_cannot_pool(srv, cl, name):
    # the chat model's file gives no pooling: a 400 saying so (embedding
    # models are tests/py/test_embed_server.py)
    msg = err_of(*srv.post("/api/embed", {"model": name, "input": "x"})[::2], 400)
    assert "pooling" in msg
    with pytest.raises(ollama.ResponseError) as ei:
        cl.embed(model=name, input="hello")
    assert ei.value.status_code == 400

# ---------------------------------------------------------------------------
# chat and generate


def test_chat_whole_and_streamed_agree(srv, cl, name, doc):
    opts = dict(G, num_predict=12)
    whole = cl.chat(model=name, messages=MSGS, options=opts)
    check_final(whole, 12)
    assert whole.message.role == "assistant" and whole.message.content
    parts = list(cl.chat(model=name, messages=MSGS, options=opts, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    check_final(parts[-1], 12)
    assert parts[-1].message.content == ""
    assert "".join(p.message.content or "" for p in parts) == whole.message.content
    assert parts[-1].eval_count == whole.eval_count
    # the wire: ndjson by default (stream absent), one object when false
    st, h, data = srv.post("/api/chat", {"model": name, "messages": MSGS, "options": opts})
    assert st == 200 and h["Content-Type"] == "application/x-ndjson"
    v = schema(doc, "OllamaChatResponse")
    lines = ndjson(data)
    for x in lines:
        v.validate(x)
    assert lines[-1]["done"] and "".join(x["message"]["content"] for x in lines) == \
        whole.message.content
    st, h, data = srv.post("/api/chat", {"model": name, "messages": MSGS, "options": opts,
                                         "stream": False})
    assert st == 200 and h["Content-Type"].startswith("application/json")
    v.validate(json.loads(data))


def test_generate_whole_streamed_raw(srv, cl, name, doc):
    opts = dict(G, num_predict=10)
    whole = cl.generate(model=name, prompt="Why is the sky blue?", options=opts)
    check_final(whole, 10)
    assert whole.response
    parts = list(cl.generate(model=name, prompt="Why is the sky blue?", options=opts,
                             stream=True))
    check_final(parts[-1], 10)
    assert "".join(p.response for p in parts) == whole.response
    # system joins the templated prompt; raw sends the text as it is
    sysd = cl.generate(model=name, prompt="Hi", system="Answer in French.", options=opts)
    check_final(sysd, 10)
    raw = cl.generate(model=name, prompt="The capital of France is", raw=True, options=opts)
    check_final(raw, 10)
    assert raw.prompt_eval_count < whole.prompt_eval_count  # no template around it
    v = schema(doc, "OllamaGenerateResponse")
    st, h, data = srv.post("/api/generate", {"model": name, "prompt": "Hi", "options": opts})
    assert st == 200 and h["Content-Type"] == "application/x-ndjson"
    for x in ndjson(data):
        v.validate(x)
    st, _, data = srv.post("/api/generate", {"model": name, "prompt": "Hi", "options": opts,
                                             "stream": False})
    v.validate(json.loads(data))


def test_load_and_unload(srv, cl, name):
    r = cl.chat(model=name, messages=[])
    assert r.done and r.done_reason == "load" and r.message.content == ""
    r = cl.generate(model=name)
    assert r.done and r.done_reason == "load" and r.response == ""
    r = cl.generate(model=name, keep_alive=0)
    assert r.done_reason == "unload"


def test_name_with_and_without_tag(cl, name):
    for nm in (name, name.split(":")[0]):
        r = cl.chat(model=nm, messages=MSGS, options=dict(G, num_predict=2))
        assert r.model == nm  # the name the client sent comes back


def test_num_predict_and_seed(cl, name):
    long = [{"role": "user", "content": "Write a long story about a dragon."}]
    r = cl.chat(model=name, messages=long, options=dict(G, num_predict=5))
    assert r.eval_count == 5 and r.done_reason == "length"
    parts = list(cl.chat(model=name, messages=long, options=dict(G, num_predict=5), stream=True))
    assert parts[-1].eval_count == 5 and parts[-1].done_reason == "length"
    hot = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "num_predict": 24}
    a = cl.chat(model=name, messages=long, options=dict(hot, seed=1234)).message.content
    b = cl.chat(model=name, messages=long, options=dict(hot, seed=1234)).message.content
    assert a == b
    outs = {cl.chat(model=name, messages=long, options=dict(hot, seed=s)).message.content
            for s in (1, 2, 3)}
    assert len(outs) > 1, "different seeds, different samples"


def test_num_ctx(srv, cl, name):
    r = cl.chat(model=name, messages=MSGS, options=dict(G, num_ctx=CTX, num_predict=3))
    check_final(r, 3)
    r = cl.chat(model=name, messages=MSGS, options=dict(G, num_ctx=64))
    assert r.prompt_eval_count + r.eval_count <= 64  # num_ctx bounds the answer
    with pytest.raises(ollama.ResponseError) as ei:
        cl.chat(model=name, messages=MSGS, options={"num_ctx": CTX + 1})
    assert ei.value.status_code == 400 and "num_ctx" in ei.value.error
    long = [{"role": "user", "content": "word " * 200}]
    st, _, data = srv.post("/api/chat", {"model": name, "messages": long,
                                         "options": {"num_ctx": 32}})
    assert "maximum context length" in err_of(st, data, 400)


def test_ignored_fields_and_options(cl, name):
    r = cl.chat(model=name, messages=MSGS, keep_alive="5m",
                options=dict(G, num_predict=3, num_gpu=1, num_thread=4, mirostat=0,
                             typical_p=0.9, penalize_newline=True, num_keep=5))
    check_final(r, 3)


def test_logprobs(cl, name):
    r = cl.chat(model=name, messages=MSGS, options=dict(G, num_predict=4), logprobs=True,
                top_logprobs=2)
    assert len(r.logprobs) == r.eval_count
    for lp in r.logprobs:
        assert lp.logprob <= 0 and len(lp.top_logprobs) == 2
    parts = list(cl.chat(model=name, messages=MSGS, options=dict(G, num_predict=4),
                         logprobs=True, stream=True))
    assert sum(len(p.logprobs or []) for p in parts) == parts[-1].eval_count

# ---------------------------------------------------------------------------
# structured output and tools


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def test_format_json_and_schema(cl, name):
    ask = [{"role": "user", "content": "Describe a person as JSON."}]
    r = cl.chat(model=name, messages=ask, format="json", options=dict(G, num_predict=200))
    assert r.done_reason == "stop" and isinstance(json.loads(r.message.content), dict)
    r = cl.chat(model=name, messages=ask, format=PERSON, options=dict(G, num_predict=200))
    Draft202012Validator(PERSON).validate(json.loads(r.message.content))
    parts = list(cl.generate(model=name, prompt="A person as JSON:", format=PERSON,
                             options=dict(G, num_predict=200), stream=True))
    Draft202012Validator(PERSON).validate(json.loads("".join(p.response for p in parts)))


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                   "required": ["city"]}}}
ASK_TOOL = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_forced_tool_call(srv, name, doc):
    body = {"model": name, "messages": ASK_TOOL, "tools": [WEATHER], "stream": False,
            "tool_choice": "required", "options": dict(G, num_predict=60)}
    st, _, data = srv.post("/api/chat", body)
    assert st == 200, data
    schema(doc, "OllamaChatResponse").validate(json.loads(data))
    r = ollama.ChatResponse(**json.loads(data))  # the client's own parser
    call = r.message.tool_calls[0]
    assert call.function.name == "get_weather" and r.done_reason == "stop"
    Draft202012Validator(WEATHER["function"]["parameters"]).validate(dict(call.function.arguments))
    # streamed: the call comes whole in one line, then the final object
    st, _, data = srv.post("/api/chat", dict(body, stream=True))
    lines = [ollama.ChatResponse(**x) for x in ndjson(data)]
    calls = [c for x in lines for c in (x.message.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    assert dict(calls[0].function.arguments) == dict(call.function.arguments)
    assert lines[-1].done and lines[-1].done_reason == "stop"


def test_tools_with_the_client(cl, name):
    # "auto" (Ollama has no tool_choice): a call or words, the model's choice;
    # either way a well-formed answer
    def get_weather(city: str) -> str:
        """Weather of a city.

        Args:
          city: the city's name
        """
        return "sunny"

    r = cl.chat(model=name, messages=ASK_TOOL, tools=[get_weather], options=dict(G, num_predict=60))
    for c in r.message.tool_calls or []:
        assert c.function.name == "get_weather" and isinstance(c.function.arguments, dict)
    assert r.message.tool_calls or r.message.content
    # a conversation that called a tool and got its result
    hist = ASK_TOOL + [
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny, 21 C", "tool_name": "get_weather"}]
    r = cl.chat(model=name, messages=hist, tools=[WEATHER], options=dict(G, num_predict=20))
    check_final(r, 20)


def test_think(srv, cl, name):
    with pytest.raises(ollama.ResponseError) as ei:
        cl.chat(model=name, messages=MSGS, think=True)
    assert ei.value.status_code == 400 and "does not support thinking" in ei.value.error
    r = cl.chat(model=name, messages=MSGS, think=False, options=dict(G, num_predict=3))
    check_final(r, 3)
    assert not r.message.thinking

# ---------------------------------------------------------------------------
# bad input


BAD = [
    ("/api/chat", {"messages": MSGS}, 400),                               # no model
    ("/api/chat", {"model": "other:latest", "messages": MSGS}, 404),
    ("/api/chat", {"model": "{name}:v2", "messages": MSGS}, 404),
    ("/api/generate", {"model": "other", "prompt": "x"}, 404),
    ("/api/chat", {"model": 5, "messages": MSGS}, 400),
    ("/api/chat", {"model": "{name}", "messages": "hi"}, 400),
    ("/api/chat", {"model": "{name}", "messages": [5]}, 400),
    ("/api/chat", {"model": "{name}", "messages": [{"content": "x"}]}, 400),
    ("/api/chat", {"model": "{name}", "messages": [{"role": "bot", "content": "x"}]}, 400),
    ("/api/chat", {"model": "{name}", "messages": [{"role": "user", "content": 3}]}, 400),
    ("/api/chat", {"model": "{name}", "messages": [{"role": "user", "content": "x",
                                                    "images": ["aGk="]}]}, 400),
    ("/api/chat", {"model": "{name}", "messages": [{"role": "user", "content": "x",
                                                    "tool_calls": []}]}, 400),
    ("/api/chat", {"model": "{name}", "messages": [{"role": "assistant", "tool_calls": [
        {"function": {"name": "f", "arguments": 3}}]}]}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "stream": "yes"}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": []}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"temperature": "hot"}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"temperature": -1}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"top_p": 2}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"num_predict": 1.5}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"num_predict": -3}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"num_predict": 5e49}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"seed": -1e300}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"top_k": -1}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"num_ctx": 0}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"stop": 3}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"stop": [""]}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "options": {"seed": "x"}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "format": "xml"}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "format": 3}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "format": {"type": "bogus"}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "tools": {}}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "tools": [{"type": "code"}]}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "tools": [
        {"function": {"name": "bad name!"}}]}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "think": "maybe"}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "keep_alive": []}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "logprobs": 1}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "top_logprobs": 99}, 400),
    ("/api/chat", {"model": "{name}", "messages": MSGS, "tool_choice": "required"}, 400),
    ("/api/generate", {"model": "{name}", "prompt": 3}, 400),
    ("/api/generate", {"model": "{name}", "prompt": "x", "images": ["aGk="]}, 400),
    ("/api/generate", {"model": "{name}", "prompt": "x", "template": "{{ .Prompt }}"}, 400),
    ("/api/generate", {"model": "{name}", "prompt": "x", "context": [1, 2, 3]}, 400),
    ("/api/generate", {"model": "{name}", "prompt": "x", "raw": "yes"}, 400),
    ("/api/generate", {"model": "{name}", "suffix": "x"}, 400),
    ("/api/generate", {"model": "{name}", "prompt": "x", "system": 1}, 400),
]


@pytest.mark.parametrize("path,body,want", BAD)
def test_bad_input(srv, name, path, body, want):
    body = json.loads(json.dumps(body).replace("{name}", name.split(":")[0]))
    err_of(*srv.post(path, body)[::2], want)


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b"{\"model\": \"x\"} trailing",
                                 b"\xff\xfe", b"{\"model\": \"a\\u0000b\"}"])
def test_bad_json(srv, raw):
    for path in ("/api/chat", "/api/generate", "/api/show"):
        err_of(*srv.post(path, raw)[::2], 400)


def test_client_raises_response_error(cl):
    with pytest.raises(ollama.ResponseError) as ei:
        cl.chat(model="not-served", messages=MSGS)
    assert ei.value.status_code == 404 and "not found" in ei.value.error
    with pytest.raises(ollama.ResponseError) as ei:
        list(cl.chat(model="not-served", messages=MSGS, stream=True))
    assert ei.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as ei:
        cl.generate(model="not-served", prompt="x")
    assert ei.value.status_code == 404

# ---------------------------------------------------------------------------
# the fuzz corpus, replayed and mutated


@pytest.fixture(scope="module")
def small(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "128", "--parallel", "2", "--kv-mem", "32M")
    yield s
    assert s.stop() == 0, s.stderr()


def check_answer(path, st, h, data):
    assert st in (200, 400, 404, 501), (path, st, data[:300])
    if st != 200:
        err_of(st, data, st)
    elif h.get("Content-Type") == "application/x-ndjson":
        lines = ndjson(data)
        assert lines and (lines[-1].get("done") is True or "error" in lines[-1])
    else:
        assert isinstance(json.loads(data), dict)


def corpus():
    files = sorted(glob.glob(os.path.join(CORPUS, "*")))
    assert files, "empty corpus"
    out = []
    for f in files:
        base = os.path.basename(f)
        path = "/api/generate" if base.startswith("generate") else "/api/chat"
        with open(f, "rb") as fh:
            out.append((path, fh.read()))
    return out


def test_corpus_replayed(small):
    for path, body in corpus():
        check_answer(path, *small.post(path, body))


def test_corpus_mutated(small):
    rng = random.Random(1)
    seeds = corpus()
    for _ in range(120):
        path, body = rng.choice(seeds)
        b = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            if op == 0 and b:
                b[rng.randrange(len(b))] = rng.randrange(256)
            elif op == 1 and b:
                i = rng.randrange(len(b))
                del b[i:i + rng.randint(1, 8)]
            else:
                i = rng.randrange(len(b) + 1)
                b[i:i] = rng.choice([b"{", b"}", b"[", b"]", b"\"", b",", b"null", b"-1",
                                     b"1e999", b"\"options\":", b"\"format\":", b"\\u0000"])
        check_answer(path, *small.post(path, bytes(b)))
    st, _, _ = small.request("GET", "/health")
    assert st == 200

"""The published contract: src/server/openapi.json against the live server.

- The document is an OpenAPI 3.1 document whose schemas are valid JSON
  Schema 2020-12 and whose every $ref resolves; GET /openapi.json serves
  exactly the file of the repository (compiled in by the Makefile).
- It names the routes of src/server/http.c's table, no more and no less,
  and every documented path and method is routed (no 404/405); the chat
  page's routes are exactly the files of src/server/webui/ (plus "/").
- Real responses of every endpoint, success and error, have a documented
  status and content type, and their bodies validate against the
  documented schema (jsonschema); each event of the two streams validates
  against its chunk schema. The chat page's files (200 and 304), /props,
  /tokenize, /detokenize, and the answers of a draining server too.
"""
import json
import os
import re
import signal
import socket
import time

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from anvil_server import ROOT, Server, serve_bin, sse_events

DOC_PATH = os.path.join(ROOT, "src", "server", "openapi.json")
KEY = "contract-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
DOC_URI = "urn:anvil:openapi"


@pytest.fixture(scope="module")
def doc():
    with open(DOC_PATH) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "4", "--kv-mem", "64M",
               "--api-key", KEY)
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def model_id(srv):
    st, _, data = srv.request("GET", "/v1/models", headers=AUTH)
    assert st == 200
    return json.loads(data)["data"][0]["id"]


def pointer(*parts):
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def validator(doc, ptr):
    registry = Registry().with_resource(
        DOC_URI, Resource.from_contents(doc, default_specification=DRAFT202012))
    return Draft202012Validator({"$ref": DOC_URI + "#" + ptr}, registry=registry)


def all_refs(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref":
                yield v
            else:
                yield from all_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from all_refs(v)


def test_document_is_valid(doc):
    assert doc["openapi"].startswith("3.1.")
    for name, schema in doc["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)
    registry = Registry().with_resource(
        DOC_URI, Resource.from_contents(doc, default_specification=DRAFT202012))
    resolver = registry.resolver(DOC_URI)
    refs = set(all_refs(doc))
    assert refs
    for r in refs:
        assert r.startswith("#/components/schemas/"), r
        resolver.lookup(r)  # raises when it does not resolve
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["responses"], (path, method)
            for code, resp in op["responses"].items():
                assert re.fullmatch(r"[1-5]\d\d", code), (path, method, code)
                assert resp["description"]


def test_served_document_is_the_file(srv, doc):
    st, h, data = srv.request("GET", "/openapi.json")  # no key needed
    assert st == 200 and h["Content-Type"] == "application/json"
    assert json.loads(data) == doc


def route_table():
    """The paths of the routes[] table in src/server/http.c."""
    src = open(os.path.join(ROOT, "src", "server", "http.c")).read()
    table = src[src.index("static const struct srv_route routes[] = {"):]
    table = table[:table.index("};")]
    return sorted(re.findall(r'\{"(/[^"]*)", SRV_(GET|POST|DELETE)', table))


def test_document_names_every_route(doc):
    routes = route_table()
    assert len(routes) >= 15, routes
    documented = sorted(
        (re.sub(r"\{[^}]+\}$", "", p), m.upper()) for p, ops in doc["paths"].items() for m in ops)
    assert documented == sorted(routes), (documented, routes)


def test_page_routes_are_the_webui_files():
    """Each file of src/server/webui/ has its row (and "/" is index.html);
    a file added there without a row would be embedded and never served."""
    src = open(os.path.join(ROOT, "src", "server", "http.c")).read()
    table = src[src.index("static const struct srv_route routes[] = {"):]
    table = table[:table.index("};")]
    page = sorted(re.findall(r'\{"(/[^"]*)", SRV_GET, true, get_asset, true\}', table))
    files = sorted(["/"] + ["/" + f for f in os.listdir(os.path.join(ROOT, "src", "server",
                                                                     "webui"))])
    assert page == files


def test_every_documented_operation_is_routed(srv, doc, model_id):
    for path, ops in doc["paths"].items():
        url = path.replace("{model}", model_id)
        for method in ops:
            body = {} if method == "post" else None
            st, _, data = srv.request(method.upper(), url, body, headers=AUTH)
            # an unknown id of a prefix route is a 404 of the route itself
            routed_404 = b"model_not_found" in data or b"{response_id}" in data
            assert st not in (404, 405) or routed_404, (method, path, st, data)


# ---------------------------------------------------------------------------
# real responses against the document


def check(doc, path, method, status, headers, data):
    """The response is documented: status, content type, body schema."""
    op = doc["paths"][path][method]
    assert str(status) in op["responses"], f"{method} {path}: status {status} not documented"
    resp = op["responses"][str(status)]
    ctype = headers.get("Content-Type", "").split(";")[0].strip()
    content = resp.get("content", {})
    for name, h in resp.get("headers", {}).items():
        if h.get("required"):
            assert name in headers, (path, status, name)
    if not content:  # 304: no body, no type
        assert data == b"", (method, path, status)
        return None
    assert ctype in content, f"{method} {path} {status}: content type {ctype!r} not in {list(content)}"
    if ctype == "application/json":
        ptr = pointer("paths", path, method, "responses", status, "content", ctype, "schema")
        validator(doc, ptr).validate(json.loads(data))
    elif ctype == "text/event-stream":
        # the schema describes one event ({"data": ...}); its data is JSON
        # whose schema is the contentSchema (an annotation for jsonschema,
        # so applied here by hand)
        ptr = pointer("paths", path, method, "responses", status, "content", ctype, "schema")
        ev_v = validator(doc, ptr)
        chunk_v = validator(doc, ptr + "/properties/data/else/contentSchema")
        events = sse_events(data)  # the JSON payloads, [DONE] checked and left out
        assert events
        for ev in events:
            ev_v.validate({"data": json.dumps(ev)})
            chunk_v.validate(ev)
        ev_v.validate({"data": "[DONE]"})
        return events
    else:
        assert isinstance(data.decode("utf-8"), str)
    return None


def test_get_routes_match(srv, doc, model_id):
    for path, url, hdrs in [("/health", "/health", {}),
                            ("/openapi.json", "/openapi.json", {}),
                            ("/metrics", "/metrics", AUTH),
                            ("/v1/models", "/v1/models", AUTH),
                            ("/v1/models/{model}", f"/v1/models/{model_id}", AUTH),
                            ("/v1/models/{model}", "/v1/models/nope", AUTH),
                            ("/v1/models", "/v1/models", {}),
                            ("/metrics", "/metrics", {"Authorization": "Bearer wrong"}),
                            ("/props", "/props", AUTH),
                            ("/props", "/props", {})]:
        st, h, data = srv.request("GET", url, headers=hdrs)
        check(doc, path, "get", st, h, data)


def test_page_matches(srv, doc):
    for path in ("/", "/index.html", "/app.js", "/style.css", "/favicon.svg"):
        st, h, data = srv.request("GET", path)  # no key needed
        assert st == 200 and data
        check(doc, path, "get", st, h, data)
        st, h, data = srv.request("GET", path, headers={"If-None-Match": h["ETag"]})
        assert st == 304
        check(doc, path, "get", st, h, data)


def test_props_and_models_facts_match(srv, doc, model_id):
    _, _, data = srv.request("GET", "/props", headers=AUTH)
    p = json.loads(data)
    assert p["chat_template_name"] == "chatml" and p["chat_template_source"] == "file"
    _, _, data = srv.request("GET", f"/v1/models/{model_id}", headers=AUTH)
    meta = json.loads(data)["meta"]
    assert {k: p[k] for k in meta} == meta


TOK = [
    ("/tokenize", {"content": "Hello world"}, 200),
    ("/tokenize", {"content": "caf\u00e9 \U0001f642", "with_pieces": True, "add_special": True}, 200),
    ("/tokenize", {"content": 1}, 400),
    ("/tokenize", {"content": "a", "extra": True}, 400),
    ("/detokenize", {"tokens": [19556, 905]}, 200),
    ("/detokenize", {"tokens": []}, 200),
    ("/detokenize", {"tokens": [-1]}, 400),
    ("/detokenize", b"{", 400),
]


@pytest.mark.parametrize("path,body,want", TOK, ids=[f"{p} {i}" for i, (p, _, _) in enumerate(TOK)])
def test_tokenizer_endpoints_match(srv, doc, path, body, want):
    st, h, data = srv.post(path, body, headers=AUTH)
    assert st == want, data
    check(doc, path, "post", st, h, data)
    st, h, data = srv.post(path, body)
    assert st == 401
    check(doc, path, "post", st, h, data)


GEN = [
    ("/v1/completions", {"prompt": "The sky is", "max_tokens": 4, "temperature": 0}),
    ("/v1/completions", {"prompt": [300, 301], "max_tokens": 3, "logprobs": 2}),
    ("/v1/completions", {"prompt": "Hi", "max_tokens": 3, "stop": ["\n"], "seed": 7}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": [{"type": "text",
                                                                         "text": "Hi"}]}],
                              "max_tokens": 3, "logprobs": True, "top_logprobs": 2}),
    # structured output: a regex, a JSON schema, a forced tool call
    ("/v1/completions", {"prompt": "The year is", "max_tokens": 8, "temperature": 0,
                         "regex": " [0-9]{4}"}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "A number as JSON"}],
                              "max_tokens": 24, "temperature": 0,
                              "response_format": {"type": "json_schema", "json_schema": {
                                  "name": "n", "strict": True, "schema": {
                                      "type": "object", "properties": {"n": {"type": "integer"}},
                                      "required": ["n"], "additionalProperties": False}}}}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Weather in Oslo?"}],
                              "max_tokens": 32, "temperature": 0, "tool_choice": "required",
                              "tools": [{"type": "function", "function": {
                                  "name": "weather", "parameters": {
                                      "type": "object", "properties": {"city": {"type": "string",
                                                                               "maxLength": 12}},
                                      "required": ["city"]}}}]}),
]


@pytest.mark.parametrize("path,body", GEN, ids=[f"{p} {i}" for i, (p, _) in enumerate(GEN)])
def test_generation_matches(srv, doc, model_id, path, body):
    st, h, data = srv.post(path, dict(body, model=model_id), headers=AUTH)
    assert st == 200, data
    check(doc, path, "post", st, h, data)
    st, h, data = srv.post(path, dict(body, stream=True,
                                      stream_options={"include_usage": True}), headers=AUTH)
    assert st == 200, data
    events = check(doc, path, "post", st, h, data)
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] >= 1


ERRORS = [
    ({"prompt": "hi", "max_tokens": "3"}, AUTH, 400),
    ({"prompt": "hi", "n": 0}, AUTH, 400),
    ({"prompt": "x " * 400}, AUTH, 400),
    ({"prompt": "hi", "model": "not-this-one"}, AUTH, 404),
    ({"prompt": "hi"}, {}, 401),
    (b'{"prompt": "\xff"}', AUTH, 400),
    (b"[" * 100, AUTH, 400),
]


@pytest.mark.parametrize("body,hdrs,want", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_errors_match(srv, doc, body, hdrs, want):
    for path in ("/v1/completions", "/v1/chat/completions"):
        b = body
        if isinstance(b, dict) and path.endswith("chat/completions"):
            b = {("messages" if k == "prompt" else k):
                 ([{"role": "user", "content": v}] if k == "prompt" else v) for k, v in b.items()}
        st, h, data = srv.post(path, b, headers=hdrs)
        assert st == want, data
        check(doc, path, "post", st, h, data)


def test_body_too_large_matches(srv, doc):
    k = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % (KEY.encode(), 8 << 20))
    resp = b""
    while True:
        c = k.recv(65536)
        if not c:
            break
        resp += c
    k.close()
    head, _, body = resp.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = dict(l.split(": ", 1) for l in lines[1:])
    assert status == 413
    check(doc, "/v1/completions", "post", status, hdrs, body)


def test_too_many_connections_matches(doc, model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "1", "--kv-mem", "32M",
               "--max-conn", "1")
    idle = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    time.sleep(0.3)  # accepted before the requests below (the workers race to accept)
    try:
        for path, method, body in [("/health", "GET", None), ("/v1/models", "GET", None),
                                   ("/v1/completions", "POST", {"prompt": "hi"})]:
            st, h, data = s.request(method, path, body)
            assert st == 503, data
            check(doc, path, method.lower(), st, h, data)
    finally:
        idle.close()
        assert s.stop() == 0, s.stderr()


def test_draining_matches(doc, model_path):
    """SIGTERM with a stream in flight: /health's 503, the 503s of every
    other route (server_draining) and /metrics' 200 are documented."""
    s = Server(serve_bin(), model_path, "--ctx", "512", "--parallel", "2", "--kv-mem", "32M")
    k = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    try:
        body = json.dumps({"prompt": "Count:", "max_tokens": 400, "ignore_eos": True,
                           "stream": True, "temperature": 0}).encode()
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                  b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        got = b""
        while got.count(b"data: ") < 2:
            chunk = k.recv(4096)
            assert chunk, got
            got += chunk
        s.p.send_signal(signal.SIGTERM)
        for _ in range(100):
            st, h, data = s.request("GET", "/health")
            if st == 503:
                break
            time.sleep(0.05)
        assert st == 503
        check(doc, "/health", "get", st, h, data)
        assert json.loads(data) == {"status": "draining"}
        for path, method, body in [("/v1/completions", "post", {"prompt": "x"}),
                                   ("/v1/chat/completions", "post", {"messages": []}),
                                   ("/tokenize", "post", {"content": "x"}),
                                   ("/detokenize", "post", {"tokens": [1]}),
                                   ("/props", "get", None), ("/", "get", None),
                                   ("/app.js", "get", None), ("/openapi.json", "get", None),
                                   ("/v1/models", "get", None)]:
            st, h, data = s.request(method.upper(), path, body)
            assert st == 503 and json.loads(data)["error"]["code"] == "server_draining", data
            assert h["Connection"] == "close" and h["Retry-After"] == "1"
            check(doc, path, method, st, h, data)
        st, h, data = s.request("GET", "/metrics")
        assert st == 200
        check(doc, "/metrics", "get", st, h, data)
    finally:
        k.close()  # the stream is cancelled; the server then exits
        assert s.stop() == 0, s.stderr()


def test_fields_by_route_doc_matches_code():
    """docs/server.md's "Fields by route" is what tools/fields_doc.py makes
    of the code's field tables (regenerate with `tools/fields_doc.py
    --write`); and every field of the generation routes' table is in the
    request schema of openapi.json."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("fields_doc",
                                                  os.path.join(ROOT, "tools", "fields_doc.py"))
    fd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fd)
    with open(fd.DOC, encoding="utf-8") as f:
        have = fd.current(f.read())
    assert have == fd.section(), "run tools/fields_doc.py --write"
    with open(DOC_PATH) as f:
        d = json.load(f)
    schemas = {"POST /v1/chat/completions": "ChatCompletionRequest",
               "POST /v1/completions": "CompletionRequest", "POST /infill": "InfillRequest"}
    for route, _, fields in fd.routes():
        if route in schemas:
            props = d["components"]["schemas"][schemas[route]]["properties"]
            missing = [n for n, _ in fields if n not in props]
            # OpenAI's deprecated/unsupported names the schema leaves out on purpose
            missing = [n for n in missing if n not in ("functions", "function_call", "best_of",
                                                       "echo", "suffix")]
            assert not missing, (route, missing)

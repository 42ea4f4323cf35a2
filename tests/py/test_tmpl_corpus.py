"""The Jinja interpreter (src/tmpl) against jinja2 on real chat templates.

Every template of llama.cpp's corpus (the pinned llama-cpp-python sdist's
vendor/llama.cpp/models/templates/*.jinja) and the templates inside the
GGUF files the tests use (the default model, llama.cpp's vocabulary
files), times the conversations of tmplref.conversations() (user only,
system, multi-turn, tools offered, assistant tool calls with parallel
calls and tool results, reasoning turns with enable_thinking on and off,
each with and without the generation prompt): anvil's rendering must equal
jinja2's ImmutableSandboxedEnvironment (configured as transformers
configures it, tmplref.py) byte for byte, or both must fail.

The cases where anvil differs are listed in KNOWN with the reason; a listed
case that starts to agree fails too (the list must stay true). All cases
render in one tests/tool_tmpl process (--batch).
"""
import ctypes
import glob
import json
import os
import subprocess
import tempfile

import pytest

from tmplref import NOW, conversations, jinja_render, tool_bins
from tokutil import MODEL, sdist_models

# (template file name, conversation name) -> why anvil differs from jinja2.
# Filled from the corpus run; each entry is a real difference, not a skip.
KNOWN = {}
for _c in ("tools-gen1", "tools-gen0", "calls-gen1", "calls-gen0"):
    # jinja2 fails: `tools | map(...)` is a Python generator that its tojson
    # cannot serialise; anvil's map gives a list, which tojson prints
    KNOWN[("llama-cpp-deepseek-r1.jinja", _c)] = "jinja2 cannot tojson a generator"


def gguf_template(path):
    import llama_cpp
    v = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    return v.metadata.get("tokenizer.chat_template")


def corpus():
    """name -> template source."""
    d = os.path.join(sdist_models(), "templates")
    out = {}
    for p in sorted(glob.glob(os.path.join(d, "*.jinja"))):
        with open(p, encoding="utf-8", newline="") as f:
            out[os.path.basename(p)] = f.read()
    assert len(out) >= 60, f"the template corpus in {d} looks incomplete ({len(out)} files)"
    files = [MODEL] + sorted(glob.glob(os.path.join(sdist_models(), "ggml-vocab-*.gguf")))
    for p in files:
        if os.path.exists(p):
            t = gguf_template(p)
            if t:
                out["gguf:" + os.path.basename(p)] = t
    return out


def render_all(tool, cases):
    """{key: (ok, text)} for cases {key: (source, ctx)}, in one process."""
    with tempfile.TemporaryDirectory() as d:
        lines, tmpl_path, keys = [], {}, list(cases)
        for i, k in enumerate(keys):
            src, ctx = cases[k]
            if src not in tmpl_path:
                tmpl_path[src] = os.path.join(d, f"t{len(tmpl_path)}.jinja")
                with open(tmpl_path[src], "w", encoding="utf-8", newline="") as f:
                    f.write(src)
            c = os.path.join(d, f"c{i}.json")
            with open(c, "w", encoding="utf-8") as f:
                json.dump(ctx, f, ensure_ascii=False)
            lines.append(f"{tmpl_path[src]}\t{c}\t{os.path.join(d, f'o{i}')}\n")
        lst = os.path.join(d, "list")
        with open(lst, "w") as f:
            f.writelines(lines)
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1")
        p = subprocess.run([tool, "--batch", lst, str(NOW)], capture_output=True, timeout=900,
                           env=env)
        assert p.returncode == 0, f"tool_tmpl --batch failed ({p.returncode}): {p.stderr[-2000:]!r}"
        out = {}
        for i, k in enumerate(keys):
            o = os.path.join(d, f"o{i}")
            if os.path.exists(o):
                with open(o, "rb") as f:
                    out[k] = (True, f.read().decode("utf-8"))
            else:
                with open(o + ".err", "rb") as f:
                    out[k] = (False, f.read().decode("utf-8", errors="replace"))
        return out


_COMPILED = {}


def render_cached(src, ctx):
    """jinja_render with each template compiled once (compiling is most
    of jinja2's time)."""
    from tmplref import environment
    try:
        if src not in _COMPILED:
            _COMPILED[src] = environment().from_string(src)
        return True, _COMPILED[src].render(**ctx)
    except Exception as e:  # the same contract as tmplref.jinja_render
        return False, f"{type(e).__name__}: {e}"


@pytest.fixture(scope="module")
def results():
    tmpls = corpus()
    convs = conversations()
    cases = {(t, c): (src, ctx) for t, src in tmpls.items() for c, ctx in convs.items()}
    ref = {k: render_cached(src, ctx) for k, (src, ctx) in cases.items()}
    return cases, ref, {tool: render_all(tool, cases) for tool in tool_bins()}


def test_corpus_matches_jinja2(results):
    cases, ref, per_tool = results
    for tool, ours in per_tool.items():
        bad, agree, both_fail = [], 0, 0
        for k in cases:
            (rok, rtext), (ook, otext) = ref[k], ours[k]
            same = (rok and ook and rtext == otext) or (not rok and not ook)
            if same:
                agree += 1
                both_fail += not rok
                assert k not in KNOWN, f"{k} is listed as a known mismatch but now agrees"
            elif k not in KNOWN:
                bad.append((k, rok, rtext[:300], ook, otext[:300]))
        print(f"{tool}: {agree}/{len(cases)} agree ({both_fail} fail on both sides), "
              f"{len(KNOWN)} known mismatches")
        assert not bad, f"{len(bad)} unexpected mismatches, first: {bad[:3]}"
        # most renderings succeed: a test where everything fails proves nothing
        assert agree - both_fail > len(cases) * 0.6


def test_known_mismatches_still_listed_for_real_cases(results):
    cases, _, _ = results
    for k in KNOWN:
        assert k in cases, f"KNOWN names a case that no longer exists: {k}"


# ----------------------------------------------------------------------------
# the server: the prompt it builds has the tokens of jinja2's rendering

# corpus templates served with the default model's weights through
# --chat-template-file (each family's real template on a model that runs);
# None = the GGUF's own template
SERVED = [None, "Qwen-Qwen3-0.6B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
          "mistralai-Mistral-Nemo-Instruct-2407.jinja", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"]


def openai_messages(msgs):
    """The conversation as OpenAI sends it: tool-call arguments as JSON text."""
    out = []
    for m in msgs:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [dict(c, function=dict(c["function"],
                                                     arguments=json.dumps(c["function"]["arguments"])))
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def request_for(ctx):
    body = {"messages": openai_messages(ctx["messages"]), "max_tokens": 1, "temperature": 0,
            "add_generation_prompt": ctx["add_generation_prompt"]}
    if "tools" in ctx:
        body["tools"] = ctx["tools"]
    if "enable_thinking" in ctx:
        body["chat_template_kwargs"] = {"enable_thinking": ctx["enable_thinking"]}
    return body


def token_text(llm, t):
    import llama_cpp
    buf = (ctypes.c_char * 256)()
    n = llama_cpp.llama_token_to_piece(llm._model.vocab, t, buf, 256, 0, True)
    return bytes(buf[:n]).decode("utf-8", errors="replace") if n > 0 else ""


def reference_count(llm, src, ctx):
    """(ok, n tokens) of jinja2's rendering tokenized by llama-cpp-python,
    BOS added unless the text starts with it."""
    ok, text = jinja_render(src, ctx)
    if not ok:
        return False, text
    bos = token_text(llm, llm.token_bos()) if llm.token_bos() >= 0 else ""
    add = not (bos and text.startswith(bos))
    return True, len(llm.tokenize(text.encode(), add_bos=add, special=True))


@pytest.fixture(scope="module")
def vocab(model_path):
    import llama_cpp
    return llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)


def served_source(name, model_path):
    if name is None:
        return gguf_template(model_path)
    p = os.path.join(sdist_models(), "templates", name)
    assert os.path.exists(p), f"corpus template {name} missing"
    with open(p, encoding="utf-8", newline="") as f:
        return f.read()


@pytest.mark.parametrize("name", SERVED, ids=lambda n: n or "gguf")
def test_prompt_tokens_match_jinja2(model_path, vocab, name):
    from anvil_server import Server, serve_bin
    src = served_source(name, model_path)
    extra = ["--chat-template-file", os.path.join(sdist_models(), "templates", name)] if name else []
    s = Server(serve_bin(), model_path, "--ctx", "2048", *extra,
               env=dict(os.environ, ANVIL_CHAT_NOW=str(NOW)))
    try:
        bos = token_text(vocab, vocab.token_bos()) if vocab.token_bos() >= 0 else ""
        eos = token_text(vocab, vocab.token_eos())
        checked = 0
        for cname, ctx in conversations().items():
            ctx = dict(ctx, bos_token=bos, eos_token=eos)
            ok, want = reference_count(vocab, src, ctx)
            st, _, data = s.post("/v1/chat/completions", request_for(ctx))
            if not ok:
                # the template refused the conversation: so does the server
                assert st == 400, (cname, st, data)
                continue
            assert st == 200, (cname, data)
            got = json.loads(data)["usage"]["prompt_tokens"]
            if "tools" in ctx and "tools" not in src:
                # a template that takes no tools gets their text in its
                # system turn (prompt.c, as llama.cpp's generic handler)
                assert got > want, (name, cname, got, want)
                continue
            assert got == want, (name, cname, got, want)
            checked += 1
        assert checked >= 6, checked
        st, _, data = s.request("GET", "/props")
        p = json.loads(data)
        assert p["chat_template"] == src
        assert p["chat_template_origin"] == ("file" if name else "gguf")
        assert isinstance(p["tool_format"], str) and isinstance(p["reasoning_format"], str)
        # /apply-template gives jinja2's text
        ctx = dict(conversations()["multi-gen1"], bos_token=bos, eos_token=eos)
        ok, want = jinja_render(src, ctx)
        st, _, data = s.post("/apply-template", {"messages": ctx["messages"]})
        assert st == 200 and json.loads(data) == {"prompt": want}, data
    finally:
        assert s.stop() == 0, s.stderr()


def test_template_errors_and_builtin(model_path, tmp_path):
    from anvil_server import Server, serve_bin
    t = tmp_path / "strict.jinja"
    t.write_text("{% for m in messages %}{% if m.role == 'system' %}\n"
                 "{{ raise_exception('System messages are not supported') }}{% endif %}"
                 "{{ m.role }}: {{ m.content }}\n{% endfor %}")
    s = Server(serve_bin(), model_path, "--ctx", "512", "--chat-template-file", str(t))
    try:
        bad = {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}],
               "max_tokens": 1}
        for path in ("/v1/chat/completions", "/apply-template"):
            st, _, data = s.post(path, bad)
            assert st == 400, data
            msg = json.loads(data)["error"]["message"]
            assert "line 2" in msg and "System messages are not supported" in msg, msg
        st, _, data = s.post("/apply-template", {"messages": [{"role": "user", "content": "y"}]})
        assert st == 200 and json.loads(data)["prompt"] == "user: y\n", data
        st, _, data = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "y"}],
                                                      "max_tokens": 1,
                                                      "chat_template_kwargs": [1]})
        assert st == 400 and b"chat_template_kwargs" in data, data
    finally:
        assert s.stop() == 0, s.stderr()
    # a file that does not parse is refused at start-up, naming the line
    t.write_text("ok\n{% if x %}\nno endif")
    p = subprocess.run([serve_bin(), "serve", "-m", model_path, "--chat-template-file", str(t)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "chat template" in p.stderr, p.stderr
    # --chat-template NAME: the built-in family, said in /props
    s = Server(serve_bin(), model_path, "--ctx", "512", "--chat-template", "chatml")
    try:
        p = json.loads(s.request("GET", "/props")[2])
        assert p["chat_template_origin"] == "builtin chatml", p
    finally:
        assert s.stop() == 0, s.stderr()


def test_print_prompt(model_path):
    from anvil_server import serve_bin
    src = gguf_template(model_path)
    ctx = {"messages": [{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": "Hi <|im_start|>"}],
           "add_generation_prompt": True}
    import llama_cpp
    v = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    ctx["bos_token"] = token_text(v, v.token_bos()) if v.token_bos() >= 0 else ""
    ctx["eos_token"] = token_text(v, v.token_eos())
    ok, want = jinja_render(src, ctx)
    assert ok
    env = dict(os.environ, ANVIL_CHAT_NOW=str(NOW))
    p = subprocess.run([serve_bin(), "tokenize", "-m", model_path, "--chat", "--system",
                        "Be brief.", "-p", "Hi <|im_start|>", "--print-prompt"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and p.stdout == want, (p.stdout, want, p.stderr)
    assert "Jinja" in p.stderr
    p = subprocess.run([serve_bin(), "run", "-m", model_path, "--chat", "--system", "Be brief.",
                        "-p", "Hi <|im_start|>", "--print-prompt"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and p.stdout == want, (p.stdout, want, p.stderr)
    # the typed marker is text in the tokens: one <|im_start|> fewer than
    # llama-cpp-python finds with special parsing on the whole text
    p = subprocess.run([serve_bin(), "tokenize", "-m", model_path, "--chat", "--system",
                        "Be brief.", "-p", "Hi <|im_start|>", "--ids-only"],
                       capture_output=True, text=True, timeout=120, env=env)
    ids = [int(x) for x in p.stdout.split()]
    full = v.tokenize(want.encode(), add_bos=True, special=True)
    im_start = v.tokenize(b"<|im_start|>", add_bos=False, special=True)
    assert len(im_start) == 1
    assert ids.count(im_start[0]) == full.count(im_start[0]) - 1, (ids, full)

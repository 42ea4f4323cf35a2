"""The chat page in a real browser: headless Chromium (Debian's chromium
and chromium-driver, driven with Selenium) against a live `anvil serve`
on the default model.

Covered: the page loads and shows the model and its template; a prompt
streams an answer, which is exactly the greedy answer the API gives for
the same conversation; the conversation is kept and sent whole on the
next turn; a second, long generation is stopped mid-stream (the server
sees the cancel); model output and stored conversations holding
<script>, <img onerror> and javascript: links render as text; an API
error is shown; with --api-key the page asks for the key; screenshots
(light and dark) are saved to build/webui/ and must not be blank.

A missing Chromium or chromedriver is a failure (`make deps` installs
Debian's chromium and chromium-driver).
"""
import io
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from serve_util import ROOT, Server, http_request, wait_until

SHOTS = os.path.join(ROOT, "build", "webui")


def chromium_or_fail():
    chrome, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chrome and driver:
        return chrome, driver
    installable = False
    if shutil.which("apt-cache"):
        p = subprocess.run(["apt-cache", "policy", "chromium", "chromium-driver"],
                           capture_output=True, text=True)
        installable = "Candidate:" in p.stdout and "Candidate: (none)" not in p.stdout
    if installable:
        pytest.fail("chromium/chromium-driver are installable but not installed: run `make deps`")
    pytest.fail("chromium and chromium-driver are missing and apt has no candidate for them "
                "(Debian's packages; install a Chromium and its chromedriver on the PATH)")


@pytest.fixture(scope="module")
def browser():
    chrome, driver = chromium_or_fail()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,860", "--disable-extensions", "--no-first-run",
              "--disable-background-networking"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(service=Service(driver), options=opts)
    d.set_page_load_timeout(60)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def srv():
    s = Server("--ctx", "1024", "--parallel", "4", "--kv-mem", "64M", "--replica-id", "b1")
    yield s
    assert s.stop() == 0, s.stderr()


def open_page(d, port, settings=None, chat=None):
    """Load the page with a clean slate (and optional stored state)."""
    url = f"http://127.0.0.1:{port}/"
    d.get(url)
    d.execute_script("localStorage.clear(); sessionStorage.clear();")
    if settings is not None:
        d.execute_script("localStorage.setItem('anvil.settings', arguments[0])", json.dumps(settings))
    if chat is not None:
        d.execute_script("localStorage.setItem('anvil.chat', arguments[0])", json.dumps(chat))
    d.get(url)
    # record every request body the page sends (the page calls the global fetch)
    d.execute_script("""
        window.__bodies = [];
        const f = window.fetch;
        window.fetch = function (u, o) { if (o && o.body) window.__bodies.push(String(o.body)); return f.apply(this, arguments); };
    """)


def last_assistant(d):
    return d.execute_script("""
        const m = [...document.querySelectorAll('.msg[data-role=assistant]')].pop();
        return m ? {state: m.dataset.state, text: m.querySelector('.content').innerText,
                    stats: m.querySelector('.stats').textContent,
                    error: m.querySelector('.error-box').textContent} : null;""")


def stored_chat(d):
    return json.loads(d.execute_script("return localStorage.getItem('anvil.chat')") or "[]")


def send(d, text):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    p = d.find_element(By.ID, "prompt")
    p.send_keys(text)
    p.send_keys(Keys.ENTER)


def wait_state(d, states, secs=120):
    return wait_until(lambda: (lambda m: m if m and m["state"] in states else None)(last_assistant(d)),
                      secs=secs, step=0.1, what=f"assistant message in state {states}")


def no_injected_nodes(d):
    return d.execute_script("""
        const box = document.getElementById('messages');
        const bad = box.querySelectorAll('script, img, iframe, object, embed, svg, style, link, form, input');
        let handlers = 0;
        for (const e of box.querySelectorAll('*'))
          for (const a of e.attributes) if (a.name.startsWith('on')) handlers++;
        const js = [...box.querySelectorAll('a')].filter(a => !/^(https?:|mailto:)/.test(a.href)).length;
        return {bad: bad.length, handlers, js, pwned: window.__pwned === undefined ? null : window.__pwned};""")


def test_page_loads_with_model_facts(browser, srv):
    open_page(browser, srv.port)
    wait_until(lambda: browser.execute_script(
        "return document.getElementById('model-name').textContent") == "SmolLM2-135M-Instruct.Q4_1",
        secs=20, what="model name in the header")
    facts = browser.execute_script("""return ['model-template','model-ctx','model-replica']
        .map(id => document.getElementById(id).textContent)""")
    assert facts == ["template chatml", "ctx 1024", "replica b1"]
    assert browser.title == "anvil"
    # no console errors (a CSP violation or a script error would show here)
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_chat_streams_the_greedy_answer_and_keeps_the_conversation(browser, srv):
    settings = {"temperature": 0, "top_p": 1, "max_tokens": 48, "system": "Answer briefly."}
    open_page(browser, srv.port, settings=settings)
    send(browser, "What is the capital of France?")
    # the answer is seen streaming, then done
    wait_state(browser, ("streaming", "done"), secs=120)
    m = wait_state(browser, ("done",), secs=120)
    assert m["text"].strip(), m
    assert re.fullmatch(r"\d+ tokens? · [\d.]+ tok/s · first token \d+ ms( · stopped at max tokens)?",
                        m["stats"]), m["stats"]
    chat = stored_chat(browser)
    assert [c["role"] for c in chat] == ["user", "assistant"]
    # what the page streamed is exactly what the API answers in one piece
    msgs = [{"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"}]
    st, _, data = http_request(srv.port, "POST", "/v1/chat/completions", {
        "messages": msgs, "temperature": 0, "top_p": 1, "max_tokens": 48})
    assert st == 200
    want = json.loads(data)["choices"][0]["message"]["content"]
    assert chat[1]["content"] == want
    n_tokens = json.loads(data)["usage"]["completion_tokens"]
    assert m["stats"].startswith(f"{n_tokens} token")

    # second turn: the whole conversation goes to the server
    send(browser, "And of Italy?")
    wait_until(lambda: len(stored_chat(browser)) == 4 and stored_chat(browser)[3]["state"] == "done",
               secs=120, step=0.2, what="second answer")
    body = json.loads(browser.execute_script("return window.__bodies[window.__bodies.length - 1]"))
    assert [x["role"] for x in body["messages"]] == ["system", "user", "assistant", "user"]
    assert body["messages"][2]["content"] == want
    assert body["stream"] is True and body["temperature"] == 0 and body["max_tokens"] == 48
    assert body["model"] == "SmolLM2-135M-Instruct.Q4_1"
    # the conversation survives a reload
    browser.refresh()
    n = browser.execute_script("return document.querySelectorAll('.msg').length")
    assert n == 4


def metric(port, name):
    _, _, data = http_request(port, "GET", "/metrics")
    for line in data.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {name}")


def test_stop_a_generation_mid_stream(browser, srv):
    from selenium.webdriver.common.by import By
    open_page(browser, srv.port, settings={"temperature": 0, "max_tokens": 900})
    cancelled0 = metric(srv.port, 'anvil_requests_finished_total{reason="cancelled"}')
    send(browser, "Write a very long story about a lighthouse keeper, with many chapters.")
    wait_until(lambda: (lambda m: m and m["state"] == "streaming" and
                        len(m["text"]) > 40)(last_assistant(browser)),
               secs=120, step=0.1, what="some streamed text")
    assert browser.find_element(By.ID, "stop").is_displayed()
    assert not browser.find_element(By.ID, "send").is_displayed()
    browser.find_element(By.ID, "stop").click()
    m = wait_state(browser, ("stopped",), secs=10)
    assert m["error"] == ""
    text_at_stop = stored_chat(browser)[-1]["content"]
    assert text_at_stop and stored_chat(browser)[-1]["state"] == "stopped"
    # the server cancelled it: the 900 tokens were not generated
    wait_until(lambda: metric(srv.port, 'anvil_requests_finished_total{reason="cancelled"}')
               == cancelled0 + 1, secs=10, what="the server to cancel the request")
    assert metric(srv.port, "anvil_requests_in_flight") == 0
    time.sleep(0.5)
    assert stored_chat(browser)[-1]["content"] == text_at_stop  # nothing more arrived
    assert browser.find_element(By.ID, "send").is_displayed()
    assert not browser.find_element(By.ID, "stop").is_displayed()
    badge = browser.execute_script(
        "return [...document.querySelectorAll('.msg[data-role=assistant]')].pop()"
        ".querySelector('.badge').textContent")
    assert badge == "stopped"


EVIL = ("## Title <script>window.__pwned=1</script>\n\n"
        "Text <img src=x onerror=\"window.__pwned=2\"> and <b>bold tag</b> and "
        "[click](javascript:window.__pwned=3) and [ok](https://example.com) and "
        "<a href=\"javascript:window.__pwned=4\">a</a>\n\n"
        "| a | b |\n|---|---|\n| <script>window.__pwned=5</script> | <iframe src=x></iframe> |\n\n"
        "```html\n<script>window.__pwned=6</script>\n```\n\n"
        "- `<style>body{display:none}</style>`\n- <svg onload=\"window.__pwned=7\">\n")


def test_script_in_output_renders_as_text(browser, srv):
    # a stored conversation goes through the same renderer as streamed output
    chat = [{"role": "user", "content": "<script>window.__pwned=8</script>hi"},
            {"role": "assistant", "content": EVIL, "state": "done"}]
    open_page(browser, srv.port, chat=chat)
    time.sleep(0.5)
    r = no_injected_nodes(browser)
    assert r == {"bad": 0, "handlers": 0, "js": 0, "pwned": None}, r
    text = browser.execute_script("return document.getElementById('messages').innerText")
    for s in ("<script>window.__pwned=1</script>", "<img src=x onerror=", "<b>bold tag</b>",
              "<script>window.__pwned=8</script>hi", "<iframe src=x></iframe>",
              "<script>window.__pwned=6</script>", "<style>body{display:none}</style>",
              "<svg onload="):
        assert s in text, s
    links = browser.execute_script(
        "return [...document.querySelectorAll('#messages a')].map(a => a.href)")
    assert links == ["https://example.com/"]


def test_script_in_live_output_renders_as_text(browser, srv):
    open_page(browser, srv.port, settings={"temperature": 0, "max_tokens": 40})
    send(browser, 'Repeat exactly: <script>window.__pwned=1</script> <img src=x onerror="window.__pwned=2">')
    wait_state(browser, ("done",), secs=120)
    r = no_injected_nodes(browser)
    assert r == {"bad": 0, "handlers": 0, "js": 0, "pwned": None}, r
    user = browser.execute_script("return document.querySelector('.msg[data-role=user] .content').innerText")
    assert "<script>window.__pwned=1</script>" in user


def test_api_error_is_shown(browser, srv):
    # prompt + max_tokens over the context: the server's 400 is shown
    open_page(browser, srv.port, settings={"temperature": 0, "max_tokens": 1024})
    send(browser, "Hello")
    m = wait_state(browser, ("error",), secs=30)
    assert m["error"].startswith("400: "), m
    assert "context" in m["error"]


def test_api_key_is_asked_for(browser):
    from selenium.webdriver.common.by import By
    s = Server("--ctx", "512", "--kv-mem", "32M", "--api-key", "s3cret")
    try:
        open_page(browser, s.port, settings={"temperature": 0, "max_tokens": 8})
        dialog = browser.find_element(By.ID, "key-dialog")
        wait_until(dialog.is_displayed, secs=10, what="the key dialog")
        browser.find_element(By.ID, "api-key").send_keys("wrong")
        browser.find_element(By.ID, "api-key-save").click()
        wait_until(lambda: dialog.is_displayed() and browser.find_element(By.ID, "key-error")
                   .is_displayed(), secs=10, what="the key dialog again, with an error")
        browser.find_element(By.ID, "api-key").send_keys("s3cret")
        browser.find_element(By.ID, "api-key-save").click()
        wait_until(lambda: browser.execute_script(
            "return document.getElementById('model-name').textContent") ==
            "SmolLM2-135M-Instruct.Q4_1", secs=10, what="model name after the key")
        assert not dialog.is_displayed()
        send(browser, "Hi")
        m = wait_state(browser, ("done", "error"), secs=60)
        assert m["state"] == "done", m
        # the key is kept in this tab only
        assert browser.execute_script("return sessionStorage.getItem('anvil.key')") == "s3cret"
        assert "s3cret" not in (browser.execute_script(
            "return JSON.stringify(Object.assign({}, localStorage))") or "")
    finally:
        assert s.stop() == 0, s.stderr()


def pixel_stats(png):
    import numpy as np
    from PIL import Image
    img = Image.open(io.BytesIO(png)).convert("L")
    px = np.asarray(img, dtype=np.float64)
    return img.size, float(px.var()), len(np.unique(px))


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_screenshot_is_not_blank(browser, srv, theme):
    chat = [{"role": "user", "content": "Show a Python example."},
            {"role": "assistant", "state": "done", "stats": {"n": 42, "tps": 51.3, "ttft": 180},
             "content": "Here is one:\n\n```python\ndef add(a, b):\n    # sum\n    return a + b\n```\n\n"
                        "- **fast**\n- *simple*\n\n| x | y |\n|---|---|\n| 1 | 2 |"}]
    open_page(browser, srv.port, settings={"theme": theme, "temperature": 0, "max_tokens": 24},
              chat=chat)
    send(browser, "Thanks! One more tip?")
    m = wait_state(browser, ("done",), secs=120)
    # the note shows when max_tokens ended the answer, and only then: the
    # same request, replayed without streaming, says which it was
    body = json.loads(browser.execute_script("return window.__bodies[window.__bodies.length - 1]"))
    body["stream"] = False
    del body["stream_options"]
    st, _, data = http_request(srv.port, "POST", "/v1/chat/completions", body)
    r = json.loads(data)
    assert st == 200
    assert m["stats"].startswith(f'{r["usage"]["completion_tokens"]} tokens'), (m, r)
    assert m["stats"].endswith("stopped at max tokens") == (r["choices"][0]["finish_reason"] == "length"), (m, r)
    os.makedirs(SHOTS, exist_ok=True)
    png = browser.get_screenshot_as_png()
    path = os.path.join(SHOTS, f"chat-{theme}.png")
    with open(path, "wb") as f:
        f.write(png)
    size, var, colours = pixel_stats(png)
    assert size[0] >= 1000 and size[1] >= 600, size
    # a blank or single-colour page has variance ~0 and a handful of values
    assert var > 100 and colours > 50, (path, var, colours)
    bg = browser.execute_script("return getComputedStyle(document.body).backgroundColor")
    dark = [int(x) for x in re.findall(r"\d+", bg)[:3]]
    assert (sum(dark) < 150) == (theme == "dark"), bg


@pytest.fixture(scope="module")
def thinking_srv(tmp_path_factory):
    """A tiny random model with DeepSeek-R1's template, whose generation
    prompt opens a thought; the budget closes it after a few tokens."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
    import tiny_arch
    tpl = os.path.expanduser("~/.cache/anvil/llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
                             "templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    if not os.path.exists(tpl):
        pytest.fail(f"template corpus missing: {tpl}")
    path = str(tmp_path_factory.mktemp("webui_think") / "r1.gguf")
    with open(tpl, encoding="utf-8") as f:
        text = f.read()
    # the corpus's copy closes the thought unless enable_thinking is set
    # (the page sends no chat_template_kwargs); R1's own release opens it
    close = "{% if not enable_thinking %}{{- '</think>' -}}{% endif %}"
    assert close in text
    tiny_arch.make_gguf_template(path, "llama3", text.replace(close, ""), seed=3, n_ctx=1024)
    s = Server("--reasoning-budget", "6", model=path)
    yield s
    s.stop()


def test_thought_shown_apart(browser, thinking_srv):
    """The chat page shows the model's thought (streamed
    delta.reasoning_content) in a collapsible "Thought" block above the
    answer, and the answer alone in the content; both are what the API
    gives in one piece."""
    srv = thinking_srv
    open_page(browser, srv.port, settings={"temperature": 0, "top_p": 1, "max_tokens": 16})
    send(browser, "Hello")
    m = wait_state(browser, ("done",), secs=120)
    got = browser.execute_script("""
        const m = [...document.querySelectorAll('.msg[data-role=assistant]')].pop();
        const t = m.querySelector('details.thought');
        const c = m.querySelector('.content');
        return {hidden: t.hidden, summary: t.querySelector('summary').textContent,
                text: t.querySelector('.thought-text').textContent,
                above: !!(t.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING),
                open: t.open};""")
    st, _, data = http_request(srv.port, "POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hello"}], "temperature": 0, "top_p": 1,
        "max_tokens": 16})
    assert st == 200
    want = json.loads(data)["choices"][0]["message"]
    assert want.get("reasoning_content"), want
    assert not got["hidden"] and got["summary"] == "Thought" and got["above"], got
    assert not got["open"]  # collapsed until asked
    assert got["text"] == want["reasoning_content"]
    assert stored_chat(browser)[1]["content"] == (want.get("content") or "")
    assert stored_chat(browser)[1]["reasoning"] == want["reasoning_content"]
    # the thought survives a reload; it is not sent back to the model
    browser.refresh()
    assert browser.execute_script(
        "return document.querySelector('.msg[data-role=assistant] .thought-text').textContent"
    ) == want["reasoning_content"]
    # a model without thoughts: no block
    assert m["state"] == "done"

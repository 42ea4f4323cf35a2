"""Reasoning controls of the other APIs mapped onto the chat route's
(brief api item 3), with the real clients:

- Responses `reasoning.effort` -> the template's `reasoning_effort`; "none"
  also closes the thought the template opens (budget 0);
- Anthropic `thinking` {type: enabled, budget_tokens} -> the thought
  gate's budget (the thought is cut at budget_tokens tokens), {type:
  disabled} -> budget 0 (closed at once), enable_thinking in the template;
- Ollama `think` "low"/"medium"/"high" -> reasoning_effort, false ->
  budget 0.

The model is a tiny random-weight one (tests/gen/tiny_arch.py) with a
template of our own that opens a thought and writes reasoning_effort and
enable_thinking into the prompt: the prompt's token count each API reports
is checked against jinja2's rendering of the same context tokenized by
llama-cpp-python, so a value that does not reach the template fails.
"""
import os
import sys

import jinja2
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gen"))
sys.path.insert(0, HERE)

import tiny_arch  # noqa: E402
from anvil_server import Server, serve_bin  # noqa: E402

# each value writes its own number of control tokens (one token each), so
# the prompt's length tells the values apart exactly
E = "<|im_end|>"
S = "<|im_start|>"
TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if reasoning_effort is not defined %}{% elif reasoning_effort == 'minimal' %}" + E +
    "{% elif reasoning_effort == 'low' %}" + E * 2 + "{% elif reasoning_effort == 'medium' %}" +
    E * 3 + "{% elif reasoning_effort == 'high' %}" + E * 4 + "{% elif reasoning_effort == 'none' %}"
    + E * 5 + "{% else %}" + E * 6 + "{% endif %}"
    "{%- if enable_thinking is not defined %}{% elif enable_thinking %}" + S +
    "{% else %}" + S * 2 + "{% endif %}\n<think>\n"
    "{%- endif %}{%- if false %}</think>{% endif %}")


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("effort") / "think.gguf")
    tiny_arch.make_gguf_template(p, "llama3", TEMPLATE, seed=6, n_ctx=2048)
    return p


@pytest.fixture(scope="module")
def srv(path):
    s = Server(serve_bin(), path, "--ctx", "2048", "--kv-mem", "64M")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def n_tokens(path):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    # as transformers renders chat templates (and anvil, and llama.cpp)
    tmpl = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(TEMPLATE)

    def count(text, **ctx):
        s = tmpl.render(messages=[{"role": "user", "content": text}], add_generation_prompt=True,
                        **ctx)
        return len(llm.tokenize(s.encode(), add_bos=False, special=True))
    return count


def base(srv, path):
    return f"http://127.0.0.1:{srv.port}{path}"


@pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high"])
def test_responses_effort_reaches_template(srv, n_tokens, effort):
    r = srv.client().responses.create(model=srv.client().models.list().data[0].id,
                                      input="hi", reasoning={"effort": effort},
                                      max_output_tokens=2)
    assert r.usage.input_tokens == n_tokens("hi", reasoning_effort=effort, enable_thinking=True)
    assert r.usage.input_tokens != n_tokens("hi")


def test_responses_effort_none_closes_thought(srv, n_tokens):
    c = srv.client()
    model = c.models.list().data[0].id
    r = c.responses.create(model=model, input="hi", reasoning={"effort": "none"},
                           max_output_tokens=12, temperature=0)
    assert r.usage.input_tokens == n_tokens("hi", reasoning_effort="none", enable_thinking=False)
    kinds = [o.type for o in r.output]
    reasoning = [o for o in r.output if o.type == "reasoning"]
    assert not reasoning or not "".join(c.text for o in reasoning for c in (o.content or [])), kinds
    # without it the tiny model's output stays inside the thought
    r = c.responses.create(model=model, input="hi", reasoning={"effort": "high"},
                           max_output_tokens=12, temperature=0)
    assert any(o.type == "reasoning" for o in r.output), [o.type for o in r.output]


def anth(srv):
    import anthropic
    return anthropic.Anthropic(base_url=base(srv, ""), api_key="none", max_retries=0)


def test_anthropic_disabled_budget_zero(srv, n_tokens):
    m = anth(srv).messages.create(model=srv.client().models.list().data[0].id, max_tokens=12,
                                  extra_body={"temperature": 0}, thinking={"type": "disabled"},
                                  messages=[{"role": "user", "content": "hi"}])
    # Anthropic counts the cached part apart
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == n_tokens("hi", enable_thinking=False)
    assert not any(b.type == "thinking" and b.thinking for b in m.content), m.content


def test_anthropic_budget_cuts_thought(srv, path, n_tokens):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    m = anth(srv).messages.create(model=srv.client().models.list().data[0].id, max_tokens=1100,
                                  extra_body={"temperature": 0},
                                  thinking={"type": "enabled", "budget_tokens": 1024},
                                  messages=[{"role": "user", "content": "hi"}])
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == n_tokens("hi", enable_thinking=True)
    th = "".join(b.thinking for b in m.content if b.type == "thinking")
    assert th, m.content
    n_th = len(llm.tokenize(th.encode(), add_bos=False, special=False))
    if m.stop_reason == "end_turn" and m.usage.output_tokens < 1024:
        pytest.skip("the tiny model ended its thought by itself")
    # cut at the budget (retokenizing random bytes' U+FFFD adds a few), and
    # the answer follows the cut: without the gate the thought would run on
    # to max_tokens
    assert 900 < n_th <= 1024 + 16, n_th
    assert m.usage.output_tokens > 1024
    assert any(b.type == "text" and b.text for b in m.content), m.content


@pytest.mark.parametrize("think", ["low", "high", False])
def test_ollama_think(srv, n_tokens, think):
    import ollama
    c = ollama.Client(host=base(srv, ""))
    r = c.chat(model=srv.client().models.list().data[0].id, think=think,
               messages=[{"role": "user", "content": "hi"}], options={"num_predict": 8,
                                                                     "temperature": 0})
    ctx = {"enable_thinking": think is not False}
    if think:
        ctx["reasoning_effort"] = think
    assert r.prompt_eval_count == n_tokens("hi", **ctx)
    if think is False:
        assert not r.message.thinking

"""The reference renderer for src/tmpl: jinja2's ImmutableSandboxedEnvironment
configured as transformers' apply_chat_template configures it
(transformers/utils/chat_template_utils.py, _compile_jinja_template):
trim_blocks and lstrip_blocks on, the loopcontrols extension, an
AssistantTracker-like {% generation %} block (renders its body), and the
globals/filters it registers: raise_exception, strftime_now and its own
tojson (json.dumps with ensure_ascii=False, indent, separators, sort_keys).

Also the conversations the corpus test renders, and a runner for
tests/tool_tmpl. strftime_now formats a fixed time (NOW) on both sides.
"""
import datetime
import json
import os
import subprocess
import tempfile

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from conftest import MODES, ROOT

NOW = 1764662400  # 2025-12-02 08:00 UTC


class Generation(Extension):
    """{% generation %}...{% endgeneration %}: the body, as transformers'
    AssistantTracker renders it when no mask is asked for."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.datetime.fromtimestamp(NOW).strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env


def jinja_render(source, ctx):
    """(True, text) or (False, error message)."""
    try:
        return True, environment().from_string(source).render(**ctx)
    except Exception as e:  # any failure: the template refused the context
        return False, f"{type(e).__name__}: {e}"


def tool_bins():
    out = [os.path.join(ROOT, "build", m, "tests", "tool_tmpl") for m in MODES]
    out = [p for p in out if os.path.exists(p)]
    assert out, "tests/tool_tmpl is not built (run make)"
    return out


def anvil_render(tool, source, ctx, timeout=60):
    """(True, text) or (False, error message) from tests/tool_tmpl."""
    with tempfile.TemporaryDirectory() as d:
        t = os.path.join(d, "t.jinja")
        c = os.path.join(d, "c.json")
        with open(t, "w", encoding="utf-8", newline="") as f:
            f.write(source)
        with open(c, "w", encoding="utf-8") as f:
            json.dump(ctx, f, ensure_ascii=False)
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        p = subprocess.run([tool, t, c, str(NOW)], capture_output=True, timeout=timeout, env=env)
    if p.returncode == 0:
        return True, p.stdout.decode("utf-8")
    assert p.returncode == 1, f"tool_tmpl crashed ({p.returncode}): {p.stderr[-2000:]!r}"
    return False, p.stderr.decode("utf-8", errors="replace").strip()


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a timezone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}},
                   "required": ["tz"]}}}

CALLS = [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
    {"id": "call_2", "type": "function",
     "function": {"name": "get_time", "arguments": {"tz": "Europe/Paris"}}},
]


def conversations():
    """name -> context (messages plus the template's other variables)."""
    base = {"bos_token": "<s>", "eos_token": "</s>"}
    convs = {
        "user": [{"role": "user", "content": "Hello!"}],
        "system": [{"role": "system", "content": "You are a pirate."},
                   {"role": "user", "content": "Where is the treasure?"}],
        "multi": [{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Hi"},
                  {"role": "assistant", "content": "Hey."},
                  {"role": "user", "content": "Tell me a joke.\nA short one."}],
        "tools": [{"role": "user", "content": "Weather in Paris?"}],
        "calls": [{"role": "system", "content": "You help."},
                  {"role": "user", "content": "Weather and time in Paris?"},
                  {"role": "assistant", "content": "", "tool_calls": CALLS},
                  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                   "content": "{\"temp\": 21}"},
                  {"role": "tool", "tool_call_id": "call_2", "name": "get_time",
                   "content": "14:05"}],
        "reasoning": [{"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "4",
                       "reasoning_content": "Two plus two is four."},
                      {"role": "user", "content": "And 3+3?"}],
    }
    out = {}
    for name, msgs in convs.items():
        for add in (True, False):
            ctx = dict(base, messages=msgs, add_generation_prompt=add)
            if name in ("tools", "calls"):
                ctx["tools"] = [WEATHER, TIME]
            if name == "reasoning":
                for think in (True, False):
                    out[f"{name}-think{int(think)}-gen{int(add)}"] = dict(ctx, enable_thinking=think)
                continue
            out[f"{name}-gen{int(add)}"] = ctx
    return out

"""test_agent_loop.py - a tool loop that ends with an answer (issue 36):
call a tool, feed its result back, get a text answer, over the OpenAI
API, with plain `openai` requests and with the Agents SDK
(`openai-agents` over chat completions: OpenAIChatCompletionsModel).

The model is a tiny random-weight one (tests/gen/tiny_arch.py) with a
real family template (Qwen 2.5's: the Hermes <tool_call> format), so the
loop is made deterministic by the API itself: the first turn asks for a
call with tool_choice "required" (the format's marker is forced and the
arguments are held to the tool's schema), the tool's result goes back as
a `tool` message with its tool_call_id, and the second turn is "auto"
(the Agents SDK resets tool_choice after a call), where the plain-openai
loop fixes the words with a grammar that quotes the tool's result. The
prompt comes from whichever renderer the server has (the built-in family
or the GGUF's own Jinja template): the test does not depend on it.
"""
import asyncio
import json
import os
import sys
from typing import Literal

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gen"))
sys.path.insert(0, HERE)

import tiny_arch  # noqa: E402
from serve_util import Server  # noqa: E402
from test_toolfmt import TOOLS, gbnf_literal, template_of  # noqa: E402


def run_tool(name, args):
    if name == "get_weather":
        return {"Paris": "sunny", "Rome": "rainy"}[args["city"]]
    return f"{(12 + args['zone']) % 24}:00"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("agent") / "hermes.gguf")
    tiny_arch.make_gguf_template(path, "llama3", template_of("hermes"), seed=3, n_ctx=4096)
    s = Server(model=path)
    yield s
    s.stop()


def test_openai_loop(server):
    client = server.client()
    model = client.models.list().data[0].id
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    answer = None
    for turn in range(4):
        kw = {"tool_choice": "required"} if turn == 0 else \
            {"extra_body": {"grammar": gbnf_literal(f"It is {result}.")}}
        r = client.chat.completions.create(model=model, messages=msgs, tools=TOOLS,
                                           temperature=0, max_tokens=200, **kw)
        m = r.choices[0].message
        if not m.tool_calls:
            answer = m.content
            break
        assert r.choices[0].finish_reason == "tool_calls"
        msgs.append({"role": "assistant", "content": m.content,
                     "tool_calls": [c.model_dump() for c in m.tool_calls]})
        for c in m.tool_calls:
            result = run_tool(c.function.name, json.loads(c.function.arguments))
            msgs.append({"role": "tool", "tool_call_id": c.id, "content": result})
    assert answer == f"It is {result}.", (answer, msgs)
    assert turn == 1


def test_agents_sdk_loop(server):
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    calls = []

    @agents.function_tool
    def get_weather(city: Literal["Paris", "Rome"]) -> str:
        """The weather in a city."""
        calls.append(city)
        return "sunny"

    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none",
                         max_retries=0)

    async def main():
        model_id = (await client.models.list()).data[0].id
        agent = agents.Agent(
            name="weather", instructions="Answer with the weather.", tools=[get_weather],
            model=agents.OpenAIChatCompletionsModel(model=model_id, openai_client=client),
            model_settings=agents.ModelSettings(tool_choice="required", temperature=0,
                                                max_tokens=200))
        return await agents.Runner.run(agent, "Weather in Paris?", max_turns=4)

    res = asyncio.run(main())
    assert len(calls) == 1  # one call, then tool_choice went back to auto
    assert isinstance(res.final_output, str) and res.final_output

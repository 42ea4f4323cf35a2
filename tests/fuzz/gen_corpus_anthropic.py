#!/usr/bin/env python3
"""Seed corpus of fuzz_anthropic (tests/fuzz/corpus/anthropic/): bodies of
POST /v1/messages and /v1/messages/count_tokens, valid and not, covering
every field src/server/api_anthropic.c reads. Standard library only; run
from anywhere: python3 tests/fuzz/gen_corpus_anthropic.py"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "anthropic")
MID = "SmolLM2-135M-Instruct.Q4_1"
WEATHER = {"name": "get_weather", "description": "Weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}


def seeds():
    u = [{"role": "user", "content": "Hello"}]
    yield "minimal", {"model": MID, "max_tokens": 16, "messages": u}
    yield "count", {"model": MID, "messages": u, "system": "Be brief."}
    yield "system_blocks", {"model": MID, "max_tokens": 8, "messages": u, "system": [
        {"type": "text", "text": "One.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Two."}]}
    yield "sampling", {"model": MID, "max_tokens": 30, "messages": u, "temperature": 0.3,
                       "top_p": 0.9, "top_k": 40, "stop_sequences": ["\n", "END"],
                       "metadata": {"user_id": "x"}, "stream": True, "service_tier": "auto"}
    yield "tools_any", {"model": MID, "max_tokens": 50, "messages": u, "tools": [WEATHER],
                        "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}
    yield "tools_named", {"model": MID, "max_tokens": 50, "messages": u, "tools": [WEATHER],
                          "tool_choice": {"type": "tool", "name": "get_weather"}}
    yield "tool_result", {"model": MID, "max_tokens": 20, "tools": [WEATHER], "messages": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "5 C"},
            {"type": "tool_result", "tool_use_id": "toolu_01", "is_error": True,
             "content": [{"type": "text", "text": "timeout"}]},
            {"type": "text", "text": "And tomorrow?"}]}]}
    yield "thinking", {"model": MID, "max_tokens": 2000, "messages": u,
                       "thinking": {"type": "enabled", "budget_tokens": 1024}}
    yield "output_config", {"model": MID, "max_tokens": 40, "messages": u, "output_config": {
        "format": {"type": "json_schema", "schema": {"type": "object", "properties": {
            "a": {"type": "integer"}}, "required": ["a"]}}, "effort": "low"}}
    yield "bad_role", {"model": MID, "max_tokens": 1, "messages": [{"role": "tool", "content": "x"}]}
    yield "bad_model", {"model": "claude-x", "max_tokens": 1, "messages": u}
    yield "bad_types", {"model": MID, "max_tokens": "1", "messages": "x", "tools": {}}
    yield "image", {"model": MID, "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, body in seeds():
        with open(os.path.join(OUT, name + ".json"), "w") as f:
            json.dump(body, f)
    with open(os.path.join(OUT, "malformed.json"), "w") as f:
        f.write('{"model": "%s", "max_tokens": 1e400, "messages": [' % MID)


if __name__ == "__main__":
    main()

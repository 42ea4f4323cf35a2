#!/usr/bin/env python3
"""Writes tests/fuzz/corpus/ollama/: bodies of Ollama's /api/chat
(chat_*.json) and /api/generate (generate_*.json), valid and not, for the
request translation of src/server/api_ollama.c. tests/py/test_api_ollama.py
replays them against a live server (and mutates them from a fixed seed);
the file name's prefix says which route a body goes to. Standard library
only; run from anywhere."""
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "ollama")
M = "SmolLM2-135M-Instruct.Q4_1"
U = [{"role": "user", "content": "Hi"}]
SHORT = {"num_predict": 4, "temperature": 0, "seed": 1}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}}

CHAT = {
    "plain": {"model": M, "messages": U, "options": SHORT},
    "whole": {"model": M + ":latest", "messages": U, "stream": False, "options": SHORT},
    "system": {"model": M, "messages": [{"role": "system", "content": "Be terse."}] + U,
               "options": dict(SHORT, top_k=5, top_p=0.5, min_p=0.1, repeat_penalty=1.3,
                               repeat_last_n=-1, presence_penalty=0.5, frequency_penalty=0.2,
                               stop=["\n", "user:"], num_ctx=128, mirostat=1, num_gpu=9)},
    "json": {"model": M, "messages": U, "format": "json", "options": SHORT},
    "schema": {"model": M, "messages": U, "stream": False, "options": SHORT,
               "format": {"type": "object", "properties": {"a": {"type": "integer"}},
                          "required": ["a"]}},
    "tools": {"model": M, "messages": U, "tools": [WEATHER], "options": SHORT},
    "tools_forced": {"model": M, "messages": U, "tools": [WEATHER], "tool_choice": "required",
                     "options": dict(SHORT, num_predict=20)},
    "history": {"model": M, "options": SHORT, "tools": [WEATHER], "messages": U + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "cold", "tool_name": "get_weather"}]},
    "think": {"model": M, "messages": U, "think": False, "options": SHORT},
    "think_on": {"model": M, "messages": U, "think": "high"},
    "logprobs": {"model": M, "messages": U, "logprobs": True, "top_logprobs": 3,
                 "options": SHORT},
    "load": {"model": M, "messages": []},
    "unload": {"model": M, "messages": [], "keep_alive": 0},
    "images": {"model": M, "messages": [dict(U[0], images=["aGVsbG8="])]},
    "bad_types": {"model": M, "messages": U, "options": {"temperature": "x", "num_predict": 1.5}},
    "bad_role": {"model": M, "messages": [{"role": "robot", "content": 1}]},
    "unknown_model": {"model": "llama3.2", "messages": U},
    "num_ctx_big": {"model": M, "messages": U, "options": {"num_ctx": 1 << 20}},
}
GENERATE = {
    "plain": {"model": M, "prompt": "Why is the sky blue?", "options": SHORT},
    "whole": {"model": M, "prompt": "Hi", "stream": False, "system": "Be terse.",
              "options": SHORT, "keep_alive": "5m"},
    "raw": {"model": M, "prompt": "<|im_start|>user\nHi<|im_end|>\n", "raw": True,
            "template": "{{ .Prompt }}", "options": SHORT},
    "suffix": {"model": M, "prompt": "def f(", "suffix": "    return x", "options": SHORT},
    "json": {"model": M, "prompt": "JSON:", "format": "json", "options": SHORT},
    "template": {"model": M, "prompt": "x", "template": "{{ .System }}"},
    "context": {"model": M, "prompt": "x", "context": [1, 2, 3]},
    "load": {"model": M},
    "bad": {"model": M, "prompt": ["x"], "raw": 1},
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, b in CHAT.items():
        with open(os.path.join(OUT, f"chat_{name}.json"), "w") as f:
            json.dump(b, f)
    for name, b in GENERATE.items():
        with open(os.path.join(OUT, f"generate_{name}.json"), "w") as f:
            json.dump(b, f)
    with open(os.path.join(OUT, "chat_malformed.json"), "w") as f:
        f.write('{"model": "%s", "messages": [{"role": "user", "content": "x"}' % M)


if __name__ == "__main__":
    main()

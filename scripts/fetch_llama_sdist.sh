#!/usr/bin/env bash
# Fetch the llama-cpp-python sdist (the version tests/requirements.txt pins)
# into ~/.cache/anvil/ and unpack its vendor/llama.cpp/models/ directory:
# the vocabulary-only GGUF files (ggml-vocab-*.gguf) and the chat templates
# (templates/*.jinja) that the tokenizer and template tests read. Nothing
# from it is committed. Idempotent: prints the unpacked models directory.
# Usage: scripts/fetch_llama_sdist.sh [VENV_DIR] [requirements.txt]
set -euo pipefail
venv="${1:-$HOME/.cache/anvil/venv}"
req="${2:-$(dirname "$0")/../tests/requirements.txt}"
ver="$(grep -E '^llama-cpp-python==' "$req" | cut -d= -f3)"
[ -n "$ver" ] || { echo "fetch_llama_sdist: no llama-cpp-python pin in $req" >&2; exit 1; }
cache="$HOME/.cache/anvil"
name="llama_cpp_python-$ver"
dest="$cache/$name/vendor/llama.cpp/models"
if [ -f "$dest/.complete" ]; then
    echo "$dest"
    exit 0
fi
mkdir -p "$cache"
tgz="$cache/$name.tar.gz"
if [ ! -s "$tgz" ]; then
    tmp="$(mktemp -d "$cache/sdist.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    py="$venv/bin/python"; [ -x "$py" ] || py=python3
    "$py" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$ver" -d "$tmp" >&2
    mv "$tmp/$name.tar.gz" "$tgz"
fi
# unpack next to the final place, then rename: a reader never sees half a tree
work="$(mktemp -d "$cache/unpack.XXXXXX")"
tar -xzf "$tgz" -C "$work" "$name/vendor/llama.cpp/models"
touch "$work/$name/vendor/llama.cpp/models/.complete"
mkdir -p "$cache/$name/vendor/llama.cpp"
rm -rf "$dest"
mv "$work/$name/vendor/llama.cpp/models" "$dest"
rm -rf "$work"
echo "$dest"

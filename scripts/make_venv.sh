#!/usr/bin/env bash
# Create (or update) the cached Python venv for the differential tests.
# llama-cpp-python is compiled from its sdist, so the reference is the same
# llama.cpp source built here; this takes several minutes the first time
# and is reused afterwards (the venv lives outside the clone).
#
# Build flags: GGML_NATIVE would enable AMX on CPUs that report it, but a
# VM may not grant AMX tile state (SIGILL on `tilezero`), so we name the
# ISA extensions explicitly: AVX2/FMA/F16C always, AVX-512 (+VNNI, BF16)
# when the CPU has them, never AMX.
# Usage: scripts/make_venv.sh VENV_DIR requirements.txt
set -euo pipefail
venv="$1"; req="$2"
flags="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
if grep -q avx512f /proc/cpuinfo && grep -q avx512bw /proc/cpuinfo && grep -q avx512vl /proc/cpuinfo; then
    flags="$flags -DGGML_AVX512=ON"
    grep -q avx512_vnni /proc/cpuinfo && flags="$flags -DGGML_AVX512_VNNI=ON"
    grep -q avx512_bf16 /proc/cpuinfo && flags="$flags -DGGML_AVX512_BF16=ON"
fi
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

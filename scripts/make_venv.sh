#!/usr/bin/env bash
# Create (or update) the cached Python venv for the differential tests.
# llama-cpp-python is compiled from its sdist, so the reference is the same
# llama.cpp source built for this machine; this takes several minutes the
# first time and is reused afterwards (the venv lives outside the clone).
# Usage: scripts/make_venv.sh VENV_DIR requirements.txt
set -euo pipefail
venv="$1"; req="$2"
if [ ! -x "$venv/bin/python" ]; then
    echo "creating venv $venv"
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
echo "installing test requirements (llama-cpp-python builds from source: a few minutes)"
"$venv/bin/python" -m pip install --progress-bar on --no-binary llama-cpp-python -r "$req"

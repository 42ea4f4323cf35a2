#!/usr/bin/env bash
# Build llama.cpp's own command-line tools - the peer users actually run -
# from the llama.cpp source vendored in the llama-cpp-python sdist that the
# test venv pins, with native CPU flags, into a cache directory outside the
# repository:
#
#   ~/.cache/anvil/llama.cpp-<sdist version>-<cpu hash>/bin/llama-*
#
# Built: llama-bench, llama-batched-bench, llama-server, llama-quantize,
# llama-perplexity, and llama-speculative / llama-lookup when the source has
# them. The cpu hash covers the CPU model, its flags and this script's
# cmake flags, so another machine or a changed flag builds a new directory;
# a directory that already holds every tool is reused (the script then only
# prints its path). The last line on stdout is always the bin directory, so
# callers can do  BIN=$(bench/build_llamacpp.sh | tail -1).
#
# Flags: GGML_NATIVE=ON (-march=native: whatever this CPU has), but AMX off
# (-mno-amx-*): a VM may report AMX in cpuid without granting the tile
# state, and the first `tilezero` then dies with SIGILL (the same reason
# scripts/make_venv.sh names its ISA flags). --amx builds with AMX as
# -march=native has it (a separate directory): the peer a user on an AMX
# machine that grants the tiles would run (ggml repacks Q4_0, Q4_1, Q8_0,
# Q4_K, Q5_K, Q6_K and IQ4_XS for its AMX kernels). No curl/OpenSSL, no
# web UI download, static libraries.
#
# Nothing of llama.cpp goes into the repository: the sdist is cached in
# ~/.cache/anvil/sdist and unpacked under the build directory.
#
# Usage: bench/build_llamacpp.sh [-j N] [--amx]   (ANVIL_CACHE overrides ~/.cache/anvil)
set -euo pipefail

VERSION=0.3.36
CACHE="${ANVIL_CACHE:-$HOME/.cache/anvil}"
JOBS=2
AMX=0
while [ $# -gt 0 ]; do
    case "$1" in
        -j) JOBS="$2"; shift 2 ;;
        --amx) AMX=1; shift ;;
        -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build_llamacpp.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

say() { echo "build_llamacpp: $*" >&2; }

CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DGGML_NATIVE=ON
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF
)
# explicit -mno-* flags win over the ISA set -march=native implies, in any order
NOAMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
if [ "$AMX" = 1 ]; then
    NOAMX=""
else
    CMAKE_FLAGS+=(-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
fi

cpu_model=$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2- | tr ' ' '\n' | sort -u | tr '\n' ' ')
hash=$(printf '%s\n%s\n%s %s\n%s\n' "$cpu_model" "$cpu_flags" "${CMAKE_FLAGS[*]}" "$NOAMX" \
    "$(gcc --version | head -1)" | sha256sum | cut -c1-10)
DIR="$CACHE/llama.cpp-$VERSION-$hash"
BIN="$DIR/bin"
TOOLS=(llama-bench llama-batched-bench llama-server llama-quantize llama-perplexity)
OPTIONAL=(llama-speculative llama-lookup llama-embedding)

all_built() {
    for t in "${TOOLS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
    [ -f "$DIR/.complete" ]
}

mkdir -p "$CACHE"
# one build at a time per cache (helpers and the lead may call this at once)
exec 9>"$CACHE/.build_llamacpp.lock"
if ! flock -n 9; then
    say "another build holds $CACHE/.build_llamacpp.lock; waiting"
    flock 9
fi

if all_built; then
    say "already built: $BIN"
    echo "$BIN"
    exit 0
fi

SDIST="$CACHE/sdist/llama_cpp_python-$VERSION.tar.gz"
if [ ! -f "$SDIST" ]; then
    say "downloading the llama-cpp-python $VERSION sdist"
    mkdir -p "$CACHE/sdist"
    PY=python3
    [ -x "$CACHE/venv/bin/python" ] && PY="$CACHE/venv/bin/python"
    "$PY" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$CACHE/sdist"
fi

SRC="$DIR/src"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    say "unpacking vendor/llama.cpp from $SDIST"
    rm -rf "$SRC" "$DIR/unpack"
    mkdir -p "$DIR/unpack"
    tar xzf "$SDIST" -C "$DIR/unpack" "llama_cpp_python-$VERSION/vendor/llama.cpp"
    mv "$DIR/unpack/llama_cpp_python-$VERSION/vendor/llama.cpp" "$SRC"
    rm -rf "$DIR/unpack"
fi

targets=("${TOOLS[@]}")
for t in "${OPTIONAL[@]}"; do
    name=${t#llama-}
    if [ -d "$SRC/examples/$name" ] || [ -d "$SRC/tools/$name" ]; then targets+=("$t"); fi
done

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
say "configuring ($DIR/build): ${CMAKE_FLAGS[*]} C/CXX flags '$NOAMX'"
cmake -S "$SRC" -B "$DIR/build" "${GEN[@]}" "${CMAKE_FLAGS[@]}" \
    -DCMAKE_C_FLAGS="$NOAMX" -DCMAKE_CXX_FLAGS="$NOAMX" >"$DIR/configure.log" 2>&1 ||
    { tail -30 "$DIR/configure.log" >&2; say "cmake configure failed (log: $DIR/configure.log)"; exit 1; }

say "building ${targets[*]} with -j $JOBS (several minutes on 2 cores)"
# ninja and make both print [n/N] progress lines
cmake --build "$DIR/build" -j "$JOBS" --target "${targets[@]}" >&2

mkdir -p "$BIN"
for t in "${targets[@]}"; do
    f=$(find "$DIR/build/bin" "$DIR/build" -maxdepth 2 -name "$t" -type f -perm -u+x | head -1)
    [ -n "$f" ] || { say "built, but $t is missing"; exit 1; }
    cp -f "$f" "$BIN/$t"
done
{
    echo "llama-cpp-python $VERSION (vendored llama.cpp)"
    echo "cpu: $cpu_model"
    echo "cmake: ${CMAKE_FLAGS[*]} C/CXX: $NOAMX"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$DIR/BUILD_INFO"
touch "$DIR/.complete"
say "done: $BIN"
echo "$BIN"

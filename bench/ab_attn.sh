#!/bin/bash
# ab_attn.sh REV_A REV_B [SHAPES] [N] [KV] - the AVX-512 attention kernels
# (src/attn/cpu/avx512/attn.c) of two git revisions (WORK = the working
# tree) linked into one harness (bench/ab/attn_harness.c) and timed
# alternately on a causal prefill of N tokens, one thread. SHAPES is a
# comma list of HEAD_DIM:GROUP (default 256:4 Gemma 3, 64:3 SmolLM2,
# 128:4 Llama 3). One JSON line per shape; b_over_a > 1 means B is faster,
# same_bits says whether both gave the same output.
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?REV_A}; B=${2:?REV_B}
SHAPES=${3:-256:4,64:3,128:4}
N=${4:-512}; KV=${5:-f16}
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
CF="-std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -mavx2"
for side in A B; do
    rev=$A; [ $side = B ] && rev=$B
    # revisions before the attention room kept the file in src/kernels
    if [ "$rev" = WORK ]; then cp src/attn/cpu/avx512/attn.c "$TMP/$side.c"
    elif ! git show "$rev:src/attn/cpu/avx512/attn.c" > "$TMP/$side.c" 2>/dev/null; then
        git show "$rev:src/kernels/cpu/avx512/attn.c" | sed 's#"kernels/attn.h"#"attn/attn.h"#' > "$TMP/$side.c"
    fi
    gcc $CF -Dkn_attn_ops_avx512=${side}_attn_ops -c "$TMP/$side.c" -o "$TMP/$side.o"
done
[ -f build/release/libanvil.a ] || make -s build/release/libanvil.a
gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/ab/attn_harness.c "$TMP"/A.o "$TMP"/B.o \
    build/release/libanvil.a -lm -lpthread -o "$TMP/harness"
for s in ${SHAPES//,/ }; do
    echo "[$s]" >&2
    "$TMP/harness" "${s%%:*}" "${s##*:}" "$N" 8 "$KV"
done

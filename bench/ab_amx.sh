#!/bin/bash
# ab_amx.sh REV_A REV_B [TYPES] [M] [N ROWS] - the AMX matmul kernels
# (src/kernels/cpu/amx/matmul_p_amx.c, matmul_pk_amx.c) of two git
# revisions (WORK = the working tree) linked into one harness and timed
# alternately, call by call, one thread (bench/ab/amx_harness.c). Prints
# one JSON line per type; b_over_a > 1 means B is faster. Needs a CPU with
# AMX-INT8 whose OS grants the tile state.
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?REV_A}; B=${2:?REV_B}
TYPES=${3:-q8_0,q4_0,q4_1,q5_0,q5_1,iq4_nl,q4_k,q5_k,q6_k,iq4_xs,q2_k,q3_k}
M=${4:-512}; N=${5:-2048}; ROWS=${6:-2048}
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
CF="-std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c -mavx2 -mamx-tile -mamx-int8"
for side in A B; do
    rev=$A; [ $side = B ] && rev=$B
    mkdir -p "$TMP/$side"
    for f in matmul_p_amx matmul_pk_amx; do
        if [ "$rev" = WORK ]; then cp src/kernels/cpu/amx/$f.c "$TMP/$side/"
        else git show "$rev:src/kernels/cpu/amx/$f.c" > "$TMP/$side/$f.c"; fi
        gcc $CF -DPFX=${side}_ -DSRC="\"$TMP/$side/$f.c\"" -c bench/ab/amx_variant.c -o "$TMP/$side/$f.o"
    done
done
gcc -O2 -std=c11 -D_GNU_SOURCE bench/ab/amx_harness.c "$TMP"/A/*.o "$TMP"/B/*.o -lpthread -o "$TMP/harness"
for t in ${TYPES//,/ }; do
    echo "[$t]" >&2
    "$TMP/harness" "$t" "$N" "$ROWS" "$M" 6
done

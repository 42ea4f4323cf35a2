"""AMX on and off give the same numbers, bit for bit, end to end.

Where the CPU has AMX and the OS grants it, the avx512 family's packed
matmuls of 16 tokens and more run their products on the tile unit
(src/kernels/cpu/amx/; ANVIL_AMX=0 turns it off), with the VNNI kernels'
integers and float steps, so every logit must be the same bits either way:
every position of two prompts, prefilled whole and in chunks of 16 (which
mixes AMX tiles with VNNI leftovers), on the default model (Q4_1 tiles) and
on Q4_K_M and Q6_K mixes of it made by `anvil quantize` (Q5_0/Q8_0 tiles,
and Q4_K/Q6_K super-blocks in ffn_down, the matrices 1536 wide). The unit
test (unit_kquant: amx_same_bits) covers every type and odd shapes; this
one covers the model's wiring. On a CPU without usable AMX both runs take
the VNNI path, and the test checks that the switch changes nothing.
"""
import os
import subprocess

import numpy as np
import pytest

from conftest import build_path, run

PROMPT_LEN = 200


@pytest.fixture(scope="module")
def models(tmp_path_factory, model_path, anvil_bin):
    d = tmp_path_factory.mktemp("amx")
    f16 = d / "f16.gguf"
    p = run([anvil_bin, "quantize", model_path, str(f16), "F16"], text=True)
    assert p.returncode == 0, p.stderr
    out = {"Q4_1": model_path}
    for mix in ("Q4_K_M", "Q6_K"):
        m = d / f"{mix}.gguf"
        p = run([anvil_bin, "quantize", str(f16), str(m), mix], text=True)
        assert p.returncode == 0, p.stderr
        out[mix] = str(m)
    return out


def all_logits(model, amx, tmp_path, chunk):
    rng = np.random.default_rng(5)
    prompts = [rng.integers(0, 49152, PROMPT_LEN), rng.integers(0, 49152, PROMPT_LEN // 2 + 7)]
    inp = "".join(" ".join(map(str, p)) + "\n" for p in prompts)
    out = tmp_path / f"logits-{amx}-{chunk}.f32"
    env = dict(os.environ, ANVIL_AMX=amx)
    args = [build_path("release", "tool_logits"), model, "-t", "2", "-a", "-o", str(out)]
    if chunk:
        args += ["-s", str(chunk)]
    p = subprocess.run(args, input=inp, text=True, capture_output=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    return out.read_bytes()


@pytest.mark.parametrize("mix", ["Q4_1", "Q4_K_M", "Q6_K"])
def test_amx_same_logits(models, mix, tmp_path):
    for chunk in (0, 16):
        on = all_logits(models[mix], "1", tmp_path, chunk)
        off = all_logits(models[mix], "0", tmp_path, chunk)
        assert len(on) == len(off) and len(on) >= 4 * 49152 * PROMPT_LEN
        if on != off:
            a, b = np.frombuffer(on, np.float32), np.frombuffer(off, np.float32)
            i = int(np.argmax(a != b))
            pytest.fail(f"{mix} chunk {chunk}: logits differ first at float {i} ({a[i]} vs {b[i]})")

"""The soak of bench/soak.py, short, run as a program: ~30 s of the same mixed hostile
clients (normal, streaming, cancelling, hanging up while parked, slow
heads, oversized bodies, invalid requests, 100 idle connections) against
the ASan+UBSan server, with the same checks: every request answered once
as its type expects, the server's counters agree with the clients', no
response id twice, every KV block free, RSS back near its warm-up level,
a clean SIGTERM and no sanitizer report. The ten-minute run is a
benchmark (bench/soak.py --minutes 10), not part of make test.

RSS may grow 10% here instead of the soak's 5%: a 10 s main phase gives
the allocator less time to settle.
"""
import json
import os
import subprocess
import sys

import pytest

from anvil_server import ROOT, asan_bin

SOAK = os.path.join(ROOT, "bench", "soak.py")


@pytest.mark.asan
def test_short_soak(model_path):
    # the benchmark runs as a program (it prints its result as JSON); a
    # generous watchdog that only a hang trips
    p = subprocess.run([sys.executable, SOAK, "--minutes", "0.5", "--bin", asan_bin(),
                        "--model", model_path, "--seed", "3", "--rss-tol", "0.10"],
                       capture_output=True, text=True, timeout=900)
    assert p.stdout.strip(), p.stderr[-4000:]
    r = json.loads(p.stdout)
    summary = {k: r[k] for k in ("requests", "client_status", "server_status", "finished",
                                 "rss_kb", "bad_samples", "sanitizer_output", "checks")}
    assert r["passed"] and p.returncode == 0, json.dumps(summary, indent=1)
    # every client type ran and got the outcome it exists for
    for want in ("normal/ok", "stream/ok", "cancel/hung_up", "gone/hung_up", "slow/closed",
                 "big/refused", "invalid/refused"):
        assert r["requests"].get(want, 0) > 0, (want, r["requests"])
    assert r["head_timeouts_server"] > 0 and r["finished"]["cancelled"] > 0

#!/usr/bin/env python3
"""Run schemathesis (PyPI; a tool no one here wrote) against a live
`anvil serve`, from the server's own OpenAPI document (GET /openapi.json).

    bench/schemathesis_run.py                     # bin/anvil, default model
    bench/schemathesis_run.py --out bench/results --max-examples 100

Every generated request must get a documented status, a documented content
type and a body (every event of a stream) that matches the document; never
a 5xx, never a crash; schema-violating requests must be refused with a 4xx
(negative_data_rejection); the key must be enforced (ignored_auth);
undocumented methods get 405 (unsupported_method). That is `--checks all`
less one:

  positive_data_acceptance (a request the schema allows must get a 2xx) is
  left out: some refusals depend on the running server, not on the shape
  of the request, and a static document cannot state them: prompt plus
  max_tokens within --ctx (400 context_length_exceeded), token ids below
  the vocabulary size, max_tokens equal to max_completion_tokens when both
  are given. The document says so in words.

U+0000 is kept out of generated strings (--generation-allow-x00 false):
the server refuses it in any string (cJSON would cut the string short),
which the document says in words but cannot state for the keys of
free-form objects.

schemathesis is installed into this Python's environment on first use
(pinned below); it is not a test dependency. The server runs with an API
key so that the auth checks mean something, and is checked afterwards:
still healthy, every KV block free, a clean stop on SIGTERM.

Writes schemathesis-<date>.json (the run's summary plus schemathesis' own
JSON report) and a short .md into --out when given.
"""
import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request

from repo import default_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERSION = "4.32.5"
KEY = "sk-schemathesis"


def ensure_schemathesis():
    exe = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        if VERSION in out:
            return exe
    except OSError:
        pass
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"schemathesis=={VERSION}"],
                   check=True)
    return exe


def get(port, path, key=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, r.read()


def metrics(port):
    _, body = get(port, "/metrics", KEY)
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def commit():
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True).stdout.strip() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "anvil"))
    ap.add_argument("--model", default=os.environ.get("ANVIL_MODEL") or default_model())
    ap.add_argument("--max-examples", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="directory for schemathesis-<date>.json and .md")
    a = ap.parse_args()
    exe = ensure_schemathesis()

    err = tempfile.TemporaryFile()
    cmd = [a.bin, "serve", "-m", a.model, "--port", "0", "-t", "1", "--ctx", "256",
           "--parallel", "8", "--kv-mem", "64M", "--api-key", KEY]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err)
    line = p.stdout.readline().decode()
    m = re.match(r"anvil serve: listening on http://127\.0\.0\.1:(\d+)(?: |$)", line.strip())
    if not m:
        p.kill()
        sys.exit(f"server did not start: {line!r}")
    port = int(m.group(1))
    report = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    st_cmd = [exe, "run", f"http://127.0.0.1:{port}/openapi.json",
              "-H", f"Authorization: Bearer {KEY}",
              "--checks", "all", "--exclude-checks", "positive_data_acceptance",
              "--generation-allow-x00", "false",
              "--max-examples", str(a.max_examples), "--seed", str(a.seed),
              # one worker: hypothesis' lambda descriptions hit a CPython 3.11
              # ast recursion-depth race with several threads
              "--workers", "1", "--generation-database", "none",
              "--request-timeout", "300", "--max-response-time", "300", "--no-color",
              "--report", "json", "--report-json-path", report]
    t0 = datetime.datetime.now()
    run = subprocess.run(st_cmd, capture_output=True, text=True)
    sys.stdout.write(run.stdout[-20000:])
    sys.stderr.write(run.stderr[-5000:])
    checks = {}
    try:
        st, body = get(port, "/health")
        checks["server healthy afterwards"] = st == 200 and json.loads(body) == {"status": "ok"}
        mm = metrics(port)
        checks["every KV block free afterwards"] = (mm["anvil_kv_blocks_used"] == 0 and
                                                   mm["anvil_requests_in_flight"] == 0)
        server_5xx = mm.get('anvil_http_requests_total{code="500"}', 0)
        checks["the server counted no 500"] = server_5xx == 0
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(120)
    checks["clean exit on SIGTERM"] = rc == 0
    with open(report) as f:
        st_report = json.load(f)
    os.unlink(report)
    checks["schemathesis found no failure"] = (run.returncode == 0 and
                                              not st_report.get("failures") and
                                              not st_report.get("errors"))
    result = {
        "commit": commit(), "date": t0.isoformat(timespec="seconds"),
        "schemathesis": VERSION, "server_cmd": cmd[1:],
        "schemathesis_cmd": [c if not c.startswith("Authorization") else "Authorization: [key]"
                             for c in st_cmd[1:]],
        "exit_code": run.returncode,
        "test_cases": st_report.get("test_cases"),
        "operations": st_report.get("operations"),
        "running_time_s": st_report.get("running_time"),
        "failures": st_report.get("failures"), "errors": st_report.get("errors"),
        "valid_rates": st_report.get("valid_rates"),
        "checks": checks, "passed": all(checks.values()),
    }
    print(json.dumps({k: result[k] for k in ("test_cases", "checks", "passed")}, indent=1))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        base = os.path.join(a.out, f"schemathesis-{result['date'][:10]}")
        with open(base + ".json", "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        tc = result["test_cases"] or {}
        with open(base + ".md", "w") as f:
            f.write(f"# schemathesis {VERSION} against `anvil serve`, {result['date'][:10]}\n\n"
                    f"Commit {result['commit']}; `bench/schemathesis_run.py --max-examples "
                    f"{a.max_examples} --seed {a.seed}`; checks: all but "
                    f"positive_data_acceptance (see the script's header).\n\n"
                    f"{tc.get('generated')} requests generated over "
                    f"{(result['operations'] or {}).get('tested')} operations in "
                    f"{result['running_time_s']:.0f} s: {tc.get('with_failures')} with a "
                    f"failure, {tc.get('errored')} errored.\n\n| check | |\n|---|---|\n")
            for k, v in checks.items():
                f.write(f"| {k} | {'pass' if v else 'FAIL'} |\n")
    sys.exit(0 if result["passed"] else 1)


if __name__ == "__main__":
    main()

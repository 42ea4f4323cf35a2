"""Speculative decoding through `anvil serve`: --spec ngram as the server's
default, the per-request override ("spec": "off" / "ngram"), its counters
in /metrics, and bad input (an unknown mode, k out of range, "draft" on a
server without a draft model, a draft with another vocabulary)."""
import json
import os
import sys

import pytest

from anvil_server import ROOT, Server, check_error, serve_bin

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_llama  # noqa: E402

COPY = ("Repeat this list exactly, twice: apple, banana, cherry, date, elderberry, fig, grape. "
        "Once: apple, banana, cherry, date, elderberry, fig, grape. Twice:")


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "512", "--parallel", "4", "--spec", "ngram",
               "--spec-k", "6")
    yield s
    assert s.stop() == 0, s.stderr()


def completion(srv, **kw):
    body = {"prompt": COPY, "max_tokens": 40, "temperature": 0}
    body.update(kw)
    st, _, data = srv.post("/v1/completions", body)
    return st, data


def test_same_text_with_and_without(srv):
    st1, off = completion(srv, spec="off")
    st2, on = completion(srv)
    st3, on2 = completion(srv, spec="ngram", spec_k=2)
    assert st1 == st2 == st3 == 200
    off, on, on2 = json.loads(off), json.loads(on), json.loads(on2)
    assert off["choices"][0]["text"] == on["choices"][0]["text"] == on2["choices"][0]["text"]
    m = srv.metrics()
    assert m["anvil_spec_verifications_total"] > 0
    assert m["anvil_spec_accepted_tokens_total"] > 0
    assert 0 < m["anvil_spec_acceptance_ratio"] <= 1
    assert m["anvil_spec_tokens_per_verification"] > 1


@pytest.mark.parametrize("body,param", [({"spec": "fast"}, "spec"), ({"spec": 3}, "spec"),
                                        ({"spec_k": 0}, "spec_k"), ({"spec_k": 17}, "spec_k"),
                                        ({"spec": "draft"}, None)])
def test_bad_requests(srv, body, param):
    st, data = completion(srv, **body)
    check_error(st, data, 400, param=param)


def test_draft_with_another_vocabulary(tmp_path, model_path):
    tiny = str(tmp_path / "tiny.gguf")
    tiny_llama.make_tiny_gguf(tiny, "F32", seed=1)
    import subprocess
    p = subprocess.run([serve_bin(), "serve", "-m", model_path, "--spec", "draft", "--draft", tiny, "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "vocabularies differ" in p.stderr, p.stderr

"""Fill in the middle (issue 37 item 4; brief api item 1): `suffix` on
/v1/completions and POST /infill (llama-server's body).

The model is a tiny random-weight one (tests/gen/tiny_arch.py) whose
vocabulary has Qwen's FIM tokens (<|fim_prefix|>, <|fim_suffix|>,
<|fim_middle|>, <|file_sep|>, <|repo_name|>) in place of unused slots. The token sequence
anvil builds (vLLM's `return_token_ids`) is compared with the one built
from llama-cpp-python's tokenizer on the same file, and llama.cpp's own
FIM token ids (llama_vocab_fim_pre/suf/mid/sep/rep), for the layouts of
llama-server's format_prompt_infill that anvil documents (infill.c):

    /infill:  [FIM_REP "myproject\\n"] (FIM_SEP filename "\\n" text)* [FIM_SEP "filename\\n"]
              [BOS] FIM_PRE prefix prompt FIM_SUF suffix FIM_MID
    /v1/completions + suffix:  [BOS] FIM_PRE prefix FIM_SUF suffix FIM_MID

Also: streamed == whole, the same prompt through both routes, and bad
input (a model without FIM tokens, wrong types, missing fields) is a 400 in
OpenAI's shape naming the field.
"""
import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gen"))
sys.path.insert(0, HERE)

import tiny_arch  # noqa: E402
import tiny_llama  # noqa: E402
from anvil_server import Server, check_error, serve_bin, sse_events  # noqa: E402

FIM = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>", "<|repo_name|>"]
# a vocabulary with the three FIM tokens only (no file separator, no
# repository token): extra chunks get llama-server's snippet separator
FIM3 = FIM[:3]


def make_fim_model(path, ids=None, fim=FIM):
    """ids: FIM metadata, key suffix ("fim_pre_token_id", ...) -> token text
    (its id is written) or an int (written as is)."""
    with tiny_arch.control_tokens(fim) as vocab:
        toks = vocab()[0]
        extra = {f"tokenizer.ggml.{k}": toks.index(v) if isinstance(v, str) else v
                 for k, v in (ids or {}).items()}
        tiny_arch.make_gguf(path, "llama3", seed=4, n_ctx=1024, extra_u32=extra)


@pytest.fixture(scope="module")
def fim_path(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("fim") / "fim.gguf")
    make_fim_model(path)
    return path


@pytest.fixture(scope="module")
def srv(fim_path):
    s = Server(serve_bin(), fim_path, "--ctx", "1024", "--kv-mem", "64M")
    yield s
    assert s.stop() == 0, s.stderr()


def reference(fim_path):
    """The prompt ids llama-server's format_prompt_infill builds, from
    llama-cpp-python's tokenizer and FIM ids on the same file: layout(prefix,
    suffix) is /v1/completions with suffix, layout(..., route=True) POST
    /infill."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=fim_path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    ids = {"pre": llama_cpp.llama_vocab_fim_pre(vocab), "suf": llama_cpp.llama_vocab_fim_suf(vocab),
           "mid": llama_cpp.llama_vocab_fim_mid(vocab), "sep": llama_cpp.llama_vocab_fim_sep(vocab),
           "rep": llama_cpp.llama_vocab_fim_rep(vocab)}
    assert all(ids[k] >= 0 for k in ("pre", "suf", "mid")), ids
    bos = [llm.token_bos()] if llama_cpp.llama_vocab_get_add_bos(vocab) else []

    def tok(s, special=False):
        return llm.tokenize(s.encode(), add_bos=False, special=special) if s else []

    def extra_part(extra):
        out = [ids["rep"]] + tok("myproject\n") if ids["rep"] >= 0 else []
        for ch in extra:
            if ids["sep"] >= 0:
                out += [ids["sep"]] + tok(ch.get("filename", "tmp") + "\n")
            else:
                out += tok("\n\n--- snippet ---\n\n")
            out += tok(ch["text"])
        return out + ([ids["sep"]] + tok("filename\n") if ids["sep"] >= 0 else [])

    def layout(prefix, suffix, prompt="", extra=(), route=False):
        head = extra_part(extra) if route else []
        return (head + bos + [ids["pre"]] + tok(prefix) + tok(prompt, special=True) + [ids["suf"]]
                + tok(suffix) + [ids["mid"]])
    layout.ids = ids
    layout.tok = tok
    layout.bos = bos
    layout.extra_part = extra_part
    return layout


@pytest.fixture(scope="module")
def ref(fim_path):
    return reference(fim_path)


PREFIX = "def add(a, b):\n    return "
SUFFIX = "\n\nprint(add(1, 2))  # <|fim_middle|> typed, stays text\n"


def post(srv, path, body):
    st, h, data = srv.post(path, body)
    assert st == 200, data
    return json.loads(data)


def test_suffix_prompt_tokens(srv, ref):
    d = post(srv, "/v1/completions", {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 4,
                                      "temperature": 0, "return_token_ids": True})
    c = d["choices"][0]
    assert c["prompt_token_ids"] == ref(PREFIX, SUFFIX)
    assert d["usage"]["prompt_tokens"] == len(c["prompt_token_ids"])
    # an empty suffix is a plain completion
    d = post(srv, "/v1/completions", {"prompt": PREFIX, "suffix": "", "max_tokens": 1,
                                      "return_token_ids": True})
    lay = ref(PREFIX, "")  # [FIM_PRE] prefix [FIM_SUF] [FIM_MID]: this vocabulary adds no BOS
    assert d["choices"][0]["prompt_token_ids"] == lay[1:-2]


def test_infill_route_tokens(srv, ref):
    extra = [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"},
             {"text": "X = 1\n"}]
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": "a +", "input_extra": extra,
            "max_tokens": 4, "temperature": 0, "return_token_ids": True}
    d = post(srv, "/infill", body)
    assert d["stop"] is True and d["stop_type"] in ("eos", "limit")
    assert d["prompt_token_ids"] == ref(PREFIX, SUFFIX, "a +", extra, route=True)
    assert d["prompt_token_ids"][0] == ref.ids["rep"] and ref.ids["sep"] >= 0
    assert d["tokens_evaluated"] == len(d["prompt_token_ids"])
    # `prompt` parses control tokens (llama-server's tokenize_input_prompts);
    # prefix and suffix may mix strings and token ids
    body2 = dict(body, prompt="a <|repo_name|>+", input_prefix=["x = ", 17, "y"],
                 input_suffix=[ref.ids["mid"], " z"])
    d = post(srv, "/infill", body2)
    want = ref("", "", "a <|repo_name|>+", extra, route=True)
    pre_at = want.index(ref.ids["pre"])
    want[pre_at + 1:pre_at + 1] = ref.tok("x = ") + [17] + ref.tok("y")
    suf_at = len(want) - 1
    want[suf_at:suf_at] = [ref.ids["mid"]] + ref.tok(" z")
    assert d["prompt_token_ids"] == want
    # without input_extra, /infill is the repository header and the file
    # separator in front of the prompt /v1/completions builds
    r = post(srv, "/infill", {"input_prefix": PREFIX + "a +", "input_suffix": SUFFIX,
                              "max_tokens": 1, "return_token_ids": True})
    assert r["prompt_token_ids"] == ref.extra_part([]) + ref(PREFIX + "a +", SUFFIX)


def test_infill_stream_equals_whole(srv):
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "max_tokens": 8, "temperature": 0,
            "ignore_eos": True}
    whole = post(srv, "/infill", body)
    st, _, data = srv.post("/infill", dict(body, stream=True))
    assert st == 200
    # llama-server's stream: data events, the last with stop true, no [DONE]
    evs = [json.loads(b[6:]) for b in data.decode().split("\n\n") if b.startswith("data: ")]
    assert evs and evs[-1]["stop"] is True and all(not e["stop"] for e in evs[:-1])
    assert "".join(e["content"] for e in evs) == whole["content"]
    assert whole["tokens_predicted"] == 8 and whole["stop_type"] == "limit"
    # n > 1: an array, one object per choice
    many = post(srv, "/infill", dict(body, n=2, max_tokens=2))
    assert isinstance(many, list) and [m["index"] for m in many] == [0, 1]
    # the same text as /v1/completions given the same prompt ids
    ids = post(srv, "/infill", dict(body, max_tokens=1, return_token_ids=True))["prompt_token_ids"]
    oai = post(srv, "/v1/completions", {"prompt": ids, "max_tokens": 8, "temperature": 0,
                                        "ignore_eos": True})
    assert oai["choices"][0]["text"] == whole["content"]


@pytest.mark.parametrize("path,body,param", [
    ("/infill", {"input_suffix": "x"}, "input_prefix"),
    ("/infill", {"input_prefix": "x"}, "input_suffix"),
    ("/infill", {"input_prefix": 1, "input_suffix": "x"}, "input_prefix"),
    ("/infill", {"input_prefix": "x", "input_suffix": "y", "prompt": [1, 2]}, "prompt"),
    ("/infill", {"input_prefix": "x", "input_suffix": "y", "input_extra": {}}, "input_extra"),
    ("/infill", {"input_prefix": "x", "input_suffix": "y", "input_extra": [{"text": 3}]},
     "input_extra"),
    ("/infill", {"input_prefix": "x", "input_suffix": "y", "input_extra": [{"text": "a", "x": 1}]},
     "input_extra"),
    ("/infill", {"input_prefix": "x", "input_suffix": "y", "messages": []}, "messages"),
    ("/v1/completions", {"prompt": "x", "suffix": 3}, "suffix"),
    ("/v1/completions", {"prompt": [1, 2, 3], "suffix": "y"}, "prompt"),
    ("/v1/completions", {"prompt": "x", "input_prefix": "y"}, "input_prefix"),
])
def test_bad_input(srv, path, body, param):
    st, _, data = srv.post(path, body)
    check_error(st, data, 400, param=param)


def test_long_input_trimmed(srv, ref):
    """/infill trims as llama-server does (infill.c): with --ctx 1024 the FIM
    window W is 512: the prefix keeps its last 3 * (W / 4) = 384 tokens, the
    suffix its first W / 4 - 2 - |prompt| tokens, the extra chunks their last
    C - W - 2 * max_tokens tokens."""
    prefix = "".join(f"x{i} = {i}\n" for i in range(1500))
    suffix = "".join(f"y{i} = {i}\n" for i in range(400))
    extra = [{"filename": "big.py", "text": "".join(f"z{i} = {i}\n" for i in range(600))}]
    body = {"input_prefix": prefix, "input_suffix": suffix, "prompt": "a +", "input_extra": extra,
            "max_tokens": 8, "return_token_ids": True}
    d = post(srv, "/infill", body)
    tp, tpr, ts = ref.tok(prefix), ref.tok("a +"), ref.tok(suffix)
    ids = ref.ids
    te = ref.extra_part(extra)
    assert len(tp) > 384 and len(ts) > 128 and len(te) > 1024 - 512 - 16
    keep_s = 512 // 4 - 2 - len(tpr)
    want = (te[len(te) - (1024 - 512 - 16):] + ref.bos + [ids["pre"]] + tp[-384:] + tpr
            + [ids["suf"]] + ts[:keep_s] + [ids["mid"]])
    assert d["prompt_token_ids"] == want
    assert d["tokens_evaluated"] == len(want)
    # still too long after trimming (the prompt is kept whole): a 400
    st, _, data = srv.post("/infill", {"input_prefix": "x", "input_suffix": "y",
                                       "prompt": "ab " * 2000})
    check_error(st, data, 400, param="input_prefix", code="context_length_exceeded")
    # /v1/completions with suffix trims nothing
    st, _, data = srv.post("/v1/completions", {"prompt": prefix, "suffix": "y"})
    check_error(st, data, 400, param="prompt", code="context_length_exceeded")


def test_model_without_fim_tokens(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--kv-mem", "32M")
    try:
        st, _, data = s.post("/v1/completions", {"prompt": "a", "suffix": "b"})
        e = check_error(st, data, 400, param="suffix")
        assert "fill-in-the-middle" in e["message"] and "<|fim_prefix|>" in e["message"], e
        st, _, data = s.post("/infill", {"input_prefix": "a", "input_suffix": "b"})
        e = check_error(st, data, 400, param="input_prefix")
        assert "prefix" in e["message"] and "middle" in e["message"], e
    finally:
        assert s.stop() == 0


def test_fim_ids_from_metadata(tmp_path):
    """The GGUF names FIM ids other than the tokens with FIM texts (and the
    deprecated suffix key, and an id out of range for the file separator):
    anvil takes the file's ids as llama.cpp does, warns about the bad one and
    finds that token by its text."""
    path = str(tmp_path / "fim_ids.gguf")
    n_vocab = len(tiny_llama.vocab()[0])
    make_fim_model(path, {"fim_pre_token_id": "<unused270>", "suffix_token_id": "<unused271>",
                          "fim_mid_token_id": "<unused272>", "fim_pad_token_id": "<unused273>",
                          "fim_sep_token_id": n_vocab + 7})
    r = reference(path)
    toks = tiny_llama.vocab()[0]
    assert {k: r.ids[k] for k in ("pre", "suf", "mid", "sep")} == {"pre": toks.index("<unused270>"), "suf": toks.index("<unused271>"),
                     "mid": toks.index("<unused272>"), "sep": toks.index("<unused299>") - len(FIM) + 1 + FIM.index("<|file_sep|>")}, r.ids
    s = Server(serve_bin(), path, "--ctx", "1024", "--kv-mem", "64M")
    try:
        extra = [{"filename": "a.py", "text": "A = 2\n"}]
        d = post(s, "/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": extra,
                                "max_tokens": 1, "return_token_ids": True})
        assert d["prompt_token_ids"] == r(PREFIX, SUFFIX, "", extra, route=True)
        d = post(s, "/v1/completions", {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 1,
                                        "return_token_ids": True})
        assert d["choices"][0]["prompt_token_ids"] == r(PREFIX, SUFFIX)
    finally:
        assert s.stop() == 0
    err = s.stderr()
    assert "fim_sep_token_id" in err and "out of the vocabulary" in err, err


def test_snippet_separator(tmp_path):
    """A vocabulary with only the three FIM tokens: extra chunks are joined by
    llama-server's snippet separator, with no repository header and no file
    separators."""
    path = str(tmp_path / "fim3.gguf")
    make_fim_model(path, fim=FIM3)
    r = reference(path)
    assert r.ids["sep"] < 0 and r.ids["rep"] < 0, r.ids
    s = Server(serve_bin(), path, "--ctx", "1024", "--kv-mem", "64M")
    try:
        extra = [{"filename": "a.py", "text": "A = 2\n"}, {"text": "B = 3\n"}]
        d = post(s, "/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": extra,
                                "prompt": "a", "max_tokens": 1, "return_token_ids": True})
        want = r(PREFIX, SUFFIX, "a", extra, route=True)
        assert want[:len(r.tok("\n\n--- snippet ---\n\n"))] == r.tok("\n\n--- snippet ---\n\n")
        assert d["prompt_token_ids"] == want
    finally:
        assert s.stop() == 0


def test_infill_matches_openapi(srv):
    from test_server_openapi import DOC_PATH, validator
    doc = json.load(open(DOC_PATH))
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": [{"text": "x"}],
            "max_tokens": 2, "return_token_ids": True}
    validator(doc, "/components/schemas/InfillRequest").validate(body)
    validator(doc, "/components/schemas/InfillResponse").validate(post(srv, "/infill", body))

#!/usr/bin/env python3
"""Batched decode throughput of llama.cpp (llama-cpp-python's low-level API,
the same llama.cpp built from source in the test venv), measured the way
`anvil bench --batched` measures anvil and llama-batched-bench measures
llama.cpp, so the three can be compared:

  for each B in --npl: a fresh context with n_seq_max = B,
  n_ctx = B*(PP+TG), n_batch 2048 / n_ubatch 512 (batched-bench's defaults),
  n_threads = n_threads_batch = T, flash attention on or off;
    prefill  B sequences of PP prompt tokens, sequence after sequence, in
             llama_decode calls of n_batch rows; T_PP, S_PP = B*PP / T_PP
    decode   TG steps of B rows (one per sequence, all asking for logits),
             greedy: argmax of each row (numpy, over llama_get_logits) fed
             back; T_TG, S_TG = B*TG / T_TG
    total    T = T_PP + T_TG, N_KV = B*(PP+TG), S = N_KV / T

Prompts are anvil's: the same filler text, no BOS, sequence j reading PP
tokens from offset 37*j (wrapping). Before the timed repetitions, one
untimed warmup per B: the whole prefill plus two decode steps.

Prints batched-bench's table, or with --json one JSON object per line with
the keys of `anvil bench --batched --json`.

usage: bench_llamacpp_batched.py MODEL [--npp 64] [--ntg 128]
           [--npl 1,4,16,32,64] [-t 2] [-r 1] [--fa on|off] [--kv-unified]
           [--json] [--dump-tokens]
"""
import argparse
import ctypes
import json
import sys
import time

import numpy as np

import llama_cpp

FILLER = (
    "A lighthouse keeper on a small island kept a notebook of every ship that passed. "
    "In spring the fishing boats came early, their engines coughing in the cold, and the "
    "gulls followed them out past the reef. In summer the ferries ran twice a day, loud with "
    "tourists who waved at the tower as if it might wave back. Autumn brought the cargo "
    "ships, long and slow, riding low with grain and timber, and the storms that made the "
    "lamp matter. The keeper trimmed the wick, wound the clockwork that turned the lens, and "
    "wrote down the wind, the sea state and the names painted on the hulls. Years later the "
    "notebooks filled a whole shelf, and a historian from the mainland read them cover to "
    "cover, finding in the plain entries a record of trade, weather and ordinary courage "
    "that no official archive had kept. ")

GGML_LOG_LEVEL_ERROR = 4


@llama_cpp.llama_log_callback
def _log(level, text, user):
    if level == GGML_LOG_LEVEL_ERROR:
        sys.stderr.write(text.decode("utf-8", "replace"))


def npl_list(s):
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of integers, got {s!r}")
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError(f"values must be >= 1, got {s!r}")
    return v


def offset_ptr(p, n, ctype):
    """p + n elements, as a pointer of p's type (a view into a batch)."""
    return ctypes.cast(ctypes.addressof(p.contents) + n * ctypes.sizeof(ctype), type(p))


class Run:
    def __init__(self, a, model, vocab, n_vocab, prompt_tokens, B):
        self.a, self.B, self.n_vocab = a, B, n_vocab
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = B * (a.npp + a.ntg)
        cp.n_batch = a.n_batch
        cp.n_ubatch = a.n_ubatch
        cp.n_seq_max = B
        cp.n_threads = cp.n_threads_batch = a.t
        cp.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if a.fa == "on"
                              else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        cp.kv_unified = a.kv_unified
        cp.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(model, cp)
        if not self.ctx:
            sys.exit(f"bench_llamacpp_batched: cannot create a context for B={B}")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        n_rows = max(B * a.npp, B)
        self.batch = llama_cpp.llama_batch_init(n_rows, 0, 1)
        b = self.batch
        self.tok = np.ctypeslib.as_array(b.token, shape=(n_rows,))
        self.pos = np.ctypeslib.as_array(b.pos, shape=(n_rows,))
        self.out = np.ctypeslib.as_array(ctypes.cast(b.logits, ctypes.POINTER(ctypes.c_int8)),
                                         shape=(n_rows,))
        self.nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(n_rows,))
        self.nseq[:] = 1
        self.prompt_tokens = prompt_tokens
        self.gen = np.zeros((B, a.ntg + 1), dtype=np.int64)

    def free(self):
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)

    def decode_rows(self, r0, n):
        b = self.batch
        view = llama_cpp.llama_batch(
            n_tokens=n,
            token=offset_ptr(b.token, r0, ctypes.c_int32),
            embd=None,
            pos=offset_ptr(b.pos, r0, ctypes.c_int32),
            n_seq_id=offset_ptr(b.n_seq_id, r0, ctypes.c_int32),
            seq_id=offset_ptr(b.seq_id, r0, ctypes.c_void_p),
            logits=offset_ptr(b.logits, r0, ctypes.c_int8))
        ret = llama_cpp.llama_decode(self.ctx, view)
        if ret != 0:
            sys.exit(f"bench_llamacpp_batched: llama_decode failed (ret {ret}) at B={self.B}")

    def argmax_outputs(self, n_out):
        p = llama_cpp.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(p, shape=(n_out, self.n_vocab)).argmax(axis=1)

    def fill_prompts(self):
        a, B, nf = self.a, self.B, len(self.prompt_tokens)
        for j in range(B):
            for k in range(a.npp):
                r = j * a.npp + k
                self.tok[r] = self.prompt_tokens[(37 * j + k) % nf]
                self.pos[r] = k
                self.batch.seq_id[r][0] = j
                self.out[r] = 1 if k == a.npp - 1 else 0

    def prefill(self):
        a, n = self.a, self.B * self.a.npp
        self.cur = np.zeros(self.B, dtype=np.int32)
        for r0 in range(0, n, a.n_batch):
            nr = min(a.n_batch, n - r0)
            self.decode_rows(r0, nr)
            seqs = (np.nonzero(self.out[r0:r0 + nr])[0] + r0) // a.npp
            if len(seqs):
                best = self.argmax_outputs(len(seqs))
                self.cur[seqs] = best
                self.gen[seqs, 0] = best
        llama_cpp.llama_synchronize(self.ctx)

    def decode(self, n_steps):
        a, B = self.a, self.B
        for j in range(B):
            self.batch.seq_id[j][0] = j
        self.out[:B] = 1
        for i in range(n_steps):
            self.tok[:B] = self.cur
            self.pos[:B] = a.npp + i
            self.decode_rows(0, B)
            self.cur = self.argmax_outputs(B).astype(np.int32)
            self.gen[:, i + 1] = self.cur
            if sys.stderr.isatty() and (i % 8 == 7 or i == n_steps - 1):
                sys.stderr.write(f"\rbench_llamacpp_batched: B={B} decode {i + 1}/{n_steps} ")
        llama_cpp.llama_synchronize(self.ctx)

    def measure(self):
        a, B = self.a, self.B
        t_pp = t_tg = 0.0
        s_pp, s_tg = [], []
        for rep in range(a.r + 1):  # rep 0: warmup
            llama_cpp.llama_memory_clear(self.mem, True)
            self.fill_prompts()
            if rep == 0 or not sys.stderr.isatty():
                print(f"bench_llamacpp_batched: B={B} {'run' if rep else 'warmup'}: prefill "
                      f"{B * a.npp} tokens, {a.ntg if rep else 2} decode steps", file=sys.stderr,
                      flush=True)
            t0 = time.perf_counter()
            self.prefill()
            t1 = time.perf_counter()
            self.decode(a.ntg if rep else 2)
            t2 = time.perf_counter()
            if sys.stderr.isatty():
                sys.stderr.write("\n")
            if rep:
                t_pp += (t1 - t0) / a.r
                t_tg += (t2 - t1) / a.r
                s_pp.append(B * a.npp / (t1 - t0))
                s_tg.append(B * a.ntg / (t2 - t1))
        return t_pp, t_tg, np.std(s_pp, ddof=1) if a.r > 1 else 0.0, \
            np.std(s_tg, ddof=1) if a.r > 1 else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--npp", type=int, default=64)
    ap.add_argument("--ntg", type=int, default=128)
    ap.add_argument("--npl", type=npl_list, default=[1, 4, 16, 32, 64])
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=1, help="timed repetitions after one warmup")
    ap.add_argument("--fa", choices=["on", "off"], default="on", help="flash attention")
    ap.add_argument("--kv-unified", action="store_true",
                    help="one KV buffer shared by all sequences (llama.cpp's older layout)")
    ap.add_argument("--n-batch", type=int, default=2048)
    ap.add_argument("--n-ubatch", type=int, default=512)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dump-tokens", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.npp < 1 or a.ntg < 1 or a.t < 1 or a.r < 1:
        ap.error("--npp, --ntg, -t and -r must be >= 1")

    llama_cpp.llama_log_set(_log, None)
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(a.model.encode(),
                                                 llama_cpp.llama_model_default_params())
    if not model:
        sys.exit(f"bench_llamacpp_batched: cannot load {a.model}")
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    text = FILLER.encode()
    buf = (llama_cpp.llama_token * 1024)()
    nf = llama_cpp.llama_tokenize(vocab, text, len(text), buf, 1024, False, False)
    prompt_tokens = list(buf[:nf])
    desc = ctypes.create_string_buffer(256)
    llama_cpp.llama_model_desc(model, desc, 256)
    desc = desc.value.decode()
    quant = desc.split()[-1]
    engine = "llama-cpp-python " + llama_cpp.__version__
    label = f"llama.cpp fa={a.fa}" + (" unified" if a.kv_unified else "")
    if not a.json:
        print(f"{engine}: {desc}, {a.t} threads, flash_attn {a.fa}, kv_unified {a.kv_unified}, "
              f"n_batch {a.n_batch}, n_ubatch {a.n_ubatch}, distinct prompts\n")
        print("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |" %
              ("PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"))
        print("|-------|--------|------|--------|----------|----------|----------|----------|"
              "----------|----------|", flush=True)
    for B in a.npl:
        run = Run(a, model, vocab, n_vocab, prompt_tokens, B)
        t_pp, t_tg, s_pp_sd, s_tg_sd = run.measure()
        n_kv = B * (a.npp + a.ntg)
        row = {"bench": "batched", "engine": engine, "label": label, "model": desc,
               "model_file": a.model.rsplit("/", 1)[-1], "quant": quant, "threads": a.t,
               "kv_type": "f16", "flash_attn": a.fa == "on", "kv_unified": a.kv_unified,
               "n_batch": a.n_batch, "n_ubatch": a.n_ubatch, "prompt": "distinct", "reps": a.r,
               "npp": a.npp, "ntg": a.ntg, "npl": B, "n_kv": n_kv,
               "t_pp_s": round(t_pp, 4), "s_pp_tok_s": round(B * a.npp / t_pp, 2),
               "s_pp_sd": round(float(s_pp_sd), 2), "t_tg_s": round(t_tg, 4),
               "s_tg_tok_s": round(B * a.ntg / t_tg, 2), "s_tg_sd": round(float(s_tg_sd), 2),
               "t_s": round(t_pp + t_tg, 4), "s_tok_s": round(n_kv / (t_pp + t_tg), 2)}
        if a.dump_tokens:
            row["tokens"] = run.gen.tolist()
        run.free()
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print("|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |" %
                  (a.npp, a.ntg, B, n_kv, t_pp, row["s_pp_tok_s"], t_tg, row["s_tg_tok_s"],
                   t_pp + t_tg, row["s_tok_s"]), flush=True)
    llama_cpp.llama_model_free(model)
    llama_cpp.llama_backend_free()


if __name__ == "__main__":
    main()

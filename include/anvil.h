/*
 * anvil.h - the one public header of libanvil, an LLM inference engine for
 * decoder-only transformer models in GGUF files (the architectures of
 * src/model/arch/: Llama, Qwen2, Qwen3, Gemma 3, Phi-3).
 *
 * Handles are opaque. Every constructor returns an anvil_status and writes
 * *out only on success. Every _load/_init has one _free that accepts NULL.
 *
 * Ownership and borrowing:
 *   - a ctx borrows its model: the model must outlive every ctx made from it;
 *   - buffers passed in stay the caller's; the library keeps no pointer to
 *     them after the call returns;
 *   - variable-size output goes into caller buffers: when `cap` is too small
 *     the call returns the needed count, negated, and writes nothing useful.
 *
 * Thread safety: a model is read-only after load and may be shared by
 * threads. A ctx or a sampler is used by one thread at a time.
 */
#ifndef ANVIL_H
#define ANVIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------- */
/* status codes */

typedef enum {
    ANVIL_OK = 0,
    ANVIL_ERR_NOMEM = -1,
    ANVIL_ERR_IO = -2,
    ANVIL_ERR_FORMAT = -3,      /* malformed or inconsistent input file */
    ANVIL_ERR_UNSUPPORTED = -4, /* well-formed, but not something anvil runs */
    ANVIL_ERR_INVALID = -5,     /* bad argument from the caller */
    ANVIL_ERR_KV_FULL = -6,     /* recoverable: free a sequence and retry */
    ANVIL_ERR_DEVICE = -7,
    ANVIL_ERR_ABORTED = -8,     /* recoverable: the caller asked to stop */
} anvil_status;

/* Static string naming the status ("ok", "out of memory", ...). */
const char *anvil_status_str(anvil_status s);

typedef int32_t anvil_token;

/* Tensor element types. The values are GGUF's (ggml's) type ids. */
enum anvil_type {
    ANVIL_TYPE_F32 = 0,
    ANVIL_TYPE_F16 = 1,
    ANVIL_TYPE_Q4_0 = 2,
    ANVIL_TYPE_Q4_1 = 3,
    ANVIL_TYPE_Q5_0 = 6,
    ANVIL_TYPE_Q5_1 = 7,
    ANVIL_TYPE_Q8_0 = 8,
    ANVIL_TYPE_Q2_K = 10,
    ANVIL_TYPE_Q3_K = 11,
    ANVIL_TYPE_Q4_K = 12,
    ANVIL_TYPE_Q5_K = 13,
    ANVIL_TYPE_Q6_K = 14,
    ANVIL_TYPE_Q8_K = 15, /* activations only: never a weight type in a file anvil writes */
    ANVIL_TYPE_IQ4_NL = 20,
    ANVIL_TYPE_IQ4_XS = 23,
    ANVIL_TYPE_BF16 = 30,
    ANVIL_TYPE_MXFP4 = 39, /* read and run, not written by anvil quantize */
};

/* Name of a type ("Q4_1"), or NULL for an id anvil does not know. */
const char *anvil_type_name(int type);
/* Parse a type name, case-insensitive. Returns -1 when unknown. */
int anvil_type_from_name(const char *name);

/* Error text for calls that have no handle to hang it on. */
#define ANVIL_ERRMSG_CAP 256

/* ---------------------------------------------------------------------- */
/* model */

struct anvil_model;

struct anvil_model_params {
    /* Kernel family: NULL or "auto" picks the best the CPU runs; "ref",
     * "avx2", "avx512" force one (an error if the CPU lacks it). The
     * environment variable ANVIL_KERNELS overrides NULL/"auto". */
    const char *kernels;
};

struct anvil_model_params anvil_model_default_params(void);

/* Map and validate a GGUF file and bind the weights of its architecture
 * (llama, qwen2, qwen3, gemma3, phi3; anything else is
 * ANVIL_ERR_UNSUPPORTED with the list in the message). Weights are read in
 * place from the read-only mapping, except where the kernels keep a packed
 * copy (AVX-512: quantized matrices are repacked once at load and the
 * mapping's pages under them released). On failure, a one-line message is
 * written to err (when non-NULL) and *out is left unchanged. */
anvil_status anvil_model_load(const char *path, const struct anvil_model_params *p,
                              struct anvil_model **out, char *err, size_t err_cap);
void anvil_model_free(struct anvil_model *m);
/* Load only the tokenizer of a GGUF file: a vocabulary-only file (no
 * tensors, as llama.cpp's ggml-vocab-*.gguf) or any model, for
 * tokenizing and chat templates. The result answers the tokenizer and
 * chat calls and anvil_model_n_vocab; it has no weights (anvil_ctx_init
 * must not be given it). Free with anvil_model_free. Errors as
 * anvil_model_load. */
anvil_status anvil_model_load_vocab(const char *path, struct anvil_model **out, char *err,
                                    size_t err_cap);

int32_t anvil_model_n_vocab(const struct anvil_model *m);
int32_t anvil_model_n_ctx_train(const struct anvil_model *m);
int32_t anvil_model_n_embd(const struct anvil_model *m);
int32_t anvil_model_n_layer(const struct anvil_model *m);
/* Weight type of most matrices (from general.file_type or the tensors). */
int anvil_model_type(const struct anvil_model *m);
/* Bytes of KV cache one sequence of n_ctx positions needs with KV type
 * kv_type (ANVIL_TYPE_F16 or ANVIL_TYPE_Q8_0): sliding-window layers count
 * only their window when `windowed` is true (what anvil allocates), and
 * the full length when false (a cache that keeps every layer whole). */
int64_t anvil_model_kv_bytes(const struct anvil_model *m, int kv_type, int32_t n_ctx, bool windowed);
/* Name of the kernel family in use: "ref", "avx2" or "avx512". */
const char *anvil_model_kernels(const struct anvil_model *m);
/* Short human description: "llama 30L 576d 9h/3kv Q4_1 (135M params)". */
const char *anvil_model_desc(const struct anvil_model *m);
/* Copy the string metadata value under `key` ("general.name",
 * "general.architecture", "tokenizer.chat_template", ...) into buf, NUL
 * terminated and cut to cap - 1 bytes as snprintf does. Returns the
 * value's full length in bytes, or -1 when the key is missing or its value
 * is not a string (buf then holds ""). buf may be NULL when cap is 0. */
int32_t anvil_model_meta_str(const struct anvil_model *m, const char *key, char *buf,
                             size_t cap);
anvil_token anvil_token_bos(const struct anvil_model *m); /* -1 if none */
anvil_token anvil_token_eos(const struct anvil_model *m); /* -1 if none */
/* The separator between the two texts of a pair ([SEP] of WordPiece, </s>
 * of XLM-R; tokenizer.ggml.seperator_token_id), else eos; -1 if neither. */
anvil_token anvil_token_sep(const struct anvil_model *m);
/* Whether two models share one vocabulary (same size, same bytes for every
 * token id, same end-of-generation tokens), as speculative decoding with a
 * draft model needs: ANVIL_OK, or ANVIL_ERR_INVALID with the first
 * difference in err. */
anvil_status anvil_vocab_compatible(const struct anvil_model *a, const struct anvil_model *b,
                                    char *err, size_t err_cap);
/* True for tokens that end a generation (EOS, <|im_end|>, <|eot_id|>, ...). */
bool anvil_token_is_eog(const struct anvil_model *m, anvil_token t);
/* Fill-in-the-middle tokens: prefix, suffix, middle, pad, repository name,
 * file separator. From tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id
 * when the GGUF gives one in range (an id out of range is a load warning),
 * else the token with one of the texts llama.cpp looks for (<|fim_prefix|>,
 * <fim_prefix>, <PRE>, ...); -1 if neither. */
enum anvil_fim {
    ANVIL_FIM_PRE,
    ANVIL_FIM_SUF,
    ANVIL_FIM_MID,
    ANVIL_FIM_PAD,
    ANVIL_FIM_REP,
    ANVIL_FIM_SEP,
    ANVIL_FIM_COUNT
};
anvil_token anvil_token_fim(const struct anvil_model *m, enum anvil_fim which);

/* ---------------------------------------------------------------------- */
/* tokenizer */

/* Tokenize `len` bytes of text (any bytes; invalid UTF-8 is handled as
 * llama.cpp does, each bad byte becoming U+FFFD). add_special prepends BOS
 * when the vocabulary asks for it; parse_special lets control tokens such
 * as "<|im_start|>" in the text become their ids.
 * Returns the number of tokens, or -(needed) when cap is too small. */
int32_t anvil_tokenize(const struct anvil_model *m, const char *text, size_t len,
                       anvil_token *out, int32_t cap, bool add_special, bool parse_special);

/* Raw bytes of one token (byte-level BPE decoded). Control tokens give
 * their text only when `special` is true. Returns the byte count, or
 * -(needed) when cap is too small; 0 for an out-of-range id. */
int32_t anvil_token_to_piece(const struct anvil_model *m, anvil_token t, char *buf,
                             int32_t cap, bool special);

/* Streaming detokenizer: holds back an incomplete UTF-8 sequence so that
 * a stream never prints half a character. Zero-initialise it to start a
 * stream (and again to restart one). */
struct anvil_detok {
    unsigned char pend[8];
    int n_pend;
};
/* Append token t; writes only complete UTF-8 characters to buf (NUL
 * terminated). Returns bytes written, or -(needed) when cap is too small.
 * buf needs room for the token's bytes, 8 pending bytes and the NUL. */
int32_t anvil_detok_push(const struct anvil_model *m, struct anvil_detok *d, anvil_token t,
                         char *buf, int32_t cap);
/* Flush what is pending at end of stream: invalid leftovers become U+FFFD. */
int32_t anvil_detok_flush(struct anvil_detok *d, char *buf, int32_t cap);

struct anvil_chat_msg {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
};

/* Chat templates. anvil has no Jinja engine: it recognises the family of
 * tokenizer.chat_template from its text (never executing it) and renders
 * the family natively: "chatml" (SmolLM2, Qwen 2/2.5/3), "llama3" (Llama
 * 3/3.1/3.2/3.3), "gemma" (Gemma 2/3), "mistral-v1", "mistral-v3",
 * "mistral-v7", "phi3" (Phi-3, Phi-3.5). A file without a template gets
 * the family whose turn markers are tokens of its vocabulary (Gemma 3's
 * GGUF has no template). Otherwise anvil uses ChatML and says so through
 * anvil_chat_template_source: the caller should warn. */
enum anvil_chat_source {
    ANVIL_CHAT_FROM_TEMPLATE = 0, /* recognised in tokenizer.chat_template */
    ANVIL_CHAT_FROM_VOCAB = 1,    /* no template: inferred from the special tokens */
    ANVIL_CHAT_FALLBACK = 2,      /* not recognised (or none): ChatML */
    ANVIL_CHAT_FROM_USER = 3,     /* chosen with anvil_chat_template_set */
};

/* Name of the template family in use ("chatml", "llama3", ...). Static
 * string, valid while the model lives. */
const char *anvil_chat_template_name(const struct anvil_model *m);
enum anvil_chat_source anvil_chat_template_source(const struct anvil_model *m);
/* The names anvil_chat_template_set accepts, comma-separated (static). */
const char *anvil_chat_template_names(void);
/* Use the template family `name` instead of the file's. ANVIL_ERR_INVALID
 * for an unknown name (the model is unchanged). Changes the model: call
 * it before any other thread uses m. */
anvil_status anvil_chat_template_set(struct anvil_model *m, const char *name);

/* Render messages with the model's chat template as text. add_assistant
 * appends the header that starts the assistant's turn. BOS is not
 * written: tokenizing the text with add_special adds it. Returns bytes
 * written (NUL terminated), -(needed) when cap is too small, INT32_MIN on
 * out-of-memory. Tokenizing this text with parse_special lets control
 * tokens typed inside a message through: prompts should come from
 * anvil_chat_tokenize. */
int32_t anvil_chat_apply(const struct anvil_model *m, const struct anvil_chat_msg *msgs,
                         size_t n_msgs, bool add_assistant, char *buf, int32_t cap);

/* Render and tokenize messages: the tokens of anvil_chat_apply's text
 * tokenized with add_special and parse_special, except that message
 * content (and roles) are tokenized as text: "<|im_start|>" typed by a
 * user stays text and never becomes the control token. Returns the number
 * of tokens, -(needed) when cap is too small (out holds the first cap),
 * INT32_MIN on out-of-memory or bad arguments. */
int32_t anvil_chat_tokenize(const struct anvil_model *m, const struct anvil_chat_msg *msgs,
                            size_t n_msgs, bool add_assistant, anvil_token *out, int32_t cap);

/* The model's own Jinja chat template, run by anvil's sandboxed
 * interpreter (docs/chat-templates.md). It is used by default when the
 * GGUF has a tokenizer.chat_template that parses; the built-in families
 * above render (anvil_chat_apply / anvil_chat_tokenize) when the file has
 * none, when it does not parse (anvil_chat_template_warning says so), or
 * after anvil_chat_template_set.
 *
 * anvil_chat_template_text: the Jinja source in use (NUL-terminated, owned
 *   by the model), NULL when a built-in family renders.
 * anvil_chat_template_origin: "gguf", "file" or "builtin" (static).
 * anvil_chat_template_warning: why the GGUF's template is not used, or NULL.
 * anvil_chat_template_set_jinja: use src[0..n) (a Jinja template, copied)
 *   instead; ANVIL_ERR_FORMAT with err when it does not parse. Changes the
 *   model: call it before any other thread uses m. */
const char *anvil_chat_template_text(const struct anvil_model *m);
const char *anvil_chat_template_origin(const struct anvil_model *m);
const char *anvil_chat_template_warning(const struct anvil_model *m);
anvil_status anvil_chat_template_set_jinja(struct anvil_model *m, const char *src, size_t n,
                                           char *err, size_t err_cap);

/* Render a chat with the Jinja template in use. ctx_json[0..n) is the
 * template's context as a JSON object: "messages" as OpenAI sends them
 * (content strings, "tool_calls" whose function.arguments string is given
 * to the template as the parsed object when it parses to one, "tool"
 * messages with "tool_call_id", "reasoning_content"), "tools" (OpenAI
 * shape), "add_generation_prompt" (absent = false, as in Jinja),
 * "enable_thinking" and any other chat_template_kwargs at top level,
 * "reasoning_effort". bos_token / eos_token come from the vocabulary when
 * absent; strftime_now formats the current time (ANVIL_CHAT_NOW, seconds
 * since the epoch, overrides it).
 * anvil_chat_render_json: the text into buf; bytes written (NUL
 *   terminated), -(needed, NUL included) when cap is too small, INT32_MIN
 *   on failure with err set ("chat template: line N: ..." for a template
 *   error or a limit, "out of memory ..." when memory ran out).
 * anvil_chat_tokenize_json: that text tokenized with control tokens
 *   parsed, except inside the caller's text (message content, reasoning,
 *   tool results: found in the rendering), and BOS added unless the text
 *   starts with it. Token count, -(needed) when cap is too small,
 *   INT32_MIN on failure with err set. */
int32_t anvil_chat_render_json(const struct anvil_model *m, const char *ctx_json, size_t n,
                               char *buf, int32_t cap, char *err, size_t err_cap);
int32_t anvil_chat_tokenize_json(const struct anvil_model *m, const char *ctx_json, size_t n,
                                 anvil_token *out, int32_t cap, char *err, size_t err_cap);

/* ---------------------------------------------------------------------- */
/* context: KV cache, scratch, thread pool */

struct anvil_ctx;

struct anvil_ctx_params {
    int32_t n_ctx;     /* max positions per sequence; 0 = min(train ctx, 4096) */
    int32_t n_seq_max; /* sequences held at once; 0 = 1 */
    int32_t n_batch;   /* max rows in one anvil_decode; 0 = 512 */
    int32_t n_threads; /* 0 = number of online CPUs */
    int32_t n_outputs; /* max rows asking for logits in one decode; 0 = n_seq_max */
    int kv_type;       /* ANVIL_TYPE_F16 (default when 0) or ANVIL_TYPE_Q8_0 */
    int64_t kv_mem;    /* KV pool bytes; 0 = room for n_seq_max * n_ctx positions */
    bool prefix_cache; /* share full KV blocks of identical prompt prefixes */
};

struct anvil_ctx_params anvil_ctx_default_params(void);

/* Create a context: KV cache (windowed layers get a pool of their own
 * that holds only their window), scratch, thread pool. On failure a
 * one-line reason (which limit or which allocation) goes to err when
 * non-NULL, and *out is left unchanged. */
anvil_status anvil_ctx_init(struct anvil_model *m, const struct anvil_ctx_params *p,
                            struct anvil_ctx **out, char *err, size_t err_cap);
void anvil_ctx_free(struct anvil_ctx *c);
const char *anvil_ctx_errmsg(const struct anvil_ctx *c);
int32_t anvil_ctx_n_ctx(const struct anvil_ctx *c);

/* A batch is n_tokens rows; row i is (token[i], pos[i], seq_id[i]). The
 * rows of one sequence must be consecutive in the batch, in increasing
 * position order, and continue exactly where its cache ends (pos ==
 * current length).
 * logits[i] asks for an output of row i: ANVIL_OUT_LOGITS for the full
 * logits row, ANVIL_OUT_ARGMAX for only its argmax (computed inside the
 * lm_head matmul, so the n_vocab floats are never written); NULL asks for
 * the logits of the last row. All arrays stay the caller's. */
enum { ANVIL_OUT_NONE = 0, ANVIL_OUT_LOGITS = 1, ANVIL_OUT_ARGMAX = 2 };
struct anvil_batch {
    int32_t n_tokens;
    const anvil_token *token;
    const int32_t *pos;
    const int32_t *seq_id;
    const int8_t *logits;
};

/* Run the forward pass. ANVIL_ERR_INVALID for bad token ids, positions,
 * sequence ids or sizes; ANVIL_ERR_KV_FULL when a sequence would pass
 * n_ctx or the KV pool has no free blocks (recoverable: free a sequence
 * and retry). On any error the cache is left exactly as it was. */
anvil_status anvil_decode(struct anvil_ctx *c, const struct anvil_batch *b);

/* Logits (n_vocab floats) of the i-th output row of the last decode, or
 * NULL (also for a row that asked for ANVIL_OUT_ARGMAX only). Valid until
 * the next decode on this ctx. */
const float *anvil_get_logits(struct anvil_ctx *c, int32_t i);
/* Argmax (lowest id among ties) of the i-th output row of the last decode,
 * for rows asked with ANVIL_OUT_LOGITS or ANVIL_OUT_ARGMAX; -1 if none. */
anvil_token anvil_get_argmax(struct anvil_ctx *c, int32_t i);
/* Number of output rows produced by the last decode (logits or argmax). */
int32_t anvil_n_logits(const struct anvil_ctx *c);

/* Current length (next position) of a sequence's cache. */
int32_t anvil_seq_len(const struct anvil_ctx *c, int32_t seq_id);
/* Drop a sequence's cached positions >= pos (pos 0 clears it and frees
 * its KV blocks). */
anvil_status anvil_seq_truncate(struct anvil_ctx *c, int32_t seq_id, int32_t pos);
/* For an empty sequence: reuse cached KV blocks of an identical prompt
 * prefix (needs prefix_cache). Returns the positions reused (whole blocks,
 * at most n - 1 so the last token is computed); the sequence then has that
 * length. */
int32_t anvil_seq_reuse_prefix(struct anvil_ctx *c, int32_t seq_id, const anvil_token *tokens,
                               int32_t n);

/* ---------------------------------------------------------------------- */
/* profiling by category (`anvil bench --profile`)
 *
 * When on, every pool thread reads the clock at each phase boundary of the
 * forward pass, after the barrier that ends the phase (so a phase's time
 * includes the wait for its slowest thread), and adds the interval to the
 * phase's category; a category's time is the mean over the threads. The
 * engine also times its steps around the decode. Off, the forward pass
 * pays one predictable branch per phase and no clock read. Counters are
 * read and reset from the thread that decodes (or steps the engine), never
 * while a decode runs. */
enum anvil_prof_cat {
    ANVIL_PROF_MATMUL = 0, /* weight matmuls: Q/K/V, output, gate/up, down, lm_head (argmax fused) */
    ANVIL_PROF_ATTN,       /* K/V into the cache, the attention plan and kernels (softmax, HP1) */
    ANVIL_PROF_NORM,       /* norms, RoPE, residual adds, activations and their quantization,
                              embedding lookup: the element-wise work */
    ANVIL_PROF_ROUTER,     /* mixture of experts: the router's logits, top-k and weights, the
                              rows sorted by expert */
    ANVIL_PROF_EXPERTS,    /* mixture of experts: the experts' gate/up and down matmuls over
                              their gathered rows (and the shared expert's), SiLU*up */
    ANVIL_PROF_SCATTER,    /* mixture of experts: each row's weighted sum of its experts'
                              outputs */
    ANVIL_PROF_DECODE,     /* anvil_decode around the pass: batch checks, KV reserve and
                              commit, waking the threads */
    ANVIL_PROF_SAMPLE,     /* engine: sampling, logprobs, detokenizing, events */
    ANVIL_PROF_SCHED,      /* engine: the rest of a step: queue, admission, batch building,
                              preemption, statistics, a draft model's proposals */
    ANVIL_PROF_COUNT
};

struct anvil_prof {
    double s[ANVIL_PROF_COUNT]; /* seconds per category since profiling was turned on */
    double total_s;             /* wall seconds of the profiled calls (decodes for a ctx,
                                   steps for an engine): the categories add up to it */
    uint64_t n_calls;
    uint64_t n_clock_reads;     /* clock reads the profiling made on the slowest path (one
                                   thread's in the forward pass, plus the calls' own): what
                                   it cost is at most this times a clock read */
};

/* Turn profiling on (counters reset) or off (counters kept). */
void anvil_ctx_set_profile(struct anvil_ctx *c, bool on);
void anvil_ctx_get_profile(const struct anvil_ctx *c, struct anvil_prof *out);

/* Routing statistics of a mixture of experts, counted while profiling is
 * on (anvil_ctx_set_profile(c, true) resets them with the timings): once
 * per MoE layer and decode, by one thread from the router's choices after
 * the step's routing. Nothing is counted with profiling off. Per layer: */
struct anvil_route_stats {
    uint64_t n_steps;  /* decodes counted (each one step of this layer) */
    uint64_t n_rows;   /* token rows routed; the layer's counts add up to
                          n_rows * expert_used_count */
    uint64_t touched;  /* sum over the steps of the experts given >= 1 row */
    uint64_t step_max; /* sum over the steps of the most rows one expert got */
    uint64_t rows_big; /* rows in (step, expert) groups of >= 16 rows: the
                          share of the expert matmuls that run at prefill
                          sizes */
};
/* Layer `layer`'s statistics into *out (when not NULL) and its rows per
 * expert, summed over the counted steps, into counts (n_expert, when not
 * NULL and cap >= n_expert). Returns n_expert; -n_expert when cap is
 * smaller (only *out written); 0 for a dense model, a layer without
 * experts or a layer out of range (*out zeroed). */
int32_t anvil_ctx_get_route_stats(const struct anvil_ctx *c, int32_t layer,
                                  struct anvil_route_stats *out, uint64_t *counts, int32_t cap);

/* ---------------------------------------------------------------------- */
/* sampling */

struct anvil_sampler;

/* Limits of the fixed-size parts of anvil_sampler_params (the struct is
 * copied by value, so nothing in it can dangle). */
#define ANVIL_SAMPLER_MAX_BIAS 512        /* logit-bias entries */
#define ANVIL_SAMPLER_MAX_BREAKERS 16     /* DRY sequence breakers */
#define ANVIL_SAMPLER_MAX_BREAKER_LEN 8   /* tokens per breaker */
#define ANVIL_SAMPLER_MAX_ORDER 16        /* stages in a custom order */

/* The stages of the sampler chain, for anvil_sampler_params.order (names
 * as llama-server's `samplers`). See docs/sampling.md. */
enum anvil_sampler_stage {
    ANVIL_STAGE_PENALTIES = 1, /* repeat/presence/frequency penalties */
    ANVIL_STAGE_DRY,           /* DRY repetition penalty */
    ANVIL_STAGE_TOP_N_SIGMA,
    ANVIL_STAGE_TOP_K,
    ANVIL_STAGE_TYPICAL,
    ANVIL_STAGE_TOP_P,
    ANVIL_STAGE_MIN_P,
    ANVIL_STAGE_XTC,
    ANVIL_STAGE_TEMPERATURE,
    ANVIL_STAGE_COUNT_
};

/* One logit-bias entry: bias is added to the raw logit of id before any
 * other step; -INFINITY bans the token. */
struct anvil_logit_bias {
    anvil_token id;
    float bias;
};

struct anvil_sampler_params {
    float temperature;       /* 0 = greedy (argmax); must be >= 0 */
    int32_t top_k;           /* 0 = off; must be >= 0 */
    float top_p;             /* in (0, 1]; 1 = off */
    float min_p;             /* in [0, 1]; 0 = off */
    float repeat_penalty;    /* > 0; 1 = off */
    int32_t repeat_last_n;   /* window for penalties; >= 0; 0 = off */
    float presence_penalty;  /* in [-2, 2] */
    float frequency_penalty; /* in [-2, 2] */
    uint64_t seed;           /* same seed, same draws */
    /* llama.cpp's other samplers; zero = off for every one */
    int32_t min_keep;        /* >= 0: top-p, min-p, typical and XTC keep at least this many */
    float typical_p;         /* in [0, 1]; 0 and 1 = off (locally typical sampling) */
    float top_n_sigma;       /* >= 0; 0 = off: keep l >= max - n * std(l) */
    float dry_multiplier;    /* >= 0; 0 = off */
    float dry_base;          /* >= 1 when DRY is on (< 1 turns DRY off) */
    int32_t dry_allowed_length; /* >= 0: repeats up to this long are free */
    int32_t dry_last_n;      /* DRY window in tokens; 0 = off; <= 2^20 */
    int32_t n_dry_breakers;  /* <= ANVIL_SAMPLER_MAX_BREAKERS */
    int32_t dry_breaker_len[ANVIL_SAMPLER_MAX_BREAKERS]; /* 1..MAX_BREAKER_LEN each */
    anvil_token dry_breakers[ANVIL_SAMPLER_MAX_BREAKERS][ANVIL_SAMPLER_MAX_BREAKER_LEN];
    float xtc_probability;   /* in [0, 1]; 0 = off */
    float xtc_threshold;     /* in [0, 1]; > 0.5 = off */
    int32_t mirostat;        /* 0 = off, 1 or 2 (replaces the filter chain) */
    float mirostat_tau;      /* >= 0: target surprise in bits */
    float mirostat_eta;      /* >= 0: learning rate */
    int32_t n_order;         /* 0 = the default order; else order[0..n_order) */
    uint8_t order[ANVIL_SAMPLER_MAX_ORDER]; /* enum anvil_sampler_stage values */
    int32_t n_bias;          /* <= ANVIL_SAMPLER_MAX_BIAS */
    struct anvil_logit_bias bias[ANVIL_SAMPLER_MAX_BIAS]; /* an id listed twice gets both */
};

struct anvil_sampler_params anvil_sampler_default_params(void);

/* Check params; ANVIL_ERR_INVALID with a message in err when out of range. */
anvil_status anvil_sampler_params_check(const struct anvil_sampler_params *p, char *err,
                                        size_t err_cap);
/* True when p makes every draw the argmax of the raw logits (greedy, no
 * penalties, no logit bias, no DRY): the engine may use a fused argmax. */
bool anvil_sampler_params_plain_greedy(const struct anvil_sampler_params *p);
anvil_status anvil_sampler_init(const struct anvil_sampler_params *p, int32_t n_vocab,
                                struct anvil_sampler **out);
void anvil_sampler_free(struct anvil_sampler *s);
/* Draw a token from n_vocab logits. allowed, when non-NULL, is a bitmask of
 * n_vocab bits (bit t of allowed[t/8]); tokens outside it are never drawn.
 * Returns -1 when no token is allowed or the logits are all NaN. */
anvil_token anvil_sampler_sample(struct anvil_sampler *s, const float *logits,
                                 const uint8_t *allowed);
/* Speculative decoding's verification draw: like anvil_sampler_sample,
 * but `draft` (a proposed token) is tested first. The draft comes out with
 * exactly the probability the sampler gives it, and otherwise a token is
 * drawn from the sampler's distribution without it; so every token has
 * exactly its plain-sampling probability, whatever the proposal. Greedy
 * samplers return the argmax. One random draw, like anvil_sampler_sample. */
anvil_token anvil_sampler_sample_spec(struct anvil_sampler *s, const float *logits,
                                      const uint8_t *allowed, anvil_token draft);
/* Record a token of the sequence (prompt or generated) for the penalties. */
void anvil_sampler_accept(struct anvil_sampler *s, anvil_token t);
void anvil_sampler_reset(struct anvil_sampler *s);

/* ---------------------------------------------------------------------- */
/* structured output: constraints
 *
 * A constraint restricts a request's output to a language: a regular
 * expression, a GBNF grammar, a JSON Schema, or any JSON object. It is
 * enforced while decoding: at each step only tokens whose bytes continue
 * a valid output may be drawn, and end-of-generation only when the output
 * is complete. The supported syntax and keywords (and what is refused)
 * are written in src/constrain/constrain.h and the README. */

enum anvil_constraint_kind {
    ANVIL_CONSTRAINT_REGEX = 1,       /* the whole output matches (Python re syntax, a subset) */
    ANVIL_CONSTRAINT_GBNF = 2,        /* llama.cpp's grammar syntax, start rule `root` */
    ANVIL_CONSTRAINT_JSON_SCHEMA = 3, /* one JSON value valid under the schema */
    ANVIL_CONSTRAINT_JSON = 4,        /* any JSON object (text is ignored) */
    ANVIL_CONSTRAINT_CALLS = 5,       /* tool calls: literal markers around JSON Schemas, one
                                         or more (the document of src/constrain/constrain.h) */
};

struct anvil_constraint_params {
    bool compact; /* JSON: no whitespace (default: bounded optional whitespace) */
    bool or_text; /* also any text whose first character is not '{' (see README,
                     tool_choice "auto") */
};

struct anvil_constraint;

/* Compile `len` bytes of `text` as `kind` for model m (p may be NULL).
 * Compilation is bounded in time and memory. On failure *out is unchanged
 * and err gets a one-line message naming the problem: ANVIL_ERR_INVALID
 * (syntax, undefined rule, left recursion, invalid schema, a language with
 * no string), ANVIL_ERR_UNSUPPORTED (an unsupported keyword or feature, a
 * size bound), ANVIL_ERR_NOMEM. The result is read-only and may be used by
 * any number of requests and threads at once; it borrows m (free it before
 * the model). Reference counted: a request holds its own reference from
 * submit to DONE, so the caller may free it right after submitting. */
anvil_status anvil_constraint_compile(const struct anvil_model *m, enum anvil_constraint_kind kind,
                                      const char *text, size_t len,
                                      const struct anvil_constraint_params *p,
                                      struct anvil_constraint **out, char *err, size_t err_cap);
/* Take another reference (a cache of compiled constraints hands out
 * one per user); returns c. Each reference is dropped with
 * anvil_constraint_free. */
struct anvil_constraint *anvil_constraint_retain(struct anvil_constraint *c);
/* Drop a reference; the last one frees. NULL is a no-op. */
void anvil_constraint_free(struct anvil_constraint *c);
/* Whether `len` bytes of text are a complete output of c (for tests and
 * for callers that check text they did not decode). */
bool anvil_constraint_matches(const struct anvil_constraint *c, const char *text, size_t len);

/* ---------------------------------------------------------------------- */
/* serving engine: continuous batching over many requests
 *
 * One driver thread calls anvil_engine_step (or anvil_engine_start runs
 * one for you); any thread may submit and cancel. Each step builds one
 * batch mixing the decode tokens of running requests with prefill chunks
 * under a token budget, runs the forward pass and samples. Events go to
 * each request's callback, on the driver thread, in order; the callback
 * must not block for long and must not call back into the engine except
 * anvil_engine_cancel. A request's greedy output does not depend on what
 * else is in the batch. */

struct anvil_engine;
typedef uint64_t anvil_req_id;

/* Speculative decoding: propose several tokens, verify them with one
 * multi-row forward pass of the model, keep the longest prefix the model
 * agrees with plus its own next token. Greedy output is identical to
 * plain decoding (batch-invariant kernels: a row's logits do not depend
 * on the rows beside it); sampled output has exactly the model's
 * distribution (anvil_sampler_sample_spec). */
enum anvil_spec {
    ANVIL_SPEC_DEFAULT = 0, /* requests: the engine's setting; engine: off */
    ANVIL_SPEC_OFF,
    ANVIL_SPEC_NGRAM,       /* prompt lookup: continue the last n-gram's earlier match */
    ANVIL_SPEC_DRAFT,       /* a draft model (same vocabulary) proposes greedily */
};
#define ANVIL_SPEC_K_MAX 16

/* What a zero field of anvil_engine_params means (the CLI's help and the
 * server print these) */
#define ANVIL_ENGINE_MAX_RUNNING_DEFAULT 64
#define ANVIL_ENGINE_MAX_QUEUE_DEFAULT 1024
#define ANVIL_ENGINE_N_CTX_DEFAULT_MAX 8192 /* n_ctx 0: min(train ctx, this) */
#define ANVIL_ENGINE_STEP_TOKENS_DEFAULT 512
#define ANVIL_ENGINE_PREFILL_CHUNK_DEFAULT 256
#define ANVIL_SPEC_K_DEFAULT 8

struct anvil_engine_params {
    int32_t n_threads;     /* 0 = online CPUs */
    int32_t max_running;   /* sequences decoded at once; 0 = ANVIL_ENGINE_MAX_RUNNING_DEFAULT */
    int32_t max_queue;     /* waiting requests before submit says KV_FULL;
                              0 = ANVIL_ENGINE_MAX_QUEUE_DEFAULT */
    int32_t n_ctx;         /* max positions per request;
                              0 = min(train ctx, ANVIL_ENGINE_N_CTX_DEFAULT_MAX) */
    int32_t step_tokens;   /* token budget per step; 0 = ANVIL_ENGINE_STEP_TOKENS_DEFAULT */
    int32_t prefill_chunk; /* max prompt tokens of one request per step;
                              0 = ANVIL_ENGINE_PREFILL_CHUNK_DEFAULT */
    int64_t kv_mem;        /* KV cache bytes; 0 = sized from the machine: room for
                              max_running sequences at n_ctx, at most half of
                              the memory available at start (reserved, not
                              touched: pages are used as the cache fills) */
    int kv_type;           /* ANVIL_TYPE_F16 (default when 0) or ANVIL_TYPE_Q8_0 */
    enum anvil_spec spec;  /* speculation for requests that do not choose; DEFAULT = off */
    int32_t spec_k;        /* max proposed tokens per step (1..ANVIL_SPEC_K_MAX);
                              0 = ANVIL_SPEC_K_DEFAULT */
    struct anvil_model *draft; /* for ANVIL_SPEC_DRAFT: borrowed; same vocabulary */
};

struct anvil_engine_params anvil_engine_default_params(void);

enum anvil_finish {
    ANVIL_FINISH_NONE = 0,
    ANVIL_FINISH_LENGTH,    /* max_tokens reached (or the context is full) */
    ANVIL_FINISH_STOP,      /* EOS / end-of-generation token or a stop string */
    ANVIL_FINISH_CANCELLED,
    ANVIL_FINISH_ERROR,
    ANVIL_FINISH_CONSTRAINT, /* structured output: no token of the vocabulary can
                                continue the output (error says why) */
};

#define ANVIL_MAX_TOP_LOGPROBS 20 /* alternatives a request may ask for per token */
#define ANVIL_MAX_STOP 16         /* stop strings per request */
#define ANVIL_MAX_STOP_LEN 256    /* bytes of one stop string */

struct anvil_request_params {
    const anvil_token *prompt; /* copied at submit */
    int32_t n_prompt;          /* >= 1 */
    int32_t max_tokens;        /* >= 1 */
    struct anvil_sampler_params sampling;
    bool ignore_eos;
    const char *const *stop;   /* stop strings, copied at submit; may be NULL */
    int32_t n_stop;            /* <= ANVIL_MAX_STOP, each <= ANVIL_MAX_STOP_LEN bytes */
    int32_t top_logprobs;      /* 0 = no logprobs; else this many alternatives (<= ANVIL_MAX_TOP_LOGPROBS) */
    enum anvil_spec spec;      /* DEFAULT: the engine's; DRAFT needs an engine with a draft */
    int32_t spec_k;            /* 0 = the engine's; else 1..ANVIL_SPEC_K_MAX */
    /* Structured output (NULL: none). The request takes its own reference.
     * The output is then always a prefix of a valid output, complete when
     * the request ends with ANVIL_FINISH_STOP by end of generation (a stop
     * string may cut it short; ANVIL_FINISH_LENGTH leaves it unfinished).
     * The request ends as soon as the output is complete and nothing may
     * follow. When no token of the vocabulary can continue the output, it
     * ends with ANVIL_FINISH_CONSTRAINT and a message saying so. Not with
     * ignore_eos (the end of the output is the constraint's to decide). */
    struct anvil_constraint *constraint;
    /* Reasoning models (all zero: none of this). The output may be a
     * thought, then the answer: the constraint holds for the answer only.
     * think_open: the output starts inside a thought (the prompt opened
     * it); think_end: the tokens that end a thought (copied; 1..64 with
     * think_open; <= 256), which the model writes in a row to close it, and which
     * are forced once it has written think_budget thought tokens (0: the
     * thought is closed at once; negative: no limit). answer_prefix: tokens
     * forced at the start of the answer, before the constraint starts
     * (e.g. a tool-call format's opening marker; copied, <= 256). Forced
     * tokens are reported as TOKEN events like drawn ones. */
    bool think_open;
    const anvil_token *think_end;
    int32_t n_think_end;
    int32_t think_budget;
    const anvil_token *answer_prefix;
    int32_t n_answer_prefix;
    /* think_start: the tokens that open a thought (copied, <= 16), for a
     * model that may open one itself when the prompt did not (think_open
     * false; needs think_end). At the start of the output the model
     * chooses, by its own distribution over the first token of each,
     * between these and the answer (answer_prefix's first token, or what
     * the constraint allows); with the thought opened, the gate is as
     * with think_open: free text up to think_end or the budget, then the
     * answer prefix and the constraint. */
    const anvil_token *think_start;
    int32_t n_think_start;
    /* The text of control tokens (such as "[TOOL_CALLS]" or
     * "<|python_tag|>") goes into the events' text; otherwise control
     * tokens spell nothing. End-of-generation tokens end the output
     * either way. */
    bool special_text;
    /* Prompt log-probabilities (echo with logprobs, prompt_logprobs): one
     * ANVIL_EVENT_PROMPT for every prompt token after the first, with the
     * token's logprob given the tokens before it and prompt_top_logprobs
     * (<= ANVIL_MAX_TOP_LOGPROBS) alternatives. Every prompt row is then
     * computed with its logits: the request reuses no cached prefix.
     * max_tokens may then be 0 (the request ends after its prompt). */
    bool prompt_logprobs;
    int32_t prompt_top_logprobs;
};

enum anvil_event_type {
    ANVIL_EVENT_TOKEN = 1, /* one generated token (text may be empty while a
                              UTF-8 character or stop-string prefix is held) */
    ANVIL_EVENT_DONE,      /* last event of a request: finish says why */
    ANVIL_EVENT_PROMPT,    /* prompt_logprobs: token (at prompt position pos), its
                              logprob and alternatives; no text. All come before
                              the first TOKEN, in position order */
};

struct anvil_event {
    enum anvil_event_type type;
    anvil_req_id id;
    anvil_token token;        /* TOKEN; DONE: the end-of-generation token that stopped it, or -1 */
    const char *text;         /* TOKEN/DONE: newly released text (may be ""), not NUL-safe: use text_len */
    int32_t text_len;
    float logprob;            /* TOKEN with top_logprobs > 0 */
    int32_t n_top;            /* alternatives below */
    const anvil_token *top_tokens;
    const float *top_logprobs;
    enum anvil_finish finish; /* DONE */
    int32_t n_prompt, n_gen;  /* DONE: token counts */
    int32_t n_reused;         /* DONE: prompt tokens taken from the prefix cache (last admission) */
    double ttft_s;            /* DONE: submit to first token */
    const char *error;        /* DONE with ANVIL_FINISH_ERROR or _CONSTRAINT */
    int32_t pos;              /* PROMPT: the token's position in the prompt (>= 1) */
    /* DONE: measured times (seconds): submit to first admission, admission
     * to the first token (to the end when none came), first token to the
     * end (0 when none came) */
    double queue_s, prefill_s, decode_s;
};

typedef void (*anvil_event_fn)(void *user, const struct anvil_event *ev);

/* The engine borrows the model. On failure a one-line reason goes to err
 * when non-NULL, and *out is left unchanged. */
anvil_status anvil_engine_init(struct anvil_model *m, const struct anvil_engine_params *p,
                               struct anvil_engine **out, char *err, size_t err_cap);
/* Stops the driver thread if started; pending requests get DONE/CANCELLED. */
void anvil_engine_free(struct anvil_engine *e);
const char *anvil_engine_errmsg(const struct anvil_engine *e);
/* Positions one request may use (prompt plus generated tokens). */
int32_t anvil_engine_n_ctx(const struct anvil_engine *e);
/* The KV-fit rule: positions one request may hold, n_ctx or fewer when the
 * whole KV pool holds fewer for one sequence. anvil_engine_submit refuses
 * a prompt plus max_tokens above it. */
int64_t anvil_engine_seq_capacity(const struct anvil_engine *e);

/* Thread-safe. Validates and queues a request: ANVIL_ERR_INVALID for bad
 * params or a request that can never run (prompt plus max_tokens over
 * n_ctx or over the whole KV pool), ANVIL_ERR_KV_FULL when the queue
 * already holds max_queue requests (retry later); err says which. */
anvil_status anvil_engine_submit(struct anvil_engine *e, const struct anvil_request_params *r,
                                 anvil_event_fn cb, void *user, anvil_req_id *out_id, char *err,
                                 size_t err_cap);
/* Thread-safe. The request ends with DONE/CANCELLED at the next step and
 * its KV blocks are freed. Unknown or finished ids: ANVIL_ERR_INVALID. */
anvil_status anvil_engine_cancel(struct anvil_engine *e, anvil_req_id id);

/* Run one scheduling step on the calling thread. *n_active (optional) is
 * set to the number of queued + running requests after the step. */
anvil_status anvil_engine_step(struct anvil_engine *e, int32_t *n_active);
/* Start / stop a driver thread that steps while there is work and sleeps
 * otherwise. */
anvil_status anvil_engine_start(struct anvil_engine *e);
void anvil_engine_stop(struct anvil_engine *e);

struct anvil_engine_stats {
    int32_t queued, running;
    int32_t kv_blocks_total, kv_blocks_used;
    int32_t kv_block_tokens;
    uint64_t n_requests_done, n_prompt_tokens, n_gen_tokens, n_preemptions, n_steps;
    /* speculation: verification rows (a decode row that carried proposals),
     * tokens proposed, proposals accepted, and tokens those rows produced
     * (accepted + one of the model's own each) */
    uint64_t n_spec_verify, n_spec_proposed, n_spec_accepted, n_spec_tokens;
    /* requests that stopped speculating with the draft model because one
     * of its decodes failed (the log says why; their output is unchanged) */
    uint64_t n_spec_draft_failed;
    /* positions taken from the prefix cache when requests were admitted */
    uint64_t n_prefix_tokens;
    /* constraints: tokens drawn under a constraint, and how many of those
     * needed the full allowed-token mask (the rest were settled by testing
     * the model's top candidate); seconds spent choosing those tokens and
     * advancing the constraints' states (the constraint's own cost, wall
     * time on the thread that steps the engine) */
    uint64_t n_cons_tokens, n_cons_masks;
    double cons_s;
};
void anvil_engine_get_stats(struct anvil_engine *e, struct anvil_engine_stats *out);

/* Profiling of the engine's steps (see anvil_ctx_set_profile): the model
 * context's categories plus sampling and the scheduler. From the thread
 * that steps the engine, between steps. */
void anvil_engine_set_profile(struct anvil_engine *e, bool on);
void anvil_engine_get_profile(const struct anvil_engine *e, struct anvil_prof *out);

/* ---------------------------------------------------------------------- */
/* tools */

/* Progress callback for long operations: done of total units. */
typedef void (*anvil_progress_fn)(void *user, uint64_t done, uint64_t total);

/* Progress of anvil_quantize, reported after every chunk of rows. */
struct anvil_quantize_event {
    uint64_t tensor, n_tensors; /* 1-based index of the tensor being written */
    const char *name;           /* its name (valid during the call) */
    int type_in, type_out;      /* enum anvil_type */
    uint64_t done, total;       /* elements written so far, in the whole file */
};
typedef void (*anvil_quantize_fn)(void *user, const struct anvil_quantize_event *ev);

struct anvil_quantize_params {
    /* Target: a mix by name as llama-quantize spells it (Q4_K_M, Q5_K_M,
     * Q6_K, Q3_K_M, Q2_K, Q4_K_S, IQ4_XS, Q5_0, Q8_0, ...), a bare type
     * (Q3_K, Q4_K, Q5_K: every matrix that type), or F16/BF16/F32.
     * Case-insensitive. Required. */
    const char *type;
    bool pure;              /* every matrix gets the mix's base type (only
                               the row-shape fallback applies) */
    int n_threads;          /* 0: every online CPU */
    anvil_quantize_fn progress; /* optional */
    void *user;
};

/* What a finished anvil_quantize wrote. */
struct anvil_quantize_stats {
    uint64_t bytes_in, bytes_out; /* tensor data, without the header */
    uint64_t n_elements;
    int n_fallback;               /* matrices whose row did not divide into
                                     the chosen type's blocks */
    int n_converted, n_copied;    /* tensors requantized / copied as they were */
};

/* Write a copy of GGUF `in` to `out` with its weight matrices quantized
 * by the rules of p->type (see src/quantize/mix.c and README "Quantize").
 * Metadata is copied; general.file_type is set to llama.cpp's ftype of
 * the mix. OUT is written as OUT.tmp and renamed when complete.
 * ANVIL_ERR_INVALID for an unknown type, or when a tensor to convert is
 * already quantized with fewer bits per weight than its target (a lossy
 * file cannot be made better by requantizing it: start from F16/F32);
 * ANVIL_ERR_FORMAT for a tensor holding NaN or infinity; err names the
 * tensor. stats (optional) is filled on success. */
anvil_status anvil_quantize(const char *in, const char *out, const struct anvil_quantize_params *p,
                            struct anvil_quantize_stats *stats, char *err, size_t err_cap);

/* ---------------------------------------------------------------------- */
/* embeddings (src/model/embed.c, docs/embeddings.md) */

/* How a sequence's hidden states become one vector: llama.cpp's values of
 * <arch>.pooling_type. UNSPECIFIED: the file does not say (a chat model;
 * it cannot be asked for embeddings unless the caller names a pooling). */
enum anvil_pooling {
    ANVIL_POOL_UNSPECIFIED = -1,
    ANVIL_POOL_NONE = 0, /* one vector per token (not a sequence embedding) */
    ANVIL_POOL_MEAN = 1, /* mean over the sequence's tokens */
    ANVIL_POOL_CLS = 2,  /* the first token's */
    ANVIL_POOL_LAST = 3, /* the last token's (Qwen3-Embedding) */
    ANVIL_POOL_RANK = 4, /* a classification head's score (rerankers) */
};

/* The file's <arch>.pooling_type, or ANVIL_POOL_UNSPECIFIED. */
int anvil_model_pooling(const struct anvil_model *m);
/* False for a model that only embeds: an encoder (BERT, nomic-bert) or a
 * decoder's layers attending both ways (gemma-embedding); the engine
 * refuses it. */
bool anvil_model_generates(const struct anvil_model *m);
/* "none", "mean", "cls", "last", "rank", or "unspecified". */
const char *anvil_pooling_name(int pooling);

/* A decode row may ask for its hidden state after the output norm instead
 * of logits: ANVIL_OUT_EMBD in anvil_batch.logits. A batch whose output
 * rows are embeddings has no logits (the lm_head is skipped); mixing the
 * two kinds in one batch is ANVIL_ERR_INVALID. */
enum { ANVIL_OUT_EMBD = 3 };
/* The n_embd floats of the i-th output row of the last decode, when it
 * asked for ANVIL_OUT_EMBD; else NULL. Valid until the next decode. */
const float *anvil_get_embd(struct anvil_ctx *c, int32_t i);

/* Embed n_seqs token sequences (seqs[i] of lens[i] tokens) with `pooling`
 * (MEAN, CLS, LAST, RANK or NONE; ANVIL_POOL_UNSPECIFIED = the model's),
 * L2-normalized when `normalize`: out gets n_seqs rows of
 * anvil_model_n_embd floats (RANK: n_seqs scores); NONE gives one row per
 * token instead, the sequences' rows back to back in order
 * (anvil_embed_rows of them), each row normalized on its own.
 * Sequences run many at once, packed into batches of at most the ctx's
 * n_batch rows, n_seq_max sequences and n_outputs output rows (MEAN needs
 * one output row per token: make n_outputs = n_batch). The ctx's
 * sequences 0 .. n_seq_max-1 must be empty and are left empty. A
 * sequence that is empty, longer than n_batch or n_ctx, or holds a token
 * out of range is ANVIL_ERR_INVALID (anvil_ctx_errmsg says which); a
 * model that cannot (RANK without a rank head, or no pooling given or in
 * the file) ANVIL_ERR_UNSUPPORTED. */
anvil_status anvil_embed(struct anvil_ctx *c, const anvil_token *const *seqs,
                         const int32_t *lens, int32_t n_seqs, int pooling, bool normalize,
                         float *out);
/* The rows anvil_embed writes for these sequences with `pooling`
 * (UNSPECIFIED = the model's): the sum of lens under ANVIL_POOL_NONE, else
 * n_seqs. */
int64_t anvil_embed_rows(const struct anvil_model *m, int pooling, const int32_t *lens,
                         int32_t n_seqs);
/* The tokens of a (query, document) pair for a reranker, as llama-server
 * builds them: BOS when the vocabulary adds one, the query, EOS, the
 * document, EOS (both tokenized as text). Returns the count, -(needed)
 * when cap is too small, INT32_MIN on out-of-memory. */
int32_t anvil_rank_pair(const struct anvil_model *m, const char *query, size_t query_len,
                        const char *doc, size_t doc_len, anvil_token *out, int32_t cap);

#ifdef __cplusplus
}
#endif
#endif /* ANVIL_H */

/*
 * cmd_serve.c - `anvil serve`: the OpenAI-compatible HTTP server.
 *
 * Thin: parse argv strictly, load the model, start the engine's driver
 * thread and the HTTP daemon (src/server), then wait for SIGINT/SIGTERM.
 * Shutdown on SIGTERM or SIGINT is a drain, what a load balancer or
 * Kubernetes expects of a replica: /health turns 503 {"status":
 * "draining"}, new requests get 503 with Retry-After, in-flight requests
 * run to their end for up to --drain-timeout seconds (a second signal
 * cuts it short), then the rest are cancelled, HTTP stops, and the
 * engine, the server and the model are freed. Exit 0 after a clean stop.
 *
 * Signals are blocked in every thread (the mask is set before any thread
 * starts) and taken synchronously with sigwait, so no handler runs in
 * the middle of the library.
 *
 * Connections: each open connection holds a file descriptor, so the soft
 * RLIMIT_NOFILE is raised to the hard limit (often 1024 -> 1048576), and
 * --max-conn (default DEFAULT_MAX_CONN) must fit in it with FD_RESERVE
 * descriptors to spare for the model file, the engine and the daemon.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "chat_render.h"
#include "cli.h"
#include "core/core.h"
#include "server/server.h"

#define CMD "serve"
#define DEFAULT_MAX_QUEUE ANVIL_ENGINE_MAX_QUEUE_DEFAULT
#define DEFAULT_TIMEOUT 600
#define DEFAULT_HEADER_TIMEOUT 30
#define DEFAULT_MAX_CONN 4096
#define FD_RESERVE 64
#define DEFAULT_DRAIN 30 /* seconds; Kubernetes' default grace period is 30 s too */
#define MAX_BODY (4u << 20) /* 4 MiB: a full 8k-token prompt as text or ids fits many times */

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil serve -m MODEL [options]\n\n"
            "HTTP server of the APIs clients speak: OpenAI's /v1/chat/completions,\n"
            "/v1/completions, /v1/responses, /v1/embeddings; Anthropic's /v1/messages;\n"
            "Ollama's /api/chat, /api/generate, /api/embed, /api/tags, /api/show;\n"
            "llama-server's /infill, /v1/rerank, /tokenize, /detokenize, /apply-template;\n"
            "GET /v1/models, /props, /health, /metrics, /openapi.json (every route and\n"
            "field); and a chat page at / (open http://HOST:PORT/ in a browser).\n\n"
            "  -m, --model FILE      GGUF model (required)\n"
            "      --host ADDR       address to bind (default 127.0.0.1; numeric or localhost)\n"
            "      --port N          TCP port, 0 = any free port (default 8080)\n"
            "      --parallel N      sequences decoded at once (default: engine's, %d)\n"
            "      --kv-mem SIZE     KV cache memory, e.g. 512M, 2G (default: engine's)\n"
            "      --api-key KEY     require 'Authorization: Bearer KEY' (not on /health,\n"
            "                        /openapi.json)\n"
            "      --max-queue N     waiting requests before 503 (default %d)\n"
            "      --max-conn N      connections served at once; more get 503 (default %d,\n"
            "                        lowered to fit the file descriptor limit)\n"
            "      --header-timeout S  seconds a connection has to send a whole request\n"
            "                        head, from its open or its previous request (default %d)\n"
            "      --timeout S       seconds without a byte while a body is uploaded or a\n"
            "                        response written (default %d)\n"
            "  -t, --threads N       engine threads (default: all online CPUs)\n"
            "      --spec MODE       speculative decoding for requests that do not choose:\n"
            "                        off (default), ngram (prompt lookup) or draft\n"
            "      --draft FILE      draft model for --spec draft (same vocabulary)\n"
            "      --embedding-model FILE  serve /v1/embeddings and /api/embed with this\n"
            "                        model too (its id: the file name without .gguf)\n"
            "      --rerank-model FILE  serve /v1/rerank with this model (a rank head)\n"
            "      --spec-k K        most proposed tokens per step, 1..%d (default %d)\n"
            "  -c, --ctx N           max tokens per request, prompt + completion\n"
            "                        (default: min(train ctx, %d))\n"
            "      --kernels K       auto, ref, avx2 or avx512\n"
            "      --chat-template NAME  chat template family instead of the file's:\n"
            "                        %s\n"
            "      --chat-template-file FILE  a Jinja chat template instead of the GGUF's\n"
            "                        (default: the GGUF's own template, when it parses)\n"
            "      --no-webui        do not serve the chat page (GET / is a 404)\n"
            "      --reasoning-budget N  a thought's tokens at most (then it is closed; 0:\n"
            "                        no thinking); requests may set reasoning_budget\n"
            "      --strict          refuse (400) request fields anvil does not know; by\n"
            "                        default they are ignored and named in an\n"
            "                        X-Anvil-Ignored-Fields response header\n"
            "      --cors-origins L  browser origins allowed to call the API (CORS): a\n"
            "                        comma-separated list of origins, or * for any\n"
            "      --replica-id ID   name sent in an X-Anvil-Replica header on every\n"
            "                        response (behind a load balancer)\n"
            "      --drain-timeout S on SIGTERM/SIGINT, let in-flight requests run this\n"
            "                        long before cancelling them (default %d; a second\n"
            "                        signal cancels at once)\n",
            ANVIL_ENGINE_MAX_RUNNING_DEFAULT, DEFAULT_MAX_QUEUE, DEFAULT_MAX_CONN,
            DEFAULT_HEADER_TIMEOUT, DEFAULT_TIMEOUT, ANVIL_SPEC_K_MAX, ANVIL_SPEC_K_DEFAULT,
            ANVIL_ENGINE_N_CTX_DEFAULT_MAX, anvil_chat_template_names(), DEFAULT_DRAIN);
}

/* "512M", "2G", "1048576", "64k": bytes, binary suffixes. */
static bool parse_size(const char *opt, const char *s, long long *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !(v > 0)) {
        cli_fail(CMD, "%s expects a size such as 512M or 2G, got '%s'", opt, s);
        return false;
    }
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i' && mul > 1) end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end) {
        cli_fail(CMD, "%s expects a size such as 512M or 2G, got '%s'", opt, s);
        return false;
    }
    v *= mul;
    if (v < 1024.0 * 1024 || v > 1024.0 * 1024 * 1024 * 1024) {
        cli_fail(CMD, "%s must be between 1M and 1T, got '%s'", opt, s);
        return false;
    }
    *out = (long long)v;
    return true;
}

/* "models/SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1" */
static void model_id_of(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf")) out[n - 5] = '\0';
}

/* Raise the soft descriptor limit to the hard one and fit *max_conn in
 * it (a spare eighth of connections is accepted only to be told 503, see
 * src/server/http.c). An explicit --max-conn that does not fit is an
 * error; the default shrinks. */
static bool fit_fd_limit(long *max_conn, bool explicit_max) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return true;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        if (want == RLIM_INFINITY || want > (1u << 20)) want = 1u << 20;
        if (want > rl.rlim_cur) {
            rl.rlim_cur = want;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    long long avail = (long long)rl.rlim_cur - FD_RESERVE;
    long long need = *max_conn + (*max_conn / 8 > 16 ? *max_conn / 8 : 16);
    if (need <= avail) return true;
    if (explicit_max) {
        cli_fail(CMD, "--max-conn %ld needs about %lld file descriptors, the limit is %lld "
                 "(ulimit -n)", *max_conn, need + FD_RESERVE, (long long)rl.rlim_cur);
        return false;
    }
    long fit = (long)(avail * 8 / 9) - 16;
    if (fit < 1) {
        cli_fail(CMD, "the file descriptor limit (%lld, ulimit -n) is too low to serve",
                 (long long)rl.rlim_cur);
        return false;
    }
    fprintf(stderr, "anvil serve: --max-conn lowered to %ld to fit the file descriptor limit "
            "(%lld)\n", fit, (long long)rl.rlim_cur);
    *max_conn = fit;
    return true;
}

/* Wait up to `secs` for the in-flight requests to end; false when a
 * signal arrived first. */
static bool drain(struct srv *s, const sigset_t *set, double secs) {
    double t_end = time_now_s() + secs;
    while (srv_n_active(s) > 0 && time_now_s() < t_end) {
        struct timespec ts = {0, 50 * 1000000L};
        if (sigtimedwait(set, NULL, &ts) > 0) return false;
    }
    return true;
}

int cmd_serve(int argc, char **argv) {
    const char *model_path = NULL, *host = "127.0.0.1", *api_key = NULL, *kernels = NULL;
    const char *replica_id = NULL;
    bool webui = true, strict = false;
    bool has_reasoning_budget = false;
    long reasoning_budget = 0;
    const char *cors_origins = NULL;
    long port = 8080, parallel = 0, max_queue = DEFAULT_MAX_QUEUE, timeout = DEFAULT_TIMEOUT;
    long header_timeout = DEFAULT_HEADER_TIMEOUT, max_conn = DEFAULT_MAX_CONN;
    bool explicit_max_conn = false;
    long threads = 0, ctx = 0, spec_k = 0;
    const char *spec = NULL, *draft_path = NULL;
    const char *embed_path = NULL, *rerank_path = NULL;
    long drain_timeout = DEFAULT_DRAIN;
    const char *chat_template = NULL, *chat_template_file = NULL;
    long long kv_mem = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
#define VAL() \
    do { \
        if (!(v = cli_value(CMD, argc, argv, &i))) return 2; \
    } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VAL();
            model_path = v;
        } else if (!strcmp(a, "--host")) {
            VAL();
            if (!v[0]) return cli_fail(CMD, "--host is empty");
            host = v;
        } else if (!strcmp(a, "--port")) {
            VAL();
            if (!cli_int(CMD, a, v, 0, 65535, &port)) return 2;
        } else if (!strcmp(a, "--parallel")) {
            VAL();
            if (!cli_int(CMD, a, v, 1, 4096, &parallel)) return 2;
        } else if (!strcmp(a, "--kv-mem")) {
            VAL();
            if (!parse_size(a, v, &kv_mem)) return 2;
        } else if (!strcmp(a, "--api-key")) {
            VAL();
            if (!v[0]) return cli_fail(CMD, "--api-key is empty");
            api_key = v;
        } else if (!strcmp(a, "--max-queue")) {
            VAL();
            if (!cli_int(CMD, a, v, 1, 65536, &max_queue)) return 2;
        } else if (!strcmp(a, "--timeout")) {
            VAL();
            if (!cli_int(CMD, a, v, 1, 86400, &timeout)) return 2;
        } else if (!strcmp(a, "--header-timeout")) {
            VAL();
            if (!cli_int(CMD, a, v, 1, 3600, &header_timeout)) return 2;
        } else if (!strcmp(a, "--max-conn")) {
            VAL();
            if (!cli_int(CMD, a, v, 1, 1 << 20, &max_conn)) return 2;
            explicit_max_conn = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            if (!cli_int(CMD, a, v, 1, 256, &threads)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            VAL();
            if (!cli_int(CMD, a, v, 16, 1 << 20, &ctx)) return 2;
        } else if (!strcmp(a, "--spec")) {
            VAL();
            if (strcmp(v, "off") && strcmp(v, "ngram") && strcmp(v, "draft"))
                return cli_fail(CMD, "--spec must be off, ngram or draft, got '%s'", v);
            spec = v;
        } else if (!strcmp(a, "--draft")) {
            VAL();
            draft_path = v;
        } else if (!strcmp(a, "--embedding-model")) {
            VAL();
            embed_path = v;
        } else if (!strcmp(a, "--rerank-model")) {
            VAL();
            rerank_path = v;
        } else if (!strcmp(a, "--spec-k")) {
            VAL();
            if (!cli_int(CMD, a, v, 1, ANVIL_SPEC_K_MAX, &spec_k)) return 2;
        } else if (!strcmp(a, "--kernels")) {
            VAL();
            if (strcmp(v, "auto") && strcmp(v, "ref") && strcmp(v, "avx2") && strcmp(v, "avx512"))
                return cli_fail(CMD, "--kernels must be auto, ref, avx2 or avx512, got '%s'", v);
            kernels = v;
        } else if (!strcmp(a, "--chat-template")) {
            VAL();
            chat_template = v; /* checked against the model's once it is loaded */
        } else if (!strcmp(a, "--chat-template-file")) {
            VAL();
            chat_template_file = v;
        } else if (!strcmp(a, "--no-webui")) {
            webui = false;
        } else if (!strcmp(a, "--reasoning-budget")) {
            VAL();
            if (!cli_int(CMD, a, v, 0, 1 << 30, &reasoning_budget)) return 2;
            has_reasoning_budget = true;
        } else if (!strcmp(a, "--strict")) {
            strict = true;
        } else if (!strcmp(a, "--cors-origins")) {
            VAL();
            /* echoed in a header: printable ASCII, no spaces */
            size_t n = strlen(v);
            for (size_t q = 0; q < n; q++)
                if (v[q] <= 0x20 || v[q] >= 0x7f)
                    return cli_fail(CMD, "--cors-origins must be '*' or origins separated by "
                                    "commas (no spaces or control characters)");
            if (n == 0 || n > 4096)
                return cli_fail(CMD, "--cors-origins must be 1-4096 characters");
            cors_origins = v;
        } else if (!strcmp(a, "--replica-id")) {
            VAL();
            /* it goes into a header: printable ASCII, no separators */
            size_t n = strlen(v);
            if (n == 0 || n > 64 || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                              "0123456789.-_:") != n)
                return cli_fail(CMD, "--replica-id must be 1-64 characters of A-Z a-z 0-9 . - _ :"
                                " (the value is not echoed: it may hold control characters)");
            replica_id = v;
        } else if (!strcmp(a, "--drain-timeout")) {
            VAL();
            if (!cli_int(CMD, a, v, 0, 86400, &drain_timeout)) return 2;
        } else {
            return cli_fail(CMD, "unknown option '%s' (see anvil serve --help)", a);
        }
#undef VAL
    }
    if (!model_path) return cli_fail(CMD, "a model is required (-m FILE)");
    if (spec && !strcmp(spec, "draft") && !draft_path)
        return cli_fail(CMD, "--spec draft needs --draft FILE");
    unsigned char addr[16];
    if (strcmp(host, "localhost") != 0 && inet_pton(AF_INET, host, addr) != 1 &&
        inet_pton(AF_INET6, host, addr) != 1)
        return cli_fail(CMD, "--host must be a numeric IPv4/IPv6 address or localhost, got '%s'",
                        host);

    if (!fit_fd_limit(&max_conn, explicit_max_conn)) return 2;

    /* before any thread exists, so every thread inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[ANVIL_ERRMSG_CAP] = "";
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = kernels;
    struct anvil_model *m = NULL;
    anvil_status st = anvil_model_load(model_path, &mp, &m, err, sizeof(err));
    if (st != ANVIL_OK) {
        fprintf(stderr, "anvil serve: %s\n", err[0] ? err : anvil_status_str(st));
        return st == ANVIL_ERR_IO || st == ANVIL_ERR_FORMAT || st == ANVIL_ERR_UNSUPPORTED ? 2 : 1;
    }
    /* before the engine and the HTTP threads share the model */
    int crc = cli_chat_choose(CMD, m, chat_template, chat_template_file, false);
    if (crc) {
        anvil_model_free(m);
        return crc;
    }
    struct anvil_model *dm = NULL;
    if (draft_path) {
        st = anvil_model_load(draft_path, &mp, &dm, err, sizeof(err));
        if (st != ANVIL_OK) {
            fprintf(stderr, "anvil serve: draft model: %s\n", err[0] ? err : anvil_status_str(st));
            anvil_model_free(m);
            return 2;
        }
    }
    /* embedding and rerank models: their own contexts, made by the server */
    struct anvil_model *em = NULL, *rm = NULL;
    const char *side_path[2] = {embed_path, rerank_path};
    struct anvil_model **side[2] = {&em, &rm};
    for (int k = 0; k < 2; k++) {
        if (!side_path[k]) continue;
        st = anvil_model_load(side_path[k], &mp, side[k], err, sizeof(err));
        if (st != ANVIL_OK) {
            fprintf(stderr, "anvil serve: %s model: %s\n", k ? "rerank" : "embedding",
                    err[0] ? err : anvil_status_str(st));
            anvil_model_free(em);
            anvil_model_free(dm);
            anvil_model_free(m);
            return 2;
        }
        int p = anvil_model_pooling(*side[k]);
        bool fits = k ? p == ANVIL_POOL_RANK
                      : p == ANVIL_POOL_MEAN || p == ANVIL_POOL_CLS || p == ANVIL_POOL_LAST ||
                            p == ANVIL_POOL_NONE; /* none: per-token, on /embedding */
        if (!fits) {
            fprintf(stderr, "anvil serve: %s is not %s model (its pooling is %s)\n",
                    side_path[k], k ? "a reranking" : "an embedding", anvil_pooling_name(p));
            anvil_model_free(rm);
            anvil_model_free(em);
            anvil_model_free(dm);
            anvil_model_free(m);
            return 2;
        }
    }
    int32_t n_ctx = (int32_t)ctx;
    if (n_ctx == 0) {
        n_ctx = anvil_model_n_ctx_train(m);
        if (n_ctx <= 0 || n_ctx > 8192) n_ctx = 8192;
    }
    struct anvil_engine_params ep = anvil_engine_default_params();
    ep.n_threads = (int32_t)threads;
    ep.max_running = (int32_t)parallel;
    ep.max_queue = (int32_t)max_queue;
    ep.n_ctx = n_ctx;
    ep.kv_mem = kv_mem;
    ep.spec = !spec || !strcmp(spec, "off") ? ANVIL_SPEC_OFF
              : !strcmp(spec, "ngram")      ? ANVIL_SPEC_NGRAM
                                            : ANVIL_SPEC_DRAFT;
    ep.spec_k = (int32_t)spec_k;
    ep.draft = dm;
    struct anvil_engine *e = NULL;
    st = anvil_engine_init(m, &ep, &e, err, sizeof(err));
    if (st != ANVIL_OK) {
        fprintf(stderr, "anvil serve: cannot start the engine: %s\n", err);
        anvil_model_free(dm);
        anvil_model_free(m);
        /* what was asked cannot run (bad parameters, a model that only
         * embeds): the user's to fix */
        return st == ANVIL_ERR_INVALID || st == ANVIL_ERR_UNSUPPORTED ? 2 : 1;
    }
    st = anvil_engine_start(e);
    if (st != ANVIL_OK) {
        fprintf(stderr, "anvil serve: cannot start the engine thread: %s\n",
                anvil_engine_errmsg(e));
        anvil_engine_free(e);
        anvil_model_free(dm);
        anvil_model_free(m);
        return 1;
    }
    char model_id[256];
    model_id_of(model_path, model_id, sizeof(model_id));
    char embed_id[256] = "", rerank_id[256] = "";
    if (embed_path) model_id_of(embed_path, embed_id, sizeof(embed_id));
    if (rerank_path) model_id_of(rerank_path, rerank_id, sizeof(rerank_id));
    struct srv_config cfg = {
        .host = host,
        .port = (int)port,
        .api_key = api_key,
        .model_id = model_id,
        .timeout_s = (int)timeout,
        .header_timeout_s = (int)header_timeout,
        .max_conn = (int)max_conn,
        .n_ctx = n_ctx,
        .max_body = MAX_BODY,
        .webui = webui,
        .replica_id = replica_id,
        .strict = strict,
        .has_reasoning_budget = has_reasoning_budget,
        .reasoning_budget = (int32_t)reasoning_budget,
        .cors_origins = cors_origins,
        .parallel = parallel ? (int32_t)parallel : ANVIL_ENGINE_MAX_RUNNING_DEFAULT,
        .embed_model = em,
        .rerank_model = rm,
        .embed_model_id = embed_id,
        .rerank_model_id = rerank_id,
        .emb_threads = (int32_t)threads,
    };
    struct srv *s = NULL;
    if (srv_start(m, e, &cfg, &s, err, sizeof(err)) != 0) {
        fprintf(stderr, "anvil serve: %s\n", err);
        anvil_engine_free(e);
        anvil_model_free(dm);
        anvil_model_free(m);
        return 1;
    }
    const char *shown = host;
    bool v6 = strchr(host, ':') != NULL;
    char rb[96];
    printf("anvil serve: listening on http://%s%s%s:%d (chat template: %s)\n",
           v6 ? "[" : "", shown, v6 ? "]" : "", srv_port(s), cli_chat_renderer(m, rb, sizeof rb));
    fflush(stdout);

    int sig = 0;
    while (sigwait(&set, &sig) != 0) {
    }
    fprintf(stderr, "anvil serve: %s: draining (in-flight requests: %d, up to %ld s)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", srv_n_active(s), drain_timeout);
    srv_quiesce(s);
    /* finish what is running; a second signal cancels at once */
    if (!drain(s, &set, (double)drain_timeout))
        fprintf(stderr, "anvil serve: second signal: cancelling\n");
    else if (srv_n_active(s) > 0)
        fprintf(stderr, "anvil serve: drain timeout: cancelling %d requests\n", srv_n_active(s));
    srv_cancel_all(s);
    drain(s, &set, 2.0); /* let cancelled streams send their last event */
    srv_stop(s);
    anvil_engine_free(e);
    srv_free(s);
    anvil_model_free(rm);
    anvil_model_free(em);
    anvil_model_free(dm);
    anvil_model_free(m);
    fprintf(stderr, "anvil serve: stopped\n");
    return 0;
}

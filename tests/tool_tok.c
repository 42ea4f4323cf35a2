/*
 * tool_tok.c - drive the tokenizer from the Python tests (tests/py/test_tok*.py)
 * without spawning one process per string.
 *
 *   tool_tok MODEL encode [--no-parse-special] [--add-special]
 *       stdin:  records (u32 len, len bytes)
 *       stdout: per record (i32 n, n x i32 ids)
 *   tool_tok MODEL decode
 *       stdin:  records (u32 n, n x i32 ids)
 *       stdout: per record the streaming detokenizer's output, one chunk per
 *               token and a final flush chunk: (u32 n_chunks, then per chunk
 *               u32 len, bytes); then the concatenated pieces with
 *               special=true: (u32 len, bytes)
 *   tool_tok MODEL pieces
 *       stdout: for every token id, (u32 len, bytes) with special=false then
 *               (u32 len, bytes) with special=true
 *   tool_tok MODEL chat [--bos]
 *       stdin:  records (u32 n_msgs, u8 add_assistant, per message: u32 len
 *               role, u32 len content)
 *       stdout: per record (i32 len, bytes) rendered text (--bos: with the
 *               BOS text where the template has bos_token), then (u32
 *               n_spans, n_spans x (u32 start, u32 len)): the spans of the
 *               text that came from the messages
 *   tool_tok MODEL chat-tokens
 *       stdin:  as chat
 *       stdout: per record (i32 n, n x i32 ids) from tok_chat_tokenize
 *   tool_tok MODEL time
 *       stdin:  one record (u32 len, len bytes)
 *       stdout: "bytes N tokens N seconds S": the fastest of 3 tok_encode
 *               calls (parse_special on, add_special off)
 *   tool_tok MODEL info
 *       stdout: text lines "key value" (n_vocab, bos, eos, add_bos, sep, add_sep, chat,
 *               chat_source, eog ...)
 *
 * Before the mode, --chat-template NAME switches the template family
 * (tok_chat_set; exit status 2 for an unknown name).
 *
 * All integers little-endian. Buffers start small on purpose so that the
 * "-(needed) when cap is too small" paths get exercised.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "tok/tok.h"
#include "tok/tok_int.h"

static void die(const char *msg) {
    fprintf(stderr, "tool_tok: %s\n", msg);
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory");
    return p;
}

static bool rd(void *p, size_t n) { return fread(p, 1, n, stdin) == n; }
static void wr(const void *p, size_t n) {
    if (n && fwrite(p, 1, n, stdout) != n) die("write failed");
}
static void wr_u32(uint32_t v) { wr(&v, 4); }
static void wr_blob(const void *p, uint32_t n) {
    wr_u32(n);
    wr(p, n);
}

static char *rd_blob(uint32_t *n) {
    if (!rd(n, 4)) return NULL;
    char *b = xmalloc(*n + 1);
    if (*n && !rd(b, *n)) die("truncated record");
    b[*n] = 0;
    return b;
}

static void do_encode(const struct tok_vocab *v, bool parse_special, bool add_special) {
    int32_t cap = 16;
    anvil_token *ids = xmalloc(sizeof(anvil_token) * (size_t)cap);
    uint32_t len;
    char *text;
    while ((text = rd_blob(&len)) != NULL) {
        int32_t n = tok_encode(v, text, len, ids, cap, add_special, parse_special);
        if (n < 0 && n != INT32_MIN) {
            cap = -n;
            free(ids);
            ids = xmalloc(sizeof(anvil_token) * (size_t)cap);
            int32_t n2 = tok_encode(v, text, len, ids, cap, add_special, parse_special);
            if (n2 != -n) die("second encode disagrees with the needed count");
            n = n2;
        }
        if (n < 0) die("encode failed");
        wr(&n, 4);
        wr(ids, sizeof(anvil_token) * (size_t)n);
        free(text);
        fflush(stdout);
    }
    free(ids);
}

static void do_decode(const struct tok_vocab *v) {
    uint32_t n;
    while (rd(&n, 4)) {
        anvil_token *ids = xmalloc(sizeof(anvil_token) * (n ? n : 1));
        if (n && !rd(ids, sizeof(anvil_token) * n)) die("truncated ids");
        wr_u32(n + 1);
        struct anvil_detok d = {{0}, 0};
        char small[4];
        for (uint32_t i = 0; i < n; i++) {
            /* first with a tiny buffer: must report the need and keep state */
            int32_t r = tok_detok_push(v, &d, ids[i], small, (int32_t)sizeof(small));
            if (r < 0) {
                char *big = xmalloc((size_t)-r);
                int32_t r2 = tok_detok_push(v, &d, ids[i], big, -r);
                if (r2 != -r - 1) die("detok retry disagrees with the needed count");
                wr_blob(big, (uint32_t)r2);
                free(big);
            } else {
                wr_blob(small, (uint32_t)r);
            }
        }
        char fl[8];
        int32_t r = tok_detok_flush(&d, fl, (int32_t)sizeof(fl));
        if (r < 0) die("flush failed");
        wr_blob(fl, (uint32_t)r);
        /* plain pieces, special = true */
        size_t tot = 0, cap = 64;
        char *all = xmalloc(cap);
        for (uint32_t i = 0; i < n; i++) {
            int32_t k = tok_piece(v, ids[i], all + tot, (int32_t)(cap - tot), true);
            if (k < 0) {
                cap = (tot - (size_t)k) * 2;
                all = realloc(all, cap);
                if (!all) die("out of memory");
                k = tok_piece(v, ids[i], all + tot, (int32_t)(cap - tot), true);
                if (k < 0) die("piece retry failed");
            }
            tot += (size_t)k;
        }
        wr_blob(all, (uint32_t)tot);
        free(all);
        free(ids);
        fflush(stdout);
    }
}

static void do_pieces(const struct tok_vocab *v) {
    char buf[4096];
    for (int32_t t = 0; t < tok_n_vocab(v); t++) {
        for (int sp = 0; sp < 2; sp++) {
            int32_t k = tok_piece(v, t, buf, (int32_t)sizeof(buf), sp != 0);
            if (k < 0) die("piece longer than 4096 bytes");
            wr_blob(buf, (uint32_t)k);
        }
    }
}

static void do_time(const struct tok_vocab *v) {
    uint32_t len;
    char *text = rd_blob(&len);
    if (!text) die("no text");
    anvil_token *ids = xmalloc(sizeof(anvil_token) * ((size_t)len + 2));
    double best = 1e30;
    int32_t n = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = time_now_s();
        n = tok_encode(v, text, len, ids, (int32_t)len + 2, false, true);
        double dt = time_now_s() - t0;
        if (n < 0) die("encode failed");
        if (dt < best) best = dt;
    }
    printf("bytes %u tokens %d seconds %.6f\n", len, n, best);
    free(ids);
    free(text);
}

static struct anvil_chat_msg *rd_chat(uint32_t n, uint8_t *add) {
    if (!rd(add, 1)) die("truncated chat record");
    struct anvil_chat_msg *m = xmalloc(sizeof(*m) * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++) {
        uint32_t l;
        m[i].role = rd_blob(&l);
        m[i].content = rd_blob(&l);
        if (!m[i].role || !m[i].content) die("truncated chat message");
    }
    return m;
}

static void free_chat(struct anvil_chat_msg *m, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        free((void *)m[i].role);
        free((void *)m[i].content);
    }
    free(m);
}

static void do_chat(const struct tok_vocab *v, bool with_bos) {
    uint32_t n;
    while (rd(&n, 4)) {
        uint8_t add;
        struct anvil_chat_msg *m = rd_chat(n, &add);
        int32_t r = tok_chat_render_text(v, m, n, add != 0, with_bos, NULL, 0);
        if (r >= 0) die("chat render with cap 0 must ask for room");
        char *buf = xmalloc((size_t)-r);
        int32_t k = tok_chat_render_text(v, m, n, add != 0, with_bos, buf, -r);
        if (k != -r - 1 || buf[k] != 0) die("chat render retry disagrees");
        wr(&k, 4);
        wr(buf, (size_t)k);
        free(buf);
        /* the spans, from the internal renderer (no BOS text there) */
        char *s;
        size_t len, n_sp;
        struct tok_span *sp;
        if (chat_render(v, m, n, add != 0, with_bos, &s, &len, &sp, &n_sp) != ANVIL_OK)
            die("chat_render failed");
        if ((int32_t)len != k) die("chat_render and the text call disagree");
        wr_u32((uint32_t)n_sp);
        for (size_t i = 0; i < n_sp; i++) {
            wr_u32(sp[i].start);
            wr_u32(sp[i].len);
        }
        core_free(s);
        core_free(sp);
        free_chat(m, n);
        fflush(stdout);
    }
}

static void do_chat_tokens(const struct tok_vocab *v) {
    uint32_t n;
    while (rd(&n, 4)) {
        uint8_t add;
        struct anvil_chat_msg *m = rd_chat(n, &add);
        int32_t r = tok_chat_tokenize(v, m, n, add != 0, NULL, 0);
        if (r == INT32_MIN) die("chat tokenize failed");
        int32_t need = r < 0 ? -r : r;
        anvil_token *ids = xmalloc(sizeof(anvil_token) * ((size_t)need + 1));
        int32_t k = tok_chat_tokenize(v, m, n, add != 0, ids, need);
        if (k != need) die("chat tokenize retry disagrees");
        wr(&k, 4);
        wr(ids, sizeof(anvil_token) * (size_t)k);
        free(ids);
        free_chat(m, n);
        fflush(stdout);
    }
}

int main(int argc, char **argv) {
    if (argc < 3)
        die("usage: tool_tok MODEL [--chat-template NAME] encode|decode|pieces|chat|chat-tokens|info "
            "[options]");
    char err[ANVIL_ERRMSG_CAP] = "";
    struct gguf_file *f;
    if (gguf_open(argv[1], &f, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "tool_tok: %s\n", err);
        return 2;
    }
    struct tok_vocab *v;
    anvil_status st = tok_load(f, &v, err, sizeof(err));
    gguf_close(f); /* the vocab keeps no pointer into the file */
    if (st != ANVIL_OK) {
        fprintf(stderr, "tool_tok: %s: %s\n", anvil_status_str(st), err);
        return 2;
    }
    int a = 2;
    if (!strcmp(argv[a], "--chat-template")) {
        if (a + 2 >= argc) die("--chat-template needs a name and a mode");
        if (tok_chat_set(v, argv[a + 1]) != ANVIL_OK) {
            fprintf(stderr, "tool_tok: unknown chat template '%s' (known: %s)\n", argv[a + 1],
                    tok_chat_names());
            tok_free(v);
            return 2;
        }
        a += 2;
    }
    const char *mode = argv[a];
    if (!strcmp(mode, "encode")) {
        bool parse_special = true, add_special = false;
        for (int i = a + 1; i < argc; i++) {
            if (!strcmp(argv[i], "--no-parse-special")) parse_special = false;
            else if (!strcmp(argv[i], "--add-special")) add_special = true;
            else die("unknown encode option");
        }
        do_encode(v, parse_special, add_special);
    } else if (!strcmp(mode, "decode")) {
        do_decode(v);
    } else if (!strcmp(mode, "pieces")) {
        do_pieces(v);
    } else if (!strcmp(mode, "chat")) {
        do_chat(v, a + 1 < argc && !strcmp(argv[a + 1], "--bos"));
    } else if (!strcmp(mode, "time")) {
        do_time(v);
    } else if (!strcmp(mode, "chat-tokens")) {
        do_chat_tokens(v);
    } else if (!strcmp(mode, "info")) {
        printf("n_vocab %d\nbos %d\neos %d\nadd_bos %d\nsep %d\nadd_sep %d\nchat %s\n"
               "chat_source %d\n",
               tok_n_vocab(v), tok_bos(v), tok_eos(v), (int)tok_add_bos(v), tok_sep(v),
               (int)tok_add_sep(v), tok_chat_name(v), tok_chat_source(v));
        for (int32_t t = 0; t < tok_n_vocab(v); t++)
            if (tok_is_eog(v, t)) printf("eog %d\n", t);
    } else {
        die("unknown mode");
    }
    tok_free(v);
    if (core_alloc_live() != 0) {
        fprintf(stderr, "tool_tok: %lld blocks leaked\n", (long long)core_alloc_live());
        return 3;
    }
    return 0;
}

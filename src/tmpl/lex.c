/*
 * lex.c - template text to tokens, with jinja2's lexer rules as
 * transformers configures it (trim_blocks, lstrip_blocks).
 *
 * The source is first normalised as jinja2 does (str.splitlines joined
 * with "\n": \r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029 become
 * "\n", and one trailing line break is dropped: keep_trailing_newline is
 * off). Then:
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}",
 *     "-}}", "-#}" all whitespace after it;
 *   - trim_blocks: a block or comment end ("%}", "#}", not "+%}") eats
 *     one "\n" after it;
 *   - lstrip_blocks: spaces and tabs between a line's start and a block
 *     or comment tag (not "{%+", not "{{") are removed;
 *   - inside brackets a "}}" or "%}" does not end the tag;
 *   - {% raw %}...{% endraw %} is text.
 * Strings unescape as Python's unicode-escape does (unknown escapes stay).
 */
#include <stdlib.h>
#include <string.h>

#include "tmpl/tmpl_int.h"

static void push(struct tm_state *s, struct tm_token t)
{
    if (s->n_toks == s->cap_toks) {
        size_t cap = s->cap_toks ? s->cap_toks * 2 : 256;
        struct tm_token *n = tm_alloc(s, cap * sizeof *n);
        if (s->n_toks)
            memcpy(n, s->toks, s->n_toks * sizeof *n);
        s->toks = n;
        s->cap_toks = cap;
    }
    s->toks[s->n_toks++] = t;
}

/* splitlines + "\n".join: the normalised source in the arena */
static char *normalise(struct tm_state *s, const char *src, size_t n, size_t *out_n)
{
    char *d = tm_alloc(s, n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)src[i];
        if (c == '\r') {
            d[o++] = '\n';
            i += (i + 1 < n && src[i + 1] == '\n') ? 2 : 1;
        } else if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
            d[o++] = '\n';
            i++;
        } else if (c == 0xc2 && i + 1 < n && (unsigned char)src[i + 1] == 0x85) {
            d[o++] = '\n';
            i += 2;
        } else if (c == 0xe2 && i + 2 < n && (unsigned char)src[i + 1] == 0x80 &&
                   ((unsigned char)src[i + 2] == 0xa8 || (unsigned char)src[i + 2] == 0xa9)) {
            d[o++] = '\n';
            i += 3;
        } else
            d[o++] = src[i++];
    }
    if (o && d[o - 1] == '\n')
        o--;
    d[o] = 0;
    *out_n = o;
    return d;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static int count_lines(const char *p, size_t n)
{
    int l = 0;
    for (size_t i = 0; i < n; i++)
        l += p[i] == '\n';
    return l;
}

static void put_utf8(struct sbuf *b, unsigned cp)
{
    char o[4];
    size_t n;
    if (cp >= 0xd800 && cp < 0xe000)
        cp = 0xfffd;
    if (cp < 0x80) { o[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); n = 2; }
    else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63)); n = 3;
    } else {
        o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
        o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63)); n = 4;
    }
    sb_put(b, o, n);
}

static int hexv(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Python unicode-escape of p[0..n) into an arena string. */
static void unescape(struct tm_state *s, const char *p, size_t n, struct tm_token *t)
{
    struct sbuf *bp = tm_buf(s);
#define b (*bp)
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 >= n) {
            sb_put(&b, &p[i], 1);
            continue;
        }
        char c = p[++i];
        switch (c) {
        case '\n': break;
        case '\\': sb_put(&b, "\\", 1); break;
        case '\'': sb_put(&b, "'", 1); break;
        case '"': sb_put(&b, "\"", 1); break;
        case 'a': sb_put(&b, "\a", 1); break;
        case 'b': sb_put(&b, "\b", 1); break;
        case 'f': sb_put(&b, "\f", 1); break;
        case 'n': sb_put(&b, "\n", 1); break;
        case 'r': sb_put(&b, "\r", 1); break;
        case 't': sb_put(&b, "\t", 1); break;
        case 'v': sb_put(&b, "\v", 1); break;
        case 'x': case 'u': case 'U': {
            int want = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            unsigned cp = 0;
            int k;
            for (k = 0; k < want && i + 1 + (size_t)k < n && hexv(p[i + 1 + (size_t)k]) >= 0; k++)
                cp = cp * 16 + (unsigned)hexv(p[i + 1 + (size_t)k]);
            if (k < want || cp > 0x10ffff) {
                tm_fail(s, "truncated \\%c escape in a string", c);
            }
            i += (size_t)want;
            put_utf8(&b, cp);
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                unsigned cp = (unsigned)(c - '0');
                for (int k = 0; k < 2 && i + 1 < n && p[i + 1] >= '0' && p[i + 1] <= '7'; k++)
                    cp = cp * 8 + (unsigned)(p[++i] - '0');
                put_utf8(&b, cp);
            } else {
                sb_put(&b, "\\", 1);
                sb_put(&b, &c, 1);
            }
        }
    }
#undef b
    struct tval v = tm_buf_str(s, bp);
    t->p = v.u.s->p;
    t->n = v.u.s->n;
}

static const char *ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};

/* Lex the inside of a tag from src[*i]; returns after the end marker.
 * kind: 'v' (}}) or 'b' (%}). Sets *trailing to 0 (nothing), 1 ("-":
 * strip all following whitespace), 2 (trim one newline) */
static void lex_tag(struct tm_state *s, const char *src, size_t n, size_t *ip, int *line,
                    char kind, bool *line_starting)
{
    size_t i = *ip;
    int depth = 0;
    for (;;) {
        while (i < n && is_ws(src[i])) {
            if (src[i] == '\n')
                (*line)++;
            i++;
        }
        if (i >= n) {
            s->line = *line;
            tm_fail(s, "unexpected end of template, expected '%s'", kind == 'v' ? "}}" : "%}");
        }
        const char *e = kind == 'v' ? "}}" : "%}";
        if (depth == 0) {
            bool minus = src[i] == '-' && i + 3 <= n && !strncmp(src + i + 1, e, 2);
            bool plus = kind == 'b' && src[i] == '+' && i + 3 <= n && !strncmp(src + i + 1, e, 2);
            if (minus || plus || (i + 1 < n && !strncmp(src + i, e, 2))) {
                struct tm_token t = {.type = kind == 'v' ? T_VAR_END : T_BLOCK_END, .line = *line};
                push(s, t);
                i += (minus || plus) ? 3 : 2;
                *line_starting = false;
                if (minus) {
                    while (i < n && is_ws(src[i])) {
                        if (src[i] == '\n')
                            (*line)++;
                        *line_starting = src[i] == '\n';
                        i++;
                    }
                } else if (!plus && kind == 'b' && i < n && src[i] == '\n') {
                    (*line)++;
                    i++;
                    *line_starting = true;
                }
                *ip = i;
                return;
            }
        }
        struct tm_token t = {.line = *line};
        char c = src[i];
        if (is_alpha(c)) {
            size_t st = i;
            while (i < n && (is_alpha(src[i]) || is_digit(src[i])))
                i++;
            t.type = T_NAME;
            t.p = src + st;
            t.n = i - st;
        } else if (is_digit(c)) {
            size_t st = i;
            while (i < n && (is_digit(src[i]) || (src[i] == '_' && i + 1 < n && is_digit(src[i + 1]))))
                i++;
            bool isf = false;
            if (i + 1 < n && src[i] == '.' && is_digit(src[i + 1])) {
                isf = true;
                i++;
                while (i < n && (is_digit(src[i]) || src[i] == '_'))
                    i++;
            }
            if (i < n && (src[i] == 'e' || src[i] == 'E')) {
                size_t j = i + 1;
                if (j < n && (src[j] == '+' || src[j] == '-'))
                    j++;
                if (j < n && is_digit(src[j])) {
                    isf = true;
                    i = j;
                    while (i < n && is_digit(src[i]))
                        i++;
                }
            }
            char buf[64];
            size_t k = 0;
            for (size_t j = st; j < i && k < sizeof buf - 1; j++)
                if (src[j] != '_')
                    buf[k++] = src[j];
            buf[k] = 0;
            if (isf) {
                t.type = T_FLOAT;
                t.f = strtod(buf, NULL);
            } else {
                t.type = T_INT;
                char *end;
                unsigned long long v = strtoull(buf, &end, 10);
                if (k > 18 && (v > INT64_MAX || k > 19)) {
                    s->line = *line;
                    tm_fail(s, "integer literal too large");
                }
                t.i = (int64_t)v;
            }
        } else if (c == '\'' || c == '"') {
            size_t st = ++i;
            while (i < n && src[i] != c) {
                if (src[i] == '\\' && i + 1 < n)
                    i++;
                i++;
            }
            if (i >= n) {
                s->line = *line;
                tm_fail(s, "unterminated string");
            }
            t.type = T_STRING;
            s->line = *line;
            unescape(s, src + st, i - st, &t);
            *line += count_lines(src + st, i - st);
            i++;
        } else {
            t.type = T_OP;
            t.p = src + i;
            t.n = 1;
            for (int k = 0; ops2[k]; k++)
                if (i + 1 < n && !strncmp(src + i, ops2[k], 2))
                    t.n = 2;
            if (!strchr("+-*/%~<>=()[]{},.:|!;", c) || (c == '!' && t.n == 1)) {
                s->line = *line;
                tm_fail(s, "unexpected character '%c'", c);
            }
            if (c == '(' || c == '[' || c == '{')
                depth++;
            else if ((c == ')' || c == ']' || c == '}') && depth > 0)
                depth--;
            i += t.n;
        }
        push(s, t);
    }
}

/* text before a tag, with the tag's left whitespace control applied */
static void emit_text(struct tm_state *s, const char *p, size_t n, int line, char sign, bool lstrip,
                      bool line_starting)
{
    if (sign == '-') {
        while (n && is_ws(p[n - 1]))
            n--;
    } else if (sign != '+' && lstrip) {
        size_t l = n;
        while (l && p[l - 1] != '\n')
            l--;
        if (l > 0 || line_starting) {
            size_t j = l;
            while (j < n && (p[j] == ' ' || p[j] == '\t'))
                j++;
            if (j == n && j > l)
                n = l;
        }
    }
    if (n) {
        struct tm_token t = {.type = T_TEXT, .line = line, .p = p, .n = n};
        push(s, t);
    }
}

/* is "{% raw %}" (any whitespace control) at src+i? returns its length */
static size_t raw_tag(const char *src, size_t n, size_t i, const char *word, char *sign_l,
                      char *sign_r)
{
    size_t j = i + 2;
    *sign_l = 0;
    *sign_r = 0;
    if (j < n && (src[j] == '-' || src[j] == '+'))
        *sign_l = src[j++];
    while (j < n && is_ws(src[j]))
        j++;
    size_t wl = strlen(word);
    if (j + wl > n || strncmp(src + j, word, wl))
        return 0;
    j += wl;
    if (j < n && (is_alpha(src[j]) || is_digit(src[j])))
        return 0;
    while (j < n && is_ws(src[j]))
        j++;
    if (j < n && (src[j] == '-' || src[j] == '+'))
        *sign_r = src[j++];
    if (j + 2 > n || strncmp(src + j, "%}", 2))
        return 0;
    return j + 2 - i;
}

void tm_lex(struct tm_state *s, const char *src0, size_t n0)
{
    size_t n;
    const char *src = normalise(s, src0, n0, &n);
    size_t i = 0, text_st = 0;
    int line = 1, text_line = 1;
    bool line_starting = true;
    while (i < n) {
        if (src[i] != '{' || i + 1 >= n || (src[i + 1] != '{' && src[i + 1] != '%' && src[i + 1] != '#')) {
            if (src[i] == '\n')
                line++;
            i++;
            continue;
        }
        char kind = src[i + 1];
        char sign = (i + 2 < n && (src[i + 2] == '-' || src[i + 2] == '+')) ? src[i + 2] : 0;
        if (kind == '{' && sign == '+')
            sign = 0;
        char rl, rr;
        size_t rawlen = kind == '%' ? raw_tag(src, n, i, "raw", &rl, &rr) : 0;
        emit_text(s, src + text_st, i - text_st, text_line, kind == '%' && rawlen ? rl : sign,
                  kind != '{', line_starting);
        if (rawlen) {
            i += rawlen;
            if (rr == '-')
                while (i < n && is_ws(src[i])) {
                    if (src[i] == '\n')
                        line++;
                    i++;
                }
            size_t st = i;
            int st_line = line;
            size_t endlen = 0;
            char el = 0, er = 0;
            while (i < n) {
                if (src[i] == '{' && i + 1 < n && src[i + 1] == '%' &&
                    (endlen = raw_tag(src, n, i, "endraw", &el, &er)))
                    break;
                if (src[i] == '\n')
                    line++;
                i++;
            }
            if (i >= n) {
                s->line = st_line;
                tm_fail(s, "missing endraw");
            }
            emit_text(s, src + st, i - st, st_line, el, true, false);
            i += endlen;
            line_starting = false;
            if (er == '-') {
                while (i < n && is_ws(src[i])) {
                    if (src[i] == '\n')
                        line++;
                    line_starting = src[i] == '\n';
                    i++;
                }
            } else if (er != '+' && i < n && src[i] == '\n') {
                line++;
                i++;
                line_starting = true;
            }
        } else if (kind == '#') {
            size_t j = i + 2;
            while (j + 1 < n && !(src[j] == '#' && src[j + 1] == '}'))
                j++;
            if (j + 1 >= n) {
                s->line = line;
                tm_fail(s, "missing end of comment tag");
            }
            line += count_lines(src + i, j - i);
            bool minus = src[j - 1] == '-' && j - 1 >= i + 2;
            bool plus = src[j - 1] == '+' && j - 1 >= i + 2;
            i = j + 2;
            line_starting = false;
            if (minus) {
                while (i < n && is_ws(src[i])) {
                    if (src[i] == '\n')
                        line++;
                    line_starting = src[i] == '\n';
                    i++;
                }
            } else if (!plus && i < n && src[i] == '\n') {
                line++;
                i++;
                line_starting = true;
            }
        } else {
            struct tm_token t = {.type = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, .line = line};
            push(s, t);
            i += sign ? 3 : 2;
            lex_tag(s, src, n, &i, &line, kind == '{' ? 'v' : 'b', &line_starting);
        }
        text_st = i;
        text_line = line;
    }
    emit_text(s, src + text_st, n - text_st, text_line, 0, false, line_starting);
    struct tm_token t = {.type = T_EOF, .line = line};
    push(s, t);
}

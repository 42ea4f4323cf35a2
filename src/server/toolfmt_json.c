/*
 * toolfmt_json.c - the JSON pieces of the tool-call parsers (toolfmt.h):
 * an incremental JSON value scanner, a string decoder, the call-object
 * reader ({"name", "arguments"} and arrays of them, byte by byte, the
 * arguments passed on as they come) and the conversion of Llama 3.1's
 * built-in tool calls (name.call(k=v)) into JSON arguments.
 */
#include <string.h>

#include "server/toolfmt.h"

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* ---------------------------------------------------------------------- */
/* the value scanner */

enum { J_VAL, J_STR, J_ESC, J_U, J_NUM, J_LIT, J_AFTER, J_KEY, J_KEY2, J_COLON };

void tf_jscan_init(struct tf_jscan *j) { memset(j, 0, sizeof(*j)); }

static enum tf_js value_done(struct tf_jscan *j) {
    if (j->depth == 0) return TF_JS_END;
    j->st = J_AFTER;
    return TF_JS_MORE;
}

static bool num_can_end(int nst) { return nst == 1 || nst == 2 || nst == 4 || nst == 7; }

enum tf_js tf_jscan_byte(struct tf_jscan *j, unsigned char c) {
    switch (j->st) {
    case J_VAL:
        if (is_ws(c)) return TF_JS_MORE;
        if (c == '{' || c == '[') {
            if (j->depth >= (int)sizeof(j->stack)) return TF_JS_ERR;
            j->stack[j->depth++] = c;
            j->st = c == '{' ? J_KEY : J_VAL;
            if (c == '[') j->nst = -1; /* an empty array may close at once */
            return TF_JS_MORE;
        }
        if (c == ']' && j->nst == -1 && j->depth > 0 && j->stack[j->depth - 1] == '[') {
            j->nst = 0;
            j->depth--;
            return value_done(j);
        }
        j->nst = 0;
        if (c == '"') {
            j->st = J_STR;
            j->lit = 0;
            return TF_JS_MORE;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            j->st = J_NUM;
            j->nst = c == '-' ? 0 : c == '0' ? 2 : 1;
            return TF_JS_MORE;
        }
        if (c == 't' || c == 'f' || c == 'n') {
            j->st = J_LIT;
            j->litc = (char)c;
            j->lit = 1;
            return TF_JS_MORE;
        }
        return TF_JS_ERR;
    case J_STR:
        if (c == '"') {
            if (j->lit) { /* a key */
                j->st = J_COLON;
                return TF_JS_MORE;
            }
            return value_done(j);
        }
        if (c == '\\') j->st = J_ESC;
        else if (c < 0x20) return TF_JS_ERR;
        return TF_JS_MORE;
    case J_ESC:
        if (c == 'u') {
            j->st = J_U;
            j->uleft = 4;
            return TF_JS_MORE;
        }
        if (!strchr("\"\\/bfnrt", c) || !c) return TF_JS_ERR;
        j->st = J_STR;
        return TF_JS_MORE;
    case J_U: {
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (!hex) return TF_JS_ERR;
        if (--j->uleft == 0) j->st = J_STR;
        return TF_JS_MORE;
    }
    case J_NUM: {
        int s = j->nst;
        if (c >= '0' && c <= '9') {
            if (s == 0) j->nst = c == '0' ? 2 : 1;
            else if (s == 2) return TF_JS_ERR; /* a leading zero */
            else if (s == 3) j->nst = 4;
            else if (s == 5 || s == 6) j->nst = 7;
            return TF_JS_MORE;
        }
        if (c == '.' && (s == 1 || s == 2)) {
            j->nst = 3;
            return TF_JS_MORE;
        }
        if ((c == 'e' || c == 'E') && (s == 1 || s == 2 || s == 4)) {
            j->nst = 5;
            return TF_JS_MORE;
        }
        if ((c == '+' || c == '-') && s == 5) {
            j->nst = 6;
            return TF_JS_MORE;
        }
        if (!num_can_end(s)) return TF_JS_ERR;
        if (j->depth == 0) return TF_JS_END_PB;
        j->st = J_AFTER;
        return tf_jscan_byte(j, c);
    }
    case J_LIT: {
        const char *w = j->litc == 't' ? "true" : j->litc == 'f' ? "false" : "null";
        if (c != (unsigned char)w[j->lit]) return TF_JS_ERR;
        if (!w[++j->lit]) {
            j->lit = 0;
            return value_done(j);
        }
        return TF_JS_MORE;
    }
    case J_AFTER: {
        if (is_ws(c)) return TF_JS_MORE;
        unsigned char top = j->stack[j->depth - 1];
        if (c == ',') {
            j->st = top == '{' ? J_KEY2 : J_VAL;
            return TF_JS_MORE;
        }
        if ((c == '}' && top == '{') || (c == ']' && top == '[')) {
            j->depth--;
            return value_done(j);
        }
        return TF_JS_ERR;
    }
    case J_KEY:
    case J_KEY2:
        if (is_ws(c)) return TF_JS_MORE;
        if (c == '"') {
            j->st = J_STR;
            j->lit = 1;
            return TF_JS_MORE;
        }
        if (c == '}' && j->st == J_KEY) {
            j->depth--;
            return value_done(j);
        }
        return TF_JS_ERR;
    case J_COLON:
        if (is_ws(c)) return TF_JS_MORE;
        if (c != ':') return TF_JS_ERR;
        j->st = J_VAL;
        j->lit = 0;
        return TF_JS_MORE;
    }
    return TF_JS_ERR;
}

/* ---------------------------------------------------------------------- */
/* the string decoder */

void tf_strdec_init(struct tf_strdec *d) { memset(d, 0, sizeof(*d)); }

static void put_cp(struct sbuf *b, unsigned cp) {
    char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    sb_put(b, t, n);
}

enum tf_sd tf_strdec_byte(struct tf_strdec *d, unsigned char c, struct sbuf *out) {
    if (d->st == 0) {
        if (c == '"') {
            if (d->hi) put_cp(out, 0xFFFD);
            d->hi = 0;
            return TF_SD_END;
        }
        if (c < 0x20) return TF_SD_ERR;
        if (c == '\\') {
            d->st = 1;
            return TF_SD_MORE;
        }
        if (d->hi) put_cp(out, 0xFFFD);
        d->hi = 0;
        char ch = (char)c;
        sb_put(out, &ch, 1);
        return TF_SD_MORE;
    }
    if (d->st == 1) {
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        if (c == 'u') {
            d->st = 2;
            d->uleft = 4;
            d->u = 0;
            return TF_SD_MORE;
        }
        const char *k = c ? strchr(from, c) : NULL;
        if (!k) return TF_SD_ERR;
        if (d->hi) put_cp(out, 0xFFFD);
        d->hi = 0;
        sb_put(out, to + (k - from), 1);
        d->st = 0;
        return TF_SD_MORE;
    }
    unsigned v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else return TF_SD_ERR;
    d->u = d->u * 16 + v;
    if (--d->uleft) return TF_SD_MORE;
    d->st = 0;
    unsigned u = d->u;
    if (u >= 0xD800 && u < 0xDC00) {
        if (d->hi) put_cp(out, 0xFFFD);
        d->hi = u;
    } else if (u >= 0xDC00 && u < 0xE000) {
        if (d->hi) put_cp(out, 0x10000 + ((d->hi - 0xD800) << 10) + (u - 0xDC00));
        else put_cp(out, 0xFFFD);
        d->hi = 0;
    } else {
        if (d->hi) put_cp(out, 0xFFFD);
        d->hi = 0;
        put_cp(out, u);
    }
    return TF_SD_MORE;
}

/* ---------------------------------------------------------------------- */
/* the call object */

enum {
    O_START,     /* before '{' (or '[' when an array may come) */
    O_KEY_FIRST, /* after '{': a key or '}' */
    O_KEY_NEXT,  /* after ',': a key */
    O_KEY,       /* in a key */
    O_COLON,
    O_VAL,       /* before a value */
    O_NAME,      /* in the name string */
    O_ARGS,      /* in the arguments (raw JSON) */
    O_ARGS_STR,  /* in the arguments given as a string */
    O_SKIP,      /* in another key's value */
    O_AFTER,     /* after a value: ',' or '}' */
    O_ARR_AFTER, /* after an object in the array: ',' or ']' */
    O_ARR_FIRST, /* after '[': an object or ']' */
};

void tf_cobj_init(struct tf_cobj *o, const struct tf_cobj_ops *ops, void *u, bool array_ok) {
    memset(o, 0, sizeof(*o));
    o->ops = ops;
    o->u = u;
    o->array = array_ok;
    sb_init(&o->key);
    sb_init(&o->name);
    sb_init(&o->abuf);
}

void tf_cobj_free(struct tf_cobj *o) {
    sb_free(&o->key);
    sb_free(&o->name);
    sb_free(&o->abuf);
}

bool tf_cobj_open(const struct tf_cobj *o) { return o->named; }

static void obj_reset(struct tf_cobj *o) {
    o->named = o->had_args = o->args_str = false;
    o->which = 0;
    sb_clear(&o->key);
    sb_clear(&o->name);
    sb_clear(&o->abuf);
}

static void obj_args(struct tf_cobj *o, const char *s, size_t n) {
    if (o->named) o->ops->args(o->u, s, n);
    else sb_put(&o->abuf, s, n);
}

/* the object closed: false when it was not a call */
static bool obj_close(struct tf_cobj *o) {
    if (!o->named) return false;
    if (!o->had_args) o->ops->args(o->u, "{}", 2);
    o->ops->end(o->u);
    obj_reset(o);
    return true;
}

/* the name string is whole */
static bool obj_named(struct tf_cobj *o) {
    if (o->named || o->name.oom || !o->ops->begin(o->u, o->name.len ? o->name.p : ""))
        return false;
    o->named = true;
    if (o->abuf.len) o->ops->args(o->u, o->abuf.p, o->abuf.len);
    sb_clear(&o->abuf);
    return true;
}

enum tf_co tf_cobj_byte(struct tf_cobj *o, unsigned char c) {
    switch (o->st) {
    case O_START:
        if (is_ws(c)) return TF_CO_MORE;
        if (c == '[' && o->array && !o->in_array) {
            o->in_array = true;
            o->st = O_ARR_FIRST;
            return TF_CO_MORE;
        }
        if (c != '{') return TF_CO_ERR;
        obj_reset(o);
        o->st = O_KEY_FIRST;
        return TF_CO_MORE;
    case O_ARR_FIRST:
        if (is_ws(c)) return TF_CO_MORE;
        if (c == ']') return TF_CO_END;
        o->st = O_START;
        return tf_cobj_byte(o, c);
    case O_KEY_FIRST:
    case O_KEY_NEXT:
        if (is_ws(c)) return TF_CO_MORE;
        if (c == '}' && o->st == O_KEY_FIRST) {
            if (!obj_close(o)) return TF_CO_ERR;
            if (o->in_array) {
                o->st = O_ARR_AFTER;
                return TF_CO_MORE;
            }
            return TF_CO_END;
        }
        if (c != '"') return TF_CO_ERR;
        sb_clear(&o->key);
        tf_strdec_init(&o->sd);
        o->st = O_KEY;
        return TF_CO_MORE;
    case O_KEY: {
        enum tf_sd r = tf_strdec_byte(&o->sd, c, &o->key);
        if (r == TF_SD_ERR || o->key.len > 64) return TF_CO_ERR;
        if (r == TF_SD_END) {
            const char *k = o->key.len ? o->key.p : "";
            o->which = (!strcmp(k, "name") || !strcmp(k, "tool_name") || !strcmp(k, "function"))
                           ? 1
                       : (!strcmp(k, "arguments") || !strcmp(k, "parameters")) ? 2
                                                                                 : 0;
            o->st = O_COLON;
        }
        return TF_CO_MORE;
    }
    case O_COLON:
        if (is_ws(c)) return TF_CO_MORE;
        if (c != ':') return TF_CO_ERR;
        o->st = O_VAL;
        return TF_CO_MORE;
    case O_VAL:
        if (is_ws(c)) return TF_CO_MORE;
        if (o->which == 1 && !o->named && c == '"') {
            sb_clear(&o->name);
            tf_strdec_init(&o->sd);
            o->st = O_NAME;
            return TF_CO_MORE;
        }
        if (o->which == 2 && !o->had_args) {
            o->had_args = true;
            if (c == '"') {
                o->args_str = true;
                sb_clear(&o->key);
                tf_strdec_init(&o->sd);
                o->st = O_ARGS_STR;
                return TF_CO_MORE;
            }
            if (c != '{') return TF_CO_ERR;
            tf_jscan_init(&o->js);
            o->st = O_ARGS;
            return tf_cobj_byte(o, c);
        }
        if (o->which == 1) return TF_CO_ERR; /* a second or non-string name */
        tf_jscan_init(&o->js);
        o->st = O_SKIP;
        return tf_cobj_byte(o, c);
    case O_NAME: {
        enum tf_sd r = tf_strdec_byte(&o->sd, c, &o->name);
        if (r == TF_SD_ERR || o->name.len > SRV_TOOL_NAME_MAX) return TF_CO_ERR;
        if (r == TF_SD_END) {
            if (!obj_named(o)) return TF_CO_ERR;
            o->st = O_AFTER;
        }
        return TF_CO_MORE;
    }
    case O_ARGS: {
        enum tf_js r = tf_jscan_byte(&o->js, c);
        if (r == TF_JS_ERR || r == TF_JS_END_PB) return TF_CO_ERR;
        char ch = (char)c;
        obj_args(o, &ch, 1);
        if (r == TF_JS_END) o->st = O_AFTER;
        return TF_CO_MORE;
    }
    case O_ARGS_STR: {
        enum tf_sd r = tf_strdec_byte(&o->sd, c, &o->key);
        if (r == TF_SD_ERR || o->key.oom) return TF_CO_ERR;
        if (r == TF_SD_END) {
            /* arguments given as a JSON string: the decoded text when it
             * is a JSON object, else {} (they cannot be anything else) */
            struct tf_jscan j;
            tf_jscan_init(&j);
            size_t i = 0, n = o->key.len;
            enum tf_js jr = TF_JS_MORE;
            while (i < n && is_ws((unsigned char)o->key.p[i])) i++;
            bool ok = i < n && o->key.p[i] == '{';
            for (; ok && i < n && jr == TF_JS_MORE; i++) jr = tf_jscan_byte(&j, (unsigned char)o->key.p[i]);
            while (ok && i < n && is_ws((unsigned char)o->key.p[i])) i++;
            if (ok && jr == TF_JS_END && i == n) obj_args(o, o->key.p, n);
            else obj_args(o, "{}", 2);
            sb_clear(&o->key);
            o->st = O_AFTER;
        }
        return TF_CO_MORE;
    }
    case O_SKIP: {
        enum tf_js r = tf_jscan_byte(&o->js, c);
        if (r == TF_JS_ERR) return TF_CO_ERR;
        if (r == TF_JS_END) o->st = O_AFTER;
        if (r == TF_JS_END_PB) {
            o->st = O_AFTER;
            return tf_cobj_byte(o, c);
        }
        return TF_CO_MORE;
    }
    case O_AFTER:
        if (is_ws(c)) return TF_CO_MORE;
        if (c == ',') {
            o->st = O_KEY_NEXT;
            return TF_CO_MORE;
        }
        if (c != '}') return TF_CO_ERR;
        if (!obj_close(o)) return TF_CO_ERR;
        if (o->in_array) {
            o->st = O_ARR_AFTER;
            return TF_CO_MORE;
        }
        return TF_CO_END;
    case O_ARR_AFTER:
        if (is_ws(c)) return TF_CO_MORE;
        if (c == ',') {
            o->st = O_START;
            return TF_CO_MORE;
        }
        if (c == ']') return TF_CO_END;
        return TF_CO_ERR;
    }
    return TF_CO_ERR;
}

/* ---------------------------------------------------------------------- */
/* names and Python-style calls */

bool tf_name_ok(const char *s, size_t n) {
    if (n == 0 || n > SRV_TOOL_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-' || c == '.' || c == ':';
        if (!ok) return false;
    }
    return true;
}

static bool ident_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool tf_pycall_to_json(const char *s, size_t n, struct sbuf *name, struct sbuf *args) {
    size_t i = 0;
    while (i < n && is_ws((unsigned char)s[i])) i++;
    size_t a = i;
    while (i < n && ident_char((unsigned char)s[i])) i++;
    if (i == a || n - i < 7 || memcmp(s + i, ".call(", 6)) return false;
    sb_clear(name);
    sb_put(name, s + a, i - a);
    i += 6;
    sb_clear(args);
    sb_puts(args, "{");
    bool first = true;
    for (;;) {
        while (i < n && is_ws((unsigned char)s[i])) i++;
        if (i < n && s[i] == ')') {
            i++;
            break;
        }
        if (!first) {
            if (i >= n || s[i] != ',') return false;
            i++;
            while (i < n && is_ws((unsigned char)s[i])) i++;
            if (i < n && s[i] == ')') {
                i++;
                break;
            }
        }
        size_t k = i;
        while (i < n && ident_char((unsigned char)s[i])) i++;
        if (i == k) return false;
        size_t ke = i;
        while (i < n && is_ws((unsigned char)s[i])) i++;
        if (i >= n || s[i] != '=') return false;
        i++;
        while (i < n && is_ws((unsigned char)s[i])) i++;
        if (!first) sb_puts(args, ",");
        first = false;
        sb_json_str(args, s + k, ke - k);
        sb_puts(args, ":");
        if (i < n && (s[i] == '"' || s[i] == '\'')) { /* a Python string */
            char q = s[i++];
            struct sbuf v;
            sb_init(&v);
            bool closed = false;
            while (i < n) {
                char ch = s[i++];
                if (ch == q) {
                    closed = true;
                    break;
                }
                if (ch == '\\' && i < n) {
                    char e = s[i++];
                    ch = e == 'n' ? '\n' : e == 't' ? '\t' : e;
                }
                sb_put(&v, &ch, 1);
            }
            if (!closed) {
                sb_free(&v);
                return false;
            }
            sb_json_str(args, v.len ? v.p : "", v.len);
            sb_free(&v);
        } else { /* a number, True/False/None */
            size_t v = i;
            while (i < n && s[i] != ',' && s[i] != ')' && !is_ws((unsigned char)s[i])) i++;
            size_t vn = i - v;
            if (vn == 4 && !memcmp(s + v, "True", 4)) sb_puts(args, "true");
            else if (vn == 5 && !memcmp(s + v, "False", 5)) sb_puts(args, "false");
            else if (vn == 4 && !memcmp(s + v, "None", 4)) sb_puts(args, "null");
            else {
                struct tf_jscan j;
                tf_jscan_init(&j);
                enum tf_js r = TF_JS_MORE;
                for (size_t t = v; t < i && r == TF_JS_MORE; t++) r = tf_jscan_byte(&j, (unsigned char)s[t]);
                if (vn == 0 || (r != TF_JS_MORE && r != TF_JS_END) || s[v] == '"' || s[v] == '{' ||
                    s[v] == '[' || (r == TF_JS_MORE && tf_jscan_byte(&j, ' ') != TF_JS_END_PB))
                    return false;
                sb_put(args, s + v, vn);
            }
        }
    }
    while (i < n && is_ws((unsigned char)s[i])) i++;
    sb_puts(args, "}");
    return i == n && !args->oom && !name->oom;
}

/*
 * numrange.c - JSON Schema minimum/maximum as digit automata.
 *
 * Integers in [lo, hi]: the classic range-to-regex construction. Split by
 * digit count (so no leading zeros), and within one length, a range of
 * equal-length digit strings [x, y] is: the common first digit then the
 * rest, or x's first digit with "at least x's rest", the digits strictly
 * between with anything, and y's first digit with "at most y's rest". A
 * side that is all 0s or all 9s is "any digits", which keeps the result
 * linear in the length. Negative values are "-" and a magnitude range;
 * "-0" is never produced.
 *
 * Numbers in [lo, hi] (each bound inclusive or exclusive): by sign, then by
 * integer part: the lower bound's integer part with a fraction above the
 * bound's fraction, the integer parts strictly between with any fraction,
 * the upper bound's integer part with a fraction below. Fractions are
 * compared digit by digit as decimal fractions (a missing digit is 0, so
 * "5" = "50"): build() walks the fraction positions keeping "still equal
 * to the lower / upper bound so far" flags; once neither is tight any
 * digits follow. No exponent is produced, and a number with a fraction has
 * at most 15 digits in all: then it and the bound (also at most 15
 * significant digits) convert to doubles that compare exactly as the
 * decimals do, which is what a validator in any language will check.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/cn_int.h"

#define NUM_DIGITS 15

static uint32_t digit_range(struct cn_ir *g, int lo, int hi) {
    return ir_byte_range(g, (uint8_t)('0' + lo), (uint8_t)('0' + hi));
}

static uint32_t digits(struct cn_ir *g, int min, int max) {
    return ir_rep(g, digit_range(g, 0, 9), min, max);
}

static bool all_char(const char *s, int n, char c) {
    for (int i = 0; i < n; i++)
        if (s[i] != c) return false;
    return true;
}

/* equal-length digit strings s with x <= s <= y (x <= y, length n) */
static uint32_t fixed_range(struct cn_ir *g, const char *x, const char *y, int n) {
    if (n == 0) return ir_empty(g);
    if (all_char(x, n, '0') && all_char(y, n, '9')) return digits(g, n, n);
    if (x[0] == y[0]) return ir_seq2(g, ir_byte(g, (uint8_t)x[0]), fixed_range(g, x + 1, y + 1, n - 1));
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    uint32_t k[3];
    uint32_t m = 0;
    k[m++] = ir_seq2(g, ir_byte(g, (uint8_t)x[0]), fixed_range(g, x + 1, nines, n - 1));
    if (y[0] - x[0] >= 2)
        k[m++] = ir_seq2(g, digit_range(g, x[0] - '0' + 1, y[0] - '0' - 1), digits(g, n - 1, n - 1));
    k[m++] = ir_seq2(g, ir_byte(g, (uint8_t)y[0]), fixed_range(g, zeros, y + 1, n - 1));
    return ir_alt(g, k, m);
}

static int ndigits(uint64_t v) {
    int n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static uint64_t pow10u(int n) {
    uint64_t p = 1;
    while (n-- > 0) p *= 10;
    return p;
}

/* What follows an integer part of L digits (numbers: a fraction). */
typedef uint32_t (*suffix_fn)(struct cn_ir *g, int L, const void *ctx);

/* Unsigned integers in [a, b] (b_inf: unbounded, up to max_digits digits),
 * each followed by suffix(L) when given. */
static uint32_t uint_range(struct cn_ir *g, uint64_t a, bool b_inf, uint64_t b, int max_digits,
                           suffix_fn suffix, const void *ctx) {
    struct ir_list l = {0};
    int la = ndigits(a), lb = b_inf ? max_digits : ndigits(b);
    for (int L = la; L <= lb && ir_ok(g); L++) {
        uint64_t lo = L == la ? a : pow10u(L - 1);
        uint64_t hi = (!b_inf && L == lb) ? b : pow10u(L) - 1;
        if (lo > hi) continue;
        if (b_inf && !suffix && L > la) {
            /* every longer length at once: [1-9][0-9]{la, max-1} */
            ir_list_push(g, &l, ir_seq2(g, digit_range(g, 1, 9), digits(g, la, max_digits - 1)));
            break;
        }
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%0*llu", L, (unsigned long long)lo);
        snprintf(ys, sizeof ys, "%0*llu", L, (unsigned long long)hi);
        uint32_t body = fixed_range(g, xs, ys, L);
        if (suffix) body = ir_seq2(g, body, suffix(g, L, ctx));
        ir_list_push(g, &l, body);
    }
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

uint32_t ir_int_range(struct cn_ir *g, bool lo_set, int64_t lo, bool hi_set, int64_t hi,
                      int max_digits) {
    uint32_t k[2];
    uint32_t m = 0;
    if (lo_set && hi_set && lo > hi) return ir_none(g);
    if (!hi_set || hi >= 0) {
        uint64_t a = lo_set && lo > 0 ? (uint64_t)lo : 0;
        k[m++] = uint_range(g, a, !hi_set, hi_set ? (uint64_t)hi : 0, max_digits, NULL, NULL);
    }
    if (!lo_set || lo < 0) {
        /* magnitudes of the negative values: [max(1, -hi), -lo] */
        uint64_t mlo = hi_set && hi < -1 ? (uint64_t)0 - (uint64_t)hi : 1;
        uint64_t mhi = lo_set ? (uint64_t)0 - (uint64_t)lo : 0;
        if (!lo_set || mlo <= mhi)
            k[m++] = ir_seq2(g, ir_byte(g, '-'),
                             uint_range(g, mlo, !lo_set, mhi, max_digits, NULL, NULL));
    }
    return ir_alt(g, k, m);
}

/* ---------------------------------------------------------------------- */
/* decimal bounds */

bool dec_from_double(double v, bool excl, struct dec_bound *out) {
    if (!isfinite(v)) return false;
    double a = fabs(v);
    if (a >= 1e15) return false;
    char buf[64];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, a);
        if (strtod(buf, NULL) == a) break;
    }
    if (p > 17) return false;
    /* buf = d[.ddd]e[+-]XX */
    char dig[24];
    int nd = 0;
    const char *c = buf;
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9' && nd < 20) dig[nd++] = *c;
    int e = *c == 'e' ? atoi(c + 1) : 0;
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    if (nd > NUM_DIGITS) return false;
    memset(out, 0, sizeof *out);
    out->set = true;
    out->excl = excl;
    /* value = 0.dig * 10^(e+1): the point sits after e+1 digits */
    int point = e + 1;
    char ip[40], fp[40];
    int ni = 0, nf = 0;
    if (point <= 0) {
        ip[ni++] = '0';
        for (int i = 0; i < -point; i++) fp[nf++] = '0';
        for (int i = 0; i < nd; i++) fp[nf++] = dig[i];
    } else {
        for (int i = 0; i < point; i++) ip[ni++] = i < nd ? dig[i] : '0';
        for (int i = point; i < nd; i++) fp[nf++] = dig[i];
    }
    while (nf > 0 && fp[nf - 1] == '0') nf--;
    int lead = 0;
    while (lead < ni - 1 && ip[lead] == '0') lead++;
    ni -= lead;
    memmove(ip, ip + lead, (size_t)ni);
    if (ni + nf > NUM_DIGITS || ni >= (int)sizeof out->ip || nf >= (int)sizeof out->fp)
        return false;
    memcpy(out->ip, ip, (size_t)ni);
    out->ip[ni] = 0;
    memcpy(out->fp, fp, (size_t)nf);
    out->fp[nf] = 0;
    out->neg = v < 0 && !(ni == 1 && ip[0] == '0' && nf == 0);
    return true;
}

/* compare magnitudes (integer digits without leading zeros, fraction
 * digits; a missing fraction digit is 0) */
static int mag_cmp(const char *aip, const char *afp, const char *bip, const char *bfp) {
    size_t la = strlen(aip), lb = strlen(bip);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(aip, bip);
    if (c) return c < 0 ? -1 : 1;
    size_t fa = strlen(afp), fb = strlen(bfp), n = fa > fb ? fa : fb;
    for (size_t i = 0; i < n; i++) {
        char x = i < fa ? afp[i] : '0', y = i < fb ? bfp[i] : '0';
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

/* Fraction digit strings F (k >= |F|, F may be empty: no fraction) with
 * lo <(=) 0.F <(=) hi; lo NULL means 0 inclusive, hi NULL no upper bound. */
struct frac {
    const char *lo, *hi;
    bool lo_excl, hi_excl;
    int k;
};

/* Suffixes of F from fraction position i (i digits emitted, all equal to
 * the lower bound's when tlo, to the upper's when thi). allow_end: F may
 * stop here (false at position 0: a "." needs a digit). */
static uint32_t frac_tail(struct cn_ir *g, const struct frac *f, int i, bool tlo, bool thi,
                          bool allow_end) {
    int llo = f->lo ? (int)strlen(f->lo) : 0, lhi = f->hi ? (int)strlen(f->hi) : 0;
    if (!tlo && !thi) return digits(g, allow_end ? 0 : 1, f->k - i);
    /* ending here makes F equal to the tight bound's prefix, padded with 0s */
    bool end_ok = allow_end;
    if (tlo) end_ok &= llo <= i && !f->lo_excl;
    if (thi) end_ok &= lhi > i || !f->hi_excl;
    struct ir_list l = {0};
    if (end_ok) ir_list_push(g, &l, ir_empty(g));
    if (i < f->k) {
        int dlo = tlo && i < llo ? f->lo[i] - '0' : 0;
        int dhi = thi ? (i < lhi ? f->hi[i] - '0' : 0) : 9;
        for (int c = dlo; c <= dhi && ir_ok(g);) {
            bool nlo = tlo && c == dlo, nhi = thi && c == dhi;
            int e = c;
            if (!nlo && !nhi) e = thi ? dhi - 1 : 9; /* a run of free digits */
            ir_list_push(g, &l, ir_seq2(g, digit_range(g, c, e),
                                        frac_tail(g, f, i + 1, nlo, nhi, true)));
            c = e + 1;
        }
    }
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

/* ("." F)? for the F of f */
static uint32_t frac_part(struct cn_ir *g, const struct frac *f) {
    bool lo_zero = !f->lo || !f->lo[0];
    bool hi_zero = f->hi && !f->hi[0];
    /* no fraction at all: the fraction is 0 */
    bool empty_ok = lo_zero && !f->lo_excl && !(hi_zero && f->hi_excl);
    struct ir_list l = {0};
    if (empty_ok) ir_list_push(g, &l, ir_empty(g));
    if (f->k >= 1) {
        bool tlo = !lo_zero || f->lo_excl, thi = f->hi != NULL;
        ir_list_push(g, &l, ir_seq2(g, ir_byte(g, '.'), frac_tail(g, f, 0, tlo, thi, false)));
    }
    uint32_t r = ir_alt(g, l.v, l.n);
    ir_list_free(&l);
    return r;
}

static uint32_t frac_any(struct cn_ir *g, int L, const void *ctx) {
    (void)ctx;
    int k = NUM_DIGITS - L;
    if (k < 1) return ir_empty(g);
    return ir_opt(g, ir_seq2(g, ir_byte(g, '.'), digits(g, 1, k)));
}

/* magnitudes m with A <(=) m <(=) B (B NULL: unbounded) */
static uint32_t mag_range(struct cn_ir *g, const char *aip, const char *afp, bool a_excl,
                          const char *bip, const char *bfp, bool b_excl) {
    if (bip) {
        int c = mag_cmp(aip, afp, bip, bfp);
        if (c > 0 || (c == 0 && (a_excl || b_excl))) return ir_none(g);
    }
    uint64_t ai = strtoull(aip, NULL, 10);
    int la = (int)strlen(aip);
    if (bip && !strcmp(aip, bip)) {
        struct frac f = {afp, bfp, a_excl, b_excl, NUM_DIGITS - la};
        return ir_seq2(g, ir_str(g, aip), frac_part(g, &f));
    }
    uint32_t k[3];
    uint32_t m = 0;
    struct frac fa = {afp, NULL, a_excl, false, NUM_DIGITS - la};
    k[m++] = ir_seq2(g, ir_str(g, aip), frac_part(g, &fa));
    if (bip) {
        uint64_t bi = strtoull(bip, NULL, 10);
        if (bi >= ai + 2) k[m++] = uint_range(g, ai + 1, false, bi - 1, NUM_DIGITS, frac_any, NULL);
        struct frac fb = {NULL, bfp, false, b_excl, NUM_DIGITS - (int)strlen(bip)};
        k[m++] = ir_seq2(g, ir_str(g, bip), frac_part(g, &fb));
    } else if (la < NUM_DIGITS || ai + 1 < pow10u(NUM_DIGITS)) {
        k[m++] = uint_range(g, ai + 1, false, pow10u(NUM_DIGITS) - 1, NUM_DIGITS, frac_any, NULL);
    }
    return ir_alt(g, k, m);
}

uint32_t ir_num_range(struct cn_ir *g, const struct dec_bound *lo, const struct dec_bound *hi) {
    uint32_t k[2];
    uint32_t m = 0;
    /* x >= 0 */
    bool hi_neg = hi->set && hi->neg;
    bool hi_zero = hi->set && !hi->neg && !strcmp(hi->ip, "0") && !hi->fp[0];
    if (!hi_neg && !(hi_zero && hi->excl)) {
        bool lo_pos = lo->set && !lo->neg;
        k[m++] = mag_range(g, lo_pos ? lo->ip : "0", lo_pos ? lo->fp : "", lo_pos && lo->excl,
                           hi->set ? hi->ip : NULL, hi->set ? hi->fp : NULL, hi->set && hi->excl);
    }
    /* x < 0: x = -m with m > 0, m <(=) |lo|, m >(=) |hi| when hi < 0 */
    if (!lo->set || lo->neg) {
        uint32_t r;
        if (!lo->set) {
            r = hi_neg ? mag_range(g, hi->ip, hi->fp, hi->excl, NULL, NULL, false)
                       : mag_range(g, "0", "", true, NULL, NULL, false);
        } else {
            r = hi_neg ? mag_range(g, hi->ip, hi->fp, hi->excl, lo->ip, lo->fp, lo->excl)
                       : mag_range(g, "0", "", true, lo->ip, lo->fp, lo->excl);
        }
        k[m++] = ir_seq2(g, ir_byte(g, '-'), r);
    }
    return ir_alt(g, k, m);
}

/*
 * fail.c - the bottom of the template room: an error unwinds the render
 * with longjmp (tm_fail), and the step bound. Every other file of
 * src/tmpl calls these; they call nothing of the room's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>

#include "tmpl/tmpl_int.h"

_Noreturn void tm_fail(struct tm_state *s, const char *fmt, ...)
{
    if (s->err && s->err_cap) {
        int k = s->line > 0 ? snprintf(s->err, s->err_cap, "line %d: ", s->line) : 0;
        if (k < 0)
            k = 0;
        if ((size_t)k < s->err_cap) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(s->err + k, s->err_cap - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    longjmp(s->jb, 1);
}

_Noreturn void tm_oom(struct tm_state *s)
{
    s->oom = true;
    tm_fail(s, "out of memory");
}

void tm_step(struct tm_state *s)
{
    if (++s->steps > s->lim.max_steps)
        tm_fail(s, "template step limit (%llu) exceeded", (unsigned long long)s->lim.max_steps);
}


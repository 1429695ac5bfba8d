/*
 * proxy_repl.c: streaming replacement for secret interception: every
 * occurrence of any of a set of strings replaced in a stream that arrives
 * in pieces, a match split across pieces included (the last len-1 bytes
 * of a piece wait for the next one).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "proxy_repl.h"

/* Replace in held+in, pass on what can no longer be the start of a match;
 * final: pass on everything. */
int sbx_repl_feed(struct repl *r, const char *in, size_t n, bool final, out_fn out, void *ud)
{
	size_t wl = r->hlen + n, pos = 0;
	char *w = malloc(wl ? wl : 1);
	int rc = 0;

	if (!w)
		return -1;
	if (r->hlen)
		memcpy(w, r->held, r->hlen);
	if (n)
		memcpy(w + r->hlen, in, n);
	for (;;) {
		const char *best = NULL;
		size_t bi = 0;
		for (size_t i = 0; i < r->n; i++) {
			const char *m = memmem(w + pos, wl - pos, r->from[i], r->flen[i]);
			if (m && (!best || m < best)) {
				best = m;
				bi = i;
			}
		}
		if (!best)
			break;
		size_t at = (size_t)(best - w);
		if ((at > pos && out(ud, w + pos, at - pos) < 0) ||
		    out(ud, r->to[bi], r->tlen[bi]) < 0) {
			rc = -1;
			goto done;
		}
		pos = at + r->flen[bi];
	}
	size_t keep = final || r->maxf == 0 ? 0 : r->maxf - 1;
	if (keep > wl - pos)
		keep = wl - pos;
	if (wl - pos - keep > 0 && out(ud, w + pos, wl - pos - keep) < 0) {
		rc = -1;
		goto done;
	}
	if (r->held) /* both ways, one side of it is a value */
		explicit_bzero(r->held, r->hlen);
	free(r->held);
	r->held = NULL;
	r->hlen = keep;
	if (keep) {
		if (!(r->held = malloc(keep))) {
			rc = -1;
			goto done;
		}
		memcpy(r->held, w + wl - keep, keep);
	}
done:
	explicit_bzero(w, wl);
	free(w);
	return rc;
}

/*
 * proxy_repl.h: streaming replacement (proxy_repl.c), used by the secret
 * interception's HTTP relay (proxy_mitm_http.c): placeholder -> value on
 * the way out, value -> placeholder on the way back.
 */
#ifndef SBX_PROXY_REPL_H
#define SBX_PROXY_REPL_H

#include <stdbool.h>
#include <stddef.h>

#define SBX_REPL_MAX 64

struct repl {
	const char *from[SBX_REPL_MAX], *to[SBX_REPL_MAX];
	size_t flen[SBX_REPL_MAX], tlen[SBX_REPL_MAX], n;
	size_t maxf; /* the longest from: maxf - 1 bytes are held back */
	char *held;  /* owned; free it when done */
	size_t hlen;
};

typedef int (*out_fn)(void *ud, const char *b, size_t n);

/* Feed n bytes of in: what can no longer be the start of a match goes to
 * out (replaced), the rest is held; final: everything goes.  Returns 0, or
 * -1 when out fails or memory runs out. */
int sbx_repl_feed(struct repl *r, const char *in, size_t n, bool final, out_fn out, void *ud);

#endif

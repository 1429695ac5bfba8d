/*
 * sbx_proxy.h: the allow-list proxy of network_mode "allowlist".
 *
 * A session in allowlist mode has a network namespace with only `lo` and a
 * listening socket inside it (127.0.0.1:3128).  Its connections are served
 * here, on the host side: HTTP CONNECT, absolute-form HTTP forwarding and
 * SOCKS5.  The proxy never decides by itself: for every request it asks the
 * caller's decide function twice,
 *
 *   1. SBX_PROXY_NAME, with the host as the client spelled it, BEFORE any
 *      DNS lookup (a name that is not allowed never reaches a resolver);
 *      the verdict names what to resolve (the normalized name) or, for an IP
 *      literal in any spelling, the canonical address to dial;
 *   2. SBX_PROXY_ADDRS, with every address the name resolved to (or the
 *      literal), before dialing;
 *
 * and then dials exactly an address it checked (no second lookup, so DNS
 * rebinding gains nothing).  Refusals answer 403 (SOCKS5: reply 0x02) with
 * the verdict's reason, and are counted and logged.
 *
 * The proxy is loop-agnostic: it owns an epoll fd (sbx_proxy_fd) that is
 * readable whenever sbx_proxy_step has work, so sbxd puts it on h2o's loop
 * and an on-device host runs it in a loop of its own.  Name resolution runs
 * on worker threads (getaddrinfo blocks); everything else, decide included,
 * runs inside sbx_proxy_step on the caller's thread.  A decider may also
 * answer later (verdict.pending, then sbx_proxy_decided).
 */
#ifndef SBX_PROXY_H
#define SBX_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sbx.h"

typedef struct sbx_proxy sbx_proxy;

typedef enum sbx_proxy_phase {
	SBX_PROXY_NAME = 1,  /* before DNS: host and port only */
	SBX_PROXY_ADDRS = 2, /* after DNS: every address, before dialing */
} sbx_proxy_phase;

#define SBX_PROXY_MAX_ADDRS 16

typedef struct sbx_proxy_query {
	sbx_proxy_phase phase;
	const char *kind; /* "connect", "http" or "socks5" */
	const char *host; /* as the client sent it (IPv6 without brackets) */
	uint16_t port;
	/* SBX_PROXY_ADDRS: canonical text (inet_ntop) of every address the
	 * name resolved to, or of the literal; n_addrs >= 1. */
	const char *const *addrs;
	size_t n_addrs;
	void *tag;	 /* the tag of the listener the connection came in on */
	uint64_t ticket; /* names this question to sbx_proxy_decided */
} sbx_proxy_query;

typedef struct sbx_proxy_verdict {
	bool allow;	  /* false unless the decider says so */
	char reason[256]; /* why not, shown to the client and logged */
	/* SBX_PROXY_NAME, when allowed: exactly one of
	 *   literal: the canonical address (inet_pton-able) when the host is
	 *            an IP literal in any spelling: dialed without DNS;
	 *   resolve: the normalized name to look up.
	 * Both empty on an allowed verdict: refused as a decider bug. */
	char literal[64];
	char resolve[256];
	/* The decider answers later, with sbx_proxy_decided(q->ticket, ...)
	 * (a host whose policy runs elsewhere: sbxd).  The connection waits,
	 * reading nothing, until then or until header_timeout_ms passes
	 * (then it is refused). */
	bool pending;
} sbx_proxy_verdict;

/* Called from sbx_proxy_step.  v arrives zeroed (deny); the decider fills
 * it.  It must not call back into the proxy. */
typedef void (*sbx_proxy_decide_fn)(void *ud, const sbx_proxy_query *q, sbx_proxy_verdict *v);
/* One line per refusal and per failure to reach an allowed target. */
typedef void (*sbx_proxy_log_fn)(void *ud, const char *line);

typedef struct sbx_proxy_cfg {
	sbx_proxy_decide_fn decide;
	sbx_proxy_log_fn log;	     /* may be NULL */
	void *ud;		     /* passed to decide and log */
	uint32_t max_conns;	     /* client connections at once; 0: 1024 */
	uint32_t connect_timeout_ms; /* dialing one address; 0: 10000 */
	uint32_t header_timeout_ms;  /* a request's head must arrive within; 0: 30000 */
	uint32_t idle_timeout_ms;    /* a tunnel with no bytes either way; 0: 600000 */
	uint32_t resolver_threads;   /* 0: 4 */
} sbx_proxy_cfg;

typedef struct sbx_proxy_stats {
	uint64_t accepted;    /* client connections */
	uint64_t allowed;     /* requests let through (dialed) */
	uint64_t refused;     /* requests refused by a verdict */
	uint64_t failed;      /* allowed but unreachable, bad requests, timeouts */
	uint64_t active;      /* client connections open now */
	uint64_t bytes_up;    /* client -> target */
	uint64_t bytes_down;  /* target -> client */
	uint64_t intercepted; /* connections handed to secret interception */
} sbx_proxy_stats;

sbx_proxy *sbx_proxy_new(const sbx_proxy_cfg *cfg, sbx_err *err);
/* Serve a listening socket (the proxy takes the fd; it is made
 * non-blocking).  tag identifies it to decide and to remove. */
int sbx_proxy_add_listener(sbx_proxy *p, int listen_fd, void *tag, sbx_err *err);
/* Close the listeners with this tag and every connection that came in
 * through them. */
void sbx_proxy_remove(sbx_proxy *p, void *tag);
/* An epoll fd, readable when sbx_proxy_step has something to do. */
int sbx_proxy_fd(const sbx_proxy *p);
/* Handle what is ready, waiting up to timeout_ms (0: don't wait, -1:
 * forever) for something to be.  Returns 0, or -1 with err on a failure of
 * the proxy itself (not of a connection). */
int sbx_proxy_step(sbx_proxy *p, int timeout_ms, sbx_err *err);
/* The verdict on a question whose decide said pending.  Not from inside
 * decide (nor sbx_proxy_step).  Returns 0, or -1 when the connection is
 * gone meanwhile (nothing to do). */
int sbx_proxy_decided(sbx_proxy *p, uint64_t ticket, const sbx_proxy_verdict *v);
void sbx_proxy_get_stats(const sbx_proxy *p, sbx_proxy_stats *st);
/* Close everything, join the resolver threads, free.  Safe on NULL. */
void sbx_proxy_free(sbx_proxy *p);

#endif

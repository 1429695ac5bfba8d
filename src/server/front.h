/*
 * front.h: sbxd's front (front.c): it owns every client connection
 * (accept, TLS, connection budgets, timeouts) and hands h2o one end of a
 * socketpair, relaying bytes through the HTTP/2 guard (h2guard.h).
 */
#ifndef SBX_FRONT_H
#define SBX_FRONT_H

#include <stdio.h>

#include "h2guard.h"
#include "server.h"

typedef struct sbx_front_opts {
	sbx_h2g_limits lim;	     /* per connection (held_total set by the front) */
	uint32_t max_conns;	     /* 0: from RLIMIT_NOFILE */
	uint32_t max_conns_per_addr; /* 0: half of max_conns */
	uint32_t header_timeout_s;
	uint32_t idle_timeout_s;
	sbx_h2g_rate rst_shared; /* resets before an answer per tenant/source */
	uint32_t cooldown_s;	 /* a tenant/source that spent it is refused */
} sbx_front_opts;

/* Defaults, filled before the flags are parsed. */
extern sbx_front_opts sbx_front_o;
void sbx_front_defaults(sbx_front_opts *o);

/* Parse one of the front's flags (getopt long option name without "--");
 * returns 1 when it was one (bad set on a bad value), 0 when not. */
int sbx_front_flag(const char *name, const char *value, bool *bad);
/* "[--flag VALUE] ..." for the usage text. */
extern const char *const sbx_front_usage;

/* Start the front's thread serving listen_fd (listening, non-blocking;
 * taken); ssl_ctx: the TLS context or NULL.  h2o's ends of the
 * connections are handed to S's loop.  Call from the main thread once;
 * returns 0 or -1 with err filled. */
int sbx_front_start(sbx_srv *S, int listen_fd, void *ssl_ctx, sbx_err *err);
/* Stop accepting (drain); from the main thread. */
void sbx_front_stop(void);
/* Accept what is pending on the listener (its read callback). */
void sbx_front_on_accept(h2o_socket_t *listener, const char *err);
/* Prometheus lines of the front's counters and gauges (any thread). */
void sbx_front_metrics(FILE *f);
/* Requests the front answered itself, and of those the 401s. */
void sbx_front_counts(uint64_t *answered, uint64_t *n401);

#endif

/*
 * front.h: sbxd's front (front*.c, see front_int.h): it owns every client connection
 * (accept, TLS, connection budgets, timeouts) and hands h2o one end of a
 * socketpair, relaying bytes through the HTTP/2 guard (h2guard.h).
 */
#ifndef SBX_FRONT_H
#define SBX_FRONT_H

#include <stdio.h>

#include "front_opts.h"
#include "h2guard.h"
#include "server.h"

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

/*
 * stream_int.h: what the three files of a streamed run share (not the rest
 * of sbxd, which sees only server.h's sbx_srv_stream_* functions).
 *
 * stream.c is the h2o generator that streams one run (watching its fds,
 * backpressure, the client going away); stream_encode.c turns the run's
 * output and end into events (msgpack maps or JSON lines) queued on the
 * record; runs_registry.c keeps detached runs apart from any request and
 * re-attaches them (GET .../runs/{run_id}).  See stream.c's header for the
 * whole story.
 */
#ifndef SBX_SRV_STREAM_INT_H
#define SBX_SRV_STREAM_INT_H

#include "server.h"

#define SRV_STREAM_CAP (256 * 1024)
#define SRV_DETACH_CAP (1024 * 1024) /* events kept for an absent client */
#define SRV_KEEP_MS (300 * 1000)     /* an ended, unread detached run */
#define SRV_KEEP_MAX 256	     /* detached records at once */

typedef struct sbx_srv_buf {
	char *data;
	size_t len, cap;
} sbx_srv_buf;

typedef struct sbx_srv_run {
	h2o_generator_t gen; /* first: h2o hands it back to us */
	h2o_req_t *req;
	sbx_srv *S;
	sbx_srv_fmt fmt;
	sbx_run *run; /* borrowed from the Lua userdata */
	int spec_ref; /* the Lua table { start, finish, ... } */
	int run_ref;  /* the run userdata */
	h2o_socket_t *w_out, *w_err, *w_status;
	h2o_timeout_entry_t start_entry, tick_entry;
	sbx_srv_buf pending, inflight;
	bool sending, stopped, final, final_sent, started, in_pump;
	uint64_t t0;
	char backend[32];
	char sid[40];
	struct sbx_srv_run *next, *prev; /* all live streams */
	/* the client now attached: its pool's pointer to us (cleared when it goes) */
	struct sbx_srv_run **owner;
	/* detach = true */
	bool detach;
	char run_id[33];
	uint32_t *ev_len; /* lengths of the events in pending, oldest first */
	size_t n_ev, cap_ev;
	uint64_t dropped_events, dropped_bytes;
	uint64_t ended_ms;		   /* when the run ended (0: still going) */
	struct sbx_srv_run *knext, *kprev; /* all detached records */
} sbx_srv_run;

/* ---- stream_encode.c ---- */
void sbx_srv_buf_append(sbx_srv_buf *b, const void *data, size_t len);
/* Room for len more bytes; false when memory ran out. */
bool sbx_srv_buf_reserve(sbx_srv_buf *b, size_t len);
/* { type = "stdout"|"stderr", data } */
void sbx_srv_ev_data(sbx_srv_run *sr, const char *type, const char *data, size_t len);
/* The same, msgpack only, read from the run's stdout (which 1) or stderr
 * (2) straight into the pending buffer (at most max bytes): the count, or
 * 0 (nothing now, the stream ended, or JSON: use sbx_run_next). */
size_t sbx_srv_ev_read(sbx_srv_run *sr, int which, size_t max);
/* { type = "exit", returncode, runtime_ms, backend, termination_reason[, signal] } */
void sbx_srv_ev_exit(sbx_srv_run *sr, const sbx_run_result *res);
/* { type = "error", kind, message, reason, backend, returncode = -1 } */
void sbx_srv_ev_error(sbx_srv_run *sr, const char *kind, const char *msg);
/* { type = "run", run_id }: the first event of a detached run. */
void sbx_srv_ev_run_id(sbx_srv_run *sr);
/* { type = "dropped", events, bytes } appended to out (not queued). */
void sbx_srv_ev_dropped(sbx_srv_run *sr, sbx_srv_buf *out);
/* ---- stream.c ---- */
/* Call the Lua finish(outcome) and drop every reference; the run is freed. */
void sbx_srv_stream_release(sbx_srv_run *sr, const char *outcome);
/* Make sr the generator of req; its pool's destructor tells us when it goes. */
void sbx_srv_stream_attach_req(sbx_srv_run *sr, h2o_req_t *req);
/* 200, the event content type, x-sbx-run-id; starts the response. */
void sbx_srv_stream_headers(sbx_srv_run *sr, h2o_req_t *req);

/* ---- runs_registry.c ---- */
/* Make sr a detached record: a fresh run id, linked in the registry (the
 * oldest ended unread record may be evicted for it).  false when the
 * registry is full or no random id could be had: sr is left unlinked. */
bool sbx_srv_runs_keep(sbx_srv_run *sr);
/* Drop the oldest events of an absent client's buffer beyond the cap. */
void sbx_srv_runs_drop_oldest(sbx_srv_run *sr);
/* Unlink sr from the registry (when detached) and free it. */
void sbx_srv_runs_free(sbx_srv_run *sr);

#endif

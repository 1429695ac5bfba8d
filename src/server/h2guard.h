/*
 * h2guard.h: the HTTP/2 frame guard of sbxd's front (front.c).  A pure
 * state machine, no I/O: fed the client's bytes and h2o's bytes of one
 * connection, it fills two output buffers (what to forward to h2o, what
 * to write to the client) and decides when the connection must end with
 * a GOAWAY.  It decodes request header blocks with libnghttp2's HPACK
 * inflater to count what they expand to, rate-limits the frame types
 * that cost the server without costing the client, answers
 * unauthenticated or over-budget requests itself (see sbx_h2g_hooks) and
 * accounts the request bodies h2o holds.
 */
#ifndef SBX_H2GUARD_H
#define SBX_H2GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* HTTP/2 error codes the guard closes with. */
enum { SBX_H2G_PROTOCOL_ERROR = 0x1, SBX_H2G_COMPRESSION_ERROR = 0x9, SBX_H2G_CALM = 0xb };

/* Why the guard closed a connection (sbx_h2g_reason_names). */
typedef enum sbx_h2g_reason {
	SBX_H2G_R_NONE = 0,
	SBX_H2G_R_PROTOCOL,	 /* malformed frame or sequence */
	SBX_H2G_R_COMPRESSION,	 /* HPACK the inflater refused */
	SBX_H2G_R_HEADER_LIST,	 /* decoded header list over budget */
	SBX_H2G_R_HEADER_FIELDS, /* too many fields in one block */
	SBX_H2G_R_CONTINUATIONS, /* too many CONTINUATION frames in one block */
	SBX_H2G_R_RST,
	SBX_H2G_R_EMPTY,
	SBX_H2G_R_CONTINUATION_RATE,
	SBX_H2G_R_PING,
	SBX_H2G_R_SETTINGS,
	SBX_H2G_R_PRIORITY,
	SBX_H2G_R_WINDOW_UPDATE,
	SBX_H2G_R_STREAMS,	  /* streams opened per second */
	SBX_H2G_R_CONCURRENCY,	  /* far more open streams than h2o allows */
	SBX_H2G_R_SERVER,	  /* h2o sent something the front cannot relay */
	SBX_H2G_R_HEADER_TIMEOUT, /* front.c: preface or header block too slow */
	SBX_H2G_R_IDLE_TIMEOUT,	  /* front.c: no open stream for too long */
	SBX_H2G_R_EVICTED,	  /* front.c: idle, shed for a new connection */
	SBX_H2G_R_RESET_BUDGET,	  /* resets before an answer, per tenant/source */
	SBX_H2G_R_PENALTY,	  /* its tenant/source is cooling down after abuse */
	SBX_H2G_R_COUNT
} sbx_h2g_reason;
extern const char *const sbx_h2g_reason_names[SBX_H2G_R_COUNT];

/* A token bucket: rate tokens per second, at most burst banked. */
typedef struct sbx_h2g_rate {
	double rate, burst;
} sbx_h2g_rate;

/* A bucket's state; zeroed: full at its first use. */
typedef struct sbx_h2g_bucket {
	double tokens;
	uint64_t last_ms;
	bool started;
} sbx_h2g_bucket;

/* Take a token from b (refilled at r up to its burst); false: none left. */
bool sbx_h2g_take(sbx_h2g_bucket *b, const sbx_h2g_rate *r, uint64_t now_ms);

typedef struct sbx_h2g_limits {
	uint32_t max_header_list;   /* decoded bytes (name+value+32 per field) */
	uint32_t max_header_fields; /* fields per header block */
	uint32_t max_continuations; /* CONTINUATION frames per header block */
	sbx_h2g_rate rst, empty, continuation, ping, settings, priority, window_update, streams;
	uint64_t max_body;    /* sbxd's --max-body: larger requests are h2o's 413 */
	uint64_t body_conn;   /* request body bytes h2o may hold for this connection */
	uint64_t body_total;  /* ... for all connections (*held_total) */
	uint64_t *held_total; /* shared server-wide counter; NULL: none */
} sbx_h2g_limits;

/* What the guard knows of a complete request header block. */
typedef struct sbx_h2g_req {
	uint32_t stream_id;
	const char *path, *method, *authorization, *accept;
	size_t path_len, method_len, authorization_len, accept_len;
	int64_t content_length; /* -1: none */
	uint32_t *key;		/* check may set it: whose reset budget the stream charges */
} sbx_h2g_req;

/* The front's decisions, called from inside sbx_h2g_from_client. */
typedef struct sbx_h2g_hooks {
	/* 0 to let the request through, a status (401, 503) to answer it, or
	 * SBX_H2G_CHECK_PENALTY to close the connection (GOAWAY, "penalty"). */
	int (*check)(void *ud, const sbx_h2g_req *r);
	/* The error body for status into buf (at most cap bytes); returns its
	 * length and sets *ctype.  msgpack: the client asked for it. */
	size_t (*body)(void *ud, int status, bool msgpack, char *buf, size_t cap,
		       const char **ctype);
	/* The client reset a stream h2o had not answered yet; key: what check
	 * set (never 0).  false: that key's budget, shared by every connection,
	 * is spent: the connection closes (GOAWAY, "reset_budget").  NULL: none. */
	bool (*reset)(void *ud, uint32_t key, uint64_t now_ms);
	void *ud;
} sbx_h2g_hooks;
enum { SBX_H2G_CHECK_PENALTY = -1 };

/* A growable byte buffer the caller drains (data[off..len)). */
typedef struct sbx_h2g_buf {
	uint8_t *data;
	size_t off, len, cap;
} sbx_h2g_buf;

typedef struct sbx_h2g sbx_h2g;

/* Results of feeding bytes. */
enum { SBX_H2G_OK = 0, SBX_H2G_CLOSE = 1, SBX_H2G_NOT_H2 = 2 };

/* A guard for one connection; NULL when out of memory.  lim and hooks are
 * copied. */
sbx_h2g *sbx_h2g_new(const sbx_h2g_limits *lim, const sbx_h2g_hooks *hooks);
/* Frees it and gives back the body bytes it still held. */
void sbx_h2g_free(sbx_h2g *g);

/* Client bytes.  SBX_H2G_OK; SBX_H2G_NOT_H2 when the first bytes are not
 * the HTTP/2 preface (nothing consumed: an HTTP/1.1 connection);
 * SBX_H2G_CLOSE when the connection must end: a GOAWAY is at the end of
 * the client buffer, forward nothing more to h2o. */
int sbx_h2g_from_client(sbx_h2g *g, const uint8_t *p, size_t n, uint64_t now_ms);
/* h2o's bytes, relayed whole frames at a time into the client buffer. */
int sbx_h2g_from_server(sbx_h2g *g, const uint8_t *p, size_t n, uint64_t now_ms);
/* The same without copying what is relayed unchanged: when the client
 * buffer is empty, h2o's frames that lie whole in p are left there, and
 * p[*span_off, *span_off + *span_len) is what the client is owed next,
 * before anything the client buffer gets later; the caller writes it or
 * appends it to the client buffer before p goes away or the guard is fed
 * again.  *span_len > 0 only when the client buffer is empty on return. */
int sbx_h2g_from_server_span(sbx_h2g *g, const uint8_t *p, size_t n, uint64_t now_ms,
			     size_t *span_off, size_t *span_len);
/* Close now with a GOAWAY (code, reason) toward the client, e.g. for a
 * timeout the front measured. */
void sbx_h2g_goaway(sbx_h2g *g, uint32_t code, sbx_h2g_reason why, const char *debug);

sbx_h2g_buf *sbx_h2g_to_h2o(sbx_h2g *g);
sbx_h2g_buf *sbx_h2g_to_client(sbx_h2g *g);
/* Why it closed (SBX_H2G_R_NONE while open), and the GOAWAY code. */
sbx_h2g_reason sbx_h2g_reason_of(const sbx_h2g *g, uint32_t *code);
/* Is a preface or header block under way (the front's header timeout)? */
bool sbx_h2g_header_pending(const sbx_h2g *g);
/* Streams open (the front's idle timeout runs while there are none). */
size_t sbx_h2g_open_streams(const sbx_h2g *g);
/* Request body bytes h2o holds for this connection now. */
uint64_t sbx_h2g_held(const sbx_h2g *g);
/* Requests the guard answered itself, by status. */
void sbx_h2g_rejected(const sbx_h2g *g, uint64_t *n401, uint64_t *n503);

/* Do the first n client bytes start the HTTP/2 preface?  1 yes, 0 not
 * yet known (a prefix of it), -1 no (HTTP/1.x). */
int sbx_h2g_preface_match(const uint8_t *p, size_t n);

/* The connection came from an HTTP/1.1 Upgrade: h2c: stream 1 is the
 * upgraded request, h2o's to answer. */
void sbx_h2g_upgraded(sbx_h2g *g);

/* Buffer helpers (also used by the front). */
int sbx_h2g_buf_put(sbx_h2g_buf *b, const void *p, size_t n);
void sbx_h2g_buf_consume(sbx_h2g_buf *b, size_t n);
void sbx_h2g_buf_free(sbx_h2g_buf *b);

#endif

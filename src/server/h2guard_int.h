/*
 * h2guard_int.h: what h2guard.c (the state machine) and h2guard_out.c
 * (the bytes and frames the guard writes itself) share; not for the front.
 */
#ifndef SBX_H2GUARD_INT_H
#define SBX_H2GUARD_INT_H

#include <nghttp2/nghttp2.h>

#include "h2guard.h"

enum {
	F_DATA = 0,
	F_HEADERS = 1,
	F_PRIORITY = 2,
	F_RST = 3,
	F_SETTINGS = 4,
	F_PUSH = 5,
	F_PING = 6,
	F_GOAWAY = 7,
	F_WINDOW_UPDATE = 8,
	F_CONTINUATION = 9,
};
enum { FL_END_STREAM = 0x1, FL_ACK = 0x1, FL_END_HEADERS = 0x4, FL_PADDED = 0x8, FL_PRIO = 0x20 };

#define FRAME_MAX 16384u /* what h2o advertises and the guard enforces */
#define SERVER_FRAME_MAX (1u << 20)
#define SERVER_RUN_MAX (256u * 1024)
#define MAX_STREAMS 256 /* h2o allows 100 concurrent; far past that is abuse */
#define MAX_SETTINGS 32 /* entries in one SETTINGS frame (nghttp2's default) */
#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#define PREFACE_LEN 24

typedef sbx_h2g_bucket bucket;

typedef struct stream {
	uint32_t id;
	uint32_t key; /* the check hook's: whose reset budget it charges */
	uint64_t held;
	bool client_closed, server_closed, server_headers, msgpack;
} stream;

#define H2G_MAX_ANSWERED 8
#define H2G_ANSWERED_DISCARD_MAX (64u * 1024)

struct sbx_h2g {
	sbx_h2g_limits lim;
	sbx_h2g_hooks hooks;
	nghttp2_hd_inflater *inf;
	sbx_h2g_buf to_h2o, to_client;
	sbx_h2g_buf cin, sin; /* partial frames from the client, from h2o */
	sbx_h2g_buf srun;     /* h2o's HEADERS+CONTINUATION run in progress */
	sbx_h2g_buf early;    /* the guard's frames before h2o's SETTINGS went out */
	/* sbx_h2g_from_server_span: h2o's frames relayed unchanged, left where
	 * they lie in the caller's bytes [in_lo, in_hi) instead of copied into
	 * to_client (only while to_client is empty: h2g_out copies them there
	 * before anything else is appended, so the order holds). */
	const uint8_t *span, *in_lo, *in_hi;
	size_t span_len;
	size_t preface_got;
	bool closed, server_settings_seen;
	sbx_h2g_reason reason;
	uint32_t code;
	uint32_t last_id; /* highest client stream id seen */

	/* the request header block in progress */
	bool hb_active, hb_end_stream;
	uint32_t hb_id, hb_conts, hb_fields;
	uint64_t hb_decoded;
	sbx_h2g_buf hb_raw;
	char path[256], method[16], auth[1024], accept[128];
	size_t path_len, method_len, auth_len, accept_len;
	bool path_long, auth_long;
	int64_t content_length;

	bucket b_rst, b_empty, b_cont, b_ping, b_settings, b_prio, b_wu, b_streams;
	stream *streams;
	size_t n_streams, cap_streams;
	uint32_t wu_credit;  /* WINDOW_UPDATEs earned by DATA h2o sent */
	uint32_t rst_credit; /* RST_STREAMs earned by streams that ended */
	uint64_t held;
	uint64_t n401, n503;
	/* Streams answered here while their client was still sending: its DATA
	 * is discarded (and credited back); RST_STREAM(NO_ERROR) goes out only
	 * once H2G_ANSWERED_DISCARD_MAX bytes of it were dropped, so a client
	 * finishing a small body reads its answer (libcurl fails a request
	 * whose stream is reset while it still uploads). */
	struct {
		uint32_t id, discarded;
	} answered[H2G_MAX_ANSWERED];
	size_t n_answered;
};

/* ---- h2guard_out.c ---- */
/* DATA of a stream answered here arrived (len bytes, end: END_STREAM):
 * past H2G_ANSWERED_DISCARD_MAX ask the client to stop (RST NO_ERROR). */
void h2g_answered_data(sbx_h2g *g, uint32_t id, uint32_t len, bool end);
/* The stream ended (a reset either way): forget it. */
void h2g_answered_forget(sbx_h2g *g, uint32_t id);
size_t h2g_avail(const sbx_h2g_buf *b);
/* The client buffer, to append to: a pending span is copied in first. */
sbx_h2g_buf *h2g_out(sbx_h2g *g);
/* Append what src holds to dst. */
void h2g_append(sbx_h2g_buf *dst, const sbx_h2g_buf *src);
/* Where the guard's own frames go (after h2o's first SETTINGS). */
sbx_h2g_buf *h2g_inj(sbx_h2g *g);
void h2g_frame_head(sbx_h2g_buf *b, uint32_t len, uint8_t type, uint8_t flags, uint32_t id);
/* A frame whose payload is one 32-bit value (RST_STREAM, WINDOW_UPDATE). */
void h2g_u32_frame(sbx_h2g_buf *b, uint8_t type, uint32_t id, uint32_t v);
/* WINDOW_UPDATE(0, n) toward the client for DATA the guard dropped. */
void h2g_credit_window(sbx_h2g *g, uint32_t n);
/* GOAWAY(code) naming why; returns SBX_H2G_CLOSE. */
int h2g_fail(sbx_h2g *g, uint32_t code, sbx_h2g_reason why);
/* Answer stream id with status itself (the front's error body). */
void h2g_answer(sbx_h2g *g, uint32_t id, int status, bool msgpack, bool client_done);

#endif

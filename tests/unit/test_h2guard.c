/*
 * test_h2guard.c: the HTTP/2 frame guard (src/server/h2guard.c) alone, fed
 * frames as a client and as h2o would send them.  Each budget, crossed,
 * ends with the exact GOAWAY code and reason; legit traffic (a curl-like
 * request sequence, a large upload, long streaming with WINDOW_UPDATEs)
 * never trips; the HPACK bomb is cut on its decoded size; unauthenticated
 * and over-budget requests are answered by the guard and their DATA is
 * not forwarded.  Clients' header blocks are encoded with nghttp2's
 * deflater; the guard's answers decoded with its inflater.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <nghttp2/nghttp2.h>

#include "front_budget.h"
#include "front_opts.h"
#include "h2guard.h"
#include "h2guard_int.h" /* SERVER_FRAME_MAX */

#define PREFACE "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

typedef struct t {
	sbx_h2g *g;
	nghttp2_hd_deflater *def;
	uint64_t now, held_total;
	sbx_h2g_limits lim;
} t;

static int check(void *ud, const sbx_h2g_req *r)
{
	(void)ud;
	if (r->path && r->path_len == 8 && !memcmp(r->path, "/healthz", 8))
		return 0;
	if (r->authorization && r->authorization_len == 11 &&
	    !memcmp(r->authorization, "Bearer good", 11))
		return 0;
	return 401;
}

static size_t body(void *ud, int status, bool msgpack, char *buf, size_t cap, const char **ctype)
{
	(void)ud;
	(void)msgpack;
	int n = snprintf(buf, cap, "{\"status\":%d}", status);
	*ctype = "application/json";
	return (size_t)n;
}

/* The front's own defaults (front_opts.c), with a --max-body of 8 MiB. */
static void limits(sbx_h2g_limits *l)
{
	sbx_front_opts o;
	sbx_front_defaults(&o);
	sbx_front_derive(&o, 8 << 20, 1024);
	*l = o.lim;
}

static void frame(uint8_t *out, uint32_t len, uint8_t type, uint8_t flags, uint32_t id)
{
	out[0] = (uint8_t)(len >> 16);
	out[1] = (uint8_t)(len >> 8);
	out[2] = (uint8_t)len;
	out[3] = type;
	out[4] = flags;
	out[5] = (uint8_t)(id >> 24);
	out[6] = (uint8_t)(id >> 16);
	out[7] = (uint8_t)(id >> 8);
	out[8] = (uint8_t)id;
}

static int send_frame(t *x, uint8_t type, uint8_t flags, uint32_t id, const void *p, size_t len)
{
	uint8_t *f = malloc(9 + len);
	frame(f, (uint32_t)len, type, flags, id);
	if (len)
		memcpy(f + 9, p, len);
	int rv = sbx_h2g_from_client(x->g, f, 9 + len, x->now);
	free(f);
	return rv;
}

static int server_frame(t *x, uint8_t type, uint8_t flags, uint32_t id, const void *p, size_t len)
{
	uint8_t *f = malloc(9 + len);
	frame(f, (uint32_t)len, type, flags, id);
	if (len)
		memcpy(f + 9, p, len);
	int rv = sbx_h2g_from_server(x->g, f, 9 + len, x->now);
	free(f);
	return rv;
}

/* A new guard past the preface and both SETTINGS; hooks NULL: check, body. */
static t *start_with(const sbx_h2g_limits *l, const sbx_h2g_hooks *h)
{
	t *x = calloc(1, sizeof(*x));
	sbx_h2g_hooks hooks = {check, body, NULL, NULL};
	if (h)
		hooks = *h;
	if (l)
		x->lim = *l;
	else
		limits(&x->lim);
	x->lim.held_total = &x->held_total;
	x->g = sbx_h2g_new(&x->lim, &hooks);
	assert_non_null(x->g);
	assert_int_equal(nghttp2_hd_deflate_new(&x->def, 4096), 0);
	x->now = 1000;
	assert_int_equal(sbx_h2g_from_client(x->g, (const uint8_t *)PREFACE, 24, x->now), 0);
	uint8_t s[6] = {0, 3, 0, 0, 0, 100};
	assert_int_equal(server_frame(x, 4, 0, 0, s, 6), SBX_H2G_OK);
	assert_int_equal(send_frame(x, 4, 0, 0, NULL, 0), SBX_H2G_OK);
	return x;
}

static t *start(const sbx_h2g_limits *l)
{
	return start_with(l, NULL);
}

static void stop(t *x)
{
	sbx_h2g_free(x->g);
	assert_int_equal(x->held_total, 0); /* every held byte given back */
	nghttp2_hd_deflate_del(x->def);
	free(x);
}

static size_t h2g_avail_of(const sbx_h2g_buf *b)
{
	return b->len - b->off;
}

static void drain(t *x)
{
	sbx_h2g_buf *a = sbx_h2g_to_h2o(x->g), *b = sbx_h2g_to_client(x->g);
	sbx_h2g_buf_consume(a, a->len - a->off);
	sbx_h2g_buf_consume(b, b->len - b->off);
}

#define NV(n, v)                                                                                   \
	{                                                                                          \
		(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE \
	}

/* HEADERS of a request (deflated), END_HEADERS, END_STREAM when es. */
static int request(t *x, uint32_t id, const char *method, const char *path, const char *auth,
		   bool es)
{
	nghttp2_nv nv[6] = {
		{(uint8_t *)":method", (uint8_t *)method, 7, strlen(method), 0},
		{(uint8_t *)":scheme", (uint8_t *)"http", 7, 4, 0},
		{(uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0},
		{(uint8_t *)":authority", (uint8_t *)"127.0.0.1", 10, 9, 0},
		{(uint8_t *)"user-agent", (uint8_t *)"curl/7.88.1", 10, 11, 0},
		{(uint8_t *)"authorization", (uint8_t *)auth, 13, auth ? strlen(auth) : 0, 0},
	};
	uint8_t buf[1024];
	ssize_t n = nghttp2_hd_deflate_hd(x->def, buf, sizeof(buf), nv, auth ? 6 : 5);
	assert_true(n > 0);
	return send_frame(x, 1, (uint8_t)(0x4 | (es ? 1 : 0)), id, buf, (size_t)n);
}

/* The frames in b: how many of type, and the last frame's type/payload. */
typedef struct seen {
	int count[16];
	uint8_t last_type;
	uint32_t last_u32, goaway_code;
	uint8_t headers[4096];
	size_t headers_len;
	uint32_t max_settings_value, frame_size_setting;
} seen;

static uint32_t u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void scan(const sbx_h2g_buf *b, seen *s)
{
	size_t i = b->off;
	memset(s, 0, sizeof(*s));
	if (b->len - i >= 24 && !memcmp(b->data + i, PREFACE, 24))
		i += 24;
	while (i + 9 <= b->len) {
		const uint8_t *f = b->data + i;
		uint32_t len = (uint32_t)f[0] << 16 | (uint32_t)f[1] << 8 | f[2];
		assert_true(i + 9 + len <= b->len);
		s->count[f[3] & 15]++;
		s->last_type = f[3];
		if (len >= 4)
			s->last_u32 = u32(f + 9);
		if (f[3] == 7)
			s->goaway_code = u32(f + 13);
		if (f[3] == 1 && len <= sizeof(s->headers)) {
			memcpy(s->headers, f + 9, len);
			s->headers_len = len;
		}
		if (f[3] == 4)
			for (uint32_t k = 0; k + 6 <= len; k += 6) {
				uint16_t id = (uint16_t)(f[9 + k] << 8 | f[10 + k]);
				if (id == 6)
					s->max_settings_value = u32(f + 11 + k);
				if (id == 5)
					s->frame_size_setting = u32(f + 11 + k);
			}
		i += 9 + len;
	}
}

static void expect_close(t *x, int rv, uint32_t code, sbx_h2g_reason why)
{
	seen s;
	uint32_t c = 0;
	assert_int_equal(rv, SBX_H2G_CLOSE);
	assert_int_equal(sbx_h2g_reason_of(x->g, &c), why);
	assert_int_equal(c, code);
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.last_type, 7);
	assert_int_equal(s.goaway_code, code);
}

/* ---- legit traffic ---- */

static void test_curl_like_sequence(void **state)
{
	(void)state;
	t *x = start(NULL);
	seen s;
	uint8_t wu[4] = {0, 0x3f, 0xff, 0x01};
	assert_int_equal(send_frame(x, 8, 0, 0, wu, 4), SBX_H2G_OK);
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.max_settings_value, 64 * 1024); /* advertised */
	for (uint32_t id = 1; id < 400; id += 2) {
		x->now += 1;
		assert_int_equal(request(x, id, "GET", "/v1/sessions", "Bearer good", true), 0);
		assert_int_equal(sbx_h2g_open_streams(x->g), 1);
		uint8_t h[1] = {0x88}; /* :status 200 */
		assert_int_equal(server_frame(x, 1, 0x4, id, h, 1), SBX_H2G_OK);
		assert_int_equal(server_frame(x, 0, 0x1, id, "ok", 2), SBX_H2G_OK);
		assert_int_equal(sbx_h2g_open_streams(x->g), 0);
	}
	scan(sbx_h2g_to_h2o(x->g), &s);
	assert_int_equal(s.count[1], 200); /* every request reached h2o */
	assert_int_equal(s.count[3], 0);
	uint32_t code;
	assert_int_equal(sbx_h2g_reason_of(x->g, &code), SBX_H2G_R_NONE);
	stop(x);
}

static void test_large_upload(void **state)
{
	(void)state;
	t *x = start(NULL);
	static uint8_t chunk[16384];
	assert_int_equal(request(x, 1, "PUT", "/v1/files/x", "Bearer good", false), 0);
	for (int i = 0; i < 512; i++) { /* 8 MiB */
		assert_int_equal(send_frame(x, 0, i == 511 ? 1 : 0, 1, chunk, sizeof(chunk)), 0);
		if (i % 4 == 3) {
			/* h2o gives the window back as it reads */
			uint8_t wu[4] = {0, 1, 0, 0};
			assert_int_equal(server_frame(x, 8, 0, 0, wu, 4), 0);
			assert_int_equal(server_frame(x, 8, 0, 1, wu, 4), 0);
		}
		drain(x);
	}
	assert_int_equal(sbx_h2g_held(x->g), 8 << 20);
	assert_int_equal(x->held_total, 8 << 20);
	uint8_t h[1] = {0x88};
	assert_int_equal(server_frame(x, 1, 0x5, 1, h, 1), 0);
	assert_int_equal(sbx_h2g_held(x->g), 0); /* answered: released */
	assert_int_equal(x->held_total, 0);
	stop(x);
}

static void test_long_streaming_window_updates(void **state)
{
	(void)state;
	t *x = start(NULL);
	static uint8_t chunk[16384];
	assert_int_equal(request(x, 1, "POST", "/v1/sessions/s/runs", "Bearer good", true), 0);
	uint8_t h[1] = {0x88};
	assert_int_equal(server_frame(x, 1, 0x4, 1, h, 1), 0);
	/* 1 GiB of stdout in 16 KiB frames, every one thanked twice at once */
	for (int i = 0; i < 65536; i++) {
		assert_int_equal(server_frame(x, 0, 0, 1, chunk, sizeof(chunk)), 0);
		uint8_t wu[4] = {0, 0, 0x40, 0};
		assert_int_equal(send_frame(x, 8, 0, 0, wu, 4), 0);
		assert_int_equal(send_frame(x, 8, 0, 1, wu, 4), 0);
		if (i % 64 == 0)
			drain(x);
	}
	uint32_t code;
	assert_int_equal(sbx_h2g_reason_of(x->g, &code), SBX_H2G_R_NONE);
	/* without DATA to thank, the same pace trips the budget */
	int rv = 0;
	for (int i = 0; i < 5000 && rv == 0; i++)
		rv = send_frame(x, 8, 0, 0, "\0\0\x40\0", 4);
	expect_close(x, rv, SBX_H2G_CALM, SBX_H2G_R_WINDOW_UPDATE);
	stop(x);
}

static void test_settings_clamped(void **state)
{
	(void)state;
	t *x = start(NULL);
	uint8_t s6[6] = {0, 5, 0, 0x10, 0, 0}; /* MAX_FRAME_SIZE 1 MiB */
	drain(x);
	assert_int_equal(send_frame(x, 4, 0, 0, s6, 6), 0);
	seen s;
	scan(sbx_h2g_to_h2o(x->g), &s);
	assert_int_equal(s.frame_size_setting, 16384);
	stop(x);
}

/* ---- authentication and body budgets ---- */

static void test_unauthenticated_answered_here(void **state)
{
	(void)state;
	t *x = start(NULL);
	static uint8_t chunk[16384];
	seen s;
	drain(x);
	assert_int_equal(request(x, 1, "POST", "/v1/sessions", NULL, false), 0);
	/* to h2o: HEADERS without END_STREAM, then CANCEL */
	scan(sbx_h2g_to_h2o(x->g), &s);
	assert_int_equal(s.count[1], 1);
	assert_int_equal(s.count[3], 1);
	assert_int_equal(s.last_u32, 0x8);
	sbx_h2g_buf *up = sbx_h2g_to_h2o(x->g);
	assert_int_equal(up->data[up->off + 4] & 1, 0);
	/* to the client: 401 and its body; no reset yet, so a client that
	 * finishes a small body reads its answer */
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.count[1], 1);
	assert_int_equal(s.count[0], 1);
	assert_int_equal(s.count[3], 0);
	nghttp2_hd_inflater *inf;
	nghttp2_hd_inflate_new(&inf);
	nghttp2_nv nv;
	int fl = 0;
	ssize_t rv = nghttp2_hd_inflate_hd2(inf, &nv, &fl, s.headers, s.headers_len, 1);
	assert_true(rv > 0 && (fl & NGHTTP2_HD_INFLATE_EMIT));
	assert_int_equal(nv.namelen, 7);
	assert_memory_equal(nv.value, "401", 3);
	/* literals without indexing: the client's decoder table stays empty */
	assert_int_equal(nghttp2_hd_inflate_get_dynamic_table_size(inf), 0);
	nghttp2_hd_inflate_del(inf);
	drain(x);
	/* the DATA that follows is dropped and its window credited back;
	 * past 64 KiB of it, one RST_STREAM(NO_ERROR) asks the client to stop */
	for (int i = 0; i < 100; i++)
		assert_int_equal(send_frame(x, 0, 0, 1, chunk, sizeof(chunk)), 0);
	scan(sbx_h2g_to_h2o(x->g), &s);
	assert_int_equal(s.count[0], 0);
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.count[8], 100);
	assert_int_equal(s.count[3], 1);
	assert_int_equal(sbx_h2g_held(x->g), 0);
	/* a wrong token likewise; /healthz needs none */
	drain(x);
	assert_int_equal(request(x, 3, "GET", "/v1/sessions", "Bearer bad", true), 0);
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.count[1], 1);
	assert_int_equal(s.count[3], 0); /* the client had finished: no RST */
	drain(x);
	assert_int_equal(request(x, 5, "GET", "/healthz", NULL, true), 0);
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.count[1], 0);
	uint64_t a, b;
	sbx_h2g_rejected(x->g, &a, &b);
	assert_int_equal(a, 2);
	assert_int_equal(b, 0);
	/* a small body that ends: answered, dropped, never reset */
	drain(x);
	assert_int_equal(request(x, 7, "POST", "/v1/sessions", "Bearer bad", false), 0);
	assert_int_equal(send_frame(x, 0, 1, 7, chunk, 100), 0);
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.count[1], 1);
	assert_int_equal(s.count[3], 0);
	stop(x);
}

static void test_body_budget_by_data(void **state)
{
	(void)state;
	sbx_h2g_limits l;
	limits(&l);
	l.body_conn = 64 * 1024;
	t *x = start(&l);
	static uint8_t chunk[16384];
	seen s;
	assert_int_equal(request(x, 1, "PUT", "/v1/files/x", "Bearer good", false), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(send_frame(x, 0, 0, 1, chunk, sizeof(chunk)), 0);
	assert_int_equal(sbx_h2g_held(x->g), 64 * 1024);
	drain(x);
	assert_int_equal(send_frame(x, 0, 0, 1, chunk, sizeof(chunk)), 0);
	scan(sbx_h2g_to_h2o(x->g), &s);
	assert_int_equal(s.count[0], 0);
	assert_int_equal(s.count[3], 1); /* CANCEL to h2o */
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.count[1], 1); /* 503 */
	assert_int_equal(sbx_h2g_held(x->g), 0);
	uint64_t a, b;
	sbx_h2g_rejected(x->g, &a, &b);
	assert_int_equal(b, 1);
	stop(x);
}

static void test_body_budget_by_content_length(void **state)
{
	(void)state;
	sbx_h2g_limits l;
	limits(&l);
	l.body_total = 1 << 20;
	t *x = start(&l);
	x->held_total = 900 * 1024; /* other connections' */
	nghttp2_nv nv[] = {NV(":method", "PUT"),
			   NV(":scheme", "http"),
			   NV(":path", "/v1/f"),
			   NV(":authority", "h"),
			   NV("authorization", "Bearer good"),
			   NV("content-length", "200000")};
	uint8_t buf[512];
	ssize_t n = nghttp2_hd_deflate_hd(x->def, buf, sizeof(buf), nv, 6);
	drain(x);
	assert_int_equal(send_frame(x, 1, 0x4, 1, buf, (size_t)n), 0);
	seen s;
	scan(sbx_h2g_to_client(x->g), &s);
	assert_int_equal(s.count[1], 1);
	uint64_t a, b;
	sbx_h2g_rejected(x->g, &a, &b);
	assert_int_equal(b, 1);
	x->held_total = 0;
	stop(x);
}

/* ---- header budgets ---- */

static void test_hpack_bomb(void **state)
{
	(void)state;
	t *x = start(NULL);
	/* one 4 KB header indexed, then 1-byte references to it */
	static uint8_t blk[16384];
	size_t n = 0;
	nghttp2_nv nv[] = {NV(":method", "GET"), NV(":scheme", "http"), NV(":path", "/"),
			   NV(":authority", "h")};
	n = (size_t)nghttp2_hd_deflate_hd(x->def, blk, sizeof(blk), nv, 4);
	blk[n++] = 0x40; /* literal with incremental indexing, new name */
	blk[n++] = 1;
	blk[n++] = 'x';
	blk[n++] = 0x7f; /* value length 4000: 127 + 3873 */
	blk[n++] = (uint8_t)((4000 - 127) % 128 + 128);
	blk[n++] = (uint8_t)((4000 - 127) / 128);
	memset(blk + n, 'a', 4000);
	n += 4000;
	while (n < sizeof(blk))
		blk[n++] = 0xbe; /* index 62: the 4 KB entry */
	int rv = send_frame(x, 1, 0x4, 1, blk, n);
	expect_close(x, rv, SBX_H2G_CALM, SBX_H2G_R_HEADER_LIST);
	stop(x);
}

static void test_too_many_fields(void **state)
{
	(void)state;
	t *x = start(NULL);
	nghttp2_nv nv[400];
	char names[400][8];
	for (int i = 0; i < 400; i++) {
		snprintf(names[i], sizeof(names[i]), "x%d", i);
		nv[i] = (nghttp2_nv){(uint8_t *)names[i], (uint8_t *)"v", strlen(names[i]), 1,
				     NGHTTP2_NV_FLAG_NO_INDEX};
	}
	static uint8_t buf[16384];
	ssize_t n = nghttp2_hd_deflate_hd(x->def, buf, sizeof(buf), nv, 400);
	assert_true(n > 0);
	expect_close(x, send_frame(x, 1, 0x5, 1, buf, (size_t)n), SBX_H2G_CALM,
		     SBX_H2G_R_HEADER_FIELDS);
	stop(x);
}

static void test_zero_length_name(void **state)
{
	(void)state;
	t *x = start(NULL);
	uint8_t blk[] = {0x82, 0x00, 0x00, 0x01, 'v'}; /* GET, then "" : "v" */
	expect_close(x, send_frame(x, 1, 0x5, 1, blk, sizeof(blk)), SBX_H2G_PROTOCOL_ERROR,
		     SBX_H2G_R_PROTOCOL);
	stop(x);
}

static void test_continuations_per_block(void **state)
{
	(void)state;
	t *x = start(NULL);
	uint8_t get = 0x82;
	int rv = send_frame(x, 1, 0, 1, &get, 1);
	for (int i = 0; i < 100 && rv == 0; i++)
		rv = send_frame(x, 9, 0, 1, &get, 1);
	expect_close(x, rv, SBX_H2G_CALM, SBX_H2G_R_CONTINUATIONS);
	stop(x);
}

static void test_empty_continuations(void **state)
{
	(void)state;
	sbx_h2g_limits l;
	limits(&l);
	l.max_continuations = 100000;
	t *x = start(&l);
	uint8_t get = 0x82;
	int rv = send_frame(x, 1, 0, 1, &get, 1);
	for (int i = 0; i < 10000 && rv == 0; i++)
		rv = send_frame(x, 9, 0, 1, NULL, 0);
	expect_close(x, rv, SBX_H2G_CALM, SBX_H2G_R_EMPTY);
	stop(x);
}

static void test_continuation_wrong_stream(void **state)
{
	(void)state;
	t *x = start(NULL);
	uint8_t get = 0x82;
	assert_int_equal(send_frame(x, 1, 0, 1, &get, 1), 0);
	expect_close(x, send_frame(x, 9, 4, 3, &get, 1), SBX_H2G_PROTOCOL_ERROR,
		     SBX_H2G_R_PROTOCOL);
	stop(x);
}

/* ---- rates ---- */

static void test_rapid_reset(void **state)
{
	(void)state;
	t *x = start(NULL);
	int rv = 0;
	uint32_t id = 1;
	uint8_t cancel[4] = {0, 0, 0, 8};
	for (int i = 0; i < 100000 && rv == 0; i++, id += 2) {
		rv = request(x, id, "GET", "/v1/sessions", "Bearer good", true);
		if (rv == 0)
			rv = send_frame(x, 3, 0, id, cancel, 4);
		if (rv == 0)
			drain(x);
	}
	expect_close(x, rv, SBX_H2G_CALM, SBX_H2G_R_RST);
	stop(x);
}

/* libcurl resets each stream after it ended (STREAM_CLOSED): a kept
 * connection doing thousands of requests faster than --rate-rst is not a
 * rapid reset; resets of ended streams beyond what the streams earned
 * still are. */
static void test_resets_of_ended_streams(void **state)
{
	(void)state;
	t *x = start(NULL);
	uint8_t closed[4] = {0, 0, 0, 5};
	uint32_t id = 1;
	for (int i = 0; i < 3000; i++, id += 2) { /* all at one instant: no refill */
		assert_int_equal(request(x, id, "POST", "/v1/x", "Bearer good", true), 0);
		uint8_t h[1] = {0x88};
		assert_int_equal(server_frame(x, 1, 0x4, id, h, 1), SBX_H2G_OK);
		assert_int_equal(server_frame(x, 0, 0x1, id, "ok", 2), SBX_H2G_OK);
		assert_int_equal(send_frame(x, 3, 0, id, closed, 4), SBX_H2G_OK);
		drain(x);
	}
	/* control: resets of those ended streams again, nothing earned them */
	int rv = 0;
	for (uint32_t k = 1; k < id && rv == 0; k += 2)
		rv = send_frame(x, 3, 0, k, closed, 4);
	expect_close(x, rv, SBX_H2G_CALM, SBX_H2G_R_RST);
	stop(x);
}

static void test_server_refusals_count(void **state)
{
	(void)state;
	t *x = start(NULL);
	int rv = 0;
	uint32_t id = 1;
	uint8_t refused[4] = {0, 0, 0, 7};
	for (int i = 0; i < 100000 && rv == 0; i++, id += 2) {
		rv = request(x, id, "GET", "/v1/sessions", "Bearer good", true);
		if (rv == 0)
			rv = server_frame(x, 3, 0, id, refused, 4);
		if (rv == 0)
			drain(x);
	}
	assert_int_equal(rv, SBX_H2G_CLOSE);
	assert_int_equal(sbx_h2g_reason_of(x->g, NULL), SBX_H2G_R_RST);
	stop(x);
}

static void flood(uint8_t type, size_t len, uint32_t id, sbx_h2g_reason why)
{
	t *x = start(NULL);
	uint8_t p[8] = {0, 0, 0, 1, 0, 0, 0, 0};
	int rv = 0;
	if (type == 2 || type == 0)
		assert_int_equal(request(x, 1, "POST", "/", "Bearer good", false), 0);
	for (int i = 0; i < 100000 && rv == 0; i++) {
		rv = send_frame(x, type, 0, id, p, len);
		if (rv == 0 && i % 256 == 0)
			drain(x);
	}
	expect_close(x, rv, SBX_H2G_CALM, why);
	stop(x);
}

static void test_ping_flood(void **state)
{
	(void)state;
	flood(6, 8, 0, SBX_H2G_R_PING);
}

static void test_settings_flood(void **state)
{
	(void)state;
	flood(4, 0, 0, SBX_H2G_R_SETTINGS);
}

static void test_priority_flood(void **state)
{
	(void)state;
	flood(2, 5, 1, SBX_H2G_R_PRIORITY);
}

static void test_empty_data_flood(void **state)
{
	(void)state;
	flood(0, 0, 1, SBX_H2G_R_EMPTY);
}

static void test_unknown_frames_flood(void **state)
{
	(void)state;
	flood(0x42, 4, 0, SBX_H2G_R_EMPTY);
}

static void test_rates_refill(void **state)
{
	(void)state;
	t *x = start(NULL);
	uint8_t p[8] = {0};
	/* 5 PINGs a second for a minute: under the rate, never cut */
	for (int i = 0; i < 300; i++) {
		x->now += 200;
		assert_int_equal(send_frame(x, 6, 0, 0, p, 8), 0);
	}
	stop(x);
}

static void test_stream_rate(void **state)
{
	(void)state;
	sbx_h2g_limits l;
	limits(&l);
	l.streams = (sbx_h2g_rate){10, 20};
	t *x = start(&l);
	int rv = 0;
	uint32_t id = 1;
	for (int i = 0; i < 1000 && rv == 0; i++, id += 2) {
		rv = request(x, id, "GET", "/healthz", NULL, true);
		if (rv == 0) {
			uint8_t h[1] = {0x88};
			rv = server_frame(x, 1, 0x5, id, h, 1);
		}
		if (rv == 0)
			drain(x);
	}
	expect_close(x, rv, SBX_H2G_CALM, SBX_H2G_R_STREAMS);
	stop(x);
}

/* ---- malformed frames ---- */

static void test_bad_sizes(void **state)
{
	(void)state;
	t *x = start(NULL);
	uint8_t p[8] = {0};
	expect_close(x, send_frame(x, 6, 0, 0, p, 7), SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
	stop(x);
	x = start(NULL);
	static uint8_t big[16385];
	assert_int_equal(request(x, 1, "POST", "/", "Bearer good", false), 0);
	expect_close(x, send_frame(x, 0, 0, 1, big, sizeof(big)), SBX_H2G_PROTOCOL_ERROR,
		     SBX_H2G_R_PROTOCOL);
	stop(x);
	x = start(NULL);
	expect_close(x, send_frame(x, 8, 0, 0, "\0\0\0\0", 4), SBX_H2G_PROTOCOL_ERROR,
		     SBX_H2G_R_PROTOCOL);
	stop(x);
}

static void test_not_h2(void **state)
{
	(void)state;
	sbx_h2g_limits l;
	limits(&l);
	sbx_h2g *g = sbx_h2g_new(&l, NULL);
	assert_int_equal(sbx_h2g_from_client(g, (const uint8_t *)"GET / HTTP/1.1\r\n", 16, 0),
			 SBX_H2G_NOT_H2);
	assert_int_equal(sbx_h2g_preface_match((const uint8_t *)"PRI * HT", 8), 0);
	assert_int_equal(sbx_h2g_preface_match((const uint8_t *)"GET ", 4), -1);
	assert_int_equal(sbx_h2g_preface_match((const uint8_t *)PREFACE "xx", 26), 1);
	sbx_h2g_free(g);
}

static void test_byte_at_a_time(void **state)
{
	(void)state;
	/* frames split anywhere: the same outcome as whole */
	sbx_h2g_limits l;
	limits(&l);
	sbx_h2g_hooks hooks = {check, body, NULL, NULL};
	sbx_h2g *g = sbx_h2g_new(&l, &hooks);
	nghttp2_hd_deflater *def;
	nghttp2_hd_deflate_new(&def, 4096);
	uint8_t in[2048];
	size_t n = 0;
	memcpy(in, PREFACE, 24);
	n = 24;
	frame(in + n, 0, 4, 0, 0);
	n += 9;
	nghttp2_nv nv[] = {NV(":method", "GET"), NV(":scheme", "http"), NV(":path", "/x"),
			   NV(":authority", "h"), NV("authorization", "Bearer good")};
	ssize_t hl = nghttp2_hd_deflate_hd(def, in + n + 9, 1024, nv, 5);
	frame(in + n, (uint32_t)hl, 1, 5, 1);
	n += 9 + (size_t)hl;
	for (size_t i = 0; i < n; i++)
		assert_int_equal(sbx_h2g_from_client(g, in + i, 1, 0), 0);
	seen s;
	scan(sbx_h2g_to_h2o(g), &s);
	assert_int_equal(s.count[1], 1);
	assert_int_equal(s.count[4], 1);
	nghttp2_hd_deflate_del(def);
	sbx_h2g_free(g);
}

/* ---- reset budgets across connections (front_budget.c) ---- */

/* The front's hooks in small: a tenant per token, charged to "t:TOKEN"
 * in the shared budgets (ud), refused while it cools down. */
static sbx_fb *fb_now;
static uint64_t fb_clock;

static int shared_check(void *ud, const sbx_h2g_req *r)
{
	char name[64];
	(void)ud;
	if (!r->authorization || r->authorization_len < 8)
		return 401;
	snprintf(name, sizeof(name), "t:%.*s", (int)r->authorization_len - 7, r->authorization + 7);
	uint32_t key = sbx_fb_key(fb_now, name, fb_clock);
	if (sbx_fb_penalised(fb_now, key, fb_clock))
		return SBX_H2G_CHECK_PENALTY;
	*r->key = key;
	return 0;
}

static bool shared_reset(void *ud, uint32_t key, uint64_t now)
{
	(void)ud;
	return sbx_fb_reset(fb_now, key, now);
}

static t *shared_conn(uint64_t now)
{
	sbx_h2g_hooks h = {shared_check, body, shared_reset, NULL};
	fb_clock = now;
	t *x = start_with(NULL, &h);
	x->now = now;
	return x;
}

/* HEADERS + RST_STREAM(CANCEL) on id before any answer; the guard's result. */
static int reset_one(t *x, uint32_t id, const char *auth)
{
	uint8_t cancel[4] = {0, 0, 0, 8};
	int rv = request(x, id, "POST", "/v1/sessions/s/runs", auth, true);
	if (rv == 0)
		rv = send_frame(x, 3, 0, id, cancel, 4);
	if (rv == 0)
		drain(x);
	return rv;
}

/* ---- relaying h2o's frames without copying them (the front's direct path) ---- */

/* Appends a frame to b (at *n). */
static void put_frame(uint8_t *b, size_t *n, uint8_t type, uint8_t flags, uint32_t id, size_t len)
{
	frame(b + *n, (uint32_t)len, type, flags, id);
	memset(b + *n + 9, 'x', len);
	*n += 9 + len;
}

static void test_span_leaves_whole_frames_in_place(void **state)
{
	(void)state;
	t *x = start(NULL);
	static uint8_t b[4096];
	size_t n = 0, off = 1, len = 1;
	drain(x);
	assert_int_equal(request(x, 1, "GET", "/v1/x", "Bearer good", true), 0);
	drain(x);
	put_frame(b, &n, 1, 0x4, 1, 1); /* HEADERS */
	put_frame(b, &n, 0, 0, 1, 100); /* DATA */
	put_frame(b, &n, 0, 0, 1, 50);	/* DATA */
	size_t whole = n;
	put_frame(b, &n, 0, 0x1, 1, 20); /* DATA, END_STREAM: only 5 bytes of it now */
	assert_int_equal(sbx_h2g_from_server_span(x->g, b, whole + 5, x->now, &off, &len), 0);
	assert_int_equal(off, 0);
	assert_int_equal(len, whole); /* every whole frame, left where it lies */
	assert_int_equal(h2g_avail_of(sbx_h2g_to_client(x->g)), 0);
	assert_int_equal(sbx_h2g_open_streams(x->g), 1);
	/* the rest of a frame assembled across calls is copied: its bytes moved */
	assert_int_equal(
		sbx_h2g_from_server_span(x->g, b + whole + 5, n - whole - 5, x->now, &off, &len),
		0);
	assert_int_equal(len, 0);
	assert_int_equal(h2g_avail_of(sbx_h2g_to_client(x->g)), 29);
	assert_int_equal(sbx_h2g_open_streams(x->g), 0); /* its END_STREAM was seen */
	stop(x);
}

/* What the guard says itself after frames it left in place comes after
 * them: they are copied into the client buffer first. */
static void test_span_keeps_order_with_goaway(void **state)
{
	(void)state;
	t *x = start(NULL);
	static uint8_t b[4096];
	size_t n = 0, off = 1, len = 1;
	assert_int_equal(request(x, 1, "GET", "/v1/x", "Bearer good", false), 0);
	drain(x);
	put_frame(b, &n, 0, 0, 1, 100);
	frame(b + n, SERVER_FRAME_MAX + 1, 0, 0, 1); /* too large: h2o never says that */
	n += 9;
	int rv = sbx_h2g_from_server_span(x->g, b, n, x->now, &off, &len);
	assert_int_equal(len, 0);
	expect_close(x, rv, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_SERVER);
	const sbx_h2g_buf *c = sbx_h2g_to_client(x->g);
	assert_int_equal(c->data[c->off + 3], 0); /* the DATA first */
	assert_memory_equal(c->data + c->off, b, 109);
	stop(x);
}

/* Something already queued for the client (a 401 answered here): h2o's
 * frames go after it, copied. */
static void test_span_after_queued_bytes(void **state)
{
	(void)state;
	t *x = start(NULL);
	static uint8_t b[256];
	size_t n = 0, off = 1, len = 1;
	assert_int_equal(request(x, 1, "GET", "/v1/x", "Bearer good", true), 0);
	drain(x);
	assert_int_equal(request(x, 3, "GET", "/v1/x", "Bearer bad", true), 0);
	size_t queued = h2g_avail_of(sbx_h2g_to_client(x->g));
	assert_true(queued > 0);
	put_frame(b, &n, 1, 0x5, 1, 1);
	assert_int_equal(sbx_h2g_from_server_span(x->g, b, n, x->now, &off, &len), 0);
	assert_int_equal(len, 0);
	const sbx_h2g_buf *c = sbx_h2g_to_client(x->g);
	assert_int_equal(h2g_avail_of(c), queued + n);
	assert_memory_equal(c->data + c->off + queued, b, n);
	stop(x);
}

static void test_reset_budget_outlives_connections(void **state)
{
	(void)state;
	fb_now = sbx_fb_new((sbx_h2g_rate){10, 50}, 10000);
	assert_non_null(fb_now);
	/* the first connection spends the tenant's 50 and is cut on the 51st,
	 * long before its own per-connection budget (1000) */
	t *x = shared_conn(1000);
	int rv = 0, n = 0;
	for (uint32_t id = 1; rv == 0 && n < 1000; id += 2, n++)
		rv = reset_one(x, id, "Bearer mallory");
	assert_int_equal(n, 51);
	expect_close(x, rv, SBX_H2G_CALM, SBX_H2G_R_RESET_BUDGET);
	stop(x);
	/* reconnecting gets no fresh budget: its first request closes it */
	x = shared_conn(1500);
	expect_close(x, request(x, 1, "GET", "/v1/sessions", "Bearer mallory", true), SBX_H2G_CALM,
		     SBX_H2G_R_PENALTY);
	stop(x);
	/* another tenant is not touched, on a connection of its own */
	x = shared_conn(1600);
	for (uint32_t id = 1; id < 40; id += 2)
		assert_int_equal(reset_one(x, id, "Bearer alice"), 0);
	stop(x);
	/* the cool-down over, mallory is served again with what refilled */
	x = shared_conn(1000 + 10001);
	for (uint32_t id = 1; id < 40; id += 2)
		assert_int_equal(reset_one(x, id, "Bearer mallory"), 0);
	stop(x);
	sbx_fb_free(fb_now);
}

/* The control: a client that reconnects many times and resets a few
 * streams each time, or resets streams h2o already answered, is never cut. */
static void test_reset_budget_spares_legit_clients(void **state)
{
	(void)state;
	fb_now = sbx_fb_new((sbx_h2g_rate){10, 50}, 10000);
	uint64_t now = 1000;
	for (int conn = 0; conn < 30; conn++, now += 1000) {
		t *x = shared_conn(now);
		for (uint32_t id = 1; id < 10; id += 2)
			assert_int_equal(reset_one(x, id, "Bearer alice"), 0);
		stop(x);
	}
	/* 500 resets of streams h2o had answered (a client cancelling a
	 * long stream of output) charge nothing */
	t *x = shared_conn(now);
	uint8_t cancel[4] = {0, 0, 0, 8}, st[1] = {0x88};
	for (uint32_t id = 1; id < 1000; id += 2) {
		x->now += 3; /* under the per-connection rate (33/s) */
		assert_int_equal(
			request(x, id, "GET", "/v1/sessions/s/runs/r", "Bearer alice", true), 0);
		assert_int_equal(server_frame(x, 1, 0x4, id, st, 1), SBX_H2G_OK);
		assert_int_equal(send_frame(x, 3, 0, id, cancel, 4), SBX_H2G_OK);
		drain(x);
	}
	uint32_t code;
	assert_int_equal(sbx_h2g_reason_of(x->g, &code), SBX_H2G_R_NONE);
	stop(x);
	sbx_fb_free(fb_now);
}

/* The table is bounded: a principal pushed out by many others leaves
 * keys that charge nobody; one cooling down is kept over idle ones. */
static void test_reset_budget_table(void **state)
{
	(void)state;
	sbx_fb *b = sbx_fb_new((sbx_h2g_rate){1, 2}, 5000);
	char name[32];
	uint32_t bad = sbx_fb_key(b, "a:10.0.0.1", 0), idle = sbx_fb_key(b, "a:10.0.0.2", 0);
	assert_int_not_equal(bad, 0);
	assert_int_equal(sbx_fb_key(b, "a:10.0.0.1", 1), bad); /* found again */
	assert_true(sbx_fb_reset(b, bad, 1));
	assert_true(sbx_fb_reset(b, bad, 1));
	assert_false(sbx_fb_reset(b, bad, 1));
	assert_true(sbx_fb_penalised(b, bad, 2));
	assert_false(sbx_fb_penalised(b, idle, 2));
	for (int i = 0; i < 4000; i++) {
		snprintf(name, sizeof(name), "a:172.16.%d.%d", i / 256, i % 256);
		assert_false(sbx_fb_penalised(b, sbx_fb_key(b, name, 3 + (uint64_t)i), 3));
	}
	assert_true(sbx_fb_penalised(b, bad, 4000));		       /* kept while cooling down */
	assert_false(sbx_fb_penalised(b, bad, 5002));		       /* and over after it */
	assert_int_not_equal(sbx_fb_key(b, "a:10.0.0.2", 6000), idle); /* pushed out */
	assert_true(sbx_fb_reset(b, idle, 6000)); /* a stale key charges nobody */
	assert_false(sbx_fb_penalised(b, idle, 6000));
	sbx_fb_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_curl_like_sequence),
		cmocka_unit_test(test_large_upload),
		cmocka_unit_test(test_long_streaming_window_updates),
		cmocka_unit_test(test_settings_clamped),
		cmocka_unit_test(test_unauthenticated_answered_here),
		cmocka_unit_test(test_body_budget_by_data),
		cmocka_unit_test(test_body_budget_by_content_length),
		cmocka_unit_test(test_hpack_bomb),
		cmocka_unit_test(test_too_many_fields),
		cmocka_unit_test(test_zero_length_name),
		cmocka_unit_test(test_continuations_per_block),
		cmocka_unit_test(test_empty_continuations),
		cmocka_unit_test(test_continuation_wrong_stream),
		cmocka_unit_test(test_rapid_reset),
		cmocka_unit_test(test_resets_of_ended_streams),
		cmocka_unit_test(test_server_refusals_count),
		cmocka_unit_test(test_ping_flood),
		cmocka_unit_test(test_settings_flood),
		cmocka_unit_test(test_priority_flood),
		cmocka_unit_test(test_empty_data_flood),
		cmocka_unit_test(test_unknown_frames_flood),
		cmocka_unit_test(test_rates_refill),
		cmocka_unit_test(test_stream_rate),
		cmocka_unit_test(test_bad_sizes),
		cmocka_unit_test(test_not_h2),
		cmocka_unit_test(test_byte_at_a_time),
		cmocka_unit_test(test_span_leaves_whole_frames_in_place),
		cmocka_unit_test(test_span_keeps_order_with_goaway),
		cmocka_unit_test(test_span_after_queued_bytes),
		cmocka_unit_test(test_reset_budget_outlives_connections),
		cmocka_unit_test(test_reset_budget_spares_legit_clients),
		cmocka_unit_test(test_reset_budget_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

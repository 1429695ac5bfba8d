/*
 * h2guard_out.c: the bytes the guard writes itself: its buffers, the
 * frames it injects toward the client (GOAWAY, RST_STREAM, WINDOW_UPDATE)
 * and its own answers (401/503: HEADERS in HPACK literals without
 * indexing, so neither h2o's encoder table nor the client's decoder table
 * changes, then DATA and RST_STREAM(NO_ERROR)).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h2guard_int.h"

/* ---- buffers ---- */

int sbx_h2g_buf_put(sbx_h2g_buf *b, const void *p, size_t n)
{
	if (n == 0)
		return 0;
	if (b->off > 0 && b->len + n > b->cap) {
		memmove(b->data, b->data + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
	}
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *d = realloc(b->data, cap);
		if (!d)
			return -1;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

void sbx_h2g_buf_consume(sbx_h2g_buf *b, size_t n)
{
	b->off += n;
	if (b->off >= b->len)
		b->off = b->len = 0;
}

void sbx_h2g_buf_free(sbx_h2g_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

size_t h2g_avail(const sbx_h2g_buf *b)
{
	return b->len - b->off;
}

void h2g_append(sbx_h2g_buf *dst, const sbx_h2g_buf *src)
{
	if (h2g_avail(src) > 0)
		sbx_h2g_buf_put(dst, src->data + src->off, h2g_avail(src));
}

/* ---- frames out ---- */

sbx_h2g_buf *h2g_out(sbx_h2g *g)
{
	if (g->span_len > 0) {
		sbx_h2g_buf_put(&g->to_client, g->span, g->span_len);
		g->span_len = 0;
	}
	return &g->to_client;
}

/* Where the guard's own frames go: after h2o's first SETTINGS (the
 * server's connection preface must come first), between h2o's frames. */
sbx_h2g_buf *h2g_inj(sbx_h2g *g)
{
	return g->server_settings_seen ? h2g_out(g) : &g->early;
}

void h2g_frame_head(sbx_h2g_buf *b, uint32_t len, uint8_t type, uint8_t flags, uint32_t id)
{
	uint8_t h[9] = {(uint8_t)(len >> 16),
			(uint8_t)(len >> 8),
			(uint8_t)len,
			type,
			flags,
			(uint8_t)(id >> 24 & 0x7f),
			(uint8_t)(id >> 16),
			(uint8_t)(id >> 8),
			(uint8_t)id};
	sbx_h2g_buf_put(b, h, sizeof(h));
}

void h2g_u32_frame(sbx_h2g_buf *b, uint8_t type, uint32_t id, uint32_t v)
{
	uint8_t p[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
	h2g_frame_head(b, 4, type, 0, id);
	sbx_h2g_buf_put(b, p, 4);
}

void h2g_credit_window(sbx_h2g *g, uint32_t n)
{
	/* DATA the guard discarded still used the client's connection window. */
	if (n > 0)
		h2g_u32_frame(h2g_inj(g), F_WINDOW_UPDATE, 0, n);
}

void sbx_h2g_goaway(sbx_h2g *g, uint32_t code, sbx_h2g_reason why, const char *debug)
{
	size_t dl = debug ? strlen(debug) : 0;
	uint8_t p[8] = {(uint8_t)(g->last_id >> 24 & 0x7f),
			(uint8_t)(g->last_id >> 16),
			(uint8_t)(g->last_id >> 8),
			(uint8_t)g->last_id,
			(uint8_t)(code >> 24),
			(uint8_t)(code >> 16),
			(uint8_t)(code >> 8),
			(uint8_t)code};

	if (g->closed)
		return;
	g->closed = true;
	g->reason = why;
	g->code = code;
	sbx_h2g_buf *out = h2g_out(g);
	if (!g->server_settings_seen) {
		/* h2o has not spoken yet: an empty SETTINGS is our preface */
		g->server_settings_seen = true;
		h2g_frame_head(out, 0, F_SETTINGS, 0, 0);
		h2g_append(out, &g->early);
	}
	h2g_frame_head(out, (uint32_t)(8 + dl), F_GOAWAY, 0, 0);
	sbx_h2g_buf_put(out, p, 8);
	sbx_h2g_buf_put(out, debug, dl);
}

int h2g_fail(sbx_h2g *g, uint32_t code, sbx_h2g_reason why)
{
	sbx_h2g_goaway(g, code, why, sbx_h2g_reason_names[why]);
	return SBX_H2G_CLOSE;
}

/* HPACK integer with an n-bit prefix (RFC 7541 5.1) after the pattern bits. */
static void hpack_int(sbx_h2g_buf *b, uint8_t pattern, int nbits, size_t v)
{
	uint8_t out[8];
	size_t n = 0, max = (1u << nbits) - 1;

	if (v < max) {
		out[n++] = (uint8_t)(pattern | v);
	} else {
		out[n++] = (uint8_t)(pattern | max);
		v -= max;
		while (v >= 128) {
			out[n++] = (uint8_t)(v % 128 + 128);
			v /= 128;
		}
		out[n++] = (uint8_t)v;
	}
	sbx_h2g_buf_put(b, out, n);
}

/* A field as a literal without indexing, name from the static table: the
 * client's decoder table and h2o's encoder table stay as they were. */
static void hpack_field(sbx_h2g_buf *b, size_t name_index, const char *v, size_t vl)
{
	hpack_int(b, 0x00, 4, name_index);
	hpack_int(b, 0x00, 7, vl);
	sbx_h2g_buf_put(b, v, vl);
}

/* Answer stream id with status and the front's error body; when the client
 * is still sending, RST_STREAM(NO_ERROR) (RFC 9113 8.1) follows once it has
 * sent more than a small body (h2g_answered_data). */
void h2g_answer(sbx_h2g *g, uint32_t id, int status, bool msgpack, bool client_done)
{
	char body[512], num[24], st[8];
	const char *ctype = "application/json";
	size_t bl = g->hooks.body ? g->hooks.body(g->hooks.ud, status, msgpack, body, sizeof(body),
						  &ctype)
				  : 0;
	sbx_h2g_buf hb = {0}, *out = h2g_inj(g);

	snprintf(st, sizeof(st), "%03d", status % 1000);
	hpack_field(&hb, 8, st, 3);		    /* :status */
	hpack_field(&hb, 31, ctype, strlen(ctype)); /* content-type */
	int nl = snprintf(num, sizeof(num), "%zu", bl);
	hpack_field(&hb, 28, num, (size_t)nl); /* content-length */
	if (status == 401)
		hpack_field(&hb, 61, "Bearer", 6); /* www-authenticate */
	else if (status == 503)
		hpack_field(&hb, 53, "1", 1); /* retry-after */
	h2g_frame_head(out, (uint32_t)h2g_avail(&hb), F_HEADERS, FL_END_HEADERS, id);
	h2g_append(out, &hb);
	sbx_h2g_buf_free(&hb);
	h2g_frame_head(out, (uint32_t)bl, F_DATA, FL_END_STREAM, id);
	sbx_h2g_buf_put(out, body, bl);
	if (!client_done) {
		if (g->n_answered < H2G_MAX_ANSWERED) {
			g->answered[g->n_answered].id = id;
			g->answered[g->n_answered++].discarded = 0;
		} else {
			h2g_u32_frame(out, F_RST, id, 0 /* NO_ERROR */);
		}
	}
	if (status == 401)
		g->n401++;
	else
		g->n503++;
}

void h2g_answered_forget(sbx_h2g *g, uint32_t id)
{
	for (size_t i = 0; i < g->n_answered; i++)
		if (g->answered[i].id == id) {
			g->answered[i] = g->answered[--g->n_answered];
			return;
		}
}

void h2g_answered_data(sbx_h2g *g, uint32_t id, uint32_t len, bool end)
{
	for (size_t i = 0; i < g->n_answered; i++) {
		if (g->answered[i].id != id)
			continue;
		g->answered[i].discarded += len;
		if (!end && g->answered[i].discarded > H2G_ANSWERED_DISCARD_MAX)
			h2g_u32_frame(h2g_inj(g), F_RST, id, 0 /* NO_ERROR */);
		if (end || g->answered[i].discarded > H2G_ANSWERED_DISCARD_MAX)
			h2g_answered_forget(g, id);
		return;
	}
}

/*
 * h2guard.c: the frame guard (h2guard.h).  Client frames are assembled
 * whole (at most 16384 + 9 bytes: the frame size h2o advertises), checked
 * and forwarded; header blocks are held until complete, decoded on the way
 * with nghttp2's HPACK inflater (kept in step with h2o's decoder: every
 * block the guard decodes reaches h2o unchanged, in order), and only then
 * forwarded or answered here.  h2o's frames are relayed whole, so the
 * guard's own frames always land between them, never inside a
 * HEADERS+CONTINUATION run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h2guard_int.h"

const char *const sbx_h2g_reason_names[SBX_H2G_R_COUNT] = {
	"none",		 "protocol",	   "compression",   "header_list",	 "header_fields",
	"continuations", "rst_stream",	   "empty_frames",  "continuation_rate", "ping",
	"settings",	 "priority",	   "window_update", "stream_rate",	 "concurrency",
	"server",	 "header_timeout", "idle_timeout",  "evicted",		 "reset_budget",
	"penalty",
};

/* ---- rates ---- */

bool sbx_h2g_take(bucket *b, const sbx_h2g_rate *r, uint64_t now)
{
	if (!b->started) {
		b->started = true;
		b->tokens = r->burst;
		b->last_ms = now;
	}
	if (now > b->last_ms) {
		b->tokens += (double)(now - b->last_ms) * r->rate / 1000.0;
		if (b->tokens > r->burst)
			b->tokens = r->burst;
		b->last_ms = now;
	}
	if (b->tokens < 1.0)
		return false;
	b->tokens -= 1.0;
	return true;
}

/* ---- streams ---- */

static stream *find_stream(sbx_h2g *g, uint32_t id)
{
	for (size_t i = 0; i < g->n_streams; i++)
		if (g->streams[i].id == id)
			return &g->streams[i];
	return NULL;
}

/* The server-wide count of held body bytes: other connections' guards
 * change it from other threads (a stream's release comes with h2o's
 * output, on sbxd's loop thread; see front_direct.c). */
static uint64_t held_total(const sbx_h2g *g)
{
	return g->lim.held_total ? __atomic_load_n(g->lim.held_total, __ATOMIC_RELAXED) : 0;
}

static void held_add(sbx_h2g *g, uint64_t n)
{
	if (g->lim.held_total)
		__atomic_fetch_add(g->lim.held_total, n, __ATOMIC_RELAXED);
}

static void release(sbx_h2g *g, stream *s)
{
	g->held -= s->held;
	held_add(g, -s->held);
	s->held = 0;
}

static void drop_stream(sbx_h2g *g, stream *s)
{
	release(g, s);
	*s = g->streams[--g->n_streams];
}

static stream *add_stream(sbx_h2g *g, uint32_t id)
{
	if (g->n_streams == g->cap_streams) {
		size_t cap = g->cap_streams ? g->cap_streams * 2 : 8;
		stream *n = realloc(g->streams, cap * sizeof(*n));
		if (!n)
			return NULL;
		g->streams = n;
		g->cap_streams = cap;
	}
	stream *s = &g->streams[g->n_streams++];
	memset(s, 0, sizeof(*s));
	s->id = id;
	return s;
}

/* A stream that ended both ways earns its client one RST_STREAM for it:
 * libcurl resets every finished stream (STREAM_CLOSED), so a kept
 * connection doing more than --rate-rst requests a second would
 * otherwise be cut as a rapid reset. */
#define RST_CREDIT_MAX 1024

static void maybe_done(sbx_h2g *g, stream *s)
{
	if (s->client_closed && s->server_closed) {
		drop_stream(g, s);
		if (g->rst_credit < RST_CREDIT_MAX)
			g->rst_credit++;
	}
}

/* ---- header blocks ---- */

static void keep(char *dst, size_t cap, size_t *len, bool *is_long, const uint8_t *v, size_t vl)
{
	if (vl > cap) {
		if (is_long)
			*is_long = true;
		vl = cap;
	}
	memcpy(dst, v, vl);
	*len = vl;
}

static bool name_is(const nghttp2_nv *nv, const char *s)
{
	size_t n = strlen(s);
	return nv->namelen == n && memcmp(nv->name, s, n) == 0;
}

static int on_field(sbx_h2g *g, const nghttp2_nv *nv)
{
	if (nv->namelen == 0)
		return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
	g->hb_decoded += nv->namelen + nv->valuelen + 32;
	if (g->hb_decoded > g->lim.max_header_list)
		return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_HEADER_LIST);
	if (++g->hb_fields > g->lim.max_header_fields)
		return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_HEADER_FIELDS);
	if (name_is(nv, ":path"))
		keep(g->path, sizeof(g->path), &g->path_len, &g->path_long, nv->value,
		     nv->valuelen);
	else if (name_is(nv, ":method"))
		keep(g->method, sizeof(g->method), &g->method_len, NULL, nv->value, nv->valuelen);
	else if (name_is(nv, "authorization"))
		keep(g->auth, sizeof(g->auth), &g->auth_len, &g->auth_long, nv->value,
		     nv->valuelen);
	else if (name_is(nv, "accept"))
		keep(g->accept, sizeof(g->accept), &g->accept_len, NULL, nv->value, nv->valuelen);
	else if (name_is(nv, "content-length")) {
		int64_t v = 0;
		bool ok = nv->valuelen > 0 && nv->valuelen <= 18;
		for (size_t i = 0; ok && i < nv->valuelen; i++) {
			ok = nv->value[i] >= '0' && nv->value[i] <= '9';
			v = v * 10 + (nv->value[i] - '0');
		}
		/* A malformed one is h2o's to refuse; the guard only reads it. */
		g->content_length = ok ? v : -1;
	}
	return SBX_H2G_OK;
}

/* Feed a fragment to the inflater; final: the block ends with it. */
static int inflate(sbx_h2g *g, const uint8_t *in, size_t n, bool final)
{
	for (;;) {
		nghttp2_nv nv;
		int fl = 0;
		ssize_t rv = nghttp2_hd_inflate_hd2(g->inf, &nv, &fl, in, n, final ? 1 : 0);
		if (rv < 0)
			return h2g_fail(g, SBX_H2G_COMPRESSION_ERROR, SBX_H2G_R_COMPRESSION);
		in += rv;
		n -= (size_t)rv;
		if ((fl & NGHTTP2_HD_INFLATE_EMIT) && on_field(g, &nv) != SBX_H2G_OK)
			return SBX_H2G_CLOSE;
		if (fl & NGHTTP2_HD_INFLATE_FINAL) {
			nghttp2_hd_inflate_end_headers(g->inf);
			return SBX_H2G_OK;
		}
		if (n == 0 && !(fl & NGHTTP2_HD_INFLATE_EMIT)) {
			if (final) /* a final block the inflater did not finish */
				return h2g_fail(g, SBX_H2G_COMPRESSION_ERROR,
						SBX_H2G_R_COMPRESSION);
			return SBX_H2G_OK;
		}
	}
}

static bool ascii_has(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);
	for (size_t i = 0; i + k <= n; i++)
		if (!memcmp(s + i, needle, k))
			return true;
	return false;
}

/* The block of a new request is complete: let it through or answer it. */
static int block_done(sbx_h2g *g)
{
	uint32_t id = g->hb_id;
	stream *s = find_stream(g, id);
	bool trailers = s != NULL || id <= g->last_id;
	int status = 0;
	uint32_t key = 0;

	g->hb_active = false;
	if (!trailers) {
		g->last_id = id;
		sbx_h2g_req r = {
			.key = &key,
			.stream_id = id,
			.path = g->path_long ? NULL : g->path,
			.path_len = g->path_long ? 0 : g->path_len,
			.method = g->method,
			.method_len = g->method_len,
			.authorization = g->auth_long ? NULL : g->auth,
			.authorization_len = g->auth_long ? 0 : g->auth_len,
			.accept = g->accept,
			.accept_len = g->accept_len,
			.content_length = g->content_length,
		};
		status = g->hooks.check ? g->hooks.check(g->hooks.ud, &r) : 0;
		if (status == SBX_H2G_CHECK_PENALTY)
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_PENALTY);
		/* Larger than --max-body is h2o's 413, as before the guard. */
		if (status == 0 && r.content_length > 0 &&
		    (uint64_t)r.content_length <= g->lim.max_body &&
		    (g->held + (uint64_t)r.content_length > g->lim.body_conn ||
		     (g->lim.held_total &&
		      held_total(g) + (uint64_t)r.content_length > g->lim.body_total)))
			status = 503;
	}
	if (status != 0) {
		/* h2o decodes the block (its HPACK table stays in step) and frees
		 * the stream at once: END_STREAM cleared, then a CANCEL. */
		g->hb_raw.data[g->hb_raw.off + 4] &= (uint8_t)~FL_END_STREAM;
		h2g_append(&g->to_h2o, &g->hb_raw);
		h2g_u32_frame(&g->to_h2o, F_RST, id, 0x8 /* CANCEL */);
		h2g_answer(g, id, status, ascii_has(g->accept, g->accept_len, "msgpack"),
			   g->hb_end_stream);
	} else {
		h2g_append(&g->to_h2o, &g->hb_raw);
		if (!trailers) {
			if (g->n_streams >= MAX_STREAMS)
				return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_CONCURRENCY);
			s = add_stream(g, id);
			if (!s)
				return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_CONCURRENCY);
			s->msgpack = ascii_has(g->accept, g->accept_len, "msgpack");
			s->key = key;
		}
		if (s && g->hb_end_stream) {
			s->client_closed = true;
			maybe_done(g, s);
		}
	}
	sbx_h2g_buf_consume(&g->hb_raw, h2g_avail(&g->hb_raw));
	return SBX_H2G_OK;
}

/* The fragment of a HEADERS payload (padding and priority stripped). */
static int headers_fragment(const uint8_t *p, uint32_t len, uint8_t flags, const uint8_t **frag,
			    size_t *flen)
{
	size_t pad = 0, skip = 0;
	if (flags & FL_PADDED) {
		if (len < 1)
			return -1;
		pad = p[0];
		skip = 1;
	}
	if (flags & FL_PRIO)
		skip += 5;
	if (skip + pad > len)
		return -1;
	*frag = p + skip;
	*flen = len - skip - pad;
	return 0;
}

static int on_header_frame(sbx_h2g *g, const uint8_t *f, uint32_t len, uint8_t type, uint8_t flags,
			   uint32_t id, uint64_t now)
{
	const uint8_t *frag = f + 9;
	size_t flen = len;

	if (type == F_HEADERS) {
		if (id == 0 || !(id & 1) || headers_fragment(f + 9, len, flags, &frag, &flen) != 0)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		bool is_new = id > g->last_id;
		if (is_new && !sbx_h2g_take(&g->b_streams, &g->lim.streams, now))
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_STREAMS);
		g->hb_active = true;
		g->hb_id = id;
		g->hb_end_stream = flags & FL_END_STREAM;
		g->hb_conts = g->hb_fields = 0;
		g->hb_decoded = 0;
		g->path_len = g->method_len = g->auth_len = g->accept_len = 0;
		g->path_long = g->auth_long = false;
		g->content_length = -1;
	} else {
		if (!g->hb_active || id != g->hb_id)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		if (!sbx_h2g_take(&g->b_cont, &g->lim.continuation, now))
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_CONTINUATION_RATE);
		if (++g->hb_conts > g->lim.max_continuations)
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_CONTINUATIONS);
	}
	if (flen == 0 && !(flags & FL_END_HEADERS) &&
	    !sbx_h2g_take(&g->b_empty, &g->lim.empty, now))
		return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_EMPTY);
	/* The raw block is bounded by what it may decode to (a literal never
	 * decodes smaller than its wire form but for Huffman, 8/5 at most). */
	if (h2g_avail(&g->hb_raw) + 9 + len > (size_t)g->lim.max_header_list * 2 + FRAME_MAX)
		return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_HEADER_LIST);
	if (sbx_h2g_buf_put(&g->hb_raw, f, 9 + (size_t)len) != 0)
		return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_HEADER_LIST);
	bool final = flags & FL_END_HEADERS;
	if (inflate(g, frag, flen, final) != SBX_H2G_OK)
		return SBX_H2G_CLOSE;
	return final ? block_done(g) : SBX_H2G_OK;
}

static int on_data(sbx_h2g *g, const uint8_t *f, uint32_t len, uint8_t flags, uint32_t id,
		   uint64_t now)
{
	if (id == 0 || id > g->last_id)
		return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
	if (len == 0 && !(flags & FL_END_STREAM) && !sbx_h2g_take(&g->b_empty, &g->lim.empty, now))
		return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_EMPTY);
	stream *s = find_stream(g, id);
	if (!s) {
		/* Answered here, or closed: nothing of it is kept. */
		h2g_answered_data(g, id, len, flags & FL_END_STREAM);
		h2g_credit_window(g, len);
		return SBX_H2G_OK;
	}
	if (!s->server_closed) {
		uint64_t total = held_total(g);
		if (g->held + len > g->lim.body_conn ||
		    (g->lim.held_total && total + len > g->lim.body_total)) {
			bool client_done = flags & FL_END_STREAM;
			h2g_u32_frame(&g->to_h2o, F_RST, id, 0x8 /* CANCEL */);
			if (!s->server_headers)
				h2g_answer(g, id, 503, s->msgpack, client_done);
			else
				h2g_u32_frame(h2g_inj(g), F_RST, id, 0x8);
			drop_stream(g, s);
			h2g_credit_window(g, len);
			return SBX_H2G_OK;
		}
		s->held += len;
		g->held += len;
		held_add(g, len);
	}
	sbx_h2g_buf_put(&g->to_h2o, f, 9 + (size_t)len);
	if (flags & FL_END_STREAM) {
		s->client_closed = true;
		maybe_done(g, s);
	}
	return SBX_H2G_OK;
}

static int on_settings(sbx_h2g *g, const uint8_t *frame, uint32_t len, uint8_t flags, uint32_t id,
		       uint64_t now)
{
	uint8_t f[9 + 6 * MAX_SETTINGS];

	if (id != 0 || len % 6 != 0 || ((flags & FL_ACK) && len != 0))
		return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
	if (!sbx_h2g_take(&g->b_settings, &g->lim.settings, now) || len / 6 > MAX_SETTINGS)
		return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_SETTINGS);
	memcpy(f, frame, 9 + (size_t)len);
	for (uint32_t i = 0; i < len; i += 6) {
		uint8_t *e = f + 9 + i;
		uint16_t k = (uint16_t)(e[0] << 8 | e[1]);
		uint32_t v =
			(uint32_t)e[2] << 24 | (uint32_t)e[3] << 16 | (uint32_t)e[4] << 8 | e[5];
		if (k == 5 && v > FRAME_MAX) {
			/* h2o's frames then fit the front's frame buffer. */
			e[2] = 0;
			e[3] = 0;
			e[4] = FRAME_MAX >> 8;
			e[5] = 0;
		}
	}
	sbx_h2g_buf_put(&g->to_h2o, f, 9 + (size_t)len);
	return SBX_H2G_OK;
}

static int on_client_frame(sbx_h2g *g, const uint8_t *f, uint32_t len, uint64_t now)
{
	uint8_t type = f[3], flags = f[4];
	uint32_t id = ((uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8]) &
		      0x7fffffffu;

	if (g->hb_active && type != F_CONTINUATION)
		return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
	switch (type) {
	case F_DATA:
		return on_data(g, f, len, flags, id, now);
	case F_HEADERS:
	case F_CONTINUATION:
		return on_header_frame(g, f, len, type, flags, id, now);
	case F_PRIORITY:
		if (len != 5 || id == 0)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		if (!sbx_h2g_take(&g->b_prio, &g->lim.priority, now))
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_PRIORITY);
		break;
	case F_RST: {
		if (len != 4 || id == 0 || id > g->last_id)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		stream *s = find_stream(g, id);
		/* A reset of a stream that ended costs h2o nothing: paid from
		 * the credit its ending earned; any other from the rate. */
		if (!s && g->rst_credit > 0)
			g->rst_credit--;
		else if (!sbx_h2g_take(&g->b_rst, &g->lim.rst, now))
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_RST);
		/* Reset before h2o answered: the request cost the server and
		 * gave the client nothing; its budget outlives the connection. */
		bool spent = s && s->key && !s->server_headers && g->hooks.reset &&
			     !g->hooks.reset(g->hooks.ud, s->key, now);
		if (s)
			drop_stream(g, s);
		h2g_answered_forget(g, id);
		if (spent) {
			sbx_h2g_buf_put(&g->to_h2o, f, 9 + (size_t)len);
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_RESET_BUDGET);
		}
		break;
	}
	case F_SETTINGS:
		return on_settings(g, f, len, flags, id, now);
	case F_PING:
		if (len != 8 || id != 0)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		if (!sbx_h2g_take(&g->b_ping, &g->lim.ping, now))
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_PING);
		break;
	case F_GOAWAY:
		if (len < 8 || id != 0)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		break;
	case F_WINDOW_UPDATE: {
		if (len != 4)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		uint32_t inc = ((uint32_t)f[9] << 24 | (uint32_t)f[10] << 16 |
				(uint32_t)f[11] << 8 | f[12]) &
			       0x7fffffffu;
		if (inc == 0)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		if (g->wu_credit > 0)
			g->wu_credit--;
		else if (!sbx_h2g_take(&g->b_wu, &g->lim.window_update, now))
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_WINDOW_UPDATE);
		break;
	}
	case F_PUSH: /* clients never push */
		return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
	default:
		/* Unknown extension frames mean nothing to h2o: dropped, and
		 * paid for like empty frames. */
		if (!sbx_h2g_take(&g->b_empty, &g->lim.empty, now))
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_EMPTY);
		return SBX_H2G_OK;
	}
	sbx_h2g_buf_put(&g->to_h2o, f, 9 + (size_t)len);
	return SBX_H2G_OK;
}

/*
 * One direction's bytes, frame by frame: a frame that lies whole in p is
 * handed to on_frame where it lies (no copy); the rest is assembled in
 * part, which never holds more than one partial frame.  A frame longer
 * than max (or one that cannot be held) fails the connection with
 * PROTOCOL_ERROR and reason.
 */
typedef int (*frame_fn)(sbx_h2g *g, const uint8_t *f, uint32_t len, uint64_t now);

static int feed_frames(sbx_h2g *g, sbx_h2g_buf *part, const uint8_t *p, size_t n, uint32_t max,
		       sbx_h2g_reason reason, frame_fn on_frame, uint64_t now)
{
	while (n > 0) {
		size_t have = h2g_avail(part);
		if (have == 0 && n >= 9) {
			uint32_t len = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
			if (len > max)
				return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, reason);
			if (n >= 9 + (size_t)len) {
				if (on_frame(g, p, len, now) != SBX_H2G_OK)
					return SBX_H2G_CLOSE;
				p += 9 + (size_t)len;
				n -= 9 + (size_t)len;
				continue;
			}
		}
		if (have < 9) {
			size_t k = 9 - have < n ? 9 - have : n;
			sbx_h2g_buf_put(part, p, k);
			p += k;
			n -= k;
			if (h2g_avail(part) < 9)
				break;
		}
		const uint8_t *f = part->data + part->off;
		uint32_t len = (uint32_t)f[0] << 16 | (uint32_t)f[1] << 8 | f[2];
		if (len > max)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, reason);
		size_t need = 9 + len - h2g_avail(part);
		size_t k = need < n ? need : n;
		if (sbx_h2g_buf_put(part, p, k) != 0)
			return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, reason);
		p += k;
		n -= k;
		if (k < need)
			break;
		int rv = on_frame(g, part->data + part->off, len, now);
		sbx_h2g_buf_consume(part, 9 + len);
		if (rv != SBX_H2G_OK)
			return SBX_H2G_CLOSE;
	}
	return SBX_H2G_OK;
}

int sbx_h2g_from_client(sbx_h2g *g, const uint8_t *p, size_t n, uint64_t now_ms)
{
	if (g->closed)
		return SBX_H2G_CLOSE;
	while (g->preface_got < PREFACE_LEN && n > 0) {
		if (*p != (uint8_t)PREFACE[g->preface_got])
			return g->preface_got == 0
				       ? SBX_H2G_NOT_H2
				       : h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL);
		p++;
		n--;
		if (++g->preface_got == PREFACE_LEN)
			sbx_h2g_buf_put(&g->to_h2o, PREFACE, PREFACE_LEN);
	}
	return feed_frames(g, &g->cin, p, n, FRAME_MAX, SBX_H2G_R_PROTOCOL, on_client_frame,
			   now_ms);
}

/* ---- h2o -> client ---- */

/* h2o's first SETTINGS: learn its header table size, add ours. */
static void server_settings(sbx_h2g *g, const uint8_t *f, uint32_t len)
{
	uint8_t e[6] = {0,
			6,
			(uint8_t)(g->lim.max_header_list >> 24),
			(uint8_t)(g->lim.max_header_list >> 16),
			(uint8_t)(g->lim.max_header_list >> 8),
			(uint8_t)g->lim.max_header_list};

	for (uint32_t i = 0; i + 6 <= len; i += 6) {
		const uint8_t *x = f + 9 + i;
		if (x[0] == 0 && x[1] == 1)
			nghttp2_hd_inflate_change_table_size(
				g->inf, (size_t)((uint32_t)x[2] << 24 | (uint32_t)x[3] << 16 |
						 (uint32_t)x[4] << 8 | x[5]));
	}
	sbx_h2g_buf *out = h2g_out(g);
	h2g_frame_head(out, len + 6, F_SETTINGS, f[4], 0);
	sbx_h2g_buf_put(out, f + 9, len);
	sbx_h2g_buf_put(out, e, 6);
	h2g_append(out, &g->early);
	sbx_h2g_buf_free(&g->early);
}

/* An h2o frame relayed unchanged: left in the caller's bytes (the span)
 * when nothing is queued before it, else appended to the client buffer.
 * Frames assembled in sin or srun are always copied: those buffers move. */
static void relay(sbx_h2g *g, const uint8_t *f, size_t n)
{
	if (g->span_len > 0 && g->span + g->span_len == f) {
		g->span_len += n;
		return;
	}
	if (g->span_len == 0 && h2g_avail(&g->to_client) == 0 && f >= g->in_lo &&
	    f + n <= g->in_hi) {
		g->span = f;
		g->span_len = n;
		return;
	}
	sbx_h2g_buf_put(h2g_out(g), f, n);
}

static int on_server_frame(sbx_h2g *g, const uint8_t *f, uint32_t len, uint64_t now)
{
	uint8_t type = f[3], flags = f[4];
	uint32_t id = ((uint32_t)f[5] << 24 | (uint32_t)f[6] << 16 | (uint32_t)f[7] << 8 | f[8]) &
		      0x7fffffffu;
	stream *s = id ? find_stream(g, id) : NULL;

	if (h2g_avail(&g->srun) > 0 && type != F_CONTINUATION)
		return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_SERVER);
	switch (type) {
	case F_SETTINGS:
		if (!(flags & FL_ACK) && !g->server_settings_seen) {
			g->server_settings_seen = true;
			server_settings(g, f, len);
			return SBX_H2G_OK;
		}
		break;
	case F_HEADERS:
	case F_CONTINUATION:
		if (type == F_HEADERS && s) {
			s->server_headers = true;
			if (flags & FL_END_STREAM) {
				s->server_closed = true;
				release(g, s);
			}
		}
		if (!(flags & FL_END_HEADERS) || h2g_avail(&g->srun) > 0) {
			if (h2g_avail(&g->srun) + 9 + len > SERVER_RUN_MAX)
				return h2g_fail(g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_SERVER);
			sbx_h2g_buf_put(&g->srun, f, 9 + (size_t)len);
			if (!(flags & FL_END_HEADERS))
				return SBX_H2G_OK;
			/* the run is complete: relay it in one piece */
			h2g_append(h2g_out(g), &g->srun);
			sbx_h2g_buf_consume(&g->srun, h2g_avail(&g->srun));
			if (s)
				maybe_done(g, s);
			return SBX_H2G_OK;
		}
		break;
	case F_DATA: {
		/* A client may thank each DATA frame with two WINDOW_UPDATEs
		 * (stream and connection): streaming never runs out. */
		if (g->wu_credit < 65536)
			g->wu_credit += 2;
		if (s && (flags & FL_END_STREAM)) {
			s->server_closed = true;
			release(g, s);
		}
		break;
	}
	case F_RST:
		/* Streams h2o refuses or resets cost like the client's resets. */
		if (!sbx_h2g_take(&g->b_rst, &g->lim.rst, now)) {
			relay(g, f, 9 + (size_t)len);
			return h2g_fail(g, SBX_H2G_CALM, SBX_H2G_R_RST);
		}
		if (s) {
			drop_stream(g, s);
			s = NULL;
		}
		break;
	default:
		break;
	}
	relay(g, f, 9 + (size_t)len);
	if (s)
		maybe_done(g, s);
	return SBX_H2G_OK;
}

int sbx_h2g_from_server(sbx_h2g *g, const uint8_t *p, size_t n, uint64_t now_ms)
{
	if (g->closed)
		return SBX_H2G_CLOSE;
	return feed_frames(g, &g->sin, p, n, SERVER_FRAME_MAX, SBX_H2G_R_SERVER, on_server_frame,
			   now_ms);
}

int sbx_h2g_from_server_span(sbx_h2g *g, const uint8_t *p, size_t n, uint64_t now_ms,
			     size_t *span_off, size_t *span_len)
{
	g->in_lo = p;
	g->in_hi = p + n;
	int rv = sbx_h2g_from_server(g, p, n, now_ms);
	*span_off = g->span_len > 0 ? (size_t)(g->span - p) : 0;
	*span_len = g->span_len;
	g->span_len = 0;
	g->in_lo = g->in_hi = NULL;
	return rv;
}

int sbx_h2g_preface_match(const uint8_t *p, size_t n)
{
	size_t k = n < PREFACE_LEN ? n : PREFACE_LEN;
	if (memcmp(p, PREFACE, k) != 0)
		return -1;
	return k == PREFACE_LEN ? 1 : 0;
}

/* ---- lifetime and queries ---- */

sbx_h2g *sbx_h2g_new(const sbx_h2g_limits *lim, const sbx_h2g_hooks *hooks)
{
	sbx_h2g *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->lim = *lim;
	if (hooks)
		g->hooks = *hooks;
	if (nghttp2_hd_inflate_new(&g->inf) != 0) {
		free(g);
		return NULL;
	}
	/* h2o's default SETTINGS_HEADER_TABLE_SIZE until its SETTINGS say. */
	nghttp2_hd_inflate_change_table_size(g->inf, 4096);
	return g;
}

void sbx_h2g_free(sbx_h2g *g)
{
	if (!g)
		return;
	while (g->n_streams > 0)
		drop_stream(g, &g->streams[0]);
	free(g->streams);
	nghttp2_hd_inflate_del(g->inf);
	sbx_h2g_buf_free(&g->to_h2o);
	sbx_h2g_buf_free(&g->to_client);
	sbx_h2g_buf_free(&g->cin);
	sbx_h2g_buf_free(&g->sin);
	sbx_h2g_buf_free(&g->srun);
	sbx_h2g_buf_free(&g->early);
	sbx_h2g_buf_free(&g->hb_raw);
	free(g);
}

void sbx_h2g_upgraded(sbx_h2g *g)
{
	g->last_id = 1;
}

sbx_h2g_buf *sbx_h2g_to_h2o(sbx_h2g *g)
{
	return &g->to_h2o;
}

sbx_h2g_buf *sbx_h2g_to_client(sbx_h2g *g)
{
	return &g->to_client;
}

sbx_h2g_reason sbx_h2g_reason_of(const sbx_h2g *g, uint32_t *code)
{
	if (code)
		*code = g->code;
	return g->reason;
}

bool sbx_h2g_header_pending(const sbx_h2g *g)
{
	if (g->preface_got < PREFACE_LEN || g->hb_active)
		return true;
	/* a HEADERS frame arriving piecemeal */
	return h2g_avail(&g->cin) > 3 && g->cin.data[g->cin.off + 3] == F_HEADERS;
}

size_t sbx_h2g_open_streams(const sbx_h2g *g)
{
	return g->n_streams;
}

uint64_t sbx_h2g_held(const sbx_h2g *g)
{
	return g->held;
}

void sbx_h2g_rejected(const sbx_h2g *g, uint64_t *n401, uint64_t *n503)
{
	*n401 = g->n401;
	*n503 = g->n503;
}

/*
 * fuzz_h2guard.c: libFuzzer target for sbxd's HTTP/2 frame guard
 * (src/server/h2guard.c), which reads every byte a client sends.  The
 * input is split in chunks: a control byte (bit 7: the chunk is h2o's,
 * else the client's; bits 0-6: its length) then the chunk.  The client's
 * side starts with the preface so the frames are reached.
 * Properties (abort() on violation):
 *   - what goes to the client and to h2o is a sequence of whole frames
 *     (after the preface toward h2o), none longer than 16 KiB + our own;
 *   - once closed, the client's bytes end with a GOAWAY and nothing more
 *     goes to h2o;
 *   - the held body bytes come back to zero when the guard is freed;
 *   - h2o's chunks go in turn through sbx_h2g_from_server and through
 *     sbx_h2g_from_server_span (the front's direct path): what the span
 *     leaves in place lies in the input, only when nothing is queued for
 *     the client, and (appended after) keeps the frame sequence whole.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "h2guard.h"

static int check(void *ud, const sbx_h2g_req *r)
{
	(void)ud;
	return r->authorization_len == 11 ? 0 : 401;
}

static size_t body(void *ud, int status, bool msgpack, char *buf, size_t cap, const char **ctype)
{
	(void)ud;
	(void)status;
	(void)msgpack;
	*ctype = "application/json";
	if (cap < 2)
		return 0;
	memcpy(buf, "{}", 2);
	return 2;
}

/* Whole frames only; returns the type of the last one (-1: none). */
static int frames(const sbx_h2g_buf *b, size_t skip)
{
	int last = -1;
	size_t i = b->off + skip;
	while (i < b->len) {
		if (b->len - i < 9)
			abort();
		const uint8_t *f = b->data + i;
		size_t len = (size_t)f[0] << 16 | (size_t)f[1] << 8 | f[2];
		if (len > (1u << 20) || b->len - i - 9 < len)
			abort();
		last = f[3];
		i += 9 + len;
	}
	return last;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	uint64_t held_total = 0;
	sbx_h2g_limits l = {
		.max_header_list = 4096,
		.max_header_fields = 16,
		.max_continuations = 4,
		.rst = {1, 8},
		.empty = {1, 8},
		.continuation = {1, 8},
		.ping = {1, 8},
		.settings = {1, 8},
		.priority = {1, 8},
		.window_update = {1, 8},
		.streams = {1, 8},
		.max_body = 1 << 16,
		.body_conn = 1 << 14,
		.body_total = 1 << 15,
		.held_total = &held_total,
	};
	sbx_h2g_hooks hooks = {check, body, NULL, NULL};
	sbx_h2g *g = sbx_h2g_new(&l, &hooks);
	if (!g)
		return 0;
	sbx_h2g_from_client(g, (const uint8_t *)preface, 24, 0);
	bool closed = false;
	uint64_t now = 0;
	size_t to_h2o_at_close = 0;
	for (size_t i = 0; i < size;) {
		uint8_t ctl = data[i++];
		size_t n = ctl & 0x7f;
		if (n > size - i)
			n = size - i;
		int rv;
		if (!(ctl & 0x80)) {
			rv = sbx_h2g_from_client(g, data + i, n, now);
		} else if (i & 1) {
			rv = sbx_h2g_from_server(g, data + i, n, now);
		} else {
			/* the front's direct path: what the guard leaves in place
			 * lies in the input and only ever follows an empty client
			 * buffer; appended here as when the socket takes none */
			size_t off = 0, len = 0;
			sbx_h2g_buf *tc = sbx_h2g_to_client(g);
			rv = sbx_h2g_from_server_span(g, data + i, n, now, &off, &len);
			if (len > 0 && (off + len > n || tc->len != tc->off))
				abort();
			sbx_h2g_buf_put(tc, data + i + off, len);
		}
		i += n;
		now += 7;
		if (rv == SBX_H2G_CLOSE && !closed) {
			closed = true;
			to_h2o_at_close = sbx_h2g_to_h2o(g)->len;
		}
		if (closed && sbx_h2g_to_h2o(g)->len != to_h2o_at_close)
			abort();
	}
	frames(sbx_h2g_to_h2o(g), 24);
	int last = frames(sbx_h2g_to_client(g), 0);
	if (closed && last != 7)
		abort();
	sbx_h2g_free(g);
	if (held_total != 0)
		abort();
	return 0;
}

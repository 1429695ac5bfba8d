/*
 * front_h1.c: HTTP/1.1 through the front: a byte pipe after the first
 * request head, with a header timeout, body budgets by Content-Length
 * (503 past them), and Upgrade: h2c put under the guard.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "front_int.h"

static void h1_answer_503(conn *c)
{
	size_t len = 0;
	char *b = sbx_srv_error_body(SRV_FMT_JSON, "Unavailable",
				     "request body budget exhausted; retry later", &len);
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
			 "retry-after: 1\r\ncontent-length: %zu\r\nconnection: close\r\n\r\n",
			 b ? len : 0);
	sbx_h2g_buf_put(&c->h1_down, head, (size_t)n);
	sbx_h2g_buf_put(&c->h1_down, b, b ? len : 0);
	free(b);
	BUMP(F.rejected503);
}

/* "\nupgrade:" in any case, across reads: h2o 2.2 switches to HTTP/2 on
 * any request's Upgrade: h2c, and what follows must not pass unguarded.
 * (A body holding such a line closes the connection too: fail closed.) */
static bool h1_upgrade_line(conn *c, const uint8_t *d, size_t n)
{
	static const char pat[] = "\nupgrade:";
	for (size_t i = 0; i < n; i++) {
		char b = (char)tolower(d[i]);
		if (b == pat[c->h1_match]) {
			if (++c->h1_match == sizeof(pat) - 1)
				return true;
		} else {
			c->h1_match = b == '\n';
		}
	}
	return false;
}

/* The value of header name in the head h (len bytes), or NULL. */
static const char *h1_header(const uint8_t *h, size_t len, const char *name, size_t *vlen)
{
	size_t nl = strlen(name);
	for (size_t i = 0; i + nl + 1 < len; i++) {
		if (h[i] != '\n' || strncasecmp((const char *)h + i + 1, name, nl) != 0 ||
		    h[i + 1 + nl] != ':')
			continue;
		size_t v = i + 2 + nl, e = v;
		while (v < len && (h[v] == ' ' || h[v] == '\t'))
			v++;
		for (e = v; e < len && h[e] != '\r' && h[e] != '\n'; e++)
			;
		*vlen = e - v;
		return (const char *)h + v;
	}
	return NULL;
}

/* What h2o may hold of an unfinished HTTP/1.1 request is what was relayed
 * to it since it last said anything: a chunked body (no Content-Length to
 * check up front) or any later request of a kept connection.  Charged to
 * the body budgets beyond the first head's reservation; -1 past either. */
static int h1_charge(conn *c, size_t n)
{
	const sbx_h2g_limits *l = &sbx_front_o.lim;
	c->h1_relayed += n;
	if (c->h1_relayed <= c->h1_reserved)
		return 0;
	uint64_t add = c->h1_relayed - c->h1_reserved;
	if (c->h1_relayed > l->body_conn + H1_HEAD_MAX || LOAD(F.held_total) + add > l->body_total)
		return -1;
	ADD(F.held_total, add);
	c->h1_reserved = c->h1_relayed;
	return 0;
}

/* h2o answered: what it held is consumed or refused. */
void front_h1_release(conn *c)
{
	ADD(F.held_total, -c->h1_reserved);
	c->h1_reserved = c->h1_relayed = 0;
}

/* An Upgrade: h2c request's body goes to h2o as it comes (h2o answers
 * only once it has the whole request); only what follows it, the client's
 * HTTP/2 preface and frames, waits for the 101.  -1 past the budgets. */
static int h1_pass_upgrade_body(conn *c)
{
	size_t held = c->h1_hold.len - c->h1_hold.off;
	size_t n = held < c->h1_up_body ? held : (size_t)c->h1_up_body;
	if (!n)
		return 0;
	if (h1_charge(c, n) != 0)
		return -1;
	sbx_h2g_buf_put(&c->h1_up, c->h1_hold.data + c->h1_hold.off, n);
	sbx_h2g_buf_consume(&c->h1_hold, n);
	c->h1_up_body -= n;
	return 0;
}

/* Client bytes of an HTTP/1.1 connection: 0, 1 (answered 503: close
 * after it), -1 (close now: a head too large, an upgrade we would not
 * see, too much held). */
int front_h1_from_client(conn *c, const uint8_t *d, size_t n)
{
	if (c->h1_state == H1_PIPE) {
		if (h1_upgrade_line(c, d, n) || h1_charge(c, n) != 0)
			return -1;
		sbx_h2g_buf_put(&c->h1_up, d, n);
		return 0;
	}
	sbx_h2g_buf_put(&c->h1_hold, d, n);
	if (c->h1_state == H1_UPGRADE)
		return h1_pass_upgrade_body(c) != 0 || c->h1_hold.len - c->h1_hold.off > CAP ? -1
											     : 0;
	/* H1_HEAD: the first request head, whole, before h2o sees it */
	const uint8_t *h = c->h1_hold.data + c->h1_hold.off;
	size_t len = c->h1_hold.len - c->h1_hold.off, end = 0, vl = 0;
	for (size_t i = c->h1_scanned; i + 4 <= len; i++)
		if (!memcmp(h + i, "\r\n\r\n", 4)) {
			end = i + 4;
			break;
		}
	if (!end) {
		c->h1_scanned = len > 3 ? len - 3 : 0;
		return len > H1_HEAD_MAX ? -1 : 0;
	}
	c->h1_head_done = true;
	/* its Content-Length against the server-wide body budget (reserved
	 * until the connection closes); over --max-body stays h2o's 413 */
	const char *v = h1_header(h, end, "content-length", &vl);
	uint64_t body = 0;
	if (v) {
		uint64_t cl = strtoull(v, NULL, 10);
		const sbx_h2g_limits *l = &sbx_front_o.lim;
		if (cl <= l->max_body) {
			body = cl;
			if (LOAD(F.held_total) + cl > l->body_total || cl > l->body_conn) {
				h1_answer_503(c);
				return 1;
			}
			c->h1_reserved = cl;
			ADD(F.held_total, cl);
		}
	}
	v = h1_header(h, end, "upgrade", &vl);
	sbx_h2g_buf_put(&c->h1_up, h, end);
	sbx_h2g_buf_consume(&c->h1_hold, end);
	if (v && vl >= 3 && !strncasecmp(v, "h2c", 3)) {
		/* A chunked body's end is h2o's to find, not ours: we could not
		 * tell its last byte from the preface that follows. */
		if (h1_header(h, end, "transfer-encoding", &vl))
			return -1;
		/* hold what follows the body until h2o answers: 101 puts it
		 * under the guard */
		c->h1_state = H1_UPGRADE;
		c->h1_up_body = body;
		return h1_pass_upgrade_body(c);
	}
	c->h1_state = H1_PIPE;
	h = c->h1_hold.data + c->h1_hold.off;
	len = c->h1_hold.len - c->h1_hold.off;
	if (len > 0 && (h1_upgrade_line(c, h, len) || h1_charge(c, len) != 0))
		return -1;
	sbx_h2g_buf_put(&c->h1_up, h, len);
	sbx_h2g_buf_free(&c->h1_hold);
	return 0;
}

/* h2o's bytes while an Upgrade: h2c waits: once its answer's head is in,
 * 101 makes this an HTTP/2 connection under the guard (h2o's frames after
 * the head, the client's held bytes: its preface and frames); anything
 * else, a pipe again.  Returns SBX_H2G_OK, or CLOSE. */
int front_h1_upgrade_answer(conn *c)
{
	const uint8_t *d = c->h1_down.data + c->h1_down.off;
	size_t len = c->h1_down.len - c->h1_down.off, end = 0;

	for (size_t i = 0; i + 4 <= len; i++)
		if (!memcmp(d + i, "\r\n\r\n", 4)) {
			end = i + 4;
			break;
		}
	if (!end)
		return len > H1_HEAD_MAX ? SBX_H2G_CLOSE : SBX_H2G_OK;
	if (len < 12 || memcmp(d, "HTTP/1.1 101", 12) != 0) {
		c->h1_state = H1_PIPE;
		const uint8_t *h = c->h1_hold.data + c->h1_hold.off;
		size_t hl = c->h1_hold.len - c->h1_hold.off;
		if (hl > 0 && (h1_upgrade_line(c, h, hl) || h1_charge(c, hl) != 0))
			return SBX_H2G_CLOSE;
		sbx_h2g_buf_put(&c->h1_up, h, hl);
		sbx_h2g_buf_free(&c->h1_hold);
		return SBX_H2G_OK;
	}
	/* h2o switched before the whole body came: the rest could not be
	 * told from HTTP/2 frames. */
	if (c->h1_up_body || front_new_guard(c) != 0)
		return SBX_H2G_CLOSE;
	sbx_h2g_upgraded(c->g);
	/* in order: the 101, then what the guard relays and says */
	sbx_h2g_buf_put(sbx_h2g_to_client(c->g), d, end);
	sbx_h2g_buf_put(sbx_h2g_to_h2o(c->g), c->h1_up.data + c->h1_up.off,
			c->h1_up.len - c->h1_up.off);
	c->mode = M_H2;
	uint64_t now = sbx_srv_now_ms();
	int rv = sbx_h2g_from_server(c->g, d + end, len - end, now);
	if (rv == SBX_H2G_OK && c->h1_hold.len > c->h1_hold.off)
		rv = sbx_h2g_from_client(c->g, c->h1_hold.data + c->h1_hold.off,
					 c->h1_hold.len - c->h1_hold.off, now);
	if (rv == SBX_H2G_NOT_H2)
		sbx_h2g_goaway(c->g, SBX_H2G_PROTOCOL_ERROR, SBX_H2G_R_PROTOCOL, "preface");
	front_guard_counts(c);
	sbx_h2g_buf_free(&c->h1_up);
	sbx_h2g_buf_free(&c->h1_down);
	sbx_h2g_buf_free(&c->h1_hold);
	return rv == SBX_H2G_OK ? SBX_H2G_OK : SBX_H2G_CLOSE;
}

/*
 * front.c: every client connection of sbxd goes through here.  The front
 * accepts (with connection budgets and no busy loop on EMFILE), does TLS
 * itself, and gives h2o one end of an AF_UNIX socketpair as a plaintext
 * connection: h2o never sees the client's socket.  HTTP/2 bytes from the
 * client pass the frame guard (h2guard.c) on their way; h2o's bytes come
 * back through it whole frames at a time.  HTTP/1.1 is a byte pipe with
 * the same connection budgets, a header timeout and a body budget by
 * Content-Length.  Each direction holds at most CAP bytes before reading
 * from its source stops (backpressure).
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "front.h"

#define CAP (256 * 1024)  /* bytes queued per direction before reading stops */
#define H1_HEAD_MAX 65536 /* an HTTP/1.1 request head */

sbx_front_opts sbx_front_o;

enum { M_DETECT, M_H2, M_H1 };

typedef struct conn {
	struct conn *prev, *next;
	h2o_socket_t *client, *inner;
	sbx_h2g *g;
	int mode;
	bool closing, client_eof;
	struct sockaddr_storage addr; /* AF_UNSPEC for unix sockets */
	char peer[64];
	uint64_t last_ms;
	sbx_h2g_buf h1_up, h1_down; /* HTTP/1.1: the pipe's buffers */
	size_t h1_scanned;
	bool h1_head_done;
	uint64_t h1_reserved;
	sbx_h2g_buf cw, iw; /* being written to the client, to h2o */
	bool client_paused, inner_paused;
	uint64_t seen401, seen503;
	const char *why_kind, *why_msg; /* the answer the check hook chose */
	h2o_timeout_entry_t hdr_entry, idle_entry, close_entry;
} conn;

static struct {
	sbx_srv *S;
	void *ssl_ctx;
	conn *conns;
	uint32_t n_conns;
	int spare_fd;
	uint64_t held_total;
	h2o_timeout_t hdr_timeout, idle_timeout, close_timeout, pause_timeout;
	h2o_timeout_entry_t pause_entry;
	/* metrics */
	uint64_t accepted, goaway[SBX_H2G_R_COUNT], refused_total, refused_addr, refused_fd,
		rejected401, rejected503;
} F = {.spare_fd = -1};

/* ---- options ---- */

void sbx_front_defaults(sbx_front_opts *o)
{
	sbx_h2g_limits *l = &o->lim;
	memset(o, 0, sizeof(*o));
	/* nghttp2 and nginx both bound a request's headers near 64 KiB. */
	l->max_header_list = 64 * 1024;
	l->max_header_fields = 256;
	l->max_continuations = 32;
	/* RATE per second, BURST banked.  RST_STREAM: nghttp2's rapid-reset
	 * defaults (1000 burst, 33/s); streams: far above h2load -m 32 at a
	 * few thousand runs/s; the control frames: what no client needs. */
	l->rst = (sbx_h2g_rate){33, 1000};
	l->empty = (sbx_h2g_rate){10, 100};
	l->continuation = (sbx_h2g_rate){200, 1000};
	l->ping = (sbx_h2g_rate){10, 100};
	l->settings = (sbx_h2g_rate){10, 100};
	l->priority = (sbx_h2g_rate){100, 1000};
	l->window_update = (sbx_h2g_rate){100, 1000};
	l->streams = (sbx_h2g_rate){5000, 10000};
	/* body_conn/body_total 0: derived from --max-body in sbx_front_start. */
	o->header_timeout_s = 10;
	o->idle_timeout_s = 10; /* h2o's own HTTP/2 idle timeout before the front */
}

static int rate_arg(const char *v, sbx_h2g_rate *r)
{
	char *end;
	errno = 0;
	double rate = strtod(v, &end), burst;
	if (errno || end == v || rate <= 0)
		return -1;
	if (*end == ':') {
		const char *b = end + 1;
		burst = strtod(b, &end);
		if (errno || end == b || burst < 1)
			return -1;
	} else {
		burst = rate * 10 > 1 ? rate * 10 : 1;
	}
	if (*end)
		return -1;
	r->rate = rate;
	r->burst = burst;
	return 0;
}

static int u64_arg(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-' || n < min || n > max)
		return -1;
	*out = n;
	return 0;
}

const char *const sbx_front_usage =
	"            [--max-header-list BYTES] [--max-header-fields N] [--max-continuations N]\n"
	"            [--rate-rst R[:B]] [--rate-empty R[:B]] [--rate-continuation R[:B]]\n"
	"            [--rate-ping R[:B]] [--rate-settings R[:B]] [--rate-priority R[:B]]\n"
	"            [--rate-window-update R[:B]] [--rate-streams R[:B]]\n"
	"            [--body-budget-conn BYTES] [--body-budget-total BYTES]\n"
	"            [--max-conns N] [--max-conns-per-addr N] [--header-timeout-s S]\n"
	"            [--conn-idle-timeout-s S]\n";

int sbx_front_flag(const char *name, const char *v, bool *bad)
{
	static const struct {
		const char *name;
		size_t off;
	} rates[] = {
		{"rate-rst", offsetof(sbx_h2g_limits, rst)},
		{"rate-empty", offsetof(sbx_h2g_limits, empty)},
		{"rate-continuation", offsetof(sbx_h2g_limits, continuation)},
		{"rate-ping", offsetof(sbx_h2g_limits, ping)},
		{"rate-settings", offsetof(sbx_h2g_limits, settings)},
		{"rate-priority", offsetof(sbx_h2g_limits, priority)},
		{"rate-window-update", offsetof(sbx_h2g_limits, window_update)},
		{"rate-streams", offsetof(sbx_h2g_limits, streams)},
	};
	sbx_front_opts *o = &sbx_front_o;
	uint64_t n = 0;
	int rv = -2;

	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++)
		if (!strcmp(name, rates[i].name)) {
			if (rate_arg(v, (sbx_h2g_rate *)((char *)&o->lim + rates[i].off)) != 0) {
				fprintf(stderr,
					"sbxd: --%s %s: expected RATE or RATE:BURST (per second, "
					"RATE > 0, BURST >= 1)\n",
					name, v);
				*bad = true;
			}
			return 1;
		}
	if (!strcmp(name, "max-header-list")) {
		rv = u64_arg(v, 1024, 16u << 20, &n);
		o->lim.max_header_list = (uint32_t)n;
	} else if (!strcmp(name, "max-header-fields")) {
		rv = u64_arg(v, 8, 100000, &n);
		o->lim.max_header_fields = (uint32_t)n;
	} else if (!strcmp(name, "max-continuations")) {
		rv = u64_arg(v, 1, 100000, &n);
		o->lim.max_continuations = (uint32_t)n;
	} else if (!strcmp(name, "body-budget-conn")) {
		rv = u64_arg(v, 1024, 1ull << 40, &n);
		o->lim.body_conn = n;
	} else if (!strcmp(name, "body-budget-total")) {
		rv = u64_arg(v, 1024, 1ull << 44, &n);
		o->lim.body_total = n;
	} else if (!strcmp(name, "max-conns")) {
		rv = u64_arg(v, 1, 1000000, &n);
		o->max_conns = (uint32_t)n;
	} else if (!strcmp(name, "max-conns-per-addr")) {
		rv = u64_arg(v, 1, 1000000, &n);
		o->max_conns_per_addr = (uint32_t)n;
	} else if (!strcmp(name, "header-timeout-s")) {
		rv = u64_arg(v, 1, 3600, &n);
		o->header_timeout_s = (uint32_t)n;
	} else if (!strcmp(name, "conn-idle-timeout-s")) {
		rv = u64_arg(v, 1, 24 * 3600, &n);
		o->idle_timeout_s = (uint32_t)n;
	}
	if (rv == -2)
		return 0;
	if (rv != 0) {
		fprintf(stderr, "sbxd: --%s %s: out of range or not a number\n", name, v);
		*bad = true;
	}
	return 1;
}

/* ---- the guard's hooks ---- */

static bool path_is(const sbx_h2g_req *r, const char *p)
{
	size_t n = strlen(p);
	if (!r->path || r->path_len < n || memcmp(r->path, p, n) != 0)
		return false;
	return r->path_len == n || r->path[n] == '?';
}

/* What handler.c would answer 401, decided before h2o holds anything. */
static int on_check(void *ud, const sbx_h2g_req *r)
{
	conn *c = ud;
	sbx_srv *S = F.S;

	if (path_is(r, "/healthz"))
		return 0; /* served without a token */
	if (!r->authorization || r->authorization_len < 7 ||
	    strncasecmp(r->authorization, "Bearer ", 7) != 0) {
		c->why_kind = "Unauthorized";
		c->why_msg = "an Authorization: Bearer <token> header is required";
		goto reject;
	}
	const char *tok = r->authorization + 7;
	size_t tl = r->authorization_len - 7;
	if (sbx_srv_auth_tenant(S, tok, tl))
		return 0;
	/* Session reference tokens are the Lua layer's to check. */
	if (tl >= 5 && !memcmp(tok, "sbxr_", 5))
		return 0;
	c->why_kind = "Unauthorized";
	c->why_msg = "unknown token";
reject:
	sbx_srv_m.requests++;
	sbx_srv_m.responses_4xx++;
	sbx_srv_m.auth_failures++;
	sbx_srv_log(SRV_LOG_INFO,
		    "event=request method=%.*s path=\"%.*s\" status=401 tenant=- by=front peer=%s",
		    (int)r->method_len, r->method, (int)(r->path_len > 200 ? 200 : r->path_len),
		    r->path ? r->path : "", c->peer);
	return 401;
}

static size_t on_body(void *ud, int status, bool msgpack, char *buf, size_t cap, const char **ctype)
{
	conn *c = ud;
	size_t len = 0;
	const char *kind = c->why_kind, *msg = c->why_msg;

	if (status == 503) {
		kind = "Unavailable";
		msg = "request body budget exhausted; retry later";
		sbx_srv_m.requests++;
		sbx_srv_m.responses_5xx++;
	}
	char *b = sbx_srv_error_body(msgpack ? SRV_FMT_MSGPACK : SRV_FMT_JSON, kind ? kind : "",
				     msg ? msg : "", &len);
	*ctype = msgpack ? "application/msgpack" : "application/json";
	if (!b || len > cap)
		len = 0;
	else
		memcpy(buf, b, len);
	free(b);
	return len;
}

/* ---- connection lifetime ---- */

static void flush(conn *c);

static void conn_free(conn *c)
{
	if (h2o_timeout_is_linked(&c->hdr_entry))
		h2o_timeout_unlink(&c->hdr_entry);
	if (h2o_timeout_is_linked(&c->idle_entry))
		h2o_timeout_unlink(&c->idle_entry);
	if (h2o_timeout_is_linked(&c->close_entry))
		h2o_timeout_unlink(&c->close_entry);
	sbx_h2g_free(c->g);
	F.held_total -= c->h1_reserved;
	sbx_h2g_buf_free(&c->h1_up);
	sbx_h2g_buf_free(&c->h1_down);
	sbx_h2g_buf_free(&c->cw);
	sbx_h2g_buf_free(&c->iw);
	if (c->prev)
		c->prev->next = c->next;
	else
		F.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	F.n_conns--;
	free(c);
}

static void close_inner(conn *c)
{
	if (c->inner) {
		h2o_socket_close(c->inner);
		c->inner = NULL;
	}
}

static void close_all(conn *c)
{
	close_inner(c);
	if (c->client) {
		h2o_socket_close(c->client);
		c->client = NULL;
	}
	conn_free(c);
}

static void arm_close(conn *c)
{
	if (!h2o_timeout_is_linked(&c->close_entry))
		h2o_timeout_link(F.S->ctx.loop, &F.close_timeout, &c->close_entry);
}

static void on_close_timeout(h2o_timeout_entry_t *e)
{
	conn *c = H2O_STRUCT_FROM_MEMBER(conn, close_entry, e);
	close_all(c);
}

/* The connection ends: h2o's side at once (h2o frees everything), the
 * client's once what is queued for it (the GOAWAY last) is written, or
 * after 1 s if the client does not read. */
static void begin_close(conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	close_inner(c);
	if (c->client)
		h2o_socket_read_stop(c->client);
	if (h2o_timeout_is_linked(&c->hdr_entry))
		h2o_timeout_unlink(&c->hdr_entry);
	if (h2o_timeout_is_linked(&c->idle_entry))
		h2o_timeout_unlink(&c->idle_entry);
	arm_close(c);
	flush(c);
}

/* The guard decided: count, log, close. */
static void guard_closed(conn *c)
{
	uint32_t code = 0;
	sbx_h2g_reason why = sbx_h2g_reason_of(c->g, &code);
	F.goaway[why]++;
	sbx_srv_log(why == SBX_H2G_R_IDLE_TIMEOUT || why == SBX_H2G_R_EVICTED ? SRV_LOG_DEBUG
									      : SRV_LOG_WARN,
		    "event=guard_close peer=%s reason=%s goaway=0x%x", c->peer,
		    sbx_h2g_reason_names[why], code);
	begin_close(c);
}

static sbx_h2g_buf *up_buf(conn *c)
{
	return c->g ? sbx_h2g_to_h2o(c->g) : &c->h1_up;
}

static sbx_h2g_buf *down_buf(conn *c)
{
	return c->g ? sbx_h2g_to_client(c->g) : &c->h1_down;
}

static void on_client_read(h2o_socket_t *sock, const char *err);
static void on_inner_read(h2o_socket_t *sock, const char *err);

static void on_client_write(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	c->cw.off = c->cw.len = 0;
	if (err) {
		close_all(c);
		return;
	}
	flush(c);
}

static void on_inner_write(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	c->iw.off = c->iw.len = 0;
	if (err) {
		/* h2o went away: the client gets what h2o already said */
		close_inner(c);
		c->closing = true;
		arm_close(c);
	}
	flush(c);
}

/* Move what is queued into the write buffers (a swap, no copy) and start
 * the writes; pause and resume the reads around CAP. */
static void flush(conn *c)
{
	sbx_h2g_buf *up = up_buf(c), *down = down_buf(c);

	if (c->inner && !c->closing && c->iw.len == 0 && up->len > up->off) {
		sbx_h2g_buf t = c->iw;
		c->iw = *up;
		*up = t;
		h2o_iovec_t v = h2o_iovec_init(c->iw.data + c->iw.off, c->iw.len - c->iw.off);
		h2o_socket_write(c->inner, &v, 1, on_inner_write);
	}
	if (c->client && c->cw.len == 0 && down->len > down->off) {
		sbx_h2g_buf t = c->cw;
		c->cw = *down;
		*down = t;
		h2o_iovec_t v = h2o_iovec_init(c->cw.data + c->cw.off, c->cw.len - c->cw.off);
		h2o_socket_write(c->client, &v, 1, on_client_write);
	}
	if (c->client && c->cw.len == 0 && down->len == down->off && (c->closing || !c->inner)) {
		close_all(c); /* everything said */
		return;
	}
	if (c->closing)
		return;
	size_t upq = up->len - up->off, downq = down->len - down->off;
	if (c->client && !c->client_paused && upq >= CAP) {
		h2o_socket_read_stop(c->client);
		c->client_paused = true;
	} else if (c->client && c->client_paused && upq < CAP) {
		c->client_paused = false;
		h2o_socket_read_start(c->client, on_client_read);
	}
	if (c->inner && !c->inner_paused && downq >= CAP) {
		h2o_socket_read_stop(c->inner);
		c->inner_paused = true;
	} else if (c->inner && c->inner_paused && downq < CAP) {
		c->inner_paused = false;
		h2o_socket_read_start(c->inner, on_inner_read);
	}
}

/* Header and idle timers follow the guard's state after each event. */
static void update_timers(conn *c)
{
	h2o_loop_t *loop = F.S->ctx.loop;
	bool hdr, idle;

	if (c->closing)
		return;
	if (c->mode == M_H2) {
		hdr = sbx_h2g_header_pending(c->g);
		idle = !hdr && sbx_h2g_open_streams(c->g) == 0;
	} else {
		hdr = c->mode == M_DETECT || !c->h1_head_done;
		idle = false;
	}
	if (hdr && !h2o_timeout_is_linked(&c->hdr_entry))
		h2o_timeout_link(loop, &F.hdr_timeout, &c->hdr_entry);
	else if (!hdr && h2o_timeout_is_linked(&c->hdr_entry))
		h2o_timeout_unlink(&c->hdr_entry);
	if (idle && !h2o_timeout_is_linked(&c->idle_entry))
		h2o_timeout_link(loop, &F.idle_timeout, &c->idle_entry);
	else if (!idle && h2o_timeout_is_linked(&c->idle_entry))
		h2o_timeout_unlink(&c->idle_entry);
}

static void timed_out(conn *c, uint32_t code, sbx_h2g_reason why)
{
	if (c->g) {
		sbx_h2g_goaway(c->g, code, why, sbx_h2g_reason_names[why]);
		guard_closed(c);
	} else {
		F.goaway[why]++;
		sbx_srv_log(SRV_LOG_WARN, "event=guard_close peer=%s reason=%s", c->peer,
			    sbx_h2g_reason_names[why]);
		begin_close(c);
	}
}

static void on_hdr_timeout(h2o_timeout_entry_t *e)
{
	timed_out(H2O_STRUCT_FROM_MEMBER(conn, hdr_entry, e), SBX_H2G_CALM,
		  SBX_H2G_R_HEADER_TIMEOUT);
}

static void on_idle_timeout(h2o_timeout_entry_t *e)
{
	timed_out(H2O_STRUCT_FROM_MEMBER(conn, idle_entry, e), 0, SBX_H2G_R_IDLE_TIMEOUT);
}

/* ---- HTTP/1.1: a pipe, with a header timeout and a body budget ---- */

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
	F.rejected503++;
	sbx_srv_m.requests++;
	sbx_srv_m.responses_5xx++;
}

/* The first request head: once complete, its Content-Length against the
 * server-wide body budget (reserved until the connection closes). */
static int h1_head(conn *c)
{
	const uint8_t *d = c->h1_up.data + c->h1_up.off;
	size_t n = c->h1_up.len - c->h1_up.off, end = 0;

	for (size_t i = c->h1_scanned; i + 4 <= n; i++)
		if (!memcmp(d + i, "\r\n\r\n", 4)) {
			end = i + 4;
			break;
		}
	if (!end) {
		c->h1_scanned = n > 3 ? n - 3 : 0;
		return n > H1_HEAD_MAX ? -1 : 0;
	}
	c->h1_head_done = true;
	for (size_t i = 0; i + 16 < end; i++) {
		if ((i == 0 || d[i - 1] == '\n') &&
		    !strncasecmp((const char *)d + i, "content-length:", 15)) {
			uint64_t cl = strtoull((const char *)d + i + 15, NULL, 10);
			const sbx_h2g_limits *l = &sbx_front_o.lim;
			if (cl > l->max_body) /* h2o's 413 */
				break;
			if (F.held_total + cl > l->body_total || cl > l->body_conn) {
				h1_answer_503(c);
				return 1;
			}
			c->h1_reserved = cl;
			F.held_total += cl;
			break;
		}
	}
	return 0;
}

/* ---- reading ---- */

static void on_client_read(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	const uint8_t *d = (const uint8_t *)sock->input->bytes;
	size_t n = sock->input->size;

	if (err) {
		close_all(c);
		return;
	}
	c->last_ms = sbx_srv_now_ms();
	if (c->mode == M_DETECT) {
		int m = sbx_h2g_preface_match(d, n);
		if (m == 0)
			return;
		c->mode = m > 0 ? M_H2 : M_H1;
		if (c->mode == M_H2) {
			sbx_h2g_hooks hooks = {on_check, on_body, c};
			sbx_front_o.lim.held_total = &F.held_total;
			c->g = sbx_h2g_new(&sbx_front_o.lim, &hooks);
			if (!c->g) {
				close_all(c);
				return;
			}
		}
	}
	if (c->mode == M_H2) {
		int rv = sbx_h2g_from_client(c->g, d, n, c->last_ms);
		h2o_buffer_consume(&sock->input, n);
		uint64_t a, b;
		sbx_h2g_rejected(c->g, &a, &b);
		F.rejected401 += a - c->seen401;
		F.rejected503 += b - c->seen503;
		c->seen401 = a;
		c->seen503 = b;
		if (rv != SBX_H2G_OK) {
			guard_closed(c);
			return;
		}
	} else {
		sbx_h2g_buf_put(&c->h1_up, d, n);
		h2o_buffer_consume(&sock->input, n);
		if (!c->h1_head_done) {
			int rv = h1_head(c);
			if (rv != 0) {
				if (rv < 0)
					F.goaway[SBX_H2G_R_HEADER_LIST]++;
				c->h1_up.off = c->h1_up.len = 0;
				begin_close(c);
				return;
			}
		}
	}
	update_timers(c);
	flush(c);
}

static void on_inner_read(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;

	if (err) {
		/* h2o closed its end: say what it said, then close */
		close_inner(c);
		if (!c->closing) {
			c->closing = true;
			if (c->client)
				h2o_socket_read_stop(c->client);
			arm_close(c);
		}
		flush(c);
		return;
	}
	if (c->g) {
		int rv = sbx_h2g_from_server(c->g, (const uint8_t *)sock->input->bytes,
					     sock->input->size, sbx_srv_now_ms());
		h2o_buffer_consume(&sock->input, sock->input->size);
		if (rv != SBX_H2G_OK) {
			guard_closed(c);
			return;
		}
	} else {
		sbx_h2g_buf_put(&c->h1_down, sock->input->bytes, sock->input->size);
		h2o_buffer_consume(&sock->input, sock->input->size);
	}
	update_timers(c);
	flush(c);
}

/* ---- accepting ---- */

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return false;
}

/* At a budget: shed the connection that has been quiet longest among
 * those with no open stream (a GOAWAY, as an idle timeout would), so an
 * attacker holding idle connections cannot lock others out.  addr: only
 * among that address's.  Returns false when every one is busy. */
static bool evict(const struct sockaddr_storage *addr)
{
	conn *victim = NULL;
	for (conn *c = F.conns; c; c = c->next) {
		if (c->closing || (addr && !same_addr(&c->addr, addr)))
			continue;
		if (c->mode == M_H2 && sbx_h2g_open_streams(c->g) > 0)
			continue;
		if (c->mode == M_H1 && c->h1_head_done)
			continue;
		if (!victim || c->last_ms < victim->last_ms)
			victim = c;
	}
	if (!victim)
		return false;
	timed_out(victim, 0, SBX_H2G_R_EVICTED);
	return true;
}

static void on_pause_over(h2o_timeout_entry_t *e)
{
	(void)e;
	if (F.S->listener)
		h2o_socket_read_start(F.S->listener, sbx_front_on_accept);
}

/* Out of descriptors: shed the connection waiting in the backlog with the
 * spare descriptor, and stop accepting for 100 ms instead of spinning. */
static void out_of_fds(int lfd, int e)
{
	F.refused_fd++;
	if (F.spare_fd >= 0) {
		close(F.spare_fd);
		F.spare_fd = -1;
	}
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0)
		close(fd);
	F.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	sbx_srv_log(SRV_LOG_WARN, "event=accept_pause err=\"%s\" conns=%u", strerror(e), F.n_conns);
	h2o_socket_read_stop(F.S->listener);
	if (!h2o_timeout_is_linked(&F.pause_entry))
		h2o_timeout_link(F.S->ctx.loop, &F.pause_timeout, &F.pause_entry);
}

static void peer_name(const struct sockaddr_storage *ss, char *out, size_t cap)
{
	char a[INET6_ADDRSTRLEN] = "?";
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &in->sin_addr, a, sizeof(a));
		snprintf(out, cap, "%s:%u", a, ntohs(in->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, a, sizeof(a));
		snprintf(out, cap, "[%s]:%u", a, ntohs(in6->sin6_port));
	} else {
		snprintf(out, cap, "unix");
	}
}

static void on_handshake(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	if (err) {
		close_all(c);
		return;
	}
	h2o_socket_read_start(c->client, on_client_read);
	/* bytes that came with the handshake's last record */
	if (sock->input->size > 0)
		on_client_read(sock, NULL);
}

static void serve(int fd, const struct sockaddr_storage *ss)
{
	sbx_srv *S = F.S;
	int sp[2];
	conn *c;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) != 0) {
		F.refused_fd++;
		close(fd);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		close(sp[0]);
		close(sp[1]);
		return;
	}
	if (ss->ss_family == AF_INET || ss->ss_family == AF_INET6) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->addr = *ss;
	}
	peer_name(ss, c->peer, sizeof(c->peer));
	c->last_ms = sbx_srv_now_ms();
	c->hdr_entry.cb = on_hdr_timeout;
	c->idle_entry.cb = on_idle_timeout;
	c->close_entry.cb = on_close_timeout;
	c->next = F.conns;
	if (F.conns)
		F.conns->prev = c;
	F.conns = c;
	F.n_conns++;
	F.accepted++;

	c->client =
		h2o_evloop_socket_create(S->ctx.loop, fd, H2O_SOCKET_FLAG_IS_ACCEPTED_CONNECTION);
	c->client->data = c;
	c->inner = h2o_evloop_socket_create(S->ctx.loop, sp[0], 0);
	c->inner->data = c;
	/* h2o's end: a plaintext connection it serves like any other. */
	h2o_accept(&S->accept_ctx, h2o_evloop_socket_create(S->ctx.loop, sp[1], 0));
	h2o_socket_read_start(c->inner, on_inner_read);
	h2o_timeout_link(S->ctx.loop, &F.hdr_timeout, &c->hdr_entry);
	if (F.ssl_ctx)
		h2o_socket_ssl_handshake(c->client, F.ssl_ctx, NULL, on_handshake);
	else
		h2o_socket_read_start(c->client, on_client_read);
}

void sbx_front_on_accept(h2o_socket_t *listener, const char *err)
{
	int lfd = h2o_socket_get_fd(listener);
	const sbx_front_opts *o = &sbx_front_o;

	if (err)
		return;
	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		memset(&ss, 0, sizeof(ss));
		int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				out_of_fds(lfd, errno);
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return;
		}
		bool inet = ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
		if (inet) {
			uint32_t same = 0;
			for (conn *c = F.conns; c; c = c->next)
				same += !c->closing && same_addr(&c->addr, &ss);
			if (same >= o->max_conns_per_addr && !evict(&ss)) {
				F.refused_addr++;
				close(fd);
				continue;
			}
		}
		uint32_t open_now = 0;
		for (conn *c = F.conns; c; c = c->next)
			open_now += !c->closing;
		if (open_now >= o->max_conns && !evict(NULL)) {
			F.refused_total++;
			close(fd);
			continue;
		}
		serve(fd, &ss);
	}
}

int sbx_front_start(sbx_srv *S, void *ssl_ctx, sbx_err *err)
{
	sbx_front_opts *o = &sbx_front_o;
	struct rlimit rl;

	F.S = S;
	F.ssl_ctx = ssl_ctx;
	/* A connection may hold a few --max-body requests at once, the server
	 * sixteen: bounded, yet parallel uploads of one client fit. */
	o->lim.max_body = S->max_body;
	if (o->lim.body_conn == 0)
		o->lim.body_conn = 4 * (uint64_t)S->max_body;
	if (o->lim.body_total == 0)
		o->lim.body_total = 16 * (uint64_t)S->max_body;
	if (o->max_conns == 0) {
		/* Each connection costs 3 descriptors (client, both ends of the
		 * socketpair); a quarter of the limit stays for sessions. */
		uint64_t nofile = 1024;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
			nofile = rl.rlim_cur;
		uint64_t n = (nofile - nofile / 4) / 3;
		o->max_conns = n < 16 ? 16 : n > 100000 ? 100000 : (uint32_t)n;
	}
	if (o->max_conns_per_addr == 0)
		o->max_conns_per_addr = o->max_conns / 2 > 0 ? o->max_conns / 2 : 1;
	F.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (F.spare_fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "open /dev/null: %s",
				   strerror(errno));
	h2o_timeout_init(S->ctx.loop, &F.hdr_timeout, (uint64_t)o->header_timeout_s * 1000);
	h2o_timeout_init(S->ctx.loop, &F.idle_timeout, (uint64_t)o->idle_timeout_s * 1000);
	h2o_timeout_init(S->ctx.loop, &F.close_timeout, 1000);
	h2o_timeout_init(S->ctx.loop, &F.pause_timeout, 100);
	F.pause_entry.cb = on_pause_over;
	return 0;
}

void sbx_front_metrics(FILE *f)
{
	fprintf(f, "# HELP sbxd_h2_goaway_total Connections the front closed, by reason.\n"
		   "# TYPE sbxd_h2_goaway_total counter\n");
	for (int i = 1; i < SBX_H2G_R_COUNT; i++)
		fprintf(f, "sbxd_h2_goaway_total{reason=\"%s\"} %lu\n", sbx_h2g_reason_names[i],
			(unsigned long)F.goaway[i]);
	fprintf(f, "# HELP sbxd_conn_refused_total Connections refused at accept, by reason.\n"
		   "# TYPE sbxd_conn_refused_total counter\n");
	fprintf(f, "sbxd_conn_refused_total{reason=\"total\"} %lu\n",
		(unsigned long)F.refused_total);
	fprintf(f, "sbxd_conn_refused_total{reason=\"per_addr\"} %lu\n",
		(unsigned long)F.refused_addr);
	fprintf(f, "sbxd_conn_refused_total{reason=\"fd\"} %lu\n", (unsigned long)F.refused_fd);
	fprintf(f, "# HELP sbxd_requests_rejected_total Requests the front answered itself.\n"
		   "# TYPE sbxd_requests_rejected_total counter\n");
	fprintf(f, "sbxd_requests_rejected_total{status=\"401\"} %lu\n",
		(unsigned long)F.rejected401);
	fprintf(f, "sbxd_requests_rejected_total{status=\"503\"} %lu\n",
		(unsigned long)F.rejected503);
	fprintf(f, "# HELP sbxd_connections_accepted_total Connections accepted.\n"
		   "# TYPE sbxd_connections_accepted_total counter\n");
	fprintf(f, "sbxd_connections_accepted_total %lu\n", (unsigned long)F.accepted);
	fprintf(f, "# HELP sbxd_connections_open Client connections open now.\n"
		   "# TYPE sbxd_connections_open gauge\n");
	fprintf(f, "sbxd_connections_open %u\n", F.n_conns);
	fprintf(f, "# HELP sbxd_request_body_held_bytes Request body bytes h2o holds now.\n"
		   "# TYPE sbxd_request_body_held_bytes gauge\n");
	fprintf(f, "sbxd_request_body_held_bytes %lu\n", (unsigned long)F.held_total);
}

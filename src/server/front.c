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
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <pthread.h>
#include <unistd.h>

#include "front.h"
#include "front_budget.h"

#define CAP (256 * 1024)	/* bytes queued per direction before reading stops */
#define H1_HEAD_MAX 65536	/* an HTTP/1.1 request head */
#define LINGER_MAX (256 * 1024) /* bytes read and dropped after our last word */

enum { M_DETECT, M_H2, M_H1 };
/* HTTP/1.1: reading the first head; waiting for h2o's answer to an
 * Upgrade: h2c; a pipe. */
enum { H1_HEAD, H1_UPGRADE, H1_PIPE };

typedef struct conn {
	struct conn *prev, *next;
	h2o_socket_t *client, *inner;
	sbx_h2g *g;
	int mode;
	bool closing, lingering, inner_wdead;
	size_t lingered;
	struct sockaddr_storage addr;		 /* AF_UNSPEC for unix sockets */
	char peer[64], addr_s[INET6_ADDRSTRLEN]; /* with its port; without */
	uint64_t last_ms;
	sbx_h2g_buf h1_up, h1_down; /* HTTP/1.1: the pipe's buffers */
	sbx_h2g_buf h1_hold;	    /* the first head; bytes held during an upgrade */
	int h1_state;
	size_t h1_scanned, h1_match;
	bool h1_head_done;
	uint64_t h1_reserved, h1_relayed; /* charged to held_total; sent since h2o spoke */
	sbx_h2g_buf cw, iw;		  /* being written to the client, to h2o */
	bool client_paused, inner_paused;
	uint64_t seen401, seen503;
	const char *why_kind, *why_msg; /* the answer the check hook chose */
	h2o_timeout_entry_t hdr_entry, idle_entry, close_entry;
} conn;

static struct {
	sbx_srv *S;
	void *ssl_ctx;
	/* the front's own loop and thread; the main loop gets h2o's ends of
	 * the socketpairs through the handoff pipe */
	h2o_loop_t *loop;
	pthread_t thread;
	int listen_fd, ctl[2], handoff[2];
	h2o_socket_t *listener, *ctl_sock, *handoff_sock;
	conn *conns;
	sbx_fb *fb;			  /* reset budgets per tenant/source, across connections */
	uint32_t n_lingering, linger_max; /* connections lingering (below) */
	int spare_fd;
	uint64_t held_total;
	h2o_timeout_t hdr_timeout, idle_timeout, close_timeout, pause_timeout;
	h2o_timeout_entry_t pause_entry;
	/* metrics: written by the front's thread (BUMP), read by the main one */
	uint64_t accepted, goaway[SBX_H2G_R_COUNT], refused_total, refused_addr, refused_fd,
		rejected401, rejected503, held_pub;
	uint32_t n_conns;
} F = {.spare_fd = -1, .ctl = {-1, -1}, .handoff = {-1, -1}};

#define BUMP(x) __atomic_fetch_add(&(x), 1, __ATOMIC_RELAXED)
#define ADD(x, n) __atomic_fetch_add(&(x), (n), __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* ---- the guard's hooks ---- */

static bool path_is(const sbx_h2g_req *r, const char *p)
{
	size_t n = strlen(p);
	if (!r->path || r->path_len < n || memcmp(r->path, p, n) != 0)
		return false;
	return r->path_len == n || r->path[n] == '?';
}

/* The request goes on to h2o: the streams it resets before their answer
 * are charged to this principal (its tenant, or its source address), whose
 * budget outlives the connection; a principal cooling down closes it. */
static int charge_to(conn *c, const sbx_h2g_req *r, const char *kind, const char *name)
{
	char p[96];
	uint64_t now = sbx_srv_now_ms();
	snprintf(p, sizeof(p), "%s%s", kind, name);
	uint32_t key = sbx_fb_key(F.fb, p, now);
	if (sbx_fb_penalised(F.fb, key, now)) {
		sbx_srv_log(SRV_LOG_DEBUG, "event=penalty principal=%s peer=%s", p, c->peer);
		return SBX_H2G_CHECK_PENALTY;
	}
	*r->key = key;
	return 0;
}

static bool on_reset(void *ud, uint32_t key, uint64_t now)
{
	(void)ud;
	return sbx_fb_reset(F.fb, key, now);
}

/* What handler.c would answer 401, decided before h2o holds anything. */
static int on_check(void *ud, const sbx_h2g_req *r)
{
	conn *c = ud;
	sbx_srv *S = F.S;
	const char *tenant;

	if (path_is(r, "/healthz"))
		return charge_to(c, r, "a:", c->addr_s); /* served without a token */
	if (!r->authorization || r->authorization_len < 7 ||
	    strncasecmp(r->authorization, "Bearer ", 7) != 0) {
		c->why_kind = "Unauthorized";
		c->why_msg = "an Authorization: Bearer <token> header is required";
		goto reject;
	}
	const char *tok = r->authorization + 7;
	size_t tl = r->authorization_len - 7;
	if ((tenant = sbx_srv_auth_tenant(S, tok, tl)))
		return charge_to(c, r, "t:", tenant);
	/* Session reference tokens are the Lua layer's to check. */
	if (tl >= 5 && !memcmp(tok, "sbxr_", 5))
		return charge_to(c, r, "r:", c->addr_s);
	c->why_kind = "Unauthorized";
	c->why_msg = "unknown token";
reject:
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
	F.n_lingering -= c->lingering;
	F.held_total -= c->h1_reserved;
	__atomic_store_n(&F.held_pub, F.held_total, __ATOMIC_RELAXED);
	sbx_h2g_buf_free(&c->h1_up);
	sbx_h2g_buf_free(&c->h1_down);
	sbx_h2g_buf_free(&c->h1_hold);
	sbx_h2g_buf_free(&c->cw);
	sbx_h2g_buf_free(&c->iw);
	if (c->prev)
		c->prev->next = c->next;
	else
		F.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	ADD(F.n_conns, (uint32_t)-1);
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

/* Everything is written: half-close and read (discarding) until the
 * client closes, the close timer fires or LINGER_MAX bytes were dropped
 * (a client that goes on sending after the GOAWAY).  Closing with the
 * client's bytes unread sends a TCP RST, which can make a client lose the
 * GOAWAY it has not read yet. */
static void on_linger_read(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	c->lingered += sock->input->size;
	if (err || c->lingered > LINGER_MAX) {
		close_all(c);
		return;
	}
	if (sock->input->bytes) {
		sock->input->bytes = sock->input->_buf;
		sock->input->size = 0;
	}
}

static void arm_close(conn *c);

static void linger(conn *c)
{
	if (c->lingering)
		return;
	/* Each lingering connection holds its descriptor for up to 1 s: a
	 * flood of shed connections must not use up the ones kept back for
	 * sessions and for others' new connections.  Past linger_max, close
	 * at once (the peer may then see a reset instead of our last words). */
	if (F.n_lingering >= F.linger_max) {
		close_all(c);
		return;
	}
	F.n_lingering++;
	c->lingering = true;
	c->closing = true;
	close_inner(c);
	arm_close(c);
	shutdown(h2o_socket_get_fd(c->client), SHUT_WR);
	h2o_socket_read_start(c->client, on_linger_read);
}

static void arm_close(conn *c)
{
	if (!h2o_timeout_is_linked(&c->close_entry))
		h2o_timeout_link(F.loop, &F.close_timeout, &c->close_entry);
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
	BUMP(F.goaway[why]);
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
		/* h2o stopped reading (an early answer, e.g. 413, then its
		 * close): write no more, but read what it said until its EOF */
		c->inner_wdead = true;
		arm_close(c);
	}
	flush(c);
}

/* Move what is queued into the write buffers (a swap, no copy) and start
 * the writes; pause and resume the reads around CAP. */
static void flush(conn *c)
{
	sbx_h2g_buf *up = up_buf(c), *down = down_buf(c);

	if (c->inner_wdead)
		up->off = up->len = 0;
	if (c->inner && !c->closing && !c->inner_wdead && c->iw.len == 0 && up->len > up->off) {
		sbx_h2g_buf t = c->iw;
		c->iw = *up;
		*up = t;
		h2o_iovec_t v = h2o_iovec_init(c->iw.data + c->iw.off, c->iw.len - c->iw.off);
		h2o_socket_write(c->inner, &v, 1, on_inner_write);
	}
	bool hold = c->mode == M_H1 && c->h1_state == H1_UPGRADE;
	if (c->client && !hold && c->cw.len == 0 && down->len > down->off) {
		sbx_h2g_buf t = c->cw;
		c->cw = *down;
		*down = t;
		h2o_iovec_t v = h2o_iovec_init(c->cw.data + c->cw.off, c->cw.len - c->cw.off);
		h2o_socket_write(c->client, &v, 1, on_client_write);
	}
	if (c->client && c->cw.len == 0 && down->len == down->off && (c->closing || !c->inner)) {
		linger(c); /* everything said */
		return;
	}
	if (c->closing)
		return;
	size_t upq = up->len - up->off, downq = down->len - down->off;
	/* The client's input waits while h2o is backed up, and while the
	 * client does not read what it made us say (401s, credits, relays). */
	bool full = upq >= CAP || downq >= 2 * CAP;
	if (c->client && !c->client_paused && full) {
		h2o_socket_read_stop(c->client);
		c->client_paused = true;
	} else if (c->client && c->client_paused && !full) {
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
	h2o_loop_t *loop = F.loop;
	bool hdr, idle;

	__atomic_store_n(&F.held_pub, F.held_total, __ATOMIC_RELAXED);
	if (c->closing)
		return;
	if (c->mode == M_H2) {
		hdr = sbx_h2g_header_pending(c->g);
		idle = !hdr && sbx_h2g_open_streams(c->g) == 0;
	} else {
		hdr = c->mode == M_DETECT || c->h1_state == H1_HEAD;
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
		BUMP(F.goaway[why]);
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
	if (c->h1_relayed > l->body_conn + H1_HEAD_MAX || F.held_total + add > l->body_total)
		return -1;
	F.held_total += add;
	c->h1_reserved = c->h1_relayed;
	return 0;
}

/* h2o answered: what it held is consumed or refused. */
static void h1_release(conn *c)
{
	F.held_total -= c->h1_reserved;
	c->h1_reserved = c->h1_relayed = 0;
}

/* Client bytes of an HTTP/1.1 connection: 0, 1 (answered 503: close
 * after it), -1 (close now: a head too large, an upgrade we would not
 * see, too much held). */
static int h1_from_client(conn *c, const uint8_t *d, size_t n)
{
	if (c->h1_state == H1_PIPE) {
		if (h1_upgrade_line(c, d, n) || h1_charge(c, n) != 0)
			return -1;
		sbx_h2g_buf_put(&c->h1_up, d, n);
		return 0;
	}
	sbx_h2g_buf_put(&c->h1_hold, d, n);
	if (c->h1_state == H1_UPGRADE)
		return c->h1_hold.len - c->h1_hold.off > CAP ? -1 : 0;
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
	if (v) {
		uint64_t cl = strtoull(v, NULL, 10);
		const sbx_h2g_limits *l = &sbx_front_o.lim;
		if (cl <= l->max_body) {
			if (F.held_total + cl > l->body_total || cl > l->body_conn) {
				h1_answer_503(c);
				return 1;
			}
			c->h1_reserved = cl;
			F.held_total += cl;
		}
	}
	v = h1_header(h, end, "upgrade", &vl);
	sbx_h2g_buf_put(&c->h1_up, h, end);
	sbx_h2g_buf_consume(&c->h1_hold, end);
	if (v && vl >= 3 && !strncasecmp(v, "h2c", 3)) {
		/* hold what follows until h2o answers: 101 puts it under the guard */
		c->h1_state = H1_UPGRADE;
		return 0;
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

static int new_guard(conn *c);
static void guard_counts(conn *c);

/* h2o's bytes while an Upgrade: h2c waits: once its answer's head is in,
 * 101 makes this an HTTP/2 connection under the guard (h2o's frames after
 * the head, the client's held bytes: its preface and frames); anything
 * else, a pipe again.  Returns SBX_H2G_OK, or CLOSE. */
static int h1_upgrade_answer(conn *c)
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
	if (new_guard(c) != 0)
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
	guard_counts(c);
	sbx_h2g_buf_free(&c->h1_up);
	sbx_h2g_buf_free(&c->h1_down);
	sbx_h2g_buf_free(&c->h1_hold);
	return rv == SBX_H2G_OK ? SBX_H2G_OK : SBX_H2G_CLOSE;
}

/* ---- reading ---- */

/* Everything read was taken: empty the socket's buffer but keep its memory
 * (h2o_buffer_consume frees a drained buffer; at one read per event that
 * is a malloc and a free, often an mmap and munmap, per read). */
static void taken(h2o_socket_t *sock)
{
	if (sock->input->bytes) {
		sock->input->bytes = sock->input->_buf;
		sock->input->size = 0;
	}
}

static int new_guard(conn *c)
{
	sbx_h2g_hooks hooks = {on_check, on_body, on_reset, c};
	sbx_front_o.lim.held_total = &F.held_total;
	c->g = sbx_h2g_new(&sbx_front_o.lim, &hooks);
	return c->g ? 0 : -1;
}

static void guard_counts(conn *c)
{
	uint64_t a, b;
	sbx_h2g_rejected(c->g, &a, &b);
	ADD(F.rejected401, a - c->seen401);
	ADD(F.rejected503, b - c->seen503);
	c->seen401 = a;
	c->seen503 = b;
}

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
		if (c->mode == M_H2 && new_guard(c) != 0) {
			close_all(c);
			return;
		}
	}
	if (c->mode == M_H2) {
		int rv = sbx_h2g_from_client(c->g, d, n, c->last_ms);
		taken(sock);
		guard_counts(c);
		if (rv != SBX_H2G_OK) {
			guard_closed(c);
			return;
		}
	} else {
		int rv = h1_from_client(c, d, n);
		taken(sock);
		if (rv != 0) {
			if (rv < 0) {
				BUMP(F.goaway[SBX_H2G_R_PROTOCOL]);
				sbx_srv_log(SRV_LOG_WARN, "event=guard_close peer=%s reason=http1",
					    c->peer);
				c->h1_down.off = c->h1_down.len = 0;
			}
			c->h1_up.off = c->h1_up.len = 0;
			begin_close(c);
			return;
		}
	}
	update_timers(c);
	flush(c);
}

static void on_inner_read(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;

	/* h2o's last bytes may come with its close: relay them first */
	if (sock->input->size > 0) {
		if (c->g) {
			int rv = sbx_h2g_from_server(c->g, (const uint8_t *)sock->input->bytes,
						     sock->input->size, sbx_srv_now_ms());
			taken(sock);
			if (rv != SBX_H2G_OK) {
				guard_closed(c);
				return;
			}
		} else {
			sbx_h2g_buf_put(&c->h1_down, sock->input->bytes, sock->input->size);
			taken(sock);
			h1_release(c);
			if (c->h1_state == H1_UPGRADE && h1_upgrade_answer(c) != SBX_H2G_OK) {
				if (c->g)
					guard_closed(c);
				else
					begin_close(c);
				return;
			}
		}
	}
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
	if (F.listener)
		h2o_socket_read_start(F.listener, sbx_front_on_accept);
}

/* Out of descriptors: shed the connection waiting in the backlog with the
 * spare descriptor, and stop accepting for 100 ms instead of spinning. */
static void out_of_fds(int lfd, int e)
{
	BUMP(F.refused_fd);
	if (F.spare_fd >= 0) {
		close(F.spare_fd);
		F.spare_fd = -1;
	}
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd >= 0)
		close(fd);
	F.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	sbx_srv_log(SRV_LOG_WARN, "event=accept_pause err=\"%s\" conns=%u", strerror(e), F.n_conns);
	h2o_socket_read_stop(F.listener);
	if (!h2o_timeout_is_linked(&F.pause_entry))
		h2o_timeout_link(F.loop, &F.pause_timeout, &F.pause_entry);
}

/* "addr:port" for logs into out; the address alone (its budget
 * principal; "unix" for unix sockets) into a. */
static void peer_name(const struct sockaddr_storage *ss, char *out, size_t cap, char *a,
		      size_t acap)
{
	snprintf(a, acap, "?");
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &in->sin_addr, a, (socklen_t)acap);
		snprintf(out, cap, "%s:%u", a, ntohs(in->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, a, (socklen_t)acap);
		snprintf(out, cap, "[%s]:%u", a, ntohs(in6->sin6_port));
	} else {
		snprintf(out, cap, "unix");
		snprintf(a, acap, "unix");
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
	int sp[2];
	conn *c;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) != 0) {
		BUMP(F.refused_fd);
		close(fd);
		return;
	}
	/* Larger socketpair buffers: fewer, larger hops for a stream. */
	int sz = 1 << 20;
	for (int i = 0; i < 2; i++) {
		setsockopt(sp[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		setsockopt(sp[i], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
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
	peer_name(ss, c->peer, sizeof(c->peer), c->addr_s, sizeof(c->addr_s));
	c->last_ms = sbx_srv_now_ms();
	c->hdr_entry.cb = on_hdr_timeout;
	c->idle_entry.cb = on_idle_timeout;
	c->close_entry.cb = on_close_timeout;
	c->next = F.conns;
	if (F.conns)
		F.conns->prev = c;
	F.conns = c;
	ADD(F.n_conns, 1);
	BUMP(F.accepted);

	c->client = h2o_evloop_socket_create(F.loop, fd, H2O_SOCKET_FLAG_IS_ACCEPTED_CONNECTION);
	c->client->data = c;
	c->inner = h2o_evloop_socket_create(F.loop, sp[0], 0);
	c->inner->data = c;
	/* h2o's end, to the main loop: a plaintext connection it serves like
	 * any other (a write of 4 bytes to a pipe is atomic). */
	if (write(F.handoff[1], &sp[1], sizeof(sp[1])) != (ssize_t)sizeof(sp[1])) {
		close(sp[1]);
		BUMP(F.refused_fd);
		close_all(c);
		return;
	}
	h2o_socket_read_start(c->inner, on_inner_read);
	h2o_timeout_link(F.loop, &F.hdr_timeout, &c->hdr_entry);
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
				BUMP(F.refused_addr);
				close(fd);
				continue;
			}
		}
		uint32_t open_now = 0;
		for (conn *c = F.conns; c; c = c->next)
			open_now += !c->closing;
		if (open_now >= o->max_conns && !evict(NULL)) {
			BUMP(F.refused_total);
			close(fd);
			continue;
		}
		serve(fd, &ss);
	}
}

/* ---- the front's thread ---- */

/* Main loop: h2o's ends of new socketpairs, to serve. */
static void on_handoff(h2o_socket_t *sock, const char *err)
{
	sbx_srv *S = F.S;
	int fds[64];
	ssize_t n;
	(void)sock;
	(void)err;

	while ((n = read(F.handoff[0], fds, sizeof(fds))) > 0)
		for (ssize_t i = 0; i < n / (ssize_t)sizeof(int); i++)
			h2o_accept(&S->accept_ctx,
				   h2o_evloop_socket_create(S->ctx.loop, fds[i], 0));
}

/* Front loop: the main thread asks to stop accepting (drain). */
static void on_ctl(h2o_socket_t *sock, const char *err)
{
	char b[16];
	(void)sock;
	(void)err;
	while (read(F.ctl[0], b, sizeof(b)) > 0) {
		if (F.listener) {
			h2o_socket_read_stop(F.listener);
			h2o_socket_close(F.listener);
			F.listener = NULL;
		}
		if (h2o_timeout_is_linked(&F.pause_entry))
			h2o_timeout_unlink(&F.pause_entry);
	}
}

/* Everything of the front lives on this thread's loop (h2o's socket
 * buffers are per thread), so a flood of frames costs this thread, not
 * the one serving requests and runs. */
static void *front_main(void *arg)
{
	const sbx_front_opts *o = &sbx_front_o;
	(void)arg;

	F.loop = h2o_evloop_create();
	h2o_timeout_init(F.loop, &F.hdr_timeout, (uint64_t)o->header_timeout_s * 1000);
	h2o_timeout_init(F.loop, &F.idle_timeout, (uint64_t)o->idle_timeout_s * 1000);
	h2o_timeout_init(F.loop, &F.close_timeout, 1000);
	h2o_timeout_init(F.loop, &F.pause_timeout, 100);
	F.pause_entry.cb = on_pause_over;
	F.ctl_sock = h2o_evloop_socket_create(F.loop, F.ctl[0], H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(F.ctl_sock, on_ctl);
	F.listener = h2o_evloop_socket_create(F.loop, F.listen_fd, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(F.listener, sbx_front_on_accept);
	for (;;)
		h2o_evloop_run(F.loop, INT32_MAX);
	return NULL;
}

int sbx_front_start(sbx_srv *S, int listen_fd, void *ssl_ctx, sbx_err *err)
{
	sbx_front_opts *o = &sbx_front_o;
	struct rlimit rl;

	F.S = S;
	F.ssl_ctx = ssl_ctx;
	F.listen_fd = listen_fd;
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
	/* A source gets 1/32 of the total (at least 4): 20 sources, or 31,
	 * cannot fill it, and beyond that idle ones are shed first. */
	if (o->max_conns_per_addr == 0)
		o->max_conns_per_addr = o->max_conns / 32 > 4 ? o->max_conns / 32 : 4;
	F.linger_max = o->max_conns / 8 > 8 ? o->max_conns / 8 : 8;
	F.fb = sbx_fb_new(o->rst_shared, (uint64_t)o->cooldown_s * 1000);
	if (!F.fb)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "front: out of memory");
	F.spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (F.spare_fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "open /dev/null: %s",
				   strerror(errno));
	if (pipe2(F.ctl, O_CLOEXEC | O_NONBLOCK) != 0 ||
	    pipe2(F.handoff, O_CLOEXEC | O_NONBLOCK) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "pipe: %s", strerror(errno));
	F.handoff_sock =
		h2o_evloop_socket_create(S->ctx.loop, F.handoff[0], H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(F.handoff_sock, on_handoff);
	int e = pthread_create(&F.thread, NULL, front_main, NULL);
	if (e != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, e, "pthread_create: %s", strerror(e));
	return 0;
}

void sbx_front_stop(void)
{
	if (F.ctl[1] >= 0 && write(F.ctl[1], "s", 1) != 1)
		sbx_srv_log(SRV_LOG_ERROR, "event=front_stop err=\"%s\"", strerror(errno));
}

void sbx_front_metrics(FILE *f)
{
	fprintf(f, "# HELP sbxd_h2_goaway_total Connections the front closed, by reason.\n"
		   "# TYPE sbxd_h2_goaway_total counter\n");
	for (int i = 1; i < SBX_H2G_R_COUNT; i++)
		fprintf(f, "sbxd_h2_goaway_total{reason=\"%s\"} %lu\n", sbx_h2g_reason_names[i],
			(unsigned long)LOAD(F.goaway[i]));
	fprintf(f, "# HELP sbxd_conn_refused_total Connections refused at accept, by reason.\n"
		   "# TYPE sbxd_conn_refused_total counter\n");
	fprintf(f, "sbxd_conn_refused_total{reason=\"total\"} %lu\n",
		(unsigned long)LOAD(F.refused_total));
	fprintf(f, "sbxd_conn_refused_total{reason=\"per_addr\"} %lu\n",
		(unsigned long)LOAD(F.refused_addr));
	fprintf(f, "sbxd_conn_refused_total{reason=\"fd\"} %lu\n",
		(unsigned long)LOAD(F.refused_fd));
	fprintf(f, "# HELP sbxd_requests_rejected_total Requests the front answered itself.\n"
		   "# TYPE sbxd_requests_rejected_total counter\n");
	fprintf(f, "sbxd_requests_rejected_total{status=\"401\"} %lu\n",
		(unsigned long)LOAD(F.rejected401));
	fprintf(f, "sbxd_requests_rejected_total{status=\"503\"} %lu\n",
		(unsigned long)LOAD(F.rejected503));
	fprintf(f, "# HELP sbxd_connections_accepted_total Connections accepted.\n"
		   "# TYPE sbxd_connections_accepted_total counter\n");
	fprintf(f, "sbxd_connections_accepted_total %lu\n", (unsigned long)LOAD(F.accepted));
	fprintf(f, "# HELP sbxd_connections_open Client connections open now.\n"
		   "# TYPE sbxd_connections_open gauge\n");
	fprintf(f, "sbxd_connections_open %u\n", LOAD(F.n_conns));
	fprintf(f, "# HELP sbxd_request_body_held_bytes Request body bytes h2o holds now.\n"
		   "# TYPE sbxd_request_body_held_bytes gauge\n");
	fprintf(f, "sbxd_request_body_held_bytes %lu\n", (unsigned long)LOAD(F.held_pub));
}

void sbx_front_counts(uint64_t *answered, uint64_t *n401)
{
	*n401 = LOAD(F.rejected401);
	*answered = *n401 + LOAD(F.rejected503);
}

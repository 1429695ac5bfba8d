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
 *
 * This file: the guard's hooks (authentication, reset budgets), the
 * front's thread, its start and stop, and its metrics.
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "front_int.h"

struct sbx_front_state sbx_front_state = {
	.spare_fd = -1, .ctl = {-1, -1}, .handoff = {-1, -1}, .kick_fd = -1};

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

int front_new_guard(conn *c)
{
	sbx_h2g_hooks hooks = {on_check, on_body, on_reset, c};
	sbx_front_o.lim.held_total = &F.held_total;
	c->g = sbx_h2g_new(&sbx_front_o.lim, &hooks);
	return c->g ? 0 : -1;
}

void front_guard_counts(conn *c)
{
	uint64_t a, b;
	sbx_h2g_rejected(c->g, &a, &b);
	ADD(F.rejected401, a - c->seen401);
	ADD(F.rejected503, b - c->seen503);
	c->seen401 = a;
	c->seen503 = b;
}

/* ---- the front's thread ---- */

/* Main loop: h2o's ends of new socketpairs, to serve. */
static void on_handoff(h2o_socket_t *sock, const char *err)
{
	sbx_srv *S = F.S;
	front_handoff h[64];
	ssize_t n;
	(void)sock;
	(void)err;

	while ((n = read(F.handoff[0], h, sizeof(h))) > 0)
		for (ssize_t i = 0; i < n / (ssize_t)sizeof(h[0]); i++) {
			h2o_socket_t *s = h2o_evloop_socket_create(S->ctx.loop, h[i].fd, 0);
			front_direct_register(s, h[i].fd, h[i].link);
			h2o_accept(&S->accept_ctx, s);
		}
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
	F.pause_entry.cb = front_on_pause_over;
	F.ctl_sock = h2o_evloop_socket_create(F.loop, F.ctl[0], H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(F.ctl_sock, on_ctl);
	F.kick_sock = h2o_evloop_socket_create(F.loop, F.kick_fd, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(F.kick_sock, front_on_kick);
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
	uint64_t nofile = 1024;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		nofile = rl.rlim_cur;
	sbx_front_derive(o, S->max_body, nofile);
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
	if (front_direct_init() != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "eventfd: %s", strerror(errno));
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
	fprintf(f, "sbxd_request_body_held_bytes %lu\n", (unsigned long)LOAD(F.held_total));
	fprintf(f,
		"# HELP sbxd_front_out_bytes_total h2o's bytes to clients, by path: sent from the "
		"loop thread (direct) or across the socketpair and the front's thread.\n"
		"# TYPE sbxd_front_out_bytes_total counter\n");
	fprintf(f, "sbxd_front_out_bytes_total{path=\"direct\"} %lu\n",
		(unsigned long)LOAD(F.out_direct));
	fprintf(f, "sbxd_front_out_bytes_total{path=\"socketpair\"} %lu\n",
		(unsigned long)LOAD(F.out_socketpair));
}

void sbx_front_counts(uint64_t *answered, uint64_t *n401)
{
	*n401 = LOAD(F.rejected401);
	*answered = *n401 + LOAD(F.rejected503);
}

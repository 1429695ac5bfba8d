/*
 * test_proxy.c: the allow-list proxy engine (src/core/proxy.c) for real:
 * a proxy on 127.0.0.1 stepped by a thread of its own, upstream servers
 * on ephemeral 127.0.0.1 ports, clients speaking CONNECT, absolute-form
 * HTTP and SOCKS5 to it.
 *
 * The decider is C: "allowed.test" gets the literal 127.0.0.1,
 * "localhost" is resolved (through /etc/hosts, no DNS), "denied.test" is
 * refused by name, "deny-addrs.test" by address, "nothing.test" and
 * "badliteral.test" are decider bugs the proxy must refuse, "later.test"
 * is answered pending (the verdict comes through sbx_proxy_decided).  Every call is
 * recorded so the tests can assert what was (not) asked, and the proxy's
 * lookup counter shows whether a resolver ever ran.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "proxy_parse.h"
#include "sbx_proxy.h"

/* ---- the decider ---- */

static pthread_mutex_t dmu = PTHREAD_MUTEX_INITIALIZER;
static int n_name, n_addrs;
static char last_name_host[256], last_addrs[4][64], last_log[700];
static size_t last_n_addrs;
static int name_calls_for(const char *host);
static char seen_names[64][64];
static int n_seen;
static uint64_t later_ticket; /* the last pending question's ticket */

static void decide(void *ud, const sbx_proxy_query *q, sbx_proxy_verdict *v)
{
	(void)ud;
	pthread_mutex_lock(&dmu);
	if (q->phase == SBX_PROXY_NAME) {
		n_name++;
		snprintf(last_name_host, sizeof(last_name_host), "%s", q->host);
		if (n_seen < 64)
			snprintf(seen_names[n_seen++], 64, "%s", q->host);
		if (!strcmp(q->host, "allowed.test") || !strcmp(q->host, "deny-addrs.test")) {
			v->allow = true;
			strcpy(v->literal, "127.0.0.1");
		} else if (!strcmp(q->host, "localhost")) {
			v->allow = true;
			strcpy(v->resolve, "localhost");
		} else if (!strcmp(q->host, "nothing.test")) {
			v->allow = true;
		} else if (!strcmp(q->host, "later.test")) {
			v->pending = true;
			later_ticket = q->ticket;
		} else if (!strcmp(q->host, "badliteral.test")) {
			v->allow = true;
			strcpy(v->literal, "127.0.0.1x");
		} else {
			snprintf(v->reason, sizeof(v->reason), "%s is not on the allow-list",
				 q->host);
		}
	} else {
		n_addrs++;
		last_n_addrs = q->n_addrs;
		for (size_t i = 0; i < q->n_addrs && i < 4; i++)
			snprintf(last_addrs[i], sizeof(last_addrs[i]), "%s", q->addrs[i]);
		if (!strcmp(q->host, "deny-addrs.test"))
			snprintf(v->reason, sizeof(v->reason), "%s is a denied address",
				 q->addrs[0]);
		else
			v->allow = true;
	}
	pthread_mutex_unlock(&dmu);
}

static int name_calls_for(const char *host)
{
	int n = 0;
	pthread_mutex_lock(&dmu);
	for (int i = 0; i < n_seen; i++)
		n += !strcmp(seen_names[i], host);
	pthread_mutex_unlock(&dmu);
	return n;
}

static void on_log(void *ud, const char *line)
{
	(void)ud;
	pthread_mutex_lock(&dmu);
	snprintf(last_log, sizeof(last_log), "%s", line);
	pthread_mutex_unlock(&dmu);
}

static void reset_decider(void)
{
	pthread_mutex_lock(&dmu);
	n_name = n_addrs = n_seen = 0;
	last_n_addrs = 0;
	last_log[0] = last_name_host[0] = '\0';
	pthread_mutex_unlock(&dmu);
}

/* ---- a proxy stepped by its own thread ---- */

struct px {
	sbx_proxy *p;
	pthread_t th;
	pthread_mutex_t mu; /* held around each step; tests take it to look inside */
	volatile int stop;
	uint16_t port;
};

static void *px_loop(void *arg)
{
	struct px *x = arg;
	while (!x->stop) {
		sbx_err err;
		pthread_mutex_lock(&x->mu);
		int rc = sbx_proxy_step(x->p, 0, &err);
		pthread_mutex_unlock(&x->mu);
		if (rc < 0)
			break;
		struct pollfd pf = {.fd = sbx_proxy_fd(x->p), .events = POLLIN};
		poll(&pf, 1, 20); /* the epoll fd is readable when there is work */
	}
	return NULL;
}

static int listen_on(uint16_t *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 512), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

static struct px *px_start(const sbx_proxy_cfg *cfg, void *tag)
{
	struct px *x = calloc(1, sizeof(*x));
	sbx_err err;

	assert_non_null(x);
	x->p = sbx_proxy_new(cfg, &err);
	if (!x->p)
		fail_msg("sbx_proxy_new: %s", err.msg);
	assert_int_equal(sbx_proxy_add_listener(x->p, listen_on(&x->port), tag, &err), 0);
	pthread_mutex_init(&x->mu, NULL);
	assert_int_equal(pthread_create(&x->th, NULL, px_loop, x), 0);
	return x;
}

static void px_stop(struct px *x)
{
	x->stop = 1;
	pthread_join(x->th, NULL);
	sbx_proxy_free(x->p);
	pthread_mutex_destroy(&x->mu);
	free(x);
}

static sbx_proxy_stats px_stats(struct px *x)
{
	sbx_proxy_stats st;
	pthread_mutex_lock(&x->mu);
	sbx_proxy_get_stats(x->p, &st);
	pthread_mutex_unlock(&x->mu);
	return st;
}

static uint64_t px_lookups(struct px *x)
{
	pthread_mutex_lock(&x->mu);
	uint64_t n = sbx_proxy_lookups(x->p);
	pthread_mutex_unlock(&x->mu);
	return n;
}

/* ---- upstream servers: thread per connection ---- */

typedef void (*serve_fn)(int fd);

struct server {
	int lfd;
	uint16_t port;
	serve_fn fn;
	pthread_t th;
};

struct job {
	int fd;
	serve_fn fn;
};

static void *job_thread(void *arg)
{
	struct job j = *(struct job *)arg;
	free(arg);
	j.fn(j.fd);
	close(j.fd);
	return NULL;
}

static void *accept_thread(void *arg)
{
	struct server *s = arg;
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
		pthread_t th;
		if (fd < 0)
			return NULL; /* the listener was shut down */
		struct job *j = malloc(sizeof(*j));
		j->fd = fd;
		j->fn = s->fn;
		if (pthread_create(&th, NULL, job_thread, j) != 0) {
			close(fd);
			free(j);
			continue;
		}
		pthread_detach(th);
	}
}

static struct server *server_start(serve_fn fn)
{
	struct server *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	s->fn = fn;
	s->lfd = listen_on(&s->port);
	assert_int_equal(pthread_create(&s->th, NULL, accept_thread, s), 0);
	return s;
}

static void server_stop(struct server *s)
{
	shutdown(s->lfd, SHUT_RDWR);
	pthread_join(s->th, NULL);
	close(s->lfd);
	free(s);
}

static bool send_all(int fd, const void *b, size_t n)
{
	const char *p = b;
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

static bool recv_all(int fd, void *b, size_t n)
{
	char *p = b;
	while (n) {
		ssize_t r = recv(fd, p, n, 0);
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

/* Everything until EOF (or the 5 s receive timeout), NUL-terminated. */
static size_t recv_until_eof(int fd, char *b, size_t cap)
{
	size_t n = 0;
	ssize_t r;
	while (n + 1 < cap && (r = recv(fd, b + n, cap - 1 - n, 0)) > 0)
		n += (size_t)r;
	b[n] = '\0';
	return n;
}

static void serve_echo(int fd)
{
	char b[16384];
	ssize_t n;
	while ((n = recv(fd, b, sizeof(b), 0)) > 0)
		if (!send_all(fd, b, (size_t)n))
			break;
}

#define BULK (64u << 20)

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static void pattern(uint8_t *b, size_t n, size_t off)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((off + i) * 7 + ((off + i) >> 13));
}

/* Read until EOF hashing, then send the hash, the count, and BULK bytes. */
static void serve_bulk(int fd)
{
	static __thread uint8_t b[1 << 16];
	uint64_t h = 14695981039346656037ull, total = 0;
	ssize_t n;
	while ((n = recv(fd, b, sizeof(b), 0)) > 0) {
		h = fnv(h, b, (size_t)n);
		total += (uint64_t)n;
	}
	if (!send_all(fd, &h, 8) || !send_all(fd, &total, 8))
		return;
	for (size_t off = 0; off < BULK; off += sizeof(b)) {
		pattern(b, sizeof(b), off);
		if (!send_all(fd, b, sizeof(b)))
			return;
	}
}

/* HTTP: records everything it receives within 300 ms of the head. */
static pthread_mutex_t hmu = PTHREAD_MUTEX_INITIALIZER;
static char http_seen[65536];
static size_t http_seen_len;

static void serve_http(int fd)
{
	char b[65536];
	size_t n = 0;
	ssize_t r;
	struct timeval tv = {.tv_usec = 300000};

	while (n < sizeof(b) && (r = recv(fd, b + n, sizeof(b) - n, 0)) > 0) {
		n += (size_t)r;
		if (memmem(b, n, "\r\n\r\n", 4))
			break;
	}
	send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 44);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while (n < sizeof(b) && (r = recv(fd, b + n, sizeof(b) - n, 0)) > 0)
		n += (size_t)r;
	pthread_mutex_lock(&hmu);
	memcpy(http_seen, b, n);
	http_seen_len = n;
	pthread_mutex_unlock(&hmu);
}

/* ---- fixture ---- */

static int tag_main, tag_b;
static struct px *X;
static struct server *ECHO, *BULKS, *HTTP;

static void on_log(void *ud, const char *line);

static int setup(void **state)
{
	(void)state;
	sbx_proxy_cfg cfg = {.decide = decide,
			     .log = on_log,
			     .header_timeout_ms = 700,
			     .connect_timeout_ms = 2000};
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	X = px_start(&cfg, &tag_main);
	ECHO = server_start(serve_echo);
	BULKS = server_start(serve_bulk);
	HTTP = server_start(serve_http);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	px_stop(X);
	server_stop(ECHO);
	server_stop(BULKS);
	server_stop(HTTP);
	return 0;
}

static int dial(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {.tv_sec = 5};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

/* CONNECT host:port through X; returns the fd after a 200, or -1 with the
 * whole answer in resp. */
static int do_connect(uint16_t proxy_port, const char *host, uint16_t port, char *resp, size_t cap)
{
	char req[512], b[512];
	int fd = dial(proxy_port);
	size_t n = 0;
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";

	snprintf(req, sizeof(req), "CONNECT %s:%u HTTP/1.1\r\nHost: %s:%u\r\n\r\n", host, port,
		 host, port);
	assert_true(send_all(fd, req, strlen(req)));
	/* read exactly the 200's length first; anything else: read to EOF */
	while (n < sizeof(ok) - 1) {
		ssize_t r = recv(fd, b + n, sizeof(ok) - 1 - n, 0);
		if (r <= 0)
			break;
		n += (size_t)r;
		if (memcmp(b, ok, n) != 0)
			break;
	}
	if (n == sizeof(ok) - 1 && memcmp(b, ok, n) == 0)
		return fd;
	memcpy(resp, b, n < cap ? n : cap - 1);
	if (n < cap)
		recv_until_eof(fd, resp + n, cap - n);
	else
		resp[cap - 1] = '\0';
	close(fd);
	return -1;
}

/* ---- tests ---- */

struct pump_arg {
	int fd;
	uint64_t hash;
};

static void *send_bulk(void *arg)
{
	struct pump_arg *a = arg;
	static uint8_t b[1 << 16];
	a->hash = 14695981039346656037ull;
	for (size_t off = 0; off < BULK; off += sizeof(b)) {
		pattern(b, sizeof(b), off + 3);
		a->hash = fnv(a->hash, b, sizeof(b));
		if (!send_all(a->fd, b, sizeof(b)))
			return NULL;
	}
	shutdown(a->fd, SHUT_WR); /* half-close: the server answers after EOF */
	return NULL;
}

static void test_connect_64mib(void **state)
{
	char resp[1024];
	uint64_t h, total, want = 14695981039346656037ull, got = want;
	uint8_t *b = malloc(1 << 16), *w = malloc(1 << 16);
	struct pump_arg a;
	pthread_t th;
	sbx_proxy_stats before = px_stats(X), after;
	(void)state;

	a.fd = do_connect(X->port, "allowed.test", BULKS->port, resp, sizeof(resp));
	if (a.fd < 0)
		fail_msg("CONNECT refused: %s", resp);
	assert_int_equal(pthread_create(&th, NULL, send_bulk, &a), 0);
	pthread_join(th, NULL);
	assert_true(recv_all(a.fd, &h, 8));
	assert_true(recv_all(a.fd, &total, 8));
	assert_int_equal(total, BULK);
	assert_true(h == a.hash); /* client -> server, byte for byte */
	for (size_t off = 0; off < BULK; off += 1 << 16) {
		assert_true(recv_all(a.fd, b, 1 << 16));
		pattern(w, 1 << 16, off);
		want = fnv(want, w, 1 << 16);
		got = fnv(got, b, 1 << 16);
	}
	assert_true(got == want);		  /* server -> client */
	assert_int_equal(recv(a.fd, b, 1, 0), 0); /* then EOF */
	close(a.fd);
	after = px_stats(X);
	assert_true(after.bytes_up - before.bytes_up >= BULK);
	assert_true(after.bytes_down - before.bytes_down >= BULK + 16);
	assert_int_equal(after.allowed - before.allowed, 1);
	free(b);
	free(w);
}

static double thread_cpu_ms(pthread_t th)
{
	clockid_t cid;
	struct timespec ts;
	assert_int_equal(pthread_getcpuclockid(th, &cid), 0);
	assert_int_equal(clock_gettime(cid, &ts), 0);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A client that does not read: the proxy stops reading the upstream
 * (bounded buffering) and does not spin while it waits. */
static void test_backpressure(void **state)
{
	char resp[1024];
	uint8_t *b = malloc(1 << 16), *w = malloc(1 << 16);
	uint64_t h, total, want = 14695981039346656037ull, got = want;
	(void)state;

	int fd = do_connect(X->port, "allowed.test", BULKS->port, resp, sizeof(resp));
	assert_true(fd >= 0);
	assert_true(send_all(fd, "x", 1));
	shutdown(fd, SHUT_WR); /* the server now sends 64 MiB we do not read */
	usleep(200000);
	sbx_proxy_stats s0 = px_stats(X);
	double cpu0 = thread_cpu_ms(X->th);
	usleep(500000);
	double cpu = thread_cpu_ms(X->th) - cpu0;
	sbx_proxy_stats s1 = px_stats(X);
	assert_true(s1.bytes_down == s0.bytes_down); /* stalled, not buffering on */
	if (cpu > 100)
		fail_msg("the proxy spun while the client did not read: %.1f ms CPU in 500 ms",
			 cpu);
	assert_true(recv_all(fd, &h, 8));
	assert_true(recv_all(fd, &total, 8));
	assert_int_equal(total, 1);
	for (size_t off = 0; off < BULK; off += 1 << 16) {
		assert_true(recv_all(fd, b, 1 << 16));
		pattern(w, 1 << 16, off);
		want = fnv(want, w, 1 << 16);
		got = fnv(got, b, 1 << 16);
	}
	assert_true(got == want);
	close(fd);
	free(b);
	free(w);
}

static void test_refused_name(void **state)
{
	char resp[2048];
	uint64_t lookups = px_lookups(X);
	sbx_proxy_stats before = px_stats(X);
	(void)state;

	reset_decider();
	assert_int_equal(do_connect(X->port, "denied.test", 443, resp, sizeof(resp)), -1);
	assert_non_null(strstr(resp, "HTTP/1.1 403 Forbidden\r\n"));
	assert_non_null(strstr(resp, "Connection: close\r\n"));
	assert_non_null(strstr(resp, "\r\n\r\nsbx proxy: denied.test is not on the allow-list\n"));
	pthread_mutex_lock(&dmu);
	assert_int_equal(n_name, 1);
	assert_int_equal(n_addrs, 0); /* never got as far as addresses */
	assert_string_equal(last_log,
			    "refused denied.test:443 (connect): denied.test is not on the "
			    "allow-list");
	pthread_mutex_unlock(&dmu);
	assert_int_equal(px_lookups(X), lookups); /* and no resolver ran */
	assert_int_equal(px_stats(X).refused - before.refused, 1);
}

static void test_refused_addrs(void **state)
{
	char resp[2048];
	(void)state;

	reset_decider();
	assert_int_equal(do_connect(X->port, "deny-addrs.test", ECHO->port, resp, sizeof(resp)),
			 -1);
	assert_non_null(strstr(resp, "403 Forbidden"));
	assert_non_null(strstr(resp, "sbx proxy: 127.0.0.1 is a denied address\n"));
	pthread_mutex_lock(&dmu);
	assert_int_equal(n_addrs, 1);
	assert_int_equal(last_n_addrs, 1);
	assert_string_equal(last_addrs[0], "127.0.0.1");
	pthread_mutex_unlock(&dmu);
}

static void test_decider_bugs(void **state)
{
	char resp[2048];
	(void)state;

	assert_int_equal(do_connect(X->port, "nothing.test", ECHO->port, resp, sizeof(resp)), -1);
	assert_non_null(strstr(resp, "403 Forbidden"));
	assert_non_null(strstr(resp, "sbx proxy: decider gave nothing to dial\n"));
	assert_int_equal(do_connect(X->port, "badliteral.test", ECHO->port, resp, sizeof(resp)),
			 -1);
	assert_non_null(strstr(resp, "403 Forbidden"));
	assert_non_null(strstr(resp, "not an IP address"));
}

static void test_resolve_localhost(void **state)
{
	char resp[1024], b[6];
	uint64_t lookups = px_lookups(X);
	bool has_v4 = false;
	(void)state;

	reset_decider();
	int fd = do_connect(X->port, "localhost", ECHO->port, resp, sizeof(resp));
	if (fd < 0)
		fail_msg("CONNECT localhost refused: %s", resp);
	assert_true(send_all(fd, "hello!", 6));
	assert_true(recv_all(fd, b, 6));
	assert_memory_equal(b, "hello!", 6);
	close(fd);
	assert_int_equal(px_lookups(X), lookups + 1);
	pthread_mutex_lock(&dmu);
	for (size_t i = 0; i < last_n_addrs && i < 4; i++)
		has_v4 |= !strcmp(last_addrs[i], "127.0.0.1");
	pthread_mutex_unlock(&dmu);
	assert_true(has_v4);
}

static void test_unreachable(void **state)
{
	char resp[2048];
	uint16_t port;
	int l = listen_on(&port);
	(void)state;

	close(l); /* nothing listens there now */
	assert_int_equal(do_connect(X->port, "allowed.test", port, resp, sizeof(resp)), -1);
	assert_non_null(strstr(resp, "HTTP/1.1 502 Bad Gateway"));
	assert_non_null(strstr(resp, "cannot connect"));
}

static void test_absolute_get(void **state)
{
	char req[512], resp[4096], want[512];
	(void)state;

	snprintf(req, sizeof(req),
		 "GET http://allowed.test:%u/path?x=1 HTTP/1.1\r\nHost: allowed.test:%u\r\n"
		 "Proxy-Connection: keep-alive\r\nProxy-Authorization: Basic Zm9v\r\n"
		 "User-Agent: t\r\n\r\n",
		 HTTP->port, HTTP->port);
	int fd = dial(X->port);
	assert_true(send_all(fd, req, strlen(req)));
	recv_until_eof(fd, resp, sizeof(resp));
	close(fd);
	assert_string_equal(resp, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
	usleep(400000);
	snprintf(want, sizeof(want),
		 "GET /path?x=1 HTTP/1.1\r\nHost: allowed.test:%u\r\n"
		 "User-Agent: t\r\nConnection: close\r\n\r\n",
		 HTTP->port);
	pthread_mutex_lock(&hmu);
	assert_int_equal(http_seen_len, strlen(want));
	assert_memory_equal(http_seen, want, strlen(want));
	pthread_mutex_unlock(&hmu);
}

static void test_host_mismatch(void **state)
{
	char req[512], resp[4096];
	(void)state;

	reset_decider();
	snprintf(req, sizeof(req),
		 "GET http://allowed.test:%u/ HTTP/1.1\r\nHost: denied.test\r\n\r\n", HTTP->port);
	int fd = dial(X->port);
	assert_true(send_all(fd, req, strlen(req)));
	recv_until_eof(fd, resp, sizeof(resp));
	close(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 400 Bad Request\r\n"));
	assert_non_null(strstr(resp, "Host header does not agree"));
	assert_int_equal(name_calls_for("allowed.test"), 0);
}

static void test_pipelined(void **state)
{
	char req[1024], resp[4096], want[512];
	(void)state;

	reset_decider();
	/* a POST with a 3-byte body, then a second request for a denied host */
	snprintf(req, sizeof(req),
		 "POST http://allowed.test:%u/a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc"
		 "GET http://denied.test:%u/b HTTP/1.1\r\nHost: denied.test:%u\r\n\r\n",
		 HTTP->port, HTTP->port, HTTP->port);
	int fd = dial(X->port);
	assert_true(send_all(fd, req, strlen(req)));
	recv_until_eof(fd, resp, sizeof(resp));
	close(fd);
	assert_string_equal(resp, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
	usleep(400000);
	snprintf(want, sizeof(want),
		 "POST /a HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc");
	pthread_mutex_lock(&hmu);
	assert_int_equal(http_seen_len, strlen(want)); /* not a byte of the second request */
	assert_memory_equal(http_seen, want, strlen(want));
	assert_null(memmem(http_seen, http_seen_len, "/b", 2));
	pthread_mutex_unlock(&hmu);
	/* the second request was dropped, never decided on the first's verdict */
	assert_int_equal(name_calls_for("denied.test"), 0);
	assert_int_equal(name_calls_for("allowed.test"), 1);
}

static void test_transfer_encoding(void **state)
{
	char resp[4096];
	(void)state;
	const char *req =
		"POST http://allowed.test:1/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
		"0\r\n\r\n";
	int fd = dial(X->port);
	assert_true(send_all(fd, req, strlen(req)));
	recv_until_eof(fd, resp, sizeof(resp));
	close(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 501 Not Implemented\r\n"));
	assert_non_null(strstr(resp, "Transfer-Encoding"));
}

static int socks_connect(uint16_t proxy_port, const char *host, uint16_t port, uint8_t *reply)
{
	uint8_t req[300] = {5, 1, 0, 3}, greet[3] = {5, 1, 0}, r[10];
	size_t hl = strlen(host);
	int fd = dial(proxy_port);

	/* greeting and request in one write, as optimistic clients do */
	uint8_t all[320];
	req[4] = (uint8_t)hl;
	memcpy(req + 5, host, hl);
	req[5 + hl] = (uint8_t)(port >> 8);
	req[6 + hl] = (uint8_t)port;
	memcpy(all, greet, 3);
	memcpy(all + 3, req, 7 + hl);
	assert_true(send_all(fd, all, 3 + 7 + hl));
	assert_true(recv_all(fd, r, 2));
	assert_int_equal(r[0], 5);
	assert_int_equal(r[1], 0);
	assert_true(recv_all(fd, r, 10));
	assert_int_equal(r[0], 5);
	*reply = r[1];
	return fd;
}

static void test_socks5(void **state)
{
	uint8_t rep;
	char b[5];
	(void)state;

	int fd = socks_connect(X->port, "allowed.test", ECHO->port, &rep);
	assert_int_equal(rep, 0);
	assert_true(send_all(fd, "socks", 5));
	assert_true(recv_all(fd, b, 5));
	assert_memory_equal(b, "socks", 5);
	close(fd);

	reset_decider();
	fd = socks_connect(X->port, "denied.test", ECHO->port, &rep);
	assert_int_equal(rep, 0x02);
	assert_int_equal(recv(fd, b, 1, 0), 0);
	close(fd);
	pthread_mutex_lock(&dmu);
	assert_int_equal(n_addrs, 0);
	assert_non_null(strstr(last_log, "refused denied.test"));
	assert_non_null(strstr(last_log, "(socks5)"));
	pthread_mutex_unlock(&dmu);

	/* BIND is not supported: 0x07 */
	fd = dial(X->port);
	assert_true(send_all(fd, "\x05\x01\x00\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50", 13));
	uint8_t r[12];
	assert_true(recv_all(fd, r, 12));
	assert_int_equal(r[3], 0x07);
	close(fd);
	/* only username/password offered: 0xff */
	fd = dial(X->port);
	assert_true(send_all(fd, "\x05\x01\x02", 3));
	assert_true(recv_all(fd, r, 2));
	assert_int_equal(r[1], 0xff);
	close(fd);
}

#define N_TUNNELS 200

static void test_many_tunnels(void **state)
{
	int fds[N_TUNNELS];
	char resp[1024];
	(void)state;

	for (int i = 0; i < N_TUNNELS; i++) {
		fds[i] = do_connect(X->port, "allowed.test", ECHO->port, resp, sizeof(resp));
		if (fds[i] < 0)
			fail_msg("tunnel %d refused: %s", i, resp);
	}
	assert_true(px_stats(X).active >= N_TUNNELS);
	for (int i = 0; i < N_TUNNELS; i++) {
		char m[32];
		int n = snprintf(m, sizeof(m), "tunnel %d", i);
		assert_true(send_all(fds[i], m, (size_t)n));
	}
	for (int i = 0; i < N_TUNNELS; i++) {
		char m[32], b[32];
		int n = snprintf(m, sizeof(m), "tunnel %d", i);
		assert_true(recv_all(fds[i], b, (size_t)n));
		assert_memory_equal(b, m, (size_t)n);
		close(fds[i]);
	}
}

static void test_remove_tag(void **state)
{
	char resp[1024], b[4];
	uint16_t port;
	sbx_err err;
	(void)state;

	pthread_mutex_lock(&X->mu);
	assert_int_equal(sbx_proxy_add_listener(X->p, listen_on(&port), &tag_b, &err), 0);
	pthread_mutex_unlock(&X->mu);
	int fd = do_connect(port, "allowed.test", ECHO->port, resp, sizeof(resp));
	int other = do_connect(X->port, "allowed.test", ECHO->port, resp, sizeof(resp));
	assert_true(fd >= 0 && other >= 0);
	assert_true(send_all(fd, "ping", 4));
	assert_true(recv_all(fd, b, 4));

	pthread_mutex_lock(&X->mu);
	sbx_proxy_remove(X->p, &tag_b);
	pthread_mutex_unlock(&X->mu);
	ssize_t r = recv(fd, b, 1, 0); /* the live tunnel is closed */
	assert_true(r == 0 || (r < 0 && errno == ECONNRESET));
	close(fd);
	/* the listener is gone */
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), -1);
	close(fd);
	/* the other tag's tunnel lives on */
	assert_true(send_all(other, "pong", 4));
	assert_true(recv_all(other, b, 4));
	assert_memory_equal(b, "pong", 4);
	close(other);
}

static void test_remove_while_resolving(void **state)
{
	uint16_t port;
	sbx_err err;
	char req[128];
	(void)state;

	/* many lookups in flight, then remove: completions must be dropped */
	pthread_mutex_lock(&X->mu);
	assert_int_equal(sbx_proxy_add_listener(X->p, listen_on(&port), &tag_b, &err), 0);
	pthread_mutex_unlock(&X->mu);
	int fds[20];
	snprintf(req, sizeof(req), "CONNECT localhost:%u HTTP/1.1\r\n\r\n", ECHO->port);
	pthread_mutex_lock(&X->mu);
	for (int i = 0; i < 20; i++) {
		fds[i] = dial(port);
		assert_true(send_all(fds[i], req, strlen(req)));
	}
	for (int i = 0; i < 5; i++)
		sbx_proxy_step(X->p, 5, &err);
	sbx_proxy_remove(X->p, &tag_b);
	pthread_mutex_unlock(&X->mu);
	for (int i = 0; i < 20; i++)
		close(fds[i]);
	usleep(100000); /* the proxy thread collects the abandoned lookups */
	assert_int_equal(px_stats(X).active, 0);
}

/* Send CONNECT later.test:port and wait until the decider has the
 * question (pending); returns the client fd and the ticket. */
static int ask_later(uint16_t port, uint64_t *ticket)
{
	char req[256];
	int fd = dial(X->port);

	pthread_mutex_lock(&dmu);
	later_ticket = 0;
	pthread_mutex_unlock(&dmu);
	snprintf(req, sizeof(req), "CONNECT later.test:%u HTTP/1.1\r\nHost: later.test\r\n\r\n",
		 port);
	assert_true(send_all(fd, req, strlen(req)));
	for (int i = 0; i < 500; i++) {
		pthread_mutex_lock(&dmu);
		*ticket = later_ticket;
		pthread_mutex_unlock(&dmu);
		if (*ticket)
			return fd;
		usleep(10000);
	}
	fail_msg("the decider was never asked about later.test");
	return -1;
}

/* Verdicts given later (sbxd's policy worker): an allowing one dials, a
 * refusing one answers 403 with its reason, a ticket whose connection is
 * gone is -1, and one never given runs into the header timeout. */
static void test_pending_verdict(void **state)
{
	char resp[1024], b[4];
	uint64_t ticket;
	sbx_proxy_verdict v;
	(void)state;

	int fd = ask_later(ECHO->port, &ticket);
	memset(&v, 0, sizeof(v));
	v.allow = true;
	strcpy(v.literal, "127.0.0.1");
	pthread_mutex_lock(&X->mu);
	assert_int_equal(sbx_proxy_decided(X->p, ticket, &v), 0);
	assert_int_equal(sbx_proxy_decided(X->p, ticket, &v), -1); /* answered already */
	pthread_mutex_unlock(&X->mu);
	assert_true(recv_all(fd, resp, 39));
	assert_memory_equal(resp, "HTTP/1.1 200 Connection established\r\n\r\n", 39);
	assert_true(send_all(fd, "ping", 4));
	assert_true(recv_all(fd, b, 4));
	assert_memory_equal(b, "ping", 4);
	close(fd);

	fd = ask_later(ECHO->port, &ticket);
	memset(&v, 0, sizeof(v));
	snprintf(v.reason, sizeof(v.reason), "the worker says no");
	pthread_mutex_lock(&X->mu);
	assert_int_equal(sbx_proxy_decided(X->p, ticket, &v), 0);
	pthread_mutex_unlock(&X->mu);
	recv_until_eof(fd, resp, sizeof(resp));
	close(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 403 Forbidden\r\n"));
	assert_non_null(strstr(resp, "sbx proxy: the worker says no\n"));

	fd = ask_later(ECHO->port, &ticket);
	recv_until_eof(fd, resp, sizeof(resp)); /* nobody answers: header timeout */
	close(fd);
	assert_non_null(strstr(resp, "403 Forbidden"));
	assert_non_null(strstr(resp, "the policy did not decide in time"));
	pthread_mutex_lock(&X->mu);
	assert_int_equal(sbx_proxy_decided(X->p, ticket, &v), -1);
	pthread_mutex_unlock(&X->mu);
}

static void test_header_timeout(void **state)
{
	char resp[1024];
	(void)state;
	int fd = dial(X->port);
	assert_true(send_all(fd, "CONNECT allowed.test", 20));
	recv_until_eof(fd, resp, sizeof(resp));
	close(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 408 Request Timeout\r\n"));
}

static void test_head_too_large(void **state)
{
	char *big = malloc(20000), resp[1024];
	(void)state;
	memset(big, 'a', 20000);
	memcpy(big, "GET http://allowed.test/ HTTP/1.1\r\nX: ", 38);
	int fd = dial(X->port);
	send_all(fd, big, 20000);
	recv_until_eof(fd, resp, sizeof(resp));
	close(fd);
	free(big);
	assert_non_null(strstr(resp, "HTTP/1.1 431 "));
}

static void test_idle_timeout(void **state)
{
	sbx_proxy_cfg cfg = {.decide = decide, .idle_timeout_ms = 300};
	struct px *y = px_start(&cfg, &tag_b);
	char resp[512], b[4];
	(void)state;

	int fd = do_connect(y->port, "allowed.test", ECHO->port, resp, sizeof(resp));
	assert_true(fd >= 0);
	assert_true(send_all(fd, "ping", 4));
	assert_true(recv_all(fd, b, 4));
	struct timespec a, z;
	clock_gettime(CLOCK_MONOTONIC, &a);
	ssize_t r = recv(fd, b, 1, 0); /* nothing moves: closed after ~300 ms */
	clock_gettime(CLOCK_MONOTONIC, &z);
	double ms = (double)(z.tv_sec - a.tv_sec) * 1e3 + (double)(z.tv_nsec - a.tv_nsec) / 1e6;
	assert_int_equal(r, 0);
	if (ms < 200 || ms > 3000)
		fail_msg("idle tunnel closed after %.0f ms (want ~300)", ms);
	close(fd);
	px_stop(y);
}

static void test_max_conns(void **state)
{
	sbx_proxy_cfg cfg = {.decide = decide, .max_conns = 2};
	struct px *y = px_start(&cfg, &tag_b);
	char b[1];
	(void)state;

	int a = dial(y->port), c = dial(y->port);
	for (int i = 0; i < 100 && px_stats(y).active < 2; i++)
		usleep(10000);
	assert_int_equal(px_stats(y).active, 2);
	int d = dial(y->port);
	ssize_t r = recv(d, b, 1, 0); /* closed at once */
	assert_true(r == 0 || (r < 0 && errno == ECONNRESET));
	close(d);
	close(a);
	close(c);
	for (int i = 0; i < 100 && px_stats(y).active > 0; i++)
		usleep(10000);
	/* room again */
	char resp[512];
	int e = do_connect(y->port, "allowed.test", ECHO->port, resp, sizeof(resp));
	assert_true(e >= 0);
	close(e);
	px_stop(y);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect_64mib),
		cmocka_unit_test(test_backpressure),
		cmocka_unit_test(test_refused_name),
		cmocka_unit_test(test_refused_addrs),
		cmocka_unit_test(test_decider_bugs),
		cmocka_unit_test(test_pending_verdict),
		cmocka_unit_test(test_resolve_localhost),
		cmocka_unit_test(test_unreachable),
		cmocka_unit_test(test_absolute_get),
		cmocka_unit_test(test_host_mismatch),
		cmocka_unit_test(test_pipelined),
		cmocka_unit_test(test_transfer_encoding),
		cmocka_unit_test(test_socks5),
		cmocka_unit_test(test_many_tunnels),
		cmocka_unit_test(test_remove_tag),
		cmocka_unit_test(test_remove_while_resolving),
		cmocka_unit_test(test_header_timeout),
		cmocka_unit_test(test_head_too_large),
		cmocka_unit_test(test_idle_timeout),
		cmocka_unit_test(test_max_conns),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}

/*
 * proxy.c: the allow-list proxy engine (the contract is sbx_proxy.h).
 *
 * One epoll set holds the listeners, both sockets of every connection, the
 * resolver's eventfd and a timerfd; sbx_proxy_step dispatches what is
 * ready.  A connection goes
 *
 *   HEAD (HTTP head, or SOCKS5 greeting + request when the first byte is 5)
 *   -> decide(NAME) -> RESOLVING (worker threads, proxy_resolve.c) unless
 *      the verdict gave a literal -> decide(ADDRS) -> CONNECTING (each
 *      checked address in turn, non-blocking, connect_timeout each)
 *   -> RELAY: two directions, each a pipe pair moved with splice(2)
 *      (read/write through a buffer if splice is refused), level-triggered
 *      interest recomputed after every move so a side that cannot take
 *      more stops the other side's reads (backpressure), shutdown(SHUT_WR)
 *      passed on when one side ends (half-close).
 *
 * Absolute-form HTTP requests are forwarded one per connection: the
 * upstream gets the origin-form head with "Connection: close" and exactly
 * Content-Length bytes of body, the response is relayed until the upstream
 * closes, then the client connection is closed.  Whatever the client sent
 * past the first request's body (a pipelined second request) is dropped,
 * never forwarded, so no request rides on another's decision: a client
 * that wants another request opens another connection and is decided again.
 *
 * A closed connection is only unlinked during a step and freed at its end,
 * so events already fetched for it are skipped, not used after free; a
 * pending lookup is abandoned (its job freed when it completes).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "proxy_parse.h"
#include "proxy_resolve.h"
#include "sbx_proxy.h"

#define PIPE_SIZE (512 * 1024)
#define BUF_SIZE (64 * 1024)
#define ACCEPT_BATCH 64

enum ev_type { EV_LISTENER, EV_CLIENT, EV_UPSTREAM, EV_RESOLVER, EV_TIMER };

struct evh {
	enum ev_type type;
	void *obj;
};

struct listener {
	struct evh ev;
	int fd;
	void *tag;
	uint64_t paused_until; /* out of fds: accepting again at this time (ms) */
	struct listener *next;
};

enum state { ST_HEAD, ST_SOCKS_REQ, ST_DECIDING, ST_RESOLVING, ST_CONNECTING, ST_RELAY, ST_DEAD };
enum mode { M_UNKNOWN, M_CONNECT, M_FORWARD, M_SOCKS };

/* One direction of a relay: src -> dst. */
struct dir {
	int pipe[2];   /* -1 until first needed */
	size_t inpipe; /* bytes in the pipe (or buf) not yet written */
	bool use_buf;  /* splice refused: read/write through buf */
	bool full;     /* the pipe took no more (its slots can fill up
	                     * before PIPE_SIZE bytes): read again once it drains */
	char *buf;
	size_t boff;
	bool eof;	/* nothing more to read from src */
	bool by_limit;	/* ... because limit reached (no shutdown) */
	bool done;	/* eof and drained; shutdown sent */
	uint64_t limit; /* bytes still to read from src */
	char *pre;	/* sent to dst before anything read from src */
	size_t pre_off, pre_len;
};

struct conn {
	struct evh cev, uev;
	struct sbx_proxy *p;
	int cfd, ufd;
	uint32_t cmask, umask; /* current epoll interest; UINT32_MAX: not registered */
	void *tag;
	enum state st;
	enum mode mode;
	const char *kind;
	char host[SBX_PROXY_HOST_MAX + 1];
	uint16_t port;
	sbx_resolve_job *job;
	uint64_t ticket;	       /* ST_DECIDING: the question waiting */
	sbx_proxy_phase pending_phase; /* ... and its phase */
	struct sockaddr_storage addrs[SBX_PROXY_MAX_ADDRS];
	size_t n_addrs, next_addr;
	int last_errno;
	uint64_t deadline; /* ms, CLOCK_MONOTONIC; 0: none */
	uint64_t last_act; /* RELAY: last byte moved */
	struct dir up, down;
	struct conn *prev, *next;
	size_t hlen;
	sbx_proxy_http_req req;
	char head[SBX_PROXY_HEAD_MAX];
};

struct sbx_proxy {
	sbx_proxy_cfg cfg;
	int epfd, tfd, rfd;
	struct evh tev, rev;
	sbx_resolver *res;
	struct listener *listeners;
	struct conn *conns, *dead;
	uint64_t timer_at;
	uint64_t lookups;
	uint64_t next_ticket;
	sbx_proxy_stats st;
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- logging and answers ---- */

static void logf_(sbx_proxy *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(sbx_proxy *p, const char *fmt, ...)
{
	char line[640];
	va_list ap;

	if (!p->cfg.log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	p->cfg.log(p->cfg.ud, line);
}

static const char *target(const struct conn *c, char *b, size_t n)
{
	if (!c->host[0])
		snprintf(b, n, "-");
	else if (strchr(c->host, ':'))
		snprintf(b, n, "[%s]:%u", c->host, c->port);
	else
		snprintf(b, n, "%s:%u", c->host, c->port);
	return b;
}

static const char *status_text(int status)
{
	switch (status) {
	case 400:
		return "Bad Request";
	case 403:
		return "Forbidden";
	case 408:
		return "Request Timeout";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	default:
		return "Error";
	}
}

static void conn_close(struct conn *c);

/* Answer the client (HTTP status or SOCKS5 reply) and close. */
static void conn_fail(struct conn *c, int status, uint8_t socks_reply, const char *reason)
{
	char msg[1024], t[300];
	int n;

	if (c->mode == M_SOCKS) {
		uint8_t r[10] = {5, socks_reply, 0, 1};
		if (send(c->cfd, r, sizeof(r), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
			/* the client is gone; nothing to tell */
		}
	} else {
		n = snprintf(msg, sizeof(msg),
			     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
			     "Connection: close\r\n\r\nsbx proxy: %s\n",
			     status, status_text(status), strlen(reason) + 12, reason);
		if (n > 0 &&
		    send(c->cfd, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1,
			 MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
			/* the client is gone */
		}
	}
	if (status == 403) {
		c->p->st.refused++;
		logf_(c->p, "refused %s (%s): %s", target(c, t, sizeof(t)), c->kind, reason);
	} else {
		c->p->st.failed++;
		logf_(c->p, "failed %s (%s): %d %s", target(c, t, sizeof(t)), c->kind, status,
		      reason);
	}
	conn_close(c);
}

/* ---- epoll interest ---- */

/* A socket the relay no longer reads nor writes leaves the set, so its
 * lasting EPOLLHUP does not wake every step. */
#define EP_GONE (UINT32_MAX - 1)

static int ep_set(sbx_proxy *p, int fd, struct evh *h, uint32_t *cur, uint32_t want)
{
	struct epoll_event ev = {.events = want, .data.ptr = h};

	if (*cur == want || *cur == EP_GONE)
		return 0;
	if (want == EP_GONE) {
		if (*cur != UINT32_MAX && epoll_ctl(p->epfd, EPOLL_CTL_DEL, fd, NULL) < 0)
			return -1;
		*cur = EP_GONE;
		return 0;
	}
	if (*cur == UINT32_MAX) {
		if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			return -1;
	} else if (epoll_ctl(p->epfd, EPOLL_CTL_MOD, fd, &ev) < 0) {
		return -1;
	}
	*cur = want;
	return 0;
}

static bool dir_pending(const struct dir *d)
{
	return d->pre_off < d->pre_len || d->inpipe > 0;
}

static bool dir_wants_read(const struct dir *d)
{
	return !d->eof && !d->full && d->pre_off >= d->pre_len &&
	       d->inpipe < (d->use_buf ? BUF_SIZE : PIPE_SIZE);
}

/* Recompute which events each socket of c waits for. */
static void conn_update(struct conn *c)
{
	uint32_t cw = 0, uw = 0;

	switch (c->st) {
	case ST_HEAD:
	case ST_SOCKS_REQ:
		cw = EPOLLIN;
		break;
	case ST_CONNECTING:
		uw = EPOLLOUT;
		break;
	case ST_RELAY:
		if (dir_wants_read(&c->up))
			cw |= EPOLLIN;
		if (dir_pending(&c->down))
			cw |= EPOLLOUT;
		if (dir_wants_read(&c->down))
			uw |= EPOLLIN;
		if (dir_pending(&c->up))
			uw |= EPOLLOUT;
		if (c->up.eof && c->down.done)
			cw = EP_GONE;
		if (c->down.eof && c->up.done)
			uw = EP_GONE;
		break;
	default:
		break;
	}
	if (ep_set(c->p, c->cfd, &c->cev, &c->cmask, cw) < 0 ||
	    (c->ufd >= 0 && ep_set(c->p, c->ufd, &c->uev, &c->umask, uw) < 0))
		conn_close(c);
}

/* ---- connection lifetime ---- */

static void dir_free(struct dir *d)
{
	if (d->pipe[0] >= 0) {
		close(d->pipe[0]);
		close(d->pipe[1]);
		d->pipe[0] = d->pipe[1] = -1;
	}
	free(d->buf);
	free(d->pre);
	d->buf = d->pre = NULL;
}

/* Unlink c (freed at the end of the step), closing everything it holds.
 * Unread client bytes are drained first so the kernel ends with FIN, not
 * RST, and the answer just sent reaches the client. */
static void conn_close(struct conn *c)
{
	sbx_proxy *p = c->p;
	char sink[4096];

	if (c->st == ST_DEAD)
		return;
	c->st = ST_DEAD;
	if (c->job) {
		c->job->owner = NULL;
		c->job = NULL;
	}
	for (int i = 0; i < 16 && recv(c->cfd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
		;
	shutdown(c->cfd, SHUT_WR);
	close(c->cfd);
	if (c->ufd >= 0)
		close(c->ufd);
	dir_free(&c->up);
	dir_free(&c->down);
	if (c->prev)
		c->prev->next = c->next;
	else
		p->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = NULL;
	c->next = p->dead;
	p->dead = c;
	p->st.active--;
}

static void reap(sbx_proxy *p)
{
	while (p->dead) {
		struct conn *c = p->dead;
		p->dead = c->next;
		free(c);
	}
}

/* ---- relay ---- */

/* Move what can be moved from src to dst.  Returns -1 on a socket error. */
static int pump(struct conn *c, struct dir *d, int src, int dst, uint64_t *counter)
{
	bool moved = false;

	for (;;) {
		ssize_t n;
		bool progress = false;

		if (d->pre_off < d->pre_len) {
			n = send(dst, d->pre + d->pre_off, d->pre_len - d->pre_off, MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return -1;
			if (n > 0) {
				d->pre_off += (size_t)n;
				progress = true;
			}
			if (d->pre_off < d->pre_len)
				break;
		}
		if (d->inpipe > 0) {
			if (d->use_buf)
				n = send(dst, d->buf + d->boff, d->inpipe, MSG_NOSIGNAL);
			else
				n = splice(d->pipe[0], NULL, dst, NULL, d->inpipe,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return -1;
			if (n > 0) {
				d->inpipe -= (size_t)n;
				d->boff = d->inpipe ? d->boff + (size_t)n : 0;
				d->full = false;
				*counter += (uint64_t)n;
				progress = true;
			}
			if (d->inpipe > 0 && n <= 0)
				break; /* dst is full: wait for EPOLLOUT */
		}
		if (dir_wants_read(d) && d->limit > 0) {
			size_t room = (d->use_buf ? BUF_SIZE : PIPE_SIZE) - d->inpipe;
			if (room > d->limit)
				room = (size_t)d->limit;
			if (!d->use_buf && d->pipe[0] < 0) {
				if (pipe2(d->pipe, O_NONBLOCK | O_CLOEXEC) < 0) {
					d->pipe[0] = d->pipe[1] = -1;
					d->use_buf = true;
				} else {
					(void)fcntl(d->pipe[1], F_SETPIPE_SZ, PIPE_SIZE);
				}
			}
			if (d->use_buf && !d->buf && !(d->buf = malloc(BUF_SIZE)))
				return -1;
			if (d->use_buf) {
				if (room > BUF_SIZE - d->boff - d->inpipe)
					room = BUF_SIZE - d->boff - d->inpipe;
				n = room ? recv(src, d->buf + d->boff + d->inpipe, room, 0) : -1;
				if (!room)
					errno = EAGAIN;
			} else {
				n = splice(src, NULL, d->pipe[1], NULL, room,
					   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
				if (n < 0 && errno == EINVAL && d->inpipe == 0) {
					/* splice refused for these fds: buffer instead */
					d->use_buf = true;
					continue;
				}
			}
			if (n == 0) {
				d->eof = true;
			} else if (n > 0) {
				d->inpipe += (size_t)n;
				d->limit -= (uint64_t)n;
				if (d->limit == 0)
					d->eof = d->by_limit = true;
				progress = true;
			} else if (errno != EAGAIN && errno != EINTR) {
				return -1;
			} else if (errno == EAGAIN && d->inpipe > 0 && !d->use_buf) {
				/* Ambiguous: no data, or the pipe is full.  Either
				 * way dst is blocked (we drain before reading), so
				 * its EPOLLOUT brings us back; reading src waits. */
				d->full = true;
			}
		} else if (d->limit == 0 && !d->eof) {
			d->eof = d->by_limit = true;
		}
		if (progress)
			moved = true;
		else
			break;
	}
	if (d->eof && !dir_pending(d) && !d->done) {
		d->done = true;
		if (!d->by_limit)
			shutdown(dst, SHUT_WR);
	}
	if (moved)
		c->last_act = now_ms();
	return 0;
}

static void relay(struct conn *c)
{
	sbx_proxy *p = c->p;

	if (pump(c, &c->up, c->cfd, c->ufd, &p->st.bytes_up) < 0 ||
	    pump(c, &c->down, c->ufd, c->cfd, &p->st.bytes_down) < 0) {
		conn_close(c);
		return;
	}
	if (c->down.done && (c->up.done || c->mode == M_FORWARD)) {
		conn_close(c);
		return;
	}
	conn_update(c);
}

/* A relaying socket is ready (events e): move bytes, then close when the
 * socket failed, or hung up while direction d has not finished (a hang-up
 * after d is done is the half-close relay() is already carrying out). */
static void relay_event(struct conn *c, uint32_t e, const struct dir *d)
{
	relay(c);
	if (c->st == ST_RELAY && (e & (EPOLLHUP | EPOLLERR)) && (!d->done || e & EPOLLERR))
		conn_close(c);
}

/* ---- dialing ---- */

static void dir_init(struct dir *d)
{
	memset(d, 0, sizeof(*d));
	d->pipe[0] = d->pipe[1] = -1;
	d->limit = UINT64_MAX;
}

static int set_pre(struct dir *d, const void *a, size_t alen, const void *b, size_t blen)
{
	if (alen + blen == 0)
		return 0;
	if (!(d->pre = malloc(alen + blen)))
		return -1;
	memcpy(d->pre, a, alen);
	if (blen)
		memcpy(d->pre + alen, b, blen);
	d->pre_len = alen + blen;
	return 0;
}

static void on_connected(struct conn *c)
{
	static const char ok200[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	static const uint8_t ok5[10] = {5, 0, 0, 1};
	int one = 1;
	size_t rest_off = c->req.head_len;

	setsockopt(c->ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	dir_init(&c->up);
	dir_init(&c->down);
	c->st = ST_RELAY;
	c->deadline = 0;
	c->last_act = now_ms();
	if (c->mode == M_FORWARD) {
		char *out = malloc(2 * SBX_PROXY_HEAD_MAX);
		long n;
		size_t body = c->hlen - rest_off;
		if (!out) {
			conn_close(c);
			return;
		}
		n = sbx_proxy_http_rewrite(c->head, &c->req, out, 2 * SBX_PROXY_HEAD_MAX);
		if (body > (uint64_t)c->req.content_length)
			body = (size_t)c->req
				       .content_length; /* the rest is a next request: dropped */
		c->up.limit = (uint64_t)c->req.content_length - body;
		if (n < 0 || set_pre(&c->up, out, (size_t)n, c->head + rest_off, body) < 0) {
			free(out);
			conn_fail(c, 400, 1, "request head too large to forward");
			return;
		}
		free(out);
		if (c->up.limit == 0)
			c->up.eof = c->up.by_limit = true;
	} else {
		if (c->mode == M_CONNECT) {
			if (set_pre(&c->down, ok200, sizeof(ok200) - 1, NULL, 0) < 0)
				goto oom;
		} else if (set_pre(&c->down, ok5, sizeof(ok5), NULL, 0) < 0) {
			goto oom;
		}
		if (set_pre(&c->up, c->head + rest_off, c->hlen - rest_off, NULL, 0) < 0)
			goto oom;
	}
	relay(c);
	return;
oom:
	conn_close(c);
}

static void conn_unreachable(struct conn *c)
{
	char why[300];
	int e = c->last_errno ? c->last_errno : ECONNREFUSED;

	snprintf(why, sizeof(why), "cannot connect: %s", strerror(e));
	conn_fail(c, 502, e == ECONNREFUSED ? 0x05 : 0x04, why);
}

/* Dial c->addrs[next_addr...] until one connects or is in progress. */
static void dial_next(struct conn *c)
{
	sbx_proxy *p = c->p;

	if (c->ufd >= 0) {
		close(c->ufd);
		c->ufd = -1;
		c->umask = UINT32_MAX;
	}
	while (c->next_addr < c->n_addrs) {
		struct sockaddr_storage *ss = &c->addrs[c->next_addr++];
		socklen_t sl = ss->ss_family == AF_INET ? sizeof(struct sockaddr_in)
							: sizeof(struct sockaddr_in6);
		int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			c->last_errno = errno;
			continue;
		}
		if (ss->ss_family == AF_INET)
			((struct sockaddr_in *)ss)->sin_port = htons(c->port);
		else
			((struct sockaddr_in6 *)ss)->sin6_port = htons(c->port);
		if (connect(fd, (struct sockaddr *)ss, sl) == 0 || errno == EINPROGRESS) {
			c->ufd = fd;
			c->st = ST_CONNECTING;
			c->deadline = now_ms() + p->cfg.connect_timeout_ms;
			conn_update(c);
			return;
		}
		c->last_errno = errno;
		close(fd);
	}
	conn_unreachable(c);
}

static void on_upstream_writable(struct conn *c)
{
	int e = 0;
	socklen_t el = sizeof(e);

	if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
		e = errno;
	if (e) {
		c->last_errno = e;
		dial_next(c);
		return;
	}
	on_connected(c);
}

/* ---- decisions ---- */

static void verdict_terminate(sbx_proxy_verdict *v)
{
	v->reason[sizeof(v->reason) - 1] = '\0';
	v->literal[sizeof(v->literal) - 1] = '\0';
	v->resolve[sizeof(v->resolve) - 1] = '\0';
}

static void refuse(struct conn *c, const sbx_proxy_verdict *v)
{
	conn_fail(c, 403, 0x02, v->reason[0] ? v->reason : "not allowed");
}

enum { ASK_REFUSED, ASK_ALLOWED, ASK_PENDING };

/* Ask the decider about q: refused (the client is told), allowed, or
 * pending (the verdict comes through sbx_proxy_decided; c waits). */
static int ask(struct conn *c, const sbx_proxy_query *q, sbx_proxy_verdict *v)
{
	sbx_proxy_query qq = *q;

	qq.ticket = c->ticket = ++c->p->next_ticket;
	memset(v, 0, sizeof(*v));
	c->p->cfg.decide(c->p->cfg.ud, &qq, v);
	verdict_terminate(v);
	if (v->pending && !v->allow) {
		c->st = ST_DECIDING;
		c->pending_phase = q->phase;
		c->deadline = now_ms() + c->p->cfg.header_timeout_ms;
		conn_update(c);
		return ASK_PENDING;
	}
	if (!v->allow)
		refuse(c, v);
	return v->allow ? ASK_ALLOWED : ASK_REFUSED;
}

/* decide(ADDRS) allowed: dial. */
static void addrs_allowed(struct conn *c)
{
	c->p->st.allowed++;
	c->next_addr = 0;
	dial_next(c);
}

/* decide(ADDRS) over c->addrs, then dial. */
static void check_addrs(struct conn *c)
{
	sbx_proxy *p = c->p;
	char text[SBX_PROXY_MAX_ADDRS][INET6_ADDRSTRLEN];
	const char *ptrs[SBX_PROXY_MAX_ADDRS];
	sbx_proxy_query q = {.phase = SBX_PROXY_ADDRS,
			     .kind = c->kind,
			     .host = c->host,
			     .port = c->port,
			     .addrs = ptrs,
			     .n_addrs = c->n_addrs,
			     .tag = c->tag};
	sbx_proxy_verdict v;

	for (size_t i = 0; i < c->n_addrs; i++) {
		const struct sockaddr_storage *ss = &c->addrs[i];
		const void *a =
			ss->ss_family == AF_INET
				? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
				: (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
		if (!inet_ntop(ss->ss_family, a, text[i], sizeof(text[i])))
			snprintf(text[i], sizeof(text[i]), "?");
		ptrs[i] = text[i];
	}
	(void)p;
	if (ask(c, &q, &v) == ASK_ALLOWED)
		addrs_allowed(c);
}

/* decide(NAME) allowed: dial the literal, or resolve the name. */
static void name_allowed(struct conn *c, const sbx_proxy_verdict *vp)
{
	sbx_proxy *p = c->p;
	sbx_proxy_verdict v = *vp;

	if (v.literal[0] && v.resolve[0]) {
		conn_fail(c, 403, 0x02, "decider gave both a literal and a name to resolve");
		return;
	}
	if (v.literal[0]) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&c->addrs[0];
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&c->addrs[0];
		memset(&c->addrs[0], 0, sizeof(c->addrs[0]));
		if (inet_pton(AF_INET, v.literal, &s4->sin_addr) == 1) {
			s4->sin_family = AF_INET;
		} else if (inet_pton(AF_INET6, v.literal, &s6->sin6_addr) == 1) {
			s6->sin6_family = AF_INET6;
		} else {
			conn_fail(c, 403, 0x02, "decider gave a literal that is not an IP address");
			return;
		}
		c->n_addrs = 1;
		check_addrs(c);
		return;
	}
	if (!v.resolve[0]) {
		conn_fail(c, 403, 0x02, "decider gave nothing to dial");
		return;
	}
	sbx_resolve_job *j = calloc(1, sizeof(*j));
	if (!j) {
		conn_fail(c, 502, 0x01, "out of memory");
		return;
	}
	snprintf(j->name, sizeof(j->name), "%s", v.resolve);
	j->owner = c;
	c->job = j;
	c->st = ST_RESOLVING;
	p->lookups++;
	sbx_resolver_submit(p->res, j);
	conn_update(c);
}

/* The target is known (c->host, c->port, c->kind): decide(NAME). */
static void on_target(struct conn *c)
{
	sbx_proxy_query q = {.phase = SBX_PROXY_NAME,
			     .kind = c->kind,
			     .host = c->host,
			     .port = c->port,
			     .tag = c->tag};
	sbx_proxy_verdict v;

	c->deadline = 0;
	if (ask(c, &q, &v) == ASK_ALLOWED)
		name_allowed(c, &v);
}

static void on_resolved(sbx_proxy *p)
{
	sbx_resolve_job *j = sbx_resolver_collect(p->res), *n;

	for (; j; j = n) {
		struct conn *c = j->owner;
		n = j->next;
		if (c && c->st == ST_RESOLVING) {
			c->job = NULL;
			if (j->gai_err) {
				char why[400];
				snprintf(why, sizeof(why), "cannot resolve %s: %s", j->name,
					 gai_strerror(j->gai_err));
				conn_fail(c, 502, 0x04, why);
			} else {
				memcpy(c->addrs, j->addrs, sizeof(c->addrs));
				c->n_addrs = j->n_addrs;
				check_addrs(c);
			}
		}
		free(j);
	}
}

/* ---- reading the request ---- */

static void on_head(struct conn *c)
{
	if (c->mode == M_UNKNOWN) {
		c->mode = (uint8_t)c->head[0] == 5 ? M_SOCKS : M_CONNECT;
		c->kind = c->mode == M_SOCKS ? "socks5" : "connect";
	}
	if (c->mode == M_SOCKS) {
		if (c->st == ST_HEAD) {
			size_t used;
			bool noauth;
			int rc = sbx_proxy_socks_greeting((uint8_t *)c->head, c->hlen, &used,
							  &noauth);
			if (rc == SBX_PP_INCOMPLETE)
				return;
			if (rc == SBX_PP_ERROR || !noauth) {
				uint8_t no[2] = {5, 0xff};
				if (send(c->cfd, no, 2, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
					/* gone */
				}
				c->p->st.failed++;
				logf_(c->p, "failed - (socks5): client offers no usable method "
					    "(only no-authentication is supported)");
				conn_close(c);
				return;
			}
			uint8_t yes[2] = {5, 0};
			if (send(c->cfd, yes, 2, MSG_NOSIGNAL | MSG_DONTWAIT) != 2) {
				conn_close(c);
				return;
			}
			memmove(c->head, c->head + used, c->hlen - used);
			c->hlen -= used;
			c->st = ST_SOCKS_REQ;
		}
		sbx_proxy_socks_req r;
		int rc = sbx_proxy_socks_request((uint8_t *)c->head, c->hlen, &r);
		if (rc == SBX_PP_INCOMPLETE)
			return;
		if (rc == SBX_PP_ERROR) {
			conn_fail(c, 400, r.reply, "malformed or unsupported SOCKS5 request");
			return;
		}
		snprintf(c->host, sizeof(c->host), "%s", r.host);
		c->port = r.port;
		c->req.head_len = r.used;
		on_target(c);
		return;
	}
	int rc = sbx_proxy_http_parse(c->head, c->hlen, &c->req);
	if (rc == SBX_PP_INCOMPLETE)
		return;
	if (rc == SBX_PP_OK) {
		snprintf(c->host, sizeof(c->host), "%s", c->req.host);
		c->port = c->req.port;
	}
	if (rc == SBX_PP_OK && !c->req.connect) {
		c->mode = M_FORWARD;
		c->kind = "http";
		if (c->req.content_length < 0)
			c->req.content_length = 0;
	}
	if (rc == SBX_PP_ERROR) {
		c->kind = c->req.connect ? "connect" : "http";
		conn_fail(c, c->req.status, 1, c->req.reason);
		return;
	}
	on_target(c);
}

static void on_client_readable(struct conn *c)
{
	ssize_t n;

	if (c->hlen == sizeof(c->head)) {
		conn_fail(c, 431, 1, "request head larger than 16 KiB");
		return;
	}
	n = recv(c->cfd, c->head + c->hlen, sizeof(c->head) - c->hlen, 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c); /* the client went away before asking anything */
		return;
	}
	c->hlen += (size_t)n;
	on_head(c);
	if (c->st == ST_HEAD || c->st == ST_SOCKS_REQ)
		conn_update(c);
}

/* ---- accepting ---- */

static void on_accept(sbx_proxy *p, struct listener *l)
{
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
		struct conn *c;

		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* The pending connection stays queued and the listener
				 * readable: pause it for a while instead of spinning. */
				struct epoll_event ev = {.events = 0, .data.ptr = &l->ev};
				if (!l->paused_until)
					logf_(p, "failed - (accept): %s; accepting again in 100 ms",
					      strerror(errno));
				epoll_ctl(p->epfd, EPOLL_CTL_MOD, l->fd, &ev);
				l->paused_until = now_ms() + 100;
			}
			return;
		}
		p->st.accepted++;
		if (p->st.active >= p->cfg.max_conns || !(c = calloc(1, sizeof(*c)))) {
			p->st.failed++;
			logf_(p, "failed - (accept): too many connections (max_conns %u)",
			      p->cfg.max_conns);
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->p = p;
		c->cfd = fd;
		c->ufd = -1;
		c->cmask = c->umask = UINT32_MAX;
		c->cev = (struct evh){EV_CLIENT, c};
		c->uev = (struct evh){EV_UPSTREAM, c};
		c->tag = l->tag;
		c->kind = "connect";
		c->st = ST_HEAD;
		dir_init(&c->up);
		dir_init(&c->down);
		c->deadline = now_ms() + p->cfg.header_timeout_ms;
		c->next = p->conns;
		if (p->conns)
			p->conns->prev = c;
		p->conns = c;
		p->st.active++;
		conn_update(c);
	}
}

/* ---- timers ---- */

static uint64_t conn_expiry(const struct conn *c, const sbx_proxy *p)
{
	if (c->st == ST_RELAY)
		return c->last_act + p->cfg.idle_timeout_ms;
	return c->deadline;
}

static void on_expired(struct conn *c)
{
	switch (c->st) {
	case ST_HEAD:
	case ST_SOCKS_REQ:
		if (c->mode == M_SOCKS)
			conn_fail(c, 408, 0x01, "request not complete in time");
		else
			conn_fail(c, 408, 1, "request head not complete in time");
		break;
	case ST_CONNECTING:
		c->last_errno = ETIMEDOUT;
		dial_next(c);
		break;
	case ST_DECIDING:
		conn_fail(c, 403, 0x02, "the policy did not decide in time");
		break;
	case ST_RELAY:
		conn_close(c);
		break;
	default:
		break;
	}
}

/* Expire what is due and arm the timerfd for the next deadline. */
static void run_timers(sbx_proxy *p)
{
	uint64_t now = now_ms(), next = 0;
	struct conn *c, *n;

	for (struct listener *l = p->listeners; l; l = l->next) {
		if (!l->paused_until)
			continue;
		if (l->paused_until <= now) {
			struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &l->ev};
			epoll_ctl(p->epfd, EPOLL_CTL_MOD, l->fd, &ev);
			l->paused_until = 0;
		} else if (!next || l->paused_until < next) {
			next = l->paused_until;
		}
	}

	for (c = p->conns; c; c = n) {
		uint64_t e = conn_expiry(c, p);
		n = c->next;
		if (e && e <= now) {
			on_expired(c);
			if (c->st != ST_DEAD)
				e = conn_expiry(c, p);
			else
				continue;
			/* a retry's connect may have rearmed c: keep it */
			if (e && e <= now)
				continue;
		}
		if (e && (!next || e < next))
			next = e;
	}
	if (next != p->timer_at) {
		struct itimerspec its = {0};
		its.it_value.tv_sec = (time_t)(next / 1000);
		its.it_value.tv_nsec = (long)(next % 1000) * 1000000;
		timerfd_settime(p->tfd, TFD_TIMER_ABSTIME, &its, NULL);
		p->timer_at = next;
	}
}

/* ---- the public API ---- */

sbx_proxy *sbx_proxy_new(const sbx_proxy_cfg *cfg, sbx_err *err)
{
	sbx_proxy *p;
	struct epoll_event ev = {.events = EPOLLIN};

	if (!cfg || !cfg->decide) {
		sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
			    "sbx_proxy_new: a decide function is required");
		return NULL;
	}
	if (!(p = calloc(1, sizeof(*p)))) {
		sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "sbx_proxy_new: out of memory");
		return NULL;
	}
	p->cfg = *cfg;
	if (!p->cfg.max_conns)
		p->cfg.max_conns = 1024;
	if (!p->cfg.connect_timeout_ms)
		p->cfg.connect_timeout_ms = 10000;
	if (!p->cfg.header_timeout_ms)
		p->cfg.header_timeout_ms = 30000;
	if (!p->cfg.idle_timeout_ms)
		p->cfg.idle_timeout_ms = 600000;
	if (!p->cfg.resolver_threads)
		p->cfg.resolver_threads = 4;
	p->epfd = p->tfd = p->rfd = -1;
	p->tev = (struct evh){EV_TIMER, NULL};
	p->rev = (struct evh){EV_RESOLVER, NULL};
	if ((p->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (p->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "sbx_proxy_new: epoll/timerfd: %s",
			    strerror(errno));
		goto fail;
	}
	if (!(p->res = sbx_resolver_new(p->cfg.resolver_threads, &p->rfd))) {
		sbx_err_set(err, SBX_E_EXECUTION, errno,
			    "sbx_proxy_new: cannot start the resolver threads: %s",
			    strerror(errno));
		goto fail;
	}
	ev.data.ptr = &p->tev;
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->tfd, &ev) < 0)
		goto fail_ctl;
	ev.data.ptr = &p->rev;
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->rfd, &ev) < 0)
		goto fail_ctl;
	return p;
fail_ctl:
	sbx_err_set(err, SBX_E_EXECUTION, errno, "sbx_proxy_new: epoll_ctl: %s", strerror(errno));
fail:
	sbx_proxy_free(p);
	return NULL;
}

int sbx_proxy_add_listener(sbx_proxy *p, int listen_fd, void *tag, sbx_err *err)
{
	struct listener *l;
	struct epoll_event ev = {.events = EPOLLIN};
	int fl;

	if (!p || listen_fd < 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "sbx_proxy_add_listener: needs a proxy and a listening fd");
	if ((fl = fcntl(listen_fd, F_GETFL)) < 0 ||
	    fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(listen_fd, F_SETFD, FD_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, errno,
				   "sbx_proxy_add_listener: fd %d: %s", listen_fd, strerror(errno));
	if (!(l = calloc(1, sizeof(*l))))
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM,
				   "sbx_proxy_add_listener: out of memory");
	l->ev = (struct evh){EV_LISTENER, l};
	l->fd = listen_fd;
	l->tag = tag;
	ev.data.ptr = &l->ev;
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, listen_fd, &ev) < 0) {
		int e = errno;
		free(l);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "sbx_proxy_add_listener: epoll_ctl: %s",
				   strerror(e));
	}
	l->next = p->listeners;
	p->listeners = l;
	return 0;
}

void sbx_proxy_remove(sbx_proxy *p, void *tag)
{
	struct listener **lp;
	struct conn *c, *n;

	if (!p)
		return;
	for (lp = &p->listeners; *lp;) {
		struct listener *l = *lp;
		if (l->tag == tag) {
			*lp = l->next;
			close(l->fd);
			free(l);
		} else {
			lp = &l->next;
		}
	}
	for (c = p->conns; c; c = n) {
		n = c->next;
		if (c->tag == tag)
			conn_close(c);
	}
	reap(p);
}

int sbx_proxy_fd(const sbx_proxy *p)
{
	return p ? p->epfd : -1;
}

int sbx_proxy_step(sbx_proxy *p, int timeout_ms, sbx_err *err)
{
	struct epoll_event evs[64];
	int n = epoll_wait(p->epfd, evs, 64, timeout_ms);

	if (n < 0) {
		if (errno == EINTR)
			return 0;
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "sbx_proxy_step: epoll_wait: %s",
				   strerror(errno));
	}
	for (int i = 0; i < n; i++) {
		struct evh *h = evs[i].data.ptr;
		uint32_t e = evs[i].events;
		struct conn *c = h->obj;

		switch (h->type) {
		case EV_LISTENER:
			on_accept(p, h->obj);
			break;
		case EV_RESOLVER:
			on_resolved(p);
			break;
		case EV_TIMER: {
			uint64_t v;
			if (read(p->tfd, &v, sizeof(v)) < 0) {
				/* spurious */
			}
			p->timer_at = 0;
			break;
		}
		case EV_CLIENT:
			if (c->st == ST_DEAD)
				break;
			if (c->st == ST_HEAD || c->st == ST_SOCKS_REQ) {
				on_client_readable(c);
			} else if (c->st == ST_RELAY) {
				relay_event(c, e, &c->down);
			} else if (e & (EPOLLHUP | EPOLLERR)) {
				conn_close(c); /* gone while we decide or dial */
			}
			break;
		case EV_UPSTREAM:
			if (c->st == ST_DEAD)
				break;
			if (c->st == ST_CONNECTING) {
				on_upstream_writable(c);
			} else if (c->st == ST_RELAY) {
				relay_event(c, e, &c->up);
			}
			break;
		}
	}
	run_timers(p);
	reap(p);
	return 0;
}

int sbx_proxy_decided(sbx_proxy *p, uint64_t ticket, const sbx_proxy_verdict *vp)
{
	struct conn *c = p->conns;
	sbx_proxy_verdict v = *vp;

	while (c && !(c->st == ST_DECIDING && c->ticket == ticket))
		c = c->next;
	if (!c)
		return -1;
	verdict_terminate(&v);
	c->deadline = 0;
	if (!v.allow || v.pending)
		refuse(c, &v);
	else if (c->pending_phase == SBX_PROXY_NAME)
		name_allowed(c, &v);
	else
		addrs_allowed(c);
	run_timers(p);
	reap(p);
	return 0;
}

void sbx_proxy_get_stats(const sbx_proxy *p, sbx_proxy_stats *st)
{
	if (p && st)
		*st = p->st;
}

uint64_t sbx_proxy_lookups(const sbx_proxy *p)
{
	return p ? p->lookups : 0;
}

void sbx_proxy_free(sbx_proxy *p)
{
	struct listener *l, *ln;

	if (!p)
		return;
	while (p->conns)
		conn_close(p->conns);
	reap(p);
	for (l = p->listeners; l; l = ln) {
		ln = l->next;
		close(l->fd);
		free(l);
	}
	sbx_resolver_free(p->res); /* also frees abandoned jobs */
	if (p->tfd >= 0)
		close(p->tfd);
	if (p->epfd >= 0)
		close(p->epfd);
	free(p);
}

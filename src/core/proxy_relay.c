/*
 * proxy_relay.c: dialing the addresses a verdict allowed (each in turn,
 * non-blocking), then moving bytes both ways: splice(2) through a pipe per
 * direction (a buffer when splice is refused), with backpressure and
 * half-close.
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

#include "proxy_internal.h"
#include "proxy_mitm.h"

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
		c->last_act = sbx_proxy_now_ms();
	return 0;
}

static void relay(struct conn *c)
{
	sbx_proxy *p = c->p;

	if (pump(c, &c->up, c->cfd, c->ufd, &p->st.bytes_up) < 0 ||
	    pump(c, &c->down, c->ufd, c->cfd, &p->st.bytes_down) < 0) {
		sbx_proxy_conn_close(c);
		return;
	}
	if (c->down.done && (c->up.done || c->mode == M_FORWARD)) {
		sbx_proxy_conn_close(c);
		return;
	}
	sbx_proxy_conn_update(c);
}

/* A relaying socket is ready (events e): move bytes, then close when the
 * socket failed, or hung up while direction d has not finished (a hang-up
 * after d is done is the half-close relay() is already carrying out). */
void sbx_proxy_relay_event(struct conn *c, uint32_t e, const struct dir *d)
{
	relay(c);
	if (c->st == ST_RELAY && (e & (EPOLLHUP | EPOLLERR)) && (!d->done || e & EPOLLERR))
		sbx_proxy_conn_close(c);
}

/* ---- dialing ---- */

void sbx_proxy_dir_init(struct dir *d)
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
	if (sbx_proxy_mitm_take(c))
		return; /* a secret's host: proxy_mitm.c serves it */
	sbx_proxy_dir_init(&c->up);
	sbx_proxy_dir_init(&c->down);
	c->st = ST_RELAY;
	c->deadline = 0;
	c->last_act = sbx_proxy_now_ms();
	if (c->mode == M_FORWARD) {
		char *out = malloc(2 * SBX_PROXY_HEAD_MAX);
		long n;
		size_t body = c->hlen - rest_off;
		if (!out) {
			sbx_proxy_conn_close(c);
			return;
		}
		n = sbx_proxy_http_rewrite(c->head, &c->req, out, 2 * SBX_PROXY_HEAD_MAX);
		if (body > (uint64_t)c->req.content_length)
			body = (size_t)c->req
				       .content_length; /* the rest is a next request: dropped */
		c->up.limit = (uint64_t)c->req.content_length - body;
		if (n < 0 || set_pre(&c->up, out, (size_t)n, c->head + rest_off, body) < 0) {
			free(out);
			sbx_proxy_conn_fail(c, 400, 1, "request head too large to forward");
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
	sbx_proxy_conn_close(c);
}

static void conn_unreachable(struct conn *c)
{
	char why[300];
	int e = c->last_errno ? c->last_errno : ECONNREFUSED;

	snprintf(why, sizeof(why), "cannot connect: %s", strerror(e));
	sbx_proxy_conn_fail(c, 502, e == ECONNREFUSED ? 0x05 : 0x04, why);
}

/* Dial c->addrs[next_addr...] until one connects or is in progress. */
void sbx_proxy_dial_next(struct conn *c)
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
			c->deadline = sbx_proxy_now_ms() + p->cfg.connect_timeout_ms;
			sbx_proxy_conn_update(c);
			return;
		}
		c->last_errno = errno;
		close(fd);
	}
	conn_unreachable(c);
}

void sbx_proxy_on_upstream_writable(struct conn *c)
{
	int e = 0;
	socklen_t el = sizeof(e);

	if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
		e = errno;
	if (e) {
		c->last_errno = e;
		sbx_proxy_dial_next(c);
		return;
	}
	on_connected(c);
}

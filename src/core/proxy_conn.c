/*
 * proxy_conn.c: one proxy connection's lifetime: its epoll interest, the
 * answers and log lines of a failure, closing and freeing, and reading the
 * request head (HTTP or SOCKS5) up to the target it names.
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

/* ---- logging and answers ---- */

void sbx_proxy_logf(sbx_proxy *p, const char *fmt, ...)
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

/* Answer the client (HTTP status or SOCKS5 reply) and close. */
void sbx_proxy_conn_fail(struct conn *c, int status, uint8_t socks_reply, const char *reason)
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
		sbx_proxy_logf(c->p, "refused %s (%s): %s", target(c, t, sizeof(t)), c->kind,
			       reason);
	} else {
		c->p->st.failed++;
		sbx_proxy_logf(c->p, "failed %s (%s): %d %s", target(c, t, sizeof(t)), c->kind,
			       status, reason);
	}
	sbx_proxy_conn_close(c);
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

/* Recompute which events each socket of c waits for. */
void sbx_proxy_conn_update(struct conn *c)
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
		sbx_proxy_conn_close(c);
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
void sbx_proxy_conn_close(struct conn *c)
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
	if (c->cfd >= 0) { /* -1: handed to a secrets worker */
		for (int i = 0; i < 16 && recv(c->cfd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
			;
		shutdown(c->cfd, SHUT_WR);
		close(c->cfd);
	}
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

void sbx_proxy_reap(sbx_proxy *p)
{
	while (p->dead) {
		struct conn *c = p->dead;
		p->dead = c->next;
		free(c);
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
				sbx_proxy_logf(c->p,
					       "failed - (socks5): client offers no usable method "
					       "(only no-authentication is supported)");
				sbx_proxy_conn_close(c);
				return;
			}
			uint8_t yes[2] = {5, 0};
			if (send(c->cfd, yes, 2, MSG_NOSIGNAL | MSG_DONTWAIT) != 2) {
				sbx_proxy_conn_close(c);
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
			sbx_proxy_conn_fail(c, 400, r.reply,
					    "malformed or unsupported SOCKS5 request");
			return;
		}
		snprintf(c->host, sizeof(c->host), "%s", r.host);
		c->port = r.port;
		c->req.head_len = r.used;
		sbx_proxy_on_target(c);
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
		sbx_proxy_conn_fail(c, c->req.status, 1, c->req.reason);
		return;
	}
	sbx_proxy_on_target(c);
}

void sbx_proxy_on_client_readable(struct conn *c)
{
	ssize_t n;

	if (c->hlen == sizeof(c->head)) {
		sbx_proxy_conn_fail(c, 431, 1, "request head larger than 16 KiB");
		return;
	}
	n = recv(c->cfd, c->head + c->hlen, sizeof(c->head) - c->hlen, 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		sbx_proxy_conn_close(c); /* the client went away before asking anything */
		return;
	}
	c->hlen += (size_t)n;
	on_head(c);
	if (c->st == ST_HEAD || c->st == ST_SOCKS_REQ)
		sbx_proxy_conn_update(c);
}

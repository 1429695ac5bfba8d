/*
 * proxy.c: the allow-list proxy engine (the contract is sbx_proxy.h): its
 * public API, the step that dispatches what epoll reports, accepting and
 * timers.  The other jobs are in proxy_conn.c, proxy_verdict.c and
 * proxy_relay.c (map in proxy_internal.h).
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

#include "proxy_internal.h"
#include "proxy_mitm.h"

uint64_t sbx_proxy_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
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
					sbx_proxy_logf(
						p,
						"failed - (accept): %s; accepting again in 100 ms",
						strerror(errno));
				epoll_ctl(p->epfd, EPOLL_CTL_MOD, l->fd, &ev);
				l->paused_until = sbx_proxy_now_ms() + 100;
			}
			return;
		}
		p->st.accepted++;
		if (p->st.active >= p->cfg.max_conns || !(c = calloc(1, sizeof(*c)))) {
			p->st.failed++;
			sbx_proxy_logf(p, "failed - (accept): too many connections (max_conns %u)",
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
		sbx_proxy_dir_init(&c->up);
		sbx_proxy_dir_init(&c->down);
		c->deadline = sbx_proxy_now_ms() + p->cfg.header_timeout_ms;
		c->next = p->conns;
		if (p->conns)
			p->conns->prev = c;
		p->conns = c;
		p->st.active++;
		sbx_proxy_conn_update(c);
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
			sbx_proxy_conn_fail(c, 408, 0x01, "request not complete in time");
		else
			sbx_proxy_conn_fail(c, 408, 1, "request head not complete in time");
		break;
	case ST_CONNECTING:
		c->last_errno = ETIMEDOUT;
		sbx_proxy_dial_next(c);
		break;
	case ST_DECIDING:
		sbx_proxy_conn_fail(c, 403, 0x02, "the policy did not decide in time");
		break;
	case ST_RELAY:
		sbx_proxy_conn_close(c);
		break;
	default:
		break;
	}
}

/* Expire what is due and arm the timerfd for the next deadline. */
void sbx_proxy_run_timers(sbx_proxy *p)
{
	uint64_t now = sbx_proxy_now_ms(), next = 0;
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
			sbx_proxy_conn_close(c);
	}
	sbx_proxy_reap(p);
	sbx_proxy_mitm_remove(p, tag);
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
			sbx_proxy_on_resolved(p);
			break;
		case EV_MITM:
			sbx_proxy_mitm_reap(p);
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
				sbx_proxy_on_client_readable(c);
			} else if (c->st == ST_RELAY) {
				sbx_proxy_relay_event(c, e, &c->down);
			} else if (e & (EPOLLHUP | EPOLLERR)) {
				sbx_proxy_conn_close(c); /* gone while we decide or dial */
			}
			break;
		case EV_UPSTREAM:
			if (c->st == ST_DEAD)
				break;
			if (c->st == ST_CONNECTING) {
				sbx_proxy_on_upstream_writable(c);
			} else if (c->st == ST_RELAY) {
				sbx_proxy_relay_event(c, e, &c->up);
			}
			break;
		}
	}
	sbx_proxy_run_timers(p);
	sbx_proxy_reap(p);
	return 0;
}

void sbx_proxy_get_stats(const sbx_proxy *p, sbx_proxy_stats *st)
{
	if (p && st) {
		*st = p->st;
		sbx_proxy_mitm_stats(p, st);
	}
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
		sbx_proxy_conn_close(p->conns);
	sbx_proxy_reap(p);
	sbx_proxy_mitm_free(p);
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

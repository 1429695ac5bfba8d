/*
 * front_accept.c: accepting client connections: budgets in total and per
 * source address (shedding the quietest idle connection first), no busy
 * loop when descriptors run out (a spare one sheds a connection, then a
 * pause), and each connection's socketpair to h2o.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "front_int.h"

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
		front_link *l = front_enter(c); /* h2o's output closes streams */
		bool busy = c->mode == M_H2 && sbx_h2g_open_streams(c->g) > 0;
		front_leave(l);
		if (busy || (c->mode == M_H1 && c->h1_head_done))
			continue;
		if (!victim || c->last_ms < victim->last_ms)
			victim = c;
	}
	if (!victim)
		return false;
	front_link *l = front_enter(victim);
	front_timed_out(victim, 0, SBX_H2G_R_EVICTED);
	front_leave(l);
	return true;
}

void front_on_pause_over(h2o_timeout_entry_t *e)
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
		front_link *l = front_enter(c);
		front_close_all(c);
		front_leave(l);
		return;
	}
	h2o_socket_read_start(c->client, front_on_client_read);
	/* bytes that came with the handshake's last record */
	if (sock->input->size > 0)
		front_on_client_read(sock, NULL);
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
	c->hdr_entry.cb = front_on_hdr_timeout;
	c->idle_entry.cb = front_on_idle_timeout;
	c->close_entry.cb = front_on_close_timeout;
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
	/* plain text: h2o's writes may go to the client from the loop thread */
	if (!F.ssl_ctx)
		c->link = front_link_new(c);
	/* h2o's end, to the main loop: a plaintext connection it serves like
	 * any other (a write of a handoff, 16 bytes, to a pipe is atomic). */
	front_handoff h = {.fd = sp[1], .link = c->link};
	if (write(F.handoff[1], &h, sizeof(h)) != (ssize_t)sizeof(h)) {
		close(sp[1]);
		BUMP(F.refused_fd);
		front_link_release(c->link); /* the loop's, never sent */
		front_close_all(c);
		return;
	}
	front_link *l = front_enter(c);
	h2o_socket_read_start(c->inner, front_on_inner_read);
	h2o_timeout_link(F.loop, &F.hdr_timeout, &c->hdr_entry);
	if (F.ssl_ctx)
		h2o_socket_ssl_handshake(c->client, F.ssl_ctx, NULL, on_handshake);
	else
		h2o_socket_read_start(c->client, front_on_client_read);
	front_leave(l);
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

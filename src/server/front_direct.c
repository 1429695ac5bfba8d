/*
 * front_direct.c: on plain-text connections, h2o's writes go through the
 * guard to the client's socket at once, on sbxd's loop thread, instead of
 * into the socketpair for the front's thread to read, parse and send.
 * That saves a kernel copy each way and a wake-up of the front's thread
 * per h2o write (about 0.3 s of CPU per GiB streamed, see README).
 *
 * h2o 2.2 writes a socket with writev(2) and has no hook for it, so sbxd
 * defines writev: the dynamic linker binds libh2o's calls to the
 * executable's definition first.  On the loop thread, for h2o's end of a
 * front socketpair (registered at the handoff, unregistered by the h2o
 * socket's on_close), it takes the connection's lock if it is free and,
 * when nothing of h2o's is queued anywhere (the socketpair read to its
 * end, the client buffers empty), has the guard parse the bytes and sends
 * them; what the client's socket does not take waits in the client buffer
 * and the front's thread is kicked to finish it.  Otherwise the bytes
 * cross the socketpair as before: order holds, and a client that does not
 * read still pushes back on h2o (the front stops reading the socketpair
 * past CAP, and h2o's writev then waits).  The loop thread never waits
 * for the lock: a client whose flood the front is parsing must not stall
 * the loop that serves everyone.  Every other writev is the system call.  Were the binding lost, output would cross the socketpair:
 * slower, never unguarded; /metrics counts the bytes of each path.
 *
 * The client's bytes are untouched: they reach h2o only through the
 * front's thread and the guard.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "front_int.h"

struct front_link {
	pthread_mutex_t mu;
	conn *c;	       /* NULL once the front let go of it */
	uint32_t refs;	       /* atomic: the conn's, the loop's, each holder's */
	bool kicked;	       /* on F.kicked (under mu) */
	front_link *kick_next; /* under F.kick_mu */
	uint64_t inner_sent;   /* h2o's bytes into the socketpair (the loop's) */
};

front_link *front_link_new(conn *c)
{
	front_link *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	pthread_mutex_init(&l->mu, NULL);
	l->c = c;
	l->refs = 2;
	return l;
}

static void link_hold(front_link *l)
{
	__atomic_fetch_add(&l->refs, 1, __ATOMIC_RELAXED);
}

void front_link_release(front_link *l)
{
	if (l && __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		pthread_mutex_destroy(&l->mu);
		free(l);
	}
}

front_link *front_enter(conn *c)
{
	front_link *l = c->link;
	if (l) {
		link_hold(l);
		pthread_mutex_lock(&l->mu);
	}
	return l;
}

void front_leave(front_link *l)
{
	if (l) {
		pthread_mutex_unlock(&l->mu);
		front_link_release(l);
	}
}

void front_link_drop(conn *c)
{
	front_link *l = c->link;
	if (!l)
		return;
	l->c = NULL;
	c->link = NULL;
	front_link_release(l);
}

/* ---- the front's thread: what a direct write handed back ---- */

int front_direct_init(void)
{
	pthread_mutex_init(&F.kick_mu, NULL);
	F.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return F.kick_fd < 0 ? -1 : 0;
}

/* Under l->mu: have the front's thread look at l's connection. */
static void kick(front_link *l)
{
	if (l->kicked)
		return;
	l->kicked = true;
	link_hold(l);
	pthread_mutex_lock(&F.kick_mu);
	l->kick_next = F.kicked;
	F.kicked = l;
	pthread_mutex_unlock(&F.kick_mu);
	uint64_t one = 1;
	/* an eventfd's counter does not overflow at one per kick */
	if (write(F.kick_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		sbx_srv_log(SRV_LOG_ERROR, "event=front_kick err=\"%s\"", strerror(errno));
}

void front_on_kick(h2o_socket_t *sock, const char *err)
{
	uint64_t n;
	(void)sock;
	(void)err;
	if (read(F.kick_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		sbx_srv_log(SRV_LOG_ERROR, "event=front_kick err=\"%s\"", strerror(errno));
	pthread_mutex_lock(&F.kick_mu);
	front_link *l = F.kicked;
	F.kicked = NULL;
	pthread_mutex_unlock(&F.kick_mu);
	while (l) {
		front_link *next = l->kick_next;
		pthread_mutex_lock(&l->mu);
		l->kicked = false;
		conn *c = l->c;
		if (c && c->direct_rv != SBX_H2G_OK && !c->closing) {
			front_guard_closed(c);
		} else if (c) {
			front_update_timers(c);
			front_flush(c);
		}
		pthread_mutex_unlock(&l->mu);
		front_link_release(l); /* the kick's hold */
		l = next;
	}
}

/* ---- the loop thread ---- */

static __thread bool on_loop; /* this thread registers h2o's ends */
static front_link **tab;      /* by h2o's fd; the loop thread's alone */
static size_t tab_len;

static void on_h2o_close(void *data)
{
	int fd = (int)(intptr_t)data;
	front_link *l = tab[fd];
	tab[fd] = NULL;
	front_link_release(l);
}

void front_direct_register(h2o_socket_t *sock, int fd, front_link *l)
{
	if (!l)
		return;
	/* on_close is the application's (h2o sets it only on its client
	 * sockets): if it were taken, the entry could outlive the fd */
	if (sock->on_close.cb) {
		front_link_release(l);
		return;
	}
	if ((size_t)fd >= tab_len) {
		size_t n = tab_len ? tab_len : 1024;
		while (n <= (size_t)fd)
			n *= 2;
		front_link **t = realloc(tab, n * sizeof(*t));
		if (!t) {
			front_link_release(l);
			return;
		}
		memset(t + tab_len, 0, (n - tab_len) * sizeof(*t));
		tab = t;
		tab_len = n;
	}
	on_loop = true;
	tab[fd] = l;
	sock->on_close.cb = on_h2o_close;
	sock->on_close.data = (void *)(intptr_t)fd;
}

static ssize_t sys_writev(int fd, const struct iovec *iov, int cnt)
{
	return (ssize_t)syscall(SYS_writev, fd, iov, cnt);
}

/* Nothing of h2o's is anywhere but at h2o: the socketpair was read to its
 * end and everything read was sent. */
static bool direct_ok(const front_link *l, const conn *c)
{
	return c->mode == M_H2 && front_can_write_direct(c) && c->direct_rv == SBX_H2G_OK &&
	       !front_queued(sbx_h2g_to_client(c->g)) && l->inner_sent == c->inner_read;
}

static ssize_t direct_write(conn *c, const struct iovec *iov, int cnt)
{
	bool idle = sbx_h2g_open_streams(c->g) == 0;
	size_t total = 0;
	int rv = SBX_H2G_OK;
	for (int i = 0; i < cnt; i++) {
		if (rv == SBX_H2G_OK)
			rv = front_from_h2o(c, iov[i].iov_base, iov[i].iov_len);
		total += iov[i].iov_len;
	}
	ADD(F.out_direct, total);
	c->direct_rv = rv;
	/* the front's part: the rest of what the client did not take, the
	 * guard's close, the idle timer once no stream is open */
	if (rv != SBX_H2G_OK || front_queued(sbx_h2g_to_client(c->g)) ||
	    (sbx_h2g_open_streams(c->g) == 0) != idle)
		kick(c->link);
	return (ssize_t)total;
}

static ssize_t link_writev(front_link *l, int fd, const struct iovec *iov, int cnt)
{
	if (pthread_mutex_trylock(&l->mu) == 0) {
		conn *c = l->c;
		if (c && direct_ok(l, c)) {
			ssize_t w = direct_write(c, iov, cnt);
			pthread_mutex_unlock(&l->mu);
			return w;
		}
		pthread_mutex_unlock(&l->mu);
	}
	ssize_t w = sys_writev(fd, iov, cnt);
	if (w > 0)
		l->inner_sent += (uint64_t)w;
	return w;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	if (on_loop && fd >= 0 && (size_t)fd < tab_len && tab[fd])
		return link_writev(tab[fd], fd, iov, cnt);
	return sys_writev(fd, iov, cnt);
}

/*
 * relay_peer.c: the minimal userspace relay sbx-proxy-bench prints the
 * proxy's tunnel against: accept, connect to a fixed target, then splice
 * both ways with the best settings a relay can pick (pipes at
 * pipe-max-size, SPLICE_F_MOVE|SPLICE_F_MORE, blocking threads, no epoll,
 * no parsing, no accounting).  Whatever the proxy spends above it is the
 * proxy's own; what both spend is the floor of a userspace relay here.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sockmap_relay.h"
#include "relay_peer.h"

struct half {
	int src, dst;
};

/* src -> dst until EOF, then pass the shutdown on. */
static void *splice_half(void *arg)
{
	struct half h = *(struct half *)arg;
	int pp[2];

	free(arg);
	if (pipe2(pp, O_CLOEXEC) < 0)
		return NULL;
	int sz = fcntl(pp[1], F_SETPIPE_SZ, 1 << 20);
	if (sz < 0)
		sz = 1 << 16;
	for (;;) {
		ssize_t n =
			splice(h.src, NULL, pp[1], NULL, (size_t)sz, SPLICE_F_MOVE | SPLICE_F_MORE);
		if (n <= 0)
			break;
		while (n > 0) {
			ssize_t w = splice(pp[0], NULL, h.dst, NULL, (size_t)n,
					   SPLICE_F_MOVE | SPLICE_F_MORE);
			if (w <= 0)
				goto out;
			n -= w;
		}
	}
out:
	shutdown(h.dst, SHUT_WR);
	close(pp[0]);
	close(pp[1]);
	return NULL;
}

struct peer {
	int lfd;
	uint16_t target;
	void *(*serve)(void *); /* takes both fds (malloc'd int[2]) */
};

static int dial_target(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* One connection: both halves, then close both sockets. */
static void *serve(void *arg)
{
	int *fds = arg;
	pthread_t th[2];
	struct half *a = malloc(sizeof(*a)), *b = malloc(sizeof(*b));

	if (!a || !b) {
		free(a);
		free(b);
		goto out;
	}
	*a = (struct half){fds[0], fds[1]};
	*b = (struct half){fds[1], fds[0]};
	if (pthread_create(&th[0], NULL, splice_half, a) != 0) {
		free(a);
		free(b);
		goto out;
	}
	if (pthread_create(&th[1], NULL, splice_half, b) != 0) {
		free(b);
		shutdown(fds[0], SHUT_RDWR);
		pthread_join(th[0], NULL);
		goto out;
	}
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
out:
	close(fds[0]);
	close(fds[1]);
	free(fds);
	return NULL;
}

static void *accept_loop(void *arg)
{
	struct peer *p = arg;
	for (;;) {
		int fd = accept4(p->lfd, NULL, NULL, SOCK_CLOEXEC), one = 1;
		int *fds;
		pthread_t th;
		if (fd < 0)
			return NULL;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		fds = malloc(2 * sizeof(int));
		if (!fds || (fds[1] = dial_target(p->target)) < 0) {
			free(fds);
			close(fd);
			continue;
		}
		fds[0] = fd;
		if (pthread_create(&th, NULL, p->serve, fds) != 0) {
			close(fds[0]);
			close(fds[1]);
			free(fds);
			continue;
		}
		pthread_detach(th);
	}
}

static void relay_peer_start(uint16_t target, uint16_t *port, void *(*serve)(void *))
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	struct peer *p = malloc(sizeof(*p));
	pthread_t th;

	if (!p || (p->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
	    bind(p->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(p->lfd, 64) < 0 ||
	    getsockname(p->lfd, (struct sockaddr *)&a, &al) < 0) {
		perror("relay_peer: listen");
		exit(1);
	}
	p->target = target;
	p->serve = serve;
	*port = ntohs(a.sin_port);
	if (pthread_create(&th, NULL, accept_loop, p) != 0) {
		perror("relay_peer: thread");
		exit(1);
	}
	pthread_detach(th);
}

void relay_peer_splice_start(uint16_t target, uint16_t *port)
{
	relay_peer_start(target, port, serve);
}

/* ---- the kernel relay (sockmap_relay.c) ---- */

static sockmap *smap;

/* Wait for each side's EOF; pass it on once the kernel has handed the
 * other side everything before it. */
static void *watch_pair(void *arg)
{
	int *fds = arg;
	struct sockmap_mark mk[2];
	bool shut[2] = {false, false};
	uint64_t moved;

	if (sockmap_mark(fds[0], fds[1], &mk[0]) < 0 || sockmap_mark(fds[1], fds[0], &mk[1]) < 0 ||
	    sockmap_pair(smap, fds[0], fds[1]) < 0) {
		perror("relay_peer: sockmap pair");
		goto out;
	}
	while (!shut[0] || !shut[1]) {
		struct pollfd pf[2] = {{fds[0], shut[0] ? 0 : POLLRDHUP, 0},
				       {fds[1], shut[1] ? 0 : POLLRDHUP, 0}};
		if (poll(pf, 2, -1) < 0)
			break;
		for (int i = 0; i < 2; i++) {
			if (shut[i] || !(pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
				continue;
			int r;
			if (pf[i].revents & POLLERR)
				goto out; /* reset: tear both down, nothing to pass on */
			while ((r = sockmap_caught_up(fds[i], fds[1 - i], &mk[i], &moved)) == 0)
				usleep(200);
			if (r < 0)
				goto out;
			shutdown(fds[1 - i], SHUT_WR);
			shut[i] = true;
		}
	}
out:
	sockmap_unpair(smap, fds[0], fds[1]);
	close(fds[0]);
	close(fds[1]);
	free(fds);
	return NULL;
}

bool relay_peer_sockmap_start(uint16_t target, uint16_t *port, char *why, size_t whylen)
{
	if (!smap && !(smap = sockmap_new(64, why, whylen)))
		return false; /* one map for every peer started */
	relay_peer_start(target, port, watch_pair);
	return true;
}

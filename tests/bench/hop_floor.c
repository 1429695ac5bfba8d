/*
 * hop_floor.c: sbx-hop-floor, the floor of streaming a command's output to
 * a network client (issue 18).  stdin (the pipe from `head -c N /dev/zero`)
 * goes over one loopback TCP connection to a reader process that receives
 * every byte into its own buffer (as any client must) and discards it: the
 * least any server can do with a pipe's bytes bound for a remote client.
 * The sender does it the best way the kernel offers:
 *   -m splice   splice(2) stdin pipe -> socket, no copy through user space
 *               (the pipe's pages go to the socket; the default);
 *   -m rw       read(2) into a buffer, send(2) it (what a server that
 *               frames the bytes must do at the least);
 *   -m unix     sbxd's shape done the least way: read+write into an
 *               AF_UNIX socketpair (1 MiB buffers, as the front's), a
 *               second thread reads it and sends to the TCP socket (the
 *               front's relay): the floor of a server behind a relay;
 *   -b BYTES    read/recv buffer and splice length (default 1 MiB);
 *   -s BYTES    SO_SNDBUF/SO_RCVBUF (default: the kernel's autotuning).
 * Nagle stays on (TCP_NODELAY off): full segments.  MSG_ZEROCOPY is not
 * offered: on loopback the kernel copies anyway (skb_orphan_frags_rx).
 *
 * Prints one line the bench parses:
 *     bytes=N secs=S send_cpu=S recv_cpu=S
 * (CPU seconds of the sending and the receiving process; getrusage).
 *
 * usage: head -c N /dev/zero | sbx-hop-floor [-m splice|rw|unix] [-b B] [-s B]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_of(int who)
{
	struct rusage ru;
	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void set_bufs(int fd, int sz)
{
	if (sz > 0 && (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz)) != 0 ||
		       setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz)) != 0))
		die("setsockopt");
}

/* The client: receive everything into buf; write the count and own CPU to out. */
static void reader(int lfd, size_t bufsz, int sz, int out)
{
	int fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	set_bufs(fd, sz);
	char *buf = malloc(bufsz);
	unsigned long long n = 0;
	if (!buf)
		die("malloc");
	for (;;) {
		ssize_t k = recv(fd, buf, bufsz, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			die("recv");
		if (k == 0)
			break;
		n += (unsigned long long)k;
	}
	char line[96];
	int len = snprintf(line, sizeof(line), "%llu %.6f\n", n, cpu_of(RUSAGE_SELF));
	if (write(out, line, (size_t)len) != len)
		die("write");
	_exit(0);
}

/* All of buf[0..n) to fd. */
static void send_all(int fd, const char *buf, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t w = send(fd, buf + off, n - off, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			die("send");
		off += (size_t)w;
	}
}

static unsigned long long send_splice(int fd, size_t len)
{
	unsigned long long n = 0;
	for (;;) {
		ssize_t k = splice(0, NULL, fd, NULL, len, SPLICE_F_MOVE | SPLICE_F_MORE);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			die("splice (is stdin a pipe?)");
		if (k == 0)
			return n;
		n += (unsigned long long)k;
	}
}

static unsigned long long send_rw(int fd, size_t len)
{
	char *buf = malloc(len);
	unsigned long long n = 0;
	if (!buf)
		die("malloc");
	for (;;) {
		ssize_t k = read(0, buf, len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			die("read");
		if (k == 0) {
			free(buf);
			return n;
		}
		send_all(fd, buf, (size_t)k);
		n += (unsigned long long)k;
	}
}

/* -m unix: the relay thread, socketpair -> TCP. */
struct relay {
	int from, to;
	size_t len;
	unsigned long long n;
};

static void *relay_main(void *p)
{
	struct relay *r = p;
	char *buf = malloc(r->len);
	if (!buf)
		die("malloc");
	for (;;) {
		ssize_t k = read(r->from, buf, r->len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			die("relay read");
		if (k == 0)
			break;
		send_all(r->to, buf, (size_t)k);
		r->n += (unsigned long long)k;
	}
	free(buf);
	return NULL;
}

static unsigned long long send_unix(int fd, size_t len)
{
	int sp[2], sz = 1 << 20;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
		die("socketpair");
	for (int i = 0; i < 2; i++) {
		setsockopt(sp[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		setsockopt(sp[i], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	struct relay r = {sp[1], fd, len, 0};
	pthread_t t;
	if (pthread_create(&t, NULL, relay_main, &r) != 0)
		die("pthread_create");
	unsigned long long n = send_rw(sp[0], len);
	close(sp[0]);
	pthread_join(t, NULL);
	close(sp[1]);
	return n == r.n ? n : 0;
}

int main(int argc, char **argv)
{
	const char *mode = "splice";
	size_t bufsz = 1 << 20;
	int sz = 0, opt;

	while ((opt = getopt(argc, argv, "m:b:s:")) != -1) {
		if (opt == 'm')
			mode = optarg;
		else if (opt == 'b')
			bufsz = strtoul(optarg, NULL, 0);
		else if (opt == 's')
			sz = atoi(optarg);
		else
			return 2;
	}
	if ((strcmp(mode, "splice") && strcmp(mode, "rw") && strcmp(mode, "unix")) || bufsz == 0) {
		fprintf(stderr, "usage: sbx-hop-floor [-m splice|rw|unix] [-b BYTES] [-s BYTES]\n");
		return 2;
	}
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 1) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &alen) != 0)
		die("listen");
	int rep[2];
	if (pipe(rep) != 0)
		die("pipe");
	double t0 = now_s();
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(rep[0]);
		reader(lfd, bufsz, sz, rep[1]);
	}
	close(rep[1]);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	set_bufs(fd, sz);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
		die("connect");
	/* Bounded: a reader that died before accepting resets the queued
	 * connection (send fails) instead of leaving us blocked; a stuck
	 * run ends at the alarm. */
	close(lfd);
	alarm(600);
	unsigned long long sent = !strcmp(mode, "splice") ? send_splice(fd, bufsz)
				  : !strcmp(mode, "unix") ? send_unix(fd, bufsz)
							  : send_rw(fd, bufsz);
	close(fd);
	char line[96] = {0};
	ssize_t k = read(rep[0], line, sizeof(line) - 1);
	int st = 0;
	waitpid(pid, &st, 0);
	double secs = now_s() - t0;
	unsigned long long got = 0;
	double rcpu = 0;
	if (k <= 0 || sscanf(line, "%llu %lf", &got, &rcpu) != 2 || got != sent || st != 0) {
		fprintf(stderr, "sbx-hop-floor: sent %llu, the reader got %llu\n", sent, got);
		return 1;
	}
	printf("bytes=%llu secs=%.6f send_cpu=%.6f recv_cpu=%.6f\n", sent, secs,
	       cpu_of(RUSAGE_SELF), rcpu);
	return 0;
}

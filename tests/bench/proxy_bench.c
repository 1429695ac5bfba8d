/*
 * proxy_bench.c: sbx-proxy-bench, the allow-list proxy's benchmark (issue 5).
 *
 * In one process: a proxy (src/core/proxy.c) stepped by its own thread with
 * a decider that allows 127.0.0.1, and upstream servers on ephemeral
 * 127.0.0.1 ports (an echo and a sink).  Measured, each against the direct
 * loopback equivalent in the same run:
 *   - CONNECT setup latency: connect to the proxy, CONNECT, read the 200,
 *     one byte echoed through the tunnel (direct: connect + one byte echoed);
 *   - tunnel throughput: 1 GiB (-g GiB) client -> sink through a CONNECT
 *     tunnel (direct: the same to the sink), -r times each, alternating,
 *     the median; and the CPU all threads used per GiB (the client, the
 *     proxy, the sink: getrusage of the process), which says where the
 *     floor is: each tunnelled byte crosses loopback twice;
 *   - the same through two minimal relays (relay_peer.c), alternating with
 *     the above (issue 18): a splice relay (the floor of any userspace
 *     relay) and a BPF sockmap relay (the kernel's; root only), with the
 *     kernel workers' CPU the latter sends from;
 *   - what each path holds for a far end that stops reading (a relay
 *     without backpressure takes up to the 128 MiB cap).
 * Prints ratios and checks the targets (>= 1 GB/s, setup < 1 ms);
 * --strict exits 1 when a target is missed.  --only PATH runs one path
 * once (for perf record -a).
 *
 * usage: sbx-proxy-bench [-n setups] [-g GiB] [-r reps] [--strict]
 *        sbx-proxy-bench --only direct|tunnel|splice|sockmap [-g GiB]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "relay_peer.h"
#include "sbx_proxy.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void decide(void *ud, const sbx_proxy_query *q, sbx_proxy_verdict *v)
{
	(void)ud;
	v->allow = true;
	if (q->phase == SBX_PROXY_NAME)
		snprintf(v->literal, sizeof(v->literal), "127.0.0.1");
}

static volatile int stop;

static void *proxy_loop(void *arg)
{
	sbx_proxy *p = arg;
	sbx_err err;
	while (!stop)
		if (sbx_proxy_step(p, 50, &err) < 0) {
			fprintf(stderr, "proxy_bench: %s\n", err.msg);
			exit(1);
		}
	return NULL;
}

static int listen_on(uint16_t *port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 512) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
		perror("proxy_bench: listen");
		exit(1);
	}
	*port = ntohs(a.sin_port);
	return fd;
}

static int dial(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("proxy_bench: connect");
		exit(1);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* Servers: thread per connection; echo or sink (count bytes, then send
 * the count back as 8 bytes after EOF). */
struct srv {
	int lfd;
	uint16_t port;
	void (*fn)(int);
};

static void echo(int fd)
{
	char b[4096];
	ssize_t n;
	while ((n = recv(fd, b, sizeof(b), 0)) > 0)
		if (send(fd, b, (size_t)n, MSG_NOSIGNAL) != n)
			break;
}

static void sink(int fd)
{
	static __thread char b[1 << 18];
	uint64_t total = 0;
	ssize_t n;
	while ((n = recv(fd, b, sizeof(b), 0)) > 0)
		total += (uint64_t)n;
	if (send(fd, &total, 8, MSG_NOSIGNAL) != 8)
		return;
}

/* Reads nothing: holds the connection until the client goes away. */
static void stall(int fd)
{
	struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
	(void)poll(&pf, 1, 10000);
}

struct cjob {
	int fd;
	void (*fn)(int);
};

static void *cthread(void *arg)
{
	struct cjob j = *(struct cjob *)arg;
	free(arg);
	j.fn(j.fd);
	close(j.fd);
	return NULL;
}

static void *accept_loop(void *arg)
{
	struct srv *s = arg;
	for (;;) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC), one = 1;
		pthread_t th;
		struct cjob *j;
		if (fd < 0)
			return NULL;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		j = malloc(sizeof(*j));
		j->fd = fd;
		j->fn = s->fn;
		if (pthread_create(&th, NULL, cthread, j) != 0) {
			close(fd);
			free(j);
			continue;
		}
		pthread_detach(th);
	}
}

static void srv_start(struct srv *s, void (*fn)(int))
{
	pthread_t th;
	s->fn = fn;
	s->lfd = listen_on(&s->port);
	pthread_create(&th, NULL, accept_loop, s);
	pthread_detach(th);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp);
	return v[n / 2];
}

static bool recv_n(int fd, void *b, size_t n)
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

/* One setup; via_proxy: CONNECT through it. */
static double setup_once(uint16_t proxy_port, uint16_t echo_port, bool via_proxy)
{
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	char req[128], b[sizeof(ok)];
	double t0 = now_s();
	int fd = dial(via_proxy ? proxy_port : echo_port);

	if (via_proxy) {
		int n = snprintf(req, sizeof(req), "CONNECT bench.test:%u HTTP/1.1\r\n\r\n",
				 echo_port);
		if (send(fd, req, (size_t)n, 0) != n || !recv_n(fd, b, sizeof(ok) - 1) ||
		    memcmp(b, ok, sizeof(ok) - 1) != 0) {
			fprintf(stderr, "proxy_bench: CONNECT failed\n");
			exit(1);
		}
	}
	if (send(fd, "x", 1, 0) != 1 || !recv_n(fd, b, 1) || b[0] != 'x') {
		fprintf(stderr, "proxy_bench: echo failed\n");
		exit(1);
	}
	double dt = now_s() - t0;
	close(fd);
	return dt * 1e3;
}

static void setups(uint16_t pp, uint16_t ep, int n, bool via, double *p50, double *p95)
{
	double *v = malloc(sizeof(double) * (size_t)n);
	for (int i = 0; i < 20; i++)
		setup_once(pp, ep, via); /* warm-up */
	for (int i = 0; i < n; i++)
		v[i] = setup_once(pp, ep, via);
	qsort(v, (size_t)n, sizeof(double), cmp);
	*p50 = v[n / 2];
	*p95 = v[(n * 95) / 100];
	free(v);
}

/* CPU seconds (user + system) of every thread of this process so far. */
static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* CPU seconds all kernel worker threads ("kworker/N:M") have used so far: the
 * kernel relay sends from a workqueue, outside this process's rusage.
 * Other jobs' kworker time is counted too, so this is an upper bound. */
static double kworker_cpu_s(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	unsigned long long ticks = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[300], buf[512], *p;
		unsigned long long ut, st;
		FILE *f;
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		if (!strstr(buf, "(kworker") || !(p = strrchr(buf, ')')))
			continue;
		/* after ")": state ppid pgrp session tty tpgid flags minflt
		 * cminflt majflt cmajflt utime stime */
		if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			   &st) == 2)
			ticks += ut + st;
	}
	closedir(d);
	return (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

/* GB/s of `bytes` client -> sink (port sp) over a connection to `port`;
 * via: CONNECT first (port is the proxy's); *cpu: the CPU seconds the
 * process used for it, *kcpu: the kernel workers' CPU seconds meanwhile. */
static double throughput(uint16_t port, uint16_t sp, uint64_t bytes, bool via, double *cpu,
			 double *kcpu)
{
	static char b[1 << 18];
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	char req[128], r[sizeof(ok)];
	uint64_t got = 0;
	int fd = dial(port);

	memset(b, 0x5a, sizeof(b));
	if (via) {
		int n = snprintf(req, sizeof(req), "CONNECT bench.test:%u HTTP/1.1\r\n\r\n", sp);
		if (send(fd, req, (size_t)n, 0) != n || !recv_n(fd, r, sizeof(ok) - 1)) {
			fprintf(stderr, "proxy_bench: CONNECT failed\n");
			exit(1);
		}
	}
	double t0 = now_s(), c0 = cpu_s(), k0 = kworker_cpu_s();
	for (uint64_t sent = 0; sent < bytes;) {
		size_t n = bytes - sent < sizeof(b) ? (size_t)(bytes - sent) : sizeof(b);
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w <= 0) {
			perror("proxy_bench: send");
			exit(1);
		}
		sent += (uint64_t)w;
	}
	shutdown(fd, SHUT_WR);
	if (!recv_n(fd, &got, 8) || got != bytes) {
		fprintf(stderr, "proxy_bench: the sink got %llu of %llu bytes\n",
			(unsigned long long)got, (unsigned long long)bytes);
		exit(1);
	}
	double dt = now_s() - t0;
	*cpu = cpu_s() - c0;
	*kcpu = kworker_cpu_s() - k0;
	close(fd);
	return (double)bytes / dt / 1e9;
}

/* Bytes a client can hand over a connection to `port` (via: CONNECT to
 * target port tp first) whose far end reads nothing, until no send makes
 * progress for 300 ms, or `cap`: what the path buffers for a stalled
 * reader.  Then reset, so every relay frees what it holds. */
static uint64_t buffered(uint16_t port, uint16_t tp, bool via, uint64_t cap)
{
	static char b[1 << 16];
	static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
	char req[128], r[sizeof(ok)];
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	uint64_t sent = 0;
	int fd = dial(port), idle = 0;

	if (via) {
		int n = snprintf(req, sizeof(req), "CONNECT bench.test:%u HTTP/1.1\r\n\r\n", tp);
		if (send(fd, req, (size_t)n, 0) != n || !recv_n(fd, r, sizeof(ok) - 1)) {
			fprintf(stderr, "proxy_bench: CONNECT failed\n");
			exit(1);
		}
	}
	while (sent < cap && idle < 300) {
		ssize_t w = send(fd, b, sizeof(b), MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w > 0) {
			sent += (uint64_t)w;
			idle = 0;
		} else {
			usleep(1000);
			idle++;
		}
	}
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
	return sent;
}

int main(int argc, char **argv)
{
	int n = 2000, reps = 5;
	double gib = 1;
	bool strict = false;
	const char *only = NULL;
	sbx_err err;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-g") && i + 1 < argc)
			gib = atof(argv[++i]);
		else if (!strcmp(argv[i], "-r") && i + 1 < argc)
			reps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--strict"))
			strict = true;
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else {
			fprintf(stderr,
				"usage: %s [-n setups] [-g GiB] [-r reps] [--strict]\n"
				"       %s --only direct|tunnel|splice|sockmap [-g GiB]   (one "
				"path, once: for perf)\n",
				argv[0], argv[0]);
			return 2;
		}
	}
	if (n < 20)
		n = 20;
	if (reps < 1 || reps > 64)
		reps = 5;
	sbx_proxy_cfg cfg = {.decide = decide};
	sbx_proxy *p = sbx_proxy_new(&cfg, &err);
	uint16_t pp;
	if (!p || sbx_proxy_add_listener(p, listen_on(&pp), NULL, &err) < 0) {
		fprintf(stderr, "proxy_bench: %s\n", err.msg);
		return 1;
	}
	struct srv e, s, z;
	srv_start(&e, echo);
	srv_start(&s, sink);
	srv_start(&z, stall);
	pthread_t th;
	pthread_create(&th, NULL, proxy_loop, p);

	double d50, d95, p50, p95;
	setups(pp, e.port, n, false, &d50, &d95);
	setups(pp, e.port, n, true, &p50, &p95);
	uint64_t bytes = (uint64_t)(gib * (double)(1ull << 30));
	double dv[64], tv[64], dc[64], tc[64];
	double rv[64], rc[64], kv[64], kc[64], dk[64], tk[64], rk[64], kk[64];
	uint16_t rp, kp = 0;
	char kwhy[200];
	relay_peer_splice_start(s.port, &rp);
	bool kernel = relay_peer_sockmap_start(s.port, &kp, kwhy, sizeof(kwhy));
	if (only) {
		uint16_t port = !strcmp(only, "tunnel")	   ? pp
				: !strcmp(only, "splice")  ? rp
				: !strcmp(only, "sockmap") ? kp
							   : s.port;
		if (!strcmp(only, "sockmap") && !kernel) {
			fprintf(stderr, "proxy_bench: %s\n", kwhy);
			return 1;
		}
		double c, k, gbs = throughput(port, s.port, bytes, !strcmp(only, "tunnel"), &c, &k);
		printf("%s: %.2f GB/s, CPU %.2f s/GiB + kworkers %.2f s/GiB\n", only, gbs, c / gib,
		       k / gib);
		return 0;
	}
	for (int i = 0; i < reps; i++) { /* alternating, so load drifts hit all three */
		dv[i] = throughput(s.port, s.port, bytes, false, &dc[i], &dk[i]);
		tv[i] = throughput(pp, s.port, bytes, true, &tc[i], &tk[i]);
		rv[i] = throughput(rp, s.port, bytes, false, &rc[i], &rk[i]);
		if (kernel)
			kv[i] = throughput(kp, s.port, bytes, false, &kc[i], &kk[i]);
	}
	double direct = median(dv, reps), tunnel = median(tv, reps), relay = median(rv, reps);
	double dcpu = median(dc, reps) / gib, tcpu = median(tc, reps) / gib;
	double rcpu = median(rc, reps) / gib;

	const uint64_t cap = 128ull << 20;
	double mib = 1024.0 * 1024.0;
	double bd = (double)buffered(z.port, z.port, false, cap) / mib;
	double bt = (double)buffered(pp, z.port, true, cap) / mib;
	/* the peers relay to the sink's port: point fresh ones at the staller */
	uint16_t rzp, kzp = 0;
	relay_peer_splice_start(z.port, &rzp);
	double br = (double)buffered(rzp, z.port, false, cap) / mib, bk = -1;
	if (kernel && relay_peer_sockmap_start(z.port, &kzp, kwhy, sizeof(kwhy)))
		bk = (double)buffered(kzp, z.port, false, cap) / mib;

	stop = 1;
	pthread_join(th, NULL);
	sbx_proxy_free(p);

	bool ok_setup = p50 < 1.0, ok_tp = tunnel >= 1.0;
	printf("allow-list proxy (%d setups, %.2f GiB each way, median of %d, same run):\n", n, gib,
	       reps);
	printf("  CONNECT setup + 1-byte echo  p50 %7.3f ms  p95 %7.3f ms   target p50 < 1 ms: %s\n",
	       p50, p95, ok_setup ? "ok" : "MISSED");
	printf("  direct connect + echo        p50 %7.3f ms  p95 %7.3f ms   proxy/direct p50 x%.2f\n",
	       d50, d95, p50 / d50);
	printf("  tunnel throughput            %7.2f GB/s                 target >= 1 GB/s: %s\n",
	       tunnel, ok_tp ? "ok" : "MISSED");
	printf("  direct loopback              %7.2f GB/s                 tunnel/direct x%.2f\n",
	       direct, tunnel / direct);
	printf("  CPU per GiB (all threads)    tunnel %.2f s, direct %.2f s (x%.2f: each tunnelled "
	       "byte crosses loopback twice)\n",
	       tcpu, dcpu, tcpu / dcpu);
	printf("  minimal splice relay         %7.2f GB/s                 relay/direct x%.2f, "
	       "tunnel/relay x%.2f\n",
	       relay, relay / direct, tunnel / relay);
	printf("  CPU per GiB, minimal relay   %.2f s (x%.2f direct; tunnel/relay x%.2f)\n", rcpu,
	       rcpu / dcpu, tcpu / rcpu);
	if (kernel) {
		double kr = median(kv, reps), kcpu = median(kc, reps) / gib;
		printf("  minimal sockmap relay        %7.2f GB/s                 sockmap/direct x%.2f, "
		       "tunnel/sockmap x%.2f\n",
		       kr, kr / direct, tunnel / kr);
		double kw = median(kk, reps) / gib;
		printf("  CPU per GiB, sockmap relay   %.2f s + kworkers %.2f s (x%.2f direct)\n",
		       kcpu, kw, (kcpu + kw) / dcpu);
	} else {
		printf("  minimal sockmap relay        not run: %s\n", kwhy);
	}
	printf("  kworker CPU per GiB          direct %.2f s, tunnel %.2f s, splice relay %.2f s "
	       "(all jobs' kworkers)\n",
	       median(dk, reps) / gib, median(tk, reps) / gib, median(rk, reps) / gib);
	printf("  held for a reader that stalls direct %.1f MiB, tunnel %.1f MiB, splice relay %.1f "
	       "MiB, sockmap relay ",
	       bd, bt, br);
	if (bk >= 0)
		printf("%.1f MiB%s\n", bk,
		       bk * mib >= (double)cap ? " (the cap: no backpressure)" : "");
	else
		printf("not run\n");
	double la[3];
	if (getloadavg(la, 3) == 3)
		printf("  load average at the end      %.2f %.2f %.2f\n", la[0], la[1], la[2]);
	return strict && !(ok_setup && ok_tp) ? 1 : 0;
}

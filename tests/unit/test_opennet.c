/*
 * test_opennet.c: network_mode "open" (src/core/opennet.c) really connects a
 * sandbox network namespace and really keeps the deny-list and the host out.
 *
 * The test brings up the fake internet (tests/net/fakenet.sh), moves itself
 * into its host netns, adds a second host address (198.51.100.77 on lo, which
 * pasta does not copy into the sandbox: only the nft rule keeps it out) and
 * opens listeners there (127.0.0.1, every address, IPv6).  A forked child
 * unshare()s a user+net namespace (or only a netns: backend "privileged") and
 * holds it; sbx_opennet_start connects it; forked setns children then try:
 * HTTP to the internet (works), TCP/UDP to the deny-listed 203.0.113.0/24
 * (fails; works when not deny-listed), the host's loopback and its own
 * addresses (fail; the .77 one works once the rules are deleted, proving the
 * rule is what stops it), DNS through the fake resolver (works).  stop()
 * and the caller's death leave no pasta and no fd.  Variants: a user
 * namespace mapping the caller, one that does not (as sessions do), none
 * (backend "privileged"), a rootless caller (uid 65534), an IPv4-mapped
 * spelling of the deny CIDR; errors: malformed deny entries, no default
 * route.  Skipped only when `ip netns` is impossible here (not root).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <grp.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"

static char g_name[64];
static char g_script[4096];
static bool g_skip;
static bool g_up;
static int g_orig_ns = -1;
static int g_lo_port, g_any_port, g_v6_port;
static int g_listeners[3] = {-1, -1, -1};

static const char *const g_deny[] = {"203.0.113.0/24", "169.254.169.254", "fd00:ec2::254",
				     "metadata.google.internal", NULL};

/* ---- the sandbox namespace holder ---- */

struct sandbox {
	pid_t holder;
	int hold_fd; /* closing it lets the holder exit */
	int userns;
	int netns;
};

static int bring_lo_up(void)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int rc;

	if (s < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	rc = ioctl(s, SIOCGIFFLAGS, &ifr);
	if (rc == 0) {
		ifr.ifr_flags |= IFF_UP;
		rc = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	close(s);
	return rc;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

/* A child in a new netns (and user namespace when with_userns, its uid/gid
 * map g_map), lo up, alive until sandbox_close. */
static const char *g_map = "0 0 1\n";
static void sandbox_open(struct sandbox *sb, bool with_userns)
{
	int ready[2], hold[2];
	char path[64], c;

	assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
	assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
	sb->holder = fork();
	assert_true(sb->holder >= 0);
	if (sb->holder == 0) {
		close(ready[0]);
		close(hold[1]);
		if (unshare(CLONE_NEWNET | (with_userns ? CLONE_NEWUSER : 0)) < 0)
			_exit(1);
		(void)!write(ready[1], "u", 1);
		/* Wait for the maps before bringing lo up (needs CAP_NET_ADMIN there). */
		if (read(hold[0], &c, 1) != 1)
			_exit(2);
		if (bring_lo_up() < 0)
			_exit(3);
		(void)!write(ready[1], "l", 1);
		while (read(hold[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	if (with_userns) {
		snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)sb->holder);
		assert_int_equal(write_file(path, "deny"), 0);
		snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)sb->holder);
		assert_int_equal(write_file(path, g_map), 0);
		snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)sb->holder);
		assert_int_equal(write_file(path, g_map), 0);
	}
	assert_int_equal(write(hold[1], "m", 1), 1);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	sb->hold_fd = hold[1];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)sb->holder);
	sb->userns = with_userns ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)sb->holder);
	sb->netns = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(sb->netns >= 0);
	assert_true(!with_userns || sb->userns >= 0);
}

static void sandbox_close(struct sandbox *sb)
{
	close(sb->hold_fd);
	waitpid(sb->holder, NULL, 0);
	if (sb->userns >= 0)
		close(sb->userns);
	close(sb->netns);
}

/* Run fn(arg) in a child inside the sandbox's namespaces; its exit code. */
static int in_sandbox(const struct sandbox *sb, int (*fn)(const void *), const void *arg)
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		if (sb->userns >= 0 && setns(sb->userns, CLONE_NEWUSER) < 0)
			_exit(90);
		if (setns(sb->netns, CLONE_NEWNET) < 0)
			_exit(91);
		_exit(fn(arg));
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* A probe that must succeed, tried up to five times: on a loaded machine
 * a UDP datagram or a first connection through pasta can time out once,
 * and one timeout is not the network refusing.  Probes that must fail
 * are tried once: a timeout there is the answer. */
static int in_sandbox_ok(const struct sandbox *sb, int (*fn)(const void *), const void *arg)
{
	int rc = 1;

	for (int i = 0; i < 5 && (rc = in_sandbox(sb, fn, arg)) != 0; i++)
		;
	return rc;
}

/* ---- what the sandbox tries ---- */

struct target {
	const char *addr;
	int port;
	const char *expect; /* for http_get / dns: what the answer must contain */
};

static int sock_to(const char *addr, int port, int type)
{
	struct sockaddr_storage ss;
	socklen_t len;
	struct timeval tv = {.tv_sec = 3};
	int fd;

	memset(&ss, 0, sizeof(ss));
	if (strchr(addr, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, addr, &s6->sin6_addr) != 1)
			return -1;
		len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, addr, &s4->sin_addr) != 1)
			return -1;
		len = sizeof(*s4);
	}
	fd = socket(ss.ss_family, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	tv.tv_sec = type == SOCK_DGRAM ? 1 : 3;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* 0: connected; 1: refused/unreachable. */
static int try_tcp(const void *arg)
{
	const struct target *t = arg;
	int fd = sock_to(t->addr, t->port, SOCK_STREAM);

	if (fd < 0)
		return 1;
	close(fd);
	return 0;
}

/* 0: GET /hello answered with t->expect; 1: no connection; 2: wrong answer. */
static int try_http(const void *arg)
{
	const struct target *t = arg;
	char buf[4096];
	size_t len = 0;
	ssize_t n;
	const char *req = "GET /hello HTTP/1.0\r\n\r\n";
	int fd = sock_to(t->addr, t->port, SOCK_STREAM);

	if (fd < 0)
		return 1;
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		return 2;
	while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	close(fd);
	return strstr(buf, t->expect) ? 0 : 2;
}

/* 0: the UDP echo came back; 1: it did not. */
static int try_udp_echo(const void *arg)
{
	const struct target *t = arg;
	char buf[64];
	int fd = sock_to(t->addr, t->port, SOCK_DGRAM);

	if (fd < 0)
		return 1;
	for (int i = 0; i < 2; i++) {
		if (send(fd, "ping-42", 7, 0) != 7)
			continue;
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n == 7 && memcmp(buf, "ping-42", 7) == 0) {
			close(fd);
			return 0;
		}
	}
	close(fd);
	return 1;
}

/* 0: an A query for t->expect's name through the DNS server at t->addr
 * answered the address in the fakenet zone (198.51.100.2); else 1/2. */
static int try_dns(const void *arg)
{
	const struct target *t = arg;
	unsigned char q[512], a[512];
	size_t len = 12;
	const unsigned char want[4] = {198, 51, 100, 2};
	int fd = sock_to(t->addr, t->port, SOCK_DGRAM);

	if (fd < 0)
		return 1;
	memset(q, 0, sizeof(q));
	q[0] = 0x12, q[1] = 0x34, q[2] = 0x01, q[5] = 1; /* id, RD, one question */
	for (const char *p = t->expect; *p;) {
		const char *dot = strchr(p, '.');
		size_t l = dot ? (size_t)(dot - p) : strlen(p);
		q[len++] = (unsigned char)l;
		memcpy(q + len, p, l);
		len += l;
		p += l + (dot ? 1 : 0);
	}
	q[len++] = 0;
	q[len++] = 0, q[len++] = 1; /* A */
	q[len++] = 0, q[len++] = 1; /* IN */
	if (send(fd, q, len, 0) != (ssize_t)len)
		return 1;
	ssize_t n = recv(fd, a, sizeof(a), 0);
	close(fd);
	if (n < (ssize_t)(len + 16) || a[0] != 0x12 || a[1] != 0x34 || (a[3] & 0x0f) != 0)
		return 2;
	return memcmp(a + n - 4, want, 4) == 0 ? 0 : 2;
}

/* Delete the sbx nftables table inside the sandbox (the control case). */
static int drop_rules(const void *arg)
{
	(void)arg;
	/* Become the namespace's root (when our uid is not mapped there, exec
	 * would drop the capabilities setns gave us). */
	if (setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		return 2;
	return system("nft delete table inet sbx") == 0 ? 0 : 1;
}

/* ---- fixtures ---- */

static int listen_on(int family, const char *addr, int *port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int one = 1, fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memset(&ss, 0, sizeof(ss));
	if (fd < 0)
		return -1;
	if (family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		inet_pton(AF_INET6, addr, &s6->sin6_addr);
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		inet_pton(AF_INET, addr, &s4->sin_addr);
		len = sizeof(*s4);
	}
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 64) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
		close(fd);
		return -1;
	}
	*port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					 : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

static int run_cmd(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int rc = system(cmd);
	return rc == 0 ? 0 : -1;
}

static int group_setup(void **state)
{
	(void)state;
	const char *here = __FILE__;
	const char *unit = strstr(here, "unit/test_opennet.c");
	char path[128];

	snprintf(g_name, sizeof(g_name), "sbxon%d", (int)getpid());
	if (!unit || here[0] != '/') {
		fprintf(stderr, "test_opennet: cannot find tests/net from %s\n", here);
		return -1;
	}
	snprintf(g_script, sizeof(g_script), "%.*snet/fakenet.sh", (int)(unit - here), here);
	if (geteuid() != 0 ||
	    run_cmd("ip netns add %s-probe >/dev/null 2>&1 && ip netns del %s-probe", g_name,
		    g_name) < 0) {
		g_skip = true;
		return 0;
	}
	if (run_cmd("'%s' up %s >/dev/null", g_script, g_name) < 0) {
		fprintf(stderr, "test_opennet: fakenet up failed\n");
		return -1;
	}
	g_up = true;
	if (run_cmd("ip -n %s-host addr add 198.51.100.77/32 dev lo", g_name) < 0 ||
	    run_cmd("echo 'pypi.org 198.51.100.2' > /tmp/sbx-fakenet-%s/zone", g_name) < 0)
		return -1;
	g_orig_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/run/netns/%s-host", g_name);
	int host = open(path, O_RDONLY | O_CLOEXEC);
	if (g_orig_ns < 0 || host < 0 || setns(host, CLONE_NEWNET) < 0) {
		fprintf(stderr, "test_opennet: setns into %s: %s\n", path, strerror(errno));
		return -1;
	}
	close(host);
	g_listeners[0] = listen_on(AF_INET, "127.0.0.1", &g_lo_port);
	g_listeners[1] = listen_on(AF_INET, "0.0.0.0", &g_any_port);
	g_listeners[2] = listen_on(AF_INET6, "::", &g_v6_port);
	for (int i = 0; i < 3; i++)
		if (g_listeners[i] < 0)
			return -1;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 3; i++)
		if (g_listeners[i] >= 0)
			close(g_listeners[i]);
	if (g_orig_ns >= 0) {
		if (setns(g_orig_ns, CLONE_NEWNET) < 0)
			fprintf(stderr, "test_opennet: setns back: %s\n", strerror(errno));
		close(g_orig_ns);
	}
	if (g_up)
		run_cmd("'%s' down %s", g_script, g_name);
	return 0;
}

/* Is pid gone (or a zombie nobody reaped yet)? */
static bool pid_gone(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

#define SKIP_WITHOUT_NETNS()                                                         \
	do {                                                                         \
		if (g_skip) {                                                        \
			fprintf(stderr, "skipped: `ip netns` is impossible here\n"); \
			skip();                                                      \
		}                                                                    \
	} while (0)

static int fd_count(void)
{
	char path[64];
	int n = 0;
	for (int fd = 0; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if (access(path, F_OK) == 0)
			n++;
	}
	return n;
}

/* ---- tests ---- */

/* A deny-list spelling 203.0.113.0/24 as IPv4-mapped IPv6: must block IPv4. */
static const char *const g_deny_mapped[] = {"::ffff:203.0.113.0/120", "169.254.169.254", NULL};

static void check_open(bool with_userns, const char *const *deny)
{
	struct sandbox sb;
	sbx_opennet on;
	sbx_err err;

	sandbox_open(&sb, with_userns);
	int fds_before = fd_count();
	memset(&err, 0, sizeof(err));
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = sbx_opennet_start(&on, sb.userns, sb.netns, deny, &err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc != 0)
		fprintf(stderr, "sbx_opennet_start: %s\n", err.msg);
	else
		fprintf(stderr, "sbx_opennet_start (%s): %.1f ms\n",
			with_userns ? "userns" : "netns only",
			(double)(t1.tv_sec - t0.tv_sec) * 1e3 +
				(double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	assert_int_equal(rc, 0);
	assert_true(on.pid > 0);

	const struct target web = {"198.51.100.2", 80, "hello from 198.51.100.2:80"};
	const struct target web6 = {"2001:db8:100::2", 80, "hello from [2001:db8:100::2]:80"};
	const struct target far = {"203.0.113.2", 80, "hello from 203.0.113.2:80"};
	const struct target far_udp = {"203.0.113.2", 7, NULL};
	const struct target near_udp = {"198.51.100.2", 7, NULL};
	const struct target dns = {"198.51.100.2", 53, "pypi.org"};
	const struct target host_lo = {"127.0.0.1", g_lo_port, NULL};
	const struct target host_addr = {"198.51.100.1", g_any_port, NULL};
	const struct target host_other = {"198.51.100.77", g_any_port, NULL};
	const struct target host_v6 = {"2001:db8:100::1", g_v6_port, NULL};

	/* The internet works: TCP (v4 and v6), UDP, DNS. */
	assert_int_equal(in_sandbox_ok(&sb, try_http, &web), 0);
	assert_int_equal(in_sandbox_ok(&sb, try_http, &web6), 0);
	assert_int_equal(in_sandbox_ok(&sb, try_udp_echo, &near_udp), 0);
	assert_int_equal(in_sandbox_ok(&sb, try_dns, &dns), 0);
	/* The deny-listed network does not, TCP nor UDP. */
	assert_int_equal(in_sandbox(&sb, try_http, &far), 1);
	assert_int_equal(in_sandbox(&sb, try_udp_echo, &far_udp), 1);
	/* Nor the host: its loopback, its own addresses. */
	assert_int_equal(in_sandbox(&sb, try_tcp, &host_lo), 1);
	assert_int_equal(in_sandbox(&sb, try_tcp, &host_addr), 1);
	assert_int_equal(in_sandbox(&sb, try_tcp, &host_other), 1);
	assert_int_equal(in_sandbox(&sb, try_tcp, &host_v6), 1);

	/* Control: without the rules, pasta would take the sandbox to the
	 * host's other address: the rule is what stops it. */
	assert_int_equal(in_sandbox(&sb, drop_rules, NULL), 0);
	assert_int_equal(in_sandbox_ok(&sb, try_tcp, &host_other), 0);
	assert_int_equal(in_sandbox_ok(&sb, try_http, &far), 0);

	pid_t pid = on.pid;
	sbx_opennet_stop(&on);
	assert_int_equal(on.pid, 0);
	assert_int_equal(fd_count(), fds_before);
	assert_true(pid_gone(pid));
	assert_int_equal(kill(pid, 0), -1);
	/* Gone with pasta: the way out. */
	assert_int_equal(in_sandbox(&sb, try_http, &web), 1);
	sbx_opennet_stop(&on); /* twice is fine */
	sandbox_close(&sb);
}

static void test_open_userns(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	check_open(true, g_deny);
}

/* The session's user namespace maps a uid range the caller (root) is not
 * in, as sessions do: nft and pasta still get their capabilities there. */
static void test_open_userns_unmapped_caller(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	g_map = "0 231072 65536\n";
	check_open(true, g_deny);
}

/* Every test starts with the plain map (a failed one may leave another). */
static int reset_map(void **state)
{
	(void)state;
	g_map = "0 0 1\n";
	return 0;
}

static void test_open_privileged(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	check_open(false, g_deny_mapped);
}

/* A session's close: pasta is killed at once (the way out is gone when
 * the call returns) and reaped a little later by a thread of ours; it
 * must be reaped (not left a zombie) within a bounded time. */
static void test_stop_nowait(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	struct sandbox sb;
	sbx_opennet on;
	sbx_err err;
	const struct target web = {"198.51.100.2", 80, "hello from 198.51.100.2:80"};

	sandbox_open(&sb, true);
	int fds_before = fd_count();
	memset(&err, 0, sizeof(err));
	assert_int_equal(sbx_opennet_start(&on, sb.userns, sb.netns, g_deny, &err), 0);
	/* Control: the way out works while pasta lives. */
	assert_int_equal(in_sandbox_ok(&sb, try_http, &web), 0);
	pid_t pid = on.pid;
	sbx_opennet_stop_nowait(&on);
	assert_int_equal(on.pid, 0);
	assert_int_equal(in_sandbox(&sb, try_http, &web), 1);
	/* Reaped, not merely dead: kill() finds no such process. */
	bool reaped = false;
	for (int i = 0; i < 1000 && !reaped; i++) {
		reaped = kill(pid, 0) == -1 && errno == ESRCH;
		if (!reaped) {
			struct timespec ts = {0, 10 * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
	assert_true(reaped);
	assert_int_equal(fd_count(), fds_before);
	sandbox_close(&sb);
}

/* pasta dies with the process that started it. */
static void test_dies_with_caller(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	struct sandbox sb;
	int p[2];
	pid_t pasta = 0;

	sandbox_open(&sb, true);
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t caller = fork();
	assert_true(caller >= 0);
	if (caller == 0) {
		sbx_opennet on;
		sbx_err err;
		if (sbx_opennet_start(&on, sb.userns, sb.netns, g_deny, &err) < 0)
			_exit(1);
		(void)!write(p[1], &on.pid, sizeof(on.pid));
		_exit(0); /* without stop */
	}
	close(p[1]);
	assert_int_equal(read(p[0], &pasta, sizeof(pasta)), (ssize_t)sizeof(pasta));
	close(p[0]);
	waitpid(caller, NULL, 0);
	for (int i = 0; i < 200 && !pid_gone(pasta); i++)
		usleep(10000);
	assert_true(pid_gone(pasta));
	sandbox_close(&sb);
}

/* The rootless case (backend "userns" started by an ordinary user): the
 * caller is uid 65534, owns the sandbox's user namespace, runs nft and pasta
 * as itself.  Where /dev/net/tun is root-only (mode 0600), the check is that
 * start fails with BackendUnavailable naming /dev/net/tun.  Runs in a forked child; returns its verdict as an exit code:
 * 0 good, 10+ which step failed. */
static int rootless_child(void)
{
	struct sandbox sb = {.userns = -1, .netns = -1};
	int ready[2], hold[2], st;
	char path[64], c, map[32];
	sbx_opennet on;
	sbx_err err;

	if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
	    setresuid(65534, 65534, 65534) < 0)
		return 10;
	/* The uid change made us undumpable: /proc/PID/uid_map would be root's. */
	prctl(PR_SET_DUMPABLE, 1);
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(hold, O_CLOEXEC) < 0)
		return 11;
	sb.holder = fork();
	if (sb.holder < 0)
		return 12;
	if (sb.holder == 0) {
		close(ready[0]);
		close(hold[1]);
		if (unshare(CLONE_NEWNET | CLONE_NEWUSER) < 0)
			_exit(1);
		(void)!write(ready[1], "u", 1);
		if (read(hold[0], &c, 1) != 1 || bring_lo_up() < 0)
			_exit(2);
		(void)!write(ready[1], "l", 1);
		while (read(hold[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	if (read(ready[0], &c, 1) != 1)
		return 13;
	snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)sb.holder);
	if (write_file(path, "deny") < 0)
		return 14;
	snprintf(map, sizeof(map), "0 65534 1\n");
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)sb.holder);
	if (write_file(path, map) < 0)
		return 15;
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)sb.holder);
	if (write_file(path, map) < 0)
		return 16;
	if (write(hold[1], "m", 1) != 1 || read(ready[0], &c, 1) != 1)
		return 17;
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)sb.holder);
	sb.userns = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)sb.holder);
	sb.netns = open(path, O_RDONLY | O_CLOEXEC);
	if (sb.userns < 0 || sb.netns < 0)
		return 18;
	memset(&err, 0, sizeof(err));
	bool tun_ok = access("/dev/net/tun", R_OK | W_OK) == 0;
	int started = sbx_opennet_start(&on, sb.userns, sb.netns, g_deny, &err);
	if (!tun_ok) {
		/* This machine keeps /dev/net/tun root-only: the error must say so. */
		fprintf(stderr, "rootless open mode unavailable here (checked the error): %s\n",
			err.msg);
		close(hold[1]);
		waitpid(sb.holder, &st, 0);
		return started == -1 && err.kind == SBX_E_BACKEND_UNAVAILABLE && on.pid == 0 &&
				       strstr(err.msg, "/dev/net/tun")
			       ? 0
			       : 24;
	}
	if (started < 0) {
		fprintf(stderr, "rootless sbx_opennet_start: %s\n", err.msg);
		return 19;
	}
	const struct target web = {"198.51.100.2", 80, "hello from 198.51.100.2:80"};
	const struct target far = {"203.0.113.2", 80, "hello from 203.0.113.2:80"};
	const struct target host_other = {"198.51.100.77", g_any_port, NULL};
	int rc = 0;
	if (in_sandbox(&sb, try_http, &web) != 0)
		rc = 20;
	else if (in_sandbox(&sb, try_http, &far) != 1)
		rc = 21;
	else if (in_sandbox(&sb, try_tcp, &host_other) != 1)
		rc = 22;
	pid_t pid = on.pid;
	sbx_opennet_stop(&on);
	if (!rc && !pid_gone(pid))
		rc = 23;
	close(hold[1]);
	waitpid(sb.holder, &st, 0);
	return rc;
}

static void test_open_rootless(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	int status;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(rootless_child());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* No default route on the host: BackendUnavailable saying so, nothing left
 * running. */
static void test_no_default_route(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	struct sandbox sb;
	sbx_opennet on;
	sbx_err err;
	int status;

	sandbox_open(&sb, true);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		/* A fresh netns as "the host": only lo, no route. */
		if (unshare(CLONE_NEWNET) < 0)
			_exit(1);
		memset(&err, 0, sizeof(err));
		if (sbx_opennet_start(&on, sb.userns, sb.netns, g_deny, &err) == 0)
			_exit(2);
		if (err.kind != SBX_E_BACKEND_UNAVAILABLE || !strstr(err.msg, "default route"))
			_exit(3);
		_exit(on.pid == 0 ? 0 : 4);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	sandbox_close(&sb);
}

/* ---- nft and pasta at once ---- */

/* Create path (mode 0755) holding s. */
static int create_exe(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) && chmod(path, 0755) == 0 ? 0 : -1;
}

/* A fake nft (SBX_TEST_NFT) that waits until the test writes a line to a
 * FIFO, then runs `then` (a shell command line; "$@" are nft's arguments),
 * so a test decides when the rules go in: no sleeps, nothing to race. */
struct slow_nft {
	char dir[64], fifo[96], exe[96];
};

static void slow_nft_make(struct slow_nft *n, const char *then)
{
	char script[512];

	snprintf(n->dir, sizeof(n->dir), "/tmp/sbx-test-nft.XXXXXX");
	assert_non_null(mkdtemp(n->dir));
	assert_int_equal(chmod(n->dir, 0755), 0);
	snprintf(n->fifo, sizeof(n->fifo), "%s/go", n->dir);
	snprintf(n->exe, sizeof(n->exe), "%s/nft", n->dir);
	assert_int_equal(mkfifo(n->fifo, 0666), 0);
	assert_int_equal(chmod(n->fifo, 0666), 0);
	snprintf(script, sizeof(script), "#!/bin/sh\nread line < %s\n%s\n", n->fifo, then);
	assert_int_equal(create_exe(n->exe, script), 0);
	assert_int_equal(setenv("SBX_TEST_NFT", n->exe, 1), 0);
}

/* Let the fake nft go on (it is blocked opening the FIFO for reading). */
static void slow_nft_release(struct slow_nft *n)
{
	int fd = open(n->fifo, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "go\n", 3), 3);
	close(fd);
}

static void slow_nft_remove(struct slow_nft *n)
{
	unsetenv("SBX_TEST_NFT");
	unlink(n->fifo);
	unlink(n->exe);
	rmdir(n->dir);
}

/* Step without waiting until pasta's watcher has spoken (bounded: 10 s). */
static void wait_for_pasta(sbx_opennet *on)
{
	sbx_err err;
	for (int i = 0; i < 1000 && on->watch_fd >= 0; i++) {
		memset(&err, 0, sizeof(err));
		assert_int_equal(sbx_opennet_step(on, 10, &err), 1);
	}
	assert_int_equal(on->watch_fd, -1);
}

/* pasta comes up while nft is still installing the rules, and the open is
 * not ready until the rules are in: then they hold (the host's other
 * address is refused; the control, the rules deleted, reaches it). */
static void test_ready_waits_for_rules(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	struct slow_nft n;
	struct sandbox sb;
	sbx_opennet on;
	sbx_err err;
	const struct target web = {"198.51.100.2", 80, "hello from 198.51.100.2:80"};
	const struct target host_other = {"198.51.100.77", g_any_port, NULL};

	slow_nft_make(&n, "exec /usr/sbin/nft \"$@\"");
	sandbox_open(&sb, true);
	memset(&err, 0, sizeof(err));
	assert_int_equal(sbx_opennet_begin(&on, sb.userns, sb.netns, g_deny, &err), 0);
	/* Both started: pasta while nft still waits. */
	assert_true(on.pid > 0);
	assert_true(on.nft_fd >= 0);
	wait_for_pasta(&on);
	/* pasta is ready, nft is not: not ready, and still not after a wait. */
	assert_true(on.nft_fd >= 0);
	assert_int_equal(sbx_opennet_step(&on, 50, &err), 1);
	assert_true(sbx_opennet_wait_fd(&on) >= 0);
	slow_nft_release(&n);
	assert_int_equal(sbx_opennet_step(&on, -1, &err), 0);
	assert_int_equal(sbx_opennet_wait_fd(&on), -1);
	assert_int_equal(in_sandbox_ok(&sb, try_http, &web), 0);
	assert_int_equal(in_sandbox(&sb, try_tcp, &host_other), 1);
	assert_int_equal(in_sandbox(&sb, drop_rules, NULL), 0);
	assert_int_equal(in_sandbox_ok(&sb, try_tcp, &host_other), 0);
	sbx_opennet_stop(&on);
	sandbox_close(&sb);
	slow_nft_remove(&n);
}

/* nft done, pasta still coming up: the wait fd is quiet until pasta has
 * something to say.  (nft's pidfd is readable for good once nft has
 * exited, and the watcher, forked after it, holds a copy: an epoll that
 * only closed it kept it, and an event loop polling the wait fd spun.) */
static void test_wait_fd_quiet_after_nft(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	struct slow_nft n; /* (its FIFO and dir, for a held pasta) */
	struct sandbox sb;
	sbx_opennet on;
	sbx_err err;
	char pasta[128], script[256];

	slow_nft_make(&n, "exec /usr/sbin/nft \"$@\"");
	unsetenv("SBX_TEST_NFT"); /* the real nft; the FIFO holds pasta */
	snprintf(pasta, sizeof(pasta), "%s/pasta", n.dir);
	snprintf(script, sizeof(script), "#!/bin/sh\nread line < %s\nexec /usr/bin/pasta \"$@\"\n",
		 n.fifo);
	assert_int_equal(create_exe(pasta, script), 0);
	assert_int_equal(setenv("SBX_TEST_PASTA", pasta, 1), 0);
	sandbox_open(&sb, true);
	memset(&err, 0, sizeof(err));
	assert_int_equal(sbx_opennet_begin(&on, sb.userns, sb.netns, g_deny, &err), 0);
	/* Until nft is done (bounded: 10 s). */
	for (int i = 0; i < 1000 && on.nft_fd >= 0; i++)
		assert_int_equal(sbx_opennet_step(&on, 10, &err), 1);
	assert_int_equal(on.nft_fd, -1);
	/* Control: the watcher is still waiting for the held pasta. */
	assert_true(on.watch_fd >= 0);
	struct pollfd p = {.fd = sbx_opennet_wait_fd(&on), .events = POLLIN};
	assert_true(p.fd >= 0);
	assert_int_equal(poll(&p, 1, 0), 0);
	slow_nft_release(&n);
	assert_int_equal(sbx_opennet_step(&on, -1, &err), 0);
	sbx_opennet_stop(&on);
	unsetenv("SBX_TEST_PASTA");
	unlink(pasta);
	sandbox_close(&sb);
	slow_nft_remove(&n);
}

/* nft fails after pasta has come up: the open fails naming nft and its
 * output, and pasta, the watcher and every fd are gone. */
static void test_nft_fails_after_pasta(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	struct slow_nft n;
	struct sandbox sb;
	sbx_opennet on;
	sbx_err err;

	slow_nft_make(&n, "echo 'fake nft: no such table' >&2; exit 1");
	sandbox_open(&sb, true);
	int fds_before = fd_count();
	memset(&err, 0, sizeof(err));
	assert_int_equal(sbx_opennet_begin(&on, sb.userns, sb.netns, g_deny, &err), 0);
	pid_t pasta = on.pid;
	assert_true(pasta > 0);
	wait_for_pasta(&on);
	slow_nft_release(&n);
	assert_int_equal(sbx_opennet_step(&on, -1, &err), -1);
	assert_int_equal(err.kind, SBX_E_BACKEND_UNAVAILABLE);
	assert_non_null(strstr(err.msg, "nftables deny rules failed"));
	assert_non_null(strstr(err.msg, "fake nft: no such table"));
	assert_int_equal(on.pid, 0);
	assert_true(pid_gone(pasta));
	assert_int_equal(sbx_opennet_wait_fd(&on), -1);
	assert_int_equal(fd_count(), fds_before);
	sandbox_close(&sb);
	slow_nft_remove(&n);
}

/* pasta fails while nft is still running: the open fails naming pasta,
 * and nft is killed, not waited for. */
static void test_pasta_fails_before_nft(void **state)
{
	(void)state;
	SKIP_WITHOUT_NETNS();
	struct slow_nft n;
	struct sandbox sb;
	sbx_opennet on;
	sbx_err err;
	char fake_pasta[128];

	slow_nft_make(&n, "exit 0");
	snprintf(fake_pasta, sizeof(fake_pasta), "%s/pasta", n.dir);
	assert_int_equal(
		create_exe(fake_pasta, "#!/bin/sh\necho 'fake pasta: no tap' >&2\nexit 1\n"), 0);
	assert_int_equal(setenv("SBX_TEST_PASTA", fake_pasta, 1), 0);
	sandbox_open(&sb, true);
	int fds_before = fd_count();
	memset(&err, 0, sizeof(err));
	assert_int_equal(sbx_opennet_begin(&on, sb.userns, sb.netns, g_deny, &err), 0);
	pid_t nft = on.nft_pid;
	assert_true(nft > 0);
	assert_int_equal(sbx_opennet_step(&on, -1, &err), -1);
	assert_int_equal(err.kind, SBX_E_BACKEND_UNAVAILABLE);
	assert_non_null(strstr(err.msg, "pasta exited"));
	assert_non_null(strstr(err.msg, "fake pasta: no tap"));
	assert_true(pid_gone(nft));
	assert_int_equal(kill(nft, 0), -1);
	assert_int_equal(fd_count(), fds_before);
	unsetenv("SBX_TEST_PASTA");
	unlink(fake_pasta);
	sandbox_close(&sb);
	slow_nft_remove(&n);
}

/* A malformed deny entry fails closed before anything starts. */
static void test_bad_deny(void **state)
{
	(void)state;
	static const char *const bad[][2] = {{"10.0.0.0/33", NULL}, {"1.2.3.4/", NULL},
					     {"fd00::/129", NULL},  {"1.2.3.256", NULL},
					     {"::g", NULL},	    {"1.2.3.4/-1", NULL}};
	int netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	assert_true(netns >= 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sbx_opennet on = {.pid = 123, .pidfd = 7};
		sbx_err err;
		memset(&err, 0, sizeof(err));
		assert_int_equal(sbx_opennet_start(&on, -1, netns, bad[i], &err), -1);
		assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
		assert_non_null(strstr(err.msg, bad[i][0]));
		assert_int_equal(on.pid, 0);
		sbx_opennet_stop(&on);
	}
	close(netns);
	sbx_opennet zero;
	memset(&zero, 0, sizeof(zero));
	sbx_opennet_stop(&zero);
	sbx_opennet_stop(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_bad_deny, reset_map),
		cmocka_unit_test_setup(test_open_userns, reset_map),
		cmocka_unit_test_setup(test_open_userns_unmapped_caller, reset_map),
		cmocka_unit_test_setup(test_open_privileged, reset_map),
		cmocka_unit_test_setup(test_stop_nowait, reset_map),
		cmocka_unit_test_setup(test_dies_with_caller, reset_map),
		cmocka_unit_test_setup(test_open_rootless, reset_map),
		cmocka_unit_test_setup(test_no_default_route, reset_map),
		cmocka_unit_test_setup(test_ready_waits_for_rules, reset_map),
		cmocka_unit_test_setup(test_nft_fails_after_pasta, reset_map),
		cmocka_unit_test_setup(test_wait_fd_quiet_after_nft, reset_map),
		cmocka_unit_test_setup(test_pasta_fails_before_nft, reset_map),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}

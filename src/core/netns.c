/*
 * netns.c: a session's network namespaces, one per mode it may use.
 *
 * The zygote is born in the session's first network namespace: the blocked
 * one, with only lo.  When the session's ceiling is wider it makes one more
 * namespace per mode, once, at session start: allowlist (lo, plus the
 * proxy's listening socket on 127.0.0.1, whose connections the host serves)
 * and open (lo now; the host connects it to the outside with pasta after
 * installing nftables rules in it).  Each run's init is cloned into the
 * namespace of the mode the run asked for, so switching modes between runs
 * costs nothing but the choice.  A blocked run of an allowlist session sits
 * in a namespace where no listener exists at all: nothing to connect to,
 * not merely something that says no.
 *
 * A run with an allow-list of its own (narrower than the session's) gets
 * a namespace of its own instead (sbx_netns_own, on request): lo and a
 * listener of its own, which the host serves with that run's list.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

#define FAIL(...) sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno, __VA_ARGS__)

const char *sbx_net_name(sbx_net mode)
{
	switch (mode) {
	case SBX_NET_BLOCKED:
		return "blocked";
	case SBX_NET_ALLOWLIST:
		return "allowlist";
	case SBX_NET_OPEN:
		return "open";
	default:
		return "?";
	}
}

int sbx_netns_lo_up(sbx_err *err)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return FAIL("socket: %s", strerror(errno));
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
	if (rc == 0) {
		ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
		rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
	}
	close(fd);
	return rc == 0 ? 0 : FAIL("bring up lo: %s", strerror(errno));
}

static int listen_loopback(uint16_t port, sbx_err *err)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		return FAIL("proxy listener: socket: %s", strerror(errno));
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 512) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return FAIL("proxy listener 127.0.0.1:%u: %s", port, strerror(e));
	}
	return fd;
}

int sbx_netns_prepare(int fd[SBX_NET_NMODES], int *listener, sbx_net ceiling, uint16_t port,
		      sbx_err *err)
{
	for (int m = SBX_NET_BLOCKED + 1; m < SBX_NET_NMODES; m++)
		fd[m] = -1;
	*listener = -1;
	for (int m = SBX_NET_ALLOWLIST; m <= (int)ceiling && m < SBX_NET_NMODES; m++) {
		if (unshare(CLONE_NEWNET) != 0)
			return FAIL("network namespace for mode %s: %s", sbx_net_name((sbx_net)m),
				    strerror(errno));
		if (sbx_netns_lo_up(err) < 0)
			return -1;
		if (m == SBX_NET_ALLOWLIST && (*listener = listen_loopback(port, err)) < 0)
			return -1;
		fd[m] = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		if (fd[m] < 0)
			return FAIL("open the %s namespace: %s", sbx_net_name((sbx_net)m),
				    strerror(errno));
		if (setns(fd[SBX_NET_BLOCKED], CLONE_NEWNET) != 0)
			return FAIL("back to the blocked namespace: %s", strerror(errno));
	}
	return 0;
}

int sbx_netns_own(uint16_t port, int *listener, sbx_err *err)
{
	*listener = -1;
	if (unshare(CLONE_NEWNET) != 0)
		return FAIL("network namespace of a run's own: %s", strerror(errno));
	if (sbx_netns_lo_up(err) < 0)
		return -1;
	*listener = listen_loopback(port, err);
	return *listener < 0 ? -1 : 0;
}

/*
 * The zygote's first network namespace (the blocked one, lo only) is made
 * by a child of its own while it builds the root: creating a namespace
 * (its sysctl tables, lo's device) is ~0.45 ms of CPU, the largest part of
 * a cold open after the root's mounts, and nothing of the root needs it.
 * The child makes it, brings lo up and hands it over, then exits (the
 * caller reaps it; the zygote's loop does).  Until the join the zygote is
 * in the template's namespace (the host's), where nothing of the sandbox
 * ever runs: the join comes before its ready message, and a failed one
 * fails the open.
 */
struct net_child {
	int32_t err_no; /* 0, or why */
	int32_t stage;	/* what failed: 0 create, 1 lo, 2 open */
};

int sbx_netns_child_start(sbx_err *err)
{
	int sp[2] = {-1, -1};
	int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);

	if (proc < 0 || socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
		int e = errno;
		if (proc >= 0)
			close(proc);
		errno = e;
		return FAIL("network namespace: %s", strerror(e));
	}
	/* Not cloned into it: clone3 would make the namespace before it
	 * returns, in the caller's time. */
	pid_t pid = sbx_sys_clone3_fork(0, NULL);
	if (pid == 0) {
		/* By fd: the zygote's pivots may move our root meanwhile. */
		struct net_child m = {0, 0};
		sbx_err e = {0};
		int fd = -1;
		close(sp[0]);
		if (unshare(CLONE_NEWNET) == 0 && (m.stage = 1, sbx_netns_lo_up(&e) == 0)) {
			m.stage = 2;
			fd = openat(proc, "thread-self/ns/net", O_RDONLY | O_CLOEXEC);
		}
		m.err_no = fd >= 0 ? 0 : (e.sys_errno ? e.sys_errno : errno);
		(void)sbx_proto_send_fds(sp[1], &m, sizeof(m), &fd, fd >= 0 ? 1 : 0);
		_exit(0);
	}
	int e = errno;
	close(proc);
	close(sp[1]);
	if (pid < 0) {
		close(sp[0]);
		errno = e;
		return FAIL("network namespace: %s", strerror(e));
	}
	return sp[0];
}

int sbx_netns_child_join(int *sock, sbx_err *err)
{
	static const char *const what[] = {"create", "bring up lo in", "open", "receive"};
	struct net_child m;
	int fd = -1;
	size_t nfds = 0;
	ssize_t n = sbx_proto_recv_fds(*sock, &m, sizeof(m), &fd, 1, &nfds);

	close(*sock);
	*sock = -1;
	if (n != (ssize_t)sizeof(m) || nfds != 1 || m.err_no != 0) {
		int e = n == (ssize_t)sizeof(m) ? m.err_no : n < 0 ? errno : EPIPE;
		unsigned st = n == (ssize_t)sizeof(m) && m.stage >= 0 && m.stage <= 2
				      ? (unsigned)m.stage
				      : 0;
		if (n == (ssize_t)sizeof(m) && e == 0) {
			e = EMFILE; /* it sent one: dropped at our open-files limit */
			st = 3;
		}
		if (fd >= 0)
			close(fd);
		errno = e;
		return FAIL("%s the network namespace: %s", what[st], strerror(e));
	}
	if (setns(fd, CLONE_NEWNET) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return FAIL("join the network namespace: %s", strerror(e));
	}
	return fd;
}

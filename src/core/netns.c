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
	for (int m = 0; m < SBX_NET_NMODES; m++)
		fd[m] = -1;
	*listener = -1;
	fd[SBX_NET_BLOCKED] = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd[SBX_NET_BLOCKED] < 0)
		return FAIL("open our network namespace: %s", strerror(errno));
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

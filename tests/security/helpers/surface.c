/*
 * surface.c: probe the kernel surface the seccomp allow-list closes (issue
 * 15, holes 1-4): syscalls newer than libseccomp, AF_VSOCK, netlink
 * uevents, and prlimit on another process.
 *
 * usage: surface [VSOCK_PORT]
 * Output: one "RESULT <name> <outcome>" line per attempt, outcome "OK" or
 * an errno name.  Run on the host as an unprivileged user it is the control
 * (the calls reach the kernel and mostly succeed); in a run each must be
 * refused, except the NETLINK_ROUTE and own-limit controls.  Exits 0.
 *
 *   nr457_statmount nr458_listmount nr462_mseal nr467_open_tree_attr
 *                        raw syscalls with harmless arguments (a bad pointer,
 *                        a bad fd, a zero-length seal)
 *   vsock_socket vsock_bind vsock_connect
 *                        AF_VSOCK stream socket, bind VMADDR_CID_ANY:PORT,
 *                        non-blocking connect to the host (CID 2); bind and
 *                        connect report the socket's errno when it failed
 *   uevent_socket uevent_bind
 *                        NETLINK_KOBJECT_UEVENT, bound to the kernel's group
 *   route_socket route_bind route_dump
 *                        NETLINK_ROUTE, and an RTM_GETLINK dump answered
 *   prlimit_self         prlimit(0, RLIMIT_NOFILE) read
 *   prlimit_child_get prlimit_child_set
 *                        the same on a child of ours (same uid: the kernel
 *                        allows it, the filter must not)
 *   prlimit_pid1_get     RLIMIT_NOFILE of pid 1, read only (this program may
 *                        run as root on the host: it never writes another
 *                        process's limits unless that is its own child)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/vm_sockets.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe_report.h"

static void probe_new_syscalls(void)
{
	TRY("nr457_statmount", syscall(457, NULL, NULL, 0, 0));
	TRY("nr458_listmount", syscall(458, NULL, NULL, 0, 0));
	TRY("nr462_mseal", syscall(462, 0, 0, 0));
	TRY("nr467_open_tree_attr", syscall(467, -1, NULL, 0, NULL, 0));
}

static void probe_vsock(unsigned port)
{
	struct sockaddr_vm a = {.svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY};
	int fd, e;

	errno = 0;
	fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	e = errno;
	report("vsock_socket", fd, e);
	if (fd < 0) {
		report("vsock_bind", -1, e);
		report("vsock_connect", -1, e);
		return;
	}
	a.svm_port = port;
	TRY("vsock_bind", bind(fd, (struct sockaddr *)&a, sizeof(a)));
	close(fd);
	fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	a.svm_cid = VMADDR_CID_HOST;
	errno = 0;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EINPROGRESS)
		report("vsock_connect", 0, 0); /* it went out toward the hypervisor */
	else
		report("vsock_connect", -1, errno);
	close(fd);
}

static void probe_netlink(const char *what, int proto, unsigned groups)
{
	struct sockaddr_nl a = {.nl_family = AF_NETLINK, .nl_groups = groups};
	char name[64];
	int fd, e;

	errno = 0;
	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, proto);
	e = errno;
	snprintf(name, sizeof(name), "%s_socket", what);
	report(name, fd, e);
	snprintf(name, sizeof(name), "%s_bind", what);
	if (fd < 0) {
		report(name, -1, e);
		return;
	}
	TRY(name, bind(fd, (struct sockaddr *)&a, sizeof(a)));
	if (proto == NETLINK_ROUTE) {
		struct {
			struct nlmsghdr h;
			struct ifinfomsg i;
		} req = {
			.h = {.nlmsg_len = sizeof(req),
			      .nlmsg_type = RTM_GETLINK,
			      .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
			.i = {.ifi_family = AF_UNSPEC},
		};
		char buf[8192];
		long n = -1;

		errno = 0;
		if (send(fd, &req, sizeof(req), 0) == (ssize_t)sizeof(req))
			n = recv(fd, buf, sizeof(buf), 0);
		report("route_dump", n > 0 ? 0 : -1, n == 0 ? EIO : errno);
	}
	close(fd);
}

static void probe_prlimit(void)
{
	struct rlimit r;
	pid_t child;

	TRY("prlimit_self", prlimit(0, RLIMIT_NOFILE, NULL, &r));
	child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	TRY("prlimit_child_get", prlimit(child, RLIMIT_NOFILE, NULL, &r));
	TRY("prlimit_child_set", prlimit(child, RLIMIT_NOFILE, &r, NULL));
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	TRY("prlimit_pid1_get", prlimit(1, RLIMIT_NOFILE, NULL, &r));
}

int main(int argc, char **argv)
{
	unsigned port = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : 40000;

	probe_new_syscalls();
	probe_vsock(port);
	probe_netlink("uevent", NETLINK_KOBJECT_UEVENT, 1);
	probe_netlink("route", NETLINK_ROUTE, 0);
	probe_prlimit();
	return 0;
}

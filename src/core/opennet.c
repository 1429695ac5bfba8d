/*
 * opennet.c: network_mode "open": connect a sandbox network namespace to the
 * outside through pasta (Debian's passt package, a userspace network stack:
 * the sandbox's packets become ordinary sockets of the pasta process on the
 * host), after nftables rules inside that namespace reject what open mode
 * must never reach:
 *
 *   - the deny-list (cloud metadata by default): addresses and CIDRs;
 *   - every address of the host's own interfaces, because pasta turns a
 *     packet to one of them into a host-side connect() to the host itself
 *     (pasta copies the address of the default-route interface into the
 *     namespace, where it is local anyway; any other host address would be
 *     reached through pasta).  The host's loopback is not reachable: inside
 *     the namespace 127.0.0.0/8 and ::1 are the namespace's own lo, pasta
 *     runs with --no-map-gw (the gateway address is not the host) and with
 *     every port forwarding off (-t/-u/-T/-U none).
 *
 * The rules live in the sandbox's netns, owned by the session's user
 * namespace, where the workload holds no capability (it cannot change them).
 * nft and pasta run as children of the caller: nft from a child that joins
 * the user namespace, then the network namespace (setns needs that order),
 * and reads the ruleset from a memfd; pasta gets the namespaces as
 * /proc/self/fd/N paths.  pasta runs in the foreground (so its pid is ours
 * to kill and reap) with PR_SET_PDEATHSIG; readiness = the namespace has the
 * default routes (per family) the host has, checked by a child inside it.
 * nft and pasta start at once: the open is ready when both are done, and
 * until then the session runs nothing in the namespace (its only processes
 * are the zygote and warm runs waiting for a request), so no packet of the
 * sandbox's can pass before the rules are in; running them in series cost
 * nft's whole exec and commit (2-5 ms) on every open.  Nothing here waits
 * unless asked to: sbx_opennet_begin starts both, and sbx_opennet_step,
 * called when sbx_opennet_wait_fd (an epoll over nft's pidfd and the
 * watcher's pipe) is readable, takes each one's word, so an event loop
 * (sbxd) serves others while pasta comes up.
 *
 * What open mode does not do: it does not filter by name (a deny-list entry
 * that is a name, not an address, is skipped here: the lead's policy layer
 * owns names), does not inspect traffic, and does not stop traffic to
 * addresses that merely route back to the host through another machine.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/capability.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* How long pasta may take to configure the namespace. */
#define OPENNET_READY_MS 10000
/* The largest ruleset text (the deny-list plus the host's addresses). */
#define OPENNET_RULES_MAX (256u * 1024u)

static const char *const nft_paths[] = {"/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft", NULL};
static const char *const pasta_paths[] = {"/usr/bin/pasta", "/usr/sbin/pasta", "/bin/pasta", NULL};

static const char *find_exe(const char *const *paths)
{
	for (size_t i = 0; paths[i]; i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the ruleset ---- */

struct rules {
	char *buf;
	size_t len;
	bool overflow;
};

__attribute__((format(printf, 2, 3))) static void rules_add(struct rules *r, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->overflow)
		return;
	va_start(ap, fmt);
	n = vsnprintf(r->buf + r->len, OPENNET_RULES_MAX - r->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= OPENNET_RULES_MAX - r->len)
		r->overflow = true;
	else
		r->len += (size_t)n;
}

static void rules_reject(struct rules *r, int af, const void *addr, unsigned int prefix)
{
	char text[INET6_ADDRSTRLEN];

	/* TCP gets a reset (connect fails at once with ECONNREFUSED: an ICMP
	 * error is only a soft error to a connecting TCP socket, which would
	 * retry until its timeout); everything else an ICMP admin-prohibited. */
	inet_ntop(af, addr, text, sizeof(text));
	rules_add(r,
		  "\t\t%s daddr %s/%u meta l4proto tcp reject with tcp reset\n"
		  "\t\t%s daddr %s/%u reject with icmpx type admin-prohibited\n",
		  af == AF_INET ? "ip" : "ip6", text, prefix, af == AF_INET ? "ip" : "ip6", text,
		  prefix);
}

/* Zero the bits of addr (len bytes) past prefix. */
static void mask_prefix(unsigned char *addr, size_t len, unsigned int prefix)
{
	for (size_t i = 0; i < len; i++) {
		unsigned int keep = prefix > 8 * i ? prefix - 8 * (unsigned int)i : 0;
		if (keep >= 8)
			continue;
		addr[i] &= (unsigned char)(0xff00u >> keep);
	}
}

/* An entry that looks like an address ("a.b.c.d", anything with ':' or '/'). */
static bool looks_like_address(const char *s)
{
	if (strchr(s, ':') || strchr(s, '/'))
		return true;
	return s[0] && strspn(s, "0123456789.") == strlen(s);
}

/* Add a reject rule for one deny-list entry: 0, or -1 with err
 * (InvalidArgument) for an entry that looks like an address but is not one.
 * Names are skipped (see the top of the file). */
static int rules_deny_entry(struct rules *r, const char *entry, sbx_err *err)
{
	char host[INET6_ADDRSTRLEN + 8];
	unsigned char addr[16];
	const char *slash = strchr(entry, '/');
	size_t hlen = slash ? (size_t)(slash - entry) : strlen(entry);
	int af;
	unsigned long prefix;

	if (!looks_like_address(entry))
		return 0;
	if (hlen == 0 || hlen >= sizeof(host))
		goto bad;
	memcpy(host, entry, hlen);
	host[hlen] = '\0';
	if (inet_pton(AF_INET, host, addr) == 1)
		af = AF_INET;
	else if (inet_pton(AF_INET6, host, addr) == 1)
		af = AF_INET6;
	else
		goto bad;
	prefix = af == AF_INET ? 32 : 128;
	if (slash) {
		char *end;
		if (!slash[1] || slash[1] == '+' || slash[1] == '-')
			goto bad;
		errno = 0;
		prefix = strtoul(slash + 1, &end, 10);
		if (errno || *end || prefix > (af == AF_INET ? 32u : 128u))
			goto bad;
	}
	mask_prefix(addr, af == AF_INET ? 4 : 16, (unsigned int)prefix);
	rules_reject(r, af, addr, (unsigned int)prefix);
	/* ::ffff:a.b.c.d is what an IPv6 socket says for an IPv4 destination,
	 * but the packet is IPv4: deny that too. */
	if (af == AF_INET6 && prefix >= 96 && IN6_IS_ADDR_V4MAPPED((struct in6_addr *)addr))
		rules_reject(r, AF_INET, addr + 12, (unsigned int)prefix - 96);
	return 0;
bad:
	return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
			   "network deny-list entry '%s' is not an IPv4/IPv6 address or CIDR",
			   entry);
}

/* Reject rules for every address of the caller's interfaces but 127.0.0.0/8
 * and ::1 (the sandbox's own loopback); addresses on lo other than those
 * (anycast, a second host address) are the host's too. */
static int rules_host_addrs(struct rules *r, sbx_err *err)
{
	struct ifaddrs *ifa, *i;

	if (getifaddrs(&ifa) < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "getifaddrs: %s", strerror(errno));
	for (i = ifa; i; i = i->ifa_next) {
		if (!i->ifa_addr)
			continue;
		if (i->ifa_addr->sa_family == AF_INET) {
			const struct sockaddr_in *sin = (const struct sockaddr_in *)i->ifa_addr;
			if ((ntohl(sin->sin_addr.s_addr) >> 24) == 127)
				continue;
			rules_reject(r, AF_INET, &sin->sin_addr, 32);
		} else if (i->ifa_addr->sa_family == AF_INET6) {
			const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)i->ifa_addr;
			if (IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr))
				continue;
			rules_reject(r, AF_INET6, &sin6->sin6_addr, 128);
		}
	}
	freeifaddrs(ifa);
	return 0;
}

/* The whole ruleset: a fresh "inet sbx" table (deleted first, so a second
 * call replaces rather than adds), one output chain rejecting each denied
 * destination, TCP and UDP and everything else alike, unless the packet
 * goes out through lo (it stays inside the sandbox). */
static int rules_build(struct rules *r, const char *const *deny, sbx_err *err)
{
	/* The namespace is the session's own and new: flush ruleset makes
	 * sure our table is all there is, and costs nothing in an empty
	 * namespace, unlike deleting a table (the commit then waits out an
	 * RCU grace period: ~8 ms of the open here). */
	rules_add(r, "flush ruleset\n"
		     "table inet sbx {\n"
		     "\tchain out {\n"
		     "\t\ttype filter hook output priority 0; policy accept;\n"
		     /* What goes out through lo stays in the sandbox (its own
		      * addresses, including the host's that pasta copied in), and
		      * the resets/ICMP errors the rules below send back go that
		      * way: rejecting those too would leave connect() hanging. */
		     "\t\toifname \"lo\" accept\n");
	for (size_t i = 0; deny && deny[i]; i++)
		if (rules_deny_entry(r, deny[i], err) < 0)
			return -1;
	if (rules_host_addrs(r, err) < 0)
		return -1;
	rules_add(r, "\t}\n}\n");
	if (r->overflow)
		return sbx_err_set(
			err, SBX_E_INVALID_ARGUMENT, 0,
			"network deny-list too long for open mode (over %u bytes of rules)",
			OPENNET_RULES_MAX);
	return 0;
}

/* ---- children ---- */

/* In a forked child: join the user namespace (if any) and then the network
 * namespace.  User first: joining it is what grants CAP_SYS_ADMIN over the
 * network namespace it owns.  Returns 0 or -1 (errno set). */
static int join_netns(int userns_fd, int netns_fd)
{
	if (userns_fd >= 0 && setns(userns_fd, CLONE_NEWUSER) < 0)
		return -1;
	return setns(netns_fd, CLONE_NEWNET);
}

/* After joining a user namespace we hold every capability in it, but our
 * uid is not mapped there (only the sandbox user is), so execve would
 * clear them all: carry CAP_NET_ADMIN across as an ambient capability,
 * which is all nft needs.  Raw syscalls: this runs in a forked child. */
static int keep_net_admin(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &h, d) != 0)
		return -1;
	d[CAP_TO_INDEX(CAP_NET_ADMIN)].inheritable |= CAP_TO_MASK(CAP_NET_ADMIN);
	if (syscall(SYS_capset, &h, d) != 0)
		return -1;
	return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_ADMIN, 0, 0);
}

/* Read what a child wrote to fd (a memfd) into buf as one line: its lines
 * joined by "; ", without pasta's complaints that it has no syslog. */
static void read_text(int fd, char *buf, size_t size)
{
	char raw[4096], *line, *save;
	ssize_t n = pread(fd, raw, sizeof(raw) - 1, 0);
	size_t len = 0;

	raw[n > 0 ? n : 0] = '\0';
	buf[0] = '\0';
	for (line = strtok_r(raw, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strstr(line, "to syslog") || !line[0])
			continue;
		int w = snprintf(buf + len, size - len, "%s%s", len ? "; " : "", line);
		if (w < 0 || (size_t)w >= size - len)
			break;
		len += (size_t)w;
	}
}

/* Start nft -f - inside the namespaces with the ruleset on stdin, its
 * output into on->nft_log; on->nft_pid/nft_fd become nft and its pidfd
 * (readable once it has exited: nft_done). */
static int start_nft(sbx_opennet *on, const char *nft, const struct rules *r, sbx_err *err)
{
	int in = memfd_create("sbx-nft-rules", MFD_CLOEXEC);
	int out = on->nft_log, pidfd = -1, rc = -1;
	pid_t pid;

	if (in < 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "memfd_create: %s", strerror(errno));
		goto done;
	}
	if (write(in, r->buf, r->len) != (ssize_t)r->len) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "write ruleset: %s", strerror(errno));
		goto done;
	}
	pid = sbx_sys_clone3_fork(0, &pidfd);
	if (pid < 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "clone3: %s", strerror(errno));
		goto done;
	}
	if (pid == 0) {
		/* Child: no malloc, no stdio; report through the memfd and the exit code. */
		char *const argv[] = {(char *)nft, (char *)"-f", (char *)"-", NULL};
		char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (dup2(out, 1) < 0 || dup2(out, 2) < 0 || lseek(in, 0, SEEK_SET) < 0 ||
		    dup2(in, 0) < 0)
			_exit(126);
		if (join_netns(on->userns_fd, on->netns_fd) < 0 ||
		    (on->userns_fd >= 0 && keep_net_admin() < 0)) {
			const char *m = "setns into the sandbox namespaces failed\n";
			(void)!write(2, m, strlen(m));
			_exit(125);
		}
		execve(nft, argv, envp);
		_exit(127);
	}
	on->nft_pid = pid;
	on->nft_fd = pidfd;
	rc = 0;
done:
	if (in >= 0)
		close(in);
	return rc;
}

/* Done waiting for fd: out of the epoll set, then closed.  Closing alone
 * is not enough: the set drops an fd only when every copy of its open file
 * is closed, and our forked children (the watcher, another session's nft)
 * hold copies, so nft's pidfd, readable for good once nft exited, kept the
 * set readable and an event loop polling it spun (server_loop_spec). */
static void unwatch(sbx_opennet *on, int *fd)
{
	if (on->wait_fd >= 0)
		(void)epoll_ctl(on->wait_fd, EPOLL_CTL_DEL, *fd, NULL);
	close(*fd);
	*fd = -1;
}

/* nft has exited (its pidfd is readable): reap it, 0 when it installed the rules. */
static int nft_done(sbx_opennet *on, sbx_err *err)
{
	int status = 0;
	char msg[512];

	while (waitpid(on->nft_pid, &status, 0) < 0 && errno == EINTR)
		;
	on->nft_pid = 0;
	unwatch(on, &on->nft_fd);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	read_text(on->nft_log, msg, sizeof(msg));
	return sbx_err_set(
		err, SBX_E_BACKEND_UNAVAILABLE, 0,
		"open network: installing the nftables deny rules failed (%s exit %d): %s "
		"(needs a kernel with nf_tables and nft_reject_inet, and the right to "
		"administer the sandbox's namespaces)",
		on->nft, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
		msg[0] ? msg : "no output");
}

/* Read a small /proc file into buf (NUL-terminated, truncated to size-1);
 * no stdio: the readiness watcher calls this in a forked child. */
static void read_proc(const char *path, char *buf, size_t size)
{
	size_t len = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		while (len < size - 1 && (n = read(fd, buf + len, size - 1 - len)) > 0)
			len += (size_t)n;
		close(fd);
	}
	buf[len] = '\0';
}

/* Which families have a default route (not on lo) in the calling thread's
 * network namespace: bit 0 IPv4, bit 1 IPv6. */
static int default_routes(void)
{
	char buf[64 * 1024];
	int fams = 0;
	char *line, *save;

	/* Iface Destination Gateway Flags RefCnt Use Metric Mask ... (one header line) */
	read_proc("/proc/self/net/route", buf, sizeof(buf));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char ifname[64];
		unsigned int dst, gw, flags, mask;
		if (sscanf(line, "%63s %x %x %x %*d %*d %*d %x", ifname, &dst, &gw, &flags,
			   &mask) == 5 &&
		    dst == 0 && mask == 0 && (flags & 1) && strcmp(ifname, "lo") != 0)
			fams |= 1;
	}
	/* dst dstlen src srclen nexthop metric refcnt use flags ifname */
	read_proc("/proc/self/net/ipv6_route", buf, sizeof(buf));
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char dst[40], ifname[64];
		unsigned int len, flags;
		if (sscanf(line, "%39s %x %*s %*x %*s %*x %*x %*x %x %63s", dst, &len, &flags,
			   ifname) == 4 &&
		    len == 0 && strcmp(dst, "00000000000000000000000000000000") == 0 &&
		    (flags & 1) && strcmp(ifname, "lo") != 0)
			fams |= 2;
	}
	return fams;
}

/* Start the readiness watcher: a child inside the namespaces that writes one
 * byte to the pipe once the namespace has a default route of the families in
 * `need` (pasta configures addresses before routes, so a route means done),
 * then gives the families in `nice` up to OPENNET_NICE_MS more: pasta
 * configures IPv4, then IPv6, but leaves IPv6 out when the host's IPv6 is not
 * routable, which only pasta decides.  It exits without writing (the pipe
 * reads EOF) when pasta exits or after OPENNET_READY_MS: so the pipe alone
 * is what the caller waits on. */
#define OPENNET_NICE_MS 1000
static pid_t start_watcher(sbx_opennet *on, int need, int nice, int *rfd, sbx_err *err)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "fork: %s", strerror(e));
	}
	if (pid == 0) {
		int64_t end = now_ms() + OPENNET_READY_MS, nice_end = 0;
		struct pollfd pasta = {.fd = on->pidfd, .events = POLLIN};
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[0]);
		if (join_netns(on->userns_fd, on->netns_fd) < 0)
			_exit(125);
		/* Told of every route change (listening needs no privilege),
		 * before the first look, so none is missed: look again then,
		 * not on a timer (a 2 ms one cost ~1 ms of the open on average;
		 * it stays, at 20 ms, as a backstop). */
		int nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
		struct sockaddr_nl sa = {.nl_family = AF_NETLINK,
					 .nl_groups = RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE};
		if (nl >= 0 && bind(nl, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
			close(nl);
			nl = -1;
		}
		while (now_ms() < end) {
			int have = default_routes();
			if ((have & need) == need) {
				if (!nice_end)
					nice_end = now_ms() + OPENNET_NICE_MS;
				if ((have & nice) == nice || now_ms() >= nice_end) {
					(void)!write(p[1], "r", 1);
					_exit(0);
				}
			}
			/* Look again on a route change (or in 2 ms without
			 * netlink), or go at once when pasta exits. */
			struct pollfd pf[2] = {pasta, {.fd = nl, .events = POLLIN}};
			if (poll(pf, nl >= 0 ? 2 : 1, nl >= 0 ? 20 : 2) > 0) {
				if (pf[0].revents)
					_exit(2);
				char drain[8192];
				while (recv(nl, drain, sizeof(drain), MSG_DONTWAIT) > 0)
					;
			}
		}
		_exit(1);
	}
	close(p[1]);
	*rfd = p[0];
	return pid;
}

/* Fork pasta for the namespaces, stderr into errfd. */
static pid_t start_pasta(const char *pasta, int userns_fd, int netns_fd, int errfd, int *pidfd,
			 sbx_err *err)
{
	char runas[32];
	pid_t parent = getpid();
	pid_t pid;

	snprintf(runas, sizeof(runas), "%u:%u", (unsigned)geteuid(), (unsigned)getegid());
	pid = sbx_sys_clone3_fork(0, pidfd);
	if (pid < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "clone3: %s", strerror(errno));
	if (pid > 0)
		return pid;

	/* Child.  Dies with the caller (the kernel keeps the death signal over
	 * pasta's setns/capability drop as long as its euid stays the same,
	 * which --runas EUID ensures). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(124);
	/* Fixed fd numbers: 0 /dev/null, 1+2 the error memfd, 3 netns, 4 userns. */
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	int fds[3] = {errfd, netns_fd, userns_fd};
	int hi[3];
	for (int i = 0; i < 3; i++) {
		hi[i] = fds[i] >= 0 ? fcntl(fds[i], F_DUPFD, 10) : -1;
		if (fds[i] >= 0 && hi[i] < 0)
			_exit(126);
	}
	if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(hi[0], 1) < 0 || dup2(hi[0], 2) < 0 ||
	    dup2(hi[1], 3) < 0 || (hi[2] >= 0 && dup2(hi[2], 4) < 0))
		_exit(126);
	int keep[] = {0, 1, 2, 3, 4};
	sbx_close_fds_except(keep, hi[2] >= 0 ? 5 : 4);

	char *argv[32];
	int n = 0;
	argv[n++] = (char *)pasta;
	argv[n++] = (char *)"--config-net";
	argv[n++] = (char *)"--no-map-gw";
	argv[n++] = (char *)"-q";
	argv[n++] = (char *)"-f";
	argv[n++] = (char *)"-e";
	argv[n++] = (char *)"-t";
	argv[n++] = (char *)"none";
	argv[n++] = (char *)"-u";
	argv[n++] = (char *)"none";
	argv[n++] = (char *)"-T";
	argv[n++] = (char *)"none";
	argv[n++] = (char *)"-U";
	argv[n++] = (char *)"none";
	argv[n++] = (char *)"--runas";
	argv[n++] = runas;
	argv[n++] = (char *)"--netns";
	argv[n++] = (char *)"/proc/self/fd/3";
	if (hi[2] >= 0) {
		argv[n++] = (char *)"--userns";
		argv[n++] = (char *)"/proc/self/fd/4";
	} else {
		argv[n++] = (char *)"--netns-only";
	}
	argv[n] = NULL;
	char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
	execve(pasta, argv, envp);
	_exit(127);
}

static void reap(pid_t pid)
{
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* The nft named by SBX_TEST_NFT (tests only: a fake one that waits, or
 * fails: tests/unit/test_opennet.c), else Debian's. */
static const char *nft_exe(void)
{
	const char *test = getenv("SBX_TEST_NFT");
	if (test && *test)
		return access(test, X_OK) == 0 ? test : NULL;
	return find_exe(nft_paths);
}

/* The pasta named by SBX_TEST_PASTA (tests only: a fake one that is slow to
 * come up, or never does: tests/spec/server_loop_spec.lua), else Debian's. */
static const char *pasta_exe(void)
{
	const char *test = getenv("SBX_TEST_PASTA");
	if (test && *test)
		return access(test, X_OK) == 0 ? test : NULL;
	const char *p = find_exe(pasta_paths);
#if defined(__x86_64__)
	/* pasta execs its AVX2 build itself where the CPU has AVX2: a second
	 * exec and dynamic link (~1-2 ms of the open); start that one. */
	static char avx2[64];
	if (p && __builtin_cpu_supports("avx2") &&
	    snprintf(avx2, sizeof(avx2), "%s.avx2", p) < (int)sizeof(avx2) &&
	    access(avx2, X_OK) == 0)
		return avx2;
#endif
	return p;
}

/* Start pasta and its readiness watcher, for the families of the host's
 * default routes (host_routes: default_routes()). */
static int start_connect(sbx_opennet *on, int host_routes, sbx_err *err)
{
	int need = host_routes & 1 ? 1 : host_routes, rfd = -1;

	on->pid = start_pasta(on->pasta, on->userns_fd, on->netns_fd, on->errfd, &on->pidfd, err);
	if (on->pid < 0) {
		on->pid = 0;
		return -1;
	}
	on->watcher = start_watcher(on, need, host_routes & ~need, &rfd, err);
	if (on->watcher < 0) {
		on->watcher = 0;
		return -1;
	}
	on->watch_fd = rfd;
	return 0;
}

/* The watcher's pipe is readable: 0 when it says ready, else -1 naming why
 * pasta is not (it exited, with its output; or it never configured the
 * namespace). */
static int pasta_done(sbx_opennet *on, sbx_err *err)
{
	struct pollfd p = {.fd = on->pidfd, .events = POLLIN};
	char c, msg[512];
	const char *why;

	ssize_t n = read(on->watch_fd, &c, 1);

	/* The watcher has spoken (or ended): done with it either way. */
	reap(on->watcher);
	on->watcher = 0;
	unwatch(on, &on->watch_fd);
	if (n == 1)
		return 0;
	why = poll(&p, 1, 0) > 0
		      ? "pasta exited"
		      : "pasta did not configure the namespace in time (no default route)";
	read_text(on->errfd, msg, sizeof(msg));
	return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0, "network_mode \"open\": %s: %s", why,
			   msg[0] ? msg : "no output");
}

/* Free what only the start needs: nft and the watcher (killed if still
 * there), the logs, the epoll, our copies of the namespaces. */
static void end_start(sbx_opennet *on)
{
	if (!on->starting)
		return;
	pid_t *kids[] = {&on->nft_pid, &on->watcher};
	for (size_t i = 0; i < sizeof(kids) / sizeof(kids[0]); i++) {
		if (*kids[i] > 0) {
			kill(*kids[i], SIGKILL);
			reap(*kids[i]);
		}
		*kids[i] = 0;
	}
	int *fds[] = {&on->nft_fd, &on->watch_fd,  &on->wait_fd, &on->nft_log,
		      &on->errfd,  &on->userns_fd, &on->netns_fd};
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
	on->starting = false;
}

void sbx_opennet_init(sbx_opennet *on)
{
	memset(on, 0, sizeof(*on));
	on->pidfd = on->nft_fd = on->watch_fd = on->wait_fd = -1;
	on->nft_log = on->errfd = on->userns_fd = on->netns_fd = -1;
}

/* The epoll callers wait on: readable when nft has exited or the watcher
 * has spoken. */
static int watch_both(sbx_opennet *on, sbx_err *err)
{
	int fds[] = {on->nft_fd, on->watch_fd};

	on->wait_fd = epoll_create1(EPOLL_CLOEXEC);
	if (on->wait_fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "epoll_create1: %s",
				   strerror(errno));
	for (size_t i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
		if (epoll_ctl(on->wait_fd, EPOLL_CTL_ADD, fds[i], &ev) < 0)
			return sbx_err_set(err, SBX_E_EXECUTION, errno, "epoll_ctl: %s",
					   strerror(errno));
	}
	return 0;
}

int sbx_opennet_begin(sbx_opennet *on, int userns_fd, int netns_fd, const char *const *deny,
		      sbx_err *err)
{
	struct rules r = {0};
	int rc = -1, host_routes;

	sbx_opennet_init(on);
	if (netns_fd < 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "open network: no network namespace");
	on->starting = true;

	/* 1. The ruleset: a malformed deny-list fails first, whatever the machine. */
	r.buf = malloc(OPENNET_RULES_MAX);
	if (!r.buf)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
	if (rules_build(&r, deny, err) < 0)
		goto done;

	/* 2. The tools, or a message saying what to install. */
	on->nft = nft_exe();
	on->pasta = pasta_exe();
	if (!on->nft || !on->pasta) {
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
			    "network_mode \"open\" needs %s: apt-get install %s",
			    on->nft ? "pasta" : "nft", on->nft ? "passt" : "nftables");
		goto done;
	}
	/* pasta opens /dev/net/tun as the caller: Debian makes it 0666, some
	 * machines 0600 (then only root can). */
	if (access("/dev/net/tun", R_OK | W_OK) < 0) {
		int e = errno;
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, e,
			    "network_mode \"open\": pasta needs /dev/net/tun, which uid %u cannot "
			    "open (%s): as root, chmod 0666 /dev/net/tun (the Debian default) "
			    "or modprobe tun",
			    (unsigned)geteuid(), strerror(e));
		goto done;
	}
	host_routes = default_routes();
	if (!host_routes) {
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
			    "network_mode \"open\": the host has no default route (pasta needs "
			    "one)");
		goto done;
	}
	on->nft_log = memfd_create("sbx-nft-log", MFD_CLOEXEC);
	on->errfd = memfd_create("sbx-opennet-log", MFD_CLOEXEC);
	on->netns_fd = fcntl(netns_fd, F_DUPFD_CLOEXEC, 3);
	on->userns_fd = userns_fd >= 0 ? fcntl(userns_fd, F_DUPFD_CLOEXEC, 3) : -1;
	if (on->nft_log < 0 || on->errfd < 0 || on->netns_fd < 0 ||
	    (userns_fd >= 0 && on->userns_fd < 0)) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "open network: %s", strerror(errno));
		goto done;
	}
	/* 3. The deny rules and pasta at once (see the top of the file). */
	on->deadline = now_ms() + SBX_OPEN_NETWORK_READY_TIMEOUT_MS;
	if (start_nft(on, on->nft, &r, err) < 0 || start_connect(on, host_routes, err) < 0 ||
	    watch_both(on, err) < 0)
		goto done;
	rc = 0;
done:
	free(r.buf);
	if (rc < 0)
		sbx_opennet_stop(on);
	return rc;
}

int sbx_opennet_wait_fd(const sbx_opennet *on)
{
	return on->starting ? on->wait_fd : -1;
}

int sbx_opennet_step(sbx_opennet *on, int timeout_ms, sbx_err *err)
{
	while (on->starting) {
		struct pollfd p[2];
		nfds_t np = 0;
		int64_t left = on->deadline - now_ms();
		int n;

		if (on->nft_fd >= 0)
			p[np++] = (struct pollfd){.fd = on->nft_fd, .events = POLLIN};
		if (on->watch_fd >= 0)
			p[np++] = (struct pollfd){.fd = on->watch_fd, .events = POLLIN};
		if (np == 0) {
			/* The rules are in and pasta has configured the namespace. */
			end_start(on);
			break;
		}
		if (left <= 0) {
			sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, ETIMEDOUT,
				    "network_mode \"open\": %s did not finish within %d ms",
				    on->nft_fd >= 0 ? "nft" : "pasta",
				    SBX_OPEN_NETWORK_READY_TIMEOUT_MS);
			goto fail;
		}
		n = poll(p, np, timeout_ms < 0 || timeout_ms > left ? (int)left : timeout_ms);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			sbx_err_set(err, SBX_E_EXECUTION, errno, "poll: %s", strerror(errno));
			goto fail;
		}
		if (n == 0 && timeout_ms >= 0 && now_ms() < on->deadline)
			return 1;
		for (nfds_t i = 0; i < np; i++) {
			if (!p[i].revents)
				continue;
			if (p[i].fd == on->nft_fd ? nft_done(on, err) < 0 : pasta_done(on, err) < 0)
				goto fail;
		}
	}
	return 0;
fail:
	sbx_opennet_stop(on);
	return -1;
}

int sbx_opennet_start(sbx_opennet *on, int userns_fd, int netns_fd, const char *const *deny,
		      sbx_err *err)
{
	if (sbx_opennet_begin(on, userns_fd, netns_fd, deny, err) < 0)
		return -1;
	return sbx_opennet_step(on, -1, err);
}

static void stop(sbx_opennet *on, bool wait)
{
	if (!on)
		return;
	end_start(on);
	if (on->pid <= 0)
		return;
	if (on->pidfd >= 0) {
		sbx_sys_pidfd_send_signal(on->pidfd, SIGKILL);
		close(on->pidfd);
	} else {
		kill(on->pid, SIGKILL);
	}
	/* Killed, it can forward nothing more; what is left is its exit
	 * (the tap device's teardown), which need not be the caller's wait. */
	if (wait)
		reap(on->pid);
	else
		sbx_reap_later(on->pid);
	on->pid = 0;
	on->pidfd = -1;
}

void sbx_opennet_stop(sbx_opennet *on)
{
	stop(on, true);
}

void sbx_opennet_stop_nowait(sbx_opennet *on)
{
	stop(on, false);
}

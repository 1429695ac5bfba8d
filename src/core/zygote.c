/*
 * zygote.c: the session's resident process, PID 1 of its namespaces.
 *
 * Building namespaces and a root filesystem costs milliseconds; forking a
 * process that already sits inside them costs tens of microseconds.  The
 * zygote is that process.  It keeps runs ready ahead of time: each an
 * sbx-init in a fresh PID + mount namespace whose mounts are made and whose
 * workload has already dropped every privilege.  It offers that warm init
 * to the host (its pidfd and the socket the request goes to), and starts
 * the next one when the host says it took an offer (warm_runs of them
 * stay outstanding), so the zygote is off the path of a run.  It reaps
 * what exits, and ends when the host closes the control socket, dies, or
 * the session's lifetime passes (then it offers no more runs, and waits out
 * the grace the runs' inits give their commands between SIGTERM and
 * SIGKILL: init.c); as PID 1 of
 * the session's PID namespace its end is the end of every process in it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Offer a warm init to the host: pidfd and request socket travel as
 * SCM_RIGHTS; err_no != 0 says why there is none.  An offer whose fds the
 * kernel refuses to carry (ETOOMANYREFS past SBX_ZYGOTE_SEND_WAIT_MS: more
 * fds in flight from our uid, shared by every session's zygote, than our
 * RLIMIT_NOFILE; ENOMEM) is offered as that failure, never dropped: the
 * host counts on one answer per want, and would otherwise wait for a run
 * that never comes. */
static void offer(int ctl, int err_no, pid_t pid, int pidfd, int sock, sbx_net mode)
{
	struct sbx_proto_offer off;
	int fds[2] = {pidfd, sock};

	memset(&off, 0, sizeof(off));
	off.magic = SBX_PROTO_MAGIC;
	off.err_no = err_no;
	off.pid = pid;
	off.mode = mode;
	if (sbx_zygote_send_fds(ctl, &off, sizeof(off), fds, err_no ? 0 : 2) == 0 || err_no)
		return;
	off.err_no = errno ? errno : EIO;
	(void)sbx_proto_send_fds(ctl, &off, sizeof(off), NULL, 0);
}

/* Start a warm init and offer it; the zygote keeps no copy of its fds, so
 * the host closing the socket unused ends it. */
static void warm_offer(const struct sbx_zygote_cfg *cfg, sbx_net mode)
{
	int sp[2], pidfd = -1, listener = -1;
	bool own = (uint32_t)mode == SBX_NET_OWN;
	/* A namespace of its own only where the session has an allowlist
	 * proxy to serve its listener. */
	int ns = mode < SBX_NET_NMODES ? cfg->netns_fd[mode]
				       : (own ? cfg->netns_fd[SBX_NET_ALLOWLIST] : -1);

	if (ns < 0) {
		offer(cfg->ctl_fd, ENETUNREACH, 0, -1, -1, mode);
		return;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
		offer(cfg->ctl_fd, errno, 0, -1, -1, mode);
		return;
	}
	/* The init is born in the mode's namespace: we step into it for the
	 * clone and back out (cheaper and simpler than the child doing it,
	 * and a failure is ours to report).  SBX_NET_OWN: a new one, whose
	 * listener goes to the host ahead of anything the init says. */
	if (own) {
		sbx_err err;
		int e = 0;
		if (sbx_netns_own(cfg->proxy_port, &listener, &err) < 0)
			e = err.sys_errno ? err.sys_errno : EIO;
		else if (sbx_proto_send_fds(sp[1], "L", 1, &listener, 1) != 0)
			e = errno;
		if (e) {
			if (listener >= 0)
				close(listener);
			if (setns(cfg->netns_fd[SBX_NET_BLOCKED], CLONE_NEWNET) != 0)
				_exit(1);
			offer(cfg->ctl_fd, e, 0, -1, -1, mode);
			close(sp[0]);
			close(sp[1]);
			return;
		}
	} else if (mode != SBX_NET_BLOCKED && setns(ns, CLONE_NEWNET) != 0) {
		offer(cfg->ctl_fd, errno, 0, -1, -1, mode);
		close(sp[0]);
		close(sp[1]);
		return;
	}
	/* With a memory ceiling the OOM killer must take a running command
	 * first, an idle warm run next, and never the session.  A running
	 * command has oom_score_adj 1000 (the host raises it when it takes
	 * the run: sbx_cgroup_run_claim); each init (and so its workload) is
	 * born with 500, which still outweighs any size the zygote can have
	 * within the ceiling: memory held by what is no process (a dead
	 * run's tmpfs being freed) then costs an idle run, which the host
	 * replaces, not the session.  Raising needs no privilege, and going
	 * back down to where we started (0, the lower bound) needs none. */
	if (cfg->oom_fd >= 0)
		(void)!pwrite(cfg->oom_fd, "500", 3, 0);
	/* At the session's pids ceiling keep trying for a while before
	 * offering the failure, or a run that starts after a fork bomb ended
	 * would get it. */
	pid_t pid;
	int tries = 0;
	while ((pid = sbx_sys_clone3_fork(CLONE_NEWPID | CLONE_NEWNS, &pidfd)) < 0 &&
	       sbx_sys_fork_retry(&tries))
		;
	int clone_errno = errno;
	if (cfg->oom_fd >= 0 && pid != 0)
		(void)!pwrite(cfg->oom_fd, cfg->oom_adj, strlen(cfg->oom_adj), 0);
	/* Should we fail to step back, the zygote must not offer runs in the
	 * wrong namespace: dying ends the session, which is what it is. */
	if (pid != 0 && mode != SBX_NET_BLOCKED &&
	    setns(cfg->netns_fd[SBX_NET_BLOCKED], CLONE_NEWNET) != 0)
		_exit(1);
	if (pid == 0) {
		close(sp[0]);
		sbx_init_main(cfg, sp[1]);
	}
	close(sp[1]);
	if (listener >= 0)
		close(listener);
	offer(cfg->ctl_fd, pid < 0 ? clone_errno : 0, pid, pidfd, sp[0], mode);
	close(sp[0]);
	if (pidfd >= 0)
		close(pidfd);
}

/* After the session's end, the runs' inits get their commands' grace and
 * this much more to report before the zygote's own end kills them. */
#define EXPIRE_REPORT_MS 2000

/* ms until the next lifetime step (-1: none): until the end, then until
 * the end of the grace; past that the zygote ends. */
static int lifetime_wait(const struct sbx_zygote_cfg *cfg, bool *expired)
{
	if (!cfg->expire_at_ms)
		return -1;
	uint64_t now = sbx_monotonic_ms();
	*expired = now >= cfg->expire_at_ms;
	uint64_t until = cfg->expire_at_ms;
	if (*expired)
		until += (uint64_t)cfg->expire_grace_ms + EXPIRE_REPORT_MS;
	if (now >= until)
		_exit(0);
	return until - now > INT32_MAX ? INT32_MAX : (int)(until - now);
}

void sbx_zygote_main(const struct sbx_zygote_cfg *given)
{
	sigset_t mask;
	/* Ours to change: a spare's take sets the session's end. */
	struct sbx_zygote_cfg own = *given;
	struct sbx_zygote_cfg *cfg = &own;

	prctl(PR_SET_NAME, "sbx-zygote");
	prctl(PR_SET_DUMPABLE, 0);
	/* Every init is born with the signals it forwards blocked: a signal
	 * the host sends to a new PID namespace's init before it blocks them
	 * itself would meet the default handler, which the kernel ignores for
	 * a namespace init, and be lost. */
	sigset_t forwarded;
	sigemptyset(&forwarded);
	for (int sig = 1; sig < 32; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		/* Whatever the host ignored (SIGPIPE, often) must not stay
		 * ignored in the workload: SIG_IGN survives exec. */
		signal(sig, SIG_DFL);
		sigaddset(&forwarded, sig);
	}
	sigprocmask(SIG_BLOCK, &forwarded, NULL);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	/* A child that ended before SIGCHLD was blocked (the network
	 * namespace's, zygote_setup.c) said so to nobody. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;

	/* Each offer the host takes asks for one more, so as many stay
	 * outstanding as were made here. */
	for (uint32_t i = 0; i < cfg->warm_runs; i++)
		warm_offer(cfg, cfg->warm_mode);
	for (;;) {
		struct pollfd pfd[2] = {{cfg->ctl_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
		bool expired = false;
		int timeout = lifetime_wait(cfg, &expired);
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
			_exit(1);
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == sizeof(si))
				;
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
		}
		if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			union {
				struct sbx_proto_want want;
				struct sbx_proto_expire exp;
			} m;
			struct sbx_proto_want want;
			ssize_t n = recv(cfg->ctl_fd, &m, sizeof(m), 0);
			if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
				_exit(0);
			/* A spare taken: its end from now on (inits started
			 * from here on enforce it too). */
			if (n == sizeof(m.exp) && m.exp.magic == SBX_PROTO_MAGIC &&
			    m.exp.kind == SBX_PROTO_EXPIRE) {
				cfg->expire_at_ms = m.exp.expire_at_ms;
				cfg->lifetime_ms = m.exp.lifetime_ms;
				cfg->expire_grace_ms = m.exp.expire_grace_ms;
				continue;
			}
			memcpy(&want, &m, sizeof(want));
			/* The host took the last offer, or turned it down
			 * (found it dead, or of another mode). */
			if (n == sizeof(want) && want.magic == SBX_PROTO_MAGIC && !expired)
				warm_offer(cfg, (sbx_net)want.mode);
		}
	}
}

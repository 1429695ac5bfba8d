/*
 * placer.c: a memory-limited session's warm runs, each put in a cgroup of
 * its own as the zygote offers it, off the path of a run.
 *
 * Each run of such a session has its own memory cgroup (cgroup.c), and
 * the run's cgroup namespace must be rooted there, so the init must be in
 * it before it forks the workload and unshares (init.c waits for "P").
 * The host alone may write the cgroupfs, and a library has no loop of its
 * own between runs, so a thread per session does it: it reads the
 * zygote's offers from the control socket, places each init
 * (sbx_cgroup_run_place: a spare cgroup or a mkdir, and one migration),
 * says "P" to it, and hands the offer with its cgroup on to take_warm
 * (session.c) through a socketpair.  take_warm reads only from there, so
 * it never hands out an unplaced run: it waits for the placement as it
 * waited for the offer.  A placement that failed goes on as the offer's
 * error (ESRCH: the init died, the run takes another).
 *
 * The thread allocates nothing (a fork or clone elsewhere in the host may
 * copy the process while it runs), and ends when the zygote closes the
 * control socket or the session stops it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

struct sbx_placer {
	pthread_t thread;
	const sbx_cgroup *cg; /* the session's: it outlives us (stop first) */
	int ctl_fd;	      /* the zygote's offers (read here only) */
	int out[2];	      /* placed offers: [1] written here, [0] read by take */
	int stop[2];	      /* a pipe: writing [1] ends the thread */
};

/* Wait until fd is ready for ev, or the session stops us (false). */
static bool wait_for(struct sbx_placer *p, int fd, short ev)
{
	for (;;) {
		struct pollfd pfd[2] = {{fd, ev, 0}, {p->stop[0], POLLIN, 0}};
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (pfd[1].revents)
			return false;
		if (pfd[0].revents)
			return true;
	}
}

static void *placer_main(void *arg)
{
	struct sbx_placer *p = arg;
	struct sbx_placed pl;
	int fds[2];
	size_t nfds;

	while (wait_for(p, p->ctl_fd, POLLIN)) {
		memset(&pl, 0, sizeof(pl));
		ssize_t n = sbx_proto_recv_fds(p->ctl_fd, &pl.off, sizeof(pl.off), fds, 2, &nfds);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break; /* the zygote is gone: take sees the end */
		if (n != sizeof(pl.off) || pl.off.magic != SBX_PROTO_MAGIC || nfds != 2) {
			/* Fds missing from a whole offer: the kernel dropped
			 * them at our open-files limit (MSG_CTRUNC). */
			int e = n == sizeof(pl.off) && pl.off.magic == SBX_PROTO_MAGIC ? EMFILE
										       : EPROTO;
			pl.off.magic = SBX_PROTO_MAGIC;
			pl.off.err_no = pl.off.err_no ? pl.off.err_no : e;
		}
		if (pl.off.err_no == 0) {
			sbx_err err;
			memset(&err, 0, sizeof(err));
			if (sbx_cgroup_run_place(p->cg, fds[0], &pl.rc, &err) < 0) {
				pl.place_errno = err.sys_errno ? err.sys_errno : EIO;
				snprintf(pl.msg, sizeof(pl.msg), "%.250s", err.msg);
			} else if (send(fds[1], "P", 1, MSG_NOSIGNAL) != 1) {
				/* Its socket is gone: so is the init. */
				sbx_cgroup_run_kill(&pl.rc);
				sbx_cgroup_run_remove(&pl.rc);
				pl.place_errno = ESRCH;
				snprintf(pl.msg, sizeof(pl.msg), "the run's init is gone");
			}
		}
		bool sent = wait_for(p, p->out[1], POLLOUT) &&
			    sbx_proto_send_fds(p->out[1], &pl, sizeof(pl), fds, nfds) == 0;
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		if (!sent) {
			sbx_cgroup_run_kill(&pl.rc);
			sbx_cgroup_run_remove(&pl.rc);
			break;
		}
	}
	/* take reads EOF once what we placed is taken. */
	shutdown(p->out[1], SHUT_WR);
	return NULL;
}

sbx_placer *sbx_placer_start(int ctl_fd, const sbx_cgroup *cg, sbx_err *err)
{
	struct sbx_placer *p = calloc(1, sizeof(*p));
	if (!p)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory"), NULL;
	p->cg = cg;
	p->ctl_fd = ctl_fd;
	p->out[0] = p->out[1] = p->stop[0] = p->stop[1] = -1;
	/* Room for every warm run's placed offer at once. */
	int room = (int)sizeof(struct sbx_placed) * (SBX_MAX_WARM_RUNS + 4);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p->out) != 0 ||
	    pipe2(p->stop, O_CLOEXEC) != 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "placer: %s", strerror(errno));
		goto fail;
	}
	(void)setsockopt(p->out[1], SOL_SOCKET, SO_SNDBUF, &room, sizeof(room));
	/* Signals go to the caller's threads, not this one. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&p->thread, NULL, placer_main, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		sbx_err_set(err, SBX_E_EXECUTION, rc, "placer thread: %s", strerror(rc));
		goto fail;
	}
	return p;
fail:
	for (int i = 0; i < 2; i++) {
		if (p->out[i] >= 0)
			close(p->out[i]);
		if (p->stop[i] >= 0)
			close(p->stop[i]);
	}
	free(p);
	return NULL;
}

int sbx_placer_fd(const sbx_placer *p)
{
	return p->out[0];
}

ssize_t sbx_placer_recv(sbx_placer *p, struct sbx_placed *pl, int fds[2], size_t *nfds)
{
	memset(pl, 0, sizeof(*pl));
	ssize_t n = sbx_proto_recv_fds(p->out[0], pl, sizeof(*pl), fds, 2, nfds);
	if (n > 0 && n != (ssize_t)sizeof(*pl)) {
		/* Cannot happen (one process, one struct): refuse it whole. */
		for (size_t i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		memset(pl, 0, sizeof(*pl));
		pl->off.err_no = EPROTO;
	}
	return n;
}

void sbx_placer_stop(sbx_placer *p)
{
	struct sbx_placed pl;
	int fds[2];
	size_t nfds;

	if (!p)
		return;
	(void)!write(p->stop[1], "x", 1);
	pthread_join(p->thread, NULL);
	/* What was placed and never taken: its init is gone with the zygote
	 * (or goes as its socket closes); its cgroup goes too. */
	/* (The thread shut its end down: this ends at EOF.) */
	while (sbx_proto_recv_fds(p->out[0], &pl, sizeof(pl), fds, 2, &nfds) > 0) {
		for (size_t i = 0; i < nfds; i++)
			close(fds[i]);
		sbx_cgroup_run_kill(&pl.rc);
		sbx_cgroup_run_remove(&pl.rc);
	}
	for (int i = 0; i < 2; i++) {
		close(p->out[i]);
		close(p->stop[i]);
	}
	free(p);
}

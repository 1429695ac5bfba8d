/*
 * zygote.c: the session's resident process, PID 1 of its namespaces.
 *
 * Building namespaces and a root filesystem costs milliseconds; forking a
 * process that already sits inside them costs tens of microseconds.  The
 * zygote is that process: it waits on the control socket, clones one
 * sbx-init into a fresh PID + mount namespace ahead of each request (so the
 * run's mounts and privilege drop are paid while the session is idle),
 * passes the request on to it, answers with the init's pidfd and reaps what
 * exits.  It ends when the host closes the
 * socket, dies, or the session's lifetime passes; as PID 1 of the session's
 * PID namespace, its end is the end of every process in the session.
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

static void reply(int ctl, int err_no, pid_t pid, int pidfd, const char *msg)
{
	struct sbx_proto_reply rep;
	struct msghdr mh;
	struct iovec iov = {&rep, sizeof(rep)};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;

	memset(&rep, 0, sizeof(rep));
	rep.magic = SBX_PROTO_MAGIC;
	rep.err_no = err_no;
	rep.pid = pid;
	if (msg)
		strncpy(rep.msg, msg, sizeof(rep.msg) - 1);
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (pidfd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pidfd, sizeof(int));
	}
	while (sendmsg(ctl, &mh, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/* The next run's init, started ahead of its request. */
struct warm {
	pid_t pid;
	int pidfd;
	int sock;
};

static void warm_drop(struct warm *w)
{
	if (w->sock >= 0)
		close(w->sock);
	if (w->pidfd >= 0)
		close(w->pidfd);
	w->pid = -1;
	w->sock = w->pidfd = -1;
}

static void warm_start(const struct sbx_zygote_cfg *cfg, struct warm *w)
{
	int sp[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
		return;
	pid_t pid = sbx_sys_clone3_fork(CLONE_NEWPID | CLONE_NEWNS, &w->pidfd);
	if (pid == 0) {
		close(sp[0]);
		sbx_init_main(cfg, sp[1]);
	}
	close(sp[1]);
	if (pid < 0) {
		close(sp[0]);
		w->pidfd = -1;
		return;
	}
	w->pid = pid;
	w->sock = sp[0];
}

/* Hand the request to the warm init (starting one if there is none, or
 * again if the one we had died), answer the host with its pidfd. */
static void start_run(const struct sbx_zygote_cfg *cfg, struct warm *w,
		      const struct sbx_proto_run *req, const char *payload, int fds[4])
{
	int err_no = 0;

	for (int attempt = 0; attempt < 2; attempt++) {
		if (w->pid < 0)
			warm_start(cfg, w);
		if (w->pid < 0) {
			err_no = errno;
			break;
		}
		if (sbx_proto_send_run(w->sock, req, payload, fds) == 0) {
			reply(cfg->ctl_fd, 0, w->pid, w->pidfd, NULL);
			err_no = 0;
			break;
		}
		err_no = errno;
		kill(w->pid, SIGKILL);
		warm_drop(w);
	}
	if (err_no)
		reply(cfg->ctl_fd, err_no, 0, -1, "start the run's init");
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	/* The warm init now belongs to this run; the zygote still reaps it. */
	warm_drop(w);
}

void sbx_zygote_main(const struct sbx_zygote_cfg *cfg)
{
	static char payload[SBX_PROTO_MAX_PAYLOAD];
	struct sbx_proto_run req;
	sigset_t mask;
	int fds[4];
	struct timespec t0;
	struct warm w = {-1, -1, -1};

	prctl(PR_SET_NAME, "sbx-zygote");
	prctl(PR_SET_DUMPABLE, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	for (;;) {
		struct pollfd pfd[2] = {{cfg->ctl_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
		if (w.pid < 0)
			warm_start(cfg, &w);
		int timeout = -1;
		if (cfg->lifetime_ms) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			int64_t spent = (int64_t)(now.tv_sec - t0.tv_sec) * 1000 +
					(now.tv_nsec - t0.tv_nsec) / 1000000;
			if (spent >= (int64_t)cfg->lifetime_ms)
				_exit(0);
			timeout = (int)((int64_t)cfg->lifetime_ms - spent);
		}
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
			_exit(1);
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == sizeof(si))
				;
			pid_t p;
			while ((p = waitpid(-1, NULL, WNOHANG)) > 0)
				if (p == w.pid)
					warm_drop(&w);
		}
		if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			int rc = sbx_proto_recv_run(cfg->ctl_fd, &req, payload, fds);
			if (rc == 1)
				_exit(0);
			if (rc == 2)
				continue;
			if (rc < 0) {
				reply(cfg->ctl_fd, EINVAL, 0, -1, "malformed run request");
				continue;
			}
			start_run(cfg, &w, &req, payload, fds);
		}
	}
}

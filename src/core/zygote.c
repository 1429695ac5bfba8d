/*
 * zygote.c: the session's resident process, PID 1 of its namespaces.
 *
 * Building namespaces and a root filesystem costs milliseconds; forking a
 * process that already sits inside them costs tens of microseconds.  The
 * zygote is that process: it waits on the control socket, clones one
 * sbx-init per run request into a fresh PID + mount namespace, answers with
 * the init's pidfd and reaps what exits.  It ends when the host closes the
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

/* Receive one request; returns 0 on a request, 1 on EOF, -1 on garbage
 * (fds received with garbage are closed). */
static int receive(int ctl, struct sbx_proto_run *req, char *payload, int fds[4])
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov[2] = {{req, sizeof(*req)}, {payload, SBX_PROTO_MAX_PAYLOAD}};
	struct msghdr mh;
	int nfds = 0;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	ssize_t n = recvmsg(ctl, &mh, MSG_CMSG_CLOEXEC);
	if (n == 0)
		return 1;
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 2 : 1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int cnt = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < cnt; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (nfds < 4)
				fds[nfds++] = fd;
			else
				close(fd);
		}
	}
	if ((size_t)n < sizeof(*req) || req->magic != SBX_PROTO_MAGIC || nfds != 4 ||
	    req->payload_len != (size_t)n - sizeof(*req) || req->argc == 0 ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    (req->payload_len > 0 && payload[req->payload_len - 1] != '\0')) {
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return -1;
	}
	return 0;
}

static void start_run(const struct sbx_zygote_cfg *cfg, const struct sbx_proto_run *req,
		      const char *payload, int fds[4])
{
	int pidfd = -1;
	pid_t pid = sbx_sys_clone3_fork(CLONE_NEWPID | CLONE_NEWNS, &pidfd);

	if (pid == 0)
		sbx_init_main(cfg, fds, req, payload);
	for (int i = 0; i < 4; i++)
		close(fds[i]);
	if (pid < 0) {
		reply(cfg->ctl_fd, errno, 0, -1, "clone run namespaces failed");
		return;
	}
	reply(cfg->ctl_fd, 0, pid, pidfd, NULL);
	close(pidfd);
}

void sbx_zygote_main(const struct sbx_zygote_cfg *cfg)
{
	static char payload[SBX_PROTO_MAX_PAYLOAD];
	struct sbx_proto_run req;
	sigset_t mask;
	int fds[4];
	struct timespec t0;

	prctl(PR_SET_NAME, "sbx-zygote");
	prctl(PR_SET_DUMPABLE, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	for (;;) {
		struct pollfd pfd[2] = {{cfg->ctl_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
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
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
		}
		if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			int rc = receive(cfg->ctl_fd, &req, payload, fds);
			if (rc == 1)
				_exit(0);
			if (rc == 2)
				continue;
			if (rc < 0) {
				reply(cfg->ctl_fd, EINVAL, 0, -1, "malformed run request");
				continue;
			}
			start_run(cfg, &req, payload, fds);
		}
	}
}

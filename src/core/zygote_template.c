/*
 * zygote_template.c: the host's side of the zygote template.
 *
 * A zygote used to be a clone of the host (sbxlua, sbxd) that built the
 * session's root and then exec'd sbx-zygote, to leave the host's memory,
 * argv and environment behind.  Measured per cold open (perf, 300 opens):
 * copying the host's page tables at the clone, the copy-on-write faults
 * after it, freeing them at the exec, the exec itself and the new
 * program's start-up (glibc's cpuid probes: 13 us each in this VM) were
 * about a third of an open's CPU.  So each process starts the template
 * once: sbx-zygote run as "sbx-zygote template FD", a small process with
 * nothing of the host's, which clones each zygote on request
 * (zygote_setup.c) as a child of the host (CLONE_PARENT: the host reaps
 * it, writes its id maps and limits as before).  The template ends when
 * the host closes its end or dies (PR_SET_PDEATHSIG); a dead one is
 * started again at the next open.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "zygote_template.h"

/* One template per process (a forked host starts its own: the zygotes
 * must be children of the process that asks). */
static struct {
	pthread_mutex_t mu;
	int sock;
	pid_t pid;
	pid_t owner;
} T = {PTHREAD_MUTEX_INITIALIZER, -1, -1, -1};

/* Forget the template: close our end (it then ends) and reap it. */
static void stop_locked(void)
{
	if (T.sock >= 0)
		close(T.sock);
	if (T.pid > 0 && T.owner == getpid()) {
		kill(T.pid, SIGKILL);
		while (waitpid(T.pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	T.sock = -1;
	T.pid = -1;
	T.owner = -1;
}

static int start_locked(sbx_err *err)
{
	int sp[2];
	int image_fd = sbx_zygote_image_fd(err);
	pid_t me = getpid();

	if (image_fd < 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "socketpair: %s", strerror(errno));
	pid_t pid = sbx_sys_clone3_fork(0, NULL);
	if (pid < 0) {
		int e = errno;
		close(sp[0]);
		close(sp[1]);
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, e,
				   "start the zygote template: %s", strerror(e));
	}
	if (pid == 0) {
		/* Nothing of the host's but the image and our socket; no
		 * terminal (Ctrl-C to the host's group must not reach it). */
		int keep[2] = {image_fd, sp[1]};
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != me)
			_exit(1);
		sbx_close_fds_except(keep, 2);
		setsid();
		int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
		for (int i = 0; devnull >= 0 && i < 3; i++)
			dup2(devnull, i);
		if (devnull > 2)
			close(devnull);
		sbx_zygote_exec_template(image_fd, sp[1]);
		_exit(127);
	}
	close(sp[1]);
	T.sock = sp[0];
	T.pid = pid;
	T.owner = me;
	return 0;
}

/* Send one request and read its answer: the zygote's pid, 0 when the
 * template was gone before it got the request (start another and ask
 * again), -1 with err, or -2 with *clone_errno when the kernel refused
 * the clone.  A template that ends after taking the request may have
 * cloned a zygote holding this request's fds: that open fails (its
 * zygote, if any, waits for id maps that never come, and goes with the
 * session's close), and the next one starts another template. */
static pid_t ask_locked(uint64_t flags, const int *fds, size_t nfds, int *clone_errno, sbx_err *err)
{
	struct sbx_tpl_req req;
	struct sbx_tpl_reply rep;
	ssize_t n;

	memset(&req, 0, sizeof(req));
	req.magic = SBX_TPL_MAGIC;
	req.flags = flags;
	if (sbx_proto_send_fds(T.sock, &req, sizeof(req), fds, nfds) != 0) {
		if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
			return 0;
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "ask the zygote template: %s",
				   strerror(errno));
	}
	while ((n = recv(T.sock, &rep, sizeof(rep), 0)) < 0 && errno == EINTR)
		;
	if (n == 0 || (n < 0 && errno == ECONNRESET)) {
		stop_locked();
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, EPIPE,
				   "the zygote template ended while starting the sandbox");
	}
	if (n != (ssize_t)sizeof(rep) || rep.magic != SBX_TPL_MAGIC) {
		int e = n < 0 ? errno : EPROTO;
		stop_locked(); /* out of step with us: the next open starts another */
		return sbx_err_set(err, SBX_E_EXECUTION, e, "the zygote template answered garbage");
	}
	if (rep.pid <= 0) {
		*clone_errno = rep.err_no ? rep.err_no : EINVAL;
		return -2;
	}
	return rep.pid;
}

pid_t sbx_zygote_template_spawn(uint64_t flags, const struct sbx_zygote_spawn *sp, int *clone_errno,
				sbx_err *err)
{
	int fds[SBX_TPL_MAX_FDS];
	size_t nfds = 0;
	pid_t pid = -1;

	int blob = sbx_zygote_pack(sp, fds + 1, &nfds, SBX_TPL_MAX_FDS - 1, err);
	if (blob < 0)
		return -1;
	fds[0] = blob;
	nfds++;
	pthread_mutex_lock(&T.mu);
	/* Twice at most: a template that died (killed, or its host thread
	 * gone) is replaced once. */
	for (int tries = 0; tries < 2; tries++) {
		if (T.owner != getpid() || T.sock < 0) {
			if (T.owner != getpid() && T.sock >= 0)
				close(T.sock); /* our parent process's, inherited */
			if (T.owner == getpid())
				stop_locked();
			T.sock = -1;
			if (start_locked(err) < 0)
				break;
		}
		pid = ask_locked(flags, fds, nfds, clone_errno, err);
		if (pid != 0)
			break;
		stop_locked();
		pid = -1;
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, EPIPE,
			    "the zygote template ended, and so did the one started after it");
	}
	pthread_mutex_unlock(&T.mu);
	close(blob);
	return pid < 0 ? -1 : pid;
}

/*
 * backend_none.c: backend "none", and the half of backend "bubblewrap" it
 * shares: no zygote; the host forks each run's sbx-init itself, on demand,
 * into the session's cgroup, and reaps it.  At the session's lifetime each
 * run's init ends its own run (init.c); nothing else of the session lives.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "session_impl.h"

/* Reap the direct inits (backend "none") that have ended. */
void sbx_none_reap(sbx_session *s, bool wait_all)
{
	siginfo_t si;
	size_t k = 0;

	for (size_t i = 0; i < s->n_direct; i++) {
		int fd = s->direct_pidfds[i];
		if (wait_all)
			sbx_sys_pidfd_send_signal(fd, SIGKILL);
		memset(&si, 0, sizeof(si));
		int rc;
		while ((rc = waitid(P_PIDFD, (id_t)fd, &si, WEXITED | (wait_all ? 0 : WNOHANG))) <
			       0 &&
		       errno == EINTR)
			;
		if (rc < 0 || si.si_pid != 0) {
			close(fd);
			continue;
		}
		s->direct_pidfds[k++] = fd;
	}
	s->n_direct = k;
}

/* Close the idmapped copies made for a run (the child has its own). */
static void drop_idmap(sbx_session *s)
{
	for (size_t i = 0; i < s->direct.n_idmap; i++)
		close(s->direct.idmap_fd[i]);
	s->direct.n_idmap = 0;
}

/* bubblewrap as root: a fresh idmapped copy of each read_write_path that
 * needs one and of a pinned work dir, for this run's workload to attach
 * (idmap.c).  0, or -1. */
static int make_idmap(sbx_session *s, sbx_err *err)
{
	s->direct.n_idmap = 0;
	for (size_t i = 0; s->direct.bwrap_argv && i < s->fs.n; i++) {
		if (s->fs.e[i].idmap_ns < 0 || s->direct.n_idmap == SBX_MAX_CARRY)
			continue;
		int fd = sbx_idmap_tree(&s->fs.e[i], err);
		if (fd < 0) {
			drop_idmap(s);
			return -1;
		}
		s->direct.idmap_fd[s->direct.n_idmap] = fd;
		s->direct.idmap_stage[s->direct.n_idmap] = false;
		s->direct.idmap_path[s->direct.n_idmap++] = s->fs.e[i].src;
	}
	/* A pinned work dir: this run's copy over the stage (session.c). */
	if (s->direct.bwrap_argv && s->work_stage[0] && s->direct.n_idmap < SBX_MAX_CARRY) {
		int fd = sbx_idmap_copy("work_dir", s->work_dir, s->work_fd, s->work_ns, err);
		if (fd < 0) {
			drop_idmap(s);
			return -1;
		}
		s->direct.idmap_fd[s->direct.n_idmap] = fd;
		s->direct.idmap_stage[s->direct.n_idmap] = true;
		s->direct.idmap_path[s->direct.n_idmap++] = s->work_stage;
	}
	return 0;
}

/* Backend "none": the host forks the run's init itself, on demand (the
 * mode is always blocked; rc stays empty: the run cgroup comes later). */
int sbx_none_take(sbx_session *s, sbx_net mode, int *sock, int *pidfd, sbx_run_cgroup *rc,
		  sbx_err *err)
{
	int sp[2], own = -1;

	(void)mode;
	(void)rc;
	if (sbx_session_expired(s))
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, 0,
				   "the session's lifetime has passed");
	sbx_none_reap(s, false);
	if (s->n_direct >= MAX_DIRECT)
		return sbx_err_set(err, SBX_E_EXECUTION, EAGAIN,
				   "backend none: more than %d runs at once", MAX_DIRECT);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "socketpair: %s", strerror(errno));
	if (make_idmap(s, err) < 0) {
		close(sp[0]);
		close(sp[1]);
		return -1;
	}
	/* The child is born with every signal blocked, so one the caller
	 * sends right after the start waits for init's signalfd instead of
	 * killing it (the zygote does the same for the native backends). */
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid_t pid = sbx_sys_clone3_fork(0, &own);
	if (pid != 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		drop_idmap(s);
	}
	if (pid < 0) {
		close(sp[0]);
		close(sp[1]);
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		close(sp[0]);
		/* Nothing the host set up (handlers, ignored signals) may
		 * reach the run; init blocks what it forwards itself. */
		for (int sig = 1; sig < 65; sig++)
			if (sig != SIGKILL && sig != SIGSTOP)
				signal(sig, SIG_DFL);
		/* Out of the caller's session and group: its terminal's
		 * Ctrl-C must not reach the run's init. */
		setsid();
		/* Into the session's cgroup before anything runs; then say
		 * so, or a run cgroup the host makes next would lose us. */
		if (s->cg.version && (sbx_cgroup_attach(&s->cg, getpid(), NULL) < 0 ||
				      send(sp[1], "c", 1, MSG_NOSIGNAL) != 1))
			_exit(1);
		sbx_init_main(&s->direct, sp[1]);
	}
	close(sp[1]);
	s->direct_pidfds[s->n_direct++] = own;
	char c;
	ssize_t got = 1;
	while (s->cg.version && (got = recv(sp[0], &c, 1, 0)) < 0 && errno == EINTR)
		;
	if (got != 1) {
		close(sp[0]);
		return sbx_err_set(err, SBX_E_EXECUTION, EIO,
				   "backend none: the run could not join the session's cgroup");
	}
	*pidfd = fcntl(own, F_DUPFD_CLOEXEC, 3);
	*sock = sp[0];
	if (*pidfd < 0) {
		close(*sock);
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "dup: %s", strerror(errno));
	}
	return 0;
}

/* Nothing resident: alive until the lifetime (session.c checks it), which
 * each run's init enforces on its own run (init.c). */
bool sbx_none_alive(sbx_session *s)
{
	(void)s;
	return true;
}

void sbx_none_stop(sbx_session *s)
{
	sbx_none_reap(s, true);
}

/* backend "none": no zygote; each run's init is forked by the host. */
int sbx_none_start(sbx_session *s, const sbx_session_opts *o)
{
	memset(&s->direct, 0, sizeof(s->direct));
	s->direct.none = true;
	s->direct.oom_fd = -1;
	s->direct.memory_limited = s->cg.oom_path[0] != '\0';
	s->direct.host_work_dir = s->work_dir;
	s->direct.uid = geteuid();
	s->direct.gid = getegid();
	s->direct.nofile = sbx_session_run_nofile(o);
	s->direct.fsize = o->fsize_bytes;
	s->direct.lifetime_ms = o->lifetime_ms;
	s->direct.expire_at_ms = s->expire_at_ms;
	s->direct.expire_grace_ms = s->expire_grace_ms;
	s->direct.userns_fd = -1;
	for (int i = 0; i < SBX_FS_MAX_DATA; i++)
		s->direct.bwrap_data_fd[i] = -1;
	return 0;
}

/* Backend "none": nothing resident; each run's init is forked on demand. */
int sbx_none_backend_start(sbx_session *s, const sbx_session_opts *o, struct sock_fprog **prog,
			   sbx_err *err)
{
	(void)prog;
	(void)err;
	sbx_none_start(s, o);
	return 0;
}

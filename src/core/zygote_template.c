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
 *
 * The kernel sends a parent-death signal when the parent *thread* ends,
 * and a CLONE_PARENT child's parent is the template's parent thread: had
 * the template been the child of whichever thread opened first, that
 * thread's end (a short-lived worker, a pool's thread) would kill the
 * template and every zygote that keeps its signal (privileged: host root,
 * no change of uid to clear it), so sessions opened by any other thread
 * too.  So a thread of ours, which lives as long as the process and does
 * nothing else, starts each template (tests/unit/test_template_thread.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
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

/* The thread whose children the templates are (see above), under T.mu:
 * an opener sets want with the fds, it clones and sets done. */
static struct {
	pthread_cond_t cv;
	pid_t owner; /* the process the thread runs in */
	bool want, done;
	int image_fd, sock; /* the request */
	pid_t pid;	    /* the answer: the template, or -1 with err_no */
	int err_no;
} P = {PTHREAD_COND_INITIALIZER, -1, false, false, -1, -1, -1, 0};

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

/* The template's side of the clone: nothing of the host's but the
 * image and its socket, then the exec. */
static __attribute__((noreturn)) void template_child(int image_fd, int sock, pid_t host)
{
	int keep[2] = {image_fd, sock};
	sigset_t none;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != host)
		_exit(1);
	sbx_close_fds_except(keep, 2);
	/* Not the parent thread's mask (ours blocks everything), and not the
	 * host's working directory, which the template would otherwise keep
	 * busy for as long as it lives. */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (chdir("/") != 0)
		_exit(1);
	/* Nor the host's umask: the root's dirs are made with it (077 made
	 * /etc's unreadable to the workload), and a run starts with it. */
	umask(022);
	/* Nor the host's OOM score: sbxd sets its own to -1000, and a zygote
	 * of a session without a memory ceiling passed it on to every run, a
	 * sandbox the OOM killer would spare while it took other tenants'.
	 * 0, which, written with CAP_SYS_RESOURCE, is also the new floor an
	 * unprivileged process may lower itself back to (kernel:
	 * oom_score_adj_min); sessions with a ceiling get theirs from the
	 * host (backend_zygote.c, zygote.c). */
	int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (oom >= 0) {
		(void)!write(oom, "0", 1);
		close(oom);
	}
	/* No terminal (Ctrl-C to the host's group must not reach it). */
	setsid();
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int i = 0; devnull >= 0 && i < 3; i++)
		dup2(devnull, i);
	if (devnull > 2)
		close(devnull);
	sbx_zygote_exec_template(image_fd, sock);
	_exit(127);
}

static void *parent_main(void *arg)
{
	pid_t host = getpid();

	(void)arg;
	/* Named for whoever lists the host's threads (ps -L, top -H). */
	prctl(PR_SET_NAME, "sbx-tpl-parent");
	pthread_mutex_lock(&T.mu);
	for (;;) {
		while (!P.want)
			pthread_cond_wait(&P.cv, &T.mu);
		P.want = false;
		P.pid = sbx_sys_clone3_fork(0, NULL);
		if (P.pid == 0)
			template_child(P.image_fd, P.sock, host);
		P.err_no = errno;
		P.done = true;
		pthread_cond_broadcast(&P.cv);
	}
	return NULL;
}

/* Under T.mu: this process's parent thread, started once (again in a
 * forked child, which has none: what it inherited of P is its parent's). */
static int parent_thread_locked(sbx_err *err)
{
	pthread_attr_t a;
	pthread_t th;
	sigset_t all, old;

	if (P.owner == getpid())
		return 0;
	pthread_cond_init(&P.cv, NULL);
	P.want = P.done = false;
	/* Signals stay with the caller's threads. */
	sigfillset(&all);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&th, &a, parent_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (rc != 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, rc,
				   "start the zygote template: pthread_create: %s", strerror(rc));
	P.owner = getpid();
	return 0;
}

static int start_locked(sbx_err *err)
{
	int sp[2];
	int image_fd = sbx_zygote_image_fd(err);
	pid_t me = getpid();

	if (image_fd < 0 || parent_thread_locked(err) < 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "socketpair: %s", strerror(errno));
	P.image_fd = image_fd;
	P.sock = sp[1];
	P.want = true;
	pthread_cond_broadcast(&P.cv);
	while (!P.done)
		pthread_cond_wait(&P.cv, &T.mu);
	P.done = false;
	pid_t pid = P.pid;
	close(sp[1]);
	if (pid < 0) {
		close(sp[0]);
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, P.err_no,
				   "start the zygote template: %s", strerror(P.err_no));
	}
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
	req.nfds = (uint32_t)nfds;
	req.flags = flags;
	if (sbx_proto_send_fds(T.sock, &req, sizeof(req), fds, nfds) != 0) {
		if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)
			return 0;
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "ask the zygote template: %s",
				   strerror(errno));
	}
	/* It answers at once (one clone); one that does not (stopped, or
	 * stuck) must not hold every open of this process behind T.mu. */
	struct pollfd pfd = {T.sock, POLLIN, 0};
	int pr;
	while ((pr = poll(&pfd, 1, SBX_SESSION_READY_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (pr == 0) {
		stop_locked(); /* the next open starts another */
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, ETIMEDOUT,
				   "the zygote template did not answer within %d ms",
				   SBX_SESSION_READY_TIMEOUT_MS);
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
	if (rep.fds_short)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, rep.err_no,
				   "the zygote template could not take the session's %zu fds (its "
				   "open files limit, RLIMIT_NOFILE, is too low)",
				   nfds);
	if (rep.pid <= 0) {
		*clone_errno = rep.err_no ? rep.err_no : EINVAL;
		return -2;
	}
	return rep.pid;
}

/* fork(): a child must not inherit T.mu locked by a thread it does not
 * have (an open waiting for the template's answer, our thread cloning),
 * or its first open waits forever.  So fork waits for T.mu, and the child
 * starts with it free and no parent thread (P.owner tells). */
static void fork_prepare(void)
{
	pthread_mutex_lock(&T.mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&T.mu);
}

static void fork_child(void)
{
	pthread_mutex_init(&T.mu, NULL);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_init(void)
{
	(void)pthread_atfork(fork_prepare, fork_parent, fork_child);
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
	pthread_once(&atfork_once, atfork_init);
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

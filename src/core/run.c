/*
 * run.c: host side of one run: the request to the zygote, the pipes, the
 * status records, and the events a caller drains.
 *
 * A run never touches its session after start: it owns its fds (stdio
 * pipes, the status pipe from sbx-init, the init's pidfd), so a session
 * closed under it only makes the status pipe hit EOF early.
 *
 * In a session with a memory ceiling each run has a memory cgroup of its
 * own (cgroup.c), which its init joined before it forked the workload
 * (placer.c, or ready_limited here).  While the run goes,
 * sbx_run_next looks at its oom_kill counter every OOM_POLL_MS; once the
 * OOM killer took any process of the run, the whole run is killed through
 * the cgroup and ends as SBX_TERM_OOM.  sbx_run_kill(SIGKILL) and the end
 * of a run kill through it too, so nothing of a run survives it (setsid,
 * double forks, backend "none").  Without a memory ceiling none of this
 * costs anything.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define READ_CHUNK 65536
/* How often a memory-limited run's OOM counter is looked at. */
#define OOM_POLL_MS 50

struct sbx_run {
	int out_fd, err_fd, in_fd, status_fd, pidfd;
	int sock;     /* the init's request socket, kept to give it back */
	int reuse_fd; /* the session's inbox for given-back inits, or -1 */
	int listener; /* own_netns: its namespace's proxy listener until taken, or -1 */
	sbx_net mode;
	bool direct;	 /* backend none/bubblewrap: SIGKILL goes as SBX_SIG_KILL_RUN */
	char *stdin_buf; /* bytes still to feed, owned */
	size_t stdin_len, stdin_off;
	bool stdin_live; /* in_fd stays open for sbx_run_write */
	bool want_write; /* a write found in_fd full: wake next() when it has room */
	bool pty;	 /* out_fd is the pty's master, in_fd a dup of it */
	bool signalled;	 /* we sent a signal: the end is ours, not its */
	bool got_exit, got_error, done;
	struct sbx_status_rec last_error;
	int wstatus;
	uint32_t timed_out;
	uint64_t expire_at_ms; /* the session's end (sbx_monotonic_ms), 0: none */
	uint64_t t0_ns;
	char *oom_path;	     /* the session's; owned copy: it may close before the run ends */
	sbx_run_cgroup cg;   /* the run's own memory cgroup (version 0: none) */
	bool oom_hit;	     /* the OOM killer took a process of the run: all of it goes */
	uint64_t next_check; /* when to look at cg's counter next */
	sbx_run_result result;
	char buf[READ_CHUNK];
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* (NULL: nothing to close) */
static void close_fd(int *fd)
{
	if (!fd)
		return;
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* cwd '\0' argv... env...: the payload the zygote unpacks. */
static char *pack(const sbx_run_opts *o, uint32_t *argc, uint32_t *envc, size_t *len, sbx_err *err)
{
	const char *cwd = o->cwd ? o->cwd : SBX_SANDBOX_WORKDIR;
	size_t total = strlen(cwd) + 1;
	*argc = *envc = 0;
	for (const char *const *a = o->argv; *a; a++, (*argc)++)
		total += strlen(*a) + 1;
	for (const char *const *e = o->envp; e && *e; e++, (*envc)++)
		total += strlen(*e) + 1;
	if (total > SBX_PROTO_MAX_PAYLOAD)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, E2BIG,
				   "command, environment and cwd take %zu bytes; the limit is %u",
				   total, SBX_PROTO_MAX_PAYLOAD),
		       NULL;
	char *buf = malloc(total), *p = buf;
	if (!buf)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory"), NULL;
	p = stpcpy(p, cwd) + 1;
	for (const char *const *a = o->argv; *a; a++)
		p = stpcpy(p, *a) + 1;
	for (const char *const *e = o->envp; e && *e; e++)
		p = stpcpy(p, *e) + 1;
	*len = total;
	return buf;
}

/* The child's end of one stdio stream; *ours gets the host end of a pipe. */
static int stdio_end(sbx_io mode, int which, int *ours, sbx_err *err)
{
	int p[2];

	*ours = -1;
	if (mode == SBX_IO_INHERIT)
		return fcntl(which, F_DUPFD_CLOEXEC, 3);
	if (mode == SBX_IO_NULL)
		return open("/dev/null", O_RDWR | O_CLOEXEC);
	if (pipe2(p, O_CLOEXEC) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "pipe: %s", strerror(errno));
	/* stdin: the child reads p[0]; stdout/stderr: the child writes p[1]. */
	*ours = which == 0 ? p[1] : p[0];
	fcntl(*ours, F_SETFL, O_NONBLOCK);
	return which == 0 ? p[0] : p[1];
}

/* A memory-limited run's workload says "w" once it is forked;
 * false when it died first (the caller takes another). */
static bool workload_forked(int sock)
{
	struct pollfd p = {sock, POLLIN, 0};
	char c;
	int n;

	while ((n = poll(&p, 1, 10000)) < 0 && errno == EINTR)
		;
	return n == 1 && recv(sock, &c, 1, MSG_DONTWAIT) == 1 && c == 'w';
}

/* A memory-limited run's init, taken: in its run cgroup (placed before it
 * forked its workload, so all of the run is born in it, and its cgroup
 * namespace is rooted there: init.c), its workload forked ("w"), then the
 * OOM killer's first choice.  The zygote's inits come placed (placer.c);
 * those of backends none and bubblewrap, forked on demand, are placed
 * here, and "P" lets them go on.  0; 1 when the init died (take another);
 * -1 with err when it cannot be placed. */
static int ready_limited(sbx_session *s, int sock, int pidfd, sbx_run_cgroup *cg, sbx_err *err)
{
	struct pollfd dead = {pidfd, POLLIN, 0};
	if (poll(&dead, 1, 0) == 1)
		return 1;
	if (!cg->version) {
		if (sbx_cgroup_run_place(sbx_session_cgroup(s), pidfd, cg, err) < 0)
			return errno == ESRCH ? 1 : -1;
		if (send(sock, "P", 1, MSG_NOSIGNAL) != 1)
			return 1;
	}
	/* A given-back init's workload said "r" instead (session.c). */
	return (cg->ready || workload_forked(sock)) && sbx_cgroup_run_claim(cg, pidfd) == 0 ? 0 : 1;
}

/* Hand the request to the session's warm init.  One that died before we
 * took it (its socket refuses) is replaced once. */
static int send_to_warm(sbx_session *s, sbx_net mode, const struct sbx_proto_run *req,
			const char *payload, const int fds[4], int *pidfd, int *keep_sock,
			sbx_run_cgroup *cg, int *listener, sbx_err *err)
{
	/* At a memory ceiling the OOM killer may have taken an idle init or
	 * workload (tmpfs pages belong to no process, so its choice among
	 * small processes is arbitrary): check and try a few more. */
	bool limited = sbx_session_oom_path(s) != NULL;
	/* A warm run that expired unused (init.c) between take and send is
	 * not a sandbox whose runs die: another is taken, not counted (up to
	 * this many, for a host stalled longer than warm_idle_ms each time). */
	int lapses_left = 16;
	for (int attempt = 0; attempt < (limited ? 5 : 2); attempt++) {
		int sock;
		close_fd(listener); /* an earlier attempt's */
		if ((listener ? sbx_session_take_own(s, &sock, pidfd, cg, listener, err)
			      : sbx_session_take_warm(s, mode, &sock, pidfd, cg, err)) < 0) {
			if (limited && errno == ESRCH)
				continue;
			return -1;
		}
		int not_ready = limited ? ready_limited(s, sock, *pidfd, cg, err) : 0;
		if (not_ready) {
			close(sock);
			close_fd(pidfd);
			sbx_cgroup_run_kill(cg);
			sbx_cgroup_run_remove(cg);
			close_fd(listener);
			if (not_ready < 0)
				return -1;
			continue;
		}
		int rc = sbx_proto_send_run(sock, req, payload, fds);
		int saved = errno;
		struct pollfd hup = {sock, POLLOUT, 0};
		if (rc != 0 && saved == EPIPE && lapses_left > 0 && poll(&hup, 1, 0) == 1 &&
		    (hup.revents & POLLHUP)) {
			lapses_left--;
			attempt--;
		}
		if (rc == 0 && keep_sock) {
			*keep_sock = sock;
			return 0;
		}
		close(sock);
		if (rc == 0)
			return 0;
		sbx_cgroup_run_kill(cg);
		sbx_cgroup_run_remove(cg);
		close_fd(pidfd);
		close_fd(listener);
		if (saved != EPIPE && saved != ECONNREFUSED && saved != ECONNRESET)
			return sbx_err_set(err, SBX_E_EXECUTION, saved, "send run request: %s",
					   strerror(saved));
	}
	return sbx_err_set(err, SBX_E_EXECUTION, EPIPE, "the sandbox's runs die before they start");
}

/* A pty run's request carries, in place of stdio, one end of a socket
 * pair (three times: the protocol has three stdio slots); *ours is the
 * other end. */
static int pty_channel(int child[4], int *ours, sbx_err *err)
{
	int sp[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "socketpair: %s", strerror(errno));
	*ours = sp[0];
	child[0] = sp[1];
	if ((child[1] = fcntl(sp[1], F_DUPFD_CLOEXEC, 3)) < 0 ||
	    (child[2] = fcntl(sp[1], F_DUPFD_CLOEXEC, 3)) < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "dup: %s", strerror(errno));
	return 0;
}

/* The request went: wait for the master the workload sends.  A workload
 * that failed first sends none; its status record says why, and the run
 * ends with that error (no pty to read). */
static int take_pty(sbx_run *r, const sbx_run_opts *o, int *sock, sbx_err *err)
{
	int m = sbx_pty_recv_master(*sock, 10000, err);

	close_fd(sock);
	if (m == -1)
		return -1;
	if (m == -2)
		return 0;
	r->pty = true;
	r->stdin_live = true;
	r->out_fd = m;
	if ((r->in_fd = fcntl(m, F_DUPFD_CLOEXEC, 3)) < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "dup: %s", strerror(errno));
	/* stdin_data on a terminal: typed first. */
	if (o->stdin_len > 0) {
		if (!(r->stdin_buf = malloc(o->stdin_len)))
			return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
		memcpy(r->stdin_buf, o->stdin_data, o->stdin_len);
		r->stdin_len = o->stdin_len;
	}
	return 0;
}

sbx_run *sbx_run_start(sbx_session *s, const sbx_run_opts *o, sbx_err *err)
{
	struct sbx_proto_run req;
	int child[4] = {-1, -1, -1, -1}, status[2] = {-1, -1}, pty_sock = -1;
	char *payload = NULL;
	size_t len = 0;
	sbx_run *r;

	if (!s)
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, 0, "the session is closed"), NULL;
	if (!o->argv || !o->argv[0] || !o->argv[0][0])
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "argv is empty"), NULL;
	if ((o->pty_rows == 0) != (o->pty_cols == 0))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "pty: rows and cols must both be set"),
		       NULL;
	if (o->own_netns && o->network_mode != SBX_NET_ALLOWLIST)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "own_netns: only with network_mode allowlist, not %s",
				   sbx_net_name(o->network_mode)),
		       NULL;
	/* Fail closed: without a mount namespace per run the terminal would
	 * come from the host's devpts. */
	if (o->pty_rows && sbx_session_direct(s))
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
				   "pty: backend %s runs commands without a devpts of their own "
				   "(a terminal would be the host's); use backend userns or "
				   "privileged",
				   sbx_session_backend(s)),
		       NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory"), NULL;
	r->out_fd = r->err_fd = r->in_fd = r->status_fd = r->pidfd = r->sock = r->reuse_fd = -1;
	r->listener = -1;
	r->mode = o->network_mode;
	r->direct = sbx_session_direct(s);
	r->expire_at_ms = sbx_session_expire_at_ms(s);
	r->t0_ns = now_ns();
	/* Only sessions with a memory ceiling pay for this. */
	const char *oom = sbx_session_oom_path(s);
	if (oom && !(r->oom_path = strdup(oom))) {
		sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
		goto fail;
	}
	memset(&req, 0, sizeof(req));
	payload = pack(o, &req.argc, &req.envc, &len, err);
	if (!payload)
		goto fail;
	req.magic = SBX_PROTO_MAGIC;
	req.timeout_ms = o->timeout_ms;
	req.grace_ms = o->grace_ms;
	req.payload_len = (uint32_t)len;
	req.pty_rows = o->pty_rows;
	req.pty_cols = o->pty_cols;
	if (o->pty_rows) {
		/* The workload sends the master back on this socket (pty.c). */
		if (pty_channel(child, &pty_sock, err) < 0)
			goto fail;
	} else if ((child[0] = stdio_end(o->stdin_mode, 0, &r->in_fd, err)) < 0 ||
		   (child[1] = stdio_end(o->stdout_mode, 1, &r->out_fd, err)) < 0 ||
		   (child[2] = stdio_end(o->stderr_mode, 2, &r->err_fd, err)) < 0)
		goto fail_io;
	if (pipe2(status, O_CLOEXEC) != 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "pipe: %s", strerror(errno));
		goto fail;
	}
	child[3] = status[1];
	r->status_fd = status[0];
	r->stdin_live = r->in_fd >= 0 && o->stdin_live;
	if (r->in_fd >= 0 && o->stdin_len > 0) {
		r->stdin_buf = malloc(o->stdin_len);
		if (!r->stdin_buf) {
			sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
			goto fail;
		}
		memcpy(r->stdin_buf, o->stdin_data, o->stdin_len);
		r->stdin_len = o->stdin_len;
	} else if (!r->stdin_live) {
		close_fd(&r->in_fd);
	}
	/* A copy of the session's inbox, not a pointer: the session may be
	 * closed before the run ends (the give-back then fails, and the init
	 * ends).  An init in a namespace of the run's own is never given
	 * back: its namespace is this run's. */
	if (!o->own_netns && sbx_session_reuse_fd(s) >= 0 &&
	    (r->reuse_fd = fcntl(sbx_session_reuse_fd(s), F_DUPFD_CLOEXEC, 3)) < 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "dup: %s", strerror(errno));
		goto fail;
	}
	if (send_to_warm(s, o->network_mode, &req, payload, child, &r->pidfd,
			 r->reuse_fd >= 0 ? &r->sock : NULL, &r->cg,
			 o->own_netns ? &r->listener : NULL, err) < 0)
		goto fail;
	r->next_check = now_ns() + OOM_POLL_MS * 1000000ull;
	for (int i = 0; i < 4; i++)
		close_fd(&child[i]);
	free(payload);
	payload = NULL;
	if (pty_sock >= 0 && take_pty(r, o, &pty_sock, err) < 0)
		goto fail;
	return r;
fail_io:
	if (err && err->kind == SBX_E_NONE)
		sbx_err_set(err, SBX_E_EXECUTION, errno, "stdio: %s", strerror(errno));
fail:
	for (int i = 0; i < 4; i++)
		close_fd(&child[i]);
	close_fd(&pty_sock);
	free(payload);
	sbx_run_free(r);
	return NULL;
}

/* Has the run's own oom_kill counter grown?  The kernel sends the victim
 * SIGKILL before it counts the kill (and logs to the console in between),
 * so we can see the death first: a death that looks like a kill gets up to
 * 200 ms for the counter to catch up. */
static bool oom_counted(const sbx_run *r, bool wait)
{
	for (int i = 0; i < (wait ? 100 : 1); i++) {
		if (sbx_cgroup_run_oom_kills(&r->cg) > r->cg.oom_base)
			return true;
		if (wait)
			usleep(2000);
	}
	return false;
}

/* Did the OOM killer end this run?  It took a process of the run (the
 * run's own counter grew: then all of it was killed, or is now), or the
 * run died of SIGKILL (or a shell reported a child's: 137) and the counter
 * grows right after. */
static bool ended_by_oom(sbx_run *r)
{
	if (!r->cg.version || (r->signalled && !r->oom_hit))
		return false;
	/* Counted after the last look (check_oom): the same verdict. */
	if (!r->oom_hit && oom_counted(r, false))
		r->oom_hit = true;
	if (r->oom_hit)
		return true;
	/* init itself was the victim: the whole run died with it. */
	if (!r->got_exit)
		return !r->got_error && oom_counted(r, true);
	bool killed = (WIFSIGNALED(r->wstatus) && WTERMSIG(r->wstatus) == SIGKILL) ||
		      (WIFEXITED(r->wstatus) && WEXITSTATUS(r->wstatus) == 128 + SIGKILL);
	return killed && oom_counted(r, true);
}

/* A memory-limited run, every OOM_POLL_MS: once the OOM killer took one of
 * its processes, kill all of them through its cgroup (again at each look
 * until the run has ended: a forking process may race one pass). */
static void check_oom(sbx_run *r)
{
	uint64_t now = now_ns();
	if (now < r->next_check)
		return;
	r->next_check = now + OOM_POLL_MS * 1000000ull;
	if (!r->oom_hit && oom_counted(r, false))
		r->oom_hit = true;
	if (r->oom_hit) {
		sbx_cgroup_run_kill(&r->cg);
		if (r->pidfd >= 0)
			sbx_sys_pidfd_send_signal(r->pidfd, SIGKILL);
	}
}

/* After an OOM kill, wait (a little) until the kernel has freed the dead
 * run's memory (its /tmp goes with its mount namespace, after the status
 * pipe closed), so the session's next run does not start at the ceiling. */
static void settle_memory(const char *oom_path)
{
	char dir[PATH_MAX], use[PATH_MAX], lim[PATH_MAX], buf[64];
	bool v2 = strstr(oom_path, "/memory.events") != NULL;

	snprintf(dir, sizeof(dir), "%s", oom_path);
	*strrchr(dir, '/') = '\0';
	snprintf(use, sizeof(use), "%.4000s/%s", dir,
		 v2 ? "memory.current" : "memory.usage_in_bytes");
	snprintf(lim, sizeof(lim), "%.4000s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
	for (int i = 0; i < 100; i++) {
		unsigned long long u = 0, l = 0;
		int fd = open(use, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n <= 0)
			return;
		buf[n] = '\0';
		u = strtoull(buf, NULL, 10);
		fd = open(lim, O_RDONLY | O_CLOEXEC);
		n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
		if (fd >= 0)
			close(fd);
		if (n <= 0)
			return;
		buf[n] = '\0';
		l = strtoull(buf, NULL, 10);
		if (l == 0 || u < l / 4 * 3)
			return;
		struct timespec ts = {0, 10 * 1000000L};
		nanosleep(&ts, NULL);
	}
}

static void finish(sbx_run *r)
{
	sbx_run_result *res = &r->result;

	res->runtime_ms = (now_ns() - r->t0_ns) / 1000000ull;
	if (r->got_error && (!r->got_exit || WIFEXITED(r->wstatus))) {
		res->term = SBX_TERM_ERROR;
		res->returncode = -1;
		snprintf(res->error, sizeof(res->error), "%s", r->last_error.msg);
		r->last_error.option[sizeof(r->last_error.option) - 1] = '\0';
		snprintf(res->error_option, sizeof(res->error_option), "%s", r->last_error.option);
		res->error_kind = res->error_option[0] ? SBX_E_INVALID_ARGUMENT : SBX_E_EXECUTION;
	} else if (!r->got_exit && r->expire_at_ms && sbx_monotonic_ms() >= r->expire_at_ms) {
		/* Its init went with the session at its end (the zygote's end
		 * after the grace) before it could say so. */
		res->term = SBX_TERM_EXPIRED;
		res->returncode = -SIGKILL;
		res->signo = SIGKILL;
	} else if (!r->got_exit) {
		res->term = r->signalled ? SBX_TERM_KILLED : SBX_TERM_ERROR;
		res->returncode = r->signalled ? -SIGKILL : -1;
		res->signo = r->signalled ? SIGKILL : 0;
		res->error_kind = SBX_E_EXECUTION;
		if (!r->signalled)
			snprintf(res->error, sizeof(res->error),
				 "the sandbox ended before the command did (session closed?)");
	} else if (WIFSIGNALED(r->wstatus)) {
		res->signo = WTERMSIG(r->wstatus);
		res->returncode = -res->signo;
		res->term = r->timed_out == SBX_STATUS_EXPIRED ? SBX_TERM_EXPIRED
			    : r->timed_out		       ? SBX_TERM_TIMEOUT
			    : r->signalled		       ? SBX_TERM_KILLED
							       : SBX_TERM_SIGNAL;
	} else {
		res->returncode = WEXITSTATUS(r->wstatus);
		res->term = r->timed_out == SBX_STATUS_EXPIRED ? SBX_TERM_EXPIRED
			    : r->timed_out		       ? SBX_TERM_TIMEOUT
							       : SBX_TERM_EXIT;
	}
	if ((r->oom_hit || (!r->got_error && !r->timed_out)) && ended_by_oom(r)) {
		res->term = SBX_TERM_OOM;
		res->error[0] = '\0';
		/* The killer took a process of the run: all of it goes, even
		 * when what was left exited before the next look (a shell
		 * whose dd was the victim): the same status either way. */
		if (!r->got_exit || r->oom_hit) {
			res->returncode = -SIGKILL;
			res->signo = SIGKILL;
		}
	}
	/* Its init reported and we never signalled it: it serves the
	 * session's next run (init.c), with a memory ceiling in the same run
	 * cgroup (only init is left in it: its PID namespace is empty).
	 * Otherwise, or when the session is gone or its inbox full, closing
	 * the socket ends it. */
	bool back = false;
	if (r->reuse_fd >= 0 && r->sock >= 0 && r->pidfd >= 0 && r->got_exit && !r->signalled &&
	    res->term != SBX_TERM_OOM && res->term != SBX_TERM_EXPIRED) {
		const struct sbx_init_held *h = &r->cg.held;
		bool held = r->cg.version && h->fd[0] >= 0;
		struct sbx_back msg = {{SBX_PROTO_MAGIC, 0, 0, (uint32_t)r->mode}, r->cg.seq};
		int fds[2 + SBX_HELD_N] = {r->pidfd, r->sock};
		for (int i = 0; i < SBX_HELD_N; i++)
			fds[2 + i] = held ? h->fd[i] : -1;
		/* Idle again before the session can take it. */
		sbx_cgroup_run_idle(&r->cg);
		back = sbx_proto_send_fds(r->reuse_fd, &msg, sizeof(msg), fds,
					  held ? 2 + SBX_HELD_N : 2) == 0;
	}
	/* Nothing of the run outlives it (backend "none" has no PID namespace
	 * to end it): what is left in its cgroup is killed as it goes (or is
	 * kept for the next run, when empty). */
	if (r->cg.version && back)
		sbx_cgroup_run_release(&r->cg);
	else if (r->cg.version)
		sbx_cgroup_run_remove(&r->cg);
	if (res->term == SBX_TERM_OOM && r->oom_path)
		settle_memory(r->oom_path);
	r->done = true;
	close_fd(&r->pidfd);
	close_fd(&r->sock);
	close_fd(&r->reuse_fd);
}

static void read_status(sbx_run *r)
{
	struct sbx_status_rec rec;
	ssize_t n = read(r->status_fd, &rec, sizeof(rec));

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n != (ssize_t)sizeof(rec)) {
		close_fd(&r->status_fd);
		return;
	}
	rec.msg[sizeof(rec.msg) - 1] = '\0';
	if (rec.type == SBX_STATUS_ERROR) {
		r->got_error = true;
		r->last_error = rec;
	} else if (rec.type == SBX_STATUS_EXIT) {
		r->got_exit = true;
		r->wstatus = rec.wstatus;
		r->timed_out = rec.timed_out;
	}
}

static void feed_stdin(sbx_run *r)
{
	ssize_t n = write(r->in_fd, r->stdin_buf + r->stdin_off, r->stdin_len - r->stdin_off);
	if (n > 0)
		r->stdin_off += (size_t)n;
	bool failed = n < 0 && errno != EAGAIN && errno != EINTR;
	if (failed || r->stdin_off == r->stdin_len) {
		if (failed || !r->stdin_live)
			close_fd(&r->in_fd);
		free(r->stdin_buf);
		r->stdin_buf = NULL;
	}
}

int sbx_run_next(sbx_run *r, int timeout_ms, bool want_stdout, bool want_stderr, sbx_event *ev,
		 sbx_err *err)
{
	uint64_t deadline = timeout_ms < 0 ? 0 : now_ns() + (uint64_t)timeout_ms * 1000000ull;

	ev->type = SBX_EV_NONE;
	ev->data = NULL;
	ev->len = 0;
	if (r->done)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "the run has already ended");
	for (;;) {
		struct pollfd pfd[4];
		int idx[4], n = 0;
		if (r->cg.version)
			check_oom(r);
		if (r->status_fd < 0 && r->out_fd < 0 && r->err_fd < 0) {
			close_fd(&r->in_fd);
			finish(r);
			ev->type = SBX_EV_EXIT;
			return 0;
		}
		if (r->status_fd >= 0) {
			pfd[n] = (struct pollfd){r->status_fd, POLLIN, 0};
			idx[n++] = 0;
		}
		if (r->out_fd >= 0 && want_stdout) {
			pfd[n] = (struct pollfd){r->out_fd, POLLIN, 0};
			idx[n++] = 1;
		}
		if (r->err_fd >= 0 && want_stderr) {
			pfd[n] = (struct pollfd){r->err_fd, POLLIN, 0};
			idx[n++] = 2;
		}
		/* stdin: while bytes of stdin_data wait, or a live write found
		 * it full (then room wakes the caller: SBX_EV_NONE). */
		if (r->in_fd >= 0 && (r->stdin_buf || r->want_write)) {
			pfd[n] = (struct pollfd){r->in_fd, POLLOUT, 0};
			idx[n++] = 3;
		}
		int wait = -1;
		if (timeout_ms >= 0) {
			uint64_t now = now_ns();
			wait = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
		}
		if (r->cg.version) {
			uint64_t now = now_ns();
			int next = now >= r->next_check
					   ? 0
					   : (int)((r->next_check - now + 999999) / 1000000);
			if (wait < 0 || next < wait)
				wait = next;
		}
		int pr = poll(pfd, (nfds_t)n, wait);
		if (pr < 0 && errno != EINTR)
			return sbx_err_set(err, SBX_E_EXECUTION, errno, "poll: %s",
					   strerror(errno));
		if (pr <= 0) {
			if (timeout_ms >= 0 && now_ns() >= deadline)
				return 0;
			continue;
		}
		/* Output before status: data the command wrote comes first. */
		for (int pass = 1; pass <= 3; pass++) {
			for (int i = 0; i < n; i++) {
				if (idx[i] != pass % 3 && !(pass == 3 && idx[i] == 3))
					continue;
				if (!pfd[i].revents)
					continue;
				if (idx[i] == 3 && r->stdin_buf) {
					feed_stdin(r);
					continue;
				}
				if (idx[i] == 3) {
					r->want_write = false;
					return 0;
				}
				if (idx[i] == 0) {
					read_status(r);
					continue;
				}
				int *fd = idx[i] == 1 ? &r->out_fd : &r->err_fd;
				ssize_t got = read(*fd, r->buf, sizeof(r->buf));
				if (got > 0) {
					ev->type = idx[i] == 1 ? SBX_EV_STDOUT : SBX_EV_STDERR;
					ev->data = r->buf;
					ev->len = (size_t)got;
					return 0;
				}
				if (got == 0 || (errno != EAGAIN && errno != EINTR))
					close_fd(fd);
			}
		}
	}
}

size_t sbx_run_read_output(sbx_run *r, int which, void *buf, size_t cap)
{
	int fd = which == 1 ? r->out_fd : which == 2 ? r->err_fd : -1;

	/* Only our own pipes, which are non-blocking (stdio_end). */
	if (fd < 0 || r->pty || r->done)
		return 0;
	ssize_t got = read(fd, buf, cap);
	return got > 0 ? (size_t)got : 0;
}

/* The signal that asks init for signo: SIGKILL of a run without a PID
 * namespace must reach every process of it, which only init can find. */
static int kill_signal(const sbx_run *r, int signo)
{
	return signo == SIGKILL && r->direct ? SBX_SIG_KILL_RUN : signo;
}

const char *sbx_term_name(sbx_term t)
{
	switch (t) {
	case SBX_TERM_NONE:
		return "running";
	case SBX_TERM_EXIT:
		return "exit";
	case SBX_TERM_SIGNAL:
		return "signal";
	case SBX_TERM_TIMEOUT:
		return "timeout";
	case SBX_TERM_KILLED:
		return "killed";
	case SBX_TERM_ERROR:
		return "error";
	case SBX_TERM_OOM:
		return "oom";
	case SBX_TERM_EXPIRED:
		return "session_expired";
	}
	return "error";
}

int sbx_run_kill(sbx_run *r, int signo, sbx_err *err)
{
	if (r->done || r->pidfd < 0)
		return 0;
	/* The terminal's keys' signals go where the keys would send them. */
	if (r->pty && (signo == SIGINT || signo == SIGQUIT || signo == SIGTSTP) &&
	    (r->out_fd >= 0 || r->in_fd >= 0) &&
	    sbx_pty_signal(r->out_fd >= 0 ? r->out_fd : r->in_fd, signo) == 0)
		return 0;
	if (sbx_sys_pidfd_send_signal(r->pidfd, kill_signal(r, signo)) != 0 && errno != ESRCH)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "signal the run: %s",
				   strerror(errno));
	r->signalled = true;
	/* A kill is for every process of the run, wherever it went. */
	if (signo == SIGKILL && r->cg.version)
		sbx_cgroup_run_kill(&r->cg);
	return 0;
}

int sbx_run_write(sbx_run *r, const void *data, size_t len, size_t *written, sbx_err *err)
{
	*written = 0;
	if (!r->stdin_live || r->in_fd < 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   r->stdin_live
					   ? "stdin is closed"
					   : "the run has no live stdin (stdin = true or pty)");
	r->want_write = true;
	if (r->stdin_buf || len == 0)
		return 0;
	ssize_t n = write(r->in_fd, data, len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n < 0) {
		int e = errno;
		/* The reader is gone (EPIPE; EIO: the terminal hung up). */
		r->want_write = false;
		close_fd(&r->in_fd);
		return sbx_err_set(err, SBX_E_EXECUTION, e, "write stdin: %s", strerror(e));
	}
	*written = (size_t)n;
	r->want_write = (size_t)n < len;
	return 0;
}

int sbx_run_close_stdin(sbx_run *r, sbx_err *err)
{
	if (!r->stdin_live)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "the run has no live stdin (stdin = true or pty)");
	r->want_write = false;
	if (r->pty && r->in_fd >= 0) {
		/* A terminal has no end of input but the EOF key. */
		struct termios t;
		char eof = tcgetattr(r->in_fd, &t) == 0 && t.c_cc[VEOF] ? (char)t.c_cc[VEOF] : 4;
		if (write(r->in_fd, &eof, 1) != 1 && errno != EAGAIN)
			close_fd(&r->in_fd);
		return 0;
	}
	free(r->stdin_buf);
	r->stdin_buf = NULL;
	close_fd(&r->in_fd);
	return 0;
}

int sbx_run_resize(sbx_run *r, uint16_t rows, uint16_t cols, sbx_err *err)
{
	if (!r->pty)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "the run has no pty");
	if (rows == 0 || cols == 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "rows and cols must be positive");
	int fd = r->out_fd >= 0 ? r->out_fd : r->in_fd;
	if (fd < 0 || r->done)
		return 0; /* the terminal is gone: nothing to resize */
	return sbx_pty_resize(fd, rows, cols, err);
}

bool sbx_run_has_pty(const sbx_run *r)
{
	return r->pty;
}

int sbx_run_stdin_fd(const sbx_run *r)
{
	return r->stdin_live ? r->in_fd : -1;
}

const sbx_run_result *sbx_run_result_get(const sbx_run *r)
{
	return &r->result;
}

int sbx_run_stdout_fd(const sbx_run *r)
{
	return r->out_fd;
}

int sbx_run_stderr_fd(const sbx_run *r)
{
	return r->err_fd;
}

int sbx_run_status_fd(const sbx_run *r)
{
	return r->status_fd;
}

int sbx_run_pidfd(const sbx_run *r)
{
	return r->pidfd;
}

int sbx_run_take_listener(sbx_run *r)
{
	int fd = r->listener;
	r->listener = -1;
	return fd;
}

void sbx_run_free(sbx_run *r)
{
	if (!r)
		return;
	if (!r->done && r->pidfd >= 0)
		sbx_sys_pidfd_send_signal(r->pidfd, kill_signal(r, SIGKILL));
	if (r->cg.version) {
		sbx_cgroup_run_kill(&r->cg);
		sbx_cgroup_run_remove(&r->cg);
	}
	close_fd(&r->out_fd);
	close_fd(&r->err_fd);
	close_fd(&r->in_fd);
	close_fd(&r->status_fd);
	close_fd(&r->pidfd);
	close_fd(&r->sock);
	close_fd(&r->reuse_fd);
	close_fd(&r->listener);
	free(r->stdin_buf);
	free(r->oom_path);
	free(r);
}

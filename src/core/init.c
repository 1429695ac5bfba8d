/*
 * init.c: sbx-init, PID 1 of every run.
 *
 * It starts in a fresh PID and mount namespace cloned by the zygote, still
 * holding the session's namespace capabilities.  It makes the per-run
 * mounts, forks the workload, then only waits: it reaps every zombie,
 * forwards signals that come from outside the run (the host), enforces the
 * timeout (SIGTERM to everything, SIGKILL after the grace period) and, when
 * the workload exits, kills whatever it left behind and reports the status
 * to the host.  When PID 1 of a namespace exits the kernel kills the rest,
 * so nothing outlives the run.
 *
 * The workload drops privileges in the order bubblewrap uses: ids, then
 * no_new_privs and capabilities, fds marked close-on-exec, seccomp last,
 * right before execve.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* Signals init forwards to the run when they come from outside. */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

void sbx_status_send(int fd, uint32_t type, int wstatus, int err_no, uint32_t timed_out,
		     const char *fmt, ...)
{
	struct sbx_status_rec rec;
	va_list ap;

	memset(&rec, 0, sizeof(rec));
	rec.type = type;
	rec.wstatus = wstatus;
	rec.err_no = err_no;
	rec.timed_out = timed_out;
	va_start(ap, fmt);
	vsnprintf(rec.msg, sizeof(rec.msg), fmt, ap);
	va_end(ap);
	/* A record is < PIPE_BUF: the write is atomic or fails whole. */
	while (write(fd, &rec, sizeof(rec)) < 0 && errno == EINTR)
		;
}

/* Find argv[0] along the PATH of the run's own environment (execvpe would
 * use ours). */
static void exec_in_path(const char *const *argv, const char *const *envp)
{
	const char *path = "/usr/local/bin:/usr/bin:/bin";
	char buf[PATH_MAX];
	int saved = ENOENT;

	if (strchr(argv[0], '/')) {
		execve(argv[0], (char *const *)argv, (char *const *)envp);
		return;
	}
	for (const char *const *e = envp; *e; e++)
		if (!strncmp(*e, "PATH=", 5))
			path = *e + 5;
	while (*path) {
		const char *end = strchr(path, ':');
		size_t len = end ? (size_t)(end - path) : strlen(path);
		if (len > 0 && len + strlen(argv[0]) + 2 < sizeof(buf)) {
			snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, path, argv[0]);
			execve(buf, (char *const *)argv, (char *const *)envp);
			if (errno != ENOENT && errno != ENOTDIR)
				saved = errno;
		}
		path += len + (end ? 1 : 0);
	}
	errno = saved;
}

/* dash's builtins and reserved words: a command naming one must run in the
 * shell, whose builtin may differ from the binary of the same name. */
static const char *const sh_words[] = {
	"alias", "bg", "break", "cd", "chdir", "command", "continue", "echo", "eval", "exec",
	"exit", "export", "false", "fc", "fg", "getopts", "hash", "jobs", "kill", "local",
	"printf", "pwd", "read", "readonly", "return", "set", "shift", "test", "times", "trap",
	"true", "type", "ulimit", "umask", "unalias", "unset", "wait", "[", ".", ":", "if",
	"then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do", "done",
	"function", "select", "time", "!", "{", "}", NULL};

/*
 * `sh -c "prog arg arg"` with nothing the shell would interpret (no quotes,
 * expansions, redirections, globs, operators, assignments, builtins) means
 * exactly "exec prog with these words"; skipping the shell saves one exec.
 * Fills words (pointers into buf) and returns their count, or 0 when the
 * shell is needed.
 */
static int split_simple_command(const char *const *argv, char *buf, size_t len, char **words,
				int max)
{
	const char *cmd;
	int n = 0;

	if (!argv[0] || strcmp(argv[0], "/bin/sh") || !argv[1] || strcmp(argv[1], "-c") ||
	    !argv[2] || argv[3] || strlen(argv[2]) >= len)
		return 0;
	cmd = argv[2];
	for (const char *c = cmd; *c; c++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
			    "_./:,+@%- ",
			    *c))
			return 0;
	strcpy(buf, cmd);
	for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
		if (n == max - 1)
			return 0;
		words[n++] = tok;
	}
	words[n] = NULL;
	if (n == 0)
		return 0;
	for (int i = 0; sh_words[i]; i++)
		if (!strcmp(words[0], sh_words[i]))
			return 0;
	return n;
}

/* Split the request payload into cwd, argv and envp (pointers into it). */
static int unpack(const struct sbx_proto_run *req, const char *payload, const char **cwd,
		  const char ***argv, const char ***envp)
{
	const char *p = payload, *end = payload + req->payload_len;
	size_t n = (size_t)req->argc + req->envc + 2;
	const char **v = calloc(n, sizeof(*v));

	if (!v)
		return -1;
	*cwd = p;
	p += strnlen(p, (size_t)(end - p)) + 1;
	for (uint32_t i = 0; i < req->argc + req->envc; i++) {
		if (p >= end) {
			free(v);
			return -1;
		}
		v[i + (i >= req->argc ? 1 : 0)] = p;
		p += strnlen(p, (size_t)(end - p)) + 1;
	}
	*argv = v;
	*envp = v + req->argc + 1;
	return 0;
}

/* What the workload tells init when the request has come: the run's
 * timeout, with the status pipe attached (SCM_RIGHTS). */
struct started {
	uint32_t magic;
	uint32_t timeout_ms;
	uint32_t grace_ms;
};

static int send_started(int sock, const struct sbx_proto_run *req, int status_fd)
{
	struct started st = {SBX_PROTO_MAGIC, req->timeout_ms, req->grace_ms};
	struct iovec iov = {&st, sizeof(st)};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh;

	memset(&mh, 0, sizeof(mh));
	memset(&u, 0, sizeof(u));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &status_fd, sizeof(int));
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == sizeof(st) ? 0 : -1;
}

/* Wait for the host's request on sock (the socket the host was offered). */
static void recv_request(int sock, struct sbx_proto_run *req, char *payload, int fds[4])
{
	int rc;
	while ((rc = sbx_proto_recv_run(sock, req, payload, fds)) == 2)
		;
	if (rc != 0)
		_exit(0); /* the host dropped the offer */
}

/*
 * The workload, forked before the request exists: it gives up every
 * privilege first (ids, no_new_privs, capabilities, seccomp last), so all
 * of that is paid while the session is idle; then it waits for the host's
 * request on hsock, passes the timeout and status fd to init over isock,
 * takes its stdio and execs.  A setup failure is reported on the status fd
 * of the request it then still waits for.
 */
static __attribute__((noreturn)) void workload(const struct sbx_zygote_cfg *cfg, int hsock,
					       int isock)
{
	static char payload[SBX_PROTO_MAX_PAYLOAD];
	struct sbx_proto_run req;
	const char *cwd, **argv, **envp, *what = NULL;
	int fds[4], err_no = 0;
	sbx_err err;
	sigset_t none;

	sigemptyset(&none);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		signal(forwarded[i], SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Its own session: no controlling terminal of ours, its own group. */
	setsid();
	err.msg[0] = '\0';
	/* Ids first: the uid is already 1000, but make every id 1000 and drop
	 * any supplementary group (setgroups is denied when the host side is
	 * unprivileged; then there is nothing to drop). */
	struct rlimit core = {0, 0};
	if (setgroups(0, NULL) != 0 && errno != EPERM)
		what = "setgroups", err_no = errno;
	else if (setresgid(SBX_SANDBOX_GID, SBX_SANDBOX_GID, SBX_SANDBOX_GID) != 0 ||
		 setresuid(SBX_SANDBOX_UID, SBX_SANDBOX_UID, SBX_SANDBOX_UID) != 0)
		what = "become the sandbox user", err_no = errno;
	else if (setrlimit(RLIMIT_CORE, &core) != 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		what = "no_new_privs", err_no = errno;
	else if (sbx_caps_drop_all(&err) < 0)
		what = err.msg, err_no = err.sys_errno;
	/* Everything but stdio goes at exec; the status fd stays usable until
	 * then to report a failed exec. */
	else if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0)
		what = "close fds", err_no = errno;
	else if (sbx_seccomp_install(cfg->seccomp, &err) < 0)
		what = err.msg, err_no = err.sys_errno;

	recv_request(hsock, &req, payload, fds);
	int status_fd = fds[3];
	if (what) {
		/* Never run a command with privileges we failed to drop. */
		sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, err_no, 0, "%s: %s", what,
				strerror(err_no));
		_exit(127);
	}
	send_started(isock, &req, status_fd);
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0) {
			sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "stdio: %s",
					strerror(errno));
			_exit(127);
		}
	if (unpack(&req, payload, &cwd, &argv, &envp) < 0) {
		sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, EINVAL, 0, "malformed run request");
		_exit(127);
	}
	if (chdir(cwd) != 0) {
		sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "cwd %s: %s", cwd,
				strerror(errno));
		_exit(127);
	}
	char buf[1024], *words[64];
	if (split_simple_command(argv, buf, sizeof(buf), words, 64) > 0)
		exec_in_path((const char *const *)words, envp);
	/* Not simple, or the direct exec failed: the shell does it and
	 * reports like a shell (e.g. "not found", 127). */
	exec_in_path(argv, envp);
	sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "exec %s: %s", argv[0],
			strerror(errno));
	_exit(127);
}

/* Receive the workload's "started" message; the status fd into *status. */
static int recv_started(int sock, struct started *st, int *status)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {st, sizeof(*st)};
	struct msghdr mh;

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	*status = -1;
	if (n > 0 && c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(status, CMSG_DATA(c), sizeof(int));
	if (n != sizeof(*st) || st->magic != SBX_PROTO_MAGIC || *status < 0) {
		if (*status >= 0)
			close(*status);
		return n < 0 && errno == EAGAIN ? 1 : -1;
	}
	return 0;
}

static int make_timer(uint32_t ms)
{
	struct itimerspec its;
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);

	if (fd < 0 || ms == 0)
		return fd;
	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = ms / 1000;
	its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
	timerfd_settime(fd, 0, &its, NULL);
	return fd;
}

/* Reap what exited; true when child was among them (its status in *st). */
static bool reap(pid_t child, int *st)
{
	bool found = false;
	pid_t p;
	int s;

	while ((p = waitpid(-1, &s, WNOHANG)) > 0)
		if (p == child) {
			*st = s;
			found = true;
		}
	return found;
}

void sbx_init_main(const struct sbx_zygote_cfg *cfg, int hsock)
{
	static char payload[SBX_PROTO_MAX_PAYLOAD];
	struct sbx_proto_run req;
	struct started st;
	int wsock[2] = {-1, -1}, wstatus = 0, status_fd = -1, fds[4];
	uint32_t timed_out = 0;
	bool exited = false, killing = false;
	uint64_t pending = 0; /* signals the host sent before the run started */
	pid_t child = -1;
	sigset_t mask;
	sbx_err err;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	prctl(PR_SET_NAME, "sbx-init");
	/* Not dumpable: the workload (same uid) cannot read our memory. */
	prctl(PR_SET_DUMPABLE, 0);
	sbx_close_fds_except(&hsock, 1);

	/* The zygote had these blocked already, so none was lost before this
	 * point; they queue on the signalfd, and signals from inside the run
	 * are told apart by ssi_pid. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(&mask, forwarded[i]);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	if (sbx_rootfs_run_mounts(cfg, &err) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, wsock) != 0 ||
	    (child = fork()) < 0) {
		/* No run can start here: say why to whoever sends a request. */
		char why[240];
		snprintf(why, sizeof(why), "%.200s", child < 0 && wsock[0] >= 0 ? strerror(errno)
								    : err.msg);
		recv_request(hsock, &req, payload, fds);
		sbx_status_send(fds[3], SBX_STATUS_ERROR, 0, 0, 0, "%s", why);
		_exit(1);
	}
	if (child == 0) {
		close(wsock[0]);
		close(sfd);
		workload(cfg, hsock, wsock[1]);
	}
	/* The request goes straight to the workload. */
	close(hsock);
	close(wsock[1]);

	/* Warm: wait until the workload says it started (or is gone). */
	for (;;) {
		struct pollfd pfd[2] = {{wsock[0], POLLIN, 0}, {sfd, POLLIN, 0}};
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			_exit(1);
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == sizeof(si))
				if (si.ssi_signo != SIGCHLD && si.ssi_pid == 0 && si.ssi_signo < 64)
					pending |= 1ull << si.ssi_signo;
			if (reap(child, &wstatus)) {
				/* A quick command may exit before we read its
				 * start; one that never started reported its own
				 * failure, or had no request. */
				if (recv_started(wsock[0], &st, &status_fd) != 0)
					_exit(0);
				exited = true;
				break;
			}
		}
		if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		int rc = recv_started(wsock[0], &st, &status_fd);
		if (rc == 0)
			break;
		if (rc < 0)
			_exit(0);
	}
	close(wsock[0]);
	int tfd = make_timer(st.timeout_ms);
	/* The host may signal the run as soon as it has the pidfd, which can
	 * be before the workload started: deliver what came early. */
	for (int sig = 1; sig < 64; sig++)
		if (pending & (1ull << sig))
			kill(-1, sig);

	while (!exited) {
		struct pollfd pfd[2] = {{sfd, POLLIN, 0}, {tfd, POLLIN, 0}};
		if (poll(pfd, tfd >= 0 ? 2 : 1, -1) < 0 && errno != EINTR)
			break;
		if (tfd >= 0 && (pfd[1].revents & POLLIN)) {
			uint64_t ticks;
			if (read(tfd, &ticks, sizeof(ticks)) < 0)
				ticks = 0;
			if (!killing) {
				/* Everything, not just the group: a child that
				 * called setsid() must not escape. */
				timed_out = 1;
				killing = true;
				kill(-1, SIGTERM);
				struct itimerspec its = {{0, 0}, {0, 0}};
				uint32_t g = st.grace_ms ? st.grace_ms : 2000;
				its.it_value.tv_sec = g / 1000;
				its.it_value.tv_nsec = (long)(g % 1000) * 1000000L;
				timerfd_settime(tfd, 0, &its, NULL);
			} else {
				kill(-1, SIGKILL);
			}
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		struct signalfd_siginfo si;
		while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
			if (si.ssi_signo == SIGCHLD)
				exited = reap(child, &wstatus) || exited;
			else if (si.ssi_pid == 0)
				/* From the host: an ancestor namespace has no
				 * pid here. */
				kill(-1, (int)si.ssi_signo);
		}
	}
	/* The workload is gone: nothing it started may outlive it. */
	kill(-1, SIGKILL);
	while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
		;
	sbx_status_send(status_fd, SBX_STATUS_EXIT, wstatus, 0, timed_out, "exit");
	_exit(0);
}

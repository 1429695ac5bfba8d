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

/* In the warm workload: report a setup failure to init, which passes it on
 * to the host once a request (and so a status fd) arrives. */
static __attribute__((noreturn)) void warm_fail(int sock, const char *what, int err_no)
{
	char msg[200];
	int n = snprintf(msg, sizeof(msg), "%s: %s", what, strerror(err_no));
	if (send(sock, msg, (size_t)n, MSG_NOSIGNAL) < 0)
		_exit(126);
	_exit(127);
}

/*
 * The workload, forked before the request exists: it gives up every
 * privilege first (ids, no_new_privs, capabilities, seccomp last), so all
 * of that is paid while the session is idle; then it waits for the
 * command, takes its stdio and execs.
 */
static __attribute__((noreturn)) void workload(const struct sbx_zygote_cfg *cfg, int sock)
{
	static char payload[SBX_PROTO_MAX_PAYLOAD];
	struct sbx_proto_run req;
	const char *cwd, **argv, **envp;
	int fds[4];
	sbx_err err;
	sigset_t none;

	sigemptyset(&none);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		signal(forwarded[i], SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Its own session: no controlling terminal of ours, its own group. */
	setsid();
	/* Ids first: the uid is already 1000, but make every id 1000 and drop
	 * any supplementary group (setgroups is denied when the host side is
	 * unprivileged; then there is nothing to drop). */
	if (setgroups(0, NULL) != 0 && errno != EPERM)
		warm_fail(sock, "setgroups", errno);
	if (setresgid(SBX_SANDBOX_GID, SBX_SANDBOX_GID, SBX_SANDBOX_GID) != 0 ||
	    setresuid(SBX_SANDBOX_UID, SBX_SANDBOX_UID, SBX_SANDBOX_UID) != 0)
		warm_fail(sock, "become the sandbox user", errno);
	struct rlimit core = {0, 0};
	setrlimit(RLIMIT_CORE, &core);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		warm_fail(sock, "no_new_privs", errno);
	if (sbx_caps_drop_all(&err) < 0)
		warm_fail(sock, err.msg, err.sys_errno);
	/* Everything but stdio goes at exec; the status fd stays usable until
	 * then to report a failed exec. */
	syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
	if (sbx_seccomp_install(cfg->seccomp, &err) < 0)
		warm_fail(sock, err.msg, err.sys_errno);

	int rc;
	while ((rc = sbx_proto_recv_run(sock, &req, payload, fds)) == 2)
		;
	if (rc != 0)
		_exit(127);
	int status_fd = fds[3];
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

void sbx_init_main(const struct sbx_zygote_cfg *cfg, int zsock)
{
	static char payload[SBX_PROTO_MAX_PAYLOAD];
	struct sbx_proto_run req;
	char setup_error[240] = "";
	int fds[4], wsock[2] = {-1, -1}, wstatus = 0, rc;
	uint32_t timed_out = 0;
	bool exited = false, killing = false;
	uint64_t pending = 0; /* signals the host sent before the request */
	pid_t child = -1;
	sigset_t mask;
	sbx_err err;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	prctl(PR_SET_NAME, "sbx-init");
	/* Not dumpable: the workload (same uid) cannot read our memory. */
	prctl(PR_SET_DUMPABLE, 0);
	sbx_close_fds_except(&zsock, 1);

	/* Block what we handle, so it queues on the signalfd; signals from
	 * inside the run queue too and are told apart by ssi_pid. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(&mask, forwarded[i]);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	if (sbx_rootfs_run_mounts(cfg, &err) < 0)
		snprintf(setup_error, sizeof(setup_error), "%.200s", err.msg);
	else if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, wsock) != 0)
		snprintf(setup_error, sizeof(setup_error), "socketpair: %s", strerror(errno));
	else if ((child = fork()) < 0)
		snprintf(setup_error, sizeof(setup_error), "fork: %s", strerror(errno));
	else if (child == 0) {
		close(wsock[0]);
		close(zsock);
		close(sfd);
		workload(cfg, wsock[1]);
	}
	if (wsock[1] >= 0)
		close(wsock[1]);

	/* Warm: wait for the request; a workload that failed to drop its
	 * privileges has said why on wsock and exited. */
	for (;;) {
		struct pollfd pfd[2] = {{zsock, POLLIN, 0}, {sfd, POLLIN, 0}};
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			_exit(1);
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == sizeof(si))
				if (si.ssi_signo != SIGCHLD && si.ssi_pid == 0 && si.ssi_signo < 64)
					pending |= 1ull << si.ssi_signo;
			if (child > 0 && reap(child, &wstatus)) {
				child = -1;
				ssize_t n = recv(wsock[0], setup_error, sizeof(setup_error) - 1,
						 MSG_DONTWAIT);
				setup_error[n > 0 ? n : 0] = '\0';
				if (!setup_error[0])
					snprintf(setup_error, sizeof(setup_error),
						 "the workload died while dropping privileges");
			}
		}
		if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		rc = sbx_proto_recv_run(zsock, &req, payload, fds);
		if (rc == 0)
			break;
		if (rc == 1)
			_exit(0);
	}
	close(zsock);
	int status_fd = fds[3];
	if (setup_error[0] || child < 0 || sbx_proto_send_run(wsock[0], &req, payload, fds) < 0) {
		sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, 0, 0, "%s",
				setup_error[0] ? setup_error : "the workload is gone");
		_exit(1);
	}
	close(wsock[0]);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	int tfd = make_timer(req.timeout_ms);
	/* The host may signal the run as soon as it has the pidfd, which can
	 * be before we read the request: deliver what came early. */
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
				uint32_t g = req.grace_ms ? req.grace_ms : 2000;
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

/*
 * init.c: sbx-init, PID 1 of every run.
 *
 * It starts in a fresh PID and mount namespace cloned by the zygote, still
 * holding the session's namespace capabilities.  It makes the per-run
 * mounts, forks the workload, then only waits: it reaps every zombie,
 * forwards the signals the host sends (sbx_run_kill: marked, from outside), enforces the
 * timeout (SIGTERM to everything, SIGKILL after the grace period) and, when
 * the workload exits, kills whatever it left behind and reports the status
 * to the host.  When PID 1 of a namespace exits the kernel kills the rest,
 * so nothing outlives the run.  Where the session allows it (cfg->reuse)
 * an init that has reported serves the session's next run instead of
 * ending: see sbx_init_main.
 *
 * The workload drops privileges in the order bubblewrap uses: ids, then
 * no_new_privs and capabilities, fds marked close-on-exec, seccomp last,
 * right before execve: one ordered list of steps per backend (privdrop.c).
 * Backend bubblewrap's runs exec bwrap instead (backend_bubblewrap_run.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Signals init forwards to the run when they come from outside. */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

/* A record is < PIPE_BUF: the write is atomic or fails whole. */
static void status_write(int fd, const struct sbx_status_rec *rec)
{
	while (write(fd, rec, sizeof(*rec)) < 0 && errno == EINTR)
		;
}

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
	status_write(fd, &rec);
}

void sbx_status_send_option(int fd, const char *option, int err_no, const char *fmt, ...)
{
	struct sbx_status_rec rec;
	va_list ap;

	memset(&rec, 0, sizeof(rec));
	rec.type = SBX_STATUS_ERROR;
	rec.err_no = err_no;
	snprintf(rec.option, sizeof(rec.option), "%s", option);
	va_start(ap, fmt);
	vsnprintf(rec.msg, sizeof(rec.msg), fmt, ap);
	va_end(ap);
	status_write(fd, &rec);
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
	"alias", "bg",	  "break",  "cd",    "chdir", "command",  "continue", "echo",	  "eval",
	"exec",	 "exit",  "export", "false", "fc",    "fg",	  "getopts",  "hash",	  "jobs",
	"kill",	 "local", "printf", "pwd",   "read",  "readonly", "return",   "set",	  "shift",
	"test",	 "times", "trap",   "true",  "type",  "ulimit",	  "umask",    "unalias",  "unset",
	"wait",	 "[",	  ".",	    ":",     "if",    "then",	  "else",     "elif",	  "fi",
	"case",	 "esac",  "for",    "while", "until", "do",	  "done",     "function", "select",
	"time",	 "!",	  "{",	    "}",     NULL};

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

/*
 * Wait for the host's request on sock (the socket the host was offered).
 * An idle run expires after idle_ms without one (0: never), so an idle
 * session keeps only its zygote (which offers a fresh run when the host
 * asks).  Expiring is atomic against the host: shutdown makes every later
 * send fail with EPIPE (the host then takes another run; an offer with
 * POLLHUP it drops unsent: session.c), and a request that came before it
 * is still queued and served.  A run that expired this way cannot be
 * reused: its next workload's "r" fails.  The wait stays in recvmsg (a
 * receive timeout, not poll), where reuse_spec looks for a ready workload.
 */
static void recv_request(int sock, uint32_t idle_ms, struct sbx_proto_run *req, char *payload,
			 int fds[4])
{
	int rc;

	if (idle_ms) {
		struct timeval tv = {(time_t)(idle_ms / 1000),
				     (suseconds_t)(idle_ms % 1000) * 1000};
		if (setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0)
			idle_ms = 0;
	}
	while ((rc = sbx_proto_recv_run(sock, req, payload, fds)) == 2)
		if (idle_ms && (errno == EAGAIN || errno == EWOULDBLOCK))
			shutdown(sock, SHUT_RDWR);
	if (rc != 0)
		_exit(0); /* the host dropped the offer, or it expired */
}

/*
 * The workload, forked before the request exists: it gives up every
 * privilege first (ids, no_new_privs, capabilities, seccomp last), so all
 * of that is paid while the session is idle; then it waits for the host's
 * request on hsock, passes the timeout and status fd to init over isock,
 * takes its stdio and execs.  A setup failure is reported on the status fd
 * of the request it then still waits for.
 */
static __attribute__((noreturn)) void workload(const struct sbx_zygote_cfg *cfg,
					       const struct sock_fprog *filter, int hsock,
					       int isock, bool say_ready, pid_t init_pid)
{
	static char payload[SBX_PROTO_MAX_PAYLOAD];
	struct sbx_proto_run req;
	const char *cwd, **argv, **envp, *what = NULL;
	int fds[4], err_no = 0;
	struct sbx_privdrop_fail drop;
	sigset_t none;

	sigemptyset(&none);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		signal(forwarded[i], SIG_DFL);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Its own session: no controlling terminal of ours, its own group. */
	setsid();
	/* The backend's privilege drop, one ordered list of steps each
	 * (privdrop.c); a failure is reported once the request has come. */
	if (sbx_privdrop(cfg, filter, &drop) < 0)
		what = drop.what, err_no = drop.err_no;

	/* Without a PID namespace, init's end would not end us: ask for it,
	 * after the ids changed (a change of credentials clears the setting),
	 * and make sure init did not end before we asked (the host may kill a
	 * run right after it started: we would live on, orphaned). */
	if (cfg->none && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != init_pid))
		_exit(0);
	/* A reused init is ready again once this workload is: tell the host,
	 * which waits for it before it sends the request (init itself may be
	 * suspended until we exec: start_workload). */
	if (say_ready && send(hsock, "r", 1, MSG_NOSIGNAL) != 1)
		_exit(0);
	/* With a memory ceiling the host raises our OOM score before it
	 * sends the request: a fresh init's workload says it exists ("w"). */
	if (!say_ready && cfg->memory_limited && send(hsock, "w", 1, MSG_NOSIGNAL) != 1)
		_exit(0);
	recv_request(hsock, cfg->idle_ms, &req, payload, fds);
	int status_fd = fds[3];
	if (what) {
		/* Never run a command with privileges we failed to drop. */
		sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, err_no, 0, "%s: %s", what,
				strerror(err_no));
		_exit(127);
	}
	send_started(isock, &req, status_fd);
	if (req.pty_rows) {
		/* A terminal of the run's own devpts (pty.c); never on a
		 * backend without a mount namespace per run (the host's). */
		const char *step = "pty: no devpts of the run's own on this backend";
		if (cfg->none)
			errno = ENOTSUP;
		if (cfg->none ||
		    sbx_pty_open_inside(fds[0], req.pty_rows, req.pty_cols, &step) < 0) {
			sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "%s: %s", step,
					strerror(errno));
			_exit(127);
		}
	}
	for (int i = 0; i < 3 && !req.pty_rows; i++)
		if (dup2(fds[i], i) < 0) {
			sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "stdio: %s",
					strerror(errno));
			_exit(127);
		}
	if (unpack(&req, payload, &cwd, &argv, &envp) < 0) {
		sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, EINVAL, 0, "malformed run request");
		_exit(127);
	}
	if (cfg->bwrap_argv)
		sbx_bwrap_run_exec(cfg, cwd, argv, envp, status_fd);
	char host_cwd[PATH_MAX];
	if (cfg->none && !strncmp(cwd, SBX_SANDBOX_WORKDIR, strlen(SBX_SANDBOX_WORKDIR))) {
		/* No mount namespace: the inside path is the host work dir. */
		snprintf(host_cwd, sizeof(host_cwd), "%.2048s%.2000s", cfg->host_work_dir,
			 cwd + strlen(SBX_SANDBOX_WORKDIR));
		cwd = host_cwd;
	}
	if (chdir(cwd) != 0) {
		sbx_status_send_option(status_fd, "cwd", errno, "cwd %s: %s", cwd, strerror(errno));
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

/* The session's end as a timer (absolute, so a run started after it
 * fires at once), or -1 when the session has none. */
static int make_expiry_timer(const struct sbx_zygote_cfg *cfg)
{
	struct itimerspec its;

	if (!cfg->expire_at_ms)
		return -1;
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	if (fd < 0)
		return -1;
	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = (time_t)(cfg->expire_at_ms / 1000);
	its.it_value.tv_nsec = (long)(cfg->expire_at_ms % 1000) * 1000000L;
	timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL);
	return fd;
}

/* Backends none/bubblewrap: signal every descendant of ours at least
 * min_depth generations down (1: our children), found in /proc by parent
 * pid (orphans of the run are ours: we are their subreaper).  SIGKILL goes
 * pass after pass until a pass finds none left alive (at most a few);
 * other signals once.  False when there was none to signal. */
static bool signal_descendants(int sig, int min_depth)
{
	static pid_t pid[4096], ppid[4096];
	static unsigned char depth[4096];
	pid_t me = getpid();

	for (int pass = 0; pass < (sig == SIGKILL ? 8 : 1); pass++) {
		DIR *d = opendir("/proc");
		size_t n = 0;
		struct dirent *e;
		while (d && (e = readdir(d)) && n < 4096) {
			char path[64], buf[512];
			if (e->d_name[0] < '1' || e->d_name[0] > '9')
				continue;
			snprintf(path, sizeof(path), "/proc/%.20s/stat", e->d_name);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			ssize_t len = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
			if (fd >= 0)
				close(fd);
			char *paren = len > 0 ? (buf[len] = '\0', strrchr(buf, ')')) : NULL;
			char state;
			int pp;
			/* after "pid (comm)": " state ppid ..."; zombies are done */
			if (!paren || sscanf(paren + 1, " %c %d", &state, &pp) != 2 || state == 'Z')
				continue;
			pid[n] = (pid_t)atoi(e->d_name);
			ppid[n++] = (pid_t)pp;
		}
		if (d)
			closedir(d);
		/* Descendants, a generation at a time, until none is added. */
		memset(depth, 0, n);
		bool grew = true, any = false;
		for (int gen = 1; grew && gen < 255; gen++) {
			grew = false;
			for (size_t i = 0; i < n; i++) {
				if (depth[i])
					continue;
				bool child = ppid[i] == me && gen == 1;
				for (size_t j = 0; !child && j < n; j++)
					child = depth[j] == gen - 1 && gen > 1 && ppid[i] == pid[j];
				if (child) {
					depth[i] = (unsigned char)gen;
					grew = true;
					any = any || gen >= min_depth;
				}
			}
		}
		if (!any)
			return pass > 0;
		for (size_t i = 0; i < n; i++)
			if (depth[i] >= min_depth)
				kill(pid[i], sig);
	}
	return true;
}

/* Signal everything of the run: with a PID namespace of its own that is
 * every process init can see; backend "none" has none, so the workload's
 * process group (it called setsid), and for SIGKILL every descendant.
 * bubblewrap: bwrap (our child) and its PID 1 in the run's namespace (its
 * child) would die of a SIGTERM the command ignores and take the command
 * with them, so a signal other than SIGKILL goes to the command's
 * processes only (two generations down), as on the native backends; one
 * that comes before the command exists ends the run as it would have. */
static void kill_run(const struct sbx_zygote_cfg *cfg, pid_t child, int sig)
{
	if (sig == SBX_SIG_KILL_RUN)
		sig = SIGKILL;
	if (!cfg->none) {
		kill(-1, sig);
		return;
	}
	if (cfg->bwrap_argv && sig != SIGKILL && signal_descendants(sig, 3))
		return;
	kill(-child, sig);
	if (sig == SIGKILL)
		signal_descendants(SIGKILL, 1);
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

/* A signal the host sent to this run (sbx_run_kill): marked by
 * sbx_sys_pidfd_send_signal and, with a PID namespace, from outside it (no
 * pid here).  Any other (a terminal's Ctrl-C, a kill of a process group, a
 * signal meant for an idle init) is dropped: it must reach neither this run
 * nor, replayed, the next. */
static bool from_host(const struct sbx_zygote_cfg *cfg, const struct signalfd_siginfo *si)
{
	return si->ssi_code == SI_QUEUE && si->ssi_int == SBX_SIG_MARK &&
	       (si->ssi_pid == 0 || cfg->none);
}

/* No run can start here: say why to whoever sends the request (however
 * long that takes: the host must hear why), and end. */
static __attribute__((noreturn)) void refuse(int hsock, const char *why)
{
	static char payload[SBX_PROTO_MAX_PAYLOAD];
	struct sbx_proto_run req;
	int fds[4];

	recv_request(hsock, 0, &req, payload, fds);
	sbx_status_send(fds[3], SBX_STATUS_ERROR, 0, 0, 0, "%s", why);
	_exit(1);
}

/*
 * Fork the workload (child: it never returns), with vfork: init has
 * nothing to do until the workload has the request
 * and execs (signals the host sends meanwhile wait on the signalfd, and a
 * workload that dies first wakes us as well), so the workload may borrow
 * init's memory until then.  That spares a run the copy of init's page
 * tables, the copy-on-write faults after it and the teardown of the copy
 * at exec, most of what forking cost per run.  The workload only touches
 * its own frames (below ours) and its own statics, and changes only
 * per-task state (ids, capabilities, rlimits, seccomp, signal mask, fds:
 * not shared by vfork).  With a memory ceiling the host must see the
 * workload before it sends the request: the workload itself says so
 * ("w", or "r" when reused), as init is suspended until it execs.
 * noinline: the vfork stays in this frame, which the child never returns
 * from.
 */
static __attribute__((noinline)) pid_t start_workload(const struct sbx_zygote_cfg *cfg,
						      const struct sock_fprog *filter, int hsock,
						      const int wsock[2], int sfd, bool say_ready)
{
	pid_t init_pid = getpid();
	pid_t pid = vfork();

	if (pid == 0) {
		close(wsock[0]);
		close(sfd);
		workload(cfg, filter, hsock, wsock[1], say_ready, init_pid);
	}
	/* The workload's change of ids set the dumpable flag of the memory
	 * we shared (to the host's suid_dumpable): ours again, not dumpable. */
	prctl(PR_SET_DUMPABLE, 0);
	return pid;
}

/* refuse() for an init's first run: with a memory ceiling the host sends
 * the request only once the workload said it exists ("w"), which a
 * workload never forked cannot say. */
static __attribute__((noreturn)) void refuse_first(const struct sbx_zygote_cfg *cfg, int hsock,
						   const char *why)
{
	if (cfg->memory_limited)
		(void)!send(hsock, "w", 1, MSG_NOSIGNAL);
	refuse(hsock, why);
}

/*
 * With a memory ceiling: wait until the host has put us in the run's own
 * cgroup ("P": placer.c), so the workload is born in it, then root a
 * cgroup namespace there: the run sees "/" for its cgroup, not the step
 * down from the session's (backends none and bubblewrap: no namespace of
 * ours; bwrap makes its own).  The host dropping us first ends us.
 */
static void wait_placed(const struct sbx_zygote_cfg *cfg, int hsock)
{
	char c = 0;
	ssize_t n;

	while ((n = recv(hsock, &c, 1, 0)) < 0 && errno == EINTR)
		;
	if (n != 1 || c != 'P')
		_exit(0);
	if (!cfg->none && unshare(CLONE_NEWCGROUP) != 0) {
		char why[96];
		snprintf(why, sizeof(why), "cgroup namespace: %s", strerror(errno));
		refuse_first(cfg, hsock, why);
	}
}

/*
 * One run: fork the workload, wait until it says it started (or is gone),
 * then supervise it until it exits, kill what it left and report.  reused:
 * an earlier run was served here, so the host waits for our "r" before it
 * sends the request.  True when this init may serve another run: it
 * ended without the host signalling it (a signal from the host marks the
 * run the host gives up on).
 */
static bool serve(const struct sbx_zygote_cfg *cfg, int hsock, int sfd, bool reused)
{
	struct started st;
	int wsock[2] = {-1, -1}, wstatus = 0, status_fd = -1;
	uint32_t timed_out = 0;
	bool exited = false, killing = false, killed_by_us = false, host_signalled = false;
	uint64_t pending = 0; /* signals the host sent before the run started */
	pid_t child = -1;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, wsock) != 0) {
		if (reused) /* the host has no "r": it takes another init */
			_exit(1);
		refuse(hsock, strerror(errno));
	}
	/* (A reused init stays in the run cgroup it was placed in.) */
	if (cfg->memory_limited && !reused)
		wait_placed(cfg, hsock);
	/* The init stage of the filter, once (after the placement's unshare):
	 * each workload then installs only the run stage, a few instructions,
	 * instead of the whole filter's JIT and action cache (0.1 ms of CPU a
	 * run, beside the next run).  From the first run on, so that every
	 * run sees the same filters (two, in /proc/self/status), whether its
	 * init served before or not. */
	sbx_err serr;
	int staged = sbx_init_stage_install(cfg, &serr);
	if (staged < 0) {
		if (reused)
			_exit(1);
		refuse_first(cfg, hsock, serr.msg);
	}
	const struct sock_fprog *filter =
		staged ? sbx_seccomp_stage(cfg->seccomp, SBX_SC_STAGE_RUN) : cfg->seccomp;
	/* At a pids ceiling keep trying for a while, or the next run would
	 * get this init's refusal although the bomb is long over. */
	int tries = 0;
	while ((child = start_workload(cfg, filter, hsock, wsock, sfd, reused)) < 0) {
		if (sbx_sys_fork_retry(&tries))
			continue;
		if (reused)
			_exit(1);
		refuse_first(cfg, hsock,
			     errno == EAGAIN ? "fork the workload: the session is at its pids "
					       "ceiling"
					     : strerror(errno));
	}
	close(wsock[1]);
	/* The request goes straight to the workload. */
	if (!cfg->reuse)
		close(hsock);

	/* Warm: wait until the workload says it started (or is gone). */
	for (;;) {
		struct pollfd pfd[2] = {{wsock[0], POLLIN, 0}, {sfd, POLLIN, 0}};
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			_exit(1);
		if (pfd[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) == sizeof(si))
				if (si.ssi_signo != SIGCHLD && from_host(cfg, &si) &&
				    si.ssi_signo < 64)
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
	/* The session's end cuts the run short the same way, with the
	 * session's grace; the end is reported as the session's. */
	int efd = make_expiry_timer(cfg);
	bool expiring = false;
	/* The host may signal the run as soon as it has the pidfd, which can
	 * be before the workload started: deliver what came early. */
	for (int sig = 1; sig < 64; sig++)
		if (pending & (1ull << sig)) {
			host_signalled = true;
			kill_run(cfg, child, sig);
		}

	while (!exited) {
		struct pollfd pfd[3] = {{sfd, POLLIN, 0}, {tfd, POLLIN, 0}, {efd, POLLIN, 0}};
		if (poll(pfd, 3, -1) < 0 && errno != EINTR)
			break;
		if (efd >= 0 && (pfd[2].revents & POLLIN)) {
			uint64_t ticks;
			if (read(efd, &ticks, sizeof(ticks)) < 0)
				ticks = 0;
			if (!expiring) {
				/* A run already past its own timeout keeps
				 * that reason (and its shorter grace). */
				if (!killing)
					timed_out = SBX_STATUS_EXPIRED;
				expiring = true;
				kill_run(cfg, child, SIGTERM);
				struct itimerspec its = {{0, 0}, {0, 0}};
				its.it_value.tv_sec = cfg->expire_grace_ms / 1000;
				its.it_value.tv_nsec =
					(long)(cfg->expire_grace_ms % 1000) * 1000000L;
				if (!cfg->expire_grace_ms)
					its.it_value.tv_nsec = 1;
				timerfd_settime(efd, 0, &its, NULL);
			} else {
				kill_run(cfg, child, SIGKILL);
			}
		}
		if (tfd >= 0 && (pfd[1].revents & POLLIN)) {
			uint64_t ticks;
			if (read(tfd, &ticks, sizeof(ticks)) < 0)
				ticks = 0;
			if (!killing) {
				/* Everything, not just the group: a child that
				 * called setsid() must not escape. */
				if (!expiring)
					timed_out = 1;
				killing = true;
				kill_run(cfg, child, SIGTERM);
				struct itimerspec its = {{0, 0}, {0, 0}};
				uint32_t g = st.grace_ms ? st.grace_ms : 2000;
				its.it_value.tv_sec = g / 1000;
				its.it_value.tv_nsec = (long)(g % 1000) * 1000000L;
				timerfd_settime(tfd, 0, &its, NULL);
			} else {
				kill_run(cfg, child, SIGKILL);
			}
		}
		if (!(pfd[0].revents & POLLIN))
			continue;
		struct signalfd_siginfo si;
		while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
			if (si.ssi_signo == SIGCHLD)
				exited = reap(child, &wstatus) || exited;
			else if (from_host(cfg, &si)) {
				host_signalled = true;
				killed_by_us = killed_by_us || si.ssi_signo == SIGKILL ||
					       si.ssi_signo == SBX_SIG_KILL_RUN;
				kill_run(cfg, child, (int)si.ssi_signo);
			}
		}
	}
	if (tfd >= 0)
		close(tfd);
	if (efd >= 0)
		close(efd);
	/* The workload is gone: nothing it started may outlive it.  Until
	 * waitpid says we have no child left, the PID namespace is not empty
	 * (orphans become ours); a process forking as we kill is killed by
	 * the next pass. */
	kill_run(cfg, child, SIGKILL);
	for (;;) {
		pid_t p = waitpid(-1, NULL, cfg->none ? WNOHANG : 0);
		if (p > 0 || (p < 0 && errno == EINTR)) {
			if (!cfg->none)
				kill(-1, SIGKILL);
			continue;
		}
		break;
	}
	/* Killed at a memory ceiling (SIGKILL we did not send, or a shell
	 * reporting one): the run's /tmp and /dev/shm pages may be what
	 * filled it.  Free them before the host hears of the end, or its
	 * next run would start in a cgroup that is still full.  (Backends
	 * without a mount namespace of their own share the host's /tmp.) */
	if (cfg->memory_limited && !cfg->none && !killed_by_us &&
	    ((WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) ||
	     (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 128 + SIGKILL))) {
		umount2("/tmp", MNT_DETACH);
		umount2("/dev/shm", MNT_DETACH);
	}
	/* bwrap reports its command's death by signal n as exit 128 + n,
	 * like a shell: give it back its meaning. */
	if (cfg->bwrap_argv && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) > 128 &&
	    WEXITSTATUS(wstatus) < 128 + 32)
		wstatus = WEXITSTATUS(wstatus) - 128;
	sbx_status_send(status_fd, SBX_STATUS_EXIT, wstatus, 0, timed_out, "exit");
	/* Our copy is the last: the host sees the end of the run now. */
	close(status_fd);
	return !host_signalled;
}

/*
 * A reused init's limits back to what it was born with (the session's),
 * before it serves again: where init and the workload share a uid (an
 * unprivileged host side maps only one id) a run may have changed them
 * with prlimit(2), and the next workload would inherit that (a lowered
 * RLIMIT_FSIZE kills it with SIGXFSZ, a lowered RLIMIT_NOFILE hard limit
 * makes its own setrlimit fail).  -1 when a limit cannot be restored (a
 * hard limit was lowered): this init must not serve again.
 */
static int restore_rlimits(const struct rlimit born[RLIM_NLIMITS])
{
	for (int r = 0; r < RLIM_NLIMITS; r++) {
		struct rlimit now;
		if (getrlimit(r, &now) != 0)
			continue; /* a resource this kernel does not have */
		if ((now.rlim_cur != born[r].rlim_cur || now.rlim_max != born[r].rlim_max) &&
		    setrlimit(r, &born[r]) != 0)
			return -1;
	}
	return 0;
}

void sbx_init_main(const struct sbx_zygote_cfg *cfg, int hsock)
{
	struct rlimit born[RLIM_NLIMITS];
	sbx_scratch_mark mark;
	sigset_t mask;
	sbx_err err;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	prctl(PR_SET_NAME, "sbx-init");
	for (int r = 0; r < RLIM_NLIMITS; r++)
		if (getrlimit(r, &born[r]) != 0)
			born[r].rlim_cur = born[r].rlim_max = RLIM_INFINITY;
	/* Not dumpable: the workload (same uid) cannot read our memory. */
	prctl(PR_SET_DUMPABLE, 0);
	int keep[2 + SBX_FS_MAX_DATA + SBX_MAX_CARRY] = {hsock,
							 cfg->bwrap_argv ? cfg->userns_fd : -1};
	size_t nkeep = 2;
	for (int i = 0; i < SBX_FS_MAX_DATA; i++)
		keep[nkeep++] = cfg->bwrap_argv ? cfg->bwrap_data_fd[i] : -1;
	for (size_t i = 0; cfg->bwrap_argv && i < cfg->n_idmap; i++)
		keep[nkeep++] = cfg->idmap_fd[i];
	sbx_close_fds_except(keep, nkeep);

	/* The zygote had these blocked already, so none was lost before this
	 * point; they queue on the signalfd, and signals from inside the run
	 * are told apart by ssi_pid. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	for (size_t i = 0; i < sizeof(forwarded) / sizeof(forwarded[0]); i++)
		sigaddset(&mask, forwarded[i]);
	if (cfg->none)
		sigaddset(&mask, SBX_SIG_KILL_RUN);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	/* Backend "none": not PID 1 of anything, so adopt the orphans. */
	if (cfg->none)
		prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (!cfg->none && sbx_rootfs_run_mounts(cfg, &err) < 0)
		refuse(hsock, err.msg);
	if (cfg->reuse)
		sbx_rootfs_scratch_mark(&mark);
	/*
	 * Reuse (sessions without a memory ceiling, backends userns and
	 * privileged): once a run has ended and reported, its PID namespace
	 * is empty again (serve waited until we had no child left), and what
	 * it could change of our mount namespace is /tmp and /dev/shm, which
	 * are replaced when the run left anything there.  So the next run
	 * finds what a fresh init would give it, without the clone of two
	 * namespaces and the teardown of both that a fresh one costs.  The
	 * host gives us back to the session only after a run it did not
	 * signal (run.c), and closes the socket otherwise: then the next
	 * workload reads EOF, and we end.
	 */
	for (bool reused = false;; reused = true) {
		bool again = serve(cfg, hsock, sfd, reused);
		if (!cfg->reuse || !again)
			_exit(0);
		struct signalfd_siginfo si;
		while (read(sfd, &si, sizeof(si)) == sizeof(si))
			; /* SIGCHLDs of the reaped run */
		/* Ending here (no "r") makes the host take a fresh init. */
		if (restore_rlimits(born) < 0 || sbx_rootfs_scratch_reset(cfg, &mark, &err) < 0)
			_exit(1);
		sbx_rootfs_scratch_mark(&mark);
	}
}

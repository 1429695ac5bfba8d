/*
 * session.c: host side of a session: work dir, the zygote's birth and
 * death, and cleanup.
 *
 * Open: make (or check) the work dir and give it to the sandbox's host
 * uid, compile the seccomp filter once, clone the zygote into fresh user,
 * mount, PID, network, IPC, UTS and cgroup namespaces, write its id maps,
 * let it build its root, and wait for it to say ready (or why not).
 * Close: SIGKILL the zygote (the kernel then kills every process of the
 * session, as the zygote is PID 1 of its PID namespace), reap it, and
 * remove the session dir unless the work dir was pinned by the caller.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <sys/file.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define READY_TIMEOUT_MS 10000
#define DEFAULT_TMP_BYTES (256ull << 20)
#define DEFAULT_SHM_BYTES (64ull << 20)

struct sbx_session {
	pid_t zygote;
	int ctl_fd;
	int work_fd;
	int lock_fd;        /* flock'd while the session lives */
	uid_t host_uid;
	gid_t host_gid;
	bool pinned;
	char id[33];
	char session_dir[PATH_MAX]; /* state_dir/sessions/<id>, "" when pinned */
	char work_dir[PATH_MAX];
};

/* Wait for the zygote's next offer of a warm init. */
static int recv_offer(sbx_session *s, int *sock, int *pidfd, sbx_err *err)
{
	struct sbx_proto_offer off;
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {&off, sizeof(off)};
	struct msghdr mh;
	struct pollfd pfd = {s->ctl_fd, POLLIN, 0};
	int fds[2] = {-1, -1}, pr;

	while ((pr = poll(&pfd, 1, READY_TIMEOUT_MS)) < 0 && errno == EINTR)
		;
	if (pr == 0)
		return sbx_err_set(err, SBX_E_EXECUTION, ETIMEDOUT,
				   "the sandbox did not offer a run within %d ms", READY_TIMEOUT_MS);
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = u.buf;
	mh.msg_controllen = sizeof(u.buf);
	ssize_t n;
	while ((n = recvmsg(s->ctl_fd, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (n <= 0)
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, errno, "the session has ended");
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(fds)))
		memcpy(fds, CMSG_DATA(c), sizeof(fds));
	if (n != sizeof(off) || off.magic != SBX_PROTO_MAGIC || off.err_no != 0 || fds[0] < 0 ||
	    fds[1] < 0) {
		for (int i = 0; i < 2; i++)
			if (fds[i] >= 0)
				close(fds[i]);
		return sbx_err_set(err, SBX_E_EXECUTION, off.err_no,
				   "the sandbox could not prepare a run: %s",
				   off.err_no ? strerror(off.err_no) : "garbled offer");
	}
	*pidfd = fds[0];
	*sock = fds[1];
	return 0;
}

int sbx_session_take_warm(sbx_session *s, int *sock, int *pidfd, sbx_err *err)
{
	uint32_t want = SBX_PROTO_MAGIC;

	if (s->ctl_fd < 0)
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, 0, "the session is closed");
	if (recv_offer(s, sock, pidfd, err) < 0)
		return -1;
	/* Ask for the next one now: the zygote prepares it while this run
	 * goes on.  A full socket cannot happen: one request per offer. */
	if (send(s->ctl_fd, &want, sizeof(want), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		close(*sock);
		close(*pidfd);
		return sbx_err_set(err, SBX_E_SESSION_CLOSED, errno, "the session has ended");
	}
	return 0;
}

const char *sbx_session_work_dir(const sbx_session *s)
{
	return s->work_dir;
}

int sbx_session_work_dir_fd(const sbx_session *s)
{
	return s->work_fd;
}

uid_t sbx_session_host_uid(const sbx_session *s)
{
	return s->host_uid;
}

gid_t sbx_session_host_gid(const sbx_session *s)
{
	return s->host_gid;
}

const char *sbx_session_id(const sbx_session *s)
{
	return s->id;
}

bool sbx_session_alive(sbx_session *s)
{
	if (!s || s->zygote <= 0)
		return false;
	int st;
	pid_t p = waitpid(s->zygote, &st, WNOHANG);
	if (p == s->zygote) {
		s->zygote = -1;
		return false;
	}
	return p == 0;
}

static int mkdir_owned(const char *path, mode_t mode, sbx_err *err)
{
	if (mkdir(path, mode) != 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "mkdir %s: %s", path,
				   strerror(errno));
	return 0;
}

static const char *default_state_dir(char *buf, size_t len)
{
	const char *env = getenv("SBX_STATE_DIR");
	if (env && *env)
		return env;
	if (geteuid() == 0)
		return "/var/lib/sbx";
	env = getenv("XDG_RUNTIME_DIR");
	if (env && *env)
		snprintf(buf, len, "%s/sbx", env);
	else
		snprintf(buf, len, "/tmp/sbx-%u", (unsigned)geteuid());
	return buf;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw);

/*
 * A session dir holds a "lock" file its session keeps flock'd.  A lock we
 * can take belongs to a session whose process died (kill -9, crash): its
 * processes died with it (the zygote has PDEATHSIG), so remove what it left.
 */
static void sweep_stale(const char *sessions)
{
	char path[PATH_MAX];
	struct dirent *de;
	DIR *d = opendir(sessions);

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || strlen(de->d_name) != 32)
			continue;
		snprintf(path, sizeof(path), "%.4000s/%.40s/lock", sessions, de->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		struct stat st;
		/* No lock yet: a session being created right now, unless old. */
		if (fd < 0 && (errno != ENOENT || fstatat(dirfd(d), de->d_name, &st, 0) != 0 ||
			       time(NULL) - st.st_mtime < 60))
			continue;
		if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
			close(fd);
			continue;
		}
		snprintf(path, sizeof(path), "%.4000s/%.40s", sessions, de->d_name);
		nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
		if (fd >= 0)
			close(fd);
	}
	closedir(d);
}

static int prepare_work_dir(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	char buf[PATH_MAX], sessions[PATH_MAX];
	unsigned char rnd[16];

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "getrandom: %s", strerror(errno));
	for (int i = 0; i < 16; i++)
		snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);

	if (o->work_dir) {
		struct stat st;
		if (o->work_dir[0] != '/' || !realpath(o->work_dir, s->work_dir))
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, errno,
					   "work_dir %s: must be an existing absolute directory",
					   o->work_dir);
		if (stat(s->work_dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
		    !strcmp(s->work_dir, "/"))
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENOTDIR,
					   "work_dir %s: not a directory", o->work_dir);
		s->pinned = true;
	} else {
		const char *state = o->state_dir ? o->state_dir : default_state_dir(buf, sizeof(buf));
		if (state[0] != '/')
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "state_dir %s: must be absolute", state);
		if (snprintf(sessions, sizeof(sessions), "%s/sessions", state) >= 4000)
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENAMETOOLONG,
					   "state_dir %s: path too long", state);
		/* 0711: the sandbox's host uid must traverse to its work dir,
		 * nobody may list the other sessions. */
		if (mkdir_owned(state, 0711, err) < 0 || mkdir_owned(sessions, 0711, err) < 0)
			return -1;
		if (snprintf(s->session_dir, sizeof(s->session_dir), "%.4000s/%s", sessions, s->id) >=
			    (int)sizeof(s->session_dir) - 8 ||
		    snprintf(s->work_dir, sizeof(s->work_dir), "%.4000s/work", s->session_dir) >=
			    (int)sizeof(s->work_dir))
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENAMETOOLONG,
					   "state_dir %s: path too long", state);
		sweep_stale(sessions);
		if (mkdir(s->session_dir, 0711) != 0)
			return sbx_err_set(err, SBX_E_EXECUTION, errno, "create %s: %s",
					   s->session_dir, strerror(errno));
		char lock[PATH_MAX];
		snprintf(lock, sizeof(lock), "%.4000s/lock", s->session_dir);
		s->lock_fd = open(lock, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (s->lock_fd < 0 || flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0 ||
		    mkdir(s->work_dir, 0700) != 0)
			return sbx_err_set(err, SBX_E_EXECUTION, errno, "create work dir %s: %s",
					   s->work_dir, strerror(errno));
	}
	if (geteuid() == 0 && chown(s->work_dir, s->host_uid, s->host_gid) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "chown %s to %u: %s", s->work_dir,
				   (unsigned)s->host_uid, strerror(errno));
	s->work_fd = open(s->work_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (s->work_fd < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "open %s: %s", s->work_dir,
				   strerror(errno));
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) == 0 || errno == ENOENT ? 0 : -1;
}

/* Child side: become the sandbox user, build the root, report, serve. */
static __attribute__((noreturn)) void zygote_child(const sbx_session_opts *o, const sbx_session *s,
						   int sync_fd, int ctl_fd,
						   const struct sock_fprog *prog)
{
	struct sbx_proto_ready ready;
	struct sbx_zygote_cfg cfg;
	sbx_err err;
	char c;

	memset(&ready, 0, sizeof(ready));
	ready.magic = SBX_PROTO_MAGIC;
	memset(&err, 0, sizeof(err));
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Nothing of the host process may reach the sandbox: not its other
	 * sessions' sockets, not its terminal. */
	int keep[2] = {sync_fd, ctl_fd};
	sbx_close_fds_except(keep, 2);
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int i = 0; devnull >= 0 && i < 3; i++)
		dup2(devnull, i);
	if (devnull > 2)
		close(devnull);
	/* Wait until the host has written our id maps. */
	if (read(sync_fd, &c, 1) != 1)
		_exit(1);
	close(sync_fd);
	if ((setgroups(0, NULL) != 0 && errno != EPERM) ||
	    setresgid(SBX_SANDBOX_GID, SBX_SANDBOX_GID, SBX_SANDBOX_GID) != 0 ||
	    setresuid(SBX_SANDBOX_UID, SBX_SANDBOX_UID, SBX_SANDBOX_UID) != 0) {
		sbx_err_set(&err, SBX_E_BACKEND_UNAVAILABLE, errno, "become uid %d: %s",
			    SBX_SANDBOX_UID, strerror(errno));
	} else if (sbx_caps_drop_bounding(&err) == 0 &&
		   sbx_rootfs_build(o, s->work_dir, &err) == 0) {
		err.kind = SBX_E_NONE;
	}
	ready.err_no = err.sys_errno;
	ready.kind = err.kind;
	snprintf(ready.msg, sizeof(ready.msg), "%s", err.msg);
	if (send(ctl_fd, &ready, sizeof(ready), MSG_NOSIGNAL) < 0 || err.kind != SBX_E_NONE)
		_exit(1);
	memset(&cfg, 0, sizeof(cfg));
	cfg.ctl_fd = ctl_fd;
	size_t nc = 0;
	cfg.carry[nc++] = SBX_SANDBOX_WORKDIR;
	for (size_t i = 0; i < o->n_binds && nc < SBX_MAX_CARRY; i++)
		if (sbx_rootfs_is_scratch(o->binds[i].path))
			cfg.carry[nc++] = o->binds[i].path;
	cfg.seccomp = prog;
	cfg.tmp_bytes = o->tmp_bytes ? o->tmp_bytes : DEFAULT_TMP_BYTES;
	cfg.shm_bytes = o->shm_bytes ? o->shm_bytes : DEFAULT_SHM_BYTES;
	cfg.lifetime_ms = o->lifetime_ms;
	sbx_zygote_main(&cfg);
}

static int wait_ready(sbx_session *s, sbx_err *err)
{
	struct sbx_proto_ready ready;
	struct pollfd pfd = {s->ctl_fd, POLLIN, 0};

	int n = poll(&pfd, 1, READY_TIMEOUT_MS);
	if (n == 0)
		return sbx_err_set(err, SBX_E_EXECUTION, ETIMEDOUT,
				   "the sandbox did not become ready within %d ms",
				   READY_TIMEOUT_MS);
	ssize_t got = recv(s->ctl_fd, &ready, sizeof(ready), 0);
	if (got != (ssize_t)sizeof(ready) || ready.magic != SBX_PROTO_MAGIC)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, EPIPE,
				   "backend userns: the sandbox died while setting up");
	if (ready.kind != SBX_E_NONE) {
		ready.msg[sizeof(ready.msg) - 1] = '\0';
		return sbx_err_set(err, (sbx_err_kind)ready.kind, ready.err_no,
				   "backend userns: %s", ready.msg);
	}
	return 0;
}

sbx_session *sbx_session_open(const sbx_session_opts *o, sbx_err *err)
{
	int sync[2] = {-1, -1}, ctl[2] = {-1, -1};
	struct sock_fprog *prog = NULL;
	sbx_session *s;

	if (!o->backend || strcmp(o->backend, "userns") != 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "backend '%s' is not provided by this core",
				   o->backend ? o->backend : "(null)"),
		       NULL;
	for (size_t i = 0; i < o->n_binds; i++) {
		const char *p = o->binds[i].path;
		if (!p || p[0] != '/' || strstr(p, "/../") || !strcmp(p, "/tmp") ||
		    !strcmp(p, "/dev/shm") || !strcmp(p, SBX_SANDBOX_WORKDIR) ||
		    !strncmp(p, SBX_SANDBOX_WORKDIR "/", strlen(SBX_SANDBOX_WORKDIR) + 1) ||
		    strlen(p) >= PATH_MAX - 16)
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "bind path '%s' is not allowed (absolute, normalized, not "
					   "/tmp, /dev/shm or the work dir)",
					   p ? p : "(null)"),
			       NULL;
	}
	if (o->n_binds >= SBX_MAX_CARRY)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "at most %d extra paths",
				   SBX_MAX_CARRY - 1),
		       NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory"), NULL;
	s->zygote = -1;
	s->ctl_fd = s->work_fd = s->lock_fd = -1;
	if (geteuid() == 0) {
		s->host_uid = o->host_uid ? o->host_uid : SBX_DEFAULT_HOST_UID;
		s->host_gid = (gid_t)s->host_uid;
	} else {
		s->host_uid = geteuid();
		s->host_gid = getegid();
	}
	if (prepare_work_dir(s, o, err) < 0)
		goto fail;
	prog = sbx_seccomp_compile(o->seccomp_deny, err);
	if (!prog)
		goto fail;
	if (pipe2(sync, O_CLOEXEC) != 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "pipe: %s", strerror(errno));
		goto fail;
	}
	pid_t pid = sbx_sys_clone3_fork(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
						CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP,
					NULL);
	if (pid < 0) {
		sbx_userns_explain(errno, err);
		goto fail;
	}
	if (pid == 0) {
		close(sync[1]);
		close(ctl[0]);
		zygote_child(o, s, sync[0], ctl[1], prog);
	}
	s->zygote = pid;
	close(sync[0]);
	close(ctl[1]);
	sync[0] = ctl[1] = -1;
	s->ctl_fd = ctl[0];
	if (sbx_userns_write_maps(pid, s->host_uid, s->host_gid, err) < 0)
		goto fail;
	if (write(sync[1], "x", 1) != 1) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "start the sandbox: %s", strerror(errno));
		goto fail;
	}
	close(sync[1]);
	sync[1] = -1;
	if (wait_ready(s, err) < 0)
		goto fail;
	/* The zygote has its own copy; ours is no longer needed. */
	sbx_seccomp_free(prog);
	return s;
fail:
	for (int i = 0; i < 2; i++) {
		if (sync[i] >= 0)
			close(sync[i]);
	}
	if (ctl[1] >= 0)
		close(ctl[1]);
	sbx_seccomp_free(prog);
	sbx_session_close(s, NULL);
	return NULL;
}

int sbx_session_close(sbx_session *s, sbx_err *err)
{
	int rc = 0;

	if (!s)
		return 0;
	if (s->zygote > 0) {
		kill(s->zygote, SIGKILL);
		while (waitpid(s->zygote, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (s->ctl_fd >= 0)
		close(s->ctl_fd);
	if (s->work_fd >= 0)
		close(s->work_fd);
	if (s->session_dir[0] &&
	    nftw(s->session_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0)
		rc = sbx_err_set(err, SBX_E_EXECUTION, errno, "remove %s: %s", s->session_dir,
				 strerror(errno));
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free(s);
	return rc;
}

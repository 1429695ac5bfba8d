/*
 * backend_bubblewrap.c: backend "bubblewrap", the host side: where bwrap
 * is, the user namespace every bwrap of a session joins when the host is
 * root, and bwrap's fixed arguments (namespaces, ids, and the root
 * filesystem description rendered by rootfs_bwrap.c).  Each run's init
 * execs bwrap with them (init.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session_impl.h"

const char *sbx_bwrap_path(void)
{
	const char *env = getenv("SBX_BWRAP");
	return env && *env ? env : "/usr/bin/bwrap";
}

/*
 * backend bubblewrap as root: a user namespace with the full map (userns.c)
 * that every bwrap of the session joins (--userns), so the ids /etc/passwd
 * lists exist as in the native backends.  It is owned by the sandbox's host
 * uid, which bwrap runs as: a child at that uid creates it, and waits until
 * we wrote the maps and took a handle.
 */
static int make_bwrap_userns(sbx_session *s, sbx_err *err)
{
	int sp[2];
	char c = 0, path[64];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "socketpair: %s", strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		close(sp[0]);
		if (setgroups(0, NULL) == 0 &&
		    setresgid(s->host_gid, s->host_gid, s->host_gid) == 0 &&
		    setresuid(s->host_uid, s->host_uid, s->host_uid) == 0 &&
		    unshare(CLONE_NEWUSER) == 0 && write(sp[1], "u", 1) == 1)
			(void)!read(sp[1], &c, 1); /* until the host is done */
		_exit(0);
	}
	close(sp[1]);
	int rc = -1;
	if (pid < 0)
		sbx_err_set(err, SBX_E_EXECUTION, errno, "fork: %s", strerror(errno));
	else if (read(sp[0], &c, 1) != 1)
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, EPERM,
			    "backend bubblewrap: could not make a user namespace as uid %u",
			    (unsigned)s->host_uid);
	else if (sbx_userns_write_maps(pid, s->host_uid, s->host_gid, s->aux_uid, err) == 0) {
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		s->direct.userns_fd = open(path, O_RDONLY | O_CLOEXEC);
		rc = s->direct.userns_fd < 0 ? sbx_err_set(err, SBX_E_EXECUTION, errno,
							   "open %s: %s", path, strerror(errno))
					     : 0;
	}
	close(sp[0]);
	while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return rc;
}

/*
 * backend "bubblewrap": the bwrap arguments equivalent to the native
 * backends' namespaces (every namespace new, the sandbox user uid/gid 1000
 * in a user namespace, no capabilities), then the session's root
 * filesystem description rendered for bwrap (rootfs_bwrap.c), its
 * generated files read from sealed memfds of the session.  Per run, init.c
 * remounts / read-only and passes our seccomp filter and the command.
 */
static int build_bwrap_argv(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	sbx_argv a = {0};
	size_t k = 0;
	/* With a user namespace of ours (root: make_bwrap_userns) every other
	 * namespace is new; else bwrap makes the user namespace too. */
	int rc = s->direct.userns_fd >= 0
			 ? sbx_argv_add(&a, 5, sbx_bwrap_path(), "--unshare-ipc", "--unshare-pid",
					"--unshare-net", "--unshare-uts")
			 : sbx_argv_add(&a, 2, sbx_bwrap_path(), "--unshare-all");
	if (rc == 0 && s->direct.userns_fd >= 0)
		rc = sbx_argv_add(&a, 1, "--unshare-cgroup-try");
	if (rc == 0)
		rc = sbx_argv_add(&a, 10, "--die-with-parent", "--new-session", "--cap-drop", "ALL",
				  "--uid", "1000", "--gid", "1000", "--hostname",
				  o->hostname ? o->hostname : "sandbox");
	/* The generated files: each run's init reopens these (init.c). */
	for (size_t i = 0; rc == 0 && i < s->fs.n; i++) {
		const sbx_fs_entry *e = &s->fs.e[i];
		if (e->kind != SBX_FS_DATA)
			continue;
		if (k == SBX_FS_MAX_DATA)
			return sbx_argv_free(&a),
			       sbx_err_set(err, SBX_E_EXECUTION, E2BIG, "too many generated files");
		int fd = sbx_sealed_data_fd("sbx-etc", e->data, strlen(e->data));
		if (fd < 0)
			return sbx_argv_free(&a), sbx_err_set(err, SBX_E_EXECUTION, errno,
							      "memfd: %s", strerror(errno));
		s->direct.bwrap_data_fd[k++] = fd;
	}
	if (rc == 0)
		rc = sbx_rootfs_bwrap_args(&a, &s->fs, s->direct.bwrap_data_fd);
	s->bwrap_argv = a.v;
	if (rc < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
	return 0;
}

int sbx_bwrap_start(sbx_session *s, const sbx_session_opts *o, sbx_err *err)
{
	if ((s->aux_uid && make_bwrap_userns(s, err) < 0) || build_bwrap_argv(s, o, err) < 0)
		return -1;
	s->direct.seccomp = s->prog;
	s->direct.bwrap_argv = s->bwrap_argv;
	s->direct.uid = s->host_uid;
	s->direct.gid = s->host_gid;
	/* The run's checks look at the work dir where bwrap binds it from. */
	if (s->work_stage[0])
		s->direct.host_work_dir = s->work_stage;
	return 0;
}

int sbx_bwrap_check(const sbx_session_opts *o, sbx_err *err)
{
	(void)o;
	if (access(sbx_bwrap_path(), X_OK) != 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
				   "backend bubblewrap: no executable bwrap at %s (install it: "
				   "apt-get install bubblewrap, or set SBX_BWRAP)",
				   sbx_bwrap_path());
	return 0;
}

/* Runs forked by the host like none's, each one bwrap loading the session's
 * filter (taken from *prog). */
int sbx_bwrap_backend_start(sbx_session *s, const sbx_session_opts *o, struct sock_fprog **prog,
			    sbx_err *err)
{
	sbx_none_start(s, o);
	s->prog = *prog;
	*prog = NULL;
	return sbx_bwrap_start(s, o, err);
}

void sbx_bwrap_stop(sbx_session *s)
{
	sbx_none_reap(s, true);
	if (s->direct.userns_fd >= 0)
		close(s->direct.userns_fd);
	for (int i = 0; i < SBX_FS_MAX_DATA; i++)
		if (s->direct.bwrap_data_fd[i] >= 0)
			close(s->direct.bwrap_data_fd[i]);
	for (size_t i = 0; s->bwrap_argv && s->bwrap_argv[i]; i++)
		free(s->bwrap_argv[i]);
	free(s->bwrap_argv);
	s->bwrap_argv = NULL;
}

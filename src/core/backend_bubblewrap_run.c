/*
 * backend_bubblewrap_run.c: how a run of backend "bubblewrap" starts: its
 * workload (init.c, forked by the host: backend_none.c) checks what bwrap
 * would only print, then execs bwrap with the session's fixed arguments
 * (backend_bubblewrap.c, rootfs_bwrap.c) and this run's.  Apart from
 * backend_bubblewrap.c (the session's side) because init.c, which calls
 * it, is linked into sbx-zygote too and must not pull the host's session
 * code in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* The session's generated files (sealed memfds that bwrap_argv names with
 * --ro-bind-data): bwrap reads each to its end, so each run reads an open
 * file of its own from offset 0 (a reopen through /proc), at the same fd
 * number, kept across the exec. */
static int reopen_data_fds(const struct sbx_zygote_cfg *cfg)
{
	char path[64];

	for (int i = 0; i < SBX_FS_MAX_DATA && cfg->bwrap_data_fd[i] >= 0; i++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", cfg->bwrap_data_fd[i]);
		int fd = open(path, O_RDONLY);
		if (fd < 0 || dup2(fd, cfg->bwrap_data_fd[i]) < 0)
			return -1;
		close(fd);
	}
	return 0;
}

/*
 * Backend "bubblewrap": exec bwrap with the session's fixed arguments (the
 * filesystem view, namespaces, uid 1000, no capabilities), this run's
 * generated /etc files and our compiled seccomp filter passed as fds,
 * the cwd, and the command.  Returns only on failure, reported on
 * status_fd.
 */
static void exec_bwrap(const struct sbx_zygote_cfg *cfg, const char *cwd, const char **argv,
		       const char **envp, int status_fd)
{
	char seccomp_num[16];
	size_t n_fixed = 0, n_argv = 0;

	for (char *const *a = cfg->bwrap_argv; *a; a++)
		n_fixed++;
	while (argv[n_argv])
		n_argv++;
	int seccomp_fd = sbx_sealed_data_fd("sbx-seccomp", cfg->seccomp->filter,
					    cfg->seccomp->len * sizeof(struct sock_filter));
	/* bwrap reads the filter from its fd: not close-on-exec. */
	if (seccomp_fd < 0 || fcntl(seccomp_fd, F_SETFD, 0) != 0 || reopen_data_fds(cfg) < 0) {
		sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "memfd: %s",
				strerror(errno));
		return;
	}
	snprintf(seccomp_num, sizeof(seccomp_num), "%d", seccomp_fd);
	const char **v = calloc(n_fixed + n_argv + 28, sizeof(*v));
	if (!v)
		return;
	size_t k = 0;
	for (size_t i = 0; i < n_fixed; i++)
		v[k++] = cfg->bwrap_argv[i];
	/* Join the session's user namespace (the ids a host has: userns.c).
	 * bwrap passes every fd it was given on to the command, but closes
	 * its --sync-fd there: the same fd as both keeps it out of the run. */
	char usernum[16];
	if (cfg->userns_fd >= 0) {
		snprintf(usernum, sizeof(usernum), "%d", cfg->userns_fd);
		if (fcntl(cfg->userns_fd, F_SETFD, 0) != 0) {
			sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "userns fd: %s",
					strerror(errno));
			return;
		}
		v[k++] = "--userns";
		v[k++] = usernum;
		v[k++] = "--sync-fd";
		v[k++] = usernum;
	}
	/* Read-only like the native root, once everything is in place. */
	v[k++] = "--remount-ro";
	v[k++] = "/";
	v[k++] = "--seccomp";
	v[k++] = seccomp_num;
	v[k++] = "--chdir";
	v[k++] = cwd;
	v[k++] = "--";
	/* bwrap always sets PWD; the native backends give exactly the
	 * environment asked for, so take it out again unless it was asked. */
	bool want_pwd = false;
	for (const char **e = envp; *e; e++)
		want_pwd = want_pwd || !strncmp(*e, "PWD=", 4);
	if (!want_pwd && access("/usr/bin/env", X_OK) == 0) {
		v[k++] = "/usr/bin/env";
		v[k++] = "-u";
		v[k++] = "PWD";
	}
	for (size_t i = 0; i < n_argv; i++)
		v[k++] = argv[i];
	v[k] = NULL;
	execve(v[0], (char *const *)v, (char *const *)envp);
	sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "exec %s: %s", v[0],
			strerror(errno));
}

/* The workload's last step: the checks, then exec bwrap; never returns
 * (failures are reported on status_fd, then exit 127). */
__attribute__((noreturn)) void sbx_bwrap_run_exec(const struct sbx_zygote_cfg *cfg, const char *cwd,
						  const char **argv, const char **envp,
						  int status_fd)
{
	/* Failures bwrap would only print: the cwd (the work dir is
	 * the same dir on the host) and an absolute program path (the
	 * sandbox sees host paths at the same place, the work dir
	 * aside). */
	char host[PATH_MAX];
	size_t wl = strlen(SBX_SANDBOX_WORKDIR);
	snprintf(host, sizeof(host), "%.2048s%.2000s", cfg->host_work_dir, cwd + wl);
	int bad = strncmp(cwd, SBX_SANDBOX_WORKDIR, wl) ? ENOENT
		  : access(host, X_OK) != 0		? errno
							: 0;
	if (bad) {
		sbx_status_send_option(status_fd, "cwd", bad, "cwd %s: %s", cwd, strerror(bad));
		_exit(127);
	}
	if (argv[0][0] == '/') {
		if (!strncmp(argv[0], SBX_SANDBOX_WORKDIR "/", wl + 1))
			snprintf(host, sizeof(host), "%.2048s%.2000s", cfg->host_work_dir,
				 argv[0] + wl);
		else
			snprintf(host, sizeof(host), "%.4000s", argv[0]);
		if (access(host, F_OK) != 0) {
			sbx_status_send(status_fd, SBX_STATUS_ERROR, 0, errno, 0, "exec %s: %s",
					argv[0], strerror(errno));
			_exit(127);
		}
	}
	exec_bwrap(cfg, cwd, argv, envp, status_fd);
	_exit(127);
}

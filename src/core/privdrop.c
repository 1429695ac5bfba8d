/*
 * privdrop.c: how a run's workload gives up its privileges, one ordered
 * list of steps per backend (read top to bottom; the first failing step
 * ends the list).  The workload (init.c) runs the list before the request
 * comes, so it is paid while the session is idle, and reports a failure on
 * the request's status fd instead of running the command.
 *
 * The native backends follow bubblewrap's order: ids, then no_new_privs and
 * capabilities, fds marked close-on-exec, seccomp last, right before execve.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* Record the failed step (errno is its cause); always -1. */
static int failed(struct sbx_privdrop_fail *f, const char *what)
{
	f->what = what;
	f->err_no = errno;
	return -1;
}

/* A step that filled f->err: its message is what failed. */
static int failed_err(struct sbx_privdrop_fail *f)
{
	f->what = f->err.msg;
	f->err_no = f->err.sys_errno;
	return -1;
}

/* rlimits, a second layer under the cgroup: no core dumps, a bounded fd
 * table, an optional file size cap. */
static int set_rlimits(const struct sbx_zygote_cfg *cfg)
{
	struct rlimit core = {0, 0}, nofile = {cfg->nofile, cfg->nofile},
		      fsize = {cfg->fsize ? cfg->fsize : RLIM_INFINITY,
			       cfg->fsize ? cfg->fsize : RLIM_INFINITY};

	if (setrlimit(RLIMIT_CORE, &core) != 0 ||
	    (cfg->nofile && setrlimit(RLIMIT_NOFILE, &nofile) != 0) ||
	    (cfg->fsize && setrlimit(RLIMIT_FSIZE, &fsize) != 0))
		return -1;
	return 0;
}

/* Drop any supplementary group (setgroups is denied when the host side is
 * unprivileged; then there is nothing to drop). */
static int drop_groups(void)
{
	return sbx_sys_drop_groups();
}

/* Every id the run's (the uid may already be it: make them all so). */
static int set_ids(const struct sbx_zygote_cfg *cfg)
{
	return sbx_sys_set_ids(cfg->uid, cfg->gid);
}

static int no_new_privs(void)
{
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ? -1 : 0;
}

/* Everything but stdio goes at exec; the status fd stays usable until
 * then to report a failed exec. */
static int close_on_exec(void)
{
	return syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0 ? -1 : 0;
}

/* Backends userns and privileged: the run's ids (the sandbox user, or the
 * session's unprivileged host uid), no capability left, the filter last. */
static int drop_native(const struct sbx_zygote_cfg *cfg, const struct sock_fprog *filter,
		       struct sbx_privdrop_fail *f)
{
	if (set_rlimits(cfg) < 0)
		return failed(f, "rlimits");
	if (drop_groups() < 0)
		return failed(f, "setgroups");
	if (set_ids(cfg) < 0)
		return failed(f, "become the sandbox user");
	if (no_new_privs() < 0)
		return failed(f, "no_new_privs");
	if (sbx_caps_drop_all(&f->err) < 0)
		return failed_err(f);
	if (close_on_exec() < 0)
		return failed(f, "close fds");
	/* The run stage refuses only what init's stage allows: never alone. */
	if (filter != cfg->seccomp && prctl(PR_GET_SECCOMP, 0, 0, 0, 0) != 2) {
		errno = EPERM;
		return failed(f, "seccomp: the run stage without init's stage");
	}
	if (sbx_seccomp_install(filter, &f->err) < 0)
		return failed_err(f);
	return 0;
}

/* Backend "bubblewrap": bwrap runs as the session's unprivileged host uid
 * (uid 1000 in its user namespace); it drops capabilities and loads our
 * filter itself. */
static int drop_bubblewrap(const struct sbx_zygote_cfg *cfg, struct sbx_privdrop_fail *f)
{
	if (set_rlimits(cfg) < 0)
		return failed(f, "rlimits");
	if (sbx_idmap_attach_private(cfg) < 0)
		return failed(f,
			      errno == ESTALE
				      ? "a read_write_path's host path leads elsewhere than at the "
					"session's start (a component was replaced): refused"
				      : "attach the copies of read_write_paths and the work dir");
	if (drop_groups() < 0 || set_ids(cfg) < 0 || no_new_privs() < 0)
		return failed(f, "become the sandbox's host user");
	if (close_on_exec() < 0)
		return failed(f, "close fds");
	return 0;
}

/* Backend "none": the host's own user, no isolation at all. */
static int drop_none(const struct sbx_zygote_cfg *cfg, struct sbx_privdrop_fail *f)
{
	if (set_rlimits(cfg) < 0)
		return failed(f, "rlimits");
	if (close_on_exec() < 0)
		return failed(f, "close fds");
	return 0;
}

/* See internal.h.  Only where an init serves more than one run: for one
 * run, two installs would cost more than one. */
int sbx_init_stage_install(const struct sbx_zygote_cfg *cfg, sbx_err *err)
{
	static bool on;
	const struct sock_fprog *stage = sbx_seccomp_stage(cfg->seccomp, SBX_SC_STAGE_INIT);

	if (on)
		return 1;
	if (cfg->bwrap_argv || cfg->none || !cfg->reuse || !stage ||
	    !sbx_seccomp_stage(cfg->seccomp, SBX_SC_STAGE_RUN))
		return 0;
	/* init never execs; its workloads set it anyway. */
	if (no_new_privs() < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "init: no_new_privs: %s",
				   strerror(errno));
	if (sbx_seccomp_install(stage, err) < 0)
		return -1;
	on = true;
	return 1;
}

int sbx_privdrop(const struct sbx_zygote_cfg *cfg, const struct sock_fprog *filter,
		 struct sbx_privdrop_fail *f)
{
	memset(f, 0, sizeof(*f));
	if (cfg->bwrap_argv)
		return drop_bubblewrap(cfg, f);
	if (cfg->none)
		return drop_none(cfg, f);
	return drop_native(cfg, filter, f);
}

/*
 * backend_zygote.c: how backends "userns" and "privileged" start a session:
 * clone the zygote into fresh mount, PID, network, IPC and UTS namespaces
 * (and a user namespace for userns: its id maps written from here): the
 * zygote template clones it (zygote_template.c), and it joins the
 * session's cgroup, becomes the sandbox user (userns), builds the root
 * (zygote_setup.c); then read its ready message.
 * The two backends differ only where s->privileged says so: no user
 * namespace, the zygote stays host root, each run gets the session's own
 * unprivileged host uid.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session_impl.h"

/* The cgroup.procs files the zygote writes itself into (zygote_setup.c),
 * one per controller the session made (-1 elsewhere): the same files
 * sbx_cgroup_attach writes, opened by the host, which may. */
static int open_cgroup_procs(const sbx_cgroup *cg, int *procs, sbx_err *err)
{
	for (int i = 0; i < SBX_CG_NCTL; i++) {
		char path[PATH_MAX + 16];
		if (!cg->version || !cg->made[i])
			continue;
		snprintf(path, sizeof(path), "%s/cgroup.procs",
			 i == 0 && cg->leaf[0] ? cg->leaf : cg->dir[i]);
		procs[i] = open(path, O_WRONLY | O_CLOEXEC);
		if (procs[i] < 0)
			return sbx_err_set(err, SBX_E_EXECUTION, errno, "open %s: %s", path,
					   strerror(errno));
	}
	return 0;
}

static void close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
		fds[i] = -1;
	}
}

/* What the zygote sets itself up from (zygote_setup.c, in the template's
 * child): everything but what only it can open (its network namespaces,
 * its oom_score_adj) is decided here. */
static void fill_spawn(struct sbx_zygote_spawn *sp, const sbx_session_opts *o, const sbx_session *s,
		       const struct sock_fprog *prog)
{
	struct sbx_zygote_cfg *cfg = &sp->cfg;

	for (int i = 0; i < SBX_NET_NMODES; i++)
		cfg->netns_fd[i] = -1;
	for (int i = 0; i < SBX_FS_MAX_DATA; i++)
		cfg->bwrap_data_fd[i] = -1;
	cfg->userns_fd = -1;
	cfg->oom_fd = -1;
	cfg->warm_mode = o->network_mode;
	cfg->proxy_port = o->proxy_port ? o->proxy_port : DEFAULT_PROXY_PORT;
	cfg->memory_limited = s->cg.oom_path[0] != '\0';
	/* Inits serve run after run where the host made an inbox for them
	 * (with a memory ceiling an init stays in its run cgroup, which
	 * then serves its runs one after another: cgroup.c). */
	cfg->reuse = s->inbox[0] >= 0;
	size_t nc = 0;
	cfg->carry[nc++] = SBX_SANDBOX_WORKDIR;
	for (size_t i = 0; i < o->n_binds && nc < SBX_MAX_CARRY; i++)
		if (sbx_rootfs_is_scratch(o->binds[i].path))
			cfg->carry[nc++] = o->binds[i].path;
	/* A pinned work dir at its host path below /tmp (rootfs_desc.c). */
	const char *alias = sbx_rootfs_work_alias(o, s->work_dir);
	if (alias && sbx_rootfs_is_scratch(alias) && nc < SBX_MAX_CARRY)
		cfg->carry[nc++] = alias;
	cfg->seccomp = prog;
	cfg->tmp_bytes = sbx_rootfs_tmpfs_size(&s->fs, "/tmp");
	cfg->shm_bytes = sbx_rootfs_tmpfs_size(&s->fs, "/dev/shm");
	cfg->lifetime_ms = o->lifetime_ms;
	cfg->expire_at_ms = s->expire_at_ms;
	cfg->expire_grace_ms = s->expire_grace_ms;
	cfg->warm_runs = o->warm_runs ? o->warm_runs : 1;
	cfg->idle_ms = !o->warm_idle_ms		       ? SBX_WARM_IDLE_MS
		       : o->warm_idle_ms == UINT32_MAX ? 0
						       : o->warm_idle_ms;
	cfg->uid = s->inside_uid;
	cfg->gid = s->inside_gid;
	cfg->nofile = sbx_session_run_nofile(o);
	cfg->fsize = o->fsize_bytes;
	sp->fs = &s->fs;
	sp->hostname = o->hostname ? o->hostname : "sandbox";
	/* Tests only: tests/spec/server_loop_spec.lua, session_start_spec.lua
	 * (zygote_setup.c): hold the setup at its start, or just before the
	 * root is built (after open mode's early network). */
	const char *hold = getenv("SBX_TEST_HOLD_OPEN_FIFO");
	const char *hold_root = getenv("SBX_TEST_HOLD_ROOT_FIFO");
	sp->hold_root = !(hold && *hold) && hold_root && *hold_root;
	sp->hold_fifo = sp->hold_root ? hold_root : hold && *hold ? hold : NULL;
	/* With inside root mapped (host side root: userns.c) the zygote, and
	 * so every sbx-init, is root inside: another user than the workload,
	 * which then cannot signal, ptrace or prlimit it.  Otherwise there is
	 * one id, the sandbox user's. */
	sp->zid = s->aux_uid ? 0 : SBX_SANDBOX_UID;
	sp->privileged = s->privileged;
	sp->oom = s->cg.oom_path[0] != '\0';
	sp->net_mode = o->network_mode;
	sp->proxy_port = cfg->proxy_port;
}

/* The ready message, waiting up to timeout_ms for it; *open_ns receives
 * the open namespace's fd (or -1).  Returns 0, 1 when it has not come yet,
 * 2 when what came is open mode's early message (*open_ns set; the ready
 * follows), or -1 with err. */
int sbx_zygote_backend_ready(sbx_session *s, int timeout_ms, int *open_ns, sbx_err *err)
{
	struct sbx_proto_ready ready;
	struct pollfd pfd = {s->ctl_fd, POLLIN, 0};
	int fds[2] = {-1, -1};
	size_t nfds;
	int n;

	while ((n = poll(&pfd, 1, timeout_ms)) < 0 && errno == EINTR)
		;
	if (n == 0)
		return 1;
	memset(&ready, 0, sizeof(ready));
	ssize_t got = sbx_proto_recv_fds(s->ctl_fd, &ready, sizeof(ready), fds, 2, &nfds);
	size_t i = 0;
	if (got == (ssize_t)sizeof(ready) && (ready.fds & SBX_READY_LISTENER) && i < nfds)
		s->proxy_listener = fds[i++];
	if (got == (ssize_t)sizeof(ready) && (ready.fds & SBX_READY_OPEN_NS) && i < nfds)
		*open_ns = fds[i++];
	for (; i < nfds; i++)
		close(fds[i]);
	if (got != (ssize_t)sizeof(ready) || ready.magic != SBX_PROTO_MAGIC)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, EPIPE,
				   "backend %s: the sandbox died while setting up", s->backend);
	if (ready.kind != SBX_E_NONE) {
		ready.msg[sizeof(ready.msg) - 1] = '\0';
		return sbx_err_set(err, (sbx_err_kind)ready.kind, ready.err_no, "backend %s: %s",
				   s->backend, ready.msg);
	}
	return (ready.fds & SBX_READY_EARLY) ? 2 : 0;
}

/*
 * The zygote's RLIMIT_NOFILE.  nofile above our hard limit: the workloads
 * cannot raise theirs (no CAP_SYS_RESOURCE of the host's), so root raises
 * the zygote's, which every run inherits.  And the zygote's soft limit as
 * high as we may set it (fs.nr_open with CAP_SYS_RESOURCE, else the hard
 * limit): the kernel refuses to send fds (ETOOMANYREFS) once more are in
 * flight from the sender's uid than the sender's soft limit, and that uid
 * (the aux uid as root) is shared by every session's zygote on the host,
 * whose unread offers are all in flight: under `ulimit -n 128` some 64
 * warm offers waiting anywhere on the host were enough to lose ours.  The
 * runs still get nofile: privdrop.c sets both of their limits.
 */
/* fs.nr_open, read once per process (a file open and a scanf on every
 * session's open otherwise); 0 when not root or unreadable. */
static unsigned long long nr_open_once(void)
{
	static unsigned long long cached; /* nr_open + 1 once read */
	unsigned long long v = __atomic_load_n(&cached, __ATOMIC_RELAXED), nr = 0;

	if (v)
		return v - 1;
	FILE *f = geteuid() == 0 ? fopen("/proc/sys/fs/nr_open", "re") : NULL;
	if (f) {
		if (fscanf(f, "%llu", &nr) != 1)
			nr = 0;
		fclose(f);
	}
	__atomic_store_n(&cached, nr + 1, __ATOMIC_RELAXED);
	return nr;
}

static int zygote_nofile(pid_t pid, const sbx_session_opts *o, sbx_err *err)
{
	struct rlimit nf;
	unsigned long long nr_open = nr_open_once();

	if (prlimit(pid, RLIMIT_NOFILE, NULL, &nf) != 0)
		return 0;
	if (o->nofile && nf.rlim_max < o->nofile) {
		nf.rlim_max = o->nofile;
		if (prlimit(pid, RLIMIT_NOFILE, &nf, NULL) != 0)
			return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
					   "nofile = %llu: raise the sandbox's hard limit: %s",
					   (unsigned long long)o->nofile, strerror(errno));
	}
	struct rlimit most = nf;
	if (nr_open > most.rlim_max)
		most.rlim_max = nr_open;
	most.rlim_cur = most.rlim_max;
	/* Best effort (raising the hard limit needs CAP_SYS_RESOURCE, which
	 * root in a container may lack; then the soft one goes up to it): at
	 * worst an offer fails and says why (zygote.c). */
	if (prlimit(pid, RLIMIT_NOFILE, &most, NULL) != 0) {
		nf.rlim_cur = nf.rlim_max;
		(void)prlimit(pid, RLIMIT_NOFILE, &nf, NULL);
	}
	return 0;
}

/* Clone the zygote and let it set up; its ready message comes later
 * (sbx_zygote_backend_ready).  *prog stays the caller's (the zygote has
 * its own copy).  1, or -1 with err (the caller closes the session). */
int sbx_zygote_backend_start(sbx_session *s, const sbx_session_opts *o, struct sock_fprog **prog,
			     sbx_err *err)
{
	int sync[2] = {-1, -1}, ctl[2] = {-1, -1};
	struct sbx_zygote_spawn sp;

	memset(&sp, 0, sizeof(sp));
	for (int i = 0; i < SBX_CG_NCTL; i++)
		sp.procs[i] = -1;
	/* sync: a socket, not a pipe, so that our byte to a zygote already
	 * dead fails with EPIPE instead of raising SIGPIPE (MSG_NOSIGNAL),
	 * which would end a host that keeps its default (sbxlua). */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sync) != 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "socketpair: %s", strerror(errno));
		goto fail;
	}
	/* Runs give inits back here (cfg.reuse); never blocking a run's
	 * end: a full inbox lets the init go. */
	if (s->max_idle && (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0,
				       s->inbox) != 0)) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "socketpair: %s", strerror(errno));
		goto fail;
	}
	if (open_cgroup_procs(&s->cg, sp.procs, err) < 0)
		goto fail;
	fill_spawn(&sp, o, s, *prog);
	sp.sync_fd = sync[0];
	sp.cfg.ctl_fd = ctl[1];
	/* No cgroup namespace yet: the child joins the session's cgroup
	 * first (a move out of its namespace's root would be refused).  No
	 * network namespace either: the zygote has a child make it while it
	 * builds the root, and joins it before it says ready
	 * (zygote_setup.c). */
	uint64_t flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
	if (!s->privileged)
		flags |= CLONE_NEWUSER;
	int clone_errno = 0;
	pid_t pid = sbx_zygote_template_spawn(flags, &sp, &clone_errno, err);
	if (pid < 0) {
		if (!clone_errno)
			goto fail;
		if (s->privileged)
			sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, clone_errno,
				    "backend privileged: the kernel refused to create namespaces: "
				    "%s",
				    strerror(clone_errno));
		else
			sbx_userns_explain(clone_errno, err);
		goto fail;
	}
	s->zygote = pid;
	/* The zygote has its copies of these (the template sent them). */
	close(sync[0]);
	close(ctl[1]);
	sync[0] = ctl[1] = -1;
	s->ctl_fd = ctl[0];
	if (!s->privileged &&
	    sbx_userns_write_maps(pid, s->host_uid, s->host_gid, s->aux_uid, err) < 0)
		goto fail;
	if (zygote_nofile(pid, o, err) < 0)
		goto fail;
	close_all(sp.procs, SBX_CG_NCTL);
	/* With a memory ceiling, the OOM killer must take a run, never the
	 * session: its runs get 1000 (zygote.c); the zygote itself -1000
	 * where we may lower it (CAP_SYS_RESOURCE; otherwise it stays 0, and
	 * its size, shared with ours, is what keeps it safe). */
	if (s->cg.oom_path[0]) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/oom_score_adj", (int)pid);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			(void)!write(fd, "-1000", 5);
			close(fd);
		}
	}
	if (send(sync[1], "x", 1, MSG_NOSIGNAL) != 1) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "start the sandbox: %s", strerror(errno));
		goto fail;
	}
	close(sync[1]);
	sync[1] = -1;
	return 1;
fail:
	for (int i = 0; i < 2; i++) {
		if (sync[i] >= 0)
			close(sync[i]);
	}
	if (ctl[1] >= 0)
		close(ctl[1]);
	close_all(sp.procs, SBX_CG_NCTL);
	return -1;
}

int sbx_privileged_check(const sbx_session_opts *o, sbx_err *err)
{
	(void)o;
	if (geteuid() != 0)
		return sbx_err_set(
			err, SBX_E_BACKEND_UNAVAILABLE, EPERM,
			"backend privileged: creating namespaces without a user namespace "
			"needs root (CAP_SYS_ADMIN, CAP_SETUID); run sbxd as root or use "
			"backend \"userns\"");
	return 0;
}

bool sbx_zygote_alive(sbx_session *s)
{
	if (s->zygote <= 0)
		return false;
	int st;
	pid_t p = waitpid(s->zygote, &st, WNOHANG);
	if (p == s->zygote) {
		s->zygote = -1;
		return false;
	}
	return p == 0;
}

void sbx_zygote_stop(sbx_session *s)
{
	if (s->zygote <= 0)
		return;
	kill(s->zygote, SIGKILL);
	while (waitpid(s->zygote, NULL, 0) < 0 && errno == EINTR)
		;
	s->zygote = -1;
}

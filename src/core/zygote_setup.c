/*
 * zygote_setup.c: the zygote template's side (sbx-zygote run as
 * "sbx-zygote template FD"): it waits for the host's requests, clones
 * each zygote into its new namespaces as a child of the host
 * (CLONE_PARENT), and the child sets the zygote up (the cgroup, the ids,
 * the root, the network namespaces), says ready and becomes the zygote
 * (zygote.c).  The host side is zygote_template.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "zygote_template.h"

/* Open mode: hand the host the open namespace as soon as it exists, so
 * that nft and pasta come up while the root is built (~1 ms and more
 * under load); the session is ready only when both are done.  Nothing of
 * the sandbox's runs before then. */
static int send_open_ns_early(int ctl_fd, int open_ns, sbx_err *err)
{
	struct sbx_proto_ready early;

	if (open_ns < 0)
		return 0;
	memset(&early, 0, sizeof(early));
	early.magic = SBX_PROTO_MAGIC;
	early.kind = SBX_E_NONE;
	early.fds = SBX_READY_EARLY;
	if (sbx_zygote_send_ready(ctl_fd, &early, -1, open_ns) < 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
				   "hand over the open network: %s", strerror(errno));
	return 0;
}

/* Tests only: hold the setup until someone opens the FIFO for writing, so
 * a spec can keep a session pending as long as it likes.  Delays only this
 * session; while the path does not exist, setups go on at once. */
static int hold(const char *fifo)
{
	int h = fifo && *fifo ? open(fifo, O_RDONLY | O_CLOEXEC) : -1;
	if (h >= 0)
		close(h);
	return 0;
}

__attribute__((noreturn)) void sbx_zygote_setup(struct sbx_zygote_spawn *sp)
{
	struct sbx_zygote_cfg *cfg = &sp->cfg;
	struct sbx_proto_ready ready;
	sbx_err err;
	char c;
	int netns[SBX_NET_NMODES] = {-1, -1, -1}, listener = -1, ctl_fd = cfg->ctl_fd;

	memset(&err, 0, sizeof(err));
	prctl(PR_SET_NAME, "sbx-zygote");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* First: it runs while we do everything else. */
	int net_sock = sbx_netns_child_start(&err);
	if (net_sock < 0)
		sbx_zygote_fail(ctl_fd, &err);
	/* Into the session's cgroup before anything else: every run inherits
	 * its ceilings.  We move ourselves (the host opened the files): the
	 * move waits out an RCU grace period (~5-15 ms, cgroup v1), which is
	 * then ours to wait, not the host's (sbxd's loop). */
	for (int i = 0; i < SBX_CG_NCTL; i++) {
		if (sp->procs[i] >= 0 && write(sp->procs[i], "0", 1) != 1) {
			sbx_err_set(&err, SBX_E_BACKEND_UNAVAILABLE, errno,
				    "join the session's cgroup: %s", strerror(errno));
			sbx_zygote_fail(ctl_fd, &err);
		}
		if (sp->procs[i] >= 0)
			close(sp->procs[i]);
	}
	/* A session and process group of our own, without a terminal: a
	 * terminal's Ctrl-C, or any signal to the caller's group, reaches
	 * neither us nor the inits we fork. */
	setsid();
	/* (tests/spec/server_loop_spec.lua) */
	if (!sp->hold_root)
		hold(sp->hold_fifo);
	/* Wait until the host has written our id maps. */
	if (read(sp->sync_fd, &c, 1) != 1)
		_exit(1);
	close(sp->sync_fd);
	/* We are in the session's cgroup: root a cgroup namespace there, so
	 * the runs see "/" and never the session's path. */
	if (unshare(CLONE_NEWCGROUP) != 0) {
		sbx_err_set(&err, SBX_E_BACKEND_UNAVAILABLE, errno, "cgroup namespace: %s",
			    strerror(errno));
		sbx_zygote_fail(ctl_fd, &err);
	}
	/* Our own oom_score_adj, opened while the host's /proc is still
	 * here and we are still its uid: see warm_offer. */
	int oom_fd = sp->oom ? open("/proc/self/oom_score_adj", O_RDWR | O_CLOEXEC) : -1;
	/* userns: the zygote is the sandbox user (or root inside, with an
	 * aux uid: userns.c), holding the capabilities of its own user
	 * namespace.  privileged: there is no user namespace, so the zygote
	 * stays host root (it must mount for every run); each workload
	 * becomes the session's unprivileged host uid and drops every
	 * capability before it runs anything.  No exec follows, so the
	 * capabilities stay without an ambient set. */
	if (!sp->privileged &&
	    (sbx_sys_drop_groups() != 0 || sbx_sys_set_ids(sp->zid, sp->zid) != 0)) {
		sbx_err_set(&err, SBX_E_BACKEND_UNAVAILABLE, errno, "become uid %u: %s",
			    (unsigned)sp->zid, strerror(errno));
	} else if (sbx_caps_drop_bounding(&err) == 0 &&
		   /* A wider mode's namespaces are made from the blocked one,
		    * the open one early (above): the join comes first. */
		   (sp->net_mode == SBX_NET_BLOCKED ||
		    (netns[SBX_NET_BLOCKED] = sbx_netns_child_join(&net_sock, &err)) >= 0) &&
		   sbx_netns_prepare(netns, &listener, sp->net_mode, sp->proxy_port, &err) == 0 &&
		   send_open_ns_early(ctl_fd, netns[SBX_NET_OPEN], &err) == 0 &&
		   hold(sp->hold_root ? sp->hold_fifo : NULL) == 0 &&
		   sbx_rootfs_build(sp->fs, sp->hostname ? sp->hostname : "sandbox", &err) == 0 &&
		   (net_sock < 0 ||
		    (netns[SBX_NET_BLOCKED] = sbx_netns_child_join(&net_sock, &err)) >= 0)) {
		err.kind = SBX_E_NONE;
	}
	if (err.kind != SBX_E_NONE)
		sbx_zygote_fail(ctl_fd, &err);
	/* The idmapped mounts are attached; their fds are done. */
	for (size_t i = 0; i < sp->fs->n; i++)
		if (sp->fs->e[i].mount_fd >= 0)
			close(sp->fs->e[i].mount_fd);
	memcpy(cfg->netns_fd, netns, sizeof(netns));
	cfg->oom_fd = oom_fd;
	/* The host made us immune where it could (CAP_SYS_RESOURCE). */
	snprintf(cfg->oom_adj, sizeof(cfg->oom_adj), "0");
	if (oom_fd >= 0) {
		char v[8] = "";
		if (pread(oom_fd, v, sizeof(v) - 1, 0) > 0 && !strncmp(v, "-1000", 5))
			snprintf(cfg->oom_adj, sizeof(cfg->oom_adj), "-1000");
	}
	memset(&ready, 0, sizeof(ready));
	ready.magic = SBX_PROTO_MAGIC;
	ready.kind = SBX_E_NONE;
	if (sbx_zygote_send_ready(ctl_fd, &ready, listener, -1) < 0)
		_exit(1);
	/* The host serves the listener; ours would only keep it open. */
	if (listener >= 0)
		close(listener);
	sbx_zygote_main(cfg);
}

/* One request: clone its zygote, answer with its pid (or the errno). */
static void serve(int sock, const struct sbx_tpl_req *req, int *fds, size_t nfds)
{
	struct sbx_tpl_reply rep;
	struct sbx_zygote_spawn sp;
	struct clone_args args;
	pid_t pid = -1;
	int e = EINVAL;

	memset(&rep, 0, sizeof(rep));
	rep.magic = SBX_TPL_MAGIC;
	/* The fds past our open files limit were dropped on the way (the
	 * kernel truncates, the message still comes): a zygote without
	 * them could not even say why it failed. */
	if (nfds != req->nfds) {
		rep.fds_short = 1;
		e = EMFILE;
	} else if (nfds >= 1 && /* only namespace flags: CLONE_PARENT is ours */
		   !(req->flags & ~(uint64_t)(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
					      CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWUSER))) {
		memset(&args, 0, sizeof(args));
		/* The child of the host, which reaps it and writes its id maps
		 * (exit_signal must be 0 with CLONE_PARENT: it is the
		 * template's own, SIGCHLD). */
		args.flags = req->flags | CLONE_PARENT;
		pid = (pid_t)syscall(SYS_clone3, &args, sizeof(args));
		e = errno;
	}
	if (pid == 0) {
		/* Nothing of ours beyond what the request brought. */
		int keep[SBX_TPL_MAX_FDS];
		for (size_t i = 0; i < nfds; i++)
			keep[i] = fds[i];
		sbx_close_fds_except(keep, nfds);
		if (sbx_zygote_unpack(fds[0], fds + 1, nfds - 1, &sp) != 0)
			_exit(1); /* the host sees the ready socket close */
		close(fds[0]);
		sbx_zygote_setup(&sp);
	}
	rep.pid = pid > 0 ? pid : 0;
	rep.err_no = pid > 0 ? 0 : e;
	for (size_t i = 0; i < nfds; i++)
		close(fds[i]);
	if (send(sock, &rep, sizeof(rep), MSG_NOSIGNAL) != sizeof(rep))
		_exit(0);
}

__attribute__((noreturn)) void sbx_zygote_template_main(int sock)
{
	/* Dumpable still (unlike the zygote): the host writes the id maps
	 * of our children, which /proc gives to root when they are not. */
	prctl(PR_SET_NAME, "sbx-template");
	(void)fcntl(sock, F_SETFD, FD_CLOEXEC);
	for (;;) {
		struct sbx_tpl_req req;
		int fds[SBX_TPL_MAX_FDS];
		size_t nfds = 0;
		/* The fds come close-on-exec: none may reach a workload. */
		ssize_t n =
			sbx_proto_recv_fds(sock, &req, sizeof(req), fds, SBX_TPL_MAX_FDS, &nfds);
		if (n == 0 || (n < 0 && errno != EINTR))
			_exit(0); /* the host closed its end, or died */
		if (n != (ssize_t)sizeof(req) || req.magic != SBX_TPL_MAGIC) {
			for (size_t i = 0; i < nfds; i++)
				close(fds[i]);
			continue;
		}
		serve(sock, &req, fds, nfds);
	}
}

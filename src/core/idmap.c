/*
 * idmap.c: read_write_paths the sandbox user does not own, made writable
 * without touching them: an idmapped mount.
 *
 * The sandbox user is an unprivileged host uid (231072, or privileged's
 * 300000 + n), so a bind of a dir owned by anyone else (root, typically)
 * is read-only to it in fact: EACCES.  When the host side is root the
 * session binds such a dir through a detached copy of its mount idmapped
 * with a user namespace that maps the dir's owner (uid and gid) to the
 * sandbox user's host ids, and nothing else: inside, the dir and its
 * owner's files are the sandbox user's; what it creates is the owner's on
 * the host; files of other users stay theirs (unmapped, as before).  The
 * dir itself is never chowned.  The copy is made here, on the host (only
 * the initial user namespace's root may idmap), and the zygote attaches it
 * where the bind would go (rootfs.c); for bubblewrap, whose binds are
 * bwrap's by path, each run gets a fresh copy (backend_none.c) that its
 * workload, still root, attaches over the dir's own path in a mount
 * namespace of its own before it execs bwrap.  A file system without idmapped
 * mounts keeps the plain bind (and its EACCES).  Since the sandbox now
 * writes as the owner, the session's filter refuses setuid and setgid mode
 * bits (seccomp.c's setid guard), so it cannot leave a setuid program of
 * the owner's (root's) on the host.
 *
 * A pinned work dir of another owner than the sandbox's host ids gets the
 * same idmap (sbx_idmap_work_dir): it is never chowned, and where no idmap
 * is possible the session is refused rather than the dir chowned.  For
 * bubblewrap each run's copy of it goes over the stage (statedir.c), a
 * path bwrap may walk even when the dir's own (/root/...) is closed to it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

/* A user namespace mapping host uid/gid from to host uid/gid to (as an
 * idmapped mount reads it: on-disk from appears as to); an fd, or -1. */
static int map_userns(uid_t from_uid, gid_t from_gid, uid_t to_uid, gid_t to_gid)
{
	int sp[2], fd = -1;
	char c = 0, path[64], map[64];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(sp[0]);
		if (unshare(CLONE_NEWUSER) == 0 && write(sp[1], "u", 1) == 1)
			(void)!read(sp[1], &c, 1); /* until the maps are written */
		_exit(0);
	}
	close(sp[1]);
	if (pid > 0 && read(sp[0], &c, 1) == 1) {
		int ok = 1;
		const char *file[2] = {"uid_map", "gid_map"};
		unsigned from[2] = {from_uid, from_gid}, to[2] = {to_uid, to_gid};
		for (int i = 0; i < 2 && ok; i++) {
			snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file[i]);
			snprintf(map, sizeof(map), "%u %u 1\n", from[i], to[i]);
			int m = open(path, O_WRONLY | O_CLOEXEC);
			ok = m >= 0 && write(m, map, strlen(map)) == (ssize_t)strlen(map);
			if (m >= 0)
				close(m);
		}
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		if (ok)
			fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	int e = errno;
	close(sp[0]); /* the child's read ends: it exits */
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	errno = e;
	return fd;
}

/* A detached copy of the mount tree at path, or at fd when fd >= 0 (path
 * then only names it in errors), nosuid, nodev, idmapped with ns unless ns
 * is -1: fd, -1 with err (what names the path's role), or -2 when this
 * file system has no idmapped mounts. */
static int tree_with(const char *what, const char *path, int fd, int ns, sbx_err *err)
{
	int tree = (int)syscall(SYS_open_tree, fd >= 0 ? fd : AT_FDCWD, fd >= 0 ? "" : path,
				OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE |
					(fd >= 0 ? AT_EMPTY_PATH : 0));
	if (tree < 0)
		return sbx_err_set(err, SBX_E_EXECUTION, errno, "%s %s: open_tree: %s", what, path,
				   strerror(errno));
	struct mount_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
	if (ns >= 0) {
		attr.attr_set |= MOUNT_ATTR_IDMAP;
		attr.userns_fd = (uint64_t)ns;
	}
	if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
		    sizeof(attr)) == 0)
		return tree;
	int e = errno;
	close(tree);
	/* The file system (or a mount below) cannot be idmapped: the plain
	 * bind stays. */
	if (e == EINVAL || e == EOPNOTSUPP || e == ENOSYS || e == EPERM)
		return -2;
	return sbx_err_set(err, SBX_E_EXECUTION, e, "%s %s: idmap: %s", what, path, strerror(e));
}

int sbx_idmap_prepare(sbx_rootfs *fs, const sbx_session_opts *o, uid_t to_uid, gid_t to_gid,
		      bool per_run, bool *any, sbx_err *err)
{
	*any = false;
	if (geteuid() != 0)
		return 0;
	for (size_t i = 0; i < fs->n; i++) {
		sbx_fs_entry *e = &fs->e[i];
		struct stat st;
		bool bound = false;
		/* The caller's read_write_paths only (the work dir is the
		 * sandbox's already). */
		for (size_t b = 0; b < o->n_binds && !bound; b++)
			bound = o->binds[b].writable && e->src == o->binds[b].path;
		if (e->kind != SBX_FS_BIND || !bound)
			continue;
		/* The path as it is now, before any run: later copies are of
		 * this dir, wherever a run (or anyone) moves it or whatever
		 * it puts at its path (a symlink to /etc). */
		int src = open(e->src, O_PATH | O_CLOEXEC);
		if (src < 0 || fstat(src, &st) != 0 ||
		    (st.st_uid == to_uid && st.st_gid == to_gid)) {
			if (src >= 0)
				close(src);
			continue;
		}
		/* Root of a user namespace (not the host's) cannot map ids
		 * nor idmap: the plain bind stays. */
		int ns = map_userns(st.st_uid, st.st_gid, to_uid, to_gid);
		int tree = ns < 0 ? -2 : tree_with("read_write_paths", e->src, src, ns, err);
		if (tree == -1 || tree == -2) {
			if (ns >= 0)
				close(ns);
			close(src);
			if (tree == -1)
				return -1;
			continue;
		}
		*any = true;
		if (per_run) {
			/* Each run attaches a fresh copy (sbx_idmap_tree). */
			close(tree);
			e->idmap_ns = ns;
			e->src_fd = src;
		} else {
			close(ns);
			close(src);
			e->mount_fd = tree;
		}
	}
	return 0;
}

/* The fail-closed answer for a pinned work dir the sandbox cannot be given
 * by an idmap: sbx never chowns the caller's dir behind their back. */
static int work_dir_refused(const char *work_dir, uid_t owner_uid, gid_t owner_gid, uid_t to_uid,
			    gid_t to_gid, sbx_err *err)
{
	return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, EOPNOTSUPP,
			   "work_dir %s: owned by %u:%u, and its file system cannot be idmapped "
			   "to the sandbox's host ids (%u:%u here); sbx never chowns a pinned work "
			   "dir: give it to those ids yourself (the host_uid option fixes them; "
			   "run_uid on privileged), or leave work_dir unset",
			   work_dir, (unsigned)owner_uid, (unsigned)owner_gid, (unsigned)to_uid,
			   (unsigned)to_gid);
}

int sbx_idmap_work_dir(sbx_rootfs *fs, const char *work_dir, uid_t owner_uid, gid_t owner_gid,
		       uid_t to_uid, gid_t to_gid, bool per_run, int *ns, sbx_err *err)
{
	/* A pinned dir of another owner: an idmap making that owner the
	 * sandbox user, so the dir keeps its owner and what the sandbox
	 * writes there is the owner's on the host. */
	*ns = -1;
	if (owner_uid != to_uid || owner_gid != to_gid) {
		*ns = map_userns(owner_uid, owner_gid, to_uid, to_gid);
		if (*ns < 0)
			return work_dir_refused(work_dir, owner_uid, owner_gid, to_uid, to_gid,
						err);
	}
	int tree = 0;
	if (per_run) {
		/* Each run gets its copy (sbx_idmap_copy); one now says
		 * whether the idmap works before any run. */
		if (*ns >= 0 && (tree = tree_with("work_dir", work_dir, -1, *ns, err)) >= 0)
			close(tree);
	} else {
		/* The zygote is another uid than the host: a work dir below a
		 * dir only root may enter (/root, 0700) would be out of its
		 * reach by path.  A copy of its mount the host made needs no
		 * path.  Where the host may not make a plain one (root of a
		 * user namespace only), the bind by path stays. */
		for (size_t i = 0; i < fs->n && tree >= 0; i++) {
			sbx_fs_entry *e = &fs->e[i];
			if (e->kind != SBX_FS_BIND || e->src != work_dir || e->mount_fd >= 0)
				continue;
			tree = tree_with("work_dir", work_dir, -1, *ns, err);
			e->mount_fd = tree < 0 ? -1 : tree;
			if (tree < 0 && *ns < 0)
				tree = 0;
		}
	}
	if (tree >= 0)
		return 0;
	close(*ns);
	*ns = -1;
	if (tree == -1) /* open_tree failed: its error stands */
		return -1;
	return work_dir_refused(work_dir, owner_uid, owner_gid, to_uid, to_gid, err);
}

int sbx_idmap_copy(const char *what, const char *path, int fd, int ns, sbx_err *err)
{
	int tree = tree_with(what, path, fd, ns, err);
	if (tree == -2)
		return sbx_err_set(err, SBX_E_EXECUTION, EINVAL, "%s %s: its idmap was refused",
				   what, path);
	return tree;
}

int sbx_idmap_tree(const sbx_fs_entry *e, sbx_err *err)
{
	return sbx_idmap_copy("read_write_paths", e->src, e->src_fd, e->idmap_ns, err);
}

int sbx_idmap_attach_private(const struct sbx_zygote_cfg *cfg)
{
	if (!cfg->n_idmap)
		return 0;
	/* A mount namespace of the run's own, cut off from the host's, with
	 * each copy over its own path: bwrap (started from here) binds it by
	 * that path. */
	if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) != 0)
		return -1;
	for (size_t i = 0; i < cfg->n_idmap; i++) {
		/* A read_write_path's copy goes over that same dir only: a
		 * run may have replaced a component of its path since (its
		 * work dir holding the path's parent), and bwrap would bind
		 * whatever the path now leads to.  Refused: ESTALE. */
		struct stat want, got;
		int at = open(cfg->idmap_path[i], O_PATH | O_CLOEXEC);
		if (at < 0)
			return -1;
		if (!cfg->idmap_stage[i] &&
		    (fstat(cfg->idmap_fd[i], &want) != 0 || fstat(at, &got) != 0 ||
		     want.st_dev != got.st_dev || want.st_ino != got.st_ino)) {
			close(at);
			errno = ESTALE;
			return -1;
		}
		int rc = (int)syscall(SYS_move_mount, cfg->idmap_fd[i], "", at, "",
				      MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
		close(at);
		if (rc != 0)
			return -1;
		close(cfg->idmap_fd[i]);
	}
	return 0;
}

void sbx_idmap_close(sbx_rootfs *fs, bool all)
{
	for (size_t i = 0; fs->e && i < fs->n; i++) {
		if (fs->e[i].mount_fd >= 0)
			close(fs->e[i].mount_fd);
		fs->e[i].mount_fd = -1;
		if (all && fs->e[i].idmap_ns >= 0) {
			close(fs->e[i].idmap_ns);
			fs->e[i].idmap_ns = -1;
		}
		if (all && fs->e[i].src_fd >= 0) {
			close(fs->e[i].src_fd);
			fs->e[i].src_fd = -1;
		}
	}
}

/*
 * rootfs.c: the filesystem a sandbox sees.
 *
 * Session side (once, in the zygote): a tmpfs root holding the entries of
 * the session's description (rootfs_desc.c: read-only binds of the system
 * dirs the policy lists, a curated /etc, a minimal /dev, a /proc of the
 * session's PID namespace, the work dir at /tmp/sandbox-work...), each made
 * by sbx_rootfs_mount_entry; then pivot_root into it and detach the host's
 * root.  Backend bubblewrap renders the same description as bwrap
 * arguments instead (rootfs_bwrap.c).
 * We follow bubblewrap's sequence: make / a slave so nothing we mount leaks
 * to the host, mount a scratch tmpfs, pivot into it with the old root kept
 * at /oldroot (so sources resolve there, whatever we shadow), build
 * /newroot, pivot again and detach everything old.
 *
 * Run side (per run, in sbx-init's fresh mount namespace): a new tmpfs on
 * /tmp and /dev/shm, the work dir re-attached beneath /tmp, a /proc of the
 * run's own PID namespace, writable but for its kernel-wide parts.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "rootfs_desc.h"

static int sys_open_tree(const char *path, unsigned int flags);
static int sys_move_mount(int from_fd, const char *to);

#define OLD "/oldroot"
#define NEW "/newroot"

/* Device nodes a sandbox gets, bound from the host's /dev. */
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty", NULL};

#define FAIL(...) sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno, __VA_ARGS__)

/* Bind src at dst (both existing), then set the wanted flags with
 * mount_setattr: it only adds flags (and clears read-only for a writable
 * bind), so the flags a mount had when it was inherited, which the kernel
 * locks in a user namespace, stay as they are without a statvfs to find
 * them (what a remount, which replaces every flag, needed). */
static int bind_mount(const char *src, const char *dst, bool writable, bool allow_dev, sbx_err *err)
{
	struct mount_attr attr;

	if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
		return FAIL("bind %s on %s: %s", src, dst, strerror(errno));
	memset(&attr, 0, sizeof(attr));
	attr.attr_set = MOUNT_ATTR_NOSUID | (writable ? 0 : MOUNT_ATTR_RDONLY) |
			(allow_dev ? 0 : MOUNT_ATTR_NODEV);
	attr.attr_clr = writable ? MOUNT_ATTR_RDONLY : 0;
	if (syscall(SYS_mount_setattr, AT_FDCWD, dst, 0, &attr, sizeof(attr)) != 0)
		return FAIL("remount %s read-%s: %s", dst, writable ? "write" : "only",
			    strerror(errno));
	return 0;
}

/* While the root is built (one process, a tree that only grows), the
 * last dir mkdirs made or found: entries in a row share a parent
 * (/etc/...), and each would otherwise pay a failing mkdir for it.  Off
 * outside sbx_rootfs_build: a run's fresh /tmp must not look made. */
static bool made_on;
static char made_last[PATH_MAX];

static int mkdirs_walk(const char *path, mode_t mode);

/* mkdir -p beneath the new root (path is absolute, inside). */
static int mkdirs(const char *path, mode_t mode)
{
	size_t len = strlen(path);

	if (made_on && !strcmp(path, made_last))
		return 0;
	if (mkdirs_walk(path, mode) != 0)
		return -1;
	if (made_on && len < sizeof(made_last))
		memcpy(made_last, path, len + 1);
	return 0;
}

static int mkdirs_walk(const char *path, mode_t mode)
{
	char buf[PATH_MAX];

	/* Most parents exist already (the root's entries share them): one
	 * mkdir then, not one per component. */
	if (mkdir(path, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -1;
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return -1;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) != 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return (mkdir(buf, mode) != 0 && errno != EEXIST) ? -1 : 0;
}

static int write_text(const char *path, const char *text, sbx_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return FAIL("create %s: %s", path, strerror(errno));
	size_t len = strlen(text);
	ssize_t n = write(fd, text, len);
	close(fd);
	if (n != (ssize_t)len)
		return FAIL("write %s: short write", path);
	return 0;
}

/* Replicate one host entry (src, absolute) at dst inside the new root:
 * symlinks are copied, dirs and files bound read-only (or read-write). */
static int replicate(const char *host_path, const char *inside, bool writable, bool must_exist,
		     sbx_err *err)
{
	char src[PATH_MAX], dst[PATH_MAX], target[PATH_MAX];
	struct stat st;

	snprintf(src, sizeof(src), OLD "%s", host_path);
	snprintf(dst, sizeof(dst), NEW "%s", inside);
	if (lstat(src, &st) != 0) {
		if (!must_exist && errno == ENOENT)
			return 0;
		return FAIL("%s: %s", host_path, strerror(errno));
	}
	char *slash = strrchr(dst, '/');
	*slash = '\0';
	if (slash != dst && mkdirs(dst, 0755) != 0)
		return FAIL("mkdir %s: %s", dst, strerror(errno));
	*slash = '/';
	if (S_ISLNK(st.st_mode)) {
		ssize_t n = readlink(src, target, sizeof(target) - 1);
		if (n < 0)
			return FAIL("readlink %s: %s", host_path, strerror(errno));
		target[n] = '\0';
		if (symlink(target, dst) != 0 && errno != EEXIST)
			return FAIL("symlink %s: %s", dst, strerror(errno));
		return 0;
	}
	if (S_ISDIR(st.st_mode)) {
		if (mkdir(dst, 0755) != 0 && errno != EEXIST)
			return FAIL("mkdir %s: %s", dst, strerror(errno));
	} else if (mknod(dst, S_IFREG | 0644, 0) != 0 && errno != EEXIST) {
		/* (A mount point file: mknod is one call, open and close two.) */
		return FAIL("create %s: %s", dst, strerror(errno));
	}
	return bind_mount(src, dst, writable, false, err);
}

int sbx_rootfs_etc_entry(const char *name, sbx_err *err)
{
	/* Policy lists names; never let one climb out of /etc. */
	if (strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, ".") || !*name)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "etc entry '%s' is not a plain name", name);
	/* These are generated, never taken from the host. */
	return !(!strcmp(name, "passwd") || !strcmp(name, "group") || !strcmp(name, "hosts") ||
		 !strcmp(name, "hostname") || !strcmp(name, "shadow") || !strcmp(name, "gshadow"));
}

/* A copy of a mount the host made (idmap.c: an idmapped read-write bind,
 * or the work dir), attached at dst (flags set by the host: nosuid,
 * nodev). */
static int attach_idmapped(const sbx_fs_entry *e, char *dst, sbx_err *err)
{
	struct stat st;

	char *slash = strrchr(dst, '/');
	*slash = '\0';
	int rc = slash == dst ? 0 : mkdirs(dst, 0755);
	*slash = '/';
	if (rc == 0 && fstat(e->mount_fd, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			rc = mkdir(dst, 0755) != 0 && errno != EEXIST ? -1 : 0;
		} else {
			int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
			rc = fd < 0 ? -1 : close(fd);
		}
	} else {
		rc = -1;
	}
	if (rc != 0)
		return FAIL("mount point %s: %s", e->dst, strerror(errno));
	if (sys_move_mount(e->mount_fd, dst) != 0)
		return FAIL("attach %s: %s", e->dst, strerror(errno));
	return 0;
}

/* A bind that must exist (the work dir, the caller's binds): a dir is
 * bound on a dir made for it, anything else replicated. */
static int mount_bind(const sbx_fs_entry *e, sbx_err *err)
{
	char src[PATH_MAX], dst[PATH_MAX];
	struct stat st;

	if (e->mirror)
		return replicate(e->src, e->dst, e->writable, false, err);
	snprintf(src, sizeof(src), OLD "%s", e->src);
	snprintf(dst, sizeof(dst), NEW "%s", e->dst);
	if (e->mount_fd >= 0)
		return attach_idmapped(e, dst, err);
	if (stat(src, &st) != 0)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, errno, "bind %s: %s", e->src,
				   strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return replicate(e->src, e->dst, e->writable, true, err);
	if (mkdirs(dst, 0755) != 0 && access(dst, F_OK) != 0)
		return FAIL("mkdir %s: %s", dst, strerror(errno));
	return bind_mount(src, dst, e->writable, false, err);
}

static int mount_data(const sbx_fs_entry *e, sbx_err *err)
{
	char dst[PATH_MAX];

	snprintf(dst, sizeof(dst), NEW "%s", e->dst);
	char *slash = strrchr(dst, '/');
	*slash = '\0';
	if (mkdirs(dst, 0755) != 0)
		return FAIL("mkdir %s: %s", dst, strerror(errno));
	*slash = '/';
	return write_text(dst, e->data, err);
}

/* A host device node (below OLD) at its inside path. */
static int mount_dev_node(const sbx_fs_entry *e, sbx_err *err)
{
	char src[PATH_MAX], dst[PATH_MAX];

	snprintf(src, sizeof(src), OLD "%s", e->src);
	snprintf(dst, sizeof(dst), NEW "%s", e->dst);
	char *slash = strrchr(dst, '/');
	*slash = '\0';
	if (mkdirs(dst, 0755) != 0)
		return FAIL("mkdir %s: %s", dst, strerror(errno));
	*slash = '/';
	if (mknod(dst, S_IFREG | 0666, 0) != 0 && errno != EEXIST)
		return FAIL("create %s: %s", dst, strerror(errno));
	return bind_mount(src, dst, true, true, err);
}

static int mount_dev(sbx_err *err)
{
	char src[64], dst[64];
	static const char *const links[][2] = {
		{"/proc/self/fd", NEW "/dev/fd"},	{"/proc/self/fd/0", NEW "/dev/stdin"},
		{"/proc/self/fd/1", NEW "/dev/stdout"}, {"/proc/self/fd/2", NEW "/dev/stderr"},
		{"pts/ptmx", NEW "/dev/ptmx"},
	};

	if (mkdir(NEW "/dev", 0755) != 0 ||
	    mount("tmpfs", NEW "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") != 0)
		return FAIL("mount /dev: %s", strerror(errno));
	for (int i = 0; dev_nodes[i]; i++) {
		snprintf(src, sizeof(src), OLD "/dev/%s", dev_nodes[i]);
		snprintf(dst, sizeof(dst), NEW "/dev/%s", dev_nodes[i]);
		if (mknod(dst, S_IFREG | 0666, 0) != 0)
			return FAIL("create %s: %s", dst, strerror(errno));
		/* A device node works only on a mount without nodev. */
		if (bind_mount(src, dst, true, true, err) < 0)
			return -1;
	}
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][0], links[i][1]) != 0)
			return FAIL("symlink %s: %s", links[i][1], strerror(errno));
	if (mkdir(NEW "/dev/pts", 0755) != 0 || mkdir(NEW "/dev/shm", 01777) != 0)
		return FAIL("mkdir /dev/pts: %s", strerror(errno));
	/* A private devpts instance: the host's ptys stay invisible. */
	if (mount("devpts", NEW "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=620") != 0)
		return FAIL("mount devpts: %s", strerror(errno));
	return 0;
}

int sbx_rootfs_mount_entry(const sbx_fs_entry *e, sbx_err *err)
{
	char dst[PATH_MAX];

	snprintf(dst, sizeof(dst), NEW "%s", e->dst);
	switch (e->kind) {
	case SBX_FS_BIND:
		return mount_bind(e, err);
	case SBX_FS_DATA:
		return mount_data(e, err);
	case SBX_FS_DEV:
		return mount_dev(err);
	case SBX_FS_DEV_NODE:
		return mount_dev_node(e, err);
	case SBX_FS_PROC:
		/* Writable: in a user namespace the kernel mounts each run's
		 * own proc (sbx_rootfs_run_mounts) writable only where a
		 * visible proc is (a read-only superblock would lock the run's
		 * read-only too).  No run ever sees this one: each mounts its
		 * own over it first. */
		if (mkdir(dst, 0555) != 0 ||
		    mount("proc", dst, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
			return FAIL("mount %s: %s", e->dst, strerror(errno));
		return 0;
	case SBX_FS_TMPFS:
		/* Only the mount point: each run mounts its own tmpfs of
		 * e->size here (sbx_rootfs_run_mounts). */
		if ((mkdir(dst, 01777) != 0 && errno != EEXIST) || chmod(dst, 01777) != 0)
			return FAIL("mkdir %s: %s", e->dst, strerror(errno));
		return 0;
	case SBX_FS_RO_DEV:
		if (mount(NULL, dst, NULL,
			  MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC | MS_NODEV,
			  "mode=0755,size=64k") != 0)
			return FAIL("remount %s read-only: %s", e->dst, strerror(errno));
		return 0;
	}
	return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "root filesystem: unknown entry %d",
			   (int)e->kind);
}

static int rootfs_build(const sbx_rootfs *fs, const char *hostname, sbx_err *err);

int sbx_rootfs_build(const sbx_rootfs *fs, const char *hostname, sbx_err *err)
{
	made_on = true;
	made_last[0] = '\0';
	int rc = rootfs_build(fs, hostname, err);
	made_on = false;
	made_last[0] = '\0';
	return rc;
}

static int rootfs_build(const sbx_rootfs *fs, const char *hostname, sbx_err *err)
{
	/* Nothing we mount may propagate back to the host, and host mounts
	 * made later do not appear here either. */
	if (mount(NULL, "/", NULL, MS_SLAVE | MS_REC, NULL) != 0)
		return FAIL("make / a slave mount: %s", strerror(errno));
	/* Scratch base: /tmp is as good as any dir, the host's /tmp stays
	 * reachable below /oldroot after the first pivot. */
	if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m") != 0)
		return FAIL("mount scratch tmpfs: %s", strerror(errno));
	if (chdir("/tmp") != 0 || mkdir("newroot", 0755) != 0 || mkdir("oldroot", 0755) != 0)
		return FAIL("prepare scratch: %s", strerror(errno));
	if (mount("tmpfs", "newroot", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m") != 0)
		return FAIL("mount root tmpfs: %s", strerror(errno));
	if (syscall(SYS_pivot_root, "/tmp", "/tmp/oldroot") != 0)
		return FAIL("pivot_root to scratch: %s", strerror(errno));
	if (chdir("/") != 0)
		return FAIL("chdir /: %s", strerror(errno));

	for (size_t i = 0; i < fs->n; i++)
		if (sbx_rootfs_mount_entry(&fs->e[i], err) < 0)
			return -1;
	if (sethostname(hostname, strlen(hostname)) != 0 ||
	    setdomainname("localdomain", strlen("localdomain")) != 0)
		return FAIL("sethostname: %s", strerror(errno));

	/* Second pivot: the new root on top, then detach the old one (the
	 * scratch tmpfs and, below it, the whole host tree). */
	if (chdir(NEW) != 0 || syscall(SYS_pivot_root, ".", ".") != 0)
		return FAIL("pivot_root to the new root: %s", strerror(errno));
	if (umount2(".", MNT_DETACH) != 0 || chdir("/") != 0)
		return FAIL("detach the host root: %s", strerror(errno));
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) !=
	    0)
		return FAIL("remount / read-only: %s", strerror(errno));
	/* Binds of slave mounts are slaves: cut them off from the host too,
	 * so later host mounts never appear in the sandbox. */
	if (mount(NULL, "/", NULL, MS_PRIVATE | MS_REC, NULL) != 0)
		return FAIL("make mounts private: %s", strerror(errno));
	return 0;
}

static int sys_open_tree(const char *path, unsigned int flags)
{
	return (int)syscall(SYS_open_tree, AT_FDCWD, path, flags);
}

static int sys_move_mount(int from_fd, const char *to)
{
	return (int)syscall(SYS_move_mount, from_fd, "", AT_FDCWD, to, MOVE_MOUNT_F_EMPTY_PATH);
}

/* Is an inside path covered by the per-run /tmp or /dev/shm? */
bool sbx_rootfs_is_scratch(const char *path)
{
	return !strncmp(path, "/tmp/", 5) || !strncmp(path, "/dev/shm/", 9);
}

/* A fresh /tmp and /dev/shm, with the mounts they cover carried over. */
static int scratch_mounts(const struct sbx_zygote_cfg *cfg, sbx_err *err)
{
	int carried[SBX_MAX_CARRY];
	size_t n = 0;
	char data[96];
	int rc = -1;

	/* Detach a copy of every mount the fresh /tmp and /dev/shm will cover
	 * (the work dir, binds below them).  The originals stay underneath,
	 * unreachable: unmounting them would cost an expedited RCU grace
	 * period (IPIs to every CPU) per run. */
	for (; cfg->carry[n]; n++) {
		carried[n] = sys_open_tree(cfg->carry[n], OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		if (carried[n] < 0) {
			FAIL("open_tree %s: %s", cfg->carry[n], strerror(errno));
			goto out;
		}
	}
	snprintf(data, sizeof(data), "mode=1777,size=%llu,nr_inodes=%llu",
		 (unsigned long long)cfg->tmp_bytes,
		 (unsigned long long)sbx_tmpfs_inodes(cfg->tmp_bytes));
	if (mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, data) != 0) {
		FAIL("mount /tmp: %s", strerror(errno));
		goto out;
	}
	snprintf(data, sizeof(data), "mode=1777,size=%llu,nr_inodes=%llu",
		 (unsigned long long)cfg->shm_bytes,
		 (unsigned long long)sbx_tmpfs_inodes(cfg->shm_bytes));
	if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, data) != 0) {
		FAIL("mount /dev/shm: %s", strerror(errno));
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct stat st;
		char parent[PATH_MAX];
		snprintf(parent, sizeof(parent), "%s", cfg->carry[i]);
		*strrchr(parent, '/') = '\0';
		if (fstat(carried[i], &st) != 0 || mkdirs(parent, 0755) != 0 ||
		    (S_ISDIR(st.st_mode) ? mkdir(cfg->carry[i], 0755)
					 : mknod(cfg->carry[i], S_IFREG | 0644, 0)) != 0 ||
		    sys_move_mount(carried[i], cfg->carry[i]) != 0) {
			FAIL("attach %s: %s", cfg->carry[i], strerror(errno));
			goto out;
		}
	}
	rc = 0;
out:
	for (size_t i = 0; i < n; i++)
		if (carried[i] >= 0)
			close(carried[i]);
	return rc;
}

/* The parts of /proc that configure the kernel rather than a process:
 * read-only binds over a writable /proc (bubblewrap's --proc does so too). */
static const char *const proc_ro[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus",
				      NULL};

int sbx_rootfs_run_mounts(const struct sbx_zygote_cfg *cfg, sbx_err *err)
{
	/* A proc of the run's own PID namespace, over the session's (the
	 * kernel mounts a new proc only where one is fully visible already).
	 * Writable, so a process may write its own files as on a host (raise
	 * /proc/self/oom_score_adj, as browsers do; the kernel's own checks
	 * still refuse lowering it, and other users' files); the kernel-wide
	 * parts stay read-only as a mount, even for code that regained a
	 * privilege. */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		return FAIL("mount /proc: %s", strerror(errno));
	for (int i = 0; proc_ro[i]; i++)
		if (access(proc_ro[i], F_OK) == 0 &&
		    bind_mount(proc_ro[i], proc_ro[i], false, false, err) < 0)
			return -1;
	/* A devpts of the run's own (pty.c): a run never sees another run's
	 * terminals (same uid, so the session's instance would let it read
	 * and type into them), nor the host's. */
	if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=620") != 0)
		return FAIL("mount the run's devpts: %s", strerror(errno));
	return scratch_mounts(cfg, err);
}

/* What a tmpfs holds, as statfs counts it. */
static void scratch_count(const char *path, uint64_t *blocks, uint64_t *inodes)
{
	struct statfs sf;

	if (statfs(path, &sf) != 0) {
		*blocks = *inodes = UINT64_MAX;
		return;
	}
	*blocks = (uint64_t)sf.f_bfree;
	*inodes = (uint64_t)sf.f_ffree;
}

void sbx_rootfs_scratch_mark(sbx_scratch_mark *m)
{
	scratch_count("/tmp", &m->tmp_blocks, &m->tmp_inodes);
	scratch_count("/dev/shm", &m->shm_blocks, &m->shm_inodes);
}

int sbx_rootfs_scratch_reset(const struct sbx_zygote_cfg *cfg, const sbx_scratch_mark *m,
			     sbx_err *err)
{
	sbx_scratch_mark now;

	/* Untouched (the counts are as they were after the mounts: nothing
	 * was created, since what was there is root's and cannot be removed
	 * by the run): no mount work at all.  A mark that failed never
	 * matches. */
	sbx_rootfs_scratch_mark(&now);
	if (m->tmp_blocks != UINT64_MAX && m->shm_blocks != UINT64_MAX &&
	    !memcmp(&now, m, sizeof(now)))
		return 0;
	/* The old ones go with everything carried below them; what they
	 * covered (the session's originals) is visible again to copy. */
	if (umount2("/tmp", MNT_DETACH) != 0 || umount2("/dev/shm", MNT_DETACH) != 0)
		return FAIL("unmount the last run's scratch: %s", strerror(errno));
	return scratch_mounts(cfg, err);
}

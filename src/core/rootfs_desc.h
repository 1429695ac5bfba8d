/*
 * rootfs_desc.h: the root filesystem of a session, described once as data.
 *
 * sbx_rootfs_describe turns a session's options into an ordered list of
 * entries (bind, generated file, /dev, /proc, tmpfs...).  Two renderers
 * read the same list: rootfs.c makes the mounts (native backends, in the
 * zygote), rootfs_bwrap.c writes bwrap's arguments (backend bubblewrap).
 * tests/unit/test_rootfs_desc.c renders one list both ways and checks that
 * they agree entry by entry.
 */
#ifndef SBX_ROOTFS_DESC_H
#define SBX_ROOTFS_DESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sbx.h"

struct sbx_gpu;

typedef enum sbx_fs_kind {
	SBX_FS_BIND,	 /* src (host) at dst, read-only unless writable */
	SBX_FS_DATA,	 /* a generated read-only file at dst holding data */
	SBX_FS_DEV,	 /* a minimal /dev: the safe nodes, pts, shm, fd links */
	SBX_FS_DEV_NODE, /* a host device node src at dst (GPU nodes) */
	SBX_FS_PROC,	 /* a proc of the sandbox's PID namespace */
	SBX_FS_TMPFS,	 /* a fresh tmpfs of size bytes (native: one per run) */
	SBX_FS_RO_DEV,	 /* /dev made read-only, once everything below it exists */
} sbx_fs_kind;

typedef struct sbx_fs_entry {
	sbx_fs_kind kind;
	const char *src; /* BIND, DEV_NODE: host path */
	const char *dst; /* the path inside */
	bool writable;	 /* BIND */
	bool mirror;	 /* BIND: src == dst, where present, a symlink stays one */
	uint64_t size;	 /* TMPFS */
	char *data;	 /* DATA: owned */
	char *own;	 /* a path above that the entry owns, or NULL */
	int mount_fd;	 /* BIND: a detached mount to attach instead (idmap.c), or -1 */
	int idmap_ns;	 /* BIND: the user namespace of its idmap (bubblewrap), or -1 */
	int src_fd;	 /* BIND with idmap_ns: src as opened at the session's start, or -1 */
} sbx_fs_entry;

/* Most entries a description holds. */
#define SBX_FS_MAX_ENTRIES 256
/* Most generated files (passwd, group, hosts, hostname, resolv.conf, CA bundle). */
#define SBX_FS_MAX_DATA 6

typedef struct sbx_rootfs {
	sbx_fs_entry *e;
	size_t n;
} sbx_rootfs;

/* Defaults of the per-run scratch sizes when the options leave them 0. */
#define SBX_DEFAULT_TMP_BYTES (256ull << 20)
#define SBX_DEFAULT_SHM_BYTES (64ull << 20)

/* Describe the root of a session: o's system dirs, /etc entries, binds and
 * sizes; the work dir host_work_dir; gpu's nodes and driver files (or
 * NULL); /etc/passwd and /etc/group naming the sandbox user as uid/gid.
 * Strings of o, gpu and host_work_dir are referenced, not copied: they
 * must outlive fs.  0, or -1 with err. */
int sbx_rootfs_describe(sbx_rootfs *fs, const sbx_session_opts *o, const char *host_work_dir,
			const struct sbx_gpu *gpu, uid_t uid, gid_t gid, sbx_err *err);
void sbx_rootfs_free(sbx_rootfs *fs);
/* Where a pinned work dir (o->work_dir; host_work_dir resolved) appears
 * inside besides /tmp/sandbox-work: at its host path, so paths the caller
 * builds from it work on both sides; NULL when not pinned or the same.
 * Describing a root refuses (InvalidArgument) one that lies in the
 * sandbox's /proc, /dev, /sys or work dir, or is / or /tmp. */
const char *sbx_rootfs_work_alias(const sbx_session_opts *o, const char *host_work_dir);
/* The size of the TMPFS entry at dst, 0 when there is none. */
uint64_t sbx_rootfs_tmpfs_size(const sbx_rootfs *fs, const char *dst);

/* Native rendering (rootfs.c): make entry e beneath the new root, host
 * paths resolved beneath the old one.  0, or -1 with err. */
int sbx_rootfs_mount_entry(const sbx_fs_entry *e, sbx_err *err);

/* bwrap rendering (rootfs_bwrap.c) into a growing NULL-terminated argv of
 * copies.  data_fd is the fd bwrap reads a DATA entry from (ignored for
 * others).  0, or -1 when out of memory. */
typedef struct sbx_argv {
	char **v;
	size_t n, cap;
} sbx_argv;
int sbx_argv_add(sbx_argv *a, int count, ...);
void sbx_argv_free(sbx_argv *a);
int sbx_rootfs_bwrap_entry(sbx_argv *a, const sbx_fs_entry *e, int data_fd);
/* Every entry in order; data_fd[k] for the k-th DATA entry. */
int sbx_rootfs_bwrap_args(sbx_argv *a, const sbx_rootfs *fs, const int *data_fd);

#endif

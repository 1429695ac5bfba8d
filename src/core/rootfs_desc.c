/*
 * rootfs_desc.c: the root filesystem of a session, described once.
 *
 * The order is the order both renderers make things in: the system dirs
 * and /etc entries the policy lists, the generated /etc files, /dev and
 * the session's GPU nodes and driver files, /proc, the per-run scratch
 * tmpfs mounts, the work dir, the caller's binds, and last /dev made
 * read-only (only after everything below it exists).  The root itself is
 * made read-only by each renderer once the entries are in place.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rootfs_desc.h"

static sbx_fs_entry *add(sbx_rootfs *fs, sbx_fs_kind kind, const char *src, const char *dst)
{
	if (fs->n == SBX_FS_MAX_ENTRIES)
		return NULL;
	sbx_fs_entry *e = &fs->e[fs->n++];
	memset(e, 0, sizeof(*e));
	e->kind = kind;
	e->mount_fd = e->idmap_ns = e->src_fd = -1;
	e->src = src;
	e->dst = dst;
	return e;
}

/* A host path at the same place, read-only, where present. */
static sbx_fs_entry *add_mirror(sbx_rootfs *fs, const char *path)
{
	sbx_fs_entry *e = add(fs, SBX_FS_BIND, path, path);
	if (e)
		e->mirror = true;
	return e;
}

/* A generated file; text is a printf format. */
static __attribute__((format(printf, 3, 4))) sbx_fs_entry *add_data(sbx_rootfs *fs, const char *dst,
								    const char *fmt, ...)
{
	va_list ap;
	char *text;

	va_start(ap, fmt);
	int n = vasprintf(&text, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	sbx_fs_entry *e = add(fs, SBX_FS_DATA, NULL, dst);
	if (!e) {
		free(text);
		return NULL;
	}
	e->data = text;
	return e;
}

/* open mode: the host's name servers, minus loopback ones (the host's
 * loopback is unreachable from the sandbox by design); the other modes
 * have no DNS to reach (allowlist names are resolved by the proxy). */
static sbx_fs_entry *add_resolv_conf(sbx_rootfs *fs)
{
	char out[1024] = "# sbx: the host's non-loopback name servers (network_mode open)\n";
	char line[256];
	size_t n = strlen(out);
	FILE *f = fopen("/etc/resolv.conf", "re");

	while (f && fgets(line, sizeof(line), f)) {
		char addr[128];
		if (sscanf(line, " nameserver %127s", addr) != 1 || !strncmp(addr, "127.", 4) ||
		    !strcmp(addr, "::1"))
			continue;
		int w = snprintf(out + n, sizeof(out) - n, "nameserver %s\n", addr);
		if (w < 0 || (size_t)w >= sizeof(out) - n)
			break;
		n += (size_t)w;
	}
	if (f)
		fclose(f);
	return add_data(fs, "/etc/resolv.conf", "%s", out);
}

/* The policy's /etc entries (those not generated), then the generated. */
static int describe_etc(sbx_rootfs *fs, const sbx_session_opts *o, uid_t uid, gid_t gid,
			sbx_err *err)
{
	const char *hostname = o->hostname ? o->hostname : "sandbox";

	for (const char *const *name = o->etc_files; name && *name; name++) {
		int take = sbx_rootfs_etc_entry(*name, err);
		if (take < 0)
			return -1;
		if (!take)
			continue;
		char *path;
		if (asprintf(&path, "/etc/%s", *name) < 0)
			return -2;
		sbx_fs_entry *e = add_mirror(fs, path);
		if (!e) {
			free(path);
			return -2;
		}
		e->own = path;
	}
	if (!add_data(fs, "/etc/passwd",
		      "root:x:0:0:root:/root:/bin/sh\n"
		      "sandbox:x:%u:%u:sandbox:" SBX_SANDBOX_WORKDIR ":/bin/sh\n"
		      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		      (unsigned)uid, (unsigned)gid) ||
	    !add_data(fs, "/etc/group", "root:x:0:\nsandbox:x:%u:\nnogroup:x:65534:\n",
		      (unsigned)gid) ||
	    !add_data(fs, "/etc/hosts", "127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost\n",
		      hostname) ||
	    !add_data(fs, "/etc/hostname", "%s\n", hostname))
		return -2;
	if (o->network_mode == SBX_NET_OPEN && !add_resolv_conf(fs))
		return -2;
	if (o->ca_bundle && !add_data(fs, SBX_CA_BUNDLE_PATH, "%s", o->ca_bundle))
		return -2;
	return 0;
}

/* The session's GPU nodes, then its driver files not already visible
 * below a system dir (read-only, at the same path as on the host). */
static int describe_gpu(sbx_rootfs *fs, const sbx_session_opts *o, const sbx_gpu *gpu)
{
	for (size_t i = 0; gpu && i < gpu->n_nodes; i++)
		if (!add(fs, SBX_FS_DEV_NODE, gpu->host_node[i], gpu->inside_node[i]))
			return -2;
	for (size_t i = 0; gpu && i < gpu->n_libs; i++) {
		bool visible = false;
		for (const char *const *d = o->system_ro; d && *d && !visible; d++)
			visible = !strncmp(gpu->lib[i], *d, strlen(*d)) &&
				  gpu->lib[i][strlen(*d)] == '/';
		if (!visible && !add_mirror(fs, gpu->lib[i]))
			return -2;
	}
	return 0;
}

static bool is_or_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return !strncmp(path, dir, n) && (path[n] == '\0' || path[n] == '/');
}

const char *sbx_rootfs_work_alias(const sbx_session_opts *o, const char *host_work_dir)
{
	if (!o->work_dir || !host_work_dir || !strcmp(host_work_dir, SBX_SANDBOX_WORKDIR))
		return NULL;
	return host_work_dir;
}

/* Whether the work dir can appear at its own path inside: 0, or -1 with
 * err. */
static int check_work_alias(const char *host_work_dir, sbx_err *err)
{
	static const char *const taken[] = {SBX_SANDBOX_WORKDIR, "/proc", "/dev", "/sys", NULL};

	if (!strcmp(host_work_dir, SBX_SANDBOX_WORKDIR))
		return 0;
	for (int i = 0; taken[i]; i++)
		if (is_or_under(host_work_dir, taken[i]))
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "work_dir %s: a pinned work dir is also mounted at its "
					   "host path inside, and %s is the sandbox's own",
					   host_work_dir, taken[i]);
	if (!strcmp(host_work_dir, "/tmp") || !strcmp(host_work_dir, "/"))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "work_dir %s: a pinned work dir is also mounted at its host "
				   "path inside; use a directory of its own",
				   host_work_dir);
	return 0;
}

static int describe(sbx_rootfs *fs, const sbx_session_opts *o, const char *host_work_dir,
		    const sbx_gpu *gpu, uid_t uid, gid_t gid, sbx_err *err)
{
	sbx_fs_entry *e;
	int rc;

	for (const char *const *d = o->system_ro; d && *d; d++)
		if (!add_mirror(fs, *d))
			return -2;
	if ((rc = describe_etc(fs, o, uid, gid, err)) < 0)
		return rc;
	if (!add(fs, SBX_FS_DEV, NULL, "/dev") || describe_gpu(fs, o, gpu) < 0 ||
	    !add(fs, SBX_FS_PROC, NULL, "/proc"))
		return -2;
	if (!(e = add(fs, SBX_FS_TMPFS, NULL, "/tmp")))
		return -2;
	e->size = o->tmp_bytes ? o->tmp_bytes : SBX_DEFAULT_TMP_BYTES;
	if (!(e = add(fs, SBX_FS_TMPFS, NULL, "/dev/shm")))
		return -2;
	e->size = o->shm_bytes ? o->shm_bytes : SBX_DEFAULT_SHM_BYTES;
	if (!(e = add(fs, SBX_FS_BIND, host_work_dir, SBX_SANDBOX_WORKDIR)))
		return -2;
	e->writable = true;
	for (size_t i = 0; i < o->n_binds; i++) {
		if (!(e = add(fs, SBX_FS_BIND, o->binds[i].path, o->binds[i].path)))
			return -2;
		e->writable = o->binds[i].writable;
	}
	/* A pinned work dir also at its host path, after the binds so one
	 * of them that contains it does not cover it. */
	const char *alias = sbx_rootfs_work_alias(o, host_work_dir);
	if (alias) {
		if (check_work_alias(alias, err) < 0)
			return -1;
		if (!(e = add(fs, SBX_FS_BIND, host_work_dir, alias)))
			return -2;
		e->writable = true;
	}
	return add(fs, SBX_FS_RO_DEV, NULL, "/dev") ? 0 : -2;
}

int sbx_rootfs_describe(sbx_rootfs *fs, const sbx_session_opts *o, const char *host_work_dir,
			const struct sbx_gpu *gpu, uid_t uid, gid_t gid, sbx_err *err)
{
	memset(fs, 0, sizeof(*fs));
	fs->e = calloc(SBX_FS_MAX_ENTRIES, sizeof(*fs->e));
	if (!fs->e)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
	int rc = describe(fs, o, host_work_dir, gpu, uid, gid, err);
	if (rc == 0)
		return 0;
	sbx_rootfs_free(fs);
	if (rc == -2)
		sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENOMEM,
			    "root filesystem: out of memory or more than %d entries",
			    SBX_FS_MAX_ENTRIES);
	return -1;
}

void sbx_rootfs_free(sbx_rootfs *fs)
{
	for (size_t i = 0; fs->e && i < fs->n; i++) {
		free(fs->e[i].data);
		free(fs->e[i].own);
	}
	free(fs->e);
	memset(fs, 0, sizeof(*fs));
}

uint64_t sbx_rootfs_tmpfs_size(const sbx_rootfs *fs, const char *dst)
{
	for (size_t i = 0; i < fs->n; i++)
		if (fs->e[i].kind == SBX_FS_TMPFS && !strcmp(fs->e[i].dst, dst))
			return fs->e[i].size;
	return 0;
}

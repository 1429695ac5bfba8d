/*
 * rootfs_bwrap.c: a root filesystem description (rootfs_desc.c) rendered as
 * bwrap arguments, for backend bubblewrap.  bwrap makes the tmpfs root and
 * applies the arguments in order, the way rootfs.c applies the entries.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rootfs_desc.h"

int sbx_argv_add(sbx_argv *a, int count, ...)
{
	va_list ap;

	if (a->n + (size_t)count + 1 > a->cap) {
		size_t nc = (a->cap ? a->cap * 2 : 64) + (size_t)count;
		char **nv = realloc(a->v, nc * sizeof(char *));
		if (!nv)
			return -1;
		a->v = nv;
		a->cap = nc;
	}
	va_start(ap, count);
	for (int i = 0; i < count; i++) {
		const char *s = va_arg(ap, const char *);
		if (!(a->v[a->n] = strdup(s))) {
			va_end(ap);
			a->v[a->n] = NULL;
			return -1;
		}
		a->v[++a->n] = NULL;
	}
	va_end(ap);
	return 0;
}

void sbx_argv_free(sbx_argv *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	memset(a, 0, sizeof(*a));
}

/* A host path as bwrap should recreate it: a symlink stays a symlink;
 * absent, nothing ("where present", like the mounts). */
static int mirror(sbx_argv *a, const sbx_fs_entry *e)
{
	struct stat st;
	char target[PATH_MAX];

	if (lstat(e->src, &st) != 0)
		return 0;
	if (S_ISLNK(st.st_mode)) {
		ssize_t len = readlink(e->src, target, sizeof(target) - 1);
		if (len < 0)
			return 0;
		target[len] = '\0';
		return sbx_argv_add(a, 3, "--symlink", target, e->dst);
	}
	return sbx_argv_add(a, 3, e->writable ? "--bind" : "--ro-bind", e->src, e->dst);
}

int sbx_rootfs_bwrap_entry(sbx_argv *a, const sbx_fs_entry *e, int data_fd)
{
	char num[32];

	switch (e->kind) {
	case SBX_FS_BIND:
		if (e->mirror)
			return mirror(a, e);
		return sbx_argv_add(a, 3, e->writable ? "--bind" : "--ro-bind", e->src, e->dst);
	case SBX_FS_DATA:
		snprintf(num, sizeof(num), "%d", data_fd);
		return sbx_argv_add(a, 3, "--ro-bind-data", num, e->dst);
	case SBX_FS_DEV:
		return sbx_argv_add(a, 2, "--dev", e->dst);
	case SBX_FS_DEV_NODE:
		return sbx_argv_add(a, 3, "--dev-bind", e->src, e->dst);
	case SBX_FS_PROC:
		/* bwrap's --proc binds /proc's kernel-wide parts read-only, as
		 * rootfs.c's run mounts do. */
		return sbx_argv_add(a, 2, "--proc", e->dst);
	case SBX_FS_TMPFS:
		snprintf(num, sizeof(num), "%llu", (unsigned long long)e->size);
		return sbx_argv_add(a, 4, "--size", num, "--tmpfs", e->dst);
	case SBX_FS_RO_DEV:
		/* Only that mount: /dev/shm and /dev/pts stay writable. */
		return sbx_argv_add(a, 2, "--remount-ro", e->dst);
	}
	return -1;
}

int sbx_rootfs_bwrap_args(sbx_argv *a, const sbx_rootfs *fs, const int *data_fd)
{
	size_t k = 0;

	for (size_t i = 0; i < fs->n; i++) {
		int fd = fs->e[i].kind == SBX_FS_DATA ? data_fd[k++] : -1;
		if (sbx_rootfs_bwrap_entry(a, &fs->e[i], fd) < 0)
			return -1;
	}
	return 0;
}

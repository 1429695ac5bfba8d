/*
 * gpu.c: binding NVIDIA GPUs into a session, fail closed.
 *
 * A session asking for N GPUs gets N of the /dev/nvidia<k> nodes of the
 * device directory (the lowest-numbered free ones, never all), plus the
 * shared control nodes that exist (nvidiactl, nvidia-uvm,
 * nvidia-uvm-tools, nvidia-modeset, nvidia-caps/<each>).  For each node it
 * records the device-cgroup rule that allows exactly that node (cgroup.c
 * denies every other device), and rootfs.c binds the nodes into the
 * sandbox's /dev.  The driver's user-space files come from the policy's
 * paths/globs, or `ldconfig -p` when it lists none, and are bound
 * read-only.
 *
 * A GPU is held through a lock file per device node (flock: exclusive for
 * a session of its own, shared when the policy lets sessions share), so
 * two sessions never share a GPU unless both were allowed to.  The device
 * directory is configurable so tests can use stand-in nodes.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"

static const char *const ctl_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
					"nvidia-modeset", NULL};

/* Add one device node (host path, inside name below /dev) with its rule. */
static int add_node(sbx_gpu *g, const char *host, const char *name, sbx_err *err)
{
	struct stat st;
	char inside[PATH_MAX], rule[64];

	if (g->n_nodes >= SBX_GPU_MAX_NODES)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
				   "gpus: too many device nodes");
	if (stat(host, &st) != 0 || !S_ISCHR(st.st_mode))
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
				   "gpus: %s is not a character device", host);
	snprintf(inside, sizeof(inside), "/dev/%s", name);
	snprintf(rule, sizeof(rule), "c %u:%u rw", major(st.st_rdev), minor(st.st_rdev));
	g->host_node[g->n_nodes] = strdup(host);
	g->inside_node[g->n_nodes] = strdup(inside);
	g->rule[g->n_nodes] = strdup(rule);
	if (!g->host_node[g->n_nodes] || !g->inside_node[g->n_nodes] || !g->rule[g->n_nodes])
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
	g->n_nodes++;
	return 0;
}

static int cmp_int(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

/* Try to hold GPU <dir>/nvidia<idx> for this session. */
static int lock_gpu(const char *node, const char *lock_dir, bool shared)
{
	struct stat st;
	char path[PATH_MAX];

	if (stat(node, &st) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/gpu-%llx-%llx.lock", lock_dir,
		 (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int add_lib(sbx_gpu *g, const char *path, sbx_err *err)
{
	if (path[0] != '/' || !strncmp(path, "/tmp/", 5) || strstr(path, "/../"))
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
				   "gpus: driver path %s must be absolute, normalized and not in "
				   "/tmp (every run gets a fresh /tmp)",
				   path);
	for (size_t i = 0; i < g->n_libs; i++)
		if (!strcmp(g->lib[i], path))
			return 0;
	if (g->n_libs >= SBX_GPU_MAX_LIBS)
		return 0;
	if (!(g->lib[g->n_libs] = strdup(path)))
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
	g->n_libs++;
	return 0;
}

/* No paths in the policy: whatever the dynamic linker knows of the driver. */
static int libs_from_ldconfig(sbx_gpu *g, sbx_err *err)
{
	FILE *p = popen("/sbin/ldconfig -p 2>/dev/null", "re");
	char line[1024];

	if (!p)
		return 0;
	while (fgets(line, sizeof(line), p)) {
		char *arrow = strstr(line, "=> ");
		if (!arrow || (!strstr(line, "libnvidia") && !strstr(line, "libcuda")))
			continue;
		char *path = arrow + 3;
		path[strcspn(path, "\n")] = '\0';
		if (add_lib(g, path, err) < 0) {
			pclose(p);
			return -1;
		}
	}
	pclose(p);
	if (access("/usr/bin/nvidia-smi", X_OK) == 0)
		return add_lib(g, "/usr/bin/nvidia-smi", err);
	return 0;
}

int sbx_gpu_prepare(sbx_gpu *g, const sbx_session_opts *o, const char *lock_dir, sbx_err *err)
{
	const char *dir = o->gpu_dev_dir ? o->gpu_dev_dir : "/dev";
	int idx[256], n = 0;
	char path[PATH_MAX], name[64];
	struct dirent *de;

	if (o->gpus > SBX_GPU_MAX)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "gpus: at most %d", SBX_GPU_MAX);
	DIR *d = opendir(dir);
	if (!d)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
				   "gpus: cannot read the device directory %s: %s", dir,
				   strerror(errno));
	while ((de = readdir(d)) && n < 256) {
		char *end;
		if (strncmp(de->d_name, "nvidia", 6) || !de->d_name[6])
			continue;
		long k = strtol(de->d_name + 6, &end, 10);
		if (*end || k < 0 || k > 4096 || de->d_name[6] < '0' || de->d_name[6] > '9')
			continue;
		idx[n++] = (int)k;
	}
	closedir(d);
	qsort(idx, (size_t)n, sizeof(int), cmp_int);
	if ((uint32_t)n < o->gpus)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
				   "gpus = %u, but %s has %d NVIDIA GPU node(s) (is the driver "
				   "loaded? nvidia-smi lists them)",
				   o->gpus, dir, n);
	if (mkdir(lock_dir, 0700) != 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
				   "gpus: lock dir %s: %s (set SBX_GPU_LOCK_DIR)", lock_dir,
				   strerror(errno));
	for (int i = 0; i < n && g->n < o->gpus; i++) {
		snprintf(path, sizeof(path), "%s/nvidia%d", dir, idx[i]);
		int fd = lock_gpu(path, lock_dir, o->gpu_shared);
		if (fd < 0)
			continue;
		g->lock_fd[g->n] = fd;
		g->index[g->n++] = idx[i];
		snprintf(name, sizeof(name), "nvidia%d", idx[i]);
		if (add_node(g, path, name, err) < 0)
			goto fail;
	}
	if (g->n < o->gpus) {
		sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, EBUSY,
			    "gpus = %u, but only %u of the %d GPU(s) in %s are free (others are "
			    "held by other sessions)",
			    o->gpus, g->n, n, dir);
		goto fail;
	}
	for (int i = 0; ctl_nodes[i]; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, ctl_nodes[i]);
		if (access(path, F_OK) == 0 && add_node(g, path, ctl_nodes[i], err) < 0)
			goto fail;
	}
	snprintf(path, sizeof(path), "%s/nvidia-caps", dir);
	if ((d = opendir(path))) {
		while ((de = readdir(d))) {
			char p2[PATH_MAX];
			if (de->d_name[0] == '.')
				continue;
			snprintf(p2, sizeof(p2), "%.3800s/%.200s", path, de->d_name);
			snprintf(name, sizeof(name), "nvidia-caps/%.40s", de->d_name);
			if (add_node(g, p2, name, err) < 0) {
				closedir(d);
				goto fail;
			}
		}
		closedir(d);
	}
	if (o->gpu_paths) {
		for (const char *const *p = o->gpu_paths; *p; p++) {
			glob_t gl;
			if (glob(*p, GLOB_NOSORT, NULL, &gl) != 0)
				continue; /* "where present" */
			for (size_t i = 0; i < gl.gl_pathc; i++)
				if (add_lib(g, gl.gl_pathv[i], err) < 0) {
					globfree(&gl);
					goto fail;
				}
			globfree(&gl);
		}
	} else if (libs_from_ldconfig(g, err) < 0) {
		goto fail;
	}
	return 0;
fail:
	sbx_gpu_release(g);
	return -1;
}

void sbx_gpu_release(sbx_gpu *g)
{
	for (size_t i = 0; i < g->n_nodes; i++) {
		free(g->host_node[i]);
		free((char *)g->inside_node[i]);
		free((char *)g->rule[i]);
		g->host_node[i] = NULL;
		g->inside_node[i] = g->rule[i] = NULL;
	}
	for (size_t i = 0; i < g->n_libs; i++) {
		free(g->lib[i]);
		g->lib[i] = NULL;
	}
	for (uint32_t i = 0; i < g->n; i++)
		if (g->lock_fd[i] >= 0)
			close(g->lock_fd[i]);
	g->n = 0;
	g->n_nodes = g->n_libs = 0;
}

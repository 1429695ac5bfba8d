/*
 * cgroup.c: a session's resource ceilings, through a cgroup of its own.
 *
 * The host makes one cgroup per session, writes the limits, and moves the
 * zygote in before it lets it go on (session.c), so every run the zygote
 * starts inherits it; the host process itself stays outside.  At close,
 * after the zygote is reaped, whatever is left is killed through the cgroup
 * and the cgroup removed.
 *
 * Both hierarchies are supported, chosen at runtime from what the cgroup
 * root holds:
 *   v2  <root>/cgroup.controllers exists: <root>/sbx/<id>, limits in
 *       memory.max, memory.swap.max (0: no swap), cpu.max, pids.max; OOM
 *       kills counted in memory.events; leftovers killed with cgroup.kill.
 *   v1  otherwise: <root>/<controller>/sbx/<id> for memory, cpu + cpuacct,
 *       pids and devices as needed; memory.limit_in_bytes, memsw (when the
 *       kernel accounts swap) and swappiness 0, cfs quota/period,
 *       pids.max, devices.deny/allow; OOM kills counted in the oom_kill
 *       line of memory.oom_control; leftovers killed one by one.
 * The root is configurable (opts->cgroup_root, SBX_CGROUP_ROOT) so the v2
 * and v1 paths can be tested against a fake cgroupfs directory.  Files are
 * opened with O_CREAT for that reason: on a real cgroupfs the files exist.
 *
 * Device rules (GPU) are enforced on v1 with devices.deny "a" and one
 * devices.allow per rule; on v2 with a BPF_PROG_TYPE_CGROUP_DEVICE program
 * (devbpf.c) that allows exactly the same list.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define CG_PERIOD_US 100000u

/* The devices every sandbox has: null, zero, full, random, urandom, tty,
 * ptmx and its pts. */
static const char *const base_rules[] = {"c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm",
					 "c 1:9 rwm", "c 5:0 rwm", "c 5:2 rwm", "c 136:* rwm", NULL};
#define SBX_CG_MAX_RULES 96

static const char *const v1_names[SBX_CG_NCTL] = {"memory", "cpu", "cpuacct", "pids", "devices"};

const char *sbx_cgroup_default_root(void)
{
	const char *env = getenv("SBX_CGROUP_ROOT");
	return env && *env ? env : "/sys/fs/cgroup";
}

/* Write text to dir/name (created when absent: fake cgroupfs). */
static int put(const char *dir, const char *name, const char *text, sbx_err *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%.4000s/%.80s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno, "cgroup: open %s: %s",
				   path, strerror(errno));
	ssize_t n = write(fd, text, strlen(text));
	int saved = errno;
	close(fd);
	if (n != (ssize_t)strlen(text))
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, saved,
				   "cgroup: write '%s' to %s: %s", text, path, strerror(saved));
	return 0;
}

static bool exists(const char *dir, const char *name)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%.4000s/%.80s", dir, name);
	return access(path, F_OK) == 0;
}

/* Read a small file into buf (NUL-terminated); -1 when it cannot be read. */
static int slurp(const char *dir, const char *name, char *buf, size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%.4000s/%.80s", dir, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

static int mkdir_p1(const char *path, sbx_err *err)
{
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
				   "cgroup: mkdir %s: %s (resource ceilings need root, or a "
				   "delegated cgroup; set SBX_CGROUP_ROOT to one)",
				   path, strerror(errno));
	return 0;
}

/* Does a space-separated list hold word? */
static bool has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ' || p[-1] == '+') &&
		    (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

bool sbx_cgroup_wanted(const sbx_cgroup_limits *lim)
{
	return lim->memory_bytes || lim->cpu_milli || lim->pids_max || lim->n_devices;
}

static int create_v2(sbx_cgroup *cg, const char *root, const char *id,
		     const sbx_cgroup_limits *lim, sbx_err *err)
{
	char ctl[256], base[PATH_MAX], want[64] = "";
	const char *names[3] = {lim->memory_bytes ? "memory" : NULL,
				lim->cpu_milli ? "cpu" : NULL, lim->pids_max ? "pids" : NULL};

	if (slurp(root, "cgroup.controllers", ctl, sizeof(ctl)) < 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
				   "cgroup v2 at %s: cannot read cgroup.controllers", root);
	for (int i = 0; i < 3; i++) {
		if (!names[i])
			continue;
		if (!has_word(ctl, names[i]))
			return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, 0,
					   "cgroup v2 at %s lacks the %s controller (has: %s); "
					   "enable it in the parent's cgroup.subtree_control",
					   root, names[i], ctl);
		strcat(want, want[0] ? " +" : "+");
		strcat(want, names[i]);
	}
	snprintf(base, sizeof(base), "%s/sbx", root);
	/* Enable the controllers for sbx/ and for sbx/<id>: only a parent's
	 * subtree_control makes a controller's files appear in a child. */
	if (put(root, "cgroup.subtree_control", want, err) < 0 || mkdir_p1(base, err) < 0 ||
	    put(base, "cgroup.subtree_control", want, err) < 0)
		return -1;
	if (snprintf(cg->dir[0], sizeof(cg->dir[0]), "%s/%s", base, id) >= PATH_MAX - 32)
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENAMETOOLONG, "cgroup path too long");
	if (mkdir(cg->dir[0], 0755) != 0)
		return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno, "cgroup: mkdir %s: %s",
				   cg->dir[0], strerror(errno));
	cg->made[0] = true;
	char v[64];
	if (lim->memory_bytes) {
		snprintf(v, sizeof(v), "%" PRIu64, lim->memory_bytes);
		/* No swap: a sandbox at its limit is killed, not paged out. */
		if (put(cg->dir[0], "memory.max", v, err) < 0 ||
		    (exists(cg->dir[0], "memory.swap.max") &&
		     put(cg->dir[0], "memory.swap.max", "0", err) < 0))
			return -1;
		snprintf(cg->oom_path, sizeof(cg->oom_path), "%.4000s/memory.events", cg->dir[0]);
	}
	if (lim->cpu_milli) {
		snprintf(v, sizeof(v), "%" PRIu64 " %u",
			 (uint64_t)lim->cpu_milli * CG_PERIOD_US / 1000, CG_PERIOD_US);
		if (put(cg->dir[0], "cpu.max", v, err) < 0)
			return -1;
	}
	if (lim->pids_max) {
		snprintf(v, sizeof(v), "%u", lim->pids_max);
		if (put(cg->dir[0], "pids.max", v, err) < 0)
			return -1;
	}
	if (lim->n_devices) {
		/* No devices.allow on v2: a BPF program decides. */
		const char *rules[SBX_CG_MAX_RULES];
		size_t n = 0;
		for (size_t i = 0; base_rules[i] && n < SBX_CG_MAX_RULES; i++)
			rules[n++] = base_rules[i];
		for (size_t i = 0; i < lim->n_devices && n < SBX_CG_MAX_RULES; i++)
			rules[n++] = lim->devices[i];
		if (sbx_devbpf_attach(cg->dir[0], rules, n, err) < 0)
			return -1;
	}
	return 0;
}

static int create_v1(sbx_cgroup *cg, const char *root, const char *id,
		     const sbx_cgroup_limits *lim, sbx_err *err)
{
	bool want[SBX_CG_NCTL] = {lim->memory_bytes != 0, lim->cpu_milli != 0, lim->cpu_milli != 0,
				  lim->pids_max != 0, lim->n_devices != 0};
	char v[64], base[PATH_MAX];

	for (int i = 0; i < SBX_CG_NCTL; i++) {
		if (!want[i])
			continue;
		snprintf(base, sizeof(base), "%s/%s", root, v1_names[i]);
		struct stat st;
		if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode))
			return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
					   "cgroup v1: no %s hierarchy at %s (mount it, or use a "
					   "cgroup v2 machine)",
					   v1_names[i], base);
		/* cpu and cpuacct are often one hierarchy (cpu,cpuacct, with
		 * a symlink for each name): then its cgroup exists already. */
		struct stat st_cpu;
		char other[PATH_MAX];
		snprintf(other, sizeof(other), "%s/%s", root, v1_names[SBX_CG_CPU]);
		if (i == SBX_CG_CPUACCT && cg->made[SBX_CG_CPU] && stat(other, &st_cpu) == 0 &&
		    st_cpu.st_dev == st.st_dev && st_cpu.st_ino == st.st_ino)
			continue;
		snprintf(base, sizeof(base), "%s/%s/sbx", root, v1_names[i]);
		if (mkdir_p1(base, err) < 0)
			return -1;
		if (snprintf(cg->dir[i], sizeof(cg->dir[i]), "%s/%s", base, id) >= PATH_MAX - 40)
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENAMETOOLONG,
					   "cgroup path too long");
		if (mkdir(cg->dir[i], 0755) != 0)
			return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, errno,
					   "cgroup: mkdir %s: %s", cg->dir[i], strerror(errno));
		cg->made[i] = true;
	}
	if (lim->memory_bytes) {
		const char *d = cg->dir[SBX_CG_MEMORY];
		snprintf(v, sizeof(v), "%" PRIu64, lim->memory_bytes);
		if (put(d, "memory.limit_in_bytes", v, err) < 0)
			return -1;
		/* memsw = memory + swap: equal means no swap (only when the
		 * kernel accounts swap); swappiness 0 in every case. */
		if (exists(d, "memory.memsw.limit_in_bytes") &&
		    put(d, "memory.memsw.limit_in_bytes", v, err) < 0)
			return -1;
		if (exists(d, "memory.swappiness") && put(d, "memory.swappiness", "0", err) < 0)
			return -1;
		snprintf(cg->oom_path, sizeof(cg->oom_path), "%.4000s/memory.oom_control", d);
	}
	if (lim->cpu_milli) {
		const char *d = cg->dir[SBX_CG_CPU];
		snprintf(v, sizeof(v), "%u", CG_PERIOD_US);
		if (put(d, "cpu.cfs_period_us", v, err) < 0)
			return -1;
		snprintf(v, sizeof(v), "%" PRIu64, (uint64_t)lim->cpu_milli * CG_PERIOD_US / 1000);
		if (put(d, "cpu.cfs_quota_us", v, err) < 0)
			return -1;
	}
	if (lim->pids_max) {
		snprintf(v, sizeof(v), "%u", lim->pids_max);
		if (put(cg->dir[SBX_CG_PIDS], "pids.max", v, err) < 0)
			return -1;
	}
	if (lim->n_devices) {
		const char *d = cg->dir[SBX_CG_DEVICES];
		/* Deny everything, then allow the devices every sandbox has and
		 * exactly the ones the session was given. */
		if (put(d, "devices.deny", "a", err) < 0)
			return -1;
		for (int i = 0; base_rules[i]; i++)
			if (put(d, "devices.allow", base_rules[i], err) < 0)
				return -1;
		for (size_t i = 0; i < lim->n_devices; i++)
			if (put(d, "devices.allow", lim->devices[i], err) < 0)
				return -1;
	}
	return 0;
}

int sbx_cgroup_create(sbx_cgroup *cg, const char *root, const char *id,
		      const sbx_cgroup_limits *lim, sbx_err *err)
{
	memset(cg, 0, sizeof(*cg));
	if (!sbx_cgroup_wanted(lim))
		return 0;
	if (!root)
		root = sbx_cgroup_default_root();
	if (strlen(root) > PATH_MAX / 2 || root[0] != '/')
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0, "cgroup root %s: not usable",
				   root);
	for (size_t i = 0; i < lim->n_devices; i++) {
		struct sbx_devrule_view r;
		if (sbx_devbpf_parse(lim->devices[i], &r) < 0)
			return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, 0,
					   "device rule '%s': 'c MAJ:MIN rwm' expected",
					   lim->devices[i]);
	}
	cg->version = exists(root, "cgroup.controllers") ? 2 : 1;
	int rc = cg->version == 2 ? create_v2(cg, root, id, lim, err)
				  : create_v1(cg, root, id, lim, err);
	if (rc < 0) {
		sbx_cgroup_destroy(cg, NULL);
		return -1;
	}
	cg->oom_base = sbx_cgroup_oom_kills(cg);
	return 0;
}

int sbx_cgroup_attach(const sbx_cgroup *cg, pid_t pid, sbx_err *err)
{
	char v[32];
	snprintf(v, sizeof(v), "%d", (int)pid);
	for (int i = 0; i < SBX_CG_NCTL; i++)
		if (cg->made[i] && put(cg->dir[i], "cgroup.procs", v, err) < 0)
			return -1;
	return 0;
}

int64_t sbx_cgroup_parse_oom_kills(const char *text)
{
	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		long long n;
		if (sscanf(p, "oom_kill %lld", &n) == 1)
			return n;
	}
	return -1;
}

int64_t sbx_cgroup_read_oom_kills(const char *path)
{
	char buf[1024];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return sbx_cgroup_parse_oom_kills(buf);
}

int64_t sbx_cgroup_oom_kills(const sbx_cgroup *cg)
{
	return cg->oom_path[0] ? sbx_cgroup_read_oom_kills(cg->oom_path) : -1;
}

int64_t sbx_cgroup_cpu_usage_us(const sbx_cgroup *cg)
{
	char buf[1024];
	if (cg->version == 2 && cg->made[0]) {
		if (slurp(cg->dir[0], "cpu.stat", buf, sizeof(buf)) < 0)
			return -1;
		const char *p = strstr(buf, "usage_usec ");
		return p ? strtoll(p + 11, NULL, 10) : -1;
	}
	const char *d = cg->made[SBX_CG_CPUACCT] ? cg->dir[SBX_CG_CPUACCT]
		      : cg->made[SBX_CG_CPU]   ? cg->dir[SBX_CG_CPU]
					       : NULL;
	if (!d || slurp(d, "cpuacct.usage", buf, sizeof(buf)) < 0)
		return -1;
	return strtoll(buf, NULL, 10) / 1000;
}

/* Kill every process listed in dir/cgroup.procs; how many were listed. */
static int kill_listed(const char *dir)
{
	char buf[8192];
	int n = 0;
	if (slurp(dir, "cgroup.procs", buf, sizeof(buf)) < 0)
		return 0;
	for (char *p = buf, *end; *p; p = end) {
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (pid > 0) {
			kill((pid_t)pid, SIGKILL);
			n++;
		}
	}
	return n;
}

int sbx_cgroup_destroy(sbx_cgroup *cg, sbx_err *err)
{
	int rc = 0;
	if (cg->version == 2 && cg->made[0] && exists(cg->dir[0], "cgroup.kill"))
		put(cg->dir[0], "cgroup.kill", "1", NULL);
	for (int i = 0; i < SBX_CG_NCTL; i++) {
		if (!cg->made[i])
			continue;
		/* Processes leave a cgroup only once reaped: retry a while. */
		int tries = 0;
		while (rmdir(cg->dir[i]) != 0 && errno == EBUSY && tries++ < 200) {
			kill_listed(cg->dir[i]);
			struct timespec ts = {0, 5 * 1000000L};
			nanosleep(&ts, NULL);
		}
		if (access(cg->dir[i], F_OK) == 0)
			rc = sbx_err_set(err, SBX_E_EXECUTION, errno, "cgroup: remove %s: %s",
					 cg->dir[i], strerror(errno));
		cg->made[i] = false;
	}
	return rc;
}

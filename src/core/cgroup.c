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
 * Per-run memory cgroups (sessions with a memory ceiling only): as the
 * zygote offers a warm init, the host (placer.c) moves it into a child of
 * the session's memory cgroup, run-<n> (one an ended run left empty is
 * used again: mkdir/rmdir of a memcg is the cost), before the init forks
 * its workload, which is so born inside; init then roots a cgroup
 * namespace there (init.c), so the run sees "/".  The host raises the
 * run's OOM score only when it takes the run (sbx_cgroup_run_claim).
 * The session's limit still bounds it (v1: use_hierarchy; v2: the child
 * sits below the limit), but the run's OOM kills are counted in its own
 * oom_kill counter, and the whole run can be killed through the cgroup:
 *   v2  memory.oom.group = 1 in the run's cgroup, so the kernel itself
 *       kills every process of the run when one is chosen; the zygote
 *       moves to a leaf, <session>/zygote, since a v2 cgroup that hands
 *       memory down to children (subtree_control) may hold no process.
 *   v1  no group kill in the kernel: the host sees the run's counter grow
 *       (run.c polls it) and SIGKILLs each pid of the run's cgroup.procs,
 *       again and again until it is empty (a forking process races).
 * An init whose run ended cleanly (not signalled, no OOM kill) keeps its
 * run cgroup and serves the session's next runs in it (init reuse, as
 * without a ceiling): its PID namespace is empty by then, so the cgroup
 * holds only it, and each run counts OOM kills from where the counter
 * stood when it was taken.
 * v1 counts a kill only in the victim's own cgroup, so the session's
 * total adds its runs' (live ones read, removed ones remembered in a
 * tally shared by the session and its runs).
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
#include <poll.h>
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
static const char *const base_rules[] = {"c 1:3 rwm", "c 1:5 rwm",   "c 1:7 rwm",
					 "c 1:8 rwm", "c 1:9 rwm",   "c 5:0 rwm",
					 "c 5:2 rwm", "c 136:* rwm", NULL};
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
	/* v1's memory limits fail with EINTR whenever a signal is pending
	 * (mem_cgroup_resize_max checks before it tries, and does not
	 * restart): the caller's SIGCHLD made a session fail to open. */
	ssize_t n;
	int tries = 0;
	while ((n = write(fd, text, strlen(text))) < 0 && errno == EINTR && ++tries < 100)
		;
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

/* The text of an open small file from its start (a seq file afresh, also
 * one read before), NUL-terminated in buf; -1 when it cannot be read. */
static int read_text(int fd, char *buf, size_t len)
{
	ssize_t n = pread(fd, buf, len - 1, 0);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

/* Read a small file into buf (NUL-terminated); -1 when it cannot be read. */
static int slurp(const char *dir, const char *name, char *buf, size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%.4000s/%.80s", dir, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = read_text(fd, buf, len);
	close(fd);
	return rc;
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

/* What the session and its runs share (either may go first): the count of
 * OOM kills in run cgroups already removed (v1), and one spare run cgroup,
 * kept by a run that ended for the next to start in (a cgroup's mkdir and
 * rmdir are most of what a per-run cgroup costs). */
struct sbx_cg_tally {
	int refs;
	int64_t removed;
	bool open;	    /* the session has not begun to go */
	int spare;	    /* SPARE_* */
	int64_t spare_base; /* its oom_kill count when kept */
	uint32_t spare_seq;
	char spare_dir[PATH_MAX];
};
enum { SPARE_NONE, SPARE_KEPT, SPARE_BUSY };

static unsigned run_seq; /* names run cgroups: run-<n> */

static struct sbx_cg_tally *tally_ref(struct sbx_cg_tally *t)
{
	if (t)
		__atomic_add_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
	return t;
}

static void tally_unref(struct sbx_cg_tally **t)
{
	if (*t && __atomic_sub_fetch(&(*t)->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(*t);
	*t = NULL;
}

bool sbx_cgroup_wanted(const sbx_cgroup_limits *lim)
{
	return lim->memory_bytes || lim->cpu_milli || lim->pids_max || lim->n_devices;
}

static int create_v2(sbx_cgroup *cg, const char *root, const char *id, const sbx_cgroup_limits *lim,
		     sbx_err *err)
{
	char ctl[256], base[PATH_MAX], want[64] = "";
	const char *names[3] = {lim->memory_bytes ? "memory" : NULL, lim->cpu_milli ? "cpu" : NULL,
				lim->pids_max ? "pids" : NULL};

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
		return sbx_err_set(err, SBX_E_INVALID_ARGUMENT, ENAMETOOLONG,
				   "cgroup path too long");
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
		/* Runs get cgroups of their own below this one, with memory
		 * files (memory.oom.group, memory.events): the memory
		 * controller is handed down, so the zygote lives in a leaf. */
		if (put(cg->dir[0], "cgroup.subtree_control", "+memory", err) < 0)
			return -1;
		snprintf(cg->leaf, sizeof(cg->leaf), "%.4000s/zygote", cg->dir[0]);
		if (mkdir(cg->leaf, 0755) != 0) {
			int e = errno;
			cg->leaf[0] = '\0';
			return sbx_err_set(err, SBX_E_BACKEND_UNAVAILABLE, e,
					   "cgroup: mkdir %s/zygote: %s", cg->dir[0], strerror(e));
		}
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

static int create_v1(sbx_cgroup *cg, const char *root, const char *id, const sbx_cgroup_limits *lim,
		     sbx_err *err)
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
		/* Runs get cgroups of their own below this one: the limit
		 * must bound them (always so on kernels >= 5.16). */
		char h[16];
		if (slurp(d, "memory.use_hierarchy", h, sizeof(h)) == 0 && h[0] == '0' &&
		    put(d, "memory.use_hierarchy", "1", err) < 0)
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
	if (cg->oom_path[0]) {
		cg->tally = calloc(1, sizeof(*cg->tally));
		if (!cg->tally) {
			sbx_cgroup_destroy(cg, NULL);
			return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory");
		}
		cg->tally->refs = 1;
		cg->tally->open = true;
	}
	cg->oom_base = sbx_cgroup_oom_kills(cg);
	return 0;
}

int sbx_cgroup_attach(const sbx_cgroup *cg, pid_t pid, sbx_err *err)
{
	char v[32];
	snprintf(v, sizeof(v), "%d", (int)pid);
	for (int i = 0; i < SBX_CG_NCTL; i++)
		if (cg->made[i] &&
		    put(i == 0 && cg->leaf[0] ? cg->leaf : cg->dir[i], "cgroup.procs", v, err) < 0)
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

/* The oom_kill count in the open counter file fd, or -1. */
static int64_t oom_kills_at(int fd)
{
	char buf[1024];
	return read_text(fd, buf, sizeof(buf)) < 0 ? -1 : sbx_cgroup_parse_oom_kills(buf);
}

int64_t sbx_cgroup_read_oom_kills(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int64_t n = oom_kills_at(fd);
	close(fd);
	return n;
}

/* Calls fn(dir, name, arg) for each run-* subdirectory of dir. */
static void each_run_dir(const char *dir, void (*fn)(const char *, const char *, void *), void *arg)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	if (!d)
		return;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "run-", 4) && e->d_type == DT_DIR)
			fn(dir, e->d_name, arg);
	closedir(d);
}

static void add_run_kills(const char *dir, const char *name, void *arg)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%.4000s/%.64s/memory.oom_control", dir, name);
	int64_t n = sbx_cgroup_read_oom_kills(path);
	if (n > 0)
		*(int64_t *)arg += n;
}

int64_t sbx_cgroup_oom_kills(const sbx_cgroup *cg)
{
	if (!cg->oom_path[0])
		return -1;
	int64_t n = sbx_cgroup_read_oom_kills(cg->oom_path);
	/* v2's memory.events counts the children's kills too; v1 counts
	 * each kill only where the victim was. */
	if (n < 0 || cg->version != 1)
		return n;
	each_run_dir(cg->dir[SBX_CG_MEMORY], add_run_kills, &n);
	if (cg->tally)
		n += __atomic_load_n(&cg->tally->removed, __ATOMIC_ACQUIRE);
	return n;
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
			: cg->made[SBX_CG_CPU]	 ? cg->dir[SBX_CG_CPU]
						 : NULL;
	if (!d || slurp(d, "cpuacct.usage", buf, sizeof(buf)) < 0)
		return -1;
	return strtoll(buf, NULL, 10) / 1000;
}

/* Kill every process listed in dir/cgroup.procs; how many were listed
 * (-1: it cannot be read). */
static int kill_listed(const char *dir)
{
	char buf[8192];
	int n = 0;
	if (slurp(dir, "cgroup.procs", buf, sizeof(buf)) < 0)
		return -1;
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

/* rmdir a cgroup, killing what is in it while it is busy (processes leave
 * a cgroup only once they are gone); about tries * 5 ms at most. */
static int remove_dir(const char *dir, int tries)
{
	/* Mostly one exiting process: short waits first, then 5 ms ones. */
	long wait_ns = 100000L;
	while (rmdir(dir) != 0) {
		if (errno != EBUSY || tries-- <= 0)
			return -1;
		kill_listed(dir);
		struct timespec ts = {0, wait_ns};
		nanosleep(&ts, NULL);
		if (wait_ns < 5 * 1000000L)
			wait_ns *= 2;
	}
	return 0;
}

static void remove_run_dir(const char *dir, const char *name, void *arg)
{
	char path[PATH_MAX];
	(void)arg;
	snprintf(path, sizeof(path), "%.4000s/%.64s", dir, name);
	remove_dir(path, 200);
}

/* ---- per-run memory cgroups ---- */

/* The host pid behind a pidfd (its fdinfo's "Pid:" line), or -1. */
static pid_t pidfd_pid(int pidfd)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	const char *p = strstr(buf, "\nPid:");
	long pid = p ? strtol(p + 5, NULL, 10) : -1;
	return pid > 0 ? (pid_t)pid : -1;
}

/* oom_score_adj 1000 for a run's process (raising needs no privilege; a
 * process already gone is no worry). */
static void oom_first(long pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%ld/oom_score_adj", pid);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "1000", 4);
		close(fd);
	}
}

/* Write pid into dir/cgroup.procs (appended: a fake cgroupfs keeps every
 * one); -1 with errno (ESRCH: it died) and err. */
static int move_pid(const char *dir, long pid, sbx_err *err)
{
	char path[PATH_MAX], v[32];
	snprintf(path, sizeof(path), "%.4000s/cgroup.procs", dir);
	int len = snprintf(v, sizeof(v), "%ld\n", pid);
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	ssize_t n = fd >= 0 ? write(fd, v, (size_t)len) : -1;
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (n == len)
		return 0;
	sbx_err_set(err, SBX_E_EXECUTION, e, "cgroup: move %ld into %s: %s", pid, dir, strerror(e));
	errno = e;
	return -1;
}

void sbx_init_held_none(struct sbx_init_held *h)
{
	for (int i = 0; i < SBX_HELD_N; i++)
		h->fd[i] = -1;
}

void sbx_init_held_close(struct sbx_init_held *h)
{
	for (int i = 0; i < SBX_HELD_N; i++)
		if (h->fd[i] >= 0)
			close(h->fd[i]);
	sbx_init_held_none(h);
}

int sbx_cgroup_run_place(const sbx_cgroup *cg, int pidfd, sbx_run_cgroup *rc, sbx_err *err)
{
	memset(rc, 0, sizeof(*rc));
	sbx_init_held_none(&rc->held);
	if (!cg->oom_path[0])
		return 0;
	pid_t pid = pidfd_pid(pidfd);
	if (pid < 0) {
		errno = ESRCH;
		return sbx_err_set(err, SBX_E_EXECUTION, ESRCH, "the run's init is gone");
	}
	const char *parent = cg->version == 2 ? cg->dir[0] : cg->dir[SBX_CG_MEMORY];
	struct sbx_cg_tally *t = cg->tally;
	int kept = SPARE_KEPT;
	bool reused = false;
	if (t && __atomic_compare_exchange_n(&t->spare, &kept, SPARE_BUSY, false, __ATOMIC_ACQ_REL,
					     __ATOMIC_ACQUIRE)) {
		/* The one an ended run left: empty, its counter noted. */
		snprintf(rc->dir, sizeof(rc->dir), "%s", t->spare_dir);
		rc->oom_base = t->spare_base;
		rc->seq = t->spare_seq;
		__atomic_store_n(&t->spare, SPARE_NONE, __ATOMIC_RELEASE);
		reused = true;
	} else {
		rc->seq = __atomic_add_fetch(&run_seq, 1, __ATOMIC_RELAXED);
		snprintf(rc->dir, sizeof(rc->dir), "%.4000s/run-%u", parent, rc->seq);
		if (mkdir(rc->dir, 0755) != 0) {
			int e = errno;
			sbx_err_set(err, SBX_E_EXECUTION, e, "cgroup: mkdir %s: %s", rc->dir,
				    strerror(e));
			errno = e;
			return -1;
		}
	}
	rc->version = cg->version;
	if (cg->version == 2) {
		/* The kernel kills the whole run when it picks one of it. */
		if (!reused && put(rc->dir, "memory.oom.group", "1", err) < 0)
			goto fail;
		snprintf(rc->oom_path, sizeof(rc->oom_path), "%.4000s/memory.events", rc->dir);
	} else {
		snprintf(rc->oom_path, sizeof(rc->oom_path), "%.4000s/memory.oom_control", rc->dir);
	}
	/* init alone: it forks its workload only once we say so (init.c),
	 * so everything of the run is born inside. */
	if (move_pid(rc->dir, pid, err) < 0)
		goto fail;
	/* (A new cgroup's counter is 0.) */
	rc->tally = tally_ref(cg->tally);
	return 0;
fail:;
	int e = errno;
	sbx_cgroup_run_remove(rc);
	errno = e;
	return -1;
}

/* rc->held, opened at init's first claim (see sbx_init_held). */
static int hold(sbx_run_cgroup *rc, int pidfd)
{
	char score[64], kids[96];
	pid_t pid = pidfd_pid(pidfd);
	struct sbx_init_held *h = &rc->held;
	snprintf(score, sizeof(score), "/proc/%d/oom_score_adj", (int)pid);
	snprintf(kids, sizeof(kids), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	if (pid > 0) {
		h->fd[SBX_HELD_SCORE] = open(score, O_WRONLY | O_CLOEXEC);
		h->fd[SBX_HELD_KIDS] = open(kids, O_RDONLY | O_CLOEXEC);
		h->fd[SBX_HELD_OOM] = open(rc->oom_path, O_RDONLY | O_CLOEXEC);
	}
	/* The pidfd says the pid was still init's when the files were opened. */
	struct pollfd dead = {pidfd, POLLIN, 0};
	bool all = true;
	for (int i = 0; i < SBX_HELD_N; i++)
		all = all && h->fd[i] >= 0;
	if (!all || poll(&dead, 1, 0) != 0) {
		sbx_init_held_close(h);
		return -1;
	}
	return 0;
}

int sbx_cgroup_run_claim(sbx_run_cgroup *rc, int pidfd)
{
	if (!rc->version)
		return 0;
	char kids[4096];
	const int *fd = rc->held.fd;
	/* init died (the OOM killer takes idle inits too): the caller takes
	 * another.  Then init, and the workload it has forked (which has no
	 * request yet, so forks nothing): what it forks later copies the
	 * score. */
	if ((fd[0] < 0 && hold(rc, pidfd) < 0) || pwrite(fd[SBX_HELD_SCORE], "1000", 4, 0) != 4) {
		errno = ESRCH;
		return -1;
	}
	if (read_text(fd[SBX_HELD_KIDS], kids, sizeof(kids)) < 0) {
		errno = ESRCH;
		return -1;
	}
	for (char *p = kids, *end; *p; p = end) {
		long kid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (kid > 0)
			oom_first(kid);
	}
	return 0;
}

int64_t sbx_cgroup_run_oom_kills(const sbx_run_cgroup *rc)
{
	if (!rc->version)
		return -1;
	if (rc->held.fd[SBX_HELD_OOM] < 0)
		return sbx_cgroup_read_oom_kills(rc->oom_path);
	return oom_kills_at(rc->held.fd[SBX_HELD_OOM]);
}

int sbx_cgroup_run_kill(const sbx_run_cgroup *rc)
{
	if (!rc->version)
		return 0;
	/* v2 (5.14+): one write, and the kernel stops forks racing it. */
	if (rc->version == 2 && exists(rc->dir, "cgroup.kill") &&
	    put(rc->dir, "cgroup.kill", "1", NULL) == 0)
		return 0;
	/* Otherwise one pid at a time, again while new ones appear: a
	 * process forking as we go leaves a child we did not list (a fork
	 * the kill reaches first fails).  Killed ones stay listed until they
	 * are gone: a pass that finds no more than the last is the end here;
	 * the caller looks again later. */
	int left = 0, last = -1;
	for (int pass = 0; pass < 20; pass++) {
		left = kill_listed(rc->dir);
		if (left <= 0 || left <= last)
			break;
		last = left;
	}
	return left < 0 ? 0 : left;
}

int sbx_cgroup_run_remove(sbx_run_cgroup *rc)
{
	int rc_ = 0;
	if (!rc->version)
		return 0;
	int64_t n = sbx_cgroup_run_oom_kills(rc);
	struct sbx_cg_tally *t = rc->tally;
	int none = SPARE_NONE;
	sbx_init_held_close(&rc->held);
	/* Empty, and the session goes on: keep it for the next run (if no
	 * other run has kept one already). */
	if (t && __atomic_load_n(&t->open, __ATOMIC_ACQUIRE) && kill_listed(rc->dir) == 0 &&
	    __atomic_compare_exchange_n(&t->spare, &none, SPARE_BUSY, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		snprintf(t->spare_dir, sizeof(t->spare_dir), "%s", rc->dir);
		t->spare_base = n < 0 ? 0 : n;
		t->spare_seq = rc->seq;
		__atomic_store_n(&t->spare, SPARE_KEPT, __ATOMIC_RELEASE);
		tally_unref(&rc->tally);
		rc->version = 0;
		return 0;
	}
	/* v1 forgets a removed cgroup's kills: the session keeps them. */
	if (rc->version != 1)
		n = -1;
	if (remove_dir(rc->dir, 60) != 0)
		rc_ = -1;
	else if (n > 0 && rc->tally)
		__atomic_add_fetch(&rc->tally->removed, n, __ATOMIC_ACQ_REL);
	tally_unref(&rc->tally);
	rc->version = 0;
	return rc_;
}

/* ---- init reuse at a memory ceiling ----
 * A run that ended cleanly leaves only its init in its cgroup (init
 * waited until its PID namespace was empty), so the init and its cgroup
 * serve the next run together: no clone, no migration, no mkdir.  The
 * run's OOM count starts from the counter as the next run takes it. */

void sbx_cgroup_run_idle(const sbx_run_cgroup *rc)
{
	/* Claimed, init had 1000; idle it is a warm run again (500). */
	if (rc->version && rc->held.fd[SBX_HELD_SCORE] >= 0)
		(void)!pwrite(rc->held.fd[SBX_HELD_SCORE], "500", 3, 0);
}

void sbx_cgroup_run_release(sbx_run_cgroup *rc)
{
	if (rc->version)
		sbx_init_held_close(&rc->held);
	tally_unref(&rc->tally);
	rc->version = 0;
}

void sbx_cgroup_run_adopt(const sbx_cgroup *cg, uint32_t seq, struct sbx_init_held *held,
			  sbx_run_cgroup *rc)
{
	memset(rc, 0, sizeof(*rc));
	sbx_init_held_none(&rc->held);
	if (!cg->oom_path[0] || !seq) {
		if (held)
			sbx_init_held_close(held);
		return;
	}
	const char *parent = cg->version == 2 ? cg->dir[0] : cg->dir[SBX_CG_MEMORY];
	rc->version = cg->version;
	rc->seq = seq;
	if (held) {
		rc->held = *held;
		sbx_init_held_none(held);
	}
	snprintf(rc->dir, sizeof(rc->dir), "%.4000s/run-%u", parent, seq);
	snprintf(rc->oom_path, sizeof(rc->oom_path), "%.4000s/%s", rc->dir,
		 cg->version == 2 ? "memory.events" : "memory.oom_control");
	int64_t n = sbx_cgroup_run_oom_kills(rc);
	rc->oom_base = n < 0 ? 0 : n;
	rc->tally = tally_ref(cg->tally);
}

void sbx_cgroup_run_drop(const sbx_cgroup *cg, uint32_t seq)
{
	sbx_run_cgroup rc;
	sbx_cgroup_run_adopt(cg, seq, NULL, &rc);
	sbx_cgroup_run_kill(&rc);
	sbx_cgroup_run_remove(&rc);
}

int sbx_cgroup_destroy(sbx_cgroup *cg, sbx_err *err)
{
	int rc = 0;
	if (cg->version == 2 && cg->made[0] && exists(cg->dir[0], "cgroup.kill"))
		put(cg->dir[0], "cgroup.kill", "1", NULL);
	if (cg->tally)
		__atomic_store_n(&cg->tally->open, false, __ATOMIC_RELEASE);
	tally_unref(&cg->tally);
	/* Children first: runs still going (or not yet removed, or kept
	 * for the next), the leaf. */
	if (cg->made[SBX_CG_MEMORY])
		each_run_dir(cg->dir[SBX_CG_MEMORY], remove_run_dir, NULL);
	if (cg->leaf[0]) {
		remove_dir(cg->leaf, 200);
		cg->leaf[0] = '\0';
	}
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

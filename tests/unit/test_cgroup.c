/*
 * test_cgroup.c: the session cgroup code against fake cgroupfs trees, so
 * the v2 paths (production) are checked on this v1 machine too: which
 * files get which limits, what a missing controller says, the oom_kill
 * counter parser, and the per-run memory cgroups (made, filled with a real
 * process tree of ours, counted, killed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"

static char root[256];

static void write_file(const char *dir, const char *name, const char *text)
{
	char p[PATH_MAX + 300];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void assert_file(const char *dir, const char *name, const char *want)
{
	char p[PATH_MAX + 300], buf[256] = "";
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "r");
	if (!f)
		fail_msg("%s was not written", p);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	if (strcmp(buf, want) != 0)
		fail_msg("%s: got '%s', want '%s'", p, buf, want);
}

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/sbx-test-cgroup.XXXXXX");
	assert_non_null(mkdtemp(root));
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_v2_limits(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	sbx_cgroup_limits lim = {.memory_bytes = 64u << 20, .cpu_milli = 1500, .pids_max = 100};
	char dir[PATH_MAX];

	write_file(root, "cgroup.controllers", "cpuset cpu io memory pids\n");
	write_file(root, "cgroup.subtree_control", "");
	if (sbx_cgroup_create(&cg, root, "abc", &lim, &err) != 0)
		fail_msg("create: %s", err.msg);
	assert_int_equal(cg.version, 2);
	snprintf(dir, sizeof(dir), "%s/sbx/abc", root);
	assert_string_equal(cg.dir[0], dir);
	assert_file(root, "cgroup.subtree_control", "+memory +cpu +pids");
	assert_file(dir, "memory.max", "67108864");
	assert_file(dir, "cpu.max", "150000 100000");
	assert_file(dir, "pids.max", "100");
	/* memory.swap.max is written only where the kernel has it. */
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/memory.swap.max", dir);
	assert_int_equal(access(p, F_OK), -1);
	assert_true(strstr(cg.oom_path, "/sbx/abc/memory.events") != NULL);
	/* With a memory ceiling the session hands memory down to its runs'
	 * cgroups, so the zygote lives in a leaf. */
	assert_file(dir, "cgroup.subtree_control", "+memory");
	if (sbx_cgroup_attach(&cg, 4242, &err) != 0)
		fail_msg("attach: %s", err.msg);
	char leaf[PATH_MAX + 16];
	snprintf(leaf, sizeof(leaf), "%s/zygote", dir);
	assert_string_equal(cg.leaf, leaf);
	assert_file(leaf, "cgroup.procs", "4242");
	sbx_cgroup_destroy(&cg, NULL);
}

static void test_v2_no_memory_no_leaf(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	sbx_cgroup_limits lim = {.pids_max = 10};
	char dir[PATH_MAX];

	write_file(root, "cgroup.controllers", "memory pids\n");
	if (sbx_cgroup_create(&cg, root, "p", &lim, &err) != 0)
		fail_msg("create: %s", err.msg);
	snprintf(dir, sizeof(dir), "%s/sbx/p", root);
	assert_string_equal(cg.leaf, "");
	assert_null(cg.tally);
	assert_int_equal(sbx_cgroup_attach(&cg, 4243, &err), 0);
	assert_file(dir, "cgroup.procs", "4243");
	/* No memory ceiling: no run cgroup, nothing to kill. */
	sbx_run_cgroup rc;
	assert_int_equal(sbx_cgroup_run_place(&cg, 0, &rc, &err), 0);
	assert_int_equal(rc.version, 0);
	assert_int_equal(sbx_cgroup_run_claim(&rc, 0), 0);
	assert_int_equal(sbx_cgroup_run_kill(&rc), 0);
	assert_int_equal(sbx_cgroup_run_remove(&rc), 0);
	sbx_cgroup_destroy(&cg, NULL);
}

static int pidfd_open_(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* A child of ours that forks a grandchild; both wait to be killed.  The
 * grandchild's pid comes back through a pipe. */
static pid_t tree(pid_t *grandchild)
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		pid_t g = fork();
		if (g == 0) {
			for (;;)
				pause();
		}
		(void)!write(p[1], &g, sizeof(g));
		for (;;)
			pause();
	}
	assert_int_equal(read(p[0], grandchild, sizeof(*grandchild)), sizeof(*grandchild));
	close(p[0]);
	close(p[1]);
	return child;
}

/* What a real cgroupfs does for a process forked by one inside: list it. */
static void born_inside(const char *dir, pid_t pid)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
	FILE *f = fopen(p, "a");
	assert_non_null(f);
	fprintf(f, "%d\n", (int)pid);
	fclose(f);
}

static void assert_oom_adj(pid_t pid, const char *want)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d", (int)pid);
	assert_file(p, "oom_score_adj", want);
}

/* Did pid die of SIGKILL (within a second)?  Its pidfd turns readable. */
static bool died(int pidfd)
{
	struct pollfd pfd = {pidfd, POLLIN, 0};
	return poll(&pfd, 1, 1000) == 1;
}

static void test_v2_run_cgroup(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_run_cgroup rc;
	sbx_err err = {0};
	sbx_cgroup_limits lim = {.memory_bytes = 64u << 20};
	char dir[PATH_MAX], want[PATH_MAX + 64], procs[64];
	pid_t g, child = tree(&g);
	int pidfd = pidfd_open_(child), gfd = pidfd_open_(g);

	assert_true(pidfd >= 0 && gfd >= 0);
	write_file(root, "cgroup.controllers", "memory pids\n");
	if (sbx_cgroup_create(&cg, root, "r2", &lim, &err) != 0)
		fail_msg("create: %s", err.msg);
	if (sbx_cgroup_run_place(&cg, pidfd, &rc, &err) != 0)
		fail_msg("run create: %s", err.msg);
	snprintf(dir, sizeof(dir), "%s/sbx/r2", root);
	snprintf(want, sizeof(want), "%s/run-", dir);
	assert_int_equal(rc.version, 2);
	assert_true(strncmp(rc.dir, want, strlen(want)) == 0);
	/* The kernel kills the whole run itself. */
	assert_file(rc.dir, "memory.oom.group", "1");
	/* init alone: it forks its workload only once placed, so the
	 * workload is born inside (the kernel lists it: here, we do). */
	snprintf(procs, sizeof(procs), "%d\n", (int)child);
	assert_file(rc.dir, "cgroup.procs", procs);
	assert_oom_adj(child, "0\n");
	born_inside(rc.dir, g);
	/* Taken: init and its workload become the OOM killer's first
	 * choice; placing alone did not make them so.  (The kernel makes
	 * memory.events; the claim opens it.) */
	assert_int_equal(sbx_cgroup_run_oom_kills(&rc), -1);
	write_file(rc.dir, "memory.events", "oom 0\noom_kill 0\n");
	assert_int_equal(sbx_cgroup_run_claim(&rc, pidfd), 0);
	assert_oom_adj(child, "1000\n");
	assert_oom_adj(g, "1000\n");
	assert_true(strstr(rc.oom_path, "/run-") && strstr(rc.oom_path, "/memory.events"));
	assert_int_equal(rc.oom_base, 0);
	assert_int_equal(sbx_cgroup_run_oom_kills(&rc), 0);
	write_file(rc.dir, "memory.events", "oom 1\noom_kill 1\noom_group_kill 1\n");
	assert_int_equal(sbx_cgroup_run_oom_kills(&rc), 1);
	/* v2's session counter is hierarchical already: nothing added. */
	write_file(dir, "memory.events", "oom 1\noom_kill 4\n");
	assert_int_equal(sbx_cgroup_oom_kills(&cg), 4);
	/* No cgroup.kill (before 5.14): every listed pid gets SIGKILL. */
	assert_true(sbx_cgroup_run_kill(&rc) > 0); /* a fake file still lists them */
	assert_true(died(pidfd));
	assert_true(died(gfd));
	int st;
	assert_int_equal(waitpid(child, &st, 0), child);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	close(pidfd);
	close(gfd);
	/* Emptied (the kernel's doing on a real cgroupfs): kept for the
	 * session's next run, which starts in it with the count noted. */
	char kept[PATH_MAX];
	snprintf(kept, sizeof(kept), "%s", rc.dir);
	write_file(rc.dir, "cgroup.procs", "");
	assert_int_equal(sbx_cgroup_run_remove(&rc), 0);
	assert_int_equal(rc.version, 0);
	assert_null(rc.tally);
	child = tree(&g);
	pidfd = pidfd_open_(child);
	if (sbx_cgroup_run_place(&cg, pidfd, &rc, &err) != 0)
		fail_msg("run create again: %s", err.msg);
	assert_string_equal(rc.dir, kept);
	assert_int_equal(rc.oom_base, 1);
	assert_int_equal(sbx_cgroup_run_oom_kills(&rc), 1);
	snprintf(procs, sizeof(procs), "%d\n", (int)child);
	assert_file(rc.dir, "cgroup.procs", procs);
	born_inside(rc.dir, g);
	/* A second run while the first still has it: a new cgroup. */
	sbx_run_cgroup rc2;
	pid_t g2, child2 = tree(&g2);
	int pidfd2 = pidfd_open_(child2);
	assert_int_equal(sbx_cgroup_run_place(&cg, pidfd2, &rc2, &err), 0);
	born_inside(rc2.dir, g2);
	assert_string_not_equal(rc2.dir, kept);
	assert_int_equal(rc2.oom_base, 0);
	sbx_cgroup_run_kill(&rc);
	sbx_cgroup_run_kill(&rc2);
	waitpid(child, NULL, 0);
	waitpid(child2, NULL, 0);
	close(pidfd);
	close(pidfd2);
	/* Not empty (a fake file keeps its pids): removed, and a fake dir
	 * keeps its files, so it will not go, and says so. */
	assert_int_equal(sbx_cgroup_run_remove(&rc2), -1);
	write_file(rc.dir, "cgroup.procs", "");
	assert_int_equal(sbx_cgroup_run_remove(&rc), 0);
	sbx_cgroup_destroy(&cg, NULL);
}

/* A fake v2 root with the memory controller, session id's cgroup in it
 * (64 MiB), and a run placed there: its init (returned; *pidfd its
 * pidfd) with a workload *g. */
static pid_t placed_v2(const char *id, sbx_cgroup *cg, sbx_run_cgroup *rc, pid_t *g, int *pidfd)
{
	sbx_err err = {0};
	sbx_cgroup_limits lim = {.memory_bytes = 64u << 20};
	pid_t child = tree(g);

	*pidfd = pidfd_open_(child);
	write_file(root, "cgroup.controllers", "memory\n");
	assert_int_equal(sbx_cgroup_create(cg, root, id, &lim, &err), 0);
	assert_int_equal(sbx_cgroup_run_place(cg, *pidfd, rc, &err), 0);
	return child;
}

/* The target of our descriptor fd. */
static void assert_fd_is(int fd, const char *want)
{
	char p[64], got[PATH_MAX];
	snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(p, got, sizeof(got) - 1);
	assert_true(n > 0);
	got[n] = '\0';
	assert_string_equal(got, want);
}

/* What a claim opens of an init (its score, its children, its run's OOM
 * counter) is opened once: the give-back carries the open files, the
 * next claim, idle and count go through them, and they stay
 * bound to that process (not to its pid) once it is gone. */
static void test_run_reuse_holds_files(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_run_cgroup rc;
	pid_t g;
	int pidfd;
	pid_t child = placed_v2("h2", &cg, &rc, &g, &pidfd);
	char want[64];

	assert_int_equal(rc.held.fd[0], -1);
	write_file(rc.dir, "memory.events", "oom 0\noom_kill 0\n");
	assert_int_equal(sbx_cgroup_run_claim(&rc, pidfd), 0);
	for (int i = 0; i < SBX_HELD_N; i++)
		assert_true(rc.held.fd[i] >= 0);
	snprintf(want, sizeof(want), "/proc/%d/oom_score_adj", (int)child);
	assert_fd_is(rc.held.fd[SBX_HELD_SCORE], want);
	assert_oom_adj(child, "1000\n");
	assert_oom_adj(g, "1000\n");
	sbx_cgroup_run_idle(&rc);
	assert_oom_adj(child, "500\n");
	/* The give-back: the session gets its own copies (SCM_RIGHTS in
	 * run.c), the run lets its own go. */
	struct sbx_init_held kept;
	for (int i = 0; i < SBX_HELD_N; i++)
		assert_true((kept.fd[i] = dup(rc.held.fd[i])) >= 0);
	uint32_t seq = rc.seq;
	sbx_cgroup_run_release(&rc);
	assert_int_equal(rc.held.fd[0], -1);
	assert_int_equal(fcntl(kept.fd[0], F_GETFD), 0); /* ours are still open */
	struct sbx_init_held carried = kept;
	sbx_cgroup_run_adopt(&cg, seq, &carried, &rc);
	assert_int_equal(carried.fd[0], -1); /* taken */
	/* The next workload (here the same one, at an idle run's score). */
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d", (int)g);
	write_file(p, "oom_score_adj", "500");
	assert_int_equal(sbx_cgroup_run_claim(&rc, pidfd), 0);
	for (int i = 0; i < SBX_HELD_N; i++)
		assert_int_equal(rc.held.fd[i], kept.fd[i]); /* not opened again */
	assert_oom_adj(child, "1000\n");
	assert_oom_adj(g, "1000\n");
	/* The counter read afresh through the held file. */
	write_file(rc.dir, "memory.events", "oom 2\noom_kill 2\n");
	assert_int_equal(sbx_cgroup_run_oom_kills(&rc), 2);
	/* Gone and reaped: the held files refuse, whatever now has its pid. */
	kill(child, SIGKILL);
	kill(g, SIGKILL);
	waitpid(child, NULL, 0);
	errno = 0;
	assert_int_equal(sbx_cgroup_run_claim(&rc, pidfd), -1);
	assert_int_equal(errno, ESRCH);
	write_file(rc.dir, "cgroup.procs", "");
	assert_int_equal(sbx_cgroup_run_remove(&rc), 0);
	assert_int_equal(rc.held.fd[0], -1);
	for (int i = 0; i < SBX_HELD_N; i++)
		assert_int_equal(fcntl(kept.fd[i], F_GETFD), -1); /* closed with it */
	close(pidfd);
	sbx_cgroup_destroy(&cg, NULL);
}

static void on_alarm(int signo)
{
	(void)signo;
}

/* A 20 us interval timer: a signal is pending at many a write. */
static void alarm_storm(bool on)
{
	struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = SA_RESTART};
	struct itimerval it = {{0, on ? 20 : 0}, {0, on ? 20 : 0}};
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
}

/* The real v1 memory controller (root only; a pure v2 machine skips:
 * v2's memory.max does not fail on a signal).  Its limit writes fail
 * with EINTR while a signal is pending, SA_RESTART or not: a session's
 * open must not. */
static void test_v1_limits_under_signals(void **state)
{
	(void)state;
	const char *real = "/sys/fs/cgroup";
	char probe[PATH_MAX], limit[PATH_MAX + 32];
	snprintf(probe, sizeof(probe), "%s/memory/sbx-eintr-%d", real, (int)getpid());
	snprintf(limit, sizeof(limit), "%s/memory.limit_in_bytes", probe);
	if (geteuid() != 0 || access("/sys/fs/cgroup/memory/memory.limit_in_bytes", W_OK) != 0 ||
	    mkdir(probe, 0755) != 0)
		skip();
	/* Control: the probe sees the kernel's EINTR at all. */
	int eintr = 0;
	alarm_storm(true);
	for (int i = 0; i < 20000 && !eintr; i++) {
		int fd = open(limit, O_WRONLY | O_CLOEXEC);
		if (fd >= 0 && write(fd, "268435456", 9) < 0 && errno == EINTR)
			eintr++;
		if (fd >= 0)
			close(fd);
	}
	alarm_storm(false);
	rmdir(probe);
	if (!eintr)
		skip(); /* a kernel that restarts them: nothing to show */
	sbx_cgroup_limits lim = {.memory_bytes = 256u << 20, .cpu_milli = 1500, .pids_max = 100};
	int failed = 0;
	char id[64];
	alarm_storm(true);
	for (int i = 0; i < 300; i++) {
		sbx_cgroup cg;
		sbx_err err = {0};
		snprintf(id, sizeof(id), "eintr-%d-%d", (int)getpid(), i);
		if (sbx_cgroup_create(&cg, real, id, &lim, &err) != 0) {
			failed++;
			print_message("create: %s\n", err.msg);
			continue;
		}
		sbx_cgroup_destroy(&cg, NULL);
	}
	alarm_storm(false);
	assert_int_equal(failed, 0);
}

static void test_v2_run_cgroup_kill_file(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_run_cgroup rc;
	pid_t g;
	int pidfd;
	pid_t child = placed_v2("k2", &cg, &rc, &g, &pidfd);

	/* With cgroup.kill (5.14+) one write kills it all, forks included. */
	write_file(rc.dir, "cgroup.kill", "");
	assert_int_equal(sbx_cgroup_run_kill(&rc), 0);
	assert_file(rc.dir, "cgroup.kill", "1");
	kill(child, SIGKILL);
	kill(g, SIGKILL);
	waitpid(child, NULL, 0);
	write_file(rc.dir, "cgroup.procs", "");
	sbx_cgroup_run_remove(&rc);
	close(pidfd);
	sbx_cgroup_destroy(&cg, NULL);
}

static void test_run_cgroup_dead_init(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_run_cgroup rc;
	sbx_err err = {0};
	sbx_cgroup_limits lim = {.memory_bytes = 64u << 20};

	write_file(root, "cgroup.controllers", "memory\n");
	assert_int_equal(sbx_cgroup_create(&cg, root, "d", &lim, &err), 0);
	pid_t child = fork();
	if (child == 0)
		_exit(0);
	int pidfd = pidfd_open_(child);
	assert_true(pidfd >= 0);
	waitpid(child, NULL, 0);
	/* Reaped: its pidfd names no pid; the caller takes another init. */
	errno = 0;
	assert_int_equal(sbx_cgroup_run_place(&cg, pidfd, &rc, &err), -1);
	assert_int_equal(errno, ESRCH);
	assert_int_equal(rc.version, 0);
	/* A placed run whose init died before it was taken: the same. */
	rc.version = 2;
	errno = 0;
	assert_int_equal(sbx_cgroup_run_claim(&rc, pidfd), -1);
	assert_int_equal(errno, ESRCH);
	rc.version = 0;
	close(pidfd);
	sbx_cgroup_destroy(&cg, NULL);
}

static void test_v2_existing_dir_and_oom_counter(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	sbx_cgroup_limits lim = {.memory_bytes = 32u << 20};
	char dir[PATH_MAX];

	write_file(root, "cgroup.controllers", "memory pids\n");
	snprintf(dir, sizeof(dir), "%s/sbx", root);
	mkdir(dir, 0755);
	snprintf(dir, sizeof(dir), "%s/sbx/s1", root);
	/* Pretend the kernel made the cgroup with its files: create would
	 * refuse an existing dir, so check that refusal first. */
	mkdir(dir, 0755);
	assert_int_equal(sbx_cgroup_create(&cg, root, "s1", &lim, &err), -1);
	assert_int_equal(err.kind, SBX_E_BACKEND_UNAVAILABLE);
	rmdir(dir);
	assert_int_equal(sbx_cgroup_create(&cg, root, "s1", &lim, &err), 0);
	write_file(dir, "memory.events", "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n");
	assert_int_equal(sbx_cgroup_oom_kills(&cg), 2);
	sbx_cgroup_destroy(&cg, NULL);
}

static void test_v2_missing_controller(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	sbx_cgroup_limits lim = {.pids_max = 10};

	write_file(root, "cgroup.controllers", "cpu memory\n");
	assert_int_equal(sbx_cgroup_create(&cg, root, "x", &lim, &err), -1);
	assert_int_equal(err.kind, SBX_E_BACKEND_UNAVAILABLE);
	assert_non_null(strstr(err.msg, "pids"));
}

/* A fake v2 dir is no cgroup: the device program cannot be attached, and
 * the session is refused rather than opened without a device filter. */
static void test_v2_device_rules_fail_closed(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	const char *rules[] = {"c 195:0 rw"};
	sbx_cgroup_limits lim = {.devices = rules, .n_devices = 1};

	write_file(root, "cgroup.controllers", "cpu memory pids\n");
	assert_int_equal(sbx_cgroup_create(&cg, root, "g", &lim, &err), -1);
	assert_int_equal(err.kind, SBX_E_BACKEND_UNAVAILABLE);
	assert_non_null(strstr(err.msg, "device filter"));
}

static void test_devrule_parse(void **state)
{
	(void)state;
	struct sbx_devrule_view r;
	assert_int_equal(sbx_devbpf_parse("c 195:255 rw", &r), 0);
	assert_int_equal(r.major, 195);
	assert_int_equal(r.minor, 255);
	assert_int_equal(r.access, BPF_DEVCG_ACC_READ | BPF_DEVCG_ACC_WRITE);
	assert_int_equal(sbx_devbpf_parse("c 136:* rwm", &r), 0);
	assert_int_equal(r.minor, -1);
	assert_int_equal(sbx_devbpf_parse("a *:* rwm", &r), -1);
	assert_int_equal(sbx_devbpf_parse("c 1:3 rwx", &r), -1);
	assert_int_equal(sbx_devbpf_parse("c 1:x3 r", &r), -1);
}

/*
 * The real thing, on this machine's cgroup v2 hierarchy (no controller
 * needed for device programs): a child in a cgroup allowing only
 * /dev/null (read/write, no mknod) opens it, and is refused /dev/zero and
 * mknod of /dev/null's numbers.  Skipped without root or a v2 mount.
 */
static void test_v2_device_program_enforces(void **state)
{
	(void)state;
	const char *base = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0
				   ? "/sys/fs/cgroup"
				   : "/sys/fs/cgroup/unified";
	char dir[256], procs[300], node[64];
	sbx_err err = {0};
	const char *rules[] = {"c 1:3 rw"};

	if (geteuid() != 0 || access(base, W_OK) != 0)
		skip();
	snprintf(dir, sizeof(dir), "%s/sbx-devtest-%d", base, (int)getpid());
	if (mkdir(dir, 0755) != 0)
		skip();
	if (sbx_devbpf_attach(dir, rules, sizeof(rules) / sizeof(rules[0]), &err) != 0) {
		rmdir(dir);
		fail_msg("attach: %s", err.msg);
	}
	snprintf(procs, sizeof(procs), "%s/cgroup.procs", dir);
	snprintf(node, sizeof(node), "/tmp/sbx-devtest-node-%d", (int)getpid());
	pid_t pid = fork();
	if (pid == 0) {
		int rc = 0;
		FILE *f = fopen(procs, "w");
		if (!f || fputs("0", f) < 0 || fclose(f) != 0)
			_exit(100);
		int fd = open("/dev/null", O_RDWR);
		if (fd < 0)
			rc |= 1;
		else
			close(fd);
		fd = open("/dev/zero", O_RDONLY);
		if (fd >= 0 || errno != EPERM)
			rc |= 2;
		if (mknod(node, S_IFCHR | 0600, makedev(1, 3)) == 0 || errno != EPERM)
			rc |= 4;
		_exit(rc);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	unlink(node);
	rmdir(dir);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) != 0)
		fail_msg("child: %s%s%s%s",
			 WEXITSTATUS(st) == 100 ? "could not join the cgroup " : "",
			 WEXITSTATUS(st) & 1 ? "/dev/null refused; " : "",
			 WEXITSTATUS(st) & 2 ? "/dev/zero allowed; " : "",
			 WEXITSTATUS(st) & 4 ? "mknod allowed" : "");
}

static void test_v1_limits(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	const char *rules[] = {"c 195:0 rw", "c 195:255 rw"};
	sbx_cgroup_limits lim = {.memory_bytes = 1u << 30,
				 .cpu_milli = 500,
				 .pids_max = 64,
				 .devices = rules,
				 .n_devices = 2};
	char d[PATH_MAX];

	for (const char *c = "memory\0cpu\0cpuacct\0pids\0devices\0"; *c; c += strlen(c) + 1) {
		snprintf(d, sizeof(d), "%s/%s", root, c);
		mkdir(d, 0755);
	}
	snprintf(d, sizeof(d), "%s/memory/sbx", root);
	mkdir(d, 0755);
	if (sbx_cgroup_create(&cg, root, "v1id", &lim, &err) != 0)
		fail_msg("create: %s", err.msg);
	assert_int_equal(cg.version, 1);
	snprintf(d, sizeof(d), "%s/memory/sbx/v1id", root);
	assert_file(d, "memory.limit_in_bytes", "1073741824");
	/* memsw and swappiness exist only where the kernel has them. */
	char p[PATH_MAX + 64];
	snprintf(p, sizeof(p), "%s/memory.memsw.limit_in_bytes", d);
	assert_int_equal(access(p, F_OK), -1);
	snprintf(d, sizeof(d), "%s/cpu/sbx/v1id", root);
	assert_file(d, "cpu.cfs_period_us", "100000");
	assert_file(d, "cpu.cfs_quota_us", "50000");
	snprintf(d, sizeof(d), "%s/pids/sbx/v1id", root);
	assert_file(d, "pids.max", "64");
	snprintf(d, sizeof(d), "%s/devices/sbx/v1id", root);
	assert_file(d, "devices.deny", "a");
	/* The file holds the last rule written (the kernel keeps them all). */
	assert_file(d, "devices.allow", "c 195:255 rw");
	assert_true(strstr(cg.oom_path, "memory/sbx/v1id/memory.oom_control") != NULL);
	write_file(cg.dir[SBX_CG_MEMORY], "memory.oom_control",
		   "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n");
	assert_int_equal(sbx_cgroup_oom_kills(&cg), 7);

	/* A run's cgroup: in the memory hierarchy only, no oom.group (v1
	 * has none); v1 counts a kill only in the victim's cgroup, so the
	 * session's count adds its runs'. */
	sbx_run_cgroup rc;
	pid_t g, child = tree(&g);
	int pidfd = pidfd_open_(child);
	if (sbx_cgroup_run_place(&cg, pidfd, &rc, &err) != 0)
		fail_msg("run create: %s", err.msg);
	assert_int_equal(rc.version, 1);
	born_inside(rc.dir, g);
	snprintf(d, sizeof(d), "%s/memory/sbx/v1id/run-", root);
	assert_true(strncmp(rc.dir, d, strlen(d)) == 0);
	snprintf(d, sizeof(d), "%s", rc.dir);
	snprintf(p, sizeof(p), "%s/memory.oom.group", d);
	assert_int_equal(access(p, F_OK), -1);
	snprintf(p, sizeof(p), "%s/pids/sbx/v1id/%s", root, strrchr(d, '/') + 1);
	assert_int_equal(access(p, F_OK), -1);
	assert_true(strstr(rc.oom_path, "/memory.oom_control") != NULL);
	write_file(d, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
	assert_int_equal(sbx_cgroup_run_oom_kills(&rc), 2);
	assert_int_equal(sbx_cgroup_oom_kills(&cg), 9);
	sbx_cgroup_run_kill(&rc);
	int st;
	assert_int_equal(waitpid(child, &st, 0), child);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	kill(g, SIGKILL);
	write_file(d, "cgroup.procs", "");
	sbx_cgroup_run_remove(&rc);
	close(pidfd);
	sbx_cgroup_destroy(&cg, NULL);
}

static void test_v1_missing_hierarchy(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	sbx_cgroup_limits lim = {.pids_max = 64};

	assert_int_equal(sbx_cgroup_create(&cg, root, "id", &lim, &err), -1);
	assert_int_equal(err.kind, SBX_E_BACKEND_UNAVAILABLE);
	assert_non_null(strstr(err.msg, "pids"));
}

static void test_no_limits_no_cgroup(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	sbx_cgroup_limits lim = {0};

	assert_int_equal(sbx_cgroup_create(&cg, "/nonexistent", "id", &lim, &err), 0);
	assert_int_equal(cg.version, 0);
	assert_int_equal(sbx_cgroup_oom_kills(&cg), -1);
	assert_int_equal(sbx_cgroup_destroy(&cg, &err), 0);
}

static void test_bad_device_rule(void **state)
{
	(void)state;
	sbx_cgroup cg;
	sbx_err err = {0};
	const char *rules[] = {"a *:* rwm"};
	sbx_cgroup_limits lim = {.devices = rules, .n_devices = 1};

	assert_int_equal(sbx_cgroup_create(&cg, root, "id", &lim, &err), -1);
	assert_int_equal(err.kind, SBX_E_INVALID_ARGUMENT);
}

static void test_parse_oom_kills(void **state)
{
	(void)state;
	assert_int_equal(sbx_cgroup_parse_oom_kills("oom_kill 5\n"), 5);
	assert_int_equal(sbx_cgroup_parse_oom_kills("low 1\noom 4\noom_kill 3\noom_group_kill 0\n"),
			 3);
	assert_int_equal(sbx_cgroup_parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n"), -1);
	assert_int_equal(sbx_cgroup_parse_oom_kills(""), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_v2_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_existing_dir_and_oom_counter, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_v2_no_memory_no_leaf, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_run_cgroup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_run_cgroup_kill_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_reuse_holds_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_run_cgroup_dead_init, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_missing_controller, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_device_rules_fail_closed, setup, teardown),
		cmocka_unit_test(test_devrule_parse),
		cmocka_unit_test(test_v2_device_program_enforces),
		cmocka_unit_test_setup_teardown(test_v1_limits, setup, teardown),
		cmocka_unit_test(test_v1_limits_under_signals),
		cmocka_unit_test_setup_teardown(test_v1_missing_hierarchy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_device_rule, setup, teardown),
		cmocka_unit_test(test_no_limits_no_cgroup),
		cmocka_unit_test(test_parse_oom_kills),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

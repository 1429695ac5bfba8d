/*
 * test_cgroup.c: the session cgroup code against fake cgroupfs trees, so
 * the v2 paths (production) are checked on this v1 machine too: which
 * files get which limits, what a missing controller says, the oom_kill
 * counter parser.
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
#include <sys/stat.h>
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
	if (sbx_cgroup_attach(&cg, 4242, &err) != 0)
		fail_msg("attach: %s", err.msg);
	assert_file(dir, "cgroup.procs", "4242");
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
		fail_msg("child: %s%s%s%s", WEXITSTATUS(st) == 100 ? "could not join the cgroup " : "",
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
	sbx_cgroup_limits lim = {.memory_bytes = 1u << 30, .cpu_milli = 500, .pids_max = 64,
				 .devices = rules, .n_devices = 2};
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
	assert_int_equal(sbx_cgroup_parse_oom_kills("low 1\noom 4\noom_kill 3\noom_group_kill 0\n"), 3);
	assert_int_equal(sbx_cgroup_parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n"), -1);
	assert_int_equal(sbx_cgroup_parse_oom_kills(""), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_v2_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_existing_dir_and_oom_counter, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_missing_controller, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v2_device_rules_fail_closed, setup, teardown),
		cmocka_unit_test(test_devrule_parse),
		cmocka_unit_test(test_v2_device_program_enforces),
		cmocka_unit_test_setup_teardown(test_v1_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_v1_missing_hierarchy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_device_rule, setup, teardown),
		cmocka_unit_test(test_no_limits_no_cgroup),
		cmocka_unit_test(test_parse_oom_kills),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

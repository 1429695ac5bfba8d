/*
 * test_caps.c: sbx_caps_drop_all in forked children, checked from
 * /proc/self/status and by trying to get a capability back.
 *
 * The children run as the lead's workload child does (uid 1000 holding a
 * full set in a fresh user namespace) and as host root, where exec of a
 * root-owned program would normally restore every capability.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/securebits.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sbx.h"

static const char *const cap_lines[] = {"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"};

/* Count the Cap* lines of a /proc/<pid>/status text that are not zero;
 * -1 if any of the five is missing. */
static int nonzero_caps(const char *status, bool report)
{
	int bad = 0;
	size_t i;

	for (i = 0; i < sizeof(cap_lines) / sizeof(cap_lines[0]); i++) {
		const char *l = strstr(status, cap_lines[i]);
		unsigned long long v;

		if (!l || sscanf(l + strlen(cap_lines[i]), "%llx", &v) != 1)
			return -1;
		if (v && report)
			fprintf(stderr, "%s %016llx\n", cap_lines[i], v);
		if (v)
			bad++;
	}
	return bad;
}

static int own_status_caps(bool report)
{
	char buf[8192];
	ssize_t n;
	int fd = open("/proc/self/status", O_RDONLY);

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	return nonzero_caps(buf, report);
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

/* Whatever route back to a capability we can think of must fail. */
static int nothing_comes_back(void)
{
	cap_t full = cap_init();
	cap_value_t setuid_cap = CAP_SETUID;
	const int locked = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
			   SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
			   SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
	int bad = 0, sb = prctl(PR_GET_SECUREBITS, 0, 0, 0, 0);

	if (sb < 0 || (sb & locked) != locked) {
		fprintf(stderr, "securebits 0x%x, want 0x%x set\n", sb, locked);
		bad++;
	}

	cap_set_flag(full, CAP_PERMITTED, 1, &setuid_cap, CAP_SET);
	cap_set_flag(full, CAP_EFFECTIVE, 1, &setuid_cap, CAP_SET);
	if (cap_set_proc(full) == 0) {
		fprintf(stderr, "cap_set_proc raised CAP_SETUID again\n");
		bad++;
	}
	cap_free(full);
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETUID, 0, 0) == 0) {
		fprintf(stderr, "ambient CAP_SETUID raised\n");
		bad++;
	}
	if (prctl(PR_SET_SECUREBITS, 0, 0, 0, 0) == 0) {
		fprintf(stderr, "securebits unlocked\n");
		bad++;
	}
	if (setresuid(4242, 4242, 4242) == 0) {
		fprintf(stderr, "setresuid worked without CAP_SETUID\n");
		bad++;
	}
	return bad;
}

static int wait_child(pid_t pid)
{
	int status;

	assert_true(pid >= 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status))
		fail_msg("child killed by signal %d", WTERMSIG(status));
	return WEXITSTATUS(status);
}

static void test_userns_uid1000(void **state)
{
	pid_t pid;

	(void)state;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		sbx_err err = {0};
		uid_t host_uid = geteuid();
		gid_t host_gid = getegid();
		char map[64];
		int before, after;

		/* A fresh user namespace where we are uid 1000 with a full set,
		 * as the workload child is after its setresuid. */
		if (unshare(CLONE_NEWUSER) != 0) {
			fprintf(stderr, "unshare(CLONE_NEWUSER): %s\n", strerror(errno));
			_exit(2);
		}
		snprintf(map, sizeof(map), "1000 %u 1", (unsigned)host_uid);
		if (write_file("/proc/self/setgroups", "deny") != 0 ||
		    write_file("/proc/self/uid_map", map) != 0)
			_exit(3);
		snprintf(map, sizeof(map), "1000 %u 1", (unsigned)host_gid);
		if (write_file("/proc/self/gid_map", map) != 0)
			_exit(3);
		if (getuid() != 1000 || getgid() != 1000)
			_exit(4);
		before = own_status_caps(false);
		if (before < 3) { /* Prm, Eff and Bnd at least must be set now */
			fprintf(stderr, "expected a full set before, %d lines set\n", before);
			_exit(5);
		}
		/* Something in the ambient set too, as an exec would keep it. */
		{
			cap_t c = cap_get_proc();
			cap_value_t amb = CAP_NET_BIND_SERVICE;

			if (!c || cap_set_flag(c, CAP_INHERITABLE, 1, &amb, CAP_SET) != 0 ||
			    cap_set_proc(c) != 0 || cap_set_ambient(amb, CAP_SET) != 0 ||
			    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, amb, 0, 0) != 1) {
				fprintf(stderr, "cannot raise an ambient cap: %s\n",
					strerror(errno));
				_exit(5);
			}
			cap_free(c);
		}
		if (sbx_caps_drop_all(&err) != 0) {
			fprintf(stderr, "drop: %s\n", err.msg);
			_exit(6);
		}
		after = own_status_caps(true);
		if (after != 0)
			_exit(7);
		if (nothing_comes_back() != 0)
			_exit(8);
		/* A second call is harmless. */
		if (sbx_caps_drop_all(&err) != 0) {
			fprintf(stderr, "second drop: %s\n", err.msg);
			_exit(9);
		}
		_exit(0);
	}
	assert_int_equal(wait_child(pid), 0);
}

static void test_root_exec_gets_nothing(void **state)
{
	char buf[8192];
	size_t used = 0;
	ssize_t n;
	int p[2];
	pid_t pid;

	(void)state;
	if (geteuid() != 0) {
		print_message("not root: nothing to regain through exec\n");
		skip();
	}
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		sbx_err err = {0};

		close(p[0]);
		if (sbx_caps_drop_all(&err) != 0) {
			fprintf(stderr, "drop: %s\n", err.msg);
			_exit(6);
		}
		if (nothing_comes_back() != 0)
			_exit(8);
		/* Still uid 0: without the bounding set and NOROOT, this exec
		 * would start with every capability. */
		dup2(p[1], 1);
		execl("/bin/cat", "cat", "/proc/self/status", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while ((n = read(p[0], buf + used, sizeof(buf) - 1 - used)) > 0)
		used += (size_t)n;
	close(p[0]);
	buf[used] = '\0';
	assert_int_equal(wait_child(pid), 0);
	assert_non_null(strstr(buf, "Uid:\t0"));
	assert_int_equal(nonzero_caps(buf, true), 0);
}

static void test_without_setpcap_fails_clearly(void **state)
{
	pid_t pid;

	(void)state;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		sbx_err err = {0};
		cap_t c;
		cap_value_t keep = CAP_SYS_ADMIN;

		/* Keep one capability but not CAP_SETPCAP: nothing may be
		 * reported as dropped when the bounding set cannot be. */
		if (unshare(CLONE_NEWUSER) != 0)
			_exit(2);
		c = cap_init();
		cap_set_flag(c, CAP_PERMITTED, 1, &keep, CAP_SET);
		cap_set_flag(c, CAP_EFFECTIVE, 1, &keep, CAP_SET);
		if (cap_set_proc(c) != 0)
			_exit(3);
		cap_free(c);
		if (sbx_caps_drop_all(&err) != -1) {
			fprintf(stderr, "drop without CAP_SETPCAP succeeded\n");
			_exit(4);
		}
		if (!strstr(err.msg, "CAP_SETPCAP")) {
			fprintf(stderr, "message does not say why: %s\n", err.msg);
			_exit(5);
		}
		_exit(0);
	}
	assert_int_equal(wait_child(pid), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_userns_uid1000),
		cmocka_unit_test(test_root_exec_gets_nothing),
		cmocka_unit_test(test_without_setpcap_fails_clearly),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_userns_unavailable.c: a machine without user namespaces gets
 * BackendUnavailable at session open, saying what is missing and how to fix
 * it, and no session (no fallback to weaker isolation).
 *
 * The root namespace's sysctl may not be writable (it is not on our CI
 * VMs), so a child enters a user namespace of its own, where it may set
 * user.max_user_namespaces to 0 for that namespace, and opens a real
 * session there.  The parent maps the child's uid 0 and the sandbox's host
 * uid so the session gets as far as clone().
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sbx.h"

enum {
	OK = 0,
	NO_UNSHARE = 10,
	NO_SYSCTL,
	OPENED,
	WRONG_KIND,
	WRONG_MESSAGE,
};

static int write_str(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

static int child(int go, const char *state)
{
	static const char *const sys[] = {"/usr", NULL};
	sbx_session_opts o;
	sbx_err err;
	char c;

	if (unshare(CLONE_NEWUSER) != 0)
		return NO_UNSHARE;
	if (read(go, &c, 1) != 1)
		return NO_UNSHARE;
	if (write_str("/proc/sys/user/max_user_namespaces", "0") != 0)
		return NO_SYSCTL;
	memset(&o, 0, sizeof(o));
	memset(&err, 0, sizeof(err));
	o.backend = "userns";
	o.state_dir = state;
	o.system_ro = sys;
	sbx_session *s = sbx_session_open(&o, &err);
	if (s) {
		sbx_session_close(s, NULL);
		return OPENED;
	}
	if (err.kind != SBX_E_BACKEND_UNAVAILABLE) {
		fprintf(stderr, "kind %s: %s\n", sbx_err_kind_name(err.kind), err.msg);
		return WRONG_KIND;
	}
	if (!strstr(err.msg, "max_user_namespaces") || !strstr(err.msg, "sysctl -w")) {
		fprintf(stderr, "message: %s\n", err.msg);
		return WRONG_MESSAGE;
	}
	return OK;
}

static void test_userns_disabled_is_backend_unavailable(void **state)
{
	char dir[] = "/tmp/sbx-unit-userns-XXXXXX", path[64], map[64];
	int go[2], st;

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_non_null(mkdtemp(dir));
	assert_int_equal(pipe(go), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(go[1]);
		_exit(child(go[0], dir));
	}
	close(go[0]);
	/* Wait until the child is in its namespace, then map it. */
	for (int i = 0; i < 1000; i++) {
		char self[64], other[64];
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		ssize_t a = readlink("/proc/self/ns/user", self, sizeof(self));
		ssize_t b = readlink(path, other, sizeof(other));
		if (a > 0 && b > 0 && (a != b || memcmp(self, other, (size_t)a)))
			break;
		usleep(1000);
	}
	snprintf(map, sizeof(map), "0 0 1\n%d %d 1\n", SBX_DEFAULT_HOST_UID, SBX_DEFAULT_HOST_UID);
	snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
	assert_int_equal(write_str(path, map), 0);
	snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
	assert_int_equal(write_str(path, map), 0);
	assert_int_equal(write(go[1], "x", 1), 1);
	close(go[1]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_userns_disabled_is_backend_unavailable),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_netns_child.c: the zygote's network namespace, made by a child of
 * its own while it builds the root (netns.c, sbx_netns_child_start and
 * _join).  Each case runs in a forked process in a user namespace of its
 * own, as a zygote does:
 *
 *   - the join puts the caller in a new namespace (not the one it was in:
 *     the control), with lo up, and hands back its fd; two joins give two
 *     namespaces; the child is left to reap, and exits 0;
 *   - when the child cannot make the namespace (the user namespace's
 *     max_net_namespaces is 0), the join fails naming what failed and why,
 *     and the caller stays where it was: never a run in the host's
 *     namespace by mistake.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"

static ino_t netns_ino(void)
{
	struct stat st;
	if (stat("/proc/thread-self/ns/net", &st) != 0)
		return 0;
	return st.st_ino;
}

static bool lo_is_up(void)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	bool up = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP);
	close(fd);
	return up;
}

static bool write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	bool ok = fd >= 0 && write(fd, s, strlen(s)) == (ssize_t)strlen(s);
	if (fd >= 0)
		close(fd);
	return ok;
}

/* A user namespace of our own, ourselves root in it (as the zygote). */
static void enter_userns(void)
{
	char map[64];
	uid_t uid = geteuid();
	gid_t gid = getegid();
	if (unshare(CLONE_NEWUSER) != 0)
		_exit(77);
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
	if (!write_file("/proc/self/uid_map", map) || !write_file("/proc/self/setgroups", "deny"))
		_exit(78);
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
	if (!write_file("/proc/self/gid_map", map))
		_exit(78);
}

/* Run fn in a forked process; its exit status (0: every check held). */
static int in_child(int (*fn)(void))
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fn());
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77)
		skip(); /* no user namespaces here */
	return WEXITSTATUS(st);
}

static int joins(void)
{
	sbx_err err;
	enter_userns();
	ino_t before = netns_ino();
	if (before == 0)
		return 10;
	int sock = sbx_netns_child_start(&err);
	if (sock < 0)
		return 11;
	int fd = sbx_netns_child_join(&sock, &err);
	if (fd < 0 || sock != -1)
		return 12;
	ino_t first = netns_ino();
	struct stat st;
	if (first == before || fstat(fd, &st) != 0 || st.st_ino != first)
		return 13; /* not in a new namespace, or not the one handed back */
	if (!lo_is_up())
		return 14;
	/* The child ended by itself, well. */
	int wst = 0;
	if (wait(&wst) < 0 || !WIFEXITED(wst) || WEXITSTATUS(wst) != 0)
		return 15;
	/* A second one is another namespace. */
	sock = sbx_netns_child_start(&err);
	int fd2 = sock >= 0 ? sbx_netns_child_join(&sock, &err) : -1;
	if (fd2 < 0 || netns_ino() == first || netns_ino() == before)
		return 16;
	close(fd);
	close(fd2);
	return 0;
}

static void test_join_gives_new_netns_with_lo(void **state)
{
	(void)state;
	assert_int_equal(in_child(joins), 0);
}

static int refused(void)
{
	sbx_err err;
	enter_userns();
	ino_t before = netns_ino();
	/* Per user namespace: no network namespace may be made below it. */
	if (!write_file("/proc/sys/user/max_net_namespaces", "0"))
		return 20;
	int sock = sbx_netns_child_start(&err);
	if (sock < 0)
		return 21; /* the child itself must start: it is the one refused */
	memset(&err, 0, sizeof(err));
	int fd = sbx_netns_child_join(&sock, &err);
	if (fd != -1 || sock != -1)
		return 22;
	if (err.kind != SBX_E_BACKEND_UNAVAILABLE || err.sys_errno != ENOSPC ||
	    !strstr(err.msg, "create the network namespace") || !strstr(err.msg, strerror(ENOSPC)))
		return 23;
	if (netns_ino() != before)
		return 24; /* moved anyway */
	return 0;
}

static void test_refused_netns_fails_the_join_and_stays(void **state)
{
	(void)state;
	assert_int_equal(in_child(refused), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_join_gives_new_netns_with_lo),
		cmocka_unit_test(test_refused_netns_fails_the_join_and_stays),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

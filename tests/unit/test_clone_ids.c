/*
 * test_clone_ids.c: a clone3 child of a multi-threaded host changes its ids
 * without waiting for the host's threads (sys.c: sbx_sys_drop_groups,
 * sbx_sys_set_ids, what the zygote and the workload's privilege drop use).
 *
 * The stall this guards against: glibc's setresuid/setresgid/setgroups in
 * such a child wait for every thread glibc lists that was created but has
 * not started yet, and the child has none of them, so it waits forever (a
 * session opened right after another one's placer thread was created never
 * became ready).  The window is made deterministic: the test pins itself
 * to one CPU as SCHED_FIFO, so the thread it creates cannot start before
 * the test clones the child.  The control shows the window is really hit:
 * there glibc's setresuid blocks in the child (a FUTEX_WAIT on -2, glibc's
 * "wait until this thread is cloned"); with sbx's calls the child exits 0.
 * Needs root (SCHED_FIFO, setresuid); skipped otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "internal.h"

/* Generous: a child that works exits in microseconds; one that hangs
 * never does.  Only a bound for a broken build, not a timing check. */
#define DEADLINE_MS 60000

static void *idle_thread(void *arg)
{
	return arg;
}

/* The child's id change: sbx's calls, or (control) glibc's. */
static void child_ids(bool glibc)
{
	uid_t id = 65534;
	int rc = glibc ? setresgid(id, id, id) | setresuid(id, id, id)
		       : sbx_sys_drop_groups() | sbx_sys_set_ids(id, id);
	_exit(rc == 0 && getuid() == id && getgid() == id ? 0 : 3);
}

/* Pin to one CPU as SCHED_FIFO, create a thread (it cannot start), clone
 * the child; back to normal.  Returns the child's pidfd, or -1 to skip. */
static int clone_in_window(bool glibc, pthread_t *th)
{
	cpu_set_t one, all;
	struct sched_param fifo = {.sched_priority = 1}, other = {.sched_priority = 0};
	int pidfd = -1;

	if (sched_getaffinity(0, sizeof(all), &all) != 0)
		return -1;
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	if (sched_setaffinity(0, sizeof(one), &one) != 0)
		return -1;
	if (sched_setscheduler(0, SCHED_FIFO, &fifo) != 0) {
		(void)sched_setaffinity(0, sizeof(all), &all);
		return -1;
	}
	/* The new thread inherits the CPU and the policy: it waits behind
	 * us until we block, and glibc lists it as not started meanwhile. */
	int rc = pthread_create(th, NULL, idle_thread, NULL);
	pid_t pid = rc == 0 ? sbx_sys_clone3_fork(0, &pidfd) : -1;
	if (pid == 0)
		child_ids(glibc);
	(void)sched_setscheduler(0, SCHED_OTHER, &other);
	(void)sched_setaffinity(0, sizeof(all), &all);
	assert_int_equal(rc, 0);
	assert_true(pid > 0);
	return pidfd;
}

/* The child's end within the deadline: its exit status, or -1 if it hung
 * (then it is killed). */
static int wait_child(int pidfd)
{
	struct pollfd pfd = {pidfd, POLLIN, 0};
	siginfo_t si;
	int n;

	while ((n = poll(&pfd, 1, DEADLINE_MS)) < 0 && errno == EINTR)
		;
	if (n == 0)
		(void)sbx_sys_pidfd_send_signal(pidfd, SIGKILL);
	memset(&si, 0, sizeof(si));
	assert_int_equal(waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED), 0);
	close(pidfd);
	return n == 0 ? -1 : (si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status);
}

/* The child is in glibc's wait for an unstarted thread: FUTEX_WAIT
 * (private) on the value -2.  Looked at until seen or the deadline. */
static bool in_setxid_wait(int pidfd)
{
	char path[64], buf[256];
	struct pollfd pfd = {pidfd, POLLIN, 0};
	pid_t pid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	if ((f = fopen(path, "re"))) {
		while (fgets(buf, sizeof(buf), f))
			if (sscanf(buf, "Pid: %d", &pid) == 1)
				break;
		fclose(f);
	}
	assert_true(pid > 0);
	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	for (int waited = 0; waited < DEADLINE_MS; waited += 10) {
		long nr = -1;
		unsigned long a0, op = 0, val = 0;
		if ((f = fopen(path, "re"))) {
			if (!fgets(buf, sizeof(buf), f) ||
			    sscanf(buf, "%ld %lx %lx %lx", &nr, &a0, &op, &val) != 4)
				nr = -1;
			fclose(f);
		}
		if (nr == 202 /* futex */ && (op & 0x7f) == 0 /* WAIT */ && val == 0xfffffffeUL)
			return true;
		if (poll(&pfd, 1, 10) > 0)
			return false; /* it ended: it did not wait */
	}
	return false;
}

static void test_sbx_ids_do_not_wait_for_the_hosts_threads(void **state)
{
	pthread_t th;
	(void)state;

	if (geteuid() != 0)
		skip();
	/* Control: glibc's setresuid in the same window waits for the
	 * unstarted thread, so the window is really hit. */
	int pidfd = clone_in_window(true, &th);
	if (pidfd < 0)
		skip(); /* no SCHED_FIFO here */
	bool waited = in_setxid_wait(pidfd);
	(void)sbx_sys_pidfd_send_signal(pidfd, SIGKILL);
	(void)wait_child(pidfd);
	assert_true(waited);
	pthread_join(th, NULL);
	/* sbx's calls: the child changes its ids and exits. */
	pidfd = clone_in_window(false, &th);
	assert_true(pidfd >= 0);
	assert_int_equal(wait_child(pidfd), 0);
	pthread_join(th, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sbx_ids_do_not_wait_for_the_hosts_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

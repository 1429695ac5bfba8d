/*
 * test_template_thread.c: a host thread's exit leaves the sessions alone
 * (zygote_template.c).
 *
 * The zygote template and every zygote it clones (CLONE_PARENT) carry
 * PR_SET_PDEATHSIG, which the kernel fires when their parent *thread*
 * ends, not the process.  When the template was a child of whichever
 * thread opened first, that thread's exit killed the template and every
 * session's zygote, also those opened by other threads.  Here a thread
 * opens the first session (so it would start the template), the main
 * thread opens a second one, the thread ends; the second session must
 * still run a command.  Control: the same probe sees a session whose
 * zygote was killed fail.  Needs root and user namespaces; skipped
 * otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "session_impl.h"

static const char *const sys_ro[] = {"/usr", "/bin", "/lib", "/lib64", NULL};

static const char *backend; /* of the test running */

static sbx_session *open_one(sbx_err *err)
{
	sbx_session_opts o;

	memset(&o, 0, sizeof(o));
	memset(err, 0, sizeof(*err));
	o.backend = backend;
	o.system_ro = sys_ro;
	return sbx_session_open(&o, err);
}

/* 0 when "true" ran and exited 0 in s; -1 otherwise. */
static int run_true(sbx_session *s)
{
	static const char *const argv[] = {"/bin/true", NULL};
	static const char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
	sbx_run_opts ro;
	sbx_event ev;
	sbx_err err;
	int rc = -1;

	memset(&ro, 0, sizeof(ro));
	memset(&err, 0, sizeof(err));
	ro.argv = argv;
	ro.envp = envp;
	ro.stdin_mode = ro.stdout_mode = ro.stderr_mode = SBX_IO_NULL;
	ro.timeout_ms = 60000;
	sbx_run *r = sbx_run_start(s, &ro, &err);
	if (!r)
		return -1;
	for (int i = 0; i < 1000; i++) {
		memset(&ev, 0, sizeof(ev));
		if (sbx_run_next(r, 60000, false, false, &ev, &err) != 0)
			break;
		if (ev.type == SBX_EV_EXIT) {
			const sbx_run_result *res = sbx_run_result_get(r);
			rc = res->term == SBX_TERM_EXIT && res->returncode == 0 ? 0 : -1;
			break;
		}
	}
	sbx_run_free(r);
	return rc;
}

struct opener {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stage; /* 1: opened (or failed), 2: may end */
	pid_t tid;
	sbx_session *s;
	sbx_err err;
};

static void *opener_main(void *arg)
{
	struct opener *op = arg;

	op->tid = (pid_t)syscall(SYS_gettid);
	op->s = open_one(&op->err);
	pthread_mutex_lock(&op->mu);
	op->stage = 1;
	pthread_cond_broadcast(&op->cv);
	while (op->stage < 2)
		pthread_cond_wait(&op->cv, &op->mu);
	pthread_mutex_unlock(&op->mu);
	return NULL;
}

/* Until the thread's task is gone from /proc: its exit, and with it the
 * death signals it sends its children, is then complete. */
static int wait_task_gone(pid_t tid)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/self/task/%d", (int)tid);
	for (int i = 0; i < 60000 && stat(path, &st) == 0; i++)
		usleep(1000);
	return stat(path, &st) == 0 ? -1 : 0;
}

/* Whether the process pid ended, or ends now: a SIGKILL sent is pending
 * until it is taken, and the process is gone soon after.  wait_ms only
 * bounds how long a dying one may take; a live one is never waited on
 * longer, so a slow machine cannot turn a death into a pass. */
static bool doomed(pid_t pid, int wait_ms)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pfd < 0)
		return true;
	struct pollfd p = {pfd, POLLIN, 0};
	int n = poll(&p, 1, wait_ms);
	close(pfd);
	return n != 0;
}

enum {
	PASS = 0,
	SKIP = 77,
	BAD_OPEN = 2,
	BAD_THREAD,
	SESSION_DIED,
	OWN_DIED,
	BAD_NEXT,
	BAD_CONTROL
};

/* In a fresh process (so the thread is the first to open there): the
 * thread opens, the main thread opens, the thread ends. */
static int scenario(void)
{
	struct opener op;
	pthread_t th;
	sbx_err err;

	memset(&op, 0, sizeof(op));
	pthread_mutex_init(&op.mu, NULL);
	pthread_cond_init(&op.cv, NULL);
	if (pthread_create(&th, NULL, opener_main, &op) != 0)
		return BAD_THREAD;
	pthread_mutex_lock(&op.mu);
	while (op.stage < 1)
		pthread_cond_wait(&op.cv, &op.mu);
	op.stage = op.s ? 1 : 2;
	pthread_cond_broadcast(&op.cv);
	pthread_mutex_unlock(&op.mu);
	if (!op.s) {
		fprintf(stderr, "open (thread): %s\n", op.err.msg);
		pthread_join(th, NULL);
		return op.err.kind == SBX_E_BACKEND_UNAVAILABLE ? SKIP : BAD_OPEN;
	}
	/* Opened by the main thread, after the thread started the template. */
	sbx_session *mine = open_one(&err);
	if (!mine || run_true(mine) != 0) {
		fprintf(stderr, "open (main): %s\n", err.msg);
		return BAD_OPEN;
	}
	pthread_mutex_lock(&op.mu);
	op.stage = 2;
	pthread_cond_broadcast(&op.cv);
	pthread_mutex_unlock(&op.mu);
	pthread_join(th, NULL);
	if (wait_task_gone(op.tid) != 0)
		return BAD_THREAD;

	if (doomed(mine->zygote, 1000) || run_true(mine) != 0)
		return SESSION_DIED;
	/* The thread's own session lives on too: it is the process's. */
	if (doomed(op.s->zygote, 0) || run_true(op.s) != 0)
		return OWN_DIED;
	/* A new open works. */
	sbx_session *next = open_one(&err);
	if (!next || run_true(next) != 0) {
		fprintf(stderr, "open (after): %s\n", next ? "run failed" : err.msg);
		return BAD_NEXT;
	}
	/* Control: the probe sees a zygote that was killed. */
	if (kill(next->zygote, SIGKILL) != 0 || !doomed(next->zygote, 60000))
		return BAD_CONTROL;
	sbx_session_close(next, NULL);
	sbx_session_close(mine, NULL);
	sbx_session_close(op.s, NULL);
	return PASS;
}

static void thread_exit_keeps_sessions(const char *which)
{
	int st = 0;

	if (geteuid() != 0)
		skip();
	backend = which;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(scenario());
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == SKIP)
		skip();
	assert_int_equal(WEXITSTATUS(st), PASS);
}

/* userns: the zygote's own pdeath signal goes with its change of uid. */
static void test_thread_exit_userns(void **state)
{
	(void)state;
	thread_exit_keeps_sessions("userns");
}

/* privileged: the zygote stays host root, so its pdeath signal stays. */
static void test_thread_exit_privileged(void **state)
{
	(void)state;
	thread_exit_keeps_sessions("privileged");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_thread_exit_userns),
		cmocka_unit_test(test_thread_exit_privileged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * test_template_thread.c: a host thread's exit leaves the sessions alone,
 * and a fork leaves the child able to open (zygote_template.c).
 *
 * The zygote template and every zygote it clones (CLONE_PARENT) carry
 * PR_SET_PDEATHSIG, which the kernel fires when their parent *thread*
 * ends, not the process.  When the template was a child of whichever
 * thread opened first, that thread's exit killed the template and every
 * session's zygote, also those opened by other threads.  Here a thread
 * opens the first session (so it would start the template), the main
 * thread opens a second one, the thread ends; the second session must
 * still run a command.  Control: the same probe sees a session whose
 * zygote was killed fail.
 *
 * And a fork while one thread's open waits for the template's answer
 * (holding its lock: the template is stopped here) leaves the child a
 * lock it can take: the child's own open works (it waited forever).
 * Needs root and user namespaces; skipped otherwise.
 */
#define _GNU_SOURCE
#include <dirent.h>
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

/* The syscall task tid of this process is in (its number), or -1. */
static long in_syscall(pid_t tid)
{
	char path[64], buf[64] = "";
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	long nr = fgets(buf, sizeof(buf), f) ? strtol(buf, NULL, 10) : -1;
	fclose(f);
	return nr;
}

/* This process's zygote template: a child of one of its threads. */
static pid_t find_template(void)
{
	char path[300], comm[32];
	pid_t found = -1;
	struct dirent *d;
	DIR *dir = opendir("/proc/self/task");
	int pid;

	while (dir && (d = readdir(dir)) != NULL) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/children", d->d_name);
		FILE *c = fopen(path, "re");
		while (c && fscanf(c, "%d", &pid) == 1) {
			snprintf(path, sizeof(path), "/proc/%d/comm", pid);
			FILE *cf = fopen(path, "re");
			if (cf && fgets(comm, sizeof(comm), cf) && !strcmp(comm, "sbx-template\n"))
				found = pid;
			if (cf)
				fclose(cf);
		}
		if (c)
			fclose(c);
	}
	if (dir)
		closedir(dir);
	return found;
}

struct forker {
	pid_t tid;
	volatile pid_t child; /* 0 until fork returned */
};

static void *forker_main(void *arg)
{
	struct forker *fk = arg;
	sbx_err err;

	fk->tid = (pid_t)syscall(SYS_gettid);
	pid_t pid = fork();
	if (pid == 0) {
		sbx_session *s = open_one(&err);
		_exit(s && run_true(s) == 0 ? 0 : 1);
	}
	fk->child = pid;
	return NULL;
}

static void *blocked_open_main(void *arg)
{
	struct opener *op = arg;

	op->tid = (pid_t)syscall(SYS_gettid);
	op->s = open_one(&op->err);
	return NULL;
}

enum { HUNG = 10, CHILD_FAILED, NO_TEMPLATE, NOT_BLOCKED };

/* In a fresh process: an open waits on a stopped template (holding the
 * template's lock) while another thread forks; the forked child opens. */
static int fork_scenario(void)
{
	struct opener op;
	struct forker fk;
	pthread_t x, y;
	sbx_err err;
	int st;

	sbx_session *a = open_one(&err);
	if (!a)
		return err.kind == SBX_E_BACKEND_UNAVAILABLE ? SKIP : BAD_OPEN;
	pid_t tpl = find_template();
	if (tpl <= 0)
		return NO_TEMPLATE;
	kill(tpl, SIGSTOP);
	memset(&op, 0, sizeof(op));
	memset(&fk, 0, sizeof(fk));
	if (pthread_create(&x, NULL, blocked_open_main, &op) != 0)
		return BAD_THREAD;
	/* Until the open waits for the template's answer (in poll). */
	long nr = -1;
	for (int i = 0; i < 60000; i++) {
		nr = op.tid ? in_syscall(op.tid) : -1;
		if (nr == SYS_poll || nr == SYS_ppoll)
			break;
		usleep(1000);
	}
	if (nr != SYS_poll && nr != SYS_ppoll)
		return NOT_BLOCKED;
	if (pthread_create(&y, NULL, forker_main, &fk) != 0)
		return BAD_THREAD;
	/* Until the fork is done, or waits for the lock (the fix). */
	for (int i = 0; i < 60000 && !fk.child; i++) {
		if (fk.tid && in_syscall(fk.tid) == SYS_futex)
			break;
		usleep(1000);
	}
	kill(tpl, SIGCONT);
	pthread_join(x, NULL);
	pthread_join(y, NULL);
	if (fk.child <= 0)
		return BAD_THREAD;
	int code = doomed(fk.child, 60000) ? 0 : HUNG;
	if (code == HUNG)
		kill(fk.child, SIGKILL);
	if (waitpid(fk.child, &st, 0) != fk.child)
		return BAD_THREAD;
	if (code == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		code = CHILD_FAILED;
	if (op.s)
		sbx_session_close(op.s, NULL);
	sbx_session_close(a, NULL);
	return code;
}

static void test_fork_while_an_open_waits(void **state)
{
	int st = 0;

	(void)state;
	if (geteuid() != 0)
		skip();
	backend = "userns";
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(fork_scenario());
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == SKIP)
		skip();
	assert_int_equal(WEXITSTATUS(st), PASS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_thread_exit_userns),
		cmocka_unit_test(test_thread_exit_privileged),
		cmocka_unit_test(test_fork_while_an_open_waits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

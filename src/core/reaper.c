/*
 * reaper.c: finish what a caller killed, off the caller's path.
 *
 * Some ends take long for reasons of the kernel's own: pasta's exit closes
 * its tap device, whose unregistration waits out RCU grace periods (~35 ms
 * of a session's close here); a session's namespaces and mounts are torn
 * down at its zygote's reaping (0.3-7 ms, RCU waits again), and its cgroup
 * can only go after that.  What was killed can do nothing more; only the
 * reaping and the removal are left, which a thread does, so the caller
 * goes on:
 *
 *   sbx_reap_later  a detached thread waits for one killed child (pasta);
 *   sbx_reap_job    one long-lived thread runs queued jobs in order (a
 *                   closed session's reap, cgroup rmdir and dir removal:
 *                   session.c).  At exit the queue is waited for, bounded
 *                   (SBX_REAP_EXIT_WAIT_MS), so a process leaves nothing.
 *
 * A thread that cannot be started means the caller does the work itself,
 * as before.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static void reap_now(pid_t pid)
{
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

static void *reap_main(void *arg)
{
	reap_now((pid_t)(intptr_t)arg);
	return NULL;
}

/* A thread with every signal blocked (signals go to the caller's). */
static int start_quiet(pthread_t *t, void *(*fn)(void *), void *arg, bool detached)
{
	pthread_attr_t attr;
	sigset_t all, old;

	if (pthread_attr_init(&attr) != 0)
		return -1;
	if (detached)
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* It only waits and removes: a small stack will do. */
	pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN < 65536 ? 65536 : PTHREAD_STACK_MIN);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(t, &attr, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return rc == 0 ? 0 : -1;
}

void sbx_reap_later(pid_t pid)
{
	pthread_t t;

	if (pid <= 0)
		return;
	if (start_quiet(&t, reap_main, (void *)(intptr_t)pid, true) != 0)
		reap_now(pid);
}

struct job {
	void (*fn)(void *);
	void *arg;
	struct job *next;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv, idle;
	struct job *head, *tail;
	bool started, running, closed; /* running: a job is being run now */
	pid_t owner;		       /* the process whose thread it is */
} Q = {.mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER,
       .idle = PTHREAD_COND_INITIALIZER};

static void *jobs_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&Q.mu);
	for (;;) {
		while (!Q.head)
			pthread_cond_wait(&Q.cv, &Q.mu);
		struct job *j = Q.head;
		Q.head = j->next;
		if (!Q.head)
			Q.tail = NULL;
		Q.running = true;
		pthread_mutex_unlock(&Q.mu);
		j->fn(j->arg);
		free(j);
		pthread_mutex_lock(&Q.mu);
		Q.running = false;
		if (!Q.head)
			pthread_cond_broadcast(&Q.idle);
	}
	return NULL;
}

void sbx_reap_drain(int timeout_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&Q.mu);
	while (Q.started && (Q.head || Q.running) &&
	       pthread_cond_timedwait(&Q.idle, &Q.mu, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&Q.mu);
}

/* At exit: what was queued is finished (bounded), and later closes do
 * their own work (the exit may be past the point where a thread runs). */
static void jobs_atexit(void)
{
	if (getpid() != Q.owner)
		return; /* a forked child's exit: the queue is its parent's */
	sbx_reap_drain(SBX_REAP_EXIT_WAIT_MS);
	pthread_mutex_lock(&Q.mu);
	Q.closed = true;
	pthread_mutex_unlock(&Q.mu);
}

int sbx_reap_job(void (*fn)(void *), void *arg)
{
	struct job *j = malloc(sizeof(*j));
	if (!j)
		return -1;
	j->fn = fn;
	j->arg = arg;
	j->next = NULL;
	pthread_mutex_lock(&Q.mu);
	if (Q.closed || (Q.started && Q.owner != getpid())) {
		pthread_mutex_unlock(&Q.mu);
		free(j);
		return -1;
	}
	if (!Q.started) {
		pthread_t t;
		if (start_quiet(&t, jobs_main, NULL, true) != 0) {
			pthread_mutex_unlock(&Q.mu);
			free(j);
			return -1;
		}
		Q.started = true;
		Q.owner = getpid();
		atexit(jobs_atexit);
	}
	if (Q.tail)
		Q.tail->next = j;
	else
		Q.head = j;
	Q.tail = j;
	pthread_cond_signal(&Q.cv);
	pthread_mutex_unlock(&Q.mu);
	return 0;
}

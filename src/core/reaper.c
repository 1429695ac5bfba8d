/*
 * reaper.c: wait for a killed child off the caller's path.
 *
 * Some children take long to die after SIGKILL for reasons of the kernel's
 * own: pasta's exit closes its tap device, whose unregistration waits out
 * RCU grace periods (~35 ms of a session's close here, most of it).  The
 * child is already killed and can do nothing more; only its reaping is
 * left, which a detached thread does, so the caller goes on.  A thread
 * that cannot be started means the caller waits, as before.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

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

void sbx_reap_later(pid_t pid)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;

	if (pid <= 0)
		return;
	if (pthread_attr_init(&attr) != 0) {
		reap_now(pid);
		return;
	}
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* It only waits: the smallest stack will do. */
	pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN < 65536 ? 65536 : PTHREAD_STACK_MIN);
	/* Signals go to the caller's threads, not this one. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&t, &attr, reap_main, (void *)(intptr_t)pid);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0)
		reap_now(pid);
}

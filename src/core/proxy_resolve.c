/*
 * proxy_resolve.c: name lookups for the allow-list proxy, off the event loop.
 *
 * getaddrinfo blocks, so N worker threads take jobs from a queue and put
 * finished ones on a done list, then write the eventfd that sits in the
 * proxy's epoll set; sbx_proxy_step collects them on the caller's thread.
 * A job never points at a connection: the connection finds its job by
 * pointer and, when it goes away first, marks the job abandoned, so a
 * lookup that finishes after sbx_proxy_remove is freed and nothing else.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "proxy_resolve.h"

struct sbx_resolver {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	sbx_resolve_job *queue_head, *queue_tail, *done;
	bool stop;
	int efd;
	size_t n_threads;
	pthread_t threads[];
};

static void lookup(sbx_resolve_job *j)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
	int rc = getaddrinfo(j->name, NULL, &hints, &res);

	if (rc != 0) {
		j->gai_err = rc;
		return;
	}
	for (ai = res; ai && j->n_addrs < SBX_PROXY_MAX_ADDRS; ai = ai->ai_next) {
		struct sockaddr_storage ss = {0};
		bool dup = false;
		if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6)
			continue;
		if (ai->ai_addrlen > sizeof(ss))
			continue;
		memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
		for (size_t i = 0; i < j->n_addrs && !dup; i++)
			dup = j->addrs[i].ss_family == ss.ss_family &&
			      memcmp(&j->addrs[i], &ss, sizeof(ss)) == 0;
		if (!dup)
			j->addrs[j->n_addrs++] = ss;
	}
	freeaddrinfo(res);
	if (j->n_addrs == 0)
		j->gai_err = EAI_NONAME;
}

static void *worker(void *arg)
{
	sbx_resolver *r = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->stop && !r->queue_head)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->stop)
			break;
		sbx_resolve_job *j = r->queue_head;
		r->queue_head = j->next;
		if (!r->queue_head)
			r->queue_tail = NULL;
		pthread_mutex_unlock(&r->mu);
		lookup(j);
		pthread_mutex_lock(&r->mu);
		j->next = r->done;
		r->done = j;
		if (write(r->efd, &one, sizeof(one)) < 0) {
			/* the counter cannot overflow in practice; nothing to do */
		}
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

sbx_resolver *sbx_resolver_new(size_t n_threads, int *efd_out)
{
	sbx_resolver *r = calloc(1, sizeof(*r) + n_threads * sizeof(pthread_t));

	if (!r)
		return NULL;
	r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->efd < 0) {
		free(r);
		return NULL;
	}
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	/* The workers are born with every signal blocked: a process-directed
	 * signal (sbxd's SIGTERM, SIGHUP) must reach the thread that waits for
	 * it, never a worker whose default action would end the process. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (size_t i = 0; i < n_threads; i++) {
		if (pthread_create(&r->threads[i], NULL, worker, r) != 0)
			break;
		r->n_threads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r->n_threads == 0) {
		sbx_resolver_free(r);
		return NULL;
	}
	*efd_out = r->efd;
	return r;
}

void sbx_resolver_submit(sbx_resolver *r, sbx_resolve_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&r->mu);
	if (r->queue_tail)
		r->queue_tail->next = j;
	else
		r->queue_head = j;
	r->queue_tail = j;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

sbx_resolve_job *sbx_resolver_collect(sbx_resolver *r)
{
	uint64_t v;
	sbx_resolve_job *d;

	if (read(r->efd, &v, sizeof(v)) < 0 && errno != EAGAIN) {
		/* nothing to drain */
	}
	pthread_mutex_lock(&r->mu);
	d = r->done;
	r->done = NULL;
	pthread_mutex_unlock(&r->mu);
	return d;
}

void sbx_resolver_free(sbx_resolver *r)
{
	sbx_resolve_job *j, *n;

	if (!r)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->mu);
	for (size_t i = 0; i < r->n_threads; i++)
		pthread_join(r->threads[i], NULL);
	/* queued and finished jobs belong to the resolver now */
	for (j = r->queue_head; j; j = n) {
		n = j->next;
		free(j);
	}
	for (j = r->done; j; j = n) {
		n = j->next;
		free(j);
	}
	close(r->efd);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
	free(r);
}

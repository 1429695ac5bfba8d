/*
 * proxy_resolve.h: the proxy's name-lookup thread pool (proxy_resolve.c).
 * Internal to libsbx.
 */
#ifndef SBX_PROXY_RESOLVE_H
#define SBX_PROXY_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "sbx_proxy.h"

typedef struct sbx_resolve_job {
	struct sbx_resolve_job *next; /* queue / done list link */
	void *owner;		      /* the connection; NULL once abandoned
	                               * (read and written on the loop thread only) */
	int gai_err;		      /* 0 or an EAI_* code */
	size_t n_addrs;
	struct sockaddr_storage addrs[SBX_PROXY_MAX_ADDRS];
	char name[256];
} sbx_resolve_job;

typedef struct sbx_resolver sbx_resolver;

/* Start n_threads workers; *efd_out is readable when jobs are done.  NULL
 * on failure (errno). */
sbx_resolver *sbx_resolver_new(size_t n_threads, int *efd_out);
/* Queue a calloc'ed job (the resolver holds it until collected). */
void sbx_resolver_submit(sbx_resolver *r, sbx_resolve_job *j);
/* Take the finished jobs (a list through ->next); the caller frees them. */
sbx_resolve_job *sbx_resolver_collect(sbx_resolver *r);
/* Stop and join the workers, free every job still held, close the fd. */
void sbx_resolver_free(sbx_resolver *r);

#endif

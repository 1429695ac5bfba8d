/*
 * proxy_verdict.c: the proxy asks its decider, never decides itself:
 * decide(NAME) before any lookup, the lookup on the resolver threads,
 * decide(ADDRS) over what it found, and verdicts given later
 * (sbx_proxy_decided).  An allowed ADDRS verdict hands over to the dialer
 * (proxy_relay.c).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "proxy_internal.h"

/* ---- decisions ---- */

static void verdict_terminate(sbx_proxy_verdict *v)
{
	v->reason[sizeof(v->reason) - 1] = '\0';
	v->literal[sizeof(v->literal) - 1] = '\0';
	v->resolve[sizeof(v->resolve) - 1] = '\0';
}

static void refuse(struct conn *c, const sbx_proxy_verdict *v)
{
	sbx_proxy_conn_fail(c, 403, 0x02, v->reason[0] ? v->reason : "not allowed");
}

enum { ASK_REFUSED, ASK_ALLOWED, ASK_PENDING };

/* Ask the decider about q: refused (the client is told), allowed, or
 * pending (the verdict comes through sbx_proxy_decided; c waits). */
static int ask(struct conn *c, const sbx_proxy_query *q, sbx_proxy_verdict *v)
{
	sbx_proxy_query qq = *q;

	qq.ticket = c->ticket = ++c->p->next_ticket;
	memset(v, 0, sizeof(*v));
	c->p->cfg.decide(c->p->cfg.ud, &qq, v);
	verdict_terminate(v);
	if (v->pending && !v->allow) {
		c->st = ST_DECIDING;
		c->pending_phase = q->phase;
		c->deadline = sbx_proxy_now_ms() + c->p->cfg.header_timeout_ms;
		sbx_proxy_conn_update(c);
		return ASK_PENDING;
	}
	if (!v->allow)
		refuse(c, v);
	return v->allow ? ASK_ALLOWED : ASK_REFUSED;
}

/* decide(ADDRS) allowed: dial. */
static void addrs_allowed(struct conn *c)
{
	c->p->st.allowed++;
	c->next_addr = 0;
	sbx_proxy_dial_next(c);
}

/* decide(ADDRS) over c->addrs, then dial. */
static void check_addrs(struct conn *c)
{
	sbx_proxy *p = c->p;
	char text[SBX_PROXY_MAX_ADDRS][INET6_ADDRSTRLEN];
	const char *ptrs[SBX_PROXY_MAX_ADDRS];
	sbx_proxy_query q = {.phase = SBX_PROXY_ADDRS,
			     .kind = c->kind,
			     .host = c->host,
			     .port = c->port,
			     .addrs = ptrs,
			     .n_addrs = c->n_addrs,
			     .tag = c->tag};
	sbx_proxy_verdict v;

	for (size_t i = 0; i < c->n_addrs; i++) {
		const struct sockaddr_storage *ss = &c->addrs[i];
		const void *a =
			ss->ss_family == AF_INET
				? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
				: (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
		if (!inet_ntop(ss->ss_family, a, text[i], sizeof(text[i])))
			snprintf(text[i], sizeof(text[i]), "?");
		ptrs[i] = text[i];
	}
	(void)p;
	if (ask(c, &q, &v) == ASK_ALLOWED)
		addrs_allowed(c);
}

/* decide(NAME) allowed: dial the literal, or resolve the name. */
static void name_allowed(struct conn *c, const sbx_proxy_verdict *vp)
{
	sbx_proxy *p = c->p;
	sbx_proxy_verdict v = *vp;

	if (v.literal[0] && v.resolve[0]) {
		sbx_proxy_conn_fail(c, 403, 0x02,
				    "decider gave both a literal and a name to resolve");
		return;
	}
	snprintf(c->name, sizeof(c->name), "%s", v.literal[0] ? v.literal : v.resolve);
	if (v.literal[0]) {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&c->addrs[0];
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&c->addrs[0];
		memset(&c->addrs[0], 0, sizeof(c->addrs[0]));
		if (inet_pton(AF_INET, v.literal, &s4->sin_addr) == 1) {
			s4->sin_family = AF_INET;
		} else if (inet_pton(AF_INET6, v.literal, &s6->sin6_addr) == 1) {
			s6->sin6_family = AF_INET6;
		} else {
			sbx_proxy_conn_fail(c, 403, 0x02,
					    "decider gave a literal that is not an IP address");
			return;
		}
		c->n_addrs = 1;
		check_addrs(c);
		return;
	}
	if (!v.resolve[0]) {
		sbx_proxy_conn_fail(c, 403, 0x02, "decider gave nothing to dial");
		return;
	}
	sbx_resolve_job *j = calloc(1, sizeof(*j));
	if (!j) {
		sbx_proxy_conn_fail(c, 502, 0x01, "out of memory");
		return;
	}
	snprintf(j->name, sizeof(j->name), "%s", v.resolve);
	j->owner = c;
	c->job = j;
	c->st = ST_RESOLVING;
	p->lookups++;
	sbx_resolver_submit(p->res, j);
	sbx_proxy_conn_update(c);
}

/* The target is known (c->host, c->port, c->kind): decide(NAME). */
void sbx_proxy_on_target(struct conn *c)
{
	sbx_proxy_query q = {.phase = SBX_PROXY_NAME,
			     .kind = c->kind,
			     .host = c->host,
			     .port = c->port,
			     .tag = c->tag};
	sbx_proxy_verdict v;

	c->deadline = 0;
	if (ask(c, &q, &v) == ASK_ALLOWED)
		name_allowed(c, &v);
}

void sbx_proxy_on_resolved(sbx_proxy *p)
{
	sbx_resolve_job *j = sbx_resolver_collect(p->res), *n;

	for (; j; j = n) {
		struct conn *c = j->owner;
		n = j->next;
		if (c && c->st == ST_RESOLVING) {
			c->job = NULL;
			if (j->gai_err) {
				char why[400];
				snprintf(why, sizeof(why), "cannot resolve %s: %s", j->name,
					 gai_strerror(j->gai_err));
				sbx_proxy_conn_fail(c, 502, 0x04, why);
			} else {
				memcpy(c->addrs, j->addrs, sizeof(c->addrs));
				c->n_addrs = j->n_addrs;
				check_addrs(c);
			}
		}
		free(j);
	}
}

/* ---- a verdict given later ---- */

int sbx_proxy_decided(sbx_proxy *p, uint64_t ticket, const sbx_proxy_verdict *vp)
{
	struct conn *c = p->conns;
	sbx_proxy_verdict v = *vp;

	while (c && !(c->st == ST_DECIDING && c->ticket == ticket))
		c = c->next;
	if (!c)
		return -1;
	verdict_terminate(&v);
	c->deadline = 0;
	if (!v.allow || v.pending)
		refuse(c, &v);
	else if (c->pending_phase == SBX_PROXY_NAME)
		name_allowed(c, &v);
	else
		addrs_allowed(c);
	sbx_proxy_run_timers(p);
	sbx_proxy_reap(p);
	return 0;
}

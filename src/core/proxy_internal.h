/*
 * proxy_internal.h: what the allow-list proxy's files share (internal to
 * libsbx): the connection and proxy structs, and the steps one file hands
 * to another.  The overview of a connection's life is in proxy.c.
 *
 *   proxy.c          the public API (sbx_proxy.h), the step's dispatch,
 *                    accepting, timers
 *   proxy_conn.c     a connection's lifetime: epoll interest, answers and
 *                    log lines, closing, reading the request head
 *   proxy_verdict.c  asking the decider (NAME, then ADDRS), the name
 *                    lookups' results, verdicts given later
 *   proxy_relay.c    dialing the checked addresses, then relaying bytes
 *   proxy_mitm*.c    secrets: TLS interception for a secret's hosts
 */
#ifndef SBX_PROXY_INTERNAL_H
#define SBX_PROXY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "proxy_parse.h"
#include "proxy_resolve.h"
#include "sbx_proxy.h"

#define PIPE_SIZE (512 * 1024)
#define BUF_SIZE (64 * 1024)
#define ACCEPT_BATCH 64

enum ev_type { EV_LISTENER, EV_CLIENT, EV_UPSTREAM, EV_RESOLVER, EV_TIMER, EV_MITM };

struct evh {
	enum ev_type type;
	void *obj;
};

struct listener {
	struct evh ev;
	int fd;
	void *tag;
	uint64_t paused_until; /* out of fds: accepting again at this time (ms) */
	struct listener *next;
};

enum state { ST_HEAD, ST_SOCKS_REQ, ST_DECIDING, ST_RESOLVING, ST_CONNECTING, ST_RELAY, ST_DEAD };
enum mode { M_UNKNOWN, M_CONNECT, M_FORWARD, M_SOCKS };

/* One direction of a relay: src -> dst. */
struct dir {
	int pipe[2];   /* -1 until first needed */
	size_t inpipe; /* bytes in the pipe (or buf) not yet written */
	bool use_buf;  /* splice refused: read/write through buf */
	bool full;     /* the pipe took no more (its slots can fill up
	                     * before PIPE_SIZE bytes): read again once it drains */
	char *buf;
	size_t boff;
	bool eof;	/* nothing more to read from src */
	bool by_limit;	/* ... because limit reached (no shutdown) */
	bool done;	/* eof and drained; shutdown sent */
	uint64_t limit; /* bytes still to read from src */
	char *pre;	/* sent to dst before anything read from src */
	size_t pre_off, pre_len;
};

struct conn {
	struct evh cev, uev;
	struct sbx_proxy *p;
	int cfd, ufd;
	uint32_t cmask, umask; /* current epoll interest; UINT32_MAX: not registered */
	void *tag;
	enum state st;
	enum mode mode;
	const char *kind;
	char host[SBX_PROXY_HOST_MAX + 1];
	char name[SBX_PROXY_HOST_MAX + 1]; /* the allowed verdict's normalized name */
	uint16_t port;
	sbx_resolve_job *job;
	uint64_t ticket;	       /* ST_DECIDING: the question waiting */
	sbx_proxy_phase pending_phase; /* ... and its phase */
	struct sockaddr_storage addrs[SBX_PROXY_MAX_ADDRS];
	size_t n_addrs, next_addr;
	int last_errno;
	uint64_t deadline; /* ms, CLOCK_MONOTONIC; 0: none */
	uint64_t last_act; /* RELAY: last byte moved */
	struct dir up, down;
	struct conn *prev, *next;
	size_t hlen;
	sbx_proxy_http_req req;
	char head[SBX_PROXY_HEAD_MAX];
};

struct sbx_proxy {
	sbx_proxy_cfg cfg;
	int epfd, tfd, rfd;
	struct evh tev, rev;
	sbx_resolver *res;
	struct listener *listeners;
	struct conn *conns, *dead;
	uint64_t timer_at;
	uint64_t lookups;
	uint64_t next_ticket;
	sbx_proxy_stats st;
	struct sbx_mitm *mitm; /* secrets' interception (proxy_mitm.c); NULL: none */
	struct evh mev;
};

static inline bool dir_pending(const struct dir *d)
{
	return d->pre_off < d->pre_len || d->inpipe > 0;
}

static inline bool dir_wants_read(const struct dir *d)
{
	return !d->eof && !d->full && d->pre_off >= d->pre_len &&
	       d->inpipe < (d->use_buf ? BUF_SIZE : PIPE_SIZE);
}

/* proxy.c */
uint64_t sbx_proxy_now_ms(void);
/* Expire what is due and arm the timerfd for the next deadline. */
void sbx_proxy_run_timers(sbx_proxy *p);

/* proxy_conn.c */
void sbx_proxy_logf(sbx_proxy *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Answer the client (HTTP status or SOCKS5 reply) and close. */
void sbx_proxy_conn_fail(struct conn *c, int status, uint8_t socks_reply, const char *reason);
/* Recompute which events each socket of c waits for. */
void sbx_proxy_conn_update(struct conn *c);
/* Unlink c (freed by sbx_proxy_reap at the end of the step). */
void sbx_proxy_conn_close(struct conn *c);
void sbx_proxy_reap(sbx_proxy *p);
/* ST_HEAD / ST_SOCKS_REQ: read more of the request. */
void sbx_proxy_on_client_readable(struct conn *c);

/* proxy_verdict.c */
/* The target is known (c->host, c->port, c->kind): decide(NAME). */
void sbx_proxy_on_target(struct conn *c);
/* The resolver's eventfd is readable: check the addresses of what resolved. */
void sbx_proxy_on_resolved(sbx_proxy *p);

/* proxy_relay.c */
void sbx_proxy_dir_init(struct dir *d);
/* Dial c->addrs[next_addr...] until one connects or is in progress. */
void sbx_proxy_dial_next(struct conn *c);
/* ST_CONNECTING: the dial finished (connected or failed). */
void sbx_proxy_on_upstream_writable(struct conn *c);
/* ST_RELAY: a socket is ready (events e); d is the direction it writes. */
void sbx_proxy_relay_event(struct conn *c, uint32_t e, const struct dir *d);

#endif

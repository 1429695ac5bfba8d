/*
 * front_int.h: what the front's files share (front.c: the guard's hooks,
 * the thread and metrics; front_accept.c: accepting and connection
 * budgets; front_conn.c: a connection's lifetime and timers;
 * front_relay.c: moving bytes between the client, the guard and h2o;
 * front_h1.c: HTTP/1.1); not for the rest of sbxd.
 */
#ifndef SBX_FRONT_INT_H
#define SBX_FRONT_INT_H

#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "front.h"
#include "front_budget.h"

#define CAP (256 * 1024)	/* bytes queued per direction before reading stops */
#define H1_HEAD_MAX 65536	/* an HTTP/1.1 request head */
#define LINGER_MAX (256 * 1024) /* bytes read and dropped after our last word */

enum { M_DETECT, M_H2, M_H1 };
/* HTTP/1.1: reading the first head; waiting for h2o's answer to an
 * Upgrade: h2c; a pipe. */
enum { H1_HEAD, H1_UPGRADE, H1_PIPE };

typedef struct conn {
	struct conn *prev, *next;
	h2o_socket_t *client, *inner;
	sbx_h2g *g;
	int mode;
	bool closing, lingering, inner_wdead;
	size_t lingered;
	struct sockaddr_storage addr;		 /* AF_UNSPEC for unix sockets */
	char peer[64], addr_s[INET6_ADDRSTRLEN]; /* with its port; without */
	uint64_t last_ms;
	sbx_h2g_buf h1_up, h1_down; /* HTTP/1.1: the pipe's buffers */
	sbx_h2g_buf h1_hold;	    /* the first head; bytes held during an upgrade */
	int h1_state;
	size_t h1_scanned, h1_match;
	bool h1_head_done;
	uint64_t h1_reserved, h1_relayed; /* charged to held_total; sent since h2o spoke */
	uint64_t h1_up_body;		  /* an upgrading request's body still owed to h2o */
	sbx_h2g_buf cw, iw;		  /* being written to the client, to h2o */
	bool client_paused, inner_paused;
	uint64_t seen401, seen503;
	const char *why_kind, *why_msg; /* the answer the check hook chose */
	h2o_timeout_entry_t hdr_entry, idle_entry, close_entry;
} conn;

/* The front's state: one, owned by its thread but for the counters. */
struct sbx_front_state {
	sbx_srv *S;
	void *ssl_ctx;
	/* the front's own loop and thread; the main loop gets h2o's ends of
	 * the socketpairs through the handoff pipe */
	h2o_loop_t *loop;
	pthread_t thread;
	int listen_fd, ctl[2], handoff[2];
	h2o_socket_t *listener, *ctl_sock, *handoff_sock;
	conn *conns;
	sbx_fb *fb;			  /* reset budgets per tenant/source, across connections */
	uint32_t n_lingering, linger_max; /* connections lingering (below) */
	int spare_fd;
	uint64_t held_total;
	h2o_timeout_t hdr_timeout, idle_timeout, close_timeout, pause_timeout;
	h2o_timeout_entry_t pause_entry;
	/* metrics: written by the front's thread (BUMP), read by the main one */
	uint64_t accepted, goaway[SBX_H2G_R_COUNT], refused_total, refused_addr, refused_fd,
		rejected401, rejected503, held_pub;
	uint32_t n_conns;
};
extern struct sbx_front_state sbx_front_state;
#define F sbx_front_state

#define BUMP(x) __atomic_fetch_add(&(x), 1, __ATOMIC_RELAXED)
#define ADD(x, n) __atomic_fetch_add(&(x), (n), __ATOMIC_RELAXED)
#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* front.c */
int front_new_guard(conn *c);
void front_guard_counts(conn *c);
/* front_conn.c */
void front_close_inner(conn *c);
void front_close_all(conn *c);
void front_arm_close(conn *c);
/* Everything is said: half-close, read until the client closes. */
void front_linger(conn *c);
void front_begin_close(conn *c);
void front_guard_closed(conn *c);
sbx_h2g_buf *front_up_buf(conn *c);
sbx_h2g_buf *front_down_buf(conn *c);
void front_update_timers(conn *c);
void front_timed_out(conn *c, uint32_t code, sbx_h2g_reason why);
void front_on_hdr_timeout(h2o_timeout_entry_t *e);
void front_on_idle_timeout(h2o_timeout_entry_t *e);
void front_on_close_timeout(h2o_timeout_entry_t *e);
/* front_relay.c */
void front_flush(conn *c);
void front_taken(h2o_socket_t *sock);
void front_on_client_read(h2o_socket_t *sock, const char *err);
void front_on_inner_read(h2o_socket_t *sock, const char *err);
/* front_h1.c */
int front_h1_from_client(conn *c, const uint8_t *d, size_t n);
void front_h1_release(conn *c);
int front_h1_upgrade_answer(conn *c);
/* front_accept.c */
void front_on_pause_over(h2o_timeout_entry_t *e);

#endif

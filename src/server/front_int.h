/*
 * front_int.h: what the front's files share (front.c: the guard's hooks,
 * the thread and metrics; front_accept.c: accepting and connection
 * budgets; front_conn.c: a connection's lifetime and timers;
 * front_relay.c: moving bytes between the client, the guard and h2o;
 * front_direct.c: h2o's writes to the client on sbxd's loop thread;
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

typedef struct front_link front_link;

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
	/* Plain text: h2o's writes may go to the client from sbxd's loop
	 * thread (front_direct.c).  The link's lock guards this connection
	 * against that thread; NULL on TLS listeners. */
	front_link *link;
	uint64_t inner_read; /* h2o's bytes read from the socketpair */
	int direct_rv;	     /* the guard's verdict on a direct write */
} conn;

/* What the front's thread hands the loop thread for a new connection. */
typedef struct front_handoff {
	int fd; /* h2o's end of the socketpair */
	front_link *link;
} front_handoff;

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
	uint64_t held_total; /* atomic: guards on both threads change it */
	h2o_timeout_t hdr_timeout, idle_timeout, close_timeout, pause_timeout;
	h2o_timeout_entry_t pause_entry;
	/* links with work the loop thread handed back (front_direct.c) */
	pthread_mutex_t kick_mu;
	front_link *kicked;
	int kick_fd;
	h2o_socket_t *kick_sock;
	/* metrics: written by the front's thread (BUMP), read by the main one */
	uint64_t accepted, goaway[SBX_H2G_R_COUNT], refused_total, refused_addr, refused_fd,
		rejected401, rejected503, out_direct, out_socketpair;
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
/* Bytes wait in b. */
static inline bool front_queued(const sbx_h2g_buf *b)
{
	return b->len > b->off;
}

/* front_relay.c */
bool front_can_write_direct(const conn *c);
int front_from_h2o(conn *c, const uint8_t *p, size_t n);
void front_flush(conn *c);
void front_taken(h2o_socket_t *sock);
void front_on_client_read(h2o_socket_t *sock, const char *err);
void front_on_inner_read(h2o_socket_t *sock, const char *err);
/* front_h1.c */
int front_h1_from_client(conn *c, const uint8_t *d, size_t n);
void front_h1_release(conn *c);
int front_h1_upgrade_answer(conn *c);
/* front_direct.c */
/* A link for c (refs: c's and the loop thread's); NULL when out of
 * memory: c's output then always crosses the socketpair. */
front_link *front_link_new(conn *c);
/* Every front-thread callback of a connection runs between these: they
 * hold the link (it outlives the conn while locked) and its lock. */
front_link *front_enter(conn *c);
void front_leave(front_link *l);
/* conn_free: the front lets go of the link (inside front_enter). */
void front_link_drop(conn *c);
void front_link_release(front_link *l);
/* Loop thread: h2o's end fd of a new connection, with the link the front
 * thread made for it (NULL: none). */
void front_direct_register(h2o_socket_t *sock, int fd, front_link *l);
int front_direct_init(void);
void front_on_kick(h2o_socket_t *sock, const char *err);
/* front_accept.c */
void front_on_pause_over(h2o_timeout_entry_t *e);

#endif

/*
 * front_conn.c: a front connection's lifetime: closing (h2o's side at
 * once, the client's after our last words, lingering so they are read),
 * the guard's decision to close, and the header and idle timers.
 */
#include <sys/socket.h>

#include "front_int.h"

static void conn_free(conn *c)
{
	if (h2o_timeout_is_linked(&c->hdr_entry))
		h2o_timeout_unlink(&c->hdr_entry);
	if (h2o_timeout_is_linked(&c->idle_entry))
		h2o_timeout_unlink(&c->idle_entry);
	if (h2o_timeout_is_linked(&c->close_entry))
		h2o_timeout_unlink(&c->close_entry);
	sbx_h2g_free(c->g);
	front_link_drop(c);
	F.n_lingering -= c->lingering;
	ADD(F.held_total, -c->h1_reserved);
	sbx_h2g_buf_free(&c->h1_up);
	sbx_h2g_buf_free(&c->h1_down);
	sbx_h2g_buf_free(&c->h1_hold);
	sbx_h2g_buf_free(&c->cw);
	sbx_h2g_buf_free(&c->iw);
	if (c->prev)
		c->prev->next = c->next;
	else
		F.conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	ADD(F.n_conns, (uint32_t)-1);
	free(c);
}

void front_close_inner(conn *c)
{
	if (c->inner) {
		h2o_socket_close(c->inner);
		c->inner = NULL;
	}
}

void front_close_all(conn *c)
{
	front_close_inner(c);
	if (c->client) {
		h2o_socket_close(c->client);
		c->client = NULL;
	}
	conn_free(c);
}

/* Everything is written: half-close and read (discarding) until the
 * client closes, the close timer fires or LINGER_MAX bytes were dropped
 * (a client that goes on sending after the GOAWAY).  Closing with the
 * client's bytes unread sends a TCP RST, which can make a client lose the
 * GOAWAY it has not read yet. */
static void on_linger_read(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	front_link *l = front_enter(c);
	c->lingered += sock->input->size;
	if (err || c->lingered > LINGER_MAX)
		front_close_all(c);
	else
		front_taken(sock);
	front_leave(l);
}

void front_linger(conn *c)
{
	if (c->lingering)
		return;
	/* Each lingering connection holds its descriptor for up to 1 s: a
	 * flood of shed connections must not use up the ones kept back for
	 * sessions and for others' new connections.  Past linger_max, close
	 * at once (the peer may then see a reset instead of our last words). */
	if (F.n_lingering >= F.linger_max) {
		front_close_all(c);
		return;
	}
	F.n_lingering++;
	c->lingering = true;
	c->closing = true;
	front_close_inner(c);
	front_arm_close(c);
	shutdown(h2o_socket_get_fd(c->client), SHUT_WR);
	h2o_socket_read_start(c->client, on_linger_read);
}

void front_arm_close(conn *c)
{
	if (!h2o_timeout_is_linked(&c->close_entry))
		h2o_timeout_link(F.loop, &F.close_timeout, &c->close_entry);
}

void front_on_close_timeout(h2o_timeout_entry_t *e)
{
	conn *c = H2O_STRUCT_FROM_MEMBER(conn, close_entry, e);
	front_link *l = front_enter(c);
	front_close_all(c);
	front_leave(l);
}

/* The connection ends: h2o's side at once (h2o frees everything), the
 * client's once what is queued for it (the GOAWAY last) is written, or
 * after 1 s if the client does not read. */
void front_begin_close(conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	front_close_inner(c);
	if (c->client)
		h2o_socket_read_stop(c->client);
	if (h2o_timeout_is_linked(&c->hdr_entry))
		h2o_timeout_unlink(&c->hdr_entry);
	if (h2o_timeout_is_linked(&c->idle_entry))
		h2o_timeout_unlink(&c->idle_entry);
	front_arm_close(c);
	front_flush(c);
}

/* The guard decided: count, log, close. */
void front_guard_closed(conn *c)
{
	uint32_t code = 0;
	sbx_h2g_reason why = sbx_h2g_reason_of(c->g, &code);
	BUMP(F.goaway[why]);
	sbx_srv_log(why == SBX_H2G_R_IDLE_TIMEOUT || why == SBX_H2G_R_EVICTED ? SRV_LOG_DEBUG
									      : SRV_LOG_WARN,
		    "event=guard_close peer=%s reason=%s goaway=0x%x", c->peer,
		    sbx_h2g_reason_names[why], code);
	front_begin_close(c);
}

sbx_h2g_buf *front_up_buf(conn *c)
{
	return c->g ? sbx_h2g_to_h2o(c->g) : &c->h1_up;
}

sbx_h2g_buf *front_down_buf(conn *c)
{
	return c->g ? sbx_h2g_to_client(c->g) : &c->h1_down;
}

/* Header and idle timers follow the guard's state after each event. */
void front_update_timers(conn *c)
{
	h2o_loop_t *loop = F.loop;
	bool hdr, idle;

	if (c->closing)
		return;
	if (c->mode == M_H2) {
		hdr = sbx_h2g_header_pending(c->g);
		idle = !hdr && sbx_h2g_open_streams(c->g) == 0;
	} else {
		hdr = c->mode == M_DETECT || c->h1_state == H1_HEAD;
		idle = false;
	}
	if (hdr && !h2o_timeout_is_linked(&c->hdr_entry))
		h2o_timeout_link(loop, &F.hdr_timeout, &c->hdr_entry);
	else if (!hdr && h2o_timeout_is_linked(&c->hdr_entry))
		h2o_timeout_unlink(&c->hdr_entry);
	if (idle && !h2o_timeout_is_linked(&c->idle_entry))
		h2o_timeout_link(loop, &F.idle_timeout, &c->idle_entry);
	else if (!idle && h2o_timeout_is_linked(&c->idle_entry))
		h2o_timeout_unlink(&c->idle_entry);
}

void front_timed_out(conn *c, uint32_t code, sbx_h2g_reason why)
{
	if (c->g) {
		sbx_h2g_goaway(c->g, code, why, sbx_h2g_reason_names[why]);
		front_guard_closed(c);
	} else {
		BUMP(F.goaway[why]);
		sbx_srv_log(SRV_LOG_WARN, "event=guard_close peer=%s reason=%s", c->peer,
			    sbx_h2g_reason_names[why]);
		front_begin_close(c);
	}
}

/* A timer's connection, under its lock (front_direct.c). */
static void timed_out_locked(conn *c, uint32_t code, sbx_h2g_reason why)
{
	front_link *l = front_enter(c);
	front_timed_out(c, code, why);
	front_leave(l);
}

void front_on_hdr_timeout(h2o_timeout_entry_t *e)
{
	timed_out_locked(H2O_STRUCT_FROM_MEMBER(conn, hdr_entry, e), SBX_H2G_CALM,
			 SBX_H2G_R_HEADER_TIMEOUT);
}

void front_on_idle_timeout(h2o_timeout_entry_t *e)
{
	timed_out_locked(H2O_STRUCT_FROM_MEMBER(conn, idle_entry, e), 0, SBX_H2G_R_IDLE_TIMEOUT);
}

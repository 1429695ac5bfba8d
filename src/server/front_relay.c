/*
 * front_relay.c: moving a connection's bytes: the client's through the
 * guard (or the HTTP/1.1 pipe) to h2o, h2o's back to the client, each
 * direction bounded (CAP) with reads paused past it (backpressure).
 */
#include <errno.h>
#include <sys/socket.h>

#include "front_int.h"

static void on_client_write(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	front_link *l = front_enter(c);
	c->cw.off = c->cw.len = 0;
	if (err)
		front_close_all(c);
	else
		front_flush(c);
	front_leave(l);
}

static void on_inner_write(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	front_link *l = front_enter(c);
	c->iw.off = c->iw.len = 0;
	if (err) {
		/* h2o stopped reading (an early answer, e.g. 413, then its
		 * close): write no more, but read what it said until its EOF */
		c->inner_wdead = true;
		front_arm_close(c);
	}
	front_flush(c);
	front_leave(l);
}

/* Plain text: write p (n bytes) to the client's socket as far as it
 * takes without waiting, bypassing h2o's socket (nothing is being written
 * through it: the caller checks); returns what was written.  The rest
 * goes through h2o_socket_write, which waits for the socket and sees its
 * errors. */
static size_t send_now(conn *c, const uint8_t *p, size_t n)
{
	int fd = h2o_socket_get_fd(c->client);
	size_t done = 0;
	while (done < n) {
		ssize_t w = send(fd, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		done += (size_t)w;
	}
	return done;
}

/* What the guard left in place (p, n bytes): written now; only what the
 * socket does not take is copied, into the client buffer (empty: the
 * guard leaves bytes in place only then). */
static void write_direct(conn *c, const uint8_t *p, size_t n)
{
	size_t w = send_now(c, p, n);
	sbx_h2g_buf_put(sbx_h2g_to_client(c->g), p + w, n - w);
}

static void client_write_cw(conn *c)
{
	h2o_iovec_t v = h2o_iovec_init(c->cw.data + c->cw.off, c->cw.len - c->cw.off);
	h2o_socket_write(c->client, &v, 1, on_client_write);
}

/* Move what is queued into the write buffers (a swap, no copy) and start
 * the writes; pause and resume the reads around CAP. */
void front_flush(conn *c)
{
	sbx_h2g_buf *up = front_up_buf(c), *down = front_down_buf(c);

	if (c->inner_wdead)
		up->off = up->len = 0;
	if (c->inner && !c->closing && !c->inner_wdead && c->iw.len == 0 && front_queued(up)) {
		sbx_h2g_buf t = c->iw;
		c->iw = *up;
		*up = t;
		h2o_iovec_t v = h2o_iovec_init(c->iw.data + c->iw.off, c->iw.len - c->iw.off);
		h2o_socket_write(c->inner, &v, 1, on_inner_write);
	}
	bool hold = c->mode == M_H1 && c->h1_state == H1_UPGRADE;
	if (c->client && !hold && c->cw.len == 0 && front_queued(down)) {
		/* plain text: as much as the socket takes now, without h2o */
		if (!F.ssl_ctx)
			sbx_h2g_buf_consume(
				down, send_now(c, down->data + down->off, down->len - down->off));
	}
	if (c->client && !hold && c->cw.len == 0 && front_queued(down)) {
		sbx_h2g_buf t = c->cw;
		c->cw = *down;
		*down = t;
		client_write_cw(c);
	}
	if (c->client && c->cw.len == 0 && !front_queued(down) && (c->closing || !c->inner)) {
		front_linger(c); /* everything said */
		return;
	}
	if (c->closing)
		return;
	size_t upq = up->len - up->off, downq = down->len - down->off;
	/* The client's input waits while h2o is backed up, and while the
	 * client does not read what it made us say (401s, credits, relays). */
	bool full = upq >= CAP || downq >= 2 * CAP;
	if (c->client && !c->client_paused && full) {
		h2o_socket_read_stop(c->client);
		c->client_paused = true;
	} else if (c->client && c->client_paused && !full) {
		c->client_paused = false;
		h2o_socket_read_start(c->client, front_on_client_read);
	}
	if (c->inner && !c->inner_paused && downq >= CAP) {
		h2o_socket_read_stop(c->inner);
		c->inner_paused = true;
	} else if (c->inner && c->inner_paused && downq < CAP) {
		c->inner_paused = false;
		h2o_socket_read_start(c->inner, front_on_inner_read);
	}
}

/* ---- reading ---- */

/* Everything read was taken: empty the socket's buffer but keep its memory
 * (h2o_buffer_consume frees a drained buffer; at one read per event that
 * is a malloc and a free, often an mmap and munmap, per read). */
void front_taken(h2o_socket_t *sock)
{
	if (sock->input->bytes) {
		sock->input->bytes = sock->input->_buf;
		sock->input->size = 0;
	}
}

static void client_read(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;
	const uint8_t *d = (const uint8_t *)sock->input->bytes;
	size_t n = sock->input->size;

	if (err) {
		front_close_all(c);
		return;
	}
	c->last_ms = sbx_srv_now_ms();
	if (c->mode == M_DETECT) {
		int m = sbx_h2g_preface_match(d, n);
		if (m == 0)
			return;
		c->mode = m > 0 ? M_H2 : M_H1;
		if (c->mode == M_H2 && front_new_guard(c) != 0) {
			front_close_all(c);
			return;
		}
	}
	if (c->mode == M_H2) {
		int rv = sbx_h2g_from_client(c->g, d, n, c->last_ms);
		front_taken(sock);
		front_guard_counts(c);
		if (rv != SBX_H2G_OK) {
			front_guard_closed(c);
			return;
		}
	} else {
		int rv = front_h1_from_client(c, d, n);
		front_taken(sock);
		if (rv != 0) {
			if (rv < 0) {
				BUMP(F.goaway[SBX_H2G_R_PROTOCOL]);
				sbx_srv_log(SRV_LOG_WARN, "event=guard_close peer=%s reason=http1",
					    c->peer);
				c->h1_down.off = c->h1_down.len = 0;
			}
			c->h1_up.off = c->h1_up.len = 0;
			front_begin_close(c);
			return;
		}
	}
	front_update_timers(c);
	front_flush(c);
}

void front_on_client_read(h2o_socket_t *sock, const char *err)
{
	front_link *l = front_enter(sock->data);
	client_read(sock, err);
	front_leave(l);
}

/* h2o's bytes may go from the read buffer straight to the client's
 * socket: plain text (TLS copies anyway, into its records), HTTP/2, and
 * nothing of ours being written to it (that would go first). */
bool front_can_write_direct(const conn *c)
{
	return !F.ssl_ctx && c->client && c->g && !c->closing && c->cw.len == 0;
}

/* h2o's bytes through the guard toward the client. */
int front_from_h2o(conn *c, const uint8_t *p, size_t n)
{
	uint64_t now = sbx_srv_now_ms();
	if (!front_can_write_direct(c))
		return sbx_h2g_from_server(c->g, p, n, now);
	size_t off = 0, len = 0;
	int rv = sbx_h2g_from_server_span(c->g, p, n, now, &off, &len);
	write_direct(c, p + off, len);
	return rv;
}

static void inner_read(h2o_socket_t *sock, const char *err)
{
	conn *c = sock->data;

	c->inner_read += sock->input->size;
	ADD(F.out_socketpair, sock->input->size);
	/* h2o's last bytes may come with its close: relay them first */
	if (sock->input->size > 0) {
		if (c->g) {
			int rv = front_from_h2o(c, (const uint8_t *)sock->input->bytes,
						sock->input->size);
			front_taken(sock);
			if (rv != SBX_H2G_OK) {
				front_guard_closed(c);
				return;
			}
		} else {
			sbx_h2g_buf_put(&c->h1_down, sock->input->bytes, sock->input->size);
			front_taken(sock);
			front_h1_release(c);
			if (c->h1_state == H1_UPGRADE && front_h1_upgrade_answer(c) != SBX_H2G_OK) {
				if (c->g)
					front_guard_closed(c);
				else
					front_begin_close(c);
				return;
			}
		}
	}
	if (err) {
		/* h2o closed its end: say what it said, then close */
		front_close_inner(c);
		if (!c->closing) {
			c->closing = true;
			if (c->client)
				h2o_socket_read_stop(c->client);
			front_arm_close(c);
		}
		front_flush(c);
		return;
	}
	front_update_timers(c);
	front_flush(c);
}

void front_on_inner_read(h2o_socket_t *sock, const char *err)
{
	front_link *l = front_enter(sock->data);
	inner_read(sock, err);
	front_leave(l);
}

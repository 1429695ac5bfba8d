/*
 * filesend.c: GET /v1/sessions/{id}/files/{path}, streamed.
 *
 * The file is opened beneath the work dir by the core (sbx_file_open: the
 * same resolution rules as get_bytes) and sent in 256 KiB chunks, the next
 * one read only when h2o asks for it (the client took the last): memory
 * per download stays one chunk whatever the file's size, and a slow client
 * slows the reads instead of filling sbxd.  The size announced is the
 * size at open; a file that shrinks meanwhile ends the stream in error
 * rather than in a short body that looks whole.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "server.h"

#define CHUNK (256 * 1024)

struct file_gen {
	h2o_generator_t super;
	int fd;
	uint64_t left;
	char buf[CHUNK];
};

static void send_next(struct file_gen *g, h2o_req_t *req)
{
	size_t want = g->left < CHUNK ? (size_t)g->left : CHUNK;
	ssize_t n;

	while ((n = read(g->fd, g->buf, want)) < 0 && errno == EINTR)
		;
	if (n <= 0) {
		sbx_srv_log(SRV_LOG_ERROR, "event=file_get err=\"%s\" left=%" PRIu64,
			    n < 0 ? "read failed" : "the file shrank while it was sent", g->left);
		h2o_send(req, NULL, 0, H2O_SEND_STATE_ERROR);
		return;
	}
	g->left -= (uint64_t)n;
	h2o_iovec_t v = h2o_iovec_init(g->buf, (size_t)n);
	h2o_send(req, &v, 1, g->left ? H2O_SEND_STATE_IN_PROGRESS : H2O_SEND_STATE_FINAL);
}

static void on_proceed(h2o_generator_t *self, h2o_req_t *req)
{
	send_next((struct file_gen *)self, req);
}

static void on_stop(h2o_generator_t *self, h2o_req_t *req)
{
	(void)self;
	(void)req;
}

static void on_dispose(void *p)
{
	struct file_gen *g = p;
	if (g->fd >= 0)
		close(g->fd);
}

void sbx_srv_send_file(h2o_req_t *req, int fd, uint64_t size)
{
	struct file_gen *g = h2o_mem_alloc_shared(&req->pool, sizeof(*g), on_dispose);

	g->super.proceed = on_proceed;
	g->super.stop = on_stop;
	g->fd = fd;
	g->left = size;
	req->res.status = 200;
	req->res.reason = "OK";
	req->res.content_length = size;
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
		       H2O_STRLIT("application/octet-stream"));
	h2o_start_response(req, &g->super);
	if (!size) {
		h2o_send(req, NULL, 0, H2O_SEND_STATE_FINAL);
		return;
	}
	send_next(g, req);
}

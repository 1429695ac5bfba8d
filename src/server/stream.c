/*
 * stream.c: one run streamed as the response of POST .../runs.
 *
 * The Lua layer hands over a table { start = fn, finish = fn, backend = }.
 * The response starts at once (status 200, event content type), but the
 * run itself starts from a 0 ms timer: frames that arrived in the same
 * read as the request (a RST_STREAM right behind the HEADERS, as in a
 * rapid-reset flood) are processed first, and a stream reset before the
 * timer fires never starts a sandbox process.
 *
 * The run's stdout, stderr and status fds are watched on the evloop
 * (dup'ed fds in H2O_SOCKET_FLAG_DONT_READ sockets: h2o only says they are
 * readable; the core's sbx_run_next(timeout 0) does the reading, the
 * stdin feeding and the status parsing).  Events are appended to a pending
 * buffer; one h2o_send is in flight at a time, and when the pending buffer
 * passes SRV_STREAM_CAP the pipes are no longer read (the process blocks
 * on a full pipe) until proceed() says the client took the last chunk.
 * A slow 100 ms tick covers stdin feeding and anything the fd watch misses,
 * and reads a detached run's output while it has no client (pump).
 *
 * If the client goes away (stream reset, connection closed), h2o calls
 * stop(): the run is killed at once and everything is released before the
 * request's pool goes.  Nothing is sent after stop() or after the final
 * chunk.
 *
 * Detached runs (the request said detach = true) are kept when the client
 * goes: the record goes on reading the pipes into its buffer without a
 * client (req is the client attached now, or NULL) and lives on the heap,
 * apart from any request, in runs_registry.c, which re-attaches it.
 *
 * The events themselves ({ type = "stdout"|"stderr", data } per chunk,
 * then one "exit" or one "error") are encoded by stream_encode.c.
 */
#define _GNU_SOURCE /* F_SETPIPE_SZ */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "../lua/lsbx.h"
#include "stream_int.h"

/* The run's stdout/stderr pipes grow from 64 KiB to this: the process
 * writes more before it blocks, so the loop and the process wake each
 * other less per MiB streamed (best effort: pipe-max-size may refuse). */
#define SRV_PIPE_SZ (256 * 1024)

/* The most read from stdout at once, straight into the pending buffer. */
#define SRV_READ_MAX SRV_PIPE_SZ

static sbx_srv_run *live_runs;

static void watch_close(h2o_socket_t **w)
{
	if (*w) {
		h2o_socket_read_stop(*w);
		(*w)->data = NULL;
		h2o_socket_close(*w);
		*w = NULL;
	}
}

/* Call the Lua finish(outcome) and drop every reference; the run is freed. */
void sbx_srv_stream_release(sbx_srv_run *sr, const char *outcome)
{
	lua_State *L = sr->S->L;

	if (!sr->started && sr->spec_ref != LUA_NOREF && !strcmp(outcome, "disconnected"))
		sbx_srv_m.resets_before_start++;
	if (h2o_timeout_is_linked(&sr->start_entry))
		h2o_timeout_unlink(&sr->start_entry);
	if (h2o_timeout_is_linked(&sr->tick_entry))
		h2o_timeout_unlink(&sr->tick_entry);
	watch_close(&sr->w_out);
	watch_close(&sr->w_err);
	watch_close(&sr->w_status);
	if (sr->run_ref != LUA_NOREF) {
		/* r:close(): kills the run if it still goes, frees it. */
		lua_rawgeti(L, LUA_REGISTRYINDEX, sr->run_ref);
		lua_getfield(L, -1, "close");
		lua_insert(L, -2);
		sbx_srv_pcall(L, 1, 0, "run_close");
		luaL_unref(L, LUA_REGISTRYINDEX, sr->run_ref);
		sr->run_ref = LUA_NOREF;
		sr->run = NULL;
	}
	if (sr->spec_ref != LUA_NOREF) {
		lua_rawgeti(L, LUA_REGISTRYINDEX, sr->spec_ref);
		lua_getfield(L, -1, "finish");
		if (lua_isfunction(L, -1)) {
			lua_pushstring(L, outcome);
			sbx_srv_pcall(L, 1, 0, "finish");
		} else {
			lua_pop(L, 1);
		}
		lua_pop(L, 1);
		luaL_unref(L, LUA_REGISTRYINDEX, sr->spec_ref);
		sr->spec_ref = LUA_NOREF;
	}
	if (sr->detach && !sr->ended_ms)
		sr->ended_ms = sbx_srv_now_ms();
	if (sr->started) {
		double secs = (double)(sbx_srv_now_ms() - sr->t0) / 1000.0;
		sbx_srv_metrics_run(outcome, secs);
		sr->S->active_runs--;
		sbx_srv_log(SRV_LOG_INFO, "event=run_end session=%s outcome=%s ms=%lu", sr->sid,
			    outcome, (unsigned long)(sbx_srv_now_ms() - sr->t0));
		sr->started = false;
	}
	if (sr->prev)
		sr->prev->next = sr->next;
	else if (live_runs == sr)
		live_runs = sr->next;
	if (sr->next)
		sr->next->prev = sr->prev;
	sr->next = sr->prev = NULL;
}

static void flush(sbx_srv_run *sr)
{
	h2o_iovec_t iov;

	if (sr->sending || sr->stopped || sr->final_sent || !sr->req)
		return;
	if (sr->pending.len == 0 && !sr->final)
		return;
	/* swap pending and inflight */
	sbx_srv_buf t = sr->inflight;
	sr->inflight = sr->pending;
	sr->pending = t;
	sr->pending.len = 0;
	sr->n_ev = 0;
	iov = h2o_iovec_init(sr->inflight.data, sr->inflight.len);
	sr->sending = true;
	if (sr->final) {
		/* Nothing of ours may outlive the final send: the request may go with it. */
		sr->final_sent = true;
		free(sr->pending.data);
		sr->pending = (sbx_srv_buf){0};
		h2o_send(sr->req, &iov, iov.len ? 1 : 0, H2O_SEND_STATE_FINAL);
		return;
	}
	h2o_send(sr->req, &iov, 1, H2O_SEND_STATE_IN_PROGRESS);
}

static void watch_update(sbx_srv_run *sr, bool want);

/* The most pieces of output one pump takes.  A run with no client to slow
 * it (detached, absent) writing as fast as it can keeps its pipe full:
 * read while it came, the loop never got back to anyone else (/healthz
 * went unanswered).  What is left stays readable for the next pump.  Such
 * a run's output is read on the 100 ms tick only (its fd watch is off):
 * at most PUMP_MAX_PIECES reads a tick, most of it dropped anyway, so it
 * writes into a full pipe and waits instead of costing sbxd a core. */
#define PUMP_MAX_PIECES 16

/* Read the run's output now?  An absent client's buffer drops its oldest
 * events instead, so always.  With a client, not past the cap, and not
 * while a chunk is in flight: the output waits in the pipe and the next
 * read takes all of it at once (on_proceed pumps), which costs nothing in
 * latency (nothing could be sent before then anyway). */
static bool want_output(const sbx_srv_run *sr)
{
	return !sr->req || (sr->pending.len < SRV_STREAM_CAP && !sr->sending);
}

/* Read what the run has, queue events, flush. */
static void pump(sbx_srv_run *sr)
{
	sbx_err err;
	sbx_event ev;

	if (sr->stopped || sr->final || !sr->run || sr->in_pump)
		return;
	sr->in_pump = true;
	bool drained = false;
	for (int pieces = 0; pieces < PUMP_MAX_PIECES; pieces++) {
		bool want = want_output(sr);
		/* stdout straight into the pending buffer (one read drains a
		 * full pipe); its end, stderr and the status go through
		 * sbx_run_next as before.  A short read emptied the pipe: with
		 * a client, what the run writes next waits for the next pump,
		 * so it is read in one piece.  Reading on would take each of
		 * the writer's writes (8 KiB for head) as it lands, the two
		 * cores trading pieces through the pipe's lock. */
		if (want && !drained) {
			size_t n = sbx_srv_ev_read(sr, 1, SRV_READ_MAX);
			if (n == SRV_READ_MAX || (n > 0 && !sr->req))
				continue;
			drained = n > 0;
		}
		if (sbx_run_next(sr->run, 0, want && !drained, want, &ev, &err) != 0) {
			sbx_srv_ev_error(sr, "SandboxExecutionError", err.msg);
			sr->final = true;
			sbx_srv_stream_release(sr, "error");
			break;
		}
		if (ev.type == SBX_EV_NONE)
			break;
		if (ev.type == SBX_EV_STDOUT || ev.type == SBX_EV_STDERR) {
			sbx_srv_ev_data(sr, ev.type == SBX_EV_STDOUT ? "stdout" : "stderr", ev.data,
					ev.len);
			continue;
		}
		/* EXIT */
		const sbx_run_result *res = sbx_run_result_get(sr->run);
		const char *outcome = sbx_term_name(res->term);
		if (res->term == SBX_TERM_ERROR) {
			char msg[300];
			snprintf(msg, sizeof(msg), "%s",
				 res->error[0] ? res->error : "the sandbox lost the run");
			/* A wrong cwd is the caller's: the core says so in error_kind. */
			sbx_srv_ev_error(sr,
					 sbx_err_kind_name(res->error_kind == SBX_E_INVALID_ARGUMENT
								   ? SBX_E_INVALID_ARGUMENT
								   : SBX_E_EXECUTION),
					 msg);
		} else {
			sbx_srv_ev_exit(sr, res);
		}
		sr->final = true;
		sbx_srv_stream_release(sr, outcome);
		break;
	}
	/* What is pending is sent next (flush), so it is in flight then. */
	if (!sr->final)
		watch_update(sr, sr->req && want_output(sr) && sr->pending.len == 0);
	sr->in_pump = false;
	flush(sr);
}

static void on_ready(h2o_socket_t *sock, const char *err)
{
	sbx_srv_run *sr = sock->data;
	(void)err;
	if (sr)
		pump(sr);
}

static h2o_socket_t *watch_open(sbx_srv_run *sr, int fd, bool output)
{
	int d;
	h2o_socket_t *sock;

	if (fd < 0 || (d = fcntl(fd, F_DUPFD_CLOEXEC, 3)) < 0)
		return NULL;
	if (output)
		(void)fcntl(d, F_SETPIPE_SZ, SRV_PIPE_SZ);
	sock = h2o_evloop_socket_create(sr->S->ctx.loop, d, H2O_SOCKET_FLAG_DONT_READ);
	sock->data = sr;
	h2o_socket_read_start(sock, on_ready);
	return sock;
}

/* Close watches of fds the core closed; stop/start output watches for backpressure. */
static void watch_update(sbx_srv_run *sr, bool want)
{
	if (!sr->run)
		return;
	if (sr->w_out && sbx_run_stdout_fd(sr->run) < 0)
		watch_close(&sr->w_out);
	if (sr->w_err && sbx_run_stderr_fd(sr->run) < 0)
		watch_close(&sr->w_err);
	if (sr->w_status && sbx_run_status_fd(sr->run) < 0)
		watch_close(&sr->w_status);
	h2o_socket_t *outs[2] = {sr->w_out, sr->w_err};
	for (int i = 0; i < 2; i++) {
		if (!outs[i])
			continue;
		if (want && !h2o_socket_is_reading(outs[i]))
			h2o_socket_read_start(outs[i], on_ready);
		else if (!want && h2o_socket_is_reading(outs[i]))
			h2o_socket_read_stop(outs[i]);
	}
}

static void on_tick(h2o_timeout_entry_t *e)
{
	sbx_srv_run *sr = H2O_STRUCT_FROM_MEMBER(sbx_srv_run, tick_entry, e);
	if (sr->stopped || sr->final)
		return;
	h2o_timeout_link(sr->S->ctx.loop, &sr->S->tick_timeout, &sr->tick_entry);
	pump(sr);
}

static void on_start(h2o_timeout_entry_t *e)
{
	sbx_srv_run *sr = H2O_STRUCT_FROM_MEMBER(sbx_srv_run, start_entry, e);
	lua_State *L = sr->S->L;
	int top = lua_gettop(L);

	if (sr->stopped)
		return;
	lua_rawgeti(L, LUA_REGISTRYINDEX, sr->spec_ref);
	lua_getfield(L, -1, "start");
	int st = lsbx_pcall(L, 0, 2, 0);
	if (st != 0 || !lua_isuserdata(L, -2)) {
		/* start() returns run, or nil and an error table { kind, message }. */
		const char *kind = "SandboxExecutionError", *msg = "the run did not start";
		if (lua_istable(L, -1)) {
			lua_getfield(L, -1, "kind");
			if (lua_isstring(L, -1))
				kind = lua_tostring(L, -1);
			lua_getfield(L, -2, "message");
			if (lua_isstring(L, -1))
				msg = lua_tostring(L, -1);
		} else if (st != 0) {
			sbx_srv_log_lua_error(L, "start");
			msg = "internal error starting the run";
		}
		sbx_srv_ev_error(sr, kind, msg);
		lua_settop(L, top);
		sr->final = true;
		sbx_srv_stream_release(sr, "error");
		flush(sr);
		return;
	}
	/* NULL only once r:close() ran, which only we do while streaming. */
	sr->run = lsbx_run_ptr(L, -2);
	lua_pushvalue(L, -2);
	sr->run_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_settop(L, top);
	sr->started = true;
	sr->S->active_runs++;
	sbx_srv_m.runs_started++;
	sbx_srv_log(SRV_LOG_INFO, "event=run_start session=%s", sr->sid);
	sr->w_out = watch_open(sr, sbx_run_stdout_fd(sr->run), true);
	sr->w_err = watch_open(sr, sbx_run_stderr_fd(sr->run), true);
	sr->w_status = watch_open(sr, sbx_run_status_fd(sr->run), false);
	h2o_timeout_link(sr->S->ctx.loop, &sr->S->tick_timeout, &sr->tick_entry);
	pump(sr);
}

static void on_proceed(h2o_generator_t *gen, h2o_req_t *req)
{
	sbx_srv_run *sr = (sbx_srv_run *)gen;
	(void)req;
	sr->sending = false;
	if (sr->stopped || sr->final_sent)
		return;
	sr->inflight.len = 0;
	if (sr->final)
		flush(sr); /* the final chunk waited for this one */
	else
		pump(sr);
}

/*
 * The attached client is gone (stream reset, connection closed, or the
 * request done).  A run that is not detached (or has not started yet)
 * is killed and its record freed; a detached one goes on without a
 * client.  A record whose final event was sent is freed.
 */
static void client_gone(sbx_srv_run *sr, bool reset)
{
	if (sr->owner) {
		*sr->owner = NULL;
		sr->owner = NULL;
	}
	sr->req = NULL;
	sr->sending = false;
	if (sr->final_sent) {
		sbx_srv_runs_free(sr);
		return;
	}
	if (!sr->detach || (!sr->started && !sr->final)) {
		if (!sr->stopped) {
			sr->stopped = true;
			if (reset)
				sbx_srv_log(SRV_LOG_INFO,
					    "event=run_stop session=%s msg=\"client went away\"",
					    sr->sid);
			sbx_srv_stream_release(sr, "disconnected");
		}
		sbx_srv_runs_free(sr);
		return;
	}
	/* What was in flight to the departed client is lost with it. */
	sr->inflight.len = 0;
	sbx_srv_log(SRV_LOG_INFO, "event=run_detached session=%s run=%s", sr->sid, sr->run_id);
	if (!sr->final) {
		sbx_srv_runs_drop_oldest(sr);
		watch_update(sr, false); /* the tick reads it now (pump) */
	}
}

static void on_stop(h2o_generator_t *gen, h2o_req_t *req)
{
	sbx_srv_run *sr = (sbx_srv_run *)gen;
	(void)req;
	client_gone(sr, true);
}

/* pool destructor: the request is going. */
static void on_dispose(void *p)
{
	sbx_srv_run *sr = *(sbx_srv_run **)p;
	if (sr)
		client_gone(sr, false);
}

void sbx_srv_stream_headers(sbx_srv_run *sr, h2o_req_t *req)
{
	req->res.status = 200;
	req->res.reason = "OK";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
		       sr->fmt == SRV_FMT_MSGPACK ? "application/msgpack" : "application/x-ndjson",
		       sr->fmt == SRV_FMT_MSGPACK ? strlen("application/msgpack")
						  : strlen("application/x-ndjson"));
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
		       H2O_STRLIT("no-store"));
	if (sr->run_id[0])
		h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-sbx-run-id"), 0,
				      NULL, h2o_strdup(&req->pool, sr->run_id, 32).base, 32);
	h2o_start_response(req, &sr->gen);
}

/* Make sr the generator of req; its pool's destructor tells us when it goes. */
void sbx_srv_stream_attach_req(sbx_srv_run *sr, h2o_req_t *req)
{
	sbx_srv_run **owner = h2o_mem_alloc_shared(&req->pool, sizeof(*owner), on_dispose);
	*owner = sr;
	sr->owner = owner;
	sr->req = req;
}

void sbx_srv_stream_begin(sbx_srv *S, h2o_req_t *req, int idx, sbx_srv_fmt fmt, const char *sid)
{
	lua_State *L = S->L;
	sbx_srv_run *sr = calloc(1, sizeof(*sr));

	if (!sr) {
		sbx_srv_send_error(req, 503, "SandboxExecutionError", "out of memory", fmt);
		return;
	}
	lua_getfield(L, idx, "detach");
	sr->detach = lua_toboolean(L, -1);
	lua_pop(L, 1);
	/* An interactive run is named by the Lua layer (its control routes
	 * find it by that id); a detached one keeps the same id. */
	lua_getfield(L, idx, "run_id");
	if (lua_isstring(L, -1) && lua_objlen(L, -1) == 32)
		memcpy(sr->run_id, lua_tostring(L, -1), 33);
	lua_pop(L, 1);
	if (sr->detach && !sbx_srv_runs_keep(sr)) {
		/* Lua counted the run: give it back. */
		lua_getfield(L, idx, "finish");
		if (lua_isfunction(L, -1)) {
			lua_pushstring(L, "error");
			sbx_srv_pcall(L, 1, 0, "finish");
		} else {
			lua_pop(L, 1);
		}
		free(sr);
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_RETRY_AFTER, NULL,
			       H2O_STRLIT("5"));
		sbx_srv_send_error(req, 429, "TooManyRequests",
				   "too many detached runs kept on this server", fmt);
		return;
	}
	sr->gen.proceed = on_proceed;
	sr->gen.stop = on_stop;
	sr->req = req;
	sr->S = S;
	sr->fmt = fmt;
	sr->run_ref = LUA_NOREF;
	sr->t0 = sbx_srv_now_ms();
	snprintf(sr->sid, sizeof(sr->sid), "%s", sid);
	lua_getfield(L, idx, "backend");
	snprintf(sr->backend, sizeof(sr->backend), "%s",
		 lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
	lua_pop(L, 1);
	lua_pushvalue(L, idx);
	sr->spec_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	sr->start_entry.cb = on_start;
	sr->tick_entry.cb = on_tick;
	sbx_srv_stream_attach_req(sr, req);
	sr->next = live_runs;
	if (live_runs)
		live_runs->prev = sr;
	live_runs = sr;
	if (sr->run_id[0]) {
		sbx_srv_ev_run_id(sr);
		sbx_srv_log(SRV_LOG_INFO, "event=run_detachable session=%s run=%s", sr->sid,
			    sr->run_id);
	}
	sbx_srv_stream_headers(sr, req);
	h2o_timeout_link(S->ctx.loop, &S->zero_timeout, &sr->start_entry);
	/* Send the headers now: a client learns at once that the run was
	 * accepted (a quiet command would otherwise keep it waiting). */
	sr->sending = true;
	h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS);
}

void sbx_srv_stream_kill_all(sbx_srv *S)
{
	(void)S;
	for (sbx_srv_run *sr = live_runs; sr; sr = sr->next)
		if (sr->run)
			sbx_run_kill(sr->run, SIGKILL, NULL);
}

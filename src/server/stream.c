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
 * A slow 100 ms tick covers stdin feeding and anything the fd watch misses.
 *
 * If the client goes away (stream reset, connection closed), h2o calls
 * stop(): the run is killed at once and everything is released before the
 * request's pool goes.  Nothing is sent after stop() or after the final
 * chunk.
 *
 * Detached runs (the request said detach = true) are kept when the client
 * goes: the stream gets a run id (128 random bits; the x-sbx-run-id header
 * and a first { type = "run", run_id } event), goes on reading the pipes
 * into its buffer (at most SRV_DETACH_CAP bytes of events, the oldest
 * dropped; the next client gets a { type = "dropped", events, bytes }
 * marker first) and can be re-attached by GET .../runs/{run_id}: buffered
 * events, then live ones and the exit event.  A record ends when its final
 * event reached a client, or SRV_KEEP_MS after the run ended unread.  So a
 * record lives on the heap, apart from any request: req is the client
 * attached now, or NULL.
 *
 * Events: { type = "stdout"|"stderr", data = bytes } per chunk, then one
 * { type = "exit", returncode, runtime_ms, backend, termination_reason,
 * signal } or one { type = "error", kind, message, reason }.  msgpack: one
 * map per event, data as bin.  JSON: one object per line (NDJSON), data as
 * a string when it is UTF-8, else data_b64 (base64).
 */
#define _GNU_SOURCE /* F_SETPIPE_SZ */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <jansson.h>
#include <lauxlib.h>
#include <msgpack.h>

#include "../lua/lsbx.h"
#include "server.h"

#define SRV_STREAM_CAP (256 * 1024)
/* The run's stdout/stderr pipes grow from 64 KiB to this: the process
 * writes more before it blocks, so the loop and the process wake each
 * other less per MiB streamed (best effort: pipe-max-size may refuse). */
#define SRV_PIPE_SZ (256 * 1024)
#define SRV_DETACH_CAP (1024 * 1024) /* events kept for an absent client */
#define SRV_KEEP_MS (300 * 1000)     /* an ended, unread detached run */
#define SRV_KEEP_MAX 256	     /* detached records at once */

typedef struct sbx_srv_buf {
	char *data;
	size_t len, cap;
} sbx_srv_buf;

typedef struct sbx_srv_run {
	h2o_generator_t gen; /* first: h2o hands it back to us */
	h2o_req_t *req;
	sbx_srv *S;
	sbx_srv_fmt fmt;
	sbx_run *run; /* borrowed from the Lua userdata */
	int spec_ref; /* the Lua table { start, finish, ... } */
	int run_ref;  /* the run userdata */
	h2o_socket_t *w_out, *w_err, *w_status;
	h2o_timeout_entry_t start_entry, tick_entry;
	sbx_srv_buf pending, inflight;
	bool sending, stopped, final, final_sent, started, in_pump;
	uint64_t t0;
	char backend[32];
	char sid[40];
	struct sbx_srv_run *next, *prev; /* all live streams */
	/* the client now attached: its pool's pointer to us (cleared when it goes) */
	struct sbx_srv_run **owner;
	/* detach = true */
	bool detach;
	char run_id[33];
	uint32_t *ev_len; /* lengths of the events in pending, oldest first */
	size_t n_ev, cap_ev;
	uint64_t dropped_events, dropped_bytes;
	uint64_t ended_ms;		   /* when the run ended (0: still going) */
	struct sbx_srv_run *knext, *kprev; /* all detached records */
} sbx_srv_run;

static sbx_srv_run *live_runs;
static sbx_srv_run *kept_runs;
static size_t n_kept;

static void buf_append(sbx_srv_buf *b, const void *data, size_t len)
{
	if (b->len + len > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len)
			cap *= 2;
		char *n = realloc(b->data, cap);
		if (!n)
			return; /* dropping output beats crashing; cannot happen at these sizes */
		b->data = n;
		b->cap = cap;
	}
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const char *in, size_t len)
{
	char *out = malloc((len + 2) / 3 * 4 + 1), *p = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)(unsigned char)in[i + 1] << 8;
		if (i + 2 < len)
			v |= (unsigned char)in[i + 2];
		*p++ = b64chars[(v >> 18) & 63];
		*p++ = b64chars[(v >> 12) & 63];
		*p++ = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
		*p++ = i + 2 < len ? b64chars[v & 63] : '=';
	}
	*p = '\0';
	return out;
}

/* Drop the oldest events of an absent client's buffer beyond the cap. */
static void drop_oldest(sbx_srv_run *sr)
{
	size_t off = 0, k = 0;

	while (sr->pending.len - off > SRV_DETACH_CAP && k + 1 < sr->n_ev) {
		off += sr->ev_len[k++];
		sr->dropped_events++;
	}
	if (k == 0)
		return;
	sr->dropped_bytes += off;
	memmove(sr->pending.data, sr->pending.data + off, sr->pending.len - off);
	sr->pending.len -= off;
	memmove(sr->ev_len, sr->ev_len + k, (sr->n_ev - k) * sizeof(*sr->ev_len));
	sr->n_ev -= k;
}

/* Queue one encoded event. */
static void push_event(sbx_srv_run *sr, const void *data, size_t len)
{
	buf_append(&sr->pending, data, len);
	if (!sr->detach)
		return;
	if (sr->n_ev == sr->cap_ev) {
		size_t cap = sr->cap_ev ? sr->cap_ev * 2 : 64;
		uint32_t *n = realloc(sr->ev_len, cap * sizeof(*n));
		if (!n)
			return;
		sr->ev_len = n;
		sr->cap_ev = cap;
	}
	sr->ev_len[sr->n_ev++] = (uint32_t)len;
	if (!sr->req)
		drop_oldest(sr);
}

static void json_event(sbx_srv_run *sr, json_t *ev)
{
	char *s = json_dumps(ev, JSON_COMPACT);
	json_decref(ev);
	if (!s)
		return;
	size_t n = strlen(s);
	char *line = malloc(n + 1);
	if (line) {
		memcpy(line, s, n);
		line[n] = '\n';
		push_event(sr, line, n + 1);
		free(line);
	}
	free(s);
}

static void mp_key(msgpack_packer *pk, const char *k)
{
	size_t n = strlen(k);
	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, k, n);
}

static void mp_str(msgpack_packer *pk, const char *k, const char *v)
{
	mp_key(pk, k);
	mp_key(pk, v);
}

/* One field of a control event: a string, or (str NULL) an integer. */
typedef struct ev_field {
	const char *key;
	const char *str;
	int64_t num;
} ev_field;

/* Append one event made of fields to out, as a JSON line or a msgpack map:
 * every control event (exit, error, run, dropped) is encoded here, so both
 * formats always carry the same fields. */
static void encode_fields(int fmt, const ev_field *f, size_t n, sbx_srv_buf *out)
{
	if (fmt == SRV_FMT_JSON) {
		json_t *ev = json_object();
		for (size_t i = 0; i < n; i++)
			json_object_set_new(ev, f[i].key,
					    f[i].str ? json_string(f[i].str)
						     : json_integer((json_int_t)f[i].num));
		char *js = json_dumps(ev, JSON_COMPACT);
		json_decref(ev);
		if (js) {
			buf_append(out, js, strlen(js));
			buf_append(out, "\n", 1);
			free(js);
		}
		return;
	}
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, n);
	for (size_t i = 0; i < n; i++) {
		if (f[i].str) {
			mp_str(&pk, f[i].key, f[i].str);
		} else {
			mp_key(&pk, f[i].key);
			msgpack_pack_int64(&pk, f[i].num);
		}
	}
	buf_append(out, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
}

/* Queue one control event. */
static void emit_fields(sbx_srv_run *sr, const ev_field *f, size_t n)
{
	sbx_srv_buf b = {0};
	encode_fields(sr->fmt, f, n, &b);
	if (b.len)
		push_event(sr, b.data, b.len);
	free(b.data);
}

static void emit_data(sbx_srv_run *sr, const char *type, const char *data, size_t len)
{
	sbx_srv_m.bytes_streamed += len;
	if (sr->fmt == SRV_FMT_JSON) {
		json_t *ev = json_object();
		json_t *s = json_stringn(data, len);
		json_object_set_new(ev, "type", json_string(type));
		if (s) {
			json_object_set_new(ev, "data", s);
		} else {
			char *b = base64(data, len);
			json_object_set_new(ev, "data_b64", json_string(b ? b : ""));
			free(b);
		}
		json_event(sr, ev);
		return;
	}
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, 2);
	mp_str(&pk, "type", type);
	mp_key(&pk, "data");
	msgpack_pack_bin(&pk, len);
	msgpack_pack_bin_body(&pk, data, len);
	push_event(sr, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
}

static const char *term_reason(sbx_term t)
{
	switch (t) {
	case SBX_TERM_EXIT:
		return "";
	case SBX_TERM_SIGNAL:
		return "signal";
	case SBX_TERM_TIMEOUT:
		return "timeout";
	case SBX_TERM_KILLED:
		return "killed";
	case SBX_TERM_OOM:
		return "oom";
	default:
		return "error";
	}
}

static void emit_exit(sbx_srv_run *sr, const sbx_run_result *res)
{
	const ev_field f[] = {
		{"type", "exit", 0},
		{"returncode", NULL, res->returncode},
		{"runtime_ms", NULL, (int64_t)res->runtime_ms},
		{"backend", sr->backend, 0},
		{"termination_reason", term_reason(res->term), 0},
		{"signal", NULL, res->signo},
	};
	emit_fields(sr, f, res->signo ? 6 : 5);
}

static void emit_error(sbx_srv_run *sr, const char *kind, const char *msg)
{
	const ev_field f[] = {
		{"type", "error", 0}, {"kind", kind, 0},	   {"message", msg, 0},
		{"reason", msg, 0},   {"backend", sr->backend, 0}, {"returncode", NULL, -1},
	};
	emit_fields(sr, f, 6);
}

/* { type = "run", run_id }: the first event of a detached run. */
static void emit_run_id(sbx_srv_run *sr)
{
	const ev_field f[] = {{"type", "run", 0}, {"run_id", sr->run_id, 0}};
	emit_fields(sr, f, 2);
}

/* { type = "dropped", events, bytes }: what an absent client lost. */
static void encode_dropped(sbx_srv_run *sr, sbx_srv_buf *out)
{
	const ev_field f[] = {
		{"type", "dropped", 0},
		{"events", NULL, (int64_t)sr->dropped_events},
		{"bytes", NULL, (int64_t)sr->dropped_bytes},
	};
	encode_fields(sr->fmt, f, 3, out);
}

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
static void release(sbx_srv_run *sr, const char *outcome)
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

/* Read what the run has, queue events, flush. */
static void pump(sbx_srv_run *sr)
{
	sbx_err err;
	sbx_event ev;

	if (sr->stopped || sr->final || !sr->run || sr->in_pump)
		return;
	sr->in_pump = true;
	for (;;) {
		/* An absent client's buffer drops its oldest events instead. */
		bool want = !sr->req || sr->pending.len < SRV_STREAM_CAP;
		if (sbx_run_next(sr->run, 0, want, want, &ev, &err) != 0) {
			emit_error(sr, "SandboxExecutionError", err.msg);
			sr->final = true;
			release(sr, "error");
			break;
		}
		if (ev.type == SBX_EV_NONE)
			break;
		if (ev.type == SBX_EV_STDOUT || ev.type == SBX_EV_STDERR) {
			emit_data(sr, ev.type == SBX_EV_STDOUT ? "stdout" : "stderr", ev.data,
				  ev.len);
			continue;
		}
		/* EXIT */
		const sbx_run_result *res = sbx_run_result_get(sr->run);
		const char *outcome = res->term == SBX_TERM_EXIT      ? "exit"
				      : res->term == SBX_TERM_SIGNAL  ? "signal"
				      : res->term == SBX_TERM_TIMEOUT ? "timeout"
				      : res->term == SBX_TERM_KILLED  ? "killed"
				      : res->term == SBX_TERM_OOM     ? "oom"
								      : "error";
		if (res->term == SBX_TERM_ERROR) {
			char msg[300];
			snprintf(msg, sizeof(msg), "%s",
				 res->error[0] ? res->error : "the sandbox lost the run");
			/* A wrong cwd is the caller's: the core says so in error_kind. */
			emit_error(sr,
				   sbx_err_kind_name(res->error_kind == SBX_E_INVALID_ARGUMENT
							     ? SBX_E_INVALID_ARGUMENT
							     : SBX_E_EXECUTION),
				   msg);
		} else {
			emit_exit(sr, res);
		}
		sr->final = true;
		release(sr, outcome);
		break;
	}
	if (!sr->final)
		watch_update(sr, !sr->req || sr->pending.len < SRV_STREAM_CAP);
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
		emit_error(sr, kind, msg);
		lua_settop(L, top);
		sr->final = true;
		release(sr, "error");
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

static void record_free(sbx_srv_run *sr)
{
	if (sr->detach) {
		if (sr->kprev)
			sr->kprev->knext = sr->knext;
		else if (kept_runs == sr)
			kept_runs = sr->knext;
		if (sr->knext)
			sr->knext->kprev = sr->kprev;
		n_kept--;
	}
	free(sr->pending.data);
	free(sr->inflight.data);
	free(sr->ev_len);
	free(sr);
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
		record_free(sr);
		return;
	}
	if (!sr->detach || (!sr->started && !sr->final)) {
		if (!sr->stopped) {
			sr->stopped = true;
			if (reset)
				sbx_srv_log(SRV_LOG_INFO,
					    "event=run_stop session=%s msg=\"client went away\"",
					    sr->sid);
			release(sr, "disconnected");
		}
		record_free(sr);
		return;
	}
	/* What was in flight to the departed client is lost with it. */
	sr->inflight.len = 0;
	sbx_srv_log(SRV_LOG_INFO, "event=run_detached session=%s run=%s", sr->sid, sr->run_id);
	if (!sr->final) {
		drop_oldest(sr);
		watch_update(sr, true);
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

static void start_headers(sbx_srv_run *sr, h2o_req_t *req)
{
	req->res.status = 200;
	req->res.reason = "OK";
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
		       sr->fmt == SRV_FMT_MSGPACK ? "application/msgpack" : "application/x-ndjson",
		       sr->fmt == SRV_FMT_MSGPACK ? strlen("application/msgpack")
						  : strlen("application/x-ndjson"));
	h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL,
		       H2O_STRLIT("no-store"));
	if (sr->detach)
		h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("x-sbx-run-id"), 0,
				      NULL, h2o_strdup(&req->pool, sr->run_id, 32).base, 32);
	h2o_start_response(req, &sr->gen);
}

/* Make sr the generator of req; its pool's destructor tells us when it goes. */
static void attach_req(sbx_srv_run *sr, h2o_req_t *req)
{
	sbx_srv_run **owner = h2o_mem_alloc_shared(&req->pool, sizeof(*owner), on_dispose);
	*owner = sr;
	sr->owner = owner;
	sr->req = req;
}

/* The oldest ended, unattached detached record, or NULL. */
static sbx_srv_run *oldest_ended(void)
{
	sbx_srv_run *found = NULL;
	for (sbx_srv_run *k = kept_runs; k; k = k->knext)
		if (!k->req && k->ended_ms && (!found || k->ended_ms <= found->ended_ms))
			found = k;
	return found;
}

void sbx_srv_stream_begin(sbx_srv *S, h2o_req_t *req, int idx, sbx_srv_fmt fmt, const char *sid)
{
	lua_State *L = S->L;
	sbx_srv_run *sr = calloc(1, sizeof(*sr));
	unsigned char rnd[16];

	if (!sr) {
		sbx_srv_send_error(req, 503, "SandboxExecutionError", "out of memory", fmt);
		return;
	}
	lua_getfield(L, idx, "detach");
	sr->detach = lua_toboolean(L, -1);
	lua_pop(L, 1);
	if (sr->detach) {
		if (n_kept >= SRV_KEEP_MAX && oldest_ended())
			record_free(oldest_ended());
		if (n_kept >= SRV_KEEP_MAX ||
		    getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
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
		for (int i = 0; i < 16; i++)
			snprintf(sr->run_id + 2 * i, 3, "%02x", rnd[i]);
		sr->knext = kept_runs;
		if (kept_runs)
			kept_runs->kprev = sr;
		kept_runs = sr;
		n_kept++;
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
	attach_req(sr, req);
	sr->next = live_runs;
	if (live_runs)
		live_runs->prev = sr;
	live_runs = sr;
	if (sr->detach) {
		emit_run_id(sr);
		sbx_srv_log(SRV_LOG_INFO, "event=run_detachable session=%s run=%s", sr->sid,
			    sr->run_id);
	}
	start_headers(sr, req);
	h2o_timeout_link(S->ctx.loop, &S->zero_timeout, &sr->start_entry);
	/* Send the headers now: a client learns at once that the run was
	 * accepted (a quiet command would otherwise keep it waiting). */
	sr->sending = true;
	h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS);
}

void sbx_srv_stream_attach(sbx_srv *S, h2o_req_t *req, const char *sid, const char *run_id,
			   sbx_srv_fmt fmt)
{
	sbx_srv_run *sr = NULL;

	for (sbx_srv_run *k = kept_runs; k; k = k->knext)
		if (!strcmp(k->sid, sid) &&
		    sbx_srv_ct_equal(k->run_id, strlen(k->run_id), run_id, strlen(run_id)))
			sr = k;
	if (!sr || sr->final_sent) {
		sbx_srv_send_error(
			req, 404, "NotFound",
			"no detached run with that id in this session (or it was read to "
			"its end, or expired)",
			fmt);
		return;
	}
	/* The events are kept encoded as the run was started; an Accept
	 * that names only the other format cannot be served. */
	ssize_t ai = h2o_find_header(&req->headers, H2O_TOKEN_ACCEPT, -1);
	if (ai >= 0) {
		h2o_iovec_t a = req->headers.entries[ai].value;
		bool mp = h2o_strstr(a.base, a.len, H2O_STRLIT("msgpack")) != SIZE_MAX;
		bool js = h2o_strstr(a.base, a.len, H2O_STRLIT("json")) != SIZE_MAX;
		if ((mp && !js && sr->fmt != SRV_FMT_MSGPACK) ||
		    (js && !mp && sr->fmt != SRV_FMT_JSON)) {
			sbx_srv_send_error(
				req, 406, "NotAcceptable",
				sr->fmt == SRV_FMT_MSGPACK
					? "this run streams application/msgpack (as it was started)"
					: "this run streams application/x-ndjson (as it was started)",
				fmt);
			return;
		}
	}
	if (sr->req) {
		sbx_srv_send_error(req, 409, "Conflict",
				   "another client is attached to this run; one at a time", fmt);
		return;
	}
	/* What the absent client missed: a marker first, then the rest. */
	if (sr->dropped_events) {
		sbx_srv_buf nb = {0};
		encode_dropped(sr, &nb);
		size_t mlen = nb.len;
		buf_append(&nb, sr->pending.data, sr->pending.len);
		if (nb.len == mlen + sr->pending.len && sr->n_ev < sr->cap_ev) {
			free(sr->pending.data);
			sr->pending = nb;
			/* The marker is the oldest event now. */
			memmove(sr->ev_len + 1, sr->ev_len, sr->n_ev * sizeof(*sr->ev_len));
			sr->ev_len[0] = (uint32_t)mlen;
			sr->n_ev++;
			sr->dropped_events = sr->dropped_bytes = 0;
		} else {
			free(nb.data);
		}
	}
	attach_req(sr, req);
	sbx_srv_log(SRV_LOG_INFO, "event=run_attach session=%s run=%s", sr->sid, sr->run_id);
	(void)S;
	start_headers(sr, req);
	sr->sending = true;
	h2o_send(req, NULL, 0, H2O_SEND_STATE_IN_PROGRESS);
}

void sbx_srv_stream_gc(sbx_srv *S)
{
	uint64_t now = sbx_srv_now_ms();
	sbx_srv_run *k = kept_runs;
	(void)S;
	while (k) {
		sbx_srv_run *next = k->knext;
		if (!k->req && k->ended_ms && now - k->ended_ms > SRV_KEEP_MS)
			record_free(k);
		k = next;
	}
}

void sbx_srv_stream_free_all(sbx_srv *S)
{
	(void)S;
	while (kept_runs && !kept_runs->req) {
		sbx_srv_run *k = kept_runs;
		if (!k->final) {
			k->stopped = true;
			release(k, "killed");
		}
		record_free(k);
	}
}

void sbx_srv_stream_kill_all(sbx_srv *S)
{
	(void)S;
	for (sbx_srv_run *sr = live_runs; sr; sr = sr->next)
		if (sr->run)
			sbx_run_kill(sr->run, SIGKILL, NULL);
}

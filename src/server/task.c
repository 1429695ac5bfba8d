/*
 * task.c: each request's Lua handler runs as a coroutine (a task) that the
 * event loop drives, so a handler that must wait never blocks the loop.
 *
 * Where the Lua side (lua/sbx/server/init.lua) would wait it yields one of
 *
 *   "fd",  fd, deadline_ms   until fd is readable (a session's sandbox
 *                            saying ready, a warm run on offer);
 *   "job", id, deadline_ms   until the policy worker answers message id
 *                            (hooks.c);
 *   "turn", 0, deadline_ms   until the loop has run once more: before a
 *                            costly step (a session's start), so that 16
 *                            opens arriving together take one loop turn
 *                            each and other requests are served between;
 *
 * (deadline_ms on sbx_srv_now_ms's clock), and is resumed with true (fd
 * ready) or the worker's answer (a table), or nil and "timeout" past the
 * deadline, or nil and "cancelled" when the client went away (the request's
 * pool was disposed of): the Lua side then undoes what it half did (closes
 * a session still setting up) and returns; its answer goes nowhere.  The
 * answer of a task whose client is still there goes out through handler.c
 * (sbx_srv_handler_answer).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>

#include "server.h"

/* A task that keeps yielding after its client went away is given up
 * after this many resumptions with "cancelled". */
#define MAX_CANCELLED_RESUMES 64

typedef struct sbx_srv_task sbx_srv_task;
struct sbx_srv_task {
	sbx_srv *S;
	lua_State *co;
	int co_ref;
	h2o_req_t *req;	     /* NULL once the client went away */
	sbx_srv_task **slot; /* in req's pool: cleared when we finish */
	sbx_srv_fmt fmt;
	char tenant[128];
	bool has_tenant;
	uint64_t t0;
	/* what it waits for: sock (an fd) or job (a worker message) */
	h2o_socket_t *sock;
	uint64_t job;
	uint64_t deadline_ms;
	bool timer_linked;
	h2o_timeout_entry_t timer;
	sbx_srv_task *next_job;
	sbx_srv_task *next_turn;
	bool in_turn;
	bool running;
	bool is_run; /* POST .../runs */
	int cancelled_resumes;
};

static sbx_srv_task *job_waiters;
static h2o_socket_t *hooks_sock;
/* Tasks waiting for a turn, in order; turn_efd is readable while any do. */
static sbx_srv_task *turn_head, *turn_tail;
static int turn_efd = -1;
static h2o_socket_t *turn_sock;

static void turn_kick(void)
{
	uint64_t one = 1;
	(void)!write(turn_efd, &one, sizeof(one));
}

static void turn_unlink(sbx_srv_task *t)
{
	sbx_srv_task *prev = NULL;
	for (sbx_srv_task *q = turn_head; q; prev = q, q = q->next_turn)
		if (q == t) {
			if (prev)
				prev->next_turn = t->next_turn;
			else
				turn_head = t->next_turn;
			if (turn_tail == t)
				turn_tail = prev;
			break;
		}
	t->next_turn = NULL;
	t->in_turn = false;
}

static void unlink_job(sbx_srv_task *t)
{
	for (sbx_srv_task **p = &job_waiters; *p; p = &(*p)->next_job)
		if (*p == t) {
			*p = t->next_job;
			break;
		}
	t->next_job = NULL;
	t->job = 0;
}

/* Stop waiting (fd, job and timer). */
static void stop_wait(sbx_srv_task *t)
{
	if (t->sock) {
		h2o_socket_read_stop(t->sock);
		h2o_socket_close(t->sock);
		t->sock = NULL;
	}
	if (t->job)
		unlink_job(t);
	if (t->in_turn)
		turn_unlink(t);
	if (t->timer_linked) {
		h2o_timeout_unlink(&t->timer);
		t->timer_linked = false;
	}
}

static void task_free(sbx_srv_task *t)
{
	stop_wait(t);
	if (t->slot)
		*t->slot = NULL;
	luaL_unref(t->S->L, LUA_REGISTRYINDEX, t->co_ref);
	free(t);
}

/* The answer of a task whose client is gone: undo what would have been
 * handed over (a run's counters, a file's fd). */
static void discard(lua_State *L)
{
	int top = lua_gettop(L);
	if (lua_istable(L, top)) {
		lua_getfield(L, top, "stream");
		if (lua_istable(L, -1)) {
			lua_getfield(L, -1, "finish");
			if (lua_isfunction(L, -1))
				sbx_srv_pcall(L, 0, 0, "finish");
		}
		lua_settop(L, top);
		lua_getfield(L, top, "file");
		if (lua_istable(L, -1)) {
			lua_getfield(L, -1, "fd");
			if (lua_isnumber(L, -1))
				close((int)lua_tointeger(L, -1));
		}
	}
	lua_settop(L, top - 1);
}

static void on_fd_ready(h2o_socket_t *sock, const char *err);
static void on_timer(h2o_timeout_entry_t *e);

/* Set up the wait the task yielded for: true (*ready when what it waits
 * for is there already), or false and why when it asked for something
 * malformed. */
static bool start_wait(sbx_srv_task *t, const char **why, bool *ready)
{
	lua_State *co = t->co;
	const char *kind = lua_tostring(co, 1);
	lua_Number what = lua_tonumber(co, 2), deadline = lua_tonumber(co, 3);

	lua_settop(co, 0);
	if (!kind || what < 0 || deadline <= 0) {
		*why = "a malformed wait";
		return false;
	}
	t->deadline_ms = (uint64_t)deadline;
	if (!strcmp(kind, "fd")) {
		/* Readable already (a warm run on offer, mostly): no round
		 * trip through the loop. */
		struct pollfd pfd = {(int)what, POLLIN, 0};
		if (poll(&pfd, 1, 0) == 1) {
			*ready = true;
			return true;
		}
		int fd = fcntl((int)what, F_DUPFD_CLOEXEC, 3);
		if (fd < 0) {
			*why = "dup failed";
			return false;
		}
		t->sock = h2o_evloop_socket_create(t->S->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
		t->sock->data = t;
		h2o_socket_read_start(t->sock, on_fd_ready);
	} else if (!strcmp(kind, "turn")) {
		t->in_turn = true;
		if (turn_tail)
			turn_tail->next_turn = t;
		else
			turn_head = t;
		turn_tail = t;
		turn_kick();
	} else if (!strcmp(kind, "job") && what >= 1) {
		t->job = (uint64_t)what;
		t->next_job = job_waiters;
		job_waiters = t;
	} else {
		*why = "a malformed wait";
		return false;
	}
	t->timer.cb = on_timer;
	h2o_timeout_link(t->S->ctx.loop, &t->S->tick_timeout, &t->timer);
	t->timer_linked = true;
	return true;
}

/* Resume the task with the nargs values on its stack, until it waits or
 * ends. */
static void resume(sbx_srv_task *t, int nargs)
{
	lua_State *co = t->co, *L = t->S->L;

	for (;;) {
		t->running = true;
		int st = lua_resume(co, nargs);
		t->running = false;
		if (st == LUA_YIELD) {
			const char *why = NULL;
			bool ready = false;
			if (!t->req) {
				if (++t->cancelled_resumes > MAX_CANCELLED_RESUMES) {
					sbx_srv_log(SRV_LOG_ERROR,
						    "event=lua_error err=\"a handler "
						    "kept waiting after its client left\"");
					task_free(t);
					return;
				}
				why = "cancelled";
			} else if (start_wait(t, &why, &ready)) {
				if (!ready)
					return;
				lua_pushboolean(co, 1);
				nargs = 1;
				continue;
			}
			lua_settop(co, 0);
			lua_pushnil(co);
			lua_pushstring(co, why);
			nargs = 2;
			continue;
		}
		if (st == 0) {
			lua_settop(co, lua_gettop(co) > 0 ? 1 : 0);
			if (lua_gettop(co) == 0)
				lua_pushnil(co);
			lua_xmove(co, L, 1);
			if (t->req)
				sbx_srv_handler_answer(t->S, t->req, t->fmt,
						       t->has_tenant ? t->tenant : NULL, t->t0);
			else
				discard(L);
		} else {
			const char *msg = lua_tostring(co, -1);
			luaL_traceback(L, co, msg ? msg : "(an error object)", 0);
			sbx_srv_log(SRV_LOG_ERROR, "event=lua_error err=\"%s\"",
				    lua_tostring(L, -1));
			lua_pop(L, 1);
			if (t->req)
				sbx_srv_handler_fail(t->req, t->fmt,
						     t->has_tenant ? t->tenant : NULL, t->t0);
		}
		task_free(t);
		return;
	}
}

/* Resume a waiting task with nil, why. */
static void resume_failed(sbx_srv_task *t, const char *why)
{
	stop_wait(t);
	lua_settop(t->co, 0);
	lua_pushnil(t->co);
	lua_pushstring(t->co, why);
	resume(t, 2);
}

static void on_fd_ready(h2o_socket_t *sock, const char *err)
{
	sbx_srv_task *t = sock->data;
	(void)err;
	stop_wait(t);
	lua_settop(t->co, 0);
	lua_pushboolean(t->co, 1);
	resume(t, 1);
}

static void on_timer(h2o_timeout_entry_t *e)
{
	sbx_srv_task *t = H2O_STRUCT_FROM_MEMBER(sbx_srv_task, timer, e);
	t->timer_linked = false;
	if (sbx_srv_now_ms() < t->deadline_ms) {
		h2o_timeout_link(t->S->ctx.loop, &t->S->tick_timeout, &t->timer);
		t->timer_linked = true;
		return;
	}
	resume_failed(t, "timeout");
}

/* The request's pool goes: the client went away (or the answer is out). */
static void on_req_dispose(void *p)
{
	sbx_srv_task **slot = p, *t = *slot;
	if (!t)
		return;
	t->req = NULL;
	t->slot = NULL;
	if (!t->running && (t->sock || t->job || t->in_turn)) {
		/* A run reset while it waited (its policy hook, its warm run)
		 * never started: sbxd_streams_reset_before_start_total. */
		if (t->is_run)
			sbx_srv_m.resets_before_start++;
		resume_failed(t, "cancelled");
	}
}

static void answer_lua(sbx_srv *S, uint64_t id, const char *data, size_t len)
{
	lua_State *L = S->L;
	char why[256];
	int top = lua_gettop(L);

	if (S->hook_answer_ref == LUA_NOREF)
		return;
	lua_rawgeti(L, LUA_REGISTRYINDEX, S->hook_answer_ref);
	lua_pushnumber(L, (lua_Number)id);
	if (sbx_srv_decode(L, SRV_FMT_MSGPACK, data, len, why, sizeof(why)) != 0)
		lua_pushstring(L, why);
	sbx_srv_pcall(L, 2, 0, "hook_answer");
	lua_settop(L, top);
}

/* Answers of the policy worker: each to the task waiting for it. */
static void on_hooks(h2o_socket_t *sock, const char *err)
{
	sbx_srv *S = sbx_srv_g;
	uint64_t id;
	char *data;
	size_t len;
	(void)sock;
	(void)err;

	while (sbx_srv_hooks_take(S->hooks, &id, &data, &len)) {
		sbx_srv_task *t = job_waiters;
		while (t && t->job != id)
			t = t->next_job;
		if (t) {
			char why[256];
			stop_wait(t);
			lua_settop(t->co, 0);
			if (sbx_srv_decode(t->co, SRV_FMT_MSGPACK, data, len, why, sizeof(why)) ==
			    0) {
				free(data);
				resume(t, 1);
				continue;
			}
			free(data);
			lua_pushnil(t->co);
			lua_pushstring(t->co, why);
			resume(t, 2);
			continue;
		}
		sbx_srv_log(SRV_LOG_DEBUG, "event=hook_answer_late job=%lu", (unsigned long)id);
		/* No task waits: a proxy verdict (sbx.server's hook_answer), or
		 * a task that timed out or went away (it ignores those). */
		answer_lua(S, id, data, len);
		free(data);
	}
}

/* One waiting task's turn per loop turn: whatever else was ready in this
 * turn has been served before we come back here. */
static void on_turn(h2o_socket_t *sock, const char *err)
{
	uint64_t n;
	(void)sock;
	(void)err;
	(void)!read(turn_efd, &n, sizeof(n));
	sbx_srv_task *t = turn_head;
	if (!t)
		return;
	stop_wait(t);
	if (turn_head)
		turn_kick();
	lua_settop(t->co, 0);
	lua_pushboolean(t->co, 1);
	resume(t, 1);
}

int sbx_srv_task_init(sbx_srv *S)
{
	int fd = fcntl(sbx_srv_hooks_fd(S->hooks), F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return -1;
	hooks_sock = h2o_evloop_socket_create(S->ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(hooks_sock, on_hooks);
	turn_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int dup = turn_efd < 0 ? -1 : fcntl(turn_efd, F_DUPFD_CLOEXEC, 3);
	if (dup < 0)
		return -1;
	turn_sock = h2o_evloop_socket_create(S->ctx.loop, dup, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(turn_sock, on_turn);
	return 0;
}

void sbx_srv_task_fini(sbx_srv *S)
{
	(void)S;
	if (hooks_sock) {
		h2o_socket_read_stop(hooks_sock);
		h2o_socket_close(hooks_sock);
		hooks_sock = NULL;
	}
	if (turn_sock) {
		h2o_socket_read_stop(turn_sock);
		h2o_socket_close(turn_sock);
		turn_sock = NULL;
	}
	if (turn_efd >= 0)
		close(turn_efd);
	turn_efd = -1;
}

void sbx_srv_task_start(sbx_srv *S, h2o_req_t *req, sbx_srv_fmt fmt, const char *tenant,
			uint64_t t0)
{
	lua_State *L = S->L;
	sbx_srv_task *t = calloc(1, sizeof(*t));

	if (!t) {
		lua_pop(L, 2);
		sbx_srv_handler_fail(req, fmt, tenant, t0);
		return;
	}
	t->S = S;
	t->req = req;
	t->fmt = fmt;
	t->t0 = t0;
	size_t plen = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
	t->is_run = h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST")) && plen >= 5 &&
		    memcmp(req->path.base + plen - 5, "/runs", 5) == 0;
	if (tenant) {
		snprintf(t->tenant, sizeof(t->tenant), "%s", tenant);
		t->has_tenant = true;
	}
	t->co = lua_newthread(L);
	t->co_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_xmove(L, t->co, 2); /* the handler and its request table */
	t->slot = h2o_mem_alloc_shared(&req->pool, sizeof(*t->slot), on_req_dispose);
	*t->slot = t;
	resume(t, 1);
}

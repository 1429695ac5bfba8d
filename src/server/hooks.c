/*
 * hooks.c: the policy worker, a thread of its own that runs every policy
 * hook of sbxd, so that a hook running to its deadline (limits.hook_ms)
 * never stalls the event loop.
 *
 * The worker owns a lua_State of its own with lua/sbx/server/hookworker.lua
 * loaded (the policy engine and each policy generation it is told to load).
 * The loop's Lua side (lua/sbx/server/init.lua) posts messages as Lua tables
 * (copied by value: msgpack, codec.c) and gets each answer back the same
 * way.  Messages are handled one at a time, in the order posted, so hooks
 * keep the serialized semantics and the state a policy keeps between calls.
 * An answer wakes the loop through an eventfd (sbx_srv_hooks_fd), whose
 * handler hands it to the request waiting for it (task.c); a caller off
 * any request (the proxy's decide, the reaper) waits for its answer with
 * sbx_srv_hooks_wait instead.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "../lua/lsbx.h"
#include "server.h"

typedef struct hw_msg {
	struct hw_msg *next;
	uint64_t id;
	bool noreply;
	char *data; /* msgpack */
	size_t len;
} hw_msg;

typedef struct hw_queue {
	hw_msg *head, *tail;
} hw_queue;

struct sbx_srv_hooks {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t more_work, more_answers;
	hw_queue work, answers;
	uint64_t next_id;
	int efd;
	bool stop, started;
};

static void q_push(hw_queue *q, hw_msg *m)
{
	m->next = NULL;
	if (q->tail)
		q->tail->next = m;
	else
		q->head = m;
	q->tail = m;
}

static hw_msg *q_pop(hw_queue *q)
{
	hw_msg *m = q->head;
	if (m) {
		q->head = m->next;
		if (!q->head)
			q->tail = NULL;
	}
	return m;
}

/* Take the answer with this id out of the queue, or NULL. */
static hw_msg *q_take(hw_queue *q, uint64_t id)
{
	hw_msg *prev = NULL;
	for (hw_msg *m = q->head; m; prev = m, m = m->next) {
		if (m->id != id)
			continue;
		if (prev)
			prev->next = m->next;
		else
			q->head = m->next;
		if (q->tail == m)
			q->tail = prev;
		return m;
	}
	return NULL;
}

static void msg_free(hw_msg *m)
{
	if (m) {
		free(m->data);
		free(m);
	}
}

/* An answer saying the worker could not handle the message. */
static hw_msg *failure(uint64_t id, const char *why)
{
	lua_State *L = luaL_newstate();
	hw_msg *m = calloc(1, sizeof(*m));
	if (!L || !m) {
		if (L)
			lua_close(L);
		free(m);
		return NULL;
	}
	m->id = id;
	lua_createtable(L, 0, 2);
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "ok");
	lua_pushstring(L, why);
	lua_setfield(L, -2, "err");
	m->data = sbx_srv_encode(L, -1, SRV_FMT_MSGPACK, &m->len);
	lua_close(L);
	return m;
}

/* Handle one message in the worker's state: decode, hookworker.handle,
 * encode the answer (NULL on a failure of the worker itself: logged). */
static hw_msg *handle(lua_State *L, int handle_ref, const hw_msg *in)
{
	char why[256];
	int top = lua_gettop(L);
	hw_msg *out = NULL;

	lua_rawgeti(L, LUA_REGISTRYINDEX, handle_ref);
	if (sbx_srv_decode(L, SRV_FMT_MSGPACK, in->data, in->len, why, sizeof(why)) != 0) {
		lua_settop(L, top);
		return failure(in->id, why);
	}
	int st = lsbx_pcall(L, 1, 1, 0);
	if (st != 0 || !lua_istable(L, -1)) {
		if (st != 0)
			sbx_srv_log_lua_error(L, "hook_worker");
		snprintf(why, sizeof(why), "the policy worker failed: %s",
			 st != 0 ? lsbx_pcall_message(L, -1) : "no answer");
		lua_settop(L, top);
		return failure(in->id, why);
	}
	out = calloc(1, sizeof(*out));
	if (out) {
		out->id = in->id;
		out->data = sbx_srv_encode(L, -1, SRV_FMT_MSGPACK, &out->len);
	}
	lua_settop(L, top);
	if (out && !out->data) {
		free(out);
		return failure(in->id, "the policy worker's answer did not encode");
	}
	return out;
}

static void *worker_main(void *arg)
{
	sbx_srv_hooks *H = arg;
	lua_State *L = luaL_newstate();
	int handle_ref = LUA_NOREF;

	if (L) {
		luaL_openlibs(L);
		sbx_srv_lua_setup(L);
		lua_getglobal(L, "require");
		lua_pushliteral(L, "sbx.server.hookworker");
		int st = lsbx_pcall(L, 1, 1, 0);
		if (st == 0 && lua_istable(L, -1)) {
			lua_getfield(L, -1, "handle");
			handle_ref = luaL_ref(L, LUA_REGISTRYINDEX);
		} else if (st != 0) {
			sbx_srv_log_lua_error(L, "hook_worker");
		} else {
			sbx_srv_log(SRV_LOG_ERROR, "event=hook_worker err=\"no module\"");
		}
		lua_settop(L, 0);
	}
	pthread_mutex_lock(&H->mu);
	for (;;) {
		while (!H->stop && !H->work.head)
			pthread_cond_wait(&H->more_work, &H->mu);
		if (H->stop)
			break;
		hw_msg *in = q_pop(&H->work);
		pthread_mutex_unlock(&H->mu);
		hw_msg *out = NULL;
		if (!in->noreply)
			out = handle_ref == LUA_NOREF
				      ? failure(in->id, "the policy worker did not start")
				      : handle(L, handle_ref, in);
		else if (handle_ref != LUA_NOREF)
			msg_free(handle(L, handle_ref, in));
		msg_free(in);
		pthread_mutex_lock(&H->mu);
		if (out) {
			q_push(&H->answers, out);
			pthread_cond_broadcast(&H->more_answers);
			uint64_t one = 1;
			(void)!write(H->efd, &one, sizeof(one));
		}
	}
	pthread_mutex_unlock(&H->mu);
	if (L)
		lua_close(L);
	return NULL;
}

sbx_srv_hooks *sbx_srv_hooks_start(sbx_err *err)
{
	sbx_srv_hooks *H = calloc(1, sizeof(*H));
	if (!H)
		return sbx_err_set(err, SBX_E_EXECUTION, ENOMEM, "out of memory"), NULL;
	H->next_id = 1;
	H->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (H->efd < 0) {
		sbx_err_set(err, SBX_E_EXECUTION, errno, "eventfd: %s", strerror(errno));
		free(H);
		return NULL;
	}
	pthread_mutex_init(&H->mu, NULL);
	pthread_cond_init(&H->more_work, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&H->more_answers, &ca);
	pthread_condattr_destroy(&ca);
	int rc = pthread_create(&H->thread, NULL, worker_main, H);
	if (rc != 0) {
		sbx_err_set(err, SBX_E_EXECUTION, rc, "start the policy worker: %s", strerror(rc));
		sbx_srv_hooks_free(H);
		return NULL;
	}
	H->started = true;
	return H;
}

int sbx_srv_hooks_fd(const sbx_srv_hooks *H)
{
	return H->efd;
}

uint64_t sbx_srv_hooks_post(sbx_srv_hooks *H, char *data, size_t len, bool noreply)
{
	hw_msg *m = calloc(1, sizeof(*m));
	if (!m) {
		free(data);
		return 0;
	}
	m->data = data;
	m->len = len;
	m->noreply = noreply;
	pthread_mutex_lock(&H->mu);
	uint64_t id = m->id = H->next_id++;
	q_push(&H->work, m);
	pthread_cond_signal(&H->more_work);
	pthread_mutex_unlock(&H->mu);
	return id; /* not m->id: the worker may have freed m by now */
}

int sbx_srv_hooks_take(sbx_srv_hooks *H, uint64_t *id, char **data, size_t *len)
{
	uint64_t n;
	(void)!read(H->efd, &n, sizeof(n));
	pthread_mutex_lock(&H->mu);
	hw_msg *m = q_pop(&H->answers);
	pthread_mutex_unlock(&H->mu);
	if (!m)
		return 0;
	*id = m->id;
	*data = m->data;
	*len = m->len;
	free(m);
	return 1;
}

int sbx_srv_hooks_wait(sbx_srv_hooks *H, uint64_t id, uint32_t timeout_ms, char **data, size_t *len)
{
	struct timespec until;
	hw_msg *m;
	int rc = 0;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&H->mu);
	while (!(m = q_take(&H->answers, id)) && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&H->more_answers, &H->mu, &until);
	pthread_mutex_unlock(&H->mu);
	if (!m)
		return 0;
	*data = m->data;
	*len = m->len;
	free(m);
	return 1;
}

void sbx_srv_hooks_free(sbx_srv_hooks *H)
{
	if (!H)
		return;
	if (H->started) {
		pthread_mutex_lock(&H->mu);
		H->stop = true;
		pthread_cond_signal(&H->more_work);
		pthread_mutex_unlock(&H->mu);
		pthread_join(H->thread, NULL);
	}
	hw_msg *m;
	while ((m = q_pop(&H->work)))
		msg_free(m);
	while ((m = q_pop(&H->answers)))
		msg_free(m);
	pthread_cond_destroy(&H->more_work);
	pthread_cond_destroy(&H->more_answers);
	pthread_mutex_destroy(&H->mu);
	if (H->efd >= 0)
		close(H->efd);
	free(H);
}

/* Lua: post(msg, noreply) -> id.  msg is copied (msgpack); with noreply
 * the worker handles it and answers nothing (on_close). */
int sbx_srv_l_hooks_post(lua_State *L)
{
	size_t len;
	luaL_checktype(L, 1, LUA_TTABLE);
	char *data = sbx_srv_encode(L, 1, SRV_FMT_MSGPACK, &len);
	if (!data)
		return luaL_error(L, "the policy worker's message did not encode");
	uint64_t id = sbx_srv_hooks_post(sbx_srv_g->hooks, data, len, lua_toboolean(L, 2));
	if (!id)
		return luaL_error(L, "out of memory");
	lua_pushnumber(L, (lua_Number)id);
	return 1;
}

/* Lua: wait(id, timeout_ms) -> answer | nil, "timeout".  Blocks the
 * calling thread: only for callers that are no request (task.c's "job"
 * wait is the loop's way). */
int sbx_srv_l_hooks_wait(lua_State *L)
{
	uint64_t id = (uint64_t)luaL_checknumber(L, 1);
	lua_Number ms = luaL_checknumber(L, 2);
	char *data, why[256];
	size_t len;

	if (!sbx_srv_hooks_wait(sbx_srv_g->hooks, id, ms < 0 ? 0 : (uint32_t)ms, &data, &len)) {
		lua_pushnil(L);
		lua_pushliteral(L, "timeout");
		return 2;
	}
	int rc = sbx_srv_decode(L, SRV_FMT_MSGPACK, data, len, why, sizeof(why));
	free(data);
	if (rc != 0) {
		lua_pushnil(L);
		lua_pushstring(L, why);
		return 2;
	}
	return 1;
}

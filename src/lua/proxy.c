/*
 * proxy.c: the allow-list proxy (src/core/sbx_proxy.h) as Lua sees it.
 *
 *   px = core.proxy_new{ decide = fn | batch = fn, log = fn, max_conns =,
 *                        connect_timeout_ms =, header_timeout_ms =, idle_timeout_ms = }
 *   px:add(listener_fd, tag)   -- serve a listener; tag is a string (a session id)
 *   px:remove(tag)             -- close its listeners and connections
 *   px:fd()                    -- readable when px:step has work (for an event loop)
 *   px:step(timeout_ms)        -- handle what is ready; true | nil, kind, msg
 *   px:wake([max_steps])       -- the fd is readable: step (never waiting) while it
 *                                 stays so, at most max_steps (64) times; true | nil, kind, msg
 *   px:decided(ticket, verdict) -- the verdict a decide left pending; false
 *                                  when the connection is gone meanwhile
 *   px:stats()                 -- { accepted, allowed, refused, failed, active, bytes_up,
 *                                   bytes_down, lua_calls }
 *   px:close()
 *
 * decide(q) gets q = { phase = "name" | "addrs", kind, host, port, addrs = {...}, tag,
 * ticket } and returns a verdict table { allow = bool, reason = str, literal = str,
 * resolve = str }, or { pending = true } to answer later with
 * px:decided(q.ticket, verdict) (sbxd: the policy's on_connect runs on its worker).  It runs inside px:step.  Anything but a well-formed
 * allowing verdict denies: a decide that errors, returns garbage or takes a
 * wrong turn refuses the connection (fail closed) and says why in the log.
 *
 * batch(queries, logs) replaces decide where every entry into Lua counts
 * (sbxd's loop): the proxy holds the questions and log lines of a step or
 * a wake-up and hands them over in one call, queries = { q, ... } as
 * decide's, logs = { line, ... }, and batch returns { verdict, ... } in the
 * same order (a verdict may be { pending = true }).  Relaying bytes,
 * parsing and steps with nothing to decide never enter Lua.  A batch that
 * errors or gives no verdict for a query refuses it; the log lines of a
 * failed batch go to stderr (with batch, no log option).  Neither decide,
 * log nor batch may add, remove or close (raises: the proxy is busy).  lua_calls counts the calls into Lua (decide,
 * log, batch).
 *
 * core.proxy_spawn, the same proxy in a forked child for on-device hosts,
 * is proxy_child.c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lproxy.h"
#include "lsbx.h"
#include "sbx_proxy.h"

#define LSBX_PROXY_MT "sbx.core.proxy"

/* A question held for the next batch (the core's strings copied). */
struct held_query {
	struct held_query *next;
	sbx_proxy_phase phase;
	uint16_t port;
	void *tag;
	uint64_t ticket;
	size_t n_addrs;
	char kind[16];
	char host[256]; /* the core's hosts are at most 255 bytes */
	char addrs[SBX_PROXY_MAX_ADDRS][64];
};
typedef struct held_query held_query;

/* A log line held for the next batch. */
struct held_line {
	struct held_line *next;
	char text[];
};
typedef struct held_line held_line;

const char *const lsbx_proxy_fields[] = {
	"decide",	   "batch",   "log", "max_conns", "connect_timeout_ms", "header_timeout_ms",
	"idle_timeout_ms", "secrets", NULL,
};

static void copy_field(lua_State *L, int t, const char *name, char *dst, size_t n)
{
	lua_getfield(L, t, name);
	if (lua_type(L, -1) == LUA_TSTRING)
		snprintf(dst, n, "%s", lua_tostring(L, -1));
	lua_pop(L, 1);
}

/* The tag string of a listener: tags are small integers as pointers,
 * names kept in env.tags[n]. */
static void push_tag(lua_State *L, int env, void *tag)
{
	lua_getfield(L, env, "tags");
	lua_rawgeti(L, -1, (int)(intptr_t)tag);
	lua_remove(L, -2);
}

/* The verdict table at t: anything but allow == true denies. */
static void read_verdict(lua_State *L, int t, sbx_proxy_verdict *v)
{
	copy_field(L, t, "reason", v->reason, sizeof(v->reason));
	copy_field(L, t, "literal", v->literal, sizeof(v->literal));
	copy_field(L, t, "resolve", v->resolve, sizeof(v->resolve));
	lua_getfield(L, t, "allow");
	v->allow = lua_type(L, -1) == LUA_TBOOLEAN && lua_toboolean(L, -1);
	lua_getfield(L, t, "pending");
	v->pending = lua_toboolean(L, -1);
	lua_pop(L, 2);
}

/* Push decide's q table for q (env: the index of the env table). */
static void push_query(lua_State *L, int env, const sbx_proxy_query *q)
{
	lua_createtable(L, 0, 6);
	lua_pushstring(L, q->phase == SBX_PROXY_NAME ? "name" : "addrs");
	lua_setfield(L, -2, "phase");
	lua_pushstring(L, q->kind ? q->kind : "?");
	lua_setfield(L, -2, "kind");
	lua_pushstring(L, q->host ? q->host : "");
	lua_setfield(L, -2, "host");
	lua_pushinteger(L, q->port);
	lua_setfield(L, -2, "port");
	lua_createtable(L, (int)q->n_addrs, 0);
	for (size_t i = 0; i < q->n_addrs; i++) {
		lua_pushstring(L, q->addrs[i]);
		lua_rawseti(L, -2, (int)i + 1);
	}
	lua_setfield(L, -2, "addrs");
	push_tag(L, env, q->tag);
	lua_setfield(L, -2, "tag");
	lua_pushnumber(L, (lua_Number)q->ticket);
	lua_setfield(L, -2, "ticket");
}

/* Batch mode: hold q for the next batch; the connection waits (pending). */
static void hold_query(lsbx_proxy *px, const sbx_proxy_query *q, sbx_proxy_verdict *v)
{
	held_query *h = calloc(1, sizeof(*h));
	bool fits = h && q->n_addrs <= SBX_PROXY_MAX_ADDRS &&
		    (size_t)snprintf(h->host, sizeof(h->host), "%s", q->host ? q->host : "") <
			    sizeof(h->host) &&
		    (size_t)snprintf(h->kind, sizeof(h->kind), "%s", q->kind ? q->kind : "?") <
			    sizeof(h->kind);

	for (size_t i = 0; fits && i < q->n_addrs; i++)
		fits = (size_t)snprintf(h->addrs[i], sizeof(h->addrs[i]), "%s", q->addrs[i]) <
		       sizeof(h->addrs[i]);
	if (!fits) {
		/* Never decide on a truncated copy. */
		snprintf(v->reason, sizeof(v->reason), "%s",
			 h ? "the query does not fit the policy batch" : "out of memory");
		free(h);
		return;
	}
	h->phase = q->phase;
	h->port = q->port;
	h->tag = q->tag;
	h->ticket = q->ticket;
	h->n_addrs = q->n_addrs;
	*px->queries_end = h;
	px->queries_end = &h->next;
	v->pending = true;
}

static void decide(void *ud, const sbx_proxy_query *q, sbx_proxy_verdict *v)
{
	lsbx_proxy *px = ud;
	lua_State *L = px->L;

	if (px->batch) {
		hold_query(px, q, v);
		return;
	}
	if (!L) {
		snprintf(v->reason, sizeof(v->reason), "the proxy has no policy to ask");
		return;
	}
	int top = lua_gettop(L);
	lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref);
	int env = lua_gettop(L);
	lua_getfield(L, env, "decide");
	push_query(L, env, q);
	px->lua_calls++;
	if (lsbx_pcall(L, 1, 1, 0) != 0) {
		snprintf(v->reason, sizeof(v->reason), "the policy check failed: %s",
			 lsbx_pcall_message(L, -1));
	} else if (lua_type(L, -1) != LUA_TTABLE) {
		snprintf(v->reason, sizeof(v->reason), "the policy check gave no verdict");
	} else {
		read_verdict(L, lua_gettop(L), v);
	}
	lua_settop(L, top);
}

static void log_line(void *ud, const char *line)
{
	lsbx_proxy *px = ud;
	lua_State *L = px->L;

	if (px->batch) {
		size_t n = strlen(line) + 1;
		held_line *h = malloc(sizeof(*h) + n);
		if (!h) {
			fprintf(stderr, "sbx proxy: %s\n", line);
			return;
		}
		memcpy(h->text, line, n);
		h->next = NULL;
		*px->lines_end = h;
		px->lines_end = &h->next;
		return;
	}
	if (!L) {
		fprintf(stderr, "sbx proxy: %s\n", line);
		return;
	}
	int top = lua_gettop(L);
	lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref);
	lua_getfield(L, -1, "log");
	if (lua_isfunction(L, -1)) {
		lua_pushstring(L, line);
		px->lua_calls++;
		if (lsbx_pcall(L, 1, 0, 0) != 0)
			fprintf(stderr, "sbx proxy: %s (log failed: %s)\n", line,
				lsbx_pcall_message(L, -1));
	} else {
		fprintf(stderr, "sbx proxy: %s\n", line);
	}
	lua_settop(L, top);
}

static lsbx_proxy *check_proxy(lua_State *L, int idx)
{
	lsbx_proxy *px = luaL_checkudata(L, idx, LSBX_PROXY_MT);
	if (!px->p)
		luaL_error(L, "the proxy is closed");
	return px;
}

/* Adding, removing and closing change the connections a step or a batch
 * is working through: never from its decide, log or batch. */
static lsbx_proxy *check_idle(lua_State *L, int idx)
{
	lsbx_proxy *px = check_proxy(L, idx);
	if (px->L)
		luaL_error(L, "the proxy is busy (called from its own decide, log or batch)");
	return px;
}

/* Build a proxy from the options table at idx; pushes its userdata. */
lsbx_proxy *lsbx_proxy_create(lua_State *L, int idx)
{
	sbx_proxy_cfg cfg;
	sbx_err err = {0};

	luaL_checktype(L, idx, LUA_TTABLE);
	lsbx_check_fields(L, idx, "proxy options", lsbx_proxy_fields);
	lua_getfield(L, idx, "batch");
	bool batch = !lua_isnil(L, -1);
	lua_getfield(L, idx, batch ? "batch" : "decide");
	if (!lua_isfunction(L, -1))
		luaL_error(L, "field '%s': function expected, got %s", batch ? "batch" : "decide",
			   luaL_typename(L, -1));
	lua_getfield(L, idx, "decide");
	if (batch && !lua_isnil(L, -1))
		luaL_error(L, "proxy options: give decide or batch, not both");
	lua_getfield(L, idx, "log");
	if (batch && !lua_isnil(L, -1))
		luaL_error(L, "proxy options: batch gets the log lines, give no log");
	lua_pop(L, 4);
	memset(&cfg, 0, sizeof(cfg));
	cfg.max_conns = (uint32_t)lsbx_opt_int(L, idx, "max_conns", 0, 1 << 20, 0);
	cfg.connect_timeout_ms =
		(uint32_t)lsbx_opt_int(L, idx, "connect_timeout_ms", 0, 3600000, 0);
	cfg.header_timeout_ms = (uint32_t)lsbx_opt_int(L, idx, "header_timeout_ms", 0, 3600000, 0);
	cfg.idle_timeout_ms = (uint32_t)lsbx_opt_int(L, idx, "idle_timeout_ms", 0, 86400000, 0);

	lsbx_proxy *px = lua_newuserdata(L, sizeof(*px));
	memset(px, 0, sizeof(*px));
	px->ref = LUA_NOREF;
	px->batch = batch;
	px->queries_end = &px->queries;
	px->lines_end = &px->lines;
	luaL_getmetatable(L, LSBX_PROXY_MT);
	lua_setmetatable(L, -2);
	lua_createtable(L, 0, 4);
	lua_getfield(L, idx, "decide");
	lua_setfield(L, -2, "decide");
	lua_getfield(L, idx, "batch");
	lua_setfield(L, -2, "batch");
	lua_getfield(L, idx, "log");
	lua_setfield(L, -2, "log");
	lua_newtable(L);
	lua_setfield(L, -2, "tags");
	px->ref = luaL_ref(L, LUA_REGISTRYINDEX);
	cfg.decide = decide;
	cfg.log = log_line;
	cfg.ud = px;
	px->p = sbx_proxy_new(&cfg, &err);
	if (!px->p)
		luaL_error(L, "proxy: %s", err.msg);
	return px;
}

/* core.proxy_new(opts) */
static int l_proxy_new(lua_State *L)
{
	lsbx_proxy_create(L, 1);
	return 1;
}

/* Tag string -> the small integer the core sees (interned in env.tags). */
void *lsbx_proxy_intern_tag(lua_State *L, lsbx_proxy *px, const char *tag, bool create)
{
	lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref);
	lua_getfield(L, -1, "tags");
	lua_getfield(L, -1, tag);
	intptr_t n = lua_isnumber(L, -1) ? (intptr_t)lua_tointeger(L, -1) : 0;
	lua_pop(L, 1);
	if (!n && create) {
		n = (intptr_t)lua_objlen(L, -1) + 1;
		lua_pushstring(L, tag);
		lua_rawseti(L, -2, (int)n);
		lua_pushinteger(L, n);
		lua_setfield(L, -2, tag);
	}
	lua_pop(L, 2);
	return (void *)n;
}

/* px:add(fd, tag): the proxy takes fd. */
static int l_proxy_add(lua_State *L)
{
	lsbx_proxy *px = check_idle(L, 1);
	int fd = (int)lsbx_arg_int(L, 2, "fd", 0, INT32_MAX, -1);
	const char *tag = luaL_checkstring(L, 3);
	sbx_err err = {0};

	if (sbx_proxy_add_listener(px->p, fd, lsbx_proxy_intern_tag(L, px, tag, true), &err) < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

/* px:remove(tag) */
static int l_proxy_remove(lua_State *L)
{
	lsbx_proxy *px = check_idle(L, 1);
	void *tag = lsbx_proxy_intern_tag(L, px, luaL_checkstring(L, 2), false);

	if (tag)
		sbx_proxy_remove(px->p, tag);
	return 0;
}

static int l_proxy_fd(lua_State *L)
{
	lua_pushinteger(L, sbx_proxy_fd(check_proxy(L, 1)->p));
	return 1;
}

static void free_held(lsbx_proxy *px)
{
	while (px->queries) {
		held_query *h = px->queries;
		px->queries = h->next;
		free(h);
	}
	while (px->lines) {
		held_line *h = px->lines;
		px->lines = h->next;
		free(h);
	}
	px->queries_end = &px->queries;
	px->lines_end = &px->lines;
}

/* The verdict batch's result (at res, or none: res 0 with why) gives the
 * i-th query (1-based). */
static void batch_verdict(lua_State *L, int res, int i, const char *why, sbx_proxy_verdict *v)
{
	memset(v, 0, sizeof(*v));
	if (!res) {
		snprintf(v->reason, sizeof(v->reason), "%s", why);
		return;
	}
	lua_rawgeti(L, res, i);
	if (lua_type(L, -1) == LUA_TTABLE)
		read_verdict(L, lua_gettop(L), v);
	else
		snprintf(v->reason, sizeof(v->reason), "the policy check gave no verdict");
	lua_pop(L, 1);
}

/*
 * Batch mode: hand the held questions and log lines to batch(queries,
 * logs) in one call and give the core its verdicts.  A verdict can raise
 * the next question (ADDRS after NAME) or a log line: another round.  The
 * rounds end: a connection asks at most twice, then dials, resolves
 * (answered in a later step) or is refused.  px->L is L meanwhile, so
 * batch cannot reenter px:step or px:decided.
 */
static void flush(lua_State *L, lsbx_proxy *px)
{
	while (px->queries || px->lines) {
		held_query *qs = px->queries, *h;
		held_line *ls = px->lines;
		int top = lua_gettop(L), res = 0, i;
		char why[300] = "";

		px->queries = NULL;
		px->queries_end = &px->queries;
		px->lines = NULL;
		px->lines_end = &px->lines;
		lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref);
		int env = lua_gettop(L);
		lua_getfield(L, env, "batch");
		lua_newtable(L);
		for (h = qs, i = 1; h; h = h->next, i++) {
			const char *ptrs[SBX_PROXY_MAX_ADDRS];
			sbx_proxy_query q = {.phase = h->phase,
					     .kind = h->kind,
					     .host = h->host,
					     .port = h->port,
					     .addrs = ptrs,
					     .n_addrs = h->n_addrs,
					     .tag = h->tag,
					     .ticket = h->ticket};
			for (size_t k = 0; k < h->n_addrs; k++)
				ptrs[k] = h->addrs[k];
			push_query(L, env, &q);
			lua_rawseti(L, -2, i);
		}
		lua_newtable(L);
		i = 1;
		for (held_line *l = ls; l; l = l->next) {
			lua_pushstring(L, l->text);
			lua_rawseti(L, -2, i++);
		}
		px->lua_calls++;
		if (lsbx_pcall(L, 2, 1, 0) != 0) {
			snprintf(why, sizeof(why), "the policy check failed: %s",
				 lsbx_pcall_message(L, -1));
			for (held_line *l = ls; l; l = l->next)
				fprintf(stderr, "sbx proxy: %s\n", l->text);
		} else if (lua_type(L, -1) != LUA_TTABLE) {
			snprintf(why, sizeof(why), "the policy check gave no verdict");
		} else {
			res = lua_gettop(L);
		}
		while (ls) {
			held_line *l = ls;
			ls = l->next;
			free(l);
		}
		for (i = 1; qs; i++) {
			sbx_proxy_verdict v;
			h = qs;
			qs = h->next;
			batch_verdict(L, res, i, why, &v);
			/* pending: Lua answers later with px:decided */
			if (!(v.pending && !v.allow)) {
				v.pending = false;
				sbx_proxy_decided(px->p, h->ticket, &v);
			}
			free(h);
		}
		lua_settop(L, top);
	}
}

/* Around every call into the core: decide and log reach L meanwhile (and
 * the proxy refuses to be reentered from them); after it, a batch proxy
 * hands what it held to Lua. */
void lsbx_proxy_enter(lua_State *L, lsbx_proxy *px)
{
	if (px->L)
		luaL_error(L, "the proxy is busy (called from its own decide, log or batch)");
	px->L = L;
}

void lsbx_proxy_leave(lua_State *L, lsbx_proxy *px)
{
	if (px->batch)
		flush(L, px);
	px->L = NULL;
}

/* px:step([timeout_ms]) */
static int l_proxy_step(lua_State *L)
{
	lsbx_proxy *px = check_proxy(L, 1);
	int timeout = (int)lsbx_arg_int(L, 2, "timeout_ms", -1, INT32_MAX, 0);
	sbx_err err = {0};

	lsbx_proxy_enter(L, px);
	int rc = sbx_proxy_step(px->p, timeout, &err);
	lsbx_proxy_leave(L, px);
	if (rc < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

int lsbx_proxy_wake(lua_State *L)
{
	lsbx_proxy *px = check_proxy(L, 1);
	int max = (int)lsbx_arg_int(L, 2, "max_steps", 1, 1 << 20, 64);
	struct pollfd pfd = {sbx_proxy_fd(px->p), POLLIN, 0};
	sbx_err err = {0};
	int rc = 0;

	lsbx_proxy_enter(L, px);
	for (int i = 0; i < max; i++)
		if ((rc = sbx_proxy_step(px->p, 0, &err)) < 0 || poll(&pfd, 1, 0) != 1)
			break;
	lsbx_proxy_leave(L, px);
	if (rc < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

/* px:decided(ticket, verdict) -> true | false (the connection is gone) */
static int l_proxy_decided(lua_State *L)
{
	lsbx_proxy *px = check_proxy(L, 1);
	lua_Number ticket = luaL_checknumber(L, 2);
	sbx_proxy_verdict v;

	luaL_checktype(L, 3, LUA_TTABLE);
	memset(&v, 0, sizeof(v));
	read_verdict(L, 3, &v);
	v.pending = false;
	lsbx_proxy_enter(L, px);
	int rc = sbx_proxy_decided(px->p, (uint64_t)ticket, &v);
	lsbx_proxy_leave(L, px);
	lua_pushboolean(L, rc == 0);
	return 1;
}

void lsbx_proxy_push_stats(lua_State *L, const sbx_proxy_stats *s)
{
	sbx_proxy_stats st = *s;

	lua_createtable(L, 0, 8);
#define F(name)                                 \
	lua_pushnumber(L, (lua_Number)st.name); \
	lua_setfield(L, -2, #name)
	F(accepted);
	F(allowed);
	F(refused);
	F(failed);
	F(active);
	F(bytes_up);
	F(bytes_down);
	F(intercepted);
#undef F
}

static int l_proxy_stats(lua_State *L)
{
	sbx_proxy_stats st;

	lsbx_proxy *px = check_proxy(L, 1);

	sbx_proxy_get_stats(px->p, &st);
	lsbx_proxy_push_stats(L, &st);
	lua_pushnumber(L, (lua_Number)px->lua_calls);
	lua_setfield(L, -2, "lua_calls");
	return 1;
}

static int l_proxy_close(lua_State *L)
{
	lsbx_proxy *px = luaL_checkudata(L, 1, LSBX_PROXY_MT);

	/* (never set when collected: a running step holds the userdata) */
	if (px->L)
		return luaL_error(L,
				  "the proxy is busy (called from its own decide, log or batch)");
	sbx_proxy_free(px->p);
	px->p = NULL;
	free_held(px);
	if (px->ref != LUA_NOREF) {
		luaL_unref(L, LUA_REGISTRYINDEX, px->ref);
		px->ref = LUA_NOREF;
	}
	return 0;
}

static int l_proxy_tostring(lua_State *L)
{
	lsbx_proxy *px = luaL_checkudata(L, 1, LSBX_PROXY_MT);
	lua_pushstring(L, px->p ? "sbx.core.proxy" : "sbx.core.proxy(closed)");
	return 1;
}

static const luaL_Reg proxy_methods[] = {
	{"add", l_proxy_add},
	{"remove", l_proxy_remove},
	{"fd", l_proxy_fd},
	{"step", l_proxy_step},
	{"stats", l_proxy_stats},
	{"close", l_proxy_close},
	{"decided", l_proxy_decided},
	{"wake", lsbx_proxy_wake},
	{"secrets", lsbx_proxy_secrets},
	{NULL, NULL},
};

void lsbx_proxy_register(lua_State *L)
{
	lsbx_register_class(L, LSBX_PROXY_MT, proxy_methods, l_proxy_close, l_proxy_tostring);
	lua_pushcfunction(L, l_proxy_new);
	lua_setfield(L, -2, "proxy_new");
	lsbx_proxy_child_register(L);
	lsbx_proxy_secrets_register(L);
}

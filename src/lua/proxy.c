/*
 * proxy.c: the allow-list proxy (src/core/sbx_proxy.h) as Lua sees it.
 *
 *   px = core.proxy_new{ decide = fn, log = fn, max_conns =, connect_timeout_ms =,
 *                        header_timeout_ms =, idle_timeout_ms = }
 *   px:add(listener_fd, tag)   -- serve a listener; tag is a string (a session id)
 *   px:remove(tag)             -- close its listeners and connections
 *   px:fd()                    -- readable when px:step has work (for an event loop)
 *   px:step(timeout_ms)        -- handle what is ready; true | nil, kind, msg
 *   px:decided(ticket, verdict) -- the verdict a decide left pending; false
 *                                  when the connection is gone meanwhile
 *   px:stats()                 -- { accepted, allowed, refused, failed, active, bytes_up, bytes_down }
 *   px:close()
 *
 *   child = core.proxy_spawn(listener_fd, tag, opts)  -- the same proxy in a forked process
 *   child:stats()                                      -- its figures, as px:stats()
 *   child:close()                                      -- ends it
 *
 * decide(q) gets q = { phase = "name" | "addrs", kind, host, port, addrs = {...}, tag,
 * ticket } and returns a verdict table { allow = bool, reason = str, literal = str,
 * resolve = str }, or { pending = true } to answer later with
 * px:decided(q.ticket, verdict) (sbxd: the policy's on_connect runs on its worker).  It runs inside px:step.  Anything but a well-formed
 * allowing verdict denies: a decide that errors, returns garbage or takes a
 * wrong turn refuses the connection (fail closed) and says why in the log.
 *
 * On-device hosts (sbxlua, a plain LuaJIT) have no event loop that runs
 * while the caller's script does something else, so a session's proxy
 * runs in a child process forked from the host: it owns a copy of the Lua
 * state (and so of the policy engine), serves the listener, and ends when
 * the session closes it or the host dies.
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

#include "lsbx.h"
#include "sbx_proxy.h"

#define LSBX_PROXY_MT "sbx.core.proxy"
#define LSBX_PROXY_CHILD_MT "sbx.core.proxy_child"

typedef struct lsbx_proxy {
	sbx_proxy *p;
	lua_State *L; /* set while px:step runs: decide needs it */
	int ref;      /* registry ref of the userdata's env table { decide, log, tags } */
} lsbx_proxy;

typedef struct lsbx_proxy_child {
	pid_t pid;
	int ctl; /* our end: closing it ends the child */
	/* Ask the child for its figures: a byte out, an sbx_proxy_stats back. */
	int stats_fd;
} lsbx_proxy_child;

static const char *const proxy_fields[] = {
	"decide",	   "log", "max_conns", "connect_timeout_ms", "header_timeout_ms",
	"idle_timeout_ms", NULL,
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

static void decide(void *ud, const sbx_proxy_query *q, sbx_proxy_verdict *v)
{
	lsbx_proxy *px = ud;
	lua_State *L = px->L;

	if (!L) {
		snprintf(v->reason, sizeof(v->reason), "the proxy has no policy to ask");
		return;
	}
	int top = lua_gettop(L);
	lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref);
	int env = lua_gettop(L);
	lua_getfield(L, env, "decide");
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

	if (!L) {
		fprintf(stderr, "sbx proxy: %s\n", line);
		return;
	}
	int top = lua_gettop(L);
	lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref);
	lua_getfield(L, -1, "log");
	if (lua_isfunction(L, -1)) {
		lua_pushstring(L, line);
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

/* Build a proxy from the options table at idx; pushes its userdata. */
static lsbx_proxy *proxy_create(lua_State *L, int idx)
{
	sbx_proxy_cfg cfg;
	sbx_err err = {0};

	luaL_checktype(L, idx, LUA_TTABLE);
	lsbx_check_fields(L, idx, "proxy options", proxy_fields);
	lua_getfield(L, idx, "decide");
	if (!lua_isfunction(L, -1))
		luaL_error(L, "field 'decide': function expected, got %s", luaL_typename(L, -1));
	lua_pop(L, 1);
	memset(&cfg, 0, sizeof(cfg));
	cfg.max_conns = (uint32_t)lsbx_opt_int(L, idx, "max_conns", 0, 1 << 20, 0);
	cfg.connect_timeout_ms =
		(uint32_t)lsbx_opt_int(L, idx, "connect_timeout_ms", 0, 3600000, 0);
	cfg.header_timeout_ms = (uint32_t)lsbx_opt_int(L, idx, "header_timeout_ms", 0, 3600000, 0);
	cfg.idle_timeout_ms = (uint32_t)lsbx_opt_int(L, idx, "idle_timeout_ms", 0, 86400000, 0);

	lsbx_proxy *px = lua_newuserdata(L, sizeof(*px));
	px->p = NULL;
	px->L = NULL;
	px->ref = LUA_NOREF;
	luaL_getmetatable(L, LSBX_PROXY_MT);
	lua_setmetatable(L, -2);
	lua_createtable(L, 0, 3);
	lua_getfield(L, idx, "decide");
	lua_setfield(L, -2, "decide");
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
	proxy_create(L, 1);
	return 1;
}

/* Tag string -> the small integer the core sees (interned in env.tags). */
static void *intern_tag(lua_State *L, lsbx_proxy *px, const char *tag, bool create)
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
	lsbx_proxy *px = check_proxy(L, 1);
	int fd = (int)lsbx_arg_int(L, 2, "fd", 0, INT32_MAX, -1);
	const char *tag = luaL_checkstring(L, 3);
	sbx_err err = {0};

	if (sbx_proxy_add_listener(px->p, fd, intern_tag(L, px, tag, true), &err) < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

/* px:remove(tag) */
static int l_proxy_remove(lua_State *L)
{
	lsbx_proxy *px = check_proxy(L, 1);
	void *tag = intern_tag(L, px, luaL_checkstring(L, 2), false);

	if (tag)
		sbx_proxy_remove(px->p, tag);
	return 0;
}

static int l_proxy_fd(lua_State *L)
{
	lua_pushinteger(L, sbx_proxy_fd(check_proxy(L, 1)->p));
	return 1;
}

/* px:step([timeout_ms]) */
static int l_proxy_step(lua_State *L)
{
	lsbx_proxy *px = check_proxy(L, 1);
	int timeout = (int)lsbx_arg_int(L, 2, "timeout_ms", -1, INT32_MAX, 0);
	sbx_err err = {0};

	px->L = L;
	int rc = sbx_proxy_step(px->p, timeout, &err);
	px->L = NULL;
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
	if (px->L)
		return luaL_error(L, "px:decided() inside px:step()");
	memset(&v, 0, sizeof(v));
	read_verdict(L, 3, &v);
	v.pending = false;
	px->L = L;
	int rc = sbx_proxy_decided(px->p, (uint64_t)ticket, &v);
	px->L = NULL;
	lua_pushboolean(L, rc == 0);
	return 1;
}

static void push_stats(lua_State *L, const sbx_proxy_stats *s)
{
	sbx_proxy_stats st = *s;

	lua_createtable(L, 0, 7);
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
#undef F
}

static int l_proxy_stats(lua_State *L)
{
	sbx_proxy_stats st;

	sbx_proxy_get_stats(check_proxy(L, 1)->p, &st);
	push_stats(L, &st);
	return 1;
}

static int l_proxy_close(lua_State *L)
{
	lsbx_proxy *px = luaL_checkudata(L, 1, LSBX_PROXY_MT);

	sbx_proxy_free(px->p);
	px->p = NULL;
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

/* The child: serve until the host closes ctl or dies.  Never returns. */
static __attribute__((noreturn)) void child_serve(lua_State *L, int listener, const char *tag,
						  int ctl, pid_t parent, int stats_fd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	prctl(PR_SET_NAME, "sbx-proxy");
	/* Nothing of the host's may stay open here: a session's control
	 * socket held by us would keep its sandbox alive after the host
	 * closed it. */
	int keep[3] = {listener, ctl, stats_fd}, from = 3;
	for (int i = 0; i < 3; i++) /* sort the three */
		for (int j = i + 1; j < 3; j++)
			if (keep[j] < keep[i]) {
				int t = keep[i];
				keep[i] = keep[j];
				keep[j] = t;
			}
	for (int i = 0; i < 3; i++) {
		if (keep[i] > from)
			syscall(SYS_close_range, (unsigned)from, (unsigned)keep[i] - 1, 0U);
		from = keep[i] + 1;
	}
	syscall(SYS_close_range, (unsigned)from, ~0U, 0U);
	signal(SIGPIPE, SIG_IGN);
	lsbx_proxy *px = proxy_create(L, 3);
	sbx_err err = {0};
	if (sbx_proxy_add_listener(px->p, listener, intern_tag(L, px, tag, true), &err) < 0) {
		fprintf(stderr, "sbx proxy: %s\n", err.msg);
		_exit(1);
	}
	for (;;) {
		struct pollfd pfd[3] = {
			{sbx_proxy_fd(px->p), POLLIN, 0}, {ctl, POLLIN, 0}, {stats_fd, POLLIN, 0}};
		if (poll(pfd, 3, 1000) < 0 && errno != EINTR)
			_exit(1);
		/* The host closed its end (session closed) or died. */
		if (pfd[1].revents)
			_exit(0);
		char q;
		if ((pfd[2].revents & POLLIN) && recv(stats_fd, &q, 1, MSG_DONTWAIT) == 1) {
			sbx_proxy_stats st;
			sbx_proxy_get_stats(px->p, &st);
			(void)!send(stats_fd, &st, sizeof(st), MSG_DONTWAIT | MSG_NOSIGNAL);
		}
		px->L = L;
		int rc = sbx_proxy_step(px->p, 0, &err);
		px->L = NULL;
		if (rc < 0) {
			fprintf(stderr, "sbx proxy: %s\n", err.msg);
			_exit(1);
		}
	}
}

/* core.proxy_spawn(listener_fd, tag, opts) -> child */
static int l_proxy_spawn(lua_State *L)
{
	int listener = (int)lsbx_arg_int(L, 1, "fd", 0, INT32_MAX, -1);
	const char *tag = luaL_checkstring(L, 2);
	int ctl[2];

	luaL_checktype(L, 3, LUA_TTABLE);
	lua_settop(L, 3);
	lsbx_check_fields(L, 3, "proxy options", proxy_fields);
	lsbx_proxy_child *c = lua_newuserdata(L, sizeof(*c));
	c->pid = -1;
	c->ctl = -1;
	c->stats_fd = -1;
	luaL_getmetatable(L, LSBX_PROXY_CHILD_MT);
	lua_setmetatable(L, -2);
	if (pipe2(ctl, O_CLOEXEC) != 0)
		return lsbx_push_fail(L, SBX_E_EXECUTION, "pipe failed");
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) != 0) {
		close(ctl[0]);
		close(ctl[1]);
		return lsbx_push_fail(L, SBX_E_EXECUTION, "socketpair failed");
	}
	pid_t parent = getpid();
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		close(ctl[0]);
		close(ctl[1]);
		close(sp[0]);
		close(sp[1]);
		return lsbx_push_fail(L, SBX_E_EXECUTION, "fork failed");
	}
	if (pid == 0) {
		close(ctl[1]);
		lua_pop(L, 1);
		close(sp[0]);
		child_serve(L, listener, tag, ctl[0], parent, sp[1]);
	}
	close(ctl[0]);
	close(sp[1]);
	close(listener);
	c->stats_fd = sp[0];
	c->pid = pid;
	c->ctl = ctl[1];
	return 1;
}

static int l_child_close(lua_State *L)
{
	lsbx_proxy_child *c = luaL_checkudata(L, 1, LSBX_PROXY_CHILD_MT);

	if (c->ctl >= 0) {
		close(c->ctl);
		c->ctl = -1;
	}
	if (c->pid > 0) {
		kill(c->pid, SIGKILL);
		while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
			;
		c->pid = -1;
	}
	if (c->stats_fd >= 0) {
		close(c->stats_fd);
		c->stats_fd = -1;
	}
	return 0;
}

static int l_child_stats(lua_State *L)
{
	lsbx_proxy_child *c = luaL_checkudata(L, 1, LSBX_PROXY_CHILD_MT);
	sbx_proxy_stats st;
	struct pollfd pfd = {c->stats_fd, POLLIN, 0};

	/* Drop a late answer to an earlier question, ask, wait a moment. */
	while (c->stats_fd >= 0 && recv(c->stats_fd, &st, sizeof(st), MSG_DONTWAIT) > 0)
		;
	if (c->stats_fd < 0 || send(c->stats_fd, "?", 1, MSG_NOSIGNAL) != 1 ||
	    poll(&pfd, 1, 2000) != 1 || recv(c->stats_fd, &st, sizeof(st), 0) != sizeof(st))
		return lsbx_push_fail(L, SBX_E_EXECUTION, "the proxy child did not answer");
	push_stats(L, &st);
	return 1;
}

static int l_child_tostring(lua_State *L)
{
	lsbx_proxy_child *c = luaL_checkudata(L, 1, LSBX_PROXY_CHILD_MT);
	lua_pushfstring(L, "sbx.core.proxy_child(%d)", (int)c->pid);
	return 1;
}

static const luaL_Reg proxy_methods[] = {
	{"add", l_proxy_add},	      {"remove", l_proxy_remove},
	{"fd", l_proxy_fd},	      {"step", l_proxy_step},
	{"stats", l_proxy_stats},     {"close", l_proxy_close},
	{"decided", l_proxy_decided}, {NULL, NULL},
};

static const luaL_Reg child_methods[] = {
	{"close", l_child_close},
	{"stats", l_child_stats},
	{NULL, NULL},
};

void lsbx_proxy_register(lua_State *L)
{
	lsbx_register_class(L, LSBX_PROXY_MT, proxy_methods, l_proxy_close, l_proxy_tostring);
	lsbx_register_class(L, LSBX_PROXY_CHILD_MT, child_methods, l_child_close, l_child_tostring);
	lua_pushcfunction(L, l_proxy_new);
	lua_setfield(L, -2, "proxy_new");
	lua_pushcfunction(L, l_proxy_spawn);
	lua_setfield(L, -2, "proxy_spawn");
}

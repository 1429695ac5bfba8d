/*
 * proxy_child.c: the allow-list proxy in a child process, for on-device
 * hosts.
 *
 *   child = core.proxy_spawn(listener_fd, tag, opts)  -- opts as core.proxy_new's
 *   child:stats()                                      -- its figures, as px:stats()
 *   child:close()                                      -- ends it
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

#include "lproxy.h"
#include "lsbx.h"
#include "sbx_proxy.h"

#define LSBX_PROXY_CHILD_MT "sbx.core.proxy_child"

typedef struct lsbx_proxy_child {
	pid_t pid;
	int ctl; /* our end: closing it ends the child */
	/* Ask the child for its figures: a byte out, an sbx_proxy_stats back. */
	int stats_fd;
} lsbx_proxy_child;

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
	lsbx_proxy *px = lsbx_proxy_create(L, 3);
	sbx_err err = {0};
	if (sbx_proxy_add_listener(px->p, listener, lsbx_proxy_intern_tag(L, px, tag, true), &err) <
	    0) {
		fprintf(stderr, "sbx proxy: %s\n", err.msg);
		_exit(1);
	}
	lua_getfield(L, 3, "secrets");
	if (!lua_isnil(L, -1) &&
	    lsbx_proxy_apply_secrets(L, px->p, lsbx_proxy_intern_tag(L, px, tag, false), -1)) {
		fprintf(stderr, "sbx proxy: %s\n", lua_tostring(L, -1));
		_exit(1);
	}
	lua_pop(L, 1);
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
		lsbx_proxy_enter(L, px);
		int rc = sbx_proxy_step(px->p, 0, &err);
		lsbx_proxy_leave(L, px);
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
	lsbx_check_fields(L, 3, "proxy options", lsbx_proxy_fields);
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
	lsbx_proxy_push_stats(L, &st);
	return 1;
}

static int l_child_tostring(lua_State *L)
{
	lsbx_proxy_child *c = luaL_checkudata(L, 1, LSBX_PROXY_CHILD_MT);
	lua_pushfstring(L, "sbx.core.proxy_child(%d)", (int)c->pid);
	return 1;
}

static const luaL_Reg child_methods[] = {
	{"close", l_child_close},
	{"stats", l_child_stats},
	{NULL, NULL},
};

void lsbx_proxy_child_register(lua_State *L)
{
	lsbx_register_class(L, LSBX_PROXY_CHILD_MT, child_methods, l_child_close, l_child_tostring);
	lua_pushcfunction(L, l_proxy_spawn);
	lua_setfield(L, -2, "proxy_spawn");
}

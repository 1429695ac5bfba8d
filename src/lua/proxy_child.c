/*
 * proxy_child.c: the allow-list proxy in a child process, for on-device
 * hosts.
 *
 *   child = core.proxy_spawn(listener_fd, tag, opts [, on_add])
 *                                   -- opts as core.proxy_new's
 *   child:add(fd, tag, data)        -- serve one more listener (the child takes fd)
 *   child:remove(tag)               -- close its listeners and connections
 *   child:stats()                   -- its figures, as px:stats()
 *   child:close()                   -- ends it
 *
 * on_add(tag, data) runs in the child (its copy of the Lua state) before
 * the listener of child:add is served, and on_add(tag, nil) after
 * child:remove: how a listener's decide context (a run's own allow-list,
 * as data) reaches the child.  An on_add that fails leaves the listener
 * closed (its connections are refused), never served without it.
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
#include <sys/resource.h>
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
	int cmd_fd; /* child:add and child:remove, one message each */
} lsbx_proxy_child;

/* A command: 'A' (with the fd) or 'R', the tag, '\0', then add's data. */
#define CMD_MAX (64 * 1024)

/* The child's on_add (registry ref), or LUA_NOREF. */
static int on_add_ref = LUA_NOREF;

/* In the child: tell on_add, then add or remove the listener. */
/* The session's secrets (opts.secrets of proxy_spawn, at stack index 3 in
 * the child) for the listener tagged tag: every listener of the session,
 * its own and its runs', substitutes alike.  -1 (logged) on failure. */
static int apply_secrets(lua_State *L, lsbx_proxy *px, const char *tag)
{
	int top = lua_gettop(L), rc = 0;

	lua_getfield(L, 3, "secrets");
	if (!lua_isnil(L, -1) &&
	    lsbx_proxy_apply_secrets(L, px->p, lsbx_proxy_intern_tag(L, px, tag, false), -1)) {
		fprintf(stderr, "sbx proxy: listener %s: %s\n", tag, lua_tostring(L, -1));
		rc = -1;
	}
	lua_settop(L, top);
	return rc;
}

static void child_command(lua_State *L, lsbx_proxy *px, int cmd_fd)
{
	static char buf[CMD_MAX + 1];
	int fd = -1;
	size_t nfds = 0;
	struct iovec iov = {buf, CMD_MAX};
	union {
		char c[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = u.c,
			    .msg_controllen = sizeof(u.c)};
	ssize_t n = recvmsg(cmd_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n == 0)
		_exit(0);
	if (n < 0)
		return;
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
	    c->cmsg_len == CMSG_LEN(sizeof(int))) {
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
		nfds = 1;
	}
	buf[n] = '\0';
	size_t tlen = strnlen(buf + 1, (size_t)n - 1);
	bool add = buf[0] == 'A' && nfds == 1;
	/* The tag is non-empty and NUL-terminated within the message. */
	if (n < 3 || tlen == 0 || tlen + 2 > (size_t)n || (buf[0] != 'A' && buf[0] != 'R')) {
		fprintf(stderr, "sbx proxy: a garbled command from the host\n");
		if (nfds)
			close(fd);
		return;
	}
	const char *tag = buf + 1;
	int top = lua_gettop(L);
	bool ok = true;
	if (on_add_ref != LUA_NOREF) {
		lua_rawgeti(L, LUA_REGISTRYINDEX, on_add_ref);
		lua_pushstring(L, tag);
		if (add)
			lua_pushlstring(L, tag + tlen + 1, (size_t)n - 2 - tlen);
		else
			lua_pushnil(L);
		if (lsbx_pcall(L, 2, 0, 0) != 0) {
			fprintf(stderr, "sbx proxy: listener %s: %s\n", tag,
				lsbx_pcall_message(L, -1));
			ok = false;
		}
		lua_settop(L, top);
	}
	if (!add) {
		void *t = lsbx_proxy_intern_tag(L, px, tag, false);
		if (t)
			sbx_proxy_remove(px->p, t);
		if (nfds)
			close(fd);
		return;
	}
	sbx_err err = {0};
	if (!ok) {
		close(fd);
	} else if (sbx_proxy_add_listener(px->p, fd, lsbx_proxy_intern_tag(L, px, tag, true),
					  &err) < 0) {
		fprintf(stderr, "sbx proxy: listener %s: %s\n", tag, err.msg);
	} else if (apply_secrets(L, px, tag) < 0) {
		/* A run's listener without the session's secrets would send
		 * the placeholder on; without its listener the run has no
		 * network, which it sees at once. */
		sbx_proxy_remove(px->p, lsbx_proxy_intern_tag(L, px, tag, false));
	}
}

/* The child: serve until the host closes ctl or dies.  Never returns. */
static __attribute__((noreturn)) void child_serve(lua_State *L, int listener, const char *tag,
						  int ctl, pid_t parent, int stats_fd, int cmd_fd)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(0);
	prctl(PR_SET_NAME, "sbx-proxy");
	/* The session's secret values and its CA key live here, and what is
	 * parsed here comes from the sandbox: a crash writes no core file
	 * (and nothing of the host's user may ptrace it). */
	prctl(PR_SET_DUMPABLE, 0);
	setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
	/* Nothing of the host's may stay open here: a session's control
	 * socket held by us would keep its sandbox alive after the host
	 * closed it. */
	int keep[4] = {listener, ctl, stats_fd, cmd_fd}, from = 3;
	for (int i = 0; i < 4; i++) /* sort the four */
		for (int j = i + 1; j < 4; j++)
			if (keep[j] < keep[i]) {
				int t = keep[i];
				keep[i] = keep[j];
				keep[j] = t;
			}
	for (int i = 0; i < 4; i++) {
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
	if (apply_secrets(L, px, tag) < 0)
		_exit(1);
	for (;;) {
		struct pollfd pfd[4] = {{sbx_proxy_fd(px->p), POLLIN, 0},
					{ctl, POLLIN, 0},
					{stats_fd, POLLIN, 0},
					{cmd_fd, POLLIN, 0}};
		if (poll(pfd, 4, 1000) < 0 && errno != EINTR)
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
		if (pfd[3].revents)
			child_command(L, px, cmd_fd);
		lsbx_proxy_enter(L, px);
		int rc = sbx_proxy_step(px->p, 0, &err);
		lsbx_proxy_leave(L, px);
		if (rc < 0) {
			fprintf(stderr, "sbx proxy: %s\n", err.msg);
			_exit(1);
		}
	}
}

/* core.proxy_spawn(listener_fd, tag, opts [, on_add]) -> child */
static int l_proxy_spawn(lua_State *L)
{
	int listener = (int)lsbx_arg_int(L, 1, "fd", 0, INT32_MAX, -1);
	const char *tag = luaL_checkstring(L, 2);
	int ctl[2];

	luaL_checktype(L, 3, LUA_TTABLE);
	if (!lua_isnoneornil(L, 4))
		luaL_checktype(L, 4, LUA_TFUNCTION);
	lua_settop(L, 4);
	lsbx_check_fields(L, 3, "proxy options", lsbx_proxy_fields);
	lsbx_proxy_child *c = lua_newuserdata(L, sizeof(*c));
	c->pid = -1;
	c->ctl = -1;
	c->stats_fd = -1;
	c->cmd_fd = -1;
	luaL_getmetatable(L, LSBX_PROXY_CHILD_MT);
	lua_setmetatable(L, -2);
	if (pipe2(ctl, O_CLOEXEC) != 0)
		return lsbx_push_fail(L, SBX_E_EXECUTION, "pipe failed");
	int sp[2], cmd[2];
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sp) != 0) {
		close(ctl[0]);
		close(ctl[1]);
		return lsbx_push_fail(L, SBX_E_EXECUTION, "socketpair failed");
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, cmd) != 0) {
		close(ctl[0]);
		close(ctl[1]);
		close(sp[0]);
		close(sp[1]);
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
		close(cmd[0]);
		close(cmd[1]);
		return lsbx_push_fail(L, SBX_E_EXECUTION, "fork failed");
	}
	if (pid == 0) {
		close(ctl[1]);
		lua_pop(L, 1);
		close(sp[0]);
		close(cmd[0]);
		if (!lua_isnil(L, 4)) {
			lua_pushvalue(L, 4);
			on_add_ref = luaL_ref(L, LUA_REGISTRYINDEX);
		}
		child_serve(L, listener, tag, ctl[0], parent, sp[1], cmd[1]);
	}
	close(ctl[0]);
	close(sp[1]);
	close(cmd[1]);
	c->cmd_fd = cmd[0];
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
	if (c->cmd_fd >= 0) {
		close(c->cmd_fd);
		c->cmd_fd = -1;
	}
	return 0;
}

/* Send one command ('A' with fd, or 'R'); the child takes it in order. */
static int send_command(lua_State *L, lsbx_proxy_child *c, char op, const char *tag,
			const char *data, size_t dlen, int fd)
{
	size_t tlen = strlen(tag);
	if (c->cmd_fd < 0)
		return lsbx_push_fail(L, SBX_E_EXECUTION, "the proxy child is closed");
	if (tlen == 0 || 2 + tlen + dlen > CMD_MAX)
		return lsbx_push_fail(L, SBX_E_INVALID_ARGUMENT,
				      "the listener's tag and data are empty or over 64 KiB");
	char *buf = malloc(2 + tlen + dlen);
	if (!buf)
		return lsbx_push_fail(L, SBX_E_EXECUTION, "out of memory");
	buf[0] = op;
	memcpy(buf + 1, tag, tlen + 1);
	if (dlen)
		memcpy(buf + 2 + tlen, data, dlen);
	struct iovec iov = {buf, 2 + tlen + dlen};
	union {
		char c[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.c;
		mh.msg_controllen = sizeof(u.c);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	ssize_t n;
	while ((n = sendmsg(c->cmd_fd, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	int e = errno;
	free(buf);
	if (n < 0)
		return lsbx_push_fail(L, SBX_E_EXECUTION, strerror(e));
	lua_pushboolean(L, 1);
	return 1;
}

/* child:add(fd, tag, data) -> true | nil, kind, msg; fd is the child's
 * (closed here either way). */
static int l_child_add(lua_State *L)
{
	lsbx_proxy_child *c = luaL_checkudata(L, 1, LSBX_PROXY_CHILD_MT);
	int fd = (int)lsbx_arg_int(L, 2, "fd", 0, INT32_MAX, -1);
	const char *tag = luaL_checkstring(L, 3);
	size_t dlen = 0;
	const char *data = luaL_optlstring(L, 4, "", &dlen);
	int n = send_command(L, c, 'A', tag, data, dlen, fd);
	close(fd);
	return n;
}

/* child:remove(tag) -> true | nil, kind, msg */
static int l_child_remove(lua_State *L)
{
	lsbx_proxy_child *c = luaL_checkudata(L, 1, LSBX_PROXY_CHILD_MT);
	return send_command(L, c, 'R', luaL_checkstring(L, 2), NULL, 0, -1);
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
	{"add", l_child_add},
	{"remove", l_child_remove},
	{NULL, NULL},
};

void lsbx_proxy_child_register(lua_State *L)
{
	lsbx_register_class(L, LSBX_PROXY_CHILD_MT, child_methods, l_child_close, l_child_tostring);
	lua_pushcfunction(L, l_proxy_spawn);
	lua_setfield(L, -2, "proxy_spawn");
}

/*
 * tty.c: the sbx.tty module, what the REPL needs to hand its terminal to an
 * interactive run (lua/sbx/repl.lua's `!cmd` and `:shell`): raw mode and
 * back, the window size, and a bounded wait-and-read of stdin.
 *
 *   raw()              -> true | nil, msg: stdin's terminal in raw mode (no
 *                         echo, no line editing, no signal keys: ^C and ^Z
 *                         reach the sandboxed program as bytes); the mode
 *                         before is kept for restore()
 *   restore()          -> true: the mode raw() found
 *   size()             -> rows, cols of stdout's terminal (nil if none)
 *   read(timeout_ms)   -> bytes | "" (nothing in time) | nil (end of input)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"

static struct termios saved;
static int have_saved;

static int l_raw(lua_State *L)
{
	struct termios t;

	if (tcgetattr(STDIN_FILENO, &t) != 0) {
		lua_pushnil(L);
		lua_pushstring(L, strerror(errno));
		return 2;
	}
	if (!have_saved) {
		saved = t;
		have_saved = 1;
	}
	cfmakeraw(&t);
	if (tcsetattr(STDIN_FILENO, TCSADRAIN, &t) != 0) {
		lua_pushnil(L);
		lua_pushstring(L, strerror(errno));
		return 2;
	}
	lua_pushboolean(L, 1);
	return 1;
}

static int l_restore(lua_State *L)
{
	if (have_saved)
		tcsetattr(STDIN_FILENO, TCSADRAIN, &saved);
	have_saved = 0;
	lua_pushboolean(L, 1);
	return 1;
}

static int l_size(lua_State *L)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) {
		lua_pushnil(L);
		return 1;
	}
	lua_pushinteger(L, ws.ws_row);
	lua_pushinteger(L, ws.ws_col);
	return 2;
}

static int l_read(lua_State *L)
{
	struct pollfd p = {STDIN_FILENO, POLLIN, 0};
	char buf[4096];
	int n = poll(&p, 1, (int)luaL_optinteger(L, 1, 0));

	if (n <= 0) {
		lua_pushliteral(L, "");
		return 1;
	}
	ssize_t got = read(STDIN_FILENO, buf, sizeof(buf));
	if (got < 0 && (errno == EINTR || errno == EAGAIN)) {
		lua_pushliteral(L, "");
		return 1;
	}
	if (got <= 0) {
		lua_pushnil(L);
		return 1;
	}
	lua_pushlstring(L, buf, (size_t)got);
	return 1;
}

int sbx_cli_open_tty(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{"raw", l_raw},	  {"restore", l_restore}, {"size", l_size},
		{"read", l_read}, {NULL, NULL},
	};

	lua_newtable(L);
	luaL_register(L, NULL, fns);
	return 1;
}

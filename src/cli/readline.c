/*
 * readline.c: the sbx.readline module, libedit's line editor and history
 * for the REPL (lua/sbx/repl.lua), plus the interruptible protected call
 * the REPL evaluates each line with.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>
#include <lauxlib.h>
#include <lua.h>

#include "cli.h"

static volatile sig_atomic_t interrupted;

static void on_sigint(int signo)
{
	(void)signo;
	interrupted = 1;
}

/*
 * readline([prompt]) -> line | nil (end of input) | false (Ctrl-C).
 * Ctrl-C abandons the line being typed instead of killing sbxlua: SIGINT is
 * caught without SA_RESTART for the duration, so libedit's read() fails
 * with EINTR and readline() returns.
 */
static int l_readline(lua_State *L)
{
	const char *prompt = luaL_optstring(L, 1, "> ");
	struct sigaction sa, old;
	char *line;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint;
	sigemptyset(&sa.sa_mask);
	interrupted = 0;
	sigaction(SIGINT, &sa, &old);
	line = readline(prompt);
	sigaction(SIGINT, &old, NULL);
	if (interrupted) {
		free(line);
		lua_pushboolean(L, 0);
		return 1;
	}
	if (!line) {
		lua_pushnil(L);
		return 1;
	}
	lua_pushstring(L, line);
	free(line);
	return 1;
}

/* add_history(line): make line reachable with the up arrow. */
static int l_add_history(lua_State *L)
{
	add_history(luaL_checkstring(L, 1));
	return 0;
}

/* isatty() -> true when stdin is a terminal (the REPL then edits lines). */
static int l_isatty(lua_State *L)
{
	lua_pushboolean(L, isatty(STDIN_FILENO));
	return 1;
}

/*
 * call(f, ...) -> true, results... | false, err.  Like pcall, but Ctrl-C
 * while f runs raises "interrupted!" inside f.  err is the error object as
 * raised (no traceback), so sbx error tables keep their kind.
 */
static int l_call(lua_State *L)
{
	int narg = lua_gettop(L) - 1;

	luaL_checktype(L, 1, LUA_TFUNCTION);
	if (sbx_cli_pcall(L, narg, LUA_MULTRET, false) != 0) {
		lua_pushboolean(L, 0);
		lua_insert(L, -2);
		return 2;
	}
	lua_pushboolean(L, 1);
	lua_insert(L, 1);
	return lua_gettop(L);
}

int sbx_cli_open_readline(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{"readline", l_readline},
		{"add_history", l_add_history},
		{"isatty", l_isatty},
		{"call", l_call},
		{NULL, NULL},
	};

	/* We handle SIGINT ourselves; libedit's handler would re-raise it and kill us. */
	rl_catch_signals = 0;
	rl_readline_name = "sbxlua";
	lua_newtable(L);
	luaL_register(L, NULL, fns);
	return 1;
}

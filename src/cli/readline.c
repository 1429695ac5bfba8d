/*
 * readline.c: the sbx.readline module, libedit's line editor, history and
 * tab completion for the REPL (lua/sbx/repl.lua), plus the interruptible
 * protected call the REPL evaluates each line with.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <editline/readline.h>
#include <lauxlib.h>
#include <lua.h>

#include "../lua/lsbx.h"
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

/* The Lua state and registry ref of the completion function while
 * readline() runs; libedit's callbacks have no user pointer. */
static lua_State *complete_L;
static int complete_ref = LUA_NOREF;

/* One match per call, as libedit's generator protocol wants: the Lua
 * function is asked once (state 0) for every candidate of text. */
static char *complete_next(const char *text, int state)
{
	static int n, i;
	lua_State *L = complete_L;

	if (state == 0) {
		n = i = 0;
		lua_rawgeti(L, LUA_REGISTRYINDEX, complete_ref);
		lua_pushstring(L, text);
		lua_pushlstring(L, rl_line_buffer, (size_t)rl_point);
		if (lsbx_pcall(L, 2, 1, 0) != 0 || !lua_istable(L, -1)) {
			lua_pop(L, 1);
			return NULL;
		}
		n = (int)lua_objlen(L, -1);
		lua_setfield(L, LUA_REGISTRYINDEX, "sbx.readline.matches");
	}
	if (i >= n)
		return NULL;
	lua_getfield(L, LUA_REGISTRYINDEX, "sbx.readline.matches");
	lua_rawgeti(L, -1, ++i);
	const char *m = lua_tostring(L, -1);
	char *copy = m ? strdup(m) : NULL;
	lua_pop(L, 2);
	return copy;
}

static char **complete(const char *text, int start, int end)
{
	(void)start;
	(void)end;
	/* Never fall back to file names: this is Lua, not a shell; and no
	 * space after a match, which is often followed by '.', ':' or '('. */
	rl_attempted_completion_over = 1;
	rl_completion_append_character = '\0';
	return rl_completion_matches(text, complete_next);
}

/* set_completer(fn): fn(word, line_before_cursor) -> { candidates } */
static int l_set_completer(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TFUNCTION);
	if (complete_ref != LUA_NOREF)
		luaL_unref(L, LUA_REGISTRYINDEX, complete_ref);
	lua_pushvalue(L, 1);
	complete_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	complete_L = L;
	rl_attempted_completion_function = complete;
	/* Complete whole paths like s:ru or string.fo: '.' and ':' are part of
	 * the word. */
	rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,+-*/%^#~[]";
	return 0;
}

/* read_history(path) / write_history(path [, max_lines]) -> true | nil, err */
static int l_read_history(lua_State *L)
{
	int rc = read_history(luaL_checkstring(L, 1));
	if (rc != 0) {
		lua_pushnil(L);
		lua_pushstring(L, strerror(rc));
		return 2;
	}
	lua_pushboolean(L, 1);
	return 1;
}

/* History is written only to a regular file or a new one: libedit's
 * write_history fchmods what it opened to 0600, so SBXLUA_HISTORY=/dev/null
 * run as root would take the host's /dev/null away from everyone else. */
static int history_target_ok(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return errno == ENOENT;
	return S_ISREG(st.st_mode);
}

static int l_write_history(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1);
	if (!history_target_ok(path)) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s: not a regular file, history not saved", path);
		return 2;
	}
	stifle_history((int)luaL_optinteger(L, 2, 1000));
	int rc = write_history(path);
	if (rc != 0) {
		lua_pushnil(L);
		lua_pushstring(L, strerror(rc));
		return 2;
	}
	lua_pushboolean(L, 1);
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
		{"set_completer", l_set_completer},
		{"read_history", l_read_history},
		{"write_history", l_write_history},
		{NULL, NULL},
	};

	/* We handle SIGINT ourselves; libedit's handler would re-raise it and kill us. */
	rl_catch_signals = 0;
	rl_readline_name = "sbxlua";
	lua_newtable(L);
	luaL_register(L, NULL, fns);
	return 1;
}

/*
 * cli.h: what the files of sbxlua share: the modules it preloads next to
 * sbx.core, and the protected call that turns Ctrl-C into a Lua error.
 */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <stdbool.h>

#include <lua.h>

/* The sbx.core module (src/lua/), linked into sbxlua and preloaded. */
int luaopen_sbx_core(lua_State *L);

/* sbx.readline: readline(prompt) -> string|nil, add_history(line),
 * isatty() -> bool (is stdin a terminal), call(f, ...) -> ok, ... */
int sbx_cli_open_readline(lua_State *L);

/* sbx.tty: raw(), restore(), size() -> rows, cols, read(timeout_ms)
 * (tty.c): the REPL's terminal handed to an interactive run. */
int sbx_cli_open_tty(lua_State *L);

/* sbx.clock: now_ns() -> number, CLOCK_MONOTONIC in nanoseconds. */
int sbx_cli_open_clock(lua_State *L);

/*
 * Call the function below its narg arguments on the stack, like lua_pcall,
 * with SIGINT turned into the Lua error "interrupted!" for the duration.
 * With traceback, a failing call leaves "message\ntraceback" (a string);
 * without, the error object as raised.  Returns lua_pcall's status.
 */
int sbx_cli_pcall(lua_State *L, int narg, int nres, bool traceback);

#endif

/*
 * clock.c: the sbx.clock module, a monotonic clock for benchmarks and
 * timing in scripts (os.clock is CPU time, os.time whole seconds).
 */
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "cli.h"

/* now_ns() -> CLOCK_MONOTONIC in nanoseconds (a double: exact to 2^53 ns, 104 days). */
static int l_now_ns(lua_State *L)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	lua_pushnumber(L, (lua_Number)ts.tv_sec * 1e9 + (lua_Number)ts.tv_nsec);
	return 1;
}

int sbx_cli_open_clock(lua_State *L)
{
	static const luaL_Reg fns[] = {
		{"now_ns", l_now_ns},
		{NULL, NULL},
	};

	lua_newtable(L);
	luaL_register(L, NULL, fns);
	return 1;
}

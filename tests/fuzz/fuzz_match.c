/*
 * fuzz_match.c: libFuzzer target for the network policy matchers and IP
 * normalization (lua/sbx/match.lua, match/ip.lua, match/idna.lua).
 *
 * Embeds LuaJIT, loads tests/fuzz/match_driver.lua (which holds the
 * properties), and calls its function with each input as a Lua string
 * under pcall.  The driver returns normally when every property holds;
 * any Lua error (a property it asserts, or an unexpected error inside the
 * matchers: they must answer nil, why / raise InvalidArgument, never
 * anything else) aborts, so libFuzzer records the input as a crash.
 *
 * The Lua code is not compiled by clang, so libFuzzer would be blind to it:
 * a line hook feeds Lua coverage back instead, one counter per (chunk,
 * line, previous line) in libFuzzer's extra-counters section.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#ifndef SBX_SOURCE_DIR
#error "build with -DSBX_SOURCE_DIR=\"...\""
#endif

static lua_State *L;
static int fn_ref;

#define NCOUNTERS 65536
__attribute__((section("__libfuzzer_extra_counters"))) static uint8_t lua_cov[NCOUNTERS];
static uintptr_t prev_loc;

static void line_hook(lua_State *S, lua_Debug *ar)
{
	if (!lua_getinfo(S, "S", ar))
		return;
	uintptr_t loc = (uintptr_t)ar->source * 31u + (uintptr_t)ar->currentline;
	uintptr_t h = (loc ^ (prev_loc >> 1)) * 0x9E3779B1u;
	lua_cov[(h >> 7) % NCOUNTERS]++;
	prev_loc = loc;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	L = luaL_newstate();
	if (!L)
		abort();
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_pushstring(L, SBX_SOURCE_DIR "/lua/?.lua;" SBX_SOURCE_DIR "/lua/?/init.lua");
	lua_setfield(L, -2, "path");
	lua_pop(L, 1);
	if (luaL_dofile(L, SBX_SOURCE_DIR "/tests/fuzz/match_driver.lua") != 0) {
		fprintf(stderr, "fuzz_match: %s\n", lua_tostring(L, -1));
		abort();
	}
	if (!lua_isfunction(L, -1)) {
		fprintf(stderr, "fuzz_match: match_driver.lua must return a function\n");
		abort();
	}
	fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_sethook(L, line_hook, LUA_MASKLINE, 0);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	prev_loc = 0;
	lua_rawgeti(L, LUA_REGISTRYINDEX, fn_ref);
	lua_pushlstring(L, (const char *)data, size);
	if (lua_pcall(L, 1, 0, 0) != 0) {
		fprintf(stderr, "fuzz_match: PROPERTY VIOLATED: %s\n", lua_tostring(L, -1));
		abort();
	}
	lua_settop(L, 0);
	static unsigned long n;
	if (++n % 256 == 0)
		lua_gc(L, LUA_GCCOLLECT, 0);
	return 0;
}

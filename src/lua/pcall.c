/*
 * pcall.c: the one protected call every C -> Lua entry goes through
 * (sbxd's handlers, its policy worker and proxy callbacks, sbxlua).
 *
 * lua_pcall with a message handler that takes a traceback at the point of
 * the error, before the stack unwinds.  The error object itself stays as
 * raised unless the caller asks for text: an sbx error table keeps its
 * kind, so callers branch on fields, never on message text.
 */
#include "lsbx.h"

#define LSBX_TRACEBACK_KEY "sbx.pcall.traceback"

/* "Kind: message" of an error table (its __tostring, or its fields), the
 * string itself, or what type the error object is.  Pushes one string. */
static const char *push_message(lua_State *L, int idx)
{
	const char *msg = lua_tostring(L, idx);

	if (msg) {
		lua_pushvalue(L, idx);
		return msg;
	}
	if (luaL_callmeta(L, idx, "__tostring")) {
		if (lua_type(L, -1) == LUA_TSTRING)
			return lua_tostring(L, -1);
		lua_pop(L, 1);
	}
	if (lua_type(L, idx) == LUA_TTABLE) {
		lua_getfield(L, idx, "kind");
		lua_getfield(L, idx, "message");
		if (lua_isstring(L, -2) && lua_isstring(L, -1)) {
			msg = lua_pushfstring(L, "%s: %s", lua_tostring(L, -2),
					      lua_tostring(L, -1));
			lua_replace(L, -3);
			lua_pop(L, 1);
			return msg;
		}
		lua_pop(L, 2);
	}
	return lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, idx));
}

/* The message handler: "message\ntraceback" into the registry; the error
 * object goes on unchanged. */
static int on_error(lua_State *L)
{
	push_message(L, 1);
	luaL_traceback(L, L, lua_tostring(L, -1), 1);
	lua_setfield(L, LUA_REGISTRYINDEX, LSBX_TRACEBACK_KEY);
	lua_settop(L, 1);
	return 1;
}

int lsbx_pcall(lua_State *L, int narg, int nres, int flags)
{
	int base = lua_gettop(L) - narg; /* where the function is */
	int status;

	lua_pushcfunction(L, on_error);
	lua_insert(L, base);
	status = lua_pcall(L, narg, nres, base);
	lua_remove(L, base);
	if (status != 0 && status != LUA_ERRRUN) {
		/* LUA_ERRMEM/ERRERR skip the handler: no stale traceback. */
		lua_pushnil(L);
		lua_setfield(L, LUA_REGISTRYINDEX, LSBX_TRACEBACK_KEY);
	}
	if (status != 0 && (flags & LSBX_PCALL_TEXT)) {
		if (lsbx_pcall_traceback(L))
			lua_remove(L, -2);
		else
			lsbx_pcall_message(L, -1);
	}
	return status;
}

int lsbx_pcall_traceback(lua_State *L)
{
	lua_getfield(L, LUA_REGISTRYINDEX, LSBX_TRACEBACK_KEY);
	if (lua_type(L, -1) == LUA_TSTRING)
		return 1;
	lua_pop(L, 1);
	return 0;
}

const char *lsbx_pcall_message(lua_State *L, int idx)
{
	const char *msg;

	idx = idx > 0 || idx <= LUA_REGISTRYINDEX ? idx : lua_gettop(L) + idx + 1;
	msg = push_message(L, idx);
	lua_replace(L, idx);
	return msg;
}

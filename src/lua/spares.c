/*
 * spares.c: sbx.core's spare sessions (libsbx's spare.c): keep some
 * sessions of one shape opened ahead, flush them, read the pool's counts.
 */
#include <lauxlib.h>
#include <lua.h>

#include "lsbx.h"

/* core.spares_keep(opts, n [, follow]) -> true | nil, kind, msg; opts are
 * the session options core.session_open takes (spare_tag names the
 * policy); follow: sbx_spares_follow (a new shape only when asked twice). */
int lsbx_spares_keep(lua_State *L)
{
	sbx_session_opts o;
	const char *tag;
	sbx_err err = {0};
	lua_Integer n = luaL_checkinteger(L, 2);
	int follow = lua_toboolean(L, 3);

	if (n < 0 || n > SBX_SPARES_MAX)
		return luaL_error(L, "spare sessions: n must be 0..%d, got %d", SBX_SPARES_MAX,
				  (int)n);
	lua_settop(L, 1);
	lsbx_session_opts(L, &o, &tag);
	if ((follow ? sbx_spares_follow : sbx_spares_keep)(&o, (unsigned)n, tag, &err) < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

/* core.spares_flush(): close every spare, forget the shape. */
int lsbx_spares_flush(lua_State *L)
{
	(void)L;
	sbx_spares_flush();
	return 0;
}

/* core.spares_stats() -> { want, ready, making, made, taken, missed, dead,
 * failed, flushed, last_error } */
int lsbx_spares_stats(lua_State *L)
{
	sbx_spares_stats st;

	sbx_spares_get_stats(&st);
	lua_createtable(L, 0, 10);
	lua_pushinteger(L, st.want);
	lua_setfield(L, -2, "want");
	lua_pushinteger(L, st.ready);
	lua_setfield(L, -2, "ready");
	lua_pushboolean(L, st.making);
	lua_setfield(L, -2, "making");
	lua_pushnumber(L, (lua_Number)st.made);
	lua_setfield(L, -2, "made");
	lua_pushnumber(L, (lua_Number)st.taken);
	lua_setfield(L, -2, "taken");
	lua_pushnumber(L, (lua_Number)st.missed);
	lua_setfield(L, -2, "missed");
	lua_pushnumber(L, (lua_Number)st.dead);
	lua_setfield(L, -2, "dead");
	lua_pushnumber(L, (lua_Number)st.failed);
	lua_setfield(L, -2, "failed");
	lua_pushnumber(L, (lua_Number)st.flushed);
	lua_setfield(L, -2, "flushed");
	lua_pushstring(L, st.last_error);
	lua_setfield(L, -2, "last_error");
	return 1;
}

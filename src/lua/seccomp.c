/*
 * seccomp.c: the effective syscall profile as Lua sees it, so a policy
 * load can check its seccomp lists (fail closed) and --check-policy can
 * print what a run will be allowed.
 *
 *   p = core.seccomp_profile{ deny = {names}, allow = {names} }
 *     -> { arch = "x86_64", default_action = "ENOSYS",
 *          allowed = {names}, args = { name = "what is refused" },
 *          refused = { name = "EPERM" }, widenable = {names} }
 *   or nil, message (an unknown or non-widenable name, no table here)
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "lsbx.h"

static const char *const profile_fields[] = {"deny", "allow", NULL};

/* Push t[#t + 1] = s for the table at idx. */
static void append(lua_State *L, int idx, const char *s)
{
	lua_pushstring(L, s);
	lua_rawseti(L, idx, (int)lua_objlen(L, idx) + 1);
}

int lsbx_seccomp_profile(lua_State *L)
{
	const char **deny, **allow;
	sbx_seccomp_entry *v;
	sbx_err err = {0};
	size_t n, i;
	int t;

	luaL_checktype(L, 1, LUA_TTABLE);
	lua_settop(L, 1);
	lsbx_check_fields(L, 1, "seccomp_profile options", profile_fields);
	deny = lsbx_opt_strv(L, 1, "deny", false, NULL);
	allow = lsbx_opt_strv(L, 1, "allow", false, NULL);
	v = sbx_seccomp_profile(deny, allow, &n, &err);
	if (!v) {
		lua_pushnil(L);
		lua_pushstring(L, err.msg);
		return 2;
	}
	lua_createtable(L, 0, 6);
	t = lua_gettop(L);
	lua_pushstring(L, sbx_seccomp_arch());
	lua_setfield(L, t, "arch");
	lua_pushliteral(L, "ENOSYS");
	lua_setfield(L, t, "default_action");
	lua_newtable(L); /* t+1 allowed */
	lua_newtable(L); /* t+2 args */
	lua_newtable(L); /* t+3 refused */
	lua_newtable(L); /* t+4 widenable */
	for (i = 0; i < n; i++) {
		const sbx_seccomp_entry *e = &v[i];
		const char *en;

		if (e->widenable)
			append(L, t + 4, e->name);
		switch (e->action) {
		case SBX_SC_ALLOWED:
			append(L, t + 1, e->name);
			break;
		case SBX_SC_ARGS:
			lua_pushstring(L, e->rule);
			lua_setfield(L, t + 2, e->name);
			break;
		case SBX_SC_REFUSED:
			/* every refusal, the default ENOSYS ones included, so
			 * the printout answers "what does X get" for any X */
			en = strerrorname_np(e->err);
			lua_pushstring(L, en ? en : "E?");
			lua_setfield(L, t + 3, e->name);
			break;
		}
	}
	free(v);
	lua_setfield(L, t, "widenable");
	lua_setfield(L, t, "refused");
	lua_setfield(L, t, "args");
	lua_setfield(L, t, "allowed");
	return 1;
}

/*
 * args.c: strict checking of the values Lua hands to sbx.core.
 *
 * The binding is called by the modules of lua/sbx/, which validate user
 * input and turn it into documented error tables first; anything wrong that still
 * reaches C is a bug of the caller, so it raises a Lua error naming the
 * field.  Fields are read with rawget: a table with metamethods cannot run
 * code in the middle of a C call, and the strings we point into stay owned
 * by the table, which is on the stack for the whole call.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lsbx.h"

/* Arrays longer than this are refused: no option needs them, and the count
 * bounds what a caller can make us allocate. */
#define LSBX_MAX_ARRAY 65536

static int abs_index(lua_State *L, int idx)
{
	return (idx > 0 || idx <= LUA_REGISTRYINDEX) ? idx : lua_gettop(L) + idx + 1;
}

/* The condition a caller may branch on within a kind, from the errno the
 * core recorded: never parsed out of the message. */
static const char *err_code(const sbx_err *err)
{
	switch (err->sys_errno) {
	case ENOENT:
		return "not_found";
	case EFBIG:
		return "too_large";
	default:
		return NULL;
	}
}

int lsbx_push_err(lua_State *L, const sbx_err *err)
{
	const char *code = err_code(err);

	lua_pushnil(L);
	lua_pushstring(L, sbx_err_kind_name(err->kind == SBX_E_NONE ? SBX_E_EXECUTION : err->kind));
	lua_pushstring(L, err->msg[0] ? err->msg : "unknown failure (no message)");
	if (!code)
		return 3;
	lua_pushstring(L, code);
	return 4;
}

int lsbx_push_fail(lua_State *L, sbx_err_kind kind, const char *msg)
{
	lua_pushnil(L);
	lua_pushstring(L, sbx_err_kind_name(kind));
	lua_pushstring(L, msg);
	return 3;
}

void lsbx_check_fields(lua_State *L, int idx, const char *what, const char *const *allowed)
{
	idx = abs_index(L, idx);
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		const char *const *a;
		const char *key;

		lua_pop(L, 1);
		if (lua_type(L, -1) != LUA_TSTRING)
			luaL_error(L, "%s: unexpected %s key", what, luaL_typename(L, -1));
		key = lua_tostring(L, -1);
		for (a = allowed; *a; a++)
			if (strcmp(*a, key) == 0)
				break;
		if (!*a)
			luaL_error(L, "%s: unknown field '%s'", what, key);
	}
}

const char *lsbx_opt_lstring(lua_State *L, int idx, const char *field, size_t *len)
{
	const char *s;

	idx = abs_index(L, idx);
	lua_pushstring(L, field);
	lua_rawget(L, idx);
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		return NULL;
	}
	if (lua_type(L, -1) != LUA_TSTRING)
		luaL_error(L, "field '%s': string expected, got %s", field, luaL_typename(L, -1));
	s = lua_tolstring(L, -1, len);
	lua_pop(L, 1);
	return s;
}

const char *lsbx_opt_string(lua_State *L, int idx, const char *field)
{
	size_t len;
	const char *s = lsbx_opt_lstring(L, idx, field, &len);

	if (s && strlen(s) != len)
		luaL_error(L, "field '%s': contains a NUL byte", field);
	return s;
}

/* Check the number at the top of the stack; what names it in messages. */
static int64_t check_int_top(lua_State *L, const char *what, int64_t min, int64_t max)
{
	lua_Number v;

	if (lua_type(L, -1) != LUA_TNUMBER)
		luaL_error(L, "%s: integer expected, got %s", what, luaL_typename(L, -1));
	v = lua_tonumber(L, -1);
	/* !(a <= b) also refuses NaN; both bounds are exact as doubles (|x| <= 2^53). */
	if (!(v >= (lua_Number)min) || !(v <= (lua_Number)max) || v != floor(v))
		luaL_error(L, "%s: integer in [%lld, %lld] expected, got %f", what, (long long)min,
			   (long long)max, (double)v);
	return (int64_t)v;
}

int64_t lsbx_opt_int(lua_State *L, int idx, const char *field, int64_t min, int64_t max,
		     int64_t def)
{
	int64_t v;
	char what[96];

	idx = abs_index(L, idx);
	lua_pushstring(L, field);
	lua_rawget(L, idx);
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		return def;
	}
	snprintf(what, sizeof(what), "field '%s'", field);
	v = check_int_top(L, what, min, max);
	lua_pop(L, 1);
	return v;
}

int64_t lsbx_arg_int(lua_State *L, int idx, const char *what, int64_t min, int64_t max, int64_t def)
{
	int64_t v;

	if (lua_isnoneornil(L, idx))
		return def;
	lua_pushvalue(L, idx);
	v = check_int_top(L, what, min, max);
	lua_pop(L, 1);
	return v;
}

bool lsbx_opt_bool(lua_State *L, int idx, const char *field, bool def)
{
	bool v;

	idx = abs_index(L, idx);
	lua_pushstring(L, field);
	lua_rawget(L, idx);
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		return def;
	}
	if (lua_type(L, -1) != LUA_TBOOLEAN)
		luaL_error(L, "field '%s': boolean expected, got %s", field, luaL_typename(L, -1));
	v = lua_toboolean(L, -1);
	lua_pop(L, 1);
	return v;
}

bool lsbx_arg_bool(lua_State *L, int idx, const char *what, bool def)
{
	if (lua_isnoneornil(L, idx))
		return def;
	if (lua_type(L, idx) != LUA_TBOOLEAN)
		luaL_error(L, "%s: boolean expected, got %s", what, luaL_typename(L, idx));
	return lua_toboolean(L, idx);
}

const char **lsbx_opt_strv(lua_State *L, int idx, const char *field, bool required, size_t *n)
{
	const char **v;
	size_t len, i;
	int t;

	idx = abs_index(L, idx);
	lua_pushstring(L, field);
	lua_rawget(L, idx);
	if (lua_isnil(L, -1)) {
		if (required)
			luaL_error(L, "field '%s': required", field);
		if (n)
			*n = 0;
		return NULL; /* the nil stays pushed */
	}
	if (lua_type(L, -1) != LUA_TTABLE)
		luaL_error(L, "field '%s': array of strings expected, got %s", field,
			   luaL_typename(L, -1));
	t = lua_gettop(L);
	len = lua_objlen(L, t);
	if (len > LSBX_MAX_ARRAY)
		luaL_error(L, "field '%s': more than %d entries", field, LSBX_MAX_ARRAY);
	v = lua_newuserdata(L, (len + 1) * sizeof(*v));
	for (i = 0; i < len; i++) {
		size_t sl;

		lua_rawgeti(L, t, (int)i + 1);
		if (lua_type(L, -1) != LUA_TSTRING)
			luaL_error(L, "field '%s'[%d]: string expected, got %s", field, (int)i + 1,
				   luaL_typename(L, -1));
		v[i] = lua_tolstring(L, -1, &sl);
		if (strlen(v[i]) != sl)
			luaL_error(L, "field '%s'[%d]: contains a NUL byte", field, (int)i + 1);
		lua_pop(L, 1);
	}
	v[len] = NULL;
	/* Keep only the userdata: the array table stays referenced by the options. */
	lua_remove(L, t);
	if (n)
		*n = len;
	return v;
}

void lsbx_register_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc,
			 lua_CFunction tostring)
{
	luaL_newmetatable(L, name);
	lua_newtable(L);
	luaL_setfuncs(L, methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, gc);
	lua_setfield(L, -2, "__gc");
	lua_pushcfunction(L, tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushstring(L, name);
	lua_setfield(L, -2, "__metatable");
	lua_pop(L, 1);
}

sbx_net lsbx_opt_net(lua_State *L, int idx)
{
	static const char *const names[] = {"blocked", "allowlist", "open", NULL};
	const char *v = lsbx_opt_string(L, idx, "network_mode");

	if (!v)
		return SBX_NET_BLOCKED;
	for (int i = 0; names[i]; i++)
		if (!strcmp(v, names[i]))
			return (sbx_net)i;
	luaL_error(L,
		   "field 'network_mode': \"blocked\", \"allowlist\" or \"open\" expected, got %s",
		   v);
	return SBX_NET_BLOCKED;
}

/*
 * proxy_secrets.c: secrets the sandbox never sees (src/core/sbx_secrets.h)
 * as Lua sees them.
 *
 *   ca = core.proxy_ca(label)       -- a fresh session CA (EC P-256)
 *   ca:pem()                        -- its certificate (the key never leaves C)
 *   px:secrets(tag, spec)           -- intercept tag's connections to the secrets' hosts
 *   core.proxy_spawn(fd, tag, { ..., secrets = spec })  -- the same, in the child
 *
 * spec = { ca = ca, upstream_ca_file = path|nil, list = { { placeholder =, value =,
 * hosts = { name, ... }, header = str|nil, format = str|nil, insecure_http = bool }, ... } }
 * Errors never quote a value.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "lproxy.h"
#include "lsbx.h"
#include "sbx_secrets.h"

#define LSBX_CA_MT "sbx.core.proxy_ca"
#define MAX_SECRETS 64
#define MAX_HOSTS 64

static sbx_proxy_ca **check_ca(lua_State *L, int idx)
{
	sbx_proxy_ca **ca = luaL_checkudata(L, idx, LSBX_CA_MT);
	if (!*ca)
		luaL_error(L, "the CA is freed");
	return ca;
}

static int l_ca_new(lua_State *L)
{
	const char *label = luaL_optstring(L, 1, "");
	sbx_err err = {0};
	sbx_proxy_ca **ca = lua_newuserdata(L, sizeof(*ca));

	*ca = NULL;
	luaL_getmetatable(L, LSBX_CA_MT);
	lua_setmetatable(L, -2);
	if (!(*ca = sbx_proxy_ca_new(label, &err)))
		return lsbx_push_err(L, &err);
	return 1;
}

static int l_ca_pem(lua_State *L)
{
	lua_pushstring(L, sbx_proxy_ca_pem(*check_ca(L, 1)));
	return 1;
}

static int l_ca_gc(lua_State *L)
{
	sbx_proxy_ca **ca = luaL_checkudata(L, 1, LSBX_CA_MT);
	sbx_proxy_ca_free(*ca);
	*ca = NULL;
	return 0;
}

static int l_ca_tostring(lua_State *L)
{
	lua_pushliteral(L, "sbx.core.proxy_ca");
	return 1;
}

static const char *opt_str(lua_State *L, int t, const char *k)
{
	lua_getfield(L, t, k);
	const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
	if (!s && !lua_isnil(L, -1))
		luaL_error(L, "secrets: field '%s' must be a string", k);
	lua_pop(L, 1); /* the string stays alive: t holds it */
	return s;
}

/* Apply the spec table at idx to px for tag.  Returns 0, or pushes nil,
 * kind, msg and returns 3. */
int lsbx_proxy_apply_secrets(lua_State *L, sbx_proxy *p, void *tag, int idx)
{
	static sbx_proxy_secret s[MAX_SECRETS];
	static const char *hosts[MAX_SECRETS][MAX_HOSTS];
	sbx_err err = {0};
	size_t n;

	if (idx < 0)
		idx = lua_gettop(L) + idx + 1;
	luaL_checktype(L, idx, LUA_TTABLE);
	lua_getfield(L, idx, "ca");
	sbx_proxy_ca *ca = *check_ca(L, -1);
	lua_pop(L, 1);
	const char *cafile = opt_str(L, idx, "upstream_ca_file");
	lua_getfield(L, idx, "list");
	luaL_checktype(L, -1, LUA_TTABLE);
	int list = lua_gettop(L);
	n = lua_objlen(L, list);
	if (n > MAX_SECRETS)
		luaL_error(L, "secrets: at most %d", MAX_SECRETS);
	memset(s, 0, sizeof(s));
	for (size_t i = 0; i < n; i++) {
		lua_rawgeti(L, list, (int)i + 1);
		luaL_checktype(L, -1, LUA_TTABLE);
		int t = lua_gettop(L);
		s[i].placeholder = opt_str(L, t, "placeholder");
		s[i].value = opt_str(L, t, "value");
		s[i].header = opt_str(L, t, "header");
		s[i].format = opt_str(L, t, "format");
		lua_getfield(L, t, "insecure_http");
		s[i].insecure_http = lua_toboolean(L, -1);
		lua_getfield(L, t, "hosts");
		luaL_checktype(L, -1, LUA_TTABLE);
		size_t nh = lua_objlen(L, -1);
		if (nh > MAX_HOSTS)
			luaL_error(L, "secrets: at most %d hosts each", MAX_HOSTS);
		for (size_t k = 0; k < nh; k++) {
			lua_rawgeti(L, -1, (int)k + 1);
			hosts[i][k] = lua_tostring(L, -1); /* the hosts table holds it */
			lua_pop(L, 1);
		}
		s[i].hosts = hosts[i];
		s[i].n_hosts = nh;
		/* the secret tables stay in the list: their strings live on */
		lua_settop(L, list);
	}
	int rc = sbx_proxy_set_secrets(p, tag, ca, s, n, cafile, &err);
	memset(s, 0, sizeof(s)); /* no stray copies of value pointers */
	lua_settop(L, list - 1);
	if (rc < 0)
		return lsbx_push_err(L, &err);
	return 0;
}

/* px:secrets(tag, spec) */
int lsbx_proxy_secrets(lua_State *L)
{
	lsbx_proxy *px = luaL_checkudata(L, 1, "sbx.core.proxy");
	const char *tag = luaL_checkstring(L, 2);

	if (!px->p)
		luaL_error(L, "the proxy is closed");
	if (px->L)
		luaL_error(L, "the proxy is busy (called from its own decide, log or batch)");
	int rc = lsbx_proxy_apply_secrets(L, px->p, lsbx_proxy_intern_tag(L, px, tag, true), 3);
	if (rc)
		return rc;
	lua_pushboolean(L, 1);
	return 1;
}

static const luaL_Reg ca_methods[] = {
	{"pem", l_ca_pem},
	{NULL, NULL},
};

void lsbx_proxy_secrets_register(lua_State *L)
{
	lsbx_register_class(L, LSBX_CA_MT, ca_methods, l_ca_gc, l_ca_tostring);
	lua_pushcfunction(L, l_ca_new);
	lua_setfield(L, -2, "proxy_ca");
}

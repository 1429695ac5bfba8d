/*
 * fuzz_codec.c: libFuzzer target for sbxd's body decoding (src/server/
 * codec.c): JSON (jansson) and MessagePack (msgpack-c) into Lua values.
 *
 * The first input byte picks the format (even: JSON, odd: msgpack), the
 * rest is the body.  Properties (abort() on violation):
 *   - sbx_srv_decode returns 0 with exactly one value pushed, or -1 with
 *     nothing pushed and a non-empty reason (errors are clean);
 *   - a decoded value encodes to both formats, and decoding the msgpack
 *     encoding gives back a value equal to the first (a round trip; JSON's
 *     text form is decoded too and must decode, except that jansson
 *     refuses "\u0000" inside object keys, cleanly);
 *   - memory stays bounded: run with -rss_limit_mb / -malloc_limit_mb (the
 *     Makefile does), the codec caps depth at 32 and items at 100000.
 * Lua errors cannot escape: decoding runs under lua_cpcall.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "server.h"

static lua_State *L;

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_codec: PROPERTY VIOLATED: %s\n", what);
	abort();
}

/* Deep equality of two decoded values (tables compared key by key). */
static int deep_equal(lua_State *S, int a, int b, int depth)
{
	if (depth > 40)
		return 0;
	a = a < 0 ? lua_gettop(S) + a + 1 : a;
	b = b < 0 ? lua_gettop(S) + b + 1 : b;
	if (lua_type(S, a) != lua_type(S, b))
		return 0;
	if (lua_type(S, a) != LUA_TTABLE) {
		if (lua_type(S, a) == LUA_TNUMBER) {
			lua_Number x = lua_tonumber(S, a), y = lua_tonumber(S, b);
			return x == y || (x != x && y != y);
		}
		return lua_rawequal(S, a, b);
	}
	/* every key of a is in b with an equal value, and b has no more keys */
	size_t na = 0, nb = 0;
	lua_pushnil(S);
	while (lua_next(S, a)) {
		na++;
		lua_pushvalue(S, -2);
		lua_rawget(S, b);
		int eq = deep_equal(S, -1, -2, depth + 1);
		lua_pop(S, 2);
		if (!eq) {
			lua_pop(S, 1);
			return 0;
		}
	}
	lua_pushnil(S);
	while (lua_next(S, b)) {
		nb++;
		lua_pop(S, 1);
	}
	return na == nb;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	L = luaL_newstate();
	if (!L)
		abort();
	luaL_openlibs(L);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char why[256];
	if (size < 1)
		return 0;
	sbx_srv_fmt fmt = (data[0] & 1) ? SRV_FMT_MSGPACK : SRV_FMT_JSON;
	const char *body = (const char *)data + 1;
	size_t len = size - 1;
	int top = lua_gettop(L);

	why[0] = '\0';
	int rc = sbx_srv_decode(L, fmt, body, len, why, sizeof why);
	if (rc != 0) {
		if (rc != -1)
			fail("decode returned neither 0 nor -1");
		if (lua_gettop(L) != top)
			fail("a failed decode left values on the stack");
		if (why[0] == '\0')
			fail("a failed decode gave no reason");
		return 0;
	}
	if (lua_gettop(L) != top + 1)
		fail("a successful decode did not push exactly one value");

	size_t mlen = 0, jlen = 0;
	char *mp = sbx_srv_encode(L, -1, SRV_FMT_MSGPACK, &mlen);
	char *js = sbx_srv_encode(L, -1, SRV_FMT_JSON, &jlen);
	/* a top-level scalar may be refused by the JSON encoder; the request
	 * bodies sbxd takes are objects, which must encode */
	if (lua_type(L, -1) == LUA_TTABLE && (!mp || !js))
		fail("a decoded table did not encode");
	if (mp) {
		rc = sbx_srv_decode(L, SRV_FMT_MSGPACK, mp, mlen, why, sizeof why);
		if (rc != 0) {
			fprintf(stderr, "re-decode: %s\n", why);
			fail("our own msgpack encoding did not decode");
		}
		if (!deep_equal(L, -1, -2, 0))
			fail("msgpack round trip changed the value");
		lua_pop(L, 1);
	}
	/* jansson decodes objects and arrays only (a request body is one) */
	if (js && lua_type(L, -1) == LUA_TTABLE) {
		rc = sbx_srv_decode(L, SRV_FMT_JSON, js, jlen, why, sizeof why);
		/* jansson refuses "\u0000" inside object keys (a key with a
		 * NUL byte, which msgpack can carry): a clean refusal, allowed */
		if (rc != 0 && strstr(why, "NUL byte in object key") == NULL) {
			fprintf(stderr, "re-decode: %s\n", why);
			fail("our own JSON encoding did not decode");
		}
		if (rc == 0)
			lua_pop(L, 1);
	}
	free(mp);
	free(js);
	lua_settop(L, top);
	/* keep the Lua heap from growing across inputs */
	lua_gc(L, LUA_GCCOLLECT, 0);
	return 0;
}

/*
 * codec.c: request and response bodies, JSON (jansson) or MessagePack
 * (msgpack-c), to and from Lua values.
 *
 * Decoding: objects/maps become tables (keys must be strings), arrays
 * become sequences, null/nil is dropped (the key is absent), numbers
 * become Lua numbers, msgpack bin and str both become strings.  Nesting is
 * capped at SRV_MAX_DEPTH and a document at SRV_MAX_ITEMS values, so a
 * hostile body cannot exhaust the C stack or memory.
 *
 * Encoding: a table is an array when it has a metatable with __array =
 * true or is a non-empty sequence 1..n, else an object with string keys
 * (other keys are skipped).  Strings that are not UTF-8 get their invalid
 * bytes replaced by '?' in JSON.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <lauxlib.h>
#include <msgpack.h>

#include "server.h"

/* At most this many levels of containers, the top one included: what
 * msgpack-c's unpacker takes (MSGPACK_EMBED_STACK_SIZE), so whatever one
 * format accepts, our msgpack encoding of it decodes again. */
#define SRV_MAX_DEPTH 32
#define SRV_MAX_ITEMS 100000

typedef struct dec_state {
	size_t items;
	char *why;
	size_t whylen;
} dec_state;

static int json_push(lua_State *L, json_t *v, int depth, dec_state *st)
{
	if (depth >= SRV_MAX_DEPTH) {
		snprintf(st->why, st->whylen, "nested deeper than %d levels", SRV_MAX_DEPTH);
		return -1;
	}
	if (++st->items > SRV_MAX_ITEMS) {
		snprintf(st->why, st->whylen, "more than %d values", SRV_MAX_ITEMS);
		return -1;
	}
	if (!lua_checkstack(L, 4)) {
		snprintf(st->why, st->whylen, "out of memory");
		return -1;
	}
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		const char *k;
		size_t klen;
		json_t *e;
		lua_newtable(L);
		/* keys by length: a "\u0000" in a key must not cut it short */
		json_object_keylen_foreach(v, k, klen, e)
		{
			if (json_is_null(e))
				continue;
			lua_pushlstring(L, k, klen);
			if (json_push(L, e, depth + 1, st) != 0) {
				lua_pop(L, 2);
				return -1;
			}
			lua_rawset(L, -3);
		}
		return 0;
	}
	case JSON_ARRAY: {
		size_t i;
		json_t *e;
		lua_createtable(L, (int)json_array_size(v), 0);
		json_array_foreach(v, i, e)
		{
			if (json_push(L, e, depth + 1, st) != 0) {
				lua_pop(L, 1);
				return -1;
			}
			lua_rawseti(L, -2, (int)i + 1);
		}
		return 0;
	}
	case JSON_STRING:
		lua_pushlstring(L, json_string_value(v), json_string_length(v));
		return 0;
	case JSON_INTEGER:
		lua_pushnumber(L, (lua_Number)json_integer_value(v));
		return 0;
	case JSON_REAL:
		lua_pushnumber(L, json_real_value(v));
		return 0;
	case JSON_TRUE:
		lua_pushboolean(L, 1);
		return 0;
	case JSON_FALSE:
		lua_pushboolean(L, 0);
		return 0;
	case JSON_NULL:
	default:
		lua_pushboolean(
			L, 0); /* unreachable for object members; arrays keep a hole-free false */
		return 0;
	}
}

static int mp_push(lua_State *L, const msgpack_object *o, int depth, dec_state *st)
{
	if (depth >= SRV_MAX_DEPTH) {
		snprintf(st->why, st->whylen, "nested deeper than %d levels", SRV_MAX_DEPTH);
		return -1;
	}
	if (++st->items > SRV_MAX_ITEMS) {
		snprintf(st->why, st->whylen, "more than %d values", SRV_MAX_ITEMS);
		return -1;
	}
	if (!lua_checkstack(L, 4)) {
		snprintf(st->why, st->whylen, "out of memory");
		return -1;
	}
	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		lua_pushboolean(L, 0);
		return 0;
	case MSGPACK_OBJECT_BOOLEAN:
		lua_pushboolean(L, o->via.boolean);
		return 0;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		lua_pushnumber(L, (lua_Number)o->via.u64);
		return 0;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		lua_pushnumber(L, (lua_Number)o->via.i64);
		return 0;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		lua_pushnumber(L, o->via.f64);
		return 0;
	case MSGPACK_OBJECT_STR:
		lua_pushlstring(L, o->via.str.ptr, o->via.str.size);
		return 0;
	case MSGPACK_OBJECT_BIN:
		lua_pushlstring(L, o->via.bin.ptr, o->via.bin.size);
		return 0;
	case MSGPACK_OBJECT_ARRAY:
		lua_createtable(L, (int)o->via.array.size, 0);
		for (uint32_t i = 0; i < o->via.array.size; i++) {
			if (mp_push(L, &o->via.array.ptr[i], depth + 1, st) != 0) {
				lua_pop(L, 1);
				return -1;
			}
			lua_rawseti(L, -2, (int)i + 1);
		}
		return 0;
	case MSGPACK_OBJECT_MAP:
		lua_newtable(L);
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			const msgpack_object_kv *kv = &o->via.map.ptr[i];
			if (kv->key.type != MSGPACK_OBJECT_STR) {
				snprintf(st->why, st->whylen, "map keys must be strings");
				lua_pop(L, 1);
				return -1;
			}
			if (kv->val.type == MSGPACK_OBJECT_NIL)
				continue;
			lua_pushlstring(L, kv->key.via.str.ptr, kv->key.via.str.size);
			if (mp_push(L, &kv->val, depth + 1, st) != 0) {
				lua_pop(L, 2);
				return -1;
			}
			lua_rawset(L, -3);
		}
		return 0;
	default:
		snprintf(st->why, st->whylen, "unsupported msgpack type %d", (int)o->type);
		return -1;
	}
}

/*
 * Walk a msgpack body's headers without allocating, before msgpack-c sees
 * it: msgpack-c allocates a container's element array from the count in
 * its header, so a 5-byte body declaring an array of 2^32-1 elements made
 * it malloc 64 GiB (found by tests/fuzz/fuzz_codec).  Every element takes
 * at least one byte, so a body whose pending elements outnumber its
 * remaining bytes is refused here, which bounds msgpack-c's allocations by
 * the body's length.  Returns 0, or -1 with why set.
 */
static int mp_precheck(const unsigned char *p, size_t len, char *why, size_t whylen)
{
	size_t pos = 0, pending = 1;

	while (pending > 0) {
		if (pos >= len) {
			snprintf(why, whylen, "malformed msgpack (truncated)");
			return -1;
		}
		unsigned b = p[pos++];
		uint64_t count = 0, skip = 0;
		int nbytes = 0, kind = 0; /* kind: 0 scalar, 1 array, 2 map */
		pending--;
		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
			/* fixint, nil, bool */
		} else if (b <= 0x8f) {
			kind = 2, count = b & 0x0f;
		} else if (b <= 0x9f) {
			kind = 1, count = b & 0x0f;
		} else if (b <= 0xbf) {
			skip = b & 0x1f;
		} else {
			/* one line per header byte, as a table */
			/* clang-format off */
			switch (b) {
			case 0xc4: case 0xd9: nbytes = 1; break;       /* bin8, str8 */
			case 0xc5: case 0xda: nbytes = 2; break;       /* bin16, str16 */
			case 0xc6: case 0xdb: nbytes = 4; break;       /* bin32, str32 */
			case 0xc7: nbytes = 1, skip = 1; break;        /* ext8 (+type) */
			case 0xc8: nbytes = 2, skip = 1; break;
			case 0xc9: nbytes = 4, skip = 1; break;
			case 0xca: skip = 4; break;
			case 0xcb: skip = 8; break;
			case 0xcc: case 0xd0: skip = 1; break;
			case 0xcd: case 0xd1: skip = 2; break;
			case 0xce: case 0xd2: skip = 4; break;
			case 0xcf: case 0xd3: skip = 8; break;
			case 0xd4: skip = 2; break;                    /* fixext1 */
			case 0xd5: skip = 3; break;
			case 0xd6: skip = 5; break;
			case 0xd7: skip = 9; break;
			case 0xd8: skip = 17; break;
			case 0xdc: kind = 1, nbytes = 2; break;
			case 0xdd: kind = 1, nbytes = 4; break;
			case 0xde: kind = 2, nbytes = 2; break;
			case 0xdf: kind = 2, nbytes = 4; break;
			default:
				snprintf(why, whylen, "malformed msgpack (byte 0x%02x)", b);
				return -1;
			}
			/* clang-format on */
		}
		if (nbytes) {
			if ((size_t)nbytes > len - pos) {
				snprintf(why, whylen, "malformed msgpack (truncated)");
				return -1;
			}
			uint64_t v = 0;
			for (int i = 0; i < nbytes; i++)
				v = (v << 8) | p[pos++];
			if (kind)
				count = v;
			else
				skip += v;
		}
		if (skip > len - pos) {
			snprintf(why, whylen, "malformed msgpack (truncated)");
			return -1;
		}
		pos += (size_t)skip;
		pending += (size_t)(kind == 2 ? 2 * count : count);
		if (pending > len - pos) {
			snprintf(why, whylen,
				 "malformed msgpack: declares more elements than the body holds");
			return -1;
		}
	}
	return 0;
}

int sbx_srv_decode(lua_State *L, sbx_srv_fmt fmt, const char *data, size_t len, char *why,
		   size_t whylen)
{
	dec_state st = {0, why, whylen};

	if (fmt == SRV_FMT_JSON) {
		json_error_t jerr;
		/* JSON_ALLOW_NUL: "\u0000" is valid JSON, and what our own
		 * encoder writes for a NUL byte (found by tests/fuzz/fuzz_codec) */
		json_t *root =
			json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
		int rc;
		if (!root) {
			snprintf(why, whylen, "malformed JSON at line %d column %d: %s", jerr.line,
				 jerr.column, jerr.text);
			return -1;
		}
		rc = json_push(L, root, 0, &st);
		json_decref(root);
		return rc;
	}
	if (mp_precheck((const unsigned char *)data, len, why, whylen) != 0)
		return -1;
	msgpack_unpacked up;
	size_t off = 0;
	msgpack_unpacked_init(&up);
	msgpack_unpack_return ret = msgpack_unpack_next(&up, data, len, &off);
	if (ret != MSGPACK_UNPACK_SUCCESS) {
		snprintf(why, whylen, "malformed msgpack (%s)",
			 ret == MSGPACK_UNPACK_CONTINUE ? "truncated" : "parse error");
		msgpack_unpacked_destroy(&up);
		return -1;
	}
	if (off != len) {
		snprintf(why, whylen, "malformed msgpack: %zu trailing bytes", len - off);
		msgpack_unpacked_destroy(&up);
		return -1;
	}
	int rc = mp_push(L, &up.data, 0, &st);
	msgpack_unpacked_destroy(&up);
	return rc;
}

/* 1: array of n elements; 0: object. */
static int table_is_array(lua_State *L, int idx, size_t *n)
{
	size_t len = lua_objlen(L, idx), count = 0;

	*n = len;
	if (lua_getmetatable(L, idx)) {
		lua_getfield(L, -1, "__array");
		int arr = lua_toboolean(L, -1);
		lua_pop(L, 2);
		if (arr)
			return 1;
	}
	if (len == 0)
		return 0;
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		lua_pop(L, 1);
		count++;
	}
	return count == len;
}

static json_t *json_str(const char *s, size_t len)
{
	json_t *j = json_stringn(s, len);
	if (j)
		return j;
	/* Not UTF-8: replace bytes outside ASCII. */
	char *copy = malloc(len ? len : 1);
	if (!copy)
		return NULL;
	for (size_t i = 0; i < len; i++)
		copy[i] = ((unsigned char)s[i] < 0x80 && s[i]) ? s[i] : '?';
	j = json_stringn(copy, len);
	free(copy);
	return j;
}

static json_t *to_json(lua_State *L, int idx, int depth)
{
	if (idx < 0)
		idx = lua_gettop(L) + idx + 1;
	if (depth >= SRV_MAX_DEPTH)
		return json_null();
	switch (lua_type(L, idx)) {
	case LUA_TBOOLEAN:
		return json_boolean(lua_toboolean(L, idx));
	case LUA_TNUMBER: {
		double d = lua_tonumber(L, idx);
		if (d == floor(d) && fabs(d) < 9.007199254740992e15)
			return json_integer((json_int_t)d);
		if (!isfinite(d))
			return json_null();
		return json_real(d);
	}
	case LUA_TSTRING: {
		size_t len;
		const char *s = lua_tolstring(L, idx, &len);
		return json_str(s, len);
	}
	case LUA_TTABLE: {
		size_t n;
		if (table_is_array(L, idx, &n)) {
			json_t *a = json_array();
			for (size_t i = 1; i <= n; i++) {
				lua_rawgeti(L, idx, (int)i);
				json_array_append_new(a, to_json(L, -1, depth + 1));
				lua_pop(L, 1);
			}
			return a;
		}
		json_t *o = json_object();
		lua_pushnil(L);
		while (lua_next(L, idx)) {
			if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) != LUA_TFUNCTION &&
			    lua_type(L, -1) != LUA_TUSERDATA) {
				size_t klen;
				const char *k = lua_tolstring(L, -2, &klen);
				json_object_setn_new(o, k, klen, to_json(L, -1, depth + 1));
			}
			lua_pop(L, 1);
		}
		return o;
	}
	default:
		return json_null();
	}
}

static void to_mp(lua_State *L, int idx, msgpack_packer *pk, int depth)
{
	if (idx < 0)
		idx = lua_gettop(L) + idx + 1;
	if (depth >= SRV_MAX_DEPTH) {
		msgpack_pack_nil(pk);
		return;
	}
	switch (lua_type(L, idx)) {
	case LUA_TBOOLEAN:
		if (lua_toboolean(L, idx))
			msgpack_pack_true(pk);
		else
			msgpack_pack_false(pk);
		return;
	case LUA_TNUMBER: {
		double d = lua_tonumber(L, idx);
		if (d == floor(d) && fabs(d) < 9.2e18)
			msgpack_pack_int64(pk, (int64_t)d);
		else
			msgpack_pack_double(pk, d);
		return;
	}
	case LUA_TSTRING: {
		size_t len;
		const char *s = lua_tolstring(L, idx, &len);
		msgpack_pack_str(pk, len);
		msgpack_pack_str_body(pk, s, len);
		return;
	}
	case LUA_TTABLE: {
		size_t n, count = 0;
		if (table_is_array(L, idx, &n)) {
			msgpack_pack_array(pk, n);
			for (size_t i = 1; i <= n; i++) {
				lua_rawgeti(L, idx, (int)i);
				to_mp(L, -1, pk, depth + 1);
				lua_pop(L, 1);
			}
			return;
		}
		lua_pushnil(L);
		while (lua_next(L, idx)) {
			if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) != LUA_TFUNCTION &&
			    lua_type(L, -1) != LUA_TUSERDATA)
				count++;
			lua_pop(L, 1);
		}
		msgpack_pack_map(pk, count);
		lua_pushnil(L);
		while (lua_next(L, idx)) {
			if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) != LUA_TFUNCTION &&
			    lua_type(L, -1) != LUA_TUSERDATA) {
				size_t klen;
				const char *k = lua_tolstring(L, -2, &klen);
				msgpack_pack_str(pk, klen);
				msgpack_pack_str_body(pk, k, klen);
				to_mp(L, -1, pk, depth + 1);
			}
			lua_pop(L, 1);
		}
		return;
	}
	default:
		msgpack_pack_nil(pk);
	}
}

char *sbx_srv_encode(lua_State *L, int idx, sbx_srv_fmt fmt, size_t *len)
{
	if (idx < 0)
		idx = lua_gettop(L) + idx + 1;
	if (fmt == SRV_FMT_JSON) {
		json_t *j = to_json(L, idx, 0);
		char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
		json_decref(j);
		if (!s)
			return NULL;
		size_t n = strlen(s);
		char *out = realloc(s, n + 2);
		if (!out) {
			free(s);
			return NULL;
		}
		out[n] = '\n';
		out[n + 1] = '\0';
		*len = n + 1;
		return out;
	}
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	to_mp(L, idx, &pk, 0);
	*len = sb.size;
	return sb.data; /* malloc'd by sbuffer */
}

/* The {kind, message} error body, without Lua: handler.c's answers and the
 * front's own (401/503 answered before h2o sees the request) share it. */
char *sbx_srv_error_body(sbx_srv_fmt fmt, const char *kind, const char *msg, size_t *len)
{
	if (fmt == SRV_FMT_MSGPACK) {
		msgpack_sbuffer sb;
		msgpack_packer pk;
		msgpack_sbuffer_init(&sb);
		msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
		msgpack_pack_map(&pk, 2);
		msgpack_pack_str(&pk, 4);
		msgpack_pack_str_body(&pk, "kind", 4);
		msgpack_pack_str(&pk, strlen(kind));
		msgpack_pack_str_body(&pk, kind, strlen(kind));
		msgpack_pack_str(&pk, 7);
		msgpack_pack_str_body(&pk, "message", 7);
		msgpack_pack_str(&pk, strlen(msg));
		msgpack_pack_str_body(&pk, msg, strlen(msg));
		*len = sb.size;
		return sb.data; /* malloc'd by msgpack_sbuffer */
	}
	json_t *o = json_pack("{s:s, s:s}", "kind", kind, "message", msg);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	*len = s ? strlen(s) : 0;
	return s;
}

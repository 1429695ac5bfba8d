/*
 * lsbx.h: what the files of the sbx.core Lua binding share.
 *
 * The binding is split in three: core.c (the module and the session
 * userdata), run.c (the run userdata) and args.c (strict checking of the
 * tables and values Lua passes in).  Misuse by the Lua caller (a wrong type,
 * an unknown field, an out-of-range number) raises a Lua error; failures of
 * the sandbox itself return nil, kind, message.
 */
#ifndef LSBX_H
#define LSBX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lauxlib.h>
#include <lua.h>

#include "sbx.h"

#define LSBX_SESSION_MT "sbx.core.session"
#define LSBX_RUN_MT "sbx.core.run"

/* A session userdata; s is NULL once closed. */
typedef struct lsbx_session {
	sbx_session *s;
} lsbx_session;

/* The session at idx (raises if not a session userdata). */
lsbx_session *lsbx_check_session(lua_State *L, int idx);

/* ---- run.c ---- */

/* s:run(ropts): start a run; registered on the session metatable. */
int lsbx_session_run(lua_State *L);
/* Create the run metatable. */
void lsbx_run_register(lua_State *L);
/* ---- proxy.c ---- */

/* Add proxy_new and proxy_spawn to the module table on the stack top. */
void lsbx_proxy_register(lua_State *L);

/* Register the metatable of a userdata class: methods as __index, gc and
 * tostring as metamethods, and the name as __metatable so Lua code can
 * neither read nor replace it. */
void lsbx_register_class(lua_State *L, const char *name, const luaL_Reg *methods,
			 lua_CFunction gc, lua_CFunction tostring);

/* Push nil, kind name, message: the "expected failure" return of the binding. */
int lsbx_push_err(lua_State *L, const sbx_err *err);
/* Same, from a kind and a literal message. */
int lsbx_push_fail(lua_State *L, sbx_err_kind kind, const char *msg);

/* ---- args.c: checking what Lua passes in ---- */

/* Raise unless every key of the table at idx is a string listed in allowed
 * (NULL-terminated); what names the table in the message. */
void lsbx_check_fields(lua_State *L, int idx, const char *what, const char *const *allowed);
/* The string field of the table at idx, NULL when absent.  No embedded NUL
 * allowed; the pointer lives as long as the table holds the string. */
const char *lsbx_opt_string(lua_State *L, int idx, const char *field);
/* The string field with its length (NUL bytes allowed), NULL when absent. */
const char *lsbx_opt_lstring(lua_State *L, int idx, const char *field, size_t *len);
/* An integral number in [min, max] (exactly representable), def when absent. */
int64_t lsbx_opt_int(lua_State *L, int idx, const char *field, int64_t min, int64_t max,
		     int64_t def);
/* The same for a value on the stack (not a field); def when none or nil. */
int64_t lsbx_arg_int(lua_State *L, int idx, const char *what, int64_t min, int64_t max,
		     int64_t def);
/* A boolean field, def when absent. */
bool lsbx_opt_bool(lua_State *L, int idx, const char *field, bool def);
/* Field "network_mode": "blocked" (also when absent), "allowlist", "open". */
sbx_net lsbx_opt_net(lua_State *L, int idx);
/* A boolean argument, def when none or nil. */
bool lsbx_arg_bool(lua_State *L, int idx, const char *what, bool def);
/*
 * An array of strings (field of the table at idx) as a NULL-terminated
 * array.  Always pushes one value: the array's memory as a userdata (so an
 * error raised later frees it with the stack) or nil when the field is
 * absent.  The strings belong to the Lua table.  Returns NULL when absent
 * (a Lua error when required).  *n (may be NULL) gets the count.
 */
const char **lsbx_opt_strv(lua_State *L, int idx, const char *field, bool required, size_t *n);

/* core.seccomp_profile{deny=, allow=} (seccomp.c). */
int lsbx_seccomp_profile(lua_State *L);

#endif

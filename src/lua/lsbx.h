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
/* The core run of the run userdata at idx (raises unless it is one); NULL
 * once r:close() ran.  Borrowed: the userdata owns it, so a host that
 * watches the run's fds (sbxd's stream.c) keeps a reference to it. */
sbx_run *lsbx_run_ptr(lua_State *L, int idx);
/* Create the run metatable. */
void lsbx_run_register(lua_State *L);
/* ---- proxy.c ---- */

/* Add proxy_new and proxy_spawn to the module table on the stack top. */
void lsbx_proxy_register(lua_State *L);
/* px:wake([max_steps]) as a lua_CFunction, for a host whose loop watches
 * px:fd() (sbxd): steps while the fd stays readable, then one batch into
 * Lua if anything waits for a verdict or is to be logged. */
int lsbx_proxy_wake(lua_State *L);

/* Register the metatable of a userdata class: methods as __index, gc and
 * tostring as metamethods, and the name as __metatable so Lua code can
 * neither read nor replace it. */
void lsbx_register_class(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc,
			 lua_CFunction tostring);

/* Push nil, kind name, message: the "expected failure" return of the
 * binding; and a fourth, code, where the core's errno names a condition
 * callers branch on: "not_found" (ENOENT), "too_large" (EFBIG). */
int lsbx_push_err(lua_State *L, const sbx_err *err);
/* Same, from a kind and a literal message. */
int lsbx_push_fail(lua_State *L, sbx_err_kind kind, const char *msg);

/* ---- pcall.c: the one protected call of every C -> Lua entry ---- */

/* Text instead of the error object: "message\ntraceback" (for logs and
 * printing).  Without it the error stays as raised (tables keep kind). */
#define LSBX_PCALL_TEXT 1
/*
 * lua_pcall of the function below its narg arguments, through a message
 * handler that records "message\ntraceback" at the point of the error.
 * Returns lua_pcall's status; on failure the error is on the stack top
 * (as raised, or as text with LSBX_PCALL_TEXT), nothing else is left.
 */
int lsbx_pcall(lua_State *L, int narg, int nres, int flags);
/* Push the traceback text of the last failed lsbx_pcall of this state and
 * return 1; 0 (nothing pushed) when there is none. */
int lsbx_pcall_traceback(lua_State *L);
/* Replace the error object at idx with its text ("Kind: message" for an
 * sbx error table) and return it; never NULL. */
const char *lsbx_pcall_message(lua_State *L, int idx);

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
/* The session options table at index 1 (core.c); spares.c's functions. */
void lsbx_session_opts(lua_State *L, sbx_session_opts *o, const char **tag);
int lsbx_spares_keep(lua_State *L);
int lsbx_spares_flush(lua_State *L);
int lsbx_spares_stats(lua_State *L);

#endif

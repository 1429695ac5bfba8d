/*
 * lproxy.h: what the allow-list proxy's binding shares between proxy.c
 * (the proxy userdata, decide and batch) and proxy_child.c (the same proxy
 * in a forked child, for on-device hosts).
 */
#ifndef LSBX_PROXY_H
#define LSBX_PROXY_H

#include <stdbool.h>
#include <stdint.h>

#include <lua.h>

#include "sbx_proxy.h"

struct held_query; /* proxy.c: a question held for the next batch */
struct held_line;  /* proxy.c: a log line held for the next batch */

typedef struct lsbx_proxy {
	sbx_proxy *p;
	lua_State *L; /* set while px:step runs: decide needs it */
	int ref;      /* registry ref of the userdata's env table { decide, batch, log, tags } */
	bool batch;   /* decide through batch(queries, logs) */
	struct held_query *queries, **queries_end;
	struct held_line *lines, **lines_end;
	uint64_t lua_calls;
} lsbx_proxy;

/* The options proxy_new and proxy_spawn take. */
extern const char *const lsbx_proxy_fields[];

/* Build a proxy from the options table at idx; pushes its userdata. */
lsbx_proxy *lsbx_proxy_create(lua_State *L, int idx);
/* Tag string -> the small integer the core sees (interned in env.tags). */
void *lsbx_proxy_intern_tag(lua_State *L, lsbx_proxy *px, const char *tag, bool create);
/* Around every call into the core: decide and log reach L meanwhile (the
 * proxy refuses to be reentered from them); after it, a batch proxy hands
 * what it held to Lua. */
void lsbx_proxy_enter(lua_State *L, lsbx_proxy *px);
void lsbx_proxy_leave(lua_State *L, lsbx_proxy *px);
void lsbx_proxy_push_stats(lua_State *L, const sbx_proxy_stats *s);

/* proxy_child.c: the child's metatable, and proxy_spawn into the module
 * table on the stack top. */
void lsbx_proxy_child_register(lua_State *L);

/* proxy_secrets.c: core.proxy_ca, px:secrets, and the spec proxy_spawn's
 * child applies (0, or nil, kind, msg pushed and 3). */
void lsbx_proxy_secrets_register(lua_State *L);
int lsbx_proxy_secrets(lua_State *L);
int lsbx_proxy_apply_secrets(lua_State *L, sbx_proxy *p, void *tag, int idx);

#endif

/*
 * server.h: what the files of sbxd (the HTTP/2 remote API server) share.
 *
 * sbxd is one h2o evloop in one thread, which never waits (the policy
 * worker and upload writes have threads of their own).  The C side (this directory) owns
 * the sockets, TLS, bearer-token auth, body codecs, the streaming of runs
 * and the metrics; the Lua side (lua/sbx/server/init.lua) owns the session
 * table, tenancy, limits and every decision about options and policy, and
 * opens sessions and runs through the same sbx.session / sbx.options code
 * as on-device use.
 *
 * Files: main.c (options, Lua state, signals, loop), listen.c (TCP/unix
 * listeners, TLS), handler.c (requests -> Lua -> responses), task.c (each
 * request's Lua handler as a coroutine the loop resumes when what it waits
 * for is there), hooks.c (the policy worker thread), fileio.c (upload
 * writes on threads), codec.c (JSON/msgpack <-> Lua), stream.c (runs
 * streamed as events; stream_encode.c encodes them, runs_registry.c keeps
 * detached runs), auth.c (token file, constant-time compare),
 * metrics.c, log.c; front.c (every client connection, on its own thread:
 * accept, TLS, budgets, the relay to h2o over a socketpair), front_opts.c
 * (its flags), h2guard.c and h2guard_out.c (the HTTP/2 frame guard, a pure
 * state machine).
 */
#ifndef SBX_SERVER_H
#define SBX_SERVER_H

#ifndef H2O_USE_LIBUV
#define H2O_USE_LIBUV 0
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <h2o.h>
#include <lua.h>

#include "sbx.h"

/* Body formats. */
typedef enum sbx_srv_fmt {
	SRV_FMT_JSON = 0,
	SRV_FMT_MSGPACK,
} sbx_srv_fmt;

/* Log levels. */
enum { SRV_LOG_ERROR = 0, SRV_LOG_WARN, SRV_LOG_INFO, SRV_LOG_DEBUG };

typedef struct sbx_srv_token {
	char *token;
	size_t len;
	char *tenant;
} sbx_srv_token;

/* Server-wide state: one per process. */
typedef struct sbx_srv {
	/* options */
	const char *listen;
	const char *token_file;
	const char *policy;
	const char *admin_tenant; /* may POST /v1/admin/reload-policy; NULL: nobody */
	const char *tls_cert, *tls_key;
	bool insecure;
	bool no_front; /* --no-front: benchmarks only (listen.c) */
	int log_level;
	uint32_t max_sessions;	 /* per tenant */
	uint32_t max_runs;	 /* concurrent runs per tenant */
	uint32_t warm_runs;	 /* warm runs each session keeps ready */
	uint32_t warm_idle_ms;	 /* an unused warm run ends after this; 0: the library's 10 s */
	uint32_t spare_sessions; /* sessions of the last-opened shape kept opened ahead */
	uint64_t hard_ceiling_s; /* session hard lifetime */
	uint64_t idle_timeout_s; /* close sessions unused this long; 0: never */
	size_t max_body;	 /* request body cap (bytes) */
	uint32_t drain_grace_ms;
	/* issue 19 (Kubernetes): this node's endpoint, written into session ids;
	 * reload the policy when its file changes; session ceilings (Lua's
	 * sbx.server.podlimits parses the specs) */
	const char *advertise_url;
	bool watch_policy;
	const char *cgroup_ceilings, *ceilings, *ceiling_reserve;
	h2o_socket_t *watchsock; /* the policy directory's inotify fd (policywatch.c) */

	/* h2o */
	h2o_globalconf_t config;
	h2o_context_t ctx;
	h2o_accept_ctx_t accept_ctx;
	bool listening; /* the front (front.c) accepts on its own thread */
	h2o_socket_t *sigsock;
	h2o_socket_t *proxysock;     /* the allowlist proxy's epoll fd (sbx_proxy.h) */
	struct sbx_srv_hooks *hooks; /* the policy worker (hooks.c) */
	h2o_timeout_t zero_timeout, tick_timeout, second_timeout;
	h2o_timeout_entry_t second_entry;
	char *unix_path; /* unlinked at exit */

	/* Lua */
	lua_State *L;
	int handle_ref, tick_ref, stats_ref, shutdown_ref, reload_ref, proxy_fd_ref, proxy_ref;
	int hook_answer_ref; /* sbx.server's hook_answer (task.c), or LUA_NOREF */

	/* auth */
	sbx_srv_token *tokens;
	size_t n_tokens;

	/* lifetime */
	bool draining;
	uint64_t drain_deadline_ms;
	bool done;
	size_t active_runs;
} sbx_srv;

extern sbx_srv *sbx_srv_g;

/* ---- policywatch.c ---- */
/* --watch-policy: reload when the policy file (or the "..data" symlink of a
 * Kubernetes ConfigMap volume beside it) is replaced.  0, or -1 and err. */
int sbx_srv_policy_watch_start(sbx_srv *S, sbx_err *err);

/* ---- log.c ---- */
/* One line on stderr: "ts=... level=... " + fmt ("key=value ..."). */
void sbx_srv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Log the error on the stack top (from lsbx_pcall, src/lua/pcall.c) with
 * its traceback, on one line: "event=lua_error where=WHERE err=...". */
void sbx_srv_log_lua_error(lua_State *L, const char *where);
/* lsbx_pcall for calls whose error is only logged: on failure the error is
 * logged (above) and popped.  Returns lua_pcall's status. */
int sbx_srv_pcall(lua_State *L, int narg, int nres, const char *where);
/* Lua: log(level, text), one sbx_srv_log line (sbx.server's events). */
int sbx_srv_l_log(lua_State *L);

/* ---- auth.c ---- */
/* Load "TOKEN TENANT" lines; returns 0 or -1 with err filled. */
int sbx_srv_auth_load(sbx_srv *S, const char *path, sbx_err *err);
/* The tenant of a bearer token (constant time over every entry), or NULL. */
const char *sbx_srv_auth_tenant(const sbx_srv *S, const char *token, size_t len);
/* Constant-time equality of two byte strings (time depends only on lengths). */
bool sbx_srv_ct_equal(const char *a, size_t alen, const char *b, size_t blen);
void sbx_srv_auth_free(sbx_srv *S);

/* ---- codec.c ---- */
/* Decode a body into a Lua value pushed on the stack; on malformed input
 * push nothing, write why into why and return -1. */
int sbx_srv_decode(lua_State *L, sbx_srv_fmt fmt, const char *data, size_t len, char *why,
		   size_t whylen);
/* Encode the Lua value at idx; returns a malloc'd buffer (caller frees) or NULL. */
char *sbx_srv_encode(lua_State *L, int idx, sbx_srv_fmt fmt, size_t *len);
/* The {kind, message} error body; malloc'd (caller frees) or NULL. */
char *sbx_srv_error_body(sbx_srv_fmt fmt, const char *kind, const char *msg, size_t *len);
/* Push the Lua registry's codec helpers (lua functions srv.bin etc.); none yet. */

/* ---- listen.c ---- */
int sbx_srv_listen_start(sbx_srv *S, sbx_err *err);
void sbx_srv_listen_stop(sbx_srv *S);

/* ---- handler.c ---- */
/* Register the catch-all handler on the host config. */
void sbx_srv_handler_register(sbx_srv *S, h2o_pathconf_t *pathconf);
/* Send a {kind, message} error body. */
void sbx_srv_send_error(h2o_req_t *req, int status, const char *kind, const char *msg,
			sbx_srv_fmt fmt);
/* Format asked by Accept (falls back to the request's content-type, then JSON). */
sbx_srv_fmt sbx_srv_req_accept_fmt(h2o_req_t *req);

/* The Lua answer table on top of S->L, sent for req (popped); one log line. */
void sbx_srv_handler_answer(sbx_srv *S, h2o_req_t *req, sbx_srv_fmt out, const char *tenant,
			    uint64_t t0);
/* 500: the Lua layer failed (already logged). */
void sbx_srv_handler_fail(h2o_req_t *req, sbx_srv_fmt out, const char *tenant, uint64_t t0);

/* ---- task.c: request handlers as coroutines the loop resumes ---- */
/* Run the handler below its request table (both on top of S->L, popped) as
 * a task for req; it answers req when it ends, unless the client left. */
void sbx_srv_task_start(sbx_srv *S, h2o_req_t *req, sbx_srv_fmt fmt, const char *tenant,
			uint64_t t0);
/* Watch the policy worker's answers on the loop (after S->hooks started). */
int sbx_srv_task_init(sbx_srv *S);
void sbx_srv_task_fini(sbx_srv *S);

/* ---- hooks.c: the policy worker thread ---- */
typedef struct sbx_srv_hooks sbx_srv_hooks;
/* Start the worker (its own lua_State); NULL with err. */
sbx_srv_hooks *sbx_srv_hooks_start(sbx_err *err);
/* An eventfd, readable when answers are waiting (sbx_srv_hooks_take). */
int sbx_srv_hooks_fd(const sbx_srv_hooks *H);
/* Queue a msgpack message (data: malloc'd, taken); returns its id (0: out
 * of memory). */
uint64_t sbx_srv_hooks_post(sbx_srv_hooks *H, char *data, size_t len, bool noreply);
/* Take the next answer: 1 (*data malloc'd, the caller's), 0 when none. */
int sbx_srv_hooks_take(sbx_srv_hooks *H, uint64_t *id, char **data, size_t *len);
/* Block up to timeout_ms for the answer to id: 1, or 0 on timeout. */
int sbx_srv_hooks_wait(sbx_srv_hooks *H, uint64_t id, uint32_t timeout_ms, char **data,
		       size_t *len);
/* Stop (after the hook running now, if any) and free.  Safe on NULL. */
void sbx_srv_hooks_free(sbx_srv_hooks *H);
/* For the Lua layer (cfg.hooks of sbx.server's init): post(msg, noreply)
 * -> id; wait(id, timeout_ms) -> answer | nil, why. */
int sbx_srv_l_hooks_post(lua_State *L);
int sbx_srv_l_hooks_wait(lua_State *L);

/* ---- main.c ---- */
/* sbx.paths and lua/ on package.path as sbxlua has them, sbx.core preloaded. */
void sbx_srv_lua_setup(lua_State *L);

/* filesend.c: answer 200 with the file at fd (taken; closed when done),
 * size bytes, streamed chunk by chunk as the client reads. */
void sbx_srv_send_file(h2o_req_t *req, int fd, uint64_t size);
/* fileput.c: append len bytes of data to the regular file at fd (from the
 * core's safe open; always closed here) when its size is exactly offset.
 * Returns 0 (*size: the new size), 1 when the size is not offset or the
 * file has other hard links (*size: its size; err says why), or -1 with
 * err filled. */
int sbx_srv_file_append(int fd, uint64_t offset, const char *data, size_t len, uint64_t *size,
			sbx_err *err);
/* The same for the Lua layer: append(fd, offset, data) -> true, new_size |
 * nil, "Conflict", msg, size | nil, kind, msg.  Passed to sbx.server's init
 * as cfg.file_append. */
int sbx_srv_l_file_append(lua_State *L);
/* fileio.c: push the file_io table (put, append: the writes of uploads on
 * threads of their own, waited for on the loop); see fileio.c. */
void sbx_srv_file_io_push(lua_State *L);
/* fileio.c: push a PUT body object (a copy of bytes, which an upload's
 * write job takes over); -1 (nothing pushed) when out of memory. */
int sbx_srv_file_body_push(lua_State *L, const char *bytes, size_t len);

/* ---- stream.c ---- */
/* Start streaming a run for req; the Lua table at idx has start/finish
 * functions (see lua/sbx/server/init.lua).  Always answers req. */
void sbx_srv_stream_begin(sbx_srv *S, h2o_req_t *req, int idx, sbx_srv_fmt fmt, const char *sid);
/* Kill every streaming run (drain at the grace deadline). */
void sbx_srv_stream_kill_all(sbx_srv *S);
/* ---- runs_registry.c ---- */
/* Re-attach req to the detached run run_id of session sid (or answer
 * 404/409).  Always answers req. */
void sbx_srv_stream_attach(sbx_srv *S, h2o_req_t *req, const char *sid, const char *run_id,
			   sbx_srv_fmt fmt);
/* Free detached records that ended unread long ago (once a second). */
void sbx_srv_stream_gc(sbx_srv *S);
/* At exit: kill and free the detached records no client holds. */
void sbx_srv_stream_free_all(sbx_srv *S);

/* ---- metrics.c ---- */
typedef struct sbx_srv_metrics {
	uint64_t requests;
	uint64_t auth_failures;
	uint64_t runs_started;
	uint64_t runs_exit, runs_signal, runs_timeout, runs_killed, runs_oom, runs_error,
		runs_disconnected, runs_expired;
	uint64_t bytes_streamed;
	uint64_t latency_buckets[12];
	double latency_sum;
	uint64_t latency_count;
	uint64_t responses_4xx, responses_5xx;
	uint64_t resets_before_start;
} sbx_srv_metrics;
extern sbx_srv_metrics sbx_srv_m;
/* Record a finished run: outcome name and seconds since its request. */
void sbx_srv_metrics_run(const char *outcome, double seconds);
/* Prometheus text; malloc'd. */
char *sbx_srv_metrics_render(sbx_srv *S, size_t *len);

/* monotonic ms */
uint64_t sbx_srv_now_ms(void);

#endif

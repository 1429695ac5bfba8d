/*
 * handler.c: every request of sbxd goes through on_req: /healthz and
 * /metrics are answered here; everything else is authenticated (bearer
 * token -> tenant, or handed to Lua as a possible session reference
 * token), its body decoded, and given to the Lua layer's handle(req),
 * whose answer is encoded back (or, for a run, streamed by stream.c).
 * One log line per request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include "server.h"

static bool header_is(h2o_iovec_t v, const char *prefix)
{
	size_t n = strlen(prefix);
	return v.len >= n && strncasecmp(v.base, prefix, n) == 0;
}

static const h2o_iovec_t *find_header(h2o_req_t *req, const h2o_token_t *token)
{
	ssize_t i = h2o_find_header(&req->headers, token, -1);
	return i < 0 ? NULL : &req->headers.entries[i].value;
}

/* Body format of the request (content-type); -1 for one we do not take. */
static int req_body_fmt(h2o_req_t *req)
{
	const h2o_iovec_t *ct = find_header(req, H2O_TOKEN_CONTENT_TYPE);
	/* curl -d sends application/x-www-form-urlencoded: read it as JSON. */
	if (!ct || header_is(*ct, "application/json") ||
	    header_is(*ct, "application/x-www-form-urlencoded"))
		return SRV_FMT_JSON;
	if (header_is(*ct, "application/msgpack") || header_is(*ct, "application/x-msgpack") ||
	    header_is(*ct, "application/vnd.msgpack"))
		return SRV_FMT_MSGPACK;
	return -1;
}

sbx_srv_fmt sbx_srv_req_accept_fmt(h2o_req_t *req)
{
	const h2o_iovec_t *acc = find_header(req, H2O_TOKEN_ACCEPT);
	if (acc) {
		if (h2o_strstr(acc->base, acc->len, H2O_STRLIT("msgpack")) != SIZE_MAX)
			return SRV_FMT_MSGPACK;
		if (h2o_strstr(acc->base, acc->len, H2O_STRLIT("json")) != SIZE_MAX)
			return SRV_FMT_JSON;
	}
	int f = req_body_fmt(req);
	return f == SRV_FMT_MSGPACK ? SRV_FMT_MSGPACK : SRV_FMT_JSON;
}

static void set_ctype(h2o_req_t *req, sbx_srv_fmt fmt)
{
	if (fmt == SRV_FMT_MSGPACK)
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
			       H2O_STRLIT("application/msgpack"));
	else
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
			       H2O_STRLIT("application/json"));
}

/* Send len bytes (copied) with status. */
static void send_bytes(h2o_req_t *req, int status, const char *data, size_t len)
{
	char *copy = h2o_mem_alloc_pool(&req->pool, len + 1);
	memcpy(copy, data, len);
	copy[len] = '\0';
	req->res.status = status;
	req->res.reason = status < 300 ? "OK" : "Error";
	h2o_send_inline(req, copy, len);
}

static void count_status(int status)
{
	if (status >= 500)
		sbx_srv_m.responses_5xx++;
	else if (status >= 400)
		sbx_srv_m.responses_4xx++;
	if (status == 401)
		sbx_srv_m.auth_failures++;
}

void sbx_srv_send_error(h2o_req_t *req, int status, const char *kind, const char *msg,
			sbx_srv_fmt fmt)
{
	size_t len = 0;
	char *body = sbx_srv_error_body(fmt, kind, msg, &len);

	count_status(status);
	set_ctype(req, fmt);
	if (status == 401)
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_WWW_AUTHENTICATE, NULL,
			       H2O_STRLIT("Bearer"));
	send_bytes(req, status, body ? body : "", body ? len : 0);
	free(body);
}

static void log_req(h2o_req_t *req, int status, const char *tenant, uint64_t t0, const char *extra)
{
	sbx_srv_log(SRV_LOG_INFO,
		    "event=request method=%.*s path=\"%.*s\" status=%d tenant=%s ms=%lu%s%s",
		    (int)req->method.len, req->method.base,
		    (int)(req->path.len > 200 ? 200 : req->path.len), req->path.base, status,
		    tenant ? tenant : "-", (unsigned long)(sbx_srv_now_ms() - t0), extra ? " " : "",
		    extra ? extra : "");
}

/* Answer the Lua response table at the top of the stack. */
static int answer(sbx_srv *S, h2o_req_t *req, sbx_srv_fmt fmt)
{
	lua_State *L = S->L;
	int top = lua_gettop(L), status;

	lua_getfield(L, top, "status");
	status = (int)lua_tointeger(L, -1);
	lua_pop(L, 1);
	if (status < 100 || status > 599)
		status = 500;
	lua_getfield(L, top, "headers");
	if (lua_istable(L, -1)) {
		lua_pushnil(L);
		while (lua_next(L, -2)) {
			size_t kl, vl;
			const char *k = lua_tolstring(L, -2, &kl), *v = lua_tolstring(L, -1, &vl);
			if (k && v) {
				char *kc = h2o_mem_alloc_pool(&req->pool, kl),
				     *vc = h2o_mem_alloc_pool(&req->pool, vl);
				memcpy(kc, k, kl);
				memcpy(vc, v, vl);
				h2o_add_header_by_str(&req->pool, &req->res.headers, kc, kl, 1,
						      NULL, vc, vl);
			}
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 1);
	count_status(status);
	lua_getfield(L, top, "file");
	if (lua_istable(L, -1)) {
		lua_getfield(L, -1, "fd");
		lua_getfield(L, -2, "size");
		int fd = lua_isnumber(L, -2) ? (int)lua_tointeger(L, -2) : -1;
		lua_Number size = lua_tonumber(L, -1);
		lua_pop(L, 3);
		if (fd < 0 || size < 0) {
			if (fd >= 0)
				close(fd);
			sbx_srv_send_error(req, 500, "SandboxExecutionError",
					   "the Lua layer gave a bad file", fmt);
			return 500;
		}
		if (h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"))) {
			/* The size without the content (a client resuming an upload). */
			close(fd);
			req->res.status = 200;
			req->res.reason = "OK";
			req->res.content_length = (size_t)size;
			h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
				       H2O_STRLIT("application/octet-stream"));
			h2o_send_inline(req, "", 0);
			return 200;
		}
		sbx_srv_send_file(req, fd, (uint64_t)size);
		return 200;
	}
	lua_pop(L, 1);
	lua_getfield(L, top, "raw");
	if (lua_isstring(L, -1)) {
		size_t len;
		const char *raw = lua_tolstring(L, -1, &len);
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
			       H2O_STRLIT("application/octet-stream"));
		send_bytes(req, status, raw, len);
		lua_pop(L, 1);
		return status;
	}
	lua_pop(L, 1);
	lua_getfield(L, top, "body");
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		send_bytes(req, status, "", 0);
		return status;
	}
	size_t len;
	char *body = sbx_srv_encode(L, -1, fmt, &len);
	lua_pop(L, 1);
	set_ctype(req, fmt);
	send_bytes(req, status, body ? body : "", body ? len : 0);
	free(body);
	return status;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
	sbx_srv *S = sbx_srv_g;
	lua_State *L = S->L;
	uint64_t t0 = sbx_srv_now_ms();
	sbx_srv_fmt out = sbx_srv_req_accept_fmt(req);
	const char *tenant = NULL;
	const h2o_iovec_t *auth;
	size_t pathlen = req->query_at != SIZE_MAX ? req->query_at : req->path.len;
	int top = lua_gettop(L);
	(void)self;

	sbx_srv_m.requests++;
	if (h2o_memis(req->path.base, pathlen, H2O_STRLIT("/healthz"))) {
		req->res.status = 200;
		req->res.reason = "OK";
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
			       H2O_STRLIT("text/plain"));
		h2o_send_inline(req, S->draining ? "draining\n" : "ok\n", SIZE_MAX);
		return 0;
	}
	auth = find_header(req, H2O_TOKEN_AUTHORIZATION);
	const char *token = NULL;
	size_t token_len = 0;
	if (auth && header_is(*auth, "Bearer ")) {
		token = auth->base + 7;
		token_len = auth->len - 7;
		tenant = sbx_srv_auth_tenant(S, token, token_len);
	}
	if (!token) {
		sbx_srv_send_error(req, 401, "Unauthorized",
				   "an Authorization: Bearer <token> header is required", out);
		log_req(req, 401, NULL, t0, NULL);
		return 0;
	}
	if (!tenant && (token_len < 5 || memcmp(token, "sbxr_", 5) != 0)) {
		sbx_srv_send_error(req, 401, "Unauthorized", "unknown token", out);
		log_req(req, 401, NULL, t0, NULL);
		return 0;
	}
	if (h2o_memis(req->path.base, pathlen, H2O_STRLIT("/metrics"))) {
		if (!tenant) {
			sbx_srv_send_error(req, 403, "Forbidden",
					   "session reference tokens cannot read metrics", out);
			log_req(req, 403, NULL, t0, NULL);
			return 0;
		}
		size_t len;
		char *text = sbx_srv_metrics_render(S, &len);
		h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
			       H2O_STRLIT("text/plain; version=0.0.4"));
		send_bytes(req, 200, text ? text : "", text ? len : 0);
		free(text);
		log_req(req, 200, tenant, t0, NULL);
		return 0;
	}
	if (S->draining) {
		sbx_srv_send_error(req, 503, "Unavailable", "the server is shutting down", out);
		log_req(req, 503, tenant, t0, NULL);
		return 0;
	}

	lua_rawgeti(L, LUA_REGISTRYINDEX, S->handle_ref);
	lua_createtable(L, 0, 8);
	lua_pushlstring(L, req->method.base, req->method.len);
	lua_setfield(L, -2, "method");
	lua_pushlstring(L, req->path.base, pathlen);
	lua_setfield(L, -2, "path");
	if (req->query_at != SIZE_MAX) {
		/* The raw query after '?' (the files route reads offset=N). */
		lua_pushlstring(L, req->path.base + req->query_at + 1,
				req->path.len - req->query_at - 1);
		lua_setfield(L, -2, "query");
	}
	if (tenant) {
		lua_pushstring(L, tenant);
		lua_setfield(L, -2, "tenant");
	} else {
		lua_pushlstring(L, token, token_len);
		lua_setfield(L, -2, "ref_token");
	}
	lua_pushstring(L, out == SRV_FMT_MSGPACK ? "msgpack" : "json");
	lua_setfield(L, -2, "format");
	if (S->unix_path) {
		lua_pushfstring(L, "unix:%s", S->unix_path);
	} else if (req->authority.len > 0 && req->authority.len < 256) {
		/* h2o sees the front's plaintext socketpair: the scheme is the listener's. */
		lua_pushstring(L, S->tls_cert ? "https" : "http");
		lua_pushliteral(L, "://");
		lua_pushlstring(L, req->authority.base, req->authority.len);
		lua_concat(L, 3);
	} else {
		lua_pushnil(L);
	}
	lua_setfield(L, -2, "endpoint");
	if (req->entity.base) {
		bool is_files =
			h2o_strstr(req->path.base, pathlen, H2O_STRLIT("/files/")) != SIZE_MAX;
		/* An upload's bytes reach Lua as a body object the write job
		 * takes over (fileio.c): one copy, not two. */
		if (!is_files) {
			lua_pushlstring(L, req->entity.base, req->entity.len);
		} else if (sbx_srv_file_body_push(L, req->entity.base, req->entity.len) != 0) {
			lua_settop(L, top);
			sbx_srv_send_error(req, 503, "SandboxExecutionError",
					   "out of memory for the request body", out);
			log_req(req, 503, tenant, t0, NULL);
			return 0;
		}
		lua_setfield(L, -2, "raw");
		if (!is_files && req->entity.len > 0) {
			int fmt = req_body_fmt(req);
			char why[256];
			if (fmt < 0) {
				lua_settop(L, top);
				sbx_srv_send_error(
					req, 415, "InvalidArgument",
					"content-type must be application/json or application/msgpack",
					out);
				log_req(req, 415, tenant, t0, NULL);
				return 0;
			}
			if (sbx_srv_decode(L, (sbx_srv_fmt)fmt, req->entity.base, req->entity.len,
					   why, sizeof(why)) != 0) {
				lua_settop(L, top);
				char msg[300];
				snprintf(msg, sizeof(msg), "body: %s", why);
				sbx_srv_send_error(req, 400, "InvalidArgument", msg, out);
				log_req(req, 400, tenant, t0, NULL);
				return 0;
			}
			lua_setfield(L, -2, "body");
		}
	}
	sbx_srv_task_start(S, req, out, tenant, t0);
	return 0;
}

void sbx_srv_handler_fail(h2o_req_t *req, sbx_srv_fmt out, const char *tenant, uint64_t t0)
{
	sbx_srv_send_error(req, 500, "SandboxExecutionError",
			   "internal error in the server's Lua layer", out);
	log_req(req, 500, tenant, t0, NULL);
}

void sbx_srv_handler_answer(sbx_srv *S, h2o_req_t *req, sbx_srv_fmt out, const char *tenant,
			    uint64_t t0)
{
	lua_State *L = S->L;
	int top = lua_gettop(L) - 1, status;

	if (!lua_istable(L, -1)) {
		lua_settop(L, top);
		sbx_srv_send_error(req, 500, "SandboxExecutionError",
				   "the Lua layer gave no answer", out);
		log_req(req, 500, tenant, t0, NULL);
		return;
	}
	lua_getfield(L, -1, "stream");
	if (lua_istable(L, -1)) {
		char sid[64] = "-";
		lua_getfield(L, -1, "session_id");
		if (lua_isstring(L, -1))
			snprintf(sid, sizeof(sid), "%s", lua_tostring(L, -1));
		lua_pop(L, 1);
		sbx_srv_stream_begin(S, req, lua_gettop(L), out, sid);
		lua_settop(L, top);
		log_req(req, 200, tenant, t0, "stream=run");
		return;
	}
	lua_pop(L, 1);
	lua_getfield(L, -1, "stream_attach");
	if (lua_istable(L, -1)) {
		char sid[64] = "", rid[64] = "";
		lua_getfield(L, -1, "session_id");
		if (lua_isstring(L, -1))
			snprintf(sid, sizeof(sid), "%s", lua_tostring(L, -1));
		lua_getfield(L, -2, "run_id");
		if (lua_isstring(L, -1))
			snprintf(rid, sizeof(rid), "%s", lua_tostring(L, -1));
		lua_settop(L, top);
		sbx_srv_stream_attach(S, req, sid, rid, out);
		log_req(req, 200, tenant, t0, "stream=attach");
		return;
	}
	lua_pop(L, 1);
	char extra[128] = "";
	lua_getfield(L, -1, "log");
	if (lua_isstring(L, -1))
		snprintf(extra, sizeof(extra), "%s", lua_tostring(L, -1));
	lua_pop(L, 1);
	status = answer(S, req, out);
	lua_settop(L, top);
	log_req(req, status, tenant, t0, extra[0] ? extra : NULL);
}

void sbx_srv_handler_register(sbx_srv *S, h2o_pathconf_t *pathconf)
{
	h2o_handler_t *h = h2o_create_handler(pathconf, sizeof(*h));
	(void)S;
	h->on_req = on_req;
}

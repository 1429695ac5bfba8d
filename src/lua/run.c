/*
 * run.c: the run userdata of sbx.core.
 *
 *   s:run(ropts)                    run | nil, kind, msg
 *   r:next(timeout_ms, want_stdout, want_stderr)
 *                                   "stdout", data | "stderr", data |
 *                                   "exit", result | false (timeout) |
 *                                   nil, kind, msg
 *   r:kill(signo)                   true | nil, kind, msg
 *   r:result()                      result | nil while running
 *   r:fds()                         stdout, stderr, status, pidfd (-1 once closed)
 *   r:write(data)                   bytes taken now (0: full; next() wakes when
 *                                   it has room) | nil, kind, msg
 *   r:close_stdin()                 true | nil, kind, msg (pty: types ^D)
 *   r:resize(rows, cols)            true | nil, kind, msg
 *   r:pty()                         true when the run has a terminal
 *   r:take_listener()               own_netns: the proxy listener fd of its
 *                                   namespace (the caller's) | nil once taken
 *   r:close()                       true (kills the run if still going)
 *
 * result = { term = "exit"|"signal"|"timeout"|"killed"|"oom"|"session_expired"|"error",
 *            returncode =, signo =, runtime_ms =, error = string|nil,
 *            error_kind = "SandboxExecutionError"|"InvalidArgument" (with
 *            error), error_option = "cwd"|nil (InvalidArgument: the
 *            option that is wrong), error_detail = error without it }
 *
 * A run keeps its session userdata alive through its environment table, so
 * the collector never closes a session under a run somebody still holds.
 * The C run does not use the session after it started, so closing the
 * session explicitly while a run userdata exists is safe too.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lsbx.h"

typedef struct lsbx_run {
	sbx_run *r;
	bool feeds_stdin;      /* the core writes stdin_data to a pipe in next() */
	bool have_result;      /* result holds the final result */
	sbx_run_result result; /* kept so r:result() works after close */
} lsbx_run;

/*
 * The core writes stdin_data to a pipe inside sbx_run_next(); when the
 * command exits without reading it all, that write raises SIGPIPE, whose
 * default action kills the whole host process.  Ignoring SIGPIPE process-
 * wide is not ours to decide (and the disposition would be inherited by
 * the sandbox), so block it around the call and swallow only a SIGPIPE
 * the call itself caused; the write then fails with EPIPE, which the core
 * handles.
 */
static bool sigpipe_block(sigset_t *old)
{
	sigset_t set, pending;
	bool was_pending;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	sigpending(&pending);
	was_pending = sigismember(&pending, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, old);
	return was_pending;
}

static void sigpipe_restore(const sigset_t *old, bool was_pending)
{
	static const struct timespec zero = {0, 0};
	sigset_t set, pending;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	sigpending(&pending);
	if (!was_pending && sigismember(&pending, SIGPIPE))
		while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR)
			;
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

static const char *const run_fields[] = {
	"argv",	      "env",	    "cwd",	  "stdin",     "stdout",
	"stderr",     "stdin_data", "timeout_ms", "grace_ms",  "network_mode",
	"stdin_live", "pty_rows",   "pty_cols",	  "own_netns", NULL,
};

static lsbx_run *check_run(lua_State *L, int idx)
{
	return luaL_checkudata(L, idx, LSBX_RUN_MT);
}

sbx_run *lsbx_run_ptr(lua_State *L, int idx)
{
	return check_run(L, idx)->r;
}

static sbx_io opt_io(lua_State *L, int idx, const char *field)
{
	const char *v = lsbx_opt_string(L, idx, field);

	if (!v || strcmp(v, "pipe") == 0)
		return SBX_IO_PIPE;
	if (strcmp(v, "null") == 0)
		return SBX_IO_NULL;
	if (strcmp(v, "inherit") == 0)
		return SBX_IO_INHERIT;
	return luaL_error(L, "field '%s': \"pipe\", \"null\" or \"inherit\" expected, got \"%s\"",
			  field, v);
}

/* s:run(ropts) */
int lsbx_session_run(lua_State *L)
{
	lsbx_session *sess = lsbx_check_session(L, 1);
	sbx_run_opts o;
	sbx_err err = {0};
	lsbx_run *ud;
	size_t argc;

	luaL_checktype(L, 2, LUA_TTABLE);
	lua_settop(L, 2);
	lsbx_check_fields(L, 2, "run options", run_fields);
	memset(&o, 0, sizeof(o));
	o.argv = lsbx_opt_strv(L, 2, "argv", true, &argc);
	if (argc == 0)
		luaL_error(L, "field 'argv': at least one entry expected");
	o.envp = lsbx_opt_strv(L, 2, "env", false, NULL);
	if (!o.envp) {
		/* No env means an empty environment, never the host's. */
		const char **empty = lua_newuserdata(L, sizeof(*empty));

		*empty = NULL;
		o.envp = empty;
	}
	o.cwd = lsbx_opt_string(L, 2, "cwd");
	o.stdin_mode = opt_io(L, 2, "stdin");
	o.stdout_mode = opt_io(L, 2, "stdout");
	o.stderr_mode = opt_io(L, 2, "stderr");
	o.stdin_data = lsbx_opt_lstring(L, 2, "stdin_data", &o.stdin_len);
	if (o.stdin_data && o.stdin_mode != SBX_IO_PIPE)
		luaL_error(L, "field 'stdin_data': needs stdin = \"pipe\"");
	o.timeout_ms = (uint32_t)lsbx_opt_int(L, 2, "timeout_ms", 0, UINT32_MAX, 0);
	o.grace_ms = (uint32_t)lsbx_opt_int(L, 2, "grace_ms", 0, UINT32_MAX, 0);
	o.network_mode = lsbx_opt_net(L, 2);
	o.stdin_live = lsbx_opt_bool(L, 2, "stdin_live", false);
	o.pty_rows = (uint16_t)lsbx_opt_int(L, 2, "pty_rows", 0, UINT16_MAX, 0);
	o.pty_cols = (uint16_t)lsbx_opt_int(L, 2, "pty_cols", 0, UINT16_MAX, 0);
	o.own_netns = lsbx_opt_bool(L, 2, "own_netns", false);
	if (o.stdin_live && o.stdin_mode != SBX_IO_PIPE)
		luaL_error(L, "field 'stdin_live': needs stdin = \"pipe\"");

	if (!sess->s)
		return lsbx_push_fail(L, SBX_E_SESSION_CLOSED, "the session is closed");

	ud = lua_newuserdata(L, sizeof(*ud));
	memset(ud, 0, sizeof(*ud));
	luaL_getmetatable(L, LSBX_RUN_MT);
	lua_setmetatable(L, -2);
	lua_newtable(L);
	lua_pushvalue(L, 1);
	lua_setfield(L, -2, "session");
	lua_setfenv(L, -2);

	ud->r = sbx_run_start(sess->s, &o, &err);
	if (!ud->r)
		return lsbx_push_err(L, &err);
	ud->feeds_stdin =
		(o.stdin_mode == SBX_IO_PIPE && o.stdin_len > 0) || o.stdin_live || o.pty_rows;
	return 1;
}

static void push_result(lua_State *L, const sbx_run_result *res)
{
	lua_createtable(L, 0, 5);
	lua_pushstring(L, sbx_term_name(res->term));
	lua_setfield(L, -2, "term");
	lua_pushinteger(L, res->returncode);
	lua_setfield(L, -2, "returncode");
	lua_pushinteger(L, res->signo);
	lua_setfield(L, -2, "signo");
	lua_pushnumber(L, (lua_Number)res->runtime_ms);
	lua_setfield(L, -2, "runtime_ms");
	if (res->term == SBX_TERM_ERROR) {
		/* The core fills error[]; never trust it to be terminated. */
		size_t len = strnlen(res->error, sizeof(res->error));
		lua_pushlstring(L, res->error, len);
		lua_setfield(L, -2, "error");
		/* The kind as a field: callers never parse it out of error. */
		lua_pushstring(L,
			       sbx_err_kind_name(res->error_kind == SBX_E_NONE ? SBX_E_EXECUTION
									       : res->error_kind));
		lua_setfield(L, -2, "error_kind");
		size_t olen = strnlen(res->error_option, sizeof(res->error_option));
		if (olen > 0 && olen < sizeof(res->error_option)) {
			lua_pushlstring(L, res->error_option, olen);
			lua_setfield(L, -2, "error_option");
			/* error is "<option> <detail>" (sbx.h) */
			size_t skip = olen + 1 <= len ? olen + 1 : len;
			lua_pushlstring(L, res->error + skip, len - skip);
			lua_setfield(L, -2, "error_detail");
		}
	}
}

/* Remember the final result, so it survives r:close(). */
static void save_result(lsbx_run *ud)
{
	const sbx_run_result *res;

	if (!ud->r || ud->have_result)
		return;
	res = sbx_run_result_get(ud->r);
	if (res && res->term != SBX_TERM_NONE) {
		ud->result = *res;
		ud->have_result = true;
	}
}

/* r:next(timeout_ms, want_stdout, want_stderr) */
static int l_run_next(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);
	int timeout = (int)lsbx_arg_int(L, 2, "timeout_ms", -1, INT32_MAX, -1);
	bool want_out = lsbx_arg_bool(L, 3, "want_stdout", true);
	bool want_err = lsbx_arg_bool(L, 4, "want_stderr", true);
	sbx_event ev = {0};
	sbx_err err = {0};
	int rc;

	if (!ud->r)
		return luaL_error(L, "r:next(): the run is closed");
	if (ud->feeds_stdin) {
		sigset_t old;
		bool was_pending = sigpipe_block(&old);

		rc = sbx_run_next(ud->r, timeout, want_out, want_err, &ev, &err);
		sigpipe_restore(&old, was_pending);
	} else {
		rc = sbx_run_next(ud->r, timeout, want_out, want_err, &ev, &err);
	}
	if (rc < 0)
		return lsbx_push_err(L, &err);
	switch (ev.type) {
	case SBX_EV_NONE:
		lua_pushboolean(L, 0);
		return 1;
	case SBX_EV_STDOUT:
	case SBX_EV_STDERR:
		lua_pushstring(L, ev.type == SBX_EV_STDOUT ? "stdout" : "stderr");
		lua_pushlstring(L, ev.data ? ev.data : "", ev.data ? ev.len : 0);
		return 2;
	case SBX_EV_EXIT:
		save_result(ud);
		lua_pushliteral(L, "exit");
		if (ud->have_result) {
			push_result(L, &ud->result);
		} else {
			sbx_run_result res = {.term = SBX_TERM_ERROR, .returncode = -1};

			snprintf(res.error, sizeof(res.error),
				 "the core reported an exit without a result");
			push_result(L, &res);
		}
		return 2;
	}
	return lsbx_push_fail(L, SBX_E_EXECUTION, "the core returned an unknown event");
}

/* r:kill(signo) */
static int l_run_kill(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);
	int signo = (int)lsbx_arg_int(L, 2, "signo", 1, SIGRTMAX, SIGKILL);
	sbx_err err = {0};

	if (!ud->r)
		return lsbx_push_fail(L, SBX_E_INVALID_ARGUMENT, "the run is closed");
	if (sbx_run_kill(ud->r, signo, &err) < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

/* r:result() */
static int l_run_result(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);

	save_result(ud);
	if (!ud->have_result) {
		lua_pushnil(L);
		return 1;
	}
	push_result(L, &ud->result);
	return 1;
}

/* r:fds(): for callers with their own event loop. */
static int l_run_fds(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);

	lua_pushinteger(L, ud->r ? sbx_run_stdout_fd(ud->r) : -1);
	lua_pushinteger(L, ud->r ? sbx_run_stderr_fd(ud->r) : -1);
	lua_pushinteger(L, ud->r ? sbx_run_status_fd(ud->r) : -1);
	lua_pushinteger(L, ud->r ? sbx_run_pidfd(ud->r) : -1);
	return 4;
}

/* r:write(data) */
static int l_run_write(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);
	size_t len, done = 0;
	const char *data = luaL_checklstring(L, 2, &len);
	sbx_err err = {0};
	sigset_t old;

	if (!ud->r)
		return lsbx_push_fail(L, SBX_E_INVALID_ARGUMENT, "the run is closed");
	/* A reader that went away: EPIPE, never our SIGPIPE (see above). */
	bool was_pending = sigpipe_block(&old);
	int rc = sbx_run_write(ud->r, data, len, &done, &err);
	sigpipe_restore(&old, was_pending);
	if (rc < 0)
		return lsbx_push_err(L, &err);
	lua_pushinteger(L, (lua_Integer)done);
	return 1;
}

/* r:close_stdin() */
static int l_run_close_stdin(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);
	sbx_err err = {0};
	sigset_t old;

	if (!ud->r)
		return lsbx_push_fail(L, SBX_E_INVALID_ARGUMENT, "the run is closed");
	bool was_pending = sigpipe_block(&old);
	int rc = sbx_run_close_stdin(ud->r, &err);
	sigpipe_restore(&old, was_pending);
	if (rc < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

/* r:resize(rows, cols) */
static int l_run_resize(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);
	uint16_t rows = (uint16_t)lsbx_arg_int(L, 2, "rows", 1, UINT16_MAX, 24);
	uint16_t cols = (uint16_t)lsbx_arg_int(L, 3, "cols", 1, UINT16_MAX, 80);
	sbx_err err = {0};

	if (!ud->r)
		return lsbx_push_fail(L, SBX_E_INVALID_ARGUMENT, "the run is closed");
	if (sbx_run_resize(ud->r, rows, cols, &err) < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

/* r:pty() */
static int l_run_pty(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);

	lua_pushboolean(L, ud->r && sbx_run_has_pty(ud->r));
	return 1;
}

static int l_run_take_listener(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);
	int fd = ud->r ? sbx_run_take_listener(ud->r) : -1;

	if (fd < 0)
		return 0;
	lua_pushinteger(L, fd);
	return 1;
}

/* r:close() and __gc */
static int l_run_close(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);

	if (ud->r) {
		save_result(ud);
		sbx_run_free(ud->r);
		ud->r = NULL;
	}
	lua_pushboolean(L, 1);
	return 1;
}

static int l_run_tostring(lua_State *L)
{
	lsbx_run *ud = check_run(L, 1);

	save_result(ud);
	lua_pushfstring(L, "sbx.core.run(%s)",
			ud->have_result ? sbx_term_name(ud->result.term)
					: (ud->r ? "running" : "closed"));
	return 1;
}

static const luaL_Reg run_methods[] = {
	{"next", l_run_next},
	{"kill", l_run_kill},
	{"result", l_run_result},
	{"fds", l_run_fds},
	{"close", l_run_close},
	{"write", l_run_write},
	{"close_stdin", l_run_close_stdin},
	{"resize", l_run_resize},
	{"pty", l_run_pty},
	{"take_listener", l_run_take_listener},
	{NULL, NULL},
};

void lsbx_run_register(lua_State *L)
{
	lsbx_register_class(L, LSBX_RUN_MT, run_methods, l_run_close, l_run_tostring);
}

/*
 * core.c: the sbx.core Lua module (luaopen_sbx_core) and its session
 * userdata.
 *
 * sbx.core is the C core as seen from Lua, kept thin on purpose: it turns
 * Lua tables into the option structs of sbx.h, and sbx_err into the triple
 * nil, kind, message.  Defaults, validation of user input, policies and the
 * documented error tables are the business of the modules of lua/sbx/.
 *
 *   core.version                  SBX_VERSION
 *   core.signals                  { TERM = 15, KILL = 9, ... }
 *   core.session_open(opts)       session | nil, kind, msg
 *   core.session_start(opts)      session still setting up | nil, kind, msg
 *   s:ready_fd()                  fd to wait on before s:finish() | nil
 *   s:finish()                    true | false (not yet) | nil, kind, msg
 *   s:offer_fd(mode)              fd to wait on before a run starts | nil
 *   s:own_offer_fd()              the same for a run with own_netns (asks ahead)
 *   core.realpath(path)           canonical host path | nil, kind, msg
 *   core.monotonic_ms()           milliseconds of CLOCK_MONOTONIC (a float)
 *   s:run(ropts)                  run | nil, kind, msg        (run.c)
 *   s:put(path, data, max_bytes)  true | nil, kind, msg
 *   s:get(path, max_bytes)        data | nil, kind, msg
 *   s:close()                     true | nil, kind, msg (idempotent)
 *   s:work_dir()                  host path of the work dir (also after close)
 *   s:alive()                     boolean
 *
 * A session userdata closes its session when collected.
 */
#define _GNU_SOURCE /* dladdr, RTLD_NODELETE */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lsbx.h"

/* 2^53: the largest integer every Lua number holds exactly. */
#define LSBX_MAX_EXACT ((int64_t)1 << 53)

lsbx_session *lsbx_check_session(lua_State *L, int idx)
{
	return luaL_checkudata(L, idx, LSBX_SESSION_MT);
}

static const char *const session_fields[] = {
	"backend",     "work_dir",	  "state_dir",	  "hostname",	   "system_ro",
	"etc_files",   "binds",		  "seccomp_deny", "seccomp_allow", "host_uid",
	"aux_uid",     "tmp_bytes",	  "shm_bytes",	  "lifetime_ms",   "memory_bytes",
	"cpu_milli",   "pids_max",	  "disk_bytes",	  "cgroup_root",   "nofile",
	"fsize_bytes", "run_uid",	  "gpus",	  "gpu_dev_dir",   "gpu_paths",
	"gpu_shared",  "warm_runs",	  "network_mode", "proxy_port",	   "open_deny",
	"ca_bundle",   "expire_grace_ms", "warm_idle_ms", "spare_tag",	   NULL,
};

static const char *const bind_fields[] = {"path", "writable", NULL};

/*
 * binds = { {path=, writable=}, ... } as an sbx_bind array.  Like
 * lsbx_opt_strv, it always pushes one value (the array's userdata or nil).
 */
static sbx_bind *opt_binds(lua_State *L, int idx, size_t *n)
{
	sbx_bind *b;
	size_t len, i;
	int t;

	*n = 0;
	lua_pushliteral(L, "binds"); /* idx is absolute */
	lua_rawget(L, idx);
	if (lua_isnil(L, -1))
		return NULL;
	if (lua_type(L, -1) != LUA_TTABLE)
		luaL_error(L, "field 'binds': array expected, got %s", luaL_typename(L, -1));
	t = lua_gettop(L);
	len = lua_objlen(L, t);
	if (len > 4096)
		luaL_error(L, "field 'binds': more than 4096 entries");
	b = lua_newuserdata(L, (len ? len : 1) * sizeof(*b));
	for (i = 0; i < len; i++) {
		lua_rawgeti(L, t, (int)i + 1);
		if (lua_type(L, -1) != LUA_TTABLE)
			luaL_error(L, "field 'binds'[%d]: table expected, got %s", (int)i + 1,
				   luaL_typename(L, -1));
		lsbx_check_fields(L, -1, "binds entry", bind_fields);
		b[i].path = lsbx_opt_string(L, -1, "path");
		if (!b[i].path)
			luaL_error(L, "field 'binds'[%d]: path required", (int)i + 1);
		b[i].writable = lsbx_opt_bool(L, -1, "writable", false);
		lua_pop(L, 1);
	}
	lua_remove(L, t);
	*n = len;
	return b;
}

/* The session options table at index 1 as o (its arrays' memory is
 * pushed on the stack and lives until the caller returns); *tag: its
 * spare_tag (spare.c). */
void lsbx_session_opts(lua_State *L, sbx_session_opts *out, const char **tag)
{
	sbx_session_opts o;

	luaL_checktype(L, 1, LUA_TTABLE);
	lsbx_check_fields(L, 1, "session options", session_fields);
	memset(&o, 0, sizeof(o));
	*tag = lsbx_opt_string(L, 1, "spare_tag");
	o.backend = lsbx_opt_string(L, 1, "backend");
	if (!o.backend)
		luaL_error(L, "field 'backend': required");
	o.work_dir = lsbx_opt_string(L, 1, "work_dir");
	o.state_dir = lsbx_opt_string(L, 1, "state_dir");
	o.hostname = lsbx_opt_string(L, 1, "hostname");
	o.ca_bundle = lsbx_opt_string(L, 1, "ca_bundle");
	/* The arrays' memory is pushed on the stack and lives until we return. */
	o.system_ro = lsbx_opt_strv(L, 1, "system_ro", false, NULL);
	o.etc_files = lsbx_opt_strv(L, 1, "etc_files", false, NULL);
	o.seccomp_deny = lsbx_opt_strv(L, 1, "seccomp_deny", false, NULL);
	o.seccomp_allow = lsbx_opt_strv(L, 1, "seccomp_allow", false, NULL);
	o.binds = opt_binds(L, 1, &o.n_binds);
	/* (uid_t)-1 means "no change" to the kernel: never a valid mapping. */
	o.host_uid = (uid_t)lsbx_opt_int(L, 1, "host_uid", 0, (int64_t)UINT32_MAX - 1, 0);
	o.aux_uid = (uid_t)lsbx_opt_int(L, 1, "aux_uid", 0, (int64_t)UINT32_MAX - 2, 0);
	o.tmp_bytes = (uint64_t)lsbx_opt_int(L, 1, "tmp_bytes", 0, LSBX_MAX_EXACT, 0);
	o.shm_bytes = (uint64_t)lsbx_opt_int(L, 1, "shm_bytes", 0, LSBX_MAX_EXACT, 0);
	o.lifetime_ms = (uint64_t)lsbx_opt_int(L, 1, "lifetime_ms", 0, LSBX_MAX_EXACT, 0);
	o.expire_grace_ms = (uint32_t)lsbx_opt_int(L, 1, "expire_grace_ms", 0, 3600000, 0);
	o.memory_bytes = (uint64_t)lsbx_opt_int(L, 1, "memory_bytes", 0, LSBX_MAX_EXACT, 0);
	o.cpu_milli = (uint32_t)lsbx_opt_int(L, 1, "cpu_milli", 0, 1000000, 0);
	o.pids_max = (uint32_t)lsbx_opt_int(L, 1, "pids_max", 0, 4194304, 0);
	o.disk_bytes = (uint64_t)lsbx_opt_int(L, 1, "disk_bytes", 0, LSBX_MAX_EXACT, 0);
	o.cgroup_root = lsbx_opt_string(L, 1, "cgroup_root");
	o.nofile = (uint64_t)lsbx_opt_int(L, 1, "nofile", 0, 1048576, 0);
	o.fsize_bytes = (uint64_t)lsbx_opt_int(L, 1, "fsize_bytes", 0, LSBX_MAX_EXACT, 0);
	o.run_uid = (uid_t)lsbx_opt_int(L, 1, "run_uid", 0, (int64_t)UINT32_MAX - 1, 0);
	o.gpus = (uint32_t)lsbx_opt_int(L, 1, "gpus", 0, 64, 0);
	o.gpu_dev_dir = lsbx_opt_string(L, 1, "gpu_dev_dir");
	o.gpu_paths = lsbx_opt_strv(L, 1, "gpu_paths", false, NULL);
	o.gpu_shared = lsbx_opt_bool(L, 1, "gpu_shared", false);
	o.warm_runs = (uint32_t)lsbx_opt_int(L, 1, "warm_runs", 0, SBX_MAX_WARM_RUNS, 0);
	o.warm_idle_ms = (uint32_t)lsbx_opt_int(L, 1, "warm_idle_ms", 0, UINT32_MAX, 0);
	o.network_mode = lsbx_opt_net(L, 1);
	o.proxy_port = (uint16_t)lsbx_opt_int(L, 1, "proxy_port", 0, 65535, 0);
	o.open_deny = lsbx_opt_strv(L, 1, "open_deny", false, NULL);
	*out = o;
}

/* core.session_open(opts), or with start: core.session_start(opts); a
 * spare of the same shape (core.spares_keep) is taken when one is ready. */
static int session_open(lua_State *L, bool start)
{
	sbx_session_opts o;
	lsbx_session *ud;
	sbx_err err = {0};
	const char *wd, *tag;

	lua_settop(L, 1);
	lsbx_session_opts(L, &o, &tag);
	/* The userdata exists before the session does, so that no Lua error
	 * (out of memory) can come between opening and owning it. */
	ud = lua_newuserdata(L, sizeof(*ud));
	ud->s = NULL;
	luaL_getmetatable(L, LSBX_SESSION_MT);
	lua_setmetatable(L, -2);
	lua_newtable(L);
	lua_setfenv(L, -2);

	ud->s = sbx_spares_take(&o, tag, &err);
	if (!ud->s)
		ud->s = start ? sbx_session_start(&o, &err) : sbx_session_open(&o, &err);
	if (!ud->s)
		return lsbx_push_err(L, &err);
	/* Keep a copy of the work dir path: it stays readable after close. */
	wd = sbx_session_work_dir(ud->s);
	lua_getfenv(L, -1);
	lua_pushstring(L, wd ? wd : "");
	lua_setfield(L, -2, "work_dir");
	lua_pop(L, 1);
	return 1;
}

static int l_session_open(lua_State *L)
{
	return session_open(L, false);
}

/* core.session_start(opts) -> session (setting up) | nil, kind, msg: see
 * s:ready_fd() and s:finish() (sbx_session_start in sbx.h). */
static int l_session_start(lua_State *L)
{
	return session_open(L, true);
}

/* s:ready_fd() -> fd readable when s:finish() will not wait, or nil once
 * finished (the session owns it). */
static int l_session_ready_fd(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	int fd = ud->s ? sbx_session_ready_fd(ud->s) : -1;
	if (fd < 0)
		return 0;
	lua_pushinteger(L, fd);
	return 1;
}

/* s:finish() -> true (ready) | false (not yet) | nil, kind, msg; never
 * waits.  On false and on a failure the caller still closes s. */
static int l_session_finish(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	sbx_err err = {0};

	if (!ud->s)
		return lsbx_push_fail(L, SBX_E_SESSION_CLOSED, "the session is closed");
	int rc = sbx_session_finish(ud->s, 0, &err);
	if (rc < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, rc == 0);
	return 1;
}

/* s:offer_fd(network_mode) -> fd readable when a run of that mode can start
 * without waiting for the sandbox, or nil when there is nothing to wait for. */
static int l_session_offer_fd(lua_State *L)
{
	static const char *const modes[] = {"blocked", "allowlist", "open", NULL};
	lsbx_session *ud = lsbx_check_session(L, 1);
	int mode = luaL_checkoption(L, 2, "blocked", modes);
	int fd = ud->s ? sbx_session_offer_fd(ud->s, (sbx_net)mode) : -1;
	if (fd < 0)
		return 0;
	lua_pushinteger(L, fd);
	return 1;
}

/* s:own_offer_fd() -> the same for a run with own_netns: asks the sandbox
 * for one now; nil when one is ready (or the session cannot have one: the
 * run then says why). */
static int l_session_own_offer_fd(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	int fd = ud->s ? sbx_session_own_offer_fd(ud->s) : -1;
	if (fd < 0)
		return 0;
	lua_pushinteger(L, fd);
	return 1;
}

/* The (path, ..., max_bytes) arguments common to put and get: path at 2
 * (NUL bytes allowed, the core refuses them with its own message), the
 * size cap at max_idx. */
static const char *file_args(lua_State *L, int max_idx, size_t *path_len, size_t *max_bytes)
{
	if (lua_type(L, 2) != LUA_TSTRING)
		luaL_argerror(L, 2, "string expected");
	if (lua_isnoneornil(L, max_idx))
		luaL_argerror(L, max_idx, "max_bytes required");
	*max_bytes = (size_t)lsbx_arg_int(L, max_idx, "max_bytes", 0, LSBX_MAX_EXACT, 0);
	return lua_tolstring(L, 2, path_len);
}

static int closed(lua_State *L)
{
	return lsbx_push_fail(L, SBX_E_SESSION_CLOSED, "the session is closed");
}

/* s:put(path, data, max_bytes) */
static int l_session_put(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	sbx_err err = {0};
	size_t path_len, max_bytes, len;
	const char *path, *data;

	if (lua_type(L, 3) != LUA_TSTRING)
		luaL_argerror(L, 3, "string expected");
	path = file_args(L, 4, &path_len, &max_bytes);
	data = lua_tolstring(L, 3, &len);
	if (!ud->s)
		return closed(L);
	if (sbx_file_put(sbx_session_work_dir_fd(ud->s), path, path_len, data, len, max_bytes,
			 sbx_session_host_uid(ud->s), sbx_session_host_gid(ud->s), &err) < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

/* s:get(path, max_bytes) */
static int l_session_get(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	sbx_err err = {0};
	size_t path_len, max_bytes, len = 0;
	const char *path;
	char *out = NULL;

	path = file_args(L, 3, &path_len, &max_bytes);
	if (!ud->s)
		return closed(L);
	if (sbx_file_get(sbx_session_work_dir_fd(ud->s), path, path_len, max_bytes, &out, &len,
			 &err) < 0)
		return lsbx_push_err(L, &err);
	/* lua_pushlstring only fails on out of memory, which would leak out:
	 * acceptable, the process is in trouble anyway. */
	lua_pushlstring(L, out ? out : "", len);
	free(out);
	return 1;
}

/* s:open_file(path, max_bytes) -> fd (the caller's), size | nil, kind, msg:
 * what s:get would read, for a caller that streams it (sbxd). */
static int l_session_open_file(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	sbx_err err = {0};
	size_t path_len, max_bytes;
	uint64_t size = 0;
	const char *path = file_args(L, 3, &path_len, &max_bytes);

	if (!ud->s)
		return closed(L);
	int fd = sbx_file_open(sbx_session_work_dir_fd(ud->s), path, path_len, max_bytes, &size,
			       &err);
	if (fd < 0)
		return lsbx_push_err(L, &err);
	lua_pushinteger(L, fd);
	lua_pushnumber(L, (lua_Number)size);
	return 2;
}

/* s:close() */
static int l_session_close(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	sbx_err err = {0};
	sbx_session *s = ud->s;

	ud->s = NULL;
	if (s && sbx_session_close(s, &err) < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

static int l_session_gc(lua_State *L)
{
	lsbx_session *ud = luaL_checkudata(L, 1, LSBX_SESSION_MT);

	if (ud->s) {
		sbx_session_close(ud->s, NULL);
		ud->s = NULL;
	}
	return 0;
}

/* s:work_dir() */
static int l_session_work_dir(lua_State *L)
{
	lsbx_check_session(L, 1);
	lua_getfenv(L, 1);
	lua_getfield(L, -1, "work_dir");
	return 1;
}

/* s:alive() */
static int l_session_alive(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);

	lua_pushboolean(L, ud->s && sbx_session_alive(ud->s));
	return 1;
}

/* s:backend() */
static int l_session_backend(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	if (!ud->s)
		return 0;
	lua_pushstring(L, sbx_session_backend(ud->s));
	return 1;
}

/* s:cpu_usage_us() -> microseconds of CPU the session's cgroup used, or nil */
static int l_session_cpu_usage(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	int64_t v = ud->s ? sbx_session_cpu_usage_us(ud->s) : -1;
	if (v < 0)
		return 0;
	lua_pushnumber(L, (lua_Number)v);
	return 1;
}

/* s:oom_kills() -> OOM kills in the session since it opened, or nil */
static int l_session_oom_kills(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	int64_t v = ud->s ? sbx_session_oom_kills(ud->s) : -1;
	if (v < 0)
		return 0;
	lua_pushnumber(L, (lua_Number)v);
	return 1;
}

/* s:gpu_nodes() -> { "/dev/nvidia0", ... } (inside paths) */
static int l_session_gpu_nodes(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	lua_newtable(L);
	if (!ud->s)
		return 1;
	const char *const *n = sbx_session_gpu_nodes(ud->s);
	for (int i = 0; n && n[i]; i++) {
		lua_pushstring(L, n[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

/* core.protect_from_oom() -> true, or nil, kind, msg (sbxd only) */
static int l_protect_from_oom(lua_State *L)
{
	sbx_err err = {0};
	if (sbx_protect_from_oom(&err) < 0)
		return lsbx_push_err(L, &err);
	lua_pushboolean(L, 1);
	return 1;
}

static int l_session_tostring(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);

	lua_getfenv(L, 1);
	lua_getfield(L, -1, "work_dir");
	lua_pushfstring(L, "sbx.core.session(%s%s)",
			lua_isstring(L, -1) ? lua_tostring(L, -1) : "?", ud->s ? "" : ", closed");
	return 1;
}

/* core.realpath(path): the canonical host path, resolving every symlink.
 * The Lua side checks bind paths against the policy's forbidden list both
 * as written and as resolved, so a symlink cannot smuggle /etc in. */
static int l_realpath(lua_State *L)
{
	size_t len;
	const char *path;
	char buf[PATH_MAX];
	sbx_err err = {0};

	if (lua_type(L, 1) != LUA_TSTRING)
		luaL_argerror(L, 1, "string expected");
	path = lua_tolstring(L, 1, &len);
	if (strlen(path) != len)
		return lsbx_push_fail(L, SBX_E_INVALID_ARGUMENT, "path contains a NUL byte");
	if (!realpath(path, buf)) {
		sbx_err_set(&err, SBX_E_INVALID_ARGUMENT, errno, "%s: %s", path, strerror(errno));
		return lsbx_push_err(L, &err);
	}
	lua_pushstring(L, buf);
	return 1;
}

/* core.monotonic_ms(): plain Lua has no wall clock finer than a second,
 * and runtime_ms of failed runs (and the specs) need one. */
static int l_monotonic_ms(lua_State *L)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	lua_pushnumber(L, (lua_Number)ts.tv_sec * 1000.0 + (lua_Number)ts.tv_nsec / 1e6);
	return 1;
}

/* s:proxy_listener() -> fd (the caller's) | nil, err */
static int l_session_proxy_listener(lua_State *L)
{
	lsbx_session *ud = lsbx_check_session(L, 1);
	sbx_err err = {0};

	if (!ud->s)
		return lsbx_push_fail(L, SBX_E_SESSION_CLOSED, "the session is closed");
	int fd = sbx_session_proxy_listener(ud->s, &err);
	if (fd < 0)
		return lsbx_push_err(L, &err);
	lua_pushinteger(L, fd);
	return 1;
}

static const luaL_Reg session_methods[] = {
	{"run", lsbx_session_run},
	{"put", l_session_put},
	{"get", l_session_get},
	{"open_file", l_session_open_file},
	{"close", l_session_close},
	{"work_dir", l_session_work_dir},
	{"alive", l_session_alive},
	{"backend", l_session_backend},
	{"cpu_usage_us", l_session_cpu_usage},
	{"oom_kills", l_session_oom_kills},
	{"gpu_nodes", l_session_gpu_nodes},
	{"proxy_listener", l_session_proxy_listener},
	{"ready_fd", l_session_ready_fd},
	{"finish", l_session_finish},
	{"offer_fd", l_session_offer_fd},
	{"own_offer_fd", l_session_own_offer_fd},
	{NULL, NULL},
};

static const luaL_Reg core_functions[] = {
	{"session_open", l_session_open},
	{"session_start", l_session_start},
	{"realpath", l_realpath},
	{"protect_from_oom", l_protect_from_oom},
	{"monotonic_ms", l_monotonic_ms},
	{"seccomp_profile", lsbx_seccomp_profile},
	{"spares_keep", lsbx_spares_keep},
	{"spares_flush", lsbx_spares_flush},
	{"spares_stats", lsbx_spares_stats},
	{NULL, NULL},
};

static const struct {
	const char *name;
	int signo;
} signals[] = {
	{"TERM", SIGTERM}, {"KILL", SIGKILL}, {"INT", SIGINT},	   {"HUP", SIGHUP},
	{"QUIT", SIGQUIT}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2},   {"STOP", SIGSTOP},
	{"CONT", SIGCONT}, {"ABRT", SIGABRT}, {"ALRM", SIGALRM},   {"SEGV", SIGSEGV},
	{"PIPE", SIGPIPE}, {"TSTP", SIGTSTP}, {"WINCH", SIGWINCH},
};

/* Loaded as a module (the rock, a stock luajit), this object must outlive
 * lua_close: libsbx's threads (the template's parent, the reaper, the
 * spares' refill) never exit and run its code, and LuaJIT dlcloses C
 * modules at lua_close, which unmapped it under them (a SIGSEGV at exit
 * whenever one woke up after that).  RTLD_NODELETE on the loaded object
 * keeps it mapped until the process ends.  Linked into sbxlua or sbxd,
 * this names the program itself, which is never unloaded anyway. */
static void pin_module(void)
{
	Dl_info info;

	if (dladdr((void *)pin_module, &info) && info.dli_fname)
		(void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

int luaopen_sbx_core(lua_State *L)
{
	size_t i;

	pin_module();

	lsbx_register_class(L, LSBX_SESSION_MT, session_methods, l_session_gc, l_session_tostring);
	lsbx_run_register(L);

	luaL_newlib(L, core_functions);
	lsbx_proxy_register(L);
	lua_pushliteral(L, SBX_VERSION);
	lua_setfield(L, -2, "version");
	lua_pushinteger(L, SBX_SESSION_READY_TIMEOUT_MS);
	lua_setfield(L, -2, "SESSION_READY_TIMEOUT_MS");
	lua_pushinteger(L, SBX_OPEN_NETWORK_READY_TIMEOUT_MS);
	lua_setfield(L, -2, "OPEN_NETWORK_READY_TIMEOUT_MS");
	lua_newtable(L);
	for (i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
		lua_pushinteger(L, signals[i].signo);
		lua_setfield(L, -2, signals[i].name);
	}
	lua_setfield(L, -2, "signals");
	return 1;
}

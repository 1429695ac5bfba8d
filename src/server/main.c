/*
 * main.c: sbxd, the HTTP/2 remote API server.
 *
 *   sbxd --listen 127.0.0.1:7433 | unix:/path --token-file F
 *        [--policy policies/default.lua] [--tls-cert C --tls-key K]
 *        [--insecure] [--log-level error|warn|info|debug]
 *        [--max-sessions N] [--max-runs N] [--hard-ceiling-s S]
 *        [--max-body BYTES] [--drain-grace-ms MS] [--idle-timeout-s S]
 *        [--admin-tenant NAME] [--warm-runs N] [--warm-idle-ms MS] [--spare-sessions N]
 *        [--advertise-url URL]
 *        [--watch-policy] [--cgroup-ceilings on|off] [--ceilings SPEC]
 *        [--ceiling-reserve SPEC]
 *
 * Sets up the embedded LuaJIT (sbx.core and sbx.paths preloaded, like
 * sbxlua), the Lua orchestration layer (sbx.server), h2o's evloop, the
 * listener and the signals; runs the loop.  SIGTERM/SIGINT drain: stop
 * accepting, let runs finish until the grace period ends, then kill them,
 * close every session, exit 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "../lua/lsbx.h"
#include "paths.h"
#include "front.h"
#include "server.h"

int luaopen_sbx_core(lua_State *L);

sbx_srv *sbx_srv_g;

static void usage(FILE *f)
{
	fprintf(f, "usage: sbxd --listen HOST:PORT|unix:/path --token-file FILE [--policy FILE]\n"
		   "            [--tls-cert CERT --tls-key KEY] [--insecure] [--log-level LEVEL]\n"
		   "            [--max-sessions N] [--max-runs N] [--hard-ceiling-s S]\n"
		   "            [--max-body BYTES (8 MiB)] [--drain-grace-ms MS]\n"
		   "            [--idle-timeout-s S] [--admin-tenant NAME] [--warm-runs N]\n"
		   "            [--warm-idle-ms MS] [--spare-sessions N (1)]\n"
		   "            [--advertise-url URL] [--watch-policy]\n"
		   "            [--cgroup-ceilings on|off]\n"
		   "            [--ceilings KEY=N,...] [--ceiling-reserve KEY=N,...]\n");
	fputs(sbx_front_usage, f);
}

/* sbx.paths and lua/ on package.path as sbxlua has them; sbx.core preloaded. */
void sbx_srv_lua_setup(lua_State *L)
{
	sbx_host_paths_preload(L);
	lua_getglobal(L, "package");
	lua_getfield(L, -1, "preload");
	lua_pushcfunction(L, luaopen_sbx_core);
	lua_setfield(L, -2, "sbx.core");
	lua_pop(L, 2);
}

static int field_ref(lua_State *L, int idx, const char *name)
{
	lua_getfield(L, idx, name);
	if (!lua_isfunction(L, -1)) {
		lua_pop(L, 1);
		return LUA_NOREF;
	}
	return luaL_ref(L, LUA_REGISTRYINDEX);
}

static int lua_start(sbx_srv *S)
{
	lua_State *L = luaL_newstate();

	if (!L)
		return -1;
	S->L = L;
	luaL_openlibs(L);
	sbx_srv_lua_setup(L);
	lua_getglobal(L, "require");
	lua_pushliteral(L, "sbx.server");
	/* A module that does not load is a bug or a broken install: with its
	 * traceback. */
	if (lsbx_pcall(L, 1, 1, LSBX_PCALL_TEXT) != 0) {
		fprintf(stderr, "sbxd: loading sbx.server: %s\n", lua_tostring(L, -1));
		return -1;
	}
	lua_getfield(L, -1, "init");
	lua_createtable(L, 0, 8);
	lua_pushstring(L, S->policy);
	lua_setfield(L, -2, "policy");
	lua_pushnumber(L, S->max_sessions);
	lua_setfield(L, -2, "max_sessions");
	lua_pushnumber(L, S->max_runs);
	lua_setfield(L, -2, "max_runs");
	lua_pushnumber(L, S->warm_runs);
	lua_setfield(L, -2, "warm_runs");
	lua_pushnumber(L, S->spare_sessions);
	lua_setfield(L, -2, "spare_sessions");
	if (S->warm_idle_ms) {
		lua_pushnumber(L, S->warm_idle_ms / 1000.0);
		lua_setfield(L, -2, "warm_idle_s");
	}
	lua_pushnumber(L, (lua_Number)S->hard_ceiling_s);
	lua_setfield(L, -2, "hard_ceiling_s");
	lua_pushnumber(L, (lua_Number)S->idle_timeout_s);
	lua_setfield(L, -2, "idle_timeout_s");
	lua_pushstring(L, S->listen);
	lua_setfield(L, -2, "listen");
	/* issue 19: NULL leaves the field nil (lua_pushstring pushes nil). */
	lua_pushstring(L, S->advertise_url);
	lua_setfield(L, -2, "advertise_url");
	lua_pushstring(L, S->cgroup_ceilings);
	lua_setfield(L, -2, "cgroup_ceilings");
	lua_pushstring(L, S->ceilings);
	lua_setfield(L, -2, "ceilings");
	lua_pushstring(L, S->ceiling_reserve);
	lua_setfield(L, -2, "ceiling_reserve");
	lua_pushnumber(L, (lua_Number)S->max_body);
	lua_setfield(L, -2, "max_body");
	lua_pushcfunction(L, sbx_srv_l_file_append);
	lua_setfield(L, -2, "file_append");
	sbx_srv_file_io_push(L);
	lua_setfield(L, -2, "file_io");
	lua_pushcfunction(L, sbx_srv_l_log);
	lua_setfield(L, -2, "log");
	/* The policy worker (hooks.c), started once signals are blocked. */
	lua_createtable(L, 0, 2);
	lua_pushcfunction(L, sbx_srv_l_hooks_post);
	lua_setfield(L, -2, "post");
	lua_pushcfunction(L, sbx_srv_l_hooks_wait);
	lua_setfield(L, -2, "wait");
	lua_setfield(L, -2, "hooks");
	if (S->admin_tenant) {
		lua_pushstring(L, S->admin_tenant);
		lua_setfield(L, -2, "admin_tenant");
	}
	/* init's errors are the operator's to read (a policy that does not
	 * load): the message only. */
	if (lsbx_pcall(L, 1, 0, 0) != 0) {
		fprintf(stderr, "sbxd: %s\n", lsbx_pcall_message(L, -1));
		return -1;
	}
	S->handle_ref = field_ref(L, -1, "handle");
	S->tick_ref = field_ref(L, -1, "tick");
	S->stats_ref = field_ref(L, -1, "stats");
	S->shutdown_ref = field_ref(L, -1, "shutdown");
	S->reload_ref = field_ref(L, -1, "reload_policy");
	S->proxy_fd_ref = field_ref(L, -1, "proxy_fd");
	S->proxy_ref = field_ref(L, -1, "proxy");
	S->hook_answer_ref = field_ref(L, -1, "hook_answer");
	lua_pop(L, 1);
	if (S->handle_ref == LUA_NOREF || S->tick_ref == LUA_NOREF || S->stats_ref == LUA_NOREF ||
	    S->shutdown_ref == LUA_NOREF || S->reload_ref == LUA_NOREF ||
	    S->proxy_fd_ref == LUA_NOREF || S->proxy_ref == LUA_NOREF) {
		fprintf(stderr, "sbxd: sbx.server lacks handle/tick/stats/shutdown/reload_policy/"
				"proxy_fd/proxy\n");
		return -1;
	}
	return 0;
}

static void call_lua(sbx_srv *S, int ref, const char *what)
{
	lua_State *L = S->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
	sbx_srv_pcall(L, 0, 0, what);
}

/* Once a second: the Lua reaper; while draining, the end of the drain. */
static void on_second(h2o_timeout_entry_t *e)
{
	sbx_srv *S = sbx_srv_g;
	(void)e;
	call_lua(S, S->tick_ref, "tick");
	sbx_srv_stream_gc(S);
	if (S->draining) {
		if (S->active_runs > 0 && sbx_srv_now_ms() >= S->drain_deadline_ms) {
			sbx_srv_log(SRV_LOG_WARN,
				    "event=drain msg=\"grace period over, killing runs\" runs=%zu",
				    S->active_runs);
			sbx_srv_stream_kill_all(S);
		}
		if (S->active_runs == 0 || sbx_srv_now_ms() >= S->drain_deadline_ms + 2000) {
			call_lua(S, S->shutdown_ref, "shutdown");
			S->done = true;
			return;
		}
	}
	h2o_timeout_link(S->ctx.loop, &S->second_timeout, &S->second_entry);
}

/* The proxy has work: connections to accept, bytes to move, names
 * resolved.  px:wake (src/lua/proxy.c) steps it in C while it stays ready,
 * at most 64 times so that HTTP/2 streams get their turn, and enters Lua
 * once, only when a connection waits for a verdict or a line is to be
 * logged.  It is a C function: called protected, it runs no Lua code on
 * the common path (bytes, parsing). */
static void on_proxy(h2o_socket_t *sock, const char *err)
{
	sbx_srv *S = sbx_srv_g;
	lua_State *L = S->L;
	(void)sock;
	(void)err;

	lua_pushcfunction(L, lsbx_proxy_wake);
	lua_rawgeti(L, LUA_REGISTRYINDEX, S->proxy_ref);
	lua_pushinteger(L, 64);
	if (sbx_srv_pcall(L, 2, 3, "proxy_wake") != 0)
		return;
	if (!lua_toboolean(L, -3))
		sbx_srv_log(SRV_LOG_ERROR, "event=proxy err=\"%s\"",
			    lua_isstring(L, -1) ? lua_tostring(L, -1) : "?");
	lua_pop(L, 3);
}

/* Put the proxy's epoll fd on our loop. */
static int proxy_watch(sbx_srv *S)
{
	lua_State *L = S->L;
	lua_rawgeti(L, LUA_REGISTRYINDEX, S->proxy_fd_ref);
	int st = lsbx_pcall(L, 0, 1, LSBX_PCALL_TEXT);
	if (st != 0 || !lua_isnumber(L, -1)) {
		fprintf(stderr, "sbxd: proxy_fd(): %s\n", st != 0 ? lua_tostring(L, -1) : "no fd");
		lua_pop(L, 1);
		return -1;
	}
	int fd = (int)lua_tointeger(L, -1);
	lua_pop(L, 1);
	/* The proxy userdata itself, for on_proxy (the ref to M.proxy, a
	 * function, is replaced by one to what it returns). */
	lua_rawgeti(L, LUA_REGISTRYINDEX, S->proxy_ref);
	luaL_unref(L, LUA_REGISTRYINDEX, S->proxy_ref);
	st = lsbx_pcall(L, 0, 1, LSBX_PCALL_TEXT);
	if (st != 0 || !lua_isuserdata(L, -1)) {
		fprintf(stderr, "sbxd: proxy(): %s\n", st != 0 ? lua_tostring(L, -1) : "no proxy");
		lua_pop(L, 1);
		return -1;
	}
	S->proxy_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	/* h2o closes the socket's fd when it disposes of it: give it a copy,
	 * the proxy keeps its own. */
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dup < 0)
		return -1;
	S->proxysock = h2o_evloop_socket_create(S->ctx.loop, dup, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(S->proxysock, on_proxy);
	return 0;
}

static void on_signal(h2o_socket_t *sock, const char *err)
{
	sbx_srv *S = sbx_srv_g;
	struct signalfd_siginfo si;
	int fd = h2o_socket_get_fd(sock);
	(void)err;

	while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			/* Reload the policy; a bad file keeps the old one (the
			 * Lua side logs which and why). */
			call_lua(S, S->reload_ref, "reload_policy");
			continue;
		}
		if (S->draining)
			continue;
		sbx_srv_log(SRV_LOG_INFO, "event=drain signal=%u runs=%zu grace_ms=%u",
			    si.ssi_signo, S->active_runs, S->drain_grace_ms);
		S->draining = true;
		S->drain_deadline_ms = sbx_srv_now_ms() + S->drain_grace_ms;
		sbx_srv_listen_stop(S);
		h2o_context_request_shutdown(&S->ctx);
	}
}

/* Writes to a stdin pipe whose reader died must fail with EPIPE, not kill
 * us; a handler (unlike SIG_IGN) is reset by exec, so sandboxed programs
 * still get the default SIGPIPE. */
static void on_sigpipe(int sig)
{
	(void)sig;
}

static long num_arg(const char *name, const char *v, long min, long max, bool *bad)
{
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || *end || !*v || n < min || n > max) {
		fprintf(stderr, "sbxd: %s %s: expected an integer in [%ld, %ld]\n", name, v, min,
			max);
		*bad = true;
	}
	return n;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"listen", required_argument, 0, 'l'},
		{"token-file", required_argument, 0, 't'},
		{"policy", required_argument, 0, 'p'},
		{"tls-cert", required_argument, 0, 'c'},
		{"tls-key", required_argument, 0, 'k'},
		{"insecure", no_argument, 0, 'i'},
		{"no-front", no_argument, 0, 'N'}, /* hidden: benchmarks only */
		{"log-level", required_argument, 0, 'L'},
		{"max-sessions", required_argument, 0, 'S'},
		{"max-runs", required_argument, 0, 'R'},
		{"hard-ceiling-s", required_argument, 0, 'H'},
		{"max-body", required_argument, 0, 'B'},
		{"drain-grace-ms", required_argument, 0, 'G'},
		{"idle-timeout-s", required_argument, 0, 'I'},
		{"admin-tenant", required_argument, 0, 'A'},
		{"warm-runs", required_argument, 0, 'W'},
		{"warm-idle-ms", required_argument, 0, 'w'},
		{"spare-sessions", required_argument, 0, 'X'},
		{"advertise-url", required_argument, 0, 'U'},
		{"watch-policy", no_argument, 0, 'P'},
		{"cgroup-ceilings", required_argument, 0, 'Q'},
		{"ceilings", required_argument, 0, 'C'},
		{"ceiling-reserve", required_argument, 0, 'V'},
		/* the front's budgets (front.c) */
		{"max-header-list", required_argument, 0, 'F'},
		{"max-header-fields", required_argument, 0, 'F'},
		{"max-continuations", required_argument, 0, 'F'},
		{"rate-rst", required_argument, 0, 'F'},
		{"rate-empty", required_argument, 0, 'F'},
		{"rate-continuation", required_argument, 0, 'F'},
		{"rate-ping", required_argument, 0, 'F'},
		{"rate-settings", required_argument, 0, 'F'},
		{"rate-priority", required_argument, 0, 'F'},
		{"rate-window-update", required_argument, 0, 'F'},
		{"rate-streams", required_argument, 0, 'F'},
		{"body-budget-conn", required_argument, 0, 'F'},
		{"body-budget-total", required_argument, 0, 'F'},
		{"max-conns", required_argument, 0, 'F'},
		{"max-conns-per-addr", required_argument, 0, 'F'},
		{"header-timeout-s", required_argument, 0, 'F'},
		{"conn-idle-timeout-s", required_argument, 0, 'F'},
		{"rate-rst-shared", required_argument, 0, 'F'},
		{"abuse-cooldown-s", required_argument, 0, 'F'},
		{"help", no_argument, 0, 'h'},
		{0, 0, 0, 0},
	};
	static sbx_srv S;
	sbx_err err = {0};
	bool bad = false;
	int c, idx = 0;

	sbx_srv_g = &S;
	/* An upload chunk passes through buffers of its size (h2o's body, the
	 * write job's copy): freed and allocated again per chunk, glibc would
	 * map each afresh or trim the heap between chunks, and every page of
	 * every chunk would fault in again (a third of sbxd's CPU per
	 * upload).  Kept in the heap instead, up to 64 MiB of it free. */
	mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
	mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
	sbx_front_defaults(&sbx_front_o);
	S.log_level = SRV_LOG_INFO;
	S.max_sessions = 16;
	S.max_runs = 64;
	S.warm_runs = 1;
	/* One spare: a steady stream of opens of one shape finds one ready
	 * (a refill takes one open's time, in the background), and it costs
	 * one idle zygote; bursts past it open cold.  0 turns it off. */
	S.spare_sessions = 1;
	S.hard_ceiling_s = 24 * 3600;
	S.max_body = 8 * 1024 * 1024; /* a chunk of an upload; h2o holds it whole */
	S.drain_grace_ms = 10000;
	S.idle_timeout_s = 3600;
	S.handle_ref = S.tick_ref = S.stats_ref = S.shutdown_ref = S.reload_ref = LUA_NOREF;
	while ((c = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
		switch (c) {
		case 'F':
			sbx_front_flag(longopts[idx].name, optarg, &bad);
			break;
		case 'l':
			S.listen = optarg;
			break;
		case 't':
			S.token_file = optarg;
			break;
		case 'p':
			S.policy = optarg;
			break;
		case 'A':
			S.admin_tenant = optarg;
			break;
		case 'U':
			S.advertise_url = optarg;
			break;
		case 'P':
			S.watch_policy = true;
			break;
		case 'Q':
			S.cgroup_ceilings = optarg;
			break;
		case 'C':
			S.ceilings = optarg;
			break;
		case 'V':
			S.ceiling_reserve = optarg;
			break;
		case 'c':
			S.tls_cert = optarg;
			break;
		case 'k':
			S.tls_key = optarg;
			break;
		case 'i':
			S.insecure = true;
			break;
		case 'N':
			S.no_front = true;
			break;
		case 'L':
			if (!strcmp(optarg, "error"))
				S.log_level = SRV_LOG_ERROR;
			else if (!strcmp(optarg, "warn"))
				S.log_level = SRV_LOG_WARN;
			else if (!strcmp(optarg, "info"))
				S.log_level = SRV_LOG_INFO;
			else if (!strcmp(optarg, "debug"))
				S.log_level = SRV_LOG_DEBUG;
			else {
				fprintf(stderr,
					"sbxd: --log-level %s: expected error, warn, info or debug\n",
					optarg);
				bad = true;
			}
			break;
		case 'S':
			S.max_sessions =
				(uint32_t)num_arg("--max-sessions", optarg, 1, 100000, &bad);
			break;
		case 'R':
			S.max_runs = (uint32_t)num_arg("--max-runs", optarg, 1, 100000, &bad);
			break;
		case 'W':
			S.warm_runs = (uint32_t)num_arg("--warm-runs", optarg, 1, 64, &bad);
			break;
		case 'X':
			S.spare_sessions = (uint32_t)num_arg("--spare-sessions", optarg, 0,
							     SBX_SPARES_MAX, &bad);
			break;
		case 'w':
			S.warm_idle_ms =
				(uint32_t)num_arg("--warm-idle-ms", optarg, 1, 4294967000L, &bad);
			break;
		case 'H':
			S.hard_ceiling_s =
				(uint64_t)num_arg("--hard-ceiling-s", optarg, 1, 24 * 3600, &bad);
			break;
		case 'B':
			S.max_body = (size_t)num_arg("--max-body", optarg, 1024, 1L << 32, &bad);
			break;
		case 'I':
			S.idle_timeout_s =
				(uint64_t)num_arg("--idle-timeout-s", optarg, 0, 24 * 3600, &bad);
			break;
		case 'G':
			S.drain_grace_ms =
				(uint32_t)num_arg("--drain-grace-ms", optarg, 0, 3600000, &bad);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (bad || optind != argc || !S.listen || !S.token_file) {
		if (!bad)
			fprintf(stderr, "sbxd: --listen and --token-file are required\n");
		usage(stderr);
		return 2;
	}
	if (sbx_srv_auth_load(&S, S.token_file, &err) != 0) {
		fprintf(stderr, "sbxd: %s\n", err.msg);
		return 2;
	}
	signal(SIGPIPE, on_sigpipe);
	if (lua_start(&S) != 0)
		return 1;

	h2o_config_init(&S.config);
	S.config.max_request_entity_size = S.max_body;
	/* The front closes idle connections (and counts it); h2o's own idle
	 * timeout still bounds a stream the client leaves hanging (a body
	 * that never ends).  2 s later than the front's: both start when the
	 * last stream ends, and an idle connection is the front's to close. */
	S.config.http2.idle_timeout = ((uint64_t)sbx_front_o.idle_timeout_s + 2) * 1000;
	h2o_hostconf_t *host =
		h2o_config_register_host(&S.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
	h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
	sbx_srv_handler_register(&S, path);
	h2o_context_init(&S.ctx, h2o_evloop_create(), &S.config);
	S.accept_ctx.ctx = &S.ctx;
	S.accept_ctx.hosts = S.config.hosts;
	h2o_timeout_init(S.ctx.loop, &S.zero_timeout, 0);
	h2o_timeout_init(S.ctx.loop, &S.tick_timeout, 100);
	h2o_timeout_init(S.ctx.loop, &S.second_timeout, 1000);
	S.second_entry.cb = on_second;
	h2o_timeout_link(S.ctx.loop, &S.second_timeout, &S.second_entry);

	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0) {
		fprintf(stderr, "sbxd: signalfd: %s\n", strerror(errno));
		return 1;
	}
	S.sigsock = h2o_evloop_socket_create(S.ctx.loop, sfd, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(S.sigsock, on_signal);
	/* After the mask: the worker thread inherits it, so our signals keep
	 * coming to the signalfd. */
	S.hooks = sbx_srv_hooks_start(&err);
	if (!S.hooks || sbx_srv_task_init(&S) != 0) {
		fprintf(stderr, "sbxd: %s\n", S.hooks ? "watch the policy worker" : err.msg);
		return 1;
	}
	if (proxy_watch(&S) != 0)
		return 1;
	if (S.watch_policy && sbx_srv_policy_watch_start(&S, &err) != 0) {
		fprintf(stderr, "sbxd: %s\n", err.msg);
		return 2;
	}

	if (sbx_srv_listen_start(&S, &err) != 0) {
		fprintf(stderr, "sbxd: %s\n", err.msg);
		return 2;
	}
	sbx_srv_log(SRV_LOG_INFO, "event=start listen=%s tls=%s policy=%s tenants=%zu", S.listen,
		    S.tls_cert ? "yes" : "no", S.policy ? S.policy : "default", S.n_tokens);
	while (!S.done)
		h2o_evloop_run(S.ctx.loop, INT32_MAX);
	sbx_srv_log(SRV_LOG_INFO, "event=exit");
	sbx_srv_stream_free_all(&S);
	sbx_srv_task_fini(&S);
	sbx_srv_hooks_free(S.hooks);
	sbx_srv_listen_stop(&S);
	sbx_srv_auth_free(&S);
	return 0;
}

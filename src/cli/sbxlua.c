/*
 * sbxlua.c: the sbx LuaJIT host.  Runs a script (`sbxlua file.lua args...`),
 * -e chunks, and the interactive REPL (lua/sbx/repl.lua), with sbx.core,
 * sbx.paths, sbx.readline and sbx.clock preloaded and the source tree's (or
 * the install prefix's) lua/ directory first on package.path.  The command
 * line follows lua.c, so tools written for `lua` (busted) run unchanged:
 * `sbxlua /usr/bin/busted tests/spec`.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <luajit.h>
#include <lualib.h>

#include "../lua/lsbx.h"
#include "cli.h"
#include "paths.h"
#include "sbx.h"

#ifndef SBX_SOURCE_DIR
#error "SBX_SOURCE_DIR must be defined by the build"
#endif

enum { EXIT_USAGE = 2 };

static const char *progname = "sbxlua";
/* The state SIGINT interrupts; a signal handler cannot be given it otherwise. */
static lua_State *global_L;

/* What the command line asked for; -e and -l are replayed from argv in order. */
struct cli {
	int script;	  /* index of the script in argv (its name or "-"), 0: none */
	bool interactive; /* -i */
	bool has_chunks;  /* at least one -e or -l */
	bool version, help;
	const char *session_opts;
	const char *check_policy; /* --check-policy FILE */
	const char *remote;	  /* --remote URL: the REPL's session is on this sbxd */
	const char *token_file;	  /* --token-file F: its bearer token */
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: %s [options] [script [args...]]\n"
		"\n"
		"Runs a Lua script with the sbx module available, or an interactive REPL.\n"
		"With no script and no -e, the REPL starts when stdin is a terminal;\n"
		"otherwise stdin is run as a script.\n"
		"\n"
		"options:\n"
		"  -e CODE              run CODE (repeatable; run in order, before the script)\n"
		"  -l NAME              require NAME into the global NAME (in order with -e)\n"
		"  -i                   enter the REPL after the -e chunks and the script\n"
		"  -                    read the script from stdin (later arguments are its args)\n"
		"  --                   stop handling options; the next argument is the script\n"
		"  --session-opts EXPR  a Lua table expression, e.g. '{backend=\"userns\"}': the\n"
		"                       options of the session the REPL opens at its first !cmd\n"
		"  --remote URL         the REPL's session is a remote one on the sbxd at URL\n"
		"                       (http://HOST:PORT, https://HOST:PORT or unix:/path)\n"
		"  --token-file F       the bearer token for --remote (first word of F's line 1)\n"
		"  --check-policy FILE  load the policy FILE, print the effective policy and\n"
		"                       exit 0, or print the error (with its line) and exit 1\n"
		"  -v, --version        print the version and exit\n"
		"  -h, --help           print this help and exit\n"
		"\n"
		"A script gets its arguments as `...` and in the global table `arg`: arg[0] is\n"
		"the script, arg[1..n] its arguments, negative indices the interpreter's own.\n"
		"Errors print the error and a traceback to stderr and exit with status 1.\n"
		"os.exit(n) closes the Lua state (so sessions left open are closed) and\n"
		"exits with n; os.exit(n, false) exits at once.\n"
		"\n"
		"REPL: type an expression or a statement; `=expr` prints expr; an unfinished\n"
		"chunk continues on the next line; `!cmd` runs cmd in the local session\n"
		"(opened on first use, closed on exit); Ctrl-C interrupts; Ctrl-D exits.\n"
		"\n"
		"environment:\n"
		"  SBX_ROOT             a directory with lua/ and policies/ to use instead of\n"
		"                       the source tree (%s) or the install prefix\n"
		"  LUA_PATH, LUA_CPATH  searched after sbx's own lua/ directory\n",
		progname, SBX_SOURCE_DIR);
}

static int usage_error(const char *fmt, const char *what)
{
	fprintf(stderr, "%s: ", progname);
	fprintf(stderr, fmt, what);
	fprintf(stderr, "\n(try '%s --help')\n", progname);
	return -1;
}

/* Fill cli from argv; -1 on a usage error (already printed). */
static int parse_args(int argc, char **argv, struct cli *cli)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (a[0] != '-' || strcmp(a, "-") == 0) {
			cli->script = i;
			return 0;
		}
		if (strcmp(a, "--") == 0) {
			if (i + 1 < argc)
				cli->script = i + 1;
			return 0;
		}
		if (strcmp(a, "-e") == 0 || strcmp(a, "-l") == 0) {
			if (++i >= argc)
				return usage_error("'%s' needs an argument", a);
			cli->has_chunks = true;
		} else if (strncmp(a, "-e", 2) == 0 || strncmp(a, "-l", 2) == 0) {
			cli->has_chunks = true; /* -eCODE, -lNAME as lua.c allows */
		} else if (strcmp(a, "-i") == 0) {
			cli->interactive = true;
		} else if (strcmp(a, "-v") == 0 || strcmp(a, "--version") == 0) {
			cli->version = true;
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			cli->help = true;
		} else if (strcmp(a, "--session-opts") == 0) {
			if (++i >= argc)
				return usage_error("'%s' needs an argument", a);
			cli->session_opts = argv[i];
		} else if (strncmp(a, "--session-opts=", 15) == 0) {
			cli->session_opts = a + 15;
		} else if (strcmp(a, "--remote") == 0 || strcmp(a, "--token-file") == 0) {
			if (++i >= argc)
				return usage_error("'%s' needs an argument", a);
			if (a[2] == 'r')
				cli->remote = argv[i];
			else
				cli->token_file = argv[i];
		} else if (strncmp(a, "--remote=", 9) == 0) {
			cli->remote = a + 9;
		} else if (strncmp(a, "--token-file=", 13) == 0) {
			cli->token_file = a + 13;
		} else if (strcmp(a, "--check-policy") == 0) {
			if (++i >= argc)
				return usage_error("'%s' needs an argument", a);
			cli->check_policy = argv[i];
		} else if (strncmp(a, "--check-policy=", 15) == 0) {
			cli->check_policy = a + 15;
		} else {
			return usage_error("unknown option '%s'", a);
		}
	}
	if (cli->remote && !cli->token_file)
		return usage_error("'%s' needs --token-file", "--remote");
	if (cli->token_file && !cli->remote)
		return usage_error("'%s' needs --remote", "--token-file");
	return 0;
}

static void on_interrupt_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	lua_sethook(L, NULL, 0, 0);
	luaL_error(L, "interrupted!");
}

/* As lua.c: the next Lua instruction raises; a second Ctrl-C kills. */
static void on_sigint(int signo)
{
	signal(signo, SIG_DFL);
	lua_sethook(global_L, on_interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

int sbx_cli_pcall(lua_State *L, int narg, int nres, bool traceback)
{
	struct sigaction sa, old;
	int status;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sigint; /* no SA_RESTART: a blocking poll() returns */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old);
	/* With traceback: the error as text (an sbx error table prints as
	 * "Kind: message") followed by where it was raised. */
	status = lsbx_pcall(L, narg, nres, traceback ? LSBX_PCALL_TEXT : 0);
	sigaction(SIGINT, &old, NULL);
	/* A Ctrl-C that came while C code ran must not fire later, elsewhere. */
	if (lua_gethook(L) == on_interrupt_hook)
		lua_sethook(L, NULL, 0, 0);
	return status;
}

/* Print the error string on top of the stack (if status says so) and pop it. */
static int report(lua_State *L, int status)
{
	if (status != 0) {
		const char *msg = lua_tostring(L, -1);

		fprintf(stderr, "%s: %s\n", progname, msg ? msg : "(error object is not a string)");
		fflush(stderr);
		lua_pop(L, 1);
	}
	return status;
}

/*
 * os.exit([code [, close]]): LuaJIT's, except that close defaults to true.
 * Closing the state first runs the __gc of whatever a script left open, so
 * its sessions end and their work dirs go away (busted ends with os.exit);
 * os.exit(code, false) exits at once.
 */
static int l_os_exit(lua_State *L)
{
	int status;

	if (lua_isboolean(L, 1))
		status = lua_toboolean(L, 1) ? EXIT_SUCCESS : EXIT_FAILURE;
	else
		status = (int)luaL_optinteger(L, 1, EXIT_SUCCESS);
	if (lua_isnoneornil(L, 2) || lua_toboolean(L, 2))
		lua_close(L);
	exit(status);
	return 0;
}

static void preload(lua_State *L, const char *name, lua_CFunction open)
{
	lua_getglobal(L, "package");
	lua_getfield(L, -1, "preload");
	lua_pushcfunction(L, open);
	lua_setfield(L, -2, name);
	lua_pop(L, 2);
}

/*
 * The global `arg`, as lua.c builds it: arg[0] is the script (or the
 * program when there is none), arg[1..] what follows it, negative indices
 * the interpreter and its options.
 */
static void create_arg_table(lua_State *L, int argc, char **argv, int script)
{
	int i;

	lua_createtable(L, argc - script, script + 1);
	for (i = 0; i < argc; i++) {
		lua_pushstring(L, argv[i]);
		lua_rawseti(L, -2, i - script);
	}
	lua_setglobal(L, "arg");
}

/* Call the chunk lua_load* left (status 0) or report why it did not load. */
static int run_chunk(lua_State *L, int status)
{
	if (status == 0)
		status = sbx_cli_pcall(L, 0, 0, true);
	return report(L, status);
}

/* -l NAME: require NAME and store it in the global NAME. */
static int run_require(lua_State *L, const char *name)
{
	lua_getglobal(L, "require");
	lua_pushstring(L, name);
	if (report(L, sbx_cli_pcall(L, 1, 1, true)))
		return 1;
	lua_setglobal(L, name);
	return 0;
}

/* The sbx module as the global sbx, as the REPL has it (issue 17), for -e
 * chunks and a script read from stdin: one-liners need no require.  A
 * script file still requires what it uses. */
static int sbx_global(lua_State *L)
{
	lua_getglobal(L, "sbx");
	bool have = !lua_isnil(L, -1);
	lua_pop(L, 1);
	return have ? 0 : run_require(L, "sbx");
}

/* Run every -e and -l in command-line order; stop at the first failure. */
static int run_chunks(lua_State *L, int argc, char **argv, int script)
{
	int end = script ? script : argc;
	int i;

	for (i = 1; i < end; i++) {
		const char *a = argv[i];
		const char *val;

		if (strcmp(a, "--session-opts") == 0 || strcmp(a, "--check-policy") == 0 ||
		    strcmp(a, "--remote") == 0 || strcmp(a, "--token-file") == 0) {
			i++;
			continue;
		}
		if (strncmp(a, "-e", 2) != 0 && strncmp(a, "-l", 2) != 0)
			continue;
		val = a[2] ? a + 2 : argv[++i];
		if (a[1] == 'e') {
			if (sbx_global(L) ||
			    run_chunk(L, luaL_loadbuffer(L, val, strlen(val), "=(command line)")))
				return 1;
		} else if (run_require(L, val)) {
			return 1;
		}
	}
	return 0;
}

/* Load the script (NULL: stdin; a leading #! line is skipped) and call it with its args. */
static int run_script(lua_State *L, int argc, char **argv, int script)
{
	const char *fname = strcmp(argv[script], "-") == 0 ? NULL : argv[script];
	int status;
	int i;

	if (!fname && sbx_global(L))
		return 1;
	status = luaL_loadfile(L, fname);
	if (status != 0)
		return report(L, status);
	luaL_checkstack(L, argc - script + 1, "too many script arguments");
	for (i = script + 1; i < argc; i++)
		lua_pushstring(L, argv[i]);
	return report(L, sbx_cli_pcall(L, argc - script - 1, 0, true));
}

/* The REPL lives in lua/sbx/repl.lua; it protects each line itself. */
static int run_repl(lua_State *L, const char *session_opts, const struct cli *cli)
{
	int status;

	lua_getglobal(L, "require");
	lua_pushliteral(L, "sbx.repl");
	if (report(L, sbx_cli_pcall(L, 1, 1, true)))
		return 1;
	lua_getfield(L, -1, "run");
	lua_remove(L, -2);
	lua_createtable(L, 0, 4);
	if (session_opts) {
		lua_pushstring(L, session_opts);
		lua_setfield(L, -2, "session_opts");
	}
	if (cli->remote) {
		lua_pushstring(L, cli->remote);
		lua_setfield(L, -2, "remote");
		lua_pushstring(L, cli->token_file);
		lua_setfield(L, -2, "token_file");
	}
	lua_pushstring(L, progname);
	lua_setfield(L, -2, "progname");
	/* Not through sbx_cli_pcall: Ctrl-C at the prompt is the REPL's to handle. */
	status = lsbx_pcall(L, 1, 0, LSBX_PCALL_TEXT);
	return report(L, status);
}

/*
 * --check-policy FILE: sbx.policy.check_cli(FILE) prints the effective
 * policy (stdout) or the error with its line (stderr).  Returns the exit
 * status: 0 when the policy loads, 1 otherwise.
 */
static int check_policy(lua_State *L, const char *file)
{
	int rc;

	lua_getglobal(L, "require");
	lua_pushliteral(L, "sbx.policy");
	if (report(L, sbx_cli_pcall(L, 1, 1, true)))
		return 1;
	lua_getfield(L, -1, "check_cli");
	lua_remove(L, -2);
	lua_pushstring(L, file);
	if (report(L, sbx_cli_pcall(L, 1, 1, true)))
		return 1;
	rc = lua_isnumber(L, -1) ? (int)lua_tointeger(L, -1) : 1;
	lua_pop(L, 1);
	return rc == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct cli cli = {0};
	lua_State *L;
	int status = 0;

	if (argv[0] && argv[0][0])
		progname = argv[0];
	if (parse_args(argc, argv, &cli) < 0)
		return EXIT_USAGE;
	if (cli.help) {
		usage(stdout);
		return 0;
	}
	if (cli.version) {
		printf("sbxlua %s (%s)\n", SBX_VERSION, LUAJIT_VERSION);
		return 0;
	}

	L = luaL_newstate();
	if (!L) {
		fprintf(stderr, "%s: cannot create the Lua state: out of memory\n", progname);
		return 1;
	}
	global_L = L;
	lua_gc(L, LUA_GCSTOP, 0); /* as lua.c: no collection while the libraries load */
	luaL_openlibs(L);
	lua_gc(L, LUA_GCRESTART, 0);
	lua_getglobal(L, "os");
	lua_pushcfunction(L, l_os_exit);
	lua_setfield(L, -2, "exit");
	lua_pop(L, 1);
	sbx_host_paths_preload(L);
	preload(L, "sbx.core", luaopen_sbx_core);
	preload(L, "sbx.readline", sbx_cli_open_readline);
	preload(L, "sbx.clock", sbx_cli_open_clock);
	preload(L, "sbx.tty", sbx_cli_open_tty);
	create_arg_table(L, argc, argv, cli.script);
	if (cli.check_policy) {
		status = check_policy(L, cli.check_policy);
		lua_close(L);
		return status ? EXIT_FAILURE : EXIT_SUCCESS;
	}

	status = run_chunks(L, argc, argv, cli.script);
	if (status == 0 && cli.script)
		status = run_script(L, argc, argv, cli.script);
	if (status == 0) {
		if (cli.interactive) {
			status = run_repl(L, cli.session_opts, &cli);
		} else if (!cli.script && !cli.has_chunks) {
			if (isatty(STDIN_FILENO))
				status = run_repl(L, cli.session_opts, &cli);
			else if ((status = sbx_global(L)) == 0)
				status = run_chunk(L, luaL_loadfile(L, NULL));
		}
	}
	/* Closing runs the __gc of what the script left open (sessions, runs). */
	lua_close(L);
	return status ? EXIT_FAILURE : EXIT_SUCCESS;
}

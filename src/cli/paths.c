/*
 * paths.c: where a host binary (sbxlua, sbxd) finds lua/ and policies/.
 *
 * In order: $SBX_ROOT; the install prefix when the running binary is the
 * installed one (it lives in <prefix>/bin); the source tree it was built
 * from, while that still exists (so edits to lua/ need no rebuild); the
 * install prefix.  The choice is preloaded as the module sbx.paths
 * ({root, lua_dir, policy_dir, from_source}) and lua_dir goes first on
 * package.path, ahead of the system paths.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "paths.h"

#if !defined(SBX_SOURCE_DIR) || !defined(SBX_INSTALL_DATADIR) || !defined(SBX_INSTALL_LUADIR) || \
	!defined(SBX_INSTALL_BINDIR)
#error "the build must define SBX_SOURCE_DIR and SBX_INSTALL_{DATA,LUA,BIN}DIR"
#endif

static bool is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Is the running executable in the install prefix's bin dir? */
static bool running_installed(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	size_t len = strlen(SBX_INSTALL_BINDIR);

	if (n <= 0)
		return false;
	exe[n] = '\0';
	return strncmp(exe, SBX_INSTALL_BINDIR, len) == 0 && exe[len] == '/' &&
	       !strchr(exe + len + 1, '/');
}

/* sbx.paths: a fresh table each require, from the closure's upvalues. */
static int open_paths(lua_State *L)
{
	static const char *const names[] = {"root", "lua_dir", "policy_dir", "from_source"};

	lua_createtable(L, 0, 4);
	for (int i = 0; i < 4; i++) {
		lua_pushvalue(L, lua_upvalueindex(i + 1));
		lua_setfield(L, -2, names[i]);
	}
	return 1;
}

void sbx_host_paths_preload(lua_State *L)
{
	const char *env = getenv("SBX_ROOT");
	int top = lua_gettop(L);

	lua_getglobal(L, "package");
	lua_getfield(L, -1, "preload");
	int preload = lua_gettop(L);
	if (env && *env) {
		lua_pushstring(L, env);
		lua_pushfstring(L, "%s/lua", env);
		lua_pushfstring(L, "%s/policies", env);
		lua_pushboolean(L, 0);
	} else if (!running_installed() && is_dir(SBX_SOURCE_DIR "/lua")) {
		lua_pushliteral(L, SBX_SOURCE_DIR);
		lua_pushliteral(L, SBX_SOURCE_DIR "/lua");
		lua_pushliteral(L, SBX_SOURCE_DIR "/policies");
		lua_pushboolean(L, 1);
	} else {
		lua_pushliteral(L, SBX_INSTALL_DATADIR);
		lua_pushliteral(L, SBX_INSTALL_LUADIR);
		lua_pushliteral(L, SBX_INSTALL_DATADIR "/policies");
		lua_pushboolean(L, 0);
	}
	const char *lua_dir = lua_tostring(L, preload + 2);
	lua_getfield(L, preload - 1, "path");
	lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", lua_dir, lua_dir, lua_tostring(L, -1));
	lua_setfield(L, preload - 1, "path");
	lua_pop(L, 1);
	lua_pushcclosure(L, open_paths, 4);
	lua_setfield(L, preload, "sbx.paths");
	lua_settop(L, top);
}

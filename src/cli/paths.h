/*
 * paths.h: finding lua/ and policies/ for the host binaries.
 */
#ifndef SBX_CLI_PATHS_H
#define SBX_CLI_PATHS_H

#include <lua.h>

/* Preload sbx.paths and put sbx's lua/ first on package.path (see paths.c). */
void sbx_host_paths_preload(lua_State *L);

#endif

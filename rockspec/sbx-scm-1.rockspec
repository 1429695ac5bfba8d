-- The sbx Lua module (the C core sbx.core plus lua/sbx) for a stock LuaJIT:
--
--   luarocks --lua-version 5.1 --tree TREE make rockspec/sbx-scm-1.rockspec
--   eval "$(luarocks --lua-version 5.1 --tree TREE path)"
--   luajit -e 'local s = require("sbx").session{}; print(s:exec("uname -a").stdout); s:close()'
--
-- It builds with the project's own CMake in module-only mode (no sbxlua,
-- no sbxd), so the rock and `make` compile the same sources.
rockspec_format = "3.0"
package = "sbx"
version = "scm-1"
source = {
  url = "git+file://.",
}
description = {
  summary = "Lua-scriptable sandbox sessions for Linux (namespaces, seccomp, capabilities)",
  detailed = [[
    sbx runs untrusted commands in live, multi-turn sessions: a persistent work
    dir, every run an isolated process (user, mount, PID, net, IPC, UTS and cgroup
    namespaces, seccomp, no capabilities), output streamed as it arrives.
  ]],
  license = "MIT",
}
supported_platforms = { "linux" }
dependencies = {
  "lua == 5.1", -- LuaJIT
}
external_dependencies = {
  SECCOMP = { header = "seccomp.h", library = "seccomp" },
  LIBCAP = { header = "sys/capability.h", library = "cap" },
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    SBX_MODULE_ONLY = "ON",
    SBX_LUADIR = "$(LUADIR)",
    SBX_CMODDIR = "$(LIBDIR)",
  },
}

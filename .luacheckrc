-- luacheck configuration (Debian's lua-check): `luacheck .` from the
-- repository root; make test runs it.  sbx's Lua runs under LuaJIT.
std = "luajit"
max_line_length = 120
-- A method need not use its implicit self.
self = false
exclude_files = { "build*/**", ".git/**" }

-- The specs and their helpers run under busted (describe, it, assert, ...).
files["tests/spec/**/*.lua"] = { std = "+busted" }

-- Policy files run in the policy sandbox (lua/sbx/policy/sandbox.lua):
-- exactly these globals, nothing else (a policy using io or require fails
-- to load, and luacheck says so first).  Hooks take the engine's whole
-- argument list; a policy need not use every argument.
stds.sbx_policy = {
  read_globals = {
    "string", "table", "math", "pairs", "ipairs", "type", "tostring", "tonumber", "select",
    "error", "assert", "pcall", "next", "unpack", "presets", "sbx", "match", "log", "deny", "_G",
    os = { fields = { "time", "clock", "date", "difftime" } },
  },
}
local policy = { std = "sbx_policy", unused_args = false }
files["policies/**/*.lua"] = policy
files["examples/policies/**/*.lua"] = policy
files["examples/kubernetes/**/policy.lua"] = policy
files["tests/e2e/**/*.lua"] = { std = "+busted" }
files["tests/**/policies/**/*.lua"] = policy

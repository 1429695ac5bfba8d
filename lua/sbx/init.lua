-- sbx: run untrusted commands in live sandbox sessions on this machine.
--
--   local sbx = require "sbx"
--   local s = sbx.session{ backend = "userns" }
--   local p = s:run("echo hi; exit 3")
--   for line in p:lines() do print(line) end
--   p:wait()                               -- p.returncode == 3, no error
--   print(s:exec("ls -la").stdout)
--   print(s:run_code("print(2 + 2)"))      -- "4\n"
--   s:put_bytes("data.json", "[1,2,3]"); print(s:get_bytes("data.json"))
--   s:close()
--
-- The API and its semantics are DESIGN.md's "Lua API" section; each module
-- documents its part:
--   sbx.session / sbx.attach       lua/sbx/session.lua
--   processes (run's result)       lua/sbx/process.lua
--   options (shapes and types)     lua/sbx/options.lua
--   errors (sbx.errors)            lua/sbx/errors.lua
--   policies (sbx.policy)          lua/sbx/policy/ (init.lua: the API)
--   presets                        lua/sbx/presets.lua
--   sbx.remote (sessions on sbxd)  lua/sbx/remote.lua
--
-- Errors are tables with kind and message (see sbx.errors); test them with
-- sbx.is_error(e, "InvalidArgument").

local errors = require "sbx.errors"
local presets = require "sbx.presets"
local session = require "sbx.session"

local sbx = {}

sbx.version = "0.1.0"
do
  local ok, core = pcall(require, "sbx.core")
  if ok and type(core) == "table" and core.version then sbx.version = core.version end
end

sbx.session = session.open
-- sbx.spares{ n = 2, <session options> }: sessions of that shape opened
-- ahead, which sbx.session takes (off unless asked for: lua/sbx/session.lua).
sbx.spares = session.spares
sbx.spares_stats = session.spares_stats
-- sbx.attach(h): an on-device handle, or a remote one (its table or the
-- string tostring(h) gives, from any process: sbx.remote.attach).
function sbx.attach(h, opts)
  if (type(h) == "string" and h:match("^sbx%+remote:")) or (type(h) == "table" and h.kind == "sbx.remote") then
    return require("sbx.remote").attach(h, opts)
  end
  return session.attach(h)
end

sbx.errors = errors
sbx.is_error = errors.is

-- Stream modes for run{stdout=, stderr=}: true/false work as well.
sbx.PIPE = "pipe"
sbx.DEVNULL = "null"
sbx.INHERIT = "inherit"

-- Presets (copies: editing them changes nothing else).
sbx.PYPI_HOSTS = presets.copy(presets.PYPI_HOSTS)
sbx.NPM_HOSTS = presets.copy(presets.NPM_HOSTS)
sbx.CLOUD_METADATA_DENY = presets.copy(presets.CLOUD_METADATA_DENY)

-- Loaded on first use, so that `require "sbx"` stays cheap.
setmetatable(sbx, {
  __index = function(t, k)
    if k == "policy" or k == "options" or k == "process" or k == "remote" then
      local mod = require("sbx." .. k)
      rawset(t, k, mod)
      return mod
    end
  end,
})

return sbx

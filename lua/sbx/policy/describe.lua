-- sbx.policy.describe: the effective policy as text.  Engine:describe
-- (built-ins merged in, as Lua source) and `sbxlua --check-policy FILE`
-- (check_cli), which prints it or the load error with its line.

local errors = require "sbx.errors"
local schema = require "sbx.policy.schema"

local M = {}

local function serialize(v, indent, out)
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b)
      if type(a) == type(b) then return a < b end
      return type(a) == "number"
    end)
    if #keys == 0 then out[#out + 1] = "{}" return end
    out[#out + 1] = "{\n"
    for _, k in ipairs(keys) do
      out[#out + 1] = indent .. "  "
      if type(k) == "string" and k:match("^[%a_][%w_]*$") then
        out[#out + 1] = k .. " = "
      elseif type(k) ~= "number" then
        out[#out + 1] = ("[%q] = "):format(tostring(k))
      end
      serialize(v[k], indent .. "  ", out)
      out[#out + 1] = ",\n"
    end
    out[#out + 1] = indent .. "}"
  elseif type(v) == "string" then
    out[#out + 1] = ("%q"):format(v)
  else
    out[#out + 1] = tostring(v)
  end
end

-- describe([gen]) -> the effective policy (built-ins merged in) as Lua text.
function M.describe(engine, gen)
  gen = gen or engine.current
  local hooks = {}
  for _, h in ipairs(schema.HOOKS) do
    if gen.hooks[h] then hooks[#hooks + 1] = h end
  end
  local view = {
    name = gen.name, path = gen.path, defaults = gen.defaults, ceilings = gen.ceilings,
    filesystem = gen.filesystem, seccomp = gen.seccomp, network = gen.network,
    limits = { hook_instructions = gen.limits.instructions, hook_ms = gen.limits.ms,
      hook_memory_mb = gen.limits.memory_mb },
    reapply = gen.reapply, hooks = hooks,
  }
  local out = {}
  serialize(view, "", out)
  return table.concat(out)
end

-- check_cli(path) -> exit status (0: the policy loads; 1: it does not).
-- Prints the effective policy on stdout, or the error (with its line, as
-- Lua reports it) on stderr.  sbxlua --check-policy FILE calls this.
function M.check_cli(path)
  local ok, eng = pcall(require("sbx.policy.engine").load, path)
  if not ok then
    io.stderr:write(tostring(errors.is(eng) and eng.message or eng), "\n")
    return 1
  end
  io.stdout:write("-- effective policy of ", eng.path, " (ok)\nreturn ", eng:describe(), "\n")
  return 0
end

return M

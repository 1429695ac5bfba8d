-- sbx.complete: tab completion for the REPL.
--
--   complete.candidates(word, line, env [, commands]) -> { "string.format", ... }
--
-- word is the text before the cursor back to the last separator, so it may
-- be a path: "pri", "string.fo", "s:ru", "sbx.PY".  Paths are walked with
-- rawget and through __index *tables* only (never __index functions or any
-- call), so completing never runs code.  After ':' only functions are
-- offered (methods).  At the start of a line, ":he" completes REPL commands.
-- Private names (a leading "_": s._st, __tostring, _G) are offered only
-- once the word itself starts with "_".

local M = {}

local MAX_CHAIN = 8 -- __index tables followed per value

-- Look key up in v without running code.
local function peek(v, key)
  for _ = 1, MAX_CHAIN do
    if type(v) ~= "table" then
      local mt = getmetatable(v)
      v = type(mt) == "table" and type(mt.__index) == "table" and mt.__index or nil
      if v == nil then return nil end
    end
    local x = rawget(v, key)
    if x ~= nil then return x end
    local mt = getmetatable(v)
    if type(mt) ~= "table" or type(mt.__index) ~= "table" then return nil end
    v = mt.__index
  end
  return nil
end

-- Every string key reachable from v (its own, then its __index tables').
local function keys_of(v, want_fn)
  local out, seen = {}, {}
  for _ = 1, MAX_CHAIN do
    if type(v) == "table" then
      for k, x in pairs(v) do
        if type(k) == "string" and k:match("^[%a_][%w_]*$") and not seen[k] and
            (not want_fn or type(x) == "function") then
          seen[k] = true
          out[#out + 1] = k
        end
      end
    end
    local mt = getmetatable(v)
    if type(mt) ~= "table" or type(mt.__index) ~= "table" then break end
    v = mt.__index
  end
  return out
end

function M.candidates(word, line, env, commands)
  local out = {}
  if commands and line:match("^%s*:[%w_]*$") then
    for _, c in ipairs(commands) do
      if c:sub(1, #word) == word then out[#out + 1] = c end
    end
    table.sort(out)
    return out
  end
  local base, sep, partial = word:match("^(.-)([.:])([%w_]*)$")
  local v, prefix
  if base then
    v = env
    for name in base:gmatch("[^.:]+") do
      if not name:match("^[%a_][%w_]*$") then return out end
      v = peek(v, name)
      if v == nil then return out end
    end
    prefix = base .. sep
  else
    v, partial, prefix = env, word, ""
  end
  local private_ok = partial:sub(1, 1) == "_"
  for _, k in ipairs(keys_of(v, sep == ":")) do
    if k:sub(1, #partial) == partial and (private_ok or k:sub(1, 1) ~= "_") then
      out[#out + 1] = prefix .. k
    end
  end
  table.sort(out)
  return out
end

return M

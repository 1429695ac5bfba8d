-- sbx.policy.sandbox: where policy code runs.  The restricted environment
-- a policy chunk and its hooks see, and the guard that bounds each call
-- (an instruction count, a wall-clock deadline, a heap-growth budget).
-- Plain data crosses in and out through data_copy.  Everything that runs
-- policy code goes through guard(); the guard's count hook exempts this
-- file's own functions (the env's helpers), so they must stay here.

local presets = require "sbx.presets"
local match = require "sbx.match"

local M = {}

-- Instructions a policy chunk may execute while loading.
M.INSTRUCTION_BUDGET = 10 * 1000 * 1000
-- Per hook call, unless the policy's `limits` say less (or more, up to MAX_*).
M.HOOK_INSTRUCTIONS = 1000 * 1000
M.HOOK_MS = 100
M.MAX_HOOK_INSTRUCTIONS = 50 * 1000 * 1000
M.MAX_HOOK_MS = 2000
-- Memory a hook call may add to the Lua heap (checked every 1000 instructions).
M.HOOK_MEMORY_MB = 64
M.MAX_HOOK_MEMORY_MB = 1024

-- copy(t) -> a deep copy of t (tables only; other values as they are).
local function copy(t)
  if type(t) ~= "table" then return t end
  local out = {}
  for k, v in pairs(t) do out[k] = copy(v) end
  return out
end
M.copy = copy

-- ---- clock, logging ----

-- A monotonic clock in milliseconds: sbx.core's (sbxlua, sbxd, the rock),
-- else sbx.clock's, else os.clock (CPU time: a policy hook cannot sleep or
-- wait, it can only compute, so its CPU time is its wall time).  No FFI
-- declarations here: C declarations are global to the process and would
-- clash with other modules' own.
local now_ms
do
  local ok, core = pcall(require, "sbx.core")
  if ok and type(core) == "table" and type(core.monotonic_ms) == "function" then
    now_ms = core.monotonic_ms
  else
    local ok2, clock = pcall(require, "sbx.clock")
    if ok2 and type(clock) == "table" and type(clock.now_ns) == "function" then
      local now_ns = clock.now_ns
      now_ms = function() return now_ns() / 1e6 end
    else
      now_ms = function() return os.clock() * 1000 end
    end
  end
end
M.now_ms = now_ms

-- The default log sink: one line on stderr, unless M.hide(line) says the
-- process shows that line's news itself (the REPL prints every denial it
-- catches as the error, so the policy's "denied:" line would say it twice).
M.hide = nil
function M.stderr_log(line)
  if M.hide and M.hide(line) then return end
  io.stderr:write(line, "\n")
end

-- ---- the guard and the restricted environment ----

local SELF = debug.getinfo(1, "S").source
local MAX_REP = 16 * 1024 * 1024

-- guard(state, budget, ms, fn, ...) -> pcall(fn, ...)'s results, with fn
-- bounded by an instruction budget and a wall-clock deadline.  The count
-- hook raises only in code other than this file's own (the policy's, or
-- the matchers it calls), so it cannot break our bookkeeping; once it has
-- fired, the policy's pcall rethrows (state.exceeded), so catching the
-- error does not let the policy go on.
local STEP = 1000
local function pack(...) return { n = select("#", ...), ... } end

-- string with rep capped and dump removed: the policy's `string` is a copy
-- of it, and while policy code runs it is also what string methods
-- ("x"):rep(n) resolve to (the string metatable's __index), so the cap
-- cannot be walked around.  Never handed to a policy, so never changed.
local safe_string = {}
for k, v in pairs(string) do safe_string[k] = v end
safe_string.dump = nil
safe_string.rep = function(s, n)
  if type(s) == "string" and type(n) == "number" and #s * n > MAX_REP then
    error(("string.rep: a result over %d bytes"):format(MAX_REP), 2)
  end
  return string.rep(s, n)
end
local string_meta = getmetatable("")

local function guard(state, budget, ms, fn, ...)
  state.exceeded = nil
  local used, deadline = 0, now_ms() + ms
  local mem_max = collectgarbage("count") + (state.memory_kb or 64 * 1024)
  local old_hook, old_mask, old_count = debug.gethook()
  local old_index = string_meta.__index
  string_meta.__index = safe_string
  debug.sethook(function()
    used = used + STEP
    if not state.exceeded then
      if used > budget then
        state.exceeded = ("ran over its budget of %d instructions"):format(budget)
      elseif now_ms() > deadline then
        state.exceeded = ("ran past its deadline of %d ms"):format(ms)
      elseif collectgarbage("count") > mem_max then
        state.exceeded = ("ran over its memory budget of %d MiB"):format((state.memory_kb or 65536) / 1024)
      end
    end
    if state.exceeded then
      local info = debug.getinfo(2, "S")
      if info and info.source ~= SELF then error(state.exceeded, 0) end
    end
  end, "", STEP)
  local res = pack(pcall(fn, ...))
  debug.sethook()
  string_meta.__index = old_index
  if old_hook then debug.sethook(old_hook, old_mask, old_count) end
  if state.exceeded then return { n = 2, false, state.exceeded, exceeded = true } end
  return res
end

-- Deep copy into the policy's hands, and back: only plain data crosses.
local function data_copy(v, depth)
  if type(v) ~= "table" then
    if type(v) == "function" or type(v) == "userdata" or type(v) == "thread" or type(v) == "cdata" then
      return nil
    end
    return v
  end
  depth = depth or 0
  if depth > 16 then return nil end
  local out = {}
  for k, x in pairs(v) do
    if type(k) == "string" or type(k) == "number" then out[k] = data_copy(x, depth + 1) end
  end
  return out
end

-- The restricted environment of one policy generation.
local function sandbox_env(state, emit)
  local function guarded_pcall(f, ...)
    local res = pack(pcall(f, ...))
    -- The budget error must reach our own pcall, whatever the chunk catches.
    if state.exceeded then error(state.exceeded, 0) end
    return unpack(res, 1, res.n)
  end
  local str = copy(safe_string)
  local function list_matches(list, host, port, addrs)
    return match.compile(list, "list"):match(host, port, addrs)
  end
  local env = {
    string = str, table = copy(table), math = copy(math),
    os = { time = os.time, clock = os.clock, date = os.date, difftime = os.difftime },
    pairs = pairs, ipairs = ipairs, type = type, tostring = tostring, tonumber = tonumber,
    select = select, error = error, assert = assert, pcall = guarded_pcall, next = next,
    unpack = unpack,
    presets = copy(presets),
    sbx = {
      PYPI_HOSTS = copy(presets.PYPI_HOSTS), NPM_HOSTS = copy(presets.NPM_HOSTS),
      CLOUD_METADATA_DENY = copy(presets.CLOUD_METADATA_DENY),
    },
    match = {
      host = match.host, normalize_host = match.normalize_host, list = list_matches,
      parse_ip = function(s)
        local a = match.ip.parse(s)
        return a and match.ip.tostring(a) or nil
      end,
      cidr = function(cidr, addr)
        local c, a = match.ip.parse_cidr(cidr), match.ip.parse(addr)
        if not c or not a then return false end
        local inner = match.ip.unwrap(a)
        return match.ip.in_cidr(a, c) or (inner ~= nil and match.ip.in_cidr(inner, c))
      end,
    },
    log = function(...)
      local parts = {}
      for i = 1, select("#", ...) do parts[#parts + 1] = tostring((select(i, ...))) end
      emit(table.concat(parts, " "))
    end,
    deny = function(reason) return false, tostring(reason or "denied") end,
  }
  env._G = env
  return env
end
M.guard = guard
M.data_copy = data_copy
M.env = sandbox_env

-- run_hook(gen, hook, ...) -> pcall's results as a table (n, exceeded):
-- the hook called here, under its budget and deadline.  sbxd's policy
-- worker calls it in its own Lua state (lua/sbx/server/hookworker.lua).
function M.run_hook(gen, hook, ...)
  return guard(gen.state, gen.limits.instructions, gen.limits.ms, gen.hooks[hook], ...)
end

return M

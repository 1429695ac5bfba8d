-- sbx.server.hookworker: what sbxd's policy worker thread runs (in a Lua
-- state of its own; src/server/hooks.c), so that policy hooks never run
-- on the event loop.
--
-- The loop's side (sbx.server: hook_runner) posts messages, copied by
-- value, and the worker answers each one in order:
--
--   { op = "load", generation = N, path = P, source = S }
--       compile generation N of the policy from the exact text the loop
--       compiled -> { ok = true } | { ok = false, err = why }
--   { op = "call", generation = N, hook = H, args = { ... } }
--       run hook H of generation N under its budget and deadline
--       (sbx.policy.run_hook) -> { ok = pcall's status, n = its count,
--       v = the hook's first result, r = its second, exceeded = true when
--       stopped by the budget or deadline } | { ok = false, err = why }
--       (a generation that did not load: its hooks deny)
--   { op = "verdict", generation = N, q = Q, ctx = C }
--       the allowlist proxy's verdict on Q (Engine:proxy_verdict, on_connect
--       included) -> { verdict = { allow, reason, literal, resolve } }
--
-- Generations stay loaded as long as the worker runs: sessions keep the
-- generation they were opened under, and each keeps its own state.

local policy = require "sbx.policy"

local M = {}

local gens = {} -- generation -> compiled generation | { failed = why }

local function load(msg)
  local n = tonumber(msg.generation)
  if not n then return { ok = false, err = "a load without a generation" } end
  local ok, gen = pcall(policy.compile, msg.path, { source = msg.source })
  if not ok then
    local why = type(gen) == "table" and gen.message or tostring(gen)
    gens[n] = { failed = why }
    return { ok = false, err = why }
  end
  gen.generation = n
  gens[n] = gen
  return { ok = true }
end

local function call(msg)
  local gen = gens[tonumber(msg.generation) or -1]
  if not gen then
    return { ok = false, err = ("generation %s is not loaded"):format(tostring(msg.generation)) }
  end
  if gen.failed then
    return { ok = false, err = "the policy did not load in the worker: " .. tostring(gen.failed) }
  end
  if type(msg.hook) ~= "string" or not gen.hooks[msg.hook] then
    return { ok = false, err = ("no hook %s"):format(tostring(msg.hook)) }
  end
  local args = type(msg.args) == "table" and msg.args or {}
  local res = policy.run_hook(gen, msg.hook, unpack(args, 1, tonumber(msg.nargs) or #args))
  local v = res[2]
  if not res[1] and type(v) ~= "string" then v = tostring(v) end
  if type(v) == "function" or type(v) == "userdata" or type(v) == "thread" then v = tostring(v) end
  return { ok = res[1] == true, n = res.n, v = v, r = res[3], exceeded = res.exceeded or nil }
end

local function verdict(msg)
  local gen = gens[tonumber(msg.generation) or -1]
  if not gen or gen.failed then
    return { verdict = { allow = false, reason = "the policy did not load in the worker" } }
  end
  if type(msg.q) ~= "table" then return { verdict = { allow = false, reason = "a malformed question" } } end
  local engine = setmetatable({ current = gen, generation = gen.generation }, policy.Engine)
  return { verdict = engine:proxy_verdict(msg.q, type(msg.ctx) == "table" and msg.ctx or {}, gen) }
end

function M.handle(msg)
  if type(msg) ~= "table" then return { ok = false, err = "a malformed message" } end
  if msg.op == "load" then return load(msg) end
  if msg.op == "verdict" then return verdict(msg) end
  if msg.op == "call" then return call(msg) end
  return { ok = false, err = "unknown op " .. tostring(msg.op) }
end

return M

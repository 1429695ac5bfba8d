-- sbx.policy.hooks: calling a policy's hooks and reading their verdicts.
-- A hook allows by returning true (or an adjusted request table, where
-- that is allowed) and denies with false and a reason; an error, a budget
-- or deadline overrun, nothing or anything else denies too.  Every denial
-- is a PolicyDenied, logged through the generation's sink.  Also what a
-- hook sees as ctx.

local errors = require "sbx.errors"
local sandbox = require "sbx.policy.sandbox"

local M = {}

-- denied(gen, hook, cause, fields) -> the PolicyDenied of a hook (logged).
local function hook_denied(gen, hook, cause, fields)
  local e = errors.PolicyDenied(hook, ("policy %s: %s %s"):format(gen.name, hook, cause))
  for k, v in pairs(fields or {}) do e[k] = v end
  gen.emit("denied: " .. e.message)
  return e
end
M.denied = hook_denied

-- call(gen, hook, allow_table, ...) -> "allow" | "adjust", table | raises.
-- A generation compiled with a hook_runner (sbxd) has its hooks called by
-- it, with run_hook's results; it is how sbxd runs them off its loop.
function M.call(gen, hook, allow_table, ...)
  local res
  if gen.runner then
    res = gen.runner(gen, hook, ...)
  else
    res = sandbox.run_hook(gen, hook, ...)
  end
  if res.exceeded then
    errors.raise(hook_denied(gen, hook, "was stopped: " .. res[2], { cause = "timeout" }))
  end
  if not res[1] then
    errors.raise(hook_denied(gen, hook, "failed: " .. tostring(res[2]), { cause = "error" }))
  end
  local v, reason = res[2], res[3]
  if v == true then return "allow" end
  if v == false or v == nil then
    if v == nil and res.n < 3 then
      errors.raise(hook_denied(gen, hook, "returned nothing: a hook allows with `return true` "
        .. "(or an adjusted request) and denies with `return false, reason`", { cause = "malformed" }))
    end
    errors.raise(hook_denied(gen, hook, "denied: " .. (type(reason) == "string" and reason
      or "(no reason given)"), { cause = "denied", reason = reason }))
  end
  if type(v) == "table" and allow_table then return "adjust", v end
  errors.raise(hook_denied(gen, hook, ("returned a malformed value (%s): expected true, %sor false "
    .. "and a reason"):format(type(v), allow_table and "an adjusted request table, " or ""),
    { cause = "malformed" }))
end

-- malformed(gen, hook, what): raises the PolicyDenied of a hook whose
-- adjusted request does not check.
function M.malformed(gen, hook, what)
  errors.raise(hook_denied(gen, hook, "returned a malformed request: " .. what, { cause = "malformed" }))
end

-- ctx(gen, ctx) -> the copy of ctx a hook sees, naming the policy.
function M.ctx(gen, ctx)
  local c = sandbox.data_copy(ctx or {}) or {}
  c.policy = gen.name
  c.generation = gen.generation
  return c
end

-- caller_ctx(caller) -> the ctx a hook sees for who asked: origin
-- ("local" on-device, "sbxd" for the remote API) and, from sbxd, tenant.
function M.caller_ctx(caller)
  local c = type(caller) == "table" and caller or {}
  return { origin = type(c.origin) == "string" and c.origin or "local",
    tenant = type(c.tenant) == "string" and c.tenant or nil }
end

return M

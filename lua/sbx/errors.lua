-- sbx.errors: the error tables the sbx API raises.
--
-- Every error is a table with `kind` (its name) and `message` (what failed,
-- why, and where it can, how to fix it), plus fields of its kind; tostring()
-- gives "Kind: message".  Callers pcall and branch on `kind`, or use
-- `errors.is(e, "InvalidArgument")`.
--
--   SandboxExecutionError  the sandbox misbehaved (spawn failure, lost run):
--                          reason, returncode = -1, backend, runtime_ms
--   SandboxCommandError    exec{check=true} / run_code saw a non-zero exit:
--                          cmd, result (the exec result table)
--   PolicyDenied           the policy refused: rule, message
--   InvalidArgument        the caller passed something wrong: option, message
--   BackendUnavailable     the backend cannot run here: backend, missing, fix
--   SessionClosed          the session (or this reference to it) is closed
--
-- Errors made from the core's (from_core) also carry `code` where the core
-- named a condition within the kind: "not_found" (no such file),
-- "too_large" (over a size cap).  Hosts branch on kind and code, never on
-- the message, whose wording may change.
--
-- A non-zero exit of the sandboxed command is data, not an error: only
-- exec{check=true} and run_code turn it into SandboxCommandError.

local M = {}

local Error = {}
Error.__index = Error
Error.__tostring = function(e)
  return e.kind .. ": " .. tostring(e.message)
end

M.Error = Error

M.KINDS = {
  SandboxExecutionError = true,
  SandboxCommandError = true,
  PolicyDenied = true,
  InvalidArgument = true,
  BackendUnavailable = true,
  SessionClosed = true,
}

-- new(kind, message, fields) -> error table.  fields (optional) are copied in.
function M.new(kind, message, fields)
  assert(M.KINDS[kind], "unknown error kind " .. tostring(kind))
  local e = {}
  if fields then
    for k, v in pairs(fields) do e[k] = v end
  end
  e.kind = kind
  e.message = tostring(message)
  return setmetatable(e, Error)
end

-- is(e, kind) -> true when e is an sbx error (of that kind, if given).
function M.is(e, kind)
  if type(e) ~= "table" or getmetatable(e) ~= Error then return false end
  return kind == nil or e.kind == kind
end

function M.InvalidArgument(option, message)
  local msg = option and (option .. ": " .. message) or message
  return M.new("InvalidArgument", msg, { option = option })
end

function M.PolicyDenied(rule, message)
  return M.new("PolicyDenied", message, { rule = rule })
end

-- missing: what the machine lacks; fix: how to get it (may be nil).
function M.BackendUnavailable(backend, missing, fix)
  local msg = ("backend %q is unavailable: %s"):format(tostring(backend), missing)
  if fix and fix ~= "" then msg = msg .. " (fix: " .. fix .. ")" end
  return M.new("BackendUnavailable", msg, { backend = backend, missing = missing, fix = fix })
end

function M.SandboxExecutionError(reason, backend, runtime_ms)
  return M.new("SandboxExecutionError", reason, {
    reason = reason, returncode = -1, backend = backend, runtime_ms = runtime_ms or 0,
  })
end

local function shorten(s, n)
  s = tostring(s)
  if #s > n then return s:sub(1, n) .. "..." end
  return s
end

-- cmd: the command as given (string or argv table); result: the exec result.
function M.SandboxCommandError(cmd, result)
  local shown = type(cmd) == "table" and table.concat(cmd, " ") or tostring(cmd)
  local why
  if result.termination_reason and result.termination_reason ~= "" then
    why = ("ended by %s (returncode %d)"):format(result.termination_reason, result.returncode)
  else
    why = ("exited with returncode %d"):format(result.returncode)
  end
  local msg = ("command %s %s"):format(("%q"):format(shorten(shown, 200)), why)
  local err = result.stderr
  if type(err) == "string" and err ~= "" then
    msg = msg .. "; stderr: " .. shorten((err:gsub("%s+$", "")), 500)
  end
  return M.new("SandboxCommandError", msg, { cmd = cmd, result = result })
end

function M.SessionClosed(message)
  return M.new("SessionClosed", message or "the session is closed")
end

-- from_core(kind, message, ctx) -> error table from the nil, kind, message
-- triple of sbx.core (and its code, the fourth value, as ctx.code).
-- ctx = { backend =, runtime_ms =, option =, code = }.
local function from_core(kind, message, ctx)
  if kind == "InvalidArgument" then
    return M.InvalidArgument(ctx.option, message)
  elseif kind == "BackendUnavailable" then
    -- The core's message already says what is missing and how to fix it.
    return M.new("BackendUnavailable", message, { backend = ctx.backend, missing = message })
  elseif kind == "SessionClosed" then
    return M.SessionClosed(message)
  elseif kind == "PolicyDenied" then
    return M.PolicyDenied(ctx.rule or "core", message)
  end
  return M.SandboxExecutionError(message, ctx.backend, ctx.runtime_ms)
end

function M.from_core(kind, message, ctx)
  ctx = ctx or {}
  local e = from_core(kind, message or "unknown failure", ctx)
  if ctx.code ~= nil then e.code = ctx.code end
  return e
end

-- raise(e): error(e) without position information (it is a table anyway).
function M.raise(e)
  error(e, 0)
end

return M

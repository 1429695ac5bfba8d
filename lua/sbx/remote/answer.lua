-- sbx.remote.answer: what the server answered, as the on-device error
-- kinds (sbx.errors).  Shared by the session calls (sbx.remote) and the
-- run streams (sbx.remote.stream).
--
--   answer.transport(reason, backend) -> SandboxExecutionError "remote: ..."
--   answer.http(status, body, content_type) -> the error of an HTTP error
--       answer: its {kind, message} as that kind; 401/403/429 PolicyDenied
--       ("auth", "ownership", "limits"), 404 NotFound SessionClosed, 421
--       SandboxExecutionError with status and the owner's endpoint, ...
--   answer.event(ev, backend) -> the error of a run's {"type":"error"} event

local errors = require "sbx.errors"
local msgpack = require "sbx.remote.msgpack"

local M = {}

function M.transport(reason, backend)
  return errors.SandboxExecutionError("remote: " .. tostring(reason), backend, 0)
end

function M.http(status, body, ctype)
  local t
  if body and body ~= "" and ctype and ctype:match("msgpack") then
    local ok, v = pcall(msgpack.decode, body)
    if ok and type(v) == "table" then t = v end
  end
  t = t or { message = ("HTTP %d"):format(status) }
  local kind, msg = t.kind, tostring(t.message or ("HTTP " .. status))
  if status == 421 then -- another sbxd node holds the session (sbx.remote follows it once)
    local e = errors.SandboxExecutionError("remote: " .. msg, nil, 0)
    e.status, e.endpoint = status, type(t.endpoint) == "string" and t.endpoint or nil
    return e
  end
  if kind and errors.KINDS[kind] then
    local fields = {}
    for k, v in pairs(t) do if k ~= "kind" and k ~= "message" then fields[k] = v end end
    fields.status = status
    return errors.new(kind, msg, fields)
  end
  if status == 401 then return errors.PolicyDenied("auth", "remote: " .. msg) end
  if status == 403 then return errors.PolicyDenied("ownership", "remote: " .. msg) end
  if status == 429 then
    local e = errors.PolicyDenied("limits", "remote: " .. msg)
    e.retry_after_s = t.retry_after_s or 1
    return e
  end
  if status == 404 and kind == "NotFound" then return errors.SessionClosed("remote: " .. msg) end
  if status == 413 then return errors.InvalidArgument("data", "remote: " .. msg) end
  if status == 409 then -- an upload chunk at the wrong offset: the file's real size
    local e = errors.SandboxExecutionError("remote: " .. msg, nil, 0)
    e.status, e.path, e.offset, e.size = status, t.path, t.offset, t.size
    return e
  end
  return errors.SandboxExecutionError(("remote: HTTP %d: %s"):format(status, msg), nil, 0)
end

-- A cwd the sandbox does not have is the caller's mistake, as on-device.
function M.event(ev, backend)
  local kind = errors.KINDS[ev.kind] and ev.kind or "SandboxExecutionError"
  local msg = tostring(ev.message or "the sandbox lost the run")
  if kind == "SandboxExecutionError" then
    return errors.SandboxExecutionError(msg, backend, tonumber(ev.runtime_ms) or 0)
  elseif kind == "InvalidArgument" and msg:match("^cwd ") then
    return errors.InvalidArgument("cwd", msg:sub(5))
  end
  return errors.new(kind, msg, {})
end

return M

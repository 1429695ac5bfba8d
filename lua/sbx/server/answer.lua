-- sbx.server.answer: sbxd's answers and how an error becomes one.
--
-- Statuses come from an error's kind (and, for files, its code), never from
-- its message text: STATUS here and open_error in sbx.server.files are the
-- whole mapping (server_seam_spec changes the messages and checks).

local M = {}

M.policy_denials = 0 -- PolicyDenied answers so far (sbxd's /metrics)

function M.reply(status, body, extra)
  local r = { status = status, body = body }
  if extra then for k, v in pairs(extra) do r[k] = v end end
  return r
end

function M.fail(status, kind, message, fields)
  local body = { kind = kind, message = message }
  if fields then for k, v in pairs(fields) do body[k] = v end end
  return M.reply(status, body)
end

M.STATUS = {
  InvalidArgument = 400, PolicyDenied = 403, BackendUnavailable = 503,
  SessionClosed = 410, SandboxExecutionError = 500, SandboxCommandError = 500,
}

-- An sbx error (or any Lua error) as an answer.
function M.from_error(e)
  if type(e) ~= "table" or not e.kind then
    io.stderr:write("sbxd: internal error: ", tostring(e), "\n")
    return M.fail(500, "SandboxExecutionError", "internal error in the server", { reason = "internal error" })
  end
  if e.kind == "PolicyDenied" then M.policy_denials = M.policy_denials + 1 end
  local body = {}
  for k, v in pairs(e) do
    if type(v) == "string" or type(v) == "number" or type(v) == "boolean" then body[k] = v end
  end
  return M.reply(M.STATUS[e.kind] or 500, body)
end

-- 429 with Retry-After: a tenant over one of its limits.
function M.too_many(what, limit)
  local r = M.fail(429, "TooManyRequests", ("%s: the limit is %d"):format(what, limit), { retry_after_s = 1 })
  r.headers = { ["retry-after"] = "1" }
  return r
end

return M

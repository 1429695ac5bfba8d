-- sbx.server.runcontrol: driving an interactive run while it streams.

local errors = require "sbx.errors"
local options = require "sbx.options"
local answer = require "sbx.server.answer"
local loop = require "sbx.server.loop"

local reply, fail, from_error = answer.reply, answer.fail, answer.from_error
local now_ms = loop.now_ms

local M = {}

-- POST .../runs/{run_id}/stdin | resize | signal: drive an interactive
-- run (started with stdin = true or pty) while its output streams.
--   stdin  { offset = n, data = bytes, close = bool }: data is the run's
--          stdin from byte offset n on.  The server writes what the pipe
--          (or terminal) takes now and answers { offset = bytes taken in
--          all, taken = bytes of this chunk }; a retried chunk is not
--          written twice, a gap is 409; no offset appends at the end.  It
--          never holds stdin itself: a full pipe takes nothing and the
--          answer is 503 with retry-after (backpressure), so a run that
--          never reads costs the server no memory.  close = true once all
--          of data was taken ends stdin (a pty: ^D).
--   resize { rows, cols } (pty runs): SIGWINCH to the foreground group.
--   signal { signal = "INT" | number }: INT, QUIT, TSTP reach a pty's
--          foreground process group; any other goes to the run as
--          sbx_run_kill sends it.
M.MAX_STDIN_CHUNK = 64 * 1024
function M.handle(req, rec, run_id, what)
  local ent = rec.live and rec.live[run_id]
  if not ent then
    return fail(404, "NotFound",
      ("no interactive run %s in session %s (ended, or not started with stdin = true or pty)"):format(run_id, rec.s.id))
  end
  local body = req.body
  if type(body) ~= "table" or body[1] ~= nil then
    return from_error(errors.InvalidArgument("body", "a map expected"))
  end
  rec.last_ms = now_ms()
  local r = ent.run
  if what == "resize" then
    local ok, rows, cols = pcall(options.pty_size, { rows = body.rows, cols = body.cols })
    if not ok then return from_error(rows) end
    if not ent.pty then return from_error(errors.InvalidArgument("pty", "the run has no terminal")) end
    local done, kind, msg = r:resize(rows, cols)
    if not done then return fail(500, kind or "SandboxExecutionError", tostring(msg)) end
    return reply(200, { rows = rows, cols = cols })
  elseif what == "signal" then
    local sig = body.signal
    local signo = type(sig) == "string" and require("sbx.core").signals[sig:upper():gsub("^SIG", "")]
      or (type(sig) == "number" and sig == math.floor(sig) and sig >= 1 and sig <= 64 and sig) or nil
    if not signo then
      return from_error(errors.InvalidArgument("signal", "a signal name or number (1-64) expected"))
    end
    local done, kind, msg = r:kill(signo)
    if not done then return fail(500, kind or "SandboxExecutionError", tostring(msg)) end
    return reply(200, { signal = signo })
  end
  -- stdin
  local offset, data = body.offset, body.data or ""
  -- No offset: append at the end (a re-attached client learns it here).
  if offset == nil then offset = ent.offset end
  if type(offset) ~= "number" or offset < 0 or offset ~= math.floor(offset) then
    return from_error(errors.InvalidArgument("offset", "a byte offset (integer >= 0) expected"))
  end
  if type(data) ~= "string" then return from_error(errors.InvalidArgument("data", "bytes expected")) end
  if #data > M.MAX_STDIN_CHUNK then
    return from_error(errors.InvalidArgument("data", ("at most %d bytes per chunk"):format(M.MAX_STDIN_CHUNK)))
  end
  if body.close ~= nil and type(body.close) ~= "boolean" then
    return from_error(errors.InvalidArgument("close", "a boolean expected"))
  end
  if offset > ent.offset then
    return fail(409, "Conflict", ("stdin offset %d is past the %d bytes taken so far"):format(offset, ent.offset),
      { offset = ent.offset })
  end
  local skip, taken = ent.offset - offset, 0
  if ent.closed then
    return fail(410, "StdinClosed", "the run's stdin is closed", { offset = ent.offset })
  end
  if skip < #data then
    local n, _, msg = r:write(skip == 0 and data or data:sub(skip + 1))
    if not n then
      ent.closed = true
      return fail(410, "StdinClosed", ("the run's stdin is closed (%s)"):format(tostring(msg)), { offset = ent.offset })
    end
    ent.offset, taken = ent.offset + n, n
    if n == 0 then
      local a = fail(503, "StdinFull", "the run is not reading its stdin: retry later",
        { offset = ent.offset, taken = 0 })
      a.headers = { ["retry-after"] = "1" }
      return a
    end
  end
  if body.close and ent.offset == offset + #data then
    r:close_stdin()
    if not ent.pty then ent.closed = true end
  end
  return reply(200, { offset = ent.offset, taken = taken })
end

return M

-- sbx.remote.stream: a remote run's HTTP/2 event stream as an event
-- source of sbx.process (the interface is described there), so a remote
-- run is the same Process as a local one.
--
--   stream.start(conn, method, path, payload, o) -> src, or nil, err
--       o = { headers, backend, deadline_ms (when the run's own timeout
--       has surely ended it if it started now, or nil: moved by how late
--       its first output comes), detach }; returns once the answer
--       started: an error answer (a refused run) is returned as err, so
--       run() raises it itself, as on-device.
--   src.meta   fields the stream announces (run_id, dropped_events,
--              dropped_bytes); the Process becomes src.meta once it exists
--
-- Both output streams share one HTTP/2 stream, so the source can hold
-- back one of them only by not reading the connection at all.  It does
-- so when output of a stream that is not wanted (the Process keeps
-- BUFFER_CAP of it) reaches STALL_BYTES here: then sbxd's queue fills, it
-- stops reading the run's pipes and the command blocks, as on-device.
-- Unlike a local run, the exit cannot overtake the held-back output: a
-- run blocked that way is read again once its own timeout (deadline_ms)
-- must have ended it, so what follows is bounded by sbxd's queue.

local ffi = require "ffi"
local msgpack = require "sbx.remote.msgpack"
local answer = require "sbx.remote.answer"

local M = {}

M.STALL_BYTES = 64 * 1024
-- How long a writer waits after sbxd said the run's stdin is full.
M.STDIN_RETRY_MS = 50

pcall(ffi.cdef, "int poll(void *fds, unsigned long nfds, int timeout);")

local core_ok, core = pcall(require, "sbx.core")
local function now_ms()
  return core_ok and core.monotonic_ms and core.monotonic_ms() or os.time() * 1000
end

local Source = {}
Source.__index = Source

-- Each stream's queue: chunks q[head..tail] (no holes for # to trip on).
local function has(src, st) return src.qhead[st] <= src.qtail[st] end

local function push(src, st, data)
  local t = src.qtail[st] + 1
  src.q[st][t], src.qtail[st] = data, t
  src.qbytes[st] = src.qbytes[st] + #data
end

local function pop(src, st)
  local h = src.qhead[st]
  local data = src.q[st][h]
  src.q[st][h] = nil
  src.qhead[st] = h + 1
  src.qbytes[st] = src.qbytes[st] - #data
  return data
end

local function reset_queues(src)
  src.q, src.qhead, src.qtail = { stdout = {}, stderr = {} }, { stdout = 1, stderr = 1 }, { stdout = 0, stderr = 0 }
  src.qbytes = { stdout = 0, stderr = 0 }
end

-- The run's first output: it surely runs, and its own timeout counts from
-- its start on sbxd, which a loaded server (waiting for a warm init) can
-- make seconds after the request.  So the deadline, given as measured
-- from the request, counts from here instead.
local function started(src)
  src.output_ms = now_ms()
  if src.deadline_ms then src.deadline_ms = src.deadline_ms + (src.output_ms - src.t0) end
end

-- Decode the events that arrived; keep a partial one for later.
local function feed(src, chunk, req)
  src.rx = src.rx .. chunk
  if req.status and req.status >= 300 then return end -- an error answer: kept whole
  local pos = 1
  while true do
    local ok, ev, npos = pcall(msgpack.decode, src.rx, pos)
    if not ok then src.protocol_error = tostring(ev) break end
    if ev == nil then break end
    pos = npos
    if type(ev) == "table" then
      if (ev.type == "stdout" or ev.type == "stderr") and type(ev.data) == "string" then
        if not src.output_ms then started(src) end
        push(src, ev.type, ev.data)
      elseif ev.type == "exit" or ev.type == "error" then
        src.final = ev
      elseif ev.type == "run" and type(ev.run_id) == "string" then
        src.meta.run_id = ev.run_id
      elseif ev.type == "dropped" then
        local m = src.meta
        m.dropped_events = (m.dropped_events or 0) + (tonumber(ev.events) or 0)
        m.dropped_bytes = (m.dropped_bytes or 0) + (tonumber(ev.bytes) or 0)
      end
    end
  end
  if pos > 1 then src.rx = src.rx:sub(pos) end
end

-- The request ended: settle the result the Process gets after the output.
local function settle(src)
  if src.result then return end
  local ev, r = src.final, src.req
  local function failed(err) src.result = { term = "error", err = err, runtime_ms = 0 } end
  if not ev then
    if r.status and r.status >= 300 then
      failed(answer.http(r.status, src.rx, r.content_type))
    else
      failed(answer.transport(src.protocol_error or r.error or "the stream ended without an exit event", src.backend))
    end
  elseif ev.type == "error" then
    failed(answer.event(ev, src.backend))
    src.result.runtime_ms = tonumber(ev.runtime_ms) or 0
  else
    local reason = ev.termination_reason or ""
    src.result = { term = reason == "" and "exit" or reason, returncode = ev.returncode,
      runtime_ms = ev.runtime_ms, backend = ev.backend, signo = ev.signal }
  end
end

-- Drive the connection once; the final event ends the stream whether or
-- not libcurl has noticed END_STREAM yet (see sbx.remote.http's complete()).
local function pump(src, timeout)
  local conn, req = src.conn, src.req
  if not req.done then conn:pump(timeout) end
  if src.final and not req.done then conn:finish(req) end
  if req.done then settle(src) end
end

local function sleep_ms(ms)
  if ms > 0 then ffi.C.poll(nil, 0, ms) end
end

function M.start(conn, method, path, payload, o)
  local src = setmetatable({
    conn = conn, backend = o.backend, deadline_ms = o.deadline_ms, t0 = now_ms(),
    rx = "", meta = {},
  }, Source)
  reset_queues(src)
  src.req = conn:start(method, path, payload, {
    headers = o.headers, on_data = function(chunk, req) feed(src, chunk, req) end,
  })
  local req = src.req
  while not req.done and req.status == nil do conn:pump(250) end
  if req.done or (req.status and req.status >= 300) then
    conn:wait(req)
    settle(src)
    if (req.status or 0) >= 300 and not src.final then return nil, src.result.err, req.status end
    if not src.final and req.error then return nil, answer.transport(req.error, o.backend) end
  end
  src.control = o.control
  src.stdin_off = 0
  -- A detached (or interactive) run's first event names it.
  if o.detach or o.named then
    while not src.meta.run_id and not req.done do conn:pump(250) end
    if not src.meta.run_id then
      pump(src, 0)
      local r = src.result
      if r and r.term == "error" and r.err then return nil, r.err end
      return nil, answer.transport("the server did not name the detached run", o.backend)
    end
  end
  return src
end

-- Is output of a stream the caller does not want piling up here?  Then
-- stop reading the connection (see the top of the file), until the run's
-- own timeout must have ended it.
local function held_back(src, want_out, want_err)
  if src.deadline_ms and now_ms() >= src.deadline_ms then return false end
  return (not want_out and src.qbytes.stdout >= M.STALL_BYTES)
    or (not want_err and src.qbytes.stderr >= M.STALL_BYTES)
end

function Source:next(timeout, want_out, want_err)
  for round = 1, 2 do
    if want_out and has(self, "stdout") then return "stdout", pop(self, "stdout") end
    if want_err and has(self, "stderr") then return "stderr", pop(self, "stderr") end
    if self.result and not has(self, "stdout") and not has(self, "stderr") then return "exit", self.result end
    if round == 2 then break end
    if held_back(self, want_out, want_err) then
      sleep_ms(timeout)
    else
      pump(self, timeout)
    end
  end
  return false
end

function Source:eof(stream)
  return self.result ~= nil and not has(self, stream)
end

-- Resetting the stream is all a client can do: sbxd kills the run (always
-- with SIGKILL), or, for a detached run, keeps it and lets this client go.
function Source:kill(signo)
  if self.result then return true end
  if signo and signo ~= 9 and self.control and self.meta.run_id then return self:_signal(signo) end
  self.conn:cancel(self.req)
  local ms = now_ms() - self.t0
  if self.meta.run_id then
    self.result = { term = "detached", returncode = -9, runtime_ms = ms }
  else
    self.result = { term = "killed", returncode = -9, signo = 9, runtime_ms = ms }
  end
  return true, "ended"
end

-- Live stdin of an interactive run, through POST .../runs/{id}/stdin
-- (sbx.server: offsets make a retry idempotent; a full pipe is a 503 and
-- nothing is taken, which write() reports as 0: the Process retries).
local function ctl(self, what, body)
  if not self.control or not self.meta.run_id then
    return nil, "InvalidArgument", "the run has no live stdin (stdin = true or pty)"
  end
  local st, v = self.control(self.meta.run_id, what, body)
  if not st or st == 0 then return nil, "SandboxExecutionError", tostring(v) end
  return st, v
end

function Source:write(data)
  -- stdin_off nil (a re-attached run): append, and learn the offset.
  local st, v = ctl(self, "stdin", { offset = self.stdin_off, data = data })
  if not st then return nil, v, data end
  if st == 200 or st == 503 then
    local off = type(v) == "table" and tonumber(v.offset) or self.stdin_off or 0
    local n = self.stdin_off and math.max(0, off - self.stdin_off)
      or (type(v) == "table" and tonumber(v.taken)) or 0
    self.stdin_off = math.max(self.stdin_off or 0, off)
    if st == 503 and n == 0 then
      -- Full: back off (reading the run's output meanwhile) rather than
      -- asking again at once; retry-after's 1 s is too long for a terminal.
      local until_ms = now_ms() + M.STDIN_RETRY_MS
      repeat pump(self, math.max(0, math.floor(until_ms - now_ms())))
      until now_ms() >= until_ms or self.req.done
    end
    return n
  end
  -- 404 (the run ended) or 410 (stdin closed): the reader is gone.
  return nil, "SandboxExecutionError", type(v) == "table" and v.message or tostring(v)
end

function Source:close_stdin()
  local st, v = ctl(self, "stdin", { offset = self.stdin_off, data = "", close = true })
  if not st then return nil, v end
  if st == 200 or st == 404 or st == 410 then return true end
  return nil, "SandboxExecutionError", type(v) == "table" and v.message or tostring(v)
end

function Source:resize(rows, cols)
  local st, v = ctl(self, "resize", { rows = rows, cols = cols })
  if st == 200 or st == 404 then return true end
  return nil, st and "SandboxExecutionError" or v, type(v) == "table" and v.message or tostring(v)
end

-- A signal other than KILL to an interactive run goes through its
-- signal route (INT, QUIT, TSTP reach a pty's foreground group).
function Source:_signal(signo)
  local st, v = ctl(self, "signal", { signal = signo })
  if st == 200 or st == 404 then return true end
  return false, st and "SandboxExecutionError" or v, type(v) == "table" and v.message or tostring(v)
end

function Source:close()
  if not self.req.done then self.conn:cancel(self.req) end
  reset_queues(self)
end

function Source:buffered(stream)
  return self.qbytes[stream]
end

return M

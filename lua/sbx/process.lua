-- sbx.process: a running (or finished) command, as s:run() returns it.
--
--   p:lines([stream])   iterator over the lines of "stdout" (default) or
--                       "stderr" as they arrive; a line comes without its
--                       "\n", a last line without one is yielded at EOF.
--   p:read([stream [, timeout_s]])
--                       the next piece of output available (a string), nil
--                       at EOF; with timeout_s, "" when nothing came in time.
--   p:communicate()     drain both streams, wait for the exit; returns out,
--                       err (nil for a stream that was not captured).
--   p:wait()            drain (discarding unconsumed output), wait for the
--                       exit; returns the returncode.
--   p:kill([sig])       send sig (a number or a name like "TERM"; default
--                       KILL); false when the process had already ended.
--                       On a pty run INT, QUIT and TSTP go to the
--                       terminal's foreground process group (^C, ^\, ^Z).
--   p:write(data [, timeout_s])
--                       live stdin (run with stdin = true, or pty): true
--                       once all of data was taken; waits while the pipe
--                       (or terminal) is full, taking output meanwhile as
--                       lines/read would (within BUFFER_CAP).  nil,
--                       "timeout", n after timeout_s with only n bytes
--                       taken (backpressure: the command does not read);
--                       nil, "closed", n once stdin or the run has ended.
--   p:close_stdin()     end live stdin (the command reads EOF; on a pty
--                       the terminal's EOF key, ^D, is typed).
--   p:resize(rows, cols) a pty run's window size (SIGWINCH to its
--                       foreground process group).
--   p.pty               true for a run with a terminal: its output is the
--                       terminal's byte stream, read as "stdout".
--
-- After the exit: p.returncode (the exit code; -signo when a signal ended
-- it, Python's convention), p.signal (the signal number or nil),
-- p.termination_reason ("" for an exit of its own, "signal", "timeout",
-- "killed", "oom" or "session_expired": the session's timeout_s ended it)
-- p.runtime_ms, p.backend.  While it runs p.returncode is nil.
--
-- A non-zero exit never raises.  SandboxExecutionError (reason, returncode
-- = -1, backend, runtime_ms) is raised, by whichever method notices it and
-- by every one called after, when the sandbox lost the run or could not
-- start the command (an argv whose program does not exist, say); a cwd
-- that does not exist in the sandbox is InvalidArgument, and a run lost
-- because its session was closed is SessionClosed, raised the same way
-- (the run starts asynchronously, so run() itself cannot know).
--
-- Backpressure: while one stream is being read (lines, read), output of the
-- other captured stream is kept in memory up to BUFFER_CAP bytes; past
-- that it is no longer read, so the command blocks on a full pipe until
-- the caller reads that stream too (or calls communicate/wait).  Memory
-- stays bounded by BUFFER_CAP plus what the caller itself keeps.
-- communicate() returns whole outputs, so it holds them in memory: use
-- lines() or stdout = false for unbounded output.
--
-- A process that is garbage collected while still running is killed:
-- keep it (or wait for it) as long as it should run.
--
-- One Process, two event sources (so on-device and remote runs behave the
-- same by construction): a local run (an sbx.core run object, wrapped by
-- local_source below) and a remote run's HTTP/2 event stream
-- (sbx.remote.stream).  A source has
--   src:next(timeout_ms, want_stdout, want_stderr) -> "stdout"|"stderr", data
--       | "exit", res | false (the slice passed).  Output of a stream not
--       wanted stays with the source (its producer blocks: backpressure);
--       "exit" comes only once both streams are drained.  res = { term
--       ("exit", "signal", "timeout", "killed", "oom", "session_expired", "detached" or
--       "error"), returncode, signo, runtime_ms, backend?, error (the
--       reason) or err (an sbx error table) for "error" }.
--   src:eof(stream)     true once stream has no more output to give
--   src:kill(signo)     -> true [, "ended": the exit is known already]
--                          | false, kind, message
--   src:close()         free what the source holds
--   src:buffered()      bytes it holds that the Process has not taken
--   src:write(data)     -> bytes taken now (0: full; next() returns false
--                          early once there is room) | nil, kind, message
--   src:close_stdin(), src:resize(rows, cols) -> true | nil, kind, message

local errors = require "sbx.errors"

local M = {}

M.BUFFER_CAP = 16 * 1024 * 1024
-- Longest single wait in the core.  The run wakes us at once for output
-- or the exit; the slice only bounds how long a Lua-side interrupt (a
-- REPL's Ctrl-C hook) or an EOF nobody reports waits before Lua runs.
M.WAIT_SLICE_MS = 250

local Process = {}
Process.__index = Process

local STREAMS = { stdout = true, stderr = true }
local OTHER = { stdout = "stderr", stderr = "stdout" }

local function now_ms(core)
  return core and core.monotonic_ms and core.monotonic_ms() or os.time() * 1000
end

-- The local run as an event source: the core run does the work.
local LocalSource = {}
LocalSource.__index = LocalSource

function M.local_source(run)
  return setmetatable({ run = run }, LocalSource)
end

function LocalSource:next(timeout, want_out, want_err)
  local ev, a, b = self.run:next(timeout, want_out, want_err)
  if ev == "stdout" or ev == "stderr" or ev == "exit" or ev == false then return ev, a end
  return "exit", { term = "error", error = ("reading the run failed: %s: %s"):format(tostring(a), tostring(b)) }
end

function LocalSource:eof(stream)
  local out_fd, err_fd = self.run:fds()
  return (stream == "stdout" and out_fd or err_fd) < 0
end

function LocalSource:kill(signo) return self.run:kill(signo) end
function LocalSource:write(data) return self.run:write(data) end
function LocalSource:close_stdin() return self.run:close_stdin() end
function LocalSource:resize(rows, cols) return self.run:resize(rows, cols) end
function LocalSource:close() self.run:close() end
function LocalSource:buffered() return 0 end

-- from_source(src, info) -> Process.  info = { cmd, backend, stdout, stderr
-- (the modes: "pipe", "null", "inherit"), core, session_closed (a
-- function: true once the session was closed) }.
function M.from_source(src, info)
  local p = {
    cmd = info.cmd,
    backend = info.backend,
    _src = src,
    _core = info.core,
    _session_closed = info.session_closed,
    _t0 = now_ms(info.core),
    _captured = { stdout = info.stdout == "pipe", stderr = info.stderr == "pipe" },
    _chunks = { stdout = {}, stderr = {} },   -- output not yet consumed, as it came
    _size = { stdout = 0, stderr = 0 },
    _lines = { stdout = {}, stderr = {} },    -- complete lines split off but not yet returned
    _lhead = { stdout = 1, stderr = 1 },
    _partial = { stdout = "", stderr = "" },  -- a line still waiting for its "\n"
    _done = false,
    _stdin_live = info.stdin_live or info.pty or false,
    pty = info.pty or false,
  }
  return setmetatable(p, Process)
end

-- new(run, info) -> Process over an sbx.core run (see from_source).
function M.new(run, info)
  return M.from_source(M.local_source(run), info)
end

function M.is_process(v)
  return getmetatable(v) == Process
end

Process.__tostring = function(p)
  if not p._done then return ("sbx.process(running, %q)"):format(tostring(p.cmd)) end
  return ("sbx.process(returncode=%s%s, %q)"):format(tostring(p.returncode),
    p.termination_reason ~= "" and ", " .. tostring(p.termination_reason) or "", tostring(p.cmd))
end

local function raise_stored(p)
  if p._error then errors.raise(p._error) end
end

-- The run failed: remember why, so every later call says so too.
-- SandboxExecutionError, but an option of the request the sandbox found
-- wrong (a cwd that does not exist inside it: the core's error_kind and
-- error_option say so) is the caller's mistake: InvalidArgument.
-- A source that already knows the error as a table passes it as err.
local function fail(p, reason, runtime_ms, err, res)
  p._done = true
  p.returncode = -1
  p.runtime_ms = runtime_ms or (now_ms(p._core) - p._t0)
  p.termination_reason = "error"
  if err then
    p._error = err
  elseif res and res.error_kind == "InvalidArgument" and res.error_option then
    p._error = errors.InvalidArgument(res.error_option, res.error_detail or reason)
  elseif p._session_closed and p._session_closed() then
    p._error = errors.SessionClosed("the session was closed while the command ran")
  else
    p._error = errors.SandboxExecutionError(reason, p.backend, p.runtime_ms)
  end
  if p._src then p._src:close() p._src = nil end
  errors.raise(p._error)
end

local function finish(p, res)
  if res.term == "error" then
    fail(p, res.error or "the sandbox lost the run", res.runtime_ms, res.err, res)
  end
  p._done = true
  p.returncode = res.returncode
  p.runtime_ms = res.runtime_ms
  p.backend = res.backend or p.backend
  p.signal = res.signo and res.signo ~= 0 and res.signo or nil
  p.termination_reason = res.term == "exit" and "" or res.term
  -- Free the pipes and the pidfd (or the stream) now rather than at the
  -- next collection.
  p._src:close()
  p._src = nil
end

-- One event from the source.  Returns the stream that got data, "exit", or
-- false when the slice passed with nothing.
local function step(p, want_out, want_err, timeout)
  local ev, a = p._src:next(timeout or M.WAIT_SLICE_MS, want_out, want_err)
  if ev == "stdout" or ev == "stderr" then
    local c = p._chunks[ev]
    c[#c + 1] = a
    p._size[ev] = p._size[ev] + #a
    return ev
  end
  if ev == "exit" then
    finish(p, a)
    return "exit"
  end
  return false
end

-- Has stream reached its end?
local function at_eof(p, stream)
  return p._done or p._src:eof(stream)
end

-- Wait for output of stream, reading the other stream as long as its
-- buffer is under the cap (the backpressure of the module comment).
local function pump_for(p, stream, timeout)
  local other = OTHER[stream]
  local want_other = p._captured[other] and p._size[other] < M.BUFFER_CAP
  if stream == "stdout" then
    return step(p, true, want_other, timeout)
  end
  return step(p, want_other, true, timeout)
end

local function check_stream(p, stream)
  if stream == nil then stream = "stdout" end
  if not STREAMS[stream] then
    errors.raise(errors.InvalidArgument("stream", ('"stdout" or "stderr" expected, got %s'):format(tostring(stream))))
  end
  if not p._captured[stream] then
    errors.raise(errors.InvalidArgument("stream",
      ("%s was not captured: run the command with %s = true"):format(stream, stream)))
  end
  return stream
end

-- Move the buffered chunks of stream into complete lines + partial.
local function split_lines(p, stream)
  local data = p._partial[stream] .. table.concat(p._chunks[stream])
  p._chunks[stream], p._size[stream] = {}, 0
  local lines, pos = p._lines[stream], 1
  while true do
    local nl = data:find("\n", pos, true)
    if not nl then break end
    lines[#lines + 1] = data:sub(pos, nl - 1)
    pos = nl + 1
  end
  p._partial[stream] = data:sub(pos)
end

-- Everything of stream not consumed yet, removed from the buffers.
local function take(p, stream)
  local parts = {}
  local lines, head = p._lines[stream], p._lhead[stream]
  for i = head, #lines do parts[#parts + 1] = lines[i] .. "\n" end
  parts[#parts + 1] = p._partial[stream]
  for _, c in ipairs(p._chunks[stream]) do parts[#parts + 1] = c end
  p._lines[stream], p._lhead[stream], p._partial[stream] = {}, 1, ""
  p._chunks[stream], p._size[stream] = {}, 0
  return table.concat(parts)
end

function Process:lines(stream)
  raise_stored(self)
  stream = check_stream(self, stream)
  local p = self
  return function()
    while true do
      local lines, head = p._lines[stream], p._lhead[stream]
      if head <= #lines then
        p._lhead[stream] = head + 1
        return lines[head]
      end
      p._lines[stream], p._lhead[stream] = {}, 1
      if p._size[stream] > 0 then
        split_lines(p, stream)
      elseif at_eof(p, stream) then
        raise_stored(p)
        local last = p._partial[stream]
        p._partial[stream] = ""
        if last ~= "" then return last end
        return nil
      else
        pump_for(p, stream)
      end
    end
  end
end

function Process:read(stream, timeout_s)
  raise_stored(self)
  stream = check_stream(self, stream)
  if timeout_s ~= nil and (type(timeout_s) ~= "number" or timeout_s < 0) then
    errors.raise(errors.InvalidArgument("timeout_s", "a number >= 0 expected"))
  end
  local deadline = timeout_s and now_ms(self._core) + timeout_s * 1000
  while true do
    local data = take(self, stream)
    if data ~= "" then return data end
    if at_eof(self, stream) then
      raise_stored(self)
      return nil
    end
    local left = deadline and deadline - now_ms(self._core)
    if left and left <= 0 then return "" end
    pump_for(self, stream, left and math.min(M.WAIT_SLICE_MS, math.ceil(left)) or nil)
  end
end

function Process:communicate()
  raise_stored(self)
  while not self._done do
    step(self, self._captured.stdout, self._captured.stderr)
  end
  local out = self._captured.stdout and take(self, "stdout") or nil
  local err = self._captured.stderr and take(self, "stderr") or nil
  return out, err
end

function Process:wait()
  raise_stored(self)
  while not self._done do
    step(self, self._captured.stdout, self._captured.stderr)
    -- Discard as we go: wait() must not hold the output in memory.
    for s in pairs(STREAMS) do
      if self._size[s] > 0 then self._chunks[s], self._size[s] = {}, 0 end
    end
  end
  for s in pairs(STREAMS) do take(self, s) end
  return self.returncode
end

function Process:kill(sig)
  raise_stored(self)
  local signo = sig
  if sig == nil then
    signo = 9
  elseif type(sig) == "string" then
    local signals = self._core and self._core.signals or {}
    signo = signals[sig:upper():gsub("^SIG", "")]
    if not signo then
      errors.raise(errors.InvalidArgument("sig", ("unknown signal name %q"):format(sig)))
    end
  elseif type(sig) ~= "number" or sig ~= math.floor(sig) or sig < 1 or sig > 64 then
    errors.raise(errors.InvalidArgument("sig", "a signal number (1-64) or name expected, got " .. tostring(sig)))
  end
  if self._done then return false end
  local ok, kind, msg = self._src:kill(signo)
  if not ok then
    errors.raise(errors.SandboxExecutionError(("kill: %s: %s"):format(tostring(kind), tostring(msg)),
      self.backend, now_ms(self._core) - self._t0))
  end
  -- A source that knows the end at once (a remote run lets go of its
  -- stream): take what it holds and the exit now, so the fields are set.
  if kind == "ended" then
    while not self._done do step(self, true, true, 0) end
  end
  return true
end

local WRITE_CHUNK = 65536

local function need_live_stdin(p)
  if not p._stdin_live then
    errors.raise(errors.InvalidArgument("stdin",
      "the run has no live stdin: run it with stdin = true (or pty)"))
  end
end

function Process:write(data, timeout_s)
  raise_stored(self)
  need_live_stdin(self)
  if type(data) ~= "string" then
    errors.raise(errors.InvalidArgument("data", "a string expected, got " .. type(data)))
  end
  if timeout_s ~= nil and (type(timeout_s) ~= "number" or timeout_s < 0) then
    errors.raise(errors.InvalidArgument("timeout_s", "a number >= 0 expected"))
  end
  local deadline = timeout_s and now_ms(self._core) + timeout_s * 1000
  local off = 1
  while off <= #data do
    if self._done or self._stdin_closed then return nil, "closed", off - 1 end
    local piece = data:sub(off, off + WRITE_CHUNK - 1)
    local n, kind = self._src:write(piece)
    if not n then
      -- The command closed its end (EPIPE), or the terminal hung up.
      if kind == "SandboxExecutionError" or kind == "InvalidArgument" then
        self._stdin_closed = true
        return nil, "closed", off - 1
      end
      errors.raise(errors.SandboxExecutionError("write stdin: " .. tostring(kind), self.backend,
        now_ms(self._core) - self._t0))
    end
    off = off + n
    -- Only a piece not taken whole means the pipe is full: wait for room.
    if off <= #data and n < #piece then
      local left = deadline and deadline - now_ms(self._core)
      if left and left <= 0 then return nil, "timeout", off - 1 end
      -- Full: wait for room (the source wakes us), taking output meanwhile.
      local c = self._captured
      step(self, c.stdout and self._size.stdout < M.BUFFER_CAP,
        c.stderr and self._size.stderr < M.BUFFER_CAP,
        left and math.min(M.WAIT_SLICE_MS, math.max(1, math.floor(left))) or nil)
    end
  end
  return true
end

function Process:close_stdin()
  raise_stored(self)
  need_live_stdin(self)
  if self._done or self._stdin_closed then return true end
  if not self.pty then self._stdin_closed = true end
  local ok, kind, msg = self._src:close_stdin()
  if not ok and kind ~= "InvalidArgument" then
    errors.raise(errors.SandboxExecutionError(("close stdin: %s: %s"):format(tostring(kind), tostring(msg)),
      self.backend, now_ms(self._core) - self._t0))
  end
  return true
end

function Process:resize(rows, cols)
  raise_stored(self)
  if not self.pty then
    errors.raise(errors.InvalidArgument("pty", "the run has no terminal: run it with pty = { rows =, cols = }"))
  end
  local options = require "sbx.options"
  rows, cols = options.pty_size { rows = rows, cols = cols }
  if self._done then return false end
  local ok, kind, msg = self._src:resize(rows, cols)
  if not ok then
    errors.raise(errors.SandboxExecutionError(("resize: %s: %s"):format(tostring(kind), tostring(msg)),
      self.backend, now_ms(self._core) - self._t0))
  end
  return true
end

-- The next output of either captured stream as it arrives: stream name
-- and data, or nil once both ended (the run's error, if any, is raised).
-- sbxlua --remote uses it to copy a run's output to the terminal.
function Process:read_any()
  raise_stored(self)
  while true do
    local open = false
    for _, st in ipairs { "stdout", "stderr" } do
      if self._captured[st] then
        local data = take(self, st)
        if data ~= "" then return st, data end
        if not at_eof(self, st) then open = true end
      end
    end
    if not open then
      -- Both ended: the exit (and its fields) comes next.
      while not self._done do step(self, self._captured.stdout, self._captured.stderr) end
      raise_stored(self)
      return nil
    end
    step(self, self._captured.stdout, self._captured.stderr)
  end
end

-- done() -> true once the exit has been seen.  Looks (without waiting)
-- for news first, taking output as lines/read would, within the cap.
function Process:done()
  if not self._done then
    raise_stored(self)
    local c = self._captured
    step(self, c.stdout and self._size.stdout < M.BUFFER_CAP, c.stderr and self._size.stderr < M.BUFFER_CAP, 0)
  end
  return self._done
end

-- _buffered(stream) -> bytes of stream's output held in memory and not
-- yet returned (the Process's buffers and what the source holds; for the
-- backpressure specs).
function Process:_buffered(stream)
  local n = self._size[stream] + #self._partial[stream]
  for i = self._lhead[stream], #self._lines[stream] do n = n + #self._lines[stream][i] + 1 end
  return n + (self._src and self._src:buffered(stream) or 0)
end

return M

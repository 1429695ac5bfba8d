-- sbx.remote: sessions on a remote sbxd, with the on-device Lua API.
--
--   local remote = require "sbx.remote"        -- or sbx.remote
--   local s = remote.session{ endpoint = "http://127.0.0.1:7433", token = T,
--                             backend = "userns" }
--   local p = s:run("for i in 1 2 3; do echo $i; sleep 1; done")
--   for line in p:lines() do print(line) end   -- live, one per second
--   print(s:exec("ls").stdout); print(s:run_code("print(2+2)"))
--   s:put_bytes("x.txt", "hi"); print(s:get_bytes("x.txt"))
--   local h = s:handle()                       -- { kind = "sbx.remote", endpoint, id, name, token }
--   local ref = remote.attach(h)               -- reference mode: run/put/get
--   s:close()
--
-- Connection options (next to the session options, never sent as such):
--   endpoint  "http://HOST:PORT" (h2c prior knowledge), "https://HOST:PORT"
--             (TLS, ALPN h2) or "unix:/path"
--   token     the bearer token (or token_file = path: first word of line 1)
--   ca_file   a CA bundle for https; insecure_tls = true skips verification
--   request_timeout_s  for non-streaming calls (default 60)
--   upload_chunk_bytes put_bytes sends data larger than this as consecutive
--             PUTs of this size (default 4 MiB; never more than the
--             server's max_body_bytes, which it announces)
--
-- Errors are the on-device kinds (sbx.errors): what the server answers
-- with {kind, message} is raised as that kind.  Answers without an sbx kind:
-- 401 (bad token), 403 (not allowed to this token), 429 (limits: field
-- retry_after_s) are PolicyDenied with rule "auth", "ownership" or
-- "limits"; 404 for a session is SessionClosed.  Transport failures
-- (connection refused, reset, server gone) are SandboxExecutionError with
-- a reason; nothing waits forever on a dead server.
--
-- Process objects behave like sbx.process's (lines, read, communicate,
-- wait, kill, done; returncode, signal, termination_reason, runtime_ms,
-- backend).  p:kill() resets the run's HTTP/2 stream: the server kills the
-- run (any signal given is reported, but the server always sends SIGKILL).
--
-- Detached runs: s:run(cmd, { detach = true }) returns a process whose
-- p.run_id (32 hex chars) names the run on the server; the run goes on
-- when this client goes (p:kill() or a lost connection only detach it),
-- and s:attach_run(run_id) (from any client of the session) returns a
-- process that gets the output kept meanwhile, then the live output and
-- the exit.  The server keeps up to 1 MiB of events per detached run; when
-- it dropped older ones, p.dropped_events / p.dropped_bytes say how many.

local errors = require "sbx.errors"
local options = require "sbx.options"
local http = require "sbx.remote.http"
local msgpack = require "sbx.remote.msgpack"

local M = {}

local CT = "application/msgpack"
local CONN_KEYS = { endpoint = true, token = true, token_file = true, ca_file = true,
  insecure_tls = true, request_timeout_s = true, upload_chunk_bytes = true }
local UPLOAD_CHUNK = 4 * 1024 * 1024

local Session = {}
Session.__index = Session
local Process = {}
Process.__index = Process

local function transport_error(reason, backend)
  return errors.SandboxExecutionError("remote: " .. tostring(reason), backend, 0)
end

-- An error answer (status, body bytes) as an sbx error table.
local function answer_error(status, body, ctype)
  local t
  if body and body ~= "" and ctype and ctype:match("msgpack") then
    local ok, v = pcall(msgpack.decode, body)
    if ok and type(v) == "table" then t = v end
  end
  t = t or { message = ("HTTP %d"):format(status) }
  local kind, msg = t.kind, tostring(t.message or ("HTTP " .. status))
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

local function read_token_file(path)
  local f, err = io.open(path, "rb")
  if not f then errors.raise(errors.InvalidArgument("token_file", tostring(err))) end
  local line = f:read("*l") or ""
  f:close()
  local tok = line:match("^%s*(%S+)")
  if not tok then errors.raise(errors.InvalidArgument("token_file", path .. ": no token on the first line")) end
  return tok
end

-- conn_of(opts) -> transport state { conn, endpoint, token, timeout_ms }
local function connect(endpoint, token, opts)
  if type(endpoint) ~= "string" then
    errors.raise(errors.InvalidArgument("endpoint", "a string like http://127.0.0.1:7433 expected"))
  end
  if type(token) ~= "string" or token == "" then
    errors.raise(errors.InvalidArgument("token", "a bearer token string expected (or token_file)"))
  end
  if token:find("[\r\n]") then errors.raise(errors.InvalidArgument("token", "contains a line break")) end
  -- Every option is checked before the connection is tried: a bad one is
  -- named, not hidden behind "cannot reach".
  local timeout_s = opts.request_timeout_s or 60
  if type(timeout_s) ~= "number" or timeout_s <= 0 then
    errors.raise(errors.InvalidArgument("request_timeout_s", "a positive number expected"))
  end
  local chunk = opts.upload_chunk_bytes or UPLOAD_CHUNK
  if type(chunk) ~= "number" or chunk < 1 or chunk ~= math.floor(chunk) then
    errors.raise(errors.InvalidArgument("upload_chunk_bytes", "a positive integer expected"))
  end
  local conn, why = http.new(endpoint, { ca_file = opts.ca_file, insecure_tls = opts.insecure_tls })
  if not conn then
    if tostring(why):match("^endpoint") then errors.raise(errors.InvalidArgument("endpoint", why)) end
    errors.raise(transport_error(why))
  end
  return { conn = conn, endpoint = endpoint, token = token, timeout_ms = math.ceil(timeout_s * 1000),
    chunk = chunk }
end

local function headers(tr, extra)
  local h = { "Authorization: Bearer " .. tr.token, "Accept: " .. CT }
  if extra then h[#h + 1] = extra end
  return h
end

-- call(tr, method, path, body_table|nil, raw|nil) -> decoded body (table or raw string)
local function call(tr, method, path, body, raw, backend)
  local payload, ctype
  if body ~= nil then payload, ctype = msgpack.encode(body), "Content-Type: " .. CT
  elseif raw ~= nil then payload, ctype = raw, "Content-Type: application/octet-stream" end
  local status, resp, rct = tr.conn:request(method, path, payload,
    { headers = headers(tr, ctype), timeout_ms = tr.timeout_ms })
  if not status then errors.raise(transport_error(resp, backend)) end
  if status == 0 then errors.raise(transport_error("no HTTP answer", backend)) end
  if status >= 300 then errors.raise(answer_error(status, resp, rct)) end
  if rct and rct:match("msgpack") then
    local ok, v = pcall(msgpack.decode, resp)
    if not ok then errors.raise(transport_error("bad msgpack answer: " .. tostring(v), backend)) end
    return v
  end
  return resp
end

local function wrap(tr, info, is_owner, ref_token)
  -- Upload chunks stay within the server's request body cap.
  if type(info.max_body_bytes) == "number" and info.max_body_bytes >= 1 then
    tr.chunk = math.min(tr.chunk, info.max_body_bytes)
  end
  return setmetatable({
    max_file_bytes = type(info.max_file_bytes) == "number" and info.max_file_bytes or nil,
    name = info.name, id = info.id, created_at = info.created_at, backend = info.backend,
    is_owner = is_owner, endpoint = tr.endpoint, work_dir = nil,
    _tr = tr, _ref_token = ref_token, _closed = false,
  }, Session)
end

-- session(opts) -> owner Session on the server at opts.endpoint.
function M.session(opts)
  if type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("options", "a table with endpoint, token and session options expected"))
  end
  local token = opts.token
  if token == nil and opts.token_file then token = read_token_file(opts.token_file) end
  local tr = connect(opts.endpoint, token, opts)
  local sopts = {}
  for k, v in pairs(opts) do if not CONN_KEYS[k] then sopts[k] = v end end
  local info = call(tr, "POST", "/v1/sessions", sopts)
  if type(info) ~= "table" or type(info.id) ~= "string" then
    errors.raise(transport_error("the server's answer has no session id"))
  end
  return wrap(tr, info, true, info.tokens and info.tokens.reference)
end

-- attach(h, opts) -> reference-mode Session from s:handle() (opts: ca_file, insecure_tls).
function M.attach(h, opts)
  if type(h) ~= "table" or h.kind ~= "sbx.remote" or type(h.id) ~= "string" or type(h.token) ~= "string" then
    errors.raise(errors.InvalidArgument("handle", "a remote session handle (from s:handle()) expected"))
  end
  local tr = connect(h.endpoint, h.token, opts or {})
  local info = call(tr, "GET", "/v1/sessions/" .. h.id)
  return wrap(tr, info, false, nil)
end

Session.__tostring = function(s)
  return ("sbx.remote.session(%s, backend=%s, endpoint=%s%s%s)"):format(s.name, s.backend, s.endpoint,
    s.is_owner and "" or ", reference", s._closed and ", closed" or "")
end

local function live(s)
  if getmetatable(s) ~= Session then
    errors.raise(errors.InvalidArgument("self", "a session expected (use s:method(), not s.method())"))
  end
  if s._closed then errors.raise(errors.SessionClosed(("session %s is closed"):format(s.name))) end
  return s._tr
end

local function spath(s, rest) return "/v1/sessions/" .. s.id .. (rest or "") end

-- ---- processes ----

local function proc_feed(p, chunk, req)
  p._rx = p._rx .. chunk
  if req.status and req.status >= 300 then return end -- an error answer: kept whole
  local pos = 1
  while true do
    local ok, ev, npos = pcall(msgpack.decode, p._rx, pos)
    if not ok then p._protocol_error = tostring(ev) break end
    if ev == nil then break end
    pos = npos
    if type(ev) == "table" then
      if (ev.type == "stdout" or ev.type == "stderr") and type(ev.data) == "string" then
        local q = p._chunks[ev.type]
        q[#q + 1] = ev.data
      elseif ev.type == "exit" or ev.type == "error" then
        p._final = ev
      elseif ev.type == "run" and type(ev.run_id) == "string" then
        p.run_id = ev.run_id
      elseif ev.type == "dropped" then
        p.dropped_events = (p.dropped_events or 0) + (tonumber(ev.events) or 0)
        p.dropped_bytes = (p.dropped_bytes or 0) + (tonumber(ev.bytes) or 0)
      end
    end
  end
  if pos > 1 then p._rx = p._rx:sub(pos) end
end

local function finish(p)
  if p._done then return end
  local ev, r = p._final, p._req
  p._done = true
  if not ev then
    local why = p._protocol_error or (r and r.error) or "the stream ended without an exit event"
    if r and r.status and r.status >= 300 then
      p._error = answer_error(r.status, p._rx, r.content_type)
    else
      p._error = transport_error(why, p.backend)
    end
  elseif ev.type == "error" then
    local kind = errors.KINDS[ev.kind] and ev.kind or "SandboxExecutionError"
    if kind == "SandboxExecutionError" then
      p._error = errors.SandboxExecutionError(ev.message or "the sandbox lost the run", p.backend,
        ev.runtime_ms or 0)
    elseif kind == "InvalidArgument" and tostring(ev.message):match("^cwd ") then
      p._error = errors.InvalidArgument("cwd", tostring(ev.message):sub(5))
    else
      p._error = errors.new(kind, tostring(ev.message), {})
    end
  else
    p.returncode = ev.returncode
    p.runtime_ms = ev.runtime_ms
    p.backend = ev.backend or p.backend
    p.signal = ev.signal
    p.termination_reason = ev.termination_reason or ""
  end
  if p._error then
    p.returncode = -1
    p.termination_reason = "error"
    p.runtime_ms = p.runtime_ms or 0
  end
end

local function raise_stored(p)
  if p._error then errors.raise(p._error) end
end

-- One round of I/O: returns when something arrived or the stream ended.
local function step(p)
  if p._done then return end
  local tr = p._tr
  tr.conn:pump(250)
  -- The final event is the end of the stream, whether or not libcurl has
  -- noticed END_STREAM yet (see sbx.remote.http's complete()).
  if p._final and not p._req.done then tr.conn:finish(p._req) end
  if p._req.done then
    if p._req.status and p._req.status >= 300 and not p._final then
      -- An error answer instead of a stream: the body is {kind, message}.
      p._done = true
      p._error = answer_error(p._req.status, p._rx, p._req.content_type)
      p.returncode, p.termination_reason, p.runtime_ms = -1, "error", 0
      return
    end
    finish(p)
  end
end

local STREAMS = { stdout = true, stderr = true }

local function check_stream(p, stream)
  if stream == nil then return "stdout" end
  if not STREAMS[stream] then
    errors.raise(errors.InvalidArgument("stream", ("\"stdout\" or \"stderr\" expected, got %s"):format(tostring(stream))))
  end
  return stream
end

local function take(p, stream)
  local q = p._chunks[stream]
  if #q == 0 then return nil end
  local s = table.concat(q)
  p._chunks[stream] = {}
  return s
end

function Process:read(stream)
  stream = check_stream(self, stream)
  while true do
    local s = take(self, stream)
    if s then return s end
    if self._done then raise_stored(self) return nil end
    step(self)
  end
end

-- The next output of either stream as it arrives: stream name and data,
-- or nil at the end (the run's error, if any, is raised).
function Process:read_any()
  while true do
    for _, st in ipairs { "stdout", "stderr" } do
      local s = take(self, st)
      if s then return st, s end
    end
    if self._done then raise_stored(self) return nil end
    step(self)
  end
end

function Process:lines(stream)
  stream = check_stream(self, stream)
  local partial, lines, head = "", {}, 1
  return function()
    while true do
      if head <= #lines then
        local l = lines[head]
        lines[head] = nil
        head = head + 1
        return l
      end
      lines, head = {}, 1
      local s = self:read(stream)
      if not s then
        if partial ~= "" then local l = partial partial = "" return l end
        return nil
      end
      partial = partial .. s
      local start = 1
      while true do
        local nl = partial:find("\n", start, true)
        if not nl then break end
        lines[#lines + 1] = partial:sub(start, nl - 1)
        start = nl + 1
      end
      partial = partial:sub(start)
    end
  end
end

function Process:communicate()
  local out, err = {}, {}
  while not self._done do
    step(self)
  end
  raise_stored(self)
  local o, e = take(self, "stdout"), take(self, "stderr")
  return self._capture.stdout and (o or "") or nil, self._capture.stderr and (e or "") or nil
end

function Process:wait()
  while not self._done do
    step(self)
    self._chunks.stdout, self._chunks.stderr = {}, {}
  end
  raise_stored(self)
  return self.returncode
end

function Process:kill(sig)
  if self._done then return false end
  self._tr.conn:cancel(self._req)
  self._done = true
  self.returncode = -9
  self.runtime_ms = 0
  if self.run_id then
    -- A detached run goes on on the server: this client only let go.
    self.termination_reason = "detached"
    return true
  end
  self.signal = 9
  self.termination_reason = "killed"
  local _ = sig
  return true
end

function Process:done()
  if not self._done then self._tr.conn:pump(0) if self._req.done then finish(self) end end
  return self._done
end

Process.__gc = nil

local function start_run(s, cmd, opts)
  local tr = live(s)
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("opts", "a table of run options expected, got " .. type(opts)))
  end
  local body = {}
  for k, v in pairs(opts or {}) do body[k] = v end
  if body.detach ~= nil and type(body.detach) ~= "boolean" then
    errors.raise(errors.InvalidArgument("detach", "a boolean expected, got " .. type(body.detach)))
  end
  -- true/false are the on-device spellings of "pipe"/"null".
  for _, k in ipairs { "stdout", "stderr" } do
    if body[k] == true then body[k] = "pipe" elseif body[k] == false then body[k] = "null" end
  end
  body.cmd = cmd
  local ok, payload = pcall(msgpack.encode, body)
  if not ok then errors.raise(errors.InvalidArgument("opts", payload)) end
  local p = setmetatable({
    cmd = cmd, backend = s.backend, _tr = tr, _rx = "", _done = false,
    _chunks = { stdout = {}, stderr = {} },
    _capture = { stdout = body.stdout == nil or body.stdout == "pipe",
                 stderr = body.stderr == nil or body.stderr == "pipe" },
  }, Process)
  p._req = tr.conn:start("POST", spath(s, "/runs"), payload, {
    headers = headers(tr, "Content-Type: " .. CT),
    on_data = function(chunk, req) proc_feed(p, chunk, req) end,
  })
  -- Validation errors come back at once: raise them from run() itself, as on-device.
  while not p._req.done and p._req.status == nil do tr.conn:pump(250) end
  if p._req.done or (p._req.status and p._req.status >= 300) then
    tr.conn:wait(p._req)
    step(p)
    if p._error and (p._req.status or 0) >= 300 then errors.raise(p._error) end
    if not p._final and p._req.error then errors.raise(transport_error(p._req.error, s.backend)) end
  end
  -- A detached run's first event names it.
  if body.detach then
    while not p.run_id and not p._req.done do tr.conn:pump(250) end
    if not p.run_id then
      step(p)
      raise_stored(p)
      errors.raise(transport_error("the server did not name the detached run", s.backend))
    end
  end
  return p
end

function Session:run(cmd, opts)
  return start_run(self, cmd, opts)
end

-- Re-attach to a detached run of this session (see the top of the file).
function Session:attach_run(run_id)
  local tr = live(self)
  if type(run_id) ~= "string" or not run_id:match("^%x+$") or #run_id > 64 then
    errors.raise(errors.InvalidArgument("run_id", "the run id of a detached run (hex) expected, got "
      .. (type(run_id) == "string" and ("%q"):format(run_id:sub(1, 80)) or type(run_id))))
  end
  local p = setmetatable({
    cmd = nil, backend = self.backend, _tr = tr, _rx = "", _done = false, run_id = run_id,
    _chunks = { stdout = {}, stderr = {} }, _capture = { stdout = true, stderr = true },
  }, Process)
  p._req = tr.conn:start("GET", spath(self, "/runs/" .. run_id), nil, {
    headers = headers(tr),
    on_data = function(chunk, req) proc_feed(p, chunk, req) end,
  })
  while not p._req.done and p._req.status == nil do tr.conn:pump(250) end
  if p._req.done or (p._req.status and p._req.status >= 300) then
    tr.conn:wait(p._req)
    step(p)
    if p._req.status == 404 then
      errors.raise(errors.InvalidArgument("run_id", ("no detached run %s in session %s (ended and read, expired, or never there)")
        :format(run_id, self.id)))
    end
    if p._error and (p._req.status or 0) >= 300 then errors.raise(p._error) end
    if not p._final and p._req.error then errors.raise(transport_error(p._req.error, self.backend)) end
  end
  return p
end

local function exec(s, cmd, opts, check)
  local p = start_run(s, cmd, opts)
  local out, err = p:communicate()
  local res = {
    cmd = cmd, returncode = p.returncode, stdout = out or "", stderr = err or "",
    ok = p.returncode == 0 and p.termination_reason == "", runtime_ms = p.runtime_ms,
    backend = p.backend, termination_reason = p.termination_reason, signal = p.signal,
  }
  if check and not res.ok then errors.raise(errors.SandboxCommandError(cmd, res)) end
  return res
end

function Session:exec(cmd, opts)
  live(self)
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("opts", "a table of run options expected, got " .. type(opts)))
  end
  local o2, check = {}, nil
  for k, v in pairs(opts or {}) do if k == "check" then check = v else o2[k] = v end end
  if check ~= nil and type(check) ~= "boolean" then
    errors.raise(errors.InvalidArgument("check", "a boolean expected, got " .. type(check)))
  end
  return exec(self, cmd, o2, check)
end

function Session:run_code(code, opts)
  live(self)
  return exec(self, code, options.run_code(code, opts), true).stdout
end

local function file_path(path)
  if type(path) ~= "string" then
    errors.raise(errors.InvalidArgument("path", "a string expected, got " .. type(path)))
  end
  if path == "" then errors.raise(errors.InvalidArgument("path", "an empty path")) end
  if path:find("\0", 1, true) then errors.raise(errors.InvalidArgument("path", "contains a NUL byte")) end
  for comp in path:gmatch("[^/]+") do
    if comp == ".." then
      errors.raise(errors.InvalidArgument("path", ("%q: '..' is not allowed; paths stay beneath the work dir"):format(path)))
    end
  end
  return (path:gsub("[^%w%-%._~/]", function(c) return ("%%%02X"):format(c:byte()) end))
end

-- Data up to the chunk size is one PUT.  Larger data is sent as
-- consecutive PUTs ?offset=N of one chunk each (the server appends each
-- only when the file is exactly N bytes long), so neither side holds more
-- than a chunk per request.  A 409 (the file is not the size this upload
-- left it: someone else wrote it meanwhile) is raised, never retried.
function Session:put_bytes(path, data)
  local tr = live(self)
  local p = file_path(path)
  if type(data) ~= "string" then
    errors.raise(errors.InvalidArgument("data", "a string of bytes expected, got " .. type(data)))
  end
  local url = spath(self, "/files/" .. p)
  if #data <= tr.chunk then
    call(tr, "PUT", url, nil, data, self.backend)
    return
  end
  -- Refuse before writing a first chunk the server would keep.
  if self.max_file_bytes and #data > self.max_file_bytes then
    errors.raise(errors.InvalidArgument("data",
      ("%d bytes is over the session's max_file_bytes (%d)"):format(#data, self.max_file_bytes)))
  end
  local off = 0
  while off < #data do
    local piece = data:sub(off + 1, off + tr.chunk)
    local ok, e = pcall(call, tr, "PUT", off == 0 and url or ("%s?offset=%d"):format(url, off),
      nil, piece, self.backend)
    if not ok then
      if type(e) == "table" and e.status == 409 then
        local err = errors.SandboxExecutionError(("remote: put_bytes %s: the chunk at offset %d of %d " ..
          "was refused: the server's file is %s bytes (it changed during the upload)"):format(
          path, off, #data, tostring(e.size)), self.backend, 0)
        err.path, err.offset, err.size = path, off, e.size
        errors.raise(err)
      end
      errors.raise(e)
    end
    off = off + #piece
  end
end

function Session:get_bytes(path)
  local tr = live(self)
  return call(tr, "GET", spath(self, "/files/" .. file_path(path)), nil, nil, self.backend)
end

function Session:handle()
  live(self)
  if not self.is_owner then
    errors.raise(errors.InvalidArgument("self", "handles come from the owner of the session"))
  end
  return { kind = "sbx.remote", endpoint = self.endpoint, id = self.id, name = self.name,
    token = self._ref_token }
end

function Session:alive()
  if self._closed then return false end
  local ok = pcall(call, self._tr, "GET", spath(self))
  return ok
end

-- Owner: DELETE the session.  Reference: close this transport only.
function Session:close()
  if getmetatable(self) ~= Session then
    errors.raise(errors.InvalidArgument("self", "a session expected (use s:close())"))
  end
  if self._closed then return end
  self._closed = true
  local tr = self._tr
  if self.is_owner then
    local ok, e = pcall(call, tr, "DELETE", spath(self))
    tr.conn:close()
    if not ok and not errors.is(e, "SessionClosed") then errors.raise(e) end
    return
  end
  tr.conn:close()
end

M.Session = Session
M.Process = Process

return M

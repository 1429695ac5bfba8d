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
--   local str = tostring(h)                    -- "sbx+remote:<s.url>#<reference token>"
--   local ref2 = sbx.attach(str)               -- the same, from any process
--   local o = remote.lookup{ endpoint =, token =, name = "agent" } -- owner, or nil
--   print(s.url, s.ip)                         -- GET s.url inspects it; the node's IP
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
-- s:run() returns an sbx.process Process (the same object as on-device,
-- over the run's event stream: sbx.remote.stream), so lines, read,
-- read_any, communicate, wait, kill, done, the capture checks, the buffer
-- cap and the exit fields are the on-device ones.  p:kill() resets the
-- run's HTTP/2 stream: the server kills the run (any signal given is
-- checked, but the server always sends SIGKILL: -9, "killed").
--
-- Detached runs: s:run(cmd, { detach = true }) returns a process whose
-- p.run_id (32 hex chars) names the run on the server; the run goes on
-- when this client goes (p:kill() or a lost connection only detach it),
-- and s:attach_run(run_id) (from any client of the session) returns a
-- process that gets the output kept meanwhile, then the live output and
-- the exit.  The server keeps up to 1 MiB of events per detached run; when
-- it dropped older ones, p.dropped_events / p.dropped_bytes say how many.
--
-- Several sbxd nodes (issue 19, sbxd --advertise-url): the session's id
-- names the node holding it (sbx.remote.node).  A session created through
-- a balancer talks to its node directly from then on (s.endpoint, and the
-- handle's endpoint, are that node's); a request that reaches another
-- node is answered 421 with the owner's endpoint, and the call is sent
-- there once, only when that endpoint is the one the id names.  A node
-- that cannot be reached is a SandboxExecutionError naming it
-- ("unreachable"; the node's sessions died with it).

local errors = require "sbx.errors"
local options = require "sbx.options"
local http = require "sbx.remote.http"
local msgpack = require "sbx.remote.msgpack"
local answer = require "sbx.remote.answer"
local stream = require "sbx.remote.stream"
local process = require "sbx.process"
local node = require "sbx.remote.node"
local trust = require "sbx.trust"

local M = {}

local CT = "application/msgpack"
local CONN_KEYS = { endpoint = true, token = true, token_file = true, ca_file = true,
  insecure_tls = true, request_timeout_s = true, upload_chunk_bytes = true }
local UPLOAD_CHUNK = 4 * 1024 * 1024

local Session = {}
Session.__index = Session

local transport_error = answer.transport
local answer_error = answer.http

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
    chunk = chunk, opts = opts }
end

local function headers(tr, extra)
  local h = { "Authorization: Bearer " .. tr.token, "Accept: " .. CT }
  if extra then h[#h + 1] = extra end
  return h
end

-- call(tr, method, path, body_table|nil, raw|nil) -> decoded body (table or raw string)
-- raw: a string, or { data, offset, len } to send that slice of data
-- (an upload chunk, sent without copying it out).
local function call(tr, method, path, body, raw, backend)
  local payload, ctype, off, len
  if body ~= nil then payload, ctype = msgpack.encode(body), "Content-Type: " .. CT
  elseif type(raw) == "table" then
    payload, off, len, ctype = raw[1], raw[2], raw[3], "Content-Type: application/octet-stream"
  elseif raw ~= nil then payload, ctype = raw, "Content-Type: application/octet-stream" end
  local status, resp, rct = tr.conn:request(method, path, payload,
    { headers = headers(tr, ctype), timeout_ms = tr.timeout_ms, body_offset = off, body_len = len })
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

local scall -- call() for a session, following a 421 (below)

-- The session's node (issue 19): the endpoint its id names, when that is
-- not where tr goes.  Unreachable now: tr stays, and the first call's 421
-- says so.
local function to_node(tr, id)
  local _, url = node.split(id)
  if not url or url == tr.endpoint then return tr end
  local ok, ntr = pcall(connect, url, tr.token, tr.opts)
  if not ok then return tr end
  ntr.chunk = tr.chunk
  tr.conn:close()
  return ntr
end

local function wrap(tr, info, is_owner, ref_token)
  -- Upload chunks stay within the server's request body cap.
  if type(info.max_body_bytes) == "number" and info.max_body_bytes >= 1 then
    tr.chunk = math.min(tr.chunk, info.max_body_bytes)
  end
  local _, url = node.split(info.id)
  tr = to_node(tr, info.id)
  local endpoint = url or tr.endpoint
  return setmetatable({
    max_file_bytes = type(info.max_file_bytes) == "number" and info.max_file_bytes or nil,
    name = info.name, id = info.id, created_at = info.created_at, backend = info.backend,
    is_owner = is_owner, endpoint = endpoint, work_dir = nil,
    -- The reference's metadata (issue 17): where GET inspects the session
    -- (built here, so it names the endpoint this client reaches), and the
    -- node's IP as the server knows it (nil: only a name or a socket).
    url = endpoint .. "/v1/sessions/" .. info.id, ip = type(info.ip) == "string" and info.ip or nil,
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
  -- CA files are the client's: read here, sent as PEM text.
  if sopts.ca_certs ~= nil then sopts.ca_certs = trust.check(sopts.ca_certs, true) end
  local info = call(tr, "POST", "/v1/sessions", sopts)
  if type(info) ~= "table" or type(info.id) ~= "string" then
    errors.raise(transport_error("the server's answer has no session id"))
  end
  return wrap(tr, info, true, info.tokens and info.tokens.reference)
end

-- A handle as a string (tostring(s:handle())): "sbx+remote:" .. the
-- session's url .. "#" .. its reference token.  It holds the token: a
-- secret, as the handle table is.
local HANDLE_PREFIX = "sbx+remote:"
local Handle = {}
Handle.__index = Handle
Handle.__tostring = function(h)
  return ("%s%s/v1/sessions/%s#%s"):format(HANDLE_PREFIX, h.endpoint, h.id, h.token)
end

-- The handle table of a handle string; raises InvalidArgument.
function M.parse_handle(str)
  local endpoint, id, token = str:match("^sbx%+remote:(.+)/v1/sessions/([%w%.%-_]+)#(sbxr_%x+_%x+)$")
  if not endpoint then
    errors.raise(errors.InvalidArgument("handle", ("%q is not a remote session handle " ..
      "(expected sbx+remote:ENDPOINT/v1/sessions/ID#TOKEN, from tostring(s:handle()))"):format(str:sub(1, 80))))
  end
  return setmetatable({ kind = "sbx.remote", endpoint = endpoint, id = id, token = token }, Handle)
end

function M.is_handle_string(v)
  return type(v) == "string" and v:sub(1, #HANDLE_PREFIX) == HANDLE_PREFIX
end

-- attach(h, opts) -> reference-mode Session from s:handle() or its string
-- (opts: ca_file, insecure_tls).
function M.attach(h, opts)
  if type(h) == "string" then h = M.parse_handle(h) end
  if type(h) ~= "table" or h.kind ~= "sbx.remote" or type(h.id) ~= "string" or type(h.token) ~= "string" then
    errors.raise(errors.InvalidArgument("handle", "a remote session handle (from s:handle()) expected"))
  end
  local tr = connect(h.endpoint, h.token, opts or {})
  -- A handle whose endpoint is not the session's node (a balancer's, an
  -- old one): the node's 421 is followed once, to the node the id names.
  local probe = setmetatable({ id = h.id, name = h.name or h.id, _tr = tr }, Session)
  local info = scall(probe, "GET", "/v1/sessions/" .. h.id)
  return wrap(probe._tr, info, false, nil)
end

-- lookup(opts) -> the owner Session named opts.name among the token's
-- open sessions (GET /v1/sessions?name=), or with opts.id the one of that
-- id (GET /v1/sessions/ID: E2B's connect(sandbox_id)), or nil, why.
-- opts: the connection options and name or id.
function M.lookup(opts)
  if type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("options", "a table with endpoint, token and name (or id) expected"))
  end
  local by_id = opts.id ~= nil
  if by_id then
    if type(opts.id) ~= "string" or not opts.id:match("^%x+$") or opts.name ~= nil then
      errors.raise(errors.InvalidArgument("id", "the session's id (hex digits) expected, and no name with it"))
    end
  elseif type(opts.name) ~= "string" or opts.name == "" then
    errors.raise(errors.InvalidArgument("name", "the session's name (a non-empty string) expected"))
  end
  for k in pairs(opts) do
    if not CONN_KEYS[k] and k ~= "name" and k ~= "id" then
      errors.raise(errors.InvalidArgument(tostring(k), ("unknown option %q for lookup (connection " ..
        "options and name or id only)"):format(tostring(k))))
    end
  end
  local token = opts.token
  if token == nil and opts.token_file then token = read_token_file(opts.token_file) end
  local tr = connect(opts.endpoint, token, opts)
  local path
  if by_id then
    path = "/v1/sessions/" .. opts.id
  else
    path = "/v1/sessions?name=" .. opts.name:gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end)
  end
  local ok, got = pcall(call, tr, "GET", path)
  if not ok then
    tr.conn:close()
    -- An id that is not (or no longer) the token's: nil, why, as for a name.
    if by_id and type(got) == "table" and got.kind == "SessionClosed" then return nil, got.message end
    error(got, 0)
  end
  local info = type(got) == "table" and (by_id and got or type(got.sessions) == "table" and got.sessions[1])
  if not info or (by_id and not info.is_owner) then
    tr.conn:close()
    return nil, by_id and ("no open session with id %s"):format(opts.id)
      or ("no open session named %q"):format(opts.name)
  end
  return wrap(tr, info, true, info.tokens and info.tokens.reference)
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

-- A 421 for s (another node holds it): switch s to the node its id
-- names, when the answer names that one too.  -> true to retry once.
local function follow(s, e)
  if type(e) ~= "table" or e.status ~= 421 then return false end
  local _, url = node.split(s.id)
  if not url or e.endpoint ~= url then return false end
  local ok, ntr = pcall(connect, url, s._tr.token, s._tr.opts)
  if not ok then
    errors.raise(transport_error(("the node at %s holding session %s is unreachable: %s"):format(
      url, s.name, tostring(type(ntr) == "table" and ntr.message or ntr)), s.backend))
  end
  ntr.chunk = s._tr.chunk
  s._tr.conn:close()
  s._tr, s.endpoint = ntr, url
  return true
end

-- A transport failure of a session on a named node says which node.
local function unreachable(s, e)
  local _, url = node.split(s.id)
  if url and type(e) == "table" and e.kind == "SandboxExecutionError" and e.status == nil
    and tostring(e.message):match("^remote: ") then
    e.message = ("remote: the node at %s holding session %s is unreachable: %s"):format(
      url, s.name, e.message:sub(9))
    e.reason, e.node = e.message, url
  end
  return e
end

-- call() for session s on its node: one 421 is followed.
function scall(s, method, path, body, raw, backend)
  local ok, r = pcall(call, s._tr, method, path, body, raw, backend)
  if ok then return r end
  if follow(s, r) then
    ok, r = pcall(call, s._tr, method, path, body, raw, backend)
    if ok then return r end
  end
  error(unreachable(s, r), 0)
end

-- stream.start() for session s on its node: one 421 is followed.
local function sstart(s, method, path, payload, o)
  local src, err, status = stream.start(s._tr.conn, method, path, payload, o)
  if not src and follow(s, err) then
    src, err, status = stream.start(s._tr.conn, method, path, payload, o)
  end
  return src, src == nil and unreachable(s, err) or err, status
end

-- ---- processes: sbx.process over the run's event stream ----

local core_ok, core = pcall(require, "sbx.core")

-- The Process of a started stream; what the stream announced so far
-- (run_id, dropped_*) becomes its fields, and later announcements too.
local function process_of(src, s, cmd, modes)
  local p = process.from_source(src, { cmd = cmd, backend = s.backend, stdout = modes.stdout,
    stderr = modes.stderr, core = core_ok and core or nil, stdin_live = modes.stdin_live,
    pty = modes.pty })
  for k, v in pairs(src.meta) do p[k] = v end
  src.meta = p
  return p
end

-- The control routes of an interactive run (sbx.remote.stream):
-- control(run_id, what, body) -> status, decoded answer.
local function control_of(s, tr)
  return function(run_id, what, cbody)
    local st, resp, rct = tr.conn:request("POST", spath(s, "/runs/" .. run_id .. "/" .. what),
      msgpack.encode(cbody), { headers = headers(tr, "Content-Type: " .. CT), timeout_ms = tr.timeout_ms })
    local v = resp
    if st and rct and rct:match("msgpack") then
      local okd, dec = pcall(msgpack.decode, resp)
      v = okd and dec or nil
    end
    return st, v
  end
end

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
  -- true/false are the on-device spellings of "pipe"/"null" (and capture
  -- is the default, as on-device).
  local modes = {}
  for _, k in ipairs { "stdout", "stderr" } do
    if body[k] == true then body[k] = "pipe" elseif body[k] == false then body[k] = "null" end
    modes[k] = body[k] == nil and "pipe" or body[k]
  end
  -- A terminal has one output stream; stdin of a pty run is live.
  if body.pty ~= nil and body.pty ~= false then modes.stderr, modes.pty = "null", true end
  modes.stdin_live = modes.pty or body.stdin == true
  body.cmd = cmd
  local ok, payload = pcall(msgpack.encode, body)
  if not ok then errors.raise(errors.InvalidArgument("opts", payload)) end
  -- A run blocked by backpressure is surely over (SIGKILL 2 s after its
  -- timeout's SIGTERM) a little after this; see sbx.remote.stream.
  local t = tonumber(body.timeout_s)
  local deadline = t and core_ok and (core.monotonic_ms() + t * 1000 + 5000) or nil
  local src, err = sstart(s, "POST", spath(s, "/runs"), payload, {
    headers = headers(tr, "Content-Type: " .. CT), backend = s.backend, deadline_ms = deadline,
    detach = body.detach, named = modes.stdin_live,
    control = control_of(s, tr),
  })
  if not src then errors.raise(err) end
  return process_of(src, s, cmd, modes)
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
  local src, err, status = sstart(self, "GET", spath(self, "/runs/" .. run_id), nil,
    { headers = headers(tr), backend = self.backend })
  if not src then
    if status == 404 then
      errors.raise(errors.InvalidArgument("run_id",
        ("no detached run %s in session %s (ended and read, expired, or never there)"):format(run_id, self.id)))
    end
    errors.raise(err)
  end
  src.meta.run_id = run_id
  -- An interactive run takes stdin, resizes and signals from here too
  -- (the server answers 404 for a run without live stdin).
  src.control, src.stdin_off = control_of(self, tr), nil
  return process_of(src, self, nil, { stdout = "pipe", stderr = "pipe", stdin_live = true })
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
      errors.raise(errors.InvalidArgument("path",
        ("%q: '..' is not allowed; paths stay beneath the work dir"):format(path)))
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
    scall(self, "PUT", url, nil, data, self.backend)
    return
  end
  -- Refuse before writing a first chunk the server would keep.
  if self.max_file_bytes and #data > self.max_file_bytes then
    errors.raise(errors.InvalidArgument("data",
      ("%d bytes is over the session's max_file_bytes (%d)"):format(#data, self.max_file_bytes)))
  end
  local off = 0
  while off < #data do
    local n = math.min(tr.chunk, #data - off)
    local ok, e = pcall(scall, self, "PUT", off == 0 and url or ("%s?offset=%d"):format(url, off),
      nil, { data, off, n }, self.backend)
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
    off = off + n
  end
end

function Session:get_bytes(path)
  live(self)
  return scall(self, "GET", spath(self, "/files/" .. file_path(path)), nil, nil, self.backend)
end

function Session:handle()
  live(self)
  if not self.is_owner then
    errors.raise(errors.InvalidArgument("self", "handles come from the owner of the session"))
  end
  return setmetatable({ kind = "sbx.remote", endpoint = self.endpoint, id = self.id, name = self.name,
    token = self._ref_token }, Handle)
end

function Session:alive()
  if self._closed then return false end
  local ok = pcall(scall, self, "GET", spath(self))
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
    local ok, e = pcall(scall, self, "DELETE", spath(self))
    self._tr.conn:close()
    if not ok and not errors.is(e, "SessionClosed") then errors.raise(e) end
    return
  end
  tr.conn:close()
end

M.Session = Session

return M

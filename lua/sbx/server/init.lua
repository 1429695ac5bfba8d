-- sbx.server: the Lua orchestration layer of sbxd (the HTTP/2 remote API).
--
-- sbxd's C side authenticates (bearer token -> tenant), decodes bodies and
-- streams runs; this module decides everything else, with the same
-- sbx.session / sbx.options / sbx.policy code on-device use goes through:
--
--   M.init(cfg)       cfg = { policy, max_sessions, max_runs, hard_ceiling_s,
--                     idle_timeout_s (0: no idle reaping), max_body (sbxd's
--                     --max-body), file_append (src/server/fileput.c),
--                     file_io (src/server/fileio.c), hooks (post, wait:
--                     the policy worker, src/server/hooks.c),
--                     advertise_url (sbxd's --advertise-url: session ids
--                     name this node, sbx.remote.node; sessions of other
--                     nodes are 421 with their endpoint) }
--   M.handle(req)     req = { method, path, query (raw, after '?'), tenant |
--                     ref_token, body (decoded table), raw (the body bytes),
--                     format }
--                     -> { status, body | raw, headers, log } or
--                        { stream = { start, finish, backend, session_id } }
--   M.tick()          once a second: reap sessions past their lifetime
--   M.stats()         { sessions_open, policy_denials }
--   M.shutdown()      close every session
--   M.reload_policy() re-read the policy file (SIGHUP and the admin route);
--                     -> true, generation | nil, why (the old policy stays)
--   M.hook_answer(id, answer)  an answer of the policy worker no request
--                     waits for (src/server/task.c): a proxy verdict
--
-- One policy engine serves every session: a reload applies to sessions
-- opened after it, and to open sessions too when the new policy says
-- reapply = true (sbx.policy's rules).  POST /v1/admin/reload-policy does
-- the reload for the tenant named by --admin-tenant, and is 403 for anyone
-- else (and for everyone when no admin tenant is configured).
--
-- The loop never waits (issue 14): handle(req) runs as a coroutine that
-- src/server/task.c resumes.  Where it would block it yields instead:
-- wait_fd (a session's sandbox setting up, a warm run on offer) and the
-- policy's hooks, which run on sbxd's policy worker thread
-- (sbx.server.hookworker, src/server/hooks.c) and are waited for the same
-- way.  A client that goes away while its request waits gets its half-done
-- work undone (a session still setting up is closed).  Hooks called off
-- any request (the proxy's on_connect, on_close from the reaper) are
-- posted to the same worker, so every hook of a policy runs in one Lua
-- state, one at a time: on_close without waiting, on_connect waiting on
-- the loop's thread (the proxy's decide cannot yield).
--
-- Sessions are used only through sbx.session's host API (limits,
-- admit_run, warm_fd, start_run, open_file, is_closed: see its header).
-- Answers are chosen by an error's kind and code (its fields), never by
-- its message text: STATUS and open_error below are the whole mapping.
--
-- Tenancy: a session belongs to the tenant that created it; another tenant
-- gets 404 for it, exactly as for an id that does not exist.  A session's
-- reference token ("sbxr_<id>_<secret>", from the create answer) can run,
-- put and get in that session only; DELETE with it is 403.
-- Limits: open sessions and concurrent runs per tenant; over them: 429
-- with Retry-After.  Session lifetime: the session's timeout_s (the soft
-- timeout, policy default 1 h, enforced by the core) and the server's hard
-- ceiling (default 24 h) from creation, enforced by tick(); the idle
-- reaper closes a session nobody used (no request, no run) for
-- idle_timeout_s (default 1 h).

local bit = require "bit"
local errors = require "sbx.errors"
local options = require "sbx.options"
local policy = require "sbx.policy"
local session = require "sbx.session"
local node = require "sbx.remote.node"
local podlimits = require "sbx.server.podlimits"

local M = {}

local cfg = {}
local sessions = {}      -- id -> record
local tenants = {}       -- tenant -> { sessions = n, runs = n }
local counters = { policy_denials = 0 }
local proxy_host -- below: serves allowlist sessions' proxies on our loop

-- Session options a remote client may not set: they name host paths or
-- files of the server (the policy is the server's).
local SERVER_ONLY = { policy = true, work_dir = true, state_dir = true, warm_runs = true,
  proxy_host = true }

local ARRAY = { __array = true }
local function array(t) return setmetatable(t, ARRAY) end

local function now_ms()
  local ok, core = pcall(require, "sbx.core")
  if ok and core.monotonic_ms then return core.monotonic_ms() end
  return os.time() * 1000
end

-- The coroutines src/server/task.c runs handle(req) in: only they may
-- yield to the loop.
local request_cos = setmetatable({}, { __mode = "k" })
local function in_request()
  local co = coroutine.running()
  return co ~= nil and request_cos[co] == true
end

-- wait_fd(fd, deadline_ms) -> true | nil, "timeout" | "cancelled": until
-- fd is readable, the loop serving everyone else meanwhile; with fd nil,
-- until the loop has had a turn (before a costly step: task.c).
local function wait_fd(fd, deadline_ms)
  if not in_request() then return nil, "not inside a request" end
  if fd == nil then return coroutine.yield("turn", 0, deadline_ms) end
  return coroutine.yield("fd", fd, deadline_ms)
end

-- How long past a hook's own deadline we wait for the worker's answer
-- (hooks run one at a time: others may be ahead in the queue).
local WORKER_SLACK_MS = 10000
local worker_loaded = {} -- generation -> true once its load is posted

-- The policy engine's hook_runner (sbx.policy): the hook runs on the
-- worker; the result comes back in run_hook's shape.  Whatever goes wrong
-- with the worker is an error of the hook: it denies.
-- The worker compiles each generation from the text the loop compiled,
-- once, before anything asks it about that generation (messages are
-- handled in order).
local function ensure_loaded(gen)
  local n = gen.generation
  if not worker_loaded[n] then
    cfg.hooks.post({ op = "load", generation = n, path = gen.file, source = gen.source }, true)
    worker_loaded[n] = true
  end
  return n
end

local function hook_runner(gen, hook, ...)
  local hooks = cfg.hooks
  local n = ensure_loaded(gen)
  local msg = { op = "call", generation = n, hook = hook, args = { ... }, nargs = select("#", ...) }
  if hook == "on_close" then
    hooks.post(msg, true)
    return { n = 2, true, true }
  end
  local budget = gen.limits.ms + WORKER_SLACK_MS
  local id = hooks.post(msg)
  local rep, why
  if in_request() then
    rep, why = coroutine.yield("job", id, now_ms() + budget)
  else
    rep, why = hooks.wait(id, budget)
  end
  if not rep then return { n = 2, false, ("the policy worker did not answer (%s)"):format(tostring(why)) } end
  if rep.err then return { n = 2, false, tostring(rep.err) } end
  if rep.exceeded then return { n = 2, false, tostring(rep.v), exceeded = true } end
  return { n = rep.n or 2, rep.ok == true, rep.v, rep.r }
end

local function random_hex(nbytes)
  local f = assert(io.open("/dev/urandom", "rb"))
  local bytes = f:read(nbytes)
  f:close()
  assert(bytes and #bytes == nbytes, "short read from /dev/urandom")
  return (bytes:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end

-- Equality whose time depends only on the lengths.
local function ct_equal(a, b)
  if type(a) ~= "string" or type(b) ~= "string" then return false end
  local diff = #a == #b and 0 or 1
  local n = math.min(#a, #b)
  for i = 1, n do diff = bit.bor(diff, bit.bxor(a:byte(i), b:byte(i))) end
  return diff == 0
end

local function tenant_rec(t)
  local r = tenants[t]
  if not r then r = { sessions = 0, runs = 0 } tenants[t] = r end
  return r
end

local function reply(status, body, extra)
  local r = { status = status, body = body }
  if extra then for k, v in pairs(extra) do r[k] = v end end
  return r
end

local function fail(status, kind, message, fields)
  local body = { kind = kind, message = message }
  if fields then for k, v in pairs(fields) do body[k] = v end end
  return reply(status, body)
end

local STATUS = {
  InvalidArgument = 400, PolicyDenied = 403, BackendUnavailable = 503,
  SessionClosed = 410, SandboxExecutionError = 500, SandboxCommandError = 500,
}

-- An sbx error (or any Lua error) as an answer.
local function from_error(e)
  if type(e) ~= "table" or not e.kind then
    io.stderr:write("sbxd: internal error: ", tostring(e), "\n")
    return fail(500, "SandboxExecutionError", "internal error in the server", { reason = "internal error" })
  end
  if e.kind == "PolicyDenied" then counters.policy_denials = counters.policy_denials + 1 end
  local body = {}
  for k, v in pairs(e) do
    if type(v) == "string" or type(v) == "number" or type(v) == "boolean" then body[k] = v end
  end
  return reply(STATUS[e.kind] or 500, body)
end

local function describe(rec, owner, req)
  local s = rec.s
  local d = {
    id = node.public_id(s.id, cfg.advertise), name = s.name, created_at = s.created_at, backend = s.backend,
    endpoint = cfg.advertise or (req and req.endpoint) or cfg.endpoint, is_owner = owner, timeout_s = rec.timeout_s,
    runs_active = rec.runs,
    -- What a client needs to chunk uploads: no file over max_file_bytes,
    -- no request body over max_body_bytes (sbxd's --max-body).
    max_file_bytes = rec.limits.max_file_bytes, max_body_bytes = cfg.max_body,
  }
  if owner then d.tokens = { reference = rec.ref_token } end
  return d
end

-- The session record the caller may touch, or nil and an answer.
-- owner_only: reference tokens get 403.
local function lookup_rec(req, id, owner_only)
  local rec = sessions[id]
  if req.tenant then
    if not rec or rec.tenant ~= req.tenant then
      return nil, fail(404, "NotFound", ("no session %s"):format(id))
    end
    return rec, nil, true
  end
  -- A reference token: sbxr_<id>_<secret>, valid for its own session only.
  local tid = type(req.ref_token) == "string" and req.ref_token:match("^sbxr_(%x+)_%x+$")
  local trec = tid and sessions[tid]
  if not trec or not ct_equal(req.ref_token, trec.ref_token) then
    return nil, fail(401, "Unauthorized", "unknown token")
  end
  if tid ~= id then return nil, fail(404, "NotFound", ("no session %s"):format(id)) end
  if owner_only then
    return nil, fail(403, "Forbidden", "a session reference cannot do this; only the owner can")
  end
  return rec, nil, false
end

local function lookup(req, id, owner_only)
  local rec, err, owner = lookup_rec(req, id, owner_only)
  if rec then rec.last_ms = now_ms() end
  return rec, err, owner
end

local function close_rec(rec, why)
  if rec.closed then return end
  rec.closed = true
  sessions[rec.s.id] = nil
  local t = tenant_rec(rec.tenant)
  t.sessions = t.sessions - 1
  local ok, e = pcall(rec.s.close, rec.s)
  io.stderr:write(("ts=- level=info event=session_close session=%s tenant=%s why=%s%s\n"):format(
    rec.s.id, rec.tenant, why, ok and "" or (" err=%q"):format(tostring(e))))
end

local function too_many(what, limit)
  return fail(429, "TooManyRequests", ("%s: the limit is %d"):format(what, limit),
    { retry_after_s = 1 }), { ["retry-after"] = "1" }
end

local function create_session(req)
  if not req.tenant then
    return fail(403, "Forbidden", "a session reference cannot open sessions")
  end
  local body = req.body
  if body == nil then body = {} end
  if type(body) ~= "table" or body[1] ~= nil then
    return from_error(errors.InvalidArgument("body", "a map of session options expected"))
  end
  for k in pairs(body) do
    if type(k) ~= "string" then
      return from_error(errors.InvalidArgument("body", "option names must be strings"))
    end
    if SERVER_ONLY[k] then
      return from_error(errors.InvalidArgument(k, ("%s is set by the server, not over the remote API"):format(k)))
    end
  end
  local t = tenant_rec(req.tenant)
  if t.sessions >= cfg.max_sessions then
    local r, h = too_many("open sessions of tenant " .. req.tenant, cfg.max_sessions)
    r.headers = h
    return r
  end
  local opts = {}
  for k, v in pairs(body) do opts[k] = v end
  opts.policy = cfg.engine
  opts.warm_runs = cfg.warm_runs
  opts.proxy_host = proxy_host
  opts.wait = wait_fd
  opts.caller = { origin = "sbxd", tenant = req.tenant }
  -- The slot is taken before the open waits: opens of one tenant that
  -- wait together must not all pass the check above.
  t.sessions = t.sessions + 1
  local ok, s = pcall(session.open, opts)
  if not ok then
    t.sessions = t.sessions - 1
    return from_error(s)
  end
  local limits = s:limits()
  local rec = {
    s = s, tenant = req.tenant, ref_token = ("sbxr_%s_%s"):format(s.id, random_hex(16)),
    created_ms = now_ms(), last_ms = now_ms(), runs = 0, timeout_s = limits.timeout_s,
    limits = limits,
  }
  rec.hard_deadline_ms = rec.created_ms + cfg.hard_ceiling_s * 1000
  sessions[s.id] = rec
  return reply(201, describe(rec, true, req), { log = "session=" .. s.id })
end

local function list_sessions(req)
  if not req.tenant then return fail(403, "Forbidden", "a session reference cannot list sessions") end
  local out = array {}
  for _, rec in pairs(sessions) do
    if rec.tenant == req.tenant then out[#out + 1] = describe(rec, true, req) end
  end
  table.sort(out, function(a, b) return a.id < b.id end)
  return reply(200, { sessions = out })
end

local RUN_BODY_KEYS = { cmd = true, detach = true }
for _, k in ipairs(options.RUN_KEYS) do RUN_BODY_KEYS[k] = true end

local function start_run(req, rec)
  local body = req.body
  if type(body) ~= "table" or body[1] ~= nil then
    return from_error(errors.InvalidArgument("body", "a map with cmd and run options expected"))
  end
  for k in pairs(body) do
    if type(k) ~= "string" then
      return from_error(errors.InvalidArgument("body", "option names must be strings"))
    end
    if not RUN_BODY_KEYS[k] then
      return from_error(errors.InvalidArgument(tostring(k), ("unknown run option %q"):format(tostring(k))))
    end
  end
  if body.cmd == nil then return from_error(errors.InvalidArgument("cmd", "cmd is required")) end
  -- detach = true: the run outlives its client and can be re-attached
  -- by its run id (src/server/runs_registry.c keeps it).
  if body.detach ~= nil and type(body.detach) ~= "boolean" then
    return from_error(errors.InvalidArgument("detach", "a boolean expected, got " .. type(body.detach)))
  end
  local opts = {}
  for k, v in pairs(body) do if k ~= "cmd" and k ~= "detach" then opts[k] = v end end
  if opts.stdout == nil then opts.stdout = "pipe" end
  if opts.stderr == nil and not opts.pty then opts.stderr = "pipe" end
  if opts.stdout == "inherit" or opts.stderr == "inherit" then
    return from_error(errors.InvalidArgument(opts.stdout == "inherit" and "stdout" or "stderr",
      "\"inherit\" has no meaning over the remote API"))
  end
  local s = rec.s
  if s:is_closed() then return fail(410, "SessionClosed", ("session %s is closed"):format(s.name)) end
  -- The same admission as on-device runs: options, ceilings and the
  -- policy's on_run hook (a denial is a PolicyDenied answer, not a run).
  local ok, o = pcall(s.admit_run, s, body.cmd, opts)
  if not ok then return from_error(o) end
  -- The first run of a session waits for the sandbox's first warm run:
  -- on the loop, not in the core.
  local fd = s:warm_fd(o)
  if fd then
    local core = require "sbx.core"
    local ready, why = wait_fd(fd, now_ms() + core.SESSION_READY_TIMEOUT_MS)
    if not ready then
      return from_error(errors.SandboxExecutionError(("no warm run of session %s came (%s)")
        :format(s.name, tostring(why)), s.backend, 0))
    end
    if s:is_closed() then return fail(410, "SessionClosed", ("session %s is closed"):format(s.name)) end
  end
  local t = tenant_rec(rec.tenant)
  if t.runs >= cfg.max_runs then
    local r, h = too_many("concurrent runs of tenant " .. rec.tenant, cfg.max_runs)
    r.headers = h
    return r
  end
  t.runs = t.runs + 1
  rec.runs = rec.runs + 1
  local finished = false
  -- An interactive run (live stdin or a pty) is named, so that the
  -- control routes (run_control) can reach it while its output streams.
  local run_id = o.stdin_live and random_hex(16) or nil
  return { stream = {
    backend = s.backend,
    session_id = s.id,
    detach = body.detach == true,
    run_id = run_id,
    start = function()
      local r, err = s:start_run(o)
      if r and run_id then
        rec.live = rec.live or {}
        rec.live[run_id] = { run = r, offset = 0, pty = o.pty_rows ~= nil }
      end
      return r, err
    end,
    finish = function()
      if finished then return end
      finished = true
      if run_id and rec.live then rec.live[run_id] = nil end
      rec.last_ms = now_ms()
      t.runs = t.runs - 1
      rec.runs = rec.runs - 1
    end,
  } }
end

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
local function run_control(req, rec, run_id, what)
  local ent = rec.live and rec.live[run_id]
  if not ent then
    return fail(404, "NotFound", ("no interactive run %s in session %s (ended, or not started with stdin = true or pty)")
      :format(run_id, rec.s.id))
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
    local n, kind, msg = r:write(skip == 0 and data or data:sub(skip + 1))
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

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- The query of PUT .../files/{path}: only offset=N (a decimal integer,
-- at most once).  -> offset (0 when absent) | nil, answer.
local MAX_OFFSET_DIGITS = 15 -- below 2^53: exact as a Lua number
local function put_offset(query)
  local offset
  for part in (query or ""):gmatch("[^&]+") do
    local k, v = part:match("^([^=]*)=?(.*)$")
    k = unescape(k)
    if k ~= "offset" then
      return nil, from_error(errors.InvalidArgument(k:sub(1, 64),
        ("unknown query parameter %q (PUT files takes only offset)"):format(k:sub(1, 64))))
    end
    if offset then
      return nil, from_error(errors.InvalidArgument("offset", "given more than once"))
    end
    v = unescape(v)
    if not v:match("^%d+$") then
      return nil, from_error(errors.InvalidArgument("offset",
        ("%q is not a decimal integer >= 0"):format(v:sub(1, 64))))
    end
    if #v:match("^0*(.-)$") > MAX_OFFSET_DIGITS then
      return nil, from_error(errors.InvalidArgument("offset",
        ("%s is out of range (at most %d digits)"):format(v:sub(1, 64), MAX_OFFSET_DIGITS)))
    end
    offset = tonumber(v)
  end
  return offset or 0
end

local function over_max_file(limits, bytes)
  return fail(413, "InvalidArgument", ("%d bytes is over the session's max_file_bytes (%d)"):format(
    bytes, limits.max_file_bytes), { option = "data" })
end

-- The status of an error of Session:open_file by its code (sbx.errors):
-- too large 413, missing 404; others by kind.
local OPEN_STATUS = { too_large = 413, not_found = 404 }

-- An error of Session:open_file as an answer (conflict: a missing file of
-- an append is 409 with size 0).
local function open_error(e, conflict)
  local status = type(e) == "table" and e.kind == "InvalidArgument" and OPEN_STATUS[e.code]
  if status == 404 and conflict then return conflict(0, tostring(e.message)) end
  local r = from_error(e)
  if status then r.status = status end
  return r
end

-- The writes of uploads run on threads of their own (src/server/fileio.c);
-- the handler waits for each on the loop.  A write outlasting this is
-- reported as failed (it still ends on its thread).
local FILE_IO_TIMEOUT_MS = 120000

local function finish_job(job, what)
  local ok, why = wait_fd(job:fd(), now_ms() + FILE_IO_TIMEOUT_MS)
  if not ok then return nil, "SandboxExecutionError", ("the %s did not finish (%s)"):format(what, tostring(why)) end
  return job:result()
end

-- Session:put_bytes's writer in sbxd.
local function put_off_loop(cs, rel, data, max_bytes)
  local job, kind, msg = cfg.file_io.put(cs, rel, data, max_bytes)
  if not job then return nil, kind, msg end
  return finish_job(job, "write")
end

-- PUT with offset N > 0: append the body to the file whose size is N
-- (src/server/fileput.c); any other size is 409 with the current size.
local function append(rec, path, offset, data)
  local function conflict(size, why)
    return fail(409, "Conflict", ("%s: cannot append at offset %d: %s"):format(path, offset, why),
      { path = path, offset = offset, size = size })
  end
  if offset + #data > rec.limits.max_file_bytes then return over_max_file(rec.limits, offset + #data) end
  local ok, fd = pcall(rec.s.open_file, rec.s, path)
  if not ok then return open_error(fd, conflict) end
  local job, jkind, jmsg = cfg.file_io.append(fd, offset, data)
  local done, kind, msg, size
  if job then
    done, kind, msg, size = finish_job(job, "append")
  else
    kind, msg = jkind, jmsg
  end
  if done then return reply(200, { path = path, size = kind, offset = offset }) end
  if kind == "Conflict" then return conflict(size, msg) end
  return from_error(kind == "InvalidArgument" and errors.InvalidArgument("path", msg)
    or errors.from_core(kind, msg))
end

local function file_op(req, rec, path)
  path = unescape(path)
  if req.method == "PUT" then
    local offset, bad = put_offset(req.query)
    if not offset then return bad end
    local data = req.raw or ""
    if offset > 0 then return append(rec, path, offset, data) end
    if #data > rec.limits.max_file_bytes then return over_max_file(rec.limits, #data) end
    local ok, e = pcall(rec.s.put_bytes, rec.s, path, data, put_off_loop)
    if not ok then return from_error(e) end
    return reply(200, { path = path, size = #data, offset = 0 })
  end
  -- GET streams the file from an fd (handler.c), never holding it whole;
  -- HEAD answers its size only.
  local ok, data, size = pcall(rec.s.open_file, rec.s, path)
  if not ok then return open_error(data) end
  return { status = 200, file = { fd = data, size = size } }
end

-- The pod's ceilings (sbx.server.podlimits) on a generation just loaded.
local function pod_ceilings(gen)
  local changes = podlimits.apply(gen, cfg.pod_ceilings)
  if #changes > 0 then
    io.stderr:write(("sbxd: event=ceilings_from_pod generation=%d %s\n")
      :format(gen.generation or 0, table.concat(changes, " ")))
  end
end

function M.reload_policy()
  local ok, why = cfg.engine:reload()
  if ok then
    pod_ceilings(cfg.engine.current)
    io.stderr:write(("sbxd: event=policy_reload ok=true generation=%d policy=%s\n")
      :format(cfg.engine.generation or 0, tostring(cfg.policy)))
    return true, cfg.engine.generation
  end
  io.stderr:write(("sbxd: event=policy_reload ok=false kept=previous why=%q\n"):format(tostring(why)))
  return nil, why
end

local function admin_reload(req)
  if not cfg.admin_tenant or req.tenant ~= cfg.admin_tenant then
    return fail(403, "Forbidden", "only the admin tenant may reload the policy")
  end
  local ok, why = M.reload_policy()
  if not ok then
    return fail(422, "PolicyDenied", "the new policy did not load; the previous one stays: " .. tostring(why))
  end
  return reply(200, { reloaded = true, generation = why })
end

function M.handle(req)
  local co = coroutine.running()
  if co then request_cos[co] = true end
  local path, method = req.path, req.method
  if path == "/v1/admin/reload-policy" then
    if method ~= "POST" then return fail(405, "MethodNotAllowed", method .. " " .. path) end
    return admin_reload(req)
  end
  if path == "/v1/sessions" then
    if method == "POST" then return create_session(req) end
    if method == "GET" then return list_sessions(req) end
    return fail(405, "MethodNotAllowed", method .. " " .. path)
  end
  local pid, rest = path:match("^/v1/sessions/([^/]+)(.*)$")
  local id, owner_url = node.split(pid)
  if not id then return fail(404, "NotFound", "no route " .. method .. " " .. path:sub(1, 200)) end
  -- A session of another node (issue 19): where it lives, never a lookup
  -- here; the id itself names the node, so this leaks nothing.
  if owner_url and owner_url ~= cfg.advertise then
    local r = fail(421, "Misdirected", ("session %s is held by the node at %s"):format(pid, owner_url),
      { endpoint = owner_url })
    r.headers = { ["sbx-session-endpoint"] = owner_url }
    return r
  end
  if rest == "" then
    if method ~= "GET" and method ~= "DELETE" then return fail(405, "MethodNotAllowed", method .. " " .. path) end
    local rec, err, owner = lookup(req, id, method == "DELETE")
    if not rec then return err end
    if method == "GET" then return reply(200, describe(rec, owner, req)) end
    close_rec(rec, "deleted")
    return reply(200, { id = pid, closed = true }, { log = "session=" .. id })
  end
  if rest == "/runs" then
    if method ~= "POST" then return fail(405, "MethodNotAllowed", method .. " " .. path) end
    local rec, err = lookup(req, id, false)
    if not rec then return err end
    return start_run(req, rec)
  end
  local crun, what = rest:match("^/runs/(%x+)/(%l+)$")
  if crun and (what == "stdin" or what == "resize" or what == "signal") then
    if method ~= "POST" then return fail(405, "MethodNotAllowed", method .. " " .. path) end
    local rec, err = lookup(req, id, false)
    if not rec then return err end
    return run_control(req, rec, crun, what)
  end
  local run_id = rest:match("^/runs/(%x+)$")
  if run_id then
    if method ~= "GET" then return fail(405, "MethodNotAllowed", method .. " " .. path) end
    local rec, err = lookup(req, id, false)
    if not rec then return err end
    rec.last_ms = now_ms()
    return { stream_attach = { session_id = rec.s.id, run_id = run_id } }
  end
  local fpath = rest:match("^/files/(.+)$")
  if fpath then
    if method ~= "PUT" and method ~= "GET" and method ~= "HEAD" then
      return fail(405, "MethodNotAllowed", method .. " " .. path)
    end
    local rec, err = lookup(req, id, false)
    if not rec then return err end
    local r = file_op(req, rec, fpath)
    r.log = "session=" .. id
    return r
  end
  return fail(404, "NotFound", "no route " .. method .. " " .. path:sub(1, 200))
end

-- The allowlist proxy of every session, on sbxd's event loop (main.c
-- watches M.proxy_fd() and calls M.proxy()'s px:wake, in C, when it is
-- readable).  Relaying and parsing never come here: proxy_batch gets, once
-- per wake-up, the questions of every connection waiting for a verdict and
-- the proxy's log lines.  Each session's listener is tagged with its id;
-- the session's own decide function (sbx.session: engine:proxy_verdict with
-- its context) answers for it, on the loop, except where the policy has an
-- on_connect hook: then the whole verdict on the name is asked of the
-- policy worker (engine:proxy_verdict there, with the same generation and
-- context), the connection waits (pending), and M.hook_answer gives the
-- verdict back.
local proxy_routes = {}
local pending_verdicts = {} -- worker message id -> proxy ticket
proxy_host = {
  add = function(_, fd, id, decide, info)
    local ok, kind, msg = cfg.proxy:add(fd, id)
    if not ok then errors.raise(errors.from_core(kind, msg)) end
    proxy_routes[id] = { decide = decide, info = info }
  end,
  remove = function(_, id)
    cfg.proxy:remove(id)
    proxy_routes[id] = nil
  end,
}

local function proxy_decide(q)
  local route = proxy_routes[q.tag]
  if not route then return { allow = false, reason = "the session is gone" } end
  local info = route.info
  if q.phase == "name" and cfg.hooks and info then
    local gen = info.engine:for_session(info.gen)
    if gen.hooks.on_connect then
      local id = cfg.hooks.post({ op = "verdict", generation = ensure_loaded(gen), q = q, ctx = info.ctx })
      pending_verdicts[id] = q.ticket
      return { pending = true }
    end
  end
  return route.decide(q)
end

-- One wake-up's questions and log lines (src/lua/proxy.c, batch): a
-- verdict per question, in order.  A question whose decide fails is
-- refused on its own, the others still get theirs.
local function proxy_batch(queries, logs)
  for _, line in ipairs(logs) do io.stderr:write("ts=- level=info event=proxy ", line, "\n") end
  local verdicts = {}
  for i, q in ipairs(queries) do
    local ok, v = pcall(proxy_decide, q)
    verdicts[i] = ok and v
      or { allow = false, reason = "policy check failed: " .. tostring(type(v) == "table" and v.message or v) }
  end
  return verdicts
end

-- An answer of the policy worker no request waits for (task.c): a proxy
-- verdict.  Anything but a well-formed allowing verdict refuses.
function M.hook_answer(id, rep)
  local ticket = pending_verdicts[id]
  if not ticket then return end
  pending_verdicts[id] = nil
  local v = type(rep) == "table" and type(rep.verdict) == "table" and rep.verdict
    or { allow = false, reason = "policy check failed: " .. tostring(type(rep) == "table" and rep.err or rep) }
  cfg.proxy:decided(ticket, v)
end

function M.proxy_fd() return cfg.proxy:fd() end

function M.proxy() return cfg.proxy end

function M.init(c)
  cfg.policy = c.policy
  cfg.max_sessions = c.max_sessions or 16
  cfg.max_runs = c.max_runs or 64
  cfg.warm_runs = c.warm_runs or 1
  cfg.hard_ceiling_s = c.hard_ceiling_s or 24 * 3600
  cfg.idle_timeout_s = c.idle_timeout_s or 3600
  cfg.endpoint = c.listen
  if c.advertise_url then
    local url, why = node.endpoint_ok(c.advertise_url)
    if not url then error("--advertise-url " .. why, 0) end
    cfg.advertise = url
  end
  cfg.admin_tenant = c.admin_tenant
  cfg.max_body = c.max_body
  cfg.file_append = c.file_append
  cfg.file_io = c.file_io
  cfg.hooks = c.hooks
  -- The server must outlive any sandbox the OOM killer considers; without
  -- CAP_SYS_RESOURCE this fails, and the runs' own high scores still make
  -- them the first victims.
  local core = require "sbx.core"
  if core.protect_from_oom then
    local ok, e = pcall(core.protect_from_oom)
    if not ok or e == nil then
      io.stderr:write("sbxd: event=oom_protect ok=false (needs CAP_SYS_RESOURCE)\n")
    end
  end
  -- Ceilings from the limits sbxd runs under (issue 19): a bad flag or a
  -- limit the reserve eats whole stops sbxd here.
  cfg.pod_ceilings = podlimits.setup(c)
  -- Fail at start, not at the first request, when the policy does not load.
  local ok, e = pcall(policy.load, c.policy, { hook_runner = c.hooks and hook_runner or nil })
  if not ok then error("policy: " .. tostring(type(e) == "table" and e.message or e), 0) end
  cfg.engine = e
  pod_ceilings(e.current)
  cfg.proxy = core.proxy_new { batch = proxy_batch }
  return true
end

function M.tick()
  local now = now_ms()
  for _, rec in pairs(sessions) do
    if now >= rec.hard_deadline_ms then
      close_rec(rec, "hard_ceiling")
    elseif rec.runs == 0 and not rec.s:alive() then
      close_rec(rec, "lifetime")
    elseif rec.runs == 0 and cfg.idle_timeout_s > 0 and now - rec.last_ms >= cfg.idle_timeout_s * 1000 then
      close_rec(rec, "idle")
    end
  end
end

function M.stats()
  local n = 0
  for _ in pairs(sessions) do n = n + 1 end
  local px = cfg.proxy and cfg.proxy:stats() or {}
  return { sessions_open = n, policy_denials = counters.policy_denials,
    proxy_accepted = px.accepted or 0, proxy_allowed = px.allowed or 0,
    proxy_refused = px.refused or 0, proxy_failed = px.failed or 0, proxy_active = px.active or 0,
    proxy_bytes_up = px.bytes_up or 0, proxy_bytes_down = px.bytes_down or 0,
    proxy_lua_calls = px.lua_calls or 0 }
end

function M.shutdown()
  for _, rec in pairs(sessions) do close_rec(rec, "shutdown") end
end

return M

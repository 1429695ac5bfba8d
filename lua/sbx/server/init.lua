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
--                     ref_token, body (decoded table), raw (the body bytes:
--                     a string, or for .../files/ a body object of
--                     src/server/fileio.c), format }
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
-- its message text: STATUS (sbx.server.answer) and open_error
-- (sbx.server.files) are the whole mapping.
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
local answer = require "sbx.server.answer"
local files = require "sbx.server.files"
local loop = require "sbx.server.loop"
local proxyhost = require "sbx.server.proxyhost"
local runcontrol = require "sbx.server.runcontrol"

local reply, fail, from_error = answer.reply, answer.fail, answer.from_error
local now_ms, wait_fd = loop.now_ms, loop.wait_fd

local M = {}

local cfg = {}
local sessions = {}      -- id -> record
-- Sessions closed lately (issue 17): id -> { tenant, ref_token, name, why },
-- so their owner and reference holders get 410 SessionClosed, not 404 /
-- 401.  Bounded: the oldest of CLOSED_KEEP is forgotten first (then 404).
local closed, closed_order, closed_head = {}, {}, 0
local CLOSED_KEEP = 4096
local tenants = {}       -- tenant -> { sessions = n, runs = n }
local px_host -- sbx.server.proxyhost: serves allowlist sessions' proxies on our loop

-- Session options a remote client may not set: they name host paths or
-- files of the server (the policy is the server's).
local SERVER_ONLY = options.SERVER_KEYS

local ARRAY = { __array = true }
local function array(t) return setmetatable(t, ARRAY) end

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
  if loop.in_request() then
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

-- The node's IP address (issue 17, the reference's `ip`): SBX_POD_IP
-- (a Kubernetes downward-API env), else the endpoint's host when it is an
-- IP literal; nil for a DNS name or a unix socket.
local function endpoint_ip(endpoint)
  local env = os.getenv("SBX_POD_IP")
  if env and env ~= "" then return env end
  if type(endpoint) ~= "string" then return nil end
  local v6 = endpoint:match("^https?://%[([%x:%.]+)%]")
  if v6 then return v6 end
  local v4 = endpoint:match("^https?://(%d+%.%d+%.%d+%.%d+)[:/]?")
  if v4 and v4 ~= "0.0.0.0" then return v4 end
  if endpoint:match("^https?://localhost[:/]?") or endpoint:match("^https?://localhost$") then
    return "127.0.0.1"
  end
  return nil
end

local function describe(rec, owner, req)
  local s = rec.s
  local pid = node.public_id(s.id, cfg.advertise)
  local endpoint = cfg.advertise or (req and req.endpoint) or cfg.endpoint
  local d = {
    id = pid, name = s.name, created_at = s.created_at, backend = s.backend,
    endpoint = endpoint, is_owner = owner, timeout_s = rec.timeout_s,
    -- Where the session can be inspected (GET answers this record), and
    -- the node's address.
    url = endpoint and (endpoint .. "/v1/sessions/" .. pid) or nil, ip = endpoint_ip(endpoint),
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
local function closed_answer(c)
  return fail(410, "SessionClosed", ("session %s was closed (%s)"):format(c.name, c.why), { why = c.why })
end

local function lookup_rec(req, id, owner_only)
  local rec = sessions[id]
  if req.tenant then
    if not rec or rec.tenant ~= req.tenant then
      local c = closed[id]
      if c and c.tenant == req.tenant then return nil, closed_answer(c) end
      return nil, fail(404, "NotFound", ("no session %s"):format(id))
    end
    return rec, nil, true
  end
  -- A reference token: sbxr_<id>_<secret>, valid for its own session only.
  local tid = type(req.ref_token) == "string" and req.ref_token:match("^sbxr_(%x+)_%x+$")
  local trec = tid and sessions[tid]
  if not trec or not ct_equal(req.ref_token, trec.ref_token) then
    -- The token of a session closed lately: that session is closed.
    local c = tid and closed[tid]
    if c and ct_equal(req.ref_token, c.ref_token) and tid == id then return nil, closed_answer(c) end
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

-- Remember a closed session (the ring drops the oldest past CLOSED_KEEP).
local function remember_closed(rec, why)
  local id = rec.s.id
  closed_head = closed_head % CLOSED_KEEP + 1
  local old = closed_order[closed_head]
  if old then closed[old] = nil end
  closed_order[closed_head] = id
  closed[id] = { tenant = rec.tenant, ref_token = rec.ref_token, name = rec.s.name, why = why }
end

local function close_rec(rec, why)
  if rec.closed then return end
  rec.closed = true
  sessions[rec.s.id] = nil
  remember_closed(rec, why)
  local t = tenant_rec(rec.tenant)
  t.sessions = t.sessions - 1
  local ok, e = pcall(rec.s.close, rec.s)
  cfg.log("info", ("event=session_close session=%s tenant=%s why=%s%s"):format(
    rec.s.id, rec.tenant, why, ok and "" or (" err=%q"):format(tostring(e))))
end

local opening_names = {} -- tenant .. "\0" .. name -> true while that open waits

local function session_named(tenant, name)
  for _, rec in pairs(sessions) do
    if rec.tenant == tenant and rec.s.name == name then return rec end
  end
  return nil
end

local function unescape(v)
  return (v:gsub("%+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- GET /v1/sessions[?name=NAME]: the query's one parameter, or nil, answer.
local function list_filter(query)
  if query == nil or query == "" then return {} end
  local k, v = query:match("^([^=&]+)=([^&]*)$")
  if k ~= "name" then
    return nil, from_error(errors.InvalidArgument(k or "query",
      "the only query parameter of GET /v1/sessions is name=NAME, given once"))
  end
  return { name = unescape(v) }
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
    return answer.too_many("open sessions of tenant " .. req.tenant, cfg.max_sessions)
  end
  -- A name finds its session (GET /v1/sessions?name=): one open session
  -- per name and tenant, counting opens still setting up.
  local name_key = type(body.name) == "string" and (req.tenant .. "\0" .. body.name) or nil
  if name_key and (opening_names[name_key] or session_named(req.tenant, body.name)) then
    return from_error(errors.InvalidArgument("name",
      ("%q already names an open session of this tenant"):format(body.name)))
  end
  local opts = {}
  for k, v in pairs(body) do opts[k] = v end
  opts.policy = cfg.engine
  opts.warm_runs = cfg.warm_runs
  opts.warm_idle_s = cfg.warm_idle_s
  opts.proxy_host = px_host.host
  opts.wait = wait_fd
  opts.caller = { origin = "sbxd", tenant = req.tenant }
  -- The slot is taken before the open waits: opens of one tenant that
  -- wait together must not all pass the check above.
  t.sessions = t.sessions + 1
  if name_key then opening_names[name_key] = true end
  local ok, s = pcall(session.open, opts)
  if name_key then opening_names[name_key] = nil end
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
  local want, err = list_filter(req.query)
  if not want then return err end
  local out = array {}
  for _, rec in pairs(sessions) do
    if rec.tenant == req.tenant and (want.name == nil or rec.s.name == want.name) then
      out[#out + 1] = describe(rec, true, req)
    end
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
  -- Asked again after each wait: what came may have been let go (an old
  -- offer of a taken spare), and the next is waited for here too.
  local fd = s:warm_fd(o)
  local deadline = fd and now_ms() + require("sbx.core").SESSION_READY_TIMEOUT_MS
  while fd do
    local ready, why = wait_fd(fd, deadline)
    if not ready then
      return from_error(errors.SandboxExecutionError(("no warm run of session %s came (%s)")
        :format(s.name, tostring(why)), s.backend, 0))
    end
    if s:is_closed() then return fail(410, "SessionClosed", ("session %s is closed"):format(s.name)) end
    fd = s:warm_fd(o)
  end
  local t = tenant_rec(rec.tenant)
  if t.runs >= cfg.max_runs then
    return answer.too_many("concurrent runs of tenant " .. rec.tenant, cfg.max_runs)
  end
  t.runs = t.runs + 1
  rec.runs = rec.runs + 1
  local finished = false
  -- An interactive run (live stdin or a pty) is named, so that the
  -- control routes (sbx.server.runcontrol) can reach it while its output streams.
  local run_id = o.stdin_live and random_hex(16) or nil
  local release -- a run with its own allow-list: its proxy listener goes at the end
  return { stream = {
    backend = s.backend,
    session_id = s.id,
    detach = body.detach == true,
    run_id = run_id,
    start = function()
      local r, err = s:start_run(o)
      if r then release = err err = nil end
      if r and run_id then
        rec.live = rec.live or {}
        rec.live[run_id] = { run = r, offset = 0, pty = o.pty_rows ~= nil }
      end
      return r, err
    end,
    finish = function()
      if finished then return end
      finished = true
      if release then release() end
      if run_id and rec.live then rec.live[run_id] = nil end
      rec.last_ms = now_ms()
      t.runs = t.runs - 1
      rec.runs = rec.runs - 1
    end,
  } }
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
    -- No spare made under the previous policy is handed out.
    require("sbx.core").spares_flush()
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

local function route(req)
  loop.enter_request()
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
    -- Past its timeout_s a session is over at once (its runs may still be
    -- in their grace; tick() closes it once they are done).
    if method == "GET" and not rec.s:alive() then
      return fail(410, "SessionClosed", ("session %s has ended: its lifetime has passed"):format(rec.s.name))
    end
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
    return runcontrol.handle(req, rec, crun, what)
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
    local r = files.op(req, rec, fpath)
    r.log = "session=" .. id
    return r
  end
  return fail(404, "NotFound", "no route " .. method .. " " .. path:sub(1, 200))
end

function M.handle(req)
  local ok, r = pcall(route, req)
  -- An upload's body object holds C memory the Lua collector does not
  -- see: whatever the answer (a refusal, an unknown session, an error),
  -- its bytes go now, not at some later GC (a write job took them already).
  if type(req.raw) == "userdata" then req.raw:free() end
  if not ok then error(r, 0) end
  return r
end

-- An answer of the policy worker no request waits for (task.c): a proxy
-- verdict (sbx.server.proxyhost).
function M.hook_answer(id, rep)
  if px_host then px_host.hook_answer(id, rep) end
end

function M.proxy_fd() return cfg.proxy:fd() end

function M.proxy() return cfg.proxy end

function M.init(c)
  cfg.policy = c.policy
  cfg.max_sessions = c.max_sessions or 16
  cfg.max_runs = c.max_runs or 64
  cfg.warm_runs = c.warm_runs or 1
  cfg.warm_idle_s = c.warm_idle_s
  -- Spare sessions of the last-opened shape (sbxd --spare-sessions; 0
  -- when the server is driven without sbxd): src/core/spare.c.
  cfg.spare_sessions = c.spare_sessions or 0
  require("sbx.session").keep_spares_of_last_shape(cfg.spare_sessions)
  cfg.hard_ceiling_s = c.hard_ceiling_s or 24 * 3600
  cfg.idle_timeout_s = c.idle_timeout_s or 3600
  cfg.endpoint = c.listen
  if c.advertise_url then
    local url, why = node.endpoint_ok(c.advertise_url)
    if not url then error("--advertise-url " .. why, 0) end
    cfg.advertise = url
  end
  cfg.admin_tenant = c.admin_tenant
  -- sbxd's log (src/server/log.c: real ts=, --log-level); a plain line
  -- when the server is driven without it (specs).
  cfg.log = c.log or function(level, text)
    io.stderr:write(("ts=%s level=%s %s\n"):format(os.date("!%Y-%m-%dT%H:%M:%SZ"), level, text))
  end
  cfg.max_body = c.max_body
  cfg.file_append = c.file_append
  cfg.file_io = c.file_io
  files.file_io = c.file_io
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
  px_host = proxyhost.new(cfg, ensure_loaded)
  cfg.proxy = core.proxy_new { batch = px_host.batch }
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
  return { sessions_open = n, policy_denials = answer.policy_denials,
    proxy_accepted = px.accepted or 0, proxy_allowed = px.allowed or 0,
    proxy_refused = px.refused or 0, proxy_failed = px.failed or 0, proxy_active = px.active or 0,
    proxy_bytes_up = px.bytes_up or 0, proxy_bytes_down = px.bytes_down or 0,
    proxy_lua_calls = px.lua_calls or 0, proxy_intercepted = px.intercepted or 0 }
end

function M.shutdown()
  require("sbx.core").spares_flush()
  for _, rec in pairs(sessions) do close_rec(rec, "shutdown") end
end

return M

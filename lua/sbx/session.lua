-- sbx.session: on-device sessions (sbx.session{...}, sbx.attach(h)).
--
-- A session is a set of namespaces with a persistent work dir, made by the
-- C core (sbx.core); every run is a fresh process tree inside it.  This
-- module checks options against the policy, opens the core session, and
-- gives the methods of the Lua API:
--
--   s:run(cmd, opts)        -> Process (sbx.process); never raises on a
--                              non-zero exit
--   s:exec(cmd, opts)       -> { returncode, stdout, stderr, ok, runtime_ms,
--                                backend, termination_reason, signal, cmd };
--                              opts.check = true raises SandboxCommandError
--                              unless ok
--   s:run_code(code, opts)  -> stdout; python unless opts.script_type says
--                              otherwise; SandboxCommandError unless ok
--   s:put_bytes(path, data) -- write a file beneath the work dir
--   s:get_bytes(path)       -> data
--   s:handle()              -> { kind = "sbx.local", id =, name = }
--   s:alive()               -> boolean
--   s:close()               -- owner: end the session; reference: detach
--
-- cmd is a string run by script_type's interpreter (/bin/sh -c, python3 -c,
-- luajit -e), or an argv array run as is.  ok means returncode 0 and an
-- exit of the command's own (no timeout, signal or kill).
--
-- Fields: name ("sbx-<16 hex>" unless given), id (32 hex: 128 random
-- bits), created_at (UTC, ISO 8601), is_owner, work_dir (the host path),
-- backend, endpoint (nil: on this machine).
--
-- The host API: what a host with an event loop of its own (sbxd's
-- lua/sbx/server) uses; nothing else of a session is its business.  Each
-- raises SessionClosed on a closed session, as the methods above do.
--
--   M.open(opts) with opts.wait (wait(fd, deadline_ms): the host's loop
--     waits, the open never blocks), opts.caller ({ origin, tenant }: what
--     policy hooks see) and opts.proxy_host (serves allowlist proxies:
--     host:add(fd, id, decide, info), host:remove(id))
--   s:limits()             -> { max_file_bytes, timeout_s }
--   s:admit_run(cmd, opts) -> o: run options admitted as s:run admits them
--                             (shapes, ceilings, the on_run hook); raises
--                             InvalidArgument, PolicyDenied
--   s:warm_fd(o)           -> fd | nil: readable once a warm run for o is
--                             on offer; nil: no need to wait
--   s:start_run(o)         -> the sbx.core run, release | nil, error table;
--                             never raises (the host streams the run
--                             itself, and calls release() once it ended:
--                             a run with its own allow-list stops being
--                             served by the proxy)
--   s:open_file(path)      -> fd, size: what get_bytes would read, as an fd
--                             the caller closes; errors carry `code`
--                             ("not_found", "too_large") from the core
--   s:is_closed()          -> true once the session (or this reference)
--                             is closed
--
-- Handles are process-local on this machine: sbx.attach(h) finds the
-- session in a registry of this Lua state.  The attached Session is in
-- reference mode (is_owner = false): it runs commands and moves files, and
-- its close() only detaches it.  The session ends when its owner closes it
-- (or is collected).

local errors = require "sbx.errors"
local narrow = require "sbx.policy.narrow"
local options = require "sbx.options"
local policy = require "sbx.policy"
local policy_files = require "sbx.policy.files"
local process = require "sbx.process"
local trust = require "sbx.trust"
local venv = require "sbx.venv"
local secrets = require "sbx.secrets"

local M = {}

-- id -> shared state of an open session.  Weak: a handle does not keep a
-- session its owner dropped alive.
local registry = setmetatable({}, { __mode = "v" })

local Session = {}
Session.__index = Session
-- The host API's methods (below): public to sbxd, not a user's business,
-- so the REPL's Tab completion leaves them out (sbx.complete).
Session.__unlisted = { limits = true, admit_run = true, warm_fd = true, start_run = true,
  open_file = true, is_closed = true }

local core_module, core_error
-- core() -> sbx.core, or nil and why it cannot be loaded.
local function core()
  if core_module then return core_module end
  local ok, mod = pcall(require, "sbx.core")
  if not ok then
    core_error = tostring(mod):gsub("\n.*", "")
    return nil
  end
  core_module = mod
  return mod
end

-- Engines of the policy files sessions were opened with, each kept while
-- its file's text stays the same: compiling a policy costs about a
-- millisecond, most of what sbx.session spends in Lua.  Sessions of one
-- file share its engine (and its hooks' state), as sbxd's do.
local engines = {}
local function engine_for(p)
  if p ~= nil and type(p) ~= "string" then return policy.engine_for(p) end
  local file = policy_files.resolve(p)
  local f = io.open(file, "rb")
  local text = f and f:read("*a")
  if f then f:close() end
  local e = engines[file]
  if text and e and e.current.source == text then return e end
  e = policy.engine_for(p)
  engines[file] = e
  return e
end

-- getrandom(2) through the FFI where there is one: opening /dev/urandom
-- through stdio was ~20 us of each open.
local has_ffi, ffi = pcall(require, "ffi")
if has_ffi then
  -- (cdef succeeds whether libc has it or not; the lookup says.)
  pcall(ffi.cdef, "long getrandom(void *buf, size_t len, unsigned int flags);")
  has_ffi = pcall(function() return ffi.C.getrandom end)
end
local function random_bytes(nbytes)
  if has_ffi then
    local buf = ffi.new("uint8_t[?]", nbytes)
    if ffi.C.getrandom(buf, nbytes, 0) == nbytes then return ffi.string(buf, nbytes) end
  end
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(nbytes)
  if f then f:close() end
  return bytes
end

local function random_hex(nbytes)
  local bytes = random_bytes(nbytes)
  if not bytes or #bytes ~= nbytes then
    errors.raise(errors.SandboxExecutionError("cannot read /dev/urandom for a session id"))
  end
  -- One format call (a gsub with a function per byte is not compiled).
  return (("%02x"):rep(nbytes)):format(bytes:byte(1, nbytes))
end

-- State dirs the core may use by default: bind paths may not touch them.
local function default_state_dirs()
  local out = { "/var/lib/sbx" }
  local env = os.getenv("SBX_STATE_DIR")
  if env and env:sub(1, 1) == "/" then out[#out + 1] = (options.normalize(env)) end
  local xdg = os.getenv("XDG_RUNTIME_DIR")
  if xdg and xdg:sub(1, 1) == "/" then out[#out + 1] = (options.normalize(xdg .. "/sbx")) end
  return out
end

-- The policy's driver files for GPU sessions (filesystem.gpu_paths:
-- absolute paths or globs), nil: the core asks ldconfig.
local function gpu_paths(gen)
  local fs = gen.raw and gen.raw.filesystem
  local list = type(fs) == "table" and fs.gpu_paths or nil
  if list == nil then return nil end
  local out = {}
  for i, p in ipairs(type(list) == "table" and list or {}) do
    if type(p) ~= "string" or p:sub(1, 1) ~= "/" then
      errors.raise(errors.PolicyDenied("filesystem.gpu_paths",
        ("filesystem.gpu_paths[%d] must be an absolute path or glob"):format(i)))
    end
    out[#out + 1] = p
  end
  return out
end

-- The session env with the GPUs it got: NVIDIA_VISIBLE_DEVICES names the
-- host's indices, CUDA_VISIBLE_DEVICES the ones CUDA sees (0..N-1).
local start_proxy -- below: the allowlist proxy of a session

local function gpu_env(cs, env)
  local host, cuda = {}, {}
  for _, node in ipairs(cs:gpu_nodes()) do
    local k = node:match("^/dev/nvidia(%d+)$")
    if k then
      host[#host + 1] = k
      cuda[#cuda + 1] = tostring(#cuda)
    end
  end
  local out = {}
  for k, v in pairs(env or {}) do out[k] = v end
  out.NVIDIA_VISIBLE_DEVICES = table.concat(host, ",")
  out.CUDA_VISIBLE_DEVICES = table.concat(cuda, ",")
  return out
end

-- The core session, opened in two steps around wait(fd, deadline_ms) (a
-- host's event loop: sbxd), so the sandbox's setup never blocks the
-- caller's thread.  -> cs | nil, kind, msg; a session that does not
-- become ready by the deadline, or whose wait fails (the client went
-- away), is closed here.
local function open_waiting(c, copts, wait)
  -- The same budget as the core's blocking open: the sandbox's setup, then
  -- for open mode nft and pasta (whose own deadline ends that step first,
  -- with an error naming them).
  local budget = c.SESSION_READY_TIMEOUT_MS
    + (copts.network_mode == "open" and c.OPEN_NETWORK_READY_TIMEOUT_MS or 0)
  local deadline = c.monotonic_ms() + budget
  -- The start itself (work dir, cgroup, clone) takes the host's thread a
  -- few ms: let its loop have a turn first, so opens arriving together
  -- are spread over turns.
  local turned, twhy = wait(nil, deadline)
  if not turned then return nil, "SandboxExecutionError", "the session open was abandoned: " .. tostring(twhy) end
  local cs, kind, msg = c.session_start(copts)
  if not cs then return nil, kind, msg end
  while true do
    local fd = cs:ready_fd()
    local ok, why = true, nil
    if fd then ok, why = wait(fd, deadline) end
    if not ok then
      cs:close()
      if why == "timeout" then
        return nil, "SandboxExecutionError",
          ("the sandbox did not become ready within %d ms"):format(budget)
      end
      return nil, "SandboxExecutionError", "the session open was abandoned: " .. tostring(why)
    end
    local done, k2, m2 = cs:finish()
    if done then return cs end
    if done == nil then
      cs:close()
      return nil, k2, m2
    end
  end
end

-- The policy engine's decision on opts as the core's session options:
-- -> c, pol, o, gen, copts (copts.spare_tag names the policy generation,
-- so that a spare made under another policy is never taken: spare.c).
-- The tag is made once per engine and generation: escaping the policy's
-- text (a gsub over a few KiB) was 77 us of each open's ~120 in Lua.
local tags = setmetatable({}, { __mode = "k" })
local function spare_tag(pol, gen)
  local t = tags[pol]
  if t and t.generation == gen.generation and t.source == gen.source then return t.tag end
  t = { generation = gen.generation, source = gen.source,
    tag = ("%s|%s|%s"):format(tostring(pol), tostring(gen.generation), (tostring(gen.source):gsub("%z", "\\0"))) }
  tags[pol] = t
  return t.tag
end

local function admit(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("options", "a table of session options expected, got " .. type(opts)))
  end
  options.check_keys(opts, options.SESSION_KEYS, "session")
  -- opts.policy: a path, or a shared (reloadable) policy engine.
  local pol = engine_for(opts.policy)
  local c = core()
  local o, gen = pol:admit_session(opts, {
    realpath = c and function(p) return (c.realpath(p)) end,
    extra_forbidden = default_state_dirs(),
    caller = opts.caller,
  })
  if not c then
    errors.raise(errors.BackendUnavailable(o.backend,
      "the sbx.core C module cannot be loaded (" .. core_error .. ")",
      "run through build/bin/sbxlua, or add build/lib/?.so to package.cpath"))
  end
  local binds = {}
  for _, p in ipairs(o.read_only_paths) do binds[#binds + 1] = { path = p, writable = false } end
  for _, p in ipairs(o.read_write_paths) do binds[#binds + 1] = { path = p, writable = true } end
  local copts = {
    backend = o.backend,
    work_dir = o.work_dir,
    state_dir = o.state_dir,
    hostname = pol.defaults.hostname,
    system_ro = pol.filesystem.system_ro,
    etc_files = pol.filesystem.etc,
    binds = binds,
    seccomp_deny = pol.seccomp.deny,
    seccomp_allow = pol.seccomp.allow,
    tmp_bytes = pol.defaults.tmp_bytes,
    shm_bytes = o.shm_mb and o.shm_mb * 1024 * 1024 or pol.defaults.shm_bytes,
    nofile = o.nofile,
    lifetime_ms = o.lifetime_ms,
    expire_grace_ms = o.expire_grace_ms,
    warm_runs = o.warm_runs,
    warm_idle_ms = o.warm_idle_s and math.ceil(o.warm_idle_s * 1000) or nil,
    network_mode = o.network_mode,
    proxy_port = options.PROXY_PORT,
    open_deny = o.network_mode == "open" and options.open_deny(o.network_denylist) or nil,
    -- Resource ceilings (the core's cgroup and size-capped work dir).
    memory_bytes = o.memory_mb and o.memory_mb * 1024 * 1024 or nil,
    cpu_milli = o.cpu_milli,
    pids_max = o.pids,
    disk_bytes = o.disk_mb and o.disk_mb * 1024 * 1024 or nil,
    gpus = o.gpus,
    gpu_dev_dir = (o.gpus or 0) > 0 and (os.getenv("SBX_GPU_DEV_DIR") or "") ~= ""
      and os.getenv("SBX_GPU_DEV_DIR") or nil,
    gpu_paths = (o.gpus or 0) > 0 and gpu_paths(gen) or nil,
    gpu_shared = (o.gpus or 0) > 0 and gen.ceilings.gpu_shared == true or nil,
    spare_tag = spare_tag(pol, gen),
  }
  return c, pol, o, gen, copts
end

-- sbxd --spare-sessions N: after each open, keep N spares of its shape
-- (the last one opened); 0: none.
local auto_spares = 0
function M.keep_spares_of_last_shape(n) auto_spares = n end

-- spares(opts) keeps opts.n (default 1; 0: none) sessions of the shape the
-- policy gives opts opened ahead (sbx.spares{ n = 2, backend = "userns" }):
-- a later sbx.session with the same options takes one.  Raises
-- InvalidArgument for a shape that is never pooled.
function M.spares(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("options", "a table of session options expected, got " .. type(opts)))
  end
  local n = opts.n == nil and 1 or opts.n
  if type(n) ~= "number" or n < 0 or n ~= math.floor(n) then
    errors.raise(errors.InvalidArgument("n", "a count of spare sessions (0 or more) expected, got " .. tostring(n)))
  end
  local rest = {}
  for k, v in pairs(opts) do if k ~= "n" then rest[k] = v end end
  local c, _, o, _, copts = admit(rest)
  if o.secrets and #o.secrets > 0 then
    errors.raise(errors.InvalidArgument("secrets", "sessions with secrets are never pooled (each has a CA of its own)"))
  end
  local ok, kind, msg = c.spares_keep(copts, n)
  if not ok then errors.raise(errors.from_core(kind, msg, { backend = o.backend })) end
  return c.spares_stats()
end

-- The pool's counts (sbx.core's spares_stats), or nil without the core.
function M.spares_stats()
  local c = core()
  return c and c.spares_stats()
end

-- open(opts) -> owner Session.  See the Lua API in DESIGN.md; raises
-- InvalidArgument, PolicyDenied, BackendUnavailable, SandboxExecutionError.
function M.open(opts)
  local c, pol, o, gen, copts = admit(opts)
  if opts == nil then opts = {} end
  -- Secrets: a CA of the session's own (its key stays in this process and
  -- the proxy child), trusted by the runs through the ca_certs bundle.
  local sec, ca = o.secrets and #o.secrets > 0 and secrets.with_placeholders(o.secrets, random_hex)
  if sec then
    local k, m
    ca, k, m = c.proxy_ca(random_hex(4))
    if not ca then errors.raise(errors.from_core(k, m, { backend = o.backend })) end
    o.env = secrets.env(o.env, sec)
  end
  local pems = {}
  for i, p in ipairs(o.ca_certs or {}) do pems[i] = p end
  if ca then pems[#pems + 1] = ca:pem() end
  copts.ca_bundle = trust.bundle(pems)
  if copts.ca_bundle then o.env = trust.env(o.env) end
  if o.venv then o.env = venv.env(o, gen.defaults.env and gen.defaults.env.PATH or options.DEFAULT_ENV.PATH) end
  local cs, kind, msg
  if opts.wait then
    cs, kind, msg = open_waiting(c, copts, opts.wait)
  else
    cs, kind, msg = c.session_open(copts)
  end
  if not cs then errors.raise(errors.from_core(kind, msg, { backend = o.backend })) end
  -- sbxd: the next open of this shape finds a spare (a shape never pooled
  -- leaves the pool as it is; secrets make every shape new).
  -- (A new shape moves the pool only when asked for twice in a row.)
  if auto_spares > 0 and not sec then c.spares_keep(copts, auto_spares, true) end
  if (o.gpus or 0) > 0 then o.env = gpu_env(cs, o.env) end
  -- Backend none runs on the host, where /tmp/sandbox-work does not exist:
  -- HOME is the work dir there (issue 17), unless the policy or caller set one.
  if o.backend == "none" and not (o.env and o.env.HOME) and not pol.defaults.env.HOME then
    local env = {}
    for k, v in pairs(o.env or {}) do env[k] = v end
    env.HOME = cs:work_dir()
    o.env = env
  end
  local id = random_hex(16)
  local st = {
    core = cs,
    id = id,
    name = o.name or ("sbx-" .. id:sub(1, 16)),
    created_at = os.date("!%Y-%m-%dT%H:%M:%SZ"),
    backend = o.backend,
    work_dir = cs:work_dir(),
    policy = gen,  -- the generation the session was opened under
    engine = pol,
    network_mode = o.network_mode,
    network_allowlist = o.network_allowlist,
    network_denylist = o.network_denylist,
    proxy_port = options.PROXY_PORT,
    env = o.env,
    max_file_bytes = o.max_file_bytes,
    timeout_s = o.timeout_s,
    caller = opts.caller, -- { origin, tenant }: what hooks see (sbx.policy caller_ctx)
    venv = o.venv and { python_venv = o.python_venv, ready = false } or nil, -- sbx.venv
    secrets = sec and secrets.spec(sec, ca) or nil, -- for the proxy only
    closed = false,
  }
  -- An open session's runs may narrow to allowlist: it has a proxy too.
  if o.network_mode ~= "blocked" then
    local ok, err = pcall(start_proxy, c, st, opts.proxy_host)
    if not ok then
      cs:close()
      errors.raise(err)
    end
  end
  registry[id] = st
  return M.wrap(st, true)
end

-- allowlist: the session's proxy, in a process of its own forked from
-- this one (an on-device host has no event loop to serve it from).  It
-- asks the policy engine about every connection (engine:proxy_verdict).
function start_proxy(c, st, host)
  local fd, kind, msg = st.core:proxy_listener()
  if not fd then errors.raise(errors.from_core(kind, msg, { backend = st.backend })) end
  local ctx = {
    session = { id = st.id, name = st.name, backend = st.backend, network_mode = st.network_mode },
    network_mode = "allowlist",
    allowlist = st.network_allowlist,
    denylist = st.network_denylist,
  }
  for k, v in pairs(policy.caller_ctx(st.caller)) do ctx[k] = v end
  local engine, gen = st.engine, st.policy
  -- Runs with an allow-list of their own come in on listeners of their
  -- own (tagged <id>/run<n>), decided with their list; a listener the
  -- proxy knows no list for refuses.
  local run_ctx = {}
  local decide = function(q)
    local qctx = q.tag == st.id and ctx or run_ctx[q.tag]
    if not qctx then return { allow = false, reason = "no allow-list for this run" } end
    return engine:proxy_verdict(q, qctx, gen)
  end
  local runs, n = {}, 0 -- tags served now
  local function run_tag()
    n = n + 1
    return st.id .. "/run" .. n
  end
  if host then
    -- A host with an event loop of its own (sbxd) serves it there.
    -- (and, where the policy has on_connect, asks its policy worker with
    -- the same engine, generation and context)
    host:add(fd, st.id, decide, { engine = engine, gen = gen, ctx = ctx }, st.secrets)
    st.proxy = { close = function()
      host:remove(st.id)
      for tag in pairs(runs) do host:remove(tag) end
    end }
    st.serve_run_listener = function(lfd, list)
      local tag, rc = run_tag(), narrow.ctx(ctx, list)
      run_ctx[tag] = rc
      host:add(lfd, tag, decide, { engine = engine, gen = gen, ctx = rc }, st.secrets)
      runs[tag] = true
      return function()
        if runs[tag] then host:remove(tag) end
        runs[tag], run_ctx[tag] = nil, nil
      end
    end
    return
  end
  -- On-device the child has its own copy of run_ctx: a run's list goes
  -- to it with the listener (child:add), and on_add fills it in there.
  local on_add = function(tag, data)
    if data == nil then
      run_ctx[tag] = nil
      return
    end
    local list = {}
    for e in data:gmatch("[^\n]+") do list[#list + 1] = e end
    run_ctx[tag] = narrow.ctx(ctx, list)
  end
  -- In the forked child (issue 17): one line per refusal, the proxy's own
  -- (it carries the policy's reason), not the policy's "denied:" too; and
  -- to M.proxy_log when the host set one (the REPL: a file it reports from
  -- after each run, instead of lines landing in its prompt).
  local child, k2, m2 = c.proxy_spawn(fd, st.id, {
    decide = function(q)
      local emit = gen.emit
      gen.emit = function(line) if not line:match("^denied: ") then emit(line) end end
      local ok, v = pcall(decide, q)
      gen.emit = emit
      if not ok then error(v, 0) end
      return v
    end,
    log = function(line)
      if M.proxy_log then M.proxy_log(line) else gen.emit("proxy: " .. line) end
    end,
    secrets = st.secrets,
  }, on_add)
  if not child then errors.raise(errors.from_core(k2, m2, { backend = st.backend })) end
  st.proxy = child
  st.serve_run_listener = function(lfd, list)
    local tag = run_tag()
    local ok, k3, m3 = child:add(lfd, tag, table.concat(list, "\n"))
    if not ok then errors.raise(errors.from_core(k3, m3, { backend = st.backend })) end
    runs[tag] = true
    return function()
      if runs[tag] then child:remove(tag) end
      runs[tag] = nil
    end
  end
end

-- wrap(st, is_owner) -> a Session object over the shared state.
function M.wrap(st, is_owner)
  return setmetatable({
    name = st.name,
    id = st.id,
    created_at = st.created_at,
    is_owner = is_owner,
    work_dir = st.work_dir,
    backend = st.backend,
    endpoint = nil,
    _st = st,
    _closed = false,
  }, Session)
end

-- attach(h) -> reference-mode Session for a handle of this process.
function M.attach(h)
  if type(h) ~= "table" or type(h.id) ~= "string" then
    errors.raise(errors.InvalidArgument("handle", "a session handle (from s:handle()) expected"))
  end
  if h.kind ~= "sbx.local" then
    errors.raise(errors.InvalidArgument("handle",
      ("handle kind %q is not an on-device handle (remote sessions come with sbx.remote)"):format(tostring(h.kind))))
  end
  local st = registry[h.id]
  if not st or st.closed then
    errors.raise(errors.SessionClosed(("session %s is closed or not of this process"):format(tostring(h.name or h.id))))
  end
  return M.wrap(st, false)
end

Session.__tostring = function(s)
  return ("sbx.session(%s, backend=%s, work_dir=%s%s%s)"):format(s.name, s.backend, s.work_dir,
    s.is_owner and "" or ", reference", (s._closed or s._st.closed) and ", closed" or "")
end

-- The shared state, or SessionClosed.
local function live(s)
  if getmetatable(s) ~= Session then
    errors.raise(errors.InvalidArgument("self", "a session expected (use s:method(), not s.method())"))
  end
  if s._closed and not s.is_owner then
    errors.raise(errors.SessionClosed(("this reference to session %s is closed"):format(s.name)))
  end
  if s._st.closed then errors.raise(errors.SessionClosed(("session %s is closed"):format(s.name))) end
  return s._st
end

-- A run with its own allow-list: the proxy serves its namespace's
-- listener with that list -> release (call once the run ended), or nil
-- and an error table (the run is killed: its connections were never
-- served).
local function serve_own_list(st, r, o)
  local fd = r:take_listener()
  local ok, release = false, "the run came without its proxy listener"
  if fd and st.serve_run_listener then
    ok, release = pcall(st.serve_run_listener, fd, o.network_allowlist)
  elseif fd then
    release = "the session has no proxy"
  end
  if ok then return release end
  r:close()
  return nil, errors.is(release) and release
    or errors.SandboxExecutionError("the run's own allow-list: " .. tostring(release), st.backend, 0)
end

-- core_run(st, o) -> the core's run and its release function (a run with
-- its own allow-list; else a no-op), or nil and an error table.  o: the
-- admitted run options (sbx.options.run).
local function core_run(st, o)
  local own = o.network_allowlist ~= nil
  local r, kind, msg = st.core:run {
    argv = venv.argv(st, o.argv), env = o.env, cwd = o.cwd, stdin = o.stdin, stdout = o.stdout,
    stderr = o.stderr, stdin_data = o.stdin_data, timeout_ms = o.timeout_ms,
    network_mode = o.network_mode, stdin_live = o.stdin_live, pty_rows = o.pty_rows,
    pty_cols = o.pty_cols, own_netns = own or nil,
  }
  if r and not own then return r, function() end end
  if r then
    local release, err = serve_own_list(st, r, o)
    if not release then return nil, err end
    return r, release
  end
  if kind == "SessionClosed" then
    return nil, errors.SessionClosed(("session %s has ended: %s"):format(st.name, tostring(msg)))
  elseif kind == "InvalidArgument" then
    return nil, errors.InvalidArgument("cmd", msg)
  elseif kind == "BackendUnavailable" then
    return nil, errors.BackendUnavailable(st.backend, tostring(msg))
  end
  return nil, errors.SandboxExecutionError(("the run did not start: %s"):format(tostring(msg)), st.backend, 0)
end

local function start(st, cmd, o)
  local r, err = core_run(st, o)
  if not r then errors.raise(err) end
  local release = err
  local src = process.local_source(r)
  if o.network_allowlist then
    -- The proxy stops serving the run's listener once the run is over.
    local close = src.close
    src.close = function(self)
      close(self)
      release()
    end
  end
  return process.from_source(src, { cmd = cmd, backend = st.backend, stdout = o.stdout, stderr = o.stderr,
    stdin_live = o.stdin_live, pty = o.pty_rows ~= nil,
    core = core_module, session_closed = function() return st.closed end })
end

function Session:run(cmd, opts)
  local st = live(self)
  return start(st, cmd, st.engine:admit_run(st, cmd, opts))
end

local function exec(st, cmd, o, check)
  local p = start(st, cmd, o)
  local out, err = p:communicate()
  local res = {
    cmd = cmd,
    returncode = p.returncode,
    stdout = out or "",
    stderr = err or "",
    ok = p.returncode == 0 and p.termination_reason == "",
    runtime_ms = p.runtime_ms,
    backend = p.backend,
    termination_reason = p.termination_reason,
    signal = p.signal,
  }
  if check and not res.ok then errors.raise(errors.SandboxCommandError(cmd, res)) end
  return res
end

function Session:exec(cmd, opts)
  local st = live(self)
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("opts", "a table of run options expected, got " .. type(opts)))
  end
  local check = opts and opts.check
  if check ~= nil and type(check) ~= "boolean" then
    errors.raise(errors.InvalidArgument("check", "a boolean expected, got " .. type(check)))
  end
  return exec(st, cmd, st.engine:admit_run(st, cmd, opts, { "check" }), check)
end

function Session:run_code(code, opts)
  local st = live(self)
  local o2 = options.run_code(code, opts)
  return exec(st, code, st.engine:admit_run(st, code, o2), true).stdout
end

-- A caller's file path as a path relative to the work dir.  Absolute paths
-- are accepted when they name something inside the work dir, either as the
-- sandbox sees it (/tmp/sandbox-work/...) or as the host does.
local function rel_path(st, path)
  if type(path) ~= "string" then
    errors.raise(errors.InvalidArgument("path", "a string expected, got " .. type(path)))
  end
  if path == "" then errors.raise(errors.InvalidArgument("path", "an empty path")) end
  if path:find("\0", 1, true) then errors.raise(errors.InvalidArgument("path", "contains a NUL byte")) end
  local norm, dotdot = options.normalize(path)
  if dotdot then
    errors.raise(errors.InvalidArgument("path",
      ("%q: '..' is not allowed; paths stay beneath the work dir"):format(path)))
  end
  if norm:sub(1, 1) == "/" then
    for _, root in ipairs { options.SANDBOX_WORKDIR, st.work_dir } do
      if options.is_under(norm, root) then return norm:sub(#root + 2) end
    end
    errors.raise(errors.InvalidArgument("path",
      ("%q is outside the work dir; give a path relative to it"):format(path)))
  end
  if norm == "." then errors.raise(errors.InvalidArgument("path", ("%q names the work dir itself"):format(path))) end
  return norm
end

-- code: the core's condition ("not_found", "too_large"), a field of the
-- error so hosts pick answers by it, never by the message.
local function file_error(kind, msg, code)
  return errors.from_core(kind, msg, { option = kind == "InvalidArgument" and "path" or nil, code = code })
end

-- writer (sbxd only): function(core_session, rel_path, data, max_bytes)
-- -> true | nil, kind, msg, doing the core's put elsewhere (off its loop);
-- with a writer, data may also be sbxd's request body object (#data its
-- length), which only the writer reads.
function Session:put_bytes(path, data, writer)
  local st = live(self)
  local rel = rel_path(st, path)
  if type(data) ~= "string" and not (writer and type(data) == "userdata") then
    errors.raise(errors.InvalidArgument("data", "a string of bytes expected, got " .. type(data)))
  end
  if #data > st.max_file_bytes then
    errors.raise(errors.InvalidArgument("data",
      ("%d bytes is over the session's max_file_bytes (%d)"):format(#data, st.max_file_bytes)))
  end
  local ok, kind, msg
  if writer then
    ok, kind, msg = writer(st.core, rel, data, st.max_file_bytes)
  else
    ok, kind, msg = st.core:put(rel, data, st.max_file_bytes)
  end
  if not ok then errors.raise(file_error(kind, msg)) end
end

function Session:get_bytes(path)
  local st = live(self)
  local data, kind, msg, code = st.core:get(rel_path(st, path), st.max_file_bytes)
  if not data then errors.raise(file_error(kind, msg, code)) end
  return data
end

-- The allowlist proxy's figures for this session: { accepted, allowed,
-- refused, failed, active, bytes_up, bytes_down }; nil when the session
-- has no proxy (blocked) or its proxy is served by a host (sbxd: see its
-- /metrics).
function Session:proxy_stats()
  local st = live(self)
  if not (st.proxy and st.proxy.stats) then return nil end
  local t, _, msg = st.proxy:stats()
  if not t then errors.raise(errors.SandboxExecutionError("proxy_stats: " .. tostring(msg), st.backend, 0)) end
  return t
end

-- ---- The host API (see the top of this file) ----

function Session:limits()
  local st = live(self)
  return { max_file_bytes = st.max_file_bytes, timeout_s = st.timeout_s }
end

function Session:admit_run(cmd, opts)
  local st = live(self)
  return st.engine:admit_run(st, cmd, opts)
end

function Session:warm_fd(o)
  local st = live(self)
  if o.network_allowlist then return st.core:own_offer_fd() end
  return st.core:offer_fd(o.network_mode or "blocked")
end

function Session:start_run(o)
  if self._closed or self._st.closed then
    return nil, errors.SessionClosed(("session %s is closed"):format(self.name))
  end
  return core_run(self._st, o)
end

-- For hosts that stream a file rather than hold it (sbxd's GET, and the
-- appends of its uploads).
function Session:open_file(path)
  local st = live(self)
  local fd, size_or_kind, msg, code = st.core:open_file(rel_path(st, path), st.max_file_bytes)
  if not fd then errors.raise(file_error(size_or_kind, msg, code)) end
  return fd, size_or_kind
end

function Session:is_closed()
  return self._closed or self._st.closed
end

function Session:handle()
  local st = live(self)
  return { kind = "sbx.local", id = st.id, name = st.name }
end

function Session:alive()
  if self._closed or self._st.closed then return false end
  return self._st.core:alive()
end

-- CPU time the session's runs used (microseconds, from its cgroup), or
-- nil when the session has no cpu_milli ceiling.
function Session:cpu_usage_us()
  local st = live(self)
  return st.core:cpu_usage_us()
end

-- Owner: end every process of the session and remove what it created (a
-- pinned work dir stays).  Reference: detach only.  Closing twice is fine.
-- Raises SandboxExecutionError when cleanup left something behind (the
-- session is closed all the same).
function Session:close()
  if getmetatable(self) ~= Session then
    errors.raise(errors.InvalidArgument("self", "a session expected (use s:close())"))
  end
  if self._closed then return end
  self._closed = true
  if not self.is_owner then return end
  local st = self._st
  if st.closed then return end
  st.closed = true
  registry[st.id] = nil
  if st.proxy then st.proxy:close() end
  local ok, _, msg = st.core:close()
  st.engine:close({ id = st.id, name = st.name, backend = st.backend, created_at = st.created_at,
    work_dir = st.work_dir }, policy.caller_ctx(st.caller), st.policy)
  if not ok then
    errors.raise(errors.SandboxExecutionError("closing the session: " .. tostring(msg), st.backend, 0))
  end
end

M.Session = Session

return M

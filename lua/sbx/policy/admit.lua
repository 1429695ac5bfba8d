-- sbx.policy.admit: admission, the one path from a caller's options to
-- what the core is given, for on-device sessions (sbx.session) and sbxd
-- alike.  sbx.options checks the options' shapes and types (and what this
-- build can honour); the engine then applies the policy's rules
-- (sbx.policy.ceilings) and hooks, with the caller's context (origin,
-- tenant).  Installed as Engine:admit_session and Engine:admit_run.

local errors = require "sbx.errors"
local options = require "sbx.options"
local hooks = require "sbx.policy.hooks"
local narrow = require "sbx.policy.narrow"
local secrets = require "sbx.secrets"

local M = {}

-- Session options that are the host's business, not the request's: the
-- hooks never see them, nor may they return them.
M.HOST_KEYS = { policy = true, proxy_host = true, wait = true, caller = true }

-- admit_session(engine, opts, octx) -> normalized session options
-- (sbx.options), gen.  octx = { realpath, extra_forbidden, caller }.  The
-- caller's options are checked (sbx.options), then the policy's rules and
-- on_session_open see them with the defaults filled in; an adjusted (or
-- clamped) request is checked again.
function M.session(engine, opts, octx)
  octx = octx or {}
  local gen = engine.current
  local o = options.session(opts, gen)
  local req = {}
  for k, v in pairs(opts) do
    if not M.HOST_KEYS[k] then req[k] = v end
  end
  -- Rules and hooks see the secrets' names and hosts, never a value, and
  -- cannot change them.
  if o.secrets then req.secrets = secrets.public(o.secrets) end
  req.backend, req.network_mode, req.timeout_s = o.backend, o.network_mode, o.timeout_s
  req.max_file_bytes = o.max_file_bytes
  local hooked = gen.hooks.on_session_open ~= nil
  local host = { realpath = octx.realpath, extra_forbidden = octx.extra_forbidden }
  local r = engine:session_open(req, hooks.caller_ctx(octx.caller), gen, host)
  if hooked or gen.ceilings.clamp then
    r.secrets = opts.secrets
    local ok, o2 = pcall(options.session, r, gen)
    if not ok then
      -- What the hook returned does not pass the option checks: the
      -- hook's fault, so the policy denies.
      if errors.is(o2, "InvalidArgument") and hooked then hooks.malformed(gen, "on_session_open", o2.message) end
      error(o2, 0)
    end
    o = o2
  end
  return o, gen
end

local function env_map(kvs)
  local out = {}
  for _, kv in ipairs(kvs) do
    local k, v = kv:match("^([^=]*)=(.*)$")
    if k then out[k] = v end
  end
  return out
end

local function timeout_ms(s)
  return math.min(4294967295, math.max(1, math.ceil(s * 1000)))
end

-- admit_run(engine, st, cmd, opts, extra_keys) -> run options
-- (sbx.options.run) after the policy: st is the session's state
-- (st.policy: the generation it was opened under).
function M.run(engine, st, cmd, opts, extra_keys)
  local gen = engine:for_session(st.policy)
  local view = setmetatable({ policy = gen }, { __index = st })
  local o = options.run(cmd, opts, view, extra_keys)
  local hooked = gen.hooks.on_run ~= nil
  local req = {
    cmd = cmd, argv = o.argv, script_type = o.script_type, cwd = o.cwd, timeout_s = o.timeout_s,
    network_mode = o.network_mode, stdin = o.stdin_data ~= nil or o.stdin_live == true,
    pty = o.pty_rows ~= nil,
    network_allowlist = o.network_allowlist and { unpack(o.network_allowlist) } or nil,
    -- Only a hook reads the environment: no need to build it otherwise.
    env = hooked and env_map(o.env) or nil,
  }
  local ctx = hooks.caller_ctx(st.caller)
  ctx.session = { id = st.id, name = st.name, backend = st.backend,
    network_mode = st.network_mode or "blocked", created_at = st.created_at, work_dir = st.work_dir }
  local r = engine:run(req, ctx, gen)
  if r.timeout_s then o.timeout_ms = timeout_ms(r.timeout_s) end
  o.timeout_s = nil
  if not hooked then return M.run_allowlist(gen, st, o) end
  o.argv = r.argv
  for _, a in ipairs(o.argv) do
    if #a >= options.MAX_ARG_BYTES then
      hooks.malformed(gen, "on_run", "an argument is longer than the kernel accepts")
    end
  end
  local ok, err = pcall(function()
    o.env = options.merge_env(options.check_env("env", r.env or {}))
    o.cwd = r.cwd and options.resolve_cwd(r.cwd) or nil
  end)
  if not ok then hooks.malformed(gen, "on_run", errors.is(err) and err.message or tostring(err)) end
  o.network_mode = r.network_mode or o.network_mode
  -- A hook may give the run a list of its own, or narrow its mode below
  -- allowlist (the list then has nothing left to say).
  if r.network_allowlist ~= nil then
    local ok2, list = pcall(options.run, { "true" }, { network_allowlist = r.network_allowlist,
      network_mode = "allowlist" }, view)
    if not ok2 then hooks.malformed(gen, "on_run", errors.is(list) and list.message or tostring(list)) end
    o.network_allowlist = list.network_allowlist
  end
  if o.network_mode ~= "allowlist" then o.network_allowlist = nil end
  return M.run_allowlist(gen, st, o)
end

-- A run's own allow-list must lie within its session's (sbx.policy.narrow);
-- in an open session any list is narrower than the session's ceiling.
function M.run_allowlist(gen, st, o)
  if o.network_allowlist and st.network_mode ~= "open" then
    narrow.check(gen, st.network_allowlist or gen.network.allowlist, o.network_allowlist)
  end
  return o
end

return M

-- sbx.policy.ceilings: the policy's rules on a request, one place per
-- rule.  A session request against the ceilings (backends, network mode,
-- timeouts, sizes, resources) and the filesystem rules (forbidden paths,
-- writable roots, allow_ro/allow_rw); a run request against the run
-- ceilings and its session's network mode.  Above a ceiling is
-- PolicyDenied naming the rule, or lowered to it when ceilings.clamp is
-- set (numbers only).  sbx.options checks shapes and types before these.

local errors = require "sbx.errors"
local paths = require "sbx.options"
local hooks = require "sbx.policy.hooks"

local M = {}

-- deny(gen, rule, msg, bare): raises PolicyDenied(rule), logged.  The
-- message names the policy unless bare (the text already does, or never
-- did: messages are kept as callers have always seen them).
local function deny(gen, rule, msg, bare)
  local e = errors.PolicyDenied(rule, bare and msg or ("policy %s: %s"):format(gen.name, msg))
  gen.emit("denied: " .. e.message)
  errors.raise(e)
end
M.deny = deny

local function width(mode) return paths.NETWORK_MODES[mode] end
M.width = width

local function under_any(p, prefixes)
  for _, pre in ipairs(prefixes) do
    if p == pre or paths.is_under(p, pre) then return true end
  end
  return false
end

-- ---- the filesystem rules ----

-- Directories a pinned work dir (or state dir) may not lie in: the sandbox
-- writes there.
local SYSTEM_TREES = {
  "/proc", "/sys", "/dev", "/etc", "/run", "/var/run", "/boot", "/usr", "/bin", "/sbin",
  "/lib", "/lib32", "/lib64",
}

-- Shared host directories that may hold a work dir but never be one: the
-- core hands the work dir to the sandbox's uid.
local SHARED_DIRS = {
  "/tmp", "/var", "/var/tmp", "/var/lib", "/opt", "/srv", "/mnt", "/media", "/usr/local",
  "/home", "/root",
}

-- forbidden_hit(p, path, extra) -> the forbidden entry that path is, lies
-- under or contains ("/" contains everything); nil when path is clear.
-- extra: more entries (e.g. the state dir).
function M.forbidden_hit(p, path, extra)
  local function hit(entry)
    -- Everything lies under "/": for it, only the path itself is a hit.
    return path == entry or (entry ~= "/" and paths.is_under(path, entry))
      or paths.is_under(entry, path)
  end
  for _, e in ipairs(p.filesystem.forbidden) do
    if hit(e) then return e end
  end
  for _, e in ipairs(extra or {}) do
    if hit(e) then return e end
  end
  return nil
end

-- An absolute host path without "..", normalized; nil for anything else
-- (its shape is sbx.options' to refuse).
local function host_path(v)
  if type(v) ~= "string" or v:sub(1, 1) ~= "/" or v:find("\0", 1, true) then return nil end
  local norm, dotdot = paths.normalize(v)
  if dotdot then return nil end
  return norm
end

-- A directory the sandbox will write (work_dir, state_dir): never "/",
-- never inside a system tree, never a parent of a forbidden path.
local function writable_root(gen, option, path, realpath)
  local function check_one(p)
    for _, dir in ipairs(SHARED_DIRS) do
      if p == dir then
        deny(gen, "filesystem.forbidden", ("%s %q is a shared host directory; use a directory of its own "
          .. "below it"):format(option, p), true)
      end
    end
    for _, tree in ipairs(SYSTEM_TREES) do
      if p == tree or paths.is_under(p, tree) then
        deny(gen, "filesystem.forbidden", ("%s %q lies in the system directory %s"):format(option, p, tree), true)
      end
    end
    for _, f in ipairs(gen.filesystem.forbidden) do
      if p == f or paths.is_under(f, p) then
        deny(gen, "filesystem.forbidden", ("%s %q is or contains %s, which the policy forbids")
          :format(option, p, f), true)
      end
    end
  end
  check_one(path)
  local real = realpath and realpath(path)
  if real and real ~= path then check_one(real) end
end

-- Bind paths: the path as given and as resolved (a symlink cannot smuggle
-- a forbidden one in); a path that does not exist is InvalidArgument.
local function bind_paths(gen, option, list, host, extra)
  for _, p in ipairs(list) do
    local norm = host_path(p)
    if norm then
      local hit = M.forbidden_hit(gen, norm, extra)
      if hit then
        deny(gen, "filesystem.forbidden", ("%s: %q is, lies under or contains %s, which the policy forbids")
          :format(option, norm, hit), true)
      end
      if host.realpath then
        local real = host.realpath(norm)
        if not real then errors.raise(errors.InvalidArgument(option, ("%q does not exist"):format(norm))) end
        hit = M.forbidden_hit(gen, real, extra)
        if hit then
          deny(gen, "filesystem.forbidden", ("%s: %q resolves to %q, which is, lies under or contains %s")
            :format(option, norm, real, hit), true)
        end
      else
        local f = io.open(norm, "rb")
        if not f then errors.raise(errors.InvalidArgument(option, ("%q does not exist"):format(norm))) end
        f:close()
      end
    end
  end
end

-- filesystem(gen, req, host): the host-path rules of a session request.
-- host = { realpath = function(path) -> real or nil, extra_forbidden = {...} }.
local function filesystem(gen, req, host)
  local work_dir, state_dir = host_path(req.work_dir), host_path(req.state_dir)
  if work_dir then writable_root(gen, "work_dir", work_dir, host.realpath) end
  if state_dir then writable_root(gen, "state_dir", state_dir, host.realpath) end
  local extra = {}
  for _, e in ipairs(host.extra_forbidden or {}) do extra[#extra + 1] = e end
  if state_dir then extra[#extra + 1] = state_dir end
  for _, option in ipairs { "read_only_paths", "read_write_paths" } do
    if type(req[option]) == "table" then bind_paths(gen, option, req[option], host, extra) end
  end
end

-- ---- secrets ----

-- A secret's host (a name or *.domain) within a policy pattern (the same).
local function host_within(h, pat)
  h, pat = h:lower(), pat:lower()
  if h == pat then return true end
  local suffix = pat:match("^%*(%..+)$")
  return suffix ~= nil and #h > #suffix and h:sub(-#suffix) == suffix
end

-- req.secrets here is what policies see of them: NAME = { hosts, header }
-- (sbx.secrets.public), never a value.
local function secrets_rules(gen, req)
  local rules, sec = gen.secrets, type(req.secrets) == "table" and req.secrets or {}
  if not rules then return end
  if next(sec) ~= nil and not rules.allow then
    deny(gen, "secrets.allow", "this policy does not allow secrets")
  end
  for _, name in ipairs(rules.require) do
    if sec[name] == nil then
      deny(gen, "secrets.require", ("the session must carry the secret %s"):format(name))
    end
  end
  if rules.hosts then
    for name, s in pairs(sec) do
      for _, h in ipairs(type(s) == "table" and type(s.hosts) == "table" and s.hosts or {}) do
        local ok = false
        for _, pat in ipairs(rules.hosts) do ok = ok or (type(h) == "string" and host_within(h, pat)) end
        if not ok then
          deny(gen, "secrets.hosts", ("secret %s: host %s is not within secrets.hosts (%s)")
            :format(name, tostring(h), table.concat(rules.hosts, ", ")))
        end
      end
    end
  end
end

-- ---- session ceilings ----

-- Numeric ceilings a session request is checked against: request key,
-- ceiling key, and the message callers have always seen (nil: the
-- generic one).
local SESSION_CEILINGS = {
  { "timeout_s", "max_session_timeout_s", "timeout_s = %s is over the policy's ceiling of %d s" },
  { "max_file_bytes", "max_file_bytes", "max_file_bytes = %d is over the policy's ceiling of %d" },
  { "memory_mb", "memory_mb" }, { "cpu_milli", "cpu_milli" }, { "pids", "pids" },
  { "disk_mb", "disk_mb" }, { "gpus", "gpus" }, { "shm_mb", "shm_mb" }, { "nofile", "nofile" },
}

local function numeric(gen, req, first, last)
  local c = gen.ceilings
  for i = first, last do
    local k, ck, fmt = SESSION_CEILINGS[i][1], SESSION_CEILINGS[i][2], SESSION_CEILINGS[i][3]
    local v = req[k]
    if type(v) == "number" and v > c[ck] then
      if c.clamp then
        gen.emit(("clamped %s = %s to ceilings.%s = %s"):format(k, tostring(v), ck, tostring(c[ck])))
        req[k] = c[ck]
      elseif fmt then
        deny(gen, "ceilings." .. ck, fmt:format(k == "timeout_s" and tostring(v) or v, c[ck]), true)
      else
        deny(gen, "ceilings." .. ck, ("%s = %s is over the policy's ceiling ceilings.%s = %s")
          :format(k, tostring(v), ck, tostring(c[ck])))
      end
    end
  end
end

-- session(gen, req, [host]) -> req (clamped when the policy says so);
-- raises PolicyDenied naming the rule.  Values of the wrong type are left
-- for the option checks (InvalidArgument).  With host (the admission
-- path: sbx.policy.admit), the filesystem rules are checked too.
function M.session(gen, req, host)
  local c = gen.ceilings
  if type(req.backend) == "string" then
    local ok = false
    for _, b in ipairs(c.backends) do ok = ok or b == req.backend end
    if not ok then
      deny(gen, "ceilings.backends", ("backend %q is not allowed by policy %s (allowed: %s)"):format(
        req.backend, gen.name, table.concat(c.backends, ", ")), true)
    end
  end
  if type(req.network_mode) == "string" and width(req.network_mode)
    and width(req.network_mode) > width(c.network_mode) then
    deny(gen, "ceilings.network_mode", ("network_mode %q is wider than the policy allows (%q)")
      :format(req.network_mode, c.network_mode), true)
  end
  numeric(gen, req, 1, 2)
  secrets_rules(gen, req)
  if host then filesystem(gen, req, host) end
  numeric(gen, req, 3, #SESSION_CEILINGS)
  for _, pair in ipairs { { "read_only_paths", "allow_ro" }, { "read_write_paths", "allow_rw" } } do
    local list, allowed = req[pair[1]], gen.filesystem[pair[2]]
    if type(list) == "table" and allowed then
      for _, p in ipairs(list) do
        if type(p) == "string" and not under_any((paths.normalize(p)), allowed) then
          deny(gen, "filesystem." .. pair[2], ("%s: %q is not below any path of filesystem.%s (%s)")
            :format(pair[1], p, pair[2], #allowed == 0 and "none allowed" or table.concat(allowed, ", ")))
        end
      end
    end
  end
  return req
end

-- ---- run ceilings ----

local RUN_FIELDS = { cmd = 1, argv = 1, script_type = 1, env = 1, cwd = 1, timeout_s = 1,
  network_mode = 1, stdin = 1, network_allowlist = 1, pty = 1 }

-- run(gen, req, ctx, [hook]) -> req with the run ceilings applied; raises.
-- The request's shape is checked here too: it may come from a hook (hook
-- names it, and a bad shape is that hook's malformed answer) or from a
-- direct caller of Engine:run.  ctx.session.network_mode: the session's
-- mode, which a run may narrow, never widen.
function M.run(gen, req, ctx, hook)
  local c = gen.ceilings
  local function bad(what)
    if hook then hooks.malformed(gen, hook, what) end
    errors.raise(errors.InvalidArgument("req", what))
  end
  for k in pairs(req) do
    if not RUN_FIELDS[k] then bad("unknown field " .. tostring(k)) end
  end
  if type(req.argv) ~= "table" or #req.argv == 0 then bad("argv must be a non-empty array of strings") end
  for i, a in pairs(req.argv) do
    if type(i) ~= "number" or type(a) ~= "string" or a:find("\0", 1, true) then
      bad("argv must be a non-empty array of strings without NUL")
    end
  end
  if req.env ~= nil then
    if type(req.env) ~= "table" then bad("env must map names to strings") end
    for k, v in pairs(req.env) do
      if type(k) ~= "string" or k == "" or k:find("[=%z]") or type(v) ~= "string" or v:find("\0", 1, true) then
        bad("env must map names (no '=' or NUL) to strings")
      end
    end
  end
  if req.cwd ~= nil and type(req.cwd) ~= "string" then bad("cwd must be a string") end
  local t = req.timeout_s
  if t ~= nil then
    if type(t) ~= "number" or t ~= t or t <= 0 then bad("timeout_s must be a number > 0") end
    if t > c.max_run_timeout_s then
      if c.clamp then
        gen.emit(("clamped run timeout_s = %s to ceilings.max_run_timeout_s = %s"):format(t, c.max_run_timeout_s))
        req.timeout_s = c.max_run_timeout_s
      else
        deny(gen, "ceilings.max_run_timeout_s", ("timeout_s = %s is over the policy's ceiling of %d s")
          :format(tostring(t), c.max_run_timeout_s), true)
      end
    end
  end
  local mode = req.network_mode
  if mode ~= nil and (type(mode) ~= "string" or not width(mode)) then
    bad('network_mode must be "blocked", "allowlist" or "open"')
  end
  local sess = ctx and ctx.session
  local ceiling = type(sess) == "table" and sess.network_mode or c.network_mode
  if mode and width(mode) > (width(ceiling) or 0) then
    deny(gen, "session.network_mode", ("this run asks for network_mode %q, wider than its session's ceiling "
      .. "%q: a run may narrow the session's network mode, never widen it"):format(mode, tostring(ceiling)), true)
  end
  return req
end

return M

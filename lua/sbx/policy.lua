-- sbx.policy: the policy engine.  Loads policy files (policies/*.lua) and
-- runs their hooks; one code path serves on-device sessions (sbx.session)
-- and sbxd.  policies/README.md teaches writing a policy.
--
-- A policy is a Lua chunk returning a table: data (defaults, ceilings,
-- filesystem, seccomp, network, limits, reapply) and hooks
--   on_session_open(req, ctx)       -> true | req' | false, reason
--   on_run(req, ctx)                -> true | req' | false, reason
--   on_connect(host, port, addrs, ctx) -> true | false, reason
--   on_close(session, ctx)          -- return value ignored
-- A hook allows by returning true (or an adjusted copy of req), and denies
-- with `return false, "reason"` or `return deny("reason")`.  Returning
-- nothing denies too: a hook must say yes.  Anything else is malformed.
--
-- The chunk and its hooks run in a restricted environment (see sandbox_env:
-- copies of string/table/math, a few os time functions, pairs, pcall...,
-- log, deny, match, presets; no io, os.execute, require, load*, debug,
-- setmetatable, coroutine), loaded from source only (bytecode is refused),
-- interpreted (jit.off) under an instruction-count hook that pcall cannot
-- swallow, with a wall-clock deadline and a heap-growth budget per hook call.  A policy that fails to
-- load, and a hook that errors, runs over its budget or deadline, or
-- returns something malformed, denies (PolicyDenied naming the hook and
-- the cause); the cause is logged and the caller keeps running.
--
-- Requests above a ceiling are refused (PolicyDenied, rule "ceilings.<k>"),
-- never clamped unless the policy sets ceilings.clamp = true.
--
--   policy.load([path], [opts])  -> Engine; raises PolicyDenied.
--                                   opts.log = function(line) (default: stderr)
--   policy.engine_for(x)         -> x if it is an Engine, else load(x)
--   policy.compile(path, [opts]) -> one generation (the normalized policy)
--   policy.reload(engine, [path])-> engine:reload(path)
--   policy.check_cli(path)       -> exit status; prints the effective policy
--                                   (stdout) or the error (stderr)
--   policy.default_path(), policy.resolve(path), policy.policy_dir()
--   policy.forbidden_hit(p, path, extra) -> the forbidden entry path touches
--
-- Engine (also reads as its current policy: engine.defaults, .ceilings...):
--   engine:session_open(req, ctx, [gen]) -> req' (adjusted), gen; raises
--   engine:run(req, ctx, [gen])          -> req'; raises PolicyDenied
--   engine:connect(host, port, addrs, ctx, [gen]) -> true | false, PolicyDenied
--   engine:close(session, ctx, [gen])    -- never raises (errors are logged)
--   engine:reload([path])                -> true | nil, why (old one kept)
--   engine:for_session(gen)              -> the generation a session's runs
--                                           use: gen, or the current one if
--                                           it says reapply = true
--   engine:describe([gen])               -> the effective policy as text
--   engine.current, engine.generation    -- the live generation and its number
-- gen: the generation a session was opened under (default: the current).

local errors = require "sbx.errors"
local presets = require "sbx.presets"
local paths = require "sbx.options"
local match = require "sbx.match"

local M = {}

-- Instructions a policy chunk may execute while loading.
M.INSTRUCTION_BUDGET = 10 * 1000 * 1000
-- Per hook call, unless the policy's `limits` say less (or more, up to MAX_*).
M.HOOK_INSTRUCTIONS = 1000 * 1000
M.HOOK_MS = 100
M.MAX_HOOK_INSTRUCTIONS = 50 * 1000 * 1000
M.MAX_HOOK_MS = 2000
-- Memory a hook call may add to the Lua heap (checked every 1000 instructions).
M.HOOK_MEMORY_MB = 64
M.MAX_HOOK_MEMORY_MB = 1024
-- Largest policy file accepted.
M.MAX_BYTES = 1024 * 1024
M.HOOKS = { "on_session_open", "on_run", "on_connect", "on_close" }
-- Session options that are the host's business, not the request's: the
-- hooks never see them, nor may they return them.
local HOST_KEYS = { policy = true, proxy_host = true, wait = true, caller = true }

-- Bind paths no policy can allow, whatever it says: a typo in a policy
-- must not expose the host's kernel interfaces or its configuration.
M.HARD_FORBIDDEN = {
  "/", "/proc", "/sys", "/dev", "/etc", "/run", "/var/run", "/var/run/docker.sock", "/boot",
  "/run/containerd/containerd.sock", "/var/run/containerd/containerd.sock", "/run/docker.sock",
}

-- /etc entries no policy may bind into a sandbox: host secrets and identity.
M.NEVER_ETC = {
  ["shadow"] = true, ["shadow-"] = true, ["gshadow"] = true, ["gshadow-"] = true,
  ["sudoers"] = true, ["sudoers.d"] = true, ["ssh"] = true, ["machine-id"] = true,
  ["security"] = true, ["krb5.keytab"] = true, ["passwd-"] = true, ["group-"] = true,
}

-- Built-in values for what a policy leaves out (they equal default.lua's).
local BUILTIN = {
  defaults = {
    backend = "userns",
    network_mode = "blocked",
    session_timeout_s = 3600,
    max_file_bytes = 256 * 1024 * 1024,
    hostname = "sandbox",
    tmp_bytes = 256 * 1024 * 1024,
    shm_bytes = 64 * 1024 * 1024,
  },
  ceilings = {
    backends = { "userns", "privileged", "bubblewrap" },
    network_mode = "open",
    max_session_timeout_s = 86400,
    max_run_timeout_s = 86400,
    max_file_bytes = 1024 * 1024 * 1024,
    memory_mb = 4096,
    cpu_milli = 4000,
    pids = 1024,
    disk_mb = 10240,
    gpus = 0,           -- fail closed: a policy must grant GPUs
    clamp = false,
  },
  system_ro = { "/usr", "/bin", "/lib", "/lib64", "/sbin" },
}
-- Numeric ceilings a session request is checked against: request key ->
-- ceiling key.
local SESSION_CEILINGS = {
  { "memory_mb", "memory_mb" }, { "cpu_milli", "cpu_milli" }, { "pids", "pids" },
  { "disk_mb", "disk_mb" }, { "gpus", "gpus" }, { "timeout_s", "max_session_timeout_s" },
  { "max_file_bytes", "max_file_bytes" },
}

local function this_dir()
  local src = debug.getinfo(1, "S").source
  if src:sub(1, 1) ~= "@" then return nil end
  return src:sub(2):match("^(.*)/[^/]*$") or "."
end

-- The directory of policy files: sbx.paths (preloaded by sbxlua) or the
-- source tree this module was loaded from.
function M.policy_dir()
  local ok, p = pcall(require, "sbx.paths")
  if ok and type(p) == "table" and type(p.policy_dir) == "string" then
    return p.policy_dir, p.root
  end
  local dir = this_dir()
  if not dir then return "policies", "." end
  -- Installed as a rock (rockspec/), the policies sit beside the modules.
  local f = io.open(dir .. "/policies/default.lua", "rb")
  if f then
    f:close()
    return dir .. "/policies", dir
  end
  -- dir is <root>/lua/sbx: strip the suffix rather than append "../..".
  local root = dir:match("^(.*)/lua/sbx$")
  if root == nil then
    root = dir == "lua/sbx" and "." or dir .. "/../.."
  elseif root == "" then
    root = "/"
  end
  return root .. "/policies", root
end

function M.default_path()
  return (M.policy_dir()) .. "/default.lua"
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- resolve(name): absolute paths as given; relative ones against the current
-- directory, then the project root, then the policy dir.
function M.resolve(name)
  if name == nil then return M.default_path() end
  if name:sub(1, 1) == "/" then return name end
  if exists(name) then return name end
  local dir, root = M.policy_dir()
  if root and exists(root .. "/" .. name) then return root .. "/" .. name end
  if exists(dir .. "/" .. name) then return dir .. "/" .. name end
  return name
end

local function copy(t)
  if type(t) ~= "table" then return t end
  local out = {}
  for k, v in pairs(t) do out[k] = copy(v) end
  return out
end

-- ---- clock, logging ----

-- A monotonic clock in milliseconds: sbx.core's (sbxlua, sbxd, the rock),
-- else sbx.clock's, else os.clock (CPU time: a policy hook cannot sleep or
-- wait, it can only compute, so its CPU time is its wall time).  No FFI
-- declarations here: C declarations are global to the process and would
-- clash with other modules' own.
local now_ms = os.clock
do
  local ok, core = pcall(require, "sbx.core")
  if ok and type(core) == "table" and type(core.monotonic_ms) == "function" then
    now_ms = core.monotonic_ms
  else
    local ok2, clock = pcall(require, "sbx.clock")
    if ok2 and type(clock) == "table" and type(clock.now_ns) == "function" then
      local now_ns = clock.now_ns
      now_ms = function() return now_ns() / 1e6 end
    else
      now_ms = function() return os.clock() * 1000 end
    end
  end
end
M.now_ms = now_ms

-- The default log sink: one line on stderr.
function M.stderr_log(line)
  io.stderr:write(line, "\n")
end

-- ---- the restricted environment and the guard ----

local SELF = debug.getinfo(1, "S").source
local MAX_REP = 16 * 1024 * 1024

-- guard(state, budget, ms, fn, ...) -> pcall(fn, ...)'s results, with fn
-- bounded by an instruction budget and a wall-clock deadline.  The count
-- hook raises only in code other than this file's own (the policy's, or
-- the matchers it calls), so it cannot break our bookkeeping; once it has
-- fired, the policy's pcall rethrows (state.exceeded), so catching the
-- error does not let the policy go on.
local STEP = 1000
local function pack(...) return { n = select("#", ...), ... } end

-- string with rep capped and dump removed: the policy's `string` is a copy
-- of it, and while policy code runs it is also what string methods
-- ("x"):rep(n) resolve to (the string metatable's __index), so the cap
-- cannot be walked around.  Never handed to a policy, so never changed.
local safe_string = {}
for k, v in pairs(string) do safe_string[k] = v end
safe_string.dump = nil
safe_string.rep = function(s, n)
  if type(s) == "string" and type(n) == "number" and #s * n > MAX_REP then
    error(("string.rep: a result over %d bytes"):format(MAX_REP), 2)
  end
  return string.rep(s, n)
end
local string_meta = getmetatable("")

local function guard(state, budget, ms, fn, ...)
  state.exceeded = nil
  local used, deadline = 0, now_ms() + ms
  local mem_max = collectgarbage("count") + (state.memory_kb or 64 * 1024)
  local old_hook, old_mask, old_count = debug.gethook()
  local old_index = string_meta.__index
  string_meta.__index = safe_string
  debug.sethook(function()
    used = used + STEP
    if not state.exceeded then
      if used > budget then
        state.exceeded = ("ran over its budget of %d instructions"):format(budget)
      elseif now_ms() > deadline then
        state.exceeded = ("ran past its deadline of %d ms"):format(ms)
      elseif collectgarbage("count") > mem_max then
        state.exceeded = ("ran over its memory budget of %d MiB"):format((state.memory_kb or 65536) / 1024)
      end
    end
    if state.exceeded then
      local info = debug.getinfo(2, "S")
      if info and info.source ~= SELF then error(state.exceeded, 0) end
    end
  end, "", STEP)
  local res = pack(pcall(fn, ...))
  debug.sethook()
  string_meta.__index = old_index
  if old_hook then debug.sethook(old_hook, old_mask, old_count) end
  if state.exceeded then return { n = 2, false, state.exceeded, exceeded = true } end
  return res
end

-- Deep copy into the policy's hands, and back: only plain data crosses.
local function data_copy(v, depth)
  if type(v) ~= "table" then
    if type(v) == "function" or type(v) == "userdata" or type(v) == "thread" or type(v) == "cdata" then
      return nil
    end
    return v
  end
  depth = depth or 0
  if depth > 16 then return nil end
  local out = {}
  for k, x in pairs(v) do
    if type(k) == "string" or type(k) == "number" then out[k] = data_copy(x, depth + 1) end
  end
  return out
end

-- The restricted environment of one policy generation.
local function sandbox_env(state, emit)
  local function guarded_pcall(f, ...)
    local res = pack(pcall(f, ...))
    -- The budget error must reach our own pcall, whatever the chunk catches.
    if state.exceeded then error(state.exceeded, 0) end
    return unpack(res, 1, res.n)
  end
  local str = copy(safe_string)
  local function list_matches(list, host, port, addrs)
    return match.compile(list, "list"):match(host, port, addrs)
  end
  local env = {
    string = str, table = copy(table), math = copy(math),
    os = { time = os.time, clock = os.clock, date = os.date, difftime = os.difftime },
    pairs = pairs, ipairs = ipairs, type = type, tostring = tostring, tonumber = tonumber,
    select = select, error = error, assert = assert, pcall = guarded_pcall, next = next,
    unpack = unpack,
    presets = copy(presets),
    sbx = {
      PYPI_HOSTS = copy(presets.PYPI_HOSTS), NPM_HOSTS = copy(presets.NPM_HOSTS),
      CLOUD_METADATA_DENY = copy(presets.CLOUD_METADATA_DENY),
    },
    match = {
      host = match.host, normalize_host = match.normalize_host, list = list_matches,
      parse_ip = function(s)
        local a = match.ip.parse(s)
        return a and match.ip.tostring(a) or nil
      end,
      cidr = function(cidr, addr)
        local c, a = match.ip.parse_cidr(cidr), match.ip.parse(addr)
        if not c or not a then return false end
        local inner = match.ip.unwrap(a)
        return match.ip.in_cidr(a, c) or (inner ~= nil and match.ip.in_cidr(inner, c))
      end,
    },
    log = function(...)
      local parts = {}
      for i = 1, select("#", ...) do parts[#parts + 1] = tostring((select(i, ...))) end
      emit(table.concat(parts, " "))
    end,
    deny = function(reason) return false, tostring(reason or "denied") end,
  }
  env._G = env
  return env
end

local function deny(path, cause)
  return errors.PolicyDenied("policy.load",
    ("policy %s: %s; every session is denied until it is fixed"):format(path, cause))
end

-- run_chunk(path, source, env, state) -> the value the chunk returns, or raises.
local function run_chunk(path, source, env, state)
  if source:sub(1, 1) == "\27" then
    errors.raise(deny(path, "precompiled bytecode is refused, give the Lua source"))
  end
  local chunk, err = loadstring(source, "@" .. path)
  if not chunk then errors.raise(deny(path, err)) end
  setfenv(chunk, env)
  -- Count hooks do not fire in JIT-compiled traces: interpret the chunk and
  -- every function defined in it (the hooks).
  if jit then jit.off(chunk, true) end
  local res = guard(state, M.INSTRUCTION_BUDGET, M.MAX_HOOK_MS * 5, chunk)
  if res.exceeded then errors.raise(deny(path, res[2])) end
  if not res[1] then errors.raise(deny(path, tostring(res[2]))) end
  return res[2]
end

-- ---- checking the data ----

-- The source being checked, so that a data error can name its line.
local checking_source

-- locate(what) -> "LINE: " for a message naming a field ("defaults.backend
-- must be ..."): the line where that field is set, found by looking for
-- each component "name =" in turn; "" when it cannot be found.
local function locate(what)
  local src = checking_source
  local field = type(what) == "string" and what:match("^([%a_][%w_.]*)")
  if not src or not field then return "" end
  local lines = {}
  for l in (src .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local at = 1
  for comp in field:gmatch("[^.]+") do
    local found
    for i = at, #lines do
      if lines[i]:find("%f[%w_]" .. comp .. "%s*=") and not lines[i]:match("^%s*%-%-") then found = i break end
    end
    if not found then return at > 1 and (at .. ": ") or "" end
    at = found
  end
  return at .. ": "
end

local function check(cond, path, what)
  if not cond then
    local where = locate(what)
    errors.raise(deny(where ~= "" and (path .. ":" .. where:sub(1, -3)) or path, what))
  end
end

local function check_table(v, path, what)
  check(v == nil or type(v) == "table", path, what .. " must be a table")
  return v or {}
end

local function check_strlist(v, path, what)
  check(type(v) == "table", path, what .. " must be an array of strings")
  local out = {}
  for i, s in ipairs(v) do
    check(type(s) == "string" and s ~= "", path, ("%s[%d] must be a non-empty string"):format(what, i))
    out[i] = s
  end
  return out
end

local function check_abs_paths(v, path, what)
  local out = check_strlist(v, path, what)
  for i, p in ipairs(out) do
    local norm = paths.normalize(p)
    check(p:sub(1, 1) == "/" and norm == p, path,
      ("%s[%d] = %q must be an absolute, normalized path"):format(what, i, p))
  end
  return out
end

local function check_etc(v, path)
  local out = check_strlist(v, path, "filesystem.etc")
  for i, name in ipairs(out) do
    local first = name:match("^[^/]+")
    local norm, dotdot = paths.normalize("/" .. name)
    check(name:sub(1, 1) ~= "/" and norm == "/" .. name and not dotdot and first, path,
      ("filesystem.etc[%d] = %q must be a name relative to /etc"):format(i, name))
    check(not M.NEVER_ETC[first], path,
      ("filesystem.etc[%d] = %q exposes host secrets and is never allowed"):format(i, name))
  end
  return out
end

local function number_field(t, key, path, section, min)
  local v = t[key]
  check(v == nil or (type(v) == "number" and v == v and v >= (min or 0)), path,
    ("%s.%s must be a number >= %d"):format(section, key, min or 0))
  return v
end

local function merge_defaults(raw, path)
  local d = check_table(raw.defaults, path, "defaults")
  local out = copy(BUILTIN.defaults)
  for k, v in pairs(d) do out[k] = v end
  for _, k in ipairs { "backend", "network_mode", "hostname" } do
    check(type(out[k]) == "string", path, "defaults." .. k .. " must be a string")
  end
  for _, k in ipairs { "session_timeout_s", "max_file_bytes", "tmp_bytes", "shm_bytes" } do
    check(type(out[k]) == "number", path, "defaults." .. k .. " must be a number")
    number_field(out, k, path, "defaults", 0)
  end
  -- Byte counts go to the core as integers.
  for _, k in ipairs { "max_file_bytes", "tmp_bytes", "shm_bytes" } do
    check(out[k] == math.floor(out[k]) and out[k] <= 2 ^ 53, path, "defaults." .. k .. " must be an integer")
  end
  check(#out.hostname <= 64 and out.hostname:match("^[%w][%w.-]*$") ~= nil, path,
    "defaults.hostname must be a host name (letters, digits, '.', '-'; at most 64)")
  number_field(out, "run_timeout_s", path, "defaults", 0)
  local env = check_table(out.env, path, "defaults.env")
  for k, v in pairs(env) do
    check(type(k) == "string" and type(v) == "string", path, "defaults.env must map strings to strings")
  end
  out.env = copy(env)
  return out
end

local function merge_ceilings(raw, path)
  local c = check_table(raw.ceilings, path, "ceilings")
  local out = copy(BUILTIN.ceilings)
  for k, v in pairs(c) do out[k] = copy(v) end
  out.backends = check_strlist(out.backends, path, "ceilings.backends")
  check(type(out.network_mode) == "string", path, "ceilings.network_mode must be a string")
  check(paths.NETWORK_MODES[out.network_mode] ~= nil, path,
    'ceilings.network_mode must be "blocked", "allowlist" or "open"')
  for _, b in ipairs(out.backends) do
    local known = false
    for _, k in ipairs(paths.BACKENDS) do known = known or k == b end
    check(known, path, ("ceilings.backends: unknown backend %q"):format(b))
  end
  for _, k in ipairs { "max_session_timeout_s", "max_run_timeout_s", "max_file_bytes", "memory_mb",
    "cpu_milli", "pids", "disk_mb", "gpus" } do
    check(type(out[k]) == "number", path, "ceilings." .. k .. " must be a number")
    number_field(out, k, path, "ceilings", 0)
  end
  check(type(out.clamp) == "boolean", path, "ceilings.clamp must be a boolean")
  return out
end

-- A list of absolute prefixes, or nil (no restriction beyond forbidden).
local function opt_prefixes(v, path, what)
  if v == nil then return nil end
  return check_abs_paths(v, path, what)
end

-- normalize(raw, path) -> the policy as the rest of sbx reads it.
local function normalize(raw, path)
  local fs = check_table(raw.filesystem, path, "filesystem")
  local forbidden = check_abs_paths(fs.forbidden or {}, path, "filesystem.forbidden")
  local seen = {}
  for _, p in ipairs(forbidden) do seen[p] = true end
  for _, p in ipairs(M.HARD_FORBIDDEN) do
    if not seen[p] then forbidden[#forbidden + 1] = p end
  end
  local seccomp = check_table(raw.seccomp, path, "seccomp")
  local network = check_table(raw.network, path, "network")
  local denylist = check_strlist(network.denylist or presets.CLOUD_METADATA_DENY, path, "network.denylist")
  local ok, err = pcall(match.compile, denylist, "network.denylist")
  check(ok, path, tostring(err))
  local allowlist = nil
  if network.allowlist ~= nil then
    allowlist = check_strlist(network.allowlist, path, "network.allowlist")
    ok, err = pcall(match.compile, allowlist, "network.allowlist")
    check(ok, path, tostring(err))
  end
  local limits = check_table(raw.limits, path, "limits")
  local lim = {
    instructions = limits.hook_instructions or M.HOOK_INSTRUCTIONS,
    ms = limits.hook_ms or M.HOOK_MS,
    memory_mb = limits.hook_memory_mb or M.HOOK_MEMORY_MB,
  }
  check(type(lim.memory_mb) == "number" and lim.memory_mb >= 1 and lim.memory_mb <= M.MAX_HOOK_MEMORY_MB, path,
    ("limits.hook_memory_mb must be a number from 1 to %d"):format(M.MAX_HOOK_MEMORY_MB))
  check(type(lim.instructions) == "number" and lim.instructions >= 1000
    and lim.instructions <= M.MAX_HOOK_INSTRUCTIONS, path,
    ("limits.hook_instructions must be a number from 1000 to %d"):format(M.MAX_HOOK_INSTRUCTIONS))
  check(type(lim.ms) == "number" and lim.ms >= 1 and lim.ms <= M.MAX_HOOK_MS, path,
    ("limits.hook_ms must be a number from 1 to %d"):format(M.MAX_HOOK_MS))
  check(raw.reapply == nil or type(raw.reapply) == "boolean", path, "reapply must be a boolean")
  check(raw.name == nil or type(raw.name) == "string", path, "name must be a string")
  local hooks = {}
  for _, h in ipairs(M.HOOKS) do
    check(raw[h] == nil or type(raw[h]) == "function", path, h .. " must be a function")
    hooks[h] = raw[h]
  end
  local known = { name = 1, defaults = 1, ceilings = 1, filesystem = 1, seccomp = 1, network = 1,
    limits = 1, reapply = 1, on_session_open = 1, on_run = 1, on_connect = 1, on_close = 1 }
  for k in pairs(raw) do
    check(known[k] ~= nil, path, ("unknown field %s (a typo? known: name, defaults, ceilings, "
      .. "filesystem, seccomp, network, limits, reapply, on_session_open, on_run, on_connect, "
      .. "on_close)"):format(tostring(k)))
  end
  local p = {
    path = path,
    name = raw.name or path,
    defaults = merge_defaults(raw, path),
    ceilings = merge_ceilings(raw, path),
    filesystem = {
      system_ro = check_abs_paths(fs.system_ro or BUILTIN.system_ro, path, "filesystem.system_ro"),
      etc = check_etc(fs.etc or {}, path),
      forbidden = forbidden,
      allow_ro = opt_prefixes(fs.allow_ro, path, "filesystem.allow_ro"),
      allow_rw = opt_prefixes(fs.allow_rw, path, "filesystem.allow_rw"),
    },
    seccomp = { deny = check_strlist(seccomp.deny or {}, path, "seccomp.deny") },
    network = { denylist = denylist, allowlist = allowlist },
    limits = lim,
    reapply = raw.reapply == true,
    hooks = hooks,
    raw = raw,
  }
  check(paths.NETWORK_MODES[p.defaults.network_mode] ~= nil, path,
    'defaults.network_mode must be "blocked", "allowlist" or "open"')
  return p
end

-- compile(path, opts) -> a generation: the normalized policy with its hooks
-- and sandbox.  Raises PolicyDenied (rule "policy.load").  opts: log (the
-- sink of the policy's log lines), source (the file's text, already read:
-- sbxd's policy worker compiles exactly what the loop did), hook_runner
-- (who calls the hooks: see call_hook).
function M.compile(path, opts)
  opts = opts or {}
  local file = M.resolve(path)
  local source = opts.source
  if type(source) ~= "string" then
    local f, err = io.open(file, "rb")
    if not f then errors.raise(deny(file, "cannot read it: " .. tostring(err))) end
    source = f:read(M.MAX_BYTES + 1)
    f:close()
  end
  source = source or ""
  if #source > M.MAX_BYTES then
    errors.raise(deny(file, ("larger than %d bytes"):format(M.MAX_BYTES)))
  end
  local state = {}
  local sink = opts.log or M.stderr_log
  local label = { file }
  local function emit(msg) sink(("[policy %s] %s"):format(label[1], msg)) end
  local raw = run_chunk(file, source, sandbox_env(state, emit), state)
  if type(raw) ~= "table" then
    errors.raise(deny(file, "it returned " .. type(raw) .. ", a table expected"))
  end
  checking_source = source
  local ok, gen = pcall(normalize, raw, file)
  checking_source = nil
  if not ok then error(gen, 0) end
  label[1] = gen.name
  gen.state, gen.emit = state, emit
  gen.file, gen.source, gen.runner = file, source, opts.hook_runner
  state.memory_kb = gen.limits.memory_mb * 1024
  gen.loaded_at = os.time()
  gen.allow_matcher = gen.network.allowlist and match.compile(gen.network.allowlist, "network.allowlist")
  gen.deny_matcher = match.compile(gen.network.denylist, "network.denylist")
  return gen
end

-- ---- hook verdicts ----

local function hook_denied(gen, hook, cause, fields)
  local e = errors.PolicyDenied(hook, ("policy %s: %s %s"):format(gen.name, hook, cause))
  for k, v in pairs(fields or {}) do e[k] = v end
  gen.emit("denied: " .. e.message)
  return e
end

-- run_hook(gen, hook, ...) -> pcall's results as a table (n, exceeded):
-- the hook called here, under its budget and deadline.  sbxd's policy
-- worker calls it in its own Lua state (lua/sbx/server/hookworker.lua).
function M.run_hook(gen, hook, ...)
  return guard(gen.state, gen.limits.instructions, gen.limits.ms, gen.hooks[hook], ...)
end

-- call(gen, hook, allow_table, ...) -> "allow" | "adjust", table | raises.
-- A generation compiled with a hook_runner (sbxd) has its hooks called by
-- it, with run_hook's results; it is how sbxd runs them off its loop.
local function call_hook(gen, hook, allow_table, ...)
  local res
  if gen.runner then
    res = gen.runner(gen, hook, ...)
  else
    res = M.run_hook(gen, hook, ...)
  end
  if res.exceeded then
    errors.raise(hook_denied(gen, hook, "was stopped: " .. res[2], { cause = "timeout" }))
  end
  if not res[1] then
    errors.raise(hook_denied(gen, hook, "failed: " .. tostring(res[2]), { cause = "error" }))
  end
  local v, reason = res[2], res[3]
  if v == true then return "allow" end
  if v == false or v == nil then
    if v == nil and res.n < 3 then
      errors.raise(hook_denied(gen, hook, "returned nothing: a hook allows with `return true` "
        .. "(or an adjusted request) and denies with `return false, reason`", { cause = "malformed" }))
    end
    errors.raise(hook_denied(gen, hook, "denied: " .. (type(reason) == "string" and reason
      or "(no reason given)"), { cause = "denied", reason = reason }))
  end
  if type(v) == "table" and allow_table then return "adjust", v end
  errors.raise(hook_denied(gen, hook, ("returned a malformed value (%s): expected true, %sor false "
    .. "and a reason"):format(type(v), allow_table and "an adjusted request table, " or ""),
    { cause = "malformed" }))
end

local function malformed(gen, hook, what)
  errors.raise(hook_denied(gen, hook, "returned a malformed request: " .. what, { cause = "malformed" }))
end

local function ceiling_denied(gen, rule, msg)
  local e = errors.PolicyDenied(rule, ("policy %s: %s"):format(gen.name, msg))
  gen.emit("denied: " .. e.message)
  errors.raise(e)
end

-- ---- the engine ----

local Engine = {}
Engine.__index = function(t, k)
  local m = Engine[k]
  if m ~= nil then return m end
  local cur = rawget(t, "current")
  return cur and cur[k]
end
M.Engine = Engine

function M.is_engine(x)
  return type(x) == "table" and getmetatable(x) == Engine
end

-- load([path], [opts]) -> Engine.  Raises PolicyDenied when the file
-- cannot be read, does not compile, errors, runs over budget, returns a
-- non-table or holds data of the wrong shape.
function M.load(path, opts)
  if path ~= nil and type(path) ~= "string" then
    errors.raise(errors.InvalidArgument("policy", "a path to a policy file expected, got " .. type(path)))
  end
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("opts", "a table expected, got " .. type(opts)))
  end
  local file = M.resolve(path)
  local gen = M.compile(file, opts)
  gen.generation = 1
  return setmetatable({ path = file, opts = opts or {}, current = gen, generation = 1 }, Engine)
end

-- engine_for(x) -> x when it is an Engine (a shared, reloadable one), or
-- a fresh Engine loaded from the path x (nil: the default policy).
function M.engine_for(x)
  if M.is_engine(x) then return x end
  return M.load(x)
end

function Engine:for_session(gen)
  local cur = self.current
  if gen == nil or (cur ~= gen and cur.reapply) then return cur end
  return gen
end

-- reload([path]) -> true, or nil and why.  A policy that fails to load
-- leaves the current one in place; sessions keep the generation they were
-- opened under (unless the new one says reapply = true).
function Engine:reload(path)
  local file = path and M.resolve(path) or self.path
  local ok, gen = pcall(M.compile, file, self.opts)
  local cur = self.current
  if not ok then
    local why = errors.is(gen) and gen.message or tostring(gen)
    cur.emit(("reload of %s failed, keeping generation %d: %s"):format(file, self.generation, why))
    return nil, why
  end
  self.generation = self.generation + 1
  gen.generation = self.generation
  self.path = file
  self.current = gen
  gen.emit(("reloaded from %s: generation %d%s"):format(file, gen.generation,
    gen.reapply and ", reapplied to open sessions" or ""))
  return true
end

function M.reload(engine, path)
  return engine:reload(path)
end

local function width(mode) return paths.NETWORK_MODES[mode] end

local function under_any(p, prefixes)
  for _, pre in ipairs(prefixes) do
    if p == pre or paths.is_under(p, pre) then return true end
  end
  return false
end

-- check_session_ceilings(gen, req) -> req (clamped when the policy says
-- so); raises PolicyDenied naming the ceiling.  Values of the wrong type
-- are left for the option checks (InvalidArgument).
function M.check_session_ceilings(gen, req)
  local c = gen.ceilings
  if type(req.backend) == "string" then
    local ok = false
    for _, b in ipairs(c.backends) do ok = ok or b == req.backend end
    if not ok then
      ceiling_denied(gen, "ceilings.backends", ("backend %q is not allowed (allowed: %s)"):format(
        req.backend, table.concat(c.backends, ", ")))
    end
  end
  if type(req.network_mode) == "string" and width(req.network_mode)
    and width(req.network_mode) > width(c.network_mode) then
    ceiling_denied(gen, "ceilings.network_mode", ("network_mode %q is wider than the policy allows (%q)")
      :format(req.network_mode, c.network_mode))
  end
  for _, pair in ipairs(SESSION_CEILINGS) do
    local k, ck = pair[1], pair[2]
    local v = req[k]
    if type(v) == "number" and v > c[ck] then
      if c.clamp then
        gen.emit(("clamped %s = %s to ceilings.%s = %s"):format(k, tostring(v), ck, tostring(c[ck])))
        req[k] = c[ck]
      else
        ceiling_denied(gen, "ceilings." .. ck, ("%s = %s is over the policy's ceiling ceilings.%s = %s")
          :format(k, tostring(v), ck, tostring(c[ck])))
      end
    end
  end
  for _, pair in ipairs { { "read_only_paths", "allow_ro" }, { "read_write_paths", "allow_rw" } } do
    local list, allowed = req[pair[1]], gen.filesystem[pair[2]]
    if type(list) == "table" and allowed then
      for _, p in ipairs(list) do
        if type(p) == "string" and not under_any((paths.normalize(p)), allowed) then
          ceiling_denied(gen, "filesystem." .. pair[2], ("%s: %q is not below any path of filesystem.%s (%s)")
            :format(pair[1], p, pair[2], #allowed == 0 and "none allowed" or table.concat(allowed, ", ")))
        end
      end
    end
  end
  return req
end

local function hook_ctx(gen, ctx)
  local c = data_copy(ctx or {}) or {}
  c.policy = gen.name
  c.generation = gen.generation
  return c
end

-- session_open(req, ctx, [gen]) -> req' (ceilings checked, hook applied), gen.
-- req: the session options (backend, network_mode, memory_mb, ...), with
-- the policy's defaults filled in by the caller.
function Engine:session_open(req, ctx, gen)
  gen = gen or self.current
  if type(req) ~= "table" then
    errors.raise(errors.InvalidArgument("req", "a table of session options expected"))
  end
  req = M.check_session_ceilings(gen, data_copy(req))
  if gen.hooks.on_session_open then
    local verdict, r = call_hook(gen, "on_session_open", true, data_copy(req), hook_ctx(gen, ctx))
    if verdict == "adjust" then
      local keys = {}
      for _, k in ipairs(paths.SESSION_KEYS) do keys[k] = true end
      for k in pairs(r) do
        if not keys[k] or HOST_KEYS[k] then malformed(gen, "on_session_open", "unknown field " .. tostring(k)) end
      end
      req = M.check_session_ceilings(gen, data_copy(r))
    end
  end
  return req, gen
end

local RUN_FIELDS = { cmd = 1, argv = 1, script_type = 1, env = 1, cwd = 1, timeout_s = 1,
  network_mode = 1, stdin = 1, network_allowlist = 1 }

-- check_run(gen, req, ctx, hook) -> req with ceilings applied; raises.
local function check_run(gen, req, ctx, hook)
  local c = gen.ceilings
  local function bad(what)
    if hook then malformed(gen, hook, what) end
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
        ceiling_denied(gen, "ceilings.max_run_timeout_s", ("timeout_s = %s is over the policy's ceiling "
          .. "ceilings.max_run_timeout_s = %s"):format(tostring(t), tostring(c.max_run_timeout_s)))
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
    ceiling_denied(gen, "session.network_mode", ("network_mode %q is wider than the session's %q: a run "
      .. "may narrow its session's network mode, never widen it"):format(mode, tostring(ceiling)))
  end
  return req
end

-- run(req, ctx, [gen]) -> req'.  req: { argv = {...}, cmd = (as given),
-- script_type, env = { K = V }, cwd, timeout_s, network_mode, stdin (bool) };
-- ctx.session = { id, name, backend, network_mode, ... }.
function Engine:run(req, ctx, gen)
  gen = self:for_session(gen)
  if type(req) ~= "table" then errors.raise(errors.InvalidArgument("req", "a table expected")) end
  req = check_run(gen, data_copy(req), ctx, nil)
  if gen.hooks.on_run then
    local verdict, r = call_hook(gen, "on_run", true, data_copy(req), hook_ctx(gen, ctx))
    if verdict == "adjust" then req = check_run(gen, data_copy(r), ctx, "on_run") end
  end
  return req
end

-- The matchers of the lists a caller passes in ctx (a session's allow-
-- and deny-list), compiled once per list table: the proxy asks about every
-- connection, and compiling the metadata preset each time was most of the
-- cost.  A list is taken as a value: change one and pass a new table.
local ctx_matchers = setmetatable({}, { __mode = "k" })
local function ctx_matcher(list, what)
  local m = ctx_matchers[list]
  if not m then
    m = match.compile(list, what)
    ctx_matchers[list] = m
  end
  return m
end

-- connect(host, port, addrs, ctx, [gen]) -> true, or false and a
-- PolicyDenied error.  Order: a host that is no valid name or address is
-- refused; the deny-list (the policy's plus ctx.denylist) against the
-- name and every address; the network mode (ctx.network_mode, else the
-- session's, else the policy default); in allowlist mode the allow-list
-- (ctx.allowlist, else the policy's network.allowlist) against the name
-- (or the literal address); then on_connect.  Never raises: a bad
-- ctx.allowlist / ctx.denylist entry gives false and its InvalidArgument.
function Engine:connect(host, port, addrs, ctx, gen)
  gen = self:for_session(gen)
  local ok, res, err = pcall(function()
    ctx = ctx or {}
    if type(port) ~= "number" or port < 1 or port > 65535 or port ~= math.floor(port) then
      ceiling_denied(gen, "network.port", ("port %s is not a port number"):format(tostring(port)))
    end
    if type(host) ~= "string" then ceiling_denied(gen, "network.host", "no host name") end
    local literal = match.is_ip_literal(host) and match.ip.parse(host)
    if not literal then
      local n, why = match.normalize_host(host)
      if not n then ceiling_denied(gen, "network.host", ("%q is not a valid host name: %s"):format(host, why)) end
    end
    local parsed = {}
    for i, a in ipairs(addrs or {}) do
      local p = match.ip.parse(a)
      if not p then ceiling_denied(gen, "network.addrs", ("resolved address %s is not an address"):format(tostring(a))) end
      parsed[i] = p
    end
    local hit = gen.deny_matcher:match(host, port, parsed)
    if not hit and ctx.denylist then hit = ctx_matcher(ctx.denylist, "denylist"):match(host, port, parsed) end
    if hit then
      ceiling_denied(gen, "network.denylist", ("%s:%d is denied by the deny-list entry %s"):format(host, port, hit))
    end
    local sess = type(ctx.session) == "table" and ctx.session or {}
    local mode = ctx.network_mode or sess.network_mode or gen.defaults.network_mode
    if mode == "blocked" or not width(mode) then
      ceiling_denied(gen, "network_mode", ("%s:%d: network_mode is %q"):format(host, port, tostring(mode)))
    end
    if mode == "allowlist" then
      local m = ctx.allowlist and ctx_matcher(ctx.allowlist, "allowlist") or gen.allow_matcher
      if not m or not m:match(host, port) then
        ceiling_denied(gen, "network.allowlist", ("%s:%d is not on the allow-list"):format(host, port))
      end
    end
    if gen.hooks.on_connect then
      call_hook(gen, "on_connect", false, host, port, data_copy(addrs or {}), hook_ctx(gen, ctx))
    end
    return true
  end)
  if ok then return true end
  if not errors.is(res) then
    res = hook_denied(gen, "on_connect", "check failed: " .. tostring(res), { cause = "error" })
  end
  return false, res, err
end

-- proxy_verdict(q, ctx, [gen]) -> the allow-list proxy's verdict table
-- (src/lua/proxy.c): q = { phase = "name" | "addrs", kind, host, port,
-- addrs }.  Phase "name" comes before any DNS lookup: connect() with no
-- addresses (deny-list, mode, allow-list, on_connect); an allowed IP
-- literal, in whatever spelling, comes back canonical as `literal`, a
-- name normalized as `resolve`.  Phase "addrs": every resolved address
-- against the deny-lists, and against the non-public ranges (ip.special)
-- unless the allow-list names a CIDR holding it.  Never raises: anything
-- wrong is a refusal.
function Engine:proxy_verdict(q, ctx, gen)
  gen = self:for_session(gen)
  ctx = ctx or {}
  local ok, res = pcall(function()
    if q.phase == "name" then
      local allowed, err = self:connect(q.host, q.port, nil, ctx, gen)
      if not allowed then return { allow = false, reason = err.message } end
      local a = match.is_ip_literal(q.host) and match.ip.parse(q.host)
      if a then return { allow = true, literal = match.ip.tostring(a) } end
      return { allow = true, resolve = (match.normalize_host(q.host)) }
    elseif q.phase == "addrs" then
      local deny2 = ctx.denylist and ctx_matcher(ctx.denylist, "denylist")
      local allow = ctx.allowlist and ctx_matcher(ctx.allowlist, "allowlist") or gen.allow_matcher
      if type(q.addrs) ~= "table" or #q.addrs == 0 then
        return { allow = false, reason = "no address to check" }
      end
      for _, s in ipairs(q.addrs) do
        local a = match.ip.parse(s)
        if not a then return { allow = false, reason = ("%s is not an address"):format(tostring(s)) } end
        local hit = gen.deny_matcher:match_addr(a, q.port) or (deny2 and deny2:match_addr(a, q.port))
        if hit then
          local e = errors.PolicyDenied("network.denylist", ("policy %s: %s:%d resolves to %s, denied by %s")
            :format(gen.name, q.host, q.port, s, hit))
          gen.emit("denied: " .. e.message)
          return { allow = false, reason = e.message }
        end
        local kind = match.ip.special(a)
        if kind and not (allow and allow:match_addr(a, q.port)) then
          local e = errors.PolicyDenied("network.private", ("policy %s: %s:%d resolves to %s, a %s address "
            .. "(allow it only by naming its CIDR in the allow-list)"):format(gen.name, q.host, q.port, s, kind))
          gen.emit("denied: " .. e.message)
          return { allow = false, reason = e.message }
        end
      end
      return { allow = true }
    end
    return { allow = false, reason = "unknown phase " .. tostring(q.phase) }
  end)
  if ok then return res end
  return { allow = false, reason = "policy check failed: " .. tostring(type(res) == "table" and res.message or res) }
end

-- close(session, ctx, [gen]) -- runs on_close; never raises.
function Engine:close(session, ctx, gen)
  gen = self:for_session(gen)
  if not gen.hooks.on_close then return end
  local res = (gen.runner or M.run_hook)(gen, "on_close", data_copy(session or {}), hook_ctx(gen, ctx))
  if not res[1] then gen.emit("on_close failed: " .. tostring(res[2])) end
end

-- ---- glue for on-device sessions (sbx.session) ----

-- caller_ctx(caller) -> the ctx a hook sees for who asked: origin
-- ("local" on-device, "sbxd" for the remote API) and, from sbxd, tenant.
function M.caller_ctx(caller)
  local c = type(caller) == "table" and caller or {}
  return { origin = type(c.origin) == "string" and c.origin or "local",
    tenant = type(c.tenant) == "string" and c.tenant or nil }
end

-- admit_session(opts, octx) -> normalized session options (sbx.options),
-- gen.  The caller's options are checked (sbx.options), then the policy's
-- ceilings and on_session_open see them with the defaults filled in; an
-- adjusted request is checked again.
function Engine:admit_session(opts, octx)
  local gen = self.current
  local o = paths.session(opts, gen, octx)
  local req = {}
  for k, v in pairs(opts) do
    if not HOST_KEYS[k] then req[k] = v end
  end
  req.backend, req.network_mode, req.timeout_s = o.backend, o.network_mode, o.timeout_s
  req.max_file_bytes = o.max_file_bytes
  local hooked = gen.hooks.on_session_open ~= nil
  local r = self:session_open(req, M.caller_ctx(octx and octx.caller), gen)
  if hooked or gen.ceilings.clamp then
    local ok, o2 = pcall(paths.session, r, gen, octx)
    if not ok then
      -- What the hook returned does not pass the option checks: the
      -- hook's fault, so the policy denies.
      if errors.is(o2, "InvalidArgument") and hooked then malformed(gen, "on_session_open", o2.message) end
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

-- admit_run(st, cmd, opts, extra_keys) -> run options (sbx.options.run)
-- after the policy: st is the session's state (st.policy: the generation
-- it was opened under).
function Engine:admit_run(st, cmd, opts, extra_keys)
  local gen = self:for_session(st.policy)
  local view = setmetatable({ policy = gen }, { __index = st })
  local o = paths.run(cmd, opts, view, extra_keys)
  if not gen.hooks.on_run then return o end
  local req = {
    cmd = cmd, argv = o.argv, script_type = o.script_type, env = env_map(o.env), cwd = o.cwd,
    timeout_s = o.timeout_ms and o.timeout_ms / 1000 or nil, network_mode = o.network_mode,
    stdin = o.stdin_data ~= nil,
  }
  local ctx = M.caller_ctx(st.caller)
  ctx.session = { id = st.id, name = st.name, backend = st.backend,
    network_mode = st.network_mode, created_at = st.created_at, work_dir = st.work_dir }
  local r = self:run(req, ctx, gen)
  o.argv = r.argv
  for _, a in ipairs(o.argv) do
    if #a >= paths.MAX_ARG_BYTES then malformed(gen, "on_run", "an argument is longer than the kernel accepts") end
  end
  local ok, err = pcall(function()
    o.env = paths.merge_env(paths.check_env("env", r.env or {}))
    o.cwd = r.cwd and paths.resolve_cwd(r.cwd) or nil
  end)
  if not ok then malformed(gen, "on_run", errors.is(err) and err.message or tostring(err)) end
  if r.timeout_s then o.timeout_ms = math.min(4294967295, math.max(1, math.ceil(r.timeout_s * 1000))) end
  o.network_mode = r.network_mode or o.network_mode
  return o
end

-- ---- describing ----

local function serialize(v, indent, out)
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b)
      if type(a) == type(b) then return a < b end
      return type(a) == "number"
    end)
    if #keys == 0 then out[#out + 1] = "{}" return end
    out[#out + 1] = "{\n"
    for _, k in ipairs(keys) do
      out[#out + 1] = indent .. "  "
      if type(k) == "string" and k:match("^[%a_][%w_]*$") then
        out[#out + 1] = k .. " = "
      elseif type(k) ~= "number" then
        out[#out + 1] = ("[%q] = "):format(tostring(k))
      end
      serialize(v[k], indent .. "  ", out)
      out[#out + 1] = ",\n"
    end
    out[#out + 1] = indent .. "}"
  elseif type(v) == "string" then
    out[#out + 1] = ("%q"):format(v)
  else
    out[#out + 1] = tostring(v)
  end
end

-- describe([gen]) -> the effective policy (built-ins merged in) as Lua text.
function Engine:describe(gen)
  gen = gen or self.current
  local hooks = {}
  for _, h in ipairs(M.HOOKS) do
    if gen.hooks[h] then hooks[#hooks + 1] = h end
  end
  local view = {
    name = gen.name, path = gen.path, defaults = gen.defaults, ceilings = gen.ceilings,
    filesystem = gen.filesystem, seccomp = gen.seccomp, network = gen.network,
    limits = { hook_instructions = gen.limits.instructions, hook_ms = gen.limits.ms,
      hook_memory_mb = gen.limits.memory_mb },
    reapply = gen.reapply, hooks = hooks,
  }
  local out = {}
  serialize(view, "", out)
  return table.concat(out)
end

-- check_cli(path) -> exit status (0: the policy loads; 1: it does not).
-- Prints the effective policy on stdout, or the error (with its line, as
-- Lua reports it) on stderr.  sbxlua --check-policy FILE calls this.
function M.check_cli(path)
  local ok, eng = pcall(M.load, path)
  if not ok then
    io.stderr:write(tostring(errors.is(eng) and eng.message or eng), "\n")
    return 1
  end
  io.stdout:write("-- effective policy of ", eng.path, " (ok)\nreturn ", eng:describe(), "\n")
  return 0
end

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

return M

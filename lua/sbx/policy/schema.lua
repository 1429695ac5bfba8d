-- sbx.policy.schema: the shape of a policy.  What a policy chunk returns
-- is checked field by field (an error names the field and, when it can be
-- found, its line) and merged with the built-in values into the normalized
-- policy the rest of sbx reads.  A policy that does not check fails to
-- load (PolicyDenied, rule "policy.load").

local errors = require "sbx.errors"
local presets = require "sbx.presets"
local paths = require "sbx.options"
local match = require "sbx.match"
local sandbox = require "sbx.policy.sandbox"

local M = {}

local copy = sandbox.copy

M.HOOKS = { "on_session_open", "on_run", "on_connect", "on_close" }

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
    shm_mb = 1024,      -- /dev/shm (its pages count against memory_mb)
    nofile = 65536,     -- RLIMIT_NOFILE of every run
    clamp = false,
  },
  system_ro = { "/usr", "/bin", "/lib", "/lib64", "/sbin" },
  -- As default.lua's: a policy that sets other fields but leaves these out
  -- keeps them (merged per field, as policies/README.md says).
  etc = {
    "alternatives", "ca-certificates", "ssl", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "nsswitch.conf", "localtime", "mime.types", "protocols", "services", "host.conf",
    "gai.conf", "os-release", "debian_version", "python3", "python3.11", "bash.bashrc",
    "profile", "inputrc",
  },
  forbidden = {
    "/", "/proc", "/sys", "/dev", "/home", "/root", "/etc", "/var/run/docker.sock",
    "/run", "/boot", "/var/lib/sbx",
  },
}

-- The fields of each section (issue 17): a nested typo such as
-- ceilings.memroy_mb fails the load, as an unknown top-level field does.
M.SECTION_FIELDS = {
  defaults = { "backend", "network_mode", "session_timeout_s", "run_timeout_s", "max_file_bytes",
    "hostname", "tmp_bytes", "shm_bytes", "env" },
  ceilings = { "backends", "network_mode", "max_session_timeout_s", "max_run_timeout_s",
    "max_file_bytes", "memory_mb", "cpu_milli", "pids", "disk_mb", "gpus", "gpu_shared", "shm_mb",
    "nofile", "clamp" },
  filesystem = { "system_ro", "etc", "forbidden", "allow_ro", "allow_rw", "gpu_paths" },
  network = { "denylist", "allowlist" },
  limits = { "hook_instructions", "hook_ms", "hook_memory_mb" },
}

-- load_denied(path, cause) -> the PolicyDenied of a policy that does not load.
function M.load_denied(path, cause)
  return errors.PolicyDenied("policy.load",
    ("policy %s: %s; every session is denied until it is fixed"):format(path, cause))
end
local deny = M.load_denied

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

-- Every key of section t is one of M.SECTION_FIELDS[section].
local function check_fields(t, path, section)
  local known = {}
  for _, k in ipairs(M.SECTION_FIELDS[section]) do known[k] = true end
  for k in pairs(t) do
    check(known[k], path, ("unknown field %s.%s (a typo? known: %s)"):format(section, tostring(k),
      table.concat(M.SECTION_FIELDS[section], ", ")))
  end
end

local function number_field(t, key, path, section, min)
  local v = t[key]
  check(v == nil or (type(v) == "number" and v == v and v >= (min or 0)), path,
    ("%s.%s must be a number >= %d"):format(section, key, min or 0))
  return v
end

local function merge_defaults(raw, path)
  local d = check_table(raw.defaults, path, "defaults")
  check_fields(d, path, "defaults")
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
  check_fields(c, path, "ceilings")
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
    "cpu_milli", "pids", "disk_mb", "gpus", "shm_mb", "nofile" } do
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

-- The core's view of the seccomp profile (sbxlua, sbxd, the rock); nil
-- where the core is absent, and then the session's open checks the lists.
local seccomp_profile
do
  local ok, core = pcall(require, "sbx.core")
  if ok and type(core) == "table" then seccomp_profile = core.seccomp_profile end
end

-- seccomp = { deny = {...}, allow = {...} }: deny narrows the core's
-- profile, allow widens it by the names the core lets a policy widen by;
-- anything else fails the load.  profile: the effective one, as data.
local function check_seccomp(raw, path)
  local sc = check_table(raw, path, "seccomp")
  for k in pairs(sc) do
    check(k == "deny" or k == "allow", path,
      ("unknown field seccomp.%s (known: deny, allow)"):format(tostring(k)))
  end
  local out = {
    deny = check_strlist(sc.deny or {}, path, "seccomp.deny"),
    allow = check_strlist(sc.allow or {}, path, "seccomp.allow"),
  }
  if seccomp_profile then
    local prof, why = seccomp_profile { deny = out.deny, allow = out.allow }
    check(prof ~= nil, path, "seccomp: " .. tostring(why))
    out.profile = prof
  end
  return out
end

-- normalize(raw, path, source) -> the policy as the rest of sbx reads it.
-- source: the file's text, so that an error can name its line.
local function normalize(raw, path)
  local fs = check_table(raw.filesystem, path, "filesystem")
  check_fields(fs, path, "filesystem")
  local forbidden = check_abs_paths(fs.forbidden or BUILTIN.forbidden, path, "filesystem.forbidden")
  local seen = {}
  for _, p in ipairs(forbidden) do seen[p] = true end
  for _, p in ipairs(M.HARD_FORBIDDEN) do
    if not seen[p] then forbidden[#forbidden + 1] = p end
  end
  local seccomp = check_seccomp(raw.seccomp, path)
  local network = check_table(raw.network, path, "network")
  check_fields(network, path, "network")
  local denylist = check_strlist(network.denylist or presets.CLOUD_METADATA_DENY, path, "network.denylist")
  local ok, err = pcall(match.compile, denylist, "network.denylist")
  check(ok, path, tostring(err))
  local allowlist = nil
  if network.allowlist ~= nil then
    allowlist = check_strlist(network.allowlist, path, "network.allowlist")
    ok, err = pcall(match.compile, allowlist, "network.allowlist")
    check(ok, path, tostring(err))
  end
  -- secrets: allow (default true), require = { NAME, ... }, hosts = { pattern, ... }
  local sec = check_table(raw.secrets, path, "secrets")
  for k in pairs(sec) do
    check(k == "allow" or k == "require" or k == "hosts", path,
      ("unknown field secrets.%s (known: allow, require, hosts)"):format(tostring(k)))
  end
  check(sec.allow == nil or type(sec.allow) == "boolean", path, "secrets.allow must be a boolean")
  local secrets = {
    allow = sec.allow ~= false,
    require = sec.require and check_strlist(sec.require, path, "secrets.require") or {},
    hosts = sec.hosts and check_strlist(sec.hosts, path, "secrets.hosts") or nil,
  }
  check(secrets.allow or #secrets.require == 0, path, "secrets.require needs secrets.allow")
  local limits = check_table(raw.limits, path, "limits")
  check_fields(limits, path, "limits")
  local lim = {
    instructions = limits.hook_instructions or sandbox.HOOK_INSTRUCTIONS,
    ms = limits.hook_ms or sandbox.HOOK_MS,
    memory_mb = limits.hook_memory_mb or sandbox.HOOK_MEMORY_MB,
  }
  check(type(lim.memory_mb) == "number" and lim.memory_mb >= 1 and lim.memory_mb <= sandbox.MAX_HOOK_MEMORY_MB, path,
    ("limits.hook_memory_mb must be a number from 1 to %d"):format(sandbox.MAX_HOOK_MEMORY_MB))
  check(type(lim.instructions) == "number" and lim.instructions >= 1000
    and lim.instructions <= sandbox.MAX_HOOK_INSTRUCTIONS, path,
    ("limits.hook_instructions must be a number from 1000 to %d"):format(sandbox.MAX_HOOK_INSTRUCTIONS))
  check(type(lim.ms) == "number" and lim.ms >= 1 and lim.ms <= sandbox.MAX_HOOK_MS, path,
    ("limits.hook_ms must be a number from 1 to %d"):format(sandbox.MAX_HOOK_MS))
  check(raw.reapply == nil or type(raw.reapply) == "boolean", path, "reapply must be a boolean")
  check(raw.name == nil or type(raw.name) == "string", path, "name must be a string")
  local hooks = {}
  for _, h in ipairs(M.HOOKS) do
    check(raw[h] == nil or type(raw[h]) == "function", path, h .. " must be a function")
    hooks[h] = raw[h]
  end
  local known = { name = 1, defaults = 1, ceilings = 1, filesystem = 1, seccomp = 1, network = 1,
    secrets = 1, limits = 1, reapply = 1, on_session_open = 1, on_run = 1, on_connect = 1, on_close = 1 }
  for k in pairs(raw) do
    check(known[k] ~= nil, path, ("unknown field %s (a typo? known: name, defaults, ceilings, "
      .. "filesystem, seccomp, network, secrets, limits, reapply, on_session_open, on_run, on_connect, "
      .. "on_close)"):format(tostring(k)))
  end
  local p = {
    path = path,
    name = raw.name or path,
    defaults = merge_defaults(raw, path),
    ceilings = merge_ceilings(raw, path),
    filesystem = {
      system_ro = check_abs_paths(fs.system_ro or BUILTIN.system_ro, path, "filesystem.system_ro"),
      etc = check_etc(fs.etc or BUILTIN.etc, path),
      forbidden = forbidden,
      allow_ro = opt_prefixes(fs.allow_ro, path, "filesystem.allow_ro"),
      allow_rw = opt_prefixes(fs.allow_rw, path, "filesystem.allow_rw"),
    },
    seccomp = seccomp,
    network = { denylist = denylist, allowlist = allowlist },
    secrets = secrets,
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

function M.normalize(raw, path, source)
  checking_source = source
  local ok, p = pcall(normalize, raw, path)
  checking_source = nil
  if not ok then error(p, 0) end
  return p
end

return M

-- sbx.policy: loading policy files (policies/*.lua).
--
-- A policy is a Lua chunk that returns a table of data: defaults, ceilings,
-- filesystem, seccomp, network (see policies/default.lua).  It is loaded as
-- text only (bytecode is refused: it can break the VM), runs in a restricted
-- environment with an instruction budget that pcall cannot swallow, and any
-- failure is PolicyDenied: a broken policy denies, it never falls back to
-- something more permissive (fail closed).
--
-- This is the data half of the policy engine.  Hooks (on_session_open,
-- on_run, on_connect, on_close) and hot reload belong to the policy engine's
-- issue; load() already returns the raw table as `policy.raw` and leaves
-- function-valued fields alone so that engine can grow here.
--
--   policy.load([path])     -> policy table (normalized), raises PolicyDenied
--   policy.default_path()   -> path of policies/default.lua
--   policy.resolve(path)    -> the file a policy option names
--   policy.forbidden_hit(p, path) -> the forbidden entry path touches, or nil

local errors = require "sbx.errors"
local presets = require "sbx.presets"
local paths = require "sbx.options"

local M = {}

-- Instructions a policy chunk may execute while loading.
M.INSTRUCTION_BUDGET = 10 * 1000 * 1000
-- Largest policy file accepted.
M.MAX_BYTES = 1024 * 1024

-- Bind paths no policy can allow, whatever it says: a typo in a policy
-- must not expose the host's kernel interfaces or its configuration.
M.HARD_FORBIDDEN = {
  "/", "/proc", "/sys", "/dev", "/etc", "/run", "/var/run", "/var/run/docker.sock", "/boot",
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
  },
  system_ro = { "/usr", "/bin", "/lib", "/lib64", "/sbin" },
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

-- The restricted environment: copies of the libraries (a policy cannot
-- change string.format for everyone), no io, os, require, load*, debug,
-- getmetatable, rawset...
local function sandbox_env(path, state)
  local function pack(...) return { n = select("#", ...), ... } end
  local function guarded_pcall(f, ...)
    local res = pack(pcall(f, ...))
    -- The budget error must reach our own pcall, whatever the chunk catches.
    if state.exceeded then error(state.exceeded, 0) end
    return unpack(res, 1, res.n)
  end
  return {
    string = copy(string), table = copy(table), math = copy(math),
    pairs = pairs, ipairs = ipairs, type = type, tostring = tostring, tonumber = tonumber,
    select = select, error = error, assert = assert, pcall = guarded_pcall, next = next,
    unpack = unpack,
    presets = copy(presets),
    log = function(...)
      local parts = {}
      for i = 1, select("#", ...) do parts[#parts + 1] = tostring((select(i, ...))) end
      io.stderr:write("[policy ", path, "] ", table.concat(parts, " "), "\n")
    end,
  }
end

local function deny(path, cause)
  return errors.PolicyDenied("policy.load",
    ("policy %s: %s; every session is denied until it is fixed"):format(path, cause))
end

-- run_chunk(path, source) -> the value the chunk returns, or raises.
local function run_chunk(path, source)
  if source:sub(1, 1) == "\27" then
    errors.raise(deny(path, "precompiled bytecode is refused, give the Lua source"))
  end
  local chunk, err = loadstring(source, "@" .. path)
  if not chunk then errors.raise(deny(path, err)) end
  local state = {}
  setfenv(chunk, sandbox_env(path, state))
  -- Count hooks do not fire in JIT-compiled traces: interpret the chunk.
  if jit then jit.off(chunk, true) end
  local budget_msg = ("ran over its budget of %d instructions"):format(M.INSTRUCTION_BUDGET)
  local name = "@" .. path
  local old_hook, old_mask, old_count = debug.gethook()
  -- Raise only in the policy's own code: the hook may also fire in ours
  -- (here, after pcall returned, or in guarded_pcall).  Once exceeded,
  -- guarded_pcall rethrows, so a policy that catches errors cannot go on.
  debug.sethook(function()
    local info = debug.getinfo(2, "S")
    if info and info.source == name then
      state.exceeded = budget_msg
      error(budget_msg, 0)
    end
  end, "", M.INSTRUCTION_BUDGET)
  local ok, res = pcall(chunk)
  debug.sethook()
  if old_hook then debug.sethook(old_hook, old_mask, old_count) end
  if state.exceeded then errors.raise(deny(path, state.exceeded)) end
  if not ok then errors.raise(deny(path, tostring(res))) end
  return res
end

-- ---- checking the data ----

local function check(cond, path, what)
  if not cond then errors.raise(deny(path, what)) end
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
  for _, k in ipairs { "max_session_timeout_s", "max_run_timeout_s", "max_file_bytes" } do
    check(type(out[k]) == "number", path, "ceilings." .. k .. " must be a number")
    number_field(out, k, path, "ceilings", 0)
  end
  return out
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
  local p = {
    path = path,
    name = type(raw.name) == "string" and raw.name or path,
    defaults = merge_defaults(raw, path),
    ceilings = merge_ceilings(raw, path),
    filesystem = {
      system_ro = check_abs_paths(fs.system_ro or BUILTIN.system_ro, path, "filesystem.system_ro"),
      etc = check_etc(fs.etc or {}, path),
      forbidden = forbidden,
    },
    seccomp = { deny = check_strlist(seccomp.deny or {}, path, "seccomp.deny") },
    network = {
      denylist = check_strlist(network.denylist or presets.CLOUD_METADATA_DENY, path,
        "network.denylist"),
    },
    raw = raw,
  }
  return p
end

-- load([path]) -> policy.  Raises PolicyDenied when the file cannot be read,
-- does not compile, errors, runs over budget, returns a non-table or holds
-- data of the wrong shape.
function M.load(path)
  if path ~= nil and type(path) ~= "string" then
    errors.raise(errors.InvalidArgument("policy", "a path to a policy file expected, got " .. type(path)))
  end
  local file = M.resolve(path)
  local f, err = io.open(file, "rb")
  if not f then errors.raise(deny(file, "cannot read it: " .. tostring(err))) end
  local source = f:read(M.MAX_BYTES + 1)
  f:close()
  source = source or ""
  if #source > M.MAX_BYTES then
    errors.raise(deny(file, ("larger than %d bytes"):format(M.MAX_BYTES)))
  end
  local raw = run_chunk(file, source)
  if type(raw) ~= "table" then
    errors.raise(deny(file, "it returned " .. type(raw) .. ", a table expected"))
  end
  return normalize(raw, file)
end

-- forbidden_hit(p, path) -> the forbidden entry that path is, lies under or
-- contains ("/" contains everything); nil when path is clear.  extra: more
-- entries (e.g. the state dir).
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

-- sbx.options: validating and normalizing session and run options.
--
-- Everything a caller passes to sbx.session{} and s:run() goes through
-- here before it reaches the C core.  Wrong names, types and values raise
-- InvalidArgument naming the option; what this build cannot enforce raises
-- BackendUnavailable.  Shapes and types only: what the policy allows (its
-- ceilings, forbidden paths, hooks) is the policy engine's to decide
-- (sbx.policy.ceilings, through Engine:admit_session / admit_run).
-- Nothing is silently dropped: an option we cannot honour (a resource
-- ceiling without cgroups, a network mode not built yet) fails closed
-- instead of being ignored.
--
-- It also holds the lexical path helpers the policy loader shares.

local errors = require "sbx.errors"
local presets = require "sbx.presets"
local dedent = require("sbx.dedent").dedent
local trust = require "sbx.trust"
local secrets = require "sbx.secrets"

local M = {}

-- The work dir as every run sees it.
M.SANDBOX_WORKDIR = "/tmp/sandbox-work"
-- MAX_ARG_STRLEN: the kernel refuses a single argv/env string this long.
M.MAX_ARG_BYTES = 128 * 1024
-- The environment of every run before the caller's env is merged on top.
M.DEFAULT_ENV = {
  PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  HOME = M.SANDBOX_WORKDIR,
  LANG = "C.UTF-8",
  USER = "sandbox",
  LOGNAME = "sandbox",
}
M.BACKENDS = { "userns", "privileged", "bubblewrap", "none" }
M.NETWORK_MODES = { blocked = 1, allowlist = 2, open = 3 } -- value: how wide

M.SESSION_KEYS = {
  "backend", "work_dir", "network_mode", "network_allowlist", "network_denylist",
  "read_only_paths", "read_write_paths", "memory_mb", "cpu_milli", "pids", "gpus", "disk_mb",
  "shm_mb", "nofile",
  "timeout_s", "timeout_grace_s", "policy", "name", "env", "max_file_bytes", "state_dir", "warm_runs", "ca_certs",
  "venv", "python_venv", -- the session venv (sbx.venv)
  "secrets",
  "warm_idle_s",
  "proxy_host", -- who serves an allowlist session's proxy (sbxd: its event loop); see sbx.session
  -- A host with an event loop (sbxd): wait(fd, deadline_ms) waits for fd to be
  -- readable without blocking the loop (fd nil: lets the loop have a turn); caller = { origin, tenant } is what the
  -- policy's hooks see as ctx.origin / ctx.tenant (default origin "local").
  "wait", "caller",
}
-- Which session keys a user sees (issue 17): INTERNAL ones are host
-- plumbing, never named in an error; SERVER ones are set by sbxd itself
-- (a remote client giving one gets 400; sbx.server reads this list), so an
-- unknown-option error of a remote open does not offer them.
M.INTERNAL_KEYS = { proxy_host = true, wait = true, caller = true }
M.SERVER_KEYS = { policy = true, work_dir = true, state_dir = true, warm_runs = true, warm_idle_s = true,
  proxy_host = true }
-- The reference product's names for options sbx spells otherwise: an
-- unknown-option error names the sbx one, so a port of its examples is
-- one read away from working.
M.REFERENCE_NAMES = { host_work_dir = "work_dir", timeout = "timeout_s" }

M.RUN_KEYS = {
  "stdout", "stderr", "stdin", "env", "cwd", "script_type", "network_mode",
  "network_allowlist", "timeout_s", "pty",
}
-- A pty's size bounds (rows, cols): what a real terminal could be.
M.PTY_MAX = 1000
-- TERM of a pty run unless its env (or the policy's, the session's) sets one.
M.PTY_TERM = "xterm-256color"

local function invalid(option, fmt, ...)
  errors.raise(errors.InvalidArgument(option, fmt:format(...)))
end

local function describe(v)
  if type(v) == "string" then return ("%q"):format(#v > 60 and v:sub(1, 60) .. "..." or v) end
  return type(v) == "table" and "a table" or tostring(v)
end

-- ---- lexical paths ----

-- normalize(path) -> path without "//", "." or a trailing "/", and whether
-- it has ".." components (left in place: only the caller knows what they
-- are relative to).  Purely lexical: symlinks are not looked at.
function M.normalize(path)
  local abs = path:sub(1, 1) == "/"
  local parts, dotdot = {}, false
  for part in path:gmatch("[^/]+") do
    if part == ".." then dotdot = true end
    if part ~= "." then parts[#parts + 1] = part end
  end
  local out = table.concat(parts, "/")
  if abs then out = "/" .. out elseif out == "" then out = "." end
  return out, dotdot
end

-- resolve_dotdot(abs) -> abs with ".." applied, and whether it tried to
-- climb above "/".
function M.resolve_dotdot(abs)
  local parts, above = {}, false
  for part in abs:gmatch("[^/]+") do
    if part == ".." then
      if #parts == 0 then above = true else parts[#parts] = nil end
    elseif part ~= "." then
      parts[#parts + 1] = part
    end
  end
  return "/" .. table.concat(parts, "/"), above
end

-- is_under(path, dir) -> true when path lies strictly below dir.
function M.is_under(path, dir)
  if dir == "/" then return path ~= "/" and path:sub(1, 1) == "/" end
  return #path > #dir and path:sub(1, #dir + 1) == dir .. "/"
end

-- ---- value checks ----

function M.check_keys(t, allowed, what)
  local set = {}
  for _, k in ipairs(allowed) do set[k] = true end
  -- A session opened for sbxd's client: the options that client may give.
  local remote = type(t.caller) == "table" and t.caller.origin == "sbxd"
  for k in pairs(t) do
    if type(k) ~= "string" then
      invalid(what, "option names are strings, got %s", describe(k))
    elseif not set[k] then
      local names = {}
      for _, n in ipairs(allowed) do
        if not M.INTERNAL_KEYS[n] and not (remote and M.SERVER_KEYS[n]) then names[#names + 1] = n end
      end
      table.sort(names)
      local ref, hint = M.REFERENCE_NAMES[k], ""
      if ref and set[ref] then
        hint = (remote and M.SERVER_KEYS[ref]) and ("; the reference's %s is %s on-device, set by the server remotely")
          or "; the reference's %s is %s here"
        hint = hint:format(k, ref)
      end
      invalid(k, "unknown %s option%s (known: %s)", what, hint, table.concat(names, ", "))
    end
  end
end

local function check_type(option, v, want)
  if type(v) ~= want then invalid(option, "%s expected, got %s", want, describe(v)) end
  return v
end

local function check_nonul(option, s)
  if s:find("\0", 1, true) then invalid(option, "contains a NUL byte") end
  return s
end

local function check_number(option, v, min_exclusive)
  check_type(option, v, "number")
  if v ~= v or v == math.huge or v == -math.huge then invalid(option, "a finite number expected") end
  if min_exclusive and v <= min_exclusive then
    invalid(option, "a number > %s expected, got %s", tostring(min_exclusive), tostring(v))
  end
  return v
end

local function check_integer(option, v, min)
  check_number(option, v)
  if v ~= math.floor(v) or v < min or v > 2 ^ 53 then
    invalid(option, "an integer >= %d expected, got %s", min, tostring(v))
  end
  return v
end

-- An array of non-empty strings without NUL; returns a copy.
-- Network list entries must parse (sbx.match's syntax) at open, or the
-- mistake shows only at the first connection (allowlist), or silently
-- never (an open-mode deny CIDR nftables cannot take).  Returns list.
local function check_entries(option, list)
  require("sbx.match").compile(list, option)
  return list
end

local function check_list(option, v)
  check_type(option, v, "table")
  local n = 0
  for k in pairs(v) do
    if type(k) ~= "number" or k < 1 or k ~= math.floor(k) then
      invalid(option, "an array of strings expected, found key %s", describe(k))
    end
    n = n + 1
  end
  local out = {}
  for i = 1, n do
    local s = v[i]
    if type(s) ~= "string" or s == "" then
      invalid(option, "entry %d: a non-empty string expected, got %s", i, describe(s))
    end
    out[i] = check_nonul(option, s)
  end
  return out
end

-- env tables: names non-empty without "=" or NUL, values strings without NUL.
function M.check_env(option, v)
  if v == nil then return {} end
  check_type(option, v, "table")
  local out = {}
  for k, val in pairs(v) do
    if type(k) ~= "string" or k == "" or k:find("[=%z]") then
      invalid(option, "variable names are non-empty strings without '=' or NUL, got %s", describe(k))
    end
    if type(val) ~= "string" then
      invalid(option, "%s: a string value expected, got %s", k, describe(val))
    end
    if val:find("\0", 1, true) then invalid(option, "%s: the value contains a NUL byte", k) end
    if #k + 1 + #val >= M.MAX_ARG_BYTES then
      invalid(option, "%s: longer than the kernel's %d-byte limit for one variable", k, M.MAX_ARG_BYTES)
    end
    out[k] = val
  end
  return out
end

-- merge_env(...) -> sorted "K=V" array of the layers, later ones winning.
function M.merge_env(...)
  local merged = {}
  for i = 1, select("#", ...) do
    for k, v in pairs((select(i, ...)) or {}) do merged[k] = v end
  end
  local keys = {}
  for k in pairs(merged) do keys[#keys + 1] = k end
  table.sort(keys)
  local out = {}
  for i, k in ipairs(keys) do out[i] = k .. "=" .. merged[k] end
  return out
end

-- A host path option: absolute, no "..", no NUL; returns it normalized.
local function check_host_path(option, v)
  check_type(option, v, "string")
  check_nonul(option, v)
  if v:sub(1, 1) ~= "/" then invalid(option, "%s: an absolute host path expected", describe(v)) end
  local norm, dotdot = M.normalize(v)
  if dotdot then invalid(option, "%s: '..' is not allowed in paths", describe(v)) end
  return norm
end

-- ---- session options ----

local NOT_BUILT = {}

-- Bind paths: absolute, without "..", not /tmp itself nor the work dir;
-- normalized.  A bind below /tmp is carried into every run's fresh /tmp
-- (the core re-attaches it), so /tmp/my-job works as on the host.  Whether
-- the policy allows them (and that they exist) is the engine's to check.
local function check_bind_paths(option, v)
  local list = check_list(option, v)
  local out = {}
  for i, p in ipairs(list) do
    local norm = check_host_path(option, p)
    if norm == "/tmp" then
      invalid(option, "%q: every run gets a fresh /tmp (a tmpfs); bind a directory below it", norm)
    end
    if norm == M.SANDBOX_WORKDIR or M.is_under(norm, M.SANDBOX_WORKDIR) then
      invalid(option, "%q is the sandbox's work dir (work_dir pins it)", norm)
    end
    out[i] = norm
  end
  return out
end

-- session(opts, pol) -> normalized session options, the policy's defaults
-- filled in.  opts: what the caller gave (already checked to be a table);
-- pol: the loaded policy (sbx.policy), for its defaults and deny-list.
-- Raises InvalidArgument or BackendUnavailable.
function M.session(opts, pol)
  M.check_keys(opts, M.SESSION_KEYS, "session")
  local d = pol.defaults
  local o = {}

  -- Pass 1: every option's type and value.
  o.backend = opts.backend == nil and d.backend or check_type("backend", opts.backend, "string")
  local known = false
  for _, b in ipairs(M.BACKENDS) do known = known or b == o.backend end
  if not known then
    invalid("backend", "unknown backend %s (known: %s)", describe(o.backend), table.concat(M.BACKENDS, ", "))
  end
  if opts.name ~= nil then
    check_type("name", opts.name, "string")
    if #opts.name > 128 or not opts.name:match("^[%w][%w%._%-]*$") then
      invalid("name", "1 to 128 letters, digits, '.', '_' or '-' expected, got %s", describe(opts.name))
    end
    o.name = opts.name
  end
  if opts.work_dir ~= nil then o.work_dir = check_host_path("work_dir", opts.work_dir) end
  if opts.state_dir ~= nil then o.state_dir = check_host_path("state_dir", opts.state_dir) end
  o.env = M.check_env("env", opts.env)
  -- Files are read only for callers on this host (sbxd's say who they are).
  local here = opts.caller == nil or opts.caller.origin == nil or opts.caller.origin == "local"
  if opts.ca_certs ~= nil then o.ca_certs = trust.check(opts.ca_certs, here) end
  if opts.secrets ~= nil then o.secrets = secrets.check(opts.secrets) end
  local timeout_s = d.session_timeout_s
  if opts.timeout_s ~= nil then timeout_s = check_number("timeout_s", opts.timeout_s, 0) end
  -- The session venv (sbx.venv): on unless turned off; backend none has no
  -- work dir at /tmp/sandbox-work to keep it in.
  o.venv = o.backend ~= "none"
  if opts.venv ~= nil then o.venv = check_type("venv", opts.venv, "boolean") end
  if opts.python_venv ~= nil then
    o.python_venv = check_host_path("python_venv", opts.python_venv)
    if o.python_venv == "/" or o.python_venv == "/tmp" or M.is_under(o.python_venv, "/tmp") then
      invalid("python_venv", "%q: a venv outside /tmp expected (it is bound read-only at its own path)",
        o.python_venv)
    end
    if not o.venv then
      invalid("python_venv", "is bridged into the session venv, and venv = false turns that off")
    end
  end
  o.max_file_bytes = d.max_file_bytes
  if opts.max_file_bytes ~= nil then
    o.max_file_bytes = check_integer("max_file_bytes", opts.max_file_bytes, 1)
  end
  o.network_mode = d.network_mode
  if opts.network_mode ~= nil then o.network_mode = check_type("network_mode", opts.network_mode, "string") end
  if not M.NETWORK_MODES[o.network_mode] then
    invalid("network_mode", "\"blocked\", \"allowlist\" or \"open\" expected, got %s", describe(o.network_mode))
  end
  if opts.network_allowlist ~= nil then
    o.network_allowlist = check_entries("network_allowlist", check_list("network_allowlist", opts.network_allowlist))
    if o.network_mode == "blocked" then
      invalid("network_allowlist", "only meaningful with network_mode = \"allowlist\" (or \"open\", whose "
        .. "runs may narrow to allowlist); the session's is %q", o.network_mode)
    end
  end
  local deny = presets.copy(presets.CLOUD_METADATA_DENY)
  for _, h in ipairs(pol.network.denylist) do deny[#deny + 1] = h end
  if opts.network_denylist ~= nil then
    local own = check_entries("network_denylist", check_list("network_denylist", opts.network_denylist))
    for _, h in ipairs(own) do deny[#deny + 1] = h end
  end
  o.network_denylist = deny
  -- Resource ceilings: enforced by the core (cgroup, tmpfs work dir);
  -- the policy's ceilings bound them (sbx.policy.ceilings).
  for _, k in ipairs { "memory_mb", "cpu_milli", "pids", "disk_mb" } do
    if opts[k] ~= nil then o[k] = check_integer(k, opts[k], 1) end
  end
  if opts.gpus ~= nil then o.gpus = check_integer("gpus", opts.gpus, 0) end
  -- What real workloads outgrow: the size of /dev/shm (its pages count
  -- against memory_mb like any tmpfs) and the open-files limit of every run.
  if opts.shm_mb ~= nil then o.shm_mb = check_integer("shm_mb", opts.shm_mb, 1) end
  if opts.nofile ~= nil then
    o.nofile = check_integer("nofile", opts.nofile, 64)
    if o.nofile > 1048576 then invalid("nofile", "at most 1048576 (the kernel's nr_open), got %d", o.nofile) end
  end
  -- Warm runs kept ready (a host-side tuning, not a ceiling).
  if opts.warm_runs ~= nil then
    o.warm_runs = check_integer("warm_runs", opts.warm_runs, 1)
    if o.warm_runs > 64 then invalid("warm_runs", "at most 64, got %d", o.warm_runs) end
  end
  -- How long an unused warm run stays before it ends (default 10 s).
  if opts.warm_idle_s ~= nil then
    o.warm_idle_s = check_number("warm_idle_s", opts.warm_idle_s, 0)
    if o.warm_idle_s > 4294967 then invalid("warm_idle_s", "at most 4294967, got %s", o.warm_idle_s) end
  end
  if o.memory_mb and o.memory_mb < 16 then
    invalid("memory_mb", "at least 16 MiB (a sandbox needs some memory to start), got %d", o.memory_mb)
  end
  if o.pids and o.pids < 8 then
    invalid("pids", "at least 8 (the sandbox's own processes count), got %d", o.pids)
  end

  -- Pass 2: what this build can honour.  Fail closed: never accept a
  -- setting that would not be enforced.
  if NOT_BUILT[o.backend] then
    errors.raise(errors.BackendUnavailable(o.backend, NOT_BUILT[o.backend][1], NOT_BUILT[o.backend][2]))
  end
  if o.gpus and o.gpus > 0 and o.backend ~= "privileged" then
    errors.raise(errors.BackendUnavailable("privileged",
      ("gpus = %d needs the privileged backend (CUDA's cuInit fails in an unprivileged user "
        .. "namespace; %s has no device isolation)"):format(o.gpus, o.backend),
      'use backend = "privileged" (as root), or leave gpus unset'))
  end
  if o.secrets and #o.secrets > 0 and o.network_mode ~= "allowlist" then
    invalid("secrets", 'need network_mode = "allowlist": only the allow-list proxy can put them in')
  end
  if o.secrets and #o.secrets > 0 and o.backend == "none" then
    errors.raise(errors.BackendUnavailable("none",
      "secrets need the session CA in a bundle of the session's own; backend none has none",
      'use backend = "userns", or leave secrets unset'))
  end
  if o.ca_certs and o.backend == "none" then
    errors.raise(errors.BackendUnavailable("none",
      "ca_certs needs a filesystem of the session's own to hold the bundle; backend none has none",
      'use backend = "userns", or leave ca_certs unset'))
  end
  if o.venv and o.backend == "none" then
    errors.raise(errors.BackendUnavailable("none",
      "the session venv lives at /tmp/sandbox-work/.venv, which backend none does not have",
      "leave venv unset (backend none has none), or use backend = \"userns\""))
  end
  if o.disk_mb and o.work_dir then
    invalid("disk_mb", "a pinned work_dir lives on the host's disk and cannot be capped; leave work_dir unset")
  end
  if o.network_mode ~= "blocked" and (o.backend == "none" or o.backend == "bubblewrap") then
    errors.raise(errors.BackendUnavailable(o.backend,
      ("network_mode %q needs a network namespace per session, which backend %s does not keep")
        :format(o.network_mode, o.backend),
      'use backend = "userns" (or "privileged"), or network_mode = "blocked"'))
  end

  o.timeout_s = timeout_s
  o.lifetime_ms = math.ceil(timeout_s * 1000)
  -- At timeout_s every run gets SIGTERM, then SIGKILL this much later.
  o.timeout_grace_s = 10
  if opts.timeout_grace_s ~= nil then
    o.timeout_grace_s = check_number("timeout_grace_s", opts.timeout_grace_s)
    if o.timeout_grace_s < 0 or o.timeout_grace_s > 300 then
      invalid("timeout_grace_s", "0 to 300 (seconds) expected, got %s", describe(opts.timeout_grace_s))
    end
  end
  o.expire_grace_ms = math.max(1, math.ceil(o.timeout_grace_s * 1000))
  o.read_only_paths = opts.read_only_paths ~= nil
    and check_bind_paths("read_only_paths", opts.read_only_paths) or {}
  o.read_write_paths = opts.read_write_paths ~= nil
    and check_bind_paths("read_write_paths", opts.read_write_paths) or {}
  -- python_venv is a read-only bind too (the policy judges it as one:
  -- sbx.venv.request in Engine:session_open), whoever set it.
  if o.python_venv then
    local have = false
    for _, p in ipairs(o.read_only_paths) do have = have or p == o.python_venv end
    if not have then o.read_only_paths[#o.read_only_paths + 1] = o.python_venv end
  end
  local ro = {}
  for _, p in ipairs(o.read_only_paths) do ro[p] = true end
  for _, p in ipairs(o.read_write_paths) do
    if ro[p] then invalid("read_write_paths", "%q is also in read_only_paths", p) end
  end
  return o
end

-- ---- run options ----

-- resolve_cwd(cwd) -> the inside path: relative to the work dir, or
-- absolute under it; ".." may not climb out of it.
function M.resolve_cwd(cwd)
  check_type("cwd", cwd, "string")
  check_nonul("cwd", cwd)
  if cwd == "" then invalid("cwd", "an empty path") end
  local abs = cwd:sub(1, 1) == "/" and cwd or (M.SANDBOX_WORKDIR .. "/" .. cwd)
  local resolved, above = M.resolve_dotdot(abs)
  if above or not (resolved == M.SANDBOX_WORKDIR or M.is_under(resolved, M.SANDBOX_WORKDIR)) then
    invalid("cwd", "%s lies outside the work dir %s; give a path relative to it", describe(cwd),
      M.SANDBOX_WORKDIR)
  end
  return resolved
end

local function check_arg(option, s)
  check_nonul(option, s)
  if #s >= M.MAX_ARG_BYTES then
    invalid(option, "%d bytes is more than the kernel accepts in one argument (%d, MAX_ARG_STRLEN); "
      .. "write it to a file with put_bytes and run the file", #s, M.MAX_ARG_BYTES)
  end
  return s
end

local function stream_mode(option, v)
  if v == nil or v == true or v == "pipe" then return "pipe" end
  if v == false or v == "null" then return "null" end
  if v == "inherit" then return "inherit" end
  invalid(option, "true/\"pipe\", false/\"null\" or \"inherit\" expected, got %s", describe(v))
end

local INTERPRETERS = {
  shell = { "/bin/sh", "-c" },
  python = { "python3", "-c" },
  lua = { "luajit", "-e" },
}

-- run_code(code, opts) -> the run options of s:run_code: code must be a
-- string, opts a table or nil; script_type defaults to "python".  Shared by
-- on-device and remote sessions.
function M.run_code(code, opts)
  if type(code) ~= "string" then
    errors.raise(errors.InvalidArgument("code", "a string of source code expected, got " .. type(code)))
  end
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("opts", "a table of run options expected, got " .. type(opts)))
  end
  local o2 = {}
  for k, v in pairs(opts or {}) do o2[k] = v end
  if o2.script_type == nil then o2.script_type = "python" end
  return o2
end

-- run(cmd, opts, sess, extra_keys) -> normalized run options:
--   { argv, env ("K=V" array), cwd, stdin, stdout, stderr, stdin_data,
--     timeout_s, timeout_ms, network_mode, network_allowlist, script_type }
-- The policy's run ceilings and a run's network mode against its
-- session's are the engine's (Engine:admit_run).
-- sess = { policy =, network_mode = (the ceiling), env = (session env) }.
-- extra_keys: more accepted names (exec's "check"), left for the caller.
function M.run(cmd, opts, sess, extra_keys)
  if opts == nil then opts = {} end
  check_type("opts", opts, "table")
  local keys = M.RUN_KEYS
  if extra_keys then
    keys = {}
    for _, k in ipairs(M.RUN_KEYS) do keys[#keys + 1] = k end
    for _, k in ipairs(extra_keys) do keys[#keys + 1] = k end
  end
  M.check_keys(opts, keys, "run")
  local pol = sess.policy
  local o = {}

  o.script_type = opts.script_type == nil and "shell" or check_type("script_type", opts.script_type, "string")
  if not INTERPRETERS[o.script_type] then
    invalid("script_type", "\"shell\", \"python\" or \"lua\" expected, got %s", describe(o.script_type))
  end
  if type(cmd) == "string" then
    check_arg("cmd", cmd)
    local interp = INTERPRETERS[o.script_type]
    -- Python code written indented in the caller's source (textwrap.dedent).
    if o.script_type == "python" then cmd = dedent(cmd) end
    o.argv = { interp[1], interp[2], cmd }
  elseif type(cmd) == "table" then
    -- An argv array runs as is, without a shell.
    if opts.script_type ~= nil and opts.script_type ~= "shell" then
      invalid("script_type", "an argv table runs without an interpreter; give the code as a string")
    end
    o.argv = check_list("cmd", cmd)
    if #o.argv == 0 then invalid("cmd", "an empty argv table") end
    for _, a in ipairs(o.argv) do check_arg("cmd", a) end
  else
    invalid("cmd", "a command string (or an argv array) expected, got %s", describe(cmd))
  end

  o.stdout = stream_mode("stdout", opts.stdout)
  o.stderr = stream_mode("stderr", opts.stderr)
  if opts.stdin == nil or opts.stdin == false then
    o.stdin = "null"
  elseif type(opts.stdin) == "string" then
    o.stdin, o.stdin_data = "pipe", opts.stdin
  elseif opts.stdin == true then
    -- A live pipe: p:write(), p:close_stdin().
    o.stdin, o.stdin_live = "pipe", true
  else
    invalid("stdin", "a string of bytes or true (a live pipe) expected (nil: /dev/null), got %s",
      describe(opts.stdin))
  end
  if opts.pty ~= nil and opts.pty ~= false then
    o.pty_rows, o.pty_cols = M.pty_size(opts.pty)
    -- A terminal has one output stream, and its input is live.
    if opts.stderr ~= nil and opts.stderr ~= false and opts.stderr ~= "null" then
      invalid("stderr", "a pty run has one output stream (the terminal's): leave stderr unset")
    end
    if opts.stdout == false or opts.stdout == "null" or opts.stdout == "inherit" then
      invalid("stdout", "a pty run's output is the terminal's: leave stdout unset")
    end
    o.stdout, o.stderr, o.stdin_live = "pipe", "null", true
    if o.stdin == "null" then o.stdin = "pipe" end
  end
  -- A terminal needs a TERM its programs know (terminfo is in /usr).
  local pty_env = o.pty_rows and { TERM = M.PTY_TERM } or nil
  o.env = M.merge_env(M.DEFAULT_ENV, pty_env, pol.defaults.env, sess.env, M.check_env("env", opts.env))
  for _, kv in ipairs(o.env) do
    if #kv >= M.MAX_ARG_BYTES then invalid("env", "a variable is longer than the kernel accepts") end
  end
  if opts.cwd ~= nil then o.cwd = M.resolve_cwd(opts.cwd) end

  local timeout_s = pol.defaults.run_timeout_s
  if opts.timeout_s ~= nil then timeout_s = check_number("timeout_s", opts.timeout_s, 0) end

  local ceiling = sess.network_mode or "blocked"
  o.network_mode = ceiling
  if opts.network_mode ~= nil then
    o.network_mode = check_type("network_mode", opts.network_mode, "string")
    if not M.NETWORK_MODES[o.network_mode] then
      invalid("network_mode", "\"blocked\", \"allowlist\" or \"open\" expected, got %s", describe(o.network_mode))
    end
  end
  if opts.network_allowlist ~= nil then
    -- A run's own list (narrower than the session's: sbx.policy.narrow)
    -- puts it in a network namespace of its own, in allowlist mode.
    o.network_allowlist = check_entries("network_allowlist",
      check_list("network_allowlist", opts.network_allowlist))
    if #o.network_allowlist == 0 then
      invalid("network_allowlist", "an empty list: use network_mode = \"blocked\" for no network")
    end
    if opts.network_mode == nil then
      o.network_mode = "allowlist"
    elseif o.network_mode ~= "allowlist" then
      invalid("network_allowlist", "only with network_mode = \"allowlist\", not %q", o.network_mode)
    end
  end
  if o.network_mode == "allowlist" then o.env = M.with_proxy_env(o.env, sess.proxy_port) end

  if timeout_s ~= nil then
    o.timeout_s = timeout_s
    o.timeout_ms = math.min(4294967295, math.max(1, math.ceil(timeout_s * 1000)))
  end
  return o
end

-- pty_size(v) -> rows, cols of a run's pty option: true (24 x 80) or
-- { rows =, cols = } (integers 1..PTY_MAX, each defaulting as for true).
function M.pty_size(v)
  if v == true then return 24, 80 end
  if type(v) ~= "table" then
    invalid("pty", "true or { rows =, cols = } expected, got %s", describe(v))
  end
  for k in pairs(v) do
    if k ~= "rows" and k ~= "cols" then invalid("pty", "unknown field %s (rows, cols)", describe(k)) end
  end
  local function dim(name, d)
    local n = v[name]
    if n == nil then return d end
    if type(n) ~= "number" or n ~= math.floor(n) or n < 1 or n > M.PTY_MAX then
      invalid("pty", "%s: an integer 1..%d expected, got %s", name, M.PTY_MAX, describe(n))
    end
    return n
  end
  return dim("rows", 24), dim("cols", 80)
end

-- The proxy's variables for an allowlist run (replacing any the caller
-- set: there is no other way out anyway).  NO_PROXY covers only loopback.
function M.with_proxy_env(env, port)
  local url = ("http://127.0.0.1:%d"):format(port or M.PROXY_PORT)
  local set = {
    HTTP_PROXY = url, HTTPS_PROXY = url, ALL_PROXY = url,
    http_proxy = url, https_proxy = url, all_proxy = url,
    NO_PROXY = "localhost,127.0.0.1,::1", no_proxy = "localhost,127.0.0.1,::1",
  }
  local out = {}
  for _, kv in ipairs(env) do
    if not set[kv:match("^([^=]*)=")] then out[#out + 1] = kv end
  end
  for _, k in ipairs { "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
                       "http_proxy", "https_proxy", "all_proxy", "no_proxy" } do
    out[#out + 1] = k .. "=" .. set[k]
  end
  return out
end

-- open mode: the deny-list entries nftables can enforce inside the
-- namespace (addresses and CIDRs, whatever port they name: stricter, not
-- looser).  Names are left to the proxy (open mode has none).  Loopback
-- is the sandbox's own, never the host's, so it stays usable.
function M.open_deny(list)
  local match = require "sbx.match"
  local out, seen = {}, {}
  for _, s in ipairs(list or {}) do
    local e = match.parse_entry(s)
    if e and e.cidr and not seen[e.text] then
      seen[e.text] = true
      local c = e.cidr
      local loop = (c.addr.v == 4 and match.ip.in_cidr(c.addr, match.ip.parse_cidr("127.0.0.0/8")) and c.len >= 8)
        or (c.addr.v == 6 and c.len == 128 and match.ip.tostring(c.addr) == "::1")
      if not loop then out[#out + 1] = match.ip.tostring(c.addr) .. "/" .. c.len end
    end
  end
  return out
end

M.PROXY_PORT = 3128

return M

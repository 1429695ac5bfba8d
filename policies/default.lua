-- policies/default.lua: the default policy of sbx sessions.
--
-- A policy is a Lua chunk returning a table; policies/README.md explains
-- every field and hook.  It runs in a restricted environment (string,
-- table, math, os.time/clock/date, pairs, ipairs, type, tostring,
-- tonumber, select, error, assert, pcall, next, unpack, log, deny, match,
-- presets, sbx.PYPI_HOSTS/NPM_HOSTS/CLOUD_METADATA_DENY) under an
-- instruction budget and a deadline per hook call; a policy that fails to
-- load, or a hook that errors, runs too long or returns something
-- malformed, denies (fail closed).
--
-- This one: the userns backend, network blocked by default (allowlist and
-- open may be asked for), cloud metadata and the host's loopback denied,
-- modest resource ceilings.

local function concat(...)
  local out = {}
  for i = 1, select("#", ...) do
    for _, v in ipairs((select(i, ...))) do out[#out + 1] = v end
  end
  return out
end

return {
  name = "default",

  defaults = {
    backend = "userns",
    network_mode = "blocked",
    session_timeout_s = 3600,          -- soft lifetime of a session
    run_timeout_s = nil,               -- nil: a run may last as long as its session
    max_file_bytes = 256 * 1024 * 1024, -- put_bytes / get_bytes cap
    hostname = "sandbox",
    tmp_bytes = 256 * 1024 * 1024,     -- per-run /tmp
    shm_bytes = 64 * 1024 * 1024,      -- per-run /dev/shm
    env = {},                          -- extra default environment (K = V)
  },

  ceilings = {
    backends = { "userns", "privileged", "bubblewrap" }, -- "none" must be listed to be usable
    network_mode = "open",             -- the widest mode a session may ask for
    max_session_timeout_s = 86400,     -- hard ceiling: 24 h
    max_run_timeout_s = 86400,
    max_file_bytes = 1024 * 1024 * 1024,
    memory_mb = 4096,
    cpu_milli = 4000,                  -- 4 CPUs
    pids = 1024,
    disk_mb = 10240,
    gpus = 0,                          -- no GPU (gpu.lua grants one)
    shm_mb = 1024,                     -- /dev/shm size (pages count against memory_mb)
    nofile = 65536,                    -- RLIMIT_NOFILE a session may ask for
    clamp = false,                     -- above a ceiling: PolicyDenied, never clamped
  },

  filesystem = {
    -- Host directories bound read-only at the same path (symlinks such as
    -- /bin -> usr/bin on merged-/usr systems are recreated as symlinks).
    system_ro = { "/usr", "/bin", "/lib", "/lib64", "/sbin" },
    -- Entries of /etc bound read-only.  passwd, group, hosts and hostname are
    -- synthesized by the core; secrets (shadow, gshadow, sudoers, ssh,
    -- machine-id) are refused by the loader even if listed here.
    etc = {
      "alternatives", "ca-certificates", "ssl", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
      "nsswitch.conf", "localtime", "mime.types", "protocols", "services", "host.conf",
      "gai.conf", "os-release", "debian_version", "python3", "python3.11", "bash.bashrc",
      "profile", "inputrc",
    },
    -- read_only_paths / read_write_paths may be none of these, under none of
    -- them, and contain none of them (the state dir is added at runtime).
    forbidden = {
      "/", "/proc", "/sys", "/dev", "/home", "/root", "/etc", "/var/run/docker.sock",
      "/run", "/boot", "/var/lib/sbx",
    },
    -- allow_ro / allow_rw (unset here): when set, requested paths must also
    -- lie at or below one of their entries.
  },

  seccomp = {
    deny = {},                         -- on top of the core's baseline
  },

  network = {
    -- Checked first, against the name and every resolved address.  The
    -- proxy runs on the host, so the host's loopback is denied too.
    denylist = concat(sbx.CLOUD_METADATA_DENY, {
      "127.0.0.0/8", "::1", "0.0.0.0/8", "::",
    }),
    -- allowlist: callers give theirs (network_allowlist); nil here.
  },

  -- Hooks: return true to allow, an adjusted copy of req to adjust (within
  -- the ceilings), false and a reason (or deny("reason")) to deny.
  on_session_open = function(req, ctx)
    return true
  end,

  on_run = function(req, ctx)
    return true
  end,

  on_connect = function(host, port, addrs, ctx)
    return true
  end,

  on_close = function(session, ctx)
  end,
}

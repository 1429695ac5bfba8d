-- policies/default.lua: the default policy of sbx sessions.
--
-- A policy is a Lua chunk returning a table.  It runs in a restricted
-- environment (string, table, math, pairs, ipairs, type, tostring, tonumber,
-- select, error, assert, pcall, next, unpack, `log(...)` and `presets`, the
-- network presets of sbx) with an instruction budget; a policy that fails to
-- load or returns something else than a table denies every session (fail
-- closed).  This one is data only; hooks (on_session_open, on_run, ...) come
-- with the policy engine.
--
-- Sections:
--   defaults    what a session gets when it does not ask
--   ceilings    the most a session or run may ask for
--   filesystem  what the sandbox sees of the host
--   seccomp     extra syscalls to refuse on top of the built-in baseline
--   network     deny-list every session gets (allow-lists come from callers)

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
      "/run", "/boot",
    },
  },

  seccomp = {
    deny = {},
  },

  network = {
    denylist = presets.CLOUD_METADATA_DENY,
  },
}

-- policies/strict.lua: the tightest shipped policy.
--
-- userns only, no network at all (the ceiling is "blocked"), small
-- ceilings, no extra host paths (read_only_paths and read_write_paths are
-- refused), no pinned work dirs, short timeouts.  For untrusted code that
-- needs nothing but the CPU and its work dir.

return {
  name = "strict",

  defaults = {
    backend = "userns",
    network_mode = "blocked",
    session_timeout_s = 900,
    run_timeout_s = 60,
    max_file_bytes = 16 * 1024 * 1024,
    hostname = "sandbox",
    tmp_bytes = 64 * 1024 * 1024,
    shm_bytes = 16 * 1024 * 1024,
  },

  ceilings = {
    backends = { "userns" },
    network_mode = "blocked",
    max_session_timeout_s = 3600,
    max_run_timeout_s = 300,
    max_file_bytes = 64 * 1024 * 1024,
    memory_mb = 512,
    cpu_milli = 1000,
    pids = 128,
    disk_mb = 1024,
    gpus = 0,
    shm_mb = 256,
    nofile = 4096,
  },

  filesystem = {
    system_ro = { "/usr", "/bin", "/lib", "/lib64", "/sbin" },
    etc = { "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime",
      "nsswitch.conf", "python3", "python3.11" },
    forbidden = { "/", "/proc", "/sys", "/dev", "/home", "/root", "/etc", "/run", "/boot",
      "/var/run/docker.sock", "/var/lib/sbx" },
    allow_ro = {},                     -- no extra read-only paths
    allow_rw = {},                     -- no extra writable paths
  },

  seccomp = {
    -- On top of the baseline: no tracing, no raw kernel keyrings, no BPF.
    deny = { "ptrace", "process_vm_readv", "process_vm_writev", "add_key", "request_key",
      "keyctl", "bpf", "perf_event_open", "userfaultfd" },
  },

  network = {
    denylist = sbx.CLOUD_METADATA_DENY,
  },

  on_session_open = function(req, ctx)
    if req.work_dir ~= nil then
      return deny("strict: a pinned work_dir is not allowed; the session gets a fresh one")
    end
    return true
  end,

  on_run = function(req, ctx)
    if req.network_mode ~= nil and req.network_mode ~= "blocked" then
      return false, "strict: runs have no network"
    end
    return true
  end,

  on_connect = function(host, port, addrs, ctx)
    return false, "strict: no network"
  end,
}

-- policies/gpu.lua: sessions with one GPU.
--
-- CUDA's cuInit fails in an unprivileged user namespace, so GPU sessions
-- use the privileged backend (namespaces made with CAP_SYS_ADMIN, the
-- workload still an unprivileged uid without capabilities).  At most one
-- GPU per session; network blocked unless asked (allowlist at most).

return {
  name = "gpu",

  defaults = {
    backend = "privileged",
    network_mode = "blocked",
    session_timeout_s = 3600,
    shm_bytes = 1024 * 1024 * 1024,    -- ML frameworks use /dev/shm heavily
  },

  ceilings = {
    backends = { "privileged" },
    network_mode = "allowlist",
    max_session_timeout_s = 12 * 3600,
    max_run_timeout_s = 12 * 3600,
    memory_mb = 32768,
    cpu_milli = 8000,
    pids = 2048,
    disk_mb = 51200,
    gpus = 1,
    shm_mb = 8192,
    nofile = 65536,
  },

  network = {
    denylist = sbx.CLOUD_METADATA_DENY,
    allowlist = sbx.PYPI_HOSTS,
  },

  on_session_open = function(req, ctx)
    log("gpu session", req.name or "(unnamed)", "gpus =", tostring(req.gpus or 0))
    return true
  end,
}

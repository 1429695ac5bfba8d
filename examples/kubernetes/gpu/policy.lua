-- The GPU cluster's policy: privileged backend (required for CUDA), at
-- most the GPUs sbxd was started with (--ceilings gpus=N) per session.
return {
  name = "kubernetes-gpu",

  defaults = {
    backend = "privileged",
    network_mode = "blocked",
    session_timeout_s = 3600,
    shm_bytes = 1024 * 1024 * 1024, -- ML frameworks use /dev/shm heavily
  },

  ceilings = {
    backends = { "privileged" },
    network_mode = "allowlist",
    max_session_timeout_s = 12 * 3600,
    memory_mb = 32768,
    cpu_milli = 8000,
    pids = 2048,
    -- Lowered at start to what the pod was given (sbxd --ceilings gpus=N).
    gpus = 8,
    shm_mb = 8192,
  },

  network = {
    denylist = sbx.CLOUD_METADATA_DENY,
    allowlist = sbx.PYPI_HOSTS,
  },
}

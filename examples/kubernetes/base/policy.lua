-- The cluster's policy (a ConfigMap, reloaded by sbxd --watch-policy when
-- it changes).  The pods run as a non-root user, so the userns backend is
-- the one that works; session ceilings are further lowered at start to
-- what the pod's resources.limits leave after sbxd's reserve.
return {
  name = "kubernetes",

  defaults = {
    backend = "userns",
    network_mode = "blocked",
    session_timeout_s = 3600,
  },

  ceilings = {
    backends = { "userns" },
    -- "open" needs pasta and nft in the pod's namespace: left out here.
    network_mode = "allowlist",
    max_session_timeout_s = 24 * 3600,
    memory_mb = 4096,
    cpu_milli = 2000,
    pids = 1024,
    gpus = 0,
  },

  network = {
    denylist = sbx.CLOUD_METADATA_DENY,
    allowlist = sbx.PYPI_HOSTS,
  },
}

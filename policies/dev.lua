-- policies/dev.lua: local development on a trusted machine.
--
-- Permits backend = "none" (no isolation at all: the command runs as the
-- caller, on the host) besides the isolating backends, and open network.
-- Never use it for untrusted code.  Runs re-check against a reloaded
-- version of this file (reapply = true), so editing it takes effect in
-- open sessions at once.

return {
  name = "dev",
  reapply = true,

  defaults = {
    backend = "userns",
    network_mode = "blocked",
    session_timeout_s = 8 * 3600,
  },

  ceilings = {
    backends = { "userns", "privileged", "bubblewrap", "none" },
    network_mode = "open",
    max_session_timeout_s = 86400,
    max_run_timeout_s = 86400,
    memory_mb = 16384,
    cpu_milli = 8000,
    pids = 4096,
    disk_mb = 51200,
    gpus = 1,
    shm_mb = 4096,
    nofile = 65536,
  },

  network = {
    denylist = sbx.CLOUD_METADATA_DENY,
  },

  on_session_open = function(req, ctx)
    if req.backend == "none" then
      log("WARNING: session", req.name or "(unnamed)", "runs without isolation (backend none)")
    end
    return true
  end,
}

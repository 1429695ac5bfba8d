-- policies/agent.lua: for coding agents that install packages.
--
-- userns; the network is an allow-list of the PyPI and npm hosts (HTTPS
-- only), never wider: sessions may ask for "blocked" or "allowlist", and an
-- allow-list they bring must stay within the policy's.  Cloud metadata and
-- the host's loopback are denied whatever resolves to them.

local ALLOWED = {}
for _, h in ipairs(sbx.PYPI_HOSTS) do ALLOWED[#ALLOWED + 1] = h end
for _, h in ipairs(sbx.NPM_HOSTS) do ALLOWED[#ALLOWED + 1] = h end

local DENY = {}
for _, h in ipairs(sbx.CLOUD_METADATA_DENY) do DENY[#DENY + 1] = h end
for _, h in ipairs { "127.0.0.0/8", "::1", "0.0.0.0/8", "::", "10.0.0.0/8", "172.16.0.0/12",
  "192.168.0.0/16", "fc00::/7" } do DENY[#DENY + 1] = h end

local HTTPS = { [443] = true }

return {
  name = "agent",

  defaults = {
    backend = "userns",
    network_mode = "allowlist",
    session_timeout_s = 3600,
    run_timeout_s = 1800,
  },

  ceilings = {
    backends = { "userns" },
    network_mode = "allowlist",
    max_session_timeout_s = 4 * 3600,
    max_run_timeout_s = 3600,
    memory_mb = 4096,
    cpu_milli = 2000,
    pids = 512,
    disk_mb = 8192,
    gpus = 0,
    shm_mb = 1024,
    nofile = 65536,
  },

  network = {
    denylist = DENY,
    allowlist = ALLOWED,
  },

  on_session_open = function(req, ctx)
    -- A caller's allow-list may only name hosts the policy allows.
    for _, h in ipairs(req.network_allowlist or {}) do
      if not match.list(ALLOWED, (h:gsub("^%*%.", "x."))) then
        return deny("agent: " .. h .. " is not a package registry host")
      end
    end
    if req.network_mode == "allowlist" and req.network_allowlist == nil then
      req.network_allowlist = ALLOWED
      return req
    end
    return true
  end,

  on_connect = function(host, port, addrs, ctx)
    if not HTTPS[port] then return false, "agent: HTTPS (port 443) only" end
    if not match.list(ALLOWED, host, port) then
      return false, "agent: " .. host .. " is not a package registry host"
    end
    return true
  end,
}

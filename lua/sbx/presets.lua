-- sbx.presets: network allow/deny presets, exported as sbx.PYPI_HOSTS,
-- sbx.NPM_HOSTS and sbx.CLOUD_METADATA_DENY.
--
-- Entries are DNS names, DNS patterns ("*.example.org" matches any name
-- strictly below example.org) or IP addresses / CIDRs, optionally with a
-- port or port range (sbx.match gives the syntax and does the matching).
-- The policy engine (engine:connect) and the proxy check a name and every
-- address it resolves to against the deny-list first, then the allow-list.  These tables are copied when
-- handed out, so a caller editing its copy cannot change the presets.

local M = {}

-- Python packages: the index and the file hosts pip/uv download from.
M.PYPI_HOSTS = {
  "pypi.org",
  "files.pythonhosted.org",
  "*.pythonhosted.org",
  "pypi.python.org",
}

-- npm packages.
M.NPM_HOSTS = {
  "registry.npmjs.org",
  "*.npmjs.org",
  "registry.yarnpkg.com",
  "npmjs.com",
}

-- Cloud instance metadata services: they hand out credentials, never let a
-- sandbox reach them.  Always part of a session's deny-list.  Addresses are
-- matched after unwrapping IPv4-mapped, NAT64, 6to4 and Teredo forms and
-- in every IPv4 spelling (sbx.match.ip), names case-insensitively.
M.CLOUD_METADATA_DENY = {
  -- addresses
  "169.254.169.254",          -- AWS, GCP, Azure, Oracle, OpenStack, DigitalOcean IMDS
  "169.254.170.2",            -- AWS ECS task metadata and credentials
  "169.254.170.23",           -- AWS EKS Pod Identity agent
  "169.254.0.0/16",           -- link-local as a whole (other metadata endpoints)
  "100.100.100.200",          -- Alibaba Cloud
  "192.0.0.192",              -- Oracle Cloud (legacy metadata address)
  "168.63.129.16",            -- Azure WireServer (host agent, certificates)
  "fd00:ec2::254",            -- AWS IMDS over IPv6 (Nitro)
  "fd00:ec2::23",             -- AWS EKS Pod Identity over IPv6
  "fd20:ce::254",             -- GCP metadata over IPv6
  "fe80::/10",                -- IPv6 link-local
  -- names
  "metadata.google.internal", -- GCP
  "metadata.goog",            -- GCP
  "metadata",                 -- GCP short name (resolv.conf search list)
  "metadata.azure.com",       -- Azure
  "metadata.azure.internal",
  "instance-data",            -- AWS's name for IMDS inside a VPC
  "instance-data.ec2.internal",
  "metadata.tencentyun.com",  -- Tencent Cloud
  "metadata.oraclecloud.com", -- Oracle Cloud
}

-- copy(list) -> a fresh array with the same entries.
function M.copy(list)
  local out = {}
  for i, v in ipairs(list) do out[i] = v end
  return out
end

return M

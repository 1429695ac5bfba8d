-- sbx.presets: network allow/deny presets, exported as sbx.PYPI_HOSTS,
-- sbx.NPM_HOSTS and sbx.CLOUD_METADATA_DENY.
--
-- Entries are DNS names, DNS patterns ("*.example.org" matches any name
-- strictly below example.org) or IP addresses / CIDRs.  The proxy of the
-- networking issue checks a name and every address it resolves to against
-- the deny-list first, then the allow-list.  These tables are copied when
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
-- sandbox reach them.  Always part of a session's deny-list.
M.CLOUD_METADATA_DENY = {
  "169.254.169.254",          -- AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle
  "169.254.170.2",            -- AWS ECS task metadata
  "169.254.0.0/16",           -- link-local as a whole (other metadata endpoints)
  "100.100.100.200",          -- Alibaba Cloud
  "fd00:ec2::254",            -- AWS IMDS over IPv6
  "fe80::/10",                -- IPv6 link-local
  "metadata.google.internal",
  "metadata.goog",
  "metadata.azure.com",
  "metadata.azure.internal",
  "instance-data",            -- AWS's name for IMDS inside a VPC
  "instance-data.ec2.internal",
  "metadata.tencentyun.com",
}

-- copy(list) -> a fresh array with the same entries.
function M.copy(list)
  local out = {}
  for i, v in ipairs(list) do out[i] = v end
  return out
end

return M

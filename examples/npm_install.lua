-- examples/npm_install.lua: the headline example for node: write data with
-- the network blocked, `npm install` a package from the npm registry
-- through the allowlist proxy, compute with the network blocked using both.
--
--   build/bin/sbxlua examples/npm_install.lua
--
-- Through sbxd it is the same script with the one `sbx.session {` line
-- changed (see the comment there).  SBX_EXAMPLE_NPM_PACKAGE names the
-- package (default lodash; it must export mean()) and SBX_EXAMPLE_CA a CA
-- for the registry to trust (make test runs it against a local registry:
-- tests/spec/headline_spec.lua).
local sbx = require "sbx"

local PACKAGE = os.getenv("SBX_EXAMPLE_NPM_PACKAGE") or "lodash"

local WRITE_DATA = [[node -e 'require("fs").writeFileSync("data.json", JSON.stringify([1, 2, 3, 4]))']]

local COMPUTE = ([[
const pkg = require("%s");    // installed into ./node_modules by step 2
const data = JSON.parse(require("fs").readFileSync("data.json"));
console.log(`%s=${require("%s/package.json").version} mean=${pkg.mean(data)}`);
]]):format(PACKAGE, PACKAGE, PACKAGE)

-- Through sbxd, the one line to change (SBX_ENDPOINT, SBX_TOKEN: the server and your token):
--   local s = sbx.remote.session { endpoint = os.getenv("SBX_ENDPOINT"), token = os.getenv("SBX_TOKEN"),
local s = sbx.session {
  backend = "userns",
  network_mode = "allowlist",
  network_allowlist = sbx.NPM_HOSTS,
  ca_certs = { os.getenv("SBX_EXAMPLE_CA") },  -- none: the system's CAs
}

-- 1. Write a file to the work dir with the network blocked.
s:exec(WRITE_DATA, { network_mode = "blocked", check = true })

-- 2. Install into the work dir's node_modules (the session's allowlist applies).
s:exec("npm install " .. PACKAGE, { check = true, timeout_s = 300 })

-- 3. Back to blocked: the data from step 1, the package from step 2.
s:put_bytes("compute.js", COMPUTE)
local r = s:exec("node compute.js", { network_mode = "blocked", check = true })
print((r.stdout:gsub("%s+$", "")))  -- e.g. "lodash=4.17.21 mean=2.5"
s:close()

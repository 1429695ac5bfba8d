-- examples/install_and_compute.lua: the reference's headline example, in sbx.
--
-- State that persists across runs lives in two places: the session's work
-- dir (data.json below) and the session venv (the install below).  The
-- network posture is chosen per run: write the data with the network
-- blocked, install a package from PyPI through the allowlist proxy, compute
-- with the network blocked again using both.
--
--   build/bin/sbxlua examples/install_and_compute.lua
--
-- Through sbxd it is the same script with the one `sbx.session {` line
-- changed (see the comment there).  SBX_EXAMPLE_PACKAGE names the package
-- (default requests) and SBX_EXAMPLE_CA a CA for the index to trust (make
-- test runs it against a local index: tests/spec/headline_spec.lua).
local sbx = require "sbx"

local PACKAGE = os.getenv("SBX_EXAMPLE_PACKAGE") or "requests"

local WRITE_DATA = [[
import json, pathlib
pathlib.Path("data.json").write_text(json.dumps([1, 2, 3, 4]))
]]

local COMPUTE = ([[
import importlib, json, statistics
pkg = importlib.import_module("%s")   # the install from step 2 is visible here
data = json.loads(open("data.json").read())
print(f"{pkg.__name__}={pkg.__version__} mean={statistics.mean(data)}")
]]):format(PACKAGE)

-- The session's network_mode is the ceiling of what any run can reach; a
-- run's network_mode = "blocked" narrows from there.
-- Through sbxd, the one line to change (SBX_ENDPOINT, SBX_TOKEN: the server and your token):
--   local s = sbx.remote.session { endpoint = os.getenv("SBX_ENDPOINT"), token = os.getenv("SBX_TOKEN"),
local s = sbx.session {
  backend = "userns",
  network_mode = "allowlist",
  network_allowlist = sbx.PYPI_HOSTS,
  ca_certs = { os.getenv("SBX_EXAMPLE_CA") },  -- none: the system's CAs
}

-- 1. Write a file to the work dir (persists).  Tighten to blocked.
s:exec(WRITE_DATA, { script_type = "python", network_mode = "blocked", check = true })

-- 2. Install into the session venv (the session's allowlist applies).
s:exec("pip install " .. PACKAGE, { check = true, timeout_s = 300 })

-- 3. Back to blocked.  Use the file from step 1 and the package from step 2.
local out = s:run_code(COMPUTE, { network_mode = "blocked" })
print((out:gsub("%s+$", "")))  -- e.g. "requests=2.28.1 mean=2.5"
s:close()

-- headline_spec.lua: the reference's headline example runs as written, end
-- to end (issue 17, row 2): examples/install_and_compute.lua writes data with
-- the network blocked, `pip install`s a package from PyPI under allowlist +
-- sbx.PYPI_HOSTS into the session venv, and computes with the network
-- blocked using both; examples/npm_install.lua does the same with `npm
-- install` and sbx.NPM_HOSTS.  Each runs on-device and through sbxd, the
-- remote copy differing from the example by its one session line.
--
-- No internet here: a fake one (tests/net) whose DNS puts pypi.org,
-- files.pythonhosted.org and registry.npmjs.org on a test server that
-- serves a PEP 503 index with a wheel and an npm registry document with a
-- tarball (tests/net/fakeindex.py builds them at setup), over HTTPS signed
-- by a test CA the sessions trust through ca_certs (SBX_EXAMPLE_CA).  The
-- host side (sbxlua, sbxd, the proxy) runs in the fake host netns.
local H = require "spec.sec_helpers"
local F = require "net.fakenet"
local S = dofile(H.ROOT .. "/tests/server/harness.lua")

local PY, PYVER = "sbxdemo", "1.2.3"
local NPM, NPMVER = "sbx-demo-npm", "1.0.0"

local function has(out, text)
  assert.is_truthy(out:find(text, 1, true), "missing " .. ("%q"):format(text) .. " in:\n" .. out)
end

-- The example with its session line swapped for the remote one its comment
-- gives; asserts that exactly one line differs.
local function remote_copy(example, dir)
  local src = assert(H.read_file(H.ROOT .. "/" .. example))
  local remote = assert(src:match("\n%-%-   (local s = sbx%.remote%.session {[^\n]*)\n"), "no remote line")
  local out, n = src:gsub("\nlocal s = sbx%.session {\n", "\n" .. remote:gsub("%%", "%%%%") .. "\n")
  assert.are.equal(1, n)
  local a, b = H.lines(src), H.lines(out)
  assert.are.equal(#a, #b)
  local differ = 0
  for i = 1, #a do if a[i] ~= b[i] then differ = differ + 1 end end
  assert.are.equal(1, differ)
  local path = dir .. "/" .. example:match("[^/]+$")
  H.write_file(path, out)
  return path
end

describe("the headline example against a local package index", function()
  local ok, why = F.available()
  local runnable = ok and H.sh("command -v npm >/dev/null && command -v node >/dev/null && echo y"):match("y")
  if not runnable then
    it("needs network namespaces, node and npm", function() pending(why or "node/npm missing") end)
    return
  end

  local net, srv

  setup(function()
    net = F.up(F.unique("sbxhl"))
    net:zone { ["pypi.org"] = "198.51.100.2", ["files.pythonhosted.org"] = "198.51.100.2",
               ["registry.npmjs.org"] = "198.51.100.2" }
    net:package_index { python = { PY, PYVER }, npm = { NPM, NPMVER } }
  end)

  teardown(function()
    if srv then srv:cleanup() end
    if net then net:down() end
  end)

  -- Run a script in the fake host netns with the example's variables (and
  -- env's, a table).
  local function run(script, env)
    local vars = { SBX_EXAMPLE_CA = net:ca_file(), SBX_EXAMPLE_PACKAGE = PY, SBX_EXAMPLE_NPM_PACKAGE = NPM }
    for k, v in pairs(env or {}) do vars[k] = v end
    return net:sbxlua(script, vars)
  end

  local function requested(path)
    for _, line in ipairs(net:http_requests()) do
      if line:find(" GET " .. path .. " ", 1, true) then return true end
    end
    return false
  end

  local function sbxd()
    if not srv then
      srv = assert(S.start { netns = net.host_ns })
    end
    return { SBX_ENDPOINT = srv.url, SBX_TOKEN = srv.token.alice }
  end

  local WHEEL = "/packages/"

  it("control: with the network blocked, pip install reaches nothing and fails", function()
    local path = net:work_dir() .. "/blocked.lua"
    H.write_file(path, ([[
local sbx = require "sbx"
local s = sbx.session { backend = "userns", ca_certs = { os.getenv("SBX_EXAMPLE_CA") } }
local r = s:exec("pip install --retries 0 --timeout 5 %s")
print("rc", r.returncode)
print(r.stderr)
s:close()
]]):format(PY))
    local out, rc = run(path)
    assert.are.equal(0, rc, out)
    has(out, "No matching distribution found for " .. PY)
    assert.is_falsy(out:find("rc\t0\n", 1, true), out)
    assert.is_false(requested("/simple/" .. PY .. "/"))
  end)

  it("install_and_compute.lua runs on-device: blocked write, pip install via the proxy, blocked compute", function()
    local out, rc = run("examples/install_and_compute.lua")
    assert.are.equal(0, rc, out)
    has(out, ("%s=%s mean=2.5\n"):format(PY, PYVER))
    assert.is_true(requested("/simple/" .. PY .. "/"), table.concat(net:http_requests(), "\n"))
    local got = false
    for _, line in ipairs(net:http_requests()) do
      got = got or (line:find(WHEEL, 1, true) and line:find(" files.pythonhosted.org", 1, true)) ~= nil
    end
    assert.is_true(got, "the wheel was not fetched from files.pythonhosted.org")
  end)

  it("install_and_compute.lua runs through sbxd with its session line changed", function()
    local env = sbxd()
    local path = remote_copy("examples/install_and_compute.lua", net:work_dir())
    local before = #net:http_requests()
    local out, rc = run(path, env)
    assert.are.equal(0, rc, out)
    has(out, ("%s=%s mean=2.5\n"):format(PY, PYVER))
    -- This run's own install went to the index again (a fresh session venv).
    local again = false
    for i, line in ipairs(net:http_requests()) do
      again = again or (i > before and line:find(" GET /simple/" .. PY .. "/ ", 1, true) ~= nil)
    end
    assert.is_true(again)
  end)

  it("npm_install.lua runs on-device: npm install via the proxy, node computes with the network blocked", function()
    local out, rc = run("examples/npm_install.lua")
    assert.are.equal(0, rc, out)
    has(out, ("%s=%s mean=2.5\n"):format(NPM, NPMVER))
    assert.is_true(requested("/" .. NPM .. "/-/" .. NPM .. "-" .. NPMVER .. ".tgz"),
      table.concat(net:http_requests(), "\n"))
  end)

  it("npm_install.lua runs through sbxd with its session line changed", function()
    local env = sbxd()
    local path = remote_copy("examples/npm_install.lua", net:work_dir())
    local out, rc = run(path, env)
    assert.are.equal(0, rc, out)
    has(out, ("%s=%s mean=2.5\n"):format(NPM, NPMVER))
  end)
end)

-- backend_contract_spec.lua: the contract suites (api_spec, files_spec,
-- process_spec's local runs) run again on every other backend this machine
-- can run: privileged (root),
-- bubblewrap (a bwrap binary and user namespaces), none.  Each suite is
-- loaded with sbx.session defaulting to that backend (under a policy that
-- lists it) and its `"userns"` backend assertions reading the backend under
-- test; cases a backend documents as not applying are marked pending with
-- the reason (never silently dropped).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx

if not T.has_core() then
  describe("the contract suites on every backend", function()
    pending("needs sbx.core: run the specs with build/bin/sbxlua")
  end)
  return
end

local function sh_ok(cmd)
  local ok = os.execute(cmd .. " >/dev/null 2>&1")
  return ok == true or ok == 0
end

local is_root = sh_ok("test $(id -u) = 0")
local has_bwrap = sh_ok("bwrap --unshare-all --ro-bind /usr /usr --symlink usr/lib /lib "
  .. "--symlink usr/lib64 /lib64 --symlink usr/bin /bin -- /usr/bin/true")

-- Cases that do not apply, per backend, and why.
local POLICY_CASE = "refuses unknown options, unknown backends and wrong types"
local POLICY_WHY = "checks the default policy's refusals (gpus, none); the userns run covers it"
local NOT_APPLICABLE = {
  privileged = {
    [POLICY_CASE] = POLICY_WHY,
    ["write into the host work dir, owned by the sandbox's host uid"] =
      "privileged gives each session a host uid of its own (300000 + n), not 231072",
  },
  bubblewrap = { [POLICY_CASE] = POLICY_WHY },
  none = {
    [POLICY_CASE] = POLICY_WHY,
    ["binds read_only_paths read-only and read_write_paths writable"] =
      "none has no mount namespace: nothing is bound, the host is all there",
    ["runs in the work dir, or in cwd beneath it"] =
      "none runs in the host work dir itself, not at /tmp/sandbox-work",
    ["keeps sequential runs independent: a fresh /tmp each time, the work dir persists"] =
      "none shares the host's /tmp",
    ["write into the host work dir, owned by the sandbox's host uid"] =
      "none runs as the caller's own uid",
  },
}

-- Whole blocks that do not apply on another backend, and why.
local NOT_HERE = {
  ["sbx.process over a remote run"] = "a remote run is sbxd's, on userns: process_spec covers it",
}

local BACKENDS = {
  { name = "privileged", ok = is_root, why = "needs root" },
  { name = "bubblewrap", ok = has_bwrap, why = "needs a working bwrap (apt-get install bubblewrap)" },
  { name = "none", ok = true },
}

local POLICY = T.tmpdir("/var/tmp") .. "/backends.lua"
do
  local f = assert(io.open(POLICY, "w"))
  f:write('return { name = "backend-contract", ceilings = { backends = '
    .. '{ "userns", "privileged", "bubblewrap", "none" } } }\n')
  f:close()
end

-- Load a spec file as a chunk whose sbx.session defaults to backend b.
local function load_suite(file, b)
  local f = assert(io.open(here .. file, "rb"))
  local src = f:read("*a")
  f:close()
  src = src:gsub('assert%.are%.equal%("userns", ', 'assert.are.equal(BACKEND_UNDER_TEST, ')
  src = src:gsub('assert%.equal%("userns", ', 'assert.equal(BACKEND_UNDER_TEST, ')
  src = src:gsub('it%("opens a userns session', 'it("opens a " .. BACKEND_UNDER_TEST .. " session')
  local chunk = assert(loadstring(src, "@" .. here .. file))
  local env = setmetatable({ BACKEND_UNDER_TEST = b }, { __index = getfenv(1) })
  env.it = function(name, fn)
    local why = NOT_APPLICABLE[b][name]
    if why then return pending(name .. " (" .. why .. ")") end
    return it(name, fn)
  end
  env.describe = function(name, fn)
    local why = NOT_HERE[name]
    if why then return describe(name, function() pending(name .. " (" .. why .. ")") end) end
    return describe(name, fn)
  end
  setfenv(chunk, env)
  return chunk
end

local original = sbx.session
local function patch(b)
  sbx.session = function(opts)
    if type(opts) ~= "table" then return original(opts) end
    local o = {}
    for k, v in pairs(opts) do o[k] = v end
    if o.backend == nil or o.backend == "userns" then o.backend = b end
    if o.policy == nil then o.policy = POLICY end
    return original(o)
  end
end

for _, b in ipairs(BACKENDS) do
  describe("backend " .. b.name, function()
    if not b.ok then
      pending(b.name .. ": " .. b.why)
      return
    end
    setup(function() patch(b.name) end)
    teardown(function() sbx.session = original end)
    load_suite("api_spec.lua", b.name)()
    load_suite("files_spec.lua", b.name)()
    load_suite("process_spec.lua", b.name)()

    it("reports the backend on every process and result", function()
      local s = sbx.session {}
      finally(function() s:close() end)
      assert.are.equal(b.name, s.backend)
      local p = s:run("true")
      p:wait()
      assert.are.equal(b.name, p.backend)
      assert.are.equal(b.name, s:exec("true").backend)
    end)
  end)
end

describe("backend none", function()
  teardown(T.cleanup) -- the last block: the policy file goes now

  it("is refused unless the policy lists it", function()
    local e = T.expect("PolicyDenied", original, { backend = "none" })
    assert.are.equal("ceilings.backends", e.rule)
  end)

  it("runs as the caller, in the host work dir", function()
    local s = original { backend = "none", policy = POLICY }
    finally(function() s:close() end)
    local r = s:exec("id -u; pwd")
    local p = io.popen("id -u")
    local me = p:read("*l")
    p:close()
    assert.are.equal(me .. "\n" .. s.work_dir .. "\n", r.stdout)
  end)
end)

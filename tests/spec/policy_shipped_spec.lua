-- policy_shipped_spec.lua: what each policy of policies/ allows and
-- denies, decided through the engine (sbx.policy) so that backends not
-- built yet (privileged, none) do not hide the policy's decisions; plus
-- on-device sessions where this build can open them.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx
local policy = require "sbx.policy"

local function engine(name)
  local logs = {}
  local e = policy.load(T.ROOT .. "/policies/" .. name .. ".lua", { log = function(l) logs[#logs + 1] = l end })
  return e, logs
end

local function allows_open(e, req)
  local ok, r = pcall(e.session_open, e, req, { origin = "local" })
  assert(ok, "expected the policy to allow " .. tostring(r))
  return r
end

local function denies_open(e, req, rule)
  local err = T.expect("PolicyDenied", e.session_open, e, req, { origin = "local" })
  if rule then assert.are.equal(rule, err.rule, err.message) end
  return err
end

local function run_req(t)
  local r = { argv = { "/bin/sh", "-c", "true" }, cmd = "true", env = {}, network_mode = "blocked" }
  for k, v in pairs(t or {}) do r[k] = v end
  return r
end

local function ctx(mode) return { session = { id = "x", backend = "userns", network_mode = mode or "blocked" } } end

local function connect_rule(e, host, port, addrs, c)
  local ok, err = e:connect(host, port, addrs or {}, c)
  if ok then return true end
  return err.rule
end

describe("policies/default.lua", function()
  local e = engine("default")

  it("gives userns and blocked network by default, permits allowlist and open", function()
    assert.are.equal("userns", e.defaults.backend)
    assert.are.equal("blocked", e.defaults.network_mode)
    for _, m in ipairs { "blocked", "allowlist", "open" } do
      allows_open(e, { backend = "userns", network_mode = m })
    end
    for _, b in ipairs { "userns", "privileged", "bubblewrap" } do allows_open(e, { backend = b }) end
    denies_open(e, { backend = "none" }, "ceilings.backends")
  end)

  it("has modest ceilings and no GPU", function()
    allows_open(e, { memory_mb = 4096, cpu_milli = 4000, pids = 1024, disk_mb = 10240, gpus = 0 })
    denies_open(e, { memory_mb = 4097 }, "ceilings.memory_mb")
    denies_open(e, { cpu_milli = 4001 }, "ceilings.cpu_milli")
    denies_open(e, { pids = 1025 }, "ceilings.pids")
    denies_open(e, { gpus = 1 }, "ceilings.gpus")
    denies_open(e, { timeout_s = 86401 }, "ceilings.max_session_timeout_s")
    T.expect("PolicyDenied", e.run, e, run_req { timeout_s = 86401 }, ctx())
  end)

  it("denies cloud metadata and the host's loopback in every mode", function()
    local open = { network_mode = "open" }
    assert.is_true(connect_rule(e, "pypi.org", 443, { "151.101.0.223" }, open))
    for _, c in ipairs {
      { "169.254.169.254", 80 }, { "0xa9fea9fe", 80 }, { "fd00:ec2::254", 80 }, { "metadata.google.internal", 80 },
      { "100.100.100.200", 80 }, { "169.254.170.2", 80 }, { "evil.example", 80, { "169.254.169.254" } },
      { "localhost.example", 8080, { "127.0.0.1" } }, { "127.1", 22 }, { "::1", 22 }, { "0.0.0.0", 80 },
      { "x.example", 80, { "::ffff:127.0.0.1" } },
    } do
      assert.are.equal("network.denylist", connect_rule(e, c[1], c[2], c[3], open), c[1])
      assert.are.equal("network.denylist", connect_rule(e, c[1], c[2], c[3],
        { network_mode = "allowlist", allowlist = { c[1] } }), c[1])
    end
    assert.are.equal("network_mode", connect_rule(e, "pypi.org", 443, {}, { network_mode = "blocked" }))
    assert.are.equal("network.allowlist", connect_rule(e, "evil.org", 443, {},
      { network_mode = "allowlist", allowlist = sbx.PYPI_HOSTS }))
  end)

  it("refuses unsafe mounts whatever a session asks", function()
    for _, p in ipairs { "/", "/proc", "/sys", "/dev", "/etc", "/home", "/root", "/var/run/docker.sock",
      "/run/containerd/containerd.sock", "/var/lib/sbx", "/home/me" } do
      assert.is_string(policy.forbidden_hit(e, p), p)
    end
    assert.is_nil(policy.forbidden_hit(e, "/opt/venv"))
  end)

  if T.has_core() then
    it("opens on-device sessions and runs commands", function()
      local s = sbx.session { policy = "policies/default.lua" }
      finally(function() s:close() end)
      assert.are.equal("ok\n", s:exec("echo ok").stdout)
      T.expect("PolicyDenied", sbx.session, { policy = "policies/default.lua", timeout_s = 1e6 })
    end)
  end
end)

describe("policies/strict.lua", function()
  local e = engine("strict")

  it("allows no network at all", function()
    allows_open(e, { network_mode = "blocked" })
    denies_open(e, { network_mode = "allowlist" }, "ceilings.network_mode")
    denies_open(e, { network_mode = "open" }, "ceilings.network_mode")
    for _, c in ipairs { {}, { network_mode = "open" }, { network_mode = "allowlist", allowlist = { "pypi.org" } } } do
      local ok, err = e:connect("pypi.org", 443, { "151.101.0.223" }, c)
      assert.is_false(ok)
      assert.is_true(T.errors.is(err, "PolicyDenied"))
    end
  end)

  it("has small ceilings and no extra paths or pinned work dirs", function()
    denies_open(e, { backend = "privileged" }, "ceilings.backends")
    denies_open(e, { memory_mb = 513 }, "ceilings.memory_mb")
    denies_open(e, { pids = 129 }, "ceilings.pids")
    denies_open(e, { timeout_s = 3601 }, "ceilings.max_session_timeout_s")
    denies_open(e, { read_only_paths = { "/opt" } }, "filesystem.allow_ro")
    denies_open(e, { read_write_paths = { "/srv/x" } }, "filesystem.allow_rw")
    assert.matches("pinned work_dir", denies_open(e, { work_dir = "/srv/w" }, "on_session_open").message, 1, true)
    allows_open(e, { memory_mb = 512, pids = 128 })
    assert.are.equal(60, e.defaults.run_timeout_s)
    assert.are.equal("ceilings.max_run_timeout_s",
      T.expect("PolicyDenied", e.run, e, run_req { timeout_s = 301 }, ctx()).rule)
    assert.is_table(e:run(run_req { timeout_s = 300 }, ctx()))
  end)

  it("adds tracing and BPF to the seccomp deny-list", function()
    local set = {}
    for _, s in ipairs(e.seccomp.deny) do set[s] = true end
    for _, s in ipairs { "ptrace", "bpf", "userfaultfd", "keyctl" } do assert.is_true(set[s], s) end
  end)

  if T.has_core() then
    it("opens on-device sessions bounded by its run timeout", function()
      local s = sbx.session { policy = "policies/strict.lua" }
      finally(function() s:close() end)
      assert.are.equal("ok\n", s:exec("echo ok").stdout)
      T.expect("PolicyDenied", s.exec, s, "true", { timeout_s = 301 })
      T.expect("PolicyDenied", sbx.session, { policy = "policies/strict.lua", read_only_paths = { "/opt" } })
    end)
  end
end)

describe("policies/agent.lua", function()
  local e = engine("agent")

  it("defaults to an allow-list of the PyPI and npm hosts, HTTPS only", function()
    assert.are.equal("allowlist", e.defaults.network_mode)
    local A = { network_mode = "allowlist" }
    for _, h in ipairs { "pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "registry.yarnpkg.com" } do
      assert.is_true(connect_rule(e, h, 443, { "151.101.0.223" }, A), h)
      assert.are.equal("on_connect", connect_rule(e, h, 80, { "151.101.0.223" }, A), h)
    end
    for _, h in ipairs { "github.com", "evilpypi.org", "pypi.org.evil.com", "pythonhosted.org.evil.com" } do
      assert.are.equal("network.allowlist", connect_rule(e, h, 443, {}, A), h)
    end
    -- Names on the list that resolve to private or metadata addresses.
    for _, a in ipairs { "10.0.0.5", "192.168.1.1", "169.254.169.254", "::ffff:127.0.0.1", "fd12::1" } do
      assert.are.equal("network.denylist", connect_rule(e, "pypi.org", 443, { a }, A), a)
    end
  end)

  it("never widens: no open mode, no foreign hosts in a caller's allow-list", function()
    denies_open(e, { network_mode = "open" }, "ceilings.network_mode")
    denies_open(e, { backend = "privileged" }, "ceilings.backends")
    denies_open(e, { network_mode = "allowlist", network_allowlist = { "github.com" } }, "on_session_open")
    denies_open(e, { network_mode = "allowlist", network_allowlist = { "*.com" } }, "on_session_open")
    local r = allows_open(e, { network_mode = "allowlist", network_allowlist = { "pypi.org" } })
    assert.are.same({ "pypi.org" }, r.network_allowlist)
    -- Asking for allowlist without a list gets the policy's.
    r = allows_open(e, { network_mode = "allowlist" })
    assert.are.equal(#sbx.PYPI_HOSTS + #sbx.NPM_HOSTS, #r.network_allowlist)
    allows_open(e, { network_mode = "blocked" })
  end)
end)

describe("policies/gpu.lua", function()
  local e, logs = engine("gpu")

  it("uses the privileged backend with at most one GPU", function()
    assert.are.equal("privileged", e.defaults.backend)
    allows_open(e, { backend = "privileged", gpus = 1, name = "train" })
    assert.matches("gpu session train gpus = 1", logs[#logs], 1, true)
    denies_open(e, { backend = "privileged", gpus = 2 }, "ceilings.gpus")
    denies_open(e, { backend = "userns", gpus = 1 }, "ceilings.backends")
    denies_open(e, { backend = "none" }, "ceilings.backends")
    denies_open(e, { network_mode = "open" }, "ceilings.network_mode")
  end)

  if T.has_core() then
    it("does not silently downgrade to another backend on this machine", function()
      local ok, err = pcall(sbx.session, { policy = "policies/gpu.lua" })
      if ok then
        finally(function() err:close() end)
        assert.are.equal("privileged", err.backend)
      else
        assert.is_true(T.errors.is(err, "BackendUnavailable") or T.errors.is(err, "SandboxExecutionError"),
          tostring(err))
      end
    end)
  end
end)

describe("policies/dev.lua", function()
  local e, logs = engine("dev")

  it("permits backend none (with a warning) and open network, and reapplies on reload", function()
    allows_open(e, { backend = "none", name = "mine" })
    assert.matches("WARNING: session mine runs without isolation", logs[#logs], 1, true)
    allows_open(e, { backend = "userns", network_mode = "open" })
    assert.is_true(e.reapply)
    assert.is_true(connect_rule(e, "example.org", 443, { "93.184.215.14" }, { network_mode = "open" }))
    assert.are.equal("network.denylist", connect_rule(e, "169.254.169.254", 80, {}, { network_mode = "open" }))
  end)
end)

describe("every shipped policy", function()
  it("loads, names itself and describes itself", function()
    for _, name in ipairs { "default", "strict", "agent", "gpu", "dev" } do
      local e = engine(name)
      assert.are.equal(name, e.name)
      local text = e:describe()
      assert.is_table(assert(loadstring("return " .. text))())
      -- Metadata is denied by every one of them.
      local ok, err = e:connect("169.254.169.254", 80, {}, { network_mode = "open" })
      assert.is_false(ok, name)
      assert.is_true(T.errors.is(err, "PolicyDenied"), name)
    end
  end)
end)

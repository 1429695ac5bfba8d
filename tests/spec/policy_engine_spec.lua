-- policy_engine_spec.lua: the policy engine (sbx.policy): the restricted
-- environment, hook verdicts, the instruction budget and deadline (with
-- the JIT on), ceilings and clamping, on_connect ordering, hot reload, the
-- wiring into on-device sessions, and `sbxlua --check-policy`.  Every
-- fail-closed path is checked to deny: each test would fail if it allowed.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx
local policy = require "sbx.policy"

local function write(path, src)
  local f = assert(io.open(path, "w"))
  f:write(src)
  f:close()
  return path
end

-- load(src) -> engine, logs (the lines it logged)
local function load(src)
  local logs = {}
  local path = write(T.tmpdir() .. "/p.lua", src)
  local e = policy.load(path, { log = function(l) logs[#logs + 1] = l end })
  return e, logs, path
end

local RUN = { argv = { "/bin/sh", "-c", "echo hi" }, cmd = "echo hi", script_type = "shell",
  env = { PATH = "/usr/bin:/bin" }, timeout_s = 10, network_mode = "blocked", stdin = false }
local CTX = { origin = "local", session = { id = "x", name = "s", backend = "userns", network_mode = "blocked" } }

local function denied(_, fn, ...)
  local err = T.expect("PolicyDenied", fn, ...)
  return err
end

describe("sbx.policy engine", function()
  teardown(T.cleanup)

  it("runs hooks in the restricted environment: no io, os.execute, require, debug, load", function()
    for _, body in ipairs { "io.open('/etc/passwd')", "os.execute('true')", "require('ffi')",
      "debug.getinfo(1)", "loadstring('return 1')", "load(function() end)", "setmetatable({}, {})",
      "getmetatable('').__index.rep('x', 2)", "coroutine.create(print)", "string.dump(print)",
      "rawset(_G, 'x', 1)", "dofile('/etc/passwd')", "collectgarbage()", "os.exit(1)",
      "os.getenv('HOME')", "module('x')", "newproxy(true)", "jit.on()" } do
      local e, logs = load("return { on_run = function(req, ctx) " .. body .. " return true end }")
      local err = denied(e, e.run, e, RUN, CTX)
      assert.are.equal("on_run", err.rule, body)
      assert.are.equal("error", err.cause, body)
      assert.matches("failed", err.message, 1, true)
      assert.is_true(#logs >= 1, "the denial is logged: " .. body)
    end
    -- What is there works: the safe subset, log, deny, match, presets.
    local e, logs = load([[
      return { on_run = function(req, ctx)
        log("run", req.argv[1], ctx.session.name, #sbx.PYPI_HOSTS > 0, string.format("%d", 3),
          math.max(1, 2), table.concat({ "a", "b" }, ","), type(os.time()), select("#", 1, 2))
        assert(match.host("*.pythonhosted.org", "files.pythonhosted.org"))
        assert(match.cidr("169.254.0.0/16", "::ffff:169.254.169.254"))
        assert(match.list(presets.CLOUD_METADATA_DENY, "0xa9fea9fe", 80))
        return true
      end }]])
    e:run(RUN, CTX)
    assert.are.equal("[policy " .. e.path .. "] run /bin/sh s true 3 2 a,b number 2", logs[1])
  end)

  it("lets a policy change its library copies only for itself", function()
    local e = load("string.format = nil; math.floor = nil; return { on_run = function() return true end }")
    e:run(RUN, CTX)
    assert.is_function(string.format)
    assert.is_function(math.floor)
  end)

  it("reads the hook's verdict: true allows, a table adjusts, false/nil/deny() deny", function()
    local e = load("return { on_run = function() return true end }")
    assert.are.same(RUN.argv, e:run(RUN, CTX).argv)
    e = load("return { on_run = function(r) r.env.ADDED = 'yes'; r.timeout_s = 5 return r end }")
    local r = e:run(RUN, CTX)
    assert.are.equal("yes", r.env.ADDED)
    assert.are.equal(5, r.timeout_s)
    assert.is_nil(RUN.env.ADDED, "the caller's request is not touched")
    for src, want in pairs {
      ["return false, 'no curl'"] = "denied: no curl",
      ["return nil, 'nope'"] = "denied: nope",
      ["return deny('no curl here')"] = "denied: no curl here",
      ["return false"] = "denied: (no reason given)",
    } do
      e = load("return { on_run = function(r) " .. src .. " end }")
      local err = denied(e, e.run, e, RUN, CTX)
      assert.matches(want, err.message, 1, true)
      assert.are.equal("denied", err.cause)
      assert.are.equal("on_run", err.rule)
    end
  end)

  it("denies a hook that returns nothing or something malformed", function()
    for _, body in ipairs { "", "return 1", "return 'yes'", "return print", "r.argv = {} return r",
      "r.argv = { 1 } return r", "r.bogus = 1 return r", "r.env = { A = 1 } return r",
      "r.env = { ['A=B'] = 'x' } return r", "r.timeout_s = -1 return r", "r.timeout_s = 0/0 return r",
      "r.network_mode = 'wide' return r", "r.cwd = 5 return r", "r.argv = 'sh' return r" } do
      local e = load("return { on_run = function(r) " .. body .. " end }")
      local err = denied(e, e.run, e, RUN, CTX)
      assert.are.equal("malformed", err.cause, body .. ": " .. err.message)
    end
    local e = load("return { on_session_open = function(r) r.policy = 'other.lua' return r end }")
    assert.are.equal("malformed", denied(e, e.session_open, e, { backend = "userns" }, {}).cause)
    e = load("return { on_connect = function() return {} end }")
    local ok, err = e:connect("pypi.org", 443, {}, { network_mode = "open" })
    assert.is_false(ok)
    assert.are.equal("malformed", err.cause)
  end)

  it("stops an infinite loop in a hook, with the JIT on, even one that pcalls", function()
    assert.is_true((jit.status()), "the JIT is on")
    local e = load([[return { on_run = function(r)
      local n = 0
      for i = 1, 200 do n = n + i end            -- hot loop: the JIT would trace it
      if r.env.LOOP == "plain" then while true do n = n + 1 end end
      if r.env.LOOP == "pcall" then
        while true do pcall(function() while true do n = n + 1 end end) end
      end
      if r.env.LOOP == "recurse" then
        local function f() pcall(f) pcall(f) end f()
      end
      return true
    end }]])
    -- Warm up: thousands of calls, so any trace that could form has formed.
    for _ = 1, 3000 do e:run(RUN, CTX) end
    for _, mode in ipairs { "plain", "pcall", "recurse" } do
      local req = { argv = RUN.argv, env = { LOOP = mode }, network_mode = "blocked" }
      local err = denied(e, e.run, e, req, CTX)
      assert.are.equal("timeout", err.cause, mode .. ": " .. err.message)
      -- Stopped by its instruction budget, or (on a loaded machine, for the
      -- slow recursion) by its deadline first: stopped either way.
      assert.is_truthy(err.message:find("budget", 1, true) or err.message:find("deadline", 1, true),
        err.message)
      -- The engine keeps serving after it.
      assert.is_table(e:run(RUN, CTX))
    end
  end)

  it("stops a hook at its wall-clock deadline before its instruction budget", function()
    local e = load([[return { limits = { hook_instructions = 50000000, hook_ms = 30 },
      on_run = function() local x = 0 while true do x = x + 1 end end }]])
    local t0 = T.now_ms()
    local err = denied(e, e.run, e, RUN, CTX)
    local took = T.now_ms() - t0
    assert.matches("deadline of 30 ms", err.message, 1, true)
    assert.are.equal("timeout", err.cause)
    -- Not before its deadline; that the deadline (not the budget) stopped
    -- it is what the message says, however busy the machine.
    assert.is_true(took >= 29, "took " .. took .. " ms")
  end)

  it("caps string.rep, also through string methods, and stops a hook hoarding memory", function()
    local bodies = { "string.rep('x', 1e9)", "('x'):rep(1e9)", "(function() local s = 'x' return s:rep(2^31) end)()" }
    for _, body in ipairs(bodies) do
      local e = load("return { on_run = function() local r = " .. body .. " return true end }")
      local err = denied(e, e.run, e, RUN, CTX)
      assert.matches("string.rep: a result over", err.message, 1, true)
    end
    assert.is_function(("").rep, "the host's string methods are back after the hook")
    assert.are.equal(("ab"):rep(3), "ababab")
    -- A constant table is one TDUP per iteration (~200 bytes): 8 MiB comes
    -- long before the 1M instruction budget, so this can only stop on memory.
    local e = load([[return { limits = { hook_memory_mb = 8 }, on_run = function()
      local t = {}
      for i = 1, 1e7 do t[i] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 } end
      return true
    end }]])
    local err = denied(e, e.run, e, RUN, CTX)
    assert.matches("memory budget of 8 MiB", err.message, 1, true)
    assert.are.equal("timeout", err.cause)
  end)

  it("refuses limits above the engine's maximum and fields it does not know", function()
    for _, src in ipairs { "return { limits = { hook_ms = 1e9 } }", "return { limits = { hook_instructions = 1 } }",
      "return { limits = { hook_memory_mb = 1e6 } }",
      "return { on_run = 'yes' }", "return { reapply = 'yes' }", "return { on_runn = function() end }",
      "return { ceilings = { gpus = -1 } }", "return { ceilings = { clamp = 1 } }",
      "return { ceilings = { backends = { 'lxc' } } }", "return { ceilings = { network_mode = 'wide' } }",
      "return { network = { denylist = { '10.1.0.0/8' } } }", "return { network = { allowlist = { '*' } } }",
      "return { filesystem = { allow_ro = { 'opt' } } }" } do
      local path = write(T.tmpdir() .. "/p.lua", src)
      local err = T.expect("PolicyDenied", policy.load, path, { log = function() end })
      assert.are.equal("policy.load", err.rule, src)
    end
  end)

  it("refuses requests above a ceiling, naming the rule, and clamps only when told", function()
    local e = load([[return { ceilings = { memory_mb = 1024, cpu_milli = 1000, pids = 64, gpus = 0,
      disk_mb = 100, max_session_timeout_s = 60, backends = { "userns" }, network_mode = "allowlist",
      shm_mb = 256, nofile = 4096 } }]])
    for req, rule in pairs {
      [{ memory_mb = 1025 }] = "ceilings.memory_mb", [{ cpu_milli = 2000 }] = "ceilings.cpu_milli",
      [{ pids = 65 }] = "ceilings.pids", [{ gpus = 1 }] = "ceilings.gpus", [{ disk_mb = 101 }] = "ceilings.disk_mb",
      [{ timeout_s = 61 }] = "ceilings.max_session_timeout_s", [{ backend = "privileged" }] = "ceilings.backends",
      [{ backend = "none" }] = "ceilings.backends", [{ network_mode = "open" }] = "ceilings.network_mode",
      [{ shm_mb = 257 }] = "ceilings.shm_mb", [{ nofile = 4097 }] = "ceilings.nofile",
    } do
      local err = denied(e, e.session_open, e, req, {})
      assert.are.equal(rule, err.rule)
    end
    local ok = e:session_open({ memory_mb = 1024, pids = 64, backend = "userns", network_mode = "allowlist" }, {})
    assert.are.equal(1024, ok.memory_mb)
    ok = e:session_open({ shm_mb = 256, nofile = 4096 }, {})
    assert.are.same({ 256, 4096 }, { ok.shm_mb, ok.nofile })
    -- clamp = true: lowered to the ceiling, and logged.
    local c, logs = load("return { ceilings = { memory_mb = 1024, clamp = true, max_run_timeout_s = 30 } }")
    assert.are.equal(1024, c:session_open({ memory_mb = 4096 }, {}).memory_mb)
    assert.matches("clamped memory_mb", logs[1], 1, true)
    assert.are.equal(30, c:run({ argv = { "x" }, timeout_s = 99 }, CTX).timeout_s)
    -- Not clamped: a run above the run ceiling is denied.
    local err = denied(e, e.run, e, { argv = { "x" }, timeout_s = 1e6 }, CTX)
    assert.are.equal("ceilings.max_run_timeout_s", err.rule)
  end)

  it("re-checks a hook's adjusted request against the ceilings", function()
    local e = load([[return { ceilings = { memory_mb = 1024, max_run_timeout_s = 60 },
      on_session_open = function(r) r.memory_mb = 99999 return r end,
      on_run = function(r) r.timeout_s = 3600 return r end }]])
    assert.are.equal("ceilings.memory_mb", denied(e, e.session_open, e, {}, {}).rule)
    assert.are.equal("ceilings.max_run_timeout_s", denied(e, e.run, e, RUN, CTX).rule)
    -- A run may narrow, never widen, its session's network mode, hook or not.
    e = load("return { on_run = function(r) r.network_mode = 'open' return r end }")
    assert.are.equal("session.network_mode", denied(e, e.run, e, RUN, CTX).rule)
  end)

  it("limits extra paths to filesystem.allow_ro / allow_rw when set", function()
    local e = load("return { filesystem = { allow_ro = { '/opt/data' }, allow_rw = {} } }")
    assert.is_table(e:session_open({ read_only_paths = { "/opt/data", "/opt/data/x" } }, {}))
    assert.are.equal("filesystem.allow_ro",
      denied(e, e.session_open, e, { read_only_paths = { "/opt/database" } }, {}).rule)
    assert.are.equal("filesystem.allow_rw",
      denied(e, e.session_open, e, { read_write_paths = { "/opt/data" } }, {}).rule)
  end)

  it("decides connections: bad host, deny-list first, mode, allow-list, then on_connect", function()
    local e, logs = load([[return {
      network = { allowlist = { "*.pythonhosted.org", "pypi.org:443" } },
      on_connect = function(host, port, addrs, ctx)
        if host == "refused.pythonhosted.org" then return false, "hook says no" end
        return true
      end }]])
    local A = { network_mode = "allowlist" }
    assert.is_true(e:connect("files.pythonhosted.org", 443, { "151.101.0.223" }, A))
    assert.is_true(e:connect("pypi.org", 443, {}, A))
    local cases = {
      { "pypi.org", 80, {}, A, "network.allowlist" },
      { "evil.org", 443, {}, A, "network.allowlist" },
      { "pypi.org", 443, {}, { network_mode = "blocked" }, "network_mode" },
      { "pypi.org", 443, {}, {}, "network_mode" },                 -- the policy default: blocked
      -- resolves to metadata: the deny-list wins over the allow-list
      { "files.pythonhosted.org", 443, { "::ffff:169.254.169.254" }, A, "network.denylist" },
      { "files.pythonhosted.org", 443, { "151.101.0.1", "0xa9fea9fe" }, A, "network.denylist" },
      { "metadata.google.internal", 80, {}, { network_mode = "open" }, "network.denylist" },
      { "169.254.169.254", 80, {}, { network_mode = "open" }, "network.denylist" },
      { "2852039166", 80, {}, { network_mode = "open" }, "network.denylist" },
      { "x.org", 80, { "10.0.0.1" }, { network_mode = "open", denylist = { "10.0.0.0/8" } }, "network.denylist" },
      { "bad host", 80, {}, { network_mode = "open" }, "network.host" },
      { "a\255.org", 80, {}, { network_mode = "open" }, "network.host" },
      { "x.org", 0, {}, { network_mode = "open" }, "network.port" },
      { "x.org", 80, { "not-an-ip" }, { network_mode = "open" }, "network.addrs" },
      { "refused.pythonhosted.org", 443, {}, A, "on_connect" },
      { "x.org", 80, {}, { network_mode = "sideways" }, "network_mode" },
    }
    for i, c in ipairs(cases) do
      local ok, err = e:connect(c[1], c[2], c[3], c[4])
      assert.is_false(ok, "case " .. i)
      assert.is_true(T.errors.is(err, "PolicyDenied"), "case " .. i)
      assert.are.equal(c[5], err.rule, "case " .. i .. ": " .. err.message)
    end
    assert.is_true(#logs >= #cases, "every denial is logged")
    -- A caller's allow-list replaces the policy's.
    assert.is_true(e:connect("example.org", 443, {}, { network_mode = "allowlist", allowlist = { "example.org" } }))
    -- connect never raises, even on garbage.
    local ok = e:connect(nil, nil, "x", nil)
    assert.is_false(ok)
  end)

  it("runs on_close and never lets it raise", function()
    local e, logs = load([[return { on_close = function(s, ctx) log("closed", s.id) error("boom") end }]])
    e:close({ id = "abc" }, {})
    assert.are.equal("[policy " .. e.path .. "] closed abc", logs[1])
    assert.matches("on_close failed", logs[2], 1, true)
    local e2 = load("return { on_close = function() while true do end end }")
    e2:close({ id = "x" }, {}) -- returns
  end)

  it("reloads: an error keeps the old policy and says why; a good file replaces it", function()
    local e, logs, path = load("return { name = 'one', on_run = function() return true end }")
    assert.are.equal(1, e.generation)
    local g1 = e.current
    write(path, "return { name = 'two', on_run = function( }")
    local ok, why = e:reload()
    assert.is_nil(ok)
    assert.matches("p.lua:1:", why, 1, true)
    assert.are.equal(g1, e.current)
    assert.are.equal("one", e.name)
    assert.matches("reload of .* failed, keeping generation 1", logs[#logs])
    assert.is_table(e:run(RUN, CTX))
    write(path, "return { name = 'two', on_run = function() return false, 'v2 says no' end }")
    assert.is_true(policy.reload(e))
    assert.are.equal(2, e.generation)
    assert.are.equal("two", e.name)
    -- New requests use the new policy; a session opened under g1 keeps it.
    assert.matches("v2 says no", denied(e, e.run, e, RUN, CTX).message, 1, true)
    assert.is_table(e:run(RUN, CTX, g1))
    -- reapply = true: sessions' runs re-check against the new one.
    write(path, "return { name = 'three', reapply = true, on_run = function() return false, 'v3' end }")
    assert.is_true(e:reload())
    assert.matches("v3", denied(e, e.run, e, RUN, CTX, g1).message, 1, true)
  end)

  it("does what policies/README.md's operator example says it does", function()
    local guide = T.read_file(T.ROOT .. "/policies/README.md")
    local src = guide:match("An operator's policy.-```lua\n(.-)```")
    assert.is_string(src, "the example is in the guide")
    local e, logs = load(src)
    assert.are.equal("mypolicy", e.name)
    assert.is_table(e:session_open({ backend = "userns", network_mode = "allowlist", name = "a" }, {}))
    assert.matches("open a userns allowlist memory_mb = nil", logs[#logs], 1, true)
    assert.are.equal("ceilings.backends", denied(e, e.session_open, e, { backend = "privileged" }, {}).rule)
    assert.are.equal("ceilings.network_mode", denied(e, e.session_open, e, { network_mode = "open" }, {}).rule)
    assert.are.equal("ceilings.memory_mb", denied(e, e.session_open, e, { memory_mb = 1025 }, {}).rule)
    assert.is_table(e:session_open({ memory_mb = 1024 }, {}))
    local via_sh = { argv = { "/bin/sh", "-c", "curl x" }, cmd = "curl x" }
    assert.matches("no curl here", denied(e, e.run, e, via_sh, CTX).message, 1, true)
    local direct = { argv = { "/usr/bin/curl", "x" }, cmd = { "/usr/bin/curl", "x" } }
    assert.matches("no curl here", denied(e, e.run, e, direct, CTX).message, 1, true)
    assert.is_table(e:run(RUN, CTX))
    local A = { network_mode = "allowlist" }
    assert.is_true(e:connect("files.pythonhosted.org", 443, {}, A))
    local ok, err = e:connect("files.pythonhosted.org", 80, {}, A)
    assert.is_false(ok)
    assert.matches("HTTPS only", err.message, 1, true)
    err = select(2, e:connect("github.com", 443, {}, A))
    assert.are.equal("network.allowlist", err.rule)
  end)

  it("prints the effective policy or the error with its line: sbxlua --check-policy", function()
    -- The binary running this spec: /proc/self/exe of our own pid (a
    -- readlink child would see its own).
    local pid = T.read_file("/proc/self/stat"):match("^%d+")
    local f = io.popen("readlink /proc/" .. pid .. "/exe")
    local exe = f:read("*l")
    f:close()
    if not exe or not exe:match("sbxlua$") then
      pending("needs to run under sbxlua (got " .. tostring(exe) .. ")")
      return
    end
    local function run(args)
      local p = io.popen(("'%s' %s 2>&1; echo \"rc=$?\""):format(exe, args))
      local out = p:read("*a")
      p:close()
      return out, tonumber(out:match("rc=(%d+)%s*$"))
    end
    for _, name in ipairs { "default", "strict", "agent", "gpu", "dev" } do
      local out, rc = run("--check-policy " .. T.ROOT .. "/policies/" .. name .. ".lua")
      assert.are.equal(0, rc, out)
      assert.matches("-- effective policy of", out, 1, true)
      assert.matches('name = "' .. name .. '"', out, 1, true)
      assert.matches("hooks = {", out, 1, true)
      -- The printed policy is itself Lua that evaluates to a table.
      local chunk = assert(loadstring((out:gsub("rc=%d+%s*$", ""))))
      assert.is_table(chunk())
    end
    local d = T.tmpdir()
    local out, rc = run("--check-policy " .. write(d .. "/syntax.lua", "return {\n  x = = 1\n}\n"))
    assert.are.equal(1, rc)
    assert.matches("syntax.lua:2:", out, 1, true)
    out, rc = run("--check-policy="
      .. write(d .. "/shape.lua", "return {\n  defaults = {\n    backend = 1,\n  },\n}\n"))
    assert.are.equal(1, rc)
    assert.matches("shape.lua:3: defaults.backend must be a string", out, 1, true)
    out, rc = run("--check-policy " .. d .. "/missing.lua")
    assert.are.equal(1, rc)
    assert.matches("cannot read", out, 1, true)
    rc = select(2, run("--check-policy"))
    assert.are.equal(2, rc)
  end)
end)

describe("sbx.policy on on-device sessions", function()
  teardown(T.cleanup)
  if not T.has_core() then
    pending("needs sbx.core: run the specs with build/bin/sbxlua")
    return
  end

  it("calls on_session_open, on_run and on_close; denies and adjusts", function()
    local e, logs = load([[return {
      on_session_open = function(req, ctx)
        log("open", req.backend, req.network_mode, ctx.origin)
        if req.name == "forbidden" then return deny("no such name") end
        return true
      end,
      on_run = function(req, ctx)
        if req.cmd:find("curl", 1, true) then return false, "no curl" end
        req.env.FROM_POLICY = "yes"
        return req
      end,
      on_close = function(s, ctx) log("close", s.id) end,
    }]])
    local err = T.expect("PolicyDenied", sbx.session, { policy = e, name = "forbidden" })
    assert.matches("no such name", err.message, 1, true)
    local s = sbx.session { policy = e }
    finally(function() s:close() end)
    assert.are.equal("[policy " .. e.path .. "] open userns blocked local", logs[1])
    local r = s:exec("echo $FROM_POLICY")
    assert.are.equal("yes\n", r.stdout, T.show(r))
    err = T.expect("PolicyDenied", s.exec, s, "curl http://example.org")
    assert.are.equal("on_run", err.rule)
    T.expect("PolicyDenied", s.run, s, "curl x")
    T.expect("PolicyDenied", s.run_code, s, "import os # curl")
    assert.are.equal(0, s:exec("true").returncode, "the session keeps working")
    local id = s.id
    s:close()
    assert.are.equal("[policy " .. e.path .. "] close " .. id, logs[#logs])
  end)

  it("fails closed: a failing, runaway or malformed hook denies, the session lives on", function()
    local e = load([[return {
      on_session_open = function(req) if req.name == "boom" then error("open broke") end return true end,
      on_run = function(req)
        if req.cmd == "loop" then while true do end end
        if req.cmd == "err" then error("run broke") end
        if req.cmd == "junk" then return 42 end
        if req.cmd == "none" then return end
        if req.cmd == "argv" then req.argv = {} return req end
        return true
      end }]])
    local err = T.expect("PolicyDenied", sbx.session, { policy = e, name = "boom" })
    assert.are.equal("error", err.cause)
    local s = sbx.session { policy = e }
    finally(function() s:close() end)
    for cmd, cause in pairs { loop = "timeout", err = "error", junk = "malformed", none = "malformed",
      argv = "malformed" } do
      local x = T.expect("PolicyDenied", s.exec, s, cmd)
      assert.are.equal(cause, x.cause, cmd)
    end
    assert.are.equal("ok\n", s:exec("echo ok").stdout)
  end)

  it("denies (malformed) when a hook's adjusted request fails the option checks", function()
    local e = load([[return {
      on_session_open = function(r) if r.name == "bad" then r.memory_mb = "lots" end return r end,
      on_run = function(r)
        if r.cmd == "escape" then r.cwd = "/etc" end
        if r.cmd == "huge" then r.argv = { ("x"):rep(200000) } end
        return r
      end }]])
    local err = T.expect("PolicyDenied", sbx.session, { policy = e, name = "bad" })
    assert.are.equal("malformed", err.cause)
    assert.are.equal("on_session_open", err.rule)
    local s = sbx.session { policy = e }
    finally(function() s:close() end)
    for _, cmd in ipairs { "escape", "huge" } do
      err = T.expect("PolicyDenied", s.exec, s, cmd)
      assert.are.equal("malformed", err.cause, cmd)
    end
    assert.are.equal(0, s:exec("true").returncode)
  end)

  it("denies every session when the policy does not load", function()
    local path = write(T.tmpdir() .. "/broken.lua", "return { on_run = function() return true end")
    local err = T.expect("PolicyDenied", sbx.session, { policy = path })
    assert.are.equal("policy.load", err.rule)
  end)

  it("keeps open sessions on their policy across a reload, unless it says reapply", function()
    local e, _, path = load("return { name = 'v1', on_run = function() return true end }")
    local old, new
    -- One finally per test (busted keeps only the last).
    finally(function()
      if old then old:close() end
      if new then new:close() end
    end)
    old = sbx.session { policy = e }
    write(path, "return { name = 'v2', on_run = function(r) return false, 'v2 denies' end }")
    assert.is_true(e:reload())
    assert.are.equal(0, old:exec("true").returncode, "opened under v1: still v1")
    new = sbx.session { policy = e }
    assert.matches("v2 denies", T.expect("PolicyDenied", new.exec, new, "true").message, 1, true)
    -- A broken reload changes nothing.
    write(path, "return {")
    local ok, why = e:reload()
    assert.is_nil(ok)
    assert.is_string(why)
    assert.are.equal(0, old:exec("true").returncode)
    T.expect("PolicyDenied", new.exec, new, "true")
    -- reapply = true: the old session's runs now re-check against v3.
    write(path, "return { name = 'v3', reapply = true, on_run = function(r) return false, 'v3 denies' end }")
    assert.is_true(e:reload())
    assert.matches("v3 denies", T.expect("PolicyDenied", old.exec, old, "true").message, 1, true)
  end)
end)

-- options_spec.lua: validation of session and run options (sbx.options)
-- and loading of policies (sbx.policy), without opening sessions: every
-- wrong name, type and value is refused with the documented error kind,
-- and what this build cannot enforce fails closed.  Pure Lua: runs without
-- a build (the symlink cases use sbx.core's realpath when it is there).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx
local options = require "sbx.options"
local policy = require "sbx.policy"

local pol = policy.load()

-- Options go through admission as sbx.session's do: sbx.options checks
-- shapes and types, the policy engine its rules (ceilings, forbidden
-- paths).  octx: what session.lua passes, with an optional fake realpath.
local function session_opts(opts, realpath)
  return pol:admit_session(opts, { realpath = realpath, extra_forbidden = { "/var/lib/sbx" } })
end

local function run_opts(cmd, opts, sess)
  sess = sess or {}
  sess.policy = sess.policy or pol.current
  sess.network_mode = sess.network_mode or "blocked"
  sess.env = sess.env or {}
  sess.backend = "userns"
  return pol:admit_run(sess, cmd, opts)
end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

describe("session options", function()
  teardown(T.cleanup)

  it("defaults come from the policy", function()
    local o = session_opts {}
    assert.are.equal("userns", o.backend)
    assert.are.equal("blocked", o.network_mode)
    assert.are.equal(3600, o.timeout_s)
    assert.are.equal(3600 * 1000, o.lifetime_ms)
    assert.are.equal(256 * 1024 * 1024, o.max_file_bytes)
    assert.are.same({}, o.read_only_paths)
    -- The deny-list always holds the cloud metadata endpoints.
    local deny = {}
    for _, h in ipairs(o.network_denylist) do deny[h] = true end
    for _, h in ipairs(sbx.CLOUD_METADATA_DENY) do assert.is_true(deny[h], h) end
  end)

  it("refuse unknown option names, naming the option", function()
    local e = T.expect("InvalidArgument", session_opts, { backnd = "userns" })
    assert.are.equal("backnd", e.option)
    assert.matches("unknown session option", e.message, 1, true)
    T.expect("InvalidArgument", session_opts, { [1] = "userns" })
  end)

  it("refuse wrong types with InvalidArgument naming the option", function()
    local cases = {
      backend = 1, work_dir = true, network_mode = 3, network_allowlist = "pypi.org",
      network_denylist = "10.0.0.0/8", read_only_paths = "/opt", read_write_paths = { 1 },
      memory_mb = "2G", cpu_milli = {}, pids = 1.5, gpus = "0", disk_mb = -1, timeout_s = "60",
      name = 7, env = "FOO=bar", max_file_bytes = 0.5, state_dir = 1, shm_mb = "1G", nofile = 1.5,
    }
    for k, v in pairs(cases) do
      local e = T.expect("InvalidArgument", session_opts, { [k] = v })
      assert.are.equal(k, e.option, k)
    end
  end)

  it("know the four backends: none only where the policy lists it, anything else is invalid", function()
    for _, b in ipairs { "userns", "privileged", "bubblewrap" } do
      assert.are.equal(b, session_opts({ backend = b }).backend)
    end
    local e = T.expect("PolicyDenied", session_opts, { backend = "none" })
    assert.are.equal("ceilings.backends", e.rule)
    e = T.expect("InvalidArgument", session_opts, { backend = "docker" })
    assert.are.equal("backend", e.option)
  end)

  it("take every network mode on userns, none of the wider ones where no namespace is kept", function()
    for _, m in ipairs { "blocked", "allowlist", "open" } do
      assert.are.equal(m, session_opts({ network_mode = m }).network_mode)
    end
    for _, m in ipairs { "allowlist", "open" } do
      local e = T.expect("BackendUnavailable", session_opts, { backend = "bubblewrap", network_mode = m })
      assert.matches("network namespace per session", e.message, 1, true)
    end
    T.expect("InvalidArgument", session_opts, { network_mode = "wide-open" })
    -- An allow-list means nothing to a blocked session.
    local e = T.expect("InvalidArgument", session_opts, { network_allowlist = sbx.PYPI_HOSTS })
    assert.are.equal("network_allowlist", e.option)
    assert.are.same(sbx.PYPI_HOSTS,
      session_opts({ network_mode = "allowlist", network_allowlist = sbx.PYPI_HOSTS }).network_allowlist)
    -- Entries that do not parse are refused at open, naming the entry,
    -- not at the first connection (or, for open mode's deny CIDRs, never).
    for option, bad in pairs { network_allowlist = { "pypi.org", "*.*.x" },
                               network_denylist = { "10.0.0.0/33" } } do
      local bad_e = T.expect("InvalidArgument", session_opts, { network_mode = "open", [option] = bad })
      assert.are.equal(option, bad_e.option)
      assert.matches("entry %d", bad_e.message)
    end
    local o = session_opts { network_denylist = { "10.0.0.0/8" } }
    assert.are.equal("10.0.0.0/8", o.network_denylist[#o.network_denylist])
  end)

  it("pass resource ceilings on to the core, refusing nonsense values", function()
    for _, k in ipairs { "memory_mb", "cpu_milli", "pids", "disk_mb" } do
      assert.are.equal(100, session_opts({ [k] = 100 })[k])
      local e = T.expect("InvalidArgument", session_opts, { [k] = 0 })
      assert.are.equal(k, e.option)
    end
    T.expect("InvalidArgument", session_opts, { memory_mb = 8 })
    T.expect("InvalidArgument", session_opts, { pids = 2 })
    -- /dev/shm size and RLIMIT_NOFILE: session options within the ceilings.
    assert.are.equal(128, session_opts({ shm_mb = 128 }).shm_mb)
    assert.are.equal(4096, session_opts({ nofile = 4096 }).nofile)
    for _, bad in ipairs { { shm_mb = 0 }, { nofile = 3 }, { nofile = 2 ^ 21 } } do
      local k = next(bad)
      assert.are.equal(k, T.expect("InvalidArgument", session_opts, bad).option)
    end
    -- gpus = 0 is the default ceiling; any GPU needs the privileged backend.
    assert.is_table(session_opts { gpus = 0 })
    local e = T.expect("BackendUnavailable", session_opts, { gpus = 1 })
    assert.are.equal("privileged", e.backend)
    -- sbx.options passes it on (its shape is right); the default policy's
    -- ceiling of 0 is the engine's to apply.
    assert.are.equal(1, options.session({ gpus = 1, backend = "privileged" }, pol).gpus)
    assert.are.equal("ceilings.gpus", T.expect("PolicyDenied", session_opts, { gpus = 1, backend = "privileged" }).rule)
  end)

  it("bound timeout_s by the policy's ceiling", function()
    assert.are.equal(1500, session_opts({ timeout_s = 1.5 }).lifetime_ms)
    assert.are.equal(86400, session_opts({ timeout_s = 86400 }).timeout_s)
    local e = T.expect("PolicyDenied", session_opts, { timeout_s = 86401 })
    assert.are.equal("ceilings.max_session_timeout_s", e.rule)
    T.expect("InvalidArgument", session_opts, { timeout_s = 0 })
    T.expect("InvalidArgument", session_opts, { timeout_s = -5 })
    T.expect("InvalidArgument", session_opts, { timeout_s = 0 / 0 })
    T.expect("InvalidArgument", session_opts, { timeout_s = math.huge })
  end)

  it("bound max_file_bytes by the policy's ceiling", function()
    assert.are.equal(1024, session_opts({ max_file_bytes = 1024 }).max_file_bytes)
    T.expect("PolicyDenied", session_opts, { max_file_bytes = 2 * 1024 * 1024 * 1024 })
    T.expect("InvalidArgument", session_opts, { max_file_bytes = 0 })
  end)

  it("check names", function()
    assert.are.equal("agent-1.work_x", session_opts({ name = "agent-1.work_x" }).name)
    for _, bad in ipairs { "", "../x", "a b", ("x"):rep(129), "-lead" } do
      T.expect("InvalidArgument", session_opts, { name = bad })
    end
  end)

  it("check env names and values", function()
    assert.are.same({ A = "1" }, session_opts({ env = { A = "1" } }).env)
    for _, bad in ipairs { { ["A=B"] = "x" }, { [""] = "x" }, { A = 1 }, { A = "x\0y" },
      { ["A\0"] = "x" }, { [1] = "x" } } do
      local e = T.expect("InvalidArgument", session_opts, { env = bad })
      assert.are.equal("env", e.option)
    end
  end)

  it("refuse bind paths the policy forbids: equal, below or above a forbidden one", function()
    for _, p in ipairs { "/", "/etc", "/etc/ssl", "/proc", "/proc/1", "/sys", "/dev", "/home",
      "/home/someone", "/root", "/run", "/var/run/docker.sock", "/var", "/var/lib/sbx",
      "/var/lib/sbx/sessions" } do
      local e = T.expect("PolicyDenied", session_opts, { read_only_paths = { p } })
      assert.are.equal("filesystem.forbidden", e.rule, p)
      T.expect("PolicyDenied", session_opts, { read_write_paths = { p } })
    end
  end)

  it("want bind paths absolute, without '..', existing, not /tmp itself; and normalize them", function()
    local d = T.tmpdir("/var/tmp")
    local o = session_opts { read_only_paths = { d .. "//./" }, read_write_paths = {} }
    assert.are.same({ d }, o.read_only_paths)
    -- Below /tmp: carried into every run's fresh /tmp (README), so taken.
    local t = T.tmpdir()
    assert.are.same({ t }, session_opts { read_only_paths = { t } }.read_only_paths)
    -- /tmp itself is every run's fresh tmpfs; the work dir is the work dir.
    local e = T.expect("InvalidArgument", session_opts, { read_only_paths = { "/tmp" } })
    assert.matches("/tmp", e.message, 1, true)
    T.expect("InvalidArgument", session_opts, { read_write_paths = { "/tmp/sandbox-work" } })
    for _, bad in ipairs { "opt/venv", d .. "/../x", d .. "/missing", "/tmp" } do
      T.expect("InvalidArgument", session_opts, { read_only_paths = { bad } })
    end
    e = T.expect("InvalidArgument", session_opts, { read_only_paths = { d }, read_write_paths = { d } })
    assert.are.equal("read_write_paths", e.option)
  end)

  it("check bind paths once resolved too: a symlink cannot smuggle /etc in", function()
    local d = T.tmpdir("/var/tmp")
    local fake = function(p) if p == d .. "/etc-link" then return "/etc" end return p end
    T.expect("PolicyDenied", session_opts, { read_only_paths = { d .. "/etc-link" } }, fake)
    if T.has_core() then
      os.execute("ln -s /etc '" .. d .. "/real-link'")
      local core = require "sbx.core"
      T.expect("PolicyDenied", session_opts, { read_only_paths = { d .. "/real-link" } },
        function(p) return (core.realpath(p)) end)
    end
  end)

  it("keep pinned work dirs and state dirs out of system and shared directories", function()
    for _, p in ipairs { "/", "/etc", "/usr/lib/x", "/proc/self", "/tmp", "/home", "/var" } do
      T.expect("PolicyDenied", session_opts, { work_dir = p })
      T.expect("PolicyDenied", session_opts, { state_dir = p })
    end
    assert.are.equal("/tmp/sbx-agent", session_opts({ work_dir = "/tmp/sbx-agent/" }).work_dir)
    T.expect("InvalidArgument", session_opts, { work_dir = "relative/dir" })
    T.expect("InvalidArgument", session_opts, { work_dir = "/tmp/a/../../etc" })
  end)
end)

describe("run options", function()
  it("run cmd through the script_type's interpreter, or an argv table as is", function()
    assert.are.same({ "/bin/sh", "-c", "echo hi" }, run_opts("echo hi").argv)
    assert.are.same({ "python3", "-c", "print(1)" }, run_opts("print(1)", { script_type = "python" }).argv)
    assert.are.same({ "luajit", "-e", "print(1)" }, run_opts("print(1)", { script_type = "lua" }).argv)
    assert.are.same({ "/bin/echo", "a b" }, run_opts({ "/bin/echo", "a b" }).argv)
    T.expect("InvalidArgument", run_opts, "x", { script_type = "ruby" })
    T.expect("InvalidArgument", run_opts, { "x" }, { script_type = "python" })
    T.expect("InvalidArgument", run_opts, {})
    T.expect("InvalidArgument", run_opts, 42)
    T.expect("InvalidArgument", run_opts, nil)
    T.expect("InvalidArgument", run_opts, "a\0b")
  end)

  it("cap cmd at MAX_ARG_STRLEN, pointing to put_bytes", function()
    assert.is_table(run_opts(("x"):rep(128 * 1024 - 1)))
    local e = T.expect("InvalidArgument", run_opts, ("x"):rep(128 * 1024))
    assert.are.equal("cmd", e.option)
    assert.matches("put_bytes", e.message, 1, true)
  end)

  it("refuse unknown option names and wrong types, naming the option", function()
    local e = T.expect("InvalidArgument", run_opts, "x", { stdot = true })
    assert.are.equal("stdot", e.option)
    T.expect("InvalidArgument", run_opts, "x", { check = true }) -- exec's, not run's
    T.expect("InvalidArgument", run_opts, "x", "stdout")
    for k, v in pairs { stdout = 1, stderr = "file", stdin = 5, env = "A=1", cwd = 3,
      script_type = true, network_mode = 1, network_allowlist = "x", timeout_s = "5" } do
      local err = T.expect("InvalidArgument", run_opts, "x", { [k] = v })
      assert.are.equal(k, err.option, k)
    end
  end)

  it("map stream options to pipe, null and inherit", function()
    local o = run_opts("x")
    assert.are.equal("pipe", o.stdout)
    assert.are.equal("pipe", o.stderr)
    assert.are.equal("null", o.stdin)
    o = run_opts("x", { stdout = false, stderr = "inherit", stdin = "data\0more" })
    assert.are.equal("null", o.stdout)
    assert.are.equal("inherit", o.stderr)
    assert.are.equal("pipe", o.stdin)
    assert.are.equal("data\0more", o.stdin_data)
    o = run_opts("x", { stdout = sbx.PIPE, stderr = sbx.DEVNULL })
    assert.are.equal("pipe", o.stdout)
    assert.are.equal("null", o.stderr)
  end)

  it("build the whole environment: defaults, then session env, then run env; never the host's", function()
    local o = run_opts("x", { env = { FOO = "bar", LANG = "de_DE.UTF-8" } }, { env = { S = "1", FOO = "session" } })
    local env = {}
    for _, kv in ipairs(o.env) do
      local k, v = kv:match("^([^=]*)=(.*)$")
      env[k] = v
    end
    assert.are.same({
      PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      HOME = "/tmp/sandbox-work", LANG = "de_DE.UTF-8", USER = "sandbox", LOGNAME = "sandbox",
      S = "1", FOO = "bar",
    }, env)
    T.expect("InvalidArgument", run_opts, "x", { env = { ["A=B"] = "1" } })
    T.expect("InvalidArgument", run_opts, "x", { env = { A = true } })
  end)

  it("resolve cwd beneath the work dir, lexically", function()
    assert.is_nil(run_opts("x").cwd)
    assert.are.equal("/tmp/sandbox-work/sub", run_opts("x", { cwd = "sub" }).cwd)
    assert.are.equal("/tmp/sandbox-work/a/c", run_opts("x", { cwd = "a/./b/../c/" }).cwd)
    assert.are.equal("/tmp/sandbox-work", run_opts("x", { cwd = "/tmp/sandbox-work" }).cwd)
    assert.are.equal("/tmp/sandbox-work/d", run_opts("x", { cwd = "/tmp/sandbox-work/d" }).cwd)
    for _, bad in ipairs { "..", "../x", "a/../../b", "/etc", "/tmp", "/tmp/sandbox-work2",
      "/tmp/sandbox-work/../sandbox-work2", "", "a\0b", "/../../tmp/sandbox-work/../.." } do
      local e = T.expect("InvalidArgument", run_opts, "x", { cwd = bad })
      assert.are.equal("cwd", e.option, bad)
    end
  end)

  it("convert timeout_s to milliseconds, bounded by the policy", function()
    assert.are.equal(500, run_opts("x", { timeout_s = 0.5 }).timeout_ms)
    assert.are.equal(1, run_opts("x", { timeout_s = 0.0001 }).timeout_ms)
    assert.is_nil(run_opts("x").timeout_ms)
    T.expect("InvalidArgument", run_opts, "x", { timeout_s = 0 })
    T.expect("PolicyDenied", run_opts, "x", { timeout_s = 86401 })
  end)

  it("let a run narrow its session's network mode, never widen it", function()
    assert.are.equal("blocked", run_opts("x", { network_mode = "blocked" }).network_mode)
    for _, m in ipairs { "allowlist", "open" } do
      local e = T.expect("PolicyDenied", run_opts, "x", { network_mode = m })
      assert.matches("never widen", e.message, 1, true)
    end
    -- A run's own allow-list means allowlist mode: wider than blocked.
    local e = T.expect("PolicyDenied", run_opts, "x", { network_allowlist = { "pypi.org" } })
    assert.matches("never widen", e.message, 1, true)
    T.expect("InvalidArgument", run_opts, "x", { network_mode = "sideways" })
  end)

  it("let a run narrow its session's allow-list, entry by entry, never widen it", function()
    local sess = function()
      return { network_mode = "allowlist",
        network_allowlist = { "pypi.org", "*.pythonhosted.org", "10.0.0.0/8", "example.com:443", "x.test:8000-8100" } }
    end
    local function narrowed(list, extra)
      local o = { network_allowlist = list }
      for k, v in pairs(extra or {}) do o[k] = v end
      return run_opts("x", o, sess())
    end
    for _, list in ipairs { { "pypi.org" }, { "files.pythonhosted.org" }, { "*.pythonhosted.org" },
        { "*.a.pythonhosted.org" }, { "10.1.0.0/16" }, { "10.2.3.4" }, { "example.com:443" },
        { "x.test:8000" }, { "x.test:8050-8100" }, { "pypi.org", "10.0.0.0/8" } } do
      local o = narrowed(list)
      assert.are.same(list, o.network_allowlist)
      assert.are.equal("allowlist", o.network_mode, list[1])
    end
    for _, bad in ipairs { "pythonhosted.org", "evil.test", "*.org", "10.0.0.0/7", "11.0.0.1",
        "example.com", "example.com:80", "x.test:7999-8000", "::1" } do
      local e = T.expect("PolicyDenied", narrowed, { "pypi.org", bad })
      assert.are.equal("network_allowlist", e.rule, bad)
      assert.matches(bad, e.message, 1, true)
    end
    T.expect("InvalidArgument", narrowed, {})
    T.expect("InvalidArgument", narrowed, { "pypi.org", "*.*.x" })
    T.expect("InvalidArgument", narrowed, { "pypi.org" }, { network_mode = "blocked" })
    assert.are.equal("allowlist", narrowed({ "pypi.org" }, { network_mode = "allowlist" }).network_mode)
    -- No list of the session's own: the policy's (none in the default policy) is what it narrows.
    T.expect("PolicyDenied", run_opts, "x", { network_allowlist = { "pypi.org" } }, { network_mode = "allowlist" })
    -- An open session's ceiling is the whole network: any list narrows it.
    assert.are.same({ "evil.test" }, run_opts("x", { network_allowlist = { "evil.test" } },
      { network_mode = "open", network_allowlist = { "pypi.org" } }).network_allowlist)
  end)

  it("let an on_run hook give a run its own allow-list, held to the session's as the caller's is", function()
    local path = T.tmpdir() .. "/narrowing_hook.lua"
    write(path, [[return { on_run = function(r)
      if r.env.WANT then r.network_allowlist = { r.env.WANT } end
      return r
    end }]])
    local e = require("sbx.policy").load(path)
    local function admit(want, list)
      local sess = { policy = e.current, network_mode = "allowlist", env = {}, backend = "userns",
        network_allowlist = { "pypi.org", "*.pythonhosted.org" } }
      return e:admit_run(sess, "x", { env = { WANT = want }, network_allowlist = list })
    end
    assert.are.same({ "files.pythonhosted.org" }, admit("files.pythonhosted.org").network_allowlist)
    assert.are.equal("allowlist", admit("files.pythonhosted.org").network_mode)
    assert.is_nil(admit(nil).network_allowlist)
    -- The caller's list stays unless the hook gives another.
    assert.are.same({ "pypi.org" }, admit(nil, { "pypi.org" }).network_allowlist)
    local err = T.expect("PolicyDenied", admit, "evil.test")
    assert.matches("evil.test", err.message, 1, true)
  end)
end)

describe("policies", function()
  teardown(T.cleanup)

  it("the default one is found and holds the documented data", function()
    assert.matches("policies/default.lua$", pol.path)
    assert.are.same({ "/usr", "/bin", "/lib", "/lib64", "/sbin" }, pol.filesystem.system_ro)
    local etc = {}
    for _, e in ipairs(pol.filesystem.etc) do etc[e] = true end
    for _, want in ipairs { "ssl", "ld.so.cache", "nsswitch.conf", "os-release", "python3" } do
      assert.is_true(etc[want], want)
    end
    for _, secret in ipairs { "shadow", "gshadow", "sudoers", "ssh", "machine-id", "passwd" } do
      assert.is_nil(etc[secret], secret)
    end
    assert.are.same({}, pol.seccomp.deny)
    assert.are.equal(86400, pol.ceilings.max_session_timeout_s)
  end)

  it("is found by a path relative to the project", function()
    assert.are.equal(pol.filesystem.etc[1], policy.load("policies/default.lua").filesystem.etc[1])
  end)

  -- Load a policy from source; returns the error it raised (or nil).
  local function load_src(src)
    local d = T.tmpdir()
    local ok, e = pcall(policy.load, write(d .. "/p.lua", src))
    if ok then return nil, e end
    return e
  end

  it("deny (fail closed) on a missing file, bad syntax, an error or a non-table", function()
    for _, src in ipairs { "return {", "error('boom')", "return 42", "return nil", "" } do
      local e = load_src(src)
      assert.is_true(sbx.is_error(e, "PolicyDenied"), src .. ": " .. tostring(e))
      assert.are.equal("policy.load", e.rule)
    end
    local e = T.expect("PolicyDenied", policy.load, "/nonexistent/policy.lua")
    assert.matches("cannot read", e.message, 1, true)
  end)

  it("refuse precompiled bytecode", function()
    local d = T.tmpdir()
    local path = write(d .. "/p.lua", string.dump(function() return {} end))
    local e = T.expect("PolicyDenied", policy.load, path)
    assert.matches("bytecode", e.message, 1, true)
  end)

  it("run in a restricted environment", function()
    for _, src in ipairs { "os.execute('true') return {}", "io.open('/etc/passwd') return {}",
      "require('ffi') return {}", "loadstring('x=1')() return {}", "return debug.getinfo(1)",
      "setmetatable({}, {}) return {}", "rawset(_G, 'x', 1) return {}" } do
      local e = load_src(src)
      assert.is_true(sbx.is_error(e, "PolicyDenied"), src .. ": " .. tostring(e))
    end
    -- Libraries are copies: a policy cannot change them for everyone.
    local e = load_src("string.format = nil; return {}")
    assert.is_nil(e)
    assert.is_function(string.format)
    assert.is_nil(load_src("assert(type(log) == 'function'); assert(type(presets.PYPI_HOSTS) == 'table'); return {}"))
    -- pcall works as usual for the policy's own errors.
    assert.is_nil(load_src([[
      local ok, e = pcall(error, "mine", 0)
      assert(not ok and e == "mine")
      local ok2, a, b, c = pcall(function() return 1, nil, 3 end)
      assert(ok2 and a == 1 and b == nil and c == 3)
      return {}]]))
  end)

  it("stop a runaway policy, even one that catches errors", function()
    for _, src in ipairs { "while true do end",
      "while true do pcall(function() while true do end end) end" } do
      local e = load_src(src)
      assert.is_true(sbx.is_error(e, "PolicyDenied"), src .. ": " .. tostring(e))
      assert.matches("budget", e.message, 1, true)
    end
  end)

  it("refuse /etc entries that expose host secrets", function()
    for _, bad in ipairs { "shadow", "gshadow", "sudoers", "sudoers.d/x", "ssh", "ssh/ssh_config",
      "machine-id", "/etc/ssl", "../shadow" } do
      local e = load_src(("return { filesystem = { etc = { %q } } }"):format(bad))
      assert.is_true(sbx.is_error(e, "PolicyDenied"), bad .. ": " .. tostring(e))
    end
  end)

  it("check the shape of its data", function()
    for _, src in ipairs { "return { defaults = 1 }", "return { defaults = { backend = 1 } }",
      "return { ceilings = { backends = 'userns' } }", "return { filesystem = { system_ro = { 'usr' } } }",
      "return { seccomp = { deny = { 1 } } }", "return { defaults = { env = { A = 1 } } }",
      "return { defaults = { tmp_bytes = 1.5 } }", "return { defaults = { hostname = 'a b' } }",
      "return { defaults = { session_timeout_s = -1 } }" } do
      local e = load_src(src)
      assert.is_true(sbx.is_error(e, "PolicyDenied"), src .. ": " .. tostring(e))
    end
  end)

  it("keep a hard floor of forbidden bind paths whatever the policy says", function()
    local d = T.tmpdir()
    local p = policy.load(write(d .. "/p.lua", "return { filesystem = { forbidden = {} } }"))
    assert.are.equal("/etc", policy.forbidden_hit(p, "/etc/ssl"))
    assert.are.equal("/", policy.forbidden_hit(p, "/"))
    assert.is_nil(policy.forbidden_hit(p, "/home/me/project"))
    -- The default policy adds /home and /root.
    assert.are.equal("/home", policy.forbidden_hit(pol, "/home/me/project"))
  end)

  it("are applied by the engine, not by sbx.options: one place per rule", function()
    -- sbx.options checks shapes only: a backend the policy does not list,
    -- a timeout over its ceiling and a forbidden path all pass it...
    local o = options.session({ backend = "none", timeout_s = 1e6, read_only_paths = { "/etc" } }, pol)
    assert.are.same({ "none", 1e6, { "/etc" } }, { o.backend, o.timeout_s, o.read_only_paths })
    assert.are.equal(1e6, options.run("x", { timeout_s = 1e6, network_mode = "open" },
      { policy = pol.current, network_mode = "blocked", env = {} }).timeout_s)
    -- ...and admission refuses each, naming the rule.
    for opts, rule in pairs { [{ backend = "none" }] = "ceilings.backends",
      [{ timeout_s = 1e6 }] = "ceilings.max_session_timeout_s",
      [{ read_only_paths = { "/etc" } }] = "filesystem.forbidden" } do
      assert.are.equal(rule, T.expect("PolicyDenied", session_opts, opts).rule)
    end
    assert.are.equal("ceilings.max_run_timeout_s", T.expect("PolicyDenied", run_opts, "x", { timeout_s = 1e6 }).rule)
    assert.are.equal("session.network_mode", T.expect("PolicyDenied", run_opts, "x", { network_mode = "open" }).rule)
  end)

  it("can deny a backend through its ceilings", function()
    local d = T.tmpdir()
    local p = policy.load(write(d .. "/p.lua", "return { ceilings = { backends = { 'bubblewrap' } } }"))
    local e = T.expect("PolicyDenied", p.admit_session, p, {}, {})
    assert.are.equal("ceilings.backends", e.rule)
  end)
end)

describe("presets", function()
  it("are exported as arrays of hosts", function()
    assert.is_true(#sbx.PYPI_HOSTS >= 3)
    assert.is_true(#sbx.NPM_HOSTS >= 2)
    local set = {}
    for _, h in ipairs(sbx.CLOUD_METADATA_DENY) do set[h] = true end
    for _, h in ipairs { "169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254",
      "metadata.google.internal" } do
      assert.is_true(set[h], h)
    end
    set = {}
    for _, h in ipairs(sbx.PYPI_HOSTS) do set[h] = true end
    assert.is_true(set["pypi.org"] and set["files.pythonhosted.org"] and set["*.pythonhosted.org"])
  end)
end)

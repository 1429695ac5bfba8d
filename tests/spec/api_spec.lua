-- api_spec.lua: the Lua API of DESIGN.md on real on-device sessions:
-- sessions and their fields, run/lines/read/communicate/wait/kill, exec,
-- run_code, timeouts, exit codes and signal deaths, env, cwd, stdin,
-- handles and reference mode, close.  Each case checks the documented
-- value precisely, so it fails if the behaviour drifts.  Needs sbx.core:
-- run it with build/bin/sbxlua /usr/bin/busted tests/spec/api_spec.lua.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx

if not T.has_core() then
  describe("the sbx API on real sessions", function()
    pending("needs sbx.core: run the specs with build/bin/sbxlua")
  end)
  return
end

-- The session venv (sbx.venv) comes first on PATH, except with backend
-- none (no venv: backend_contract_spec runs this file per backend).
local NO_VENV = getfenv(1).BACKEND_UNDER_TEST == "none"
local VENV_PATH = "PATH=" .. (NO_VENV and "" or "/tmp/sandbox-work/.venv/bin:")
  .. "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
local VIRTUAL_ENV = not NO_VENV and "VIRTUAL_ENV=/tmp/sandbox-work/.venv" or nil
local DEFAULT_ENV = {
  "HOME=/tmp/sandbox-work",
  "LANG=C.UTF-8",
  "LOGNAME=sandbox",
  VENV_PATH,
  "USER=sandbox",
  VIRTUAL_ENV,
}

local function collect(iter)
  local out = {}
  for v in iter do out[#out + 1] = v end
  return out
end

describe("sbx.session", function()
  teardown(T.cleanup)

  it("opens a userns session with the documented fields", function()
    local s = sbx.session { backend = "userns" }
    finally(function() s:close() end)
    assert.matches("^sbx%-" .. ("%x"):rep(16) .. "$", s.name)
    assert.matches("^" .. ("%x"):rep(32) .. "$", s.id)
    assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%dZ$", s.created_at)
    assert.is_true(s.is_owner)
    assert.are.equal("userns", s.backend)
    assert.is_nil(s.endpoint)
    assert.is_string(s.work_dir)
    assert.are.equal("/", s.work_dir:sub(1, 1))
    assert.is_not_nil(io.open(s.work_dir .. "/."), "the work dir exists on the host")
    assert.is_true(s:alive())
    assert.matches("sbx.session(", tostring(s), 1, true)
  end)

  it("takes a name and a pinned work dir, and leaves the pinned dir in place at close", function()
    local d = T.tmpdir()
    local s = sbx.session { name = "spec-pinned", work_dir = d }
    assert.are.equal("spec-pinned", s.name)
    assert.are.equal(d, s.work_dir)
    s:exec("echo kept > out.txt")
    s:close()
    assert.are.equal("kept\n", T.read_file(d .. "/out.txt"))
  end)

  it("removes a fresh work dir at close", function()
    local s = sbx.session {}
    local wd = s.work_dir
    s:put_bytes("x", "y")
    assert.are.equal("y", T.read_file(wd .. "/x"))
    s:close()
    assert.is_nil(io.open(wd .. "/x"))
    assert.is_nil(io.open(wd .. "/."))
  end)

  it("refuses unknown options, unknown backends and wrong types", function()
    local e = T.expect("InvalidArgument", sbx.session, { bogus = 1 })
    assert.are.equal("bogus", e.option)
    T.expect("InvalidArgument", sbx.session, "userns")
    T.expect("InvalidArgument", sbx.session, { backend = "lxc" })
    T.expect("InvalidArgument", sbx.session, { timeout_s = "1h" })
    -- GPUs need the privileged backend; "none" must be listed by the policy.
    T.expect("BackendUnavailable", sbx.session, { gpus = 1 })
    T.expect("PolicyDenied", sbx.session, { backend = "none" })
    T.expect("BackendUnavailable", sbx.session, { backend = "bubblewrap", network_mode = "open" })
    T.expect("PolicyDenied", sbx.session, { read_only_paths = { "/etc" } })
    T.expect("PolicyDenied", sbx.session, { policy = "/nonexistent.lua" })
  end)

  it("binds read_only_paths read-only and read_write_paths writable", function()
    local ro, rw = T.tmpdir("/var/tmp"), T.tmpdir("/var/tmp")
    local f = assert(io.open(ro .. "/in.txt", "w"))
    f:write("host data")
    f:close()
    os.execute("chmod 0755 '" .. ro .. "' '" .. rw .. "'; chmod 0644 '" .. ro .. "/in.txt'; chmod 0777 '" .. rw .. "'")
    local s = sbx.session { read_only_paths = { ro }, read_write_paths = { rw } }
    finally(function() s:close() end)
    local r = s:exec(("cat %s/in.txt"):format(ro))
    assert.are.equal("host data", r.stdout, T.show(r))
    r = s:exec(("echo x > %s/new.txt"):format(ro))
    assert.are_not.equal(0, r.returncode, "a read-only bind must refuse writes")
    assert.is_nil(io.open(ro .. "/new.txt"))
    r = s:exec(("echo written > %s/new.txt"):format(rw))
    assert.are.equal(0, r.returncode, T.show(r))
    assert.are.equal("written\n", T.read_file(rw .. "/new.txt"))
  end)

  it("ends by itself after timeout_s (its lifetime)", function()
    local s = sbx.session { timeout_s = 1 }
    finally(function() s:close() end)
    assert.are.equal(0, s:exec("true").returncode)
    os.execute("sleep 1.5")
    assert.is_false(s:alive())
    T.expect("SessionClosed", s.exec, s, "true")
  end)
end)

describe("a session's runs", function()
  local s

  setup(function()
    s = sbx.session {}
  end)

  teardown(function()
    if s then s:close() end
    T.cleanup()
  end)

  it("stream lines as they arrive, before the command exits", function()
    -- Order, not milliseconds: the run holds until the test has read "a"
    -- and lets it go on (a file in its work dir), so "a" can only arrive
    -- while the command is still running.  timeout_s bounds a lost line.
    local t0 = T.now_ms()
    local p = s:run("echo a; while [ ! -e go ]; do sleep 0.02; done; sleep 1; echo b", { timeout_s = 120 })
    local it = p:lines()
    assert.are.equal("a", it())
    assert.is_nil(p.returncode, "still running")
    s:put_bytes("go", "")
    assert.are.equal("b", it())
    assert.is_true(T.now_ms() - t0 >= 900)
    assert.is_nil(it())
    assert.are.equal(0, p:wait())
    assert.are.equal(0, p.returncode)
    assert.are.equal("", p.termination_reason)
    assert.is_nil(p.signal)
    assert.are.equal("userns", p.backend)
    -- In ms: at least the sleep, at most what the test saw.
    assert.is_true(p.runtime_ms >= 900 and p.runtime_ms <= T.now_ms() - t0, tostring(p.runtime_ms))
    s:exec("rm -f go")
  end)

  it("yield empty lines, and a last line without a newline at EOF", function()
    assert.are.same({ "a", "", "b", "last" }, collect(s:run("printf 'a\\n\\nb\\nlast'"):lines()))
    assert.are.same({}, collect(s:run("true"):lines()))
  end)

  it("stream stderr lines with lines('stderr') while keeping stdout", function()
    local p = s:run("echo out1; echo err1 >&2; echo out2; echo err2 >&2")
    assert.are.same({ "err1", "err2" }, collect(p:lines("stderr")))
    local out, err = p:communicate()
    assert.are.equal("out1\nout2\n", out)
    assert.are.equal("", err)
  end)

  it("let lines() and communicate() share a stream without losing data", function()
    local p = s:run("printf 'one\\ntwo\\nthree\\npartial'")
    local it = p:lines()
    assert.are.equal("one", it())
    local out = p:communicate()
    assert.are.equal("two\nthree\npartial", out)
  end)

  it("refuse lines() of a stream that was not captured", function()
    local p = s:run("echo x", { stdout = false })
    local e = T.expect("InvalidArgument", p.lines, p)
    assert.matches("not captured", e.message, 1, true)
    T.expect("InvalidArgument", p.lines, p, "stdin")
    p:wait()
  end)

  it("read() returns output pieces, then nil at EOF", function()
    local p = s:run("printf abc; sleep 0.2; printf def")
    local got = {}
    while true do
      local piece = p:read()
      if not piece then break end
      got[#got + 1] = piece
    end
    assert.are.equal("abcdef", table.concat(got))
    assert.is_nil(p:read())
    p:wait()
  end)

  it("communicate() drains both streams; a stream not captured is nil", function()
    local out, err = s:run("echo out; echo err >&2; exit 3"):communicate()
    assert.are.equal("out\n", out)
    assert.are.equal("err\n", err)
    local p = s:run("echo out; echo err >&2", { stdout = false })
    out, err = p:communicate()
    assert.is_nil(out)
    assert.are.equal("err\n", err)
    p = s:run("echo out; echo err >&2", { stderr = sbx.DEVNULL })
    out, err = p:communicate()
    assert.are.equal("out\n", out)
    assert.is_nil(err)
  end)

  it("communicate() returns large outputs whole", function()
    local out, err = s:run("head -c 4194304 /dev/zero; head -c 1000000 /dev/zero >&2"):communicate()
    assert.are.equal(4194304, #out)
    assert.are.equal(1000000, #err)
  end)

  it("wait() drains what is not consumed and returns the returncode", function()
    local p = s:run("head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2; exit 7")
    assert.are.equal(7, p:wait())
    assert.are.equal(7, p.returncode)
  end)

  it("a non-zero exit is data: run, lines, communicate, wait and exec never raise", function()
    local p = s:run("exit 5")
    assert.are.equal(5, p:wait())
    assert.are.equal("", p.termination_reason)
    assert.are.same({}, collect(s:run("exit 6"):lines()))
    p = s:run("echo x; exit 7")
    p:communicate()
    assert.are.equal(7, p.returncode)
    local r = s:exec("exit 5")
    assert.are.equal(5, r.returncode)
    assert.is_false(r.ok)
  end)

  it("report signal deaths as returncode -signo and termination_reason 'signal'", function()
    local p = s:run("kill -SEGV $$")
    assert.are.equal(-11, p:wait())
    assert.are.equal("signal", p.termination_reason)
    assert.are.equal(11, p.signal)
  end)

  it("kill() ends a run at once: 'killed', -9", function()
    -- -9 and "killed" say the kill ended it, not the 100 s sleep.
    local p = s:run("sleep 100")
    assert.is_true(p:kill())
    assert.are.equal(-9, p:wait())
    assert.are.equal("killed", p.termination_reason)
    assert.are.equal(9, p.signal)
    assert.is_false(p:kill(), "nothing to kill once it has ended")
  end)

  it("kill() right after the start leaves no process of the run behind", function()
    -- Backends without a PID namespace per run (none, bubblewrap) used to
    -- leave bwrap's sandbox running when init was killed first.
    for _ = 1, 5 do
      -- A fresh session each time: its first run is where it showed.
      local fresh = sbx.session {}
      finally(function() fresh:close() end)
      -- 30 s with a unique fraction: a survivor is named, and bounded.
      local marker = ("30.%06d"):format(math.random(0, 999999))
      local p = fresh:run("sleep " .. marker)
      assert.is_true(p:kill())
      assert.are.equal(-9, p:wait())
      assert.are.equal("killed", p.termination_reason)
      local h = io.popen("pgrep -f -x 'sleep " .. marker .. "'")
      local left = h:read("*a")
      h:close()
      assert.are.equal("", left)
    end
  end)

  it("kill(sig) takes a signal name or number, and delivers it even right after the start", function()
    -- timeout_s only bounds the test if a signal gets lost.
    local p = s:run("sleep 100", { timeout_s = 5 })
    assert.is_true(p:kill("TERM"))
    assert.are.equal(-15, p:wait())
    assert.are.equal("killed", p.termination_reason)
    p = s:run("sleep 100", { timeout_s = 5 })
    assert.is_true(p:kill("SIGINT"))
    assert.are.equal(-2, p:wait())
    p = s:run("sleep 100", { timeout_s = 5 })
    os.execute("sleep 0.2")
    assert.is_true(p:kill(15))
    assert.are.equal(-15, p:wait())
    p = s:run("sleep 100")
    T.expect("InvalidArgument", p.kill, p, "NOPE")
    T.expect("InvalidArgument", p.kill, p, 0)
    T.expect("InvalidArgument", p.kill, p, 1.5)
    assert.is_true(p:kill(9))
    p:wait()
  end)

  it("timeout_s ends a run with 'timeout', and the session stays usable", function()
    local t0 = T.now_ms()
    local p = s:run("sleep 10", { timeout_s = 0.5 })
    local rc = p:wait()
    local took = T.now_ms() - t0
    assert.is_true(rc == -15 or rc == -9, tostring(rc))
    assert.are.equal("timeout", p.termination_reason)
    -- Not before its time; the 10 s sleep did not end it (the reason says so).
    assert.is_true(took >= 450, ("took %d ms"):format(took))
    assert.are.equal("still here\n", s:exec("echo still here").stdout)
  end)

  it("timeout_s escalates to SIGKILL when SIGTERM is ignored", function()
    -- -9: SIGKILL ended it (the ignored SIGTERM did not, nor the sleeps).
    local p = s:run("trap '' TERM; sleep 10; sleep 10", { timeout_s = 0.3 })
    assert.are.equal(-9, p:wait())
    assert.are.equal("timeout", p.termination_reason)
  end)

  it("exec returns the documented result", function()
    local r = s:exec("echo out; echo err >&2; exit 2")
    assert.are.equal(2, r.returncode)
    assert.are.equal("out\n", r.stdout)
    assert.are.equal("err\n", r.stderr)
    assert.is_false(r.ok)
    assert.are.equal("userns", r.backend)
    assert.are.equal("", r.termination_reason)
    assert.is_number(r.runtime_ms)
    r = s:exec("true")
    assert.is_true(r.ok)
    assert.are.equal("", r.stdout)
  end)

  it("exec{check = true} raises SandboxCommandError with the command and the result", function()
    assert.is_true(s:exec("true", { check = true }).ok)
    local e = T.expect("SandboxCommandError", s.exec, s, "echo bad >&2; exit 4", { check = true })
    assert.are.equal("echo bad >&2; exit 4", e.cmd)
    assert.are.equal(4, e.result.returncode)
    assert.are.equal("bad\n", e.result.stderr)
    e = T.expect("SandboxCommandError", s.exec, s, "sleep 5", { check = true, timeout_s = 0.2 })
    assert.are.equal("timeout", e.result.termination_reason)
    T.expect("InvalidArgument", s.exec, s, "true", { check = "yes" })
  end)

  it("exec runs an argv table without a shell", function()
    local r = s:exec({ "/bin/echo", "a;b", "$HOME" })
    assert.are.equal("a;b $HOME\n", r.stdout)
  end)

  it("run_code runs python by default and returns stdout", function()
    assert.are.equal("4\n", s:run_code("print(2 + 2)"))
    assert.are.equal("a\nb\n", s:run_code("for x in 'ab':\n    print(x)"))
  end)

  it("run_code runs lua (LuaJIT) and shell too", function()
    assert.are.equal("3\n", s:run_code("print(1 + 2)", { script_type = "lua" }))
    assert.are.equal("sh\n", s:run_code("echo sh", { script_type = "shell" }))
  end)

  it("run_code raises SandboxCommandError on a non-zero exit", function()
    local e = T.expect("SandboxCommandError", s.run_code, s, "1 / 0")
    assert.are.equal(1, e.result.returncode)
    assert.matches("ZeroDivisionError", e.result.stderr, 1, true)
    T.expect("InvalidArgument", s.run_code, s, { "python3" })
  end)

  it("gives exactly the default environment plus env, never the host's", function()
    local r = s:exec({ "/usr/bin/env" })
    local lines = {}
    for l in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = l end
    table.sort(lines)
    -- Backend none runs on the host: HOME is the session's host work dir
    -- there (issue 17), as /tmp/sandbox-work is everywhere else.
    local want = {}
    for i, v in ipairs(DEFAULT_ENV) do
      want[i] = (s.backend == "none" and v:match("^HOME=")) and ("HOME=" .. s.work_dir) or v
    end
    assert.are.same(want, lines)
    r = s:exec({ "/usr/bin/env" }, { env = { FOO = "bar baz", EQ = "a=b", HOME = "/tmp/sandbox-work/h", U = "é" } })
    lines = {}
    for l in r.stdout:gmatch("[^\n]+") do lines[#lines + 1] = l end
    table.sort(lines)
    assert.are.same({ "EQ=a=b", "FOO=bar baz", "HOME=/tmp/sandbox-work/h", "LANG=C.UTF-8",
      "LOGNAME=sandbox", VENV_PATH, "U=é", "USER=sandbox", VIRTUAL_ENV }, lines)
    T.expect("InvalidArgument", s.run, s, "env", { env = { ["BAD=NAME"] = "x" } })
  end)

  it("merges the session's env under the run's", function()
    local s2 = sbx.session { env = { A = "session", B = "session" } }
    finally(function() s2:close() end)
    local r = s2:exec("echo $A $B", { env = { B = "run" } })
    assert.are.equal("session run\n", r.stdout)
  end)

  it("runs in the work dir, or in cwd beneath it", function()
    assert.are.equal("/tmp/sandbox-work\n", s:exec("pwd").stdout)
    s:exec("mkdir -p sub/dir")
    assert.are.equal("/tmp/sandbox-work/sub/dir\n", s:exec("pwd", { cwd = "sub/dir" }).stdout)
    assert.are.equal("/tmp/sandbox-work/sub\n", s:exec("pwd", { cwd = "/tmp/sandbox-work/sub" }).stdout)
    assert.are.equal("/tmp/sandbox-work/sub\n", s:exec("pwd", { cwd = "sub/dir/.." }).stdout)
  end)

  it("refuses a cwd outside the work dir, or one that does not exist", function()
    for _, bad in ipairs { "..", "../../etc", "/etc", "/tmp" } do
      local e = T.expect("InvalidArgument", s.run, s, "pwd", { cwd = bad })
      assert.are.equal("cwd", e.option)
    end
    local p = s:run("pwd", { cwd = "does/not/exist" })
    local e = T.expect("InvalidArgument", p.wait, p)
    assert.are.equal("cwd", e.option)
    assert.matches("does/not/exist", e.message, 1, true)
    -- The same error again from the next call on that process.
    T.expect("InvalidArgument", p.communicate, p)
  end)

  it("feeds stdin bytes, NUL included; no stdin reads as /dev/null", function()
    local data = "line1\n\0binary\255\n" .. ("z"):rep(300000)
    local r = s:exec("cat", { stdin = data })
    assert.are.equal(#data, #r.stdout)
    assert.are.equal(data, r.stdout)
    r = s:exec("cat; echo rc=$?")
    assert.are.equal("rc=0\n", r.stdout)
  end)

  it("survives a command that leaves its stdin unread (no SIGPIPE for the caller)", function()
    -- Were SIGPIPE delivered, it would kill this very process (busted).
    for _ = 1, 5 do
      local r = s:exec("true", { stdin = ("x"):rep(1024 * 1024) })
      assert.are.equal(0, r.returncode)
    end
    -- And the sandbox keeps SIGPIPE's default action: not ignored, not blocked.
    local r = s:exec({ "/bin/grep", "-E", "^Sig(Ign|Blk):", "/proc/self/status" }, { stdin = "x" })
    local n = 0
    for name, hex in r.stdout:gmatch("(Sig%a+):%s*(%x+)") do
      local low = tonumber(hex:sub(-4), 16) -- signals 1-16
      assert.are.equal(0, math.floor(low / 0x1000) % 2, name .. " has SIGPIPE: " .. hex)
      n = n + 1
    end
    assert.are.equal(2, n, r.stdout)
  end)

  it("refuses a command longer than MAX_ARG_STRLEN, pointing to put_bytes", function()
    local e = T.expect("InvalidArgument", s.run, s, "echo " .. ("x"):rep(128 * 1024))
    assert.matches("put_bytes", e.message, 1, true)
  end)

  it("refuses unknown run options and wrong types", function()
    local e = T.expect("InvalidArgument", s.run, s, "true", { timeout = 5 })
    assert.are.equal("timeout", e.option)
    T.expect("InvalidArgument", s.run, s, 42)
    T.expect("InvalidArgument", s.run, s, "true", { stdout = 1 })
    T.expect("InvalidArgument", s.run, s, "true", { stdin = {} })
    T.expect("InvalidArgument", s.run, s, "true", "pipe")
    T.expect("PolicyDenied", s.run, s, "true", { network_mode = "open" })
  end)

  it("raises SandboxExecutionError when the command cannot be started", function()
    local p = s:run({ "/no/such/program" })
    local e = T.expect("SandboxExecutionError", p.wait, p)
    assert.are.equal(-1, e.returncode)
    assert.are.equal("userns", e.backend)
    assert.is_number(e.runtime_ms)
    assert.matches("/no/such/program", e.reason, 1, true)
    assert.are.equal(-1, p.returncode)
  end)

  it("keeps sequential runs independent: a fresh /tmp each time, the work dir persists", function()
    s:exec("echo tmp > /tmp/f; echo work > w")
    assert.are_not.equal(0, s:exec("cat /tmp/f").returncode)
    assert.are.equal("work\n", s:exec("cat w").stdout)
  end)
end)

describe("handles and reference mode", function()
  teardown(T.cleanup)

  it("attach gives a reference that runs but cannot close the session", function()
    local s = sbx.session {}
    finally(function() s:close() end)
    local h = s:handle()
    assert.are.equal("sbx.local", h.kind)
    assert.are.equal(s.id, h.id)
    assert.are.equal(s.name, h.name)
    local ref = sbx.attach(h)
    assert.is_false(ref.is_owner)
    assert.are.equal(s.name, ref.name)
    assert.are.equal(s.work_dir, ref.work_dir)
    assert.are.equal("from ref\n", ref:exec("echo from ref").stdout)
    ref:put_bytes("shared.txt", "via ref")
    assert.are.equal("via ref", s:get_bytes("shared.txt"))
    ref:close()
    ref:close()
    T.expect("SessionClosed", ref.exec, ref, "true")
    -- The session itself lives on, and can be attached again.
    assert.are.equal("alive\n", s:exec("echo alive").stdout)
    local ref2 = sbx.attach(h)
    assert.are.equal(0, ref2:exec("true").returncode)
    s:close()
    T.expect("SessionClosed", ref2.exec, ref2, "true")
    T.expect("SessionClosed", sbx.attach, h)
  end)

  it("refuses handles that are not on-device handles", function()
    T.expect("InvalidArgument", sbx.attach, "sbx-123")
    T.expect("InvalidArgument", sbx.attach, { kind = "sbx.remote", id = "x" })
    T.expect("SessionClosed", sbx.attach, { kind = "sbx.local", id = "no-such-session" })
  end)
end)

describe("close", function()
  it("ends the session: later calls raise SessionClosed, closing twice is fine", function()
    local s = sbx.session {}
    s:close()
    s:close()
    assert.is_false(s:alive())
    T.expect("SessionClosed", s.run, s, "true")
    T.expect("SessionClosed", s.exec, s, "true")
    T.expect("SessionClosed", s.run_code, s, "print(1)")
    T.expect("SessionClosed", s.put_bytes, s, "a", "b")
    T.expect("SessionClosed", s.get_bytes, s, "a")
    T.expect("SessionClosed", s.handle, s)
  end)

  it("ends the runs still going: waiting on them raises SessionClosed", function()
    local s = sbx.session {}
    -- The run's sleep is gone (named by a unique fraction), not merely
    -- unreachable: checked on the host with a generous deadline.
    local marker = ("100.%06d"):format(math.random(0, 999999))
    local p = s:run("exec sleep " .. marker)
    assert.is_true(T.wait_for(function() return T.procs_exact("sleep " .. marker) > 0 end, 60), "never started")
    s:close()
    T.expect("SessionClosed", p.wait, p)
    assert.is_true(T.wait_for(function() return T.procs_exact("sleep " .. marker) == 0 end, 60),
      "the run outlived its session")
  end)

  it("is what collecting an abandoned session does", function()
    local wd
    do
      local s = sbx.session {}
      wd = s.work_dir
    end
    collectgarbage("collect")
    collectgarbage("collect")
    assert.is_nil(io.open(wd .. "/."), "the work dir went away with the session")
  end)
end)

describe("sbx.core (the C binding)", function()
  local core = require "sbx.core"
  local pol = require("sbx.policy").load()

  local function open()
    local s, kind, msg = core.session_open {
      backend = "userns",
      system_ro = pol.filesystem.system_ro,
      etc_files = pol.filesystem.etc,
      lifetime_ms = 60000,
    }
    assert(s, tostring(kind) .. ": " .. tostring(msg))
    return s
  end

  -- A Lua error (a string), never a crash, never a silent success.
  local function misuse(fn, ...)
    local ok, e = pcall(fn, ...)
    assert.is_false(ok, "misuse must raise")
    assert.is_string(e)
    return e
  end

  it("exports version and signals", function()
    assert.are.equal("0.1.0", core.version)
    assert.are.equal(15, core.signals.TERM)
    assert.are.equal(9, core.signals.KILL)
    for _, n in ipairs { "INT", "HUP", "QUIT", "USR1", "USR2" } do assert.is_number(core.signals[n], n) end
  end)

  it("raises on wrong session options, naming the field", function()
    misuse(core.session_open)
    misuse(core.session_open, "userns")
    assert.matches("backend", misuse(core.session_open, {}))
    misuse(core.session_open, { backend = 1 })
    assert.matches("unknown field 'bogus'", misuse(core.session_open, { backend = "userns", bogus = 1 }))
    assert.matches("system_ro", misuse(core.session_open, { backend = "userns", system_ro = "/usr" }))
    misuse(core.session_open, { backend = "userns", system_ro = { 1 } })
    misuse(core.session_open, { backend = "userns", etc_files = { "a\0b" } })
    misuse(core.session_open, { backend = "userns", binds = { "x" } })
    misuse(core.session_open, { backend = "userns", binds = { { path = 1 } } })
    misuse(core.session_open, { backend = "userns", binds = { { path = "/x", writable = "yes" } } })
    misuse(core.session_open, { backend = "userns", binds = { { writable = true } } })
    misuse(core.session_open, { backend = "userns", host_uid = -1 })
    misuse(core.session_open, { backend = "userns", host_uid = 2 ^ 40 })
    misuse(core.session_open, { backend = "userns", tmp_bytes = 1.5 })
    misuse(core.session_open, { backend = "userns", lifetime_ms = 0 / 0 })
    misuse(core.session_open, { backend = "userns", shm_bytes = 2 ^ 60 })
    misuse(core.session_open, { backend = "userns", hostname = "a\0b" })
  end)

  it("returns nil, kind, message when the core refuses", function()
    local s, kind, msg = core.session_open { backend = "nope" }
    assert.is_nil(s)
    assert.are.equal("InvalidArgument", kind)
    assert.is_string(msg)
  end)

  it("raises on wrong run options, and on a wrong self", function()
    local s = open()
    finally(function() s:close() end)
    misuse(s.run, s)
    misuse(s.run, s, {})
    misuse(s.run, s, { argv = {} })
    misuse(s.run, s, { argv = { 1 } })
    misuse(s.run, s, { argv = { "a\0b" } })
    misuse(s.run, s, { argv = { "true" }, env = "A=1" })
    misuse(s.run, s, { argv = { "true" }, stdin = "file" })
    misuse(s.run, s, { argv = { "true" }, timeout_ms = -1 })
    misuse(s.run, s, { argv = { "true" }, timeout_ms = 2 ^ 33 })
    misuse(s.run, s, { argv = { "true" }, stdin = "null", stdin_data = "x" })
    misuse(s.run, s, { argv = { "true" }, bogus = true })
    misuse(s.run, {}, { argv = { "true" } })
    misuse(s.run, nil, { argv = { "true" } })
    misuse(s.put, s, 1, "x", 10)
    misuse(s.put, s, "a", nil, 10)
    misuse(s.put, s, "a", "b")
    misuse(s.put, s, "a", "b", -1)
    misuse(s.get, s, "a")
    misuse(s.get, s, "a", "10")
    misuse(core.realpath, 1)
  end)

  it("runs, streams, reports the result, and keeps it after close", function()
    local s = open()
    finally(function() s:close() end)
    local r = assert(s:run { argv = { "/bin/sh", "-c", "printf out; printf err >&2; exit 3" },
      env = { "PATH=/usr/bin:/bin" } })
    assert.is_nil(r:result())
    local got = { stdout = "", stderr = "" }
    local res
    while true do
      local ev, data = r:next(5000, true, true)
      assert.is_not_nil(ev)
      if ev == "exit" then res = data break end
      if ev then got[ev] = got[ev] .. data end
    end
    assert.are.equal("out", got.stdout)
    assert.are.equal("err", got.stderr)
    assert.are.same({ term = "exit", returncode = 3, signo = 0, runtime_ms = res.runtime_ms }, res)
    misuse(r.next, r, "soon")
    misuse(r.next, r, -2)
    misuse(r.next, r, 10, "yes")
    misuse(r.kill, r, 0)
    misuse(r.kill, r, 1e10)
    assert.is_true(r:close())
    assert.is_true(r:close())
    assert.are.same(res, r:result())
    misuse(r.next, r, 0)
    local fds = { r:fds() }
    assert.are.same({ -1, -1, -1, -1 }, fds)
  end)

  it("returns false from next() when nothing happens within the timeout", function()
    local s = open()
    finally(function() s:close() end)
    local r = assert(s:run { argv = { "/bin/sleep", "5" }, stdout = "null", stderr = "null" })
    local t0 = T.now_ms()
    assert.is_false(r:next(100, true, true))
    local took = T.now_ms() - t0
    assert.is_true(took >= 90, tostring(took))
    assert.is_true(r:kill(core.signals.KILL))
    local ev, res = r:next(60000)
    assert.are.equal("exit", ev)
    assert.are.equal("killed", res.term)
    assert.are.equal(-9, res.returncode)
    r:close()
  end)

  it("puts and gets files with NUL bytes in the data, and refuses NUL in paths", function()
    local s = open()
    finally(function() s:close() end)
    assert.is_true(s:put("f", "a\0b", 100))
    assert.are.equal("a\0b", s:get("f", 100))
    local ok, kind = s:put("a\0b", "x", 100)
    assert.is_nil(ok)
    assert.are.equal("InvalidArgument", kind)
    ok, kind = s:put("g", "0123456789", 5)
    assert.is_nil(ok)
    assert.are.equal("InvalidArgument", kind)
    local path, k2 = core.realpath("/nonexistent/x")
    assert.is_nil(path)
    assert.are.equal("InvalidArgument", k2)
    assert.are.equal("/usr/bin", core.realpath("/usr/./bin/"))
  end)

  it("answers SessionClosed after close, and closes idempotently", function()
    local s = open()
    local wd = s:work_dir()
    assert.is_true(s:close())
    assert.is_true(s:close())
    assert.are.equal(wd, s:work_dir())
    assert.is_false(s:alive())
    local r, kind = s:run { argv = { "true" } }
    assert.is_nil(r)
    assert.are.equal("SessionClosed", kind)
    local ok, k2 = s:put("x", "y", 10)
    assert.is_nil(ok)
    assert.are.equal("SessionClosed", k2)
  end)

  it("keeps a session alive while a run of it is held", function()
    local r = (function()
      local s = open()
      return s:run { argv = { "/bin/sh", "-c", "sleep 0.3; echo late" }, env = { "PATH=/usr/bin:/bin" } }
    end)()
    collectgarbage("collect")
    collectgarbage("collect")
    local out = ""
    while true do
      local ev, data = r:next(5000, true, true)
      if ev == "exit" then
        assert.are.equal("exit", data.term)
        break
      end
      if ev == "stdout" then out = out .. data end
      assert.is_not_nil(ev)
    end
    assert.are.equal("late\n", out)
    r:close()
  end)
end)

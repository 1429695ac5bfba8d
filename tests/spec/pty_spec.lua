-- pty_spec: interactive runs (issue 21): live stdin (stdin = true,
-- p:write, p:close_stdin) and a pseudo-terminal (pty = { rows, cols },
-- p:resize, p:kill("INT") to the foreground group), driving real programs:
-- a Python REPL, bash's `stty size` and Ctrl-C, `read` prompts, less.  The
-- SAME tests run on-device (userns, and privileged where the host side is
-- root) and through a real sbxd.  Also: stdin backpressure (a run that
-- never reads blocks the writer), TIOCSTI/TIOCLINUX refused on the pty
-- (with a control on a host pty), one run's devpts invisible to another,
-- and backends without a devpts per run refusing pty.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local sbx = T.sbx

if not T.has_core() then
  describe("pty", function() pending("needs sbx.core: run the specs with build/bin/sbxlua") end)
  return
end

local remote_ok = H.available() and H.have("curl") and pcall(require, "sbx.remote.http")
local is_root = (function()
  local h = io.popen("id -u")
  local u = h:read("*l")
  h:close()
  return u == "0"
end)()

-- Read p's terminal output into acc until it contains pat (plain), up to
-- a deadline (60 s: generous for a loaded machine, never a timing test).
-- A pattern (Lua's, not plain) when is_pattern is true.
local function expect(p, acc, pat, timeout_s, is_pattern)
  local t0 = T.now_ms()
  while not acc.text:find(pat, 1, not is_pattern) do
    if T.now_ms() - t0 > (timeout_s or 60) * 1000 then
      error(("timed out waiting for %q; output so far: %q"):format(pat, acc.text), 2)
    end
    local d = p:read("stdout", 0.5)
    if d == nil then error(("EOF before %q; output: %q"):format(pat, acc.text), 2) end
    acc.text = acc.text .. d
  end
  return acc.text
end

-- p:wait(), bounded: read p's output to its end (into acc, if given) for
-- 60 s at most, so a run that never exits fails the test instead of
-- hanging the suite.  Returns the exit code.
local function wait_exit(p, acc)
  local t0 = T.now_ms()
  while true do
    local d = p:read("stdout", 0.5)
    if d == nil then break end
    if acc then acc.text = acc.text .. d end
    if T.now_ms() - t0 > 60 * 1000 then
      p:kill()
      error(("the run did not exit; output: %q"):format(acc and acc.text or ""), 2)
    end
  end
  return p:wait()
end

local SOURCES = {
  { name = "userns on-device", open = function() return sbx.session { backend = "userns" } end },
  { name = "privileged on-device", skip = not is_root and "needs root",
    open = function() return sbx.session { backend = "privileged" } end },
  { name = "userns through sbxd", remote = true, skip = not remote_ok and "needs build/bin/sbxd and curl",
    open = function(state)
      state.srv = state.srv or assert(H.start {})
      return sbx.remote.session { endpoint = state.srv.url, token = state.srv.token.alice, backend = "userns" }
    end },
}

for _, source in ipairs(SOURCES) do
  local describe_src = not source.skip and describe
    or function(name) pending(name .. " (" .. source.skip .. ")") end

  describe_src("interactive runs, " .. source.name, function()
    local state, s = {}, nil
    setup(function() s = source.open(state) end)
    teardown(function()
      if s then pcall(s.close, s) end
      if state.srv then state.srv:cleanup() end
      T.cleanup()
    end)

    it("drives a Python REPL that computes and prints", function()
      local p = s:run("python3 -q", { pty = { rows = 24, cols = 80 } })
      assert.is_true(p.pty)
      local acc = { text = "" }
      expect(p, acc, ">>> ")
      assert.is_true(p:write("print(6 * 7)\n"))
      expect(p, acc, "42\r\n")
      p:write("exit()\n")
      assert.are.equal(0, wait_exit(p))
    end)

    it("reports the new size to `stty size` after a resize", function()
      local p = s:run("bash --norc", { pty = { rows = 24, cols = 80 } })
      local acc = { text = "" }
      p:write("stty size\n")
      -- The prompt after the answer: readline prepares the terminal
      -- before it prints a prompt, and that reads the window size and
      -- writes it back (rltty.c's set_winsize).  A resize landing between
      -- the two is undone, by bash, as on any terminal: resize at the
      -- prompt, as a person would.
      expect(p, acc, "24 80\r\n.-%$ ", nil, true)
      p:resize(40, 132)
      p:write("stty size\n")
      expect(p, acc, "40 132")
      p:write("exit 0\n")
      assert.are.equal(0, wait_exit(p))
    end)

    for _, how in ipairs { "p:kill(\"INT\")", "a typed ^C" } do
      it("interrupts `sleep` in bash with " .. how .. ", and bash survives", function()
        local p = s:run("bash --norc", { pty = { rows = 24, cols = 80 } })
        local acc = { text = "" }
        -- "ready" comes from the job itself, so it is the terminal's
        -- foreground group by then (bash's child takes the terminal
        -- before it runs the command).
        p:write("sh -c 'echo re''ady; exec sleep 300'\n")
        expect(p, acc, "ready\r\n")
        acc.text = ""
        if how == "a typed ^C" then p:write("\3") else p:kill("INT") end
        p:write("echo after=$?\n")
        expect(p, acc, "after=130")
        p:write("echo alive; exit 7\n")
        expect(p, acc, "alive")
        assert.are.equal(7, wait_exit(p))
        assert.are.equal("", p.termination_reason)
      end)
    end

    it("answers `read` prompts through live stdin (a pipe, no pty)", function()
      local p = s:run("printf 'name? '; read n; printf 'hello %s\\nage? ' \"$n\"; read a; echo \"$n is $a\"",
        { stdin = true })
      -- The prompt is out before any input exists: stdin is live.
      local acc = { text = "" }
      expect(p, acc, "name? ")
      assert.is_true(p:write("ada\n"))
      expect(p, acc, "age? ")
      p:write("36\n")
      p:close_stdin()
      expect(p, acc, "ada is 36")
      assert.are.equal(0, wait_exit(p))
    end)

    it("reads EOF after p:close_stdin (a pipe) and ^D (a pty)", function()
      local p = s:run("wc -c", { stdin = true })
      p:write("12345")
      p:close_stdin()
      local out = p:communicate()
      assert.are.equal("5", out:match("%d+"))
      local q = s:run("cat; echo done-$?", { pty = true })
      local acc = { text = "" }
      q:write("line\n")
      expect(q, acc, "line\r\nline\r\n")
      q:close_stdin()
      expect(q, acc, "done-0")
      assert.are.equal(0, wait_exit(q))
    end)

    it("quits less cleanly", function()
      local p = s:run("seq 1 200 > f.txt && less f.txt; echo less-rc=$?", { pty = { rows = 10, cols = 40 } })
      local acc = { text = "" }
      expect(p, acc, "f.txt")
      p:write("q")
      expect(p, acc, "less-rc=0")
      assert.are.equal(0, wait_exit(p))
    end)

    it("refuses TIOCSTI and TIOCLINUX on the run's terminal", function()
      local probe = [[
import fcntl, termios, errno
for name, req in (("TIOCSTI", termios.TIOCSTI), ("TIOCLINUX", 0x541C)):
    try:
        fcntl.ioctl(0, req, b"\x0c")
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
]]
      s:put_bytes("probe.py", probe)
      local p = s:run("python3 probe.py", { pty = true })
      local acc = { text = "" }
      -- All of it: the line may come in more than one piece.
      assert.are.equal(0, wait_exit(p, acc))
      assert.matches("TIOCSTI EPERM", acc.text)
      assert.matches("TIOCLINUX EPERM", acc.text)
    end)

    it("blocks a writer whose run never reads stdin (bounded), and takes all from one that reads", function()
      local big = ("x"):rep(4 * 1024 * 1024)
      local p = s:run("sleep 300", { stdin = true })
      local ok, why, n = p:write(big, 2)
      assert.is_nil(ok)
      assert.are.equal("timeout", why)
      -- What was taken fits the pipe (and sbxd's bounded per-run buffer).
      assert.is_true(n < 2 * 1024 * 1024, "taken: " .. tostring(n))
      p:kill()
      p:wait()
      -- Control: the same write to a reader goes through.
      local q = s:run("wc -c", { stdin = true })
      assert.is_true(q:write(big, 120))
      q:close_stdin()
      assert.are.equal(tostring(#big), (q:communicate()):match("%d+"))
    end)

    it("gives each run a devpts of its own", function()
      local p = s:run("ls /dev/pts; sleep 300", { pty = true })
      local acc = { text = "" }
      -- Control: the run sees its own terminal (pts 0).
      expect(p, acc, "ptmx")
      assert.matches("0%s", acc.text)
      local r = s:exec("ls /dev/pts")
      assert.are.equal("ptmx\n", r.stdout)
      p:kill()
      p:wait()
    end)
  end)
end

describe("interactive runs through sbxd: limits", function()
  local describe_srv = remote_ok and describe or function(name) pending(name .. " (needs build/bin/sbxd and curl)") end
  describe_srv("", function()
    local srv, s
    setup(function()
      srv = assert(H.start { small_quarantine = true })
      s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns" }
    end)
    teardown(function()
      if s then pcall(s.close, s) end
      if srv then srv:cleanup() end
    end)

    it("holds no stdin of a run that never reads: the writer is refused, sbxd's RSS stays bounded", function()
      local p = s:run("sleep 300", { stdin = true })
      local chunk = ("y"):rep(60 * 1024)
      local ok, why, n = p:write(chunk:rep(32), 1) -- fill the pipe first
      local before = srv:rss_kb()
      local taken = n
      -- 64 MiB offered over ~3 s; the server takes nothing more.
      for _ = 1, 3 do
        local ok2, why2, n2 = p:write(chunk:rep(16), 1)
        assert.is_nil(ok2)
        assert.are.equal("timeout", why2)
        taken = taken + n2
      end
      local after = srv:rss_kb()
      assert.is_nil(ok)
      assert.are.equal("timeout", why)
      assert.is_true(taken <= 1024 * 1024, "taken " .. taken)
      assert.is_true(after - before < 8 * 1024, ("sbxd RSS grew %d kB"):format(after - before))
      -- Control: the refusal is the run's, not the route's: a reader takes it all.
      local q = s:run("wc -c", { stdin = true })
      assert.is_true(q:write(chunk:rep(16), 120))
      q:close_stdin()
      assert.are.equal(tostring(#chunk * 16), (q:communicate()):match("%d+"))
      p:kill()
    end)

    it("counts an idle pty run against the tenant's concurrent runs", function()
      local srv1 = assert(H.start { args = { "--max-runs", "1" } })
      local s1
      finally(function() -- busted keeps one finally per test: both go here
        if s1 then pcall(s1.close, s1) end
        srv1:cleanup()
      end)
      s1 = sbx.remote.session { endpoint = srv1.url, token = srv1.token.alice, backend = "userns" }
      -- Control: with nothing running, a run is admitted.
      assert.are.equal(0, s1:exec("true").returncode)
      local p = s1:run("bash --norc", { pty = true })
      -- bash idles at its prompt: the pty run still holds the one run allowed.
      local e
      local ok = pcall(function() e = select(2, pcall(s1.exec, s1, "true")) end)
      assert.is_true(ok)
      assert.is_table(e, "a second run was admitted next to the idle pty run")
      assert.are.equal("PolicyDenied", e.kind)
      assert.are.equal("limits", e.rule)
      p:write("exit 0\n")
      assert.are.equal(0, wait_exit(p))
      -- Once it ended, the slot is free again (sbxd finishes the run as its stream ends).
      local deadline = os.time() + 60
      local r
      repeat
        local okr, res = pcall(s1.exec, s1, "true")
        r = okr and res or nil
      until r or os.time() > deadline
      assert.is_table(r, "no run admitted after the pty run ended")
      assert.are.equal(0, r.returncode)
    end)

    it("re-attaches a detached pty run, replaying its recent output, and drives it again", function()
      local p = s:run("bash --norc", { pty = true, detach = true })
      local acc = { text = "" }
      expect(p, acc, "$ ")
      -- Written while no client is attached: sbxd keeps it for the next.
      p:write("read -t 60 go; echo before-$((1 + 1))\n")
      expect(p, acc, "read -t 60 go")
      local id = p.run_id
      assert.is_string(id)
      p:kill() -- lets this client go; the run goes on
      -- Another client's stdin reaches the run meanwhile (the route is the run's).
      local body, status = srv:curl("/v1/sessions/" .. s.id .. "/runs/" .. id .. "/stdin", "-X", "POST",
        "-H", srv:auth(), "-H", "Content-Type: application/json", "--data", '{"data":"\\n"}')
      assert.are.equal(200, status, body)
      local q = s:attach_run(id)
      local acc2 = { text = "" }
      expect(q, acc2, "before-2") -- replayed
      -- The re-attached process drives the same terminal: its input, and
      -- its ^C, which reaches the foreground job.  Never bash itself at its
      -- prompt: bash may read the next line typed while it handles an
      -- interrupt and then drop it (an `exit` lost that way left bash at
      -- its prompt, and this test waiting for ever).
      assert.is_true(q:write("sh -c 'echo after-$((2 + 2)); exec sleep 300'\n"))
      expect(q, acc2, "after-4")
      q:kill("INT")
      q:write("echo rc=$?; exit 5\n")
      expect(q, acc2, "rc=130")
      assert.are.equal(5, wait_exit(q))
    end)

    it("ends a pty run whose client goes without detaching", function()
      local marker = ("301.%06d"):format(math.random(0, 999999))
      local p = s:run("sleep " .. marker, { pty = true })
      assert.is_true(T.wait_for(function() return T.procs_exact("sleep " .. marker) > 0 end, 60))
      p:kill() -- the client lets go of the stream: sbxd kills the run
      assert.is_true(T.wait_for(function() return T.procs_exact("sleep " .. marker) == 0 end, 60))
    end)
  end)
end)

describe("pty outside the sandbox's own devpts", function()
  it("the TIOCSTI probe works on a host pty (the control of the refusal)", function()
    local h = io.popen([[/usr/bin/python3 -c '
import os, pty, fcntl, termios, sys
pid, fd = pty.fork()
if pid == 0:
    try:
        fcntl.ioctl(0, termios.TIOCSTI, b"Z"); print("TIOCSTI ok")
    except OSError as e:
        print("TIOCSTI", e.errno)
    sys.stdout.flush(); os._exit(0)
out = b""
while True:
    try:
        d = os.read(fd, 1024)
    except OSError:
        break
    if not d: break
    out += d
os.waitpid(pid, 0)
print(out.decode())' 2>&1]])
    local out = h:read("*a")
    h:close()
    assert.matches("TIOCSTI ok", out)
  end)

  it("is refused on backend bubblewrap (BackendUnavailable, no host devpts)", function()
    local ok, s = pcall(sbx.session, { backend = "bubblewrap" })
    if not ok then return pending("bubblewrap unavailable: " .. tostring(s)) end
    local err = T.expect("BackendUnavailable", function() return s:run("tty", { pty = true }) end)
    assert.matches("devpts", err.message)
    -- Control: the same session runs commands.
    assert.are.equal(0, s:exec("true").returncode)
    s:close()
  end)

  it("rejects bad pty and stdin options with InvalidArgument", function()
    local s = sbx.session { backend = "userns" }
    T.expect("InvalidArgument", function() return s:run("true", { pty = { rows = 0 } }) end)
    T.expect("InvalidArgument", function() return s:run("true", { pty = { rows = 24, cols = 1e6 } }) end)
    T.expect("InvalidArgument", function() return s:run("true", { pty = true, stderr = true }) end)
    T.expect("InvalidArgument", function() return s:run("true", { stdin = 5 }) end)
    local p = s:run("true")
    T.expect("InvalidArgument", function() return p:write("x") end)
    T.expect("InvalidArgument", function() return p:resize(10, 10) end)
    p:wait()
    s:close()
  end)
end)

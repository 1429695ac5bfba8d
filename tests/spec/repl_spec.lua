-- repl_spec.lua: the sbxlua REPL used as a person uses it, under tmux:
-- typed keys in, the screen read back (send-keys / capture-pane).
--
-- Each test gets its own tmux server (-L) and history file, and waits for
-- what it expects on screen with a deadline instead of fixed sleeps.

local H = require "spec.sec_helpers"
local clock = require "sbx.clock"

local function sh(cmd)
  local h = assert(io.popen(cmd .. " 2>&1"))
  local out = h:read("*a")
  h:close()
  return out
end

local Term = {}
Term.__index = Term

local n = 0
local function term(history, args)
  n = n + 1
  local t = setmetatable({ sock = ("sbx-repl-spec-%d-%d"):format(n, os.time()) }, Term)
  sh(("tmux -L %s new-session -d -x 150 -y 45 %s"):format(t.sock,
    H.q(("cd %s && SBXLUA_HISTORY=%s %s %s; echo REPL-ENDED; sleep 30"):format(H.q(H.ROOT), H.q(history), H.q(H.SBXLUA),
      args or ""))))
  t:wait_for("sbx>")
  return t
end

function Term:keys(...)
  for _, k in ipairs({ ... }) do
    if k:match("^<.+>$") then
      sh(("tmux -L %s send-keys %s"):format(self.sock, k:sub(2, -2)))
    else
      sh(("tmux -L %s send-keys -l %s"):format(self.sock, H.q(k)))
    end
  end
end

function Term:screen()
  return sh(("tmux -L %s capture-pane -p"):format(self.sock))
end

-- Is the pane's terminal in raw mode (the line editor reading keys)?  The
-- REPL prints its prompt before the line editor takes the terminal: keys
-- typed in between are echoed by the terminal and then again by the
-- editor (seen under load: "sbx> !true!true").
function Term:stty()
  self.tty = self.tty or sh(("tmux -L %s display -p '#{pane_tty}'"):format(self.sock)):gsub("%s+$", "")
  return sh("stty -a -F " .. H.q(self.tty))
end

function Term:raw()
  return self:stty():find("-icanon", 1, true) ~= nil
end

-- Has the REPL handed its terminal to a run (raw, ^C no longer a signal)?
-- Its prompt keeps isig; a run's output is only shown once this holds.
function Term:handed_over()
  return self:stty():find("-isig", 1, true) ~= nil
end

-- Wait until the screen contains text (plain), up to timeout_s (default
-- 60: a deadline for a loaded machine, never a timing assertion); returns
-- the screen and the seconds waited.  Text that ends at the REPL's prompt
-- is waited for until the prompt reads keys, so the caller may type.
function Term:wait_for(text, timeout_s)
  local t0 = clock.now_ns()
  local screen
  repeat
    screen = self:screen()
    if screen:find(text, 1, true) and (not text:find("sbx>$") or self:raw()) then
      return screen, (clock.now_ns() - t0) / 1e9
    end
    sh("sleep 0.05")
  until (clock.now_ns() - t0) / 1e9 > (timeout_s or 60)
  error(("timed out waiting for %q; screen:\n%s"):format(text, screen), 2)
end

-- Wait until the REPL's own prompt, with nothing typed after it, is the
-- last line on screen: an interactive program has handed the terminal
-- back (keys typed before that would still go to the program).
function Term:wait_prompt(timeout_s)
  local t0 = clock.now_ns()
  local screen
  repeat
    screen = self:screen()
    local last = screen:gsub("%s+$", ""):match("([^\n]*)$")
    if last == "sbx>" and self:raw() then return screen end
    sh("sleep 0.05")
  until (clock.now_ns() - t0) / 1e9 > (timeout_s or 60)
  error(("timed out waiting for the sbx> prompt; screen:\n%s"):format(screen), 2)
end

function Term:kill()
  sh(("tmux -L %s kill-server"):format(self.sock))
end

describe("the sbxlua REPL under tmux", function()
  local history

  before_each(function()
    history = os.tmpname()
  end)

  after_each(function()
    os.remove(history)
  end)

  it("evaluates expressions, continues incomplete chunks, pretty-prints tables", function()
    local t = term(history)
    finally(function() t:kill() end)
    t:keys("1 + 1", "<Enter>")
    t:wait_for("\n2\n")
    for _, l in ipairs({ "function f(x)", "  return x * 2", "end" }) do t:keys(l, "<Enter>") end
    t:wait_for("...> end")
    t:keys("=f(21)", "<Enter>")
    t:wait_for("\n42\n")
    t:keys("x = {1, {a = 'b'}}; x.self = x", "<Enter>", "x", "<Enter>")
    local screen = t:wait_for("<cycle: table:")
    assert.is_truthy(screen:find('{ a = "b" }', 1, true), screen)
  end)

  it("completes globals, fields and session methods with Tab", function()
    local t = term(history)
    finally(function() t:kill() end)
    t:keys("string.for", "<Tab>", '("%d!", 7)', "<Enter>")
    t:wait_for("7!")
    t:keys("s = sbx.session()", "<Enter>")
    t:keys("s:run_c", "<Tab>", "('print(6 * 7)')", "<Enter>")
    t:wait_for("\n42\n")
  end)

  it("streams !cmd output live, shows a non-zero exit, and Ctrl-C kills the run only", function()
    local t = term(history)
    finally(function() t:kill() end)
    -- Held back, "first" would only ever show together with "second": the
    -- first screen that has it must not (8 s apart: many polls, even slow).
    t:keys("!echo first; sleep 8; echo second; exit 3", "<Enter>")
    local screen = t:wait_for("first")
    assert.is_nil(screen:find("\nsecond", 1, true), "output was held back until the end")
    t:wait_for("[exit 3]")
    -- Ctrl-C once the run is seen on the host and has the terminal (the
    -- REPL starts the run, then hands the terminal over: a ^C before that
    -- is the REPL's, "interrupted", seen under load); the next run
    -- working says it ended the run only (a 100 s sleep, far past the wait).
    local marker = ("100.%06d"):format(math.random(0, 999999))
    t:keys("!sleep " .. marker, "<Enter>")
    assert.is_truthy(H.wait_for(60, function()
      return #H.procs_exact("sleep " .. marker) > 0 and t:handed_over()
    end), t:screen())
    -- On a terminal the run has a pty: ^C is the sandboxed program's
    -- (issue 21), so SIGINT ends sleep, and the REPL reports it.
    t:keys("<C-c>")
    t:wait_for("[exit -2: signal]")
    t:wait_prompt()
    t:keys("!echo still-alive", "<Enter>")
    t:wait_for("\nstill-alive\n")
    t:keys(":session", "<Enter>")
    t:wait_for('backend = "userns"')
  end)

  it("a Ctrl-C at an idle prompt ends none of the next runs", function()
    -- The terminal sends SIGINT to sbxlua's process group: the session's
    -- zygote and idle inits must not be in it, nor replay it later.
    local t = term(history)
    finally(function() t:kill() end)
    t:keys("!true", "<Enter>")
    t:wait_for("sbx> !true\nsbx>")
    t:keys("<C-c>")
    -- The Ctrl-C was read: the dropped line's fresh prompt is on screen.
    t:wait_for("sbx> !true\nsbx>\nsbx>")
    for i = 1, 5 do
      t:keys("!echo run-" .. i .. "-done", "<Enter>")
      t:wait_for("run-" .. i .. "-done\nsbx>")
    end
    local screen = t:screen()
    assert.is_nil(screen:find("[exit", 1, true), screen)
  end)

  it("makes !bash interactive: a pty of the terminal's size, resizes, ^C to its job, its prompt back", function()
    local t = term(history)
    finally(function() t:kill() end)
    t:keys("!bash --norc", "<Enter>")
    t:keys("PS1='in-bash$ '", "<Enter>")
    t:wait_for("in-bash$ ")
    t:keys("tty; stty size", "<Enter>")
    -- bash's prompt back before the resize: readline rewrites the size
    -- it read as it prepares each prompt (pty_spec says more).
    t:wait_for("45 150\nin-bash$")
    assert.is_truthy(t:screen():find("/dev/pts/0", 1, true), t:screen())
    sh(("tmux -L %s resize-window -x 100 -y 30"):format(t.sock))
    t:keys("stty size", "<Enter>")
    t:wait_for("30 100")
    -- ^C reaches the sandboxed job, not the REPL: bash goes on.
    -- "started" comes from the job, the terminal's foreground group by then.
    t:keys("sh -c 'echo star''ted; exec sleep 300'", "<Enter>")
    t:wait_for("started\n")
    t:keys("<C-c>")
    t:keys("echo rc=$?", "<Enter>")
    t:wait_for("rc=130")
    t:keys("exit 4", "<Enter>")
    t:wait_for("[exit 4]")
    t:keys("1 + 41", "<Enter>")
    t:wait_for("\n42\n")
  end)

  it("makes !python3 and :shell interactive", function()
    local t = term(history)
    finally(function() t:kill() end)
    t:keys("!python3 -q", "<Enter>")
    t:wait_for(">>>")
    t:keys("print(6 * 7)", "<Enter>")
    t:wait_for("\n42\n")
    t:keys("<C-d>")
    t:wait_for(">>>\nsbx>")
    t:keys(":shell", "<Enter>")
    t:keys("PS1='in-shell$ '", "<Enter>")
    t:wait_for("in-shell$")
    t:keys("echo shell-$((20 + 22))", "<Enter>")
    t:wait_for("shell-42")
    t:keys("exit", "<Enter>")
    t:wait_for("exit\nsbx>")
    t:keys("2 + 2", "<Enter>")
    t:wait_for("\n4\n")
  end)

  it("makes !top interactive and ^Z stops a job of !bash, which bash then resumes", function()
    local t = term(history)
    finally(function() t:kill() end)
    -- top draws a full screen (it needs the terminal and its size) and
    -- quits on its own key, giving the REPL's prompt back.
    t:keys("!top -d 0.5", "<Enter>")
    t:wait_for("load average")
    t:wait_for("PID USER")
    t:keys("q")
    t:wait_prompt()
    t:keys("3 + 4", "<Enter>")
    t:wait_for("\n7\n")
    -- ^Z reaches the sandboxed job (bash's job control reports it stopped),
    -- not the REPL; fg brings it back and ^C ends it.
    t:keys("!bash --norc", "<Enter>")
    t:keys("PS1='in-bash$ '", "<Enter>")
    t:wait_for("in-bash$ ")
    -- The job, one process (^Z stops all of it, ^C kills it: rc 130), says
    -- "continued" on SIGCONT (the split strings keep the typed line from
    -- matching what it prints), with os.write: a print from a handler can
    -- find the handler's own earlier print mid-write ("reentrant call",
    -- seen under load).
    t:keys([[python3 -c 'import os, signal as s, time; s.signal(s.SIGINT, s.SIG_DFL); ]]
      .. [[s.signal(s.SIGCONT, lambda *a: os.write(1, b"con" b"tinued\n")); ]]
      .. [[print("star" "ted", flush=True); time.sleep(300)']], "<Enter>")
    t:wait_for("started\n")
    t:keys("<C-z>")
    t:wait_for("Stopped")
    t:keys("jobs -s | wc -l | sed 's/^/stopped=/'", "<Enter>")
    t:wait_for("stopped=1")
    t:keys("fg", "<Enter>")
    -- Not the command line fg prints: bash prints it before it hands the
    -- job the terminal, and a ^C typed then would reach bash.  bash sends
    -- SIGCONT only once the job holds the terminal: the job's own
    -- "continued" says the ^C will reach it.
    t:wait_for("in-bash$ fg\npython3 -c")
    t:wait_for("continued\n")
    t:keys("<C-c>")
    t:keys("echo rc=$?", "<Enter>")
    t:wait_for("rc=130")
    t:keys("exit", "<Enter>")
    t:wait_prompt()
    t:keys("5 + 6", "<Enter>")
    t:wait_for("\n11\n")
  end)

  it("keeps history across restarts", function()
    local t, t2 = term(history), nil
    -- One finally per test (busted keeps only the last).
    finally(function()
      t:kill()
      if t2 then t2:kill() end
    end)
    t:keys("remembered_value = 12345", "<Enter>")
    t:wait_for("sbx> remembered_value = 12345\nsbx>")
    t:keys("<C-d>")
    t:wait_for("REPL-ENDED")
    t:kill()
    t2 = term(history)
    t2:keys("<Up>")
    t2:wait_for("sbx> remembered_value = 12345")
  end)

  it("moves files with :put and :get, and names unknown commands", function()
    local t = term(history)
    local src, dst = os.tmpname(), os.tmpname()
    -- One finally per test: busted keeps only the last one given.
    finally(function() t:kill() os.remove(src) os.remove(dst) end)
    local f = assert(io.open(src, "w"))
    f:write("payload-123\n")
    f:close()
    t:keys(":put " .. src .. " in.txt", "<Enter>")
    t:wait_for("-> in.txt")
    t:keys("!cat in.txt", "<Enter>")
    t:wait_for("payload-123\nsbx>")
    t:keys(":get in.txt " .. dst, "<Enter>")
    t:wait_for("(12 bytes)")
    f = assert(io.open(dst))
    assert.are.equal("payload-123\n", f:read("*a"))
    f:close()
    t:keys(":bogus", "<Enter>")
    t:wait_for("InvalidArgument: unknown or incomplete command ':bogus'")
  end)

  it("switches the network of the next ! runs with :net, within the session's ceiling", function()
    local t = term(history, "--session-opts " .. H.q('{network_mode="allowlist", network_allowlist={"pypi.org"}}'))
    finally(function() t:kill() end)
    -- The session's own mode first: the proxy is there.
    t:keys("!echo proxy=$HTTPS_PROXY; grep -c ': 0100007F:0C38 00000000:0000 0A ' /proc/net/tcp", "<Enter>")
    t:wait_for("proxy=http://127.0.0.1:3128\n1\nsbx>")
    t:keys(":net blocked", "<Enter>")
    t:wait_for("network_mode blocked for the next runs")
    t:keys("!echo proxy=$HTTPS_PROXY; grep -c ': 0100007F:0C38 00000000:0000 0A ' /proc/net/tcp", "<Enter>")
    t:wait_for("proxy=\n0\n[exit 1]")
    t:keys(":net open", "<Enter>")
    t:keys("!true", "<Enter>")
    t:wait_for("PolicyDenied")
  end)

  it("shows a policy's denial once, as the error, and the next run goes on", function()
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. H.q(dir)) == 0)
    local pol = dir .. "/deny.lua"
    local f = assert(io.open(pol, "w"))
    f:write([[return { on_run = function(req)
  if tostring(req.cmd):find("forbidden", 1, true) then return false, "no forbidden-things" end
  return true
end }
]])
    f:close()
    local t = term(history, "--session-opts " .. H.q(('{backend="userns", policy=%q}'):format(pol)))
    finally(function() t:kill(); os.execute("rm -rf " .. H.q(dir)) end)
    t:keys("!echo forbidden", "<Enter>")
    t:keys("!echo allowed-$((6*7))", "<Enter>")
    local screen = t:wait_for("allowed-42")
    local _, count = screen:gsub("no forbidden%-things", "")
    assert.are.equal(1, count, screen)
    assert.truthy(screen:find("PolicyDenied", 1, true), screen)
  end)
end)

describe("the sbxlua REPL's history file", function()
  -- SBXLUA_HISTORY=/dev/null once chmodded the host's /dev/null to 0600
  -- (libedit saves history with mode 0600), breaking every sandbox's
  -- /dev/null. A node of our own with /dev/null's numbers stands in for it.
  local function mode(path) return sh("stat -c %a " .. H.q(path)):match("%d+") end

  it("is never written to a device; a regular file is (control)", function()
    local dir = sh("mktemp -d /tmp/sbx-repl-spec.XXXXXX"):match("%S+")
    local t, t2
    finally(function() -- busted keeps one finally per test: all cleanup here
      if t then t:kill() end
      if t2 then t2:kill() end
      os.execute("rm -rf " .. H.q(dir))
    end)
    local dev = dir .. "/null"
    assert.equal("", sh(("mknod -m 666 %s c 1 3"):format(H.q(dev))))
    t = term(dev)
    t:keys("1 + 1", "<Enter>")
    t:wait_for("\n2\n")
    t:keys("3 + 4", "<Enter>")
    t:wait_for("\n7\n")
    assert.equal("666", mode(dev))
    -- Control: the same REPL saves to a regular file, with libedit's 0600.
    local file = dir .. "/history"
    local f = assert(io.open(file, "w"))
    f:close()
    os.execute("chmod 644 " .. H.q(file))
    t2 = term(file)
    t2:keys("5+6", "<Enter>")
    t2:wait_for("\n11\n")
    assert.equal("600", mode(file))
    assert.is_truthy(io.open(file):read("*a"):find("5+6", 1, true))
  end)
end)

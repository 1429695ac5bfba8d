-- repl_remote_spec.lua: `sbxlua --remote URL --token-file F` under tmux:
-- the REPL's `!` session is a remote one on a real sbxd (started on
-- 127.0.0.1:0 by tests/server/harness.lua); keys typed in, the screen read
-- back, and the server asked what it holds.

local H = require "spec.sec_helpers"
local clock = require "sbx.clock"
local SH = dofile(H.ROOT .. "/tests/server/harness.lua")

local function sh(cmd)
  local h = assert(io.popen(cmd .. " 2>&1"))
  local out = h:read("*a")
  h:close()
  return out
end

local runnable = SH.available() and SH.have("tmux") and SH.have("curl")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, tmux and curl)") end

describe_srv("sbxlua --remote under tmux", function()
  local srv, tokfile, history, sock

  local function screen()
    return sh(("tmux -L %s capture-pane -p"):format(sock))
  end
  local function wait_for(text, timeout_s)
    local t0 = clock.now_ns()
    local s
    repeat
      s = screen()
      if s:find(text, 1, true) then return s end
      sh("sleep 0.05")
    until (clock.now_ns() - t0) / 1e9 > (timeout_s or 60)
    error(("timed out waiting for %q; screen:\n%s\nsbxd log:\n%s"):format(text, s, srv:log()), 2)
  end
  local function keys(...)
    for _, k in ipairs({ ... }) do
      if k:match("^<.+>$") then
        sh(("tmux -L %s send-keys %s"):format(sock, k:sub(2, -2)))
      else
        sh(("tmux -L %s send-keys -l %s"):format(sock, H.q(k)))
      end
    end
  end
  local function sessions_on_server()
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth())
    assert.equal(200, status, body)
    local n = 0
    for _ in body:gmatch('"id":"%x+"') do n = n + 1 end
    return n
  end

  setup(function()
    srv = assert(SH.start {})
    tokfile = srv.dir .. "/client-token"
    local f = assert(io.open(tokfile, "w"))
    f:write(srv.token.alice, "\n")
    f:close()
    history = os.tmpname()
    sock = ("sbx-repl-remote-%d-%d"):format(os.time(), math.random(1e6))
  end)
  teardown(function()
    if sock then sh(("tmux -L %s kill-server"):format(sock)) end
    if history then os.remove(history) end
    if srv then srv:cleanup() end
  end)

  it("runs !cmd on the sbxd, output on screen, and closes the remote session at Ctrl-D", function()
    assert.equal(0, sessions_on_server())
    sh(("tmux -L %s new-session -d -x 150 -y 45 %s"):format(sock,
      H.q(("cd %s && SBXLUA_HISTORY=%s %s --remote %s --token-file %s; echo REPL-ENDED rc=$?; sleep 30"):format(
        H.q(H.ROOT), H.q(history), H.q(H.SBXLUA), H.q(srv.url), H.q(tokfile)))))
    wait_for("sbx>")
    keys("!echo hi", "<Enter>")
    wait_for("\nhi\n")
    -- the session lives on the server, not on this machine's REPL process
    assert.equal(1, sessions_on_server())
    keys(":session", "<Enter>")
    wait_for(srv.url)
    keys("!echo err-line >&2; exit 3", "<Enter>")
    wait_for("[exit 3]")
    assert.matches("err%-line", screen())
    -- Interactive through sbxd (issue 21): a pty on the server's sandbox.
    keys("!python3 -q", "<Enter>")
    wait_for(">>>")
    keys("print(6 * 7)", "<Enter>")
    wait_for("\n42\n")
    keys("<C-d>")
    wait_for(">>>\nsbx>")
    keys("!bash --norc", "<Enter>")
    keys("PS1='in-bash$ '", "<Enter>")
    wait_for("in-bash$")
    keys("stty size; sh -c 'echo star''ted; exec sleep 300'", "<Enter>")
    wait_for("45 150")
    wait_for("started\n")
    keys("<C-c>")
    keys("echo rc=$?", "<Enter>")
    wait_for("rc=130")
    keys("exit", "<Enter>")
    wait_for("exit\nsbx>")
    keys("<C-d>")
    wait_for("REPL-ENDED rc=0")
    assert.equal(0, sessions_on_server())
    -- the sbxd saw the runs
    assert.matches("event=run_start", srv:log())
  end)

  it("refuses --remote without --token-file (usage error, exit 2)", function()
    local out = sh(("%s --remote %s </dev/null 2>&1; echo rc=$?"):format(H.q(H.SBXLUA), H.q(srv.url)))
    assert.matches("needs %-%-token%-file", out)
    assert.matches("rc=2", out)
  end)
end)

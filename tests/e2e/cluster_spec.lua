-- cluster_spec: three sbxd nodes behind haproxy, the stand-in for a
-- Kubernetes Service (issue 19), driven with the Lua client.
--
-- Each node advertises its own URL (sbxd --advertise-url), so session ids
-- name their node.  haproxy balances TCP connections round robin, as
-- kube-proxy does for a ClusterIP Service.  Checked: sessions created
-- through the balancer spread over the nodes; runs, file transfers and
-- reference-mode attaches (in this process and in another one) reach the
-- owning node, directly or after one 421; killing a node fails only its
-- sessions, naming the node; a SIGTERM drain lets a running command end.
--
-- Runs inside a network namespace of its own (tests/e2e/run.sh), so the
-- fixed ports below are free and nothing else on the machine sees them.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "../spec/helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local sbx = T.sbx
local errors = T.errors
local node = require "sbx.remote.node"

local LB_PORT, NODE_PORTS = 7440, { 7441, 7442, 7443 }
local runnable = H.available() and T.has_core() and H.have("haproxy") and H.have("curl")
  and os.getenv("SBX_E2E_NETNS") == "1"
local describe_e2e = runnable and describe
  or function(name) pending(name .. " (needs sbxd, haproxy, curl; run it with tests/e2e/run.sh)") end

local TOKENS = { alice = "tok-alice-e2e-0123456789abcdef" }

local function raises(kind, f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected " .. kind)
  assert.is_true(errors.is(e, kind), "expected " .. kind .. ", got " .. tostring(e))
  return e
end

describe_e2e("three sbxd nodes behind a balancer", function()
  local nodes, lb_dir, lb_url = {}, nil, "http://127.0.0.1:" .. LB_PORT
  local sessions = {}

  setup(function()
    for i, port in ipairs(NODE_PORTS) do
      local url = "http://127.0.0.1:" .. port
      nodes[i] = assert(H.start { tokens = TOKENS, listen = "127.0.0.1:" .. port,
        args = { "--advertise-url", url, "--max-sessions", "32", "--drain-grace-ms", "60000" } })
      nodes[i].advertised = url
    end
    lb_dir = H.sh("mktemp -d /tmp/sbx-e2e-lb.XXXXXX"):gsub("%s+$", "")
    local cfg = { "global", "  maxconn 1000", "defaults", "  mode tcp",
      "  timeout connect 5s", "  timeout client 300s", "  timeout server 300s",
      "frontend sbx", "  bind 127.0.0.1:" .. LB_PORT, "  default_backend nodes",
      "backend nodes", "  balance roundrobin" }
    for i, port in ipairs(NODE_PORTS) do
      cfg[#cfg + 1] = ("  server n%d 127.0.0.1:%d check inter 500ms"):format(i, port)
    end
    local f = assert(io.open(lb_dir .. "/haproxy.cfg", "w"))
    f:write(table.concat(cfg, "\n"), "\n")
    f:close()
    local out = H.sh(("haproxy -D -p %s/pid -f %s/haproxy.cfg 2>&1 && echo started"):format(lb_dir, lb_dir))
    assert(out:match("started\n$"), "haproxy did not start: " .. out)
    assert(T.wait_for(function()
      return H.sh("curl -sf --http2-prior-knowledge " .. lb_url .. "/healthz"):match("^ok") ~= nil
    end, 30), "haproxy does not answer")
  end)

  teardown(function()
    for _, s in ipairs(sessions) do pcall(s.close, s) end
    if lb_dir then
      os.execute(("kill $(cat %s/pid) 2>/dev/null; rm -rf %s"):format(lb_dir, H.q(lb_dir)))
    end
    for _, n in ipairs(nodes) do n:cleanup() end
  end)

  local function node_of(s)
    local _, url = node.split(s.id)
    return url
  end

  it("spreads 30 sessions created through the balancer over the nodes", function()
    local per = {}
    for i = 1, 30 do
      local s = sbx.remote.session { endpoint = lb_url, token = TOKENS.alice, backend = "userns" }
      sessions[i] = s
      local url = node_of(s)
      assert.is_string(url, "the id names its node: " .. s.id)
      assert.equal(url, s.endpoint) -- the session talks to its node, not the balancer
      per[url] = (per[url] or 0) + 1
    end
    for _, n in ipairs(nodes) do
      assert.is_true((per[n.advertised] or 0) >= 1, "no session on " .. n.advertised)
      -- Each node lists exactly the sessions whose id names it.
      local body, status = n:curl("/v1/sessions", "-H", n:auth("alice"))
      assert.equal(200, status)
      local listed = select(2, body:gsub('"id":"', ""))
      assert.equal(per[n.advertised], listed)
    end
  end)

  it("runs and moves files on the owning node", function()
    for i, s in ipairs(sessions) do
      local r = s:exec("echo run-" .. i)
      assert.equal("run-" .. i .. "\n", r.stdout)
      s:put_bytes("f.txt", "file-" .. i)
      assert.equal("file-" .. i, s:get_bytes("f.txt"))
    end
  end)

  it("answers 421 with the owner's endpoint on any other node", function()
    local s = sessions[1]
    for _, n in ipairs(nodes) do
      if n.advertised ~= node_of(s) then
        local body, status = n:curl("/v1/sessions/" .. s.id, "-H", n:auth("alice"), "-D", "-")
        assert.equal(421, status)
        assert.matches("sbx%-session%-endpoint: " .. node_of(s):gsub("%p", "%%%0"), body)
        assert.equal(node_of(s), H.json_field(body, "endpoint"))
      end
    end
  end)

  it("attaches by handle through the balancer or a wrong node (one 421), here and in another process", function()
    for i = 1, 6 do
      local s = sessions[i]
      local h = s:handle()
      -- A holder that knows only the balancer, or a node that is not the owner.
      local wrong
      for _, n in ipairs(nodes) do if n.advertised ~= node_of(s) then wrong = n end end
      for _, ep in ipairs { lb_url, wrong.advertised } do
        local h2 = { kind = h.kind, id = h.id, name = h.name, token = h.token, endpoint = ep }
        local ref = sbx.remote.attach(h2)
        assert.equal(node_of(s), ref.endpoint)
        assert.equal("file-" .. i, ref:get_bytes("f.txt"))
        assert.equal("ref-" .. i .. "\n", ref:exec("echo ref-" .. i).stdout)
        ref:close()
      end
      -- The wrong node was asked, and answered 421 (then the owner was).
      assert.matches('path="/v1/sessions/' .. s.id:gsub("%p", "%%%0") .. '" status=421', wrong:log())
    end
    -- Another process with the handle, given the balancer's URL.
    local s = sessions[2]
    local h = s:handle()
    local script = ([[
      local sbx = require "sbx"
      local ref = sbx.remote.attach { kind = "sbx.remote", id = %q, name = %q, token = %q, endpoint = %q }
      io.write(ref.endpoint, " ", ref:exec("cat f.txt").stdout)
      ref:close()
    ]]):format(h.id, h.name, h.token, lb_url)
    local out = H.sh(("%s/sbxlua -e %s 2>&1"):format(H.BIN, H.q(script)))
    assert.equal(node_of(s) .. " file-2", out)
  end)

  it("sbxlua --remote through the balancer: its session is on a node, and talks to it", function()
    if not H.have("tmux") then return pending("needs tmux") end
    local sock = "sbx-e2e-repl-" .. H.sh("echo $$"):gsub("%s", "")
    local tokfile = lb_dir .. "/client-token"
    local f = assert(io.open(tokfile, "w"))
    f:write(TOKENS.alice, "\n")
    f:close()
    local function screen() return (H.sh(("tmux -L %s capture-pane -p"):format(sock))) end
    local function wait_screen(pat)
      assert(T.wait_for(function() return screen():match(pat) ~= nil end, 60), screen())
      return screen():match(pat)
    end
    finally(function() H.sh(("tmux -L %s kill-server 2>/dev/null"):format(sock)) end)
    H.sh(("tmux -L %s new-session -d -x 200 -y 40 %s"):format(sock, H.q(("SBXLUA_HISTORY= %s/sbxlua "
      .. "--remote %s --token-file %s; sleep 30"):format(H.BIN, lb_url, tokfile))))
    wait_screen("sbx>")
    H.sh(("tmux -L %s send-keys -l %s && tmux -L %s send-keys Enter"):format(sock, H.q("!echo hi-repl"), sock))
    wait_screen("\nhi%-repl\n")
    H.sh(("tmux -L %s send-keys -l :session && tmux -L %s send-keys Enter"):format(sock, sock))
    local ep = wait_screen("endpoint[^\n]-(http://127%.0%.0%.1:744[123])")
    -- The run went to that node.
    for _, n in ipairs(nodes) do
      if n.advertised == ep then assert.matches("event=run_start", n:log()) end
    end
  end)

  it("a killed node fails only its own sessions, naming the node", function()
    local victim = nodes[3]
    victim:stop("KILL")
    local failed, worked = 0, 0
    for _, s in ipairs(sessions) do
      if node_of(s) == victim.advertised then
        local e = raises("SandboxExecutionError", s.exec, s, "echo x")
        assert.matches("unreachable", e.message)
        assert.matches(victim.advertised, e.message, 1, true)
        failed = failed + 1
      else
        assert.equal("alive\n", s:exec("echo alive").stdout)
        worked = worked + 1
      end
    end
    assert.is_true(failed >= 1 and worked >= 2, ("failed %d, worked %d"):format(failed, worked))
    -- The balancer places new sessions on the nodes left (its check
    -- takes the dead one out).
    assert(T.wait_for(function()
      local ok, s = pcall(sbx.remote.session, { endpoint = lb_url, token = TOKENS.alice, backend = "userns" })
      if not ok then return false end
      local alive = node_of(s) ~= victim.advertised
      s:close()
      return alive
    end, 30))
  end)

  it("lets a running command finish when its node drains (SIGTERM)", function()
    local s
    for _, x in ipairs(sessions) do if node_of(x) == nodes[1].advertised then s = x break end end
    assert.is_table(s)
    local p = s:run("echo started; sleep 4; echo finished", { timeout_s = 120 })
    local it = p:lines()
    assert.equal("started", it())
    os.execute(("kill -TERM %d"):format(nodes[1].pid))
    -- The drain began while the run went on (sbxd logs the runs it waits
    -- for), so what follows is the drain's doing, not a run already over.
    assert(T.wait_for(function() return nodes[1]:log():match("event=drain signal=15 runs=1") ~= nil end, 30),
      nodes[1]:log())
    assert.equal("finished", it())
    assert.equal(0, p:wait())
    assert.equal("", p.termination_reason)
    assert.equal(0, (nodes[1]:stop("TERM")))
  end)
end)

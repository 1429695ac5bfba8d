-- server_loop_spec: sbxd's loop never waits (issue 14, item 4).  While one
-- request waits, for a policy hook stuck until its deadline or for a
-- session whose sandbox is still setting up, /healthz and another
-- tenant's run are answered first (order, not milliseconds); the stuck
-- hook's request is then denied (fail closed); a client that leaves while
-- its session sets up gets that session closed.  And hooks see
-- ctx.origin == "sbxd" and ctx.tenant for remote calls (issue 16).
--
-- The slow open is made deterministic with SBX_TEST_HOLD_OPEN_FIFO: the
-- sandbox's setup waits until the test opens that FIFO for writing (while
-- the path does not exist, setups go on at once); open mode's pasta with
-- SBX_TEST_PASTA (a fake pasta that waits, or never becomes ready).
-- These are about cold opens: sbxd runs with --spare-sessions 0 (a spare
-- would skip the held setup; a refill would wait at the hold too).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local runnable = H.available() and T.has_core() and H.have("curl")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core and curl)") end

local JSON = "content-type: application/json"

local function write(path, s)
  local f = assert(io.open(path, "w"))
  f:write(s)
  f:close()
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- Start curl in the background; returns a handle whose done() says whether
-- it has answered, and result() its body and status once it has.
local function background(srv, path, ...)
  local out = os.tmpname()
  local args = { "curl", "-s", "--http2-prior-knowledge", "-w", "\\n%{http_code}" }
  for _, a in ipairs { ... } do args[#args + 1] = a end
  args[#args + 1] = srv.url .. path
  for i, a in ipairs(args) do args[i] = H.q(a) end
  os.execute(("(%s > %s 2>&1; touch %s.done) &"):format(table.concat(args, " "), out, out))
  local h = {}
  function h.done() return read(out .. ".done") ~= nil end
  function h.wait(limit_s)
    for _ = 1, (limit_s or 30) * 10 do
      if h.done() then break end
      os.execute("sleep 0.1")
    end
    return h.done()
  end
  function h.result()
    local s = read(out) or ""
    local body, status = s:match("^(.*)\n(%d%d%d)$")
    return body or s, tonumber(status)
  end
  function h.cleanup() os.remove(out) os.remove(out .. ".done") end
  return h
end

-- Wait (bounded) until cond() holds; returns whether it did.
local function eventually(cond, limit_s)
  for _ = 1, (limit_s or 15) * 10 do
    if cond() then return true end
    os.execute("sleep 0.1")
  end
  return cond()
end

local function open_session(srv, tenant)
  local body, status = srv:curl("/v1/sessions", "-H", srv:auth(tenant), "-H", JSON, "-d", "{}")
  assert.equal(201, status, body)
  return H.json_field(body, "id")
end

local function run_true(srv, tenant, sid)
  return srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(tenant), "-H", JSON,
    "-d", '{"cmd":["/bin/true"]}')
end

describe_srv("sbxd while a policy hook is stuck until its deadline", function()
  local srv, policy_path
  setup(function()
    policy_path = os.tmpname()
    -- Tenant "slow"'s session opens spin in C (string.find over 200 KB), so
    -- the instruction budget is far away and the deadline stops them.
    write(policy_path, [[
return {
  name = "loop-spec",
  limits = { hook_ms = 1500, hook_instructions = 50000000 },
  on_session_open = function(req, ctx)
    if ctx.tenant == "slow" then
      log("stuck hook starts")
      local s = ("x"):rep(200000)
      while true do s:find("y", 1, true) end
    end
    return true
  end,
}
]])
    srv = assert(H.start {
      tokens = { slow = "tok-slow-loop-0123456789abcdef", fast = "tok-fast-loop-0123456789abcdef" },
      args = { "--policy", policy_path },
    })
  end)
  teardown(function()
    if srv then srv:cleanup() end
    os.remove(policy_path)
  end)

  it("answers /healthz and another tenant's run first, then denies the stuck request", function()
    local sid = open_session(srv, "fast")
    local slow = background(srv, "/v1/sessions", "-H", srv:auth("slow"), "-H", JSON, "-d", "{}")
    finally(slow.cleanup)
    assert.is_true(eventually(function() return srv:log():find("stuck hook starts", 1, true) ~= nil end),
      srv:log())
    local hbody, hstatus = srv:curl("/healthz")
    assert.equal(200, hstatus, hbody)
    local rbody, rstatus = run_true(srv, "fast", sid)
    assert.equal(200, rstatus, rbody)
    assert.is_truthy(rbody:find('"exit_code":0', 1, true) or rbody:find('"returncode":0', 1, true), rbody)
    -- Both answered while the hook still ran.
    assert.is_false(slow.done(), "the stuck hook's request answered before the others")
    assert.is_true(slow.wait(30))
    local body, status = slow.result()
    assert.equal(403, status, body)
    assert.is_truthy(body:find("deadline", 1, true), body)
  end)
end)

-- Children of pid whose current system call is openat (a setup held on
-- the FIFO): the zygotes waiting for the test.
local function held_children(pid)
  local out = {}
  for task in (H.sh("ls /proc/" .. pid .. "/task")):gmatch("%d+") do
    for child in (read(("/proc/%d/task/%s/children"):format(pid, task)) or ""):gmatch("%d+") do
      local sc = read("/proc/" .. child .. "/syscall") or ""
      if sc:match("^257 ") then out[#out + 1] = child end
    end
  end
  return out
end

describe_srv("sbxd while a session's sandbox sets up", function()
  local srv, dir, fifo
  setup(function()
    dir = H.sh("mktemp -d /tmp/sbx-loop-spec.XXXXXX"):gsub("%s+$", "")
    fifo = dir .. "/hold"
    assert(os.execute(("chmod 0755 %s"):format(H.q(dir))))
    srv = assert(H.start {
      tokens = { alice = "tok-alice-loop-0123456789abcdef", bob = "tok-bob-loop-0123456789abcdef" },
      args = { "--spare-sessions", "0" },
      env = { SBX_TEST_HOLD_OPEN_FIFO = fifo },
    })
  end)
  teardown(function()
    if srv then srv:cleanup() end
    os.execute("rm -rf " .. H.q(dir))
  end)

  -- From now on, setups wait at the FIFO.
  local function hold() os.execute(("[ -p %s ] || mkfifo -m 0666 %s"):format(H.q(fifo), H.q(fifo))) end
  -- Let the held setup go on (opening the FIFO for writing wakes its reader).
  local function release() assert(os.execute("echo > " .. H.q(fifo))) end

  it("answers /healthz and another tenant's run before the held open", function()
    local sid = open_session(srv, "bob")
    hold()
    local alice = background(srv, "/v1/sessions", "-H", srv:auth("alice"), "-H", JSON, "-d", "{}")
    finally(alice.cleanup)
    assert.is_true(eventually(function() return #held_children(srv.pid) == 1 end),
      "alice's sandbox never reached the hold")
    local hbody, hstatus = srv:curl("/healthz")
    assert.equal(200, hstatus, hbody)
    local rbody, rstatus = run_true(srv, "bob", sid)
    assert.equal(200, rstatus, rbody)
    assert.is_false(alice.done(), "the held open answered before the others")
    release()
    assert.is_true(alice.wait(30))
    local body, status = alice.result()
    assert.equal(201, status, body)
  end)

  it("closes a session still setting up when its client leaves", function()
    hold()
    local before = srv:curl("/v1/sessions", "-H", srv:auth("alice"))
    local n_before = select(2, before:gsub('"id":', ""))
    local alice = background(srv, "/v1/sessions", "--max-time", "2", "-H", srv:auth("alice"), "-H", JSON,
      "-d", "{}")
    finally(alice.cleanup)
    -- Control: the held setup is there while the client waits.
    assert.is_true(eventually(function() return #held_children(srv.pid) == 1 end),
      "the sandbox never reached the hold")
    assert.is_true(alice.wait(30))
    -- The client gave up (curl's --max-time): its sandbox goes, and no
    -- session was added.
    assert.is_true(eventually(function() return #held_children(srv.pid) == 0 end),
      "the abandoned sandbox is still there")
    local after = srv:curl("/v1/sessions", "-H", srv:auth("alice"))
    assert.equal(n_before, select(2, after:gsub('"id":', "")), after)
  end)
end)

-- network_mode "open": nft and pasta's start run on from the loop, which
-- serves others while pasta comes up.  SBX_TEST_PASTA points the core at a
-- fake pasta: it says it started (a marker file), then waits at a FIFO
-- before it becomes Debian's pasta, or never becomes ready at all.
local have_pasta = H.have("pasta") or io.open("/usr/bin/pasta") ~= nil
local describe_open = (runnable and have_pasta) and describe
  or function(name) pending(name .. " (needs pasta)") end

describe_open("sbxd while an open-mode session's pasta comes up", function()
  local srv, dir, fifo, started, pasta
  local OPEN = '{"backend":"userns","network_mode":"open"}'
  setup(function()
    dir = H.sh("mktemp -d /tmp/sbx-loop-spec.XXXXXX"):gsub("%s+$", "")
    fifo, started, pasta = dir .. "/hold", dir .. "/started", dir .. "/pasta"
    assert(os.execute(("chmod 0777 %s && mkfifo -m 0666 %s"):format(H.q(dir), H.q(fifo))))
    -- "mode" chooses: hold (wait at the FIFO, then the real pasta) or never.
    write(pasta, ([[#!/bin/sh
echo $$ > %s
if [ "$(cat %s/mode)" = never ]; then exec sleep 60; fi
read line < %s
exec /usr/bin/pasta "$@"
]]):format(H.q(started), H.q(dir), H.q(fifo)))
    assert(os.execute("chmod 0755 " .. H.q(pasta)))
    srv = assert(H.start {
      tokens = { alice = "tok-alice-loop-0123456789abcdef", bob = "tok-bob-loop-0123456789abcdef" },
      args = { "--spare-sessions", "0" },
      env = { SBX_TEST_PASTA = pasta },
    })
  end)
  teardown(function()
    if srv then srv:cleanup() end
    os.execute("rm -rf " .. H.q(dir))
  end)
  before_each(function() os.remove(started) end)

  -- alice's open-mode open, started once bob has a session; returns it
  -- when the fake pasta has started (so the open waits on pasta now).
  local function open_waiting_on_pasta(mode)
    write(dir .. "/mode", mode)
    local sid = open_session(srv, "bob")
    local alice = background(srv, "/v1/sessions", "-H", srv:auth("alice"), "-H", JSON, "-d", OPEN)
    assert.is_true(eventually(function() return read(started) ~= nil end, 30), "pasta never started")
    return alice, sid
  end

  it("answers /healthz and another tenant's run before the open waiting for pasta", function()
    local alice, sid = open_waiting_on_pasta("hold")
    finally(alice.cleanup)
    local hbody, hstatus = srv:curl("/healthz")
    assert.equal(200, hstatus, hbody)
    local rbody, rstatus = run_true(srv, "bob", sid)
    assert.equal(200, rstatus, rbody)
    assert.is_false(alice.done(), "the open answered before pasta was ready")
    assert(os.execute("echo go > " .. H.q(fifo)))
    assert.is_true(alice.wait(30))
    local body, status = alice.result()
    assert.equal(201, status, body)
    -- Control: the session really is connected (it can run in open mode).
    local aid = H.json_field(body, "id")
    local obody, ostatus = srv:curl("/v1/sessions/" .. aid .. "/runs", "-H", srv:auth("alice"), "-H", JSON,
      "-d", '{"cmd":["/bin/sh","-c","grep -c . /proc/net/route"]}')
    assert.equal(200, ostatus, obody)
    assert.is_truthy(obody:find('"exit_code":0', 1, true) or obody:find('"returncode":0', 1, true), obody)
  end)

  it("fails an open whose pasta never becomes ready, naming pasta, serving others meanwhile", function()
    local alice, sid = open_waiting_on_pasta("never")
    finally(alice.cleanup)
    local hbody, hstatus = srv:curl("/healthz")
    assert.equal(200, hstatus, hbody)
    local rbody, rstatus = run_true(srv, "bob", sid)
    assert.equal(200, rstatus, rbody)
    assert.is_false(alice.done(), "the open answered before pasta's deadline")
    assert.is_true(alice.wait(40))
    local body, status = alice.result()
    assert.equal(503, status, body)
    assert.is_truthy(body:find("BackendUnavailable", 1, true), body)
    assert.is_truthy(body:find("pasta did not configure the namespace in time", 1, true), body)
    -- The fake pasta was killed (and reaped) with the failed open.
    local pid = assert(tonumber((read(started) or ""):match("%d+")), "no pid from the fake pasta")
    assert.is_true(eventually(function() return read("/proc/" .. pid .. "/stat") == nil end),
      "the pasta that never became ready is still running")
  end)
end)

describe_srv("sbxd's per-tenant session limit while opens wait", function()
  local srv, dir, fifo
  setup(function()
    dir = H.sh("mktemp -d /tmp/sbx-loop-spec.XXXXXX"):gsub("%s+$", "")
    fifo = dir .. "/hold"
    assert(os.execute(("chmod 0755 %s && mkfifo -m 0666 %s"):format(H.q(dir), H.q(fifo))))
    srv = assert(H.start {
      args = { "--spare-sessions", "0", "--max-sessions", "1" }, env = { SBX_TEST_HOLD_OPEN_FIFO = fifo } })
  end)
  teardown(function()
    if srv then srv:cleanup() end
    os.execute("rm -rf " .. H.q(dir))
  end)

  it("counts an open that is still setting up", function()
    local first = background(srv, "/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    finally(first.cleanup)
    assert.is_true(eventually(function() return #held_children(srv.pid) == 1 end),
      "the first open never reached the hold")
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    assert.equal(429, status, body)
    assert(os.execute("echo > " .. H.q(fifo)))
    assert.is_true(first.wait(30))
    local fbody, fstatus = first.result()
    assert.equal(201, fstatus, fbody)
  end)
end)

describe_srv("policy hooks and ctx.origin over sbxd", function()
  local srv, policy_path
  local POLICY = [[
return {
  name = "remote-only",
  on_session_open = function(req, ctx)
    if ctx.origin ~= "sbxd" then return false, "remote sessions only, origin " .. tostring(ctx.origin) end
    if ctx.tenant ~= "alice" then return false, "alice only" end
    return true
  end,
}
]]
  setup(function()
    policy_path = os.tmpname()
    write(policy_path, POLICY)
    srv = assert(H.start { args = { "--policy", policy_path } })
  end)
  teardown(function()
    if srv then srv:cleanup() end
    os.remove(policy_path)
  end)

  it("admits a session opened through sbxd (origin sbxd, tenant alice)", function()
    open_session(srv, "alice")
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth("bob"), "-H", JSON, "-d", "{}")
    assert.equal(403, status, body)
    assert.is_truthy(body:find("alice only", 1, true), body)
  end)

  it("refuses the same policy on-device (origin local)", function()
    local sbx = require "sbx"
    local ok, err = pcall(sbx.session, { policy = policy_path })
    assert.is_false(ok)
    assert.equal("PolicyDenied", err.kind)
    assert.is_truthy(tostring(err.message):find("origin local", 1, true), tostring(err.message))
  end)
end)

-- The allowlist proxy's verdicts come from the policy worker when the
-- policy has on_connect: a stuck on_connect holds only its own connection.
describe_srv("sbxd's allowlist proxy with an on_connect hook", function()
  local srv, policy_path, sid
  setup(function()
    local f = assert(io.open(T.ROOT .. "/policies/default.lua"))
    local default = f:read("*a")
    f:close()
    local policy = default:gsub('\n  name = "default",\n', [[

  name = "loop-proxy",
  limits = { hook_ms = 1500, hook_instructions = 50000000 },
]], 1):gsub("\n  on_connect = function%(host, port, addrs, ctx%)\n    return true\n  end,", [[

  on_connect = function(host, port, addrs, ctx)
    if host == "denied.test" then return false, "on_connect says no to " .. tostring(ctx.tenant) end
    if host == "slow.test" then
      log("on_connect stuck starts")
      local s = ("x"):rep(200000)
      while true do s:find("y", 1, true) end
    end
    return true
  end,]], 1)
    assert(policy:find("on_connect stuck starts", 1, true) and policy:find("loop-proxy", 1, true),
      "policies/default.lua changed shape")
    policy_path = os.tmpname()
    write(policy_path, policy)
    srv = assert(H.start { args = { "--policy", policy_path } })
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d",
      '{"network_mode":"allowlist","network_allowlist":["allowed.test","denied.test","slow.test"]}')
    assert.equal(201, status, body)
    sid = H.json_field(body, "id")
  end)
  teardown(function()
    if srv then srv:cleanup() end
    os.remove(policy_path)
  end)

  local function fetch_cmd(host)
    return ('{"cmd":"curl -s -m 20 -x http://127.0.0.1:3128 -w \\" status=%%{http_code}\\" http://%s/"}'):format(host)
  end

  it("refuses with the hook's reason, and lets through what it allows", function()
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", fetch_cmd("denied.test"))
    assert.equal(200, status, body)
    assert.is_truthy(body:find("on_connect says no to alice", 1, true), body)
    assert.is_truthy(body:find("status=403", 1, true), body)
    -- Control: an allowed name gets past the policy (then fails to resolve:
    -- there is no such name), so the refusal above was the hook's.
    body = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", fetch_cmd("allowed.test"))
    assert.is_truthy(body:find("cannot resolve allowed.test", 1, true), body)
  end)

  it("answers /healthz while on_connect runs to its deadline, then refuses", function()
    local slow = background(srv, "/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", fetch_cmd("slow.test"))
    finally(slow.cleanup)
    assert.is_true(eventually(function() return srv:log():find("on_connect stuck starts", 1, true) ~= nil end),
      srv:log())
    local hbody, hstatus = srv:curl("/healthz")
    assert.equal(200, hstatus, hbody)
    assert.is_false(slow.done(), "the stuck connection's run ended before /healthz")
    assert.is_true(slow.wait(30))
    local body = slow.result()
    assert.is_truthy(body:find("status=403", 1, true), body)
    assert.is_truthy(body:find("deadline", 1, true), body)
  end)
end)

-- runallow_spec.lua: a run's own allow-list (s:run(cmd, { network_allowlist =
-- ... })) without a fake internet: its init is in a network namespace made
-- for it (never the session's shared one, never reused by another run), the
-- core refuses own_netns where it cannot hold, and the proxy child stops
-- serving a run's listener once the run ended.  What such a run can reach
-- is network_spec.lua's "per-run allow-list" (it needs the fake internet).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")
local sbx = require "sbx"

local NETNS = "readlink /proc/self/ns/net"
local OWN = { network_allowlist = { "pypi.org" } }

-- Inside a run: the inode of the proxy listener in its namespace.
local LISTENER_INODE = "awk '$4 == \"0A\" { print $10 }' /proc/net/tcp"

-- Whether process pid holds the socket of that inode.
local function holds(pid, inode)
  return H.sh("ls -l /proc/" .. pid .. "/fd"):find("socket:[" .. inode .. "]", 1, true) ~= nil
end

-- f() turns true within 5 s (the proxy takes and lets go asynchronously).
local function eventually(f)
  for _ = 1, 100 do
    if f() then return true end
    H.sh("sleep 0.05")
  end
  return false
end

describe("a run's own allow-list", function()
  local s
  before_each(function()
    s = sbx.session{ backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org", "x.test" } }
  end)
  after_each(function() if s then s:close() end end)

  it("runs in a namespace of its own, a new one each time, apart from the session's", function()
    local shared1 = s:exec(NETNS, { network_mode = "allowlist" }).stdout
    local shared2 = s:exec(NETNS, { network_mode = "allowlist" }).stdout
    assert.are.equal(shared1, shared2) -- the control: plain runs share one
    local seen = { [shared1] = true }
    -- Each namespace is held (H.hold_ns) once seen, so the kernel cannot
    -- give its number to a later one (seen under load); a repeat is then
    -- a namespace that really served two runs.
    local held = {}
    finally(function() for _, f in ipairs(held) do f:close() end end)
    for _ = 1, 4 do
      local p = s:run(NETNS .. "; awk '$4 == \"0A\"' /proc/net/tcp | wc -l; exec sleep 60", OWN)
      local out = ""
      while not out:match("\n%d+\n") do
        local d = p:read("stdout", 30)
        assert.is_string(d, "the run ended early: " .. out)
        out = out .. d
      end
      local ns, listeners = out:match("^(net:%[%d+%])\n(%d+)")
      assert.is_string(ns, out)
      assert.is_nil(seen[ns], "a namespace served two runs: " .. ns)
      seen[ns] = true
      assert.are.equal("1", listeners, "its own proxy listener, and nothing else listening")
      held[#held + 1] = H.hold_ns("net", ns)
      p:kill()
      p:wait()
    end
  end)

  it("stops serving a run's listener once the run ended (the proxy child holds it until then)", function()
    local pid = tostring(s._st.proxy):match("%((%d+)%)")
    local p = s:run(LISTENER_INODE .. "; sleep 30", OWN)
    local inode = p:read("stdout", 30):match("%d+")
    assert.is_string(inode, "no listener inode from inside the run")
    -- The control: the probe sees the live run's listener in the child.
    assert.is_true(eventually(function() return holds(pid, inode) end), "the child never held " .. inode)
    p:kill()
    p:wait()
    assert.is_true(eventually(function() return not holds(pid, inode) end),
      "the child still holds the listener of a run that ended")
    -- And none of many runs' listeners stays.
    local function nfds() return select(2, H.sh("ls /proc/" .. pid .. "/fd"):gsub("%d+", "")) end
    local before = nfds()
    for _ = 1, 10 do s:exec("true", OWN) end
    assert.is_true(eventually(function() return nfds() <= before end))
  end)

  it("is refused by the core where it cannot hold", function()
    local cs = s._st.core
    local r, kind, msg = cs:run { argv = { "true" }, network_mode = "blocked", own_netns = true }
    assert.is_nil(r)
    assert.are.equal("InvalidArgument", kind)
    assert.matches("own_netns", msg, 1, true)
    local b = sbx.session{ backend = "userns" }
    r, kind, msg = b._st.core:run { argv = { "true" }, network_mode = "allowlist", own_netns = true }
    b:close()
    assert.is_nil(r)
    assert.are.equal("InvalidArgument", kind, tostring(msg))
    -- ... and by the options on a blocked session (the mode it implies is wider).
    local b2 = sbx.session{ backend = "userns" }
    local ok, e = pcall(b2.exec, b2, "true", OWN)
    b2:close()
    assert.is_false(ok)
    assert.are.equal("PolicyDenied", e.kind)
  end)

  it("through sbxd too, whose proxy lets the run's listener go when the run ends", function()
    local SH = dofile(H.ROOT .. "/tests/server/harness.lua")
    local srv = SH.start{ tokens = { alice = "tok-alice-0123456789abcdefgh" } }
    local ok, err = pcall(function()
      local r = sbx.remote.session{ endpoint = srv.url, token = srv.token.alice, backend = "userns",
        network_mode = "allowlist", network_allowlist = { "pypi.org" } }
      local shared = r:exec(NETNS, { network_mode = "allowlist" }).stdout
      local own = r:exec(NETNS, OWN)
      assert.matches("^net:%[%d+%]", own.stdout, nil, own.stderr)
      assert.are_not.equal(shared, own.stdout)
      local p = r:run(LISTENER_INODE .. "; sleep 30", OWN)
      local inode = p:read("stdout", 30):match("%d+")
      assert.is_string(inode, "no listener inode from inside the run")
      assert.is_true(eventually(function() return holds(srv.pid, inode) end), "sbxd never held " .. inode)
      p:kill()
      p:wait()
      assert.is_true(eventually(function() return not holds(srv.pid, inode) end),
        "sbxd still holds the listener of a run that ended")
      local ok2, e = pcall(r.exec, r, "true", { network_allowlist = { "evil.test" } })
      assert.is_false(ok2)
      assert.are.equal("PolicyDenied", e.kind)
      r:close()
    end)
    srv:stop()
    assert(ok, err)
  end)
end)

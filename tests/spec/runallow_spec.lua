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

-- Open fds of the session's proxy child (on-device: sbx-proxy).
local function proxy_fds(s)
  local pid = tostring(s._st.proxy):match("%((%d+)%)")
  assert(pid, "no proxy child pid in " .. tostring(s._st.proxy))
  local n = 0
  for _ in H.sh("ls /proc/" .. pid .. "/fd"):gmatch("%d+") do n = n + 1 end
  return n
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
    for _ = 1, 4 do
      local r = s:exec(NETNS .. "; awk '$4 == \"0A\"' /proc/net/tcp | wc -l", OWN)
      local ns, listeners = r.stdout:match("^(net:%[%d+%])\n(%d+)")
      assert.is_string(ns, r.stdout .. r.stderr)
      assert.is_nil(seen[ns], "a namespace served two runs: " .. ns)
      seen[ns] = true
      assert.are.equal("1", listeners, "its own proxy listener, and nothing else listening")
    end
  end)

  it("stops serving a run's listener once the run ended (the proxy child's fds)", function()
    local base = proxy_fds(s) -- before any: the child holds no run's listener
    -- The control: a live run's listener is held by the child.
    local p = s:run("sleep 30", OWN)
    local live
    for _ = 1, 100 do -- the child takes it asynchronously
      live = proxy_fds(s)
      if live > base then break end
      H.sh("sleep 0.05")
    end
    assert.is_true(live > base, ("%d fds while a run is live, %d before"):format(live, base))
    p:kill()
    p:wait()
    for _ = 1, 10 do s:exec("true", OWN) end
    local after
    for _ = 1, 100 do
      after = proxy_fds(s)
      if after <= base then break end
      H.sh("sleep 0.05")
    end
    assert.is_true(after <= base, ("%d fds after 11 runs ended, %d before any"):format(after, base))
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
end)

-- server_warm_spec: the warm pool. A session's zygote keeps warm_runs runs
-- (an idle sbx-init each) offered ahead of time: on-device through
-- sbx.session{warm_runs = N}, in sbxd through --warm-runs N (never over the
-- API).  Counted from /proc: the sbx-init children of the session's zygote.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local function raises(kind, f, ...)
  local errors = require "sbx.errors"
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected " .. kind)
  assert.is_true(errors.is(e, kind), "expected " .. kind .. ", got " .. tostring(e))
  return e
end

-- Children of pid whose comm is name.
local function children(pid, name)
  local out = H.sh(("ps -o pid=,comm= --ppid %d"):format(pid))
  local t = {}
  for p, c in out:gmatch("(%d+)%s+(%S+)") do if c == name then t[#t + 1] = tonumber(p) end end
  return t
end

-- The zygotes under parent now (to leave out sessions other specs left open).
local function zygotes(parent)
  local t = {}
  for _, z in ipairs(children(parent, "sbx-zygote")) do t[z] = true end
  return t
end

-- Wait until the idle inits under the new zygotes of parent number n.
local function idle_inits(parent, n, old)
  local got
  old = old or {}
  for _ = 1, 100 do
    got = 0
    for _, z in ipairs(children(parent, "sbx-zygote")) do
      if not old[z] then got = got + #children(z, "sbx-init") end
    end
    if got == n then return got end
    os.execute("sleep 0.05")
  end
  return got
end

local describe_core = T.has_core() and describe or function(name) pending(name .. " (needs sbx.core)") end

describe_core("warm runs", function()
  local sbx = require "sbx"
  local core = require "sbx.core"
  local me = tonumber(H.sh("echo $PPID"):match("%d+"))

  it("on-device: warm_runs = 4 keeps four runs ready, and 1 (the default) one", function()
    local old = zygotes(me)
    local s = sbx.session { warm_runs = 4 }
    assert.equal(4, idle_inits(me, 4, old))
    -- concurrent starts take them; the pool refills
    local ps = {}
    for i = 1, 6 do ps[i] = s:run({ "/bin/echo", "r" .. i }) end
    for i = 1, 6 do
      assert.equal("r" .. i .. "\n", (ps[i]:communicate()))
      assert.equal(0, ps[i].returncode)
    end
    -- The zygote's four again, and the six inits those runs gave back
    -- for the next ones (init reuse).
    assert.equal(10, idle_inits(me, 10, old))
    s:close()
    old = zygotes(me)
    local d = sbx.session {}
    assert.equal(1, idle_inits(me, 1, old))
    d:close()
  end)

  it("refuses warm_runs out of range or of the wrong type (InvalidArgument naming it)", function()
    for _, v in ipairs { 0, 65, 1.5, "4" } do
      local e = raises("InvalidArgument", sbx.session, { warm_runs = v })
      assert.equal("warm_runs", e.option)
    end
    local ok, err = pcall(core.session_open, { backend = "userns", warm_runs = 65 })
    assert.is_false(ok)
    assert.matches("warm_runs", tostring(err))
  end)

  local describe_srv = (H.available() and H.have("curl")) and describe
    or function(name) pending(name .. " (needs sbxd, curl)") end
  describe_srv("sbxd --warm-runs", function()
    it("gives each session that many warm runs; the API cannot set it", function()
      local srv = assert(H.start { args = { "--warm-runs", "3" } })
      finally(function() srv:cleanup() end)
      local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", "{}")
      assert.equal(201, status, body)
      assert.equal(3, idle_inits(srv.pid, 3))
      body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", '{"warm_runs":8}')
      assert.equal(400, status)
      assert.equal("warm_runs", H.json_field(body, "option"))
    end)

    it("refuses --warm-runs 0 and 65 at start", function()
      for _, v in ipairs { "0", "65" } do
        local srv, err = H.start { args = { "--warm-runs", v } }
        assert.is_nil(srv)
        assert.matches("warm%-runs", err)
      end
    end)
  end)
end)

-- session_start_spec: session open in two steps, the seam sbxd's loop
-- uses so it never waits for a sandbox to set up (sbx_session_start /
-- sbx_session_ready_fd / sbx_session_finish in sbx.h, core.session_start
-- and s:ready_fd() / s:finish() in Lua, and sbx.session's `wait` option).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx

if not T.has_core() then
  describe("session open in two steps", function()
    pending("needs sbx.core: run the specs with build/bin/sbxlua")
  end)
  return
end

local core = require "sbx.core"

-- The processes that are children of this one (zygotes, proxies).
local function children()
  local f = assert(io.open("/proc/self/stat"))
  local self = f:read("*l"):match("^(%d+)")
  f:close()
  local out = {}
  f = io.open(("/proc/self/task/%s/children"):format(self))
  for pid in (f and f:read("*a") or ""):gmatch("%d+") do out[#out + 1] = tonumber(pid) end
  if f then f:close() end
  return out
end

describe("sbx.session with a wait function (a host's event loop)", function()
  teardown(T.cleanup)

  it("waits for a turn, then for the ready fd, and opens a working session", function()
    local calls = {}
    local s = sbx.session { backend = "userns", wait = function(fd, deadline)
      calls[#calls + 1] = fd or "turn"
      assert.is_true(deadline > core.monotonic_ms())
      os.execute("sleep 0.02")
      return true
    end }
    finally(function() s:close() end)
    assert.equal("turn", calls[1])
    assert.is_true(#calls >= 2, "never waited for the ready fd")
    for i = 2, #calls do assert.equal("number", type(calls[i])) end
    assert.equal("hi\n", s:exec("echo hi").stdout)
  end)

  it("closes the half-open session when the wait gives up", function()
    local before = #children()
    local err = T.expect("SandboxExecutionError", function()
      sbx.session { backend = "userns", wait = function(fd)
        if fd == nil then return true end
        -- Control: the sandbox being set up is our child now.
        assert.is_true(#children() > before, "no sandbox process to abandon")
        return nil, "cancelled"
      end }
    end)
    assert.matches("abandoned: cancelled", err.message)
    assert.equal(before, #children())
  end)
end)

describe("core.session_start", function()
  it("gives a session that refuses runs until finished, then works", function()
    local cs = assert(core.session_start { backend = "userns", system_ro = { "/usr", "/bin", "/lib", "/lib64" } })
    finally(function() cs:close() end)
    local fd = cs:ready_fd()
    assert.equal("number", type(fd))
    local r, kind, msg = cs:run { argv = { "/bin/true" } }
    assert.is_nil(r)
    assert.equal("InvalidArgument", kind)
    assert.matches("still setting up", msg)
    local done, why
    for _ = 1, 500 do
      local d, _, w = cs:finish()
      done, why = d, w
      assert.is_not_nil(done, tostring(why))
      if done then break end
      os.execute("sleep 0.02")
    end
    assert.is_true(done)
    assert.is_nil(cs:ready_fd())
    assert.is_true(cs:finish()) -- idempotent once ready
    assert.is_truthy(cs:run { argv = { "/bin/true" } })
  end)
end)

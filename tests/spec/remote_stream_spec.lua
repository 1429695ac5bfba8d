-- remote_stream_spec: sbx.remote.stream (a remote run's event stream as a
-- Process's event source), driven by a fake connection so what arrives
-- and when is the test's to choose.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")

if not T.has_core() then
  describe("sbx.remote.stream", function() pending("needs sbx.core: run the specs with build/bin/sbxlua") end)
  return
end

local core = require "sbx.core"
local stream = require "sbx.remote.stream"
local msgpack = require "sbx.remote.msgpack"

-- A connection whose request is answered 200 at once; the test hands the
-- events over itself (deliver), and nothing else ever arrives.
local function fake_conn()
  local conn = {}
  function conn.start(_, _, _, _, o)
    conn.req = { status = 200, on_data = o.on_data }
    return conn.req
  end
  function conn.pump() end
  function conn.finish(_, req) req.done = true end
  function conn.wait() end
  function conn.cancel(_, req) req.done = true end
  function conn.deliver(ev) conn.req.on_data(msgpack.encode(ev), conn.req) end
  return conn
end

describe("sbx.remote.stream", function()
  it("counts the run's deadline from its first output, not from the request", function()
    -- A loaded server may start the run (and its timeout) seconds after
    -- the request; the client must not read on before the run's own
    -- timeout surely ended it.
    local SPAN, LATE = 7000, 300
    local conn = fake_conn()
    local given = core.monotonic_ms() + SPAN
    local src = assert(stream.start(conn, "POST", "/runs", "", { deadline_ms = given, backend = "userns" }))
    local requested = core.monotonic_ms()
    -- Control: until the run shows it runs, the deadline is the one given.
    assert.equal(given, src.deadline_ms)
    os.execute("sleep " .. LATE / 1000)
    assert.is_true(core.monotonic_ms() - requested >= LATE)
    conn.deliver { type = "stderr", data = "x" }
    assert.is_true(src.deadline_ms >= given + LATE,
      ("deadline moved by %d ms, the first output came %d ms late"):format(src.deadline_ms - given, LATE))
    -- Later output moves it no more.
    local moved = src.deadline_ms
    os.execute("sleep 0.05")
    conn.deliver { type = "stdout", data = "y" }
    assert.equal(moved, src.deadline_ms)
    assert.equal("stdout", (src:next(0, true, false)))
    src:close()
  end)
end)

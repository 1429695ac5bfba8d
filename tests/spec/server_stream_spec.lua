-- server_stream_spec: how sbxd reads a run's output while the client holds
-- the stream.  Output is read only when nothing is in flight to the client,
-- so what the run writes meanwhile waits in its pipe and goes out as one
-- event, not one event per write (issue 18: a writer just ahead of the
-- loop was read 8 KiB at a time, and the stream ran at 0.7 of the rate it
-- had when the pipe was read full).  tests/server/stream_pieces.py holds
-- the stream with a 64-byte window while the command writes 10 pieces, 10
-- ms apart; before this, each piece was its own event.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local PY = "/usr/bin/python3"
local have_h2 = H.sh(PY .. " -c 'import h2; print(1)' 2>/dev/null"):match("1") ~= nil
local runnable = H.available() and T.has_core() and H.have("curl") and have_h2
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl, python3-h2)") end

describe_srv("sbxd streaming a run's output to a client that holds it", function()
  local srv, sid
  setup(function()
    srv = assert(H.start {})
    local body = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json", "-d", "{}")
    sid = assert(H.json_field(body, "id"), body)
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  for _, fmt in ipairs { "msgpack", "ndjson" } do
    it("sends what the run wrote while a chunk was held as one event (" .. fmt .. ")", function()
      local port = assert(srv.url:match(":(%d+)$"))
      local out = H.sh(("%s %s/tests/server/stream_pieces.py %s %s %s %s 2>&1"):format(PY, T.ROOT, port,
        srv.token.alice, sid, fmt))
      local r = {}
      for k in ("status events x_events x_bytes"):gmatch("%S+") do
        r[k] = tonumber(out:match('"' .. k .. '": (%d+)'))
      end
      assert.are.equal(200, r.status, out)
      assert.is_truthy(out:find('"exit": true', 1, true), out)
      -- nothing lost, and the probe told the first event from the rest
      assert.are.equal(200, r.x_bytes, out)
      assert.are.equal(2, r.events, out)
      assert.are.equal(1, r.x_events, out)
    end)
  end
end)

-- server_direct_spec: on plain-text listeners h2o's output goes through
-- the guard to the client from sbxd's loop thread (src/server/front_direct.c),
-- and back through the socketpair and the front's thread whenever anything
-- of it is still queued there.  The probe (tests/server/direct_probe.py)
-- checks every byte of each run's output in order; /metrics says which
-- path carried how much.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local runnable = H.available() and T.has_core() and H.have("curl") and H.have_python_h2()
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl, python3-h2)") end

local function probe(srv, scenario, arg)
  return H.probe("direct_probe.py", srv.url, srv.token.alice, scenario, arg)
end

-- h2o's bytes to clients so far: sent from the loop thread, across the socketpair.
local function out_bytes(srv)
  local body = srv:curl("/metrics", "-H", srv:auth())
  local d = tonumber(body:match('sbxd_front_out_bytes_total{path="direct"} (%d+)'))
  local s = tonumber(body:match('sbxd_front_out_bytes_total{path="socketpair"} (%d+)'))
  assert(d and s, body)
  return d, s
end

local function with_server(opts, f)
  local srv = assert(H.start(opts))
  local ok, err = pcall(function()
    local body = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json", "-d", "{}")
    local sid = H.json_field(body, "id")
    assert(sid, body)
    f(srv, sid)
  end)
  local log = srv:log()
  srv:cleanup()
  assert(ok, tostring(err) .. "\nsbxd's log:\n" .. log)
end

describe_srv("h2o's output from the loop thread", function()
  it("goes direct on h2c from a connection's second response on, every byte in order", function()
    with_server({}, function(srv, sid)
      local d0, s0 = out_bytes(srv)
      local r = probe(srv, "runs", sid .. ":3:200000")
      local d1, s1 = out_bytes(srv)
      assert.equal("200 200 200", r.statuses, r.raw)
      assert.is_true(r.match, r.raw)
      -- the client asks for the next run only once it has the last one
      -- whole, so nothing of h2o's is queued by then: at least the last two
      -- runs' output (each 200,000 bytes and its framing) went direct
      assert.is_true(d1 - d0 >= 400000, ("direct %d, socketpair %d"):format(d1 - d0, s1 - s0))
    end)
  end)

  it("never goes direct on TLS: the front encrypts (control: the counters tell the paths apart)", function()
    with_server({ tls = true }, function(srv, sid)
      local d0, s0 = out_bytes(srv)
      local r = probe(srv, "runs", sid .. ":3:200000")
      local d1, s1 = out_bytes(srv)
      assert.equal("200 200 200", r.statuses, r.raw)
      assert.is_true(r.match, r.raw)
      assert.equal(0, d1 - d0)
      assert.is_true(s1 - s0 >= 600000, ("socketpair %d"):format(s1 - s0))
    end)
  end)

  it("backs up into the socketpair for a client that does not read, then goes direct again, in order", function()
    -- the idle timer starts once h2o's last frame is in the client's socket:
    -- a probe that takes its time reading (load) must still find the
    -- connection open for its second run
    with_server({ args = { "--conn-idle-timeout-s", "300" } }, function(srv, sid)
      -- 2 MB more than the client's socket can hold: its send buffer grows
      -- up to tcp_wmem's maximum whatever the receiver's window
      local f = assert(io.open("/proc/sys/net/ipv4/tcp_wmem"))
      local nbytes = tonumber(f:read("*l"):match("(%d+)%s*$")) + 2000000
      f:close()
      local d0, s0 = out_bytes(srv)
      local r = probe(srv, "order", sid .. ":" .. nbytes)
      local d1, s1 = out_bytes(srv)
      assert.equal(200, r.status, r.raw)
      assert.equal(nbytes, r.bytes, r.raw)
      assert.is_true(r.match, r.raw)
      assert.equal(200, r.status2, r.raw)
      assert.is_true(r.match2, r.raw)
      -- what the client's socket did not hold waited in the socketpair,
      -- h2o's writev blocked on it (backpressure, not memory)
      assert.is_true(s1 - s0 >= 1000000, ("direct %d, socketpair %d"):format(d1 - d0, s1 - s0))
      assert.is_true(d1 - d0 >= 1000, ("direct %d, socketpair %d"):format(d1 - d0, s1 - s0))
    end)
  end)

  it("starts the idle timer when a direct response ends the connection's last stream", function()
    with_server({ args = { "--conn-idle-timeout-s", "1" } }, function(srv, sid)
      local r = probe(srv, "idle", sid)
      assert.equal(200, r.status, r.raw)
      assert.equal(0, r.goaway, r.raw) -- NO_ERROR: the idle timeout's GOAWAY
      assert.is_truthy(r.closed_after_s and r.closed_after_s <= 5, r.raw)
      local m = srv:curl("/metrics", "-H", srv:auth())
      assert.equal("1", m:match('sbxd_h2_goaway_total{reason="idle_timeout"} (%d+)'), m)
    end)
  end)
end)

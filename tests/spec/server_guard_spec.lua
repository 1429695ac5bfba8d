-- server_guard_spec: sbxd's front (src/server/front.c) and its HTTP/2
-- guard (h2guard.c) against a real sbxd: a request without a valid token
-- is answered 401 by the front before its body ends, and nothing of that
-- body is held; request bodies past the body budget get 503 with
-- Retry-After; TLS and unix listeners get the same guard as h2c; a slow
-- preface is cut by the header timeout; a client that stops reading
-- still gets every byte, and a GOAWAY only between frames; each has its
-- counter in /metrics.
-- The attack classes themselves are in the server_attack specs.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local PY = H.PY
local runnable = H.available() and T.has_core() and H.have("curl") and H.have_python_h2()
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl, python3-h2)") end

local function probe(url, token, scenario, arg)
  return H.probe("guard_probe.py", url, token, scenario, arg)
end

local function metric(srv, name)
  local body = srv:curl("/metrics", "-H", srv:auth())
  return tonumber(body:match(name:gsub("[%p]", "%%%0") .. " (%d+)"))
end

describe_srv("sbxd's front guard", function()
  local srv, sid

  setup(function()
    srv = assert(H.start { args = { "--body-budget-conn", "65536" } })
    local body = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json", "-d", "{}")
    sid = H.json_field(body, "id")
    assert.is_truthy(sid, body)
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  it("answers a request without a token 401 before its body ends, and holds none of it", function()
    local r = probe(srv.url, "-", "early", srv.token.alice)
    assert.equal(401, r.status, r.raw)
    assert.equal(0, r.held, r.raw)     -- 1 MiB of DATA sent after it: none kept
    assert.equal(200, r.after, r.raw)  -- and the connection still serves
    r = probe(srv.url, "not-a-token-0123456789", "early", srv.token.alice)
    assert.equal(401, r.status, r.raw)
    assert.equal(0, r.held, r.raw)
    -- control: with the token, h2o waits for the body and holds what came
    -- (the probe sees held bytes when there are any); this connection's
    -- budget is 64 KiB, so a fresh server with the default one
    local s2 = assert(H.start {})
    r = probe(s2.url, s2.token.alice, "early", s2.token.alice)
    s2:cleanup()
    assert.is_nil(r.status, r.raw)
    assert.is_true((r.held or 0) >= 1024 * 1024, r.raw)
  end)

  it("answers 503 with retry-after past the body budget, by content-length and by DATA", function()
    local path = "/v1/sessions/" .. sid .. "/files/up.bin"
    local r = probe(srv.url, srv.token.alice, "put-cl", path)
    assert.equal(503, r.status, r.raw)
    assert.equal("1", r.retry_after, r.raw)
    r = probe(srv.url, srv.token.alice, "put-data", path)
    assert.equal(503, r.status, r.raw)
    assert.equal("1", r.retry_after, r.raw)
    assert.is_true(r.sent > 65536 and r.sent <= 65536 + 4 * 16384, r.raw)
    -- control: under the budget the upload goes through
    local f = srv.dir .. "/small"
    H.sh("head -c 50000 /dev/zero > " .. f)
    local body, status = srv:curl(path, "-H", srv:auth(), "-X", "PUT", "--data-binary", "@" .. f)
    assert.equal(200, status, body)
    assert.is_true(metric(srv, 'sbxd_requests_rejected_total{status="503"}') >= 2)
    assert.equal(0, metric(srv, "sbxd_request_body_held_bytes"))
  end)

  it("closes a PING flood with GOAWAY(ENHANCE_YOUR_CALM), counts it, logs the peer", function()
    local r = probe(srv.url, srv.token.alice, "ping", "1000")
    assert.equal(11, r.goaway, r.raw)
    assert.is_truthy(r.close_ms, r.raw) -- the connection really closed
    r = probe(srv.url, srv.token.alice, "ping", "20")
    assert.is_nil(r.goaway, r.raw)      -- control: a few pings are fine
    assert.is_true(metric(srv, 'sbxd_h2_goaway_total{reason="ping"}') >= 1)
    assert.is_true(metric(srv, 'sbxd_requests_rejected_total{status="401"}') >= 2)
    assert.is_truthy(srv:log():find("event=guard_close peer=127.0.0.1:%d+ reason=ping"), srv:log())
  end)

  it("HTTP/1.1 goes through the front", function()
    local out = H.sh(("curl -s --http1.1 %s/healthz"):format(srv.url))
    assert.equal("ok\n", out)
    out = H.sh(("curl -s --http1.1 -o /dev/null -w '%%{http_code}' %s/v1/sessions"):format(srv.url))
    assert.equal("401", out)
  end)

  it("HTTP/1.1 chunked bodies count against the body budget (what h2o holds before it answers)", function()
    local small, big = srv.dir .. "/small.bin", srv.dir .. "/big.bin"
    local f = io.open(small, "wb") f:write(string.rep("c", 32 * 1024)) f:close()
    f = io.open(big, "wb") f:write(string.rep("c", 400 * 1024)) f:close()
    local function put(file, name)
      return H.sh(("curl -s --max-time 20 --http1.1 -o /dev/null -w '%%{http_code}' -X PUT -H %s " ..
        "-H 'Transfer-Encoding: chunked' --data-binary @%s %s/v1/sessions/%s/files/%s"):format(
        H.q(srv:auth()), H.q(file), srv.url, sid, name))
    end
    -- control: a chunked body under --body-budget-conn (64 KiB here) is served
    assert.equal("200", put(small, "small.bin"))
    -- 400 KiB chunked (no Content-Length to refuse up front): the front closes the
    -- connection once what h2o would hold crosses the budget
    local before = select(2, srv:log():gsub("reason=http1", ""))
    assert.equal("000", put(big, "big.bin"))
    assert.is_true(select(2, srv:log():gsub("reason=http1", "")) > before, srv:log())
    assert.equal(200, select(2, srv:curl("/healthz")))
  end)

  it("an HTTP/1.1 Upgrade: h2c comes under the guard; a later one closes the connection", function()
    local r = probe(srv.url, "-", "upgrade-ping", "1000")
    assert.equal("HTTP/1.1 101 Switching Protocols", r.status, r.raw)
    assert.equal(11, r.goaway, r.raw)
    assert.is_true(r.closed, r.raw)
    r = probe(srv.url, "-", "upgrade-ping", "20")
    assert.equal("HTTP/1.1 101 Switching Protocols", r.status, r.raw)
    assert.is_nil(r.goaway, r.raw)   -- control: the probe saw no GOAWAY where there was none
    -- h2o 2.2 would upgrade any request of a kept HTTP/1.1 connection:
    -- past the first, the front closes instead of letting frames by unseen
    r = probe(srv.url, "-", "late-upgrade")
    assert.equal("HTTP/1.1 200 OK", r.first, r.raw)
    assert.equal("", r.second, r.raw)
    assert.is_true(r.closed, r.raw)
    assert.is_truthy(srv:log():find("reason=http1", 1, true))
    -- the Lua client's way in (curl --http2 upgrades) still works
    local out = H.sh(("curl -s -w ' %%{http_version}' --http2 -H %s %s/v1/sessions"):format(
      H.q(srv:auth()), srv.url))
    assert.matches(" 2$", out)
  end)

  -- The front writes h2o's bytes to a plain-text client straight from its
  -- read buffer and queues (copies) only what the socket does not take: a
  -- client that stops reading must still get every byte, in order, and a
  -- GOAWAY the guard owes it only after whole frames.
  it("a client that stops reading gets every byte in order, and a GOAWAY only between frames", function()
    local arg = ("%s:%d"):format(sid, 5000000)
    local r = probe(srv.url, srv.token.alice, "slow-read", arg)
    assert.equal(200, r.status, r.raw)
    assert.is_false(r.proto_error, r.raw)
    assert.is_true(r.ended, r.raw)
    assert.equal(5000000, r.stdout, r.raw)
    assert.is_nil(r.goaway, r.raw)
    -- the same, and a PING flood while h2o's frames wait: the GOAWAY comes
    -- after whole frames (any torn frame is a protocol error to the client)
    r = probe(srv.url, srv.token.alice, "slow-read", arg .. ":flood")
    assert.equal(11, r.goaway, r.raw)
    assert.is_false(r.proto_error, r.raw)
    assert.is_true(r.stdout < 5000000, r.raw) -- cut by the GOAWAY
  end)

  it("cuts a preface that does not complete within --header-timeout-s", function()
    local s2 = assert(H.start { args = { "--header-timeout-s", "1" } })
    local port = s2.url:match(":(%d+)$")
    -- half a preface, then wait for the server to close (at most 8 s)
    local out = H.sh(PY .. [[ -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", ]] .. port .. [[))
s.sendall(b"PRI * HTTP/2.0\r\n")
s.settimeout(8)
t0 = time.monotonic()
try:
    d = s.recv(100)
    while d:
        d = s.recv(100)
    print("closed", round(time.monotonic() - t0, 1))
except socket.timeout:
    print("open")
']])
    local body, status = s2:curl("/healthz") -- control: a whole request is served
    local log = s2:log()
    s2:cleanup()
    assert.is_truthy(out:match("^closed"), out)
    assert.equal(200, status, body)
    assert.is_truthy(log:find("reason=header_timeout", 1, true), log)
  end)
end)

describe_srv("sbxd's front guard on TLS and unix listeners", function()
  local function same_guard(srv, url)
    local r = probe(url, "-", "early", srv.token.alice)
    assert.equal(401, r.status, r.raw)
    assert.equal(0, r.held, r.raw)
    assert.equal(200, r.after, r.raw)
    r = probe(url, srv.token.alice, "ping", "1000")
    assert.equal(11, r.goaway, r.raw)
    assert.is_truthy(r.close_ms, r.raw)
    r = probe(url, srv.token.alice, "ping", "20")
    assert.is_nil(r.goaway, r.raw)
  end

  it("TLS: the same 401 and the same GOAWAY as h2c", function()
    local srv = assert(H.start { tls = true })
    local ok, err = pcall(function()
      same_guard(srv, srv.url)
      local body, status = srv:curl("/healthz")
      assert.equal(200, status, body)
      local out = H.sh(("curl -s --http1.1 --cacert %s %s/healthz"):format(srv.cert, srv.url))
      assert.equal("ok\n", out)
      local _, s401 = srv:curl("/v1/sessions")
      assert.equal(401, s401)
    end)
    srv:cleanup()
    assert(ok, err)
  end)

  it("unix socket: the same 401 and the same GOAWAY as h2c", function()
    local path = os.tmpname() .. ".sock"
    os.remove(path)
    local srv = assert(H.start { listen = "unix:" .. path })
    local ok, err = pcall(function()
      same_guard(srv, "unix:" .. path)
      local out = H.sh(("curl -s --http2-prior-knowledge --unix-socket %s http://localhost/healthz"):format(path))
      assert.equal("ok\n", out)
    end)
    srv:cleanup()
    assert(ok, err)
  end)
end)

-- server_h2attack_spec: a short run (about a second) of every HTTP/2 attack
-- class of issue 14 against a real sbxd, with tests/server/h2attack.py (the
-- same attacker `make abuse` runs for 20 s and measures).  Each test asserts
-- what cannot flake on a loaded box: the abusive connection was closed with
-- the expected GOAWAY code, the front's counter for that reason went up,
-- sbxd's RSS stayed bounded, and sbxd still serves /healthz and a real run.
-- Latency bounds live in `make abuse`.  The control test sends legitimate
-- traffic of the same shapes under every budget and must not be cut.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local PY = "/usr/bin/python3"
local function have_h2()
  return H.sh(PY .. " -c 'import h2, hpack' 2>/dev/null && echo yes"):match("yes") ~= nil
end
local runnable = H.available() and T.has_core() and H.have("curl") and have_h2()
local describe_srv = runnable and describe or function(name)
  pending(name .. " (needs build/bin/sbxd, sbx.core, curl, python3-h2)")
end

local ATTACK = T.ROOT .. "/tests/server/h2attack.py"
local CALM, PROTOCOL = "11", "1"
local SECONDS = 1

-- The attacker's one line of JSON, read with patterns (flat keys).
local function parse(out)
  local r = { raw = out, goaway = {}, statuses = {} }
  for k in ("conns closed refused open_at_end bytes_sent"):gmatch("%S+") do
    r[k] = tonumber(out:match('"' .. k .. '": (%d+)'))
  end
  for code, n in (out:match('"goaway": {([^}]*)}') or ""):gmatch('"(%d+)": (%d+)') do
    r.goaway[code] = tonumber(n)
  end
  for st, n in (out:match('"statuses": {([^}]*)}') or ""):gmatch('"(%-?%d+)": (%d+)') do
    r.statuses[st] = tonumber(n)
  end
  return r
end

local function attack(srv, cls, ...)
  local args = { PY, ATTACK, cls, "--port", srv.url:match(":(%d+)$"), "--seconds", tostring(SECONDS) }
  for _, a in ipairs { ... } do args[#args + 1] = tostring(a) end
  local q = {}
  for i, a in ipairs(args) do q[i] = H.q(a) end
  local out = H.sh(table.concat(q, " ") .. " 2>&1")
  local r = parse(out)
  assert(r.conns, "h2attack.py " .. cls .. ": " .. out)
  return r
end

local function metric(srv, name)
  local body = srv:curl("/metrics", "-H", srv:auth("bob"))
  return tonumber(body:match(name:gsub("[%p]", "%%%0") .. " (%d+)")) or 0
end
local function goaways(srv, reason) return metric(srv, 'sbxd_h2_goaway_total{reason="' .. reason .. '"}') end

-- ASan keeps freed memory in quarantine: RSS says nothing there.
local function asan(srv)
  local f = io.open("/proc/" .. srv.pid .. "/maps")
  local s = f and f:read("*a") or ""
  if f then f:close() end
  return s:find("libasan", 1, true) ~= nil
end

local function new_session(srv, tenant)
  local body, status = srv:curl("/v1/sessions", "-H", srv:auth(tenant), "-H", "content-type: application/json",
    "-d", "{}")
  assert.equal(201, status, body)
  return H.json_field(body, "id")
end

-- sbxd is up and serves another tenant: /healthz and a real run, on new connections.
local function serves(srv, sid)
  assert.equal(0, os.execute("kill -0 " .. srv.pid .. " 2>/dev/null") and 0 or 1, "sbxd is gone")
  local body, status = srv:curl("/healthz")
  assert.equal(200, status, body)
  body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth("bob"),
    "-H", "content-type: application/json", "-d", '{"cmd":["/bin/echo","served"]}')
  assert.equal(200, status, body)
  assert.matches('{"type":"stdout","data":"served\\n"}', body, 1, true)
end

-- Every connection the attack opened was closed by sbxd, each with GOAWAY(code)
-- (a connection cut while the attacker was still writing may see only the close).
local function all_cut(r, code)
  assert.is_true(r.conns >= 1, r.raw)
  assert.equal(r.conns, r.closed, "connections left open: " .. r.raw)
  assert.is_true((r.goaway[code] or 0) >= 1, "no GOAWAY " .. code .. ": " .. r.raw)
  for c in pairs(r.goaway) do assert.equal(code, c, r.raw) end
end

describe_srv("sbxd against every HTTP/2 attack class (short)", function()
  local srv, alice, bob

  setup(function()
    srv = assert(H.start { log_level = "warn", args = { "--max-body", "1048576" } })
    alice, bob = new_session(srv, "alice"), new_session(srv, "bob")
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  -- One class: it is cut with code and the counter for reason counts each cut.
  local function cut_class(cls, code, reason, ...)
    local before = goaways(srv, reason)
    local rss0 = srv:rss_kb()
    local r = attack(srv, cls, ...)
    all_cut(r, code)
    assert.is_true(goaways(srv, reason) - before >= (r.goaway[code] or 0),
      reason .. " counted " .. (goaways(srv, reason) - before) .. ": " .. r.raw)
    if not asan(srv) then
      local grew = srv:rss_kb() - rss0
      assert.is_true(grew < 64 * 1024, cls .. ": sbxd grew by " .. grew .. " KiB")
    end
    serves(srv, bob)
    return r
  end

  it("control: legitimate frames of every attacked shape are not cut", function()
    local r = attack(srv, "control", "--token", srv.token.alice, "--session", alice)
    assert.equal(0, r.closed, r.raw)
    assert.same({}, r.goaway)
    -- the CONTINUATION-split /healthz, the run ended by an empty DATA, the last /healthz
    assert.equal(3, r.statuses["200"], r.raw)
    -- a normal upload just under --max-body, and a streamed run (the client's WINDOW_UPDATEs)
    local f = io.open(srv.dir .. "/up.bin", "wb")
    f:write(string.rep("u", 1000 * 1000))
    f:close()
    local body, status = srv:curl("/v1/sessions/" .. bob .. "/files/up.bin", "-H", srv:auth("bob"),
      "-X", "PUT", "--data-binary", "@" .. srv.dir .. "/up.bin")
    assert.equal(200, status, body)
    body, status = srv:curl("/v1/sessions/" .. bob .. "/runs", "-H", srv:auth("bob"),
      "-H", "content-type: application/json", "-d", '{"cmd":"head -c 8000000 /dev/zero | wc -c"}')
    assert.equal(200, status, body)
    assert.matches("8000000", body, 1, true)
    assert.matches('"returncode":0', body, 1, true)
  end)

  it("HPACK bomb: one indexed 4 KB header referenced 410,000 times is cut on decoded size", function()
    local r = cut_class("hpack-bomb", CALM, "header_list")
    assert.is_nil(r.statuses["200"])
  end)

  it("100 unauthenticated POST bodies are answered 401 at once and not held", function()
    local before = metric(srv, 'sbxd_requests_rejected_total{status="401"}')
    local rss0 = srv:rss_kb()
    local r = attack(srv, "body-hold", "--size", 1024 * 1024)
    assert.equal(100, r.statuses["401"], r.raw)
    assert.is_nil(r.statuses["200"])
    assert.is_true(metric(srv, 'sbxd_requests_rejected_total{status="401"}') - before >= 100)
    assert.equal(0, metric(srv, "sbxd_request_body_held_bytes"))
    if not asan(srv) then
      local grew = srv:rss_kb() - rss0
      assert.is_true(grew < 64 * 1024, "sbxd grew by " .. grew .. " KiB")
    end
    serves(srv, bob)
  end)

  it("20,000 distinct literal headers in one block", function()
    cut_class("header-flood", CALM, "header_fields")
  end)

  it("empty CONTINUATION frames on 4 connections", function()
    cut_class("continuation", CALM, "continuations", "--conns", 4)
  end)

  it("zero-length header names and values", function()
    cut_class("zero-length", PROTOCOL, "protocol")
  end)

  it("empty DATA frames", function()
    cut_class("empty-data", CALM, "empty_frames", "--token", srv.token.alice, "--session", alice)
  end)

  it("PRIORITY churn", function()
    cut_class("priority", CALM, "priority")
  end)

  it("SETTINGS flood", function()
    cut_class("settings", CALM, "settings")
  end)

  it("PING flood", function()
    cut_class("ping", CALM, "ping")
  end)

  it("WINDOW_UPDATE flood", function()
    cut_class("window-update", CALM, "window_update")
  end)
end)

describe_srv("sbxd against Rapid Reset that reconnects (short)", function()
  it("a tenant's reset budget outlives its connections: reconnecting is refused for a cool-down", function()
    -- the shipped budgets but a 5 s cool-down, so the test can see it end
    local srv = assert(H.start { log_level = "warn", args = { "--abuse-cooldown-s", "5" } })
    local ok, err = pcall(function()
      local alice, bob = new_session(srv, "alice"), new_session(srv, "bob")
      local started = metric(srv, "sbxd_runs_started_total")
      local t0 = T.now_ms()
      local r = attack(srv, "rapid-reset", "--token", srv.token.alice, "--session", alice)
      all_cut(r, CALM)
      -- alice's legit traffic during her cool-down is cut at her run: the probe sees a cut
      local c = attack(srv, "control", "--token", srv.token.alice, "--session", alice)
      assert.equal(1, c.goaway[CALM], c.raw)
      -- one connection spent the tenant's budget; each reconnect was closed at its
      -- first request instead of getting a fresh per-connection burst
      assert.equal(1, goaways(srv, "reset_budget"), r.raw)
      assert.is_true(r.conns >= 3, r.raw)
      assert.is_true(goaways(srv, "penalty") >= r.conns - 1, r.raw)
      assert.equal(0, goaways(srv, "rst_stream"), r.raw)
      -- the burst under the budget may start runs; each one was reset and is gone
      local deadline = T.now_ms() + 60000
      while H.count_procs("sbx-abuse-marker") > 0 and T.now_ms() < deadline do os.execute("sleep 0.05") end
      assert.equal(0, H.count_procs("sbx-abuse-marker"))
      assert.is_true(metric(srv, "sbxd_runs_started_total") >= started)
      -- legit traffic with resets (control: 5 reset streams, a run, /healthz per
      -- connection), reconnecting 4 times as bob: never cut
      for _ = 1, 4 do
        local legit = attack(srv, "control", "--token", srv.token.bob, "--session", bob)
        assert.equal(0, legit.closed, legit.raw)
        assert.same({}, legit.goaway)
      end
      serves(srv, bob)
      -- the cool-down over, alice is served again
      local wait = (t0 + 5500 - T.now_ms()) / 1000
      if wait > 0 then os.execute("sleep " .. wait) end
      c = attack(srv, "control", "--token", srv.token.alice, "--session", alice)
      assert.equal(0, c.closed, c.raw)
      assert.same({}, c.goaway)
    end)
    srv:cleanup()
    assert(ok, err)
  end)
end)

describe_srv("sbxd's connection budgets against slow and many connections (short)", function()
  it("slow-loris: a dribbled preface and a dribbled HEADERS are closed at the header timeout", function()
    local srv = assert(H.start { log_level = "warn", args = { "--header-timeout-s", "1" } })
    local ok, err = pcall(function()
      local bob = new_session(srv, "bob")
      local before = goaways(srv, "header_timeout")
      -- 3 s of dribbling, a byte each 0.3 s: neither completes before the 1 s timeout
      local pre = attack(srv, "slowloris", "--part", "preface", "--conns", 2, "--interval", 0.3, "--seconds", 3)
      local hdr = attack(srv, "slowloris", "--part", "headers", "--conns", 2, "--interval", 0.3, "--seconds", 3)
      assert.equal(2, pre.closed, pre.raw)
      assert.equal(2, hdr.closed, hdr.raw)
      assert.equal(2, hdr.goaway[CALM], hdr.raw) -- past the preface the front can say why
      assert.equal(4, goaways(srv, "header_timeout") - before)
      serves(srv, bob)
    end)
    srv:cleanup()
    assert(ok, err)
  end)

  it("a connection flood past the per-source and total budgets is refused, others served", function()
    local srv = assert(H.start { log_level = "warn", args = { "--max-conns-per-addr", "8", "--max-conns", "24" } })
    local ok, err = pcall(function()
      local bob = new_session(srv, "bob")
      -- 20 from one source: at most 8 stay (the front refuses a newcomer or sheds the
      -- source's longest-idle connection with GOAWAY(NO_ERROR): "evicted")
      local flood = io.popen(("%s %s conn-flood --port %s --seconds 3 --conns 20 --source 127.0.0.2"):format(
        PY, ATTACK, srv.url:match(":(%d+)$")))
      os.execute("sleep 1")
      -- 5 sources more, 4 each: the total (24) is crossed
      local r2 = attack(srv, "conn-flood", "--conns", 20, "--sources", 5, "--seconds", 1)
      local r1 = parse(flood:read("*a"))
      flood:close()
      assert.is_true(r1.closed >= 12, r1.raw)
      assert.is_true(r1.open_at_end <= 8, r1.raw)
      -- 40 opened in all, at most 24 open at once
      assert.is_true(r1.open_at_end + r2.open_at_end <= 24, r1.raw .. "\n" .. r2.raw)
      local shed = goaways(srv, "evicted") + metric(srv, 'sbxd_conn_refused_total{reason="per_addr"}') +
        metric(srv, 'sbxd_conn_refused_total{reason="total"}')
      assert.is_true(shed >= 16, "shed " .. shed)
      serves(srv, bob)
    end)
    srv:cleanup()
    assert(ok, err)
  end)

  -- sbxd under a lower soft RLIMIT_NOFILE (a wrapper sets it).
  local function start_nofile(n, args)
    local wrapper = os.tmpname()
    local f = io.open(wrapper, "w")
    f:write("#!/bin/sh\nulimit -S -n " .. n .. "\nexec " .. H.q(H.SBXD) .. ' "$@"\n')
    f:close()
    os.execute("chmod +x " .. wrapper)
    local sbxd = H.SBXD
    H.SBXD = wrapper
    local srv, serr = H.start { log_level = "warn", args = args }
    H.SBXD = sbxd
    os.remove(wrapper)
    return assert(srv, serr)
  end

  it("fd exhaustion under the default budgets: they hold before the kernel's limit, others get in", function()
    -- 512 descriptors: 128 connections in all, 4 per source; 400 connections from 20
    -- sources shed each other (and linger at most 16 at a time), never reaching EMFILE
    local srv = start_nofile(512, {})
    local ok, err = pcall(function()
      local bob = new_session(srv, "bob")
      local flood = io.popen(("%s %s fd-exhaustion --port %s --seconds 3 --conns 400 --sources 20"):format(
        PY, ATTACK, srv.url:match(":(%d+)$")))
      os.execute("sleep 0.5")
      local codes = {}
      for _ = 1, 10 do
        local _, status = srv:curl("/healthz")
        codes[#codes + 1] = status
        os.execute("sleep 0.1")
      end
      local r = parse(flood:read("*a"))
      flood:close()
      assert.same({ 200, 200, 200, 200, 200, 200, 200, 200, 200, 200 }, codes)
      -- control: the flood really was shed by the budgets
      assert.is_true(r.conns >= 300, r.raw)
      assert.is_true(metric(srv, 'sbxd_conn_refused_total{reason="per_addr"}') + goaways(srv, "evicted") >= 100)
      assert.equal(0, metric(srv, 'sbxd_conn_refused_total{reason="fd"}'))
      serves(srv, bob)
    end)
    srv:cleanup()
    assert(ok, err)
  end)

  it("fd exhaustion (sbxd under ulimit -n 128, 300 connections): no busy accept loop, still serving", function()
    -- --max-conns far above the descriptors, so EMFILE is reached.
    local srv = start_nofile(128, { "--max-conns", "10000", "--max-conns-per-addr", "10000" })
    local ok, err = pcall(function()
      local bob = new_session(srv, "bob")
      local function cpu_ticks()
        local s = T.read_file("/proc/" .. srv.pid .. "/stat")
        local utime, stime = s:match("^%d+ %b() %S+" .. string.rep(" %S+", 10) .. " (%d+) (%d+)")
        return tonumber(utime) + tonumber(stime)
      end
      local flood = io.popen(("%s %s fd-exhaustion --port %s --seconds 3 --conns 300 --sources 20"):format(
        PY, ATTACK, srv.url:match(":(%d+)$")))
      os.execute("sleep 1.5")
      local t0 = cpu_ticks()
      os.execute("sleep 1")
      local used = cpu_ticks() - t0
      local r = parse(flood:read("*a"))
      flood:close()
      -- a spinning accept loop burns every tick it gets (100 a second); backing off, a few
      assert.is_true(used < 30, "sbxd used " .. used .. " ticks in 1 s at EMFILE")
      assert.is_true(r.closed + r.refused >= 1, r.raw)
      assert.is_true(metric(srv, 'sbxd_conn_refused_total{reason="fd"}') >= 1)
      serves(srv, bob)
    end)
    srv:cleanup()
    assert(ok, err)
  end)
end)

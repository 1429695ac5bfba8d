-- server_warm_spec: the warm pool. A session's zygote keeps warm_runs runs
-- (an idle sbx-init each) offered ahead of time: on-device through
-- sbx.session{warm_runs = N}, in sbxd through --warm-runs N (never over the
-- API).  Counted from /proc: the sbx-init children of the session's zygote.
-- A warm run nobody takes ends after warm_idle_s (sbxd: --warm-idle-ms), so
-- an idle session keeps its zygote alone; cases that count the pool set it
-- long, so that load on the machine cannot end runs while they count.
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
    local s = sbx.session { warm_runs = 4, warm_idle_s = 3600 }
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
    local d = sbx.session { warm_idle_s = 3600 }
    assert.equal(1, idle_inits(me, 1, old))
    d:close()
  end)

  -- The zygote of the session opened by open(), and the session.
  local function open_with_zygote(opts)
    local old = zygotes(me)
    local s = sbx.session(opts)
    -- Looked for until it shows (bounded): the listing is a snapshot of
    -- /proc taken while other specs' processes come and go.
    for _ = 1, 200 do
      for _, z in ipairs(children(me, "sbx-zygote")) do
        if not old[z] then return s, z end
      end
      os.execute("sleep 0.05")
    end
    local all = H.sh(("ps -o pid=,stat=,comm= --ppid %d"):format(me))
    s:close()
    error("no new zygote under " .. me .. " in 10 s; its children: " .. all)
  end

  -- Four runs at once (each gives its init back), then one after another.
  local function busy(s, tag)
    local ps = {}
    for i = 1, 4 do ps[i] = s:run({ "/bin/echo", tag .. i }) end
    for i = 1, 4 do
      assert.equal(tag .. i .. "\n", (ps[i]:communicate()))
      assert.equal(0, ps[i].returncode)
    end
    for i = 1, 3 do
      local r = s:exec({ "/bin/echo", tag .. "s" .. i })
      assert.equal(tag .. "s" .. i .. "\n", r.stdout, r.stderr)
    end
  end

  it("on-device: unused warm runs end after warm_idle_s, the zygote stays and serves the next runs", function()
    -- The control: the same runs in a session whose warm runs outlive the
    -- test show that the count sees idle inits.
    local keep, zk = open_with_zygote { warm_runs = 2, warm_idle_s = 3600 }
    local s, zs = open_with_zygote { warm_runs = 2, warm_idle_s = 0.2 }
    finally(function() s:close(); keep:close() end)
    busy(keep, "k")
    busy(s, "a")
    local left
    for _ = 1, 600 do
      left = #children(zs, "sbx-init")
      if left == 0 then break end
      os.execute("sleep 0.05")
    end
    assert.equal(0, left, "warm runs still there after 30 s")
    assert.is_true(H.sh("ps -o pid= -p " .. zs):match("%d+") ~= nil, "the zygote ended too")
    assert.is_true(#children(zk, "sbx-init") >= 2, "the control session has no idle init")
    -- Every warm run that expired (offered, set aside or given back) is
    -- dropped unsent: the runs after the pause all get a live one.
    busy(s, "b")
    os.execute("sleep 0.5")
    busy(s, "c")
  end)

  it("refuses warm_idle_s out of range or of the wrong type (InvalidArgument naming it)", function()
    for _, v in ipairs { 0, -1, 5e6, "1", 0 / 0 } do
      local e = raises("InvalidArgument", sbx.session, { warm_idle_s = v })
      assert.equal("warm_idle_s", e.option)
    end
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
  -- (--spare-sessions 0: these count the inits below sbxd's zygotes, and a
  -- spare session has warm runs of its own: server_spare_spec.)
  describe_srv("sbxd --warm-runs", function()
    it("gives each session that many warm runs; the API cannot set it", function()
      local srv = assert(H.start {
        args = { "--spare-sessions", "0", "--warm-runs", "3", "--warm-idle-ms", "3600000" } })
      finally(function() srv:cleanup() end)
      local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", "{}")
      assert.equal(201, status, body)
      assert.equal(3, idle_inits(srv.pid, 3))
      body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", '{"warm_runs":8}')
      assert.equal(400, status)
      assert.equal("warm_runs", H.json_field(body, "option"))
      body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", '{"warm_idle_s":3600}')
      assert.equal(400, status)
      assert.equal("warm_idle_s", H.json_field(body, "option"))
    end)

    it("--warm-idle-ms ends its sessions' unused warm runs; the session stays usable", function()
      local srv = assert(H.start { args = { "--spare-sessions", "0", "--warm-idle-ms", "200" } })
      finally(function() srv:cleanup() end)
      local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", "{}")
      assert.equal(201, status, body)
      local z = children(srv.pid, "sbx-zygote")[1]
      assert.is_truthy(z, "no zygote under sbxd")
      local left
      for _ = 1, 600 do
        left = #children(z, "sbx-init")
        if left == 0 then break end
        os.execute("sleep 0.05")
      end
      assert.equal(0, left, "warm runs still there after 30 s")
      local id = H.json_field(body, "id")
      body, status = srv:curl("/v1/sessions/" .. id .. "/runs", "-H", srv:auth(), "-H",
        "content-type: application/json", "-d", '{"cmd":"echo again"}')
      assert.equal(200, status, body)
      assert.matches("again", body)
    end)

    it("--warm-idle-ms: runs of two network modes after their warm runs expired", function()
      local srv = assert(H.start { args = { "--spare-sessions", "0", "--warm-idle-ms", "200", "--warm-runs", "2" } })
      finally(function() srv:cleanup() end)
      local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", '{"network_mode":"allowlist"}')
      assert.equal(201, status, body)
      local id = H.json_field(body, "id")
      local function run(cmd, mode)
        local b, st = srv:curl("/v1/sessions/" .. id .. "/runs", "-H", srv:auth(), "-H",
          "content-type: application/json", "-d", ('{"cmd":"%s","network_mode":"%s"}'):format(cmd, mode))
        assert.equal(200, st, b)
        assert.matches(cmd:match("echo (%w+)"), b)
        assert.matches('"exit"', b)
      end
      run("echo b1", "blocked")
      run("echo a1", "allowlist")
      local z = children(srv.pid, "sbx-zygote")[1]
      assert.is_truthy(z, "no zygote under sbxd")
      for round = 1, 2 do
        local left
        for _ = 1, 600 do
          left = #children(z, "sbx-init")
          if left == 0 then break end
          os.execute("sleep 0.05")
        end
        assert.equal(0, left, "warm runs still there after 30 s")
        run("echo a" .. round .. "x", "allowlist")
        run("echo b" .. round .. "x", "blocked")
        run("echo a" .. round .. "y", "allowlist")
      end
    end)

    it("a run of one mode after two of another gets its warm run (an offer set aside asks for the next)", function()
      -- Two allowlist runs, the second once the zygote's next offer is
      -- waiting beside the first run's given-back init (sbxd sets such an
      -- offer aside while the run takes the given-back init), then a
      -- blocked run: it waited 10 s for an offer nobody had asked for
      -- and failed (500 "no warm run ... came").
      local srv = assert(H.start { args = { "--spare-sessions", "0", "--warm-idle-ms", "3600000" } })
      finally(function() srv:cleanup() end)
      local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", '{"network_mode":"allowlist"}')
      assert.equal(201, status, body)
      local id = H.json_field(body, "id")
      local function run(tag, mode)
        local b, st = srv:curl("/v1/sessions/" .. id .. "/runs", "-H", srv:auth(), "-H",
          "content-type: application/json", "-d", ('{"cmd":"echo %s","network_mode":"%s"}'):format(tag, mode))
        assert.equal(200, st, b)
        assert.matches('"data":"' .. tag .. '\\n"', b)
      end
      for round = 1, 2 do
        run("a" .. round, "allowlist")
        -- the given-back init and the next offer, both there: the
        -- processes under the zygote stop changing
        local z, last, same = children(srv.pid, "sbx-zygote")[1], -1, 0
        for _ = 1, 200 do
          local n = #children(z, "sbx-init")
          same = (n == last and n >= 2) and same + 1 or 0
          last = n
          if same == 3 then break end
          os.execute("sleep 0.05")
        end
        assert.equal(3, same, "the zygote's processes did not settle")
        run("a" .. round .. "x", "allowlist")
        run("b" .. round, "blocked")
      end
    end)

    it("refuses --warm-runs 0 and 65 at start", function()
      for _, v in ipairs { "0", "65" } do
        local srv, err = H.start { args = { "--warm-runs", v } }
        assert.is_nil(srv)
        assert.matches("warm%-runs", err)
      end
      local srv, err = H.start { args = { "--warm-idle-ms", "0" } }
      assert.is_nil(srv)
      assert.matches("warm%-idle%-ms", err)
    end)
  end)
end)

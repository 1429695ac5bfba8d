-- server_spare_spec.lua: sbxd --spare-sessions (src/core/spare.c): after an
-- open, sbxd keeps spares of that shape opened ahead; the next open of it
-- takes one (a session like any other), /metrics says so, a policy reload
-- empties the pool, and --spare-sessions 0 keeps none.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local runnable = H.available() and T.has_core() and H.have("curl")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core and curl)") end

local JSON = "content-type: application/json"

local function metric(srv, name)
  local body = srv:curl("/metrics", "-H", srv:auth())
  return tonumber(body:match("\n" .. name:gsub("[%[%]{}\"%.%-]", "%%%0") .. " (%d+)"))
end

local function wait_metric(srv, name, want)
  for _ = 1, 500 do
    if metric(srv, name) == want then return true end
    os.execute("sleep 0.02")
  end
  return false
end

local function open(srv, body_json)
  local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d",
    body_json or '{"backend":"userns"}')
  assert.equal(201, status, body)
  return H.json_field(body, "id")
end

local function run(srv, id, cmd)
  return srv:curl("/v1/sessions/" .. id .. "/runs", "-H", srv:auth(), "-H", JSON,
    "-d", ('{"cmd":%q}'):format(cmd))
end

describe_srv("sbxd spare sessions", function()
  local srv

  setup(function()
    srv = assert(H.start { args = { "--spare-sessions", "1" } })
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  it("keeps a spare of the last-opened shape, hands it to the next open, counts it", function()
    assert.equal(0, metric(srv, "sbxd_spare_sessions_ready"))
    local a = open(srv)
    assert.is_true(wait_metric(srv, "sbxd_spare_sessions_ready", 1), "no spare was made")
    local b = open(srv)
    assert.equal(1, metric(srv, 'sbxd_spare_sessions_total{event="taken"}'))
    assert.are_not.equal(a, b)
    -- A session like any other: it runs, and its work dir starts empty.
    local out = run(srv, b, "ls -A /tmp/sandbox-work; echo done")
    assert.is_truthy(out:find('"data":"done\\n"', 1, true), out)
    -- Spares belong to no tenant: the open sessions are the two opened.
    assert.equal(2, metric(srv, "sbxd_sessions_open"))
    for _, id in ipairs { a, b } do srv:curl("/v1/sessions/" .. id, "-H", srv:auth(), "-X", "DELETE") end
  end)

  it("keeps its shape while opens alternate between two, and follows a second one asked twice", function()
    local A, B = '{"backend":"userns"}', '{"backend":"userns","pids":64}'
    local MADE, TAKEN = 'sbxd_spare_sessions_total{event="made"}', 'sbxd_spare_sessions_total{event="taken"}'
    local ids = { open(srv, A) }
    assert.is_true(wait_metric(srv, "sbxd_spare_sessions_ready", 1), "no spare was made")
    local made, taken = metric(srv, MADE), metric(srv, TAKEN)
    -- B, A, B, A: each B once between As.  The pool stays A's: the As take
    -- its spares, and only those are made again.  (Before, each B closed
    -- A's spare and made one of B's, and each A the reverse: four made,
    -- none taken.)
    for _ = 1, 2 do
      ids[#ids + 1] = open(srv, B)
      ids[#ids + 1] = open(srv, A)
      assert.is_true(wait_metric(srv, "sbxd_spare_sessions_ready", 1), "A's spare was not made again")
    end
    assert.equal(taken + 2, metric(srv, TAKEN), "the As did not take A's spares")
    assert.equal(made + 2, metric(srv, MADE))
    -- B twice in a row: the pool moves to B, and the next B takes one.
    ids[#ids + 1] = open(srv, B)
    ids[#ids + 1] = open(srv, B)
    assert.is_true(wait_metric(srv, MADE, made + 3), "no spare of B was made")
    assert.is_true(wait_metric(srv, "sbxd_spare_sessions_ready", 1))
    ids[#ids + 1] = open(srv, B)
    assert.equal(taken + 3, metric(srv, TAKEN))
    for _, id in ipairs(ids) do srv:curl("/v1/sessions/" .. id, "-H", srv:auth(), "-X", "DELETE") end
  end)

  it("empties the pool on a policy reload", function()
    local a = open(srv)
    assert.is_true(wait_metric(srv, "sbxd_spare_sessions_ready", 1), "no spare was made")
    local flushed = metric(srv, 'sbxd_spare_sessions_total{event="flushed"}')
    os.execute("kill -HUP " .. srv.pid)
    assert.is_true(wait_metric(srv, 'sbxd_spare_sessions_total{event="flushed"}', flushed + 1),
      "the reload did not close the spare")
    assert.equal(0, metric(srv, "sbxd_spare_sessions_ready"))
    -- The next open is cold (nothing to take), and keeps a new spare.
    local taken = metric(srv, 'sbxd_spare_sessions_total{event="taken"}')
    local b = open(srv)
    assert.equal(taken, metric(srv, 'sbxd_spare_sessions_total{event="taken"}'))
    assert.is_true(wait_metric(srv, "sbxd_spare_sessions_ready", 1))
    for _, id in ipairs { a, b } do srv:curl("/v1/sessions/" .. id, "-H", srv:auth(), "-X", "DELETE") end
  end)
end)

describe_srv("sbxd --spare-sessions 0", function()
  it("keeps none", function()
    local srv = assert(H.start { args = { "--spare-sessions", "0" } })
    local id = open(srv)
    os.execute("sleep 0.3")
    assert.equal(0, metric(srv, "sbxd_spare_sessions_ready"))
    assert.equal(0, metric(srv, 'sbxd_spare_sessions_total{event="made"}'))
    srv:curl("/v1/sessions/" .. id, "-H", srv:auth(), "-X", "DELETE")
    srv:cleanup()
  end)
end)

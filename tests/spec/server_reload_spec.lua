-- server_reload_spec: sbxd reloads its policy on SIGHUP and on the admin
-- route without dropping a session; a policy that does not load keeps the
-- previous one and says why; only the admin tenant may use the route.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local runnable = H.available() and T.has_core() and H.have("curl")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core and curl)") end

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

local function write(path, s)
  local f = assert(io.open(path, "w"))
  f:write(s)
  f:close()
end

-- The default policy with one more rule in its on_run hook: deny a word.
local DEFAULT = read(T.ROOT .. "/policies/default.lua")
local STRICTER = DEFAULT:gsub("\n  on_run = function%(req, ctx%)\n", [[

  on_run = function(req, ctx)
    for _, a in ipairs(req.argv) do
      if a:find("forbidden-word", 1, true) then return deny("no forbidden-word here") end
    end
]], 1)
assert(STRICTER ~= DEFAULT, "the default policy has no on_run hook to extend")

describe_srv("sbxd policy reload", function()
  local srv, policy_path, sid
  local JSON = "content-type: application/json"

  local function run(cmd)
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", ('{"cmd":"%s"}'):format(cmd))
    return body, status
  end

  setup(function()
    policy_path = os.tmpname()
    write(policy_path, DEFAULT)
    srv = assert(H.start {
      tokens = { alice = "tok-alice-reload-0123456789abcdef", root = "tok-root-reload-0123456789abcdef" },
      args = { "--policy", policy_path, "--admin-tenant", "root" },
    })
    local body = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    sid = H.json_field(body, "id")
    assert.is_truthy(sid, body)
  end)

  teardown(function()
    if srv then srv:cleanup() end
    os.remove(policy_path)
  end)

  it("allows the word before the reload", function()
    local body, status = run("echo forbidden-word")
    assert.equal(200, status, body)
    assert.is_truthy(body:find("forbidden-word", 1, true), body)
  end)

  it("applies a new policy after SIGHUP, to new sessions, keeping open ones", function()
    write(policy_path, STRICTER)
    os.execute(("kill -HUP %d"):format(srv.pid))
    local deadline = os.time() + 5
    repeat
      os.execute("sleep 0.1")
    until srv:log():find("event=policy_reload ok=true", 1, true) or os.time() > deadline
    assert.is_truthy(srv:log():find("event=policy_reload ok=true", 1, true), srv:log())
    -- the session opened under the old policy keeps it (no reapply) and is still there
    local body, status = run("echo forbidden-word")
    assert.equal(200, status, body)
    assert.is_truthy(body:find("forbidden-word", 1, true), body)
    -- a new session gets the new policy
    local b2 = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    local sid2 = H.json_field(b2, "id")
    local denied = srv:curl("/v1/sessions/" .. sid2 .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"echo forbidden-word"}')
    assert.is_truthy(denied:find("PolicyDenied", 1, true), denied)
    assert.is_truthy(denied:find("no forbidden-word here", 1, true), denied)
  end)

  it("keeps the previous policy when the new file is broken, and says why", function()
    write(policy_path, "return { this is not lua")
    local body, status = srv:curl("/v1/admin/reload-policy", "-X", "POST",
      "-H", "Authorization: Bearer " .. srv.token.root)
    assert.equal(422, status, body)
    assert.is_truthy(body:find("previous one stays", 1, true), body)
    -- still the stricter policy (generation 2) for new sessions
    local b = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    local id = H.json_field(b, "id")
    local denied = srv:curl("/v1/sessions/" .. id .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"echo forbidden-word"}')
    assert.is_truthy(denied:find("PolicyDenied", 1, true), denied)
  end)

  it("lets only the admin tenant reload through the route", function()
    write(policy_path, DEFAULT)
    local body, status = srv:curl("/v1/admin/reload-policy", "-X", "POST", "-H", srv:auth())
    assert.equal(403, status, body)
    body, status = srv:curl("/v1/admin/reload-policy", "-X", "POST")
    assert.equal(401, status, body)
    body, status = srv:curl("/v1/admin/reload-policy", "-X", "POST",
      "-H", "Authorization: Bearer " .. srv.token.root)
    assert.equal(200, status, body)
    assert.is_truthy(body:find('"reloaded":true', 1, true), body)
    -- the default policy is back for new sessions
    local b = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    local id = H.json_field(b, "id")
    local ok = srv:curl("/v1/sessions/" .. id .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"echo forbidden-word"}')
    assert.is_falsy(ok:find("PolicyDenied", 1, true), ok)
    -- and the first session survived all three reloads
    local alive = run("echo still-here")
    assert.is_truthy(alive:find("still-here", 1, true), alive)
  end)
end)

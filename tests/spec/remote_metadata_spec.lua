-- remote_metadata_spec: a remote session's metadata as the reference
-- exposes it (issue 17 row 8): url and ip on the Lua object and in the
-- HTTP GET, lookup by name (only the token's sessions), a handle string
-- that attaches from another process, and SessionClosed (410) once the
-- owner closed the session, for the owner and for reference holders.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local sbx = T.sbx
local errors = T.errors

local runnable = H.available() and T.has_core() and H.have("curl") and pcall(require, "sbx.remote.http")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl)") end

local function raises(kind, f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected " .. kind)
  assert.is_true(errors.is(e, kind), "expected " .. kind .. ", got " .. tostring(e))
  return e
end

-- Run a Lua script in another sbxlua process: its output and exit status.
local function other_process(script, ...)
  local dir = T.tmpdir()
  local f = assert(io.open(dir .. "/other.lua", "w"))
  f:write(script)
  f:close()
  local args = {}
  for i, a in ipairs { ... } do args[i] = H.q(a) end
  local p = io.popen(("%s %s %s 2>&1; echo rc=$?"):format(H.q(H.BIN .. "/sbxlua"), H.q(dir .. "/other.lua"),
    table.concat(args, " ")))
  local out = p:read("*a")
  p:close()
  return out
end

local ATTACH = [[
local sbx = require "sbx"
local ok, ref = pcall(sbx.attach, arg[1])
if not ok then print("error " .. tostring(ref.kind) .. ": " .. tostring(ref.message)) os.exit(3) end
print("owner=" .. tostring(ref.is_owner) .. " name=" .. ref.name)
print("data=" .. ref:exec("cat data.txt").stdout)
ref:close()
]]

describe_srv("remote session metadata", function()
  local srv

  setup(function()
    srv = assert(H.start {})
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  it("url and ip on the session object and in GET of the session (curl)", function()
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns" }
    finally(function() pcall(s.close, s) end)
    assert.equal(srv.url .. "/v1/sessions/" .. s.id, s.url)
    assert.equal("127.0.0.1", s.ip) -- the harness listens on 127.0.0.1
    local body, status = srv:curl("/v1/sessions/" .. s.id, "-H", srv:auth("alice"))
    assert.equal(200, status, body)
    assert.equal(s.url, H.json_field(body, "url"))
    assert.equal("127.0.0.1", H.json_field(body, "ip"))
    assert.equal(s.name, H.json_field(body, "name"))
    -- The url is where the session can be inspected: GET it as it is.
    local out = io.popen(("curl -s --http2-prior-knowledge -H %s %s"):format(H.q(srv:auth("alice")),
      H.q(s.url))):read("*a")
    assert.equal(s.id, H.json_field(out, "id"))
  end)

  it("finds a session by name, among the token's own sessions only", function()
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns",
      name = "meta.agent_1" }
    finally(function() pcall(s.close, s) end)
    local o = sbx.remote.lookup { endpoint = srv.url, token = srv.token.alice, name = "meta.agent_1" }
    assert.is_table(o)
    assert.equal(s.id, o.id)
    assert.is_true(o.is_owner)
    assert.equal("hi\n", o:exec("echo hi").stdout)
    o._tr.conn:close()
    -- Another tenant does not see it; an unknown name is nil, why.
    local none, why = sbx.remote.lookup { endpoint = srv.url, token = srv.token.bob, name = "meta.agent_1" }
    assert.is_nil(none)
    assert.matches("no open session named", why)
    assert.is_nil((sbx.remote.lookup { endpoint = srv.url, token = srv.token.alice, name = "nobody" }))
    -- curl: ?name= filters (percent-decoded); bob's list is empty.
    local body, status = srv:curl("/v1/sessions?name=meta%2Eagent_1", "-H", srv:auth("alice"))
    assert.equal(200, status, body)
    assert.equal(s.id, H.json_field(body, "id"))
    body, status = srv:curl("/v1/sessions?name=meta%2Eagent_1", "-H", srv:auth("bob"))
    assert.equal(200, status, body)
    assert.is_nil(H.json_field(body, "id"))
    body, status = srv:curl("/v1/sessions?tenant=alice", "-H", srv:auth("alice"))
    assert.equal(400, status, body)
    -- A name names one open session of a tenant.
    local e = raises("InvalidArgument", sbx.remote.session, { endpoint = srv.url, token = srv.token.alice,
      backend = "userns", name = "meta.agent_1" })
    assert.equal("name", e.option)
  end)

  it("a handle string attaches from another process; SessionClosed once the owner closed it", function()
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns",
      name = "handed" }
    finally(function() pcall(s.close, s) end)
    s:put_bytes("data.txt", "shared")
    local str = tostring(s:handle())
    assert.matches("^sbx%+remote:", str)
    assert.equal(str, tostring(sbx.remote.parse_handle(str)))
    local out = other_process(ATTACH, str)
    assert.matches("owner=false name=handed", out, 1, true)
    assert.matches("data=shared", out, 1, true)
    assert.matches("rc=0", out, 1, true)
    -- Control: a forged token for the same session is an auth failure,
    -- so the 410 below is the closed session's, not any bad token's.
    local forged = str:gsub("#sbxr_(%x+)_%x+$", "#sbxr_%1_" .. ("0"):rep(32))
    out = other_process(ATTACH, forged)
    assert.matches("error PolicyDenied", out, 1, true)
    local ref = sbx.attach(str) -- attached before the close
    local ref_token = s._ref_token
    s:close()
    local e = raises("SessionClosed", ref.exec, ref, "true")
    assert.matches("closed", e.message)
    out = other_process(ATTACH, str)
    assert.matches("error SessionClosed", out, 1, true)
    assert.matches("rc=3", out, 1, true)
    -- curl: 410 SessionClosed for the owner and the reference token,
    -- 404 for another tenant (it learns nothing).
    local body, status = srv:curl("/v1/sessions/" .. s.id, "-H", srv:auth("alice"))
    assert.equal(410, status, body)
    assert.equal("SessionClosed", H.json_field(body, "kind"))
    body, status = srv:curl("/v1/sessions/" .. s.id .. "/runs", "-H", "Authorization: Bearer " .. ref_token,
      "-d", '{"cmd":"true"}')
    assert.equal(410, status, body)
    body, status = srv:curl("/v1/sessions/" .. s.id, "-H", srv:auth("bob"))
    assert.equal(404, status, body)
  end)

  it("an unknown option names only what a remote client may set (issue 17 row 9)", function()
    local e = raises("InvalidArgument", sbx.remote.session, { endpoint = srv.url, token = srv.token.alice,
      backend = "userns", memroy_mb = 64 })
    assert.equal("memroy_mb", e.option)
    assert.matches("memory_mb", e.message, 1, true) -- the list is there
    for _, k in ipairs { "proxy_host", "policy", "work_dir", "state_dir", "warm_runs", "caller", "wait" } do
      assert.is_nil(e.message:find(k, 1, true), k .. " offered in: " .. e.message)
    end
    -- On-device the host's own options stay offered, the internal ones not.
    e = raises("InvalidArgument", sbx.session, { memroy_mb = 64 })
    assert.matches("work_dir", e.message, 1, true)
    assert.is_nil(e.message:find("proxy_host", 1, true), e.message)
  end)

  it("session_close log lines carry a real timestamp", function()
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns" }
    s:close()
    local line = srv:log():match("[^\n]*event=session_close session=" .. s.id .. "[^\n]*")
    assert.is_string(line, srv:log())
    assert.matches("^ts=%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d", line)
  end)
end)

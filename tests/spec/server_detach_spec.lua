-- server_detach_spec: detached runs (POST .../runs with detach = true) keep
-- going when the client goes, are named by a run id and can be re-attached
-- (GET .../runs/{run_id}) for the output kept meanwhile (bounded, oldest
-- dropped with a marker), then the live output and the exit.  Driven with
-- curl and with the Lua client against a real sbxd on 127.0.0.1:0.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local runnable = H.available() and T.has_core() and H.have("curl")
local function raises(kind, f, ...)
  local errors = require "sbx.errors"
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected " .. kind)
  assert.is_true(errors.is(e, kind), "expected " .. kind .. ", got " .. tostring(e))
  return e
end

local describe_srv = runnable and describe or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core and curl)") end

describe_srv("sbxd detached runs", function()
  local sbx = require "sbx"
  local srv, sid
  local JSON = "content-type: application/json"

  setup(function()
    srv = assert(H.start {})
    local b = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    sid = assert(H.json_field(b, "id"))
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  local function post_run(body, max_time)
    local hdr = srv.dir .. "/hdr.txt"
    local out = H.sh(("curl -s --http2-prior-knowledge --max-time %s -D %s -H %s -H %s -d %s %s/v1/sessions/%s/runs"):format(
      max_time, hdr, H.q(srv:auth()), H.q(JSON), H.q(body), srv.url, sid))
    local f = io.open(hdr) local h = f and f:read("*a") or "" if f then f:close() end
    return out, h
  end

  it("keeps a detached run when curl goes, names it, and re-attaches to its output and exit", function()
    local marker = "detach-curl-" .. os.time()
    local out, hdr = post_run(('{"cmd":"echo first; sleep 1; echo %s-after; exit 3","detach":true}'):format(marker), "0.5")
    local id = out:match('{"type":"run","run_id":"(%x+)"}')
    assert.is_truthy(id, out)
    assert.equal(32, #id)
    assert.matches("x%-sbx%-run%-id: " .. id, hdr)
    assert.matches('"data":"first\\n"', out)
    assert.is_nil(out:find('"type":"exit"', 1, true))
    -- the run goes on without a client
    os.execute("sleep 0.2")
    assert.equal(1, H.count_procs(marker .. "-after"))
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth())
    assert.equal(200, status)
    assert.is_truthy(body:find('"data":"' .. marker .. '-after\\n"', 1, true), body)
    assert.matches('"type":"exit","returncode":3', body)
    -- read to its end: gone
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth())
    assert.equal(404, status)
    assert.equal("NotFound", H.json_field(body, "kind"))
  end)

  it("still kills a run that was not detached when its client goes", function()
    local marker = "nodetach-" .. os.time()
    post_run(('{"cmd":"sleep 1; echo %s"}'):format(marker), "0.3")
    os.execute("sleep 0.3")
    assert.equal(0, H.count_procs("sleep 1; echo " .. marker))
    os.execute("sleep 1")
    assert.is_nil(srv:log():find(marker, 1, true))
  end)

  it("answers 400 naming detach when it is not a boolean", function()
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"true","detach":"yes"}')
    assert.equal(400, status)
    assert.equal("detach", H.json_field(body, "option"))
  end)

  it("does not let another tenant, a wrong id or a second client attach", function()
    local out = post_run('{"cmd":"sleep 2","detach":true}', "0.3")
    local id = assert(out:match('"run_id":"(%x+)"'))
    local _, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth("bob"))
    assert.equal(404, status)
    _, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. ("0"):rep(32), "-H", srv:auth())
    assert.equal(404, status)
    -- one client attached at a time
    local first = io.popen(("curl -s --http2-prior-knowledge --max-time 5 -H %s %s/v1/sessions/%s/runs/%s"):format(
      H.q(srv:auth()), srv.url, sid, id))
    os.execute("sleep 0.5")
    local body
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth())
    assert.equal(409, status)
    assert.equal("Conflict", H.json_field(body, "kind"))
    local got = first:read("*a")
    first:close()
    assert.matches('"type":"exit","returncode":0', got)
  end)

  it("refuses an Accept that names the other format (406)", function()
    local out = post_run('{"cmd":"sleep 0.5","detach":true}', "0.2")
    local id = assert(out:match('"run_id":"(%x+)"'))
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth(),
      "-H", "accept: application/msgpack")
    assert.equal(406, status, body)
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth())
    assert.equal(200, status)
    assert.matches('"type":"exit"', body)
  end)

  describe("with the Lua client", function()
    local s
    setup(function()
      s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    end)
    teardown(function() if s then s:close() end end)

    it("run{detach=true} gives p.run_id; attach_run streams what came meanwhile, then live output", function()
      local p = s:run("echo one; sleep 0.6; echo two; sleep 0.6; echo three; exit 5", { detach = true })
      assert.matches("^%x+$", p.run_id)
      assert.equal(32, #p.run_id)
      assert.equal("one", p:lines()())
      p:kill() -- a detached run: this only lets go of it
      assert.equal("detached", p.termination_reason)
      os.execute("sleep 0.9")
      local q = s:attach_run(p.run_id)
      local lines = {}
      for l in q:lines() do lines[#lines + 1] = l end
      assert.same({ "two", "three" }, lines)
      assert.equal(5, q:wait())
      assert.equal(5, q.returncode)
      local e = raises("InvalidArgument", s.attach_run, s, p.run_id)
      assert.equal("run_id", e.option)
      raises("InvalidArgument", s.attach_run, s, "not hex!")
      raises("InvalidArgument", s.run, s, "true", { detach = 1 })
    end)

    it("keeps at most about 1 MiB for an absent client, the oldest dropped with a marker", function()
      local p = s:run("head -c 3000000 /dev/zero | tr '\\0' a; echo; echo end", { detach = true })
      local id = p.run_id
      p:kill()
      os.execute("sleep 1.5")
      local q = s:attach_run(id)
      local out = q:communicate()
      assert.equal(0, q.returncode)
      assert.is_true(q.dropped_events > 0)
      assert.is_true(q.dropped_bytes > 1000000)
      assert.is_true(#out <= 1024 * 1024 + 65536, tostring(#out))
      assert.is_true(#out > 512 * 1024, tostring(#out))
      assert.matches("a\nend\n$", out)
    end)
  end)
end)

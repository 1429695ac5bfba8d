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

local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core and curl)") end

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

  -- POST a run with curl in the background, its output and headers to
  -- files: the test decides when this client goes (after what it waits
  -- for has arrived), never a --max-time racing the machine's load.
  local nbg = 0
  local function post_bg(body)
    nbg = nbg + 1
    local base = ("%s/bg%d"):format(srv.dir, nbg)
    -- The body from a file: curl's own argv must not carry the markers
    -- the test counts processes by.
    local f = assert(io.open(base .. ".body", "w"))
    f:write(body)
    f:close()
    os.execute(("curl -sN --http2-prior-knowledge --max-time 300 -D %s -H %s -H %s -d @%s %s/v1/sessions/%s/runs "
      .. ">%s 2>&1 </dev/null & echo $! >%s"):format(base .. ".hdr", H.q(srv:auth()), H.q(JSON), H.q(base .. ".body"),
      srv.url, sid, base .. ".out", base .. ".pid"))
    local c = {}
    function c.out() return T.read_file(base .. ".out") or "" end
    function c.hdr() return T.read_file(base .. ".hdr") or "" end
    function c.until_has(text)
      return T.wait_for(function() return c.out():find(text, 1, true) ~= nil end, 120)
    end
    -- The client goes: curl killed, and gone.
    function c.go()
      local pid = tonumber((T.read_file(base .. ".pid") or ""):match("%d+"))
      os.execute("kill " .. pid .. " 2>/dev/null")
      -- (LuaJIT's os.execute gives the exit status: 0 while it lives)
      assert.is_true(T.wait_for(function() return os.execute("kill -0 " .. pid .. " 2>/dev/null") ~= 0 end, 60))
    end
    return c
  end
  -- sbxd has let go of the client of detached run id (it logs it).
  local function detached(id)
    return T.wait_for(function() return srv:log():find("event=run_detached session=%x+ run=" .. id) end, 120)
  end

  it("keeps a detached run when curl goes, names it, and re-attaches to its output and exit", function()
    local marker = "detach-curl-" .. os.time()
    -- The run waits for a file the test puts once curl is gone and sbxd
    -- has let go of it: it can only still be there because it was kept.
    local c = post_bg(('{"cmd":"echo first; while [ ! -e gate ]; do sleep 0.05; done; echo %s-after; exit 3",'
      .. '"detach":true}'):format(marker))
    assert.is_true(c.until_has('"data":"first'), c.out())
    c.go()
    local out, hdr = c.out(), c.hdr()
    local id = out:match('{"type":"run","run_id":"(%x+)"}')
    assert.is_truthy(id, out)
    assert.equal(32, #id)
    assert.matches("x%-sbx%-run%-id: " .. id, hdr)
    assert.matches('"data":"first\\n"', out)
    assert.is_nil(out:find('"type":"exit"', 1, true))
    -- the run goes on without a client
    assert.is_truthy(detached(id), srv:log())
    assert.equal(1, H.count_procs(marker .. "-after"))
    local _, put = srv:curl("/v1/sessions/" .. sid .. "/files/gate", "-X", "PUT", "-H", srv:auth(), "--data-binary", "")
    assert.equal(200, put)
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth())
    assert.equal(200, status)
    assert.is_truthy(body:find('"data":"' .. marker .. '-after\\n"', 1, true), body)
    assert.matches('"type":"exit","returncode":3', body)
    -- read to its end: gone
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth())
    assert.equal(404, status)
    assert.equal("NotFound", H.json_field(body, "kind"))
  end)

  it("serves everyone else while a detached run with no client writes as fast as it can", function()
    -- Its pipe is never empty: read while it came, sbxd's loop never got
    -- back to anyone (/healthz went unanswered for as long as it ran).
    -- JSON (the default), whose escaping of NULs was the costly part.
    local b = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    local own = assert(H.json_field(b, "id"))
    local keep = sid
    sid = own
    local c = post_bg('{"cmd":"cat /dev/zero","detach":true}')
    sid = keep
    assert.is_true(c.until_has('"data":"\\u0000'), c.out())
    c.go()
    local id = c.out():match('{"type":"run","run_id":"(%x+)"}')
    assert.is_truthy(detached(id), srv:log())
    -- Control: it is still writing (its record keeps the newest output).
    assert.is_true(H.count_procs("cat /dev/zero") >= 1)
    for _ = 1, 3 do
      local body, status = srv:curl("/healthz")
      assert.equal(200, status, body)
    end
    -- What it kept: the newest output, behind the drop marker (read for
    -- 2 s, then this client goes; the run goes on).
    local body = srv:curl("/v1/sessions/" .. own .. "/runs/" .. id, "-H", srv:auth(), "--max-time", "2")
    assert.is_truthy(body:find('"type":"dropped"', 1, true), body:sub(1, 200))
    local _, status = srv:curl("/v1/sessions/" .. own, "-X", "DELETE", "-H", srv:auth())
    assert.equal(200, status)
    assert.is_true(T.wait_for(function() return H.count_procs("cat /dev/zero") == 0 end, 60))
  end)

  it("still kills a run that was not detached when its client goes", function()
    -- The client goes once the run is seen; the run's 300 s sleep can only
    -- be gone in time because sbxd killed it.
    local marker = "nodetach-" .. os.time()
    local c = post_bg(('{"cmd":"sleep 300; echo %s"}'):format(marker))
    assert.is_true(T.wait_for(function() return H.count_procs("sleep 300; echo " .. marker) == 1 end, 120), c.out())
    c.go()
    assert.is_true(T.wait_for(function() return H.count_procs("sleep 300; echo " .. marker) == 0 end, 120))
    assert.is_nil(srv:log():find(marker, 1, true))
  end)

  it("answers 400 naming detach when it is not a boolean", function()
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"true","detach":"yes"}')
    assert.equal(400, status)
    assert.equal("detach", H.json_field(body, "option"))
  end)

  it("does not let another tenant, a wrong id or a second client attach", function()
    -- Held until the test puts "gate2": the run is there for every probe;
    -- its ticks show a client that it is attached.
    local c = post_bg('{"cmd":"echo ready; while [ ! -e gate2 ]; do echo tick; sleep 0.1; done","detach":true}')
    assert.is_true(c.until_has('"data":"ready'), c.out())
    c.go()
    local id = assert(c.out():match('"run_id":"(%x+)"'))
    assert.is_truthy(detached(id), srv:log())
    local _, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth("bob"))
    assert.equal(404, status)
    _, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. ("0"):rep(32), "-H", srv:auth())
    assert.equal(404, status)
    -- one client attached at a time
    local firstf = srv.dir .. "/first.out"
    local first = io.popen(("curl -sN --http2-prior-knowledge --max-time 300 -H %s %s/v1/sessions/%s/runs/%s"
      .. " | tee %s"):format(
      H.q(srv:auth()), srv.url, sid, id, firstf))
    -- Attached: output has reached it.
    assert.is_true(T.wait_for(function() return (T.read_file(firstf) or ""):find("tick", 1, true) ~= nil end, 120))
    local body
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs/" .. id, "-H", srv:auth())
    assert.equal(409, status)
    assert.equal("Conflict", H.json_field(body, "kind"))
    local _, put = srv:curl("/v1/sessions/" .. sid .. "/files/gate2", "-X", "PUT", "-H", srv:auth(),
      "--data-binary", "")
    assert.equal(200, put)
    local got = first:read("*a")
    first:close()
    assert.matches('"type":"exit","returncode":0', got)
  end)

  it("refuses an Accept that names the other format (406)", function()
    local c = post_bg('{"cmd":"sleep 0.5","detach":true}')
    assert.is_true(c.until_has('"run_id"'), c.out())
    c.go()
    local id = assert(c.out():match('"run_id":"(%x+)"'))
    assert.is_truthy(detached(id), srv:log())
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
      -- "two" and "three" come only once the client has gone (a file the
      -- test puts), and the attach waits until the run has ended: all of
      -- it is what sbxd kept meanwhile.
      local mark = "sbx-detach-lua-" .. math.random(1e9)
      local p = s:run("echo one; while [ ! -e g3 ]; do sleep 0.05; done; echo two; echo three; exit 5 # " .. mark,
        { detach = true })
      assert.matches("^%x+$", p.run_id)
      assert.equal(32, #p.run_id)
      assert.equal("one", p:lines()())
      p:kill() -- a detached run: this only lets go of it
      assert.equal("detached", p.termination_reason)
      assert.is_truthy(detached(p.run_id), srv:log())
      s:put_bytes("g3", "")
      assert.is_true(T.wait_for(function() return H.count_procs(mark) == 0 end, 120))
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
      -- Attached only once all 3 MB are out (the run then makes a file the
      -- test waits for): it all came while the client was absent.
      local p = s:run("head -c 3000000 /dev/zero | tr '\\0' a; echo; echo end; : > big-done", { detach = true })
      local id = p.run_id
      p:kill()
      assert.is_true(T.wait_for(function() return (pcall(s.get_bytes, s, "big-done")) end, 120))
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

-- server_client_spec: the Lua remote client (sbx.remote) against a real
-- sbxd: the on-device API over HTTP/2, live streaming, handles, errors,
-- limits (429), lifetimes, TLS and unix sockets.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local sbx = T.sbx
local errors = T.errors

local runnable = H.available() and T.has_core() and H.have("curl") and pcall(require, "sbx.remote.http")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl)") end

local clock = require "sbx.core"
local function now() return clock.monotonic_ms() / 1000 end

local function raises(kind, f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected " .. kind)
  assert.is_true(errors.is(e, kind), "expected " .. kind .. ", got " .. tostring(e))
  return e
end

describe_srv("sbx.remote client", function()
  local srv, s

  setup(function()
    srv = assert(H.start { args = { "--max-runs", "3", "--max-sessions", "3" } })
    s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns" }
  end)
  teardown(function()
    if s then pcall(s.close, s) end
    if srv then srv:cleanup() end
  end)

  it("opens a session with the on-device fields", function()
    assert.matches("^%x+$", s.id)
    assert.equal(32, #s.id)
    assert.equal("userns", s.backend)
    assert.is_true(s.is_owner)
    assert.equal(srv.url, s.endpoint)
    assert.is_true(s:alive())
  end)

  it("streams lines as they are produced (first line well before the exit)", function()
    -- Order, not seconds: the run waits for a file the test puts only
    -- after it has read "first", so "first" came while the run went on.
    local t0 = now()
    local p = s:run("echo first; while [ ! -e go ]; do sleep 0.02; done; sleep 1; echo second", { timeout_s = 120 })
    local it = p:lines()
    assert.equal("first", it())
    s:put_bytes("go", "")
    assert.equal("second", it())
    assert.is_nil(it())
    assert.equal(0, p:wait())
    local t_all = now() - t0
    assert.is_true(t_all >= 1.0, "whole run took " .. t_all .. " s")
    s:exec("rm -f go")
  end)

  it("exec, communicate, non-zero exits as data, read, stderr", function()
    local r = s:exec("echo out; echo err >&2; exit 4")
    assert.equal("out\n", r.stdout)
    assert.equal("err\n", r.stderr)
    assert.equal(4, r.returncode)
    assert.is_false(r.ok)
    assert.equal("userns", r.backend)
    assert.equal("", r.termination_reason)
    local p = s:run("printf abc; printf xyz >&2")
    local out, err = p:communicate()
    assert.equal("abc", out)
    assert.equal("xyz", err)
    p = s:run("printf 123")
    assert.equal("123", p:read())
    assert.is_nil(p:read())
    p = s:run("echo e1 >&2; echo e2 >&2")
    local lines = {}
    for l in p:lines("stderr") do lines[#lines + 1] = l end
    assert.same({ "e1", "e2" }, lines)
  end)

  it("exec{check=true} and run_code raise SandboxCommandError", function()
    local e = raises("SandboxCommandError", s.exec, s, "exit 2", { check = true })
    assert.equal(2, e.result.returncode)
    assert.equal("hi\n", s:run_code("echo hi", { script_type = "shell" }))
    raises("SandboxCommandError", s.run_code, s, "exit 1", { script_type = "shell" })
  end)

  it("timeouts, stdin and env go through", function()
    local r = s:exec("sleep 5", { timeout_s = 0.3 })
    assert.equal("timeout", r.termination_reason)
    r = s:exec("cat", { stdin = "fed" })
    assert.equal("fed", r.stdout)
    r = s:exec("echo $FOO", { env = { FOO = "bar" } })
    assert.equal("bar\n", r.stdout)
  end)

  it("put_bytes / get_bytes round-trip binary data, and refuse escapes", function()
    local data = "bin\0\1\2\255" .. ("x"):rep(100000)
    s:put_bytes("dir/f.bin", data)
    assert.equal(data, s:get_bytes("dir/f.bin"))
    assert.equal("100007\n", s:exec("wc -c < dir/f.bin").stdout)
    raises("InvalidArgument", s.get_bytes, s, "../x")
    raises("InvalidArgument", s.get_bytes, s, "/etc/passwd")
    raises("InvalidArgument", s.get_bytes, s, "missing")
    raises("InvalidArgument", s.put_bytes, s, "x", 5)
  end)

  it("bad options raise InvalidArgument naming the option, from run() itself", function()
    local e = raises("InvalidArgument", s.run, s, "true", { bogus = 1 })
    assert.equal("bogus", e.option)
    e = raises("InvalidArgument", s.exec, s, "true", { timeout_s = "x" })
    assert.equal("timeout_s", e.option)
    raises("InvalidArgument", s.exec, s, 42)
    e = raises("SandboxExecutionError", s.exec, s, { "/no/such/binary" })
    assert.is_string(e.reason)
  end)

  it("p:kill() resets the stream and the server kills the run", function()
    local marker = "sbx-kill-marker-" .. math.random(1e9)
    local p = s:run("sleep 60; : " .. marker)
    finally(function() pcall(p.kill, p) end)
    -- One process: the shell.  Its child for sleep carries the shell's
    -- command line too until it execs (2 seen under load): wait that out.
    local deadline = now() + 60
    while H.count_procs(marker) ~= 1 and now() < deadline do s:exec("true") end
    assert.equal(1, H.count_procs(marker))
    assert.is_true(p:kill())
    assert.equal("killed", p.termination_reason)
    deadline = now() + 60
    while H.count_procs(marker) > 0 and now() < deadline do os.execute("sleep 0.05") end
    assert.equal(0, H.count_procs(marker))
    assert.equal("ok\n", s:exec("echo ok").stdout)
  end)

  it("handles: attach in reference mode runs/puts/gets; close only detaches", function()
    local h = s:handle()
    assert.equal("sbx.remote", h.kind)
    assert.equal(s.id, h.id)
    assert.matches("^sbxr_", h.token)
    local ref = sbx.remote.attach(h)
    assert.is_false(ref.is_owner)
    assert.equal("r\n", ref:exec("echo r").stdout)
    ref:put_bytes("from-ref", "v")
    assert.equal("v", s:get_bytes("from-ref"))
    ref:close()
    raises("SessionClosed", ref.exec, ref, "true")
    assert.equal("still\n", s:exec("echo still").stdout)
    raises("InvalidArgument", sbx.remote.attach, { kind = "sbx.local", id = s.id })
  end)

  it("other tenants cannot see the session (SessionClosed, as for a gone session)", function()
    local h = s:handle()
    h.token = srv.token.bob
    raises("SessionClosed", sbx.remote.attach, h)
  end)

  it("a wrong token is PolicyDenied(auth)", function()
    local e = raises("PolicyDenied", sbx.remote.session, { endpoint = srv.url, token = "nope-nope-nope-nope" })
    assert.equal("auth", e.rule)
  end)

  it("per-tenant limits answer 429: PolicyDenied(limits) with retry_after_s", function()
    local extra = {}
    -- s is alice's first session; the limit is 3
    extra[1] = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    extra[2] = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    local e = raises("PolicyDenied", sbx.remote.session, { endpoint = srv.url, token = srv.token.alice })
    assert.equal("limits", e.rule)
    assert.equal(1, e.retry_after_s)
    -- bob is not affected
    local b = sbx.remote.session { endpoint = srv.url, token = srv.token.bob }
    b:close()
    for _, x in ipairs(extra) do x:close() end
    -- concurrent runs: 3
    local ps = { s:run("sleep 2"), s:run("sleep 2"), s:run("sleep 2") }
    e = raises("PolicyDenied", s.run, s, "true")
    assert.equal("limits", e.rule)
    local out = H.sh(("curl -s -o /dev/null -D - --http2-prior-knowledge -H %s -d '{\"cmd\":\"true\"}'"
      .. " %s/v1/sessions/%s/runs"):format(
      H.q(srv:auth()), srv.url, s.id))
    assert.matches("HTTP/2 429", out)
    assert.matches("retry%-after: 1", out)
    for _, p in ipairs(ps) do p:kill() end
    local deadline = now() + 5
    local ok
    repeat ok = pcall(s.exec, s, "true") until ok or now() > deadline
    assert.is_true(ok)
  end)

  it("many concurrent runs multiplex over one connection", function()
    local ps = {}
    for i = 1, 3 do ps[i] = s:run("echo " .. i) end
    for i = 1, 3 do assert.equal(tostring(i) .. "\n", (ps[i]:communicate())) end
  end)

  it("close() ends the session; the session then raises SessionClosed", function()
    local t = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    local id = t.id
    t:close()
    raises("SessionClosed", t.exec, t, "true")
    -- sbxd remembers the close (issue 17): 410 SessionClosed, not 404.
    local _, status = srv:curl("/v1/sessions/" .. id, "-H", srv:auth())
    assert.equal(410, status)
  end)
end)

describe_srv("sbx.remote transport failures", function()
  it("a dead endpoint is SandboxExecutionError with a reason, quickly", function()
    local t0 = now()
    local ok, e = pcall(sbx.remote.session, { endpoint = "http://127.0.0.1:1", token = "x-x-x-x-x-x-x-x" })
    assert.is_false(ok)
    assert.is_true(errors.is(e, "SandboxExecutionError"), tostring(e))
    assert.is_string(e.reason)
    -- Refused, not given up on after a wait (what "quickly" means here).
    assert.is_nil(tostring(e.reason):lower():find("time[ds]? ?out"), e.reason)
    io.stderr:write(("server_client: a dead endpoint failed after %.0f ms\n"):format((now() - t0) * 1000))
  end)

  it("a server killed mid-run ends the run with SandboxExecutionError, not a hang", function()
    local srv = assert(H.start {})
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    local p = s:run("echo started; sleep 30")
    assert.equal("started", p:lines()())
    srv:stop("KILL")
    local t0 = now()
    local ok, e = pcall(p.wait, p)
    assert.is_false(ok)
    assert.is_true(errors.is(e, "SandboxExecutionError"), tostring(e))
    -- The server's death was noticed, not waited out (the run's sleep is 30 s).
    assert.is_nil(tostring(e):lower():find("time[ds]? ?out"), tostring(e))
    io.stderr:write(("server_client: a killed server ended the run after %.0f ms\n"):format((now() - t0) * 1000))
    srv:cleanup()
  end)

  it("a connection sbxd closed as idle is replaced: runs, uploads and opens go on", function()
    -- sbxd closes connections idle for 1 s here; the client would reuse one
    -- up to 5 s idle, so each round below finds its connection closed and
    -- opens another, whose first request (a POST with a body) upgrades to
    -- h2c: the front once held such a body back from h2o, which waited for
    -- it, and every request after an idle spell ended "Empty reply".
    local srv = assert(H.start { args = { "--conn-idle-timeout-s", "1" } })
    local function idle_closes()
      local body = srv:curl("/metrics", "-H", srv:auth())
      return tonumber(body:match('sbxd_h2_goaway_total{reason="idle_timeout"} (%d+)')) or 0
    end
    local ok, err = pcall(function()
      -- The upgrade with a body, as curl sends it: answered over HTTP/2.
      local body, status = srv:curl("/v1/sessions", "--http2", "-D", "-", "-H", srv:auth(),
        "-H", "content-type: application/json", "-d", "{}")
      assert.equal(201, status, body)
      assert.matches("^HTTP/1%.1 101 .*\nHTTP/2 201", body)
      local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
      for i = 1, 3 do
        local n = idle_closes()
        assert.is_true(T.wait_for(function() return idle_closes() > n end, 30), "sbxd closed no idle connection")
        assert.equal("round " .. i .. "\n", s:exec("echo round " .. i).stdout)
        s:put_bytes("f" .. i, "x" .. i)
        assert.equal("x" .. i, s:get_bytes("f" .. i))
      end
      s:close()
    end)
    srv:cleanup()
    assert(ok, err)
  end)

  it("bad endpoints and tokens are InvalidArgument", function()
    raises("InvalidArgument", sbx.remote.session, { endpoint = "ftp://x", token = "abc" })
    raises("InvalidArgument", sbx.remote.session, { endpoint = "http://127.0.0.1:1" })
  end)
end)

describe_srv("sbxd listeners", function()
  it("serves h2 over TLS (ALPN) and HTTP/1.1 fallback, with a cert made by openssl", function()
    if not H.have("openssl") then pending("openssl missing") return end
    local srv = assert(H.start { tls = true })
    assert.matches("^https://", srv.url)
    local v = H.sh(("curl -s --cacert %s -o /dev/null -w '%%{http_version}' %s/healthz"):format(srv.cert, srv.url))
    assert.equal("2", v)
    v = H.sh(("curl -s --http1.1 --cacert %s -o /dev/null -w '%%{http_version}' %s/healthz"):format(srv.cert, srv.url))
    assert.equal("1.1", v)
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, ca_file = srv.cert }
    assert.equal("tls\n", s:exec("echo tls").stdout)
    s:close()
    -- without the CA the client refuses the server
    local ok, e = pcall(sbx.remote.session, { endpoint = srv.url, token = srv.token.alice })
    assert.is_false(ok)
    assert.is_true(errors.is(e, "SandboxExecutionError"))
    srv:cleanup()
  end)

  it("serves on a unix socket", function()
    local path = os.tmpname() .. ".sock"
    os.remove(path)
    local srv = assert(H.start { listen = "unix:" .. path })
    local out = H.sh(("curl -s --unix-socket %s --http2-prior-knowledge http://x/healthz"):format(path))
    assert.equal("ok\n", out)
    local s = sbx.remote.session { endpoint = "unix:" .. path, token = srv.token.alice }
    assert.equal("unix\n", s:exec("echo unix").stdout)
    s:close()
    srv:cleanup()
  end)

  it("refuses plain text on a non-loopback address without --insecure", function()
    local srv, err = H.start { listen = "0.0.0.0:0" }
    assert.is_nil(srv)
    assert.matches("refusing plain text on a non%-loopback address", err)
  end)

  it("refuses the benchmarks' --no-front except in plain text on loopback", function()
    local srv, err = H.start { listen = "0.0.0.0:0", args = { "--insecure", "--no-front" } }
    assert.is_nil(srv)
    assert.matches("%-%-no%-front is for benchmarks", err)
    srv, err = H.start { tls = true, args = { "--no-front" } }
    assert.is_nil(srv)
    assert.matches("%-%-no%-front is for benchmarks", err)
    -- control: on loopback in plain text it serves (unguarded)
    srv = assert(H.start { args = { "--no-front" } })
    local body, code = srv:curl("/healthz")
    srv:cleanup()
    assert.equals(200, code, body)
  end)
end)

describe_srv("sbxd lifetimes", function()
  it("SIGTERM drains: running runs finish, sessions close, exit 0, no sandbox left", function()
    -- A grace far longer than the run: a loaded machine must not make the
    -- drain cut it (that a drain ends at its grace is sbxd's own spec).
    local srv = assert(H.start { args = { "--drain-grace-ms", "120000" } })
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    local marker = "sbx-drain-marker-" .. math.random(1e9)
    local p = s:run("sleep 0.5; echo done; : " .. marker)
    os.execute("kill -TERM " .. srv.pid)
    assert.equal("done", p:lines()())
    local code = srv:stop("TERM")
    assert.equal(0, code)
    assert.equal(0, H.count_procs(marker))
    assert.equal(0, H.count_procs(srv.dir .. "/tokens"))
    srv:cleanup()
  end)

  it("kill -9 of sbxd leaves no sandbox process behind", function()
    local srv = assert(H.start {})
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    local marker = "sbx-kill9-marker-" .. math.random(1e9)
    local _ = s:run("sleep 60; : " .. marker)
    local deadline = now() + 60
    while H.count_procs(marker) == 0 and now() < deadline do os.execute("sleep 0.05") end
    assert.equal(1, H.count_procs(marker))
    srv:stop("KILL")
    deadline = now() + 60
    while (H.count_procs(marker) > 0 or H.count_procs(srv.dir .. "/tokens") > 0) and now() < deadline do
      os.execute("sleep 0.05")
    end
    assert.equal(0, H.count_procs(marker))
    assert.equal(0, H.count_procs(srv.dir .. "/tokens"))
    srv:cleanup()
  end)

  it("the idle reaper closes sessions nobody uses, not busy ones", function()
    local srv = assert(H.start { args = { "--idle-timeout-s", "1" } })
    local idle = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    local busy = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    -- Busy until the test lets its run end (a file in its work dir), which
    -- it does only once the reaper has closed the idle one: order, not a
    -- 2.2 s sleep that a loaded machine can outlast.
    local p = busy:run("while [ ! -e go ]; do sleep 0.05; done; echo ok", { timeout_s = 300 })
    local deadline = now() + 120
    while not srv:log():find("why=idle", 1, true) and now() < deadline do os.execute("sleep 0.05") end
    assert.is_truthy(srv:log():find("why=idle", 1, true), srv:log())
    raises("SessionClosed", idle.exec, idle, "true")
    assert.equal("still\n", busy:exec("echo still").stdout)
    busy:put_bytes("go", "")
    assert.equal("ok", p:lines()())
    p:wait()
    srv:cleanup()
  end)

  it("the hard ceiling closes sessions", function()
    local srv = assert(H.start { args = { "--hard-ceiling-s", "1" } })
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    local deadline = now() + 60
    local closed
    repeat
      os.execute("sleep 0.2")
      closed = not pcall(s.exec, s, "true")
    until closed or now() > deadline
    assert.is_true(closed)
    raises("SessionClosed", s.exec, s, "true")
    srv:cleanup()
  end)
end)

-- server_api_spec: sbxd's HTTP/2 routes, bodies and errors, driven with
-- curl (--http2-prior-knowledge) against a real sbxd on 127.0.0.1:0.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local msgpack = require "sbx.remote.msgpack"

local runnable = H.available() and T.has_core() and H.have("curl")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core and curl)") end

describe_srv("sbxd HTTP/2 API", function()
  local srv, sid, ref

  setup(function()
    srv = assert(H.start { args = { "--max-body", "65536" }, small_quarantine = true }) -- RSS bounds below
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  local JSON = "content-type: application/json"

  it("answers /healthz without a token, over h2c", function()
    local body, status = srv:curl("/healthz")
    assert.equal(200, status)
    assert.equal("ok\n", body)
    local out = H.sh(("curl -s --http2-prior-knowledge -o /dev/null -w '%%{http_version}' %s/healthz"):format(srv.url))
    assert.equal("2", out)
  end)

  it("talks HTTP/2 to nghttp too (frames, a streamed run)", function()
    if not H.have("nghttp") then pending("nghttp missing (nghttp2-client)") return end
    local out = H.sh(("nghttp -v %s/healthz 2>&1"):format(srv.url))
    assert.matches("recv SETTINGS frame", out)
    assert.matches(":status: 200", out)
    local b = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    local id = H.json_field(b, "id")
    local f = io.open(srv.dir .. "/run.json", "w") f:write('{"cmd":"echo via-nghttp"}') f:close()
    out = H.sh(("nghttp -H %s -H 'content-type: application/json' -d %s %s/v1/sessions/%s/runs 2>&1"):format(
      H.q(srv:auth():gsub("^Authorization", "authorization")), srv.dir .. "/run.json", srv.url, id))
    assert.matches('{"type":"stdout","data":"via%-nghttp\\n"}', out)
    assert.matches('"type":"exit"', out)
    srv:curl("/v1/sessions/" .. id, "-H", srv:auth(), "-X", "DELETE")
  end)

  it("refuses requests without or with a wrong token (401), and counts them", function()
    local body, status = srv:curl("/v1/sessions")
    assert.equal(401, status)
    assert.equal("Unauthorized", H.json_field(body, "kind"))
    status = select(2, srv:curl("/v1/sessions", "-H", "Authorization: Bearer wrong-token-0123456789"))
    assert.equal(401, status)
    body, status = srv:curl("/metrics", "-H", srv:auth())
    assert.equal(200, status)
    local n = tonumber(body:match("sbxd_auth_failures_total (%d+)"))
    assert.is_true(n >= 2)
    -- the token never reaches the log
    assert.is_nil(srv:log():find(srv.token.alice, 1, true))
    assert.is_nil(srv:log():find("wrong-token-0123456789", 1, true))
  end)

  it("POST /v1/sessions opens a session (201) with an unguessable id and a reference token", function()
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"backend":"userns"}')
    assert.equal(201, status, body)
    sid = H.json_field(body, "id")
    assert.matches("^%x+$", sid)
    assert.equal(32, #sid)
    assert.equal("userns", H.json_field(body, "backend"))
    assert.equal(srv.url, H.json_field(body, "endpoint"))
    ref = body:match('"reference":"(sbxr_[^"]+)"')
    assert.is_truthy(ref)
    assert.is_truthy(H.json_field(body, "created_at"))
    assert.is_truthy(H.json_field(body, "name"))
  end)

  it("GET /v1/sessions lists only the caller's sessions; GET one; other tenants get 404", function()
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth())
    assert.equal(200, status)
    assert.is_truthy(body:find(sid, 1, true))
    body, status = srv:curl("/v1/sessions", "-H", srv:auth("bob"))
    assert.equal(200, status)
    assert.is_nil(body:find(sid, 1, true))
    assert.equal('{"sessions":[]}\n', body)
    body, status = srv:curl("/v1/sessions/" .. sid, "-H", srv:auth())
    assert.equal(200, status)
    assert.equal(sid, H.json_field(body, "id"))
    for _, args in ipairs {
      { "/v1/sessions/" .. sid },
      { "/v1/sessions/" .. sid, "-X", "DELETE" },
      { "/v1/sessions/" .. sid .. "/runs", "-H", JSON, "-d", '{"cmd":"true"}' },
      { "/v1/sessions/" .. sid .. "/files/x", "-X", "PUT", "--data-binary", "x" },
      { "/v1/sessions/" .. sid .. "/files/x" },
    } do
      local path = table.remove(args, 1)
      body, status = srv:curl(path, "-H", srv:auth("bob"), unpack(args))
      assert.equal(404, status, path .. " " .. body)
      assert.equal("NotFound", H.json_field(body, "kind"))
    end
  end)

  it("streams a run as NDJSON: output events as they come, then one exit event", function()
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"echo one; echo two >&2; exit 3"}')
    assert.equal(200, status, body)
    local events = {}
    for line in body:gmatch("[^\n]+") do events[#events + 1] = line end
    assert.equal('{"type":"stdout","data":"one\\n"}', events[1])
    assert.equal('{"type":"stderr","data":"two\\n"}', events[2])
    local exit = events[#events]
    assert.equal("exit", H.json_field(exit, "type"))
    assert.equal(3, H.json_field(exit, "returncode"))
    assert.equal("userns", H.json_field(exit, "backend"))
    assert.equal("", H.json_field(exit, "termination_reason"))
    assert.is_number(H.json_field(exit, "runtime_ms"))
  end)

  it("streams msgpack events when asked (Accept / content-type), data as bin", function()
    local payload = msgpack.encode { cmd = "printf 'a\\0b'" }
    local f = io.open(srv.dir .. "/req.mp", "wb") f:write(payload) f:close()
    local out = H.sh(("curl -s --http2-prior-knowledge -H %s -H 'content-type: application/msgpack' " ..
      "-H 'accept: application/msgpack' --data-binary @%s %s/v1/sessions/%s/runs"):format(
      H.q(srv:auth()), srv.dir .. "/req.mp", srv.url, sid))
    local pos, events = 1, {}
    while pos <= #out do
      local ev, npos = msgpack.decode(out, pos)
      assert.is_not_nil(ev, "truncated msgpack stream")
      events[#events + 1] = ev
      pos = npos
    end
    assert.same({ type = "stdout", data = "a\0b" }, events[1])
    assert.equal("exit", events[#events].type)
    assert.equal(0, events[#events].returncode)
  end)

  it("streams megabytes of msgpack output whole and in order, stdout and stderr apart", function()
    -- Several pipe-fulls: sbxd reads stdout straight into its send buffer
    -- (one event per read) while stderr goes the other way; a byte lost,
    -- moved or mixed between the streams shows in the joined data.
    local payload = msgpack.encode { cmd = "seq 1 400000; echo e1 >&2; seq 7 9; echo e2 >&2" }
    local f = io.open(srv.dir .. "/big.mp", "wb") f:write(payload) f:close()
    local out = H.sh(("curl -s --http2-prior-knowledge -H %s -H 'content-type: application/msgpack' " ..
      "-H 'accept: application/msgpack' --data-binary @%s %s/v1/sessions/%s/runs"):format(
      H.q(srv:auth()), srv.dir .. "/big.mp", srv.url, sid))
    local pos, got, n = 1, { stdout = {}, stderr = {} }, 0
    local last
    while pos <= #out do
      local ev, npos = msgpack.decode(out, pos)
      assert.is_not_nil(ev, "truncated msgpack stream")
      if got[ev.type] then
        got[ev.type][#got[ev.type] + 1] = ev.data
        n = n + 1
      end
      last, pos = ev, npos
    end
    local want = {}
    for i = 1, 400000 do want[i] = tostring(i) end
    assert.equal(table.concat(want, "\n") .. "\n7\n8\n9\n", table.concat(got.stdout))
    assert.equal("e1\ne2\n", table.concat(got.stderr))
    assert.is_true(n > 2, "the output came in one event")
    assert.equal("exit", last.type)
    assert.equal(0, last.returncode)
  end)

  it("reports a timeout in the exit event", function()
    local body = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"sleep 5","timeout_s":0.3}')
    local exit = body:match("[^\n]+\n?$")
    assert.equal("timeout", H.json_field(exit, "termination_reason"))
  end)

  it("reports a run that cannot start as one error event", function()
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":["/no/such/program"]}')
    assert.equal(200, status)
    assert.equal("error", H.json_field(body, "type"))
    assert.equal("SandboxExecutionError", H.json_field(body, "kind"))
    assert.equal(-1, H.json_field(body, "returncode"))
  end)

  it("PUT/GET files, with binary content and nested paths", function()
    local f = io.open(srv.dir .. "/blob", "wb") f:write("x\0y\255z") f:close()
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/files/d/e/blob.bin", "-H", srv:auth(),
      "-X", "PUT", "--data-binary", "@" .. srv.dir .. "/blob")
    assert.equal(200, status, body)
    assert.equal(5, H.json_field(body, "size"))
    body, status = srv:curl("/v1/sessions/" .. sid .. "/files/d/e/blob.bin", "-H", srv:auth())
    assert.equal(200, status)
    assert.equal("x\0y\255z", body)
    body = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"wc -c < d/e/blob.bin"}')
    assert.equal('{"type":"stdout","data":"5\\n"}', body:match("^[^\n]+"))
  end)

  it("GET streams a large file: exact bytes, and sbxd never holds it", function()
    -- 160 MiB made inside the sandbox; sbxd's RSS must not grow by anything
    -- like it (held whole, it would grow by at least the file's size, also
    -- under ASan).
    local body = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"head -c 167772160 /dev/urandom > big.bin && sha256sum big.bin | cut -c1-64"}')
    local want = body:match('"data":"(%x+)\\n"')
    assert.is_truthy(want, body)
    local rss0 = srv:rss_kb()
    local got = H.sh(("curl -s --http2-prior-knowledge -H %s %s/v1/sessions/%s/files/big.bin | sha256sum | cut -c1-64")
      :format(H.q(srv:auth()), srv.url, sid))
    assert.are.equal(want, got:gsub("%s", ""))
    local grew = srv:rss_kb() - rss0
    assert.is_true(grew < 48 * 1024, "sbxd grew by " .. grew .. " KiB sending a 160 MiB file")
    srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON, "-d", '{"cmd":"rm big.bin"}')
  end)

  it("file errors: missing file 404, escaping paths 400/404, oversize body 413", function()
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/files/nope", "-H", srv:auth())
    assert.equal(404, status, body)
    body, status = srv:curl("/v1/sessions/" .. sid .. "/files/a%2F..%2F..%2Fetc%2Fpasswd", "-H", srv:auth())
    assert.equal(400, status, body)
    assert.equal("InvalidArgument", H.json_field(body, "kind"))
    assert.equal("path", H.json_field(body, "option"))
    body, status = srv:curl("/v1/sessions/" .. sid .. "/files/%2Fetc%2Fpasswd", "-H", srv:auth())
    assert.equal(400, status, body)
    -- over the session's max_file_bytes: 413
    local b2 = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"max_file_bytes":1000}')
    local small = H.json_field(b2, "id")
    local mid = srv.dir .. "/mid"
    H.sh("head -c 5000 /dev/zero > " .. mid)
    body, status = srv:curl("/v1/sessions/" .. small .. "/files/mid", "-H", srv:auth(), "-X", "PUT",
      "--data-binary", "@" .. mid)
    assert.equal(413, status, body)
    assert.is_truthy(body:find("max_file_bytes", 1, true))
    srv:curl("/v1/sessions/" .. small, "-H", srv:auth(), "-X", "DELETE")
    -- over --max-body: HTTP/1.1 gets 413; HTTP/2 gets RST_STREAM(REFUSED_STREAM)
    -- from h2o 2.2 (documented), so curl gives up without a status.
    local big = srv.dir .. "/big"
    H.sh("head -c 100000 /dev/zero > " .. big)
    local out = H.sh(("curl -s --http1.1 -o /dev/null -w '%%{http_code}' -H %s -X PUT --data-binary @%s"
      .. " %s/v1/sessions/%s/files/big"):format(
      H.q(srv:auth()), big, srv.url, sid))
    assert.equal("413", out)
    status = select(2, srv:curl("/v1/sessions/" .. sid .. "/files/big", "-H", srv:auth(), "-X", "PUT",
      "--data-binary", "@" .. big))
    assert.is_not.equal(200, status)
    status = select(2, srv:curl("/v1/sessions/" .. sid .. "/files/big", "-H", srv:auth()))
    assert.equal(404, status)
  end)

  it("bad bodies get 400 naming the problem", function()
    local cases = {
      { '{"cmd":', "body" },                       -- malformed JSON
      { '{"cmd":"true","bogus":1}', "bogus" },     -- unknown field
      { '{"cmd":5}', "cmd" },                       -- wrong type
      { '{"cmd":"true","timeout_s":"x"}', "timeout_s" },
      { '{"cmd":"true","env":{"A":1}}', "env" },
      { '{"timeout_s":1}', "cmd" },                 -- missing cmd
      { '[1,2]', "body" },
    }
    for _, c in ipairs(cases) do
      local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON, "-d", c[1])
      assert.equal(400, status, c[1] .. " -> " .. body)
      assert.equal("InvalidArgument", H.json_field(body, "kind"))
      assert.is_truthy(body:find(c[2], 1, true), c[1] .. " -> " .. body)
    end
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"backend":7}')
    assert.equal(400, status)
    assert.equal("backend", H.json_field(body, "option"))
    body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"work_dir":"/etc"}')
    assert.equal(400, status)
    assert.equal("work_dir", H.json_field(body, "option"))
    body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"policy":"/tmp/p.lua"}')
    assert.equal(400, status)
    assert.equal("policy", H.json_field(body, "option"))
    body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"nonsense":true}')
    assert.equal(400, status)
    assert.is_truthy(body:find("nonsense", 1, true))
    -- malformed msgpack
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(),
      "-H", "content-type: application/msgpack", "--data-binary", "\193")
    assert.equal(400, status, body)
    assert.is_truthy(body:find("msgpack", 1, true))
    -- unsupported content type
    status = select(2, srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(),
      "-H", "content-type: text/plain", "-d", "x"))
    assert.equal(415, status)
    -- deeply nested JSON
    status = select(2, srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", ("["):rep(100) .. ("]"):rep(100)))
    assert.equal(400, status)
    -- The depth limit is exact, and the same for JSON and msgpack (32
    -- levels, what msgpack-c's unpacker takes): 33 is refused by name.
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"true","env":' .. ("["):rep(32) .. ("]"):rep(32) .. "}")
    assert.equal(400, status, body)
    assert.is_truthy(body:find("nested deeper than 32 levels", 1, true), body)
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"true","env":' .. ("["):rep(31) .. ("]"):rep(31) .. "}")
    assert.equal(400, status, body)
    assert.is_truthy(body:find("env", 1, true) and not body:find("nested", 1, true), body)
  end)

  it("the policy denies what it ceilings (403 PolicyDenied) and /metrics counts it", function()
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"timeout_s":999999999}')
    assert.equal(403, status, body)
    assert.equal("PolicyDenied", H.json_field(body, "kind"))
    body = srv:curl("/metrics", "-H", srv:auth())
    assert.is_true(tonumber(body:match("sbxd_policy_denials_total (%d+)")) >= 1)
  end)

  it("unknown routes 404, wrong methods 405", function()
    local status = select(2, srv:curl("/v2/x", "-H", srv:auth()))
    assert.equal(404, status)
    status = select(2, srv:curl("/v1/sessions", "-H", srv:auth(), "-X", "PUT"))
    assert.equal(405, status)
    local body
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth())
    assert.equal(405, status, body)
  end)

  it("a reference token runs, puts and gets in its session only; DELETE is 403", function()
    local rauth = "Authorization: Bearer " .. ref
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", rauth, "-H", JSON,
      "-d", '{"cmd":"echo ref"}')
    assert.equal(200, status)
    assert.equal('{"type":"stdout","data":"ref\\n"}', body:match("^[^\n]+"))
    status = select(2, srv:curl("/v1/sessions/" .. sid .. "/files/r.txt", "-H", rauth, "-X", "PUT",
      "--data-binary", "r"))
    assert.equal(200, status)
    body = srv:curl("/v1/sessions/" .. sid .. "/files/r.txt", "-H", rauth)
    assert.equal("r", body)
    status = select(2, srv:curl("/v1/sessions/" .. sid, "-H", rauth, "-X", "DELETE"))
    assert.equal(403, status)
    status = select(2, srv:curl("/v1/sessions", "-H", rauth))
    assert.equal(403, status)
    status = select(2, srv:curl("/v1/sessions", "-H", rauth, "-H", JSON, "-d", "{}"))
    assert.equal(403, status)
    status = select(2, srv:curl("/metrics", "-H", rauth))
    assert.equal(403, status)
    -- a forged reference (right shape, wrong secret)
    local forged = ref:gsub("_(%x)(%x+)$", function(a, b) return "_" .. (a == "0" and "1" or "0") .. b end)
    status = select(2, srv:curl("/v1/sessions/" .. sid, "-H", "Authorization: Bearer " .. forged))
    assert.equal(401, status)
    -- the reference of this session is not a key to another one
    local b2 = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    local sid2 = H.json_field(b2, "id")
    status = select(2, srv:curl("/v1/sessions/" .. sid2, "-H", rauth))
    assert.equal(404, status)
    srv:curl("/v1/sessions/" .. sid2, "-H", srv:auth(), "-X", "DELETE")
  end)

  it("GET /metrics is Prometheus text with the documented series", function()
    local body, status = srv:curl("/metrics", "-H", srv:auth())
    assert.equal(200, status)
    for _, name in ipairs { "sbxd_sessions_open", "sbxd_runs_started_total",
      "sbxd_runs_finished_total{outcome=\"exit\"}", "sbxd_streamed_bytes_total",
      "sbxd_run_duration_seconds_bucket", "sbxd_run_duration_seconds_count",
      "sbxd_policy_denials_total", "sbxd_auth_failures_total" } do
      assert.is_truthy(body:find(name, 1, true), name)
    end
    assert.is_true(tonumber(body:match("sbxd_sessions_open (%d+)")) >= 1)
    assert.is_true(tonumber(body:match("sbxd_runs_started_total (%d+)")) >= 5)
  end)

  it("logs one structured line per request and per run", function()
    local log = srv:log()
    assert.is_truthy(log:find("event=request method=POST path=\"/v1/sessions\" status=201 tenant=alice", 1, true))
    assert.is_truthy(log:find("event=run_end session=" .. sid .. " outcome=exit", 1, true))
  end)

  it("DELETE by the owner closes the session; then it is closed (410), for its tenant only", function()
    local body, status = srv:curl("/v1/sessions/" .. sid, "-H", srv:auth(), "-X", "DELETE")
    assert.equal(200, status, body)
    body, status = srv:curl("/v1/sessions/" .. sid, "-H", srv:auth())
    assert.equal(410, status)
    assert.equal("SessionClosed", H.json_field(body, "kind"))
    status = select(2, srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"true"}'))
    assert.equal(410, status)
    status = select(2, srv:curl("/v1/sessions/" .. sid, "-H", srv:auth("bob")))
    assert.equal(404, status)
  end)
end)

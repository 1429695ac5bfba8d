-- server_proxy_spec: sbxd's allowlist proxy drives its connections in C
-- (issue 16).  Sixteen connections at once from one run, half to an
-- allowed sink on the host, half to the cloud metadata address: each gets
-- its own verdict, the allowed ones relay 8 MiB each, and the calls into
-- Lua (sbxd_proxy_lua_calls_total) are bounded by the questions and the
-- refusals, not by the 64 MiB relayed (before batching: about 10 per MiB).
--
-- The policy is default.lua without its deny-list's 127.0.0.0/8 (which
-- keeps sandboxes off the host's loopback), so the session's allow-list
-- can name 127.0.0.1/32 for the sink.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local runnable = H.available() and T.has_core() and H.have("curl") and H.have("base64")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl and base64)") end

local JSON = "content-type: application/json"

local function write(path, s)
  local f = assert(io.open(path, "w"))
  f:write(s)
  f:close()
end

local function b64(s)
  local path = os.tmpname()
  write(path, s)
  local p = io.popen("base64 -w0 " .. H.q(path))
  local r = p:read("*a")
  p:close()
  os.remove(path)
  return r
end

-- The sink: per connection, count the bytes until EOF and answer the count.
local SINK = [[
import os, socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
print(os.getpid(), s.getsockname()[1], flush=True)
s.settimeout(300)
def serve(c):
    n = 0
    while True:
        k = c.recv(1 << 16)
        if not k: break
        n += len(k)
    c.sendall(b"%d\n" % n); c.close()
while True:
    c, _ = s.accept(); c.settimeout(300)
    threading.Thread(target=serve, args=(c,), daemon=True).start()
]]

-- Inside the sandbox: 16 CONNECTs at once; the allowed ones push 8 MiB.
local CLIENT = [[
import socket, threading
P = %d
res = {}
def one(i, target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=120)
    s.sendall(b"CONNECT " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        k = s.recv(4096)
        if not k: break
        head += k
    st = head.split(b" ")[1].decode() if head.startswith(b"HTTP/1.1 ") else "none"
    if st == "200":
        buf = bytes(1 << 20)
        for _ in range(8): s.sendall(buf)
        s.shutdown(socket.SHUT_WR)
        st += ":" + s.recv(64).strip().decode()
    res[i] = st
    s.close()
ts = [threading.Thread(target=one, args=(i, b"127.0.0.1:%%d" %% P if i %% 2 == 0 else b"169.254.169.254:80"))
      for i in range(16)]
for t in ts: t.start()
for t in ts: t.join()
print("RESULT " + " ".join(res.get(i, "lost") for i in range(16)))
]]

describe_srv("sbxd's allowlist proxy, many connections at once", function()
  local srv, sid, policy_path, sink, sink_pid, port

  setup(function()
    local f = assert(io.open(T.ROOT .. "/policies/default.lua"))
    local src = f:read("*a")
    f:close()
    local cut
    src, cut = src:gsub('"127%.0%.0%.0/8", ', "", 1)
    assert(cut == 1, "policies/default.lua changed shape")
    policy_path = os.tmpname()
    write(policy_path, src)
    local sink_path = os.tmpname()
    write(sink_path, SINK)
    sink = assert(io.popen("exec /usr/bin/python3 " .. H.q(sink_path)))
    sink_pid, port = (sink:read("*l") or ""):match("^(%d+) (%d+)$")
    os.remove(sink_path)
    assert(port, "the sink did not start")
    srv = assert(H.start { args = { "--policy", policy_path } })
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d",
      '{"network_mode":"allowlist","network_allowlist":["127.0.0.1/32"]}')
    assert.equal(201, status, body)
    sid = H.json_field(body, "id")
  end)

  teardown(function()
    if srv then srv:cleanup() end
    if sink_pid then os.execute("kill " .. sink_pid .. " 2>/dev/null") end
    if sink then sink:close() end
    os.remove(policy_path)
  end)

  local function lua_calls()
    local m = srv:curl("/metrics", "-H", srv:auth())
    return assert(tonumber(m:match("\nsbxd_proxy_lua_calls_total (%d+)")), m)
  end

  it("gives each its verdict and relays without calling Lua per byte", function()
    local before = lua_calls()
    local cmd = ("python3 -c \\\"import base64;exec(base64.b64decode('%s'))\\\""):format(
      b64(CLIENT:format(tonumber(port))))
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", ('{"cmd":"%s","timeout_s":300}'):format(cmd))
    assert.equal(200, status, body)
    local line = body:match("RESULT ([^\\\"]*)")
    assert.is_truthy(line, body)
    local i = 0
    for r in line:gmatch("%S+") do
      if i % 2 == 0 then
        assert.equal("200:8388608", r, "connection " .. i .. " to the sink: " .. line)
      else
        assert.equal("403", r, "connection " .. i .. " to the metadata address: " .. line)
      end
      i = i + 1
    end
    assert.equal(16, i, line)
    local calls = lua_calls() - before
    -- The control: the counter sees the questions.
    assert.is_true(calls >= 1, "no call counted")
    -- At most one call per question (16 names, 8 addresses) and per
    -- refusal's log line (8): relaying 64 MiB adds none.
    assert.is_true(calls <= 32, ("%d calls into Lua for 16 connections"):format(calls))
    assert.is_truthy(srv:log():find("event=proxy refused 169.254.169.254:80", 1, true), srv:log())
  end)
end)

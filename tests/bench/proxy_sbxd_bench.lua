-- proxy_sbxd_bench.lua: the allowlist proxy as sbxd serves it (issue 16).
--
-- sbx-proxy-bench measures the proxy engine stepped by a thread of its own;
-- this measures it on sbxd's event loop, where every wake-up of the proxy
-- used to go through Lua.  A real sbxd, one allowlist session whose
-- allow-list names 127.0.0.1/32, and a sink on the host's 127.0.0.1 (the
-- policy is default.lua without its deny-list's 127.0.0.0/8, which keeps
-- sandboxes off the host's loopback: a benchmark only).  A
-- client inside the sandbox pushes G GiB through a CONNECT tunnel to the
-- sink (the sink answers with the count it got, so nothing is lost
-- silently).  Printed: tunnel throughput (seen by the client), sbxd's CPU
-- seconds per GiB relayed (/proc/PID/stat, user + system), and the proxy's
-- calls into Lua per MiB (sbxd_proxy_lua_calls_total in /metrics).  Then,
-- in a second run, C connections from 8 threads, each a CONNECT, one byte
-- and its count back: setups per second, sbxd CPU and calls into Lua per
-- connection.
--
-- usage: sbxlua tests/bench/proxy_sbxd_bench.lua [-g GiB] [-c connections]
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local ROOT = here .. "../.."
local H = dofile(ROOT .. "/tests/server/harness.lua")

local gib, conns = 1, 400
for i = 1, #arg - 1 do
  if arg[i] == "-g" then gib = tonumber(arg[i + 1]) end
  if arg[i] == "-c" then conns = tonumber(arg[i + 1]) end
end
local bytes = math.floor(gib * 1024 * 1024 * 1024)

if not H.available() then
  print("proxy_sbxd_bench: no sbxd next to this sbxlua; skipped")
  return
end

-- The sink: per connection, counts what it sends until EOF, answers the count.
local sink_py = [[
import os, socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
print(os.getpid(), s.getsockname()[1], flush=True)
s.settimeout(900)  # never outlive a failed benchmark by long
def serve(c):
    n = 0; buf = bytearray(1 << 20)
    while True:
        k = c.recv_into(buf)
        if not k: break
        n += k
    c.sendall(b"%d\n" % n); c.close()
while True:
    c, _ = s.accept(); c.settimeout(900)
    threading.Thread(target=serve, args=(c,), daemon=True).start()
]]
local sink_path = os.tmpname()
do
  local f = assert(io.open(sink_path, "w"))
  f:write(sink_py)
  f:close()
end
local sink = assert(io.popen("exec /usr/bin/python3 " .. H.q(sink_path), "r"))
local sink_pid, port = (sink:read("*l") or ""):match("^(%d+) (%d+)$")
assert(port, "the sink did not start")

-- The client, inside the sandbox: CONNECT, push, half-close, read the count.
local client_py = ([[
import socket, time
N = %d
s = socket.create_connection(("127.0.0.1", 3128))
s.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    k = s.recv(4096)
    if not k: raise SystemExit("proxy closed: %%r" %% head)
    head += k
if b" 200 " not in head.split(b"\r\n")[0]: raise SystemExit("refused: %%r" %% head)
buf = bytes(1 << 20); left = N; t0 = time.monotonic()
while left > 0:
    left -= s.send(buf[:min(left, len(buf))])
s.shutdown(socket.SHUT_WR)
got = s.recv(64).strip().decode()
dt = time.monotonic() - t0
print("RESULT sent=%%d got=%%s seconds=%%.3f MiBps=%%.1f" %% (N, got, dt, N / dt / 1048576))
]]):format(bytes, port)
-- The setups, inside the sandbox: 8 threads, C connections in all.
local setups_py = ([[
import socket, threading, time
C = %d; P = %d; bad = []
def one():
    s = socket.create_connection(("127.0.0.1", 3128))
    s.sendall(b"CONNECT 127.0.0.1:%%d HTTP/1.1\r\nHost: x\r\n\r\n" %% P)
    head = b""
    while b"\r\n\r\n" not in head:
        k = s.recv(4096)
        if not k: break
        head += k
    s.sendall(b"x"); s.shutdown(socket.SHUT_WR)
    if not head.startswith(b"HTTP/1.1 200 ") or s.recv(64).strip() != b"1": bad.append(head)
    s.close()
def worker(n):
    for _ in range(n): one()
ts = [threading.Thread(target=worker, args=(C // 8,)) for _ in range(8)]
t0 = time.monotonic()
for t in ts: t.start()
for t in ts: t.join()
dt = time.monotonic() - t0
print("SETUPS n=%%d bad=%%d seconds=%%.3f" %% (C // 8 * 8, len(bad), dt))
]]):format(conns, port)
local function b64(s)
  local p = io.popen("base64 -w0 > " .. H.q(sink_path .. ".b64"), "w")
  p:write(s)
  p:close()
  local f = io.open(sink_path .. ".b64")
  local r = f:read("*a")
  f:close()
  os.remove(sink_path .. ".b64")
  return r
end
local function py(src) return ("python3 -c \"import base64;exec(base64.b64decode('%s'))\""):format(b64(src)) end
local cmd = py(client_py)

local policy_path = os.tmpname()
do
  local f = assert(io.open(ROOT .. "/policies/default.lua"))
  local src = f:read("*a")
  f:close()
  local cut
  src, cut = src:gsub('"127%.0%.0%.0/8", ', "", 1)
  assert(cut == 1, "policies/default.lua changed shape")
  f = assert(io.open(policy_path, "w"))
  f:write(src)
  f:close()
end
-- The sink serves until killed (sink:close() waits for it): on every way out.
local srv
local function stop_all()
  if srv then
    srv:stop()
    srv:cleanup()
    srv = nil
  end
  os.execute("kill " .. sink_pid .. " 2>/dev/null")
  sink:close()
  os.remove(sink_path)
  os.remove(policy_path)
end
local ok, err = pcall(function() srv = assert(H.start { args = { "--policy", policy_path } }) end)
if not ok then
  stop_all()
  error(err, 0)
end
local function cpu_s()
  local f = assert(io.open("/proc/" .. srv.pid .. "/stat"))
  local st = f:read("*a")
  f:close()
  local fields = {}
  for w in st:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = w end
  -- after "(comm) ": state is 1, utime 12, stime 13
  return (tonumber(fields[12]) + tonumber(fields[13])) / 100
end
local function metric(name)
  local m = srv:curl("/metrics", "-H", srv:auth())
  return tonumber(m:match("\n" .. name .. " (%d+)")) or 0
end

local JSON = "content-type: application/json"
local body, sbody, cpu0, cpu1, cpu2, calls0, calls1, calls2
ok, err = pcall(function()
  local status
  body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d",
    '{"network_mode":"allowlist","network_allowlist":["127.0.0.1/32"]}')
  assert(status == 201, body)
  local sid = H.json_field(body, "id")

  calls0, cpu0 = metric("sbxd_proxy_lua_calls_total"), cpu_s()
  body = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON, "-d",
    ('{"cmd":"%s","timeout_s":600}'):format(cmd:gsub('"', '\\"')))
  cpu1, calls1 = cpu_s(), metric("sbxd_proxy_lua_calls_total")
  sbody = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON, "-d",
    ('{"cmd":"%s","timeout_s":600}'):format(py(setups_py):gsub('"', '\\"')))
  cpu2, calls2 = cpu_s(), metric("sbxd_proxy_lua_calls_total")
end)
stop_all()
if not ok then error(err, 0) end

local sent, got, secs, mibps = body:match("RESULT sent=(%d+) got=(%d+) seconds=([%d.]+) MiBps=([%d.]+)")
if not sent then error("the client failed: " .. body:sub(1, 2000)) end
assert(sent == got, ("the sink got %s of %s bytes"):format(got, sent))
local mib = tonumber(sent) / 1048576
print(("== allowlist proxy on sbxd's loop: %.2f GiB through one CONNECT tunnel"):format(mib / 1024))
print(("%-36s %10.1f"):format("throughput (MiB/s)", tonumber(mibps)))
print(("%-36s %10.3f"):format("tunnel time (s)", tonumber(secs)))
print(("%-36s %10.3f"):format("sbxd CPU per GiB (s)", (cpu1 - cpu0) / (mib / 1024)))
print(("%-36s %10.3f"):format("proxy calls into Lua per MiB", (calls1 - calls0) / mib))
print(("%-36s %10d"):format("proxy calls into Lua (total)", calls1 - calls0))

local n, bad, ssecs = sbody:match("SETUPS n=(%d+) bad=(%d+) seconds=([%d.]+)")
if not n then error("the setups failed: " .. sbody:sub(1, 2000)) end
assert(bad == "0", bad .. " setups failed")
n = tonumber(n)
print(("== %d connections (8 threads): CONNECT, 1 byte, its count back"):format(n))
print(("%-36s %10.1f"):format("connections per second", n / tonumber(ssecs)))
print(("%-36s %10.3f"):format("sbxd CPU per connection (ms)", (cpu2 - cpu1) * 1000 / n))
print(("%-36s %10.3f"):format("proxy calls into Lua per connection", (calls2 - calls1) / n))

-- secrets_bench.lua: what secret substitution costs per HTTPS request
-- (make bench, issue 20).  In the fake internet (tests/net), two allowlist
-- sessions call the same HTTPS endpoint through the proxy: one plain
-- (the tunnel is spliced), one whose secret belongs to that host (the
-- proxy terminates TLS, verifies the upstream and substitutes).  Python
-- requests in the run times N requests each way: a new connection per
-- request (CONNECT + two TLS handshakes when intercepted) and one
-- keep-alive connection; the table gives ms per request and the ratio.
--
-- usage: sbxlua tests/bench/secrets_bench.lua [-n N]   (root: network namespaces)

package.path = "./tests/?.lua;" .. package.path
local F = require "net.fakenet"

local n = tonumber(arg[1] == "-n" and arg[2] or nil) or 200
local ok, why = F.available()
if not ok then
  print("secrets_bench: " .. why .. "; skipped")
  return
end

local KEY = "sk-fakenet-5ecre7-0123456789abcdef" -- tests/net/fakenet_servers.py
local INNER = [==[
local sbx = require "sbx"
local N, CA, KEY = tonumber(arg[1]), arg[2], arg[3]
local PY = [[/usr/bin/python3 -c '
import os, sys, time, requests
n = int(sys.argv[1]); h = {"Authorization": "Bearer " + os.environ.get("API_KEY", "x")}
url = "https://pypi.org/hello"
requests.get(url, headers=h)
t = time.perf_counter()
for _ in range(n): requests.get(url, headers=h).raise_for_status()
new = (time.perf_counter() - t) / n * 1000
s = requests.Session(); s.get(url, headers=h)
t = time.perf_counter()
for _ in range(n): s.get(url, headers=h).raise_for_status()
print("%.3f %.3f" % (new, (time.perf_counter() - t) / n * 1000))' ]]
local function measure(secrets)
  local s = sbx.session { backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" },
    ca_certs = { CA }, secrets = secrets }
  local r = s:exec(PY .. N)
  s:close()
  local a, b = r.stdout:match("([%d.]+) ([%d.]+)")
  if not a then error("bench run failed: " .. r.stdout .. r.stderr) end
  return tonumber(a), tonumber(b)
end
local pn, pk = measure(nil)
local sn, sk = measure { API_KEY = { value = KEY, hosts = { "pypi.org" }, header = "Authorization",
                                     format = "Bearer %s" } }
print(("== secrets: ms per HTTPS request through the proxy (%d requests each, Python requests)"):format(N))
print(("%-34s %10s %10s %8s"):format("", "spliced", "substituted", "ratio"))
print(("%-34s %10.3f %10.3f %8.2f"):format("new connection per request", pn, sn, sn / pn))
print(("%-34s %10.3f %10.3f %8.2f"):format("one keep-alive connection", pk, sk, sk / pk))
]==]

local net = F.up(F.unique("sbxsecb"))
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. F.quote(dir))
local f = assert(io.open(dir .. "/inner.lua", "w"))
f:write(INNER)
f:close()
net:zone { ["pypi.org"] = "198.51.100.2" }
local sbxlua = arg[-1] or "sbxlua"
local out = F.run("ip netns exec " .. F.quote(net.host_ns) .. " env SBX_SECRETS_UPSTREAM_CA="
  .. F.quote(net:ca_file()) .. " " .. F.quote(sbxlua) .. " " .. F.quote(dir .. "/inner.lua") .. " "
  .. n .. " " .. F.quote(net:ca_file()) .. " " .. F.quote(KEY))
net:down()
os.execute("rm -rf " .. F.quote(dir))
io.write(out)

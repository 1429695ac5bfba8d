-- secrets_spec.lua: secrets the sandbox never sees (issue 20), on-device and
-- through sbxd, in the fake internet (tests/net).  The fake API on
-- pypi.org (198.51.100.2) answers /auth 200 only to "Bearer API_KEY" and
-- /echo-auth echoes the Authorization it got; example.com is the same
-- server under another allowed name, which must only ever see the
-- placeholder.  Every client runs unchanged (no --cacert: the session CA
-- is in the run's bundle).  Each check has its control: the same request
-- without the secret (or to the right host) shows the probe can see a
-- success.

local F = require "net.fakenet"
local H = require "spec.sec_helpers"

local API_KEY = "sk-fakenet-5ecre7-0123456789abcdef" -- tests/net/fakenet_servers.py

-- The runs' checks, the same on-device and through sbxd (s: a session).
local CHECKS = [==[
local function sh(cmd) local r = s:exec(cmd) return r end
local C = "curl -sS --max-time 60 "
out("env", sh("printf %s \"$API_KEY\"").stdout)
out("curl", sh(C .. "-H \"Authorization: Bearer $API_KEY\" https://pypi.org/auth").stdout)
out("curl_nokey", sh(C .. "https://pypi.org/auth").stdout)
out("curl_own", sh(C .. "-H 'Authorization: Bearer mine' https://pypi.org/auth").stdout)
-- a run with its own allow-list has a listener of its own: the session's
-- secrets are served on it too
out("curl_narrowed", s:exec(C .. "https://pypi.org/auth", { network_allowlist = { "pypi.org" } }).stdout)
out("requests", sh([[/usr/bin/python3 -c '
import os, requests
h = {"Authorization": "Bearer " + os.environ["API_KEY"]}
print(requests.get("https://pypi.org/auth", headers=h).text)']]).stdout)
out("urllib", sh([[/usr/bin/python3 -c '
import os, urllib.request
r = urllib.request.Request("https://pypi.org/auth", headers={"Authorization": "Bearer " + os.environ["API_KEY"]})
print(urllib.request.urlopen(r).read().decode())']]).stdout)
-- node 20 reads no proxy variables: CONNECT by hand; it trusts the session
-- CA through NODE_EXTRA_CA_CERTS, which is what this checks.
out("node", sh([[node -e '
const http = require("http"), https = require("https");
http.request({host: "127.0.0.1", port: 3128, method: "CONNECT", path: "pypi.org:443"}).on("connect", (res, socket) => {
  https.get({host: "pypi.org", path: "/auth", socket, agent: false,
             headers: {Authorization: "Bearer " + process.env.API_KEY}},
    r => { let b = ""; r.on("data", d => b += d); r.on("end", () => console.log(b)); })
    .on("error", e => console.log("error " + e.message));
}).on("error", e => console.log("error " + e.message)).end();']]).stdout)
out("other_host", sh(C .. "-H \"Authorization: Bearer $API_KEY\" https://example.com/headers").stdout)
-- the echo: its header, then how many body lines carry the placeholder, the value
out("echo", sh(C .. "-D h.txt -o b.txt -H \"Authorization: Bearer $API_KEY\" https://pypi.org/echo-auth; "
  .. "grep -i '^x-echo' h.txt; grep -c 'you sent: Bearer sbx_secret_API_KEY_' b.txt; "
  .. "grep -c -- '" .. API_KEY .. "' b.txt; rm h.txt b.txt").stdout)
-- insecure_http: substituted in plain HTTP too (here in the query, which the
-- fake server's access log records), and echoed back as the placeholder
out("insecure_http", sh(C .. "\"http://far.test/headers?k=$PLAIN_KEY\" -H \"X-Key: $PLAIN_KEY\"").stdout)
out("plain_http", sh(C .. "-H \"Authorization: Bearer $API_KEY\" http://pypi.org/headers").stdout)
out("noproxy", sh(C .. "--max-time 10 --noproxy '*' -H \"Authorization: Bearer $API_KEY\" "
  .. "https://pypi.org/auth; echo rc=$?").stdout)
out("raw_socket", sh([[/usr/bin/python3 -c '
import socket
try:
    socket.create_connection(("198.51.100.2", 443), timeout=5); print("connected")
except OSError as e:
    print("refused", e.errno)']]).stdout)
-- TLS for another name through the secret host's tunnel: refused (the
-- control, the same with the tunnel's own name, gets the API's answer)
local SNI = [[/usr/bin/python3 -c '
import os, socket, ssl, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.sendall(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
assert b" 200 " in s.recv(4096)
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
t = ctx.wrap_socket(s, server_hostname=sys.argv[1])
t.sendall(b"GET /auth HTTP/1.1\r\nHost: pypi.org\r\nConnection: close\r\n\r\n")
data = b""
while True:
    d = t.recv(4096)
    if not d: break
    data += d
print(data.split(b"\r\n")[0].decode(), data.split(b"\r\n\r\n", 1)[-1].decode().strip())' ]]
out("sni_other", sh(SNI .. "example.com").stdout)
out("sni_same", sh(SNI .. "pypi.org").stdout)
-- a server name with a line break in it: refused, and logged as one line
out("sni_forge", sh(SNI .. "\"$(printf 'evil.test\\nforged-log-line')\"").stdout)
out("environ", sh("tr '\\0' '\\n' < /proc/self/environ").stdout)
sh("env > env.txt; " .. C .. "-o echo.out -H \"Authorization: Bearer $API_KEY\" https://pypi.org/echo-auth")
out("grep_work", sh("grep -rl -- '" .. API_KEY .. "' . /proc/self/environ /etc/sbx 2>/dev/null; echo done").stdout)
out("ca_key", sh("grep -rl 'PRIVATE KEY' /etc/sbx . 2>/dev/null; echo done").stdout)
]==]

describe("secrets", function()
  if not F.need(it, pending) then return end

  local net

  -- Run code in the fake host netns; returns { key = value }, everything it printed.
  -- no_upstream_ca: the proxy trusts only the host's store, not the fake internet's CA.
  -- The script's sbxlua must exit 0 (in the sanitizer build, LeakSanitizer's
  -- check at its exit included).
  local function run(code, no_upstream_ca)
    local res, o, rc = net:script([[
local SECRETS = { API_KEY = { value = API_KEY, hosts = { "pypi.org" }, header = "Authorization",
                              format = "Bearer %s" },
                  PLAIN_KEY = { value = "plain-5ecre7-value", hosts = { "far.test" }, insecure_http = true } }
]] .. code, { vars = { API_KEY = API_KEY },
              env = { SBX_SECRETS_UPSTREAM_CA = no_upstream_ca and "" or net:ca_file() } })
    assert.are.equal(0, rc, "the script's sbxlua failed:\n" .. o)
    return res, o, rc
  end

  setup(function()
    net = F.up(F.unique("sbxsec"))
    net:zone { ["pypi.org"] = "198.51.100.2", ["example.com"] = "198.51.100.2", ["far.test"] = "203.0.113.2" }
  end)

  teardown(function()
    if net then net:down() end
  end)

  local function has(s, needle) return s ~= nil and s:find(needle, 1, true) ~= nil end

  local function check(res, all)
    local ph = res.env
    assert.truthy(ph and ph:match("^sbx_secret_API_KEY_%x+_$"), all)
    assert.are.equal("authorized", res.curl, all)
    assert.are.equal("authorized", res.curl_own, all)  -- the client's own header replaced
    assert.are.equal("authorized", res.curl_nokey, all) -- header = Authorization: always set
    assert.are.equal("authorized", res.curl_narrowed, all)
    assert.are.equal("authorized", res.requests, all)
    assert.are.equal("authorized", res.urllib, all)
    assert.are.equal("authorized", res.node, all)
    -- another allowed host: only the placeholder (the control: it echoes headers)
    assert.truthy(has(res.other_host, "Authorization: Bearer " .. ph), all)
    assert.falsy(has(res.other_host, API_KEY), all)
    -- plain HTTP to the secret's host: not substituted without insecure_http
    assert.truthy(has(res.plain_http, "Authorization: Bearer " .. ph), all)
    -- the echo comes back with the placeholder, in the header and across the body
    assert.truthy(has(res.echo, "X-Echo: Bearer " .. ph), all)
    assert.truthy(has(res.echo, "\\n2000\\n0"), all) -- every one of 2000 lines, none left
    assert.falsy(has(res.echo, API_KEY), all)
    assert.truthy(has(res.noproxy, "rc="), all)
    assert.falsy(has(res.noproxy, "authorized"), all)
    assert.truthy(has(res.raw_socket, "refused"), all)
    assert.truthy(has(res.insecure_http, "X-Key: sbx_secret_PLAIN_KEY_"), all)
    assert.truthy(has(res.insecure_http, "GET /headers?k=sbx_secret_PLAIN_KEY_"), all)
    assert.falsy(has(res.insecure_http, "plain-5ecre7-value"), all)
    local seen = false
    for _, l in ipairs(net:http_requests()) do seen = seen or has(l, "/headers?k=plain-5ecre7-value") end
    assert.is_true(seen, "the fake server got the value")
    assert.truthy(has(res.sni_other, "403"), all)
    assert.truthy(has(res.sni_other, "not the CONNECT target"), all)
    assert.truthy(has(res.sni_same, "HTTP/1.1 200 OK") and has(res.sni_same, "authorized"), all)
    assert.truthy(has(res.sni_forge, "403"), all)
    assert.truthy(has(all, "TLS server name evil.test?forged-log-line"), all)
    assert.falsy(all:find("\nforged%-log%-line"), all)
    assert.truthy(has(res.environ, "API_KEY=" .. ph), all)
    assert.falsy(has(res.environ, API_KEY), all)
    assert.are.equal("done", res.grep_work, all)
    assert.are.equal("done", res.ca_key, all)
    assert.falsy(has(all, API_KEY), all) -- the host's whole output, the proxy's log lines included
    assert.falsy(has(all, "plain-5ecre7-value"), all)
  end

  it("puts the value in only for its host, on-device", function()
    local res, all = run([[
local s = sbx.session{ backend = "userns", network_mode = "allowlist",
  network_allowlist = { "pypi.org", "example.com", "far.test" }, secrets = SECRETS,
  ca_certs = { CA } } -- example.com is not intercepted: its own CA
]] .. CHECKS .. [[
local st = s:proxy_stats()
out("intercepted", st.intercepted)
local work = s.work_dir
s:close()
]])
    check(res, all)
    assert.is_true(tonumber(res.intercepted) >= 8, all)
    local g = F.run("grep -rl -- " .. F.quote(API_KEY) .. " " .. F.quote(net:work_dir() .. "/state") .. "; echo done")
    assert.are.equal("done", (g:gsub("%s+$", "")), g)
  end)

  it("does the same through sbxd, and no GET, /metrics or log line shows the value", function()
    local res, all = run(F.SBXD .. [[
local s = sbx.remote.session{ endpoint = srv.url, token = srv.token.alice, backend = "userns",
  network_mode = "allowlist", network_allowlist = { "pypi.org", "example.com", "far.test" }, secrets = SECRETS,
  ca_certs = { CA } }
]] .. CHECKS .. [[
local function get(path)
  return SH.sh("curl -s --http2-prior-knowledge -H 'Authorization: Bearer " .. srv.token.alice .. "' "
    .. srv.url .. path)
end
out("get_session", get("/v1/sessions/" .. s.id))
out("list", get("/v1/sessions"))
out("metrics", get("/metrics"))
s:close()
srv:stop()
out("log", srv:log())
]])
    check(res, all)
    assert.truthy(has(res.get_session, "is_owner"), all) -- the control: the GET answered
    assert.is_true(tonumber(res.metrics:match("sbxd_proxy_intercepted_total (%d+)") or "0") >= 8, all)
    assert.truthy(has(res.log, "session="), all)
  end)

  it("sends nothing to an upstream whose certificate does not verify", function()
    -- The fake API's certificate is signed by the fakenet CA, which the
    -- host's own store does not hold: the proxy must refuse, not send.
    local function auths()
      local k = 0
      for _, l in ipairs(net:http_requests()) do if l:find(" /auth", 1, true) then k = k + 1 end end
      return k
    end
    local before = auths()
    local res, all = run([[
local s = sbx.session{ backend = "userns", network_mode = "allowlist",
  network_allowlist = { "pypi.org", "example.com", "far.test" }, secrets = SECRETS, ca_certs = { CA } }
out("secret_host", s:exec("curl -sS --max-time 60 -H \"Authorization: Bearer $API_KEY\" https://pypi.org/auth").stdout)
out("control", s:exec("curl -sS --max-time 60 https://example.com/hello").stdout)
s:close()
]], true)
    assert.truthy(has(res.secret_host, "certificate verify failed"), all)
    assert.truthy(has(res.control, "hello from"), all) -- the fake API is up: only the check refused
    assert.are.equal(before, auths(), all) -- no request reached the API
    assert.falsy(has(all, API_KEY), all)
  end)

  -- The proxy child holds the values and the CA key and parses what the
  -- sandbox sends: a crash there must not write them to a core file.
  it("lets the proxy that holds the value dump no core", function()
    local res, all = run([[
local s = sbx.session{ backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" },
  secrets = SECRETS }
local me = io.open("/proc/self/stat"):read("*l"):match("^(%d+)")
local n, limits = 0, {}
for pid in io.popen("ls /proc"):lines() do
  local f = pid:match("^%d+$") and io.open("/proc/" .. pid .. "/status")
  local st = f and f:read("*a") or ""
  if f then f:close() end
  if st:match("^Name:%s*sbx%-proxy\n") and st:match("\nPPid:%s*" .. me .. "\n") then
    n = n + 1
    local l = io.open("/proc/" .. pid .. "/limits"):read("*a")
    limits[#limits + 1] = table.concat({ l:match("Max core file size%s+(%S+)%s+(%S+)") }, " ")
  end
end
out("proxies", n)
out("core", table.concat(limits, ","))
s:close()
]])
    assert.is_true(tonumber(res.proxies) >= 1, all) -- the control: the probe finds the proxy
    for l in res.core:gmatch("[^,]+") do assert.are.equal("0 0", l, all) end
  end)

  -- One thread per intercepted connection: one session may hold at most
  -- 128 of them (sbxd serves every session's proxy in one process).
  it("caps a session's intercepted connections at 128", function()
    local res, all = run([[
local s = sbx.session{ backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" },
  secrets = SECRETS }
out("conns", s:exec([=[/usr/bin/python3 -c '
import socket
held, got = [], {}
for i in range(132):
    c = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    c.sendall(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    line = c.recv(4096).split(b"\r\n")[0].decode()
    code = line.split(" ")[1] if " " in line else "none"
    got[code] = got.get(code, 0) + 1
    held.append(c)
print(" ".join("%s=%d" % kv for kv in sorted(got.items())))']=]).stdout)
s:close()
]])
    -- the control: the first 128 do get their tunnel
    assert.are.equal("200=128 502=4", res.conns, all)
  end)

  it("refuses bad secrets without quoting the value", function()
    local res, all = run([[
local base = { backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" } }
local function with(sec) local o = {} for k, v in pairs(base) do o[k] = v end o.secrets = sec return o end
local _, e1 = pcall(sbx.session, with { K = { value = API_KEY, hosts = { "bad host" } } })
out("bad_host", tostring(e1))
local _, e2 = pcall(sbx.session, with { K = { value = API_KEY, hosts = { "pypi.org" }, header = "Authorization",
  format = "no" } })
out("bad_format", tostring(e2))
local _, e3 = pcall(sbx.session, { backend = "userns", network_mode = "open",
  secrets = { K = { value = API_KEY, hosts = { "pypi.org" } } } })
out("open_mode", tostring(e3))
local _, e4 = pcall(sbx.session, with { K = { value = API_KEY .. "\n", hosts = { "pypi.org" } } })
out("ctl_value", tostring(e4))
]])
    assert.truthy(has(res.bad_host, "not a host name"), all)
    assert.truthy(has(res.bad_format, "exactly one %s"), all)
    assert.truthy(has(res.open_mode, "allowlist"), all)
    assert.truthy(has(res.ctl_value, "control characters"), all)
    assert.falsy(has(all, API_KEY), all)
  end)

  it("lets a policy forbid, require and restrict secrets; hooks never see a value", function()
    local pdir = net:work_dir() .. "/pol"
    os.execute("mkdir -p " .. F.quote(pdir))
    local function pol(n, body)
      H.write_file(pdir .. "/" .. n .. ".lua", "return " .. body)
    end
    local base = [[ defaults = { network_mode = "allowlist" }, ceilings = { network_mode = "allowlist" } ]]
    pol("forbid", "{" .. base .. ", secrets = { allow = false } }")
    pol("require", "{" .. base .. ", secrets = { require = { 'API_KEY' } } }")
    pol("hosts", "{" .. base .. ", secrets = { hosts = { '*.example.org' } } }")
    pol("hook", "{" .. base .. [[, on_session_open = function(req)
      log("seen", req.secrets.API_KEY.hosts[1], tostring(req.secrets.API_KEY.value))
      return true end }]])
    local res, all = run([[
local POL = ]] .. string.format("%q", pdir) .. [[
local function open(p, sec)
  local ok, e = pcall(sbx.session, { backend = "userns", network_allowlist = { "pypi.org" },
    policy = POL .. "/" .. p .. ".lua", secrets = sec })
  if ok then e:close() return "opened" end
  return (e.rule or "?") .. ": " .. tostring(e.message)
end
out("forbid", open("forbid", SECRETS))
out("forbid_none", open("forbid", nil))
out("require", open("require", nil))
out("require_ok", open("require", SECRETS))
out("hosts", open("hosts", SECRETS))
out("hosts_ok", open("hosts", { API_KEY = { value = API_KEY, hosts = { "api.example.org" } } }))
out("hook", open("hook", SECRETS))
]])
    assert.truthy(has(res.forbid, "secrets.allow"), all)
    assert.are.equal("opened", res.forbid_none, all)
    assert.truthy(has(res.require, "secrets.require"), all)
    assert.are.equal("opened", res.require_ok, all)
    assert.truthy(has(res.hosts, "secrets.hosts"), all)
    assert.are.equal("opened", res.hosts_ok, all)
    assert.are.equal("opened", res.hook, all)
    assert.truthy(has(all, "seen pypi.org nil"), all) -- the hook ran, saw the host, no value
    assert.falsy(has(all, API_KEY), all)
  end)
end)

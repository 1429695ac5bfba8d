-- network_spec.lua: the three network modes, per call, on-device and through
-- sbxd, against a fake internet the test builds (tests/net: network
-- namespaces, a DNS server that logs every query, HTTP/HTTPS servers on
-- documentation addresses).  The host side (sbxlua, sbxd, the proxy, pasta)
-- runs inside the fake "host" namespace; nothing touches a real address.
--
-- Each case runs a Lua script under `ip netns exec NAME-host sbxlua`; the
-- script writes `key<TAB>value` lines the spec checks to a results file of
-- its own (one write per line), never to stdout: the host side's log lines
-- on stdout/stderr cannot split or swallow a result.

local F = require "net.fakenet"

-- Helpers the scripts use (after net:script's prelude: sbx, out, CA).
local HELPERS = [[
local function sh(s, cmd, o) local r = s:exec(cmd, o) return r end
-- A raw proxy request from inside the sandbox: send `req`, print the reply's first line.
local RAW = [=[python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
s.sendall(sys.argv[1].encode("latin-1").decode("unicode_escape").encode("latin-1"))
data = b""
while b"\r\n" not in data:
    d = s.recv(4096)
    if not d: break
    data += d
print(data.split(b"\r\n")[0].decode("latin-1", "replace"))
' ]=]
local function raw(s, req) return s:exec(RAW .. "'" .. req .. "'").stdout:gsub("%s+$", "") end
]]

describe("network modes", function()
  if not F.need(it, pending) then return end

  local net

  -- Run code (after HELPERS) in the fake host netns; returns { key = value }, raw output.
  -- The script's sbxlua must exit 0: in the sanitizer build that includes
  -- LeakSanitizer's check at its exit, which would otherwise go unseen.
  local function run(code)
    local res, o, rc = net:script(HELPERS .. code)
    assert.are.equal(0, rc, "the script's sbxlua failed:\n" .. o)
    return res, o, rc
  end

  setup(function()
    net = F.up(F.unique("sbxnet"))
    net:zone {
      ["pypi.org"] = "198.51.100.2",
      ["files.pythonhosted.org"] = "198.51.100.2",
      ["example.com"] = "198.51.100.2",
      ["evil.test"] = "10.1.2.3",              -- an allowed name that resolves to a private address
      ["meta.evil.test"] = "169.254.169.254",  -- ... to the metadata address
      ["far.test"] = "203.0.113.2",            -- ... to a deny-listed network
    }
  end)

  teardown(function()
    if net then net:down() end
  end)

  describe("allowlist", function()
    local res, raw_out
    setup(function()
      net:clear_dns_queries()
      res, raw_out = run([[
local s = sbx.session{ backend = "userns", network_mode = "allowlist",
  network_allowlist = { "pypi.org", "*.pythonhosted.org", "evil.test", "meta.evil.test", "far.test" },
  network_denylist = { "203.0.113.0/24" } }
s:put_bytes("ca.pem", io.open(CA):read("*a"))
local C = "curl -sS --max-time 60 --cacert ca.pem "
out("https", sh(s, C .. "https://pypi.org/hello").stdout)
out("https_sub", sh(s, C .. "https://files.pythonhosted.org/hello").stdout)
out("plain", sh(s, C .. "http://pypi.org/hello").stdout)
out("socks", sh(s, "curl -sS --max-time 60 --cacert ca.pem --proxy socks5h://127.0.0.1:3128"
  .. " https://pypi.org/hello").stdout)
local r = sh(s, C .. "https://example.com/")
out("denied_rc", r.returncode) out("denied_err", r.stderr)
out("denied_body", sh(s, C .. "http://example.com/hello").stdout)
out("private_body", sh(s, C .. "http://evil.test/hello").stdout)
out("meta_body", sh(s, C .. "http://meta.evil.test/hello").stdout)
out("far_body", sh(s, C .. "http://far.test/hello").stdout)
for _, spelling in ipairs { "169.254.169.254", "0xa9fea9fe", "2852039166", "0251.0376.0251.0376",
                            "169.254.43518", "0xa9.0xfe.0xa9.0xfe", "[::ffff:169.254.169.254]",
                            "[::ffff:a9fe:a9fe]", "169.254.169.254." } do
  out("meta_" .. spelling:gsub("[^%w]", "_"), raw(s, "CONNECT " .. spelling .. ":80 HTTP/1.1\r\nHost: x\r\n\r\n"))
end
out("host_mismatch", raw(s, "GET http://pypi.org/hello HTTP/1.1\r\nHost: example.com\r\n\r\n"))
out("connect_ok", raw(s, "CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n"))
-- No route: a raw socket to the allowed host's address, and DNS.
out("raw_socket", sh(s, [=[python3 -c '
import socket
try:
    socket.create_connection(("198.51.100.2", 443), timeout=5); print("connected")
except OSError as e:
    print("refused", e.errno)
']=]).stdout)
out("raw_udp_dns", sh(s, [=[python3 -c '
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("198.51.100.2", 53)); print("sent")
except OSError as e:
    print("refused", e.errno)
']=]).stdout)
-- 64 MiB through the tunnel, checked end to end.
out("big", sh(s, C .. "https://pypi.org/big/64 | sha256sum | cut -d' ' -f1").stdout)
out("big_want", sh(s, C .. "https://pypi.org/big/64.sha256").stdout)
-- Many tunnels at once.
out("many", sh(s, "seq 1 64 | xargs -P 32 -I{} " .. C
  .. "-o /dev/null -w '%{http_code}\\n' https://pypi.org/hello | sort | uniq -c").stdout)
local st = s:proxy_stats()
out("st_refused", st.refused) out("st_allowed", st.allowed) out("st_failed", st.failed)
s:close()
]])
    end)

    it("lets an allowed name through, over CONNECT, plain HTTP and SOCKS5", function()
      assert.matches("hello from 198.51.100.2:443", res.https, 1, true)
      assert.matches("hello from 198.51.100.2:443", res.https_sub, 1, true)
      assert.matches("hello from 198.51.100.2:80", res.plain, 1, true)
      assert.matches("hello from 198.51.100.2:443", res.socks, 1, true)
      assert.matches("^HTTP/1%.%d 200", res.connect_ok)
    end)

    it("refuses a name not on the list before any DNS lookup, saying why", function()
      assert.are_not.equal("0", res.denied_rc)
      assert.matches("403", res.denied_err, 1, true)
      assert.matches("not on the allow%-list", res.denied_body)
      for _, q in ipairs(net:dns_queries()) do
        assert.are_not.equal("example.com", q, "the proxy looked up a name it refused")
      end
      -- ... while the allowed names were looked up (the resolver is really the fake one).
      local seen = {}
      for _, q in ipairs(net:dns_queries()) do seen[q] = true end
      assert.is_true(seen["pypi.org"], raw_out)
    end)

    it("refuses an allowed name that resolves to a private, metadata or deny-listed address", function()
      assert.matches("private", res.private_body, 1, true)
      assert.matches("169.254.169.254", res.meta_body, 1, true)
      assert.matches("403", res.meta_body .. res.private_body .. "403", 1, true)
      assert.matches("203.0.113.0/24", res.far_body, 1, true)
      for _, l in ipairs(net:http_requests()) do
        assert.is_nil(l:match("^203%.0%.113%.2"), "a deny-listed address was reached: " .. l)
      end
    end)

    it("refuses the metadata address in every spelling", function()
      local n = 0
      for k, v in pairs(res) do
        if k:match("^meta_") and k ~= "meta_body" then
          n = n + 1
          assert.matches("^HTTP/1%.%d 403", v, nil, k .. ": " .. v)
        end
      end
      assert.are.equal(9, n, raw_out)
    end)

    it("refuses a request whose Host disagrees with its target", function()
      assert.matches("^HTTP/1%.%d 400", res.host_mismatch)
    end)

    it("gives raw sockets no route around the proxy", function()
      assert.matches("^refused", res.raw_socket)
      assert.matches("^refused", res.raw_udp_dns)
    end)

    it("counts what it let through and what it refused (s:proxy_stats())", function()
      -- 2 for example.com, 3 bad resolutions, 9 metadata spellings
      assert.are.equal("14", res.st_refused, raw_out)
      -- https x2, plain, socks, raw CONNECT, big + its sum, 64 tunnels
      assert.are.equal("71", res.st_allowed, raw_out)
      assert.are.equal("1", res.st_failed, raw_out) -- the Host mismatch
    end)

    it("carries 64 MiB intact and 64 tunnels at once", function()
      assert.matches("^%x+$", res.big)
      assert.are.equal(res.big_want:gsub("%s", ""), res.big)
      assert.matches("^%s*64 200%s*$", res.many:gsub("\\n", "\n"))
    end)
  end)

  describe("per-call switching", function()
    local function script(open_session)
      return open_session .. [[
s:put_bytes("ca.pem", io.open(CA):read("*a"))
local C = "curl -sS --max-time 60 --cacert ca.pem https://pypi.org/hello"
out("first", sh(s, C, { network_mode = "blocked" }).returncode)
out("install", sh(s, C, { network_mode = "allowlist" }).stdout)
out("again", sh(s, C, { network_mode = "blocked" }).returncode)
out("blocked_listener", sh(s, "grep -c ':0C38 ' /proc/net/tcp", { network_mode = "blocked" }).stdout)
local ok, e = pcall(s.exec, s, "true", { network_mode = "open" })
out("wider", ok and "ok" or e.kind)
s:close()
]]
    end
    local function check(res, o)
      assert.are_not.equal("0", res.first, o)
      assert.matches("hello from 198.51.100.2:443", res.install, 1, true)
      assert.are_not.equal("0", res.again, o)
      assert.matches("^0", res.blocked_listener, nil, "a blocked run sees the proxy listener")
      assert.are.equal("PolicyDenied", res.wider, o)
    end

    it("goes blocked -> allowlist -> blocked in one session", function()
      local res, o = run(script([[
local s = sbx.session{ backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" } }
]]))
      check(res, o)
    end)

    it("does the same through sbxd, where open sessions work too", function()
      local res, o = run(F.SBXD .. [[
local s = sbx.remote.session{ endpoint = srv.url, token = srv.token.alice, backend = "userns",
  network_mode = "allowlist", network_allowlist = { "pypi.org" } }
]] .. script(""):gsub("s:close%(%)", function() return [[
local function metrics()
  return SH.sh("curl -s --http2-prior-knowledge -H 'Authorization: Bearer " .. srv.token.alice .. "' "
    .. srv.url .. "/metrics")
end
local m = metrics()
out("m_allowed", m:match("sbxd_proxy_allowed_total (%d+)"))
out("m_refused", m:match("sbxd_proxy_refused_total (%d+)"))
local r = s:exec("curl -sS --max-time 10 https://example.com/ -o /dev/null")
m = metrics()
out("m_refused2", m:match("sbxd_proxy_refused_total (%d+)"))
s:close()
local o = sbx.remote.session{ endpoint = srv.url, token = srv.token.alice, backend = "userns",
  network_mode = "open", network_denylist = { "203.0.113.0/24" } }
out("open_remote", o:exec("curl -sS --max-time 60 http://198.51.100.2/hello").stdout)
out("open_remote_far", o:exec("curl -sS --max-time 5 http://203.0.113.2/hello").returncode)
o:close()
srv:stop()
out("log", srv:log():match("event=proxy refused example%.com[^\n]*"))
]] end))
      check(res, o)
      assert.are.equal("1", res.m_allowed, o)
      assert.are.equal(tostring(tonumber(res.m_refused) + 1), res.m_refused2, o)
      assert.matches("not on the allow%-list", res.log or "", nil, o)
      assert.matches("hello from 198.51.100.2:80", res.open_remote or "", 1, true)
      assert.are_not.equal("0", res.open_remote_far, o)
    end)
  end)

  describe("open", function()
    local res, raw_out
    setup(function()
      -- A service on the host's loopback and on the host's own address.
      net:exec_host("(/usr/bin/python3 -m http.server --bind 0.0.0.0 18080 >/dev/null 2>&1 &) ; sleep 0.3")
      res, raw_out = run([[
local s = sbx.session{ backend = "userns", network_mode = "open", network_denylist = { "203.0.113.0/24" } }
local C = "curl -sS --max-time 60 "
out("reach", sh(s, C .. "http://198.51.100.2/hello").stdout)
out("dns", sh(s, C .. "http://pypi.org/hello").stdout)
local t0 = require("sbx.core").monotonic_ms()
local r = sh(s, C .. "http://203.0.113.2/hello")
out("far_rc", r.returncode) out("far_ms", require("sbx.core").monotonic_ms() - t0)
out("far_udp", sh(s, [=[python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
try:
    s.sendto(b"ping", ("203.0.113.2", 7)); print("got", s.recv(100))
except OSError as e:
    print("refused", e)
']=]).stdout)
out("udp_echo", sh(s, [=[python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.sendto(b"ping", ("198.51.100.2", 7)); print(s.recv(100).decode())
']=]).stdout)
out("meta_rc", sh(s, C .. "http://169.254.169.254/").returncode)
out("host_lo_rc", sh(s, C .. "http://127.0.0.1:18080/").returncode)
out("host_addr_rc", sh(s, C .. "http://198.51.100.1:18080/").returncode)
out("blocked_rc", sh(s, C .. "http://198.51.100.2/hello", { network_mode = "blocked" }).returncode)
out("allow_rc", sh(s, C .. "-f http://198.51.100.2/hello", { network_mode = "allowlist" }).returncode)
out("own_list", sh(s, C .. "http://pypi.org/hello", { network_allowlist = { "pypi.org" } }).stdout)
out("own_list_far", sh(s, C .. "http://far.test/hello", { network_allowlist = { "pypi.org" } }).stdout)
out("own_list_raw", sh(s, C .. "--noproxy '*' --max-time 5 http://198.51.100.2/hello",
  { network_allowlist = { "pypi.org" } }).returncode)
s:close()
]])
    end)
    teardown(function() net:exec_host("pkill -f 'http.server --bind 0.0.0.0 18080'") end)

    it("reaches the internet and its DNS", function()
      assert.is_string(res.reach, raw_out); assert.is_string(res.dns, raw_out); assert.is_string(res.udp_echo, raw_out)
      assert.matches("hello from 198.51.100.2:80", res.reach, 1, true)
      assert.matches("hello from 198.51.100.2:80", res.dns, 1, true)
      assert.matches("ping", res.udp_echo, 1, true)
    end)

    it("does not reach the deny-listed network, over TCP or UDP, and says so at once", function()
      -- "At once" is what curl says, not a time: 7 (could not connect: the
      -- connect was refused), never 28 (its 60 s timeout: a silent drop).
      assert.are.equal("7", res.far_rc, "a denied connect should be refused, after " .. tostring(res.far_ms)
        .. " ms: " .. raw_out)
      assert.matches("^refused", res.far_udp)
      assert.are_not.equal("0", res.meta_rc)
    end)

    it("does not reach the host's own services", function()
      assert.are_not.equal("0", res.host_lo_rc)
      assert.are_not.equal("0", res.host_addr_rc)
    end)

    it("narrows per call within the session", function()
      assert.are_not.equal("0", res.blocked_rc)
      assert.are_not.equal("0", res.allow_rc)
    end)

    it("narrows a run to a list of its own (any list narrows an open session)", function()
      assert.matches("hello from 198.51.100.2:80", res.own_list or "", 1, true, raw_out)
      assert.matches("not on this run's allow%-list", res.own_list_far or "", nil, raw_out)
      assert.are_not.equal("0", res.own_list_raw, raw_out)
    end)
  end)

  -- s:run(cmd, { network_allowlist = {...} }): a run narrower than its
  -- session, in a namespace of its own, while a wide run of the same
  -- session goes on.  The narrowed run writes each probe's result to a
  -- file; the wide run fetches far.test only after the narrowed run's
  -- first probes, and the narrowed run probes far.test again after that.
  describe("per-run allow-list", function()
    local function script(open_session)
      return open_session .. [[
s:put_bytes("ca.pem", io.open(CA):read("*a"))
local C = "curl -sS --max-time 30 "
local function wait_for(f)
  return "i=0; while [ ! -e " .. f .. " ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; "
end
local PY = [=[python3 -c '
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5); print("connected")
except OSError as e:
    print("refused", e.errno)
' ]=]
local RAWC = [=[python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (sys.argv[1], sys.argv[1])).encode())
print(s.recv(4096).split(b"\r\n")[0].decode())
' ]=]
local wide = s:run(wait_for("go") .. C .. "http://far.test/hello > w_far 2>&1; touch wide_done",
  { network_mode = "allowlist" })
local narrow = s:run(table.concat({
  C .. "http://pypi.org/hello > n_plain 2>&1",
  C .. "--cacert ca.pem https://pypi.org/hello > n_https 2>&1",
  C .. "http://far.test/hello > n_far 2>&1",
  C .. "--cacert ca.pem https://far.test/hello > n_far_https 2>&1; echo rc=$? >> n_far_https",
  C .. "--proxy socks5h://127.0.0.1:3128 http://far.test/hello > n_socks 2>&1; echo rc=$? >> n_socks",
  C .. "--proxy socks5h://127.0.0.1:3128 http://pypi.org/hello > n_socks_ok 2>&1",
  C .. "--noproxy '*' --max-time 5 http://far.test/hello > n_noproxy 2>&1; echo rc=$? >> n_noproxy",
  C .. "--noproxy '*' --max-time 5 http://203.0.113.2/hello > n_noproxy_ip 2>&1; echo rc=$? >> n_noproxy_ip",
  RAWC .. "far.test:80 > n_raw_far 2>&1",
  RAWC .. "203.0.113.2:80 > n_raw_far_ip 2>&1",
  RAWC .. "pypi.org:80 > n_raw_ok 2>&1",
  PY .. "203.0.113.2 80 > n_sock 2>&1",
  PY .. "198.51.100.2 80 > n_sock_allowed 2>&1",
  PY .. "127.0.0.1 3128 > n_sock_proxy 2>&1",
  "awk '$2 ~ /:0C38$/ && $4 == \"0A\"' /proc/net/tcp | wc -l > n_listeners",
  "touch go",
  wait_for("wide_done") .. C .. "http://far.test/hello > n_far_after 2>&1",
}, "\n"), { network_allowlist = { "pypi.org" } })
narrow:wait() wide:wait()
for _, f in ipairs { "n_plain", "n_https", "n_far", "n_far_https", "n_socks", "n_socks_ok", "n_noproxy",
                     "n_noproxy_ip", "n_raw_far", "n_raw_far_ip", "n_raw_ok", "n_sock", "n_sock_allowed",
                     "n_sock_proxy", "n_listeners", "n_far_after", "w_far" } do
  local ok, v = pcall(s.get_bytes, s, f)
  out(f, ok and v or "missing")
end
out("wide_after", sh(s, C .. "http://far.test/hello").stdout)
local ok, e = pcall(s.exec, s, "true", { network_allowlist = { "example.com" } })
out("widen", ok and "ok" or e.kind .. " " .. e.message)
ok, e = pcall(s.exec, s, "true", { network_allowlist = { "pypi.org" }, network_mode = "blocked" })
out("blocked_list", ok and "ok" or e.kind)
s:close()
]]
    end
    local function check(res, o)
      -- The narrowed run reaches its host, every way (the controls).
      assert.matches("hello from 198.51.100.2:80", res.n_plain or "", 1, true, o)
      assert.matches("hello from 198.51.100.2:443", res.n_https or "", 1, true, o)
      assert.matches("hello from 198.51.100.2:80", res.n_socks_ok or "", 1, true, o)
      assert.matches("^HTTP/1%.%d 200", res.n_raw_ok or "", nil, o)
      assert.matches("^connected", res.n_sock_proxy or "", nil, o)
      -- ... and not the host its session also allows, by any client.
      assert.matches("not on this run's allow%-list", res.n_far or "", nil, o)
      assert.matches("403", res.n_far_https or "", 1, true, o)
      assert.is_nil((res.n_far_https or ""):match("rc=0"), o)
      assert.is_nil((res.n_socks or ""):match("rc=0"), o)
      assert.is_nil((res.n_noproxy or ""):match("rc=0"), o)
      assert.is_nil((res.n_noproxy_ip or ""):match("rc=0"), o)
      assert.matches("^HTTP/1%.%d 403", res.n_raw_far or "", nil, o)
      assert.matches("^HTTP/1%.%d 403", res.n_raw_far_ip or "", nil, o)
      assert.matches("^refused", res.n_sock or "", nil, o)
      assert.matches("^refused", res.n_sock_allowed or "", nil, o)
      -- One listener in its namespace: its own.
      assert.are.equal("1", res.n_listeners, o)
      -- Meanwhile the wide run of the same session reached far.test, and
      -- the narrowed run still did not, after that.
      assert.matches("hello from 203.0.113.2:80", res.w_far or "", 1, true, o)
      assert.matches("not on this run's allow%-list", res.n_far_after or "", nil, o)
      assert.matches("hello from 203.0.113.2:80", res.wide_after or "", 1, true, o)
      -- A list that widens the session's is refused, naming the entry.
      assert.matches("^PolicyDenied .*example%.com", res.widen or "", nil, o)
      assert.are.equal("InvalidArgument", res.blocked_list, o)
    end

    it("keeps a narrowed run to its list while a wide run of the session goes on", function()
      local res, o = run(script([[
local s = sbx.session{ backend = "userns", network_mode = "allowlist",
  network_allowlist = { "pypi.org", "far.test" } }
]]))
      check(res, o)
    end)

    it("does the same through sbxd", function()
      local res, o = run(F.SBXD .. [[
local s = sbx.remote.session{ endpoint = srv.url, token = srv.token.alice, backend = "userns",
  network_mode = "allowlist", network_allowlist = { "pypi.org", "far.test" } }
]] .. script(""):gsub("s:close%(%)\n$", function() return [[
s:close()
srv:stop()
]] end))
      check(res, o)
    end)
  end)
end)

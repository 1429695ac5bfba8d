-- examples/networking.lua: per-call networking in one session, the way an
-- agent installs a dependency: blocked -> allowlist (fetch from PyPI
-- through the enforcing proxy) -> blocked again; then a run with an
-- allow-list of its own, narrower than the session's.
--
--   build/bin/sbxlua examples/networking.lua
--
-- The session's network_mode is the ceiling ("allowlist" here); each run
-- asks for what it needs, never more.  On a machine without internet the
-- allowlist step reports that PyPI could not be reached; what it shows
-- either way is that the proxy lets PyPI through and refuses the rest.
-- (make test runs it inside a fake internet, tests/net, with
-- SBX_EXAMPLE_CA naming the fake PyPI's certificate authority.)
local sbx = require "sbx"

-- A probe run inside the sandbox: DNS, and a direct TCP connection that
-- does not use the proxy (to 192.0.2.1, TEST-NET-1: reserved for
-- documentation, never routed).
local PROBE = [[
import socket
for what, target in (("dns", "pypi.org"), ("tcp", ("192.0.2.1", 443))):
    try:
        if what == "dns":
            socket.getaddrinfo(target, 443)
        else:
            socket.create_connection(target, timeout=3).close()
        print(what, "reachable")
    except OSError as e:
        print(what, "blocked:", type(e).__name__, e.strerror or e)
]]

local function probe(s, label, mode)
  local r = s:exec({ "python3", "-c", PROBE }, { timeout_s = 20, network_mode = mode })
  for line in r.stdout:gmatch("[^\n]+") do print(label .. ": " .. line) end
end

local s = sbx.session { backend = "userns", network_mode = "allowlist",
                        network_allowlist = sbx.PYPI_HOSTS }

-- 1. blocked: a network namespace with only lo (no proxy listener either).
probe(s, "blocked", "blocked")

-- 2. allowlist: HTTPS_PROXY points at the proxy inside the namespace.
local ca = os.getenv("SBX_EXAMPLE_CA")
local curl = "curl -sS --max-time 20 -o /dev/null -w '%{http_code}' "
if ca then
  s:put_bytes("ca.pem", assert(io.open(ca)):read("*a"))
  curl = curl .. "--cacert ca.pem "
end
local r = s:exec(curl .. "https://pypi.org/simple/", { network_mode = "allowlist" })
print(("allowlist: pypi.org -> %s"):format(r.returncode == 0 and "HTTP " .. r.stdout
  or "unreachable (" .. r.stderr:gsub("%s+$", "") .. ")"))
r = s:exec(curl .. "https://example.com/", { network_mode = "allowlist" })
print(("allowlist: example.com -> %s"):format(r.stderr:match("response (%d+)") and
  "refused by the proxy (" .. r.stderr:match("response (%d+)") .. ")" or r.stderr))
probe(s, "allowlist", "allowlist")

-- 3. blocked again, in the same session.
probe(s, "blocked again", "blocked")

-- 4. A run with an allow-list of its own, narrower than the session's: it
-- reaches only files.pythonhosted.org (in a network namespace of its own,
-- whatever other runs of the session do meanwhile).  A list reaching
-- beyond the session's is refused before the run starts.
local own = { network_allowlist = { "files.pythonhosted.org" } }
r = s:exec(curl .. "https://files.pythonhosted.org/", own)
print(("own list: files.pythonhosted.org -> %s"):format(r.returncode == 0 and "HTTP " .. r.stdout
  or "unreachable (" .. r.stderr:gsub("%s+$", "") .. ")"))
r = s:exec(curl .. "https://pypi.org/simple/", own)
print(("own list: pypi.org -> %s"):format(r.stderr:match("response (%d+)") and
  "refused by the proxy (" .. r.stderr:match("response (%d+)") .. ")" or r.stderr))
local ok0, e0 = pcall(s.exec, s, "true", { network_allowlist = { "example.com" } })
print("own list: example.com:", ok0 and "allowed?!" or e0.kind)

-- A run cannot widen its session's ceiling.
local ok, e = pcall(s.exec, s, "true", { network_mode = "open" })
print("open:", ok and "allowed?!" or e.kind)
s:close()

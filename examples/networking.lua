-- examples/networking.lua: per-call networking.  The intended sequence is
-- blocked -> allowlist (install a package from PyPI) -> blocked again.
--
-- HONEST STATUS: only network_mode = "blocked" is built.  The allowlist
-- proxy is the networking issue's work; until it lands, asking for
-- "allowlist" fails closed with BackendUnavailable (it is never silently
-- ignored), and this script shows exactly that.  Once it lands, the middle
-- step opens an allowlist session and tries the install.
--
--   build/bin/sbxlua examples/networking.lua
local sbx = require "sbx"

-- A probe run inside the sandbox: try DNS and a direct TCP connection (to
-- 192.0.2.1, TEST-NET-1: reserved for documentation, never routed).
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

local function probe(s, label)
  local r = s:exec({ "python3", "-c", PROBE }, { timeout_s = 20 })
  for line in r.stdout:gmatch("[^\n]+") do print(label .. ": " .. line) end
end

-- 1. blocked (the default): a network namespace with only lo.
local s = sbx.session { backend = "userns" }
print("network_mode: blocked (the default)")
probe(s, "blocked")

-- 2. allowlist: PyPI only.
local ok, a = pcall(sbx.session, { backend = "userns", network_mode = "allowlist",
  network_allowlist = sbx.PYPI_HOSTS })
if ok then
  print("allowlist: session opened")
  local r = a:exec("python3 -m pip download --no-deps -d /tmp/pkgs six", { timeout_s = 120 })
  print("allowlist: pip download exit", r.returncode)
  a:close()
else
  -- Today: BackendUnavailable, naming what is missing and how to fix.
  print("allowlist:", a.kind, a.missing or a.message)
end

-- 3. blocked again: the first session never changed.
probe(s, "blocked again")
s:close()

-- fakenet.lua: the test "internet" (tests/net/fakenet.sh) for busted specs.
--
--   local F = require "net.fakenet"          -- specs run with lpath ./tests/?.lua
--   local ok, why = F.available()            -- false, reason when `ip netns` is impossible
--   local net = F.up(F.unique("myspec"))     -- raises when up fails; < 2 s
--   local out, code = net:exec_host("curl -sS http://198.51.100.2/hello")
--   net:zone{ ["pypi.org"] = "198.51.100.2", ["x.test"] = { "203.0.113.2", "2001:db8:100::2" } }
--   net:dns_queries()   --> { "pypi.org", ... } (one entry per query, A and AAAA both count)
--   net:ca_file()       --> path of the CA that signed the HTTPS server's cert
--   net:sites_dir()     --> DIR/HOST/... is served for requests to HOST (Host header)
--   net:package_index{ python = { "name", "1.0" }, npm = { "name", "1.0.0" } }
--                       -- a PyPI simple index + wheel and an npm registry
--                          document + tarball there (tests/net/fakeindex.py)
--   net:down()          -- idempotent; call it in a finally/teardown
--
-- Addresses (F.ADDR): host = 198.51.100.1 (the host netns side), inet = 198.51.100.2
-- (DNS :53, HTTP :80, HTTPS :443, UDP echo :7, TCP echo :9), far = 203.0.113.2 (HTTP,
-- HTTPS, echo; another "internet" network), host6 / inet6 = 2001:db8:100::1 / ::2.
-- HTTP paths: /hello ("hello from ADDR:PORT"), /big/N (N MiB), /big/N.sha256,
-- /headers, POST /echo.  See fakenet.sh for the whole picture.

local M = {}

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./tests/net/"
M.SCRIPT = here .. "fakenet.sh"
M.ADDR = {
  host = "198.51.100.1", inet = "198.51.100.2", far = "203.0.113.2",
  host6 = "2001:db8:100::1", inet6 = "2001:db8:100::2",
}

-- Quote s for a POSIX shell.
local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.quote = q

-- Run a shell command line; returns its stdout+stderr and exit status.
local function run(cmdline)
  local p = assert(io.popen("(" .. cmdline .. ") 2>&1; echo \"__fakenet_rc=$?\""))
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("__fakenet_rc=(%d+)\n?$"))
  out = out:gsub("__fakenet_rc=%d+\n?$", "")
  return out, rc or -1
end
M.run = run

-- true when network namespaces can be made here (root and `ip netns` works),
-- else false, reason.
function M.available()
  local probe = M.unique("sbxfn-probe")
  local out, rc = run("ip netns add " .. probe .. " && ip netns del " .. probe)
  if rc ~= 0 then return false, "ip netns unavailable: " .. out:gsub("%s+$", "") end
  return true
end

-- The calling process's pid (from /proc/self/stat).
local function getpid()
  local f = io.open("/proc/self/stat")
  local pid = f and f:read("*n")
  if f then f:close() end
  return pid or math.random(1e6)
end

local counter = 0
-- A name no other process's fake internet uses at the same time (specs run
-- in parallel on one machine): prefix .. pid .. n.  Keep prefix short.
function M.unique(prefix)
  counter = counter + 1
  return (prefix or "fn") .. getpid() .. "n" .. counter
end

local Net = {}
Net.__index = Net

-- Bring the fake internet NAME up (NAME-host, NAME-inet); state in dir
-- (default /tmp/sbx-fakenet-NAME).  Raises with the script's output on failure.
function M.up(name, dir)
  local cmd = q(M.SCRIPT) .. " up " .. q(name) .. (dir and (" " .. q(dir)) or "")
  local out, rc = run(cmd)
  if rc ~= 0 then error("fakenet up " .. name .. " failed: " .. out, 2) end
  local self = setmetatable({
    name = name, dir = dir or ("/tmp/sbx-fakenet-" .. name),
    host_ns = name .. "-host", inet_ns = name .. "-inet", addr = M.ADDR,
  }, Net)
  return self
end

-- Run a shell command line in the host netns; returns output (stdout+stderr), exit code.
function Net:exec_host(cmdline)
  return run("ip netns exec " .. q(self.host_ns) .. " sh -c " .. q(cmdline))
end

-- Run a shell command line in the internet netns; returns output, exit code.
function Net:exec_inet(cmdline)
  return run("ip netns exec " .. q(self.inet_ns) .. " sh -c " .. q(cmdline))
end

-- Replace the DNS zone: tbl maps name -> address or list of addresses (IPv4 → A,
-- IPv6 → AAAA).  Takes effect for the next query.
function Net:zone(tbl)
  local lines = {}
  for name, addrs in pairs(tbl) do
    if type(addrs) ~= "table" then addrs = { addrs } end
    for _, a in ipairs(addrs) do lines[#lines + 1] = name .. " " .. a end
  end
  local tmp = self.dir .. "/zone.new"
  local f = assert(io.open(tmp, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  assert(os.rename(tmp, self.dir .. "/zone"))
end

local function read_lines(path)
  local t = {}
  local f = io.open(path, "r")
  if not f then return t end
  for line in f:lines() do t[#t + 1] = line end
  f:close()
  return t
end

-- Every DNS query name so far, in order (lower case, one per query; the types
-- in dns_queries_typed()).
function Net:dns_queries()
  local t = {}
  for _, line in ipairs(read_lines(self.dir .. "/dns-queries.log")) do
    t[#t + 1] = line:match("^(%S+)")
  end
  return t
end

-- Every DNS query so far as { name = ..., type = "A"|"AAAA"|... }.
function Net:dns_queries_typed()
  local t = {}
  for _, line in ipairs(read_lines(self.dir .. "/dns-queries.log")) do
    local n, ty = line:match("^(%S+) (%S+)")
    t[#t + 1] = { name = n, type = ty }
  end
  return t
end

-- Forget the queries logged so far.
function Net:clear_dns_queries()
  local f = assert(io.open(self.dir .. "/dns-queries.log", "w"))
  f:close()
end

-- Every HTTP(S) request served so far: lines `ADDR:PORT PEER METHOD PATH HOST`.
function Net:http_requests()
  return read_lines(self.dir .. "/http-access.log")
end

function Net:ca_file()
  return self.dir .. "/ca.pem"
end

function Net:sites_dir()
  return self.dir .. "/sites"
end

M.FAKEINDEX = here .. "fakeindex.py"

-- Serve a tiny Python package under pypi.org / files.pythonhosted.org and a
-- tiny npm package under registry.npmjs.org (put those names in the zone).
function Net:package_index(spec)
  local py, npm = spec.python, spec.npm
  local out, rc = run(("/usr/bin/python3 %s sites %s %s %s %s %s"):format(q(M.FAKEINDEX),
    q(self:sites_dir()), q(py[1]), q(py[2]), q(npm[1]), q(npm[2])))
  if rc ~= 0 then error("fakeindex failed: " .. out, 2) end
end

-- Tear everything down (servers, both netns, /etc/netns/NAME-host, the state dir).
-- Idempotent.
function Net:down()
  local cmd = q(M.SCRIPT) .. " down " .. q(self.name) .. " " .. q(self.dir)
  local out, rc = run(cmd)
  if rc ~= 0 then error("fakenet down " .. self.name .. " failed: " .. out, 2) end
end

return M

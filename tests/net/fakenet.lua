-- fakenet.lua: the test "internet" (tests/net/fakenet.sh) for busted specs.
--
--   local F = require "net.fakenet"          -- specs run with lpath ./tests/?.lua
--   local ok, why = F.available()            -- false, reason when `ip netns` is impossible
--   if not F.need(it, pending) then return end  -- in a describe: one pending test if not
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
-- Running sbxlua as "the host" (sbxlua, sbxd, the proxy, pasta live in NAME-host):
--   net:sbxlua("examples/x.lua", { VAR = "value" })  --> output (stdout+stderr), exit status
--   local res, all, rc = net:script(code, { env = { VAR = "v" }, vars = { NAME = value } })
--       -- runs a Lua script (prelude below, then code) in the host netns;
--          res = { key = value } from its out(key, value) calls,
--          all = its stdout+stderr, then "-- results --" and the results file
--   net:work_dir()      --> a scratch dir of this fake internet (net:script's
--                           case.lua, results, SBX_STATE_DIR=DIR/state); down() removes it
--   F.SBXD              -- Lua code for a script: starts an sbxd as `srv` (module `SH`,
--                           tests/server/harness.lua), token srv.token.alice
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

-- For a busted describe block: true when network namespaces can be made;
-- else registers one pending test saying why and returns false, so that
--   if not F.need(it, pending) then return end
-- skips the block's tests.
function M.need(it, pending)
  local ok, why = M.available()
  if not ok then it("needs network namespaces", function() pending(why) end) end
  return ok
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

-- Tear everything down (servers, both netns, /etc/netns/NAME-host, the state dir,
-- work_dir()).
-- Idempotent.
function Net:down()
  local cmd = q(M.SCRIPT) .. " down " .. q(self.name) .. " " .. q(self.dir)
  local out, rc = run(cmd)
  if self.work then
    require("spec.sec_helpers").rmtree(self.work)
    self.work = nil
  end
  if rc ~= 0 then error("fakenet down " .. self.name .. " failed: " .. out, 2) end
end

-- ---- sbxlua scripts as "the host" ------------------------------------------
-- These use tests/spec/sec_helpers.lua (the sbxlua running the specs, the
-- repo root), loaded on first use, so scripts that only need the network
-- (tests/bench) do not load it.

-- `VAR=value ...` words for env(1), in name order (so a command line is the
-- same on every run).
local function env_words(env)
  local names, words = {}, {}
  for k in pairs(env or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do words[#words + 1] = k .. "=" .. q(env[k]) end
  return table.concat(words, " ")
end

-- Run `sbxlua SCRIPT` (the sbxlua running the specs; SCRIPT relative to the
-- current directory) in the host netns, env a table of more variables.
-- Returns its output (stdout and stderr, merged) and exit status.
function Net:sbxlua(script, env)
  local H = require "spec.sec_helpers"
  return run("ip netns exec " .. q(self.host_ns) .. " env " .. env_words(env) .. " "
    .. q(H.SBXLUA) .. " " .. q(script))
end

-- A scratch dir for this fake internet's scripts, made on first use and
-- removed by down().
function Net:work_dir()
  if not self.work then
    self.work = require("spec.sec_helpers").mktemp_dir("fakenet")
  end
  return self.work
end

-- What net:script puts ahead of the code: sbx, the fake internet's CA, and
-- out(key, value), which writes `key<TAB>value` to a results file of the
-- script's own (one unbuffered write per line), never to stdout, so that the
-- host side's log lines cannot split or swallow a result.  The value's
-- trailing white space goes, its newlines are written as \n.
local PRELUDE = [[
package.path = TESTS .. "/?.lua;" .. package.path
local sbx = require "sbx"
local RESULTS = assert(io.open(RESULTS_PATH, "w"))
RESULTS:setvbuf("no")
local function out(k, v) RESULTS:write(k .. "\t" .. (tostring(v):gsub("%s+$", ""):gsub("\n", "\\n")) .. "\n") end
]]

-- Lua code that starts an sbxd in a net:script script (after the prelude):
-- `SH` is tests/server/harness.lua, `srv` the server, one token `srv.token.alice`.
M.SBXD = [[
local SH = dofile(TESTS .. "/server/harness.lua")
local srv = SH.start{ tokens = { alice = "tok-alice-0123456789abcdefgh" } }
]]

-- Run Lua code as a script under sbxlua in the host netns, after the
-- prelude above.  o.vars: { NAME = value } made `local NAME = value` ahead
-- of the prelude (TESTS, RESULTS_PATH and CA, the fake internet's CA file,
-- are always there); o.env: more environment (SBX_STATE_DIR is
-- work_dir()/state).  Returns { key = value } from the results, the
-- script's output followed by "-- results --" and the results, and the
-- exit status.
function Net:script(code, o)
  o = o or {}
  local H = require "spec.sec_helpers"
  local dir = self:work_dir()
  local path, results = dir .. "/case.lua", dir .. "/results"
  os.remove(results)
  local vars = { TESTS = H.ROOT .. "/tests", RESULTS_PATH = results, CA = self:ca_file() }
  for k, v in pairs(o.vars or {}) do vars[k] = v end
  local names, head = {}, {}
  for k in pairs(vars) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do head[#head + 1] = ("local %s = %q\n"):format(k, vars[k]) end
  H.write_file(path, table.concat(head) .. PRELUDE .. code)
  local env = { SBX_STATE_DIR = dir .. "/state" }
  for k, v in pairs(o.env or {}) do env[k] = v end
  local output, rc = self:sbxlua(path, env)
  local got = H.read_file(results) or ""
  local t = {}
  for line in got:gmatch("[^\n]+") do
    local k, v = line:match("^([%w_]+)\t(.*)$")
    if k then t[k] = v end
  end
  return t, output .. "\n-- results --\n" .. got, rc
end

return M

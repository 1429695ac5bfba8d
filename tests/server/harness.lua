-- harness.lua: start and stop a real sbxd for the server specs.
--
--   local H = dofile(ROOT .. "/tests/server/harness.lua")
--   local srv = H.start{ tokens = { alice = "...", bob = "..." }, args = { "--max-runs", "2" },
--                        tls = true, env = { NAME = "value" }, netns = "NAME-host" }
--   srv.url, srv.pid, srv.token.alice, srv.dir, srv.log_path, srv:log()
--   srv:stop()                 -- SIGTERM, waits; returns the exit status
--   H.curl(args)               -- runs curl, returns stdout, http status
--
-- sbxd is the one next to the sbxlua running the specs (build/bin/sbxd),
-- listening on 127.0.0.1:0 (the kernel picks a free port; sbxd prints it).

local M = {}

local function sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("*a")
  local ok, _, code = p:close()
  return out, code or (ok and 0 or 1)
end
M.sh = sh

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
M.q = q

M.ROOT = (debug.getinfo(1, "S").source:match("^@(.*/)tests/server/") or "./"):gsub("/$", "")
if M.ROOT == "" or M.ROOT == "." then M.ROOT = sh("pwd"):gsub("%s+$", "") end
-- The directory of the sbxlua running the specs (the popen shell's parent).
M.BIN = sh("readlink -f /proc/$PPID/exe"):gsub("%s+$", ""):match("^(.*)/[^/]+$") or "."
M.SBXD = os.getenv("SBXD") or (M.BIN .. "/sbxd")

function M.available()
  local f = io.open(M.SBXD)
  if f then f:close() return true end
  return false
end

function M.have(prog)
  return sh("command -v " .. prog .. " >/dev/null 2>&1 && echo yes"):match("yes") ~= nil
end

-- The Python probes in tests/server/ (Debian's python3-h2, hyperframe).
M.PY = "/usr/bin/python3"
function M.have_python_h2()
  return sh(M.PY .. " -c 'import h2, hyperframe; print(1)' 2>/dev/null"):match("1") ~= nil
end

-- Runs tests/server/SCRIPT with args (nil ends them) and returns its line
-- of flat JSON (strings, numbers, booleans, null) as a table; .raw: all
-- it printed.
function M.probe(script, ...)
  local args = {}
  for _, a in ipairs({ ... }) do args[#args + 1] = q(a) end
  local out = sh(("%s %s/tests/server/%s %s 2>&1"):format(M.PY, M.ROOT, script, table.concat(args, " ")))
  local r = { raw = out }
  for k, v in out:gmatch('"([%w_]+)": ([^,}]+)') do
    if v == "null" then r[k] = nil
    elseif v == "true" or v == "false" then r[k] = v == "true"
    elseif v:match('^"') then r[k] = v:sub(2, -2)
    else r[k] = tonumber(v) end
  end
  return r
end

local Srv = {}
Srv.__index = Srv

local counter = 0

function M.start(o)
  o = o or {}
  counter = counter + 1
  local dir = sh("mktemp -d /tmp/sbxd-spec.XXXXXX"):gsub("%s+$", "")
  local tokens = o.tokens or {
    alice = "tok-alice-" .. counter .. "-0123456789abcdef",
    bob = "tok-bob-" .. counter .. "-0123456789abcdef",
  }
  local tf = io.open(dir .. "/tokens", "w")
  for tenant, tok in pairs(tokens) do tf:write(tok, " ", tenant, "\n") end
  tf:close()
  local args = { M.SBXD, "--listen", o.listen or "127.0.0.1:0", "--token-file", dir .. "/tokens",
    "--policy", M.ROOT .. "/policies/default.lua", "--log-level", o.log_level or "info" }
  if o.tls then
    sh(("openssl req -x509 -newkey rsa:2048 -nodes -keyout %s/key.pem -out %s/cert.pem -days 1 " ..
      "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost 2>/dev/null"):format(dir, dir))
    args[#args + 1] = "--tls-cert"; args[#args + 1] = dir .. "/cert.pem"
    args[#args + 1] = "--tls-key"; args[#args + 1] = dir .. "/key.pem"
  end
  for _, a in ipairs(o.args or {}) do args[#args + 1] = a end
  -- o.netns: run sbxd in that network namespace (`ip netns exec`, which
  -- execs in place: the pid stays sbxd's).  Its clients must run there too.
  if o.netns then
    for i, a in ipairs { "ip", "netns", "exec", o.netns } do table.insert(args, i, a) end
  end
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = q(a) end
  -- The pid first, then sbxd's own "listening on" line.  LeakSanitizer
  -- would turn a clean exit of an ASan build into exit 23: off for sbxd.
  -- o.env: extra environment variables for sbxd ({ NAME = value }).
  local env = {}
  for k, v in pairs(o.env or {}) do env[#env + 1] = k .. "=" .. q(v) end
  -- o.small_quarantine: AddressSanitizer keeps up to 256 MiB of freed
  -- memory in quarantine, which an ASan sbxd shows as RSS after streaming
  -- large files through freed buffers; specs that bound sbxd's RSS ask for
  -- a 4 MiB one, so they measure sbxd rather than ASan (no effect without
  -- ASan).
  local asan = "detect_leaks=0" .. (o.small_quarantine and ":quarantine_size_mb=4" or "")
  local cmd = ("%s ASAN_OPTIONS=%s sh -c 'echo $$; exec \"$@\"' sbxd %s 2>%s/log"):format(
    table.concat(env, " "), asan, table.concat(quoted, " "), dir)
  local p = io.popen(cmd, "r")
  local pid = tonumber(p:read("*l"))
  local line = p:read("*l")
  local self = setmetatable({ dir = dir, pid = pid, pipe = p, token = tokens, log_path = dir .. "/log",
    cert = o.tls and dir .. "/cert.pem" or nil }, Srv)
  if not line or not line:match("listening on") then
    self.start_error = (line or "") .. "\n" .. self:log()
    p:close()
    self.pipe = nil
    os.execute("rm -rf " .. q(dir))
    return nil, self.start_error
  end
  self.url = line:match("listening on (%S+)")
  return self
end

function Srv:log()
  local f = io.open(self.log_path)
  if not f then return "" end
  local s = f:read("*a")
  f:close()
  return s
end

-- sbxd's resident memory now, in KiB.
function Srv:rss_kb()
  local f = io.open("/proc/" .. self.pid .. "/status")
  local s = f and f:read("*a") or ""
  if f then f:close() end
  return tonumber(s:match("VmRSS:%s+(%d+)"))
end

-- Signal sbxd and wait for it; returns the exit code.
function Srv:stop(sig)
  if not self.pipe then return self.exit_code end
  os.execute(("kill -%s %d 2>/dev/null"):format(sig or "TERM", self.pid))
  local rest = self.pipe:read("*a")
  local ok, how, code = self.pipe:close()
  self.pipe = nil
  self.exit_code = code or (ok and 0 or 1)
  self.exit_how = how
  local _ = rest
  return self.exit_code, how
end

function Srv:cleanup()
  self:stop("KILL")
  os.execute("rm -rf " .. q(self.dir))
end

-- curl with the server's URL prefix: M.curl(srv, "-X", "GET", "/v1/sessions", ...)
-- Returns body, http status (number), and curl's exit code.
function Srv:curl(path, ...)
  -- 120 s: a deadline for a loaded machine, not a latency bound.
  local args = { "curl", "-s", "-S", "--max-time", "120", "-w", "\\n%{http_code}" }
  if self.cert then args[#args + 1] = "--cacert" args[#args + 1] = self.cert
  else args[#args + 1] = "--http2-prior-knowledge" end
  for _, a in ipairs { ... } do args[#args + 1] = a end
  args[#args + 1] = self.url .. path
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = q(a) end
  local out, code = sh(table.concat(quoted, " ") .. " 2>&1")
  local body, status = out:match("^(.*)\n(%d%d%d)$")
  return body or out, tonumber(status), code
end

function Srv:auth(tenant)
  return "Authorization: Bearer " .. self.token[tenant or "alice"]
end

-- Minimal JSON field readers for answers in tests (sbxd's JSON is compact).
function M.json_field(s, k)
  return s:match('"' .. k .. '":"([^"]*)"') or tonumber(s:match('"' .. k .. '":(%-?[%d.]+)'))
end

-- Processes whose command line mentions the marker (sandboxed commands
-- carry it in their argv).
function M.count_procs(marker)
  local out = sh("ps -eo args= | grep -F -- " .. q(marker) .. " | grep -v grep | wc -l")
  return tonumber(out) or 0
end

return M

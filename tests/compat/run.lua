-- run.lua: `make compat`.  Runs CPython regression-test modules (Debian's
-- libpython3.11-testsuite) on the host as an unprivileged user (65534) and
-- in a session per backend, then diffs the outcomes test by test
-- (tests/compat/diff.py).  The diff is the output; the exit status is 1
-- when it is not empty, 2 when something could not run at all.
--
-- usage: sbxlua tests/compat/run.lua [--backend B]... [--timeout S] [--out DIR] [MODULE...]
--   --backend  userns (default), privileged, bubblewrap; repeatable
--   --timeout  per module and side, seconds (default 1200)
--   --out      where the JUnit files and logs go (default: a fresh /tmp dir)

local sbx = require "sbx"

local MODULES = { "test_os", "test_subprocess", "test_socket", "test_signal",
  "test_multiprocessing_spawn", "test_asyncio", "test_pty", "test_mmap", "test_posix" }
local PY = "/usr/bin/python3.11"
local HERE = (debug.getinfo(1, "S").source:match("^@(.*/)") or "./")

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function sh(cmd)
  local ok, _, code = os.execute(cmd)
  if type(ok) == "number" then return ok end -- LuaJIT without 5.2 compat
  return ok and 0 or (code or 1)
end
local function now() return os.time() end
local function die(msg) io.stderr:write("compat: ", msg, "\n") os.exit(2) end

local backends, modules, timeout, out = {}, {}, 1200, nil
do
  local i = 1
  while arg[i] do
    local a = arg[i]
    if a == "--backend" then backends[#backends + 1] = arg[i + 1]; i = i + 1
    elseif a == "--timeout" then timeout = tonumber(arg[i + 1]) or die("bad --timeout"); i = i + 1
    elseif a == "--out" then out = arg[i + 1]; i = i + 1
    elseif a:sub(1, 2) == "--" then die("unknown option " .. a)
    else modules[#modules + 1] = a end
    i = i + 1
  end
end
if #backends == 0 then backends = { "userns" } end
if #modules == 0 then modules = MODULES end
if sh("test -x " .. PY
    .. " && test -d /usr/lib/python3.11/test/test_os.py -o -f /usr/lib/python3.11/test/test_os.py") ~= 0 then
  die(PY .. " or its test suite is missing: apt-get install libpython3.11-testsuite (scripts/bootstrap-deps.sh)")
end
if not out then
  local p = io.popen("mktemp -d /tmp/sbx-compat.XXXXXX")
  out = p:read("*l")
  p:close()
end

-- The host side runs with the session's open-files limit: tests size
-- themselves by it (test_subprocess's test_no_leaking skips above 1026),
-- and the harness's limit is not what is being compared.
local nofile
do
  local ok, s = pcall(sbx.session, { backend = backends[1] })
  if not ok then die(backends[1] .. ": " .. tostring(type(s) == "table" and s.message or s)) end
  local r = s:exec("echo $(ulimit -Sn):$(ulimit -Hn)")
  s:close()
  nofile = r.stdout:match("^(%d+:%d+)") or die("cannot read the session's open-files limit: " .. r.stdout)
end

-- The host side: a directory of nobody's, a clean environment.
local hostdir = out .. "/host"
if sh(("mkdir -p %s/tmp && chown -R 65534:65534 %s && chmod 0755 %s"):format(q(hostdir), q(hostdir), q(out))) ~= 0 then
  die("cannot prepare " .. hostdir)
end
local function run_host(mod)
  local t0 = now()
  local cmd = ("cd %s && prlimit --nofile=" .. nofile
    .. " setpriv --reuid=65534 --regid=65534 --clear-groups env -i PATH=/usr/bin:/bin "
    .. "HOME=%s TMPDIR=%s/tmp LANG=C.UTF-8 timeout -k 10 %d %s -m test --junit-xml %s/%s.xml %s > %s/%s.log 2>&1")
    :format(q(hostdir), q(hostdir), q(hostdir), timeout, PY, q(hostdir), mod, mod, q(hostdir), mod)
  sh(cmd)
  return now() - t0
end

local function run_session(s, dir, mod)
  local t0 = now()
  local r = s:exec(("%s -m test --junit-xml \"$PWD/%s.xml\" %s"):format(PY, mod, mod),
    { timeout_s = timeout })
  local f = io.open(dir .. "/" .. mod .. ".log", "wb")
  f:write(r.stdout or "", r.stderr or "", ("\n[returncode %s %s]\n"):format(tostring(r.returncode),
    tostring(r.termination_reason)))
  f:close()
  sh(("cp %s/%s.xml %s/ 2>/dev/null"):format(q(s.work_dir), mod, q(dir)))
  return now() - t0
end

local times = {}
for _, mod in ipairs(modules) do
  times[mod] = { host = run_host(mod) }
  io.stderr:write(("compat: %s on the host: %d s\n"):format(mod, times[mod].host))
end
local status = 0
for _, b in ipairs(backends) do
  local dir = out .. "/" .. b
  sh("mkdir -p " .. q(dir))
  local ok, s = pcall(sbx.session, { backend = b, timeout_s = 86400 })
  if not ok then die(b .. ": " .. tostring(type(s) == "table" and s.message or s)) end
  for _, mod in ipairs(modules) do
    times[mod][b] = run_session(s, dir, mod)
    io.stderr:write(("compat: %s in a %s session: %d s\n"):format(mod, b, times[mod][b]))
  end
  s:close()
  print(("== diff host / %s session (%s)"):format(b, dir))
  io.stdout:flush()
  local rc = sh(("/usr/bin/python3 %s %s %s %s"):format(q(HERE .. "diff.py"), q(hostdir), q(dir),
    table.concat(modules, " ")))
  if rc ~= 0 and status == 0 then status = 1 end
end
print("== seconds per module: host, then each backend")
for _, mod in ipairs(modules) do
  local row = { mod, tostring(times[mod].host) }
  for _, b in ipairs(backends) do row[#row + 1] = b .. "=" .. tostring(times[mod][b]) end
  print("   " .. table.concat(row, " "))
end
print("results in " .. out)
os.exit(status)

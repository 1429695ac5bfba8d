-- soak.lua: many runs across many sessions, then check that the host side
-- is back where it started.
--
--   build/bin/sbxlua tests/soak/soak.lua [RUNS [SESSIONS [SEED]]]   (make soak)
--   local soak = dofile("tests/soak/soak.lua"); soak.run{ runs =, sessions =, seed = }
--
-- Sessions are opened in waves of up to `parallel` (default 5) at once,
-- with random options (a memory_mb ceiling on some, so cgroups come and
-- go; a max_file_bytes; a network ceiling of blocked, allowlist (a proxy
-- child per session) or open (nftables + pasta, where the machine has
-- them)),
-- and each wave's runs are spread round-robin over its sessions.  A run is
-- one of: shell / python / lua code writing a random amount of stdout (up
-- to 256 KiB) and stderr; a non-zero exit; a run past its timeout; a run
-- killed with SIGKILL by the host mid-way; a put_bytes + get_bytes round
-- trip of random size; a streamed run read line by line; a run in a random
-- network mode within the session's ceiling that checks what it sees (no
-- proxy when blocked, the proxy and its refusal when allowlist, an outside
-- interface when open).  Every result is checked (byte counts, exit codes,
-- termination reasons).
--
-- Host-side figures are taken after a warm-up and again at the end: open
-- fds, RSS, /proc/self/mountinfo lines, the cgroup dirs of this soak's
-- sessions under /sys/fs/cgroup, session dirs in the (private) state dir,
-- and child processes.  They must return to the baseline (fds, mounts and
-- children may only go down: other code in the same process may close
-- things meanwhile; RSS within a margin: the allocator and the JIT keep
-- some; under ASan, whose quarantine holds up to 256 MiB of freed memory,
-- RSS is reported, not judged).  SBX_STATE_DIR is pointed at a temp dir so
-- the session dirs counted are this soak's own; their names are the
-- session ids, which name the cgroup dirs (sbx/<id>) too, so cgroups of
-- other processes on the machine are not counted.

local ffi = require "ffi"
pcall(ffi.cdef, [[int setenv(const char *name, const char *value, int overwrite);]])
pcall(ffi.cdef, [[int unsetenv(const char *name);]])
pcall(ffi.cdef, [[int getpid(void);]])

local M = {}

local function sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  return out
end

local function count_lines(cmd)
  local n = 0
  for _ in sh(cmd):gmatch("[^\n]+") do n = n + 1 end
  return n
end

local function read_file(p)
  local f = io.open(p)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function ls(dir)
  local t = {}
  for name in sh("ls -A " .. dir .. " 2>/dev/null"):gmatch("%S+") do t[#t + 1] = name end
  return t
end

-- cgroup dirs (any hierarchy) of the session ids in the set ids.
local function cgroup_dirs(ids)
  local n = 0
  for line in sh("find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d -path '*/sbx/*' 2>/dev/null"):gmatch("[^\n]+") do
    if ids[line:match("([^/]+)$")] then n = n + 1 end
  end
  return n
end

local function under_asan()
  return (read_file("/proc/self/maps") or ""):find("libasan", 1, true) ~= nil
    or os.getenv("SBX_SOAK_ASAN") == "1"
end
M.under_asan = under_asan

-- The host side's figures.
function M.figures(state_dir, ids)
  collectgarbage("collect")
  collectgarbage("collect")
  local pid = ffi.C.getpid()
  local status = read_file("/proc/self/status") or ""
  return {
    fds = count_lines("ls /proc/" .. pid .. "/fd") - 1, -- minus this popen's pipe
    rss_kb = tonumber(status:match("VmRSS:%s*(%d+)")) or 0,
    mounts = count_lines("cat /proc/" .. pid .. "/mountinfo"),
    cgroups = cgroup_dirs(ids or {}),
    session_dirs = state_dir and count_lines("ls -A " .. state_dir .. "/sessions 2>/dev/null") or 0,
    children = count_lines("ps -o pid= --ppid " .. pid) - 1, -- minus the popen shell
  }
end

local function rng(seed)
  local x = seed % 2147483647
  if x <= 0 then x = x + 2147483646 end
  return function(a, b)
    x = (x * 16807) % 2147483647
    return a + x % (b - a + 1)
  end
end

local function fail(fmt, ...) error(("soak: " .. fmt):format(...), 2) end

-- One random run on session s; returns the kind done.
local MODES = { "blocked", "allowlist", "open" }
local WIDTH = { blocked = 1, allowlist = 2, open = 3 }

-- What a run in mode m sees: the proxy listener (127.0.0.1:3128 is
-- 0100007F:0C38 in /proc/net/tcp, state 0A: listening), the proxy variables, interfaces other
-- than lo; in allowlist mode a name the proxy refuses before any lookup.
local NET_PROBE = "grep -c '^ *[0-9]*: 0100007F:0C38 00000000:0000 0A ' /proc/net/tcp; "
  .. "echo \"proxy=${HTTPS_PROXY:-}\"; "
  .. "grep -c -v -e '^ *lo:' -e '|' /proc/net/dev; "
  .. "[ -n \"$HTTPS_PROXY\" ] && curl -s --max-time 10 http://refused.invalid/ || true"

local function net_run(s, rand)
  local m = MODES[rand(1, WIDTH[s._soak_ceiling])]
  local r = s:exec(NET_PROBE, { network_mode = m })
  local listeners, proxy, ifaces = r.stdout:match("^(%d+)\nproxy=([^\n]*)\n(%d+)\n")
  local ok = listeners ~= nil
  if m == "blocked" then
    ok = ok and listeners == "0" and proxy == "" and ifaces == "0"
  elseif m == "allowlist" then
    ok = ok and listeners == "1" and proxy == "http://127.0.0.1:3128" and ifaces == "0"
      and r.stdout:find("not on the allow-list", 1, true) ~= nil
  else
    ok = ok and listeners == "0" and proxy == "" and ifaces ~= "0"
  end
  if not ok then fail("net %s in a %s session saw: %q", m, s._soak_ceiling, r.stdout .. r.stderr) end
  return "net_" .. m
end

local function one_run(s, rand)
  local kind = rand(1, 100)
  if kind <= 6 then
    return net_run(s, rand)
  elseif kind <= 30 then
    local n = ({ 0, 1, 100, 4096, 65536, 262144 })[rand(1, 6)]
    local r = s:exec(("head -c %d /dev/zero | tr '\\0' x; echo err >&2"):format(n))
    if r.returncode ~= 0 or #r.stdout ~= n or r.stderr ~= "err\n" then
      fail("shell: rc %s, %d/%d stdout bytes, stderr %q", tostring(r.returncode), #r.stdout, n, r.stderr)
    end
    return "shell"
  elseif kind <= 45 then
    local n = rand(0, 50000)
    local out = s:run_code(("import sys; sys.stdout.write('y' * %d)"):format(n))
    if #out ~= n then fail("python: %d/%d bytes", #out, n) end
    return "python"
  elseif kind <= 55 then
    local n = rand(0, 20000)
    local out = s:run_code(("io.write(string.rep('z', %d))"):format(n), { script_type = "lua" })
    if #out ~= n then fail("lua: %d/%d bytes", #out, n) end
    return "lua"
  elseif kind <= 62 then
    local code = rand(1, 255)
    local r = s:exec("exit " .. code)
    if r.returncode ~= code then fail("exit %d gave %s", code, tostring(r.returncode)) end
    return "exit"
  elseif kind <= 68 then
    local r = s:exec("sleep 30", { timeout_s = 0.05 * rand(1, 4) })
    if r.termination_reason ~= "timeout" then
      fail("timeout run ended with %q rc %s", tostring(r.termination_reason), tostring(r.returncode))
    end
    return "timeout"
  elseif kind <= 74 then
    local p = s:run("echo started; exec sleep 30")
    local first = p:lines("stdout")()
    if first ~= "started" then fail("kill: first line %q", tostring(first)) end
    p:kill(9)
    p:wait()
    if p.returncode == 0 then fail("killed run exited 0") end
    return "kill"
  elseif kind <= 90 then
    local n = ({ 0, 1, 1000, 65536, 1048576 })[rand(1, 5)]
    local data = string.rep(string.char(rand(0, 255)), n) .. tostring(rand(1, 1e9))
    local path = ("d%d/f%d.bin"):format(rand(1, 3), rand(1, 10))
    s:put_bytes(path, data)
    if s:get_bytes(path) ~= data then fail("put/get %s: bytes differ", path) end
    local r = s:exec("wc -c < " .. path)
    if tonumber(r.stdout) ~= #data then fail("sandbox sees %s bytes of %d", r.stdout, #data) end
    return "files"
  else
    local n = rand(1, 200)
    local p = s:run(("i=0; while [ $i -lt %d ]; do echo line$i; i=$((i+1)); done"):format(n))
    local count = 0
    for _ in p:lines("stdout") do count = count + 1 end
    p:wait()
    if count ~= n or p.returncode ~= 0 then fail("stream: %d/%d lines, rc %s", count, n, tostring(p.returncode)) end
    return "stream"
  end
end

local run_soak

-- run{ runs, sessions, seed, parallel, rss_margin_kb, log } -> report
-- (raises on a wrong result; report.ok false when a figure did not return).
-- SBX_STATE_DIR is restored and the temp state dir removed
-- however the soak ends (a failed check raises).
function M.run(o)
  local old = os.getenv("SBX_STATE_DIR")
  local state_dir = sh("d=$(mktemp -d /tmp/sbx-soak-state.XXXXXX) && chmod 755 $d && echo $d"):gsub("%s+$", "")
  ffi.C.setenv("SBX_STATE_DIR", state_dir, 1)
  local ok, rep = pcall(run_soak, o or {}, state_dir)
  if old then ffi.C.setenv("SBX_STATE_DIR", old, 1) else ffi.C.unsetenv("SBX_STATE_DIR") end
  collectgarbage("collect")
  os.execute("rm -rf '" .. state_dir .. "'")
  if not ok then error(rep, 0) end
  return rep
end

function run_soak(o, state_dir)
  local sbx = require "sbx"
  local runs, sessions = o.runs or 10000, o.sessions or 50
  local parallel = math.min(o.parallel or 5, sessions)
  local rand = rng(o.seed or os.time())
  local log = o.log or function() end

  -- open mode needs pasta and nft (and root here): probe once, and say so
  -- when the soak runs without it.
  local has_open = o.open ~= false and pcall(function() sbx.session { network_mode = "open" }:close() end)
  if not has_open then log("soak: network_mode open unavailable here; sessions are blocked or allowlist") end

  local function open_session()
    local pick = rand(1, 6)
    local ceiling = pick <= 3 and "blocked" or (pick <= 5 or not has_open) and "allowlist" or "open"
    local opts = { network_mode = ceiling, max_file_bytes = 4 * 1048576 }
    if ceiling ~= "blocked" then opts.network_allowlist = { "pypi.org" } end
    if rand(1, 3) == 1 then opts.memory_mb = 256 + 64 * rand(0, 4) end
    if rand(1, 4) == 1 then opts.pids = 64 end
    local s = sbx.session(opts)
    s._soak_ceiling = ceiling
    return s
  end

  -- warm-up: the first session loads code, the JIT and caches
  do
    local s = open_session()
    for _ = 1, 20 do one_run(s, rand) end
    s:close()
  end
  local ids = {}
  local base = M.figures(state_dir, ids)
  local t0 = os.clock()
  local kinds, done, opened = {}, 0, 0
  local per = math.ceil(runs / sessions)
  while opened < sessions do
    local wave = {}
    for _ = 1, math.min(parallel, sessions - opened) do
      wave[#wave + 1] = open_session()
      opened = opened + 1
    end
    local quota = math.min(per * #wave, runs - done)
    for i = 1, quota do
      local k = one_run(wave[(i - 1) % #wave + 1], rand)
      kinds[k] = (kinds[k] or 0) + 1
      done = done + 1
    end
    for _, id in ipairs(ls(state_dir .. "/sessions")) do ids[id] = true end
    local mid = M.figures(state_dir, ids)
    log(("wave: %d/%d sessions, %d/%d runs; fds %d rss %d kB mounts %d cgroups %d session dirs %d children %d")
      :format(opened, sessions, done, runs, mid.fds, mid.rss_kb, mid.mounts, mid.cgroups,
        mid.session_dirs, mid.children))
    for _, s in ipairs(wave) do s:close() end
  end
  -- A closed session's last descriptors and processes can still be on
  -- their way out (a child not yet reaped, its fd closed when it is):
  -- wait for the baseline, up to a generous deadline, before calling
  -- anything that stays a leak.
  local after = M.figures(state_dir, ids)
  local deadline = os.time() + 20
  while (after.fds > base.fds or after.children > base.children) and os.time() < deadline do
    sh("sleep 0.1")
    after = M.figures(state_dir, ids)
  end
  local margin = o.rss_margin_kb or 32768
  local diffs = {}
  for _, k in ipairs { "fds", "mounts", "children" } do
    if after[k] > base[k] then diffs[#diffs + 1] = ("%s %d -> %d"):format(k, base[k], after[k]) end
  end
  if after.fds > base.fds then
    local fds = sh("ls -l /proc/" .. ffi.C.getpid() .. "/fd | awk '{print $9, $11}'")
    diffs[#diffs + 1] = "open fds: " .. fds:gsub("\n", " ")
  end
  if after.cgroups ~= 0 then diffs[#diffs + 1] = ("%d cgroup dirs of closed sessions left"):format(after.cgroups) end
  if after.session_dirs ~= 0 then diffs[#diffs + 1] = ("%d session dirs left"):format(after.session_dirs) end
  local nids = 0
  for _ in pairs(ids) do nids = nids + 1 end
  if nids ~= opened then diffs[#diffs + 1] = ("saw %d session dirs for %d sessions"):format(nids, opened) end
  if not under_asan() and after.rss_kb > base.rss_kb + margin then
    diffs[#diffs + 1] = ("rss %d kB -> %d kB (margin %d kB)"):format(base.rss_kb, after.rss_kb, margin)
  end
  return { ok = #diffs == 0, diffs = diffs, base = base, after = after, runs = done,
    sessions = opened, kinds = kinds, cpu_s = os.clock() - t0, asan = under_asan() }
end

-- As a script: sbxlua tests/soak/soak.lua [RUNS [SESSIONS [SEED]]]
if arg and arg[0] and arg[0]:match("soak%.lua$") then
  local t = os.time()
  local rep = M.run { runs = tonumber(arg[1]), sessions = tonumber(arg[2]), seed = tonumber(arg[3]),
    log = function(s) io.stderr:write(s, "\n") end }
  local ks = {}
  for k, v in pairs(rep.kinds) do ks[#ks + 1] = k .. "=" .. v end
  table.sort(ks)
  print(("soak: %d runs over %d sessions in %d s (%s)"):format(rep.runs, rep.sessions, os.time() - t,
    table.concat(ks, " ")))
  local b, a = rep.base, rep.after
  print(("soak: baseline fds %d rss %d kB mounts %d cgroups %d session dirs %d children %d"):format(
    b.fds, b.rss_kb, b.mounts, b.cgroups, b.session_dirs, b.children))
  print(("soak: after    fds %d rss %d kB mounts %d cgroups %d session dirs %d children %d"):format(
    a.fds, a.rss_kb, a.mounts, a.cgroups, a.session_dirs, a.children))
  if not rep.ok then
    print("soak: FAILED: " .. table.concat(rep.diffs, "; "))
    os.exit(1)
  end
  print("soak: ok")
end

return M

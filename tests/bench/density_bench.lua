-- density_bench.lua: how many idle sessions a host holds (issue 18).
--
-- Opens N userns sessions (network blocked), one exec("/bin/true") each,
-- and keeps them open.  Then, once the sessions have sat idle for --idle
-- seconds (idle warm inits expire after a while: session.c), it reports:
--   * memory per idle session: the PSS (/proc/PID/smaps_rollup) of every
--     process this host started (its descendants) plus what this host's own
--     PSS grew by, divided by N;
--   * host processes per session: those descendants / N, with the PSS per
--     kind of process (sbx-zygote, sbx-init, the waiting workload);
--   * open + first exec p50 with N sessions live, next to the same figure
--     with none live (sampled before the N open and after they closed), as
--     a ratio.
-- Limits it needs (open files, pids) are raised or checked first; what
-- cannot be is reported, not worked around.
--
-- usage: sbxlua tests/bench/density_bench.lua [-n N] [--idle SECONDS] [--kinds]
--        (N: 500; SBX_DENSITY_N=2000 in the environment does the same as -n)

local ffi = require "ffi"
local clock = require "sbx.clock"
local sbx = require "sbx"

local n = tonumber(os.getenv("SBX_DENSITY_N") or "") or 500
local idle_s = 12
local SAMPLES = 21
do
  local i = 1
  while i <= #arg do
    if arg[i] == "-n" then n = tonumber(arg[i + 1]); i = i + 1
    elseif arg[i] == "--idle" then idle_s = tonumber(arg[i + 1]); i = i + 1
    else io.stderr:write("density_bench: unknown argument ", arg[i], "\n"); os.exit(2) end
    i = i + 1
  end
  assert(n and n >= 1 and idle_s and idle_s >= 0, "-n and --idle take positive numbers")
end

ffi.cdef [[
struct sbx_bench_rlimit { uint64_t cur, max; };
int getrlimit(int, struct sbx_bench_rlimit *);
int setrlimit(int, const struct sbx_bench_rlimit *);
int getpid(void);
]]
local RLIMIT_NOFILE = 7

-- Each session holds a handful of host fds (control socket, work dir,
-- lock, inbox, warm offers): raise the soft limit to need, and the hard
-- one too where allowed (root); else as far as the hard one goes.
local function raise_nofile(need)
  local rl = ffi.new("struct sbx_bench_rlimit")
  assert(ffi.C.getrlimit(RLIMIT_NOFILE, rl) == 0)
  if rl.cur < need then
    local want = ffi.new("struct sbx_bench_rlimit", need, rl.max < need and need or rl.max)
    if ffi.C.setrlimit(RLIMIT_NOFILE, want) ~= 0 then
      rl.cur = rl.max
      ffi.C.setrlimit(RLIMIT_NOFILE, rl)
    end
    ffi.C.getrlimit(RLIMIT_NOFILE, rl)
  end
  return tonumber(rl.cur)
end

local function fd_count()
  local p, count = io.popen("ls /proc/" .. ffi.C.getpid() .. "/fd"), 0
  for _ in p:lines() do count = count + 1 end
  p:close()
  return count
end

local function read_file(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function pct(t, p)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c[math.max(1, math.ceil(p / 100 * #c))]
end

-- Every process below pid (its descendants), from /proc/PID/stat's ppid.
local function descendants(root)
  local parent, out = {}, {}
  local p = io.popen("ls /proc")
  for name in p:lines() do
    local pid = tonumber(name)
    if pid then
      local st = read_file("/proc/" .. pid .. "/stat")
      -- comm may hold spaces and parens: ppid follows the last ')'.
      local ppid = st and tonumber(st:match("%) %S+ (%d+)"))
      if ppid then parent[pid] = ppid end
    end
  end
  p:close()
  for pid in pairs(parent) do
    local q, hops = parent[pid], 0
    while q and q ~= root and q > 1 and hops < 64 do q, hops = parent[q], hops + 1 end
    if q == root then out[#out + 1] = pid end
  end
  return out
end

-- Kernel memory a process costs beyond its pages (kernel stack, page
-- tables, namespaces and mounts in slab): system-wide, so others' jobs
-- move it too; reported beside PSS, not added to it.
local function kernel_kb()
  local m, kb = read_file("/proc/meminfo") or "", 0
  for _, k in ipairs { "KernelStack", "PageTables", "SUnreclaim" } do
    kb = kb + (tonumber(m:match("\n" .. k .. ":%s+(%d+)")) or 0)
  end
  return kb
end

local function pss_kb(pid)
  local s = read_file("/proc/" .. pid .. "/smaps_rollup")
  return s and tonumber(s:match("\nPss:%s+(%d+)")) or 0
end

local function comm(pid)
  return ((read_file("/proc/" .. pid .. "/comm") or "?"):gsub("%s+$", ""))
end

local function ppid(pid)
  local st = read_file("/proc/" .. pid .. "/stat")
  return st and tonumber(st:match("%) %S+ (%d+)"))
end

-- A process's kind: its name; an sbx-init forked by another is the
-- workload waiting for its request (it has not exec'd yet).
local function kind(pid)
  local c = comm(pid)
  if c == "sbx-init" and comm(ppid(pid) or 0) == "sbx-init" then return "workload (waiting)" end
  return c
end

local policy = os.tmpname()
do
  local f = assert(io.open(policy, "w"))
  f:write('return { name = "density", ceilings = { backends = { "userns" } } }\n')
  f:close()
end
local OPTS = { backend = "userns", network_mode = "blocked", policy = policy }

local function open_exec()
  local t0 = clock.now_ns()
  local s = sbx.session(OPTS)
  local r = s:exec("/bin/true")
  local ms = (clock.now_ns() - t0) / 1e6
  assert(r.returncode == 0, "/bin/true returned " .. tostring(r.returncode))
  return s, ms
end

-- SAMPLES times open + first exec of one more session (closed again),
-- appended to t; returns their p50.
local function open_exec_p50(t)
  t = t or {}
  for _ = 1, SAMPLES do
    local s, ms = open_exec()
    t[#t + 1] = ms
    s:close()
  end
  return pct(t, 50)
end

local self = ffi.C.getpid()
local fds = raise_nofile(n * 12 + 256)
local pid_max = tonumber(read_file("/proc/sys/kernel/pid_max") or "") or 0
print(("density: N=%d userns sessions (network blocked), one exec each; RLIMIT_NOFILE %d, pid_max %d, load %s")
  :format(n, fds, pid_max, (read_file("/proc/loadavg") or "?"):match("^(%S+ %S+ %S+)")))
if fds < n * 8 then
  print(("density: RLIMIT_NOFILE %d may be too low for %d sessions (raise the hard limit)"):format(fds, n))
end

-- The host alone, then the single-session figure (nothing else live).
collectgarbage("collect")
local base_kb, base_fds = pss_kb(self), fd_count()
-- (Sampled again once the sessions are closed: the machine's load moves.)
local alone = {}
open_exec_p50(alone)
local base_kernel_kb = kernel_kb()

local sessions, fill = {}, {}
local t_fill = clock.now_ns()
for i = 1, n do
  local ok, s, ms = pcall(open_exec)
  if not ok then
    local msg = type(s) == "table" and (s.message or tostring(s)) or tostring(s)
    print(("density: session %d of %d failed: %s"):format(i, n, msg))
    n = i - 1
    break
  end
  sessions[i], fill[i] = s, ms
end
local fill_s = (clock.now_ns() - t_fill) / 1e9
assert(n >= 1, "no session opened")

-- At N live: open + first exec of one more (closed again), SAMPLES times.
local at_n_p50 = open_exec_p50()

local function census(label)
  collectgarbage("collect")
  local procs = descendants(self)
  local total, by = 0, {}
  local counted = 0
  for _, pid in ipairs(procs) do
    local kb, k = pss_kb(pid), kind(pid)
    -- Gone since listed, or the listing's own shell: not the sessions'.
    if k == "?" or k == "sh" or k == "ls" then goto next end
    counted = counted + 1
    total = total + kb
    by[k] = by[k] or { n = 0, kb = 0 }
    by[k].n, by[k].kb = by[k].n + 1, by[k].kb + kb
    ::next::
  end
  local host_growth = pss_kb(self) - base_kb
  local per = (total + host_growth) / n / 1024
  print(("%-34s %7.2f MiB/session %6.2f processes/session (host PSS +%.1f MiB; kernel +%.2f MiB/session)")
    :format(label, per, counted / n, host_growth / 1024, (kernel_kb() - base_kernel_kb) / n / 1024))
  local names = {}
  for k in pairs(by) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    print(("  %-32s %6d processes %8.3f MiB PSS each"):format(k, by[k].n, by[k].kb / by[k].n / 1024))
  end
  return per, counted / n
end

print(("density: %d sessions opened in %.1f s (open + first exec p50 while filling %.2f ms); %.1f host fds each")
  :format(n, fill_s, pct(fill, 50), (fd_count() - base_fds) / n))
census("right after the last exec")
if idle_s > 0 then
  -- Waited off the clock: idle warm inits expire by themselves.
  os.execute("sleep " .. idle_s)
end
local mem, procs = census(("idle %d s"):format(idle_s))
-- The next exec in an idle session: warm again on demand.
local t0 = clock.now_ns()
assert(sessions[1]:exec("/bin/true").returncode == 0)
local again_ms = (clock.now_ns() - t0) / 1e6
for i = 1, n do sessions[i]:close() end
local one_p50 = open_exec_p50(alone)
os.remove(policy)

print()
print(("%-40s %10s %12s %8s %8s"):format("figure", "sbx", "limit", "ratio", "goal"))
print(("%-40s %10s %12s %8s %8s"):format(("idle session memory (%d sessions)"):format(n),
  ("%.2f MiB"):format(mem), "1 MiB", ("%.2f"):format(mem / 1), "<= 1"))
print(("%-40s %10.2f %12s %8s %8s"):format("host processes per idle session", procs, "2",
  ("%.2f"):format(procs / 2), "<= 1"))
print(("%-40s %7.2f ms %9.2f ms %8.2f %8s"):format(("open + first exec p50 at %d live"):format(n),
  at_n_p50, one_p50, at_n_p50 / one_p50, "<= 2"))
print(("%-40s %7.2f ms"):format("first exec after the idle wait", again_ms))

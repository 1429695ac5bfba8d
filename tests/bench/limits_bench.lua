-- limits_bench.lua: issue 18's figures of the run and open paths, each next
-- to the physical limit it is measured against, in the same run, as ratios
-- (make bench).  On a shared, noisy machine a figure and its limit are
-- measured in alternating rounds, and each is the median of its rounds'
-- p50s: what the machine's load does to one round it does to its limit's
-- round next to it.  (Where both are sessions of this process, each round
-- alternates them exec by exec.)
--
--   exec /bin/true p50 (userns)         vs bare fork+exec (sbx-bench-peer)
--   exec p50 with memory/cpu/pids       vs the same session without ceilings
--                                       (interleaved exec by exec)
--   session open + close (blocked)      vs unshare -Umnpif --mount-proc /bin/true
--     the same, a spare ready             (sbx.spares; CPU per open incl. the refill)
--     open + first exec, a spare ready    vs the same cold
--   session open, network "open"        vs the same namespaces without the network
--   20 sessions opened at once (total)  vs one open alone
--     20 x unshare at once                vs one unshare (the kernel's own ratio)
--     20 at once, 20 spares ready         vs one open alone
--
-- usage: sbxlua tests/bench/limits_bench.lua --peer PATH [-r ROUNDS] [-n RUNS]

local sbx = require "sbx"
local clock = require "sbx.clock"
local ffi = require "ffi"

local rounds, n, peer = 5, 300, nil
do
  local i = 1
  while i <= #arg do
    if arg[i] == "-r" then rounds = tonumber(arg[i + 1]); i = i + 1
    elseif arg[i] == "-n" then n = tonumber(arg[i + 1]); i = i + 1
    elseif arg[i] == "--peer" then peer = arg[i + 1]; i = i + 1
    else io.stderr:write("limits_bench: unknown argument ", arg[i], "\n"); os.exit(2) end
    i = i + 1
  end
  assert(peer and rounds and rounds >= 1 and n and n >= 1, "--peer PATH required; -r and -n take numbers")
end

local function now_ms() return clock.now_ns() / 1e6 end

-- CPU time (ms) of this process, all its threads (the spares' refill, the
-- reaper), plus its reaped children (zygotes, unshare).
ffi.cdef [[
struct sbx_bench_timeval { long tv_sec; long tv_usec; };
struct sbx_bench_rusage { struct sbx_bench_timeval ru_utime, ru_stime; long pad[14]; };
int getrusage(int who, struct sbx_bench_rusage *usage);
]]
local function cpu_ms()
  local total = 0
  for _, who in ipairs { 0, -1 } do -- RUSAGE_SELF, RUSAGE_CHILDREN
    local ru = ffi.new("struct sbx_bench_rusage")
    ffi.C.getrusage(who, ru)
    total = total + (tonumber(ru.ru_utime.tv_sec) + tonumber(ru.ru_stime.tv_sec)) * 1e3
      + (tonumber(ru.ru_utime.tv_usec) + tonumber(ru.ru_stime.tv_usec)) / 1e3
  end
  return total
end

local core = require "sbx.core"
ffi.cdef [[
struct sbx_bench_pollfd { int fd; short events; short revents; };
int poll(struct sbx_bench_pollfd *fds, unsigned long nfds, int timeout);
]]

-- Wait (bounded) until want spares are ready, polling.
local function spares_ready(want)
  for _ = 1, 4000 do
    if core.spares_stats().ready >= want then return true end
    ffi.C.poll(nil, 0, 5)
  end
  error("spares never became ready: " .. tostring(core.spares_stats().last_error))
end

local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  return s[math.max(1, math.ceil(#s / 2))]
end

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- p50 of argv run count times by sbx-bench-peer, or nil and why.
local function peer_p50(argv, count, at_once)
  local cmd = { shell_quote(peer), "-q", "-n", count, "-w", 5, "-c", at_once or 1, "--" }
  for _, a in ipairs(argv) do cmd[#cmd + 1] = shell_quote(a) end
  local f = assert(io.popen(table.concat(cmd, " ") .. " 2>&1"))
  local out = f:read("*a")
  f:close()
  local p50 = out:match("p50=([%d.]+)")
  if not p50 then return nil, (out:gsub("%s+$", "")) end
  return tonumber(p50)
end

local function exec_p50(s, count)
  local t = {}
  for i = 1, count do
    local t0 = now_ms()
    local r = s:exec("/bin/true")
    t[i] = now_ms() - t0
    assert(r.returncode == 0, "/bin/true returned " .. tostring(r.returncode))
  end
  return median(t)
end

local rows = {}
local function row(figure, value, limit_name, limit, goal_desc, pass, unit, note)
  rows[#rows + 1] = { figure = figure, value = value, limit_name = limit_name, limit = limit,
    goal = goal_desc, pass = pass, unit = unit or "ms", note = note }
end

-- 1. exec /bin/true in an open userns session vs bare fork+exec.
do
  local s = sbx.session { backend = "userns" }
  exec_p50(s, 30)
  local a, b = {}, {}
  for r = 1, rounds do
    a[r] = exec_p50(s, n)
    b[r] = assert(peer_p50({ "/bin/true" }, n))
  end
  s:close()
  local ratio = median(a) / median(b)
  row("exec /bin/true p50 (userns)", median(a), "fork+exec", median(b), "<= 1.25x", ratio <= 1.25)
end

-- p50s of /bin/true in two sessions, one exec in each by turns, so both
-- see the machine as it is in the same milliseconds.
local function exec_p50_pair(s1, s2, count)
  local t1, t2 = {}, {}
  for i = 1, count do
    local t0 = now_ms()
    local r1 = s1:exec("/bin/true")
    local t = now_ms()
    local r2 = s2:exec("/bin/true")
    t1[i], t2[i] = t - t0, now_ms() - t
    assert(r1.returncode == 0 and r2.returncode == 0, "/bin/true failed")
  end
  return median(t1), median(t2)
end

-- 2. The same with memory/CPU/pids ceilings vs a session without, both
-- open at once.  Both are sessions of this process, so each round
-- interleaves them exec by exec; a round of one, then a round of the
-- other (how this row was measured before, kept as a second line to
-- compare with earlier figures) spreads by +-0.1x here with the load.
do
  local plain = sbx.session { backend = "userns" }
  local ok, capped = pcall(sbx.session, { backend = "userns", memory_mb = 512, cpu_milli = 2000, pids = 256 })
  if ok then
    exec_p50_pair(capped, plain, 30)
    local a, b, c, d = {}, {}, {}, {}
    for r = 1, rounds do
      a[r], b[r] = exec_p50_pair(capped, plain, n)
      c[r] = exec_p50(capped, n)
      d[r] = exec_p50(plain, n)
    end
    capped:close()
    local ratio = median(a) / median(b)
    row("exec p50, memory/cpu/pids ceilings", median(a), "no ceilings", median(b), "<= 1.15x", ratio <= 1.15,
      nil, ("exec by exec; in rounds of %d each, as before: %.2f / %.2f ms, %.2fx"):format(n, median(c),
        median(d), median(c) / median(d)))
  else
    rows[#rows + 1] = { figure = "exec p50, memory/cpu/pids ceilings", why = tostring(capped.message or capped) }
  end
  plain:close()
end

-- Open (and close) times of count sessions with opts, one after another.
local function opens(opts, count)
  local o, c = {}, {}
  for i = 1, count do
    local t0 = now_ms()
    local s = sbx.session(opts)
    local t1 = now_ms()
    s:close()
    o[i], c[i] = t1 - t0, now_ms() - t0
  end
  return median(o), median(c)
end

-- 3. Session open + close (userns, blocked) vs unshare of the same
-- namespaces running /bin/true.
-- The floor beside it: sbx-open-peer (tests/bench/open_peer.c) does only
-- what any sandbox with these namespaces and a root of its own must: the
-- namespaces, id maps, the session's own read-only binds (read from a
-- session's mountinfo: each mount whose root is its mount point), a work
-- dir, /dev, /proc, the pivot and lo; then kill and reap.
local open_peer = peer:gsub("sbx%-bench%-peer$", "sbx-open-peer")
local open_peer_args
do
  local s = sbx.session { backend = "userns" }
  local mi = s:exec("cat /proc/self/mountinfo").stdout
  s:close()
  local work = os.tmpname()
  os.remove(work)
  assert(os.execute("mkdir -p " .. shell_quote(work)) == 0)
  open_peer_args = {}
  for line in mi:gmatch("[^\n]+") do
    local root, mp = line:match("^%S+ %S+ %S+ (%S+) (%S+) ")
    if root == mp and mp ~= "/" and not mp:match("^/dev") and not mp:match("^/proc") then
      open_peer_args[#open_peer_args + 1] = shell_quote(mp)
    end
  end
  open_peer_args[#open_peer_args + 1] = shell_quote(work)
end
local function open_peer_p50(count)
  local f = io.popen(("%s -n %d %s 2>&1"):format(shell_quote(open_peer), count, table.concat(open_peer_args, " ")))
  local out = f and f:read("*a") or ""
  if f then f:close() end
  return tonumber(out:match("p50=([%d.]+)"))
end

do
  opens({ backend = "userns" }, 3)
  local a, b, fl = {}, {}, {}
  for r = 1, rounds do
    a[r] = select(2, opens({ backend = "userns" }, 10))
    b[r] = peer_p50({ "unshare", "-Umnpif", "--mount-proc", "/bin/true" }, 20)
    fl[#fl + 1] = open_peer_p50(50)
  end
  -- CPU per cold open + close (the reaper's part included: measured
  -- after the last close has had time to be reaped).
  local c0 = cpu_ms()
  opens({ backend = "userns" }, 10)
  ffi.C.poll(nil, 0, 100)
  local cold_cpu = (cpu_ms() - c0) / 10
  local note = ("CPU %.2f ms per open+close"):format(cold_cpu)
  if b[1] then
    row("session open+close (userns, blocked)", median(a), "unshare -Umnpif", median(b), "<= 2 ms",
      median(a) <= 2, nil, note)
  else
    row("session open+close (userns, blocked)", median(a), "unshare -Umnpif", 0 / 0, "<= 2 ms", median(a) <= 2,
      nil, note)
  end
  if #fl == rounds then
    row("session open+close (userns, blocked)", median(a), "floor: sbx-open-peer", median(fl), "(floor)", nil, nil,
      ("the same namespaces, %d binds, /dev, /proc, pivot, lo in C; no state dir, seccomp, warm run"):format(
        #open_peer_args))
  end

  -- 3b. The same with a spare ready (sbx.spares, one of this shape): each
  -- open waits, unmeasured, until the refill of the last one is done; the
  -- CPU per open counts everything this process and its children did
  -- meanwhile, the refill's open of the next spare included.
  local function spare_opens(count)
    local t = {}
    local cpu0 = cpu_ms()
    for i = 1, count do
      spares_ready(1)
      local t0 = now_ms()
      local s = sbx.session { backend = "userns" }
      s:close()
      t[i] = now_ms() - t0
    end
    spares_ready(1)
    ffi.C.poll(nil, 0, 100)
    return median(t), (cpu_ms() - cpu0) / count
  end
  sbx.spares { n = 1, backend = "userns" }
  spare_opens(3)
  local sa, sc, su = {}, {}, {}
  for r = 1, rounds do
    sa[r], sc[r] = spare_opens(10)
    su[r] = peer_p50({ "unshare", "-Umnpif", "--mount-proc", "/bin/true" }, 20)
  end
  row("session open+close, a spare ready", median(sa), "unshare -Umnpif", su[1] and median(su) or 0 / 0,
    "<= 2 ms", median(sa) <= 2, nil,
    ("CPU %.2f ms per open+close incl. its refill (cold: %.2f); opens spaced for the refill")
      :format(median(sc), cold_cpu))

  -- 3c. What a user waits for before the first result: open + the first
  -- exec (a spare's warm run made ahead is let go at the take, so its
  -- first exec waits for a fresh one), a spare ready vs cold, alternating.
  local function open_exec(spare)
    local t = {}
    for i = 1, 10 do
      if spare then spares_ready(1) end
      local t0 = now_ms()
      local s = sbx.session { backend = "userns" }
      s:exec("/bin/true")
      t[i] = now_ms() - t0
      s:close()
    end
    return median(t)
  end
  local fe, fc = {}, {}
  for r = 1, rounds do
    fe[r] = open_exec(true)
    core.spares_flush()
    fc[r] = open_exec(false)
    sbx.spares { n = 1, backend = "userns" }
  end
  core.spares_flush()
  row("open + first exec, a spare ready", median(fe), "cold", median(fc), "(info)", true)
end

-- 4. Session open with network "open" (nft + pasta) vs the same
-- namespaces without the network (blocked), alternating.
do
  local ok, err = pcall(opens, { backend = "userns", network_mode = "open" }, 1)
  if ok then
    local a, b = {}, {}
    for r = 1, rounds do
      a[r] = opens({ backend = "userns", network_mode = "open" }, 4)
      b[r] = opens({ backend = "userns" }, 4)
    end
    row("session open, network open", median(a), "blocked", median(b), "<= 15 ms", median(a) <= 15)
  else
    rows[#rows + 1] = { figure = "session open, network open",
      why = tostring(type(err) == "table" and err.message or err) }
  end
end

-- 5. 20 sessions opened at once (sbx.session's wait hook, as sbxd opens
-- them: each start, then its ready fd polled with the others') vs one
-- open alone.
local function open_at_once(count)
  local cos, want, done, sessions = {}, {}, 0, {}
  for i = 1, count do
    cos[i] = coroutine.create(function()
      sessions[i] = sbx.session { backend = "userns",
        wait = function(fd, deadline) return coroutine.yield(fd, deadline) end }
    end)
  end
  local t0 = now_ms()
  local function step(i, ...)
    local ok, fd = coroutine.resume(cos[i], ...)
    if not ok then error(fd) end
    if coroutine.status(cos[i]) == "dead" then done = done + 1; want[i] = nil
    else want[i] = fd or false end
  end
  for i = 1, count do step(i) end
  while done < count do
    local idx, fds = {}, ffi.new("struct sbx_bench_pollfd[?]", count)
    local turn = {}
    for i, fd in pairs(want) do
      if fd == false then turn[#turn + 1] = i
      else
        fds[#idx].fd, fds[#idx].events = fd, 1 -- POLLIN
        idx[#idx + 1] = i
      end
    end
    for _, i in ipairs(turn) do step(i, true) end
    if #idx > 0 then
      local r = ffi.C.poll(fds, #idx, #turn > 0 and 0 or 10000)
      assert(r >= 0, "poll failed")
      for k = 1, #idx do
        if fds[k - 1].revents ~= 0 then step(idx[k], true) end
      end
    end
  end
  local total = now_ms() - t0
  for _, s in ipairs(sessions) do s:close() end
  return total
end
do
  open_at_once(2)
  local a, b = {}, {}
  for r = 1, rounds do
    a[r] = open_at_once(20)
    b[r] = opens({ backend = "userns" }, 10)
  end
  local ratio = median(a) / median(b)
  row("20 sessions opened at once, total", median(a), "one open", median(b), "<= 5x", ratio <= 5)

  -- 5b. The kernel's own ratio for the same namespaces: 20 unshares
  -- started at once until all are done, against one (sbx-bench-peer -c).
  local unshare = { "unshare", "-Umnpif", "--mount-proc", "/bin/true" }
  local u20, u1 = {}, {}
  for r = 1, rounds do
    u20[r] = peer_p50(unshare, 5, 20)
    u1[r] = peer_p50(unshare, 20)
  end
  if u20[1] and u1[1] then
    row("20 x unshare -Umnpif at once", median(u20), "one unshare", median(u1), "(peer)",
      true, nil, "the kernel's namespace creation on these cores: the floor of row 5's ratio")
  else
    rows[#rows + 1] = { figure = "20 x unshare -Umnpif at once", why = "unshare unavailable" }
  end

  -- 5c. 20 at once with 20 spares ready (sbx.spares{ n = 20 }), each round
  -- after the pool refilled; against one cold open (row 5's limit).
  sbx.spares { n = 20, backend = "userns" }
  local w, wc = {}, {}
  for r = 1, rounds do
    spares_ready(20)
    local c0 = cpu_ms()
    w[r] = open_at_once(20)
    spares_ready(20)
    ffi.C.poll(nil, 0, 100)
    wc[r] = (cpu_ms() - c0) / 20
  end
  core.spares_flush()
  local wr = median(w) / median(b)
  row("20 at once, 20 spares ready", median(w), "one open", median(b), "<= 5x", wr <= 5, nil,
    ("CPU %.2f ms per open incl. the refill of 20"):format(median(wc)))
end

local f = io.open("/proc/loadavg")
local load = f and f:read("*l"):match("^(%S+ %S+ %S+)") or "?"
if f then f:close() end
print(("== issue 18: figures against their limits, same run (median of %d rounds' p50s; load average %s)")
  :format(rounds, load))
print(("%-38s %10s  %-18s %10s %8s  %-9s"):format("figure", "sbx", "limit", "limit", "ratio", "goal"))
for _, r in ipairs(rows) do
  if r.why then
    print(("%-38s unavailable: %s"):format(r.figure, r.why:sub(1, 100)))
  else
    print(("%-38s %7.2f %s  %-18s %7.2f %s %7.2fx  %-9s %s"):format(r.figure, r.value, r.unit, r.limit_name,
      r.limit, r.unit, r.value / r.limit, r.goal,
      (r.goal == "(peer)" or r.goal == "(info)" or r.goal == "(floor)") and "" or (r.pass and "PASS" or "MISS")))
    if r.note then print(("%-38s   %s"):format("", r.note)) end
  end
end

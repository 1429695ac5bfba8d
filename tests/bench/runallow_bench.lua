-- runallow_bench.lua: what a run's own allow-list costs (issue 17, row 5).
--
-- In one allowlist session, times exec("/bin/true") as a plain allowlist
-- run (a warm, reused init in the session's shared namespace) and with
-- network_allowlist (an init in a namespace made for the run, whose
-- listener the proxy serves with the run's list): the session's first
-- such run (cold: the zygote makes the namespace and init while the run
-- waits) and later ones (the session keeps one ready, made while the
-- previous run went on: back to back it is still being made, 50 ms
-- apart it is ready).  Prints p50/p95 and the ratio to plain runs.
--
-- usage: sbxlua tests/bench/runallow_bench.lua [-n N]

local sbx = require "sbx"
local clock = require "sbx.clock"

local n = tonumber(arg[1] == "-n" and arg[2] or nil) or 200

local function pct(t, p)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  return c[math.max(1, math.ceil(p / 100 * #c))]
end

local function ms() return clock.now_ns() / 1e6 end

local function time_runs(s, o, count, gap_ms)
  local t = {}
  for i = 1, count do
    if gap_ms then
      local until_ms = ms() + gap_ms
      while ms() < until_ms do s:alive() end -- the next spare gets made meanwhile
    end
    local t0 = ms()
    s:exec({ "/bin/true" }, o)
    t[i] = ms() - t0
  end
  return t
end

local LIST = { "pypi.org", "*.pythonhosted.org" }
local NARROW = { network_allowlist = { "pypi.org" } }
local function session()
  return sbx.session { backend = "userns", network_mode = "allowlist", network_allowlist = LIST }
end

print(("== a run's own allow-list (exec(/bin/true), %d runs each, one allowlist session)"):format(n))
local s = session()
time_runs(s, { network_mode = "allowlist" }, 30) -- warm-up
time_runs(s, NARROW, 10)
local rows = {
  { "allowlist (session's list)", time_runs(s, { network_mode = "allowlist" }, n) },
  { "network_allowlist, back to back", time_runs(s, NARROW, n) },
  { "network_allowlist, 50 ms apart", time_runs(s, NARROW, math.floor(n / 4), 50) },
}
s:close()
-- The first narrowed run of a session: one per fresh session.
local first = {}
for i = 1, math.max(10, math.floor(n / 10)) do
  local x = session()
  x:exec({ "/bin/true" }, { network_mode = "allowlist" })
  local t0 = ms()
  x:exec({ "/bin/true" }, NARROW)
  first[i] = ms() - t0
  x:close()
end
table.insert(rows, 2, { "network_allowlist, first run", first })
local base = pct(rows[1][2], 50)
print(("%-34s %9s %9s %8s"):format("exec(/bin/true)", "p50 ms", "p95 ms", "vs plain"))
for _, r in ipairs(rows) do
  local p50 = pct(r[2], 50)
  print(("%-34s %9.2f %9.2f %7.2fx"):format(r[1], p50, pct(r[2], 95), p50 / base))
end

-- exec_latency.lua: the exec latency benchmark (make bench).
--
-- Times N runs of s:exec("/bin/true") in an open session, then, in the same
-- run, the same command through the peers (bare fork+exec, unshare, bwrap)
-- timed by sbx-bench-peer, and prints p50/p95/p99 side by side with the
-- ratio of each peer's p50 to sbx's, and the targets of issue 2.
--
-- usage: sbxlua tests/bench/exec_latency.lua --peer PATH [-n N] [-w WARMUP]
--        [--backend NAME] [--strict]   (--strict: exit 1 when a target is missed)

local clock = require "sbx.clock"

local opts = { n = 2000, warmup = 50, backend = "userns", peer = nil, strict = false }
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "-n" then opts.n = tonumber(arg[i + 1]); i = i + 1
    elseif a == "-w" then opts.warmup = tonumber(arg[i + 1]); i = i + 1
    elseif a == "--backend" then opts.backend = arg[i + 1]; i = i + 1
    elseif a == "--peer" then opts.peer = arg[i + 1]; i = i + 1
    elseif a == "--strict" then opts.strict = true
    else io.stderr:write("exec_latency: unknown argument ", a, "\n"); os.exit(2) end
    i = i + 1
  end
  assert(opts.n and opts.n >= 1 and opts.warmup, "-n and -w take positive numbers")
  assert(opts.peer, "--peer PATH (build/bin/sbx-bench-peer) is required")
end

local TARGET_P50_MS = 1.5
local TARGET_BWRAP_RATIO = 3

-- Nearest-rank percentile of a sorted array (as sbx-bench-peer computes it).
local function percentile(sorted, p)
  local rank = math.ceil(p / 100 * #sorted)
  return sorted[math.max(rank, 1)]
end

local function bench_sbx()
  local sbx = require "sbx"
  local s = sbx.session { backend = opts.backend }
  for _ = 1, opts.warmup do
    local r = s:exec("/bin/true")
    assert(r.returncode == 0, "warmup: /bin/true returned " .. tostring(r.returncode))
  end
  local t, now = {}, clock.now_ns
  for i = 1, opts.n do
    local t0 = now()
    local r = s:exec("/bin/true")
    t[i] = (now() - t0) / 1e6
    if r.returncode ~= 0 then
      error("run " .. i .. ": /bin/true returned " .. tostring(r.returncode))
    end
  end
  s:close()
  table.sort(t)
  return { p50 = percentile(t, 50), p95 = percentile(t, 95), p99 = percentile(t, 99) }
end

local function shell_quote(s)
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- Time argv with sbx-bench-peer: the percentiles, or nil and why not.
local function bench_peer(argv)
  local cmd = { shell_quote(opts.peer), "-q", "-n", opts.n, "-w", opts.warmup, "--" }
  for _, a in ipairs(argv) do cmd[#cmd + 1] = shell_quote(a) end
  local f = assert(io.popen(table.concat(cmd, " ") .. " 2>&1"))
  local out = f:read("*a")
  f:close()
  local p50, p95, p99 = out:match("p50=([%d.]+) p95=([%d.]+) p99=([%d.]+)")
  if not p50 then return nil, (out:gsub("%s+$", "")) end
  return { p50 = tonumber(p50), p95 = tonumber(p95), p99 = tonumber(p99) }
end

local peers = {
  { name = "fork+exec", argv = { "/bin/true" } },
  { name = "unshare -Umnpif", argv = { "unshare", "-Umnpif", "--mount-proc", "/bin/true" } },
  { name = "bwrap --unshare-all", key = "bwrap", argv = {
    "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
    "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
    "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev",
    "--tmpfs", "/tmp", "/bin/true" } },
}

io.stdout:write(string.format("exec latency of /bin/true: %d timed runs after %d warmup runs each\n",
  opts.n, opts.warmup))
io.stdout:flush()

local rows = {}
local ok, sbx_res = pcall(bench_sbx)
if not ok then
  io.stderr:write("exec_latency: the sbx session failed: ", tostring(sbx_res), "\n")
  os.exit(1)
end
rows[1] = { name = "sbx s:exec (" .. opts.backend .. ")", res = sbx_res }
local bwrap_res
for _, p in ipairs(peers) do
  local res, why = bench_peer(p.argv)
  rows[#rows + 1] = { name = p.name, res = res, why = why }
  if p.key == "bwrap" then bwrap_res = res end
end

local fmt = "%-24s %9s %9s %9s %14s\n"
io.stdout:write("\n", string.format(fmt, "name", "p50 ms", "p95 ms", "p99 ms", "p50 / sbx p50"))
for _, r in ipairs(rows) do
  if r.res then
    io.stdout:write(string.format(fmt, r.name, string.format("%.3f", r.res.p50),
      string.format("%.3f", r.res.p95), string.format("%.3f", r.res.p99),
      string.format("%.2fx", r.res.p50 / sbx_res.p50)))
  else
    io.stdout:write(string.format("%-24s unavailable: %s\n", r.name, r.why or "?"))
  end
end

local missed = 0
local function target(desc, value, pass)
  if not pass then missed = missed + 1 end
  io.stdout:write(string.format("  %-36s %-12s %s\n", desc, value, pass and "PASS" or "MISS"))
end
io.stdout:write("\ntargets:\n")
target(string.format("sbx p50 <= %.1f ms", TARGET_P50_MS), string.format("%.3f ms", sbx_res.p50),
  sbx_res.p50 <= TARGET_P50_MS)
if bwrap_res then
  local ratio = bwrap_res.p50 / sbx_res.p50
  target(string.format("bwrap p50 / sbx p50 >= %d", TARGET_BWRAP_RATIO), string.format("%.2fx", ratio),
    ratio >= TARGET_BWRAP_RATIO)
else
  target(string.format("bwrap p50 / sbx p50 >= %d", TARGET_BWRAP_RATIO), "no bwrap", false)
end
if opts.strict and missed > 0 then os.exit(1) end

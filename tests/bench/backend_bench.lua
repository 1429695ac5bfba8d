-- backend_bench.lua: per backend, side by side: session open+close time and
-- s:exec("/bin/true") latency (p50/p95), plus userns with resource ceilings
-- (the cgroup is per-session work; a run only reads the OOM counter).
-- Backends the machine cannot run are listed with why.
--
-- usage: sbxlua tests/bench/backend_bench.lua [-n RUNS] [-o OPENS]

local clock = require "sbx.clock"
local sbx = require "sbx"

local n, opens = 300, 20
do
  local i = 1
  while i <= #arg do
    if arg[i] == "-n" then n = tonumber(arg[i + 1]); i = i + 1
    elseif arg[i] == "-o" then opens = tonumber(arg[i + 1]); i = i + 1
    else io.stderr:write("backend_bench: unknown argument ", arg[i], "\n"); os.exit(2) end
    i = i + 1
  end
end

local policy = os.tmpname()
do
  local f = assert(io.open(policy, "w"))
  f:write('return { name = "bench", ceilings = { backends = '
    .. '{ "userns", "privileged", "bubblewrap", "none" } } }\n')
  f:close()
end

local function pct(t, p)
  table.sort(t)
  return t[math.max(1, math.ceil(p / 100 * #t))]
end

local CASES = {
  { label = "userns", opts = { backend = "userns" } },
  { label = "userns+ceilings", opts = { backend = "userns", memory_mb = 512, cpu_milli = 2000, pids = 256 } },
  { label = "privileged", opts = { backend = "privileged" } },
  { label = "bubblewrap", opts = { backend = "bubblewrap" } },
  { label = "none", opts = { backend = "none" } },
}

print(("%-16s %12s %12s %12s %12s"):format("backend", "open+close", "exec p50", "exec p95", "exec p99"))
for _, c in ipairs(CASES) do
  c.opts.policy = policy
  local ok, err = pcall(function()
    local t = {}
    for i = 1, opens do
      local t0 = clock.now_ns()
      local s = sbx.session(c.opts)
      s:close()
      t[i] = (clock.now_ns() - t0) / 1e6
    end
    local open_ms = pct(t, 50)
    local s = sbx.session(c.opts)
    for _ = 1, 20 do s:exec("/bin/true") end
    t = {}
    for i = 1, n do
      local t0 = clock.now_ns()
      local r = s:exec("/bin/true")
      t[i] = (clock.now_ns() - t0) / 1e6
      assert(r.returncode == 0, "/bin/true returned " .. tostring(r.returncode))
    end
    s:close()
    print(("%-16s %9.2f ms %9.3f ms %9.3f ms %9.3f ms"):format(c.label, open_ms, pct(t, 50), pct(t, 95),
      pct(t, 99)))
  end)
  if not ok then
    local msg = type(err) == "table" and (err.message or tostring(err)) or tostring(err)
    print(("%-16s unavailable: %s"):format(c.label, msg:sub(1, 100)))
  end
end
os.remove(policy)

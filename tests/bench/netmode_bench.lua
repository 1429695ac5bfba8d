-- netmode_bench.lua: what per-run network modes cost (make bench, issue 5).
--
-- In one allowlist session (whose runs may be blocked or allowlist), times
-- exec("/bin/true") with every run in the same mode, then alternating
-- between modes (blocked -> allowlist -> blocked, as an agent installing a
-- dependency does), and prints p50/p95 and the alternating/same ratio.
-- Also the cost of opening a session per network ceiling (each wider mode
-- adds a namespace; open adds nftables rules and pasta).
--
-- usage: sbxlua tests/bench/netmode_bench.lua [-n N]

local sbx = require "sbx"
local clock = require "sbx.clock"

local n = tonumber(arg[1] == "-n" and arg[2] or nil) or 400

local function pct(t, p)
  table.sort(t)
  return t[math.max(1, math.ceil(p / 100 * #t))]
end

local function time_runs(s, modes, count)
  local t = {}
  for i = 1, count do
    local m = modes[(i - 1) % #modes + 1]
    local t0 = (clock.now_ns() / 1e6)
    s:exec({ "/bin/true" }, { network_mode = m })
    t[i] = (clock.now_ns() / 1e6) - t0
  end
  return t
end

print(("== per-run network modes (%d runs each, one allowlist session)"):format(n))
local s = sbx.session { backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" } }
time_runs(s, { "blocked", "allowlist" }, 50) -- warm-up
local rows = {
  { "same mode (blocked)", time_runs(s, { "blocked" }, n) },
  { "same mode (allowlist)", time_runs(s, { "allowlist" }, n) },
  { "alternating blocked/allowlist", time_runs(s, { "blocked", "allowlist" }, n) },
}
s:close()
local base = pct(rows[1][2], 50)
print(("%-32s %9s %9s %8s"):format("exec(/bin/true)", "p50 ms", "p95 ms", "vs same"))
for _, r in ipairs(rows) do
  local p50 = pct(r[2], 50)
  print(("%-32s %9.2f %9.2f %7.2fx"):format(r[1], p50, pct(r[2], 95), p50 / base))
end

print()
print("== session open + close per network ceiling (20 each)")
print(("%-32s %9s %9s"):format("sbx.session{...}:close()", "p50 ms", "p95 ms"))
for _, m in ipairs { "blocked", "allowlist", "open" } do
  local t = {}
  local ok, err = pcall(function()
    for i = 1, 20 do
      local t0 = (clock.now_ns() / 1e6)
      local x = sbx.session { backend = "userns", network_mode = m }
      x:close()
      t[i] = (clock.now_ns() / 1e6) - t0
    end
  end)
  if ok then
    print(("%-32s %9.2f %9.2f"):format(m, pct(t, 50), pct(t, 95)))
  else
    print(("%-32s unavailable: %s"):format(m, type(err) == "table" and err.message or tostring(err)))
  end
end

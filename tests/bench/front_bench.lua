-- front_bench.lua: what sbxd's front (src/server/front.c, the HTTP/2 guard's
-- relay) costs, before/after in one run (issue 14's 5% budget).  Two sbxd
-- of the same build run side by side: one with the front (the default),
-- one with the hidden --no-front (benchmarks only: h2o takes the client's
-- socket directly, as before the front; refused unless plain text on
-- loopback).  The measurements alternate between them so load from the
-- other helpers on the machine falls on both alike:
--
--   1. stdout streaming: G GiB of `head -c` to curl (msgpack events,
--      discarded), K downloads each, alternating: median MB/s and sbxd's
--      CPU (utime+stime of all its threads, /proc) per GiB;
--   2. remote exec("/bin/true") p50 over sbx.remote, in alternating blocks;
--   3. runs/s with h2load -m 32 (when installed), alternating.
--
-- Ratios are after/before (front/no-front): 1.00 is free; the budget is
-- 0.95 for throughput, 1.05 for p50 and CPU.
--
-- usage: sbxlua tests/bench/front_bench.lua [--sbxd PATH] [--gib G] [-k K]
--        [-n N] [--tls]  (--tls: also stream through a TLS front, no ratio)
local sbx = require "sbx"
local core = require "sbx.core"

local args = { gib = 1, k = 6, n = 400 }
do
  local i = 1
  while arg[i] do
    if arg[i] == "--sbxd" then args.sbxd = arg[i + 1] i = i + 2
    elseif arg[i] == "--gib" then args.gib = tonumber(arg[i + 1]) i = i + 2
    elseif arg[i] == "-k" then args.k = tonumber(arg[i + 1]) i = i + 2
    elseif arg[i] == "-n" then args.n = tonumber(arg[i + 1]) i = i + 2
    elseif arg[i] == "--tls" then args.tls = true i = i + 1
    else error("unknown argument " .. arg[i]) end
  end
end

local root = debug.getinfo(1, "S").source:match("^@(.*/)tests/bench/") or "./"
local H = dofile(root .. "tests/server/harness.lua")
if args.sbxd then H.SBXD = args.sbxd end

local function now() return core.monotonic_ms() end
local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  local n = #c
  return n % 2 == 1 and c[(n + 1) / 2] or (c[n / 2] + c[n / 2 + 1]) / 2
end

-- CPU seconds of a process, all its threads (utime + stime).
local TICK = tonumber((H.sh("getconf CLK_TCK"):gsub("%s+", ""))) or 100
local function cpu_s(pid)
  local f = assert(io.open("/proc/" .. pid .. "/stat"))
  local s = f:read("*a")
  f:close()
  local rest = s:match("%) (.*)$")
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  -- fields after "(comm) ": state is 1, utime 12, stime 13
  return (tonumber(fields[12]) + tonumber(fields[13])) / TICK
end

local common = { "--max-runs", "1000", "--warm-runs", "1" }
local function start(extra, o)
  local a = {}
  for _, v in ipairs(common) do a[#a + 1] = v end
  for _, v in ipairs(extra) do a[#a + 1] = v end
  return assert(H.start { log_level = "error", args = a, tls = o and o.tls })
end

local side = {
  { name = "before (--no-front)", srv = start { "--no-front" } },
  { name = "after (front)", srv = start {} },
}
if args.tls then side[3] = { name = "front, TLS", srv = start({}, { tls = true }), tls = true } end

local function new_session(srv)
  return H.json_field(srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
    "-d", "{}"), "id")
end

local ok, err = pcall(function()
  print("== the front's cost (issue 14): the same build with and without the front, alternating ==")
  local bytes = math.floor(args.gib * 2^30)
  -- 1. streaming
  for _, s in ipairs(side) do
    s.id = new_session(s.srv)
    s.mbs, s.cpu = {}, {}
  end
  for _ = 1, args.k do
    for _, s in ipairs(side) do
      local srv = s.srv
      local c0, t0 = cpu_s(srv.pid), now()
      local out = H.sh(("curl -s %s -H %s -H 'accept: application/msgpack'"
        .. " -d '{\"cmd\":\"head -c %d /dev/zero\"}' -o /dev/null -w '%%{size_download}'"
        .. " %s/v1/sessions/%s/runs"):format(
        s.tls and ("--cacert " .. H.q(srv.cert)) or "--http2-prior-knowledge", H.q(srv:auth()), bytes, srv.url, s.id))
      local secs = (now() - t0) / 1000
      assert(tonumber(out) and tonumber(out) >= bytes, s.name .. ": short download: " .. tostring(out))
      s.mbs[#s.mbs + 1] = bytes / secs / 1e6
      s.cpu[#s.cpu + 1] = (cpu_s(srv.pid) - c0) / args.gib
    end
  end
  -- 2. exec p50, alternating blocks of 50
  for _, s in ipairs(side) do
    s.sess = sbx.remote.session { endpoint = s.srv.url, token = s.srv.token.alice,
      ca_file = s.tls and s.srv.cert or nil }
    for _ = 1, 20 do s.sess:exec { "/bin/true" } end
    s.lat = {}
  end
  for _ = 1, math.ceil(args.n / 50) do
    for _, s in ipairs(side) do
      for _ = 1, 50 do
        local t0 = now()
        s.sess:exec { "/bin/true" }
        s.lat[#s.lat + 1] = now() - t0
      end
    end
  end
  for _, s in ipairs(side) do s.sess:close() end
  -- 3. h2load (plain text sides only)
  local have_h2load = os.execute("command -v h2load >/dev/null 2>&1") == 0
  if have_h2load then
    local bodyf = os.tmpname()
    local f = assert(io.open(bodyf, "w"))
    f:write('{"cmd":["/bin/true"]}')
    f:close()
    for _, s in ipairs(side) do s.rps = {} end
    for _ = 1, 3 do
      for _, s in ipairs(side) do
        if not s.tls then
          local out = H.sh(("h2load -n 2000 -c 1 -m 32 -H %s -H 'content-type: application/json'"
            .. " -d %s %s/v1/sessions/%s/runs 2>&1"):format(
            H.q(s.srv:auth()), bodyf, s.srv.url, s.id))
          local rate = out:match("finished in [%d.]+m?s, ([%d.]+) req/s")
          if rate and tonumber(out:match("status codes: (%d+) 2xx") or 0) == 2000 then
            s.rps[#s.rps + 1] = tonumber(rate)
          end
        end
      end
    end
    os.remove(bodyf)
  end
  -- the table
  local b, a = side[1], side[2]
  -- budget: "-", or ">= x" / "<= x" on the ratio, with its verdict
  local function row(label, fmt, vb, va, budget)
    local ratio = va / vb
    local op, lim = budget:match("^([<>]=) ([%d.]+)$")
    local v = ""
    if op then
      local ok = (op == ">=" and ratio >= tonumber(lim)) or (op == "<=" and ratio <= tonumber(lim))
      v = ok and ": PASS" or ": MISS"
    end
    print(("%-34s %12s %12s   after/before %.2f (budget %s%s)"):format(label, fmt:format(vb), fmt:format(va),
      ratio, budget, v))
  end
  print(("%-34s %12s %12s"):format("", "before", "after"))
  row(("stream %g GiB, median of %d (MB/s)"):format(args.gib, args.k), "%.0f", median(b.mbs), median(a.mbs), ">= 0.95")
  row("sbxd CPU per GiB, median (s)", "%.2f", median(b.cpu), median(a.cpu), "-")
  row(("remote exec p50, n=%d (ms)"):format(#a.lat), "%.3f", median(b.lat), median(a.lat), "<= 1.05")
  if b.rps and #b.rps > 0 and #a.rps > 0 then
    row("h2load -m 32, median of 3 (runs/s)", "%.0f", median(b.rps), median(a.rps), ">= 0.95")
  else
    print("h2load: not measured")
  end
  if side[3] then
    local t = side[3]
    print(("front, TLS: stream %.0f MB/s, sbxd CPU %.2f s/GiB, exec p50 %.3f ms"):format(median(t.mbs),
      median(t.cpu), median(t.lat)))
  end
end)
for _, s in ipairs(side) do s.srv:cleanup() end
if not ok then error(err, 0) end

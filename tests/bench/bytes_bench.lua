-- bytes_bench.lua: the byte paths of issue 18, each next to its limit in
-- the same run, alternating, medians of --reps runs (2 shared cores: one
-- run alone says little):
--   1. G GiB of stdout through sbxd to a client (curl, msgpack events,
--      discarded) against `head -c N /dev/zero | cat > /dev/null`, and the
--      floor of any network stream of a command's output: the same pipe
--      plus one loopback TCP hop (cat into bash's /dev/tcp, a Python sink
--      reading 1 MiB at a time), with sbxd's CPU per GiB; and the same
--      hop done the best way a server could (sbx-hop-floor: read+send or
--      splice into one loopback connection to a reader process; "unix":
--      sbxd's shape, through an AF_UNIX socketpair and a relay thread
--      first), with sbxd's figure as a ratio to each, the C sender's CPU
--      per GiB, and the CPU per GiB of each whole path (sbxd + curl, C
--      sender + reader; head's share is the same in both and left out);
--   2. put_bytes / get_bytes of M MB on-device against cp of the same
--      file, and through sbxd (the Lua client's PUT/GET of the files
--      route; the same PUTs by curl's CLI as a second client; sbxd's and
--      each client's CPU per put).
--
-- usage: sbxlua tests/bench/bytes_bench.lua [--sbxd PATH] [--gib G] [--mb M]
--        [--reps R] [--only stream|files]
local sbx = require "sbx"
local core = require "sbx.core"
local ffi = require "ffi"

local args = { gib = 1, mb = 200, reps = 5 }
do
  local i = 1
  while arg[i] do
    if arg[i] == "--sbxd" then args.sbxd = arg[i + 1] i = i + 2
    elseif arg[i] == "--gib" then args.gib = tonumber(arg[i + 1]) i = i + 2
    elseif arg[i] == "--mb" then args.mb = tonumber(arg[i + 1]) i = i + 2
    elseif arg[i] == "--reps" then args.reps = tonumber(arg[i + 1]) i = i + 2
    elseif arg[i] == "--only" then args.only = arg[i + 1] i = i + 2
    else error("unknown argument " .. arg[i]) end
  end
end

local root = debug.getinfo(1, "S").source:match("^@(.*/)tests/bench/") or "./"
local H = dofile(root .. "tests/server/harness.lua")
if args.sbxd then H.SBXD = args.sbxd end

local function now() return core.monotonic_ms() end
local function median(t)
  table.sort(t)
  return t[math.floor((#t + 1) / 2)]
end
local function timed(f)
  local t0 = now()
  f()
  return (now() - t0) / 1000
end
local function loadavg()
  local f = io.open("/proc/loadavg")
  local s = f and f:read("*l") or "?"
  if f then f:close() end
  return s:match("^(%S+ %S+ %S+)") or s
end

-- CPU seconds (user + system, every thread) a process has used so far.
local TICK = tonumber(io.popen("getconf CLK_TCK"):read("*l")) or 100
local function cpu_s(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return 0 end
  local st = f:read("*a")
  f:close()
  local u, sy = st:match("%) %S+" .. (" %S+"):rep(10) .. " (%d+) (%d+)")
  return (tonumber(u) + tonumber(sy)) / TICK
end

-- The floor: head | cat into one loopback TCP connection to a sink that
-- reads and counts (Debian's python3); seconds, or nil without a sink.
local SINK = [[
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
print(l.getsockname()[1], flush=True)
c, _ = l.accept(); b = bytearray(1 << 20); n = 0
while True:
    k = c.recv_into(b)
    if not k: break
    n += k
print(n, flush=True)
]]
local function tcp_hop(bytes)
  local f = io.popen("/usr/bin/python3 -c " .. H.q(SINK), "r")
  local port = f and tonumber(f:read("*l"))
  if not port then return nil end
  local t0 = now()
  os.execute(("bash -c %s"):format(H.q(("head -c %d /dev/zero | cat > /dev/tcp/127.0.0.1/%d"):format(bytes, port))))
  local got = tonumber(f:read("*l"))
  local secs = (now() - t0) / 1000
  f:close()
  assert(got == bytes, "the sink got " .. tostring(got))
  return secs
end

-- CPU seconds (user + system) of this process (who = 0) or of its
-- waited-for children (who = -1) so far: the clients' side of a put.
ffi.cdef [[
struct sbx_bench_tv { long sec, usec; };
struct sbx_bench_ru { struct sbx_bench_tv u, s; long rest[14]; };
int getrusage(int who, struct sbx_bench_ru *ru);
]]
local function rusage_s(who)
  local ru = ffi.new("struct sbx_bench_ru")
  assert(ffi.C.getrusage(who, ru) == 0)
  return tonumber(ru.u.sec + ru.s.sec) + tonumber(ru.u.usec + ru.s.usec) / 1e6
end

-- curl's CLI PUTting the pieces (files of chunk bytes, in order) as
-- consecutive ?offset=N requests, as the Lua client does: one process and
-- connection per piece, since curl 7.88's CLI cannot reuse an h2c
-- connection (curl issue 10634).  Its start-up is timed apart (the same
-- number of HEADs of one file) to be subtracted.
local function curl_each(pieces, one)
  local cmd = {}
  for i, p in ipairs(pieces) do
    cmd[i] = "curl -sS --http2-prior-knowledge -o /dev/null -w '%{http_code} ' " .. one(i, p)
  end
  local out = H.sh(table.concat(cmd, "; "))
  assert(select(2, out:gsub("200", "")) == #pieces, "curl: " .. out)
end
local function curl_put(url, auth, pieces, chunk)
  curl_each(pieces, function(i, p)
    local at = ("%s?offset=%d"):format(url, (i - 1) * chunk)
    return ("-X PUT -H %s --data-binary @%s %s"):format(H.q(auth), H.q(p), H.q(at))
  end)
end
local function curl_heads(url, auth, pieces)
  curl_each(pieces, function() return ("-I -H %s %s"):format(H.q(auth), H.q(url)) end)
end

-- The same floor done the best way a server could (sbx-hop-floor,
-- tests/bench/hop_floor.c): head's pipe spliced (mode "splice") or read
-- and sent (mode "rw") into one loopback connection to a reader process
-- that receives every byte.  Seconds and the sender's CPU, or nil.
local FLOOR = H.BIN .. "/sbx-hop-floor"
local function hop_floor(bytes, mode)
  local f = io.popen(("head -c %d /dev/zero | %s -m %s"):format(bytes, H.q(FLOOR), mode), "r")
  local line = f and f:read("*l")
  if f then f:close() end
  local n, secs, scpu, rcpu = (line or ""):match("bytes=(%d+) secs=(%S+) send_cpu=(%S+) recv_cpu=(%S+)")
  if tonumber(n) ~= bytes then return nil end
  return tonumber(secs), tonumber(scpu), tonumber(rcpu)
end

-- CPU seconds of a shell's children from the last line of its `times`
-- ("0m0.050000s 0m0.120000s": user, system).
local function children_cpu(out)
  local um, us, sm, ss = out:match("(%d+)m([%d.]+)s (%d+)m([%d.]+)s%s*$")
  if not um then return nil end
  return tonumber(um) * 60 + tonumber(us) + tonumber(sm) * 60 + tonumber(ss)
end

local function row(label, mbps, limit_label, limit_mbps, goal)
  print(("%-44s %7.0f MB/s   %-28s %7.0f MB/s   ratio %.2f (goal %s)"):format(label, mbps, limit_label,
    limit_mbps, mbps / limit_mbps, goal))
end

print(("== byte paths (median of %d, alternating; load %s) =="):format(args.reps, loadavg()))
local sargs = { "--max-runs", "1000" }
if os.getenv("SBX_BENCH_NO_FRONT") then sargs[#sargs + 1] = "--no-front" end
local srv = assert(H.start { log_level = "warn", args = sargs })
local ok, err = pcall(function()
  local body = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json", "-d", "{}")
  local id = assert(H.json_field(body, "id"), body)

  if args.only ~= "files" and args.gib > 0 then
    local bytes = math.floor(args.gib * 1024 * 1024 * 1024)
    local via, peer, cpu, hop, ccpu = {}, {}, {}, {}, {}
    local modes = { "rw", "splice", "unix" }
    local fl = { rw = {}, splice = {}, unix = {} }
    local flcpu = { rw = {}, splice = {}, unix = {} }
    local flrcpu = { rw = {}, splice = {}, unix = {} }
    local gib = bytes / 2^30
    for i = 1, args.reps do
      local c0 = cpu_s(srv.pid)
      via[i] = timed(function()
        -- sh's `times` gives curl's CPU: the client's share of the path.
        local cmd = ("curl -s --http2-prior-knowledge -H %s -H 'accept: application/msgpack'"
          .. " -d '{\"cmd\":\"head -c %d /dev/zero\"}' -o /dev/null -w '%%{size_download}\\n'"
          .. " %s/v1/sessions/%s/runs; times"):format(H.q(srv:auth()), bytes, srv.url, id)
        local out = H.sh("sh -c " .. H.q(cmd))
        local got = tonumber(out:match("^(%d+)"))
        assert(got and got >= bytes, "short stream: " .. tostring(out))
        ccpu[#ccpu + 1] = children_cpu(out) and children_cpu(out) / gib
      end)
      cpu[i] = (cpu_s(srv.pid) - c0) / gib
      peer[i] = timed(function() os.execute(("head -c %d /dev/zero | cat > /dev/null"):format(bytes)) end)
      hop[i] = tcp_hop(bytes)
      for _, m in ipairs(modes) do
        local secs, scpu, rcpu = hop_floor(bytes, m)
        if secs then
          fl[m][#fl[m] + 1] = secs
          flcpu[m][#flcpu[m] + 1] = scpu / gib
          flrcpu[m][#flrcpu[m] + 1] = rcpu / gib
        end
      end
    end
    row(("%d MiB stdout through sbxd (curl)"):format(bytes / 2^20), bytes / median(via) / 1e6,
      "head -c | cat > /dev/null", bytes / median(peer) / 1e6, ">= 0.9")
    if #hop == args.reps then
      row("  floor: head | cat, one loopback TCP hop", bytes / median(hop) / 1e6, "head -c | cat > /dev/null",
        bytes / median(peer) / 1e6, "-")
    end
    print(("  sbxd's CPU per GiB streamed: %.2f s (median)"):format(median(cpu)))
    if #ccpu == args.reps then
      print(("  curl's CPU per GiB: %.2f s; sbxd + curl: %.2f s (medians)"):format(median(ccpu),
        median(cpu) + median(ccpu)))
    end
    -- The floor done the best way (C, one hop), and sbxd against it.
    local via_mbps = bytes / median(via) / 1e6
    for _, m in ipairs(modes) do
      if #fl[m] == args.reps then
        local mbps = bytes / median(fl[m]) / 1e6
        row(("  floor: one TCP hop, C %s"):format(m), mbps, "head -c | cat > /dev/null",
          bytes / median(peer) / 1e6, "-")
        row("  sbxd against it", via_mbps, ("floor: one TCP hop, C %s"):format(m), mbps, "-")
        print(("  the C sender's CPU per GiB (%s): %.2f s (median)"):format(m, median(flcpu[m])))
        print(("  the C sender + reader's CPU per GiB (%s): %.2f s (medians; sbxd + curl against it: %.2f)")
          :format(m, median(flcpu[m]) + median(flrcpu[m]), #ccpu == args.reps
            and (median(cpu) + median(ccpu)) / (median(flcpu[m]) + median(flrcpu[m])) or 0 / 0))
      else
        print(("  floor: one TCP hop, C %s: unavailable (%s)"):format(m, FLOOR))
      end
    end
  end

  if args.only ~= "stream" and args.mb > 0 then
    local bytes = math.floor(args.mb * 1e6)
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0)
    local src = dir .. "/src"
    assert(os.execute(("head -c %d /dev/urandom > %s"):format(bytes, src)) == 0)
    local f = assert(io.open(src, "rb"))
    local data = f:read("*a")
    f:close()
    local s = sbx.session {}
    -- cp writes where put_bytes does: the session's work dir's filesystem.
    local dst = s.work_dir .. "/cp-copy"
    local put, get, cp, rput, rget, cput, cget = {}, {}, {}, {}, {}, {}, {}
    local lcpu, xput, xcpu, xcli, xhead = {}, {}, {}, {}, {}
    -- Remote: the project's client (4 MiB chunks, its upload_chunk_bytes
    -- default, within sbxd's --max-body of 8 MiB).
    local rs = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    -- curl's CLI puts the same chunks the Lua client sends.
    local CHUNK = 4 * 1024 * 1024
    assert(os.execute(("split -b %d -d -a 3 %s %s/piece."):format(CHUNK, src, dir)) == 0)
    local pieces = {}
    for i = 0, math.ceil(bytes / CHUNK) - 1 do pieces[#pieces + 1] = ("%s/piece.%03d"):format(dir, i) end
    local rurl = ("%s/v1/sessions/%s/files/cblob"):format(srv.url, rs.id)
    for i = 1, args.reps do
      -- Each writes a new file, none replaces one (freeing 200 MB of
      -- blocks is the file system's work, off the clock for both).
      os.remove(s.work_dir .. "/blob")
      put[i] = timed(function() s:put_bytes("blob", data) end)
      get[i] = timed(function() assert(#s:get_bytes("blob") == bytes) end)
      cp[i] = timed(function() assert(os.execute(("cp %s %s"):format(src, dst)) == 0) end)
      os.remove(dst)
      assert(rs:exec("rm -f blob").returncode == 0)
      local c0, l0 = cpu_s(srv.pid), rusage_s(0)
      rput[i] = timed(function() rs:put_bytes("blob", data) end)
      local c1 = cpu_s(srv.pid)
      lcpu[i] = rusage_s(0) - l0
      rget[i] = timed(function() assert(#rs:get_bytes("blob") == bytes) end)
      cput[i], cget[i] = c1 - c0, cpu_s(srv.pid) - c1
      assert(rs:exec("rm -f cblob").returncode == 0)
      local k0, x0 = cpu_s(srv.pid), rusage_s(-1)
      xput[i] = timed(function() curl_put(rurl, srv:auth(), pieces, CHUNK) end)
      xcpu[i], xcli[i] = cpu_s(srv.pid) - k0, rusage_s(-1) - x0
      xhead[i] = timed(function() curl_heads(rurl, srv:auth(), pieces) end)
    end
    s:close()
    rs:close()
    os.execute("rm -rf " .. dir)
    local cp_mbps = bytes / median(cp) / 1e6
    row(("put_bytes %d MB on-device"):format(bytes / 1e6), bytes / median(put) / 1e6, "cp of the same file", cp_mbps,
      ">= 0.5")
    row(("get_bytes %d MB on-device"):format(bytes / 1e6), bytes / median(get) / 1e6, "cp of the same file", cp_mbps,
      ">= 0.5")
    local remote = "%-44s %7.0f MB/s   (goal >= 500 MB/s)"
    print(remote:format(("put_bytes %d MB remote (sbxd, Lua client)"):format(bytes / 1e6), bytes / median(rput) / 1e6))
    print(remote:format(("get_bytes %d MB remote (sbxd, Lua client)"):format(bytes / 1e6), bytes / median(rget) / 1e6))
    print(("  sbxd's CPU per remote put / get: %.2f s / %.2f s (median)"):format(median(cput), median(cget)))
    local sub = "%-44s %7.0f MB/s"
    print(sub:format(("  put %d MB remote, curl CLI (same 4 MiB PUTs)"):format(bytes / 1e6),
      bytes / median(xput) / 1e6))
    print(sub:format("    less curl's start-up and connect (HEADs)", bytes / (median(xput) - median(xhead)) / 1e6))
    print(("  CPU per put, Lua client / curl CLI: sbxd %.2f s / %.2f s, client %.2f s / %.2f s (median)")
      :format(median(cput), median(xcpu), median(lcpu), median(xcli)))
  end
  srv:curl("/v1/sessions/" .. id, "-X", "DELETE", "-H", srv:auth())
end)
srv:cleanup()
if not ok then error(err, 0) end

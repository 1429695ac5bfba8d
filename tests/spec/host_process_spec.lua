-- host_process_spec.lua: nothing of the caller's process reaches a run, on
-- every isolating backend (userns, privileged, bubblewrap):
--   * a secret on the caller's command line and in its environment is in no
--     /proc/*/cmdline or /proc/*/environ a run can read (the zygote execs
--     sbx-zygote; bubblewrap's PID 1 is bwrap with sbx's own argv);
--   * /proc/self/cgroup inside shows the run's cgroup namespace root, never
--     the session's host path, on every line, with memory_mb too (each warm
--     run is placed in its own run cgroup before its workload exists, and
--     the ended runs' cgroups do not pile up);
--   * a signal to the caller's process group (a terminal's Ctrl-C) reaches
--     no zygote or idle init: the runs after it all succeed, while the
--     host's explicit p:kill("INT") still ends a run with -2.
-- Each has a control showing the probe can see what it looks for.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")
local sbx = require "sbx"

local BACKENDS = { "userns", "privileged", "bubblewrap" }

-- Run code in a child sbxlua started by `prefix` (env, setsid) with args;
-- returns its output (stdout, then its stderr after a marker) and exit code.
local function child(code, prefix, args, timeout_s)
  local dir = H.mktemp_dir("hostproc")
  H.write_file(dir .. "/child.lua", code)
  local out, rc = H.sh_apart(string.format("cd %s && timeout -s KILL %d %s %s %s %s", H.q(H.ROOT),
    timeout_s or 240, prefix, H.q(H.SBXLUA), H.q(dir .. "/child.lua"), args or ""))
  H.rmtree(dir)
  return out, rc
end

describe("nothing of the caller's process is visible in a run", function()
  for _, backend in ipairs(BACKENDS) do
    it(backend .. ": the caller's argv and environment are in no process a run can read", function()
      local secret = "sbxsecret" .. H.token()
      -- The probe spells the secret backwards, so that its own command
      -- line does not contain it.
      local code = string.format([[
local sbx = require "sbx"
local f = io.open("/proc/self/cmdline", "rb")
local mine = f:read("*a")
f:close()
local needle = (%q):reverse()
print("CONTROL", mine:find(needle, 1, true) and "argv" or "-", os.getenv("SBX_T_SECRET") == needle and "env" or "-")
local s = sbx.session { backend = %q }
local r = s:exec([==[python3 -c '
import glob
needle = "%s"[::-1].encode()
hits, read = [], 0
for p in glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ"):
    try:
        data = open(p, "rb").read()
    except OSError:
        continue
    read += 1
    if needle in data:
        hits.append(p)
print("HITS", len(hits), " ".join(hits))
print("READ", read)
print("PID1", open("/proc/1/cmdline", "rb").read().split(b"\0")[0].decode())
']==])
io.write(r.stdout, r.stderr)
print("RC", r.returncode)
s:close()
]], secret:reverse(), backend, secret:reverse())
      local out = child(code, "env SBX_T_SECRET=" .. secret, secret)
      -- Control: the secret is on the caller's command line and in its
      -- environment, where the host sees it.
      assert.is_truthy(out:find("CONTROL%s+argv%s+env"), out)
      assert.is_truthy(out:find("RC%s+0\n"), out)
      assert.is_truthy(out:find("HITS 0", 1, true), out)
      -- Control: the probe did read command lines (its own at least) ...
      assert.is_true(tonumber(out:match("READ (%d+)")) >= 2, out)
      -- ... and PID 1 is sbx's own program.
      local pid1 = out:match("PID1 (%S+)")
      if backend == "bubblewrap" then
        assert.are.equal("/usr/bin/bwrap", pid1, out)
      else
        assert.are.equal("sbx-zygote", pid1, out)
      end
    end)
  end
end)

describe("a run's cgroup namespace", function()
  for _, backend in ipairs(BACKENDS) do
    for _, mem in ipairs { false, true } do
      local what = backend .. (mem and " with memory_mb" or "")
      it(what .. ": is rooted at the run's cgroup, not the host's", function()
        local s = sbx.session { backend = backend, pids = 256, memory_mb = mem and 256 or nil }
        finally(function() s:close() end)
        local tag = tostring(7 + math.random(100000) / 1e6)
        local p = s:run("cat /proc/self/cgroup; exec sleep " .. tag)
        local host
        -- The same process as the host sees it (bounded wait for its exec).
        for _ = 1, 100 do
          local pids = H.sh("pgrep -f -x " .. H.q("sleep " .. tag))
          local pid = pids:match("^(%d+)\n")
          if pid then
            host = H.read_file("/proc/" .. pid .. "/cgroup")
            if host then break end
          end
          H.sleep(0.05)
        end
        p:kill("KILL")
        local inside = p:communicate()
        p:wait()
        -- Control: the host sees the session's cgroup, named by its id.
        assert.is_truthy(host, "the run's sleep never showed up on the host")
        local id = host:match("/sbx/(%x+)")
        assert.is_truthy(id, host)
        assert.is_truthy(inside:find("pids:", 1, true), inside)
        assert.is_nil(inside:find(id, 1, true), inside)
        assert.is_nil(inside:find("sbx", 1, true), inside)
        for line in inside:gmatch("[^\n]+") do
          local ctl, path = line:match("^%d+:([^:]*):(.*)$")
          assert.is_truthy(ctl, line)
          -- Every line, the run's own memory cgroup included: the host
          -- placed init there before it forked the workload, and init
          -- rooted the namespace there (placer.c, init.c).
          assert.are.equal("/", path, inside)
        end
        -- Control: with memory_mb the host sees the run in a memory
        -- cgroup of its own, a step below the session's, which the
        -- namespace hides.
        if mem then
          assert.is_truthy(host:find(":/sbx/" .. id .. "/run%-%d+\n"), host)
        end
      end)
    end
  end
end)

describe("a memory-limited session's warm runs", function()
  it("are each placed in a run cgroup of their own before the workload exists", function()
    local warm = 2
    local s = sbx.session { memory_mb = 128, pids = 256, warm_runs = warm }
    local p
    finally(function() -- busted keeps one finally per test: all cleanup here
      if p then p:kill("KILL"); p:wait() end
      s:close()
    end)
    -- Back to back, so most runs are taken right after the zygote offered
    -- them: a run whose placement had not finished must wait for it.
    for _ = 1, 12 do
      local r = s:exec("cat /proc/self/cgroup")
      assert.are.equal(0, r.returncode, H.show(r))
      for line in r.stdout:gmatch("[^\n]+") do
        assert.are.equal("/", line:match("^%d+:[^:]*:(.*)$"), r.stdout)
      end
    end
    local tag = tostring(7 + math.random(100000) / 1e6)
    p = s:run("exec sleep " .. tag)
    local host
    for _ = 1, 100 do
      local pid = H.sh("pgrep -f -x " .. H.q("sleep " .. tag)):match("^(%d+)\n")
      host = pid and H.read_file("/proc/" .. pid .. "/cgroup")
      if host then break end
      H.sleep(0.05)
    end
    -- Control: the host sees the run in a memory cgroup of its own.
    assert.is_truthy(host, "the run's sleep never showed up on the host")
    local id = host:match(":/sbx/(%x+)/run%-%d+\n")
    assert.is_truthy(id, host)
    local dir
    for _, d in ipairs { "/sys/fs/cgroup/memory/sbx/" .. id, "/sys/fs/cgroup/sbx/" .. id } do
      if H.exists(d) then dir = d break end
    end
    assert.is_truthy(dir, "no session cgroup for " .. id)
    local function count()
      local n = 0
      for _ in H.sh("ls " .. H.q(dir)):gmatch("run%-%d+") do n = n + 1 end
      return n
    end
    -- The running one and each warm run hold one (the warm ones are
    -- placed as they are offered; bounded wait under load) ...
    local n = count()
    for _ = 1, 200 do
      if n >= 1 + warm then break end
      H.sleep(0.05)
      n = count()
    end
    assert.is_true(n >= 1 + warm, "run cgroups: " .. n)
    -- ... and ended runs' do not pile up: every run cgroup holds a live
    -- process (the running run, a warm run, or an init given back for the
    -- next run, which keeps its cgroup: init reuse), but for at most one
    -- kept empty for the next (the placer's mkdir before its move may add
    -- one for an instant: looked at again, bounded).  Given-back inits are
    -- at most pids/16 (16 here).
    local empty, listing
    local settled = H.wait_for(10, function()
      empty, listing = 0, {}
      for name in H.sh("ls " .. H.q(dir)):gmatch("run%-%d+") do
        local procs = H.read_file(dir .. "/" .. name .. "/cgroup.procs") or ""
        listing[#listing + 1] = name .. "=" .. procs:gsub("\n", ",")
        if not procs:match("%d") then empty = empty + 1 end
      end
      return empty <= 1
    end)
    assert.is_true(settled, "empty run cgroups: " .. table.concat(listing, " "))
    assert.is_true(n <= 2 + warm + 16, "run cgroups: " .. n)
  end)
end)

describe("signals from outside reach no idle init", function()
  for _, backend in ipairs(BACKENDS) do
    it(backend .. ": SIGINT to the caller's process group ends none of the next runs", function()
      -- The child is its own process group (setsid); it ignores SIGINT
      -- itself and sends it to its whole group, as a terminal's Ctrl-C
      -- does: before the fix the zygote and idle inits were in that group.
      local code = string.format([[
local ffi = require "ffi"
ffi.cdef("void *signal(int sig, void *handler); int kill(int pid, int sig);")
ffi.C.signal(2, ffi.cast("void *", 1))
local sbx = require "sbx"
local s = sbx.session { backend = %q, warm_runs = 2 }
for _ = 1, 3 do assert(s:exec("true").returncode == 0) end
assert(ffi.C.kill(0, 2) == 0)
for i = 1, 10 do
  local r = s:exec("sleep 0.02; true")
  print("RUN", i, r.returncode)
end
-- Control: the host's explicit kill does end a run with the signal.
local p = s:run("sleep 30")
p:kill("INT")
print("CONTROL", p:wait())
s:close()
]], backend)
      local out = child(code, "setsid -w", "", 240)
      local n = 0
      for i, rc in out:gmatch("RUN%s+(%d+)%s+(%-?%d+)") do
        n = n + 1
        assert.are.equal("0", rc, "run " .. i .. " after the SIGINT:\n" .. out)
      end
      assert.are.equal(10, n, out)
      assert.is_truthy(out:find("CONTROL\t-2\n", 1, true), out)
    end)
  end
end)

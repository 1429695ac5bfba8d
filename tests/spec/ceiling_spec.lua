-- ceiling_spec.lua: resource ceilings per session, really hit: a memory
-- bomb and a tmpfs fill end as termination_reason "oom" and leave the
-- session usable; a fork bomb meets pids; a CPU spinner is held to
-- cpu_milli (measured through the session's cgroup); a full disk_mb work
-- dir gives ENOSPC with the host disk untouched; rlimits are set.  The
-- host side (this process) stays outside the session's cgroup.
-- Needs root (cgroups, the work dir tmpfs); skipped otherwise.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(here .. "sec_helpers.lua")
local sbx = T.sbx

if not T.has_core() or not H.is_root() then
  describe("resource ceilings", function()
    pending("needs sbx.core and root (cgroups, tmpfs work dir)")
  end)
  return
end

local function cgroup_of(pid, ctrl)
  for line in io.lines("/proc/" .. pid .. "/cgroup") do
    local c, path = line:match("^%d+:([^:]*):(.*)$")
    if c == ctrl or (ctrl == "" and c == "") then return path end
    for part in (c or ""):gmatch("[^,]+") do
      if part == ctrl then return path end
    end
  end
end

describe("resource ceilings", function()
  teardown(T.cleanup)

  -- Ceilings of 256 MiB: the OOM killer weighs a process by its size
  -- plus oom_score_adj (1000 for runs, 0 for the zygote without
  -- CAP_SYS_RESOURCE) times the ceiling, and the zygote shares the host's
  -- pages, so a host bigger than the ceiling can make the zygote the victim
  -- (a documented limit; with CAP_SYS_RESOURCE the zygote gets -1000).
  -- This ASan-built test process grows past 256 MiB late in the suite, so
  -- the OOM cases open their session from a fresh, small sbxlua, as a
  -- server would be; the assertions are the same.
  local function oom_case(cmd)
    local out, rc = H.run_child(([[
      local sbx = require "sbx"
      local s = sbx.session { memory_mb = 256 }
      local r = s:exec(%q)
      print("reason=" .. r.termination_reason)
      print("rc=" .. tostring(r.returncode))
      print("stdout=" .. r.stdout:gsub("\n", "|"))
      local again = s:exec("echo still here")
      print("again=" .. again.stdout:gsub("\n", "|") .. again.termination_reason)
      s:close()
    ]]):format(cmd), 240)
    assert.are.equal(0, rc, out)
    return {
      reason = out:match("reason=([^\n]*)"), rc = tonumber(out:match("rc=(%-?%d+)")),
      stdout = out:match("stdout=([^\n]*)"), again = out:match("again=([^\n]*)"), out = out,
    }
  end

  it("make a running command the OOM killer's first choice, an idle warm run its second", function()
    local out, rc = H.run_child([[
      local sbx = require "sbx"
      local s = sbx.session { memory_mb = 256, warm_runs = 2 }
      local p = s:run("cat /proc/self/oom_score_adj; sleep 2")
      local first = p:read()
      -- The host's view: every sbx-init below this process's zygote.
      local me = io.open("/proc/self/stat"):read("*a"):match("^(%d+)")
      local z = io.popen("pgrep -P " .. me .. " -x sbx-zygote"):read("*l")
      print("zygote=" .. io.open("/proc/" .. z .. "/oom_score_adj"):read("*l"))
      for pid in io.popen("pgrep -P " .. z .. " -x sbx-init"):lines() do
        local adj = io.open("/proc/" .. pid .. "/oom_score_adj"):read("*l")
        print("init=" .. adj)
      end
      print("inside=" .. first:gsub("%s", ""))
      p:wait()
      s:close()
    ]], 60)
    assert.are.equal(0, rc, out)
    assert.are.equal("1000", out:match("inside=(%-?%d+)"), out)
    local running, idle = 0, 0
    for adj in out:gmatch("init=(%-?%d+)") do
      if adj == "1000" then running = running + 1 else idle = idle + 1 end
      assert.is_true(adj == "1000" or adj == "500", out)
    end
    assert.are.equal(1, running, out)
    -- and the session's own process last of all
    assert.is_true(tonumber(out:match("zygote=(%-?%d+)")) <= 0, out)
    assert.is_true(idle >= 1, "no idle warm run seen: " .. out)
  end)

  it("end a memory bomb as oom, and the session stays usable", function()
    local r = oom_case("python3 -c 'b = bytearray(1024 * 1024 * 1024); print(len(b))'")
    assert.are.equal("oom", r.reason, r.out)
    assert.are_not.equal(0, r.rc, r.out)
    assert.are.equal("", r.stdout, "the bomb never got its memory: " .. r.out)
    assert.are.equal("still here|", r.again, r.out)
  end)

  it("count tmpfs pages: filling /tmp past memory_mb is an oom, not a host cost", function()
    -- /tmp (256 MiB) and /dev/shm (64 MiB) together hold more than the
    -- memory ceiling: the pages are the limit, charged to the session.
    -- The shell may go on for one look (50 ms) after head's death: the
    -- long sleep makes "survived" mean the whole run was not ended, not
    -- that the host's look came a little late on a busy machine.
    local r = oom_case("head -c 250M /dev/zero > /tmp/fill; head -c 60M /dev/zero > /dev/shm/fill; "
      .. "sleep 300; echo survived")
    assert.are.equal("oom", r.reason, r.out)
    assert.is_nil(r.stdout:find("survived"), "the whole run ended: " .. r.out)
    assert.are.equal("still here|", r.again, r.out)
  end)

  it("hold a fork bomb at pids; the session and the host stay responsive", function()
    local s = sbx.session { pids = 32 }
    finally(function() s:close() end)
    -- timeout_s only bounds a wedged run: ending by it is the failure.
    local r = s:exec("bomb() { bomb | bomb & }; bomb; sleep 1; echo done", { timeout_s = 120 })
    assert.are_not.equal("timeout", r.termination_reason, "the bomb wedged the run: " .. T.show(r))
    assert.is_truthy(r.stderr:find("fork", 1, true) or r.stderr:find("Resource", 1, true),
      "the shell saw fork fail: " .. T.show(r))
    -- The host is fine: it can still fork.
    local p = io.popen("echo host-ok")
    assert.are.equal("host-ok", p:read("*l"))
    p:close()
    local again = s:exec("echo alive")
    assert.are.equal("alive\n", again.stdout, T.show(again))
    -- Counted: 40 sleepers cannot start under pids = 32.
    -- (dash gives up at the first fork that fails; counting with builtins)
    local many = s:exec("(for i in $(seq 40); do sleep 5 & done) 2>/dev/null; "
      .. "set -- /proc/[0-9]*; echo $#; kill -9 -1 2>/dev/null; true")
    local n = tonumber(many.stdout:match("%d+"))
    assert.is_number(n, T.show(many))
    assert.is_true(n <= 32, T.show(many))
  end)

  it("hold a CPU spinner to cpu_milli, measured by the cgroup", function()
    local s = sbx.session { cpu_milli = 250 }
    finally(function() s:close() end)
    local t0 = T.now_ms()
    -- Two spinners for 2 s of wall time: unlimited they would use ~4 s of CPU
    -- on two cores; at 250 millicpu, ~0.5 s.
    local r = s:exec("timeout 2 sh -c 'while :; do :; done' & timeout 2 sh -c 'while :; do :; done'; wait")
    local wall = T.now_ms() - t0
    assert.is_true(wall >= 1900, T.show(r))
    local used_us = s:cpu_usage_us()
    assert.is_number(used_us, "the session has a cgroup CPU counter")
    local used_ms = used_us / 1000
    assert.is_true(used_ms < wall * 0.25 * 1.6 + 100,
      ("%d ms of CPU in %d ms of wall time at cpu_milli 250"):format(used_ms, wall))
    assert.is_true(used_ms > wall * 0.25 * 0.3, ("it did run: %d ms"):format(used_ms))
  end)

  it("cap the work dir at disk_mb: ENOSPC inside, the host disk untouched", function()
    local s = sbx.session { disk_mb = 8 }
    finally(function() s:close() end)
    local before = H.df_avail_kb("/var/lib/sbx")
    local r = s:exec("head -c 64M /dev/zero > fill; echo rc=$?; ls -l fill")
    assert.matches("No space left on device", r.stderr, 1, true)
    assert.matches("rc=1", r.stdout, 1, true)
    local size = tonumber(r.stdout:match("sandbox%s+sandbox%s+(%d+)"))
    assert.is_true(size <= 8 * 1024 * 1024, T.show(r))
    local after = H.df_avail_kb("/var/lib/sbx")
    assert.is_true(math.abs(before - after) < 4096, "the host disk did not take the 8 MiB")
    -- Once there is room again, it is an ordinary work dir.
    s:exec("rm fill")
    s:put_bytes("small.txt", "x")
    assert.are.equal("x", s:get_bytes("small.txt"))
    assert.are.equal(0, s:exec("head -c 1M /dev/zero > again").returncode)
  end)

  it("set rlimits as a second layer: no core dumps, a bounded fd table", function()
    local s = sbx.session {}
    finally(function() s:close() end)
    local r = s:exec("ulimit -c; ulimit -n")
    assert.are.equal("0\n1024\n", r.stdout, T.show(r))
  end)

  it("put the runs in the session's cgroup and leave the host outside", function()
    local s = sbx.session { memory_mb = 128, pids = 64 }
    finally(function() s:close() end)
    local mine = cgroup_of("self", "pids")
    assert.is_falsy((mine or ""):find("/sbx/", 1, true), "the host is outside: " .. tostring(mine))
    local r = s:exec("cat /proc/self/cgroup")
    -- The run sees its cgroup namespace root; the host sees sbx/<id>.
    assert.are.equal(0, r.returncode)
    local found = false
    for d in io.popen("ls /sys/fs/cgroup/pids/sbx 2>/dev/null"):lines() do
      if #d == 32 then
        local f = io.open("/sys/fs/cgroup/pids/sbx/" .. d .. "/pids.max")
        if f and f:read("*l") == "64" then found = true end
        if f then f:close() end
      end
    end
    if not found then
      for d in io.popen("ls /sys/fs/cgroup/sbx 2>/dev/null"):lines() do
        local f = io.open("/sys/fs/cgroup/sbx/" .. d .. "/pids.max")
        if f and f:read("*l") == "64" then found = true end
        if f then f:close() end
      end
    end
    assert.is_true(found, "a session cgroup with pids.max = 64 exists")
  end)

  it("remove the session's cgroup at close", function()
    local function dirs()
      local out = {}
      local ls = io.popen("ls /sys/fs/cgroup/memory/sbx /sys/fs/cgroup/sbx 2>/dev/null")
      for d in ls:lines() do
        if #d == 32 and d:match("^%x+$") then out[d] = true end
      end
      ls:close()
      return out
    end
    local before = dirs()
    local s = sbx.session { memory_mb = 64 }
    s:exec("sleep 30 &")
    local mine
    for d in pairs(dirs()) do
      if not before[d] then
        assert.is_nil(mine, "one new cgroup per session")
        mine = d
      end
    end
    assert.is_string(mine, "the session made a cgroup")
    s:close()
    -- close returns once the session can run nothing more; its cgroup's
    -- rmdir follows on the reaper thread (README: the asynchronous
    -- close), which a process's exit waits for up to 10 s.
    assert.is_true(H.wait_for(10, function() return not dirs()[mine] end), "its cgroup is gone")
  end)

  -- The whole run goes on OOM, and kills go through the run's cgroup.
  -- Each run of a session with a memory ceiling has a memory cgroup of its
  -- own below the session's (issue 6): the OOM killer takes one process,
  -- the host sees the run's own oom_kill counter grow (within ~50 ms) and
  -- kills every process of that run, and of no other.

  -- Processes on the host whose command line holds mark (pgrep's own
  -- pattern does not match itself).
  local function alive(mark)
    local p = io.popen("pgrep -f " .. H.q(mark:sub(1, -2) .. "[" .. mark:sub(-1) .. "]"))
    local out = p:read("*a")
    p:close()
    return out
  end
  -- A mark no other test run shares (math.random is not seeded).
  local function unique(prefix)
    local f = assert(io.open("/proc/sys/kernel/random/uuid"))
    local id = f:read("*l"):gsub("%-", "")
    f:close()
    return prefix .. id
  end
  local function wait_gone(mark, ms)
    local t0 = T.now_ms()
    while alive(mark) ~= "" and T.now_ms() - t0 < ms do H.sh("sleep 0.05") end
    return alive(mark)
  end

  local NONE_POLICY = T.tmpdir("/var/tmp") .. "/oom-none.lua"
  do
    local f = assert(io.open(NONE_POLICY, "w"))
    f:write('return { name = "oom-none", ceilings = { backends = { "userns", "none" } } }\n')
    f:close()
  end
  local BACKENDS = {
    { name = "default", opts = "" },
    { name = "none", opts = ("backend = 'none', policy = %q,"):format(NONE_POLICY) },
  }

  it("kill the whole run on OOM, not just the process the kernel picked", function()
    local out, rc = H.run_child([[
      local sbx = require "sbx"
      local s = sbx.session { memory_mb = 64 }
      local r = s:exec([=[sh -c 'python3 -c "x = bytearray(10**9)"; echo survived; sleep 300; echo after']=])
      print("reason=" .. r.termination_reason)
      print("rc=" .. tostring(r.returncode))
      print("ms=" .. tostring(r.runtime_ms))
      print("stdout=" .. r.stdout:gsub("\n", "|"))
      local again = s:exec("echo still here")
      print("again=" .. again.stdout:gsub("\n", "|") .. again.termination_reason)
      s:close()
    ]], 240)
    assert.are.equal(0, rc, out)
    assert.are.equal("oom", out:match("reason=([^\n]*)"), out)
    assert.are.equal(-9, tonumber(out:match("rc=(%-?%d+)")), out)
    -- The shell goes on for at most one look (50 ms) after python's death:
    -- "survived" may make it out, the 300 s sleep never ends (the child's
    -- 240 s bound would fail the case), "after" never comes.
    assert.is_nil(out:match("stdout=[^\n]*after"), out)
    assert.are.equal("still here|", out:match("again=([^\n]*)"), out)
  end)

  it("kill only the run that hit the ceiling; a concurrent one ends normally", function()
    local out, rc = H.run_child([[
      local sbx = require "sbx"
      local s = sbx.session { memory_mb = 64 }
      local calm = s:run("sleep 1; echo ok")
      local bomb = s:run([=[python3 -c "x = bytearray(10**9)"; sleep 5; echo after]=])
      local bout = bomb:communicate()
      local cout = calm:communicate()
      print("bomb=" .. bomb.termination_reason .. "," .. tostring(bomb.returncode) .. "," .. bout:gsub("\n", "|"))
      print("calm=" .. calm.termination_reason .. "," .. tostring(calm.returncode) .. "," .. cout:gsub("\n", "|"))
      -- Counted for the session, also once the run's cgroup is gone.
      print("kills=" .. tostring(s._st.core:oom_kills()))
      s:close()
    ]], 60)
    assert.are.equal(0, rc, out)
    assert.are.equal("oom,-9,", out:match("bomb=([^\n]*)"), out)
    assert.are.equal(",0,ok|", out:match("calm=([^\n]*)"), out)
    assert.is_true(tonumber(out:match("kills=(%d+)")) >= 1, out)
  end)

  for _, b in ipairs(BACKENDS) do
    it("leave nothing of an OOM-killed run, not even a setsid child (" .. b.name .. ")", function()
      local mark = unique("oomholder" .. b.name)
      local out, rc = H.run_child(([[
        local sbx = require "sbx"
        local s = sbx.session { %s memory_mb = 64 }
        local r = s:exec([=[setsid python3 -c "import time; x = bytearray(8 << 20); time.sleep(60) #%s" &
          sleep 0.5; python3 -c "x = bytearray(10**9)"; sleep 30]=])
        print("reason=" .. r.termination_reason)
        io.stdout:flush()
        local left = io.popen("pgrep -f '%s'"):read("*a")
        print("left=" .. left:gsub("\n", ","))
        s:close()
      ]]):format(b.opts, mark, mark:sub(1, -2) .. "[" .. mark:sub(-1) .. "]"), 60)
      assert.are.equal(0, rc, out)
      assert.are.equal("oom", out:match("reason=([^\n]*)"), out)
      -- Checked right as the run ended, before the session closed.
      assert.are.equal("", out:match("left=([^\n]*)"), out)
      assert.are.equal("", wait_gone(mark, 60000))
    end)

    it("kill every process of a run, setsid and double-forked ones too (" .. b.name .. ")", function()
      local mark = unique("oomkill" .. b.name)
      local out, rc = H.run_child(([[
        local sbx = require "sbx"
        local s = sbx.session { %s memory_mb = 128 }
        -- One escapes by setsid from a shell that then exits, one by
        -- setsid and a double fork of its own.
        local p = s:run([=[(setsid sh -c 'python3 -c "import time; time.sleep(300)" %s &' &)
          (python3 -c "import os, time; os.setsid(); os.fork() and os._exit(0); time.sleep(300)" %s &)
          echo started; sleep 300]=])
        print("first=" .. p:read("stdout"))
        -- Both escapes start after "started": wait for them (not a fixed
        -- sleep, which a loaded machine outruns), up to a generous bound.
        local before
        for _ = 1, 600 do
          before = tonumber(io.popen("pgrep -f '%s' | wc -l"):read("*l"))
          if before >= 2 then break end
          os.execute("sleep 0.05")
        end
        print("before=" .. before)
        p:kill()
        p:wait()
        print("reason=" .. p.termination_reason)
        print("after=" .. io.popen("pgrep -f '%s' | wc -l"):read("*l"))
        s:close()
      ]]):format(b.opts, mark, mark, mark:sub(1, -2) .. "[" .. mark:sub(-1) .. "]",
        mark:sub(1, -2) .. "[" .. mark:sub(-1) .. "]"), 60)
      assert.are.equal(0, rc, out)
      assert.is_true(tonumber(out:match("before=(%d+)")) >= 2, out)
      assert.are.equal("killed", out:match("reason=([^\n]*)"), out)
      assert.are.equal("0", out:match("after=(%d+)"), out)
      assert.are.equal("", wait_gone(mark, 60000))
    end)
  end

  it("refuse ceilings above the policy's, and nonsense values", function()
    T.expect("PolicyDenied", sbx.session, { memory_mb = 1024 * 1024 })
    T.expect("PolicyDenied", sbx.session, { pids = 1000000 })
    T.expect("InvalidArgument", sbx.session, { memory_mb = 0 })
    T.expect("InvalidArgument", sbx.session, { memory_mb = 4 })
    T.expect("InvalidArgument", sbx.session, { disk_mb = 8, work_dir = T.tmpdir("/var/tmp") })
  end)
end)

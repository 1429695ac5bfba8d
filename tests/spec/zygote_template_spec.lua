-- zygote_template_spec.lua: the zygote template (zygote_template.c), the
-- small process a host starts once to clone its sessions' zygotes from
-- (instead of a clone of the whole host that then execs):
--   * it is the host's child, named sbx-template, and each zygote is a
--     child of the host (CLONE_PARENT), not of the template, so the host
--     reaps it and writes its id maps;
--   * killed, it is started again at the next open, and that session works;
--   * killed while an open waits for its answer, that open fails (never
--     hangs, never opens without it) and the next one works;
--   * stopped (it never answers), the open fails with a clear error after
--     SBX_SESSION_READY_TIMEOUT_MS instead of hanging every open, and
--     the next open starts another;
--   * no exec carries the zygote's capabilities any more: a run's PID 1
--     (sbx-init) holds no inheritable or ambient ones (with the exec into
--     sbx-zygote it held every one of both);
--   * it takes nothing of the host's umask: a host at 077 opens a session
--     whose root is readable and whose runs start at 022;
--   * at its open files limit (the fds of a request cannot all arrive) the
--     open fails and says so, and the host lives on (a zygote that died
--     before its sync byte raised SIGPIPE in the host);
--   * it ends with its host (a SIGKILL to the host leaves no template);
--   * it holds nothing of a request after serving it, nor of the host
--     (its cwd is /, its signal mask empty), and a zygote holds nothing
--     of another session's request (another session's work dir, binds,
--     cgroup files, settings memfd, id-map pipe).
-- Each has a control showing the probe sees what it looks for.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")
local sbx = require "sbx"

-- Pids of pid's children named comm (exact).
local function children(pid, comm)
  local out = H.sh(("pgrep -P %d -x %s"):format(pid, comm))
  local t = {}
  for p in out:gmatch("%d+") do t[#t + 1] = tonumber(p) end
  return t
end

local function alive(pid)
  return H.exists("/proc/" .. pid .. "/stat")
end

-- Bounded wait for f() to be true (50 ms steps, up to seconds).
local function eventually(f, seconds)
  for _ = 1, (seconds or 10) * 20 do
    if f() then return true end
    H.sleep(0.05)
  end
  return f()
end

-- fd number -> target of pid's open fds.
local function fds_of(pid)
  local t = {}
  for n in H.sh("ls /proc/" .. pid .. "/fd"):gmatch("%d+") do
    t[tonumber(n)] = H.readlink("/proc/" .. pid .. "/fd/" .. n)
  end
  return t
end

local function status_field(pid, name)
  return (H.read_file("/proc/" .. pid .. "/status") or ""):match(name .. ":%s*(%S+)")
end

describe("the zygote template", function()
  it("is the host's child, and the zygotes are the host's children too", function()
    local s = sbx.session { backend = "userns" }
    local me = H.getpid()
    local t = children(me, "sbx-template")
    assert.are.equal(1, #t, H.sh("ps -o pid,ppid,comm --ppid " .. me))
    local z = children(me, "sbx-zygote")
    -- Control: the probe finds this session's zygote under the host.
    assert.is_true(#z >= 1, H.sh("ps -o pid,ppid,comm --ppid " .. me))
    -- No zygote hangs below the template.
    assert.are.same({}, children(t[1], "sbx-zygote"))
    assert.are.equal(0, s:exec("true").returncode)
    s:close()
  end)

  it("is started again after it died, and the session opened then works", function()
    local me = H.getpid()
    sbx.session({ backend = "userns" }):close()
    local t = children(me, "sbx-template")
    assert.are.equal(1, #t)
    assert.are.equal(0, select(2, H.sh("kill -KILL " .. t[1])))
    -- Control: it is gone (the host reaps it at the next open).
    assert.is_true(eventually(function()
      local st = H.read_file("/proc/" .. t[1] .. "/stat") or ""
      return st == "" or st:match("^%d+ %b() Z") ~= nil
    end))
    local s = sbx.session { backend = "userns" }
    local r = s:exec("echo ok")
    assert.are.equal("ok\n", r.stdout)
    local t2 = children(me, "sbx-template")
    assert.are.equal(1, #t2)
    assert.are_not.equal(t[1], t2[1])
    s:close()
  end)

  it("killed while an open waits for it fails that open, and the next one works", function()
    local c = H.spawn_child([[
local sbx = require "sbx"
local ffi = require "ffi"
ffi.cdef "int getpid(void);"
local function sh(cmd) local p = io.popen(cmd); local o = p:read("*a"); p:close(); return o end
sbx.session({ backend = "userns" }):close()
local t = sh("pgrep -P " .. ffi.C.getpid() .. " -x sbx-template"):match("%d+")
sh("kill -STOP " .. t)
io.stderr:write("TEMPLATE " .. t .. "\n"); io.stderr:flush()
local ok, err = pcall(sbx.session, { backend = "userns" })
print(ok and "OPENED" or ("FAILED " .. err.kind .. ": " .. err.message))
local s = sbx.session { backend = "userns" }
print("NEXT " .. s:exec("echo ok").stdout)
s:close()
]])
    local t
    assert.is_true(eventually(function()
      t = c.output():match("TEMPLATE (%d+)")
      return t ~= nil
    end, 60), c.output())
    -- Until the child's open waits for the stopped template's answer: in
    -- poll, or in restart_syscall once a signal interrupted that poll
    -- (under load the template's SIGCHLD for its stop can come late; the
    -- spec then waited out the open's 10 s and killed a reaped template).
    assert.is_true(eventually(function()
      local sc = H.read_file("/proc/" .. c.pid .. "/syscall") or ""
      local nr = tonumber(sc:match("^(%d+)"))
      return nr == 7 or nr == 271 or nr == 219 -- poll, ppoll, restart_syscall (x86_64)
    end, 60), H.read_file("/proc/" .. c.pid .. "/syscall"))
    H.sh("kill -KILL " .. t)
    assert.is_true(eventually(function() return c.output():find("NEXT", 1, true) ~= nil end, 60), c.output())
    local out = c.output()
    local want = "FAILED BackendUnavailable: the zygote template ended while starting the sandbox"
    assert.truthy(out:find(want, 1, true), out)
    assert.truthy(out:find("NEXT ok", 1, true), out)
    c.kill()
    H.rmtree(c.dir)
  end)

  it("that never answers fails the open, and is replaced", function()
    local me = H.getpid()
    sbx.session({ backend = "userns" }):close()
    local t = children(me, "sbx-template")
    assert.are.equal(1, #t)
    assert.are.equal(0, select(2, H.sh("kill -STOP " .. t[1])))
    local ok, err = pcall(sbx.session, { backend = "userns" })
    -- (Before: this open waited forever.)
    assert.is_false(ok)
    assert.are.equal("BackendUnavailable", H.errkind(err))
    local msg = tostring(err.message or err)
    assert.truthy(msg:find("zygote template did not answer", 1, true), msg)
    -- It was killed (no stopped one is left behind) and replaced.
    assert.is_true(eventually(function() return not alive(t[1]) end))
    local s = sbx.session { backend = "userns" }
    assert.are.equal("ok\n", s:exec("echo ok").stdout)
    -- Control: a new one serves, and it is not the stopped one.
    local t2 = children(me, "sbx-template")
    assert.are.equal(1, #t2)
    assert.are_not.equal(t[1], t2[1])
    s:close()
  end)

  it("at its open files limit fails the open clearly, and the host lives on", function()
    local out, rc = H.run_child([[
local sbx = require "sbx"
local ffi = require "ffi"
ffi.cdef "int getpid(void);"
local function sh(c) local p = io.popen(c); local o = p:read("*a"); p:close(); return o end
sbx.session({ backend = "userns" }):close()
local t = sh("pgrep -P " .. ffi.C.getpid() .. " -x sbx-template"):match("%d+")
-- Its stdio and socket, and room for two more: a session with a memory
-- ceiling sends more (settings, sync, control, cgroup.procs files).
sh("prlimit --pid " .. t .. " --nofile=6:1024")
for _ = 1, 10 do
  local ok, err = pcall(sbx.session, { backend = "userns", memory_mb = 256 })
  if ok then err:close() end
  print(ok and "OPENED" or (err.kind .. ": " .. err.message))
end
-- Control: with its limit back, the same open works.
sh("prlimit --pid " .. t .. " --nofile=1024:1024")
local s = sbx.session { backend = "userns", memory_mb = 256 }
print("AFTER " .. s:exec("echo ok").stdout)
s:close()
]], 300)
    assert.are.equal(0, rc, out)
    local n = 0
    for line in out:gmatch("[^\n]+") do
      if line:find("BackendUnavailable: the zygote template could not take the session's", 1, true) then
        n = n + 1
      end
    end
    assert.are.equal(10, n, out)
    assert.truthy(out:find("AFTER ok", 1, true), out)
  end)

  it("gives sessions umask 022 and a readable root whatever the host's umask", function()
    -- A host of its own, so that its first open (the template's start)
    -- happens under umask 077.
    local out, rc = H.run_child([[
local sbx = require "sbx"
local ffi = require "ffi"
ffi.cdef "unsigned int umask(unsigned int);"
ffi.C.umask(tonumber("077", 8))
for _, b in ipairs { "userns", "privileged" } do
  local s = sbx.session { backend = b }
  local r = s:exec("umask; cat /etc/hostname")
  print(b .. " " .. r.returncode .. " " .. r.stdout:gsub("\n", " ") .. r.stderr)
  s:close()
end
-- Control: the host's own umask is still 077 (the probe would see it).
print("host " .. string.format("%04o", ffi.C.umask(tonumber("077", 8))))
]], 120)
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("userns 0 0022 sandbox ", 1, true), out)
    assert.truthy(out:find("privileged 0 0022 sandbox ", 1, true), out)
    assert.truthy(out:find("host 0077", 1, true), out)
  end)

  -- sbxd sets its own OOM score to -1000 (CAP_SYS_RESOURCE): runs of a
  -- session without a memory ceiling inherited it, so the OOM killer
  -- spared them and took other tenants' runs.  The host's score must not
  -- reach a run: here a raised one (no privilege needed), and -1000 where
  -- this process may set it.
  it("gives runs without a memory ceiling OOM score 0 whatever the host's", function()
    local out, rc = H.run_child([[
local sbx = require "sbx"
local function set(v)
  local f = io.open("/proc/self/oom_score_adj", "w")
  local ok = f and f:write(v) and f:close()
  return ok and true or false
end
local function get()
  local f = assert(io.open("/proc/self/oom_score_adj"))
  local v = f:read("*l")
  f:close()
  return v
end
local low = set("-1000")
if not low then assert(set("700")) end
-- Control: the host's own score is what the runs used to inherit.
print("host " .. get())
for _, b in ipairs { "userns", "privileged" } do
  local s = sbx.session { backend = b }
  local r = s:exec("cat /proc/self/oom_score_adj; echo -500 > /proc/self/oom_score_adj && echo lowered")
  print(b .. " " .. r.stdout:gsub("\n", " "))
  s:close()
end
]], 120)
    assert.are.equal(0, rc, out)
    assert.truthy(out:match("host %-1000") or out:match("host 700"), out)
    for _, b in ipairs { "userns", "privileged" } do
      -- 0, and not allowed below it (the floor is not the host's).
      assert.truthy(out:find(b .. " 0 ", 1, true), out)
      assert.falsy(out:find(b .. " 0 lowered", 1, true), out)
    end
  end)

  for _, backend in ipairs { "userns", "privileged" } do
    it("leaves a run's PID 1 no inheritable or ambient capabilities (" .. backend .. ")", function()
      local s = sbx.session { backend = backend }
      local r = s:exec("grep -E '^(Name|CapInh|CapAmb|CapPrm):' /proc/1/status /proc/self/status")
      assert.are.equal(0, r.returncode, r.stderr)
      -- Control: the probe read PID 1's lines.
      assert.truthy(r.stdout:find("/proc/1/status:Name:", 1, true), r.stdout)
      assert.truthy(r.stdout:find("/proc/1/status:CapInh:\t0000000000000000", 1, true), r.stdout)
      assert.truthy(r.stdout:find("/proc/1/status:CapAmb:\t0000000000000000", 1, true), r.stdout)
      assert.truthy(r.stdout:find("/proc/self/status:CapPrm:\t0000000000000000", 1, true), r.stdout)
      s:close()
    end)
  end

  it("ends with its host", function()
    local dir = H.mktemp_dir("tpl")
    H.write_file(dir .. "/child.lua", [[
local sbx = require "sbx"
local s = sbx.session { backend = "userns" }
io.write("READY\n"); io.flush()
local ffi = require "ffi"
ffi.cdef "unsigned int sleep(unsigned int)"
ffi.C.sleep(600) -- no child of its own to outlive it
]])
    local pidf = dir .. "/pid"
    os.execute(("cd %s && (%s %s > %s/out 2>&1 & echo $! > %s)"):format(H.q(H.ROOT),
      H.q(H.SBXLUA), H.q(dir .. "/child.lua"), H.q(dir), H.q(pidf)))
    local host = tonumber(H.read_file(pidf))
    assert.is_true(eventually(function() return (H.read_file(dir .. "/out") or ""):find("READY") ~= nil end, 60),
      H.read_file(dir .. "/out"))
    local t = children(host, "sbx-template")
    -- Control: the child host has its template, alive.
    assert.are.equal(1, #t)
    assert.is_true(alive(t[1]))
    H.sh("kill -KILL " .. host)
    assert.is_true(eventually(function() return not alive(t[1]) end, 20),
      "the template outlived its host: " .. H.sh("ps -o pid,ppid,stat,comm -p " .. t[1]))
    H.rmtree(dir)
  end)
  it("keeps nothing of a request it served, nor the host's cwd or signal mask", function()
    local me = H.getpid()
    local dir = H.mktemp_dir("tplfd")
    local a = sbx.session { backend = "userns", read_write_paths = { dir }, memory_mb = 256 }
    assert.are.equal(0, a:exec("true").returncode)
    local t = children(me, "sbx-template")
    assert.are.equal(1, #t)
    local fds = fds_of(t[1])
    local seen = {}
    for n, target in pairs(fds) do
      seen[#seen + 1] = n .. " -> " .. tostring(target)
      if n <= 2 then
        assert.are.equal("/dev/null", target)
      else
        assert.truthy(tostring(target):match("^socket:"), table.concat(seen, ", "))
      end
    end
    -- Control: the probe saw its stdio and its one socket.
    assert.are.equal(4, #seen, table.concat(seen, ", "))
    assert.are.equal("/", H.readlink("/proc/" .. t[1] .. "/cwd"))
    assert.are.equal("0000000000000000", status_field(t[1], "SigBlk"))
    a:close()
    H.rmtree(dir)
  end)

  it("gives a zygote nothing of another session's request", function()
    local me = H.getpid()
    local dir = H.mktemp_dir("tplother")
    local a = sbx.session { backend = "userns", read_write_paths = { dir }, memory_mb = 256 }
    assert.are.equal(0, a:exec("true").returncode)
    local before = {}
    for _, z in ipairs(children(me, "sbx-zygote")) do before[z] = true end
    local b = sbx.session { backend = "userns" }
    assert.are.equal(0, b:exec("true").returncode)
    local zb
    for _, z in ipairs(children(me, "sbx-zygote")) do
      if not before[z] then zb = z end
    end
    assert.is_not_nil(zb)
    local seen, sockets = {}, 0
    for n, target in pairs(fds_of(zb)) do
      target = tostring(target)
      seen[#seen + 1] = n .. " -> " .. target
      if target:match("^socket:") then sockets = sockets + 1 end
      -- Only its own kinds: stdio on /dev/null, its network namespace,
      -- its signalfd, its control socket (B has no memory ceiling, so
      -- no oom_score_adj of its own).
      local own = target == "/dev/null" or target:match("^net:") or target:match("^socket:")
          or target == "anon_inode:[signalfd]"
      assert.truthy(own, "zygote B holds " .. target .. ": " .. table.concat(seen, ", "))
      assert.is_nil(target:find(dir, 1, true))
      assert.is_nil(target:find("cgroup", 1, true))
    end
    -- Control: the probe saw B's own control socket.
    assert.are.equal(1, sockets, table.concat(seen, ", "))
    b:close()
    a:close()
    H.rmtree(dir)
  end)
end)

-- spare_spec.lua: spare sessions (src/core/spare.c, sbx.spares): sessions of
-- one shape opened ahead, which an open of exactly that shape takes.  A
-- spare-backed session must be what a cold one is (isolation, a fresh work
-- dir and id), handed out once, with its lifetime counted from the take;
-- another shape, another policy or a dead spare never gets one.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")
local sbx = require "sbx"
local core = require "sbx.core"

local function stats() return core.spares_stats() end

-- Keep n spares of opts' shape and wait (bounded) until they are ready.
local function keep(n, opts)
  local o = { n = n }
  for k, v in pairs(opts) do o[k] = v end
  sbx.spares(o)
  assert(H.wait_for(20, function() return stats().ready >= n end),
    "no spare became ready: " .. tostring(stats().last_error))
end

-- What a run sees of its isolation, without the parts that differ per
-- session by design (namespace inode numbers, mount ids).
local PROBE = [[
for n in user mnt pid ipc uts net cgroup; do readlink /proc/self/ns/$n | sed 's/:.*//'; done
cat /proc/self/uid_map /proc/self/gid_map | tr -s ' '
awk '{print $5, $9, $6}' /proc/self/mountinfo | sort
id; hostname
grep -E '^(Cap|Seccomp|NoNewPrivs)' /proc/self/status
ls -A /tmp/sandbox-work]]

local function probe(s)
  local r = s:exec(PROBE)
  assert.are.equal(0, r.returncode, H.show(r))
  return r.stdout
end

local zygotes = H.zygotes

describe("spare sessions", function()
  after_each(function() core.spares_flush() end)

  it("are off until asked for: an open is cold and keeps none", function()
    core.spares_flush()
    local before = stats()
    local s = H.session()
    s:close()
    assert.are.equal(before.taken, stats().taken)
    assert.are.equal(0, stats().want)
    assert.are.equal(0, stats().ready)
  end)

  it("hands a spare to an open of the same shape, isolated as a cold one, once", function()
    local cold = H.session()
    local want = probe(cold)
    local cold_ns = H.session_userns(cold)
    cold:close()
    keep(1, { backend = "userns" })
    local taken0 = stats().taken
    local a = H.session()
    assert.are.equal(taken0 + 1, stats().taken, "the open did not take the spare")
    -- The same isolation as the cold session, in namespaces of its own.
    assert.are.equal(want, probe(a))
    local a_ns = H.session_userns(a)
    assert.are_not.equal(cold_ns, a_ns)
    assert.are_not.equal(H.readlink("/proc/self/ns/user"), a_ns)
    -- Something a user leaves behind...
    assert.are.equal(0, a:exec("echo secret > /tmp/sandbox-work/left; mkdir /tmp/sandbox-work/d").returncode)
    local a_id, a_dir = a.id, a.work_dir
    a:close()
    -- ... is never seen by the next spare-backed session.
    assert(H.wait_for(20, function() return stats().ready >= 1 end), "no refill")
    local b = H.session()
    assert.are.equal(taken0 + 2, stats().taken)
    assert.are_not.equal(a_id, b.id)
    assert.are_not.equal(a_dir, b.work_dir)
    assert.are_not.equal(a_ns, H.session_userns(b))
    assert.are.equal(want, probe(b))
    b:close()
  end)

  it("does not hand a spare to another shape", function()
    keep(1, { backend = "userns" })
    local st0 = stats()
    local s = H.session({ nofile = 512 })
    assert.are.equal(st0.taken, stats().taken)
    assert.are.equal(1, stats().ready, "the other shape's open used up the spare")
    s:close()
    -- Control: the pool's own shape does take it.
    s = H.session()
    assert.are.equal(st0.taken + 1, stats().taken)
    s:close()
  end)

  it("counts the lifetime from the take, not from when the spare was made", function()
    keep(1, { backend = "userns", timeout_s = 1 })
    -- The spare has existed longer than the lifetime before it is taken.
    H.sleep(1.5)
    local taken0 = stats().taken
    local s = H.session({ timeout_s = 1 })
    assert.are.equal(taken0 + 1, stats().taken)
    local r = s:exec("echo alive")
    assert.are.equal(0, r.returncode, H.show(r))
    assert.are.equal("alive\n", r.stdout)
    -- And it does end: a run that would outlive it is ended with it.
    local p = s:run("sleep 60", { stdout = true })
    p:communicate()
    assert.are.equal("session_expired", p.termination_reason)
    assert.is_false(s:alive())
    s:close()
  end)

  it("runs a taken spare's first run under its lifetime: warned with SIGTERM at the end", function()
    -- The warm init the spare offered before its take has no end of its
    -- own; the take lets it go when it comes (it is not waited for), and
    -- the run gets an init that enforces the end: SIGTERM at it, as a
    -- cold session's run gets.  (An init without the end would be killed
    -- only when the zygote goes, with SIGKILL: no "term".)
    local cmd = "trap 'echo term; exit 0' TERM; sleep 60 & wait"
    local cold = H.session({ timeout_s = 1 })
    local rc = cold:exec(cmd)
    assert.are.equal("term\n", rc.stdout, H.show(rc)) -- control
    cold:close()
    keep(1, { backend = "userns", timeout_s = 1 })
    local taken0 = stats().taken
    local s = H.session({ timeout_s = 1 })
    assert.are.equal(taken0 + 1, stats().taken)
    local r = s:exec(cmd)
    assert.are.equal("term\n", r.stdout, H.show(r))
    s:close()
  end)

  it("lets a taken spare's old offers go before its first run starts, with a memory ceiling too", function()
    -- With a memory ceiling offers come placed in run cgroups, and the
    -- spare's old one looked like a run ready to start: the run's take
    -- dropped it and then waited, on the caller's loop (sbxd's), for the
    -- zygote's next.  warm_fd now says "nothing to wait for" only once the
    -- run can start without the zygote: shown with the zygote stopped.
    keep(1, { backend = "userns", memory_mb = 256 })
    local taken0 = stats().taken
    local s = H.session({ memory_mb = 256 })
    assert.are.equal(taken0 + 1, stats().taken)
    sbx.spares { n = 0, backend = "userns", memory_mb = 256 } -- no refill from here
    local o = s:admit_run({ "echo", "ran" }, {})
    local fd, asked = s:warm_fd(o), 0
    while fd and asked < 100 do
      H.readable(fd, 10000)
      fd, asked = s:warm_fd(o), asked + 1
    end
    assert.is_nil(fd, "warm_fd never said a run could start")
    local live = {}
    assert(H.wait_for(10, function()
      live = {}
      for _, pid in ipairs(zygotes()) do
        if not (H.read_file("/proc/" .. pid .. "/status") or ""):match("\nState:%s*Z") then live[#live + 1] = pid end
      end
      return #live == 1
    end), "expected the taken spare's zygote alone")
    H.sh("kill -STOP " .. live[1])
    local ok, r, err = pcall(s.start_run, s, o)
    H.sh("kill -CONT " .. live[1])
    assert.is_true(ok, tostring(r))
    assert.is_truthy(r, type(err) == "table" and err.message or tostring(err))
    s:close()
  end)

  it("is emptied when the policy file changes: no spare of the old policy is handed out", function()
    local dir = H.mktemp_dir("spol")
    local path = dir .. "/policy.lua"
    H.write_file(path, H.read_file(H.ROOT .. "/policies/default.lua"))
    keep(1, { backend = "userns", policy = path })
    -- Control: under the same policy the spare is taken.
    local t0 = stats().taken
    local s = H.session({ policy = path })
    assert.are.equal(t0 + 1, stats().taken)
    s:close()
    keep(1, { backend = "userns", policy = path })
    H.write_file(path, H.read_file(path) .. "\n-- changed\n")
    local flushed0 = stats().flushed
    s = H.session({ policy = path })
    assert.are.equal(t0 + 1, stats().taken, "a spare made under the old policy was taken")
    assert.are.equal(flushed0 + 1, stats().flushed)
    assert.are.equal(0, stats().ready)
    assert.are.equal(0, s:exec("true").returncode)
    s:close()
    H.rmtree(dir)
  end)

  it("never hands out a spare whose zygote died: the open goes cold", function()
    keep(1, { backend = "userns" })
    -- (A session closed just before may still be on its way out.)
    assert(H.wait_for(10, function() return #zygotes() == 1 end),
      "expected the spare's zygote alone")
    local z = zygotes()
    H.sh("kill -9 " .. z[1])
    -- Dead: a zombie until the pool looks at it.
    assert(H.wait_for(10, function()
      return (H.read_file("/proc/" .. z[1] .. "/status") or "\nState:\tZ"):match("\nState:%s*Z") ~= nil
    end))
    local st0 = stats()
    local s = H.session()
    assert.are.equal(st0.dead + 1, stats().dead)
    assert.are.equal(st0.taken, stats().taken)
    local r = s:exec("echo ok")
    assert.are.equal("ok\n", r.stdout, H.show(r))
    s:close()
  end)

  it("refuses shapes that are never pooled, naming why", function()
    local dir = H.mktemp_dir("spin")
    local err = H.raised(sbx.spares, { n = 1, backend = "userns", work_dir = dir })
    assert.are.equal("InvalidArgument", H.errkind(err))
    assert.is_truthy(tostring(err.message):find("work_dir", 1, true))
    err = H.raised(sbx.spares, { n = 1, backend = "bubblewrap" })
    assert.are.equal("InvalidArgument", H.errkind(err))
    err = H.raised(sbx.spares, { n = -1, backend = "userns" })
    assert.are.equal("InvalidArgument", H.errkind(err))
    H.rmtree(dir)
  end)

  it("closes its spares when the process exits: nothing is left behind", function()
    local dir = H.mktemp_dir("sexit")
    local script = dir .. "/keep.lua"
    H.write_file(script, ([[
      local sbx, core = require "sbx", require "sbx.core"
      sbx.spares { n = 2, backend = "userns", state_dir = %q }
      for i = 1, 1000 do
        if core.spares_stats().ready == 2 then break end
        os.execute("sleep 0.02")
      end
      local s = sbx.session { backend = "userns", state_dir = %q }
      s:close()
      io.write(core.spares_stats().taken, " ")
      for _ in io.popen("ls %s/sessions"):lines() do io.write("d") end
    ]]):format(dir .. "/state", dir .. "/state", dir .. "/state"))
    local out = H.sh(H.q(H.SBXLUA) .. " " .. H.q(script))
    -- Control: the child did take a spare, and had spares' dirs live.
    assert.is_truthy(out:match("^1 dd?"), out)
    assert.are.same({}, H.lines(H.sh("ls -A " .. H.q(dir .. "/state/sessions"))))
    H.rmtree(dir)
  end)
end)

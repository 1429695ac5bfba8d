-- close_spec.lua: the asynchronous close (session.c, reaper.c).  Close
-- returns once the session can run nothing more (its zygote killed, its dir
-- renamed out of the state dir's listing); the reap, the cgroup and the
-- dir's removal follow on the reaper's thread.  Its processes must still
-- go (promptly), an exit right after a close must leave nothing, and what
-- a crash leaves in <state>/gone is swept like a dead session's dir.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")

local function ls(path)
  local t = {}
  for n in H.sh("ls -A " .. H.q(path) .. " 2>/dev/null"):gmatch("%S+") do t[#t + 1] = n end
  table.sort(t)
  return t
end

describe("asynchronous session close", function()
  it("takes the session's dir out of the listing at once and its processes promptly", function()
    local state = H.mktemp_dir("close")
    local s = H.session({ state_dir = state })
    local userns = H.session_userns(s)
    local marker = "9" .. H.token()
    local p = s:run("exec sleep " .. marker)
    -- Control: the run and the dir are there to be seen.
    assert(H.wait_for(10, function() return #H.procs_matching("sleep " .. marker) == 1 end),
      "the run never showed")
    local id = s.work_dir:match("/sessions/(%x+)/work$")
    assert.is_truthy(id, s.work_dir)
    assert.are.same({ id }, ls(state .. "/sessions"))
    assert.is_true(#H.procs_in_ns("user", userns) >= 2)
    s:close()
    -- Renamed away before close returned: no wait here.
    assert.are.same({}, ls(state .. "/sessions"))
    assert(H.wait_for(10, function()
      return #H.procs_in_ns("user", userns) == 0 and #H.procs_matching("sleep " .. marker) == 0
    end), "the session's processes outlived its close: " .. H.describe(H.procs_in_ns("user", userns)))
    assert(H.wait_for(10, function() return #ls(state .. "/gone") == 0 end), "the reaper left its dir")
    pcall(p.wait, p) -- (it says the session was closed under it)
    H.rmtree(state)
  end)

  it("leaves nothing behind when the process exits right after closing", function()
    local state = H.mktemp_dir("cexit")
    local script = state .. "/close.lua"
    H.write_file(script, ([[
      local sbx = require "sbx"
      local st, ns = %q, {}
      local ss = {}
      for i = 1, 6 do
        ss[i] = sbx.session { backend = "userns", state_dir = st }
        ss[i]:run("exec sleep 300")
        ns[i] = ss[i]:exec("readlink /proc/self/ns/user").stdout:match("user:%%[%%d+%%]")
      end
      local n = 0
      for _ in io.popen("ls " .. st .. "/sessions"):lines() do n = n + 1 end
      for i = 1, 6 do ss[i]:close() end
      print(n, table.concat(ns, " "))
    ]]):format(state .. "/st"))
    local out = H.sh(H.q(H.SBXLUA) .. " " .. H.q(script))
    local n, nss = out:match("^(%d+)%s(.-)%s*$")
    -- Control: the child had its six sessions' dirs.
    assert.are.equal("6", n, out)
    assert.are.same({}, ls(state .. "/st/sessions"))
    assert.are.same({}, ls(state .. "/st/gone"))
    for ns in nss:gmatch("%S+") do
      assert.are.same({}, H.procs_in_ns("user", ns), "processes of " .. ns .. " outlived the process")
    end
    H.rmtree(state)
  end)

  it("lets the next sessions open while the reaper finishes the last ones", function()
    -- The reaper thread frees a closed session while the caller clones the
    -- next zygote: a child that then took a lock (malloc's) held by the
    -- reaper at the clone waited forever (never ready: 10 s, then an
    -- error).  Open and close back to back, so the two overlap.
    local state = H.mktemp_dir("cnext")
    local s0 = H.session({ state_dir = state })
    assert.are.equal("ok\n", s0:exec("echo ok").stdout) -- control: they work
    s0:close()
    for i = 1, 60 do
      local s = H.session({ state_dir = state })
      assert.are.equal(tostring(i) .. "\n", s:exec("echo " .. i).stdout)
      s:close()
    end
    H.rmtree(state)
  end)

  it("sweeps a closed session's dir a crash left in <state>/gone", function()
    local state = H.mktemp_dir("cgone")
    local dead = state .. "/st/gone/" .. ("ab"):rep(16)
    H.sh("mkdir -p " .. H.q(dead .. "/work") .. " && touch " .. H.q(dead .. "/lock") .. " "
      .. H.q(dead .. "/work/left"))
    -- The sweep runs at a process's first open: a new process.
    local script = state .. "/open.lua"
    H.write_file(script, ([[
      local s = require("sbx").session { backend = "userns", state_dir = %q }
      print(s:exec("echo ok").stdout)
      s:close()
    ]]):format(state .. "/st"))
    local out = H.sh(H.q(H.SBXLUA) .. " " .. H.q(script))
    assert.are.equal("ok", out:match("%S+"), out)
    assert.is_false(H.exists(dead), "the crash's leftover was not swept")
    H.rmtree(state)
  end)
end)

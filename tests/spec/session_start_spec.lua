-- session_start_spec: session open in two steps, the seam sbxd's loop
-- uses so it never waits for a sandbox to set up (sbx_session_start /
-- sbx_session_ready_fd / sbx_session_finish in sbx.h, core.session_start
-- and s:ready_fd() / s:finish() in Lua, and sbx.session's `wait` option).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx

if not T.has_core() then
  describe("session open in two steps", function()
    pending("needs sbx.core: run the specs with build/bin/sbxlua")
  end)
  return
end

local core = require "sbx.core"

-- The processes that are children of this one (zygotes, proxies), of any
-- of its threads: a zygote is the child of the thread that started the
-- zygote template (zygote_template.c), not of the main thread.
local function children()
  local out = {}
  local f = assert(io.open("/proc/self/stat"))
  local self = f:read("*l"):match("^(%d+)")
  f:close()
  local ls = assert(io.popen(("ls /proc/%s/task"):format(self)))
  local tasks = ls:read("*a")
  ls:close()
  for task in tasks:gmatch("%d+") do
    f = io.open(("/proc/%s/task/%s/children"):format(self, task))
    for pid in (f and f:read("*a") or ""):gmatch("%d+") do out[#out + 1] = tonumber(pid) end
    if f then f:close() end
  end
  return out
end

-- The children not in the set before (a session closed earlier may
-- still be reaped meanwhile by the core's reaper thread: counts would
-- not do).
local function new_children(before)
  local out = {}
  for _, pid in ipairs(children()) do
    if not before[pid] then out[#out + 1] = pid end
  end
  return out
end

describe("sbx.session with a wait function (a host's event loop)", function()
  teardown(T.cleanup)

  it("waits for a turn, then for the ready fd, and opens a working session", function()
    local calls = {}
    local s = sbx.session { backend = "userns", wait = function(fd, deadline)
      calls[#calls + 1] = fd or "turn"
      assert.is_true(deadline > core.monotonic_ms())
      os.execute("sleep 0.02")
      return true
    end }
    finally(function() s:close() end)
    assert.equal("turn", calls[1])
    assert.is_true(#calls >= 2, "never waited for the ready fd")
    for i = 2, #calls do assert.equal("number", type(calls[i])) end
    assert.equal("hi\n", s:exec("echo hi").stdout)
  end)

  it("closes the half-open session when the wait gives up", function()
    local before, made = {}, nil
    for _, pid in ipairs(children()) do before[pid] = true end
    local err = T.expect("SandboxExecutionError", function()
      sbx.session { backend = "userns", wait = function(fd)
        if fd == nil then return true end
        -- Control: the sandbox being set up is our child now.
        made = new_children(before)
        assert.is_true(#made > 0, "no sandbox process to abandon")
        return nil, "cancelled"
      end }
    end)
    assert.matches("abandoned: cancelled", err.message)
    -- (A half-open session is closed synchronously: its zygote is reaped.)
    local now = {}
    for _, pid in ipairs(children()) do now[pid] = true end
    for _, pid in ipairs(made) do assert.is_nil(now[pid], "the abandoned sandbox " .. pid .. " is left") end
  end)
end)

-- cs:finish() until it is done (bounded: seconds), failing on an error.
local function finish_within(cs, seconds)
  for _ = 1, seconds * 50 do
    local done, _, why = cs:finish()
    assert.is_not_nil(done, tostring(why))
    if done then return true end
    os.execute("sleep 0.02")
  end
  return false
end

describe("core.session_start", function()
  it("gives a session that refuses runs until finished, then works", function()
    local cs = assert(core.session_start { backend = "userns", system_ro = { "/usr", "/bin", "/lib", "/lib64" } })
    finally(function() cs:close() end)
    local fd = cs:ready_fd()
    assert.equal("number", type(fd))
    local r, kind, msg = cs:run { argv = { "/bin/true" } }
    assert.is_nil(r)
    assert.equal("InvalidArgument", kind)
    assert.matches("still setting up", msg)
    assert.is_true(finish_within(cs, 10))
    assert.is_nil(cs:ready_fd())
    assert.is_true(cs:finish()) -- idempotent once ready
    assert.is_truthy(cs:run { argv = { "/bin/true" } })
  end)
end)

-- A session that fails after its backend was chosen (here: a work_dir that
-- does not exist) is closed half-made; that close must release only what
-- the session made.  The caller's fd 0 is /dev/null during the attempt (a
-- half-made bubblewrap session once closed fd 0 as its own).
describe("a session open that fails half-way", function()
  local ffi = require "ffi"
  for _, decl in ipairs {
    "int open(const char *path, int flags, ...);",
    "int dup(int fd);",
    "int dup2(int fd, int fd2);",
    "int close(int fd);",
    "int fcntl(int fd, int cmd, ...);",
  } do
    pcall(ffi.cdef, decl)
  end
  local F_GETFD = 1

  -- The fds open in this process, as a set.
  local function open_fds()
    local set = {}
    for fd = 0, 1023 do
      if ffi.C.fcntl(fd, F_GETFD) >= 0 then set[fd] = true end
    end
    return set
  end

  for _, backend in ipairs { "userns", "privileged", "bubblewrap", "none" } do
    it("leaves every descriptor of the caller open (" .. backend .. ")", function()
      local null = ffi.C.open("/dev/null", 0)
      local saved = ffi.C.dup(0)
      assert.is_true(null >= 0 and saved >= 0)
      finally(function()
        ffi.C.dup2(saved, 0)
        ffi.C.close(saved)
        ffi.C.close(null)
      end)
      assert.equal(0, ffi.C.dup2(null, 0))
      -- Control: the probe sees a descriptor that goes.
      local scratch = ffi.C.dup(null)
      assert.is_true(open_fds()[scratch])
      ffi.C.close(scratch)
      assert.is_nil(open_fds()[scratch])
      local before = open_fds()
      -- The core itself: the policy layer refuses none by default.
      local cs, kind, msg = core.session_start { backend = backend, work_dir = "/no/such/dir" }
      if cs then cs:close() end
      if kind == "BackendUnavailable" then
        pending(backend .. " is not available here: " .. tostring(msg))
        return
      end
      assert.is_nil(cs)
      assert.equal("InvalidArgument", kind, tostring(msg))
      assert.matches("work_dir", msg, 1, true)
      assert.same(before, open_fds())
    end)
  end
end)

-- network_mode "open": the zygote hands its open network namespace over as
-- soon as it exists, and nft and pasta come up while it builds the root;
-- the session is ready only when the root and the network both are.  The
-- zygote is held just before its root (SBX_TEST_HOLD_ROOT_FIFO) and a fake
-- pasta (SBX_TEST_PASTA) says it started, then becomes Debian's: pasta
-- starts while the zygote is held (before: only after its ready message,
-- so never while held), and the open stays pending until the hold ends.
local tun_ok = os.execute("test -r /usr/bin/pasta && test -w /dev/net/tun")
local pasta_here = tun_ok == 0 or tun_ok == true
local describe_open = pasta_here and describe
  or function(name) pending(name .. " (needs pasta and /dev/net/tun)") end

describe_open("an open-mode session's network", function()
  local ffi = require "ffi"
  pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite);")
  pcall(ffi.cdef, "int unsetenv(const char *name);")

  local function exists(path)
    local f = io.open(path)
    if f then f:close() end
    return f ~= nil
  end

  it("comes up while the zygote builds its root", function()
    local p = assert(io.popen("mktemp -d /tmp/sbx-early-net.XXXXXX"))
    local dir = p:read("*l")
    p:close()
    local hold, started, pasta = dir .. "/hold", dir .. "/started", dir .. "/pasta"
    assert(os.execute(("chmod 0755 %s && mkfifo -m 0666 %s"):format(dir, hold)))
    local f = assert(io.open(pasta, "w"))
    f:write(("#!/bin/sh\ntouch %s\nexec /usr/bin/pasta \"$@\"\n"):format(started))
    f:close()
    assert(os.execute("chmod 0755 " .. pasta))
    ffi.C.setenv("SBX_TEST_HOLD_ROOT_FIFO", hold, 1)
    ffi.C.setenv("SBX_TEST_PASTA", pasta, 1)
    local cs, kind, msg
    finally(function()
      ffi.C.unsetenv("SBX_TEST_HOLD_ROOT_FIFO")
      ffi.C.unsetenv("SBX_TEST_PASTA")
      if cs then cs:close() end
      os.execute("rm -rf " .. dir)
    end)
    cs, kind, msg = core.session_start { backend = "userns", network_mode = "open",
      system_ro = { "/usr", "/bin", "/lib", "/lib64" } }
    assert.is_truthy(cs, tostring(kind) .. ": " .. tostring(msg))
    -- While the zygote is held before its root: pasta starts.
    for _ = 1, 500 do
      local done, _, why = cs:finish()
      assert.is_false(done, tostring(why))
      if exists(started) then break end
      os.execute("sleep 0.02")
    end
    assert.is_true(exists(started), "pasta did not start while the root was being built")
    -- Still not ready: the root is not built.
    os.execute("sleep 0.1")
    assert.is_false((cs:finish()))
    assert.is_truthy(cs:ready_fd())
    -- Let the zygote build its root: now the session opens and works.
    local w = assert(io.open(hold, "w"))
    w:close()
    assert.is_true(finish_within(cs, 20))
    local r = assert(cs:run { argv = { "/bin/sh", "-c", "exit 7" } })
    local ev, data
    repeat ev, data = r:next(5000, true, true) until ev == "exit" or ev == nil
    assert.equal("exit", ev)
    assert.equal(7, data.returncode)
  end)
end)

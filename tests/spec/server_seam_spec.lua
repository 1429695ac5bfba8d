-- server_seam_spec.lua: the seam between sbxd's Lua side (lua/sbx/server)
-- and sessions (sbx.session's host API).
--
-- sbx.server is driven in this process over a fake session that has only
-- the host API (limits, admit_run, warm_fd, start_run, open_file,
-- is_closed): the router must need nothing else.  Each error kind (and
-- file error code) the fake raises must come back as the status of the
-- README's error table, whatever its message says: the messages here are
-- nonsense, and a message that reads like another error must not move
-- the status.  The last part checks that the real core gives the codes
-- the router branches on.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local errors = T.errors

-- The README's error table, for the kinds a session raises.
local KIND_STATUS = {
  InvalidArgument = 400, PolicyDenied = 403, SessionClosed = 410,
  SandboxExecutionError = 500, BackendUnavailable = 503,
}

local function make_error(kind, message, fields)
  if kind == "InvalidArgument" then
    local e = errors.InvalidArgument("path", message)
    for k, v in pairs(fields or {}) do e[k] = v end
    return e
  end
  return errors.new(kind, message, fields)
end

-- A session with the host API only; what its methods do is set per test.
local behave = {}
local function fake_session()
  local closed = false
  local s = { id = "00ff00ff00ff00ff00ff00ff00ff00ff", name = "fake", backend = "none",
    created_at = "2024-01-01T00:00:00Z" }
  function s:limits() return { max_file_bytes = 1024, timeout_s = 60 } end
  function s:admit_run(cmd, opts)
    if behave.admit then errors.raise(behave.admit) end
    return { argv = { "true" }, cmd = cmd, opts = opts }
  end
  function s:warm_fd() return nil end
  function s:start_run() return nil, errors.SessionClosed("gone") end
  function s:open_file()
    if behave.open then errors.raise(behave.open) end
    return 0, 0
  end
  function s:is_closed() return closed end
  function s:alive() return not closed end
  function s:close() closed = true end
  return setmetatable(s, { __index = function(_, k)
    error("sbx.server used a session member outside the host API: " .. tostring(k), 2)
  end })
end

describe("sbxd's seam to sessions", function()
  if not T.has_core() then
    pending("needs sbx.core (run under build-test/bin/sbxlua)")
    return
  end
  local session = require "sbx.session"
  local server, real_open, sid

  setup(function()
    real_open = session.open
    session.open = function()
      if behave.open_session then errors.raise(behave.open_session) end
      return fake_session()
    end
    package.loaded["sbx.server"] = nil
    server = require "sbx.server"
    server.init { policy = T.ROOT .. "/policies/default.lua", max_sessions = 100, max_runs = 100 }
    local r = server.handle { method = "POST", path = "/v1/sessions", tenant = "t", body = {} }
    assert.are.equal(201, r.status)
    sid = r.body.id
  end)

  teardown(function()
    if server then server.shutdown() end
    session.open = real_open
    package.loaded["sbx.server"] = nil
  end)

  before_each(function() behave = {} end)

  local function get_file()
    return server.handle { method = "GET", path = "/v1/sessions/" .. sid .. "/files/a.txt", tenant = "t" }
  end

  it("control: the fake session serves a file and a run through the host API alone", function()
    assert.are.equal(200, get_file().status)
    local r = server.handle { method = "POST", path = "/v1/sessions/" .. sid .. "/runs", tenant = "t",
      body = { cmd = "true" } }
    assert.is_table(r.stream, "a run starts")
    local run, e = r.stream.start()
    assert.is_nil(run)
    assert.are.equal("SessionClosed", e.kind)
    r.stream.finish()
  end)

  it("a file error's status comes from its code, not its message", function()
    for _, msg in ipairs { "zzz", "no such file", "over the cap of max_file_bytes, larger than" } do
      behave.open = make_error("InvalidArgument", msg, { code = "not_found" })
      assert.are.equal(404, get_file().status, msg)
      behave.open = make_error("InvalidArgument", msg, { code = "too_large" })
      assert.are.equal(413, get_file().status, msg)
      -- No code: the kind's status, however the message reads.
      behave.open = make_error("InvalidArgument", msg)
      assert.are.equal(400, get_file().status, msg)
    end
  end)

  it("an append to a missing file is 409 with size 0, by code", function()
    behave.open = make_error("InvalidArgument", "qqq", { code = "not_found" })
    local r = server.handle { method = "PUT", path = "/v1/sessions/" .. sid .. "/files/a.txt",
      query = "offset=3", tenant = "t", raw = "xyz" }
    assert.are.equal(409, r.status)
    assert.are.equal("Conflict", r.body.kind)
    assert.are.equal(0, r.body.size)
  end)

  it("every kind a run's admission raises maps to its documented status", function()
    for kind, status in pairs(KIND_STATUS) do
      for _, msg in ipairs { "zzz", "no such file", "session is closed" } do
        behave.admit = make_error(kind, msg)
        local r = server.handle { method = "POST", path = "/v1/sessions/" .. sid .. "/runs",
          tenant = "t", body = { cmd = "true" } }
        assert.are.equal(status, r.status, kind .. " / " .. msg)
        assert.are.equal(kind, r.body.kind)
      end
    end
  end)

  it("every kind a session open raises maps to its documented status", function()
    for kind, status in pairs(KIND_STATUS) do
      behave.open_session = make_error(kind, "zzz " .. kind)
      local r = server.handle { method = "POST", path = "/v1/sessions", tenant = "t", body = {} }
      assert.are.equal(status, r.status, kind)
      assert.are.equal(kind, r.body.kind)
    end
  end)

  it("a Lua error that is not an sbx error is a 500 that does not leak its text", function()
    behave.open = "secret internal detail"
    local r = get_file()
    assert.are.equal(500, r.status)
    assert.is_nil(tostring(r.body.message):find("secret", 1, true))
  end)
end)

describe("the core's error codes the seam branches on", function()
  if not T.has_core() then
    pending("needs sbx.core (run under build-test/bin/sbxlua)")
    return
  end
  local s
  setup(function() s = T.sbx.session { max_file_bytes = 16 } end)
  teardown(function() if s then s:close() end end)

  it("open_file: a missing file is not_found, one over max_file_bytes too_large", function()
    local e = T.expect("InvalidArgument", s.open_file, s, "missing.txt")
    assert.are.equal("not_found", e.code)
    s:put_bytes("small.txt", "0123456789")
    local fd, size = s:open_file("small.txt")
    assert.are.equal(10, size)
    local ffi = require "ffi"
    pcall(ffi.cdef, "int close(int fd);")
    ffi.C.close(fd)
    s:exec("head -c 100 /dev/zero > big.bin")
    e = T.expect("InvalidArgument", s.open_file, s, "big.bin")
    assert.are.equal("too_large", e.code)
    -- control: an error without a condition has no code
    e = T.expect("InvalidArgument", s.open_file, s, ".")
    assert.is_nil(e.code)
  end)
end)

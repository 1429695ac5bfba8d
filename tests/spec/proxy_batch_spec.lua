-- proxy_batch_spec: the allow-list proxy's batch mode (src/lua/proxy.c),
-- the way sbxd drives it (issue 16).  A wake-up steps the proxy in C and
-- enters Lua once per round of questions (NAME, then a literal's ADDRS),
-- however many connections wait; relaying never enters Lua; a batch that
-- fails, or gives no verdict for a question, refuses (fail closed).
--
-- Sockets through LuaJIT's FFI, on 127.0.0.1 only.  The upstream is a
-- listener nobody accepts from until a test needs its bytes: a loopback
-- connect completes in its backlog.  Every wait is a bounded loop.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local ffi = require "ffi"
local bit = require "bit"

-- One cdef each: a declaration another spec made first (all specs share
-- one LuaJIT) must not keep the others out.
for _, decl in ipairs {
  "struct sbx_pb_sockaddr_in { uint16_t family; uint16_t port; uint32_t addr; uint8_t zero[8]; };",
  "struct sbx_pb_pollfd { int fd; short events; short revents; };",
  "int socket(int domain, int type, int protocol);",
  "int bind(int fd, const void *addr, uint32_t len);",
  "int listen(int fd, int backlog);",
  "int getsockname(int fd, void *addr, uint32_t *len);",
  "int connect(int fd, const void *addr, uint32_t len);",
  "int accept(int fd, void *addr, void *len);",
  "long send(int fd, const void *buf, size_t n, int flags);",
  "long recv(int fd, void *buf, size_t n, int flags);",
  "int close(int fd);",
  "int poll(struct sbx_pb_pollfd *fds, unsigned long n, int timeout);",
} do
  pcall(ffi.cdef, decl)
end
local C = ffi.C
local AF_INET, SOCK_STREAM = 2, 1
local MSG_DONTWAIT, MSG_NOSIGNAL = 64, 16384

local function htons(p) return bit.bor(bit.rshift(p, 8), bit.lshift(bit.band(p, 0xff), 8)) end
local function addr(port)
  local a = ffi.new("struct sbx_pb_sockaddr_in")
  a.family = AF_INET
  a.port = htons(port)
  a.addr = 0x0100007f -- 127.0.0.1, network order on little-endian x86_64
  return a
end

local function listener()
  local fd = C.socket(AF_INET, SOCK_STREAM, 0)
  assert(fd >= 0)
  assert(C.bind(fd, addr(0), 16) == 0)
  assert(C.listen(fd, 128) == 0)
  local a, len = ffi.new("struct sbx_pb_sockaddr_in"), ffi.new("uint32_t[1]", 16)
  assert(C.getsockname(fd, a, len) == 0)
  return fd, htons(a.port)
end

local function client(port, head)
  local fd = C.socket(AF_INET, SOCK_STREAM, 0)
  assert(fd >= 0)
  assert(C.connect(fd, addr(port), 16) == 0)
  assert(C.send(fd, head, #head, MSG_NOSIGNAL) == #head)
  return fd
end

local function readable(fd, ms)
  local p = ffi.new("struct sbx_pb_pollfd[1]")
  p[0].fd, p[0].events = fd, 1
  return C.poll(p, 1, ms) == 1
end

-- What fd has to read now (nil when nothing; "" at EOF).
local buf = ffi.new("char[65536]")
local function read_now(fd)
  local n = C.recv(fd, buf, 65536, MSG_DONTWAIT)
  if n < 0 then return nil end
  return ffi.string(buf, n)
end

-- Step px (waiting up to 50 ms a step) until done() holds; bounded.
local function drive(px, done)
  for _ = 1, 400 do
    if done() then return true end
    assert(px:step(50))
  end
  return done()
end

-- Read each fd's answer until it holds a full head (or EOF), stepping px.
local function answers(px, fds)
  local got = {}
  drive(px, function()
    for i, fd in ipairs(fds) do
      if not (got[i] and (got[i]:find("\r\n\r\n", 1, true) or got[i]:sub(-1) == "\0")) then
        local s = read_now(fd)
        if s == "" then got[i] = (got[i] or "") .. "\0" elseif s then got[i] = (got[i] or "") .. s end
        if not (got[i] and (got[i]:find("\r\n\r\n", 1, true) or got[i]:sub(-1) == "\0")) then return false end
      end
    end
    return true
  end)
  return got
end

local function connect_head(port) return ("CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n"):format(port) end

-- A batch that allows the literal 127.0.0.1, recording every call.
local function allowing(calls)
  return function(queries, logs)
    local call = { n = #queries, logs = #logs, phases = {} }
    calls[#calls + 1] = call
    local v = {}
    for i, q in ipairs(queries) do
      call.phases[q.phase] = (call.phases[q.phase] or 0) + 1
      v[i] = q.phase == "name" and { allow = true, literal = "127.0.0.1" } or { allow = true }
    end
    return v
  end
end

local describe_core = T.has_core() and describe or function(name) pending(name .. " (needs sbx.core)") end

describe_core("proxy batch mode", function()
  local core = require "sbx.core"
  local opened = {}
  local function track(fd) opened[#opened + 1] = fd return fd end
  after_each(function()
    for _, fd in ipairs(opened) do C.close(fd) end
    opened = {}
  end)

  it("wants decide or batch, not both", function()
    assert.has_error(function() core.proxy_new {} end, "field 'decide': function expected, got nil")
    assert.has_error(function() core.proxy_new { batch = 1 } end)
    local ok, err = pcall(core.proxy_new, { batch = function() end, decide = function() end })
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("not both", 1, true), tostring(err))
    ok, err = pcall(core.proxy_new, { batch = function() end, log = function() end })
    assert.is_false(ok)
    assert.is_truthy(tostring(err):find("give no log", 1, true), tostring(err))
  end)

  it("refuses to be closed from its own batch, and the question is refused", function()
    local px
    local errs = {}
    px = core.proxy_new { batch = function(queries)
      for _, f in ipairs { "close", "remove" } do
        local ok, err = pcall(px[f], px, "t")
        errs[#errs + 1] = not ok and tostring(err) or (f .. " went through")
      end
      return #queries > 0 and { { allow = false, reason = "no" } } or {}
    end }
    local lfd, lport = listener()
    assert(px:add(lfd, "t"))
    local a = track(client(lport, connect_head(1)))
    local got = answers(px, { a })
    assert.is_truthy(got[1]:find("^HTTP/1.1 403 "), got[1])
    assert.is_true(#errs >= 2)
    for _, e in ipairs(errs) do assert.is_truthy(e:find("busy", 1, true), e) end
    px:close()
  end)

  it("decides every connection of one wake-up in one call per round, and relays without Lua", function()
    local calls = {}
    local px = core.proxy_new { batch = allowing(calls) }
    local lfd, lport = listener()
    local ufd, uport = listener()
    track(ufd)
    assert(px:add(lfd, "t"))
    local fds = {}
    for i = 1, 20 do fds[i] = track(client(lport, connect_head(uport))) end
    -- Every head is in the proxy's socket buffers: one wake-up takes them all.
    assert.is_true(readable(px:fd(), 5000))
    assert.is_true(px:wake(1000))
    assert.equal(2, #calls, "rounds")
    assert.same({ n = 20, logs = 0, phases = { name = 20 } }, calls[1])
    assert.same({ n = 20, logs = 0, phases = { addrs = 20 } }, calls[2])
    assert.equal(2, px:stats().lua_calls)
    -- Every connection gets through (the dials complete in later steps).
    local got = answers(px, fds)
    for i = 1, 20 do
      assert.is_truthy(got[i] and got[i]:find("^HTTP/1.1 200 "), tostring(got[i]))
    end
    -- Bytes through one tunnel: the upstream reads what the client sent.
    local up = {}
    for i = 1, 20 do
      up[i] = C.accept(ufd, nil, nil)
      assert(up[i] >= 0)
      track(up[i])
    end
    local chunk = ("x"):rep(65536)
    local sent, seen = 0, 0
    drive(px, function()
      if sent < 4 * 1048576 then
        local n = C.send(fds[1], chunk, #chunk, MSG_DONTWAIT + MSG_NOSIGNAL)
        if n > 0 then sent = sent + n end
      end
      for i = 1, 20 do
        local s = read_now(up[i])
        if s then seen = seen + #s end
      end
      return sent >= 4 * 1048576 and seen >= sent
    end)
    assert.equal(4 * 1048576, seen)
    assert.is_true(px:stats().bytes_up >= seen)
    -- The control above (2 calls) shows the counter sees calls: none since.
    assert.equal(2, px:stats().lua_calls)
    assert.equal(2, #calls)
    px:close()
  end)

  it("refuses every question of a batch that errors, and logs the refusals", function()
    local n = 0
    local px = core.proxy_new { batch = function() n = n + 1 error("batch says boom") end }
    local lfd, lport = listener()
    local _, uport = listener()
    assert(px:add(lfd, "t"))
    local fds = {}
    for i = 1, 5 do fds[i] = track(client(lport, connect_head(uport))) end
    assert.is_true(readable(px:fd(), 5000))
    assert.is_true(px:wake(1000))
    local got = answers(px, fds)
    for i = 1, 5 do
      assert.is_truthy(got[i]:find("^HTTP/1.1 403 "), got[i])
      assert.is_truthy(got[i]:find("the policy check failed", 1, true), got[i])
      assert.is_truthy(got[i]:find("batch says boom", 1, true), got[i])
    end
    local st = px:stats()
    assert.equal(5, st.refused)
    assert.equal(0, st.allowed)
    -- the questions, then the refusals' log lines (written to stderr)
    assert.equal(2, n)
    px:close()
  end)

  it("refuses only the question whose verdict is missing or not a table", function()
    local logs = {}
    local px = core.proxy_new { batch = function(queries, lines)
      for _, l in ipairs(lines) do logs[#logs + 1] = l end
      local v = {}
      for i, q in ipairs(queries) do
        if q.host == "127.0.0.2" then v[i] = "allow"
        elseif q.host == "127.0.0.3" then v[i] = nil
        elseif q.phase == "name" then v[i] = { allow = true, literal = q.host }
        else v[i] = { allow = true } end
      end
      v[#queries + 1] = { allow = true } -- one too many: ignored
      return v
    end }
    local lfd, lport = listener()
    local _, uport = listener()
    assert(px:add(lfd, "t"))
    local a = track(client(lport, connect_head(uport)))
    local b = track(client(lport, ("CONNECT 127.0.0.2:%d HTTP/1.1\r\nHost: x\r\n\r\n"):format(uport)))
    local c = track(client(lport, ("CONNECT 127.0.0.3:%d HTTP/1.1\r\nHost: x\r\n\r\n"):format(uport)))
    local got = answers(px, { a, b, c })
    assert.is_truthy(got[1]:find("^HTTP/1.1 200 "), got[1])
    for i = 2, 3 do
      assert.is_truthy(got[i]:find("^HTTP/1.1 403 "), got[i])
      assert.is_truthy(got[i]:find("gave no verdict", 1, true), got[i])
    end
    assert.is_true(drive(px, function() return #logs >= 2 end))
    assert.is_truthy(table.concat(logs, "\n"):find("refused 127.0.0.2:", 1, true), table.concat(logs, "\n"))
    px:close()
  end)

  it("lets a question wait for px:decided, whose next question is batched too", function()
    local held, calls = {}, 0
    local px
    px = core.proxy_new { batch = function(queries)
      calls = calls + 1
      local v = {}
      for i, q in ipairs(queries) do
        if q.phase == "name" then
          held[#held + 1] = q.ticket
          v[i] = { pending = true }
        else
          v[i] = { allow = true }
        end
      end
      -- answering from inside the batch is refused: the proxy is busy
      local ok, err = pcall(px.decided, px, queries[1].ticket, { allow = true })
      assert(not ok and tostring(err):find("busy", 1, true), tostring(err))
      return v
    end }
    local lfd, lport = listener()
    local _, uport = listener()
    assert(px:add(lfd, "t"))
    local a = track(client(lport, connect_head(uport)))
    assert.is_true(drive(px, function() return #held == 1 end))
    assert.is_nil(read_now(a), "answered before the verdict")
    local before = calls
    assert.is_true(px:decided(held[1], { allow = true, literal = "127.0.0.1" }))
    assert.equal(before + 1, calls) -- the ADDRS question, from inside px:decided
    local got = answers(px, { a })
    assert.is_truthy(got[1]:find("^HTTP/1.1 200 "), got[1])
    assert.is_false(px:decided(held[1], { allow = true })) -- gone from the waiting list
    px:close()
  end)
end)

-- fault_spec.lua: faults on the host side (issue 8, part 4), each followed
-- by the checks that matter: no orphan sandbox process, no stale session
-- dir after the next start, the server still serving, no acknowledged byte
-- lost.
--
--   * kill -9 of sbxd during a run, during a stream and during a file
--     upload: every process below sbxd (zygotes, sbx-inits, the workload)
--     is gone within seconds, and the next sbxd on the same state dir
--     sweeps the dead one's session dirs at its first session open;
--   * client disconnects: before the HTTP/2 preface is complete, after the
--     request headers, mid-stream (the run is killed), mid-upload (no file,
--     not even a partial one);
--   * a policy file replaced by garbage, then SIGHUP: the reload is refused
--     (event=policy_reload ok=false), the old policy stays, sbxd serves;
--   * a full disk in the state dir (a 4 MiB tmpfs in a mount namespace of
--     its own): put_bytes over the space, a sandbox filling its work dir and
--     a session opened on a full disk all end in clean errors;
--   * a pinned work_dir: every put_bytes acknowledged before the host side
--     is killed with SIGKILL is there, byte for byte, for the next host side.
--
-- The table of cases is in tests/security/README.md.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local S = dofile(here .. "sec_helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local runnable = H.available() and T.has_core() and H.have("curl") and H.have("python3")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl and python3)") end
local describe_core = T.has_core() and describe
  or function(name) pending(name .. " (needs sbx.core)") end

local JSON = "content-type: application/json"

-- A number for "sleep N" that no other process has; the request carries it
-- as $((a+b)) so only the sandboxed sleep has it literally in its argv.
local function marker()
  local n = 900000 + (tonumber(S.token()) % 99991)
  return n, ("$((%d+%d))"):format(n - 12345, 12345)
end

local function wait_until(fn, seconds)
  local deadline = S.now_ms() + seconds * 1000
  repeat
    if fn() then return true end
    S.sleep(0.05)
  until S.now_ms() > deadline
  return fn() and true or false
end

-- Every process below pid: { [pid] = starttime } (starttime tells a pid
-- reused by an unrelated process apart).
local function starttime(pid)
  local st = S.read_file("/proc/" .. pid .. "/stat")
  if not st then return nil end
  local rest = st:match("^%d+ %b() (.*)$")
  if not rest then return nil end
  local f = {}
  for w in rest:gmatch("%S+") do f[#f + 1] = w end
  return f[20] -- field 22 of stat
end

local function descendants(root)
  local children = {}
  for _, pid in ipairs(S.host_pids()) do
    local st = S.read_file("/proc/" .. pid .. "/status") or ""
    local ppid = tonumber(st:match("PPid:%s*(%d+)"))
    if ppid then
      children[ppid] = children[ppid] or {}
      table.insert(children[ppid], pid)
    end
  end
  local out, n, queue = {}, 0, { root }
  while #queue > 0 do
    local p = table.remove(queue)
    for _, c in ipairs(children[p] or {}) do
      out[c] = starttime(c)
      n = n + 1
      queue[#queue + 1] = c
    end
  end
  return out, n
end

local function alive(set)
  local left = {}
  for pid, t in pairs(set) do
    if t and starttime(pid) == t then
      left[#left + 1] = pid .. " " .. tostring(S.cmdline(pid))
    end
  end
  return left
end

-- The names in a dir, as a set.
local function dir_names(path)
  local t = {}
  for n in S.sh("ls -A " .. S.q(path) .. " 2>/dev/null"):gmatch("%S+") do t[n] = true end
  return t
end

local function count_dirs(path)
  local out = S.sh("ls -A " .. S.q(path) .. " 2>/dev/null")
  local n = 0
  for _ in out:gmatch("%S+") do n = n + 1 end
  return n
end

-- Start sbxd with SBX_STATE_DIR = state (the env is inherited).
local function start(state, o)
  local old = os.getenv("SBX_STATE_DIR")
  S.setenv("SBX_STATE_DIR", state)
  local srv, err = H.start(o or {})
  if old then S.setenv("SBX_STATE_DIR", old) else S.unsetenv("SBX_STATE_DIR") end
  assert.is_truthy(srv, err)
  return srv
end

local function new_session(srv)
  local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
  assert.are.equal(201, status, body)
  local sid = H.json_field(body, "id")
  assert.is_truthy(sid, body)
  return sid
end

-- A curl in the background (its output discarded); returns at once.
local function curl_bg(srv, path, ...)
  local args = { "curl", "-s", "--max-time", "30", "--http2-prior-knowledge", "-H", srv:auth() }
  for _, a in ipairs { ... } do args[#args + 1] = a end
  args[#args + 1] = srv.url .. path
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = S.q(a) end
  os.execute(table.concat(quoted, " ") .. " >/dev/null 2>&1 &")
end

local function healthy(srv)
  local body, status = srv:curl("/healthz")
  return status == 200, body
end

describe_srv("kill -9 of sbxd", function()
  local state

  before_each(function()
    state = S.mktemp_dir("fault-state")
  end)
  after_each(function()
    S.rmtree(state)
  end)

  -- start(): begin the activity; ready(): it is under way.  Then SIGKILL.
  local function kill_during(what, begin, ready)
    local srv = start(state)
    local ok, err = pcall(function()
      local sid = new_session(srv)
      new_session(srv) -- an idle second session: its zygote must go too
      local ctx = begin(srv, sid)
      assert.is_true(wait_until(function() return ready(srv, sid, ctx) end, 60),
        what .. " never got under way\n" .. srv:log())
      local below, n = descendants(srv.pid)
      assert.is_true(n >= 2, "sbxd has no sandbox processes below it: " .. n)
      local dirs = count_dirs(state .. "/sessions")
      assert.is_true(dirs >= 2, "no session dirs in the state dir")
      -- (sbxd may keep a spare session too, whose dir is made in the
      -- background: the dirs are followed by name.)
      local before = dir_names(state .. "/sessions")
      srv:stop("KILL")
      -- no orphan: every process that was below sbxd dies with it
      local gone = wait_until(function() return #alive(below) == 0 end, 60)
      assert.is_true(gone, what .. ": left behind:\n" .. table.concat(alive(below), "\n"))
      if ctx and ctx.marker then
        assert.are.same({}, S.procs_exact("sleep " .. ctx.marker))
      end
      -- the dead sbxd's session dirs are still there until the next start ...
      local after = dir_names(state .. "/sessions")
      for d in pairs(before) do assert.is_true(after[d], d .. " went before the next start") end
      -- ... whose first session open sweeps them
      local srv2 = start(state)
      local ok2, err2 = pcall(function()
        new_session(srv2)
        local now = dir_names(state .. "/sessions")
        for d in pairs(after) do
          assert.is_nil(now[d], "stale session dir left: " .. d)
        end
        assert.is_true(count_dirs(state .. "/sessions") >= 1)
        local body, status = srv2:curl("/v1/sessions/" .. new_session(srv2) .. "/runs", "-H",
          srv2:auth(), "-H", JSON, "-d", '{"cmd":"echo after-restart"}')
        assert.are.equal(200, status, body)
        assert.is_truthy(body:find("after-restart", 1, true), body)
      end)
      srv2:cleanup()
      assert(ok2, err2)
    end)
    srv:cleanup()
    assert(ok, err)
  end

  it("during a run leaves no sandbox process and a clean next start", function()
    kill_during("a run", function(srv, sid)
      local n, expr = marker()
      curl_bg(srv, "/v1/sessions/" .. sid .. "/runs", "-H", JSON,
        "-d", ('{"cmd":"exec sleep %s"}'):format(expr))
      return { marker = n }
    end, function(_, _, ctx)
      return #S.procs_exact("sleep " .. ctx.marker) > 0
    end)
  end)

  it("during a stream leaves no sandbox process and a clean next start", function()
    kill_during("a stream", function(srv, sid)
      local n, expr = marker()
      local out = os.tmpname()
      local args = { "curl", "-s", "-N", "--max-time", "30", "--http2-prior-knowledge",
        "-H", srv:auth(), "-H", JSON, "-d",
        ('{"cmd":"sleep %s & while :; do echo tick; sleep 0.02; done"}'):format(expr),
        srv.url .. "/v1/sessions/" .. sid .. "/runs" }
      local quoted = {}
      for i, a in ipairs(args) do quoted[i] = S.q(a) end
      os.execute(table.concat(quoted, " ") .. " >" .. S.q(out) .. " 2>/dev/null &")
      return { marker = n, out = out }
    end, function(_, _, ctx)
      local got = S.read_file(ctx.out) or ""
      local ticks = select(2, got:gsub("tick", ""))
      if ticks >= 5 then os.remove(ctx.out) return true end
      return false
    end)
  end)

  it("during a file upload leaves no sandbox process and a clean next start", function()
    local big = os.tmpname()
    S.sh("head -c 8000000 /dev/urandom > " .. S.q(big))
    local ok, err = pcall(kill_during, "an upload", function(srv, sid)
      curl_bg(srv, "/v1/sessions/" .. sid .. "/files/up.bin", "--limit-rate", "500k",
        "-T", big)
      return {}
    end, function(srv)
      -- the upload is under way when sbxd holds its connection
      local conns = S.sh("ss -tnp 2>/dev/null | grep -c 'pid=" .. srv.pid .. ",'")
      return (tonumber(conns) or 0) >= 1 and (S.sleep(0.5) or true)
    end)
    os.remove(big)
    assert(ok, err)
  end)
end)

describe_srv("kill -9 of a host side with networked sessions", function()
  local state

  before_each(function() state = S.mktemp_dir("fault-net") end)
  after_each(function() S.rmtree(state) end)

  -- Every process below the host side, the proxy's and pasta's included,
  -- must die with it: nothing may keep a namespace or a port alive.
  local function kill_check(pid)
    local below, n = descendants(pid)
    local names = {}
    for p in pairs(below) do names[#names + 1] = tostring(S.cmdline(p)) end
    local all = table.concat(names, "\n")
    return below, n, all
  end

  it("sbxd with an allowlist session holding a proxy connection and an open session (pasta)", function()
    local srv = start(state)
    local ok, err = pcall(function()
      local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d",
        '{"network_mode":"allowlist","network_allowlist":["pypi.org"]}')
      assert.are.equal(201, status, body)
      local sid = H.json_field(body, "id")
      body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"network_mode":"open"}')
      assert.are.equal(201, status, body)
      -- A run that holds a connection to the proxy open.
      local n, expr = marker()
      local hold = [[python3 -c 'import socket,time; s=socket.create_connection((\"127.0.0.1\",3128)); time.sleep(60)']]
      curl_bg(srv, "/v1/sessions/" .. sid .. "/runs", "-H", JSON, "-d",
        ([[{"cmd":"%s & exec sleep %s"}]]):format(hold, expr))
      assert.is_true(wait_until(function() return #S.procs_exact("sleep " .. n) > 0 end, 60), srv:log())
      assert.is_true(wait_until(function()
        local m = srv:curl("/metrics", "-H", srv:auth())
        return (tonumber(m:match("sbxd_proxy_connections_active (%d+)")) or 0) >= 1
      end, 10), "the proxy connection never showed up")
      local below, count, names = kill_check(srv.pid)
      assert.is_truthy(names:find("pasta", 1, true), "no pasta below sbxd:\n" .. names)
      assert.is_true(count >= 5, names)
      srv:stop("KILL")
      assert.is_true(wait_until(function() return #alive(below) == 0 end, 60),
        "left behind:\n" .. table.concat(alive(below), "\n"))
      assert.are.same({}, S.procs_exact("sleep " .. n))
    end)
    srv:cleanup()
    assert(ok, err)
  end)

  it("sbxlua with an allowlist session: its proxy child dies with it", function()
    local script = state .. "/hold.lua"
    S.write_file(script, [[
local sbx = require "sbx"
local s = sbx.session{ backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" } }
io.stdout:write("ready\n") io.stdout:flush()
s:exec("sleep 60")
]])
    local out = state .. "/out"
    local pid = S.sh(("SBX_STATE_DIR=%s %s %s >%s 2>&1 & echo $!"):format(S.q(state), S.q(S.SBXLUA),
      S.q(script), S.q(out))):match("%d+")
    assert.is_true(wait_until(function() return (S.read_file(out) or ""):find("ready", 1, true) end, 60),
      S.read_file(out))
    local below, _, names = kill_check(tonumber(pid))
    assert.is_truthy(names:find("sbx-proxy", 1, true) or names:find(S.SBXLUA, 1, true), names)
    local proxies = 0
    for p in pairs(below) do
      if (S.read_file("/proc/" .. p .. "/comm") or ""):find("sbx-proxy", 1, true) then proxies = proxies + 1 end
    end
    assert.are.equal(1, proxies, "one proxy child expected:\n" .. names)
    os.execute("kill -9 " .. pid)
    assert.is_true(wait_until(function() return #alive(below) == 0 end, 60),
      "left behind:\n" .. table.concat(alive(below), "\n"))
  end)
end)

describe_srv("client disconnects", function()
  local srv, sid, state

  setup(function()
    state = S.mktemp_dir("fault-disc")
    srv = start(state)
    sid = new_session(srv)
  end)
  teardown(function()
    if srv then srv:cleanup() end
    S.rmtree(state)
  end)

  local function py(code)
    local out, rc = S.sh("python3 -c " .. S.q(code), true)
    return out, rc
  end

  it("before the preface is complete, and right after connecting", function()
    local host, port = srv.url:match("^https?://([^:/]+):(%d+)")
    assert.is_truthy(port, srv.url)
    local out, rc = py(([[
import socket
for payload in (b"", b"PRI * HTTP/2.0\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00", b"\x16\x03\x01garbage"):
    s = socket.create_connection(("%s", %s))
    s.sendall(payload)
    s.close()
print("done")
]]):format(host, port))
    assert.are.equal(0, rc, out)
    local ok, body = healthy(srv)
    assert.is_true(ok, body)
    local b, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"echo still-serving"}')
    assert.are.equal(200, status, b)
    assert.is_truthy(b:find("still-serving", 1, true), b)
  end)

  it("after the request headers, before the body ends: the request is dropped", function()
    local host, port = srv.url:match("^https?://([^:/]+):(%d+)")
    -- an HTTP/2 client that sends HEADERS for a run (no END_STREAM) and a
    -- part of the body, then hangs up
    local out, rc = py(([[
import socket, struct
def frame(t, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([t, flags]) + struct.pack(">I", sid) + payload
def lit(name, value):  # literal header field without indexing, new name
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
s = socket.create_connection(("%s", %s))
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
hdrs = (lit(b":method", b"POST") + lit(b":scheme", b"http") + lit(b":authority", b"%s")
        + lit(b":path", b"/v1/sessions/%s/runs") + lit(b"authorization", b"Bearer %s")
        + lit(b"content-type", b"application/json"))
s.sendall(frame(1, 4, 1, hdrs) + frame(0, 0, 1, b'{"cmd":"echo hal'))
s.close()
print("done")
]]):format(host, port, host, sid, srv.token.alice))
    assert.are.equal(0, rc, out)
    local ok, body = healthy(srv)
    assert.is_true(ok, body)
  end)

  it("mid-stream: the run is killed", function()
    local n, expr = marker()
    -- The client goes once the stream has started (curl in the background,
    -- killed when "tick" has arrived), not at a --max-time racing the load.
    local out, pidf = os.tmpname(), os.tmpname()
    os.execute(("curl -sN --max-time 300 --http2-prior-knowledge -H %s -H %s -d %s %s >%s 2>&1 </dev/null"
      .. " & echo $! >%s")
      :format(S.q(srv:auth()), S.q(JSON),
        S.q(('{"cmd":"sleep %s & while :; do echo tick; sleep 0.02; done"}'):format(expr)),
        S.q(srv.url .. "/v1/sessions/" .. sid .. "/runs"), S.q(out), S.q(pidf)))
    local started = wait_until(function() return (S.read_file(out) or ""):find("tick", 1, true) ~= nil end, 120)
    os.execute("kill " .. tonumber(S.read_file(pidf):match("%d+")) .. " 2>/dev/null")
    local body = S.read_file(out) or ""
    os.remove(out)
    os.remove(pidf)
    assert.is_truthy(started, "the stream never started: " .. body)
    assert.is_falsy(body:find('"type":"exit"', 1, true), "the run ended by itself?\n" .. body)
    assert.is_true(wait_until(function() return #S.procs_exact("sleep " .. n) == 0 end, 60),
      "the run outlived its client's disconnect")
    local ok, hb = healthy(srv)
    assert.is_true(ok, hb)
  end)

  it("mid-upload: no file, not even a partial one, and sbxd serves", function()
    local big = os.tmpname()
    S.sh("head -c 4000000 /dev/urandom > " .. S.q(big))
    local _, cut_status = srv:curl("/v1/sessions/" .. sid .. "/files/partial.bin", "--limit-rate", "400k",
      "--max-time", "1.5", "-H", srv:auth(), "-T", big)
    os.remove(big)
    assert.are_not.equal(200, cut_status, "the upload was expected to be cut (--max-time)")
    -- sbxd drops the cut upload's temp file when it sees the cut: wait for
    -- that (a condition, not a 0.3 s sleep), then nothing may be left.
    local b, st2
    wait_until(function()
      b, st2 = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
        "-d", '{"cmd":"ls -A /tmp/sandbox-work; echo listed"}')
      return st2 == 200 and not b:find(".sbx-tmp", 1, true)
    end, 60)
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/files/partial.bin", "-H", srv:auth())
    assert.are.equal(404, status, "a cut upload left a file: " .. #body .. " bytes")
    assert.are.equal(200, st2, b)
    assert.is_falsy(b:find("partial", 1, true), "the sandbox sees a partial upload: " .. b)
    assert.is_falsy(b:find(".sbx-tmp", 1, true), "a temp file of the cut upload is left: " .. b)
  end)
end)

describe_srv("a policy file replaced by garbage, then SIGHUP", function()
  it("keeps the old policy and keeps serving", function()
    local state = S.mktemp_dir("fault-pol")
    local policy = state .. "/policy.lua"
    S.write_file(policy, S.read_file(T.ROOT .. "/policies/default.lua"))
    local srv = start(state, { args = { "--policy", policy } })
    local ok, err = pcall(function()
      local sid = new_session(srv)
      for i, garbage in ipairs { "\0\1\2\255\254 not lua at all", "return 42", "error('boom')",
        "return { ceilings = 'x' }" } do
        S.write_file(policy, garbage)
        os.execute("kill -HUP " .. srv.pid)
        assert.is_true(wait_until(function()
          local _, count = srv:log():gsub("event=policy_reload ok=false", "")
          return count >= i
        end, 5), "no refused reload logged for garbage " .. i .. ":\n" .. srv:log())
        assert.is_falsy(srv:log():find("event=policy_reload ok=true", 1, true), srv:log())
        local hok, hb = healthy(srv)
        assert.is_true(hok, hb)
        -- the session opened before and a new one both run under the old policy
        for _, id in ipairs { sid, new_session(srv) } do
          local b, status = srv:curl("/v1/sessions/" .. id .. "/runs", "-H", srv:auth(), "-H", JSON,
            "-d", ('{"cmd":"echo kept-%d"}'):format(i))
          assert.are.equal(200, status, b)
          assert.is_truthy(b:find("kept-" .. i, 1, true), b)
        end
      end
    end)
    srv:cleanup()
    S.rmtree(state)
    assert(ok, err)
  end)
end)

local is_root = S.sh("id -u"):match("^0") ~= nil and H.have("unshare")
local describe_root = (T.has_core() and is_root) and describe
  or function(name) pending(name .. " (needs sbx.core, root and unshare: it mounts a tmpfs)") end

describe_root("a full disk in the state dir", function()
  it("ends in clean errors, never a crash", function()
    local dir = S.mktemp_dir("fault-full")
    local script = dir .. "/full.lua"
    S.write_file(script, [[
local sbx = require "sbx"
local function try(label, f)
  local ok, e = pcall(f)
  if ok then print(label .. "=ok")
  elseif type(e) == "table" and e.kind then print(label .. "=" .. e.kind .. " " .. tostring(e.message):gsub("\n", " "))
  else print(label .. "=RAW " .. tostring(e)) end
end
local s = sbx.session {}
try("put_small", function() s:put_bytes("small.txt", "hello") end)
try("put_big", function() s:put_bytes("big.bin", string.rep("x", 8 * 1048576)) end)
try("get_small", function() assert(s:get_bytes("small.txt") == "hello") end)
local r = s:exec("head -c 8000000 /dev/zero > fill; echo rc=$?")
print("fill=" .. r.stdout:gsub("\n", " ") .. (r.stderr:find("No space", 1, true) and "ENOSPC" or ""))
try("run_after_fill", function() assert(s:exec("echo alive").stdout == "alive\n") end)
try("put_when_full", function() s:put_bytes("more.bin", string.rep("y", 1048576)) end)
try("close", function() s:close() end)
-- the disk full before a session opens
local f = io.open(os.getenv("SBX_STATE_DIR") .. "/hog", "wb")
while f:write(string.rep("z", 65536)) do end
pcall(f.close, f)
try("open_when_full", function()
  local s2 = sbx.session {}
  s2:exec("true")
  s2:close()
end)
print("end")
]])
    local bin = H.BIN .. "/sbxlua"
    local cmd = ("unshare -m --propagation private sh -c %s"):format(S.q(
      ("mount -t tmpfs -o size=4m,mode=755 sbx-fault %s/state"
        .. " && SBX_STATE_DIR=%s/state ASAN_OPTIONS=detect_leaks=0 exec %s %s")
      :format(dir, dir, S.q(bin), S.q(script))))
    S.sh("mkdir -p " .. S.q(dir .. "/state"))
    local out, rc = S.sh(cmd, true)
    S.rmtree(dir)
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find("\nend\n", 1, true) or out:find("^end\n"), out)
    assert.is_falsy(out:find("=RAW", 1, true), "an error that is not an sbx error table:\n" .. out)
    assert.is_truthy(out:find("put_small=ok", 1, true), out)
    assert.is_truthy(out:find("get_small=ok", 1, true), out)
    -- 8 MiB cannot fit a 4 MiB disk: a clean error, not a short file
    assert.is_falsy(out:find("put_big=ok", 1, true), out)
    assert.is_truthy(out:find("fill=rc=1", 1, true) and out:find("ENOSPC", 1, true), out)
    assert.is_truthy(out:find("run_after_fill=ok", 1, true), out)
    assert.is_truthy(out:find("close=ok", 1, true), out)
  end)
end)

describe_core("a pinned work_dir after the host side is killed", function()
  it("keeps every byte put_bytes acknowledged", function()
    local dir = S.mktemp_dir("fault-pin")
    local work = dir .. "/work"
    S.sh("mkdir -m 755 " .. S.q(work))
    local script = dir .. "/writer.lua"
    S.write_file(script, ([[
local sbx = require "sbx"
local s = sbx.session { work_dir = %q }
io.stdout:setvbuf("no")
for i = 1, 100000 do
  local data = string.rep(string.char(i %% 251), 1000 + (i * 7919) %% 60000) .. "#" .. i
  s:put_bytes("d" .. (i %% 7) .. "/f" .. i, data)
  print("ack " .. i)
end
]]):format(work))
    local bin = H.BIN .. "/sbxlua"
    local p = io.popen(("ASAN_OPTIONS=detect_leaks=0 sh -c 'echo $$; exec \"$@\"' w %s %s 2>&1")
      :format(S.q(bin), S.q(script)))
    local pid = tonumber(p:read("*l"))
    local acked = 0
    for line in p:lines() do
      local n = tonumber(line:match("^ack (%d+)$"))
      assert.is_truthy(n, "writer said: " .. line)
      acked = n
      if acked >= 200 then
        os.execute("kill -9 " .. pid)
        break
      end
    end
    -- drain what it printed before dying: those were acknowledged too
    for line in p:lines() do
      local n = tonumber(line:match("^ack (%d+)$"))
      if n then acked = n end
    end
    p:close()
    assert.is_true(acked >= 200, "only " .. acked .. " acks")
    local function expect(i)
      return string.rep(string.char(i % 251), 1000 + (i * 7919) % 60000) .. "#" .. i
    end
    -- on the host's disk ...
    for i = 1, acked do
      local got = S.read_file(work .. "/d" .. (i % 7) .. "/f" .. i)
      assert.is_truthy(got == expect(i), "acknowledged file " .. i .. " is missing or differs")
    end
    -- ... and for the next host side opening the same work_dir
    local s = T.sbx.session { work_dir = work }
    local ok, err = pcall(function()
      for i = 1, acked, 17 do
        assert.is_truthy(s:get_bytes("d" .. (i % 7) .. "/f" .. i) == expect(i), "file " .. i)
      end
      local r = s:exec("ls d*/ | grep -c '^f'")
      assert.is_true(tonumber(r.stdout) >= acked, r.stdout)
    end)
    s:close()
    S.rmtree(dir)
    assert(ok, err)
  end)
end)

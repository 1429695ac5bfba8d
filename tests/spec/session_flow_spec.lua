-- session_flow_spec: issue 17's session promises as a user calls them, on
-- device and through sbxd: a pinned work dir is also at its host path
-- inside (row 3), python scripts are dedented (row 4), a session ends at
-- its timeout_s with SIGTERM, a grace, SIGKILL and "session_expired" on
-- every backend (row 6), and read_write_paths of a dir the sandbox user
-- does not own are writable (row 7).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local sbx = T.sbx
local errors = T.errors

local is_root
do
  local p = io.popen("id -u")
  is_root = p:read("*l") == "0"
  p:close()
end
-- A number no other process has on its command line (as `sleep <n>` it
-- never ends by itself).
local counter = 0
local function token()
  counter = counter + 1
  return ("%d%04d%d"):format(math.floor(T.now_ms()) % 1000000, counter, math.random(1000, 9999))
end
local has_bwrap = os.execute("test -x /usr/bin/bwrap") == 0
local served = H.available() and T.has_core() and H.have("curl") and pcall(require, "sbx.remote.http")
local describe_srv = served and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl)") end

-- A policy that lets every backend in, "none" included.
local POLICY_DIR
do
  local p = io.popen("mktemp -d /var/tmp/sbx-flow.XXXXXX")
  POLICY_DIR = p:read("*l")
  p:close()
end
local POLICY = POLICY_DIR .. "/backends.lua"
teardown(function() os.execute("rm -rf '" .. POLICY_DIR .. "'") end)
do
  local f = assert(io.open(POLICY, "w"))
  f:write('return { name = "session-flow", ceilings = { backends = '
    .. '{ "userns", "privileged", "bubblewrap", "none" } } }\n')
  f:close()
end

-- Cleanups of the running test, newest first, after it even when it
-- failed (busted keeps only the last finally of a test).
local deferred = {}
local function defer(fn) deferred[#deferred + 1] = fn end
after_each(function()
  for i = #deferred, 1, -1 do pcall(deferred[i]) end
  deferred = {}
end)

local BACKENDS = { "userns" }
if has_bwrap then BACKENDS[#BACKENDS + 1] = "bubblewrap" end
if is_root then BACKENDS[#BACKENDS + 1] = "privileged" end

local function write(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- A host path's owner, uid:gid.
local function owner(path)
  local p = io.popen("stat -c %u:%g " .. q(path))
  local o = p:read("*l")
  p:close()
  return o
end

-- ---------------------------------------------------------------------
-- Row 4: dedent
-- ---------------------------------------------------------------------

describe("sbx.dedent", function()
  local dedent = require("sbx.dedent").dedent
  -- Python's own textwrap.dedent is the oracle.
  local cases = {
    "\n    import json\n    if True:\n        print(1)\n    ",
    "  a\n\tb\n", "\ta\n\t  b\n \n", "x\n  y", "  a\n  \n    b\n", "", "  only",
    "\t\ta\n\tb\n\t\n", "  a\r\n  b\r\n", "    x\n      y\n    z", "\t \ta\n\t  b\n",
  }
  -- A Python string literal of any bytes.
  local function py(s)
    return "b'" .. s:gsub(".", function(c) return ("\\x%02x"):format(c:byte()) end) .. "'.decode()"
  end
  it("gives what Python's textwrap.dedent gives", function()
    local src = {}
    for i, c in ipairs(cases) do src[i] = py(c) end
    local dir = T.tmpdir()
    write(dir .. "/cases.py", "import sys, textwrap\nfor c in [" .. table.concat(src, ", ")
      .. "]:\n    sys.stdout.write(repr(textwrap.dedent(c)) + '\\n')\n")
    local p = io.popen("/usr/bin/python3 " .. dir .. "/cases.py")
    local want = {}
    for line in p:lines() do want[#want + 1] = line end
    p:close()
    assert.equal(#cases, #want)
    -- Compare as Python reprs: feed our outputs through repr too.
    local ours = {}
    for i, c in ipairs(cases) do ours[i] = py(dedent(c)) end
    write(dir .. "/ours.py", "import sys\nfor c in [" .. table.concat(ours, ", ")
      .. "]:\n    sys.stdout.write(repr(c) + '\\n')\n")
    p = io.popen("/usr/bin/python3 " .. dir .. "/ours.py")
    local got = {}
    for line in p:lines() do got[#got + 1] = line end
    p:close()
    assert.same(want, got)
  end)
end)

-- ---------------------------------------------------------------------
-- On device, per backend
-- ---------------------------------------------------------------------

for _, be in ipairs(BACKENDS) do
  describe("backend " .. be, function()
    local function session(o)
      o = o or {}
      o.backend = be
      o.policy = o.policy or POLICY
      return sbx.session(o)
    end

    teardown(function() T.cleanup() end)

    it("row 3: a pinned work dir is the same dir at its host path and at /tmp/sandbox-work", function()
      local work = T.tmpdir("/tmp")
      local s = session { work_dir = work }
      defer(function() s:close() end)
      -- The reference's pattern: a path built on the host, used inside.
      local r = s:run_code(([[
        import json, pathlib, os
        pathlib.Path("%s/data.json").write_text(json.dumps([1, 2, 3, 4]))
        print(os.stat("%s").st_ino == os.stat("/tmp/sandbox-work").st_ino)
      ]]):format(work, work))
      assert.equal("True\n", r)
      assert.equal("[1, 2, 3, 4]", T.read_file(work .. "/data.json"))
      -- Written through one, seen through the other, in a later run.
      r = s:exec("cat /tmp/sandbox-work/data.json; echo x > /tmp/sandbox-work/b; cat " .. q(work .. "/b"))
      assert.equal(0, r.returncode, T.show(r))
      assert.equal("[1, 2, 3, 4]x\n", r.stdout)
      -- put_bytes at the host path, read inside at it.
      s:put_bytes(work .. "/in.txt", "staged")
      assert.equal("staged", s:exec("cat " .. q(work .. "/in.txt")).stdout)
    end)

    it("row 3 (control): an unpinned session's host work dir is not reachable inside", function()
      local s = session {}
      defer(function() s:close() end)
      local r = s:exec("ls " .. q(s.work_dir))
      assert.are_not.equal(0, r.returncode, T.show(r))
      assert.equal(0, s:exec("ls /tmp/sandbox-work").returncode)
    end)

    it("row 3: a work dir under /home appears at its path, and nothing else of /home", function()
      local top = "/home/sbx-flow-" .. token()
      local other = "/home/sbx-flow-other-" .. token()
      assert.equal(0, os.execute("mkdir -p " .. q(top .. "/proj") .. " " .. q(other)))
      defer(function() os.execute("rm -rf " .. q(top) .. " " .. q(other)) end)
      local s = session { work_dir = top .. "/proj" }
      defer(function() s:close() end)
      local r = s:exec("ls -a /home; echo hi > " .. q(top .. "/proj/f") .. "; cat /tmp/sandbox-work/f")
      assert.equal(0, r.returncode, T.show(r))
      -- Control: the host's /home has the other dir.
      assert.equal(0, os.execute("test -d " .. q(other)))
      assert.equal(".\n..\n" .. top:sub(7) .. "\nhi\n", r.stdout)
    end)

    -- /root is 0700: only a copy of the mount the host made reaches it
    -- (bubblewrap: a copy each run attaches at a path bwrap may walk).
    local root_it = is_root and it or pending
    root_it("row 3: a work dir under /root (0700) works at both paths; nothing else of /root shows", function()
      local p = io.popen("mktemp -d /root/sbx-flow.XXXXXX")
      local work = p:read("*l")
      p:close()
      defer(function() os.execute("rm -rf " .. q(work)) end)
      local s = session { work_dir = work }
      defer(function() s:close() end)
      local r = s:exec(("echo hi > %s/f; cat /tmp/sandbox-work/f; ls -a /root"):format(q(work)))
      assert.equal(0, r.returncode, T.show(r))
      assert.equal("hi\n.\n..\n" .. work:sub(7) .. "\n", r.stdout)
      assert.equal("hi\n", T.read_file(work .. "/f"))
    end)

    -- A pinned dir is never chowned: an idmap makes its owner the
    -- sandbox user, so what the sandbox writes is that owner's on the host.
    for _, who in ipairs { "4242:4242", "0:0" } do
      root_it("a pinned work dir owned by " .. who .. " keeps its owner; what the sandbox writes is "
        .. who .. "'s", function()
        local p = io.popen("mktemp -d /var/tmp/sbx-flow-own.XXXXXX")
        local work = p:read("*l")
        p:close()
        defer(function() os.execute("rm -rf " .. q(work)) end)
        write(work .. "/existing", "theirs\n")
        assert.equal(0, os.execute(("chmod 755 %s && chown -R %s %s"):format(q(work), who, q(work))))
        local s = session { work_dir = work }
        defer(function() s:close() end)
        -- Inside, the dir and its owner's files are the sandbox user's.
        local r = s:exec(("echo more >> existing; echo hi > %s/f; mkdir sub && echo y > sub/z; "
          .. "[ \"$(stat -c %%u . existing)\" = \"$(id -u)\n$(id -u)\" ] && echo mine"):format(q(work)))
        assert.equal(0, r.returncode, T.show(r))
        assert.equal("mine\n", r.stdout)
        -- put_bytes and get_bytes on the host side, the sandbox's view agrees.
        s:put_bytes("in/p.txt", "staged")
        assert.equal("staged+\n", s:exec("echo + >> in/p.txt && cat in/p.txt").stdout)
        assert.equal("hi\n", s:get_bytes("f"))
        assert.equal("theirs\nmore\n", T.read_file(work .. "/existing"))
        for _, f in ipairs { "", "/existing", "/f", "/sub", "/sub/z", "/in", "/in/p.txt" } do
          assert.equal(who, owner(work .. f), work .. f)
        end
        -- The setid guard holds where the sandbox writes as the owner.
        r = s:exec("cp /bin/true t && chmod u+s t")
        assert.matches("Operation not permitted", r.stderr)
        s:close()
        assert.equal(who, owner(work))
      end)
    end

    root_it("a pinned work dir that cannot be idmapped (ramfs) is refused, never chowned", function()
      local p = io.popen("mktemp -d /var/tmp/sbx-flow-ramfs.XXXXXX")
      local work = p:read("*l")
      p:close()
      defer(function() os.execute("umount " .. q(work) .. "; rmdir " .. q(work)) end)
      assert.equal(0, os.execute("mount -t ramfs sbx-flow " .. q(work) .. " && chmod 755 " .. q(work)))
      os.execute("chown 4242:4242 " .. q(work))
      local e = T.expect("InvalidArgument", session, { work_dir = work })
      assert.matches("cannot be idmapped", tostring(e))
      assert.equal("4242:4242", owner(work))
      -- Control: given to the sandbox's host ids, the same dir needs no
      -- idmap and works (privileged's ids are the session's own: the
      -- Lua API cannot fix them in advance).
      if be == "privileged" then return end
      local ids = 231072
      os.execute(("chown %d:%d %s"):format(ids, ids, q(work)))
      local s = session { work_dir = work }
      defer(function() s:close() end)
      assert.equal(0, s:exec("echo hi > f").returncode)
      assert.equal(ids .. ":" .. ids, owner(work .. "/f"))
    end)

    it("row 4: an indented python script runs (the reference's example)", function()
      local s = session {}
      defer(function() s:close() end)
      s:put_bytes("in.json", '{"values": [1, 2, 3]}')
      local out = s:run_code([[
        import json, pathlib
        data = json.loads(pathlib.Path("/tmp/sandbox-work/in.json").read_text())
        if data:
            print(sum(data["values"]))
        ]])
      assert.equal("6\n", out)
      -- Control: indentation that is really wrong still fails as Python says.
      local r = s:exec("  x = 1\n y = 2\n", { script_type = "python" })
      assert.equal(1, r.returncode)
      assert.matches("IndentationError", r.stderr)
      -- A shell script keeps its text as written.
      assert.equal("  a\n", s:exec("cat <<'E'\n  a\nE", {}).stdout)
    end)

    it("row 6: at timeout_s every run gets SIGTERM, then SIGKILL after the grace: session_expired", function()
      local s = session { timeout_s = 2, timeout_grace_s = 1 }
      defer(function() s:close() end)
      local marker = "99" .. token()
      -- One ends at SIGTERM; one ignores it (and records it) until SIGKILL.
      -- timeout_s: a bound should the session's end never come.
      local a = s:run("sleep " .. marker, { timeout_s = 120 })
      local b = s:run("trap 'echo term > /tmp/sandbox-work/got-term' TERM; "
        .. "echo up; while :; do sleep 0.05; done", { timeout_s = 120 })
      assert.equal("up", b:lines()())
      assert.is_true(s:alive())
      -- Nothing but waiting: the session's end comes to the run by itself.
      assert.equal(-15, a:wait())
      assert.equal("session_expired", a.termination_reason)
      assert.is_false(s:alive())
      assert.equal(-9, b:wait())
      assert.equal("session_expired", b.termination_reason)
      assert.equal("term\n", T.read_file(s.work_dir .. "/got-term"))
      -- What the runs left stays readable until close.
      assert.equal("term\n", s:get_bytes("got-term"))
      local e = T.expect("SessionClosed", s.exec, s, "true")
      assert.matches("lifetime", tostring(e))
      assert.equal(0, H.count_procs(marker))
    end)

    it("row 6 (control): a run that ends before timeout_s is its own end", function()
      local s = session { timeout_s = 600 }
      defer(function() s:close() end)
      local r = s:exec("exit 3")
      assert.equal(3, r.returncode)
      assert.equal("", r.termination_reason)
      r = s:exec("sleep 5", { timeout_s = 0.2 })
      assert.equal("timeout", r.termination_reason)
      assert.is_true(s:alive())
    end)
  end)
end

-- ---------------------------------------------------------------------
-- Row 7: read_write_paths of a dir the sandbox user does not own; /tmp binds
-- ---------------------------------------------------------------------

-- A root-made dir (0755) outside /tmp, with a file of its own; removed at the end.
local function root_dir(base)
  local p = io.popen("mktemp -d " .. (base or "/var/tmp") .. "/sbx-flow-rw.XXXXXX")
  local d = p:read("*l")
  p:close()
  os.execute("chmod 755 " .. q(d))
  write(d .. "/existing", "root's\n")
  return d
end


for _, be in ipairs(BACKENDS) do
  -- Only a root host side maps ids (else the sandbox user is the caller).
  local run_it = is_root and it or pending
  describe("row 7 on " .. be, function()
    run_it("a root-owned read_write_path is writable inside; on the host it stays root's, never chowned", function()
      local d = root_dir()
      defer(function() os.execute("rm -rf " .. q(d)) end)
      local s = sbx.session { backend = be, policy = POLICY, read_write_paths = { d } }
      defer(function() s:close() end)
      local r = s:exec(("echo new > %s/made; echo more >> %s/existing; mkdir %s/sub && echo x > %s/sub/y")
        :format(q(d), q(d), q(d), q(d)))
      assert.equal(0, r.returncode, T.show(r))
      assert.equal("new\n", T.read_file(d .. "/made"))
      assert.equal("root's\nmore\n", T.read_file(d .. "/existing"))
      for _, f in ipairs { d, d .. "/made", d .. "/existing", d .. "/sub", d .. "/sub/y" } do
        assert.equal("0:0", owner(f), f)
      end
      -- The idmapped copies live in the sandbox's mount namespaces only.
      assert.is_nil(T.read_file("/proc/self/mountinfo"):find(d, 1, true))
    end)

    run_it("only the dir's owner is mapped: another user's file in it stays out of reach", function()
      local d = root_dir()
      defer(function() os.execute("rm -rf " .. q(d)) end)
      write(d .. "/theirs", "4343's\n")
      os.execute("chown 4343:4343 " .. q(d .. "/theirs") .. "; chmod 644 " .. q(d .. "/theirs"))
      local s = sbx.session { backend = be, policy = POLICY, read_write_paths = { d } }
      defer(function() s:close() end)
      local r = s:exec("echo x >> " .. q(d .. "/theirs"))
      assert.are_not.equal(0, r.returncode, T.show(r))
      assert.matches("Permission denied", r.stderr)
      -- Control: the owner's own file in the same dir is writable.
      assert.equal(0, s:exec("echo x >> " .. q(d .. "/existing")).returncode)
      assert.equal("4343's\n", T.read_file(d .. "/theirs"))
    end)

    run_it("no setuid/setgid bits where the sandbox writes as root; chmod otherwise works", function()
      local d = root_dir()
      defer(function() os.execute("rm -rf " .. q(d)) end)
      local s = sbx.session { backend = be, policy = POLICY, read_write_paths = { d } }
      defer(function() s:close() end)
      local r = s:exec(("cp /bin/true %s/t && chmod 755 %s/t && %s/t"):format(q(d), q(d), q(d)))
      assert.equal(0, r.returncode, T.show(r))
      for _, mode in ipairs { "u+s", "g+s", "4755", "2755" } do
        r = s:exec(("chmod %s %s/t"):format(mode, q(d)))
        assert.are_not.equal(0, r.returncode, mode .. ": " .. T.show(r))
        assert.matches("Operation not permitted", r.stderr)
      end
      local p = io.popen("stat -c %a " .. q(d .. "/t"))
      assert.equal("755", p:read("*l"))
      p:close()
      -- Control: without an idmapped bind a setuid bit on one's own file
      -- is allowed (and meaningless: every mount is nosuid).
      local plain = sbx.session { backend = be, policy = POLICY }
      defer(function() plain:close() end)
      r = plain:exec("cp /bin/true t && chmod u+s t && stat -c %a t")
      assert.equal(0, r.returncode, T.show(r))
      assert.equal("4755\n", r.stdout)
    end)

    run_it("control: the same dir bound read-only is not writable", function()
      local d = root_dir()
      defer(function() os.execute("rm -rf " .. q(d)) end)
      local s = sbx.session { backend = be, policy = POLICY, read_only_paths = { d } }
      defer(function() s:close() end)
      local r = s:exec("echo x > " .. q(d .. "/made"))
      assert.are_not.equal(0, r.returncode, T.show(r))
      assert.is_nil(io.open(d .. "/made"))
    end)
  end)
end

describe("/tmp binds (README: carried into each run's fresh /tmp)", function()
  for _, be in ipairs(BACKENDS) do
    it("on " .. be .. ": a read-only and a read-write bind below /tmp in every run", function()
      local ro, rw = root_dir("/tmp"), root_dir("/tmp")
      defer(function() os.execute("rm -rf " .. q(ro) .. " " .. q(rw)) end)
      -- Writable by anyone, so this is about the carrying on every backend.
      os.execute("chmod 1777 " .. q(rw))
      local s = sbx.session { backend = be, policy = POLICY, read_only_paths = { ro }, read_write_paths = { rw } }
      defer(function() s:close() end)
      for i = 1, 2 do
        local r = s:exec(("cat %s/existing; echo %d >> %s/log; echo s > /tmp/scratch-%d; ls /tmp")
          :format(q(ro), i, q(rw), i))
        assert.equal(0, r.returncode, T.show(r))
        assert.matches("^root's\n", r.stdout)
        -- The run's own /tmp is fresh: the last run's scratch is gone.
        assert.is_nil(r.stdout:find("scratch-" .. (i - 1), 1, true))
        assert.is_truthy(r.stdout:find("scratch-" .. i, 1, true))
        r = s:exec("touch " .. q(ro .. "/no"))
        assert.matches("Read%-only file system", r.stderr)
      end
      assert.equal("1\n2\n", T.read_file(rw .. "/log"))
    end)
  end
end)

describe("backend none", function()
  it("row 6: the session's end reaches its runs too (no zygote)", function()
    local s = sbx.session { backend = "none", policy = POLICY, timeout_s = 2, timeout_grace_s = 1 }
    defer(function() s:close() end)
    local marker = "98" .. token()
    local a = s:run("sleep " .. marker, { timeout_s = 120 })
    assert.equal(-15, a:wait())
    assert.equal("session_expired", a.termination_reason)
    assert.is_false(s:alive())
    T.expect("SessionClosed", s.exec, s, "true")
    assert.equal(0, H.count_procs(marker))
  end)
end)

describe("session options", function()
  it("timeout_grace_s is 0 to 300 seconds", function()
    T.expect("InvalidArgument", sbx.session, { timeout_grace_s = -1 })
    T.expect("InvalidArgument", sbx.session, { timeout_grace_s = 301 })
    T.expect("InvalidArgument", sbx.session, { timeout_grace_s = "10" })
  end)
end)

-- ---------------------------------------------------------------------
-- Through sbxd
-- ---------------------------------------------------------------------

describe_srv("through sbxd", function()
  local srv
  local JSON = "content-type: application/json"

  setup(function()
    srv = assert(H.start {})
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  it("row 3: remotely the server owns the work dir; /tmp/sandbox-work is the path on both sides", function()
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    defer(function() s:close() end)
    assert.is_nil(s.work_dir)
    s:put_bytes("/tmp/sandbox-work/data.json", "[1, 2, 3, 4]")
    assert.equal("[1, 2, 3, 4]", s:run_code([[
      import json
      print(json.dumps(json.loads(open("/tmp/sandbox-work/data.json").read())), end="")
      ]]))
    assert.equal("[1, 2, 3, 4]", s:get_bytes("/tmp/sandbox-work/data.json"))
    local ok, e = pcall(sbx.remote.session, { endpoint = srv.url, token = srv.token.alice, work_dir = "/var/tmp" })
    assert.is_false(ok)
    assert.is_true(errors.is(e, "InvalidArgument"), tostring(e))
  end)

  it("row 4: sbx.remote and curl dedent a python script", function()
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice }
    defer(function() s:close() end)
    assert.equal("3\n", s:run_code([[
      x = 1
      if x:
          print(x + 2)
      ]]))
    local sid = s.id
    local body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"\\n    import sys\\n    print(40 + 2)\\n    ","script_type":"python"}')
    assert.equal(200, status, body)
    assert.is_truthy(body:find('{"type":"stdout","data":"42\\n"}', 1, true), body)
  end)

  it("row 6: sbx.remote: the run ends as session_expired, alive turns false, then SessionClosed", function()
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, timeout_s = 2,
      timeout_grace_s = 1 }
    local marker = "97" .. token()
    local p = s:run("trap '' TERM; echo up; sleep " .. marker .. " & while :; do sleep 0.05; done",
      { timeout_s = 120 })
    assert.equal("up", p:lines()())
    assert.equal(-9, p:wait())
    assert.equal("session_expired", p.termination_reason)
    assert.is_false(s:alive())
    local ok, e = pcall(s.exec, s, "true")
    assert.is_false(ok)
    assert.is_true(errors.is(e, "SessionClosed"), tostring(e))
    assert.equal(0, H.count_procs(marker))
  end)

  it("row 7: sbx.remote: a root-owned read_write_path of the server's is writable", function()
    if not is_root then return pending("needs root") end
    local d = root_dir()
    defer(function() os.execute("rm -rf " .. q(d)) end)
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, read_write_paths = { d } }
    defer(function() s:close() end)
    local r = s:exec("echo remote >> " .. q(d .. "/existing") .. "; chmod u+s " .. q(d .. "/existing"))
    assert.matches("Operation not permitted", r.stderr)
    assert.equal("root's\nremote\n", T.read_file(d .. "/existing"))
    assert.equal("0:0", owner(d .. "/existing"))
  end)

  it("row 6: curl: the exit event says session_expired", function()
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON,
      "-d", '{"timeout_s":2,"timeout_grace_s":1}')
    assert.equal(201, status, body)
    local sid = H.json_field(body, "id")
    body, status = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"sleep 100000","timeout_s":120}')
    assert.equal(200, status, body)
    local exit = body:match("[^\n]+\n?$")
    assert.equal("exit", H.json_field(exit, "type"), body)
    assert.equal("session_expired", H.json_field(exit, "termination_reason"), body)
    assert.equal(-15, H.json_field(exit, "returncode"), body)
  end)
end)

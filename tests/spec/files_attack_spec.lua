-- files_attack_spec.lua: attacks on put_bytes/get_bytes.  The host resolves
-- these paths beneath the session's work dir, a directory the sandbox
-- controls: bad path names, symlinks and hard links planted by the sandbox,
-- special files that would block a naive reader, and a sandbox that swaps
-- links while the host reads and writes.  Write attacks aim at files of a
-- host temp dir this spec creates (never at /etc), so a broken sandbox
-- cannot damage the machine.  The table of cases is in tests/security/README.md.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")

-- The relative path from dir up to / and down to target (both absolute).
local function escape_path(dir, target)
  local depth = select(2, dir:gsub("/[^/]+", ""))
  return ("../"):rep(depth + 3) .. target:sub(2)
end

local function listing(dir)
  local out = H.sh("ls -A " .. H.q(dir))
  return table.concat(H.lines(out), " ")
end

describe("userns files: put_bytes/get_bytes attacks", function()
  local s, wd, T, secret, original, passwd_before, parent_before

  setup(function()
    passwd_before = H.read_file("/etc/passwd")
    s = H.session()
    wd = s.work_dir
    parent_before = listing(wd:match("^(.*)/[^/]+$"))
    -- The host-side targets: what an escape would read or overwrite.
    T = H.mktemp_dir("target")
    secret = "HOST-SECRET-" .. H.token() .. "\n"
    original = "HOST-ORIGINAL-" .. H.token() .. "\n"
    H.write_file(T .. "/passwd", secret)
    H.write_file(T .. "/target", original)
  end)

  teardown(function()
    if s then
      s:close()
    end
    H.rmtree(T)
    H.cleanup()
  end)

  local function assert_host_untouched()
    assert.are.equal(secret, H.read_file(T .. "/passwd"))
    assert.are.equal(original, H.read_file(T .. "/target"))
    assert.are.equal("passwd target", listing(T))
    assert.are.equal(passwd_before, H.read_file("/etc/passwd"))
  end

  it("rejects path names that leave the work dir or abuse the API", function()
    local long_path = (("d"):rep(200) .. "/"):rep(25) .. "f" -- over PATH_MAX
    local bad = {
      "../x", "../../etc/passwd", "/etc/passwd", "/tmp/x", "a\0b", "x\0/../../etc/passwd",
      ("a"):rep(300), long_path, "", "..", "a/../../x", "sub/../../x", "x/..", "./../x",
    }
    for _, path in ipairs(bad) do
      local shown = ("%q"):format(path):sub(1, 60)
      local err = H.raised(s.get_bytes, s, path)
      assert.is_truthy(err, "get_bytes accepted " .. shown)
      assert.are.equal("InvalidArgument", H.errkind(err), "get_bytes " .. shown)
      err = H.raised(s.put_bytes, s, path, "PWNED")
      assert.is_truthy(err, "put_bytes accepted " .. shown)
      assert.are.equal("InvalidArgument", H.errkind(err), "put_bytes " .. shown)
    end
    for _, path in ipairs { {}, true } do
      assert.are.equal("InvalidArgument", H.errkind(H.raised(s.get_bytes, s, path)))
      assert.are.equal("InvalidArgument", H.errkind(H.raised(s.put_bytes, s, path, "x")))
    end
    -- Nothing appeared next to the work dir, nothing in it but what the
    -- sandbox made.
    assert.are.equal(parent_before, listing(wd:match("^(.*)/[^/]+$")))
    assert_host_untouched()
  end)

  it("follows a symlink that stays inside the work dir (control)", function()
    local r = s:exec("mkdir -p ctl && echo inside > ctl/real.txt && ln -sf real.txt ctl/link "
      .. "&& ln -sfn ctl ctl-dir")
    assert.are.equal(0, r.returncode, H.show(r))
    assert.are.equal("inside\n", s:get_bytes("ctl/real.txt"))
    assert.are.equal("inside\n", s:get_bytes("ctl/link"))
    assert.are.equal("inside\n", s:get_bytes("ctl-dir/real.txt"))
  end)

  it("never reads the host through symlinks planted by the sandbox", function()
    local links = {
      leak = "/etc/passwd",
      host = escape_path(wd, "/etc"),
      abs_t = T .. "/passwd",
      rel_t = escape_path(wd, T .. "/passwd"),
      tdir = T,
      rel_tdir = escape_path(wd, T),
      magic = "/proc/self/root" .. T .. "/passwd",
      magic_cwd = "/proc/self/cwd", -- the host process's cwd: the repo root
      zero = "/dev/zero",
    }
    local cmd = {}
    for name, target in pairs(links) do
      cmd[#cmd + 1] = "ln -sfn " .. H.q(target) .. " " .. name
    end
    local r = s:exec(table.concat(cmd, " && "))
    assert.are.equal(0, r.returncode, H.show(r))
    local host_passwd = H.read_file("/etc/passwd")
    for _, path in ipairs {
      "leak", "host/passwd", "abs_t", "rel_t", "tdir/passwd", "rel_tdir/passwd", "magic",
      "magic_cwd/tests/spec/files_attack_spec.lua", "zero",
    } do
      local ok, data = pcall(s.get_bytes, s, path)
      assert.is_false(ok, "get_bytes(" .. path .. ") followed a link out and returned "
        .. tostring(data):sub(1, 40))
      assert.are.equal("InvalidArgument", H.errkind(data), "get_bytes(" .. path .. ")")
      if ok then
        assert.is_nil(tostring(data):find(secret, 1, true))
        assert.are_not.equal(host_passwd, data)
      end
    end
  end)

  it("never writes the host through symlinks planted by the sandbox", function()
    local links = {
      w_abs = T .. "/target",
      w_rel = escape_path(wd, T .. "/target"),
      w_tdir = T,
      w_rel_tdir = escape_path(wd, T),
      w_magic = "/proc/self/root" .. T,
    }
    local cmd = {}
    for name, target in pairs(links) do
      cmd[#cmd + 1] = "ln -sfn " .. H.q(target) .. " " .. name
    end
    local r = s:exec(table.concat(cmd, " && "))
    assert.are.equal(0, r.returncode, H.show(r))
    -- Through a directory link: there is no safe way to succeed.
    for _, path in ipairs { "w_tdir/new", "w_rel_tdir/new", "w_magic/new", "w_tdir/target",
      "w_rel_tdir/sub/new" } do
      local err = H.raised(s.put_bytes, s, path, "PWNED")
      assert.is_truthy(err, "put_bytes(" .. path .. ") wrote through a link")
      assert.are.equal("InvalidArgument", H.errkind(err), "put_bytes(" .. path .. ")")
    end
    -- A link as the last component: replacing the link itself with a
    -- regular file in the work dir is safe, writing its target is not.
    for _, path in ipairs { "w_abs", "w_rel" } do
      local ok = pcall(s.put_bytes, s, path, "PWNED")
      if ok then
        assert.is_nil(H.readlink(wd .. "/" .. path), path .. " is still a link after put")
        assert.are.equal("PWNED", H.read_file(wd .. "/" .. path))
      end
    end
    assert_host_untouched()
  end)

  it("is not fooled by hard links", function()
    local r = s:exec("ln /etc/passwd hl 2>&1; echo rc=$?; ln /usr/bin/id hl2 2>&1; echo rc2=$?")
    assert.is_truthy(r.stdout:match("rc=[1-9]"), "hard link to /etc/passwd created\n" .. H.show(r))
    assert.is_truthy(r.stdout:match("rc2=[1-9]"), H.show(r))
    assert.is_truthy(H.raised(s.get_bytes, s, "hl"))
    -- put replaces the name (temp file + rename): a hard link elsewhere
    -- keeps the old content, so put never writes through a hard link.
    r = s:exec("echo old > hl-src && ln hl-src hl-dst")
    assert.are.equal(0, r.returncode, H.show(r))
    s:put_bytes("hl-dst", "new")
    assert.are.equal("new", s:get_bytes("hl-dst"))
    assert.are.equal("old\n", s:get_bytes("hl-src"))
  end)

  it("refuses FIFOs, sockets and directories without blocking", function()
    -- In a child sbxlua under a hard timeout: a reader that blocks on the
    -- FIFO would otherwise hang the whole test run.
    local out, rc = H.run_child([[
local ffi = require "ffi"
pcall(ffi.cdef, "typedef struct { long tv_sec; long tv_nsec; } sbx_sec_timespec;")
pcall(ffi.cdef, "int clock_gettime(int clk, sbx_sec_timespec *ts);")
local function now()
  local ts = ffi.new("sbx_sec_timespec")
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end
local sbx = require "sbx"
local s = sbx.session{ backend = "userns" }
local r = s:exec("mkfifo f && ln -s f flink && mkdir d && "
  .. "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"sock\")' && echo made")
print("MADE", r.stdout)
local function try(name, f, ...)
  local t0 = now()
  local ok, err = pcall(f, s, ...)
  print("RESULT " .. name .. " " .. (ok and "ok" or type(err) == "table" and tostring(err.kind) or "raw-error"))
  print("RESULT " .. name .. "_ms " .. math.floor(now() - t0))
end
try("get_fifo", s.get_bytes, "f")
try("get_fifo_link", s.get_bytes, "flink")
try("get_dir", s.get_bytes, "d")
try("get_sock", s.get_bytes, "sock")
try("put_fifo", s.put_bytes, "f", "x")
try("put_dir", s.put_bytes, "d", "x")
s:close()
print("CHILD-DONE")
]], 240)
    assert.are_not.equal(137, rc, "a put/get blocked on a special file (killed after 240 s):\n" .. out)
    assert.is_truthy(out:find("MADE%s+made"), out)
    assert.is_truthy(out:find("CHILD-DONE", 1, true), out)
    local res = H.results(out)
    for _, name in ipairs { "get_fifo", "get_fifo_link", "get_dir", "get_sock", "put_dir" } do
      assert.is_truthy(res[name], name .. " not tried\n" .. out)
      assert.are_not.equal("ok", res[name], name .. " succeeded\n" .. out)
      assert.are.equal("InvalidArgument", res[name], name .. "\n" .. out)
    end
    -- Not blocking is completion, not milliseconds: a put/get that blocked
    -- on the FIFO (no writer, no reader) would never return, and the child
    -- is killed above; each one's time is in the output as a figure.
    for _, name in ipairs { "get_fifo", "get_fifo_link", "get_dir", "get_sock", "put_fifo", "put_dir" } do
      assert.is_number(tonumber(res[name .. "_ms"]), name .. " did not return\n" .. out)
    end
  end)

  it("never leaks or writes outside while the sandbox swaps links during 200 get/put rounds", function()
    s:put_bytes("realdir/passwd", "SAFE\n")
    local targets_dir = { "realdir", T, escape_path(wd, T) }
    local targets_file = { "realdir/passwd", T .. "/passwd", escape_path(wd, T .. "/passwd"), T .. "/target" }
    -- swr (only ever read) also swaps to the host's real /etc; what is
    -- written through (sw, swf) only ever aims at the host temp dir.
    local targets_read = { "realdir", "/etc", escape_path(wd, "/etc") }
    local code = string.format([[
import os, itertools
dirs = %s
files = %s
reads = %s
open("plain.tmp", "w").write("SAFE\n")
for i in itertools.count():
    os.symlink(dirs[i %% len(dirs)], "sw.tmp"); os.replace("sw.tmp", "sw")
    os.symlink(reads[i %% len(reads)], "swr.tmp"); os.replace("swr.tmp", "swr")
    if i %% 5 == 4:
        open("plain.tmp", "w").write("SAFE\n"); os.replace("plain.tmp", "swf")
    else:
        os.symlink(files[i %% len(files)], "swf.tmp"); os.replace("swf.tmp", "swf")
]], "[" .. table.concat((function()
      local t = {}
      for i, v in ipairs(targets_dir) do
        t[i] = ("%q"):format(v)
      end
      return t
    end)(), ", ") .. "]", "[" .. table.concat((function()
      local t = {}
      for i, v in ipairs(targets_file) do
        t[i] = ("%q"):format(v)
      end
      return t
    end)(), ", ") .. "]", "[" .. table.concat((function()
      local t = {}
      for i, v in ipairs(targets_read) do
        t[i] = ("%q"):format(v)
      end
      return t
    end)(), ", ") .. "]")
    local host_passwd = H.read_file("/etc/passwd")
    s:put_bytes("swapper.py", code)
    local p = s:run("exec python3 swapper.py", { timeout_s = 120, stderr = true })
    assert.is_truthy(H.wait_for(60, function()
      return H.readlink(wd .. "/sw") ~= nil
    end), "the swapper did not start")
    local got, refused, put_ok = 0, 0, 0
    for i = 1, 200 do
      for _, path in ipairs { "sw/passwd", "swf", "swr/passwd" } do
        local ok, data = pcall(s.get_bytes, s, path)
        if ok then
          got = got + 1
          assert.is_nil(data:find("HOST-", 1, true), "round " .. i .. ": get_bytes(" .. path
            .. ") read the host: " .. data)
          assert.are_not.equal(host_passwd, data, "round " .. i .. ": get_bytes(" .. path
            .. ") read the host's /etc/passwd")
        else
          refused = refused + 1
        end
      end
      for _, path in ipairs { "sw/passwd", "sw/new-" .. i, "swf", "sw/target" } do
        if pcall(s.put_bytes, s, path, "PWNED-" .. i .. "\n") then
          put_ok = put_ok + 1
        end
      end
    end
    p:kill()
    p:wait()
    print(string.format("\n  race: %d gets served (inside), %d refused, %d puts landed inside",
      got, refused, put_ok))
    assert.is_true(H.exists(wd .. "/sw"), "the swapper never ran")
    assert_host_untouched()
  end)
end)

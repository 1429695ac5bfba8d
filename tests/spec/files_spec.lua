-- files_spec.lua: s:put_bytes / s:get_bytes on a real session: round trips
-- (text, every byte value, 4 MiB), what the sandbox sees of them and what
-- it writes, the host side (files land in the work dir, owned by the
-- sandbox's host uid), path rules (traversal, absolute, NUL, empty, too
-- long: InvalidArgument) and the size cap.  tests/spec/files_attack_spec.lua
-- has the escape attempts (symlink races, FIFOs, devices).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx

if not T.has_core() then
  describe("put_bytes/get_bytes", function()
    pending("needs sbx.core: run the specs with build/bin/sbxlua")
  end)
  return
end

local function all_bytes()
  local t = {}
  for i = 0, 255 do t[#t + 1] = string.char(i) end
  return table.concat(t)
end

-- n bytes of a deterministic, non-repeating-looking pattern.
local function pattern(n)
  local parts, x = {}, 12345
  for i = 1, math.ceil(n / 4096) do
    local chunk = {}
    for j = 1, 4096 do
      x = (x * 1103515245 + 12345) % 2147483648
      chunk[j] = string.char(x % 256)
    end
    parts[i] = table.concat(chunk)
  end
  return table.concat(parts):sub(1, n)
end

describe("put_bytes / get_bytes", function()
  local s

  setup(function()
    s = sbx.session {}
  end)

  teardown(function()
    if s then s:close() end
    T.cleanup()
  end)

  it("round-trip text", function()
    assert.is_nil(s:put_bytes("data.json", "[1,2,3]"))
    assert.are.equal("[1,2,3]", s:get_bytes("data.json"))
  end)

  it("round-trip every byte value, NUL included", function()
    local data = all_bytes() .. "\0\0" .. all_bytes()
    s:put_bytes("bin/all.bin", data)
    assert.are.equal(data, s:get_bytes("bin/all.bin"))
  end)

  it("round-trip 4 MiB", function()
    local data = pattern(4 * 1024 * 1024)
    s:put_bytes("big.bin", data)
    local back = s:get_bytes("big.bin")
    assert.are.equal(#data, #back)
    assert.is_true(data == back)
  end)

  it("round-trip an empty file", function()
    s:put_bytes("empty", "")
    assert.are.equal("", s:get_bytes("empty"))
  end)

  it("create missing parent directories, and overwrite", function()
    s:put_bytes("a/b/c/d.txt", "one")
    s:put_bytes("a/b/c/d.txt", "two")
    assert.are.equal("two", s:get_bytes("a/b/c/d.txt"))
  end)

  it("are what the sandbox sees in its work dir, and the other way round", function()
    s:put_bytes("from-host.txt", "hello sandbox")
    local r = s:exec("cat from-host.txt; printf 'from\\0inside' > from-sandbox.bin")
    assert.are.equal("hello sandbox", r.stdout, T.show(r))
    assert.are.equal("from\0inside", s:get_bytes("from-sandbox.bin"))
  end)

  it("write into the host work dir, owned by the sandbox's host uid", function()
    s:put_bytes("owned.txt", "x")
    assert.are.equal("x", T.read_file(s.work_dir .. "/owned.txt"))
    local p = io.popen("stat -c %u '" .. s.work_dir .. "/owned.txt'")
    local uid = tonumber(p:read("*l"))
    p:close()
    local me = io.popen("id -u")
    local my_uid = tonumber(me:read("*l"))
    me:close()
    if my_uid == 0 then
      assert.are.equal(231072, uid, "root's sessions give files to the unprivileged host uid")
    else
      assert.are.equal(my_uid, uid)
    end
    -- The sandbox user can change what put_bytes wrote.
    assert.are.equal(0, s:exec("echo more >> owned.txt").returncode)
  end)

  it("accept absolute paths inside the work dir, as the sandbox or the host names it", function()
    s:put_bytes("/tmp/sandbox-work/abs1.txt", "1")
    assert.are.equal("1", s:get_bytes("abs1.txt"))
    s:put_bytes(s.work_dir .. "/abs2.txt", "2")
    assert.are.equal("2", s:get_bytes("/tmp/sandbox-work/abs2.txt"))
    assert.are.equal("2", s:get_bytes(s.work_dir .. "/abs2.txt"))
  end)

  it("refuse paths outside the work dir", function()
    for _, bad in ipairs { "../escape", "a/../../escape", "..", "a/..", "/etc/passwd",
      "/tmp/sandbox-work", "/tmp/sandbox-work/../x", "/tmp/other", "" } do
      local e = T.expect("InvalidArgument", s.put_bytes, s, bad, "x")
      assert.are.equal("path", e.option, bad)
      T.expect("InvalidArgument", s.get_bytes, s, bad)
    end
    assert.is_nil(T.read_file(s.work_dir .. "/../escape"))
  end)

  it("refuse NUL bytes, over-long names and wrong types", function()
    T.expect("InvalidArgument", s.put_bytes, s, "a\0b", "x")
    T.expect("InvalidArgument", s.get_bytes, s, "a\0b")
    T.expect("InvalidArgument", s.put_bytes, s, ("n"):rep(300), "x")
    T.expect("InvalidArgument", s.put_bytes, s, ("d/"):rep(3000) .. "f", "x")
    T.expect("InvalidArgument", s.put_bytes, s, 42, "x")
    T.expect("InvalidArgument", s.put_bytes, s, "f", 42)
    T.expect("InvalidArgument", s.put_bytes, s, "f", nil)
    T.expect("InvalidArgument", s.get_bytes, s, nil)
  end)

  it("refuse a missing file, a directory, and a symlink leading out", function()
    T.expect("InvalidArgument", s.get_bytes, s, "does-not-exist")
    s:exec("mkdir -p adir; ln -sf /etc/passwd link-out")
    T.expect("InvalidArgument", s.get_bytes, s, "adir")
    local ok, e = pcall(s.get_bytes, s, "link-out")
    assert.is_false(ok, "a symlink out of the work dir must not be followed")
    assert.is_true(sbx.is_error(e), tostring(e))
  end)
end)

describe("max_file_bytes", function()
  it("caps what put_bytes writes and get_bytes reads", function()
    local s = sbx.session { max_file_bytes = 1024 }
    finally(function() s:close() end)
    s:put_bytes("ok", ("x"):rep(1024))
    local e = T.expect("InvalidArgument", s.put_bytes, s, "big", ("x"):rep(1025))
    assert.are.equal("data", e.option)
    assert.is_nil(T.read_file(s.work_dir .. "/big"))
    s:exec("head -c 2000 /dev/zero > made-inside")
    T.expect("InvalidArgument", s.get_bytes, s, "made-inside")
  end)
end)

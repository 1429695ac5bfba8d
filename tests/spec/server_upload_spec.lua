-- server_upload_spec: chunked, resumable uploads to sbxd.
--
-- h2o 2.2 holds a whole request body before sbxd sees it, so a large file
-- goes up as consecutive PUT .../files/{path}?offset=N, each at most
-- --max-body.  These specs drive that route with curl (409 with the real
-- size, 400 for bad offsets, 413 past max_file_bytes, path rules, resume)
-- and through the Lua client's put_bytes (chunking, a 256 MiB file landing
-- sha-exact while sbxd's memory stays flat).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local sbx = T.sbx
local errors = T.errors

local runnable = H.available() and T.has_core() and H.have("curl") and H.have("sha256sum")
  and pcall(require, "sbx.remote.http")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core, curl, sha256sum)") end

local MiB = 1024 * 1024
local JSON = "content-type: application/json"

local function sha_file(path)
  return (H.sh("sha256sum " .. H.q(path) .. " | cut -c1-64"):gsub("%s", ""))
end

local function sha_in(s, path)
  return (s:exec("sha256sum " .. path .. " | cut -c1-64").stdout:gsub("%s", ""))
end

local function read_all(path)
  local f = assert(io.open(path, "rb"))
  local d = f:read("*a")
  f:close()
  return d
end

-- Answered PUT requests sbxd logged for a file path (one line per
-- request, its query included).
local function puts_logged(srv, sid, path)
  local n = 0
  local pat = 'method=PUT path="/v1/sessions/' .. sid .. '/files/' .. path
  for line in srv:log():gmatch("[^\n]+") do
    local i, j = line:find(pat, 1, true)
    if i and line:sub(j + 1):match('^["?]') and line:match("status=200") then n = n + 1 end
  end
  return n
end

describe_srv("sbxd chunked uploads (PUT ?offset=N)", function()
  local srv, sid

  setup(function()
    srv = assert(H.start { args = { "--max-body", tostring(MiB) } })
    local b = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    sid = H.json_field(b, "id")
    assert(sid, b)
  end)
  teardown(function()
    if srv then srv:cleanup() end
  end)

  local function put(path, file, query, in_sid)
    return srv:curl("/v1/sessions/" .. (in_sid or sid) .. "/files/" .. path .. (query or ""), "-H",
      srv:auth(), "-X", "PUT", "--data-binary", "@" .. file)
  end

  -- n bytes of random data in a file of the server's dir.
  local function blob(name, n)
    local p = srv.dir .. "/" .. name
    H.sh(("head -c %d /dev/urandom > %s"):format(n, H.q(p)))
    return p
  end

  it("announces max_body_bytes and max_file_bytes on the session", function()
    local b, status = srv:curl("/v1/sessions/" .. sid, "-H", srv:auth())
    assert.equal(200, status, b)
    assert.equal(MiB, H.json_field(b, "max_body_bytes"))
    assert.equal(256 * MiB, H.json_field(b, "max_file_bytes"))
  end)

  it("appends chunks at the file's size; HEAD gives the size", function()
    local a, c = blob("a", 1000), blob("c", 777)
    local b, status = put("cat.bin", a)
    assert.equal(200, status, b)
    assert.equal(1000, H.json_field(b, "size"))
    b, status = put("cat.bin", c, "?offset=1000")
    assert.equal(200, status, b)
    assert.equal(1777, H.json_field(b, "size"))
    assert.equal(1000, H.json_field(b, "offset"))
    local head = H.sh(("curl -s -I --http2-prior-knowledge -H %s %s/v1/sessions/%s/files/cat.bin"):format(
      H.q(srv:auth()), srv.url, sid))
    assert.matches("HTTP/2 200", head)
    assert.matches("content%-length: 1777", head)
    local whole = srv.dir .. "/whole"
    H.sh(("cat %s %s > %s"):format(a, c, whole))
    local got = H.sh(("curl -s --http2-prior-knowledge -H %s %s/v1/sessions/%s/files/cat.bin | sha256sum | cut -c1-64")
      :format(H.q(srv:auth()), srv.url, sid)):gsub("%s", "")
    assert.equal(sha_file(whole), got)
    -- offset=0 (or none) still replaces the file whole
    b, status = put("cat.bin", c, "?offset=0")
    assert.equal(200, status, b)
    head = H.sh(("curl -s -I --http2-prior-knowledge -H %s %s/v1/sessions/%s/files/cat.bin"):format(
      H.q(srv:auth()), srv.url, sid))
    assert.matches("content%-length: 777\r?\n", head)
  end)

  it("a chunk at the wrong offset (gap, overlap, repeat) is 409 with the current size", function()
    local a = blob("a2", 500)
    assert.equal(200, select(2, put("w.bin", a)))
    for _, off in ipairs { 501, 499, 1, 100000 } do
      local b, status = put("w.bin", a, "?offset=" .. off)
      assert.equal(409, status, b)
      assert.equal("Conflict", H.json_field(b, "kind"))
      assert.equal(500, H.json_field(b, "size"))
      assert.equal(off, H.json_field(b, "offset"))
      assert.equal("w.bin", H.json_field(b, "path"))
    end
    -- the right one goes in; sending it again (a duplicate) is refused
    assert.equal(200, select(2, put("w.bin", a, "?offset=500")))
    local b, status = put("w.bin", a, "?offset=500")
    assert.equal(409, status, b)
    assert.equal(1000, H.json_field(b, "size"))
    -- msgpack answers carry the same fields
    local msgpack = require "sbx.remote.msgpack"
    local raw = H.sh(("curl -s --http2-prior-knowledge -H %s -H 'accept: application/msgpack' -X PUT " ..
      "--data-binary @%s '%s/v1/sessions/%s/files/w.bin?offset=7'"):format(H.q(srv:auth()), a, srv.url, sid))
    local t = msgpack.decode(raw)
    assert.equal("Conflict", t.kind)
    assert.equal(1000, t.size)
    assert.equal(7, t.offset)
  end)

  it("an offset on a missing file is 409 with size 0", function()
    local a = blob("a3", 10)
    local b, status = put("nothere.bin", a, "?offset=10")
    assert.equal(409, status, b)
    assert.equal("Conflict", H.json_field(b, "kind"))
    assert.equal(0, H.json_field(b, "size"))
    b, status = srv:curl("/v1/sessions/" .. sid .. "/files/nothere.bin", "-H", srv:auth())
    assert.equal(404, status, b) -- and nothing was created
  end)

  it("bad offset strings and unknown query parameters are 400 naming them", function()
    local a = blob("a4", 10)
    assert.equal(200, select(2, put("q.bin", a)))
    local cases = {
      { "?offset=-1", "offset" }, { "?offset=abc", "offset" }, { "?offset=", "offset" },
      { "?offset=1e3", "offset" }, { "?offset=0x10", "offset" }, { "?offset=%2B10", "offset" },
      { "?offset=10%00", "offset" }, { "?offset=10&offset=10", "offset" },
      { "?offset=99999999999999999999", "offset" }, { "?offset=10&x=1", "x" }, { "?size=10", "size" },
    }
    for _, c in ipairs(cases) do
      local b, status = put("q.bin", a, c[1])
      assert.equal(400, status, c[1] .. ": " .. b)
      assert.equal("InvalidArgument", H.json_field(b, "kind"), c[1])
      assert.equal(c[2], H.json_field(b, "option"), c[1] .. ": " .. b)
    end
    -- nothing was appended by any of them
    local head = H.sh(("curl -s -I --http2-prior-knowledge -H %s %s/v1/sessions/%s/files/q.bin"):format(
      H.q(srv:auth()), srv.url, sid))
    assert.matches("content%-length: 10\r?\n", head)
  end)

  it("offset + body over max_file_bytes is 413; up to it is fine", function()
    local b = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"max_file_bytes":1000}')
    local small = H.json_field(b, "id")
    local a, c = blob("a5", 990), blob("c5", 11)
    local function sput(file, q)
      return srv:curl("/v1/sessions/" .. small .. "/files/m.bin" .. q, "-H", srv:auth(), "-X", "PUT",
        "--data-binary", "@" .. file)
    end
    assert.equal(200, select(2, sput(a, "")))
    local body, status = sput(c, "?offset=990")
    assert.equal(413, status, body)
    assert.is_truthy(body:find("max_file_bytes", 1, true), body)
    -- an offset past the cap is 413 before anything is opened
    body, status = sput(c, "?offset=5000")
    assert.equal(413, status, body)
    local ten = blob("t5", 10)
    body, status = sput(ten, "?offset=990")
    assert.equal(200, status, body)
    assert.equal(1000, H.json_field(body, "size"))
    srv:curl("/v1/sessions/" .. small, "-H", srv:auth(), "-X", "DELETE")
  end)

  it("the offset route keeps the path rules: no '..', no escape through symlinks, no hard links", function()
    local a = blob("a6", 10)
    local b, status = put("a%2F..%2F..%2Fetc%2Fpasswd", a, "?offset=10")
    assert.equal(400, status, b)
    assert.equal("path", H.json_field(b, "option"))
    b, status = put("%2Fetc%2Fpasswd", a, "?offset=10")
    assert.equal(400, status, b)
    -- a symlink the sandbox made to a host file: refused, the target untouched
    local victim = srv.dir .. "/victim"
    H.sh("printf 0123456789 > " .. victim .. " && chmod 644 " .. victim)
    local before = sha_file(victim)
    srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", ('{"cmd":"ln -sf %s out.lnk; ln -sf /etc/passwd pw.lnk; mkdir -p adir"}'):format(victim))
    b, status = put("out.lnk", a, "?offset=10")
    assert.equal(400, status, b)
    assert.matches("escapes the work dir", b)
    b, status = put("pw.lnk", a, "?offset=0")
    assert.equal(200, status, b) -- offset 0 replaces the link itself, as put_bytes does
    assert.equal(before, sha_file(victim))
    -- a directory is not a file to append to
    b, status = put("adir", a, "?offset=0")
    assert.equal(400, status, b)
    b, status = put("adir", a, "?offset=4096")
    assert.is_true(status == 400, b)
    -- a file with a second name: appending in place would change both
    assert.equal(200, select(2, put("one.bin", a)))
    srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"ln one.bin two.bin"}')
    b, status = put("one.bin", a, "?offset=10")
    assert.equal(409, status, b)
    assert.matches("hard links", b)
  end)

  it("a dropped upload resumes at the size the server has (HEAD), sha-exact", function()
    local whole = blob("resume", 3 * MiB + 12345)
    H.sh(("split -b %d -d %s %s/part."):format(MiB, whole, srv.dir))
    local parts = { "00", "01", "02", "03" }
    local url = ("%s/v1/sessions/%s/files/r.bin"):format(srv.url, sid)
    -- two chunks go up, then the client "loses" the connection
    assert.equal(200, select(2, put("r.bin", srv.dir .. "/part.00")))
    assert.equal(200, select(2, put("r.bin", srv.dir .. "/part.01", "?offset=" .. MiB)))
    -- a fresh client asks the size ...
    local head = H.sh(("curl -s -I --http2-prior-knowledge -H %s %s"):format(H.q(srv:auth()), url))
    local size = tonumber(head:match("content%-length: (%d+)"))
    assert.equal(2 * MiB, size)
    -- ... a stale retry of chunk 1 would be refused with the same answer ...
    local b, status = put("r.bin", srv.dir .. "/part.01", "?offset=" .. MiB)
    assert.equal(409, status, b)
    assert.equal(size, H.json_field(b, "size"))
    -- ... and it continues from there
    for i = 3, #parts do
      b, status = put("r.bin", srv.dir .. "/part." .. parts[i], "?offset=" .. size)
      assert.equal(200, status, b)
      size = H.json_field(b, "size")
    end
    assert.equal(3 * MiB + 12345, size)
    local got = H.sh(("curl -s --http2-prior-knowledge -H %s %s | sha256sum | cut -c1-64"):format(
      H.q(srv:auth()), url)):gsub("%s", "")
    assert.equal(sha_file(whole), got)
  end)

  it("the README's example runs as written: split, then PUT the chunks", function()
    local readme = read_all(T.ROOT .. "/README.md")
    local block = readme:match("```sh\n(split %-b [^\n]*big%.bin chunk%..-)```")
    assert.is_truthy(block, "README: the split/PUT example is gone")
    local dir = srv.dir .. "/readme"
    H.sh("mkdir -p " .. dir)
    local f = dir .. "/big.bin"
    H.sh(("head -c %d /dev/urandom > %s"):format(2 * MiB + 5, f))
    local script = ("set -e\ncd %s\nT=%s\nID=%s\n%s"):format(H.q(dir), H.q(srv.token.alice), sid,
      (block:gsub("http://127%.0%.0%.1:7433", srv.url)))
    local out, code = H.sh("bash -c " .. H.q(script) .. " 2>&1")
    assert.equal(0, code, out)
    assert.matches("content%-length: " .. (2 * MiB + 5), out)
    local got = H.sh(("curl -s --http2-prior-knowledge -H %s %s/v1/sessions/%s/files/data/big.bin"
      .. " | sha256sum | cut -c1-64"):format(H.q(srv:auth()), srv.url, sid)):gsub("%s", "")
    assert.equal(sha_file(f), got)
    assert.equal(3, puts_logged(srv, sid, "data/big.bin"))
  end)

  describe("the Lua client", function()
    local s
    setup(function()
      -- asks for 4 MiB chunks; the server's 1 MiB max_body_bytes wins
      s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns",
        upload_chunk_bytes = 4 * MiB }
    end)
    teardown(function() if s then pcall(s.close, s) end end)

    it("sends 5 MiB through a 1 MiB --max-body as chunks, byte-exact", function()
      local data = read_all(blob("five", 5 * MiB + 3))
      s:put_bytes("five.bin", data)
      assert.equal(data, s:get_bytes("five.bin"))
      assert.equal(6, puts_logged(srv, s.id, "five.bin")) -- 5 whole MiB and 3 bytes
    end)

    it("sends small data as one PUT, as before", function()
      s:put_bytes("small.txt", "hello")
      assert.equal("hello", s:get_bytes("small.txt"))
      assert.equal(1, puts_logged(srv, s.id, "small.txt"))
      s:put_bytes("small.txt", "hi") -- and it still replaces the file
      assert.equal("hi", s:get_bytes("small.txt"))
    end)

    it("refuses data over max_file_bytes before sending a chunk", function()
      local t = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns",
        max_file_bytes = 2 * MiB }
      local ok, e = pcall(t.put_bytes, t, "toobig.bin", ("x"):rep(3 * MiB))
      assert.is_false(ok)
      assert.is_true(errors.is(e, "InvalidArgument"), tostring(e))
      assert.matches("max_file_bytes", e.message)
      assert.equal(0, puts_logged(srv, t.id, "toobig.bin"))
      t:close()
    end)

    it("a 409 mid-upload is an error naming the path and offsets, not retried", function()
      local data = ("y"):rep(3 * MiB)
      local conn = s._tr.conn
      local n = 0
      -- Another writer appends to the file after the first chunk landed.
      conn.request = function(self, method, path, ...)
        local st, body, ct = getmetatable(self).__index.request(self, method, path, ...)
        if method == "PUT" and path:match("/files/raced%.bin") then
          n = n + 1
          if n == 1 then
            local x = srv.dir .. "/x"
            H.sh("printf zz > " .. x)
            local b, status = put("raced.bin", x, "?offset=" .. MiB, s.id)
            assert.equal(200, status, b)
          end
        end
        return st, body, ct
      end
      local ok, e = pcall(s.put_bytes, s, "raced.bin", data)
      conn.request = nil
      assert.is_false(ok)
      assert.is_true(errors.is(e, "SandboxExecutionError"), tostring(e))
      assert.equal("raced.bin", e.path)
      assert.equal(MiB, e.offset)
      assert.equal(MiB + 2, e.size)
      assert.matches("raced%.bin", e.message)
      assert.matches("offset " .. MiB, e.message)
      assert.equal(2, n) -- the refused chunk was the last request: no retry
    end)
  end)
end)

describe_srv("sbxd 256 MiB upload through the Lua client", function()
  local srv, s

  setup(function()
    -- the default --max-body (8 MiB): 4 MiB chunks; a small ASan quarantine
    -- (harness.lua) so the RSS bound measures sbxd
    srv = assert(H.start { small_quarantine = true })
    s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns" }
  end)
  teardown(function()
    if s then pcall(s.close, s) end
    if srv then srv:cleanup() end
  end)

  it("lands sha256-exact while sbxd's RSS grows by less than 64 MiB", function()
    local src = srv.dir .. "/big"
    H.sh(("head -c %d /dev/urandom > %s"):format(256 * MiB, src))
    local want = sha_file(src)
    local data = read_all(src)
    assert.equal(256 * MiB, #data)
    s:put_bytes("warm.bin", ("w"):rep(5 * MiB)) -- one chunked upload first: steady state
    local rss0 = srv:rss_kb()
    -- Sample sbxd's RSS every 50 ms while the upload runs.
    local samples, stop = srv.dir .. "/rss", srv.dir .. "/rss.stop"
    os.execute(("(while [ ! -e %s ]; do grep VmRSS /proc/%d/status; sleep 0.05; done > %s) >/dev/null 2>&1 &")
      :format(stop, srv.pid, samples))
    local t0 = T.now_ms()
    local ok, e = pcall(s.put_bytes, s, "big.bin", data)
    local ms = T.now_ms() - t0
    H.sh("touch " .. stop .. "; sleep 0.2")
    assert.is_true(ok, tostring(e))
    local peak, n = srv:rss_kb(), 0
    for kb in read_all(samples):gmatch("VmRSS:%s+(%d+)") do
      n = n + 1
      peak = math.max(peak, tonumber(kb))
    end
    assert.is_true(n >= 3, "only " .. n .. " RSS samples")
    local grew = peak - rss0
    print(("\n  256 MiB upload: %.0f ms, %.1f MiB/s, sbxd RSS +%d KiB at peak (%d samples)")
      :format(ms, 256 / (ms / 1000), grew, n))
    assert.is_true(grew < 64 * 1024, "sbxd grew by " .. grew .. " KiB during a 256 MiB upload")
    assert.equal(64, puts_logged(srv, s.id, "big.bin"))
    -- Let the 256 MiB string go before the check reads the file back.
    data = nil -- luacheck: ignore 311
    assert.equal(want, sha_in(s, "big.bin"))
  end)

  -- A PUT's body is C memory the Lua collector does not see (fileio.c's
  -- body object): a refused one must go at once, not at some later GC,
  -- whether the files route refused it (a bad offset: 400) or the request
  -- never got that far (an unknown session: 404).
  it("refused PUT bodies do not pile up in sbxd (24 x 4 MiB refused: RSS grows < 40 MiB)", function()
    local src = srv.dir .. "/chunk"
    H.sh(("head -c %d /dev/urandom > %s"):format(4 * MiB, src))
    local function put_refused(n)
      local urls, want = {}, {}
      for i = 1, n do
        local sid = i % 2 == 1 and s.id or "0123456789abcdef0123456789abcdef"
        want[i] = i % 2 == 1 and "400" or "404"
        urls[i] = "-o /dev/null " .. H.q(("%s/v1/sessions/%s/files/r%d.bin?offset=bad"):format(srv.url, sid, i))
      end
      local out = H.sh(("curl -s -w '%%{http_code} ' -X PUT -H %s --data-binary @%s %s")
        :format(H.q(srv:auth()), H.q(src), table.concat(urls, " ")))
      local codes = {}
      for c in out:gmatch("%d+") do codes[#codes + 1] = c end
      assert.same(want, codes)
    end
    put_refused(2) -- steady state: the heap holds one body's worth
    local rss0 = srv:rss_kb()
    put_refused(24)
    local grew = srv:rss_kb() - rss0
    assert.is_true(grew < 40 * 1024, "sbxd grew by " .. grew .. " KiB over 24 refused 4 MiB bodies")
  end)
end)

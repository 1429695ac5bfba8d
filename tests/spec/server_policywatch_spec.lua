-- server_policywatch_spec: sbxd --watch-policy reloads the policy when its
-- file is replaced the way Kubernetes updates a mounted ConfigMap (a new
-- timestamped dir, then "..data" renamed over the old symlink), keeps the
-- previous policy when the new one does not load, and refuses the flag
-- without a policy file.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local runnable = H.available() and T.has_core() and H.have("curl")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core and curl)") end

local function write(path, s)
  local f = assert(io.open(path, "w"))
  f:write(s)
  f:close()
end

local DEFAULT = T.read_file(T.ROOT .. "/policies/default.lua")
local STRICTER = DEFAULT:gsub("\n  on_run = function%(req, ctx%)\n", [[

  on_run = function(req, ctx)
    for _, a in ipairs(req.argv) do
      if a:find("forbidden-word", 1, true) then return deny("no forbidden-word here") end
    end
]], 1)
assert(STRICTER ~= DEFAULT, "the default policy has no on_run hook to extend")

describe_srv("sbxd --watch-policy", function()
  local srv, dir
  local JSON = "content-type: application/json"
  local version = 0

  -- What kubelet does on a ConfigMap update (atomic_writer.go's order).
  local function publish(text)
    version = version + 1
    local v = ("..2026_11_25_%d"):format(version)
    assert(os.execute(("mkdir %s/%s"):format(dir, v)) == 0)
    write(("%s/%s/policy.lua"):format(dir, v), text)
    assert(os.execute(("ln -s %s %s/..data_tmp && mv -T %s/..data_tmp %s/..data"):format(v, dir, dir, dir)) == 0)
    -- kubelet then removes the previous version: a reload must not need it.
    if version > 1 then os.execute(("rm -rf %s/..2026_11_25_%d"):format(dir, version - 1)) end
  end

  local function reloads(ok)
    return select(2, srv:log():gsub("event=policy_reload ok=" .. tostring(ok), ""))
  end

  -- A new session's run of "echo forbidden-word": its status.
  local function try_word()
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", "{}")
    assert.equal(201, status, body)
    local sid = H.json_field(body, "id")
    local out, st = srv:curl("/v1/sessions/" .. sid .. "/runs", "-H", srv:auth(), "-H", JSON,
      "-d", '{"cmd":"echo forbidden-word"}')
    srv:curl("/v1/sessions/" .. sid, "-X", "DELETE", "-H", srv:auth())
    return st, out
  end

  setup(function()
    dir = T.tmpdir()
    publish(DEFAULT)
    assert(os.execute(("ln -s ..data/policy.lua %s/policy.lua"):format(dir)) == 0)
    srv = assert(H.start { args = { "--policy", dir .. "/policy.lua", "--watch-policy" } })
  end)

  teardown(function()
    if srv then srv:cleanup() end
    T.cleanup()
  end)

  it("runs the first policy until the ConfigMap changes", function()
    local st, out = try_word()
    assert.equal(200, st, out)
    assert.truthy(out:find("forbidden-word", 1, true), out)
    assert.equal(0, reloads(true))
  end)

  it("reloads when kubelet swaps ..data", function()
    publish(STRICTER)
    assert(T.wait_for(function() return reloads(true) == 1 end, 30), srv:log())
    local st, out = try_word()
    assert.equal(403, st, out)
    assert.truthy(out:find("no forbidden-word here", 1, true), out)
  end)

  it("keeps the previous policy when the new one does not load", function()
    publish("return {{{ not lua")
    assert(T.wait_for(function() return reloads(false) == 1 end, 30), srv:log())
    assert.equal(403, (try_word()))
  end)

  it("refuses --watch-policy without a policy file", function()
    local tokens = dir .. "/tokens"
    write(tokens, "tok-watch-0123456789abcdef alice\n")
    local out = H.sh(("ASAN_OPTIONS=detect_leaks=0 %s --listen 127.0.0.1:0 --token-file %s "
      .. "--watch-policy 2>&1; echo rc=$?")
      :format(H.SBXD, tokens))
    assert.matches("rc=2\n$", out)
    assert.matches("%-%-watch%-policy needs %-%-policy", out)
  end)
end)

-- trial_spec.lua: what a newcomer from the reference product (and E2B) met
-- porting its examples to sbx (issue 17, the "trial"), each as that user
-- calls it: the reference's install idiom `uv pip install`, its option
-- names, the REPL's --session-opts and :net, the proxy's reason for a run's
-- narrower allow-list, the dev policy's warning.
local H = require "spec.sec_helpers"
local S = dofile(H.ROOT .. "/tests/server/harness.lua")
local sbx = require "sbx"

local function sh(cmd)
  local h = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"rc=$?\""))
  local out = h:read("*a")
  h:close()
  return out, tonumber(out:match("rc=(%d+)%s*$"))
end

local function has(out, text)
  assert.is_truthy(out:find(text, 1, true), "missing " .. ("%q"):format(text) .. " in:\n" .. out)
end

describe("porting the reference", function()
  local dir
  setup(function() dir = H.mktemp_dir("trial") end)
  teardown(function() if dir then H.rmtree(dir) end end)

  it("`uv pip install` (the reference's idiom) installs into the session venv without a uv on the host",
      function()
    if H.sh("command -v uv || echo none"):match("none") == nil then
      pending("the host has uv: the session venv uses it, no stand-in")
      return
    end
    -- A real wheel, made the way the test package index makes them.
    local out, rc = sh(("/usr/bin/python3 %s sites %s trialpkg 0.4.2 trialnpm 1.0.0")
      :format(H.q(H.ROOT .. "/tests/net/fakeindex.py"), H.q(dir .. "/sites")))
    assert.are.equal(0, rc, out)
    local wheel = H.sh("find " .. H.q(dir .. "/sites") .. " -name 'trialpkg-*.whl'"):match("[^\n]+")
    assert.is_truthy(wheel, out)
    local s = sbx.session { backend = "userns" }
    finally(function() s:close() end)
    -- Control: before the install the module is not there.
    local before = s:exec("python -c 'import trialpkg'")
    assert.are_not.equal(0, before.returncode)
    has(before.stderr, "No module named 'trialpkg'")
    local name = wheel:match("[^/]+$")
    s:put_bytes(name, assert(H.read_file(wheel)))
    local r = s:exec("uv pip install --no-index " .. name)
    assert.are.equal(0, r.returncode, H.show(r))
    -- A later run sees it, and it landed in the venv, not the system.
    assert.are.equal("0.4.2\n", s:run_code("import trialpkg; print(trialpkg.__version__)"))
    has(s:exec("uv pip show trialpkg", { check = true }).stdout, "/tmp/sandbox-work/.venv/")
    -- Anything but `uv pip` says what the stand-in is, and fails.
    local v = s:exec("uv venv elsewhere")
    assert.are.equal(127, v.returncode)
    has(v.stderr, 'sbx: uv is not installed here; this stand-in runs only "uv pip ..."')
  end)

  it("the reference's option names are answered with sbx's", function()
    local e = H.raised(sbx.session, { backend = "userns", host_work_dir = dir })
    assert.are.equal("InvalidArgument", e.kind)
    has(e.message, "the reference's host_work_dir is work_dir here")
    e = H.raised(sbx.session, { timeout = 60 })
    has(e.message, "the reference's timeout is timeout_s here")
    local s = sbx.session { backend = "userns" }
    finally(function() s:close() end)
    e = H.raised(s.run, s, "true", { timeout = 3 })
    assert.are.equal("InvalidArgument", e.kind)
    has(e.message, "unknown run option; the reference's timeout is timeout_s here")
    -- An unknown name with no reference spelling gets no hint.
    e = H.raised(s.run, s, "true", { timeoot = 3 })
    assert.is_nil(e.message:find("reference", 1, true), e.message)
  end)

  it("a run's narrower allow-list: the proxy's refusal names the run's list, not the session's", function()
    local s = sbx.session { backend = "userns", network_mode = "allowlist",
      network_allowlist = { "a.test", "b.test" } }
    finally(function() s:close() end)
    -- The proxy refuses before any DNS lookup: no network needed.
    local narrowed = s:exec("curl -sS http://b.test/", { network_allowlist = { "a.test" } })
    has(narrowed.stdout, "b.test:80 is not on this run's allow-list")
    local wide = s:exec("curl -sS http://c.test/")
    has(wide.stdout, "c.test:80 is not on the allow-list")
  end)

  it("the dev policy's warning for backend none names the session, never `nil`", function()
    local script = dir .. "/none.lua"
    H.write_file(script, [[
local sbx = require "sbx"
local s = sbx.session { backend = "none", policy = "policies/dev.lua" }
s:close()
local n = sbx.session { backend = "none", policy = "policies/dev.lua", name = "mine" }
n:close()
]])
    local out, rc = sh(H.q(H.SBXLUA) .. " " .. H.q(script))
    assert.are.equal(0, rc, out)
    has(out, "WARNING: session (unnamed) runs without isolation")
    has(out, "WARNING: session mine runs without isolation")
    assert.is_nil(out:find("session nil", 1, true), out)
  end)
end)

describe("the REPL as a newcomer types it", function()
  it("Tab after s: offers the session's API, not sbxd's plumbing (admit_run, warm_fd, ...)", function()
    local complete = require "sbx.complete"
    local s = sbx.session { backend = "userns" }
    finally(function() s:close() end)
    local got = {}
    for _, c in ipairs(complete.candidates("s:", "s:", { s = s })) do got[c] = true end
    for _, m in ipairs { "run", "exec", "run_code", "put_bytes", "get_bytes", "handle", "close", "alive" } do
      assert.is_true(got["s:" .. m], m)
    end
    for _, m in ipairs { "admit_run", "warm_fd", "start_run", "open_file", "limits", "is_closed" } do
      assert.are.equal("function", type(s[m]), m) -- control: the method is there
      assert.is_nil(got["s:" .. m], m)
    end
  end)

  local dir
  setup(function() dir = H.mktemp_dir("trialrepl") end)
  teardown(function() if dir then H.rmtree(dir) end end)

  local function repl(input, opts)
    H.write_file(dir .. "/in", input)
    return sh(("%s -i %s < %s"):format(H.q(H.SBXLUA),
      opts and ("--session-opts " .. H.q(opts)) or "", H.q(dir .. "/in")))
  end

  it("JSON --session-opts stops the REPL at once with the Lua form to use, once", function()
    local out, rc = repl("!echo ran-anyway\n!echo ran-anyway\n", '{"network_mode": "allowlist"}')
    assert.are.equal(1, rc, out)
    has(out, "a Lua table, not JSON")
    local _, n = out:gsub("InvalidArgument", "")
    assert.are.equal(1, n, out)
    assert.is_nil(out:find("ran-anyway", 1, true), out)
    assert.is_nil(out:find("stack traceback", 1, true), out)
    -- Control: the Lua form opens the session (and may use sbx's presets).
    out, rc = repl("!echo ran\n", "{ network_mode = 'allowlist', network_allowlist = sbx.PYPI_HOSTS }")
    assert.are.equal(0, rc, out)
    has(out, "ran\n")
  end)

  it(":net allowlist above a blocked session's ceiling says how to open a wider one", function()
    local out = repl(":net allowlist pypi.org\n")
    has(out, ":net allowlist pypi.org refused; the ceiling is set when the session opens: "
      .. "start sbxlua with --session-opts")
    -- Control: started that way, the same command is taken.
    out = repl(":net allowlist pypi.org\n", "{ network_mode = 'allowlist', network_allowlist = sbx.PYPI_HOSTS }")
    has(out, "network_mode allowlist (pypi.org) for the next runs")
  end)
end)

describe("an E2B user's connect(sandbox_id)", function()
  local srv
  setup(function() if S.available() then srv = assert(S.start {}) end end)
  teardown(function() if srv then srv:cleanup() end end)

  it("sbx.remote.lookup{id = ...} finds the token's open session by id; nil, why once closed", function()
    if not srv then pending("needs sbxd next to sbxlua") return end
    local conn = { endpoint = srv.url, token = srv.token.alice }
    local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns" }
    s:put_bytes("note.txt", "from the first process")
    local o, why = sbx.remote.lookup { endpoint = conn.endpoint, token = conn.token, id = s.id }
    assert.is_truthy(o, why)
    assert.are.equal(s.id, o.id)
    assert.is_true(o.is_owner)
    assert.are.equal("from the first process", o:get_bytes("note.txt"))
    -- Control: an id that is no session of the token's finds nothing.
    local none, why2 = sbx.remote.lookup { endpoint = conn.endpoint, token = conn.token, id = ("0"):rep(32) }
    assert.is_nil(none)
    assert.is_truthy(why2)
    local e = H.raised(sbx.remote.lookup, { endpoint = conn.endpoint, token = conn.token, id = "../admin" })
    assert.are.equal("InvalidArgument", e.kind)
    s:close()
    local gone, why3 = sbx.remote.lookup { endpoint = conn.endpoint, token = conn.token, id = s.id }
    assert.is_nil(gone)
    assert.is_truthy(tostring(why3):find("closed", 1, true), why3)
  end)
end)

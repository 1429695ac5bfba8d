-- friction_spec: what a newcomer hit (issue 17 row 9), as they hit it:
-- sbxlua -e / - with the sbx global, REPL completion without private
-- fields, :net refused at the command, one line per proxy refusal after
-- the run, policies with nested typos and partial sections, open mode as
-- non-root, backend none's HOME.  (Remote option lists and sbxd's
-- session_close ts=: remote_metadata_spec.)
local H = require "spec.sec_helpers"
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local complete = require "sbx.complete"

local function sh(cmd)
  local p = assert(io.popen(cmd .. " 2>&1; echo rc=$?"))
  local out = p:read("*a")
  p:close()
  return out
end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local has_core = T.has_core()

describe("sbxlua one-liners", function()
  it("-e, - and a script on stdin have the sbx global, as the REPL", function()
    local out = sh(("%s -e 'print(type(sbx), type(sbx.session))'"):format(H.q(H.SBXLUA)))
    assert.matches("table\tfunction\nrc=0", out, 1, true)
    out = sh(("echo 'print(type(sbx.attach))' | %s -"):format(H.q(H.SBXLUA)))
    assert.matches("function\nrc=0", out, 1, true)
    out = sh(("echo 'print(type(sbx.attach))' | %s"):format(H.q(H.SBXLUA)))
    assert.matches("function\nrc=0", out, 1, true)
    -- Control: a global that does not exist is still nil (no catch-all).
    out = sh(("%s -e 'print(type(nosuchglobal))'"):format(H.q(H.SBXLUA)))
    assert.matches("nil\nrc=0", out, 1, true)
  end)
end)

describe("REPL completion", function()
  local Cls = {}
  Cls.__index = Cls
  Cls.__tostring = function() return "obj" end
  function Cls.run() end
  function Cls._open_file() end
  local env = { s = setmetatable({ _st = {}, name = "x" }, Cls) }

  it("hides private fields (_x, __x) unless the word starts with _", function()
    assert.same({ "s.name", "s.run" }, complete.candidates("s.", "s.", env))
    assert.same({ "s:run" }, complete.candidates("s:", "s:", env))
    local priv = complete.candidates("s._", "s._", env)
    assert.same({ "s.__index", "s.__tostring", "s._open_file", "s._st" }, priv)
  end)
end)

describe("policy sections", function()
  local dir
  before_each(function() dir = T.tmpdir() end)

  it("a nested typo (ceilings.memroy_mb) fails --check-policy; the right name passes", function()
    local bad = write(dir .. "/bad.lua", "return { ceilings = { memroy_mb = 512 } }\n")
    local out = sh(("%s --check-policy %s"):format(H.q(H.SBXLUA), H.q(bad)))
    assert.matches("unknown field ceilings.memroy_mb", out, 1, true)
    assert.matches("rc=1", out, 1, true)
    local good = write(dir .. "/good.lua", "return { ceilings = { memory_mb = 512 } }\n")
    out = sh(("%s --check-policy %s"):format(H.q(H.SBXLUA), H.q(good)))
    assert.matches("rc=0", out, 1, true)
    for _, f in ipairs { "defaults.bakend", "filesystem.etcc", "network.allow_list", "limits.hook_msec" } do
      local sec, key = f:match("^(%a+)%.(.+)$")
      local p = write(dir .. "/t.lua", ("return { %s = { %s = 1 } }\n"):format(sec, key))
      T.expect("PolicyDenied", require("sbx.policy").load, p)
    end
  end)

  it("a policy setting only ceilings keeps the default filesystem (/etc/ssl ...)", function()
    local p = write(dir .. "/only.lua", "return { ceilings = { memory_mb = 2048 } }\n")
    local eng = require("sbx.policy").load(p)
    local etc = table.concat(eng.current.filesystem.etc, " ")
    assert.matches("%f[%w]ssl%f[^%w]", etc)
    assert.matches("ca%-certificates", etc)
    local forb = table.concat(eng.current.filesystem.forbidden, " ")
    assert.matches("/home", forb, 1, true)
    -- schema.lua's built-in lists are a copy of default.lua's: they must not drift apart.
    local def = require("sbx.policy").load(T.ROOT .. "/policies/default.lua").current.filesystem
    for _, k in ipairs { "system_ro", "etc", "forbidden" } do
      assert.same(def[k], eng.current.filesystem[k], k)
    end
    -- Control: an explicit empty list is taken as given.
    local p2 = write(dir .. "/none.lua", "return { filesystem = { etc = {} } }\n")
    assert.same({}, require("sbx.policy").load(p2).current.filesystem.etc)
    if has_core then
      local s = T.sbx.session { policy = p }
      finally(function() s:close() end)
      assert.is_true(s:exec("test -d /etc/ssl/certs").ok)
    end
  end)
end)

local describe_core = has_core and describe or function(name) pending(name .. " (needs sbx.core)") end

describe_core("sessions a newcomer opened", function()
  it("backend none sets a HOME that exists and is writable: the work dir", function()
    local dir = T.tmpdir()
    local p = write(dir .. "/none.lua", 'return { ceilings = { backends = { "none", "userns" } } }\n')
    local s = T.sbx.session { backend = "none", policy = p }
    finally(function() s:close() end)
    local r = s:exec('printf %s "$HOME"; test -d "$HOME" && test -w "$HOME"')
    assert.is_true(r.ok, r.stderr)
    assert.equal(s.work_dir, r.stdout)
    -- A caller's HOME still wins.
    assert.equal("/tmp", s:exec('printf %s "$HOME"', { env = { HOME = "/tmp" } }).stdout)
  end)

  it("open mode as non-root is BackendUnavailable naming what is missing", function()
    local st = io.popen("stat -c %a /dev/net/tun 2>/dev/null"):read("*l")
    if st ~= "600" or sh("id -u"):match("^(%d+)") ~= "0" then
      pending("needs root and a 0600 /dev/net/tun (then nobody cannot open it)")
      return
    end
    local dir = T.tmpdir()
    sh("chmod 777 " .. H.q(dir)) -- nobody makes its state dir here
    local script = write(dir .. "/open.lua", [[
local sbx = require "sbx"
local ok, e = pcall(sbx.session, { network_mode = "open", state_dir = os.getenv("SD") })
print(ok and "opened" or ("kind=" .. tostring(e.kind)))
]])
    sh("chmod 644 " .. H.q(script))
    local out = sh(("runuser -u nobody -- env HOME=/tmp SD=%s %s %s"):format(H.q(dir .. "/state"),
      H.q(H.SBXLUA), H.q(script)))
    assert.matches("kind=BackendUnavailable", out, 1, true)
  end)
end)

describe_core("the REPL on-device", function()
  local function repl(input, opts)
    local dir = T.tmpdir()
    local f = write(dir .. "/in", input)
    local cmd = ("%s -i %s < %s 2>%s/err"):format(H.q(H.SBXLUA),
      opts and ("--session-opts " .. H.q(opts)) or "", H.q(f), H.q(dir))
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    return out, io.open(dir .. "/err"):read("*a")
  end

  it(":net allowlist without a list is refused at the command; the next run is not denied", function()
    local out, err = repl(":net allowlist\n!echo still-blocked-run\n:net blocked\n")
    assert.matches(":net allowlist refused", err, 1, true)
    assert.matches("still%-blocked%-run", out)
    assert.matches("network_mode blocked for the next runs", out, 1, true)
    assert.is_nil(out:find("network_mode allowlist", 1, true))
  end)

  it("a proxy refusal is one line after the run, not lines in the prompt", function()
    local out, err = repl('!curl -s -o /dev/null -w "code=%{http_code}\\n" https://example.com/\n!echo next\n',
      '{ network_mode = "allowlist", network_allowlist = { "pypi.org" } }')
    assert.matches("code=000", out, 1, true) -- the probe did try
    local n = select(2, out:gsub("%[proxy: 1 connection refused; last: example%.com:443", ""))
    assert.equal(1, n, out)
    assert.is_nil(err:find("refused example.com", 1, true), err)
    assert.is_nil(err:find("not on the allow-list", 1, true), err)
  end)
end)

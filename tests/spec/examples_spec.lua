-- examples_spec.lua: every example under examples/ runs as written.
--
-- Each examples/*.lua is run by the sbxlua running this spec (so the
-- sanitizer build tests its own binary) and must exit 0 and print what its
-- comments promise.  The remote examples (examples/remote/) run against a
-- real sbxd started by tests/server/harness.lua, with the endpoint and token
-- passed the way their comments document (SBX_ENDPOINT/SBX_TOKEN_FILE, SBX_URL/T).
-- install_and_compute.lua and npm_install.lua need a package index: they run
-- in headline_spec.lua, against a local one, on-device and through sbxd.

local H = require "spec.sec_helpers"

local function sh(cmd)
  local h = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"rc=$?\""))
  local out = h:read("*a")
  h:close()
  return out, tonumber(out:match("rc=(%d+)%s*$"))
end

-- env: a prefix of VAR=value words (already quoted).
local function run(script, env)
  return sh(("%s%s %s"):format(env and env .. " " or "", H.q(H.SBXLUA), H.q(script)))
end

local function has(out, text)
  assert.is_truthy(out:find(text, 1, true), "missing " .. ("%q"):format(text) .. " in:\n" .. out)
end

describe("examples", function()
  it("hello.lua streams lines, reads data, reports a failure as data", function()
    local out, rc = run("examples/hello.lua")
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find("streamed:\tline 1\nstreamed:\tline 2\nstreamed:\tline 3\n", 1, true), out)
    assert.is_truthy(out:find("sum:\t6\n", 1, true), out)
    assert.is_truthy(out:find("a failure is data:\t3\toops\n", 1, true), out)
    assert.is_truthy(out:find("round trip:\tdone\n", 1, true), out)
  end)

  it("agent_loop.lua stages inputs, its driver iterates on failures as data, answer.json comes back", function()
    local out, rc = run("examples/agent_loop.lua")
    assert.are.equal(0, rc, out)
    has(out, "attempt 1: exit 1\n  error: ValueError: invalid literal for int() with base 10: 'units'\n")
    has(out, "attempt 2: exit 1\n  error: NameError: name 'statistics' is not defined\n")
    has(out, "attempt 3: exit 0\nstdout: regions: 2\n")
    has(out, 'answer.json: {"mean_units": 4, "totals": {"north": 17.5, "south": 6.0}}\n')
  end)

  it("custom_policy.lua: the policy logs the open, allows a run, denies curl", function()
    local out, rc = run("examples/custom_policy.lua")
    assert.are.equal(0, rc, out)
    has(out, "log:\t[policy no_curl] session open demo backend=userns network_mode=blocked origin=local\n")
    has(out, "allowed:\thello from userns\n")
    has(out, "denied:\tfalse\tPolicyDenied\ton_run\tpolicy no_curl: on_run denied: no curl here\n")
    has(out, "denied argv:\tfalse\tPolicyDenied\n")
    has(out, "still usable:\tyes\n")
  end)

  it("custom_policy's policy file passes sbxlua --check-policy", function()
    local out, rc = sh(H.q(H.SBXLUA) .. " --check-policy examples/policies/no_curl.lua")
    assert.are.equal(0, rc, out)
    has(out, "no_curl")
  end)

  it("networking.lua: blocked -> allowlist (PyPI through the proxy, the rest refused) -> blocked -> own list",
      function()
    -- In a fake internet (tests/net) whose DNS puts pypi.org and
    -- example.com on a test server; the host side runs in its namespace.
    local F = require "net.fakenet"
    local ok, why = F.available()
    if not ok then pending(why) return end
    local net = F.up(F.unique("sbxex"))
    local out, rc
    local done, err = pcall(function()
      net:zone { ["pypi.org"] = "198.51.100.2", ["example.com"] = "198.51.100.2",
        ["files.pythonhosted.org"] = "198.51.100.2" }
      out, rc = net:sbxlua("examples/networking.lua", { SBX_EXAMPLE_CA = net:ca_file() })
    end)
    local queries = net:dns_queries()
    net:down()
    assert(done, err)
    assert.are.equal(0, rc, out)
    has(out, "blocked: dns blocked: gaierror")
    has(out, "blocked: tcp blocked: OSError Network is unreachable\n")
    -- The fake PyPI answers 404 for /simple/: reached, through the proxy.
    has(out, "allowlist: pypi.org -> HTTP 404\n")
    has(out, "allowlist: example.com -> refused by the proxy (403)\n")
    has(out, "allowlist: tcp blocked: OSError Network is unreachable\n")
    has(out, "blocked again: tcp blocked: OSError Network is unreachable\n")
    has(out, "open:\tPolicyDenied\n")
    has(out, "own list: files.pythonhosted.org -> HTTP 404\n")
    has(out, "own list: pypi.org -> refused by the proxy (403)\n")
    has(out, "own list: example.com:\tPolicyDenied\n")
    for _, q in ipairs(queries) do assert.are_not.equal("example.com", q) end
  end)

  describe("remote, against a real sbxd", function()
    local S = dofile(H.ROOT .. "/tests/server/harness.lua")
    local srv

    setup(function()
      if not (S.available() and S.have("curl")) then return end
      srv = assert(S.start {})
    end)
    teardown(function() if srv then srv:cleanup() end end)

    it("remote/agent_loop.lua runs its plan, repairs the failing step, closes", function()
      if not srv then pending("needs sbxd next to sbxlua and curl") return end
      local out, rc = run("examples/remote/agent_loop.lua",
        ("SBX_ENDPOINT=%s SBX_TOKEN_FILE=%s"):format(H.q(srv.url), H.q(srv.dir .. "/tokens")))
      assert.are.equal(0, rc, out)
      assert.is_truthy(out:find("^session%s+%x+%s+on%s+" .. srv.url:gsub("%p", "%%%0")), out)
      has(out, "[1] $ wc -l data.csv\n    3 data.csv\n")
      has(out, "[2] $ awk -F, 'NR>1 {s += $1 * $2} END {print s}' data.csv\n    14\n")
      has(out, "[3] $ cat missing.txt\n")
      has(out, "exit 1 (): repairing\n[3] $ cat missing.txt\n    created by the agent\n")
      has(out, "    tick 1\n    tick 2\n    tick 3\n")
      has(out, "helper sees: data.csv missing.txt \n")
      has(out, "done\n")
    end)

    it("remote/curl.sh walks every route", function()
      if not srv then pending("needs sbxd next to sbxlua and curl") return end
      local out, rc = sh(("SBX_URL=%s T=%s bash examples/remote/curl.sh")
        :format(H.q(srv.url), H.q(srv.token.alice)))
      assert.are.equal(0, rc, out)
      has(out, "ok")
      has(out, '"backend":"userns"')
      has(out, '{"type":"stdout","data":"1\\n"}\n{"type":"stdout","data":"2\\n"}\n{"type":"stdout","data":"3\\n"}\n')
      has(out, '{"type":"exit","returncode":0')
      has(out, '"path":"greeting.txt"')
      has(out, '"size":5')
      has(out, "\nhello\n")
      has(out, "sbxd_sessions_open 1\n")
      has(out, '"closed":true')
    end)
  end)
end)

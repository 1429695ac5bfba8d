-- venv_spec.lua: the session venv (issue 17, row 1; lua/sbx/venv.lua).
-- Install is just a run: `python` and `pip` are the session venv's, `pip
-- install` lands there (not in the host's Python) and a later run imports
-- it; venv = false turns it off (and PEP 668 refuses pip again: the
-- control); python_venv binds an operator's venv read-only and bridges it.
-- On-device and through sbxd.  The package is a wheel built at setup
-- (tests/net/fakeindex.py) and installed from the work dir: no network.
local H = require "spec.sec_helpers"
local S = dofile(H.ROOT .. "/tests/server/harness.lua")
local F = require "net.fakenet"
local sbx = require "sbx"

local VENV = "/tmp/sandbox-work/.venv"
local PKG, VER = "sbxlocal", "0.4.2"
local WHEEL = ("%s-%s-py3-none-any.whl"):format(PKG, VER)

local function ok_exec(s, cmd, opts)
  local r = s:exec(cmd, opts)
  assert.are.equal(0, r.returncode, H.show and H.show(r) or r.stderr)
  return r
end

describe("the session venv", function()
  -- opvenv: an operator's venv outside /tmp (binds in /tmp are refused)
  -- holding the package, for python_venv.
  local dir, wheel, opvenv

  setup(function()
    dir = H.mktemp_dir("venv")
    local out, rc = H.sh(("/usr/bin/python3 %s wheel %s %s %s"):format(H.q(F.FAKEINDEX), H.q(dir), PKG, VER), true)
    assert(rc == 0, out)
    wheel = assert(H.read_file(dir .. "/" .. WHEEL))
    opvenv = H.sh("mktemp -d /var/tmp/sbx-opvenv.XXXXXX"):match("(%S+)")
    out, rc = H.sh(("chmod 755 %s && /usr/bin/python3 -m venv --without-pip %s && /usr/bin/python3 -m zipfile -e %s "
      .. "%s/lib/python3.*/site-packages/ 2>&1"):format(H.q(opvenv), H.q(opvenv), H.q(dir .. "/" .. WHEEL),
      H.q(opvenv)), true)
    assert(rc == 0, out)
  end)
  teardown(function()
    H.rmtree(dir)
    if opvenv and opvenv:match("^/var/tmp/sbx%-opvenv%.") then H.sh("rm -rf " .. H.q(opvenv)) end
  end)

  it("python, python3 and pip are the venv's, in shell runs and script_type python", function()
    local s = H.session()
    finally(function() s:close() end)
    local r = ok_exec(s, "for c in python python3 pip; do command -v $c; done; echo $VIRTUAL_ENV")
    assert.are.equal(("%s/bin/python\n%s/bin/python3\n%s/bin/pip\n%s\n"):format(VENV, VENV, VENV, VENV), r.stdout)
    assert.are.equal(VENV .. "\n", s:run_code("import sys; print(sys.prefix)"))
    -- --system-site-packages: the system's modules are there too.
    assert.are.equal("ok\n", s:run_code("import json, ssl; print('ok')"))
  end)

  it("pip install lands in the venv and a later run imports it; the host's Python never sees it", function()
    local s = H.session()
    finally(function() s:close() end)
    s:put_bytes(WHEEL, wheel)
    ok_exec(s, "pip install --no-index ./" .. WHEEL)
    local where = s:run_code(("import %s; print(%s.__version__, %s.__file__)"):format(PKG, PKG, PKG))
    assert.truthy(where:match("^" .. VER:gsub("%.", "%%.") .. " " .. VENV:gsub("%p", "%%%0")
      .. "/lib/python3[%d.]+/site%-packages/" .. PKG .. "/__init__%.py\n$"), where)
    -- A later run of another kind (an argv table, no shell) sees it too.
    local r = ok_exec(s, { "python", "-c", "import " .. PKG .. "; print(" .. PKG .. ".mean([1, 2, 3, 4]))" })
    assert.are.equal("2.5\n", r.stdout)
    local out, rc = H.sh("/usr/bin/python3 -c 'import " .. PKG .. "'", true)
    assert.are_not.equal(0, rc, out)
    -- Each session has its own venv.
    local s2 = H.session()
    finally(function() s2:close() end)
    r = s2:exec("python -c 'import " .. PKG .. "'")
    assert.are_not.equal(0, r.returncode)
    assert.truthy(r.stderr:find("ModuleNotFoundError", 1, true), r.stderr)
  end)

  it("venv = false: no python, and pip is refused by PEP 668 (the control)", function()
    local s = H.session { venv = false }
    finally(function() s:close() end)
    local r = s:exec("command -v python; echo ${VIRTUAL_ENV:-none} $PATH")
    assert.are.equal("none /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n", r.stdout)
    assert.are.equal("/usr\n", s:run_code("import sys; print(sys.prefix)"))
    s:put_bytes(WHEEL, wheel)
    r = s:exec("pip install --no-index ./" .. WHEEL)
    assert.are_not.equal(0, r.returncode)
    assert.truthy((r.stdout .. r.stderr):find("externally-managed-environment", 1, true), r.stderr)
    assert.are.equal(1, s:exec("test -e .venv").returncode)
  end)

  it("is made on first need: runs that do not name Python leave the work dir alone", function()
    local s = H.session()
    finally(function() s:close() end)
    assert.are.equal("\n", ok_exec(s, "echo; ls -A").stdout)
    ok_exec(s, "python -V")
    assert.are.equal(".venv\n", ok_exec(s, "ls -A").stdout)
    -- A script file named in the command counts as a need too.
    local s2 = H.session()
    finally(function() s2:close() end)
    s2:put_bytes("tool.py", "import sys\nprint(sys.prefix)\n")
    assert.are.equal(VENV .. "\n", ok_exec(s2, "/usr/bin/env python3 tool.py").stdout)
  end)

  it("two first runs at once both get the whole venv", function()
    local s = H.session()
    finally(function() s:close() end)
    local code = "import sys, subprocess; print(sys.prefix, subprocess.run(['pip', '--version'], " ..
      "capture_output=True).returncode)"
    local a = s:run({ "python", "-c", code })
    local b = s:run({ "python", "-c", code })
    local ao, ae = a:communicate()
    local bo, be = b:communicate()
    assert.are.equal(VENV .. " 0\n", ao, ae)
    assert.are.equal(VENV .. " 0\n", bo, be)
  end)

  it("names a need by the words of the command (sbx.venv.needs)", function()
    local venv = require "sbx.venv"
    for _, yes in ipairs { "python -V", "python3 -c pass", "/usr/bin/python3.11 x", "pip install x",
      "pip3 list", "uv pip install x", "cd d && uvx ruff", "./tool.py", "sh -c 'exec python'" } do
      assert.is_true(venv.needs { "/bin/sh", "-c", yes }, yes)
    end
    for _, no in ipairs { "echo hi", "ls pipe", "cat pythonic.txt", "sh run.sh", "grep -r pyx .", "my_python_tool" } do
      assert.is_false(venv.needs { "/bin/sh", "-c", no }, no)
    end
    assert.is_true(venv.needs { "python3", "-c", "print(1)" })
  end)

  it("lives in a pinned work dir on the host", function()
    local work = dir .. "/work"
    assert(H.sh("mkdir -p " .. H.q(work)) ~= nil)
    local s = H.session { work_dir = work }
    finally(function() s:close() end)
    ok_exec(s, "python -V")
    assert.truthy(H.exists(work .. "/.venv/pyvenv.cfg"))
  end)

  describe("python_venv", function()
    it("is bound read-only at its path and bridged into the session venv", function()
      local s = H.session { python_venv = opvenv }
      finally(function() s:close() end)
      local where = s:run_code(("import %s; print(%s.__file__)"):format(PKG, PKG))
      assert.truthy(where:find(opvenv .. "/lib/", 1, true) == 1, where)
      local r = s:exec("echo $PATH; touch " .. H.q(opvenv .. "/x"))
      assert.are_not.equal(0, r.returncode)
      assert.truthy(r.stderr:find("Read-only file system", 1, true), r.stderr)
      assert.truthy(r.stdout:find(VENV .. "/bin:" .. opvenv .. "/bin:", 1, true) == 1, r.stdout)
      -- Installs still go to the session venv, not the operator's.
      assert.truthy(ok_exec(s, "pip --version").stdout:find("python 3", 1, true))
    end)

    it("may come from the policy's on_session_open, judged as a read-only bind all the same", function()
      local function policy(pv)
        local path = dir .. "/pv_policy.lua"
        H.write_file(path, ("return { name = 'pv', on_session_open = function(req) "
          .. "req.python_venv = %q; return req end }\n"):format(pv))
        return path
      end
      local s = H.session { policy = policy(opvenv) }
      finally(function() s:close() end)
      local where = s:run_code(("import %s; print(%s.__file__)"):format(PKG, PKG))
      assert.truthy(where:find(opvenv .. "/lib/", 1, true) == 1, where)
      local err = H.raised(H.session, { policy = policy("/etc/python3") })
      assert.are.equal("PolicyDenied", H.errkind(err))
    end)

    it("control: without it the package is not there", function()
      local s = H.session()
      finally(function() s:close() end)
      local r = s:exec("python -c 'import " .. PKG .. "'")
      assert.truthy(r.stderr:find("ModuleNotFoundError", 1, true), r.stderr)
    end)
  end)

  it("refuses bad options with errors that name them", function()
    local function kind(opts)
      local err = H.raised(sbx.session, opts)
      return H.errkind(err), err and err.option
    end
    assert.are.same({ "InvalidArgument", "venv" }, { kind { backend = "userns", venv = "yes" } })
    assert.are.same({ "InvalidArgument", "python_venv" }, { kind { backend = "userns", python_venv = "venv" } })
    assert.are.same({ "InvalidArgument", "python_venv" }, { kind { backend = "userns", python_venv = "/tmp/v" } })
    assert.are.same({ "InvalidArgument", "python_venv" },
      { kind { backend = "userns", python_venv = "/opt/v", venv = false } })
    -- The policy judges it as a read-only bind.
    assert.are.equal("PolicyDenied", (kind { backend = "userns", python_venv = "/etc/python3" }))
    assert.are.equal("BackendUnavailable", (kind { backend = "none", venv = true }))
  end)

  describe("through sbxd", function()
    local srv
    setup(function()
      if S.available() and S.have("curl") then srv = assert(S.start {}) end
    end)
    teardown(function() if srv then srv:cleanup() end end)

    it("pip install persists across runs; venv = false, python_venv and bad values over the API", function()
      if not srv then pending("needs sbxd next to sbxlua and curl") return end
      local s = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, backend = "userns" }
      finally(function() s:close() end)
      s:put_bytes(WHEEL, wheel)
      assert.are.equal(0, s:exec("pip install --no-index ./" .. WHEEL).returncode)
      assert.are.equal(VER .. "\n", s:run_code(("import %s; print(%s.__version__)"):format(PKG, PKG)))
      local off = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, venv = false }
      finally(function() off:close() end)
      assert.are.equal("/usr\n", off:run_code("import sys; print(sys.prefix)"))
      local op = sbx.remote.session { endpoint = srv.url, token = srv.token.alice, python_venv = opvenv }
      finally(function() op:close() end)
      local where = op:run_code(("import %s; print(%s.__file__)"):format(PKG, PKG))
      assert.truthy(where:find(opvenv .. "/lib/", 1, true) == 1, where)
      local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", "content-type: application/json",
        "-d", '{"venv":"yes"}')
      assert.are.equal(400, status, body)
      assert.truthy(body:find("venv", 1, true), body)
    end)
  end)
end)

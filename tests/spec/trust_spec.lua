-- trust_spec.lua: the session option ca_certs.  The runs of a session given
-- a CA trust it without setup (curl and Python against an HTTPS server that
-- CA signed, through the allowlist proxy of the test's fake internet), on
-- device and through sbxd; a session without it does not (the control that
-- shows the probe sees a failure); bad entries are refused by name, and sbxd
-- never reads a file a remote request names.

local F = require "net.fakenet"
local H = require "spec.sec_helpers"
local trust = require "sbx.trust"

local sbx = require "sbx"

local function raised(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return e
end

describe("ca_certs", function()
  local dir, ca_pem
  setup(function()
    dir = H.mktemp_dir("trustspec")
    -- A CA of the test's own (the fake internet's comes later).
    local out, code = H.sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
      .. "-subj /CN=sbx-trust-spec -keyout " .. H.q(dir .. "/ca.key") .. " -out " .. H.q(dir .. "/ca.pem"), true)
    assert.are.equal(0, code, out)
    ca_pem = H.read_file(dir .. "/ca.pem")
  end)
  teardown(function() if dir then H.rmtree(dir) end end)

  it("refuses entries that are not certificates, by name", function()
    local key = H.read_file(dir .. "/ca.key")
    local cases = {
      { { ca_pem .. key }, "private key" },
      { { "-----BEGIN CERTIFICATE-----\nnot*base64\n-----END CERTIFICATE-----\n" }, "not base64" },
      { { "-----BEGIN CERTIFICATE-----\nQUJD\n" }, "no END line" },
      { { "relative/ca.pem" }, "absolute file path" },
      { { dir .. "/missing.pem" }, "No such file" },
      { { dir .. "/ca.key" }, "private key" },
      { "a string", "a list" },
      { { 1 }, "a string expected" },
    }
    for _, c in ipairs(cases) do
      local e = raised(trust.check, c[1], true)
      assert.are.equal("InvalidArgument", e.kind)
      assert.matches(c[2], e.message, 1, true)
    end
    local many = {}
    for i = 1, trust.MAX_CERTS + 1 do many[i] = ca_pem end
    assert.matches("at most", raised(trust.check, many, true).message, 1, true)
    -- A remote caller names no host file, not even one that exists.
    assert.matches("only for on-device", raised(trust.check, { dir .. "/ca.pem" }, false).message, 1, true)
    -- Control: the same entries pass as text or, here, as a path.
    assert.are.same(trust.check({ ca_pem }, false), trust.check({ dir .. "/ca.pem" }, true))
  end)

  it("gives every run the system bundle plus the CA, read-only, and the variables clients read", function()
    local s = sbx.session { backend = "userns", ca_certs = { dir .. "/ca.pem" }, env = { PIP_CERT = "/mine" } }
    local ok, err = pcall(function()
      local r = s:exec("for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS "
        .. "GIT_SSL_CAINFO PIP_CERT; do printenv $v; done")
      assert.are.equal(table.concat({ trust.INSIDE_PATH, trust.INSIDE_PATH, trust.INSIDE_PATH,
        trust.INSIDE_PATH, trust.INSIDE_PATH, "/mine" }, "\n") .. "\n", r.stdout)
      local body = s:exec("cat " .. trust.INSIDE_PATH).stdout
      local system = H.read_file(trust.SYSTEM_BUNDLE) or ""
      assert.are.equal(system, body:sub(1, #system))
      assert.matches(trust.check({ ca_pem }, false)[1], body, 1, true)
      assert.is_nil(body:find("PRIVATE KEY", 1, true))
      local w = s:exec("echo x >> " .. trust.INSIDE_PATH)
      assert.are_not.equal(0, w.returncode)
      -- The sandbox's OpenSSL takes it as a trust store that verifies a
      -- certificate the CA signed (and the system's, unchanged, does not).
      s:put_bytes("ca.pem", ca_pem)
      local v = s:exec("openssl verify -CAfile \"$SSL_CERT_FILE\" ca.pem && ! openssl verify "
        .. "-CAfile /etc/ssl/certs/ca-certificates.crt ca.pem 2>/dev/null")
      assert.are.equal(0, v.returncode, v.stdout .. v.stderr)
    end)
    s:close()
    assert(ok, err)
    -- Control: a session without ca_certs has neither file nor variables.
    local plain = sbx.session { backend = "userns" }
    local r = plain:exec("test -e " .. trust.INSIDE_PATH .. " || echo absent; printenv SSL_CERT_FILE || echo unset")
    plain:close()
    assert.are.equal("absent\nunset\n", r.stdout)
  end)

  it("reaches the runs of the other backends that build a root (bubblewrap, privileged)", function()
    local want = trust.check({ ca_pem }, false)[1]
    for _, b in ipairs { "bubblewrap", "privileged" } do
      local s = sbx.session { backend = b, ca_certs = { ca_pem } }
      local r = s:exec("printenv SSL_CERT_FILE && cat \"$SSL_CERT_FILE\"")
      s:close()
      assert.are.equal(0, r.returncode, b .. ": " .. r.stderr)
      assert.are.equal(trust.INSIDE_PATH .. "\n", r.stdout:sub(1, #trust.INSIDE_PATH + 1), b)
      assert.are.equal(want, r.stdout:sub(-#want), b)
    end
  end)

  it("is refused on backend none, which has no filesystem to put it in", function()
    local e = raised(sbx.session, { backend = "none", ca_certs = { ca_pem } })
    assert.are.equal("BackendUnavailable", e.kind)
  end)

  describe("against HTTPS servers the CA signed", function()
    if not F.need(it, pending) then return end
    local net
    setup(function()
      net = F.up(F.unique("sbxtrust"))
      net:zone { ["pypi.org"] = F.ADDR.inet }
    end)
    teardown(function() if net then net:down() end end)

    local PROBES = [[
local CURL = "curl -sS --max-time 60 https://pypi.org/hello"
local PY = "python3 -c 'import urllib.request as u; "
  .. "print(u.urlopen(\"https://pypi.org/hello\", timeout=60).read().decode())'"
local function probe(tag, s)
  local c, p = s:exec(CURL), s:exec(PY)
  out(tag .. "_curl", c.stdout .. c.stderr) out(tag .. "_curl_rc", c.returncode)
  out(tag .. "_py", p.stdout .. p.stderr) out(tag .. "_py_rc", p.returncode)
end
]]

    local function check(res, o, tag)
      assert.are.equal("0", res[tag .. "_curl_rc"], o)
      assert.matches("hello from 198.51.100.2:443", res[tag .. "_curl"], 1, true)
      assert.are.equal("0", res[tag .. "_py_rc"], o)
      assert.matches("hello from 198.51.100.2:443", res[tag .. "_py"], 1, true)
    end

    it("lets curl and Python verify them on-device; without ca_certs they refuse", function()
      local res, o, rc = net:script(PROBES .. [[
local s = sbx.session{ backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" },
  ca_certs = { CA } }
probe("with", s) s:close()
local c = sbx.session{ backend = "userns", network_mode = "allowlist", network_allowlist = { "pypi.org" } }
probe("without", c) c:close()
]])
      assert.are.equal(0, rc, "the script's sbxlua failed:\n" .. o)
      check(res, o, "with")
      assert.are_not.equal("0", res.without_curl_rc, o)
      assert.matches("certificate", res.without_curl, 1, true)
      assert.are_not.equal("0", res.without_py_rc, o)
      assert.matches("CERTIFICATE_VERIFY_FAILED", res.without_py, 1, true)
    end)

    it("does the same through sbxd, which reads no file a request names", function()
      local res, o, rc = net:script(PROBES .. F.SBXD .. [[
local ok, err = pcall(function()
  -- The client reads its own CA file and sends the PEM.
  local s = sbx.remote.session{ endpoint = srv.url, token = srv.token.alice, backend = "userns",
    network_mode = "allowlist", network_allowlist = { "pypi.org" }, ca_certs = { CA } }
  probe("remote", s) s:close()
  local body, status = srv:curl("/v1/sessions", "-X", "POST", "-H", srv:auth(), "-H",
    "Content-Type: application/json", "--data", '{"ca_certs":["' .. CA .. '"]}')
  out("path_status", status) out("path_body", body)
end)
out("err", tostring(err))
srv:cleanup()
]])
      assert.are.equal(0, rc, "the script's sbxlua failed:\n" .. o)
      check(res, o, "remote")
      assert.are.equal("400", res.path_status, o)
      assert.matches("ca_certs", res.path_body, 1, true)
      assert.matches("only for on-device", res.path_body, 1, true)
    end)
  end)
end)

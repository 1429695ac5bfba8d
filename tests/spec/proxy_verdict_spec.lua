-- proxy_verdict_spec.lua: what the allowlist proxy asks the policy engine
-- (engine:proxy_verdict) and what it is told, without a network: names
-- before DNS, IP literals made canonical, resolved addresses against the
-- deny-list and the non-public ranges, and every failure a refusal.  Also
-- the run options that come with allowlist mode (the proxy variables) and
-- the deny-list open mode can enforce.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local policy = require "sbx.policy"
local options = require "sbx.options"
local ip = require "sbx.match.ip"

local function load(src)
  local path = T.tmpdir() .. "/p.lua"
  local f = assert(io.open(path, "w"))
  f:write(src)
  f:close()
  local logs = {}
  return policy.load(path, { log = function(l) logs[#logs + 1] = l end }), logs
end

local BASE = [[
return {
  name = "t",
  ceilings = { backends = { "userns" }, network_mode = "open" },
  network = { denylist = { "10.9.0.0/16" } },
  on_connect = function(host, port, addrs, ctx)
    if host == "hooked.test" then return false, "the hook says no" end
    if host == "boom.test" then error("hook exploded") end
    return true
  end,
}
]]

describe("engine:proxy_verdict", function()
  local e, logs = load(BASE)
  local ctx = { network_mode = "allowlist",
    allowlist = { "pypi.org", "*.pythonhosted.org", "hooked.test", "boom.test", "inner.test",
                  "203.0.113.0/24", "10.20.0.0/16", "Bücher.example" },
    -- as sbx.options makes it: the metadata preset plus the session's own
    denylist = (function()
      local l = require("sbx.presets").copy(require("sbx.presets").CLOUD_METADATA_DENY)
      l[#l + 1] = "198.51.100.66"
      return l
    end)() }
  local function name(host, port) return e:proxy_verdict({ phase = "name", host = host, port = port or 443 }, ctx) end
  local function addrs(host, list)
    return e:proxy_verdict({ phase = "addrs", host = host, port = 443, addrs = list }, ctx)
  end

  it("allows a listed name and says what to resolve (normalized)", function()
    local v = name("PyPI.org.")
    assert.is_true(v.allow)
    assert.are.equal("pypi.org", v.resolve)
    assert.is_nil(v.literal)
    assert.are.equal("files.pythonhosted.org", name("files.pythonhosted.org").resolve)
    assert.are.equal("xn--bcher-kva.example", name("bücher.example").resolve)
  end)

  it("refuses a name not on the list, with a reason naming it", function()
    local v = name("example.com")
    assert.is_false(v.allow)
    assert.matches("example.com:443 is not on the allow%-list", v.reason)
    assert.is_nil(v.resolve)
  end)

  it("runs on_connect before DNS, and a hook that errors denies", function()
    local v = name("hooked.test")
    assert.is_false(v.allow)
    assert.matches("the hook says no", v.reason, 1, true)
    v = name("boom.test")
    assert.is_false(v.allow)
    assert.matches("on_connect", v.reason, 1, true)
  end)

  it("turns an allowed IP literal in any spelling into its canonical address", function()
    for _, s in ipairs { "203.0.113.7", "0xcb007107", "3405803783", "0313.0.0161.07", "203.0.28935" } do
      local v = name(s)
      assert.is_true(v.allow, s .. ": " .. tostring(v.reason))
      assert.are.equal("203.0.113.7", v.literal, s)
    end
  end)

  it("refuses the metadata address in every spelling, before any lookup", function()
    for _, s in ipairs { "169.254.169.254", "0xa9fea9fe", "2852039166", "0251.0376.0251.0376",
                         "169.254.43518", "::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "[::ffff:a9fe:a9fe]" } do
      local v = name(s, 80)
      assert.is_false(v.allow, s)
      assert.matches("deny%-list", v.reason)
    end
  end)

  it("refuses names and addresses that are no name or address", function()
    for _, s in ipairs { "", "a b", "exa\0mple.com", ("a"):rep(300), "1.2.3.4.5", "-x.org" } do
      assert.is_false(name(s).allow, ("%q"):format(s))
    end
    assert.is_false(e:proxy_verdict({ phase = "name", host = "pypi.org", port = 0 }, ctx).allow)
    assert.is_false(e:proxy_verdict({ phase = "name", host = "pypi.org", port = 70000 }, ctx).allow)
    assert.is_false(e:proxy_verdict({ phase = "nonsense", host = "pypi.org", port = 443 }, ctx).allow)
    assert.is_false(e:proxy_verdict({}, ctx).allow)
  end)

  it("accepts public resolved addresses", function()
    assert.is_true(addrs("pypi.org", { "151.101.0.223", "2a04:4e42::223" }).allow)
  end)

  it("refuses resolved addresses in non-public ranges, naming the kind", function()
    for a, kind in pairs { ["10.1.2.3"] = "private", ["192.168.1.1"] = "private", ["172.16.0.1"] = "private",
                           ["127.0.0.1"] = "loopback", ["0.0.0.0"] = "unspecified", ["100.64.0.1"] = "CGNAT",
                           ["224.0.0.1"] = "multicast", ["::1"] = "loopback", ["fd12::1"] = "unique local",
                           ["fe80::1"] = "fe80::/10", ["::ffff:10.0.0.1"] = "private", ["::"] = "unspecified" } do
      local v = addrs("pypi.org", { "151.101.0.223", a })
      assert.is_false(v.allow, a)
      assert.matches(kind, v.reason, nil, a)
      assert.matches(a:gsub("[%.%-%[%]%%]", "%%%0"), v.reason, nil, a)
    end
  end)

  it("lets a non-public address through only when the allow-list names its CIDR", function()
    assert.is_true(addrs("inner.test", { "10.20.3.4" }).allow)
    assert.is_false(addrs("inner.test", { "10.21.3.4" }).allow)
  end)

  it("applies the policy's and the session's deny-lists to resolved addresses", function()
    local v = addrs("pypi.org", { "10.9.1.1" })
    assert.is_false(v.allow)
    assert.matches("10.9.0.0/16", v.reason, 1, true)
    v = addrs("pypi.org", { "198.51.100.66" })
    assert.is_false(v.allow)
    assert.matches("198.51.100.66", v.reason, 1, true)
    assert.is_false(addrs("pypi.org", {}).allow)
    assert.is_false(addrs("pypi.org", { "not-an-address" }).allow)
  end)

  it("logs every refusal", function()
    local before = #logs
    name("example.com")
    addrs("pypi.org", { "10.1.2.3" })
    assert.are.equal(before + 2, #logs)
  end)

  it("refuses in blocked mode whatever the lists say", function()
    local v = e:proxy_verdict({ phase = "name", host = "pypi.org", port = 443 },
      { network_mode = "blocked", allowlist = { "pypi.org" } })
    assert.is_false(v.allow)
  end)
end)

describe("ip.special", function()
  it("knows the non-public ranges, wrapped ones included", function()
    assert.are.equal("loopback", ip.special(ip.parse("127.1")))
    assert.are.equal("private", ip.special(ip.parse("::ffff:192.168.0.1")))
    assert.are.equal("private", ip.special(ip.parse("64:ff9b::10.0.0.1")))
    assert.is_nil(ip.special(ip.parse("198.51.100.2")))
    assert.is_nil(ip.special(ip.parse("2001:db8:100::2")))
    assert.is_nil(ip.special(ip.parse("8.8.8.8")))
  end)
end)

describe("run options with networking", function()
  it("give allowlist runs the proxy variables, replacing the caller's", function()
    local env = options.with_proxy_env({ "PATH=/bin", "HTTPS_PROXY=http://evil:1", "no_proxy=*" }, 3128)
    local set = {}
    for _, kv in ipairs(env) do
      local k, v = kv:match("^([^=]*)=(.*)$")
      assert.is_nil(set[k], "twice: " .. k)
      set[k] = v
    end
    assert.are.equal("/bin", set.PATH)
    for _, k in ipairs { "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy" } do
      assert.are.equal("http://127.0.0.1:3128", set[k], k)
    end
    assert.are.equal("localhost,127.0.0.1,::1", set.NO_PROXY)
    assert.are.equal("localhost,127.0.0.1,::1", set.no_proxy)
  end)

  it("give open mode the deny-list's addresses and CIDRs, not names, not loopback", function()
    local l = options.open_deny { "169.254.169.254", "metadata.google.internal", "10.0.0.0/8:22",
      "127.0.0.0/8", "::1", "fd00:ec2::254", "169.254.169.254", "*.evil.test" }
    assert.are.same({ "169.254.169.254/32", "10.0.0.0/8", "fd00:ec2::254/128" }, l)
  end)
end)

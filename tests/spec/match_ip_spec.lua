-- match_ip_spec.lua: addresses, CIDRs and ports of sbx.match: every IPv4
-- spelling, every IPv6 form, unwrapping of IPv6 forms that carry an IPv4
-- address, port ranges; property-style checks with a fixed seed.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local match = require "sbx.match"
local ip = require "sbx.match.ip"
local presets = require "sbx.presets"

local function s(a) return a and ip.tostring(a) end

describe("sbx.match addresses", function()
  it("normalize every IPv4 spelling inet_aton accepts", function()
    for _, sp in ipairs { "169.254.169.254", "2852039166", "0xa9fea9fe", "0XA9FEA9FE",
      "0251.0376.0251.0376", "169.254.43518", "169.16689662", "0xa9.0xfe.0xa9.0xfe",
      "0251.254.0xa9.254" } do
      assert.are.equal("169.254.169.254", s(ip.parse(sp)), sp)
    end
    for _, bad in ipairs { "256.1.1.1", "1.2.3.256", "1.2.65536", "1.16777216", "4294967296", "08.1.1.1",
      "1.2.3.4.5", "1..2.3", "", "0xg", "-1", "1.2.3.4 ", "a.b.c.d" } do
      assert.is_nil(ip.parse(bad), bad)
    end
  end)

  it("parse every IPv6 form", function()
    local cases = {
      ["::"] = "::", ["::1"] = "::1", ["1::"] = "1::", ["fd00:ec2::254"] = "fd00:ec2::254",
      ["FD00:0EC2:0000:0000:0000:0000:0000:0254"] = "fd00:ec2::254",
      ["1:2:3:4:5:6:7:8"] = "1:2:3:4:5:6:7:8", ["1:0:0:4::8"] = "1:0:0:4::8",
      ["::ffff:169.254.169.254"] = "::ffff:a9fe:a9fe", ["1:2:3:4:5:6:1.2.3.4"] = "1:2:3:4:5:6:102:304",
      ["[::1]"] = "::1", ["fe80::1%eth0"] = "fe80::1", ["1:2:3:4:5:6:7::"] = "1:2:3:4:5:6:7:0",
    }
    for input, want in pairs(cases) do assert.are.equal(want, s(ip.parse(input)), input) end
    for _, bad in ipairs { "1:2:3:4:5:6:7:8:9", ":::", "1::2::3", "12345::", "1:2", "::ffff:1.2.3",
      "::ffff:01.2.3.4", "::1.2.3.4:5", "g::1", "[1.2.3.4]", "1:2:3:4:5:6:7:1.2.3.4" } do
      assert.is_nil(ip.parse(bad), bad)
    end
  end)

  it("unwrap IPv4-mapped, NAT64, 6to4 and Teredo before matching", function()
    local m = match.compile { "169.254.169.254" }
    for _, a in ipairs { "::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "64:ff9b::169.254.169.254",
      "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "2002:a9fe:a9fe:1234::5", "::169.254.169.254",
      "2001:0:4136:e378:8000:63bf:5601:5601", "[::ffff:169.254.169.254]" } do
      assert.are.equal("169.254.169.254", m:match(nil, 80, { a }), a)
      assert.are.equal("169.254.169.254", m:match(a, 80), a)
    end
    for _, a in ipairs { "::1", "::", "fd00::1", "64:ff9c::a9fe:a9fe", "2003:a9fe:a9fe::1" } do
      assert.is_nil(m:match(a, 80), a)
    end
  end)

  it("match CIDRs of both families, and refuse host bits past the prefix", function()
    local m = match.compile { "10.0.0.0/8", "fd00::/8", "192.168.1.0/24" }
    assert.are.equal("10.0.0.0/8", m:match("10.255.1.2", 1))
    assert.are.equal("10.0.0.0/8", m:match("167772161", 1)) -- 10.0.0.1 in decimal
    assert.are.equal("fd00::/8", m:match("fdff::1", 1))
    assert.are.equal("192.168.1.0/24", m:match("192.168.1.255", 1))
    assert.is_nil(m:match("192.168.2.1", 1))
    assert.is_nil(m:match("11.0.0.0", 1))
    assert.is_nil(m:match("fe00::1", 1))
    assert.is_nil(ip.parse_cidr("10.0.0.1/8"))
    assert.is_nil(ip.parse_cidr("10.0.0.0/33"))
    assert.is_nil(ip.parse_cidr("::/129"))
  end)

  it("match ports and port ranges", function()
    local m = match.compile { "pypi.org:443", "*.example.org:8000-8099", "[fd00:ec2::254]:80",
      "10.0.0.0/8:22", "any.org" }
    assert.are.equal("pypi.org:443", m:match("pypi.org", 443))
    assert.is_nil(m:match("pypi.org", 80))
    assert.are.equal("*.example.org:8000-8099", m:match("a.example.org", 8000))
    assert.are.equal("*.example.org:8000-8099", m:match("a.example.org", 8099))
    assert.is_nil(m:match("a.example.org", 8100))
    assert.is_nil(m:match("a.example.org", 7999))
    assert.are.equal("[fd00:ec2::254]:80", m:match("fd00:ec2::254", 80))
    assert.is_nil(m:match("fd00:ec2::254", 443))
    assert.are.equal("10.0.0.0/8:22", m:match("x.org", 22, { "10.1.2.3" }))
    assert.is_nil(m:match("x.org", 23, { "10.1.2.3" }))
    assert.are.equal("any.org", m:match("any.org", 1))
    assert.are.equal("any.org", m:match("any.org", 65535))
  end)

  it("deny every metadata address and name of the preset, in any spelling", function()
    local m = match.compile(presets.CLOUD_METADATA_DENY)
    for _, a in ipairs { "169.254.169.254", "0xa9fea9fe", "2852039166", "169.254.43518",
      "0251.0376.0251.0376", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "169.254.170.2",
      "100.100.100.200", "192.0.0.192", "fd00:ec2::254", "FD00:EC2:0:0:0:0:0:254", "fd20:ce::254",
      "fe80::1", "168.63.129.16" } do
      assert.is_string(m:match(a, 80), a)
    end
    for _, n in ipairs { "metadata.google.internal", "METADATA.GOOGLE.INTERNAL.", "metadata.goog",
      "metadata", "instance-data", "instance-data.ec2.internal", "metadata.azure.com",
      "metadata.tencentyun.com", "metadata.oraclecloud.com" } do
      assert.is_string(m:match(n, 80), n)
    end
    assert.is_nil(m:match("pypi.org", 443, { "151.101.0.223" }))
    assert.is_nil(m:match("8.8.8.8", 53))
  end)

  it("hold their invariants over many generated addresses (property test)", function()
    math.randomseed(1234567)
    for _ = 1, 2000 do
      local o = { math.random(0, 255), math.random(0, 255), math.random(0, 255), math.random(0, 255) }
      local n = ((o[1] * 256 + o[2]) * 256 + o[3]) * 256 + o[4]
      local dotted = table.concat(o, ".")
      local spellings = {
        dotted, tostring(n), ("0x%x"):format(n), ("0%o.0%o.0%o.0%o"):format(o[1], o[2], o[3], o[4]),
        ("%d.%d.%d"):format(o[1], o[2], o[3] * 256 + o[4]), ("%d.%d"):format(o[1], n % 16777216),
        ("::ffff:%s"):format(dotted), ("64:ff9b::%s"):format(dotted),
        ("2002:%x:%x::1"):format(o[1] * 256 + o[2], o[3] * 256 + o[4]),
      }
      for _, sp in ipairs(spellings) do
        local a = assert(ip.parse(sp), sp)
        local v4 = a.v == 4 and a or ip.unwrap(a)
        assert.are.equal(dotted, s(v4), sp)
      end
      -- CIDR invariants: an address is in every prefix of itself; flipping a
      -- bit inside the prefix leaves it, past the prefix stays in.
      local len = math.random(1, 32)
      local span = 2 ^ (32 - len)
      local net = { v = 4, n = math.floor(n / span) * span }
      local c = { addr = net, len = len }
      assert.is_true(ip.in_cidr({ v = 4, n = n }, c))
      local bit = 2 ^ (32 - math.random(1, len))
      local flipped = math.floor(n / bit) % 2 == 1 and n - bit or n + bit
      assert.is_false(ip.in_cidr({ v = 4, n = flipped }, c), dotted .. "/" .. len)
      if len < 32 then
        local low = 2 ^ (math.random(0, 31 - len))
        local inside = math.floor(n / low) % 2 == 1 and n - low or n + low
        assert.is_true(ip.in_cidr({ v = 4, n = inside }, c))
      end
    end
    for _ = 1, 2000 do
      local g = {}
      for i = 1, 8 do g[i] = math.random() < 0.3 and 0 or math.random(0, 65535) end
      local a = { v = 6, g = g }
      local text = ip.tostring(a)
      local back = assert(ip.parse(text), text)
      assert.are.same(g, back.g, text)
      local full = {}
      for i = 1, 8 do full[i] = ("%04X"):format(g[i]) end
      assert.are.same(g, ip.parse(table.concat(full, ":")).g)
      assert.are.same(g, ip.parse("[" .. text .. "]").g)
      local len = math.random(0, 128)
      local c = assert(ip.parse_cidr(ip.tostring({ v = 6, g = (function()
        local out = {}
        for i = 1, 8 do
          local lo = (i - 1) * 16
          if lo >= len then out[i] = 0
          elseif lo + 16 > len then local sp = 2 ^ (lo + 16 - len); out[i] = math.floor(g[i] / sp) * sp
          else out[i] = g[i] end
        end
        return out
      end)() }) .. "/" .. len))
      assert.is_true(ip.in_cidr(a, c), text .. " in its /" .. len)
    end
  end)

  it("refuse bad port specs and keep ports within 1-65535", function()
    for _, bad in ipairs { "a.org:0", "a.org:65536", "a.org:2-1", "a.org:x", "a.org:1-", "a.org:-1",
      "[::1]x", "[::1]:" } do
      assert.is_nil(match.parse_entry(bad), bad)
    end
    T.expect("InvalidArgument", match.compile, "pypi.org")
  end)
end)

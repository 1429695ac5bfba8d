-- match_dns_spec.lua: DNS patterns, host name normalization and IDNA
-- (Punycode) of sbx.match, with property-style checks over many generated
-- names (fixed seed, so a failure reproduces).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local match = require "sbx.match"
local idna = require "sbx.match.idna"

describe("sbx.match DNS patterns", function()
  it("match subdomains on label boundaries only, the apex only when listed", function()
    local p = "*.example.org"
    for _, n in ipairs { "a.example.org", "a.b.example.org", "A.EXAMPLE.ORG", "a.example.org.",
      "x-1.example.org" } do
      assert.is_true(match.host(p, n), n)
    end
    for _, n in ipairs { "example.org", "evilexample.org", "example.org.evil.com", "a.example.org.evil.com",
      "aexample.org", "example.orga", ".example.org", "a..example.org", "example.com", "" } do
      assert.is_false(match.host(p, n), n)
    end
    assert.is_true(match.host("example.org", "Example.ORG."))
    assert.is_false(match.host("example.org", "a.example.org"))
    local m = match.compile { "*.example.org", "example.org" }
    assert.are.equal("example.org", m:match("example.org", 443))
    assert.are.equal("*.example.org", m:match("www.example.org", 443))
    assert.is_nil(m:match("evilexample.org", 443))
  end)

  it("refuse malformed entries, naming the entry", function()
    for _, bad in ipairs { "*", "*.", "a.*.org", "**.org", "*example.org", "ex ample.org", "a..b",
      "x:0", "x:70000", "x:10-5", "x:", "[::1", "1.2.3.4.5", "10.1.0.0/8", "fe80::/129",
      ("a"):rep(64) .. ".org", "a\0b.org" } do
      local e, why = match.parse_entry(bad)
      assert.is_nil(e, bad)
      assert.is_string(why)
      local err = T.expect("InvalidArgument", match.compile, { "ok.org", bad }, "network_allowlist")
      assert.matches("entry 2", err.message, 1, true)
      assert.are.equal("network_allowlist", err.option)
    end
  end)

  it("compare internationalized names in A-label form (RFC 3492 Punycode)", function()
    assert.are.equal("xn--bcher-kva", idna.to_ascii_label("bücher"))
    assert.are.equal("xn--bcher-kva", idna.to_ascii_label("BÜCHER"))
    assert.are.equal("xn--mnchen-3ya", idna.to_ascii_label("münchen"))
    assert.are.equal("xn--e1afmkfd", idna.to_ascii_label("пример"))
    assert.are.equal("xn--r8jz45g", idna.to_ascii_label("例え"))
    -- RFC 3492 section 7.1 samples (A) Arabic, (B) Chinese, (L) mixed.
    local function cps(t) return idna.punycode_encode(t) end
    assert.are.equal("egbpdaj6bu4bxfgehfvwxn", cps { 0x644, 0x64A, 0x647, 0x645, 0x627, 0x628, 0x62A,
      0x643, 0x644, 0x645, 0x648, 0x634, 0x639, 0x631, 0x628, 0x64A, 0x61F })
    assert.are.equal("ihqwcrb4cv8a8dqg056pqjye", cps { 0x4ED6, 0x4EEC, 0x4E3A, 0x4EC0, 0x4E48, 0x4E0D,
      0x8BF4, 0x4E2D, 0x6587 })
    assert.are.equal("3B-ww4c5e180e575a65lsy2b", cps { 0x33, 0x5E74, 0x42, 0x7D44, 0x91D1, 0x516B,
      0x5148, 0x751F })
    assert.is_true(match.host("*.bücher.de", "www.xn--bcher-kva.de"))
    assert.is_true(match.host("*.xn--bcher-kva.de", "www.BÜCHER.de"))
    assert.is_false(match.host("*.bücher.de", "www.bucher.de"))
    -- Invalid UTF-8 is no name: it matches nothing.
    assert.is_nil(match.normalize_host("a\255b.org"))
    assert.is_nil(match.normalize_host("\192\175.org")) -- overlong "/"
    assert.is_false(match.host("*.org", "a\255b.org"))
  end)

  it("hold their invariants over many generated names (property test)", function()
    math.randomseed(20261122)
    local alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-"
    local function label()
      local n, out = math.random(1, 12), {}
      for i = 1, n do
        local c = math.random(1, #alphabet)
        out[i] = alphabet:sub(c, c)
      end
      return table.concat(out)
    end
    local function name(k)
      local out = {}
      for i = 1, k do out[i] = label() end
      return table.concat(out, ".")
    end
    local function mixcase(s)
      return (s:gsub("%a", function(c) return math.random() < 0.5 and c:upper() or c end))
    end
    local checked = 0
    for _ = 1, 300 do
      local suffix = name(math.random(1, 3))
      local pattern = "*." .. suffix
      local m = match.compile { pattern }
      for _ = 1, 10 do
        local kind = math.random(1, 6)
        local n
        if kind == 1 then n = name(math.random(1, 3)) .. "." .. suffix     -- below: matches
        elseif kind == 2 then n = suffix                                  -- apex: no
        elseif kind == 3 then n = label() .. suffix                       -- glued: no
        elseif kind == 4 then n = suffix .. "." .. name(math.random(1, 2)) -- suffix inside: no
        elseif kind == 5 then n = name(math.random(1, 4))                 -- random
        else n = name(1) .. "." .. suffix .. "." end                      -- trailing dot
        local shown = math.random() < 0.5 and mixcase(n) or n
        local norm = n:lower():gsub("%.$", "")
        local expected = #norm > #suffix + 1 and norm:sub(-(#suffix + 1)) == "." .. suffix
        local got = m:match(shown, 443) ~= nil
        assert.are.equal(expected, got, ("%s vs %s"):format(pattern, shown))
        assert.are.equal(expected, match.host(pattern, shown), shown)
        -- Never a match unless the name ends with "." .. suffix.
        if got then assert.are.equal("." .. suffix, norm:sub(-(#suffix + 1))) end
        -- The exact entry matches the apex only.
        assert.are.equal(norm == suffix, match.host(suffix, shown), shown)
        checked = checked + 1
      end
    end
    assert.are.equal(3000, checked)
  end)

  it("encode U-labels deterministically into distinct LDH A-labels (property test)", function()
    math.randomseed(7)
    local seen = {}
    local function utf8(cp)
      if cp < 0x80 then return string.char(cp) end
      if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
      return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
    end
    local ranges = { { 0x61, 0x7A }, { 0xE0, 0xFE }, { 0x430, 0x44F }, { 0x3B1, 0x3C9 }, { 0x4E00, 0x4FFF } }
    for _ = 1, 1000 do
      local cps, parts = {}, {}
      for i = 1, math.random(1, 8) do
        local r = ranges[math.random(1, #ranges)]
        cps[i] = math.random(r[1], r[2])
        if cps[i] == 0xF7 then cps[i] = 0xF8 end -- not a letter
        parts[i] = utf8(cps[i])
      end
      local u = table.concat(parts)
      local a = idna.to_ascii_label(u)
      assert.is_string(a)
      assert.is_truthy(a:match("^[a-z0-9-]+$"), a)
      assert.are.equal(a, idna.to_ascii_label(u))
      if seen[a] then assert.are.equal(seen[a], u, "two labels encode alike: " .. a) end
      seen[a] = u
      if u:find("[\128-\255]") then assert.are.equal("xn--", a:sub(1, 4)) else assert.are.equal(u, a) end
    end
  end)
end)

-- sbx.match.ip: IP addresses and CIDRs for the network allow/deny lists.
--
-- Addresses are tables { v = 4, n = <0 .. 2^32-1> } or { v = 6, g = { 8
-- groups of 16 bits } }.  Parsing accepts every spelling a resolver or a
-- client library may turn into an address, so that a deny-list cannot be
-- walked around by spelling:
--   IPv4: dotted quads, and inet_aton's forms: decimal "2852039166", hex
--         "0xa9fea9fe", octal "0251.0376.0251.0376", short forms
--         "169.254.43518" (a.b.c: c is 16 bits) and "169.16689662" (a.b).
--   IPv6: the full form, "::" compression, an embedded dotted IPv4 tail
--         ("::ffff:169.254.169.254"), brackets ("[::1]") and zone ids
--         ("fe80::1%eth0", dropped).
-- unwrap(addr) gives the IPv4 address an IPv6 address carries: IPv4-mapped
-- ::ffff:0:0/96, IPv4-compatible ::/96 (not :: or ::1), NAT64 64:ff9b::/96,
-- 6to4 2002::/16 and Teredo 2001::/32 (client address, inverted).  Matching
-- (sbx.match) checks the address and what it unwraps to.
--
--   ip.parse(s)          -> addr, or nil, why
--   ip.parse_cidr(s)     -> { addr =, len = }, or nil, why ("a.b.c.d" = /32)
--   ip.in_cidr(addr, c)  -> boolean (same family only)
--   ip.unwrap(addr)      -> the embedded IPv4 addr, or nil
--   ip.tostring(addr)    -> canonical text (IPv6 per RFC 5952)

local M = {}

local function parse_num(s)
  if s == "" then return nil end
  if s:match("^0[xX]%x*$") then
    if #s == 2 then return 0 end -- "0x" alone is 0 for inet_aton
    return tonumber(s:sub(3), 16)
  end
  if s:match("^0[0-7]+$") then return tonumber(s:sub(2), 8) end
  if s:match("^%d+$") then
    if s:match("^0%d") then return nil end -- "08": not octal, not decimal
    return tonumber(s, 10)
  end
  return nil
end

-- parse4(s, strict) -> addr or nil.  strict: dotted quad in decimal only
-- (the tail of an IPv6 address).
local function parse4(s, strict)
  if #s > 64 then return nil end
  local parts = {}
  for p in (s .. "."):gmatch("([^.]*)%.") do parts[#parts + 1] = p end
  if #parts < 1 or #parts > 4 then return nil end
  if strict and #parts ~= 4 then return nil end
  local nums = {}
  for i, p in ipairs(parts) do
    local v
    if strict then
      v = p:match("^%d%d?%d?$") and tonumber(p, 10)
      if v and #p > 1 and p:sub(1, 1) == "0" then v = nil end
    else
      v = parse_num(p)
    end
    if not v then return nil end
    nums[i] = v
  end
  local n = 0
  for i = 1, #nums - 1 do
    if nums[i] > 255 then return nil end
    n = n * 256 + nums[i]
  end
  local last, bits = nums[#nums], 8 * (5 - #nums)
  if last >= 2 ^ bits then return nil end
  n = n * 2 ^ bits + last
  return { v = 4, n = n }
end

local function parse6(s)
  if #s > 64 then return nil end
  local head, tail = s, nil
  local a, b = s:find("::", 1, true)
  if a then
    head, tail = s:sub(1, a - 1), s:sub(b + 1)
    if tail:find("::", 1, true) then return nil end
  end
  local function groups(part)
    local out = {}
    if part == "" then return out end
    local fields = {}
    for f in (part .. ":"):gmatch("([^:]*):") do fields[#fields + 1] = f end
    for i, f in ipairs(fields) do
      if i == #fields and f:find(".", 1, true) then
        local v4 = parse4(f, true)
        if not v4 then return nil end
        out[#out + 1] = math.floor(v4.n / 65536)
        out[#out + 1] = v4.n % 65536
      else
        if not f:match("^%x%x?%x?%x?$") then return nil end
        out[#out + 1] = tonumber(f, 16)
      end
    end
    return out
  end
  local h = groups(head)
  if not h then return nil end
  if head ~= "" and h[#h] ~= nil and head:find("%.") and tail then return nil end -- v4 only last
  local t = tail and groups(tail)
  if tail and not t then return nil end
  local g = {}
  if tail then
    if #h + #t > 7 then return nil end
    for _, v in ipairs(h) do g[#g + 1] = v end
    for _ = 1, 8 - #h - #t do g[#g + 1] = 0 end
    for _, v in ipairs(t) do g[#g + 1] = v end
  else
    if #h ~= 8 then return nil end
    g = h
  end
  return { v = 6, g = g }
end

-- parse(s) -> addr, or nil, why.
function M.parse(s)
  if type(s) ~= "string" then return nil, "an address string expected" end
  local inner = s:match("^%[(.*)%]$")
  if inner then s = inner end
  if s:find(":", 1, true) then
    s = s:gsub("%%[%w._-]+$", "") -- zone id
    local a = parse6(s)
    if a then return a end
    return nil, ("%q is not an IPv6 address"):format(s)
  end
  if inner then return nil, "brackets hold IPv6 addresses only" end
  local a = parse4(s, false)
  if a then return a end
  return nil, ("%q is not an IPv4 address"):format(s)
end

-- parse_cidr(s) -> { addr =, len = }, or nil, why.  The address must have
-- no bits set past the prefix ("10.1.0.0/8" is refused: say what you mean).
function M.parse_cidr(s)
  if type(s) ~= "string" then return nil, "a CIDR string expected" end
  local a_s, len_s = s:match("^(.-)/(%d+)$")
  local addr, err = M.parse(a_s or s)
  if not addr then return nil, err end
  local max = addr.v == 4 and 32 or 128
  local len = len_s and tonumber(len_s, 10) or max
  if len > max then return nil, ("prefix /%d is longer than %d bits"):format(len, max) end
  local c = { addr = addr, len = len }
  if not M.in_cidr(addr, c) or (len_s and not M.is_network(addr, len)) then
    return nil, ("%s has bits set past its /%d prefix"):format(a_s, len)
  end
  return c
end

function M.is_network(addr, len)
  if addr.v == 4 then
    local span = 2 ^ (32 - len)
    return addr.n % span == 0
  end
  for i = 1, 8 do
    local lo = (i - 1) * 16
    if lo >= len then
      if addr.g[i] ~= 0 then return false end
    elseif lo + 16 > len then
      if addr.g[i] % 2 ^ (lo + 16 - len) ~= 0 then return false end
    end
  end
  return true
end

function M.in_cidr(addr, c)
  local net = c.addr
  if addr.v ~= net.v then return false end
  if addr.v == 4 then
    local span = 2 ^ (32 - c.len)
    return math.floor(addr.n / span) == math.floor(net.n / span)
  end
  local len = c.len
  for i = 1, 8 do
    if len <= 0 then return true end
    if len >= 16 then
      if addr.g[i] ~= net.g[i] then return false end
    else
      local span = 2 ^ (16 - len)
      return math.floor(addr.g[i] / span) == math.floor(net.g[i] / span)
    end
    len = len - 16
  end
  return true
end

local function v4(hi, lo) return { v = 4, n = hi * 65536 + lo } end

-- unwrap(addr) -> the IPv4 address embedded in an IPv6 one, or nil.
function M.unwrap(addr)
  if addr.v ~= 6 then return nil end
  local g = addr.g
  if g[1] == 0 and g[2] == 0 and g[3] == 0 and g[4] == 0 and g[5] == 0 then
    if g[6] == 0xffff then return v4(g[7], g[8]) end               -- ::ffff:a.b.c.d
    if g[6] == 0 and (g[7] ~= 0 or g[8] > 1) then return v4(g[7], g[8]) end -- ::a.b.c.d
    return nil
  end
  if g[1] == 0x64 and g[2] == 0xff9b and g[3] == 0 and g[4] == 0 and g[5] == 0 and g[6] == 0 then
    return v4(g[7], g[8])                                         -- NAT64
  end
  if g[1] == 0x2002 then return v4(g[2], g[3]) end                 -- 6to4
  if g[1] == 0x2001 and g[2] == 0 then                             -- Teredo
    return v4(0xffff - g[7], 0xffff - g[8])
  end
  return nil
end

-- Ranges that are never "the internet": the proxy refuses an address in
-- one unless the allow-list names it (a CIDR entry that contains it).
local SPECIAL = {
  { "0.0.0.0/8", "unspecified" }, { "10.0.0.0/8", "private" }, { "100.64.0.0/10", "shared (CGNAT)" },
  { "127.0.0.0/8", "loopback" }, { "169.254.0.0/16", "link-local" }, { "172.16.0.0/12", "private" },
  { "192.0.0.0/24", "IETF protocol assignments" }, { "192.168.0.0/16", "private" },
  { "198.18.0.0/15", "benchmarking" }, { "224.0.0.0/4", "multicast" }, { "240.0.0.0/4", "reserved" },
  { "::/128", "unspecified" }, { "::1/128", "loopback" }, { "fc00::/7", "unique local (private)" },
  { "fe80::/10", "link-local" }, { "ff00::/8", "multicast" },
}
local special_cidrs

-- special(addr) -> what kind of non-public address it is, or nil.  An
-- address wrapping an IPv4 one (mapped, NAT64, 6to4, Teredo) is judged by
-- both.
function M.special(addr)
  if not special_cidrs then
    special_cidrs = {}
    for i, e in ipairs(SPECIAL) do special_cidrs[i] = { M.parse_cidr(e[1]), e[2] } end
  end
  local inner = M.unwrap(addr)
  for _, e in ipairs(special_cidrs) do
    if M.in_cidr(addr, e[1]) or (inner and M.in_cidr(inner, e[1])) then return e[2] end
  end
  return nil
end

function M.tostring(addr)
  if addr.v == 4 then
    local n = addr.n
    return ("%d.%d.%d.%d"):format(math.floor(n / 16777216), math.floor(n / 65536) % 256,
      math.floor(n / 256) % 256, n % 256)
  end
  local g = addr.g
  -- RFC 5952: the longest run (>= 2) of zero groups becomes "::".
  local best, best_len, i = nil, 1, 1
  while i <= 8 do
    if g[i] == 0 then
      local j = i
      while j <= 8 and g[j] == 0 do j = j + 1 end
      if j - i > best_len then best, best_len = i, j - i end
      i = j
    else
      i = i + 1
    end
  end
  local parts = {}
  local function hex(a, b)
    local out = {}
    for k = a, b do out[#out + 1] = ("%x"):format(g[k]) end
    return table.concat(out, ":")
  end
  if not best then return hex(1, 8) end
  parts[1] = hex(1, best - 1)
  parts[2] = hex(best + best_len, 8)
  return parts[1] .. "::" .. parts[2]
end

return M

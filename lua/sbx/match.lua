-- sbx.match: the network allow/deny matchers, shared by the policy engine
-- (sbx.policy) and the network proxy.
--
-- An entry of a list is one of:
--   "example.org"        exactly that name
--   "*.example.org"      any name strictly below example.org, on label
--                        boundaries: a.example.org, a.b.example.org; not
--                        example.org itself (list it too), not
--                        evilexample.org, not example.org.evil.com
--   "169.254.169.254"    an address (any IPv4 spelling, see sbx.match.ip)
--   "10.0.0.0/8", "fd00::/8"  a CIDR
-- each optionally followed by a port or a port range:
--   "pypi.org:443", "*.example.org:8000-8099", "[fd00:ec2::254]:80",
--   "10.0.0.0/8:22" (IPv6 entries with a port need brackets).
-- Names are compared case-insensitively, with one trailing dot dropped,
-- in A-label form (sbx.match.idna: Punycode, lowercase only, no UTS #46).
-- Addresses are compared after unwrapping IPv4-mapped, IPv4-compatible,
-- NAT64, 6to4 and Teredo IPv6 forms: an entry matches an address when it
-- matches the address itself or the IPv4 address it carries.
--
--   match.normalize_host(s)     -> A-label lowercase name, or nil, why
--   match.host(pattern, name)   -> boolean (one DNS entry, one name)
--   match.parse_entry(s)        -> entry table, or nil, why
--   match.compile(list, what)   -> Matcher; raises InvalidArgument naming
--                                  the entry (what: the option's name)
--   Matcher:match(host, port, addrs) -> the entry string that matched, or nil
--   Matcher:match_name(name, port)   -> entry or nil (names only)
--   Matcher:match_addr(addr, port)   -> entry or nil (addr: string or parsed)
--   match.ip = sbx.match.ip, match.idna = sbx.match.idna

local idna = require "sbx.match.idna"
local ip = require "sbx.match.ip"

local M = { ip = ip, idna = idna }

local MAX_NAME = 253

-- normalize_host(s) -> the name as compared: A-labels, lowercase, no
-- trailing dot; nil, why when it is not a valid host name.
function M.normalize_host(s)
  if type(s) ~= "string" then return nil, "a host name string expected" end
  if s:sub(-1) == "." then s = s:sub(1, -2) end
  if s == "" then return nil, "an empty host name" end
  if #s > 4 * MAX_NAME then return nil, "host name too long" end
  local a, err = idna.to_ascii(s)
  if not a then return nil, err end
  if #a > MAX_NAME then return nil, "host name longer than 253 bytes" end
  for label in (a .. "."):gmatch("([^.]*)%.") do
    if label == "" then return nil, "empty label in host name" end
    if #label > 63 then return nil, "label longer than 63 bytes" end
    if not label:match("^[%w_-]+$") then
      return nil, ("label %q holds characters a host name cannot"):format(label)
    end
  end
  return a
end

local function is_ip_literal(s)
  return s:find(":", 1, true) or s:match("^[%dxXa-fA-F.]+$") and ip.parse(s) ~= nil
end

-- parse_port(s) -> lo, hi or nil, why
local function parse_port(s)
  local lo, hi = s:match("^(%d+)%-(%d+)$")
  if not lo then lo = s:match("^(%d+)$"); hi = lo end
  if not lo or #lo > 5 or #hi > 5 then return nil, ("%q is not a port or a port range"):format(s) end
  lo, hi = tonumber(lo), tonumber(hi)
  if lo < 1 or hi > 65535 or lo > hi then return nil, ("port range %s is not within 1-65535"):format(s) end
  return lo, hi
end

-- parse_entry(s) -> { kind = "name"|"suffix"|"cidr", name/suffix/cidr,
-- port_lo, port_hi, text }, or nil, why.
function M.parse_entry(s)
  if type(s) ~= "string" or s == "" then return nil, "a non-empty string expected" end
  if s:find("[%s%z]") then return nil, "contains white space or NUL" end
  local host, port = s, nil
  local b, rest = s:match("^%[([^%]]+)%](.*)$")
  if b then
    host = b
    if rest ~= "" then
      port = rest:match("^:(.+)$")
      if not port then return nil, "after ']' only ':port' may follow" end
    end
  else
    local colons = select(2, s:gsub(":", ""))
    if colons == 1 then host, port = s:match("^(.*):(.*)$") end
    -- more than one ':' without brackets: an IPv6 address or CIDR, no port
  end
  local e = { text = s, port_lo = 1, port_hi = 65535 }
  if port then
    local lo, hi = parse_port(port)
    if not lo then return nil, hi end
    e.port_lo, e.port_hi = lo, hi
  end
  if host == "" then return nil, "no host" end
  local first = host:sub(1, 1)
  if host:find("/", 1, true) or b or host:find(":", 1, true) then
    local c, err = ip.parse_cidr(host)
    if not c then return nil, err end
    e.kind, e.cidr = "cidr", c
    return e
  end
  if host:match("^[%d.]+$") or (host:match("^0[xX]") and ip.parse(host)) then
    -- All digits and dots is an address (in some spelling) or nothing:
    -- "1.2.3.4.5" is no name a resolver would look up.
    local c, err = ip.parse_cidr(host)
    if not c then return nil, err end
    e.kind, e.cidr = "cidr", c
    return e
  end
  if first == "*" then
    if host:sub(2, 2) ~= "." then return nil, "a wildcard is a whole leftmost label: '*.example.org'" end
    local suffix, err = M.normalize_host(host:sub(3))
    if not suffix then return nil, err end
    if host:find("*", 2, true) then return nil, "only one wildcard, as the leftmost label" end
    e.kind, e.suffix = "suffix", suffix
    e.dotted = "." .. suffix
    return e
  end
  if host:find("*", 1, true) then return nil, "a wildcard is a whole leftmost label: '*.example.org'" end
  local name, err = M.normalize_host(host)
  if not name then return nil, err end
  e.kind, e.name = "name", name
  return e
end

-- host(pattern, name) -> whether the DNS entry pattern matches name.
function M.host(pattern, name)
  local e = M.parse_entry(pattern)
  local n = M.normalize_host(name)
  if not e or not n or e.kind == "cidr" then return false end
  if e.kind == "name" then return n == e.name end
  return #n > #e.dotted and n:sub(-#e.dotted) == e.dotted
end

local Matcher = {}
Matcher.__index = Matcher

-- compile(list, what) -> Matcher.  Raises an InvalidArgument table (of
-- sbx.errors) naming what[i] and why.
function M.compile(list, what)
  what = what or "list"
  local errors = require "sbx.errors"
  if type(list) ~= "table" then
    errors.raise(errors.InvalidArgument(what, "an array of host, address or CIDR strings expected"))
  end
  local m = setmetatable({ names = {}, suffixes = {}, cidrs = {}, n = 0 }, Matcher)
  for i, s in ipairs(list) do
    local e, err = M.parse_entry(s)
    if not e then
      errors.raise(errors.InvalidArgument(what, ("entry %d (%s): %s"):format(i, tostring(s), err)))
    end
    if e.kind == "name" then
      local l = m.names[e.name] or {}
      l[#l + 1] = e
      m.names[e.name] = l
    elseif e.kind == "suffix" then
      m.suffixes[#m.suffixes + 1] = e
    else
      m.cidrs[#m.cidrs + 1] = e
    end
    m.n = m.n + 1
  end
  return m
end

local function port_ok(e, port)
  if port == nil then return e.port_lo == 1 and e.port_hi == 65535 end
  return port >= e.port_lo and port <= e.port_hi
end

-- match_name(name, port) -> entry text or nil.  name must be normalized.
function Matcher:match_name(name, port)
  local l = self.names[name]
  if l then
    for _, e in ipairs(l) do
      if port_ok(e, port) then return e.text end
    end
  end
  for _, e in ipairs(self.suffixes) do
    local d = e.dotted
    if #name > #d and name:sub(-#d) == d and port_ok(e, port) then return e.text end
  end
  return nil
end

-- match_addr(addr, port) -> entry text or nil; addr: string or parsed.
-- Unparseable addresses match nothing (callers refuse them before).
function Matcher:match_addr(addr, port)
  if type(addr) == "string" then addr = ip.parse(addr) end
  if type(addr) ~= "table" then return nil end
  local inner = ip.unwrap(addr)
  for _, e in ipairs(self.cidrs) do
    if port_ok(e, port) and (ip.in_cidr(addr, e.cidr) or (inner and ip.in_cidr(inner, e.cidr))) then
      return e.text
    end
  end
  return nil
end

-- match(host, port, addrs) -> the first entry matching the host (a name
-- or an address literal) or any of addrs; nil when none does.
function Matcher:match(host, port, addrs)
  if host ~= nil then
    local a = is_ip_literal(host) and ip.parse(host)
    if a then
      local hit = self:match_addr(a, port)
      if hit then return hit end
    else
      local n = M.normalize_host(host)
      if n then
        local hit = self:match_name(n, port)
        if hit then return hit end
      end
    end
  end
  for _, a in ipairs(addrs or {}) do
    local hit = self:match_addr(a, port)
    if hit then return hit end
  end
  return nil
end

M.Matcher = Matcher
M.is_ip_literal = is_ip_literal

return M

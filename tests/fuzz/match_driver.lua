-- match_driver.lua: the properties fuzz_match.c checks on each input.
--
-- The input is split on newlines: every line but the last is an entry of
-- a deny list, the last line is a host (a name or an address literal),
-- optionally followed by a space and a port.  Checked:
--   * ip.parse / ip.parse_cidr / match.normalize_host / match.parse_entry
--     return a value or nil, why (a string); they never raise;
--   * ip: an address that parses prints (ip.tostring) to a canonical text
--     that parses to the same address, and prints the same again;
--     unwrap gives nil or an IPv4 address;
--   * normalize_host is idempotent, ignores ASCII case and one trailing
--     dot;
--   * match.compile raises only an InvalidArgument table naming the list;
--   * a host name a list denies stays denied when its ASCII letters change
--     case or a trailing dot is added; an address literal a list denies
--     stays denied in its canonical spelling and when bracketed (IPv6).
local match = require "sbx.match"
local ip = require "sbx.match.ip"
local errors = require "sbx.errors"

local function check(cond, fmt, ...)
  if not cond then error(("property: " .. fmt):format(...), 2) end
end

local function answer(what, v, why)
  check(v ~= nil or type(why) == "string", "%s returned nil without a reason", what)
  return v
end

local function same_addr(a, b)
  if a.v ~= b.v then return false end
  if a.v == 4 then return a.n == b.n end
  for i = 1, 8 do if a.g[i] ~= b.g[i] then return false end end
  return true
end

local function check_ip(s)
  local a = answer("ip.parse", ip.parse(s))
  if a then
    local t = ip.tostring(a)
    local b = ip.parse(t)
    check(b and same_addr(a, b), "ip.tostring(%q) = %q does not parse back", s, t)
    check(ip.tostring(b) == t, "ip.tostring is not canonical for %q", s)
    local u = ip.unwrap(a)
    check(u == nil or (u.v == 4 and u.n >= 0 and u.n < 2 ^ 32), "unwrap(%q) is no IPv4 address", s)
  end
  answer("ip.parse_cidr", ip.parse_cidr(s))
end

local function check_name(s)
  local n = answer("normalize_host", match.normalize_host(s))
  if not n then return end
  check(match.normalize_host(n) == n, "normalize_host not idempotent on %q", s)
  check(match.normalize_host(s:upper()) == n, "normalize_host(%q) depends on case", s)
  if s:sub(-1) ~= "." then
    check(match.normalize_host(s .. ".") == n, "normalize_host(%q) changes with a trailing dot", s)
  end
end

return function(input)
  if #input > 4096 then return end
  local lines = {}
  for l in (input .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local last = table.remove(lines)
  local host, port = last:match("^(.-) (%d+)$")
  if not host then host = last end
  port = port and tonumber(port)
  if port and (port < 1 or port > 65535) then port = nil end

  check_ip(host)
  check_name(host)
  for _, l in ipairs(lines) do
    check_ip(l)
    answer("parse_entry", match.parse_entry(l))
  end

  local ok, m = pcall(match.compile, lines, "deny")
  if not ok then
    check(errors.is(m, "InvalidArgument"), "compile raised %s", tostring(m))
    check(m.option == "deny", "compile's error names %s, not the list", tostring(m.option))
    return
  end
  local hit = m:match(host, port)
  if not hit then return end
  if match.is_ip_literal(host) and ip.parse(host) then
    local a = ip.parse(host)
    local canon = ip.tostring(a)
    check(m:match(canon, port), "%q denied but its canonical form %q is not", host, canon)
    if a.v == 6 then
      check(m:match("[" .. canon .. "]", port), "%q denied but [%s] is not", host, canon)
    end
    -- the resolved address passed as addrs is denied too
    check(m:match(nil, port, { a }), "%q denied as a host but not as an address", host)
  else
    check(m:match(host:upper(), port), "%q denied but %q is not", host, host:upper())
    check(m:match(host:lower(), port), "%q denied but %q is not", host, host:lower())
    if host:sub(-1) ~= "." then
      check(m:match(host .. ".", port), "%q denied but %q is not", host, host .. ".")
    end
  end
end

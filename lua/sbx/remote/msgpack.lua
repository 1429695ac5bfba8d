-- sbx.remote.msgpack: the MessagePack subset the remote API uses, in Lua.
--
--   encode(v) -> string      nil, booleans, numbers (integers as ints,
--                            others as float64), strings (as str), tables
--                            (a non-empty sequence 1..n or a table with
--                            metatable __array as an array, else a map
--                            with string keys)
--   decode(s, pos) -> v, next_pos | nil (incomplete) | raises on bad data
--                            bin and str both decode to strings; maps to
--                            tables (nil values dropped)

local bit = require "bit"
local ffi = require "ffi"

local M = {}

local char, byte, concat = string.char, string.byte, table.concat

local dbl = ffi.new("double[1]")
local dbl_bytes = ffi.cast("uint8_t *", dbl)

local function be(n, nbytes)
  local t = {}
  for i = nbytes, 1, -1 do
    t[i] = char(n % 256)
    n = math.floor(n / 256)
  end
  return concat(t)
end

local function enc(v, out)
  local tv = type(v)
  if tv == "nil" then
    out[#out + 1] = "\192"
  elseif tv == "boolean" then
    out[#out + 1] = v and "\195" or "\194"
  elseif tv == "number" then
    if v == math.floor(v) and v >= -2^53 and v <= 2^53 then
      if v >= 0 then
        if v < 128 then out[#out + 1] = char(v)
        elseif v < 2^16 then out[#out + 1] = "\205" .. be(v, 2)
        elseif v < 2^32 then out[#out + 1] = "\206" .. be(v, 4)
        else out[#out + 1] = "\207" .. be(v, 8) end
      else
        if v >= -32 then out[#out + 1] = char(256 + v)
        elseif v >= -2^31 then out[#out + 1] = "\210" .. be(2^32 + v, 4)
        else
          local hi = math.floor(v / 2^32)
          out[#out + 1] = "\211" .. be(2^32 + hi, 4) .. be(v - hi * 2^32, 4)
        end
      end
    else
      dbl[0] = v
      local b = {}
      for i = 7, 0, -1 do b[#b + 1] = char(dbl_bytes[i]) end
      out[#out + 1] = "\203" .. concat(b)
    end
  elseif tv == "string" then
    local n = #v
    if n < 32 then out[#out + 1] = char(0xa0 + n)
    elseif n < 256 then out[#out + 1] = "\217" .. char(n)
    elseif n < 65536 then out[#out + 1] = "\218" .. be(n, 2)
    else out[#out + 1] = "\219" .. be(n, 4) end
    out[#out + 1] = v
  elseif tv == "table" then
    local mt = getmetatable(v)
    local n = #v
    local is_array = mt and mt.__array
    if not is_array and n > 0 then
      local count = 0
      for _ in pairs(v) do count = count + 1 end
      is_array = count == n
    end
    if is_array then
      if n < 16 then out[#out + 1] = char(0x90 + n)
      elseif n < 65536 then out[#out + 1] = "\220" .. be(n, 2)
      else out[#out + 1] = "\221" .. be(n, 4) end
      for i = 1, n do enc(v[i], out) end
    else
      local keys = {}
      for k in pairs(v) do
        if type(k) ~= "string" then error("msgpack: map keys must be strings, got " .. type(k), 0) end
        keys[#keys + 1] = k
      end
      table.sort(keys)
      local m = #keys
      if m < 16 then out[#out + 1] = char(0x80 + m)
      elseif m < 65536 then out[#out + 1] = "\222" .. be(m, 2)
      else out[#out + 1] = "\223" .. be(m, 4) end
      for _, k in ipairs(keys) do enc(k, out) enc(v[k], out) end
    end
  else
    error("msgpack: cannot encode a " .. tv, 0)
  end
end

function M.encode(v)
  local out = {}
  enc(v, out)
  return concat(out)
end

local INCOMPLETE = {}

local function uint(s, pos, n)
  if pos + n - 1 > #s then error(INCOMPLETE) end
  local v = 0
  for i = pos, pos + n - 1 do v = v * 256 + byte(s, i) end
  return v, pos + n
end

local dec

local function dec_str(s, pos, n)
  if pos + n - 1 > #s then error(INCOMPLETE) end
  return s:sub(pos, pos + n - 1), pos + n
end

local function dec_array(s, pos, n, depth)
  local t = {}
  for i = 1, n do t[i], pos = dec(s, pos, depth + 1) end
  return t, pos
end

local function dec_map(s, pos, n, depth)
  local t = {}
  for _ = 1, n do
    local k, v
    k, pos = dec(s, pos, depth + 1)
    v, pos = dec(s, pos, depth + 1)
    if type(k) ~= "string" then error("msgpack: non-string map key", 0) end
    if v ~= nil then t[k] = v end
  end
  return t, pos
end

dec = function(s, pos, depth)
  if depth > 64 then error("msgpack: nested too deep", 0) end
  if pos > #s then error(INCOMPLETE) end
  local b = byte(s, pos)
  pos = pos + 1
  if b < 0x80 then return b, pos end
  if b >= 0xe0 then return b - 256, pos end
  if b >= 0xa0 and b < 0xc0 then return dec_str(s, pos, b - 0xa0) end
  if b >= 0x90 and b < 0xa0 then return dec_array(s, pos, b - 0x90, depth) end
  if b >= 0x80 and b < 0x90 then return dec_map(s, pos, b - 0x80, depth) end
  if b == 0xc0 then return nil, pos end
  if b == 0xc2 then return false, pos end
  if b == 0xc3 then return true, pos end
  local n
  if b == 0xc4 or b == 0xd9 then n, pos = uint(s, pos, 1) return dec_str(s, pos, n) end
  if b == 0xc5 or b == 0xda then n, pos = uint(s, pos, 2) return dec_str(s, pos, n) end
  if b == 0xc6 or b == 0xdb then n, pos = uint(s, pos, 4) return dec_str(s, pos, n) end
  if b == 0xcc then return uint(s, pos, 1) end
  if b == 0xcd then return uint(s, pos, 2) end
  if b == 0xce then return uint(s, pos, 4) end
  if b == 0xcf then return uint(s, pos, 8) end
  if b == 0xd0 then n, pos = uint(s, pos, 1) return n >= 2^7 and n - 2^8 or n, pos end
  if b == 0xd1 then n, pos = uint(s, pos, 2) return n >= 2^15 and n - 2^16 or n, pos end
  if b == 0xd2 then n, pos = uint(s, pos, 4) return n >= 2^31 and n - 2^32 or n, pos end
  if b == 0xd3 then
    if pos + 7 > #s then error(INCOMPLETE) end
    local hi = uint(s, pos, 4)
    local lo = uint(s, pos + 4, 4)
    if hi >= 2^31 then return (hi - 2^32) * 2^32 + lo, pos + 8 end
    return hi * 2^32 + lo, pos + 8
  end
  if b == 0xca then
    if pos + 3 > #s then error(INCOMPLETE) end
    local f = ffi.new("float[1]")
    local fb = ffi.cast("uint8_t *", f)
    for i = 0, 3 do fb[3 - i] = byte(s, pos + i) end
    return tonumber(f[0]), pos + 4
  end
  if b == 0xcb then
    if pos + 7 > #s then error(INCOMPLETE) end
    for i = 0, 7 do dbl_bytes[7 - i] = byte(s, pos + i) end
    return tonumber(dbl[0]), pos + 8
  end
  if b == 0xdc then n, pos = uint(s, pos, 2) return dec_array(s, pos, n, depth) end
  if b == 0xdd then n, pos = uint(s, pos, 4) return dec_array(s, pos, n, depth) end
  if b == 0xde then n, pos = uint(s, pos, 2) return dec_map(s, pos, n, depth) end
  if b == 0xdf then n, pos = uint(s, pos, 4) return dec_map(s, pos, n, depth) end
  error(("msgpack: unsupported type byte 0x%02x"):format(b), 0)
end

-- decode(s, pos) -> value, next_pos; nil, nil when s holds only part of a value.
function M.decode(s, pos)
  local ok, v, npos = pcall(dec, s, pos or 1, 0)
  if ok then return v, npos end
  if v == INCOMPLETE then return nil, nil end
  error(v, 0)
end

M.array_mt = { __array = true }
local _ = bit

return M

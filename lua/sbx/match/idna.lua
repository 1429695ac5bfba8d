-- sbx.match.idna: host names in A-label form (IDNA), for the DNS matchers.
--
-- Names are compared in the form DNS carries them: ASCII, lowercase, each
-- non-ASCII label encoded with Punycode (RFC 3492) behind "xn--".  This is
-- deliberately NOT full IDNA2008/UTS #46: the only mapping applied to
-- U-labels is lowercasing (ASCII, Latin-1, Greek and Cyrillic capitals);
-- no NFC normalization, no width folding, no validity tables.  A name that
-- would need more (e.g. a decomposed "e" + combining accent) encodes to a
-- different A-label than its composed spelling and so does not match a
-- pattern written the other way: write patterns in A-label form ("xn--...")
-- when in doubt; the proxy compares what the client sends on the wire.
--
--   idna.punycode_encode(codepoints) -> ASCII string (RFC 3492 section 6.3)
--   idna.utf8_codepoints(s)          -> array of code points, or nil, err
--   idna.to_ascii_label(label)       -> A-label, or nil, err
--   idna.to_ascii(name)              -> lowercase A-label name, or nil, err

local M = {}

local BASE, TMIN, TMAX, SKEW, DAMP = 36, 1, 26, 38, 700
local INITIAL_BIAS, INITIAL_N = 72, 128
local MAXINT = 2 ^ 31 - 1

local function digit(d)
  -- 0..25 -> a..z, 26..35 -> 0..9
  if d < 26 then return string.char(97 + d) end
  return string.char(22 + d)
end

local function adapt(delta, numpoints, first)
  delta = first and math.floor(delta / DAMP) or math.floor(delta / 2)
  delta = delta + math.floor(delta / numpoints)
  local k = 0
  while delta > math.floor(((BASE - TMIN) * TMAX) / 2) do
    delta = math.floor(delta / (BASE - TMIN))
    k = k + BASE
  end
  return k + math.floor(((BASE - TMIN + 1) * delta) / (delta + SKEW))
end

-- punycode_encode(cps) -> the Punycode string of the code points (without
-- the "xn--" prefix), or nil, "overflow".
function M.punycode_encode(cps)
  local out = {}
  local b = 0
  for _, c in ipairs(cps) do
    if c < 128 then out[#out + 1] = string.char(c); b = b + 1 end
  end
  local h = b
  if b > 0 then out[#out + 1] = "-" end
  local n, delta, bias = INITIAL_N, 0, INITIAL_BIAS
  while h < #cps do
    local m = math.huge
    for _, c in ipairs(cps) do
      if c >= n and c < m then m = c end
    end
    if (m - n) > math.floor((MAXINT - delta) / (h + 1)) then return nil, "overflow" end
    delta = delta + (m - n) * (h + 1)
    n = m
    for _, c in ipairs(cps) do
      if c < n then
        delta = delta + 1
        if delta > MAXINT then return nil, "overflow" end
      end
      if c == n then
        local q, k = delta, BASE
        while true do
          local t = k <= bias and TMIN or (k >= bias + TMAX and TMAX or k - bias)
          if q < t then break end
          out[#out + 1] = digit(t + (q - t) % (BASE - t))
          q = math.floor((q - t) / (BASE - t))
          k = k + BASE
        end
        out[#out + 1] = digit(q)
        bias = adapt(delta, h + 1, h == b)
        delta = 0
        h = h + 1
      end
    end
    delta = delta + 1
    n = n + 1
  end
  return table.concat(out)
end

-- utf8_codepoints(s) -> code points of a strict UTF-8 string (no overlong
-- forms, no surrogates, nothing above U+10FFFF), or nil, why.
function M.utf8_codepoints(s)
  local cps, i, n = {}, 1, #s
  while i <= n do
    local c = s:byte(i)
    local len, min, cp
    if c < 0x80 then len, cp, min = 1, c, 0
    elseif c >= 0xC2 and c <= 0xDF then len, cp, min = 2, c - 0xC0, 0x80
    elseif c >= 0xE0 and c <= 0xEF then len, cp, min = 3, c - 0xE0, 0x800
    elseif c >= 0xF0 and c <= 0xF4 then len, cp, min = 4, c - 0xF0, 0x10000
    else return nil, ("invalid UTF-8 byte 0x%02x"):format(c) end
    if i + len - 1 > n then return nil, "truncated UTF-8 sequence" end
    for j = i + 1, i + len - 1 do
      local cc = s:byte(j)
      if cc < 0x80 or cc > 0xBF then return nil, "invalid UTF-8 continuation byte" end
      cp = cp * 64 + (cc - 0x80)
    end
    if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then
      return nil, "invalid UTF-8 code point"
    end
    cps[#cps + 1] = cp
    i = i + len
  end
  return cps
end

-- The only mapping: capitals to small letters in the scripts where that is
-- a fixed offset.
local function lower_cp(c)
  if c >= 0x41 and c <= 0x5A then return c + 32 end
  if c >= 0xC0 and c <= 0xDE and c ~= 0xD7 then return c + 32 end  -- Latin-1
  if c >= 0x391 and c <= 0x3AB and c ~= 0x3A2 then return c + 32 end -- Greek
  if c >= 0x410 and c <= 0x42F then return c + 32 end              -- Cyrillic
  if c >= 0x400 and c <= 0x40F then return c + 80 end              -- Cyrillic Ѐ..Џ
  return c
end

-- to_ascii_label(label) -> the label lowercased, Punycode-encoded with
-- "xn--" when it is not ASCII; nil, why when it is not valid UTF-8.
function M.to_ascii_label(label)
  if not label:find("[\128-\255]") then return label:lower() end
  local cps, err = M.utf8_codepoints(label)
  if not cps then return nil, err end
  for i, c in ipairs(cps) do cps[i] = lower_cp(c) end
  local enc, perr = M.punycode_encode(cps)
  if not enc then return nil, perr end
  return "xn--" .. enc
end

-- to_ascii(name) -> the name with every label in A-label form.
function M.to_ascii(name)
  if not name:find("[\128-\255]") then return name:lower() end
  local out = {}
  for label in (name .. "."):gmatch("([^.]*)%.") do
    local a, err = M.to_ascii_label(label)
    if not a then return nil, err end
    out[#out + 1] = a
  end
  return table.concat(out, ".")
end

return M

-- sbx.pretty: values as the REPL shows them.
--
--   pretty.show(v [, opts]) -> string
--
-- Tables print nested (keys sorted, array part first), a table met again on
-- the way down prints as <cycle: table: 0x...>, nesting past opts.depth
-- (default 4) as {...}, more than opts.items (default 50) entries as
-- "... (N more)", strings longer than opts.width (default 200) elided in
-- the middle with their length.  Values with __tostring (sbx errors,
-- sessions) print through it.

local M = {}

local DEFAULTS = { depth = 4, items = 50, width = 200, indent = "  " }

local function quote(s, width)
  if #s > width then
    local keep = math.floor(width / 2)
    s = s:sub(1, keep) .. ("...(%d bytes)..."):format(#s) .. s:sub(-keep)
  end
  return ("%q"):format(s):gsub("\\\n", "\\n")
end

local function key_order(a, b)
  local ta, tb = type(a), type(b)
  if ta == tb and (ta == "string" or ta == "number") then return a < b end
  if ta == tb then return tostring(a) < tostring(b) end
  return ta < tb
end

local function has_tostring(v)
  local mt = getmetatable(v)
  return type(mt) == "table" and mt.__tostring ~= nil
end

local show

local function show_table(t, o, seen, level)
  if seen[t] then return ("<cycle: %s>"):format(tostring(t)) end
  if level > o.depth then return "{...}" end
  seen[t] = true
  local n, entries, total = #t, {}, 0
  local function add(text)
    total = total + 1
    if total <= o.items then entries[#entries + 1] = text end
  end
  for i = 1, n do add(show(t[i], o, seen, level + 1)) end
  local keys = {}
  for k in pairs(t) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then keys[#keys + 1] = k end
  end
  table.sort(keys, key_order)
  for _, k in ipairs(keys) do
    local ks = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k
      or "[" .. show(k, o, seen, level + 1) .. "]"
    add(ks .. " = " .. show(t[k], o, seen, level + 1))
  end
  seen[t] = nil
  if total == 0 then return "{}" end
  if total > o.items then entries[#entries + 1] = ("... (%d more)"):format(total - o.items) end
  -- Short and flat fits on one line; anything else gets a line per entry.
  local flat = "{ " .. table.concat(entries, ", ") .. " }"
  if #flat <= 72 and not flat:find("\n") then return flat end
  local pad = o.indent:rep(level)
  return "{\n" .. pad .. table.concat(entries, ",\n" .. pad) .. "\n" .. o.indent:rep(level - 1) .. "}"
end

function show(v, o, seen, level)
  local t = type(v)
  if t == "string" then return quote(v, o.width) end
  if t == "table" and not has_tostring(v) then return show_table(v, o, seen, level) end
  return tostring(v)
end

function M.show(v, opts)
  local o = {}
  for k, d in pairs(DEFAULTS) do o[k] = (opts and opts[k]) or d end
  if type(v) == "string" then return v end -- a string result prints as itself
  return show(v, o, {}, 1)
end

return M

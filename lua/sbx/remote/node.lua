-- sbx.remote.node: session ids that name the sbxd node holding them.
--
-- With `sbxd --advertise-url URL` every node is independent (no shared
-- state): a session lives on the node that opened it, and its public id
-- carries that node's endpoint so any node, and any client, can tell where
-- it lives without asking anyone:
--
--   <32 hex: the session's own id> "." <base64url of the advertise URL>
--
-- e.g. 3f0c...e1.aHR0cDovL3NieC0wLnNieDo3NDMz.  Without --advertise-url
-- (one node) ids stay the plain 32 hex characters.
--
--   node.endpoint_ok(url)   -> url normalized (no trailing "/") | nil, why
--   node.public_id(id, url) -> the public id (url nil: id itself)
--   node.split(pid)         -> id, endpoint (nil: no node part)
--                              | nil, why (malformed)
--
-- Used by sbxd (lua/sbx/server) to answer 421 for sessions of other nodes,
-- and by the client (sbx.remote) to check that a 421 sends it where the id
-- itself says, so a misbehaving node cannot redirect a client's token.

local bit = require "bit"

local M = {}

local ALPHA = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local DECODE = {}
for i = 1, #ALPHA do DECODE[ALPHA:byte(i)] = i - 1 end

local MAX_URL = 200

-- An endpoint a node may advertise: what sbx.remote can connect to, with
-- nothing that could end a header line or a path.
function M.endpoint_ok(url)
  if type(url) ~= "string" then return nil, "a string expected" end
  url = url:gsub("/$", "")
  if #url > MAX_URL then return nil, ("longer than %d characters"):format(MAX_URL) end
  if url:match("^https?://[%w%.%-]+:%d+$") or url:match("^https?://[%w%.%-]+$")
    or url:match("^https?://%[[%x:%.]+%]:%d+$") or url:match("^unix:/[%w%._%-/]+$") then
    return url
  end
  return nil, ("%q: expected http://HOST[:PORT], https://HOST[:PORT] or unix:/path"):format(url:sub(1, 80))
end

local function b64url(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = bit.bor(bit.lshift(a, 16), bit.lshift(b or 0, 8), c or 0)
    local k = b == nil and 2 or (c == nil and 3 or 4)
    for j = 1, k do
      local v = bit.band(bit.rshift(n, 6 * (4 - j)), 63)
      out[#out + 1] = ALPHA:sub(v + 1, v + 1)
    end
  end
  return table.concat(out)
end

local function unb64url(s)
  if #s % 4 == 1 then return nil end
  local out = {}
  for i = 1, #s, 4 do
    local n, k = 0, 0
    for j = i, math.min(i + 3, #s) do
      local v = DECODE[s:byte(j)]
      if not v then return nil end
      n = bit.bor(bit.lshift(n, 6), v)
      k = k + 1
    end
    n = bit.lshift(n, 6 * (4 - k))
    for j = 1, k - 1 do out[#out + 1] = string.char(bit.band(bit.rshift(n, 8 * (3 - j)), 255)) end
  end
  return table.concat(out)
end

function M.public_id(id, url)
  if not url then return id end
  return id .. "." .. b64url(url)
end

function M.split(pid)
  if type(pid) ~= "string" then return nil, "a string expected" end
  local id = pid:match("^(%x+)$")
  if id then return id, nil end
  local tag
  id, tag = pid:match("^(%x+)%.([%w_%-]+)$")
  if not id then return nil, "not a session id" end
  local url = unb64url(tag)
  local ok = url and M.endpoint_ok(url)
  -- Only the canonical spelling: one node, one tag.
  if not ok or ok ~= url or b64url(url) ~= tag then return nil, "the node part of the id is not an endpoint" end
  return id, url
end

return M

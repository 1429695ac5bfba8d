-- secrets.lua: the session option secrets, credentials the sandbox never
-- sees.  Each run gets NAME=<a placeholder unique to the session>; the
-- allow-list proxy (src/core/proxy_mitm*.c) terminates TLS for the
-- secret's hosts with a per-session CA and swaps the placeholder for the
-- value on the way out, and the value for the placeholder on the way back.
--
--   secrets = { NAME = { value = "...", hosts = { "api.example.com", "*.example.org" },
--                        header = "Authorization", format = "Bearer %s",
--                        insecure_http = false } }
--
-- No error, describe or log line ever quotes a value.
local errors = require "sbx.errors"

local M = {}

M.MAX = 64
M.MAX_VALUE_BYTES = 8192
M.MAX_HOSTS = 64
local KEYS = { value = true, hosts = true, header = true, format = true, insecure_http = true }

local function invalid(fmt, ...)
  errors.raise(errors.InvalidArgument("secrets", fmt:format(...)))
end

local function check_host(name, i, h)
  if type(h) ~= "string" then invalid("%s: hosts[%d] must be a string", name, i) end
  local bare = h:lower():gsub("%.$", "")
  local rest = bare:match("^%*%.(.+)$") or bare
  if #bare > 253 or not rest:match("^[%w][%w%-%.]*$") or rest:find("..", 1, true) then
    invalid("%s: hosts[%d] %q is not a host name (an exact name or *.domain)", name, i, h)
  end
  return bare
end

-- check(v) -> a list { { name, value, hosts, header, format, insecure_http } },
-- sorted by name, or raises InvalidArgument (never quoting a value).
function M.check(v)
  if type(v) ~= "table" then invalid("a map NAME = { value, hosts, ... } expected, got %s", type(v)) end
  local out = {}
  for name, s in pairs(v) do
    if type(name) ~= "string" or not name:match("^[A-Za-z_][A-Za-z0-9_]*$") or #name > 128 then
      invalid("names must be environment variable names, got %s", tostring(name))
    end
    if type(s) ~= "table" then invalid("%s: a table { value, hosts, ... } expected", name) end
    for k in pairs(s) do
      if not KEYS[k] then
        invalid("%s: unknown field %s (value, hosts, header, format, insecure_http)", name, tostring(k))
      end
    end
    if type(s.value) ~= "string" or s.value == "" or #s.value > M.MAX_VALUE_BYTES
      or s.value:find("[%c]") then
      invalid("%s: value must be a non-empty string of at most %d bytes without control characters",
        name, M.MAX_VALUE_BYTES)
    end
    if #s.value < 4 then invalid("%s: value is shorter than 4 bytes (it would be found in every response)", name) end
    if type(s.hosts) ~= "table" or #s.hosts == 0 or #s.hosts > M.MAX_HOSTS then
      invalid("%s: hosts must be a list of 1 to %d host names", name, M.MAX_HOSTS)
    end
    local hosts = {}
    for i, h in ipairs(s.hosts) do hosts[i] = check_host(name, i, h) end
    if s.header ~= nil and (type(s.header) ~= "string" or not s.header:match("^[!#$%%&'*+%-.^_`|~%w]+$")) then
      invalid("%s: header must be a header name", name)
    end
    if s.format ~= nil then
      if s.header == nil then invalid("%s: format needs header", name) end
      local _, n = tostring(s.format):gsub("%%s", "")
      if type(s.format) ~= "string" or n ~= 1 or s.format:find("[%c]") then
        invalid("%s: format must be a string with exactly one %%s", name)
      end
    end
    if s.insecure_http ~= nil and type(s.insecure_http) ~= "boolean" then
      invalid("%s: insecure_http must be a boolean", name)
    end
    out[#out + 1] = { name = name, value = s.value, hosts = hosts, header = s.header, format = s.format,
                      insecure_http = s.insecure_http == true }
  end
  if #out > M.MAX then invalid("at most %d secrets, got %d", M.MAX, #out) end
  table.sort(out, function(a, b) return a.name < b.name end)
  return out
end

-- with_placeholders(list, hex) -> list with .placeholder set: unique to the
-- session (hex: random), recognizable, and never a prefix of another one.
function M.with_placeholders(list, random_hex)
  for _, s in ipairs(list) do
    s.placeholder = "sbx_secret_" .. s.name .. "_" .. random_hex(16) .. "_"
  end
  return list
end

-- env(env, list) -> a copy of env with NAME = placeholder for each secret.
function M.env(env, list)
  local out = {}
  for k, v in pairs(env or {}) do out[k] = v end
  for _, s in ipairs(list) do out[s.name] = s.placeholder end
  return out
end

-- spec(list, ca) -> what the proxy takes (src/lua/proxy_secrets.c).  The
-- upstreams are verified against the system's trust store, or the file
-- SBX_SECRETS_UPSTREAM_CA names (a private upstream, the tests' fake internet).
function M.spec(list, ca)
  local l = {}
  for i, s in ipairs(list) do
    l[i] = { placeholder = s.placeholder, value = s.value, hosts = s.hosts, header = s.header,
             format = s.format, insecure_http = s.insecure_http }
  end
  local cafile = os.getenv("SBX_SECRETS_UPSTREAM_CA")
  return { ca = ca, list = l, upstream_ca_file = cafile ~= "" and cafile or nil }
end

-- public(list) -> what may be shown about the secrets: names, hosts, header.
function M.public(list)
  local out = {}
  for _, s in ipairs(list or {}) do
    out[s.name] = { hosts = s.hosts, header = s.header, insecure_http = s.insecure_http or nil }
  end
  return out
end

return M

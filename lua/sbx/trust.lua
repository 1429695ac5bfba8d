-- trust.lua: the certificate authorities a session's runs trust beyond the
-- host's: the session option ca_certs (a package mirror's or a TLS-inspecting
-- proxy's CA; sbx's own per-session CA joins through extra_pems).
--
-- The runs get one bundle, the host's system bundle plus those
-- certificates, generated read-only at sbx.core's SBX_CA_BUNDLE_PATH, and the
-- variables that make common clients use it (OpenSSL and curl, Python's
-- requests and pip, node and npm, git).  Only certificates enter the bundle:
-- a PEM that carries a private key is refused rather than filtered, since
-- whoever passed it did not mean to hand a key to the sandbox.
local errors = require "sbx.errors"

local M = {}

M.INSIDE_PATH = "/etc/sbx/ca-certificates.crt"
M.SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
M.MAX_CERTS = 32        -- entries of ca_certs (each may hold a chain)
M.MAX_PEM_BYTES = 65536 -- one entry's text
M.ENV_NAMES = {
  "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS",
  "GIT_SSL_CAINFO",
  -- npm's cafile replaces node's trust when a global npmrc sets one (some
  -- images point it at the system bundle): the environment's wins.
  "NPM_CONFIG_CAFILE",
}

local BEGIN, END = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"

local function invalid(fmt, ...)
  errors.raise(errors.InvalidArgument("ca_certs", fmt:format(...)))
end

-- The certificate blocks of one PEM text, re-emitted one per line break,
-- or an error naming what is wrong with entry i.
local function certificates(i, text)
  if text:find("PRIVATE KEY-----", 1, true) then
    invalid("entry %d holds a private key: only certificates belong in ca_certs", i)
  end
  local out, at = {}, 1
  while true do
    local b = text:find(BEGIN, at, true)
    if not b then break end
    local e = text:find(END, b, true)
    if not e then invalid("entry %d: a certificate block has no END line", i) end
    local body = text:sub(b + #BEGIN, e - 1):gsub("%s", "")
    if body == "" or body:find("[^%w%+/=]") or #body % 4 ~= 0 then
      invalid("entry %d: a certificate block is not base64", i)
    end
    local lines = {}
    for k = 1, #body, 64 do lines[#lines + 1] = body:sub(k, k + 63) end
    out[#out + 1] = BEGIN .. "\n" .. table.concat(lines, "\n") .. "\n" .. END .. "\n"
    at = e + #END
  end
  if #out == 0 then invalid("entry %d has no %s block", i, BEGIN) end
  return table.concat(out)
end

-- check(v, may_read_files) -> array of PEM texts, or raises InvalidArgument.
-- Each entry is PEM text or, when the caller is on this host
-- (may_read_files), the path of a PEM file; sbxd's clients send text only,
-- so no remote request names a file of the server's.
function M.check(v, may_read_files)
  if type(v) ~= "table" then invalid("a list of PEM certificates expected, got %s", type(v)) end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  if n ~= #v then invalid("a list (an array) of PEM certificates expected") end
  if n > M.MAX_CERTS then invalid("at most %d entries, got %d", M.MAX_CERTS, n) end
  local out = {}
  for i, entry in ipairs(v) do
    if type(entry) ~= "string" then invalid("entry %d: a string expected, got %s", i, type(entry)) end
    local text = entry
    if not entry:find(BEGIN, 1, true) then
      if not may_read_files then
        invalid("entry %d: PEM text expected (a file path is read only for on-device sessions)", i)
      end
      if entry:sub(1, 1) ~= "/" then invalid("entry %d: PEM text or an absolute file path expected", i) end
      local f, why = io.open(entry, "rb")
      if not f then invalid("entry %d: %s", i, tostring(why)) end
      text = f:read(M.MAX_PEM_BYTES + 1) or ""
      f:close()
    end
    if #text > M.MAX_PEM_BYTES then invalid("entry %d: longer than %d bytes", i, M.MAX_PEM_BYTES) end
    out[i] = certificates(i, text)
  end
  return out
end

-- bundle(pems) -> the host's system bundle followed by pems, or nil when
-- there is nothing to add (the runs then use the system's files as they are).
function M.bundle(pems)
  if not pems or #pems == 0 then return nil end
  local parts = {}
  local f = io.open(M.SYSTEM_BUNDLE, "rb")
  if f then
    local sys = f:read("*a") or ""
    f:close()
    if sys ~= "" and sys:sub(-1) ~= "\n" then sys = sys .. "\n" end
    parts[1] = sys
  end
  for _, p in ipairs(pems) do parts[#parts + 1] = p end
  return table.concat(parts)
end

-- env(env) -> a copy of env with each of ENV_NAMES pointing at the bundle,
-- unless env already sets it (the caller's choice wins).
function M.env(env)
  local out = {}
  for _, k in ipairs(M.ENV_NAMES) do out[k] = M.INSIDE_PATH end
  for k, v in pairs(env or {}) do out[k] = v end
  return out
end

return M

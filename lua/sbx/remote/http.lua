-- sbx.remote.http: HTTP/2 requests over libcurl's multi interface, through
-- the LuaJIT FFI.  One Conn per remote session: every request of that
-- session (and every run's stream) is multiplexed over one HTTP/2
-- connection (ALPN h2 for https://; for http:// and unix: an h2c Upgrade on
-- a first GET /healthz, see below).
--
-- Why not h2c with prior knowledge: Debian 12's libcurl 7.88.1 does not
-- send the second request on a reused prior-knowledge connection (the
-- transfer ends with nothing sent, or "Error in the HTTP2 framing layer").
-- An Upgrade-established h2c connection multiplexes correctly, so Conn
-- opens one with GET /healthz (no body: h2o upgrades only body-less
-- requests) and every later transfer multiplexes over it.
--
--   http.new(endpoint, opts) -> Conn   endpoint: "http://host:port",
--                                      "https://host:port" or "unix:/path";
--                                      opts: ca_file, insecure_tls,
--                                      connect_timeout_ms
--   conn:start(method, path, body, o) -> req   o: headers (array of
--                                      "Name: value"), on_data(chunk),
--                                      timeout_ms (0: none), body_offset
--                                      and body_len (send only that slice
--                                      of body)
--   conn:pump(timeout_ms)              drive transfers, wait up to
--                                      timeout_ms for something to happen
--   conn:wait(req)                     pump until req.done (or its whole
--                                      content-length arrived)
--   conn:finish(req)                   end a transfer whose answer is
--                                      complete by the caller's reckoning
--   conn:cancel(req)                   abort (an HTTP/2 RST_STREAM)
--   conn:request(method, path, body, o) -> status, body, content_type |
--                                      nil, reason (transport failure)
--
-- req fields: done, status (HTTP), error (transport failure reason, or
-- nil), content_type.  Nothing here raises for transport failures.

local ffi = require "ffi"
local jit = require "jit"

ffi.cdef [[
typedef void CURL;
typedef void CURLM;
struct curl_slist { char *data; struct curl_slist *next; };
typedef struct { int msg; CURL *easy_handle; union { void *whatever; int result; } data; } CURLMsg;
CURL *curl_easy_init(void);
int curl_easy_setopt(CURL *curl, int option, ...);
int curl_easy_getinfo(CURL *curl, int info, ...);
void curl_easy_cleanup(CURL *curl);
const char *curl_easy_strerror(int);
struct curl_slist *curl_slist_append(struct curl_slist *, const char *);
void curl_slist_free_all(struct curl_slist *);
CURLM *curl_multi_init(void);
int curl_multi_add_handle(CURLM *, CURL *);
int curl_multi_remove_handle(CURLM *, CURL *);
int curl_multi_perform(CURLM *, int *running);
int curl_multi_poll(CURLM *, void *extra_fds, unsigned int extra_nfds, int timeout_ms, int *numfds);
int curl_multi_timeout(CURLM *, long *timeout_ms);
CURLMsg *curl_multi_info_read(CURLM *, int *msgs_in_queue);
int curl_multi_setopt(CURLM *, int option, ...);
int curl_multi_cleanup(CURLM *);
const char *curl_multi_strerror(int);
]]

local M = {}
-- Seconds a connection may sit idle and still be reused: below sbxd's
-- default idle timeout of 10 s.
M.IDLE_REUSE_S = 5

local lib
local function curl()
  if lib then return lib end
  local ok, l = pcall(ffi.load, "curl")
  if not ok then ok, l = pcall(ffi.load, "libcurl.so.4") end
  if not ok then return nil, "libcurl cannot be loaded (apt-get install libcurl4-openssl-dev)" end
  lib = l
  return lib
end

local OPT = {
  URL = 10002, WRITEFUNCTION = 20011, WRITEDATA = 10001, HTTPHEADER = 10023,
  POSTFIELDSIZE_LARGE = 30120, COPYPOSTFIELDS = 10165, POSTFIELDS = 10015, CUSTOMREQUEST = 10036,
  HTTP_VERSION = 84, UNIX_SOCKET_PATH = 10231, NOSIGNAL = 99, CONNECTTIMEOUT_MS = 156,
  TIMEOUT_MS = 155, CAINFO = 10065, SSL_VERIFYPEER = 64, SSL_VERIFYHOST = 81, PIPEWAIT = 237,
  HTTPGET = 80, ERRORBUFFER = 10010, POST = 47, HEADERFUNCTION = 20079, HEADERDATA = 10029,
  MAXAGE_CONN = 288,
}
-- Plain-text endpoints: h2c by Upgrade on a connection's first request
-- (Debian 12's libcurl 7.88 fails the second request of a reused
-- prior-knowledge connection to h2o with "Error in the HTTP2 framing layer").
local HTTP_VERSION_2_0, HTTP_VERSION_2TLS = 3, 4
local INFO_RESPONSE_CODE, INFO_CONTENT_TYPE = 0x200002, 0x100012
local MOPT_PIPELINING, PIPE_MULTIPLEX = 3, 2
local MSG_DONE = 1

local active = {}    -- id -> req
local next_id = 0

local write_cb = ffi.cast("size_t (*)(char *, size_t, size_t, void *)", function(ptr, size, n, ud)
  local total = size * n
  local r = active[tonumber(ffi.cast("intptr_t", ud))]
  if r and not r.cancelled then
    if r.status == nil then
      local code = ffi.new("long[1]")
      lib.curl_easy_getinfo(r.easy, INFO_RESPONSE_CODE, code)
      r.status = tonumber(code[0])
    end
    r.received = r.received + total
    r.conn.busy = true
    local ok, err = pcall(r.on_data, ffi.string(ptr, total), r)
    if not ok then r.callback_error = err end
  end
  return total
end)

-- Response headers: the status line gives the status as soon as the
-- headers arrive (a run's stream may send no data for a long time).
local header_cb = ffi.cast("size_t (*)(char *, size_t, size_t, void *)", function(ptr, size, n, ud)
  local total = size * n
  local r = active[tonumber(ffi.cast("intptr_t", ud))]
  if r then
    local line = ffi.string(ptr, total)
    local code = line:match("^HTTP/[%d.]+ (%d%d%d)")
    if code then
      r.status = tonumber(code)
      if r.status == 100 then r.status = nil end
    end
    local len = line:match("^[Cc]ontent%-[Ll]ength:%s*(%d+)")
    if len then r.content_length = tonumber(len) end
  end
  return total
end)

local Conn = {}
Conn.__index = Conn

function M.new(endpoint, opts)
  opts = opts or {}
  local c, why = curl()
  if not c then return nil, why end
  local self = setmetatable({ opts = opts, reqs = {} }, Conn)
  if type(endpoint) ~= "string" then return nil, "endpoint: a string expected" end
  local unix = endpoint:match("^unix:(/.+)$")
  if unix then
    self.base, self.unix = "http://localhost", unix
  elseif endpoint:match("^https?://[^/]+$") or endpoint:match("^https?://[^/]+/$") then
    self.base = endpoint:gsub("/$", "")
    self.tls = endpoint:match("^https:") ~= nil
  else
    return nil, ("endpoint %q: expected http://HOST:PORT, https://HOST:PORT or unix:/path"):format(endpoint)
  end
  self.multi = c.curl_multi_init()
  c.curl_multi_setopt(self.multi, MOPT_PIPELINING, ffi.cast("long", PIPE_MULTIPLEX))
  local reqs = self.reqs
  ffi.gc(self.multi, function(m)
    -- Transfers still attached (a run nobody waited for) go with it.
    for id, r in pairs(reqs) do
      if r.easy ~= nil then
        c.curl_multi_remove_handle(m, r.easy)
        c.curl_easy_cleanup(r.easy)
        c.curl_slist_free_all(r.headers)
        r.easy = nil
      end
      active[id] = nil
      reqs[id] = nil
    end
    c.curl_multi_cleanup(m)
  end)
  if not self.tls then
    local r = self:start("GET", "/healthz", nil, { timeout_ms = self.opts.connect_timeout_ms or 5000 })
    self:wait(r)
    if r.error then return nil, "cannot reach " .. endpoint .. ": " .. r.error end
  end
  return self
end

local function setopt(e, opt, v)
  if type(v) == "number" then return lib.curl_easy_setopt(e, opt, ffi.cast("long", v)) end
  return lib.curl_easy_setopt(e, opt, v)
end

function Conn:start(method, path, body, o)
  o = o or {}
  next_id = next_id + 1
  local e = lib.curl_easy_init()
  local r = {
    id = next_id, easy = e, done = false, chunks = {}, method = method, path = path, received = 0,
    errbuf = ffi.new("char[256]"),
  }
  r.conn = self
  r.on_data = o.on_data or function(chunk, req) req.chunks[#req.chunks + 1] = chunk end
  setopt(e, OPT.URL, self.base .. path)
  if self.unix then setopt(e, OPT.UNIX_SOCKET_PATH, self.unix) end
  setopt(e, OPT.HTTP_VERSION, self.tls and HTTP_VERSION_2TLS or HTTP_VERSION_2_0)
  setopt(e, OPT.NOSIGNAL, 1)
  setopt(e, OPT.PIPEWAIT, 1)
  -- sbxd closes a connection idle for 10 s (--conn-idle-timeout-s): one
  -- idle this long is not reused, rather than found dead on use (a new one
  -- costs a connect and an upgrade).
  setopt(e, OPT.MAXAGE_CONN, M.IDLE_REUSE_S)
  setopt(e, OPT.CONNECTTIMEOUT_MS, self.opts.connect_timeout_ms or 5000)
  if o.timeout_ms and o.timeout_ms > 0 then setopt(e, OPT.TIMEOUT_MS, o.timeout_ms) end
  if self.opts.ca_file then setopt(e, OPT.CAINFO, self.opts.ca_file) end
  if self.opts.insecure_tls then
    setopt(e, OPT.SSL_VERIFYPEER, 0)
    setopt(e, OPT.SSL_VERIFYHOST, 0)
  end
  lib.curl_easy_setopt(e, OPT.ERRORBUFFER, r.errbuf)
  lib.curl_easy_setopt(e, OPT.WRITEFUNCTION, write_cb)
  lib.curl_easy_setopt(e, OPT.WRITEDATA, ffi.cast("void *", r.id))
  lib.curl_easy_setopt(e, OPT.HEADERFUNCTION, header_cb)
  lib.curl_easy_setopt(e, OPT.HEADERDATA, ffi.cast("void *", r.id))
  local hl = nil
  for _, h in ipairs(o.headers or {}) do hl = lib.curl_slist_append(hl, h) end
  hl = lib.curl_slist_append(hl, "Expect:")
  r.headers = hl
  lib.curl_easy_setopt(e, OPT.HTTPHEADER, hl)
  if body then
    -- curl reads the bytes from the Lua string itself (no copy: an upload
    -- chunk is a slice of the caller's data); r.body keeps the string
    -- alive until the transfer is removed from the multi handle.
    local off = o.body_offset or 0
    local len = o.body_len or (#body - off)
    assert(off >= 0 and len >= 0 and off + len <= #body, "body slice out of range")
    r.body = body
    lib.curl_easy_setopt(e, OPT.POSTFIELDSIZE_LARGE, ffi.cast("int64_t", len))
    lib.curl_easy_setopt(e, OPT.POSTFIELDS, ffi.cast("const char *", body) + off)
  end
  if method ~= "GET" and method ~= "POST" then
    setopt(e, OPT.CUSTOMREQUEST, method)
  elseif method == "GET" then
    setopt(e, OPT.HTTPGET, 1)
  elseif not body then
    setopt(e, OPT.POST, 1)
    lib.curl_easy_setopt(e, OPT.POSTFIELDSIZE_LARGE, ffi.cast("int64_t", 0))
    lib.curl_easy_setopt(e, OPT.COPYPOSTFIELDS, ffi.cast("const char *", ""))
  end
  active[r.id] = r
  self.reqs[r.id] = r
  local rc = lib.curl_multi_add_handle(self.multi, e)
  if rc ~= 0 then
    self:_finish(r, "curl_multi_add_handle: " .. ffi.string(lib.curl_multi_strerror(rc)))
  end
  return r
end

function Conn:_finish(r, err)
  if r.done then return end
  r.done = true
  r.error = err
  if r.status == nil or r.status == 0 then
    local code = ffi.new("long[1]")
    lib.curl_easy_getinfo(r.easy, INFO_RESPONSE_CODE, code)
    r.status = tonumber(code[0])
  end
  local ct = ffi.new("char *[1]")
  if lib.curl_easy_getinfo(r.easy, INFO_CONTENT_TYPE, ct) == 0 and ct[0] ~= nil then
    r.content_type = ffi.string(ct[0])
  end
  lib.curl_multi_remove_handle(self.multi, r.easy)
  lib.curl_easy_cleanup(r.easy)
  lib.curl_slist_free_all(r.headers)
  r.easy = nil
  active[r.id] = nil
  self.reqs[r.id] = nil
  if r.on_done then r.on_done(r) end
end

function Conn:pump(timeout_ms)
  local running = ffi.new("int[1]")
  local rc = lib.curl_multi_perform(self.multi, running)
  if rc ~= 0 then
    local why = ffi.string(lib.curl_multi_strerror(rc))
    for _, r in pairs(self.reqs) do self:_finish(r, "curl: " .. why) end
    return
  end
  local left = ffi.new("int[1]")
  local progressed = false
  while true do
    local msg = lib.curl_multi_info_read(self.multi, left)
    if msg == nil then break end
    if msg.msg == MSG_DONE then
      for _, r in pairs(self.reqs) do
        if r.easy == msg.easy_handle then
          local res = msg.data.result
          local err
          if res ~= 0 then
            local detail = ffi.string(r.errbuf)
            err = ffi.string(lib.curl_easy_strerror(res)) .. (detail ~= "" and (": " .. detail) or "")
          end
          self:_finish(r, err)
          progressed = true
          break
        end
      end
    end
  end
  if progressed or (timeout_ms or 0) <= 0 then return end
  -- curl may have work that no socket will announce (data of a stream it
  -- still has to deliver): its own timeout says so; never wait past it.
  local tmo = ffi.new("long[1]")
  lib.curl_multi_timeout(self.multi, tmo)
  local wait = timeout_ms
  if tmo[0] >= 0 and tmo[0] < wait then wait = tonumber(tmo[0]) end
  -- While data flows, poll in short slices: libcurl 7.88 can hold data
  -- it read for a stream (and the WINDOW_UPDATE the server waits for)
  -- without a socket event or timeout to say so, which would otherwise
  -- stall a stream for the whole poll.
  if self.busy and wait > 2 then wait = 2 end
  self.busy = false
  if wait > 0 then
    local nfds = ffi.new("int[1]")
    lib.curl_multi_poll(self.multi, nil, 0, wait, nfds)
  end
  lib.curl_multi_perform(self.multi, running)
end
jit.off(Conn.pump)

-- complete(r): the whole answer is here (content-length reached) even if
-- libcurl has not said so yet: libcurl 7.88 sometimes notices the end of
-- an HTTP/2 stream only at its next socket event, so waiting for its DONE
-- would cost a poll timeout.
function Conn:complete(r)
  if r.done then return true end
  if r.status and r.content_length and r.received >= r.content_length then
    self:_finish(r, nil)
    return true
  end
  return false
end

function Conn:wait(r, cond)
  while not self:complete(r) and not (cond and cond()) do self:pump(200) end
end

function Conn:finish(r)
  self:_finish(r, nil)
end

function Conn:cancel(r)
  if r.done then return end
  r.cancelled = true
  self:_finish(r, "cancelled")
  -- libcurl 7.88 queues the RST_STREAM of a removed transfer but writes
  -- it only when the connection is used again: use it (a cheap GET
  -- /healthz), so the server learns at once and kills the run.
  if not self.closing then
    local f = self:start("GET", "/healthz", nil, { timeout_ms = 2000 })
    self:wait(f)
  end
end

function Conn:request(method, path, body, o)
  local r = self:start(method, path, body, o)
  self:wait(r)
  if r.error then return nil, r.error end
  return r.status, table.concat(r.chunks), r.content_type
end

function Conn:close()
  local any = next(self.reqs) ~= nil
  self.closing = true
  for _, r in pairs(self.reqs) do self:cancel(r) end
  self.closing = false
  if any then
    local f = self:start("GET", "/healthz", nil, { timeout_ms = 2000 })
    self:wait(f)
  end
end

return M

-- sbx.server.files: PUT, GET and HEAD of .../files/{path}.
--
-- GET streams the file from an fd (src/server/handler.c, filesend.c),
-- never holding it whole; PUT writes on a thread (src/server/fileio.c)
-- while the loop serves others; PUT ?offset=N appends a chunk of an upload
-- (fileput.c).  Errors of Session:open_file answer by their code.

local errors = require "sbx.errors"
local answer = require "sbx.server.answer"
local loop = require "sbx.server.loop"

local reply, fail, from_error = answer.reply, answer.fail, answer.from_error
local now_ms, wait_fd = loop.now_ms, loop.wait_fd

local M = {}

M.file_io = nil -- sbxd's upload writer threads (src/server/fileio.c), set by sbx.server.init

local function unescape(s)
  return (s:gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

-- The query of PUT .../files/{path}: only offset=N (a decimal integer,
-- at most once).  -> offset (0 when absent) | nil, answer.
local MAX_OFFSET_DIGITS = 15 -- below 2^53: exact as a Lua number
local function put_offset(query)
  local offset
  for part in (query or ""):gmatch("[^&]+") do
    local k, v = part:match("^([^=]*)=?(.*)$")
    k = unescape(k)
    if k ~= "offset" then
      return nil, from_error(errors.InvalidArgument(k:sub(1, 64),
        ("unknown query parameter %q (PUT files takes only offset)"):format(k:sub(1, 64))))
    end
    if offset then
      return nil, from_error(errors.InvalidArgument("offset", "given more than once"))
    end
    v = unescape(v)
    if not v:match("^%d+$") then
      return nil, from_error(errors.InvalidArgument("offset",
        ("%q is not a decimal integer >= 0"):format(v:sub(1, 64))))
    end
    if #v:match("^0*(.-)$") > MAX_OFFSET_DIGITS then
      return nil, from_error(errors.InvalidArgument("offset",
        ("%s is out of range (at most %d digits)"):format(v:sub(1, 64), MAX_OFFSET_DIGITS)))
    end
    offset = tonumber(v)
  end
  return offset or 0
end

local function over_max_file(limits, bytes)
  return fail(413, "InvalidArgument", ("%d bytes is over the session's max_file_bytes (%d)"):format(
    bytes, limits.max_file_bytes), { option = "data" })
end

-- The status of an error of Session:open_file by its code (sbx.errors):
-- too large 413, missing 404; others by kind.
local OPEN_STATUS = { too_large = 413, not_found = 404 }

-- An error of Session:open_file as an answer (conflict: a missing file of
-- an append is 409 with size 0).
local function open_error(e, conflict)
  local status = type(e) == "table" and e.kind == "InvalidArgument" and OPEN_STATUS[e.code]
  if status == 404 and conflict then return conflict(0, tostring(e.message)) end
  local r = from_error(e)
  if status then r.status = status end
  return r
end

-- The writes of uploads run on threads of their own (src/server/fileio.c);
-- the handler waits for each on the loop.  A write outlasting this is
-- reported as failed (it still ends on its thread).
local FILE_IO_TIMEOUT_MS = 120000

local function finish_job(job, what)
  local ok, why = wait_fd(job:fd(), now_ms() + FILE_IO_TIMEOUT_MS)
  if not ok then return nil, "SandboxExecutionError", ("the %s did not finish (%s)"):format(what, tostring(why)) end
  return job:result()
end

-- Session:put_bytes's writer in sbxd.
local function put_off_loop(cs, rel, data, max_bytes)
  local job, kind, msg = M.file_io.put(cs, rel, data, max_bytes)
  if not job then return nil, kind, msg end
  return finish_job(job, "write")
end

-- PUT with offset N > 0: append the body to the file whose size is N
-- (src/server/fileput.c); any other size is 409 with the current size.
local function append(rec, path, offset, data)
  local function conflict(size, why)
    return fail(409, "Conflict", ("%s: cannot append at offset %d: %s"):format(path, offset, why),
      { path = path, offset = offset, size = size })
  end
  if offset + #data > rec.limits.max_file_bytes then return over_max_file(rec.limits, offset + #data) end
  local ok, fd = pcall(rec.s.open_file, rec.s, path)
  if not ok then return open_error(fd, conflict) end
  local job, jkind, jmsg = M.file_io.append(fd, offset, data)
  local done, kind, msg, size
  if job then
    done, kind, msg, size = finish_job(job, "append")
  else
    kind, msg = jkind, jmsg
  end
  if done then return reply(200, { path = path, size = kind, offset = offset }) end
  if kind == "Conflict" then return conflict(size, msg) end
  return from_error(kind == "InvalidArgument" and errors.InvalidArgument("path", msg)
    or errors.from_core(kind, msg))
end

function M.op(req, rec, path)
  path = unescape(path)
  if req.method == "PUT" then
    local offset, bad = put_offset(req.query)
    if not offset then return bad end
    -- A body object (src/server/fileio.c: #data is its length; a write
    -- job takes its bytes over, init.lua's handle frees the rest), or ""
    -- for none.
    local data = req.raw or ""
    if offset > 0 then return append(rec, path, offset, data) end
    if #data > rec.limits.max_file_bytes then return over_max_file(rec.limits, #data) end
    local ok, e = pcall(rec.s.put_bytes, rec.s, path, data, put_off_loop)
    if not ok then return from_error(e) end
    return reply(200, { path = path, size = #data, offset = 0 })
  end
  -- GET streams the file from an fd (handler.c), never holding it whole;
  -- HEAD answers its size only.
  local ok, data, size = pcall(rec.s.open_file, rec.s, path)
  if not ok then return open_error(data) end
  return { status = 200, file = { fd = data, size = size } }
end

return M

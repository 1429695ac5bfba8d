-- helpers.lua: shared tools of the API specs (api_spec, errors_spec,
-- files_spec, options_spec).
--
-- Specs load it with:
--   local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
--   local T = dofile(here .. "helpers.lua")
--
-- Under build/bin/sbxlua the sbx module and sbx.core are there already.
-- Under a plain `luajit /usr/bin/busted tests/spec/options_spec.lua` this
-- puts the source tree's lua/ on package.path, so the pure-Lua specs run
-- without a build; specs that need real sessions check T.has_core().

local M = {}

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
M.ROOT = (function()
  local p = io.popen("cd '" .. here .. "../..' && pwd")
  local root = p:read("*l")
  p:close()
  return root
end)()

if not pcall(require, "sbx.paths") then
  package.path = M.ROOT .. "/lua/?.lua;" .. M.ROOT .. "/lua/?/init.lua;" .. package.path
end

M.sbx = require "sbx"
M.errors = require "sbx.errors"

local core_ok, core = pcall(require, "sbx.core")

-- true when sbx.core (the C module) is loaded: real sessions can open.
function M.has_core()
  return core_ok
end

-- Milliseconds of a monotonic clock.
function M.now_ms()
  if core_ok then return core.monotonic_ms() end
  local ffi = require "ffi"
  pcall(ffi.cdef, [[typedef struct { long tv_sec; long tv_nsec; } sbx_api_timespec;
    int clock_gettime(int clk, sbx_api_timespec *ts);]])
  local ts = ffi.new("sbx_api_timespec")
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

-- Poll cond() every 50 ms until it is true or seconds have passed ->
-- true | false.  A deadline for a condition, never a timing assertion:
-- keep it generous (a loaded machine is slow, not wrong).
function M.wait_for(cond, seconds)
  local deadline = M.now_ms() + seconds * 1000
  repeat
    if cond() then return true end
    os.execute("sleep 0.05")
  until M.now_ms() > deadline
  return cond() and true or false
end

-- How many host processes have exactly this command line (pgrep -f -x).
function M.procs_exact(cmdline)
  local h = io.popen("pgrep -f -x '" .. cmdline:gsub("'", [['\'']]) .. "'")
  local n = 0
  for _ in h:lines() do n = n + 1 end
  h:close()
  return n
end

-- catch(fn, ...) -> the error fn raised; fails the test when fn returns.
function M.catch(fn, ...)
  local ok, e = pcall(fn, ...)
  assert(not ok, "expected an error, the call returned normally")
  return e
end

-- expect(kind, fn, ...) -> the sbx error of that kind fn raised; fails the
-- test (showing what came instead) otherwise.
function M.expect(kind, fn, ...)
  local e = M.catch(fn, ...)
  local got = type(e) == "table" and tostring(e) .. " (" .. tostring(e.kind) .. ")" or tostring(e)
  assert(M.errors.is(e, kind), ("expected %s, got %s"):format(kind, got))
  return e
end

-- A temporary host directory, removed by M.cleanup().  base: where
-- (default /tmp; binds need another place, as every run gets its own /tmp).
local tmpdirs = {}
function M.tmpdir(base)
  local p = io.popen("mktemp -d " .. (base or "/tmp") .. "/sbx-spec.XXXXXX")
  local d = p:read("*l")
  p:close()
  tmpdirs[#tmpdirs + 1] = d
  return d
end

function M.cleanup()
  for _, d in ipairs(tmpdirs) do os.execute("rm -rf '" .. d .. "'") end
  tmpdirs = {}
end

-- Read a host file (nil when missing).
function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  return data
end

-- What to show when a result is not what a test wanted.
function M.show(r)
  if type(r) ~= "table" then return tostring(r) end
  return ("returncode=%s reason=%q stdout=%q stderr=%q"):format(tostring(r.returncode),
    tostring(r.termination_reason), tostring(r.stdout):sub(1, 400), tostring(r.stderr):sub(1, 400))
end

return M

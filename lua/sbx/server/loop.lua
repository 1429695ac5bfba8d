-- sbx.server.loop: how sbxd's Lua code waits without stopping the loop.
--
-- handle(req) runs as a coroutine that src/server/task.c resumes; where it
-- would block it yields instead (issue 14: the loop never waits).

local M = {}

function M.now_ms()
  local ok, core = pcall(require, "sbx.core")
  if ok and core.monotonic_ms then return core.monotonic_ms() end
  return os.time() * 1000
end

-- The coroutines task.c runs handle(req) in: only they may yield to the loop.
local request_cos = setmetatable({}, { __mode = "k" })

function M.enter_request()
  local co = coroutine.running()
  if co then request_cos[co] = true end
end

function M.in_request()
  local co = coroutine.running()
  return co ~= nil and request_cos[co] == true
end

-- wait_fd(fd, deadline_ms) -> true | nil, "timeout" | "cancelled": until
-- fd is readable, the loop serving everyone else meanwhile; with fd nil,
-- until the loop has had a turn (before a costly step: task.c).
function M.wait_fd(fd, deadline_ms)
  if not M.in_request() then return nil, "not inside a request" end
  if fd == nil then return coroutine.yield("turn", 0, deadline_ms) end
  return coroutine.yield("fd", fd, deadline_ms)
end

return M

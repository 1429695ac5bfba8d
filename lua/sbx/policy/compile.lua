-- sbx.policy.compile: a policy file to one generation.  Reads the file
-- (bounded), runs the chunk in the sandbox (sbx.policy.sandbox), checks
-- what it returns (sbx.policy.schema) and compiles its network lists.
-- A generation is the normalized policy plus its hooks, their sandbox
-- state and the log sink.

local errors = require "sbx.errors"
local match = require "sbx.match"
local files = require "sbx.policy.files"
local sandbox = require "sbx.policy.sandbox"
local schema = require "sbx.policy.schema"

local M = {}

-- Largest policy file accepted.
M.MAX_BYTES = 1024 * 1024

local deny = schema.load_denied

-- run_chunk(path, source, env, state) -> the value the chunk returns, or raises.
local function run_chunk(path, source, env, state)
  if source:sub(1, 1) == "\27" then
    errors.raise(deny(path, "precompiled bytecode is refused, give the Lua source"))
  end
  local chunk, err = loadstring(source, "@" .. path)
  if not chunk then errors.raise(deny(path, err)) end
  setfenv(chunk, env)
  -- Count hooks do not fire in JIT-compiled traces: interpret the chunk and
  -- every function defined in it (the hooks).
  if jit then jit.off(chunk, true) end
  local res = sandbox.guard(state, sandbox.INSTRUCTION_BUDGET, sandbox.MAX_HOOK_MS * 5, chunk)
  if res.exceeded then errors.raise(deny(path, res[2])) end
  if not res[1] then errors.raise(deny(path, tostring(res[2]))) end
  return res[2]
end

-- compile(path, opts) -> a generation: the normalized policy with its hooks
-- and sandbox.  Raises PolicyDenied (rule "policy.load").  opts: log (the
-- sink of the policy's log lines), source (the file's text, already read:
-- sbxd's policy worker compiles exactly what the loop did), hook_runner
-- (who calls the hooks: see sbx.policy.hooks).
function M.compile(path, opts)
  opts = opts or {}
  local file = files.resolve(path)
  local source = opts.source
  if type(source) ~= "string" then
    local f, err = io.open(file, "rb")
    if not f then errors.raise(deny(file, "cannot read it: " .. tostring(err))) end
    source = f:read(M.MAX_BYTES + 1)
    f:close()
  end
  source = source or ""
  if #source > M.MAX_BYTES then
    errors.raise(deny(file, ("larger than %d bytes"):format(M.MAX_BYTES)))
  end
  local state = {}
  local sink = opts.log or sandbox.stderr_log
  local label = { file }
  local function emit(msg) sink(("[policy %s] %s"):format(label[1], msg)) end
  local raw = run_chunk(file, source, sandbox.env(state, emit), state)
  if type(raw) ~= "table" then
    errors.raise(deny(file, "it returned " .. type(raw) .. ", a table expected"))
  end
  local gen = schema.normalize(raw, file, source)
  label[1] = gen.name
  gen.state, gen.emit = state, emit
  gen.file, gen.source, gen.runner = file, source, opts.hook_runner
  state.memory_kb = gen.limits.memory_mb * 1024
  gen.loaded_at = os.time()
  gen.allow_matcher = gen.network.allowlist and match.compile(gen.network.allowlist, "network.allowlist")
  gen.deny_matcher = match.compile(gen.network.denylist, "network.denylist")
  return gen
end

return M

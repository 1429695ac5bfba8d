-- sbx.policy: the policy engine.  Loads policy files (policies/*.lua) and
-- runs their hooks; one code path serves on-device sessions (sbx.session)
-- and sbxd.  policies/README.md teaches writing a policy.
--
-- A policy is a Lua chunk returning a table: data (defaults, ceilings,
-- filesystem, seccomp, network, limits, reapply) and hooks
--   on_session_open(req, ctx)       -> true | req' | false, reason
--   on_run(req, ctx)                -> true | req' | false, reason
--   on_connect(host, port, addrs, ctx) -> true | false, reason
--   on_close(session, ctx)          -- return value ignored
-- A hook allows by returning true (or an adjusted copy of req), and denies
-- with `return false, "reason"` or `return deny("reason")`.  Returning
-- nothing denies too: a hook must say yes.  Anything else is malformed.
--
-- The chunk and its hooks run in a restricted environment (see sandbox_env:
-- copies of string/table/math, a few os time functions, pairs, pcall...,
-- log, deny, match, presets; no io, os.execute, require, load*, debug,
-- setmetatable, coroutine), loaded from source only (bytecode is refused),
-- interpreted (jit.off) under an instruction-count hook that pcall cannot
-- swallow, with a wall-clock deadline and a heap-growth budget per hook call.  A policy that fails to
-- load, and a hook that errors, runs over its budget or deadline, or
-- returns something malformed, denies (PolicyDenied naming the hook and
-- the cause); the cause is logged and the caller keeps running.
--
-- Requests above a ceiling are refused (PolicyDenied, rule "ceilings.<k>"),
-- never clamped unless the policy sets ceilings.clamp = true.
--
--   policy.load([path], [opts])  -> Engine; raises PolicyDenied.
--                                   opts.log = function(line) (default: stderr)
--   policy.engine_for(x)         -> x if it is an Engine, else load(x)
--   policy.compile(path, [opts]) -> one generation (the normalized policy)
--   policy.reload(engine, [path])-> engine:reload(path)
--   policy.check_cli(path)       -> exit status; prints the effective policy
--                                   (stdout) or the error (stderr)
--   policy.default_path(), policy.resolve(path), policy.policy_dir()
--   policy.forbidden_hit(p, path, extra) -> the forbidden entry path touches
--
-- Engine (also reads as its current policy: engine.defaults, .ceilings...):
--   engine:admit_session(opts, octx)     -> session options, gen (admission:
--                                           sbx.options' shapes, then the rules)
--   engine:admit_run(st, cmd, opts, [extra_keys]) -> run options; raises
--   engine:session_open(req, ctx, [gen], [host]) -> req' (adjusted), gen; raises
--   engine:run(req, ctx, [gen])          -> req'; raises PolicyDenied
--   engine:connect(host, port, addrs, ctx, [gen]) -> true | false, PolicyDenied
--   engine:close(session, ctx, [gen])    -- never raises (errors are logged)
--   engine:reload([path])                -> true | nil, why (old one kept)
--   engine:for_session(gen)              -> the generation a session's runs
--                                           use: gen, or the current one if
--                                           it says reapply = true
--   engine:describe([gen])               -> the effective policy as text
--   engine.current, engine.generation    -- the live generation and its number
-- gen: the generation a session was opened under (default: the current).
--
-- The module is split by job (lua/sbx/policy/):
--   files.lua     where policy files are (policy_dir, default_path, resolve)
--   sandbox.lua   the restricted environment and the guard around policy code
--   schema.lua    the shape of a policy: checks and built-in values
--   compile.lua   a policy file to one generation
--   hooks.lua     calling hooks and reading their verdicts; what ctx they see
--   ceilings.lua  the policy's rules on a request (one place per rule)
--   engine.lua    the Engine: generations, reload, session/run/connect/close
--   admit.lua     admission for sbx.session and sbxd (Engine:admit_*)
--   describe.lua  the effective policy as text, --check-policy
-- This file is the public API: what `require "sbx.policy"` returns.

local files = require "sbx.policy.files"
local sandbox = require "sbx.policy.sandbox"
local schema = require "sbx.policy.schema"
local compile = require "sbx.policy.compile"
local hooks = require "sbx.policy.hooks"
local ceilings = require "sbx.policy.ceilings"
local engine = require "sbx.policy.engine"
local describe = require "sbx.policy.describe"

local M = {}

for _, k in ipairs { "INSTRUCTION_BUDGET", "HOOK_INSTRUCTIONS", "HOOK_MS", "MAX_HOOK_INSTRUCTIONS",
  "MAX_HOOK_MS", "HOOK_MEMORY_MB", "MAX_HOOK_MEMORY_MB" } do
  M[k] = sandbox[k]
end
M.MAX_BYTES = compile.MAX_BYTES
M.HOOKS = schema.HOOKS
M.HARD_FORBIDDEN = schema.HARD_FORBIDDEN
M.NEVER_ETC = schema.NEVER_ETC

M.policy_dir, M.default_path, M.resolve = files.policy_dir, files.default_path, files.resolve
M.now_ms, M.stderr_log, M.run_hook = sandbox.now_ms, sandbox.stderr_log, sandbox.run_hook
M.compile = compile.compile
M.caller_ctx = hooks.caller_ctx
M.check_session_ceilings = function(gen, req) return ceilings.session(gen, req) end
M.forbidden_hit = ceilings.forbidden_hit
M.Engine, M.is_engine, M.load, M.engine_for = engine.Engine, engine.is_engine, engine.load, engine.engine_for
M.check_cli = describe.check_cli

function M.reload(eng, path)
  return eng:reload(path)
end

return M

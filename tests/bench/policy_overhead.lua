-- policy_overhead.lua: the policy engine's overhead (make bench).
--
-- Times the policy work of one run with policies/default.lua: engine:run
-- on a typical request (copying it in, the instruction-count hook and
-- deadline, on_run, checking what comes back), and the whole Lua side of
-- a run's admission without the C core (options.run + engine:admit_run).
-- Also engine:session_open and engine:connect for reference.  Target of
-- issue 4: under 20 microseconds of hook time per run.
--
-- usage: sbxlua tests/bench/policy_overhead.lua [-n N] [--policy FILE] [--strict]
--        (--strict: exit 1 when the target is missed)

local clock = require "sbx.clock"
local policy = require "sbx.policy"

local opts = { n = 100000, policy = "policies/default.lua", strict = false }
do
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == "-n" then opts.n = tonumber(arg[i + 1]); i = i + 1
    elseif a == "--policy" then opts.policy = arg[i + 1]; i = i + 1
    elseif a == "--strict" then opts.strict = true
    else io.stderr:write("policy_overhead: unknown argument ", a, "\n"); os.exit(2) end
    i = i + 1
  end
  assert(opts.n and opts.n >= 1, "-n takes a positive number")
end

local TARGET_US = 20

local engine = policy.load(opts.policy)
local REQ = {
  cmd = "python3 -m pip install --no-index ./pkg",
  argv = { "/bin/sh", "-c", "python3 -m pip install --no-index ./pkg" },
  script_type = "shell",
  env = { PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME = "/tmp/sandbox-work", LANG = "C.UTF-8", USER = "sandbox", LOGNAME = "sandbox", FOO = "bar" },
  cwd = "/tmp/sandbox-work/sub",
  timeout_s = 30,
  network_mode = "blocked",
  stdin = false,
}
local CTX = { origin = "local", session = { id = ("ab"):rep(16), name = "sbx-abababababababab",
  backend = "userns", network_mode = "blocked", created_at = "2026-11-22T00:00:00Z" } }
local ST = { id = CTX.session.id, name = CTX.session.name, backend = "userns", network_mode = "blocked",
  env = {}, policy = engine.current, created_at = CTX.session.created_at, work_dir = "/tmp/x" }

-- time(fn) -> mean microseconds per call over opts.n calls (after a warmup).
local function time(fn)
  for _ = 1, math.min(opts.n, 2000) do fn() end
  collectgarbage()
  local t0 = clock.now_ns()
  for _ = 1, opts.n do fn() end
  return (clock.now_ns() - t0) / 1e3 / opts.n
end

local run_us = time(function() engine:run(REQ, CTX) end)
local admit_us = time(function()
  engine:admit_run(ST, "python3 -m pip install --no-index ./pkg",
    { env = { FOO = "bar" }, cwd = "sub", timeout_s = 30 })
end)
local open_us = time(function()
  engine:session_open({ backend = "userns", network_mode = "blocked", memory_mb = 1024 }, {})
end)
local connect_us = time(function()
  engine:connect("files.pythonhosted.org", 443, { "151.101.0.223", "2a04:4e42::223" },
    { network_mode = "open" })
end)

print(("policy overhead (%s, %d calls each, mean):"):format(engine.name, opts.n))
print(("  engine:run (on_run, per run)           %8.2f us   target < %d us: %s"):format(run_us, TARGET_US,
  run_us < TARGET_US and "met" or "MISSED"))
print(("  options.run + engine:admit_run         %8.2f us"):format(admit_us))
print(("  engine:session_open (on_session_open)  %8.2f us"):format(open_us))
print(("  engine:connect (deny-list + on_connect)%8.2f us"):format(connect_us))
if opts.strict and run_us >= TARGET_US then os.exit(1) end

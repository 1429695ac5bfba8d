-- agent_loop.lua: a remote "agent loop" against sbxd: open a session, give
-- it files, run steps whose output streams back live, react to the result
-- of each step, and clean up.  The same script works on-device by
-- replacing sbx.remote.session{...} with sbx.session{...}.
--
--   build/bin/sbxd --listen 127.0.0.1:7433 --token-file tokens &
--   SBX_ENDPOINT=http://127.0.0.1:7433 SBX_TOKEN_FILE=tokens build/bin/sbxlua examples/remote/agent_loop.lua
local sbx = require "sbx"

local s = sbx.remote.session {
  endpoint = os.getenv("SBX_ENDPOINT") or "http://127.0.0.1:7433",
  token_file = os.getenv("SBX_TOKEN_FILE") or "tokens",
  backend = "userns",
}
print("session", s.id, "on", s.endpoint)

-- The "model" proposes steps; here a fixed plan with one failing step that
-- the loop notices and repairs.
s:put_bytes("data.csv", "a,b\n1,2\n3,4\n")
local plan = {
  "wc -l data.csv",
  "awk -F, 'NR>1 {s += $1 * $2} END {print s}' data.csv",
  "cat missing.txt",                      -- fails: the loop repairs it below
  "for i in 1 2 3; do echo tick $i; sleep 0.3; done",
}

local step = 1
while step <= #plan do
  local cmd = plan[step]
  print(("[%d] $ %s"):format(step, cmd))
  local p = s:run(cmd, { timeout_s = 10 })
  for line in p:lines() do print("    " .. line) end   -- live
  local rc = p:wait()
  if rc ~= 0 then
    print(("    exit %d (%s): repairing"):format(rc, p.termination_reason))
    s:put_bytes("missing.txt", "created by the agent\n")
  else
    step = step + 1
  end
end

-- Hand the session to a helper (reference mode: it can run, not close).
local ref = sbx.remote.attach(s:handle())
print("helper sees: " .. (ref:exec("ls").stdout:gsub("\n", " ")))
ref:close()

s:close()
print("done")

-- examples/agent_loop.lua: the reference's agent loop, on-device.
--
--   1. stage inputs in the session's work dir (put_bytes)
--   2. run the agent's driver; its tool loop writes Python, runs it in the
--      sandbox, reads the failure as data and iterates until it writes
--      answer.json
--   3. collect the result (get_bytes)
--
--   build/bin/sbxlua examples/agent_loop.lua
--
-- The driver here stands in for one that asks a model for each attempt: it
-- replays what a model might propose, so the example runs without one.  A
-- real driver calls its model from inside the sandbox: give the session
-- network_mode = "allowlist", network_allowlist = { "api.anthropic.com" }
-- and forward a scoped key with the run's env (the sandboxed code can read
-- it; to keep it out, call the model from here and pass only prompts and
-- results across with put_bytes / get_bytes).  The same loop against sbxd
-- is examples/remote/agent_loop.lua.
local sbx = require "sbx"

local CSV = "region,units,price\nnorth,3,2.50\nsouth,5,1.20\nnorth,4,2.50\n"

local DRIVER = [[
import pathlib, subprocess, sys

# What a model might write first: it forgets the header line and an import.
FIRST = """\
import csv, json
rows = csv.reader(open("data.csv"))
totals, units = {}, []
for region, n, price in rows:
    totals[region] = totals.get(region, 0) + int(n) * float(price)
    units.append(int(n))
json.dump({"totals": totals, "mean_units": statistics.mean(units)}, open("answer.json", "w"), sort_keys=True)
print("regions:", len(totals))
"""

def propose(code, error):
    # The "model": reads the last line of the traceback, proposes a fix.
    if "invalid literal for int()" in error:
        return code.replace('rows = csv.reader(open("data.csv"))\n',
                            'rows = csv.reader(open("data.csv"))\nnext(rows)  # the header\n')
    if "name 'statistics' is not defined" in error:
        return "import statistics\n" + code
    return None

code = FIRST
for attempt in range(1, 6):
    pathlib.Path("attempt.py").write_text(code)
    # A failing attempt is signal, not an error: its exit code and stderr
    # are what the model learns from.
    p = subprocess.run([sys.executable, "attempt.py"], capture_output=True, text=True, timeout=60)
    print(f"attempt {attempt}: exit {p.returncode}")
    if p.returncode == 0 and pathlib.Path("answer.json").exists():
        print("stdout: " + p.stdout.strip())
        break
    error = p.stderr.strip().splitlines()[-1]
    print("  error: " + error)
    code = propose(code, error)
    if code is None:
        sys.exit("the model has no fix for: " + error)
else:
    sys.exit("gave up")
]]

local s = sbx.session {
  backend = "userns",
  network_mode = "blocked", -- a real driver: "allowlist" + its model endpoint (see above)
  timeout_s = 1200,
}

-- 1. Stage inputs into the work dir.
s:put_bytes("data.csv", CSV)
s:put_bytes("driver.py", DRIVER)

-- 2. Run the agent's driver; it iterates until it writes answer.json.
local r = s:exec("python driver.py", {
  env = { ANTHROPIC_API_KEY = os.getenv("ANTHROPIC_API_KEY") }, -- nil: not passed
  timeout_s = 600,
})
io.write(r.stdout)
assert(r.ok, ("agent failed rc=%d\n%s"):format(r.returncode, r.stderr))

-- 3. Collect the result.
print("answer.json: " .. s:get_bytes("answer.json"))
s:close()

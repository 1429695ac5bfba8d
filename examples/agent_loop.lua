-- examples/agent_loop.lua: the loop a coding agent runs, on-device.
--
--   1. stage inputs in the session's work dir with put_bytes
--   2. run code the "model" wrote; it fails
--   3. read the failure as data (returncode, stderr), never as an exception
--   4. "fix" the code and run it again
--   5. collect the results the code wrote with get_bytes
--
--   build/bin/sbxlua examples/agent_loop.lua
-- The remote version (same loop against sbxd) is examples/remote/agent_loop.lua.
local sbx = require "sbx"

local s = sbx.session { backend = "userns" }  -- network "blocked": no way out

-- 1. Inputs.
s:put_bytes("input/sales.csv", "region,units,price\nnorth,3,2.50\nsouth,5,1.20\nnorth,2,2.50\n")

-- What a model might write first: it forgets the header line.
local attempts = {
  [[
import csv, json
totals = {}
for region, units, price in csv.reader(open("input/sales.csv")):
    totals[region] = totals.get(region, 0) + int(units) * float(price)
json.dump(totals, open("output/totals.json", "w"), sort_keys=True)
print("regions:", len(totals))
]],
}

-- The "model" reads the failure and proposes a fix.
local function fix(code, result)
  if result.stderr:find("invalid literal for int", 1, true) then
    return (code:gsub('csv%.reader%(open%("input/sales%.csv"%)%)',
      'list(csv.reader(open("input/sales.csv")))[1:]'))
  end
  if result.stderr:find("No such file or directory: 'output/", 1, true) then
    return "import os; os.makedirs('output', exist_ok=True)\n" .. code
  end
  return nil
end

local code, result = attempts[1], nil
for attempt = 1, 5 do
  s:put_bytes("analyze.py", code)
  -- 2. Run it (a non-zero exit is data: exec does not raise).
  result = s:exec("python3 analyze.py", { timeout_s = 30 })
  print(("attempt %d: exit %d"):format(attempt, result.returncode))
  if result.ok then break end
  -- 3. The failure, as data: the last line of the traceback.
  local last = result.stderr:gsub("%s+$", ""):match("([^\n]*)$")
  print("  error: " .. last)
  -- 4. Fix and retry.
  code = fix(code, result)
  if not code then error("the model has no fix for: " .. last) end
end
assert(result.ok, "gave up")
print("stdout: " .. result.stdout:gsub("\n$", ""))

-- 5. Results back on the host.
local totals = s:get_bytes("output/totals.json")
print("output/totals.json: " .. totals)
print("files: " .. s:exec("find input output -type f | sort | tr '\\n' ' '").stdout)
s:close()

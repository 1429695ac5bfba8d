-- examples/hello.lua: open a session, stream a command's output, move a
-- file in and out, and see a failure as data.
--
--   build/bin/sbxlua examples/hello.lua
local sbx = require "sbx"

local s = sbx.session { backend = "userns" } -- network_mode defaults to "blocked"
s:put_bytes("data.json", "[1, 2, 3]")

local p = s:run("for i in 1 2 3; do echo line $i; sleep 0.2; done")
for line in p:lines() do print("streamed:", line) end
print("exit", p.returncode, "in", p.runtime_ms, "ms on", p.backend)

local r = s:exec("python3 -c 'import json; print(sum(json.load(open(\"data.json\"))))'")
print("sum:", r.stdout)

local failed = s:exec("echo oops >&2; exit 3")
print("a failure is data:", failed.returncode, failed.stderr)

s:put_bytes("out/result.txt", "done\n")
print("round trip:", s:get_bytes("out/result.txt"))
s:close()

-- examples/custom_policy.lua: sessions under a custom policy
-- (examples/policies/no_curl.lua): its on_session_open hook logs every
-- session open, its on_run hook denies any run that mentions curl.  A denied
-- run raises PolicyDenied (kind, rule, message) before anything starts; the
-- session stays usable.
--
--   build/bin/sbxlua examples/custom_policy.lua
local sbx = require "sbx"
local policy = require "sbx.policy"

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
-- Load the policy as an engine, with its log() lines sent to our stdout
-- (without { log = ... } they go to stderr).  sbx.session{ policy = PATH }
-- works too.
local eng = policy.load(here .. "policies/no_curl.lua", {
  log = function(line) print("log:", line) end,
})

local s = sbx.session { policy = eng, name = "demo" }
print("allowed:", (s:exec("echo hello from " .. s.backend).stdout:gsub("\n$", "")))

local ok, err = pcall(s.exec, s, "curl -s https://example.org")
print("denied:", ok, err.kind, err.rule, err.message)

-- argv form, hidden behind another program: still denied.
ok, err = pcall(s.exec, s, { "/usr/bin/env", "curl", "--version" })
print("denied argv:", ok, err.kind)

print("still usable:", (s:exec("echo yes").stdout:gsub("\n$", "")))
s:close()

-- soak_spec.lua: the short soak of make test (the long one is `make soak`,
-- tests/soak/soak.lua): 300 random runs over 10 sessions (shell, python,
-- lua, exit codes, timeouts, host kills, put/get round trips, streams,
-- network modes within blocked/allowlist/open sessions),
-- every result checked, then the host side's fds, RSS, mounts, sbx cgroups,
-- session dirs and child processes must be back at their baseline (RSS is
-- judged only outside ASan builds; see tests/soak/soak.lua).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")

if not T.has_core() then
  describe("soak", function()
    pending("needs sbx.core: run the specs with build/bin/sbxlua")
  end)
  return
end

local soak = dofile(here .. "../soak/soak.lua")

describe("soak (short)", function()
  it("300 runs over 10 sessions leave the host side at its baseline", function()
    local lines = {}
    local rep = soak.run { runs = 300, sessions = 10, seed = 20261122, parallel = 5,
      log = function(s) lines[#lines + 1] = s end }
    assert.are.equal(300, rep.runs)
    assert.are.equal(10, rep.sessions)
    -- the mix really exercised every kind of run
    for _, k in ipairs { "shell", "python", "lua", "exit", "timeout", "kill", "files", "stream",
                         "net_blocked", "net_allowlist" } do
      assert.is_true((rep.kinds[k] or 0) > 0, "no " .. k .. " run in the mix")
    end
    assert.is_true(rep.ok, table.concat(rep.diffs, "; ") .. "\n" .. table.concat(lines, "\n"))
    assert.is_true(rep.after.fds <= rep.base.fds, "fds")
    assert.is_true(rep.after.mounts <= rep.base.mounts, "mounts")
    assert.is_true(rep.after.children <= rep.base.children, "children")
    assert.are.equal(0, rep.after.cgroups)
    assert.are.equal(0, rep.after.session_dirs)
  end)
end)

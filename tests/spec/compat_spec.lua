-- compat_spec.lua: the short form of `make compat` (tests/compat/run.lua):
-- CPython's test_posix and test_mmap on the host as an unprivileged user and
-- in a userns session must agree test by test.  The long list (test_os,
-- test_subprocess, test_asyncio, ...) stays in `make compat`.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")

describe("compat: CPython's tests agree on the host and in a session", function()
  it("test_posix and test_mmap: same outcome for every test", function()
    if not H.exists("/usr/lib/python3.11/test/test_posix.py") then
      pending("libpython3.11-testsuite is not installed (scripts/bootstrap-deps.sh)")
      return
    end
    local dir = H.mktemp_dir("compat")
    local out, rc = H.sh(("%s %s --out %s --timeout 300 test_posix test_mmap"):format(
      H.q(H.SBXLUA), H.q(H.ROOT .. "/tests/compat/run.lua"), H.q(dir)), true)
    H.rmtree(dir)
    -- Control: both sides really ran the modules (a side that ran nothing
    -- would show as "no results", but make it explicit).
    for _, mod in ipairs { "test_posix", "test_mmap" } do
      local host, sess = out:match("# " .. mod .. ": (%d+) tests on the host, (%d+) in the session")
      assert.is_truthy(host, mod .. " did not run\n" .. out)
      assert.is_true(tonumber(host) > 20 and tonumber(sess) > 20, out)
    end
    assert.are.equal(0, rc, out)
  end)
end)

-- examples_spec.lua: every example under examples/ runs as written.
--
-- Each examples/*.lua is run by the sbxlua running this spec (so the
-- sanitizer build tests its own binary) and must exit 0 and print what its
-- comments promise.

local H = require "spec.sec_helpers"

local function run(script)
  local h = assert(io.popen(("%s %s 2>&1; echo \"rc=$?\""):format(H.q(H.SBXLUA), H.q(script))))
  local out = h:read("*a")
  h:close()
  return out, tonumber(out:match("rc=(%d+)%s*$"))
end

describe("examples", function()
  it("hello.lua streams lines, reads data, reports a failure as data", function()
    local out, rc = run("examples/hello.lua")
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find("streamed:\tline 1\nstreamed:\tline 2\nstreamed:\tline 3\n", 1, true), out)
    assert.is_truthy(out:find("sum:\t6\n", 1, true), out)
    assert.is_truthy(out:find("a failure is data:\t3\toops\n", 1, true), out)
    assert.is_truthy(out:find("round trip:\tdone\n", 1, true), out)
  end)
end)

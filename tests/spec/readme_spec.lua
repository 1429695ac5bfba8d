-- readme_spec.lua: every ```lua block of README.md that starts with
-- `local sbx = require "sbx"` (a whole script, as the README offers it to
-- copy) runs as written and prints what its comments say.  Blocks that
-- open a remote session run against a real sbxd (tests/server/harness.lua):
-- only the README's endpoint and token file are swapped for the test
-- server's.  Fragments (blocks without that first line) are not run.
local H = require "spec.sec_helpers"
local S = dofile(H.ROOT .. "/tests/server/harness.lua")

local README_ENDPOINT = "http://127.0.0.1:7433"

-- The whole-script lua blocks of the README: { line =, text = }.
local function blocks()
  local out, cur, start, n = {}, nil, nil, 0
  for line in io.lines(H.ROOT .. "/README.md") do
    n = n + 1
    if cur then
      if line:match("^```") then
        if cur[1] == 'local sbx = require "sbx"' then
          out[#out + 1] = { line = start, text = table.concat(cur, "\n") .. "\n" }
        end
        cur = nil
      else
        cur[#cur + 1] = line
      end
    elseif line:match("^```lua%s*$") then
      cur, start = {}, n
    end
  end
  return out
end

local function sh(cmd)
  local h = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"rc=$?\""))
  local out = h:read("*a")
  h:close()
  return out, tonumber(out:match("rc=(%d+)%s*$"))
end

-- What each block's comments promise, by a line of its text.
local EXPECT = {
  { 'sbx.session{ backend = "userns" }', { "got\t1\ngot\t2\ngot\t3\n", "true\t6\n", "4\n", "3\n",
    "SandboxCommandError\n" } },
  { "uv pip install requests", { "mean=2.5\n" } },
  { "sbx.remote.session", { "1\n2\n3\n0\t\n", "3\n4\n", "hello\nhello\n" } },
}

describe("README.md's whole-script lua blocks", function()
  local found = blocks()
  local dir, srv

  setup(function() dir = H.mktemp_dir("readme") end)
  teardown(function()
    if srv then srv:cleanup() end
    if dir then H.rmtree(dir) end
  end)

  it("are there (the extraction finds them)", function()
    assert.is_true(#found >= #EXPECT, ("found %d blocks"):format(#found))
  end)

  for _, b in ipairs(found) do
    it("line " .. b.line .. " runs as written", function()
      local text, expect = b.text, nil
      for _, e in ipairs(EXPECT) do
        if text:find(e[1], 1, true) then expect = e[2] end
      end
      assert.is_truthy(expect, "no expectation for the block at line " .. b.line .. ": add one to EXPECT")
      if text:find("uv pip install requests", 1, true) and
          not H.sh("/usr/bin/python3 -c 'import requests' && echo y"):match("y") then
        -- Offline, the install is satisfied only by Debian's python3-requests
        -- (through --system-site-packages); headline_spec installs from an index.
        pending("needs python3-requests (no internet here)")
        return
      end
      if text:find("sbx.remote.", 1, true) then
        if not S.available() then pending("needs sbxd next to sbxlua") return end
        srv = srv or assert(S.start {})
        assert.is_truthy(text:find(README_ENDPOINT, 1, true))
        text = text:gsub(README_ENDPOINT:gsub("%p", "%%%0"), (srv.url:gsub("%%", "%%%%")))
        text = text:gsub('token_file = "tokens"', ('token_file = %q'):format(srv.dir .. "/tokens"))
      end
      local path = ("%s/block%d.lua"):format(dir, b.line)
      H.write_file(path, text)
      local out, rc = sh(H.q(H.SBXLUA) .. " " .. H.q(path))
      assert.are.equal(0, rc, out)
      for _, want in ipairs(expect) do
        assert.is_truthy(out:find(want, 1, true), ("missing %q in:\n%s"):format(want, out))
      end
    end)
  end
end)

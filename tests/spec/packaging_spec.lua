-- packaging_spec.lua: the two ways sbx is installed work as documented:
--
--   luarocks make rockspec/sbx-scm-1.rockspec   (into a throwaway tree; a
--       stock `luajit` then runs `require "sbx"` and opens a session)
--   make install PREFIX=...                      (into a throwaway prefix;
--       the installed sbxlua finds its Lua files, policies and man page there)

local H = require "spec.sec_helpers"

local function sh(cmd)
  local h = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"rc=$?\""))
  local out = h:read("*a")
  h:close()
  return out, tonumber(out:match("rc=(%d+)%s*$"))
end

local function tmpdir()
  local out = sh("mktemp -d /tmp/sbx-pkg-spec.XXXXXX")
  return (out:match("^(%S+)"))
end

describe("packaging", function()
  it("luarocks make installs a module a stock luajit can use", function()
    local tree = tmpdir()
    finally(function() sh("rm -rf " .. H.q(tree) .. " " .. H.q(H.ROOT .. "/build.luarocks")) end)
    local out, rc = sh(("cd %s && luarocks --lua-version 5.1 --tree %s make rockspec/sbx-scm-1.rockspec")
      :format(H.q(H.ROOT), H.q(tree)))
    assert.are.equal(0, rc, out)
    out, rc = sh(("cd /tmp && eval \"$(luarocks --lua-version 5.1 --tree %s path)\" && luajit -e %s")
      :format(H.q(tree), H.q([[
        local sbx = require "sbx"
        local s = sbx.session {}
        io.write(s:exec("echo from-the-rock").stdout)
        print(package.searchpath("sbx.core", package.cpath))
        s:close()]])))
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find("from-the-rock\n", 1, true), out)
    assert.is_truthy(out:find(tree .. "/lib/lua/5.1/sbx/core.so", 1, true), out)
  end)

  it("make install PREFIX= installs binaries, Lua files, policies and man pages that work", function()
    local prefix, build = tmpdir(), tmpdir()
    finally(function() sh("rm -rf " .. H.q(prefix) .. " " .. H.q(build)) end)
    local out, rc = sh(("make -C %s install PREFIX=%s BUILD=%s BUILD_TYPE=Release")
      :format(H.q(H.ROOT), H.q(prefix), H.q(build)))
    assert.are.equal(0, rc, out)
    for _, f in ipairs({ "bin/sbxlua", "bin/sbxd", "share/lua/5.1/sbx/init.lua",
        "lib/lua/5.1/sbx/core.so", "share/sbx/policies/default.lua",
        "share/man/man1/sbxlua.1" }) do
      local _, exists = sh("test -e " .. H.q(prefix .. "/" .. f))
      assert.are.equal(0, exists, f .. " was not installed")
    end
    out, rc = sh(("cd / && %s/bin/sbxlua -e %s"):format(H.q(prefix), H.q([[
      print(require("sbx.paths").root)
      local s = require("sbx").session {}
      io.write(s:exec("echo installed-ok").stdout)
      s:close()]])))
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find(prefix .. "/share/sbx\n", 1, true), out)
    assert.is_truthy(out:find("installed-ok\n", 1, true), out)
  end)
end)

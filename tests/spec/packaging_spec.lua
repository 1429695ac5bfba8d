-- packaging_spec.lua: the two ways sbx is installed work as documented:
--
--   luarocks make rockspec/sbx-scm-1.rockspec   (into a throwaway tree; a
--       stock `luajit` then runs `require "sbx"` and opens a session)
--   make install PREFIX=...                      (into a throwaway prefix;
--       the installed sbxlua finds its Lua files, policies and man page there;
--       sbxd(1) documents every flag; the systemd unit names the installed
--       sbxd and passes systemd-analyze verify; a C program builds against
--       the installed libsbx with pkg-config and runs `echo ok`)

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
    -- LD_DEBUG=files: the dynamic linker says which objects it unloads.
    out, rc = sh(("cd /tmp && eval \"$(luarocks --lua-version 5.1 --tree %s path)\" && "
      .. "LD_DEBUG=files luajit -e %s 2>&1"):format(H.q(tree), H.q([[
        require "lfs"
        local sbx = require "sbx"
        local s = sbx.session {}
        io.write(s:exec("echo from-the-rock").stdout)
        print(package.searchpath("sbx.core", package.cpath))
        s:close()]])))
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find("from-the-rock\n", 1, true), out)
    assert.is_truthy(out:find(tree .. "/lib/lua/5.1/sbx/core.so", 1, true), out)
    -- LuaJIT unloads C modules at lua_close (control: lfs goes), but
    -- not sbx.core, whose threads run on after it: unmapped under them,
    -- they crashed the exit (SIGSEGV, rc 139) when one woke up.
    assert.is_truthy(out:find("lfs.so [0];  destroying link map", 1, true), out)
    assert.is_falsy(out:find("core.so [0];  destroying link map", 1, true), out)
  end)

  describe("make install PREFIX=", function()
    local prefix, build, install_out, install_rc
    setup(function()
      prefix, build = tmpdir(), tmpdir()
      install_out, install_rc = sh(("make -C %s install PREFIX=%s BUILD=%s BUILD_TYPE=Release")
        :format(H.q(H.ROOT), H.q(prefix), H.q(build)))
    end)
    teardown(function() sh("rm -rf " .. H.q(prefix) .. " " .. H.q(build)) end)

    it("installs binaries, Lua files, policies and man pages that work", function()
      assert.are.equal(0, install_rc, install_out)
      for _, f in ipairs({ "bin/sbxlua", "bin/sbxd", "share/lua/5.1/sbx/init.lua",
          "lib/lua/5.1/sbx/core.so", "share/sbx/policies/default.lua",
          "share/man/man1/sbxlua.1", "share/man/man1/sbxd.1",
          "lib/systemd/system/sbxd.service", "lib/libsbx.a", "include/sbx/sbx.h",
          "lib/pkgconfig/libsbx.pc" }) do
        local _, exists = sh("test -s " .. H.q(prefix .. "/" .. f))
        assert.are.equal(0, exists, f .. " was not installed")
      end
      local out, rc = sh(("cd / && %s/bin/sbxlua -e %s"):format(H.q(prefix), H.q([[
        print(require("sbx.paths").root)
        local s = require("sbx").session {}
        io.write(s:exec("echo installed-ok").stdout)
        s:close()]])))
      assert.are.equal(0, rc, out)
      assert.is_truthy(out:find(prefix .. "/share/sbx\n", 1, true), out)
      assert.is_truthy(out:find("installed-ok\n", 1, true), out)
    end)

    it("installs an sbxd man page that documents every flag of sbxd --help", function()
      assert.are.equal(0, install_rc, install_out)
      local usage = sh(H.q(prefix .. "/bin/sbxd") .. " --help")
      local page, rc = sh("LC_ALL=C MANWIDTH=200 man -l " .. H.q(prefix .. "/share/man/man1/sbxd.1"))
      assert.are.equal(0, rc, page)
      local n = 0
      for flag in usage:gmatch("%-%-[%w%-]+") do
        n = n + 1
        assert.is_truthy(page:find(flag, 1, true), flag .. " is not in sbxd(1)")
      end
      assert.is_true(n >= 13, usage)
      for _, want in ipairs({ "TOKEN TENANT", "SIGTERM", "SIGHUP", "/v1/sessions", "/healthz",
          "/metrics", "/etc/sbx/tokens", "/var/lib/sbx" }) do
        assert.is_truthy(page:find(want, 1, true), want .. " is not in sbxd(1)")
      end
    end)

    it("installs a systemd unit for the installed sbxd that systemd-analyze accepts", function()
      assert.are.equal(0, install_rc, install_out)
      local unit = prefix .. "/lib/systemd/system/sbxd.service"
      local f = assert(io.open(unit))
      local text = f:read("*a")
      f:close()
      assert.is_nil(text:find("@[%w_]+@"), "unsubstituted @VAR@ in the unit")
      assert.is_truthy(text:find("\nExecStart=" .. prefix .. "/bin/sbxd --listen unix:/run/sbx/sbxd.sock "
        .. "--token-file /etc/sbx/tokens --policy " .. prefix .. "/share/sbx/policies/default.lua", 1, true), text)
      for _, want in ipairs({ "StateDirectory=sbx", "RuntimeDirectory=sbx", "ProtectSystem=strict",
          "ProtectHome=yes", "PrivateTmp=yes", "NoNewPrivileges=yes",
          "CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_CHOWN CAP_DAC_OVERRIDE CAP_KILL CAP_SYS_RESOURCE\n" }) do
        assert.is_truthy(text:find("\n" .. want, 1, true), want .. " is not in the unit")
      end
      assert.is_nil(text:find("CAP_SYS_ADMIN", text:find("\n%[Service%]"), true), "the unit grants CAP_SYS_ADMIN")
      local _, have = sh("command -v systemd-analyze")
      if have ~= 0 then
        pending("systemd-analyze is not installed: the unit was not verified")
        return
      end
      local out, rc = sh("systemd-analyze verify --man=no " .. H.q(unit))
      assert.are.equal(0, rc, out)
    end)

    it("installs libsbx with a pkg-config file a C program builds and runs with", function()
      assert.are.equal(0, install_rc, install_out)
      local dir = tmpdir()
      finally(function() sh("rm -rf " .. H.q(dir)) end)
      local src = io.open(dir .. "/hello.c", "w")
      src:write([[
#include <stdio.h>
#include <sbx/sbx.h>

int main(void)
{
	static const char *const sys_ro[] = {"/usr", "/bin", "/lib", "/lib64", NULL};
	static const char *const argv[] = {"/bin/sh", "-c", "echo ok", NULL};
	static const char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
	sbx_session_opts so = {.backend = "userns", .system_ro = sys_ro};
	sbx_run_opts ro = {.argv = argv, .envp = envp, .stdin_mode = SBX_IO_NULL};
	sbx_err err = {0};
	sbx_event ev;
	sbx_session *s = sbx_session_open(&so, &err);
	if (!s) {
		fprintf(stderr, "open: %s: %s\n", sbx_err_kind_name(err.kind), err.msg);
		return 1;
	}
	sbx_run *r = sbx_run_start(s, &ro, &err);
	if (!r) {
		fprintf(stderr, "run: %s\n", err.msg);
		return 1;
	}
	do {
		if (sbx_run_next(r, -1, true, true, &ev, &err) < 0) {
			fprintf(stderr, "next: %s\n", err.msg);
			return 1;
		}
		if (ev.type == SBX_EV_STDOUT)
			fwrite(ev.data, 1, ev.len, stdout);
	} while (ev.type != SBX_EV_EXIT);
	printf("returncode=%d\n", sbx_run_result_get(r)->returncode);
	sbx_run_free(r);
	return sbx_session_close(s, NULL) == 0 ? 0 : 1;
}
]])
      src:close()
      local env = "PKG_CONFIG_PATH=" .. H.q(prefix .. "/lib/pkgconfig")
      local flags, rc = sh(env .. " pkg-config --cflags --libs libsbx")
      assert.are.equal(0, rc, flags)
      assert.is_truthy(flags:find("-I" .. prefix .. "/include", 1, true), flags)
      local out
      out, rc = sh(("cd %s && cc -Wall -Wextra -Werror -o hello hello.c $(%s pkg-config --cflags --libs libsbx)")
        :format(H.q(dir), env))
      assert.are.equal(0, rc, out)
      out, rc = sh(H.q(dir .. "/hello"))
      assert.are.equal(0, rc, out)
      assert.are.equal("ok\nreturncode=0\nrc=0\n", out)
    end)
  end)
end)

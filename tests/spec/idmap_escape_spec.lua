-- idmap_escape_spec: a sandbox attacking the idmapped copies bubblewrap's
-- runs get (idmap.c).  As root the host makes each run a fresh copy of a
-- read_write_path of root's and of a pinned work dir, idmapped so that
-- root is the sandbox user.  When the sandbox can rename a component of
-- that path (the path sits in its work dir, or the work dir in one of its
-- read_write_paths) it swaps it for a symlink to a dir of root's it was
-- never given.  Were the copy made by path, the next run would get that
-- dir, writable as root (verified against the code before the fix: host
-- /usr/local/share showed up owned by the sandbox user).  Each case
-- really swaps, then asserts that no run writes into the victim, with a
-- control showing the probe's write lands where it was allowed to.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")

local function sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  return out
end

local is_root = sh("id -u") == "0\n"
local has_bwrap = os.execute("test -x /usr/bin/bwrap") == 0
local describe_bw = (is_root and has_bwrap and T.has_core()) and describe
  or function(name) pending(name .. " (needs root, /usr/bin/bwrap and sbx.core)") end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

describe_bw("bubblewrap's idmapped copies against a swapped path", function()
  local base, victim, vname, policy, s
  before_each(function()
    -- The victim: a dir of root's under /usr/local/share (there on the
    -- host and, through the /usr mirror, in the sandbox's root too: one
    -- relative symlink means it in both) with a file only root may read.
    base = sh("mktemp -d /var/tmp/sbx-idmap-esc.XXXXXX"):gsub("\n$", "")
    victim = sh("mktemp -d /usr/local/share/sbx-idmap-victim.XXXXXX"):gsub("\n$", "")
    vname = victim:match("[^/]+$")
    assert.equal(0, os.execute(("chmod 755 %s %s && echo root-only > %s/secret && chmod 600 %s/secret")
      :format(q(base), q(victim), q(victim), q(victim))))
    policy = base .. ".policy.lua"
    local f = assert(io.open(policy, "w"))
    f:write('return { name = "idmap-esc", ceilings = { backends = { "bubblewrap" } } }\n')
    f:close()
  end)
  after_each(function()
    if s then pcall(s.close, s) end
    s = nil
    os.execute("rm -rf " .. q(base) .. " " .. q(victim) .. " " .. q(policy))
  end)

  -- A symlink in /var/tmp/<base>/<dir> to the victim's parent.
  local TO_SHARE = "../../../../usr/local/share"

  local function victim_untouched()
    assert.equal("secret\n", sh("ls " .. q(victim)))
    assert.equal("0:0", sh("stat -c %u:%g " .. q(victim)):gsub("\n$", ""))
  end

  -- The run after the swap: refused (sbx's own check, or bwrap finding
  -- no place for a bind), or run, never seeing the victim's file.
  local function refused_or_own(ok, res)
    if not ok then
      assert.matches("leads elsewhere than at the session's start", tostring(res))
    else
      assert.is_nil((res.stdout .. res.stderr):find("root-only"), T.show(res))
    end
  end

  it("a read_write_path in the work dir whose parent the sandbox swapped for a symlink", function()
    local work = base .. "/w"
    local rw = work .. "/x/" .. vname
    assert.equal(0, os.execute("mkdir -p " .. q(rw) .. " && chmod -R 755 " .. q(work)))
    s = T.sbx.session { backend = "bubblewrap", policy = policy, work_dir = work,
      read_write_paths = { rw } }
    -- Control: the probe's write lands in the root-owned rw path.
    local r = s:exec("echo mine > " .. q(rw .. "/probe") .. " && echo ok")
    assert.equal("ok\n", r.stdout, T.show(r))
    assert.equal("mine\n", T.read_file(rw .. "/probe"))
    -- The swap: x (in the work dir) becomes a symlink to the victim's
    -- parent, so the rw path's name is the victim.
    r = s:exec(("cd /tmp/sandbox-work && mv x x2 && ln -s %s x && echo swapped"):format(q(TO_SHARE)))
    assert.equal("swapped\n", r.stdout, T.show(r))
    -- The attack: the next run writes to the rw path, wherever it leads.
    -- sbx's own check refuses it (bwrap would bind whatever the path now
    -- leads to).
    local ok, e = pcall(s.exec, s, ("cat %s/secret; echo pwned > %s/pwned"):format(q(rw), q(rw)))
    assert.is_false(ok, ok and T.show(e))
    assert.matches("leads elsewhere than at the session's start", tostring(e))
    victim_untouched()
  end)

  it("a pinned work dir in a read_write_path whose parent the sandbox swapped for a symlink", function()
    local rw = base .. "/a"
    local work = rw .. "/p/" .. vname
    assert.equal(0, os.execute("mkdir -p " .. q(work) .. " && chmod -R 755 " .. q(rw)))
    s = T.sbx.session { backend = "bubblewrap", policy = policy, work_dir = work,
      read_write_paths = { rw } }
    local r = s:exec("echo mine > probe && echo ok")
    assert.equal("ok\n", r.stdout, T.show(r))
    assert.equal("mine\n", T.read_file(work .. "/probe"))
    -- p (in the rw path) becomes a symlink to the victim's parent.
    r = s:exec(("cd %s && mv p p2 && ln -s %s p && echo swapped"):format(q(rw), q(TO_SHARE)))
    assert.equal("swapped\n", r.stdout, T.show(r))
    -- The next run: its work dir is still the session's own (now under p2).
    refused_or_own(pcall(s.exec, s, "cat probe; cat secret; echo pwned > pwned"))
    victim_untouched()
  end)
end)

-- The setid guard: where the sandbox writes as a dir's owner (root's,
-- through an idmap), no file of that owner may get a setuid or setgid bit,
-- whether by chmod or by the mode a file is created with.
local PROBE = [[
import ctypes, errno, os, stat, struct, sys
d = sys.argv[1]
os.umask(0)
def t(name, fn):
    try:
        fn(); print(name, "ok")
    except OSError as e: print(name, errno.errorcode[e.errno])
t("open", lambda: os.close(os.open(d + "/o", os.O_CREAT | os.O_WRONLY, 0o6755)))
t("openat", lambda: os.close(os.open("a", os.O_CREAT | os.O_WRONLY, 0o4755, dir_fd=os.open(d, os.O_RDONLY))))
t("mknod", lambda: os.mknod(d + "/m", stat.S_IFREG | 0o2755))
def tmpfile():
    fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o4755)
    print("tmpfile mode", oct(os.fstat(fd).st_mode & 0o7777))
t("tmpfile", tmpfile)
def openat2():
    libc = ctypes.CDLL(None, use_errno=True)
    how = struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, 0o4755, 0)
    fd = libc.syscall(437, -100, (d + "/o2").encode(), how, len(how))
    if fd < 0: raise OSError(ctypes.get_errno(), "openat2")
t("openat2", openat2)
t("plain", lambda: os.close(os.open(d + "/p", os.O_CREAT | os.O_WRONLY, 0o755)))
for f in sorted(f for f in os.listdir(d) if f[0] != "."):
    print(f, oct(os.lstat(d + "/" + f).st_mode & 0o7777))
]]

local BACKENDS = { "userns" }
if has_bwrap then BACKENDS[#BACKENDS + 1] = "bubblewrap" end
if is_root then BACKENDS[#BACKENDS + 1] = "privileged" end
local describe_root = (is_root and T.has_core()) and describe
  or function(name) pending(name .. " (needs root and sbx.core)") end

describe_root("the setid guard on an idmapped read_write_path", function()
  local base, policy
  before_each(function()
    base = sh("mktemp -d /var/tmp/sbx-idmap-setid.XXXXXX"):gsub("\n$", "")
    assert.equal(0, os.execute("mkdir " .. q(base .. "/rw") .. " && chmod 755 " .. q(base) .. " " .. q(base .. "/rw")))
    local f = assert(io.open(base .. "/probe.py", "w"))
    f:write(PROBE)
    f:close()
    policy = base .. "/policy.lua"
    f = assert(io.open(policy, "w"))
    f:write('return { name = "idmap-setid", ceilings = { backends = { "userns", "privileged", "bubblewrap" } } }\n')
    f:close()
  end)
  after_each(function() os.execute("rm -rf " .. q(base)) end)

  for _, be in ipairs(BACKENDS) do
    it(be .. ": creating a file of root's with a setuid/setgid mode is refused", function()
      local s = T.sbx.session { backend = be, policy = policy, read_write_paths = { base .. "/rw" },
        read_only_paths = { base .. "/probe.py" } }
      local r = s:exec("/usr/bin/python3 " .. q(base .. "/probe.py") .. " " .. q(base .. "/rw"))
      s:close()
      assert.equal(0, r.returncode, T.show(r))
      assert.equal("open EPERM\nopenat EPERM\nmknod EPERM\ntmpfile EPERM\nopenat2 ENOSYS\nplain ok\n"
        .. "p 0o755\n", r.stdout)
      assert.equal("0:0", sh("stat -c %u:%g " .. q(base .. "/rw/p")):gsub("\n$", ""))
      -- Control: where nothing is idmapped (the session's own work dir)
      -- the guard is off, and the probe sees the bits it asked for.
      s = T.sbx.session { backend = be, policy = policy, read_only_paths = { base .. "/probe.py" } }
      r = s:exec("/usr/bin/python3 " .. q(base .. "/probe.py") .. " /tmp/sandbox-work")
      s:close()
      assert.equal(0, r.returncode, T.show(r))
      assert.equal("open ok\nopenat ok\nmknod ok\ntmpfile mode 0o4755\ntmpfile ok\nopenat2 ok\n"
        .. "plain ok\na 0o4755\nm 0o2755\no 0o6755\no2 0o4755\np 0o755\n", r.stdout)
    end)
  end
end)

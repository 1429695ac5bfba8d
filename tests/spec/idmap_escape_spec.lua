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

-- isolation_spec.lua: escape attempts from inside a userns session.  Each
-- case really tries the escape (writes /usr, reads /etc/shadow, calls the
-- dangerous syscalls, reaches a host loopback port...) and asserts the safe
-- outcome precisely, so it fails if the protection is removed.  The table of
-- cases is in tests/security/README.md.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")

-- Parse /proc/<pid>/status into { Key = "value" }.
local function status_fields(text)
  local t = {}
  for k, v in (text or ""):gmatch("([%w_]+):[ \t]*([^\n]*)") do
    t[k] = v
  end
  return t
end

local ZERO_CAPS = "0000000000000000"

describe("userns isolation: posture of a run", function()
  local s, secret

  setup(function()
    -- Set before the session opens, so a zygote that inherits the host's
    -- environment would carry it into every run.
    secret = "sbx-host-secret-" .. H.token()
    H.setenv("SBX_TEST_SECRET", secret)
    assert.are.equal(secret, os.getenv("SBX_TEST_SECRET"))
    s = H.session()
  end)

  teardown(function()
    if s then
      s:close()
    end
    H.unsetenv("SBX_TEST_SECRET")
    H.cleanup()
  end)

  it("has no_new_privs, seccomp mode 2 and every capability set empty", function()
    local r = s:exec("cat /proc/self/status")
    assert.are.equal(0, r.returncode, H.show(r))
    local st = status_fields(r.stdout)
    assert.are.equal("1", st.NoNewPrivs)
    assert.are.equal("2", st.Seccomp)
    assert.is_true(tonumber(st.Seccomp_filters or "1") >= 1)
    for _, set in ipairs { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb" } do
      assert.are.equal(ZERO_CAPS, st[set], set .. " must be empty")
    end
  end)

  it("reports the same posture from a compiled program (posture helper)", function()
    local prog = H.install(s, "posture")
    local r = s:exec(prog)
    assert.are.equal(0, r.returncode, H.show(r))
    local res = H.results(r.stdout)
    assert.are.equal("1", res.NoNewPrivs)
    assert.are.equal("2", res.Seccomp)
    for _, set in ipairs { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb" } do
      assert.are.equal(ZERO_CAPS, res[set], set)
    end
    for _, id in ipairs { "uid", "gid", "euid", "egid" } do
      assert.are.equal("1000", res[id], id)
    end
    assert.is_true(res.groups == "none" or res.groups == "1000", "groups: " .. tostring(res.groups))
    assert.are.equal("0,1,2", res.fds)
  end)

  it("keeps seccomp and no_new_privs on every thread", function()
    local r = H.py(s, [[
import glob, threading
ev = threading.Event()
ts = [threading.Thread(target=ev.wait) for _ in range(3)]
for t in ts: t.start()
for p in sorted(glob.glob("/proc/self/task/*/status")):
    f = dict(l.split(":", 1) for l in open(p).read().splitlines() if ":" in l)
    print("TASK", f["Seccomp"].strip(), f["NoNewPrivs"].strip(), f["CapEff"].strip())
ev.set()
]])
    assert.are.equal(0, r.returncode, H.show(r))
    local n = 0
    for sec, nnp, eff in r.stdout:gmatch("TASK (%S+) (%S+) (%S+)") do
      n = n + 1
      assert.are.equal("2", sec)
      assert.are.equal("1", nnp)
      assert.are.equal(ZERO_CAPS, eff)
    end
    assert.is_true(n >= 4, "expected 4 threads, saw " .. n .. "\n" .. H.show(r))
  end)

  it("runs as uid/gid 1000 with no supplementary group of the host", function()
    local r = s:exec("cat /proc/self/status; id -u; id -g")
    assert.are.equal(0, r.returncode, H.show(r))
    local st = status_fields(r.stdout)
    assert.are.equal("1000\t1000\t1000\t1000", st.Uid)
    assert.are.equal("1000\t1000\t1000\t1000", st.Gid)
    -- A kept host group (root's gid 0 shows as 65534 inside) would open
    -- every group-readable root file.
    for g in (st.Groups or ""):gmatch("%d+") do
      assert.are.equal("1000", g, "unexpected supplementary group " .. g)
    end
  end)

  it("passes only fds 0, 1 and 2 to the workload", function()
    -- ls opens one directory fd of its own: it is the lowest free one, 3.
    local r = s:exec("ls -1 /proc/self/fd")
    assert.are.equal(0, r.returncode, H.show(r))
    assert.are.same({ "0", "1", "2", "3" }, H.lines(r.stdout))
  end)

  it("is in a different namespace of every kind than the host", function()
    local kinds = { "user", "mnt", "pid", "net", "ipc", "uts", "cgroup" }
    local cmd = {}
    for _, k in ipairs(kinds) do
      cmd[#cmd + 1] = "readlink /proc/self/ns/" .. k
    end
    local r = s:exec(table.concat(cmd, "; "))
    assert.are.equal(0, r.returncode, H.show(r))
    local inside = H.lines(r.stdout)
    assert.are.equal(#kinds, #inside, H.show(r))
    for i, k in ipairs(kinds) do
      local host = H.readlink("/proc/self/ns/" .. k)
      assert.is_truthy(host, "host ns " .. k)
      assert.is_truthy(inside[i]:match("^" .. k .. ":%[%d+%]$"), inside[i])
      assert.are_not.equal(host, inside[i], k .. " namespace is the host's")
    end
  end)

  it("sees no host environment, only the defaults and what env passes", function()
    local r = s:exec("env", { env = { SBX_PASSED = "passed-value" } })
    assert.are.equal(0, r.returncode, H.show(r))
    assert.is_nil(r.stdout:find(secret, 1, true), "host secret leaked into the run")
    local names = {}
    for line in r.stdout:gmatch("[^\n]+") do
      local name = line:match("^([%w_]+)=")
      if name then
        names[name] = line:sub(#name + 2)
      end
    end
    assert.are.equal("passed-value", names.SBX_PASSED)
    assert.are.equal("/tmp/sandbox-work", names.HOME)
    assert.is_truthy(names.PATH)
    -- Defaults of the contract, plus what a shell sets by itself.
    local allowed = H.set {
      "PATH", "HOME", "LANG", "LC_ALL", "TERM", "USER", "LOGNAME", "SHELL", "TMPDIR",
      "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
      "all_proxy", "no_proxy", "PWD", "OLDPWD", "SHLVL", "_", "SBX_PASSED",
      "VIRTUAL_ENV", -- the session venv (sbx.venv)
    }
    for name in pairs(names) do
      assert.is_true(allowed[name] == true, "unexpected variable in the run: " .. name)
    end
  end)

  it("shows the secret in no process's environment or command line", function()
    -- The secret is spelled backwards in the script so that the shell's
    -- own command line does not contain it.
    local r = H.py(s, string.format([[
import glob
needle = %q[::-1].encode()
hits = []
for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        if needle in open(p, "rb").read():
            hits.append(p)
    except OSError:
        pass
print("HITS", len(hits), " ".join(hits))
]], secret:reverse()))
    assert.are.equal(0, r.returncode, H.show(r))
    assert.is_truthy(r.stdout:find("HITS 0", 1, true), H.show(r))
  end)

  it("is not PID 1, and PID 1 (sbx-init) is out of the workload's reach", function()
    local r = s:exec("echo pid=$$; cat /proc/1/comm; readlink /proc/self/ns/pid")
    assert.are.equal(0, r.returncode, H.show(r))
    assert.are_not.equal("1", r.stdout:match("pid=(%d+)"))
    local comm = H.lines(r.stdout)[2]
    assert.is_truthy(comm)
    assert.are_not.equal("cat", comm)
    assert.are_not.equal("sh", comm)
    -- The workload may not read or steer init (its memory, fds, root, env).
    r = H.py(s, [[
import os, errno
def res(name, f):
    try:
        f(); print("RESULT", name, "ok")
    except OSError as e:
        print("RESULT", name, errno.errorcode.get(e.errno, e.errno))
res("mem", lambda: open("/proc/1/mem", "rb").read(1))
res("environ", lambda: open("/proc/1/environ", "rb").read())
res("fd", lambda: os.listdir("/proc/1/fd"))
res("root", lambda: os.listdir("/proc/1/root/"))
res("cwd", lambda: os.listdir("/proc/1/cwd/"))
res("exe", lambda: os.readlink("/proc/1/exe"))
]])
    assert.are.equal(0, r.returncode, H.show(r))
    local res = H.results(r.stdout)
    for _, name in ipairs { "mem", "environ", "fd", "root", "cwd", "exe" } do
      assert.is_truthy(res[name], name .. " not tried\n" .. H.show(r))
      assert.are_not.equal("ok", res[name], "workload reached init's " .. name)
    end
    -- Signals to PID 1 from inside (STOP and KILL included) must not stop
    -- init from reporting the run, nor end the session.  The shell ignores
    -- what init might forward back to it.
    r = s:exec("trap '' TERM INT HUP QUIT USR1 USR2; for sig in STOP KILL TERM INT HUP QUIT USR1 USR2 CONT; do "
      .. "kill -$sig 1 2>/dev/null; done; sleep 0.3; echo survived; exit 7", { timeout_s = 20 })
    assert.are.equal("survived\n", r.stdout, H.show(r))
    assert.are.equal(7, r.returncode, H.show(r))
    assert.are.equal("ok\n", s:exec("echo ok").stdout)
  end)

  it("has its own hostname", function()
    local r = s:exec("cat /proc/sys/kernel/hostname")
    assert.are.equal(0, r.returncode, H.show(r))
    local host = H.read_file("/proc/sys/kernel/hostname")
    assert.are_not.equal(host, r.stdout)
  end)
end)

describe("userns isolation: between sessions", function()
  local a, b

  setup(function()
    a = H.session()
    b = H.session()
  end)

  teardown(function()
    for _, s in ipairs { a, b } do
      pcall(s.close, s)
    end
    H.cleanup()
  end)

  it("cannot see, signal or reach another session", function()
    -- Both map the sandbox user to the same host uid: only the namespaces
    -- keep them apart.
    local n = "9" .. H.token()
    local p = a:run("echo secret-of-a > mine.txt; echo up; exec sleep " .. n, { stdout = true })
    finally(function()
      pcall(p.kill, p)
    end)
    -- Wait for the first line (if one comes: a run that ends silently
    -- goes on to the probes, as before).
    local up = p:lines()()
    if up ~= nil then assert.are.equal("up", up) end
    local r = b:exec("for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; "
      .. "kill -9 -1; ls -A /tmp/sandbox-work; readlink /proc/self/ns/net /proc/self/ns/user")
    assert.is_truthy(r.stdout:find("/proc/[0-9]*/cmdline", 1, true), "control: b lists its own shell\n" .. H.show(r))
    assert.is_nil(r.stdout:find(n, 1, true), "session b sees session a's process")
    assert.is_nil(r.stdout:find("mine.txt", 1, true), "session b sees session a's work dir")
    local ra = a:exec("readlink /proc/self/ns/net /proc/self/ns/user")
    local nb, ub = r.stdout:match("(net:%[%d+%])%s+(user:%[%d+%])")
    local na, ua = ra.stdout:match("(net:%[%d+%])%s+(user:%[%d+%])")
    assert.is_truthy(na and nb, H.show(r) .. H.show(ra))
    assert.are_not.equal(na, nb)
    assert.are_not.equal(ua, ub)
    -- b's kill -9 -1 did not reach a's sleep.
    assert.are.equal(1, #H.procs_exact("sleep " .. n))
    assert.are.equal("secret-of-a\n", a:get_bytes("mine.txt"))
    assert.is_truthy(H.raised(b.get_bytes, b, "mine.txt"))
  end)
end)

describe("userns isolation: filesystem", function()
  local s

  setup(function()
    s = H.session()
  end)

  teardown(function()
    if s then
      s:close()
    end
    H.cleanup()
  end)

  it("refuses writes to /usr, /etc, /, /bin, /lib, /dev, /proc and /proc/sys", function()
    local token = H.token()
    local targets = {
      "/usr/sbx-probe-" .. token, "/usr/bin/sbx-probe-" .. token, "/etc/sbx-probe-" .. token,
      "/sbx-probe-" .. token, "/bin/sbx-probe-" .. token, "/lib/sbx-probe-" .. token,
      "/dev/sbx-probe-" .. token, "/proc/sbx-probe-" .. token,
    }
    -- Existing files are opened for writing only (nothing is written), so
    -- a broken sandbox cannot hurt the machine running this test.
    local existing = {
      "/etc/passwd", "/etc/hosts", "/usr/bin/env", "/proc/sys/kernel/hostname",
      "/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches",
    }
    local lines = {
      "import os, errno",
      "def res(name, f):",
      "    try:",
      "        f(); print('RESULT', name, 'ok')",
      "    except OSError as e:",
      "        print('RESULT', name, errno.errorcode.get(e.errno, e.errno))",
    }
    for _, p in ipairs(targets) do
      lines[#lines + 1] = string.format("res(%q, lambda: os.close(os.open(%q, os.O_WRONLY | os.O_CREAT, 0o644)))", p, p)
      lines[#lines + 1] = string.format("res(%q, lambda: os.mkdir(%q))", p .. ".d", p .. ".d")
    end
    for _, p in ipairs(existing) do
      lines[#lines + 1] = string.format("res(%q, lambda: os.close(os.open(%q, os.O_WRONLY)))", p, p)
    end
    lines[#lines + 1] = "res('rename_usr_bin_env', lambda: os.rename('/usr/bin/env', '/usr/bin/env.x'))"
    lines[#lines + 1] = "res('unlink_etc_hosts', lambda: os.unlink('/etc/hosts'))"
    local r = H.py(s, table.concat(lines, "\n"))
    assert.are.equal(0, r.returncode, H.show(r))
    local res = H.results(r.stdout)
    local tried = 0
    for name, outcome in pairs(res) do
      tried = tried + 1
      assert.are_not.equal("ok", outcome, "write succeeded: " .. name)
    end
    assert.are.equal(#targets * 2 + #existing + 2, tried, H.show(r))
    for _, p in ipairs(targets) do
      assert.is_false(H.exists(p), "created on the host: " .. p)
    end
  end)

  it("has no /etc/shadow and no host secrets in /etc", function()
    local r = s:exec("cat /etc/shadow")
    assert.are_not.equal(0, r.returncode)
    assert.is_truthy(r.stderr:find("No such file", 1, true), H.show(r))
    r = s:exec("ls -A /etc")
    assert.are.equal(0, r.returncode, H.show(r))
    local entries = H.set(H.lines(r.stdout))
    assert.is_true(entries.passwd == true, "the curated /etc should hold passwd\n" .. r.stdout)
    for _, name in ipairs {
      "shadow", "shadow-", "gshadow", "gshadow-", "ssh", "machine-id", "sudoers", "sudoers.d",
      "security", "krb5.keytab", "docker",
    } do
      assert.is_nil(entries[name], "/etc/" .. name .. " is visible")
    end
    -- A bound /etc/ssl must not open the host's private keys.
    r = s:exec("ls -A /etc/ssl/private 2>&1; true")
    assert.is_truthy(r.stdout == "" or r.stdout:find("Permission denied", 1, true)
      or r.stdout:find("No such file", 1, true), "/etc/ssl/private: " .. r.stdout)
  end)

  it("does not show the host's /root, /home or /run", function()
    local r = s:exec("for d in /root /home /run /var/run /var/lib /srv; do "
      .. "if [ -e $d ]; then echo \"$d: $(ls -A $d 2>&1 | tr '\\n' ' ')\"; fi; done")
    assert.are.equal(0, r.returncode, H.show(r))
    for line in r.stdout:gmatch("[^\n]+") do
      local dir, content = line:match("^(%S+): ?(.*)$")
      assert.is_truthy(content:match("^%s*$") or content:find("Permission denied", 1, true),
        dir .. " shows host content: " .. content)
    end
  end)

  it("has no unix socket files anywhere, and host sockets in /tmp and /run are unreachable", function()
    local tmpdir = H.mktemp_dir("sock")
    local paths = { tmpdir .. "/host.sock", "/run/sbx-sec-" .. H.token() .. ".sock" }
    local listeners = {}
    local ok, err = pcall(function()
      for _, p in ipairs(paths) do
        listeners[#listeners + 1] = H.unix_listener(p)
        assert.is_true(H.host_unix_connect(p), "control: host cannot reach " .. p)
      end
      local r = s:exec("find / -path /proc -prune -o -type s -print 2>/dev/null; true")
      assert.are.equal("", r.stdout, "socket files visible in the sandbox")
      local code = { "import socket, errno" }
      for i, p in ipairs(paths) do
        code[#code + 1] = string.format([[
try:
    socket.socket(socket.AF_UNIX).connect(%q); print("RESULT s%d ok")
except OSError as e:
    print("RESULT s%d", errno.errorcode.get(e.errno, e.errno))]], p, i, i)
      end
      r = H.py(s, table.concat(code, "\n"))
      local res = H.results(r.stdout)
      for i, p in ipairs(paths) do
        assert.are.equal("ENOENT", res["s" .. i], p .. "\n" .. H.show(r))
      end
      for _, l in ipairs(listeners) do
        -- the controls connected once each; nothing else may have
        assert.are.equal("accepted\n", l.accepted())
      end
    end)
    for _, l in ipairs(listeners) do
      l.stop()
    end
    H.rmtree(tmpdir)
    assert(ok, err)
  end)

  it("gives every run an empty, private /tmp and /dev/shm while the work dir persists", function()
    local r = s:exec("ls -A /tmp; echo --; ls -A /dev/shm; echo --; "
      .. "echo one > /tmp/run1 && echo one > /dev/shm/run1 && echo one > /tmp/sandbox-work/run1 && echo wrote")
    assert.are.equal(0, r.returncode, H.show(r))
    -- /tmp holds only the work dir's mount point.
    assert.are.equal("sandbox-work\n--\n--\nwrote\n", r.stdout)
    r = s:exec("ls -A /tmp; echo --; ls -A /dev/shm; echo --; cat /tmp/sandbox-work/run1")
    assert.are.equal(0, r.returncode, H.show(r))
    assert.are.equal("sandbox-work\n--\n--\none\n", r.stdout)
    assert.are.equal("one\n", H.read_file(s.work_dir .. "/run1"))
  end)

  it("does not share /tmp between concurrent runs", function()
    local p = s:run("echo mine > /tmp/concurrent && echo ready && sleep 3", { stdout = true })
    local first = p:lines()()
    assert.are.equal("ready", first)
    local r = s:exec("cat /tmp/concurrent")
    assert.are_not.equal(0, r.returncode, "a concurrent run sees another run's /tmp")
    p:kill()
    p:wait()
  end)

  describe("mount table of a run", function()
    local mounts, text
    local writable = H.set { "/tmp", "/tmp/sandbox-work", "/dev/shm", "/dev/pts" }
    local dev_nodes = H.set { "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
      "/dev/tty", "/dev/ptmx" }

    setup(function()
      local r = s:exec("cat /proc/self/mountinfo")
      assert.are.equal(0, r.returncode, H.show(r))
      text = r.stdout
      mounts = H.parse_mountinfo(text)
    end)

    -- Every mount breaking rule(m) (a predicate), listed for the message.
    local function offenders(rule)
      local bad = {}
      for _, m in ipairs(mounts) do
        if not rule(m) then
          bad[#bad + 1] = m.line
        end
      end
      return table.concat(bad, "\n")
    end

    it("has the expected mounts and no host runtime paths", function()
      local seen = {}
      for _, m in ipairs(mounts) do
        seen[m.mountpoint] = true
      end
      for _, mp in ipairs { "/", "/usr", "/proc", "/tmp", "/tmp/sandbox-work", "/dev", "/dev/shm" } do
        assert.is_true(seen[mp] == true, "no mount at " .. mp .. "\n" .. text)
      end
      assert.are.equal("", offenders(function(m)
        local mp = m.mountpoint
        return not (mp:match("^/run") or mp:match("^/var/run") or mp:match("^/home")
          or mp:match("^/root") or mp:match("docker") or mp:match("containerd")
          or mp:match("%.sock$"))
      end))
    end)

    it("mounts everything nosuid", function()
      assert.are.equal("", offenders(function(m)
        return m.opts.nosuid == true
      end))
    end)

    it("mounts everything nodev but the device-node binds and /dev/pts", function()
      assert.are.equal("", offenders(function(m)
        return m.opts.nodev == true or dev_nodes[m.mountpoint] or m.mountpoint == "/dev/pts"
      end))
    end)

    -- /proc is writable so a process can write its own files (raise its
    -- oom_score_adj); what configures the kernel is a read-only bind over it.
    it("mounts everything read-only but /tmp, the work dir, /dev/shm, /proc (and devices)", function()
      assert.are.equal("", offenders(function(m)
        return m.opts.ro == true or writable[m.mountpoint] or dev_nodes[m.mountpoint]
          or m.mountpoint == "/proc"
      end))
    end)

    it("binds /proc's kernel-wide parts read-only over it (sys, sysrq-trigger, irq, bus)", function()
      local ro = {}
      for _, m in ipairs(mounts) do
        if m.opts.ro then ro[m.mountpoint] = true end
      end
      for _, p in ipairs { "/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus" } do
        local _, rc = H.sh("test -e " .. p)
        if rc == 0 then -- on this host
          assert.is_true(ro[p] == true, p .. " is no read-only mount:\n" .. text)
        end
      end
    end)

    it("propagates no mount event to or from the host (no shared peer group)", function()
      assert.are.equal("", offenders(function(m)
        for _, tag in ipairs(m.optional) do
          if tag:match("^shared:") then
            return false
          end
        end
        return true
      end))
    end)
  end)

  it("has a minimal /dev that works", function()
    local r = s:exec("ls -A /dev")
    assert.are.equal(0, r.returncode, H.show(r))
    local allowed = H.set { "null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm",
      "fd", "stdin", "stdout", "stderr" }
    local entries = H.set(H.lines(r.stdout))
    for name in pairs(entries) do
      assert.is_true(allowed[name] == true, "unexpected /dev/" .. name)
    end
    for _, name in ipairs { "null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm" } do
      assert.is_true(entries[name] == true, "/dev/" .. name .. " missing")
    end
    r = s:exec("find /dev -type b | wc -l; echo data > /dev/null && echo null-ok; "
      .. "head -c 8 /dev/zero | od -An -tx1 | tr -d ' \\n'; echo; head -c 16 /dev/urandom | wc -c; "
      .. "echo x > /dev/full 2>/dev/null || echo full-refused")
    assert.are.equal(0, r.returncode, H.show(r))
    assert.are.same({ "0", "null-ok", "0000000000000000", "16", "full-refused" }, H.lines(r.stdout))
  end)

  it("gives no privilege through setuid or file-capability binaries", function()
    -- The host uid that is uid 0 inside, if the session maps one: a setuid
    -- binary it owns would be setuid-root inside but for nosuid and NNP.
    local r = s:exec("cat /proc/self/uid_map")
    assert.are.equal(0, r.returncode, H.show(r))
    local root_host_uid = 0
    for inside, outside in r.stdout:gmatch("(%d+)%s+(%d+)%s+%d+") do
      if inside == "0" then
        root_host_uid = tonumber(outside)
      end
    end
    local id_bin = H.install(s, "suid-id", "/usr/bin/id")
    local wd = s.work_dir
    local _, rc = H.sh(string.format("chown %d:%d %s/suid-id && chmod 6755 %s/suid-id",
      root_host_uid, root_host_uid, H.q(wd), H.q(wd)))
    assert.are.equal(0, rc)
    H.install(s, "fcap-cat", "/usr/bin/cat")
    -- Capabilities set by host root (a v2 xattr) hold in every user
    -- namespace; with an inside root, a v3 xattr for it does too.  Only
    -- nosuid and no_new_privs stand between them and the workload.
    local log
    log, rc = H.sh(string.format("setcap %s cap_sys_admin,cap_dac_override+eip %s/fcap-cat",
      root_host_uid > 0 and ("-n " .. root_host_uid) or "", H.q(wd)), true)
    assert.are.equal(0, rc, log)
    r = s:exec(id_bin .. " -u; " .. id_bin .. " -g; ./fcap-cat /proc/self/status")
    assert.are.equal(0, r.returncode, H.show(r))
    local l = H.lines(r.stdout)
    assert.are.equal("1000", l[1], "setuid binary changed the euid")
    assert.are.equal("1000", l[2], "setgid binary changed the egid")
    local st = status_fields(r.stdout)
    assert.are.equal(ZERO_CAPS, st.CapEff, "file capabilities were granted")
    assert.are.equal(ZERO_CAPS, st.CapPrm, "file capabilities were granted")
    -- The host's own setuid tools give nothing either.
    r = s:exec("su -c id root </dev/null; echo su=$?; mount -t tmpfs none /tmp 2>&1; echo mount=$?")
    assert.is_truthy(r.stdout:match("su=[1-9]"), H.show(r))
    assert.is_truthy(r.stdout:match("mount=[1-9]"), H.show(r))
    r = H.py(s, [[
import os
for name, f in (("setuid", lambda: os.setuid(0)), ("setgid", lambda: os.setgid(0)),
                ("setgroups", lambda: os.setgroups([0]))):
    try:
        f(); print("RESULT", name, "ok")
    except OSError as e:
        print("RESULT", name, e.errno)
]])
    local res = H.results(r.stdout)
    for _, name in ipairs { "setuid", "setgid", "setgroups" } do
      -- EINVAL: uid/gid 0 is not even mapped in the session.
      assert.is_true(res[name] == "1" or res[name] == "22", name .. " must fail (EPERM/EINVAL)\n" .. H.show(r))
    end
  end)

  it("has no /sys, or a read-only one where cgroups cannot be written", function()
    local r = s:exec("if [ -e /sys ]; then echo present; ls -A /sys; fi")
    assert.are.equal(0, r.returncode, H.show(r))
    if r.stdout:find("present", 1, true) then
      r = H.py(s, [[
import os, errno
def res(name, f):
    try:
        f(); print("RESULT", name, "ok")
    except OSError as e:
        print("RESULT", name, errno.errorcode.get(e.errno, e.errno))
res("mkdir_sys", lambda: os.mkdir("/sys/sbx-probe"))
res("mkdir_cgroup", lambda: os.mkdir("/sys/fs/cgroup/sbx-probe"))
res("cgroup_procs", lambda: os.close(os.open("/sys/fs/cgroup/cgroup.procs", os.O_WRONLY)))
res("uevent_helper", lambda: os.close(os.open("/sys/kernel/uevent_helper", os.O_WRONLY)))
]])
      for name, outcome in pairs(H.results(r.stdout)) do
        assert.are_not.equal("ok", outcome, "/sys write succeeded: " .. name)
      end
      local m = H.parse_mountinfo(s:exec("cat /proc/self/mountinfo").stdout)
      for _, mm in ipairs(m) do
        if mm.mountpoint:match("^/sys") then
          assert.is_true(mm.opts.ro == true, "writable: " .. mm.line)
        end
      end
    end
  end)
end)

describe("userns isolation: kernel surface", function()
  local s

  setup(function()
    s = H.session()
  end)

  teardown(function()
    if s then
      s:close()
    end
    H.cleanup()
  end)

  -- EPERM/ENOSYS from the filter, or the process killed by it.  The
  -- sweeps' arguments make the kernel itself answer differently for most
  -- calls (an unfiltered call says EFAULT, EBADF, EINVAL, ENOTTY or
  -- succeeds), so these outcomes mean the filter answered.
  local safe = H.set { "EPERM", "ENOSYS", "killed:SIGSYS", "SIGSYS" }

  local function check_all(res, names, out)
    for _, name in ipairs(names) do
      assert.is_truthy(res[name], name .. " was not tried (did the sweep die?)\n" .. out)
      assert.is_true(safe[res[name]] == true, name .. " reached the kernel: " .. res[name])
    end
  end

  it("refuses every syscall of the baseline (syscall_sweep)", function()
    local prog = H.install(s, "syscall_sweep")
    local r = s:exec(prog)
    assert.are.equal(0, r.returncode, H.show(r))
    local res = H.results(r.stdout)
    -- The issue's list and the rest of Docker's table of refused syscalls.
    check_all(res, H.SWEEP_BASELINE, r.stdout)
    -- Controls: what a workload needs still works, so the refusals above
    -- are the filter's choices and not a dead process.
    assert.are.equal("OK", res.getpid)
    assert.are.equal("OK", res.mknod_fifo)
    assert.are.equal("OK", res.personality_query)
    assert.are.equal("ENOTTY", res.ioctl_tcgets)
  end)

  it("refuses the real attacks of the sweep"
    .. " (new namespaces, ptrace of a child, TIOCSTI on a controlling pty)", function()
    local prog = H.install(s, "sweep")
    local r = s:exec(prog)
    assert.are.equal(0, r.returncode, H.show(r))
    check_all(H.results(r.stdout), H.SWEEP_REAL, r.stdout)
  end)

  it("refuses TIOCSTI/TIOCLINUX on stdin and has no controlling terminal", function()
    local prog = H.install(s, "tiocsti")
    local r = s:exec(prog)
    assert.are.equal(0, r.returncode, H.show(r))
    local res = H.results(r.stdout)
    assert.are.equal("EPERM", res.tiocsti_stdin, H.show(r))
    assert.are.equal("EPERM", res.tiocsti_stdin_high, H.show(r))
    assert.are.equal("EPERM", res.tioclinux_stdin, H.show(r))
    assert.is_true(res.tiocsti_tty == "open-ENXIO" or res.tiocsti_tty == "EPERM", H.show(r))
  end)

  it("kills int 0x80 and never runs an x32 syscall", function()
    local int80, x32 = H.install(s, "int80"), H.install(s, "x32")
    -- 159 = 128 + SIGSYS: the shell reports the filter's kill.
    local r = s:exec(int80 .. "; echo status=$?")
    assert.is_nil(r.stdout:find("survived", 1, true), "int 0x80 ran: " .. H.show(r))
    assert.is_truthy(r.stdout:find("status=159", 1, true), H.show(r))
    r = s:exec(x32 .. "; echo status=$?")
    local res = H.results(r.stdout)
    assert.is_true(r.stdout:find("status=159", 1, true) ~= nil
      or safe[res.x32 or ""] == true, "x32 syscall: " .. H.show(r))
    assert.are_not.equal("OK", res.x32)
  end)

  it("cannot make a user namespace with unshare(1)", function()
    local r = s:exec("unshare -U true; echo u=$?; unshare -Ur id -u; echo r=$?")
    assert.is_truthy(r.stdout:match("u=[1-9]"), H.show(r))
    assert.is_truthy(r.stdout:match("r=[1-9]"), H.show(r))
    assert.is_nil(r.stdout:match("\n0\n"), "unshare -r gave uid 0\n" .. H.show(r))
  end)

  it("cannot create device nodes", function()
    local r = H.py(s, [[
import os, stat, errno
for name, mode, dev in (("chr", stat.S_IFCHR, os.makedev(1, 3)), ("blk", stat.S_IFBLK, os.makedev(254, 0))):
    try:
        os.mknod("/tmp/sandbox-work/node-" + name, mode | 0o666, dev); print("RESULT", name, "ok")
    except OSError as e:
        print("RESULT", name, errno.errorcode.get(e.errno, e.errno))
]])
    assert.are.equal(0, r.returncode, H.show(r))
    local res = H.results(r.stdout)
    assert.are.equal("EPERM", res.chr, H.show(r))
    assert.are.equal("EPERM", res.blk, H.show(r))
    assert.is_false(H.exists(s.work_dir .. "/node-chr"))
    assert.is_false(H.exists(s.work_dir .. "/node-blk"))
  end)
end)

describe("userns isolation: network (blocked)", function()
  local s

  setup(function()
    s = H.session()
  end)

  teardown(function()
    if s then
      s:close()
    end
    H.cleanup()
  end)

  it("has only the loopback interface", function()
    local r = s:exec("cat /proc/net/dev")
    assert.are.equal(0, r.returncode, H.show(r))
    local ifaces = {}
    for name in r.stdout:gmatch("\n%s*([%w%.%-_@]+):") do
      ifaces[#ifaces + 1] = name
    end
    assert.are.same({ "lo" }, ifaces)
  end)

  it("cannot reach a TCP listener on the host's 127.0.0.1", function()
    local l = H.tcp_listener()
    local ok, err = pcall(function()
      assert.is_true((H.host_tcp_connect(l.port)), "control: host cannot reach its own listener")
      local r = H.py(s, string.format([[
import socket, errno
try:
    c = socket.create_connection(("127.0.0.1", %d), timeout=2)
    print("RESULT tcp ok", c.recv(100))
except OSError as e:
    print("RESULT tcp", errno.errorcode.get(e.errno, e.errno))
]], l.port))
      assert.are.equal(0, r.returncode, H.show(r))
      local res = H.results(r.stdout)
      assert.is_true(res.tcp == "ECONNREFUSED" or res.tcp == "ENETUNREACH", H.show(r))
      -- Only the control's connection reached the listener.
      assert.are.equal(1, #H.lines(l.accepted()))
    end)
    l.stop()
    assert(ok, err)
  end)

  it("cannot reach a host abstract unix socket", function()
    local name = "@sbx-sec-" .. H.token()
    local l = H.unix_listener(name)
    local ok, err = pcall(function()
      assert.is_true((H.host_unix_connect(name)), "control: host cannot reach its own socket")
      local r = H.py(s, string.format([[
import socket, errno
try:
    socket.socket(socket.AF_UNIX).connect("\0" + %q); print("RESULT abstract ok")
except OSError as e:
    print("RESULT abstract", errno.errorcode.get(e.errno, e.errno))
]], name:sub(2)))
      assert.are.equal("ECONNREFUSED", H.results(r.stdout).abstract, H.show(r))
      assert.are.equal("accepted\n", l.accepted())
    end)
    l.stop()
    assert(ok, err)
  end)

  it("fails at once to reach the internet (no route), over TCP, UDP and IPv6", function()
    local r = H.py(s, [[
import socket, errno, time
def res(name, f):
    t = time.monotonic()
    try:
        f(); out = "ok"
    except OSError as e:
        out = errno.errorcode.get(e.errno, str(e.errno)) if e.errno else type(e).__name__
    print("RESULT", name, out)
    print("RESULT", name + "_ms", int((time.monotonic() - t) * 1000))
res("tcp4", lambda: socket.create_connection(("1.1.1.1", 443), timeout=2))
res("udp4", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("1.1.1.1", 53)))
res("tcp6", lambda: socket.create_connection(("2606:4700:4700::1111", 443), timeout=2))
]])
    assert.are.equal(0, r.returncode, H.show(r))
    local res = H.results(r.stdout)
    assert.are.equal("ENETUNREACH", res.tcp4, H.show(r))
    assert.are.equal("ENETUNREACH", res.udp4, H.show(r))
    assert.is_true(H.set { "ENETUNREACH", "EADDRNOTAVAIL", "EAFNOSUPPORT" }[res.tcp6] == true, H.show(r))
    for _, k in ipairs { "tcp4_ms", "udp4_ms", "tcp6_ms" } do
      assert.is_true(tonumber(res[k]) < 1000, k .. " took " .. res[k] .. " ms: a timeout, not no-route")
    end
  end)

  it("cannot open raw or packet sockets", function()
    local r = H.py(s, [[
import socket, errno
for name, fam, typ, proto in (("raw", socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
                              ("packet", socket.AF_PACKET, socket.SOCK_RAW, 0)):
    try:
        socket.socket(fam, typ, proto); print("RESULT", name, "ok")
    except OSError as e:
        print("RESULT", name, errno.errorcode.get(e.errno, e.errno))
]])
    local res = H.results(r.stdout)
    assert.are.equal("EPERM", res.raw, H.show(r))
    -- The seccomp filter refuses the family before the kernel checks
    -- CAP_NET_RAW (which would answer EPERM): only AF_UNIX/INET/INET6/NETLINK.
    assert.are.equal("EAFNOSUPPORT", res.packet, H.show(r))
  end)
end)

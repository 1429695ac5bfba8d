-- backend_escape_spec.lua: the escape attempts of isolation_spec that every
-- isolating backend must hold, run against the other backends this machine
-- has (privileged, bubblewrap; userns is isolation_spec's own subject).
-- Each case really tries (the syscall sweeps, writes to read-only places, a
-- host loopback listener, raw sockets, a nested user namespace, device
-- nodes, kill -9 -1) and asserts the safe outcome, with what legitimately
-- differs per backend said in the case (privileged keeps the host's user
-- namespace, and runs as an unprivileged host uid of its own).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")

local ZERO_CAPS = "0000000000000000"
local safe = H.set { "EPERM", "ENOSYS", "killed:SIGSYS", "SIGSYS" }

local function status_fields(text)
  local t = {}
  for k, v in (text or ""):gmatch("([%w_]+):[ \t]*([^\n]*)") do t[k] = v end
  return t
end

H.each_backend({ "privileged", "bubblewrap" }, "escape attempts", function(backend, need)
  teardown(H.cleanup)

  it("reports itself as " .. backend
    .. " and runs unprivileged: no_new_privs, seccomp 2, no capability, no uid 0", function()
    local s = need()
    if not s then return end
    local r = s:exec("cat /proc/self/status")
    assert.are.equal(0, r.returncode, H.show(r))
    assert.are.equal(backend, r.backend)
    local st = status_fields(r.stdout)
    assert.are.equal("1", st.NoNewPrivs)
    assert.are.equal("2", st.Seccomp)
    for _, set in ipairs { "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb" } do
      assert.are.equal(ZERO_CAPS, st[set], set .. " must be empty")
    end
    for id in (st.Uid .. "\t" .. st.Gid):gmatch("%d+") do
      assert.are_not.equal("0", id, "a root id inside: " .. st.Uid .. " / " .. st.Gid)
    end
    for g in (st.Groups or ""):gmatch("%d+") do
      assert.are_not.equal("0", g, "supplementary group 0")
    end
  end)

  it("is in its own mount, PID, network, IPC and UTS namespaces", function()
    local s = need()
    if not s then return end
    local kinds = { "mnt", "pid", "net", "ipc", "uts" }
    local cmd = {}
    for _, k in ipairs(kinds) do cmd[#cmd + 1] = "readlink /proc/self/ns/" .. k end
    local r = s:exec(table.concat(cmd, "; "))
    local inside = H.lines(r.stdout)
    assert.are.equal(#kinds, #inside, H.show(r))
    for i, k in ipairs(kinds) do
      assert.are_not.equal(H.readlink("/proc/self/ns/" .. k), inside[i], k .. " namespace is the host's")
    end
  end)

  it("refuses every syscall of the baseline and the real attacks", function()
    local s = need()
    if not s then return end
    for prog, names in pairs { syscall_sweep = H.SWEEP_BASELINE, sweep = H.SWEEP_REAL } do
      local r = s:exec(H.install(s, prog))
      assert.are.equal(0, r.returncode, prog .. ": " .. H.show(r))
      local res = H.results(r.stdout)
      for _, name in ipairs(names) do
        assert.is_truthy(res[name], prog .. ": " .. name .. " was not tried\n" .. r.stdout)
        assert.is_true(safe[res[name]] == true, prog .. ": " .. name .. " reached the kernel: " .. res[name])
      end
    end
  end)

  it("refuses writes to the system and has no host secrets", function()
    local s = need()
    if not s then return end
    local r = s:exec([[
for p in /usr/x /etc/x /x /bin/x /lib/x /proc/x; do
  if (echo pwn > "$p") 2>/dev/null; then echo "WROTE $p"; fi
done
if (echo 1 > /proc/sys/kernel/hostname) 2>/dev/null; then echo WROTE sysctl; fi
test -e /etc/shadow && echo SHADOW
test -e /root/.bashrc && echo ROOTHOME
echo done]])
    assert.are.equal("done\n", r.stdout, H.show(r))
    for _, p in ipairs { "/usr/x", "/etc/x", "/x", "/bin/x", "/lib/x" } do
      assert.is_false(H.exists(p), "appeared on the host: " .. p)
    end
  end)

  it("mounts everything nosuid, and a setuid-root program gives nothing", function()
    local s = need()
    if not s then return end
    local r = s:exec("cat /proc/self/mountinfo")
    for line in r.stdout:gmatch("[^\n]+") do
      local opts = line:match("^%S+ %S+ %S+ %S+ %S+ (%S+)")
      assert.is_truthy(opts and opts:find("nosuid", 1, true), "not nosuid: " .. line)
    end
    -- A setuid-root copy of id, owned by host root, where the run can exec it.
    local dst = s.work_dir .. "/suid-id"
    local log, rc = H.sh("cp /usr/bin/id " .. H.q(dst) .. " && chown 0:0 " .. H.q(dst) ..
      " && chmod 6755 " .. H.q(dst), true)
    assert.are.equal(0, rc, log)
    r = s:exec("./suid-id -u; ./suid-id -g")
    assert.are.equal(0, r.returncode, H.show(r))
    for id in r.stdout:gmatch("%d+") do assert.are_not.equal("0", id, H.show(r)) end
  end)

  it("cannot make a user namespace or a device node", function()
    local s = need()
    if not s then return end
    local r = s:exec("unshare -U true && echo USERNS; unshare -Ur id -u && echo ROOT; " ..
      "mknod ./null c 1 3 && echo MKNOD; mknod ./blk b 8 0 && echo MKBLK; echo done")
    assert.are.equal("done\n", r.stdout, H.show(r))
  end)

  it("has only lo, cannot reach the host's loopback, and has no raw sockets", function()
    local s = need()
    if not s then return end
    local l = H.tcp_listener()
    local ok, err = pcall(function()
      assert.is_true((H.host_tcp_connect(l.port)), "control: the host reaches its own listener")
      local r = H.py(s, string.format([[
import socket, errno
print("RESULT ifaces", ",".join(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:])))
def res(name, f):
    try:
        f(); print("RESULT", name, "ok")
    except OSError as e:
        print("RESULT", name, errno.errorcode.get(e.errno, e.errno))
res("tcp", lambda: socket.create_connection(("127.0.0.1", %d), timeout=2))
res("internet", lambda: socket.create_connection(("1.1.1.1", 443), timeout=2))
res("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
res("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
]], l.port))
      local res = H.results(r.stdout)
      assert.are.equal("lo", res.ifaces, H.show(r))
      assert.is_true(res.tcp == "ECONNREFUSED" or res.tcp == "ENETUNREACH", H.show(r))
      assert.are.equal("ENETUNREACH", res.internet, H.show(r))
      assert.are.equal("EPERM", res.raw, H.show(r))
      -- The seccomp filter refuses the family before the kernel checks
      -- CAP_NET_RAW (which would answer EPERM): only AF_UNIX/INET/INET6/NETLINK.
      assert.are.equal("EAFNOSUPPORT", res.packet, H.show(r))
      assert.are.equal(1, #H.lines(l.accepted()), "the run reached the host's listener")
    end)
    l.stop()
    assert(ok, err)
  end)

  it("cannot kill host processes with kill -9 -1, nor outlive its run", function()
    local s = need()
    if not s then return end
    local victim = H.sh("sleep 60 >/dev/null 2>&1 & echo $!"):match("%d+")
    -- A duration no other process on the machine has.
    local n = 400000 + tonumber(H.token()) % 99991
    local r = s:exec(("kill -9 -1; (setsid sleep %d >/dev/null 2>&1 &); echo fired"):format(n))
    assert.is_truthy(r.stdout:find("fired", 1, true), H.show(r))
    assert.is_true(H.exists("/proc/" .. victim), "kill -9 -1 reached a host process")
    H.sh("kill " .. victim)
    -- The setsid'd sleep went with its run.
    assert.are.same({}, H.procs_exact("sleep " .. n))
    assert.are.equal("ok\n", s:exec("echo ok").stdout)
  end)
end)

-- sec_helpers.lua: shared tools of the isolation specs (isolation_spec,
-- lifetime_spec, files_attack_spec).  They look at the sandbox from the
-- host side: host processes, namespaces and mounts, helper programs compiled
-- on the host with gcc and copied into a session's work dir, and listeners
-- on the host's 127.0.0.1 that a sandbox must not reach.
--
-- Specs load it with:
--   local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
--   local H = dofile(here .. "sec_helpers.lua")

local ffi = require "ffi"

local M = {}

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
-- The repo root, as an absolute path (the specs may be run from anywhere).
M.ROOT = (function()
  local p = io.popen("cd '" .. here .. "../..' && pwd")
  local root = p:read("*l")
  p:close()
  return root
end)()

-- Other specs may declare the same C functions: a redefinition must not
-- break this file, so declare each one on its own and ignore "redefined".
for _, decl in ipairs {
  "int setenv(const char *name, const char *value, int overwrite);",
  "int unsetenv(const char *name);",
  "long readlink(const char *path, char *buf, size_t size);",
  "int usleep(unsigned int usec);",
  "int getpid(void);",
  "int kill(int pid, int sig);",
  [[typedef struct { long tv_sec; long tv_nsec; } sbx_sec_timespec;]],
  "int clock_gettime(int clk, sbx_sec_timespec *ts);",
} do
  pcall(ffi.cdef, decl)
end

-- Milliseconds on CLOCK_MONOTONIC.
function M.now_ms()
  local ts = ffi.new("sbx_sec_timespec")
  ffi.C.clock_gettime(1, ts)
  return tonumber(ts.tv_sec) * 1000 + tonumber(ts.tv_nsec) / 1e6
end

function M.sleep(seconds)
  ffi.C.usleep(math.floor(seconds * 1e6))
end

function M.setenv(name, value)
  ffi.C.setenv(name, value, 1)
end

function M.unsetenv(name)
  ffi.C.unsetenv(name)
end

function M.getpid()
  return ffi.C.getpid()
end

-- readlink(2) on the host; nil when the link is gone (process exited).
function M.readlink(path)
  local buf = ffi.new("char[4096]")
  local n = ffi.C.readlink(path, buf, 4096)
  if n < 0 then
    return nil
  end
  return ffi.string(buf, n)
end

-- Quote a string for /bin/sh.
function M.q(s)
  return "'" .. tostring(s):gsub("'", [['\'']]) .. "'"
end

-- Run a host shell command; returns its stdout (stderr too when merge) and
-- its exit code (LuaJIT's pclose does not give it, so the command prints it).
function M.sh(cmd, merge)
  local p = io.popen("( " .. cmd .. "\n) " .. (merge and "2>&1" or "") .. "; echo \"__rc=$?\"")
  local out = p:read("*a")
  p:close()
  local body, rc = out:match("^(.-)__rc=(%d+)\n?$")
  return body or out, tonumber(rc)
end

-- M.sh for a command whose stdout is parsed: its stderr goes to a file and
-- comes back after a marker line, so no stderr line lands inside a line
-- of stdout.  Returns that text and the exit code.
function M.sh_apart(cmd)
  local errf = os.tmpname()
  local out, rc = M.sh("( " .. cmd .. "\n) 2>" .. M.q(errf))
  local err = M.read_file(errf) or ""
  os.remove(errf)
  if err == "" then
    return out, rc
  end
  return out .. (out:sub(-1) == "\n" and "" or "\n") .. "-- stderr --\n" .. err, rc
end

function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then
    return nil
  end
  local data = f:read("*a")
  f:close()
  return data
end

function M.write_file(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

function M.exists(path)
  local _, rc = M.sh("test -e " .. M.q(path) .. " || test -L " .. M.q(path))
  return rc == 0
end

-- A fresh host temp dir (mode 0755), removed by M.rmtree.
function M.mktemp_dir(tag)
  local out = M.sh("d=$(mktemp -d /tmp/sbx-sec-" .. (tag or "t") .. ".XXXXXX) && chmod 755 \"$d\" && echo \"$d\"")
  return (out:match("(%S+)"))
end

function M.rmtree(path)
  if path and path:match("^/tmp/sbx%-sec%-") then
    M.sh("rm -rf " .. M.q(path))
  end
end

-- A random-ish token, unique per call, for markers that must not collide
-- with other processes on the machine.
local counter = 0
function M.token()
  counter = counter + 1
  return string.format("%d%d%04d", M.getpid(), math.floor(M.now_ms()) % 100000, counter)
end

-- Open a userns session (the backend under test).
function M.session(opts)
  opts = opts or {}
  opts.backend = opts.backend or "userns"
  return require("sbx").session(opts)
end

-- The per-backend fixture of the specs that attack every backend: for each
-- name in backends, describe("<name> backend: <title>") with one session of
-- that backend opened in setup and closed in teardown, and body(backend,
-- need, session) called inside it.  need() returns the session, or nil
-- after marking the case pending when the backend is not available here
-- (cases: `local s = need() if not s then return end`); session() returns
-- it or nil without marking anything (for the body's own setup).
function M.each_backend(backends, title, body)
  -- busted's describe, setup, ... live in the calling spec's environment.
  local B = getfenv(2)
  for _, backend in ipairs(backends) do
    B.describe(backend .. " backend: " .. title, function()
      local s, why
      B.setup(function()
        local ok, res = pcall(M.session, { backend = backend })
        if ok then s = res else why = type(res) == "table" and res.message or tostring(res) end
      end)
      B.teardown(function()
        if s then s:close() end
      end)
      local function need()
        if not s then B.pending(backend .. " is not available here: " .. tostring(why)) end
        return s
      end
      body(backend, need, function() return s end)
    end)
  end
end

-- Call f(...) and return the error table it raised (nil when it did not).
function M.raised(f, ...)
  local ok, err = pcall(f, ...)
  if ok then
    return nil
  end
  return err
end

function M.errkind(err)
  if type(err) == "table" then
    return err.kind
  end
  return "non-table error: " .. tostring(err)
end

-- Run Python 3 code in the sandbox (through the shell, so this does not
-- depend on script_type).
function M.py(s, code, opts)
  return s:exec("python3 - <<'SBX_SEC_PY'\n" .. code .. "\nSBX_SEC_PY\n", opts)
end

-- Describe a result for assertion messages.
function M.show(r)
  return string.format("rc=%s\nstdout=%s\nstderr=%s", tostring(r.returncode),
    tostring(r.stdout), tostring(r.stderr))
end

-- Lines of text as a list.
function M.lines(text)
  local t = {}
  for l in (text or ""):gmatch("[^\n]+") do
    t[#t + 1] = l
  end
  return t
end

-- A list as a set.
function M.set(list)
  local t = {}
  for _, v in ipairs(list) do
    t[v] = true
  end
  return t
end

-- "RESULT <name> <outcome>" lines into { name = outcome }.
function M.results(text)
  local t = {}
  for name, outcome in (text or ""):gmatch("RESULT%s+(%S+)%s+(%S+)") do
    t[name] = outcome
  end
  return t
end

-- ---- host-side figures -----------------------------------------------------

-- The host's fds of the kinds sbx opens: pipes, sockets, anon inodes
-- (pidfds, signalfds, memfds) and anything in a state or work dir.  Files
-- the sanitizer runtime opens lazily (an ASan build reads /proc/self/maps
-- now and then) are not sbx's and are not counted.
function M.fd_count()
  collectgarbage("collect")
  collectgarbage("collect")
  local p = io.popen("ls -l /proc/" .. M.getpid() .. "/fd")
  local n = 0
  for line in p:lines() do
    local target = line:match(" %-> (.*)$")
    if target and (target:match("^pipe:") or target:match("^socket:") or target:match("^anon_inode:")
        or target:match("^/memfd:") or target:find("/sbx", 1, true) or target:find("sandbox", 1, true)) then
      n = n + 1
    end
  end
  p:close()
  return n - 1 -- the pipe of this popen
end

-- fd_count without the inits a session keeps for its next runs: each is
-- a pidfd and a request socket the host holds (given-back inits come and
-- go with the timing of runs).  Also returns how many pidfds there were,
-- so a caller can bound them: a leak of whole inits shows there.
function M.run_fd_count()
  local n = M.fd_count()
  local p = io.popen("ls -l /proc/" .. M.getpid() .. "/fd")
  local pidfds = 0
  for line in p:lines() do
    if line:match(" %-> anon_inode:%[pidfd%]$") then pidfds = pidfds + 1 end
  end
  p:close()
  return n - 2 * pidfds, pidfds
end

function M.is_root()
  local p = io.popen("id -u")
  local uid = p:read("*l")
  p:close()
  return uid == "0"
end

-- Free KiB on the filesystem holding path.
function M.df_avail_kb(path)
  local p = io.popen("df -Pk " .. path .. " | tail -1")
  local line = p:read("*l")
  p:close()
  return tonumber(line:match("^%S+%s+%d+%s+%d+%s+(%d+)"))
end

-- ---- helper programs -------------------------------------------------------

-- What the syscall sweeps try (tests/security/helpers/syscall_sweep.c: the
-- baseline the filter refuses; progs/sweep.c: real attacks): every name
-- must come back EPERM, ENOSYS or killed by SIGSYS, on every backend.
M.SWEEP_BASELINE = {
  "unshare_newuser", "unshare_newns", "unshare_newnet", "clone_newuser", "clone_newns",
  "clone_newpid", "clone_newnet", "clone_newipc", "clone_newuts", "clone_newcgroup", "clone3",
  "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount",
  "fspick", "move_mount", "open_tree", "mount_setattr", "add_key", "request_key", "keyctl",
  "bpf", "perf_event_open", "userfaultfd", "fanotify_init", "lookup_dcookie", "init_module",
  "finit_module", "delete_module", "kexec_load", "kexec_file_load", "io_uring_setup",
  "io_uring_enter", "io_uring_register", "swapon", "swapoff", "acct", "syslog", "reboot",
  "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
  "setdomainname", "iopl", "ioperm", "modify_ldt", "quotactl", "quotactl_fd", "nfsservctl",
  "uselib", "ustat", "sysfs", "_sysctl", "vhangup", "ptrace_traceme", "ptrace_peek",
  "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "open_by_handle_at",
  "name_to_handle_at", "get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "mbind",
  "migrate_pages", "move_pages", "mknod_chr", "mknod_blk", "ioctl_tiocsti",
  "ioctl_tiocsti_highbits", "ioctl_tioclinux", "personality_linux32",
  "personality_addr_no_randomize",
}
M.SWEEP_REAL = {
  "unshare_newuser", "unshare_newns", "unshare_newnet", "clone_newuser", "clone3_newuser",
  "setns", "mount", "umount2", "pivot_root", "fsopen", "fsmount", "open_tree", "move_mount",
  "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "io_uring_setup",
  "io_uring_enter", "io_uring_register", "open_by_handle_at", "userfaultfd", "init_module",
  "finit_module", "delete_module", "kexec_load", "kexec_file_load", "swapon", "swapoff",
  "acct", "syslog", "reboot", "ptrace_attach", "process_vm_readv", "ioctl_tiocsti",
  "ioctl_tioclinux",
}

local bin_dir
-- Compile tests/security/helpers/<name>.c (helper-1's), else
-- tests/security/progs/<name>.c, once per busted process; returns the path
-- of the host binary.
function M.compile(name)
  bin_dir = bin_dir or M.mktemp_dir("bin")
  local out = bin_dir .. "/" .. name
  if M.exists(out) then
    return out
  end
  local src
  for _, dir in ipairs { "tests/security/helpers/", "tests/security/progs/" } do
    local cand = M.ROOT .. "/" .. dir .. name .. ".c"
    if M.exists(cand) then
      src = cand
      break
    end
  end
  assert(src, "no source for helper program " .. name)
  local log, rc = M.sh("gcc -O1 -o " .. M.q(out) .. " " .. M.q(src), true)
  assert(rc == 0, "gcc failed for " .. src .. ":\n" .. log)
  return out
end

-- Copy a host file into the session's work dir as an executable owned by
-- the work dir's owner (the sandbox user); returns its name inside.
function M.install(s, name, host_path)
  host_path = host_path or M.compile(name)
  local dst = s.work_dir .. "/" .. name
  local uid = M.owner(s.work_dir)
  local log, rc = M.sh(string.format("cp %s %s && chown %s:%s %s && chmod 0755 %s",
    M.q(host_path), M.q(dst), uid, M.group(s.work_dir), M.q(dst), M.q(dst)), true)
  assert(rc == 0, "install " .. name .. ": " .. log)
  return "./" .. name
end

function M.owner(path)
  return tonumber((M.sh("stat -c %u " .. M.q(path))))
end

function M.group(path)
  return tonumber((M.sh("stat -c %g " .. M.q(path))))
end

-- Does fd turn readable within ms milliseconds?  (poll under a name of its
-- own: another spec's declaration of poll, with its own struct, may come
-- first in this LuaJIT.)
pcall(ffi.cdef, "struct sbx_sec_pollfd { int fd; short events; short revents; };"
  .. "int sbx_sec_poll(void *fds, unsigned long n, int timeout) __asm__(\"poll\");")
function M.readable(fd, ms)
  local p = ffi.new("struct sbx_sec_pollfd[1]")
  p[0].fd, p[0].events = fd, 1
  return ffi.C.sbx_sec_poll(p, 1, ms) == 1
end

-- ---- host processes and namespaces -----------------------------------------

function M.host_pids()
  local pids = {}
  local p = io.popen("ls /proc")
  for name in p:lines() do
    if name:match("^%d+$") then
      pids[#pids + 1] = tonumber(name)
    end
  end
  p:close()
  return pids
end

-- Host pids of this process's sbx-zygote children (spares and sessions).
function M.zygotes()
  local me, t = M.getpid(), {}
  for _, pid in ipairs(M.host_pids()) do
    local st = M.read_file("/proc/" .. pid .. "/status") or ""
    if st:match("^Name:%s*sbx%-zygote\n") and tonumber(st:match("\nPPid:%s*(%d+)")) == me then
      t[#t + 1] = pid
    end
  end
  return t
end

-- The command line of a host process, arguments joined by spaces.
function M.cmdline(pid)
  local c = M.read_file("/proc/" .. pid .. "/cmdline")
  return c and (c:gsub("%z$", ""):gsub("%z", " "))
end

-- Host pids whose whole command line is exactly cmd ("sleep 123"): unlike
-- procs_matching, a shell whose script mentions cmd does not count.
function M.procs_exact(cmd)
  local t = {}
  for _, pid in ipairs(M.host_pids()) do
    if M.cmdline(pid) == cmd then
      t[#t + 1] = pid
    end
  end
  return t
end

-- Host pids whose command line contains marker (plain text).
function M.procs_matching(marker)
  local t = {}
  for _, pid in ipairs(M.host_pids()) do
    local c = M.cmdline(pid)
    if c and c:find(marker, 1, true) then
      t[#t + 1] = pid
    end
  end
  return t
end

-- Host pids whose namespace of this kind is ns ("user:[4026532...]").
function M.procs_in_ns(kind, ns)
  local t = {}
  for _, pid in ipairs(M.host_pids()) do
    if M.readlink("/proc/" .. pid .. "/ns/" .. kind) == ns then
      t[#t + 1] = pid
    end
  end
  return t
end

-- Hold namespace ns ("net:[4026532...]") open from the host: a file on a
-- process's /proc/<pid>/ns/kind, checked to be ns once open.  A freed
-- namespace's number goes to the next new one; while held it cannot, so a
-- later namespace showing the same number is this one.  The caller closes it.
function M.hold_ns(kind, ns)
  local pid = M.procs_in_ns(kind, ns)[1]
  assert(pid, "no host process in " .. ns)
  local f = assert(io.open("/proc/" .. pid .. "/ns/" .. kind))
  if M.readlink("/proc/" .. pid .. "/ns/" .. kind) ~= ns then
    f:close()
    error("the process left " .. ns .. " before it was held", 2)
  end
  return f
end

-- A process's identity that survives pid reuse: "pid@starttime" (field
-- 22 of /proc/pid/stat, after the parenthesised comm), or nil once gone.
function M.proc_identity(pid)
  local stat = M.read_file("/proc/" .. pid .. "/stat")
  local start = stat and stat:match("%) %S+" .. (" %S+"):rep(18) .. " (%d+)")
  return start and (pid .. "@" .. start) or nil
end

-- Describe pids with their command lines, for messages.
function M.describe(pids)
  local t = {}
  for _, pid in ipairs(pids) do
    t[#t + 1] = pid .. ": " .. tostring(M.cmdline(pid))
  end
  return table.concat(t, "\n")
end

-- Poll until f() is true or seconds pass; returns f()'s last value.
function M.wait_for(seconds, f)
  local deadline = M.now_ms() + seconds * 1000
  local v = f()
  while not v and M.now_ms() < deadline do
    M.sleep(0.02)
    v = f()
  end
  return v
end

-- The session's user namespace as seen from a run.
function M.session_userns(s)
  local r = s:exec("readlink /proc/self/ns/user")
  assert(r.returncode == 0, M.show(r))
  return (r.stdout:match("(user:%[%d+%])"))
end

-- ---- host listeners --------------------------------------------------------

-- A TCP listener on the host's 127.0.0.1 (port chosen by the kernel) that
-- logs every accepted connection to a file.  Only 127.0.0.1 is touched.
function M.tcp_listener()
  local dir = M.mktemp_dir("lsn")
  local log = dir .. "/accepted"
  local code = [[
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0))
s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, a = s.accept()
    with open(sys.argv[1], "a") as f:
        f.write("%s:%d\n" % a)
    c.sendall(b"HOST-LISTENER\n")
    c.close()
]]
  M.write_file(dir .. "/lsn.py", code)
  local out = M.sh("/usr/bin/python3 " .. M.q(dir .. "/lsn.py") .. " " .. M.q(log)
    .. " >" .. M.q(dir .. "/port") .. " 2>/dev/null & echo $!")
  local pid = tonumber(out:match("%d+"))
  local port = M.wait_for(60, function()
    local p = M.read_file(dir .. "/port")
    return p and tonumber(p:match("%d+"))
  end)
  assert(port, "host listener did not start")
  return {
    port = port,
    pid = pid,
    accepted = function()
      return M.read_file(log) or ""
    end,
    stop = function()
      ffi.C.kill(pid, 9)
      M.sh("wait " .. pid .. " 2>/dev/null")
      M.rmtree(dir)
    end,
  }
end

-- A unix stream socket listener on the host, logging accepted connections.
-- addr is a filesystem path, or "@name" for an abstract name (abstract names
-- are scoped by network namespace).  A sandbox must reach neither.
function M.unix_listener(addr)
  local dir = M.mktemp_dir("unix")
  local log = dir .. "/accepted"
  M.write_file(dir .. "/unix.py", [[
import os, socket, sys
addr = sys.argv[1]
if addr.startswith("@"):
    addr = "\0" + addr[1:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(addr)
if not addr.startswith("\0"):
    os.chmod(addr, 0o777)
s.listen(16)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    with open(sys.argv[2], "a") as f:
        f.write("accepted\n")
    c.close()
]])
  local out = M.sh("/usr/bin/python3 " .. M.q(dir .. "/unix.py") .. " " .. M.q(addr) .. " "
    .. M.q(log) .. " >" .. M.q(dir .. "/ready") .. " 2>/dev/null & echo $!")
  local pid = tonumber(out:match("%d+"))
  assert(M.wait_for(60, function()
    return (M.read_file(dir .. "/ready") or ""):find("ready")
  end), "unix listener did not start on " .. addr)
  return {
    pid = pid,
    accepted = function()
      return M.read_file(log) or ""
    end,
    stop = function()
      ffi.C.kill(pid, 9)
      if addr:sub(1, 1) ~= "@" then
        os.remove(addr)
      end
      M.rmtree(dir)
    end,
  }
end

-- Connect to a host unix socket from the host (the positive control).
function M.host_unix_connect(addr)
  local code = "import socket,sys\na=sys.argv[1]\nif a.startswith('@'): a='\\0'+a[1:]\n"
    .. "s=socket.socket(socket.AF_UNIX);s.connect(a);print('connected')"
  local out = M.sh("/usr/bin/python3 -c " .. M.q(code) .. " " .. M.q(addr), true)
  return out:find("connected") ~= nil, out
end

-- Connect to the host's 127.0.0.1:port from the host (the positive control).
function M.host_tcp_connect(port)
  local code = "import socket,sys\ns=socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\n"
    .. "print(s.recv(100).decode().strip())"
  local out = M.sh("/usr/bin/python3 -c " .. M.q(code) .. " " .. port, true)
  return out:find("HOST%-LISTENER") ~= nil, out
end

-- Remove what this instance of the helpers left in /tmp.
function M.cleanup()
  M.rmtree(bin_dir)
  bin_dir = nil
end

-- ---- child sbxlua processes ------------------------------------------------

-- The sbxlua running these specs (build/ or build-test/, whichever), so
-- child processes use the same build.
M.SBXLUA = (function()
  local exe = M.readlink("/proc/self/exe")
  if exe and exe:match("/sbxlua$") then
    return exe
  end
  return M.ROOT .. "/build/bin/sbxlua"
end)()

-- A child's output: what it printed (stdout, the lines specs parse), then
-- its stderr after a marker line.  The two go to separate files: a log
-- line the host side writes to stderr (the proxy, the sanitizers) must
-- never land inside a result line.
local function child_output(dir)
  local out, err = M.read_file(dir .. "/out") or "", M.read_file(dir .. "/err") or ""
  if err == "" then
    return out
  end
  return out .. (out:sub(-1) == "\n" and "" or "\n") .. "-- stderr --\n" .. err
end

-- Run Lua code in a separate sbxlua, killed after timeout_s: for cases that
-- could hang the test process (a blocking read) or that kill the host side.
-- Returns its output (child_output) and the exit code (137 when killed by
-- the timeout).
function M.run_child(code, timeout_s)
  local dir = M.mktemp_dir("child")
  M.write_file(dir .. "/child.lua", code)
  local _, rc = M.sh(string.format("cd %s && timeout -s KILL %d %s %s >%s 2>%s", M.q(M.ROOT), timeout_s,
    M.q(M.SBXLUA), M.q(dir .. "/child.lua"), M.q(dir .. "/out"), M.q(dir .. "/err")))
  local out = child_output(dir)
  M.rmtree(dir)
  return out, rc
end

-- Start Lua code in a separate sbxlua in the background; its output goes to
-- files.  Returns { pid, output() (child_output), kill(sig), dir }.
function M.spawn_child(code)
  local dir = M.mktemp_dir("child")
  M.write_file(dir .. "/child.lua", code)
  local out = M.sh(string.format("cd %s && { %s %s >%s 2>%s & echo $!; }", M.q(M.ROOT),
    M.q(M.SBXLUA), M.q(dir .. "/child.lua"), M.q(dir .. "/out"), M.q(dir .. "/err")))
  local pid = tonumber(out:match("%d+"))
  return {
    pid = pid,
    dir = dir,
    output = function()
      return child_output(dir)
    end,
    kill = function(sig)
      ffi.C.kill(pid, sig or 9)
    end,
  }
end

-- ---- mounts ----------------------------------------------------------------

-- Undo the octal escapes of /proc/*/mountinfo paths.
local function unescape(s)
  return (s:gsub("\\(%d%d%d)", function(o)
    return string.char(tonumber(o, 8))
  end))
end

-- Parse /proc/<pid>/mountinfo text into a list of
-- { id, parent, root, mountpoint, opts = set, optional = list, fstype, source, super = set }.
function M.parse_mountinfo(text)
  local mounts = {}
  for line in (text or ""):gmatch("[^\n]+") do
    local pre, post = line:match("^(.-) %- (.*)$")
    if pre then
      local f = {}
      for w in pre:gmatch("%S+") do
        f[#f + 1] = w
      end
      local g = {}
      for w in post:gmatch("%S+") do
        g[#g + 1] = w
      end
      local m = {
        id = f[1], parent = f[2], root = unescape(f[4]), mountpoint = unescape(f[5]),
        opts = {}, optional = {}, fstype = g[1], source = g[2], super = {}, line = line,
      }
      for o in f[6]:gmatch("[^,]+") do
        m.opts[o] = true
      end
      for i = 7, #f do
        m.optional[#m.optional + 1] = f[i]
      end
      for o in (g[3] or ""):gmatch("[^,]+") do
        m.super[o] = true
      end
      mounts[#mounts + 1] = m
    end
  end
  return mounts
end

return M

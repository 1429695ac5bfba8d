-- gpu_binding_spec.lua: GPU binding, fail closed, on stand-in device nodes
-- (mknod copies of /dev/null's numbers in a directory the core is pointed
-- at through SBX_GPU_DEV_DIR): nothing visible at ceiling 0, exactly the
-- requested nodes (and the control nodes) otherwise, the others absent and
-- not creatable, driver files read-only, the device cgroup allowing only
-- those nodes, the visible-devices variables set, no GPU shared between
-- sessions, userns refused naming privileged, over the ceiling refused.
-- Needs root (privileged backend, mknod, device cgroup).

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx = T.sbx

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

if not T.has_core() or not sh("test $(id -u) = 0") then
  describe("GPU binding", function()
    pending("needs sbx.core and root (privileged backend, mknod)")
  end)
  return
end

local ffi = require "ffi"
pcall(ffi.cdef, "int setenv(const char *name, const char *value, int overwrite); int unsetenv(const char *name);")

describe("GPU binding (stand-in nodes)", function()
  local root, policy, policy0

  setup(function()
    root = T.tmpdir("/var/tmp")
    assert(sh(("mkdir -p %s/dev/nvidia-caps %s/lib %s/locks"):format(root, root, root)))
    for _, n in ipairs { "nvidia0", "nvidia1", "nvidia2", "nvidiactl", "nvidia-uvm",
      "nvidia-uvm-tools", "nvidia-caps/nvidia-cap1" } do
      assert(sh(("mknod -m 666 %s/dev/%s c 1 3"):format(root, n)))
    end
    local f = assert(io.open(root .. "/lib/libnvidia-ml.so.1", "w"))
    f:write("stand-in driver library\n")
    f:close()
    f = assert(io.open(root .. "/lib/libcuda.so.1", "w"))
    f:write("stand-in cuda\n")
    f:close()
    -- World-writable on the host: only the read-only bind can stop a write.
    assert(sh(("chmod 666 %s/lib/*; chmod 755 %s %s/lib"):format(root, root, root)))
    policy = root .. "/gpu.lua"
    f = assert(io.open(policy, "w"))
    f:write(([[return { name = "gpu-spec", defaults = { backend = "privileged" },
      ceilings = { backends = { "privileged", "userns" }, gpus = 2 },
      filesystem = { gpu_paths = { "%s/lib/libnvidia-*", "%s/lib/libcuda*", "/nonexistent/nvidia-smi" } } }
    ]]):format(root, root))
    f:close()
    policy0 = root .. "/gpu0.lua"
    f = assert(io.open(policy0, "w"))
    f:write('return { name = "gpu0", defaults = { backend = "privileged" }, '
      .. 'ceilings = { backends = { "privileged" } } }\n')
    f:close()
    ffi.C.setenv("SBX_GPU_DEV_DIR", root .. "/dev", 1)
    ffi.C.setenv("SBX_GPU_LOCK_DIR", root .. "/locks", 1)
  end)

  teardown(function()
    ffi.C.unsetenv("SBX_GPU_DEV_DIR")
    ffi.C.unsetenv("SBX_GPU_LOCK_DIR")
    T.cleanup()
  end)

  local function nodes(s)
    local r = s:exec("cd /dev && for f in nvidia* nvidia-caps/*; do [ -c \"$f\" ] && echo \"$f\"; done | sort")
    local out = {}
    for l in r.stdout:gmatch("[^\n]+") do out[#out + 1] = l end
    return out
  end

  it("shows no device at all when the policy's ceiling is 0 (the default)", function()
    local e = T.expect("PolicyDenied", sbx.session, { gpus = 1, policy = policy0 })
    assert.are.equal("ceilings.gpus", e.rule)
    local s = sbx.session { policy = policy0 }
    finally(function() s:close() end)
    assert.are.same({}, nodes(s))
    local r = s:exec("echo ${NVIDIA_VISIBLE_DEVICES-unset} ${CUDA_VISIBLE_DEVICES-unset}")
    assert.are.equal("unset unset\n", r.stdout)
  end)

  it("binds exactly the requested GPUs plus the control nodes", function()
    local s = sbx.session { gpus = 1, policy = policy }
    finally(function() s:close() end)
    assert.are.same({ "nvidia-caps/nvidia-cap1", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0",
      "nvidiactl" }, nodes(s))
    local r = s:exec("echo x > /dev/nvidia0 && echo opened; cat /dev/nvidia1 2>&1; "
      .. "mknod /tmp/nvidia1 c 1 3 2>&1 || echo mknod-refused")
    assert.matches("opened", r.stdout, 1, true)
    assert.matches("No such file", r.stdout, 1, true)
    assert.matches("mknod-refused", r.stdout, 1, true)
    assert.are.equal("0 0\n", s:exec("echo $NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES").stdout)
  end)

  it("binds the driver files read-only", function()
    local s = sbx.session { gpus = 1, policy = policy }
    finally(function() s:close() end)
    local lib = root .. "/lib/libnvidia-ml.so.1"
    local r = s:exec(("cat %s; echo tamper >> %s || echo refused; ls %s/lib"):format(lib, lib, root))
    assert.matches("stand-in driver library", r.stdout, 1, true)
    assert.matches("refused", r.stdout, 1, true)
    assert.matches("Read-only file system", r.stderr, 1, true)
    assert.matches("libcuda.so.1", r.stdout, 1, true)
    assert.are.equal("stand-in driver library\n", T.read_file(lib))
  end)

  it("allows exactly the session's nodes in the device cgroup", function()
    local before = {}
    for d in io.popen("ls /sys/fs/cgroup/devices/sbx 2>/dev/null"):lines() do before[d] = true end
    local s = sbx.session { gpus = 1, policy = policy }
    finally(function() s:close() end)
    local dir
    for d in io.popen("ls /sys/fs/cgroup/devices/sbx 2>/dev/null"):lines() do
      if not before[d] and #d == 32 then dir = d end
    end
    assert.is_string(dir, "the session has a devices cgroup")
    local list = T.read_file("/sys/fs/cgroup/devices/sbx/" .. dir .. "/devices.list")
    assert.is_nil(list:find("a *:* rwm", 1, true), "not everything is allowed")
    assert.matches("c 1:3 rw", list, 1, true)
    -- A device outside the list: the cgroup refuses it even to root.
    local r = s:exec("echo $$ > /dev/null; echo ok")
    assert.are.equal("ok\n", r.stdout)
    for line in list:gmatch("[^\n]+") do
      assert.is_truthy(line:match("^c %d+:[%d*]+ r?w?m?$"), "unexpected rule " .. line)
    end
  end)

  it("never gives one GPU to two sessions", function()
    -- One finally per test (busted keeps only the last): close them all.
    local a, b, c
    finally(function()
      for _, s in pairs { a, b, c } do s:close() end
    end)
    a = sbx.session { gpus = 1, policy = policy }
    b = sbx.session { gpus = 1, policy = policy }
    local na, nb = nodes(a), nodes(b)
    assert.is_truthy(table.concat(na, " "):find("nvidia0", 1, true))
    assert.is_truthy(table.concat(nb, " "):find("nvidia1", 1, true))
    assert.is_nil(table.concat(nb, " "):find("nvidia0 ", 1, true))
    assert.are.equal("1 0\n", b:exec("echo $NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES").stdout)
    -- Only nvidia2 is left: two more cannot be had.
    local e = T.expect("BackendUnavailable", sbx.session, { gpus = 2, policy = policy })
    assert.matches("free", e.message, 1, true)
    a:close()
    -- Released at close: nvidia0 is free again.
    c = sbx.session { gpus = 2, policy = policy }
    assert.are.equal("0,2 0,1\n", c:exec("echo $NVIDIA_VISIBLE_DEVICES $CUDA_VISIBLE_DEVICES").stdout)
  end)

  it("refuses gpus on userns naming privileged, and over the ceiling", function()
    local e = T.expect("BackendUnavailable", sbx.session, { gpus = 1, backend = "userns", policy = policy })
    assert.are.equal("privileged", e.backend)
    e = T.expect("PolicyDenied", sbx.session, { gpus = 3, policy = policy })
    assert.are.equal("ceilings.gpus", e.rule)
  end)
end)

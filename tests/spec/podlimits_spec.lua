-- podlimits_spec: session ceilings from the limits sbxd runs under
-- (sbx.server.podlimits, issue 19), read from fake cgroupfs trees (v2 and
-- v1, as a container sees them) and applied to a policy; sbxd's flags.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")
local podlimits = require "sbx.server.podlimits"
local policy = require "sbx.policy"

local function put(path, text)
  os.execute("mkdir -p '" .. path:match("^(.*)/[^/]*$") .. "'")
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end

describe("sbx.server.podlimits", function()
  after_each(T.cleanup)

  it("reads a v2 container's limits (its own cgroup at the root, cgroupns)", function()
    local d = T.tmpdir()
    put(d .. "/proc_cgroup", "0::/\n")
    put(d .. "/cg/cgroup.controllers", "cpu memory pids\n")
    put(d .. "/cg/memory.max", "2147483648\n")      -- 2 GiB
    put(d .. "/cg/cpu.max", "150000 100000\n")       -- 1.5 CPUs
    put(d .. "/cg/pids.max", "max\n")
    put(d .. "/dev/nvidia1", "") ; put(d .. "/dev/nvidia3", "") ; put(d .. "/dev/nvidiactl", "")
    local l = podlimits.read { proc_cgroup = d .. "/proc_cgroup", root = d .. "/cg", gpu_dir = d .. "/dev" }
    assert.same({ memory_mb = 2048, cpu_milli = 1500, gpus = 2 }, l)
    -- What the device plugin gave the pod wins over the nodes a privileged
    -- container sees; "all" means the nodes.
    local o = { proc_cgroup = d .. "/proc_cgroup", root = d .. "/cg", gpu_dir = d .. "/dev" }
    for visible, n in pairs { ["GPU-a,GPU-b,GPU-c"] = 3, ["0"] = 1, none = 0, void = 0, all = 2 } do
      o.nvidia_visible_devices = visible
      assert.equal(n, podlimits.read(o).gpus, visible)
    end
  end)

  it("reads a v2 cgroup below the root by the path /proc/self/cgroup names", function()
    local d = T.tmpdir()
    put(d .. "/proc_cgroup", "0::/kubepods/pod1/c1\n")
    put(d .. "/cg/cgroup.controllers", "cpu memory pids\n")
    put(d .. "/cg/memory.max", "max\n")
    put(d .. "/cg/kubepods/pod1/c1/memory.max", "1073741824\n")
    put(d .. "/cg/kubepods/pod1/c1/cpu.max", "max 100000\n")
    put(d .. "/cg/kubepods/pod1/c1/pids.max", "500\n")
    local l = podlimits.read { proc_cgroup = d .. "/proc_cgroup", root = d .. "/cg", gpu_dir = d .. "/none" }
    assert.same({ memory_mb = 1024, pids = 500, gpus = 0 }, l)
  end)

  it("reads v1 limits per controller, treating v1's huge numbers as no limit", function()
    local d = T.tmpdir()
    put(d .. "/proc_cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n2:pids:/docker/abc\n")
    put(d .. "/cg/memory/docker/abc/memory.limit_in_bytes", "536870912\n")
    put(d .. "/cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "50000\n")
    put(d .. "/cg/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n")
    put(d .. "/cg/pids/docker/abc/pids.max", "max\n")
    local l = podlimits.read { proc_cgroup = d .. "/proc_cgroup", root = d .. "/cg", gpu_dir = d .. "/none" }
    assert.same({ memory_mb = 512, cpu_milli = 500, gpus = 0 }, l)
    put(d .. "/cg/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n")
    put(d .. "/cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n")
    l = podlimits.read { proc_cgroup = d .. "/proc_cgroup", root = d .. "/cg", gpu_dir = d .. "/none" }
    assert.same({ gpus = 0 }, l)
  end)

  it("derives ceilings less the reserve; explicit ones win; a limit the reserve eats is an error", function()
    assert.same({ memory_mb = 1792, cpu_milli = 1250, gpus = 2 },
      podlimits.derive({ memory_mb = 2048, cpu_milli = 1500, gpus = 2 }, {}))
    assert.same({ memory_mb = 1024, cpu_milli = 1000, gpus = 2 },
      podlimits.derive({ memory_mb = 2048, cpu_milli = 1500, gpus = 2 }, { cpu_milli = 500 }, { memory_mb = 1024 }))
    local ok, e = pcall(podlimits.derive, { memory_mb = 200 }, {})
    assert.is_false(ok)
    assert.matches("memory_mb this sbxd runs under %(200%) leaves nothing", e)
  end)

  it("parses KEY=N lists and names a bad one", function()
    assert.same({ memory_mb = 512, gpus = 1 }, podlimits.parse("memory_mb=512, gpus=1", "--ceilings"))
    for _, bad in ipairs { "memory=512", "memory_mb=-1", "memory_mb=1e3", "cpu_milli" } do
      local ok, e = pcall(podlimits.parse, bad, "--ceilings")
      assert.is_false(ok, bad)
      assert.matches("^%-%-ceilings", e)
    end
  end)

  it("lowers a policy's ceilings and the defaults above them, never raises them", function()
    local engine = policy.load(T.ROOT .. "/policies/default.lua")
    local gen = engine.current
    local changes = podlimits.apply(gen, { memory_mb = 1000, cpu_milli = 99999, gpus = 0 })
    assert.same({ "memory_mb=4096->1000" }, changes)
    assert.equal(1000, gen.ceilings.memory_mb)
    assert.equal(4000, gen.ceilings.cpu_milli)
    assert.equal(0, gen.ceilings.gpus)
    -- The engine now refuses what the pod could not hold.
    local ok, e = pcall(engine.session_open, engine, { backend = "userns", memory_mb = 2000 }, {})
    assert.is_false(ok)
    assert.equal("ceilings.memory_mb", e.rule)
  end)
end)

local runnable = H.available() and T.has_core() and H.have("curl")
local describe_srv = runnable and describe
  or function(name) pending(name .. " (needs build/bin/sbxd, sbx.core and curl)") end

describe_srv("sbxd ceilings flags", function()
  it("--ceilings lowers the policy's ceiling: above it is 403 naming the rule, below it opens", function()
    local srv = assert(H.start { args = { "--ceilings", "memory_mb=300,pids=100" } })
    finally(function() srv:cleanup() end)
    local JSON = "content-type: application/json"
    local body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"pids":200}')
    assert.equal(403, status, body)
    assert.matches("ceilings.pids", body, 1, true)
    body, status = srv:curl("/v1/sessions", "-H", srv:auth(), "-H", JSON, "-d", '{"pids":100}')
    assert.equal(201, status, body)
    assert.matches("event=ceilings_from_pod generation=1 memory_mb=4096%->300 pids=1024%->100", srv:log())
  end)

  it("refuses to start on a bad spec", function()
    for _, args in ipairs { { "--ceilings", "memory=1" }, { "--cgroup-ceilings", "maybe" } } do
      local srv, err = H.start { args = args }
      if srv then srv:cleanup() end
      assert.is_nil(srv)
      assert.matches(args[1], err, 1, true)
    end
  end)

  -- The real thing: sbxd started inside a memory cgroup of 1 GiB reads it.
  local v1 = "/sys/fs/cgroup/memory"
  local it_v1 = T.read_file(v1 .. "/memory.limit_in_bytes") and it
    or function(name) pending(name .. " (needs a cgroup v1 memory hierarchy)") end
  it_v1("reads the memory limit of its own cgroup at start (v1)", function()
    local cg = v1 .. "/sbx-podlimits-spec-" .. H.sh("echo $$"):gsub("%s", "")
    assert(os.execute("mkdir -p " .. cg) == 0)
    finally(function() os.execute("rmdir " .. cg .. " 2>/dev/null") end)
    local f = assert(io.open(cg .. "/memory.limit_in_bytes", "w"))
    f:write("1073741824")
    f:close()
    local dir = T.tmpdir()
    local tf = assert(io.open(dir .. "/tokens", "w"))
    tf:write("tok-podlimits-0123456789abcdef alice\n")
    tf:close()
    local cmd = ("sh -c 'echo $$ > %s/cgroup.procs && ASAN_OPTIONS=detect_leaks=0 exec %s --listen 127.0.0.1:0 " ..
      "--token-file %s/tokens --ceiling-reserve memory_mb=2000' 2>&1; echo rc=$?"):format(cg, H.SBXD, dir)
    local out = H.sh(cmd)
    assert.matches("the memory_mb this sbxd runs under %(1024%) leaves nothing for sessions "
      .. "after the reserve of 2000", out)
    assert.matches("rc=1\n$", out)
    -- Control: outside that cgroup the same flags start (this one has no limit).
    local srv = assert(H.start { args = { "--ceiling-reserve", "memory_mb=2000" } })
    srv:cleanup()
  end)
end)

-- sbx.server.podlimits: session ceilings from the limits sbxd itself runs
-- under (issue 19: a pod's resources.limits), less a reserve for sbxd.
--
-- A pod's container gets its memory and CPU limits as the cgroup sbxd runs
-- in; its GPUs as the device nodes it can see.  A session asking for more
-- than that could never get it, so at start sbxd lowers the policy's
-- ceilings (and defaults above them) to what the pod has:
--
--   memory_mb  memory limit - reserve.memory_mb   (v2 memory.max,
--                                                  v1 memory.limit_in_bytes)
--   cpu_milli  CPU limit - reserve.cpu_milli      (v2 cpu.max,
--                                                  v1 cpu.cfs_quota_us/period)
--   pids       pids limit - reserve.pids          (pids.max)
--   gpus       NVIDIA_VISIBLE_DEVICES' list (what the device plugin gave
--              the pod), else the /dev/nvidia<N> nodes visible
--              (SBX_GPU_DEV_DIR or /dev)
--
-- A resource without a limit leaves the policy's ceiling alone.  Explicit
-- ceilings (--ceilings) replace what was read; --cgroup-ceilings off skips
-- the reading.  A limit the reserve eats entirely is an error at start:
-- sbxd refuses to run rather than admit sessions that cannot fit.
--
--   M.parse(spec, flag)       "memory_mb=2048,cpu_milli=500" -> table; raises
--   M.read(o)                 o = { proc_cgroup, root, gpu_dir,
--                             nvidia_visible_devices } (defaults:
--                             /proc/self/cgroup, /sys/fs/cgroup, /dev, env)
--                             -> { memory_mb?, cpu_milli?, pids?, gpus }
--   M.derive(limits, reserve, explicit) -> ceilings; raises
--   M.apply(gen, ceilings)    lower gen.ceilings / gen.defaults; -> list of
--                             "key=old->new" changes
--   M.setup(c)                all of it from sbxd's flags (cfg of
--                             sbx.server.init) -> ceilings, description

local M = {}

local KEYS = { memory_mb = true, cpu_milli = true, pids = true, gpus = true }
M.RESERVE = { memory_mb = 256, cpu_milli = 250, pids = 64, gpus = 0 }

function M.parse(spec, flag)
  local out = {}
  if spec == nil or spec == "" then return out end
  for item in tostring(spec):gmatch("[^,]+") do
    local k, v = item:match("^%s*([%w_]+)%s*=%s*(%d+)%s*$")
    if not k or not KEYS[k] then
      error(("%s %q: expected KEY=N[,KEY=N...] with KEY memory_mb, cpu_milli, pids or gpus"):format(
        flag, tostring(spec):sub(1, 100)), 0)
    end
    out[k] = tonumber(v)
  end
  return out
end

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s and s:match("^%s*(.-)%s*$")
end

-- The first of dir/path/name and dir/name that exists: inside a container
-- /proc/self/cgroup may name the host's path while the container sees its
-- own cgroup mounted at the root.
local function cg_file(dir, path, name)
  local s = read_file(dir .. path .. "/" .. name)
  if s then return s end
  return read_file(dir .. "/" .. name)
end

local function mib(bytes)
  local n = tonumber(bytes)
  -- v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages).
  if not n or n >= 2 ^ 60 then return nil end
  return math.floor(n / (1024 * 1024))
end

local function cpu_milli(quota, period)
  quota, period = tonumber(quota), tonumber(period)
  if not quota or not period or quota <= 0 or period <= 0 then return nil end
  return math.floor(quota * 1000 / period)
end

local ffi_ok, ffi = pcall(require, "ffi")
if ffi_ok then pcall(ffi.cdef, "int access(const char *path, int mode);") end

local function exists(path)
  if ffi_ok then return ffi.C.access(path, 0) == 0 end
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function count_gpus(dir, visible)
  -- The NVIDIA device plugin names the pod's GPUs here; a privileged
  -- container sees every node of the host in /dev.
  if visible and visible ~= "all" then
    if visible == "" or visible == "none" or visible == "void" then return 0 end
    return select(2, visible:gsub("[^,]+", ""))
  end
  local n = 0
  for i = 0, 255 do
    if exists(("%s/nvidia%d"):format(dir, i)) then n = n + 1 end
  end
  return n
end

function M.read(o)
  o = o or {}
  local root = o.root or "/sys/fs/cgroup"
  local lines = {}
  local f = io.open(o.proc_cgroup or "/proc/self/cgroup", "rb")
  if f then
    for line in f:lines() do lines[#lines + 1] = line end
    f:close()
  end
  local visible = o.nvidia_visible_devices
  if visible == nil then visible = os.getenv("NVIDIA_VISIBLE_DEVICES") end
  local out = { gpus = count_gpus(o.gpu_dir or os.getenv("SBX_GPU_DEV_DIR") or "/dev", visible or nil) }
  if read_file(root .. "/cgroup.controllers") then
    -- cgroup v2: one hierarchy, the "0::/path" line.
    local path = ""
    for _, l in ipairs(lines) do path = l:match("^0::(.*)$") or path end
    path = path == "/" and "" or path
    local mem = cg_file(root, path, "memory.max")
    out.memory_mb = mem and mem ~= "max" and mib(mem) or nil
    local cpu = cg_file(root, path, "cpu.max")
    if cpu then out.cpu_milli = cpu_milli(cpu:match("^(%d+)%s+(%d+)")) end
    local pids = cg_file(root, path, "pids.max")
    out.pids = pids and pids ~= "max" and tonumber(pids) or nil
    return out
  end
  -- cgroup v1: a hierarchy per controller ("N:cpu,cpuacct:/path").
  local function v1(controller, name)
    for _, l in ipairs(lines) do
      local ctl, path = l:match("^%d+:([^:]*):(.*)$")
      if ctl then
        for c in ctl:gmatch("[^,]+") do
          if c == controller then
            path = path == "/" and "" or path
            return cg_file(root .. "/" .. controller, path, name)
              or cg_file(root .. "/" .. ctl, path, name)
          end
        end
      end
    end
    return read_file(root .. "/" .. controller .. "/" .. name)
  end
  out.memory_mb = mib(v1("memory", "memory.limit_in_bytes"))
  out.cpu_milli = cpu_milli(v1("cpu", "cpu.cfs_quota_us"), v1("cpu", "cpu.cfs_period_us"))
  local pids = v1("pids", "pids.max")
  out.pids = pids and pids ~= "max" and tonumber(pids) or nil
  return out
end

function M.derive(limits, reserve, explicit)
  local out = {}
  for k in pairs(KEYS) do
    local have = limits[k]
    if have ~= nil then
      local left = have - (reserve[k] or M.RESERVE[k] or 0)
      if k ~= "gpus" and left < 1 then
        error(("the %s this sbxd runs under (%d) leaves nothing for sessions after the reserve of %d "
          .. "(--ceiling-reserve %s=N, or --ceilings %s=N)"):format(k, have, reserve[k] or M.RESERVE[k], k, k), 0)
      end
      out[k] = math.max(left, 0)
    end
  end
  for k, v in pairs(explicit or {}) do out[k] = v end
  return out
end

function M.apply(gen, ceil)
  local changes = {}
  for k, v in pairs(ceil) do
    local old = gen.ceilings[k]
    if type(old) == "number" and v < old then
      gen.ceilings[k] = v
      changes[#changes + 1] = ("%s=%s->%s"):format(k, old, v)
    end
    local d = gen.defaults and gen.defaults[k]
    if type(d) == "number" and d > gen.ceilings[k] then gen.defaults[k] = gen.ceilings[k] end
  end
  table.sort(changes)
  return changes
end

function M.setup(c)
  local mode = c.cgroup_ceilings or "on"
  if mode ~= "on" and mode ~= "off" then
    error(("--cgroup-ceilings %q: expected on or off"):format(tostring(mode):sub(1, 40)), 0)
  end
  local explicit = M.parse(c.ceilings, "--ceilings")
  local reserve = M.parse(c.ceiling_reserve, "--ceiling-reserve")
  local limits = mode == "on" and M.read(c.podlimits_paths) or {}
  return M.derive(limits, reserve, explicit)
end

return M

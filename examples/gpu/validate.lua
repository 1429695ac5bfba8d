-- examples/gpu/validate.lua: check that a real GPU host works with sbx.
--
-- Run as root on a machine with the NVIDIA driver loaded:
--   build/bin/sbxlua examples/gpu/validate.lua [policy.lua]   (default: policies/gpu.lua)
--
-- It opens a privileged session with one GPU and checks, inside it:
--   1. exactly one /dev/nvidia<k> node is visible (plus the control nodes);
--   2. nvidia-smi runs and lists exactly one GPU;
--   3. a CUDA matrix multiplication gives the right answer (PyTorch or CuPy,
--      whichever the host's Python has; the work dir is the only writable place,
--      so install them on the host, or bind a venv with read_only_paths).
-- Exits 0 when every check passes, 1 otherwise, printing what failed.

local sbx = require "sbx"

local policy = arg[1] or "policies/gpu.lua"
local failures = 0
local function check(ok, what, detail)
  print((ok and "PASS " or "FAIL ") .. what .. (detail and ("\n     " .. detail:gsub("\n", "\n     ")) or ""))
  if not ok then failures = failures + 1 end
end

local ok, s = pcall(sbx.session, { backend = "privileged", gpus = 1, policy = policy })
if not ok then
  print("FAIL opening a privileged session with gpus = 1: " .. tostring(s))
  os.exit(1)
end

local r = s:exec("ls /dev | grep '^nvidia[0-9]'")
local n = 0
for _ in r.stdout:gmatch("[^\n]+") do n = n + 1 end
check(n == 1, "exactly one GPU node visible", r.stdout)

r = s:exec("echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES")
check(r.stdout:match("CUDA_VISIBLE_DEVICES=0\n$") ~= nil, "visible-devices variables", r.stdout)

r = s:exec("nvidia-smi -L")
local gpus = 0
for _ in r.stdout:gmatch("GPU %d+:") do gpus = gpus + 1 end
check(r.returncode == 0 and gpus == 1, "nvidia-smi lists exactly one GPU", r.stdout .. r.stderr)

local matmul = [==[
import sys
try:
    import torch
    a = torch.arange(1, 5, dtype=torch.float32, device="cuda").reshape(2, 2)
    c = (a @ a).cpu().tolist()
    lib = "torch " + torch.__version__
except ImportError:
    import cupy
    a = cupy.arange(1, 5, dtype=cupy.float32).reshape(2, 2)
    c = cupy.asnumpy(a @ a).tolist()
    lib = "cupy " + cupy.__version__
print(lib)
print(c)
sys.exit(0 if c == [[7.0, 10.0], [15.0, 22.0]] else 1)
]==]
r = s:exec({ "python3", "-c", matmul })
check(r.returncode == 0, "CUDA matmul inside the session", r.stdout .. r.stderr)

r = s:exec("id -u; cat /proc/self/status | grep CapEff")
check(r.stdout:match("CapEff:%s+0+\n") ~= nil and not r.stdout:match("^0\n"),
  "the workload is unprivileged (non-root uid, no capabilities)", r.stdout)

s:close()
print(failures == 0 and "all checks passed" or (failures .. " check(s) failed"))
os.exit(failures == 0 and 0 or 1)

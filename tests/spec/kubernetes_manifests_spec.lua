-- kubernetes_manifests_spec: examples/kubernetes (issue 19) render with
-- kubectl's built-in kustomize, pass yamllint --strict, and say what the
-- issue asks of them: a StatefulSet behind a headless Service plus a client
-- Service, /healthz probes, a draining preStop, a PDB, tokens from a Secret,
-- the watched policy ConfigMap (whose policies load), Prometheus
-- annotations, the securityContext the podman test reproduces, the GPU and
-- gVisor variants.
--
-- kubectl create --dry-run=client is not used: every kubectl (1.20 of
-- Debian 12, and later) asks an API server for the kinds' mapping even then,
-- and there is no cluster here.  kustomize's rendering (resources, patches,
-- generators) and the facts below are what can be checked without one.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")
local policy = require "sbx.policy"

local K = T.ROOT .. "/examples/kubernetes"
local runnable = H.have("kubectl") and H.have("yamllint") and H.have("/usr/bin/python3")
local describe_k = runnable and describe
  or function(name) pending(name .. " (needs kubectl and yamllint: scripts/bootstrap-deps.sh)") end

-- kubectl kustomize DIR | manifest_facts.py -> { name = value }, rc output
local function facts(dir)
  local out = H.sh(("kubectl kustomize %s 2>&1 && echo kustomize-ok"):format(H.q(dir)))
  if not out:match("kustomize%-ok\n$") then return nil, out end
  local tmp = os.tmpname()
  local f = assert(io.open(tmp, "w"))
  f:write((out:gsub("kustomize%-ok\n$", "")))
  f:close()
  local text = H.sh(("/usr/bin/python3 %s/tests/kubernetes/manifest_facts.py < %s 2>&1"):format(T.ROOT, tmp))
  os.remove(tmp)
  local t = {}
  for k, v in text:gmatch("([%w_]+)=([^\n]*)") do t[k] = v end
  return t, text
end

describe_k("examples/kubernetes", function()
  it("passes yamllint --strict (and a broken file would not)", function()
    local out = H.sh(("yamllint --strict -c %s/.yamllint %s 2>&1 && echo lint-ok"):format(K, K))
    assert.matches("lint%-ok\n$", out)
    local d = T.tmpdir()
    local f = assert(io.open(d .. "/bad.yaml", "w"))
    f:write("---\nkey: [1, 2\n")
    f:close()
    out = H.sh(("yamllint --strict -c %s/.yamllint %s/bad.yaml 2>&1 && echo lint-ok"):format(K, d))
    assert.is_nil(out:match("lint%-ok"), out)
    T.cleanup()
  end)

  it("base: StatefulSet, headless and client Services, PDB, Secret, watched ConfigMap, probes, drain", function()
    local t, text = facts(K .. "/base")
    assert.is_table(t, text)
    assert.equal("ConfigMap,PodDisruptionBudget,Service,Service,StatefulSet", t.kinds)
    assert.equal("True", t.headless)
    assert.equal("True", t.client_service)
    assert.equal("True", t.selector_matches)
    assert.equal("/healthz", t.readiness)
    assert.equal("/healthz", t.liveness)
    assert.matches("kill %-TERM 1", t.prestop)
    assert.matches("%-%-advertise%-url http://%$%(POD_NAME%)%.sbx%-nodes%.", t.args)
    assert.matches("%-%-watch%-policy", t.args)
    assert.matches("%-%-policy /etc/sbx/policy/policy%.lua", t.args)
    assert.equal("true:7433/metrics", t.prometheus)
    assert.equal("sbx-tokens", t.tokens_secret)
    assert.equal("sbx-policy", t.policy_configmap)
    assert.equal("policy.lua", t.policy_key)
    assert.matches("memory=", t.limits)
    -- The userns backend's context: no root, no capability.
    assert.matches("%-%-user 10001:10001", t.podman)
    assert.matches("%-%-cap%-drop ALL", t.podman)
    assert.matches("no%-new%-privileges", t.podman)
    assert.is_nil(t.podman:match("privileged"))
  end)

  it("gpu: privileged, nvidia.com/gpu, the GPU ceiling as a flag", function()
    local t, text = facts(K .. "/gpu")
    assert.is_table(t, text)
    assert.matches("nvidia.com/gpu=1", t.limits, 1, true)
    assert.matches("%-%-privileged", t.podman)
    assert.matches("%-%-ceilings gpus=1", t.args)
  end)

  it("gvisor: the RuntimeClass", function()
    local t, text = facts(K .. "/gvisor")
    assert.is_table(t, text)
    assert.equal("gvisor", t.runtime_class)
  end)

  it("a kustomization naming a missing file fails to render (the check can fail)", function()
    local d = T.tmpdir()
    local f = assert(io.open(d .. "/kustomization.yaml", "w"))
    f:write("resources:\n  - missing.yaml\n")
    f:close()
    assert.is_nil((facts(d)))
    T.cleanup()
  end)

  it("ships policies that load", function()
    for _, p in ipairs { "base/policy.lua", "gpu/policy.lua" } do
      local e = policy.load(K .. "/" .. p)
      assert.is_table(e.current.ceilings, p)
    end
    assert.same({ "userns" }, policy.load(K .. "/base/policy.lua").current.ceilings.backends)
  end)
end)

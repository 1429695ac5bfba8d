-- image_spec: the container image of `make image` (issue 19) under podman,
-- with exactly the securityContext examples/kubernetes/base declares
-- (tests/kubernetes/manifest_facts.py turns it into podman flags and fails
-- on a setting it cannot map) and the manifest's own sbxd arguments: the
-- /healthz probe answers over HTTP/1.1, a userns session runs a command
-- without root or capabilities, an allowlist run reaches an allowed server
-- and no other, the session ceilings follow the container's memory limit,
-- and a stop drains.
--
-- Runs inside a network namespace of its own (tests/e2e/run.sh); the
-- container shares it (--network host), so its fixed port is private.
-- SBX_IMAGE names the OCI archive.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "../spec/helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")
local sbx = T.sbx

local IMAGE = os.getenv("SBX_IMAGE")
local runnable = IMAGE and os.getenv("SBX_E2E_NETNS") == "1" and H.have("podman") and H.have("runc")
  and H.have("kubectl") and T.read_file(IMAGE) ~= nil
local describe_e2e = runnable and describe
  or function(name) pending(name .. " (needs SBX_IMAGE, podman, runc, kubectl; run it with make e2e)") end

local URL = "http://127.0.0.1:7433"
local TOKEN = "tok-image-e2e-0123456789abcdef"
local NAME = "sbx-e2e-image"
local WEB, OTHER = "198.51.100.7", "198.51.100.8" -- TEST-NET-2, on our netns's lo

local function lines(s)
  local t = {}
  for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

describe_e2e("the sbx image under podman", function()
  local dir, web_pid, s

  setup(function()
    local out = H.sh("podman load -q -i " .. H.q(IMAGE) .. " 2>&1")
    local ref = out:match("Loaded image[^:]*: (%S+)")
    assert(ref, out)
    dir = H.sh("mktemp -d /tmp/sbx-e2e-image.XXXXXX"):gsub("%s+$", "")
    -- What the pod mounts: the token Secret and the policy ConfigMap,
    -- readable by the image's user as fsGroup makes them in a pod.
    os.execute(("mkdir -p %s/tokens %s/policy %s/web && chmod 755 %s %s/tokens %s/policy"):format(
      dir, dir, dir, dir, dir, dir))
    local f = assert(io.open(dir .. "/tokens/tokens", "w"))
    f:write(TOKEN, " alice\n")
    f:close()
    os.execute(("cp %s/examples/kubernetes/base/policy.lua %s/policy/ && chmod 644 %s/tokens/tokens %s/policy/*")
      :format(T.ROOT, dir, dir, dir))
    -- The rendered manifest: its securityContext as podman flags, its args.
    local rendered = dir .. "/rendered.yaml"
    out = H.sh(("kubectl kustomize %s/examples/kubernetes/base > %s 2>&1 && echo ok"):format(T.ROOT, rendered))
    assert(out:match("ok\n$"), out)
    local flags = lines(H.sh(("/usr/bin/python3 %s/tests/kubernetes/manifest_facts.py --podman-flags < %s 2>&1")
      :format(T.ROOT, rendered)))
    local facts = H.sh(("/usr/bin/python3 %s/tests/kubernetes/manifest_facts.py < %s"):format(T.ROOT, rendered))
    local args = facts:match("\nargs=([^\n]*)")
    assert(args and args:match("%-%-advertise%-url"), facts)
    -- The pod's name is not resolvable here: advertise where we listen.
    args = args:gsub("%-%-advertise%-url %S+", "--advertise-url " .. URL)
    -- Outside the securityContext: this machine's limits.  runc (crun
    -- refuses hybrid cgroup hierarchies); rlimits no higher than ours (no
    -- CAP_SYS_RESOURCE to raise them); a memory limit for the ceilings.
    local nofile = H.sh("ulimit -Hn"):gsub("%s", "")
    local run = { "podman", "run", "-d", "--name", NAME, "--runtime", "runc", "--network", "host",
      "--ulimit", ("nofile=%s:%s"):format(nofile, nofile), "--ulimit", "nproc=4096:4096",
      "--memory", "2g", "-v", dir .. "/tokens:/etc/sbx/tokens:ro", "-v", dir .. "/policy:/etc/sbx/policy:ro" }
    for _, fl in ipairs(flags) do run[#run + 1] = fl end
    run[#run + 1] = ref
    for a in args:gmatch("%S+") do run[#run + 1] = a end
    local q = {}
    for i, a in ipairs(run) do q[i] = H.q(a) end
    os.execute("podman rm -f " .. NAME .. " >/dev/null 2>&1")
    out = H.sh(table.concat(q, " ") .. " 2>&1")
    assert(T.wait_for(function()
      return H.sh("curl -s --http1.1 " .. URL .. "/healthz"):match("^ok") ~= nil
    end, 60), out .. H.sh("podman logs " .. NAME .. " 2>&1"))
    -- A web server on addresses of our netns that are not loopback.
    -- (On lo: a dummy link needs a kernel module we may not load.)
    os.execute(("ip addr add %s/32 dev lo && ip addr add %s/32 dev lo"):format(WEB, OTHER))
    f = assert(io.open(dir .. "/web/hello.txt", "w"))
    f:write("hello from the allowed server\n")
    f:close()
    web_pid = tonumber((H.sh(("/usr/bin/python3 -m http.server --bind 0.0.0.0 --directory %s/web 8080 "
      .. ">/dev/null 2>&1 & echo $!"):format(dir))))
    assert(T.wait_for(function()
      return H.sh(("curl -s http://%s:8080/hello.txt"):format(WEB)):match("hello") ~= nil
    end, 30))
    s = sbx.remote.session { endpoint = URL, token = TOKEN, backend = "userns", network_mode = "allowlist",
      network_allowlist = { WEB } }
  end)

  teardown(function()
    if s then pcall(s.close, s) end
    if web_pid then os.execute("kill " .. web_pid .. " 2>/dev/null") end
    os.execute("podman rm -f " .. NAME .. " >/dev/null 2>&1")
    if dir then os.execute("rm -rf " .. H.q(dir)) end
  end)

  it("answers /healthz over HTTP/1.1, as kubelet's probes ask", function()
    assert.equal("ok\n", H.sh("curl -s --http1.1 " .. URL .. "/healthz"))
  end)

  it("runs a command in a userns session: not root, no capability", function()
    local r = s:exec("id -u; grep CapEff /proc/self/status; python3 -c 'print(2 + 2)'")
    assert.equal(0, r.returncode, r.stderr)
    assert.matches("^%d+\nCapEff:%s+0+\n4\n$", r.stdout)
    assert.is_nil(r.stdout:match("^0\n"))
    -- sbxd itself runs as the image's user.
    assert.equal("10001\n", H.sh("podman exec " .. NAME .. " id -u"))
  end)

  it("lets an allowlist run reach the allowed server and no other", function()
    local get = "python3 -c \"import urllib.request,sys; print(urllib.request.urlopen('http://%s:8080/hello.txt', "
      .. "timeout=20).read().decode().strip())\""
    local ok = s:exec(get:format(WEB))
    assert.equal(0, ok.returncode, ok.stderr)
    assert.equal("hello from the allowed server\n", ok.stdout)
    local other = s:exec(get:format(OTHER))
    assert.is_not.equal(0, other.returncode)
    assert.is_nil(other.stdout:match("hello"))
    local blocked = s:exec(get:format(WEB), { network_mode = "blocked" })
    assert.is_not.equal(0, blocked.returncode)
  end)

  it("derives the session ceilings from the container's memory limit", function()
    -- 2 GiB less the 256 MiB reserve.
    assert.matches("event=ceilings_from_pod generation=1 [^\n]*memory_mb=4096%->1792",
      H.sh("podman logs " .. NAME .. " 2>&1"))
    local ok, e = pcall(sbx.remote.session, { endpoint = URL, token = TOKEN, backend = "userns", memory_mb = 2048 })
    assert.is_false(ok)
    assert.equal("ceilings.memory_mb", e.rule)
  end)

  it("drains on stop and exits 0", function()
    s:close()
    s = nil
    H.sh("podman stop -t 40 " .. NAME .. " 2>&1")
    assert.equal("0\n", H.sh("podman inspect -f '{{.State.ExitCode}}' " .. NAME))
    assert.matches("event=drain signal=15", H.sh("podman logs " .. NAME .. " 2>&1"))
  end)
end)

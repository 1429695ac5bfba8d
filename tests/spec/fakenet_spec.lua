-- fakenet_spec.lua: the test internet (tests/net/fakenet.sh, net.fakenet) works:
-- it comes up fast, its DNS answers from the zone the test writes and logs every
-- query, HTTP/HTTPS/echo are reachable from the host netns, the HTTPS cert verifies
-- against the throwaway CA, and the real network namespace is left untouched.

local F = require "net.fakenet"

-- The real netns's addresses and routes that belong to the fake internet
-- (none, ever); other tests may change the rest meanwhile.
local function root_net_state()
  local out = F.run("ip -o addr show; ip route show; ip -6 route show")
  local mine = {}
  for line in out:gmatch("[^\n]+") do
    if line:find("198.51.100.", 1, true) or line:find("203.0.113.", 1, true)
      or line:find("2001:db8:100:", 1, true) then
      mine[#mine + 1] = line
    end
  end
  return table.concat(mine, "\n")
end

describe("fakenet", function()
  if not F.need(it, pending) then return end

  local name = F.unique("sbxfn")
  local net, before

  setup(function()
    before = root_net_state()
    net = F.up(name)
  end)

  teardown(function()
    if net then net:down() end
  end)

  -- How long "up" takes is a figure, printed, not asserted: a loaded
  -- machine makes it anything (no timing assertions in specs).
  it("comes up and down again, idempotently", function()
    local out, rc = F.run("n=" .. name .. "x; s=$(date +%s%N); " .. F.quote(F.SCRIPT) ..
      " up $n >/dev/null && e=$(date +%s%N) && " .. F.quote(F.SCRIPT) .. " down $n && " ..
      F.quote(F.SCRIPT) .. " down $n && echo $(( (e - s) / 1000000 ))")
    assert.are.equal(0, rc, out)
    local ms = tonumber(out:match("(%d+)%s*$"))
    assert.is_number(ms, out)
    io.stderr:write(("fakenet: up took %d ms\n"):format(ms))
    local list = F.run("ip netns list")
    assert.is_nil(list:find(name .. "x-", 1, true))
  end)

  it("answers DNS from the zone and logs every query", function()
    net:zone { ["pypi.org"] = { "198.51.100.2", "2001:db8:100::2" }, ["far.test"] = "203.0.113.2" }
    net:clear_dns_queries()
    local out, rc = net:exec_host("getent ahostsv4 pypi.org; getent ahostsv4 far.test")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("198.51.100.2", 1, true))
    assert.truthy(out:find("203.0.113.2", 1, true))
    out, rc = net:exec_host("getent ahostsv6 pypi.org")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("2001:db8:100::2", 1, true))
    out, rc = net:exec_host("getent hosts nothere.test")
    assert.are_not.equal(0, rc, out)
    local seen = {}
    for _, n in ipairs(net:dns_queries()) do seen[n] = true end
    assert.is_true(seen["pypi.org"] and seen["far.test"] and seen["nothere.test"])
    net:clear_dns_queries()
    assert.are.same({}, net:dns_queries())
  end)

  it("serves HTTP on both internet addresses, from the host netns only", function()
    local out, rc = net:exec_host("curl -sS --max-time 5 http://198.51.100.2/hello; " ..
      "curl -sS --max-time 5 http://203.0.113.2/hello; curl -sS --max-time 5 -g http://[2001:db8:100::2]/hello")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("hello from 198.51.100.2:80", 1, true))
    assert.truthy(out:find("hello from 203.0.113.2:80", 1, true))
    assert.truthy(out:find("hello from [2001:db8:100::2]:80", 1, true))
    out = net:exec_host("curl -sS --max-time 5 -d payload-123 http://198.51.100.2/echo")
    assert.are.equal("payload-123", out)
    local reqs = table.concat(net:http_requests(), "\n")
    assert.truthy(reqs:find("198.51.100.2:80 198.51.100.1 GET /hello", 1, true))
  end)

  it("serves /big/N deterministically with its checksum", function()
    local out, rc = net:exec_host(
      "a=$(curl -sS --max-time 20 http://198.51.100.2/big/8 | sha256sum | cut -d' ' -f1); " ..
      "b=$(curl -sS --max-time 20 http://198.51.100.2/big/8.sha256); " ..
      "c=$(curl -sS --max-time 20 http://198.51.100.2/big/1.sha256); echo \"$a $b $c\"")
    assert.are.equal(0, rc, out)
    local a, b, c = out:match("^(%x+) (%x+) (%x+)")
    assert.is_truthy(a)
    assert.are.equal(a, b)
    assert.are_not.equal(a, c)
  end)

  it("serves HTTPS with a cert the throwaway CA signed for the test names", function()
    net:zone { ["pypi.org"] = "198.51.100.2", ["files.pythonhosted.org"] = "203.0.113.2",
      ["other.test"] = "198.51.100.2" }
    local ca = F.quote(net:ca_file())
    local out, rc = net:exec_host("curl -sS --max-time 5 --cacert " .. ca .. " https://pypi.org/hello; " ..
      "curl -sS --max-time 5 --cacert " .. ca .. " https://files.pythonhosted.org/hello")
    assert.are.equal(0, rc, out)
    assert.truthy(out:find("hello from 198.51.100.2:443", 1, true))
    assert.truthy(out:find("hello from 203.0.113.2:443", 1, true))
    -- A name the cert does not carry, or no CA, fails verification.
    out, rc = net:exec_host("curl -sS --max-time 5 --cacert " .. ca .. " https://other.test/hello")
    assert.are_not.equal(0, rc, out)
    out, rc = net:exec_host("curl -sS --max-time 5 https://pypi.org/hello")
    assert.are_not.equal(0, rc, out)
  end)

  it("echoes UDP on :7 and TCP on :9", function()
    local py = [[/usr/bin/python3 -c '
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
u.sendto(b"udp-ping", ("203.0.113.2", 7)); print(u.recvfrom(100)[0].decode())
t = socket.create_connection(("198.51.100.2", 9), 3); t.sendall(b"tcp-ping"); print(t.recv(100).decode())
']]
    local out, rc = net:exec_host(py)
    assert.are.equal(0, rc, out)
    assert.are.equal("udp-ping\ntcp-ping\n", out)
  end)

  it("runs sbxlua scripts as the host: results, output, status and environment", function()
    local res, all, rc = net:script([[
print("a line on stdout")
out("addr", io.popen("ip -o -4 addr show"):read("*a"))
out("multi", "a\nb \n")
out("env", os.getenv("FN_X")) out("var", FN_V) out("state", os.getenv("SBX_STATE_DIR"))
out("sbx", type(sbx.session))
]], { env = { FN_X = "x y'z" }, vars = { FN_V = "v\"w\n" } })
    assert.are.equal(0, rc, all)
    assert.matches("198.51.100.1/24", res.addr, 1, true) -- the host netns, not the real one
    assert.are.equal("a\\nb", res.multi)
    assert.are.equal("x y'z", res.env)
    assert.are.equal("v\"w", res.var)
    assert.are.equal(net:work_dir() .. "/state", res.state)
    assert.are.equal("function", res.sbx)
    assert.matches("a line on stdout\n", all, 1, true)
    assert.is_nil(res["a line on stdout"])
    -- A script that fails says so in its status and output (the control: 0 above).
    local res2, all2, rc2 = net:script('out("before", 1) error("fakenet-boom")')
    assert.are_not.equal(0, rc2)
    assert.matches("fakenet-boom", all2, 1, true)
    assert.are.same({ before = "1" }, res2)
    -- net:sbxlua runs a script file with the environment given.
    local path = net:work_dir() .. "/plain.lua"
    local f = assert(io.open(path, "w"))
    f:write('io.write(os.getenv("FN_Y"), "\\n") os.exit(3)')
    f:close()
    local out, code = net:sbxlua(path, { FN_Y = "why" })
    assert.are.equal(3, code, out)
    assert.are.equal("why\n", out)
  end)

  it("leaves the real network namespace untouched, and down removes everything", function()
    assert.are.equal("", before)
    assert.are.equal(before, root_net_state())
    local f = io.open("/etc/netns/" .. name .. "-host/resolv.conf")
    assert.truthy(f)
    f:close()
    local work = net:work_dir()
    assert.are.equal(0, select(2, F.run("test -d " .. F.quote(work))))
    net:down()
    net:down()
    net = nil
    assert.are_not.equal(0, select(2, F.run("test -e " .. F.quote(work))))
    assert.is_nil(F.run("ip netns list"):find(name .. "-", 1, true))
    assert.is_nil(io.open("/etc/netns/" .. name .. "-host/resolv.conf"))
    assert.is_nil(io.open("/tmp/sbx-fakenet-" .. name .. "/zone"))
    local out = F.run("pgrep -f '[f]akenet_servers.py.*sbx-fakenet-" .. name .. "/' || true")
    assert.are.equal("", out)
    assert.are.equal(before, root_net_state())
  end)
end)

describe("fakenet.need", function()
  it("registers one pending test saying why when namespaces cannot be made, none when they can", function()
    local tests, pendings = {}, {}
    local function fake_it(name, body) tests[#tests + 1] = name body() end
    local function fake_pending(why) pendings[#pendings + 1] = why end
    local real = F.available
    F.available = function() return false, "no netns here" end
    local ok, got = pcall(F.need, fake_it, fake_pending)
    F.available = real
    assert(ok, got)
    assert.is_false(got)
    assert.are.same({ "needs network namespaces" }, tests)
    assert.are.same({ "no netns here" }, pendings)
    -- The control: available, nothing registered.
    tests, pendings = {}, {}
    F.available = function() return true end
    ok, got = pcall(F.need, fake_it, fake_pending)
    F.available = real
    assert(ok, got)
    assert.is_true(got)
    assert.are.same({}, tests)
  end)
end)

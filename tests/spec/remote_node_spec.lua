-- remote_node_spec: session ids that name their node (sbx.remote.node,
-- issue 19): the round trip, and what a node must refuse to read as an
-- endpoint (it would go into a header and a client's next connection).
local node = require "sbx.remote.node"

describe("sbx.remote.node", function()
  local ID = ("0123456789abcdef"):rep(2)

  it("round-trips every kind of endpoint, and leaves ids without a node alone", function()
    for _, url in ipairs { "http://sbx-0.sbx-nodes.default.svc.cluster.local:7433", "https://a.example",
      "http://127.0.0.1:7441", "http://[::1]:7433", "unix:/run/sbx/sbxd.sock", "http://h:1" } do
      local pid = node.public_id(ID, url)
      assert.matches("^" .. ID .. "%.[%w_%-]+$", pid)
      local id, got = node.split(pid)
      assert.equal(ID, id)
      assert.equal(url, got)
    end
    assert.equal(ID, node.public_id(ID, nil))
    assert.same({ ID }, { node.split(ID) })
  end)

  it("refuses endpoints that are not URLs sbx.remote takes", function()
    for _, bad in ipairs { "http://h:1\r\nx-evil: 1", "ftp://h", "http://h/path", "http://", "h:1",
      "http://user@h", ("http://" .. ("a"):rep(300)) } do
      assert.is_nil(node.endpoint_ok(bad), bad)
      -- An id carrying it does not split either.
      local b64 = node.public_id(ID, bad):match("%.(.*)$")
      assert.is_nil((node.split(ID .. "." .. b64)), bad)
    end
    assert.equal("http://h:1", node.endpoint_ok("http://h:1/"))
  end)

  it("refuses ids that are not hex plus one canonical node part", function()
    for _, bad in ipairs { "", "xyz", ID .. ".", ID .. ".!!", ID .. ".a", ID .. "..aGk", "../" .. ID,
      node.public_id(ID, "http://h:1") .. "=" } do
      assert.is_nil((node.split(bad)), bad)
    end
  end)
end)

-- errors_spec.lua: the error tables of sbx (lua/sbx/errors.lua): their
-- kind, message, fields and __tostring, sbx.is_error, and the mapping of
-- the C core's (nil, kind, message) triples.  Pure Lua: runs without a build.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local sbx, errors = T.sbx, T.errors

describe("sbx errors", function()
  it("are exported by the module", function()
    assert.are.equal(errors, sbx.errors)
    assert.are.equal(errors.is, sbx.is_error)
    for _, k in ipairs { "SandboxExecutionError", "SandboxCommandError", "PolicyDenied",
      "InvalidArgument", "BackendUnavailable", "SessionClosed" } do
      assert.is_function(errors[k], k)
      assert.is_true(errors.KINDS[k], k)
    end
  end)

  it("InvalidArgument names the option, and tostring gives 'Kind: message'", function()
    local e = errors.InvalidArgument("cwd", "outside the work dir")
    assert.are.equal("InvalidArgument", e.kind)
    assert.are.equal("cwd", e.option)
    assert.are.equal("cwd: outside the work dir", e.message)
    assert.are.equal("InvalidArgument: cwd: outside the work dir", tostring(e))
  end)

  it("PolicyDenied names the rule", function()
    local e = errors.PolicyDenied("ceilings.backends", "not allowed")
    assert.are.equal("PolicyDenied", e.kind)
    assert.are.equal("ceilings.backends", e.rule)
    assert.are.equal("PolicyDenied: not allowed", tostring(e))
  end)

  it("BackendUnavailable says which backend, what is missing and how to fix it", function()
    local e = errors.BackendUnavailable("privileged", "not built", "use userns")
    assert.are.equal("BackendUnavailable", e.kind)
    assert.are.equal("privileged", e.backend)
    assert.are.equal("not built", e.missing)
    assert.are.equal("use userns", e.fix)
    assert.matches('backend "privileged" is unavailable: not built', e.message, 1, true)
    assert.matches("fix: use userns", e.message, 1, true)
  end)

  it("SandboxExecutionError carries reason, returncode -1, backend, runtime_ms", function()
    local e = errors.SandboxExecutionError("stream died", "userns", 12)
    assert.are.equal("SandboxExecutionError", e.kind)
    assert.are.equal("stream died", e.reason)
    assert.are.equal(-1, e.returncode)
    assert.are.equal("userns", e.backend)
    assert.are.equal(12, e.runtime_ms)
    assert.are.equal("SandboxExecutionError: stream died", tostring(e))
  end)

  it("SandboxCommandError carries the command and the whole result", function()
    local res = { returncode = 2, stdout = "", stderr = "boom\n", termination_reason = "" }
    local e = errors.SandboxCommandError("false", res)
    assert.are.equal("SandboxCommandError", e.kind)
    assert.are.equal("false", e.cmd)
    assert.are.equal(res, e.result)
    assert.matches("returncode 2", e.message, 1, true)
    assert.matches("boom", e.message, 1, true)
    local t = errors.SandboxCommandError("sleep 9", { returncode = -15, termination_reason = "timeout" })
    assert.matches("timeout", t.message, 1, true)
  end)

  it("SessionClosed has a default message", function()
    local e = errors.SessionClosed()
    assert.are.equal("SessionClosed", e.kind)
    assert.is_string(e.message)
    assert.are.equal("SessionClosed: " .. e.message, tostring(e))
  end)

  it("is_error tells sbx errors (and their kind) from anything else", function()
    local e = errors.InvalidArgument("x", "y")
    assert.is_true(sbx.is_error(e))
    assert.is_true(sbx.is_error(e, "InvalidArgument"))
    assert.is_false(sbx.is_error(e, "PolicyDenied"))
    assert.is_false(sbx.is_error("InvalidArgument: x"))
    assert.is_false(sbx.is_error({ kind = "InvalidArgument", message = "forged" }))
    assert.is_false(sbx.is_error(nil))
  end)

  it("survive error()/pcall as the same table", function()
    local e = errors.PolicyDenied("r", "m")
    local ok, got = pcall(errors.raise, e)
    assert.is_false(ok)
    assert.are.equal(e, got)
  end)

  it("refuse unknown kinds", function()
    assert.has_error(function() errors.new("Oops", "x") end)
  end)

  it("map the core's triples to the documented kinds", function()
    local ctx = { backend = "userns", runtime_ms = 5 }
    local cases = {
      InvalidArgument = "InvalidArgument",
      BackendUnavailable = "BackendUnavailable",
      SessionClosed = "SessionClosed",
      PolicyDenied = "PolicyDenied",
      SandboxExecutionError = "SandboxExecutionError",
      Weird = "SandboxExecutionError",
    }
    for core_kind, want in pairs(cases) do
      local e = errors.from_core(core_kind, "why", ctx)
      assert.are.equal(want, e.kind, core_kind)
      assert.matches("why", e.message, 1, true)
    end
    assert.are.equal("userns", errors.from_core("BackendUnavailable", "m", ctx).backend)
    local x = errors.from_core("SandboxExecutionError", "lost", ctx)
    assert.are.equal(-1, x.returncode)
    assert.are.equal(5, x.runtime_ms)
  end)
end)

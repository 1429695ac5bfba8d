-- process_spec: sbx.process, the one Process over its two event sources.
-- The SAME assertions run over a local run (an on-device session) and over
-- a remote run (the HTTP/2 event stream of a real sbxd, started as
-- server_client_spec does): capture checks, lines/read/read_any/
-- communicate/wait/kill/done, the exit fields, the errors and their
-- stickiness, and the buffer cap on the stream not being read (with a
-- control showing the probe sees an unbounded buffer when there is no cap).
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local T = dofile(here .. "helpers.lua")
local H = dofile(T.ROOT .. "/tests/server/harness.lua")

local sbx = T.sbx
local process = require "sbx.process"

if not T.has_core() then
  describe("sbx.process", function() pending("needs sbx.core: run the specs with build/bin/sbxlua") end)
  return
end

local remote_ok = H.available() and H.have("curl") and pcall(require, "sbx.remote.http")

local function collect(iter)
  local out = {}
  for v in iter do out[#out + 1] = v end
  return out
end

local SOURCES = {
  { name = "a local run", open = function() return sbx.session { backend = "userns" } end },
  { name = "a remote run", remote = true, open = function(state)
      state.srv = assert(H.start {})
      return sbx.remote.session { endpoint = state.srv.url, token = state.srv.token.alice, backend = "userns" }
    end },
}

for _, source in ipairs(SOURCES) do
  local describe_src = (not source.remote or remote_ok) and describe
    or function(name) pending(name .. " (needs build/bin/sbxd and curl)") end

  describe_src("sbx.process over " .. source.name, function()
    local state, s = {}, nil
    setup(function() s = source.open(state) end)
    teardown(function()
      if s then pcall(s.close, s) end
      if state.srv then state.srv:cleanup() end
      T.cleanup()
    end)

    it("is an sbx.process", function()
      local p = s:run("true")
      assert.is_true(process.is_process(p))
      p:wait()
    end)

    it("refuses to read a stream that was not captured, the same way for every reader", function()
      local p = s:run("echo out; echo err >&2", { stdout = false })
      for _, f in ipairs { p.lines, p.read } do
        local e = T.expect("InvalidArgument", f, p)
        assert.equal("stream", e.option)
        assert.matches("stdout was not captured", e.message, 1, true)
      end
      T.expect("InvalidArgument", p.lines, p, "stdin")
      T.expect("InvalidArgument", p.read, p, "stdin")
      local out, err = p:communicate()
      assert.is_nil(out)
      assert.equal("err\n", err)
      p = s:run("echo out; echo err >&2", { stderr = false })
      T.expect("InvalidArgument", p.lines, p, "stderr")
      out, err = p:communicate()
      assert.equal("out\n", out)
      assert.is_nil(err)
    end)

    it("lines() of either stream, keeping the other for communicate()", function()
      local p = s:run("echo out1; echo err1 >&2; echo out2; echo err2 >&2; printf tail >&2")
      assert.same({ "err1", "err2", "tail" }, collect(p:lines("stderr")))
      local out, err = p:communicate()
      assert.equal("out1\nout2\n", out)
      assert.equal("", err)
      p = s:run("printf 'one\\ntwo\\nthree\\npartial'")
      local it = p:lines()
      assert.equal("one", it())
      assert.equal("two\nthree\npartial", (p:communicate()))
    end)

    it("read() gives the pieces, then nil at EOF, and nil again", function()
      local p = s:run("printf abc; sleep 0.2; printf def >&2; printf ghi")
      local got = {}
      while true do
        local piece = p:read()
        if not piece then break end
        got[#got + 1] = piece
      end
      assert.equal("abcghi", table.concat(got))
      assert.is_nil(p:read())
      assert.equal("def", p:read("stderr"))
      assert.is_nil(p:read("stderr"))
      assert.equal(0, p:wait())
    end)

    it("read_any() gives both streams' output with their names, then nil", function()
      local p = s:run("echo o; echo e >&2")
      local got = { stdout = "", stderr = "" }
      for st, data in p.read_any, p do got[st] = got[st] .. data end
      assert.same({ stdout = "o\n", stderr = "e\n" }, got)
      assert.equal(0, p.returncode)
    end)

    it("communicate() and wait() handle large outputs of both streams", function()
      local out, err = s:run("head -c 3000000 /dev/zero; head -c 1000000 /dev/zero >&2"):communicate()
      assert.equal(3000000, #out)
      assert.equal(1000000, #err)
      local p = s:run("head -c 3000000 /dev/zero; head -c 3000000 /dev/zero >&2; exit 7")
      assert.equal(7, p:wait())
      assert.equal(7, p.returncode)
      assert.is_nil(p:read(), "wait() drained the output")
    end)

    it("sets the exit fields after the end, none before", function()
      local p = s:run("sleep 100")
      assert.is_nil(p.returncode)
      assert.is_false(p:done())
      p:kill()
      p:wait()
      assert.is_true(p:done())
      p = s:run("echo x; exit 3")
      p:communicate()
      assert.equal(3, p.returncode)
      assert.equal("", p.termination_reason)
      assert.is_nil(p.signal)
      assert.equal("userns", p.backend)
      assert.is_number(p.runtime_ms)
    end)

    it("reports a signal death as returncode -signo, 'signal'", function()
      local p = s:run("kill -SEGV $$")
      assert.equal(-11, p:wait())
      assert.equal("signal", p.termination_reason)
      assert.equal(11, p.signal)
    end)

    it("reports a run's timeout as 'timeout'", function()
      local p = s:run("sleep 100", { timeout_s = 1 })
      p:wait()
      assert.equal("timeout", p.termination_reason)
    end)

    it("kill() ends the run: -9, 'killed'; false once it ended; bad signals are refused", function()
      local p = s:run("sleep 100")
      T.expect("InvalidArgument", p.kill, p, "NOSUCHSIG")
      T.expect("InvalidArgument", p.kill, p, 0)
      assert.is_true(p:kill())
      assert.equal(-9, p:wait())
      assert.equal("killed", p.termination_reason)
      assert.equal(9, p.signal)
      assert.is_false(p:kill())
    end)

    it("raises a run's error from the method that notices it and from every later one", function()
      local p = s:run("true", { cwd = "no/such/dir" })
      local e = T.expect("InvalidArgument", p.wait, p)
      assert.equal("cwd", e.option)
      assert.equal("InvalidArgument", T.expect("InvalidArgument", p.read, p).kind)
      T.expect("InvalidArgument", p.communicate, p)
      assert.equal(-1, p.returncode)
      assert.equal("error", p.termination_reason)
      p = s:run({ "/no/such/program" })
      e = T.expect("SandboxExecutionError", p.communicate, p)
      assert.equal(-1, e.returncode)
      T.expect("SandboxExecutionError", p.lines, p)
    end)

    -- 16 MiB of stderr before any stdout while the caller reads stdout.
    local FLOOD = 16 * 1024 * 1024
    local function flood(cap, stall, timeout_s)
      local stream = require "sbx.remote.stream"
      local old_cap, old_stall = process.BUFFER_CAP, stream.STALL_BYTES
      process.BUFFER_CAP, stream.STALL_BYTES = cap, stall
      finally(function() process.BUFFER_CAP, stream.STALL_BYTES = old_cap, old_stall end)
      local p = s:run("head -c " .. FLOOD .. " /dev/zero >&2; echo done", { timeout_s = timeout_s })
      -- The most held while the run could still write: a remote source
      -- reads on after the run's deadline, when sbxd only has its queue
      -- and the sockets' buffers of the killed run left to send.
      local src, peak = p._src, 0
      local function look()
        if not (src.deadline_ms and require("sbx.core").monotonic_ms() >= src.deadline_ms) then
          peak = math.max(peak, p:_buffered("stderr"))
        end
      end
      local next_ev = src.next
      src.next = function(...)
        look()
        return next_ev(...)
      end
      local lines = collect(p:lines())
      -- lines() ends at stdout's end, and what the last read brought (a
      -- remote read may carry megabytes on a loaded machine) is still held.
      look()
      return p, lines, peak
    end

    it("keeps the other stream under the cap: the command waits instead (backpressure)", function()
      local p, lines, held = flood(256 * 1024, 64 * 1024, 2)
      -- The cap and one 64 KiB read (a local run: also after its end);
      -- remote, also what one read of the connection brings past the
      -- source's 64 KiB.
      local bound = source.remote and 2 * 1024 * 1024 or 256 * 1024 + 64 * 1024
      assert.is_true(held <= bound, ("held %d bytes of stderr"):format(held))
      assert.same({}, lines, "the command was blocked on stderr, it never printed")
      p:wait()
      assert.equal("timeout", p.termination_reason)
    end)

    it("control: without a cap the same reader holds the whole other stream", function()
      local p, lines, held = flood(math.huge, math.huge, 60)
      assert.same({ "done" }, lines)
      -- flood() looks before each read and once after the end; only what a
      -- local run left in its pipe when "done" came can be unseen.
      assert.is_true(held >= FLOOD - 1024 * 1024, ("held only %d bytes of stderr"):format(held))
      local _, err = p:communicate()
      assert.equal(FLOOD, #err)
      assert.equal(0, p.returncode)
    end)
  end)
end

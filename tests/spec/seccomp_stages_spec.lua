-- seccomp_stages_spec.lua: a reused sbx-init runs under the init stage of
-- the session's filter, and each workload adds the run stage (seccomp.c,
-- init.c).  A policy's deny list must reach every workload of such an init
-- and never init itself: init calls socketpair and timerfd_create for every
-- run it serves and kill to end what a run left behind.  If the init stage
-- carried the deny list, a run would be refused (no socketpair) or its
-- leftovers would live on (no kill).  The unit tests
-- (test_seccomp_stages.c) show the two stages answer as the whole filter
-- for every call.

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local H = dofile(here .. "sec_helpers.lua")

-- Field 22 of /proc/1/stat: when this run's init started.
local INIT_START = "cut -d' ' -f22 /proc/1/stat"

for _, backend in ipairs { "userns", "privileged" } do
  describe(backend .. " backend: a policy's seccomp deny list on a reused init", function()
    local dir, s, why

    setup(function()
      dir = H.mktemp_dir("stages")
      H.write_file(dir .. "/policy.lua",
        'return { seccomp = { deny = { "kill", "socketpair", "timerfd_create" } } }')
      local ok, res = pcall(H.session, { backend = backend, policy = dir .. "/policy.lua" })
      if ok then s = res else why = type(res) == "table" and res.message or tostring(res) end
    end)

    teardown(function()
      if s then s:close() end
      if dir then H.rmtree(dir) end
    end)

    it("refuses the denied calls in every run, while init serves run after run", function()
      if not s then return pending(backend .. " is not available here: " .. tostring(why)) end
      local seen, served_again = {}, 0
      -- A run takes a given-back init only once it is ready again, else a
      -- fresh one (session.c take_idle): the pause lets it get ready, and
      -- the loop goes on until two runs came to an init that served before.
      for i = 1, 10 do
        -- Each run leaves a process behind that would leave a mark in the
        -- work dir 3 s later: init must kill it before it reports the run.
        local r = s:exec(("test ! -e left%d; echo gone=$?; kill -0 $$ 2>&1; echo kill=$?; %s; "
          .. "cat /proc/[0-9]*/comm | grep -c '^sleep$'; grep -h Seccomp_filters: /proc/1/status /proc/self/status; "
          .. "(sleep 3; touch left%d) >/dev/null 2>&1 &"):format(i - 1, INIT_START, i))
        assert.are.equal(0, r.returncode, H.show(r))
        assert.truthy(r.stdout:find("gone=0", 1, true), H.show(r))
        assert.truthy(r.stdout:find("Operation not permitted", 1, true), H.show(r))
        local start, procs, init_f, run_f = r.stdout:match(
          "kill=1\n(%d+)\n(%d+)\nSeccomp_filters:%s+(%d+)\nSeccomp_filters:%s+(%d+)")
        assert.is_not_nil(start, H.show(r))
        -- Nothing of the last run's (its sleep) is left.
        assert.are.equal("0", procs, H.show(r))
        -- The staged path: init under its stage, the workload under both.
        assert.are.equal("1", init_f, H.show(r))
        assert.are.equal("2", run_f, H.show(r))
        if seen[start] then served_again = served_again + 1 end
        seen[start] = true
        if served_again >= 2 then break end
        H.sleep(0.2)
      end
      assert.is_true(served_again >= 2, "no init served a second run")
    end)
  end)
end

-- An init that cannot take its stage (the filter budget of 32768
-- instructions is used up: tests/security/helpers/filter_budget.c runs
-- sbxlua under it) refuses the run at once, naming seccomp, with a memory
-- ceiling too, where the host waits for the workload's "w" before it sends
-- the request: without it, the open retried for 50 s and then said only
-- that the runs die before they start.
describe("userns backend: an init that cannot take its filter stage", function()
  local dir

  setup(function() dir = H.mktemp_dir("stages-budget") end)
  teardown(function() if dir then H.rmtree(dir) end end)

  -- Run one exec in a session of opts under sbxlua (wrapped by prefix):
  -- "ok" or the error's message.
  local function first_run(prefix, opts)
    H.write_file(dir .. "/run.lua", ([[
local sbx = require "sbx"
local s = sbx.session { backend = "userns", %s }
local ok, res = pcall(s.exec, s, "/bin/true")
io.write("RESULT ", ok and res.returncode == 0 and "ok" or tostring(type(res) == "table" and res.message or res), "\n")
s:close()
]]):format(opts))
    return H.sh(("%s timeout 120 %s %s 2>&1"):format(prefix, H.q(H.SBXLUA), H.q(dir .. "/run.lua")), true)
  end

  for _, opts in ipairs { "", "memory_mb = 256" } do
    it("refuses the run at once, naming seccomp (" .. (opts == "" and "no ceiling" or opts) .. ")", function()
      -- Control: the same session runs without the wrapper.
      local out = first_run("", opts)
      if opts ~= "" and not out:find("RESULT ok", 1, true) and out:find("cgroup", 1, true) then
        return pending("memory ceilings are not available here: " .. out)
      end
      assert.truthy(out:find("RESULT ok", 1, true), out)
      out = first_run(H.q(H.compile("filter_budget")), opts)
      assert.truthy(out:find("filter_budget: %d+ filters"), out)
      assert.truthy(out:find("RESULT seccomp: installing the filter: Cannot allocate memory", 1, true), out)
    end)
  end
end)

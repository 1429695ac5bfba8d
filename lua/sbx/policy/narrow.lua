-- sbx.policy.narrow: a run's own allow-list, s:run(cmd, { network_allowlist = {...} }).
--
-- A run may narrow its session's allow-list, never widen it (in an open
-- session, whose ceiling is the whole network, any list narrows: admit.lua
-- checks nothing there): each entry
-- of the run's list must lie within one entry of the session's (its
-- network_allowlist, else the policy's network.allowlist) -- the same
-- name, or a name or wildcard below a session wildcard, or a CIDR inside
-- a session CIDR, with a port range inside that entry's.  An entry that
-- does not is refused with PolicyDenied naming it (rather than silently
-- intersected away), so the caller learns at once that it asked for more
-- than the session has.  The run's list is then, exactly, what both lists
-- allow, and the proxy checks the run's connections against it alone (the
-- deny-lists, the non-public ranges and on_connect as for any run).
--
--   M.check(gen, session_list, run_list) -> run_list; raises PolicyDenied
--   M.ctx(ctx, run_list)                 -> the proxy context of such a run

local ceilings = require "sbx.policy.ceilings"
local match = require "sbx.match"

local M = {}

local function ends_with(s, suffix)
  return #s > #suffix and s:sub(-#suffix) == suffix
end

-- Whether session entry f holds every host and port run entry e names.
local function within(e, f)
  if f.port_lo > e.port_lo or f.port_hi < e.port_hi then return false end
  if e.kind == "name" then
    return (f.kind == "name" and f.name == e.name) or (f.kind == "suffix" and ends_with(e.name, f.dotted))
  elseif e.kind == "suffix" then
    return f.kind == "suffix" and (f.suffix == e.suffix or ends_with(e.suffix, f.dotted))
  end
  return f.kind == "cidr" and f.cidr.addr.v == e.cidr.addr.v and f.cidr.len <= e.cidr.len
    and match.ip.in_cidr(e.cidr.addr, f.cidr)
end

function M.check(gen, session_list, run_list)
  local outer = {}
  for _, s in ipairs(session_list or {}) do
    local f = match.parse_entry(s)
    if f then outer[#outer + 1] = f end
  end
  for i, s in ipairs(run_list) do
    local e = match.parse_entry(s)
    local ok = false
    for _, f in ipairs(e and outer or {}) do
      if within(e, f) then ok = true break end
    end
    if not ok then
      ceilings.deny(gen, "network_allowlist", ("network_allowlist[%d] %q is not within the session's allow-list "
        .. "(%s): a run may narrow it, never widen it"):format(i, tostring(s),
        #outer == 0 and "empty" or table.concat(session_list, ", ")))
    end
  end
  return run_list
end

function M.ctx(ctx, run_list)
  local out = {}
  for k, v in pairs(ctx) do out[k] = v end
  out.allowlist = run_list
  out.run_allowlist = true
  return out
end

return M

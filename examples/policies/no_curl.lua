-- examples/policies/no_curl.lua: a custom policy.  The default policy's
-- ceilings and defaults (this file leaves them out, so it gets the built-in
-- ones), plus two hooks: every session open is logged, and a run whose
-- command mentions curl is denied (PolicyDenied, rule "on_run").
--
--   build/bin/sbxlua --check-policy examples/policies/no_curl.lua
--   sbx.session{ policy = "examples/policies/no_curl.lua" }
--   build/bin/sbxd --policy examples/policies/no_curl.lua ...
local function mentions_curl(s)
  return type(s) == "string" and s:lower():find("curl", 1, true) ~= nil
end

return {
  name = "no_curl",
  defaults = { backend = "userns", network_mode = "blocked" },
  on_session_open = function(req, ctx)
    log("session open", req.name or "-", "backend=" .. tostring(req.backend),
      "network_mode=" .. tostring(req.network_mode), "origin=" .. tostring(ctx.origin))
    return true
  end,
  on_run = function(req, ctx)
    -- cmd is what the caller gave (a string or an argv table); argv is what
    -- will run (e.g. /bin/sh -c CMD): look at both.
    if mentions_curl(req.cmd) then return deny("no curl here") end
    for _, a in ipairs(req.argv) do
      if mentions_curl(a) then return deny("no curl here") end
    end
    return true
  end,
}

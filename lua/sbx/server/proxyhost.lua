-- sbx.server.proxyhost: the allowlist proxy's verdicts in sbxd.
--
-- The allowlist proxy of every session, on sbxd's event loop (main.c
-- watches sbx.server's proxy_fd() and calls proxy()'s px:wake, in C, when it is
-- readable).  Relaying and parsing never come here: proxy_batch gets, once
-- per wake-up, the questions of every connection waiting for a verdict and
-- the proxy's log lines.  Each session's listener is tagged with its id;
-- the session's own decide function (sbx.session: engine:proxy_verdict with
-- its context) answers for it, on the loop, except where the policy has an
-- on_connect hook: then the whole verdict on the name is asked of the
-- policy worker (engine:proxy_verdict there, with the same generation and
-- context), the connection waits (pending), and hook_answer gives the
-- verdict back.
--
-- new(cfg, ensure_loaded) -> { host, batch, hook_answer }: host is the
-- proxy_host sessions are opened with (sbx.session); batch is the proxy's
-- batch function (src/lua/proxy.c); hook_answer takes the worker's answers.
-- cfg.proxy and cfg.hooks are read when used (cfg.proxy is made after).

local errors = require "sbx.errors"

local M = {}

function M.new(cfg, ensure_loaded)
  local proxy_routes = {}
  local pending_verdicts = {} -- worker message id -> proxy ticket
  local host = {
    add = function(_, fd, id, decide, info, secrets)
      local ok, kind, msg = cfg.proxy:add(fd, id)
      if ok and secrets then ok, kind, msg = cfg.proxy:secrets(id, secrets) end
      if not ok then
        cfg.proxy:remove(id)
        errors.raise(errors.from_core(kind, msg))
      end
      proxy_routes[id] = { decide = decide, info = info }
    end,
    remove = function(_, id)
      cfg.proxy:remove(id)
      proxy_routes[id] = nil
    end,
  }

  local function proxy_decide(q)
    local route = proxy_routes[q.tag]
    if not route then return { allow = false, reason = "the session is gone" } end
    local info = route.info
    if q.phase == "name" and cfg.hooks and info then
      local gen = info.engine:for_session(info.gen)
      if gen.hooks.on_connect then
        local id = cfg.hooks.post({ op = "verdict", generation = ensure_loaded(gen), q = q, ctx = info.ctx })
        pending_verdicts[id] = q.ticket
        return { pending = true }
      end
    end
    return route.decide(q)
  end

  -- One wake-up's questions and log lines (src/lua/proxy.c, batch): a
  -- verdict per question, in order.  A question whose decide fails is
  -- refused on its own, the others still get theirs.
  local function proxy_batch(queries, logs)
    for _, line in ipairs(logs) do cfg.log("info", "event=proxy " .. line) end
    local verdicts = {}
    for i, q in ipairs(queries) do
      local ok, v = pcall(proxy_decide, q)
      verdicts[i] = ok and v
        or { allow = false, reason = "policy check failed: " .. tostring(type(v) == "table" and v.message or v) }
    end
    return verdicts
  end

  -- An answer of the policy worker no request waits for (task.c): a proxy
  -- verdict.  Anything but a well-formed allowing verdict refuses.
  local function hook_answer(id, rep)
    local ticket = pending_verdicts[id]
    if not ticket then return end
    pending_verdicts[id] = nil
    local v = type(rep) == "table" and type(rep.verdict) == "table" and rep.verdict
      or { allow = false, reason = "policy check failed: " .. tostring(type(rep) == "table" and rep.err or rep) }
    cfg.proxy:decided(ticket, v)
  end

  return { host = host, batch = proxy_batch, hook_answer = hook_answer }
end

return M

-- sbx.policy.engine: the policy engine.  An Engine holds the live
-- generation of a policy and its number, reloads it (a failed reload keeps
-- the old one), and decides requests against a generation: a session
-- open, a run, a connection (and the proxy's two-phase verdict), a close.
-- The rules are sbx.policy.ceilings', the hook calls sbx.policy.hooks';
-- admission glue for sbx.session and sbxd is sbx.policy.admit.

local errors = require "sbx.errors"
local options = require "sbx.options"
local match = require "sbx.match"
local files = require "sbx.policy.files"
local sandbox = require "sbx.policy.sandbox"
local compile = require "sbx.policy.compile"
local hooks = require "sbx.policy.hooks"
local ceilings = require "sbx.policy.ceilings"
local admit = require "sbx.policy.admit"
local describe = require "sbx.policy.describe"
local venv = require "sbx.venv"

local M = {}

-- Session options that are the host's business, not the request's: the
-- hooks never see them, nor may they return them.
M.HOST_KEYS = admit.HOST_KEYS

local Engine = {}
Engine.__index = function(t, k)
  local m = Engine[k]
  if m ~= nil then return m end
  local cur = rawget(t, "current")
  return cur and cur[k]
end
M.Engine = Engine

Engine.admit_session = admit.session
Engine.admit_run = admit.run
Engine.describe = describe.describe

function M.is_engine(x)
  return type(x) == "table" and getmetatable(x) == Engine
end

-- load([path], [opts]) -> Engine.  Raises PolicyDenied when the file
-- cannot be read, does not compile, errors, runs over budget, returns a
-- non-table or holds data of the wrong shape.
function M.load(path, opts)
  if path ~= nil and type(path) ~= "string" then
    errors.raise(errors.InvalidArgument("policy", "a path to a policy file expected, got " .. type(path)))
  end
  if opts ~= nil and type(opts) ~= "table" then
    errors.raise(errors.InvalidArgument("opts", "a table expected, got " .. type(opts)))
  end
  local file = files.resolve(path)
  local gen = compile.compile(file, opts)
  gen.generation = 1
  return setmetatable({ path = file, opts = opts or {}, current = gen, generation = 1 }, Engine)
end

-- engine_for(x) -> x when it is an Engine (a shared, reloadable one), or
-- a fresh Engine loaded from the path x (nil: the default policy).
function M.engine_for(x)
  if M.is_engine(x) then return x end
  return M.load(x)
end

function Engine:for_session(gen)
  local cur = self.current
  if gen == nil or (cur ~= gen and cur.reapply) then return cur end
  return gen
end

-- reload([path]) -> true, or nil and why.  A policy that fails to load
-- leaves the current one in place; sessions keep the generation they were
-- opened under (unless the new one says reapply = true).
function Engine:reload(path)
  local file = path and files.resolve(path) or self.path
  local ok, gen = pcall(compile.compile, file, self.opts)
  local cur = self.current
  if not ok then
    local why = errors.is(gen) and gen.message or tostring(gen)
    cur.emit(("reload of %s failed, keeping generation %d: %s"):format(file, self.generation, why))
    return nil, why
  end
  self.generation = self.generation + 1
  gen.generation = self.generation
  self.path = file
  self.current = gen
  gen.emit(("reloaded from %s: generation %d%s"):format(file, gen.generation,
    gen.reapply and ", reapplied to open sessions" or ""))
  return true
end

-- session_open(req, ctx, [gen], [host]) -> req' (ceilings checked, hook
-- applied), gen.  req: the session options (backend, network_mode,
-- memory_mb, ...), with the policy's defaults filled in by the caller.
-- host = { realpath, extra_forbidden }: the filesystem rules too (the
-- admission path, sbx.policy.admit, passes it).
function Engine:session_open(req, ctx, gen, host)
  gen = gen or self.current
  if type(req) ~= "table" then
    errors.raise(errors.InvalidArgument("req", "a table of session options expected"))
  end
  -- A python_venv is judged as the read-only bind it becomes (sbx.venv).
  req = ceilings.session(gen, venv.request(sandbox.data_copy(req)), host)
  if gen.hooks.on_session_open then
    local verdict, r = hooks.call(gen, "on_session_open", true, sandbox.data_copy(req), hooks.ctx(gen, ctx))
    if verdict == "adjust" then
      local keys = {}
      for _, k in ipairs(options.SESSION_KEYS) do keys[k] = true end
      for k in pairs(r) do
        if not keys[k] or M.HOST_KEYS[k] then
          hooks.malformed(gen, "on_session_open", "unknown field " .. tostring(k))
        end
      end
      local ok, checked = pcall(ceilings.session, gen, venv.request(sandbox.data_copy(r)), host)
      if not ok then
        -- A path the hook returned that does not exist: the hook's fault.
        if errors.is(checked, "InvalidArgument") then hooks.malformed(gen, "on_session_open", checked.message) end
        error(checked, 0)
      end
      req = checked
    end
  end
  return req, gen
end

-- run(req, ctx, [gen]) -> req'.  req: { argv = {...}, cmd = (as given),
-- script_type, env = { K = V }, cwd, timeout_s, network_mode, stdin (bool: any stdin), pty (bool) };
-- ctx.session = { id, name, backend, network_mode, ... }.
function Engine:run(req, ctx, gen)
  gen = self:for_session(gen)
  if type(req) ~= "table" then errors.raise(errors.InvalidArgument("req", "a table expected")) end
  req = ceilings.run(gen, sandbox.data_copy(req), ctx, nil)
  if gen.hooks.on_run then
    local verdict, r = hooks.call(gen, "on_run", true, sandbox.data_copy(req), hooks.ctx(gen, ctx))
    if verdict == "adjust" then req = ceilings.run(gen, sandbox.data_copy(r), ctx, "on_run") end
  end
  return req
end

-- The matchers of the lists a caller passes in ctx (a session's allow-
-- and deny-list), compiled once per list table: the proxy asks about every
-- connection, and compiling the metadata preset each time was most of the
-- cost.  A list is taken as a value: change one and pass a new table.
local ctx_matchers = setmetatable({}, { __mode = "k" })
local function ctx_matcher(list, what)
  local m = ctx_matchers[list]
  if not m then
    m = match.compile(list, what)
    ctx_matchers[list] = m
  end
  return m
end

-- connect(host, port, addrs, ctx, [gen]) -> true, or false and a
-- PolicyDenied error.  Order: a host that is no valid name or address is
-- refused; the deny-list (the policy's plus ctx.denylist) against the
-- name and every address; the network mode (ctx.network_mode, else the
-- session's, else the policy default); in allowlist mode the allow-list
-- (ctx.allowlist, else the policy's network.allowlist) against the name
-- (or the literal address); then on_connect.  Never raises: a bad
-- ctx.allowlist / ctx.denylist entry gives false and its InvalidArgument.
function Engine:connect(host, port, addrs, ctx, gen)
  gen = self:for_session(gen)
  local ok, res, err = pcall(function()
    ctx = ctx or {}
    if type(port) ~= "number" or port < 1 or port > 65535 or port ~= math.floor(port) then
      ceilings.deny(gen, "network.port", ("port %s is not a port number"):format(tostring(port)))
    end
    if type(host) ~= "string" then ceilings.deny(gen, "network.host", "no host name") end
    local literal = match.is_ip_literal(host) and match.ip.parse(host)
    if not literal then
      local n, why = match.normalize_host(host)
      if not n then ceilings.deny(gen, "network.host", ("%q is not a valid host name: %s"):format(host, why)) end
    end
    local parsed = {}
    for i, a in ipairs(addrs or {}) do
      local p = match.ip.parse(a)
      if not p then
        ceilings.deny(gen, "network.addrs", ("resolved address %s is not an address"):format(tostring(a)))
      end
      parsed[i] = p
    end
    local hit = gen.deny_matcher:match(host, port, parsed)
    if not hit and ctx.denylist then hit = ctx_matcher(ctx.denylist, "denylist"):match(host, port, parsed) end
    if hit then
      ceilings.deny(gen, "network.denylist", ("%s:%d is denied by the deny-list entry %s"):format(host, port, hit))
    end
    local sess = type(ctx.session) == "table" and ctx.session or {}
    local mode = ctx.network_mode or sess.network_mode or gen.defaults.network_mode
    if mode == "blocked" or not ceilings.width(mode) then
      ceilings.deny(gen, "network_mode", ("%s:%d: network_mode is %q"):format(host, port, tostring(mode)))
    end
    if mode == "allowlist" then
      local m = ctx.allowlist and ctx_matcher(ctx.allowlist, "allowlist") or gen.allow_matcher
      if not m or not m:match(host, port) then
        ceilings.deny(gen, "network.allowlist", ("%s:%d is not on the allow-list"):format(host, port))
      end
    end
    if gen.hooks.on_connect then
      hooks.call(gen, "on_connect", false, host, port, sandbox.data_copy(addrs or {}), hooks.ctx(gen, ctx))
    end
    return true
  end)
  if ok then return true end
  if not errors.is(res) then
    res = hooks.denied(gen, "on_connect", "check failed: " .. tostring(res), { cause = "error" })
  end
  return false, res, err
end

-- proxy_verdict(q, ctx, [gen]) -> the allow-list proxy's verdict table
-- (src/lua/proxy.c): q = { phase = "name" | "addrs", kind, host, port,
-- addrs }.  Phase "name" comes before any DNS lookup: connect() with no
-- addresses (deny-list, mode, allow-list, on_connect); an allowed IP
-- literal, in whatever spelling, comes back canonical as `literal`, a
-- name normalized as `resolve`.  Phase "addrs": every resolved address
-- against the deny-lists, and against the non-public ranges (ip.special)
-- unless the allow-list names a CIDR holding it.  Never raises: anything
-- wrong is a refusal.
function Engine:proxy_verdict(q, ctx, gen)
  gen = self:for_session(gen)
  ctx = ctx or {}
  local ok, res = pcall(function()
    if q.phase == "name" then
      local allowed, err = self:connect(q.host, q.port, nil, ctx, gen)
      if not allowed then return { allow = false, reason = err.message } end
      local a = match.is_ip_literal(q.host) and match.ip.parse(q.host)
      if a then return { allow = true, literal = match.ip.tostring(a) } end
      return { allow = true, resolve = (match.normalize_host(q.host)) }
    elseif q.phase == "addrs" then
      local deny2 = ctx.denylist and ctx_matcher(ctx.denylist, "denylist")
      local allow = ctx.allowlist and ctx_matcher(ctx.allowlist, "allowlist") or gen.allow_matcher
      if type(q.addrs) ~= "table" or #q.addrs == 0 then
        return { allow = false, reason = "no address to check" }
      end
      for _, s in ipairs(q.addrs) do
        local a = match.ip.parse(s)
        if not a then return { allow = false, reason = ("%s is not an address"):format(tostring(s)) } end
        local hit = gen.deny_matcher:match_addr(a, q.port) or (deny2 and deny2:match_addr(a, q.port))
        if hit then
          local e = errors.PolicyDenied("network.denylist", ("policy %s: %s:%d resolves to %s, denied by %s")
            :format(gen.name, q.host, q.port, s, hit))
          gen.emit("denied: " .. e.message)
          return { allow = false, reason = e.message }
        end
        local kind = match.ip.special(a)
        if kind and not (allow and allow:match_addr(a, q.port)) then
          local e = errors.PolicyDenied("network.private", ("policy %s: %s:%d resolves to %s, a %s address "
            .. "(allow it only by naming its CIDR in the allow-list)"):format(gen.name, q.host, q.port, s, kind))
          gen.emit("denied: " .. e.message)
          return { allow = false, reason = e.message }
        end
      end
      return { allow = true }
    end
    return { allow = false, reason = "unknown phase " .. tostring(q.phase) }
  end)
  if ok then return res end
  return { allow = false, reason = "policy check failed: " .. tostring(type(res) == "table" and res.message or res) }
end

-- close(session, ctx, [gen]) -- runs on_close; never raises.
function Engine:close(session, ctx, gen)
  gen = self:for_session(gen)
  if not gen.hooks.on_close then return end
  local res = (gen.runner or sandbox.run_hook)(gen, "on_close", sandbox.data_copy(session or {}), hooks.ctx(gen, ctx))
  if not res[1] then gen.emit("on_close failed: " .. tostring(res[2])) end
end


return M

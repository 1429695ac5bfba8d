-- sbx.repl: the interactive loop of sbxlua.
--
-- Each input is tried as `return <input>` (so `1+1` prints 2), then as a
-- statement; an input that ends too early ("<eof>" in the error) continues
-- on the next line. `=expr` prints expr. `!cmd` runs cmd in a local session
-- opened on first use (options from `sbxlua --session-opts`) with its output
-- shown as it arrives, and closed when the REPL ends (Ctrl-D).  With
-- `sbxlua --remote URL --token-file F` that session is a remote one on the
-- sbxd at URL (sbx.remote), the output streamed over HTTP/2.
--
-- On a terminal `!cmd` is interactive: cmd gets a pty of the terminal's
-- size (TERM passed on), the terminal goes raw and every key goes to the
-- program (^C, ^Z, ^D reach its foreground process group through the
-- sandbox's terminal), resizes follow, and the REPL's prompt comes back
-- when it exits.  So `!bash`, `!python3`, `!top` and `:shell` work as in a
-- terminal of their own, on-device and with --remote alike.
--
-- Line editing, tab completion (sbx.complete) and history kept across
-- restarts ($SBXLUA_HISTORY, default ~/.sbxlua_history) come from
-- sbx.readline (libedit) when stdin is a terminal; otherwise lines are read
-- with io.read and no prompt is printed, so the REPL can be driven through a
-- pipe.  Results print through sbx.pretty.  Commands: see HELP below.

local pretty = require "sbx.pretty"
local complete = require "sbx.complete"

local M = {}

local HELP = [[
  expr / =expr          evaluate and print (tables nested, cycles marked)
  statement             run Lua; an incomplete chunk continues on the next line
  !cmd                  run cmd in the session, output live; [exit N] when non-zero
                        (on a terminal with a pty: !bash, !python3, !top are interactive)
  :shell                an interactive shell in the session (bash, else sh)
  :put LOCAL REMOTE     copy a local file into the session's work dir
  :get REMOTE LOCAL     copy a file out of the work dir
  :net blocked|open|allowlist [HOST...]   network mode (and allow-list) of the
                        next ! runs; checked at once with a trial run
  :session              show the session (opening it if needed)
  :close                close the session (the next ! opens a new one)
  :help                 this text
  Tab completes globals, fields (a.b) and methods (s:ru); Ctrl-C stops the
  running command or drops the line; Ctrl-D closes the session and leaves.]]
local COMMANDS = { ":put", ":get", ":net", ":session", ":close", ":shell", ":help" }

local PROMPT, PROMPT2 = "sbx> ", "...> "

-- The text of an error object: "Kind: message" for sbx's error tables.
local function errtext(e)
  if type(e) == "string" and e:match("interrupted!$") then return "interrupted" end
  if type(e) == "table" then
    local mt = getmetatable(e)
    if mt and mt.__tostring then return tostring(e) end
    if e.kind and e.message then return tostring(e.kind) .. ": " .. tostring(e.message) end
  end
  return tostring(e)
end

local function pack(...) return select("#", ...), { ... } end

local function print_results(n, ...)
  if n == 0 then return end
  local out = {}
  for i = 1, n do out[i] = pretty.show((select(i, ...))) end
  io.stdout:write(table.concat(out, "\t"), "\n")
  io.stdout:flush()
end

-- Compile an input: as an expression first, then as a statement.
-- Returns fn | nil, err, incomplete.
local function compile(src)
  if src:sub(1, 1) == "=" then src = "return " .. src:sub(2) end
  local fn = loadstring("return " .. src, "=stdin")
  if fn then return fn end
  local err
  fn, err = loadstring(src, "=stdin")
  if fn then return fn end
  return nil, err, err:find("<eof>", 1, true) ~= nil
end

-- The reader: libedit on a terminal, plain io.read (no prompt) otherwise.
-- read(prompt) -> line | nil (end of input) | false (Ctrl-C).
local function history_path()
  local p = os.getenv("SBXLUA_HISTORY")
  if p then return p ~= "" and p or nil end
  local home = os.getenv("HOME")
  return home and home .. "/.sbxlua_history" or nil
end

local function make_reader()
  local ok, rl = pcall(require, "sbx.readline")
  if ok and rl.isatty() then
    rl.set_completer(function(word, line)
      return complete.candidates(word, line, _G, COMMANDS)
    end)
    local path = history_path()
    if path then rl.read_history(path) end
    local function add(line)
      rl.add_history(line)
      if path then rl.write_history(path) end
    end
    return rl.readline, add, rl.call, true
  end
  local call = ok and rl.call or pcall
  return function() return io.read("*l") end, function() end, call, false
end

-- The on-device session's proxy logs to a file of the REPL's (sbx.session
-- proxy_log, called in the proxy's own process), never into the prompt;
-- after each run one line says what it refused meanwhile.
local function proxy_log_to(path)
  return function(line)
    local f = io.open(path, "a")
    if f then f:write(line, "\n") f:close() end
  end
end

-- The session of `!cmd`, opened on first use.
local Shell = {}
Shell.__index = Shell

local function new_shell(opts, remote, token_file, tty)
  return setmetatable({ opts = opts, remote = remote, token_file = token_file, tty = tty }, Shell)
end

-- The --session-opts expression, evaluated once when the REPL starts (a
-- bad one stops it there, not at every `!`).  JSON, which newcomers type,
-- gets an example of the Lua form.
local function session_opts(expr)
  if not (expr and expr:match("%S")) then return {} end
  local fn, err = loadstring("return " .. expr, "=--session-opts")
  if not fn then
    local json = expr:match('^%s*{%s*"') and ' (a Lua table, not JSON: --session-opts '
      .. "'{network_mode = \"allowlist\", network_allowlist = sbx.PYPI_HOSTS}')" or ""
    error("InvalidArgument: --session-opts: " .. err .. json, 0)
  end
  local ok, opts = pcall(fn)
  if not ok then error("InvalidArgument: --session-opts: " .. errtext(opts), 0) end
  if type(opts) ~= "table" then
    error("InvalidArgument: --session-opts must be a Lua table, not a " .. type(opts), 0)
  end
  return opts
end

function Shell:session()
  if self.s then return self.s end
  local opts = {}
  for k, v in pairs(self.opts) do opts[k] = v end
  if self.remote then
    opts.endpoint, opts.token_file = self.remote, self.token_file
    self.s = require("sbx.remote").session(opts)
  else
    if not self.proxy_log then
      self.proxy_log = os.tmpname()
      require("sbx.session").proxy_log = proxy_log_to(self.proxy_log)
    end
    self.s = require("sbx").session(opts)
  end
  return self.s
end

-- How often the terminal loop looks at each side while nothing happens.
local TTY_SLICE_MS = 10

-- cmd on a pty, with the REPL's terminal handed over (raw) until it ends.
function Shell:run_tty(cmd)
  local tty, s = self.tty, self:session()
  local rows, cols = tty.size()
  local term = os.getenv("TERM")
  local p = s:run(cmd, { pty = { rows = rows or 24, cols = cols or 80 }, network_mode = self.net,
    network_allowlist = self.allowlist,
    env = term and term ~= "" and { TERM = term } or nil })
  self.p = p
  local ok, err = tty.raw()
  if not ok then
    pcall(p.kill, p)
    error("SandboxExecutionError: the terminal cannot go raw: " .. tostring(err), 0)
  end
  local done, res = pcall(function()
    while true do
      local out = p:read("stdout", TTY_SLICE_MS / 1000)
      if out == nil then break end
      if out ~= "" then io.stdout:write(out) io.stdout:flush() end
      -- The size first: keys typed after a resize must reach a run that
      -- has it (`stty size` typed right after one printed the old size).
      local r, c = tty.size()
      if r and (r ~= rows or c ~= cols) then
        rows, cols = r, c
        p:resize(rows, cols)
      end
      local keys = tty.read(out == "" and 0 or 0)
      if keys == nil then p:close_stdin() elseif keys ~= "" then p:write(keys) end
    end
    p:wait()
  end)
  tty.restore()
  self.p = nil
  if not done then error(res, 0) end
  io.stdout:write("\r")
  return self:report(p)
end

-- Run cmd with stdout and stderr going to the terminal as they are written.
function Shell:run(cmd)
  local s = self:session()
  io.stdout:flush() -- what we printed comes before what cmd prints
  if self.tty then return self:run_tty(cmd) end
  if self.remote then
    -- No "inherit" over the network: the chunks are written as they come.
    local p = s:run(cmd, { network_mode = self.net, network_allowlist = self.allowlist })
    self.p = p
    for st, data in p.read_any, p do
      local f = st == "stderr" and io.stderr or io.stdout
      f:write(data)
      f:flush()
    end
    p:wait()
    self.p = nil
    return self:report(p)
  end
  local p = s:run(cmd, { stdout = "inherit", stderr = "inherit", network_mode = self.net,
    network_allowlist = self.allowlist })
  self.p = p -- for abort() when Ctrl-C interrupts the wait
  p:wait()
  self.p = nil
  return self:report(p)
end

function Shell:proxy_report()
  if not self.proxy_log then return end
  local f = io.open(self.proxy_log, "rb")
  if not f then return end
  f:seek("set", self.proxy_seen or 0)
  local new = f:read("*a") or ""
  self.proxy_seen = f:seek()
  f:close()
  local n, last = 0, nil
  for line in new:gmatch("[^\n]+") do
    if line:match("^refused ") then n, last = n + 1, line end
  end
  if n > 0 then
    io.stdout:write(("[proxy: %d connection%s refused; last: %s]\n"):format(n, n == 1 and "" or "s",
      last:sub(9)))
  end
end

-- [exit N] after a run that did not exit 0.
function Shell:report(p)
  self:proxy_report()
  local rc, reason = p.returncode, p.termination_reason
  if rc ~= 0 then
    if reason and reason ~= "" and reason ~= "exit" then -- "" is an exit of its own
      io.stdout:write(string.format("[exit %s: %s]\n", tostring(rc), tostring(reason)))
    else
      io.stdout:write(string.format("[exit %s]\n", tostring(rc)))
    end
  end
end

-- After Ctrl-C: kill the run that was being waited for, so it does not go on
-- in the background.
function Shell:abort()
  local p = self.p
  self.p = nil
  if p then pcall(p.kill, p) end
end

local function slurp(path)
  local f, err = io.open(path, "rb")
  if not f then error("InvalidArgument: " .. err, 0) end
  local data = f:read("*a")
  f:close()
  return data
end

-- The REPL's own commands (a line starting with ':').
function Shell:command(line)
  local name, rest = line:match("^:(%a+)%s*(.-)%s*$")
  local a, b = (rest or ""):match("^(%S+)%s+(%S+)$")
  if name == "help" then
    io.stdout:write(HELP, "\n")
  elseif name == "put" and a then
    self:session():put_bytes(b, slurp(a))
    io.stdout:write(("%s -> %s\n"):format(a, b))
  elseif name == "get" and a then
    local data = self:session():get_bytes(a)
    local f, err = io.open(b, "wb")
    if not f then error("InvalidArgument: " .. err, 0) end
    f:write(data)
    f:close()
    io.stdout:write(("%s -> %s (%d bytes)\n"):format(a, b, #data))
  elseif name == "net" and rest:match("^(%a+)") then
    self:set_net(rest)
  elseif name == "session" then
    local s = self:session()
    io.stdout:write(pretty.show({ name = s.name, id = s.id, backend = s.backend,
      work_dir = s.work_dir, created_at = s.created_at, is_owner = s.is_owner,
      endpoint = s.endpoint, url = s.url, ip = s.ip, network_mode = self.net or "(session default)" }), "\n")
  elseif name == "close" then
    self:close()
    io.stdout:write("session closed\n")
  elseif name == "shell" and rest == "" then
    if not self.tty then error("InvalidArgument: :shell needs the REPL on a terminal", 0) end
    self:run("if command -v bash >/dev/null; then exec bash; else exec sh; fi")
  else
    error("InvalidArgument: unknown or incomplete command '" .. line .. "' (:help lists them)", 0)
  end
end

-- :net MODE [HOST...]: refused here, not at the next run, when the session
-- (its mode, its policy, its allow-list) would deny it: a trial run asks.
function Shell:set_net(rest)
  local mode, list = rest:match("^(%a+)%s*(.-)$")
  if mode ~= "blocked" and mode ~= "allowlist" and mode ~= "open" then
    error("InvalidArgument: :net takes blocked, open or allowlist [HOST...], not '" .. rest .. "'", 0)
  end
  local hosts
  if list ~= "" then
    if mode ~= "allowlist" then error("InvalidArgument: only :net allowlist takes hosts", 0) end
    hosts = {}
    for h in list:gmatch("[^%s,]+") do hosts[#hosts + 1] = h end
  end
  local s = self:session()
  local ok, e = pcall(s.exec, s, "true", { network_mode = mode, network_allowlist = hosts })
  if not ok then
    local hint = mode == "allowlist" and not hosts and not (type(e) == "table" and e.rule == "session.network_mode")
    local more = hint and "; name the hosts: :net allowlist HOST..." or ""
    if type(e) == "table" and e.rule == "session.network_mode" then
      -- The ceiling is the session's: only a session opened wider lifts it.
      more = "; the ceiling is set when the session opens: start sbxlua with --session-opts "
        .. "'{network_mode = \"allowlist\", network_allowlist = sbx.PYPI_HOSTS}'"
    end
    error(("%s (:net %s refused%s)"):format(errtext(e), rest, more), 0)
  end
  self.net, self.allowlist = mode, hosts
  io.stdout:write(("network_mode %s%s for the next runs\n"):format(mode,
    hosts and (" (" .. table.concat(hosts, ", ") .. ")") or ""))
end

function Shell:close()
  if self.proxy_log then -- the next session's proxy starts a new file
    os.remove(self.proxy_log)
    self.proxy_seen = 0
  end
  if self.s then
    local s = self.s
    self.s = nil
    local ok, err = pcall(s.close, s)
    if not ok then io.stderr:write(errtext(err), "\n") end
  end
end

--- Run the REPL until end of input.
-- opts.session_opts: a Lua table expression, the options of the `!` session.
-- opts.remote, opts.token_file: that session is on the sbxd at this URL.
function M.run(opts)
  opts = opts or {}
  local read, add_history, call, interactive = make_reader()
  -- On a terminal (stdin and stdout), `!` runs get a pty of their own.
  local tty_ok, tty = pcall(require, "sbx.tty")
  tty = interactive and tty_ok and tty.size() and tty or nil

  -- The sbx module as a global, as a convenience; a broken module must not
  -- keep the REPL from starting.
  if rawget(_G, "sbx") == nil then
    local ok, mod = pcall(require, "sbx")
    if ok then
      rawset(_G, "sbx", mod)
    else
      io.stderr:write("warning: require 'sbx' failed: ", errtext(mod), "\n")
    end
  end
  -- A denial reaches the prompt as the PolicyDenied it raises: the
  -- policy's own "denied:" line on stderr would repeat it.
  require("sbx.policy.sandbox").hide = function(l) return l:find("] denied: ", 1, true) ~= nil end
  local sok, sopts = pcall(session_opts, opts.session_opts)
  if not sok then -- a usage error: no traceback, no prompt
    io.stderr:write(opts.progname or "sbxlua", ": ", errtext(sopts), "\n")
    os.exit(1)
  end
  local shell = new_shell(sopts, opts.remote, opts.token_file, tty)

  local buf
  while true do
    local line = read(buf and PROMPT2 or PROMPT)
    if line == nil then -- Ctrl-D / end of input
      if interactive then io.stdout:write("\n") end
      break
    elseif line == false then -- Ctrl-C: drop what was typed
      io.stdout:write("\n")
      buf = nil
    elseif not buf and line:match("^:%a") then
      add_history(line)
      local ok, err = call(Shell.command, shell, line)
      if not ok then io.stderr:write(errtext(err), "\n") end
    elseif not buf and line:sub(1, 1) == "!" then
      add_history(line)
      local cmd = line:sub(2)
      if cmd:match("%S") then
        local ok, err = call(Shell.run, shell, cmd)
        if not ok then
          shell:abort()
          io.stderr:write(errtext(err), "\n")
        end
      end
    elseif buf or line:match("%S") then
      buf = buf and (buf .. "\n" .. line) or line
      local fn, err, incomplete = compile(buf)
      if fn or not incomplete then
        add_history(buf)
        buf = nil
        if fn then
          local n, res = pack(call(fn))
          if res[1] then
            print_results(n - 1, unpack(res, 2, n))
          else
            io.stderr:write(errtext(res[2]), "\n")
          end
        else
          io.stderr:write(errtext(err), "\n")
        end
      end
    end
  end
  shell:close()
end

return M

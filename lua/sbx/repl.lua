-- sbx.repl: the interactive loop of sbxlua.
--
-- Each input is tried as `return <input>` (so `1+1` prints 2), then as a
-- statement; an input that ends too early ("<eof>" in the error) continues
-- on the next line. `=expr` prints expr. `!cmd` runs cmd in a local session
-- opened on first use (options from `sbxlua --session-opts`) with its output
-- shown as it arrives, and closed when the REPL ends (Ctrl-D).
--
-- Line editing and history come from sbx.readline (libedit) when stdin is a
-- terminal; otherwise lines are read with io.read and no prompt is printed,
-- so the REPL can be driven through a pipe.

local M = {}

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

-- One value for display: strings quoted inside tables, tables one level deep.
local function show_inner(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local function show(v)
  if type(v) ~= "table" or (getmetatable(v) and getmetatable(v).__tostring) then
    return tostring(v)
  end
  local parts, n = {}, #v
  for i = 1, n do parts[#parts + 1] = show_inner(v[i]) end
  local keys = {}
  for k in pairs(v) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys, function(a, b)
    if type(a) == type(b) and (type(a) == "string" or type(a) == "number") then return a < b end
    return type(a) < type(b)
  end)
  for _, k in ipairs(keys) do
    local ks = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k
      or "[" .. show_inner(k) .. "]"
    parts[#parts + 1] = ks .. " = " .. show_inner(v[k])
  end
  if #parts == 0 then return "{}" end
  return "{ " .. table.concat(parts, ", ") .. " }"
end

local function pack(...) return select("#", ...), { ... } end

local function print_results(n, ...)
  if n == 0 then return end
  local out = {}
  for i = 1, n do out[i] = show((select(i, ...))) end
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
local function make_reader()
  local ok, rl = pcall(require, "sbx.readline")
  if ok and rl.isatty() then
    return rl.readline, rl.add_history, rl.call, true
  end
  local call = ok and rl.call or pcall
  return function() return io.read("*l") end, function() end, call, false
end

-- The session of `!cmd`, opened on first use.
local Shell = {}
Shell.__index = Shell

local function new_shell(opts_expr)
  return setmetatable({ opts_expr = opts_expr }, Shell)
end

function Shell:session()
  if self.s then return self.s end
  local opts = {}
  if self.opts_expr and self.opts_expr:match("%S") then
    local fn, err = loadstring("return " .. self.opts_expr, "=--session-opts")
    if not fn then error("InvalidArgument: --session-opts: " .. err, 0) end
    opts = fn()
    if type(opts) ~= "table" then
      error("InvalidArgument: --session-opts must be a Lua table, not a " .. type(opts), 0)
    end
  end
  self.s = require("sbx").session(opts)
  return self.s
end

-- Run cmd with stdout and stderr going to the terminal as they are written.
function Shell:run(cmd)
  local s = self:session()
  io.stdout:flush() -- what we printed comes before what cmd prints
  local p = s:run(cmd, { stdout = "inherit", stderr = "inherit" })
  self.p = p -- for abort() when Ctrl-C interrupts the wait
  p:wait()
  self.p = nil
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

function Shell:close()
  if self.s then
    local s = self.s
    self.s = nil
    local ok, err = pcall(s.close, s)
    if not ok then io.stderr:write(errtext(err), "\n") end
  end
end

--- Run the REPL until end of input.
-- opts.session_opts: a Lua table expression, the options of the `!` session.
function M.run(opts)
  opts = opts or {}
  local read, add_history, call, interactive = make_reader()
  local shell = new_shell(opts.session_opts)

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

  local buf
  while true do
    local line = read(buf and PROMPT2 or PROMPT)
    if line == nil then -- Ctrl-D / end of input
      if interactive then io.stdout:write("\n") end
      break
    elseif line == false then -- Ctrl-C: drop what was typed
      io.stdout:write("\n")
      buf = nil
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

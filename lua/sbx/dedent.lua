-- sbx.dedent: remove the indentation every line of a text has in common,
-- as Python's textwrap.dedent does, so a `script_type = "python"` script
-- written indented inside the caller's own code (a long string in an
-- indented block) runs instead of raising IndentationError.
--
-- Semantics (textwrap.dedent's): a line holding only spaces and tabs
-- becomes empty and does not count; the margin is the longest common
-- prefix of the other lines' leading whitespace, compared character by
-- character (a tab and spaces do not match each other); it is removed from
-- the start of every line.  A text without a common margin is returned
-- unchanged.

local M = {}

function M.dedent(text)
  local lines = {}
  for line in (text .. "\n"):gmatch("(.-)\n") do lines[#lines + 1] = line end
  local margin
  for i, line in ipairs(lines) do
    if line:find("^[ \t]+$") then
      lines[i] = ""
    else
      local indent = line:match("^([ \t]*)[^ \t]")
      if indent then
        if margin == nil then
          margin = indent
        else
          local n = 0
          while n < #margin and n < #indent and margin:byte(n + 1) == indent:byte(n + 1) do
            n = n + 1
          end
          margin = margin:sub(1, n)
        end
      end
    end
  end
  if margin and #margin > 0 then
    for i, line in ipairs(lines) do
      if line:sub(1, #margin) == margin then lines[i] = line:sub(#margin + 1) end
    end
  end
  return table.concat(lines, "\n")
end

return M

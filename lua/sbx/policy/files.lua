-- sbx.policy.files: where policy files are.  The policy directory (sbxlua's
-- sbx.paths, the rock's modules directory, or the source tree), the
-- default policy, and how a relative policy name is resolved.

local M = {}

-- The directory of the sbx modules (lua/sbx, or the rock's sbx/), found
-- from this file's own path (lua/sbx/policy/files.lua); nil when loaded
-- from a string.
local function sbx_dir()
  local src = debug.getinfo(1, "S").source
  if src:sub(1, 1) ~= "@" then return nil end
  local dir = src:sub(2):match("^(.*)/[^/]*$") or "."
  if dir == "." then return ".." end
  return dir:match("^(.*)/[^/]*$") or "."
end

-- The directory of policy files: sbx.paths (preloaded by sbxlua) or the
-- source tree this module was loaded from.
function M.policy_dir()
  local ok, p = pcall(require, "sbx.paths")
  if ok and type(p) == "table" and type(p.policy_dir) == "string" then
    return p.policy_dir, p.root
  end
  local dir = sbx_dir()
  if not dir then return "policies", "." end
  -- Installed as a rock (rockspec/), the policies sit beside the modules.
  local f = io.open(dir .. "/policies/default.lua", "rb")
  if f then
    f:close()
    return dir .. "/policies", dir
  end
  -- dir is <root>/lua/sbx: strip the suffix rather than append "../..".
  local root = dir:match("^(.*)/lua/sbx$")
  if root == nil then
    root = dir == "lua/sbx" and "." or dir .. "/../.."
  elseif root == "" then
    root = "/"
  end
  return root .. "/policies", root
end

function M.default_path()
  return (M.policy_dir()) .. "/default.lua"
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- resolve(name): absolute paths as given; relative ones against the current
-- directory, then the project root, then the policy dir.
function M.resolve(name)
  if name == nil then return M.default_path() end
  if name:sub(1, 1) == "/" then return name end
  if exists(name) then return name end
  local dir, root = M.policy_dir()
  if root and exists(root .. "/" .. name) then return root .. "/" .. name end
  if exists(dir .. "/" .. name) then return dir .. "/" .. name end
  return name
end

return M

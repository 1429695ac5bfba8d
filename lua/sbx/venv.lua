-- sbx.venv: the session venv, where `pip install X` lands so that a later
-- run's `import X` sees it (issue 17, row 1).
--
-- One venv per session at /tmp/sandbox-work/.venv (DIR), on the work dir so
-- it lasts as long as the session (and, with a pinned work_dir, sits there
-- on the host).  It is made INSIDE a run, by the first run that needs it
-- (needs()): that run is started through a small sh script (MAKE) which
-- makes the venv under a lock on the work dir and then execs the run's own
-- argv.  Host code never runs or changes the host's Python; the host only
-- looks for the marker file the script writes last (READY) to stop
-- wrapping.  Every run gets VIRTUAL_ENV and the venv's bin first on PATH
-- (env()), so `python`, `python3` and `pip` are the venv's.
--
-- How it is made: `uv venv --system-site-packages` when the sandbox has uv
-- (the host's /usr), else `python3 -m venv --system-site-packages
-- --without-pip` (60 ms; ensurepip would take seconds and 25 MB), with a
-- `pip` that runs the system's pip module in the venv (PEP 668 does not
-- apply inside a venv) or, without one, `uv pip` or ensurepip.
--
-- python_venv (an operator's venv, e.g. one holding torch) is bound
-- read-only at its own path (sbx.options adds it to read_only_paths, and
-- Engine:session_open judges it as one with request(), whether the caller
-- or a policy hook set it), its bin joins PATH
-- after the session venv's, and its site-packages is bridged into the
-- session venv with a .pth file.
local M = {}

M.WORKDIR = "/tmp/sandbox-work" -- sbx.options.SANDBOX_WORKDIR
M.DIR = M.WORKDIR .. "/.venv"
-- Relative to the work dir: the core's file calls take such paths.
M.READY = ".venv/.sbx-ready"
M.PTH = "_sbx_python_venv.pth"

-- $1: python_venv ("" for none); the rest: the run's argv.  Output only
-- on trouble (to stderr, prefixed "sbx: "); the run goes on either way.
M.MAKE = [[
v=]] .. M.DIR .. [[

h=$1
shift
mk() {
  if command -v uv >/dev/null 2>&1; then
    uv venv -q --system-site-packages --python /usr/bin/python3 "$v" || return 1
  else
    /usr/bin/python3 -m venv --system-site-packages --without-pip "$v" || return 1
  fi
  if [ ! -e "$v/bin/pip" ]; then
    if "$v/bin/python" -c 'import pip' 2>/dev/null; then
      printf '#!/bin/sh\nexec %s/bin/python -m pip "$@"\n' "$v" >"$v/bin/pip" || return 1
      chmod 755 "$v/bin/pip" || return 1
    elif command -v uv >/dev/null 2>&1; then
      printf '#!/bin/sh\nexec uv pip "$@"\n' >"$v/bin/pip" || return 1
      chmod 755 "$v/bin/pip" || return 1
    else
      "$v/bin/python" -m ensurepip --default-pip >/dev/null || return 1
    fi
  fi
  [ -e "$v/bin/pip3" ] || ln -s pip "$v/bin/pip3" || return 1
  if [ -n "$h" ]; then
    for sp in "$v"/lib/python3*/site-packages; do
      py=${sp%/site-packages}
      py=${py##*/}
      if [ -d "$h/lib/$py/site-packages" ]; then
        printf '%s\n' "$h/lib/$py/site-packages" >"$sp/]] .. M.PTH .. [[" || return 1
      else
        echo "python_venv $h has no lib/$py/site-packages: not bridged"
      fi
    done
  fi
  : >"$v/.sbx-ready"
}
if [ ! -e "$v/.sbx-ready" ]; then
  exec 9<]] .. M.WORKDIR .. [[

  flock 9 2>/dev/null
  if [ ! -e "$v/.sbx-ready" ]; then
    if out=$(mk 2>&1); then
      [ -z "$out" ] || printf 'sbx: session venv: %s\n' "$out" >&2
    else
      printf 'sbx: the session venv %s could not be made: %s\n' "$v" "$out" >&2
    fi
  fi
  exec 9<&-
fi
exec "$@"
]]

-- request(opts) -> opts, or a copy whose read_only_paths also holds
-- opts.python_venv, so that the policy's filesystem rules (forbidden
-- paths, allow_ro) judge that bind like any other.  Values of the wrong
-- type are left for sbx.options to name.
function M.request(opts)
  local pv = opts.python_venv
  if type(pv) ~= "string" or pv:sub(1, 1) ~= "/" then return opts end
  local ro = opts.read_only_paths
  if ro ~= nil and type(ro) ~= "table" then return opts end
  local copy = {}
  for k, v in pairs(opts) do copy[k] = v end
  local list, norm = {}, pv:gsub("/+$", "")
  for i, p in ipairs(ro or {}) do
    if p == pv or p == norm then return opts end
    list[i] = p
  end
  list[#list + 1] = pv
  copy.read_only_paths = list
  return copy
end

-- env(o, base_path) -> o.env with VIRTUAL_ENV and the venv's bin (then
-- python_venv's) first on PATH; base_path: the PATH the runs would get
-- otherwise (the session's env, else the policy's, else sbx's).
function M.env(o, base_path)
  local out = {}
  for k, v in pairs(o.env or {}) do out[k] = v end
  local path = M.DIR .. "/bin"
  if o.python_venv then path = path .. ":" .. o.python_venv .. "/bin" end
  out.PATH = path .. ":" .. ((o.env and o.env.PATH) or base_path)
  if out.VIRTUAL_ENV == nil then out.VIRTUAL_ENV = M.DIR end
  return out
end

-- A word of a command that means Python: python, python3.11, pip, pip3,
-- uv, uvx, or a file ending in .py.
local WORDS = { "python[%d%.]*", "pip[%d%.]*", "uvx?", "[%w_%-]+%.py" }

local function names_python(s)
  for _, w in ipairs(WORDS) do
    if s:find("%f[%w_%-.]" .. w .. "%f[^%w_%-.]") then return true end
  end
  return false
end

-- needs(argv) -> true when a run with this argv (after its interpreter:
-- script_type python is "python3 -c ...") may want the venv.  A guess by
-- design: a program that starts Python without naming it (a shell script
-- in a file) before any run that names it finds only the system python3.
function M.needs(argv)
  for _, a in ipairs(argv) do
    if names_python(a) then return true end
  end
  return false
end

-- argv(st, argv) -> the argv to start: argv itself once the venv is ready
-- (or the session has none, or the run does not need it), else argv run
-- through MAKE.  st.venv = { python_venv =, ready = }; st.core: the core
-- session (its get() looks for the READY marker).
function M.argv(st, argv)
  local v = st.venv
  if not v or v.ready or not M.needs(argv) then return argv end
  if st.core:get(M.READY, 64) then
    v.ready = true
    return argv
  end
  local out = { "/bin/sh", "-c", M.MAKE, "sbx-venv", v.python_venv or "" }
  for _, a in ipairs(argv) do out[#out + 1] = a end
  return out
end

return M

#!/usr/bin/env bash
# bootstrap-deps.sh: install the Debian packages sbx needs to build, test and
# benchmark, and only those that are missing.  Silent when nothing is missing,
# so `make` can call it every time.  Installing needs root; without it, print
# the command to run and fail.
set -euo pipefail

# "a|b": either package will do (Debian's LuaJIT or OpenResty's luajit2).
packages=(
	build-essential cmake pkg-config
	"libluajit-5.1-dev|libluajit2-5.1-dev" "luajit|luajit2"
	libseccomp-dev libcap-dev libmsgpack-dev libedit-dev libcmocka-dev
	lua-busted lua-check
	bubblewrap util-linux python3 tmux procps iproute2 coreutils
	libh2o-evloop-dev libssl-dev libjansson-dev libcurl4-openssl-dev libnghttp2-dev
	nghttp2-client curl openssl python3-h2
	python3-requests nodejs
	passt nftables
	luarocks libcap2-bin man-db
	clang clang-format "libclang-rt-14-dev|libclang-rt-dev"
	libpython3.11-testsuite
	# The session venv (python3 -m venv; its pip is the system's) and the
	# headline npm example; nodesource's nodejs provides npm itself.
	python3-venv python3-pip "npm|nodejs"
	yamllint "kubernetes-client|kubectl"
)
# --image: also what `make image` and `make e2e` need (issue 19).  runc:
# crun refuses hybrid cgroup hierarchies.
if [[ ${1:-} == --image ]]; then
	packages+=(mmdebstrap buildah podman runc haproxy)
fi

installed() {
	dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q '^install ok installed$'
}

missing=()
for entry in "${packages[@]}"; do
	IFS='|' read -r -a alternatives <<<"$entry"
	found=
	for pkg in "${alternatives[@]}"; do
		if installed "$pkg"; then
			found=1
			break
		fi
	done
	[[ -n $found ]] || missing+=("${alternatives[0]}")
done

((${#missing[@]} == 0)) && exit 0

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if ((EUID != 0)); then
	echo "bootstrap-deps: missing Debian packages: ${missing[*]}" >&2
	echo "bootstrap-deps: as root, run: apt-get update && $cmd" >&2
	exit 1
fi
echo "bootstrap-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"

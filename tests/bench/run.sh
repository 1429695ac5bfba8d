#!/usr/bin/env bash
# run.sh: the exec latency benchmark (make bench): builds the peer timer
# (sbx-bench-peer) and sbxlua in BUILD_DIR, then runs exec_latency.lua,
# which times s:exec("/bin/true") and the peers in the same run.
#
# usage: tests/bench/run.sh [BUILD_DIR] [exec_latency.lua args: -n N -w W --strict]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build}
shift || true
cmake --build "$build" -j"$(nproc)" --target sbx-bench-peer sbxlua >/dev/null
exec "$build/bin/sbxlua" tests/bench/exec_latency.lua --peer "$build/bin/sbx-bench-peer" "$@"

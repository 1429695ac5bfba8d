#!/usr/bin/env bash
# run.sh: the benchmarks (make bench): builds the peer timer
# (sbx-bench-peer) and sbxlua in BUILD_DIR, then runs exec_latency.lua,
# which times s:exec("/bin/true") and the peers in the same run,
# limits_bench.lua (issue 18: the run and open paths against their limits),
# backend_bench.lua (open/close and exec latency per backend),
# policy_overhead.lua, the policy engine's time per run, and
# remote_bench.lua, sbxd's HTTP/2 API against on-device,
# loop_bench.py, sbxd's /healthz while sessions open and hooks run,
# front_bench.lua, what sbxd's front costs (with and without it), and
# netmode_bench.lua, what per-run network modes cost,
# runallow_bench.lua, what a run's own allow-list costs, and
# sbx-proxy-bench (proxy_bench.c), the allow-list proxy against direct
# loopback and two minimal relays (splice, BPF sockmap), proxy_sbxd_bench.lua, the same proxy on sbxd's loop,
# secrets_bench.lua, an HTTPS request with and without secret substitution,
# density_bench.lua, N idle sessions' memory and processes and open + first
# exec at N live (N=500; SBX_DENSITY_N=2000 for the large run), and
# bytes_bench.lua, stdout through sbxd and put/get_bytes against head|cat
# and cp (issue 18).
#
# usage: tests/bench/run.sh [BUILD_DIR] [exec_latency.lua args: -n N -w W --strict]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-build}
shift || true
cmake --build "$build" -j"$(nproc)" --target sbx-bench-peer sbx-open-peer sbx-hop-floor sbxlua >/dev/null
"$build/bin/sbxlua" tests/bench/exec_latency.lua --peer "$build/bin/sbx-bench-peer" "$@"
# Issue 18's run and open figures next to their limits, side by side in
# alternating rounds, as ratios.
echo
"$build/bin/sbxlua" tests/bench/limits_bench.lua --peer "$build/bin/sbx-bench-peer"
# Per backend, side by side: session open+close and exec("/bin/true") latency (issue 6).
echo
"$build/bin/sbxlua" tests/bench/backend_bench.lua 2>/dev/null
# The policy engine's overhead per run with policies/default.lua (issue 4).
echo
"$build/bin/sbxlua" tests/bench/policy_overhead.lua
# Per-run network modes: same mode vs alternating, and session open per
# network ceiling (issue 5).
echo
"$build/bin/sbxlua" tests/bench/netmode_bench.lua 2>/dev/null
# A run's own allow-list: cold (first) and later runs vs plain allowlist
# runs (issue 17).
echo
"$build/bin/sbxlua" tests/bench/runallow_bench.lua 2>/dev/null
# The allow-list proxy: CONNECT setup latency and tunnel throughput vs
# direct loopback, in the same run (issue 5), and vs a minimal splice relay
# and a BPF sockmap relay (the floors, issue 18; the sockmap row needs root).
echo
cmake --build "$build" -j"$(nproc)" --target sbx-proxy-bench >/dev/null
"$build/bin/sbx-proxy-bench"
# The same proxy on sbxd's loop: throughput, sbxd's CPU per GiB and calls
# into Lua per MiB through one tunnel (issue 16).
echo
cmake --build "$build" -j"$(nproc)" --target sbxd >/dev/null
"$build/bin/sbxlua" tests/bench/proxy_sbxd_bench.lua
# Secrets (issue 20): ms per HTTPS request, spliced vs substituted.
echo
"$build/bin/sbxlua" tests/bench/secrets_bench.lua
# sbxd's loop never waits (issue 14): /healthz on a kept connection while
# 16 sessions open at once and while a policy hook runs to its deadline.
# SBXD_BEFORE=/path/to/an/older/sbxd puts that build in the same table.
echo
cmake --build "$build" -j"$(nproc)" --target sbxd >/dev/null
/usr/bin/python3 tests/bench/loop_bench.py ${SBXD_BEFORE:+--sbxd "$SBXD_BEFORE"} --sbxd "$build/bin/sbxd"
# What the front costs (issue 14): the same sbxd with and without the
# front (the hidden, loopback-only --no-front), alternating, as ratios.
echo
"$build/bin/sbxlua" tests/bench/front_bench.lua --sbxd "$build/bin/sbxd"
# Density (issue 18): N idle userns sessions after one exec each: memory
# and host processes per session, open + first exec at N live vs alone.
echo
"$build/bin/sbxlua" tests/bench/density_bench.lua
# The kernel tears the density run's 500 namespace sets down after its exit
# (kworkers; the load average read 170 at the next row's start): the byte
# rows wait until at most 3 tasks (this shell included) are runnable for 3 s
# in a row (90 s at most).
settle() {
	local quiet=0 t
	for ((t = 0; t < 90 && quiet < 3; t++)); do
		read -r _ _ _ runnable _ </proc/loadavg
		if ((${runnable%%/*} <= 3)); then quiet=$((quiet + 1)); else quiet=0; fi
		sleep 1
	done
}
settle
# The byte paths (issue 18), medians of alternating runs: stdout through
# sbxd vs head|cat and one loopback TCP hop, put/get_bytes vs cp.
echo
"$build/bin/sbxlua" tests/bench/bytes_bench.lua --sbxd "$build/bin/sbxd"
# The HTTP/2 remote API (sbxd) vs on-device, in the same run (issue 3).
echo
exec "$build/bin/sbxlua" tests/bench/remote_bench.lua --sbxd "$build/bin/sbxd"

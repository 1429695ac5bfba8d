#!/bin/sh
# run-under-load.sh: run specs again and again on a machine made busy on
# purpose, and count the failures per spec: a flaky spec shows here, not
# on a user's loaded build box.
#
#   tests/run-under-load.sh [-n RUNS] [-l LOAD] [-b BUILD] SPEC...
#
# SPEC is a path (tests/spec/reuse_spec.lua) or a name (reuse).  LOAD busy
# workers (default 4 per core) run meanwhile: stress-ng's cpu, io and
# fork stressors when Debian's stress-ng is installed, else shell loops.
# Prints "SPEC: F of N runs failed" per spec; each failing run's output
# is kept under $SBX_LOAD_LOG (default /tmp/sbx-under-load).  Exit 1 when
# any run failed.
set -eu

runs=5
load=$(($(nproc 2>/dev/null || echo 2) * 4))
build=build-test
while getopts n:l:b: o; do
	case $o in
	n) runs=$OPTARG ;;
	l) load=$OPTARG ;;
	b) build=$OPTARG ;;
	*) sed -n '6,13s/^# \{0,1\}//p' "$0"; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { sed -n '6,13s/^# \{0,1\}//p' "$0"; exit 2; }

cd "$(dirname "$0")/.."
logs=${SBX_LOAD_LOG:-/tmp/sbx-under-load}
mkdir -p "$logs"

# The load: started in its own process group, ended with it.
pids=""
stop_load() {
	for p in $pids; do kill -- "-$p" 2>/dev/null || true; done
}
trap stop_load EXIT INT TERM
if command -v stress-ng >/dev/null 2>&1; then
	setsid stress-ng --cpu "$load" --io 1 --fork 1 --timeout 0 --quiet >/dev/null 2>&1 &
	pids=$!
else
	i=0
	while [ "$i" -lt "$load" ]; do
		setsid sh -c 'while :; do :; done' >/dev/null 2>&1 &
		pids="$pids $!"
		i=$((i + 1))
	done
fi
sleep 2 # let the load build up before the first run

failed=0
for spec in "$@"; do
	case $spec in
	*/*) path=$spec ;;
	*) path=tests/spec/${spec%_spec}_spec.lua ;;
	esac
	name=$(basename "$path" .lua)
	bad=0
	n=1
	while [ "$n" -le "$runs" ]; do
		out="$logs/$name.$n.log"
		if "$build/bin/sbxlua" /usr/bin/busted "$path" >"$out" 2>&1; then
			rm -f "$out"
		else
			bad=$((bad + 1))
		fi
		n=$((n + 1))
	done
	echo "$name: $bad of $runs runs failed (load $load, $(cut -d' ' -f1 /proc/loadavg))"
	[ "$bad" -eq 0 ] || failed=1
done
exit "$failed"

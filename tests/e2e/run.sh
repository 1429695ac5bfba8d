#!/usr/bin/env bash
# tests/e2e/run.sh BUILD [SPEC...]: the end-to-end specs of issue 19 (the
# image under podman, three nodes behind haproxy), each in a network
# namespace of its own so their fixed ports are free and private.  Needs
# root (unshare, podman).  SBX_IMAGE names the image's OCI archive (make
# e2e builds it).  Ends with "e2e: P passed, F failed, S skipped" (.ci/run
# adds it to make test's line); exits 1 when a spec failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: tests/e2e/run.sh BUILD [SPEC...]}
shift
specs=("$@")
((${#specs[@]})) || specs=(tests/e2e/cluster_spec.lua tests/e2e/image_spec.lua)
passed=0 failed=0 skipped=0
for spec in "${specs[@]}"; do
	out=$(mktemp)
	# busted's TAP: "ok N - name", "not ok N - name", pending as "# SKIP".
	timeout -k 10 600 env SBX_E2E_NETNS=1 unshare --net -- sh -c \
		'ip link set lo up && exec "$0" /usr/bin/busted --output=TAP "$1"' \
		"$build/bin/sbxlua" "$spec" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	p=$(grep -cE '^ok [0-9]+' "$out" || true)
	s=$(grep -cE '^ok [0-9]+ .*# SKIP' "$out" || true)
	f=$(grep -cE '^not ok [0-9]+' "$out" || true)
	# A spec that died before reporting anything still fails.
	((rc != 0 && f == 0)) && f=1
	passed=$((passed + p - s)) skipped=$((skipped + s)) failed=$((failed + f))
	rm -f "$out"
done
echo "e2e: $passed passed, $failed failed, $skipped skipped"
((failed == 0))

#!/usr/bin/env bash
# tests/e2e/run.sh BUILD [SPEC...]: the end-to-end specs of issue 19 (the
# three-node cluster behind haproxy), each in a network namespace of its
# own so their fixed ports are free and private.  Needs root (unshare).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: tests/e2e/run.sh BUILD [SPEC...]}
shift
specs=("$@")
((${#specs[@]})) || specs=(tests/e2e/cluster_spec.lua)
for spec in "${specs[@]}"; do
	SBX_E2E_NETNS=1 unshare --net -- sh -c \
		'ip link set lo up && exec "$0" /usr/bin/busted --output=TAP "$1"' \
		"$build/bin/sbxlua" "$spec"
done

#!/usr/bin/env bash
# curl.sh: the HTTP/2 API with curl, end to end (every route).
#   build/bin/sbxd --listen 127.0.0.1:7433 --token-file tokens &
#   T=$(awk '{print $1; exit}' tokens) examples/remote/curl.sh
set -euo pipefail
U=${SBX_URL:-http://127.0.0.1:7433}
A="Authorization: Bearer ${T:?set T to a token of the token file}"
c() { curl -sS --http2-prior-knowledge -H "$A" "$@"; echo; }

curl -sS --http2-prior-knowledge "$U/healthz"
S=$(c -H 'content-type: application/json' -d '{"backend":"userns"}' "$U/v1/sessions")
echo "$S"
ID=$(sed -E 's/.*"id":"([0-9a-f]+)".*/\1/' <<<"$S")
c "$U/v1/sessions"
c "$U/v1/sessions/$ID"
c -N -H 'content-type: application/json' \
	-d '{"cmd":"for i in 1 2 3; do echo $i; sleep 1; done"}' "$U/v1/sessions/$ID/runs"
c -X PUT --data-binary 'hello' "$U/v1/sessions/$ID/files/greeting.txt"
c "$U/v1/sessions/$ID/files/greeting.txt"
c "$U/metrics" | grep -E '^sbxd_(sessions_open|runs_started_total)'
c -X DELETE "$U/v1/sessions/$ID"

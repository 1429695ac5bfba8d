#!/usr/bin/env bash
# fakenet.sh: a fake "internet" for network tests, in two network namespaces.
#
#   tests/net/fakenet.sh up NAME [STATE_DIR]     (needs root; < 2 s)
#   tests/net/fakenet.sh down NAME [STATE_DIR]   (idempotent; safe after a failed up)
#
# NAME-host  "the host": run the code under test here (`ip netns exec NAME-host ...`).
#            lo up; eth0 198.51.100.1/24 and 2001:db8:100::1/64; default routes
#            via 198.51.100.2 / 2001:db8:100::2 (pasta needs one); 203.0.113.0/24
#            via 198.51.100.2.  /etc/netns/NAME-host/resolv.conf says
#            `nameserver 198.51.100.2` (ip netns exec binds it over /etc/resolv.conf).
# NAME-inet  "the internet": eth0 198.51.100.2/24 and 2001:db8:100::2/64,
#            203.0.113.2/32 on lo; tests/net/fakenet_servers.py serves there:
#            DNS udp 198.51.100.2:53 (zone file, query log), HTTP :80 on
#            198.51.100.2, 203.0.113.2 and 2001:db8:100::2, HTTPS :443 on
#            198.51.100.2 and 203.0.113.2 (cert from a throwaway CA, SANs pypi.org,
#            files.pythonhosted.org, registry.npmjs.org, example.com, evil.test
#            and the addresses), static files for a Host from sites/HOST/
#            (package indexes: tests/net/fakeindex.py writes them),
#            UDP echo :7 and TCP echo :9 on 198.51.100.2 and 203.0.113.2.
# STATE_DIR (default /tmp/sbx-fakenet-NAME) holds: ca.pem (the CA to trust),
# zone (`name addr` lines, the test writes it; read on every query),
# dns-queries.log (`name TYPE` per query), http-access.log (`ADDR:PORT PEER
# METHOD PATH HOST` per request), sites/ (what the test serves per host name),
# servers.pid, servers.log.
# Nothing outside the two namespaces, /etc/netns/NAME-host and STATE_DIR is touched.
set -euo pipefail

usage() {
	echo "usage: $0 up|down NAME [STATE_DIR]" >&2
	exit 2
}

(($# >= 2)) || usage
cmd=$1 name=$2
[[ $name =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,40}$ ]] || { echo "fakenet: bad NAME '$name'" >&2; exit 2; }
dir=${3:-/tmp/sbx-fakenet-$name}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
hostns=$name-host inetns=$name-inet

down() {
	local pid
	if [[ -f $dir/servers.pid ]]; then
		pid=$(<"$dir/servers.pid")
		# Only if that pid is still our server (not a reused pid).
		if [[ $pid =~ ^[0-9]+$ ]] &&
			tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--ready $dir/ready"; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	# Whatever else still runs in the internet (a server started halfway).
	if [[ -e /run/netns/$inetns ]]; then
		for pid in $(ip netns pids "$inetns" 2>/dev/null); do
			kill -KILL "$pid" 2>/dev/null || true
		done
	fi
	ip netns del "$hostns" 2>/dev/null || true
	ip netns del "$inetns" 2>/dev/null || true
	rm -rf "/etc/netns/$hostns"
	rm -f "$dir"/{ca.pem,ca.key,ca.srl,server.pem,server.key,server.csr,ext.cnf} \
		"$dir"/{zone,zone.new,dns-queries.log,http-access.log,servers.pid,servers.log,ready,ready.tmp}
	rm -rf "$dir/sites"
	rmdir "$dir" 2>/dev/null || true
}

certs() {
	# EC keys: a throwaway CA and one server cert, generated in ~30 ms.
	openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout "$dir/ca.key" -out "$dir/ca.pem" -days 2 -subj "/CN=sbx fakenet CA $name" \
		2>/dev/null
	openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
		-keyout "$dir/server.key" -out "$dir/server.csr" -subj "/CN=fakenet" 2>/dev/null
	cat >"$dir/ext.cnf" <<-EOF
		subjectAltName=DNS:pypi.org,DNS:files.pythonhosted.org,DNS:registry.npmjs.org,DNS:example.com,DNS:evil.test,DNS:*.evil.test,IP:198.51.100.2,IP:203.0.113.2
		basicConstraints=CA:FALSE
		extendedKeyUsage=serverAuth
	EOF
	openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
		-CAcreateserial -out "$dir/server.pem" -days 2 -extfile "$dir/ext.cnf" 2>/dev/null
}

up() {
	down
	mkdir -p "$dir"
	trap 'echo "fakenet: up $name failed" >&2; down' ERR
	trap 'echo "fakenet: up $name interrupted" >&2; down; exit 130' INT TERM
	certs &
	local certs_pid=$!

	ip netns add "$hostns"
	ip netns add "$inetns"
	# No duplicate address detection: a tentative link-local address delays
	# the first IPv6 neighbour exchange by a second.
	for ns in "$hostns" "$inetns"; do
		ip netns exec "$ns" sh -c 'echo 0 >/proc/sys/net/ipv6/conf/default/accept_dad'
	done
	ip -n "$hostns" link add eth0 type veth peer name eth0 netns "$inetns"
	ip -n "$hostns" link set lo up
	ip -n "$inetns" link set lo up
	ip -n "$hostns" addr add 198.51.100.1/24 dev eth0
	ip -n "$inetns" addr add 198.51.100.2/24 dev eth0
	ip -n "$hostns" addr add 2001:db8:100::1/64 dev eth0 nodad
	ip -n "$inetns" addr add 2001:db8:100::2/64 dev eth0 nodad
	ip -n "$inetns" addr add 203.0.113.2/32 dev lo
	ip -n "$hostns" link set eth0 up
	ip -n "$inetns" link set eth0 up
	# Static IPv6 neighbours: just after link up, the first neighbour
	# discovery is lost and a connect waits a second for its SYN retry.
	local mac_host mac_inet
	mac_host=$(ip netns exec "$hostns" cat /sys/class/net/eth0/address)
	mac_inet=$(ip netns exec "$inetns" cat /sys/class/net/eth0/address)
	ip -n "$hostns" -6 neigh replace 2001:db8:100::2 lladdr "$mac_inet" dev eth0 nud permanent
	ip -n "$inetns" -6 neigh replace 2001:db8:100::1 lladdr "$mac_host" dev eth0 nud permanent
	ip -n "$hostns" route add default via 198.51.100.2
	ip -n "$hostns" route add 203.0.113.0/24 via 198.51.100.2
	ip -n "$hostns" -6 route add default via 2001:db8:100::2

	mkdir -p "/etc/netns/$hostns"
	echo "nameserver 198.51.100.2" >"/etc/netns/$hostns/resolv.conf"
	: >"$dir/zone"
	: >"$dir/dns-queries.log"
	: >"$dir/http-access.log"
	mkdir -p "$dir/sites"
	wait "$certs_pid"

	ip netns exec "$inetns" setsid /usr/bin/python3 "$here/fakenet_servers.py" \
		--dns 198.51.100.2 \
		--http 198.51.100.2 --http 203.0.113.2 --http 2001:db8:100::2 \
		--https 198.51.100.2 --https 203.0.113.2 \
		--echo 198.51.100.2 --echo 203.0.113.2 \
		--zone "$dir/zone" --query-log "$dir/dns-queries.log" \
		--access-log "$dir/http-access.log" \
		--cert "$dir/server.pem" --key "$dir/server.key" --ready "$dir/ready" --sites "$dir/sites" \
		</dev/null >"$dir/servers.log" 2>&1 &
	echo $! >"$dir/servers.pid"
	local i
	for ((i = 0; i < 300; i++)); do
		[[ -f $dir/ready ]] && break
		if ! kill -0 "$(<"$dir/servers.pid")" 2>/dev/null; then
			echo "fakenet: servers died:" >&2
			cat "$dir/servers.log" >&2
			false
		fi
		sleep 0.01
	done
	[[ -f $dir/ready ]] || { echo "fakenet: servers not ready after 3 s" >&2; false; }
	trap - ERR INT TERM
	echo "$dir"
}

case $cmd in
up) up ;;
down) down ;;
*) usage ;;
esac

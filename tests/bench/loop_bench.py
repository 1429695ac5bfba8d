#!/usr/bin/python3
"""loop_bench.py: does sbxd's event loop wait? (issue 14, item 4)

/healthz latency on one kept HTTP/2 connection, probed every 5 ms (each
counted from when it was due), while
  1. nothing else happens (baseline);
  2. 16 sessions open at once (16 connections, one POST /v1/sessions each;
     three rounds);
  3. ten 8 MiB file uploads (PUT) go one after the other;
  4. a policy hook runs to its deadline (on_session_open spinning, for a
     session named "slow-hook", until limits.hook_ms = 2000 stops it; 3 such
     opens one after the other).
Each sbxd given (--sbxd, repeatable: e.g. main's build and this one) is
measured in the same run; the table shows p50/p99/max in ms and how many
probes were due during the scenario.

usage: /usr/bin/python3 tests/bench/loop_bench.py --sbxd PATH [--sbxd PATH2]
(needs python3-h2: Debian's /usr/bin/python3)
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import h2.config
import h2.connection
import h2.events

HOOK_POLICY = """
return {
  name = "loop-bench",
  limits = { hook_ms = 2000, hook_instructions = 50000000 },
  on_session_open = function(req, ctx)
    if req.name == "slow-hook" then
      local s = ("x"):rep(200000)
      while true do s:find("y", 1, true) end
    end
    return true
  end,
}
"""

TOKENS = {"fast": "tok-fast-loopbench-0123456789abcdef",
          "slow": "tok-slow-loopbench-0123456789abcdef"}


class H2:
    """One kept h2c connection; request() sends and waits for the answer."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.authority = "%s:%d" % (host, port)

    def request(self, method, path, token=None, body=b""):
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", method), (":path", path), (":scheme", "http"),
                   (":authority", self.authority)]
        if token:
            headers.append(("authorization", "Bearer " + token))
        if body:
            headers.append(("content-type", "application/json"))
        self.conn.send_headers(sid, headers, end_stream=not body)
        self.sock.sendall(self.conn.data_to_send())
        status, data, events = None, b"", []
        sent = 0
        while sent < len(body):
            # Within the peer's flow-control window; wait for it to open.
            n = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size,
                    len(body) - sent)
            if n > 0:
                self.conn.send_data(sid, body[sent:sent + n], end_stream=sent + n == len(body))
                sent += n
                self.sock.sendall(self.conn.data_to_send())
                continue
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            events += self.conn.receive_data(chunk)
            self.sock.sendall(self.conn.data_to_send())
        while True:
            if events:
                pending, events = events, []
            else:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise RuntimeError("connection closed")
                pending = self.conn.receive_data(chunk)
            for ev in pending:
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                    status = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                    data += ev.data
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, sid)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    self.sock.sendall(self.conn.data_to_send())
                    return status, data
            self.sock.sendall(self.conn.data_to_send())

    def close(self):
        self.sock.close()


def start_sbxd(path, policy, tmp):
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        for tenant, tok in TOKENS.items():
            f.write("%s %s\n" % (tok, tenant))
    p = subprocess.Popen([path, "--listen", "127.0.0.1:0", "--token-file", tokens,
                          "--policy", policy, "--max-sessions", "64", "--log-level", "error"],
                         stdout=subprocess.PIPE, stderr=open(os.path.join(tmp, "log"), "w"),
                         text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        raise RuntimeError("sbxd did not start: " + line)
    url = line.split("listening on", 1)[1].split()[0]
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return p, host, int(port)


PACE_S = 0.005


def probe(host, port, stop):
    """/healthz every PACE_S on one kept connection until stop is set.  Each
    latency counts from when the probe was due, not from when it could be
    sent: a loop stalled for 2 s shows as 2 s worth of late probes (~400),
    not as one slow sample among thousands (coordinated omission)."""
    c = H2(host, port)
    lat = []
    due = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now < due:
            time.sleep(due - now)
        status, _ = c.request("GET", "/healthz")
        if status != 200:
            raise RuntimeError("healthz %s" % status)
        lat.append((time.monotonic() - due) * 1000)
        due += PACE_S
    c.close()
    return lat


def measure(host, port, load):
    stop = threading.Event()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("lat", probe(host, port, stop)))
    t.start()
    time.sleep(0.2)
    try:
        load()
    finally:
        time.sleep(0.1)
        stop.set()
        t.join()
    lat = sorted(out.get("lat", [0.0]))
    q = lambda p: lat[min(len(lat) - 1, int(len(lat) * p))]
    return q(0.5), q(0.99), lat[-1], len(lat)


def open_sessions(host, port, n, tenant):
    ids, lock = [], threading.Lock()

    def one():
        # A thread's exception would vanish: say what became of each open.
        try:
            c = H2(host, port)
            status, body = c.request("POST", "/v1/sessions", TOKENS[tenant], b"{}")
            c.close()
        except Exception as e:  # noqa: BLE001 - reported, not swallowed
            print("open failed: %r" % (e,), file=sys.stderr)
            return
        if status != 201:
            print("open answered %s: %s" % (status, body[:200]), file=sys.stderr)
            return
        with lock:
            ids.append(body.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode())
    ts = [threading.Thread(target=one) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return ids


def close_sessions(host, port, ids, tenant):
    c = H2(host, port)
    for i in ids:
        c.request("DELETE", "/v1/sessions/" + i, TOKENS[tenant])
    c.close()


def bench(path, rows):
    tmp = tempfile.mkdtemp(prefix="sbx-loop-bench.")
    policy = os.path.join(tmp, "policy.lua")
    with open(policy, "w") as f:
        f.write(HOOK_POLICY)
    p, host, port = start_sbxd(path, policy, tmp)
    try:
        rows.append((path, "idle (1 s)") + measure(host, port, lambda: time.sleep(1)))
        for rnd in range(3):
            opened = {}

            def sixteen():
                opened["ids"] = open_sessions(host, port, 16, "fast")
            rows.append((path, "16 session opens at once #%d" % (rnd + 1)) +
                        measure(host, port, sixteen))
            if len(opened.get("ids", [])) != 16:
                print("warning: %d of 16 sessions opened" % len(opened.get("ids", [])),
                      file=sys.stderr)
            close_sessions(host, port, opened.get("ids", []), "fast")

        sid = open_sessions(host, port, 1, "fast")[0]
        body = os.urandom(8 << 20)

        def puts():
            c = H2(host, port)
            for i in range(10):
                status, _ = c.request("PUT", "/v1/sessions/%s/files/f%d" % (sid, i),
                                      TOKENS["fast"], body)
                if status != 200:
                    print("warning: a PUT answered %s" % status, file=sys.stderr)
            c.close()
        rows.append((path, "8 MiB PUTs back to back x10") + measure(host, port, puts))
        close_sessions(host, port, [sid], "fast")

        def stuck_hooks():
            for _ in range(3):
                c = H2(host, port)
                status, _ = c.request("POST", "/v1/sessions", TOKENS["slow"],
                                      b'{"name":"slow-hook"}')
                c.close()
                if status != 403:
                    print("warning: a stuck hook's open answered %s" % status, file=sys.stderr)
        rows.append((path, "hook to its 2 s deadline x3") + measure(host, port, stuck_hooks))
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sbxd", action="append", required=True)
    a = ap.parse_args()
    rows = []
    for path in a.sbxd:
        bench(path, rows)
    print("sbxd /healthz on a kept connection (ms)")
    print("%-40s %-30s %8s %8s %8s %7s" % ("sbxd", "while", "p50", "p99", "max", "probes"))
    for r in rows:
        print("%-40s %-30s %8.2f %8.2f %8.2f %7d" % r)


if __name__ == "__main__":
    main()

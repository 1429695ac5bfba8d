#!/usr/bin/python3
"""guard_probe.py: drive sbxd's front guard over h2c, TLS or a unix socket
(python3-h2 for the client side, raw hyperframe frames where the client
must break its own state machine).  One line of JSON out.

usage: guard_probe.py URL TOKEN SCENARIO [ARG]
  URL: http://127.0.0.1:PORT, https://127.0.0.1:PORT (certificate not
  checked), unix:/path

SCENARIO:
  early     POST /v1/sessions with TOKEN ("-": none), headers only, the
            body left open: the status if one came within 2 s, or null;
            then (answered or not) 1 MiB of raw DATA on that stream, the
            status of a GET /healthz after it and (ARG: a good token)
            sbxd_request_body_held_bytes from /metrics, all on the same
            connection.
  put-cl    PUT ARG (a path) with content-length 200000, headers only:
            status and retry-after within 2 s.
  put-data  PUT ARG without content-length, 16 KiB DATA frames until an
            answer (at most 1 MiB): status, retry-after, bytes sent.
  ping      ARG PINGs back to back (default 1000): GOAWAY code and how
            long after the last ping the connection closed.
  upgrade-ping   (http:// only) GET /healthz with Upgrade: h2c; after the
            101, the preface and ARG PINGs: the status line, the GOAWAY
            code (null: none) and whether the connection closed.
  late-upgrade   (http:// only) a plain GET /healthz, then on the same
            connection a second one with Upgrade: h2c and a preface:
            the first status line, and what came back for the second.
  slow-read (http:// only) ARG "SID:BYTES[:flood]": a client with a tiny
            receive buffer and the largest flow-control windows runs
            `yes | head -c BYTES` in session SID and, once the answer's
            HEADERS came, does not read for 1.5 s (the front's writes to it stop short; with "flood" it
            then sends 1000 PINGs, so the guard must close with a GOAWAY
            while h2o's frames are still queued), then reads to the end:
            status, stdout bytes in the events, whether the stream
            ended, the GOAWAY code, and whether any frame was malformed.
"""
import json
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import hyperframe.frame


def connect(url, rcvbuf=None):
    if url.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(url[5:])
        return s, "localhost"
    tls = url.startswith("https://")
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    if rcvbuf:  # set before connect: it bounds the window the peer sees
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(5)
        s.connect((host, int(port)))
    else:
        s = socket.create_connection((host, int(port)), timeout=5)
    if tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        s = ctx.wrap_socket(s, server_hostname=host)
    return s, host


class Client:
    def __init__(self, url, rcvbuf=None):
        self.sock, self.host = connect(url, rcvbuf)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.flush()
        self.responses = {}
        self.bodies = {}
        self.ended = set()
        self.closed = None  # GOAWAY error code, or "eof"
        self.closed_at = None
        self.proto_error = False

    def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def headers(self, method, path, token, end_stream, extra=()):
        sid = self.h2.get_next_available_stream_id()
        hs = [(":method", method), (":scheme", "http"), (":path", path), (":authority", self.host)]
        if token != "-":
            hs.append(("authorization", "Bearer " + token))
        hs.extend(extra)
        self.h2.send_headers(sid, hs, end_stream=end_stream)
        self.flush()
        return sid

    def pump(self, until, timeout):
        """Read events until until() or timeout; False on timeout."""
        end = time.monotonic() + timeout
        while not until():
            left = end - time.monotonic()
            if left <= 0 or self.closed_at is not None:
                return until()
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return until()
            except (ConnectionError, ssl.SSLError):
                data = b""
            if not data:
                self.closed = self.closed if self.closed is not None else "eof"
                self.closed_at = time.monotonic()
                return until()
            try:
                events = self.h2.receive_data(data)
            except h2.exceptions.ProtocolError:
                self.proto_error = True
                events = []
            for ev in events:
                if isinstance(ev, h2.events.ResponseReceived):
                    self.responses[ev.stream_id] = dict(ev.headers)
                elif isinstance(ev, h2.events.DataReceived):
                    self.bodies[ev.stream_id] = self.bodies.get(ev.stream_id, b"") + ev.data
                    self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    self.ended.add(ev.stream_id)
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    self.closed = ev.error_code
            try:
                self.flush()
            except OSError:
                pass
        return True

    def status(self, sid):
        r = self.responses.get(sid)
        return int(r[b":status"]) if r else None

    def raw_data(self, sid, total):
        """DATA frames past h2's own state (the stream may be reset)."""
        chunk = b"x" * 16384
        sent = 0
        while sent < total:
            self.sock.sendall(hyperframe.frame.DataFrame(sid, data=chunk).serialize())
            sent += len(chunk)
        return sent


UPGRADE = (b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade, HTTP2-Settings\r\n"
           b"Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n")
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def read_all(s, seconds):
    """Bytes until EOF or seconds; (bytes, closed)."""
    end = time.monotonic() + seconds
    out = b""
    while time.monotonic() < end:
        s.settimeout(max(0.01, end - time.monotonic()))
        try:
            d = s.recv(65536)
        except socket.timeout:
            return out, False
        except ConnectionError:
            return out, True
        if not d:
            return out, True
        out += d
    return out, False


def goaway_code(data):
    """The error code of the first GOAWAY among the HTTP/2 frames in data."""
    i = 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i:i + 3], "big")
        if data[i + 3] == 7 and i + 17 <= len(data):
            return int.from_bytes(data[i + 13:i + 17], "big")
        i += 9 + n
    return None


def raw(url, scenario, arg, out):
    s, _ = connect(url)
    if scenario == "upgrade-ping":
        s.sendall(UPGRADE)
        head, _ = read_all(s, 0.5)
        out["status"] = head.split(b"\r\n", 1)[0].decode()
        frames = hyperframe.frame.SettingsFrame(0).serialize()
        frames += b"".join(hyperframe.frame.PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize()
                           for i in range(int(arg or 1000)))
        try:
            s.sendall(PREFACE + frames)
        except OSError:
            pass
        rest, closed = read_all(s, 3.0)
        data = (head + rest).split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in head + rest else b""
        out["goaway"] = goaway_code(data)
        out["closed"] = closed
    elif scenario == "late-upgrade":
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        first, _ = read_all(s, 0.5)
        out["first"] = first.split(b"\r\n", 1)[0].decode()
        s.sendall(UPGRADE + PREFACE)
        second, closed = read_all(s, 3.0)
        out["second"] = second.decode(errors="replace")
        out["closed"] = closed
    print(json.dumps(out))


def main():
    url, token, scenario = sys.argv[1], sys.argv[2], sys.argv[3]
    arg = sys.argv[4] if len(sys.argv) > 4 else None
    if scenario in ("upgrade-ping", "late-upgrade"):
        return raw(url, scenario, arg, {"scenario": scenario})
    c = Client(url, 4096 if scenario == "slow-read" else None)
    out = {"scenario": scenario}
    if scenario == "early":
        sid = c.headers("POST", "/v1/sessions", token, False, [("content-type", "application/json")])
        t0 = time.monotonic()
        c.pump(lambda: c.status(sid) is not None, 2.0)
        out["status"] = c.status(sid)
        out["ms"] = round((time.monotonic() - t0) * 1000)
        out["sent"] = c.raw_data(sid, 1 << 20)
        sid2 = c.headers("GET", "/healthz", token, True)
        c.pump(lambda: c.status(sid2) is not None, 5.0)
        out["after"] = c.status(sid2)
        if arg:  # what h2o holds now, read on this connection
            sid3 = c.headers("GET", "/metrics", arg, True)
            c.pump(lambda: sid3 in c.ended, 5.0)
            for line in c.bodies.get(sid3, b"").decode().splitlines():
                if line.startswith("sbxd_request_body_held_bytes "):
                    out["held"] = int(line.split()[1])
    elif scenario in ("put-cl", "put-data"):
        extra = [("content-type", "application/octet-stream")]
        if scenario == "put-cl":
            extra.append(("content-length", "200000"))
        sid = c.headers("PUT", arg, token, False, extra)
        sent = 0
        if scenario == "put-data":
            while sent < (1 << 20) and c.status(sid) is None and c.closed_at is None:
                sent += c.raw_data(sid, 16384)
                c.pump(lambda: c.status(sid) is not None, 0.05)
        c.pump(lambda: c.status(sid) is not None, 2.0)
        r = c.responses.get(sid, {})
        out["status"] = c.status(sid)
        out["retry_after"] = r.get(b"retry-after", b"").decode() or None
        out["sent"] = sent
    elif scenario == "ping":
        n = int(arg or 1000)
        for i in range(n):
            try:
                c.h2.ping(i.to_bytes(8, "big"))
                c.flush()
            except (OSError, h2.exceptions.ProtocolError):
                break
        t0 = time.monotonic()
        c.pump(lambda: c.closed_at is not None, 5.0)
        out["goaway"] = c.closed
        out["close_ms"] = round((c.closed_at - t0) * 1000) if c.closed_at else None
    elif scenario == "slow-read":
        slow_read(c, token, arg, out)
    print(json.dumps(out))


def slow_read(c, token, arg, out):
    sess, nbytes, *flood = arg.split(":")
    # h2o may send it all at once: only the client's socket holds it back
    c.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
    c.h2.increment_flow_control_window(2**31 - 1 - 65535)
    c.flush()
    st = c.headers("POST", "/v1/sessions/%s/runs" % sess, token, False,
                   [("content-type", "application/json")])
    c.h2.send_data(st, json.dumps({"cmd": "yes | head -c %d" % int(nbytes)}).encode(),
                   end_stream=True)
    c.flush()
    c.pump(lambda: c.status(st) is not None, 30.0)  # the run started...
    time.sleep(1.5)  # ...and its output piles up while the client reads nothing
    if flood:
        for i in range(1000):
            c.sock.sendall(hyperframe.frame.PingFrame(0, opaque_data=i.to_bytes(8, "big")).serialize())
    c.pump(lambda: st in c.ended or c.closed_at is not None, 60.0)
    if flood:  # after the GOAWAY: read to EOF
        c.pump(lambda: c.closed_at is not None, 10.0)
    n = 0
    for line in c.bodies.get(st, b"").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("type") == "stdout":
            n += len(ev.get("data", ""))
    out.update(status=c.status(st), stdout=n, ended=st in c.ended, proto_error=c.proto_error,
               goaway=c.closed if c.closed != "eof" else None)


if __name__ == "__main__":
    main()

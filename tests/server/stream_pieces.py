"""stream_pieces.py: how sbxd reads output written while a chunk is in flight.

  python3 stream_pieces.py PORT TOKEN SESSION msgpack|ndjson

Runs a command in SESSION whose output stream is held: the request's
stream window is 64 bytes, so the first event (600 bytes) cannot be sent
whole.  Once its first bytes came (it is in flight), the client creates
the file `go` through a second connection; the command then writes 20
x's 10 times, 10 ms apart, and creates the file `written`.  A second connection polls for that file;
once it exists the window opens and the rest of the stream is read.  Prints
one line of JSON: how many stdout events came, how many of them carried
the x's and how many x's came (200 when nothing was lost), the HTTP status and whether the exit
event came.  sbxd reads a run's output only when nothing is in flight, so
the x's, all in the pipe by then, come in one event.
"""
import json
import re
import socket
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from h2client import Client  # noqa: E402

CMD = ("rm -f go written; printf '%0600d' 0; while [ ! -e go ]; do sleep 0.01; done;"
       " i=0; while [ $i -lt 10 ]; do printf %020d 0 | tr 0 x; sleep 0.01; i=$((i+1)); done; : > written")
HOLD_WINDOW = 64
DEADLINE_S = 60


def stdout_pieces(body, fmt):
    """The data of each stdout event, in order."""
    if fmt == "ndjson":
        out = []
        for line in body.splitlines():
            ev = json.loads(line)
            if ev.get("type") == "stdout":
                out.append(ev["data"].encode())
        return out
    # msgpack: sbxd writes a stdout event as fixmap(2) "type" "stdout" "data" bin32
    head = b"\x82\xa4type\xa6stdout\xa4data\xc6"
    out, at = [], 0
    while True:
        at = body.find(head, at)
        if at < 0:
            return out
        n = int.from_bytes(body[at + len(head):at + len(head) + 4], "big")
        start = at + len(head) + 4
        out.append(body[start:start + n])
        at = start + n


class Stream:
    """The run's response on stream st: its status, DATA and end."""

    def __init__(self, s, c, st):
        self.s, self.c, self.st = s, c, st
        self.status, self.chunks, self.ended = None, [], False

    def read(self, until, ack):
        """Read until until() holds; ack: give the window back for what came."""
        while not until():
            data = self.s.recv(1 << 16)
            if not data:
                raise SystemExit("connection closed")
            for ev in self.c.receive_data(data):
                if getattr(ev, "stream_id", self.st) != self.st:
                    continue
                if isinstance(ev, h2.events.ResponseReceived):
                    self.status = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    if ack:
                        self.c.acknowledge_received_data(ev.flow_controlled_length, self.st)
                    self.chunks.append(ev.data)
                elif isinstance(ev, h2.events.StreamEnded):
                    self.ended = True
                elif isinstance(ev, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                    raise SystemExit("stream ended early: %r" % ev)
            self.s.sendall(self.c.data_to_send())


def main():
    port, token, sid, fmt = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    auth = ("authorization", "Bearer " + token)
    accept = "application/msgpack" if fmt == "msgpack" else "application/x-ndjson"
    s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
    c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    c.initiate_connection()
    c.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: HOLD_WINDOW})
    st = c.get_next_available_stream_id()
    body = json.dumps({"cmd": CMD}).encode()
    c.send_headers(st, [(":method", "POST"), (":scheme", "http"), (":path", "/v1/sessions/%s/runs" % sid),
                        (":authority", "127.0.0.1:%d" % port), auth, ("accept", accept),
                        ("content-type", "application/json")])
    c.send_data(st, body, end_stream=True)
    s.sendall(c.data_to_send())

    # The first event is in flight (held) once its first bytes came: then
    # the command may write the x's (`go`, from a second connection).
    got = Stream(s, c, st)
    got.read(lambda: got.chunks, ack=False)
    poll = Client("127.0.0.1", port, timeout=DEADLINE_S)
    if poll.request("PUT", "/v1/sessions/%s/files/go" % sid, headers=[auth], body=b"")[0] != 200:
        raise SystemExit("PUT go failed")
    # The command's writes are done when `written` exists.
    t0 = time.monotonic()
    while poll.request("GET", "/v1/sessions/%s/files/written" % sid, headers=[auth])[0] != 200:
        if time.monotonic() - t0 > DEADLINE_S:
            raise SystemExit("the command never created `written`")
        time.sleep(0.02)
    poll.close()

    c.increment_flow_control_window(1 << 24, stream_id=st)
    c.increment_flow_control_window(1 << 24)
    s.sendall(c.data_to_send())
    got.read(lambda: got.ended, ack=True)
    status, chunks = got.status, got.chunks
    s.close()
    raw = b"".join(chunks)
    pieces = [p for p in stdout_pieces(raw, fmt) if b"x" in p]
    if "-v" in sys.argv:
        print([len(p) for p in stdout_pieces(raw, fmt)], file=sys.stderr)
    print(json.dumps({"status": status, "events": len(stdout_pieces(raw, fmt)), "x_events": len(pieces),
                      "x_bytes": sum(len(re.findall(b"x", p)) for p in pieces),
                      "exit": b"exit" in raw}))


if __name__ == "__main__":
    main()

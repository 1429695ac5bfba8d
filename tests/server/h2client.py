"""h2client.py: a small blocking HTTP/2 client (Debian's python3-h2) for measuring sbxd.

  c = Client("127.0.0.1", port)               # h2c with prior knowledge
  status, body = c.request("GET", "/healthz")  # raises on a timeout, reset or closed connection
  c.close()
"""
import json
import socket

import h2.config
import h2.connection
import h2.events


class Failed(Exception):
    pass


class Client:
    def __init__(self, host, port, timeout=5.0):
        self.authority = "%s:%d" % (host, port)
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(1 << 24)
        self.s.sendall(self.h2.data_to_send())

    def request(self, method, path, headers=(), body=None):
        sid = self.h2.get_next_available_stream_id()
        hdrs = [(":method", method), (":scheme", "http"), (":path", path), (":authority", self.authority)]
        hdrs += list(headers)
        self.h2.send_headers(sid, hdrs, end_stream=body is None)
        if body is not None:
            self.h2.send_data(sid, body, end_stream=True)
        self.s.sendall(self.h2.data_to_send())
        status, chunks = None, []
        while True:
            try:
                data = self.s.recv(1 << 16)
            except socket.timeout:
                raise Failed("timeout")
            if not data:
                raise Failed("connection closed")
            for ev in self.h2.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                    status = int(dict(ev.headers)[b":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    if ev.stream_id == sid:
                        chunks.append(ev.data)
                elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                    raise Failed("stream reset (%s)" % ev.error_code)
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    raise Failed("GOAWAY (%s)" % ev.error_code)
                elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                    self.s.sendall(self.h2.data_to_send())
                    return status, b"".join(chunks)
            self.s.sendall(self.h2.data_to_send())

    def run(self, token, session, argv):
        """A run to its end: True when its events end in exit with returncode 0."""
        status, body = self.request("POST", "/v1/sessions/%s/runs" % session,
                                    [("authorization", "Bearer " + token), ("content-type", "application/json")],
                                    json.dumps({"cmd": argv}).encode())
        if status != 200:
            raise Failed("run: HTTP %s" % status)
        last = json.loads(body.strip().split(b"\n")[-1])
        if last.get("type") != "exit" or last.get("returncode") != 0:
            raise Failed("run ended with %s" % last)
        return True

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

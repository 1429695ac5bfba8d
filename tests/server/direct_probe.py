#!/usr/bin/python3
"""direct_probe.py: h2o's output on the direct path (src/server/front_direct.c).

  python3 direct_probe.py URL TOKEN SCENARIO ARG

  runs SESSION:N:BYTES   N runs in turn on one connection, each printing the
                         first BYTES of `seq`; every byte must come, in order
  order SESSION:BYTES    one such run to a client with a 4 KiB receive buffer
                         and HTTP/2 windows wide open, that reads nothing for
                         a second (h2o's output backs up into the socketpair),
                         then reads it all; then a second run of 1000 bytes
                         on the same connection
  idle SESSION           one run, then nothing: how the connection ends

Prints one line of JSON.  Runs go to POST /v1/sessions/SESSION/runs (ndjson
events).
"""
import json
import sys
import time

import h2.settings

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from guard_probe import Client  # noqa: E402


def expected(nbytes):
    out, i, n = [], 1, 0
    while n < nbytes:
        s = "%d\n" % i
        out.append(s)
        n += len(s)
        i += 1
    return "".join(out)[:nbytes]


def run(c, token, sess, nbytes, before_reading=None):
    """One run's (status, stdout text, ended)."""
    st = c.headers("POST", "/v1/sessions/%s/runs" % sess, token, False,
                   [("content-type", "application/json")])
    cmd = "seq 1 %d | head -c %d" % (nbytes, nbytes)
    c.h2.send_data(st, json.dumps({"cmd": cmd}).encode(), end_stream=True)
    c.flush()
    if before_reading:
        before_reading()
    c.pump(lambda: st in c.ended or c.closed_at is not None, 60.0)
    text = []
    for line in c.bodies.get(st, b"").splitlines():
        ev = json.loads(line)
        if ev.get("type") == "stdout":
            text.append(ev["data"])
    return c.status(st), "".join(text), st in c.ended


def main():
    url, token, scenario, arg = sys.argv[1:5]
    out = {"scenario": scenario}
    if scenario == "runs":
        sess, n, nbytes = arg.split(":")
        c = Client(url)
        statuses, out["match"] = [], True
        for _ in range(int(n)):
            status, text, ended = run(c, token, sess, int(nbytes))
            statuses.append(str(status))
            out["match"] = out["match"] and ended and text == expected(int(nbytes))
        out["statuses"] = " ".join(statuses)
    elif scenario == "order":
        sess, nbytes = arg.split(":")
        c = Client(url, rcvbuf=4096)
        # HTTP/2's windows wide open: only the client's socket holds h2o back
        c.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
        c.h2.increment_flow_control_window(2**31 - 1 - 65535)
        c.flush()
        status, text, ended = run(c, token, sess, int(nbytes), lambda: time.sleep(1.0))
        out.update(status=status, bytes=len(text), ended=ended,
                   match=text == expected(int(nbytes)))
        status, text, ended = run(c, token, sess, 1000)
        out.update(status2=status, match2=ended and text == expected(1000))
    elif scenario == "idle":
        c = Client(url)
        status, text, ended = run(c, token, arg, 10)
        t0 = time.monotonic()
        c.pump(lambda: c.closed_at is not None, 10.0)
        out.update(status=status, goaway=c.closed if c.closed != "eof" else None,
                   closed_after_s=round(c.closed_at - t0, 1) if c.closed_at else None)
    print(json.dumps(out))


if __name__ == "__main__":
    main()

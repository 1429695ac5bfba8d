#!/usr/bin/python3
"""abuse.py: `make abuse`: each HTTP/2 attack class against a fresh real sbxd, measured.

usage: /usr/bin/python3 tests/server/abuse.py [--sbxd build/bin/sbxd] [--seconds 20] [--only a,b]

For each class (tests/server/h2attack.py): start sbxd on 127.0.0.1:0 with a token
file of two tenants (alice attacks where a class needs a token, bob measures),
measure bob for --baseline s, then run the attack for --seconds while bob keeps
measuring: /healthz on one kept connection (every 20 ms) and on a new connection
each time (every 100 ms), and a real run (`/bin/true`) on a kept connection
(every 50 ms); sbxd's VmRSS is sampled every 50 ms.  One table row per class;
exit status 1 when a bound of issue 14 is broken:

  RSS growth <= 64 MiB, /healthz p95 <= 50 ms (kept and new) with no failure,
  run p95 <= 3x its baseline, the abusive connection closed (GOAWAY or close)
  within 1 s of crossing a budget, sbxd up and serving afterwards.

Crossing (h2attack.py) is the first abusive frame unless the class's budget is a
timeout or a count of connections; those come from --header-timeout-s and
--per-source (sbxd's defaults for --header-timeout-s and --max-conns-per-addr).
sbxd runs under RLIMIT_NOFILE --nofile (1024), 512 for fd-exhaustion.
"""
import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h2client import Client, Failed  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ATTACK = os.path.join(ROOT, "tests", "server", "h2attack.py")
TOKENS = {"alice": "tok-alice-abuse-0123456789abcdef", "bob": "tok-bob-abuse-0123456789abcdef"}

BOUNDS = {"rss_mib": 64, "healthz_p95_ms": 50, "run_x": 3.0, "close_ms": 1000}


def classes(a):
    """class -> (h2attack.py arguments, what a pass needs: 'close' = the abusive
    connection must be closed, None = no close expected (refused per request))."""
    ht = ["--cross-after", str(a.header_timeout_s)]
    return {
        "hpack-bomb": ([], "close"),
        "body-hold": (["--size", str(a.max_body)], None),
        "header-flood": ([], "close"),
        "rapid-reset": (["--token", "@alice", "--session", "@alice"], "close"),
        "continuation": (["--conns", "4"], "close"),
        "zero-length": ([], "close"),
        "empty-data": (["--token", "@alice", "--session", "@alice"], "close"),
        "priority": ([], "close"),
        "settings": ([], "close"),
        "ping": ([], "close"),
        "window-update": ([], "close"),
        "slowloris-preface": (["--part", "preface"] + ht, "close"),
        "slowloris-headers": (["--part", "headers"] + ht, "close"),
        # from 127.0.0.2: bob (127.0.0.1) is another source
        "conn-flood": (["--conns", str(a.per_source + 64), "--cross-count", str(a.per_source),
                        "--source", "127.0.0.2"], "close"),
        "fd-exhaustion": (["--conns", "700", "--sources", "20"], None),
    }


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


class Sbxd:
    def __init__(self, path, nofile=None, extra=()):
        self.dir = tempfile.mkdtemp(prefix="sbxd-abuse.")
        with open(os.path.join(self.dir, "tokens"), "w") as f:
            for tenant, tok in TOKENS.items():
                f.write("%s %s\n" % (tok, tenant))
        args = [path, "--listen", "127.0.0.1:0", "--token-file", os.path.join(self.dir, "tokens"),
                "--policy", os.path.join(ROOT, "policies", "default.lua"), "--log-level", "warn"] + list(extra)

        def limits():
            if nofile:
                # the soft limit only: sbx raises a run's own limit up to the hard one
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        self.log = open(os.path.join(self.dir, "log"), "w+")
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, preexec_fn=limits,
                                  env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
        line = self.p.stdout.readline().decode()
        if "listening on" not in line:
            raise RuntimeError("sbxd did not start: %s %s" % (line, open(self.log.name).read()))
        self.port = int(line.strip().rsplit(":", 1)[1])
        self.sessions = {}
        for tenant in TOKENS:
            for attempt in range(3):  # a session's first init can time out on a busy box
                c = Client("127.0.0.1", self.port, timeout=30)
                status, body = c.request("POST", "/v1/sessions", [("authorization", "Bearer " + TOKENS[tenant]),
                                                                   ("content-type", "application/json")], b"{}")
                c.close()
                if status == 201:
                    break
            if status != 201:
                raise RuntimeError("POST /v1/sessions: %s %s" % (status, body))
            self.sessions[tenant] = json.loads(body)["id"]

    def rss_kib(self):
        try:
            with open("/proc/%d/status" % self.p.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            return None

    def up(self):
        return self.p.poll() is None

    def stop(self):
        if self.up():
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        subprocess.call(["rm", "-rf", self.dir])


class Probe:
    """Bob's traffic while something else goes on: latencies in ms and failures."""

    def __init__(self, srv):
        self.srv = srv
        self.kept, self.new, self.runs = [], [], []
        self.fail = {"kept": 0, "new": 0, "run": 0}
        self.errors = []
        self.stop = threading.Event()

    def _loop(self, name, every, once, out):
        c = None
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                c = once(c)
                out.append((time.monotonic() - t0) * 1000)
            except (Failed, OSError) as e:
                self.fail[name] += 1
                if len(self.errors) < 10:
                    self.errors.append("%s: %s" % (name, e))
                if c:
                    c.close()
                c = None
            self.stop.wait(max(0, every - (time.monotonic() - t0)))
        if c:
            c.close()

    def _kept(self, c):
        c = c or Client("127.0.0.1", self.srv.port)
        status, body = c.request("GET", "/healthz")
        if status != 200:
            raise Failed("healthz: %s" % status)
        return c

    def _new(self, c):
        c = Client("127.0.0.1", self.srv.port)
        try:
            status, _ = c.request("GET", "/healthz")
        finally:
            c.close()
        if status != 200:
            raise Failed("healthz: %s" % status)
        return None

    def _run(self, c):
        c = c or Client("127.0.0.1", self.srv.port, timeout=10)
        c.run(TOKENS["bob"], self.srv.sessions["bob"], ["/bin/true"])
        return c

    def start(self):
        self.threads = [threading.Thread(target=self._loop, args=a, daemon=True) for a in (
            ("kept", 0.02, self._kept, self.kept), ("new", 0.1, self._new, self.new),
            ("run", 0.05, self._run, self.runs))]
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(15)
        return self


def measure(a, name, argv, expect):
    try:
        srv = Sbxd(a.sbxd, nofile=512 if name == "fd-exhaustion" else a.nofile)
    except (RuntimeError, Failed, OSError) as e:
        return {"class": name, "broken": ["setup: %s" % e]}
    row = {"class": name}
    try:
        base = Probe(srv).start()
        time.sleep(a.baseline)
        base.finish()
        rss0 = srv.rss_kib()
        argv = [srv.sessions["alice"] if x == "@alice" and argv[i - 1] == "--session" else
                TOKENS["alice"] if x == "@alice" else x for i, x in enumerate(argv)]
        cls = "slowloris" if name.startswith("slowloris") else name
        att = subprocess.Popen(["/usr/bin/python3", ATTACK, cls, "--port", str(srv.port),
                                "--seconds", str(a.seconds)] + argv, stdout=subprocess.PIPE)
        during = Probe(srv).start()
        peak, capped = rss0, False
        while att.poll() is None:
            r = srv.rss_kib()
            if r is None:
                break
            peak = max(peak, r)
            if r - rss0 > a.rss_cap_mib * 1024:  # protect the machine from an unguarded sbxd
                capped = True
                att.kill()
                break
            time.sleep(0.05)
        out, _ = att.communicate()
        during.finish()
        try:
            report = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            report = {}
        alive = srv.up()
        served = False
        if alive:
            try:
                c = Client("127.0.0.1", srv.port)
                served = c.request("GET", "/healthz")[0] == 200 and c.run(
                    TOKENS["bob"], srv.sessions["bob"], ["/bin/true"])
                c.close()
            except (Failed, OSError):
                served = False
        base_run = pct(base.runs, 95)
        during_run = pct(during.runs, 95)
        row.update(
            rss_mib=round((peak - rss0) / 1024.0, 1), rss_capped=capped,
            kept_p95=pct(during.kept, 95), new_p95=pct(during.new, 95),
            failures=sum(during.fail.values()), errors=during.errors,
            run_base_p95=base_run, run_p95=during_run,
            run_x=round(during_run / base_run, 2) if base_run and during_run else None,
            close_ms=report.get("max_cross_to_close_ms"), goaway=report.get("goaway"),
            conns=report.get("conns"), closed=report.get("closed"), statuses=report.get("statuses"),
            alive=alive and served, expect=expect, attack=report)
    finally:
        srv.stop()
    row["broken"] = broken(row)
    return row


def broken(r):
    why = []
    if not r["alive"]:
        why.append("sbxd down or not serving")
    if r["rss_capped"] or r["rss_mib"] > BOUNDS["rss_mib"]:
        why.append("RSS")
    for k in ("kept_p95", "new_p95"):
        if r[k] is None or r[k] > BOUNDS["healthz_p95_ms"]:
            why.append(k)
    if r["failures"]:
        why.append("failures")
    if r["run_x"] is None or r["run_x"] > BOUNDS["run_x"]:
        why.append("run p95")
    if r["expect"] == "close":
        if r["close_ms"] is None:
            why.append("never closed")
        elif r["close_ms"] > BOUNDS["close_ms"]:
            why.append("close late")
    return why


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sbxd", default=os.path.join(ROOT, "build", "bin", "sbxd"))
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--baseline", type=float, default=5)
    p.add_argument("--only", default="")
    p.add_argument("--max-body", type=int, default=8 * 1024 * 1024)
    p.add_argument("--header-timeout-s", type=float, default=10)
    p.add_argument("--nofile", type=int, default=1024, help="sbxd's RLIMIT_NOFILE (fd-exhaustion: 512)")
    p.add_argument("--per-source", type=int, default=0,
                   help="sbxd's --max-conns-per-addr (default: derived from --nofile as sbxd does)")
    p.add_argument("--rss-cap-mib", type=int, default=1536)
    p.add_argument("--json", help="write every row, in full, to this file")
    a = p.parse_args()
    if not a.per_source:  # sbxd's default: 3 fds a connection, a quarter kept back, 1/32 per address
        a.per_source = max(4, max(16, (a.nofile - a.nofile // 4) // 3) // 32)
    table = classes(a)
    names = [n for n in table if not a.only or n in a.only.split(",")]
    rows = []
    print("| class | RSS +MiB | /healthz p95 kept / new (ms) | failures | run p95 (x baseline) | "
          "to close (ms) | GOAWAY | verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for n in names:
        argv, expect = table[n]
        r = measure(a, n, argv, expect)
        rows.append(r)
        if "alive" not in r:
            print("| %s | %s |" % (n, "BROKEN: " + ", ".join(r["broken"])), flush=True)
            continue
        print("| %s | %s%s | %s / %s | %d | %s (%s) | %s | %s | %s |" % (
            n, fmt(r["rss_mib"]), " (capped)" if r["rss_capped"] else "", fmt(r["kept_p95"]), fmt(r["new_p95"]),
            r["failures"], fmt(r["run_p95"]), fmt(r["run_x"], "%.2fx"), fmt(r["close_ms"]),
            ",".join("%s:%s" % kv for kv in (r["goaway"] or {}).items()) or "-",
            "ok" if not r["broken"] else "BROKEN: " + ", ".join(r["broken"])), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r["class"] for r in rows if r["broken"]]
    print("make abuse: %d classes, %d within bounds%s" % (
        len(rows), len(rows) - len(bad), (", broken: " + ", ".join(bad)) if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

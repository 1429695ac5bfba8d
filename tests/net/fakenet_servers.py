#!/usr/bin/python3
# fakenet_servers.py: the servers of the test "internet" (tests/net/fakenet.sh).
#
# Started by fakenet.sh inside the NAME-inet network namespace; one process,
# one thread per listening socket (stdlib only, no pip modules):
#   DNS   udp 198.51.100.2:53   A/AAAA from the zone file (`name addr` lines,
#                               re-read on every query), NXDOMAIN otherwise;
#                               every query is appended to the query log as
#                               `name TYPE` (the test proves "zero queries").
#   HTTP  tcp :80  on every --http address, HTTPS tcp :443 on every --https
#         address (cert/key from --cert/--key):
#           GET  /hello        "hello from ADDR:PORT" (which address served it)
#           GET  /big/N        N MiB of deterministic bytes (see big_block)
#           GET  /big/N.sha256 hex SHA-256 of /big/N
#           GET  /headers      the request line and headers, echoed as text
#           POST /echo         the request body, echoed
#         with --sites DIR, a GET or HEAD whose Host has a directory DIR/HOST
#         is first looked up there (a file; a directory's index.html; else
#         PATH.json): the package indexes of tests/net/fakeindex.py;
#         every request is appended to the access log as
#         `ADDR:PORT PEER METHOD PATH HOST`.
#   UDP echo :7, TCP echo :9 on every --echo address.
# When every socket is bound it writes --ready (the caller waits for that).
import argparse
import hashlib
import os
import posixpath
import socket
import socketserver
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MIB = 1 << 20
_base = b"".join(hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(MIB // 32))


# The credential /auth wants (tests/spec/secrets_spec.lua gives it as a secret).
API_KEY = "sk-fakenet-5ecre7-0123456789abcdef"

def big_block(k):
    """MiB number k of /big/N: a fixed pseudo-random MiB whose first 8 bytes
    are k (big endian), so a reordered or repeated MiB is detected too."""
    return k.to_bytes(8, "big") + _base[8:]


def big_sha256(n):
    h = hashlib.sha256()
    for k in range(n):
        h.update(big_block(k))
    return h.hexdigest()


class Log:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.path = path

    def write(self, line):
        with self.lock:
            with open(self.path, "a") as f:
                f.write(line + "\n")


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


# ---- DNS ----

def read_zone(path):
    zone = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and not parts[0].startswith("#"):
                    zone.setdefault(parts[0].lower().rstrip("."), []).append(parts[1])
    except FileNotFoundError:
        pass
    return zone


def parse_qname(msg, off):
    labels = []
    while True:
        if off >= len(msg):
            raise ValueError("truncated name")
        n = msg[off]
        off += 1
        if n == 0:
            break
        if n & 0xC0:
            raise ValueError("compressed qname")
        labels.append(msg[off:off + n].decode("ascii", "replace"))
        off += n
    return ".".join(labels), off


def dns_answer(msg, zone_path, log):
    if len(msg) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", msg[:6])
    if flags & 0x8000 or qd != 1:
        return None
    name, off = parse_qname(msg, 12)
    qtype, qclass = struct.unpack("!HH", msg[off:off + 4])
    question = msg[12:off + 4]
    tname = {1: "A", 28: "AAAA"}.get(qtype, str(qtype))
    log.write("%s %s" % (name.lower(), tname))
    addrs = read_zone(zone_path).get(name.lower().rstrip("."))
    answers = []
    if addrs is not None:
        for a in addrs:
            if qtype == 1 and ":" not in a:
                answers.append(socket.inet_pton(socket.AF_INET, a))
            elif qtype == 28 and ":" in a:
                answers.append(socket.inet_pton(socket.AF_INET6, a))
    rcode = 0 if addrs is not None else 3
    rflags = 0x8000 | 0x0400 | (flags & 0x0100) | 0x0080 | rcode
    out = struct.pack("!HHHHHH", qid, rflags, 1, len(answers), 0, 0) + question
    for rdata in answers:
        out += struct.pack("!HHHIH", 0xC00C, qtype, 1, 5, len(rdata)) + rdata
    return out


def serve_dns(sock, zone_path, log):
    while True:
        msg, peer = sock.recvfrom(4096)
        try:
            out = dns_answer(msg, zone_path, log)
        except (ValueError, struct.error):
            out = None
        if out:
            sock.sendto(out, peer)


# ---- HTTP / HTTPS ----

CTYPES = {".html": "text/html", ".json": "application/json", ".whl": "application/octet-stream",
          ".tgz": "application/octet-stream"}


def site_file(sites, host, path):
    """The file under sites/HOST that answers path, or None."""
    host = (host or "").split(":")[0].lower().rstrip(".")
    if not sites or not host or "/" in host or host.startswith("."):
        return None
    base = os.path.join(sites, host)
    if not os.path.isdir(base):
        return None
    rel = posixpath.normpath("/" + path).lstrip("/")
    if rel.startswith(".."):
        return None
    f = os.path.join(base, rel) if rel not in ("", ".") else base
    for cand in (f, os.path.join(f, "index.html"), f.rstrip("/") + ".json"):
        if os.path.isfile(cand):
            return cand
    return None


def make_handler(access_log, sites=None):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "fakenet"

        def log_message(self, fmt, *args):
            pass

        def _log(self):
            here = self.server.where
            access_log.write("%s %s %s %s %s" % (here, self.client_address[0], self.command,
                                                 self.path, self.headers.get("Host", "-")))

        def _send(self, code, body, ctype="text/plain"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self):
            self._log()
            path = self.path.split("?", 1)[0]
            f = site_file(sites, self.headers.get("Host"), path)
            if f is not None:
                with open(f, "rb") as fh:
                    body = fh.read()
                return self._send(200, body, CTYPES.get(os.path.splitext(f)[1], "application/octet-stream"))
            if path == "/hello":
                return self._send(200, ("hello from %s\n" % self.server.where).encode())
            if path == "/auth":
                # an API that wants the secret the secrets tests give
                ok = self.headers.get("Authorization") == "Bearer " + API_KEY
                return self._send(200 if ok else 401, b"authorized\n" if ok else b"unauthorized\n")
            if path == "/echo-auth":
                # an API that echoes the credential, in a header and the body
                got = self.headers.get("Authorization") or ""
                body = ("you sent: %s\n" % got).encode() * 2000  # > one TLS record
                self.send_response(200)
                self.send_header("X-Echo", got)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                return self.wfile.write(body)
            if path == "/headers":
                text = self.requestline + "\n" + str(self.headers)
                return self._send(200, text.encode())
            if path.startswith("/big/"):
                arg = path[5:]
                want_sum = arg.endswith(".sha256")
                if want_sum:
                    arg = arg[:-7]
                if not arg.isdigit() or int(arg) > 4096:
                    return self._send(400, b"bad size\n")
                n = int(arg)
                if want_sum:
                    return self._send(200, (big_sha256(n) + "\n").encode())
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(n * MIB))
                self.end_headers()
                if self.command != "HEAD":
                    for k in range(n):
                        self.wfile.write(big_block(k))
                return None
            return self._send(404, b"not found\n")

        do_HEAD = do_GET

        def do_POST(self):
            self._log()
            if self.path != "/echo":
                return self._send(404, b"not found\n")
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n > 0 else b""
            return self._send(200, body, "application/octet-stream")

    return Handler


def http_server(addr, port, handler, ctx=None):
    class Server(ThreadingHTTPServer):
        address_family = family(addr)
        daemon_threads = True
        allow_reuse_address = True

        def finish_request(self, request, client_address):
            # TLS handshake here, in the connection's own thread, so a client
            # that never finishes it blocks nobody else.
            request.settimeout(30)
            if ctx is not None:
                try:
                    request = ctx.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError):
                    return
            try:
                super().finish_request(request, client_address)
            finally:
                request.close()

    srv = Server((addr, port), handler)
    srv.where = ("[%s]:%d" if ":" in addr else "%s:%d") % (addr, port)
    return srv


# ---- echo ----

def serve_udp_echo(sock):
    while True:
        msg, peer = sock.recvfrom(65536)
        sock.sendto(msg, peer)


class TCPEcho(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)


def tcp_echo(addr, port):
    class Server(socketserver.ThreadingTCPServer):
        address_family = family(addr)
        daemon_threads = True
        allow_reuse_address = True

    return Server((addr, port), TCPEcho)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dns", action="append", default=[])
    ap.add_argument("--http", action="append", default=[])
    ap.add_argument("--https", action="append", default=[])
    ap.add_argument("--echo", action="append", default=[])
    ap.add_argument("--zone", required=True)
    ap.add_argument("--query-log", required=True)
    ap.add_argument("--access-log", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--sites")
    a = ap.parse_args()

    qlog, alog = Log(a.query_log), Log(a.access_log)
    handler = make_handler(alog, a.sites)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(a.cert, a.key)
    ctx.set_alpn_protocols(["http/1.1"])

    threads = []
    for addr in a.dns:
        s = socket.socket(family(addr), socket.SOCK_DGRAM)
        s.bind((addr, 53))
        threads.append((serve_dns, (s, a.zone, qlog)))
    servers = [http_server(x, 80, handler) for x in a.http]
    servers += [http_server(x, 443, handler, ctx) for x in a.https]
    for addr in a.echo:
        s = socket.socket(family(addr), socket.SOCK_DGRAM)
        s.bind((addr, 7))
        threads.append((serve_udp_echo, (s,)))
        servers.append(tcp_echo(addr, 9))
    for srv in servers:
        threads.append((srv.serve_forever, ()))
    for fn, args in threads:
        threading.Thread(target=fn, args=args, daemon=True).start()
    with open(a.ready + ".tmp", "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(a.ready + ".tmp", a.ready)
    threading.Event().wait()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)

#!/usr/bin/python3
# fakeindex.py: tiny packages, and the package indexes that serve them, built
# offline for the tests (stdlib only).
#
#   fakeindex.py wheel OUTDIR NAME VERSION
#       writes OUTDIR/NAME-VERSION-py3-none-any.whl: a pure-Python package
#       NAME whose __init__ sets __version__ = VERSION and mean(xs).
#   fakeindex.py sites SITES_DIR PYNAME PYVERSION NPMNAME NPMVERSION
#       writes what fakenet_servers.py --sites serves, one directory per
#       host name:
#         pypi.org/simple/index.html, pypi.org/simple/PYNAME/index.html
#             (PEP 503 simple index: a link to the wheel with #sha256=)
#         files.pythonhosted.org/packages/xx/PYNAME-...whl
#         registry.npmjs.org/NPMNAME (the registry's package document:
#             dist-tags, versions, dist.tarball / integrity / shasum)
#         registry.npmjs.org/NPMNAME/-/NPMNAME-NPMVERSION.tgz (an npm pack:
#             package/package.json, package/index.js exporting mean(xs))
import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import zipfile


def wheel_bytes(name, version):
    dist = "%s-%s.dist-info" % (name, version)
    files = {
        "%s/__init__.py" % name: (
            '__version__ = "%s"\n\n\ndef mean(xs):\n    xs = list(xs)\n'
            "    return sum(xs) / len(xs)\n" % version).encode(),
        dist + "/METADATA": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n"
                             "Summary: a test package of sbx\n" % (name, version)).encode(),
        dist + "/WHEEL": (b"Wheel-Version: 1.0\nGenerator: sbx-fakeindex\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
    record.append(dist + "/RECORD,,")
    files[dist + "/RECORD"] = ("\n".join(record) + "\n").encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return buf.getvalue()


def wheel_name(name, version):
    return "%s-%s-py3-none-any.whl" % (name, version)


def npm_tarball(name, version):
    files = {
        "package/package.json": json.dumps(
            {"name": name, "version": version, "main": "index.js",
             "description": "a test package of sbx", "license": "MIT"}, indent=2).encode(),
        "package/index.js": (
            "exports.version = %s;\n"
            "exports.mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;\n"
            % json.dumps(version)).encode(),
    }
    buf = io.BytesIO()
    # A fixed mtime: the same bytes (and integrity) every time.
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.USTAR_FORMAT) as t:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(data), 1700000000, 0o644
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def sites(root, pyname, pyversion, npmname, npmversion):
    whl = wheel_bytes(pyname, pyversion)
    fname = wheel_name(pyname, pyversion)
    sha = hashlib.sha256(whl).hexdigest()
    rel = "packages/%s/%s" % (sha[:2], fname)
    write(os.path.join(root, "files.pythonhosted.org", rel), whl)
    url = "https://files.pythonhosted.org/%s#sha256=%s" % (rel, sha)
    write(os.path.join(root, "pypi.org/simple", pyname, "index.html"), (
        "<!DOCTYPE html>\n<html><body>\n<a href=\"%s\">%s</a>\n</body></html>\n"
        % (url, fname)).encode())
    write(os.path.join(root, "pypi.org/simple/index.html"), (
        "<!DOCTYPE html>\n<html><body>\n<a href=\"/simple/%s/\">%s</a>\n</body></html>\n"
        % (pyname, pyname)).encode())

    tgz = npm_tarball(npmname, npmversion)
    tname = "%s-%s.tgz" % (npmname, npmversion)
    write(os.path.join(root, "registry.npmjs.org", npmname, "-", tname), tgz)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
    doc = {
        "name": npmname,
        "dist-tags": {"latest": npmversion},
        "versions": {npmversion: {
            "name": npmname, "version": npmversion, "main": "index.js",
            "dist": {"tarball": "https://registry.npmjs.org/%s/-/%s" % (npmname, tname),
                     "integrity": integrity, "shasum": hashlib.sha1(tgz).hexdigest()},
        }},
    }
    # The document is the file named like the package: fakenet_servers.py
    # serves a file at /NAME, and the directory NAME/ holds the tarballs.
    write(os.path.join(root, "registry.npmjs.org", npmname + ".json"), json.dumps(doc).encode())


def main(argv):
    if len(argv) == 5 and argv[1] == "wheel":
        write(os.path.join(argv[2], wheel_name(argv[3], argv[4])), wheel_bytes(argv[3], argv[4]))
    elif len(argv) == 7 and argv[1] == "sites":
        sites(*argv[2:])
    else:
        sys.stderr.write("usage: fakeindex.py wheel OUTDIR NAME VERSION | "
                         "sites DIR PYNAME PYVERSION NPMNAME NPMVERSION\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

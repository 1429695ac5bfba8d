#!/usr/bin/python3
"""diff.py: compare CPython regression-test outcomes, test by test.

usage: diff.py HOST_DIR SESSION_DIR MODULE...
Each dir holds MODULE.xml, the --junit-xml of `python3.11 -m test MODULE`.
Prints one line per test whose outcome (ok, skipped, failure, error)
differs, and one per module without results on either side; exits 1 when
it printed any, 0 when the two runs agree on every test.
"""
import os
import sys
import xml.etree.ElementTree as ET


RANK = {"ok": 0, "skipped": 1, "failure": 2, "error": 3}


def outcomes(path):
    """({test id: (outcome, detail)}, [(after, before)]) from a JUnit file,
    or None if absent.  The list holds the unnamed testcases: regrtest 3.11
    writes a test whose subtests failed as an empty <testcase/>, in sorted
    place, so it is known only as "between these two names"."""
    if not os.path.exists(path):
        return None
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        print(f"{path}: unreadable ({e})")
        return None
    out, unnamed, prev, pending = {}, [], "", False
    for tc in root.iter("testcase"):
        name = tc.get("name")
        if name is None:
            pending = True
            continue
        if pending:
            unnamed.append((prev, name))
            pending = False
        prev = name
        outcome, detail = "ok", ""
        for kind in ("error", "failure", "skipped"):
            el = tc.find(kind)
            if el is not None:
                outcome = kind
                detail = (el.get("message") or el.text or "").strip().splitlines()
                detail = detail[0][:160] if detail else ""
                break
        # A test with subtests can be reported more than once: keep the worst.
        if name not in out or RANK[outcome] > RANK[out[name][0]]:
            out[name] = (outcome, detail)
    if pending:
        unnamed.append((prev, "\uffff"))
    return out, unnamed


def outcome_of(side, name):
    tests, unnamed = side
    if name in tests:
        return tests[name]
    for after, before in unnamed:
        if after < name < before:
            return ("error", "subtests failed (regrtest left the test unnamed in its XML)")
    return ("absent", "")


def main(argv):
    host_dir, sess_dir, modules = argv[1], argv[2], argv[3:]
    lines = []
    for mod in modules:
        h = outcomes(os.path.join(host_dir, mod + ".xml"))
        s = outcomes(os.path.join(sess_dir, mod + ".xml"))
        if h is None or s is None:
            side = "host" if h is None else "session"
            lines.append(f"{mod}: no results on the {side} side")
            continue
        for name in sorted(set(h[0]) | set(s[0])):
            ho, so = outcome_of(h, name), outcome_of(s, name)
            if ho[0] != so[0]:
                why = so[1] if so[0] != "ok" else ho[1]
                lines.append(f"{name}: host {ho[0]}, session {so[0]}" + (f" ({why})" if why else ""))
        print(f"# {mod}: {len(h[0]) + len(h[1])} tests on the host, "
              f"{len(s[0]) + len(s[1])} in the session", file=sys.stderr)
    for line in lines:
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

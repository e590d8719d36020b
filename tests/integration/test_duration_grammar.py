# SPDX-License-Identifier: MIT
"""One duration grammar (issue 14): whatever the CRDs' duration pattern lets through the API
server, the parser behind the controller and `aiprof profile --duration` reads; compound
durations included."""
import os
import re
import subprocess

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AIPROF = os.path.join(ROOT, os.environ.get("BUILD", "build"), "aiprof")

CORPUS = ["30s", "500ms", "2m", "1h", "1h30m", "1m30s", "2m0.5s", "1.5ms", "0.1s", "24h",
          "1h1m1s", "10ms5s", "1s1s", "3.25m", "90", "1h30", "1d", "s", "-5s", "5 s", "1e3s",
          ".5s", "1.s", "5S", "30sec", "1h30m0.001s", "0.0001s", "100us", "250ns"]


def duration_patterns():
    """Every pattern the CRDs put on a duration field."""
    found = []

    def walk(node, key=None):
        if isinstance(node, dict):
            if key in ("duration", "window", "every") and "pattern" in node:
                found.append(node["pattern"])
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)
    for name in ("profilingsession.yaml", "profilingpolicy.yaml"):
        with open(os.path.join(ROOT, "crds", name)) as f:
            for doc in yaml.safe_load_all(f):
                walk(doc)
    return found


def parser_takes(text):
    """Does aiprof's parser read it? (a bad --duration is a usage error, before any pid)"""
    r = subprocess.run([AIPROF, "profile", "--pid", "2147483646", "--duration", text, "-q"],
                       capture_output=True, text=True, timeout=20)
    refused = r.returncode == 2 and "--duration" in r.stderr
    assert refused or r.returncode == 3, (text, r.returncode, r.stderr)   # 3: no such pid
    return not refused


def test_the_crds_and_the_parser_read_the_same_durations():
    patterns = duration_patterns()
    assert patterns, "no duration pattern found in crds/"
    taken = {text: parser_takes(text) for text in CORPUS}
    for pattern in patterns:
        for text in CORPUS:
            if re.fullmatch(pattern, text):
                assert taken[text], f"the CRD's {pattern} accepts {text!r}, the parser refuses it"
    assert taken["1h30m"] and taken["1.5ms"] and taken["2m0.5s"]
    assert not taken["1h30"] and not taken["1d"] and not taken["-5s"]

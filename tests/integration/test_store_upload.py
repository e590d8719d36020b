# SPDX-License-Identifier: MIT
"""`aiprof upload DIR http://...` and `aiprof profile -o http://...`: the injector's side of the
in-cluster artifact store (docs/artifact-store.md), against StoreDouble, a double of
aiprof-controller's PUT /v1/artifacts endpoint on 127.0.0.1. The double refuses what the
controller refuses (no or wrong bearer token, a missing or wrong X-Aiprof-Sha256, no
Content-Length, a bad name, another body under a stored name) and can be told to answer 503
or 413. The real endpoint is tested in test_artstore.py and, with real injector pods, in
e2e/test_e2e.py."""
import hashlib
import http.server
import json
import os
import re
import subprocess
import threading
import time

import pytest

from conftest import AIPROF

EXIT_USAGE, EXIT_OUTPUT = 2, 7
TOKEN = "eyJhbGciOiJSUzI1NiJ9.double-token-" + "x" * 40
NAME = re.compile(r"^/v1/artifacts/([a-z0-9.-]+)/([a-z0-9.-]+)/([A-Za-z0-9._/-]{1,200})$")


class StoreDouble:
    """A double of the controller's artifact endpoint: records what it stored, in order."""

    def __init__(self):
        self.stored = {}          # name -> bytes
        self.order = []
        self.requests = []        # (name, status)
        self.fail = []            # statuses to answer first, one per request
        self.retry_after = None
        self.token = TOKEN
        double = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def answer(self, status, msg, headers=()):
                # as controller/artupload.c: a refusal is one line of text, 201 is JSON
                body = (json.dumps({"message": msg}) if status == 201 else msg + "\n").encode()
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):
                m = NAME.match(self.path)
                n = self.headers.get("Content-Length")
                body = self.rfile.read(int(n)) if n else b""
                name = m.group(3) if m else self.path
                status = double.judge(self.headers, m, n, body)
                double.requests.append((name, status[0]))
                self.answer(*status)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def judge(self, headers, m, n, body):
        if headers.get("Authorization") != "Bearer " + self.token:
            return 401, "no valid token"
        if not m or ".." in m.group(3).split("/"):
            return 400, "bad path"
        if n is None:
            return 400, "Content-Length is required"
        sha = headers.get("X-Aiprof-Sha256", "")
        if sha != hashlib.sha256(body).hexdigest():
            return 400, "X-Aiprof-Sha256 does not match the body"
        if self.fail:
            st = self.fail.pop(0)
            if st == 503:
                return 503, "busy", [("Retry-After", str(self.retry_after or 1))]
            return st, {413: "over the session's bound of 64 MiB"}.get(st, "refused")
        name = m.group(3)
        if name in self.stored and self.stored[name] != body:
            return 409, "another body is stored under this name"
        self.stored[name] = body
        self.order.append(name)
        return 201, "stored"

    def url(self, pod="trainer-0"):
        return f"http://127.0.0.1:{self.port}/v1/artifacts/team-a/sess-1/{pod}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def store(tmp_path):
    d = StoreDouble()
    yield d
    d.close()


def folder(tmp_path, big=3 << 20):
    d = tmp_path / "out"
    (d / "sub").mkdir(parents=True)
    (d / "summary.json").write_text('{"ok": true}\n')
    (d / "timeline.json.gz").write_bytes(os.urandom(big))
    (d / "sub" / "stacks.folded").write_text("main;work 10\n")
    return d


def upload(tmp_path, d, url, token=TOKEN, env_extra=None):
    tf = tmp_path / "token"
    if token is not None:
        tf.write_text(token + "\n")
    env = dict(os.environ, AIPROF_STORE_TOKEN_FILE=str(tf))
    env.update(env_extra or {})
    t0 = time.monotonic()
    r = subprocess.run([AIPROF, "upload", str(d), url], capture_output=True, text=True,
                       timeout=120, env=env)
    return r, time.monotonic() - t0


def test_every_file_arrives_byte_identical_and_the_manifest_last(tmp_path, store):
    d = folder(tmp_path)
    r, _ = upload(tmp_path, d, store.url())
    assert r.returncode == 0, r.stderr
    files = {"summary.json", "timeline.json.gz", "sub/stacks.folded"}
    # the store's names are the target pod's name, then the name in the folder
    assert set(store.stored) == {"trainer-0/" + f for f in files | {"manifest.json"}}
    assert store.order[-1] == "trainer-0/manifest.json"
    for f in files:
        assert store.stored["trainer-0/" + f] == (d / f).read_bytes(), f
    man = json.loads(store.stored["trainer-0/manifest.json"])
    assert man["location"] == store.url() + "/"
    assert {a["name"]: a["sha256"] for a in man["artifacts"]} == \
        {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in files}
    assert all(a["url"] == store.url() + "/" + a["name"] for a in man["artifacts"])
    assert TOKEN not in r.stderr + r.stdout
    # the local folder is kept (no --delete-after)
    assert (d / "timeline.json.gz").exists()


def test_a_busy_store_is_retried_after_its_retry_after(tmp_path, store):
    d = folder(tmp_path, big=1000)
    store.fail = [503, 503]
    store.retry_after = 1
    r, took = upload(tmp_path, d, store.url())
    assert r.returncode == 0, r.stderr
    assert [s for _, s in store.requests[:3]] == [503, 503, 201]
    assert took >= 2.0, took                    # both Retry-After: 1 were honoured
    assert "retrying" in r.stderr and "HTTP 503" in r.stderr, r.stderr
    assert store.order[-1] == "trainer-0/manifest.json"


def test_over_the_bound_fails_at_once_and_keeps_the_folder(tmp_path, store):
    d = folder(tmp_path, big=1000)
    store.fail = [413]
    r, _ = upload(tmp_path, d, store.url())
    assert r.returncode == EXIT_OUTPUT, r.stderr
    assert len(store.requests) == 1             # not retried
    assert "HTTP 413" in r.stderr and "--store-max" in r.stderr, r.stderr
    assert "trainer-0/manifest.json" not in store.stored
    assert "kept in" in r.stderr and (d / "manifest.json").exists()


def test_another_body_under_a_stored_name_is_a_conflict(tmp_path, store):
    d = folder(tmp_path, big=1000)
    store.stored["trainer-0/summary.json"] = b"something else"
    r, _ = upload(tmp_path, d, store.url())
    assert r.returncode == EXIT_OUTPUT
    assert "HTTP 409" in r.stderr and "another body" in r.stderr, r.stderr
    assert "trainer-0/manifest.json" not in store.stored


def test_a_refused_token_fails_at_once_and_says_what_to_check(tmp_path, store):
    d = folder(tmp_path, big=1000)
    store.token = "another-" + TOKEN
    r, _ = upload(tmp_path, d, store.url())
    assert r.returncode == EXIT_OUTPUT and "HTTP 401" in r.stderr, r.stderr
    assert len(store.requests) == 1
    assert "aiprof.io/artifacts" in r.stderr    # what to check
    assert TOKEN not in r.stderr + r.stdout


def test_the_token_is_read_again_at_each_try(tmp_path, store):
    """The kubelet rotates a projected token: a retry sends what the file holds by then."""
    d = folder(tmp_path, big=1000)
    tf = tmp_path / "token"
    tf.write_text(TOKEN)
    store.fail = [503]
    store.retry_after = 2

    def rotate():
        time.sleep(0.5)
        store.token = "second-" + TOKEN         # the API server moves on ...
        tf.write_text(store.token)              # ... and the kubelet writes the new one
    th = threading.Thread(target=rotate)
    th.start()
    r = subprocess.run([AIPROF, "upload", str(d), store.url()], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, AIPROF_STORE_TOKEN_FILE=str(tf)))
    th.join()
    assert r.returncode == 0, r.stderr
    assert [s for _, s in store.requests][:2] == [503, 201]


def test_no_token_and_bad_urls_are_usage_errors(tmp_path, store):
    d = folder(tmp_path, big=10)
    r, _ = upload(tmp_path, d, store.url(), token=None)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "AIPROF_STORE_TOKEN_FILE" in r.stderr and not store.requests
    for bad in (f"http://127.0.0.1:{store.port}/v1/artifacts/team-a/sess-1",
                f"http://127.0.0.1:{store.port}/v1/other/team-a/sess-1/pod",
                f"http://127.0.0.1:{store.port}/v1/artifacts/Team_A/sess-1/pod",
                f"http://user:pw@127.0.0.1:{store.port}/v1/artifacts/a/b/c",
                f"http://127.0.0.1:{store.port}/v1/artifacts/a/b/c/d"):
        r, _ = upload(tmp_path, d, bad)
        assert r.returncode == EXIT_USAGE, (bad, r.stderr)
        assert "/v1/artifacts/NAMESPACE/SESSION/POD" in r.stderr or "http(s)://HOST" in r.stderr, \
            (bad, r.stderr)
    assert not store.requests


def test_profile_uploads_to_the_store(tmp_path, store):
    """aiprof profile -o http://...: built in a staging folder, uploaded, the URL printed."""
    tf = tmp_path / "token"
    tf.write_text(TOKEN)
    p = subprocess.Popen(["python3", "-c", "import time\nwhile True: sum(range(10000))"])
    try:
        r = subprocess.run([AIPROF, "profile", "--pid", str(p.pid), "-d", "1s", "--method", "ebpf",
                            "--collectors", "cpu", "-o", store.url()],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, AIPROF_STORE_TOKEN_FILE=str(tf)))
    finally:
        p.kill()
        p.wait()
    assert r.returncode == 0, r.stderr
    assert store.url() in r.stdout
    assert store.order[-1] == "trainer-0/manifest.json"
    assert "trainer-0/summary.json" in store.stored
    assert json.loads(store.stored["trainer-0/summary.json"])["targets"][0]["pid"] == p.pid

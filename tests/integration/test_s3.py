# SPDX-License-Identifier: MIT
"""`aiprof upload` against a real S3 server: Ceph radosgw on 127.0.0.1 (tests/s3/radosgw.sh),
started once for this module. Every upload is checked with an independent client (boto3, and
awscli once): objects byte-identical, manifest.json last and its SHA-256s right. Faults come
from tests/s3/faultproxy.py: a reset in the middle of a part, 503 SlowDown, a stalled
connection, bytes corrupted in transit; and from bad configuration: a wrong secret, a missing
bucket, no credentials, no CA bundle. Each either succeeds after retrying or fails at once with
a message that says what to check; the local folder is intact in every case, and the secret
never appears in anything aiprof prints or writes."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import AIPROF, BUILD, ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
import s3env  # noqa: E402

EXIT_USAGE, EXIT_OUTPUT = 2, 7
MiB = 1 << 20


@pytest.fixture(scope="module")
def rgw():
    missing = s3env.missing_ceph()
    if missing:
        pytest.skip("Ceph is not installed (missing " + ", ".join(missing) + "): "
                    "apt-get install radosgw ceph-mon ceph-osd ceph-common "
                    "(scripts/install-deps.sh)")
    try:
        import boto3  # noqa: F401
    except ImportError:
        pytest.skip("python3-boto3 is not installed (scripts/install-deps.sh)")
    g = s3env.Radosgw()
    try:
        g.start()
    except RuntimeError as e:
        pytest.fail(str(e))
    yield g
    g.stop()


@pytest.fixture
def proxies():
    started = []

    def start(rgw, **kw):
        p = s3env.Proxy(rgw.hostport, **kw)
        started.append(p)
        return p
    yield start
    for p in started:
        p.stop()


def make_artifacts(root, big=12 * MiB, seed=1):
    """An artifact folder like `aiprof profile` writes, plus awkward names."""
    os.makedirs(root)
    rnd = hashlib.sha256(str(seed).encode()).digest()
    with open(os.path.join(root, "timeline.json.gz"), "wb") as f:
        f.write(os.urandom(big))
    with open(os.path.join(root, "summary.json"), "w") as f:
        json.dump({"schema": "aiprof.summary/v1", "seed": rnd.hex()}, f)
    os.makedirs(os.path.join(root, "rank 0"))
    with open(os.path.join(root, "rank 0", "stacks+ä=&.folded"), "w") as f:
        f.write("main;train;step 42\n")
    open(os.path.join(root, "empty.txt"), "w").close()
    return snapshot(root)


def snapshot(root):
    """{relative path: sha256} of every file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            out[os.path.relpath(p, root)] = s3env.sha256_file(p)
    return out


def upload(rgw, src, dest, *flags, env=None, timeout=120):
    return subprocess.run([AIPROF, "upload", str(src), dest, *flags], capture_output=True,
                          text=True, timeout=timeout, env=env or rgw.client_env())


def assert_no_secret(rgw, r, *dirs):
    for text in (r.stdout, r.stderr):
        assert rgw.secret not in text
    for d in dirs:
        for dd, _, files in os.walk(d):
            for n in files:
                with open(os.path.join(dd, n), "rb") as f:
                    assert rgw.secret.encode() not in f.read()


def verify_bucket(rgw, src, prefix):
    """The objects under prefix are byte-identical to src's files, and manifest.json lists
    each with the right size and SHA-256. Uses boto3, not aiprof."""
    s3 = rgw.boto3()
    local = {k: v for k, v in snapshot(src).items() if k != "manifest.json"}
    man = json.loads(s3.get_object(Bucket=rgw.bucket, Key=f"{prefix}/manifest.json")["Body"]
                     .read())
    assert man["schema"] == "aiprof.manifest/v1"
    assert man["location"] == f"s3://{rgw.bucket}/{prefix}/"
    listed = {a["name"]: a for a in man["artifacts"]}
    assert set(listed) == set(local)
    for name, sha in local.items():
        a = listed[name]
        assert a["key"] == f"{prefix}/{name}"
        assert a["url"] == f"s3://{rgw.bucket}/{prefix}/{name}"
        assert a["sha256"] == sha
        obj = s3.get_object(Bucket=rgw.bucket, Key=a["key"])
        body = obj["Body"].read()
        assert len(body) == a["size"] == os.path.getsize(os.path.join(src, name))
        assert hashlib.sha256(body).hexdigest() == sha
        assert obj["Metadata"].get("sha256") == sha
    assert man["total_bytes"] == sum(a["size"] for a in man["artifacts"])
    # the local manifest is the uploaded one
    with open(os.path.join(src, "manifest.json")) as f:
        assert json.load(f) == man
    return man


def test_upload_multipart_roundtrip(rgw, tmp_path, proxies):
    src = tmp_path / "out"
    before = make_artifacts(str(src), big=23 * MiB + 12345)
    px = proxies(rgw)  # pass-through, to see the order of requests
    r = upload(rgw, src, f"s3://{rgw.bucket}/rt/run1", "--part-size", "5M",
               "--multipart-threshold", "5M", "--parallel", "3",
               env=rgw.client_env(AWS_ENDPOINT_URL_S3=px.endpoint))
    assert r.returncode == 0, r.stderr
    assert "[5 parts, 0 retries]" in r.stderr
    man = verify_bucket(rgw, str(src), "rt/run1")
    assert len(man["artifacts"]) == 4
    # nothing removed locally; manifest.json added
    after = snapshot(str(src))
    assert {k: v for k, v in after.items() if k != "manifest.json"} == before
    # manifest.json is the very last request; every part before the completion
    reqs = [line.split(" ", 2)[1:] for line in px.lines()]
    assert reqs[-1][0] == "PUT" and reqs[-1][1].startswith(f"/{rgw.bucket}/rt/run1/manifest.json ")
    assert sum(1 for m, p in reqs if "partNumber=" in p) == 5
    complete = [i for i, (m, p) in enumerate(reqs) if m == "POST" and "uploadId=" in p]
    assert len(complete) == 1
    assert all(i < complete[0] for i, (m, p) in enumerate(reqs) if "partNumber=" in p)
    assert_no_secret(rgw, r, src)

    # awscli, a second independent client, reads the same bytes
    if os.path.exists("/usr/bin/aws"):
        dl = tmp_path / "dl.gz"
        a = subprocess.run(["/usr/bin/aws", "--endpoint-url", rgw.endpoint, "s3", "cp",
                            f"s3://{rgw.bucket}/rt/run1/timeline.json.gz", str(dl)],
                           env=rgw.client_env(), capture_output=True, text=True, timeout=120)
        assert a.returncode == 0, a.stderr
        assert s3env.sha256_file(dl) == before["timeline.json.gz"]


def test_resume_skips_what_is_there(rgw, tmp_path, proxies):
    src = tmp_path / "out"
    make_artifacts(str(src), big=6 * MiB)
    r = upload(rgw, src, f"s3://{rgw.bucket}/resume/a/")
    assert r.returncode == 0, r.stderr
    px = proxies(rgw)
    r = upload(rgw, src, f"s3://{rgw.bucket}/resume/a",
               env=rgw.client_env(AWS_ENDPOINT_URL_S3=px.endpoint))
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("already there with the same SHA-256") == 4
    methods = [line.split()[1] for line in px.lines()]
    assert methods == ["HEAD"] * 4 + ["PUT"]   # only the manifest is sent again
    # --force sends everything
    r = upload(rgw, src, f"s3://{rgw.bucket}/resume/a", "--force", "-q")
    assert r.returncode == 0, r.stderr
    verify_bucket(rgw, str(src), "resume/a")


def test_https_with_ca_bundle_and_secret_dir(rgw, tmp_path):
    src = tmp_path / "out"
    make_artifacts(str(src), big=1 * MiB)
    secrets = tmp_path / "secret"
    secrets.mkdir()
    (secrets / "AWS_ACCESS_KEY_ID").write_text(rgw.env["AWS_ACCESS_KEY_ID"] + "\n")
    (secrets / "AWS_SECRET_ACCESS_KEY").write_text(rgw.secret + "\n")
    env = rgw.client_env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None,
                         AWS_ENDPOINT_URL_S3=None, AIPROF_S3_SECRET_DIR=str(secrets))
    r = upload(rgw, src, f"s3://{rgw.bucket}/tls", "--endpoint-url",
               rgw.env["S3_HTTPS_ENDPOINT"], "--ca-bundle", rgw.env["S3_CA_BUNDLE"], env=env)
    assert r.returncode == 0, r.stderr
    verify_bucket(rgw, str(src), "tls")

    # without the CA bundle the certificate is not trusted: fails at once, says what to check
    t0 = time.monotonic()
    r = upload(rgw, src, f"s3://{rgw.bucket}/tls2", "--endpoint-url",
               rgw.env["S3_HTTPS_ENDPOINT"], env=env)
    assert r.returncode == EXIT_OUTPUT
    assert "TLS failure" in r.stderr and "--ca-bundle" in r.stderr
    assert "retrying" not in r.stderr
    assert time.monotonic() - t0 < 10
    assert_no_secret(rgw, r, src)


def test_virtual_hosted_addressing(rgw, tmp_path):
    src = tmp_path / "out"
    make_artifacts(str(src), big=6 * MiB)
    port = rgw.hostport.rsplit(":", 1)[1]
    # radosgw runs with rgw_dns_name=localhost; curl resolves *.localhost to loopback
    r = upload(rgw, src, f"s3://{rgw.bucket}/vhost", "--virtual-hosted", "--part-size", "5M",
               "--multipart-threshold", "5M",
               env=rgw.client_env(AWS_ENDPOINT_URL_S3=f"http://localhost:{port}"))
    assert r.returncode == 0, r.stderr
    verify_bucket(rgw, str(src), "vhost")


def test_checksum_sha256(rgw, tmp_path):
    src = tmp_path / "out"
    make_artifacts(str(src), big=11 * MiB)
    r = upload(rgw, src, f"s3://{rgw.bucket}/cks", "--checksum", "sha256", "--part-size",
               "5M", "--multipart-threshold", "5M")
    assert r.returncode == 0, r.stderr
    verify_bucket(rgw, str(src), "cks")


def test_delete_after(rgw, tmp_path):
    src = tmp_path / "out"
    make_artifacts(str(src), big=1 * MiB)
    keep = snapshot(str(src))
    r = upload(rgw, src, f"s3://{rgw.bucket}/del", "--delete-after")
    assert r.returncode == 0, r.stderr
    assert not src.exists()
    s3 = rgw.boto3()
    man = json.loads(s3.get_object(Bucket=rgw.bucket, Key="del/manifest.json")["Body"].read())
    assert {a["name"]: a["sha256"] for a in man["artifacts"]} == keep


# ---- faults that a retry fixes -----------------------------------------------------------

@pytest.mark.parametrize("fault,match,times,extra", [
    ("reset", r"partNumber=2&", 1, {"after": 1 * MiB}),            # mid-part reset
    ("slowdown", r"^PUT ", 3, {}),                                  # 503 SlowDown x3
    ("stall", r"partNumber=1&", 1, {"after": 64 * 1024, "stall": 8}),  # stalled connection
    ("corrupt", r"partNumber=3&", 1, {"after": 4321}),              # BadDigest at the server
    ("reset", r"\?uploads ", 1, {}),                                # create multipart reset
    ("slowdown", r"manifest\.json", 2, {}),                         # the manifest throttled
    ("drop", r"^POST .*uploadId=", 1, {}),       # completion done, but its answer lost
    ("drop", r"^PUT .*summary", 1, {}),          # a PUT done, but its answer lost
])
def test_fault_then_success(rgw, tmp_path, proxies, fault, match, times, extra):
    src = tmp_path / "out"
    before = make_artifacts(str(src), big=16 * MiB)
    px = proxies(rgw, fault=fault, match=match, times=times, **extra)
    prefix = f"fault/{fault}-{abs(hash(match)) % 10000}"
    t0 = time.monotonic()
    r = upload(rgw, src, f"s3://{rgw.bucket}/{prefix}", "--part-size", "5M",
               "--multipart-threshold", "5M", "--stall-timeout", "2s",
               env=rgw.client_env(AWS_ENDPOINT_URL_S3=px.endpoint))
    assert r.returncode == 0, r.stderr
    assert len(px.faults()) == times, px.lines()
    if match.startswith(r"\?uploads") or fault == "drop":
        # a request reset before any answer on a reused connection may be resent by libcurl
        # itself, on a fresh one
        assert r.stderr.count("retrying in") <= times, r.stderr
    else:
        assert r.stderr.count("retrying in") == times, r.stderr
    if fault == "stall":
        assert "timed out" in r.stderr
        assert time.monotonic() - t0 < 30
    if fault == "corrupt":
        # caught by the server: the signed payload hash (radosgw checks it first) or
        # Content-MD5
        assert "XAmzContentSHA256Mismatch" in r.stderr or "BadDigest" in r.stderr
    if fault == "slowdown":
        assert "HTTP 503 SlowDown" in r.stderr
    if fault == "reset" and "partNumber" in match:
        assert "connection reset" in r.stderr
    verify_bucket(rgw, str(src), prefix)
    assert {k: v for k, v in snapshot(str(src)).items() if k != "manifest.json"} == before
    assert_no_secret(rgw, r, src)


def test_corrupt_caught_by_payload_hash(rgw, tmp_path, proxies):
    """With --checksum sha256 (which this radosgw does not check), the signed payload hash
    (x-amz-content-sha256) still catches corruption: XAmzContentSHA256Mismatch, retried."""
    src = tmp_path / "out"
    make_artifacts(str(src), big=1 * MiB)
    px = proxies(rgw, fault="corrupt", match=r"^PUT .*timeline", after=100)
    r = upload(rgw, src, f"s3://{rgw.bucket}/corrupt-sha", "--checksum", "sha256",
               env=rgw.client_env(AWS_ENDPOINT_URL_S3=px.endpoint))
    assert r.returncode == 0, r.stderr
    assert "XAmzContentSHA256Mismatch" in r.stderr
    verify_bucket(rgw, str(src), "corrupt-sha")


# ---- failures: clear, fast, nothing lost ---------------------------------------------------

def assert_failed_cleanly(rgw, r, src, before, dest):
    assert r.returncode == EXIT_OUTPUT, r.stderr
    assert {k: v for k, v in snapshot(str(src)).items() if k != "manifest.json"} == before
    assert os.path.exists(os.path.join(src, "manifest.json"))
    assert f"The artifacts are kept in {src}; to resume: aiprof upload {src} {dest}" in r.stderr
    assert_no_secret(rgw, r, src)


def test_wrong_secret(rgw, tmp_path):
    src = tmp_path / "out"
    before = make_artifacts(str(src), big=12 * MiB)
    dest = f"s3://{rgw.bucket}/wrongsecret"
    t0 = time.monotonic()
    r = upload(rgw, src, dest, "--delete-after",
               env=rgw.client_env(AWS_SECRET_ACCESS_KEY=rgw.secret[::-1]))
    assert time.monotonic() - t0 < 10
    assert_failed_cleanly(rgw, r, src, before, dest)
    assert "SignatureDoesNotMatch" in r.stderr
    assert "check that the secret access key (from the environment)" in r.stderr
    assert "retrying" not in r.stderr and "tries" not in r.stderr
    assert rgw.secret[::-1] not in r.stderr + r.stdout


def test_missing_bucket(rgw, tmp_path):
    src = tmp_path / "out"
    before = make_artifacts(str(src), big=12 * MiB)
    dest = "s3://no-such-bucket-here/x"
    r = upload(rgw, src, dest)
    assert_failed_cleanly(rgw, r, src, before, dest)
    assert "NoSuchBucket" in r.stderr
    assert f"bucket 'no-such-bucket-here' does not exist at {rgw.endpoint}" in r.stderr
    assert "retrying" not in r.stderr


def test_faults_exhausted_then_resume(rgw, tmp_path, proxies):
    src = tmp_path / "out"
    before = make_artifacts(str(src), big=12 * MiB)
    dest = f"s3://{rgw.bucket}/exhaust"
    px = proxies(rgw, fault="reset", match=r"partNumber=", times=1000, after=1000)
    r = upload(rgw, src, dest, "--max-attempts", "3", "--part-size", "5M",
               "--multipart-threshold", "5M",
               env=rgw.client_env(AWS_ENDPOINT_URL_S3=px.endpoint))
    assert_failed_cleanly(rgw, r, src, before, dest)
    assert "connection reset" in r.stderr and "after 3 tries" in r.stderr
    assert "check the network path" in r.stderr
    # the manifest never went up: the upload is not complete
    s3 = rgw.boto3()
    assert "Contents" not in s3.list_objects_v2(Bucket=rgw.bucket, Prefix="exhaust/manifest")
    # the failed multipart upload was aborted
    ups = s3.list_multipart_uploads(Bucket=rgw.bucket, Prefix="exhaust/").get("Uploads", [])
    assert ups == []
    # the command the message gave, without the fault: completes, skipping what is there
    r = upload(rgw, src, dest)
    assert r.returncode == 0, r.stderr
    assert "already there" in r.stderr
    verify_bucket(rgw, str(src), "exhaust")


def test_connection_refused(rgw, tmp_path):
    src = tmp_path / "out"
    before = make_artifacts(str(src), big=1 * MiB)
    dest = f"s3://{rgw.bucket}/refused"
    r = upload(rgw, src, dest, "--max-attempts", "2",
               env=rgw.client_env(AWS_ENDPOINT_URL_S3="http://127.0.0.1:9"))
    assert_failed_cleanly(rgw, r, src, before, dest)
    assert "could not connect" in r.stderr and "check the endpoint URL http://127.0.0.1:9" \
        in r.stderr


def test_configuration_errors(rgw, tmp_path):
    src = tmp_path / "out"
    before = make_artifacts(str(src), big=1000)
    env = rgw.client_env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None)
    r = upload(rgw, src, f"s3://{rgw.bucket}/x", env=env)
    assert r.returncode == EXIT_USAGE
    assert "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY" in r.stderr
    assert "to resume: aiprof upload" in r.stderr
    r = upload(rgw, src, f"s3://{rgw.bucket}/x", "--secret-dir", str(tmp_path / "nope"))
    assert r.returncode == EXIT_USAGE and "secret folder" in r.stderr
    r = upload(rgw, src, "s3://bucket/../x")
    assert r.returncode == EXIT_USAGE and "is not s3://bucket[/prefix]" in r.stderr
    r = upload(rgw, src, f"s3://{rgw.bucket}/x", "--endpoint-url", "http://user:pw@127.0.0.1")
    assert r.returncode == EXIT_USAGE and "user:password@" in r.stderr
    assert "pw@" not in r.stderr
    r = upload(rgw, src, f"s3://{rgw.bucket}/x", "--part-size", "1M")
    assert r.returncode == EXIT_USAGE and "--part-size" in r.stderr
    r = upload(rgw, tmp_path / "missing", f"s3://{rgw.bucket}/x")
    assert r.returncode == EXIT_OUTPUT and "No such file or directory" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = upload(rgw, empty, f"s3://{rgw.bucket}/x")
    assert r.returncode == EXIT_OUTPUT and "has no files to upload" in r.stderr
    assert {k: v for k, v in snapshot(str(src)).items() if k != "manifest.json"} == before
    r = subprocess.run([AIPROF, "upload", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "AWS_ENDPOINT_URL_S3" in r.stdout


def test_profile_straight_to_s3(rgw, tmp_path, procs):
    """`aiprof profile -o s3://…` builds the artifacts in a local staging folder, uploads
    them with the manifest last, and prints both locations."""
    from conftest import start_trainer
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "30")
    r = subprocess.run([AIPROF, "profile", "--pid", str(pid), "-d", "1s",
                        "-o", f"s3://{rgw.bucket}/profiles/run1"], capture_output=True,
                       text=True, timeout=120, env=rgw.client_env(), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert lines[0] == f"s3://{rgw.bucket}/profiles/run1"
    staging = os.path.join(str(tmp_path), lines[1])
    man = verify_bucket(rgw, staging, "profiles/run1")
    assert {"timeline.json.gz", "summary.json"} <= {a["name"] for a in man["artifacts"]}
    assert_no_secret(rgw, r, staging)


def test_profile_to_s3_failure_keeps_artifacts(rgw, tmp_path, procs):
    from conftest import start_trainer
    p, pid = start_trainer(procs, "--ranks", "1", "--run-seconds", "30")
    env = rgw.client_env(AWS_SECRET_ACCESS_KEY="wrong" + rgw.secret[5:])
    r = subprocess.run([AIPROF, "profile", "--pid", str(pid), "-d", "500ms",
                        "-o", f"s3://{rgw.bucket}/profiles/bad"], capture_output=True,
                       text=True, timeout=120, env=env, cwd=str(tmp_path))
    assert r.returncode == 7, r.stderr
    assert "aiprof upload" in r.stderr and "kept" in r.stderr
    staging = [d for d, _, files in os.walk(tmp_path) if "timeline.json.gz" in files]
    assert staging, "the local artifacts are gone"
    assert rgw.secret not in r.stderr and env["AWS_SECRET_ACCESS_KEY"] not in r.stderr


# ---- libcurl's own SigV4 signer, against the same radosgw

PROBE = os.path.join(BUILD, "tests", "s3", "curl_sigv4_probe")

# case -> (HTTP status, S3 error code or "-", curl's signature equals common/sigv4.c's for
# the bytes curl sent: "yes" / "no" / "n/a" when a signed header was never sent)
WORKS = {
    "put_object": (200, "-", "yes"),
    "put_key_special_chars": (200, "-", "yes"),      # "rank 0/stacks+ä=&.folded"
    "get_object": (200, "-", "yes"),
    "get_key_special_chars": (200, "-", "yes"),
    "head_object": (200, "-", "yes"),
    "list_objects_v2": (200, "-", "yes"),            # query written sorted
    "mp_create_uploads_equals": (200, "-", "yes"),   # "?uploads=" instead of "?uploads"
    "mp_upload_part_sorted": (200, "-", "yes"),
    "mp_abort": (204, "-", "yes"),
    "delete_object": (204, "-", "yes"),
    "put_virtual_hosted": (200, "-", "yes"),
    "put_session_token": (200, "-", "yes"),
    "mp_upload_part_for_complete": (200, "-", "yes"),
    "mp_complete": (200, "-", "yes"),
}
FAILS_ON_7_88 = {
    # the payload hash is SHA-256 of CURLOPT_POSTFIELDS (empty for an upload from a read
    # callback) and no x-amz-content-sha256 header is added (current curl falls back to
    # UNSIGNED-PAYLOAD for service "s3", as discussed in curl PR 9995)
    "put_object_no_hash_header": (403, "SignatureDoesNotMatch", "no"),
    "get_object_no_hash_header": (403, "SignatureDoesNotMatch", "yes"),
    # the query is signed as written, not sorted (curl issue 9717, fixed in 8.3.0)
    "list_objects_v2_unsorted": (403, "SignatureDoesNotMatch", "no"),
    "mp_upload_part_unsorted": (403, "SignatureDoesNotMatch", "no"),
    # "?uploads" is signed as "uploads", not "uploads=" (curl issue 10129, fixed in 8.5.0)
    "mp_create_valueless_uploads": (403, "SignatureDoesNotMatch", "no"),
    # "Expect:" (remove the header) is signed as an empty header that is never sent
    "put_header_removed_expect": (403, "SignatureDoesNotMatch", "n/a"),
}


def parse_probe(out):
    cases, version = {}, None
    for line in out.splitlines():
        if line.startswith("curl="):
            version = line[5:]
            continue
        f = dict(kv.split("=", 1) for kv in line.split())
        cases[f["case"]] = f
    return cases, version


def test_curl_7_88_sigv4_against_radosgw(rgw):
    """Why common/sigv4.c signs aiprof's S3 requests and libcurl's own signer
    (CURLOPT_AWS_SIGV4) does not: tests/s3/curl_sigv4_probe sends the requests the S3 client
    makes, signed by curl, to the real radosgw, and this pins what Debian 12's libcurl 7.88
    does with each. The forms aiprof's client could be made to send work; the forms S3
    documents (an unsorted query, "?uploads", no x-amz-content-sha256 header on an upload, a
    "Name:" entry removing a header, a fixed signing date) fail or misbehave: the reason
    written at the top of common/sigv4.c. Another libcurl may behave otherwise (curl fixed
    several of these after 7.88): then the test skips and says so, and that decision wants a
    fresh look."""
    if not os.path.exists(PROBE):
        pytest.fail(f"{PROBE} is not built (make)")
    env = rgw.client_env(S3_BUCKET=rgw.bucket, S3_VHOST_DOMAIN="localhost")
    p = subprocess.run([PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    cases, version = parse_probe(p.stdout)
    if not version or not version.startswith("7.88."):
        pytest.skip(f"libcurl {version}, not 7.88: this test pins 7.88's SigV4 behaviour "
                    "(see common/sigv4.c); rerun the probe and look again at that decision:\n"
                    + p.stdout)
    for name, (status, code, match) in {**WORKS, **FAILS_ON_7_88}.items():
        c = cases[name]
        assert (int(c["status"]), c["code"], c["match"]) == (status, code, match), \
            f"{name}: {c}\n{p.stdout}"
    # every x-amz-* header the caller adds is signed, the session token included
    assert "x-amz-security-token" in cases["put_session_token"]["signed"].split(";")
    assert "expect" in cases["put_header_removed_expect"]["signed"].split(";")
    # no fixed signing clock: a caller's x-amz-date is used, and curl sends its own too,
    # so the request carries the header twice (later curl sends only the caller's)
    assert cases["put_caller_date"]["dates"] == "2", p.stdout
    assert all(c["dates"] == "1" for n, c in cases.items() if n != "put_caller_date")


class TrickleServer:
    """A loopback HTTP server that reads each request whole, then answers with a body of one
    byte every `every` seconds that never finishes: bytes keep moving, so no stall timeout fires. Stops
    (its own thread and sockets) on stop()."""

    def __init__(self, every=0.5):
        import socket
        import threading
        self.every = every
        self.requests = []
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.done = threading.Event()
        self.conns = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        import threading
        self.sock.settimeout(0.2)
        while not self.done.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(c)
            threading.Thread(target=self.trickle, args=(c,), daemon=True).start()

    def trickle(self, c):
        head = b""
        try:
            while b"\r\n\r\n" not in head:
                chunk = c.recv(65536)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode()
            self.requests.append(line)
            h, body = head.split(b"\r\n\r\n", 1)
            m = [l for l in h.split(b"\r\n") if l.lower().startswith(b"content-length:")]
            want = int(m[0].split(b":")[1]) if m else 0
            while len(body) < want:
                chunk = c.recv(65536)
                if not chunk:
                    return
                body += chunk
            # the head at once, then the body (what libcurl counts as progress) trickles
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            for _ in range(100000):
                if self.done.wait(self.every):
                    return
                c.sendall(b"x")
        except OSError:
            return

    def stop(self):
        self.done.set()
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()
        self.sock.close()


def test_object_deadline_against_a_trickling_server(tmp_path):
    """A server that answers a byte every 0.5 s never trips the 2 s stall timeout; the
    object's deadline (--object-timeout 3s) ends the upload all the same, with a message
    that says what happened and what to change, and the local folder intact. Before the
    deadline, this upload hung for as long as the server trickled."""
    src = tmp_path / "out"
    src.mkdir()
    (src / "summary.json").write_text("{}")
    srv = TrickleServer(every=0.5)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIPROF_S3_"))}
    env.update(AWS_ENDPOINT_URL_S3=f"http://127.0.0.1:{srv.port}", AWS_ACCESS_KEY_ID="AKIDTRICKLE",
               AWS_SECRET_ACCESS_KEY="trickle-secret-value", AWS_REGION="us-east-1")
    try:
        t0 = time.monotonic()
        r = subprocess.run([AIPROF, "upload", str(src), "s3://bucket/x", "--force",
                            "--stall-timeout", "2s", "--object-timeout", "3s",
                            "--max-attempts", "3"],
                           capture_output=True, text=True, timeout=60, env=env)
        took = time.monotonic() - t0
    finally:
        srv.stop()
    assert r.returncode == EXIT_OUTPUT, r.stderr
    assert srv.requests and srv.requests[0].startswith("PUT /bucket/x/"), srv.requests
    assert "not done within the object's deadline of 3s (1 try)" in r.stderr, r.stderr
    assert "no data moved" not in r.stderr, r.stderr      # it never stalled
    assert "--object-timeout" in r.stderr, r.stderr
    assert "trickle-secret-value" not in r.stderr
    assert took < 15, took
    assert (src / "summary.json").read_text() == "{}"
    r = subprocess.run([AIPROF, "upload", str(src), "s3://bucket/x", "--object-timeout", "0.5s"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == EXIT_USAGE and "--object-timeout 0.5s: give a duration of at least 1s" \
        in r.stderr, r.stderr

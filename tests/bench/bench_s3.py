#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Upload throughput, side by side in one run: a 256 MiB artifact to the same radosgw on
127.0.0.1 (tests/s3/radosgw.sh) with `aiprof upload` and with awscli (`aws s3 cp`; boto3's
upload_file when /usr/bin/aws is missing), alternating, best of ROUNDS each. Prints both
rates and the ratio aiprof / awscli (target >= 1.0). Both clients use their defaults
(aiprof: 16 MiB parts, 4 in parallel, SHA-256 of the whole file for the manifest first;
awscli: 8 MiB parts, 10 in parallel). Wall time of the whole command, start-up included.

    BUILD=build /usr/bin/python3 tests/bench/bench_s3.py [--size-mib 256] [--rounds 2]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
import s3env  # noqa: E402

AIPROF = os.path.join(ROOT, os.environ.get("BUILD", "build"), "aiprof")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    missing = s3env.missing_ceph()
    if missing:
        print("bench_s3: skipped: Ceph is not installed (missing %s)" % ", ".join(missing))
        return 0
    if not os.access(AIPROF, os.X_OK):
        sys.exit(f"bench_s3: {AIPROF} not built (make)")

    work = tempfile.mkdtemp(prefix="aiprof-bench-s3-")
    rgw = s3env.Radosgw()
    try:
        rgw.start()
        env = rgw.client_env()
        s3 = rgw.boto3()
        art = os.path.join(work, "out")
        os.makedirs(art)
        path = os.path.join(art, "timeline.json.gz")
        size = args.size_mib << 20
        with open(path, "wb") as f:
            for _ in range(args.size_mib):
                f.write(os.urandom(1 << 20))
        sha = s3env.sha256_file(path)
        use_cli = os.path.exists("/usr/bin/aws")
        other = "awscli" if use_cli else "boto3"

        def run_aiprof(i):
            t0 = time.monotonic()
            subprocess.run([AIPROF, "upload", art, f"s3://{rgw.bucket}/bench/aiprof{i}", "-q"],
                           env=env, check=True)
            dt = time.monotonic() - t0
            head = s3.head_object(Bucket=rgw.bucket, Key=f"bench/aiprof{i}/timeline.json.gz")
            assert head["ContentLength"] == size and head["Metadata"]["sha256"] == sha
            s3.delete_object(Bucket=rgw.bucket, Key=f"bench/aiprof{i}/timeline.json.gz")
            s3.delete_object(Bucket=rgw.bucket, Key=f"bench/aiprof{i}/manifest.json")
            return dt

        def run_other(i):
            key = f"bench/{other}{i}/timeline.json.gz"
            t0 = time.monotonic()
            if use_cli:
                subprocess.run(["/usr/bin/aws", "--endpoint-url", rgw.endpoint, "s3", "cp",
                                path, f"s3://{rgw.bucket}/{key}", "--only-show-errors"],
                               env=env, check=True)
            else:
                s3.upload_file(path, rgw.bucket, key)
            dt = time.monotonic() - t0
            assert s3.head_object(Bucket=rgw.bucket, Key=key)["ContentLength"] == size
            s3.delete_object(Bucket=rgw.bucket, Key=key)
            return dt

        ours, theirs = [], []
        for i in range(args.rounds):
            ours.append(run_aiprof(i))
            theirs.append(run_other(i))
            time.sleep(6)   # let radosgw's garbage collection free the deleted data
        a, b = min(ours), min(theirs)
        mib = size / (1 << 20)
        print(f"upload {args.size_mib} MiB to radosgw on 127.0.0.1, best of {args.rounds}:")
        print(f"  aiprof upload : {a:6.2f} s  {mib / a:7.1f} MiB/s   "
              f"(all: {', '.join(f'{t:.2f}' for t in ours)})")
        print(f"  {other:<13} : {b:6.2f} s  {mib / b:7.1f} MiB/s   "
              f"(all: {', '.join(f'{t:.2f}' for t in theirs)})")
        ratio = b / a
        print(f"  throughput ratio aiprof/{other}: {ratio:.2f} (target >= 1.0)"
              + ("" if ratio >= 1.0 else "  BELOW TARGET"))
        return 0
    finally:
        rgw.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

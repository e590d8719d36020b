#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The part of a container runtime shim that the tests need (what containerd-shim-runc does):
become a child subreaper, `runc run -d --pid-file` one container, then wait for the container's
init process — which is re-parented to us when runc exits — and record how it ended.

    shim.py --runc runc --root STATE --bundle DIR --pid-file F --status F --log F ID

The container's stdout and stderr go to --log. --status receives one JSON object, written
atomically: {"exitCode": N, "signal": S or null, "finishedAt": unix seconds} when the init
process ended (exitCode 128+S when killed by a signal, as container runtimes report it), or
{"runcError": text, "exitCode": N} when runc could not start it. Only this shim's own
descendants are ever waited for."""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def write_status(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    for a in ("--runc", "--root", "--bundle", "--pid-file", "--status", "--log"):
        ap.add_argument(a, required=True)
    ap.add_argument("id")
    o = ap.parse_args()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        write_status(o.status, {"runcError": f"prctl: errno {ctypes.get_errno()}", "exitCode": -1})
        return 1
    # runc -d passes its stdio on to the container: both go to the log (a pipe would stay
    # open as long as the container runs)
    with open(o.log, "ab", buffering=0) as log:
        start = log.tell()
        r = subprocess.run([o.runc, "--root", o.root, "run", "-d", "--bundle", o.bundle,
                            "--pid-file", o.pid_file, o.id],
                           stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    if r.returncode != 0:
        with open(o.log, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        write_status(o.status, {"runcError": text[-4000:], "exitCode": r.returncode})
        return 1
    with open(o.pid_file) as f:
        pid = int(f.read().strip())
    # Reap every descendant that ends up with us; stop when the container's init is gone.
    while True:
        try:
            got, status = os.waitpid(-1, 0)
        except ChildProcessError:   # init was not re-parented to us (cannot happen with runc -d)
            write_status(o.status, {"runcError": "lost the container's init process", "exitCode": -1})
            return 1
        if got != pid:
            continue
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            res = {"exitCode": 128 + sig, "signal": sig}
        else:
            res = {"exitCode": os.WEXITSTATUS(status), "signal": None}
        res["finishedAt"] = time.time()
        write_status(o.status, res)
        return 0


if __name__ == "__main__":
    sys.exit(main())

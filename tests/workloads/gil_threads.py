#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Two busy threads, one holding the GIL and one not, for the GIL flag's tests.

    python3 gil_threads.py [--seconds S]

"python-loop" runs pure Python (it holds the GIL whenever it runs); "hashing" spends its
time in hashlib.sha256 over 64 MiB, which releases the GIL while it hashes. Prints
"thread NATIVE_ID NAME" for each, then "ready pid=PID".
"""
import argparse
import hashlib
import threading
import time

SAID = threading.Semaphore(0)
LOCK = threading.Lock()


def say(name):
    with LOCK:
        print(f"thread {threading.get_native_id()} {name}", flush=True)
    SAID.release()


def python_loop(stop):
    say("python-loop")
    n = 0
    while not stop.is_set():
        for i in range(10000):
            n += i * i


def hashing(stop):
    say("hashing")
    data = b"x" * (64 << 20)
    while not stop.is_set():
        hashlib.sha256(data).digest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    stop = threading.Event()
    ts = [threading.Thread(target=python_loop, args=(stop,), name="python-loop", daemon=True),
          threading.Thread(target=hashing, args=(stop,), name="hashing", daemon=True)]
    for t in ts:
        t.start()
    SAID.acquire()
    SAID.acquire()
    print(f"ready pid={threading.get_native_id()}", flush=True)
    time.sleep(a.seconds)
    stop.set()


if __name__ == "__main__":
    main()

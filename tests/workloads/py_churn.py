# SPDX-License-Identifier: MIT
"""Workload for thread snapshots: 3 long-lived Python threads that sleep in Python
(`steady`), and worker threads that come and go (`churn`, each lives --min-ms to --max-ms,
--churners of them at a time), for --seconds. Every thread start and end is written to --log as
"start|end NATIVE_TID MONOTONIC_NS" once it has happened (start: before the thread's first
Python frame of its own runs, end: after it was joined). Prints "ready pid=N steady=T1,T2,T3".
"""
import argparse
import os
import random
import threading
import time

log_lock = threading.Lock()


def note(f, what, tid):
    with log_lock:
        f.write("%s %d %d\n" % (what, tid, time.monotonic_ns()))
        f.flush()


def steady_nap(stop):
    while not stop.is_set():
        time.sleep(0.01)


def steady(stop, ids, ready):
    ids.append(threading.get_native_id())
    ready.release()
    steady_nap(stop)


def churn_work(ms):
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        sum(range(200))
        time.sleep(0.001)


def churn(f, stop, lo, hi):
    while not stop.is_set():
        box = []
        started = threading.Event()

        def body():
            box.append(threading.get_native_id())
            started.set()
            churn_work(random.uniform(lo, hi))

        t = threading.Thread(target=body)
        t.start()
        started.wait()
        note(f, "start", box[0])
        t.join()
        note(f, "end", box[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--log", required=True)
    ap.add_argument("--churners", type=int, default=2)
    ap.add_argument("--min-ms", type=float, default=5)
    ap.add_argument("--max-ms", type=float, default=60)
    a = ap.parse_args()
    stop = threading.Event()
    ids, ready = [], threading.Semaphore(0)
    f = open(a.log, "w")
    longs = [threading.Thread(target=steady, args=(stop, ids, ready), name="steady-%d" % i)
             for i in range(3)]
    for t in longs:
        t.start()
    for _ in longs:
        ready.acquire()
    churners = [threading.Thread(target=churn, args=(f, stop, a.min_ms, a.max_ms))
                for _ in range(a.churners)]
    for t in churners:
        t.start()
    print("ready pid=%d steady=%s" % (os.getpid(), ",".join(map(str, ids))), flush=True)
    time.sleep(a.seconds)
    stop.set()
    for t in churners + longs:
        t.join()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Python threads that block, for the off-CPU stack and `aiprof stacks` tests.

The main thread sleeps in short naps (clock_nanosleep), a second thread waits on an Event
with a timeout (a futex), a third is stuck in pause() from the start. All through Debian's
python3, which has no frame pointers. Prints "ready pid=N stuck=TID" and runs until killed.
"""
import os
import signal
import threading
import time


def nap():
    time.sleep(0.01)


def napper():
    while True:
        nap()


def wait_once(ev):
    ev.wait(0.01)


def waiter():
    ev = threading.Event()
    while True:
        wait_once(ev)


def stuck(tid):
    tid.append(threading.get_native_id())
    signal.pause()


def main():
    tid = []
    threading.Thread(target=waiter, name="waiter", daemon=True).start()
    threading.Thread(target=stuck, args=(tid,), name="stuck", daemon=True).start()
    while not tid:
        time.sleep(0.001)
    print(f"ready pid={os.getpid()} stuck={tid[0]}", flush=True)
    napper()


if __name__ == "__main__":
    main()

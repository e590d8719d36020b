#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Two Python threads that keep blocking, for the off-CPU stack tests.

The main thread sleeps in short naps (clock_nanosleep), a second thread waits on an Event
with a timeout (a futex). Both through Debian's python3, which has no frame pointers.
Prints "ready pid=N" and runs until killed.
"""
import os
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


def main():
    threading.Thread(target=waiter, name="waiter", daemon=True).start()
    print(f"ready pid={os.getpid()}", flush=True)
    napper()


if __name__ == "__main__":
    main()

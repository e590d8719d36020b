#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Threads with the names a program gives them, for the tests that read those names.

    python3 named_threads.py [--seconds S]

Starts, after printing "ready pid=PID": a busy thread named CustomThreadName-3, a
threading.Thread subclass named with non-ASCII text, one whose name holds terminal escapes
(which must reach a terminal as text), one whose instance dict was looked at (made), and one
started by _thread (no threading name). After --late seconds one more, "started-later".
The main thread renames itself "trainer-main". Each thread prints "thread NATIVE_ID NAME"
(NAME as repr()), the _thread one "bare NATIVE_ID", all before "ready".
"""
import _thread
import argparse
import threading
import time

LOCK = threading.Lock()
SAID = threading.Semaphore(0)       # one release per thread that said its name


def say(*parts):
    with LOCK:
        print(*parts, flush=True)
    SAID.release()


def busy(stop):
    say("thread", threading.get_native_id(), repr(threading.current_thread().name))
    while not stop.is_set():
        sum(range(2000))
        time.sleep(0.002)


def sleeper(stop):
    say("thread", threading.get_native_id(), repr(threading.current_thread().name))
    stop.wait()


class Worker(threading.Thread):
    def __init__(self, stop, **kw):
        super().__init__(daemon=True, **kw)
        self.stop = stop

    def run(self):
        sleeper(self.stop)


def bare(stop):
    say("bare", threading.get_native_id())
    stop.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--late", type=float, default=1.0)
    a = ap.parse_args()
    threading.current_thread().name = "trainer-main"     # the main thread renamed
    stop = threading.Event()
    threads = [
        threading.Thread(target=busy, args=(stop,), name="CustomThreadName-3", daemon=True),
        Worker(stop, name="data-loader \u00e9\u4e16"),
        threading.Thread(target=sleeper, args=(stop,), name="evil\x1b[31m\nname", daemon=True),
        threading.Thread(target=sleeper, args=(stop,), name="with-a-dict", daemon=True),
    ]
    threads[3].__dict__["extra"] = 1        # its instance dict made
    for t in threads:
        t.start()
    _thread.start_new_thread(bare, (stop,))
    for _ in range(len(threads) + 1):
        SAID.acquire()                  # every one has said its name before "ready"
    say("thread", threading.get_native_id(), repr(threading.current_thread().name))
    say(f"ready pid={threading.get_native_id()}")
    time.sleep(a.late)
    late = threading.Thread(target=sleeper, args=(stop,), name="started-later", daemon=True)
    late.start()
    time.sleep(a.seconds)
    stop.set()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Waits at known rates, for the record-rate tests (tests/integration/test_record_rate.py):
   "short"      sleeps 2 ms at a time (clock_nanosleep: a long block and a slow call, about
                400 a second)
   "long"       sleeps 30 ms at a time (always recorded: at least 10 ms)
   "ping/pong"  pass a byte back and forth over a socket pair (short waits in read(),
                thousands a second)
   "many"       waits 2 ms at a time in select() on 64 pipes in turn, each its own site (more
                than a thread's site slots, so the record rate is what bounds its records)
   "ab"         sleeps 2 ms at a time from wait_a() and wait_b() in turn (one C call site, two
                Python ones: half its time in each)
   "nap"        sleeps 0.3 s at a time in nap() (waits as long as a budget's pause)
   "doze"       sleeps 1.2 s at a time (longer than a budget's longest pause, 1 s)
Prints "ready pid=N ab_tid=N doze_tid=N long_tid=N many_tid=N nap_tid=N ping_tid=N pong_tid=N
short_tid=N", then
runs until killed."""
import os
import select
import socket
import threading
import time

tids = {}


def short():
    tids["short"] = threading.get_native_id()
    while True:
        time.sleep(0.002)


def long_():
    tids["long"] = threading.get_native_id()
    while True:
        time.sleep(0.03)


def many():
    tids["many"] = threading.get_native_id()
    pipes = [os.pipe() for _ in range(64)]    # never written: each select() times out
    while True:
        for r, _ in pipes:
            select.select([r], [], [], 0.002)


def nap():
    tids["nap"] = threading.get_native_id()
    while True:
        time.sleep(0.3)


def doze():
    tids["doze"] = threading.get_native_id()
    while True:
        time.sleep(1.2)


def wait_a():
    time.sleep(0.002)


def wait_b():
    time.sleep(0.002)


def ab():
    tids["ab"] = threading.get_native_id()
    while True:
        wait_a()
        wait_b()


def player(name, sock, first):
    tids[name] = threading.get_native_id()
    if first:
        sock.send(b"x")
    while True:
        if not sock.recv(1):
            return
        sock.send(b"x")


def main():
    a, b = socket.socketpair()
    for fn, args in ((short, ()), (long_, ()), (player, ("ping", a, True)),
                     (player, ("pong", b, False)), (many, ()), (ab, ()), (nap, ()), (doze, ())):
        threading.Thread(target=fn, args=args, daemon=True).start()
    while len(tids) < 8:
        time.sleep(0.01)
    print(f"ready pid={os.getpid()} " + " ".join(f"{k}_tid={v}" for k, v in sorted(tids.items())),
          flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()

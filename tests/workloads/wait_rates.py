#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Waits at known rates, for the record-rate tests (tests/integration/test_record_rate.py):
   "short"      sleeps 2 ms at a time (clock_nanosleep: a long block and a slow call, about
                400 a second)
   "long"       sleeps 30 ms at a time (always recorded: at least 10 ms)
   "ping/pong"  pass a byte back and forth over a socket pair (short waits in read(),
                thousands a second)
Prints "ready pid=N short_tid=N long_tid=N ping_tid=N pong_tid=N", then runs until killed."""
import os
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
                     (player, ("pong", b, False))):
        threading.Thread(target=fn, args=args, daemon=True).start()
    while len(tids) < 4:
        time.sleep(0.01)
    print(f"ready pid={os.getpid()} " + " ".join(f"{k}_tid={v}" for k, v in sorted(tids.items())),
          flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()

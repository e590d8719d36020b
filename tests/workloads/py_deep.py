# SPDX-License-Identifier: MIT
"""Workload for deep Python stacks: main() -> descend() DEPTH frames deep -> spin() (on the
CPU) or a sleep (--sleep), for --seconds. Prints "ready pid=N depth=DEPTH" once at depth."""
import argparse
import os
import sys
import time


def spin(until, sleep):
    while time.time() < until:
        if sleep:
            time.sleep(0.05)
        else:
            sum(i * i for i in range(2000))


def descend(n, until, sleep):
    if n == 0:
        print("ready pid=%d depth=%d" % (os.getpid(), DEPTH), flush=True)
        spin(until, sleep)
        return 0
    return descend(n - 1, until, sleep) + 1


def main():
    global DEPTH
    ap = argparse.ArgumentParser()
    ap.add_argument("--depth", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--sleep", action="store_true")
    a = ap.parse_args()
    DEPTH = a.depth
    sys.setrecursionlimit(a.depth + 1000)
    descend(a.depth, time.time() + a.seconds, a.sleep)


DEPTH = 0
if __name__ == "__main__":
    main()

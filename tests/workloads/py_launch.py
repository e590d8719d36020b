# SPDX-License-Identifier: MIT
"""Workload for Python frames at kernel launches: a training loop in Python that calls a
compiled extension (libpylaunch.so, through ctypes) which launches kernels on the fake CUDA
runtime, as a framework's C++ ops do. Call paths:

    main -> train -> train_step -> forward_pass  -> pl_forward  -> py_matmul_kernel
                                -> backward_pass -> pl_backward -> py_grad_kernel

Prints "ready pid=N" once the extension is loaded and runs for --seconds (default 60).
--cupti loads the fake libcupti.so.13 so that a profile has kernel times.
"""
import argparse
import ctypes
import os
import sys
import time

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "tests", "workloads",
                   "libpylaunch.so")


def forward_pass(lib):
    if lib.pl_forward() != 0:
        raise RuntimeError("pl_forward failed")


def backward_pass(lib):
    if lib.pl_backward() != 0:
        raise RuntimeError("pl_backward failed")


def train_step(lib):
    forward_pass(lib)
    backward_pass(lib)
    if lib.pl_sync() != 0:
        raise RuntimeError("pl_sync failed")


def train(lib, seconds):
    end = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < end:
        train_step(lib)
        steps += 1
        time.sleep(0.001)
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--lib", default=LIB)
    ap.add_argument("--cupti", action="store_true")
    a = ap.parse_args()
    lib = ctypes.CDLL(a.lib)
    if lib.pl_init(1 if a.cupti else 0) != 0:
        sys.exit(1)
    print(f"ready pid={os.getpid()}", flush=True)
    steps = train(lib, a.seconds)
    print(f"steps={steps}", flush=True)


if __name__ == "__main__":
    main()

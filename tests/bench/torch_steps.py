#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A PyTorch training loop (CPU, one thread) that reports its step times, for benchmarks.

Prints "ready pid=N", then "steps t=<CLOCK_MONOTONIC ns> n=<steps> ns=<ns for them>" every
20 steps until killed.
"""
import os
import time

import torch
from torch import nn


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    x = torch.randn(64, 64)
    y = x[:, :8].sum(dim=1, keepdim=True)
    print(f"ready pid={os.getpid()}", flush=True)
    while True:
        t0 = time.monotonic_ns()
        for _ in range(20):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        t1 = time.monotonic_ns()
        print(f"steps t={t1} n=20 ns={t1 - t0}", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A real PyTorch DataLoader with worker processes that come and go, for the follow tests.

num_workers=2, not persistent: every epoch (about half a second) forks its two workers
anew. Each sample is "decoded" in decode_sample() (CPU work); with --slow-worker W the
worker W also waits in slow_fetch() (a remote read that takes 40 ms) for every sample, so
the training loop keeps waiting for its batches. Prints "ready pid=N" and runs until
killed.
"""
import argparse
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

SLOW = -1


def decode_sample(i):
    x = torch.full((64, 64), float(i) / 64)
    for _ in range(60):
        x = torch.tanh(x @ x) * 0.5
    return x[0]


def slow_fetch():
    time.sleep(0.04)


class Samples(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        info = get_worker_info()
        if info is not None and info.id == SLOW:
            slow_fetch()
        return decode_sample(i)


def train_step(model, batch):
    return model(batch).sum().item()


def main():
    global SLOW
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slow-worker", type=int, default=-1)
    args = ap.parse_args()
    SLOW = args.slow_worker
    torch.set_num_threads(1)
    model = torch.nn.Linear(64, 1)
    loader = DataLoader(Samples(), batch_size=8, num_workers=2, persistent_workers=False)
    print(f"ready pid={os.getpid()}", flush=True)
    while True:
        for batch in loader:
            train_step(model, batch)


if __name__ == "__main__":
    sys.exit(main())

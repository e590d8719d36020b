#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A small real PyTorch training loop (CPU) for the demo and for tests.

An MLP on a synthetic regression task, with a DataLoader and a periodic checkpoint.
Prints "ready pid=N" once the model is built and, at the end, the final loss.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def build_model(width):
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 1))


def train_step(model, opt, loss_fn, x, y):
    opt.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=6.0, help="how long to train")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--checkpoint-every", type=int, default=50)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    n = 4096
    x = torch.randn(n, 64)
    y = x[:, :8].sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch, shuffle=True)
    model = build_model(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    ckpt_dir = tempfile.mkdtemp(prefix="aiprof-torch-")
    print(f"ready pid={os.getpid()}", flush=True)

    step, loss = 0, float("nan")
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for bx, by in loader:
            loss = train_step(model, opt, loss_fn, bx, by)
            step += 1
            if step % args.checkpoint_every == 0:
                torch.save(model.state_dict(), os.path.join(ckpt_dir, "model.pt"))
            if time.monotonic() >= end:
                break
    for f in os.listdir(ckpt_dir):
        os.unlink(os.path.join(ckpt_dir, f))
    os.rmdir(ckpt_dir)
    print(f"steps={step} loss={loss:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A real PyTorch program, small and deterministic, for attaching while it starts.

It imports torch (the second or so in which the loader maps libtorch and runs its
constructors, the window in which an unsafe injection aborted processes), trains a small
MLP with a fixed seed for --steps steps on two intra-op threads, and prints
"result=<loss>" with every digit, so that a profiled run can be compared with an unprofiled
one exactly. "rank=N" is printed first when RANK is set (the launcher's ranks).

    python3 torch_startup.py --steps 120
"""
import argparse
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=120)
    args = ap.parse_args()
    import torch

    torch.manual_seed(1234)
    torch.set_num_threads(2)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(256, 64)
    y = torch.randint(0, 10, (256,))
    loss = None
    for _ in range(args.steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    if "RANK" in os.environ:
        print(f"rank={os.environ['RANK']}", flush=True)
    print(f"result={loss.item()!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

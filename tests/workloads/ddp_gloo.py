#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A real 2-rank DistributedDataParallel job over gloo (CPU, loopback), for torchrun.

Each rank trains the same small MLP on its own shard of a fixed random data set; DDP
all-reduces the gradients over gloo in every backward pass. Every rank prints
"rank=R result=<loss>" (its last loss, every digit) at the end, so that a profiled run can
be compared with an unprofiled one.

    python3 -m torch.distributed.run --nproc_per_node 2 --master_port 29531 ddp_gloo.py --steps 40
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(7)
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(512, 32, generator=g)
    y = torch.randint(0, 4, (512,), generator=g)
    xs, ys = x[rank::2], y[rank::2]
    loss = None
    for _ in range(args.steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xs), ys)
        loss.backward()
        opt.step()
    print(f"rank={rank} result={loss.item()!r}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

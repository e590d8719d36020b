#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A real two-rank torch.distributed job on the gloo backend (CPU, loopback) that hangs.

Both ranks run a few all_reduce steps; then the rank given by --stop-rank stops before its
next all_reduce (it sleeps in evaluate_forever()), and the other waits in that all_reduce
forever. Each rank prints "ready pid=N rank=R" just before it stops or waits.

    RANK=0 python3 gloo_hang.py --port 29512 & RANK=1 python3 gloo_hang.py --port 29512
"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist


def evaluate_forever():
    while True:
        time.sleep(1)


def train_step(t):
    dist.all_reduce(t)
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--stop-rank", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(hours=1))
    t = torch.ones(1 << 16)
    for _ in range(args.steps):
        train_step(t)
    print(f"ready pid={os.getpid()} rank={rank}", flush=True)
    if rank == args.stop_rank:
        evaluate_forever()
    train_step(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())

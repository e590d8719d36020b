#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Small real PyTorch jobs (Debian's python3-torch, CPU) for the cost benchmark
(tests/bench/bench_cost.py): each runs until killed, prints "ready pid=N" once warm, then
"it t=<CLOCK_MONOTONIC ns> n=<iterations so far> cpu=<this process's CPU ns>" about every
100 ms, so that a rate can be read over any window.

    real_jobs.py ddp      one rank of a 2-rank DistributedDataParallel job over gloo (on
                          loopback; RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the
                          environment, as torchrun sets them): a small MLP, gradients
                          all-reduced in every backward pass; rank 0 reports
    real_jobs.py loader   a training loop fed by a DataLoader with 2 forked worker processes
                          that decode samples (CPU work in the workers, waits in the loop)
    real_jobs.py blas     a step dominated by BLAS: large matrix products on 2 threads
    real_jobs.py serve    an inference-style request loop: a client thread sends small
                          requests over a local socket, a server thread answers each with a
                          forward pass of a small model; many short waits on both sides
"""
import os
import socket
import sys
import threading
import time

import torch
from torch import nn


def report_every(step_fn, every_ns=100_000_000):
    print(f"ready pid={os.getpid()}", flush=True)
    n, last = 0, 0
    while True:
        n += step_fn()
        now = time.monotonic_ns()
        if now - last >= every_ns:
            print(f"it t={now} n={n} cpu={time.process_time_ns()}", flush=True)
            last = now


def ddp():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(7)
    torch.set_num_threads(1)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 1)

    def step():
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        return 1
    for _ in range(20):
        step()
    if rank == 0:
        report_every(step)
    while True:
        step()


class Decoded(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        a = torch.randn(48, 48, generator=g)
        for _ in range(4):
            a = torch.tanh(a @ a.T / 48)   # the "decode": CPU work in the worker
        return a.flatten()[:256], a.sum().reshape(1)


def loader():
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    it = iter(torch.utils.data.DataLoader(Decoded(), batch_size=16, num_workers=2,
                                          persistent_workers=True, prefetch_factor=2))

    def step():
        x, y = next(it)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        return 1
    report_every(step)


def blas():
    torch.set_num_threads(2)
    torch.manual_seed(3)
    w1, w2 = torch.randn(512, 512, requires_grad=True), torch.randn(512, 512, requires_grad=True)
    x = torch.randn(128, 512)

    def step():
        loss = torch.relu(x @ w1) @ w2
        loss.sum().backward()
        with torch.no_grad():
            for w in (w1, w2):
                w.sub_(1e-6 * w.grad)
                w.grad = None
        return 1
    report_every(step)


def serve():
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).eval()
    a, b = socket.socketpair()

    def server():
        with torch.no_grad():
            while True:
                req = a.recv(4096)
                if not req:
                    return
                x = torch.frombuffer(bytearray(req[:128]), dtype=torch.float32).reshape(1, 32)
                a.sendall(model(x).numpy().tobytes())
    threading.Thread(target=server, daemon=True).start()
    payload = torch.randn(32).numpy().tobytes()

    def step():
        b.sendall(payload)
        b.recv(4096)
        return 1
    report_every(step)


if __name__ == "__main__":
    jobs = {"ddp": ddp, "loader": loader, "blas": blas, "serve": serve}
    if len(sys.argv) != 2 or sys.argv[1] not in jobs:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(jobs)}")
    jobs[sys.argv[1]]()

#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A launcher in the way of torchrun: it starts --ranks real Python ranks (fork + exec of
torch_startup.py, RANK/LOCAL_RANK/WORLD_SIZE in their environment), --stagger seconds
apart, waits for them all, and prints each rank's result line ("rank R result=...").
It exits 1 if any rank failed (as torchrun tears a job down when one rank dies), with the
rank's exit status on stderr.

    python3 torch_launcher.py --ranks 2 --steps 120
"""
import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--stagger", type=float, default=0.3)
    ap.add_argument("--script", default="torch_startup.py")
    ap.add_argument("--port", type=int, default=29530)
    args = ap.parse_args()
    print(f"launcher pid={os.getpid()}", flush=True)
    ranks = []
    for r in range(args.ranks):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.ranks),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
        ranks.append(subprocess.Popen([sys.executable, os.path.join(HERE, args.script),
                                       "--steps", str(args.steps)], env=env,
                                      stdout=subprocess.PIPE, text=True))
        time.sleep(args.stagger)
    bad = 0
    for r, p in enumerate(ranks):
        out, _ = p.communicate()
        results = [l[l.index("result="):] for l in out.splitlines() if "result=" in l]
        if p.returncode != 0 or not results:
            print(f"rank {r} failed: status {p.returncode}", file=sys.stderr, flush=True)
            bad = 1
        else:
            print(f"rank {r} {results[0]}", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())

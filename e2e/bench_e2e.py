#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Benchmark of the whole chain on the real Kubernetes (e2e/chain.py: the ../shared/k8s kit's
API server, scheduler, kubelet, containerd and runc; aiprof-controller; radosgw): for sessions
over 1, 2 and 4 ranks, the time from `kubectl apply -f` of the ProfilingSession to its first
Event (the controller has acted: injectors created) and to Succeeded, beside the session's own
window (so the chain's overhead reads directly), and the merged timeline's residual clock skew
(target <= 50 us on one machine) from the merge pod's summary.json. The trainers load the fake
CUPTI (--cupti), so their collectives' kernels are recorded and the merge aligns on the kernels'
ends; the basis it used is printed. Both times are seen by polling the API server every 0.1 s.

    /usr/bin/python3 e2e/bench_e2e.py [--ranks 1,2,4] [--duration 3s] [--rounds 1]

Run as root. Ends with one line per rank count. Starts and stops its own cluster (set
AIPROF_TEST_K8S_* to keep it apart from another suite's)."""
import argparse
import json
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from e2e.chain import GROUP, Chain, end_env, merged_artifacts, missing, new_env, realk8s, residual_skew  # noqa: E402


def one_session(env, n, duration, i):
    job = f"b{n}r{i}"
    env.ranks(n, job, "--cupti")
    name = f"bench-{n}-{i}"
    events = f"/api/v1/namespaces/{env.ns}/events"
    sel = {"fieldSelector": f"involvedObject.name={name},involvedObject.kind=ProfilingSession"}
    t0 = time.monotonic()
    env.session(name, {"selector": {"matchLabels": {"job": job}}, "container": "trainer"}, duration=duration)
    first_event = None
    while time.monotonic() - t0 < 180:
        if first_event is None and env.kube.get(events, query=sel).json.get("items"):
            first_event = time.monotonic() - t0
        r = env.kube.get(f"{GROUP}/namespaces/{env.ns}/profilingsessions/{name}")
        if r.status == 200 and (r.json.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            break
        time.sleep(0.1)
    elapsed = time.monotonic() - t0
    s, _ = env.wait_phase(name, ("Succeeded", "Failed"), timeout=5)
    st = s["status"]
    if st["phase"] != "Succeeded":
        raise RuntimeError(f"{name}: {st['phase']}: {st.get('message')}")
    skew = None
    m = merged_artifacts(st)
    if "summary.json" in m:
        summary = json.loads(env.get_object(m["summary.json"]["url"]))
        skew = dict(residual_skew(summary))
        skew["basis"] = summary["alignment"].get("basis", "host_call_end")
        # every rank ran on this node's one clock, which the merge sees (clock "shared"): no
        # offset is fitted; the fit itself is measured by tests/integration/test_merge.py
        skew["clocks"] = ",".join(sorted({r.get("clock") or "unaligned" for r in summary["ranks"]}))
    return elapsed, first_event, skew, st


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--duration", default="3s")
    ap.add_argument("--rounds", type=int, default=1)
    o = ap.parse_args()
    why = missing()
    if why:
        print(f"e2e benchmark not run: {why}")
        return 0
    window = float(o.duration.rstrip("s"))
    chain = Chain()
    rows = []
    try:
        t0 = time.monotonic()
        chain.start()
        print(f"real cluster up in {chain.cluster.startup_s:.1f} s, images built and imported in "
              f"{chain.images_s:.1f} s, chain ready {time.monotonic() - t0:.1f} s after start", flush=True)
        for n in [int(x) for x in o.ranks.split(",")]:
            env = new_env(chain, f"bench-{n}-{uuid.uuid4().hex[:4]}")
            try:
                env.controller()
                times, firsts, skews, merged = [], [], [], "no merge (1 rank)" if n == 1 else None
                for i in range(o.rounds):
                    elapsed, first, skew, st = one_session(env, n, o.duration, i)
                    times.append(elapsed)
                    firsts.append(first if first is not None else float("nan"))
                    if skew:
                        skews.append(skew)
                    elif n > 1:
                        cond = next((c for c in st.get("conditions") or [] if c["type"] == "Merged"), None)
                        merged = ("no merge pod: the controller does not make one in this build" if cond is None
                                  else f"merge failed: {cond.get('message')}")
                rows.append((n, statistics.median(times), skews, merged))
                sk = (f"residual skew p50 {max(s['p50'] for s in skews):.1f} us, max {max(s['max'] for s in skews):.1f} us"
                      f" over {sum(s['collectives'] for s in skews)} collectives (target <= 50 us) on "
                      f"{'/'.join(sorted(set(s['basis'] for s in skews)))}; "
                      f"rank clocks {'/'.join(sorted(set(s['clocks'] for s in skews)))}"
                      if skews else f"residual skew n/a ({merged})")
                print(f"ranks {n}: apply -> first event {statistics.median(firsts):.2f} s, "
                      f"apply -> Succeeded {statistics.median(times):.1f} s "
                      f"(window {window:g} s, chain overhead {statistics.median(times) - window:.1f} s); {sk}",
                      flush=True)
            finally:
                end_env(env)
    finally:
        chain.stop()
        realk8s.stop_shared()
    worst = max((s["p50"] for _, _, skews, _ in rows for s in skews), default=None)
    if worst is not None and worst > 50:
        print(f"residual skew p50 {worst:.1f} us is above the 50 us target (on host call ends it is the "
              "ranks' wake-up jitter at collective ends on this loaded 2-core machine)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

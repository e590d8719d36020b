# SPDX-License-Identifier: MIT
"""Leader election that fences, against the REAL API server (the `api`/`env` fixtures of
test_controller.py): two aiprof-controller processes on one Lease, each through a fault proxy
of its own (tests/k8s/apifaults.py), since both send the same user and user agent and the
audit log cannot tell them apart — each proxy's log is one controller's requests, timed on
the test's clock. The leader's lease renewals are made slow (its proxy holds every PUT on the
Lease 8 s before forwarding it, longer than the whole 3 s lease), while new sessions keep
coming, so that whoever leads wants to write all the time.

Lease 3 s, renew deadline 2 s, retry period 500 ms (harness.LEASE_SHORT, asked for here)."""
import itertools
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))

from apifaults import ApiFaults  # noqa: E402
from harness import LEASE_SHORT, wait_for  # noqa: E402
from test_controller import api, env, make_session, pytestmark  # noqa: E402,F401  (fixtures)

LEASE_S, RENEW_S, RETRY_S = 3.0, 2.0, 0.5
WRITES = ("POST", "PUT", "PATCH", "DELETE")
# POSTs that store nothing: the reviews behind the metrics endpoint's authentication, which a
# standby makes too (controller/httpauth.c)
REVIEWS = ("/apis/authentication.k8s.io/", "/apis/authorization.k8s.io/")
LEASE_PATH = r"/leases(/aiprof-controller)?$"


def writes(proxy):
    """The controller's writes through proxy, the Lease's own and reviews left out."""
    return [r for r in proxy.requests() if r["method"] in WRITES and "/leases" not in r["path"]
            and not r["path"].startswith(REVIEWS)]


def lease_writes(proxy, ok=True):
    """Its writes of the Lease; ok: those the server took (answered 200/201 in time)."""
    return [r for r in proxy.requests(path=LEASE_PATH) if r["method"] in ("POST", "PUT") and
            (not ok or (r["code"] in (200, 201) and r["fault"] is None))]


def churn(env, until, timeout, what, names=itertools.count()):
    """A new session every 250 ms until until() is true: each one makes the leader write (its
    finalizer, its status). The sessions' target does not exist: no pods are made."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if until():
            return
        make_session(env, name=f"s-{next(names)}", targets={"podName": "absent"}, duration="300s")
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def proxied(env, name):
    proxy = ApiFaults(env["api"]["cluster"]).start()
    return proxy, proxy.kubeconfig(os.path.join(env["api"]["tmp"], f"{env['ns']}-{name}.kubeconfig"))


def test_slow_renewals_never_two_writers(env):
    """The leader's renewals hang in a slow API server: it stops acting at its renew deadline
    (2 s after its last renewal began, on its own clock: every write refused from then on)
    and exits 1; the standby takes the lease no sooner than the lease's 3 s after that renewal,
    so that there is no moment where both controllers wrote: every write of the old leader
    came in before its deadline and was answered before the new leader's first write. The
    handover takes at most lease + retry after the old leader's deadline, and the slow
    server's late renewal, when it comes, is refused (409: the new leader holds the lease)."""
    ns = env["ns"]
    pa, kca = proxied(env, "a")
    pb, kcb = proxied(env, "b")
    try:
        a = env["controller"](name="a", kubeconfig=kca, lease=LEASE_SHORT)
        wait_for(a.leader, 10, "a to lead")
        b = env["controller"](name="b", kubeconfig=kcb, lease=LEASE_SHORT)
        churn(env, lambda: len(writes(pa)) >= 3, 10, "a to write")
        assert not b.leader() and not writes(pb), [(r["method"], r["path"], r["code"]) for r in writes(pb)]

        pa.fault(rf"/namespaces/{ns}/leases/aiprof-controller$", method="PUT", action="delay",
                 delay=8, times=10 ** 6)
        churn(env, lambda: a.p.poll() is not None, 8, "a to give up the lease")
        churn(env, b.leader, 8, "b to take over")
        churn(env, lambda: writes(pb), 5, "b to write")
        churn(env, lambda: False if time.sleep(0.25) else len(writes(pb)) >= 3, 5, "b to write more")

        assert a.p.returncode == 1, a.text()[-2000:]
        log = a.text()
        assert "lost the lease" in log and "stopped acting at the renew deadline" in log, log[-2000:]

        last_renew = max(r["time"] for r in lease_writes(pa))
        deadline = last_renew + RENEW_S     # a's right to act ended no later: its round began before
        take = min(r["time"] for r in lease_writes(pb))
        wa, wb = writes(pa), writes(pb)
        late = [r for r in wa if r["time"] >= deadline]
        assert not late, "a wrote after its deadline: " + ", ".join(
            f"{r['method']} {r['path'].split('/namespaces/')[-1]} +{r['time'] - deadline:.3f} s" for r in late)
        # every write of a was done by the server (answered, whether or not a was still
        # there to read it: a request cut at the deadline may be) before b's first write
        assert all(r["answered"] for r in wa), [r for r in wa if not r["answered"]]
        first_b = min(r["time"] for r in wb)
        assert max(r["answered"] for r in wa) < first_b, "a write of a was answered after b's first write"
        assert not lease_writes(pb, ok=False) or min(r["time"] for r in lease_writes(pb, ok=False)) >= take
        # b waited out the whole lease after a's last renewal (which it saw no sooner than it
        # was made), and took it within a retry period of the lease running out
        assert take > last_renew + LEASE_S, (take - last_renew)
        assert take - deadline <= LEASE_S + RETRY_S, (take - deadline)
        assert first_b > take

        # the renewal the slow server forwards late is refused: b holds the lease
        wait_for(lambda: any(r["fault"] and r["code"] for r in pa.requests(method="PUT")), 12,
                 "the delayed renewal to reach the server")
        late_renewals = [r["code"] for r in pa.requests(method="PUT") if r["fault"] and r["code"]]
        assert set(late_renewals) == {409}, late_renewals
        lease = env["kube"].get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/aiprof-controller").json
        assert lease["spec"]["holderIdentity"].startswith("b-")
        refused = log.count("not the leader (lease lost or not renewed in time)")
        print(f"a: {len(wa)} writes, the last {deadline - max(r['time'] for r in wa):.3f} s before its "
              f"deadline, {refused} refused after it; b: took the lease {take - deadline:.3f} s after "
              f"that deadline, first write {first_b - deadline:.3f} s after it")
    finally:
        pa.stop()
        pb.stop()

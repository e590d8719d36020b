# SPDX-License-Identifier: MIT
"""ProfilingPolicy: aiprof-controller against the real Kubernetes API server (tests/k8s/realk8s.py;
pods on played nodes, tests/k8s/played.py), as a cluster would see it; a create whose answer
is lost goes through a fault proxy in front of it (tests/k8s/apifaults.py). The policy reconciler takes its time from the wall clock and reads the
past from the API, as CronJob's controller does: a test that needs scheduled times to have
passed writes status.lastScheduleTime (what a controller that was down for a while would have
left behind); one test waits for a real minute boundary. Sessions are finished the way the
kubelet would: their injector pods are run and terminated with a termination message.

Each test has its own namespace and controller (--namespace); processes are stopped by PID."""
import datetime
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid

import pytest
import yaml

sys.path.insert(0, os.path.dirname(__file__))
import test_controller as tc  # noqa: E402  (helpers only; its tests are not collected here)

ROOT = tc.ROOT
POLICY_CRD = os.path.join(ROOT, "crds", "profilingpolicy.yaml")
GROUP = tc.GROUP
TRIGGER = "aiprof.io/profile-now"

pytestmark = tc.pytestmark
wait_for = tc.wait_for


def iso(t):
    return datetime.datetime.fromtimestamp(int(t), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def strip_cel(o):
    """Drops every x-kubernetes-validations rule of a schema, in place."""
    if isinstance(o, dict):
        o.pop("x-kubernetes-validations", None)
        for v in o.values():
            strip_cel(v)
    elif isinstance(o, list):
        for v in o:
            strip_cel(v)


def policy_crd_without_cel(tmp):
    """crds/profilingpolicy.yaml without its CEL rules, as on a server that does not evaluate
    them: the controller must refuse what it cannot run on its own."""
    with open(POLICY_CRD) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    strip_cel(docs)
    path = os.path.join(tmp, "policy-crd-without-cel.yaml")
    with open(path, "w") as f:
        yaml.safe_dump_all(docs, f)
    return path


@pytest.fixture(scope="module")
def api():
    """The real API server (tests/k8s/realk8s.py) with the ProfilingPolicy CRD served without its
    rules for this module (put back whole at the end), and the played nodes of test_controller."""
    c = tc.realk8s.require()
    tmp = tempfile.mkdtemp(prefix="aiprof-policy-")
    c.apply_crds(os.path.join(ROOT, "crds"), policy_crd_without_cel(tmp))
    c.ensure_namespace("aiprof-system")
    kube = tc.played.admin_client(c)
    ctl = tc.played.PlayedControl(c, kube)
    ctl.node("node-1")
    ctl.cordon(c.node)          # merge pods wait for the played kubelet, not the real one
    try:
        yield {"kube": kube, "ctl": ctl, "ep": {"kubeconfig": c.kubeconfig, "server": c.api_url}, "tmp": tmp,
               "cluster": c}
    finally:
        c.kubectl("apply", "--server-side", "--force-conflicts", "-f", POLICY_CRD, ok=True)
        ctl.cordon(c.node, False)
        kube.delete("/api/v1/nodes/node-1")
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def env(api, request):
    """A namespace with running pods trainer-0 and trainer-1 (job=llama) and other-0
    (job=other), and a way to start controllers scoped to it."""
    api["ctl"].node("node-1")           # a fresh heartbeat
    yield from make_env(api, request)


def make_env(api, request):
    ns = "p-" + re.sub(r"[^a-z0-9]", "", request.node.name.lower())[-40:] + "-" + uuid.uuid4().hex[:4]
    kube = api["kube"]
    assert kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": ns}}).status == 201
    started = []

    def controller(*extra, **kw):
        c = tc.Controller(api, ns, *extra, **kw)
        started.append(c)
        return c

    e = {"ns": ns, "kube": kube, "ctl": api["ctl"], "controller": controller, "api": api}
    tc.make_pod(e, "trainer-0")
    tc.make_pod(e, "trainer-1")
    tc.make_pod(e, "other-0", labels={"job": "other"})
    halt = e["ctl"].start_reaper(ns) if hasattr(e["ctl"], "start_reaper") else None
    yield e
    if halt:
        halt()
    for c in started:
        if c.p.poll() is None:
            c.kill()
    tc.release_namespace(kube, ns)


def make_policy(e, name="hourly", duration="10m", **spec):
    body = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingPolicy",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"job": "llama"}},
                     "sessionTemplate": {
                         "metadata": {"labels": {"team": "a"}},
                         "spec": {"targets": {"container": "trainer"}, "duration": duration,
                                  "collectors": {"cpu": {"frequencyHz": 49}},
                                  "output": {"s3": {"bucket": "profiles", "prefix": "team-a",
                                                    "secretRef": {"name": "s3-creds"}}}}}}}
    body["spec"].update(spec)
    r = e["kube"].post(f"{GROUP}/namespaces/{e['ns']}/profilingpolicies", body)
    assert r.status == 201, r
    return r.json


def get_policy(e, name):
    r = e["kube"].get(f"{GROUP}/namespaces/{e['ns']}/profilingpolicies/{name}")
    assert r.status == 200, r
    return r.json


def patch_policy(e, name, patch, sub=""):
    r = e["kube"].patch(f"{GROUP}/namespaces/{e['ns']}/profilingpolicies/{name}{sub}", patch)
    assert r.status == 200, r
    return r.json


def condition(pol, ctype):
    for c in (pol.get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return None


def wait_condition(e, name, ctype, status=None, reason=None, timeout=15):
    def ok():
        c = condition(get_policy(e, name), ctype)
        return c if c and (status is None or c["status"] == status) and \
            (reason is None or c["reason"] == reason) else None
    return wait_for(ok, timeout, f"{name}: condition {ctype} {status} {reason}")


def sessions(e, policy=None):
    items = e["kube"].get(f"{GROUP}/namespaces/{e['ns']}/profilingsessions").json["items"]
    if policy:
        uid = get_policy(e, policy)["metadata"]["uid"]
        items = [s for s in items
                 if any(o.get("uid") == uid and o.get("controller")
                        for o in s["metadata"].get("ownerReferences") or [])]
    return sorted(items, key=lambda s: s["metadata"]["name"])


def live(items):
    return [s for s in items if not s["metadata"].get("deletionTimestamp")]


def policy_events(e, reason):
    items = e["kube"].get(f"/api/v1/namespaces/{e['ns']}/events").json["items"]
    return [x for x in items if x.get("reason") == reason
            and x["involvedObject"]["kind"] == "ProfilingPolicy"]


def annotate(e, pod, value):
    r = e["kube"].patch(f"/api/v1/namespaces/{e['ns']}/pods/{pod}",
                        {"metadata": {"annotations": {TRIGGER: value}}})
    assert r.status == 200, r


def finish(e, session, ok=True):
    """Plays the kubelet for every pod the controller runs for the session (an injector per
    target, and whatever follows them, such as a merge of several targets): run, then
    terminate, until the session is Succeeded (or Failed)."""
    want = "Succeeded" if ok else "Failed"
    done = set()

    def step():
        if tc.phase(e, session) == want:
            return True
        targets = ((tc.get_session(e, session) or {}).get("status") or {}).get("targets") or []
        pods = tc.injector_pods(e, session)
        if not targets or len([p for p in pods if "merge" not in p["metadata"]["name"]]) < len(targets):
            return False        # not every target has its injector yet
        for p in pods:
            name = p["metadata"]["name"]
            if name in done:
                continue
            done.add(name)
            e["ctl"].kubelet("run", e["ns"], name)
            tc.terminate(e, name, {"artifacts": []} if ok else {"error": "ptrace: operation not permitted"},
                         exit_code=0 if ok else 1, container=p["spec"]["containers"][0]["name"])
        return False
    wait_for(step, 30, f"{session} to be {want}", interval=0.2)
    return tc.get_session(e, session)


def test_missed_schedule_starts_only_the_most_recent(env):
    """Controller down since mid-2023 for a yearly schedule: the times of 2024, 2025 and this
    year were missed; only this year's is started, the Event says two were skipped; a restart
    that lost the status write does not make a second session for the same time."""
    ctl = env["controller"]()
    pol = make_policy(env, "yearly", schedule="0 0 1 1 *")
    wait_condition(env, "yearly", "Ready", "True", "Valid")
    cond = wait_condition(env, "yearly", "Scheduling", "True", "Scheduled")
    year = datetime.datetime.now(datetime.timezone.utc).year
    assert cond["message"] == f"next scheduled session at {year + 1}-01-01T00:00:00Z"
    assert sessions(env, "yearly") == []

    patch_policy(env, "yearly", {"status": {"lastScheduleTime": "2023-06-01T00:00:00Z"}}, "/status")
    want = datetime.datetime(year, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
    name = f"yearly-{int(want) // 60}"
    s = wait_for(lambda: sessions(env, "yearly"), 15, "the session for this year")
    assert [x["metadata"]["name"] for x in s] == [name]
    s = s[0]
    ref = s["metadata"]["ownerReferences"]
    assert ref == [{"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingPolicy", "name": "yearly",
                    "uid": pol["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert s["metadata"]["labels"] == {"team": "a", "aiprof.io/policy": "yearly"}
    assert s["metadata"]["annotations"]["aiprof.io/scheduled-time"] == iso(want)
    # the template's spec, with the policy's selector as the targets
    assert s["spec"]["targets"] == {"container": "trainer", "selector": {"matchLabels": {"job": "llama"}}}
    assert s["spec"]["duration"] == "10m"
    assert s["spec"]["output"]["s3"]["secretRef"] == {"name": "s3-creds"}
    # the session reconciler takes it from there: an injector per selected pod
    inj = wait_for(lambda: len(tc.injector_pods(env, name)) == 2 and tc.injector_pods(env, name), 15,
                   "injectors for trainer-0 and trainer-1")
    assert sorted(p["metadata"]["labels"]["aiprof.io/target-pod"] for p in inj) == ["trainer-0", "trainer-1"]

    st = wait_for(lambda: (get_policy(env, "yearly")["status"].get("lastScheduleTime") == iso(want)
                           and get_policy(env, "yearly")["status"]), 10, "lastScheduleTime")
    assert [a["name"] for a in st["active"]] == [name]
    ev = wait_for(lambda: policy_events(env, "MissedSchedule"), 10, "a MissedSchedule event")
    assert ev[0]["type"] == "Warning"
    assert ev[0]["message"] == (f"2 scheduled times were missed since 2023-06-01T00:00:00Z; started only "
                                f"the most recent, {iso(want)}")
    assert wait_for(lambda: policy_events(env, "SessionCreated"), 10, "SessionCreated")[0]["message"] == \
        f"created session {name} for the scheduled time {iso(want)}"

    # a crash that lost the status write: the next controller finds the session by its name
    ctl.kill(signal.SIGKILL)
    patch_policy(env, "yearly", {"status": {"lastScheduleTime": "2023-06-01T00:00:00Z"}}, "/status")
    env["controller"]()
    wait_for(lambda: get_policy(env, "yearly")["status"].get("lastScheduleTime") == iso(want), 25,
             "lastScheduleTime restored")     # after the dead leader's 8 s lease ran out
    time.sleep(1)
    assert [x["metadata"]["name"] for x in sessions(env, "yearly")] == [name]


def test_schedule_on_the_minute_with_forbid(env):
    """A '* * * * *' policy (Forbid): the first session starts at once for the latest missed
    minute; at the next minute the session still runs, so that time waits (condition and
    Event); when the session ends, the waiting time starts."""
    env["controller"]()
    make_policy(env, "minutely", schedule="* * * * *", suspend=True)
    wait_condition(env, "minutely", "Scheduling", "True", "Suspended")
    patch_policy(env, "minutely", {"status": {"lastScheduleTime": iso(time.time() - 300)}}, "/status")
    time.sleep(1)
    assert sessions(env, "minutely") == [], "a suspended policy made a session"
    patch_policy(env, "minutely", {"spec": {"suspend": False}})
    first = wait_for(lambda: sessions(env, "minutely"), 15, "the first session")[0]["metadata"]["name"]
    t1 = int(first.rsplit("-", 1)[1]) * 60
    assert time.time() - 75 < t1 <= time.time()
    assert "scheduled times were missed" in wait_for(lambda: policy_events(env, "MissedSchedule"), 10,
                                                     "MissedSchedule")[0]["message"]

    # the next minute comes while the first session runs: Forbid keeps it waiting
    c = wait_condition(env, "minutely", "Scheduling", "False", "ConcurrencyForbid", timeout=80)
    t2 = t1 + 60
    assert c["message"] == (f"the scheduled time {iso(t2)} waits: session {first} is still running "
                            f"(concurrencyPolicy Forbid)")
    assert policy_events(env, "ConcurrencyForbid")[0]["type"] == "Warning"
    assert len(sessions(env, "minutely")) == 1

    finish(env, first)
    second = wait_for(lambda: [s for s in sessions(env, "minutely") if s["metadata"]["name"] != first],
                      15, "the waiting session")[0]["metadata"]["name"]
    assert int(second.rsplit("-", 1)[1]) * 60 >= t2
    pol = get_policy(env, "minutely")
    assert [a["name"] for a in pol["status"]["active"]] == [second]
    assert pol["status"]["lastSuccessfulTime"]


def test_time_zone(env):
    """09:00 in New York is 13:00Z or 14:00Z depending on the date; an unknown zone is refused."""
    from zoneinfo import ZoneInfo
    env["controller"]()
    make_policy(env, "ny", schedule="0 9 * * *", timeZone="America/New_York")
    make_policy(env, "mars", schedule="0 9 * * *", timeZone="Mars/Olympus_Mons")
    c = wait_condition(env, "ny", "Scheduling", "True", "Scheduled")
    ny = ZoneInfo("America/New_York")
    now = datetime.datetime.now(ny)
    nxt = now.replace(hour=9, minute=0, second=0, microsecond=0)
    if nxt <= now:
        nxt = (nxt + datetime.timedelta(days=1)).replace(hour=9)
        nxt = datetime.datetime(nxt.year, nxt.month, nxt.day, 9, tzinfo=ny)
    assert c["message"] == (f"next scheduled session at {iso(nxt.timestamp())} "
                            f"(schedule \"0 9 * * *\" in America/New_York)")
    c = wait_condition(env, "mars", "Ready", "False", "UnknownTimeZone")
    assert "unknown time zone 'Mars/Olympus_Mons'" in c["message"]
    ev = wait_for(lambda: policy_events(env, "UnknownTimeZone"), 10, "UnknownTimeZone event")
    assert ev[0]["involvedObject"]["name"] == "mars"
    patch_policy(env, "mars", {"status": {"lastScheduleTime": "2024-01-01T00:00:00Z"}}, "/status")
    time.sleep(1)
    assert sessions(env, "mars") == []


def test_invalid_specs(env):
    """Specs the controller cannot run, on a server without the CRD's CEL rules (the fixture
    strips them; tests/install/invalid checks that the CRD refuses these at apply time): a
    clear condition and one Warning each, and no session."""
    env["controller"]()
    make_policy(env, "badcron", schedule="61 * * * *")
    make_policy(env, "badanno", trigger={"annotation": "example.com/profile"})
    make_policy(env, "everything", selector={}, trigger={})
    make_policy(env, "never", schedule="0 0 30 2 *")
    assert wait_condition(env, "badcron", "Ready", "False", "InvalidSpec")["message"] == \
        'spec.schedule "61 * * * *": minute: 61 is out of range 0-59'
    assert "must be an annotation key under aiprof.io/" in \
        wait_condition(env, "badanno", "Ready", "False", "InvalidSpec")["message"]
    assert "would select every pod in the namespace" in \
        wait_condition(env, "everything", "Ready", "False", "InvalidSpec")["message"]
    assert wait_condition(env, "never", "Ready", "False", "NeverScheduled")["message"] == \
        'spec.schedule "0 0 30 2 *" has no time in the next 10 years'
    ev = wait_for(lambda: len(policy_events(env, "InvalidSpec")) >= 3 and policy_events(env, "InvalidSpec"),
                  10, "InvalidSpec events")
    time.sleep(1)
    assert sorted(x["involvedObject"]["name"] for x in policy_events(env, "InvalidSpec")) == \
        ["badanno", "badcron", "everything"], ev
    annotate(env, "trainer-0", "go")
    time.sleep(1)
    assert sessions(env) == []


def test_trigger_once_per_value(env):
    """The annotation on a selected pod makes one session for that pod per distinct value;
    unselected pods are ignored; a restarted controller does not repeat handled values."""
    ctl = env["controller"]()
    make_policy(env, "ondemand", trigger={}, concurrencyPolicy="Allow")
    wait_condition(env, "ondemand", "Scheduling", "True", "Idle")
    annotate(env, "other-0", "run-1")           # not selected
    annotate(env, "trainer-0", "run-1")
    s = wait_for(lambda: sessions(env, "ondemand"), 15, "a triggered session")
    assert len(s) == 1
    name = s[0]["metadata"]["name"]
    assert re.fullmatch(r"ondemand-now-[0-9a-f]{10}", name)
    assert s[0]["spec"]["targets"] == {"container": "trainer", "podName": "trainer-0"}
    assert s[0]["metadata"]["annotations"]["aiprof.io/trigger-pod"] == "trainer-0"
    tr = wait_for(lambda: get_policy(env, "ondemand")["status"].get("triggers"), 10, "status.triggers")
    assert [(t["pod"], t["token"], t["session"]) for t in tr] == [("trainer-0", "run-1", name)]
    assert wait_for(lambda: tc.injector_pods(env, name), 15, "its injector")[0]["metadata"]["labels"][
        "aiprof.io/target-pod"] == "trainer-0"

    # restart: the value is remembered in the status
    ctl.kill()
    env["controller"]()
    time.sleep(2)
    assert len(sessions(env, "ondemand")) == 1

    annotate(env, "trainer-0", "run-2")
    annotate(env, "trainer-1", "run-1")          # the same value on another pod is another trigger
    wait_for(lambda: len(sessions(env, "ondemand")) == 3, 15, "two more sessions")
    annotate(env, "trainer-0", "run-1")          # handled before: nothing
    time.sleep(1.5)
    got = sessions(env, "ondemand")
    assert len(got) == 3
    assert sorted(s["spec"]["targets"]["podName"] for s in got) == ["trainer-0", "trainer-0", "trainer-1"]


def test_concurrency_forbid_replace_allow(env):
    env["controller"]()
    for name, conc in (("forbid", "Forbid"), ("replace", "Replace"), ("allow", "Allow")):
        make_policy(env, name, trigger={"annotation": f"aiprof.io/{name}"}, concurrencyPolicy=conc)

    def trig(policy, pod, value):
        r = env["kube"].patch(f"/api/v1/namespaces/{env['ns']}/pods/{pod}",
                              {"metadata": {"annotations": {f"aiprof.io/{policy}": value}}})
        assert r.status == 200

    for name in ("forbid", "replace", "allow"):
        trig(name, "trainer-0", "a")
        wait_for(lambda: len(sessions(env, name)) == 1, 15, f"{name}: the first session")
    first = {n: sessions(env, n)[0]["metadata"]["name"] for n in ("forbid", "replace", "allow")}
    for name in ("forbid", "replace", "allow"):
        trig(name, "trainer-1", "b")

    # Forbid: the second waits while the first runs
    c = wait_condition(env, "forbid", "Scheduling", "False", "ConcurrencyForbid")
    assert c["message"] == (f"pod trainer-1's trigger aiprof.io/forbid=b waits: session {first['forbid']} "
                            f"is still running (concurrencyPolicy Forbid)")
    # Replace: the running one is deleted, the new one made
    wait_for(lambda: [s["metadata"]["name"] for s in live(sessions(env, "replace"))] != [first["replace"]]
             and len(live(sessions(env, "replace"))) == 1, 15, "replace: the new session only")
    ev = wait_for(lambda: policy_events(env, "SessionReplaced"), 10, "SessionReplaced")
    assert ev[0]["message"].startswith(f"deleted running session {first['replace']} to make room for "
                                       f"pod trainer-1's trigger")
    # Allow: both run
    wait_for(lambda: len(sessions(env, "allow")) == 2, 15, "allow: two sessions")
    assert len(sessions(env, "forbid")) == 1

    finish(env, first["forbid"])
    wait_for(lambda: len(sessions(env, "forbid")) == 2, 15, "forbid: the waiting trigger runs")
    wait_condition(env, "forbid", "Scheduling", "True", "Idle")


def test_history_limits(env):
    """successfulSessionsHistoryLimit 2 and failedSessionsHistoryLimit 1: the oldest finished
    sessions beyond them are deleted, running ones never."""
    env["controller"]()
    make_policy(env, "hist", trigger={}, successfulSessionsHistoryLimit=2, failedSessionsHistoryLimit=1)
    made = []
    for i, ok in enumerate((True, True, False, True, False)):
        annotate(env, "trainer-0", f"v{i}")
        s = wait_for(lambda: [x["metadata"]["name"] for x in sessions(env, "hist")
                              if x["metadata"]["name"] not in made], 15, f"session {i}")
        made.append(s[0])
        finish(env, s[0], ok)
        time.sleep(1.1)     # completion times one second apart: the order is unambiguous
    # kept: the two newest successes (1, 3) and the newest failure (4)
    wait_for(lambda: [x["metadata"]["name"] for x in live(sessions(env, "hist"))]
             == sorted([made[1], made[3], made[4]]), 20, "the history limits applied")
    wait_for(lambda: not [x for x in sessions(env, "hist") if x["metadata"]["name"] in (made[0], made[2])],
             20, "the pruned sessions gone (their finalizer done)")
    msgs = [e["message"] for e in policy_events(env, "SessionDeleted")]
    assert any(m.startswith(f"deleted session {made[0]} (finished ") and
               m.endswith("more than successfulSessionsHistoryLimit=2") for m in msgs), msgs
    assert any(m.startswith(f"deleted session {made[2]} ") and
               m.endswith("more than failedSessionsHistoryLimit=1") for m in msgs), msgs
    st = get_policy(env, "hist")["status"]
    assert st["active"] == []
    done3 = tc.get_session(env, made[3])["status"]["completionTime"]
    assert st["lastSuccessfulTime"] == done3


def test_suspend_and_resume(env):
    env["controller"]()
    make_policy(env, "paused", trigger={}, schedule="0 0 1 1 *", suspend=True)
    wait_condition(env, "paused", "Scheduling", "True", "Suspended")
    annotate(env, "trainer-0", "x")
    patch_policy(env, "paused", {"status": {"lastScheduleTime": "2024-06-01T00:00:00Z"}}, "/status")
    time.sleep(2)
    assert sessions(env, "paused") == []
    patch_policy(env, "paused", {"spec": {"suspend": False}})
    # Forbid (the default): the trigger runs first, the scheduled time waits for it
    wait_for(lambda: len(sessions(env, "paused")) == 1, 15, "a session after resuming")
    c = wait_condition(env, "paused", "Scheduling", "False", "ConcurrencyForbid")
    assert "the scheduled time" in c["message"]
    finish(env, sessions(env, "paused")[0]["metadata"]["name"])
    wait_for(lambda: len(sessions(env, "paused")) == 2, 15, "the scheduled session after the trigger's")


def test_deleting_the_policy_collects_its_sessions(env):
    env["controller"]()
    pol = make_policy(env, "gone", trigger={})
    annotate(env, "trainer-0", "1")
    s = wait_for(lambda: sessions(env, "gone"), 15, "a session")[0]
    name = s["metadata"]["name"]
    assert s["metadata"]["ownerReferences"][0]["uid"] == pol["metadata"]["uid"]
    wait_for(lambda: tc.injector_pods(env, name), 15, "its injector")
    r = env["kube"].delete(f"{GROUP}/namespaces/{env['ns']}/profilingpolicies/gone")
    assert r.status == 200, r
    # the API's garbage collector deletes the session; its finalizer removes the injector
    wait_for(lambda: tc.get_session(env, name) is None, 20, "the session collected")
    wait_for(lambda: not tc.injector_pods(env, name), 15, "the injector removed")


def test_create_answer_lost(env):
    """The API server makes the session but its answer is lost (connection reset by a fault
    proxy in front of the real server, tests/k8s/apifaults.py): the controller retries and
    ends with one session for the time, never two (the name is the scheduled time; a second
    create answers 409 AlreadyExists, which counts as success)."""
    proxy, kc = tc.fault_proxy(env)
    try:
        ctl = env["controller"](kubeconfig=kc)
        make_policy(env, "lossy", schedule="0 0 1 1 *", suspend=True)
        wait_condition(env, "lossy", "Scheduling", "True", "Suspended")
        creates = rf"^{GROUP}/namespaces/{env['ns']}/profilingsessions$"
        fid = proxy.fault(creates, method="POST", action="drop", times=1)
        patch_policy(env, "lossy", {"status": {"lastScheduleTime": "2024-06-01T00:00:00Z"}}, "/status")
        patch_policy(env, "lossy", {"spec": {"suspend": False}})
        year = datetime.datetime.now(datetime.timezone.utc).year
        want = iso(datetime.datetime(year, 1, 1, tzinfo=datetime.timezone.utc).timestamp())
        wait_for(lambda: get_policy(env, "lossy")["status"].get("lastScheduleTime") == want, 20,
                 "lastScheduleTime after the lost answer")
        posts = proxy.requests(method="POST", path=creates)
        # the first create was made and its answer lost; any later one was told 409 AlreadyExists
        # (unless the watch had shown the session first)
        assert (posts[0]["code"], posts[0]["fault"]) == (0, fid), posts
        assert all(r["code"] == 409 for r in posts[1:]), posts
        if posts[1:]:
            assert f"session lossy-{parse_iso(want) // 60:.0f} exists already" in ctl.text()
        time.sleep(1)
        got = sessions(env, "lossy")
        assert len(got) == 1, [s["metadata"]["name"] for s in got]
        assert ctl.metric("aiprof_cached_policies") == 1
        assert ctl.metric("aiprof_policy_reconciles_total") >= 2
    finally:
        proxy.stop()


def test_two_replicas_one_set_of_sessions(env):
    """Two replicas: only the Lease holder reconciles policies; when it stops, the standby
    takes over with the handled triggers from the status, repeating none."""
    a = env["controller"](name="a")
    b = env["controller"](name="b")
    make_policy(env, "ha", trigger={}, concurrencyPolicy="Allow")
    annotate(env, "trainer-0", "1")
    wait_for(lambda: len(sessions(env, "ha")) == 1, 15, "one session")
    leader, standby = (a, b) if wait_for(lambda: a.leader() or b.leader(), 10, "a leader") and a.leader() \
        else (b, a)
    assert not standby.leader()
    assert standby.metric("aiprof_policy_reconciles_total") in (None, 0)
    time.sleep(1)
    assert len(sessions(env, "ha")) == 1
    leader.kill()
    wait_for(standby.leader, 15, "the standby to take the lease")
    annotate(env, "trainer-1", "1")
    wait_for(lambda: len(sessions(env, "ha")) == 2, 15, "a session made by the new leader")
    time.sleep(1)
    assert sorted(s["spec"]["targets"]["podName"] for s in sessions(env, "ha")) == ["trainer-0", "trainer-1"]


def test_shipped_trigger_example_with_kubectl(api):
    """What a user does: `kubectl apply` the shipped trigger policy, `kubectl annotate` a pod as
    its comment says, and `kubectl get` the session it made."""
    import subprocess
    kubectl = shutil.which("kubectl") or "/usr/bin/kubectl"
    if not os.path.exists(kubectl):
        pytest.skip("kubectl is not installed")
    example = os.path.join(ROOT, "manifests", "examples", "policy-trigger.yaml")
    with open(example) as f:
        doc = yaml.safe_load(f)
    ns = doc["metadata"]["namespace"]
    labels = {e["key"]: e["values"][0] for e in doc["spec"]["selector"]["matchExpressions"]}
    cache = tempfile.mkdtemp(prefix="kubectl-cache-")

    def k(*args):
        r = subprocess.run([kubectl, "--kubeconfig", api["ep"]["kubeconfig"], "--cache-dir", cache,
                            "-n", ns, *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stderr}"
        return r.stdout

    r = api["kube"].post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": ns}})
    assert r.status in (201, 409), r
    e = {"ns": ns, "kube": api["kube"], "ctl": api["ctl"]}
    tc.make_pod(e, "trainer-3", labels=labels)
    tc.make_pod(e, "unrelated-0", labels={"app": "web"})
    c = tc.Controller(api, ns)
    try:
        assert "profilingpolicy.aiprof.io/on-demand created" in k("apply", "-f", example)
        wait_condition(e, "on-demand", "Scheduling", "True", "Idle")
        k("annotate", "pod", "trainer-3", f"{TRIGGER}=1700000000")
        k("annotate", "pod", "unrelated-0", f"{TRIGGER}=1700000000")
        s = wait_for(lambda: sessions(e, "on-demand"), 15, "the session")
        name = s[0]["metadata"]["name"]
        assert s[0]["spec"]["targets"]["podName"] == "trainer-3"
        assert s[0]["spec"]["duration"] == "15s"
        out = k("get", "profilingsessions")
        assert name in out
        assert "on-demand" in k("get", "profpol")
        k("annotate", "pod", "trainer-3", f"{TRIGGER}=1700000001", "--overwrite")
        wait_for(lambda: len(sessions(e, "on-demand")) == 2, 15, "a second session for a new value")
    finally:
        c.kill()
        shutil.rmtree(cache, ignore_errors=True)

# SPDX-License-Identifier: MIT
"""`aiprof merge` on real ranks: N trainer processes (one rank each, one communicator through
the fake NCCL's shared memory), each profiled by its own `aiprof profile --pid` into its own
folder, then merged. The ranks share this machine's clock, so the true offset between them is
0; a rank whose timeline is rewritten by a known shift stands for a host with another clock.
Planted faults (straggler, nccl-hang) must come out as the merged findings naming the rank.

The trainers load CUPTI (--cupti, the fake one), so each collective's kernel is recorded and
linked to its call: the merge aligns on the kernels' ends (the GPU-side shared moment); with
the kernel records removed it falls back to the host ends of the calls."""
import gzip
import json
import os
import shutil
import subprocess
import uuid

import pytest

from conftest import AIPROF, TRAINER, Procs, require_root, run_aiprof
from test_artifacts import check_timeline

SKEW_TARGET_US = 50.0


def read_ready(p, timeout=60):
    for line in p.stdout:
        if line.startswith("ready pid="):
            return int(line.split("=", 1)[1])
    raise AssertionError(f"trainer exited before 'ready' (rc={p.poll()}): {p.stderr.read()}")


def profile_ranks(base, n, *trainer_args, duration="3s", ebpf=False):
    """Starts n one-rank trainer processes, profiles each with its own `aiprof profile`
    (all at once, as one injector per pod would), stops them; returns the rank folders."""
    base.mkdir(parents=True, exist_ok=True)
    ps = Procs()
    try:
        trainers = [ps.start([TRAINER, "--rank", str(i), "--world", str(n), "--nccl-id-file",
                              str(base / "nccl-id"), *trainer_args])[0] for i in range(n)]
        pids = [read_ready(p) for p in trainers]
        profs = [subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "-d", duration, "-q",
                                   "-o", str(base / f"rank{i}")] + ([] if ebpf else ["--no-ebpf"]),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i, pid in enumerate(pids)]
        for p in profs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err
    finally:
        ps.cleanup()
    return [base / f"rank{i}" for i in range(n)]


def merge(out, *srcs, extra=()):
    return run_aiprof(["merge", "-o", str(out), *extra, *[str(s) for s in srcs]])


def load(out):
    with gzip.open(out / "timeline.json.gz", "rt") as f:
        tl = json.load(f)
    with open(out / "summary.json") as f:
        return tl, json.load(f)


def by_rank(summary):
    return {r["rank"]: r for r in summary["ranks"]}


def nccl_ends(tl, pid):
    return sorted(e["ts"] + e["dur"] for e in tl["traceEvents"]
                  if e.get("cat") == "nccl" and e["ph"] == "X" and e["pid"] == pid)


def coll_ends(tl, pid):
    """{seq: (host end, end of its kernel or None)} of the process's NCCL collectives."""
    kern = {(e["args"]["nccl_comm"], e["args"]["nccl_seq"]): e["ts"] + e["dur"] for e in tl["traceEvents"]
            if e.get("cat") == "cuda_kernel" and e["ph"] == "X" and e["pid"] == pid and "nccl_seq" in e["args"]}
    return {e["args"]["seq"]: (e["ts"] + e["dur"], kern.get((e["args"]["comm"], e["args"]["seq"])))
            for e in tl["traceEvents"]
            if e.get("cat") == "nccl" and e["ph"] == "X" and e["pid"] == pid and "seq" in e["args"]}


def skew_p50(tl, s, on_true_clock=False, host_ends=False):
    """The merged summary's residual skew, recomputed from the merged timeline: each rank's
    collective end (its kernel's where every rank has one, else the call's) against the
    median end of the other ranks, p50 over ranks x collectives. on_true_clock: with the
    offsets undone, i.e. on this machine's one clock (all ranks ran here); host_ends: the
    calls' ends only, which is what scheduling noise alone puts under a host-end figure."""
    per = {}
    for r in s["ranks"]:
        if r["aligned"]:
            off = r["offset_us"] if on_true_clock else 0.0
            per[r["rank"]] = {q + r["shift"]: (h + off, None if k is None or host_ends else k + off)
                              for q, (h, k) in coll_ends(tl, r["pid"]).items()}
    res = []
    for g in set().union(*per.values()):
        es = [(k, v[g]) for k, v in per.items() if g in v]
        if len(es) < 2:
            continue
        gpu = all(e[1] is not None for _, e in es)
        es = [(k, e[1] if gpu else e[0]) for k, e in es]
        for k, e in es:
            o = sorted(x for kk, x in es if kk != k)
            m = len(o)
            med = o[m // 2] if m % 2 else (o[m // 2 - 1] + o[m // 2]) / 2
            res.append(abs(e - med))
    res.sort()
    return res[int(0.5 * (len(res) - 1) + 0.5)]


def check_skew(tl, s):
    """The reported skew is what the timeline shows. On the GPU kernel ends it meets the
    target. On host ends (the fallback) the ranks' call ends carry their own scheduling noise
    (measured on the true clock: the floor), and the offsets' error adds to it: the ranks run
    on one clock here, so each offset is its own error, and a collective's spread grows by at
    most the spread of the offsets (|x + d| <= |x| + |d|, for the median too). The offsets
    themselves are checked against the target by the callers."""
    skew = s["alignment"]["residual_skew_us"]
    assert abs(skew_p50(tl, s) - skew["p50"]) <= 1.0, (skew_p50(tl, s), skew)
    floor = skew_p50(tl, s, on_true_clock=True, host_ends=True)
    offs = [r["offset_us"] for r in s["ranks"] if r["aligned"]]
    spread = max(offs) - min(offs)
    print(f"residual skew p50 {skew['p50']:.1f} us, max {skew['max']:.1f} us "
          f"(basis {s['alignment']['basis']}); host call ends on the true clock {floor:.1f} us, "
          f"offsets spread {spread:.1f} us")
    if s["alignment"]["basis"] == "gpu_kernel_end":
        assert skew["p50"] <= SKEW_TARGET_US, (skew, floor)
    else:
        assert skew["p50"] <= max(SKEW_TARGET_US, floor + spread + 1.0), (skew, floor, offs)


def strip_kernels(src, dst):
    """A copy of a rank folder without its GPU kernel records (a rank without CUPTI), on a
    clock of its own."""
    shutil.copytree(src, dst)
    with gzip.open(src / "timeline.json.gz", "rt") as f:
        tl = json.load(f)
    tl["traceEvents"] = [e for e in tl["traceEvents"] if e.get("cat") != "cuda_kernel"]
    with gzip.open(dst / "timeline.json.gz", "wt") as f:
        json.dump(tl, f)
    with open(src / "summary.json") as f:
        s = json.load(f)
    s["clock_domain"]["boot_id"] = str(uuid.uuid4())
    with open(dst / "summary.json", "w") as f:
        json.dump(s, f)
    return dst


def own_clocks(dirs, base):
    """Copies of the ranks as if each ran on a host of its own: the merge must fit their
    clocks (which are in truth this machine's one clock: the true offsets are 0)."""
    return [shift_rank(d, base / f"own{i}", 0, own_clock=True) for i, d in enumerate(dirs)]


def check_shared_clock(s, fitted):
    """The ranks merged as they are (one boot, one time namespace): on the reference rank's
    clock, offset 0, matched as the fitted copies were."""
    for r in s["ranks"]:
        assert r["clock"] == ("reference" if r["rank"] == s["reference_rank"] else "shared"), r
        assert r["offset_us"] == 0, r
        assert r["shift"] == by_rank(fitted)[r["rank"]]["shift"], (s["ranks"], fitted["ranks"])


def shift_rank(src, dst, shift_us, drop_nccl=False, edit_summary=None, own_clock=None):
    """A copy of a rank folder whose clock reads shift_us later (every ts, the window), or
    with no NCCL events, or with its summary edited. A shifted copy (or own_clock=True) is on
    a clock of its own: another host's boot id."""
    if own_clock is None:
        own_clock = shift_us != 0
    shutil.copytree(src, dst)
    with gzip.open(src / "timeline.json.gz", "rt") as f:
        tl = json.load(f)
    evs = []
    for e in tl["traceEvents"]:
        if drop_nccl and e.get("cat") == "nccl":
            continue
        if e["ph"] != "M":
            e["ts"] = round(e["ts"] + shift_us, 3)
        evs.append(e)
    tl["traceEvents"] = evs
    for k in ("window_start_ns", "window_end_ns"):
        tl["otherData"][k] += int(round(shift_us * 1000))
    with gzip.open(dst / "timeline.json.gz", "wt") as f:
        json.dump(tl, f)
    with open(src / "summary.json") as f:
        s = json.load(f)
    for k in ("start_monotonic_ns", "end_monotonic_ns"):
        s["window"][k] += int(round(shift_us * 1000))
    if own_clock:
        s["clock_domain"]["boot_id"] = str(uuid.uuid4())
    if edit_summary:
        edit_summary(s)
    with open(dst / "summary.json", "w") as f:
        json.dump(s, f)
    return dst


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    require_root()
    return profile_ranks(tmp_path_factory.mktemp("two"), 2, "--run-seconds", "60", "--cupti")


def check_merged(out, n, basis="gpu_kernel_end"):
    tl, s = load(out)
    assert s["alignment"]["basis"] == basis, s["alignment"]
    counts, _ = check_timeline(tl)
    assert counts["nccl"] > 0 and counts["cuda_api"] > 0, counts
    assert s["schema"] == "aiprof.merge/v1"
    ranks = by_rank(s)
    assert sorted(ranks) == list(range(n))
    names = {e["pid"]: e["args"]["name"] for e in tl["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    for i, r in ranks.items():
        assert r["aligned"], r
        assert r["alignment_basis"] == basis, r
        if basis == "gpu_kernel_end":
            # CUPTI came on during the window's first collectives at the latest
            assert r["gpu_kernel_ends"] >= r["collectives"] - 5, r
        assert names[r["pid"]].startswith(f"rank {i} ("), names
        assert r["collectives"] > 10
        assert len(nccl_ends(tl, r["pid"])) == r["collectives"]
    return tl, s


def test_two_ranks_on_one_clock(two_ranks, tmp_path):
    out = tmp_path / "merged"
    term = tmp_path / "termination-log"
    r = merge(out, *reversed(own_clocks(two_ranks, tmp_path)), extra=["--termination-log", str(term)])
    assert r.returncode == 0, r.stderr
    tl, s = check_merged(out, 2)
    print("2 ranks: offset", by_rank(s)[1]["offset_us"], "us")
    # same machine, same clock: the true offset is 0
    assert by_rank(s)[1]["clock"] == "fitted"
    assert abs(by_rank(s)[1]["offset_us"]) <= SKEW_TARGET_US, s["ranks"]
    assert s["alignment"]["residual_skew_us"]["collectives"] > 10
    check_skew(tl, s)
    assert not s["findings"], s["findings"]
    # as they are: the merge knows they share this machine's clock
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    for d in two_ranks:
        with open(d / "summary.json") as f:
            assert json.load(f)["clock_domain"] == {"boot_id": boot, "time_namespace_offset_ns": 0}
    shared = tmp_path / "shared"
    assert merge(shared, *two_ranks).returncode == 0
    tl2, s2 = check_merged(shared, 2)
    check_shared_clock(s2, s)
    check_skew(tl2, s2)
    man = json.load(open(out / "manifest.json"))
    assert {a["name"] for a in man["artifacts"]} == {"timeline.json.gz", "summary.json"}
    msg = json.load(open(term))
    assert {a["name"] for a in msg["artifacts"]} >= {"timeline.json.gz", "summary.json"}
    assert msg.get("error", "") == ""


def test_four_ranks(tmp_path):
    require_root()
    dirs = profile_ranks(tmp_path / "four", 4, "--run-seconds", "60", "--cupti")
    out = tmp_path / "merged"
    r = merge(out, *own_clocks(dirs, tmp_path))
    assert r.returncode == 0, r.stderr
    tl, s = check_merged(out, 4)
    print("4 ranks: offsets", [x["offset_us"] for x in s["ranks"]])
    # the clocks are recovered: the true offset is 0
    for x in s["ranks"]:
        assert abs(x["offset_us"]) <= SKEW_TARGET_US, s["ranks"]
    check_skew(tl, s)
    assert not s["findings"], s["findings"]     # a clean job: no straggler, no hang
    shared = tmp_path / "shared"
    assert merge(shared, *dirs).returncode == 0
    _, s2 = check_merged(shared, 4)
    check_shared_clock(s2, s)
    assert not s2["findings"], s2["findings"]


@pytest.mark.parametrize("shift_us", [1234567.891, -37512.25])
def test_recovers_a_known_clock_offset(two_ranks, tmp_path, shift_us):
    """Rank 1 on a host whose clock reads shift_us later (more than a step period ahead, or
    a fraction of one behind): the offset comes out as the shift, and the merged rank 1
    collectives end where rank 0's do."""
    plain = tmp_path / "plain"
    assert merge(plain, *own_clocks(two_ranks, tmp_path)).returncode == 0
    _, s0 = load(plain)
    moved = shift_rank(two_ranks[1], tmp_path / "rank1-moved", shift_us)
    out = tmp_path / "merged"
    r = merge(out, two_ranks[0], moved)
    assert r.returncode == 0, r.stderr
    tl, s = load(out)
    check_timeline(tl)
    got = by_rank(s)[1]["offset_us"]
    print("shift", shift_us, "recovered", got, "unshifted", by_rank(s0)[1]["offset_us"])
    assert abs(got - shift_us) <= SKEW_TARGET_US, (got, shift_us)
    assert abs((got - shift_us) - by_rank(s0)[1]["offset_us"]) <= 1.0
    # the same merge as without the shift: same matches, same skew
    assert by_rank(s)[1]["shift"] == by_rank(s0)[1]["shift"]
    for k in ("p50", "max", "collectives"):
        assert abs(s["alignment"]["residual_skew_us"][k] - s0["alignment"]["residual_skew_us"][k]) <= 0.01


def test_host_end_fallback(two_ranks, tmp_path):
    """Ranks without kernel records are aligned on the host ends of their calls, and say so;
    a rank without them next to a reference with them: a warning names it."""
    bare = [strip_kernels(d, tmp_path / f"bare{i}") for i, d in enumerate(two_ranks)]
    out = tmp_path / "merged"
    r = merge(out, *bare)
    assert r.returncode == 0, r.stderr
    assert "aligned on host_call_end" in r.stderr
    tl, s = check_merged(out, 2, basis="host_call_end")
    assert s["alignment"]["collectives_compared_on_gpu"] == 0
    assert abs(by_rank(s)[1]["offset_us"]) <= SKEW_TARGET_US, s["ranks"]
    check_skew(tl, s)
    # host ends carry wake-up jitter: on a loaded machine the regular trainer's matches at
    # neighbouring shifts may fit almost as well, which the merge says (and the offset check
    # above shows it still took the right one); nothing else may be warned about
    assert all("is ambiguous" in w for w in s["warnings"]), s["warnings"]

    out = tmp_path / "mixed"
    r = merge(out, two_ranks[0], bare[1])
    assert r.returncode == 0, r.stderr
    _, s = load(out)
    # two ranks: a pair is compared on the kernels only when both have them
    assert s["alignment"]["basis"] == "host_call_end"
    assert by_rank(s)[0]["gpu_kernel_ends"] >= by_rank(s)[0]["collectives"] - 5
    assert by_rank(s)[1]["gpu_kernel_ends"] == 0
    assert abs(by_rank(s)[1]["offset_us"]) <= SKEW_TARGET_US, s["ranks"]
    assert any("host ends of its collective calls" in w for w in s["warnings"]), s["warnings"]


def test_straggler_named(tmp_path):
    require_root()
    dirs = profile_ranks(tmp_path / "strag", 4, "--run-seconds", "60", "--fault", "straggler",
                         "--fault-rank", "2", "--cupti")
    out = tmp_path / "merged"
    r = merge(out, *dirs)
    assert r.returncode == 0, r.stderr
    _, s = check_merged(out, 4)
    strag = [f for f in s["findings"] if f["category"] == "Straggler"]
    assert len(strag) == 1, s["findings"]
    assert strag[0]["rank"] == 2 and strag[0]["evidence"]["straggler_rank"] == 2, strag
    # it spins 15 ms before each gradient all-reduce
    assert strag[0]["evidence"]["median_lateness_us"] >= 10000, strag
    assert by_rank(s)[2]["mean_lateness_us"] > 5 * by_rank(s)[0]["mean_lateness_us"], s["ranks"]
    assert by_rank(s)[2]["last_arrivals"] > by_rank(s)[0]["last_arrivals"]


def test_nccl_hang_names_the_rank_that_never_entered(tmp_path):
    require_root()
    dirs = profile_ranks(tmp_path / "hang", 3, "--steps", "100000", "--fault", "nccl-hang",
                         "--fault-rank", "1", "--fault-step", "40", duration="4s", ebpf=True)
    out = tmp_path / "merged"
    r = merge(out, *dirs)
    assert r.returncode == 0, r.stderr
    _, s = load(out)
    hang = [f for f in s["findings"] if f["category"] == "NcclHang"]
    assert len(hang) == 1, s["findings"]
    assert hang[0]["evidence"]["never_entered_ranks"] == "1", hang
    assert hang[0]["rank"] == 1
    # on this machine's one clock, which the merge knows: a loaded host's late call ends
    # cannot make it take another numbering of the collectives
    assert [r["clock"] for r in s["ranks"]] == ["reference", "shared", "shared"], s["ranks"]
    assert hang[0]["evidence"]["blocked_ranks"] == "0,2", hang


def test_bad_sources(two_ranks, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = merge(tmp_path / "o1", two_ranks[0], empty)
    assert r.returncode == 1 and "timeline.json.gz" in r.stderr and str(empty) in r.stderr, r.stderr

    broken = tmp_path / "broken"
    shutil.copytree(two_ranks[1], broken)
    with gzip.open(broken / "timeline.json.gz", "wt") as f:
        f.write('{"traceEvents": [{"ph": "X", "pid": 1')
    r = merge(tmp_path / "o2", two_ranks[0], broken)
    assert r.returncode == 1 and "malformed" in r.stderr, r.stderr

    def session(name):
        return lambda s: s.update(origin={"session": name, "pod": "p", "host": "h"})
    a = shift_rank(two_ranks[0], tmp_path / "a", 0, edit_summary=session("train/a"))
    b = shift_rank(two_ranks[1], tmp_path / "b", 0, edit_summary=session("train/b"))
    r = merge(tmp_path / "o3", a, b)
    assert r.returncode == 1 and "different sessions" in r.stderr, r.stderr
    assert not (tmp_path / "o3" / "timeline.json.gz").exists()

    r = merge(tmp_path / "o4", two_ranks[0], two_ranks[0])
    assert r.returncode == 1 and "both rank 0" in r.stderr, r.stderr


def test_rank_without_collectives_is_merged_unaligned(two_ranks, tmp_path):
    quiet = shift_rank(two_ranks[1], tmp_path / "quiet", 0, drop_nccl=True)
    out = tmp_path / "merged"
    r = merge(out, two_ranks[0], quiet)
    assert r.returncode == 0, r.stderr
    assert "made no NCCL collective" in r.stderr
    tl, s = load(out)
    check_timeline(tl)
    assert any("made no NCCL collective" in w for w in s["warnings"]), s["warnings"]
    unaligned = [x for x in s["ranks"] if not x["aligned"]]
    assert len(unaligned) == 1 and unaligned[0]["offset_us"] == 0


def test_s3_sources_and_output(two_ranks, tmp_path):
    """The merge pod's way: ranks uploaded by `aiprof upload`, merged from s3:// into
    s3://, manifest last; the termination message lists the uploaded objects; no secret in
    anything it prints or writes."""
    import sys
    from conftest import ROOT
    sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
    import s3env
    missing = s3env.missing_ceph()
    if missing:
        pytest.skip("Ceph is not installed (missing " + ", ".join(missing) + "): "
                    "scripts/install-deps.sh")
    g = s3env.Radosgw()
    try:
        g.start()
        env = g.client_env()
        srcs = []
        for i, d in enumerate(two_ranks):
            local = tmp_path / f"up{i}"
            shutil.copytree(d, local)
            url = f"s3://{g.bucket}/train/job/trainer-{i}"
            r = subprocess.run([AIPROF, "upload", str(local), url], capture_output=True, text=True,
                               env=env, timeout=120)
            assert r.returncode == 0, r.stderr
            srcs.append(url)
        term = tmp_path / "term"
        dest = f"s3://{g.bucket}/train/job/merged"
        r = subprocess.run([AIPROF, "merge", "-o", dest, "--termination-log", str(term), *srcs],
                           capture_output=True, text=True, env=env, timeout=300, cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr
        lines = r.stdout.split()
        assert lines[0] == dest
        staging = tmp_path / lines[1]
        s3 = g.boto3()
        man = json.loads(s3.get_object(Bucket=g.bucket, Key="train/job/merged/manifest.json")["Body"].read())
        names = {a["name"]: a for a in man["artifacts"]}
        assert set(names) == {"timeline.json.gz", "summary.json"}
        body = s3.get_object(Bucket=g.bucket, Key="train/job/merged/summary.json")["Body"].read()
        s = json.loads(body)
        host = os.uname().nodename
        assert [x["name"] for x in s["ranks"]] == [f"rank 0 (trainer-0/{host})", f"rank 1 (trainer-1/{host})"]
        assert all(x["aligned"] for x in s["ranks"])
        with open(staging / "summary.json", "rb") as f:
            assert f.read() == body          # the local folder is kept, identical
        msg = json.load(open(term))
        urls = {a["name"]: a.get("url") for a in msg["artifacts"]}
        assert urls["summary.json"] == f"{dest}/summary.json", msg
        for text in (r.stdout, r.stderr, open(term).read()):
            assert g.secret not in text
        # a source that is not there: says which object is missing
        r = subprocess.run([AIPROF, "merge", "-o", str(tmp_path / "x"), srcs[0],
                            f"s3://{g.bucket}/train/job/trainer-9"], capture_output=True, text=True,
                           env=env, timeout=120)
        assert r.returncode == 1 and "trainer-9" in r.stderr and "timeline.json.gz" in r.stderr, r.stderr
    finally:
        g.stop()


def test_flow_ids_stay_pairs_across_ranks(two_ranks, tmp_path):
    """Two ranks whose timelines use the same flow ids (both containers' pid 1, say): the
    merged flows still pair up one to one, and stack frame references still resolve."""
    def with_flow(src, dst):
        shutil.copytree(src, dst)
        with gzip.open(src / "timeline.json.gz", "rt") as f:
            tl = json.load(f)
        evs = tl["traceEvents"]
        i, x = next((i, e) for i, e in enumerate(evs) if e.get("cat") == "cuda_api" and e["ph"] == "X")
        evs.insert(i + 1, {"ph": "s", "cat": "cuda_kernel", "name": "launch", "id": "1:77", "pid": x["pid"],
                           "tid": x["tid"], "ts": x["ts"]})
        evs.append({"ph": "f", "bp": "e", "cat": "cuda_kernel", "name": "launch", "id": "1:77", "pid": x["pid"],
                    "tid": 1000007, "ts": x["ts"] + x["dur"]})
        with gzip.open(dst / "timeline.json.gz", "wt") as f:
            json.dump(tl, f)
        return dst
    out = tmp_path / "merged"
    r = merge(out, with_flow(two_ranks[0], tmp_path / "a"), with_flow(two_ranks[1], tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    tl, _ = load(out)
    _, nflows = check_timeline(tl)
    # the ranks' own launch -> kernel flows (CUPTI), and the two planted ones
    own = 0
    for d in two_ranks:
        with gzip.open(d / "timeline.json.gz", "rt") as f:
            own += sum(e["ph"] == "s" for e in json.load(f)["traceEvents"])
    assert nflows == own + 2
    frames = tl["stackFrames"]
    refs = [e["sf"] for e in tl["traceEvents"] if "sf" in e]
    assert all(str(f) in frames for f in refs)
    assert all(fr.get("parent", next(iter(frames))) in frames for fr in frames.values())

#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Checks that injector/ keeps its layers (injector/README.md).

The folders of injector/ are stages of one pipeline, each allowed to use only the folders
below it:

    cli > merge > artifacts > analyze > collect > attach > target > model > common

Three things are checked, and each failure is printed with the file and what it used:
  - includes: a file's `#include "..."` of another folder's header;
  - calls: from the built objects (nm), every symbol an object uses and another defines;
  - cycles: two objects (files) that use each other, directly or around a loop, even
    inside one folder. common/ must use nothing of injector/.
injector/preload/ (libaiprof.so, loaded into the target) is a program of its own and is
left out.

    BUILD=build /usr/bin/python3 tests/layering.py      exit 0: the layers hold

LAYERING_ROOT=DIR checks another tree (its sources, and its objects under DIR/$BUILD).
"""
import os
import re
import subprocess
import sys

ROOT = os.environ.get("LAYERING_ROOT") or os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
LAYERS = ["cli", "merge", "artifacts", "analyze", "collect", "attach", "target", "model",
          "common"]
RANK = {name: len(LAYERS) - i for i, name in enumerate(LAYERS)}   # higher uses lower
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel):
    """The layer of a source path relative to ROOT, or None if it is not checked."""
    parts = rel.split("/")
    if parts[0] == "common":
        return "common"
    if parts[0] == "injector" and len(parts) == 3 and parts[1] in RANK:
        return parts[1]
    return None


def header_layer(name, includer):
    """The layer of the header an include names, seen from the including file."""
    here = os.path.dirname(includer)
    for base in (here, "", "common", "injector"):
        rel = os.path.normpath(os.path.join(base, name))
        if os.path.exists(os.path.join(ROOT, rel)):
            return layer_of(rel), rel
    return None, name


def sources():
    for top in ("injector", "common"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h")):
                    rel = os.path.relpath(os.path.join(dirpath, f), ROOT)
                    if layer_of(rel):
                        yield rel


def check_includes():
    bad = []
    for rel in sorted(sources()):
        me = layer_of(rel)
        with open(os.path.join(ROOT, rel)) as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            lay, target = header_layer(name, rel)
            if lay and RANK[lay] > RANK[me]:
                bad.append(f"{rel}: includes {target} ({lay} is above {me})")
            elif lay is None and me == "common" and target.startswith("injector/"):
                bad.append(f"{rel}: includes {target} (common/ uses nothing of injector/)")
    return bad


def objects():
    out = {}
    for top in ("injector", "common"):
        base = os.path.join(BUILD, top)
        for dirpath, _, files in os.walk(base):
            for f in files:
                if not f.endswith(".o"):
                    continue
                obj = os.path.join(dirpath, f)
                rel = os.path.relpath(obj, BUILD)[:-2] + ".c"
                if layer_of(rel) and os.path.exists(os.path.join(ROOT, rel)):
                    out[rel] = obj
    return out


def symbols(objs):
    """(defined: symbol -> source, used: source -> set of symbols)"""
    defined, used = {}, {}
    r = subprocess.run(["nm", "-A"] + sorted(objs.values()), capture_output=True, text=True,
                       check=True)
    back = {obj: rel for rel, obj in objs.items()}
    for line in r.stdout.splitlines():
        path, _, rest = line.partition(":")
        fields = rest.split()
        rel = back.get(path)
        if not rel:
            continue
        if len(fields) == 3 and fields[1] in "TDBRCV":
            defined.setdefault(fields[2], rel)
        elif len(fields) == 2 and fields[0] == "U":
            used.setdefault(rel, set()).add(fields[1])
    return defined, used


def check_calls(objs):
    bad, edges = [], {}
    defined, used = symbols(objs)
    for rel, syms in sorted(used.items()):
        me = layer_of(rel)
        for s in sorted(syms):
            other = defined.get(s)
            if not other or other == rel:
                continue
            edges.setdefault(rel, {}).setdefault(other, s)
            lay = layer_of(other)
            if RANK[lay] > RANK[me]:
                bad.append(f"{rel}: uses {s} of {other} ({lay} is above {me})")
    return bad, edges


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    bad = []
    for comp in out:
        links = [f"{a} -> {b} ({edges[a][b]})" for a in comp for b in sorted(edges.get(a, {}))
                 if b in comp]
        bad.append("cycle: " + "; ".join(links))
    return bad


def main():
    objs = objects()
    if not objs:
        print(f"layering: no objects under {BUILD} (run make first)", file=sys.stderr)
        return 2
    bad = check_includes()
    call_bad, edges = check_calls(objs)
    bad += call_bad + cycles(edges)
    for line in bad:
        print("layering:", line, file=sys.stderr)
    nlinks = sum(len(v) for v in edges.values())
    print(f"layering: {len(objs)} objects, {nlinks} links between files: "
          f"{'OK' if not bad else f'{len(bad)} violations'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Helm post-renderer of the e2e chain (e2e/chain.py `Env.helm_controller`): reads the chart's
rendered manifests on stdin and writes them back with the controller Deployment's pod on host
networking and KUBERNETES_SERVICE_HOST=127.0.0.1, KUBERNETES_SERVICE_PORT=<argv[1]>.

Why: the test cluster (../shared/k8s) has no kube-proxy and its API server listens on 127.0.0.1
only, so a pod reaches it only that way. A user's cluster needs none of this: the chart as
rendered reaches the API server through the `kubernetes` Service. Nothing else is changed."""
import sys

import yaml


def main():
    port = sys.argv[1]
    docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
    for d in docs:
        if d.get("kind") == "Deployment":
            spec = d["spec"]["template"]["spec"]
            spec["hostNetwork"] = True
            for c in spec["containers"]:
                env = [e for e in c.get("env") or [] if not e["name"].startswith("KUBERNETES_SERVICE_")]
                env += [{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": port}]
                c["env"] = env
    sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

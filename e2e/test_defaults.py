# SPDX-License-Identifier: MIT
"""The controller installed by the Helm chart (charts/aiprof, `helm install` into the real API
server, the controller image built from this tree) and its S3 defaults through the whole chain:
a session that names no output uploads where the chart's s3.* values say (the controller's
--default-s3-* flags), with the default Secret's credentials mounted into its injector by name;
the injector runs in the chart's injector namespace, with the Secret the admin put there.

Not as on a user's cluster: the controller pod gets host networking and KUBERNETES_SERVICE_HOST/
PORT = the API server's 127.0.0.1 address, because this kit has no kube-proxy and its API server
listens on loopback only (e2e/chain.py `Env.helm_controller`)."""
import json
import os

import pytest

from e2e.chain import CONTROLLER_IMAGE, HELM, INJECTOR_IMAGE
from e2e.test_e2e import TRAINER_RUN, check_artifacts_in_bucket


@pytest.mark.skipif(not os.access(HELM, os.X_OK), reason=f"{HELM} is missing (scripts/fetch-helm.sh)")
def test_session_without_output_uses_the_chart_defaults(env):
    rgw = env.rgw
    env.helm_controller(**{"s3.endpoint": env.s3_endpoint, "s3.bucket": rgw.bucket, "s3.prefix": "defaults",
                           "s3.region": rgw.env["AWS_REGION"], "s3.secretName": "s3-creds"})
    # the chart's controller pod runs the controller image, as the chart's non-root user
    ctl = [p for p in env.kube.get(f"/api/v1/namespaces/{env.ns}/pods",
                                   query={"labelSelector": "app.kubernetes.io/name=aiprof"}).json["items"]
           if p["status"].get("phase") == "Running"]
    assert len(ctl) == 1, [p["metadata"]["name"] for p in ctl]
    c = ctl[0]["spec"]["containers"][0]
    assert c["image"] == CONTROLLER_IMAGE and f"--injector-image={INJECTOR_IMAGE}" in c["args"], c
    assert ctl[0]["spec"]["securityContext"]["runAsUser"] == 65532
    assert ctl[0]["status"]["containerStatuses"][0]["ready"], ctl[0]["status"]

    env.pod("trainer-0", TRAINER_RUN)
    env.wait_running("trainer-0")
    env.apply({"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
               "metadata": {"name": "s", "namespace": env.ns},
               "spec": {"targets": {"podName": "trainer-0"}, "duration": "3s"}})
    s, _ = env.wait_phase("s", ("Succeeded", "Failed"), timeout=120)
    st = s["status"]
    assert st["phase"] == "Succeeded", json.dumps(st)[:3000] + env.debug()
    # the artifacts went under the default prefix, as listed, byte-identical
    by_name = check_artifacts_in_bucket(env, st, "trainer-0")
    for a in by_name.values():
        assert a["url"].startswith(f"s3://{rgw.bucket}/defaults/{env.ns}/s/{s['metadata']['uid']}/trainer-0/"), a
    # the status and an Event say the defaults were used
    cond = next(c for c in st["conditions"] if c["type"] == "OutputDefaulted")
    assert cond["status"] == "True" and f"bucket {rgw.bucket}" in cond["message"], cond
    r = env.kubectl("get", "events", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [e for e in json.loads(r.stdout)["items"] if e.get("reason") == "DefaultsApplied"
            and e["involvedObject"]["name"] == "s"], r.stdout
    # the Secret went by reference only
    pod = env.injector_pods("s")[0]
    # in the chart's injector namespace (Pod Security privileged), none in the session's
    assert pod["metadata"]["namespace"] == f"{env.ns}-injectors", pod["metadata"]
    assert [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v] == ["s3-creds"]
    assert pod["spec"]["containers"][0]["image"] == INJECTOR_IMAGE

# SPDX-License-Identifier: MIT
"""The controller's S3 defaults through the whole chain: a session that names no output
uploads where the controller's --default-s3-* flags say (the chart's s3.* values), with the
default Secret's credentials mounted into its injector by name."""
import json

from e2e.test_e2e import TRAINER_RUN, check_artifacts_in_bucket


def test_session_without_output_uses_the_controller_defaults(env):
    rgw = env.rgw
    env.controller("--default-s3-endpoint", rgw.endpoint, "--default-s3-bucket", rgw.bucket,
                   "--default-s3-prefix", "defaults", "--default-s3-region", rgw.env["AWS_REGION"],
                   "--default-s3-secret", "s3-creds")
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
        assert a["url"].startswith(f"s3://{rgw.bucket}/defaults/{env.ns}/s/trainer-0/"), a
    # the status and an Event say the defaults were used
    cond = next(c for c in st["conditions"] if c["type"] == "OutputDefaulted")
    assert cond["status"] == "True" and f"bucket {rgw.bucket}" in cond["message"], cond
    r = env.kubectl("get", "events", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert [e for e in json.loads(r.stdout)["items"] if e.get("reason") == "DefaultsApplied"
            and e["involvedObject"]["name"] == "s"], r.stdout
    # the Secret went by reference only
    pod = env.injector_pods("s")[0]
    assert [v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v] == ["s3-creds"]

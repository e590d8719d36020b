# SPDX-License-Identifier: MIT
"""pytest fixtures of the end-to-end chain (e2e/chain.py): one chain per test session on the
real Kubernetes of ../shared/k8s (tests/k8s/realk8s.py, stopped at the end of the session),
one namespace and controller per test."""
import os
import re
import shutil
import uuid

import pytest

from e2e.chain import Chain, end_env, missing, new_env


def pytest_sessionfinish(session, exitstatus):
    """Stops the real cluster if this session started it (idempotent: another conftest may
    call it too)."""
    from e2e.chain import realk8s
    realk8s.stop_shared()


@pytest.fixture(scope="session")
def chain():
    why = missing()
    if why:
        pytest.skip(why)
    # the node's injectors share unwind rules there (a hostPath the kubelet creates): removed
    # at the end if this session made it
    cache = "/var/cache/aiprof"
    made = not os.path.exists(cache)
    c = Chain()
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    yield c
    c.stop()
    if made:
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture
def env(chain, request):
    ns = "e2e-" + re.sub(r"[^a-z0-9]", "", request.node.name.lower())[-30:] + "-" + uuid.uuid4().hex[:4]
    e = new_env(chain, ns)
    yield e
    for text in end_env(e):
        assert chain.rgw.secret not in text, "the S3 secret key is in the controller log"

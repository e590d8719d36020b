# SPDX-License-Identifier: MIT
"""Installing aiprof, offline: the Helm chart rendered and linted, the kustomize base, the
example CRs against the CRD schemas, the Dockerfiles and the images target — checked with the
real tools a user runs (helm 3.17 from scripts/fetch-helm.sh, kubectl), Kubernetes' own
schemas (kubernetes-models, via tests/install/k8s_validate.mjs) and python3-jsonschema.

What a real API server answers — the install itself, CEL rules at apply time, the controller
under the chart's RBAC with the real authorizer — is tested against one in test_realk8s.py;
the helpers for the RBAC check (rbac_allows, granted, UNOBSERVED) live here for both."""
import copy
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
CHART = os.path.join(ROOT, "charts", "aiprof")
CRDS = os.path.join(ROOT, "crds")
EXAMPLES = os.path.join(ROOT, "manifests", "examples")
BASE = os.path.join(ROOT, "manifests", "base")
INVALID = os.path.join(ROOT, "tests", "install", "invalid")
TOOLS = os.path.join(ROOT, "build", "tools")
MODELS = os.path.join(TOOLS, "k8s-models")
CONTROLLER = os.path.join(ROOT, BUILD, "aiprof-controller")
RELEASE_NS = "aiprof-system"
INJ_NS = RELEASE_NS + "-injectors"      # the chart's injector namespace
sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))

from fakeapi.client import Control, Kube, launch  # noqa: E402
from fakeapi.validation import check_rule, rules_of  # noqa: E402

INSTALL_HINT = "run scripts/install-deps.sh (it fetches helm and kubernetes-models into build/tools)"


def helm_path():
    for p in (os.environ.get("HELM"), os.path.join(TOOLS, "helm", "helm"), shutil.which("helm")):
        if p and os.access(p, os.X_OK):
            return p
    raise AssertionError(f"helm not found: {INSTALL_HINT}")


def run(argv, ok=True, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    r = subprocess.run(argv, **kw)
    if ok and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def helm(*args, ok=True):
    return run([helm_path(), *args], ok=ok)


def render(*sets, crds=False, chart=CHART):
    argv = ["template", "aiprof", chart, "-n", RELEASE_NS]
    if crds:
        argv.append("--include-crds")
    for s in sets:
        argv += ["--set", s]
    return [d for d in yaml.safe_load_all(helm(*argv).stdout) if d]


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} objects"
    return found[0]


def container_args(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


def load_crd(name):
    with open(os.path.join(CRDS, name)) as f:
        return yaml.safe_load(f)


def crd_schema(crd):
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def notes(*sets):
    """NOTES.txt as `helm install` prints it (rendered through a copy of the chart, since
    `helm template` does not render NOTES and `helm install` needs a full cluster)."""
    tmp = tempfile.mkdtemp(prefix="aiprof-notes-")
    try:
        chart = os.path.join(tmp, "aiprof")
        shutil.copytree(CHART, chart)
        os.rename(os.path.join(chart, "templates", "NOTES.txt"), os.path.join(chart, "notes.txt"))
        with open(os.path.join(chart, "templates", "notes.yaml"), "w") as f:
            f.write('notes: |\n{{ tpl (.Files.Get "notes.txt") . | indent 2 }}\n')
        argv = ["template", "aiprof", chart, "-n", RELEASE_NS, "--show-only", "templates/notes.yaml"]
        for s in sets:
            argv += ["--set", s]
        return yaml.safe_load(helm(*argv).stdout)["notes"]
    finally:
        shutil.rmtree(tmp)


# ------------------------------------------------------------------------------- the chart

def test_helm_lint_is_clean():
    for sets in ([], ["controller.watchNamespace=train", "metrics.serviceMonitor.enabled=true",
                      "controller.replicas=1"]):
        argv = ["lint", "--strict", CHART]
        for s in sets:
            argv += ["--set", s]
        out = helm(*argv).stdout
        assert "1 chart(s) linted, 0 chart(s) failed" in out
        assert not re.search(r"\[(INFO|WARNING|ERROR)\]", out), out


def test_chart_crds_are_the_crds():
    for name in ("profilingsession.yaml", "profilingpolicy.yaml"):
        with open(os.path.join(CRDS, name), "rb") as a, open(os.path.join(CHART, "crds", name), "rb") as b:
            assert a.read() == b.read(), f"charts/aiprof/crds/{name} differs from crds/{name}: copy it"
    assert sorted(os.listdir(os.path.join(CHART, "crds"))) == sorted(
        f for f in os.listdir(CRDS) if f.endswith(".yaml"))


def test_default_render():
    docs = render()
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in docs)
    assert kinds == sorted([
        ("ServiceAccount", "aiprof-controller"), ("ClusterRole", "aiprof"),
        ("ClusterRoleBinding", "aiprof"), ("ClusterRole", "aiprof-nodes"),
        ("ClusterRoleBinding", "aiprof-nodes"), ("Role", "aiprof-leader-election"),
        ("RoleBinding", "aiprof-leader-election"), ("Role", "aiprof-injectors"),
        ("RoleBinding", "aiprof-injectors"), ("Namespace", INJ_NS), ("Service", "aiprof-metrics"),
        ("Deployment", "aiprof"), ("PodDisruptionBudget", "aiprof"),
        ("ClusterRole", "aiprof-http-auth"), ("ClusterRoleBinding", "aiprof-http-auth"),
        ("ClusterRole", "aiprof-metrics-reader"), ("NetworkPolicy", "aiprof")])
    for d in docs:
        if d["kind"] not in ("ClusterRole", "ClusterRoleBinding", "Namespace"):
            want = INJ_NS if d["metadata"]["name"] == "aiprof-injectors" else RELEASE_NS
            assert d["metadata"]["namespace"] == want, d["metadata"]
    # the injector pods' namespace admits them (hostPID, capabilities); the controller's does not
    assert one(docs, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert f"--injector-namespace={INJ_NS}" in container_args(docs)
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "aiprof-controller"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    c = pod["containers"][0]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc.get("privileged") is False
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    port = c["ports"][0]
    assert (c["livenessProbe"]["httpGet"]["path"], c["readinessProbe"]["httpGet"]["path"]) == ("/healthz", "/readyz")
    assert c["livenessProbe"]["httpGet"]["port"] == port["name"]
    args = c["args"]
    assert f"--metrics-addr=:{port['containerPort']}" in args
    assert "--leader-elect" in args and f"--lease-namespace={RELEASE_NS}" in args
    assert "--injector-image=aiprof/aiprof-injector:0.1.0" in args
    assert not any(a.startswith("--namespace") for a in args)          # every namespace
    assert c["image"] == "aiprof/aiprof-controller:0.1.0"
    svc = one(docs, "Service")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["ports"][0]["targetPort"] == port["name"]
    assert one(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    # no Secrets, no wildcards, anywhere in the RBAC
    for d in docs:
        for rule in d.get("rules") or []:
            res = rule.get("resources", []) + rule.get("nonResourceURLs", [])
            assert "secrets" not in res and "*" not in res + rule["verbs"], rule
    # the HTTP endpoint: the controller reviews its clients' tokens; whoever scrapes is bound
    # to the metrics reader (by the admin); only the metrics port is reachable, from pods
    assert one(docs, "ClusterRole", "aiprof-http-auth")["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]
    assert one(docs, "ClusterRoleBinding", "aiprof-http-auth")["subjects"] == [
        {"kind": "ServiceAccount", "name": "aiprof-controller", "namespace": RELEASE_NS}]
    assert one(docs, "ClusterRole", "aiprof-metrics-reader")["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not [b for b in docs if b["kind"].endswith("Binding") and b["roleRef"]["name"] == "aiprof-metrics-reader"]
    netpol = one(docs, "NetworkPolicy")["spec"]
    assert netpol["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    assert netpol["policyTypes"] == ["Ingress"] and "egress" not in netpol
    assert netpol["ingress"] == [{"ports": [{"port": port["name"], "protocol": "TCP"}],
                                  "from": [{"namespaceSelector": {}}]}]


def test_render_options():
    docs = render("controller.watchNamespace=train", "controller.replicas=1",
                  "metrics.serviceMonitor.enabled=true", "injector.priorityClassName=aiprof-high",
                  "controller.logLevel=debug", "controller.image.tag=1.2.3")
    args = container_args(docs)
    assert "--namespace=train" in args and "-v" in args
    # one replica elects a leader too: a rolling update's surge pod stands by until the old
    # pod released the lease, so two controllers never act at once
    assert "--leader-elect" in args and "--no-leader-elect" not in args
    assert one(docs, "Deployment")["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert "--priority-class=aiprof-high" in args
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "aiprof/aiprof-controller:1.2.3"
    role = one(docs, "Role", "aiprof")
    assert role["metadata"]["namespace"] == "train"
    assert one(docs, "RoleBinding", "aiprof")["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "aiprof"}
    assert not [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "aiprof"]
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]       # one replica
    sm = one(docs, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "http-metrics"
    # Prometheus authenticates with its own service account's token
    assert sm["spec"]["endpoints"][0]["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    assert not [d for d in render("metrics.networkPolicy.enabled=false") if d["kind"] == "NetworkPolicy"]
    np = one(render("metrics.networkPolicy.from[0].podSelector.matchLabels.app=prometheus",
                    "metrics.networkPolicy.from[0].namespaceSelector.matchLabels.team=monitoring"),
             "NetworkPolicy")
    assert np["spec"]["ingress"][0]["from"] == [{"podSelector": {"matchLabels": {"app": "prometheus"}},
                                                 "namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]
    # values.schema.json: a wrong value or a misspelt key is an error naming it
    for s, want in (("controller.logLevel=chatty", "- controller.logLevel: controller.logLevel must be one of"),
                    ("controller.replicas=zero", "- controller.replicas: Invalid type. Expected: integer"),
                    ("injector.grace=2minutes", "- injector.grace: Does not match pattern"),
                    ("controler.replicas=1", "Additional property controler is not allowed")):
        r = helm("template", "aiprof", CHART, "--set", s, ok=False)
        assert r.returncode != 0 and want in r.stderr, (s, r.stderr)
    r = helm("template", "aiprof", CHART, "--skip-schema-validation", "--set", "controller.logLevel=chatty", ok=False)
    assert r.returncode != 0 and 'controller.logLevel "chatty": use info, debug or warning' in r.stderr
    r = helm("template", "aiprof", CHART, "--set", "serviceAccount.create=false", ok=False)
    assert r.returncode != 0 and "serviceAccount.name is required" in r.stderr


# ----------------------------------------------------- the oldest Kubernetes supported: 1.25

OLDEST = "1.25"
TYPES_1_25 = os.path.join(TOOLS, "k8s-types-1.25", "node_modules", "kubernetes-types")
# CEL in 1.25: the standard definitions plus the Kubernetes list, regex and URL libraries
CEL_1_25 = {"has", "size", "matches", "startsWith", "endsWith", "contains", "duration", "timestamp", "int",
            "uint", "double", "string", "bool", "bytes", "type", "dyn", "exists", "all", "exists_one", "map",
            "filter", "isSorted", "sum", "min", "max", "indexOf", "lastIndexOf", "find", "findAll", "url",
            "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "getQuery",
            "getHours", "getMinutes", "getSeconds", "getMilliseconds"}


def kube_types_1_25():
    sys.path.insert(0, os.path.join(ROOT, "tests", "install"))
    import kubetypes
    try:
        return kubetypes.KubeTypes(TYPES_1_25)
    except FileNotFoundError as e:
        raise AssertionError(f"{e}: {INSTALL_HINT}") from None


def shipped_objects():
    """(where, object) of everything the install ships: crds/, the chart rendered with its
    defaults and with every optional part on, and the kustomize base."""
    out = []
    for name in sorted(os.listdir(CRDS)):
        out += [(f"crds/{name}", d) for d in yaml.safe_load_all(open(os.path.join(CRDS, name))) if d]
    for sets in ([], ["controller.watchNamespace=train", "controller.replicas=1", "metrics.serviceMonitor.enabled=true",
                      "injector.priorityClassName=aiprof-high", "s3.bucket=b", "s3.secretName=s"]):
        out += [(f"chart {' '.join(sets) or '(defaults)'}", d) for d in render(*sets, crds=True)]
    for name in ("aiprof.yaml", "namespace.yaml"):
        out += [(f"manifests/base/{name}", d) for d in yaml.safe_load_all(open(os.path.join(BASE, name))) if d]
    return out


def test_everything_shipped_installs_on_kubernetes_1_25():
    """The oldest Kubernetes the README promises is 1.25 (CEL validation rules on by default).
    The real API server here is 1.32 (test_realk8s.py installs there), so 1.25 is checked from
    its API types (kubernetes-types@1.25.0): no object uses a field 1.25 does not know, the
    CEL rules call only what 1.25's CEL has, and the chart says it needs 1.25."""
    types = kube_types_1_25()
    unknown = {}
    for where, d in shipped_objects():
        bad = types.unknown_fields(d)
        if bad:
            unknown[f"{where}: {d['kind']} {d['metadata']['name']}"] = bad
    assert not unknown, f"fields Kubernetes {OLDEST} does not know: {json.dumps(unknown, indent=1)}"
    # the check sees a field of a later release (selectableFields is 1.30+)
    crd = load_crd("profilingsession.yaml")
    crd["spec"]["versions"][0]["selectableFields"] = [{"jsonPath": ".status.phase"}]
    assert types.unknown_fields(crd) == ["spec.versions[0].selectableFields"]
    for name in ("profilingsession.yaml", "profilingpolicy.yaml"):
        for _, rule in rules_of(crd_schema(load_crd(name))):
            assert set(rule) <= {"rule", "message"}, f"{name}: {rule} (messageExpression, reason, fieldPath are 1.27+)"
            calls = set(re.findall(r"([A-Za-z_]\w*)\s*\(", rule["rule"]))
            assert calls <= CEL_1_25, f"{name}: {calls - CEL_1_25} is not in Kubernetes {OLDEST}'s CEL"
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        assert yaml.safe_load(f)["kubeVersion"] == f">={OLDEST}.0-0"


def test_controller_flags_the_chart_passes_exist():
    with open(os.path.join(ROOT, "controller", "main.c")) as f:
        src = f.read()
    table = set(re.findall(r'\{\s*"([a-z0-9-]+)",\s*(?:no|required)_argument', src))
    assert "leader-elect" in table, "cannot read the option table of controller/main.c"
    seen = set()
    for sets in ([], ["controller.watchNamespace=train", "controller.replicas=1",
                      "injector.priorityClassName=p", "controller.logLevel=warning"],
                 ["s3.bucket=profiles", "s3.endpoint=https://s3.example.com", "s3.prefix=p",
                  "s3.region=r", "s3.secretName=c", "injector.nodeSelector.pool=gpu",
                  "injector.tolerations[0].key=k", "injector.tolerations[0].effect=NoSchedule"]):
        for a in container_args(render(*sets)):
            if a.startswith("--"):
                seen.add(a[2:].split("=", 1)[0])
            else:
                assert a in ("-v", "-q"), a
    missing = seen - table
    assert not missing, f"the chart passes flags aiprof-controller does not have: {missing}"
    if os.path.exists(CONTROLLER):
        usage = run([CONTROLLER, "--help"]).stdout
        for flag in seen:
            assert f"--{flag}" in usage, flag


def test_notes_tell_the_next_command():
    n = notes()
    assert f"kubectl -n {RELEASE_NS} rollout status deployment/aiprof" in n
    assert "get profilingsessions -w" in n
    assert "NOT applied" not in n and "s3.* values" not in n
    # inline s3 is off by default: the session names the admin's storage, made as shown
    session = yaml.safe_load(notes_session(n))
    assert session["spec"]["output"] == {"storageRef": {"name": "STORAGE"}}, session
    assert "kind: ClusterProfilingStorage" in n and "metadata: {name: STORAGE}" in n
    n = notes("controller.allowInlineS3=true")
    session = yaml.safe_load(notes_session(n))
    assert session["spec"]["output"]["s3"] == {"bucket": "BUCKET", "secretRef": {"name": "s3-creds"}}
    n = notes("injector.nodeSelector.pool=gpu", "s3.bucket=profiles", "s3.secretName=creds")
    assert "injector.nodeSelector and injector.tolerations apply to merge pods" in n
    # with s3 defaults the controller fills output.s3: the session leaves it out
    assert "Sessions without spec.output.s3 upload to s3://profiles/ with the credentials of " \
        "Secret creds" in n
    session = yaml.safe_load(notes_session(n))
    assert "output" not in session["spec"], session


def notes_session(n):
    """The session NOTES.txt tells the user to apply (a here-document)."""
    return textwrap.dedent(re.search(r"<<'SESSION'\n(.*?\n)  SESSION\n", n, re.S).group(1))


def k8s_validate(docs):
    node = shutil.which("node")
    assert node, f"node is missing: {INSTALL_HINT}"
    assert os.path.exists(os.path.join(MODELS, "node_modules", "kubernetes-models")), \
        f"kubernetes-models missing in {MODELS}: {INSTALL_HINT}"
    r = run([node, os.path.join(ROOT, "tests", "install", "k8s_validate.mjs"), MODELS],
            input=json.dumps(docs))
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_rendered_objects_are_valid_kubernetes_objects():
    docs = render(crds=True) + render("controller.watchNamespace=train", "controller.replicas=1",
                                      "metrics.serviceMonitor.enabled=true",
                                      "controller.nodeSelector.pool=system",
                                      "controller.tolerations[0].key=dedicated",
                                      "controller.tolerations[0].operator=Exists",
                                      "controller.imagePullSecrets[0].name=regcred")
    with open(os.path.join(BASE, "namespace.yaml")) as f:
        docs.append(yaml.safe_load(f))
    res = k8s_validate(docs)
    assert len(res) == len(docs)
    bad = [r for r in res if not r["ok"]]
    assert not bad, json.dumps(bad, indent=1)
    assert {r["kind"] for r in res} >= {"Deployment", "CustomResourceDefinition", "ServiceMonitor",
                                        "ClusterRole", "Role", "Namespace", "PodDisruptionBudget"}
    # the validator is live: a wrong type and a misspelt field are caught
    dep = copy.deepcopy(one(docs[:20], "Deployment"))
    dep["spec"]["replicas"] = "2"
    dep["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    crd = copy.deepcopy(one(docs, "CustomResourceDefinition", "profilingsessions.aiprof.io"))
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validation"] = []
    errs = [r["errors"] for r in k8s_validate([dep, crd])]
    assert any("spec/replicas must be integer" in e for e in errs[0]), errs
    assert any('unknown field "readinesProbe"' in e for e in errs[0]), errs
    assert any('unknown field "x-kubernetes-validation"' in e for e in errs[1]), errs


def test_kustomize_base_is_the_chart():
    with open(os.path.join(BASE, "aiprof.yaml")) as f:
        committed = f.read()
    rendered = helm("template", "aiprof", CHART, "-n", RELEASE_NS, "--include-crds").stdout
    assert committed == rendered, (
        "manifests/base/aiprof.yaml is not the chart's output; regenerate it: build/tools/helm/helm "
        "template aiprof charts/aiprof -n aiprof-system --include-crds > manifests/base/aiprof.yaml")
    out = run(["kubectl", "kustomize", BASE]).stdout
    objs = [d for d in yaml.safe_load_all(out) if d]
    ns = [d for d in objs if d["kind"] == "Namespace"]
    # the controller's, from namespace.yaml (restricted), and the injectors', from the chart
    assert sorted(n["metadata"]["name"] for n in ns) == [RELEASE_NS, INJ_NS]
    assert next(n for n in ns if n["metadata"]["name"] == RELEASE_NS)["metadata"]["labels"][
        "pod-security.kubernetes.io/enforce"] == "restricted"

    def key(d):
        return (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
    assert sorted((d for d in objs if d["kind"] != "Namespace" or d["metadata"]["name"] == INJ_NS), key=key) == \
        sorted(render(crds=True), key=key)


# ------------------------------------------------------------------ CRs: schema and CEL rules

def example_docs():
    out = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.yaml"))):
        with open(path) as f:
            out += [(path, d) for d in yaml.safe_load_all(f) if d]
    return out


def test_every_crd_rule_is_one_the_double_evaluates():
    n = 0
    for name in ("profilingsession.yaml", "profilingpolicy.yaml"):
        for path, rule in rules_of(crd_schema(load_crd(name))):
            check_rule(rule)               # raises UnsupportedRule naming the construct
            assert rule.get("message"), f"{name} {path}: a rule without a message"
            n += 1
    assert n >= 10


def test_session_and_template_schemas_agree():
    sess = crd_schema(load_crd("profilingsession.yaml"))["properties"]["spec"]
    tmpl = crd_schema(load_crd("profilingpolicy.yaml"))["properties"]["spec"]["properties"][
        "sessionTemplate"]["properties"]["spec"]
    assert tmpl["x-kubernetes-validations"] == sess["x-kubernetes-validations"]
    assert {k: v for k, v in tmpl["properties"].items() if k != "targets"} == \
        {k: v for k, v in sess["properties"].items() if k != "targets"}


def test_examples_validate_against_their_crd_schema():
    import jsonschema
    schemas = {"ProfilingSession": crd_schema(load_crd("profilingsession.yaml")),
               "ProfilingPolicy": crd_schema(load_crd("profilingpolicy.yaml")),
               "ClusterProfilingStorage": crd_schema(load_crd("clusterprofilingstorage.yaml"))}
    kinds = []
    for path, d in example_docs():
        jsonschema.Draft4Validator(schemas[d["kind"]]).validate(d)
        kinds.append(d["kind"])
    assert kinds.count("ProfilingSession") >= 4 and kinds.count("ProfilingPolicy") >= 2
    assert kinds.count("ClusterProfilingStorage") == 1
    # and the validator rejects what the schema forbids
    bad = copy.deepcopy(next(d for _, d in example_docs() if d["kind"] == "ProfilingSession"))
    bad["spec"]["duration"] = 30
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(schemas[bad["kind"]]).validate(bad)


@pytest.fixture(scope="module")
def api():
    tmp = tempfile.mkdtemp(prefix="aiprof-install-")
    namespaces = sorted({d["metadata"]["namespace"] for _, d in example_docs() if "namespace" in d["metadata"]} |
                        {"train", "rbac", RELEASE_NS})
    args = []
    for ns in namespaces:
        args += ["--create-namespace", ns]
    p, ep = launch(os.path.join(tmp, "api"), *args)
    try:
        yield {"ep": ep, "tmp": tmp, "kube": Kube(ep["server"], ep["ca"], ep["token"]),
               "ctl": Control(ep["control"])}
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def kubectl(api, *args, ok=True, input=None):
    return run(["kubectl", "--kubeconfig", api["ep"]["kubeconfig"], *args], ok=ok, input=input)


# ---------------------------------------------------------------------- RBAC, measured

def rbac_allows(docs, user, req):
    """Does the rendered RBAC let `user` make request `req` (a request-log entry)?"""
    sa_ns, sa_name = user.split(":")[2:4]
    res = req["resource"] + (f"/{req['subresource']}" if req["subresource"] else "")
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
             for d in docs if d["kind"] in ("Role", "ClusterRole")}
    for b in docs:
        if b["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["kind"] == "ServiceAccount" and s["name"] == sa_name and s["namespace"] == sa_ns
                   for s in b["subjects"]):
            continue
        bns = b["metadata"].get("namespace")
        if b["kind"] == "RoleBinding" and req["namespace"] != bns:
            continue
        ref = b["roleRef"]
        role = roles.get((ref["kind"], bns if ref["kind"] == "Role" else None, ref["name"]))
        for rule in (role or {}).get("rules", []):
            if req["group"] in rule["apiGroups"] and res in rule["resources"] and req["verb"] in rule["verbs"] \
                    and (not rule.get("resourceNames") or req["name"] in rule["resourceNames"]):
                return True
    return False


def granted(docs):
    out = set()
    for d in docs:
        for rule in d.get("rules") or []:
            if "nonResourceURLs" in rule:   # the metrics reader, for whoever scrapes: not the controller's
                continue
            for g in rule["apiGroups"]:
                for r in rule["resources"]:
                    for v in rule["verbs"]:
                        out.add((g, r, v))
    return out


# Grants no request shows, each with its reason. The test fails if one of them starts to be
# used (then it belongs to the measured set) or if the chart grants anything else.
UNOBSERVED = {
    # admission (OwnerReferencesPermissionEnforcement): injector pods' ownerReferences to their
    # session set blockOwnerDeletion, which needs update on the owner's finalizers
    ("aiprof.io", "profilingsessions/finalizers", "update"): "ownerReferences with blockOwnerDeletion",
    ("aiprof.io", "profilingpolicies/finalizers", "update"): "sessions a policy makes are owned by it",
    # the HTTP endpoint reviews a client's token only when one calls /metrics or /ws/sessions
    # (tests/integration/test_http_auth.py)
    ("authentication.k8s.io", "tokenreviews", "create"): "a client's bearer token: who it is",
    ("authorization.k8s.io", "subjectaccessreviews", "create"): "may that user get /metrics, list sessions",
    # the in-cluster artifact store, when an injector pod uploads (tests/integration/
    # test_artstore.py runs it under the chart's RBAC)
    ("", "configmaps", "create"): "an artifact's ConfigMaps",
    ("", "configmaps", "list"): "the session's total",
    ("", "configmaps", "get"): "a retry finds a ConfigMap there already",
}
POLICY_GRANTS = {("aiprof.io", "profilingpolicies", v) for v in ("get", "list", "watch")} | \
    {("aiprof.io", "profilingpolicies/status", "patch"), ("aiprof.io", "profilingsessions", "create")}


# ---------------------------------------------------------------------------------- images

def dockerfile_stages(path):
    """[(base, [package ...], text)] of each FROM stage."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    stages = []
    for chunk in re.split(r"^FROM ", text, flags=re.M)[1:]:
        pkgs = []
        for m in re.finditer(r"apt-get install[^&]*", chunk):
            pkgs += [w for w in m.group(0).split()[2:] if not w.startswith("-")]
        stages.append((chunk.split()[0], pkgs, chunk))
    return stages


def build_images_packages(var):
    """A package list of scripts/build-images.sh (INJECTOR_PACKAGES, CONTROLLER_PACKAGES)."""
    with open(os.path.join(ROOT, "scripts", "build-images.sh")) as f:
        return re.search(rf'^{var}="([^"]*)"', f.read(), re.M).group(1).split()


@pytest.mark.parametrize("dockerfile,binaries,packages", [
    ("controller/Dockerfile", ["aiprof-controller"], "CONTROLLER_PACKAGES"),
    ("injector/Dockerfile", ["aiprof", "libaiprof.so"], "INJECTOR_PACKAGES"),
])
def test_dockerfiles(dockerfile, binaries, packages):
    stages = dockerfile_stages(os.path.join(ROOT, dockerfile))
    with open(os.path.join(ROOT, dockerfile)) as f:
        assert "ARG DEBIAN=debian:bookworm-slim" in f.read()
    assert len(stages) == 2 and all(base == "${DEBIAN}" for base, _, _ in stages), "two bookworm-slim stages"
    build, final = stages
    for _, pkgs, _ in stages:
        assert pkgs, "no packages"
        for p in pkgs:
            # no version pins (a security update would break the build), and a package this
            # Debian knows
            assert "=" not in p, f"{dockerfile}: {p}: a version pin breaks at Debian's next update"
            assert run(["apt-cache", "show", p], ok=False).returncode == 0, f"{dockerfile}: no package {p}"
    # the image make images builds without an engine holds the same packages
    assert sorted(final[1]) == sorted(build_images_packages(packages)), (final[1], packages)
    for b in binaries:
        assert f"build/{b}" in build[2], f"{dockerfile} does not build build/{b}"
        assert re.search(rf"COPY --from=build /src/build/{re.escape(b)} ", final[2]), b
    assert "USER 65532" in final[2] or dockerfile.startswith("injector/")
    # every shared library the built programs need comes from a package the final stage installs
    final_pkgs = set(final[1]) | {"libc6"}
    for b in binaries:
        path = os.path.join(ROOT, BUILD, b)
        if not os.path.exists(path):
            pytest.skip(f"{path} not built")
        needed = re.findall(r"\(NEEDED\).*\[(.+)\]", run(["readelf", "-d", path]).stdout)
        resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", run(["ldd", path]).stdout, re.M))
        for so in needed:
            if so.startswith("ld-linux"):
                continue
            lib = resolved.get(so)
            assert lib, f"{b}: {so} does not resolve here"
            # merged /usr: the package may list either spelling of the path
            cands = {lib, os.path.realpath(lib)}
            cands |= {c[4:] if c.startswith("/usr/") else "/usr" + c for c in set(cands)}
            out = run(["dpkg", "-S", *sorted(cands)], ok=False).stdout
            pkg = out.split(":")[0] if out else ""
            assert pkg, f"{so} ({lib}): no package owns it"
            assert pkg in final_pkgs, f"{dockerfile}: {b} needs {so} from {pkg}, not installed in the image"
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        assert "build/" in f.read().split(), "build outputs must stay out of the image's context"


def test_rbac_names_every_resource_the_controller_code_calls():
    """A static cross-check of the measured test: every API path the controller's code builds
    names a resource the chart grants something on (so a call added to the code that the
    measured run does not reach still fails here until the chart grants it)."""
    macros = {"SESSION_RESOURCE": "profilingsessions", "POLICY_RESOURCE": "profilingpolicies"}
    paths = set()
    for src in glob.glob(os.path.join(ROOT, "controller", "*.c")):
        with open(src) as f:
            text = f.read()
        for m in re.finditer(r'"(/apis?/[^"]*)"', text):
            paths.add(m.group(1).split("?", 1)[0])      # less a query (?labelSelector=...)
        for m in re.finditer(r'SESSION_API_PREFIX\s+"([^"]*)"\s*(SESSION_RESOURCE|POLICY_RESOURCE)?', text):
            paths.add("/apis/aiprof.io/v1alpha1" + m.group(1) + (macros[m.group(2)] if m.group(2) else ""))
    wanted = set()
    for p in paths:
        parts = [x for x in p.split("/") if x]
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            rest = rest[2:]
        if not rest or rest[0] == "%s":
            continue
        res = rest[0] + (f"/{rest[2]}" if len(rest) > 2 and rest[2] != "%s" else "")
        wanted.add((group, res))
    assert ("", "pods/ephemeralcontainers") in wanted and ("aiprof.io", "profilingsessions") in wanted
    have = {(g, r) for g, r, _ in granted(render())}
    assert wanted <= have, f"the controller calls resources the chart grants nothing on: {sorted(wanted - have)}"
    # subresources passed as arguments ("/status")
    with open(os.path.join(ROOT, "controller", "controller.c")) as f:
        if '"/status"' in f.read():
            assert ("aiprof.io", "profilingsessions/status") in have


def test_a_rule_the_double_cannot_evaluate_is_refused_loudly(api):
    crd = load_crd("profilingsession.yaml")
    crd["metadata"]["name"] = "widgets.example.io"
    crd["spec"]["group"] = "example.io"
    crd["spec"]["names"] = {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"}
    crd["spec"]["versions"][0].pop("selectableFields", None)
    spec = crd_schema(crd)["properties"]["spec"]
    spec["x-kubernetes-validations"] = [{"rule": "self.duration.split('h').size() == 1", "message": "m"}]
    kubectl(api, "apply", "-f", "-", input=yaml.safe_dump(crd))
    r = kubectl(api, "apply", "-n", "train", "-f", "-", ok=False, input=yaml.safe_dump({
        "apiVersion": "example.io/v1alpha1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"targets": {"podName": "p"}}}))
    assert r.returncode != 0
    assert "fakeapi (a test double) cannot evaluate rule" in r.stderr and "unsupported CEL: method split()" in r.stderr


def test_make_images_tags_what_the_chart_runs():
    out = run(["make", "-s", "-n", "images", "ENGINE=docker"], cwd=ROOT).stdout
    tags = re.findall(r"build -f (\S+)/Dockerfile -t (\S+) \.", out)
    docs = render()
    args = container_args(docs)
    assert dict(tags) == {
        "controller": one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"],
        "injector": next(a.split("=", 1)[1] for a in args if a.startswith("--injector-image="))}


@pytest.mark.parametrize("dockerfile,sources", [
    ("controller/Dockerfile", ["controller/*.c", "common/*.c"]),
    ("injector/Dockerfile", ["injector/*.c", "injector/preload/*.c", "bpf/*.c", "common/*.c"]),
])
def test_dockerfile_build_stage_has_every_header(dockerfile, sources):
    """Each <header> the image's sources include comes from a package its build stage installs
    (or from the compiler, or, for libaiprof.so, from the CUDA/NCCL header wheels it fetches)."""
    build_pkgs = {p.split("=", 1)[0] for p in dockerfile_stages(os.path.join(ROOT, dockerfile))[0][1]}
    build_pkgs |= {"libc6-dev", "linux-libc-dev", "libgcc-12-dev"}     # build-essential's own
    with open(os.path.join(ROOT, dockerfile)) as f:
        text = f.read()
    headers = set()
    for pattern in sources:
        for src in glob.glob(os.path.join(ROOT, pattern)):
            with open(src) as f:
                headers |= set(re.findall(r"^#include <([^>]+)>", f.read(), re.M))
    paths, cuda = {}, []
    for h in sorted(headers):
        for d in ("/usr/include", "/usr/include/x86_64-linux-gnu"):
            if os.path.exists(os.path.join(d, h)):
                paths[h] = os.path.join(d, h)
                break
        else:
            if os.path.exists(os.path.join("/usr/local/cuda/include", h)):
                cuda.append(h)
    owners = run(["dpkg", "-S", *paths.values()], ok=False).stdout
    owner = {}
    for line in owners.splitlines():
        pkg, _, path = line.partition(": ")
        owner[path] = pkg.split(":")[0]
    missing = sorted(f"<{h}> ({owner.get(p, 'no package')})" for h, p in paths.items()
                     if owner.get(p) not in build_pkgs)
    assert not missing, f"{dockerfile}: the build stage lacks the packages of {missing}"
    if cuda:
        assert "nvidia-cuda-runtime==" in text and "nvidia-nccl-cu13==" in text and "CUDA_HOME=" in text, \
            f"{dockerfile}: {cuda} come from the CUDA headers, which the build stage does not fetch"

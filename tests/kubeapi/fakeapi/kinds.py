# SPDX-License-Identifier: MIT
"""Resource types the double serves: what each kind is called, how it decodes, defaults,
validates, and prints. Generic REST semantics live in registry.py."""
import base64
import random
import string

from . import schema as S
from .patch import keyed, pset
from .schema import (ANYOBJ, BOOL, BYTES, INT, MICRO, OBJECT_META, QTY, SMAP, STR, TIME,
                     lst, mp, obj)
from .selectors import JSONPath, value_string
from .validation import validate_custom_resource
from .util import (FieldError, check_label, check_label_value, check_qualified_name, check_subdomain, deepcopy,
                   duplicate, forbidden_field, human_duration, invalid, not_found_field,
                   not_supported, parse_time, required, utcnow)

NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "priority": 0,
               "description": "Name must be unique within a namespace. Is required when creating "
                              "resources, although some resources may allow a client to request "
                              "the generation of an appropriate name automatically. Name is "
                              "primarily intended for creation idempotence and configuration "
                              "definition. Cannot be updated."}
AGE_COLUMN = {"name": "Age", "type": "string", "format": "", "priority": 0,
              "description": "CreationTimestamp is a timestamp representing the server time when "
                             "this object was created."}
ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
CRD_CLEANUP = "customresourcecleanup.apiextensions.k8s.io"
OBJECT_META_SMP = {"finalizers": pset(), "ownerReferences": keyed("uid")}


def age_of(o, now):
    ts = (o.get("metadata") or {}).get("creationTimestamp")
    if not ts:
        return "<unknown>"
    try:
        return human_duration((now - parse_time(ts)).total_seconds())
    except ValueError:
        return "<invalid>"


def rand_suffix(n=5):
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))


class ResourceType:
    group = ""
    versions = ("v1",)
    storage_version = "v1"
    plural = singular = kind = ""
    namespaced = True
    short_names = ()
    categories = ()
    subresources = ()
    verbs = ALL_VERBS
    generation = False             # metadata.generation tracks spec changes
    status_subresource = False     # writes to the main resource keep the old .status
    allow_unconditional_update = True
    return_deleted_object = False
    storage = None                 # storage key when it differs from group/plural
    smp = None                     # strategic-merge metadata; None: SMP not supported (415)
    apply_meta = None              # list merge metadata for server-side apply
    field_labels = ()
    typed = None                   # schema.Typed for built-in kinds

    @property
    def gr(self):
        return f"{self.group}/{self.plural}"

    @property
    def storage_key(self):
        return self.storage or self.gr

    @property
    def list_kind(self):
        return self.kind + "List"

    def api_version(self, version):
        return f"{self.group}/{version}" if self.group else version

    def qualified_kind(self):
        return self.kind

    # ---- decode / convert
    def decode(self, body, version):
        """(object in this version's shape with unknown fields dropped, unknown field paths)."""
        raw_unknown = []
        try:
            out = S.decode_typed(body, self.typed, raw_unknown)
        except S.DecodeError as e:
            raise S.decode_error(self.kind, version, e) from None
        unknown = S.unknown_paths_with_index(body, self.typed) if raw_unknown else []
        return out, unknown

    def to_storage(self, o, version):
        o["apiVersion"] = self.api_version(self.storage_version)
        o["kind"] = self.kind
        return o

    def from_storage(self, o, version):
        out = {"kind": self.kind, "apiVersion": self.api_version(version)}
        out.update((k, deepcopy(v)) for k, v in o.items() if k not in ("kind", "apiVersion"))
        return out

    def view(self, o, version):
        """from_storage for a caller that only reads (serialises) the result: stored objects are
        never mutated, so the copy can share their members."""
        if type(self).from_storage is not ResourceType.from_storage:
            return self.from_storage(o, version)
        out = {"kind": self.kind, "apiVersion": self.api_version(version)}
        out.update((k, v) for k, v in o.items() if k not in ("kind", "apiVersion"))
        return out

    # ---- strategy hooks (obj in storage form)
    def prepare_create(self, o):
        if self.status_subresource:
            o.pop("status", None)

    def prepare_update(self, new, old):
        if self.status_subresource:
            if "status" in old:
                new["status"] = deepcopy(old["status"])
            else:
                new.pop("status", None)

    def prepare_status(self, new, old):
        """A write to /status: everything but .status (and labels/annotations where the kind
        allows) comes from the old object."""
        out = deepcopy(old)
        if "status" in new:
            out["status"] = new["status"]
        else:
            out.pop("status", None)
        out["metadata"]["resourceVersion"] = new.get("metadata", {}).get("resourceVersion")
        return out

    def defaults(self, o):
        return o

    def validate(self, o, old=None):
        return []

    def validate_update(self, new, old, subresource):
        return self.validate(new, old)

    def spec_changed(self, old, new):
        skip = ("metadata", "status") if self.status_subresource else ("metadata",)
        a = {k: v for k, v in old.items() if k not in skip and k not in ("apiVersion", "kind")}
        b = {k: v for k, v in new.items() if k not in skip and k not in ("apiVersion", "kind")}
        return a != b

    def field_values(self, o):
        md = o.get("metadata") or {}
        return {"metadata.name": md.get("name", ""), "metadata.namespace": md.get("namespace", "")}

    def supported_field_labels(self):
        return ("metadata.name", "metadata.namespace") + tuple(self.field_labels)

    # ---- tables
    def columns(self, version):
        return [NAME_COLUMN, AGE_COLUMN]

    def cells(self, o, version, now):
        return [o["metadata"]["name"], age_of(o, now)]

    # ---- discovery / openapi
    def discovery(self, version):
        out = [{"name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
                "kind": self.kind, "verbs": list(self.verbs)}]
        if self.short_names:
            out[0]["shortNames"] = list(self.short_names)
        if self.categories:
            out[0]["categories"] = list(self.categories)
        for sub in self.subresources:
            verbs = {"status": ["get", "patch", "update"], "ephemeralcontainers": ["get", "patch", "update"],
                     "log": ["get"], "finalize": ["update"], "binding": ["create"]}[sub]
            kind = {"log": "Pod", "binding": "Binding"}.get(sub, self.kind)
            out.append({"name": f"{self.plural}/{sub}", "singularName": "", "namespaced": self.namespaced,
                        "kind": kind, "verbs": verbs})
        return out

    def openapi_schema(self, version):
        sch = typed_openapi(self.typed, self.smp) if self.typed else {"type": "object"}
        sch["x-kubernetes-group-version-kind"] = [{"group": self.group, "version": version, "kind": self.kind}]
        return sch


_OPENAPI_SCALARS = {"string": {"type": "string"}, "int": {"type": "integer", "format": "int64"},
                    "bool": {"type": "boolean"}, "number": {"type": "number", "format": "double"},
                    "time": {"type": "string", "format": "date-time"},
                    "microtime": {"type": "string", "format": "date-time"},
                    "bytes": {"type": "string", "format": "byte"},
                    "intorstring": {"x-kubernetes-int-or-string": True},
                    "quantity": {"x-kubernetes-int-or-string": True},
                    "any": {"x-kubernetes-preserve-unknown-fields": True},
                    "anyobj": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}


def typed_openapi(t, meta):
    """An OpenAPI v3 schema for a built-in kind from the same tables that drive decoding, with
    the merge keys strategic merge patch uses here (what kubectl reads to build its patches)."""
    from .patch import ListMeta
    if t.kind in _OPENAPI_SCALARS:
        return dict(_OPENAPI_SCALARS[t.kind])
    if t.kind == "map":
        return {"type": "object", "additionalProperties": typed_openapi(t.item, None)}
    if t.kind == "list":
        item_meta = meta.item if isinstance(meta, ListMeta) else None
        out = {"type": "array", "items": typed_openapi(t.item, item_meta)}
        if isinstance(meta, ListMeta) and meta.keys:
            out.update({"x-kubernetes-patch-merge-key": meta.keys[0], "x-kubernetes-patch-strategy": "merge",
                        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(meta.keys)})
        elif isinstance(meta, ListMeta) and meta.primitive:
            out.update({"x-kubernetes-patch-strategy": "merge", "x-kubernetes-list-type": "set"})
        else:
            out["x-kubernetes-list-type"] = "atomic"
        return out
    props = {}
    for name, ft in t.fields.items():
        sub = meta.get(name) if isinstance(meta, dict) else None
        if name == "metadata" and sub is None:
            sub = OBJECT_META_SMP
        props[name] = typed_openapi(ft, sub)
    return {"type": "object", "properties": props}


def validate_meta(o, namespaced, name_check=check_subdomain):
    md = o.get("metadata") or {}
    errs = []
    name = md.get("name")
    if not name:
        errs.append(required("metadata.name", "name or generateName is required"))
    else:
        why = name_check(name)
        if why:
            errs.append(invalid("metadata.name", name, why))
    for k, v in (md.get("labels") or {}).items():
        why = check_qualified_name(k)
        if why:
            errs.append(invalid("metadata.labels", k, why))
        why = check_label_value(v)
        if why:
            errs.append(invalid("metadata.labels", v, why))
    size = 0
    for k, v in (md.get("annotations") or {}).items():
        why = check_qualified_name(k)
        if why:
            errs.append(invalid("metadata.annotations", k, why))
        size += len(k) + len(v)
    if size > 256 * 1024:
        errs.append(FieldError("TooLong", "metadata.annotations", detail="may not be more than 262144 bytes"))
    for i, r in enumerate(md.get("ownerReferences") or []):
        for f in ("apiVersion", "kind", "name", "uid"):
            if not r.get(f):
                errs.append(invalid(f"metadata.ownerReferences[{i}].{f}", r.get(f, ""), f"{f} must not be empty"))
    if sum(1 for r in md.get("ownerReferences") or [] if r.get("controller")) > 1:
        errs.append(invalid("metadata.ownerReferences", md["ownerReferences"],
                            "Only one reference can have Controller set to true"))
    for i, f in enumerate(md.get("finalizers") or []):
        if "/" not in f and f not in ("kubernetes", "orphan", "foregroundDeletion", CRD_CLEANUP):
            errs.append(invalid(f"metadata.finalizers[{i}]", f,
                                "name is neither a standard finalizer name nor is it fully qualified"))
        elif check_qualified_name(f):
            errs.append(invalid(f"metadata.finalizers[{i}]", f, check_qualified_name(f)))
    return errs


# ====================================================================== pods

CAPS = obj("Capabilities", add=lst(STR), drop=lst(STR))
SECCOMP = obj("SeccompProfile", type=STR, localhostProfile=STR)
APPARMOR = obj("AppArmorProfile", type=STR, localhostProfile=STR)
SEC_CTX = obj("SecurityContext", capabilities=CAPS, privileged=BOOL, seLinuxOptions=ANYOBJ,
              windowsOptions=ANYOBJ, runAsUser=INT, runAsGroup=INT, runAsNonRoot=BOOL,
              readOnlyRootFilesystem=BOOL, allowPrivilegeEscalation=BOOL, procMount=STR,
              seccompProfile=SECCOMP, appArmorProfile=APPARMOR)
POD_SEC_CTX = obj("PodSecurityContext", seLinuxOptions=ANYOBJ, windowsOptions=ANYOBJ, runAsUser=INT,
                  runAsGroup=INT, runAsNonRoot=BOOL, supplementalGroups=lst(INT),
                  supplementalGroupsPolicy=STR, fsGroup=INT, sysctls=lst(obj("Sysctl", name=STR, value=STR)),
                  fsGroupChangePolicy=STR, seccompProfile=SECCOMP, appArmorProfile=APPARMOR,
                  seLinuxChangePolicy=STR)
ENV_VAR = obj("EnvVar", name=STR, value=STR, valueFrom=obj(
    "EnvVarSource", fieldRef=obj("ObjectFieldSelector", apiVersion=STR, fieldPath=STR),
    resourceFieldRef=ANYOBJ, configMapKeyRef=ANYOBJ,
    secretKeyRef=obj("SecretKeySelector", name=STR, key=STR, optional=BOOL)))
RESOURCES = obj("ResourceRequirements", limits=mp(QTY), requests=mp(QTY), claims=lst(ANYOBJ))
_CONTAINER_FIELDS = dict(
    name=STR, image=STR, command=lst(STR), args=lst(STR), workingDir=STR,
    ports=lst(obj("ContainerPort", name=STR, hostPort=INT, containerPort=INT, protocol=STR, hostIP=STR)),
    envFrom=lst(ANYOBJ), env=lst(ENV_VAR), resources=RESOURCES, resizePolicy=lst(ANYOBJ),
    restartPolicy=STR,
    volumeMounts=lst(obj("VolumeMount", name=STR, readOnly=BOOL, recursiveReadOnly=STR, mountPath=STR,
                         subPath=STR, mountPropagation=STR, subPathExpr=STR)),
    volumeDevices=lst(obj("VolumeDevice", name=STR, devicePath=STR)),
    livenessProbe=ANYOBJ, readinessProbe=ANYOBJ, startupProbe=ANYOBJ, lifecycle=ANYOBJ,
    terminationMessagePath=STR, terminationMessagePolicy=STR, imagePullPolicy=STR,
    securityContext=SEC_CTX, stdin=BOOL, stdinOnce=BOOL, tty=BOOL)
CONTAINER = obj("Container", **_CONTAINER_FIELDS)
EPHEMERAL = obj("EphemeralContainer", targetContainerName=STR, **_CONTAINER_FIELDS)
KEY_TO_PATH = lst(obj("KeyToPath", key=STR, path=STR, mode=INT))
VOLUME = obj("Volume", name=STR,
             hostPath=obj("HostPathVolumeSource", path=STR, type=STR),
             emptyDir=obj("EmptyDirVolumeSource", medium=STR, sizeLimit=QTY),
             secret=obj("SecretVolumeSource", secretName=STR, items=KEY_TO_PATH, defaultMode=INT, optional=BOOL),
             configMap=obj("ConfigMapVolumeSource", name=STR, items=KEY_TO_PATH, defaultMode=INT, optional=BOOL),
             persistentVolumeClaim=obj("PersistentVolumeClaimVolumeSource", claimName=STR, readOnly=BOOL),
             image=obj("ImageVolumeSource", reference=STR, pullPolicy=STR),
             projected=ANYOBJ, downwardAPI=ANYOBJ, csi=ANYOBJ, ephemeral=ANYOBJ, nfs=ANYOBJ,
             iscsi=ANYOBJ, rbd=ANYOBJ, cephfs=ANYOBJ, fc=ANYOBJ, flexVolume=ANYOBJ, flocker=ANYOBJ,
             gitRepo=ANYOBJ, glusterfs=ANYOBJ, awsElasticBlockStore=ANYOBJ, azureDisk=ANYOBJ,
             azureFile=ANYOBJ, cinder=ANYOBJ, gcePersistentDisk=ANYOBJ, photonPersistentDisk=ANYOBJ,
             portworxVolume=ANYOBJ, quobyte=ANYOBJ, scaleIO=ANYOBJ, storageos=ANYOBJ, vsphereVolume=ANYOBJ)
TOLERATION = obj("Toleration", key=STR, operator=STR, value=STR, effect=STR, tolerationSeconds=INT)
POD_SPEC = obj(
    "PodSpec", volumes=lst(VOLUME), initContainers=lst(CONTAINER), containers=lst(CONTAINER),
    ephemeralContainers=lst(EPHEMERAL), restartPolicy=STR, terminationGracePeriodSeconds=INT,
    activeDeadlineSeconds=INT, dnsPolicy=STR, nodeSelector=SMAP, serviceAccountName=STR,
    serviceAccount=STR, automountServiceAccountToken=BOOL, nodeName=STR, hostNetwork=BOOL,
    hostPID=BOOL, hostIPC=BOOL, shareProcessNamespace=BOOL, securityContext=POD_SEC_CTX,
    imagePullSecrets=lst(obj("LocalObjectReference", name=STR)), hostname=STR, subdomain=STR,
    affinity=ANYOBJ, schedulerName=STR, tolerations=lst(TOLERATION), hostAliases=lst(ANYOBJ),
    priorityClassName=STR, priority=INT, dnsConfig=ANYOBJ, readinessGates=lst(ANYOBJ),
    runtimeClassName=STR, enableServiceLinks=BOOL, preemptionPolicy=STR, overhead=mp(QTY),
    topologySpreadConstraints=lst(ANYOBJ), setHostnameAsFQDN=BOOL, os=obj("PodOS", name=STR),
    hostUsers=BOOL, schedulingGates=lst(obj("PodSchedulingGate", name=STR)),
    resourceClaims=lst(ANYOBJ), resources=RESOURCES)
CONTAINER_STATE = obj(
    "ContainerState", waiting=obj("ContainerStateWaiting", reason=STR, message=STR),
    running=obj("ContainerStateRunning", startedAt=TIME),
    terminated=obj("ContainerStateTerminated", exitCode=INT, signal=INT, reason=STR, message=STR,
                   startedAt=TIME, finishedAt=TIME, containerID=STR))
CONTAINER_STATUS = obj(
    "ContainerStatus", name=STR, state=CONTAINER_STATE, lastState=CONTAINER_STATE, ready=BOOL,
    restartCount=INT, image=STR, imageID=STR, containerID=STR, started=BOOL,
    allocatedResources=mp(QTY), resources=ANYOBJ, volumeMounts=lst(ANYOBJ), user=ANYOBJ,
    allocatedResourcesStatus=lst(ANYOBJ))
POD_STATUS = obj(
    "PodStatus", phase=STR,
    conditions=lst(obj("PodCondition", type=STR, status=STR, lastProbeTime=TIME,
                       lastTransitionTime=TIME, reason=STR, message=STR)),
    message=STR, reason=STR, nominatedNodeName=STR, hostIP=STR, hostIPs=lst(obj("HostIP", ip=STR)),
    podIP=STR, podIPs=lst(obj("PodIP", ip=STR)), startTime=TIME,
    initContainerStatuses=lst(CONTAINER_STATUS), containerStatuses=lst(CONTAINER_STATUS),
    ephemeralContainerStatuses=lst(CONTAINER_STATUS), qosClass=STR, resize=STR,
    resourceClaimStatuses=lst(ANYOBJ))
POD = obj("Pod", apiVersion=STR, kind=STR, metadata=OBJECT_META, spec=POD_SPEC, status=POD_STATUS)

_CONTAINER_SMP = {"ports": keyed("containerPort"), "env": keyed("name"),
                  "volumeMounts": keyed("mountPath"), "volumeDevices": keyed("devicePath")}
POD_SMP = {
    "metadata": OBJECT_META_SMP,
    "spec": {"containers": keyed("name", _CONTAINER_SMP), "initContainers": keyed("name", _CONTAINER_SMP),
             "ephemeralContainers": keyed("name", _CONTAINER_SMP), "volumes": keyed("name"),
             "imagePullSecrets": keyed("name"), "hostAliases": keyed("ip"),
             "schedulingGates": keyed("name"), "resourceClaims": keyed("name")},
    "status": {"conditions": keyed("type"), "podIPs": keyed("ip"), "hostIPs": keyed("ip"),
               "resourceClaimStatuses": keyed("name")},
}

POD_MUTABLE_MSG = ("pod updates may not change fields other than `spec.containers[*].image`,"
                   "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                   "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                   "(allow it to be set to 1 if it was previously negative)")
EPHEMERAL_FORBIDDEN = ("ports", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
                       "resources", "resizePolicy", "restartPolicy")


def _image_pull_policy(image):
    ref = image.split("@")[0]
    tag = ref.rsplit(":", 1)[1] if ":" in ref.rsplit("/", 1)[-1] else ""
    if "@" in image:
        return "IfNotPresent"
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _container_defaults(c, ephemeral=False):
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    if c.get("image"):
        c.setdefault("imagePullPolicy", _image_pull_policy(c["image"]))
    if not ephemeral:
        c.setdefault("resources", {})
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def _qos(spec):
    reqs, lims, any_set = [], [], False
    for c in spec.get("containers") or []:
        r = (c.get("resources") or {})
        reqs.append(r.get("requests") or {})
        lims.append(r.get("limits") or {})
        any_set |= bool(r.get("requests") or r.get("limits"))
    if not any_set:
        return "BestEffort"
    for rq, lm in zip(reqs, lims):
        if not all(k in lm for k in ("cpu", "memory")):
            return "Burstable"
        if any(str(rq.get(k, lm[k])) != str(lm[k]) for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


def _validate_container(c, path, names, ephemeral=False, volumes=None):
    errs = []
    n = c.get("name")
    if not n:
        errs.append(required(f"{path}.name"))
    else:
        why = check_label(n)
        if why:
            errs.append(invalid(f"{path}.name", n, why))
        if n in names:
            errs.append(duplicate(f"{path}.name", n))
        names.add(n)
    if not c.get("image"):
        errs.append(required(f"{path}.image"))
    for i, p in enumerate(c.get("ports") or []):
        cp = p.get("containerPort")
        if not isinstance(cp, int) or not 1 <= cp <= 65535:
            errs.append(invalid(f"{path}.ports[{i}].containerPort", cp, "must be between 1 and 65535, inclusive"))
    for i, e in enumerate(c.get("env") or []):
        if not e.get("name"):
            errs.append(required(f"{path}.env[{i}].name"))
    for i, m in enumerate(c.get("volumeMounts") or []):
        if not m.get("mountPath"):
            errs.append(required(f"{path}.volumeMounts[{i}].mountPath"))
        if volumes is not None and m.get("name") not in volumes:
            errs.append(not_found_field(f"{path}.volumeMounts[{i}].name", m.get("name", "")))
    pol = c.get("imagePullPolicy")
    if pol and pol not in ("Always", "Never", "IfNotPresent"):
        errs.append(not_supported(f"{path}.imagePullPolicy", pol, ["Always", "IfNotPresent", "Never"]))
    tmp = c.get("terminationMessagePolicy")
    if tmp and tmp not in ("File", "FallbackToLogsOnError"):
        errs.append(not_supported(f"{path}.terminationMessagePolicy", tmp, ["File", "FallbackToLogsOnError"]))
    if ephemeral:
        for f in EPHEMERAL_FORBIDDEN:
            if c.get(f):
                errs.append(forbidden_field(f"{path}.{f}", "cannot be set for an Ephemeral Container"))
    return errs


class Pods(ResourceType):
    plural, singular, kind = "pods", "pod", "Pod"
    short_names = ("po",)
    categories = ("all",)
    subresources = ("status", "ephemeralcontainers", "log", "binding")
    status_subresource = True
    return_deleted_object = True
    smp = POD_SMP
    apply_meta = POD_SMP
    typed = POD
    field_labels = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                    "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
                    "status.nominatedNodeName")

    def field_values(self, o):
        v = super().field_values(o)
        spec, st = o.get("spec") or {}, o.get("status") or {}
        v.update({"spec.nodeName": spec.get("nodeName", ""), "spec.restartPolicy": spec.get("restartPolicy", ""),
                  "spec.schedulerName": spec.get("schedulerName", ""),
                  "spec.serviceAccountName": spec.get("serviceAccountName", ""),
                  "spec.hostNetwork": value_string(bool(spec.get("hostNetwork"))),
                  "status.phase": st.get("phase", ""), "status.podIP": st.get("podIP", ""),
                  "status.nominatedNodeName": st.get("nominatedNodeName", "")})
        return v

    def prepare_create(self, o):
        spec = o.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("securityContext", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        spec["serviceAccountName"] = spec["serviceAccount"] = sa
        tol = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tol):
                tol.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            _container_defaults(c)
        if spec.get("automountServiceAccountToken", True) is not False:
            self._add_token_volume(spec)
        o["status"] = {"phase": "Pending", "qosClass": _qos(spec)}

    @staticmethod
    def _add_token_volume(spec):
        mount_path = "/var/run/secrets/kubernetes.io/serviceaccount"
        cs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
        if any(m.get("mountPath") == mount_path for c in cs for m in c.get("volumeMounts") or []):
            return
        name = "kube-api-access-" + rand_suffix()
        spec.setdefault("volumes", []).append({"name": name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
        for c in cs:
            c.setdefault("volumeMounts", []).append({"name": name, "readOnly": True, "mountPath": mount_path})

    def prepare_status(self, new, old):
        out = deepcopy(old)
        out["status"] = new.get("status") or {}
        md = new.get("metadata") or {}
        # the pod status endpoint may change labels and annotations, nothing else in metadata
        for k in ("labels", "annotations"):
            if k in md:
                out["metadata"][k] = md[k]
            else:
                out["metadata"].pop(k, None)
        out["metadata"]["resourceVersion"] = md.get("resourceVersion")
        return out

    def prepare_ephemeral(self, new, old):
        out = deepcopy(old)
        ecs = (new.get("spec") or {}).get("ephemeralContainers")
        if ecs:
            ecs = deepcopy(ecs)
            for c in ecs:
                _container_defaults(c, ephemeral=True)
            out["spec"]["ephemeralContainers"] = ecs
        else:
            out["spec"].pop("ephemeralContainers", None)
        out["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion")
        return out

    def validate(self, o, old=None):
        errs = validate_meta(o, True)
        spec = o.get("spec") or {}
        if old is None:
            if not spec.get("containers"):
                errs.append(required("spec.containers"))
            if spec.get("ephemeralContainers"):
                errs.append(forbidden_field("spec.ephemeralContainers", "cannot be set on create"))
        names = set()
        vols = set()
        for i, v in enumerate(spec.get("volumes") or []):
            n = v.get("name", "")
            why = check_label(n) if n else None
            if not n:
                errs.append(required(f"spec.volumes[{i}].name"))
            elif why:
                errs.append(invalid(f"spec.volumes[{i}].name", n, why))
            elif n in vols:
                errs.append(duplicate(f"spec.volumes[{i}].name", n))
            vols.add(n)
        for field in ("initContainers", "containers"):
            for i, c in enumerate(spec.get(field) or []):
                errs += _validate_container(c, f"spec.{field}[{i}]", names, volumes=vols)
        regular = {c.get("name") for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])}
        for i, c in enumerate(spec.get("ephemeralContainers") or []):
            errs += _validate_container(c, f"spec.ephemeralContainers[{i}]", names, ephemeral=True, volumes=vols)
            t = c.get("targetContainerName")
            if t and t not in regular:
                errs.append(not_found_field(f"spec.ephemeralContainers[{i}].targetContainerName", t))
        rp = spec.get("restartPolicy")
        if rp and rp not in ("Always", "OnFailure", "Never"):
            errs.append(not_supported("spec.restartPolicy", rp, ["Always", "OnFailure", "Never"]))
        dp = spec.get("dnsPolicy")
        if dp and dp not in ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"):
            errs.append(not_supported("spec.dnsPolicy", dp, ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"]))
        if spec.get("nodeName") and check_subdomain(spec["nodeName"]):
            errs.append(invalid("spec.nodeName", spec["nodeName"], check_subdomain(spec["nodeName"])))
        return errs

    def validate_update(self, new, old, subresource):
        errs = self.validate(new, old)
        return errs + self._validate_spec_update(new.get("spec") or {}, old.get("spec") or {},
                                                 subresource == "ephemeralcontainers")

    @staticmethod
    def _mutable_stripped(spec):
        s = deepcopy(spec)
        for f in ("containers", "initContainers"):
            for c in s.get(f) or []:
                c.pop("image", None)
        s.pop("activeDeadlineSeconds", None)
        s.pop("tolerations", None)
        s.pop("schedulingGates", None)
        s.pop("terminationGracePeriodSeconds", None)
        return s

    def _validate_spec_update(self, new, old, ephemeral_subresource):
        """Pod specs are immutable but for a few fields; ephemeral containers change only
        through the ephemeralcontainers subresource, and only by being added."""
        errs = []
        old_e = {c.get("name"): c for c in old.get("ephemeralContainers") or []}
        new_e = {c.get("name"): c for c in new.get("ephemeralContainers") or []}
        for n, c in old_e.items():
            if n not in new_e:
                errs.append(forbidden_field("spec.ephemeralContainers", f'existing ephemeral containers "{n}" may not be removed'))
            elif new_e[n] != c:
                errs.append(forbidden_field("spec.ephemeralContainers", f'existing ephemeral containers "{n}" may not be changed'))
        a, b = self._mutable_stripped(new), self._mutable_stripped(old)
        if ephemeral_subresource:
            a.pop("ephemeralContainers", None)
            b.pop("ephemeralContainers", None)
        if a != b:
            errs.append(forbidden_field("spec", POD_MUTABLE_MSG))
        for i, t in enumerate(old.get("tolerations") or []):
            if t not in (new.get("tolerations") or []):
                errs.append(forbidden_field("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds"))
                break
        return errs

    def columns(self, version):
        return [NAME_COLUMN,
                {"name": "Ready", "type": "string", "format": "", "priority": 0,
                 "description": "The aggregate readiness state of this pod for accepting traffic."},
                {"name": "Status", "type": "string", "format": "", "priority": 0,
                 "description": "The aggregate status of the containers in this pod."},
                {"name": "Restarts", "type": "string", "format": "", "priority": 0,
                 "description": "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."},
                AGE_COLUMN,
                {"name": "IP", "type": "string", "format": "", "priority": 1,
                 "description": "IP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."},
                {"name": "Node", "type": "string", "format": "", "priority": 1,
                 "description": "NodeName is a request to schedule this pod onto a specific node."},
                {"name": "Nominated Node", "type": "string", "format": "", "priority": 1,
                 "description": "nominatedNodeName is set when this pod preempts other pods on the node."},
                {"name": "Readiness Gates", "type": "string", "format": "", "priority": 1,
                 "description": "If specified, all readiness gates will be evaluated for pod readiness."}]

    def cells(self, o, version, now):
        spec, st = o.get("spec") or {}, o.get("status") or {}
        total = len(spec.get("containers") or [])
        statuses = st.get("containerStatuses") or []
        ready = sum(1 for c in statuses if c.get("ready"))
        restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
        reason = st.get("reason") or st.get("phase") or "Pending"
        init = st.get("initContainerStatuses") or []
        for i, c in enumerate(init):
            state = c.get("state") or {}
            if (state.get("terminated") or {}).get("exitCode", 1) == 0 and "terminated" in state:
                continue
            if "terminated" in state:
                t = state["terminated"]
                reason = "Init:" + (t.get("reason") or (f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"))
            elif (state.get("waiting") or {}).get("reason") not in (None, "", "PodInitializing"):
                reason = "Init:" + state["waiting"]["reason"]
            else:
                reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
            break
        else:
            running = False
            for c in reversed(statuses):
                state = c.get("state") or {}
                if (state.get("waiting") or {}).get("reason"):
                    reason = state["waiting"]["reason"]
                elif "terminated" in state:
                    t = state["terminated"]
                    reason = t.get("reason") or (f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}")
                elif "running" in state and c.get("ready"):
                    running = True
            if reason == "Completed" and running:
                reason = "Running"
        if (o.get("metadata") or {}).get("deletionTimestamp"):
            reason = "Terminating"
        return [o["metadata"]["name"], f"{ready}/{total}", reason, str(restarts), age_of(o, now),
                st.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
                st.get("nominatedNodeName") or "<none>", "<none>"]


# ====================================================================== secrets

SECRET = obj("Secret", apiVersion=STR, kind=STR, metadata=OBJECT_META, data=mp(BYTES),
             stringData=SMAP, type=STR, immutable=BOOL)


class Secrets(ResourceType):
    plural, singular, kind = "secrets", "secret", "Secret"
    typed = SECRET
    smp = {"metadata": OBJECT_META_SMP}
    apply_meta = smp
    field_labels = ("type",)

    def field_values(self, o):
        v = super().field_values(o)
        v["type"] = o.get("type", "")
        return v

    def defaults(self, o):
        sd = o.pop("stringData", None)
        if sd:
            data = o.setdefault("data", {})
            for k, v in sd.items():
                data[k] = base64.b64encode(v.encode()).decode()
        return o

    def prepare_create(self, o):
        o.setdefault("type", "Opaque")

    def prepare_update(self, new, old):
        new.setdefault("type", old.get("type", "Opaque"))

    def validate(self, o, old=None):
        errs = validate_meta(o, True)
        total = 0
        for k, v in (o.get("data") or {}).items():
            if not k or any(ch not in string.ascii_letters + string.digits + "-._" for ch in k):
                errs.append(invalid(f"data[{k}]", k, "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"))
            total += len(base64.b64decode(v))
        if total > 1024 * 1024:
            errs.append(FieldError("TooLong", "data", detail="may not be more than 1048576 bytes"))
        if old is not None:
            if o.get("type") != old.get("type"):
                errs.append(invalid("type", o.get("type"), "field is immutable"))
            if old.get("immutable"):
                if o.get("data") != old.get("data"):
                    errs.append(forbidden_field("data", "field is immutable when `immutable` is set"))
                if not o.get("immutable"):
                    errs.append(forbidden_field("immutable", "field is immutable when `immutable` is set"))
        return errs

    def columns(self, version):
        return [NAME_COLUMN,
                {"name": "Type", "type": "string", "format": "", "priority": 0, "description": "The type of the secret"},
                {"name": "Data", "type": "string", "format": "", "priority": 0, "description": "The number of data entries"},
                AGE_COLUMN]

    def cells(self, o, version, now):
        return [o["metadata"]["name"], o.get("type", ""), len(o.get("data") or {}), age_of(o, now)]


# ====================================================================== namespaces

NAMESPACE = obj("Namespace", apiVersion=STR, kind=STR, metadata=OBJECT_META,
                spec=obj("NamespaceSpec", finalizers=lst(STR)),
                status=obj("NamespaceStatus", phase=STR, conditions=lst(ANYOBJ)))


class Namespaces(ResourceType):
    plural, singular, kind = "namespaces", "namespace", "Namespace"
    namespaced = False
    short_names = ("ns",)
    subresources = ("finalize", "status")
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    status_subresource = True
    return_deleted_object = True
    typed = NAMESPACE
    smp = {"metadata": OBJECT_META_SMP}
    apply_meta = smp
    field_labels = ("status.phase",)

    def field_values(self, o):
        v = super().field_values(o)
        v["status.phase"] = (o.get("status") or {}).get("phase", "")
        return v

    def prepare_create(self, o):
        o["spec"] = {"finalizers": ["kubernetes"]}
        o["status"] = {"phase": "Active"}
        o["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = o["metadata"]["name"]

    def prepare_update(self, new, old):
        new["status"] = deepcopy(old.get("status") or {})
        new["spec"] = deepcopy(old.get("spec") or {})   # spec.finalizers change only via /finalize
        new["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = old["metadata"]["name"]

    def prepare_finalize(self, new, old):
        out = deepcopy(old)
        out["spec"] = {"finalizers": list((new.get("spec") or {}).get("finalizers") or [])}
        out["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion")
        return out

    def validate(self, o, old=None):
        return validate_meta(o, False, check_label)

    def columns(self, version):
        return [NAME_COLUMN,
                {"name": "Status", "type": "string", "format": "", "priority": 0,
                 "description": "The status of the namespace"}, AGE_COLUMN]

    def cells(self, o, version, now):
        return [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""), age_of(o, now)]


# ====================================================================== events

OBJECT_REF = obj("ObjectReference", kind=STR, namespace=STR, name=STR, uid=STR, apiVersion=STR,
                 resourceVersion=STR, fieldPath=STR)
CORE_EVENT = obj("Event", apiVersion=STR, kind=STR, metadata=OBJECT_META, involvedObject=OBJECT_REF,
                 reason=STR, message=STR, source=obj("EventSource", component=STR, host=STR),
                 firstTimestamp=TIME, lastTimestamp=TIME, count=INT, type=STR, eventTime=MICRO,
                 series=obj("EventSeries", count=INT, lastObservedTime=MICRO), action=STR,
                 related=OBJECT_REF, reportingComponent=STR, reportingInstance=STR)
NEW_EVENT = obj("Event", apiVersion=STR, kind=STR, metadata=OBJECT_META, eventTime=MICRO,
                series=obj("EventSeries", count=INT, lastObservedTime=MICRO),
                reportingController=STR, reportingInstance=STR, action=STR, reason=STR,
                regarding=OBJECT_REF, related=OBJECT_REF, note=STR, type=STR,
                deprecatedSource=obj("EventSource", component=STR, host=STR),
                deprecatedFirstTimestamp=TIME, deprecatedLastTimestamp=TIME, deprecatedCount=INT)
# core/v1 field <-> events.k8s.io/v1 field
EVENT_FIELD_MAP = [("involvedObject", "regarding"), ("message", "note"), ("source", "deprecatedSource"),
                   ("firstTimestamp", "deprecatedFirstTimestamp"), ("lastTimestamp", "deprecatedLastTimestamp"),
                   ("count", "deprecatedCount"), ("reportingComponent", "reportingController"),
                   ("eventTime", "eventTime"), ("series", "series"), ("action", "action"),
                   ("reason", "reason"), ("related", "related"), ("type", "type"),
                   ("reportingInstance", "reportingInstance")]
EVENT_FIELD_LABELS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                      "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                      "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")


def _event_field_values(base, o):
    io = o.get("involvedObject") or {}
    base.update({f"involvedObject.{k}": io.get(k, "") for k in
                 ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")})
    base.update({"reason": o.get("reason", ""), "reportingComponent": o.get("reportingComponent", ""),
                 "source": (o.get("source") or {}).get("component", ""), "type": o.get("type", "")})
    # the events.k8s.io spellings of the same labels
    base.update({f"regarding.{k}": io.get(k, "") for k in ("kind", "namespace", "name", "uid")})
    base["reportingController"] = o.get("reportingComponent", "")
    return base


def _validate_event(o, new_api):
    errs = validate_meta(o, True)
    ns = o["metadata"].get("namespace")
    io = o.get("involvedObject") or {}
    t = o.get("type")
    field = (lambda core, new: new if new_api else core)
    if io.get("namespace") and io["namespace"] != ns:
        errs.append(invalid(field("involvedObject.namespace", "regarding.namespace"), io["namespace"],
                            "does not match event.namespace"))
    if o.get("eventTime") or new_api:
        if not o.get("eventTime"):
            errs.append(required("eventTime"))
        if t not in ("Normal", "Warning"):
            errs.append(not_supported("type", t or "", ["Normal", "Warning"]))
        rc = o.get("reportingComponent")
        if not rc:
            errs.append(required(field("reportingComponent", "reportingController")))
        elif check_qualified_name(rc):
            errs.append(invalid(field("reportingComponent", "reportingController"), rc, check_qualified_name(rc)))
        for f in ("reportingInstance", "action", "reason"):
            if not o.get(f):
                errs.append(required(f))
            elif len(o[f]) > 128:
                errs.append(FieldError("TooLong", f, detail="may not be more than 128 bytes"))
        if len(o.get("message") or "") > 1024:
            errs.append(FieldError("TooLong", field("message", "note"), detail="may not be more than 1024 bytes"))
    elif t and t not in ("Normal", "Warning"):
        errs.append(not_supported("type", t, ["Normal", "Warning"]))
    return errs


class CoreEvents(ResourceType):
    plural, singular, kind = "events", "event", "Event"
    short_names = ("ev",)
    storage = "/events"
    typed = CORE_EVENT
    smp = {"metadata": OBJECT_META_SMP}
    apply_meta = smp
    field_labels = EVENT_FIELD_LABELS

    def field_values(self, o):
        return _event_field_values(super().field_values(o), o)

    def from_storage(self, o, version):
        o = super().from_storage(o, version)
        for f in ("firstTimestamp", "lastTimestamp", "eventTime"):
            o.setdefault(f, None)
        o.setdefault("reportingComponent", "")
        o.setdefault("reportingInstance", "")
        o.setdefault("source", {})
        return o

    def defaults(self, o):
        for f in ("firstTimestamp", "lastTimestamp", "eventTime"):
            if o.get(f) is None:
                o.pop(f, None)
        return o

    def validate(self, o, old=None):
        return _validate_event(o, False)

    def columns(self, version):
        return [{"name": "Last Seen", "type": "string", "format": "", "priority": 0, "description": ""},
                {"name": "Type", "type": "string", "format": "", "priority": 0, "description": ""},
                {"name": "Reason", "type": "string", "format": "", "priority": 0, "description": ""},
                {"name": "Object", "type": "string", "format": "", "priority": 0, "description": ""},
                {"name": "Message", "type": "string", "format": "", "priority": 0, "description": ""}]

    def cells(self, o, version, now):
        io = o.get("involvedObject") or o.get("regarding") or {}
        last = o.get("lastTimestamp") or o.get("eventTime") or (o.get("series") or {}).get("lastObservedTime") \
            or o["metadata"].get("creationTimestamp")
        try:
            seen = human_duration((now - parse_time(last)).total_seconds()) if last else "<unknown>"
        except ValueError:
            seen = "<unknown>"
        return [seen, o.get("type", ""), o.get("reason", ""),
                f"{(io.get('kind') or '').lower()}/{io.get('name', '')}", o.get("message") or o.get("note") or ""]


class NewEvents(CoreEvents):
    """events.k8s.io/v1: the same stored events, with the newer field names."""
    group = "events.k8s.io"
    short_names = ("ev",)
    typed = NEW_EVENT

    def to_storage(self, o, version):
        out = {"apiVersion": "v1", "kind": "Event", "metadata": o.get("metadata") or {}}
        for core, new in EVENT_FIELD_MAP:
            if o.get(new) is not None:
                out[core] = o[new]
        return out

    def from_storage(self, o, version):
        out = {"kind": "Event", "apiVersion": f"events.k8s.io/{version}",
               "metadata": deepcopy(o.get("metadata") or {}), "eventTime": None}
        for core, new in EVENT_FIELD_MAP:
            if o.get(core) not in (None, "", {}):
                out[new] = deepcopy(o[core])
        return out

    def validate(self, o, old=None):
        return _validate_event(o, True)


# ====================================================================== leases

LEASE = obj("Lease", apiVersion=STR, kind=STR, metadata=OBJECT_META,
            spec=obj("LeaseSpec", holderIdentity=STR, leaseDurationSeconds=INT, acquireTime=MICRO,
                     renewTime=MICRO, leaseTransitions=INT, strategy=STR, preferredHolder=STR))


class Leases(ResourceType):
    group = "coordination.k8s.io"
    plural, singular, kind = "leases", "lease", "Lease"
    typed = LEASE
    smp = {"metadata": OBJECT_META_SMP}
    apply_meta = smp

    def validate(self, o, old=None):
        errs = validate_meta(o, True)
        spec = o.get("spec") or {}
        if "leaseDurationSeconds" in spec and spec["leaseDurationSeconds"] <= 0:
            errs.append(invalid("spec.leaseDurationSeconds", spec["leaseDurationSeconds"], "must be greater than 0"))
        if "leaseTransitions" in spec and spec["leaseTransitions"] < 0:
            errs.append(invalid("spec.leaseTransitions", spec["leaseTransitions"], "must be greater than or equal to 0"))
        return errs

    def columns(self, version):
        return [NAME_COLUMN, {"name": "Holder", "type": "string", "format": "", "priority": 0,
                              "description": "HolderIdentity contains the identity of the holder of a current lease."},
                AGE_COLUMN]

    def cells(self, o, version, now):
        return [o["metadata"]["name"], (o.get("spec") or {}).get("holderIdentity", ""), age_of(o, now)]


# ====================================================================== CRDs

CRD_VERSION = obj("CustomResourceDefinitionVersion", name=STR, served=BOOL, storage=BOOL,
                  deprecated=BOOL, deprecationWarning=STR,
                  schema=obj("CustomResourceValidation", openAPIV3Schema=ANYOBJ),
                  subresources=obj("CustomResourceSubresources", status=ANYOBJ, scale=ANYOBJ),
                  additionalPrinterColumns=lst(obj("CustomResourceColumnDefinition", name=STR, type=STR,
                                                   format=STR, description=STR, priority=INT, jsonPath=STR)),
                  selectableFields=lst(obj("SelectableField", jsonPath=STR)))
CRD_NAMES = obj("CustomResourceDefinitionNames", plural=STR, singular=STR, shortNames=lst(STR),
                kind=STR, listKind=STR, categories=lst(STR))
CRD = obj("CustomResourceDefinition", apiVersion=STR, kind=STR, metadata=OBJECT_META,
          spec=obj("CustomResourceDefinitionSpec", group=STR, names=CRD_NAMES, scope=STR,
                   versions=lst(CRD_VERSION), conversion=ANYOBJ, preserveUnknownFields=BOOL),
          status=ANYOBJ)


class CRDs(ResourceType):
    group = "apiextensions.k8s.io"
    plural, singular, kind = "customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition"
    namespaced = False
    short_names = ("crd", "crds")
    categories = ("api-extensions",)
    subresources = ("status",)
    generation = True
    status_subresource = True
    allow_unconditional_update = False
    typed = CRD
    smp = {"metadata": OBJECT_META_SMP}
    apply_meta = {"metadata": OBJECT_META_SMP, "spec": {"versions": keyed("name")}}

    def defaults(self, o):
        spec = o.get("spec") or {}
        names = spec.get("names") or {}
        if names.get("kind"):
            names.setdefault("listKind", names["kind"] + "List")
        if names.get("plural"):
            names.setdefault("singular", names.get("kind", "").lower())
        spec.setdefault("conversion", {"strategy": "None"})
        return o

    def prepare_create(self, o):
        super().prepare_create(o)
        fins = o["metadata"].setdefault("finalizers", [])
        if CRD_CLEANUP not in fins:
            fins.append(CRD_CLEANUP)
        self.set_status(o)

    def set_status(self, o, now_str=None):
        spec = o.get("spec") or {}
        from .util import fmt_time
        now_str = now_str or fmt_time(utcnow())
        st = o.setdefault("status", {})
        st["acceptedNames"] = deepcopy(spec.get("names") or {})
        old = {c.get("type"): c for c in st.get("conditions") or []}
        conds = []
        for typ, reason, msg in (("NamesAccepted", "NoConflicts", "no conflicts found"),
                                 ("Established", "InitialNamesAccepted", "the initial names have been accepted")):
            c = old.get(typ)
            if c and c.get("status") == "True":
                conds.append(c)
            else:
                conds.append({"type": typ, "status": "True", "lastTransitionTime": now_str,
                              "reason": reason, "message": msg})
        st["conditions"] = conds
        stored = st.setdefault("storedVersions", [])
        for v in spec.get("versions") or []:
            if v.get("storage") and v.get("name") not in stored:
                stored.append(v["name"])

    def validate(self, o, old=None):
        errs = validate_meta(o, False)
        spec = o.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group") or ""
        if not group:
            errs.append(required("spec.group"))
        elif "." not in group:
            errs.append(invalid("spec.group", group, "should be a domain with at least one dot"))
        for f in ("plural", "kind"):
            if not names.get(f):
                errs.append(required(f"spec.names.{f}"))
        if names.get("plural") and check_label(names["plural"]):
            errs.append(invalid("spec.names.plural", names["plural"], check_label(names["plural"])))
        want = f"{names.get('plural', '')}.{group}"
        if o["metadata"].get("name") and o["metadata"]["name"] != want:
            errs.append(invalid("metadata.name", o["metadata"]["name"], 'must be spec.names.plural+"."+spec.group'))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            errs.append(not_supported("spec.scope", spec.get("scope", ""), ["Cluster", "Namespaced"]))
        versions = spec.get("versions") or []
        if not versions:
            errs.append(required("spec.versions", "must have exactly one version marked as storage version"))
        elif sum(1 for v in versions if v.get("storage")) != 1:
            errs.append(invalid("spec.versions", versions, "must have exactly one version marked as storage version"))
        seen = set()
        for i, v in enumerate(versions):
            p = f"spec.versions[{i}]"
            if v.get("name") in seen:
                errs.append(duplicate(f"{p}.name", v.get("name")))
            seen.add(v.get("name"))
            sch = ((v.get("schema") or {}).get("openAPIV3Schema"))
            if sch is None:
                errs.append(required(f"{p}.schema.openAPIV3Schema", "schemas are required"))
            else:
                errs += S.structural_errors(sch, f"{p}.schema.openAPIV3Schema")
            for j, c in enumerate(v.get("additionalPrinterColumns") or []):
                cp = f"{p}.additionalPrinterColumns[{j}]"
                if not c.get("name"):
                    errs.append(required(f"{cp}.name"))
                if c.get("type") not in ("integer", "number", "string", "boolean", "date"):
                    errs.append(not_supported(f"{cp}.type", c.get("type", ""), ["boolean", "date", "integer", "number", "string"]))
                try:
                    JSONPath(c.get("jsonPath") or "")
                    if not c.get("jsonPath"):
                        errs.append(required(f"{cp}.jsonPath"))
                except ValueError as e:
                    errs.append(invalid(f"{cp}.jsonPath", c.get("jsonPath"), str(e)))
            for j, f in enumerate(v.get("selectableFields") or []):
                try:
                    JSONPath(f.get("jsonPath") or "")
                except ValueError as e:
                    errs.append(invalid(f"{p}.selectableFields[{j}].jsonPath", f.get("jsonPath"), str(e)))
        if old is not None:
            os_ = old.get("spec") or {}
            if os_.get("scope") != spec.get("scope"):
                errs.append(invalid("spec.scope", spec.get("scope"), "field is immutable"))
            if os_.get("group") != spec.get("group"):
                errs.append(invalid("spec.group", group, "field is immutable"))
            if (os_.get("names") or {}).get("plural") != names.get("plural"):
                errs.append(invalid("spec.names.plural", names.get("plural"), "field is immutable"))
        return errs

    def columns(self, version):
        return [NAME_COLUMN, {"name": "Created At", "type": "date", "format": "", "priority": 0,
                              "description": AGE_COLUMN["description"]}]

    def cells(self, o, version, now):
        return [o["metadata"]["name"], o["metadata"].get("creationTimestamp")]


# ====================================================================== custom resources

class CustomResources(ResourceType):
    """The resource a CustomResourceDefinition defines, served from its spec."""

    def __init__(self, crd):
        spec = crd["spec"]
        names = spec["names"]
        self.crd_name = crd["metadata"]["name"]
        self.crd_uid = crd["metadata"].get("uid")
        self.group = spec["group"]
        self.plural = names["plural"]
        self.singular = names.get("singular") or names["kind"].lower()
        self.kind = names["kind"]
        self._list_kind = names.get("listKind") or names["kind"] + "List"
        self.namespaced = spec.get("scope") == "Namespaced"
        self.short_names = tuple(names.get("shortNames") or ())
        self.categories = tuple(names.get("categories") or ())
        self.vers = {v["name"]: v for v in spec.get("versions") or []}
        self.versions = tuple(v["name"] for v in spec.get("versions") or [] if v.get("served"))
        self.storage_version = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), None)
        self.terminating = bool(crd["metadata"].get("deletionTimestamp"))
        st = (self.vers.get(self.storage_version) or {}).get("subresources") or {}
        self.status_subresource = "status" in st
        self.subresources = ("status",) if self.status_subresource else ()
        self.generation = True
        self.allow_unconditional_update = False
        self.return_deleted_object = True
        self.smp = None
        sch = self.schema(self.storage_version) or {}
        meta = S.list_meta_from_schema(sch) or {}
        meta["metadata"] = OBJECT_META_SMP
        self.apply_meta = meta

    @property
    def list_kind(self):
        return self._list_kind

    def qualified_kind(self):
        return self.kind

    def schema(self, version):
        return ((self.vers.get(version) or {}).get("schema") or {}).get("openAPIV3Schema")

    def decode(self, body, version):
        if not isinstance(body, dict):
            raise S.decode_error(self.kind, version, "json: cannot unmarshal into object")
        unknown = []
        sch = self.schema(version) or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        out = S.prune(body, sch, unknown, root=True)
        if "metadata" in out:
            mu = []
            try:
                out["metadata"] = S.decode_typed(out["metadata"], OBJECT_META, mu, "metadata", "ObjectMeta")
            except S.DecodeError as e:
                raise S.decode_error(self.kind, version, e) from None
            unknown += S.unknown_paths_with_index(body["metadata"], OBJECT_META, "metadata") if mu else []
        return out, unknown

    def defaults(self, o):
        sch = self.schema(self.storage_version)
        if not sch:
            return o
        md = o.get("metadata")
        body = {k: v for k, v in o.items() if k not in ("apiVersion", "kind", "metadata")}
        body = S.drop_nulls(body, sch)
        body = S.apply_defaults(body, sch)
        out = {"apiVersion": o.get("apiVersion"), "kind": o.get("kind"), "metadata": md}
        out.update(body)
        return out

    def from_storage(self, o, version):
        # defaults apply on read too: a default added to the CRD shows on existing objects
        out = self.defaults(deepcopy(o))
        out["apiVersion"] = self.api_version(version)
        return out

    def validate(self, o, old=None):
        errs = validate_meta(o, self.namespaced)
        sch = self.schema(self.storage_version) or {}
        props = sch.get("properties") or {}
        for r in sch.get("required") or []:
            if r not in o:
                errs.append(required(r))
        for k, v in o.items():
            if k in ("apiVersion", "kind", "metadata"):
                continue
            if k in props:
                errs += S.validate(v, props[k], k)
        return errs + validate_custom_resource(sch, o, old, errs)      # CEL: validation.py

    def field_values(self, o):
        v = super().field_values(o)
        for f in self.selectable_fields():
            found = JSONPath(f).find(o)
            v[f.lstrip(".")] = value_string(found[0]) if found else ""
        return v

    def selectable_fields(self):
        return [f["jsonPath"] for f in (self.vers.get(self.storage_version) or {}).get("selectableFields") or []]

    def supported_field_labels(self):
        return ("metadata.name", "metadata.namespace") + tuple(f.lstrip(".") for f in self.selectable_fields())

    def _printer_columns(self, version):
        return (self.vers.get(version) or {}).get("additionalPrinterColumns")

    def columns(self, version):
        cols = self._printer_columns(version)
        if cols is None:
            return [NAME_COLUMN, AGE_COLUMN]
        out = [NAME_COLUMN]
        for c in cols:
            out.append({"name": c["name"], "type": c["type"], "format": c.get("format", ""),
                        "description": c.get("description", ""), "priority": c.get("priority", 0)})
        return out

    def cells(self, o, version, now):
        cols = self._printer_columns(version)
        if cols is None:
            return [o["metadata"]["name"], age_of(o, now)]
        cells = [o["metadata"]["name"]]
        for c in cols:
            found = JSONPath(c["jsonPath"]).find(o)
            if not found or found[0] is None:
                cells.append(None)
                continue
            cells.append(_cell(c["type"], found[0], now))
        return cells

    def openapi_schema(self, version):
        sch = deepcopy(self.schema(version) or {"type": "object"})
        sch["x-kubernetes-group-version-kind"] = [{"group": self.group, "version": version, "kind": self.kind}]
        props = sch.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = {"type": "object"}
        return sch


def _cell(typ, v, now):
    if typ == "integer":
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if typ == "number":
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if typ == "boolean":
        return v if isinstance(v, bool) else None
    if typ == "date":
        if not isinstance(v, str):
            return None
        try:
            return human_duration((now - parse_time(v)).total_seconds())
        except ValueError:
            return "<invalid>"
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        import json
        return json.dumps(v, separators=(",", ":"))
    return str(v)



# ====================================================================== nodes, runtime classes

TAINT = obj("Taint", key=STR, value=STR, effect=STR, timeAdded=TIME)
NODE_ADDRESS = obj("NodeAddress", type=STR, address=STR)
NODE_INFO = obj("NodeSystemInfo", machineID=STR, systemUUID=STR, bootID=STR, kernelVersion=STR,
                osImage=STR, containerRuntimeVersion=STR, kubeletVersion=STR, kubeProxyVersion=STR,
                operatingSystem=STR, architecture=STR, swap=ANYOBJ)
NODE_CONDITION = obj("NodeCondition", type=STR, status=STR, lastHeartbeatTime=TIME,
                     lastTransitionTime=TIME, reason=STR, message=STR)
NODE = obj("Node", apiVersion=STR, kind=STR, metadata=OBJECT_META,
           spec=obj("NodeSpec", podCIDR=STR, podCIDRs=lst(STR), providerID=STR, unschedulable=BOOL,
                    taints=lst(TAINT), configSource=ANYOBJ, externalID=STR),
           status=obj("NodeStatus", capacity=mp(QTY), allocatable=mp(QTY), phase=STR,
                      conditions=lst(NODE_CONDITION), addresses=lst(NODE_ADDRESS),
                      daemonEndpoints=ANYOBJ, nodeInfo=NODE_INFO, images=lst(ANYOBJ),
                      volumesInUse=lst(STR), volumesAttached=lst(ANYOBJ), config=ANYOBJ,
                      runtimeHandlers=lst(ANYOBJ), features=ANYOBJ))
NODE_SMP = {"metadata": OBJECT_META_SMP,
            "spec": {"taints": keyed("key")},
            "status": {"conditions": keyed("type"), "addresses": keyed("type")}}


class Nodes(ResourceType):
    """core/v1 Node: cluster-scoped; unlike most kinds a create may set .status (the kubelet
    registers its node that way), while updates of the main resource keep the old one."""
    plural, singular, kind = "nodes", "node", "Node"
    namespaced = False
    short_names = ("no",)
    subresources = ("status",)
    status_subresource = True
    typed = NODE
    smp = NODE_SMP
    apply_meta = NODE_SMP
    field_labels = ("spec.unschedulable",)

    def prepare_create(self, o):
        pass                    # nodeStrategy.PrepareForCreate keeps the status

    def field_values(self, o):
        v = super().field_values(o)
        v["spec.unschedulable"] = "true" if (o.get("spec") or {}).get("unschedulable") else "false"
        return v

    def validate(self, o, old=None):
        errs = validate_meta(o, False)
        for i, t in enumerate((o.get("spec") or {}).get("taints") or []):
            if t.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
                errs.append(not_supported(f"spec.taints[{i}].effect", t.get("effect", ""),
                                          ["NoExecute", "NoSchedule", "PreferNoSchedule"]))
        return errs

    def columns(self, version):
        return [NAME_COLUMN,
                {"name": "Status", "type": "string", "format": "", "priority": 0,
                 "description": "The status of the node"},
                {"name": "Roles", "type": "string", "format": "", "priority": 0,
                 "description": "The roles of the node"},
                AGE_COLUMN,
                {"name": "Version", "type": "string", "format": "", "priority": 0,
                 "description": "Kubelet Version reported by the node."},
                {"name": "Kernel-Version", "type": "string", "format": "", "priority": 1,
                 "description": "Kernel Version reported by the node."}]

    def cells(self, o, version, now):
        st = o.get("status") or {}
        ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
        status = "Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"
        if (o.get("spec") or {}).get("unschedulable"):
            status += ",SchedulingDisabled"
        roles = sorted(k.split("/", 1)[1] for k in (o["metadata"].get("labels") or {})
                       if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1])
        info = st.get("nodeInfo") or {}
        return [o["metadata"]["name"], status, ",".join(roles) or "<none>", age_of(o, now),
                info.get("kubeletVersion", ""), info.get("kernelVersion", "")]


RUNTIME_CLASS = obj("RuntimeClass", apiVersion=STR, kind=STR, metadata=OBJECT_META, handler=STR,
                    overhead=obj("Overhead", podFixed=mp(QTY)),
                    scheduling=obj("Scheduling", nodeSelector=SMAP, tolerations=lst(TOLERATION)))


class RuntimeClasses(ResourceType):
    """node.k8s.io/v1 RuntimeClass: cluster-scoped; handler required (an RFC 1123 label) and
    immutable."""
    group = "node.k8s.io"
    plural, singular, kind = "runtimeclasses", "runtimeclass", "RuntimeClass"
    namespaced = False
    typed = RUNTIME_CLASS
    smp = {"metadata": OBJECT_META_SMP}
    apply_meta = smp

    def validate(self, o, old=None):
        errs = validate_meta(o, False)
        h = o.get("handler")
        if not h:
            errs.append(required("handler"))
        else:
            why = check_label(h)
            if why:
                errs.append(invalid("handler", h, why))
        if old is not None and h != old.get("handler"):
            errs.append(invalid("handler", h, "field is immutable"))
        return errs

    def columns(self, version):
        return [NAME_COLUMN,
                {"name": "Handler", "type": "string", "format": "", "priority": 0,
                 "description": "handler specifies the underlying runtime and configuration that the "
                                "CRI implementation will use to handle pods of this class."},
                AGE_COLUMN]

    def cells(self, o, version, now):
        return [o["metadata"]["name"], o.get("handler", ""), age_of(o, now)]


BUILTINS = (Pods(), Secrets(), Namespaces(), CoreEvents(), NewEvents(), Leases(), CRDs(), Nodes(),
            RuntimeClasses())

# SPDX-License-Identifier: MIT
"""Which fields an older Kubernetes knows: the API types of one release, read from the npm
package kubernetes-types (TypeScript declarations generated from that release's OpenAPI
document; scripts/install-deps.sh fetches kubernetes-types@1.25.0 into build/tools), and a
walk of an object against them. A field the release's types lack is one its API server
refuses (`field not declared in schema`) or drops.

    types = KubeTypes("build/tools/k8s-types-1.25/node_modules/kubernetes-types")
    types.unknown_fields(obj)     # ["spec.versions[0].selectableFields", ...]
"""
import os
import re

# apiVersion (group/version) -> declaration file below the package
GROUP_FILES = {
    "v1": "core/v1", "apps/v1": "apps/v1", "apiextensions.k8s.io/v1": "apiextensions/v1",
    "rbac.authorization.k8s.io/v1": "rbac/v1", "policy/v1": "policy/v1", "node.k8s.io/v1": "node/v1",
    "coordination.k8s.io/v1": "coordination/v1", "batch/v1": "batch/v1", "scheduling.k8s.io/v1": "scheduling/v1",
}
ANY = {"any", "JSON", "object", "unknown"}
# The package leaves out JSONSchemaProps' vendor extensions; these are the ones the 1.25 API
# reference lists (x-kubernetes-validations, with ValidationRule {rule, message}, since 1.23).
SCHEMA_EXTENSIONS = {
    "x-kubernetes-embedded-resource": "boolean", "x-kubernetes-int-or-string": "boolean",
    "x-kubernetes-list-map-keys": "string[]", "x-kubernetes-list-type": "string",
    "x-kubernetes-map-type": "string", "x-kubernetes-preserve-unknown-fields": "boolean",
    "x-kubernetes-validations": "ValidationRule[]",
}
SCALARS = {"string", "number", "boolean"}


class KubeTypes:
    def __init__(self, root):
        if not os.path.isfile(os.path.join(root, "package.json")):
            raise FileNotFoundError(f"{root}: kubernetes-types is not installed (scripts/install-deps.sh)")
        self.root = root
        self.files = {}

    def _file(self, mod):
        """{"interfaces": {name: {prop: type}}, "aliases": {name: type}, "imports": {name: mod}}"""
        if mod in self.files:
            return self.files[mod]
        with open(os.path.join(self.root, mod + ".d.ts")) as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)       # the doc comments
        imports = {}
        for names, src in re.findall(r'import \{([^}]*)\} from "([^"]+)";', text):
            target = os.path.normpath(os.path.join(os.path.dirname(mod), src))
            for n in names.split(","):
                imports[n.strip()] = target
        # map types written over three lines: labels?: {\n [name: string]: string;\n };
        text = re.sub(r"\{\s*\[(\w+): string\]: ([^;{}]+);\s*\}", r"{ [\1: string]: \2 }", text)
        interfaces = {}
        for name, body in re.findall(r"export interface (\w+) \{(.*?)\n\}", text, re.S):
            props = {}
            for pname, ptype in re.findall(r'^\s+"?([\w$.-]+)"?\??: (.+);$', body, re.M):
                props[pname] = ptype.strip()
            interfaces[name] = props
        if "JSONSchemaProps" in interfaces:
            for k, v in SCHEMA_EXTENSIONS.items():
                interfaces["JSONSchemaProps"].setdefault(k, v)
        aliases = dict(re.findall(r"export declare type (\w+) = (.+);", text))
        self.files[mod] = {"interfaces": interfaces, "aliases": aliases, "imports": imports}
        return self.files[mod]

    def _resolve(self, mod, name):
        """(mod, kind, value): kind "interface" (props), "alias" (a type string) or "unknown"."""
        f = self._file(mod)
        if name in f["interfaces"]:
            return mod, "interface", f["interfaces"][name]
        if name in f["aliases"]:
            return mod, "alias", f["aliases"][name]
        if name in f["imports"]:
            return self._resolve(f["imports"][name], name)
        return mod, "unknown", None

    def unknown_fields(self, obj):
        """Paths of the fields of obj (a built-in object) the release does not declare. An
        apiVersion the table above does not know is skipped (not a built-in of the release)."""
        mod = GROUP_FILES.get(obj.get("apiVersion"))
        if mod is None:
            return []
        _, kind, _ = self._resolve(mod, obj.get("kind", ""))
        if kind != "interface":
            return [f"{obj.get('apiVersion')} {obj.get('kind')}: not a kind of this release"]
        out = []
        self._walk(obj, mod, obj["kind"], "", out)
        return out

    def _walk(self, value, mod, typ, path, out):
        typ = typ.strip()
        if typ in ANY or value is None:
            return
        if " | " in typ:            # a union: fine if any branch takes it
            for branch in typ.split(" | "):
                trial = []
                self._walk(value, mod, branch, path, trial)
                if not trial:
                    return
            self._walk(value, mod, typ.split(" | ")[0], path, out)
            return
        m = re.fullmatch(r"(.+)\[\]", typ) or re.fullmatch(r"Array<(.+)>", typ)
        if m:
            if isinstance(value, list):
                for i, v in enumerate(value):
                    self._walk(v, mod, m.group(1), f"{path}[{i}]", out)
            return
        m = re.fullmatch(r"\{ \[\w+: string\]: (.+) \}", typ)
        if m:
            if isinstance(value, dict):
                for k, v in value.items():
                    self._walk(v, mod, m.group(1), f"{path}.{k}", out)
            return
        if typ in SCALARS or typ.startswith('"'):
            return
        mod2, kind, val = self._resolve(mod, typ)
        if kind == "alias":
            self._walk(value, mod2, val, path, out)
        elif kind == "interface" and isinstance(value, dict):
            for k, v in value.items():
                where = f"{path}.{k}" if path else k
                if k not in val:
                    out.append(where)
                else:
                    self._walk(v, mod2, val[k], where, out)

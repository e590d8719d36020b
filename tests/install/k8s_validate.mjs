// SPDX-License-Identifier: MIT
// Validates Kubernetes objects against the Kubernetes API's OpenAPI schemas, as compiled into
// JSON-schema validators by the npm package kubernetes-models (and
// @kubernetes-models/prometheus-operator for ServiceMonitor), which scripts/install-deps.sh
// installs into build/tools/k8s-models.
//
//   node tests/install/k8s_validate.mjs MODELS_DIR < objects.json
//
// stdin: a JSON array of objects. stdout: one JSON line per object,
// {"kind", "name", "ok", "errors": ["/spec/replicas must be integer", ...]}.
// Besides the schema (types, required fields, enums, formats), fields that the Kubernetes
// type does not have are reported ("unknown field"), as kubectl --validate=strict does: the
// OpenAPI schemas do not forbid them, so the field lists come from the package's type
// declarations (.d.ts) of each kind.
import { readFileSync, existsSync } from "node:fs";
import { join, dirname } from "node:path";
import { pathToFileURL } from "node:url";

const models = process.argv[2];
if (!models) {
	console.error("usage: k8s_validate.mjs MODELS_DIR < objects.json");
	process.exit(2);
}
const nm = join(models, "node_modules");

function modelFile(apiVersion, kind, ext) {
	const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
	if (group === "monitoring.coreos.com")
		return join(nm, "@kubernetes-models/prometheus-operator", group, version, kind + ext);
	return join(nm, "kubernetes-models", group, version, kind + ext);
}

// ---- the field lists of a type, from its .d.ts: `"name"?: Type;` inside `export interface`
const ifaceCache = new Map();

function parseDts(file) {
	if (ifaceCache.has(file)) return ifaceCache.get(file);
	const src = readFileSync(file, "utf8");
	const imports = new Map();
	for (const m of src.matchAll(/import \{ ([^}]+) \} from "([^"]+)";/g))
		for (const name of m[1].split(",").map((s) => s.trim()))
			imports.set(name, m[2].startsWith(".") ? join(dirname(file), m[2].replace(/\.js$/, ".d.ts"))
				: join(nm, m[2].replace(/\.js$/, "") + ".d.ts"));
	const ifaces = new Map();
	for (const m of src.matchAll(/export interface (\w+)(?: extends [^{]+)? \{([\s\S]*?)\n\}/g)) {
		const fields = new Map();
		const body = m[2].replace(/\/\*\*[\s\S]*?\*\//g, "")
			.replace(/\{\s*\[key: string\]: ([^;{}]+);\s*\}/g, "{[key: string]: $1}");
		for (const f of body.matchAll(/^\s*"([^"]+)"\??: (.+);$/gm)) fields.set(f[1], f[2]);
		ifaces.set(m[1], fields);
	}
	const out = { imports, ifaces };
	ifaceCache.set(file, out);
	return out;
}

// fields of interface `name` as declared in `file` (following one import hop)
function fieldsOf(file, name) {
	if (!existsSync(file)) return null;
	const d = parseDts(file);
	if (d.ifaces.has(name)) return { file, fields: d.ifaces.get(name) };
	if (d.imports.has(name)) return fieldsOf(d.imports.get(name), name);
	// the _schemas/ files declare IIoK8s... names as aliases of the kind's interface
	const alias = readFileSync(file, "utf8").match(new RegExp(`export type \\{ (\\w+) as ${name}\\b`));
	if (alias && alias[1] !== name) return fieldsOf(file, alias[1]);
	return null;
}

function typeTarget(file, type) {
	// unwrap Array<T> and {[key: string]: T}; returns [interface name or null, isArray, isMap]
	let t = type.trim(), arr = false, map = false;
	const a = t.match(/^Array<(.+)>$/);
	if (a) { t = a[1].trim(); arr = true; }
	const mp = t.match(/^\{\[key: string\]: (.+)\}$/);
	if (mp) { t = mp[1].trim(); map = true; }
	return [/^I\w+$/.test(t) ? t : null, arr, map];
}

function unknownFields(value, file, iface, path, out, depth = 0) {
	if (depth > 40 || value === null || typeof value !== "object" || Array.isArray(value)) return;
	const found = fieldsOf(file, iface);
	// a type we cannot see into: IntOrString, Quantity, JSONSchemaPropsOrArray (empty interfaces)
	if (!found || found.fields.size === 0) return;
	for (const [k, v] of Object.entries(value)) {
		if (!found.fields.has(k)) {
			out.push(`${path}/${k}: unknown field "${k}"`);
			continue;
		}
		const [sub, arr, map] = typeTarget(found.file, found.fields.get(k));
		if (!sub) continue;
		const subFile = parseDts(found.file).imports.get(sub) || found.file;
		if (arr && Array.isArray(v)) v.forEach((x, i) => unknownFields(x, subFile, sub, `${path}/${k}/${i}`, out, depth + 1));
		else if (map && v && typeof v === "object") for (const [mk, mv] of Object.entries(v)) unknownFields(mv, subFile, sub, `${path}/${k}/${mk}`, out, depth + 1);
		else unknownFields(v, subFile, sub, `${path}/${k}`, out, depth + 1);
	}
}

const objects = JSON.parse(readFileSync(0, "utf8"));
for (const o of objects) {
	const res = { kind: o.kind, name: o.metadata && o.metadata.name, ok: false, errors: [] };
	const js = modelFile(String(o.apiVersion || ""), String(o.kind || ""), ".js");
	if (!existsSync(js)) {
		res.errors.push(`no schema for ${o.apiVersion} ${o.kind} in ${models}`);
		console.log(JSON.stringify(res));
		continue;
	}
	const mod = await import(pathToFileURL(js).href);
	const Model = mod[o.kind] || mod.default;
	try {
		new Model(o).validate();
	} catch (e) {
		for (const line of String(e.message).split(/,\s*(?=data\/)/)) res.errors.push(line);
	}
	const dts = modelFile(String(o.apiVersion), String(o.kind), ".d.ts");
	const unknown = [];
	unknownFields(o, dts, "I" + o.kind, "", unknown);
	res.errors.push(...unknown);
	res.ok = res.errors.length === 0;
	console.log(JSON.stringify(res));
}

#!/usr/bin/env node
// Validates every object of multi-document Kubernetes YAML against its API
// schema, the way the API server would with kubectl's default strict field
// validation:
//  - built-in kinds: kubernetes-models (types, enums, required fields);
//  - ServiceMonitor, PodMonitor, PrometheusRule, ...: @kubernetes-models/prometheus-operator;
//  - kinds defined by a CustomResourceDefinition (ShadowSyncJob): the CRD's
//    openAPIV3Schema through ajv. The CRDs come from the inputs themselves and
//    from --crd FILE (default: <repo>/deploy/crd.yaml);
//  - every kind: no unknown fields (kubernetes-models does not check them, so
//    they are checked against the models' TypeScript declarations), and
//    metadata.name is a valid name.
// Any other kind is an error. Node tools come from <repo>/.tools/node
// (scripts/install-node-tools.sh) or $SHADOWSYNC_NODE_TOOLS.
//
//   node tests/deploy/validate_manifests.mjs deploy/ deploy/examples/a.yaml
//   helm template helm/shadowsync | node tests/deploy/validate_manifests.mjs -
//
// Prints one line per problem: FILE: document N (Kind/name): PATH: message.
// Exit status: 0 all valid, 1 some object invalid, 2 bad usage or unreadable input.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const toolsDir = process.env.SHADOWSYNC_NODE_TOOLS || path.join(repo, '.tools', 'node');
const modulesDir = path.join(toolsDir, 'node_modules');
if (!fs.existsSync(path.join(modulesDir, 'kubernetes-models'))) {
  console.error(`validate_manifests: no node tools in ${modulesDir}: run scripts/install-node-tools.sh`);
  process.exit(2);
}
const require = createRequire(path.join(toolsDir, 'package.json'));
const yaml = require('js-yaml');
const Ajv = require('ajv').default;

// ---------------------------------------------------------------------------
// Arguments.
const usage = 'usage: validate_manifests.mjs [--crd FILE]... [--no-default-crd] [--quiet] FILE|DIR|- ...\n'
  + '  --crd FILE         CRDs defining custom kinds (default: <repo>/deploy/crd.yaml)\n'
  + '  --no-default-crd   no CRD but those among the inputs and --crd\n'
  + '  --quiet            print only problems and the summary';
const inputs = [];
const crdFiles = [];
let quiet = false;
let defaultCrd = true;
{
  const args = process.argv.slice(2);
  for (let i = 0; i < args.length; ++i) {
    const a = args[i];
    if (a === '--crd') {
      if (i + 1 >= args.length) { console.error(`validate_manifests: --crd needs a FILE\n${usage}`); process.exit(2); }
      crdFiles.push(args[++i]);
    } else if (a === '--no-default-crd') {
      defaultCrd = false;
    } else if (a === '--quiet' || a === '-q') {
      quiet = true;
    } else if (a === '-h' || a === '--help') {
      console.log(usage);
      process.exit(0);
    } else if (a.startsWith('--')) {
      console.error(`validate_manifests: unknown flag ${a}\n${usage}`);
      process.exit(2);
    } else {
      inputs.push(a);
    }
  }
  if (inputs.length === 0) { console.error(usage); process.exit(2); }
  if (defaultCrd && crdFiles.length === 0) crdFiles.push(path.join(repo, 'deploy', 'crd.yaml'));
}

// ---------------------------------------------------------------------------
// Reading documents.
function listFiles(p) {
  if (p === '-') return ['-'];
  let st;
  try { st = fs.statSync(p); } catch (e) {
    console.error(`validate_manifests: ${p}: ${e.code === 'ENOENT' ? 'no such file or directory' : e.message}`);
    process.exit(2);
  }
  if (!st.isDirectory()) return [p];
  return fs.readdirSync(p).sort().flatMap((name) => {
    const child = path.join(p, name);
    if (fs.statSync(child).isDirectory()) return listFiles(child);
    return /\.ya?ml$/.test(name) ? [child] : [];
  });
}

// [{file, index, obj}] with index counting from 1 over the file's documents.
function readDocs(file) {
  const text = file === '-' ? fs.readFileSync(0, 'utf8') : fs.readFileSync(file, 'utf8');
  const name = file === '-' ? '<stdin>' : file;
  let docs;
  try {
    docs = yaml.loadAll(text);
  } catch (e) {
    return { error: `${name}: YAML: ${e.message.split('\n')[0]}` };
  }
  const out = [];
  docs.forEach((obj, i) => {
    if (obj === null || obj === undefined) return;  // empty document (e.g. a disabled template)
    // A v1 List (kubectl get -o yaml) holds its objects in items.
    if (obj && obj.kind === 'List' && obj.apiVersion === 'v1' && Array.isArray(obj.items)) {
      obj.items.forEach((item, j) => out.push({ file: name, index: `${i + 1}.items[${j}]`, obj: item }));
    } else {
      out.push({ file: name, index: `${i + 1}`, obj });
    }
  });
  return { docs: out };
}

// ---------------------------------------------------------------------------
// Unknown fields: a small reader of the models' .d.ts interface declarations.
// They are machine-generated (interfaces of quoted property names, Array<T>,
// unions of literals, inline object types and index signatures), so a
// tokenizer and a recursive-descent parser of that subset suffice.
const dtsCache = new Map();  // file -> {imports, aliases, decls}

function tokenize(src) {
  src = src.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/\/\/[^\n]*/g, ' ');
  const re = /\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|=>|\S)/y;
  const toks = [];
  let m;
  while (re.lastIndex < src.length && (m = re.exec(src)) !== null) toks.push(m[1]);
  return toks;
}

function parseDts(file) {
  if (dtsCache.has(file)) return dtsCache.get(file);
  const result = { file, imports: new Map(), aliases: new Map(), decls: new Map() };
  dtsCache.set(file, result);
  let toks;
  try { toks = tokenize(fs.readFileSync(file, 'utf8')); } catch { return result; }
  let p = 0;
  const peek = () => toks[p];
  const next = () => toks[p++];
  const eat = (t) => { if (toks[p] === t) { ++p; return true; } return false; };
  const unq = (s) => (s[0] === '"' || s[0] === "'") ? s.slice(1, -1) : s;
  const skipBalanced = () => {  // at an opening bracket
    const open = next();
    const close = { '{': '}', '(': ')', '[': ']', '<': '>' }[open];
    let depth = 1;
    while (p < toks.length && depth > 0) {
      const t = next();
      if (t === open) ++depth; else if (t === close) --depth;
    }
  };
  const skipStatement = () => {
    while (p < toks.length) {
      const t = peek();
      if (t === ';') { ++p; return; }
      if (t === '{' || t === '(' || t === '[') { skipBalanced(); if (peek() !== ';' && t === '{') return; continue; }
      ++p;
    }
  };

  function parseMembers() {  // after '{'
    const obj = { k: 'obj', props: new Map(), index: null };
    while (p < toks.length && peek() !== '}') {
      eat('readonly');
      if (peek() === '[') {  // [key: string]: T
        ++p; next(); eat(':'); next(); eat(']'); eat(':');
        obj.index = parseType();
      } else {
        const key = unq(next());
        eat('?');
        if (peek() === '(' || peek() === '<') {  // a method: not data
          while (p < toks.length && peek() !== ';' && peek() !== '}') {
            if (peek() === '(' || peek() === '<' || peek() === '{') skipBalanced(); else ++p;
          }
        } else {
          eat(':');
          obj.props.set(key, parseType());
        }
      }
      if (!eat(';')) eat(',');
    }
    eat('}');
    return obj;
  }

  function parsePrimary() {
    const t = peek();
    if (t === '{') { ++p; return parseMembers(); }
    if (t === '(') { ++p; const inner = parseType(); eat(')'); return inner; }
    if (t === 'Array' && toks[p + 1] === '<') { p += 2; const el = parseType(); eat('>'); return { k: 'arr', el }; }
    ++p;
    if (/^["'\d-]/.test(t)) return { k: 'scalar' };
    if (['string', 'number', 'boolean', 'null', 'undefined', 'true', 'false', 'bigint'].includes(t)) return { k: 'scalar' };
    if (['any', 'unknown', 'object', 'never', 'import', 'typeof'].includes(t)) {
      while (peek() === '(' || peek() === '.' || /^[\w$]/.test(peek() || '')) {
        if (peek() === '(') skipBalanced(); else ++p;
      }
      if (peek() === '<') skipBalanced();
      return { k: 'any' };
    }
    let name = t;
    while (peek() === '.') { ++p; name += '.' + next(); }
    if (peek() === '<') skipBalanced();  // generic instance: not checked
    if (peek() === '[' && toks[p + 1] !== ']') {  // indexed access I["kind"]
      skipBalanced();
      return { k: 'any' };
    }
    return { k: 'ref', name, file };
  }

  function parsePostfix() {
    let t = parsePrimary();
    while (peek() === '[' && toks[p + 1] === ']') { p += 2; t = { k: 'arr', el: t }; }
    return t;
  }

  function parseType() {
    eat('|');
    const opts = [parsePostfix()];
    while (peek() === '|' || peek() === '&') { ++p; opts.push(parsePostfix()); }
    return opts.length === 1 ? opts[0] : { k: 'union', opts };
  }

  while (p < toks.length) {
    const t = peek();
    if (t === 'import') {
      ++p;
      eat('type');
      if (eat('{')) {
        while (p < toks.length && peek() !== '}') {
          const orig = next();
          let local = orig;
          if (eat('as')) local = next();
          result.imports.set(local, { orig, from: null });
          eat(',');
        }
        eat('}');
        eat('from');
        const from = unq(next());
        for (const v of result.imports.values()) if (v.from === null) v.from = from;
      }
      skipStatement();
    } else if (t === 'export' || t === 'declare') {
      ++p;
      eat('declare');
      if (peek() === '{') {
        ++p;
        while (p < toks.length && peek() !== '}') {
          const local = next();
          let exported = local;
          if (eat('as')) exported = next();
          result.aliases.set(exported, local);
          eat(',');
        }
        eat('}');
        if (eat('from')) next();
        eat(';');
      }
    } else if (t === 'interface') {
      ++p;
      const name = next();
      if (peek() === '<') skipBalanced();
      const bases = [];
      if (eat('extends')) {
        while (p < toks.length && peek() !== '{') { const b = next(); if (b !== ',') bases.push(b); if (peek() === '<') skipBalanced(); }
      }
      eat('{');
      const obj = parseMembers();
      obj.bases = bases.map((b) => ({ k: 'ref', name: b, file }));
      result.decls.set(name, obj);
    } else if (t === 'type') {
      ++p;
      const name = next();
      if (peek() === '<') skipBalanced();
      eat('=');
      result.decls.set(name, parseType());
      eat(';');
    } else if (t === 'class' || t === 'function' || t === 'const' || t === 'let' || t === 'var' || t === 'namespace' || t === 'enum') {
      ++p;
      while (p < toks.length && peek() !== '{' && peek() !== ';') {
        if (peek() === '(' || peek() === '<') skipBalanced(); else ++p;
      }
      if (peek() === '{') skipBalanced(); else eat(';');
    } else {
      skipStatement();
    }
  }
  return result;
}

function resolveModule(fromFile, spec) {
  try {
    const js = createRequire(fromFile).resolve(spec);
    const dts = js.replace(/\.(c|m)?js$/, '.d.ts');
    return fs.existsSync(dts) ? dts : null;
  } catch {
    return null;
  }
}

// The type a reference names, or {k:'any'} when it cannot be found.
function deref(type, seen = 0) {
  if (type.k !== 'ref' || seen > 20) return type.k === 'ref' ? { k: 'any' } : type;
  if (type.resolved) return type.resolved;
  const mod = parseDts(type.file);
  const local = mod.aliases.get(type.name) || type.name;
  let out = { k: 'any' };
  if (mod.decls.has(local)) {
    out = mod.decls.get(local);
  } else if (mod.imports.has(local)) {
    const imp = mod.imports.get(local);
    const target = resolveModule(type.file, imp.from);
    if (target) out = { k: 'ref', name: imp.orig, file: target };
  }
  out = deref(out, seen + 1);
  if (out.k === 'obj' && out.bases && out.bases.length && !out.merged) {
    for (const b of out.bases) {
      const base = deref(b, seen + 1);
      if (base.k === 'obj') {
        for (const [k, v] of base.props) if (!out.props.has(k)) out.props.set(k, v);
        if (!out.index && base.index) out.index = base.index;
      } else {
        out.index = { k: 'any' };  // unknown base: accept anything
      }
    }
    out.merged = true;
  }
  type.resolved = out;
  return out;
}

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const jsonPath = (parts) => parts.reduce((s, k) => (typeof k === 'number' ? `${s}[${k}]` : (s ? `${s}.${k}` : k)), '');

function unknownFields(value, type, parts, errors) {
  type = deref(type);
  if (type.k === 'union') {
    const want = Array.isArray(value) ? 'arr' : isPlainObject(value) ? 'obj' : null;
    const match = want && type.opts.map((o) => deref(o)).find((o) => o.k === want);
    if (match) unknownFields(value, match, parts, errors);
    return;
  }
  if (type.k === 'arr' && Array.isArray(value)) {
    value.forEach((el, i) => unknownFields(el, type.el, [...parts, i], errors));
  } else if (type.k === 'obj' && isPlainObject(value)) {
    // An empty interface is an opaque value (JSON, JSONSchemaPropsOrArray).
    if (type.props.size === 0 && !type.index) return;
    for (const [key, v] of Object.entries(value)) {
      if (type.props.has(key)) {
        unknownFields(v, type.props.get(key), [...parts, key], errors);
      } else if (type.index) {
        unknownFields(v, type.index, [...parts, key], errors);
      } else {
        const known = [...type.props.keys()].sort().join(', ');
        errors.push(`${jsonPath([...parts, key])}: unknown field "${key}" (known: ${known})`);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Built-in and Prometheus Operator kinds.
function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== 'string' || typeof kind !== 'string' || !/^[A-Za-z0-9]+$/.test(kind)) return null;
  const candidates = apiVersion.startsWith('monitoring.coreos.com/')
    ? [`@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`]
    : [`kubernetes-models/${apiVersion}/${kind}`];
  for (const spec of candidates) {
    let js;
    try { js = require.resolve(spec); } catch { continue; }
    const mod = require(js);
    const cls = mod[kind];
    if (typeof cls !== 'function' || cls.apiVersion !== apiVersion || cls.kind !== kind) continue;
    return { cls, dts: js.replace(/\.js$/, '.d.ts'), iface: `I${kind}` };
  }
  return null;
}

function objectMetaModel() {
  const js = require.resolve('@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta');
  return { cls: require(js).ObjectMeta, dts: js.replace(/\.js$/, '.d.ts'), iface: 'IObjectMeta' };
}

function ajvErrors(errs, prefix) {
  return (errs || []).map((e) => {
    const where = (prefix + e.instancePath.replace(/\/(\d+)(?=\/|$)/g, '[$1]').replace(/\//g, '.')).replace(/^\./, '') || '(root)';
    let msg = e.message;
    if (e.keyword === 'enum') msg += `: ${e.params.allowedValues.map((v) => JSON.stringify(v)).join(', ')}`;
    if (e.keyword === 'additionalProperties') msg = `unknown field "${e.params.additionalProperty}"`;
    return `${where}: ${msg}`;
  });
}

// ---------------------------------------------------------------------------
// Custom resources: the CRDs' structural schemas as JSON Schema for ajv.
const crdKinds = new Map();  // "group/version|Kind" -> {validate, crd}
const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });

function toJsonSchema(s) {
  if (!isPlainObject(s)) return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith('x-kubernetes-') || k === 'description' || k === 'example' || k === 'externalDocs') continue;
    if (k === 'properties') {
      out.properties = Object.fromEntries(Object.entries(v).map(([pk, pv]) => [pk, toJsonSchema(pv)]));
    } else if (k === 'items' || k === 'not' || (k === 'additionalProperties' && isPlainObject(v))) {
      out[k] = toJsonSchema(v);
    } else if (k === 'anyOf' || k === 'allOf' || k === 'oneOf') {
      out[k] = v.map(toJsonSchema);
    } else if (k === 'nullable') {
      // handled below with type
    } else {
      out[k] = v;
    }
  }
  if (s['x-kubernetes-int-or-string']) {
    delete out.type;
    // anyOf branches of an int-or-string field only constrain, they don't type.
    const typed = { anyOf: [{ type: 'integer' }, { type: 'string' }] };
    out.allOf = [...(out.allOf || []), typed];
  }
  if (s.nullable && typeof out.type === 'string') out.type = [out.type, 'null'];
  // OpenAPI 3.0's boolean exclusiveMinimum/Maximum are JSON Schema's numbers.
  for (const [bound, excl] of [['minimum', 'exclusiveMinimum'], ['maximum', 'exclusiveMaximum']]) {
    if (typeof s[excl] !== 'boolean') continue;
    delete out[excl];
    if (s[excl] && typeof s[bound] === 'number') { out[excl] = s[bound]; delete out[bound]; }
  }
  // Structural schemas prune unknown fields; strict field validation (kubectl's
  // default) rejects them instead, and so do we.
  const objectLike = out.type === 'object' || (Array.isArray(out.type) && out.type.includes('object'));
  if (objectLike && out.properties && s.additionalProperties === undefined && !s['x-kubernetes-preserve-unknown-fields']) {
    out.additionalProperties = false;
  }
  return out;
}

function registerCrd(crd, where) {
  const spec = crd.spec || {};
  const names = spec.names || {};
  for (const v of spec.versions || []) {
    const schema = v.schema && v.schema.openAPIV3Schema;
    if (!schema) continue;
    const props = { ...(schema.properties || {}) };
    // apiVersion, kind and metadata are the API server's; checked separately.
    delete props.apiVersion; delete props.kind; delete props.metadata;
    const root = toJsonSchema({ ...schema, properties: props });
    root.properties = { ...root.properties, apiVersion: { type: 'string' }, kind: { type: 'string' }, metadata: { type: 'object' } };
    let validate;
    try {
      validate = ajv.compile(root);
    } catch (e) {
      return `${where}: CRD ${crd.metadata && crd.metadata.name}: schema of version ${v.name} does not compile: ${e.message}`;
    }
    crdKinds.set(`${spec.group}/${v.name}|${names.kind}`, { validate, where });
  }
  return null;
}

// ---------------------------------------------------------------------------
// Names.
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
// RBAC and a few other kinds allow path-segment names (e.g. "system:foo").
const pathSegmentKinds = new Set(['ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);
const dns1123LabelKinds = new Set(['Namespace', 'Service']);
const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function checkMetadata(obj) {
  const errors = [];
  const md = obj.metadata;
  if (!isPlainObject(md)) return ['metadata: required'];
  const name = md.name;
  if (name === undefined && md.generateName === undefined) errors.push('metadata.name: required');
  if (name !== undefined) {
    if (typeof name !== 'string' || name === '') {
      errors.push('metadata.name: must be a non-empty string');
    } else if (pathSegmentKinds.has(obj.kind)) {
      if (name === '.' || name === '..' || /[/%]/.test(name)) errors.push(`metadata.name: "${name}" may not be '.', '..' or contain '/' or '%'`);
    } else if (dns1123LabelKinds.has(obj.kind)) {
      if (name.length > 63 || !dns1123Label.test(name)) errors.push(`metadata.name: "${name}" must be a DNS-1123 label (lower case alphanumerics and '-', at most 63)`);
    } else if (name.length > 253 || !dns1123Subdomain.test(name)) {
      errors.push(`metadata.name: "${name}" must be a DNS-1123 subdomain (lower case alphanumerics, '-' and '.', at most 253)`);
    }
  }
  if (md.namespace !== undefined && (typeof md.namespace !== 'string' || !dns1123Label.test(md.namespace))) {
    errors.push(`metadata.namespace: "${md.namespace}" must be a DNS-1123 label`);
  }
  for (const field of ['labels', 'annotations']) {
    const m = md[field];
    if (m === undefined || m === null) continue;
    if (!isPlainObject(m)) { errors.push(`metadata.${field}: must be a map`); continue; }
    for (const [k, v] of Object.entries(m)) {
      if (field === 'labels' && typeof v === 'string' && v !== '' && (v.length > 63 || !/^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/.test(v))) {
        errors.push(`metadata.labels.${k}: "${v}" is not a valid label value`);
      }
    }
  }
  return errors;
}

function validateObject(obj) {
  if (!isPlainObject(obj)) return { label: '?', errors: ['(root): not a map'] };
  const label = `${obj.kind || '<no kind>'}/${(obj.metadata && (obj.metadata.name || obj.metadata.generateName)) || '<no name>'}`;
  if (typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string') {
    return { label, errors: ['(root): apiVersion and kind are required'] };
  }
  const errors = checkMetadata(obj);
  const custom = crdKinds.get(`${obj.apiVersion}|${obj.kind}`);
  if (custom) {
    if (!custom.validate(obj)) errors.push(...ajvErrors(custom.validate.errors, ''));
    const meta = objectMetaModel();
    if (meta && isPlainObject(obj.metadata)) {
      try {
        new meta.cls(obj.metadata).validate();
      } catch (e) {
        errors.push(...(e.errors ? ajvErrors(e.errors, 'metadata') : [`metadata: ${e.message}`]));
      }
      unknownFields(obj.metadata, { k: 'ref', name: meta.iface, file: meta.dts }, ['metadata'], errors);
    }
  } else {
    const model = modelFor(obj.apiVersion, obj.kind);
    if (!model) {
      return { label, errors: [`(root): unknown kind ${obj.kind} in ${obj.apiVersion} (no schema: not a built-in kind, not a Prometheus Operator kind, no CRD given)`] };
    }
    try {
      new model.cls(obj).validate();
    } catch (e) {
      errors.push(...(e.errors ? ajvErrors(e.errors, '') : [`(root): ${e.message}`]));
    }
    unknownFields(obj, { k: 'ref', name: model.iface, file: model.dts }, [], errors);
  }
  return { label, errors: [...new Set(errors)] };
}

// ---------------------------------------------------------------------------
let failed = false;
const all = [];
for (const f of crdFiles) {
  const r = readDocs(f);
  if (r.error) { console.error(`validate_manifests: ${r.error}`); process.exit(2); }
  for (const d of r.docs) {
    if (d.obj && d.obj.kind === 'CustomResourceDefinition') {
      const err = registerCrd(d.obj, d.file);
      if (err) { console.error(`validate_manifests: ${err}`); process.exit(2); }
    }
  }
}
for (const input of inputs) {
  for (const f of listFiles(input)) {
    const r = readDocs(f);
    if (r.error) { console.log(r.error); failed = true; continue; }
    all.push(...r.docs);
  }
}
// CRDs among the inputs define kinds for the other inputs (they win over --crd).
for (const d of all) {
  if (d.obj && d.obj.kind === 'CustomResourceDefinition' && d.obj.apiVersion === 'apiextensions.k8s.io/v1') {
    const err = registerCrd(d.obj, d.file);
    if (err) { console.log(err); failed = true; }
  }
}
const counts = new Map();
for (const d of all) {
  const { label, errors } = validateObject(d.obj);
  if (errors.length) {
    failed = true;
    for (const e of errors) console.log(`${d.file}: document ${d.index} (${label}): ${e}`);
  } else {
    counts.set(d.obj.kind, (counts.get(d.obj.kind) || 0) + 1);
    if (!quiet) console.log(`${d.file}: document ${d.index} (${label}): valid`);
  }
}
if (all.length === 0) {
  console.log('validate_manifests: no objects in the input');
  failed = true;
}
const summary = [...counts].sort().map(([k, n]) => `${k}=${n}`).join(' ');
console.log(`validate_manifests: ${all.length} objects, ${failed ? 'INVALID' : 'all valid'}${summary ? ` (${summary})` : ''}`);
process.exit(failed ? 1 : 0);

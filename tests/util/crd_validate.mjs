#!/usr/bin/env node
// Validates custom resources against their CRD's openAPIV3Schema the way
// kube-apiserver does, x-kubernetes-validations (CEL) included, for the fake
// API server (tests/util/fake_kube_apiserver.cc) and the CRD rule tests
// (tests/deploy/crd_rules_test.mjs). CEL comes from @bufbuild/cel
// (scripts/install-node-tools.sh).
//
// What a real server does and this does too:
//  - defaults are applied before validation, where the parent exists;
//  - null counts as absent; unknown fields are reported apart, since the
//    request's fieldValidation decides whether they are an error;
//  - type, enum, bounds, pattern, lengths, item counts, required, and
//    x-kubernetes-list-type map/set uniqueness;
//  - each rule runs where its value exists, with `self` typed by the schema
//    (integers as CEL int, objects with only their declared fields, maps,
//    lists); `oldSelf` binds on update where the old object has the
//    correlated value (object fields, map keys, list-type map entries), and
//    a rule that uses it runs only then; message, messageExpression, reason,
//    fieldPath; the root sees only metadata.name and metadata.generateName;
//  - CEL runs unless a value has the wrong type (then no rule runs, and
//    one error says so), so rules see values of their declared types.
// compileRules() checks what a server checks when the CRD is created: each
// rule parses, calls only known functions, selects only declared fields, and
// iterates only lists with maxItems (a bounded cost).
//
// As a server (the fake API server starts it): one JSON request per stdin
// line, one JSON reply per stdout line.
//   {"op": "schema", "key": K, "schema": S}             -> {"problems": [...]}
//   {"op": "validate", "key": K, "object": O, "old": O}
//       -> {"errors": [...], "unknown": [...], "prune": [...], "defaults": [...]}
// errors: {field, reason, message} as in a Status's details.causes. The
// caller applies defaults and prunes to its own copy, so that no number
// passes through JavaScript's doubles.
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const toolsDir = process.env.SHADOWSYNC_NODE_TOOLS || path.join(repo, '.tools', 'node');
const require = createRequire(path.join(toolsDir, 'package.json'));
const cel = await import(require.resolve('@bufbuild/cel'));
const { strings } = await import(require.resolve('@bufbuild/cel/ext'));

const env = cel.celEnv({ funcs: strings });

// ---------------------------------------------------------------------------
// Paths and messages, as kube-apiserver words them.

function child(p, key) {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(key) ? (p ? `${p}.${key}` : key) : `${p}[${key}]`;
}

function typeName(v) {
  if (v === null || v === undefined) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'object') return 'object';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

// The value kube-apiserver prints after "Invalid value:": scalars as JSON,
// objects and lists by their type.
function shown(v) {
  const t = typeName(v);
  return t === 'object' || t === 'array' ? JSON.stringify(t) : JSON.stringify(v);
}

const kReasonWords = {
  FieldValueInvalid: 'Invalid value',
  FieldValueRequired: 'Required value',
  FieldValueForbidden: 'Forbidden',
  FieldValueDuplicate: 'Duplicate value',
  FieldValueNotSupported: 'Unsupported value',
  FieldValueTooLong: 'Too long',
  FieldValueTooMany: 'Too many',
};

function cause(field, reason, detail, value) {
  const words = kReasonWords[reason] || reason;
  const withValue = reason === 'FieldValueInvalid' || reason === 'FieldValueNotSupported' ||
    reason === 'FieldValueDuplicate';
  const message = withValue && value !== undefined ? `${words}: ${shown(value)}: ${detail}`
    : detail ? `${words}: ${detail}` : words;
  return { field, reason, message };
}

// ---------------------------------------------------------------------------
// Defaults.

const clone = (v) => (v === undefined ? v : JSON.parse(JSON.stringify(v)));

function isPlainObject(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

// Fills absent fields that have a default, recursively, where the parent
// exists; each filled field goes to `filled` as {path: [keys], value}.
function applyDefaults(schema, value, keys = [], filled = []) {
  if (!schema) return value;
  if (isPlainObject(value)) {
    for (const [key, sub] of Object.entries(schema.properties || {})) {
      if ((value[key] === undefined || value[key] === null) && sub.default !== undefined) {
        value[key] = clone(sub.default);
        filled.push({ path: [...keys, key], value: sub.default });
      }
      if (value[key] !== undefined) value[key] = applyDefaults(sub, value[key], [...keys, key], filled);
    }
    if (isPlainObject(schema.additionalProperties)) {
      for (const key of Object.keys(value)) {
        value[key] = applyDefaults(schema.additionalProperties, value[key], [...keys, key], filled);
      }
    }
  } else if (Array.isArray(value) && schema.items) {
    return value.map((item, i) => applyDefaults(schema.items, item, [...keys, i], filled));
  }
  return value;
}

// ---------------------------------------------------------------------------
// Schema checks.

function checkValue(schema, value, p, out, keys = []) {
  if (!schema || value === undefined || value === null) return;
  if (schema['x-kubernetes-int-or-string']) {
    if (typeof value === 'string') {
      checkString(schema, value, p, out);
    } else if (!Number.isInteger(value)) {
      out.errors.push(cause(p, 'FieldValueInvalid',
        `${p} in body must be of type integer or string: ${JSON.stringify(typeName(value))}`, value));
      out.typeErrors = true;
    }
    return;
  }
  const want = schema.type;
  const got = typeName(value);
  const typeOk = !want || want === got || (want === 'number' && got === 'integer');
  if (!typeOk) {
    out.errors.push(cause(p, 'FieldValueInvalid',
      `${p} in body must be of type ${want}: ${JSON.stringify(got)}`, value));
    out.typeErrors = true;
    return;
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    out.errors.push(cause(p, 'FieldValueNotSupported',
      `supported values: ${schema.enum.map((e) => JSON.stringify(e)).join(', ')}`, value));
  }
  if (typeof value === 'number') checkNumber(schema, value, p, out);
  if (typeof value === 'string') checkString(schema, value, p, out);
  if (Array.isArray(value)) checkList(schema, value, p, out, keys);
  if (isPlainObject(value)) checkObject(schema, value, p, out, keys);
}

function checkNumber(schema, v, p, out) {
  const bad = (detail) => out.errors.push(cause(p, 'FieldValueInvalid', `${p} in body ${detail}`, v));
  if (schema.minimum !== undefined) {
    if (schema.exclusiveMinimum ? v <= schema.minimum : v < schema.minimum) {
      bad(`should be greater than ${schema.exclusiveMinimum ? '' : 'or equal to '}${schema.minimum}`);
    }
  }
  if (schema.maximum !== undefined) {
    if (schema.exclusiveMaximum ? v >= schema.maximum : v > schema.maximum) {
      bad(`should be less than ${schema.exclusiveMaximum ? '' : 'or equal to '}${schema.maximum}`);
    }
  }
  if (schema.multipleOf !== undefined && v % schema.multipleOf !== 0) {
    bad(`should be a multiple of ${schema.multipleOf}`);
  }
}

function checkString(schema, v, p, out) {
  const length = [...v].length;
  if (schema.maxLength !== undefined && length > schema.maxLength) {
    out.errors.push(cause(p, 'FieldValueTooLong', `may not be more than ${schema.maxLength} bytes`));
  }
  if (schema.minLength !== undefined && length < schema.minLength) {
    out.errors.push(cause(p, 'FieldValueInvalid',
      `${p} in body should be at least ${schema.minLength} chars long`, v));
  }
  if (schema.pattern !== undefined && !new RegExp(schema.pattern, 'u').test(v)) {
    out.errors.push(cause(p, 'FieldValueInvalid', `${p} in body should match '${schema.pattern}'`, v));
  }
}

function checkList(schema, v, p, out, keys) {
  if (schema.maxItems !== undefined && v.length > schema.maxItems) {
    out.errors.push(cause(p, 'FieldValueTooMany', `${v.length}: must have at most ${schema.maxItems} items`));
  }
  if (schema.minItems !== undefined && v.length < schema.minItems) {
    out.errors.push(cause(p, 'FieldValueInvalid',
      `${p} in body should have at least ${schema.minItems} items`, v));
  }
  const listType = schema['x-kubernetes-list-type'];
  const seen = new Map();
  v.forEach((item, i) => {
    const ip = `${p}[${i}]`;
    checkValue(schema.items, item, ip, out, [...keys, i]);
    let key;
    if (listType === 'set') key = JSON.stringify(item);
    if (listType === 'map' && isPlainObject(item)) {
      key = JSON.stringify((schema['x-kubernetes-list-map-keys'] || []).map((k) => item[k]));
    }
    if (key === undefined) return;
    if (seen.has(key)) out.errors.push(cause(ip, 'FieldValueDuplicate', '', listType === 'set' ? item : undefined));
    seen.set(key, i);
  });
}

function checkObject(schema, v, p, out, keys) {
  const props = schema.properties || {};
  for (const name of schema.required || []) {
    if (v[name] === undefined || v[name] === null) out.errors.push(cause(child(p, name), 'FieldValueRequired', ''));
  }
  const extra = schema.additionalProperties;
  for (const [key, value] of Object.entries(v)) {
    if (p === '' && key === 'metadata') continue;  // ObjectMeta: the server's own checks.
    const kp = child(p, key);
    if (props[key]) {
      checkValue(props[key], value, kp, out, [...keys, key]);
    } else if (isPlainObject(extra)) {
      checkValue(extra, value, kp, out, [...keys, key]);
    } else if (!schema['x-kubernetes-preserve-unknown-fields'] && extra !== true &&
               !(p === '' && ['apiVersion', 'kind', 'metadata'].includes(key))) {
      out.unknown.push(kp);
      out.prune.push([...keys, key]);
    }
  }
  if (schema.maxProperties !== undefined && Object.keys(v).length > schema.maxProperties) {
    out.errors.push(cause(p, 'FieldValueTooMany', `must have at most ${schema.maxProperties} items`));
  }
}

// ---------------------------------------------------------------------------
// CEL values: what a rule's `self` is.

function toCel(schema, value, root = false) {
  if (value === undefined || value === null) return undefined;
  if (!schema) return undefined;
  if (schema['x-kubernetes-int-or-string']) {
    return typeof value === 'number' ? BigInt(value) : value;
  }
  switch (typeName(value)) {
    case 'integer':
      return schema.type === 'number' ? value : BigInt(value);
    case 'number':
    case 'string':
    case 'boolean':
      return value;
    case 'array':
      return value.map((item) => toCel(schema.items, item));
    case 'object': {
      if (isPlainObject(schema.additionalProperties)) {
        return new Map(Object.entries(value).map(([k, v]) => [k, toCel(schema.additionalProperties, v)]));
      }
      const obj = {};
      for (const [key, sub] of Object.entries(schema.properties || {})) {
        const c = toCel(sub, value[key]);
        if (c !== undefined) obj[key] = c;
      }
      if (root && isPlainObject(value.metadata)) {
        obj.metadata = {};
        for (const key of ['name', 'generateName']) {
          if (typeof value.metadata[key] === 'string') obj.metadata[key] = value.metadata[key];
        }
      }
      return obj;
    }
    default:
      return undefined;
  }
}

// ---------------------------------------------------------------------------
// Rules.

function walkExpr(e, visit, scope = new Map()) {
  if (!e || !e.exprKind) return;
  const { case: kind, value: v } = e.exprKind;
  visit(e, scope);
  switch (kind) {
    case 'selectExpr':
      walkExpr(v.operand, visit, scope);
      break;
    case 'callExpr':
      if (v.target) walkExpr(v.target, visit, scope);
      v.args.forEach((a) => walkExpr(a, visit, scope));
      break;
    case 'listExpr':
      v.elements.forEach((a) => walkExpr(a, visit, scope));
      break;
    case 'structExpr':
      v.entries.forEach((en) => {
        if (en.keyKind && en.keyKind.case === 'mapKey') walkExpr(en.keyKind.value, visit, scope);
        walkExpr(en.value, visit, scope);
      });
      break;
    case 'comprehensionExpr': {
      walkExpr(v.iterRange, visit, scope);
      walkExpr(v.accuInit, visit, scope);
      // One variable: a list's elements or a map's keys. Two: index or key,
      // then the value.
      const inner = new Map(scope);
      const two = Boolean(v.iterVar2);
      inner.set(v.iterVar, { range: v.iterRange, position: two ? 'index' : 'element' });
      if (two) inner.set(v.iterVar2, { range: v.iterRange, position: 'value' });
      inner.set(v.accuVar, { accu: true });
      for (const part of [v.loopCondition, v.loopStep, v.result]) walkExpr(part, visit, inner);
      break;
    }
    default:
      break;
  }
}

function usesOldSelf(parsed) {
  let uses = false;
  walkExpr(parsed.expr, (e, scope) => {
    if (e.exprKind.case === 'identExpr' && e.exprKind.value.name === 'oldSelf' && !scope.has('oldSelf')) uses = true;
  });
  return uses;
}

// The schema an expression's value has, when it is a path from self/oldSelf
// (through fields, map and list indexing, and macro variables); else null.
function schemaOf(e, scope, selfSchema, problems) {
  const { case: kind, value: v } = e.exprKind;
  if (kind === 'identExpr') {
    if (scope.has(v.name)) {
      const bound = scope.get(v.name);
      if (bound.accu) return null;
      const range = schemaOf(bound.range, scope, selfSchema, problems);
      if (!range) return null;
      if (bound.position === 'index') return range.type === 'array' ? { type: 'integer' } : { type: 'string' };
      if (range.type === 'array') return range.items || null;
      return bound.position === 'value' ? range.additionalProperties || null : { type: 'string' };
    }
    return v.name === 'self' || v.name === 'oldSelf' ? selfSchema : null;
  }
  if (kind === 'selectExpr') {
    const s = schemaOf(v.operand, scope, selfSchema, problems);
    if (!s) return null;
    if (isPlainObject(s.additionalProperties)) return s.additionalProperties;
    if (s.properties && s.properties[v.field]) return s.properties[v.field];
    if (s.type === 'object' && !s.properties && s['x-kubernetes-preserve-unknown-fields']) return null;
    problems.push(`undefined field '${v.field}'`);
    return null;
  }
  if (kind === 'callExpr' && v.function === '_[_]') {
    const s = schemaOf(v.args[0], scope, selfSchema, problems);
    if (!s) return null;
    return s.type === 'array' ? s.items || null : s.additionalProperties || null;
  }
  return null;
}

const kMacros = new Set(['has']);

// The root's schema as rules see it: of metadata, only the name.
function ruleSchema(schema, root) {
  if (!root) return schema;
  const metadata = { type: 'object', properties: { name: { type: 'string' }, generateName: { type: 'string' } } };
  return { ...schema, properties: { ...(schema.properties || {}), metadata } };
}

// What kube-apiserver would refuse when the CRD is created, or [] if nothing.
function compileRule(rule, nodeSchema, root) {
  const selfSchema = ruleSchema(nodeSchema, root);
  let parsed;
  try {
    parsed = cel.parse(rule.rule);
  } catch (err) {
    return { problems: [`does not parse: ${err.message}`] };
  }
  const problems = [];
  walkExpr(parsed.expr, (e, scope) => {
    const { case: kind, value: v } = e.exprKind;
    // Operators ("_+_", "!_", "@in") are built in; named functions must exist.
    if (kind === 'callExpr' && /^[A-Za-z]/.test(v.function) && !kMacros.has(v.function) &&
        env.funcs.find(v.function) === undefined) {
      problems.push(`undeclared function '${v.function}'`);
    }
    if (kind === 'identExpr' && !scope.has(v.name) && v.name !== 'self' && v.name !== 'oldSelf') {
      problems.push(`undeclared reference to '${v.name}'`);
    }
    if (kind === 'selectExpr') schemaOf(e, scope, selfSchema, problems);
    if (kind === 'comprehensionExpr') {
      const range = schemaOf(v.iterRange, scope, selfSchema, []);
      if (range && range.type === 'array' && range.maxItems === undefined) {
        problems.push('iterates a list without maxItems: its cost has no bound');
      }
      if (range && range.type === 'object' && range.maxProperties === undefined) {
        problems.push('iterates a map without maxProperties: its cost has no bound');
      }
    }
  });
  let messageExpression;
  if (rule.messageExpression) {
    try {
      messageExpression = cel.plan(env, cel.parse(rule.messageExpression));
    } catch (err) {
      problems.push(`messageExpression does not parse: ${err.message}`);
    }
  }
  return {
    problems: [...new Set(problems)],
    run: cel.plan(env, parsed),
    transition: usesOldSelf(parsed) && !rule.optionalOldSelf,
    messageExpression,
  };
}

// Every rule of the schema with the path of its node, in schema order.
function* rulesOf(schema, at = '') {
  if (!schema) return;
  for (const rule of schema['x-kubernetes-validations'] || []) yield { rule, at, schema };
  for (const [key, sub] of Object.entries(schema.properties || {})) yield* rulesOf(sub, child(at, key));
  if (isPlainObject(schema.additionalProperties)) yield* rulesOf(schema.additionalProperties, `${at}[*]`);
  if (schema.items) yield* rulesOf(schema.items, `${at}[*]`);
}

export function compileRules(schema) {
  const problems = [];
  for (const { rule, at, schema: node } of rulesOf(schema)) {
    for (const problem of compileRule(rule, node, at === '').problems) {
      problems.push({ field: at, rule: rule.rule, problem });
    }
  }
  return problems;
}

const compiled = new WeakMap();
function compiledRule(rule, node, root) {
  if (!compiled.has(rule)) compiled.set(rule, compileRule(rule, node, root));
  return compiled.get(rule);
}

function evalRules(schema, value, old, p, out, root) {
  if (!schema || value === undefined || value === null) return;
  const rules = schema['x-kubernetes-validations'] || [];
  if (rules.length > 0) {
    const self = toCel(schema, value, root);
    const oldSelf = old === undefined || old === null ? undefined : toCel(schema, old, root);
    for (const rule of rules) {
      const c = compiledRule(rule, schema, root);
      if (c.problems.length > 0) {
        out.errors.push(cause(p, 'FieldValueInvalid', `rule does not compile: ${c.problems.join('; ')}`, value));
        continue;
      }
      if (c.transition && oldSelf === undefined) continue;
      const bindings = oldSelf === undefined ? { self } : { self, oldSelf };
      const result = c.run(bindings);
      if (result === true) continue;
      // A rule on the root without a fieldPath has no field: "<nil>", as Go prints it.
      const field = rule.fieldPath ? `${p}${rule.fieldPath}`.replace(/^\./, '') : p || '<nil>';
      if (cel.isCelError(result)) {
        out.errors.push(cause(field, 'FieldValueInvalid', `rule evaluation error: ${result.message}`, value));
        continue;
      }
      let message = rule.message || `failed rule: ${rule.rule}`;
      if (c.messageExpression) {
        const m = c.messageExpression(bindings);
        if (typeof m === 'string' && m.trim() !== '') message = m;
      }
      const reason = rule.reason || 'FieldValueInvalid';
      out.errors.push(cause(field, reason, message, reason === 'FieldValueInvalid' ? value : undefined));
    }
  }
  if (isPlainObject(value)) {
    const extra = schema.additionalProperties;
    for (const [key, sub] of Object.entries(value)) {
      const s = (schema.properties || {})[key] || (isPlainObject(extra) ? extra : undefined);
      const o = isPlainObject(old) ? old[key] : undefined;
      evalRules(s, sub, o, child(p, key), out, false);
    }
  } else if (Array.isArray(value) && schema.items) {
    const keys = schema['x-kubernetes-list-type'] === 'map' ? schema['x-kubernetes-list-map-keys'] || [] : null;
    const keyOf = (item) => JSON.stringify(keys.map((k) => (isPlainObject(item) ? item[k] : undefined)));
    const oldByKey = new Map();
    if (keys && Array.isArray(old)) old.forEach((item) => oldByKey.set(keyOf(item), item));
    value.forEach((item, i) => {
      evalRules(schema.items, item, keys ? oldByKey.get(keyOf(item)) : undefined, `${p}[${i}]`, out, false);
    });
  }
}

export const kRulesNotChecked = 'some validation rules were not checked because the object was ' +
  'invalid; correct the existing errors to complete validation';

// The errors a server reports for `object` (an update when `old` is given);
// the unknown fields it drops or, under fieldValidation=Strict, refuses (as
// paths, and as key lists in `prune`); and the defaults it fills in
// (`defaults`: {path: [keys], value}). Keys are strings, list indexes numbers.
export function validateObject(schema, object, old) {
  const out = { errors: [], unknown: [], prune: [], defaults: [] };
  const value = applyDefaults(schema, clone(object), [], out.defaults);
  const oldValue = old === undefined || old === null ? undefined : applyDefaults(schema, clone(old));
  checkValue(schema, value, '', out);
  // As kube-apiserver: a value of the wrong type blocks the rules, which
  // would see it; other schema errors do not.
  if (out.typeErrors) {
    out.errors.push(cause('<nil>', 'FieldValueInvalid', kRulesNotChecked, null));
  } else {
    evalRules(schema, value, oldValue, '', out, true);
  }
  delete out.typeErrors;
  return out;
}

// ---------------------------------------------------------------------------
// Server mode.

function serve() {
  const schemas = new Map();
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  lines.on('line', (line) => {
    let reply;
    try {
      const req = JSON.parse(line);
      if (req.op === 'schema') {
        schemas.set(req.key, req.schema);
        reply = { problems: compileRules(req.schema) };
      } else if (req.op === 'validate') {
        if (!schemas.has(req.key)) throw new Error(`no schema registered as ${JSON.stringify(req.key)}`);
        reply = validateObject(schemas.get(req.key), req.object, req.old);
      } else {
        throw new Error(`unknown op ${JSON.stringify(req.op)}`);
      }
    } catch (err) {
      reply = { error: String(err && err.stack ? err.stack : err) };
    }
    process.stdout.write(`${JSON.stringify(reply)}\n`);
  });
}

if (process.argv[1] && fs.realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  if (process.argv[2] !== '--serve') {
    process.stderr.write('usage: crd_validate.mjs --serve  (JSON requests on stdin, one per line)\n');
    process.exit(2);
  }
  serve();
}

#!/usr/bin/env node
// The CRD's validation as kube-apiserver runs it (tests/util/crd_validate.mjs:
// the schema, defaults and the x-kubernetes-validations CEL rules under
// @bufbuild/cel) against `shadowsync validate`, which runs the operator's
// reconcile-time checks:
//  - compile: every rule of deploy/crd.yaml compiles (parses, calls known
//    functions, selects declared fields, iterates bounded lists);
//  - invalid: each bad spec is refused by both, at the same field;
//  - valid: every example job passes both, with nothing pruned;
//  - all-at-once: a spec with several problems gets all of them from both;
//  - transitions: the immutable fields refuse a change on update, and only then.
//
//   node tests/deploy/crd_rules_test.mjs CASE --source DIR --bin DIR
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  if (i < 0 || i + 1 >= args.length) throw new Error(`missing ${name}`);
  return args[i + 1];
};
const testCase = args[0];
const source = flag('--source');
const bin = flag('--bin');
const require = createRequire(path.join(source, '.tools', 'node', 'package.json'));
const yaml = require('js-yaml');
const { compileRules, kRulesNotChecked, validateObject } = await import(path.join(source, 'tests', 'util', 'crd_validate.mjs'));

const crd = yaml.load(fs.readFileSync(path.join(source, 'deploy', 'crd.yaml'), 'utf8'));
const schema = crd.spec.versions[0].schema.openAPIV3Schema;
const base = yaml.load(fs.readFileSync(path.join(source, 'deploy', 'examples', 'quickstart.yaml'), 'utf8'));
const clone = (v) => JSON.parse(JSON.stringify(v));

// The fields `shadowsync validate` names for `job`, in its order ([] if valid).
function validateFields(job) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crd-rules-'));
  const file = path.join(dir, 'job.json');
  fs.writeFileSync(file, JSON.stringify(job));
  const r = spawnSync(path.join(bin, 'shadowsync'), ['validate', file], { encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  if (r.status === 0) return [];
  const fields = [];
  for (const line of r.stdout.split('\n').concat(r.stderr.split('\n'))) {
    // "<file>[:<line>]: <field>: <message>"
    const m = line.match(/^[^:]+\.json(?::\d+)?: ([^: ]+): /);
    if (m) fields.push(m[1]);
  }
  assert.ok(fields.length > 0, `validate failed without naming a field:\n${r.stdout}${r.stderr}`);
  return fields;
}

// The fields the API server refuses `job` at (kubectl: strict field validation).
// A rule on the root names no field; its message names the metadata field.
function serverFields(job, old) {
  const out = validateObject(schema, job, old);
  const fields = out.errors.filter((e) => !e.message.includes(kRulesNotChecked))
    .map((e) => (e.field === '<nil>' ? (e.message.match(/(metadata\.\w+)/) || [])[1] || '' : e.field));
  return { fields: fields.concat(out.unknown), out };
}

// A mutated copy of the quickstart job.
function job(mutate) {
  const j = clone(base);
  mutate(j);
  return j;
}

// Each bad spec, and the field both must name (the API server may name the
// list where validate names the element: prefixes match).
const invalid = {
  'criteo-tsv without paths': [job((j) => { j.spec.data = { format: 'criteo-tsv' }; }), 'spec.data.paths'],
  'an empty path': [job((j) => { j.spec.data = { format: 'criteo-tsv', paths: ['a.tsv', ''] }; }), 'spec.data.paths[1]'],
  'ds-sync groupSize above the trainers': [job((j) => { j.spec.sync = { algorithm: 'ds-sync', dsSync: { groupSize: 4 } }; }), 'spec.sync.dsSync.groupSize'],
  'ds-sync groupSize not dividing the trainers': [job((j) => { j.spec.trainer.replicas = 6; j.spec.sync = { algorithm: 'ds-sync', dsSync: { groupSize: 4 } }; }), 'spec.sync.dsSync.groupSize'],
  'shadow-easgd with 0 syncers': [job((j) => { j.spec.syncer.replicas = 0; }), 'spec.syncer.replicas'],
  'the default algorithm with 0 syncers': [job((j) => { j.spec.syncer = { replicas: 0 }; delete j.spec.sync; }), 'spec.syncer.replicas'],
  'no spec': [job((j) => { delete j.spec; }), 'spec'],
  'template.spec: 42': [job((j) => { j.spec.trainer.template = { spec: 42 }; }), 'spec.trainer.template.spec'],
  'a pod field outside the allow-list': [job((j) => { j.spec.parameterServer.template = { spec: { hostNetwork: true } }; }), 'spec.parameterServer.template.spec.hostNetwork'],
  'a container running as root': [job((j) => { j.spec.syncer.template = { spec: { containers: [{ name: 'main', securityContext: { runAsUser: 0 } }] } }; }), 'spec.syncer.template.spec.containers[0].securityContext.runAsUser'],
  'a pod running as root': [job((j) => { j.spec.trainer.template = { spec: { securityContext: { runAsUser: 0 } } }; }), 'spec.trainer.template.spec.securityContext.runAsUser'],
  'template metadata beyond labels and annotations': [job((j) => { j.spec.trainer.template = { metadata: { name: 'x' } }; }), 'spec.trainer.template.metadata.name'],
  '12 dense features': [job((j) => { j.spec.model.denseFeatures = 12; }), 'spec.model.denseFeatures'],
  '25 tables': [job((j) => { delete j.spec.model.criteoTables; j.spec.model.tables = Array.from({ length: 25 }, (_, i) => ({ name: `C${i + 1}` })); }), 'spec.model.tables'],
  'a duplicate table name': [job((j) => { delete j.spec.model.criteoTables; j.spec.model.tables = Array.from({ length: 26 }, (_, i) => ({ name: i === 3 ? 'C1' : `C${i + 1}` })); }), 'spec.model.tables'],
  'an empty table name': [job((j) => { delete j.spec.model.criteoTables; j.spec.model.tables = Array.from({ length: 26 }, (_, i) => ({ name: i === 0 ? '' : `C${i + 1}` })); }), 'spec.model.tables[0].name'],
  'fewer examples than trainers': [job((j) => { j.spec.data.synthetic.examples = 1; }), 'spec.trainer.replicas'],
  'more stragglers than trainers': [job((j) => { j.spec.trainer.straggler = { count: 3 }; }), 'spec.trainer.straggler.count'],
  'fewer slots than servers': [job((j) => { j.spec.parameterServer.replicas = 4; j.spec.parameterServer.slots = 3; }), 'spec.parameterServer.slots'],
  'minAvailable above the pods': [job((j) => { j.spec.runPolicy.schedulingPolicy = { minAvailable: 6 }; }), 'spec.runPolicy.schedulingPolicy.minAvailable'],
  'a queue that is no DNS name': [job((j) => { j.spec.runPolicy.schedulingPolicy = { queue: 'Team_A' }; }), 'spec.runPolicy.schedulingPolicy.queue'],
  'a storage class that is no DNS name': [job((j) => { j.spec.parameterServer.storage.storageClassName = 'fast..ssd'; }), 'spec.parameterServer.storage.storageClassName'],
  'an export claim that is no DNS name': [job((j) => { j.spec.export = { volumeClaimName: '-models' }; }), 'spec.export.volumeClaimName'],
  'a TLS file outside its Secret': [job((j) => { j.spec.security = { tls: { secretName: 'tls', caFile: '/tmp/ca.crt' } }; }), 'spec.security.tls.caFile'],
  'an empty token file': [job((j) => { j.spec.security = { authToken: { file: '' } }; }), 'spec.security.authToken.file'],
  'a token file outside its Secret': [job((j) => { j.spec.security = { authToken: { secretName: 'token', file: '/token' } }; }), 'spec.security.authToken.file'],
  'a TLS server name that is no DNS name': [job((j) => { j.spec.security = { tls: { serverName: 'a b' } }; }), 'spec.security.tls.serverName'],
  'a name over 40 characters': [job((j) => { j.metadata.name = 'a'.repeat(41); }), 'metadata.name'],
  'a name that is no DNS-1035 label': [job((j) => { j.metadata.name = '9lives'; }), 'metadata.name'],
};

const isPrefix = (prefix, field) =>
  field === prefix || field.startsWith(`${prefix}.`) || field.startsWith(`${prefix}[`);

const cases = {
  compile() {
    assert.deepEqual(compileRules(schema), []);
    // The checker is no rubber stamp: each kind of mistake is caught.
    const bad = {
      type: 'object',
      properties: {
        list: { type: 'array', items: { type: 'string' } },
        n: { type: 'integer' },
      },
      'x-kubernetes-validations': [
        { rule: 'self.n >' },
        { rule: 'self.count > 1' },
        { rule: 'nosuch(self.n)' },
        { rule: 'self.list.all(x, x != "")' },
      ],
    };
    const problems = compileRules(bad).map((p) => p.problem);
    assert.equal(problems.length, 4, JSON.stringify(problems));
    assert.match(problems[0], /does not parse/);
    assert.match(problems[1], /undefined field 'count'/);
    assert.match(problems[2], /undeclared function 'nosuch'/);
    assert.match(problems[3], /without maxItems/);
  },

  invalid() {
    for (const [name, [spec, field]] of Object.entries(invalid)) {
      const server = serverFields(spec);
      assert.ok(server.fields.some((f) => isPrefix(f, field) && f !== ''),
        `${name}: the API server did not refuse ${field}; it said ${JSON.stringify(server.out)}`);
      const local = validateFields(spec);
      assert.ok(local.some((f) => isPrefix(field, f) || isPrefix(f, field)),
        `${name}: shadowsync validate did not name ${field}; it named ${local}`);
      // Both name only related fields: what one refuses the other refuses.
      for (const f of server.fields) {
        assert.ok(local.some((l) => isPrefix(f, l) || isPrefix(l, f)),
          `${name}: the API server refused ${f}, which validate did not name (${local})`);
      }
    }
  },

  valid() {
    const dirs = [path.join(source, 'deploy', 'examples'), path.join(source, 'deploy', 'examples', 'sync')];
    let n = 0;
    for (const dir of dirs) {
      for (const f of fs.readdirSync(dir).filter((x) => x.endsWith('.yaml'))) {
        const j = yaml.load(fs.readFileSync(path.join(dir, f), 'utf8'));
        const out = validateObject(schema, j);
        assert.deepEqual(out.errors, [], `${f}: ${JSON.stringify(out.errors)}`);
        assert.deepEqual(out.unknown, [], `${f}: unknown fields ${out.unknown}`);
        assert.deepEqual(validateFields(j), [], `${f}: shadowsync validate refused it`);
        ++n;
      }
    }
    assert.ok(n >= 10, `only ${n} example jobs`);
    // A template within the allow-list passes and keeps its content.
    const t = job((j) => {
      j.spec.trainer.template = {
        metadata: { labels: { team: 'ads' } },
        spec: {
          nodeSelector: { pool: 'cpu' },
          tolerations: [{ key: 'dedicated', operator: 'Exists' }],
          containers: [{ name: 'main', image: 'shadowsync:dev', resources: { limits: { cpu: '4' } },
                         securityContext: { runAsUser: 1000, readOnlyRootFilesystem: true } }],
        },
      };
    });
    assert.deepEqual(validateObject(schema, t).errors, []);
    assert.deepEqual(validateObject(schema, t).unknown, []);
    assert.deepEqual(validateFields(t), []);
    // Defaults are filled in where the parent exists, as the server does.
    const minimal = { apiVersion: base.apiVersion, kind: base.kind, metadata: { name: 'm' }, spec: { trainer: {} } };
    const out = validateObject(schema, minimal);
    assert.deepEqual(out.errors, []);
    assert.ok(out.defaults.some((d) => d.path.join('.') === 'spec.trainer.replicas' && d.value === 2),
      JSON.stringify(out.defaults));
    assert.ok(!out.defaults.some((d) => d.path[1] === 'syncer'), 'defaulted inside an absent object');
  },

  'all-at-once'() {
    const bad = job((j) => {
      j.spec.data = { format: 'criteo-tsv' };
      j.spec.syncer.replicas = 0;
      j.spec.trainer.template = { spec: { securityContext: { runAsUser: 0 } } };
      j.spec.trainer.threads = 0;
    });
    const want = ['spec.data.paths', 'spec.syncer.replicas',
                  'spec.trainer.template.spec.securityContext.runAsUser', 'spec.trainer.threads'];
    const server = serverFields(bad).fields;
    const local = validateFields(bad);
    for (const f of want) {
      assert.ok(server.includes(f), `the API server missed ${f}: ${server}`);
      assert.ok(local.includes(f), `validate missed ${f}: ${local}`);
    }
    // A value of the wrong type stops the rules, as in kube-apiserver, and the
    // answer says so; validate, which has no such limit, still names them all.
    const typed = job((j) => {
      j.spec.data = { format: 'criteo-tsv' };
      j.spec.trainer.template = { spec: 42 };
    });
    const out = validateObject(schema, typed);
    assert.deepEqual(out.errors.map((e) => e.field), ['spec.trainer.template.spec', '<nil>']);
    assert.match(out.errors[1].message, /some validation rules were not checked/);
    assert.deepEqual(validateFields(typed).sort(), ['spec.data.paths', 'spec.trainer.template.spec']);
  },

  transitions() {
    const old = clone(base);
    assert.deepEqual(validateObject(schema, clone(old), old).errors, [], 'an unchanged update');
    const scaled = job((j) => { j.spec.trainer.replicas = 4; });
    assert.deepEqual(validateObject(schema, scaled, old).errors, [], 'scaling the trainers');
    const changes = {
      'spec.model': (j) => { j.spec.model.embeddingDim = 32; },
      'spec.parameterServer.slots': (j) => { j.spec.parameterServer.slots = 8192; },
      'spec.parameterServer.storage': (j) => { j.spec.parameterServer.storage.size = '2Gi'; },
    };
    for (const [field, change] of Object.entries(changes)) {
      const next = job(change);
      const errors = validateObject(schema, next, old).errors;
      assert.ok(errors.some((e) => e.field === field && /immutable/.test(e.message)),
        `changing ${field}: ${JSON.stringify(errors)}`);
      // The same spec created anew is fine: the rule needs an old object.
      assert.deepEqual(validateObject(schema, next).errors, [], `creating with a changed ${field}`);
    }
    const dropped = job((j) => { delete j.spec.model; });
    assert.ok(validateObject(schema, dropped, old).errors.some((e) => /cannot be added or removed/.test(e.message)));
  },
};

if (!cases[testCase]) {
  console.error(`usage: crd_rules_test.mjs {${Object.keys(cases).join('|')}} --source DIR --bin DIR`);
  process.exit(2);
}
cases[testCase]();
console.log(`crd_rules_test ${testCase}: ok`);

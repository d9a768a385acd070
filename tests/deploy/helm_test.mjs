#!/usr/bin/env node
// Tests of the Helm chart helm/shadowsync and of every manifest under deploy/
// (registered with CTest by tests/deploy/helm.cmake, one case per test):
//
//   node tests/deploy/helm_test.mjs CASE --source <repo> --bin <build>/bin
//
//   lint        helm lint --strict with the defaults and each ci/*-values.yaml
//   render      helm template (defaults, all-on): every object validates
//               (validate_manifests.mjs); all-on has every optional object,
//               defaults none; hardened containers with probes and resources;
//               selectors match; monitoring gated on the API or force
//   notes       NOTES.txt tells what to run next (helm install with the
//               in-memory driver, which renders without a cluster)
//   kubectl     kubectl 1.31 against the fake API server: CRDs (server-side
//               apply), then the rendered chart (--dry-run=server, apply,
//               re-apply unchanged), then an example job and `kubectl get ssj`
//   deploy      every file under deploy/ validates
//   bad-values  wrong values fail helm template with values.schema.json's message
//   crds        crds/ holds exactly deploy/crd.yaml (the generated CRD)
//   flags       every flag the chart passes is one `shadowsync operator` has
//
// helm and kubectl come from <repo>/.tools/bin (scripts/install-kube-tools.sh),
// node modules from <repo>/.tools/node (scripts/install-node-tools.sh).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';

// ---------------------------------------------------------------------------
const args = process.argv.slice(2);
const testCase = args[0];
const opt = (name, def) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : def;
};
const source = path.resolve(opt('--source', path.join(path.dirname(new URL(import.meta.url).pathname), '..', '..')));
const binDir = path.resolve(opt('--bin', path.join(source, 'build', 'release', 'bin')));
const chart = path.join(source, 'helm', 'shadowsync');
const helmBin = path.join(source, '.tools', 'bin', 'helm');
const kubectlBin = path.join(source, '.tools', 'bin', 'kubectl');
const validator = path.join(source, 'tests', 'deploy', 'validate_manifests.mjs');
const nodeTools = process.env.SHADOWSYNC_NODE_TOOLS || path.join(source, '.tools', 'node');
for (const [what, p, how] of [
  ['helm', helmBin, 'scripts/install-kube-tools.sh'],
  ['kubectl', kubectlBin, 'scripts/install-kube-tools.sh'],
  ['node tools', path.join(nodeTools, 'node_modules', 'js-yaml'), 'scripts/install-node-tools.sh'],
]) {
  if (!fs.existsSync(p)) {
    console.error(`helm_test: ${what} not found at ${p}: run ${how}`);
    process.exit(1);
  }
}
const yaml = createRequire(path.join(nodeTools, 'package.json'))('js-yaml');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'shadowsync-helm-test-'));
// Helm keeps caches and config per user; keep the test's own.
const helmEnv = {
  ...process.env,
  HELM_CACHE_HOME: path.join(tmp, 'helm-cache'),
  HELM_CONFIG_HOME: path.join(tmp, 'helm-config'),
  HELM_DATA_HOME: path.join(tmp, 'helm-data'),
};
delete helmEnv.KUBECONFIG;

let checks = 0;
let failures = 0;
let failedChecks = 0;
function check(name, fn) {
  ++checks;
  try {
    fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    ++failures;
    ++failedChecks;
    console.log(`not ok - ${name}\n  ${String(e.message).split('\n').join('\n  ')}`);
  }
}

function run(cmd, argv, { env = helmEnv, input } = {}) {
  const r = spawnSync(cmd, argv, { env, input, encoding: 'utf8', maxBuffer: 64 << 20, timeout: 60000 });
  return { code: r.status, out: `${r.stdout || ''}${r.stderr || ''}`, stdout: r.stdout || '', stderr: r.stderr || '' };
}
const helm = (...a) => run(helmBin, a);

const ciValues = () => fs.readdirSync(path.join(chart, 'ci')).filter((f) => f.endsWith('-values.yaml')).sort()
  .map((f) => path.join(chart, 'ci', f));
const allOn = path.join(chart, 'ci', 'all-on-values.yaml');
const releaseNs = { default: 'shadowsync-system', allOn: 'ml-training' };

function render(values, ns, extra = [], release = 'shadowsync') {
  const r = helm('template', release, chart, '--namespace', ns, ...(values ? ['-f', values] : []), ...extra);
  assert.equal(r.code, 0, `helm template ${values || '(defaults)'} failed:\n${r.out}`);
  return { text: r.stdout, objects: yaml.loadAll(r.stdout).filter((o) => o) };
}
const kinds = (objs) => objs.map((o) => o.kind);
const ofKind = (objs, kind) => objs.filter((o) => o.kind === kind);
const dashboardFiles = () => fs.readdirSync(path.join(chart, 'dashboards')).filter((f) => f.endsWith('.json')).sort();
const subset = (small, big) => Object.entries(small || {}).every(([k, v]) => big && big[k] === v);

function validate(text, label) {
  const r = run(process.execPath, [validator, '--quiet', '-'], { input: text, env: process.env });
  assert.equal(r.code, 0, `validate_manifests.mjs rejected ${label}:\n${r.out}`);
  return r.stdout.trim();
}

// The fake API server (tests/util/fake_kube_apiserver.h) on a free port.
async function startFakeApiServer() {
  const fake = path.join(binDir, 'fake_kube_apiserver');
  if (!fs.existsSync(fake)) throw new Error(`${fake} not found: build the fake_kube_apiserver target`);
  const kubeconfig = path.join(tmp, 'kubeconfig');
  const proc = spawn(fake, ['--port', '0', '--kubeconfig', kubeconfig], { stdio: ['ignore', 'pipe', 'pipe'] });
  let serverErr = '';
  proc.stderr.on('data', (d) => { serverErr += d; });
  try {
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`fake_kube_apiserver did not start: ${serverErr}`)), 15000);
      proc.stdout.once('data', () => { clearTimeout(timer); resolve(); });
      proc.once('exit', (code) => reject(new Error(`fake_kube_apiserver exited ${code}: ${serverErr}`)));
    });
  } catch (e) {
    proc.kill('SIGTERM');
    throw e;
  }
  return { proc, kubeconfig };
}

// ---------------------------------------------------------------------------
const cases = {
  lint() {
    for (const values of [null, ...ciValues()]) {
      check(`helm lint --strict ${values ? path.relative(source, values) : '(defaults)'}`, () => {
        const r = helm('lint', '--strict', chart, ...(values ? ['-f', values] : []));
        assert.equal(r.code, 0, r.out);
        assert.match(r.out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
        assert.doesNotMatch(r.out, /\[(WARNING|ERROR)\]/, r.out);
      });
    }
    check('docs/helm.md documents every value of values.yaml', () => {
      const values = yaml.load(fs.readFileSync(path.join(chart, 'values.yaml'), 'utf8'));
      const docs = fs.readFileSync(path.join(source, 'docs', 'helm.md'), 'utf8');
      const leaves = [];
      // Maps of free-form content (resources, podSecurityContext) are one value.
      const opaque = new Set(['resources', 'podSecurityContext']);
      (function walk(o, prefix) {
        for (const [k, v] of Object.entries(o)) {
          const key = prefix ? `${prefix}.${k}` : k;
          if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length && !opaque.has(k)) walk(v, key);
          else leaves.push(key);
        }
      })(values, '');
      const missing = leaves.filter((k) => !docs.includes(`\`${k}\``));
      assert.deepEqual(missing, [], `values missing from docs/helm.md's table: ${missing.join(' ')}`);
    });
    check('ci/ has the default and the all-on scenario', () => {
      assert.deepEqual(ciValues().map((f) => path.basename(f)), ['all-on-values.yaml', 'default-values.yaml']);
    });
  },

  render() {
    const def = render(null, releaseNs.default);
    const all = render(allOn, releaseNs.allOn);
    const optionalKinds = ['ServiceMonitor', 'PodMonitor', 'PrometheusRule', 'PodDisruptionBudget', 'ConfigMap'];

    check('every object of the default render validates', () => console.log(`  ${validate(def.text, 'the default render')}`));
    check('every object of the all-on render validates', () => console.log(`  ${validate(all.text, 'the all-on render')}`));

    check('the default render is the operator, its RBAC and its security, nothing optional', () => {
      assert.deepEqual(kinds(def.objects).sort(), ['ClusterRole', 'ClusterRole', 'ClusterRole', 'ClusterRoleBinding',
        'Deployment', 'Role', 'RoleBinding', 'Secret', 'Secret', 'Service', 'ServiceAccount']);
      for (const k of optionalKinds) assert.equal(ofKind(def.objects, k).length, 0, k);
      const args = ofKind(def.objects, 'Deployment')[0].spec.template.spec.containers[0].args;
      assert.ok(args.includes('--all-namespaces'), args.join(' '));
    });

    check('security is on by default: a generated CA, certificate and credentials key', () => {
      const pod = ofKind(def.objects, 'Deployment')[0].spec.template.spec;
      const args = pod.containers[0].args;
      for (const flag of ['--tls-ca-file=/etc/shadowsync/tls/ca.crt', '--tls-cert-file=/etc/shadowsync/tls/tls.crt',
        '--tls-key-file=/etc/shadowsync/tls/tls.key', '--tls-server-name=shadowsync',
        '--credentials-key-file=/etc/shadowsync/credentials-key/key']) {
        assert.ok(args.includes(flag), `${flag} in ${args.join(' ')}`);
      }
      const secrets = Object.fromEntries(ofKind(def.objects, 'Secret').map((o) => [o.metadata.name, o]));
      const vols = Object.fromEntries(pod.volumes.map((v) => [v.name, v]));
      assert.equal(vols.tls.secret.secretName, 'shadowsync-tls');
      assert.equal(vols['credentials-key'].secret.secretName, 'shadowsync-credentials-key');
      const key = Buffer.from(secrets['shadowsync-credentials-key'].data.key, 'base64').toString();
      assert.match(key, /^[A-Za-z0-9]{64}$/);
      // The generated certificate: for `shadowsync`, server and client use, from the generated CA.
      const tls = secrets['shadowsync-tls'];
      assert.equal(tls.type, 'kubernetes.io/tls');
      const dir = fs.mkdtempSync(path.join(tmp, 'tls-'));
      for (const k of ['ca.crt', 'tls.crt', 'tls.key']) fs.writeFileSync(path.join(dir, k), Buffer.from(tls.data[k], 'base64'));
      for (const purpose of ['sslserver', 'sslclient']) {
        const r = run('openssl', ['verify', '-purpose', purpose, '-CAfile', path.join(dir, 'ca.crt'), path.join(dir, 'tls.crt')]);
        assert.equal(r.code, 0, r.out);
      }
      const text = run('openssl', ['x509', '-noout', '-ext', 'subjectAltName', '-in', path.join(dir, 'tls.crt')]);
      assert.match(text.out, /DNS:shadowsync/);
      // Each render makes new ones (an install keeps them through lookup).
      const again = render(null, releaseNs.default);
      const againKey = ofKind(again.objects, 'Secret').find((o) => o.metadata.name === 'shadowsync-credentials-key');
      assert.notEqual(againKey.data.key, secrets['shadowsync-credentials-key'].data.key);
    });

    check('serving.enabled: serve as a Deployment and a Service over the exports claim', () => {
      const on = render(null, releaseNs.default, ['--set', 'serving.enabled=true',
        '--set', 'serving.exportsClaim=ctr-exports', '--set', 'serving.modelPath=team/exports']);
      console.log(`  ${validate(on.text, 'the serving render')}`);
      const dep = ofKind(on.objects, 'Deployment').find((d) => d.metadata.name === 'shadowsync-serve');
      assert.ok(dep, 'a Deployment shadowsync-serve');
      const pod = dep.spec.template.spec;
      const c = pod.containers[0];
      assert.equal(c.args[0], 'serve');
      for (const flag of ['--model=/models/team/exports', '--name=ctr', '--listen=0.0.0.0:8000',
        '--grpc-listen=0.0.0.0:8001', '--metrics-listen=0.0.0.0:8002',
        '--tls-ca-file=/etc/shadowsync/tls/ca.crt']) {
        assert.ok(c.args.includes(flag), `${flag} in ${c.args.join(' ')}`);
      }
      const vols = Object.fromEntries(pod.volumes.map((v) => [v.name, v]));
      assert.deepEqual(vols.exports.persistentVolumeClaim, { claimName: 'ctr-exports', readOnly: true });
      const mounts = Object.fromEntries(c.volumeMounts.map((m) => [m.name, m]));
      assert.deepEqual(mounts.exports, { name: 'exports', mountPath: '/models', readOnly: true });
      assert.equal(c.securityContext.readOnlyRootFilesystem, true);
      // The probes go to the plain-HTTP metrics port: with TLS the http port
      // asks for a client certificate the kubelet does not have.
      for (const probe of [c.startupProbe, c.readinessProbe]) {
        assert.deepEqual(probe.httpGet, { path: '/readyz', port: 'metrics' });
      }
      assert.equal(c.livenessProbe.httpGet.path, '/healthz');
      assert.equal(pod.automountServiceAccountToken, false, 'serve talks to no API server');
      // The Service reaches the serve pods and only them.
      const svc = ofKind(on.objects, 'Service').find((o) => o.metadata.name === 'shadowsync-serve');
      assert.deepEqual(svc.spec.ports.map((p) => [p.name, p.port]), [['http', 8000], ['grpc', 8001], ['metrics', 8002]]);
      assert.ok(subset(svc.spec.selector, dep.spec.template.metadata.labels));
      const operator = ofKind(on.objects, 'Deployment').find((d) => d.metadata.name === 'shadowsync-operator');
      assert.ok(!subset(svc.spec.selector, operator.spec.template.metadata.labels), 'the Service selects the operator too');
      assert.ok(!subset(dep.spec.selector.matchLabels, operator.spec.template.metadata.labels));
      // Off by default.
      assert.equal(ofKind(def.objects, 'Deployment').length, 1);
      const missing = helm('template', 'shadowsync', chart, '--set', 'serving.enabled=true');
      assert.notEqual(missing.code, 0);
      assert.match(missing.out, /serving.enabled needs serving.exportsClaim/);
    });

    check('security off renders no Secret and no security flag', () => {
      const off = render(null, releaseNs.default, ['--set', 'tls.enabled=false', '--set', 'credentials.enabled=false']);
      assert.equal(ofKind(off.objects, 'Secret').length, 0);
      assert.doesNotMatch(off.text, /--tls-|--auth-token-file|--credentials-key-file|\/etc\/shadowsync/);
    });

    check('the all-on render has every optional object', () => {
      for (const k of ['ServiceMonitor', 'PodMonitor', 'PrometheusRule', 'PodDisruptionBudget']) {
        assert.equal(ofKind(all.objects, k).length, 1, `one ${k}`);
      }
      const cms = ofKind(all.objects, 'ConfigMap');
      assert.ok(dashboardFiles().length > 0, 'the chart ships dashboards/*.json');
      assert.equal(cms.length, dashboardFiles().length, 'one ConfigMap per dashboard');
      for (const cm of cms) {
        assert.equal(cm.metadata.labels.grafana_dashboard, '1', cm.metadata.name);
        assert.equal(cm.metadata.annotations['k8s-sidecar-target-directory'], 'ShadowSync', cm.metadata.name);
      }
      const shipped = Object.fromEntries(cms.flatMap((cm) => Object.entries(cm.data)));
      assert.deepEqual(Object.keys(shipped).sort(), dashboardFiles());
      for (const f of dashboardFiles()) {
        assert.deepEqual(JSON.parse(shipped[f]), JSON.parse(fs.readFileSync(path.join(chart, 'dashboards', f), 'utf8')), f);
      }
    });

    check('the PrometheusRule holds rules/shadowsync-alerts.yaml', () => {
      const file = yaml.load(fs.readFileSync(path.join(chart, 'rules', 'shadowsync-alerts.yaml'), 'utf8'));
      assert.ok(Array.isArray(file.groups) && file.groups.length > 0);
      assert.deepEqual(ofKind(all.objects, 'PrometheusRule')[0].spec.groups, file.groups);
    });

    check('monitor labels and intervals come from values', () => {
      const values = yaml.load(fs.readFileSync(allOn, 'utf8'));
      const sm = ofKind(all.objects, 'ServiceMonitor')[0];
      const pm = ofKind(all.objects, 'PodMonitor')[0];
      const pr = ofKind(all.objects, 'PrometheusRule')[0];
      assert.ok(subset(values.serviceMonitor.labels, sm.metadata.labels));
      assert.ok(subset(values.podMonitor.labels, pm.metadata.labels));
      assert.ok(subset(values.prometheusRule.labels, pr.metadata.labels));
      assert.equal(sm.spec.endpoints[0].interval, values.serviceMonitor.interval);
      assert.equal(pm.spec.podMetricsEndpoints[0].interval, values.podMonitor.interval);
      assert.deepEqual(pm.spec.namespaceSelector, { matchNames: [releaseNs.allOn] }, 'namespaced mode scrapes only its namespace');
    });

    check('TLS and the token are mounted read-only and passed as flags', () => {
      const pod = ofKind(all.objects, 'Deployment')[0].spec.template.spec;
      const c = pod.containers[0];
      for (const flag of ['--tls-ca-file=/etc/shadowsync/tls/ca.crt', '--tls-cert-file=/etc/shadowsync/tls/tls.crt',
        '--tls-key-file=/etc/shadowsync/tls/tls.key', '--auth-token-file=/etc/shadowsync/auth/token']) {
        assert.ok(c.args.includes(flag), `${flag} in ${c.args.join(' ')}`);
      }
      const mounts = Object.fromEntries(c.volumeMounts.map((m) => [m.name, m]));
      assert.deepEqual(mounts.tls, { name: 'tls', mountPath: '/etc/shadowsync/tls', readOnly: true });
      assert.deepEqual(mounts['auth-token'], { name: 'auth-token', mountPath: '/etc/shadowsync/auth', readOnly: true });
      const vols = Object.fromEntries(pod.volumes.map((v) => [v.name, v]));
      assert.equal(vols.tls.secret.secretName, 'shadowsync-tls');
      assert.deepEqual(vols.tls.secret.items.map((i) => i.key), ['ca.crt', 'tls.crt', 'tls.key']);
      assert.equal(vols['auth-token'].secret.secretName, 'shadowsync-auth-token');
      assert.deepEqual(vols['auth-token'].secret.items.map((i) => i.key), ['token']);
    });

    check('watchScope namespace: a namespaced Role, no ClusterRole for the operator', () => {
      const args = ofKind(all.objects, 'Deployment')[0].spec.template.spec.containers[0].args;
      assert.ok(args.includes(`--namespace=${releaseNs.allOn}`), args.join(' '));
      assert.ok(!args.includes('--all-namespaces'));
      assert.equal(ofKind(all.objects, 'ClusterRoleBinding').length, 0);
      const clusterRoles = ofKind(all.objects, 'ClusterRole');
      // Only the aggregated roles for people remain, and they grant nothing on pods.
      for (const cr of clusterRoles) {
        assert.match(cr.metadata.name, /-job-(editor|viewer)$/);
        for (const rule of cr.rules) assert.deepEqual(rule.apiGroups, ['shadowsync.io']);
      }
      const roles = ofKind(all.objects, 'Role').map((r) => r.metadata.name).sort();
      assert.deepEqual(roles, ['shadowsync-operator', 'shadowsync-operator-leader-election']);
      const defRole = ofKind(def.objects, 'ClusterRole').find((r) => r.metadata.name === 'shadowsync-operator');
      const nsRole = ofKind(all.objects, 'Role').find((r) => r.metadata.name === 'shadowsync-operator');
      assert.deepEqual(nsRole.rules, defRole.rules, 'the same rules in both scopes');
    });

    check('watchNamespaces: the operator\'s Role and RoleBinding in each, and --namespace lists them', () => {
      const listed = render(null, 'rel', ['--set', 'operator.watchScope=namespace',
        '--set', 'operator.watchNamespaces={team-a,team-b}', '--set', 'podMonitor.enabled=true', '--set', 'podMonitor.force=true']);
      const args = ofKind(listed.objects, 'Deployment')[0].spec.template.spec.containers[0].args;
      assert.ok(args.includes('--namespace=team-a,team-b'), args.join(' '));
      const where = (kind) => ofKind(listed.objects, kind).filter((o) => o.metadata.name === 'shadowsync-operator')
        .map((o) => o.metadata.namespace).sort();
      assert.deepEqual(where('Role'), ['team-a', 'team-b']);
      assert.deepEqual(where('RoleBinding'), ['team-a', 'team-b']);
      for (const rb of ofKind(listed.objects, 'RoleBinding')) {
        assert.equal(rb.subjects[0].namespace, 'rel', 'the operator\'s ServiceAccount lives in the release namespace');
      }
      assert.equal(ofKind(listed.objects, 'ClusterRoleBinding').length, 0);
      assert.deepEqual(ofKind(listed.objects, 'PodMonitor')[0].spec.namespaceSelector, { matchNames: ['team-a', 'team-b'] });
      // The leader-election Role stays in the release namespace.
      const lease = ofKind(listed.objects, 'Role').find((r) => /leader-election$/.test(r.metadata.name));
      assert.equal(lease.metadata.namespace, 'rel');
    });

    check('RBAC is least privilege: no wildcards, secrets only created, pods read-only', () => {
      for (const r of [...def.objects, ...all.objects].filter((o) => /Role$/.test(o.kind))) {
        for (const rule of r.rules) {
          for (const field of ['apiGroups', 'resources', 'verbs']) {
            assert.ok(!rule[field].includes('*'), `${r.kind}/${r.metadata.name}: ${field} has *`);
          }
          if (rule.resources.includes('secrets')) {
            assert.deepEqual(rule.verbs, ['create'], `${r.kind}/${r.metadata.name} may do more than create Secrets`);
          }
          if (rule.resources.includes('pods')) assert.deepEqual(rule.verbs, ['get', 'list', 'watch']);
        }
      }
    });

    check('the chart renders deploy/rbac.yaml\'s operator rules', () => {
      const deploy = yaml.loadAll(fs.readFileSync(path.join(source, 'deploy', 'rbac.yaml'), 'utf8')).filter((o) => o);
      const want = deploy.find((o) => o.kind === 'ClusterRole' && o.metadata.name === 'shadowsync-operator');
      const got = ofKind(def.objects, 'ClusterRole').find((r) => r.metadata.name === 'shadowsync-operator');
      assert.deepEqual(got.rules, want.rules);
      const wantLease = deploy.find((o) => o.kind === 'Role' && o.metadata.name === 'shadowsync-operator-leader-election');
      const gotLease = ofKind(def.objects, 'Role').find((r) => r.metadata.name === 'shadowsync-operator-leader-election');
      assert.ok(gotLease, 'the default render has the leader-election Role');
      assert.deepEqual(gotLease.rules, wantLease.rules, 'the leader-election Role');
    });

    check('the default Deployment is deploy/operator.yaml\'s (probes, resources, security, ports, args)', () => {
      const deploy = yaml.loadAll(fs.readFileSync(path.join(source, 'deploy', 'operator.yaml'), 'utf8')).filter((o) => o);
      const want = deploy.find((o) => o.kind === 'Deployment').spec.template.spec;
      const got = ofKind(def.objects, 'Deployment')[0].spec.template.spec;
      for (const k of ['securityContext', 'livenessProbe', 'readinessProbe', 'resources', 'ports', 'env', 'volumeMounts']) {
        assert.deepEqual(got.containers[0][k], want.containers[0][k], `containers[0].${k}`);
      }
      assert.deepEqual(got.securityContext, want.securityContext, 'pod securityContext');
      assert.deepEqual(got.volumes, want.volumes, 'volumes (the Secrets of make-secrets.sh)');
      for (const a of want.containers[0].args) assert.ok(got.containers[0].args.includes(a), `arg ${a}`);
      assert.equal(got.containers[0].image, want.containers[0].image);
    });

    check('every Deployment container is hardened and has probes and resources', () => {
      for (const [label, objs] of [['default', def.objects], ['all-on', all.objects]]) {
        for (const d of ofKind(objs, 'Deployment')) {
          const pod = d.spec.template.spec;
          assert.equal(pod.securityContext.runAsNonRoot, true, `${label}: pod runAsNonRoot`);
          assert.equal(pod.securityContext.seccompProfile.type, 'RuntimeDefault', `${label}: seccomp`);
          for (const c of [...(pod.initContainers || []), ...pod.containers]) {
            const where = `${label} ${d.metadata.name}/${c.name}`;
            const sc = c.securityContext || {};
            assert.equal(sc.runAsNonRoot, true, `${where}: runAsNonRoot`);
            assert.equal(sc.readOnlyRootFilesystem, true, `${where}: readOnlyRootFilesystem`);
            assert.equal(sc.allowPrivilegeEscalation, false, `${where}: allowPrivilegeEscalation`);
            assert.deepEqual(sc.capabilities && sc.capabilities.drop, ['ALL'], `${where}: capabilities.drop`);
            assert.ok(c.livenessProbe && c.livenessProbe.httpGet, `${where}: livenessProbe`);
            assert.ok(c.readinessProbe && c.readinessProbe.httpGet, `${where}: readinessProbe`);
            assert.ok(c.resources && c.resources.requests && c.resources.requests.cpu && c.resources.requests.memory,
              `${where}: resources.requests`);
            assert.ok(c.resources.limits && c.resources.limits.memory, `${where}: resources.limits.memory`);
            const ports = (c.ports || []).map((p) => p.name);
            for (const probe of [c.livenessProbe, c.readinessProbe]) {
              assert.ok(ports.includes(probe.httpGet.port), `${where}: probe port ${probe.httpGet.port} is a container port`);
            }
          }
        }
      }
    });

    check('selectors select what they should', () => {
      for (const objs of [def.objects, all.objects]) {
        const d = ofKind(objs, 'Deployment')[0];
        const podLabels = d.spec.template.metadata.labels;
        assert.ok(subset(d.spec.selector.matchLabels, podLabels), 'Deployment selector ⊆ pod labels');
        assert.equal(d.spec.selector.matchLabels['app.kubernetes.io/component'], 'operator',
          'the operator selector cannot match job pods (they carry component trainer/ps/syncer)');
        for (const svc of ofKind(objs, 'Service')) assert.ok(subset(svc.spec.selector, podLabels), 'Service selector');
        for (const pdb of ofKind(objs, 'PodDisruptionBudget')) assert.ok(subset(pdb.spec.selector.matchLabels, podLabels));
        for (const sm of ofKind(objs, 'ServiceMonitor')) {
          const svc = ofKind(objs, 'Service')[0];
          assert.ok(subset(sm.spec.selector.matchLabels, svc.metadata.labels), 'ServiceMonitor selects the metrics Service');
          assert.ok(svc.spec.ports.some((p) => p.name === sm.spec.endpoints[0].port), 'ServiceMonitor port name');
        }
        for (const pm of ofKind(objs, 'PodMonitor')) {
          // The labels operator/reconcile.cc puts on every job pod.
          assert.deepEqual(pm.spec.selector.matchLabels, { 'app.kubernetes.io/name': 'shadowsync' });
          assert.deepEqual(pm.spec.selector.matchExpressions, [{ key: 'shadowsync.io/job-name', operator: 'Exists' }]);
          assert.equal(pm.spec.podMetricsEndpoints[0].port, 'metrics');
          assert.ok(!('shadowsync.io/job-name' in podLabels), 'the PodMonitor does not scrape the operator twice');
        }
      }
    });

    check('every namespaced object is in the release namespace', () => {
      for (const [ns, objs] of [[releaseNs.default, def.objects], [releaseNs.allOn, all.objects]]) {
        for (const o of objs) {
          if (['ClusterRole', 'ClusterRoleBinding', 'Namespace'].includes(o.kind)) {
            assert.equal(o.metadata.namespace, undefined, `${o.kind}/${o.metadata.name}`);
          } else {
            assert.equal(o.metadata.namespace, ns, `${o.kind}/${o.metadata.name}`);
          }
        }
      }
    });

    check('enabled monitors are rendered only when the API is served or forced', () => {
      const on = ['--set', 'serviceMonitor.enabled=true', '--set', 'podMonitor.enabled=true', '--set', 'prometheusRule.enabled=true'];
      const without = render(null, 'x', on);
      for (const k of ['ServiceMonitor', 'PodMonitor', 'PrometheusRule']) assert.equal(ofKind(without.objects, k).length, 0, k);
      const served = render(null, 'x', [...on, '--api-versions', 'monitoring.coreos.com/v1']);
      for (const k of ['ServiceMonitor', 'PodMonitor', 'PrometheusRule']) assert.equal(ofKind(served.objects, k).length, 1, k);
      const forcedOne = render(null, 'x', [...on, '--set', 'podMonitor.force=true']);
      assert.deepEqual(kinds(forcedOne.objects).filter((k) => /Monitor|Rule$/.test(k)), ['PodMonitor']);
    });

    check('one replica has no PodDisruptionBudget, two have one', () => {
      assert.equal(ofKind(render(null, 'x', ['--set', 'operator.replicas=2']).objects, 'PodDisruptionBudget').length, 1);
      assert.equal(ofKind(render(allOn, 'x', ['--set', 'operator.replicas=1']).objects, 'PodDisruptionBudget').length, 0);
    });

    check('image: tag defaults to appVersion, a digest wins', () => {
      const appVersion = yaml.load(fs.readFileSync(path.join(chart, 'Chart.yaml'), 'utf8')).appVersion;
      const image = (objs) => ofKind(objs, 'Deployment')[0].spec.template.spec.containers[0].image;
      assert.equal(image(def.objects), `shadowsync:${appVersion}`);
      const digest = `sha256:${'a'.repeat(64)}`;
      assert.equal(image(render(null, 'x', ['--set', `image.digest=${digest}`]).objects), `shadowsync@${digest}`);
    });

    check("the chart declares the repository's license, which LICENSE holds", () => {
      const meta = yaml.load(fs.readFileSync(path.join(chart, 'Chart.yaml'), 'utf8'));
      assert.equal(meta.annotations['artifacthub.io/license'], 'Apache-2.0');
      const license = fs.readFileSync(path.join(chart, '..', '..', 'LICENSE'), 'utf8');
      assert.match(license, /^\s*Apache License\s+Version 2\.0, January 2004/);
    });

    check('the job pods get the pull policy and the pull secrets the values name', () => {
      const opArgs = (objs) => ofKind(objs, 'Deployment')[0].spec.template.spec.containers[0].args;
      assert.ok(opArgs(def.objects).includes('--image-pull-policy=IfNotPresent'), opArgs(def.objects).join(' '));
      assert.ok(!opArgs(def.objects).some((a) => a.startsWith('--image-pull-secrets')));
      const set = render(null, 'x', ['--set', 'operator.jobImagePullPolicy=Always',
        '--set', 'operator.jobImagePullSecrets={reg-a,reg-b}']);
      assert.ok(opArgs(set.objects).includes('--image-pull-policy=Always'), opArgs(set.objects).join(' '));
      assert.ok(opArgs(set.objects).includes('--image-pull-secrets=reg-a,reg-b'), opArgs(set.objects).join(' '));
    });

    check('rbac.create=false and serviceAccount.create=false render no RBAC and no ServiceAccount', () => {
      const r = render(null, 'x', ['--set', 'rbac.create=false', '--set', 'serviceAccount.create=false', '--set', 'serviceAccount.name=mine']);
      assert.deepEqual(kinds(r.objects).sort(), ['Deployment', 'Secret', 'Secret', 'Service']);
      assert.equal(ofKind(r.objects, 'Deployment')[0].spec.template.spec.serviceAccountName, 'mine');
    });
  },

  async notes() {
    // With the in-memory storage driver `helm install` creates nothing (helm
    // swaps in a printing kube client) but asks the server's version and
    // renders NOTES.txt, which helm template does not. The fake answers
    // /version; real installs against it fail (helm stores releases as
    // protobuf Secrets, the fake speaks JSON only).
    const { proc, kubeconfig } = await startFakeApiServer();
    const empty = path.join(tmp, 'empty-releases.yaml');
    fs.writeFileSync(empty, '');
    const env = { ...helmEnv, HELM_DRIVER: 'memory', HELM_MEMORY_DRIVER_DATA: empty, KUBECONFIG: kubeconfig };
    try {
    for (const [values, ns, expect, extra = []] of [
      [null, 'shadowsync-system', [/kubectl apply -f deploy\/examples\/quickstart.yaml/, /kubectl get ssj/,
        /svc\/shadowsync-operator-metrics 9100/, /dashboards.enabled=true/, /kubectl apply --server-side -f <chart>\/crds\//]],
      [allOn, 'ml-training', [/kubectl -n ml-training apply -f deploy\/examples\/quickstart.yaml/, /kubectl -n ml-training get ssj/,
        /ServiceMonitor shadowsync-operator/, /PodMonitor shadowsync-jobs/, /PrometheusRule shadowsync/,
        /grafana_dashboard="1"/]],
      // Enabled, but the fake serves no monitoring.coreos.com/v1: skipped, and said so.
      [null, 'x', [/ServiceMonitor, PodMonitor or PrometheusRule was enabled but NOT created/], ['--set', 'serviceMonitor.enabled=true']],
    ]) {
      check(`NOTES.txt (${values ? path.basename(values) : 'defaults'} ${extra.join(' ')})`, () => {
        const r = run(helmBin, ['install', 'shadowsync', chart, '--namespace', ns, ...(values ? ['-f', values] : []), ...extra], { env });
        assert.equal(r.code, 0, r.out);
        for (const re of expect) assert.match(r.stdout, re);
        assert.doesNotMatch(r.stdout, /<no value>|%!/, 'a value is missing in NOTES.txt');
      });
    }
    } finally {
      proc.kill('SIGTERM');
    }
  },

  async kubectl() {
    const { proc, kubeconfig } = await startFakeApiServer();
    try {
      const env = { ...process.env, KUBECONFIG: kubeconfig };
      const kubectl = (...a) => run(kubectlBin, ['--cache-dir', path.join(tmp, 'kube-cache'), '--request-timeout=30s', ...a], { env });

      check('kubectl apply --server-side -f crds/ (the documented CRD upgrade path), twice', () => {
        for (let i = 0; i < 2; ++i) {
          const r = kubectl('apply', '--server-side', '-f', path.join(chart, 'crds'));
          assert.equal(r.code, 0, r.out);
          assert.match(r.out, /customresourcedefinition.apiextensions.k8s.io\/shadowsyncjobs.shadowsync.io serverside-applied/);
        }
      });

      // The fake serves no monitoring.coreos.com: stand-in CRDs (no schema;
      // validate_manifests.mjs checks these objects' schemas) let kubectl map
      // and store them. policy/v1 cannot be faked with a CRD (a CRD group
      // needs a dot), so the PodDisruptionBudget is left out here; the render
      // case validates it.
      const stubs = path.join(tmp, 'monitoring-crds.yaml');
      fs.writeFileSync(stubs, ['ServiceMonitor', 'PodMonitor', 'PrometheusRule'].map((kind) => {
        const plural = `${kind.toLowerCase()}s`;
        return yaml.dump({
          apiVersion: 'apiextensions.k8s.io/v1',
          kind: 'CustomResourceDefinition',
          metadata: { name: `${plural}.monitoring.coreos.com` },
          spec: {
            group: 'monitoring.coreos.com', scope: 'Namespaced',
            names: { kind, listKind: `${kind}List`, plural, singular: kind.toLowerCase() },
            versions: [{ name: 'v1', served: true, storage: true,
              schema: { openAPIV3Schema: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } } }],
          },
        });
      }).join('---\n'));
      check('stand-in Prometheus Operator CRDs apply', () => {
        const r = kubectl('apply', '-f', stubs);
        assert.equal(r.code, 0, r.out);
      });

      // Two releases side by side (their cluster-scoped objects must not clash).
      for (const [label, values, ns, release, expectedCount] of [
        ['defaults', null, releaseNs.default, 'shadowsync', 11], ['all-on', allOn, releaseNs.allOn, 'shadowsync-ml', 17]]) {
        const rendered = render(values, ns, [], release);
        const objs = rendered.objects.filter((o) => o.kind !== 'PodDisruptionBudget');
        const file = path.join(tmp, `${label}.yaml`);
        fs.writeFileSync(file, objs.map((o) => yaml.dump(o, { lineWidth: -1 })).join('---\n'));
        const names = objs.map((o) => `${o.kind}/${o.metadata.name}`);

        check(`${label}: namespace ${ns}`, () => {
          const r = kubectl('create', 'namespace', ns);
          assert.equal(r.code, 0, r.out);
        });
        check(`${label}: kubectl apply --dry-run=server accepts all ${objs.length} objects and stores none`, () => {
          assert.equal(objs.length, expectedCount, names.join(' '));
          const r = kubectl('apply', '--dry-run=server', '-f', file);
          assert.equal(r.code, 0, r.out);
          assert.equal((r.out.match(/ created \(server dry run\)/g) || []).length, objs.length, r.out);
          const get = kubectl('get', 'deployments,serviceaccounts,clusterroles', '-n', ns, '-o', 'name');
          assert.equal(get.code, 0, get.out);
          assert.doesNotMatch(get.out, new RegExp(release), get.out);
        });
        check(`${label}: kubectl apply creates every object`, () => {
          const r = kubectl('apply', '-f', file);
          assert.equal(r.code, 0, r.out);
          assert.equal((r.out.match(/ created$/gm) || []).length, objs.length, r.out);
          const d = kubectl('get', 'deployment', `${release}-operator`, '-n', ns, '-o', 'json');
          assert.equal(d.code, 0, d.out);
          assert.equal(JSON.parse(d.out).spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem, true);
        });
        check(`${label}: re-applying changes nothing`, () => {
          const r = kubectl('apply', '-f', file);
          assert.equal(r.code, 0, r.out);
          const lines = r.out.trim().split('\n');
          assert.equal(lines.length, objs.length, r.out);
          for (const line of lines) assert.match(line, / unchanged$/);
        });
      }

      check('an example job applies into the namespaced release and kubectl get ssj lists it', () => {
        const r = kubectl('apply', '-n', releaseNs.allOn, '-f', path.join(source, 'deploy', 'examples', 'quickstart.yaml'));
        assert.equal(r.code, 0, r.out);
        assert.match(r.out, /shadowsyncjob.shadowsync.io\/quickstart created/);
        const get = kubectl('get', 'ssj', '-n', releaseNs.allOn);
        assert.equal(get.code, 0, get.out);
        assert.match(get.out, /^NAME\s+PHASE/m);
        assert.match(get.out, /^quickstart\s/m);
      });
      check('the all-on monitors are stored as rendered', () => {
        const r = kubectl('get', 'prometheusrule', 'shadowsync-ml', '-n', releaseNs.allOn, '-o', 'json');
        assert.equal(r.code, 0, r.out);
        const file = yaml.load(fs.readFileSync(path.join(chart, 'rules', 'shadowsync-alerts.yaml'), 'utf8'));
        assert.deepEqual(JSON.parse(r.out).spec.groups, file.groups);
      });
    } finally {
      proc.kill('SIGTERM');
    }
  },

  deploy() {
    const deployDir = path.join(source, 'deploy');
    const files = [];
    const walk = (d) => fs.readdirSync(d, { withFileTypes: true }).forEach((e) => {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p); else if (/\.ya?ml$/.test(e.name)) files.push(p);
    });
    walk(deployDir);
    check(`deploy/ has the CRD, RBAC, operator and example jobs (${files.length} files)`, () => {
      for (const f of ['crd.yaml', 'rbac.yaml', 'operator.yaml', path.join('examples', 'quickstart.yaml')]) {
        assert.ok(files.includes(path.join(deployDir, f)), f);
      }
    });
    // Plain Prometheus files (a scrape config, a rule file) are not
    // Kubernetes objects: promtool checks those (tests/deploy/monitoring.cmake).
    const prometheusKeys = ['scrape_configs', 'groups', 'rule_files', 'global'];
    const isPrometheusFile = (f) => {
      const docs = yaml.loadAll(fs.readFileSync(f, 'utf8')).filter((d) => d);
      return docs.length > 0 && docs.every((d) => !('kind' in d) && !('apiVersion' in d)
        && Object.keys(d).some((k) => prometheusKeys.includes(k)));
    };
    const skipped = files.filter(isPrometheusFile);
    const manifests = files.filter((f) => !skipped.includes(f));
    if (skipped.length) console.log(`  not Kubernetes objects (Prometheus files): ${skipped.map((f) => path.relative(source, f)).join(' ')}`);
    check('every object in deploy/ validates (built-in kinds, monitoring kinds, ShadowSyncJobs against the CRD)', () => {
      const r = run(process.execPath, [validator, '--quiet', ...manifests], { env: process.env });
      assert.equal(r.code, 0, r.out);
      console.log(`  ${r.stdout.trim()}`);
      assert.doesNotMatch(r.stdout, /no objects/);
    });
    check('the validator catches a wrong deploy/ object (it can fail)', () => {
      const bad = fs.readFileSync(path.join(deployDir, 'operator.yaml'), 'utf8')
        .replace('readOnlyRootFilesystem: true', 'readOnlyRootFileSystem: true');
      const r = run(process.execPath, [validator, '--quiet', '-'], { input: bad, env: process.env });
      assert.equal(r.code, 1, r.out);
      assert.match(r.out, /<stdin>: document 2 \(Deployment\/shadowsync-operator\): spec\.template\.spec\.containers\[0\]\.securityContext\.readOnlyRootFileSystem: unknown field/);
      const job = fs.readFileSync(path.join(deployDir, 'examples', 'quickstart.yaml'), 'utf8').replace('replicas: 2', 'replicas: two');
      const j = run(process.execPath, [validator, '--quiet', '-'], { input: job, env: process.env });
      assert.equal(j.code, 1, j.out);
      assert.match(j.out, /\(ShadowSyncJob\/quickstart\): spec\.trainer\.replicas: must be integer/);
      const other = [
        'apiVersion: example.com/v1\nkind: Frobnicator\nmetadata: {name: f}\n',
        'apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: p}\nspec:\n  selector: {}\n'
          + '  podMetricsEndpoints: [{port: metrics, intervall: 15s}]\n',
        'apiVersion: v1\nkind: Service\nmetadata: {name: Not_A_Name}\nspec: {ports: [{port: 80}]}\n',
      ].join('---\n');
      const o = run(process.execPath, [validator, '--quiet', '-'], { input: other, env: process.env });
      assert.equal(o.code, 1, o.out);
      assert.match(o.out, /document 1 \(Frobnicator\/f\): \(root\): unknown kind Frobnicator in example\.com\/v1/);
      assert.match(o.out, /document 2 \(PodMonitor\/p\): spec\.podMetricsEndpoints\[0\]\.intervall: unknown field/);
      assert.match(o.out, /document 3 \(Service\/Not_A_Name\): metadata\.name: "Not_A_Name" must be a DNS-1123 label/);
    });
  },

  'bad-values'() {
    const badFile = path.join(tmp, 'bad-values.yaml');
    fs.writeFileSync(badFile, 'operator:\n  replicas: "two"\n');
    for (const [label, extra, want] of [
      ['operator.replicas: "two" (values file)', ['-f', badFile], /operator\.replicas: Invalid type\. Expected: integer, given: string/],
      ['--set operator.replicas=two', ['--set', 'operator.replicas=two'], /operator\.replicas: Invalid type\. Expected: integer, given: string/],
      ['a misspelt key', ['--set', 'operator.replica=2'], /operator: Additional property replica is not allowed/],
      ['a namespace that is no DNS label', ['--set', 'operator.watchNamespaces={Team_A}'], /operator\.watchNamespaces\.0: Does not match pattern/],
      ['an unknown watchScope', ['--set', 'operator.watchScope=everywhere'], /operator\.watchScope: operator\.watchScope must be one of the following: "cluster", "namespace"/],
      ['a server name that is no DNS name', ['--set', 'tls.serverName=Not_A_Name'], /tls\.serverName: Does not match pattern/],
      ['credentials.enabled: "yes"', ['--set-string', 'credentials.enabled=yes'], /credentials\.enabled: Invalid type\. Expected: boolean, given: string/],
      ['a bad pullPolicy', ['--set', 'image.pullPolicy=Sometimes'], /image\.pullPolicy: image\.pullPolicy must be one of the following/],
      ['a port out of range', ['--set', 'metrics.port=70000'], /metrics\.port: Must be less than or equal to 65535/],
      ['a numeric scrape interval', ['--set', 'serviceMonitor.interval=30'], /serviceMonitor\.interval: Invalid type\. Expected: string, given: integer/],
    ]) {
      check(`helm template refuses ${label}`, () => {
        const r = helm('template', 'shadowsync', chart, ...extra);
        assert.notEqual(r.code, 0, r.out);
        assert.match(r.out, /values don't meet the specifications of the schema/, r.out);
        assert.match(r.out, want, r.out);
      });
    }
    check('helm template refuses two replicas without leader election (a template check)', () => {
      const r = helm('template', 'shadowsync', chart, '--set', 'operator.replicas=2', '--set', 'operator.leaderElection.enabled=false');
      assert.notEqual(r.code, 0, r.out);
      assert.match(r.out, /operator.replicas > 1 needs operator.leaderElection.enabled/);
    });
    check('helm template refuses serviceMonitor without the metrics Service (a template check)', () => {
      const r = helm('template', 'shadowsync', chart, '--set', 'serviceMonitor.enabled=true', '--set', 'serviceMonitor.force=true',
        '--set', 'metrics.service.enabled=false');
      assert.notEqual(r.code, 0, r.out);
      assert.match(r.out, /serviceMonitor.enabled needs metrics.service.enabled/);
    });
  },

  crds() {
    check('crds/ holds exactly deploy/crd.yaml (copy it after regenerating the CRD)', () => {
      const files = fs.readdirSync(path.join(chart, 'crds')).sort();
      assert.deepEqual(files, ['shadowsyncjobs.shadowsync.io.yaml']);
      const chartCrd = fs.readFileSync(path.join(chart, 'crds', files[0]), 'utf8');
      const deployCrd = fs.readFileSync(path.join(source, 'deploy', 'crd.yaml'), 'utf8');
      assert.ok(chartCrd === deployCrd,
        'helm/shadowsync/crds/shadowsyncjobs.shadowsync.io.yaml differs from deploy/crd.yaml: '
        + 'cp deploy/crd.yaml helm/shadowsync/crds/shadowsyncjobs.shadowsync.io.yaml');
    });
  },

  flags() {
    const bin = path.join(binDir, 'shadowsync');
    if (!fs.existsSync(bin)) throw new Error(`${bin} not found: build the shadowsync target`);
    const help = run(bin, ['operator', '--help'], { env: process.env });
    assert.equal(help.code, 0, help.out);
    const known = new Set(help.out.match(/--[a-z0-9-]+/g));
    for (const [label, values] of [['defaults', null], ['all-on', allOn]]) {
      check(`every flag the chart passes (${label}) is a flag of shadowsync operator`, () => {
        const c = ofKind(render(values, 'x').objects, 'Deployment')[0].spec.template.spec.containers[0];
        assert.equal(c.args[0], 'operator');
        const unknown = c.args.slice(1).map((a) => a.split('=')[0]).filter((f) => !known.has(f));
        assert.deepEqual(unknown, [], `not in \`shadowsync operator --help\`: ${unknown.join(' ')}`);
      });
    }
    const serveHelp = run(bin, ['serve', '--help'], { env: process.env });
    assert.equal(serveHelp.code, 0, serveHelp.out);
    const serveFlags = new Set(serveHelp.out.match(/--[a-z0-9-]+/g));
    check('every flag the chart passes to serve is a flag of shadowsync serve', () => {
      const on = render(allOn, 'x', ['--set', 'serving.enabled=true', '--set', 'serving.exportsClaim=m',
        '--set', 'authToken.secretName=t']);
      const c = ofKind(on.objects, 'Deployment').find((d) => d.metadata.name.endsWith('-serve'))
        .spec.template.spec.containers[0];
      assert.equal(c.args[0], 'serve');
      const unknown = c.args.slice(1).map((a) => a.split('=')[0]).filter((f) => !serveFlags.has(f));
      assert.deepEqual(unknown, [], `not in \`shadowsync serve --help\`: ${unknown.join(' ')}`);
    });
  },
};

// ---------------------------------------------------------------------------
if (!cases[testCase]) {
  console.error(`usage: helm_test.mjs {${Object.keys(cases).join('|')}} [--source DIR] [--bin DIR]`);
  process.exit(2);
}
try {
  await cases[testCase]();
} catch (e) {
  ++failures;
  console.log(`not ok - ${testCase}: ${e.message}`);
} finally {
  fs.rmSync(tmp, { recursive: true, force: true });
}
console.log(`${checks - failedChecks} passed, ${failures} failed`);
process.exit(failures ? 1 : 0);

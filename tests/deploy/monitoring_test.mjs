#!/usr/bin/env node
// The monitoring against a real Prometheus (Debian's `prometheus` package,
// scripts/install-deps.sh):
//  - static: every dashboard in helm/shadowsync/dashboards is importable
//    (stable unique uid, "id": null, a datasource template variable used by
//    every panel and target, no hard-coded datasource, schemaVersion >= 36)
//    and `promtool check rules` accepts helm/shadowsync/rules;
//  - live (the default): runs a small local job (`shadowsync run`: trainers,
//    parameter servers, a syncer) and `shadowsync operator` against the fake
//    API server with a ShadowSyncJob to reconcile, lets Prometheus scrape
//    every process each second (with the rule file loaded), then evaluates
//    every PromQL expression of every dashboard panel and template variable
//    (each must return data) and every alert and recording rule (each must
//    evaluate without error) through Prometheus's HTTP API, and runs
//    `promtool check metrics` on each process's /metrics, and on a trainer
//    pod's whose share is done.
//
//   node tests/deploy/monitoring_test.mjs --bin-dir build/release/bin [--static] [--keep]
//
// Exit status 0 when everything passed; failures are printed one per line,
// naming the dashboard, panel and expression.
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import {
  dashboardsDir, evaluateDashboards, loadDashboards as loadDashboardFiles, panelsOf, podTargets, relabel, repo,
  sleep, waitFor,
} from './monitoring_lib.mjs';

const rulesFile = path.join(repo, 'helm', 'shadowsync', 'rules', 'shadowsync-alerts.yaml');

let binDir = path.join(repo, 'build', 'release', 'bin');
let staticOnly = false;
let keep = false;
for (let i = 2; i < process.argv.length; ++i) {
  const a = process.argv[i];
  if (a === '--bin-dir' && i + 1 < process.argv.length) binDir = path.resolve(process.argv[++i]);
  else if (a === '--static') staticOnly = true;
  else if (a === '--keep') keep = true;
  else {
    console.error(`monitoring_test: unknown argument ${a}\n` +
                  'usage: monitoring_test.mjs [--bin-dir DIR] [--static] [--keep]');
    process.exit(2);
  }
}

const failures = [];
const fail = (msg) => { failures.push(msg); console.error(`FAIL: ${msg}`); };
const log = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
const t0 = Date.now();

function which(tool) {
  for (const dir of (process.env.PATH || '').split(':')) {
    const p = path.join(dir, tool);
    try { fs.accessSync(p, fs.constants.X_OK); return p; } catch { /* next */ }
  }
  return null;
}

// --------------------------------------------------------------------------
// Static checks of the dashboards and the rule file.

function loadDashboards() {
  const out = loadDashboardFiles(fail);
  if (out.length < 4) fail(`${dashboardsDir}: ${out.length} dashboards, want at least 4`);
  return out;
}

function checkDashboards(dashboards) {
  const uids = new Set();
  for (const { file, json: d } of dashboards) {
    const where = `${file}`;
    if (typeof d.uid !== 'string' || !/^[a-zA-Z0-9_-]{1,40}$/.test(d.uid)) fail(`${where}: uid "${d.uid}" is not a stable Grafana uid`);
    if (uids.has(d.uid)) fail(`${where}: uid "${d.uid}" used twice`);
    uids.add(d.uid);
    if (d.id !== null) fail(`${where}: "id" must be null for import, is ${JSON.stringify(d.id)}`);
    if (!(d.schemaVersion >= 36)) fail(`${where}: schemaVersion ${d.schemaVersion}, want >= 36`);
    if (!d.title) fail(`${where}: no title`);
    const vars = (d.templating && d.templating.list) || [];
    const ds = vars.find((v) => v.type === 'datasource');
    if (!ds || ds.query !== 'prometheus') fail(`${where}: no Prometheus datasource template variable`);
    const dsRef = ds ? `\${${ds.name}}` : '${datasource}';
    for (const v of vars.filter((v) => v.type === 'query')) {
      if (!v.datasource || v.datasource.uid !== dsRef) fail(`${where}: variable ${v.name}: datasource is not ${dsRef}`);
    }
    const ids = new Set();
    for (const p of panelsOf(d)) {
      const pw = `${where}: panel "${p.title}"`;
      if (ids.has(p.id)) fail(`${pw}: id ${p.id} used twice`);
      ids.add(p.id);
      if (!p.gridPos) fail(`${pw}: no gridPos`);
      if (p.type === 'row') continue;
      if (!p.datasource || p.datasource.uid !== dsRef) fail(`${pw}: datasource is not ${dsRef}`);
      if (!Array.isArray(p.targets) || p.targets.length === 0) fail(`${pw}: no targets`);
      for (const t of p.targets || []) {
        if (!t.expr) fail(`${pw}: target ${t.refId} has no expr`);
        if (!t.datasource || t.datasource.uid !== dsRef) fail(`${pw}: target ${t.refId}: datasource is not ${dsRef}`);
        if (/rate\([^)]*\[\d+[smh]\]\)/.test(t.expr || '') && !/increase\(/.test(t.expr)) {
          fail(`${pw}: target ${t.refId}: a rate over a fixed range; use $__rate_interval: ${t.expr}`);
        }
      }
    }
  }
}

function checkRulesWithPromtool(promtool) {
  const r = spawnSync(promtool, ['check', 'rules', rulesFile], { encoding: 'utf8' });
  if (r.status !== 0) fail(`promtool check rules ${rulesFile}: ${r.stdout}${r.stderr}`);
  else log(`promtool check rules: ${r.stdout.trim().split('\n').pop().trim()}`);
}

function yamlLib() {
  const toolsDir = process.env.SHADOWSYNC_NODE_TOOLS || path.join(repo, '.tools', 'node');
  const require = createRequire(path.join(toolsDir, 'package.json'));
  try { return require('js-yaml'); } catch {
    fail(`js-yaml not found in ${toolsDir}: run scripts/install-node-tools.sh`);
    return null;
  }
}

function loadRules() {
  const yaml = yamlLib();
  if (!yaml) return [];
  const doc = yaml.load(fs.readFileSync(rulesFile, 'utf8'));
  const rules = [];
  for (const g of doc.groups || []) {
    for (const r of g.rules || []) rules.push({ group: g.name, name: r.alert || r.record, alert: !!r.alert, rule: r });
  }
  const alerts = new Set(rules.filter((r) => r.alert).map((r) => r.name));
  for (const r of rules.filter((r) => r.alert)) {
    const w = `${path.basename(rulesFile)}: alert ${r.name}`;
    if (!r.rule.for) fail(`${w}: no "for:"`);
    if (!r.rule.labels || !['critical', 'warning', 'info'].includes(r.rule.labels.severity)) fail(`${w}: no severity label`);
    if (!r.rule.annotations || !r.rule.annotations.summary || !r.rule.annotations.description) fail(`${w}: needs summary and description annotations`);
  }
  for (const want of ['ShadowSyncTrainerStalled', 'ShadowSyncThroughputCollapsed', 'ShadowSyncParameterServerErrors',
    'ShadowSyncReshardingStuck', 'ShadowSyncSyncerRoundLatencyHigh']) {
    if (!alerts.has(want)) fail(`${path.basename(rulesFile)}: no alert ${want}`);
  }
  return rules;
}

// --------------------------------------------------------------------------
// deploy/monitoring against the pods the operator really renders.

// The pod a StatefulSet or Deployment template makes, as service discovery sees it.
const templatePod = (namespace, name, template) => ({ metadata: { ...template.metadata, namespace, name }, spec: template.spec });

function matchesSelector(labels, selector) {
  for (const [k, v] of Object.entries(selector.matchLabels || {})) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions || []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    if (e.operator === 'Exists' && !has) return false;
    if (e.operator === 'DoesNotExist' && has) return false;
    if (e.operator === 'In' && !(has && e.values.includes(labels[e.key]))) return false;
    if (e.operator === 'NotIn' && has && e.values.includes(labels[e.key])) return false;
  }
  return true;
}

// `statefulSets`: the operator's children of job `jobName` in namespace default.
function checkMonitoringManifests(yaml, statefulSets, jobName, promtool, dir) {
  const monitoring = path.join(repo, 'deploy', 'monitoring');
  const scrapeFile = path.join(monitoring, 'prometheus-scrape-config.yaml');
  const scrape = yaml.load(fs.readFileSync(scrapeFile, 'utf8'));
  // Debian's Prometheus is built without Kubernetes service discovery, so
  // promtool checks the file with the discovery swapped for a static target.
  const checkable = JSON.parse(JSON.stringify(scrape));
  for (const j of checkable.scrape_configs) { delete j.kubernetes_sd_configs; j.static_configs = [{ targets: ['127.0.0.1:1'] }]; }
  fs.writeFileSync(`${dir}/scrape-check.yml`, yaml.dump(checkable));
  const pc = spawnSync(promtool, ['check', 'config', `${dir}/scrape-check.yml`], { encoding: 'utf8' });
  if (pc.status !== 0) fail(`promtool check config (${scrapeFile}, discovery replaced): ${pc.stdout}${pc.stderr}`);
  const jobs = Object.fromEntries(scrape.scrape_configs.map((j) => [j.job_name, j]));
  const deploy = yaml.loadAll(fs.readFileSync(path.join(repo, 'deploy', 'operator.yaml'), 'utf8')).filter((o) => o);
  const operatorDeployment = deploy.find((o) => o.kind === 'Deployment');
  const operatorService = deploy.find((o) => o.kind === 'Service' && o.metadata.name === 'shadowsync-operator-metrics');
  const operatorTargets = podTargets(templatePod(operatorDeployment.metadata.namespace, 'shadowsync-operator-abc', operatorDeployment.spec.template));
  const roles = new Set();
  if (statefulSets.length < 3) fail(`the operator rendered ${statefulSets.length} StatefulSets for job ${jobName}, want 3`);
  for (const sts of statefulSets) {
    const pod = `${sts.metadata.name}-0`;
    const kept = podTargets(templatePod('default', pod, sts.spec.template)).map((t) => relabel(t, jobs['shadowsync-jobs'].relabel_configs)).filter((t) => t);
    if (kept.length !== 1) { fail(`${scrapeFile}: job shadowsync-jobs keeps ${kept.length} targets of pod ${pod}, want its one metrics port`); continue; }
    const t = kept[0];
    if (t.shadowsync_job !== jobName || t.namespace !== 'default' || t.pod !== pod || !t.role) fail(`${scrapeFile}: pod ${pod} gets labels ${JSON.stringify(Object.fromEntries(Object.entries(t).filter(([k]) => !k.startsWith('__'))))}, want namespace, pod, shadowsync_job and role`);
    roles.add(t.role);
    if (podTargets(templatePod('default', pod, sts.spec.template)).some((x) => relabel(x, jobs['shadowsync-operator'].relabel_configs))) fail(`${scrapeFile}: job shadowsync-operator scrapes job pod ${pod}`);
  }
  if (roles.size !== 3) fail(`${scrapeFile}: roles ${[...roles]} of the job pods, want trainer, ps and syncer`);
  const op = operatorTargets.map((t) => relabel(t, jobs['shadowsync-operator'].relabel_configs)).filter((t) => t);
  if (op.length !== 1 || op[0].namespace !== 'shadowsync-system' || !op[0].pod) fail(`${scrapeFile}: job shadowsync-operator keeps ${JSON.stringify(op)} of the operator pod`);
  if (operatorTargets.some((t) => relabel(t, jobs['shadowsync-jobs'].relabel_configs))) fail(`${scrapeFile}: job shadowsync-jobs scrapes the operator`);

  // The Prometheus Operator's monitors select the same pods and ports.
  const podMonitor = yaml.load(fs.readFileSync(path.join(monitoring, 'podmonitor.yaml'), 'utf8'));
  for (const sts of statefulSets) {
    const tpl = sts.spec.template;
    if (!matchesSelector(tpl.metadata.labels, podMonitor.spec.selector)) fail(`podmonitor.yaml: does not select ${sts.metadata.name}'s pods`);
    const ports = tpl.spec.containers.flatMap((c) => (c.ports || []).map((p) => p.name));
    for (const e of podMonitor.spec.podMetricsEndpoints) if (!ports.includes(e.port)) fail(`podmonitor.yaml: ${sts.metadata.name}'s pods have no port ${e.port}`);
  }
  if (matchesSelector(operatorDeployment.spec.template.metadata.labels, podMonitor.spec.selector)) fail('podmonitor.yaml: selects the operator pod');
  const serviceMonitor = yaml.load(fs.readFileSync(path.join(monitoring, 'servicemonitor.yaml'), 'utf8'));
  if (!matchesSelector(operatorService.metadata.labels, serviceMonitor.spec.selector)) fail('servicemonitor.yaml: does not select Service shadowsync-operator-metrics');
  if (!(serviceMonitor.spec.namespaceSelector.matchNames || []).includes(operatorService.metadata.namespace)) fail('servicemonitor.yaml: not in the operator Service\'s namespace');
  for (const e of serviceMonitor.spec.endpoints) {
    if (!operatorService.spec.ports.some((p) => p.name === e.port)) fail(`servicemonitor.yaml: Service shadowsync-operator-metrics has no port ${e.port}`);
  }
  log(`deploy/monitoring: scrape config, PodMonitor and ServiceMonitor select ${statefulSets.length} job StatefulSets' pods and the operator`);
}

// --------------------------------------------------------------------------
// The live part.

const children = [];
function start(name, cmd, args, logFile) {
  const out = fs.openSync(logFile, 'w');
  const child = spawn(cmd, args, { stdio: ['ignore', out, out], detached: true });
  child.on('error', (e) => fail(`${name}: cannot start ${cmd}: ${e.message}`));
  children.push({ name, child, logFile });
  return child;
}

function stopAll() {
  for (const { child } of children.reverse()) {
    if (child.exitCode === null && child.signalCode === null) {
      try { process.kill(-child.pid, 'SIGTERM'); } catch { /* gone */ }
    }
  }
}

// Runs cmd with `input` on stdin; resolves to its exit code and output.
function runWithInput(cmd, args, input) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { out += d; });
    child.on('error', (e) => resolve({ code: -1, out: e.message }));
    child.on('close', (code) => resolve({ code, out }));
    child.stdin.end(input);
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// A GET over a connection of its own. The processes' metrics servers
// (civetweb under prometheus-cpp) close the connection after each response
// without a "Connection: close", and fetch() then now and then reuses the
// closed socket and fails with UND_ERR_SOCKET "other side closed" (6 of 200
// back-to-back GETs on an idle machine; once in this test under load).
function getText(url) {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, timeout: 5000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => { body += chunk; });
      res.on('end', () => (res.statusCode === 200 ? resolve(body)
        : reject(new Error(`GET ${url}: HTTP ${res.statusCode}`))));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url}: no answer in 5 s`)));
    req.on('error', reject);
  });
}

async function postJson(url, body) {
  const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(5000) });
  if (!r.ok) throw new Error(`POST ${url}: HTTP ${r.status}: ${await r.text()}`);
  return r.json();
}

const tail = (file) => { try { return fs.readFileSync(file, 'utf8').split('\n').slice(-15).join('\n'); } catch { return ''; } };

// A local job named `name` with `servers` parameter servers, synchronised by `algorithm`.
const localJob = (name, algorithm, servers) => `apiVersion: shadowsync.io/v1alpha1
kind: ShadowSyncJob
metadata: {name: ${name}}
spec:
  model: {bottomMlp: [32], topMlp: [32], criteoTables: {hashBuckets: 5000}}
  data: {format: synthetic, synthetic: {examples: 400000, evalExamples: 1000, seed: 4}}
  # 20 ms a step: at most 2 x 3200 examples/s, so the job outlasts the test.
  trainer: {replicas: 2, threads: 1, batchSize: 64, learningRate: 0.02, straggler: {count: 2, delayMs: 20}}
  parameterServer: {replicas: ${servers}, cacheBytes: 16Mi}
  syncer: {replicas: 1}
  sync: {algorithm: ${algorithm}}
`;
const kJob = localJob('mon', 'shadow-easgd', 2);
// One small job per algorithm with metrics of its own, so that the
// synchronization dashboard's algorithm panels have data too.
const kAlgorithmJobs = [['mon-ssp', 'ssp'], ['mon-psplus', 'ps-plus'], ['mon-ds', 'ds-sync'],
  ['mon-switch', 'sync-switch']];

// The job the operator reconciles (no kubelet runs its pods: the operator
// creates its children and writes its status, which is what its metrics count).
const kOperatorJob = {
  apiVersion: 'shadowsync.io/v1alpha1', kind: 'ShadowSyncJob',
  metadata: { name: 'mon', namespace: 'default' },
  spec: {
    model: { bottomMlp: [32], topMlp: [32], criteoTables: { hashBuckets: 5000 } },
    data: { format: 'synthetic', synthetic: { examples: 10000, evalExamples: 1000, seed: 4 } },
    trainer: { replicas: 2, threads: 1, batchSize: 64 },
    parameterServer: { replicas: 2, cacheBytes: '16Mi' },
    syncer: { replicas: 1 },
    sync: { algorithm: 'shadow-easgd' },
  },
};

async function live(dashboards, rules, prometheusBin, promtool) {
  const shadowsync = path.join(binDir, 'shadowsync');
  const fakeApi = path.join(binDir, 'fake_kube_apiserver');
  for (const b of [shadowsync, fakeApi]) {
    if (!fs.existsSync(b)) { fail(`${b} is missing: build the shadowsync and fake_kube_apiserver targets`); return; }
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shadowsync-monitoring-'));
  log(`scratch directory ${dir}`);
  try {
    // The operator against the fake API server, with a job to reconcile.
    const api = start('fake_kube_apiserver', fakeApi, ['--port', '0', '--kubeconfig', `${dir}/kubeconfig`], `${dir}/apiserver.log`);
    const url = await waitFor('the fake API server\'s URL', () => {
      const m = /^(https?:\/\/\S+)$/m.exec(fs.readFileSync(`${dir}/apiserver.log`, 'utf8'));
      return m && m[1];
    }, 10000);
    void api;
    const crd = spawnSync(shadowsync, ['crd', '--json'], { encoding: 'utf8' });
    if (crd.status !== 0) throw new Error(`shadowsync crd --json: ${crd.stderr}`);
    await postJson(`${url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions`, JSON.parse(crd.stdout));
    await postJson(`${url}/apis/shadowsync.io/v1alpha1/namespaces/default/shadowsyncjobs`, kOperatorJob);
    const operatorPort = await freePort();
    start('operator', shadowsync, ['operator', '--kubeconfig', `${dir}/kubeconfig`, '--namespace', 'default',
      '--metrics-listen', `127.0.0.1:${operatorPort}`, '--leader-elect=false'], `${dir}/operator.log`);

    // The operator's children of its job, as the monitoring manifests see them.
    const stsUrl = `${url}/apis/apps/v1/namespaces/default/statefulsets`;
    const statefulSets = await waitFor('the operator to create the job\'s StatefulSets', async () => {
      const items = JSON.parse(await getText(stsUrl)).items || [];
      return items.length >= 3 && items;
    }, 20000).catch((e) => { throw new Error(`${e.message}\n${tail(`${dir}/operator.log`)}`); });
    const yaml = yamlLib();
    if (yaml) checkMonitoringManifests(yaml, statefulSets, kOperatorJob.metadata.name, promtool, dir);

    // The local jobs.
    const jobs = [{ name: 'mon', out: 'run', yaml: kJob,
      processes: ['ps-0', 'ps-1', 'syncer-0', 'trainer-0', 'trainer-1'] }];
    for (const [name, algorithm] of kAlgorithmJobs) {
      jobs.push({ name, out: name, yaml: localJob(name, algorithm, 1),
        processes: ['ps-0', 'syncer-0', 'trainer-0', 'trainer-1'] });
    }
    for (const j of jobs) {
      fs.writeFileSync(`${dir}/${j.name}.yaml`, j.yaml);
      start(`shadowsync run ${j.name}`, shadowsync, ['run', `${dir}/${j.name}.yaml`, '--out', `${dir}/${j.out}`,
        '--progress-interval', '5'], `${dir}/${j.out}.log`);
    }
    const targets = await waitFor('every process of the local jobs to be ready', () => {
      const out = [];
      for (const j of jobs) {
        for (const p of j.processes) {
          const f = `${dir}/${j.out}/${p}.ready`;
          if (!fs.existsSync(f)) return null;
          const [, metricsPort] = fs.readFileSync(f, 'utf8').trim().split(/\s+/).map(Number);
          if (!(metricsPort > 0)) return null;
          out.push({ job: j.name, pod: p, role: p.replace(/-\d+$/, ''), port: metricsPort });
        }
      }
      return out;
    }, 90000).catch((e) => { throw new Error(`${e.message}\n${jobs.map((j) => tail(`${dir}/${j.out}.log`)).join('\n')}`); });
    log(`jobs ready: ${targets.map((t) => `${t.job}/${t.pod}:${t.port}`).join(' ')}; operator :${operatorPort}`);

    // Prometheus, scraping each process every second, the labels as the
    // PodMonitor and the scrape config set them in a cluster.
    const promPort = await freePort();
    const staticJob = targets.map((t) => `      - targets: ['127.0.0.1:${t.port}']
        labels: {namespace: local, shadowsync_job: ${t.job}, role: ${t.role}, pod: ${t.pod}}`).join('\n');
    fs.writeFileSync(`${dir}/prometheus.yml`, `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - ${rulesFile}
scrape_configs:
  - job_name: shadowsync-jobs
    static_configs:
${staticJob}
  - job_name: shadowsync-operator
    static_configs:
      - targets: ['127.0.0.1:${operatorPort}']
        labels: {namespace: shadowsync-system, pod: shadowsync-operator-0}
`);
    start('prometheus', prometheusBin, [`--config.file=${dir}/prometheus.yml`, `--storage.tsdb.path=${dir}/tsdb`,
      `--web.listen-address=127.0.0.1:${promPort}`, '--log.level=warn', '--storage.tsdb.retention.time=1h'], `${dir}/prometheus.log`);
    const prom = `http://127.0.0.1:${promPort}`;
    const query = async (expr) => {
      const r = await fetch(`${prom}/api/v1/query`, { method: 'POST', body: new URLSearchParams({ query: expr }), signal: AbortSignal.timeout(10000) });
      return r.json();
    };
    await waitFor('Prometheus to answer', async () => (await fetch(`${prom}/-/ready`)).ok, 30000)
      .catch((e) => { throw new Error(`${e.message}\n${tail(`${dir}/prometheus.log`)}`); });
    const want = targets.length + 1;
    // Every target up and scraped at least 6 times (rates over 20 s need two).
    await waitFor(`${want} targets up with 6 scrapes each`, async () => {
      const r = await query('count_over_time(up[30s]) >= 6 and up == 1');
      return r.status === 'success' && r.data.result.length === want;
    }, 40000).catch(async (e) => {
      const t = await (await fetch(`${prom}/api/v1/targets`)).json();
      const bad = t.data.activeTargets.filter((x) => x.health !== 'up').map((x) => `${x.labels.pod}: ${x.health} ${x.lastError}`);
      throw new Error(`${e.message}; targets not up: ${bad.join('; ') || 'none'}\n${tail(`${dir}/run.log`)}\n${tail(`${dir}/operator.log`)}`);
    });
    log('every target up and scraped');

    // A trainer pod whose share is done serves its final counts until
    // stopped (shadowsync pod, after a container restart).
    const finishedPort = await freePort();
    fs.mkdirSync(`${dir}/finished`);
    fs.writeFileSync(`${dir}/finished/done`, JSON.stringify({ examples: 6000, skipped_examples: 0 }));
    fs.writeFileSync(`${dir}/shard-map.json`, JSON.stringify({ numServers: 1, psAddresses: ['127.0.0.1:1'], syncerAddresses: [] }));
    start('finished trainer pod', shadowsync, ['pod', '--role', 'trainer', '--index', '0', '--config', `${dir}/mon.yaml`,
      '--shard-map', `${dir}/shard-map.json`, '--data-dir', `${dir}/finished`, '--metrics-listen', `127.0.0.1:${finishedPort}`],
    `${dir}/finished.log`);
    await waitFor('the finished trainer pod\'s /metrics', async () => {
      try { return (await getText(`http://127.0.0.1:${finishedPort}/metrics`)).includes('shadowsync_trainer_finished 1'); } catch { return false; }
    }, 20000).catch((e) => { throw new Error(`${e.message}\n${tail(`${dir}/finished.log`)}`); });

    // promtool check metrics on every process's exposition.
    const endpoints = [...targets.map((t) => ({ name: `${t.job}/${t.pod}`, port: t.port })), { name: 'operator', port: operatorPort },
      { name: 'finished trainer pod', port: finishedPort }];
    await Promise.all(endpoints.map(async (e) => {
      let text;
      try {
        text = await getText(`http://127.0.0.1:${e.port}/metrics`);
      } catch (err) {
        // Name the endpoint and the socket error: "fetch failed" alone was
        // seen once, under load, and said nothing more.
        fail(`GET /metrics of ${e.name} (port ${e.port}): ${err.message}` +
          (err.cause ? ` (${err.cause.code || ''} ${err.cause.message || ''})` : ''));
        return;
      }
      const r = await runWithInput(promtool, ['check', 'metrics'], text);
      if (r.code !== 0 || r.out.trim()) fail(`promtool check metrics (${e.name} /metrics): exit ${r.code}: ${r.out}`);
    }));
    log(`promtool check metrics: ${endpoints.length} endpoints checked`);

    // Every dashboard expression returns data.
    const { evaluated } = await evaluateDashboards(prom, dashboards, fail);
    log(`${evaluated} dashboard expressions and variables evaluated`);

    // Every rule evaluates, by query and inside Prometheus.
    for (const r of rules) {
      const res = await query(r.rule.expr);
      if (res.status !== 'success') fail(`${path.basename(rulesFile)}: ${r.alert ? 'alert' : 'record'} ${r.name}: error ${res.errorType}: ${res.error}: ${r.rule.expr}`);
    }
    await waitFor('Prometheus to evaluate every rule', async () => {
      const g = (await (await fetch(`${prom}/api/v1/rules`)).json()).data.groups;
      const all = g.flatMap((x) => x.rules);
      return all.length === rules.length && all.every((x) => x.lastEvaluation && !x.lastEvaluation.startsWith('0001'));
    }, 10000).catch((e) => fail(`rules: ${e.message}`));
    for (const g of (await (await fetch(`${prom}/api/v1/rules`)).json()).data.groups) {
      for (const x of g.rules) {
        if (x.health !== 'ok') fail(`${path.basename(rulesFile)}: rule ${x.name} in Prometheus: health ${x.health}: ${x.lastError}`);
      }
    }
    log(`${rules.length} rules evaluated`);
    // The live job must still have been running: otherwise "data" came from
    // the past. (The launcher exits when the job finishes.)
    for (const j of jobs) {
      const runner = children.find((c) => c.name === `shadowsync run ${j.name}`).child;
      if (runner.exitCode !== null) fail(`the local job ${j.name} finished (exit ${runner.exitCode}) before the queries: make it longer\n${tail(`${dir}/${j.out}.log`)}`);
    }
  } catch (e) {
    fail(e.message);
  } finally {
    stopAll();
    await sleep(300);
    if (keep || failures.length > 0) log(`logs kept in ${dir}`);
    if (!keep && failures.length === 0) fs.rmSync(dir, { recursive: true, force: true });
  }
}

// --------------------------------------------------------------------------

process.on('SIGINT', () => { stopAll(); process.exit(130); });
process.on('SIGTERM', () => { stopAll(); process.exit(143); });

const promtool = which('promtool');
const prometheusBin = which('prometheus');
if (!promtool || (!staticOnly && !prometheusBin)) {
  console.error('monitoring_test: prometheus and promtool are not on PATH: run scripts/install-deps.sh');
  process.exit(1);
}
const dashboards = loadDashboards();
checkDashboards(dashboards);
checkRulesWithPromtool(promtool);
const rules = loadRules();
if (!staticOnly) await live(dashboards, rules, prometheusBin, promtool);
log(failures.length === 0 ? 'PASS' : `${failures.length} failure(s)`);
process.exit(failures.length === 0 ? 0 : 1);

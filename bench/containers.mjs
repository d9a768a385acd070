#!/usr/bin/env node
// ShadowSync in real containers (bench/containers.sh): the image the
// Dockerfile builds, run by podman, with the fake API server standing in for
// Kubernetes and its kubelet running every pod the operator creates as a
// container (tests/operator/fake_kubelet.h: command, args, env, ConfigMap,
// emptyDir and PVC volumes, the security context, ports; a container network
// whose DNS answers the headless Services' pod names).
//
//  1. the image's size, and `podman run --read-only` of the quickstart with
//     writable mounts only at /var/lib/shadowsync and /tmp;
//  2. the operator, itself a container of the image, runs
//     deploy/examples/quickstart.yaml (applied with the real kubectl) to
//     Succeeded;
//  3. a longer job: `podman kill` of a parameter-server container mid-run,
//     then a live scale-out of the parameter servers from 2 to 3, while a
//     real Prometheus scrapes the containers (targets found from the Pod
//     objects through deploy/monitoring/prometheus-scrape-config.yaml's own
//     relabeling) and every Grafana dashboard query is evaluated; the job
//     runs to Succeeded and its embedding keys are checked (bench/chaos_check)
//     against an undisturbed local run of the same job.
//
//   node bench/containers.mjs --bin-dir build/release/bin [--image shadowsync:0.1.0] [--keep]
//
// Last line:
//   RESULT name=containers image_mb=.. phase=Succeeded keys_lost=0 reshard_ok=1
//          dashboard_queries_with_data=N/M readonly_run=1
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { evaluateDashboards, GiveUp, loadDashboards, podTargets, repo, waitFor } from '../tests/deploy/monitoring_lib.mjs';

let binDir = path.join(repo, 'build', 'release', 'bin');
let image = 'shadowsync:0.1.0';
let keep = false;
for (let i = 2; i < process.argv.length; ++i) {
  const a = process.argv[i];
  if (a === '--bin-dir' && i + 1 < process.argv.length) binDir = path.resolve(process.argv[++i]);
  else if (a === '--image' && i + 1 < process.argv.length) image = process.argv[++i];
  else if (a === '--keep') keep = true;
  else {
    console.error(`containers: unknown argument ${a}\nusage: containers.mjs [--bin-dir DIR] [--image IMAGE] [--keep]`);
    process.exit(2);
  }
}

const t0 = Date.now();
const log = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(0)}s] ${msg}`);
const failures = [];
const fail = (msg) => { failures.push(msg); console.error(`FAIL: ${msg}`); };

// The network: a /24 of the bench's own, DNS from podman's dnsname plugin.
const network = 'shadowsync-bench';
const prefix = '10.213.7';
const gateway = `${prefix}.1`;
const operatorIp = `${prefix}.5`;
const operatorName = 'shadowsync-bench-operator';
const env = { ...process.env, CONTAINERS_CONF: process.env.CONTAINERS_CONF || path.join(repo, 'scripts', 'containers.conf') };

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env, maxBuffer: 64 << 20, ...opts });
  if (r.error) throw new Error(`${cmd}: ${r.error.message}`);
  return r;
}
function must(cmd, args, opts = {}) {
  const r = run(cmd, args, opts);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.status}: ${r.stderr}${r.stdout}`.slice(0, 4000));
  return r.stdout;
}
const podman = (...args) => must('podman', args);

const children = [];
function start(name, cmd, args, logFile) {
  const out = fs.openSync(logFile, 'w');
  const child = spawn(cmd, args, { stdio: ['ignore', out, out], detached: true, env });
  child.on('error', (e) => fail(`${name}: cannot start ${cmd}: ${e.message}`));
  children.push({ name, child });
  return child;
}
function stop(child) {
  if (child.exitCode === null && child.signalCode === null) {
    try { process.kill(-child.pid, 'SIGTERM'); } catch { /* gone */ }
  }
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.on('exit', resolve);
  });
}
const tail = (file, n = 20) => { try { return fs.readFileSync(file, 'utf8').split('\n').slice(-n).join('\n'); } catch { return ''; } };

function yaml() {
  const require = createRequire(path.join(repo, '.tools', 'node', 'package.json'));
  return require('js-yaml');
}

// -------------------------------------------------------------------------

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'shadowsync-containers-'));
const kubectlBin = process.env.SHADOWSYNC_KUBECTL || path.join(repo, '.tools', 'bin', 'kubectl');
const kubectl = (...args) => must(kubectlBin, ['--kubeconfig', `${dir}/kubeconfig`, ...args]);
const ssj = (name) => JSON.parse(kubectl('get', 'ssj', name, '-o', 'json'));
const condition = (job, type) => ((job.status && job.status.conditions) || []).find((c) => c.type === type) || {};

const result = { image_mb: -1, phase: 'none', keys_lost: -1, reshard_ok: 0, dashboard_queries_with_data: '0/0', readonly_run: 0 };

// 1. The image: its size, then the quickstart with a read-only root.
async function readOnlyRun() {
  result.image_mb = Math.round(Number(podman('image', 'inspect', image, '--format', '{{.Size}}').trim()) / 1e6);
  log(`image ${image}: ${result.image_mb} MB`);
  const data = `${dir}/readonly-data`;
  fs.mkdirSync(data);
  fs.chownSync(data, 65532, 65532);
  const r = run('podman', ['run', '--rm', '--read-only', '--read-only-tmpfs=false', '--network', 'none',
    '--tmpfs', '/tmp', '-v', `${data}:/var/lib/shadowsync`, '-v', `${repo}/deploy/examples:/jobs:ro`,
    image, 'run', '/jobs/quickstart.yaml']);
  fs.writeFileSync(`${dir}/readonly-run.log`, r.stdout + r.stderr);
  if (r.status !== 0) {
    fail(`podman run --read-only ${image} run /jobs/quickstart.yaml: exit ${r.status}\n${tail(`${dir}/readonly-run.log`)}`);
    return;
  }
  const report = `${data}/runs/quickstart/report.json`;
  if (!fs.existsSync(report)) { fail(`the read-only run wrote no ${report}`); return; }
  const auc = JSON.parse(fs.readFileSync(report, 'utf8')).eval_auc;
  log(`read-only quickstart completed: eval AUC ${auc}`);
  result.readonly_run = 1;
}

// The fake API server with its container kubelet, the operator container, Prometheus.
async function cluster() {
  run('podman', ['rm', '--force', '--time', '1', operatorName]);
  run('podman', ['network', 'rm', '--force', network]);
  podman('network', 'create', '--subnet', `${prefix}.0/24`, '--gateway', gateway, network);
  start('fake_kube_apiserver', path.join(binDir, 'fake_kube_apiserver'), ['--host', '0.0.0.0', '--port', '0',
    '--kubeconfig', `${dir}/kubeconfig.raw`, '--kubelet-engine', 'podman', '--kubelet-network', network,
    '--kubelet-ip-prefix', prefix, '--kubelet-root', `${dir}/nodes`], `${dir}/apiserver.log`);
  const url = await waitFor('the fake API server', () => /^(http:\/\/\S+)$/m.exec(fs.readFileSync(`${dir}/apiserver.log`, 'utf8')), 10000);
  const port = new URL(url[1]).port;
  const raw = fs.readFileSync(`${dir}/kubeconfig.raw`, 'utf8');
  fs.writeFileSync(`${dir}/kubeconfig`, raw.replaceAll(url[1], `http://127.0.0.1:${port}`));
  // The operator's view: the API server through the network's gateway.
  fs.writeFileSync(`${dir}/operator-kubeconfig`, raw.replaceAll(url[1], `http://${gateway}:${port}`));
  fs.chmodSync(`${dir}/operator-kubeconfig`, 0o644);
  kubectl('apply', '-f', path.join(repo, 'deploy', 'crd.yaml'));
  kubectl('create', 'namespace', 'shadowsync-system');

  // The operator as deploy/operator.yaml's pod runs it: same args, user and
  // security context; a kubeconfig instead of the in-cluster service account.
  const deployment = yaml().loadAll(fs.readFileSync(path.join(repo, 'deploy', 'operator.yaml'), 'utf8')).find((o) => o && o.kind === 'Deployment');
  const tpl = deployment.spec.template;
  const c = tpl.spec.containers[0];
  const podName = 'shadowsync-operator-0';
  const args = c.args.filter((a) => !a.startsWith('--lease-namespace') && !a.startsWith('--identity') && !a.startsWith('--image'))
    .map((a) => (a === '--leader-elect=true' ? '--leader-elect=false' : a));
  podman('run', '-d', '--name', operatorName, '--hostname', podName, '--network', network, '--ip', operatorIp,
    '--user', `${tpl.spec.securityContext.runAsUser}:${tpl.spec.securityContext.runAsGroup}`,
    '--read-only', '--read-only-tmpfs=false', '--tmpfs', '/tmp', '--cap-drop', 'all', '--security-opt', 'no-new-privileges',
    '--env', `POD_NAME=${podName}`, '--env', 'POD_NAMESPACE=shadowsync-system',
    '-v', `${dir}/operator-kubeconfig:/etc/shadowsync-operator/kubeconfig:ro`,
    image, ...args, '--kubeconfig', '/etc/shadowsync-operator/kubeconfig', `--image=${image}`);
  // Its Pod object, as the Deployment's ReplicaSet would make it, for discovery.
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: podName, namespace: 'shadowsync-system', labels: tpl.metadata.labels, annotations: tpl.metadata.annotations }, spec: tpl.spec };
  fs.writeFileSync(`${dir}/operator-pod.json`, JSON.stringify(pod));
  kubectl('create', '-f', `${dir}/operator-pod.json`);
  const patched = await fetch(`http://127.0.0.1:${port}/api/v1/namespaces/shadowsync-system/pods/${podName}/status`, {
    method: 'PATCH', headers: { 'Content-Type': 'application/merge-patch+json' },
    body: JSON.stringify({ status: { phase: 'Running', podIP: operatorIp } }),
  });
  if (!patched.ok) throw new Error(`the operator Pod's status: HTTP ${patched.status}: ${await patched.text()}`);
  await waitFor('the operator container to answer /readyz', async () => (await fetch(`http://${operatorIp}:9100/readyz`, { signal: AbortSignal.timeout(2000) })).ok, 60000)
    .catch((e) => { throw new Error(`${e.message}\n${run('podman', ['logs', '--tail', '20', operatorName]).stderr}`); });
  log(`operator container ready at ${operatorIp}; fake API server on port ${port}`);

  // Prometheus with the shipped scrape jobs: their relabeling as written, the
  // Kubernetes discovery (not in Debian's build) replaced by a file that
  // holds the Pod objects' discovery labels, rewritten every 2 s.
  const scrape = yaml().load(fs.readFileSync(path.join(repo, 'deploy', 'monitoring', 'prometheus-scrape-config.yaml'), 'utf8'));
  for (const j of scrape.scrape_configs) {
    delete j.kubernetes_sd_configs;
    j.file_sd_configs = [{ files: [`${dir}/targets.json`], refresh_interval: '2s' }];
    j.scrape_interval = '1s';
    j.scrape_timeout = '1s';
  }
  fs.writeFileSync(`${dir}/targets.json`, '[]');
  fs.writeFileSync(`${dir}/prometheus.yml`, yaml().dump({ global: { scrape_interval: '1s', evaluation_interval: '1s' }, scrape_configs: scrape.scrape_configs }));
  const promPort = 19090;
  start('prometheus', 'prometheus', [`--config.file=${dir}/prometheus.yml`, `--storage.tsdb.path=${dir}/tsdb`,
    `--web.listen-address=127.0.0.1:${promPort}`, '--log.level=warn'], `${dir}/prometheus.log`);
  const updateTargets = async () => {
    const pods = JSON.parse(await (await fetch(`http://127.0.0.1:${port}/api/v1/pods`)).text()).items || [];
    const groups = pods.flatMap(podTargets).filter((t) => t.__address__)
      .map(({ __address__, ...labels }) => ({ targets: [__address__], labels }));
    fs.writeFileSync(`${dir}/targets.json.tmp`, JSON.stringify(groups));
    fs.renameSync(`${dir}/targets.json.tmp`, `${dir}/targets.json`);
  };
  const timer = setInterval(() => updateTargets().catch(() => {}), 2000);
  return { prom: `http://127.0.0.1:${promPort}`, timer };
}

// 2. The quickstart, unchanged, to Succeeded.
async function quickstart() {
  kubectl('apply', '-f', path.join(repo, 'deploy', 'examples', 'quickstart.yaml'));
  log('quickstart applied');
  await waitFor('quickstart to succeed', () => {
    const phase = (ssj('quickstart').status || {}).phase;
    if (phase === 'Failed') throw new GiveUp('quickstart Failed');
    return phase === 'Succeeded';
  }, 900000).catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(ssj('quickstart').status)}`); });
  // The trainers' final counts follow the phase within seconds.
  const want = 200000;
  await waitFor('the final example count', () => ssj('quickstart').status.examplesProcessed === want, 60000)
    .catch(() => fail(`quickstart: status.examplesProcessed ${ssj('quickstart').status.examplesProcessed}, want ${want}`));
  const s = ssj('quickstart').status;
  log(`quickstart Succeeded: ${s.examplesProcessed} examples counted of ${want}`);
  result.phase = 'Succeeded';
  kubectl('delete', 'ssj', 'quickstart', '--wait=false');
}

// The longer job: the quickstart's model and data, 15x the examples, each
// trainer pausing 15 ms a step, so that the kill, the scale-out and two
// minutes of scrapes all land mid-run (at 1.2M, one run of three finished
// before the scrapes, its servers already removed).
const kChaosExamples = 3000000;
function chaosJob(name, straggle) {
  const job = yaml().load(fs.readFileSync(path.join(repo, 'deploy', 'examples', 'quickstart.yaml'), 'utf8'));
  job.metadata = { name, namespace: 'default' };
  job.spec.data.synthetic.examples = kChaosExamples;
  if (straggle) job.spec.trainer.straggler = { count: job.spec.trainer.replicas, delayMs: 15 };
  job.spec.checkpoint = { intervalSeconds: 5 };
  job.spec.runPolicy.backoffLimit = 6;
  return job;
}

// Keys of a stopped job's parameter servers (bench/chaos_check on a directory
// laid out as `shadowsync run` lays out its own).
function checkKeys(runDir) {
  const out = must(path.join(binDir, 'chaos_check'), ['--run-dir', runDir]);
  const m = /RESULT name=chaos_check keys=(\d+) duplicates=(\d+) misplaced=(\d+) key_hash=(\w+)/.exec(out);
  if (!m) throw new Error(`chaos_check: ${out}`);
  return { keys: Number(m[1]), duplicates: Number(m[2]), misplaced: Number(m[3]), hash: m[4] };
}

// 3. Kill a parameter server, scale out, query the dashboards, finish, count keys.
async function chaos(c) {
  // The undisturbed reference, meanwhile, as local processes.
  fs.writeFileSync(`${dir}/reference.json`, JSON.stringify(chaosJob('reference', false)));
  start('reference run', path.join(binDir, 'shadowsync'), ['run', `${dir}/reference.json`, '--out', `${dir}/reference`], `${dir}/reference.log`);

  fs.writeFileSync(`${dir}/chaos.json`, JSON.stringify(chaosJob('chaos', true)));
  kubectl('apply', '-f', `${dir}/chaos.json`);
  await waitFor('job chaos to train', () => ((ssj('chaos').status || {}).examplesProcessed || 0) > 20000, 300000)
    .catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(ssj('chaos').status)}`); });
  log(`chaos training: ${ssj('chaos').status.examplesProcessed} examples`);

  podman('kill', '--signal', 'KILL', 'k8s_default_chaos-ps-1');
  log('podman kill k8s_default_chaos-ps-1');
  const restarted = () => {
    const pod = JSON.parse(kubectl('get', 'pod', 'chaos-ps-1', '-o', 'json'));
    const cs = pod.status.containerStatuses[0];
    return cs.restartCount >= 1 && cs.ready;
  };
  await waitFor('chaos-ps-1 to restart and be ready', restarted, 120000);
  log('chaos-ps-1 restarted and ready');

  kubectl('patch', 'ssj', 'chaos', '--type=merge', '-p', JSON.stringify({ spec: { parameterServer: { replicas: 3 } } }));
  let sawResharding = false;
  await waitFor('the reshard onto 3 parameter servers', () => {
    const j = ssj('chaos');
    sawResharding = sawResharding || condition(j, 'Resharding').status === 'True';
    return ((j.status.shardMap || {}).numServers === 3) && condition(j, 'Resharding').status === 'False';
  }, 300000).catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(ssj('chaos').status)}`); });
  result.reshard_ok = sawResharding ? 1 : 0;
  log(`resharded onto 3 parameter servers (Resharding condition seen: ${sawResharding})`);

  // Every target up with 6 scrapes (20 s rates need two), then the dashboards.
  const query = async (expr) => (await fetch(`${c.prom}/api/v1/query`, { method: 'POST', body: new URLSearchParams({ query: expr }) })).json();
  await waitFor('7 job pods and the operator scraped 6 times each', async () => {
    if (['Succeeded', 'Failed'].includes(ssj('chaos').status.phase)) throw new GiveUp('job chaos finished before its pods were scraped: make it longer');
    const r = await query('count_over_time(up[30s]) >= 6 and up == 1');
    return r.status === 'success' && r.data.result.filter((x) => x.metric.shadowsync_job === 'chaos' || x.metric.job === 'shadowsync-operator').length >= 7;
  }, 120000).catch(async (e) => {
    const t = await (await fetch(`${c.prom}/api/v1/targets`)).json();
    throw new Error(`${e.message}: ${t.data.activeTargets.map((x) => `${x.labels.pod} ${x.health} ${x.lastError}`).join('; ')}`);
  });
  if (((ssj('chaos').status || {}).phase) !== 'Running') fail('job chaos finished before the dashboards were queried: make it longer');
  const { evaluated, withData } = await evaluateDashboards(c.prom, loadDashboards(fail), fail);
  result.dashboard_queries_with_data = `${withData}/${evaluated}`;
  log(`dashboards: ${withData} of ${evaluated} queries returned data`);

  await waitFor('job chaos to succeed', () => {
    const phase = (ssj('chaos').status || {}).phase;
    if (phase === 'Failed') throw new GiveUp('chaos Failed');
    return phase === 'Succeeded';
  }, 1200000).catch((e) => { throw new Error(`${e.message}: ${JSON.stringify(ssj('chaos').status)}`); });
  // Trainers whose push the kill failed restarted from their checkpoints:
  // the status still counts each whole share.
  await waitFor('the final example count', () => ssj('chaos').status.examplesProcessed === kChaosExamples, 60000)
    .catch(() => fail(`status.examplesProcessed ${ssj('chaos').status.examplesProcessed}, want ${kChaosExamples}`));
  log(`chaos Succeeded: ${ssj('chaos').status.examplesProcessed} examples counted of ${kChaosExamples}`);
}

async function main() {
  for (const b of ['fake_kube_apiserver', 'shadowsync', 'chaos_check']) {
    if (!fs.existsSync(path.join(binDir, b))) throw new Error(`${binDir}/${b} is missing: build the release preset`);
  }
  if (run('podman', ['image', 'exists', image]).status !== 0) throw new Error(`no image ${image}: run scripts/build-image.sh`);
  log(`scratch directory ${dir}`);
  await readOnlyRun();
  const c = await cluster();
  try {
    await quickstart();
    await chaos(c);
  } finally {
    clearInterval(c.timer);
    // The kubelet stops every pod when the API server stops; then the stores are closed.
    await stop(children.find((x) => x.name === 'fake_kube_apiserver').child);
    run('podman', ['rm', '--force', '--time', '1', operatorName]);
  }
  const reference = children.find((x) => x.name === 'reference run').child;
  await waitFor('the reference run to finish', () => reference.exitCode !== null, 900000);
  if (reference.exitCode !== 0) throw new Error(`reference run: exit ${reference.exitCode}\n${tail(`${dir}/reference.log`)}`);
  const want = checkKeys(`${dir}/reference`);
  // The containers' volumes, laid out as chaos_check reads a run directory.
  const laid = `${dir}/chaos-check`;
  fs.mkdirSync(laid);
  fs.copyFileSync(`${dir}/nodes/default/chaos-ps-0/volumes/config/job.json`, `${laid}/job.json`);
  for (let i = 0; fs.existsSync(`${dir}/nodes/default/chaos-ps-${i}`); ++i) {
    fs.symlinkSync(`${dir}/nodes/default/chaos-ps-${i}/volumes/data/db`, `${laid}/ps-${i}`);
  }
  const got = checkKeys(laid);
  result.keys_lost = want.keys - got.keys;
  log(`keys: ${got.keys} in the containers (duplicates ${got.duplicates}, misplaced ${got.misplaced}, hash ${got.hash}); ${want.keys} undisturbed (hash ${want.hash})`);
  if (got.hash !== want.hash || got.duplicates !== 0 || got.misplaced !== 0) fail('the key set differs from the undisturbed run\'s');
}

process.on('SIGINT', () => { for (const x of children) stop(x.child); process.exit(130); });
try {
  await main();
} catch (e) {
  fail(e.message);
  log(`apiserver log:\n${tail(`${dir}/apiserver.log`)}`);
} finally {
  for (const x of children) await stop(x.child);
  run('podman', ['rm', '--force', '--time', '1', operatorName]);
  run('podman', ['network', 'rm', '--force', network]);
}
if (keep || failures.length > 0) log(`kept ${dir}`); else fs.rmSync(dir, { recursive: true, force: true });
const ok = failures.length === 0 && result.phase === 'Succeeded' && result.keys_lost === 0 && result.reshard_ok === 1 && result.readonly_run === 1;
console.log(`RESULT name=containers image_mb=${result.image_mb} phase=${result.phase} keys_lost=${result.keys_lost} reshard_ok=${result.reshard_ok} dashboard_queries_with_data=${result.dashboard_queries_with_data} readonly_run=${result.readonly_run} pass=${ok ? 1 : 0}`);
process.exit(ok ? 0 : 1);

// What the monitoring test (tests/deploy/monitoring_test.mjs) and the
// containers benchmark (bench/containers.mjs) share: the dashboards, the
// scrape config's relabeling, and every dashboard query against a live
// Prometheus.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const dashboardsDir = path.join(repo, 'helm', 'shadowsync', 'dashboards');
const rateInterval = '20s';  // $__rate_interval at a 1 s scrape interval.

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Thrown by a waitFor condition that can no longer come true.
export class GiveUp extends Error {}

// Polls fn until it returns something truthy, which it returns. Errors count
// as "not yet" (the last one is reported on timeout), except GiveUp.
export async function waitFor(what, fn, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      if (e instanceof GiveUp) throw e;
      last = `; last error: ${e.message}`;
    }
    await sleep(200);
  }
  throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}${last}`);
}

// Every dashboard of helm/shadowsync/dashboards, parsed; `fail` gets each that is not JSON.
export function loadDashboards(fail) {
  const out = [];
  for (const name of fs.readdirSync(dashboardsDir).filter((n) => n.endsWith('.json')).sort()) {
    try {
      out.push({ file: name, json: JSON.parse(fs.readFileSync(path.join(dashboardsDir, name), 'utf8')) });
    } catch (e) {
      fail(`${name}: not valid JSON: ${e.message}`);
    }
  }
  return out;
}

// Panels including those nested in collapsed rows.
export function panelsOf(d) {
  const all = [];
  for (const p of d.panels || []) {
    all.push(p);
    for (const q of p.panels || []) all.push(q);
  }
  return all;
}

export const sanitize = (name) => name.replace(/[^a-zA-Z0-9_]/g, '_');

// Prometheus relabeling (keep, drop, replace) of one target's labels; null if dropped.
export function relabel(labels, configs) {
  const out = { ...labels };
  for (const c of configs) {
    const value = (c.source_labels || []).map((l) => out[l] ?? '').join(c.separator ?? ';');
    const re = new RegExp(`^(?:${c.regex ?? '(.*)'})$`);
    const m = re.exec(value);
    const action = c.action ?? 'replace';
    if (action === 'keep' && !m) return null;
    if (action === 'drop' && m) return null;
    if (action === 'replace' && m) {
      const v = (c.replacement ?? '$1').replace(/\$(\d+)|\$\{(\d+)\}/g, (_, a, b) => m[Number(a ?? b)] ?? '');
      if (v === '') delete out[c.target_label]; else out[c.target_label] = v;
    }
    if (!['keep', 'drop', 'replace'].includes(action)) throw new Error(`relabel action ${action} not simulated`);
  }
  return out;
}

// Kubernetes pod-role service discovery: one target per container port of a
// pod (metadata, spec and, when running, status), with the __meta labels
// Prometheus gives it.
export function podTargets(pod) {
  const base = {
    __meta_kubernetes_namespace: pod.metadata.namespace,
    __meta_kubernetes_pod_name: pod.metadata.name,
    __meta_kubernetes_pod_phase: (pod.status && pod.status.phase) || 'Running',
  };
  for (const [k, v] of Object.entries(pod.metadata.labels || {})) base[`__meta_kubernetes_pod_label_${sanitize(k)}`] = v;
  const ip = pod.status && pod.status.podIP;
  return pod.spec.containers.flatMap((c) => (c.ports || []).map((p) => ({
    ...base,
    __meta_kubernetes_pod_container_port_name: p.name || '',
    __address__: ip ? `${ip}:${p.containerPort}` : '',
  })));
}

// Evaluates every PromQL expression of every dashboard panel and every
// template variable against Prometheus at `prom`; `fail` gets each that
// errs or returns no data. Returns {evaluated, withData}.
export async function evaluateDashboards(prom, dashboards, fail) {
  const query = async (expr) => {
    const r = await fetch(`${prom}/api/v1/query`, { method: 'POST', body: new URLSearchParams({ query: expr }), signal: AbortSignal.timeout(10000) });
    return r.json();
  };
  const substitute = (expr) => expr
    .replaceAll('$__rate_interval', rateInterval).replaceAll('${__rate_interval}', rateInterval)
    .replaceAll('$__interval', '2s').replaceAll('$__range', '1m')
    .replace(/\$\{?(namespace|job)\}?/g, '.+');
  let evaluated = 0;
  let withData = 0;
  for (const { file, json: d } of dashboards) {
    for (const p of panelsOf(d)) {
      for (const t of p.targets || []) {
        const expr = substitute(t.expr || '');
        ++evaluated;
        if (/\$/.test(expr)) { fail(`${file}: panel "${p.title}" ${t.refId}: unsubstituted variable in ${expr}`); continue; }
        const r = await query(expr);
        if (r.status !== 'success') fail(`${file}: panel "${p.title}" ${t.refId}: error ${r.errorType}: ${r.error}: ${expr}`);
        else if (r.data.result.length === 0) fail(`${file}: panel "${p.title}" ${t.refId}: no data: ${expr}`);
        else ++withData;
      }
    }
    for (const v of ((d.templating && d.templating.list) || []).filter((v) => v.type === 'query')) {
      const q = substitute(typeof v.query === 'string' ? v.query : v.query.query);
      ++evaluated;
      const m = /^label_values\((.*),\s*([a-zA-Z_]\w*)\)$/.exec(q);
      if (!m) { fail(`${file}: variable ${v.name}: not a label_values(metric, label) query: ${q}`); continue; }
      const r = await (await fetch(`${prom}/api/v1/label/${m[2]}/values?${new URLSearchParams({ 'match[]': m[1] })}`)).json();
      if (r.status !== 'success' || r.data.length === 0) fail(`${file}: variable ${v.name}: no values: ${q} (${r.error || 'empty'})`);
      else ++withData;
    }
  }
  return { evaluated, withData };
}

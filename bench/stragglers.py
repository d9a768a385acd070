"""Every sync strategy with and without a straggler (bench/stragglers.sh).

The same job runs under each strategy twice: with every trainer at full
speed, and with the last trainer slowed (`shadowsync worker --straggle-factor
F`: each of its steps lasts F times as long). Reports throughput (examples/s
summed over trainers, each trainer's own rate over its own run), eval NE (mean
over the trainers' replicas), MB sent and received, time per iteration
(seconds per step of the trainers, mean), and the acceptance ratios.

ps-plus against asp is measured apart as well: on loopback a blocking pull
costs next to nothing, so there is little for ps-plus's eager pull to hide,
and with 7 processes on 2 cores the CPU contention swamps what there is. The
pair therefore also runs, with the straggler, against a syncer that holds
every reply --latency-ms (`shadowsync syncer --reply-delay-ms`: a timer, no
CPU), standing for the network time a blocking pull pays between machines;
the runs alternate, --latency-repeats times each, and the median of the
per-pair ratios counts. Two delays by default: 15 ms (this job's 1.9 MB push
and 1.9 MB pull take about that at 2 Gb/s) and 5 ms. At 5 ms the four
trainers still keep both cores busy while asp waits, so there is no idle CPU
for ps-plus's overlap to use: the ratio shows where this machine's CPU, not
the network, sets the pace.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

# (label, algorithm, extra sync settings)
STRATEGIES = [
    ("none", "none", {}),
    ("shadow_easgd", "shadow-easgd", {}),
    ("shadow_ma", "shadow-ma", {}),
    ("shadow_bmuf", "shadow-bmuf", {}),
    ("fg_easgd_k10", "fg-easgd", {"interval": 10}),
    ("fg_ma_k10", "fg-ma", {"interval": 10}),
    ("fg_bmuf_k10", "fg-bmuf", {"interval": 10}),
    ("bsp", "bsp", {}),
    ("asp", "asp", {}),
    ("ssp_s4", "ssp", {"ssp": {"staleness": 4}}),
    ("ds_sync", "ds-sync", {"interval": 1, "dsSync": {"groupSize": 2, "schedule": "butterfly"}}),
    ("sync_switch_offline", "sync-switch", {"syncSwitch": {"policy": "offline"}}),
    ("sync_switch_online", "sync-switch", {"syncSwitch": {"policy": "online"}}),
    ("ps_plus", "ps-plus", {}),
]


def run(args, label, algorithm, extra_sync, straggler, reply_delay_ms=0):
    workdir = os.path.join(args.workdir, f"{label}{'-straggler' if straggler else ''}")
    job = os.path.join(args.workdir, "job.json")
    sync = {"dutyCycle": args.duty_cycle}
    sync.update(extra_sync)
    with cluster.Cluster(args.bin, workdir, syncer_delay_ms=args.syncer_delay_ms,
                         syncer_reply_delay_ms=reply_delay_ms) as c:
        cluster.write_job(job, algorithm=algorithm, trainers=args.trainers, threads=args.threads,
                          batch_size=args.batch_size, lr=0.02, ps=2, syncers=1,
                          hash_buckets=1_000_000, extra_sync=sync)
        per_worker = {}
        if straggler:
            per_worker[args.trainers - 1] = ["--straggle-factor", str(args.factor)]
        reports = c.run_workers(job, args.trainers, args.data, eval_data=args.eval_data,
                                max_examples=args.examples, preload=True,
                                per_worker_extra=per_worker)
    eps = sum(r["examples_per_second"] for r in reports)
    steps = [r["examples"] / args.batch_size / args.threads for r in reports]
    iteration = statistics.mean(r["seconds"] / max(1, s) for r, s in zip(reports, steps))
    return {
        "examples_per_second": eps,
        "eval_ne": statistics.mean(r["eval_ne"] for r in reports),
        "mb": sum(r["sync_bytes_sent"] + r["sync_bytes_received"] for r in reports) / 1e6,
        "iteration_seconds": iteration,
        "blocked_seconds": sum(r["sync_blocked_seconds"] for r in reports),
        "rounds": sum(r["sync_rounds"] for r in reports),
    }


def write_report(results, prefix, title):
    """A Markdown table and an SVG bar chart (throughput and eval NE, with and
    without the straggler) of `results`: {(label, straggler): figures}."""
    labels = [label for label, _, _ in STRATEGIES
              if (label, False) in results or (label, True) in results]
    rows = ["| strategy | ex/s | ex/s, straggler | eval NE | eval NE, straggler | MB | "
            "MB, straggler | iteration ms, straggler |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]

    def cell(label, straggler, key, fmt):
        r = results.get((label, straggler))
        return fmt.format(r[key]) if r else "failed"

    def ms(label):
        r = results.get((label, True))
        return f"{1000 * r['iteration_seconds']:.1f}" if r else "failed"

    for label in labels:
        rows.append(
            f"| {label} | {cell(label, False, 'examples_per_second', '{:.0f}')} | "
            f"{cell(label, True, 'examples_per_second', '{:.0f}')} | "
            f"{cell(label, False, 'eval_ne', '{:.4f}')} | {cell(label, True, 'eval_ne', '{:.4f}')} | "
            f"{cell(label, False, 'mb', '{:.0f}')} | {cell(label, True, 'mb', '{:.0f}')} | "
            f"{ms(label)} |")
    with open(prefix + ".md", "w") as f:
        f.write(f"# {title}\n\n" + "\n".join(rows) + "\n\n![throughput and eval NE]("
                + os.path.basename(prefix) + ".svg)\n")

    # Two panels of grouped bars: examples/s and eval NE; grey = no straggler.
    w, bar, gap, panel, top, left = 900, 12, 14, 220, 40, 60
    step = 2 * bar + gap
    height = top + 2 * panel + 150
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{height}" '
           'font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{w // 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for p, (key, name) in enumerate([("examples_per_second", "examples/s (sum over trainers)"),
                                     ("eval_ne", "eval NE (lower is better)")]):
        y0 = top + p * (panel + 40)
        values = [r[key] for r in results.values()]
        hi = max(values) * 1.1 if values else 1
        lo = 0 if key == "examples_per_second" else min(values) * 0.98
        svg.append(f'<text x="{left}" y="{y0 + 12}">{name}</text>')
        svg.append(f'<line x1="{left}" y1="{y0 + panel}" x2="{w - 10}" y2="{y0 + panel}" '
                   'stroke="black"/>')
        svg.append(f'<text x="{left - 4}" y="{y0 + 24}" text-anchor="end">{hi:.3g}</text>')
        svg.append(f'<text x="{left - 4}" y="{y0 + panel}" text-anchor="end">{lo:.3g}</text>')
        for i, label in enumerate(labels):
            for k, straggler in enumerate((False, True)):
                r = results.get((label, straggler))
                if not r:
                    continue
                h = (r[key] - lo) / (hi - lo) * (panel - 20)
                x = left + 10 + i * step + k * bar
                color = "#999999" if not straggler else "#d62728"
                svg.append(f'<rect x="{x}" y="{y0 + panel - h:.1f}" width="{bar - 1}" '
                           f'height="{h:.1f}" fill="{color}"/>')
            if p == 1:
                x = left + 10 + i * step + bar
                svg.append(f'<text x="{x}" y="{y0 + panel + 12}" text-anchor="end" '
                           f'transform="rotate(-45 {x} {y0 + panel + 12})">{label}</text>')
    svg.append(f'<rect x="{w - 260}" y="28" width="10" height="10" fill="#999999"/>'
               f'<text x="{w - 245}" y="37">no straggler</text>'
               f'<rect x="{w - 160}" y="28" width="10" height="10" fill="#d62728"/>'
               f'<text x="{w - 145}" y="37">one trainer 4x slower</text>')
    svg.append("</svg>")
    with open(prefix + ".svg", "w") as f:
        f.write("\n".join(svg) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--eval-data", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--trainers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--examples", type=int, default=100000, help="per trainer")
    ap.add_argument("--factor", type=float, default=4.0, help="the straggler's slowdown")
    ap.add_argument("--duty-cycle", type=float, default=0.02)
    ap.add_argument("--syncer-delay-ms", type=float, default=0,
                    help="one-way delay between trainers and the syncer (bench/latency_proxy.py)")
    ap.add_argument("--latency-ms", default="15,5",
                    help="comma-separated reply delays of the ps-plus / asp runs; the first is "
                         "the one psplus_vs_asp_iter reports ('' = none)")
    ap.add_argument("--latency-repeats", type=int, default=3)
    ap.add_argument("--latency-only", action="store_true",
                    help="only the ps-plus / asp runs with the reply delay")
    ap.add_argument("--only", default="", help="comma-separated labels (bsp, asp always run)")
    ap.add_argument("--json", default="", help="write every figure here")
    ap.add_argument("--report", default="",
                    help="write PREFIX.md (table) and PREFIX.svg (plot) of every figure")
    ap.add_argument("--from-json", default="",
                    help="only write --report from a --json file of an earlier run")
    args = ap.parse_args()
    title = (f"{args.trainers} trainers, one slowed {args.factor:g}x: every sync strategy "
             f"({args.examples} examples per trainer)")
    if args.from_json:
        with open(args.from_json) as f:
            raw = json.load(f)
        results = {(k.split("/")[0], k.endswith("/straggler")): v for k, v in raw.items()
                   if k != "latency"}
        write_report(results, args.report, title)
        return

    wanted = set(args.only.split(",")) | {"bsp", "asp", "none"} if args.only else None
    chosen = [s for s in STRATEGIES if wanted is None or s[0] in wanted]
    if args.latency_only:
        chosen = [s for s in STRATEGIES if s[0] == "ps_plus"]
    print(f"stragglers benchmark: {args.trainers} trainers x {args.threads} threads, batch "
          f"{args.batch_size}, {args.examples} examples per trainer, trainer {args.trainers - 1} "
          f"slowed {args.factor:g}x in the straggler runs, 2 ps, 1 syncer, {os.cpu_count()} cores")
    print(f"{'strategy':<22}{'straggler':>10}{'ex/s':>9}{'eval_NE':>9}{'MB':>9}{'iter_ms':>9}"
          f"{'blocked_s':>10}{'rounds':>8}")
    results = {}
    for label, algorithm, extra in ([] if args.latency_only else chosen):
        for straggler in (False, True):
            try:
                r = run(args, label, algorithm, extra, straggler)
            except cluster.ClusterError as e:
                print(f"{label:<22}{'yes' if straggler else 'no':>10}  FAILED: {e}".splitlines()[0],
                      flush=True)
                continue
            results[(label, straggler)] = r
            print(f"{label:<22}{'yes' if straggler else 'no':>10}{r['examples_per_second']:>9.0f}"
                  f"{r['eval_ne']:>9.4f}{r['mb']:>9.1f}{1000 * r['iteration_seconds']:>9.2f}"
                  f"{r['blocked_seconds']:>10.2f}{r['rounds']:>8}", flush=True)
    # ps-plus / asp at each reply delay: the median of the per-pair ratios.
    latency_ratios, latency_runs = {}, {}
    delays = [float(d) for d in args.latency_ms.split(",") if d.strip()]
    by_label = {label: (algorithm, extra) for label, algorithm, extra in STRATEGIES}
    for delay in (delays if any(label == "ps_plus" for label, _, _ in chosen) else []):
        print(f"\nps-plus / asp with the straggler, syncer replies held {delay:g} ms "
              f"(the network time of a blocking pull); {args.latency_repeats} alternating pairs")
        ratios, runs = [], []
        for rep in range(args.latency_repeats):
            order = ["asp", "ps_plus"] if rep % 2 == 0 else ["ps_plus", "asp"]
            pair = {}
            for label in order:
                algorithm, extra = by_label[label]
                try:
                    pair[label] = run(args, label, algorithm, extra, True, delay)
                except cluster.ClusterError as e:
                    print(f"{label:<22}{'yes':>10}  FAILED: {e}".splitlines()[0], flush=True)
                    continue
                r = pair[label]
                runs.append({"label": label, **r})
                print(f"{label + ' +' + format(delay, 'g') + 'ms':<22}{'yes':>10}"
                      f"{r['examples_per_second']:>9.0f}{r['eval_ne']:>9.4f}{r['mb']:>9.1f}"
                      f"{1000 * r['iteration_seconds']:>9.2f}{r['blocked_seconds']:>10.2f}"
                      f"{r['rounds']:>8}", flush=True)
            if len(pair) == 2:
                ratios.append(pair["ps_plus"]["iteration_seconds"] /
                              pair["asp"]["iteration_seconds"])
        latency_runs[f"{delay:g}ms"] = {"runs": runs, "ratios": ratios}
        if ratios:
            latency_ratios[delay] = statistics.median(ratios)
            print("ps-plus / asp time per iteration, each pair: " +
                  " ".join(f"{x:.3f}" for x in ratios) + f"; median {latency_ratios[delay]:.3f}")
    if args.report and results:
        write_report(results, args.report, title)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**{f"{k[0]}{'/straggler' if k[1] else ''}": v
                          for k, v in results.items()}, "latency": latency_runs}, f, indent=2)

    def get(label, key):
        r = results.get((label, True))
        return r[key] if r else float("nan")

    bsp_eps, bsp_ne = get("bsp", "examples_per_second"), get("bsp", "eval_ne")
    fields = {
        "syncswitch_vs_bsp": get("sync_switch_online", "examples_per_second") / bsp_eps,
        "psplus_vs_asp_iter": latency_ratios.get(delays[0], float("nan")) if delays
                              else float("nan"),
        **{f"psplus_vs_asp_iter_{d:g}ms": v for d, v in latency_ratios.items() if d != delays[0]},
        "psplus_vs_asp_iter_loopback":
            get("ps_plus", "iteration_seconds") / get("asp", "iteration_seconds"),
        "dssync_vs_bsp": get("ds_sync", "examples_per_second") / bsp_eps,
        "ne_gap_syncswitch": get("sync_switch_online", "eval_ne") / bsp_ne - 1,
    }
    print()
    print("with the straggler: sync-switch (online) / bsp throughput, ps-plus / asp time per "
          f"iteration (syncer replies held {args.latency_ms} ms; and on plain loopback), "
          "ds-sync / bsp throughput, sync-switch's eval NE relative to bsp's")
    print("RESULT name=stragglers " + " ".join(f"{k}={v:.3f}" for k, v in fields.items()))


if __name__ == "__main__":
    main()

"""Model quality of every dense-sync strategy against one trainer that saw all the data.

One pass over each dataset with 1, 2 and 4 trainers (bench/sync-quality.sh).
Writes a Markdown table and one SVG plot of eval NE against examples per
dataset next to --out, and prints the worst relative NE gap of the shadow-*
strategies to the single trainer.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

STRATEGIES = ["none", "shadow-easgd", "shadow-ma", "shadow-bmuf", "fg-easgd", "fg-ma", "fg-bmuf",
              "bsp", "asp"]
SHADOW = ["shadow-easgd", "shadow-ma", "shadow-bmuf"]
COLORS = {"single": "#000000", "none": "#999999", "shadow-easgd": "#d62728",
          "shadow-ma": "#1f77b4", "shadow-bmuf": "#2ca02c", "fg-easgd": "#ff9896",
          "fg-ma": "#aec7e8", "fg-bmuf": "#98df8a", "bsp": "#9467bd", "asp": "#8c564b"}


def count_lines(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def run(args, workdir, data, eval_data, trainers, algorithm, examples, batch_size):
    job = os.path.join(args.workdir, "job.json")
    with cluster.Cluster(args.bin, workdir) as c:
        cluster.write_job(job, algorithm=algorithm, trainers=trainers, threads=args.threads,
                          batch_size=batch_size, lr=args.lr, ps=2, syncers=1,
                          hash_buckets=1_000_000, interval=args.interval,
                          extra_sync=args.sync)
        share = examples // trainers
        return c.run_workers(job, trainers, data, eval_data=eval_data, preload=True,
                             extra=["--eval-every", str(max(1, share // args.curve_points)),
                                    "--eval-curve-examples", str(args.curve_examples)])


def summarize(reports):
    return {
        "eval_ne": statistics.mean(r["eval_ne"] for r in reports),
        "eval_ne_trainer0": reports[0]["eval_ne"],
        "eval_auc": statistics.mean(r["eval_auc"] for r in reports),
        "calibration": statistics.mean(r.get("eval_calibration") or float("nan") for r in reports),
        "eps": sum(r["examples_per_second"] for r in reports),
        "mb": sum(r["sync_bytes_sent"] + r["sync_bytes_received"] for r in reports) / 1e6,
        "rounds": sum(r["sync_rounds"] for r in reports),
        "gap": statistics.mean(r["sync_mean_gap_steps"] for r in reports),
        # Curve of trainer 0, x = examples trained by the whole job.
        "curve": [(p["examples"] * len(reports), p["eval_ne"]) for p in reports[0]["curve"]],
    }


def median_run(runs, reference_ne):
    """The run with the median eval NE, its gap % to reference_ne and the gaps' range."""
    runs = sorted(runs, key=lambda r: r["eval_ne"])
    gaps = [100 * (r["eval_ne"] / reference_ne - 1) for r in runs]
    spread = f"{gaps[0]:+.2f} .. {gaps[-1]:+.2f}" if len(gaps) > 1 else "-"
    return runs[len(runs) // 2], gaps[len(gaps) // 2], spread


def svg_plot(path, title, series):
    """series: {label: [(x, y), ...]}; a plain line chart."""
    w, h, ml, mr, mt, mb = 720, 440, 70, 170, 40, 50
    pts = [p for s in series.values() for p in s]
    if not pts:
        return
    x0, x1 = 0, max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    pad = (y1 - y0) * 0.05 or 0.01
    y0, y1 = y0 - pad, y1 + pad
    sx = lambda x: ml + (x - x0) / (x1 - x0 or 1) * (w - ml - mr)  # noqa: E731
    sy = lambda y: mt + (y1 - y) / (y1 - y0) * (h - mt - mb)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{ml}" y1="{h - mb}" x2="{w - mr}" y2="{h - mb}" stroke="black"/>',
           f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{h - mb}" stroke="black"/>',
           f'<text x="{(ml + w - mr) / 2}" y="{h - 12}" text-anchor="middle">examples trained '
           f'(whole job)</text>',
           f'<text x="16" y="{(mt + h - mb) / 2}" transform="rotate(-90 16 {(mt + h - mb) / 2})" '
           f'text-anchor="middle">eval NE</text>']
    for i in range(5):
        yv = y0 + (y1 - y0) * i / 4
        xv = x0 + (x1 - x0) * i / 4
        out.append(f'<text x="{ml - 6}" y="{sy(yv) + 4}" text-anchor="end">{yv:.4f}</text>')
        out.append(f'<text x="{sx(xv)}" y="{h - mb + 16}" text-anchor="middle">{xv:,.0f}</text>')
    for k, (label, s) in enumerate(series.items()):
        color = COLORS.get(label.split(" ")[0], "#333333")
        if s:
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{d}"/>')
        ly = mt + 16 * k
        out.append(f'<line x1="{w - mr + 10}" y1="{ly}" x2="{w - mr + 30}" y2="{ly}" '
                   f'stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{w - mr + 34}" y="{ly + 4}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dataset", action="append", required=True,
                    help="NAME:TRAIN:EVAL[:OPTION...], repeatable. Options: a number (runs of "
                    "each row, the single trainer's too), batch=B (this dataset's batch instead of "
                    "--batch-size), global (the job's batch is held fixed, each of N trainers "
                    "taking 1/N of it), gate=no (reported, but outside within_0.5pct)")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", required=True, help="Markdown table path; plots go beside it")
    ap.add_argument("--trainers", default="2,4")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of each row, the single trainer's too (median reported), "
                    "unless the dataset names its own")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.02)
    ap.add_argument("--interval", type=int, default=10, help="fg-* k")
    ap.add_argument("--sync", action="append", default=[], metavar="KEY=JSON",
                    help="extra spec.sync field for every run, e.g. dutyCycle=0.2 or "
                    'bmuf={"blockLearningRate":1}; repeatable')
    ap.add_argument("--curve-points", type=int, default=8)
    ap.add_argument("--curve-examples", type=int, default=20000)
    args = ap.parse_args()
    args.sync = {k: json.loads(v) for k, v in (kv.split("=", 1) for kv in args.sync)}
    trainer_counts = [int(n) for n in args.trainers.split(",")]
    strategies = args.strategies.split(",")

    md = ["# Sync quality: one pass, eval NE/AUC of every strategy", "",
          f"Each trainer: {args.threads} Hogwild thread(s), batch as each section says, adagrad lr "
          f"{args.lr}; 2 parameter servers, 1 syncer; fg-* at k = {args.interval}. NE and AUC "
          "are the mean over the trainers' replicas on the held-out set; gap = relative NE "
          "difference to the single trainer that saw all the data. Shadow strategies run with "
          "the job spec's defaults (warm-up, duty cycle, final average) unless listed here: "
          f"{json.dumps(args.sync) if args.sync else 'none changed'}.", ""]
    worst = {}
    ungated = set()
    for spec in args.dataset:
        name, train, evaluation, *options = spec.split(":")
        repeats, batch, global_batch = args.repeats, args.batch_size, False
        for option in options:
            if option.isdigit():
                repeats = int(option)
            elif option.startswith("batch="):
                batch = int(option.split("=", 1)[1])
            elif option == "global":
                global_batch = True
            elif option == "gate=no":
                ungated.add(name)
            else:
                ap.error(f"--dataset {spec}: unknown option '{option}'")

        def batch_of(n):
            return max(1, batch // n) if global_batch else batch
        examples = count_lines(train)
        print(f"== {name}: {examples} training examples, eval {evaluation}", flush=True)
        # The single trainer's NE varies from run to run too (thread timing), so it is the
        # median of as many runs as each row.
        singles = [summarize(run(args, os.path.join(args.workdir, f"{name}-1-none-{r}"), train,
                                 evaluation, 1, "none", examples, batch))
                   for r in range(repeats)]
        median_ne = sorted(r["eval_ne"] for r in singles)[len(singles) // 2]
        single, _, single_spread = median_run(singles, median_ne)
        print(f"single trainer: eval NE {single['eval_ne']:.5f} (runs {single_spread}) AUC "
              f"{single['eval_auc']:.4f} calibration {single['calibration']:.3f} "
              f"{single['eps']:.0f} ex/s", flush=True)
        runs_note = (f"Each row is the median of {repeats} runs by eval NE, the single "
                     "trainer's too; \"gap % of runs\" is the range over a row's runs (the "
                     "single trainer's relative to its median)." if repeats > 1 else
                     "One run per row.")
        batch_note = (f"The job's batch is held at {batch}: each of N trainers takes "
                      f"{batch}/N per step, so N trainers together take as many dense "
                      "steps through the data as the single trainer." if global_batch else
                      f"Every trainer takes batches of {batch} ({-(-examples // batch)} steps for "
                      "the single trainer), so N trainers together take 1/N of its dense steps "
                      "through the data.")
        if name in ungated:
            most = max(trainer_counts)
            batch_note += (f" Reported, not part of within_0.5pct: {most} trainers take "
                           f"{-(-examples // (most * batch))} steps each here; bsp's row (exact "
                           "synchronization) shows what that alone costs.")
        md += [f"## {name} ({examples:,} training examples)", "", batch_note, runs_note, "",
               "| trainers | strategy | eval NE | gap % | gap % of runs | eval AUC | calibration "
               "| examples/s | sync MB | rounds | gap steps |",
               "|---|---|---|---|---|---|---|---|---|---|---|",
               f"| 1 | single (none) | {single['eval_ne']:.5f} | 0 | {single_spread} | "
               f"{single['eval_auc']:.4f} | {single['calibration']:.3f} | "
               f"{single['eps']:.0f} | 0 | 0 | - |"]
        plots = {"single": single["curve"]}
        for n in trainer_counts:
            for algorithm in strategies:
                runs = []
                try:
                    for r in range(repeats):
                        runs.append(summarize(run(
                            args, os.path.join(args.workdir, f"{name}-{n}-{algorithm}-{r}"), train,
                            evaluation, n, algorithm, examples, batch_of(n))))
                except cluster.ClusterError as e:
                    print(f"{n} x {algorithm}: FAILED {e}", flush=True)
                    md.append(f"| {n} | {algorithm} | failed | | | | | | | | |")
                    continue
                # The run with the median eval NE stands for the strategy.
                s, gap, spread = median_run(runs, single["eval_ne"])
                if algorithm in SHADOW:
                    worst[f"{name}_n{n}"] = max(worst.get(f"{name}_n{n}", -1e9), gap)
                print(f"{n} x {algorithm:<13} eval NE {s['eval_ne']:.5f} ({gap:+.2f}%, runs "
                      f"{spread}) AUC {s['eval_auc']:.4f} cal {s['calibration']:.3f} "
                      f"{s['eps']:.0f} ex/s {s['mb']:.0f} MB "
                      f"{s['rounds']} rounds gap {s['gap']:.1f}", flush=True)
                md.append(f"| {n} | {algorithm} | {s['eval_ne']:.5f} | {gap:+.2f} | {spread} | "
                          f"{s['eval_auc']:.4f} | {s['calibration']:.3f} | {s['eps']:.0f} | "
                          f"{s['mb']:.0f} | {s['rounds']} | {s['gap']:.1f} |")
                if n == max(trainer_counts):
                    plots[f"{algorithm} x{n}"] = s["curve"]
        plot = os.path.splitext(args.out)[0] + f"-{name}.svg"
        svg_plot(plot, f"{name}: eval NE during one pass ({max(trainer_counts)} trainers)", plots)
        md += ["", f"![eval NE against examples]({os.path.basename(plot)})", ""]
    with open(args.out, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {args.out}")
    fields = " ".join(f"worst_shadow_gap_pct_{k}={v:.2f}" for k, v in sorted(worst.items()))
    within = {}
    for key, gap in worst.items():
        dataset = key.rsplit("_n", 1)[0]
        within[dataset] = within.get(dataset, True) and gap <= 0.5
    per_dataset = " ".join(f"within_0.5pct_{d}={'yes' if ok else 'no'}"
                           for d, ok in sorted(within.items()))
    ok = all(v for d, v in within.items() if d not in ungated)
    print(f"RESULT name=sync-quality {fields} {per_dataset} within_0.5pct={'yes' if ok else 'no'}")


if __name__ == "__main__":
    main()

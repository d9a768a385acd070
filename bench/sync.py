"""Throughput of every dense-sync strategy relative to `none` (bench/sync.sh)."""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

# (label, algorithm, interval k)
STRATEGIES = [
    ("none", "none", 10),
    ("shadow_easgd", "shadow-easgd", 10),
    ("shadow_ma", "shadow-ma", 10),
    ("shadow_bmuf", "shadow-bmuf", 10),
    ("fg_easgd_k1", "fg-easgd", 1),
    ("fg_easgd_k10", "fg-easgd", 10),
    ("fg_ma_k1", "fg-ma", 1),
    ("fg_ma_k10", "fg-ma", 10),
    ("fg_bmuf_k1", "fg-bmuf", 1),
    ("fg_bmuf_k10", "fg-bmuf", 10),
    ("bsp", "bsp", 10),
    ("asp", "asp", 10),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True, help="training TSV (each trainer reads its share)")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    # Long enough that the shadow strategies' fixed start-up cost (the warm-up's
    # 8 foreground rounds, about 0.1 s per trainer) is under 1% of a run.
    ap.add_argument("--examples", type=int, default=200000, help="per trainer per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duty-cycle", type=float, default=0.02,
                    help="shadow-*: share of wall time in sync rounds (sync.dutyCycle)")
    ap.add_argument("--only", default="", help="comma-separated labels to run")
    ap.add_argument("--dense-precision", default="fp32",
                    help="the trainers' MLP GEMMs (spec.trainer.densePrecision): fp32, bf16, auto")
    args = ap.parse_args()

    chosen = [s for s in STRATEGIES if not args.only or s[0] in args.only.split(",") or s[0] == "none"]
    eps = {label: [] for label, _, _ in chosen}
    detail = {}
    print(f"sync benchmark: {args.trainers} trainers x {args.threads} threads, batch "
          f"{args.batch_size}, 2 ps, 1 syncer, DLRM-small, {args.examples} examples per trainer "
          f"per run, {args.repeats} repeats (median), duty_cycle={args.duty_cycle}, "
          f"dense_precision={args.dense_precision}, {os.cpu_count()} cores")
    print(f"{'run':<16}{'rep':>4}{'ex/s':>10}{'rounds':>8}{'round_ms':>10}{'gap':>8}"
          f"{'MB_sent':>9}{'blocked_s':>10}")
    for rep in range(args.repeats):
        for label, algorithm, k in chosen:
            job = os.path.join(args.workdir, "job.json")
            with cluster.Cluster(args.bin, os.path.join(args.workdir, label)) as c:
                cluster.write_job(job, algorithm=algorithm, trainers=args.trainers,
                                  threads=args.threads, batch_size=args.batch_size, lr=0.02, ps=2,
                                  syncers=1, hash_buckets=1_000_000, interval=k,
                                  extra_sync={"dutyCycle": args.duty_cycle},
                                  dense_precision=args.dense_precision)
                reports = c.run_workers(job, args.trainers, args.data,
                                        max_examples=args.examples, preload=True)
            total = sum(r["examples_per_second"] for r in reports)
            eps[label].append(total)
            rounds = sum(r["sync_rounds"] for r in reports)
            round_ms = 1000 * statistics.mean(r["sync_mean_round_seconds"] for r in reports)
            gap = statistics.mean(r["sync_mean_gap_steps"] for r in reports)
            sent = sum(r["sync_bytes_sent"] for r in reports) / 1e6
            blocked = sum(r["sync_blocked_seconds"] for r in reports)
            detail[label] = (rounds, round_ms, gap, sent, blocked)
            print(f"{label:<16}{rep:>4}{total:>10.0f}{rounds:>8}{round_ms:>10.2f}{gap:>8.1f}"
                  f"{sent:>9.1f}{blocked:>10.2f}", flush=True)
    med = {label: statistics.median(v) for label, v in eps.items()}
    print()
    print("median examples/s (sum over trainers) and ratio to none:")
    for label, _, _ in chosen:
        print(f"  {label:<16}{med[label]:>10.0f}  {med[label] / med['none']:.3f}")
    keys = ["shadow_easgd", "shadow_ma", "shadow_bmuf", "fg_ma_k1", "bsp", "asp"]
    extra = [label for label, _, _ in chosen if label not in keys and label != "none"]
    fields = [f"{key}={med[key] / med['none']:.3f}" for key in keys + extra if key in med]
    print(f"RESULT name=sync none_eps={med['none']:.0f} " + " ".join(fields))


if __name__ == "__main__":
    main()

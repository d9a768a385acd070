"""Throughput of each strategy with and without added trainer-syncer latency (bench/sync-latency.sh)."""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402

STRATEGIES = [("none", "none", 10), ("shadow_easgd", "shadow-easgd", 10),
              ("shadow_ma", "shadow-ma", 10), ("shadow_bmuf", "shadow-bmuf", 10),
              ("fg_ma_k10", "fg-ma", 10), ("bsp", "bsp", 10)]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--delay-ms", type=float, default=5.0, help="one-way, each direction")
    # Long enough that the shadow warm-up's 8 foreground rounds, which do pay
    # the delay, are not what the ratio measures (at 60k they cost ~5%).
    ap.add_argument("--examples", type=int, default=200000, help="per trainer per run")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    print(f"sync latency benchmark: 2 trainers x 1 thread, 2 ps, 1 syncer reached through a "
          f"proxy adding {args.delay_ms} ms each way (round trip +{2 * args.delay_ms} ms); "
          f"parameter-server traffic is not delayed; {args.examples} examples per trainer, "
          f"{args.repeats} repeats (median)")
    print(f"{'run':<14}{'delay_ms':>9}{'rep':>4}{'ex/s':>10}{'rounds':>8}{'round_ms':>10}"
          f"{'gap':>8}{'blocked_s':>10}")
    eps = {}
    for rep in range(args.repeats):
        for label, algorithm, k in STRATEGIES:
            for delay in (0.0, args.delay_ms):
                job = os.path.join(args.workdir, "job.json")
                with cluster.Cluster(args.bin, os.path.join(args.workdir, label),
                                     syncer_delay_ms=delay) as c:
                    cluster.write_job(job, algorithm=algorithm, trainers=2, threads=1,
                                      batch_size=256, lr=0.02, ps=2, syncers=1,
                                      hash_buckets=1_000_000, interval=k)
                    reports = c.run_workers(job, 2, args.data, max_examples=args.examples)
                total = sum(r["examples_per_second"] for r in reports)
                eps.setdefault((label, delay), []).append(total)
                rounds = sum(r["sync_rounds"] for r in reports)
                round_ms = 1000 * statistics.mean(r["sync_mean_round_seconds"] for r in reports)
                gap = statistics.mean(r["sync_mean_gap_steps"] for r in reports)
                blocked = sum(r["sync_blocked_seconds"] for r in reports)
                print(f"{label:<14}{delay:>9.1f}{rep:>4}{total:>10.0f}{rounds:>8}{round_ms:>10.2f}"
                      f"{gap:>8.1f}{blocked:>10.2f}", flush=True)
    print()
    print("median examples/s without and with the delay, and their ratio:")
    fields = []
    for label, _, _ in STRATEGIES:
        a = statistics.median(eps[(label, 0.0)])
        b = statistics.median(eps[(label, args.delay_ms)])
        print(f"  {label:<14}{a:>10.0f}{b:>10.0f}  {b / a:.3f}")
        fields.append(f"{label}={b / a:.3f}")
    print(f"RESULT name=sync-latency delay_ms={args.delay_ms} " + " ".join(fields))


if __name__ == "__main__":
    main()

"""Projects job throughput for 1..64 trainers under shadow-*, fg-* and bsp (docs/scaling.md).

Inputs are what bench/run.sh sync measures on one machine: examples/s of one
trainer without sync, the bytes a trainer sends per round, and the fixed cost
of a round (its latency on loopback, where transfer is a memory copy).
Network figures are assumptions, printed with the table.

  python3 bench/scaling_model.py --trainer-eps 18500 --round-bytes 1904000 \
      --round-fixed-ms 12 --batch 256
"""

import argparse


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trainer-eps", type=float, required=True,
                    help="examples/s of one trainer with sync none (measured)")
    ap.add_argument("--round-bytes", type=float, required=True,
                    help="bytes one trainer sends (and receives) per round (measured)")
    ap.add_argument("--round-fixed-ms", type=float, required=True,
                    help="round latency with 2 trainers on loopback (measured)")
    ap.add_argument("--batch", type=int, default=256, help="examples per step")
    ap.add_argument("--syncers", type=int, default=1)
    ap.add_argument("--syncer-gbit", type=float, default=25.0, help="NIC of one syncer")
    ap.add_argument("--trainer-gbit", type=float, default=10.0, help="NIC of one trainer")
    ap.add_argument("--rtt-ms", type=float, default=0.2)
    ap.add_argument("--duty-cycle", type=float, default=0.02)
    ap.add_argument("--k", type=int, default=10, help="fg-* period")
    args = ap.parse_args()

    e, p, b = args.trainer_eps, args.round_bytes, args.batch
    syncer_bps = args.syncer_gbit * 1e9 / 8
    trainer_bps = args.trainer_gbit * 1e9 / 8
    step = b / e

    def round_seconds(n):
        # Fixed per-round work (serialization, the mean, the apply), one RTT,
        # and the transfer: each trainer moves p in and p out over its NIC,
        # and the syncer replicas together move n * p in and n * p out.
        transfer = max(2 * p / trainer_bps, 2 * n * p / (args.syncers * syncer_bps))
        return args.round_fixed_ms / 1000 + args.rtt_ms / 1000 + transfer

    print(f"per-trainer {e:.0f} examples/s, batch {b} ({1000 * step:.1f} ms/step), "
          f"{p / 1e6:.2f} MB per round each way, fixed round cost {args.round_fixed_ms} ms, "
          f"{args.syncers} syncer(s) at {args.syncer_gbit} Gbit/s, trainers at "
          f"{args.trainer_gbit} Gbit/s, RTT {args.rtt_ms} ms, dutyCycle {args.duty_cycle}")
    print()
    print("| trainers | round ms | shadow-* ex/s | shadow sync gap (steps) | "
          f"fg-* k={args.k} ex/s | bsp (= fg-* k=1) ex/s | bsp / shadow |")
    print("|---|---|---|---|---|---|---|")
    for n in (1, 2, 4, 8, 16, 32, 64):
        r = round_seconds(n)
        shadow = n * e
        # The shadow thread pauses r (1 - d) / d after each round of cost r.
        gap = (r / args.duty_cycle) / step
        fg = n * args.k * b / (args.k * step + r)
        bsp = n * b / (step + r)
        print(f"| {n} | {1000 * r:.1f} | {shadow:,.0f} | {gap:.0f} | {fg:,.0f} | "
              f"{bsp:,.0f} | {bsp / shadow:.2f} |")


if __name__ == "__main__":
    main()

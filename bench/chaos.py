"""Chaos on a local job (bench/chaos.sh).

Runs one job (`shadowsync run`) undisturbed, then again while injecting one
fault per round into a random process of the job (a random role, trainer,
parameter server or syncer, then a random process of it):
  kill   SIGKILL (the launcher restarts the process);
  stop   SIGSTOP for longer than the RPC deadlines, then SIGCONT;
  net    drop the process's loopback gRPC traffic for a while (iptables;
         skipped when iptables is not usable here).
Every trainer sleeps after each step so that the job outlasts the faults'
schedule. Then it checks that every fault was injected, that the job finished,
that every embedding key exists
exactly once and on the server owning its slot (bench/chaos_check.cc), that
the key set equals the undisturbed run's, and that eval NE is within
--max-ne-gap of the undisturbed run's.
Last line:
  RESULT name=chaos rounds=.. faults=.. completed=.. keys_lost=.. ne_gap=..
"""

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time


BATCH_SIZE = 256


def write_job(path, name, examples, trainers, restarts, step_delay_ms):
    job = {
        "apiVersion": "shadowsync.io/v1alpha1",
        "kind": "ShadowSyncJob",
        "metadata": {"name": name},
        "spec": {
            "model": {"denseFeatures": 13, "embeddingDim": 16, "bottomMlp": [256, 64],
                      "topMlp": [256, 128], "criteoTables": {"hashBuckets": 100000}},
            "data": {"format": "synthetic",
                     "synthetic": {"examples": examples, "evalExamples": 20000, "seed": 1}},
            # Every trainer sleeps after each step, so the job outlasts the
            # faults however fast the machine trains (the same in both runs).
            "trainer": {"replicas": trainers, "threads": 1, "batchSize": BATCH_SIZE,
                        "learningRate": 0.02, "optimizer": "adagrad",
                        "straggler": {"count": trainers, "delayMs": step_delay_ms}},
            "parameterServer": {"replicas": 2, "slots": 4096, "optimizer": "adagrad"},
            "syncer": {"replicas": 1},
            "sync": {"algorithm": "shadow-easgd"},
            # Frequent checkpoints: a restarted trainer repeats little work.
            "checkpoint": {"intervalSeconds": 5},
            "runPolicy": {"backoffLimit": restarts},
        },
    }
    with open(path, "w") as f:
        json.dump(job, f, indent=1)


def children(pid):
    """The job's processes: {name: (pid, role, grpc_port or None)}."""
    out = {}
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                              text=True).stdout.split()
    except OSError:
        return out
    for kid in kids:
        try:
            with open(f"/proc/{kid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if len(argv) < 2 or argv[1] not in ("ps", "syncer", "worker"):
            continue
        ready = argv[argv.index("--ready-file") + 1] if "--ready-file" in argv else ""
        name = os.path.basename(ready).removesuffix(".ready") or f"{argv[1]}-{kid}"
        port = None
        m = re.search(r":(\d+)$", argv[argv.index("--listen") + 1]) if "--listen" in argv else None
        if m and m.group(1) != "0":
            port = int(m.group(1))
        elif ready and os.path.exists(ready):
            with open(ready) as f:
                fields = f.read().split()
                port = int(fields[0]) if fields else None
        out[name] = (int(kid), argv[1], port)
    return out


def iptables_usable():
    if shutil.which("iptables") is None:
        return False
    return subprocess.run(["iptables", "-w", "-L", "OUTPUT", "-n"], capture_output=True).returncode == 0


def drop_port(port, on):
    action = "-I" if on else "-D"
    for chain, flag in (("INPUT", "--dport"), ("OUTPUT", "--sport")):
        subprocess.run(["iptables", "-w", action, chain, "-i" if chain == "INPUT" else "-o", "lo",
                        "-p", "tcp", flag, str(port), "-j", "DROP"], check=False)


def run_job(args, job, out, chaos):
    """Runs the job; with chaos, injects faults. Returns (rc, faults, log)."""
    log_path = os.path.join(args.workdir, os.path.basename(out) + ".log")
    shutil.rmtree(out, ignore_errors=True)
    rng = random.Random(args.seed)
    faults = []
    with open(log_path, "w") as log:
        launcher = subprocess.Popen([args.bin, "run", job, "--out", out], stdout=log,
                                    stderr=subprocess.STDOUT)
        kinds = ["kill", "stop"] + (["net"] if chaos and args.net else [])
        rounds_done = 0
        next_at = time.time() + args.first_fault_seconds
        while launcher.poll() is None:
            time.sleep(0.2)
            if not chaos or rounds_done >= args.rounds or time.time() < next_at:
                continue
            procs = children(launcher.pid)
            if not procs:
                continue
            # A role first, so the lone syncer is hit as often as the trainers.
            role = rng.choice(sorted({r for _, r, _ in procs.values()}))
            name = rng.choice(sorted(n for n, (_, r, _) in procs.items() if r == role))
            pid, role, port = procs[name]
            kind = rng.choice(kinds)
            if kind == "net" and port is None:
                kind = "kill"
            t = time.strftime("%H:%M:%S")
            try:
                if kind == "kill":
                    os.kill(pid, signal.SIGKILL)
                elif kind == "stop":
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(args.stop_seconds)
                    os.kill(pid, signal.SIGCONT)
                else:
                    drop_port(port, True)
                    time.sleep(args.net_seconds)
                    drop_port(port, False)
            except ProcessLookupError:
                continue
            faults.append((t, kind, name))
            print(f"chaos: round {rounds_done + 1}: {kind} {name} (pid {pid})", flush=True)
            rounds_done += 1
            next_at = time.time() + args.interval
        rc = launcher.wait()
    return rc, faults, log_path


def check_keys(args, out):
    r = subprocess.run([args.check, "--run-dir", out], capture_output=True, text=True)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        raise SystemExit(f"chaos_check failed: {r.stderr}")
    last = r.stdout.strip().splitlines()[-1]
    return dict(kv.split("=", 1) for kv in last.split()[1:])


def parser(doc):
    """The arguments every chaos benchmark takes: the binaries and a directory."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bin", required=True, help="the shadowsync binary")
    p.add_argument("--check", required=True, help="the chaos_check binary")
    p.add_argument("--workdir", required=True)
    return p


def main():
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=10, help="faults to inject")
    p.add_argument("--interval", type=float, default=6, help="seconds between faults")
    p.add_argument("--first-fault-seconds", type=float, default=8)
    p.add_argument("--stop-seconds", type=float, default=12,
                   help="SIGSTOP length (above the ps client's 10 s RPC deadline)")
    p.add_argument("--net-seconds", type=float, default=12)
    p.add_argument("--examples", type=int, default=600000)
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-ne-gap", type=float, default=0.01)
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    args.net = iptables_usable()
    if not args.net:
        print("chaos: iptables is not usable here: no network faults (kill and stop only)")

    job = os.path.join(args.workdir, "job.json")
    # The undisturbed job's length: the faults' schedule plus a margin.
    fault_seconds = max(args.stop_seconds, args.net_seconds)
    wanted_seconds = args.first_fault_seconds + args.rounds * (args.interval + fault_seconds) + 20
    steps = args.examples / (args.trainers * BATCH_SIZE)
    step_delay_ms = math.ceil(1000 * wanted_seconds / steps)
    print(f"chaos: {args.rounds} faults want a job of >= {wanted_seconds:.0f} s: every trainer"
          f" sleeps {step_delay_ms} ms after each of its {steps:.0f} steps", flush=True)
    write_job(job, "chaos", args.examples, args.trainers, restarts=args.rounds + 5,
              step_delay_ms=step_delay_ms)
    base_dir = os.path.join(args.workdir, "undisturbed")
    chaos_dir = os.path.join(args.workdir, "chaos")
    rc, _, log = run_job(args, job, base_dir, chaos=False)
    if rc != 0:
        raise SystemExit(f"the undisturbed run failed (exit {rc}); see {log}")
    with open(os.path.join(base_dir, "report.json")) as f:
        base = json.load(f)
    base_keys = check_keys(args, base_dir)

    rc, faults, log = run_job(args, job, chaos_dir, chaos=True)
    completed = rc == 0 and os.path.exists(os.path.join(chaos_dir, "report.json"))
    ne_gap = float("nan")
    keys_lost = -1
    ok = completed
    if completed:
        with open(os.path.join(chaos_dir, "report.json")) as f:
            report = json.load(f)
        ne_gap = report["eval_ne"] / base["eval_ne"] - 1
        keys = check_keys(args, chaos_dir)
        keys_lost = int(base_keys["keys"]) - int(keys["keys"])
        same_set = keys["key_hash"] == base_keys["key_hash"] and keys_lost == 0
        print(f"chaos: undisturbed eval NE {base['eval_ne']:.5f}, with faults {report['eval_ne']:.5f}"
              f" ({100 * ne_gap:+.2f}%), restarts {report.get('restarts')}, examples"
              f" {report.get('examples')} (undisturbed {base.get('examples')})")
        print(f"chaos: keys {keys['keys']} (undisturbed {base_keys['keys']}), duplicates"
              f" {keys['duplicates']}, misplaced {keys['misplaced']}, same key set {same_set}")
        ok = (same_set and int(keys["duplicates"]) == 0 and int(keys["misplaced"]) == 0
              and abs(ne_gap) <= args.max_ne_gap)
    else:
        print(f"chaos: the job did not finish (exit {rc}); see {log}")
    if len(faults) < args.rounds:
        print(f"chaos: the job ended after {len(faults)} of {args.rounds} faults")
        ok = False
    by_kind = {k: sum(1 for f in faults if f[1] == k) for k in ("kill", "stop", "net")}
    print(f"RESULT name=chaos rounds={args.rounds} faults={len(faults)} kills={by_kind['kill']}"
          f" stops={by_kind['stop']} nets={by_kind['net']} completed={int(completed)}"
          f" keys_lost={keys_lost} ne_gap={ne_gap:.4f} pass={int(ok)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

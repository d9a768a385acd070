"""Faults during live resharding of a local job (bench/reshard-chaos.sh).

Runs one job (`shadowsync run`, 2 trainers pushing throughout) undisturbed,
then again while round after round reshards it between 2 and 3 parameter
servers and, during each reshard, injects one fault:
  launcher  the launcher SIGKILLs itself at a reshard kill point (freeze,
            copy, adopt or drop; SHADOWSYNC_KILL_POINT), taking every child
            with it; `run --resume` repairs the shard maps and finishes the
            reshard;
  ps        SIGKILL of a random parameter server while the reshard runs; the
            launcher restarts it, and repairs the maps if the step was cut.
Then it checks that every fault was injected, that the job finished, and with
bench/chaos_check.cc that every embedding key is stored exactly once, on the
server owning its slot, and that the key set equals the undisturbed run's.
Last line:
  RESULT name=reshard-chaos rounds=.. faults=.. launcher_kills=.. ps_kills=..
         completed=.. rows_lost=.. double_owned=.. misplaced=.. pass=..
"""

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import time

import chaos

KILL_POINTS = ["freeze", "copy", "adopt", "drop"]


def launch(args, job, out, resume, kill_point, log):
    env = dict(os.environ)
    env.pop("SHADOWSYNC_KILL_POINT", None)
    if kill_point:
        env["SHADOWSYNC_KILL_POINT"] = kill_point
    argv = [args.bin, "run", job, "--out", out] + (["--resume"] if resume else [])
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)


def scale(args, out, ps):
    """Asks the running launcher for `ps` servers; returns the scale process."""
    return subprocess.Popen([args.bin, "scale", out, "--ps", str(ps)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def leftovers(out):
    """Pids of processes still running in the run directory `out`."""
    r = subprocess.run(["pgrep", "-f", out + "/"], capture_output=True, text=True)
    return r.stdout.split()


def servers_now(out):
    with open(os.path.join(out, "launch.json")) as f:
        state = json.load(f)
    return int(state["parameter_servers"])


def run_chaos(args, job, out):
    """The job with faults. Returns (rc, faults)."""
    rng = random.Random(args.seed)
    faults = []
    log_path = os.path.join(args.workdir, "chaos.log")
    with open(log_path, "w") as log:
        resume = False
        while True:
            # Each launcher life ends in a launcher fault, or with the job.
            kill_point = None
            if len(faults) < args.rounds and rng.random() < args.launcher_share:
                kill_point = f"{rng.choice(KILL_POINTS)}#{rng.randint(1, 3)}"
            # Waited for below: a resumed launcher writes it anew once its
            # reshard is finished and the trainers run again.
            ready = os.path.join(out, "trainer-1.ready")
            if os.path.exists(ready):
                os.remove(ready)
            launcher = launch(args, job, out, resume, kill_point, log)
            resume = True
            started = time.time()
            while launcher.poll() is None and time.time() - started < 120 and not os.path.exists(
                    ready):
                time.sleep(0.2)
            time.sleep(args.settle_seconds)
            while launcher.poll() is None and len(faults) < args.rounds:
                target = 3 if servers_now(out) == 2 else 2
                request = scale(args, out, target)
                if kill_point is None:
                    # A parameter server dies mid-reshard.
                    time.sleep(rng.uniform(0.05, args.ps_kill_window))
                    procs = chaos.children(launcher.pid)
                    servers = sorted(n for n, (_, role, _) in procs.items() if role == "ps")
                    if servers and request.poll() is None:
                        name = rng.choice(servers)
                        try:
                            os.kill(procs[name][0], signal.SIGKILL)
                            faults.append(("ps", name))
                            print(f"reshard-chaos: round {len(faults)}: SIGKILL {name} while"
                                  f" resharding to {target}", flush=True)
                        except ProcessLookupError:
                            pass
                # Until the answer, or the launcher's death (reaped here, so
                # that `scale` sees it gone).
                while request.poll() is None:
                    if launcher.poll() is not None:
                        request.kill()
                    time.sleep(0.1)
                request.communicate()
                if launcher.poll() is not None:
                    break
                time.sleep(args.settle_seconds)
            rc = launcher.wait()
            if rc == -signal.SIGKILL and kill_point is not None:
                faults.append(("launcher", kill_point))
                print(f"reshard-chaos: round {len(faults)}: the launcher died at {kill_point};"
                      " resuming", flush=True)
                for _ in range(400):
                    if not leftovers(out):
                        break
                    time.sleep(0.05)
                continue
            return rc, faults, log_path


def main():
    p = chaos.parser(__doc__)
    p.add_argument("--rounds", type=int, default=30, help="faults to inject")
    p.add_argument("--launcher-share", type=float, default=0.5,
                   help="share of the faults that kill the launcher (the rest kill a server)")
    p.add_argument("--ps-kill-window", type=float, default=1.5,
                   help="a server dies up to this many seconds into a reshard")
    p.add_argument("--settle-seconds", type=float, default=2)
    p.add_argument("--seconds", type=float, default=0,
                   help="length of the undisturbed job (default: from --rounds)")
    p.add_argument("--examples", type=int, default=400000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)

    trainers = 2
    wanted = args.seconds or 30 + 12 * args.rounds
    steps = args.examples / (trainers * chaos.BATCH_SIZE)
    step_delay_ms = math.ceil(1000 * wanted / steps)
    job = os.path.join(args.workdir, "job.json")
    chaos.write_job(job, "reshard-chaos", args.examples, trainers, restarts=3 * args.rounds + 10,
                    step_delay_ms=step_delay_ms)
    print(f"reshard-chaos: a job of >= {wanted:.0f} s ({step_delay_ms} ms after each of"
          f" {steps:.0f} steps per trainer), {args.rounds} faults", flush=True)

    base_dir = os.path.join(args.workdir, "undisturbed")
    chaos_dir = os.path.join(args.workdir, "chaos")
    for d in (base_dir, chaos_dir):
        subprocess.run(["rm", "-rf", d], check=True)
    undisturbed = argparse.Namespace(**vars(args), first_fault_seconds=0, net=False)
    rc, _, log = chaos.run_job(undisturbed, job, base_dir, chaos=False)
    if rc != 0:
        raise SystemExit(f"the undisturbed run failed (exit {rc}); see {log}")
    base_keys = chaos.check_keys(args, base_dir)

    rc, faults, log = run_chaos(args, job, chaos_dir)
    completed = rc == 0 and os.path.exists(os.path.join(chaos_dir, "report.json"))
    rows_lost = double_owned = misplaced = -1
    ok = completed and len(faults) >= args.rounds
    if completed:
        keys = chaos.check_keys(args, chaos_dir)
        rows_lost = int(base_keys["keys"]) - int(keys["keys"])
        double_owned = int(keys["duplicates"])
        misplaced = int(keys["misplaced"])
        same_set = keys["key_hash"] == base_keys["key_hash"]
        with open(os.path.join(chaos_dir, "report.json")) as f:
            report = json.load(f)
        print(f"reshard-chaos: keys {keys['keys']} (undisturbed {base_keys['keys']}), same key set"
              f" {same_set}, duplicates {double_owned}, misplaced {misplaced}; reshards in the"
              f" report {len(report.get('reshards', []))}, restarts {report.get('restarts')},"
              f" examples {report.get('examples')}")
        ok = ok and same_set and rows_lost == 0 and double_owned == 0 and misplaced == 0
    else:
        print(f"reshard-chaos: the job did not finish (exit {rc}); see {log}")
    launcher_kills = sum(1 for kind, _ in faults if kind == "launcher")
    print(f"RESULT name=reshard-chaos rounds={args.rounds} faults={len(faults)}"
          f" launcher_kills={launcher_kills} ps_kills={len(faults) - launcher_kills}"
          f" completed={int(completed)} rows_lost={rows_lost} double_owned={double_owned}"
          f" misplaced={misplaced} pass={int(ok)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

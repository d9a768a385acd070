"""A whole ShadowSync job as local processes on loopback, for the sync benchmarks.

Starts P `shadowsync ps`, S `shadowsync syncer` and N `shadowsync worker`
processes of one job file, waits for the workers, and returns their JSON
reports. Every server writes a ready file with its ports, so nothing races on
port numbers. Standard library only.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time


class ClusterError(RuntimeError):
    pass


def _wait_ready(path, proc, what, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{what} exited with {proc.returncode} before it was ready")
        if os.path.exists(path):
            with open(path) as f:
                parts = f.read().split()
            if parts:
                return int(parts[0])
        time.sleep(0.02)
    raise ClusterError(f"{what} not ready after {timeout}s")


def write_job(path, *, algorithm, trainers, threads, batch_size, lr, ps, syncers,
              hash_buckets, interval=10, min_interval_ms=0, extra_sync=None,
              dense_precision=None):
    """A ShadowSyncJob in JSON (a YAML subset), DLRM-small by default."""
    sync = {"algorithm": algorithm, "interval": interval, "minIntervalMs": min_interval_ms}
    sync.update(extra_sync or {})
    job = {
        "apiVersion": "shadowsync.io/v1alpha1",
        "kind": "ShadowSyncJob",
        "metadata": {"name": "bench"},
        "spec": {
            "model": {"criteoTables": {"hashBuckets": hash_buckets}},
            "data": {"format": "criteo-tsv", "paths": ["unused"]},
            "trainer": {"replicas": trainers, "threads": threads, "batchSize": batch_size,
                        "learningRate": lr},
            "parameterServer": {"replicas": ps},
            "syncer": {"replicas": syncers},
            "sync": sync,
        },
    }
    if dense_precision:
        job["spec"]["trainer"]["densePrecision"] = dense_precision
    with open(path, "w") as f:
        json.dump(job, f, indent=2)


class Cluster:
    """ps and syncer processes; workers are run by run_workers()."""

    def __init__(self, binary, workdir, *, ps=2, syncers=1, hash_buckets=1_000_000, lr=0.02,
                 cache_bytes=256 << 20, member_timeout=10, syncer_delay_ms=0,
                 syncer_reply_delay_ms=0):
        self.binary = binary
        self.workdir = workdir
        self.procs = []
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir)
        # Fixed ports would race with other jobs; the ps peers list needs the
        # addresses up front, so pick free ports first. A port picked so can
        # still be taken before its ps binds it (by the ps before it binding
        # its metrics port to 0, say): start the parameter servers again on
        # fresh ports then.
        for attempt in range(3):
            ps_ports = [_free_port() for _ in range(ps)]
            self.ps_addresses = [f"127.0.0.1:{p}" for p in ps_ports]
            try:
                for i in range(ps):
                    ready = os.path.join(workdir, f"ps{i}.ready")
                    self._start(
                        [binary, "ps", "--listen", self.ps_addresses[i], "--metrics-listen",
                         "127.0.0.1:0", "--peers", ",".join(self.ps_addresses), "--self-index",
                         str(i), "--db", os.path.join(workdir, f"ps{i}"), "--hash-buckets",
                         str(hash_buckets), "--lr", str(lr), "--cache-bytes", str(cache_bytes),
                         "--ready-file", ready],
                        f"ps{i}", ready)
                break
            except ClusterError as e:
                self.stop()
                if attempt == 2 or "cannot bind" not in str(e):
                    raise
                print(f"cluster: {e}; starting the parameter servers on other ports",
                      file=sys.stderr)
                for i in range(ps):
                    shutil.rmtree(os.path.join(workdir, f"ps{i}"), ignore_errors=True)
        # A server that fails to start must not leave the others running: the
        # caller gets no Cluster to stop.
        try:
            self.syncer_addresses = []
            for i in range(syncers):
                ready = os.path.join(workdir, f"syncer{i}.ready")
                port = self._start(
                    [binary, "syncer", "--listen", "127.0.0.1:0", "--metrics-listen",
                     "127.0.0.1:0", "--member-timeout-seconds", str(member_timeout),
                     "--ready-file", ready, "--reply-delay-ms", str(syncer_reply_delay_ms)],
                    f"syncer{i}", ready)
                address = f"127.0.0.1:{port}"
                if syncer_delay_ms > 0:
                    # Trainers reach this syncer through a proxy adding one-way delay.
                    ready = os.path.join(workdir, f"proxy{i}.ready")
                    port = self._start(
                        [sys.executable,
                         os.path.join(os.path.dirname(__file__), "latency_proxy.py"),
                         "--target", address, "--delay-ms", str(syncer_delay_ms),
                         "--ready-file", ready], f"proxy{i}", ready)
                    address = f"127.0.0.1:{port}"
                self.syncer_addresses.append(address)
        except BaseException:
            self.stop()
            raise

    def _start(self, argv, name, ready):
        path = os.path.join(self.workdir, name + ".log")
        with open(path, "w") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        try:
            return _wait_ready(ready, proc, name)
        except ClusterError as e:
            with open(path) as f:
                tail = f.read()[-2000:]
            raise ClusterError(f"{e}:\n{tail}") from None

    def run_workers(self, job_path, trainers, data, eval_data=None, max_examples=-1,
                    preload=True, algorithm=None, timeout=3600, extra=None,
                    per_worker_extra=None):
        procs = []
        for i in range(trainers):
            report = os.path.join(self.workdir, f"worker{i}.json")
            argv = [self.binary, "worker", "--config", job_path, "--index", str(i),
                    "--ps", self.ps_addresses[0], "--metrics-listen", "127.0.0.1:0",
                    "--data", data, "--max-examples", str(max_examples),
                    "--report-json", report]
            if self.syncer_addresses:
                argv += ["--syncer", ",".join(self.syncer_addresses)]
            if eval_data:
                argv += ["--eval-data", eval_data]
            if preload:
                argv.append("--preload")
            if algorithm:
                argv += ["--algorithm", algorithm]
            argv += extra or []
            argv += (per_worker_extra or {}).get(i, [])
            log = open(os.path.join(self.workdir, f"worker{i}.log"), "w")
            procs.append((subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), report))
        reports = []
        deadline = time.time() + timeout
        for i, (proc, report) in enumerate(procs):
            try:
                rc = proc.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                for p, _ in procs:
                    p.kill()
                raise ClusterError(f"worker {i} timed out")
            if rc != 0:
                with open(os.path.join(self.workdir, f"worker{i}.log")) as f:
                    tail = f.read()[-2000:]
                raise ClusterError(f"worker {i} exited with {rc}:\n{tail}")
            with open(report) as f:
                reports.append(json.load(f))
        return reports

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

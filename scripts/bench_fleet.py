#!/usr/bin/env python3
# scripts/bench_fleet.py — a day of a simulated fleet in a local S3 bucket, one query over it:
# stacks-query on this machine (over the bucket's directory, and over S3) next to the same
# query on a Ballista cluster of 1 and of 2 executors; S3 requests per query counted by a proxy.
# Writes its section of BENCHMARKS.md (between markers). Run through scripts/bench
# (BENCH_ONLY=fleet).
"""Fleet benchmark. A real recording (the bundled mixed workload, CPU at 999 Hz and off-CPU
intervals) is replicated into BENCH_FLEET_HOSTS hosts (default 20) of BENCH_FLEET_ROWS rows in
all (default 50M), each host's rows spread over one day, and packed by one stacks-pack per host
(in a UTS namespace named after it) into s3://bench/fleet on s3s-fs. Environment:
CARGO_TARGET_DIR, BENCH_OUT, BENCH_REPS (default 3), BENCH_KEEP (keep the scratch directory and
reuse its bucket)."""

import http.client
import http.server
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import benchmd

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR") or Path.home() / ".cache/stacks-target")
BIN = TARGET / "release"
OUT = Path(os.environ.get("BENCH_OUT") or ROOT / "BENCHMARKS.md")
REPS = int(os.environ.get("BENCH_REPS") or 3)
HOSTS = int(os.environ.get("BENCH_FLEET_HOSTS") or 20)
ROWS = int(os.environ.get("BENCH_FLEET_ROWS") or 50_000_000)
BEGIN, END = "<!-- bench-fleet:begin -->", "<!-- bench-fleet:end -->"
KEY, SECRET = "bench", "benchsecret"
DAY_NS = 86_400 * 10**9
# The fixed query: the `cpu` query (CPU by thread and stack, stacks joined once) over every
# host and the whole day.
QUERY = "cpu"
# Task slots per executor: a task reads its partition's files one after the other, so reads
# from a store wait on the network and slots beyond the cores keep more requests in flight.
SLOTS = 8
S3S = shutil.which("s3s-fs") or str(Path.home() / ".cargo/bin/s3s-fs")


class BenchError(Exception):
    pass


def log(msg):
    print(f"bench-fleet: {msg}", file=sys.stderr, flush=True)


def tool(name):
    return str(BIN / name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, timeout=30):
    deadline = time.time() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline:
                raise BenchError(f"{what} did not listen on {port}")
            time.sleep(0.1)


# argv: IN OUT HOST ROWS DAY_START_NS — the stream IN written again and again as host HOST
# (column `host` and the metadata) to ROWS rows on OUT, its copies spread evenly over one day.
GEN = r"""
import sys
import pyarrow as pa, pyarrow.compute as pc, pyarrow.ipc as ipc
src, dst, host, total, t0 = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
t = ipc.open_stream(src).read_all()
md = dict(t.schema.metadata or {})
md[b"stacks.host"] = host.encode()

def one_dictionary(c):
    last = c.chunk(c.num_chunks - 1).dictionary
    return pa.chunked_array([pa.DictionaryArray.from_arrays(ch.indices, last) for ch in c.chunks], c.type)

cols = [one_dictionary(c) if pa.types.is_dictionary(c.type) else c for c in t.columns]
t = pa.Table.from_arrays(cols, schema=pa.schema(list(t.schema), metadata=md))
h = t.schema.get_field_index("host")
t = t.set_column(h, t.schema.field(h), pa.array([host] * t.num_rows, t.schema.field(h).type))
i = t.schema.get_field_index("time")
typ = t.schema.field(i).type
times = t.column(i).cast(pa.int64())
times = pc.subtract(times, pc.min(times))
copies = (total + t.num_rows - 1) // t.num_rows
step = 86_400 * 10**9 // copies
with ipc.new_stream(pa.OSFile(dst, "wb"), t.schema) as w:
    done = k = 0
    while done < total:
        n = min(t.num_rows, total - done)
        part = t.slice(0, n).set_column(i, t.schema.field(i), pc.add(times.slice(0, n), t0 + k * step).cast(typ))
        for b in part.to_batches(max_chunksize=65536):
            w.write_batch(b)
        done, k = done + n, k + 1
"""


class Counter(http.server.BaseHTTPRequestHandler):
    """A forwarding proxy to the S3 server that counts requests: LIST, GET, HEAD, other."""

    protocol_version = "HTTP/1.1"
    upstream = 0
    counts = {}
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def relay(self):
        kind = self.command
        if self.command == "GET" and ("list-type=" in self.path or self.path.rstrip("/").count("/") <= 1):
            kind = "LIST"
        with Counter.lock:
            Counter.counts[kind] = Counter.counts.get(kind, 0) + 1
        body = None
        if "Content-Length" in self.headers:
            body = self.rfile.read(int(self.headers["Content-Length"]))
        conn = http.client.HTTPConnection("127.0.0.1", Counter.upstream, timeout=120)
        conn.request(self.command, self.path, body=body, headers=dict(self.headers))
        r = conn.getresponse()
        data = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        conn.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = relay


def start_proxy(upstream):
    Counter.upstream = upstream
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counter)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def env_for(port):
    return dict(os.environ, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET,
                AWS_REGION="us-east-1", AWS_ENDPOINT=f"http://127.0.0.1:{port}", AWS_ALLOW_HTTP="true",
                RUST_LOG="warn")


def run(argv, env, what):
    """Wall seconds of `argv` (stdout discarded); fails on a non-zero exit."""
    t0 = time.perf_counter()
    p = subprocess.run([str(a) for a in argv], env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise BenchError(f"{what}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return wall


def fill(work, s3_port):
    """Record once, then pack HOSTS hosts' days into the bucket; returns facts of the store."""
    rec = work / "rec.arrow"
    log("recording the mixed workload (profile:u:999, switch:u) for 5 s")
    p = subprocess.run(
        f"{tool('stacks-record')} -e profile:u:999,switch:u -- {tool('stacks-workload')} mixed "
        f"--dir {work} --seconds 5 | {tool('stacks-symbolize')} > {rec}",
        shell=True, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise BenchError(f"recording: {p.stderr[-400:]}")
    per_host = ROWS // HOSTS
    day = 1_795_392_000 * 10**9  # 2026-11-23T00:00:00Z
    env = env_for(s3_port)
    t0 = time.perf_counter()
    for h in range(HOSTS):
        host = f"host-{h:02d}"
        stream = work / f"{host}.arrow"
        subprocess.run([sys.executable, "-c", GEN, rec, stream, host, str(per_host), str(day)], check=True)
        pack = subprocess.run(
            ["unshare", "-u", "sh", "-c",
             f'hostname {host} && exec {tool("stacks-pack")} s3://bench/fleet --spool {work}/spool-{host} '
             f'--max-rows 2000000 < {stream}'],
            env=env, stderr=subprocess.PIPE, text=True)
        if pack.returncode != 0:
            raise BenchError(f"packing {host}: {pack.stderr[-400:]}")
        stream.unlink()
        log(f"{host}: {pack.stderr.strip().splitlines()[-1]}")
    log(f"filled the bucket in {time.perf_counter() - t0:.0f} s")


def store_facts(bucket):
    files = [f for f in bucket.rglob("*.parquet")]
    samples = [f for f in files if f.name.endswith(".samples.parquet")]
    hours = {f.parent.parent for f in samples}
    return {
        "objects": len(files),
        "bytes": sum(f.stat().st_size for f in files),
        "hours": len(hours),
        "host_hours": len({f.parent for f in samples}),
    }


def count_rows(local):
    out = subprocess.run([tool("stacks-query"), "-d", local, "-f", "csv", "-c",
                          "SELECT count(*) AS n, count(DISTINCT host) AS hosts FROM samples"],
                         capture_output=True, text=True, check=True)
    n, hosts = out.stdout.strip().splitlines()[1].split(",")
    return int(n), int(hosts)


class Cluster:
    """stacks-scheduler and `executors` stacks-executors on loopback, each with SLOTS task slots."""

    def __init__(self, work, executors, env):
        self.procs = []
        self.port = free_port()
        logs = work / "cluster-logs"
        logs.mkdir(exist_ok=True)
        self.procs.append(subprocess.Popen(
            [tool("stacks-scheduler"), "--bind-host", "127.0.0.1", "--bind-port", str(self.port)],
            env=env, stdout=subprocess.DEVNULL, stderr=open(logs / "scheduler.log", "w")))
        wait_port(self.port, "stacks-scheduler")
        for i in range(executors):
            wd = work / f"executor{i}"
            wd.mkdir(exist_ok=True)
            self.procs.append(subprocess.Popen(
                [tool("stacks-executor"), "--bind-host", "127.0.0.1", "--scheduler-host", "127.0.0.1",
                 "--scheduler-port", str(self.port), "-c", str(SLOTS), "--bind-port", str(free_port()),
                 "--bind-grpc-port", str(free_port()), "--bind-health-port", str(free_port()),
                 "--work-dir", str(wd)],
                env=env, stdout=subprocess.DEVNULL, stderr=open(logs / f"executor{i}.log", "w")))
        self.url = f"df://127.0.0.1:{self.port}"
        deadline = time.time() + 60
        while True:
            probe = subprocess.run([tool("stacks-query"), "--cluster", self.url, "-d", "s3://bench/fleet",
                                    "--from", "2026-11-23T00:00:00Z", "--to", "2026-11-23T01:00:00Z",
                                    "-f", "csv", "-c", "SELECT count(*) FROM samples"],
                                   env=env, capture_output=True)
            if probe.returncode == 0:
                break
            if time.time() > deadline:
                raise BenchError(f"the cluster did not answer: {probe.stderr.decode()[-300:]}")
            time.sleep(0.5)

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()


def main():
    benchmd.preflight("bench-fleet", "a UTS namespace per simulated host",
                      [tool(t) for t in ["stacks-record", "stacks-symbolize", "stacks-pack", "stacks-query",
                                         "stacks-scheduler", "stacks-executor", "stacks-workload"]])
    if not os.path.exists(S3S):
        sys.exit("bench-fleet: error: s3s-fs is missing (scripts/setup installs it)")
    keep = bool(os.environ.get("BENCH_KEEP"))
    work = Path(os.environ.get("BENCH_KEEP") or tempfile.mkdtemp(prefix="stacks-bench-fleet."))
    work.mkdir(parents=True, exist_ok=True)
    s3_port = free_port()
    (work / "s3/bench").mkdir(parents=True, exist_ok=True)
    s3 = subprocess.Popen([S3S, "--host", "127.0.0.1", "--port", str(s3_port), "--access-key", KEY,
                           "--secret-key", SECRET, work / "s3"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    clusters = []
    try:
        wait_port(s3_port, "s3s-fs")
        bucket = work / "s3/bench/fleet"
        if not any(bucket.rglob("*.samples.parquet")):
            fill(work, s3_port)
        facts = store_facts(bucket)
        rows, hosts = count_rows(bucket)
        log(f"store: {rows:,} rows of {hosts} hosts, {facts['objects']} objects, {facts['bytes']:,} bytes")
        env = env_for(s3_port)
        load_before = os.getloadavg()
        walls = {}

        def timed(name, argv):
            walls[name] = [run(argv, env, name) for _ in range(REPS)]
            log(f"{name}: {statistics.median(walls[name]):.2f} s")

        timed("here, the directory", [tool("stacks-query"), "-d", bucket, QUERY, "-f", "arrow"])
        timed("here, over S3", [tool("stacks-query"), "-d", "s3://bench/fleet", QUERY, "-f", "arrow"])
        for n in (1, 2):
            c = Cluster(work, n, env)
            clusters.append(c)
            timed(f"cluster, {n} executor{'s' if n > 1 else ''}",
                  [tool("stacks-query"), "--cluster", c.url, "-d", "s3://bench/fleet", QUERY, "-f", "arrow"])
            c.stop()
            clusters.remove(c)
        window = [tool("stacks-query"), "-d", "s3://bench/fleet", "--from", "2026-11-23T07:00:00Z",
                  "--to", "2026-11-23T09:00:00Z", QUERY, "-f", "arrow"]
        timed("here, over S3, two hours (--from/--to)", window)
        load_after = os.getloadavg()

        # Requests: each query once more, through the counting proxy.
        proxy = start_proxy(s3_port)
        penv = env_for(proxy.server_address[1])
        requests = {}
        for name, argv in [("whole day", [tool("stacks-query"), "-d", "s3://bench/fleet", QUERY, "-f", "arrow"]),
                           ("two hours", window)]:
            Counter.counts = {}
            run(argv, penv, f"{name} through the proxy")
            requests[name] = dict(Counter.counts)
        c = Cluster(work, 2, penv)
        clusters.append(c)
        Counter.counts = {}
        run([tool("stacks-query"), "--cluster", c.url, "-d", "s3://bench/fleet", QUERY, "-f", "arrow"], penv,
            "the cluster through the proxy")
        requests["whole day, cluster of 2"] = dict(Counter.counts)
        c.stop()
        clusters.remove(c)
        proxy.shutdown()
        write(rows, hosts, facts, walls, requests, load_before, load_after)
    finally:
        for c in clusters:
            c.stop()
        s3.kill()
        s3.wait()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def write(rows, hosts, facts, walls, requests, load_before, load_after):
    med = {k: statistics.median(v) for k, v in walls.items()}
    base = med["here, the directory"]
    lines = [BEGIN, "## Many hosts: a day of 20 hosts in a bucket, one query here and on a Ballista cluster (`scripts/bench_fleet.py`)", ""]
    lines.append(
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `scripts/bench_fleet.py` "
        f"(`BENCH_ONLY=fleet scripts/bench`), {REPS} runs per figure (medians); load average "
        f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after. "
        f"This machine: {os.cpu_count()} cores; the S3 server, the scheduler and every executor share them.")
    lines.append("")
    lines.append(
        f"Store: a real recording (`stacks-workload mixed`, `-e profile:u:999,switch:u`, 5 s) replicated into "
        f"{hosts} hosts of {rows // hosts:,} rows each, spread over one day (2026-11-23), packed by one "
        f"`stacks-pack s3://bench/fleet` per host (each in a UTS namespace named after its host) into s3s-fs on "
        f"loopback: {rows:,} rows, {facts['objects']:,} objects in {facts['hours']} hour prefixes "
        f"({facts['host_hours']} host-hours), {facts['bytes'] / 2**20:,.0f} MiB "
        f"({facts['bytes'] / rows:.2f} bytes per row).")
    lines.append("")
    lines.append(f"Query: the bundled `{QUERY}` (CPU samples by thread and stack, each distinct stack joined once), "
                 "every host, the whole day unless said, output as an Arrow stream. stacks-query reads a store "
                 f"with {16} partitions; the cluster's executors have {SLOTS} task slots each.")
    lines.append("")
    lines.append("| where | wall s | rows/s | ÷ here, the directory |")
    lines.append("|---|---:|---:|---:|")
    for k, v in med.items():
        lines.append(f"| {k} | {v:.2f} | {rows / v:,.0f} | {base / v:.2f}× |")
    lines.append("")
    lines.append("S3 requests per query (counted by a forwarding proxy in a separate run; LIST = ListObjectsV2):")
    lines.append("")
    kinds = sorted({k for r in requests.values() for k in r})
    lines.append("| query | " + " | ".join(kinds) + " | all |")
    lines.append("|---|" + "---:|" * (len(kinds) + 1))
    for name, r in requests.items():
        lines.append(f"| {name} | " + " | ".join(str(r.get(k, 0)) for k in kinds) + f" | {sum(r.values())} |")
    lines.append("")
    lines.append(END)
    benchmd.replace_section(OUT, BEGIN, END, "\n".join(lines) + "\n")
    log(f"wrote {OUT}")


if __name__ == "__main__":
    try:
        main()
    except BenchError as e:
        sys.exit(f"bench-fleet: error: {e}")

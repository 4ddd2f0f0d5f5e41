"""The explore/ notebooks against ground truth: record workloads that report what they did, run every notebook over that store, check figures and numbers.

The store is recorded here with the workspace's binaries ($STACKS_BIN, else $CARGO_TARGET_DIR/debug,
as scripts/test builds them): `stacks-workload mixed` (a CPU burner, a sleeper, a 16 MiB writer,
64 MiB of touched memory, 4 MiB each way over TCP), `states` (five threads in known states) and
`spans` (tracing spans of known CPU time) and `heap-sites` (three allocation sites of known bytes,
one a leak, recorded with `-e alloc,rss`), each through stacks-record | stacks-symbolize |
stacks-pack into one store. Each workload's JSON report is the truth the numbers the notebooks
show (computed by the same stacks_explore functions) are checked against.

Recording needs BPF (root and BTF): without it these tests are skipped, saying why, unless
STACKS_REQUIRE_BPF is set, which makes them fail.
"""

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

EXPLORE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(EXPLORE))

import stacks_explore as sx  # noqa: E402

NOTEBOOKS = sorted(p.stem for p in EXPLORE.glob("*.ipynb"))
# Figures each notebook must draw (at least), over a store of every kind.
FIGURES = {
    "01-overview": 2,
    "02-cpu": 2,
    "03-active-threads": 1,
    "04-latency": 1,
    "05-swimlane": 1,
    "06-offcpu": 2,
    "07-spans": 4,  # time and IO per span, and a flame graph for each of burn, inner, outer, [no span]: 6
    "08-memory-network": 3,
    "09-heap": 2,
}
# PNGs the notebooks write when $STACKS_EXPLORE_IMG is set (README shows active-threads.png).
SAVED = [
    "cpu-flame",
    "cpu-diff",
    "active-threads",
    "latency",
    "swimlane",
    "offcpu-reasons",
    "offcpu-flame",
    "span-time",
    "rss",
    "rss-flame",
    "connections",
    "heap",
    "alloc-flame",
]
MIB = 1 << 20


def measured(what: str, got: float, want: float, unit: str = "s") -> None:
    """Print a measurement next to its truth (seen with pytest -s, and on failure)."""
    off = f"{(got - want) / want * 100:+.1f}%" if want else "n/a"
    print(f"explore: {what}: {got:.4g} {unit} recorded, {want:.4g} {unit} true ({off})", file=sys.stderr)


def bin_dir() -> Path:
    if os.environ.get("STACKS_BIN"):
        return Path(os.environ["STACKS_BIN"])
    target = os.environ.get("CARGO_TARGET_DIR") or str(Path.home() / ".cache/stacks-target")
    return Path(target) / "debug"


def require_bpf(test: str) -> None:
    """Skip (saying why) when BPF is unavailable; fail instead when STACKS_REQUIRE_BPF is set."""
    if os.geteuid() != 0:
        reason = "not running as root"
    elif not Path("/sys/kernel/btf/vmlinux").exists():
        reason = "kernel has no BTF (/sys/kernel/btf/vmlinux)"
    else:
        return
    if os.environ.get("STACKS_REQUIRE_BPF"):
        pytest.fail(f"{test}: BPF is required (STACKS_REQUIRE_BPF is set) but {reason}")
    pytest.skip(f"{test}: BPF unavailable: {reason}")


def steal_seconds() -> float:
    """CPU time the hypervisor took from this VM's CPUs so far (/proc/stat's steal, all CPUs)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    assert fields[0] == "cpu", f"/proc/stat starts with {fields[0]!r}"
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def record(store: Path, work: Path, name: str, events: str, args: list[str]) -> dict:
    """Record `stacks-workload ARGS` under `events` into `store`; return the workload's report,
    with `steal_s`: the CPU time stolen from the VM while it ran."""
    b = bin_dir()
    for tool in ("stacks-record", "stacks-symbolize", "stacks-pack", "stacks-workload"):
        assert (b / tool).exists(), f"{b / tool} is missing: build the workspace binaries first (scripts/test does)"
    report = work / f"{name}.json"
    cmd = (
        f"set -o pipefail; {b}/stacks-record -e {events} -- {b}/stacks-workload --report {report} "
        f"{' '.join(args)} | {b}/stacks-symbolize | {b}/stacks-pack {store}"
    )
    steal = steal_seconds()
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=180)
    steal = steal_seconds() - steal
    assert out.returncode == 0, f"recording {name} failed:\n{out.stderr[-3000:]}"
    return {**json.loads(report.read_text()), "steal_s": steal}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A store of the three workloads, and their reports."""
    require_bpf("explore notebooks")
    work = tmp_path_factory.mktemp("explore", numbered=True)
    # stacks-record runs the workload as root: keep its files off tmpfs, so fsync reaches a disk.
    disk = Path(os.environ.get("STACKS_TEST_DISK", "/var/tmp")) / f"stacks-explore-{os.getpid()}"
    disk.mkdir(parents=True, exist_ok=True)
    store = work / "store"
    truth = {
        "mixed": record(
            store, work, "mixed",
            "profile:u:999,switch:uk,rss:u:29,block:uk,vfs:u,net:u,state:uk:20",
            ["mixed", "--dir", str(disk), "--seconds", "3"],
        ),
        "states": record(
            store, work, "states",
            "switch:uk,state:uk:50",
            ["states", "--seconds", "2", "--dir", str(disk)],
        ),
        "spans": record(
            store, work, "spans",
            "profile:u:999,switch:u,vfs:u,block:u,span:u",
            ["spans", "--file", str(disk / "spans.io"), "--seconds", "3"],
        ),
        # 64 KiB: the leak (64 MiB) gets ~1,000 samples (±3%).
        "heap": record(
            store, work, "heap",
            "alloc:u:64K,rss:u:29",
            ["heap-sites", "--small", "1000000", "--leak", "16384", "--big", "100"],
        ),
    }
    yield store, truth, work
    shutil.rmtree(disk, ignore_errors=True)


def execute(name: str, env: dict) -> nbformat.NotebookNode:
    """Run notebook `name` headless with `env` added to the kernel's environment; return it with its outputs (errors kept)."""
    nb = nbformat.read(EXPLORE / f"{name}.ipynb", as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(EXPLORE)}})
    try:
        # The kernel's stderr (its start-up warnings) is not the test's output; cell errors are outputs.
        client.execute(env={**os.environ, **env}, stderr=subprocess.DEVNULL)
    except CellExecutionError:
        pass
    return nb


def errors(nb) -> list[str]:
    return [
        f"{o.get('ename')}: {o.get('evalue')}"
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]


def images(nb) -> list[bytes]:
    return [
        base64.b64decode(o["data"]["image/png"])
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]


def shows(nb, df) -> bool:
    """Whether a cell of `nb` displayed the table `df` as it is (its text form, under the notebooks' display options)."""
    sx.style()
    want = repr(df)
    return any(
        o.get("data", {}).get("text/plain") == want for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )


def text(nb) -> str:
    """Every text and HTML output of `nb`, joined."""
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            parts.append(o.get("text", ""))
            for kind in ("text/plain", "text/html"):
                parts.append(o.get("data", {}).get(kind, ""))
    return "\n".join(parts)


@pytest.fixture(scope="module")
def executed(recorded):
    """Every notebook run over the recorded store, two at a time, with their saved PNGs."""
    store, _, work = recorded
    img = work / "img"
    env = {"STACKS_STORE": str(store), "STACKS_EXPLORE_IMG": str(img)}
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(NOTEBOOKS, pool.map(lambda n: execute(n, env), NOTEBOOKS)))
    print(f"ran {len(runs)} notebooks in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return runs, img


@pytest.fixture(scope="module")
def store(recorded):
    return sx.open_store(str(recorded[0]))


@pytest.fixture(scope="module")
def truth(recorded):
    return recorded[1]


def pid_of(store, tid: int) -> int:
    return int(store.sql("SELECT any_value(pid) AS pid FROM samples WHERE tid = $tid", tid=tid).pid[0])


@pytest.mark.bpf
def test_every_notebook_runs_and_draws_its_figures(executed):
    runs, img = executed
    assert set(runs) == set(FIGURES), f"notebooks {sorted(runs)} against the expected {sorted(FIGURES)}"
    for name, nb in runs.items():
        assert not errors(nb), f"{name}: {errors(nb)}"
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.get("execution_count") for c in code), f"{name}: a cell did not run"
        pngs = images(nb)
        assert len(pngs) >= FIGURES[name], f"{name}: {len(pngs)} figures, expected {FIGURES[name]} or more"
        for png in pngs:
            assert png.startswith(b"\x89PNG") and len(png) > 8000, f"{name}: an empty or tiny figure ({len(png)} bytes)"
    for name in SAVED:
        path = img / f"{name}.png"
        assert path.exists() and path.stat().st_size > 8000, f"{path} was not written"


@pytest.mark.bpf
def test_cpu_of_the_burn_thread_matches_its_clock(executed, store, truth):
    """The mixed workload's `burn` thread: CPU seconds (overview, flame graph) against its own CPU clock."""
    cpu = truth["mixed"]["cpu"]
    tid, want = cpu["tid"], cpu["cpu_ns"] / 1e9
    period = 1 / 999
    threads = store.threads(pid=cpu["pid"]).set_index("tid")
    got = threads.loc[tid, "cpu_s"]
    steal = truth["mixed"]["steal_s"]
    measured("burn thread CPU", got, want)
    # 999 Hz over ~3 s: ±6% and three sampling periods. When the thread shares its CPU (this
    # 2-core machine, busy), which thread a sample lands on is a draw: at 99 Hz its CPU time was
    # off by 10% once; at 999 Hz the spread is a third of that. Time the hypervisor steals from
    # the VM is in the samples (the CPU clock's timer runs on) but not in the thread's clock
    # (the kernel leaves steal out of a task's run time): up to all of it is in the excess. CI
    # once saw +6.2% on a busy host.
    assert abs(got - want) <= 0.06 * want + 3 * period + steal, (
        f"burn thread: {got:.3f} s recorded, {want:.3f} s by its clock, {steal:.3f} s stolen from the VM"
    )
    # The flame graph's data: the stacks through cpu::run hold the thread's CPU time; most of it
    # in burn_heavy (a debug build spends 6% in the loop around it, outside the workload's clock
    # of burn_heavy).
    folded = store.folded("profile", tid=tid, group=("thread",))
    tree = sx.tree(folded)
    run = tree.find(r"^stacks_workload::cpu::run$") / 1e9
    heavy = tree.find(r"^stacks_workload::cpu::burn_heavy$") / 1e9
    measured("cpu::run CPU (flame graph)", run, want)
    measured("burn_heavy CPU (flame graph)", heavy, cpu["heavy_ns"] / 1e9)
    assert abs(run - want) <= 0.06 * want + 3 * period, f"cpu::run {run:.3f} s, the thread's clock {want:.3f} s"
    assert heavy >= 0.85 * cpu["heavy_ns"] / 1e9, f"burn_heavy {heavy:.3f} s, {cpu['heavy_ns'] / 1e9:.3f} s"
    assert abs(folded.value.sum() / 1e9 - got) < 1e-6, "the flame graph's total is the thread's CPU time"
    runs, _ = executed
    assert "burn_heavy" in text(runs["02-cpu"]), "the CPU notebook's top functions name burn_heavy"
    assert shows(runs["01-overview"], store.threads().sort_values("cpu_s", ascending=False).head(30)), "the overview shows each thread's CPU"


@pytest.mark.bpf
def test_threads_per_state_match_the_states_workload(executed, recorded, store, truth):
    """`states`: each thread's sampled time by state (swimlane, active threads) against the state it was kept in."""
    report = truth["states"]
    threads = {t["thread"]: t for t in report["threads"]}
    pid = pid_of(store, threads["spinner"]["tid"])
    states = store.thread_states(pid=pid)
    for name, t in threads.items():
        rows = states[states.tid == t["tid"]]
        total = rows.seconds.sum()
        wall = t["wall_ns"] / 1e9
        measured(f"{name} sampled life", total, wall)
        # Its samples add up to its life, less the passes the recorder could not run on time
        # (skipped, not made up: 0-3% on an idle 2-core machine, 13% to 50% while two builds
        # loaded it six times over), never more.
        period = 1 / 50
        assert 0.25 * wall <= total <= 1.02 * wall + 2 * period, f"{name}: {total:.3f} s sampled, lived {wall:.3f} s"
        # Every pass sees every live thread: in each pass while it lived (its start and end as
        # the workload clocked them, a period inside), one row of it.
        inside = store.sql(
            """SELECT count(DISTINCT time) AS passes, count(*) FILTER (WHERE tid = $tid) AS seen
            FROM samples WHERE kind = 'state' AND pid = $pid
                AND time >= make_timestamp_ns($lo)::TIMESTAMPTZ_NS AND time < make_timestamp_ns($hi)::TIMESTAMPTZ_NS""",
            tid=t["tid"], pid=pid, lo=t["start_ns"] + int(period * 1e9), hi=t["end_ns"] - int(period * 1e9),
        ).iloc[0]
        assert inside.passes >= 10 and inside.seen == inside.passes, f"{name}: in {inside.seen} of {inside.passes} passes"
        share = rows.groupby("state").seconds.sum() / total
        on_cpu = share.get("running", 0) + share.get("runnable", 0)
        if name == "spinner":
            assert on_cpu >= 0.95, f"spinner: {on_cpu:.2f} running or runnable"
        elif name in ("reader", "receiver", "sleeper"):
            # Blocked in its call, never on CPU but for its wake-ups (the sleeper between its sleeps,
            # the others at the end), after which it waits for a CPU as long as the machine makes
            # it: runnable 0-1% of the samples idle, 8-19% at load 7 (two parallel builds on two
            # cores, when the recorder also skipped 40% of its passes).
            assert share.get("sleeping", 0) >= 0.6 and share.get("running", 0) <= 0.05, f"{name}: {share.to_dict()}"
        elif name == "fsyncer":
            assert share.get("uninterruptible", 0) > 0, f"fsyncer never in D: {share.to_dict()}"
    # The average threads the active-threads notebook plots, per sampling pass: the spinner's one
    # thread on (or waiting for) a CPU, the sleeper, reader and receiver (and the main thread,
    # waiting for them) asleep, the fsyncer between D, running and sleeping; six in all.
    summary = store.state_summary(pid=pid).set_index("state").avg_threads
    print(f"explore: states workload, average threads by state: {summary.round(3).to_dict()}", file=sys.stderr)
    on_cpu = summary.get("running", 0) + summary.get("runnable", 0)
    assert 0.95 <= on_cpu <= 2.05, f"threads on or waiting for a CPU: {on_cpu:.2f} ({summary.to_dict()})"
    assert 3.6 <= summary.get("sleeping", 0) <= 5.05, f"threads sleeping: {summary.to_dict()}"
    # One definition (docs/top.md, "Average active threads"): stacks-top's avg_thr of the
    # process's rows by state over its life, its first to its last pass, is the same number.
    life = store.sql(
        "SELECT min(epoch_ns(time)) AS a, max(epoch_ns(time)) AS b FROM samples WHERE kind = 'state' AND pid = $pid",
        pid=pid,
    ).iloc[0]
    top = subprocess.run(
        [str(bin_dir() / "stacks-top"), "-d", str(recorded[0]), "--once", "--kind", "state", "--group", "state",
         "--where", f"pid = {pid}", "--from", str(int(life.a)), "--to", str(int(life.b) + 1), "-f", "json"],
        capture_output=True, text=True, timeout=120,
    )
    assert top.returncode == 0, top.stderr
    top = {r["state"]: r["avg_thr"] for r in json.loads(top.stdout)}
    assert set(top) == set(summary.index), f"stacks-top {top}, explore {summary.to_dict()}"
    for state, avg in summary.items():
        assert abs(top[state] - avg) < 1e-9, f"{state}: stacks-top {top[state]}, explore {avg}"
    # Over the process's passes: the main thread in all, each of the five others in the passes
    # of its life.
    def passes_between(lo: int, hi: int) -> int:
        return int(
            store.sql(
                """SELECT count(DISTINCT time) AS n FROM samples WHERE kind = 'state' AND pid = $pid
                AND time >= make_timestamp_ns($lo)::TIMESTAMPTZ_NS AND time < make_timestamp_ns($hi)::TIMESTAMPTZ_NS""",
                pid=pid, lo=lo, hi=hi,
            ).n[0]
        )

    passes = store.state_summary(pid=pid).passes.iloc[0]
    alive = 1 + sum(passes_between(t["start_ns"], t["end_ns"]) for t in threads.values()) / passes
    assert abs(summary.sum() - alive) <= 0.1, f"{alive:.2f} threads alive per pass: {summary.to_dict()}"
    # The plotted series: six threads in every bucket while all six lived.
    interval = 0.25
    series = store.active_threads(interval, pids=[pid]).groupby("time").threads.sum()
    first = max(t["start_ns"] for t in threads.values())
    last = min(t["end_ns"] for t in threads.values())
    starts = series.index.astype("int64")
    inside = series[(starts >= first) & (starts + int(interval * 1e9) <= last)]
    assert len(inside) >= 4 and (abs(inside - 6) <= 0.01).all(), f"threads per bucket: {series.round(2).to_dict()}"
    runs, _ = executed
    table = store.state_summary().pivot_table(index=["pid", "comm"], columns="state", values="avg_threads", fill_value=0).round(2)
    assert shows(runs["03-active-threads"], table), "the active-threads notebook shows these averages"


@pytest.mark.bpf
def test_bytes_per_connection_are_exact(executed, store, truth):
    """The mixed workload's TCP exchange: each side of the connection sent and received exactly what it says."""
    tcp = truth["mixed"]["tcp"]
    conns = store.connections(pid=truth["mixed"]["cpu"]["pid"])
    client = conns[conns.local == f"127.0.0.1:{tcp['client_port']}"]
    server = conns[conns.local == f"127.0.0.1:{tcp['server_port']}"]
    assert len(client) == 1 and len(server) == 1, conns.to_string()
    for side, row, sent, received in (
        ("client", client.iloc[0], tcp["sent_by_client"], tcp["received_by_client"]),
        ("server", server.iloc[0], tcp["sent_by_server"], tcp["received_by_server"]),
    ):
        assert (row.sent_bytes, row.received_bytes) == (sent, received), f"{side}: {row.to_dict()}"
    flow = store.connection_bytes_over_time(pid=truth["mixed"]["cpu"]["pid"])
    assert flow.bytes.sum() == 2 * (tcp["sent_by_client"] + tcp["sent_by_server"]), "the plotted running totals"
    runs, _ = executed
    assert shows(runs["08-memory-network"], store.connections()), "the notebook shows these bytes per connection"


@pytest.mark.bpf
def test_cpu_per_span_matches_the_workloads_clock(executed, store, truth):
    """`spans`: CPU per span name on the loop's thread against the thread's CPU clock read around each span."""
    report = truth["spans"]
    tid = report["tids"][0]
    costs = store.span_costs(pid=report["pid"], tid=tid).set_index("span")
    period = 1 / 999
    # One iteration's CPU, of each span and in all: what the recorder may leave unlabelled when
    # the first iteration runs before it can read the thread's span (seen under load, 8 iterations
    # in 3 s: 23 ms of burn counted in no span).
    iteration = {span: ns / 1e9 / report["iterations"] for span, ns in report["cpu_ns"].items()}
    for span, ns in report["cpu_ns"].items():
        name = sx.NO_SPAN if span == "none" else span
        got, want = costs.cpu_s.get(name, 0.0), ns / 1e9
        measured(f"CPU in span {span}", got, want)
        # 999 Hz: ±10% and five sampling periods (measured: within 5% idle). Time in no span also
        # holds the loop's own code between the spans (entering and leaving them, reading the
        # clock), outside the workload's clock of it: +4 to +6% in a release build, +8% in a
        # debug one: up to +15%, and the unlabelled first iteration.
        if span == "none":
            low, high = 0.10 * want, 0.15 * want + sum(iteration.values())
        else:
            low, high = 0.10 * want + iteration[span], 0.10 * want
        assert -low - 5 * period <= got - want <= high + 5 * period, f"span {span}: {got:.4f} s recorded, {want:.4f} s"
    assert costs.cpu_s.get("nap", 0) <= 0.02 * costs.cpu_s.sum(), "nap spins no CPU"
    assert costs.loc["io", "write_bytes"] == report["io_bytes"], "the io span's writes, exactly"
    assert costs.loc["burn", "span_ids"] == report["iterations"], "one burn span id per iteration"
    assert report["iterations"] - 1 <= costs.loc["burn", "stays"] <= report["iterations"], "a span row per stay (the first may predate the probes)"
    # The flame graph of a span holds that span's CPU time.
    folded = store.folded("profile", pid=report["pid"], tid=tid, span="burn", group=("thread",))
    assert abs(folded.value.sum() / 1e9 - costs.loc["burn", "cpu_s"]) < 1e-6
    assert shows(executed[0]["07-spans"], store.span_costs(pid=report["pid"])), "the spans notebook shows these costs"


@pytest.mark.bpf
def test_offcpu_reason_and_waits_of_the_sleeper(store, truth):
    """The mixed workload's sleeper: its off-CPU time is its sleeps, in do_nanosleep, under sleep_interval."""
    sleep = truth["mixed"]["sleep"]
    reasons = store.offcpu_reasons(pid=truth["mixed"]["cpu"]["pid"])
    mine = reasons[reasons.tid == sleep["tid"]]
    total = mine.ns.sum() / 1e9
    want = sleep["slept_ns"] / 1e9
    measured("sleeper off CPU", total, want)
    assert abs(total - want) <= 0.05 * want, f"sleeper off CPU {total:.3f} s, slept {want:.3f} s"
    nanosleep = mine[mine.reason == "do_nanosleep"].ns.sum() / 1e9
    assert nanosleep >= 0.9 * total, f"do_nanosleep {nanosleep:.3f} s of {total:.3f} s: {mine.head().to_string()}"
    under = mine[mine.user.str.contains("sleep_interval")].ns.sum() / 1e9
    assert under >= 0.9 * total, "the user stacks are in sleep_interval"


@pytest.mark.bpf
def test_rss_growth_by_stack_and_file_writes(store, truth):
    """The mixed workload's toucher grew RSS by the 64 MiB it touched; the writer's stacks hold its 16 MiB of writes."""
    mixed = truth["mixed"]
    pid = mixed["cpu"]["pid"]
    growth = sx.tree(store.folded("rss", pid=pid)).find(r"touch_memory$")
    want = mixed["touch"]["bytes"]
    measured("RSS growth under touch_memory", growth / MIB, want / MIB, "MiB")
    # Sampled every 29th growth event: the rows through touch_memory stand for its pages (±10%).
    assert abs(growth - want) <= 0.10 * want, f"touch_memory grew RSS by {growth / MIB:.1f} MiB, touched {want / MIB} MiB"
    writes = store.folded("vfs", tid=mixed["write"]["tid"], where="op = 'write'")
    assert writes.value.sum() == mixed["write"]["bytes"], "vfs write bytes of the writer, exactly"
    assert writes.events.sum() == mixed["write"]["write_calls"]
    heat = store.latency_heatmap("vfs", 0.25, pid=pid)
    calls = store.sql("SELECT sum(coalesce(count, 1)) AS n FROM samples WHERE kind = 'vfs' AND pid = $pid AND duration IS NOT NULL", pid=pid).n[0]
    assert heat.events.sum() == calls, "the vfs heatmap counts every call"


@pytest.mark.bpf
def test_live_heap_by_stack_ends_at_what_each_site_kept(executed, store, truth):
    """`heap-sites`: the live heap notebook's stacks end at what each site kept (the leak within ±10%, the others near 0), and its resident memory grew by at least most of the leak."""
    report = truth["heap"]
    pid = store.pick_process("alloc")
    heap = store.live_heap_over_time(pid=pid, top=50)  # every stack by its name
    at_end = heap.groupby("stack").live.last()
    kept = report["site_leak"]["kept"]
    for site in ("site_small", "site_leak", "site_big"):
        mine = at_end[[site in s for s in at_end.index]]
        assert len(mine) >= 1, f"no stack names {site}: {at_end.to_dict()}"
        want = report[site]["kept"]
        measured(f"{site} live at the end", mine.sum() / MIB, want / MIB, "MiB")
        assert abs(mine.sum() - want) <= 0.10 * kept, f"{site}: {mine.sum():.0f} bytes live at the end, kept {want}: {at_end.to_dict()}"
    # The leak's blocks were live while the big blocks came and went: its line peaks at its end.
    leak = heap[[("site_leak" in s) for s in heap["stack"]]]
    assert leak.live.max() <= 1.001 * leak.groupby("stack").live.last().sum() + 1, "the leak never shrinks"
    rss = store.rss_over_time(pid=pid)
    assert rss.growth.max() >= 0.8 * kept, f"RSS grew by {rss.growth.max() / MIB:.1f} MiB, the leak kept {kept / MIB} MiB"
    runs, _ = executed
    assert "site_leak" in text(runs["09-heap"]), "the heap notebook names the leak"


@pytest.mark.bpf
def test_a_store_in_a_bucket_reads_the_same(recorded, store, tmp_path):
    """An s3:// store (a local S3 server, s3s-fs) opens through s3fs and gives the same rows; the overview notebook runs over it."""
    server = shutil.which("s3s-fs") or str(Path.home() / ".cargo/bin/s3s-fs")
    if not Path(server).exists():
        pytest.skip("s3s-fs is not installed (scripts/setup installs it)")
    root = tmp_path / "s3"
    shutil.copytree(recorded[0], root / "bucket" / "stores" / "one")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [server, "--host", "127.0.0.1", "--port", str(port), "--access-key", "k", "--secret-key", "secretkey", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "secretkey",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT": f"http://127.0.0.1:{port}",
        "AWS_ALLOW_HTTP": "true",
    }
    saved = {k: os.environ.get(k) for k in env}
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        os.environ.update(env)
        remote = sx.open_store("s3://bucket/stores/one")
        assert remote.kinds().sort_values("kind").to_dict("records") == store.kinds().sort_values("kind").to_dict("records")
        assert remote.threads().to_dict() == store.threads().to_dict()
        with pytest.raises(sx.StoreError, match="no stacks store here"):
            sx.open_store("s3://bucket/stores/none")
        nb = execute("01-overview", {**env, "STACKS_STORE": "s3://bucket/stores/one"})
        assert not errors(nb), errors(nb)
        assert len(images(nb)) >= FIGURES["01-overview"]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("case", ["missing", "empty"])
def test_a_missing_or_empty_store_fails_the_first_cell_in_one_sentence(tmp_path, case):
    where = tmp_path / "no-store"
    if case == "empty":
        where.mkdir()
        (where / "notes.txt").write_text("not a store")
    for name in ("01-overview", "07-spans"):
        nb = execute(name, {"STACKS_STORE": str(where)})
        code = [c for c in nb.cells if c.cell_type == "code"]
        outputs = [o for o in code[0].get("outputs", []) if o.get("output_type") == "error"]
        assert len(outputs) == 1, f"{name}: the first cell did not fail: {code[0].get('outputs')}"
        err = outputs[0]
        assert err["ename"] == "StoreError", err
        message = err["evalue"]
        assert message.startswith(str(where) + ": "), message
        assert message.endswith(".") and message.count(". ") == 0 and "\n" not in message, f"one sentence: {message!r}"
        assert ("no such store directory" if case == "missing" else "no stacks store here") in message, message
        assert all(not c.get("execution_count") for c in code[1:]), f"{name}: cells ran after the failure"


def test_notebooks_are_stored_without_outputs():
    """The committed notebooks carry no outputs (CI executes them; outputs would bloat every diff)."""
    assert NOTEBOOKS, "no notebooks in explore/"
    for name in NOTEBOOKS:
        nb = nbformat.read(EXPLORE / f"{name}.ipynb", as_version=4)
        nbformat.validate(nb)
        for c in nb.cells:
            if c.cell_type == "code":
                assert not c.outputs and c.execution_count is None, f"{name}: a cell has outputs"

//! End-to-end ground truth for probes (`tp:`, `uprobe:`, `uretprobe:`, `usdt:`): the `probes`
//! workload calls a known function exactly N times, fires USDT probes exactly M times and
//! forks K times; the recorded hits must be exactly those, with the arguments and return values
//! the workload passed and the stacks it called from, the same in counting mode (`:count`), and
//! `stacks-query stackcount` / `stacks-pprof -f folded` must add up to them.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use stacks_tests::{
    ScratchDir, assert_refused, bin, bpf_available, bpf_serial, check, read_frames, read_stream,
    scratch, sh,
};

const CALLS: u64 = 2000;
const USDT: u64 = 300;
const FORKS: u64 = 7;

/// One `probe` row.
struct Hit {
    probe: String,
    value: i64,
    count: i64,
    args: Option<Vec<i64>>,
    user: Vec<String>,
    kernel: Vec<String>,
}

fn hits(batches: &[RecordBatch]) -> Vec<Hit> {
    let symbolized = batches
        .first()
        .is_some_and(|b| b.column_by_name("stack").is_some());
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let frames = if symbolized {
        read_frames(batches)
    } else {
        vec![None; rows]
    };
    let mut out = Vec::new();
    let mut row = 0;
    for b in batches {
        let kind = b.column_by_name("kind").unwrap().as_string::<i32>();
        let probe = b.column_by_name("probe").unwrap().as_string::<i32>();
        let value = b
            .column_by_name("value")
            .unwrap()
            .as_primitive::<Int64Type>();
        let count = b
            .column_by_name("count")
            .unwrap()
            .as_primitive::<Int64Type>();
        let args = b.column_by_name("args").unwrap().as_list::<i32>();
        for i in 0..b.num_rows() {
            let stack = frames[row].clone().unwrap_or_default();
            row += 1;
            if kind.value(i) != "probe" {
                continue;
            }
            let names = |kernel: bool| {
                stack
                    .iter()
                    .filter(|f| f.kernel == kernel)
                    .filter_map(|f| f.function.clone())
                    .collect()
            };
            out.push(Hit {
                probe: probe.value(i).to_string(),
                value: value.value(i),
                count: count.value(i),
                args: args
                    .is_valid(i)
                    .then(|| args.value(i).as_primitive::<Int64Type>().values().to_vec()),
                user: names(false),
                kernel: names(true),
            });
        }
    }
    out
}

/// The probes of the workload binary, `:count` appended to each when `counting`.
fn spec(counting: bool) -> String {
    let w = bin("stacks-workload");
    let w = w.display();
    let c = if counting { ":count" } else { "" };
    format!(
        "uprobe:{w}:stacks_workload_probed{c},uretprobe:{w}:stacks_workload_probed{c},\
         usdt:{w}:stacks_workload:fired{c},tp:sched:sched_process_fork:uk{c}"
    )
}

/// Record the workload under `spec` into `dir/sym.arrow` (symbolized); returns the hits.
fn record(dir: &Path, spec: &str) -> Vec<Hit> {
    let sym = dir.join("sym.arrow");
    let out = sh(&format!(
        "stacks-record -e '{spec}' -- stacks-workload probes --calls {CALLS} --usdt {USDT} \
         --forks {FORKS} | stacks-symbolize > {}",
        sym.display()
    ));
    check(&out, "record the probes workload");
    hits(&read_stream(&sym))
}

/// Hits by probe type (the probe name's first field).
fn totals(hits: &[Hit]) -> HashMap<String, i64> {
    let mut t = HashMap::new();
    for h in hits {
        let ty = h.probe.split(':').next().unwrap().to_string();
        *t.entry(ty).or_default() += h.value;
    }
    t
}

fn expected() -> HashMap<String, i64> {
    [
        ("uprobe", CALLS),
        ("uretprobe", CALLS),
        ("usdt", USDT),
        ("tp", FORKS),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v as i64))
    .collect()
}

/// Each probe's stacks start where the workload hit it.
fn check_stacks(hits: &[Hit]) {
    for h in hits {
        let leaf = h.user.first().map(String::as_str).unwrap_or("");
        let has = |f: &str| h.user.iter().any(|u| u.ends_with(f));
        match h.probe.split(':').next().unwrap() {
            "uprobe" => assert!(
                leaf == "stacks_workload_probed" && has("probes::call_probed"),
                "uprobe stack {:?}",
                h.user
            ),
            "uretprobe" => assert!(
                has("probes::call_probed") && !h.user.iter().any(|u| u == "stacks_workload_probed"),
                "a return probe's stack is the caller's: {:?}",
                h.user
            ),
            "usdt" => assert!(
                leaf.ends_with("probes::fire_usdt"),
                "usdt stack {:?}",
                h.user
            ),
            "tp" => {
                assert!(has("probes::fork_children"), "fork user stack {:?}", h.user);
                assert!(
                    h.kernel.iter().any(|k| k == "kernel_clone"),
                    "fork kernel stack {:?}",
                    h.kernel
                );
            }
            other => panic!("unexpected probe {other}"),
        }
    }
}

/// Record the workload's probes (`:count` when `counting`) in a scratch directory named after
/// the test; `None` (the test is skipped) without BPF. Checks the hits per probe type and
/// their stacks.
fn recorded(test: &str, counting: bool) -> Option<(ScratchDir, Vec<Hit>)> {
    if !bpf_available(test) {
        return None;
    }
    let _serial = bpf_serial();
    let dir = scratch(test);
    let hits = record(&dir, &spec(counting));
    assert_eq!(totals(&hits), expected(), "hits by probe type");
    check_stacks(&hits);
    Some((dir, hits))
}

#[test]
fn probe_hits_match_the_workload() {
    let Some((dir, hits)) = recorded("probe_hits_match_the_workload", false) else {
        return;
    };
    assert!(
        hits.iter().all(|h| h.value == 1 && h.count == 1),
        "a row per hit"
    );
    let args = |ty: &str| -> Vec<Vec<i64>> {
        hits.iter()
            .filter(|h| h.probe.starts_with(&format!("{ty}:")))
            .map(|h| h.args.clone().expect("row-mode hits carry their arguments"))
            .collect()
    };
    // Entry: (i, 0x5eed, …) for i in 0..CALLS; return: 2i+1 for the same i.
    let entry: BTreeSet<i64> = args("uprobe")
        .iter()
        .inspect(|a| assert!(a.len() == 6 && a[1] == 0x5eed, "uprobe args {a:?}"))
        .map(|a| a[0])
        .collect();
    assert_eq!(entry, (0..CALLS as i64).collect());
    let ret: BTreeSet<i64> = args("uretprobe")
        .iter()
        .inspect(|a| assert_eq!(a.len(), 1, "a return probe's args are its return value"))
        .map(|a| a[0])
        .collect();
    assert_eq!(ret, (0..CALLS as i64).map(|i| 2 * i + 1).collect());
    let usdt: BTreeSet<(i64, i64)> = args("usdt").iter().map(|a| (a[0], a[1])).collect();
    assert_eq!(usdt, (0..USDT as i64).map(|i| (i, USDT as i64)).collect());
    // sched_process_fork(parent, child): two task pointers, from the tracepoint's BTF.
    assert!(
        args("tp")
            .iter()
            .all(|a| a.len() == 2 && a[0] != 0 && a[1] != 0)
    );

    // stackcount over the store, and its folded lines, add up to the same hits.
    let store = dir.join("store");
    let folded = dir.join("folded.txt");
    check(
        &sh(&format!(
            "stacks-pack {store} < {sym} && stacks-query -d {store} stackcount --param \
             'probe=uprobe:%' | stacks-pprof -f folded > {folded}",
            store = store.display(),
            sym = dir.join("sym.arrow").display(),
            folded = folded.display()
        )),
        "stackcount | stacks-pprof -f folded",
    );
    let text = std::fs::read_to_string(&folded).unwrap();
    let mut total = 0;
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("`stack count` lines");
        assert!(
            stack.ends_with(";stacks_workload_probed"),
            "leaf is the probed function: {line}"
        );
        total += n.parse::<i64>().unwrap();
    }
    assert_eq!(
        total, CALLS as i64,
        "folded counts add up to the calls:\n{text}"
    );
}

#[test]
fn counting_probes_give_the_same_counts_in_few_rows() {
    let Some((_dir, hits)) = recorded("counting_probes_give_the_same_counts_in_few_rows", true)
    else {
        return;
    };
    assert!(hits.iter().all(|h| h.value == h.count && h.args.is_none()));
    // One thread, one stack per probe: a row per probe per counting interval (the workload
    // runs well under a second; allow a second interval), and per exit of a process (the
    // table is drained at each, while the process's files are known: the forked children's
    // exits, when the recorder keeps up with them).
    assert!(
        hits.len() <= 4 * (2 + FORKS as usize),
        "{} rows for {} hits",
        hits.len(),
        2 * CALLS + USDT + FORKS
    );
}

/// The workload saw the semaphore set at every firing (its report) and the recording has every
/// hit.
fn check_semaphore_run(report: &Path, raw: &Path) {
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    assert_eq!(
        report["usdt_enabled"], USDT,
        "the semaphore was set for every firing"
    );
    let hits = hits(&read_stream(raw));
    assert_eq!(hits.iter().map(|h| h.value).sum::<i64>(), USDT as i64);
}

/// A probe guarded by a USDT semaphore fires only while it is set: for a process already
/// running when the recording starts (`-p`), the kernel sets it.
#[test]
fn usdt_semaphores_are_set_for_running_processes() {
    if !bpf_available("usdt_semaphores_are_set_for_running_processes") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("probes-sema");
    let (start, report, raw, log) = (
        dir.join("start"),
        dir.join("report.json"),
        dir.join("raw.arrow"),
        dir.join("record.log"),
    );
    let mut workload = std::process::Command::new(bin("stacks-workload"))
        .args([
            "--report",
            report.to_str().unwrap(),
            "probes",
            "--calls",
            "1",
            "--forks",
            "0",
        ])
        .args([
            "--usdt",
            &USDT.to_string(),
            "--start-file",
            start.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let w = bin("stacks-workload");
    let mut rec = std::process::Command::new(bin("stacks-record"))
        .args(["-e", &format!("usdt:{}:stacks_workload:tick", w.display())])
        .args([
            "-p",
            &workload.id().to_string(),
            "-o",
            raw.to_str().unwrap(),
        ])
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("recording")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the recorder did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::write(&start, "").unwrap();
    assert!(workload.wait().unwrap().success());
    assert!(
        rec.wait().unwrap().success(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    check_semaphore_run(&report, &raw);
}

/// The same for the command the recorder starts: it is held at its exec while the semaphore
/// is set.
#[test]
fn usdt_semaphores_are_set_in_the_command() {
    if !bpf_available("usdt_semaphores_are_set_in_the_command") {
        return;
    }
    let _serial = bpf_serial();
    let dir = scratch("probes-sema-command");
    let (report, raw) = (dir.join("report.json"), dir.join("raw.arrow"));
    let w = bin("stacks-workload");
    let out = sh(&format!(
        "stacks-record -e usdt:{w}:stacks_workload:tick -o {raw} -- stacks-workload --report \
         {report} probes --calls 1 --forks 0 --usdt {USDT}",
        w = w.display(),
        raw = raw.display(),
        report = report.display()
    ));
    check(&out, "record the command's semaphore-guarded probe");
    check_semaphore_run(&report, &raw);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A command that is not the probe's executable (a shell that execs it later) cannot have the
/// semaphore set at its exec: the recording goes on and says so.
#[test]
fn a_semaphore_the_command_does_not_map_is_a_warning() {
    if !bpf_available("a_semaphore_the_command_does_not_map_is_a_warning") {
        return;
    }
    let _serial = bpf_serial();
    let w = bin("stacks-workload");
    let out = sh(&format!(
        "stacks-record -e usdt:{w}:stacks_workload:tick -o /dev/null -- sh -c 'exec \
         stacks-workload probes --calls 1 --forks 0 --usdt 10 > /dev/null'",
        w = w.display()
    ));
    check(&out, "record a shell that execs the probed program");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        log.contains("warning: -e usdt:") && log.contains("guarded by a semaphore"),
        "{log}"
    );
}

#[test]
fn missing_probes_are_one_line_errors_naming_them() {
    let w = bin("stacks-workload");
    let w = w.display();
    for (spec, needle) in [
        (
            "tp:sched:no_such_tracepoint".to_string(),
            "no tracepoint `no_such_tracepoint`",
        ),
        (
            "uprobe:/no/such/file:f".to_string(),
            "/no/such/file: no such file",
        ),
        (
            "uprobe:libnosuchlib.so.9:f".to_string(),
            "libnosuchlib.so.9: no such file",
        ),
        (
            format!("uretprobe:{w}:no_such_symbol"),
            "no symbol `no_such_symbol`",
        ),
        (
            "tp:sched".to_string(),
            "expected tp:CATEGORY:NAME[:STACKS][:count]",
        ),
        ("uprobe:/bin/true:main:x".to_string(), "bad probe"),
    ] {
        let out = std::process::Command::new(bin("stacks-record"))
            .args(["-e", &spec, "-a", "-d", "1"])
            .output()
            .unwrap();
        assert_refused(&out, "stacks-record", 1, needle, &spec);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(spec.split(':').next().unwrap()), "{stderr}");
    }
    if !bpf_available("missing_probes_are_one_line_errors_naming_them (usdt)") {
        return;
    }
    let _serial = bpf_serial();
    let spec = format!("usdt:{w}:stacks_workload:no_such_probe");
    let out = std::process::Command::new(bin("stacks-record"))
        .args(["-e", &spec, "-a", "-d", "1"])
        .output()
        .unwrap();
    assert_refused(
        &out,
        "stacks-record",
        1,
        "no USDT probe stacks_workload:no_such_probe",
        &spec,
    );
}

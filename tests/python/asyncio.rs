//! asyncio tasks (CPython 3.14+): a server of three named tasks — `spinner` (CPU-bound),
//! `sleeper` (sleeping: awaiting, and blocking its thread 4 ms at a time), `parent` awaiting
//! the task `child` it made (CPU-bound) — recorded with CPU samples, off-CPU intervals and
//! state passes (`u` stacks, `d` on the second minor): the rows of each task's code carry its
//! name in `task`, and `child`'s the chain of the tasks awaiting it in `task_chain`; the task labels reach
//! pprof's labels (read by `go tool pprof -tags`) and stacks-top's grouping.

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use stacks_tests::{bpf_available, bpf_serial, check, read_frames, read_stream, scratch, sh};

use super::{NEWER, installed, newer};

/// The server: `argv[1]` seconds of its three tasks under `main` (`asyncio.run`'s task).
const SERVER: &str = "import asyncio, sys, time

def burn(ms):
    end = time.monotonic() + ms / 1000
    n = 0
    while time.monotonic() < end:
        n += 1
    return n

async def spinner(until):
    while time.monotonic() < until:
        burn(5)
        await asyncio.sleep(0)

async def sleeper(until):
    while time.monotonic() < until:
        await asyncio.sleep(0.01)
        time.sleep(0.004)

async def child_work(until):
    while time.monotonic() < until:
        burn(5)
        await asyncio.sleep(0)

async def parent(until):
    await asyncio.create_task(child_work(until), name='child')

async def main(seconds):
    until = time.monotonic() + seconds
    await asyncio.gather(
        asyncio.create_task(spinner(until), name='spinner'),
        asyncio.create_task(sleeper(until), name='sleeper'),
        asyncio.create_task(parent(until), name='parent'),
    )

asyncio.run(main(float(sys.argv[1])))
";

/// A row's kind, the coroutine whose code it ran (the first of the tasks' functions among its
/// Python frames) and its task labels.
struct TaskRow {
    kind: String,
    body: Option<&'static str>,
    task: Option<String>,
    chain: Option<String>,
}

fn task_rows(batches: &[RecordBatch]) -> Vec<TaskRow> {
    let mut out = Vec::new();
    for b in batches {
        let frames = read_frames(std::slice::from_ref(b));
        let kind = b.column_by_name("kind").expect("kind").as_string::<i32>();
        let task = b.column_by_name("task").expect("task").as_string::<i32>();
        let chain = b
            .column_by_name("task_chain")
            .expect("task_chain")
            .as_string::<i32>();
        for (row, frames) in frames.into_iter().enumerate() {
            let py: Vec<String> = frames
                .unwrap_or_default()
                .into_iter()
                .filter(|f| f.module.as_deref() == Some("[python]"))
                .filter_map(|f| f.function)
                .collect();
            let body = ["spinner", "sleeper", "child_work"]
                .into_iter()
                .find(|b| py.iter().any(|f| f == b));
            let text = |a: &arrow_array::StringArray| {
                arrow_array::Array::is_valid(a, row).then(|| a.value(row).to_string())
            };
            out.push(TaskRow {
                kind: kind.value(row).to_string(),
                body,
                task: text(task),
                chain: text(chain),
            });
        }
    }
    out
}

#[test]
fn asyncio_tasks_label_the_rows_of_their_code() {
    if !bpf_available("asyncio_tasks_label_the_rows_of_their_code") {
        return;
    }
    let _serial = bpf_serial();
    for minor in NEWER {
        let python = newer(minor);
        assert!(installed(&python));
        let dir = scratch(&format!("python-asyncio-{minor}"));
        let d = dir.display();
        std::fs::write(dir.join("server.py"), SERVER).expect("write the server");
        // `state` rows too, with `u` stacks on one minor and `d` on the other (its Python
        // frames and task are walked apart from the stack's copy).
        let state = if *minor == NEWER[0] {
            "state:u:100"
        } else {
            "state:d:100"
        };
        let rec = sh(&format!(
            "stacks-record -e profile:u:499,switch:u,{state} -o {d}/raw.arrow -- {python} {d}/server.py 3 && \
             stacks-symbolize -o {d}/sym.arrow {d}/raw.arrow"
        ));
        check(&rec, &format!("recording the asyncio server on {python}"));
        let stderr = String::from_utf8_lossy(&rec.stderr);
        let rows = task_rows(&read_stream(&dir.join("sym.arrow")));
        // Each CPU-bound task's CPU samples carry its name; child's, the chain awaiting it.
        for (body, name, chain_end) in [
            ("spinner", "spinner", ";spinner"),
            ("child_work", "child", ";parent;child"),
        ] {
            let of: Vec<&TaskRow> = rows
                .iter()
                .filter(|r| r.kind == "profile" && r.body == Some(body))
                .collect();
            let named = of
                .iter()
                .filter(|r| {
                    r.task.as_deref() == Some(name)
                        && r.chain.as_deref().is_some_and(|c| c.ends_with(chain_end))
                })
                .count();
            let share = named as f64 / of.len().max(1) as f64;
            eprintln!(
                "{python}: {name}: {named} of {} CPU samples of {body} labelled",
                of.len()
            );
            assert!(
                of.len() >= 100,
                "{python}: {} samples of {body}:\n{stderr}",
                of.len()
            );
            assert!(
                share >= 0.95,
                "{python}: {share:.3} of {body}'s samples carry task {name} (chain …{chain_end}):\n{stderr}"
            );
        }
        // No row of one task's code carries another task's name.
        for r in &rows {
            if let (Some(body), Some(task)) = (r.body, r.task.as_deref()) {
                let want = match body {
                    "child_work" => "child",
                    b => b,
                };
                assert_eq!(task, want, "{python}: a {} row of {body}", r.kind);
            }
        }
        // Off-CPU intervals carry them too: the sleeper blocks its thread in time.sleep.
        let slept = rows
            .iter()
            .filter(|r| r.kind == "switch" && r.body == Some("sleeper"))
            .collect::<Vec<_>>();
        assert!(
            slept.len() >= 20,
            "{python}: {} switch rows in sleeper",
            slept.len()
        );
        let named = slept
            .iter()
            .filter(|r| r.task.as_deref() == Some("sleeper"))
            .count();
        assert!(
            named as f64 >= 0.95 * slept.len() as f64,
            "{python}: {named} of {} switch rows of sleeper carry its task",
            slept.len()
        );
        // And the state passes that found the sleeper blocked in its code.
        let passes = rows
            .iter()
            .filter(|r| r.kind == "state" && r.body == Some("sleeper"))
            .collect::<Vec<_>>();
        let named = passes
            .iter()
            .filter(|r| r.task.as_deref() == Some("sleeper"))
            .count();
        eprintln!(
            "{python} ({state}): {named} of {} state rows of sleeper labelled",
            passes.len()
        );
        assert!(
            passes.len() >= 5 && named as f64 >= 0.95 * passes.len() as f64,
            "{python} ({state}): {named} of {} state rows of sleeper carry its task",
            passes.len()
        );
        assert!(
            stderr.contains("rows with their asyncio task"),
            "no task count in the summary:\n{stderr}"
        );
        // The labels in pprof (go tool pprof -tags) and stacks-top's grouping.
        let tags = sh(&format!(
            "stacks-pprof {d}/sym.arrow > {d}/cpu.pb.gz && go tool pprof -tags {d}/cpu.pb.gz"
        ));
        check(&tags, "pprof's tags");
        let tags = String::from_utf8_lossy(&tags.stdout);
        for want in ["task:", "spinner", "child", "task_chain:", "parent;child"] {
            assert!(
                tags.contains(want),
                "{python}: {want} in pprof's tags:\n{tags}"
            );
        }
        let top = sh(&format!(
            "stacks-pack {d}/store < {d}/sym.arrow && \
             stacks-top -d {d}/store --once --kind profile --group task -f csv"
        ));
        check(&top, "stacks-top grouped by task");
        let top = String::from_utf8_lossy(&top.stdout);
        for want in ["spinner", "child"] {
            assert!(top.contains(want), "{python}: {want} in stacks-top:\n{top}");
        }
    }
}

//! Criterion benchmark of stacks-symbolize's batch path.
//!
//! Input: the stream in `STACKS_BENCH_STREAM` (a raw recording, e.g. one kept by
//! `BENCH_KEEP=1 scripts/bench`), or else 100,000 synthetic rows whose user frames are real
//! functions of this benchmark executable (debug info, inlines), 8 frames deep.
//! - `cached`: every frame already resolved; rows per second through the stream's distinct
//!   stacks (each symbolized once per stream), frame dedupe, lookup and the building of the
//!   `stack` dictionary.
//! - `cold`: a fresh symbolizer each time; distinct frames resolved per second (DWARF parsing
//!   and lookups, on 1 or 2 worker threads).
//! - `go`: cold lookups of addresses spread over every function of a small Go program (built
//!   by the installed `go`; skipped without it): stripped (`-s -w`, named from `.gopclntab`)
//!   next to the same program with symbols (blazesym, DWARF).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::TimestampNanosecondArray;
use arrow_array::builder::{
    ListBuilder, StringBuilder, StructBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use stacks_symbolize::debuginfo::Finder;
use stacks_symbolize::gopclntab::GoBinary;
use stacks_symbolize::resolve::{Job, Options, Pool, Worker};
use stacks_symbolize::transform::{KernelConfig, Layout, Symbolize};

/// Text symbols of `exe` with a size: (address, size).
fn functions(exe: &Path) -> Vec<(u64, u64)> {
    let out = std::process::Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(exe)
        .output()
        .expect("nm (binutils) is needed to synthesize frames");
    let mut f: Vec<(u64, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(
            |l| match l.split_whitespace().collect::<Vec<_>>().as_slice() {
                [a, s, "t" | "T", _] => Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(s, 16).ok()?,
                )),
                _ => None,
            },
        )
        .filter(|&(_, s)| s > 0)
        .collect();
    f.sort_unstable();
    f.dedup();
    f
}

/// Raw batches of `rows` rows, `depth` user frames each, over the functions of this executable.
fn synthetic(
    rows: usize,
    depth: usize,
    distinct: usize,
) -> (Arc<arrow_schema::Schema>, Vec<RecordBatch>) {
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let info = stacks_symbolize::elf::read(&exe).unwrap();
    let build_id = info.build_id.clone();
    let funcs = functions(&exe);
    assert!(!funcs.is_empty(), "no functions in {}", exe.display());
    // A fixed set of distinct (function, offset) frames, drawn from deterministically.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let pool: Vec<u64> = (0..distinct)
        .filter_map(|_| {
            let (a, s) = funcs[(next() % funcs.len() as u64) as usize];
            let vaddr = a + next() % s;
            info.loads
                .iter()
                .find(|l| l.vaddr <= vaddr && vaddr < l.vaddr + l.filesz)
                .map(|l| vaddr - l.vaddr + l.offset)
        })
        .collect();
    let mut md = HashMap::new();
    stacks_stream::stamp(&mut md, "bench", "0", stacks_stream::stage::RAW);
    let schema = Arc::new(stacks_stream::raw_schema(md));
    let DataType::List(ufield) = stacks_stream::ustack_type() else {
        unreachable!()
    };
    let DataType::Struct(ufields) = ufield.data_type().clone() else {
        unreachable!()
    };
    let module = exe.display().to_string();
    let mut batches = Vec::new();
    for start in (0..rows).step_by(4096) {
        let n = (rows - start).min(4096);
        let mut u = ListBuilder::new(StructBuilder::from_fields(ufields.clone(), 0))
            .with_field(ufield.clone());
        for _ in 0..n {
            for _ in 0..depth {
                let off = pool[(next() % pool.len() as u64) as usize];
                let s = u.values();
                s.field_builder::<UInt64Builder>(0)
                    .unwrap()
                    .append_value(0x5555_0000_0000 + off);
                s.field_builder::<StringBuilder>(1)
                    .unwrap()
                    .append_value(&module);
                s.field_builder::<StringBuilder>(2)
                    .unwrap()
                    .append_option(build_id.as_deref());
                s.field_builder::<UInt64Builder>(3)
                    .unwrap()
                    .append_value(off);
                s.field_builder::<StringBuilder>(4).unwrap().append_null();
                s.field_builder::<StringBuilder>(5).unwrap().append_null();
                s.field_builder::<StringBuilder>(6).unwrap().append_null();
                s.field_builder::<UInt32Builder>(7).unwrap().append_null();
                s.append(true);
            }
            u.append(true);
        }
        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "time",
                Arc::new(TimestampNanosecondArray::from(vec![0i64; n]).with_timezone("UTC")),
            ),
            ("kind", Arc::new(StringArray::from(vec!["profile"; n]))),
            ("pid", Arc::new(Int32Array::from(vec![1; n]))),
            ("tid", Arc::new(Int32Array::from(vec![1; n]))),
            ("comm", Arc::new(StringArray::from(vec!["bench"; n]))),
            ("thread", Arc::new(StringArray::from(vec!["bench"; n]))),
            ("cpu", Arc::new(Int32Array::from(vec![0; n]))),
            ("value", Arc::new(Int64Array::from(vec![1; n]))),
            ("ustack", Arc::new(u.finish())),
        ];
        batches.push(stacks_stream::batch_by_name(schema.clone(), n, columns).unwrap());
    }
    (schema, batches)
}

fn input() -> (Arc<arrow_schema::Schema>, Vec<RecordBatch>, String) {
    match std::env::var_os("STACKS_BENCH_STREAM") {
        Some(p) => {
            let input =
                stacks_stream::open_input(Some(Path::new(&p))).expect("STACKS_BENCH_STREAM");
            let schema = input.schema();
            let batches = input.collect::<Result<Vec<_>, _>>().expect("read stream");
            (schema, batches, Path::new(&p).display().to_string())
        }
        None => {
            let (s, b) = synthetic(100_000, 8, 20_000);
            (s, b, "synthetic".into())
        }
    }
}

fn symbolizer() -> Symbolize {
    let finder = Finder::new(&[], &[], None).unwrap();
    let kernel = KernelConfig {
        vmlinux: None,
        fallback: Err("kernel frames not benchmarked".into()),
    };
    Symbolize::new(finder, kernel).with_threads(2)
}

fn bench(c: &mut Criterion) {
    let (schema, batches, name) = input();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let layout = Layout::new(&schema, &name, HashMap::new()).unwrap();
    let opts = Options {
        lines: true,
        inlines: true,
    };

    std::thread::scope(|s| {
        let pool = Pool::start(s, 2, opts, vec![]);
        let mut warm = symbolizer();
        for b in &batches {
            warm.batch(b, &layout, &pool).unwrap();
        }
        let unique = warm.stats.unique;
        eprintln!("bench input: {name}: {rows} rows, {unique} distinct frames");

        let mut g = c.benchmark_group("cached");
        g.sample_size(10);
        g.throughput(Throughput::Elements(rows as u64));
        g.bench_function(BenchmarkId::new("rows", &name), |bch| {
            bch.iter(|| {
                // Each iteration a stream of its own: every distinct stack built again.
                warm.new_stream();
                for b in &batches {
                    std::hint::black_box(warm.batch(b, &layout, &pool).unwrap());
                }
            })
        });
        g.finish();

        let mut g = c.benchmark_group("cold");
        g.sample_size(10);
        g.throughput(Throughput::Elements(unique));
        for workers in [1usize, 2] {
            g.bench_function(
                BenchmarkId::new("unique_frames", format!("{name}/{workers} workers")),
                |bch| {
                    bch.iter(|| {
                        // A fresh symbolizer and fresh workers' caches: everything parsed again.
                        let pool = Pool::start(s, workers, opts, vec![]);
                        let mut sym = symbolizer();
                        for b in &batches {
                            std::hint::black_box(sym.batch(b, &layout, &pool).unwrap());
                        }
                    })
                },
            );
        }
        g.finish();
    });
}

/// A small Go program built stripped and with symbols, and 4 addresses in each of its
/// functions; `None` when `go` cannot build it.
fn go_program() -> Option<(PathBuf, PathBuf, Vec<u64>)> {
    let dir = std::env::temp_dir().join(format!("stacks-bench-go-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let src = dir.join("main.go");
    std::fs::write(
        &src,
        "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n",
    )
    .ok()?;
    let build = |out: &str, flags: &str| -> Option<PathBuf> {
        let path = dir.join(out);
        let ok = std::process::Command::new("go")
            .arg("build")
            .arg(format!("-ldflags={flags}"))
            .arg("-o")
            .arg(&path)
            .arg(&src)
            .current_dir(&dir)
            .status()
            .ok()?
            .success();
        ok.then_some(path)
    };
    let stripped = build("stripped", "-s -w")?;
    let with_symbols = build("symbols", "")?;
    let go = GoBinary::open(&stripped).ok()??;
    let t = go.table();
    let mut addrs: Vec<u64> = (0..t.len())
        .filter_map(|i| t.func(i).ok())
        .flat_map(|f| (0..4).map(move |k| f.entry + (f.end - f.entry) * k / 4))
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    Some((stripped, with_symbols, addrs))
}

fn bench_go(c: &mut Criterion) {
    let Some((stripped, with_symbols, addrs)) = go_program() else {
        eprintln!("go benchmark skipped: `go` could not build its program");
        return;
    };
    let opts = Options {
        lines: true,
        inlines: true,
    };
    let mut g = c.benchmark_group("go");
    g.sample_size(10);
    g.throughput(Throughput::Elements(addrs.len() as u64));
    for (what, file) in [("gopclntab", &stripped), ("dwarf", &with_symbols)] {
        g.bench_function(BenchmarkId::new("cold_lookups", what), |bch| {
            bch.iter(|| {
                // A fresh worker: the file's tables read again.
                let mut w = Worker::new(opts, &[]);
                std::hint::black_box(w.run(&Job::Elf {
                    file: file.clone(),
                    addrs: addrs.clone(),
                }))
            })
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(stripped.parent().expect("a directory"));
}

criterion_group!(benches, bench, bench_go);
criterion_main!(benches);

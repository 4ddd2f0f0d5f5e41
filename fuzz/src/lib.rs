//! Drivers shared by the fuzz targets: each feeds in-memory input to a tool's library entry
//! points the way its binary does, and returns quietly on any error (errors are fine; a panic,
//! hang or abort is a finding).

use std::io::Cursor;
use std::path::PathBuf;

use stacks_stream::InputStream;

/// The fuzz input as a named stream, or `None` when the stream reader already refuses it.
#[allow(dead_code)] // not with only the `record` feature
fn stream(data: &[u8]) -> Option<InputStream> {
    InputStream::new("fuzz", Box::new(Cursor::new(data.to_vec()))).ok()
}

#[allow(dead_code)] // used by the pack and query targets
/// A scratch directory for this process (on tmpfs when there is one), emptied first.
pub fn scratch(name: &str) -> PathBuf {
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("stacks-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create fuzz scratch dir");
    dir
}

#[cfg(feature = "symbolize")]
/// stacks-symbolize: the library entry point the binary calls (one worker, no system debug
/// directories, no kallsyms), writing to nowhere.
pub fn symbolize(data: &[u8]) {
    use stacks_symbolize::{Options, debuginfo::Finder, symbolize_stream};
    let Some(input) = stream(data) else {
        return;
    };
    let finder = Finder::new(&[], &[], None)
        .expect("finder without files")
        .with_system_dirs(Vec::new());
    let options = Options {
        vmlinux: None,
        kallsyms: None,
        lines: true,
        inlines: true,
        jobs: 1,
    };
    let _ = symbolize_stream(input, finder, &options, || {
        Ok(stacks_stream::io::Sink {
            writer: Box::new(std::io::sink()),
            name: "fuzz".into(),
        })
    });
}

#[cfg(feature = "pack")]
/// stacks-pack: the library entry point the binary calls, into a directory with date
/// partitions (for streams with a time column), tiny row groups and rotation every few rows,
/// so sorting, naming from row times and rotation all see the fuzzed rows.
pub fn pack(data: &[u8], dir: &std::path::Path) {
    use stacks_pack::{Destination, Options, Partitioning};
    let Some(input) = stream(data) else {
        return;
    };
    let timed = stacks_pack::has_time_column(&input.schema());
    let _ = std::fs::remove_dir_all(dir);
    let options = Options {
        destination: Destination::Dir(dir.to_path_buf()),
        max_rows: 5,
        max_bytes: Some(4096),
        max_age: None,
        partition: timed.then_some(Partitioning::Date),
        row_group_rows: 3,
        zstd_level: 1,
        retention: Default::default(),
        stats: None,
        keep_going: false,
        lost: Vec::new(),
    };
    let _ = stacks_pack::pack_stream(input, &options);
}

#[cfg(feature = "pprof")]
/// stacks-pprof: convert with the default options and with the row-stream options the
/// binary offers, then encode, fold and draw the profile.
pub fn pprof(data: &[u8]) {
    let variants = [
        stacks_pprof::Options::default(),
        stacks_pprof::Options {
            kinds: vec!["profile,switch,rss,block,vfs,net,exec,fork,exit,lost".into()],
            annotate: true,
            process_name: true,
            delimiter: true,
            ..Default::default()
        },
    ];
    for options in &variants {
        let Some(mut input) = stream(data) else {
            return;
        };
        let Ok(profile) = stacks_pprof::convert(&mut input, options) else {
            continue;
        };
        if let Ok(bytes) = stacks_pprof::encode(&profile) {
            let _ = stacks_pprof::decode(&bytes);
        }
        let index = stacks_pprof::default_index(&profile);
        let stacks = stacks_pprof::folded(&profile, index, options.annotate);
        let _ = stacks_pprof::write_folded(&stacks, std::io::sink(), "fuzz");
        let _ = stacks_pprof::write_svg(&profile, index, &stacks, std::io::sink(), "fuzz");
    }
}

#[cfg(feature = "trace")]
/// stacks-trace: the whole conversion, without and with a time window.
pub fn trace(data: &[u8]) {
    use stacks_trace::{Bound, Options, Window};
    let windows = [
        Window::default(),
        Window {
            from: Some(Bound::After(1_000)),
            to: Some(Bound::After(1_000_000_000)),
        },
    ];
    for window in windows {
        let Some(mut input) = stream(data) else {
            return;
        };
        let _ = stacks_trace::convert(&mut input, std::io::sink(), "fuzz", &Options { window });
    }
}

#[cfg(feature = "record")]
/// stacks-record's command line: the arguments (NUL-separated in `data`) through its clap
/// parser and value parsers, then the event spec and target checks it runs before BPF.
pub fn record_args(data: &[u8]) {
    use clap::Parser;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = stacks_record::spec::EventSpec::parse(text).map(|s| (s.normalized(), s.names()));
    let _ = stacks_record::cli::parse_duration(text);
    let _ = stacks_record::spec::parse_ns(text);
    let argv = std::iter::once("stacks-record").chain(text.split('\0'));
    let Ok(args) = stacks_record::cli::Args::try_parse_from(argv) else {
        return;
    };
    let _ = args.spec().map(|s| s.normalized());
    let _ = args.target();
}

/// stacks-query: SQL text and `--param` assignments against a one-file table made from a
/// small symbolized stream. `data` is UTF-8: the SQL (or `@NAME`, a bundled query), then
/// NUL-separated `NAME=VALUE` parameters. Bound and run through the library functions the
/// binary calls (`stacks_sql::bind`, `stacks_sql::start`).
#[cfg(feature = "query")]
pub mod query {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use datafusion::prelude::SessionContext;
    use futures::StreamExt;
    use stacks_sql::{output, params, queries, source};

    /// The table: the symbolized seed stream packed into one Parquet file.
    const TABLE: &[u8] = include_bytes!("../seeds/streams/sym-failed.arrow");

    struct Fixture {
        runtime: tokio::runtime::Runtime,
        ctx: SessionContext,
    }

    fn fixture() -> &'static Fixture {
        static FIXTURE: OnceLock<Fixture> = OnceLock::new();
        FIXTURE.get_or_init(|| {
            let dir = super::scratch("query");
            let file = dir.join("stacks.parquet");
            write_table(&file);
            // stacks-pack writes the set stacks.{samples,stacks,frames}.parquet.
            let file = stacks_pack::pair_of(&file);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            let ctx = stacks_sql::session(None).expect("session");
            runtime
                .block_on(source::register(&ctx, &[file]))
                .expect("register the fixture table");
            Fixture { runtime, ctx }
        })
    }

    fn write_table(file: &PathBuf) {
        use stacks_pack::{Limits, Packer, Target};
        let mut input = super::stream(TABLE).expect("seed stream");
        let schema = stacks_pack::stamped_schema(&input.schema());
        let samples = stacks_store::samples_schema(&schema);
        let props = stacks_pack::writer_properties(&samples, 1, 1024).expect("properties");
        let levels = stacks_pack::levels::Levels::new(&schema, 1).expect("properties");
        let target = Target::File(file.clone());
        let limits = Limits::single_file(1024);
        let mut packer =
            Packer::new(target, &schema, props, levels, limits, None, None).expect("packer");
        while let Some(batch) = input.next_batch().expect("seed batch") {
            packer.write(&batch).expect("pack seed");
        }
        packer.finish().expect("finish seed table");
    }

    pub fn run(data: &[u8]) {
        let Ok(text) = std::str::from_utf8(data) else {
            return;
        };
        let mut parts = text.split('\0');
        let first = parts.next().unwrap_or_default();
        let query = match first.strip_prefix('@') {
            Some(name) => match queries::resolve(name) {
                Ok(q) if queries::BUNDLED.iter().any(|(n, _)| *n == q.label) => q,
                _ => return,
            },
            None => queries::inline(first),
        };
        let given: Vec<(String, String)> = parts
            .filter_map(|p| params::split_assignment(p).ok())
            .collect();
        let Ok(values) = stacks_sql::bind(&query, &given, !first.starts_with('@')) else {
            return;
        };
        let f = fixture();
        f.runtime.block_on(async {
            let Ok(mut stream) = stacks_sql::start(&f.ctx, &query, values).await else {
                return;
            };
            while let Some(Ok(b)) = stream.next().await {
                let _ = output::nested_as_text(&b);
            }
        });
    }
}

//! The `stacks-top` command line: open the store or the live stream, check the view the flags
//! ask for (before any screen), then draw the screen — or print its first table (`--once`).

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::Parser;

use stacks_sql::Data;
use stacks_sql::output::{Format, Writer};

use crate::TOOL;
use crate::app::App;
use crate::catalog;
use crate::engine::Engine;
use crate::runner::{Event, Runner, Slot};
use crate::session;
use crate::term::Screen;
use crate::ui;
use crate::view::Ns;
use crate::views::{diff, flame, heatmap, tree};

/// Output formats of `--once`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TextFormat {
    Table,
    Csv,
    Json,
}

/// Command line of `stacks-top`.
#[derive(Debug, Parser)]
#[command(
    name = "stacks-top",
    version,
    about = "Browse a stacks store or a live recording: active threads by any column, latency histograms, the stack tree and latency heatmap of each row, the flame graph, sandwiches and diffs of the view",
    after_help = "Examples:\n  stacks-top -d out/\n  \
                  stacks-top -d out/ --kind vfs --group comm,path --latency\n  \
                  sudo stacks-record -a -e state:uk,profile:u | stacks-symbolize | stacks-top\n  \
                  stacks-top -d s3://profiles/prod --from -1h --to now --where \"host = 'web-1'\"\n  \
                  stacks-top -d out/ --once -f csv --group state,syscall\n  \
                  stacks-top -d out/ --kind profile --once --flame > cpu.folded\n  \
                  stacks-top -d out/ --kind profile --once --sandwich burn_heavy\n  \
                  stacks-top -d out/ --kind switch --group comm --once --heatmap\n  \
                  stacks-top -d after/ --kind profile --once --diff before/\n\n\
                  Keys on the screen: h. The screen, every key and text mode: docs/top.md"
)]
pub struct Args {
    /// Directory of Parquet files written by stacks-pack (or one file), or the URL of a store
    /// stacks-pack uploads to (s3://BUCKET/PREFIX, gs://…, az://…, file:///…). Without it,
    /// a stream piped to stdin is shown live; else `out`
    #[arg(short = 'd', long = "dir", value_name = "DIR|URL", env = "STACKS_DATA")]
    pub dir: Option<String>,

    #[command(flatten)]
    pub store: stacks_sql::args::StoreArgs,

    /// Event kind to show: state (threads by state), profile (CPU), switch (off-CPU), vfs,
    /// block, net, rss, span, probe, exec, fork, exit, or all [default: state when the store
    /// has state rows, else profile]
    #[arg(short = 'k', long, value_name = "KIND")]
    pub kind: Option<String>,

    /// Columns to group by, comma-separated (see --columns) [default: per kind, e.g.
    /// state,comm,syscall,path for state]
    #[arg(short = 'g', long, value_name = "COL,COL", value_delimiter = ',')]
    pub group: Vec<String>,

    /// An SQL condition on the rows before grouping (any column of the store or of --columns),
    /// e.g. "comm = 'nginx' AND duration > 1000000"
    #[arg(
        short = 'w',
        long = "where",
        value_name = "SQL",
        allow_hyphen_values = true
    )]
    pub filter: Option<String>,

    /// The window the table covers, ending at the last row ([ and ] move it on the screen)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "5m")]
    pub window: Ns,

    /// Show the latency columns: a log2 histogram <1µs…≥1s and p50/p95/p99 of `duration`
    /// (vfs, block, switch, span; state: time in the current system call)
    #[arg(short = 'l', long)]
    pub latency: bool,

    /// Live mode: how much of the stream to keep in memory
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "10m")]
    pub keep: Ns,

    /// Print the first screen's table and exit
    #[arg(long)]
    pub once: bool,

    /// With --once: print the stack tree of the first row (the hottest path open) instead of
    /// the table
    #[arg(long, requires = "once", conflicts_with_all = ["flame", "sandwich", "heatmap"])]
    pub peek: bool,

    /// With --once: print the latency heatmap of the first row instead of the table (kinds
    /// with a latency): a line per log2 latency bucket from the slowest to the fastest, each
    /// a shade per time column (60 over the window, by events) and the bucket's events; with
    /// -f csv or json, a row per cell with events (start_ns, end_ns, bucket, lower_ns, events,
    /// time_ns)
    #[arg(long, requires = "once", conflicts_with_all = ["flame", "sandwich", "diff"])]
    pub heatmap: bool,

    /// With --once: print the folded stacks of the view (kind, filters, window) instead of the
    /// table: `root;…;leaf value` lines, sorted, values summed exactly (`value` of the kind:
    /// CPU or off-CPU ns, bytes, counts; events with --kind all), frames named as
    /// stacks-pprof --format folded names them
    #[arg(long, conflicts_with = "sandwich")]
    pub flame: bool,

    /// With --once: print the callers (inverted, merged) and callees of function FUNC over the
    /// view's stacks, with self and total values and shares. FUNC is a frame's name, or the
    /// end of one (`burn` for `app::burn`), or a part of one that names one function
    #[arg(long, value_name = "FUNC")]
    pub sandwich: Option<String>,

    /// Compare the view with the same view (kind, --where, the last --window) of another
    /// store: the screen starts with it as the baseline (d, F); with --once, print each
    /// function's change of share (the most changed first), or with --flame the folded stacks
    /// of both (`stack base now`, as difffolded.pl writes them)
    #[arg(long, value_name = "DIR|URL", conflicts_with_all = ["peek", "sandwich"])]
    pub diff: Option<String>,

    /// Output format of --once
    #[arg(
        short = 'f',
        long,
        value_enum,
        value_name = "FORMAT",
        default_value = "table"
    )]
    pub format: TextFormat,

    /// At most this many rows (the groups with the most samples)
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub limit: usize,

    /// List the columns that can be grouped by and exit
    #[arg(long)]
    pub columns: bool,
}

/// What `--once` prints (`None`: the screen).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Once {
    /// The first table.
    Table,
    /// The stack tree of the first row (`--peek`).
    Peek,
    /// The latency heatmap of the first row (`--heatmap`).
    Heatmap,
    /// The folded stacks of the view (`--flame`; with `--diff`, of both), or a function's
    /// sandwich (`--sandwich`).
    Stacks { sandwich: Option<String> },
    /// Each function's change against `--diff`'s store.
    Diff,
}

impl Once {
    /// What the flags ask `--once` to print.
    fn of(args: &Args) -> Option<Once> {
        Some(match () {
            _ if !args.once => return None,
            _ if args.peek => Once::Peek,
            _ if args.heatmap => Once::Heatmap,
            _ if args.flame || args.sandwich.is_some() => Once::Stacks {
                sandwich: args.sandwich.clone(),
            },
            _ if args.diff.is_some() => Once::Diff,
            _ => Once::Table,
        })
    }
}

fn parse_duration(text: &str) -> Result<Ns, String> {
    let d = stacks_stream::cli::parse_positive_duration(text)?;
    Ok(d.as_nanos() as Ns)
}

/// Parse the command line and run.
pub fn run() -> Result<ExitCode> {
    run_with(stacks_stream::cli::parse_args::<Args>(TOOL))
}

/// A usage error: one line, exit 2.
fn usage(message: &str) -> ! {
    stacks_stream::cli::usage_error(TOOL, message)
}

pub fn run_with(args: Args) -> Result<ExitCode> {
    if (args.flame || args.sandwich.is_some()) && !args.once {
        usage("--flame and --sandwich print text: give --once too (on the screen: F and s)");
    }
    let window = args
        .store
        .window()
        .unwrap_or_else(|e| usage(&format!("{e:#}")));
    if let Some(k) = &args.kind
        && k != catalog::ALL
        && catalog::weights(k).is_none()
    {
        let known: Vec<&str> = stacks_stream::kinds::shown().map(|(k, _)| k.name).collect();
        usage(&format!(
            "--kind {k}: not a kind stacks-top shows ({}, or all)",
            known.join(", ")
        ));
    }
    let live = args.dir.is_none() && !stacks_stream::cli::stdin_is_tty();
    let mut engine = if live {
        let s = &args.store;
        if s.cluster.is_some() || s.from.is_some() || s.to.is_some() {
            usage("--cluster, --from and --to take a store (-d); live mode reads stdin");
        }
        Engine::live(args.keep)?
    } else {
        let data = Data::parse(args.dir.as_deref().unwrap_or("out"));
        args.store.check_cluster(&data)?;
        Engine::store(&data, &window, args.store.cluster.as_deref())?
    };
    if args.columns {
        for c in &engine.columns {
            println!("{:<16} {}", c.name, c.about);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if live && !args.once {
        // Wait (a little) for the first rows, so the first screen has a kind and columns.
        let t0 = Instant::now();
        while engine.kinds.is_empty() && t0.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(100));
            engine.refresh()?;
        }
    }
    let start = session::Start {
        kind: args.kind.clone(),
        group: args.group.clone(),
        filter: args.filter.clone(),
        window: args.window,
        latency: args.latency,
        limit: args.limit,
    };
    let mut app = session::app(&engine, &start).unwrap_or_else(|e| usage(&e));
    app.live = live;
    // The first table answers before any screen: a bad --where is a usage error.
    let first = if app.range.is_some() {
        match session::table(&engine, &app.view) {
            Ok((t, took)) => Some((t, took)),
            Err(e) if args.filter.is_some() => usage(&format!("--where: {e:#}")),
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    // The baseline of --diff: the same view of the other store (after the first table, so a
    // bad --where is said of the view).
    if let Some(other) = &args.diff {
        let data = Data::parse(other);
        args.store.check_cluster(&data)?;
        let base = Engine::store(
            &data,
            &stacks_sql::window::Window::default(),
            args.store.cluster.as_deref(),
        )
        .map_err(|e| e.context(format!("--diff {other}")))?;
        app.baseline = Some(diff::store_baseline(&base, &app.view, args.window, other)?);
    }
    let first = first.map(|(t, _)| t);
    let Some(once) = Once::of(&args) else {
        return interactive(engine, app);
    };
    let first_row = || first.as_ref().and_then(|t| t.rows.first());
    match once {
        Once::Table => print_once(first, args.format),
        Once::Peek => {
            let Some(row) = first_row() else {
                bail!("no rows to show");
            };
            let (title, tree) = tree::tree(&engine, &app.view, &row.values)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "Stacks of {title}")?;
            for i in tree.visible() {
                writeln!(out, "{}", tree.line(i))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Once::Heatmap => {
            let Some(row) = first_row() else {
                bail!("no rows to show");
            };
            print_heatmap(&engine, &app, row.values.clone(), args.format)
        }
        Once::Stacks { sandwich } => {
            if app.range.is_none() {
                bail!("no rows to show");
            }
            print_stacks(&engine, &app, sandwich.as_deref())
        }
        Once::Diff => {
            if app.range.is_none() {
                bail!("no rows to show");
            }
            print_diff(&engine, &app, args.format)
        }
    }
}

/// `--once --flame`: the folded stacks of the view; `--once --sandwich FUNC`: FUNC's callers
/// and callees.
fn print_stacks(engine: &Engine, app: &App, sandwich: Option<&str>) -> Result<ExitCode> {
    let flame = flame::flame(engine, &app.view)?;
    if flame.total() == 0 && flame.nodes.len() == 1 {
        bail!("no stacks in this view");
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match sandwich {
        None if app.baseline.is_some() => {
            let base = &app.baseline.as_ref().expect("checked").flame;
            for (stack, then, now) in crate::diff::folded(base, &flame) {
                writeln!(out, "{stack} {then} {now}")?;
            }
        }
        None => {
            for (stack, value) in flame.folded() {
                writeln!(out, "{stack} {value}")?;
            }
        }
        Some(query) => {
            let name = flame.find(query).map_err(anyhow::Error::msg)?;
            let unit = crate::profile::unit(app.view.kind.as_deref());
            for line in flame.sandwich(&name).lines(unit) {
                writeln!(out, "{}", line.text)?;
            }
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Columns of the heatmap `--once --heatmap` prints.
const HEATMAP_COLUMNS: usize = 60;

/// `--once --heatmap`: the latency heatmap of the first row, as the screen draws it (with
/// each bucket's events), or its cells as rows.
fn print_heatmap(
    engine: &Engine,
    app: &App,
    values: Vec<crate::view::Value>,
    format: TextFormat,
) -> Result<ExitCode> {
    if let Some(kind) = app.view.kind.as_deref()
        && !catalog::weights(kind).is_some_and(|w| w.latency)
    {
        bail!("--heatmap: kind {kind} has no latency (vfs, block, switch, span, state… have)");
    }
    let plan = heatmap::HeatmapPlan::new(&app.view, values, HEATMAP_COLUMNS);
    let h = heatmap::heatmap(engine, plan)?;
    if format != TextFormat::Table {
        return write_batch(&h.batch()?, format);
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in h.printed() {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `batch` as CSV or JSON on stdout.
fn write_batch(batch: &arrow_array::RecordBatch, format: TextFormat) -> Result<ExitCode> {
    let format = match format {
        TextFormat::Table => Format::Table,
        TextFormat::Csv => Format::Csv,
        TextFormat::Json => Format::Json,
    };
    let mut writer = Writer::new(format, &batch.schema(), Default::default())?;
    writer.write(batch)?;
    writer.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// `--once --diff`: each function's change against the baseline, the most changed first.
fn print_diff(engine: &Engine, app: &App, format: TextFormat) -> Result<ExitCode> {
    let flame = flame::flame(engine, &app.view)?;
    let base = app.baseline.as_ref().expect("--diff gave a baseline");
    if flame.total() == 0 && base.flame.total() == 0 {
        bail!("no stacks in this view, nor in the baseline");
    }
    let unit = crate::profile::unit(app.view.kind.as_deref());
    let changes = crate::diff::Diff::new(&base.flame, &flame);
    if format == TextFormat::Table {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        writeln!(out, "{}", diff::title(&changes, unit, &base.what))?;
        writeln!(out, "{}", diff::HEADER)?;
        for c in &changes.changes {
            writeln!(out, "{}", diff::line(c, &changes))?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let batch = diff::batch(&changes)?;
    let format = if format == TextFormat::Csv {
        Format::Csv
    } else {
        Format::Json
    };
    let mut writer = Writer::new(format, &batch.schema(), Default::default())?;
    writer.write(&batch)?;
    writer.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// `--once`: the table as text.
fn print_once(table: Option<crate::table::Table>, format: TextFormat) -> Result<ExitCode> {
    let Some(table) = table else {
        bail!("no rows to show");
    };
    let batch = table.batch(format == TextFormat::Table)?;
    let format = match format {
        TextFormat::Table => Format::Table,
        TextFormat::Csv => Format::Csv,
        TextFormat::Json => Format::Json,
    };
    let mut writer = Writer::new(format, &batch.schema(), Default::default())?;
    writer.write(&batch)?;
    writer.finish()?;
    Ok(ExitCode::SUCCESS)
}

/// How long the loop waits for an event before it looks at the live stream again.
const TICK: Duration = Duration::from_millis(200);

/// The screen, until q, Ctrl-C or a signal: one event at a time from the runner's queue
/// (keys from the input thread, answers of query jobs), the screen drawn after each burst.
fn interactive(mut engine: Engine, mut app: App) -> Result<ExitCode> {
    let mut screen = Screen::open()?;
    let mut runner = Runner::new();
    // The terminal's size sizes the sparkline; the first queries then fill the screen.
    app.resize(screen.terminal.size()?);
    screen.terminal.draw(|f| ui::draw(f, &app))?;
    screen.input(runner.sender())?;
    runner.query(&engine, &mut app);
    let result = event_loop(&mut screen, &mut engine, &mut runner, &mut app);
    // The terminal first, then the queries still running are left to the exit.
    drop(screen);
    drop(runner);
    engine.close();
    result
}

fn event_loop(
    screen: &mut Screen,
    engine: &mut Engine,
    runner: &mut Runner,
    app: &mut App,
) -> Result<ExitCode> {
    let mut last_refresh = Instant::now();
    // Live rows came that the table does not show yet.
    let mut behind = false;
    let mut event = None;
    loop {
        // The layout the keys move in is the one drawn now.
        app.resize(screen.terminal.size()?);
        screen.terminal.draw(|f| ui::draw(f, app))?;
        if event.is_none() {
            event = runner.next(TICK);
        }
        // Every event waiting is handled before the next draw.
        while let Some(e) = event.take() {
            match e {
                Event::Key(key) => {
                    if runner.key(engine, app, key) {
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                Event::Done(done) => runner.done(engine, app, done),
                Event::Resize => {}
                Event::Signal => return Ok(ExitCode::SUCCESS),
                // The terminal is gone: nothing to draw on, nobody to tell.
                Event::HungUp => return Ok(ExitCode::SUCCESS),
            }
            event = runner.ready();
        }
        if app.live {
            if last_refresh.elapsed() >= Duration::from_secs(1) {
                last_refresh = Instant::now();
                behind |= take_rows(engine, app).map_err(|e| e.context("the live stream"))?;
            }
            // Queried again once the last table query has answered (a query slower than a
            // second is not started over each second), at once when it has.
            if behind && !runner.running(Slot::Table) && app.follows_live() {
                behind = false;
                runner.query(engine, app);
                runner.live(engine, app);
            }
        }
    }
}

/// Live mode, once a second: the rows that arrived since the last refresh, and whether there
/// were any. The header's row count and state change even when no row came (the stream
/// ended); the table and the flame graph (zoom and selection kept) follow new rows.
fn take_rows(engine: &mut Engine, app: &mut App) -> Result<bool> {
    let fresh = engine.refresh()?;
    if app.columns.is_empty() {
        app.columns = engine.columns.clone();
    }
    app.source = engine.label();
    Ok(fresh)
}

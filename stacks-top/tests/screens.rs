//! Screens drawn into ratatui's `TestBackend` from the fixture store, compared with golden
//! text files (`STACKS_BLESS=1` rewrites them), and the keys that change them: drill down and
//! back, latency columns, the stack tree, the column picker, help, an SQL filter that fails,
//! a terminal too small; the flame graph (zoom, search, "…" boxes), the sandwich, and the
//! diff against a baseline (`b`, a filter, `d`, `F` coloured by the change), and the Space
//! menu including or excluding values, `<` `>` moving a group column, and a row's latency
//! heatmap (`H`).

use std::path::{Path, PathBuf};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use stacks_sql::Data;
use stacks_sql::window::Window;
use stacks_testkit::Scratch;
use stacks_testkit::recording as fixture;
use stacks_top::app::{App, Effect, Mode};
use stacks_top::engine::Engine;
use stacks_top::runner::{Runner, Slot};
use stacks_top::{session, ui};

fn golden_dir() -> PathBuf {
    stacks_testkit::crate_dir(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The fixture recording (60 rows per kind) as one Parquet file.
fn store() -> Scratch {
    let dir = Scratch::new("top-store");
    let rows = fixture::rows(60);
    stacks_testkit::write_parquet(
        &dir.path().join("fixture.parquet"),
        &[fixture::batch(&rows)],
    );
    dir
}

fn open(dir: &Path, start: session::Start) -> (Engine, App) {
    let engine = Engine::store(&Data::Dir(dir.to_path_buf()), &Window::default(), None).unwrap();
    let mut app = session::app(&engine, &start).unwrap();
    Runner::new().run(&engine, &mut app, Effect::Query);
    (engine, app)
}

fn start() -> session::Start {
    session::Start {
        kind: None,
        group: vec![],
        filter: None,
        window: 300_000_000_000,
        latency: false,
        limit: 1000,
    }
}

/// The screen as text, one line per row, trailing spaces cut; the timing and the store's
/// path (which differ per run) blanked.
fn screen(app: &mut App, w: u16, h: u16) -> String {
    app.timing.clear();
    app.source = "fixture".into();
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| ui::draw(f, app)).unwrap();
    let buf = t.backend().buffer().clone();
    let mut out = String::new();
    for y in 0..h {
        let mut line = String::new();
        for x in 0..w {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A key as the screen handles it, and what it asked for computed.
fn key(app: &mut App, engine: &Engine, code: KeyCode) {
    let mut runner = Runner::new();
    runner.key(engine, app, KeyEvent::new(code, KeyModifiers::NONE));
    runner.settle(engine, app);
}

#[test]
fn the_first_screen_ranks_threads_by_state() {
    let dir = store();
    let (_e, mut app) = open(dir.path(), start());
    assert_eq!(
        app.view.kind.as_deref(),
        Some("state"),
        "a store with state rows"
    );
    let s = screen(&mut app, 120, 20);
    stacks_testkit::golden::check_text(&golden_dir(), "first.txt", &s);
}

#[test]
fn enter_drills_into_the_cell_and_backspace_undoes_it() {
    let dir = store();
    let (e, mut app) = open(dir.path(), start());
    let before = app.table.clone().unwrap();
    let first = before.rows[0].values[0].shown.clone();
    key(&mut app, &e, KeyCode::Enter);
    let s = screen(&mut app, 120, 20);
    assert!(s.contains(&format!("Filters    state = {first}")), "{s}");
    let after = app.table.clone().unwrap();
    assert!(after.rows.iter().all(|r| r.values[0].shown == first));
    assert!(after.rows.len() < before.rows.len());
    key(&mut app, &e, KeyCode::Backspace);
    assert!(app.view.steps.is_empty());
    assert_eq!(app.table.as_ref().unwrap().rows, before.rows);
}

#[test]
fn latency_columns_show_histograms_and_percentiles() {
    let dir = store();
    let mut s = start();
    s.kind = Some("switch".into());
    s.latency = true;
    let (_e, mut app) = open(dir.path(), s);
    let text = screen(&mut app, 150, 16);
    stacks_testkit::golden::check_text(&golden_dir(), "latency.txt", &text);
}

#[test]
fn p_shows_the_merged_stack_tree_of_the_row() {
    let dir = store();
    let (e, mut app) = open(dir.path(), start());
    key(&mut app, &e, KeyCode::Char('p'));
    let Mode::Peek { tree, .. } = &app.mode else {
        panic!("no tree: {:?}", app.status)
    };
    assert!((tree.share(0) - 1.0).abs() < 1e-9);
    let text = screen(&mut app, 100, 20);
    stacks_testkit::golden::check_text(&golden_dir(), "tree.txt", &text);
    key(&mut app, &e, KeyCode::Esc);
    assert!(matches!(app.mode, Mode::Table));
}

#[test]
fn the_picker_searches_and_regroups() {
    let dir = store();
    let (e, mut app) = open(dir.path(), start());
    key(&mut app, &e, KeyCode::Char('g'));
    for c in "kfu".chars() {
        key(&mut app, &e, KeyCode::Char(c));
    }
    let text = screen(&mut app, 100, 16);
    stacks_testkit::golden::check_text(&golden_dir(), "picker.txt", &text);
    key(&mut app, &e, KeyCode::Enter);
    assert_eq!(
        app.view.group,
        ["state", "comm", "syscall", "path", "kfunc"]
    );
    assert!(!app.status.error, "{:?}", app.status);
}

#[test]
fn a_failing_filter_is_dropped_and_said_and_the_screen_stays() {
    let dir = store();
    let mut s = start();
    s.group = vec!["comm".into()];
    let (e, mut app) = open(dir.path(), s);
    let before = app.table.clone();
    key(&mut app, &e, KeyCode::Char('f'));
    for c in "no_such_column > 1".chars() {
        key(&mut app, &e, KeyCode::Char(c));
    }
    key(&mut app, &e, KeyCode::Enter);
    assert_eq!(
        app.status.text,
        "filter dropped: Schema error: No field named no_such_column"
    );
    assert!(app.status.error);
    assert!(app.view.steps.is_empty());
    assert_eq!(app.table, before);
    key(&mut app, &e, KeyCode::Char('f'));
    for c in "pid = 100".chars() {
        key(&mut app, &e, KeyCode::Char(c));
    }
    key(&mut app, &e, KeyCode::Enter);
    assert!(!app.status.error, "{:?}", app.status);
    assert!(
        app.table
            .as_ref()
            .unwrap()
            .rows
            .iter()
            .all(|r| r.values[0].shown == "alpha")
    );
}

#[test]
fn help_and_a_too_small_terminal() {
    let dir = store();
    let (e, mut app) = open(dir.path(), start());
    key(&mut app, &e, KeyCode::Char('h'));
    let text = screen(&mut app, 100, 24);
    stacks_testkit::golden::check_text(&golden_dir(), "help.txt", &text);
    key(&mut app, &e, KeyCode::Char('x'));
    assert!(matches!(app.mode, Mode::Table));
    let small = screen(&mut app, 40, 8);
    assert!(
        small.contains("needs a terminal of at least") && small.contains("60x12"),
        "{small}"
    );
}

fn keys(app: &mut App, engine: &Engine, codes: &[KeyCode]) {
    for c in codes {
        key(app, engine, *c);
    }
}

/// The status line of a screen `h` lines high (the line above the keys).
fn status_line(screen: &str, h: usize) -> &str {
    screen.lines().nth(h - 2).unwrap_or("")
}

#[test]
fn f_draws_the_flame_graph_of_the_view_and_enter_zooms() {
    let dir = store();
    let mut s = start();
    s.kind = Some("profile".into());
    let (e, mut app) = open(dir.path(), s);
    key(&mut app, &e, KeyCode::Char('F'));
    let Mode::Flame(v) = &app.mode else {
        panic!("no flame: {:?}", app.status)
    };
    // 60 profile rows of 10,101,010 ns each: every one is in the root.
    assert_eq!(v.flame.total(), 60 * 10_101_010);
    let text = screen(&mut app, 100, 20);
    stacks_testkit::golden::check_text(&golden_dir(), "flame.txt", &text);
    assert!(
        status_line(&text, 20).starts_with("all  self 0 ns (0.00%)  total 606060600 ns (100.00%)"),
        "{text}"
    );
    // Down to main, down to run (its hottest child), Enter: run is the full width.
    keys(
        &mut app,
        &e,
        &[KeyCode::Down, KeyCode::Down, KeyCode::Enter],
    );
    let zoomed = screen(&mut app, 100, 20);
    stacks_testkit::golden::check_text(&golden_dir(), "flame-zoomed.txt", &zoomed);
    let Mode::Flame(v) = &app.mode else {
        panic!("left the flame")
    };
    let run = v.zoomed();
    assert_eq!(v.flame.nodes[run].name, "run");
    let row = zoomed.lines().nth(7).unwrap();
    assert_eq!(row, "run", "the zoomed frame, full width:\n{zoomed}");
    // Backspace zooms out; Esc goes back to the table.
    key(&mut app, &e, KeyCode::Backspace);
    let Mode::Flame(v) = &app.mode else {
        panic!("left the flame")
    };
    assert_eq!(v.zoomed(), 0);
    key(&mut app, &e, KeyCode::Esc);
    assert!(matches!(app.mode, Mode::Table));
}

#[test]
fn the_flame_search_highlights_frames_and_sums_their_stacks() {
    let dir = store();
    let mut s = start();
    s.kind = Some("profile".into());
    let (e, mut app) = open(dir.path(), s);
    key(&mut app, &e, KeyCode::Char('F'));
    keys(
        &mut app,
        &e,
        &[
            KeyCode::Char('/'),
            KeyCode::Char('f'),
            KeyCode::Char('i'),
            KeyCode::Char('b'),
            KeyCode::Enter,
        ],
    );
    let Mode::Flame(v) = &app.mode else {
        panic!("left the flame")
    };
    // fib is three frames deep in its stacks: each stack counts once.
    let fib: i64 = v
        .flame
        .folded()
        .iter()
        .filter(|(s, _)| s.contains("fib"))
        .map(|(_, v)| v)
        .sum();
    assert!(fib > 0);
    let want = format!(
        "/fib: {fib} ns ({:.2}%)",
        100.0 * fib as f64 / v.flame.total() as f64
    );
    let text = screen(&mut app, 160, 20);
    assert!(status_line(&text, 20).contains(&want), "{want}\n{text}");
}

#[test]
fn narrow_frames_merge_into_one_box_with_their_share() {
    let dir = store();
    let mut s = start();
    // Off-CPU intervals of 10 µs to 5 ms: some stacks are far narrower than a cell.
    s.kind = Some("switch".into());
    let (e, mut app) = open(dir.path(), s);
    key(&mut app, &e, KeyCode::Char('F'));
    let text = screen(&mut app, 60, 16);
    let Mode::Flame(v) = &app.mode else {
        panic!("no flame: {:?}", app.status)
    };
    // The rows folding short intervals have no stack: their marker frame stands for them.
    assert!(
        v.flame
            .names()
            .contains(&"[folded short off-CPU intervals]"),
        "{:?}",
        v.flame.names()
    );
    let rows = v.flame.layout(0, 60);
    let merged: Vec<_> = rows.iter().flatten().filter(|b| b.node.is_none()).collect();
    assert!(!merged.is_empty(), "nothing narrower than a cell:\n{text}");
    for b in &merged {
        let share = format!("…{:.1}%", 100.0 * v.flame.share(b.value));
        if usize::from(b.w) > share.chars().count() {
            assert!(text.contains(&share), "{share} not drawn:\n{text}");
        }
    }
    // Whatever is merged, each row accounts for the whole of what is above it.
    for row in rows.iter().skip(1) {
        let drawn: i64 = row.iter().map(|b| b.value).sum();
        let parents: i64 = row
            .iter()
            .map(|b| b.parent)
            .collect::<std::collections::BTreeSet<_>>()
            .iter()
            .map(|&p| v.flame.nodes[p].total - v.flame.nodes[p].own)
            .sum();
        assert_eq!(drawn, parents);
    }
}

#[test]
fn s_opens_the_sandwich_of_the_selected_frame() {
    let dir = store();
    let mut s = start();
    s.kind = Some("profile".into());
    let (e, mut app) = open(dir.path(), s);
    key(&mut app, &e, KeyCode::Char('F'));
    // main › run, then its hottest child and s.
    keys(
        &mut app,
        &e,
        &[KeyCode::Down, KeyCode::Down, KeyCode::Char('s')],
    );
    let Mode::Sandwich { view, .. } = &app.mode else {
        panic!("no sandwich: {:?}", app.status)
    };
    assert_eq!(view.sandwich.name, "run");
    assert_eq!(view.sandwich.total, view.sandwich.callers.total());
    let text = screen(&mut app, 100, 24);
    stacks_testkit::golden::check_text(&golden_dir(), "sandwich.txt", &text);
    key(&mut app, &e, KeyCode::Esc);
    assert!(matches!(app.mode, Mode::Flame(_)), "back to the flame");

    // From the stack tree too, over the view's stacks.
    key(&mut app, &e, KeyCode::Esc);
    key(&mut app, &e, KeyCode::Char('p'));
    keys(&mut app, &e, &[KeyCode::Down, KeyCode::Char('s')]);
    let Mode::Sandwich { view, .. } = &app.mode else {
        panic!("no sandwich from the tree: {:?}", app.status)
    };
    assert_eq!(view.sandwich.name, "main");
    key(&mut app, &e, KeyCode::Esc);
    assert!(matches!(app.mode, Mode::Peek { .. }), "back to the tree");
}

#[test]
fn b_marks_a_baseline_and_d_shows_what_a_filter_changed() {
    let dir = store();
    let mut s = start();
    s.kind = Some("profile".into());
    let (e, mut app) = open(dir.path(), s);
    key(&mut app, &e, KeyCode::Char('d'));
    assert!(
        app.status.text.starts_with("no baseline"),
        "{:?}",
        app.status
    );
    // The whole view is the baseline; then only the rows of the first row's top user frame.
    key(&mut app, &e, KeyCode::Char('b'));
    let base_all = app.baseline.as_ref().expect("a baseline").flame.total();
    assert_eq!(base_all, 60 * 10_101_010);
    keys(&mut app, &e, &[KeyCode::Right, KeyCode::Right]);
    assert_eq!(app.view.group[app.col], "ufunc");
    let ufunc = app.rows()[0].values[app.col].shown.clone();
    keys(&mut app, &e, &[KeyCode::Enter, KeyCode::Char('d')]);
    let Mode::Diff(v) = &app.mode else {
        panic!("no diff: {:?}", app.status)
    };
    let d = &v.diff;
    assert_eq!(d.base_all, base_all);
    assert!(d.all < base_all && d.all > 0);
    // Every stack left goes through the frame drilled into.
    let c = d.get(&ufunc).expect("the drilled frame");
    assert_eq!(c.total, d.all);
    assert!((c.delta(d) - (1.0 - c.base_total as f64 / base_all as f64)).abs() < 1e-9);
    // Shares of each whole, the most changed first.
    let deltas: Vec<f64> = d.changes.iter().map(|c| c.delta(d).abs()).collect();
    assert!(deltas.windows(2).all(|w| w[0] >= w[1]), "{deltas:?}");
    let text = screen(&mut app, 120, 24);
    stacks_testkit::golden::check_text(&golden_dir(), "diff.txt", &text);

    // F: the flame of the view, coloured by the change: main is all of both (grey), run
    // under it grew from 80% to all (red).
    key(&mut app, &e, KeyCode::Char('F'));
    let Mode::Flame(v) = &app.mode else {
        panic!("no flame: {:?}", app.status)
    };
    assert!(v.base.is_some(), "the flame is compared with the baseline");
    let mut t = Terminal::new(TestBackend::new(120, 24)).unwrap();
    t.draw(|f| ui::draw(f, &app)).unwrap();
    let buf = t.backend().buffer().clone();
    use ratatui::style::Color;
    assert_eq!(buf[(0, 8)].symbol(), "m");
    assert_eq!(buf[(0, 8)].bg, Color::Rgb(200, 200, 200), "main: no change");
    assert_eq!(buf[(0, 9)].symbol(), "r");
    assert!(
        matches!(buf[(0, 9)].bg, Color::Rgb(250, g, b) if g == b && g < 200),
        "run grew: {:?}",
        buf[(0, 9)].bg
    );
    let text = screen(&mut app, 160, 24);
    assert!(
        text.contains("against the baseline's 606060600 ns"),
        "{text}"
    );
    assert!(
        status_line(&text, 24).contains("Δ +0.00% (baseline 100.00%"),
        "{text}"
    );
    // B forgets the baseline.
    keys(
        &mut app,
        &e,
        &[KeyCode::Esc, KeyCode::Char('B'), KeyCode::Char('d')],
    );
    assert!(app.baseline.is_none());
    assert!(matches!(app.mode, Mode::Table));
}

#[test]
fn space_includes_or_excludes_values_of_the_column() {
    let dir = store();
    let (e, mut app) = open(dir.path(), start());
    let before = app.table.clone().unwrap();
    let first = before.rows[0].values[0].shown.clone();
    // Space: the values of `state`, the first row's checked; Down, Space: a second one too.
    key(&mut app, &e, KeyCode::Char(' '));
    let Mode::Choose(c) = &app.mode else {
        panic!("no menu: {:?}", app.status)
    };
    assert_eq!(c.values[c.cursor].0.shown, first);
    let second = c.values[(c.cursor + 1) % c.values.len()].0.shown.clone();
    keys(&mut app, &e, &[KeyCode::Down, KeyCode::Char(' ')]);
    let text = screen(&mut app, 120, 20);
    stacks_testkit::golden::check_text(&golden_dir(), "choose.txt", &text);
    // Enter: only the two; then n: every other.
    key(&mut app, &e, KeyCode::Enter);
    let kept = app.table.clone().unwrap();
    assert!(
        kept.rows
            .iter()
            .all(|r| [&first, &second].contains(&&r.values[0].shown)),
        "{:?}",
        kept.rows
    );
    let text = screen(&mut app, 120, 20);
    assert!(
        text.contains(&format!("Filters    state IN ({first}, {second})")),
        "{text}"
    );
    keys(
        &mut app,
        &e,
        &[
            KeyCode::Backspace,
            KeyCode::Char(' '),
            KeyCode::Char('n'),
            KeyCode::Enter,
        ],
    );
    let left = app.table.clone().unwrap();
    assert!(!left.rows.is_empty());
    assert!(left.rows.iter().all(|r| r.values[0].shown != first));
    let sum = |t: &stacks_top::table::Table| t.rows.iter().map(|r| r.samples).sum::<i64>();
    let of_first: i64 = before
        .rows
        .iter()
        .filter(|r| r.values[0].shown == first)
        .map(|r| r.samples)
        .sum();
    assert_eq!(
        sum(&left),
        sum(&before) - of_first,
        "NOT IN leaves the rest"
    );
    // Esc cancels the menu.
    keys(&mut app, &e, &[KeyCode::Char(' '), KeyCode::Esc]);
    assert!(matches!(app.mode, Mode::Table));
}

#[test]
fn angle_brackets_move_the_highlighted_column_in_the_grouping() {
    let dir = store();
    let (e, mut app) = open(dir.path(), start());
    let before = app.table.clone().unwrap();
    key(&mut app, &e, KeyCode::Char('>'));
    assert_eq!(app.view.group, ["comm", "state", "syscall", "path"]);
    assert_eq!(app.col, 1, "the column stays highlighted");
    let after = app.table.clone().unwrap();
    assert_eq!(after.group, app.view.group);
    // The same groups, their cells in the new order.
    let swapped = |r: &stacks_top::table::Row| {
        let mut v: Vec<String> = r.values.iter().map(|v| v.shown.clone()).collect();
        v.swap(0, 1);
        (v, r.samples)
    };
    let mut want: Vec<_> = before.rows.iter().map(swapped).collect();
    let mut got: Vec<_> = after
        .rows
        .iter()
        .map(|r| {
            (
                r.values.iter().map(|v| v.shown.clone()).collect::<Vec<_>>(),
                r.samples,
            )
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let text = screen(&mut app, 120, 20);
    assert!(
        text.contains("GroupBy    comm, state, syscall, path"),
        "{text}"
    );
    keys(&mut app, &e, &[KeyCode::Char('<'), KeyCode::Char('<')]);
    assert_eq!(app.view.group, ["state", "comm", "syscall", "path"]);
    assert_eq!(app.status.text, "the column is at the edge already");
}

#[test]
fn h_shows_the_latency_heatmap_of_the_row() {
    let dir = store();
    let mut s = start();
    s.kind = Some("switch".into());
    s.latency = true;
    let (e, mut app) = open(dir.path(), s);
    let row = app.table.as_ref().unwrap().rows[0].clone();
    key(&mut app, &e, KeyCode::Char('H'));
    let Mode::Heatmap(h) = &app.mode else {
        panic!("no heatmap: {:?}", app.status)
    };
    // The row's events, bucket by bucket as its histogram counts them.
    let lat = row.latency.expect("latency columns");
    assert!(lat.n > 0);
    assert_eq!(h.total(), lat.n);
    assert_eq!(h.buckets(), lat.hist);
    let h = h.clone();
    let text = screen(&mut app, 120, 20);
    stacks_testkit::golden::check_text(&golden_dir(), "heatmap.txt", &text);
    // `--once --heatmap` prints the same lines, each bucket's events after it, which add up
    // to the row's histogram; -f csv a row per cell with events.
    let printed = h.printed().join("\n") + "\n";
    stacks_testkit::golden::check_text(&golden_dir(), "heatmap-once.txt", &printed);
    for (k, n) in lat.hist.iter().enumerate().filter(|(_, n)| **n > 0) {
        let label = stacks_top::heatmap::label(k);
        assert!(
            printed
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{label} "))
                    && l.ends_with(&format!("  {n}"))),
            "bucket {label}: {n} events\n{printed}"
        );
    }
    let cells = h.batch().unwrap();
    let events = cells
        .column_by_name("events")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow_array::Int64Array>()
        .unwrap();
    assert_eq!(events.iter().flatten().sum::<i64>(), lat.n);
    key(&mut app, &e, KeyCode::Char('t'));
    let Mode::Heatmap(h) = &app.mode else {
        panic!("left the heatmap")
    };
    assert!(h.by_time);
    assert!(screen(&mut app, 120, 20).contains("shade: time (t)"));
    key(&mut app, &e, KeyCode::Esc);
    assert!(matches!(app.mode, Mode::Table));
    // CPU samples have no latency.
    let mut s = start();
    s.kind = Some("profile".into());
    let (e, mut app) = open(dir.path(), s);
    key(&mut app, &e, KeyCode::Char('H'));
    assert!(matches!(app.mode, Mode::Table));
    assert!(
        app.status.text.starts_with("this kind has no latency"),
        "{:?}",
        app.status
    );
}

/// The screen answers keys while a view is computed: `F` starts the flame graph's query and
/// the title says so, `↓` moves the row before any answer is taken, `p` replaces the query
/// (the flame graph's answer, even if it came first, is dropped by its generation), Esc on
/// the table cancels one, and `q` quits with one outstanding.
#[test]
fn keys_are_answered_while_a_view_is_computed() {
    let dir = store();
    let (e, mut app) = open(dir.path(), start());
    let mut runner = Runner::new();
    let press = |runner: &mut Runner, app: &mut App, code| {
        runner.key(&e, app, KeyEvent::new(code, KeyModifiers::NONE))
    };
    assert!(!press(&mut runner, &mut app, KeyCode::Char('F')));
    assert!(runner.running(Slot::View));
    assert!(matches!(app.mode, Mode::Table));
    let s = screen(&mut app, 120, 20);
    assert!(
        s.lines()
            .next()
            .unwrap()
            .contains("computing the flame graph… (Esc cancels)"),
        "{s}"
    );
    let cursor = app.cursor;
    press(&mut runner, &mut app, KeyCode::Down);
    assert_eq!(app.cursor, cursor + 1, "a key handled while the query runs");
    assert!(runner.running(Slot::View), "the query still outstanding");
    press(&mut runner, &mut app, KeyCode::Char('p'));
    runner.settle(&e, &mut app);
    let Mode::Peek { title, .. } = &app.mode else {
        panic!("the flame graph's stale answer was taken: {:?}", app.status);
    };
    assert!(title.contains(&app.table.as_ref().unwrap().rows[1].values[0].shown));
    let s = screen(&mut app, 120, 20);
    assert!(!s.lines().next().unwrap().contains("computing"), "{s}");

    press(&mut runner, &mut app, KeyCode::Esc);
    press(&mut runner, &mut app, KeyCode::Char('F'));
    press(&mut runner, &mut app, KeyCode::Esc);
    assert!(!runner.running(Slot::View));
    assert_eq!(app.status.text, "the flame graph cancelled");
    runner.settle(&e, &mut app);
    assert!(
        matches!(app.mode, Mode::Table),
        "a cancelled view stays closed"
    );

    press(&mut runner, &mut app, KeyCode::Char('F'));
    assert!(
        press(&mut runner, &mut app, KeyCode::Char('q')),
        "q quits with a query outstanding"
    );
}

/// Keys move in the layout drawn at the terminal's size: on a 12-line terminal the table
/// shows 3 rows under its titles, and PgDn moves 3 rows (before any size is known, 20).
#[test]
fn a_page_is_the_rows_the_terminal_shows() {
    let dir = store();
    let (e, mut app) = open(dir.path(), start());
    let rows = app.rows().len();
    assert!(rows > 4, "{rows} rows");
    app.resize(ratatui::layout::Size::new(100, 12));
    let text = screen(&mut app, 100, 12);
    let lines: Vec<&str> = text.lines().collect();
    for (i, row) in app.rows().iter().take(3).enumerate() {
        assert!(lines[7 + i].starts_with(&row.values[0].shown), "{text}");
    }
    key(&mut app, &e, KeyCode::PageDown);
    assert_eq!(app.cursor, 3);
    key(&mut app, &e, KeyCode::PageUp);
    assert_eq!(app.cursor, 0);
}

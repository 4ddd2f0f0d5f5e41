//! Screens drawn into ratatui's `TestBackend` from the fixture store, compared with golden
//! text files (`STACKS_BLESS=1` rewrites them), and the keys that change them: drill down and
//! back, latency columns, the stack tree, the column picker, help, an SQL filter that fails,
//! a terminal too small.

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
    session::refresh(&engine, &mut app);
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

fn key(app: &mut App, engine: &Engine, code: KeyCode) {
    match app.on_key(KeyEvent::new(code, KeyModifiers::NONE)) {
        Effect::Query => session::refresh(engine, app),
        Effect::Peek => session::peek(engine, app),
        _ => {}
    }
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

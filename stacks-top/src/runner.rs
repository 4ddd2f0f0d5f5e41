//! The screen's one event queue and the query jobs behind it. Keys, resizes, a hung-up
//! terminal and signals (from the input thread, [`crate::term::Screen::input`]) and the
//! answers of queries (from the query runtime) arrive as [`Event`]s on one channel; the main
//! loop ([`crate::cli`]) takes them one at a time, so a slow query never holds up a key.
//!
//! A key changes the app state ([`App::on_key`]) and says what must be computed
//! ([`Effect`]); the runner turns that into a query job on the runtime, one per [`Slot`]
//! (the table, the sparkline, the view a key opened). A newer job in a slot replaces the
//! older one, which is aborted at its next await; its answer, if it was sent already, is
//! dropped by its generation number. Answers go into the app state in [`crate::answer`];
//! drawing ([`crate::ui`]) only reads the state, including what is being computed
//! ([`App::busy`]).

use std::future::Future;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use anyhow::Result;
use futures::FutureExt;
use ratatui::crossterm::event::{KeyCode, KeyEvent};

use crate::app::{App, Effect, Mode};
use crate::engine::{Engine, Job};
use crate::flame::Flame;
use crate::heatmap::Heatmap;
use crate::session::{self, HeatmapPlan, SparkPlan};
use crate::table::Table;
use crate::tree::Tree;

/// Something the main loop must handle.
pub enum Event {
    Key(KeyEvent),
    /// The terminal changed size: draw again.
    Resize,
    /// The terminal is gone (its window closed, its tmux server killed).
    HungUp,
    /// SIGINT, SIGTERM or SIGHUP arrived.
    Signal,
    /// A query job ended.
    Done(Done),
}

/// Where a query job runs: one job at a time in each, the newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    Table = 0,
    Spark = 1,
    /// What a key opened: a stack tree, the flame graph, a sandwich, the diff, a heatmap, a
    /// baseline; or the live flame graph following the stream.
    View = 2,
}

/// The end of a query job: its slot, its generation, and its answer.
pub struct Done {
    slot: Slot,
    generation: u64,
    reply: Result<Reply>,
}

/// What a query job computed.
pub enum Reply {
    Table(Table, Duration),
    Spark(Vec<f64>),
    Tree(Tree, Duration),
    Flame(Flame, Duration),
    Heatmap(Heatmap, Duration),
}

/// What a query job was started for: where its answer goes.
#[derive(Debug, Clone)]
pub enum Want {
    /// The table (an SQL filter was just added: dropped again if the query fails).
    Table {
        new_filter: bool,
    },
    Spark(SparkPlan),
    /// The stack tree of a row, titled.
    Peek {
        title: String,
    },
    /// The stack tree of a waker's own off-CPU intervals (`w` in the stack tree).
    Follow {
        title: String,
        name: String,
    },
    /// The flame graph of the view (`F`, or `[` `]` in it).
    Flame,
    /// The flame graph open on a live screen, drawn again from the rows kept now.
    LiveFlame,
    /// The sandwich of a function over the view's stacks.
    Sandwich(String),
    /// The view's stacks as the baseline (`b`), with its description.
    Baseline {
        what: String,
    },
    /// The diff of the view against the baseline (`d`).
    Diff,
    /// A row's latency heatmap (`H`).
    Heatmap,
}

impl Want {
    /// What the screen says is being computed.
    fn label(&self) -> &'static str {
        match self {
            Want::Table { .. } => "the table",
            Want::Spark(_) => "the sparkline",
            Want::Peek { .. } => "the row's stacks",
            Want::Follow { .. } => "the waker's stacks",
            Want::Flame | Want::LiveFlame => "the flame graph",
            Want::Sandwich(_) => "the sandwich",
            Want::Baseline { .. } => "the baseline",
            Want::Diff => "the diff",
            Want::Heatmap => "the heatmap",
        }
    }
}

/// A job running in a slot.
struct Pending {
    generation: u64,
    want: Want,
    /// Dropping it aborts the job.
    _job: Job<()>,
}

/// The event channel and the query jobs running.
pub struct Runner {
    tx: Sender<Event>,
    rx: Receiver<Event>,
    generation: u64,
    slots: [Option<Pending>; 3],
}

impl Default for Runner {
    fn default() -> Self {
        Self::new()
    }
}

impl Runner {
    pub fn new() -> Self {
        let (tx, rx) = channel();
        Runner {
            tx,
            rx,
            generation: 0,
            slots: [None, None, None],
        }
    }

    /// A sender of events into the queue (for the input thread).
    pub fn sender(&self) -> Sender<Event> {
        self.tx.clone()
    }

    /// The next event, waiting up to `timeout` for one.
    pub fn next(&self, timeout: Duration) -> Option<Event> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// The next event if one is there.
    pub fn ready(&self) -> Option<Event> {
        self.rx.try_recv().ok()
    }

    /// Whether a job runs in `slot`.
    pub fn running(&self, slot: Slot) -> bool {
        self.slots[slot as usize].is_some()
    }

    /// Handle a key: the app's state changes, and what it asks for is started. A view still
    /// being computed is cancelled when the key leaves the part of the screen it was asked
    /// from, or is Esc on the table. Whether the key quits.
    pub fn key(&mut self, engine: &Engine, app: &mut App, key: KeyEvent) -> bool {
        let before = std::mem::discriminant(&app.mode);
        let on_table = matches!(app.mode, Mode::Table);
        let effect = app.on_key(key);
        if effect == Effect::Quit {
            return true;
        }
        let left = std::mem::discriminant(&app.mode) != before;
        let esc = on_table && key.code == KeyCode::Esc;
        if (left || esc) && effect == Effect::None {
            self.cancel_view(app);
        }
        self.effect(engine, app, effect);
        false
    }

    /// Stop computing the view a key asked for.
    pub(crate) fn cancel_view(&mut self, app: &mut App) {
        if let Some(p) = self.slots[Slot::View as usize].take() {
            if !matches!(p.want, Want::LiveFlame) {
                app.info(format!("{} cancelled", p.want.label()));
            }
            self.show(app);
        }
    }

    /// Start what `effect` asks for.
    pub fn effect(&mut self, engine: &Engine, app: &mut App, effect: Effect) {
        match effect {
            Effect::None | Effect::Quit => {}
            Effect::Query => self.query(engine, app),
            Effect::Peek => self.peek(engine, app),
            Effect::Follow => self.follow(engine, app),
            Effect::Flame => {
                self.sync_table(engine, app);
                self.flame(engine, app, Want::Flame);
            }
            Effect::Sandwich => {
                if let Some(name) = app.sandwich_of.take() {
                    self.flame(engine, app, Want::Sandwich(name));
                }
            }
            Effect::Baseline => {
                let what = crate::baseline::describe(app);
                self.flame(engine, app, Want::Baseline { what });
            }
            Effect::Diff => {
                self.sync_table(engine, app);
                if crate::baseline::baseline(app).is_some() {
                    self.flame(engine, app, Want::Diff);
                }
            }
            Effect::Heatmap => self.heatmap(engine, app),
        }
    }

    /// Query the table and the sparkline of the app's view. The range and kinds are the
    /// engine's now; without rows there is nothing to query.
    pub fn query(&mut self, engine: &Engine, app: &mut App) {
        app.kinds = engine.kinds.clone();
        app.source = engine.label();
        app.set_range(engine.range(app.view.kind.as_deref()));
        if app.range.is_none() {
            app.table = None;
            app.spark = crate::app::Spark::default();
            app.spark_key = None;
            self.slots[Slot::Table as usize] = None;
            self.slots[Slot::Spark as usize] = None;
            self.show(app);
            app.info(if app.live {
                "waiting for rows on stdin"
            } else {
                "no rows"
            });
            return;
        }
        let new_filter = std::mem::take(&mut app.new_filter);
        let (q, view) = (engine.querier(), app.view.clone());
        self.submit(
            engine,
            app,
            Slot::Table,
            Want::Table { new_filter },
            async {
                let (t, took) = session::table_of(q, view).await?;
                Ok(Reply::Table(t, took))
            },
        );
        // A condition just typed may not plan: the sparkline waits for the table to say so
        // (and drop it), not to fail the same way.
        if !new_filter {
            self.spark(engine, app);
        }
    }

    /// Compute the sparkline again if what it shows changed.
    pub(crate) fn spark(&mut self, engine: &Engine, app: &mut App) {
        let pending = match &self.slots[Slot::Spark as usize] {
            Some(Pending {
                want: Want::Spark(p),
                ..
            }) => Some(&p.key),
            _ => None,
        };
        let Some(plan) = session::spark_plan(engine, app, pending) else {
            return;
        };
        let q = engine.querier();
        let job = plan.clone();
        self.submit(engine, app, Slot::Spark, Want::Spark(plan), async {
            Ok(Reply::Spark(session::spark_of(q, job).await?))
        });
    }

    /// Query the table again when the window moved under another view (`[` `]` in the flame
    /// graph or the diff), so the screen behind it is the same view.
    fn sync_table(&mut self, engine: &Engine, app: &mut App) {
        if app
            .table
            .as_ref()
            .is_some_and(|t| t.window != app.view.window)
        {
            self.query(engine, app);
        }
    }

    /// The flame graph of the view, for `want`.
    fn flame(&mut self, engine: &Engine, app: &mut App, want: Want) {
        let (q, view) = (engine.querier(), app.view.clone());
        self.submit(engine, app, Slot::View, want, async {
            let (f, took) = session::flame_of(q, view).await?;
            Ok(Reply::Flame(f, took))
        });
    }

    /// Live: the flame graph on the screen follows the rows kept now, unless a key asked for
    /// a view that is being computed.
    pub(crate) fn live_flame(&mut self, engine: &Engine, app: &mut App) {
        if matches!(app.mode, Mode::Flame(_)) && !self.running(Slot::View) {
            self.flame(engine, app, Want::LiveFlame);
        }
    }

    /// The stack tree of the highlighted row.
    fn peek(&mut self, engine: &Engine, app: &mut App) {
        let Some(values) = app.rows().get(app.cursor).map(|r| r.values.clone()) else {
            return;
        };
        let title = session::row_title(&app.view, &values);
        let (q, view) = (engine.querier(), app.view.clone());
        self.submit(engine, app, Slot::View, Want::Peek { title }, async {
            let (t, took) = session::tree_of(q, view, values).await?;
            Ok(Reply::Tree(t, took))
        });
    }

    /// The tree of the waker in [`App::follow_waker`]'s own off-CPU intervals.
    fn follow(&mut self, engine: &Engine, app: &mut App) {
        let Some((tid, name)) = app.follow_waker.take() else {
            return;
        };
        let Mode::Peek { title, .. } = &app.mode else {
            return;
        };
        let title = format!("{title} ← {name}");
        let (q, view) = (engine.querier(), app.view.clone());
        self.submit(
            engine,
            app,
            Slot::View,
            Want::Follow { title, name },
            async move {
                let (t, took) = session::waker_tree_of(q, view, tid).await?;
                Ok(Reply::Tree(t, took))
            },
        );
    }

    /// The latency heatmap of the highlighted row, as wide as the sparkline.
    fn heatmap(&mut self, engine: &Engine, app: &mut App) {
        let Some(values) = app.rows().get(app.cursor).map(|r| r.values.clone()) else {
            return;
        };
        let plan = HeatmapPlan::new(app, values, app.spark_width.get());
        let q = engine.querier();
        self.submit(engine, app, Slot::View, Want::Heatmap, async {
            let (h, took) = session::heatmap_of(q, plan).await?;
            Ok(Reply::Heatmap(h, took))
        });
    }

    /// Start `work` in `slot` for `want`, replacing (and aborting) the job there.
    fn submit<F>(&mut self, engine: &Engine, app: &mut App, slot: Slot, want: Want, work: F)
    where
        F: Future<Output = Result<Reply>> + Send + 'static,
    {
        self.generation += 1;
        let generation = self.generation;
        let tx = self.tx.clone();
        let job = engine.spawn(async move {
            let reply = match std::panic::AssertUnwindSafe(work).catch_unwind().await {
                Ok(reply) => reply,
                Err(_) => Err(anyhow::anyhow!("the query panicked")),
            };
            // The screen may be gone already: nobody to tell.
            let _ = tx.send(Event::Done(Done {
                slot,
                generation,
                reply,
            }));
        });
        self.slots[slot as usize] = Some(Pending {
            generation,
            want,
            _job: job,
        });
        self.show(app);
    }

    /// A job ended: its answer goes into the app, unless a newer job replaced it.
    pub fn done(&mut self, engine: &Engine, app: &mut App, done: Done) {
        let slot = &mut self.slots[done.slot as usize];
        if slot
            .as_ref()
            .is_none_or(|p| p.generation != done.generation)
        {
            return;
        }
        let pending = slot.take().expect("checked");
        self.show(app);
        let after_filter = matches!(pending.want, Want::Table { new_filter: true });
        crate::answer::apply(app, pending.want, done.reply);
        if after_filter {
            self.spark(engine, app);
        }
    }

    /// Wait for every job running and put their answers into the app (text mode and tests:
    /// the screen as it is once everything asked for is there).
    pub fn settle(&mut self, engine: &Engine, app: &mut App) {
        while self.slots.iter().any(Option::is_some) {
            match self.rx.recv() {
                Ok(Event::Done(d)) => self.done(engine, app, d),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }

    /// Handle `effect` and wait for what it asked for ([`Self::settle`]).
    pub fn run(&mut self, engine: &Engine, app: &mut App, effect: Effect) {
        self.effect(engine, app, effect);
        self.settle(engine, app);
    }

    /// Tell the app what is being computed.
    fn show(&self, app: &mut App) {
        let want = |s: Slot| self.slots[s as usize].as_ref().map(|p| &p.want);
        app.busy.table = self.running(Slot::Table);
        app.busy.spark = match want(Slot::Spark) {
            Some(Want::Spark(p)) => Some(p.key.clone()),
            _ => None,
        };
        app.busy.view = match want(Slot::View) {
            None | Some(Want::LiveFlame) => None,
            Some(w) => Some(w.label()),
        };
    }
}

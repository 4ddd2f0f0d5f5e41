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
//! (`App::busy`).

use std::future::Future;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use anyhow::Result;
use futures::FutureExt;
use ratatui::crossterm::event::{KeyCode, KeyEvent};

use crate::answer::{Reply, Want};
use crate::app::{App, Effect, Mode};
use crate::engine::{Engine, Task};
use crate::session;
use crate::views::Job;

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

/// A job running in a slot.
struct Pending {
    generation: u64,
    want: Want,
    /// Dropping it aborts the job.
    _task: Task<()>,
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
        if matches!(effect, Effect::Quit) {
            return true;
        }
        let left = std::mem::discriminant(&app.mode) != before;
        let esc = on_table && key.code == KeyCode::Esc;
        if (left || esc) && matches!(effect, Effect::None) {
            self.cancel_view(app);
        }
        self.effect(engine, app, effect);
        false
    }

    /// Stop computing the view a key asked for.
    pub(crate) fn cancel_view(&mut self, app: &mut App) {
        if let Some(p) = self.slots[Slot::View as usize].take() {
            if !p.want.quiet() {
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
            Effect::Open(job) => self.open(engine, app, job),
        }
    }

    /// Start `job` in the view's slot (the table queried again first if it asks for it and
    /// the window moved).
    fn open(&mut self, engine: &Engine, app: &mut App, job: Job) {
        if job.sync {
            self.sync_table(engine, app);
        }
        let want = Want::Pane {
            label: job.label,
            error: job.error,
            quiet: job.quiet,
        };
        let work = (job.work)(engine.querier());
        self.submit(engine, app, Slot::View, want, async {
            Ok(Reply::Pane(work.await?))
        });
    }

    /// Live: the pane on the screen follows the rows kept now, unless a key asked for a
    /// view that is being computed.
    pub(crate) fn live(&mut self, engine: &Engine, app: &mut App) {
        if self.running(Slot::View) {
            return;
        }
        if let Some(job) = app.live_job() {
            self.open(engine, app, job);
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

    /// Start `work` in `slot` for `want`, replacing (and aborting) the job there.
    fn submit<F>(&mut self, engine: &Engine, app: &mut App, slot: Slot, want: Want, work: F)
    where
        F: Future<Output = Result<Reply>> + Send + 'static,
    {
        self.generation += 1;
        let generation = self.generation;
        let tx = self.tx.clone();
        let task = engine.spawn(async move {
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
            _task: task,
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
            Some(w) if !w.quiet() => Some(w.label()),
            _ => None,
        };
    }
}

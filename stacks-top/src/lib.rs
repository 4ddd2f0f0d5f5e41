//! `stacks-top`: a navigable terminal screen over a stacks store or a live recording — the
//! rows grouped by any column and ranked by average active threads, latency histograms, the
//! merged stack tree of a row, the flame graph of the view, a function's sandwich and the
//! diff against a baseline — and its first table, folded stacks, a sandwich or a diff as text
//! for scripts (`--once`).
//!
//! Layers, bottom-up, each module using only those of the layers before it (checked by
//! `tests/architecture.rs`):
//! [`catalog`] (kinds' weights, groupable columns), [`flame`] (stacks as a flame graph),
//! [`tree`] (a row's stack tree) →
//! [`view`] (a screen's view and its SQL), [`diff`] (two flames compared),
//! [`profile`] (query rows as a flame) →
//! [`fmt`] (numbers and times as text) →
//! [`live`] (stdin's rows kept), [`table`] (the table's rows) →
//! [`engine`] (a store or live stdin as tables, running queries) →
//! [`views`] (the panes: each one's state, keys, drawing, query and answer) →
//! [`app`] (the screen's state and the table's keys) →
//! [`input`] (the picker's and inputs' keys), [`session`] (how a screen starts; the table's
//! and the sparkline's queries) →
//! [`answer`] (answers into the state) →
//! [`runner`] (one event queue: keys, and query jobs run away from them) →
//! [`ui`] (drawing), [`term`] (the terminal) →
//! [`cli`].

#![warn(unreachable_pub)]

pub mod answer;
pub mod app;
pub mod catalog;
pub mod cli;
pub mod diff;
pub mod engine;
pub mod flame;
pub mod fmt;
mod input;
pub mod live;
pub mod profile;
pub mod runner;
pub mod session;
pub mod table;
pub mod term;
pub mod tree;
pub mod ui;
pub mod view;
pub mod views;

pub use views::heatmap;

pub use cli::run;

/// Tool name used in messages.
pub const TOOL: &str = "stacks-top";

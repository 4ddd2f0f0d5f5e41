//! `stacks-top`: a navigable terminal screen over a stacks store or a live recording — the
//! rows grouped by any column and ranked by average active threads, latency histograms, the
//! merged stack tree of a row, the flame graph of the view, a function's sandwich and the
//! diff against a baseline — and its first table, folded stacks, a sandwich or a diff as text
//! for scripts (`--once`).
//!
//! Layers: [`catalog`] (kinds' weights, groupable columns) → [`view`] (a screen's view and its
//! SQL) → [`engine`] (a store or [`live`] stdin as tables, running queries) → [`table`] and
//! [`tree`] (results), [`profile`] (the view's stacks as a [`flame`] graph) → [`app`] and
//! [`icicle`] (state and keys); [`diff`] (two flames compared) → [`compare`] (the baseline
//! and the diff view), [`heatmap`], [`choose`] (the Space menu) → [`session`] (a view's
//! queries) → [`runner`] (one event queue: keys, and query jobs run away from them) →
//! [`answer`] and [`baseline`] (their answers into the state) → [`ui`], [`ui_header`] and
//! [`ui_flame`] (drawing) and [`term`] (the terminal) → [`cli`].

#![warn(unreachable_pub)]

pub mod answer;
pub mod app;
pub mod baseline;
pub mod catalog;
pub mod choose;
pub mod cli;
pub mod compare;
pub mod diff;
pub mod engine;
pub mod flame;
pub mod fmt;
pub mod heatmap;
pub mod icicle;
mod input;
pub mod live;
pub mod profile;
pub mod runner;
pub mod session;
pub mod table;
pub mod term;
pub mod tree;
pub mod ui;
pub mod ui_flame;
pub mod ui_header;
pub mod view;

pub use cli::run;

/// Tool name used in messages.
pub const TOOL: &str = "stacks-top";

//! `stacks-top`: a navigable terminal screen over a stacks store or a live recording — the
//! rows grouped by any column and ranked by average active threads, latency histograms, the
//! merged stack tree of a row, the flame graph of the view and a function's sandwich — and
//! its first table, folded stacks or a sandwich as text for scripts (`--once`).
//!
//! Layers: [`catalog`] (kinds' weights, groupable columns) → [`view`] (a screen's view and its
//! SQL) → [`engine`] (a store or [`live`] stdin as tables, running queries) → [`table`] and
//! [`tree`] (results), [`profile`] (the view's stacks as a [`flame`] graph) → [`app`] and
//! [`icicle`] (state and keys) → [`session`] (answering a view) → [`ui`] and [`ui_flame`]
//! (drawing) and [`term`] (the terminal) → [`cli`].

#![warn(unreachable_pub)]

pub mod app;
pub mod catalog;
pub mod cli;
pub mod engine;
pub mod flame;
pub mod fmt;
pub mod icicle;
pub mod live;
pub mod profile;
pub mod session;
pub mod table;
pub mod term;
pub mod tree;
pub mod ui;
pub mod ui_flame;
pub mod view;

pub use cli::run;

/// Tool name used in messages.
pub const TOOL: &str = "stacks-top";

//! `stacks-top`: a navigable terminal screen over a stacks store or a live recording — the
//! rows grouped by any column and ranked by average active threads, latency histograms, the
//! merged stack tree of a row — and its first table as text for scripts (`--once`).
//!
//! Layers: [`catalog`] (kinds' weights, groupable columns) → [`view`] (a screen's view and its
//! SQL) → [`engine`] (a store or [`live`] stdin as tables, running queries) → [`table`] and
//! [`tree`] (results) → [`app`] (state and keys) → [`session`] (answering a view) → [`ui`]
//! (drawing) and [`term`] (the terminal) → [`cli`].

#![warn(unreachable_pub)]

pub mod app;
pub mod catalog;
pub mod cli;
pub mod engine;
pub mod fmt;
pub mod live;
pub mod session;
pub mod table;
pub mod term;
pub mod tree;
pub mod ui;
pub mod view;

pub use cli::run;

/// Tool name used in messages.
pub const TOOL: &str = "stacks-top";

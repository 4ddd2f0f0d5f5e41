//! `stacks-agent`: always-on recording on a host. It runs `stacks-record | stacks-symbolize |
//! stacks-pack` as child processes joined by pipes (each tool stays what it is and works
//! alone), configured by one TOML file whose keys are also flags; restarts a stage that dies,
//! coherently and with backoff; and serves `/metrics` in the Prometheus text format. See
//! docs/agent.md.

#![warn(unreachable_pub)]

mod budget;
mod cli;
mod config;
mod controller;
mod inflight;
mod metrics;
mod packstats;
mod stage;
mod supervise;

pub use cli::run;

/// Tool name used in messages.
pub const TOOL: &str = "stacks-agent";

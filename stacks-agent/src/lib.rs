//! `stacks-agent`: always-on recording on a host. It runs `stacks-record | stacks-symbolize |
//! stacks-pack` as child processes joined by pipes (each tool stays what it is and works
//! alone), configured by one TOML file whose keys are also flags; restarts a stage that dies,
//! coherently and with backoff; and serves `/metrics` in the Prometheus text format. See
//! docs/agent.md.

pub mod budget;
pub mod cli;
pub mod config;
pub mod metrics;
pub mod packstats;
pub mod stage;
pub mod supervise;

pub use cli::run;

/// Tool name used in messages.
pub const TOOL: &str = "stacks-agent";

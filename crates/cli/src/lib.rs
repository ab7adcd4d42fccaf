//! The `tollgate` command line: argument parsing and wiring only.
//!
//! # Layout
//!
//! - [`args`]: the clap definitions of every subcommand.
//! - [`simulate`]: `tollgate simulate`, replaying a trace through one limit.
//! - [`serve`]: `tollgate serve`, the decision service.
//! - [`check_rules`]: `tollgate check-rules`, validating rules files.
//! - [`gateway`]: `tollgate gateway`, the reverse proxy.
//! - [`pace`]: `tollgate pace`, waiting for a slot on a service, then
//!   running a command.
//! - [`store`]: the store of `serve` and `gateway`, built once for both.
//! - [`connections`]: the connection cap and timeouts of `serve` and
//!   `gateway`.
//! - [`config_file`], [`logging`], [`shutdown`]: what the long-running
//!   subcommands share — the TOML file and the error of a bad setting,
//!   logs, and the shutdown signal.
//!
//! Each subcommand's module turns parsed arguments into calls on the library
//! crates and writes the results; none of them holds rate-limiting logic.

pub mod args;
pub mod check_rules;
pub mod config_file;
pub mod connections;
pub mod gateway;
pub mod logging;
pub mod pace;
pub mod serve;
pub mod shutdown;
pub mod simulate;
pub mod store;

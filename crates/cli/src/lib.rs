//! The `tollgate` command line: argument parsing and wiring only.
//!
//! # Layout
//!
//! - [`args`]: the clap definitions of every subcommand.
//! - [`simulate`]: `tollgate simulate`, replaying a trace through one limit.
//! - [`serve`]: `tollgate serve`, the decision service.
//! - [`check_rules`]: `tollgate check-rules`, validating rules files.
//! - [`pace`]: `tollgate pace`, waiting for a slot on a service, then
//!   running a command.
//!
//! Each subcommand's module turns parsed arguments into calls on the library
//! crates and writes the results; none of them holds rate-limiting logic.

pub mod args;
pub mod check_rules;
pub mod pace;
pub mod serve;
pub mod simulate;

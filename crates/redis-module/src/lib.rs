//! `libtollgate_redis.so`: a Redis module in which tollgate-core's own
//! algorithms decide, one command call per decision, on the state format
//! the store's Lua scripts share (docs/redis-state.md), so that either
//! engine reads what the other wrote.
//!
//! ```text
//! redis-server --loadmodule /path/to/libtollgate_redis.so
//! ```
//!
//! # Layout
//!
//! - `command`: `TOLLGATE.DECIDE2` and `TOLLGATE.RESET` — arguments, keys,
//!   writes, TTLs, replication of the effects, the reply; panics caught.
//! - `sync`: `TOLLGATE.SYNC` and `TOLLGATE.SYNCPACKED`, the async sync
//!   mode's batch: many keys' usage recorded and their states read back
//!   in one call.
//! - `decide`: the operations over a call's limits (check, probe, reserve,
//!   next, record, release, settle), as the script's driver runs them.
//! - `spec`: a limit's spec words into a ban and an algorithm with its
//!   state's encoding (the version-1 format is `tollgate-state`'s);
//!   `specs`: the specs of recent calls, parsed once.
//! - `ban`: a limit's ban words and its ban state's value.
//! - `cell`: one limit and its state behind one interface.
//! - `ffi`: the Redis C API where the module calls it directly.
//! - `error`: the error replies.
// The unit tests leave the registration out, and with it the only users of
// the commands.
#![cfg_attr(test, allow(dead_code))]

mod ban;
mod cell;
mod command;
mod decide;
mod error;
mod ffi;
mod spec;
mod specs;
mod sync;

/// The module's registration with Redis: its name and its commands with
/// their key specs. The commands are registered through the C API (see
/// `ffi`) so that their handlers read Redis's argument vector as it is.
/// Left out of the unit tests, which run without Redis (the module's
/// allocator is Redis's).
#[cfg(not(test))]
#[allow(unsafe_code, missing_docs)]
mod entry {
    use redis_module::{redis_module, Context, RedisString, Status};

    use crate::command::{decide, reset};
    use crate::ffi::create_command;
    use crate::sync::{sync, sync_packed};

    fn register(ctx: &Context, _args: &[RedisString]) -> Status {
        // Keys at 1, 4, 7, …, up to the second argument from the end.
        let decide = create_command(
            ctx.ctx,
            c"tollgate.decide2",
            decide,
            c"write deny-oom",
            (1, -2, 3),
        );
        let reset = create_command(ctx.ctx, c"tollgate.reset", reset, c"write", (1, 1, 1));
        // Keys at 1, 5, 9, …, up to the second argument from the end.
        let sync = create_command(
            ctx.ctx,
            c"tollgate.sync",
            sync,
            c"write deny-oom",
            (1, -2, 4),
        );
        // Keys at 4, 6, 8, …, up to the second argument from the end.
        let sync_packed = create_command(
            ctx.ctx,
            c"tollgate.syncpacked",
            sync_packed,
            c"write deny-oom",
            (4, -2, 2),
        );
        if decide && reset && sync && sync_packed {
            Status::Ok
        } else {
            Status::Err
        }
    }

    redis_module! {
        name: "tollgate",
        version: 1,
        allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
        data_types: [],
        init: register,
    }
}

//! The Lua script every operation runs, assembled from `src/lua`: the
//! bigint library, the algorithm table, the helpers shared by several
//! algorithms, one file per algorithm, and the driver that decodes the call
//! and runs the operation. See driver.lua for the calling convention.
//!
//! Redis runs the whole script from its top level on every call, so every
//! file past algorithms.lua only registers a loader: a call builds the
//! functions of the algorithms it uses, and of nothing else.

/// The whole script. `redis::Script` calls it by SHA1 (`EVALSHA`) and loads
/// it again when a server answers `NOSCRIPT` (after a restart, a failover
/// or `SCRIPT FLUSH`).
pub(crate) const SOURCE: &str = concat!(
    include_str!("lua/bigint.lua"),
    "\n",
    include_str!("lua/algorithms.lua"),
    "\n",
    include_str!("lua/bucket.lua"),
    "\n",
    include_str!("lua/packed_rows.lua"),
    "\n",
    include_str!("lua/tally.lua"),
    "\n",
    include_str!("lua/windows.lua"),
    "\n",
    include_str!("lua/gcra.lua"),
    "\n",
    include_str!("lua/token_bucket.lua"),
    "\n",
    include_str!("lua/leaky_bucket.lua"),
    "\n",
    include_str!("lua/fixed_window.lua"),
    "\n",
    include_str!("lua/stepped_window.lua"),
    "\n",
    include_str!("lua/concurrency.lua"),
    "\n",
    include_str!("lua/sliding_log.lua"),
    "\n",
    include_str!("lua/sliding_counter.lua"),
    "\n",
    include_str!("lua/ban.lua"),
    "\n",
    include_str!("lua/driver.lua"),
);

/// The lean script: `check` and `probe` over gcra limits in plain Lua
/// numbers, for the cells that [`lean`](crate::cells::lean) admits; it
/// answers `fallback` for what it cannot decide (see the file).
pub(crate) const LEAN_GCRA: &str = include_str!("lua/gcra_lean.lua");

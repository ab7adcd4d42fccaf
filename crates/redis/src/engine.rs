//! Which engine decides on Redis: tollgate's native module
//! (`TOLLGATE.DECIDE2`, crates/redis-module) where every node the store
//! talks to has it loaded, the Lua script otherwise. Both read and write
//! the same state (docs/redis-state.md), so the store may switch from one
//! call to the next without losing a count.
//!
//! [`Engine`] is the setting (`--redis-engine auto|module|lua`);
//! [`EngineState`] is what the store found when it last looked, and when
//! that was: it looks again on first use, after an outage (a reconnect or a
//! failover may have put a node without the module in front), when a node
//! answers that it does not know the command, and every
//! [`REPROBE`] while it runs the script (a rolling upgrade may have loaded
//! the module everywhere since).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// The module's command.
pub(crate) const COMMAND: &str = "TOLLGATE.DECIDE2";

/// How often a store running the script under `auto` looks for the module
/// again.
pub(crate) const REPROBE: Duration = Duration::from_secs(30);

/// Which engine the store uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Engine {
    /// The module when every node has it, the script otherwise.
    #[default]
    Auto,
    /// The module only: calls fail while a node lacks it.
    Module,
    /// The script only (managed Redis that allows no modules).
    Lua,
}

impl Engine {
    /// The setting's name: `auto`, `module` or `lua`.
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Auto => "auto",
            Engine::Module => "module",
            Engine::Lua => "lua",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An engine name that is none of `auto`, `module`, `lua`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown Redis engine {0:?} (expected auto, module or lua)")]
pub struct EngineError(pub String);

impl FromStr for Engine {
    type Err = EngineError;

    fn from_str(text: &str) -> Result<Engine, EngineError> {
        match text {
            "auto" => Ok(Engine::Auto),
            "module" => Ok(Engine::Module),
            "lua" => Ok(Engine::Lua),
            other => Err(EngineError(other.to_owned())),
        }
    }
}

/// The engine deciding now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Running {
    /// `TOLLGATE.DECIDE2`.
    Module,
    /// The Lua script.
    Lua,
}

impl Running {
    /// `module` or `lua`.
    pub fn as_str(self) -> &'static str {
        match self {
            Running::Module => "module",
            Running::Lua => "lua",
        }
    }
}

const UNKNOWN: u8 = 0;
const MODULE: u8 = 1;
const LUA: u8 = 2;

/// What the store last found, and when.
pub(crate) struct EngineState {
    running: AtomicU8,
    /// Milliseconds after `epoch` of the last probe.
    probed_ms: AtomicU64,
    epoch: Instant,
    /// The module answered `TOLLGATE.SYNC` unknown (an earlier release):
    /// sync batches go as `record` calls and `HGET`s until the next probe.
    no_sync_call: AtomicBool,
    /// The module answered `TOLLGATE.SYNCPACKED` unknown (an earlier
    /// release): sync batches go as `TOLLGATE.SYNC` calls until the next
    /// probe.
    no_packed_call: AtomicBool,
}

impl EngineState {
    pub(crate) fn new() -> EngineState {
        EngineState {
            running: AtomicU8::new(UNKNOWN),
            probed_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            no_sync_call: AtomicBool::new(false),
            no_packed_call: AtomicBool::new(false),
        }
    }

    /// The engine found by the last probe, unless it is time to look again.
    pub(crate) fn current(&self) -> Option<Running> {
        match self.running.load(Ordering::Relaxed) {
            MODULE => Some(Running::Module),
            LUA => {
                let age = self.elapsed_ms() - self.probed_ms.load(Ordering::Relaxed);
                (Duration::from_millis(age) < REPROBE).then_some(Running::Lua)
            }
            _ => None,
        }
    }

    /// The engine found by the last probe, however old (for reports).
    pub(crate) fn last(&self) -> Option<Running> {
        match self.running.load(Ordering::Relaxed) {
            MODULE => Some(Running::Module),
            LUA => Some(Running::Lua),
            _ => None,
        }
    }

    /// Records what a probe found.
    pub(crate) fn found(&self, running: Running) {
        self.probed_ms.store(self.elapsed_ms(), Ordering::Relaxed);
        let value = match running {
            Running::Module => MODULE,
            Running::Lua => LUA,
        };
        self.running.store(value, Ordering::Relaxed);
        self.no_sync_call.store(false, Ordering::Relaxed);
        self.no_packed_call.store(false, Ordering::Relaxed);
    }

    /// Whether sync batches may use `TOLLGATE.SYNC` (the module engine
    /// and, since the last probe, no sign of a module without it).
    pub(crate) fn sync_call(&self) -> bool {
        !self.no_sync_call.load(Ordering::Relaxed)
    }

    /// The module answered `TOLLGATE.SYNC` unknown.
    pub(crate) fn no_sync_call(&self) {
        self.no_sync_call.store(true, Ordering::Relaxed);
    }

    /// Whether sync batches may use `TOLLGATE.SYNCPACKED` (since the last
    /// probe, no sign of a module without it).
    pub(crate) fn packed_call(&self) -> bool {
        !self.no_packed_call.load(Ordering::Relaxed)
    }

    /// The module answered `TOLLGATE.SYNCPACKED` unknown.
    pub(crate) fn no_packed_call(&self) {
        self.no_packed_call.store(true, Ordering::Relaxed);
    }

    /// Forgets what was found: the next call probes again.
    pub(crate) fn forget(&self) {
        self.running.store(UNKNOWN, Ordering::Relaxed);
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Whether a `COMMAND INFO TOLLGATE.DECIDE2` reply names the command (a
/// server without it answers `[nil]`).
pub(crate) fn knows_command(reply: &redis::Value) -> bool {
    match reply {
        redis::Value::Array(items) => {
            matches!(items.first(), Some(redis::Value::Array(info)) if !info.is_empty())
        }
        _ => false,
    }
}

/// Whether a reply error says the server has no such command.
pub(crate) fn is_unknown_command(error: &redis::RedisError) -> bool {
    let text = error.to_string().to_ascii_lowercase();
    text.contains("unknown command") && text.contains("tollgate.decide")
}

/// Whether a reply error says the server has no `TOLLGATE.SYNC` (a module
/// of an earlier release, or none).
pub(crate) fn is_unknown_sync_call(error: &redis::RedisError) -> bool {
    let text = error.to_string().to_ascii_lowercase();
    text.contains("unknown command") && text.contains("tollgate.sync")
}

/// Whether a reply error says the server has no `TOLLGATE.SYNCPACKED` (a
/// module of an earlier release, or none).
pub(crate) fn is_unknown_packed_call(error: &redis::RedisError) -> bool {
    let text = error.to_string().to_ascii_lowercase();
    text.contains("unknown command") && text.contains("tollgate.syncpacked")
}

/// Whether a reply error says the module does not know the operation (a
/// module of an earlier release asked for a later operation).
pub(crate) fn is_unknown_operation(error: &redis::RedisError) -> bool {
    error.to_string().contains("tollgate: unknown operation")
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::Value;

    #[test]
    fn settings_parse_and_probes_read_command_info() {
        for engine in [Engine::Auto, Engine::Module, Engine::Lua] {
            assert_eq!(engine.as_str().parse(), Ok(engine));
        }
        assert!("native".parse::<Engine>().is_err());
        assert!(!knows_command(&Value::Array(vec![Value::Nil])));
        let info = Value::Array(vec![Value::Array(vec![Value::Int(1)])]);
        assert!(knows_command(&info));
        let state = EngineState::new();
        assert_eq!(state.current(), None);
        state.found(Running::Lua);
        assert_eq!(state.current(), Some(Running::Lua));
        state.forget();
        assert_eq!((state.current(), state.last()), (None, None));
    }
}

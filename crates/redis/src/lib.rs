//! tollgate's shared store: limiter state in Redis or Redis Cluster, so that
//! several tollgate instances enforce one set of limits together.
//!
//! [`RedisStore`] implements the core's [`Store`](tollgate_core::Store)
//! trait, as the memory store does, and gives the same decisions for the
//! same inputs: every operation is one atomic call, of tollgate's Redis
//! module (crates/redis-module) where every node has it loaded, or of a Lua
//! script (`src/lua`) that
//! ports the core's algorithms with exact integer arithmetic, reads the time
//! from Redis `TIME` unless the caller passes an explicit instant, and sets a
//! TTL on everything it writes.
//!
//! This crate owns the key layout, the script and its protocol, connections
//! ([`Endpoint`]: `redis://`, `rediss://`, `unix://`, `redis+unix://`,
//! `redis+cluster://`, `rediss+cluster://`), their TLS settings (a private
//! CA, a client certificate for mutual TLS: the `tls` module) and the mapping
//! of Redis failures to [`StoreError`](tollgate_core::StoreError)s.
//! It does not own the policy applied when Redis is unreachable; the server
//! does. It is also the async sync mode's transport (`tollgate-sync`'s
//! `Transport`: the `exchange` module), and it keeps the runtime overrides
//! of every instance in step (`overrides`: a hash per domain, versions,
//! pub/sub).

mod batch;
mod cells;
mod endpoint;
mod engine;
mod exchange;
mod limits;
mod over_limit;
mod overrides;
mod reply;
mod script;
mod slots;
mod store;
mod tls;

pub use endpoint::{Endpoint, EndpointError};
pub use engine::{Engine, EngineError, Running};
pub use overrides::{sync_overrides, OverrideSink};
pub use store::{OpenError, RedisConfig, RedisStore};
pub use tls::TlsError;

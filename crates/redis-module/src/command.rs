//! `TOLLGATE.DECIDE` and `TOLLGATE.RESET`: arguments in, states read from
//! the keys, the operation decided (`decide`), states written back with
//! their TTLs, the effects replicated, the reply written.
//!
//! ```text
//! TOLLGATE.DECIDE key field spec cost [key field spec cost ...] op at grace_ms extra
//! TOLLGATE.RESET key
//! ```
//!
//! The per-limit words are the script's (driver.lua): the hash key, the
//! field naming the limit, its spec and its cost; then the operation
//! (`check`, `probe`, `reserve`, `next`, `record`, `release`), the instant
//! in ns (empty: the server's clock), the TTL grace in ms, and the
//! reservation's max wait in ns or the lease to release (empty when none).
//! Keys sit at positions 1, 5, 9, … so that Redis Cluster and its clients
//! find them (key spec first 1, last −5, step 4). The reply is the
//! script's: the instant used, then the operation's words, as bulk strings.
//!
//! A replica or an AOF gets the effects — `HSET`, `HDEL`, `PEXPIREAT` — not
//! the command: it could decide otherwise on its own clock.

use std::os::raw::c_long;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{SystemTime, UNIX_EPOCH};

use redis_module::{raw, Context, RedisError, RedisResult, RedisString, RedisValue};

use crate::decide::{self, Op, Outcome, Planned, Word};
use crate::error::Error;
use crate::ffi::{Key, Kind};
use crate::spec;
use crate::text::{parse_u64, push_u64};

/// The longest hash field accepted (the store's are a few dozen bytes).
const MAX_FIELD: usize = 512;

/// The most TTL grace accepted, in ms (a year).
const MAX_GRACE_MS: u64 = 365 * 24 * 3_600_000;

/// `TOLLGATE.DECIDE`: never panics into Redis, whatever the arguments.
pub(crate) fn decide(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| run(ctx, &args))
}

/// `TOLLGATE.RESET key`: deletes the key's hash; answers how many limits
/// it held (what the store's `reset` returns).
pub(crate) fn reset(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guarded(|| {
        let [_, name] = args.as_slice() else {
            return Err(Error::Usage("TOLLGATE.RESET key"));
        };
        let key = Key::open(ctx.ctx, name);
        let held = match key.kind() {
            Kind::Empty => 0,
            Kind::Hash => key.hash_len(),
            Kind::Other => return Err(Error::WrongType),
        };
        if held > 0 {
            key.delete();
            ctx.replicate("DEL", &[name][..]);
        }
        Ok(RedisValue::Integer(i64::try_from(held).unwrap_or(i64::MAX)))
    })
}

/// `body`'s answer; an error reply when it fails or panics.
fn guarded(body: impl FnOnce() -> Result<RedisValue, Error>) -> RedisResult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(RedisError::String(error.to_string())),
        Err(_) => Err(RedisError::String(Error::Internal.to_string())),
    }
}

/// The server's clock, in ns since the Unix epoch, at the microsecond
/// resolution of `TIME` (it reads the same clock).
fn server_now() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_micros())
        .unwrap_or(u64::MAX / 1_000)
        .saturating_mul(1_000)
}

/// One limit of the call: where its state lives.
struct Place<'a> {
    /// Index of the cell's key among the call's distinct keys.
    key: usize,
    field: &'a RedisString,
}

fn run(ctx: &Context, args: &[RedisString]) -> Result<RedisValue, Error> {
    const USAGE: &str =
        "TOLLGATE.DECIDE key field spec cost [key field spec cost ...] op at grace_ms extra";
    if args.len() < 5 || !(args.len() - 5).is_multiple_of(4) {
        return Err(Error::Usage(USAGE));
    }
    let tail = &args[args.len() - 4..];
    let op = Op::parse(tail[0].as_slice())?;
    let now = match tail[1].as_slice() {
        b"" => server_now(),
        at => parse_u64(at).ok_or(Error::Bad("instant"))?,
    };
    let grace_ms = parse_u64(tail[2].as_slice())
        .filter(|&g| g <= MAX_GRACE_MS)
        .ok_or(Error::Bad("TTL grace"))?;
    let extra = tail[3].as_slice();
    let limits: Vec<&[RedisString]> = args[1..args.len() - 4].chunks_exact(4).collect();
    if op.single() && limits.len() != 1 {
        return Err(Error::Usage(
            "next, record and release take exactly one limit",
        ));
    }

    // Each distinct key opened once: two handles on one key would each
    // believe what they read when opened.
    let mut names: Vec<&RedisString> = Vec::with_capacity(limits.len());
    let mut keys: Vec<Key> = Vec::with_capacity(limits.len());
    let mut places = Vec::with_capacity(limits.len());
    let mut cells = Vec::with_capacity(limits.len());
    for limit in &limits {
        let [name, field, spec, cost] = limit else {
            return Err(Error::Usage(USAGE));
        };
        let field_bytes = field.as_slice();
        if field_bytes.is_empty()
            || field_bytes.len() > MAX_FIELD
            || !field_bytes.iter().all(|b| (0x20..0x7f).contains(b))
        {
            return Err(Error::Bad("field (printable ASCII, at most 512 bytes)"));
        }
        let cost = parse_u64(cost.as_slice()).ok_or(Error::Bad("cost"))?;
        let key = match names.iter().position(|n| n.as_slice() == name.as_slice()) {
            Some(i) => i,
            None => {
                let key = Key::open(ctx.ctx, name);
                if key.kind() == Kind::Other {
                    return Err(Error::WrongType);
                }
                names.push(name);
                keys.push(key);
                keys.len() - 1
            }
        };
        let stored = keys[key].hash_get(field);
        let cell = spec::cell(spec.as_slice(), stored.as_ref().map(|s| s.as_slice()))?;
        cells.push(Planned { cell, cost });
        places.push(Place { key, field });
    }

    let outcome = decide::run(op, now, extra, &mut cells)?;
    for &(i, timeless) in &outcome.changed {
        let place = &places[i];
        let write = Write {
            ctx,
            name: names[place.key],
            key: &keys[place.key],
            field: place.field,
        };
        write.store(&*cells[i].cell, now, grace_ms, timeless);
    }
    reply(ctx, &outcome);
    Ok(RedisValue::NoReply)
}

/// Where one changed state goes.
struct Write<'a> {
    ctx: &'a Context,
    name: &'a RedisString,
    key: &'a Key,
    field: &'a RedisString,
}

impl Write<'_> {
    /// Writes the cell's state back, with a TTL that outlives its expiry,
    /// or deletes it when it is as good as new (at any time, for a
    /// `timeless` release); replicates what it did. As driver.lua `store`.
    fn store(&self, cell: &dyn crate::cell::Cell, now: u64, grace_ms: u64, timeless: bool) {
        let expires = cell.forgotten_at();
        if expires <= if timeless { 0 } else { now } {
            self.key.hash_set(self.field, None);
            self.ctx.replicate("HDEL", &[self.name, self.field][..]);
            return;
        }
        let mut value = Vec::with_capacity(64);
        cell.encode(&mut value);
        let value = RedisString::create_from_slice(self.ctx.ctx, &value);
        self.key.hash_set(self.field, Some(&value));
        self.ctx
            .replicate("HSET", &[self.name, self.field, &value][..]);
        let ttl = (expires.saturating_sub(now))
            .div_ceil(1_000_000)
            .saturating_add(grace_ms)
            .max(1);
        let ttl = i64::try_from(ttl).unwrap_or(i64::MAX / 2);
        if self.key.ttl().is_none_or(|current| current < ttl) {
            if let Some(at) = self.key.expire_in(ttl) {
                let mut digits = Vec::with_capacity(20);
                push_u64(&mut digits, u64::try_from(at).unwrap_or_default());
                let at = RedisString::create_from_slice(self.ctx.ctx, &digits);
                self.ctx.replicate("PEXPIREAT", &[self.name, &at][..]);
            }
        }
    }
}

/// Writes the reply: an array of bulk strings, numbers in decimal.
fn reply(ctx: &Context, outcome: &Outcome) {
    raw::reply_with_array(ctx.ctx, outcome.reply.len() as c_long);
    let mut buffer = itoa::Buffer::new();
    for word in &outcome.reply {
        let text: &[u8] = match word {
            Word::Number(n) => buffer.format(*n).as_bytes(),
            Word::Empty => b"",
        };
        raw::reply_with_string_buffer(ctx.ctx, text.as_ptr().cast(), text.len());
    }
}

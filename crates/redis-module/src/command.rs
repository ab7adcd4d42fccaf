//! `TOLLGATE.DECIDE2` and `TOLLGATE.RESET`: arguments in, states read
//! from the keys, the operation decided (`decide`), states written back
//! with their TTLs, the effects replicated, the reply written.
//!
//! ```text
//! TOLLGATE.DECIDE2 key field "cost spec" [key field "cost spec" ...] "op at grace_ms extra"
//! TOLLGATE.RESET key
//! ```
//!
//! The words are the script's (driver.lua), packed into fewer arguments:
//! per limit the hash key, the field naming the limit, and its cost and
//! spec in one argument (the cost, one space, the spec's words); then one
//! argument of four words each ended by one space but the last — the
//! operation (`check`, `probe`, `reserve`, `next`, `record`, `release`,
//! `settle`), the instant in ns (empty: the server's clock), the TTL grace
//! in ms, and the reservation's max wait in ns, the lease to release, or a
//! settle's `admitted_at estimate actual` (empty when none; the last word
//! may hold spaces). Redis spends a few hundred instructions on every argument of a
//! command (reading it into a string, freeing it), which made a
//! single-limit call of nine separate words dearer than the decision
//! itself (docs/benchmarks.md, "Redis CPU per decision"); this one has
//! four. Keys sit at positions 1, 4, 7, … so that Redis Cluster and its
//! clients find them (key spec first 1, last −2, step 3). The reply holds
//! the script's words — the instant used, then the operation's words — in
//! one bulk string, separated by single spaces (one reply instead of one
//! per word).
//!
//! `TOLLGATE.DECIDE`, the first format (one argument per word), is gone:
//! a store of an earlier release probes for it, finds it missing and runs
//! the script, so mixed releases keep deciding alike.
//!
//! A replica or an AOF gets the effects — `HSET`, `HDEL`, `PEXPIREAT` — not
//! the command: it could decide otherwise on its own clock. They are
//! replicated straight from the argument strings; the key's TTL is only
//! pushed out (and its `PEXPIREAT` replicated) when it runs short, so a
//! decision usually replicates one `HSET`.

use std::cell::RefCell;
use std::ffi::CString;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{SystemTime, UNIX_EPOCH};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};
use redis_module::RedisString;
use smallvec::SmallVec;

use crate::ban::{self, Banned};
use crate::decide::{self, Op, Outcome, Planned, Word};
use crate::error::Error;
use crate::ffi::{self, Arg, Key, Kind};
use crate::specs;
use tollgate_state::text::{parse_u64, put_u64_before};

thread_local! {
    /// Bytes of a value or a reply being written, reused by every call:
    /// commands run one at a time on Redis's main thread, and an
    /// allocation is a fair part of a decision's cost.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `write` on the emptied scratch bytes; a buffer grown past 64 KiB (a
/// long log's value) is let go afterwards.
fn with_scratch<T>(write: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    SCRATCH.with_borrow_mut(|bytes| {
        bytes.clear();
        let result = write(bytes);
        if bytes.capacity() > 1 << 16 {
            *bytes = Vec::new();
        }
        result
    })
}

/// The longest hash field accepted (the store's are a few dozen bytes).
pub(crate) const MAX_FIELD: usize = 512;

/// The most TTL grace accepted, in ms (a year).
pub(crate) const MAX_GRACE_MS: u64 = 365 * 24 * 3_600_000;

/// `TOLLGATE.DECIDE2`: never panics into Redis, whatever the arguments.
pub(crate) extern "C" fn decide(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    let args = ffi::args(argv, argc);
    guarded(ctx, || run(ctx, args))
}

/// `TOLLGATE.RESET key`: deletes the key's hash; answers how many limits
/// it held (what the store's `reset` returns).
pub(crate) extern "C" fn reset(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    let args = ffi::args(argv, argc);
    guarded(ctx, || {
        let [_, name] = args else {
            return Err(Error::Usage("TOLLGATE.RESET key"));
        };
        let key = Key::open(ctx, name);
        let held = match key.kind() {
            Kind::Empty => 0,
            Kind::Hash => key.hash_len(),
            Kind::Other => return Err(Error::WrongType),
        };
        if held > 0 {
            key.delete();
            ffi::replicate(ctx, c"DEL", &[name.inner()]);
        }
        ffi::reply_integer(ctx, i64::try_from(held).unwrap_or(i64::MAX));
        Ok(())
    })
}

/// Runs `body`, which replies when it succeeds; replies the error when it
/// fails or panics.
fn guarded(ctx: *mut RedisModuleCtx, body: impl FnOnce() -> Result<(), Error>) -> c_int {
    let error = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return raw::REDISMODULE_OK as c_int,
        Ok(Err(error)) => error,
        Err(_) => Error::Internal,
    };
    // The messages hold no NUL (fixed texts and numbers).
    match CString::new(error.to_string()) {
        Ok(message) => ffi::reply_error(ctx, &message),
        Err(_) => ffi::reply_error(ctx, c"ERR tollgate: internal error"),
    }
    raw::REDISMODULE_OK as c_int
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
    field: &'a Arg,
    /// The field of its ban's state, when it has a ban.
    ban_field: Option<RedisString>,
}

/// The field holding the ban state of the limit in `field`: `ban <field>`.
fn ban_field(ctx: *mut RedisModuleCtx, field: &[u8]) -> RedisString {
    let mut name = Vec::with_capacity(field.len() + 4);
    name.extend_from_slice(b"ban ");
    name.extend_from_slice(field);
    RedisString::create_from_slice(ctx, &name)
}

/// The call's last argument, `op at grace_ms extra`: four words, each
/// ended by one space but the last (the words the store leaves empty are
/// nothing between two spaces).
struct Tail<'a> {
    op: Op,
    at: &'a [u8],
    grace_ms: u64,
    extra: &'a [u8],
}

impl<'a> Tail<'a> {
    fn parse(bytes: &'a [u8]) -> Result<Tail<'a>, Error> {
        const WORDS: Error = Error::Usage("the last argument is \"op at grace_ms extra\"");
        let (op, rest) = split_word(bytes).ok_or(WORDS)?;
        let (at, rest) = split_word(rest).ok_or(WORDS)?;
        let (grace, extra) = split_word(rest).ok_or(WORDS)?;
        let grace_ms = parse_u64(grace)
            .filter(|&g| g <= MAX_GRACE_MS)
            .ok_or(Error::Bad("TTL grace"))?;
        Ok(Tail {
            op: Op::parse(op)?,
            at,
            grace_ms,
            extra,
        })
    }
}

/// The bytes before the first space and those after it.
fn split_word(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = bytes.iter().position(|&b| b == b' ')?;
    Some((&bytes[..space], &bytes[space + 1..]))
}

fn run(ctx: *mut RedisModuleCtx, args: &[Arg]) -> Result<(), Error> {
    const USAGE: &str =
        "TOLLGATE.DECIDE2 key field \"cost spec\" [key field \"cost spec\" ...] \"op at grace_ms extra\"";
    if args.len() < 5 || !(args.len() - 2).is_multiple_of(3) {
        return Err(Error::Usage(USAGE));
    }
    let Tail {
        op,
        at,
        grace_ms,
        extra,
    } = Tail::parse(args[args.len() - 1].bytes())?;
    let now = match at {
        b"" => server_now(),
        at => parse_u64(at).ok_or(Error::Bad("instant"))?,
    };
    let limits = args[1..args.len() - 1].chunks_exact(3);
    let count = limits.len();
    if op.single() && count != 1 {
        return Err(Error::Usage(
            "next, record, release and settle take exactly one limit",
        ));
    }

    // Each distinct key opened once: two handles on one key would each
    // believe what they read when opened.
    let mut keys: SmallVec<[(&Arg, Key); 4]> = SmallVec::with_capacity(count);
    let mut places: SmallVec<[Place<'_>; 4]> = SmallVec::with_capacity(count);
    let mut cells: SmallVec<[Planned; 2]> = SmallVec::with_capacity(count);
    for limit in limits {
        let [name, field, priced] = limit else {
            return Err(Error::Usage(USAGE));
        };
        let (cost, spec) = split_word(priced.bytes()).ok_or(Error::Bad("cost and spec"))?;
        let field_bytes = field.bytes();
        if field_bytes.is_empty() || field_bytes.len() > MAX_FIELD || !printable(field_bytes) {
            return Err(Error::Bad("field (printable ASCII, at most 512 bytes)"));
        }
        let cost = parse_u64(cost).ok_or(Error::Bad("cost"))?;
        let name_bytes = name.bytes();
        let key = match keys.iter().position(|(n, _)| n.bytes() == name_bytes) {
            Some(i) => i,
            None => {
                let key = Key::open(ctx, name);
                if key.kind() == Kind::Other {
                    return Err(Error::WrongType);
                }
                keys.push((name, key));
                keys.len() - 1
            }
        };
        let spec = specs::lookup(spec)?;
        let stored = keys[key].1.hash_get(field.inner());
        let cell = crate::spec::cell(spec.format, stored.as_ref().map(|s| s.as_slice()))?;
        // A ban's state lives in the field `ban <field>` of the same hash.
        let (ban, ban_field) = match spec.ban {
            Some(ban) => {
                let name = ban_field(ctx, field_bytes);
                let stored = keys[key].1.hash_get(name.inner);
                let state = ban::decode(&ban, stored.as_ref().map(|s| s.as_slice()))?;
                (Some(Banned { ban, state }), Some(name))
            }
            None => (None, None),
        };
        cells.push(Planned { cell, cost, ban });
        places.push(Place {
            key,
            field,
            ban_field,
        });
    }

    let outcome = decide::run(op, now, extra, &mut cells)?;
    // The instant decided at: a settle's is never before its admission.
    let now = outcome.now;
    // The TTL each key needs, the longest of its written states' (ms),
    // applied once per key after every write (`Write::apply_ttl`), as
    // driver.lua's `apply_ttls`.
    let mut ttls: SmallVec<[Option<i64>; 4]> = SmallVec::from_elem(None, keys.len());
    let mut need = |key: usize, ttl: Option<i64>| {
        if let (Some(slot), Some(ttl)) = (ttls.get_mut(key), ttl) {
            *slot = Some(slot.map_or(ttl, |had| had.max(ttl)));
        }
    };
    for &(i, timeless) in &outcome.changed {
        let place = &places[i];
        let (name, key) = &keys[place.key];
        let write = Write {
            ctx,
            name,
            key,
            field: place.field.inner(),
        };
        let cell = &*cells[i].cell;
        // A kept state is never deleted: as a release's, with an expiry of
        // at least 1 (driver.lua's `settle`).
        let (expires, timeless) = match outcome.kept {
            true => (cell.forgotten_at().max(1), true),
            false => (cell.forgotten_at(), timeless),
        };
        need(
            place.key,
            write.store(expires, |out| cell.encode(out), now, grace_ms, timeless),
        );
    }
    for &i in &outcome.bans_changed {
        let (place, planned) = (&places[i], &cells[i]);
        let (Some(field), Some(b)) = (&place.ban_field, &planned.ban) else {
            continue;
        };
        let (name, key) = &keys[place.key];
        let write = Write {
            ctx,
            name,
            key,
            field: field.inner,
        };
        let expires = b.ban.expires_at(&b.state);
        need(
            place.key,
            write.store(
                expires,
                |out| ban::encode(&b.state, out),
                now,
                grace_ms,
                false,
            ),
        );
    }
    for ((name, key), ttl) in keys.iter().zip(ttls) {
        if let Some(ttl) = ttl {
            apply_ttl(ctx, name, key, ttl, grace_ms);
        }
    }
    reply(ctx, &outcome);
    Ok(())
}

/// Whether every byte is printable ASCII (space to `~`); without an early
/// exit, so that it runs on whole words of the field at once.
pub(crate) fn printable(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .fold(true, |all, &b| all & (b.wrapping_sub(0x20) < 0x5f))
}

/// Where one changed state goes.
pub(crate) struct Write<'a> {
    pub(crate) ctx: *mut RedisModuleCtx,
    pub(crate) name: &'a Arg,
    pub(crate) key: &'a Key,
    pub(crate) field: *mut RedisModuleString,
}

impl Write<'_> {
    /// Writes the cell's state back, or deletes it when it is as good as
    /// new (at any time, for a `timeless` release); replicates what it
    /// did. Returns the TTL (ms) the key needs for this state, the
    /// state's time plus the grace ([`apply_ttl`]), `None` when deleted.
    pub(crate) fn store(
        &self,
        expires: u64,
        encode: impl FnOnce(&mut Vec<u8>),
        now: u64,
        grace_ms: u64,
        timeless: bool,
    ) -> Option<i64> {
        let (ctx, name, field) = (self.ctx, self.name.inner(), self.field);
        if expires <= if timeless { 0 } else { now } {
            self.key.hash_set(self.field, None);
            ffi::replicate(ctx, c"HDEL", &[name, field]);
            return None;
        }
        let value = with_scratch(|bytes| {
            encode(bytes);
            RedisString::create_from_slice(ctx, bytes)
        });
        self.key.hash_set(self.field, Some(&value));
        ffi::replicate(ctx, c"HSET", &[name, field, value.inner]);
        let ttl = (expires.saturating_sub(now))
            .div_ceil(1_000_000)
            .saturating_add(grace_ms)
            .max(1);
        Some(i64::try_from(ttl).unwrap_or(i64::MAX / 4))
    }
}

/// Gives a key written in this call the TTL its states need, `ttl` (ms,
/// the longest of them), once all are written: as driver.lua's
/// `apply_ttls`, a key that lives less than that gets it plus the grace
/// again, so that most writes leave the TTL as it is, and the TTL depends
/// neither on the order of the key's fields nor on Redis's clock ticking
/// between their writes (docs/redis-state.md). Replicated as `PEXPIREAT`.
pub(crate) fn apply_ttl(ctx: *mut RedisModuleCtx, name: &Arg, key: &Key, ttl: i64, grace_ms: u64) {
    if key.ttl().is_some_and(|current| current >= ttl) {
        return;
    }
    let grace = i64::try_from(grace_ms).unwrap_or_default();
    if let Some(at) = key.expire_in(ttl.saturating_add(grace)) {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(u64::try_from(at).unwrap_or_default());
        let at = RedisString::create_from_slice(ctx, digits.as_bytes());
        ffi::replicate(ctx, c"PEXPIREAT", &[name.inner(), at.inner]);
    }
}

/// The longest reply written on the stack: 12 words of at most 20 digits
/// and a space, any operation's over one limit (the common call; a longer
/// reply goes through the scratch bytes).
const STACK_REPLY: usize = 12 * 21;

/// Writes the reply: one bulk string, the words in decimal separated by
/// one space (an empty word, a missing lease, is nothing between two
/// spaces or after the last).
fn reply(ctx: *mut RedisModuleCtx, outcome: &Outcome) {
    let words = &outcome.reply;
    if words.len() * 21 > STACK_REPLY {
        return with_scratch(|text| {
            let mut buffer = itoa::Buffer::new();
            for (i, word) in words.iter().enumerate() {
                if i > 0 {
                    text.push(b' ');
                }
                match word {
                    Word::Number(n) => text.extend_from_slice(buffer.format(*n).as_bytes()),
                    Word::Ban(mark) => text.push(*mark),
                    Word::Empty => {}
                }
            }
            ffi::reply_bulk(ctx, text);
        });
    }
    // Back to front, each word's digits straight into place: the reply was
    // a tenth of a decision's instructions when each word went through a
    // buffer of its own and a vector.
    let mut text = [0u8; STACK_REPLY];
    let mut start = STACK_REPLY;
    for (i, word) in words.iter().enumerate().rev() {
        match *word {
            Word::Number(n) => start = put_u64_before(&mut text, start, n),
            Word::Ban(mark) => {
                start -= 1;
                text[start] = mark;
            }
            Word::Empty => {}
        }
        if i > 0 {
            start -= 1;
            text[start] = b' ';
        }
    }
    ffi::reply_bulk(ctx, &text[start..]);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_last_argument_holds_four_words_the_last_one_free() {
        let tail = Tail::parse(b"check  1000 ").unwrap();
        assert_eq!(
            (tail.op, tail.at, tail.grace_ms, tail.extra),
            (Op::Check, &b""[..], 1000, &b""[..])
        );
        let tail = Tail::parse(b"reserve 17 0 250").unwrap();
        assert_eq!(
            (tail.op, tail.at, tail.grace_ms, tail.extra),
            (Op::Reserve, &b"17"[..], 0, &b"250"[..])
        );
        for bad in [&b"check"[..], b"check  1000", b"check 1", b""] {
            assert!(matches!(Tail::parse(bad), Err(Error::Usage(_))), "{bad:?}");
        }
        assert_eq!(
            Tail::parse(b"check  x ").err(),
            Some(Error::Bad("TTL grace"))
        );
        assert_eq!(
            Tail::parse(b"peek  1 ").err(),
            Some(Error::UnknownOperation)
        );
        assert!(printable(b"gcra 1 1000000 10 - -"));
        assert!(!printable(b"gcra\t1") && !printable(b"f\x7f") && !printable("é".as_bytes()));
    }
}

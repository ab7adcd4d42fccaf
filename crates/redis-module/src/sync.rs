//! `TOLLGATE.SYNC`: the async sync mode's batch in one call (issue 22).
//! For each key, its usage recorded at its instants (as that many
//! `record` calls of `TOLLGATE.DECIDE2` would, in order), then its state
//! read back (as `HGET` would), for many keys at once:
//!
//! ```text
//! TOLLGATE.SYNC key field spec "at cost [at cost ...]" [key field spec usage ...] grace_ms
//! ```
//!
//! Per key four arguments: the hash key, the field naming the limit, the
//! limit's spec, and its usage as words `at cost` separated by single
//! spaces (empty: a plain read). Keys sit at positions 1, 5, 9, … (key
//! spec first 1, last −2, step 4), so on a cluster one call holds keys of
//! one slot. The reply is an array, one element per key in order: the
//! key's version-1 value after its records (a bulk string), null when the
//! key holds none, or an error of that key's own (a key that is not a
//! hash, a bad spec or usage, a stored value that is not a state), which
//! then wrote nothing. Each key is recorded and written, with its TTL and
//! its effects replicated, exactly as by `TOLLGATE.DECIDE2`'s `record`
//! (`command`'s `Write` and `apply_ttl`), so the two leave the same state.
//!
//! A batch of a few thousand keys was a pipeline of two commands per key
//! (a `record`, an `HGET`); the instance sending it spent more on the
//! commands and their replies than on anything else of the batch
//! (docs/benchmarks.md, "Async sync mode").
//!
//! `TOLLGATE.SYNCPACKED` does the same for keys of one limit, named once,
//! and answers in one string:
//!
//! ```text
//! TOLLGATE.SYNCPACKED field spec grace_ms key "at cost ..." [key "at cost ..." ...]
//! ```
//!
//! Keys at positions 4, 6, 8, … (key spec first 4, last −2, step 2). The
//! reply is one bulk string holding each key's answer in order: `v`, the
//! value's length in decimal, `:` and the value; `n` when the key holds
//! none; `e`, the length, `:` and the error's message (a key's own error,
//! as `TOLLGATE.SYNC` answers it). A bad field, spec or grace is the
//! call's error. Each key is recorded exactly as by `TOLLGATE.SYNC`. The
//! instance sending a batch of 10,000 keys spent more on each key's
//! limit words and on reading back an array element per key than on the
//! rest of the batch (docs/benchmarks.md, "Async sync mode").

use std::ffi::CString;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleString};
use redis_module::RedisString;

use crate::command::{apply_ttl, printable, Write, MAX_FIELD, MAX_GRACE_MS};
use crate::error::Error;
use crate::ffi::{self, Arg, Key, Kind};
use crate::spec::Spec;
use crate::specs;
use tollgate_state::text::parse_u64;

/// The command's shape, for its usage errors.
const USAGE: &str =
    "TOLLGATE.SYNC key field spec \"at cost ...\" [key field spec \"at cost ...\" ...] grace_ms";

/// `TOLLGATE.SYNCPACKED`'s shape, for its usage errors.
const PACKED_USAGE: &str =
    "TOLLGATE.SYNCPACKED field spec grace_ms key \"at cost ...\" [key \"at cost ...\" ...]";

/// `TOLLGATE.SYNC`: never panics into Redis, whatever the arguments; a
/// key's failure (or panic) is that key's error element.
pub(crate) extern "C" fn sync(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    let args = ffi::args(argv, argc);
    let shape = catch_unwind(AssertUnwindSafe(|| shape(args)));
    let grace_ms = match shape {
        Ok(Ok(grace_ms)) => grace_ms,
        Ok(Err(error)) => return reply_error(ctx, &error),
        Err(_) => return reply_error(ctx, &Error::Internal),
    };
    let keys = args[1..args.len() - 1].chunks_exact(4);
    ffi::reply_array(ctx, keys.len());
    for words in keys {
        match catch_unwind(AssertUnwindSafe(|| sync_key(ctx, words, grace_ms))) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                reply_error(ctx, &error);
            }
            Err(_) => {
                reply_error(ctx, &Error::Internal);
            }
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// Checks the call's shape before any reply is written: four arguments a
/// key and the grace last; the grace in ms.
fn shape(args: &[Arg]) -> Result<u64, Error> {
    if args.len() < 6 || !(args.len() - 2).is_multiple_of(4) {
        return Err(Error::Usage(USAGE));
    }
    grace(&args[args.len() - 1])
}

/// A TTL grace in ms.
fn grace(arg: &Arg) -> Result<u64, Error> {
    parse_u64(arg.bytes())
        .filter(|&g| g <= MAX_GRACE_MS)
        .ok_or(Error::Bad("TTL grace"))
}

/// A hash field naming a limit: printable ASCII, at most [`MAX_FIELD`]
/// bytes.
fn check_field(field: &Arg) -> Result<(), Error> {
    let bytes = field.bytes();
    if bytes.is_empty() || bytes.len() > MAX_FIELD || !printable(bytes) {
        return Err(Error::Bad("field (printable ASCII, at most 512 bytes)"));
    }
    Ok(())
}

/// `TOLLGATE.SYNCPACKED`: never panics into Redis, whatever the
/// arguments; a key's failure (or panic) is that key's error in the
/// answer.
pub(crate) extern "C" fn sync_packed(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    let args = ffi::args(argv, argc);
    let shape = catch_unwind(AssertUnwindSafe(|| packed_shape(args)));
    let (spec, grace_ms) = match shape {
        Ok(Ok(shape)) => shape,
        Ok(Err(error)) => return reply_error(ctx, &error),
        Err(_) => return reply_error(ctx, &Error::Internal),
    };
    let field = &args[1];
    let mut out: Vec<u8> = Vec::with_capacity(48 * (args.len() - 4) / 2);
    for pair in args[4..].chunks_exact(2) {
        let answer = catch_unwind(AssertUnwindSafe(|| {
            let [name, used] = pair else {
                return Err(Error::Usage(PACKED_USAGE));
            };
            record(ctx, name, field, spec, used.bytes(), grace_ms)
        }));
        match answer {
            Ok(Ok(Some(value))) => pack(&mut out, b'v', value.as_slice()),
            Ok(Ok(None)) => out.push(b'n'),
            Ok(Err(error)) => pack(&mut out, b'e', error.to_string().as_bytes()),
            Err(_) => pack(&mut out, b'e', Error::Internal.to_string().as_bytes()),
        }
    }
    ffi::reply_bulk(ctx, &out);
    raw::REDISMODULE_OK as c_int
}

/// Checks a `TOLLGATE.SYNCPACKED` call before any key is touched: the
/// field, the spec and the grace, then two arguments a key.
fn packed_shape(args: &[Arg]) -> Result<(Spec, u64), Error> {
    if args.len() < 6 || !(args.len() - 4).is_multiple_of(2) {
        return Err(Error::Usage(PACKED_USAGE));
    }
    check_field(&args[1])?;
    let spec = specs::lookup(args[2].bytes())?;
    Ok((spec, grace(&args[3])?))
}

/// Appends one answer of a packed reply: `tag`, `bytes`' length in
/// decimal, `:`, `bytes`.
fn pack(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    out.push(tag);
    out.extend_from_slice(itoa::Buffer::new().format(bytes.len()).as_bytes());
    out.push(b':');
    out.extend_from_slice(bytes);
}

/// Replies `error` (an element of the array once it is started).
fn reply_error(ctx: *mut RedisModuleCtx, error: &Error) -> c_int {
    // The messages hold no NUL (fixed texts and numbers).
    match CString::new(error.to_string()) {
        Ok(message) => ffi::reply_error(ctx, &message),
        Err(_) => ffi::reply_error(ctx, c"ERR tollgate: internal error"),
    }
    raw::REDISMODULE_OK as c_int
}

/// The usage words `at cost at cost …` as pairs; `None` when they are not.
fn usage(bytes: &[u8]) -> Option<impl Iterator<Item = (u64, u64)> + '_> {
    let mut words = bytes.split(|&b| b == b' ');
    let count = if bytes.is_empty() {
        0
    } else {
        bytes.iter().filter(|&&b| b == b' ').count() + 1
    };
    if !count.is_multiple_of(2) {
        return None;
    }
    // Checked first, so that a bad word writes nothing.
    if bytes
        .split(|&b| b == b' ')
        .any(|w| count > 0 && parse_u64(w).is_none())
    {
        return None;
    }
    Some(std::iter::from_fn(move || {
        let at = parse_u64(words.next()?)?;
        let cost = parse_u64(words.next()?)?;
        Some((at, cost))
    }))
}

/// One key: its usage recorded and written, then its value replied.
fn sync_key(ctx: *mut RedisModuleCtx, words: &[Arg], grace_ms: u64) -> Result<(), Error> {
    let [name, field, spec, used] = words else {
        return Err(Error::Usage(USAGE));
    };
    check_field(field)?;
    let spec = specs::lookup(spec.bytes())?;
    match record(ctx, name, field, spec, used.bytes(), grace_ms)? {
        Some(value) => ffi::reply_bulk(ctx, value.as_slice()),
        None => ffi::reply_null(ctx),
    }
    Ok(())
}

/// One key of `spec` under `field` (checked): its usage recorded and
/// written; its value afterwards (`None`: it holds none).
fn record(
    ctx: *mut RedisModuleCtx,
    name: &Arg,
    field: &Arg,
    spec: Spec,
    used: &[u8],
    grace_ms: u64,
) -> Result<Option<RedisString>, Error> {
    let pairs = usage(used).ok_or(Error::Bad("usage (words \"at cost\")"))?;
    let key = Key::open(ctx, name);
    if key.kind() == Kind::Other {
        return Err(Error::WrongType);
    }
    let stored = key.hash_get(field.inner());
    let mut cell = crate::spec::cell(spec.format, stored.as_ref().map(|s| s.as_slice()))?;
    // Recorded in memory first, all of it, so that a failure writes
    // nothing; written once, at the last instant, as the last of that
    // many `record` calls would leave it.
    let mut last = None;
    for (at, cost) in pairs {
        // Cost 0 records nothing (as `record`).
        if cost == 0 {
            continue;
        }
        cell.record(at, cost).ok_or(Error::RecordUnsupported)?;
        last = Some(at);
    }
    if let Some(now) = last {
        let write = Write {
            ctx,
            name,
            key: &key,
            field: field.inner(),
        };
        let expires = cell.forgotten_at();
        if let Some(ttl) = write.store(expires, |out| cell.encode(out), now, grace_ms, false) {
            apply_ttl(ctx, name, &key, ttl, grace_ms);
        }
    }
    Ok(key.hash_get(field.inner()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn usage_words_come_in_pairs_of_numbers() {
        assert_eq!(usage(b"").unwrap().count(), 0);
        assert_eq!(
            usage(b"10 1 20 3").unwrap().collect::<Vec<_>>(),
            vec![(10, 1), (20, 3)]
        );
        for bad in [
            &b"10"[..],
            b"10 1 20",
            b"10 x",
            b"10  1",
            b" 10 1",
            b"10 1 ",
        ] {
            assert!(usage(bad).is_none(), "{bad:?}");
        }
    }
}

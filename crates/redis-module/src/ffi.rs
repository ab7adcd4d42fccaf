//! The module's contact with Redis through the C API directly, where
//! redis-module's safe wrappers cost a decision more than it needs: the
//! commands registered with a handler that reads Redis's own argument
//! vector (no retained copy of each argument), a hash key opened for
//! writing, its fields read and written by `RedisModuleString` (no copies
//! into C strings), its expiry read and set, effects replicated from the
//! strings at hand (no C string or vector built per call), and replies
//! written. Every `unsafe` block of the module's own code is here.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};
use std::{ptr, slice};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleKey, RedisModuleString};
use redis_module::RedisString;

/// The Redis API function `$name`, as Redis filled it in when the module
/// loaded (`None` on a server too old for it).
macro_rules! api {
    ($name:ident) => {
        // SAFETY: Redis writes these pointers once, while loading the
        // module, before any command runs; commands only read them.
        unsafe { raw::$name }
    };
}

/// A command handler as Redis calls it.
pub(crate) type Handler =
    extern "C" fn(*mut RedisModuleCtx, *mut *mut RedisModuleString, c_int) -> c_int;

/// Registers the command `name` (keys at `first`, `first + step`, …,
/// `last` counted from the end when negative); whether Redis took it.
pub(crate) fn create_command(
    ctx: *mut RedisModuleCtx,
    name: &CStr,
    handler: Handler,
    flags: &CStr,
    (first, last, step): (c_int, c_int, c_int),
) -> bool {
    let Some(create) = api!(RedisModule_CreateCommand) else {
        return false;
    };
    // SAFETY: the loading context, NUL-terminated strings that outlive the
    // call (Redis copies them), and a handler that never unwinds.
    let status = unsafe {
        create(
            ctx,
            name.as_ptr(),
            Some(handler),
            flags.as_ptr(),
            first,
            last,
            step,
        )
    };
    status == raw::REDISMODULE_OK as c_int
}

/// One argument of the running command: a string Redis owns and keeps for
/// the whole call.
#[repr(transparent)]
pub(crate) struct Arg(*mut RedisModuleString);

impl Arg {
    /// The argument's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        let Some(ptr_len) = api!(RedisModule_StringPtrLen) else {
            return &[];
        };
        let mut len = 0;
        // SAFETY: a string of the running call's argument vector, which
        // Redis neither frees nor changes before the handler returns.
        unsafe {
            let bytes = ptr_len(self.0, &mut len);
            if bytes.is_null() {
                return &[];
            }
            slice::from_raw_parts(bytes.cast::<u8>(), len)
        }
    }

    /// The string, for Redis calls that take it.
    pub(crate) fn inner(&self) -> *mut RedisModuleString {
        self.0
    }
}

/// The arguments Redis passed to a command handler, the command's name
/// first.
pub(crate) fn args<'a>(argv: *mut *mut RedisModuleString, argc: c_int) -> &'a [Arg] {
    let Ok(len) = usize::try_from(argc) else {
        return &[];
    };
    if argv.is_null() {
        return &[];
    }
    // SAFETY: Redis passes `argc` valid strings at `argv` for the whole
    // call; `Arg` is a transparent wrapper of the pointer.
    unsafe { slice::from_raw_parts(argv.cast::<Arg>(), len) }
}

/// Replicates `command` with `args` to the replicas and the AOF (nothing
/// when there are neither).
pub(crate) fn replicate(ctx: *mut RedisModuleCtx, command: &CStr, args: &[*mut RedisModuleString]) {
    let Some(replicate) = api!(RedisModule_Replicate) else {
        return;
    };
    let name = command.as_ptr();
    // SAFETY: formats `s` take one `RedisModuleString` each and `v` a
    // vector of them and its length; Redis copies the vector and retains
    // the strings it keeps. Up to three arguments go one by one: Redis
    // sizes its argument vector from the format, where `v` costs it one
    // more reallocation per call.
    unsafe {
        match *args {
            [a] => replicate(ctx, name, c"s".as_ptr(), a),
            [a, b] => replicate(ctx, name, c"ss".as_ptr(), a, b),
            [a, b, c] => replicate(ctx, name, c"sss".as_ptr(), a, b, c),
            _ => replicate(ctx, name, c"v".as_ptr(), args.as_ptr(), args.len()),
        };
    }
}

/// Answers one bulk string.
pub(crate) fn reply_bulk(ctx: *mut RedisModuleCtx, bytes: &[u8]) {
    if let Some(reply) = api!(RedisModule_ReplyWithStringBuffer) {
        // SAFETY: the running command's context and a buffer Redis copies.
        unsafe { reply(ctx, bytes.as_ptr().cast::<c_char>(), bytes.len()) };
    }
}

/// Answers an error; `message` starts with its code (`ERR`, `WRONGTYPE`).
pub(crate) fn reply_error(ctx: *mut RedisModuleCtx, message: &CStr) {
    if let Some(reply) = api!(RedisModule_ReplyWithError) {
        // SAFETY: the running command's context and a NUL-terminated
        // string Redis copies.
        unsafe { reply(ctx, message.as_ptr()) };
    }
}

/// Answers an integer.
pub(crate) fn reply_integer(ctx: *mut RedisModuleCtx, value: i64) {
    if let Some(reply) = api!(RedisModule_ReplyWithLongLong) {
        // SAFETY: the running command's context.
        unsafe { reply(ctx, value) };
    }
}

/// What a key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Nothing.
    Empty,
    /// A hash.
    Hash,
    /// Anything else.
    Other,
}

/// A key opened for reading and writing, closed when dropped.
pub(crate) struct Key {
    ctx: *mut RedisModuleCtx,
    key: *mut RedisModuleKey,
}

impl Key {
    /// Opens `name` for reading and writing.
    pub(crate) fn open(ctx: *mut RedisModuleCtx, name: &Arg) -> Key {
        let mode = raw::KeyMode::READ | raw::KeyMode::WRITE;
        Key {
            ctx,
            key: raw::open_key(ctx, name.inner(), mode),
        }
    }

    /// What the key holds.
    pub(crate) fn kind(&self) -> Kind {
        let Some(key_type) = api!(RedisModule_KeyType) else {
            return Kind::Other;
        };
        // SAFETY: `self.key` is a key this context opened and has not
        // closed; Redis checks the pointer's type itself.
        let kind = unsafe { key_type(self.key) };
        match raw::KeyType::from(kind) {
            raw::KeyType::Empty => Kind::Empty,
            raw::KeyType::Hash => Kind::Hash,
            _ => Kind::Other,
        }
    }

    /// The value of `field` in the hash (`None` when absent or the key is
    /// empty). The caller checked that the key is a hash or empty.
    pub(crate) fn hash_get(&self, field: *mut RedisModuleString) -> Option<RedisString> {
        let hash_get = api!(RedisModule_HashGet)?;
        let mut value: *mut RedisModuleString = ptr::null_mut();
        // SAFETY: an open hash (or empty) key, a field string Redis made,
        // one out-pointer, and the NULL that ends the variadic list.
        let status = unsafe {
            hash_get(
                self.key,
                raw::REDISMODULE_HASH_NONE as c_int,
                field,
                &mut value as *mut *mut RedisModuleString,
                ptr::null_mut::<RedisModuleString>(),
            )
        };
        if status != raw::REDISMODULE_OK as c_int || value.is_null() {
            return None;
        }
        // Ours to free: the RedisString frees it when dropped.
        Some(RedisString::from_redis_module_string(self.ctx, value))
    }

    /// Sets `field` to `value`, or deletes it when `value` is `None` (the
    /// key goes when its last field does).
    pub(crate) fn hash_set(
        &self,
        field: *mut RedisModuleString,
        value: Option<&RedisString>,
    ) -> bool {
        let Some(hash_set) = api!(RedisModule_HashSet) else {
            return false;
        };
        let value = value.map_or(
            raw::REDISMODULE_HASH_DELETE as *mut RedisModuleString,
            |v| v.inner,
        );
        // SAFETY: an open writable key, a field and a value (or the
        // DELETE marker) Redis made, and the NULL that ends the list.
        let status = unsafe {
            hash_set(
                self.key,
                raw::REDISMODULE_HASH_NONE as c_int,
                field,
                value,
                ptr::null_mut::<RedisModuleString>(),
            )
        };
        status != raw::REDISMODULE_ERR as c_int
    }

    /// How many fields the hash holds.
    pub(crate) fn hash_len(&self) -> usize {
        let Some(length) = api!(RedisModule_ValueLength) else {
            return 0;
        };
        // SAFETY: an open key.
        unsafe { length(self.key) }
    }

    /// Deletes the key.
    pub(crate) fn delete(&self) -> bool {
        let Some(delete) = api!(RedisModule_DeleteKey) else {
            return false;
        };
        // SAFETY: an open writable key.
        unsafe { delete(self.key) == raw::REDISMODULE_OK as c_int }
    }

    /// Milliseconds the key still lives, or `None` when it has no expiry.
    pub(crate) fn ttl(&self) -> Option<i64> {
        let get_expire = api!(RedisModule_GetExpire)?;
        // SAFETY: an open key.
        let ms = unsafe { get_expire(self.key) };
        (ms >= 0).then_some(ms)
    }

    /// Makes the key live `ms` more milliseconds; the absolute expiry (Unix
    /// ms) it now has, for the replicas.
    pub(crate) fn expire_in(&self, ms: i64) -> Option<i64> {
        if raw::set_expire(self.key, ms) != raw::Status::Ok {
            return None;
        }
        let get_abs = api!(RedisModule_GetAbsExpire)?;
        // SAFETY: an open key.
        let at = unsafe { get_abs(self.key) };
        (at >= 0).then_some(at)
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        raw::close_key(self.key);
    }
}

/// Starts an array reply of `len` elements (each written by a reply call
/// after it).
pub(crate) fn reply_array(ctx: *mut RedisModuleCtx, len: usize) {
    if let Some(reply) = api!(RedisModule_ReplyWithArray) {
        // SAFETY: the running command's context; the caller writes `len`
        // replies after it.
        unsafe {
            reply(
                ctx,
                std::os::raw::c_long::try_from(len).unwrap_or(std::os::raw::c_long::MAX),
            )
        };
    }
}

/// Answers a null (an absent value).
pub(crate) fn reply_null(ctx: *mut RedisModuleCtx) {
    if let Some(reply) = api!(RedisModule_ReplyWithNull) {
        // SAFETY: the running command's context.
        unsafe { reply(ctx) };
    }
}

//! The store's engines on real servers: `auto` picks the module where it
//! is loaded and the script where it is not; `module` refuses a server
//! without it, naming the problem; the same keys decided alternately by the
//! module and the script give the memory store's decisions; thousands of
//! hostile calls to the module's commands each answer an error or a
//! decision, with the server still answering afterwards; a
//! `TOLLGATE.SYNC` call leaves each key as that many `record` calls do,
//! and a `TOLLGATE.SYNCPACKED` call as a `TOLLGATE.SYNC` call does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::cell::{Cell, RefCell};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate_core::{AlgorithmName, Limit, LimitKey, Moment, Rate, Store};
use tollgate_memory::{LocalStore, MemoryConfig, MemoryStore};
use tollgate_redis::{Engine, Running};
use tollgate_testkit::RedisServer;

mod support;
use support::engines::store;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn auto_picks_the_module_where_it_is_loaded_and_the_script_elsewhere() {
    let runtime = runtime();
    let _context = runtime.enter();
    let with = RedisServer::start_with_module();
    let without = RedisServer::start();
    let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(2).unwrap());
    let request = [LimitKey {
        limit: &limit,
        key: b"k",
    }];
    runtime.block_on(async {
        let on_module = store(&with, "auto:", Engine::Auto);
        assert_eq!(on_module.running_engine(), None, "not looked yet");
        assert!(on_module.check(&request, Moment::Now, 1).await.unwrap()[0].allowed);
        assert_eq!(on_module.running_engine(), Some(Running::Module));
        assert_eq!(on_module.engine(), Some("module"));
        let counted = with.command("INFO commandstats").unwrap();
        assert!(
            counted.contains("cmdstat_tollgate.decide2:calls=1,"),
            "{counted}"
        );

        let on_script = store(&without, "auto:", Engine::Auto);
        assert!(on_script.check(&request, Moment::Now, 1).await.unwrap()[0].allowed);
        assert_eq!(on_script.running_engine(), Some(Running::Lua));
        let forced = store(&with, "lua:", Engine::Lua);
        assert_eq!(forced.probe_engine().await.unwrap(), Running::Lua);

        // Forced onto the module, a server without it is refused clearly.
        let refused = store(&without, "module:", Engine::Module);
        let error = refused.probe_engine().await.unwrap_err().to_string();
        assert!(
            error.contains("module") && error.contains("not loaded"),
            "{error}"
        );
        let error = refused.check(&request, Moment::Now, 1).await.unwrap_err();
        assert!(error.is_outage(), "{error}");
        assert!(matches!(
            refused.status().await,
            tollgate_core::StoreStatus::Unavailable(_)
        ));
    });
}

#[test]
fn keys_decided_alternately_by_the_module_and_the_script_decide_as_in_memory() {
    let runtime = runtime();
    let _context = runtime.enter();
    let server = RedisServer::start_with_module();
    let lua = store(&server, "mixed:", Engine::Lua);
    let module = store(&server, "mixed:", Engine::Module);
    let memory = LocalStore::system(MemoryStore::new(MemoryConfig::default()));
    let s = Duration::from_secs;
    let limits: Vec<Limit> = AlgorithmName::ALL
        .iter()
        .map(|&a| Limit::new(a, Rate::new(5, s(10)).unwrap()))
        .chain([
            Limit::new(AlgorithmName::SteppedWindow, Rate::new(4, s(4)).unwrap()).with_step(s(1)),
            Limit::new(AlgorithmName::TokenBucket, "1000003/w".parse().unwrap()),
        ])
        .collect();
    const START: u64 = 1_763_000_000_000_000_000;
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = proptest::collection::vec(
        (0usize..limits.len(), 0u64..3_000_000_000, 0u64..4, 0u8..4),
        1..60,
    );
    let case = std::cell::Cell::new(0u32);
    runner
        .run(&steps, |steps| {
            case.set(case.get() + 1);
            let key = format!("key{}", case.get());
            let mut now = START;
            for (i, &(l, advance, cost, op)) in steps.iter().enumerate() {
                now += advance;
                let engine: &tollgate_redis::RedisStore = if i % 2 == 0 { &lua } else { &module };
                let request = LimitKey {
                    limit: &limits[l],
                    key: key.as_bytes(),
                };
                let at = Moment::At(now);
                let (expected, got) = runtime.block_on(async {
                    match op {
                        0 | 1 => (
                            format!("{:?}", memory.check(&[request], at, cost).await),
                            format!("{:?}", engine.check(&[request], at, cost).await),
                        ),
                        2 => (
                            format!("{:?}", memory.reserve(&[request], at, cost, None).await),
                            format!("{:?}", engine.reserve(&[request], at, cost, None).await),
                        ),
                        _ => (
                            format!("{:?}", memory.next_available(request, at, cost).await),
                            format!("{:?}", engine.next_available(request, at, cost).await),
                        ),
                    }
                });
                prop_assert_eq!(expected, got, "step {} on {}", i, limits[l]);
            }
            Ok(())
        })
        .unwrap();
}

/// Sends one command as RESP and returns the first chunk of the reply.
fn call(port: u16, args: &[Vec<u8>]) -> Vec<u8> {
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg);
        request.extend_from_slice(b"\r\n");
    }
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(&request).unwrap();
    let mut reply = vec![0; 1 << 16];
    let n = stream.read(&mut reply).expect("the server answers");
    reply.truncate(n);
    reply
}

fn word() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"".to_vec()),
        Just(b"check".to_vec()),
        Just(b"reserve".to_vec()),
        Just(b"release".to_vec()),
        Just(b"record".to_vec()),
        Just(b"next".to_vec()),
        Just(b"probe".to_vec()),
        Just(b"gcra 1 100000000 10".to_vec()),
        Just(b"token_bucket 1 100000000 10 narrow".to_vec()),
        Just(b"sliding_window_log 3 1000000000".to_vec()),
        Just(b"stepped_window 3 4000000000 1000000000".to_vec()),
        Just(b"concurrency 3 1000000".to_vec()),
        Just(b"fixed_window 18446744073709551615 0".to_vec()),
        Just(b"gcra 6 4 1".to_vec()),
        // TOLLGATE.DECIDE2's packed words: a cost and a spec, and the last
        // argument's four words.
        Just(b"1 gcra 1 100000000 10".to_vec()),
        Just(b"0 concurrency 3 1000000".to_vec()),
        Just(b"2 stepped_window 3 4000000000 1000000000".to_vec()),
        Just(b"18446744073709551615 fixed_window 1 1000000000".to_vec()),
        Just(b"1 token_bucket 1 100000000 10 narrow".to_vec()),
        Just(b"1 sliding_window_log 3 1000000000".to_vec()),
        Just(b"1 gcra 6 4 1".to_vec()),
        Just(b"1 ".to_vec()),
        Just(b"check  1000 ".to_vec()),
        Just(b"probe 18446744073709551615 1000 ".to_vec()),
        Just(b"reserve 5 1000 7".to_vec()),
        Just(b"release  1000 1".to_vec()),
        Just(b"record 99 1000 ".to_vec()),
        Just(b"next  99999999999999999999999 ".to_vec()),
        Just(b"settle".to_vec()),
        Just(b"settle 5 1000 5 3 1".to_vec()),
        Just(b"settle  1000 1 2".to_vec()),
        Just(b"settle  1000 18446744073709551615 0 18446744073709551615".to_vec()),
        Just(b"settle 7 1000 9 18446744073709551615 0".to_vec()),
        Just(b"check".to_vec()),
        Just(b"check   ".to_vec()),
        Just(b"check 1 2 3 4".to_vec()),
        Just(b"18446744073709551615".to_vec()),
        Just(b"99999999999999999999999".to_vec()),
        Just(b"-1".to_vec()),
        Just(b"k".to_vec()),
        Just(b"f".to_vec()),
        Just(b"f\0g".to_vec()),
        (0u64..u64::MAX).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ]
}

#[test]
fn hostile_calls_answer_an_error_or_a_decision_and_the_server_lives() {
    let server = RedisServer::start_with_module();
    // Garbage states of every shape under the fields the calls name.
    let garbage: [&[u8]; 6] = [
        b"x",
        b"1 2 3 4 5 6 7 8 9",
        b"0 1 0 99 0 1 0 1 123",
        b"0 5 5 41|\xff\xff\xff\x00\x00\x01",
        b"340282366920938463463374607431768211455",
        b"5 ",
    ];
    for (i, value) in garbage.iter().enumerate() {
        let mut args = vec![b"HSET".to_vec(), b"k".to_vec(), b"f".to_vec()];
        args.push(value.to_vec());
        call(server.port(), &args);
        let mut other = vec![
            b"HSET".to_vec(),
            format!("g{i}").into_bytes(),
            b"f".to_vec(),
        ];
        other.push(value.to_vec());
        call(server.port(), &other);
    }
    call(
        server.port(),
        &[b"SET".to_vec(), b"s".to_vec(), b"v".to_vec()],
    );
    let mut runner = TestRunner::new(Config {
        cases: 3000,
        failure_persistence: None,
        ..Config::default()
    });
    // Any words, and calls of the command's shape (limits of three words,
    // then the last) made of them.
    let limit = (word(), word(), word()).prop_map(|(k, f, s)| vec![k, f, s]);
    let shaped = (proptest::collection::vec(limit, 0..4), word()).prop_map(|(limits, last)| {
        let mut words: Vec<Vec<u8>> = limits.into_iter().flatten().collect();
        words.push(last);
        words
    });
    let argv = prop_oneof![proptest::collection::vec(word(), 0..14), shaped];
    runner
        .run(&argv, |words| {
            let mut args = vec![b"TOLLGATE.DECIDE2".to_vec()];
            args.extend(words);
            let reply = call(server.port(), &args);
            prop_assert!(
                reply.starts_with(b"-") || reply.starts_with(b"$"),
                "{:?}",
                String::from_utf8_lossy(&reply)
            );
            Ok(())
        })
        .unwrap();
    assert!(server.answers(), "PING after the hostile calls");
    // A well-formed call on a garbage state is refused, and the state kept.
    let reply = call(
        server.port(),
        &[
            b"TOLLGATE.DECIDE2".to_vec(),
            b"g0".to_vec(),
            b"f".to_vec(),
            b"1 gcra 1 100000000 10".to_vec(),
            b"check  1000 ".to_vec(),
        ],
    );
    assert!(reply.starts_with(b"-ERR tollgate: a state is not format version 1"));
    assert_eq!(server.command("HGET g0 f").unwrap(), "$1\r\nx\r\n");
    let wrong = call(
        server.port(),
        &[
            b"TOLLGATE.DECIDE2".to_vec(),
            b"s".to_vec(),
            b"f".to_vec(),
            b"1 gcra 1 100000000 10".to_vec(),
            b"check  1000 ".to_vec(),
        ],
    );
    assert!(wrong.starts_with(b"-WRONGTYPE"), "{wrong:?}");
}

/// A Redis server with the module, where `g` is a hash whose field `f`
/// is not a state and `s` is not a hash.
fn module_with_a_bad_state_and_a_non_hash() -> RedisServer {
    let server = RedisServer::start_with_module();
    call(
        server.port(),
        &[
            b"HSET".to_vec(),
            b"g".to_vec(),
            b"f".to_vec(),
            b"x".to_vec(),
        ],
    );
    call(
        server.port(),
        &[b"SET".to_vec(), b"s".to_vec(), b"v".to_vec()],
    );
    server
}

/// A key's usage words in a sync call: well formed, malformed, at and past
/// the numbers' limits, or any word.
fn usage_words() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        Just(b"".to_vec()),
        Just(b"1000 1".to_vec()),
        Just(b"1000 1 2000 3".to_vec()),
        Just(b"1000 0".to_vec()),
        Just(b"1000".to_vec()),
        Just(b"1000 1 ".to_vec()),
        Just(b"18446744073709551615 18446744073709551615".to_vec()),
        Just(b"99999999999999999999999 1".to_vec()),
        word(),
    ]
}

/// Thousands of hostile `TOLLGATE.SYNC` calls (any words, and calls of
/// its shape: four words a key, then the grace) each answer an error or an
/// array, and the server lives; a key whose state is not a state, or that
/// is not a hash, is that key's error element, and the others are synced.
#[test]
fn hostile_sync_calls_answer_an_error_or_an_array_and_the_server_lives() {
    let server = module_with_a_bad_state_and_a_non_hash();
    let usage = usage_words();
    let key = (word(), word(), word(), usage).prop_map(|(k, f, s, u)| vec![k, f, s, u]);
    let shaped = (proptest::collection::vec(key, 0..4), word()).prop_map(|(keys, last)| {
        let mut words: Vec<Vec<u8>> = keys.into_iter().flatten().collect();
        words.push(last);
        words
    });
    let argv = prop_oneof![proptest::collection::vec(word(), 0..14), shaped];
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&argv, |words| {
            let mut args = vec![b"TOLLGATE.SYNC".to_vec()];
            args.extend(words);
            let reply = call(server.port(), &args);
            prop_assert!(
                reply.starts_with(b"-") || reply.starts_with(b"*"),
                "{:?}",
                String::from_utf8_lossy(&reply)
            );
            Ok(())
        })
        .unwrap();
    assert!(server.answers(), "PING after the hostile calls");
    let spec = b"gcra 1 100000000 10".to_vec();
    let reply = call(
        server.port(),
        &[
            b"TOLLGATE.SYNC".to_vec(),
            b"g".to_vec(),
            b"f".to_vec(),
            spec.clone(),
            b"1000 1".to_vec(),
            b"s".to_vec(),
            b"f".to_vec(),
            spec.clone(),
            b"1000 1".to_vec(),
            b"ok".to_vec(),
            b"f".to_vec(),
            spec,
            b"1000 1".to_vec(),
            b"1000".to_vec(),
        ],
    );
    let text = String::from_utf8_lossy(&reply);
    assert!(
        text.starts_with("*3\r\n-ERR tollgate: a state is not format version 1\r\n-WRONGTYPE"),
        "{text:?}"
    );
    assert!(text.contains("\r\n$"), "the third key's value: {text:?}");
    assert_eq!(server.command("HGET g f").unwrap(), "$1\r\nx\r\n");
    assert!(server.command("HGET ok f").unwrap().starts_with('$'));
}

/// `TOLLGATE.SYNC` leaves each key's state as the same usage sent as
/// `record` calls of `TOLLGATE.DECIDE2` (one per usage, in order) does,
/// with a TTL as long as its state needs, and answers the value `HGET`
/// then reads; for every algorithm whose usage can be merged, several keys
/// to a call.
#[test]
fn a_sync_call_leaves_each_key_as_record_calls_do() {
    let server = RedisServer::start_with_module();
    let connection = RefCell::new(
        redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap(),
    );
    let second = Duration::from_secs(1);
    let limits: Vec<Limit> = [
        AlgorithmName::Gcra,
        AlgorithmName::TokenBucket,
        AlgorithmName::LeakyBucket,
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindowLog,
        AlgorithmName::SlidingWindowCounter,
    ]
    .into_iter()
    .map(|algorithm| Limit::new(algorithm, Rate::new(5, 10 * second).unwrap()))
    .collect();
    let specs: Vec<String> = limits.iter().map(tollgate_state::algorithm_spec).collect();
    // A few usages, in order, within a minute of an instant.
    const START: u64 = 1_763_000_000_000_000_000;
    let usage = proptest::collection::vec((0u64..60_000, 0u64..4), 0..5).prop_map(|mut u| {
        u.sort();
        u.into_iter()
            .map(|(ms, cost)| (START + ms * 1_000_000, cost))
            .collect::<Vec<_>>()
    });
    let keys = proptest::collection::vec((0..specs.len(), usage), 1..4);
    let mut runner = TestRunner::new(Config {
        cases: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let case = Cell::new(0);
    runner
        .run(&keys, |keys| {
            case.set(case.get() + 1);
            let case = case.get();
            let mut connection = connection.borrow_mut();
            let mut sync = redis::cmd("TOLLGATE.SYNC");
            for (n, (spec, usage)) in keys.iter().enumerate() {
                let words: Vec<String> = usage
                    .iter()
                    .map(|(at, cost)| format!("{at} {cost}"))
                    .collect();
                sync.arg(format!("sync:{case}:{n}"))
                    .arg("f")
                    .arg(&specs[*spec])
                    .arg(words.join(" "));
                for (at, cost) in usage {
                    let _: redis::Value = redis::cmd("TOLLGATE.DECIDE2")
                        .arg(format!("record:{case}:{n}"))
                        .arg("f")
                        .arg(format!("{cost} {}", specs[*spec]))
                        .arg(format!("record {at} 3600000 "))
                        .query(&mut *connection)
                        .unwrap();
                }
            }
            sync.arg("3600000");
            let values: Vec<Option<Vec<u8>>> = sync.query(&mut *connection).unwrap();
            prop_assert_eq!(values.len(), keys.len());
            for (n, value) in values.into_iter().enumerate() {
                let mut read = |prefix: &str| -> (Option<Vec<u8>>, i64) {
                    let key = format!("{prefix}:{case}:{n}");
                    let value: Option<Vec<u8>> = redis::cmd("HGET")
                        .arg(&key)
                        .arg("f")
                        .query(&mut *connection)
                        .unwrap();
                    let ttl: i64 = redis::cmd("PTTL")
                        .arg(&key)
                        .query(&mut *connection)
                        .unwrap();
                    (value, ttl)
                };
                let (synced, synced_ttl) = read("sync");
                let (recorded, recorded_ttl) = read("record");
                prop_assert_eq!(&value, &synced, "key {}: the answer is the value", n);
                prop_assert_eq!(&synced, &recorded, "key {} ({})", n, &specs[keys[n].0]);
                // A key with a state lives at least its state's time plus
                // two graces (docs/redis-state.md; 3,600,000 ms here, the
                // clock running on a little between the calls); one
                // without is gone. The TTLs themselves may differ: each
                // `record` pushes the TTL out from its own instant.
                match &synced {
                    Some(_) => prop_assert!(
                        synced_ttl > 7_200_000 - 5_000 && recorded_ttl > 7_200_000 - 5_000,
                        "key {}: TTL {} against {}",
                        n,
                        synced_ttl,
                        recorded_ttl
                    ),
                    None => prop_assert_eq!((synced_ttl, recorded_ttl), (-2, -2)),
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Thousands of hostile `TOLLGATE.SYNCPACKED` calls (any words, and calls
/// of its shape: a field, a spec and a grace, then two words a key) each
/// answer an error or one string, and the server lives; a key whose state
/// is not a state, or that is not a hash, is that key's error in the
/// string, and the others are synced.
#[test]
fn hostile_packed_sync_calls_answer_an_error_or_a_string_and_the_server_lives() {
    let server = module_with_a_bad_state_and_a_non_hash();
    let usage = usage_words();
    let key = (word(), usage).prop_map(|(k, u)| vec![k, u]);
    let grace = prop_oneof![Just(b"1000".to_vec()), word()];
    let shaped = (word(), word(), grace, proptest::collection::vec(key, 0..4)).prop_map(
        |(field, spec, grace, keys)| {
            let mut words = vec![field, spec, grace];
            words.extend(keys.into_iter().flatten());
            words
        },
    );
    let argv = prop_oneof![proptest::collection::vec(word(), 0..14), shaped];
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&argv, |words| {
            let mut args = vec![b"TOLLGATE.SYNCPACKED".to_vec()];
            args.extend(words);
            let reply = call(server.port(), &args);
            prop_assert!(
                reply.starts_with(b"-") || reply.starts_with(b"$"),
                "{:?}",
                String::from_utf8_lossy(&reply)
            );
            Ok(())
        })
        .unwrap();
    assert!(server.answers(), "PING after the hostile calls");
    let reply = call(
        server.port(),
        &[
            b"TOLLGATE.SYNCPACKED".to_vec(),
            b"f".to_vec(),
            b"gcra 1 100000000 10".to_vec(),
            b"1000".to_vec(),
            b"g".to_vec(),
            b"1000 1".to_vec(),
            b"s".to_vec(),
            b"1000 1".to_vec(),
            b"ok".to_vec(),
            b"1000 1".to_vec(),
        ],
    );
    let text = String::from_utf8_lossy(&reply);
    let not_version_1 = "ERR tollgate: a state is not format version 1";
    let wrong_type = "WRONGTYPE tollgate: a key holds something else than a hash";
    let expected = format!(
        "e{}:{not_version_1}e{}:{wrong_type}v",
        not_version_1.len(),
        wrong_type.len()
    );
    assert!(text.contains(&expected), "{text:?}");
    assert_eq!(server.command("HGET g f").unwrap(), "$1\r\nx\r\n");
    let ok = server.command("HGET ok f").unwrap();
    assert!(ok.starts_with('$'), "{ok:?}");
    let value = ok.lines().nth(1).unwrap();
    assert!(
        text.ends_with(&format!("v{}:{value}\r\n", value.len())),
        "{text:?}"
    );
}

/// `TOLLGATE.SYNCPACKED` leaves each key as `TOLLGATE.SYNC` does with the
/// same usage, and answers the same values (none as `n`), for every
/// algorithm whose usage can be merged, several keys to a call.
#[test]
fn a_packed_sync_call_leaves_each_key_as_a_sync_call_does() {
    let server = RedisServer::start_with_module();
    let connection = RefCell::new(
        redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap(),
    );
    let second = Duration::from_secs(1);
    let specs: Vec<String> = [
        AlgorithmName::Gcra,
        AlgorithmName::TokenBucket,
        AlgorithmName::LeakyBucket,
        AlgorithmName::FixedWindow,
        AlgorithmName::SlidingWindowLog,
        AlgorithmName::SlidingWindowCounter,
    ]
    .into_iter()
    .map(|algorithm| {
        tollgate_state::algorithm_spec(&Limit::new(algorithm, Rate::new(5, 10 * second).unwrap()))
    })
    .collect();
    const START: u64 = 1_763_000_000_000_000_000;
    let usage = proptest::collection::vec((0u64..60_000, 0u64..4), 0..5).prop_map(|mut u| {
        u.sort();
        u.into_iter()
            .map(|(ms, cost)| format!("{} {cost}", START + ms * 1_000_000))
            .collect::<Vec<_>>()
            .join(" ")
    });
    let calls = (0..specs.len(), proptest::collection::vec(usage, 1..4));
    let mut runner = TestRunner::new(Config {
        cases: 100,
        failure_persistence: None,
        ..Config::default()
    });
    let case = Cell::new(0);
    runner
        .run(&calls, |(spec, usage)| {
            case.set(case.get() + 1);
            let case = case.get();
            let mut connection = connection.borrow_mut();
            let mut sync = redis::cmd("TOLLGATE.SYNC");
            let mut packed = redis::cmd("TOLLGATE.SYNCPACKED");
            packed.arg("f").arg(&specs[spec]).arg("3600000");
            for (n, words) in usage.iter().enumerate() {
                sync.arg(format!("sync:{case}:{n}"))
                    .arg("f")
                    .arg(&specs[spec])
                    .arg(words);
                packed.arg(format!("packed:{case}:{n}")).arg(words);
            }
            sync.arg("3600000");
            let values: Vec<Option<Vec<u8>>> = sync.query(&mut *connection).unwrap();
            let answer: Vec<u8> = packed.query(&mut *connection).unwrap();
            let mut expected = Vec::new();
            for (n, value) in values.iter().enumerate() {
                match value {
                    Some(value) => {
                        expected.extend_from_slice(format!("v{}:", value.len()).as_bytes());
                        expected.extend_from_slice(value);
                    }
                    None => expected.push(b'n'),
                }
                let read: Option<Vec<u8>> = redis::cmd("HGET")
                    .arg(format!("packed:{case}:{n}"))
                    .arg("f")
                    .query(&mut *connection)
                    .unwrap();
                prop_assert_eq!(&read, value, "key {} ({})", n, &specs[spec]);
            }
            prop_assert_eq!(answer, expected);
            Ok(())
        })
        .unwrap();
}

/// The milliseconds `key` still lives (`PTTL`).
fn pttl(server: &RedisServer, key: &str) -> i64 {
    let reply = server.command(&format!("PTTL {key}")).unwrap();
    reply.trim().trim_start_matches(':').parse().unwrap()
}

/// The one key under `prefix` (sent in an inline `KEYS`: no spaces in it).
fn only_key(server: &RedisServer, prefix: &str) -> String {
    let keys = server.command(&format!("KEYS {prefix}*")).unwrap();
    keys.lines().nth(2).unwrap().to_owned()
}

/// The key's TTL outlives its state by the grace and is pushed out only
/// when it runs short (docs/redis-state.md): the first write gives the
/// state's time plus two graces; a later write that needs no more leaves
/// the TTL alone; once the TTL is below the state's time plus one grace
/// (set by hand here), the next write pushes it out again. Alike on both
/// engines.
#[test]
fn a_key_s_ttl_is_pushed_out_only_when_it_runs_short() {
    let runtime = runtime();
    let _context = runtime.enter();
    let server = RedisServer::start_with_module();
    // A fixed window of 10 s whose state expires at the window's end; the
    // stores' grace is 3,600,000 ms (support::engines::store).
    let limit = Limit::new(
        AlgorithmName::FixedWindow,
        Rate::new(5, Duration::from_secs(10)).unwrap(),
    );
    let request = LimitKey {
        limit: &limit,
        key: b"k",
    };
    const WINDOW_START: u64 = 1_763_000_000_000_000_000;
    const GRACE_MS: i64 = 3_600_000;
    // Slack for the test's own pace: Redis's clock runs on between calls.
    const SLACK_MS: i64 = 60_000;
    for engine in [Engine::Lua, Engine::Module] {
        let prefix = format!("ttl:{engine:?}:");
        let store = store(&server, &prefix, engine);
        let check = |ms: u64| {
            let at = Moment::At(WINDOW_START + ms * 1_000_000);
            let decisions = runtime.block_on(store.check(&[request], at, 1)).unwrap();
            assert!(decisions[0].allowed, "{engine:?}");
        };
        check(0);
        let key = only_key(&server, &prefix);
        let first = pttl(&server, &key);
        assert!(
            first > 10_000 + 2 * GRACE_MS - SLACK_MS && first <= 10_000 + 2 * GRACE_MS,
            "{engine:?}: first TTL {first}"
        );
        // 1 s later the state needs 9 s: the TTL is long enough, untouched.
        check(1_000);
        assert!(
            pttl(&server, &key) <= first,
            "{engine:?}: pushed out needlessly"
        );
        // Shorter than the state's 8 s plus the grace: pushed out again.
        let short = GRACE_MS;
        assert!(server
            .command(&format!("PEXPIRE {key} {short}"))
            .unwrap()
            .starts_with(":1"));
        check(2_000);
        let pushed = pttl(&server, &key);
        assert!(
            pushed > 8_000 + 2 * GRACE_MS - SLACK_MS && pushed <= 8_000 + 2 * GRACE_MS,
            "{engine:?}: TTL {pushed} after running short"
        );
    }
}

/// A key holding several limits gets the TTL its longest-living state
/// needs, whatever the order of its limits (docs/redis-state.md): the TTL
/// is settled once per key when the operation's writes are done, not field
/// by field, where the first field's TTL (its time plus two graces) could
/// leave the second's alone by the width of one millisecond of Redis's
/// clock. Alike on both engines.
#[test]
fn a_key_with_several_limits_lives_by_its_longest_state_in_any_order() {
    let runtime = runtime();
    let _context = runtime.enter();
    let server = RedisServer::start_with_module();
    // Fixed windows of 10 s and 30 min from an instant both start at: the
    // states expire 10 s and 1,800 s from it, less than a grace apart
    // (3,600,000 ms, support::engines::store).
    let short = Limit::new(
        AlgorithmName::FixedWindow,
        Rate::new(5, Duration::from_secs(10)).unwrap(),
    );
    let long = Limit::new(
        AlgorithmName::FixedWindow,
        Rate::new(5, Duration::from_secs(1_800)).unwrap(),
    );
    const START: u64 = 1_762_999_200 * 1_000_000_000;
    const GRACE_MS: i64 = 3_600_000;
    const LONGEST_MS: i64 = 1_800_000;
    // Slack for the test's own pace: Redis's clock runs on between calls.
    const SLACK_MS: i64 = 60_000;
    for engine in [Engine::Lua, Engine::Module] {
        for (order, limits) in [
            ("short-long", [&short, &long]),
            ("long-short", [&long, &short]),
        ] {
            let prefix = format!("ttls:{engine:?}:{order}:");
            let store = store(&server, &prefix, engine);
            let requests = limits.map(|limit| LimitKey { limit, key: b"k" });
            let decisions = runtime
                .block_on(store.check(&requests, Moment::At(START), 1))
                .unwrap();
            assert!(decisions.iter().all(|d| d.allowed), "{engine:?}, {order}");
            let key = only_key(&server, &prefix);
            let ttl = pttl(&server, &key);
            assert!(
                ttl > LONGEST_MS + 2 * GRACE_MS - SLACK_MS && ttl <= LONGEST_MS + 2 * GRACE_MS,
                "{engine:?}, {order}: TTL {ttl}"
            );
        }
    }
}

/// The script's lean gcra path (gcra_lean.lua) decides only states it can
/// read exactly in plain Lua numbers: on any other stored value — text Lua
/// would read as a number (`1e5`, ` 12`, `0x10`), a number too long, a
/// state booked two months ahead — it writes nothing and the full script
/// decides, so the script answers as the module does, error or decision.
#[test]
fn the_lean_gcra_path_leaves_states_it_cannot_read_to_the_full_script() {
    let runtime = runtime();
    let _context = runtime.enter();
    let server = RedisServer::start_with_module();
    // 1,000/s, burst 20: n = 1, p = 10^6 once reduced; the lean bounds hold.
    let limit = Limit::new(
        AlgorithmName::Gcra,
        Rate::new(1000, Duration::from_secs(1)).unwrap(),
    )
    .with_burst(20);
    const START: u64 = 1_763_000_000_000_000_000;
    let two_months_ahead = (START + 61 * 86_400 * 1_000_000_000).to_string();
    let just_ahead = (START + 5_000_000).to_string();
    let states: [&[u8]; 9] = [
        b"1e5",
        b" 12",
        b"0x10",
        b"12a",
        b"",
        b"1000000000000000000000000000",
        two_months_ahead.as_bytes(),
        just_ahead.as_bytes(),
        b"7",
    ];
    // The lean script decides a fresh key alone (one script cached); a
    // state booked far ahead makes it call the full one (two).
    let cached = || -> String {
        let info = server.command("INFO memory").unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
            .unwrap()
            .trim()
            .to_owned()
    };
    assert!(server.command("SCRIPT FLUSH").unwrap().starts_with("+OK"));
    let lua = store(&server, "lean-count:", Engine::Lua);
    let fresh = LimitKey {
        limit: &limit,
        key: b"fresh",
    };
    let at = Moment::At(START);
    assert!(runtime.block_on(lua.check(&[fresh], at, 1)).unwrap()[0].allowed);
    assert_eq!(cached(), "1");
    let redis_key = String::from_utf8(lua.redis_key(b"fresh")).unwrap();
    let field = server.command(&format!("HKEYS {redis_key}")).unwrap();
    let field = field.lines().nth(2).unwrap().to_owned();
    let ahead: Vec<Vec<u8>> = ["HSET", &redis_key, &field, &two_months_ahead]
        .iter()
        .map(|w| w.as_bytes().to_vec())
        .collect();
    assert!(call(server.port(), &ahead).starts_with(b":0"));
    assert!(!runtime.block_on(lua.check(&[fresh], at, 1)).unwrap()[0].allowed);
    assert_eq!(cached(), "2");
    for (i, state) in states.iter().enumerate() {
        let key = format!("k{i}");
        let request = LimitKey {
            limit: &limit,
            key: key.as_bytes(),
        };
        let mut answers = Vec::new();
        for engine in [Engine::Lua, Engine::Module] {
            let store = store(&server, &format!("lean:{engine:?}:"), engine);
            let at = Moment::At(START);
            runtime.block_on(store.check(&[request], at, 1)).unwrap();
            let redis_key = String::from_utf8(store.redis_key(key.as_bytes())).unwrap();
            let fields = server.command(&format!("HKEYS {redis_key}")).unwrap();
            let field = fields.lines().nth(2).unwrap().to_owned();
            let mut args = vec![b"HSET".to_vec(), redis_key.clone().into_bytes()];
            args.push(field.into_bytes());
            args.push(state.to_vec());
            assert!(call(server.port(), &args).starts_with(b":0"));
            // The engines word their errors differently; an error is an
            // error, and the state must be kept.
            let answer = match runtime.block_on(store.check(&[request], at, 1)) {
                Ok(decisions) => format!("{decisions:?}"),
                Err(_) => "an error".to_owned(),
            };
            let kept = server.command(&format!("HVALS {redis_key}")).unwrap();
            answers.push(format!("{answer} {kept:?}"));
        }
        assert_eq!(
            answers[0],
            answers[1],
            "state {:?}",
            String::from_utf8_lossy(state)
        );
    }
}

//! The packed rows that hold the stepped window's marks and the
//! concurrency leases (`src/lua/packed_rows.lua`), driven by random
//! operations inside Redis and checked against a plain array after every
//! one (`packed_rows.lua` beside this file): rebuilds, the split between
//! the stored text and the tail, searches and the encode/decode round trip.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_testkit::RedisServer;

const SCRIPT: &str = concat!(
    include_str!("../src/lua/bigint.lua"),
    "\n",
    include_str!("../src/lua/algorithms.lua"),
    "\n",
    include_str!("../src/lua/packed_rows.lua"),
    "\n",
    include_str!("packed_rows.lua"),
);

#[test]
fn packed_rows_behave_like_an_array() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_connection().unwrap();
    let script = redis::Script::new(SCRIPT);
    for seed in 1..=10u32 {
        let outcome: String = script
            .arg(seed)
            .arg(250)
            .invoke(&mut connection)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert_eq!(outcome, "ok");
    }
}

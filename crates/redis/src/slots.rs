//! A Redis Cluster's slot map as the async sync mode's batches use it:
//! [`SlotMap`], which master serves each slot, read with `CLUSTER SLOTS`,
//! so that a batch goes as one pipeline per master.
//!
//! redis-rs keeps a slot map of its own to route commands but does not
//! show it. This one only groups a batch's keys: each group's pipeline is
//! still routed by redis-rs, to the master of its first key's slot. A map
//! gone stale (a failover, a resharding) can only send some keys to a node
//! that no longer serves them: they fail on their own (`MOVED`), stay
//! unsent and go with the next batch, once the map has been read again.

use redis::Value;

/// Which master serves each slot, by ranges of slots.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SlotMap {
    /// First slot, last slot and the index of its master in `masters`,
    /// sorted by first slot.
    ranges: Vec<(u16, u16, usize)>,
    /// Each master once: its node id (its address when the reply has none).
    masters: Vec<Vec<u8>>,
}

/// The cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part
/// between the first `{` and the next `}`, when not empty) or of the whole
/// key, modulo 16,384 (the Redis Cluster specification's `HASH_SLOT`).
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(key)) % 16384
}

impl SlotMap {
    /// The map in a `CLUSTER SLOTS` reply: per range its first and last
    /// slot, then its master as `[host, port, id, …]`, then its replicas.
    /// `None` when the reply is not of that shape.
    pub(crate) fn parse(reply: &Value) -> Option<SlotMap> {
        let Value::Array(entries) = reply else {
            return None;
        };
        let mut map = SlotMap::default();
        for entry in entries {
            let Value::Array(fields) = entry else {
                return None;
            };
            let (start, end) = match (fields.first(), fields.get(1)) {
                (Some(Value::Int(start)), Some(Value::Int(end))) => {
                    (u16::try_from(*start).ok()?, u16::try_from(*end).ok()?)
                }
                _ => return None,
            };
            let Some(Value::Array(master)) = fields.get(2) else {
                return None;
            };
            let identity = match (master.first(), master.get(1), master.get(2)) {
                (_, _, Some(Value::BulkString(id))) if !id.is_empty() => id.clone(),
                (Some(Value::BulkString(host)), Some(Value::Int(port)), _) => {
                    let mut address = host.clone();
                    address.push(b':');
                    address.extend_from_slice(port.to_string().as_bytes());
                    address
                }
                _ => return None,
            };
            let index = match map.masters.iter().position(|m| *m == identity) {
                Some(index) => index,
                None => {
                    map.masters.push(identity);
                    map.masters.len() - 1
                }
            };
            if start > end {
                return None;
            }
            map.ranges.push((start, end, index));
        }
        map.ranges.sort_unstable();
        Some(map)
    }

    /// The index of the master serving `slot` (the same index for every
    /// slot of one master), `None` when no master serves it.
    pub(crate) fn master_of(&self, slot: u16) -> Option<usize> {
        let after = self.ranges.partition_point(|&(start, _, _)| start <= slot);
        let &(_, end, master) = self.ranges.get(after.checked_sub(1)?)?;
        (slot <= end).then_some(master)
    }

    /// How many masters serve slots.
    #[cfg(test)]
    fn masters(&self) -> usize {
        self.masters.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(host.into()),
            Value::Int(port),
            Value::BulkString(id.into()),
        ])
    }

    fn range(start: i64, end: i64, nodes: Vec<Value>) -> Value {
        let mut fields = vec![Value::Int(start), Value::Int(end)];
        fields.extend(nodes);
        Value::Array(fields)
    }

    #[test]
    fn slots_map_to_their_master_whatever_the_order_of_the_ranges() {
        let reply = Value::Array(vec![
            range(10923, 16383, vec![node("127.0.0.1", 7002, "c")]),
            range(
                0,
                5460,
                vec![node("127.0.0.1", 7000, "a"), node("x", 1, "r")],
            ),
            range(5461, 10000, vec![node("127.0.0.1", 7001, "b")]),
            range(10001, 10922, vec![node("127.0.0.1", 7000, "a")]),
        ]);
        let map = SlotMap::parse(&reply).unwrap();
        assert_eq!(map.masters(), 3);
        let a = map.master_of(0).unwrap();
        assert_eq!(map.master_of(5460), Some(a));
        assert_eq!(map.master_of(10001), Some(a));
        assert_eq!(map.master_of(10922), Some(a));
        let b = map.master_of(5461).unwrap();
        let c = map.master_of(16383).unwrap();
        assert!(a != b && b != c && a != c);
        assert_eq!(map.master_of(10000), Some(b));
    }

    #[test]
    fn slots_no_master_serves_have_none_and_nodes_without_ids_their_address() {
        let reply = Value::Array(vec![
            range(0, 99, vec![node("h", 1, "")]),
            range(200, 299, vec![node("h", 1, "")]),
            range(300, 399, vec![node("h", 2, "")]),
        ]);
        let map = SlotMap::parse(&reply).unwrap();
        assert_eq!(map.masters(), 2);
        assert_eq!(map.master_of(150), None);
        assert_eq!(map.master_of(400), None);
        assert_eq!(map.master_of(99), map.master_of(250));
        assert_ne!(map.master_of(99), map.master_of(300));
    }

    #[test]
    fn slots_are_redis_rs_s() {
        for key in [
            &b"tollgate:{abc}"[..],
            b"plain",
            b"{}empty",
            b"a{b}c{d}",
            b"{unclosed",
            b"",
        ] {
            let route = redis::cluster_routing::Route::with_key(
                key,
                redis::cluster_routing::SlotAddr::Master,
            );
            assert_eq!(
                redis::cluster_routing::Route::new(
                    slot_of(key),
                    redis::cluster_routing::SlotAddr::Master
                ),
                route,
                "{key:?}"
            );
        }
        // The specification's example.
        assert_eq!(slot_of(b"123456789"), 0x31C3);
    }

    #[test]
    fn replies_of_another_shape_are_no_map() {
        for reply in [
            Value::Nil,
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![range(5, 1, vec![node("h", 1, "a")])]),
            Value::Array(vec![range(0, 70000, vec![node("h", 1, "a")])]),
            Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(1)])]),
        ] {
            assert_eq!(SlotMap::parse(&reply), None, "{reply:?}");
        }
        assert_eq!(
            SlotMap::parse(&Value::Array(vec![])),
            Some(SlotMap::default())
        );
    }
}

//! From a store request to the engines' input: each (limit, key) pair
//! becomes a [`Cell`] with its Redis key and its limit, prepared once (hash
//! field, spec: the `limits` module), and
//! pairs naming the same limit on the same key are merged, costs summed, as
//! the memory store merges them.
//!
//! Layout: one Redis hash per tollgate key, `<prefix>{<tag>}<key>`, with one
//! field per limit on that key. The tag is a stable 64-bit hash of the key
//! in hex, so every limit of a key lives in one cluster slot whatever bytes
//! the key holds (a `{` in a key cannot move it), and an administrative
//! reset of a key is one `DEL`. The raw key follows the tag, so distinct
//! keys never share a hash and `redis-cli` shows what a hash is for.

use std::hash::Hasher;
use std::sync::Arc;

use siphasher::sip::SipHasher13;
use tollgate_core::calendar::Calendar;
use tollgate_core::{AlgorithmName, Limit, LimitKey, StoreError};

use crate::limits::{Limits, Prepared};

/// One limit on one key, as the engines receive it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cell {
    /// The Redis key of the hash.
    pub(crate) key: Vec<u8>,
    /// The limit: its field, spec and properties.
    pub(crate) limit: Arc<Prepared>,
    /// The summed cost of the requests merged into this cell.
    pub(crate) cost: u64,
    /// A calendar limit's windows around the call's instant, as the words
    /// that follow its spec ([`calendar_windows`]); `None` for the others.
    pub(crate) windows: Option<Box<str>>,
}

impl Cell {
    /// The spec the engines take for this call: the limit's, with the
    /// windows of a calendar limit.
    pub(crate) fn spec(&self) -> std::borrow::Cow<'_, str> {
        match &self.windows {
            None => std::borrow::Cow::Borrowed(&self.limit.spec),
            Some(windows) => std::borrow::Cow::Owned(format!("{} {windows}", self.limit.spec)),
        }
    }
}

/// How many calendar windows a call carries on each side of the one
/// holding its instant: Redis's clock may be that far from the store's, a
/// state may have last counted that long ago, and a reservation may land
/// that far ahead (the script refuses one further ahead).
pub(crate) const CALENDAR_WINDOWS_AROUND: u64 = 3;

/// The words after a calendar limit's spec for a call at `instant`: the
/// number of the first window sent, then the starts of the windows from
/// [`CALENDAR_WINDOWS_AROUND`] before the one holding `instant` to as many
/// after it, and the end of the last (windows.lua).
pub(crate) fn calendar_windows(calendar: &Calendar, instant: u64) -> String {
    let current = calendar.window_at(instant).index;
    let first = current.saturating_sub(CALENDAR_WINDOWS_AROUND);
    let last = current.saturating_add(CALENDAR_WINDOWS_AROUND);
    let mut words = first.to_string();
    for index in first..=last {
        let window = calendar.window(index);
        if index == first {
            words.push(' ');
            words.push_str(&window.start.to_string());
        }
        words.push(' ');
        words.push_str(&window.end.to_string());
    }
    words
}

/// A gcra limit as gcra_lean.lua takes it: `n` and `p` divided by their
/// gcd, and the burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lean {
    pub(crate) n: u64,
    pub(crate) p: u64,
    pub(crate) burst: u64,
}

/// Requests merged into cells, and each request's cell.
pub(crate) struct Plan {
    pub(crate) cells: Vec<Cell>,
    pub(crate) of_request: Vec<usize>,
}

impl Plan {
    /// Each request's decision, from each cell's.
    pub(crate) fn by_request<T: Copy>(&self, of_cells: Vec<T>) -> Vec<T> {
        if self
            .of_request
            .iter()
            .enumerate()
            .all(|(i, &cell)| i == cell)
        {
            // One cell per request, in order: the usual case.
            return of_cells;
        }
        self.of_request.iter().map(|&i| of_cells[i]).collect()
    }
}

/// The Redis key of the hash holding `key`'s states.
pub(crate) fn redis_key(prefix: &str, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 18 + key.len());
    write_redis_key(prefix, key, &mut out);
    out
}

/// Appends [`redis_key`]'s bytes to `out` (a sync batch writes each key
/// into its command this way, without a buffer of its own).
pub(crate) fn write_redis_key(prefix: &str, key: &[u8], out: &mut Vec<u8>) {
    // Fixed SipHash keys: every tollgate instance must place a key alike.
    let mut hasher = SipHasher13::new_with_keys(0x746f_6c6c_6761_7465, 0x7265_6469_735f_7461);
    hasher.write(key);
    let tag = hasher.finish();
    out.reserve(prefix.len() + 18 + key.len());
    out.extend_from_slice(prefix.as_bytes());
    // `{<tag as 16 lowercase hex digits>}`, written digit by digit: this
    // runs for every key of every decision.
    out.push(b'{');
    out.extend(
        (0..16)
            .rev()
            .map(|i| b"0123456789abcdef"[(tag >> (4 * i)) as usize & 0xf]),
    );
    out.push(b'}');
    out.extend_from_slice(key);
}

/// Plans `requests` at `cost` each, validating every merged cost; each
/// limit is prepared once by `limits`.
pub(crate) fn plan(
    prefix: &str,
    limits: &Limits,
    requests: &[LimitKey<'_>],
    cost: u64,
    instant: u64,
) -> Result<Plan, StoreError> {
    let mut cells: Vec<Cell> = Vec::with_capacity(requests.len());
    let mut of_request = Vec::with_capacity(requests.len());
    for request in requests {
        let limit = limits.get(request.limit)?;
        let key = redis_key(prefix, request.key);
        match cells
            .iter()
            .position(|c| c.key == key && c.limit.field == limit.field)
        {
            Some(i) => {
                cells[i].cost = cells[i].cost.saturating_add(cost);
                of_request.push(i);
            }
            None => {
                of_request.push(cells.len());
                let windows = request
                    .limit
                    .calendar
                    .map(|calendar| calendar_windows(&calendar, instant).into_boxed_str());
                cells.push(Cell {
                    key,
                    limit,
                    cost,
                    windows,
                });
            }
        }
    }
    for cell in &cells {
        cell.limit.algorithm.validate_cost(cell.cost)?;
    }
    Ok(Plan { cells, of_request })
}

/// A limit's identity as a hash field: every option, unambiguous; a ban's
/// three words at the end when it has one (a limit with a ban counts apart
/// from the same limit without, as in the memory store). The ban's state
/// lives in the field `ban <field>` of the same hash.
pub(crate) fn field(limit: &Limit) -> String {
    let option = |v: Option<u128>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    // A calendar limit's period is its calendar: `calendar_month:15:UTC`.
    let period = match limit.calendar {
        Some(c) => format!("{}:{}:{}", c.unit(), c.anchor(), c.zone_name()),
        None => limit.rate.period_nanos().to_string(),
    };
    let mut field = format!(
        "{} {} {} {} {} {}",
        limit.algorithm.as_str(),
        limit.rate.limit(),
        period,
        option(limit.burst.map(u128::from)),
        option(limit.step.map(|d| d.as_nanos())),
        option(limit.lease_ttl.map(|d| d.as_nanos())),
    );
    if let Some(words) = ban_words(limit) {
        field.push(' ');
        field.push_str(&words);
    }
    field
}

/// A ban's words: `ban <after> <within ns> <for ns>`.
fn ban_words(limit: &Limit) -> Option<String> {
    limit.ban.map(|ban| {
        format!(
            "ban {} {} {}",
            ban.after(),
            ban.within().as_nanos(),
            ban.duration().as_nanos()
        )
    })
}

/// The limit's parameters as the engines parse them: a ban's words first
/// when it has one (an engine that knows no bans then refuses the spec as
/// an unknown algorithm rather than deciding without the ban), then the
/// algorithm's.
pub(crate) fn spec(limit: &Limit) -> Result<String, StoreError> {
    let algorithm = tollgate_state::algorithm_spec(limit);
    Ok(match ban_words(limit) {
        Some(ban) => format!("{ban} {algorithm}"),
        None => algorithm,
    })
}

/// `limit` as gcra_lean.lua takes it, when that script can decide it: gcra
/// with `n < 2^20` and `burst * p <= 2^52` once `n` and `p` are divided by
/// their gcd, the bounds under which its plain Lua numbers stay exact (see
/// that file).
pub(crate) fn lean(limit: &Limit) -> Option<Lean> {
    // The lean script knows no bans.
    if limit.algorithm != AlgorithmName::Gcra || limit.ban.is_some() {
        return None;
    }
    let (n, p) = (limit.rate.limit(), limit.rate.period_nanos());
    let common = gcd(n, p);
    let (n, p) = (n / common, p / common);
    let burst = limit.burst.unwrap_or(limit.rate.limit());
    (n < 1 << 20 && u128::from(burst) * u128::from(p) <= 1 << 52).then_some(Lean { n, p, burst })
}

/// The greatest common divisor of two non-zero numbers.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{LimitError, Rate};

    #[test]
    fn keys_share_nothing_but_their_prefix_and_carry_a_brace_free_tag() {
        let a = redis_key("tg:", b"alice");
        let b = redis_key("tg:", b"{bob}");
        assert!(a.starts_with(b"tg:{") && a.ends_with(b"}alice"));
        assert_eq!(a.len(), 3 + 18 + 5);
        assert_ne!(a[..21], b[..21]);
        assert!(b[4..20].iter().all(u8::is_ascii_hexdigit));
        assert_eq!(redis_key("tg:", b"alice"), a, "stable");
        // The layout every version writes: the tag is the SipHash in hex.
        let mut hasher = SipHasher13::new_with_keys(0x746f_6c6c_6761_7465, 0x7265_6469_735f_7461);
        hasher.write(b"alice");
        assert_eq!(
            a,
            format!("tg:{{{:016x}}}alice", hasher.finish()).into_bytes()
        );
    }

    #[test]
    fn the_same_limit_on_the_same_key_is_one_cell_with_the_summed_cost() {
        let limit = Limit::new(AlgorithmName::Gcra, Rate::per_second(10).unwrap());
        let other = limit.with_burst(20);
        let requests = [
            LimitKey {
                limit: &limit,
                key: b"a",
            },
            LimitKey {
                limit: &other,
                key: b"a",
            },
            LimitKey {
                limit: &limit,
                key: b"a",
            },
            LimitKey {
                limit: &limit,
                key: b"b",
            },
        ];
        let limits = Limits::default();
        let plan = plan("", &limits, &requests, 3, 0).unwrap();
        assert_eq!(plan.of_request, [0, 1, 0, 2]);
        assert_eq!(plan.by_request(vec!['a', 'b', 'c']), ['a', 'b', 'a', 'c']);
        assert_eq!(plan.cells[0].cost, 6);
        assert_eq!(&*plan.cells[0].limit.spec, "gcra 1 100000000 10");
        assert_eq!(&*plan.cells[1].limit.field, "gcra 10 1000000000 20 - -");
        // A token bucket names the storage Limit::build picks for it.
        let narrow = Limit::new(AlgorithmName::TokenBucket, Rate::per_second(10).unwrap());
        assert_eq!(spec(&narrow).unwrap(), "token_bucket 1 100000000 10 narrow");
        let wide = Limit::new(AlgorithmName::TokenBucket, "1000003/w".parse().unwrap());
        assert_eq!(
            spec(&wide).unwrap(),
            "token_bucket 1000003 604800000000000 1000003 wide"
        );
        // A ban comes first in the spec and last in the field.
        let ban = tollgate_core::ban::Ban::new(
            3,
            std::time::Duration::from_secs(600),
            std::time::Duration::from_secs(3600),
        )
        .unwrap();
        let banned = limit.with_ban(ban);
        assert_eq!(
            spec(&banned).unwrap(),
            "ban 3 600000000000 3600000000000 gcra 1 100000000 10"
        );
        assert_eq!(
            field(&banned),
            "gcra 10 1000000000 - - - ban 3 600000000000 3600000000000"
        );
        let too_much = [LimitKey {
            limit: &limit,
            key: b"a",
        }; 2];
        assert!(matches!(
            super::plan("", &limits, &too_much, 6, 0),
            Err(StoreError::Limit(LimitError::CostTooLarge { cost: 12, .. }))
        ));
    }

    #[test]
    fn only_gcra_limits_within_the_lean_bounds_take_the_lean_script() {
        let gcra = |rate: &str| Limit::new(AlgorithmName::Gcra, rate.parse().unwrap());
        // n = 1, p = 10^8, burst 10.
        assert_eq!(
            lean(&gcra("10/s")),
            Some(Lean {
                n: 1,
                p: 100_000_000,
                burst: 10
            })
        );
        // n reduced below 2^20 by the gcd: 2,000,000/s is 1 per 500 ns.
        assert_eq!(lean(&gcra("2000000/s")).map(|l| (l.n, l.p)), Some((1, 500)));
        // n = 1,000,003 < 2^20 = 1,048,576; 1,048,583 (prime) is not.
        assert!(lean(&gcra("1000003/s")).is_some());
        assert!(lean(&gcra("1048583/s")).is_none());
        // burst * p: 2^52 at most.
        let day = gcra("1/d");
        assert!(lean(&day.with_burst(52)).is_some());
        assert!(lean(&day.with_burst(53)).is_none());
        let bucket = Limit::new(AlgorithmName::TokenBucket, "10/s".parse().unwrap());
        assert!(lean(&bucket).is_none());
    }
}

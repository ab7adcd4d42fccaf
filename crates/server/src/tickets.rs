//! [`Tickets`]: the checks admitted with `"settle": true` that wait for
//! their actual cost (`POST /v1/settle`), in a bounded table with a
//! lifetime.
//!
//! A ticket remembers what the check counted — each limit and key, the
//! estimate and the instant of the admission — so that a settle charges or
//! refunds exactly there, whatever the rules say by then. It is settled
//! once: a settled ticket stays in the table as such until its lifetime
//! ends, so a second settle is told so rather than "unknown". A ticket
//! never settled expires with its lifetime and the estimate stands.
//!
//! Time here is the store's (the instants of the checks and settles), so
//! the lifetime runs on the clock the limits run on, and a test moves it
//! as it moves the limits.
//!
//! This module owns the table and the ticket's text form; it neither asks
//! a store nor answers HTTP (`routes::settle` does).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

use parking_lot::Mutex;
use tollgate_core::time::duration_to_nanos;
use tollgate_core::Limit;

/// The table's capacity when none is configured.
pub const DEFAULT_CAPACITY: usize = 100_000;
/// A ticket's lifetime when none is configured.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// A ticket's id: 128 random bits, written as 32 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TicketId(u128);

impl TicketId {
    /// A new random id, from the operating system's generator.
    fn random() -> Result<TicketId, getrandom::Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        Ok(TicketId(u128::from_le_bytes(bytes)))
    }

    /// The id `text` writes: exactly 32 hex digits (either case).
    pub fn parse(text: &str) -> Option<TicketId> {
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(text, 16).ok().map(TicketId)
    }
}

impl fmt::Display for TicketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// One limit a check counted, to be settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charged {
    /// The limit's name in the answer (its header name).
    pub name: String,
    /// The limit.
    pub limit: Limit,
    /// The store key it counted under.
    pub key: Vec<u8>,
}

/// What a check counted, waiting for its actual cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    /// The instant the check was decided at (ns since the epoch, store
    /// time).
    pub admitted_at: u64,
    /// The cost the check counted.
    pub estimate: u64,
    /// The limits it counted in, in the answer's order.
    pub limits: Vec<Charged>,
}

/// Why a ticket could not be taken for settling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Never issued, or its lifetime ended (then the estimate stood).
    Unknown,
    /// Settled already.
    Settled,
}

/// Why a ticket could not be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Every place holds a ticket still alive; the first frees up after
    /// this long.
    Table(Duration),
    /// The operating system gave no random bytes.
    Random,
}

/// The bounded table of tickets. Cheap to share behind an `Arc`; every
/// operation takes one short lock.
#[derive(Debug)]
pub struct Tickets {
    capacity: usize,
    ttl: u64,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    entries: HashMap<TicketId, Entry>,
    /// Ids in the order they were issued, with the instant each expires
    /// at: the front expires first (store time moves forward).
    order: VecDeque<(u64, TicketId)>,
    /// Places promised to checks under way.
    reserved: usize,
}

#[derive(Debug)]
enum Entry {
    Open { ticket: Ticket, expires_at: u64 },
    Settled { expires_at: u64 },
}

impl Entry {
    fn expires_at(&self) -> u64 {
        match self {
            Entry::Open { expires_at, .. } | Entry::Settled { expires_at } => *expires_at,
        }
    }
}

impl Tickets {
    /// A table of at most `capacity` tickets (open or settled), each
    /// alive for `ttl` from its check's instant.
    pub fn new(capacity: usize, ttl: Duration) -> Tickets {
        Tickets {
            capacity,
            ttl: duration_to_nanos(ttl),
            table: Mutex::new(Table::default()),
        }
    }

    /// The lifetime of a ticket.
    pub fn ttl(&self) -> Duration {
        Duration::from_nanos(self.ttl)
    }

    /// How many tickets the table holds (open or settled, expired ones not
    /// yet dropped included).
    pub fn len(&self) -> usize {
        self.table.lock().entries.len()
    }

    /// Whether the table holds no ticket.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Promises a place for a ticket to a check decided at `now`, before it
    /// counts anything, so that a check is never counted without the
    /// ticket it asked for. Tickets expired at `now` are dropped first.
    pub fn reserve(&self, now: u64) -> Result<Place<'_>, Full> {
        let mut table = self.table.lock();
        table.drop_expired(now);
        if table.entries.len() + table.reserved >= self.capacity {
            let first = table.order.front().map_or(0, |&(at, _)| at);
            return Err(Full::Table(Duration::from_nanos(first.saturating_sub(now))));
        }
        let id = TicketId::random().map_err(|_| Full::Random)?;
        table.reserved += 1;
        Ok(Place {
            tickets: self,
            id,
            used: false,
        })
    }

    /// Takes the open ticket `id` for settling at `now`, marking it
    /// settled: no second settle takes it.
    pub fn take(&self, id: TicketId, now: u64) -> Result<Ticket, Refusal> {
        let mut table = self.table.lock();
        let Some(entry) = table.entries.get_mut(&id) else {
            return Err(Refusal::Unknown);
        };
        let expires_at = entry.expires_at();
        if expires_at <= now {
            table.entries.remove(&id);
            return Err(Refusal::Unknown);
        }
        match std::mem::replace(entry, Entry::Settled { expires_at }) {
            Entry::Open { ticket, .. } => Ok(ticket),
            Entry::Settled { .. } => Err(Refusal::Settled),
        }
    }

    /// Opens `id` again with what is left of `ticket` to settle (a store
    /// failed part way): the client may retry.
    pub fn reopen(&self, id: TicketId, ticket: Ticket) {
        let mut table = self.table.lock();
        if let Some(entry) = table.entries.get_mut(&id) {
            let expires_at = entry.expires_at();
            *entry = Entry::Open { ticket, expires_at };
        }
    }

    fn issue(&self, id: TicketId, ticket: Ticket) {
        let expires_at = ticket.admitted_at.saturating_add(self.ttl);
        let mut table = self.table.lock();
        table.reserved = table.reserved.saturating_sub(1);
        table.order.push_back((expires_at, id));
        table.entries.insert(id, Entry::Open { ticket, expires_at });
    }
}

impl Table {
    fn drop_expired(&mut self, now: u64) {
        while let Some(&(expires_at, id)) = self.order.front() {
            if expires_at > now {
                break;
            }
            self.order.pop_front();
            // The entry may be gone already (taken after it expired).
            if self
                .entries
                .get(&id)
                .is_some_and(|e| e.expires_at() == expires_at)
            {
                self.entries.remove(&id);
            }
        }
    }
}

/// A place promised by [`Tickets::reserve`]: [`issue`](Place::issue) fills
/// it; dropped unused, it is given back.
#[derive(Debug)]
pub struct Place<'t> {
    tickets: &'t Tickets,
    id: TicketId,
    used: bool,
}

impl Place<'_> {
    /// Puts `ticket` in the promised place and returns its id.
    pub fn issue(mut self, ticket: Ticket) -> TicketId {
        self.used = true;
        self.tickets.issue(self.id, ticket);
        self.id
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if !self.used {
            let mut table = self.tickets.table.lock();
            table.reserved = table.reserved.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use tollgate_core::{AlgorithmName, Rate};

    use super::*;

    const S: u64 = 1_000_000_000;

    fn ticket(at: u64) -> Ticket {
        Ticket {
            admitted_at: at,
            estimate: 5,
            limits: vec![Charged {
                name: "l".into(),
                limit: Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(10).unwrap()),
                key: b"k".to_vec(),
            }],
        }
    }

    #[test]
    fn ids_are_32_hex_digits_and_read_back() {
        let id = TicketId::random().unwrap();
        let text = id.to_string();
        assert_eq!(text.len(), 32);
        assert_eq!(TicketId::parse(&text), Some(id));
        assert_eq!(TicketId::parse(&text.to_uppercase()), Some(id));
        assert_ne!(TicketId::random().unwrap(), id);
        for bad in [
            "",
            "abc",
            &"g".repeat(32),
            &"0".repeat(33),
            "+0000000000000000000000000000001",
        ] {
            assert_eq!(TicketId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_ticket_is_taken_once_and_then_reported_settled_until_it_expires() {
        let tickets = Tickets::new(4, Duration::from_secs(10));
        let id = tickets.reserve(S).unwrap().issue(ticket(S));
        assert_eq!(tickets.take(id, 2 * S), Ok(ticket(S)));
        assert_eq!(tickets.take(id, 3 * S), Err(Refusal::Settled));
        assert_eq!(tickets.take(id, 11 * S), Err(Refusal::Unknown));
        let other = tickets.reserve(S).unwrap().issue(ticket(S));
        assert_eq!(tickets.take(other, 11 * S), Err(Refusal::Unknown));
        assert!(tickets.is_empty());
    }

    #[test]
    fn a_full_table_refuses_until_the_first_ticket_expires() {
        let tickets = Tickets::new(2, Duration::from_secs(10));
        tickets.reserve(0).unwrap().issue(ticket(0));
        let held = tickets.reserve(S).unwrap();
        assert_eq!(
            tickets.reserve(2 * S).unwrap_err(),
            Full::Table(Duration::from_secs(8))
        );
        drop(held);
        let second = tickets.reserve(2 * S).unwrap().issue(ticket(2 * S));
        assert!(tickets.reserve(9 * S).is_err());
        // The first expires at 10 s; a settled ticket keeps its place.
        tickets.take(second, 3 * S).unwrap();
        tickets.reserve(10 * S).unwrap().issue(ticket(10 * S));
        assert!(tickets.reserve(11 * S).is_err());
        assert!(tickets.reserve(12 * S).is_ok());
    }

    #[test]
    fn a_reopened_ticket_can_be_taken_again() {
        let tickets = Tickets::new(2, Duration::from_secs(10));
        let id = tickets.reserve(0).unwrap().issue(ticket(0));
        let taken = tickets.take(id, S).unwrap();
        tickets.reopen(id, taken.clone());
        assert_eq!(tickets.take(id, S), Ok(taken));
    }
}

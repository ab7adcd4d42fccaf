//! Runtime overrides: limits set for one exact descriptor of a domain
//! while the service runs (`PUT /v1/overrides/{domain}`), taking
//! precedence over the rules files for that descriptor only.
//!
//! This module owns [`OverrideTable`], the overrides in force in one
//! process: validating an override's limit (the fields of a rules file's
//! `rate_limit` / `rate_limits`, built once with the same parser), finding
//! the overrides of a request's descriptors on the hot path, listing them
//! in a stable order for paging, and their byte form for the memory
//! store's snapshot. It does no I/O: where overrides are kept (a snapshot
//! file, Redis) is the server's and the binary's business.
//!
//! An override's descriptor is exact: its entries, keys and values, in
//! order, must equal the request descriptor's. Overrides that give the
//! same limit text in one domain share one [`Rule`], so a million tenants
//! on a few tiers cost a key and a pointer each. Every override of a
//! domain counts in one metric label, `DOMAIN._override_`.
//!
//! A check takes one atomic load when no domain has an override, a lock
//! read and one lookup of its domain when its own has none, and otherwise
//! per descriptor one hash of its entries and one word of the domain's
//! filter, then a probe of its table only when the filter says the
//! descriptor may have an override, whatever the number of overrides
//! (docs/benchmarks.md measures a million). A caller with other work to
//! do first hands it to [`OverrideTable::find_while`], which asks for the
//! filter's words, does that work while they arrive, and reads them after.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::error::RulesError;
use crate::parse::parse_override;
use crate::resolve::Descriptor;
use crate::rule::{write_entries, KeyBuf, Rule};

/// The tables' maps: hashed with foldhash, seeded at random per map (see
/// the root Cargo.toml).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A probe's key, written on the stack: no allocation per check. A
/// descriptor whose entries do not fit is looked up through a `Vec`.
struct ProbeKey {
    bytes: [u8; 128],
    len: usize,
    overflowed: bool,
}

impl ProbeKey {
    /// The key `descriptor`'s entries make ([`entries_key`]).
    #[inline]
    fn of<D: Descriptor + ?Sized>(descriptor: &D) -> ProbeKey {
        let mut key = ProbeKey {
            bytes: [0; 128],
            len: 0,
            overflowed: false,
        };
        write_entries(descriptor, &mut key);
        key
    }

    /// The key, or `None` when it did not fit.
    #[inline]
    fn get(&self) -> Option<&[u8]> {
        (!self.overflowed).then(|| &self.bytes[..self.len])
    }
}

impl KeyBuf for ProbeKey {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        match self.bytes.get_mut(self.len..end) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len = end;
            }
            None => self.overflowed = true,
        }
    }
}

/// One override's limit: the text it was given in and the rule built from
/// it. Shared by every override of a domain with the same text.
#[derive(Debug)]
pub struct OverrideSpec {
    text: Arc<str>,
    rule: Rule,
}

impl OverrideSpec {
    /// The limit as given (a JSON or YAML mapping with `rate_limit` or
    /// `rate_limits`, and optionally `shadow_mode` and `quota_mode`).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The rule it applies.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }
}

/// One override, as listed.
#[derive(Debug, Clone)]
pub struct Override {
    /// The exact descriptor's entries, outermost first.
    pub entries: Vec<(String, String)>,
    /// Its limit.
    pub spec: Arc<OverrideSpec>,
    /// Its key in the listing's order: what a page's cursor holds.
    pub key: Vec<u8>,
}

/// The overrides found for a request's descriptors, one slot per
/// descriptor. Kept beside the request's plan, which borrows their rules;
/// empty (no allocation) when none applies.
#[derive(Debug, Default, Clone)]
pub struct Found(Vec<Option<Arc<OverrideSpec>>>);

impl Found {
    /// No override for any descriptor.
    pub const EMPTY: Found = Found(Vec::new());

    /// The override rule of descriptor `index`, if it has one.
    pub fn rule(&self, index: usize) -> Option<&Rule> {
        self.0.get(index)?.as_deref().map(OverrideSpec::rule)
    }

    /// Whether no descriptor has an override.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// How many descriptors of a request [`OverrideTable::find_while`]
/// hashes ahead of its work (the others are hashed after it).
const PREFETCHED: usize = 4;

/// No override: what a resolution without overrides borrows.
pub(crate) static NO_OVERRIDES: Found = Found::EMPTY;

/// A filter in front of a domain's table of overrides (a Bloom filter
/// blocked in 64-bit words): a descriptor it does not hold has no
/// override, and its check skips the table's probe. One word, one cache
/// line, about 8 bits per override: half the table's control bytes, and
/// a check that has no override reads nothing else (the table's probe
/// reads a 16-byte group of control bytes, across two lines a quarter of
/// the time, and the slots whose tag matches). It answers "maybe" for
/// about 3 % of the descriptors with none, which then probe the table.
///
/// It is never told of a removal; it is built again from the table when
/// as many overrides have been removed since it last was as the table
/// holds, and when the table outgrows it (at most doubling it each time).
#[derive(Debug, Default)]
struct Filter {
    /// A power of two of words, or none before the first override.
    words: Vec<u64>,
    /// Overrides removed since it was built.
    stale: usize,
}

/// The filter's bits per override it is sized for.
const FILTER_BITS: usize = 8;

impl Filter {
    /// A filter sized for `n` overrides, holding none.
    fn sized(n: usize) -> Filter {
        let words = (n.max(64) * FILTER_BITS / 64).next_power_of_two();
        Filter {
            words: vec![0; words],
            stale: 0,
        }
    }

    /// How many overrides it is sized for.
    fn capacity(&self) -> usize {
        self.words.len() * 64 / FILTER_BITS
    }

    /// The word and the three bits `hash` sets.
    #[inline]
    fn place(&self, hash: u64) -> (usize, u64) {
        // The index takes the low bits, the three bits the top 18.
        let index = (hash as usize) & (self.words.len().wrapping_sub(1));
        let bits = (1 << ((hash >> 46) & 63)) | (1 << ((hash >> 52) & 63)) | (1 << (hash >> 58));
        (index, bits)
    }

    fn insert(&mut self, hash: u64) {
        let (index, bits) = self.place(hash);
        if let Some(word) = self.words.get_mut(index) {
            *word |= bits;
        }
    }

    /// Asks the CPU to fetch the word `hash` reads into its cache, without
    /// waiting for it: a check reads it after other work (see
    /// [`OverrideTable::find_while`]). Nothing on other architectures.
    #[inline]
    fn prefetch(&self, hash: u64) {
        let (index, _) = self.place(hash);
        if let Some(word) = self.words.get(index) {
            #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
            safe_arch::prefetch_t0(word);
            #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
            let _ = word;
        }
    }

    /// Whether an override with this hash may be in the table.
    #[inline]
    fn may_hold(&self, hash: u64) -> bool {
        let (index, bits) = self.place(hash);
        self.words
            .get(index)
            .is_some_and(|word| word & bits == bits)
    }
}

/// One domain's overrides.
#[derive(Debug, Default)]
struct DomainOverrides {
    by_key: HashMap<Arc<[u8]>, Arc<OverrideSpec>>,
    ordered: BTreeSet<Arc<[u8]>>,
    /// Each distinct limit text and how many overrides use it.
    specs: HashMap<Arc<str>, (Arc<OverrideSpec>, usize)>,
    /// Every key of `by_key`, hashed with its hasher, and maybe others.
    filter: Filter,
}

impl DomainOverrides {
    fn intern(
        &mut self,
        domain: &str,
        text: &str,
        label: &str,
    ) -> Result<Arc<OverrideSpec>, RulesError> {
        if let Some((spec, _)) = self.specs.get(text) {
            return Ok(Arc::clone(spec));
        }
        Ok(Arc::new(OverrideSpec {
            text: Arc::from(text),
            rule: parse_override(domain, text, label)?,
        }))
    }

    /// Puts `spec` under `key`; whether an override was replaced.
    fn put(&mut self, key: Arc<[u8]>, spec: Arc<OverrideSpec>) -> bool {
        self.specs
            .entry(Arc::clone(&spec.text))
            .or_insert_with(|| (Arc::clone(&spec), 0))
            .1 += 1;
        let old = self.by_key.insert(Arc::clone(&key), spec);
        if let Some(old) = &old {
            self.release(old);
        } else {
            if self.by_key.len() > self.filter.capacity() {
                self.rebuild_filter();
            } else {
                self.filter.insert(self.key_hash(&key));
            }
            self.ordered.insert(key);
        }
        old.is_some()
    }

    fn remove(&mut self, key: &[u8]) -> bool {
        let Some(old) = self.by_key.remove(key) else {
            return false;
        };
        self.ordered.remove(key);
        self.release(&old);
        self.filter.stale += 1;
        if self.filter.stale > self.by_key.len() {
            self.rebuild_filter();
        }
        true
    }

    /// Builds the filter again from the table, sized for twice its
    /// overrides.
    fn rebuild_filter(&mut self) {
        let mut filter = Filter::sized(self.by_key.len().saturating_mul(2));
        for key in self.by_key.keys() {
            filter.insert(self.key_hash(key));
        }
        self.filter = filter;
    }

    /// The filter's hash of a descriptor: each entry's key and value fed
    /// to the table's hasher with its length, as they are, so that a check
    /// hashes a request's descriptor without writing its key
    /// ([`entries_key`]) first. [`key_hash`](Self::key_hash) gives the
    /// same for the key an override is kept under.
    #[inline]
    fn descriptor_hash<D: Descriptor + ?Sized>(&self, descriptor: &D) -> u64 {
        let mut hasher = self.by_key.hasher().build_hasher();
        for i in 0..descriptor.len() {
            let (key, value) = descriptor.entry(i);
            hash_part(&mut hasher, key.as_bytes());
            hash_part(&mut hasher, value.as_bytes());
        }
        hasher.finish()
    }

    /// [`descriptor_hash`](Self::descriptor_hash) of the descriptor whose
    /// key is `key`.
    fn key_hash(&self, key: &[u8]) -> u64 {
        let mut hasher = self.by_key.hasher().build_hasher();
        let mut rest = key;
        while let Some(part) = split_part(&mut rest) {
            hash_part(&mut hasher, part);
        }
        hasher.finish()
    }

    /// The overrides of `descriptors`, whose first ones' filter hashes are
    /// `hashed`.
    fn find_all<D: Descriptor>(&self, descriptors: &[D], hashed: &[u64]) -> Found {
        let mut found = Vec::new();
        for (i, descriptor) in descriptors.iter().enumerate() {
            let hash = match hashed.get(i) {
                Some(&hash) => hash,
                None => self.descriptor_hash(descriptor),
            };
            if !self.filter.may_hold(hash) {
                continue;
            }
            let probe = ProbeKey::of(descriptor);
            let spilled;
            let key = match probe.get() {
                Some(key) => key,
                None => {
                    spilled = entries_key_of(descriptor);
                    &spilled
                }
            };
            if let Some(spec) = self.by_key.get(key) {
                if found.is_empty() {
                    found.resize(descriptors.len(), None);
                }
                found[i] = Some(Arc::clone(spec));
            }
        }
        Found(found)
    }

    fn release(&mut self, spec: &OverrideSpec) {
        if let Some((_, uses)) = self.specs.get_mut(&spec.text) {
            *uses -= 1;
            if *uses == 0 {
                self.specs.remove(&spec.text);
            }
        }
    }
}

/// The overrides in force: every domain's, shared by every request.
///
/// ```
/// use tollgate_rules::overrides::OverrideTable;
/// use tollgate_rules::RuleSet;
///
/// let rules = RuleSet::from_yaml(
///     "domain: api\n\
///      descriptors:\n\
///      \x20 - key: tenant\n\
///      \x20   rate_limit: {unit: minute, requests_per_unit: 60}\n",
///     "api.yaml",
/// )
/// .unwrap();
/// let overrides = OverrideTable::new();
/// let acme = vec![("tenant".to_string(), "acme".to_string())];
/// overrides
///     .put("api", &acme, r#"{"rate_limit": {"unit": "minute", "requests_per_unit": 6000}}"#)
///     .unwrap();
///
/// let request = [vec![("tenant", "acme")], vec![("tenant", "globex")]];
/// let found = overrides.find("api", &request);
/// let resolved = rules.resolve_with("api", &request, &found).unwrap();
/// assert_eq!(resolved[0].unwrap().rule().limits()[0].rate.to_string(), "6000/m");
/// assert_eq!(resolved[1].unwrap().rule().limits()[0].rate.to_string(), "60/m");
/// ```
#[derive(Debug, Default)]
pub struct OverrideTable {
    domains: RwLock<HashMap<String, DomainOverrides>>,
    total: AtomicUsize,
    version: AtomicU64,
}

/// The label an override's limit errors name as their file.
pub const ERROR_LABEL: &str = "override";

impl OverrideTable {
    /// An empty table.
    pub fn new() -> OverrideTable {
        OverrideTable::default()
    }

    /// Checks an override's limit text for `domain` without putting it in
    /// force: the error a [`put`](OverrideTable::put) of it would give.
    pub fn validate(domain: &str, text: &str) -> Result<(), RulesError> {
        parse_override(domain, text, ERROR_LABEL).map(|_| ())
    }

    /// Sets the override of `domain`'s exact descriptor `entries` to the
    /// limit `text` (see [`OverrideSpec::text`]), replacing any it had;
    /// whether one was replaced. An invalid limit changes nothing.
    pub fn put<K: AsRef<str>, V: AsRef<str>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
        text: &str,
    ) -> Result<bool, RulesError> {
        let key: Arc<[u8]> = Arc::from(entries_key(entries));
        let mut domains = self.domains.write().unwrap_or_else(PoisonError::into_inner);
        let table = domains.entry(domain.to_string()).or_default();
        let spec = match table.intern(domain, text, ERROR_LABEL) {
            Ok(spec) => spec,
            Err(e) => {
                if table.by_key.is_empty() {
                    domains.remove(domain);
                }
                return Err(e);
            }
        };
        let replaced = table.put(key, spec);
        if !replaced {
            self.total.fetch_add(1, Ordering::Release);
        }
        self.version.fetch_add(1, Ordering::Release);
        Ok(replaced)
    }

    /// Removes the override of `domain`'s exact descriptor `entries`;
    /// whether there was one.
    pub fn remove<K: AsRef<str>, V: AsRef<str>>(&self, domain: &str, entries: &[(K, V)]) -> bool {
        let key = entries_key(entries);
        let mut domains = self.domains.write().unwrap_or_else(PoisonError::into_inner);
        let Some(table) = domains.get_mut(domain) else {
            return false;
        };
        let removed = table.remove(&key);
        if table.by_key.is_empty() {
            domains.remove(domain);
        }
        if removed {
            self.total.fetch_sub(1, Ordering::Release);
            self.version.fetch_add(1, Ordering::Release);
        }
        removed
    }

    /// [`put`](OverrideTable::put) by the descriptor's key ([`entries_key`]),
    /// as a shared store hands it over; a key that is not one is refused.
    pub fn put_key(&self, domain: &str, key: &[u8], text: &str) -> Result<bool, RulesError> {
        let entries = parse_entries(key).ok_or_else(not_a_key)?;
        self.put(domain, &entries, text)
    }

    /// [`remove`](OverrideTable::remove) by the descriptor's key.
    pub fn remove_key(&self, domain: &str, key: &[u8]) -> bool {
        parse_entries(key).is_some_and(|entries| self.remove(domain, &entries))
    }

    /// Replaces every override of `domain` with `overrides` (entries key
    /// as [`entries_key`] writes it, limit text), for a store that hands
    /// back a whole domain at once (a snapshot, a resynchronisation with
    /// Redis). An override whose key or limit is not valid is left out,
    /// and its error returned.
    pub fn replace_domain(
        &self,
        domain: &str,
        overrides: impl IntoIterator<Item = (Vec<u8>, String)>,
    ) -> Vec<RulesError> {
        let mut table = DomainOverrides::default();
        let mut errors = Vec::new();
        for (key, text) in overrides {
            if parse_entries(&key).is_none() {
                errors.push(not_a_key());
                continue;
            }
            match table.intern(domain, &text, ERROR_LABEL) {
                Ok(spec) => {
                    table.put(Arc::from(key), spec);
                }
                Err(e) => errors.push(e),
            }
        }
        let added = table.by_key.len();
        let mut domains = self.domains.write().unwrap_or_else(PoisonError::into_inner);
        let removed = match table.by_key.is_empty() {
            true => domains.remove(domain),
            false => domains.insert(domain.to_string(), table),
        }
        .map_or(0, |old| old.by_key.len());
        self.total.fetch_add(added, Ordering::Release);
        self.total.fetch_sub(removed, Ordering::Release);
        self.version.fetch_add(1, Ordering::Release);
        errors
    }

    /// The overrides of a request's descriptors in `domain`. Takes one
    /// atomic load when no domain has an override.
    pub fn find<D: Descriptor>(&self, domain: &str, descriptors: &[D]) -> Found {
        self.find_while(domain, descriptors, || ()).0
    }

    /// [`find`](Self::find), with `work` done between asking the CPU for
    /// the filter's words and reading them. With a million overrides
    /// those words are seldom in the cache, and a check that reads one at
    /// once waits for memory (most of what the overrides cost a check that
    /// has none, docs/benchmarks.md); a caller with other work to do first
    /// (the plan the rules files give) does it here, and the words are in
    /// the cache when it is done. Takes one atomic load when no domain has
    /// an override.
    ///
    /// `work` runs under this table's read lock (nothing can change the
    /// overrides between the two halves), so it must not use this table:
    /// a writer waiting for the lock would block it for good.
    pub fn find_while<D: Descriptor, R>(
        &self,
        domain: &str,
        descriptors: &[D],
        work: impl FnOnce() -> R,
    ) -> (Found, R) {
        if self.total.load(Ordering::Acquire) == 0 {
            return (Found::default(), work());
        }
        let domains = self.domains.read().unwrap_or_else(PoisonError::into_inner);
        let Some(table) = domains.get(domain) else {
            drop(domains);
            return (Found::default(), work());
        };
        let mut hashes = [0; PREFETCHED];
        let ahead = descriptors.len().min(PREFETCHED);
        for (slot, descriptor) in hashes.iter_mut().zip(descriptors) {
            *slot = table.descriptor_hash(descriptor);
            table.filter.prefetch(*slot);
        }
        let done = work();
        (table.find_all(descriptors, &hashes[..ahead]), done)
    }

    /// The override of `domain`'s exact descriptor `entries`, if any.
    pub fn get<K: AsRef<str>, V: AsRef<str>>(
        &self,
        domain: &str,
        entries: &[(K, V)],
    ) -> Option<Arc<OverrideSpec>> {
        let key = entries_key(entries);
        let domains = self.domains.read().unwrap_or_else(PoisonError::into_inner);
        domains.get(domain)?.by_key.get(key.as_slice()).cloned()
    }

    /// Up to `limit` overrides of `domain` in key order, starting after
    /// the key `after` (a previous page's last [`Override::key`]), and
    /// whether more follow. Overrides put or removed between two pages
    /// never make another one appear twice or go missing.
    pub fn page(&self, domain: &str, after: Option<&[u8]>, limit: usize) -> (Vec<Override>, bool) {
        use std::ops::Bound;
        let domains = self.domains.read().unwrap_or_else(PoisonError::into_inner);
        let Some(table) = domains.get(domain) else {
            return (Vec::new(), false);
        };
        let start = match after {
            Some(after) => Bound::Excluded(after),
            None => Bound::Unbounded,
        };
        let mut keys = table
            .ordered
            .range::<[u8], _>((start, Bound::Unbounded))
            .peekable();
        let mut out = Vec::new();
        while out.len() < limit {
            let Some(key) = keys.next() else { break };
            let (Some(entries), Some(spec)) = (parse_entries(key), table.by_key.get(key)) else {
                continue;
            };
            out.push(Override {
                entries,
                spec: Arc::clone(spec),
                key: key.to_vec(),
            });
        }
        let more = keys.peek().is_some();
        (out, more)
    }

    /// The number of overrides of `domain`.
    pub fn count(&self, domain: &str) -> usize {
        let domains = self.domains.read().unwrap_or_else(PoisonError::into_inner);
        domains.get(domain).map_or(0, |t| t.by_key.len())
    }

    /// The number of overrides of every domain.
    pub fn len(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Whether there is no override at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each domain that has overrides, with their number, sorted by name.
    pub fn domains(&self) -> Vec<(String, usize)> {
        let domains = self.domains.read().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = domains
            .iter()
            .map(|(name, t)| (name.clone(), t.by_key.len()))
            .collect();
        out.sort();
        out
    }

    /// A number that changes whenever the table does: a saver compares it
    /// with the one it last saved.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Every override as bytes (see [`OverrideTable::from_bytes`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        let domains = self.domains.read().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<&String> = domains.keys().collect();
        names.sort();
        let mut out = MAGIC.to_vec();
        put_u64(&mut out, FORMAT_VERSION);
        put_u64(&mut out, names.len() as u64);
        for name in names {
            let table = &domains[name];
            put_bytes(&mut out, name.as_bytes());
            put_u64(&mut out, table.by_key.len() as u64);
            for key in &table.ordered {
                if let Some(spec) = table.by_key.get(key) {
                    put_bytes(&mut out, key);
                    put_bytes(&mut out, spec.text.as_bytes());
                }
            }
        }
        out
    }

    /// The table [`to_bytes`](OverrideTable::to_bytes) wrote. Every limit
    /// is validated again (a newer build may have dropped an option); the
    /// first bad one fails the whole load, with its domain named.
    pub fn from_bytes(bytes: &[u8]) -> Result<OverrideTable, DecodeError> {
        let rest = bytes.strip_prefix(MAGIC).ok_or(DecodeError::NotOverrides)?;
        let mut reader = Reader { rest };
        let version = reader.u64()?;
        if version != FORMAT_VERSION {
            return Err(DecodeError::Version(version));
        }
        let table = OverrideTable::new();
        for _ in 0..reader.u64()? {
            let domain = reader.text()?;
            let count = reader.u64()?;
            let mut entries = Vec::new();
            for _ in 0..count {
                let key = reader.bytes()?.to_vec();
                parse_entries(&key).ok_or(DecodeError::Malformed)?;
                entries.push((key, reader.text()?));
            }
            if let Some(e) = table.replace_domain(&domain, entries).first() {
                return Err(DecodeError::Invalid {
                    domain,
                    reason: e.to_string(),
                });
            }
        }
        if !reader.rest.is_empty() {
            return Err(DecodeError::Malformed);
        }
        Ok(table)
    }
}

fn not_a_key() -> RulesError {
    RulesError::file(
        ERROR_LABEL,
        crate::error::ErrorKind::Io("not an override's descriptor key".into()),
    )
}

/// Why saved overrides could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not tollgate's overrides at all.
    #[error("not a tollgate overrides file (bad magic bytes)")]
    NotOverrides,
    /// Written by another version of the format.
    #[error(
        "overrides format version {0} is not supported (this build reads version {FORMAT_VERSION})"
    )]
    Version(u64),
    /// Truncated or damaged.
    #[error("the overrides file is truncated or damaged")]
    Malformed,
    /// A limit this build does not accept.
    #[error("an override of domain {domain:?} is not valid: {reason}")]
    Invalid {
        /// Its domain.
        domain: String,
        /// Why.
        reason: String,
    },
}

const MAGIC: &[u8] = b"TOLLGATE-OVERRIDES\n";
const FORMAT_VERSION: u64 = 1;

fn put_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(&n.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u64(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

struct Reader<'b> {
    rest: &'b [u8],
}

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Malformed);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut word = [0u8; 8];
        word.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(word))
    }

    fn bytes(&mut self) -> Result<&'b [u8], DecodeError> {
        let n = usize::try_from(self.u64()?).map_err(|_| DecodeError::Malformed)?;
        self.take(n)
    }

    fn text(&mut self) -> Result<String, DecodeError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| DecodeError::Malformed)
    }
}

/// An exact descriptor as a key: each entry's key and value,
/// length-prefixed (`len:bytes`), in order. Distinct descriptors give
/// distinct keys; the listing is sorted by it.
pub fn entries_key<K: AsRef<str>, V: AsRef<str>>(entries: &[(K, V)]) -> Vec<u8> {
    entries_key_of(entries)
}

fn entries_key_of<D: Descriptor + ?Sized>(descriptor: &D) -> Vec<u8> {
    let mut key = Vec::with_capacity(64);
    write_entries(descriptor, &mut key);
    key
}

/// The entries an [`entries_key`] holds; `None` when `key` is not one.
pub fn parse_entries(key: &[u8]) -> Option<Vec<(String, String)>> {
    let mut rest = key;
    let mut entries = Vec::new();
    loop {
        let key = take_part(&mut rest)?;
        let value = take_part(&mut rest)?;
        entries.push((key, value));
        if rest.is_empty() {
            return Some(entries);
        }
    }
}

/// One `len:bytes` part's bytes off the front of `rest`, unchecked
/// beyond what it takes to split it (a key in the table was checked when
/// it was put); `None` at the end or where it does not split.
fn split_part<'k>(rest: &mut &'k [u8]) -> Option<&'k [u8]> {
    let colon = rest.iter().position(|&b| b == b':')?;
    let mut len = 0usize;
    for &digit in &rest[..colon] {
        len = len
            .checked_mul(10)?
            .checked_add(usize::from(digit.wrapping_sub(b'0')))?;
    }
    let part = rest.get(colon + 1..colon.checked_add(1)?.checked_add(len)?)?;
    *rest = &rest[colon + 1 + len..];
    Some(part)
}

/// Feeds one part of a descriptor to the filter's hasher: its length,
/// then its bytes (so that parts cannot run into each other).
#[inline]
fn hash_part(hasher: &mut impl Hasher, part: &[u8]) {
    hasher.write_usize(part.len());
    hasher.write(part);
}

/// One `len:bytes` part of UTF-8 off the front of `rest` (no leading
/// zeros in `len`).
fn take_part(rest: &mut &[u8]) -> Option<String> {
    let colon = rest.iter().position(|&b| b == b':')?;
    let digits = std::str::from_utf8(&rest[..colon]).ok()?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !(digits.len() > 1 && digits.starts_with('0'));
    if !canonical {
        return None;
    }
    let len: usize = digits.parse().ok()?;
    let body = rest.get(colon + 1..colon.checked_add(1)?.checked_add(len)?)?;
    let text = String::from_utf8(body.to_vec()).ok()?;
    *rest = &rest[colon + 1 + len..];
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIER: &str = r#"{"rate_limit": {"unit": "second", "requests_per_unit": 100}}"#;

    fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keys_round_trip_and_bad_keys_are_refused() {
        let e = entries(&[("a:b", "1"), ("", "x|y")]);
        assert_eq!(parse_entries(&entries_key(&e)), Some(e));
        for bad in [
            &b""[..],
            b"1:a",
            b"1:a2:b",
            b"01:a1:b",
            b"x:a1:b",
            b"1:a1:bb",
            b"+1:a1:b",
        ] {
            assert_eq!(parse_entries(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn same_limits_share_one_rule_and_counts_follow_puts_and_removes() {
        let table = OverrideTable::new();
        for n in 0..3 {
            let e = entries(&[("tenant", &n.to_string())]);
            assert!(!table.put("api", &e, TIER).unwrap());
        }
        let a = table.get("api", &entries(&[("tenant", "0")])).unwrap();
        let b = table.get("api", &entries(&[("tenant", "2")])).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(a.rule().is_override());
        assert_eq!(a.rule().id(), "api._override_");
        assert_eq!((table.len(), table.count("api")), (3, 3));
        assert!(table
            .put("api", &entries(&[("tenant", "0")]), TIER)
            .unwrap());
        assert_eq!(table.len(), 3);
        assert!(table.remove("api", &entries(&[("tenant", "0")])));
        assert!(!table.remove("api", &entries(&[("tenant", "0")])));
        assert!(!table.remove("web", &entries(&[("tenant", "1")])));
        assert_eq!(table.domains(), vec![("api".to_string(), 2)]);
    }

    #[test]
    fn the_filter_never_hides_an_override_through_growth_and_removals() {
        let table = OverrideTable::new();
        let key = |n: usize| entries(&[("tenant", &format!("t{n}"))]);
        let found = |n: usize| table.find("api", &[key(n)]).rule(0).is_some();
        // Growing from empty rebuilds the filter several times.
        for n in 0..5000 {
            table.put("api", &key(n), TIER).unwrap();
        }
        assert!((0..5000).all(found));
        // Removing most of them rebuilds it smaller.
        for n in 0..4500 {
            assert!(table.remove("api", &key(n)));
        }
        assert!((4500..5000).all(found));
        assert!(!(0..4500).any(found));
        let words = |table: &OverrideTable| {
            let domains = table.domains.read().unwrap();
            domains["api"].filter.words.len()
        };
        assert!(words(&table) < 5000 * FILTER_BITS / 64);
        // Putting back removed ones finds them again.
        for n in (0..4500).step_by(7) {
            table.put("api", &key(n), TIER).unwrap();
        }
        assert!((0..4500).step_by(7).all(found));
        // So does a whole domain replaced at once.
        table.replace_domain(
            "api",
            (0..3000).map(|n| (entries_key(&key(n)), TIER.to_string())),
        );
        assert!((0..3000).all(found));
        assert!(!(3000..5000).any(found));
    }

    #[test]
    fn the_filter_turns_away_most_descriptors_without_an_override() {
        let table = OverrideTable::new();
        for n in 0..100_000 {
            table
                .put("api", &entries(&[("tenant", &format!("t{n}"))]), TIER)
                .unwrap();
        }
        let domains = table.domains.read().unwrap();
        let api = &domains["api"];
        let maybe = (0..10_000)
            .map(|n| entries_key(&entries(&[("visitor", &format!("v{n}"))])))
            .filter(|key| api.filter.may_hold(api.key_hash(key)))
            .count();
        // About 3 % at 8 bits per override; far more would mean the
        // table is probed for nearly every check.
        assert!(maybe < 1_000, "{maybe} of 10,000 may have an override");
    }

    #[test]
    fn a_check_read_ahead_finds_what_a_plain_one_finds() {
        let table = OverrideTable::new();
        for n in 0..1_000 {
            table
                .put("api", &entries(&[("tenant", &format!("t{n}"))]), TIER)
                .unwrap();
        }
        let long = "v".repeat(200);
        // Six descriptors: more than are hashed ahead, one too long for
        // the stack probe, overridden and not, in every position.
        let request = [
            entries(&[("tenant", "t7")]),
            entries(&[("tenant", "nobody")]),
            entries(&[("tenant", "t999")]),
            entries(&[("tenant", "t0")]),
            entries(&[("tenant", "also-nobody")]),
            entries(&[("tenant", long.as_str())]),
        ];
        let expected = [true, false, true, true, false, false];
        let reversed: Vec<_> = request.iter().rev().cloned().collect();
        let expected_reversed: Vec<bool> = expected.iter().rev().copied().collect();
        for (request, expected) in [
            (&request[..], &expected[..]),
            (&reversed, &expected_reversed),
        ] {
            let mut runs = 0;
            let (found, done) = table.find_while("api", request, || {
                runs += 1;
                "done"
            });
            assert_eq!((runs, done), (1, "done"));
            let plain = table.find("api", request);
            for (i, &want) in expected.iter().enumerate() {
                assert_eq!(found.rule(i).is_some(), want, "descriptor {i}");
                assert_eq!(plain.rule(i).is_some(), want, "descriptor {i}");
            }
        }
        // In a domain without overrides, and with none at all, the work
        // is done all the same.
        let (found, done) = table.find_while("web", &request, || 7);
        assert!(found.is_empty() && done == 7);
        let (found, done) = OverrideTable::new().find_while("api", &request, || 8);
        assert!(found.is_empty() && done == 8);
    }

    #[test]
    fn the_filter_hashes_a_descriptor_as_it_hashes_its_key() {
        let mut table = DomainOverrides::default();
        let long = "w".repeat(1_000);
        let shapes: Vec<Vec<(String, String)>> = vec![
            entries(&[("tenant", "")]),
            entries(&[("t", "0123456789")]),
            entries(&[("tenant", "acme"), ("path", "/v1/x:y")]),
            entries(&[("ключ", "значение"), ("", "1:2")]),
            entries(&[("a", long.as_str()), ("b", "c"), ("d", "e")]),
        ];
        for entries in &shapes {
            let key = entries_key(entries);
            assert_eq!(
                table.descriptor_hash(entries.as_slice()),
                table.key_hash(&key),
                "{entries:?}"
            );
        }
        // Parts that would run into each other hash apart.
        let ab = entries(&[("ab", "c")]);
        let a_bc = entries(&[("a", "bc")]);
        assert_ne!(
            table.descriptor_hash(ab.as_slice()),
            table.descriptor_hash(a_bc.as_slice())
        );
        // And a table made anew hashes with its own seed, kept in step
        // with its filter.
        table.put(
            Arc::from(entries_key(&shapes[2])),
            Arc::new(OverrideSpec {
                text: Arc::from(TIER),
                rule: parse_override("api", TIER, ERROR_LABEL).unwrap(),
            }),
        );
        assert!(table.find_all(&[shapes[2].clone()], &[]).rule(0).is_some());
    }

    #[test]
    fn a_descriptor_too_long_for_the_stack_probe_is_found_too() {
        let table = OverrideTable::new();
        let long = "v".repeat(200);
        let e = entries(&[("tenant", "short"), ("path", long.as_str())]);
        table.put("api", &e, TIER).unwrap();
        let request = [e.clone(), entries(&[("tenant", "short")])];
        let found = table.find("api", &request);
        assert!(found.rule(0).is_some_and(Rule::is_override));
        assert!(found.rule(1).is_none());
        let other = entries(&[("tenant", "short"), ("path", &"w".repeat(200))]);
        assert!(table.find("api", &[other]).is_empty());
    }

    #[test]
    fn a_bad_limit_changes_nothing_and_names_the_field() {
        let table = OverrideTable::new();
        let e = entries(&[("tenant", "acme")]);
        table.put("api", &e, TIER).unwrap();
        let version = table.version();
        for (text, says) in [
            (
                r#"{"rate_limit": {"unit": "fortnight", "requests_per_unit": 1}}"#,
                "fortnight",
            ),
            (
                r#"{"rate_limit": {"unit": "second", "requests_per_unit": -1}}"#,
                "requests_per_unit",
            ),
            (
                r#"{"rate_limit": {"unit": "second", "requests_per_unit": 5, "burst": 9}}"#,
                "burst",
            ),
            (r#"{"rate_limit": {"unit": "second"}}"#, "requests_per_unit"),
            (r#"{"limit": 5}"#, "unknown field `limit`"),
            (r#"{}"#, "rate_limit"),
            (r#"[1]"#, "mapping"),
            (
                r#"{"rate_limit": {"window": "0s", "requests_per_unit": 1}}"#,
                "period",
            ),
        ] {
            let err = table.put("api", &e, text).unwrap_err().to_string();
            assert!(err.starts_with("override:1:"), "{err}");
            assert!(err.contains(says), "{text}: {err}");
            assert!(table.put("web", &e, text).is_err());
        }
        assert_eq!(table.version(), version);
        assert_eq!(table.domains(), vec![("api".to_string(), 1)]);
        assert_eq!(table.get("api", &e).unwrap().text(), TIER);
    }

    #[test]
    fn every_rule_field_is_accepted() {
        let text = r#"{"rate_limits": [
            {"unit": "second", "requests_per_unit": 10, "algorithm": "gcra", "burst": 20, "name": "gold"},
            {"window": "5m", "requests_per_unit": 900, "algorithm": "sliding_window_log",
             "ban": {"after": 3, "within": "10m", "for": "1h"}}
        ], "shadow_mode": true, "quota_mode": false}"#;
        OverrideTable::validate("api", text).unwrap();
        for one in [
            r#"{"rate_limit": {"unlimited": true}}"#,
            r#"{"rate_limit": {"unit": "day", "requests_per_unit": 0}}"#,
            r#"{"rate_limit": {"unit": "minute", "requests_per_unit": 5, "algorithm": "concurrency", "lease_ttl": "30s"}}"#,
            r#"{"rate_limit": {"window": "4s", "requests_per_unit": 10, "algorithm": "stepped_window", "step": "1s"}}"#,
            "rate_limit: {unit: hour, requests_per_unit: 7, algorithm: leaky_bucket}",
        ] {
            OverrideTable::validate("api", one).unwrap();
        }
    }

    #[test]
    fn pages_follow_key_order_from_a_cursor() {
        let table = OverrideTable::new();
        for n in 0..25 {
            table
                .put("api", &entries(&[("user", &format!("u{n:02}"))]), TIER)
                .unwrap();
        }
        let mut seen = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let (page, more) = table.page("api", after.as_deref(), 10);
            seen.extend(page.iter().map(|o| o.entries[0].1.clone()));
            after = page.last().map(|o| o.key.clone());
            // Changes between pages: neither duplicates nor gaps.
            table.put("api", &entries(&[("user", "b")]), TIER).unwrap();
            if !more {
                break;
            }
        }
        let want: Vec<String> = (0..25).map(|n| format!("u{n:02}")).collect();
        assert_eq!(seen, want);
        let (none, more) = table.page("web", None, 10);
        assert!(none.is_empty() && !more);
    }

    #[test]
    fn bytes_round_trip_and_damage_is_an_error() {
        let table = OverrideTable::new();
        table
            .put("api", &entries(&[("t", "a"), ("u", "b")]), TIER)
            .unwrap();
        table
            .put(
                "web",
                &entries(&[("ip", "10.0.0.1")]),
                "rate_limit: {unlimited: true}",
            )
            .unwrap();
        let bytes = table.to_bytes();
        let back = OverrideTable::from_bytes(&bytes).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back.to_bytes(), bytes);
        assert_eq!(
            OverrideTable::from_bytes(&bytes[..bytes.len() - 1]).unwrap_err(),
            DecodeError::Malformed
        );
        assert_eq!(
            OverrideTable::from_bytes(b"nope").unwrap_err(),
            DecodeError::NotOverrides
        );
    }
}

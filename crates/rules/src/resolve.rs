//! Request descriptors and their resolution: the [`Descriptor`] trait a
//! server implements for however it decoded a request, and [`Resolved`],
//! one matched rule for one request descriptor.
//!
//! This module owns applying `replaces` across a request's descriptors, as
//! envoyproxy/ratelimit does (`constructLimitsToCheck` in
//! `src/service/ratelimit.go`): the `replaces` names of every matched rule
//! (unlimited ones included) are gathered first, then every matched rule
//! that is not unlimited and whose `name` is among them is dropped. Matching
//! one descriptor is `matcher`'s job.

use crate::matcher::Domain;
use crate::overrides::Found;
use crate::rule::Rule;

/// A request descriptor: a list of (key, value) entries.
///
/// Implemented for lists and slices of pairs of anything string-like
/// (`Vec<(String, String)>`, `&[(&str, &str)]`, arrays), and for
/// references to them; a server can implement it for its own decoded
/// protobuf or JSON type so no copy is made.
pub trait Descriptor {
    /// The number of entries.
    fn len(&self) -> usize;
    /// Entry `index` (less than [`len`](Descriptor::len)) as (key, value).
    fn entry(&self, index: usize) -> (&str, &str);
    /// Whether there are no entries.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Descriptor for [(K, V)] {
    fn len(&self) -> usize {
        <[(K, V)]>::len(self)
    }
    fn entry(&self, index: usize) -> (&str, &str) {
        let (k, v) = &self[index];
        (k.as_ref(), v.as_ref())
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Descriptor for Vec<(K, V)> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }
    fn entry(&self, index: usize) -> (&str, &str) {
        self.as_slice().entry(index)
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> Descriptor for [(K, V); N] {
    fn len(&self) -> usize {
        N
    }
    fn entry(&self, index: usize) -> (&str, &str) {
        self.as_slice().entry(index)
    }
}

impl<T: Descriptor + ?Sized> Descriptor for &T {
    fn len(&self) -> usize {
        (**self).len()
    }
    fn entry(&self, index: usize) -> (&str, &str) {
        (**self).entry(index)
    }
}

/// The rule that applies to one request descriptor, with that descriptor,
/// so the store key and metric label can be built from its values.
#[derive(Clone, Copy)]
pub struct Resolved<'a> {
    rule: &'a Rule,
    descriptor: &'a dyn Descriptor,
}

impl std::fmt::Debug for Resolved<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries: Vec<_> = (0..self.descriptor.len())
            .map(|i| self.descriptor.entry(i))
            .collect();
        f.debug_struct("Resolved")
            .field("rule", &self.rule.id())
            .field("descriptor", &entries)
            .finish()
    }
}

impl<'a> Resolved<'a> {
    /// The matched rule.
    pub fn rule(&self) -> &'a Rule {
        self.rule
    }

    /// The request descriptor it matched.
    pub fn descriptor(&self) -> &'a dyn Descriptor {
        self.descriptor
    }

    /// The store key: see [`Rule::write_counter_key`].
    pub fn counter_key(&self) -> Vec<u8> {
        self.rule.counter_key(self.descriptor)
    }

    /// Appends the store key to `buf` (no allocation when `buf` has room).
    pub fn write_counter_key(&self, buf: &mut Vec<u8>) {
        self.rule.write_counter_key(self.descriptor, buf)
    }

    /// The metric label: see [`Rule::metric_label`].
    pub fn metric_label(&self) -> String {
        self.rule.metric_label(self.descriptor)
    }
}

/// Resolves each descriptor against `domain` (its override, when `found`
/// has one, before the rules), then applies `replaces`.
pub(crate) fn resolve<'a, D: Descriptor>(
    domain: &'a Domain,
    descriptors: &'a [D],
    found: &'a Found,
) -> Vec<Option<Resolved<'a>>> {
    let rules = resolve_rules(domain, descriptors, found);
    rules
        .into_iter()
        .zip(descriptors)
        .map(|(rule, d)| {
            rule.map(|rule| Resolved {
                rule,
                descriptor: d as &dyn Descriptor,
            })
        })
        .collect()
}

/// The rule of each descriptor — its runtime override when `found` has
/// one, otherwise the rules files' — `replaces` applied. The rules borrow
/// the domain and `found` only, so they outlive a request's short-lived
/// descriptors.
pub(crate) fn resolve_rules<'r, D: Descriptor>(
    domain: &'r Domain,
    descriptors: &[D],
    found: &'r Found,
) -> Vec<Option<&'r Rule>> {
    let mut out: Vec<Option<&'r Rule>> = descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| found.rule(i).or_else(|| domain.find(d)))
        .collect();
    let overridden_replaces =
        !found.is_empty() && out.iter().flatten().any(|r| !r.replaces().is_empty());
    if domain.has_replaces() || overridden_replaces {
        apply_replaces(&mut out);
    }
    out
}

fn apply_replaces(out: &mut [Option<&Rule>]) {
    let replaced = |name: &str| {
        out.iter()
            .flatten()
            .any(|r| r.replaces().iter().any(|n| n == name))
    };
    let drop: Vec<usize> = out
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let rule = (*r)?;
            let name = rule.name()?;
            (!rule.unlimited() && replaced(name)).then_some(i)
        })
        .collect();
    for i in drop {
        out[i] = None;
    }
}

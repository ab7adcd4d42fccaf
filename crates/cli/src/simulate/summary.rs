//! The replay summary written to stderr.

use std::collections::HashMap;
use std::fmt;

/// Keys tracked one by one; the rest are summed under "other keys", so a
/// trace of millions of keys cannot exhaust memory.
const TRACKED_KEYS: usize = 10_000;
/// Keys listed in the summary.
const LISTED_KEYS: usize = 10;

/// Admitted and rejected counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Requests admitted.
    pub admitted: u64,
    /// Requests rejected.
    pub rejected: u64,
}

impl Tally {
    fn add(&mut self, allowed: bool) {
        if allowed {
            self.admitted += 1;
        } else {
            self.rejected += 1;
        }
    }

    fn total(&self) -> u64 {
        self.admitted + self.rejected
    }
}

/// Counts per key and in total.
#[derive(Debug, Default)]
pub struct Summary {
    total: Tally,
    keys: HashMap<String, Tally>,
    other: Tally,
    other_keys: bool,
}

impl Summary {
    /// Counts one decision.
    pub fn add(&mut self, key: &str, allowed: bool) {
        self.total.add(allowed);
        if let Some(tally) = self.keys.get_mut(key) {
            tally.add(allowed);
        } else if self.keys.len() < TRACKED_KEYS {
            self.keys.entry(key.to_string()).or_default().add(allowed);
        } else {
            self.other_keys = true;
            self.other.add(allowed);
        }
    }

    /// The totals over all keys.
    pub fn total(&self) -> Tally {
        self.total
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.total;
        writeln!(
            f,
            "{} requests: {} admitted, {} rejected, over {}{} keys",
            t.total(),
            t.admitted,
            t.rejected,
            self.keys.len(),
            if self.other_keys { "+" } else { "" }
        )?;
        let mut keys: Vec<_> = self.keys.iter().collect();
        keys.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then(a.0.cmp(b.0)));
        for (key, tally) in keys.iter().take(LISTED_KEYS) {
            writeln!(
                f,
                "  {key}: {} admitted, {} rejected",
                tally.admitted, tally.rejected
            )?;
        }
        if keys.len() > LISTED_KEYS || self.other_keys {
            let shown: u64 = keys.iter().take(LISTED_KEYS).map(|(_, t)| t.total()).sum();
            writeln!(f, "  (other keys: {} requests)", t.total() - shown)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_busiest_keys_first() {
        let mut summary = Summary::default();
        for allowed in [true, true, false] {
            summary.add("busy", allowed);
        }
        summary.add("quiet", true);
        let text = summary.to_string();
        assert!(
            text.starts_with("4 requests: 3 admitted, 1 rejected, over 2 keys"),
            "{text}"
        );
        assert!(text.find("busy").unwrap() < text.find("quiet").unwrap());
    }
}

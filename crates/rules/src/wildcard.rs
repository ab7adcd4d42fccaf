//! Descriptor value wildcards: [`WildcardPattern`], a `value:` with `*`
//! anywhere (each `*` matching any run of characters, none included), and
//! [`WildcardIndex`], the wildcards of one key at one level, indexed so a
//! lookup tries only the patterns that can match.
//!
//! Hand-written rather than taken from a glob or regex crate: a value
//! pattern has one operator, `*`, and no escapes, classes or alternatives;
//! a regex per pattern would cost a compile at load and an automaton run
//! per candidate, and a glob crate brings path semantics (`/`, `**`) that
//! values do not have. A pattern is compiled at load into its literal
//! pieces between stars: the first piece must start the value, the last
//! must end it, and the middle ones are found left to right, each at its
//! leftmost place after the previous one. For `*`-only patterns this greedy
//! leftmost search is exact (taking a piece at its leftmost place never
//! leaves less room for the pieces after it), so a match costs one pass of
//! substring searches over the value, never backtracking.
//!
//! The index answers "the first pattern in file order that matches": the
//! patterns with a literal start are grouped by that start (one hash
//! lookup per distinct start length finds every pattern whose start the
//! value begins with), those starting with `*` but with a literal end by
//! that end, and only the few with neither (`*`, `*foo*`) are always tried.
//! Of the candidates, only those earlier in the file than the best match
//! so far are matched.

use std::collections::HashMap;

/// A `value:` pattern with at least one `*`, compiled.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct WildcardPattern {
    /// The pattern as written, e.g. `foo*bar*baz`.
    text: String,
    /// The literal before the first `*` (anchored at the start).
    prefix: String,
    /// The non-empty literals between stars, in order.
    middle: Vec<String>,
    /// The literal after the last `*` (anchored at the end).
    suffix: String,
}

impl WildcardPattern {
    /// Compiles `text`, or `None` when it has no `*` (an exact value).
    pub(crate) fn compile(text: &str) -> Option<WildcardPattern> {
        let mut pieces = text.split('*');
        let prefix = pieces.next()?.to_owned();
        let mut rest: Vec<&str> = pieces.collect();
        let suffix = rest.pop()?.to_owned();
        let middle = rest
            .into_iter()
            .filter(|piece| !piece.is_empty())
            .map(str::to_owned)
            .collect();
        Some(WildcardPattern {
            text: text.to_owned(),
            prefix,
            middle,
            suffix,
        })
    }

    /// The prefix when the pattern is a plain prefix wildcard (`foo*`, one
    /// star, at the end), the only kind earlier versions knew; their store
    /// keys are kept for it.
    pub(crate) fn plain_prefix(&self) -> Option<&str> {
        (self.middle.is_empty() && self.suffix.is_empty() && self.text.ends_with('*'))
            .then_some(self.prefix.as_str())
            .filter(|p| p.len() + 1 == self.text.len())
    }

    /// Whether `value` matches: see the module documentation.
    pub(crate) fn matches(&self, value: &str) -> bool {
        if value.len() < self.prefix.len() + self.suffix.len()
            || !value.starts_with(self.prefix.as_str())
            || !value.ends_with(self.suffix.as_str())
        {
            return false;
        }
        // Both ends are whole UTF-8 literals the value starts and ends with,
        // so these are character boundaries, and they do not overlap.
        let Some(mut rest) = value.get(self.prefix.len()..value.len() - self.suffix.len()) else {
            return false;
        };
        for piece in &self.middle {
            match rest.find(piece.as_str()) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

/// Patterns grouped by a literal (their start or their end), with the
/// distinct literal lengths, so a lookup is one hash probe per length.
#[derive(Debug, Clone, Default)]
struct ByLiteral {
    /// Literal → indexes into [`WildcardIndex::patterns`], ascending.
    groups: HashMap<String, Vec<usize>>,
    /// The distinct literal lengths, ascending.
    lengths: Vec<usize>,
}

impl ByLiteral {
    fn insert(&mut self, literal: &str, index: usize) {
        self.groups
            .entry(literal.to_owned())
            .or_default()
            .push(index);
        if let Err(at) = self.lengths.binary_search(&literal.len()) {
            self.lengths.insert(at, literal.len());
        }
    }
}

/// The wildcard descriptors of one key at one level, in file order.
#[derive(Debug, Clone, Default)]
pub(crate) struct WildcardIndex {
    /// (pattern, payload), in file order.
    patterns: Vec<(WildcardPattern, usize)>,
    /// Patterns with a literal start, by that start.
    by_prefix: ByLiteral,
    /// Patterns starting with `*` but with a literal end, by that end.
    by_suffix: ByLiteral,
    /// Patterns with neither (`*`, `*a*`): always candidates.
    others: Vec<usize>,
}

impl WildcardIndex {
    /// Adds a pattern after the others (later in the file).
    pub(crate) fn push(&mut self, pattern: WildcardPattern, payload: usize) {
        let index = self.patterns.len();
        if !pattern.prefix.is_empty() {
            self.by_prefix.insert(&pattern.prefix, index);
        } else if !pattern.suffix.is_empty() {
            self.by_suffix.insert(&pattern.suffix, index);
        } else {
            self.others.push(index);
        }
        self.patterns.push((pattern, payload));
    }

    /// The payload of the pattern written exactly as `text`, if any.
    pub(crate) fn get(&self, text: &str) -> Option<usize> {
        self.patterns
            .iter()
            .find(|(p, _)| p.text == text)
            .map(|(_, payload)| *payload)
    }

    /// The payload of the first pattern in file order that matches `value`.
    pub(crate) fn find(&self, value: &str) -> Option<usize> {
        if self.patterns.is_empty() {
            return None;
        }
        // `best` is the file-order index of the best match so far; a
        // candidate is matched only when it comes before it.
        let mut best = usize::MAX;
        let mut consider = |candidates: &[usize]| {
            for &i in candidates {
                if i >= best {
                    // Candidates are ascending: none after this one wins.
                    break;
                }
                if self.patterns[i].0.matches(value) {
                    best = i;
                    break;
                }
            }
        };
        for &len in &self.by_prefix.lengths {
            let Some(start) = value.get(..len) else {
                // Too long, or not on a character boundary: no literal of
                // this length is a start of the value.
                continue;
            };
            if let Some(group) = self.by_prefix.groups.get(start) {
                consider(group);
            }
        }
        for &len in &self.by_suffix.lengths {
            let Some(end) = value.len().checked_sub(len).and_then(|at| value.get(at..)) else {
                continue;
            };
            if let Some(group) = self.by_suffix.groups.get(end) {
                consider(group);
            }
        }
        consider(&self.others);
        self.patterns.get(best).map(|(_, payload)| *payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> WildcardPattern {
        WildcardPattern::compile(text).unwrap_or_else(|| panic!("{text} has no star"))
    }

    #[test]
    fn stars_match_anywhere_and_any_number_of_times() {
        let p = pattern("bar*b");
        for v in ["barab", "bar123b", "barb", "barbb"] {
            assert!(p.matches(v), "{v}");
        }
        for v in ["bar", "barba", "xbarb", "ba"] {
            assert!(!p.matches(v), "{v}");
        }
        let p = pattern("foo*bar*baz");
        for v in [
            "foo123bar456baz",
            "foobarbaz",
            "foobarbarbaz",
            "foobazbarbaz",
        ] {
            assert!(p.matches(v), "{v}");
        }
        for v in ["foobaz", "foobarba", "fobarbaz", "foo-baz-bar"] {
            assert!(!p.matches(v), "{v}");
        }
        assert!(pattern("*").matches(""));
        assert!(pattern("**").matches("x"));
        assert!(pattern("*abc").matches("abc"));
        assert!(!pattern("ab*ba").matches("aba"));
        assert!(pattern("ab*ba").matches("abba"));
        assert!(pattern("é*ü").matches("éü"));
        assert!(!pattern("é*ü").matches("e"));
        assert_eq!(WildcardPattern::compile("exact"), None);
    }

    #[test]
    fn only_a_single_trailing_star_is_a_plain_prefix() {
        assert_eq!(pattern("foo*").plain_prefix(), Some("foo"));
        assert_eq!(pattern("*").plain_prefix(), Some(""));
        assert_eq!(pattern("foo**").plain_prefix(), None);
        assert_eq!(pattern("f*o*").plain_prefix(), None);
        assert_eq!(pattern("*foo").plain_prefix(), None);
    }

    #[test]
    fn the_first_matching_pattern_in_file_order_wins() {
        let mut index = WildcardIndex::default();
        for (i, text) in ["*z", "ab*", "a*", "*", "abc*x"].into_iter().enumerate() {
            index.push(pattern(text), i * 10);
        }
        assert_eq!(index.find("abcz"), Some(0));
        assert_eq!(index.find("abcx"), Some(10));
        assert_eq!(index.find("ax"), Some(20));
        assert_eq!(index.find("q"), Some(30));
        assert_eq!(index.find(""), Some(30));
        assert_eq!(index.get("a*"), Some(20));
        assert_eq!(index.get("b*"), None);
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    /// The reference: plain recursive backtracking over characters.
    fn naive(pattern: &[char], value: &[char]) -> bool {
        match pattern.split_first() {
            None => value.is_empty(),
            Some(('*', rest)) => (0..=value.len()).any(|skip| naive(rest, &value[skip..])),
            Some((c, rest)) => value.first() == Some(c) && naive(rest, &value[1..]),
        }
    }

    /// Short strings over a tiny alphabet, so stars and literals collide.
    fn text(alphabet: &'static str, max: usize) -> impl Strategy<Value = String> {
        proptest::collection::vec(
            proptest::sample::select(alphabet.chars().collect::<Vec<_>>()),
            0..max,
        )
        .prop_map(|chars| chars.into_iter().collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn compiled_matches_agree_with_backtracking(
            pattern in text("ab*é", 9),
            value in text("abé", 12),
        ) {
            let chars: Vec<char> = pattern.chars().collect();
            let values: Vec<char> = value.chars().collect();
            let expected = naive(&chars, &values);
            match WildcardPattern::compile(&pattern) {
                Some(compiled) => prop_assert_eq!(compiled.matches(&value), expected),
                None => prop_assert_eq!(pattern == value, expected),
            }
        }

        #[test]
        fn the_index_finds_the_first_match_in_file_order(
            patterns in proptest::collection::vec(text("ab*", 6), 1..12),
            value in text("ab", 8),
        ) {
            let mut index = WildcardIndex::default();
            let mut compiled = Vec::new();
            for p in patterns.iter().filter_map(|p| WildcardPattern::compile(p)) {
                index.push(p.clone(), compiled.len());
                compiled.push(p);
            }
            let expected = compiled.iter().position(|p| p.matches(&value));
            prop_assert_eq!(index.find(&value), expected);
        }
    }
}

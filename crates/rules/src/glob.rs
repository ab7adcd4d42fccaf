//! [`PathGlob`]: a URL path pattern where `*` matches within one segment
//! and `**` matches any number of whole segments.
//!
//! Hand-written rather than taken from a glob crate: the crates the
//! ecosystem trusts (globset, glob) match file system paths through
//! regular expressions or directory walks, with options (character
//! classes, alternatives, case folding) a route does not need, and this
//! matcher is a few dozen lines with no allocation per request. It uses the
//! classic two-pointer wildcard walk at both levels — segments, where `**`
//! is the star, and characters within a segment, where `*` is — so matching
//! takes at most (pattern length × path length) steps, whatever the input.

use std::fmt;

/// One `/`-separated piece of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Segment {
    /// `**`: any number of segments, none included.
    AnySegments,
    /// Text in which each `*` matches any characters but `/`.
    Pattern(String),
}

/// A path glob such as `/users/*/orders/**`, validated at load.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PathGlob {
    text: String,
    segments: Vec<Segment>,
}

/// Why a glob was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GlobError {
    /// It does not start with `/`.
    NotAbsolute,
    /// `**` shares a segment with other characters.
    MixedDoubleStar,
}

impl PathGlob {
    /// Parses a glob; it must start with `/`, and `**` must be a whole
    /// segment.
    pub(crate) fn parse(text: &str) -> Result<PathGlob, GlobError> {
        let rest = text.strip_prefix('/').ok_or(GlobError::NotAbsolute)?;
        let segments = rest
            .split('/')
            .map(|s| match s {
                "**" => Ok(Segment::AnySegments),
                s if s.contains("**") => Err(GlobError::MixedDoubleStar),
                s => Ok(Segment::Pattern(s.to_owned())),
            })
            .collect::<Result<_, _>>()?;
        Ok(PathGlob {
            text: text.to_owned(),
            segments,
        })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `path` (a URL path, without the query) matches.
    ///
    /// ```
    /// # use tollgate_rules::RuleSet;
    /// let rules = RuleSet::from_yaml(
    ///     "domain: d\nroutes:\n  - match: {path_glob: /users/*/orders/**}\n    descriptors: [[path]]\n",
    ///     "d.yaml",
    /// ).unwrap();
    /// let route = &rules.domain("d").unwrap().routes().unwrap()[0];
    /// let tollgate_rules::PathMatch::Glob(glob) = route.matcher.path.as_ref().unwrap() else { panic!() };
    /// assert!(glob.matches("/users/42/orders"));
    /// assert!(glob.matches("/users/42/orders/7/items"));
    /// assert!(!glob.matches("/users/42/7/orders"));
    /// assert!(!glob.matches("/users/orders"));
    /// ```
    pub fn matches(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix('/') else {
            return false;
        };
        match_segments(&self.segments, rest)
    }
}

impl fmt::Display for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Segment-level walk: `**` is the star. On a mismatch after a `**`, the
/// `**` takes one more path segment and the walk resumes after it.
fn match_segments(pattern: &[Segment], path: &str) -> bool {
    let mut rest = path.split('/');
    let mut current = rest.next();
    let mut p = 0;
    // The last `**` seen: the pattern index after it, and the path segment
    // it would take next with the segments after that one.
    let mut backtrack: Option<(usize, Option<&str>, std::str::Split<'_, char>)> = None;
    loop {
        match pattern.get(p) {
            Some(Segment::AnySegments) => {
                p += 1;
                backtrack = Some((p, current, rest.clone()));
                continue;
            }
            Some(Segment::Pattern(text)) if current.is_some_and(|s| match_segment(text, s)) => {
                p += 1;
                current = rest.next();
                continue;
            }
            None if current.is_none() => return true,
            _ => {}
        }
        let Some((resume, taken, after)) = backtrack.as_mut() else {
            return false;
        };
        if taken.is_none() {
            return false;
        }
        *taken = after.next();
        p = *resume;
        current = *taken;
        rest = after.clone();
    }
}

/// Character-level walk within one segment: `*` is the star.
fn match_segment(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && p[i] == b'*' {
            i += 1;
            star = Some((i, j));
        } else if i < p.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(text: &str) -> PathGlob {
        PathGlob::parse(text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    #[test]
    fn star_stays_within_a_segment() {
        let g = glob("/users/*/orders");
        assert!(g.matches("/users/42/orders"));
        assert!(g.matches("/users//orders"));
        assert!(!g.matches("/users/4/2/orders"));
        assert!(!g.matches("/users/42/orders/7"));
        let g = glob("/files/*.json");
        assert!(g.matches("/files/a.json"));
        assert!(g.matches("/files/.json"));
        assert!(!g.matches("/files/a.json.bak"));
        assert!(!g.matches("/files/dir/a.json"));
        let g = glob("/a*b*c");
        assert!(g.matches("/abc"));
        assert!(g.matches("/aXbYbZc"));
        assert!(!g.matches("/aXbYbZ"));
    }

    #[test]
    fn double_star_takes_any_number_of_segments() {
        let g = glob("/users/*/orders/**");
        assert!(g.matches("/users/42/orders"));
        assert!(g.matches("/users/42/orders/"));
        assert!(g.matches("/users/42/orders/7/items/3"));
        assert!(!g.matches("/users/42/order"));
        let g = glob("/**/edit");
        assert!(g.matches("/edit"));
        assert!(g.matches("/a/b/c/edit"));
        assert!(!g.matches("/a/b/c/edit/x"));
        let g = glob("/**/a/**/b");
        assert!(g.matches("/a/b"));
        assert!(g.matches("/x/a/y/z/b"));
        assert!(g.matches("/a/a/b/a/b"));
        assert!(!g.matches("/x/a/y/z/c"));
        assert!(glob("/**").matches("/"));
        assert!(glob("/**").matches("/any/thing"));
    }

    #[test]
    fn paths_must_be_absolute_and_double_stars_whole() {
        assert_eq!(PathGlob::parse("users/*"), Err(GlobError::NotAbsolute));
        assert_eq!(PathGlob::parse("/a**"), Err(GlobError::MixedDoubleStar));
        assert!(!glob("/a").matches("a"));
        assert!(!glob("/a").matches(""));
    }

    #[test]
    fn adversarial_inputs_finish() {
        let g = glob("/**/*a*a*a*a*a*b/**/c");
        let path = format!("/{}", "aaaaaaaaaaaaaaaaaaaa/".repeat(200));
        assert!(!g.matches(&path));
    }
}

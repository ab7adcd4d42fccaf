//! [`RuleSet`]: every domain of a rules file or directory, loaded and
//! validated at once, and the entry point for resolving requests.
//!
//! This module owns finding and reading the files (a file, or the `*.yaml`
//! and `*.yml` files of a directory, sorted by name, through symlinks,
//! hidden entries skipped — the layout of a Kubernetes ConfigMap volume),
//! bounding their size, and rejecting a domain defined twice. The schema is
//! `parse`; the change watcher is `watch`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{ErrorKind, RulesError, UnknownDomain};
use crate::matcher::Domain;
use crate::overrides::Found;
use crate::parse::{parse_domain, parse_domain_into};
use crate::resolve::{self, Descriptor, Resolved};

/// The largest rules file accepted: 16 MiB.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// How rules files are loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Files that name the same domain make one domain (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG`), read in load order; a descriptor two of them
    /// define is still an error naming both places. Without it, a domain in
    /// two files is an error.
    pub merge_domains: bool,
}

/// Every loaded domain, by name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleSet {
    domains: BTreeMap<String, Domain>,
}

/// The files of a rules path, read once: what a load parses and what the
/// watcher hashes, so the two always agree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Snapshot {
    /// (label for messages, contents), in load order.
    pub(crate) files: Vec<(String, Vec<u8>)>,
}

impl RuleSet {
    /// Loads a rules file, or every `*.yaml` / `*.yml` file of a directory
    /// (sorted by name; symlinks followed; entries whose names start with
    /// `.` skipped, so a ConfigMap's `..data` and `..2024_…` entries are
    /// read only through the top-level symlinks that point into them).
    /// Subdirectories are not searched.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// std::fs::write(dir.path().join("api.yaml"), "domain: api\n").unwrap();
    /// std::fs::write(dir.path().join("mail.yml"), "domain: mail\n").unwrap();
    /// let rules = tollgate_rules::RuleSet::load(dir.path()).unwrap();
    /// assert_eq!(rules.domains().map(|d| d.name()).collect::<Vec<_>>(), ["api", "mail"]);
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<RuleSet, RulesError> {
        Self::load_with(path, LoadOptions::default())
    }

    /// [`load`](RuleSet::load) with `options`.
    ///
    /// ```
    /// use tollgate_rules::{LoadOptions, RuleSet};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let rule = "    rate_limit: {unit: second, requests_per_unit: 1}\n";
    /// std::fs::write(dir.path().join("a.yaml"), format!("domain: api\ndescriptors:\n  - key: a\n{rule}")).unwrap();
    /// std::fs::write(dir.path().join("b.yaml"), format!("domain: api\ndescriptors:\n  - key: b\n{rule}")).unwrap();
    /// assert!(RuleSet::load(dir.path()).is_err());
    /// let merged = RuleSet::load_with(dir.path(), LoadOptions { merge_domains: true }).unwrap();
    /// assert_eq!(merged.domain("api").unwrap().rules().len(), 2);
    /// ```
    pub fn load_with(path: impl AsRef<Path>, options: LoadOptions) -> Result<RuleSet, RulesError> {
        Self::from_snapshot(&read_snapshot(path.as_ref())?, options)
    }

    /// Parses one file's text; `file_label` names it in errors.
    ///
    /// ```
    /// let rules = tollgate_rules::RuleSet::from_yaml("domain: api\n", "inline").unwrap();
    /// assert!(rules.domain("api").is_some());
    /// ```
    pub fn from_yaml(text: &str, file_label: &str) -> Result<RuleSet, RulesError> {
        let mut set = RuleSet::default();
        set.insert(parse_domain(text, file_label)?)?;
        Ok(set)
    }

    pub(crate) fn from_snapshot(
        snapshot: &Snapshot,
        options: LoadOptions,
    ) -> Result<RuleSet, RulesError> {
        let mut set = RuleSet::default();
        for (label, bytes) in &snapshot.files {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| RulesError::file(label, ErrorKind::NotUtf8))?;
            let domain = if options.merge_domains {
                parse_domain_into(text, label, |name| set.domains.remove(name))?
            } else {
                parse_domain(text, label)?
            };
            set.insert(domain)?;
        }
        Ok(set)
    }

    fn insert(&mut self, domain: Domain) -> Result<(), RulesError> {
        if let Some(first) = self.domains.get(domain.name()) {
            let at = crate::error::Location {
                line: domain.line(),
                column: 1,
            };
            return Err(RulesError::at(
                domain.file(),
                at,
                ErrorKind::DuplicateDomain {
                    domain: domain.name().to_string(),
                    first_file: first.file().to_string(),
                },
            ));
        }
        self.domains.insert(domain.name().to_string(), domain);
        Ok(())
    }

    /// The domain called `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Every domain, sorted by name.
    pub fn domains(&self) -> impl Iterator<Item = &Domain> + '_ {
        self.domains.values()
    }

    /// Whether no domain is loaded.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Resolves a request: one answer per descriptor, in order, `None` where
    /// no rule applies (no match, a matched descriptor without a limit, or a
    /// rule dropped by another matched rule's `replaces`).
    ///
    /// ```
    /// use tollgate_rules::RuleSet;
    ///
    /// let rules = RuleSet::from_yaml(
    ///     "domain: api\n\
    ///      descriptors:\n\
    ///      \x20 - key: user\n\
    ///      \x20   rate_limit: {unit: minute, requests_per_unit: 60}\n",
    ///     "api.yaml",
    /// )
    /// .unwrap();
    /// let request = [vec![("user", "42")], vec![("path", "/")]];
    /// let resolved = rules.resolve("api", &request).unwrap();
    /// let user = resolved[0].unwrap();
    /// assert_eq!(user.rule().id(), "api.user");
    /// assert_eq!(user.rule().limits()[0].rate.to_string(), "60/m");
    /// assert!(resolved[1].is_none());
    /// assert!(rules.resolve("web", &request).is_err());
    /// ```
    pub fn resolve<'a, D: Descriptor>(
        &'a self,
        domain: &str,
        descriptors: &'a [D],
    ) -> Result<Vec<Option<Resolved<'a>>>, UnknownDomain> {
        self.resolve_with(domain, descriptors, &crate::overrides::NO_OVERRIDES)
    }

    /// [`resolve`](RuleSet::resolve), with the runtime overrides `found`
    /// for these descriptors (see
    /// [`OverrideTable::find`](crate::overrides::OverrideTable::find)): a
    /// descriptor that has one takes its rule instead of the files'.
    pub fn resolve_with<'a, D: Descriptor>(
        &'a self,
        domain: &str,
        descriptors: &'a [D],
        found: &'a Found,
    ) -> Result<Vec<Option<Resolved<'a>>>, UnknownDomain> {
        let domain = self.domains.get(domain).ok_or_else(|| UnknownDomain {
            domain: domain.to_string(),
        })?;
        Ok(resolve::resolve(domain, descriptors, found))
    }
}

/// Reads every rules file under `path`.
pub(crate) fn read_snapshot(path: &Path) -> Result<Snapshot, RulesError> {
    let label = path.display().to_string();
    let io = |e: std::io::Error| RulesError::file(&label, ErrorKind::Io(e.to_string()));
    let meta = fs::metadata(path).map_err(io)?;
    let paths = if meta.is_dir() {
        rules_files(path).map_err(io)?
    } else {
        vec![path.to_path_buf()]
    };
    let mut files = Vec::with_capacity(paths.len());
    for file in paths {
        let label = file.display().to_string();
        let bytes = read_bounded(&file).map_err(|kind| RulesError::file(&label, kind))?;
        files.push((label, bytes));
    }
    Ok(Snapshot { files })
}

/// The `*.yaml` / `*.yml` files of a directory, not hidden, sorted by name.
fn rules_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let lower = name.to_ascii_lowercase();
        if name.starts_with('.') || !(lower.ends_with(".yaml") || lower.ends_with(".yml")) {
            continue;
        }
        let path = entry.path();
        // `fs::metadata` follows symlinks: a ConfigMap's entries are links.
        match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => found.push(path),
            Ok(_) => {}
            // A link whose target vanished mid-swap: skip it; the watcher's
            // next look sees the settled state.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    found.sort();
    Ok(found)
}

fn read_bounded(path: &Path) -> Result<Vec<u8>, ErrorKind> {
    let io = |e: std::io::Error| ErrorKind::Io(e.to_string());
    let file = fs::File::open(path).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if size > MAX_FILE_BYTES {
        return Err(ErrorKind::TooLarge {
            size,
            max: MAX_FILE_BYTES,
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    // Read one byte past the bound, in case the file grew since `metadata`.
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(ErrorKind::TooLarge {
            size: bytes.len() as u64,
            max: MAX_FILE_BYTES,
        });
    }
    Ok(bytes)
}

//! Loading files and directories: several domains, a domain defined twice,
//! a Kubernetes ConfigMap's symlink layout, bounds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;

use tollgate_rules::{ErrorKind, RuleSet, MAX_FILE_BYTES};

fn write(dir: &Path, name: &str, text: &str) {
    fs::write(dir.join(name), text).unwrap();
}

fn names(rules: &RuleSet) -> Vec<String> {
    rules.domains().map(|d| d.name().to_string()).collect()
}

#[test]
fn a_directory_loads_every_yaml_file_sorted() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "b.yml", "domain: beta\n");
    write(dir.path(), "a.yaml", "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n");
    write(dir.path(), "c.YAML", "domain: gamma\n");
    write(dir.path(), "notes.txt", "not rules");
    write(dir.path(), ".hidden.yaml", "domain: hidden\n");
    fs::create_dir(dir.path().join("sub.yaml")).unwrap();
    let rules = RuleSet::load(dir.path()).unwrap();
    assert_eq!(names(&rules), ["alpha", "beta", "gamma"]);
    let alpha = rules.domain("alpha").unwrap();
    assert!(alpha.file().ends_with("a.yaml"), "{}", alpha.file());
    assert_eq!(alpha.rules().len(), 1);

    let single = RuleSet::load(dir.path().join("b.yml")).unwrap();
    assert_eq!(names(&single), ["beta"]);

    let empty = tempfile::tempdir().unwrap();
    assert!(RuleSet::load(empty.path()).unwrap().is_empty());
}

#[test]
fn a_domain_in_two_files_is_an_error_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "1-first.yaml", "domain: api\n");
    write(dir.path(), "2-second.yaml", "# again\ndomain: api\n");
    let err = RuleSet::load(dir.path()).unwrap_err();
    let first = dir.path().join("1-first.yaml").display().to_string();
    let second = dir.path().join("2-second.yaml").display().to_string();
    assert_eq!(
        err.to_string(),
        format!("{second}:2:1: domain \"api\" is already defined in {first} (--merge-domains merges the files of one domain)")
    );
}

#[test]
fn errors_in_a_directory_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "good.yaml", "domain: good\n");
    write(
        dir.path(),
        "bad.yaml",
        "domain: bad\ndescriptors:\n  - key: k\n    valeu: x\n",
    );
    let err = RuleSet::load(dir.path()).unwrap_err().to_string();
    let bad = dir.path().join("bad.yaml").display().to_string();
    assert!(
        err.starts_with(&format!("{bad}:4:5: unknown field `valeu`")),
        "{err}"
    );
}

#[test]
fn unreadable_inputs_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    let err = RuleSet::load(&missing).unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Io(_)), "{err}");
    assert!(err.to_string().starts_with(&missing.display().to_string()));

    fs::write(dir.path().join("latin1.yaml"), b"domain: caf\xe9\n").unwrap();
    let err = RuleSet::load(dir.path().join("latin1.yaml")).unwrap_err();
    assert_eq!(err.kind(), &ErrorKind::NotUtf8);
}

#[test]
fn oversized_files_are_rejected_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    let file = fs::File::create(&big).unwrap();
    file.set_len(MAX_FILE_BYTES + 1).unwrap();
    let err = RuleSet::load(&big).unwrap_err();
    assert_eq!(
        err.kind(),
        &ErrorKind::TooLarge {
            size: MAX_FILE_BYTES + 1,
            max: MAX_FILE_BYTES
        }
    );
}

/// Lays out `dir` as a ConfigMap volume does: the files live in a
/// timestamped hidden directory, `..data` links to it, and each top-level
/// name links through `..data`.
#[cfg(unix)]
fn configmap(dir: &Path, version: &str, files: &[(&str, &str)]) {
    use std::os::unix::fs::symlink;
    let data = dir.join(version);
    fs::create_dir(&data).unwrap();
    for (name, text) in files {
        fs::write(data.join(name), text).unwrap();
    }
    let tmp = dir.join("..data_tmp");
    symlink(version, &tmp).unwrap();
    fs::rename(&tmp, dir.join("..data")).unwrap();
    for (name, _) in files {
        let link = dir.join(name);
        if fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(name), &link).unwrap();
        }
    }
}

#[cfg(unix)]
#[test]
fn a_configmap_volume_loads_through_its_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    configmap(
        dir.path(),
        "..2024_01_01_00_00_00.000000001",
        &[
            ("api.yaml", "domain: api\n"),
            ("mail.yaml", "domain: mail\n"),
        ],
    );
    let rules = RuleSet::load(dir.path()).unwrap();
    // Each domain once: the hidden `..data` and `..2024…` entries are skipped.
    assert_eq!(names(&rules), ["api", "mail"]);
    assert!(rules.domain("api").unwrap().file().ends_with("/api.yaml"));

    // A swap of `..data` changes what the same paths read.
    configmap(
        dir.path(),
        "..2024_01_02_00_00_00.000000002",
        &[
            ("api.yaml", "domain: api2\n"),
            ("mail.yaml", "domain: mail\n"),
        ],
    );
    assert_eq!(names(&RuleSet::load(dir.path()).unwrap()), ["api2", "mail"]);
}

#[cfg(unix)]
#[test]
fn dangling_links_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.yaml", "domain: a\n");
    std::os::unix::fs::symlink("gone.yaml", dir.path().join("b.yaml")).unwrap();
    assert_eq!(names(&RuleSet::load(dir.path()).unwrap()), ["a"]);
}

//! The watcher notices every way a rules file changes, with real files:
//! in-place writes, write-to-temp-and-rename, files added and removed, and a
//! ConfigMap's `..data` symlink swap; and polling alone converges.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::Path;
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use tollgate_rules::watch::{RulesWatcher, WatchOptions};
use tollgate_rules::{RuleSet, RulesError};

/// Long enough for a loaded CI machine; the waits end as soon as a change
/// arrives.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Events only in effect: the poll is too slow to be what notices.
fn events_only() -> WatchOptions {
    WatchOptions {
        poll_interval: Duration::from_secs(3600),
        ..WatchOptions::default()
    }
}

fn start(
    path: &Path,
    options: WatchOptions,
) -> (RulesWatcher, Receiver<Result<RuleSet, RulesError>>) {
    let (tx, rx) = mpsc::channel();
    let watcher = RulesWatcher::spawn_with(path, options, move |loaded| {
        let _ = tx.send(loaded);
    });
    (watcher, rx)
}

/// The domain names of the next successful load.
fn next_domains(rx: &Receiver<Result<RuleSet, RulesError>>) -> Vec<String> {
    let rules = rx
        .recv_timeout(TIMEOUT)
        .expect("no change reported")
        .unwrap_or_else(|e| panic!("load failed: {e}"));
    rules.domains().map(|d| d.name().to_string()).collect()
}

#[test]
fn in_place_writes_are_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    fs::write(&file, "domain: one\n").unwrap();
    let (_watcher, rx) = start(&file, events_only());
    fs::write(&file, "domain: two\n").unwrap();
    assert_eq!(next_domains(&rx), ["two"]);
    // A broken edit is reported as an error with its place; the fix reloads.
    fs::write(&file, "domain: three\nbogus: 1\n").unwrap();
    let err = rx.recv_timeout(TIMEOUT).unwrap().unwrap_err();
    assert_eq!(err.line(), Some(2));
    fs::write(&file, "domain: three\n").unwrap();
    assert_eq!(next_domains(&rx), ["three"]);
}

#[test]
fn rename_over_the_file_is_noticed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    fs::write(&file, "domain: one\n").unwrap();
    let (_watcher, rx) = start(&file, events_only());
    let tmp = dir.path().join(".rules.yaml.swp");
    fs::write(&tmp, "domain: renamed\n").unwrap();
    fs::rename(&tmp, &file).unwrap();
    assert_eq!(next_domains(&rx), ["renamed"]);
}

#[test]
fn files_added_and_removed_in_a_directory_are_noticed() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a.yaml"), "domain: a\n").unwrap();
    let (_watcher, rx) = start(dir.path(), events_only());
    fs::write(dir.path().join("b.yaml"), "domain: b\n").unwrap();
    assert_eq!(next_domains(&rx), ["a", "b"]);
    fs::remove_file(dir.path().join("a.yaml")).unwrap();
    assert_eq!(next_domains(&rx), ["b"]);
}

#[cfg(unix)]
#[test]
fn a_configmap_symlink_swap_is_noticed() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let publish = |version: &str, text: &str| {
        fs::create_dir(root.join(version)).unwrap();
        fs::write(root.join(version).join("rules.yaml"), text).unwrap();
        let tmp = root.join("..data_tmp");
        symlink(version, &tmp).unwrap();
        fs::rename(&tmp, root.join("..data")).unwrap();
    };
    publish("..2024_01_01_00_00_00.1", "domain: v1\n");
    symlink("..data/rules.yaml", root.join("rules.yaml")).unwrap();
    assert_eq!(RuleSet::load(root).unwrap().domains().count(), 1);

    let (_watcher, rx) = start(root, events_only());
    publish("..2024_01_02_00_00_00.2", "domain: v2\n");
    fs::remove_dir_all(root.join("..2024_01_01_00_00_00.1")).unwrap();
    assert_eq!(next_domains(&rx), ["v2"]);

    // Watching the file path (a link through `..data`) works too.
    let (_file_watcher, file_rx) = start(&root.join("rules.yaml"), events_only());
    publish("..2024_01_03_00_00_00.3", "domain: v3\n");
    assert_eq!(next_domains(&file_rx), ["v3"]);
}

#[test]
fn polling_alone_converges() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    fs::write(&file, "domain: one\n").unwrap();
    let options = WatchOptions {
        poll_interval: Duration::from_millis(50),
        events: false,
        ..WatchOptions::default()
    };
    let (_watcher, rx) = start(&file, options);
    fs::write(&file, "domain: polled\n").unwrap();
    assert_eq!(next_domains(&rx), ["polled"]);
}

#[test]
fn unchanged_content_is_not_reported_and_drop_stops_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.yaml");
    fs::write(&file, "domain: same\n").unwrap();
    let options = WatchOptions {
        poll_interval: Duration::from_millis(20),
        ..WatchOptions::default()
    };
    let (watcher, rx) = start(&file, options);
    // Rewriting the same bytes (an event, and a new mtime) is no change.
    fs::write(&file, "domain: same\n").unwrap();
    // A real change afterwards is the first thing reported.
    fs::write(&file, "domain: different\n").unwrap();
    assert_eq!(next_domains(&rx), ["different"]);
    drop(watcher);
    // The thread has ended, so the callback (and its sender) are gone.
    assert!(rx.recv_timeout(TIMEOUT).is_err());
}

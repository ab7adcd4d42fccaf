//! Watching a rules file or directory and reloading it when its content
//! changes.
//!
//! A [`RulesWatcher`] runs one thread. It listens to filesystem events
//! (through `notify`) on the rules directory — or the file's parent
//! directory — and on the directory's parent, which covers in-place writes,
//! an editor's write-to-temp-and-rename, files added or removed, and a
//! Kubernetes ConfigMap's atomic `..data` symlink swap. Events can be
//! missed (network filesystems, a swap deeper than the watched levels), so
//! it also polls: every [`WatchOptions::poll_interval`] it reads all rules
//! files through their symlinks and compares a hash of their content.
//!
//! Either way, a change is acted on only after
//! [`WatchOptions::debounce`] without further events, and `on_change` is
//! called only when the content hash differs from the last one reported:
//! with the newly loaded [`RuleSet`], or with the [`RulesError`] that
//! prevented loading it (the caller keeps its previous rules and says
//! why). The load parses exactly the bytes that were hashed.
//!
//! This module owns the thread and the change detection; what a load
//! accepts is `ruleset` and `parse`.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use notify::{EventKind, RecursiveMode, Watcher};

use crate::error::RulesError;
use crate::ruleset::{read_snapshot, LoadOptions, RuleSet};

/// How a [`RulesWatcher`] looks for changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchOptions {
    /// How often to re-read and hash every rules file regardless of events
    /// (default 1 s).
    pub poll_interval: Duration,
    /// How long to wait after the last event before reloading, so a burst
    /// of writes loads once (default 100 ms).
    pub debounce: Duration,
    /// Whether to listen to filesystem events at all (default true);
    /// without them changes are found by polling alone.
    pub events: bool,
    /// How each new content is loaded (default: domains not merged).
    pub load: LoadOptions,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            poll_interval: Duration::from_secs(1),
            debounce: Duration::from_millis(100),
            events: true,
            load: LoadOptions::default(),
        }
    }
}

/// Watches a rules path on a background thread and calls `on_change` with
/// each new content's [`RuleSet`] (or its load error). Dropping it stops and
/// joins the thread.
///
/// The content present when the watcher starts is the baseline and is not
/// reported; start the watcher, then load the rules, so that no change can
/// fall between the two (at worst the same content is loaded twice).
///
/// ```
/// use std::sync::mpsc;
/// use std::time::Duration;
/// use tollgate_rules::watch::RulesWatcher;
///
/// let dir = tempfile::tempdir().unwrap();
/// let file = dir.path().join("rules.yaml");
/// std::fs::write(&file, "domain: one\n").unwrap();
///
/// let (tx, rx) = mpsc::channel();
/// let _watcher = RulesWatcher::spawn(&file, move |loaded| {
///     let _ = tx.send(loaded);
/// });
/// std::fs::write(&file, "domain: two\n").unwrap();
/// let rules = rx.recv_timeout(Duration::from_secs(30)).unwrap().unwrap();
/// assert!(rules.domain("two").is_some());
/// ```
#[derive(Debug)]
pub struct RulesWatcher {
    stop: Sender<Message>,
    thread: Option<JoinHandle<()>>,
    events: Option<notify::RecommendedWatcher>,
}

enum Message {
    Changed,
    Stop,
}

impl RulesWatcher {
    /// Watches `path` (a rules file or directory) with default options.
    pub fn spawn(
        path: impl AsRef<Path>,
        on_change: impl FnMut(Result<RuleSet, RulesError>) + Send + 'static,
    ) -> RulesWatcher {
        Self::spawn_with(path, WatchOptions::default(), on_change)
    }

    /// Watches `path` with `options`. If filesystem events cannot be set up
    /// (no inotify instances left, say), the watcher polls only.
    pub fn spawn_with(
        path: impl AsRef<Path>,
        options: WatchOptions,
        on_change: impl FnMut(Result<RuleSet, RulesError>) + Send + 'static,
    ) -> RulesWatcher {
        let path = path.as_ref().to_path_buf();
        let (tx, rx) = mpsc::channel();
        let baseline = content_hash(&path);
        let events = if options.events {
            listen(&path, tx.clone())
        } else {
            None
        };
        let mut state = State {
            path,
            options,
            last: baseline,
            on_change,
        };
        let thread = std::thread::Builder::new()
            .name("tollgate-rules-watch".into())
            .spawn(move || state.run(&rx))
            .ok();
        RulesWatcher {
            stop: tx,
            thread,
            events,
        }
    }
}

impl Drop for RulesWatcher {
    fn drop(&mut self) {
        self.events = None;
        let _ = self.stop.send(Message::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sets up filesystem events for `path`; `None` if the platform refuses.
fn listen(path: &Path, tx: Sender<Message>) -> Option<notify::RecommendedWatcher> {
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reads (our own included) are not changes; a closed writer is.
        let relevant = match event {
            Ok(e) => match e.kind {
                EventKind::Access(notify::event::AccessKind::Close(
                    notify::event::AccessMode::Write,
                )) => true,
                EventKind::Access(_) => false,
                _ => true,
            },
            Err(_) => true,
        };
        if relevant {
            let _ = tx.send(Message::Changed);
        }
    })
    .ok()?;
    let dir = if path.is_dir() {
        Some(path.to_path_buf())
    } else {
        None
    };
    let parent = absolute_parent(path);
    let mut watching = false;
    for target in dir.iter().chain(parent.iter()) {
        watching |= watcher.watch(target, RecursiveMode::NonRecursive).is_ok();
    }
    watching.then_some(watcher)
}

fn absolute_parent(path: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    absolute.parent().map(Path::to_path_buf)
}

/// The hash of a rules path's content, or of the error reading it.
fn content_hash(path: &Path) -> u64 {
    let mut hasher = DefaultHasher::new();
    match read_snapshot(path) {
        Ok(snapshot) => snapshot.hash(&mut hasher),
        Err(e) => e.to_string().hash(&mut hasher),
    }
    hasher.finish()
}

struct State<F> {
    path: PathBuf,
    options: WatchOptions,
    last: u64,
    on_change: F,
}

impl<F: FnMut(Result<RuleSet, RulesError>)> State<F> {
    fn run(&mut self, rx: &mpsc::Receiver<Message>) {
        let debounce = self.options.debounce;
        let mut next_poll = Instant::now() + self.options.poll_interval;
        // When a change was seen: (first event, last event).
        let mut pending: Option<(Instant, Instant)> = None;
        loop {
            let now = Instant::now();
            let deadline = match pending {
                // Settle after a quiet spell, but never wait more than ten.
                Some((first, last)) => (last + debounce).min(first + debounce * 10),
                None => next_poll,
            };
            match rx.recv_timeout(deadline.saturating_duration_since(now)) {
                Ok(Message::Changed) => {
                    let now = Instant::now();
                    pending = Some(pending.map_or((now, now), |(first, _)| (first, now)));
                }
                Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => {
                    if pending.take().is_some() {
                        self.reload();
                    } else {
                        next_poll = Instant::now() + self.options.poll_interval;
                        // The poll found something: let it settle first.
                        if content_hash(&self.path) != self.last {
                            let now = Instant::now();
                            pending = Some((now, now));
                        }
                    }
                }
            }
        }
    }

    /// Re-reads the rules and reports them if their content changed.
    fn reload(&mut self) {
        let mut hasher = DefaultHasher::new();
        let loaded = match read_snapshot(&self.path) {
            Ok(snapshot) => {
                snapshot.hash(&mut hasher);
                RuleSet::from_snapshot(&snapshot, self.options.load)
            }
            Err(e) => {
                e.to_string().hash(&mut hasher);
                Err(e)
            }
        };
        let hash = hasher.finish();
        if hash != self.last {
            self.last = hash;
            (self.on_change)(loaded);
        }
    }
}

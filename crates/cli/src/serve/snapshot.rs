//! The memory store's snapshot file: loaded at start (never fatal), saved
//! atomically on shutdown and periodically.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use tollgate_memory::{MemoryConfig, MemoryStore};

/// How loading went, for the log and the `snapshot_loads` metric.
#[derive(Debug)]
pub enum Loaded {
    /// Restored.
    Ok,
    /// No file yet: a first start.
    Missing,
    /// The file could not be read or is not a valid snapshot.
    Failed(String),
}

impl Loaded {
    /// The metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Loaded::Ok => "ok",
            Loaded::Missing => "missing",
            Loaded::Failed(_) => "failed",
        }
    }
}

/// The store saved at `path`, or an empty one (with the reason) when there
/// is none or it cannot be used. States expired at `now` are left out.
pub fn load(path: &Path, config: MemoryConfig, now: u64) -> (MemoryStore, Loaded) {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return (MemoryStore::new(config), Loaded::Missing);
        }
        Err(e) => {
            return (
                MemoryStore::new(config),
                Loaded::Failed(format!("{}: {e}", path.display())),
            );
        }
    };
    match MemoryStore::from_snapshot(config, &bytes, now) {
        Ok(store) => (store, Loaded::Ok),
        Err(e) => (
            MemoryStore::new(config),
            Loaded::Failed(format!("{}: {e}", path.display())),
        ),
    }
}

/// Writes `store` to `path` atomically: to `PATH.tmp` (owner-only
/// permissions: the snapshot holds the fingerprint seed), flushed to disk,
/// renamed over `path`, and the directory flushed, so a crash at any point
/// leaves either the old snapshot or the new one.
pub fn save(store: &MemoryStore, path: &Path, now: u64) -> io::Result<usize> {
    let bytes = store.snapshot(now);
    let tmp = temporary(path);
    let mut file = create_private(&tmp)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // Flushing the directory makes the rename itself durable; not every
        // platform can open a directory, and failing to is not fatal.
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    Ok(bytes.len())
}

fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

fn create_private(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::{AlgorithmName, Limit, Rate};

    #[test]
    fn saves_atomically_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.snap");
        let (store, loaded) = load(&path, MemoryConfig::default(), 0);
        assert!(matches!(loaded, Loaded::Missing));
        let limit = Limit::new(AlgorithmName::FixedWindow, Rate::per_minute(10).unwrap());
        store.limiter(&limit).unwrap().check(b"k", 0, 7).unwrap();
        save(&store, &path, 0).unwrap();
        assert!(!temporary(&path).exists());
        let (restored, loaded) = load(&path, MemoryConfig::default(), 0);
        assert!(matches!(loaded, Loaded::Ok));
        assert_eq!(
            restored
                .limiter(&limit)
                .unwrap()
                .check(b"k", 0, 0)
                .unwrap()
                .remaining,
            3
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
    }

    #[test]
    fn a_corrupt_file_gives_an_empty_store_and_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.snap");
        fs::write(&path, b"not a snapshot").unwrap();
        let (store, loaded) = load(&path, MemoryConfig::default(), 0);
        assert!(store.is_empty());
        let Loaded::Failed(reason) = loaded else {
            panic!("{loaded:?}")
        };
        assert!(reason.contains("state.snap"), "{reason}");
    }
}

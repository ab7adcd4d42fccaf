//! [`redis_module`]: the path of tollgate's Redis module
//! (`libtollgate_redis.so`), built for the tests that load it.
//!
//! A test binary cannot depend on a `cdylib`, so the first test that needs
//! the module asks cargo to build it (`cargo build -p
//! tollgate-redis-module`, the profile and target directory of the running
//! test), once per test process: a clean clone's `cargo test --workspace`
//! gets a module built from the same sources. Cargo holds its build lock
//! only while compiling, not while the tests run, so this waits for no one.
//! `TOLLGATE_REDIS_MODULE` names a module built elsewhere instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The module's path, built on first use (see the module docs). Panics with
/// cargo's exit status when the build fails.
pub fn redis_module() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        if let Some(path) = std::env::var_os("TOLLGATE_REDIS_MODULE") {
            return PathBuf::from(path);
        }
        build()
    })
    .clone()
}

fn build() -> PathBuf {
    // The test runs from <target>/<profile>/deps/.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("a test binary in <target>/<profile>/deps");
    let target = profile_dir.parent().expect("a target directory");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a profile directory");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&workspace)
        .args(["build", "--quiet", "-p", "tollgate-redis-module"])
        .arg("--target-dir")
        .arg(target);
    match profile {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    let status = command.status().expect("cargo runs");
    assert!(
        status.success(),
        "building tollgate-redis-module failed: {status}"
    );
    let path = profile_dir.join("libtollgate_redis.so");
    assert!(path.exists(), "no module at {}", path.display());
    path
}

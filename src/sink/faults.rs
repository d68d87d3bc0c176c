//! Test-only fault injection for the commit paths, switched on by environment variables that
//! only the fault suite (`tests/it/fault.rs`) sets. Never set them in production: they make etl
//! kill itself, stop, or pretend the file system lacks `RENAME_EXCHANGE`.
//!
//! - `ETL_TEST_NO_RENAME_EXCHANGE=1`: the directory exchange reports `EINVAL`, as on NFS, SMB
//!   and many FUSE file systems, so the two-rename fallback runs.
//! - `ETL_TEST_KILL_AT=POINT`: the process sends itself `SIGKILL` at `POINT`, exactly as an
//!   outside `kill -9` would land there.
//! - `ETL_TEST_PAUSE_AT=POINT` with `ETL_TEST_PAUSE_FILE=PATH`: at `POINT` the process creates
//!   `PATH.reached`, then waits (at most two minutes) until `PATH` exists, so a test can order
//!   two runs or read an output at an exact step.
//!
//! The points are named where they are called ([`point`]); each names the step just completed.
//! This module decides nothing about outputs and never runs unless a variable names a point.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

struct Faults {
    kill_at: Option<String>,
    pause_at: Option<(String, PathBuf)>,
    no_rename_exchange: bool,
}

fn faults() -> &'static Faults {
    static F: OnceLock<Faults> = OnceLock::new();
    F.get_or_init(|| {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        Faults {
            kill_at: var("ETL_TEST_KILL_AT"),
            pause_at: var("ETL_TEST_PAUSE_AT").zip(var("ETL_TEST_PAUSE_FILE").map(PathBuf::from)),
            no_rename_exchange: var("ETL_TEST_NO_RENAME_EXCHANGE").is_some_and(|v| v == "1"),
        }
    })
}

/// Whether the directory exchange must report `EINVAL` (test-only).
pub fn no_rename_exchange() -> bool {
    faults().no_rename_exchange
}

/// A named step of a commit: kills or pauses the process when a test asked for it.
pub fn point(name: &str) {
    let f = faults();
    if f.kill_at.as_deref() == Some(name) {
        // SAFETY: raise has no memory-safety preconditions; SIGKILL ends the process here.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
    if let Some((at, file)) = &f.pause_at
        && at == name
    {
        let mut reached = file.clone().into_os_string();
        reached.push(".reached");
        let _ = std::fs::write(&reached, name);
        let start = Instant::now();
        while !file.exists() && start.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

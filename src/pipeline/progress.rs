//! Live counters a run adds to and a front end (the CLI's progress bar) reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Resolving = 0,
    Reading = 1,
    Writing = 2,
    Committing = 3,
    Done = 4,
}

/// Counters of a run in progress; the pipeline only ever adds to them.
#[derive(Debug, Default)]
pub struct Progress {
    /// Stored bytes of every input, once resolved.
    pub total_bytes: AtomicU64,
    /// Stored bytes read so far (shared with the framers' hashing readers).
    pub bytes: Arc<AtomicU64>,
    pub items: AtomicU64,
    pub rejects: AtomicU64,
    phase: AtomicU8,
}

impl Progress {
    pub fn set_phase(&self, p: Phase) {
        self.phase.store(p as u8, Ordering::Relaxed);
    }

    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            1 => Phase::Reading,
            2 => Phase::Writing,
            3 => Phase::Committing,
            4 => Phase::Done,
            _ => Phase::Resolving,
        }
    }
}

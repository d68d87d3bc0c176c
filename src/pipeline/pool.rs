//! One worker pool for every parallel pass: a fixed number of threads take numbered tasks in
//! order, each worker keeps its own state, and the first error that *caused* a stop is the one
//! returned.
//!
//! When a task fails, the pool raises a stop flag; other workers notice it between tasks or at
//! their own check points ([`Stop::check`]) and end with their error type's cancellation value,
//! which the pool never reports. A panicking worker is turned into the error type's internal
//! error, in the order it happened, so a panic after another worker's real failure does not hide
//! it either.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// What the pool needs of a pass's error type.
pub trait PoolError: Send + Sized {
    /// The value a worker ends with when it stopped because another failed.
    fn cancelled() -> Self;
    fn is_cancelled(&self) -> bool;
    /// A worker panicked: a bug, reported as an internal error.
    fn panicked(message: String) -> Self;
}

/// The pool's stop flag, shared by every worker.
#[derive(Debug, Default)]
pub struct Stop(AtomicBool);

impl Stop {
    /// `Err(cancelled)` once another worker has failed.
    pub fn check<E: PoolError>(&self) -> Result<(), E> {
        if self.0.load(Ordering::Relaxed) { Err(E::cancelled()) } else { Ok(()) }
    }

    fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs tasks `0..tasks` on up to `workers` threads. Each worker starts from `init(worker)` and
/// calls `task(&mut state, task_index, &stop)` for the tasks it takes, in increasing order.
/// Returns every worker's final state in worker order, or the first error that caused a stop.
pub fn run<S, E>(
    workers: usize,
    tasks: usize,
    init: impl Fn(usize) -> Result<S, E> + Sync,
    task: impl Fn(&mut S, usize, &Stop) -> Result<(), E> + Sync,
) -> Result<Vec<S>, E>
where
    S: Send,
    E: PoolError,
{
    let workers = workers.max(1).min(tasks.max(1));
    let next = AtomicUsize::new(0);
    let stop = Stop::default();
    let first: Mutex<Option<E>> = Mutex::new(None);
    let fail = |e: E| {
        if e.is_cancelled() {
            return;
        }
        let mut slot = first.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        stop.raise();
    };
    let states: Vec<Option<S>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (next, stop, init, task, fail) = (&next, &stop, &init, &task, &fail);
                s.spawn(move || {
                    let body = || -> Result<S, E> {
                        let mut state = init(w)?;
                        loop {
                            stop.check::<E>()?;
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= tasks {
                                return Ok(state);
                            }
                            task(&mut state, i, stop)?;
                        }
                    };
                    match std::panic::catch_unwind(AssertUnwindSafe(body)) {
                        Ok(Ok(state)) => Some(state),
                        Ok(Err(e)) => {
                            fail(e);
                            None
                        }
                        Err(panic) => {
                            fail(E::panicked(panic_message(panic.as_ref(), "a worker panicked")));
                            None
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(None)).collect()
    });
    if let Some(e) = first.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    // Without a recorded failure every worker returned its state.
    states.into_iter().map(|s| s.ok_or_else(|| E::panicked("a worker ended without a result".into()))).collect()
}

/// What a panic said (its payload, when a string), or `otherwise`.
pub fn panic_message(panic: &(dyn std::any::Any + Send), otherwise: &str) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| otherwise.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    enum TestError {
        Data(usize),
        Cancelled,
        Bug(String),
    }

    impl PoolError for TestError {
        fn cancelled() -> Self {
            TestError::Cancelled
        }
        fn is_cancelled(&self) -> bool {
            *self == TestError::Cancelled
        }
        fn panicked(message: String) -> Self {
            TestError::Bug(message)
        }
    }

    #[test]
    fn every_task_runs_once_and_states_come_back_in_worker_order() {
        let states = run(
            3,
            100,
            |w| Ok::<_, TestError>((w, Vec::new())),
            |s, i, _| {
                s.1.push(i);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(states.iter().map(|s| s.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        let mut all: Vec<usize> = states.into_iter().flat_map(|s| s.1).collect();
        all.sort();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn the_causing_error_wins_over_cancellations() {
        // Task 7 fails; the other workers are busy in long tasks that check the stop flag, so
        // they end cancelled. Whatever the thread count, the failure is what comes back.
        for workers in 1..=4 {
            let got = run(
                workers,
                20,
                |_| Ok(()),
                |_, i, stop| {
                    if i == 7 {
                        return Err(TestError::Data(7));
                    }
                    for _ in 0..50 {
                        stop.check()?;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Ok(())
                },
            );
            assert_eq!(got.unwrap_err(), TestError::Data(7), "{workers} workers");
        }
    }

    #[test]
    fn a_panic_is_an_internal_error_not_a_crash() {
        let got = run(2, 4, |_| Ok(()), |_, i, _| if i == 2 { panic!("boom {i}") } else { Ok::<_, TestError>(()) });
        assert_eq!(got.unwrap_err(), TestError::Bug("boom 2".into()));
    }
}

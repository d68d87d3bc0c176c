//! The progress bar: bytes, items, rate and ETA on stderr, hidden when stderr is not a terminal
//! or with `--quiet`.

use std::io::IsTerminal as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::Printer;
use crate::pipeline::progress::{Phase, Progress};

/// Runs `work` while a thread draws `progress` (when stderr is a terminal and not quiet).
pub fn with_progress_bar<T: Send>(printer: &Printer, progress: &Progress, work: impl FnOnce() -> T + Send) -> T {
    if printer.quiet() || !std::io::stderr().is_terminal() {
        return work();
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix:9} [{bar:30}] {bytes}/{total_bytes} {msg} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = std::time::Instant::now();
            while !done.load(Ordering::Relaxed) {
                bar.set_length(progress.total_bytes.load(Ordering::Relaxed));
                bar.set_position(progress.bytes.load(Ordering::Relaxed));
                let items = progress.items.load(Ordering::Relaxed);
                let rate = items as f64 / start.elapsed().as_secs_f64().max(0.001);
                bar.set_prefix(match progress.phase() {
                    Phase::Reading => "reading",
                    Phase::Writing => "writing",
                    Phase::Committing => "committing",
                    _ => "starting",
                });
                bar.set_message(format!(
                    "{} items ({}/s), {} rejects",
                    super::printer::group(items),
                    super::printer::group(rate as u64),
                    super::printer::group(progress.rejects.load(Ordering::Relaxed))
                ));
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        let out = work();
        done.store(true, Ordering::Relaxed);
        out
    })
}

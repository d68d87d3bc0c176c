//! The performance floor for reading an export: gunzip every data file and parse every line into
//! a `sonic_rs::Value`, and nothing else (no typing, no Arrow, no Parquet).
//!
//! `etl unwind` cannot beat this; `bench/run.sh` reports etl's throughput as a fraction of it.
//! Files are spread over `FLOOR_THREADS` threads (default: available parallelism). Prints
//! `lines=<n> bytes=<decompressed bytes> secs=<wall>` to stdout.
//!
//! ```text
//! cargo run --release --example floor -- export/AWSDynamoDB/*/data/*.json.gz
//! ```

// A measuring tool: its result goes to stdout, its errors to stderr, without the printer.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used)]

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use flate2::read::MultiGzDecoder;

const BUF: usize = 1 << 20;

/// Errors are messages: this is a measuring tool, not a library.
type Result<T> = std::result::Result<T, String>;

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    lines: u64,
    bytes: u64,
}

fn read_file(path: &Path) -> Result<Counts> {
    let file = File::open(path).map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
    let gz = MultiGzDecoder::new(BufReader::with_capacity(BUF, file));
    let mut reader = BufReader::with_capacity(BUF, gz);
    let mut line = Vec::with_capacity(4096);
    let mut counts = Counts::default();
    loop {
        line.clear();
        let n =
            reader.read_until(b'\n', &mut line).map_err(|e| format!("cannot decompress `{}`: {e}", path.display()))?;
        if n == 0 {
            return Ok(counts);
        }
        counts.bytes += n as u64;
        let json = line.strip_suffix(b"\n").unwrap_or(&line);
        if json.is_empty() {
            continue;
        }
        let value: sonic_rs::Value = sonic_rs::from_slice(json)
            .map_err(|e| format!("line {} of `{}` is not JSON: {e}", counts.lines + 1, path.display()))?;
        std::hint::black_box(&value);
        counts.lines += 1;
    }
}

fn threads() -> Result<usize> {
    match std::env::var("FLOOR_THREADS") {
        Ok(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("FLOOR_THREADS must be a positive integer, got `{v}`")),
        },
        Err(_) => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

fn run(files: &[PathBuf]) -> Result<(Counts, f64)> {
    let threads = threads()?.min(files.len());
    let next = AtomicUsize::new(0);
    let start = Instant::now();
    let per_thread: Vec<Result<Counts>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut total = Counts::default();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(path) = files.get(i) else {
                            return Ok(total);
                        };
                        let c = read_file(path)?;
                        total.lines += c.lines;
                        total.bytes += c.bytes;
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    let mut total = Counts::default();
    for c in per_thread {
        let c = c?;
        total.lines += c.lines;
        total.bytes += c.bytes;
    }
    Ok((total, start.elapsed().as_secs_f64()))
}

fn main() -> ExitCode {
    let files: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if files.is_empty() {
        eprintln!("usage: floor FILE.json.gz...");
        return ExitCode::from(2);
    }
    match run(&files) {
        Ok((c, secs)) => {
            println!("lines={} bytes={} secs={secs:.3}", c.lines, c.bytes);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

//! The printer: the one way `etl` writes to stdout and stderr.
//!
//! It owns both streams and the quiet and colour settings. stdout carries data only (query
//! results, drafted mappings, ARNs, listings), buffered; a reader that closes the pipe early
//! (`etl sql … | head -1`) has what it wanted, so that ends the output as a success, never a
//! panic. stderr carries progress, warnings, the summary and errors; a write to it that fails (a
//! closed pipe, a full device) is dropped, because the run's outcome is its exit status and a
//! message nobody can read must not turn a published output into a crash. No other code in `etl`
//! prints.

use std::io::{self, BufWriter, IsTerminal as _, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::table::{Align, Table};
use crate::pipeline::UnwindSummary;

#[derive(Debug, Clone)]
pub struct Printer {
    quiet: bool,
    color: bool,
    /// Set when a write to stdout met a closed pipe.
    stdout_closed: Arc<AtomicBool>,
}

impl Printer {
    pub fn new(quiet: bool) -> Self {
        let color = io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Printer { quiet, color, stdout_closed: Arc::default() }
    }

    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// stdout for data, buffered; end it with [`Stdout::finish`].
    pub fn stdout(&self) -> Stdout<'_> {
        let tracked = Tracked { out: io::stdout(), closed: &self.stdout_closed };
        Stdout { out: BufWriter::with_capacity(64 << 10, tracked), closed: &self.stdout_closed }
    }

    /// Whether the reader of stdout closed it: every later write to stdout fails, and the command
    /// has nothing left to do but succeed.
    pub fn stdout_closed(&self) -> bool {
        self.stdout_closed.load(Ordering::Relaxed)
    }

    /// Writes `text` to stdout as data and flushes it; `Ok` also when the reader closed the pipe.
    pub fn data(&self, text: &str) -> io::Result<()> {
        let mut out = self.stdout();
        let written = out.write_all(text.as_bytes());
        out.finish(written)
    }

    /// Human text on stderr; a failed write is dropped (see the module documentation).
    fn stderr(&self, text: &str) {
        let mut err = io::stderr().lock();
        let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
    }

    fn label(&self, text: &str, ansi: &str) -> String {
        if self.color { format!("\x1b[{ansi}m{text}\x1b[0m") } else { text.to_owned() }
    }

    /// A line of progress or outcome, unless quiet.
    pub fn info(&self, msg: &str) {
        if !self.quiet {
            self.stderr(&format!("{msg}\n"));
        }
    }

    pub fn warn(&self, msg: &str) {
        if !self.quiet {
            self.stderr(&format!("{}: {msg}\n", self.label("warning", "1;33")));
        }
    }

    /// An error (shown even when quiet) and its hint.
    pub fn error(&self, msg: &str, hint: Option<&str>) {
        let mut text = format!("{}: {msg}\n", self.label("error", "1;31"));
        if let Some(h) = hint {
            text.push_str(&format!("{}: {h}\n", self.label("hint", "1;36")));
        }
        self.stderr(&text);
    }

    /// Every problem of a mapping file or an imported model, as the loader renders them (each
    /// with its own `error:` and `hint:` lines).
    pub fn mapping_errors(&self, e: &dyn std::fmt::Display) {
        self.stderr(&format!("{e}\n"));
    }

    /// An error with its causes, one per line, and a hint.
    pub fn error_chain(&self, e: &dyn std::error::Error, hint: Option<&str>) {
        let mut out = format!("{}: {e}", self.label("error", "1;31"));
        let mut source = e.source();
        while let Some(s) = source {
            let text = s.to_string();
            if !out.contains(&text) {
                out.push_str(&format!("\n  caused by: {text}"));
            }
            source = s.source();
        }
        out.push('\n');
        if let Some(h) = hint {
            out.push_str(&format!("{}: {h}\n", self.label("hint", "1;36")));
        }
        self.stderr(&out);
    }

    /// The schema drift a run refused, on stderr (shown even when quiet: it explains the error).
    pub fn drift(&self, d: &crate::schema::diff::Drift) {
        self.stderr(&format!("schema drift ({}):\n{d}", d.counts()));
    }

    /// What one shard of a sharded run did, and what comes next.
    pub fn shard_summary(&self, s: &crate::pipeline::shard::ShardSummary, out: &str) {
        use crate::pipeline::shard::ShardPhase;
        if self.quiet {
            return;
        }
        let shard = s.run.shard;
        if s.held {
            let next = match s.run.phase {
                ShardPhase::Infer => {
                    format!("`etl unwind … --shard {shard}` (it finds the same), then `etl commit {out}`")
                }
                ShardPhase::Write => format!("`etl commit {out}` once all {} shards have finished", shard.count),
            };
            self.info(&format!(
                "shard {shard}: `{out}` already holds what this run would write; nothing read, nothing written but `{}` for the commit, which checks again and publishes nothing\nnext: {next}",
                s.wrote
            ));
            return;
        }
        let read = format!(
            "shard {shard}: read {} of {} file{} ({}), {} items",
            s.files.len(),
            s.plan_files,
            if s.plan_files == 1 { "" } else { "s" },
            human_bytes(s.bytes),
            group(s.items)
        );
        let text = match s.run.phase {
            ShardPhase::Infer => format!(
                "{read}; their shapes are in `{}` ({:.1} s)\nnext: `etl unwind … --shard {shard}` once every shard's `--phase infer` has finished\n",
                s.wrote,
                s.millis as f64 / 1000.0
            ),
            ShardPhase::Write => format!(
                "{read}; wrote {} rows and {} rejects into `{}` ({:.1} s), not yet visible to readers\nnext: `etl commit {out}` once all {} shards have finished\n",
                group(s.rows),
                group(s.rejects),
                s.wrote,
                s.millis as f64 / 1000.0,
                shard.count
            ),
        };
        self.info(text.trim_end());
    }

    /// The table of what a run wrote, and the reconciliation line.
    pub fn summary(&self, s: &UnwindSummary, out: &str) {
        if self.quiet {
            return;
        }
        let r = &s.report;
        let mut table = Table::new(&[
            ("table", Align::Left),
            ("rows", Align::Right),
            ("columns", Align::Right),
            ("files", Align::Right),
            ("size", Align::Right),
        ]);
        for t in &r.tables {
            table.row([
                t.name.clone(),
                group(t.rows),
                t.columns.to_string(),
                t.files.len().to_string(),
                human_bytes(t.bytes()),
            ]);
        }
        let mut text = table.render();
        let rec = &r.reconciliation;
        let verified = r.inputs.iter().filter(|i| i.md5_check == crate::source::CheckStatus::Verified).count();
        text.push_str(&format!(
            "\nread {} items from {} file{}{}; wrote {} rows and {} rejects: {}\n",
            group(rec.items_read),
            r.inputs.len(),
            if r.inputs.len() == 1 { "" } else { "s" },
            if verified > 0 { format!(" ({verified} verified against the manifest)") } else { String::new() },
            group(rec.rows_written),
            group(rec.rejects),
            if rec.balanced { "every item accounted for" } else { "NOT BALANCED" },
        ));
        match (rec.manifest_item_count, rec.matches_manifest) {
            (Some(m), Some(true)) => text.push_str(&format!("manifest item count {} matches\n", group(m))),
            (Some(m), Some(false)) => {
                text.push_str(&format!("manifest item count {} does NOT match the items read\n", group(m)))
            }
            _ => {}
        }
        if rec.untyped_items > 0 {
            text.push_str(&format!(
                "{} items had no `{}` attribute and went to `_untyped`\n",
                group(rec.untyped_items),
                r.options.type_attribute
            ));
        }
        if !r.widenings.is_empty() {
            text.push_str(&format!("{} columns were widened (see `_etl/run.json`)\n", r.widenings.len()));
        }
        if let Some(c) = &r.chain {
            text.push_str(&chain_summary(c));
        }
        if let Some(d) = r.drift.as_ref().filter(|d| !d.is_empty()) {
            text.push_str(&format!("schema drift from the previous output: {}\n", d.counts()));
            for line in d.to_string().lines() {
                text.push_str(&format!("  {line}\n"));
            }
        }
        let run = s.committed.run_id.as_ref().map(|id| format!(", run `{id}`")).unwrap_or_default();
        text.push_str(&format!("output: {out} ({:.1}s{run})\n", r.timings_ms.total as f64 / 1000.0));
        self.stderr(&text);
    }
}

/// `applied 2 incremental exports to full export `…` (… to …): 11 change records; `users`: 2
/// inserts, 1 update, …`: the chain part of the summary.
fn chain_summary(c: &crate::sink::manifest::ChainReport) -> String {
    let span = match (c.windows.first(), c.windows.last()) {
        (Some(a), Some(b)) => format!(" ({} to {})", a.from_time, b.to_time),
        _ => String::new(),
    };
    // In place the full export is not read again: what a change replaced is counted per table
    // below, from the output's rows, never as the full export's items (0, unread).
    let superseded = if c.applied_in_place {
        "applied in place (the full export not read again)".to_owned()
    } else {
        format!("{} items of the full export replaced or deleted", group(c.superseded_items))
    };
    let counts = format!("{} change records on {} keys, {superseded}", group(c.change_records), group(c.changed_keys));
    let mut text = match (&c.previous_export, c.windows.len()) {
        // The exports named are all held already; the run wrote them again with its options.
        (Some(p), 0) => format!(
            "no new incremental export: the output's exports up to `{p}` (full export `{}`) written again with this run's options: {counts}\n",
            c.full_export
        ),
        (Some(p), n) => format!(
            "applied {n} incremental export{} onto the output holding exports up to `{p}` (full export `{}`){span}: {counts}\n",
            if n == 1 { "" } else { "s" },
            c.full_export
        ),
        (None, n) => format!(
            "applied {n} incremental export{} to full export `{}`{span}: {counts}\n",
            if n == 1 { "" } else { "s" },
            c.full_export
        ),
    };
    for (table, t) in &c.tables {
        let mut parts = vec![
            format!("{} inserts", group(t.inserts)),
            format!("{} updates", group(t.updates)),
            format!("{} deletes", group(t.deletes)),
        ];
        if t.moved_in + t.moved_out > 0 {
            parts.push(format!("{} moved in, {} moved out", group(t.moved_in), group(t.moved_out)));
        }
        if t.unmatched_deletes > 0 {
            parts.push(format!("{} deletes of keys not there", group(t.unmatched_deletes)));
        }
        text.push_str(&format!("  `{table}`: {}\n", parts.join(", ")));
    }
    if c.unmatched_deletes > 0 {
        text.push_str(&format!(
            "  {} deletes of keys that were not there (counted, not an error)\n",
            group(c.unmatched_deletes)
        ));
    }
    if c.superseded_rejects > 0 {
        text.push_str(&format!(
            "  {} reject{} of earlier runs removed from `_rejects`: this run changed the keys of the items rejected\n",
            group(c.superseded_rejects),
            if c.superseded_rejects == 1 { "" } else { "s" }
        ));
    }
    if !c.gaps.is_empty() {
        text.push_str(&format!(
            "  {} gap{} allowed by `--allow-gap` (see the warnings)\n",
            c.gaps.len(),
            if c.gaps.len() == 1 { "" } else { "s" }
        ));
    }
    text
}

/// stdout as data goes out: buffered, and remembering a closed pipe.
///
/// A write after the reader closed the pipe fails with [`io::ErrorKind::BrokenPipe`], so whoever
/// produces the data stops early; [`Stdout::finish`] then turns that into success.
pub struct Stdout<'p> {
    out: BufWriter<Tracked<'p>>,
    closed: &'p AtomicBool,
}

impl Stdout<'_> {
    /// Ends the output: flushes it and says how writing it went, given the outcome of the writes
    /// (`written`). `Ok` when everything was written, or when the reader closed the pipe (it has
    /// what it wanted); the error otherwise (a full disk behind a redirection, say).
    pub fn finish<E: From<io::Error>>(mut self, written: Result<(), E>) -> Result<(), E> {
        let flushed = self.out.flush();
        if self.closed.load(Ordering::Relaxed) {
            return Ok(());
        }
        written?;
        Ok(flushed?)
    }
}

impl Write for Stdout<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.out.write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// stdout, noting a closed pipe by its error kind. (`io::Stdout`, not its lock, so that the
/// Parquet writer, which needs `Send`, can write to it.)
struct Tracked<'p> {
    out: io::Stdout,
    closed: &'p AtomicBool,
}

impl Tracked<'_> {
    fn note<T>(&self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r
            && e.kind() == io::ErrorKind::BrokenPipe
        {
            self.closed.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl Write for Tracked<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.out.write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.out.flush();
        self.note(r)
    }
}

/// `1234567` as `1,234,567`.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(group(0), "0");
        assert_eq!(group(1234567), "1,234,567");
        assert_eq!(group(100), "100");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
    }

    /// A replay counts the full export's items the changes superseded; an apply in place did not
    /// read them, and says so instead of counting none.
    #[test]
    fn an_apply_in_place_does_not_count_the_full_exports_items() {
        let replay = crate::sink::manifest::ChainReport {
            full_export: "F".into(),
            change_records: 3,
            changed_keys: 2,
            superseded_items: 2,
            previous_export: Some("I1".into()),
            windows: vec![crate::sink::manifest::WindowReport {
                export: "I2".into(),
                from_time: "a".into(),
                to_time: "b".into(),
                output_view: None,
                records: 3,
            }],
            ..Default::default()
        };
        let first = |c: &crate::sink::manifest::ChainReport| chain_summary(c).lines().next().unwrap().to_owned();
        assert!(
            first(&replay).ends_with(": 3 change records on 2 keys, 2 items of the full export replaced or deleted"),
            "{}",
            first(&replay)
        );
        let in_place = crate::sink::manifest::ChainReport { superseded_items: 0, applied_in_place: true, ..replay };
        assert!(
            first(&in_place)
                .ends_with(": 3 change records on 2 keys, applied in place (the full export not read again)"),
            "{}",
            first(&in_place)
        );
    }
}

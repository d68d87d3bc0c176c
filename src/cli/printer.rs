//! The printer: owns quiet/verbose and writes human output to stderr.

use std::io::{IsTerminal as _, Write as _};

use super::table::{Align, Table};
use crate::pipeline::UnwindSummary;

#[derive(Debug, Clone)]
pub struct Printer {
    quiet: bool,
    color: bool,
}

impl Printer {
    pub fn new(quiet: bool) -> Self {
        let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        Printer { quiet, color }
    }

    pub fn quiet(&self) -> bool {
        self.quiet
    }

    fn label(&self, text: &str, ansi: &str) -> String {
        if self.color { format!("\x1b[{ansi}m{text}\x1b[0m") } else { text.to_owned() }
    }

    pub fn info(&self, msg: &str) {
        if !self.quiet {
            eprintln!("{msg}");
        }
    }

    pub fn warn(&self, msg: &str) {
        if !self.quiet {
            eprintln!("{}: {msg}", self.label("warning", "1;33"));
        }
    }

    pub fn error(&self, msg: &str, hint: Option<&str>) {
        eprintln!("{}: {msg}", self.label("error", "1;31"));
        if let Some(h) = hint {
            eprintln!("{}: {h}", self.label("hint", "1;36"));
        }
    }

    /// Every problem of a mapping, as the loader renders them (each with its own `error:` and
    /// `hint:` lines).
    pub fn mapping_errors(&self, e: &crate::mapping::file::MappingErrors) {
        eprintln!("{e}");
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
        eprintln!("{out}");
        if let Some(h) = hint {
            eprintln!("{}: {h}", self.label("hint", "1;36"));
        }
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
        let run = s.published.as_ref().map(|p| format!(", run `{}`", p.run_id)).unwrap_or_default();
        text.push_str(&format!("output: {out} ({:.1}s{run})\n", r.timings_ms.total as f64 / 1000.0));
        let _ = std::io::stderr().write_all(text.as_bytes());
    }
}

/// `1234567` as `1,234,567`.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
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
}

//! `etl delta optimize` and `etl delta vacuum` (a folder or an `s3://` prefix): maintenance of a
//! `--format delta` output for long-running jobs. Each prints one line per table on stdout; the
//! work is [`crate::sink::delta::maintain`]'s.

use std::time::Duration;

use clap::{Args, Subcommand};

use super::table::{Align, Table};
use super::{ExitStatus, Printer};
use crate::sink::delta::maintain;
use crate::store::Target;

#[derive(Debug, Subcommand)]
pub enum DeltaCommand {
    /// Compact each Delta table's small data files into files of about `--target-size`, one
    /// commit per table (`dataChange: false`: the rows stay the same), then point
    /// `_etl/run.json` at the new versions. Readers of the previous versions keep reading them.
    Optimize(OptimizeArgs),
    /// Delete the data files no version committed within `--retain` needs: files removed by
    /// merges, replacements and optimizations, and files no commit lists (a killed run's), once
    /// older than the retention period. Readers of versions within the period are unaffected.
    Vacuum(VacuumArgs),
}

#[derive(Debug, Args)]
pub struct OptimizeArgs {
    /// A Delta output (`etl unwind --out DIR|s3://BUCKET/PREFIX --format delta`).
    #[arg(value_name = "DIR|S3_URL")]
    pub out: String,
    #[command(flatten)]
    pub aws: super::aws_args::AwsArgs,
    /// Files smaller than this are compacted into files of about this size (for example
    /// `128M`, `1G`).
    #[arg(long, value_name = "SIZE", default_value = "128M", value_parser = super::sql::parse_size)]
    pub target_size: usize,
}

#[derive(Debug, Args)]
pub struct VacuumArgs {
    /// A Delta output (`etl unwind --out DIR|s3://BUCKET/PREFIX --format delta`).
    #[arg(value_name = "DIR|S3_URL")]
    pub out: String,
    #[command(flatten)]
    pub aws: super::aws_args::AwsArgs,
    /// Keep every file a version committed within this period needs (for example `168h`, `30d`).
    #[arg(long, value_name = "DURATION", default_value = "168h", value_parser = parse_retention)]
    pub retain: Duration,
    /// List the files that would be deleted, and delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Allow a `--retain` shorter than the tables' `delta.deletedFileRetentionDuration` (one
    /// week unless set): a reader of an older version may then find its files gone.
    #[arg(long)]
    pub allow_short_retention: bool,
}

/// `--retain`: a duration as `--timeout` takes it, or whole days (`7d`).
fn parse_retention(s: &str) -> Result<Duration, String> {
    match s.trim().strip_suffix('d').map(str::parse::<u64>) {
        Some(Ok(days)) => Ok(Duration::from_secs(days.saturating_mul(86_400))),
        _ => super::sql::parse_duration(s),
    }
}

/// A failed maintenance: the error with its hint, and exit 1 when another run (an apply holding
/// the folder's lock, or publishing the prefix first) got in the way, 2 otherwise.
fn failed(printer: &Printer, e: &crate::sink::SinkError) -> ExitStatus {
    printer.error_chain(e, e.hint());
    if e.is_concurrent_run() { ExitStatus::Failure } else { ExitStatus::Error }
}

/// The output a maintenance command names, or the error printed.
fn target(given: &str, printer: &Printer) -> Option<Target> {
    match Target::parse(given) {
        Ok(t) => Some(t),
        Err(e) => {
            printer.error(&e.to_string(), e.hint());
            None
        }
    }
}

pub fn run(cmd: DeltaCommand, printer: &Printer) -> ExitStatus {
    let shown = match cmd {
        DeltaCommand::Optimize(a) => {
            let Some(out) = target(&a.out, printer) else { return ExitStatus::Error };
            let props = crate::sink::parquet::writer_properties(crate::pipeline::DEFAULT_ROW_GROUP_ROWS);
            match maintain::optimize(&out, &a.aws.options(), a.target_size as u64, &props) {
                Ok(tables) => {
                    let mut t = Table::new(&[
                        ("table", Align::Left),
                        ("version", Align::Right),
                        ("files removed", Align::Right),
                        ("files added", Align::Right),
                        ("bytes removed", Align::Right),
                        ("bytes added", Align::Right),
                        ("files now", Align::Right),
                    ]);
                    let mut committed = 0;
                    for o in &tables {
                        committed += usize::from(o.version.is_some());
                        t.row([
                            o.table.clone(),
                            o.version.unwrap_or(o.from_version).to_string(),
                            o.files_removed.to_string(),
                            o.files_added.to_string(),
                            o.bytes_removed.to_string(),
                            o.bytes_added.to_string(),
                            o.files_after.to_string(),
                        ]);
                    }
                    printer.info(&format!("compacted {committed} of {} tables, one commit each", tables.len()));
                    t.render()
                }
                Err(e) => return failed(printer, &e),
            }
        }
        DeltaCommand::Vacuum(a) => {
            let Some(out) = target(&a.out, printer) else { return ExitStatus::Error };
            match maintain::vacuum(&out, &a.aws.options(), a.retain, a.dry_run, a.allow_short_retention) {
                Ok(tables) => {
                    let mut t = Table::new(&[("table", Align::Left), ("file", Align::Left)]);
                    let mut n = 0;
                    for v in &tables {
                        for f in &v.files {
                            t.row([v.table.clone(), f.clone()]);
                            n += 1;
                        }
                    }
                    let verb = if a.dry_run { "would delete" } else { "deleted" };
                    printer.info(&format!("{verb} {n} files in {} tables", tables.len()));
                    if n == 0 { String::new() } else { t.render() }
                }
                Err(e) => return failed(printer, &e),
            }
        }
    };
    match printer.data(&shown) {
        Ok(()) => ExitStatus::Success,
        Err(e) => super::stdout_failed(printer, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_in_days_or_as_a_duration() {
        assert_eq!(parse_retention("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_retention("168h"), Ok(Duration::from_secs(168 * 3600)));
        assert_eq!(parse_retention("0s"), Ok(Duration::ZERO));
        assert!(parse_retention("soon").is_err());
    }
}

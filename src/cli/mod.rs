//! The command line: arguments resolved into settings, the printer, progress, exit codes.
//!
//! The only module that knows terminals and exit codes. stdout carries data only (nothing, for
//! `unwind`); progress, warnings, the summary and errors go to stderr.

mod aws_args;
mod ballista;
mod delta;
mod export;
mod mapping;
mod mapping_files;
mod printer;
mod progress;
mod redact;
mod schema;
pub mod settings;
mod sql;
mod table;

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::pipeline::{self, Progress};
use crate::sink::manifest::{RunManifest, Verdict};
use crate::source::integrity::Mismatch;
pub use printer::Printer;

/// What the process exits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Everything worked.
    Success = 0,
    /// The data broke a policy: rejects over `--max-rejects`, an output that does not reconcile
    /// with the export's manifests (without `--allow-mismatch`), or any problem in `--strict` mode.
    Failure = 1,
    /// Usage, configuration or internal error.
    Error = 2,
}

impl From<ExitStatus> for ExitCode {
    fn from(s: ExitStatus) -> Self {
        ExitCode::from(s as u8)
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "etl",
    version,
    about = "Unwind DynamoDB single-table designs into exact analytics tables",
    long_about = "Unwind DynamoDB single-table designs into exact analytics tables.\n\n\
        Reads DynamoDB exports (Export to S3, DynamoDB JSON or Amazon Ion; local or `s3://`), live tables \
        (`dynamodb://TABLE`) and `aws dynamodb scan` output, splits items by their type attribute \
        into one Parquet table per entity (or the tables a `--mapping` file declares, with keys \
        parsed into typed columns), keeps numbers, sets and binary exact, and reconciles every \
        item with the export's manifests.",
    after_help = "Exit status: 0 success; 1 the data or a query broke a policy: the output does not reconcile with the export's manifests (unless --allow-mismatch), or a limit you set (--max-rejects, --strict, --timeout, --memory-limit), or a chain of incremental exports has a gap (unless --allow-gap), or the schema drifted under --on-drift fail; `etl schema diff`: 1 when the schemas differ; 2 usage, input or internal error."
)]
pub struct Cli {
    /// More output on stderr: -v for progress logs per file and table, -vv for debug.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors on stderr: no progress bar, no summary, no warnings.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Unwind exports, live tables or scan output into one Parquet table per entity.
    Unwind(UnwindArgs),
    /// Run SQL over a committed output (one query, `-f FILE`, or an interactive shell).
    Sql(sql::SqlArgs),
    /// Start DynamoDB exports to S3 and list them.
    #[command(subcommand)]
    Export(export::ExportCommand),
    /// Draft a mapping file from the data or import one from an entity model, or check one against
    /// the data.
    #[command(subcommand)]
    Mapping(mapping::MappingCommand),
    /// Write the synthetic e-commerce sample export (for demos, tests and benchmarks).
    Sample(SampleArgs),
    /// Compare the table schema contracts of two outputs.
    #[command(subcommand)]
    Schema(schema::SchemaCommand),
    /// Maintain a Delta output (`--format delta`): compact small files, delete unneeded ones.
    #[command(subcommand)]
    Delta(delta::DeltaCommand),
    /// Publish the shards of a sharded run (`etl unwind … --shard I/N`) as one output, in one
    /// commit, once every shard has finished.
    ///
    /// When the output already holds what the shards read (the same export or chain, with
    /// options that make the same files), nothing is published and the shards are removed: exit
    /// 0, as a re-run of one process is a no-op. (Shards that find the output holding their run
    /// read nothing and leave a note the commit checks.)
    Commit(CommitArgs),
    /// Run the parts of an Apache DataFusion Ballista cluster for `etl sql --ballista`: one
    /// scheduler, and executors on every machine that mounts the outputs (or reads `s3://`).
    #[command(subcommand)]
    Ballista(ballista::BallistaCommand),
}

#[derive(Debug, Args)]
pub struct UnwindArgs {
    /// Inputs: an export folder (holding `AWSDynamoDB/`), an `AWSDynamoDB/<ExportId>` folder,
    /// a `manifest-summary.json`, folders or files of data files (`.json.gz`, `.gz`, `.json`,
    /// `.ion.gz`, `.ion`),
    /// `aws dynamodb scan --output json` output (a file, or `-` for stdin); each also as
    /// `s3://bucket/prefix`; or `dynamodb://TABLE` to scan a live table. A full export with the
    /// incremental exports taken after it (named one by one, or a folder holding them all) gives
    /// the table's current state: the changes are applied in window order, last write wins.
    /// Incremental exports alone, with an `--out` made from exports, are applied onto that output
    /// (it keeps its exports in `_etl/base/`).
    #[arg(required = true, value_name = "SOURCE")]
    pub sources: Vec<String>,
    /// Output folder, written to a staging folder beside it and published atomically; or
    /// `s3://bucket/prefix`, where `_etl/run.json` is written last as the commit record.
    #[arg(long, short, value_name = "DIR|S3_URL")]
    pub out: String,
    /// The attribute whose value names each item's entity [default: `Type`, or the mapping's
    /// `settings.type_attribute`].
    #[arg(long, value_name = "NAME")]
    pub type_attribute: Option<String>,
    /// Mapping files or folders of them (repeatable): declared tables, key templates parsed into
    /// typed columns, child tables. See `mappings/README.md`.
    #[arg(long, value_name = "FILE|DIR")]
    pub mapping: Vec<PathBuf>,
    /// Worker threads for reading and writing [default: number of CPUs].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Fail on the first reject, checksum or count mismatch; nothing is published.
    #[arg(long)]
    pub strict: bool,
    /// Exit with status 0 even when the output does not reconcile with the export's manifests
    /// (items missing or extra, checksums that do not verify). Without it such a run is still
    /// published but exits with 1; either way `_etl/run.json` and the summary report it.
    #[arg(long, conflicts_with = "strict")]
    pub allow_mismatch: bool,
    /// Exit with status 1 when more items than this are rejected (the output is still
    /// published, so the rejects can be inspected).
    #[arg(long, value_name = "N")]
    pub max_rejects: Option<u64>,
    /// Replace `--out` even when it holds files that are not an etl output.
    #[arg(long)]
    pub overwrite: bool,
    /// Reject lines longer than this many bytes without reading them into memory.
    #[arg(long, value_name = "BYTES", default_value_t = pipeline::DEFAULT_MAX_LINE_BYTES)]
    pub max_line_bytes: usize,
    /// Most rows in one Parquet row group.
    #[arg(long, value_name = "ROWS", default_value_t = pipeline::DEFAULT_ROW_GROUP_ROWS, hide_short_help = true)]
    pub row_group_rows: usize,
    /// Roll to a new Parquet part file after this many bytes of item data.
    #[arg(long, value_name = "BYTES", default_value_t = pipeline::DEFAULT_TARGET_FILE_BYTES, hide_short_help = true)]
    pub target_file_bytes: u64,
    /// Parallel scan segments for `dynamodb://TABLE` sources.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub segments: u32,
    /// Strongly consistent reads for `dynamodb://TABLE` sources (twice the read capacity).
    #[arg(long)]
    pub consistent_read: bool,
    /// Read-capacity budget for `dynamodb://TABLE` sources, across all segments.
    #[arg(long, value_name = "RCU")]
    pub max_rcu_per_second: Option<f64>,
    /// Apply incremental exports even when their windows leave a gap after the full export or
    /// between each other (changes made in a gap are missing); the gap is reported. Without it,
    /// a gap is refused with exit status 1.
    #[arg(long)]
    pub allow_gap: bool,
    /// When the tables' schema contracts differ from those of the output being replaced (a
    /// table or column added or gone, a column widened, metadata or nullability changed):
    /// `allow` publishes and lists the drift in the summary and `_etl/run.json`; `fail` refuses
    /// with exit status 1, prints the differences, and leaves the previous output as it was. A
    /// first run (no previous output) has nothing to drift from and is never refused.
    #[arg(long, value_enum, value_name = "POLICY", default_value_t)]
    pub on_drift: OnDriftArg,
    /// What each table under `--out` is: `parquet` (Parquet part files listed by
    /// `_etl/run.json`) or `delta` (a Delta Lake table of the same Parquet files, created or
    /// replaced by one Delta commit per table; incremental exports are merged into each table by
    /// one commit that rewrites only the files holding changed keys; on `s3://` every commit is
    /// a conditional PUT, so no lock table is needed).
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t)]
    pub format: FormatArg,
    /// With `--format delta`: the tables take Delta deletion vectors (table property
    /// `delta.enableDeletionVectors`, protocol reader 3 / writer 7), so merging an incremental
    /// export marks the rows of changed keys deleted in one small file per commit instead of
    /// rewriting every data file that holds one. Readers need deletion-vector support (Spark,
    /// Trino, DuckDB's `delta` extension, deltalake's DataFusion reader and `etl sql`; the Python
    /// `deltalake` package's pyarrow dataset refuses such tables). An output keeps them once a
    /// run asked for them. Either way, incremental exports are applied onto a Delta output in
    /// place: the full export the output keeps is not read again.
    #[arg(long, hide_short_help = true)]
    pub deletion_vectors: bool,
    /// Apply incremental exports onto a Parquet output (a folder or `s3://…`) in place: the full
    /// export the output keeps is not read again, the files holding no changed key are kept as
    /// they are (hard links; server-side copies on S3), the others are rewritten without those
    /// rows (downloaded first from S3), and the changed keys' rows join the rewrite of a
    /// table's last file when it is rewritten anyway or small (else they are a file of their
    /// own). Faster the fewer files hold changed keys; the rows are a replay's, laid out
    /// differently. Without it, an apply replays the full export and its output is the same
    /// bytes as the whole chain unwound in one run. Falls back to the replay, with the reason in
    /// the warnings, when it cannot (a changed value that neither fits its column nor widens it
    /// exactly, as a number into a text column; a mapped table whose key columns may not say
    /// its key back, see `mappings/README.md`; `--shard`).
    #[arg(long, hide_short_help = true)]
    pub in_place: bool,
    /// Process shard I of N (counted from 0) of the export's data files, for a job array: each
    /// shard reads about 1/N of the bytes and writes only under `OUT/_etl/shards/`, invisible to
    /// readers; `etl commit OUT` then publishes all N shards as one run would have written the
    /// output. Run `--phase infer` for every shard first (the shards agree on the tables' types
    /// from it), then the write phase for every shard, then the commit. `--out` is a folder all
    /// shards and the commit see (a shared file system for a job array), or an `s3://` prefix
    /// (the commit copies the shards' files server-side). A full export with its
    /// incremental exports shards as one plan (each shard reads every incremental export). An
    /// output the commit could not publish into (another format's, or not an etl output) is
    /// refused before the shard reads a file.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<crate::source::shard::Shard>,
    /// Which phase of a `--shard` run: `infer` records what the shard's items look like, `write`
    /// (needs every shard's `infer`) writes its rows with the types all shards agreed on.
    #[arg(long, value_enum, value_name = "PHASE", default_value_t, requires = "shard")]
    pub phase: PhaseArg,
    #[command(flatten)]
    pub aws: aws_args::AwsArgs,
}

/// `--phase`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PhaseArg {
    Infer,
    #[default]
    Write,
}

/// `etl commit`.
#[derive(Debug, Args)]
pub struct CommitArgs {
    /// The output the shards wrote to (`--out` of every `etl unwind … --shard I/N`): a folder or
    /// an `s3://` prefix.
    #[arg(value_name = "DIR|S3_URL")]
    pub out: String,
    #[command(flatten)]
    pub aws: aws_args::AwsArgs,
}

/// `--format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    #[default]
    Parquet,
    Delta,
}

/// `--on-drift`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnDriftArg {
    #[default]
    Allow,
    Fail,
}

#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Folder to write the export into (it gets `AWSDynamoDB/<ExportId>/...`).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// About how many items to generate in all.
    #[arg(long, value_name = "N", conflicts_with = "users")]
    pub items: Option<u64>,
    /// Number of users (everything else scales with it) [default: 200].
    #[arg(long, value_name = "N")]
    pub users: Option<u64>,
    /// Number of non-empty data files (one empty file is always added, as AWS does).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub files: usize,
    /// Seed of the generator; the same seed gives the same bytes.
    #[arg(long, value_name = "N", default_value_t = 42)]
    pub seed: u64,
    /// Also write the same items as `aws dynamodb scan` output to this file.
    #[arg(long, value_name = "FILE")]
    pub scan_json: Option<PathBuf>,
    /// Data-file format of the export, as DynamoDB's Export to S3 writes it.
    #[arg(long, value_enum, default_value_t)]
    pub format: export::FormatArg,
    /// Also write N incremental exports after the full one (their data files in the shared
    /// `AWSDynamoDB/data/`), and the table's state at the end of the last one as a full export
    /// in `--final` (with `changes.json`, what the chain changed).
    #[arg(long, value_name = "N")]
    pub incrementals: Option<usize>,
    /// Percent of the table's items each incremental window changes (inserts come on top).
    #[arg(long, value_name = "P", default_value_t = 5.0, requires = "incrementals")]
    pub change_percent: f64,
    /// `outputView` of the incremental exports.
    #[arg(long, value_enum, default_value_t, requires = "incrementals")]
    pub view: ViewArg,
    /// Seconds of gap before the last incremental window (nothing covers them).
    #[arg(long, value_name = "SECONDS", default_value_t = 0, requires = "incrementals")]
    pub gap: u64,
    /// Seconds each incremental window after the first starts before the previous one ends (below 900).
    #[arg(long, value_name = "SECONDS", default_value_t = 0, requires = "incrementals")]
    pub overlap: u64,
    /// Folder for the final state's full export [default: OUT/final].
    #[arg(long = "final", value_name = "DIR", requires = "incrementals", conflicts_with = "no_final")]
    pub final_out: Option<PathBuf>,
    /// Do not write the final state (faster, for benchmark inputs).
    #[arg(long, requires = "incrementals")]
    pub no_final: bool,
}

/// The `outputView` of sample incremental exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ViewArg {
    /// `NEW_AND_OLD_IMAGES`: updates and deletes carry the old image.
    #[default]
    NewAndOldImages,
    /// `NEW_IMAGE`: deletes carry only `Keys`.
    NewImage,
}

/// Entry point of the `etl` binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { ExitStatus::Error } else { ExitStatus::Success };
            let _ = e.print();
            return code.into();
        }
    };
    if matches!(cli.command, Command::Unwind(_)) {
        tune_allocator();
    }
    init_tracing(cli.verbose);
    let printer = Printer::new(cli.quiet);
    if let Some(status) = check_profile(&cli.command, &printer) {
        return status.into();
    }
    let status = match cli.command {
        Command::Unwind(args) => unwind(args, &printer),
        Command::Sql(args) => sql::sql(args, &printer),
        Command::Export(cmd) => export::run(cmd, &printer),
        Command::Mapping(cmd) => mapping::run(cmd, &printer),
        Command::Sample(args) => sample(args, &printer),
        Command::Schema(cmd) => schema::run(cmd, &printer),
        Command::Delta(cmd) => delta::run(cmd, &printer),
        Command::Commit(args) => commit(args, &printer),
        Command::Ballista(cmd) => ballista::run(cmd, &printer),
    };
    status.into()
}

/// glibc's allocator gives every block of 128 KiB and more (a threshold it raises only as far as
/// the largest block freed) its own `mmap`, and returns it on `free`; the heap's free top above
/// 128 KiB goes back too. An unwind allocates and frees buffers of that size all the time (chunks
/// of spilled rows, Arrow builders, Parquet pages), so each one was faulted in and zeroed by the
/// kernel again: 36K page faults and 4.8% of the CPU of a 1M-item unwind. Blocks up to 32 MiB now
/// come from the heap, which keeps up to 128 MiB of free memory at its top: 19K faults, and the
/// unwind 3-4% faster (paired runs, `bench/README.md`). Peak RSS grows a little, since freed
/// blocks are kept for the next chunk to reuse: 7 MiB on a 1M-item unwind, 16 MiB on an apply,
/// 57 MiB on an apply's Delta MERGE. Only `etl unwind` does this: `etl sql`'s
/// three-table join was 11% slower and 70 MiB larger with it (DataFusion grows large buffers,
/// which `mremap` moves without a copy when they are mapped on their own). A user's
/// `GLIBC_TUNABLES` for malloc wins.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
            return;
        }
        // SAFETY: `mallopt` only sets allocator parameters; called in `main` before any thread
        // exists. A refused setting (return 0) leaves glibc's default, which is correct.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
        }
    }
}

/// The command's `--profile`, if it names one no shared file defines: the error, printed, and
/// exit status 2 (before anything runs, so no other credentials are used instead).
fn check_profile(command: &Command, printer: &Printer) -> Option<ExitStatus> {
    let aws = match command {
        Command::Unwind(a) => &a.aws,
        Command::Sql(a) => &a.aws,
        Command::Export(export::ExportCommand::Start(a)) => &a.aws,
        Command::Export(export::ExportCommand::List(a)) => &a.aws,
        Command::Mapping(mapping::MappingCommand::Infer(a)) => &a.aws,
        Command::Mapping(mapping::MappingCommand::Check(a)) => &a.aws,
        Command::Schema(schema::SchemaCommand::Diff(a)) => &a.aws,
        Command::Commit(a) => &a.aws,
        Command::Mapping(mapping::MappingCommand::Import(_))
        | Command::Sample(_)
        | Command::Delta(_)
        | Command::Ballista(_) => return None,
    };
    aws.profile.as_ref()?;
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            printer.error(&format!("cannot start the async runtime: {e}"), None);
            return Some(ExitStatus::Error);
        }
    };
    let e = runtime.block_on(aws.options().check_profile()).err()?;
    printer.error(&e.to_string(), e.hint().as_deref());
    Some(ExitStatus::Error)
}

/// Reports a write to stdout that failed for another reason than a closed pipe (which is success).
fn stdout_failed(printer: &Printer, e: &std::io::Error) -> ExitStatus {
    printer.error(&format!("cannot write to stdout: {e}"), None);
    ExitStatus::Error
}

fn init_tracing(verbose: u8) {
    let level = match verbose {
        0 => "error",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("ETL_LOG")
        // The AWS SDK logs raw HTTP responses at `warn`; keep them for `-vv`.
        .unwrap_or_else(|_| {
            let others = if verbose >= 2 { "warn" } else { "error" };
            tracing_subscriber::EnvFilter::new(format!("etl={level},{others}"))
        });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Access key ids masked in every line; a failed write dropped, never reported (the
        // report would go to the same stderr, through a panicking `eprintln!`).
        .with_writer(redact::RedactingStderr::new(redact::Redactor::from_env()))
        .log_internal_errors(false)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .try_init();
}

fn unwind(args: UnwindArgs, printer: &Printer) -> ExitStatus {
    let out = args.out.clone();
    let mapping = if args.mapping.is_empty() {
        None
    } else {
        match mapping_files::load(&args.mapping) {
            Ok(m) => Some(m),
            Err(e) => {
                printer.mapping_errors(&e);
                return ExitStatus::Error;
            }
        }
    };
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let settings = match settings::unwind(args, mapping, cpus) {
        Ok(s) => s,
        Err(e) => {
            printer.error(&e.to_string(), e.hint());
            return ExitStatus::Error;
        }
    };
    let progress = Progress::default();
    if let Some(run) = settings.shard {
        let result =
            progress::with_progress_bar(printer, &progress, || pipeline::shard::run(&settings, run, &progress));
        return match result {
            Ok(s) => {
                printer.shard_summary(&s, &out);
                ExitStatus::Success
            }
            Err(e) => failed(printer, e),
        };
    }
    let result = progress::with_progress_bar(printer, &progress, || pipeline::unwind(&settings, &progress));
    finished(printer, result, &out)
}

/// `etl commit DIR|S3_URL`.
fn commit(args: CommitArgs, printer: &Printer) -> ExitStatus {
    let target = match crate::store::Target::parse(&args.out) {
        Ok(t) => t,
        Err(e) => {
            printer.error(&e.to_string(), e.hint());
            return ExitStatus::Error;
        }
    };
    let progress = Progress::default();
    let aws = args.aws.options();
    let result = progress::with_progress_bar(printer, &progress, || pipeline::shard::commit(&target, &aws, &progress));
    finished(printer, result, &args.out)
}

/// A failed run: the error with its hint, and exit 1 for policy refusals, 2 otherwise.
fn failed(printer: &Printer, e: pipeline::UnwindError) -> ExitStatus {
    let hint = e.hint();
    printer.error_chain(&e, hint.as_deref());
    if e.is_policy() { ExitStatus::Failure } else { ExitStatus::Error }
}

/// What a committed (or refused) run prints, and its exit status.
fn finished(
    printer: &Printer,
    result: Result<pipeline::UnwindSummary, pipeline::UnwindError>,
    out: &str,
) -> ExitStatus {
    match result {
        Ok(summary) => {
            for w in &summary.report.warnings {
                printer.warn(w);
            }
            printer.summary(&summary, out);
            let mut status = ExitStatus::Success;
            if let Some((rejects, max)) = summary.too_many_rejects {
                printer.error(
                    &format!("{rejects} items were rejected, more than `--max-rejects {max}`"),
                    Some(&format!(
                        "the output was published; inspect the rejects with `etl sql --data {out}` or any Parquet reader under `{out}/_rejects`"
                    )),
                );
                status = ExitStatus::Failure;
            }
            // The verdict is the summary's last line, whatever else was said.
            let integrity = &summary.report.reconciliation.integrity;
            match integrity.verdict {
                Verdict::NotReconciled => {
                    printer.error(&not_reconciled(&summary.report, "exit 1 (pass --allow-mismatch to accept)"), None);
                    status = ExitStatus::Failure;
                }
                Verdict::Accepted => printer.warn(&not_reconciled(&summary.report, "accepted by --allow-mismatch")),
                Verdict::Reconciled | Verdict::Unverified => {}
            }
            status
        }
        Err(e @ pipeline::UnwindError::UpToDate { .. }) => {
            printer.info(&e.to_string());
            ExitStatus::Success
        }
        Err(e @ pipeline::UnwindError::Drift { .. }) => {
            if let pipeline::UnwindError::Drift { drift, .. } = &e {
                printer.drift(drift);
            }
            printer.error(&e.to_string(), e.hint().as_deref());
            ExitStatus::Failure
        }
        Err(e) => failed(printer, e),
    }
}

/// `NOT RECONCILED: 17,437 of 20,000 items read from export `…`; item count of 1 data file;
/// exit 1 (…)`: what the manifests promised, what was read, and which checks did not verify.
fn not_reconciled(report: &RunManifest, outcome: &str) -> String {
    let i = &report.reconciliation.integrity;
    let from = match report.exports.as_slice() {
        [one] => format!("export `{}`", one.export_dir),
        many => format!("{} exports", many.len()),
    };
    let counts = match i.expected_items {
        Some(expected) => {
            format!("{} of {} items read from {from}", printer::group(i.items_read), printer::group(expected))
        }
        None => format!("{} items read from files with manifests", printer::group(i.items_read)),
    };
    let of_files = |n: usize| if n == 1 { "1 data file".to_owned() } else { format!("{n} data files") };
    let count = |pred: fn(&Mismatch) -> bool| i.mismatches.iter().filter(|m| pred(m)).count();
    let mut failed = Vec::new();
    let n = count(|m| matches!(m, Mismatch::ItemCount { .. }));
    if n > 0 {
        failed.push(format!("the item count of {}", of_files(n)));
    }
    let n = count(|m| matches!(m, Mismatch::DataMd5 { .. }));
    if n > 0 {
        failed.push(format!("the MD5 of {}", of_files(n)));
    }
    for m in &i.mismatches {
        match m {
            Mismatch::SideFile { file, .. } => failed.push(format!("`{file}`")),
            Mismatch::SummaryCount { summary_items, listed_items, .. } => failed.push(format!(
                "the summary's itemCount ({}, `manifest-files.json` lists {})",
                printer::group(*summary_items),
                printer::group(*listed_items)
            )),
            Mismatch::ItemCount { .. } | Mismatch::DataMd5 { .. } => {}
        }
    }
    format!("NOT RECONCILED: {counts}; does not verify: {}; {outcome}", failed.join(", "))
}

fn sample(args: SampleArgs, printer: &Printer) -> ExitStatus {
    let SampleArgs {
        out,
        items,
        users,
        files,
        seed,
        scan_json,
        format,
        incrementals,
        change_percent,
        view,
        gap,
        overlap,
        final_out,
        no_final,
    } = args;
    let users = match (items, users) {
        (Some(n), _) => crate::sample::users_for_items(n),
        (None, Some(u)) => u,
        (None, None) => 200,
    };
    let format = match format {
        export::FormatArg::DynamodbJson => crate::sample::SampleFormat::DynamodbJson,
        export::FormatArg::Ion => crate::sample::SampleFormat::Ion,
    };
    let incremental = incrementals.map(|count| crate::sample::IncrementalOptions {
        count,
        change_percent,
        view: match view {
            ViewArg::NewAndOldImages => crate::sample::View::NewAndOldImages,
            ViewArg::NewImage => crate::sample::View::NewImage,
        },
        gap_seconds: gap,
        overlap_seconds: overlap,
        final_out: (!no_final).then(|| final_out.unwrap_or_else(|| crate::sample::default_final_out(&out))),
    });
    let opts = crate::sample::SampleOptions { out, users, files: files.max(1), seed, scan_json, format };
    let s = match crate::sample::generate(&opts) {
        Ok(s) => s,
        Err(e) => {
            printer.error_chain(&e, None);
            return ExitStatus::Error;
        }
    };
    printer.info(&format!(
        "wrote {} items in {} data files ({} bytes compressed) to `{}`",
        s.items,
        s.data_files,
        s.compressed_bytes,
        s.export_dir.display()
    ));
    let Some(inc) = incremental else { return ExitStatus::Success };
    match crate::sample::generate_incrementals(&opts, &inc) {
        Ok(s) => {
            for w in &s.windows {
                printer.info(&format!(
                    "wrote incremental export `{}` ({} to {}, {}): {} change records",
                    w.export_id, w.from_time, w.to_time, w.output_view, w.records
                ));
            }
            if let Some(dir) = &s.final_export {
                printer.info(&format!(
                    "wrote the final state, {} items as a full export taken at {}, to `{}`",
                    s.final_items,
                    s.final_export_time,
                    dir.display()
                ));
            }
            ExitStatus::Success
        }
        Err(e) => {
            printer.error_chain(&e, None);
            ExitStatus::Error
        }
    }
}

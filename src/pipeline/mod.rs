//! Wiring the stages of `etl unwind` together; no stage's work is done here.
//!
//! ```text
//! source::resolve -> Plan
//!   pass one (read.rs, pool of workers over files):
//!     source::frame::Framer -> Frame -> decode::decode -> Record
//!       -> normalize::Normalizer -> (TableId, row) | reject -> spill chunks; shapes inferred
//!   pass two (write.rs, pool of workers over parts):
//!     spill -> normalize::BatchBuilder -> RecordBatch -> sink::Sink::part (Parquet)
//!   report.rs: inputs, checks, reconciliation -> sink::RunManifest -> Sink::commit
//! ```
//!
//! Both passes are parallel and bounded in memory. Output is byte-identical whatever
//! `--threads` is: row order is file order then line order, shapes merge associatively, and part
//! and row-group boundaries depend only on the data. The [`pool`] returns the error that caused a
//! stop, never a worker's cancellation.

pub mod apply;
pub mod chain;
pub mod compact;
pub mod in_place;
pub mod pool;
pub mod progress;
pub mod read;
pub mod report;
pub mod shard;
pub mod spill;
pub mod walk;
pub mod write;

use std::sync::Arc;
use std::time::Instant;

use tracing::info;

pub use progress::{Phase, Progress};

use crate::aws::AwsOptions;
use crate::mapping::Mapping;
use crate::normalize::{MappedTables, NormalizeError};
use crate::schema::TableSchema;
use crate::schema::diff::{Drift, OnDrift};
use crate::sink::manifest::{ReportOptions, RunManifest, Timings};
use crate::sink::{self, Committed, Format, RowGroups, SinkError, SinkSettings};
use crate::source::integrity::{self, Mismatch};
use crate::source::live::ScanSettings;
use crate::source::{self, SourceError};
use crate::store::{Location, Target};

/// Lines longer than this are rejected unread (a 400 KB item is at most a few MB of JSON).
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
pub const DEFAULT_ROW_GROUP_ROWS: usize = 128 * 1024;
/// A row group is also cut after this many bytes of item data, bounding memory.
pub const DEFAULT_ROW_GROUP_BYTES: usize = 64 * 1024 * 1024;
/// Part files roll after this many bytes of item data.
pub const DEFAULT_TARGET_FILE_BYTES: u64 = 512 * 1024 * 1024;

/// Settings of one `etl unwind` run, resolved from the command line once.
#[derive(Debug, Clone)]
pub struct UnwindSettings {
    pub sources: Vec<Location>,
    pub target: Target,
    pub type_attribute: String,
    pub threads: usize,
    pub strict: bool,
    /// Exit 0 even when the output does not reconcile with the manifests (still reported).
    pub allow_mismatch: bool,
    pub max_rejects: Option<u64>,
    pub overwrite: bool,
    pub max_line_bytes: usize,
    pub row_groups: RowGroups,
    pub target_file_bytes: u64,
    /// Region, profile, endpoint for object stores and `dynamodb://`.
    pub aws: AwsOptions,
    /// Declared tables (`--mapping`); without one, every schema is inferred.
    pub mapping: Option<Arc<Mapping>>,
    /// How `dynamodb://TABLE` sources are scanned.
    pub scan: ScanSettings,
    /// Apply a chain of exports whose windows leave a gap (recorded in the report).
    pub allow_gap: bool,
    /// What to do when the tables' contracts differ from the output this run replaces.
    pub on_drift: OnDrift,
    /// Plain Parquet tables, or Delta tables (local folders only; incrementals merged).
    pub format: Format,
    /// `--deletion-vectors` (Delta tables only): the tables take deletion vectors, and a MERGE
    /// marks the rows of changed keys deleted instead of rewriting the files holding them.
    pub deletion_vectors: bool,
    /// `--in-place` (Parquet outputs only): incremental exports are applied onto a Parquet
    /// output (local or on an object store) without replaying the full export ([`in_place`]).
    pub in_place: bool,
    /// `--shard I/N`: one phase of one shard of a sharded run ([`shard`]).
    pub shard: Option<shard::ShardRun>,
}

impl UnwindSettings {
    /// Settings with every default, for `sources` into `target`.
    pub fn new(sources: Vec<Location>, target: Target) -> Self {
        UnwindSettings {
            sources,
            target,
            type_attribute: "Type".into(),
            threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            strict: false,
            allow_mismatch: false,
            max_rejects: None,
            overwrite: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            row_groups: RowGroups { rows: DEFAULT_ROW_GROUP_ROWS, bytes: DEFAULT_ROW_GROUP_BYTES },
            target_file_bytes: DEFAULT_TARGET_FILE_BYTES,
            aws: AwsOptions::default(),
            mapping: None,
            scan: ScanSettings::default(),
            allow_gap: false,
            on_drift: OnDrift::Allow,
            format: Format::Parquet,
            deletion_vectors: false,
            in_place: false,
            shard: None,
        }
    }
}

/// What a committed run produced.
#[derive(Debug, Clone)]
pub struct UnwindSummary {
    pub report: RunManifest,
    pub schemas: Vec<TableSchema>,
    /// Set when the output was committed but broke `--max-rejects`.
    pub too_many_rejects: Option<(u64, u64)>,
    pub committed: Committed,
}

/// Why a run failed. Nothing was published when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("cannot {action} `{path}`: {source}")]
    Io { action: &'static str, path: String, source: std::io::Error },
    #[error("strict mode: {message}")]
    Strict { message: String },
    /// `--strict`: a check of the data against its manifests did not verify.
    #[error("strict mode: {0}")]
    StrictMismatch(Mismatch),
    #[error(transparent)]
    Normalize(#[from] NormalizeError),
    /// A worker stopped because another one failed; never reported as the run's error.
    #[error("stopped after another worker failed")]
    Cancelled,
    #[error("internal error: {message}")]
    Internal { message: String },
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error(transparent)]
    Apply(#[from] apply::ApplyError),
    #[error(transparent)]
    Shard(#[from] shard::ShardError),
    /// Every export named is already applied to the output: nothing was done (exit 0).
    #[error("`{out}` already holds {exports}; nothing to apply, nothing rewritten")]
    UpToDate { out: String, exports: String },
    /// `--on-drift fail`: the tables' contracts differ from those of the output at `out`.
    #[error("the schema drifted from `{out}` ({}); `--on-drift fail` refuses it: nothing was published", .drift.counts())]
    Drift { out: String, drift: Drift },
}

impl UnwindError {
    pub fn hint(&self) -> Option<String> {
        match self {
            UnwindError::Source(e) => e.hint(),
            UnwindError::Sink(e) => e.hint().map(str::to_owned),
            UnwindError::Strict { .. } => {
                Some("run without `--strict` to write rejects to the `_rejects` table and keep going".into())
            }
            UnwindError::StrictMismatch(_) => Some(
                "nothing was published; without `--strict` the output is published with every check in `_etl/run.json` and the run exits 1 (0 with `--allow-mismatch`)".into(),
            ),
            UnwindError::Internal { .. } | UnwindError::Normalize(_) | UnwindError::Cancelled => {
                Some("this is a bug in etl; please report it with the run's input if you can".into())
            }
            UnwindError::Io { .. } | UnwindError::UpToDate { .. } => None,
            UnwindError::Drift { .. } => Some(
                "the changes are listed above; `--on-drift allow` (the default) publishes them and lists them in `_etl/run.json`".into(),
            ),
            UnwindError::State(e) => e.hint(),
            UnwindError::Apply(e) => e.hint(),
            UnwindError::Shard(e) => e.hint(),
        }
    }

    /// Policy failures (the data broke a rule the user asked for, or the export does not match
    /// its own manifests) exit with 1, others with 2.
    pub fn is_policy(&self) -> bool {
        match self {
            UnwindError::Strict { .. } | UnwindError::StrictMismatch(_) | UnwindError::Drift { .. } => true,
            UnwindError::Source(e) => e.is_integrity(),
            // Another run wrote the same output: this one lost, the data is the other's.
            UnwindError::Sink(e) => e.is_concurrent_run(),
            UnwindError::Apply(e) => e.is_concurrent_run(),
            UnwindError::State(e) => matches!(e, crate::state::StateError::Older { .. }),
            UnwindError::Shard(e) => e.is_policy(),
            _ => false,
        }
    }
}

impl UnwindError {
    /// [`UnwindError::UpToDate`]: `out` already holds the exports `ids`.
    pub(crate) fn up_to_date<'a>(out: String, ids: impl ExactSizeIterator<Item = &'a str>) -> UnwindError {
        let plural = if ids.len() == 1 { "" } else { "s" };
        let ids: Vec<String> = ids.map(|id| format!("`{id}`")).collect();
        UnwindError::UpToDate { out, exports: format!("export{plural} {}", ids.join(", ")) }
    }
}

impl pool::PoolError for UnwindError {
    fn cancelled() -> Self {
        UnwindError::Cancelled
    }

    fn is_cancelled(&self) -> bool {
        matches!(self, UnwindError::Cancelled)
    }

    fn panicked(message: String) -> Self {
        UnwindError::Internal { message: format!("a worker panicked: {message}") }
    }
}

/// Where live scans are spooled inside the scratch folder.
const SCAN_SPOOL: &str = "scan";

/// Runs `etl unwind`: resolve, read, write, report, commit. An apply that can be made in place
/// ([`in_place`]) is tried so first; when it finds a reason it cannot, before anything is
/// committed, the run starts again and replays the full export.
pub fn unwind(settings: &UnwindSettings, progress: &Progress) -> Result<UnwindSummary, UnwindError> {
    match unwind_once(settings, progress, None)? {
        Attempt::Done(summary) => Ok(*summary),
        Attempt::Replay(reason) => {
            info!(%reason, "the incremental exports are applied by replaying the full export");
            match unwind_once(settings, progress, Some(reason))? {
                Attempt::Done(summary) => Ok(*summary),
                Attempt::Replay(reason) => {
                    Err(UnwindError::Internal { message: format!("a replay was asked to replay again: {reason}") })
                }
            }
        }
    }
}

/// What decides the files of `settings`' output besides its input, type attribute and line limit.
pub(crate) fn file_layout(settings: &UnwindSettings) -> crate::sink::manifest::FileLayout {
    crate::sink::manifest::FileLayout {
        mapping: settings.mapping.as_deref().and_then(|m| crate::state::mapping_hash(&m.files)),
        row_group_rows: settings.row_groups.rows,
        row_group_bytes: settings.row_groups.bytes,
        target_file_bytes: settings.target_file_bytes,
    }
}

/// The options `_etl/run.json` records for a run with `settings` whose files are laid out as
/// `layout` says.
fn report_options(settings: &UnwindSettings, layout: crate::sink::manifest::FileLayout) -> ReportOptions {
    ReportOptions {
        type_attribute: settings.type_attribute.clone(),
        threads: settings.threads,
        strict: settings.strict,
        max_rejects: settings.max_rejects,
        max_line_bytes: settings.max_line_bytes,
        allow_mismatch: settings.allow_mismatch,
        layout: Some(layout),
    }
}

/// A run with `settings` makes the same rows from the same input as the run that committed
/// `previous` ([`ReportOptions::same_rows`]): an apply is made in place only then, whatever
/// the file layout (the files it writes take this run's); with other options the output is
/// written again.
pub(crate) fn same_rows(
    previous: &RunManifest,
    settings: &UnwindSettings,
    layout: &crate::sink::manifest::FileLayout,
) -> bool {
    previous.options.same_rows(&report_options(settings, layout.clone()))
}

/// A run with `settings` writes the same files from the same input as the run that committed
/// `previous`: the options that decide them agree ([`ReportOptions::same_output`]), the format
/// is the output's, and the run does not ask for deletion vectors a Delta output does not have
/// yet.
fn same_output(previous: &RunManifest, settings: &UnwindSettings, layout: &crate::sink::manifest::FileLayout) -> bool {
    previous.options.same_output(&report_options(settings, layout.clone()))
        && (previous.deletion_vectors || !settings.deletion_vectors)
        && crate::sink::delta::is_delta_output(previous) == (settings.format == Format::Delta)
}

/// A run with `settings` of the input `previous` was made from may be a no-op: it would write
/// the same files ([`same_output`]), and `previous` passes this run's policies (every manifest
/// check verified, or accepted by `--allow-mismatch`; rejects within `--max-rejects`, none
/// under `--strict`), so that the no-op exits 0 only where the run would.
pub(crate) fn may_skip(
    previous: &RunManifest,
    settings: &UnwindSettings,
    layout: &crate::sink::manifest::FileLayout,
) -> bool {
    use crate::sink::manifest::Verdict;
    let r = &previous.reconciliation;
    let verified = match r.integrity.verdict {
        Verdict::Reconciled | Verdict::Unverified => true,
        Verdict::Accepted => settings.allow_mismatch,
        Verdict::NotReconciled => false,
    };
    verified
        && settings.max_rejects.is_none_or(|max| r.rejects <= max)
        && (!settings.strict || r.rejects == 0)
        && same_output(previous, settings, layout)
}

/// How one attempt of a run ended.
enum Attempt {
    Done(Box<UnwindSummary>),
    /// An apply in place cannot be made, for this reason; nothing was committed.
    Replay(String),
}

/// One attempt of [`unwind`]; `replaying` is set (with the reason) when an apply in place was
/// given up, and the run then replays the full export.
fn unwind_once(
    settings: &UnwindSettings,
    progress: &Progress,
    replaying: Option<String>,
) -> Result<Attempt, UnwindError> {
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut sink = sink::open(
        &settings.target,
        &SinkSettings {
            format: settings.format,
            overwrite: settings.overwrite,
            row_group_rows: settings.row_groups.rows,
            aws: settings.aws.clone(),
        },
    )?;
    let scratch = sink.scratch().to_owned();
    let layout = file_layout(settings);
    let plan = source::resolve(&settings.sources, &settings.aws, &settings.scan, &scratch.join(SCAN_SPOOL))?;
    // Incremental exports alone, onto an existing output: the chain of what it holds and them.
    let (mut plan, mut onto) =
        apply::prepare(plan, &settings.target, &scratch.join(SCAN_SPOOL), settings, &layout, sink.as_ref())?;
    let in_place = match (&onto, &replaying) {
        (Some(_), None) => in_place::candidate(settings, &layout, sink.as_ref())?,
        _ => None,
    };
    if settings.in_place && onto.is_some() && replaying.is_none() && in_place.is_none() {
        return Ok(Attempt::Replay(
            "`--in-place` applies onto a Parquet output, without `--shard`, with the `--type-attribute`, `--max-line-bytes` and mapping it was made with".into(),
        ));
    }
    if let Some(o) = onto.as_mut() {
        o.in_place = in_place.is_some();
    }
    let chain = apply::order(&plan, onto.as_ref(), settings.allow_gap).map_err(SourceError::from)?;
    let mut state = match &chain {
        Some(c) => {
            let mut next = crate::state::of_chain(&plan.exports, c, &[], layout.mapping.clone());
            // Onto an output, the exports it applied stand behind the one compacted export it keeps.
            if let Some(o) = &onto {
                next = crate::state::with_held(next, &o.held);
            }
            apply::refuse_up_to_date(settings, &layout, sink.as_ref(), &next)?;
            Some(next)
        }
        None => {
            apply::refuse_same_export(&plan, settings, &layout, sink.as_ref())?;
            None
        }
    };
    // Kept before anything is read (a local export's data files into a local output: by pass
    // one, each copied just before it is read), so that what is read is what is kept.
    // A chain keeps its full export; its incremental exports are kept compacted after pass one.
    let keeping = apply::keep_base(
        &mut plan,
        sink.as_ref(),
        &settings.target,
        &settings.aws,
        chain.is_none(),
        settings.threads,
        // In place, pass one does not read the full export: it is kept now.
        in_place.is_none(),
    )?;
    let mut kept = keeping.kept;
    if let Some(k) = kept {
        info!(files = k.files, bytes = k.bytes, ms = k.millis, "kept the exports read in `_etl/base/`");
    }
    let mut chain = match chain {
        Some(c) => Some(chain::Applier::reduce_changes(c, &mut plan, settings, onto.as_ref())?),
        None => None,
    };
    if let (Some(st), Some(c)) = (&mut state, &chain) {
        st.key_attributes = c.key_names.clone();
    }
    let txn_version = delta_txn_version(state.as_ref(), &plan);
    // The file of current images is written on a thread of its own (one core, the chain's
    // images in key order) while the changed keys are found on the pool.
    let (current, identities, located) = std::thread::scope(|s| {
        let writing = chain.as_ref().map(|c| s.spawn(|| c.write_current(&scratch)));
        // Onto an output with a mapping: the changed keys as each mapped table finds its rows.
        let identities = match (settings.mapping.as_deref(), &chain, &onto) {
            (Some(m), Some(c), Some(_)) => apply::changed_identities(m, &c.key_names, &c.new_keys, settings.threads),
            _ => Ok(Default::default()),
        };
        // In place: where the changed keys are in the output's tables, instead of the full export.
        let located = match (&in_place, &chain, &identities) {
            (Some(ip), Some(c), Ok(ids)) => Some(in_place::locate(ip, c, ids, txn_version, settings.threads)),
            _ => None,
        };
        let current = writing.map(|h| joined(h, "writing the current images"));
        (current, identities, located)
    });
    if let (Some(c), Some(current)) = (chain.as_mut(), current.transpose()?) {
        c.add_current(&mut plan, current);
    }
    let mut identities = identities?;
    let (matched, located, unread) = match (located.transpose()?, &chain) {
        (Some(Ok(l)), Some(c)) => (Some(l.matched), l.files, plan.exports[c.chain.full].files.clone()),
        (Some(Err(reason)), _) => return Ok(Attempt::Replay(reason)),
        _ => (None, Default::default(), 0..0),
    };
    let superseded_rejects = in_place::superseded_rejects(&located);
    if settings.strict
        && let Some(first) = integrity::manifest_mismatches(&plan).into_iter().next()
    {
        return Err(UnwindError::StrictMismatch(first));
    }
    progress.total_bytes.store(plan.total_bytes(), std::sync::atomic::Ordering::Relaxed);
    let t_resolve = started.elapsed();

    progress.set_phase(Phase::Reading);
    let t_read = Instant::now();
    let mapped_tables = settings.mapping.as_deref().map(MappedTables::new);
    let mapped = settings.mapping.as_deref().zip(mapped_tables.as_ref());
    let keep = Some((keeping.when_read.as_ref(), sink.as_ref()));
    let scope = read::Scope { unread, ..read::Scope::all(&plan) };
    let mut read = read::read_all(&plan, scope, settings, mapped, chain.as_ref(), &scratch, keep, progress)?;
    if let Some(m) = matched {
        read.chain.matched = m;
    }
    if let Some(k) = &mut kept {
        k.millis += keeping.when_read.millis();
    }
    let t_read = t_read.elapsed();

    progress.set_phase(Phase::Writing);
    let t_write = Instant::now();
    // The chain's incremental exports are compacted and kept on a thread of their own while the
    // tables are written (and, in place onto Parquet, rewritten): neither reads what the other
    // writes, and compaction (gzip on one core) would otherwise leave the other core idle.
    let (compacted, made) = std::thread::scope(|s| {
        let compacting = match (&chain, kept) {
            (Some(c), Some(_)) => {
                Some(s.spawn(|| apply::keep_compacted(c, &plan, &read.chain, sink.as_ref(), settings, &scratch)))
            }
            _ => None,
        };
        // The tables, the report, and in place onto Parquet each table's files; `Ok(Err(reason))`
        // when the apply cannot be made in place after all.
        let made = (|| -> Result<Result<(RunManifest, Vec<TableSchema>), String>, UnwindError> {
            let mut written = write::write_all(&plan, settings, mapped_tables.as_ref(), sink.as_ref(), &read)?;
            if let Some(ip) = &in_place
                && let Err(reason) = in_place::complete(ip, &mut written)
            {
                return Ok(Err(reason));
            }
            let t_write = t_write.elapsed();
            let mapping = settings
                .mapping
                .as_deref()
                .zip(mapped_tables.as_ref())
                .map(|(m, t)| report::mapping(m, t, &read.entity_stats));
            let timings = Timings {
                resolve: t_resolve.as_millis() as u64,
                read_and_decode: t_read.as_millis() as u64,
                write: t_write.as_millis() as u64,
                total: 0,
                // The compaction's time is added once it is done.
                keep_base: kept.map_or(0, |k| k.millis),
            };
            let (mut manifest, mut schemas) = assemble(Assembly {
                plan: &plan,
                settings,
                read: &read,
                written,
                chain: chain.as_ref(),
                state,
                keeping,
                mapping,
                layout,
                started,
                started_at,
                timings,
            })?;
            if let Some(c) = manifest.chain.as_mut() {
                c.superseded_rejects = superseded_rejects;
            }
            // In place onto a Parquet output: each table's files are the output's, less the
            // changed keys' rows, with this run's rows added.
            if let Some(ip) = in_place.as_ref().filter(|_| settings.format == Format::Parquet)
                && let Err(reason) =
                    in_place::rewrite(ip, &located, &mut manifest, &mut schemas, sink.as_ref(), settings)?
            {
                return Ok(Err(reason));
            }
            Ok(Ok((manifest, schemas)))
        })();
        let compacted = compacting.map_or(Ok(None), |h| joined(h, "compacting the incremental exports"));
        (compacted, made)
    });
    // The compaction's error first, as when it ended before the tables were written.
    let compacted = compacted?;
    let (mut manifest, schemas) = match made? {
        Ok(made) => made,
        Err(reason) => return Ok(Attempt::Replay(reason)),
    };
    if let Some(c) = &compacted {
        manifest.timings_ms.keep_base += c.millis;
    }
    list_compacted(&mut manifest, compacted);
    if let Some(reason) = replaying {
        manifest
            .warnings
            .push(format!("the incremental exports were applied by replaying the full export, not in place: {reason}"));
    }
    progress.set_phase(Phase::Committing);
    if settings.format == Format::Delta {
        // Onto an existing output, the keys the new exports changed are merged into each table.
        let merge = onto.as_ref().and(chain.as_ref()).map(|c| sink::delta::MergeKeys {
            key_attributes: c.key_names.clone(),
            keys: c.new_keys.clone(),
            mapped: std::mem::take(&mut identities),
        });
        let deletion_vectors = settings.deletion_vectors;
        let in_place = in_place.is_some();
        sink.delta_run(sink::delta::DeltaRun { txn_version, merge, deletion_vectors, in_place, located });
    }
    // What the run read (the chain's change records, the changed keys' identities, pass one's
    // rows and statistics) is freed on a thread of its own while the commit waits for the disk:
    // freed at the end, it took about 12 ms of one core after an apply's commit. The run does
    // not wait for it: the 1.2M changed keys of a large incremental export took 2.5 s of one
    // core to free, most of it after the commit. A process that exits first leaves the rest to
    // the kernel.
    std::thread::spawn(move || drop((chain, identities, read, mapped_tables)));
    let published = publish(sink, manifest, schemas, settings, progress);
    match published {
        Ok(summary) => Ok(Attempt::Done(Box::new(summary))),
        // A table the check let through cannot be merged in place after all (its Delta schema is
        // not its contract's): the tables merged before it carry this run's `txn`, which the
        // replay honours, and nothing was published.
        Err(UnwindError::Sink(SinkError::Delta(sink::delta::DeltaError::InPlace { table, reason, .. }))) => {
            Ok(Attempt::Replay(format!("table `{table}`: {reason}")))
        }
        Err(e) => Err(e),
    }
}

/// What a scoped thread doing `what` returned; its panic, with the panic's message, as an
/// internal error.
pub(crate) fn joined<T>(
    handle: std::thread::ScopedJoinHandle<'_, Result<T, UnwindError>>,
    what: &str,
) -> Result<T, UnwindError> {
    handle.join().unwrap_or_else(|panic| {
        Err(UnwindError::Internal {
            message: format!("{what} panicked: {}", pool::panic_message(panic.as_ref(), "no message")),
        })
    })
}

/// Lists in `manifest` what the output keeps of a chain: its full export, and the incremental
/// exports compacted into one ([`compact`]), when they were.
pub(crate) fn list_compacted(manifest: &mut RunManifest, compacted: Option<apply::KeptCompacted>) {
    if let Some(c) = compacted {
        manifest.exports.retain(|x| x.window.is_none());
        manifest.exports.push(c.export);
    }
}

/// Commits `manifest` through `sink`, and says what the run did. On an object store, the
/// compacted export the previous commit kept goes once this commit no longer lists it
/// ([`apply::drop_replaced_compacted`]).
pub(crate) fn publish(
    sink: Box<dyn sink::Sink>,
    manifest: RunManifest,
    schemas: Vec<TableSchema>,
    settings: &UnwindSettings,
    progress: &Progress,
) -> Result<UnwindSummary, UnwindError> {
    let rejects = manifest.reconciliation.rejects;
    let replaced = apply::listed_compacted(&settings.target, sink.as_ref());
    let (report, committed) = sink.commit(manifest, &schemas)?;
    apply::drop_replaced_compacted(&settings.target, replaced.as_ref(), &report.exports, &settings.aws);
    if let Some(id) = &committed.run_id {
        info!(run_id = %id, "committed");
    }
    progress.set_phase(Phase::Done);
    let too_many_rejects = settings.max_rejects.filter(|&max| rejects > max).map(|max| (rejects, max));
    Ok(UnwindSummary { report, schemas, too_many_rejects, committed })
}

/// What a run's report is made of, once its tables are written.
pub(crate) struct Assembly<'a> {
    pub plan: &'a source::Plan,
    pub settings: &'a UnwindSettings,
    pub read: &'a read::ReadResult,
    pub written: write::Written,
    pub chain: Option<&'a chain::Applier>,
    pub state: Option<crate::state::RunState>,
    pub keeping: apply::Keeping,
    pub mapping: Option<crate::sink::manifest::MappingReport>,
    /// The run's [`file_layout`] (a sharded run's, as its shards recorded it).
    pub layout: crate::sink::manifest::FileLayout,
    pub started: Instant,
    pub started_at: String,
    /// Every phase but `total`, which is taken here.
    pub timings: Timings,
}

/// The run manifest: inputs and their checks, reconciliation, tables, warnings, and the schema
/// drift from the output this run replaces (refused under `--on-drift fail`). Returns it with
/// the tables' schema contracts.
pub(crate) fn assemble(a: Assembly<'_>) -> Result<(RunManifest, Vec<TableSchema>), UnwindError> {
    let Assembly {
        plan,
        settings,
        read,
        written,
        chain,
        state,
        keeping,
        mapping,
        layout,
        started,
        started_at,
        mut timings,
    } = a;
    let inputs = report::inputs(plan, read);
    let integrity = report::integrity(plan, read, settings.allow_mismatch);
    let mut warnings: Vec<String> = integrity.mismatches.iter().map(ToString::to_string).collect();
    warnings.extend(keeping.warning);
    warnings.extend(read.warnings.iter().cloned());
    warnings.extend(report::schema_warnings(&written));
    let chain_report = chain.map(|c| c.report(plan, &read.chain, &written.tables));
    if let Some(c) = chain {
        warnings.extend(c.warnings.iter().cloned());
        warnings.extend(c.chain.overlaps.iter().map(crate::source::chain::Overlap::warning));
        warnings.extend(c.chain.gaps.iter().map(|g| {
            format!(
                "gap of {:.3} s allowed by `--allow-gap`: `{}` covers up to {}, `{}` starts at {}; changes made in between are missing",
                g.seconds, g.after, g.ends, g.before, g.starts
            )
        }));
    }
    let reconciliation = report::reconcile(plan, read, &written, integrity, chain.map(chain::Applier::current_file))?;

    // Schema drift from the output this run replaces: reported, or refused by `--on-drift fail`.
    let drift = sink::manifest::read_contracts(&settings.target, &settings.aws)?
        .map(|previous| crate::schema::diff::diff(&previous, &written.schemas));
    if let Some(d) = drift.as_ref().filter(|d| settings.on_drift == OnDrift::Fail && !d.is_empty()) {
        return Err(UnwindError::Drift { out: settings.target.to_string(), drift: d.clone() });
    }
    timings.total = started.elapsed().as_millis() as u64;
    let manifest = RunManifest {
        etl_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at,
        finished_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        options: report_options(settings, layout),
        inputs,
        exports: plan.exports.clone(),
        reconciliation,
        tables: written.tables,
        rejects_by_reason: report::rejects_by_reason(read),
        widenings: written.widenings,
        demoted_attributes: written.demoted,
        renamed_columns: written.renamed,
        mapping,
        chain: chain_report,
        drift,
        state,
        delta_history: Vec::new(),
        deletion_vectors: false,
        warnings,
        timings_ms: timings,
        run_id: None,
        published_to: None,
        replaces_run_id: None,
    };
    Ok((manifest, written.schemas))
}

/// The Delta `txn` version of a run: up to when its exports cover the table (the last applied
/// export's window end, or a full export's `exportTime`), in microseconds since the epoch.
pub(crate) fn delta_txn_version(state: Option<&crate::state::RunState>, plan: &source::Plan) -> Option<i64> {
    let last = match state {
        Some(s) => crate::state::last_applied(s).cloned(),
        None => match plan.exports.as_slice() {
            [e] => Some(crate::state::AppliedExport::of(e)),
            _ => None,
        },
    };
    last.and_then(|a| a.covers_until()).map(|t| t.timestamp_micros())
}

#[cfg(test)]
mod tests {
    //! The object-store paths (export resolution and streaming reads, the commit with `run.json`
    //! last, replacing a run, `etl sql` over what a manifest lists) run here against `memory://`
    //! stores, in-process; the integration tests run the same paths against moto's S3.

    use std::path::{Path, PathBuf};

    use object_store::path::Path as ObjPath;
    use object_store::{ObjectStoreExt as _, PutPayload};

    use super::*;
    use crate::store::{ObjectUrl, Scheme};

    fn upload_dir(bucket: &str, prefix: &str, dir: &Path) {
        let store = crate::store::memory::store(bucket);
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                let bytes = std::fs::read(&p).unwrap();
                crate::store::io_runtime()
                    .block_on(store.put(&ObjPath::from(format!("{prefix}{rel}")), PutPayload::from(bytes)))
                    .unwrap();
            }
        }
    }

    fn keys(bucket: &str) -> Vec<String> {
        use futures::StreamExt as _;
        let store = crate::store::memory::store(bucket);
        let mut out: Vec<String> = crate::store::io_runtime()
            .block_on(async { store.list(None).map(|m| m.unwrap().location.to_string()).collect().await });
        out.sort();
        out
    }

    fn url(bucket: &str, key: &str) -> ObjectUrl {
        ObjectUrl { scheme: Scheme::Memory, bucket: bucket.into(), key: key.into() }
    }

    fn sample(dir: &Path) -> PathBuf {
        let out = dir.join("export");
        crate::sample::generate(&crate::sample::SampleOptions {
            out: out.clone(),
            users: 20,
            files: 3,
            seed: 5,
            scan_json: None,
            format: crate::sample::SampleFormat::DynamodbJson,
        })
        .unwrap();
        out
    }

    #[test]
    fn object_store_in_and_out_equals_local() {
        let tmp = tempfile::tempdir().unwrap();
        let export = sample(tmp.path());
        let bucket = "pipeline-objects";
        upload_dir(bucket, "exports/nightly/", &export);

        // Local in, local out: the reference.
        let local_out = tmp.path().join("out");
        let mut s = UnwindSettings::new(vec![Location::Path(export.clone())], Target::Path(local_out.clone()));
        s.threads = 2;
        let local = unwind(&s, &Progress::default()).unwrap();

        // Object store in, object store out.
        let mut s = UnwindSettings::new(
            vec![Location::Object(url(bucket, "exports/nightly/"))],
            Target::Object(url(bucket, "lake/shop")),
        );
        s.threads = 2;
        let first = unwind(&s, &Progress::default()).unwrap();
        let run_id = first.committed.run_id.clone().unwrap();
        assert_eq!(first.report.reconciliation, local.report.reconciliation);
        assert!(first.report.inputs.iter().all(|i| i.md5_check == crate::source::CheckStatus::Verified));
        for (a, b) in first.report.tables.iter().zip(&local.report.tables) {
            assert_eq!((&a.name, a.rows), (&b.name, b.rows));
            // Same bytes under run-unique names.
            for (fa, fb) in a.files.iter().zip(&b.files) {
                assert_eq!(fa.path, fb.path.replace(".parquet", &format!("-{run_id}.parquet")));
                let store = crate::store::memory::store(bucket);
                let got = crate::store::io_runtime()
                    .block_on(async {
                        store.get(&ObjPath::from(format!("lake/shop/{}", fa.path))).await?.bytes().await
                    })
                    .unwrap();
                assert_eq!(got.as_ref(), std::fs::read(local_out.join(&fb.path)).unwrap().as_slice());
            }
        }

        // The same run again is a no-op: nothing written, nothing deleted.
        let before = keys(bucket);
        assert!(matches!(unwind(&s, &Progress::default()), Err(UnwindError::UpToDate { .. })));
        assert_eq!(keys(bucket), before);
        // A second run (with other options, not a no-op) replaces the first; its files stay one
        // more run, then go.
        s.row_groups.rows = 5000;
        let second = unwind(&s, &Progress::default()).unwrap();
        s.row_groups.rows = 6000;
        let third = unwind(&s, &Progress::default()).unwrap();
        let all = keys(bucket);
        let run_of = |id: &str| all.iter().filter(|k| k.contains(id)).count();
        assert_eq!(run_of(&run_id), 0, "the first run's files are gone: {all:?}");
        assert!(run_of(second.committed.run_id.as_deref().unwrap()) > 0);
        assert!(run_of(third.committed.run_id.as_deref().unwrap()) > 0);

        // SQL reads exactly the committed run.
        let rows: usize = crate::store::io_runtime().block_on(async {
            let session = crate::sql::Session::open(
                crate::sql::SqlOptions::new(Target::Object(url(bucket, "lake/shop"))),
                &AwsOptions::default(),
            )
            .await
            .unwrap();
            let r = session.run("SELECT count(*) AS n FROM \"user\"").await.unwrap();
            let col = r[0].batches[0].column(0).clone();
            col.as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().unwrap().value(0) as usize
        });
        let users = local.report.tables.iter().find(|t| t.name == "user").unwrap().rows;
        assert_eq!(rows as u64, users);
    }

    /// A bucket whose prefix `data/` holds an object etl did not write, and a sample export to
    /// unwind into it (in the returned folder).
    fn foreign_prefix(bucket: &str) -> (tempfile::TempDir, PathBuf) {
        let store = crate::store::memory::store(bucket);
        crate::store::io_runtime()
            .block_on(store.put(&ObjPath::from("data/precious.csv"), PutPayload::from("keep")))
            .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let export = sample(tmp.path());
        (tmp, export)
    }

    /// Under a prefix, the shards refuse what their commit would refuse, before they write:
    /// objects that are not an etl output (with a hint that does not offer `--overwrite`), and a
    /// Parquet output for a Delta run.
    #[test]
    fn shards_refuse_a_prefix_their_commit_could_not_publish_into() {
        let bucket = "pipeline-shards-refused";
        let (_tmp, export) = foreign_prefix(bucket);
        let run = shard::ShardRun {
            shard: crate::source::shard::Shard { index: 0, count: 2 },
            phase: shard::ShardPhase::Infer,
        };
        let mut s = UnwindSettings::new(vec![Location::Path(export)], Target::Object(url(bucket, "data")));
        let e = shard::run(&s, run, &Progress::default()).unwrap_err();
        assert!(matches!(e, UnwindError::Shard(shard::ShardError::NotEtlOutput { .. })), "{e}");
        assert!(!e.hint().unwrap().contains("pass `--overwrite`"), "{:?}", e.hint());
        assert_eq!(keys(bucket), vec!["data/precious.csv".to_owned()]);

        s.target = Target::Object(url(bucket, "lake"));
        unwind(&s, &Progress::default()).unwrap();
        let before = keys(bucket);
        s.format = Format::Delta;
        let e = shard::run(&s, run, &Progress::default()).unwrap_err();
        assert!(matches!(e, UnwindError::Sink(SinkError::Delta(sink::delta::DeltaError::ParquetOutput { .. }))), "{e}");
        assert_eq!(keys(bucket), before);
        // A Parquet run's shards go on.
        s.format = Format::Parquet;
        shard::run(&s, run, &Progress::default()).unwrap();
    }

    #[test]
    fn a_prefix_that_is_not_an_output_is_refused() {
        let bucket = "pipeline-not-output";
        let (_tmp, export) = foreign_prefix(bucket);
        let s = UnwindSettings::new(vec![Location::Path(export)], Target::Object(url(bucket, "data")));
        let e = unwind(&s, &Progress::default()).unwrap_err();
        assert!(matches!(e, UnwindError::Sink(SinkError::NotEtlPrefix { .. })), "{e}");
        assert_eq!(keys(bucket), vec!["data/precious.csv".to_owned()]);
    }
}

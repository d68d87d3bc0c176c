//! Delta Lake output (`--format delta`, local folders): every table of a run becomes a Delta
//! table under `DIR/<table>/`. A full export (or a chain from one) creates or replaces each table
//! by ONE Delta commit whose data files are exactly the Parquet parts the pipeline wrote through
//! [`PartWriter`] (same bytes, types and field metadata as the Parquet output). Incremental
//! exports applied onto a Delta output are ONE copy-on-write MERGE commit per table ([`merge`]):
//! only the files holding a changed key are rewritten, or none, when the table takes deletion
//! vectors ([`dv`], `--deletion-vectors`). `_etl/run.json`, written last, records
//! each table's committed version (also in the run state, `_etl/state.json`) and appends the
//! run's consistent set of versions to the output's `delta_history`, which `etl sql --as-of` reads.
//!
//! Every commit carries a Delta `txn` (app id `etl`, version: up to when the exports applied
//! cover the table, in microseconds since the epoch). Merging, a table whose `txn` already covers
//! the run is skipped: a run that stopped between two table commits completes on a re-run without
//! applying anything twice. A full export replaces every table whatever its `txn` (replacing twice
//! is replacing once), older or newer than what the output held, as a Parquet output is replaced.
//!
//! Parts are staged beside `DIR` (the local sink's [`Staging`], which also holds `DIR`'s lock and
//! refuses a second run), then renamed into `DIR/<table>/` under run-unique names and committed
//! with an `add` action each (and a `remove` for every file of the version replaced). A reader of
//! one table sees the previous version or the new one, never a mix; across tables, `etl sql` reads
//! the versions `_etl/run.json` names, so it sees one run's tables or the previous run's. Files a
//! replaced version removed stay on disk (Delta time travel reads them) until a vacuum
//! ([`maintain`], which also compacts small files). The exports read are kept under `_etl/base/`
//! (swapped in after the table commits, before `_etl/run.json`), as a Parquet output keeps them.
//! An object-store output (`--out s3://…`) commits the same way through [`object`], with
//! `_etl/run.json` written last by a conditional PUT instead of a rename.

pub mod dv;
pub mod home;
pub mod maintain;
pub mod merge;
pub mod object;
pub mod rejects;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::parquet::file::properties::WriterProperties;
use deltalake::DeltaTableError;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel as _;
use deltalake::kernel::transaction::CommitProperties;
use deltalake::kernel::{Action, Add, StructType, Transaction};
use deltalake::operations::create::CreateBuilder;
use deltalake::protocol::SaveMode;

use super::local::{RUN_REPORT, Staging};
use super::manifest::{self, RunManifest};
use super::{Committed, PartWriter, Sink, SinkError};
use crate::pipeline::pool::{self, Stop};
use crate::schema::TableSchema;
pub use home::Home;

/// The folder of a Delta table's log, inside the table's folder.
pub const DELTA_LOG: &str = "_delta_log";
/// The application id of the Delta `txn` every etl commit carries.
pub const TXN_APP_ID: &str = "etl";

/// What the Delta sink needs to know of a run before its commit.
#[derive(Debug, Clone, Default)]
pub struct DeltaRun {
    /// The `txn` version of this run's commits: up to when its exports cover the table, in
    /// microseconds since the epoch (`None` for inputs that are not exports).
    pub txn_version: Option<i64>,
    /// Set when incremental exports are applied onto an existing output: MERGE each table.
    pub merge: Option<MergeKeys>,
    /// `--deletion-vectors`: every table this run commits takes deletion vectors ([`dv`]); an
    /// output that has them keeps them whatever later runs ask (`RunManifest::deletion_vectors`).
    pub deletion_vectors: bool,
    /// The run applies incremental exports without replaying the full export (an output with
    /// deletion vectors): its staged tables hold only the changed keys' rows and `_rejects` only
    /// its own rejects, so `_rejects` takes them by an append, and every table the previous
    /// output listed must be merged (its rows are the previous ones less those removed plus
    /// those upserted), never replaced. The append also marks deleted the earlier rejects that
    /// `located` lists for `_rejects` ([`rejects`]).
    pub in_place: bool,
    /// By table: where the run's check found the changed keys (an apply in place), so its MERGE
    /// does not read the key columns again when the table is still at the version checked.
    pub located: BTreeMap<String, merge::Located>,
}

/// The keys a run's new incremental exports changed.
#[derive(Debug, Clone, Default)]
pub struct MergeKeys {
    /// The table's key attribute names, sorted.
    pub key_attributes: Vec<String>,
    /// Each changed key once, as a DynamoDB JSON object of its key attributes.
    pub keys: Vec<String>,
    /// By mapped table: the same keys as rows of the columns that say them back
    /// ([`crate::normalize::identity`]), or why the table has none. The other tables find them by
    /// their key attributes' columns.
    pub mapped: BTreeMap<String, Result<crate::normalize::identity::IdentityKeys, String>>,
}

impl MergeKeys {
    /// The columns table `name` finds the changed keys by, and the keys as rows of them;
    /// `Err(reason)` when it cannot.
    pub fn of(&self, name: &str) -> Result<(&[String], &[String]), String> {
        match self.mapped.get(name) {
            Some(Ok(k)) => Ok((&k.columns, &k.keys)),
            Some(Err(reason)) => Err(reason.clone()),
            None => Ok((&self.key_attributes, &self.keys)),
        }
    }
}

/// Why a Delta output cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    #[error(
        "`{path}` holds a Parquet etl output; `--format delta` writes into a new or empty folder or an earlier Delta output"
    )]
    ParquetOutput { path: String },
    #[error("`{path}` holds files that are not an etl output; `--format delta` never writes beside them")]
    NotEmpty { path: String },
    /// A Parquet run's output (a folder or an object-store prefix) holds Delta tables.
    #[error("`{path}` holds Delta tables (`--format delta`); a Parquet output never writes over or beside them")]
    DeltaOutput { path: String },
    /// Another run committed the table between this run's read and its commit, with other exports.
    #[error(
        "Delta table `{table}` at `{path}` was committed by another run while this run was writing it; this run stopped there"
    )]
    Conflict { table: String, path: String },
    /// Another run published the output (`_etl/run.json`) after this one read it (object stores).
    #[error(
        "`{url}` was published by another run ({winner}) while this run was writing it; the output readers see is that run's, and the Delta tables hold every export's rows exactly once"
    )]
    OutputConflict { url: String, winner: String },
    #[error("table `{table}` has no Delta schema: {source}")]
    Schema { table: String, source: ArrowError },
    #[error("committing Delta table `{table}` at `{path}`: {source}")]
    Commit { table: String, path: String, source: Box<DeltaTableError> },
    #[error("opening Delta table `{table}` at `{path}` (version {version}): {source}")]
    Open { table: String, path: String, version: u64, source: Box<DeltaTableError> },
    #[error("`{path}` is not a Delta output of etl (no `_etl/run.json` listing Delta tables)")]
    NotADeltaOutput { path: String },
    /// Another run published the output (`_etl/run.json`) while `etl delta optimize` compacted
    /// it (object stores; a folder is locked).
    #[error(
        "`{url}` was published by another run ({winner}) while `etl delta optimize` was compacting it; the compacted versions are committed, and the output readers see is that run's"
    )]
    MaintainConflict { url: String, winner: String },
    /// A table has commits that change rows after the version `_etl/run.json` names.
    #[error(
        "Delta table `{table}` at `{path}` has a commit after the version `_etl/run.json` names ({named}): version {version}, a `{operation}`, from a run that is still applying exports or stopped before it published"
    )]
    Unpublished { table: String, path: String, named: u64, version: u64, operation: String },
    #[error("vacuuming Delta table `{table}` at `{path}`: {source}")]
    Vacuum { table: String, path: String, source: Box<DeltaTableError> },
    /// An apply without replay (`DeltaRun::in_place`) found a table it cannot merge after its
    /// check passed (another run changed the table in between).
    #[error("Delta table `{table}` at `{path}` cannot be merged in place: {reason}; this run stopped there")]
    InPlace { table: String, path: String, reason: String },
    /// A data file's deletion vector cannot be read, so its live rows are unknown.
    #[error("the deletion vector of `{file}` in Delta table `{table}` cannot be read: {reason}")]
    DeletionVector { table: String, file: String, reason: String },
}

impl DeltaError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            DeltaError::ParquetOutput { .. } | DeltaError::NotEmpty { .. } => Some(
                "choose another `--out` for the Delta tables, or drop `--format delta` to replace the output as Parquet",
            ),
            DeltaError::DeltaOutput { .. } => {
                Some("pass `--format delta` to update the Delta tables, or choose another `--out` for Parquet")
            }
            DeltaError::Conflict { .. } | DeltaError::OutputConflict { .. } => Some(
                "runs writing the same `--out` must not overlap; the tables this run committed hold its exports' rows exactly once, and the output readers see is the other run's: run this one again once it has finished",
            ),
            DeltaError::Schema { .. } => Some("this is a bug in etl; please report it with the run's input if you can"),
            DeltaError::NotADeltaOutput { .. } => {
                Some("name a folder written by `etl unwind --out DIR --format delta`")
            }
            DeltaError::Vacuum { .. } => Some(
                "`--retain` must be at least the table's `delta.deletedFileRetentionDuration` (168h unless set); `--allow-short-retention` goes below it when no reader reads an older version",
            ),
            DeltaError::MaintainConflict { .. } => {
                Some("run `etl delta optimize` again once the other run has finished; it compacts what is left")
            }
            DeltaError::Unpublished { .. } => Some(
                "let that run finish, or run the same `etl unwind … --format delta` again to complete it, then maintain the output",
            ),
            DeltaError::InPlace { .. } => Some(
                "run it again: the tables this run committed hold its exports' rows exactly once, and the next run checks the tables again before it merges",
            ),
            DeltaError::DeletionVector { .. } => Some(
                "the table's log names a deletion-vector file that is missing or damaged; restore it from a backup, or unwind the exports again into a new output",
            ),
            DeltaError::Commit { .. } | DeltaError::Open { .. } => None,
        }
    }
}

/// The sink for `--out DIR --format delta`.
pub struct DeltaSink {
    target: PathBuf,
    staging: Staging,
    scratch: PathBuf,
    props: WriterProperties,
    /// Names this run's data files: `part-00000-<tag>.parquet`.
    tag: String,
    run: DeltaRun,
}

impl DeltaSink {
    /// Locks `target` and checks that it is absent, empty, or an earlier Delta output.
    pub fn create(target: &Path, props: WriterProperties) -> Result<DeltaSink, SinkError> {
        // Never `--overwrite` here: Delta tables are replaced by commits, never by deleting files.
        let staging = match Staging::create(target, false) {
            Err(SinkError::NotEtlOutput { path }) => return Err(DeltaError::NotEmpty { path }.into()),
            other => other?,
        };
        if target.join(RUN_REPORT).is_file() {
            refuse_other_format(&RunManifest::read(target)?, true, &target.display().to_string())?;
        }
        let scratch = super::scratch_dir(staging.path());
        fs::create_dir_all(&scratch).map_err(SinkError::io("create", &scratch))?;
        let tag = run_tag();
        Ok(DeltaSink { target: target.to_owned(), staging, scratch, props, tag, run: DeltaRun::default() })
    }
}

/// Names a run's data files (`part-00000-<tag>.parquet`): the process id and the clock. Never a
/// run id of the object-store commit (no `T`), whose clean-up deletes files named by run ids.
pub(super) fn run_tag() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// Refuses the output `shown`, whose committed run manifest is `m`, to a run of the other format:
/// a Delta run (`delta`) onto Parquet files ([`DeltaError::ParquetOutput`]), a Parquet run onto
/// Delta tables ([`DeltaError::DeltaOutput`]). Every sink and a sharded run's shards check it.
pub fn refuse_other_format(m: &RunManifest, delta: bool, shown: &str) -> Result<(), DeltaError> {
    match (delta, is_delta_output(m)) {
        (true, false) => Err(DeltaError::ParquetOutput { path: shown.to_owned() }),
        (false, true) => Err(DeltaError::DeltaOutput { path: shown.to_owned() }),
        _ => Ok(()),
    }
}

/// Whether a run manifest is that of a Delta output (its tables record Delta versions).
pub fn is_delta_output(m: &RunManifest) -> bool {
    !m.tables.is_empty() && m.tables.iter().all(|t| t.delta_version.is_some())
}

/// The Delta schema of an Arrow schema, field metadata (e.g. `dynamodb.type`) included.
pub fn delta_schema(table: &str, schema: &Schema) -> Result<StructType, DeltaError> {
    schema.try_into_kernel().map_err(|source| DeltaError::Schema { table: table.to_owned(), source })
}

/// The `add` action of one data file: `rel` is its path inside the table.
fn add_action(rel: String, path: &Path, rows: u64) -> Result<Add, SinkError> {
    let meta = fs::metadata(path).map_err(SinkError::io("inspect", path))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64);
    Ok(Add {
        path: rel,
        partition_values: HashMap::new(),
        size: meta.len() as i64,
        modification_time: modified,
        data_change: true,
        stats: Some(format!("{{\"numRecords\":{rows}}}")),
        ..Default::default()
    })
}

/// The `add` action of a file copied into a table server-side (`bytes` long, `rows` rows).
fn stored_add_action(rel: String, bytes: u64, rows: u64) -> Add {
    Add {
        path: rel,
        partition_values: HashMap::new(),
        size: bytes as i64,
        modification_time: chrono::Utc::now().timestamp_millis(),
        data_change: true,
        stats: Some(format!("{{\"numRecords\":{rows}}}")),
        ..Default::default()
    }
}

fn sync(path: &Path) -> Result<(), SinkError> {
    fs::File::open(path).and_then(|f| f.sync_all()).map_err(SinkError::io("sync", path))
}

impl super::PartSink for DeltaSink {
    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        PartWriter::create(self.staging.path(), table, part, schema, &self.props)
    }
}

impl Sink for DeltaSink {
    fn scratch(&self) -> &Path {
        &self.scratch
    }

    fn keep(&self, rel: &str, from: &Path, link: bool) -> Result<Option<PathBuf>, SinkError> {
        // A file the output's own `_etl/base/` keeps is linked from there: the published copy is
        // replaced by the staged one when the run commits.
        super::local::keep_in(self.staging.path(), rel, from, link, Some(&self.target))
    }

    fn keep_object(
        &self,
        rel: &str,
        from: &crate::source::object::ObjectRef,
        shown: &str,
    ) -> Result<Option<PathBuf>, SinkError> {
        super::local::keep_object_in(self.staging.path(), rel, from, shown)
    }

    fn delta_run(&mut self, run: DeltaRun) {
        self.run = run;
    }

    fn delta_home(&self) -> Option<Home> {
        Some(Home::Dir(self.target.clone()))
    }

    fn commit(
        self: Box<Self>,
        mut manifest: RunManifest,
        schemas: &[TableSchema],
    ) -> Result<(RunManifest, Committed), SinkError> {
        let DeltaSink { target, staging, scratch, props, tag, run } = *self;
        fs::remove_dir_all(&scratch).map_err(SinkError::io("remove", &scratch))?;
        // The tables of the output this run replaces, to empty those it no longer has.
        let previous = if target.join(RUN_REPORT).is_file() { Some(RunManifest::read(&target)?) } else { None };
        let home = Home::Dir(target.clone());
        let tables = TablesCommit {
            home: &home,
            staging: staging.path(),
            scratch: staging.path(),
            props: &props,
            tag: &tag,
            run: &run,
            previous: previous.as_ref(),
            stored: &BTreeMap::new(),
        };
        let placed = commit_tables(&tables, &mut manifest, schemas)?;
        // The exports read, kept for later applies, replace the previous ones once every table
        // is committed (the previous `_etl/base/` goes with the staging folder).
        // One exchange where the file system has it, so no moment is without a `_etl/base/`.
        let base = target.join(crate::pipeline::apply::BASE_DIR);
        let staged_base = staging.path().join(crate::pipeline::apply::BASE_DIR);
        if staged_base.is_dir() {
            sync(&staged_base)?;
            if !base.is_dir() || super::local::exchange(&staged_base, &base).is_err() {
                if base.is_dir() {
                    let old = staging.path().join("_etl/base-replaced");
                    fs::rename(&base, &old).map_err(SinkError::io("replace", &base))?;
                }
                let etl_dir = target.join("_etl");
                fs::create_dir_all(&etl_dir).map_err(SinkError::io("create", &etl_dir))?;
                fs::rename(&staged_base, &base).map_err(SinkError::io("publish", &staged_base))?;
            }
        } else if base.is_dir() {
            let old = staging.path().join("_etl/base-replaced");
            fs::rename(&base, &old).map_err(SinkError::io("replace", &base))?;
        }
        super::faults::point("delta-base-kept");
        record_versions(&mut manifest, previous.as_ref(), placed.versions);
        // `_etl/run.json` last: written into the staging folder, then renamed over the previous.
        publish_manifest(staging.path(), &target, &manifest, schemas)?;
        // Dropping the staging folder removes what is left of it, then releases the lock.
        drop(staging);
        Ok((manifest, Committed { run_id: None, files: placed.files, bytes: placed.bytes, deleted: 0 }))
    }
}

/// What [`commit_tables`] works with.
pub(super) struct TablesCommit<'a> {
    /// The output.
    pub home: &'a Home,
    /// The folder the manifest's staged part paths are relative to.
    pub staging: &'a Path,
    /// A local folder for files on their way to an object store.
    pub scratch: &'a Path,
    pub props: &'a WriterProperties,
    /// Names this run's data files.
    pub tag: &'a str,
    pub run: &'a DeltaRun,
    /// The output's committed manifest before this run.
    pub previous: Option<&'a RunManifest>,
    /// Part files already in the output's store (a sharded run's, [`Sink::keep_stored`]): the
    /// manifest's path, the key they are copied from.
    pub stored: &'a BTreeMap<String, String>,
}

/// What [`commit_tables`] committed.
pub(super) struct Placed {
    pub versions: BTreeMap<String, u64>,
    pub files: usize,
    pub bytes: u64,
}

/// Commits every table `manifest` lists into its Delta table under `c.home`, one commit each (a
/// MERGE onto an existing table when incremental exports are applied, else a replace), and
/// empties the tables of the previous output that this run no longer has. Rewrites each table's
/// files in `manifest` to the files placed, and records the versions and MERGE reports.
pub(super) fn commit_tables(
    c: &TablesCommit<'_>,
    manifest: &mut RunManifest,
    schemas: &[TableSchema],
) -> Result<Placed, SinkError> {
    let TablesCommit { home, scratch, props, tag, run, previous, .. } = *c;
    // Once an output takes deletion vectors, so do the tables later runs create.
    let vectors = run.deletion_vectors || previous.is_some_and(|p| p.deletion_vectors);
    manifest.deletion_vectors = vectors;
    let contracts: HashMap<&str, &TableSchema> = schemas.iter().map(|s| (s.table.as_str(), s)).collect();
    let mut files = 0;
    let mut bytes = 0;
    let mut versions = BTreeMap::new();
    // Tables an apply in place left without a row (those a run lists even then stay listed).
    let mut emptied = Vec::new();
    let kept_when_empty: Vec<String> =
        manifest.tables.iter().filter(|t| manifest.lists_when_empty(t)).map(|t| t.name.clone()).collect();
    let io = crate::store::io_runtime();
    // Every table's place, staged files, schema and Delta table, read first.
    let mut opened = Vec::with_capacity(manifest.tables.len());
    for table in &manifest.tables {
        opened.push(open(c, table, &contracts)?);
    }
    // The MERGEs rewrite their tables' files (the most of an apply's time) on the run's threads;
    // the tables are then committed one after another, in the manifest's order.
    let prepared = prepare_merges(c, manifest, &opened, &contracts, vectors)?;
    for ((table, opened), prepared) in manifest.tables.iter_mut().zip(opened).zip(prepared) {
        let Opened { at, path, staged, names, copies, copied, schema, existing, covered } = opened;
        if let Some(version) = covered {
            tracing::info!(table = %table.name, version, "the table's Delta transaction covers this run: skipped");
            skipped(table, version, &mut versions, run.in_place.then_some(&at))?;
            continue;
        }
        let listed_before = previous.and_then(|p| p.tables.iter().find(|t| t.name == table.name)).map(|t| t.rows);
        // In place, `_rejects` holds this run's rejects only: appended to those of the runs before.
        let append_to = existing.as_ref().filter(|_| appends(run, &table.name));
        let mut replace_reason = None;
        if let Some(prepared) = prepared {
            let merged = prepared.and_then(|p| match p {
                merge::Prepared::Ready(ready) => merge::commit(&table.name, &at, run.txn_version, *ready).map(Ok),
                merge::Prepared::Replace(reason) => Ok(Err(reason)),
            });
            match merged {
                Ok(Ok(merge::Merged { version, report, files: added })) => {
                    tracing::info!(table = %table.name, version, files_rewritten = report.files_rewritten, bytes_rewritten = report.bytes_rewritten, "merged the Delta table");
                    if run.in_place {
                        // Its staged rows are the upserted ones only.
                        table.rows =
                            (listed_before.unwrap_or(0) + report.rows_upserted).saturating_sub(report.rows_removed);
                    }
                    files += added.len();
                    bytes += added.iter().map(|f| f.bytes).sum::<u64>();
                    let committed = report.mode != manifest::MergeMode::Unchanged;
                    if run.in_place && table.rows == 0 && !kept_when_empty.contains(&table.name) {
                        // Its MERGE removed every row: it is emptied, as a replay would have it.
                        emptied.push(table.name.clone());
                    }
                    table.files = added;
                    table.delta_version = Some(version);
                    table.delta_merge = Some(report);
                    versions.insert(table.name.clone(), version);
                    if committed {
                        super::faults::point("delta-table-committed");
                    }
                    continue;
                }
                Ok(Err(reason)) if run.in_place && listed_before.is_some() => {
                    return Err(DeltaError::InPlace { table: table.name.clone(), path, reason }.into());
                }
                Ok(Err(reason)) => {
                    tracing::warn!(table = %table.name, %reason, "the Delta table is replaced whole");
                    replace_reason = Some(reason);
                }
                Err(e) => {
                    let version = after_conflict(e, &at, run, &table.name, tag)?;
                    skipped(table, version, &mut versions, run.in_place.then_some(&at))?;
                    continue;
                }
            }
        }
        at.create()?;
        at.place_stored(&copies)?;
        let mut adds = Vec::with_capacity(table.files.len());
        for ((f, from), file_name) in table.files.iter_mut().zip(&staged).zip(names) {
            // Appended to a table that has its files, a file of no reject adds nothing.
            if append_to.is_some() && f.rows == 0 {
                continue;
            }
            if copied {
                adds.push(Action::Add(stored_add_action(file_name.clone(), f.bytes, f.rows)));
            } else {
                // The action from the staged file: the same bytes wherever they go.
                adds.push(Action::Add(add_action(file_name.clone(), from, f.rows)?));
                at.place(from, &file_name)?;
            }
            f.path = format!("{}/{file_name}", table.name);
            files += 1;
            bytes += f.bytes;
        }
        if append_to.is_some() {
            table.files.retain(|f| f.rows > 0);
        }
        at.settle()?;
        let columns = delta_schema(&table.name, &schema)?;
        let appended = adds.len() as u64;
        // The rejects of earlier runs whose items this run superseded are marked deleted in the
        // same commit.
        let mut marks = match (append_to, run.located.get(&table.name)) {
            (Some(t), Some(located)) => match rejects::mark(&at, scratch, t, located, props, tag)? {
                Ok(m) => m,
                Err(reason) => return Err(DeltaError::InPlace { table: table.name.clone(), path, reason }.into()),
            },
            _ => rejects::Marked::default(),
        };
        files += marks.files_added as usize;
        bytes += marks.bytes_added;
        adds.extend(std::mem::take(&mut marks.actions));
        // An append of nothing (no reject, none superseded) commits nothing.
        let unchanged = append_to.is_some() && adds.is_empty();
        let committed = match append_to {
            Some(t) if unchanged => Ok(t.version().unwrap_or_default()),
            Some(t) => commit_on_read_version(t, None, adds, commit_properties(run.txn_version))
                .map_err(merge::delta_err(&table.name, &path)),
            None => commit_table(&at, &table.name, columns, adds, run.txn_version, existing.as_ref(), vectors),
        };
        let version = match committed {
            Ok(v) => v,
            Err(e) => {
                let version = after_conflict(e, &at, run, &table.name, tag)?;
                skipped(table, version, &mut versions, run.in_place.then_some(&at))?;
                continue;
            }
        };
        tracing::info!(table = %table.name, version, "committed the Delta table");
        table.delta_version = Some(version);
        if run.merge.is_some() {
            let (mode, reason) = match append_to {
                Some(_) if unchanged => (manifest::MergeMode::Unchanged, None),
                Some(_) => (manifest::MergeMode::Append, None),
                None => (manifest::MergeMode::Replace, replace_reason.or_else(|| Some("the table is new".into()))),
            };
            table.delta_merge = Some(manifest::DeltaMerge {
                mode,
                reason,
                changed_keys: run.merge.as_ref().map_or(0, |m| m.keys.len() as u64),
                rows_upserted: table.rows,
                rows_removed: marks.rows,
                files_rewritten: marks.files_rewritten,
                bytes_rewritten: marks.bytes_rewritten,
                files_added: appended + marks.files_added,
                bytes_added: table.bytes() + marks.bytes_added,
                files_marked: marks.files,
                deletion_vector_bytes: marks.vector_bytes,
                ..Default::default()
            });
        }
        if append_to.is_some() {
            table.rows = (table.rows + listed_before.unwrap_or(0)).saturating_sub(marks.rows);
        }
        versions.insert(table.name.clone(), version);
        if !unchanged {
            super::faults::point("delta-table-committed");
        }
    }
    // A table of the previous output that this run no longer has (every row left it, or the
    // full export has no such items) is emptied by one commit, so a Delta reader sees its true
    // current state; like a Parquet output, `run.json` no longer lists it.
    let kept: std::collections::HashSet<&str> = manifest.tables.iter().map(|t| t.name.as_str()).collect();
    for gone in previous.iter().flat_map(|p| &p.tables).filter(|t| !kept.contains(t.name.as_str())) {
        let at = home.join(&gone.name);
        if !io.block_on(at.is_table())? {
            continue;
        }
        let path = at.shown();
        let fail = |source| DeltaError::Open {
            table: gone.name.clone(),
            path: path.clone(),
            version: 0,
            source: Box::new(source),
        };
        let t = io.block_on(at.open(None)).map_err(fail)?;
        let columns = StructType::clone(&t.snapshot().map_err(fail)?.schema());
        match commit_table(&at, &gone.name, columns, Vec::new(), run.txn_version, Some(&t), false) {
            Ok(version) => {
                tracing::info!(table = %gone.name, version, "emptied the Delta table: this run has no rows for it")
            }
            Err(e) => {
                after_conflict(e, &at, run, &gone.name, tag)?;
            }
        }
        super::faults::point("delta-table-committed");
    }
    // An emptied table is not listed, like a table this run has no rows for: its MERGE commit
    // left the Delta table without a live row.
    manifest.tables.retain(|t| !emptied.contains(&t.name));
    for name in &emptied {
        versions.remove(name);
    }
    Ok(Placed { versions, files, bytes })
}

/// One table of a run's manifest, as [`commit_tables`] finds it before committing anything.
struct Opened {
    /// Where its Delta table is, and that place as shown.
    at: Home,
    path: String,
    /// Its staged part files, and the names they take in the table.
    staged: Vec<PathBuf>,
    names: Vec<String>,
    /// Part files already in the output's store, copied into the table: (from, name, bytes).
    copies: Vec<(String, String, u64)>,
    /// Every part of the table is such a copy.
    copied: bool,
    /// The schema its parts were written with.
    schema: Schema,
    /// The Delta table there, if there is one.
    existing: Option<deltalake::DeltaTable>,
    /// The table's version when its `txn` already covers this run (a merge is skipped).
    covered: Option<u64>,
}

/// Whether `table` is appended to rather than merged or replaced: in place, `_rejects` holds
/// this run's rejects only.
fn appends(run: &DeltaRun, table: &str) -> bool {
    run.in_place && table == crate::normalize::naming::REJECTS_TABLE
}

/// Finds where `table` goes, what it is made of, and the Delta table already there.
fn open(
    c: &TablesCommit<'_>,
    table: &manifest::TableReport,
    contracts: &HashMap<&str, &TableSchema>,
) -> Result<Opened, SinkError> {
    let TablesCommit { home, staging, tag, run, stored, .. } = *c;
    let at = home.join(&table.name);
    let path = at.shown();
    let staged: Vec<PathBuf> = table.files.iter().map(|f| staging.join(&f.path)).collect();
    let names: Vec<String> = table
        .files
        .iter()
        .map(|f| {
            Path::new(&f.path)
                .file_stem()
                .map(|s| format!("{}-{tag}.parquet", s.to_string_lossy()))
                .unwrap_or_else(|| format!("part-{tag}.parquet"))
        })
        .collect();
    // Stored parts (a sharded run's, all of a table's or none) are copied into the table when it
    // is committed; the schema is in their footers.
    let copies: Vec<(String, String, u64)> = table
        .files
        .iter()
        .zip(&names)
        .filter_map(|(f, name)| stored.get(&f.path).map(|from| (from.clone(), name.clone(), f.bytes)))
        .collect();
    let copied = copies.len() == table.files.len() && !copies.is_empty();
    if !copies.is_empty() && !copied {
        return Err(SinkError::Io {
            action: "commit",
            path,
            source: std::io::Error::other("a table of both stored and staged part files"),
        });
    }
    let schema = match (copies.first(), staged.first(), contracts.get(table.name.as_str())) {
        (Some((key, _, _)), _, _) => at.stored_schema(key, &table.name)?,
        (None, Some(p), _) => written_schema(p, &table.name)?,
        (None, None, Some(c)) => c.arrow_schema(),
        (None, None, None) => (*crate::normalize::rejects_schema()).clone(),
    };
    let not_opened = |source| DeltaError::Open {
        table: table.name.clone(),
        path: path.clone(),
        version: 0,
        source: Box::new(source),
    };
    let io = crate::store::io_runtime();
    let existing =
        if io.block_on(at.is_table())? { Some(io.block_on(at.open(None)).map_err(not_opened)?) } else { None };
    super::faults::point("delta-table-read");
    // Merging: a table whose `txn` already covers this run was merged by an earlier attempt. (A
    // full export replaces every table whatever its `txn`: replacing twice is the same as once.)
    let covered = match (&existing, &run.merge) {
        (Some(t), Some(_)) => covered(t, run, &table.name, &path)?,
        _ => None,
    };
    Ok(Opened { at, path, staged, names, copies, copied, schema, existing, covered })
}

/// Prepares the MERGE of every table of `manifest` that an apply merges (one that exists, is
/// not covered by its `txn` and is not appended to), on the run's threads, the table that was
/// largest first ([`merge::prepare`]); per table, in the manifest's order, `None` when it is not
/// merged; `Err` only when a worker panicked. Each table merged on an object store has a scratch
/// folder of its own: the files of two tables can have the same names.
fn prepare_merges(
    c: &TablesCommit<'_>,
    manifest: &RunManifest,
    opened: &[Opened],
    contracts: &HashMap<&str, &TableSchema>,
    vectors: bool,
) -> Result<Vec<Option<Result<merge::Prepared, SinkError>>>, SinkError> {
    let TablesCommit { scratch, props, tag, run, previous, .. } = *c;
    let Some(keys) = &run.merge else { return Ok(manifest.tables.iter().map(|_| None).collect()) };
    let mut out: Vec<Option<Result<merge::Prepared, SinkError>>> = Vec::with_capacity(opened.len());
    let mut jobs = Vec::new();
    for (i, (table, o)) in manifest.tables.iter().zip(opened).enumerate() {
        let Some(t) = o.existing.as_ref().filter(|_| o.covered.is_none() && !appends(run, &table.name)) else {
            out.push(None);
            continue;
        };
        let (key_attributes, keys) = match keys.of(&table.name) {
            Ok(k) => k,
            Err(reason) => {
                out.push(Some(Ok(merge::Prepared::Replace(reason))));
                continue;
            }
        };
        let scratch = match &o.at {
            Home::Object { .. } => {
                let dir = scratch.join(format!("merge-{i:05}"));
                if let Err(e) = fs::create_dir_all(&dir) {
                    out.push(Some(Err(SinkError::io("create", &dir)(e))));
                    continue;
                }
                dir
            }
            Home::Dir(_) => scratch.to_path_buf(),
        };
        let size = previous.and_then(|p| p.tables.iter().find(|p| p.name == table.name)).map_or(0, |p| p.bytes());
        out.push(None);
        jobs.push((size, i, scratch, t, key_attributes, keys));
    }
    // The pool takes its tasks in order: the largest table first.
    jobs.sort_by_key(|&(size, ..)| std::cmp::Reverse(size));
    let task = |done: &mut Vec<(usize, Result<merge::Prepared, SinkError>)>, k: usize, _: &Stop| {
        let (_, i, scratch, t, key_attributes, keys) = &jobs[k];
        let (i, scratch) = (*i, scratch.as_path());
        let table = &manifest.tables[i];
        let o = &opened[i];
        let prepared = merge::prepare(merge::MergeInput {
            table: &table.name,
            home: &o.at,
            scratch,
            table_handle: (*t).clone(),
            parts: o.staged.clone(),
            new_schema: std::sync::Arc::new(o.schema.clone()),
            contract: contracts.get(table.name.as_str()).copied(),
            key_attributes,
            keys,
            props,
            tag,
            deletion_vectors: vectors,
            located: run.located.get(&table.name),
            upserts_only: run.in_place,
        });
        if scratch != c.scratch {
            // Its files are in the table or removed: the folder is empty.
            let _ = fs::remove_dir(scratch);
        }
        // A table's own error is its result, handled when it is committed, in table order.
        done.push((i, prepared));
        Ok::<(), SinkError>(())
    };
    // A task fails only by panicking: then that is the error.
    for (i, prepared) in
        pool::run(manifest.options.threads, jobs.len(), |_| Ok(Vec::new()), task)?.into_iter().flatten()
    {
        out[i] = Some(prepared);
    }
    Ok(out)
}

/// The rows version `version` of the table at `at` holds: each data file's record count less
/// the rows its deletion vector deletes.
fn live_rows(at: &Home, table: &str, version: u64) -> Result<u64, SinkError> {
    let path = at.shown();
    let fail =
        |source| DeltaError::Open { table: table.to_owned(), path: path.clone(), version, source: Box::new(source) };
    let t = crate::store::io_runtime().block_on(at.open(Some(version))).map_err(fail)?;
    let snapshot = t.snapshot().map_err(fail)?;
    let mut rows = 0u64;
    for f in snapshot.log_data().iter() {
        let Some(n) = f.num_records() else {
            return Err(fail(DeltaTableError::Generic(format!("data file `{}` has no record count", f.path()))).into());
        };
        let deleted = f.deletion_vector_descriptor().map_or(0, |d| d.cardinality.max(0).unsigned_abs());
        rows += (n as u64).saturating_sub(deleted);
    }
    Ok(rows)
}

/// Records `table` as skipped at `version`: its `txn` already covers this run. An apply in place
/// staged only its changed rows, so the table's rows are then counted at `in_place` (the table).
fn skipped(
    table: &mut manifest::TableReport,
    version: u64,
    versions: &mut BTreeMap<String, u64>,
    in_place: Option<&Home>,
) -> Result<(), SinkError> {
    table.delta_version = Some(version);
    table.delta_merge = Some(manifest::DeltaMerge { mode: manifest::MergeMode::Skipped, ..Default::default() });
    table.files.clear();
    versions.insert(table.name.clone(), version);
    if let Some(at) = in_place {
        table.rows = live_rows(at, &table.name, version)?;
    }
    Ok(())
}

/// The table's version when its last etl `txn` covers this run (a run of the same or later
/// exports committed it), else `None`.
fn covered(t: &deltalake::DeltaTable, run: &DeltaRun, table: &str, path: &str) -> Result<Option<u64>, SinkError> {
    let Some(want) = run.txn_version else { return Ok(None) };
    let have = txn_version(t).map_err(|source| DeltaError::Commit {
        table: table.to_owned(),
        path: path.to_owned(),
        source: Box::new(source),
    })?;
    Ok(have.is_some_and(|h| h >= want).then(|| t.version().unwrap_or_default()))
}

/// Whether a commit lost to another writer of the same table (its version was taken first).
pub(super) fn is_conflict(e: &DeltaTableError) -> bool {
    use deltalake::kernel::transaction::TransactionError as T;
    matches!(
        e,
        DeltaTableError::VersionAlreadyExists(_)
            | DeltaTableError::Transaction {
                source: T::CommitConflict(_) | T::MaxCommitAttempts(_) | T::VersionAlreadyExists(_)
            }
    )
}

/// After a failed commit of `table`: when another run committed the table meanwhile and its
/// `txn` covers this run (it applied the same exports), the table is done, at that run's
/// version; when it does not, this run lost the table ([`DeltaError::Conflict`]). Any other
/// failure is returned as it is.
/// Either way, the data files this run (`tag`) placed that the table's latest version does not
/// list are removed: nothing refers to them.
fn after_conflict(e: SinkError, at: &Home, run: &DeltaRun, table: &str, tag: &str) -> Result<u64, SinkError> {
    let SinkError::Delta(DeltaError::Commit { source, .. }) = &e else { return Err(e) };
    if !is_conflict(source) {
        return Err(e);
    }
    let path = at.shown();
    let reopened = crate::store::io_runtime().block_on(at.open(None)).map_err(|source| DeltaError::Open {
        table: table.to_owned(),
        path: path.clone(),
        version: 0,
        source: Box::new(source),
    })?;
    let listed: std::collections::HashSet<String> = match reopened.snapshot() {
        Ok(snapshot) => snapshot.log_data().iter().map(|f| f.path().into_owned()).collect(),
        Err(e) => {
            return Err(DeltaError::Open { table: table.to_owned(), path, version: 0, source: Box::new(e) }.into());
        }
    };
    // Never one the table lists: a commit whose answer was lost may be this run's own.
    if let Err(e) = crate::store::io_runtime().block_on(at.remove_unlisted(tag, &listed)) {
        tracing::warn!(table, error = %e, "could not remove this run's unused data files; `etl delta vacuum` does");
    }
    // The same exports exactly: a later run's tables would put this run's state ahead of its own.
    let have = txn_version(&reopened).map_err(|source| DeltaError::Commit {
        table: table.to_owned(),
        path: path.clone(),
        source: Box::new(source),
    })?;
    match (have, run.txn_version) {
        (Some(h), Some(w)) if h == w => {
            let version = reopened.version().unwrap_or_default();
            tracing::info!(table, version, "another run committed this table with the same exports meanwhile: kept");
            Ok(version)
        }
        _ => Err(DeltaError::Conflict { table: table.to_owned(), path }.into()),
    }
}

/// This run's entry in the output's history (the versions `etl sql --as-of` reads), after the
/// previous output's, and the versions in the run state.
pub(super) fn record_versions(
    manifest: &mut RunManifest,
    previous: Option<&RunManifest>,
    versions: BTreeMap<String, u64>,
) {
    let mut history = previous.map(|p| p.delta_history.clone()).unwrap_or_default();
    history.push(manifest::OutputVersion {
        version: history.last().map_or(0, |h| h.version + 1),
        committed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        export_id: match &manifest.state {
            Some(state) => state.applied.last().map(|a| a.export_id.clone()),
            None => manifest.exports.last().map(crate::source::chain::export_id),
        },
        tables: manifest
            .tables
            .iter()
            .filter_map(|t| {
                let version = *versions.get(&t.name)?;
                Some((t.name.clone(), manifest::TableVersion { version, rows: t.rows }))
            })
            .collect(),
    });
    manifest.delta_history = history;
    if let Some(state) = &mut manifest.state {
        state.delta_versions = versions;
    }
}

/// Publishes `manifest` from `staging` into the output `target`: the schema contracts, the run
/// state (this run's, or none: a previous one would name exports no longer held), and
/// `_etl/run.json` last, each synced and renamed into place. Called with the output's lock held.
pub(super) fn publish_manifest(
    staging: &Path,
    target: &Path,
    manifest: &RunManifest,
    schemas: &[TableSchema],
) -> Result<(), SinkError> {
    manifest::write(staging, manifest, schemas).map_err(SinkError::io("write the run manifest in", staging))?;
    let schema_dir = target.join(manifest::SCHEMA_DIR);
    fs::create_dir_all(&schema_dir).map_err(SinkError::io("create", &schema_dir))?;
    // The contracts `write` staged: those of the tables the manifest lists.
    for s in schemas.iter().filter(|s| manifest.lists(&s.table)) {
        let name = format!("{}.json", s.table);
        let from = staging.join(manifest::SCHEMA_DIR).join(&name);
        fs::rename(&from, schema_dir.join(&name)).map_err(SinkError::io("publish", &from))?;
    }
    let state_file = staging.join(crate::state::STATE_FILE);
    let published_state = target.join(crate::state::STATE_FILE);
    if state_file.is_file() {
        sync(&state_file)?;
        fs::rename(&state_file, &published_state).map_err(SinkError::io("publish", &state_file))?;
    } else if published_state.is_file() {
        fs::remove_file(&published_state).map_err(SinkError::io("remove", &published_state))?;
    }
    super::faults::point("delta-state-copied");
    let from = staging.join(RUN_REPORT);
    sync(&from)?;
    fs::rename(&from, target.join(RUN_REPORT)).map_err(SinkError::io("publish", &from))?;
    // After the commit, so the output committed before it keeps every contract it lists. The
    // run has committed: a contract that cannot be removed is a warning (nothing reads the
    // contract of a table not listed; the next publish removes it).
    if let Err(err) = manifest::remove_unlisted_contracts(&schema_dir, |t| manifest.lists(t)) {
        tracing::warn!(path = %schema_dir.display(), "published; a stale contract could not be removed: {err}");
    }
    sync(&schema_dir)?;
    sync(&target.join("_etl"))
}

/// The version of the last etl `txn` committed to `table`.
pub(super) fn txn_version(table: &deltalake::DeltaTable) -> Result<Option<i64>, DeltaTableError> {
    let snapshot = table.snapshot()?;
    let log_store = table.log_store();
    crate::store::io_runtime().block_on(snapshot.transaction_version(log_store.as_ref(), TXN_APP_ID))
}

/// The Arrow schema a part file was written with (etl's types and field metadata).
fn written_schema(path: &Path, table: &str) -> Result<Schema, SinkError> {
    let file = fs::File::open(path).map_err(SinkError::io("open", path))?;
    let reader = datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|source| SinkError::Part { table: table.to_owned(), path: path.display().to_string(), source })?;
    Ok(reader.schema().as_ref().clone())
}

/// One commit that creates the table at `at`, or replaces every file of its current version
/// with `adds` (and its schema with `columns`), with the run's `txn`. Returns the committed version.
///
/// On an object store, where another run may commit the same table meanwhile, an existing table
/// is replaced as `read` (the version this run read and checked) holds it, by a commit of the
/// version after it: it fails if that version was taken ([`after_conflict`] decides). In a
/// folder, which the run's lock keeps to itself, deltalake's create-or-replace does it.
/// `deletion_vectors`: the run asks for them; the table takes them (`delta.enableDeletionVectors`)
/// after the commit when it asks or when `read` has them already (a table keeps them).
fn commit_table(
    at: &Home,
    table: &str,
    columns: StructType,
    adds: Vec<Action>,
    txn: Option<i64>,
    read: Option<&deltalake::DeltaTable>,
    deletion_vectors: bool,
) -> Result<u64, SinkError> {
    let path = at.shown();
    let fail = |source: DeltaTableError| {
        SinkError::from(DeltaError::Commit { table: table.to_owned(), path: path.clone(), source: Box::new(source) })
    };
    let props = commit_properties(txn);
    let had_them = read.is_some_and(dv::enabled);
    if let (Home::Object { .. }, Some(read)) = (at, read) {
        if deletion_vectors && !had_them {
            let enabled = dv::enable(read.clone()).map_err(fail)?;
            return commit_on_read_version(&enabled, Some(columns), adds, props).map_err(fail);
        }
        return commit_on_read_version(read, Some(columns), adds, props).map_err(fail);
    }
    let builder = match at {
        Home::Dir(d) => CreateBuilder::new().with_location(d.display().to_string()),
        Home::Object { .. } => CreateBuilder::new().with_log_store(at.log_store().map_err(fail)?),
    };
    let builder = builder
        .with_table_name(table)
        .with_columns(columns.fields().cloned())
        .with_save_mode(SaveMode::Overwrite)
        .with_commit_properties(props)
        .with_actions(adds);
    let builder = if deletion_vectors || had_them {
        builder.with_configuration_property(deltalake::TableProperty::EnableDeletionVectors, Some("true"))
    } else {
        builder
    };
    let committed = crate::store::io_runtime().block_on(async { builder.await }).map_err(fail)?;
    committed.version().ok_or_else(|| fail(DeltaTableError::Generic("the commit returned no version".into())))
}

/// The properties of every etl commit: the run's `txn`, and no retry. Never committed on top of
/// a version this run did not read: deltalake's retry would let a MERGE that removes no file land
/// twice. A lost race is decided by the `txn` instead.
pub(super) fn commit_properties(txn: Option<i64>) -> CommitProperties {
    let props = CommitProperties::default().with_max_retries(0);
    match txn {
        Some(v) => props.with_application_transaction(Transaction::new(TXN_APP_ID, v)),
        None => props,
    }
}

/// Commits `adds` on the version `read` holds, as the next version only: replacing every file of
/// it (and its schema with `columns`), or, without `columns`, beside them (an append).
fn commit_on_read_version(
    read: &deltalake::DeltaTable,
    columns: Option<StructType>,
    adds: Vec<Action>,
    props: CommitProperties,
) -> Result<u64, DeltaTableError> {
    use deltalake::kernel::MetadataExt as _;
    let snapshot = read.snapshot()?;
    let (mode, mut actions) = match columns {
        Some(columns) => {
            let metadata = snapshot
                .metadata()
                .clone()
                .with_schema(&columns)
                .map_err(|e| DeltaTableError::Generic(e.to_string()))?;
            let mut actions = vec![Action::Metadata(metadata)];
            actions.extend(snapshot.log_data().iter().map(|f| Action::Remove(f.remove_action(true))));
            (SaveMode::Overwrite, actions)
        }
        None => (SaveMode::Append, Vec::new()),
    };
    actions.extend(adds);
    let operation = deltalake::protocol::DeltaOperation::Write { mode, partition_by: None, predicate: None };
    let log_store = read.log_store();
    let committed = crate::store::io_runtime().block_on(async {
        deltalake::kernel::transaction::CommitBuilder::from(props)
            .with_actions(actions)
            .build(Some(snapshot), log_store, operation)
            .await
    })?;
    Ok(committed.version())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};

    use super::*;

    #[test]
    fn field_metadata_and_types_carry_into_the_delta_schema() {
        let meta = HashMap::from([("dynamodb.type".to_owned(), "N".to_owned())]);
        let schema = Schema::new(vec![
            Field::new("pk", DataType::Utf8, false),
            Field::new("n", DataType::Decimal128(38, 4), true).with_metadata(meta),
            Field::new("at", DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())), true),
            Field::new("tags", DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))), true),
        ]);
        let delta = delta_schema("t", &schema).unwrap();
        let names: Vec<&str> = delta.fields().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["pk", "n", "at", "tags"]);
        let n = delta.field("n").unwrap();
        assert!(n.metadata.contains_key("dynamodb.type"), "{:?}", n.metadata);
        assert!(!delta.field("pk").unwrap().nullable);
    }
}

//! Maintenance of a Delta output for long-running jobs: `etl delta optimize` compacts each
//! table's small data files in one commit, `etl delta vacuum` deletes the files no version within
//! the retention period needs. Both work on a folder and on an `s3://` prefix, through the same
//! [`Home`] the sink and `etl sql` open tables with.
//!
//! A folder is locked for the duration, so neither runs beside an apply. A prefix has no lock:
//! each table's commit is a conditional PUT of its next log version, so a commit that races an
//! apply's loses cleanly (one of the two fails; no row is lost or doubled), and `_etl/run.json`
//! is replaced with `If-Match` on the head read at the start, so an apply published in between
//! is never overwritten.
//!
//! Optimize rewrites files with etl's own Parquet writer and each file's own schema (etl's types
//! and field metadata, exactly as the files it compacts; on a prefix, the small files are
//! downloaded into a scratch folder and the compacted ones uploaded), commits `remove`/`add`
//! actions with `dataChange: false` (readers of the table's changes see none), then moves
//! `_etl/run.json` to the new versions, so `etl sql` and the next merge read the compacted files;
//! a crash before that leaves the previous version named, whose files stay until a vacuum past
//! the retention period. Vacuum is deltalake's plan (`VacuumMode::Full`: expired removed files
//! and files no commit lists, such as those of a killed merge, once older than the retention
//! period), carried out by etl; it never changes `_etl/run.json`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::file::properties::WriterProperties;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::operations::vacuum::VacuumMode;
use deltalake::protocol::DeltaOperation;
use object_store::ObjectStore;
use object_store::path::Path as ObjPath;

use super::merge::{BATCH_ROWS, NewFile, arrow_err, delta_err, part_err};
use super::{DeltaError, Home, dv, is_delta_output};
use crate::aws::AwsOptions;
use crate::sink::SinkError;
use crate::sink::local::{RUN_REPORT, Staging};
use crate::sink::manifest::{self, RUN_MANIFEST, RunManifest, read_contracts};
use crate::sink::object::{Head, Publish, ScratchRoot, read_head, scratch_root};
use crate::store::{ObjectUrl, StoreError, Target, io_runtime};

/// A data file of a table's version: its path in the table, its size, and its `remove` action.
type LiveFile = (String, u64, deltalake::kernel::Remove);

/// What `etl delta optimize` did to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Optimized {
    pub table: String,
    /// The version compacted, and the one committed (`None`: nothing to compact).
    pub from_version: u64,
    pub version: Option<u64>,
    pub files_removed: u64,
    pub bytes_removed: u64,
    pub files_added: u64,
    pub bytes_added: u64,
    /// Data files of the table's latest version, after the commit.
    pub files_after: u64,
}

/// What `etl delta vacuum` did to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vacuumed {
    pub table: String,
    /// The files deleted (or, on a dry run, that would be), relative to the table's folder.
    pub files: Vec<String>,
}

/// The operations a commit after the version `_etl/run.json` names may have made: maintenance,
/// which changes no row.
const MAINTENANCE: [&str; 3] = ["OPTIMIZE", "VACUUM START", "VACUUM END"];

/// A Delta output opened for maintenance.
enum Output {
    /// A folder, locked while it is maintained.
    Dir { out: PathBuf, staging: Staging },
    /// A prefix: `_etl/run.json` as read (a new one is conditional on it), and a scratch folder
    /// for the files downloaded and written.
    Object { store: Arc<dyn ObjectStore>, url: ObjectUrl, head: Head, root: ScratchRoot },
}

impl Output {
    /// The Delta output at `target`, with its run manifest; anything else is an error.
    fn open(target: &Target, aws: &AwsOptions) -> Result<(Output, RunManifest), SinkError> {
        let not_delta = || SinkError::from(DeltaError::NotADeltaOutput { path: target.to_string() });
        match target {
            Target::Path(out) => {
                if !out.join(RUN_REPORT).is_file() {
                    return Err(not_delta());
                }
                let staging = Staging::create(out, false)?;
                let manifest = RunManifest::read(out)?;
                if !is_delta_output(&manifest) {
                    return Err(not_delta());
                }
                Ok((Output::Dir { out: out.clone(), staging }, manifest))
            }
            Target::Object(url) => {
                let (store, head) = io_runtime().block_on(async {
                    let store: Arc<dyn ObjectStore> = crate::store::open(url, aws).await?;
                    let head = read_head(&store, url, &format!("{}{RUN_MANIFEST}", url.dir_prefix())).await?;
                    Ok::<_, SinkError>((store, head))
                })?;
                let Some(head) = head else { return Err(not_delta()) };
                let manifest = match head.manifest.as_deref() {
                    Some(m) if is_delta_output(m) => m.clone(),
                    _ => return Err(not_delta()),
                };
                let root = scratch_root()?;
                fs::create_dir_all(&root.dir).map_err(SinkError::io("create", &root.dir))?;
                Ok((Output::Object { store, url: url.clone(), head, root }, manifest))
            }
        }
    }

    /// The output's folder or prefix; a table is its [`Home::join`].
    fn home(&self) -> Home {
        match self {
            Output::Dir { out, .. } => Home::Dir(out.clone()),
            Output::Object { store, url, .. } => Home::Object { store: store.clone(), url: url.clone() },
        }
    }

    /// Where files are downloaded and written before they are uploaded (object stores).
    fn scratch(&self) -> &Path {
        match self {
            Output::Dir { staging, .. } => staging.path(),
            Output::Object { root, .. } => &root.dir,
        }
    }

    /// The names of the output's Delta tables (those `_etl/run.json` lists and those it no longer
    /// lists), sorted.
    fn table_names(&self) -> Result<Vec<String>, SinkError> {
        let candidates: Vec<String> = match self {
            Output::Dir { out, .. } => {
                let mut names = Vec::new();
                for e in fs::read_dir(out).map_err(SinkError::io("read", out))? {
                    let e = e.map_err(SinkError::io("read", out))?;
                    names.push(e.file_name().to_string_lossy().into_owned());
                }
                names
            }
            Output::Object { store, url, .. } => {
                let prefix = url.dir_prefix();
                let listed = io_runtime()
                    .block_on(store.list_with_delimiter(Some(&ObjPath::from(prefix.as_str()))))
                    .map_err(|e| SinkError::Store(StoreError::object("list", &url.to_string(), &e)))?;
                listed
                    .common_prefixes
                    .iter()
                    .filter_map(|p| {
                        p.as_ref().strip_prefix(prefix.as_str()).map(|n| n.trim_end_matches('/').to_owned())
                    })
                    .collect()
            }
        };
        let home = self.home();
        let mut tables = Vec::new();
        for name in candidates {
            if name.is_empty() || name.starts_with('.') || name == "_etl" {
                continue;
            }
            if io_runtime().block_on(home.join(&name).is_table()).map_err(SinkError::Store)? {
                tables.push(name);
            }
        }
        tables.sort();
        Ok(tables)
    }

    /// Publishes `manifest` as the output's `_etl/run.json` (and its state as `_etl/state.json`);
    /// the tables' contracts do not change. On an object store, conditionally on the head read.
    fn publish(self, manifest: &mut RunManifest, aws: &AwsOptions) -> Result<(), SinkError> {
        match self {
            Output::Dir { out, staging } => super::publish_manifest(staging.path(), &out, manifest, &[]),
            Output::Object { store, url, head, root } => {
                // The committed run's contracts, uploaded again under this run.
                let schemas = read_contracts(&Target::Object(url.clone()), aws)?.unwrap_or_default();
                let staging = root.dir.join("publish");
                manifest::write(&staging, manifest, &schemas)
                    .map_err(SinkError::io("write the run manifest in", &staging))?;
                io_runtime().block_on(async {
                    let mut publish = Publish::begin_on(store.clone(), &url, true, Some(head)).await?;
                    let copies = publish.copies(&staging);
                    publish.send(copies).await?;
                    publish.commit(manifest).await.map_err(|e| match e {
                        SinkError::Conflict { url, winner, .. } => {
                            SinkError::from(DeltaError::MaintainConflict { url, winner })
                        }
                        other => other,
                    })?;
                    if let Err(e) = publish.cleanup().await {
                        let w = format!(
                            "published; removing objects of older runs failed ({e}); the next run removes them"
                        );
                        tracing::warn!("{w}");
                        manifest.warnings.push(w);
                    }
                    Ok(())
                })
            }
        }
    }
}

/// Refuses a table whose log has commits after the version `named` (the one `_etl/run.json`
/// names) that change rows: an apply that is still running, or stopped before it published.
/// Compacting past it would publish its rows under the previous run's state.
async fn refuse_unpublished(table: &str, home: &Home, named: u64, latest: u64) -> Result<(), SinkError> {
    for v in named + 1..=latest {
        let rel = format!("{}/{v:020}.json", super::DELTA_LOG);
        let Some(bytes) = home.read(&rel).await? else { continue };
        let operation = String::from_utf8_lossy(&bytes).lines().find_map(|line| {
            let action: serde_json::Value = serde_json::from_str(line).ok()?;
            Some(action.get("commitInfo")?.get("operation")?.as_str()?.to_owned())
        });
        if !operation.as_deref().is_some_and(|op| MAINTENANCE.contains(&op)) {
            return Err(DeltaError::Unpublished {
                table: table.to_owned(),
                path: home.shown(),
                named,
                version: v,
                operation: operation.unwrap_or_else(|| "unknown".into()),
            }
            .into());
        }
    }
    Ok(())
}

/// Compacts, in each Delta table the run manifest of the output at `target` lists, the data
/// files smaller than `target_bytes` into files of about `target_bytes` (files are grouped by
/// their exact schema, so a file written before a column was added is compacted only with its
/// like), one commit per table that has two or more such files; then publishes `_etl/run.json`
/// naming the new versions.
pub fn optimize(
    target: &Target,
    aws: &AwsOptions,
    target_bytes: u64,
    props: &WriterProperties,
) -> Result<Vec<Optimized>, SinkError> {
    let (output, mut manifest) = Output::open(target, aws)?;
    let root = output.home();
    let scratch = output.scratch().to_owned();
    let tag = super::run_tag();
    // Every table is checked before any is compacted: a refusal leaves the output as it was.
    let mut opened = Vec::with_capacity(manifest.tables.len());
    for t in &manifest.tables {
        let home = root.join(&t.name);
        if !io_runtime().block_on(home.is_table()).map_err(SinkError::Store)? {
            opened.push(None);
            continue;
        }
        let handle = io_runtime().block_on(home.open(None)).map_err(delta_err(&t.name, &home.shown()))?;
        let latest = handle.version().unwrap_or_default();
        if let Some(named) = t.delta_version.filter(|named| *named < latest) {
            io_runtime().block_on(refuse_unpublished(&t.name, &home, named, latest))?;
        }
        opened.push(Some((home, handle)));
    }
    let mut done = Vec::new();
    for (t, opened) in manifest.tables.iter_mut().zip(opened) {
        let Some((home, handle)) = opened else { continue };
        let fail = delta_err(&t.name, &home.shown());
        let snapshot = handle.snapshot().map_err(&fail)?;
        let from_version = snapshot.version();
        let files: Vec<LiveFile> = snapshot
            .log_data()
            .iter()
            .map(|f| (f.path().into_owned(), f.size().max(0) as u64, f.remove_action(false)))
            .collect();
        // Small files and files with a deletion vector (rewritten without the rows it deletes),
        // each with a local copy (in a folder, the file itself), grouped by their exact schema (in
        // the order the log lists them). One small file alone stays as it is.
        let rewritten = |(_, size, remove): &LiveFile| *size < target_bytes || remove.deletion_vector.is_some();
        let mut groups: Vec<(SchemaRef, Vec<(LiveFile, PathBuf)>)> = Vec::new();
        let mut copies = Vec::new();
        if files.iter().filter(|f| rewritten(f)).count() > 1 || files.iter().any(|f| f.2.deletion_vector.is_some()) {
            for f in files.iter().cloned() {
                if !rewritten(&f) {
                    continue;
                }
                let (rel, size, remove) = f;
                let path = home.local_copy(&rel, &scratch)?;
                copies.push(path.clone());
                let file = fs::File::open(&path).map_err(SinkError::io("open", &path))?;
                let schema =
                    ParquetRecordBatchReaderBuilder::try_new(file).map_err(part_err(&t.name, &path))?.schema().clone();
                match groups.iter_mut().find(|(s, _)| *s == schema) {
                    Some((_, g)) => g.push(((rel, size, remove), path)),
                    None => groups.push((schema, vec![((rel, size, remove), path)])),
                }
            }
        }
        // The schema `etl sql` shows for the table is its run's first file's: when that file is
        // compacted, its group's file comes first among those added (when it is not, it stays).
        let first = t.files.first().map(|f| f.path.clone());
        let shown: Option<SchemaRef> = groups
            .iter()
            .find(|(_, g)| g.iter().any(|((rel, _, _), _)| first.as_deref() == Some(&format!("{}/{rel}", t.name))))
            .map(|(s, _)| s.clone());
        groups.sort_by_key(|(s, _)| Some(s) != shown.as_ref());
        let mut report = Optimized {
            table: t.name.clone(),
            from_version,
            version: None,
            files_removed: 0,
            bytes_removed: 0,
            files_added: 0,
            bytes_added: 0,
            files_after: files.len() as u64,
        };
        let mut actions = Vec::new();
        let mut added = Vec::new();
        let mut removed = std::collections::HashSet::new();
        let mut n = 0usize;
        let marked = |g: &[(LiveFile, PathBuf)]| g.iter().any(|((_, _, r), _)| r.deletion_vector.is_some());
        for (schema, group) in groups.into_iter().filter(|(_, g)| g.len() > 1 || marked(g)) {
            let mut out_file: Option<(NewFile, u64)> = None;
            for ((rel, size, remove), path) in group {
                // A new file when this one would take the current one past the target.
                if let Some((f, _)) = out_file.take_if(|(_, bytes)| *bytes + size > target_bytes)
                    && let Some((add, r)) = f.finish_into(&home, &t.name)?
                {
                    actions.push(no_data_change(add));
                    added.push(r);
                }
                if out_file.is_none() {
                    let name = format!("part-o{n:05}-{tag}.parquet");
                    n += 1;
                    let dir = home.write_dir(&scratch);
                    out_file = Some((NewFile::create(dir, name, schema.clone(), props, &t.name)?, 0));
                }
                let Some((f, bytes)) = out_file.as_mut() else { continue };
                let deleted = match &remove.deletion_vector {
                    Some(d) => Some(dv::read(&home, d)?.map_err(|reason| DeltaError::DeletionVector {
                        table: t.name.clone(),
                        file: rel.clone(),
                        reason,
                    })?),
                    None => None,
                };
                let file = fs::File::open(&path).map_err(SinkError::io("open", &path))?;
                let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(part_err(&t.name, &path))?
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(part_err(&t.name, &path))?;
                let mut at = 0u64;
                for batch in reader {
                    let batch = batch.map_err(arrow_err(&t.name, &path))?;
                    let n = batch.num_rows() as u64;
                    match &deleted {
                        Some(deleted) => {
                            let live: BooleanArray = (at..at + n).map(|p| Some(!deleted.contains(p))).collect();
                            let kept = filter_record_batch(&batch, &live).map_err(arrow_err(&t.name, &path))?;
                            f.write(&kept, &t.name)?;
                        }
                        None => f.write(&batch, &t.name)?,
                    }
                    at += n;
                }
                *bytes += size;
                removed.insert(format!("{}/{rel}", t.name));
                report.files_removed += 1;
                report.bytes_removed += size;
                actions.push(Action::Remove(remove));
            }
            if let Some((f, _)) = out_file
                && let Some((add, r)) = f.finish_into(&home, &t.name)?
            {
                actions.push(no_data_change(add));
                added.push(r);
            }
        }
        for c in &copies {
            home.done_with(c);
        }
        if report.files_removed > 0 {
            home.settle()?;
            let operation = DeltaOperation::Optimize { predicate: None, target_size: target_bytes as i64 };
            let log_store = handle.log_store();
            let committed = io_runtime()
                .block_on(async {
                    CommitBuilder::from(CommitProperties::default())
                        .with_actions(actions)
                        .build(Some(snapshot), log_store, operation)
                        .await
                })
                .map_err(&fail)?;
            report.version = Some(committed.version());
            report.files_added = added.len() as u64;
            report.bytes_added = added.iter().map(|f| f.bytes).sum();
            report.files_after = report.files_after - report.files_removed + report.files_added;
            tracing::info!(table = %t.name, version = committed.version(), files_removed = report.files_removed, files_added = report.files_added, "compacted the Delta table");
            crate::sink::faults::point("delta-table-optimized");
            // The run's files still in the table and the compacted ones; the compacted first when
            // the run's first file was compacted, so the first file keeps the schema `etl sql`
            // shows (a file left alone may be of another schema: columns a merge added).
            let first_compacted = t.files.first().is_some_and(|f| removed.contains(&f.path));
            t.files.retain(|f| !removed.contains(&f.path));
            if first_compacted {
                t.files.splice(0..0, added);
            } else {
                t.files.extend(added);
            }
        }
        // The table's latest version, compacted now or by an earlier optimize that stopped
        // before publishing `_etl/run.json` (its commits after the run's version change no rows:
        // `refuse_unpublished`).
        t.delta_version = Some(report.version.unwrap_or(from_version));
        done.push(report);
    }
    record_maintenance(&mut manifest);
    output.publish(&mut manifest, aws)?;
    Ok(done)
}

/// `add` actions of compacted files change no data.
fn no_data_change(mut action: Action) -> Action {
    if let Action::Add(a) = &mut action {
        a.data_change = false;
    }
    action
}

/// A history entry for the versions `manifest` names when they moved, and the state's copy.
fn record_maintenance(manifest: &mut RunManifest) {
    let versions: BTreeMap<String, u64> =
        manifest.tables.iter().filter_map(|t| Some((t.name.clone(), t.delta_version?))).collect();
    if let Some(last) = manifest.delta_history.last()
        && last.tables.iter().any(|(name, v)| versions.get(name).is_some_and(|now| *now != v.version))
    {
        let mut next = last.clone();
        next.version += 1;
        next.committed_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        for (name, v) in &mut next.tables {
            if let Some(now) = versions.get(name) {
                v.version = *now;
            }
        }
        manifest.delta_history.push(next);
    }
    if let Some(state) = &mut manifest.state {
        state.delta_versions = versions;
    }
}

/// Deletes `files` (as deltalake's vacuum plan names them in the table's store) and records one
/// `VACUUM END` commit with how many were deleted. A file already gone counts as deleted. Killed
/// between the two, the files are gone without a record, which is harmless: no version needs them.
fn delete_and_commit(handle: &deltalake::DeltaTable, files: &[String]) -> Result<(), deltalake::DeltaTableError> {
    use futures::{StreamExt as _, TryStreamExt as _};
    let log_store = handle.log_store();
    let snapshot = handle.snapshot()?;
    io_runtime().block_on(async {
        let store = log_store.object_store(None);
        let owned: Vec<ObjPath> = files.iter().map(|f| ObjPath::from(f.as_str())).collect();
        let paths = futures::stream::iter(owned.into_iter().map(Ok)).boxed();
        let deleted: Vec<String> = store
            .delete_stream(paths)
            .map(|r| match r {
                Ok(p) => Ok(p.to_string()),
                Err(object_store::Error::NotFound { path, .. }) => Ok(path),
                Err(e) => Err(e),
            })
            .try_collect()
            .await?;
        let props = CommitProperties::default().with_metadata([(
            "operationMetrics".to_owned(),
            serde_json::json!({ "numDeletedFiles": deleted.len(), "numVacuumedDirectories": 0 }),
        )]);
        CommitBuilder::from(props)
            .build(Some(snapshot), log_store.clone(), DeltaOperation::VacuumEnd { status: "COMPLETED".into() })
            .await?;
        Ok(())
    })
}

/// Deletes, in every Delta table of the output at `target` (those `_etl/run.json` lists and those
/// it no longer lists), the data files no version committed within `retain` needs; with
/// `dry_run`, only lists them. A `retain` shorter than a table's
/// `delta.deletedFileRetentionDuration` (one week unless set) is refused unless `allow_short`.
pub fn vacuum(
    target: &Target,
    aws: &AwsOptions,
    retain: std::time::Duration,
    dry_run: bool,
    allow_short: bool,
) -> Result<Vec<Vacuumed>, SinkError> {
    let (output, manifest) = Output::open(target, aws)?;
    let root = output.home();
    let retention = chrono::Duration::from_std(retain).unwrap_or(chrono::Duration::MAX);
    // A commit `_etl/run.json` does not name yet may have removed files its version lists:
    // keeping only the latest version's files would take them from readers. Every table is
    // checked before any is vacuumed.
    let mut opened = Vec::new();
    for name in output.table_names()? {
        let home = root.join(&name);
        let handle = io_runtime().block_on(home.open(None)).map_err(|source| -> SinkError {
            DeltaError::Vacuum { table: name.clone(), path: home.shown(), source: Box::new(source) }.into()
        })?;
        let named = manifest.tables.iter().find(|t| t.name == name).and_then(|t| t.delta_version);
        let latest = handle.version().unwrap_or_default();
        if let Some(named) = named.filter(|named| *named < latest) {
            io_runtime().block_on(refuse_unpublished(&name, &home, named, latest))?;
        }
        opened.push((name, home, handle));
    }
    let mut done = Vec::new();
    for (name, home, handle) in opened {
        let fail = |source: deltalake::DeltaTableError| -> SinkError {
            DeltaError::Vacuum { table: name.clone(), path: home.shown(), source: Box::new(source) }.into()
        };
        // deltalake decides what to delete (its dry run); etl deletes it and records one
        // `VACUUM END` commit, where deltalake's own vacuum records a START and an END commit.
        let builder = handle
            .vacuum()
            .with_retention_period(retention)
            .with_enforce_retention_duration(!allow_short)
            .with_mode(VacuumMode::Full)
            .with_dry_run(true);
        let (handle, metrics) = io_runtime().block_on(async { builder.await }).map_err(fail)?;
        if !dry_run && !metrics.files_deleted.is_empty() {
            delete_and_commit(&handle, &metrics.files_deleted).map_err(fail)?;
        }
        // deltalake names files by their path in the table's store: a folder's full path, or the
        // key below the table's prefix. Shown relative to the table.
        let prefix = match &home {
            Home::Dir(d) => format!("{}/", d.display()),
            Home::Object { url, .. } => url.dir_prefix(),
        };
        let mut files: Vec<String> = metrics
            .files_deleted
            .iter()
            .map(|f| {
                let f = f.trim_start_matches('/');
                let full = format!("/{f}");
                full.strip_prefix(&prefix)
                    .or_else(|| f.strip_prefix(&prefix))
                    .map(str::to_owned)
                    .unwrap_or_else(|| f.to_owned())
            })
            .collect();
        files.sort();
        if !files.is_empty() {
            tracing::info!(table = %name, files = files.len(), dry_run, "vacuumed the Delta table");
        }
        done.push(Vacuumed { table: name, files });
    }
    drop(output);
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacted_files_change_no_data() {
        let add = deltalake::kernel::Add { path: "a.parquet".into(), data_change: true, ..Default::default() };
        match no_data_change(Action::Add(add)) {
            Action::Add(a) => assert!(!a.data_change),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_parquet_output_is_not_maintained() {
        let tmp = tempfile::tempdir().unwrap();
        let target = Target::Path(tmp.path().to_owned());
        let props = crate::sink::parquet::writer_properties(1024);
        let e = optimize(&target, &AwsOptions::default(), 1, &props).unwrap_err();
        assert!(matches!(e, SinkError::Delta(DeltaError::NotADeltaOutput { .. })), "{e}");
    }

    #[test]
    fn a_prefix_without_a_delta_output_is_not_maintained() {
        let url =
            ObjectUrl { scheme: crate::store::Scheme::Memory, bucket: "maintain-none".into(), key: "lake/".into() };
        let _store = crate::store::memory::store("maintain-none");
        let e =
            vacuum(&Target::Object(url), &AwsOptions::default(), std::time::Duration::ZERO, true, true).unwrap_err();
        assert!(matches!(e, SinkError::Delta(DeltaError::NotADeltaOutput { .. })), "{e}");
    }

    #[test]
    fn only_maintenance_may_follow_the_published_version() {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join(super::super::DELTA_LOG);
        fs::create_dir_all(&log).unwrap();
        let commit = |v: u64, op: &str| {
            let line = serde_json::json!({ "commitInfo": { "operation": op } });
            fs::write(log.join(format!("{v:020}.json")), format!("{line}\n")).unwrap();
        };
        commit(3, "OPTIMIZE");
        commit(4, "VACUUM END");
        commit(5, "MERGE");
        let home = Home::Dir(tmp.path().to_owned());
        io_runtime().block_on(refuse_unpublished("t", &home, 2, 4)).unwrap();
        let e = io_runtime().block_on(refuse_unpublished("t", &home, 2, 5)).unwrap_err();
        match e {
            SinkError::Delta(DeltaError::Unpublished { version, operation, named, .. }) => {
                assert_eq!((version, operation.as_str(), named), (5, "MERGE", 2));
            }
            other => panic!("{other}"),
        }
    }
}

//! Maintenance of a Delta output for long-running jobs: `etl delta optimize` compacts each
//! table's small data files in one commit, `etl delta vacuum` deletes the files no version within
//! the retention period needs.
//!
//! Both hold the output's lock, so they never run beside an apply. Optimize rewrites files with
//! etl's own Parquet writer and each file's own schema (etl's types and field metadata, exactly as
//! the files it compacts), commits `remove`/`add` actions with `dataChange: false` (readers of
//! the table's changes see none), then moves `_etl/run.json` to the new versions, so `etl sql`
//! and the next merge read the compacted files; a crash before that leaves the previous version
//! named, whose files stay until a vacuum past the retention period. Vacuum is deltalake's
//! (`VacuumMode::Full`: expired removed files and files no commit lists, such as those of a
//! killed merge, once older than the retention period); it never changes `_etl/run.json`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::file::properties::WriterProperties;
use deltalake::kernel::Action;
use deltalake::kernel::transaction::{CommitBuilder, CommitProperties};
use deltalake::operations::vacuum::VacuumMode;
use deltalake::protocol::DeltaOperation;

use super::merge::{BATCH_ROWS, NewFile, arrow_err, delta_err, part_err};
use super::{DeltaError, is_delta_output, is_delta_table, open_latest, sync};
use crate::sink::SinkError;
use crate::sink::local::{RUN_REPORT, Staging};
use crate::sink::manifest::RunManifest;

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

/// The output at `out`, locked, with its run manifest: a Delta output or an error.
fn open_output(out: &Path) -> Result<(Staging, RunManifest), SinkError> {
    let text = out.to_string_lossy();
    if crate::store::ObjectUrl::parse(&text).is_some() {
        return Err(DeltaError::MaintainObjectStore { url: text.into_owned() }.into());
    }
    if !out.join(RUN_REPORT).is_file() {
        return Err(DeltaError::NotADeltaOutput { path: out.display().to_string() }.into());
    }
    let staging = Staging::create(out, false)?;
    let manifest = RunManifest::read(out)?;
    if !is_delta_output(&manifest) {
        return Err(DeltaError::NotADeltaOutput { path: out.display().to_string() }.into());
    }
    Ok((staging, manifest))
}

/// Compacts, in each Delta table `out`'s run manifest lists, the data files smaller than
/// `target_bytes` into files of about `target_bytes` (files are grouped by their exact schema,
/// so a file written before a column was added is compacted only with its like), one commit per
/// table that has two or more such files; then publishes `_etl/run.json` naming the new versions.
pub fn optimize(out: &Path, target_bytes: u64, props: &WriterProperties) -> Result<Vec<Optimized>, SinkError> {
    let (staging, mut manifest) = open_output(out)?;
    let tag = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    );
    let mut done = Vec::new();
    for t in &mut manifest.tables {
        let dir = out.join(&t.name);
        if !is_delta_table(&dir) {
            continue;
        }
        let fail = delta_err(&t.name, &dir.display().to_string());
        let handle = open_latest(&dir).map_err(&fail)?;
        let snapshot = handle.snapshot().map_err(&fail)?;
        let from_version = snapshot.version();
        let files: Vec<LiveFile> = snapshot
            .log_data()
            .iter()
            .map(|f| (f.path().into_owned(), f.size().max(0) as u64, f.remove_action(false)))
            .collect();
        // Small files, grouped by their exact schema (in the order the log lists them).
        let mut groups: Vec<(SchemaRef, Vec<LiveFile>)> = Vec::new();
        for (rel, size, remove) in files.iter().cloned() {
            if size >= target_bytes {
                continue;
            }
            let path = dir.join(&rel);
            let file = fs::File::open(&path).map_err(SinkError::io("open", &path))?;
            let schema =
                ParquetRecordBatchReaderBuilder::try_new(file).map_err(part_err(&t.name, &path))?.schema().clone();
            match groups.iter_mut().find(|(s, _)| *s == schema) {
                Some((_, g)) => g.push((rel, size, remove)),
                None => groups.push((schema, vec![(rel, size, remove)])),
            }
        }
        // The schema `etl sql` shows for the table (its run's first file) stays first.
        let shown: Option<SchemaRef> = t.files.first().and_then(|f| {
            let file = fs::File::open(out.join(&f.path)).ok()?;
            Some(ParquetRecordBatchReaderBuilder::try_new(file).ok()?.schema().clone())
        });
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
        for (schema, group) in groups.into_iter().filter(|(_, g)| g.len() > 1) {
            let mut out_file: Option<(NewFile, u64)> = None;
            for (rel, size, remove) in group {
                // A new file when this one would take the current one past the target.
                if let Some((f, _)) = out_file.take_if(|(_, bytes)| *bytes + size > target_bytes)
                    && let Some((add, r)) = f.finish(&t.name)?
                {
                    actions.push(no_data_change(add));
                    added.push(r);
                }
                if out_file.is_none() {
                    let name = format!("part-o{n:05}-{tag}.parquet");
                    n += 1;
                    out_file = Some((NewFile::create(&dir, name, schema.clone(), props, &t.name)?, 0));
                }
                let Some((f, bytes)) = out_file.as_mut() else { continue };
                let path = dir.join(&rel);
                let file = fs::File::open(&path).map_err(SinkError::io("open", &path))?;
                let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                    .map_err(part_err(&t.name, &path))?
                    .with_batch_size(BATCH_ROWS)
                    .build()
                    .map_err(part_err(&t.name, &path))?;
                for batch in reader {
                    f.write(&batch.map_err(arrow_err(&t.name, &path))?, &t.name)?;
                }
                *bytes += size;
                removed.insert(format!("{}/{rel}", t.name));
                report.files_removed += 1;
                report.bytes_removed += size;
                actions.push(Action::Remove(remove));
            }
            if let Some((f, _)) = out_file
                && let Some((add, r)) = f.finish(&t.name)?
            {
                actions.push(no_data_change(add));
                added.push(r);
            }
        }
        if report.files_removed > 0 {
            sync(&dir)?;
            let operation = DeltaOperation::Optimize { predicate: None, target_size: target_bytes as i64 };
            let log_store = handle.log_store();
            let committed = crate::store::io_runtime()
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
            // The run's files still in the table, then the compacted ones.
            t.files.retain(|f| !removed.contains(&f.path));
            t.files.extend(added);
        }
        // The table's latest version, compacted now or by an earlier optimize that stopped
        // before publishing `_etl/run.json` (the tables are etl's own: their commits after the
        // last run change no data).
        t.delta_version = Some(report.version.unwrap_or(from_version));
        done.push(report);
    }
    publish(out, &staging, &mut manifest)?;
    drop(staging);
    Ok(done)
}

/// `add` actions of compacted files change no data.
fn no_data_change(mut action: Action) -> Action {
    if let Action::Add(a) = &mut action {
        a.data_change = false;
    }
    action
}

/// Publishes `manifest` as the output's `_etl/run.json` (and its state as `_etl/state.json`),
/// with a history entry for the versions it names when they moved.
fn publish(out: &Path, staging: &Staging, manifest: &mut RunManifest) -> Result<(), SinkError> {
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
    // The tables' contracts do not change: run.json and the state only.
    super::publish_manifest(staging.path(), out, manifest, &[])
}

/// Deletes `files` (as deltalake's vacuum plan names them in the table's store) and records one
/// `VACUUM END` commit with how many were deleted. A file already gone counts as deleted. Killed
/// between the two, the files are gone without a record, which is harmless: no version needs them.
fn delete_and_commit(handle: &deltalake::DeltaTable, files: &[String]) -> Result<(), deltalake::DeltaTableError> {
    use futures::{StreamExt as _, TryStreamExt as _};
    let log_store = handle.log_store();
    let snapshot = handle.snapshot()?;
    crate::store::io_runtime().block_on(async {
        let store = log_store.object_store(None);
        let owned: Vec<object_store::path::Path> =
            files.iter().map(|f| object_store::path::Path::from(f.as_str())).collect();
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

/// Deletes, in every Delta table of the output at `out` (those `_etl/run.json` lists and those
/// it no longer lists), the data files no version committed within `retain` needs; with
/// `dry_run`, only lists them. A `retain` shorter than a table's
/// `delta.deletedFileRetentionDuration` (one week unless set) is refused unless `allow_short`.
pub fn vacuum(
    out: &Path,
    retain: std::time::Duration,
    dry_run: bool,
    allow_short: bool,
) -> Result<Vec<Vacuumed>, SinkError> {
    let (staging, _manifest) = open_output(out)?;
    let mut tables: Vec<String> = Vec::new();
    for e in fs::read_dir(out).map_err(SinkError::io("read", out))? {
        let e = e.map_err(SinkError::io("read", out))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && name != "_etl" && is_delta_table(&e.path()) {
            tables.push(name);
        }
    }
    tables.sort();
    let retention = chrono::Duration::from_std(retain).unwrap_or(chrono::Duration::MAX);
    let mut done = Vec::new();
    for name in tables {
        let dir = out.join(&name);
        let fail = |source: deltalake::DeltaTableError| -> SinkError {
            DeltaError::Vacuum { table: name.clone(), path: dir.display().to_string(), source: Box::new(source) }.into()
        };
        let handle = open_latest(&dir).map_err(fail)?;
        // deltalake decides what to delete (its dry run); etl deletes it and records one
        // `VACUUM END` commit, where deltalake's own vacuum records a START and an END commit.
        let builder = handle
            .vacuum()
            .with_retention_period(retention)
            .with_enforce_retention_duration(!allow_short)
            .with_mode(VacuumMode::Full)
            .with_dry_run(true);
        let (handle, metrics) = crate::store::io_runtime().block_on(async { builder.await }).map_err(fail)?;
        if !dry_run && !metrics.files_deleted.is_empty() {
            delete_and_commit(&handle, &metrics.files_deleted).map_err(fail)?;
        }
        let prefix = format!("{}/", dir.display());
        let mut files: Vec<String> = metrics
            .files_deleted
            .iter()
            .map(|f| {
                // deltalake names files by their path in the store; shown relative to the table.
                let f = f.trim_start_matches('/');
                let full = format!("/{f}");
                full.strip_prefix(&prefix).map(str::to_owned).unwrap_or_else(|| f.to_owned())
            })
            .collect();
        files.sort();
        if !files.is_empty() {
            tracing::info!(table = %name, files = files.len(), dry_run, "vacuumed the Delta table");
        }
        done.push(Vacuumed { table: name, files });
    }
    drop(staging);
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
        let e = optimize(tmp.path(), 1, &crate::sink::parquet::writer_properties(1024)).unwrap_err();
        assert!(matches!(e, SinkError::Delta(DeltaError::NotADeltaOutput { .. })), "{e}");
    }
}

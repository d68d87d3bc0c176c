//! The rows of an output's `_rejects` that an apply in place supersedes, found and (in a Delta
//! table) marked deleted.
//!
//! A replay drops the rejects of items whose keys the chain changed, with the items: a
//! full-export item whose key has a final change is never normalized, and a key's earlier
//! current image is not among the current images any more. An apply in place keeps the output's
//! `_rejects` and adds its own, so the rows of those superseded items are found here, by a
//! predicate the caller gives ([`locate`]), and left out: a Parquet table's files are rewritten
//! without them ([`crate::sink::rewrite`]), a Delta table's are marked in deletion vectors in the
//! commit that appends the run's rejects, or rewritten without them in that commit when the
//! table does not take deletion vectors ([`mark`]).

use std::collections::HashMap;
use std::path::Path;

use datafusion::arrow::array::{Array, AsArray as _, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use datafusion::parquet::file::properties::WriterProperties;
use deltalake::DeltaTable;
use deltalake::kernel::{Action, Add};
use roaring::RoaringTreemap;

use super::merge::{
    BATCH_ROWS, FileAt, Located, LocatedFile, NewFile, arrow_err, delta_err, live_files, part_err, read_columns,
    vector_not_taken,
};
use super::{Home, dv};
use crate::normalize::naming::REJECTS_TABLE;
use crate::sink::SinkError;

/// One row of `_rejects`, as the predicate of [`locate`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct RejectRow<'a> {
    pub source_file: &'a str,
    pub reason: &'a str,
    pub raw: &'a str,
    pub raw_truncated: bool,
}

/// `Ok(true)` for a row to leave out, `Err(reason)` when the row cannot be told (the run then
/// replays).
pub type Stale<'a> = dyn Fn(&RejectRow<'_>) -> Result<bool, String> + 'a;

/// The columns [`locate`] reads.
const COLUMNS: [&str; 4] = ["source_file", "reason", "raw", "raw_truncated"];

/// The rows of `_rejects` at `home` that `stale` picks, by data file: `files` are the table's
/// plain Parquet files (paths from `home`), or `None` for a Delta table, whose live files its
/// log lists (a Delta output without the table has none). `Ok(Err(reason))` when a row cannot be
/// told or a file is not one of `_rejects`.
pub fn locate(home: &Home, files: Option<&[String]>, stale: &Stale<'_>) -> Result<Result<Located, String>, SinkError> {
    let mut located = Located { version: 0, files: HashMap::new() };
    let listed: Vec<(String, Option<deltalake::kernel::DeletionVectorDescriptor>)> = match files {
        Some(files) => files.iter().map(|f| (f.clone(), None)).collect(),
        None => {
            let io = crate::store::io_runtime();
            if !io.block_on(home.is_table())? {
                return Ok(Ok(located));
            }
            let fail = delta_err(REJECTS_TABLE, &home.shown());
            let handle = io.block_on(home.open(None)).map_err(&fail)?;
            let snapshot = handle.snapshot().map_err(&fail)?;
            located.version = snapshot.version();
            snapshot.log_data().iter().map(|f| (f.path().into_owned(), f.remove_action(true).deletion_vector)).collect()
        }
    };
    for (rel, vector) in listed {
        let deleted = match &vector {
            Some(d) => match dv::read(home, d)? {
                Ok(rows) => rows,
                Err(reason) => return Ok(Err(reason)),
            },
            None => RoaringTreemap::new(),
        };
        let mut positions = Vec::new();
        let mut at = 0u64;
        let mut each = |batch: &RecordBatch| -> Result<(), String> {
            let text = |name: &str| {
                batch
                    .column_by_name(name)
                    .and_then(|c| c.as_string_opt::<i32>())
                    .ok_or_else(|| format!("data file `{rel}` of `_rejects` has no text column `{name}`"))
            };
            let (source_file, reason, raw) = (text("source_file")?, text("reason")?, text("raw")?);
            let truncated = batch
                .column_by_name("raw_truncated")
                .and_then(|c| c.as_boolean_opt())
                .ok_or_else(|| format!("data file `{rel}` of `_rejects` has no boolean column `raw_truncated`"))?;
            for i in 0..batch.num_rows() {
                // A row an earlier commit deleted is gone already.
                if deleted.contains(at + i as u64) {
                    continue;
                }
                let row = RejectRow {
                    source_file: source_file.value(i),
                    reason: reason.value(i),
                    raw: raw.value(i),
                    raw_truncated: truncated.is_valid(i) && truncated.value(i),
                };
                if stale(&row)? {
                    positions.push(at + i as u64);
                }
            }
            at += batch.num_rows() as u64;
            Ok(())
        };
        let schema = match read_columns(FileAt::In(home, &rel), REJECTS_TABLE, &COLUMNS, &mut each)? {
            Ok(Some(read)) => read.schema,
            Ok(None) => return Ok(Err(format!("data file `{rel}` lacks a column of `_rejects`"))),
            Err(reason) => return Ok(Err(reason)),
        };
        located.files.insert(rel, LocatedFile { positions, deleted, schema });
    }
    Ok(Ok(located))
}

/// What [`mark`] adds to a commit.
#[derive(Debug, Default)]
pub struct Marked {
    /// Each file holding a located row removed and added back with its new deletion vector.
    pub actions: Vec<Action>,
    pub files: u64,
    pub rows: u64,
    pub vector_bytes: u64,
    /// Without deletion vectors: each file holding a located row is removed and written again
    /// without those rows (its bytes, and the files added for it).
    pub files_rewritten: u64,
    pub bytes_rewritten: u64,
    pub files_added: u64,
    pub bytes_added: u64,
}

/// The actions that mark `located`'s rows of the Delta table `table` (at `home`) deleted, for the
/// commit that appends the run's rejects: each data file holding such a row is removed and added
/// back with a deletion vector of those rows and those its vector deleted already. A table that
/// does not take deletion vectors has each such file rewritten without those rows instead (the
/// new file named with `tag`, written with `props`). `Ok(Err(reason))` when the table is no
/// longer at the version `located` read, or a file has a vector the table no longer takes.
pub fn mark(
    home: &Home,
    scratch: &Path,
    table: &DeltaTable,
    located: &Located,
    props: &WriterProperties,
    tag: &str,
) -> Result<Result<Marked, String>, SinkError> {
    let fail = delta_err(REJECTS_TABLE, &home.shown());
    let (version, live) = live_files(table).map_err(&fail)?;
    if located.files.values().all(|f| f.positions.is_empty()) {
        return Ok(Ok(Marked::default()));
    }
    if version != located.version {
        return Ok(Err(format!(
            "`_rejects` is at version {version}, not at version {} where its superseded rejects were found",
            located.version
        )));
    }
    let mut marked: Vec<(super::merge::Live, RoaringTreemap)> = Vec::new();
    let mut rows = 0;
    for live in live {
        let Some(file) = located.files.get(&live.add.path) else { continue };
        let fresh: RoaringTreemap = file.positions.iter().copied().filter(|p| !file.deleted.contains(*p)).collect();
        if !fresh.is_empty() {
            rows += fresh.len();
            marked.push((live, file.deleted.clone() | fresh));
        }
    }
    if marked.is_empty() {
        return Ok(Ok(Marked::default()));
    }
    if !dv::enabled(table) {
        return rewrite(home, scratch, marked, rows, props, tag);
    }
    let vectors: Vec<RoaringTreemap> = marked.iter().map(|(_, rows)| rows.clone()).collect();
    let (descriptors, vector_bytes) = dv::write(home, scratch, &vectors)?;
    let mut actions = Vec::with_capacity(marked.len() * 2);
    let files = marked.len() as u64;
    for ((live, _), descriptor) in marked.into_iter().zip(descriptors) {
        actions.push(Action::Remove(live.remove));
        actions.push(Action::Add(Add { deletion_vector: Some(descriptor), ..live.add }));
    }
    Ok(Ok(Marked { actions, files, rows, vector_bytes, ..Marked::default() }))
}

/// [`mark`] for a table without deletion vectors: each file of `marked` removed and written
/// again without the rows its set names.
fn rewrite(
    home: &Home,
    scratch: &Path,
    marked: Vec<(super::merge::Live, RoaringTreemap)>,
    rows: u64,
    props: &WriterProperties,
    tag: &str,
) -> Result<Result<Marked, String>, SinkError> {
    let mut done = Marked { rows, ..Marked::default() };
    for (i, (live, gone)) in marked.into_iter().enumerate() {
        if live.remove.deletion_vector.is_some() {
            return Ok(Err(vector_not_taken(&live.add.path)));
        }
        let path = home.local_copy(&live.add.path, scratch)?;
        let file = std::fs::File::open(&path).map_err(SinkError::io("open", &path))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file).map_err(part_err(REJECTS_TABLE, &path))?;
        let name = format!("part-r{i:05}-{tag}.parquet");
        let mut out = NewFile::create(home.write_dir(scratch), name, reader.schema().clone(), props, REJECTS_TABLE)?;
        let mut at = 0u64;
        for batch in reader.with_batch_size(BATCH_ROWS).build().map_err(part_err(REJECTS_TABLE, &path))? {
            let batch = batch.map_err(arrow_err(REJECTS_TABLE, &path))?;
            let kept: BooleanArray = (at..at + batch.num_rows() as u64).map(|p| Some(!gone.contains(p))).collect();
            at += batch.num_rows() as u64;
            let kept = filter_record_batch(&batch, &kept).map_err(arrow_err(REJECTS_TABLE, &path))?;
            out.write(&kept, REJECTS_TABLE)?;
        }
        home.done_with(&path);
        done.files_rewritten += 1;
        done.bytes_rewritten += live.add.size.max(0).unsigned_abs();
        done.actions.push(Action::Remove(live.remove));
        if let Some((add, report)) = out.finish_into(home, REJECTS_TABLE)? {
            done.files_added += 1;
            done.bytes_added += report.bytes;
            done.actions.push(add);
        }
    }
    Ok(Ok(done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::{RejectReason, RejectsBuilder};
    use datafusion::parquet::arrow::ArrowWriter;

    fn write(path: &Path, batches: &[RecordBatch]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batches[0].schema(), None).unwrap();
        for b in batches {
            w.write(b).unwrap();
        }
        w.close().unwrap();
    }

    fn rejects(rows: &[(&str, bool)]) -> RecordBatch {
        let mut b = RejectsBuilder::default();
        for (i, (raw, truncated)) in rows.iter().enumerate() {
            let row = crate::normalize::RejectRow {
                file: 0,
                line: i as u64 + 1,
                offset: 0,
                reason: RejectReason::Required,
                attribute: "",
                message: "m",
                raw: raw.as_bytes(),
                truncated: *truncated,
            };
            b.append(&format!("f{i}"), &row);
        }
        b.finish().unwrap()
    }

    #[test]
    fn rows_are_located_by_position_across_batches_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::Dir(dir.path().to_owned());
        write(&dir.path().join("_rejects/a.parquet"), &[rejects(&[("keep", false), ("drop", false)])]);
        write(
            &dir.path().join("_rejects/b.parquet"),
            &[rejects(&[("drop", false)]), rejects(&[("keep", false), ("drop", true)])],
        );
        let files = ["_rejects/a.parquet".to_owned(), "_rejects/b.parquet".to_owned()];
        let seen = std::sync::Mutex::new(Vec::new());
        let stale = |r: &RejectRow<'_>| {
            seen.lock().unwrap().push((r.source_file.to_owned(), r.raw_truncated));
            Ok(r.raw == "drop")
        };
        let located = locate(&home, Some(&files), &stale).unwrap().unwrap();
        assert_eq!(located.files["_rejects/a.parquet"].positions, [1]);
        assert_eq!(located.files["_rejects/b.parquet"].positions, [0, 2], "positions count on over batches");
        assert_eq!(*located.files["_rejects/a.parquet"].schema, *crate::normalize::rejects_schema());
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 5);
            assert_eq!(seen[4], ("f1".to_owned(), true), "the row's file and truncation are the predicate's");
        }

        // The predicate's reason, and a file that is not one of `_rejects`, are reasons.
        let unsure = |_: &RejectRow<'_>| Err("cannot tell".to_owned());
        assert_eq!(locate(&home, Some(&files), &unsure).unwrap().unwrap_err(), "cannot tell");
        let other = datafusion::arrow::array::Int64Array::from(vec![1]);
        let batch = RecordBatch::try_from_iter([("line", std::sync::Arc::new(other) as _)]).unwrap();
        write(&dir.path().join("_rejects/c.parquet"), &[batch]);
        let reason = locate(&home, Some(&["_rejects/c.parquet".to_owned()]), &stale).unwrap().unwrap_err();
        assert!(reason.contains("lacks a column of `_rejects`"), "{reason}");
        // A Delta output without the table has nothing to locate.
        let empty = locate(&home.join("_rejects"), None, &stale).unwrap().unwrap();
        assert!(empty.files.is_empty());
    }
}

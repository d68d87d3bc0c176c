//! A plain Parquet table changed in place: incremental exports applied onto a Parquet output (a
//! folder, or an `s3://` prefix) without replaying the full export ([`crate::pipeline::in_place`]).
//!
//! The run has staged the changed keys' current rows of each table (in the columns of those rows
//! alone); the output's files hold every other row. Each table of the new output is made of:
//!
//! - the output's files that hold no changed key and already have the table's new schema, kept
//!   as they are (hard links into the staged output, or server-side copies under the run's names
//!   on an object store: a published file is never written again);
//! - the others (downloaded first from an object store), rewritten without the rows of changed
//!   keys, row group by row group (each keeps its row groups, less those rows), and in the
//!   table's new schema: a column the table gained is null in the rows that were there before;
//! - the staged rows, laid out in the table's schema, appended to the rewrite of the table's last
//!   file while it is under the target file size (so a table does not gain a small file per
//!   apply), else a file of their own.
//!
//! Laying rows out takes exactly what the table's contract takes (a column's own type, an
//! `int64` or a `decimal` of a smaller scale into its `decimal`, a column of nulls into any
//! type), value by value and strictly: a value that does not fit, or a column the table lacks,
//! is a reason, and the run replays the full export instead. The same holds for the output's
//! own files when the run widened a column (their `int64` into the changed rows' `decimal`, say).

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::{ArrayRef, RecordBatch, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder, RowSelection};

use super::delta::Home;
use super::delta::merge::LocatedFile;
use super::manifest::FileReport;
use super::parquet::part_path;
use super::{Sink, SinkError};

/// Rows per batch read back from a file.
const BATCH_ROWS: usize = 64 * 1024;

/// One table to make in place.
pub struct Table<'a> {
    pub name: &'a str,
    /// Its Arrow schema after this run (its contract's, or `_rejects`').
    pub schema: SchemaRef,
    /// The output's files of the table, as its committed run listed them (paths in the output).
    pub previous: &'a [FileReport],
    /// By file of `previous`, the rows that hold a changed key.
    pub changed: Option<&'a HashMap<String, LocatedFile>>,
    /// This run's staged files of the table (paths from the staged output).
    pub staged: &'a [FileReport],
    /// New rows may join the rewrite of the last file (not `_rejects`, whose files stay).
    pub append_to_last: bool,
}

/// A file a [`Job::Write`] reads rows from.
#[derive(Debug)]
pub enum Source {
    /// A file of the output (its path in the output).
    Output(String),
    /// A file this run staged.
    Staged(PathBuf),
}

/// One file of the new table.
#[derive(Debug)]
pub enum Job {
    /// A file of the output (its path in the output) kept as it is, under a new name.
    Keep { table: String, part: usize, from: String, report: FileReport },
    /// A file written from pieces of files: each with the rows to leave out (positions, ascending).
    Write { table: String, part: usize, schema: SchemaRef, sources: Vec<(Source, Vec<u64>)>, bytes: u64 },
    /// A staged file that already is what the table needs, as it is.
    Staged { report: FileReport },
}

impl Table<'_> {
    /// A part number no file [`plan`] makes for this table takes: for the empty file of a table
    /// left without a row.
    pub fn spare_part(&self) -> usize {
        self.staged.len() + self.previous.len() + 1
    }
}

impl Job {
    /// How much there is to read: the larger first.
    pub fn bytes(&self) -> u64 {
        match self {
            Job::Write { bytes, .. } => *bytes,
            Job::Keep { .. } | Job::Staged { .. } => 0,
        }
    }
}

/// The files each table of `tables` is made of ([`Job`]s, in file order per table), and the
/// staged files they replace (removed once the jobs ran). `out` is the output, `staged` the
/// staged output's folder.
pub fn plan(
    tables: &[Table<'_>],
    out: &Home,
    staged: &Path,
    target_file_bytes: u64,
) -> Result<(Vec<Vec<Job>>, Vec<PathBuf>), SinkError> {
    let mut all = Vec::new();
    let mut replaced = Vec::new();
    for t in tables {
        let mut jobs = Vec::new();
        let mut part = t.staged.len();
        let mut next = || {
            part += 1;
            part - 1
        };
        let write = |part, sources, bytes| Job::Write {
            table: t.name.to_owned(),
            part,
            schema: t.schema.clone(),
            sources,
            bytes,
        };
        // Each of the output's files: the rows to leave out, and whether it must be rewritten
        // (it holds a changed key, or has another schema than the table's now).
        let mut drops = Vec::with_capacity(t.previous.len());
        let mut rewritten = Vec::with_capacity(t.previous.len());
        for f in t.previous {
            let located = t.changed.and_then(|c| c.get(&f.path));
            let drop = located.map(|l| l.positions.clone()).unwrap_or_default();
            // The schema as the search for changed keys read it from the footer; a file it did
            // not search (`_rejects`') has its footer read now.
            let differs = match located {
                Some(l) => *l.schema != *t.schema,
                None => output_file_schema(out, &f.path, t.name)? != *t.schema,
            };
            rewritten.push(!drop.is_empty() || differs);
            drops.push(drop);
        }
        // This run's rows join the last file while it is under the target size, when that file
        // is rewritten anyway or small (a sixteenth of the target): a table does not gain a file
        // per apply, and no large file is rewritten for new rows alone. Else staged files in the
        // table's schema stay as they are, and the others are laid out.
        let carrier = t.previous.len().checked_sub(1).filter(|&i| {
            let bytes = t.previous[i].bytes;
            t.append_to_last && bytes < target_file_bytes && (rewritten[i] || bytes < target_file_bytes / 16)
        });
        let mut fresh: Vec<(Source, Vec<u64>)> = Vec::new();
        let mut fresh_bytes = 0;
        for f in t.staged {
            let path = staged.join(&f.path);
            if f.rows == 0 {
                replaced.push(path);
            } else if carrier.is_none() && file_schema(&path, t.name)? == *t.schema {
                jobs.push(Job::Staged { report: f.clone() });
            } else {
                fresh_bytes += f.bytes;
                fresh.push((Source::Staged(path.clone()), Vec::new()));
                replaced.push(path);
            }
        }
        let carrier = carrier.filter(|_| !fresh.is_empty());
        for (i, (f, drop)) in t.previous.iter().zip(drops).enumerate() {
            let from = Source::Output(f.path.clone());
            if Some(i) == carrier {
                let mut sources = vec![(from, drop)];
                sources.append(&mut fresh);
                jobs.push(write(next(), sources, f.bytes + fresh_bytes));
            } else if rewritten[i] {
                jobs.push(write(next(), vec![(from, drop)], f.bytes));
            } else {
                let part = next();
                let report = FileReport { path: part_path(t.name, part), ..f.clone() };
                jobs.push(Job::Keep { table: t.name.to_owned(), part, from: f.path.clone(), report });
            }
        }
        if !fresh.is_empty() {
            jobs.push(write(next(), std::mem::take(&mut fresh), fresh_bytes));
        }
        all.push(jobs);
    }
    Ok((all, replaced))
}

/// Runs one job onto the output `out`; a file of an object store is downloaded into `scratch`
/// while it is read. `Ok(None)` for a file left with no row (none is written), `Ok(Err(reason))`
/// when its rows do not fit the table's schema.
pub fn run(
    job: &Job,
    sink: &dyn Sink,
    out: &Home,
    scratch: &Path,
) -> Result<Result<Option<FileReport>, String>, SinkError> {
    match job {
        Job::Staged { report } => Ok(Ok(Some(report.clone()))),
        Job::Keep { table, part, from, report } => {
            let to = part_path(table, *part);
            match out {
                Home::Dir(d) => {
                    sink.keep(&to, &d.join(from), true)?;
                }
                Home::Object { url, .. } => {
                    if !sink.keep_stored(&to, &Home::key(url, from))? {
                        return Ok(Err(format!("the output's file `{from}` cannot be kept by this output")));
                    }
                }
            }
            Ok(Ok(Some(report.clone())))
        }
        Job::Write { table, part, schema, sources, .. } => {
            let mut writer = sink.part(table, *part, schema.clone())?;
            for (source, drop) in sources {
                let copied = match source {
                    Source::Staged(path) => copy_rows(path, drop, schema, table, &mut writer),
                    Source::Output(rel) => {
                        let path = out.local_copy(rel, scratch)?;
                        let copied = copy_rows(&path, drop, schema, table, &mut writer);
                        out.done_with(&path);
                        copied
                    }
                };
                if let Err(reason) = copied? {
                    return Ok(Err(reason));
                }
            }
            let report = writer.close()?;
            if report.rows == 0 {
                if let Some(dir) = sink.staged() {
                    let path = dir.join(&report.path);
                    fs::remove_file(&path).map_err(SinkError::io("remove", &path))?;
                }
                return Ok(Ok(None));
            }
            Ok(Ok(Some(report)))
        }
    }
}

/// The rows of the file at `path`, less those at `drop`, laid out in `schema` into `writer`, one
/// row group for each of the file's.
fn copy_rows(
    path: &Path,
    drop: &[u64],
    schema: &SchemaRef,
    table: &str,
    writer: &mut super::PartWriter,
) -> Result<Result<(), String>, SinkError> {
    let err = |source| SinkError::Part { table: table.to_owned(), path: path.display().to_string(), source };
    let file = fs::File::open(path).map_err(SinkError::io("open", path))?;
    let meta = ArrowReaderMetadata::load(&file, Default::default()).map_err(err)?;
    let mut at = 0u64;
    let mut next_drop = drop.iter().copied().peekable();
    for rg in 0..meta.metadata().num_row_groups() {
        let file = file.try_clone().map_err(SinkError::io("open", path))?;
        let rows = meta.metadata().row_group(rg).num_rows().max(0) as u64;
        let end = at + rows;
        // The row group's rows less those dropped, as a row selection: the reader skips them
        // instead of decoding them for a filter to copy every other row out.
        let mut kept = Vec::new();
        let mut from = 0usize;
        while let Some(p) = next_drop.next_if(|&p| p < end) {
            let p = (p - at) as usize;
            if p > from {
                kept.push(from..p);
            }
            from = p + 1;
        }
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta.clone())
            .with_row_groups(vec![rg])
            .with_batch_size(BATCH_ROWS);
        if from > 0 {
            if (from as u64) < rows {
                kept.push(from..rows as usize);
            }
            builder =
                builder.with_row_selection(RowSelection::from_consecutive_ranges(kept.into_iter(), rows as usize));
        }
        for batch in builder.build().map_err(err)? {
            let batch = batch.map_err(|e| err(e.into()))?;
            match lay_out(&batch, schema) {
                Ok(laid) => writer.write(&laid)?,
                Err(reason) => return Ok(Err(reason)),
            }
        }
        at = end;
        writer.end_row_group()?;
    }
    Ok(Ok(()))
}

/// `batch` in the columns of `schema`: a column of its own type as it is, another type cast
/// strictly (a value the type cannot hold is an error, never a rounding), a missing column null.
/// A column `schema` lacks is an error: no value is left behind.
fn lay_out(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, String> {
    if batch.schema() == *schema {
        return Ok(batch.clone());
    }
    if let Some(f) = batch.schema().fields().iter().find(|f| schema.field_with_name(f.name()).is_err()) {
        return Err(format!("column `{}` is not in the table", f.name()));
    }
    let strict = CastOptions { safe: false, ..Default::default() };
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        cols.push(match batch.column_by_name(field.name()) {
            Some(c) if c.data_type() == field.data_type() => c.clone(),
            // Nulls fit any type; arrow casts a column of nulls into some types only (not into
            // a struct or a list of another shape).
            Some(c) if c.logical_null_count() == c.len() => new_null_array(field.data_type(), batch.num_rows()),
            Some(c) => cast_with_options(c, field.data_type(), &strict).map_err(|e| {
                format!("column `{}`: `{}` into `{}`: {e}", field.name(), c.data_type(), field.data_type())
            })?,
            None => new_null_array(field.data_type(), batch.num_rows()),
        });
    }
    RecordBatch::try_new(schema.clone(), cols).map_err(|e| e.to_string())
}

/// The Arrow schema the Parquet file `rel` of the output `out` was written with (only its footer
/// read, on an object store).
fn output_file_schema(out: &Home, rel: &str, table: &str) -> Result<datafusion::arrow::datatypes::Schema, SinkError> {
    match out {
        Home::Dir(d) => file_schema(&d.join(rel), table),
        Home::Object { url, .. } => out.stored_schema(&Home::key(url, rel), table),
    }
}

/// The Arrow schema the Parquet file at `path` was written with.
fn file_schema(path: &Path, table: &str) -> Result<datafusion::arrow::datatypes::Schema, SinkError> {
    let file = fs::File::open(path).map_err(SinkError::io("open", path))?;
    let meta = ArrowReaderMetadata::load(&file, Default::default()).map_err(|source| SinkError::Part {
        table: table.to_owned(),
        path: path.display().to_string(),
        source,
    })?;
    Ok(meta.schema().as_ref().clone())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, Decimal128Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(fields: Vec<Field>, cols: Vec<ArrayRef>) -> RecordBatch {
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    }

    /// Rows are laid out by column name: a column of the table's type as it is, an `int64` cast
    /// into its `decimal` exactly, a missing column null; a value that does not fit and a column
    /// the table lacks are reasons, never a rounding or a value left behind.
    #[test]
    fn rows_are_laid_out_in_the_tables_columns_exactly_or_not_at_all() {
        let table: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("pk", DataType::Utf8, true),
            Field::new("n", DataType::Decimal128(38, 2), true),
            Field::new("added", DataType::Boolean, true),
        ]));
        let rows = batch(
            vec![Field::new("n", DataType::Int64, true), Field::new("pk", DataType::Utf8, true)],
            vec![Arc::new(Int64Array::from(vec![Some(7), None])), Arc::new(StringArray::from(vec!["a", "b"]))],
        );
        let laid = lay_out(&rows, &table).unwrap();
        assert_eq!(laid.schema(), table);
        let n = laid.column(1).as_any().downcast_ref::<Decimal128Array>().unwrap();
        assert_eq!((n.value(0), n.is_null(1)), (700, true));
        assert_eq!(laid.column(2).null_count(), 2);
        assert_eq!(laid.column(0).as_any().downcast_ref::<StringArray>().unwrap().value(1), "b");

        // 37 integer digits do not fit `decimal(38, 2)`.
        let narrow: SchemaRef = Arc::new(Schema::new(vec![Field::new("n", DataType::Decimal128(38, 2), true)]));
        let big = batch(
            vec![Field::new("n", DataType::Decimal128(38, 0), true)],
            vec![Arc::new(Decimal128Array::from(vec![10i128.pow(36)]).with_precision_and_scale(38, 0).unwrap())],
        );
        assert!(lay_out(&big, &narrow).unwrap_err().contains("column `n`"));
        let extra =
            batch(vec![Field::new("other", DataType::Utf8, true)], vec![Arc::new(StringArray::from(vec!["x"]))]);
        assert_eq!(lay_out(&extra, &narrow).unwrap_err(), "column `other` is not in the table");
    }

    /// A column of nulls fits any column, whatever its own type: nulls of the table's type, where
    /// arrow's cast knows no way from the one type to the other (a struct, a list of structs).
    #[test]
    fn a_column_of_nulls_is_laid_out_into_nested_types() {
        use datafusion::arrow::array::{NullArray, StructArray};
        use datafusion::arrow::datatypes::Fields;
        let inner = Fields::from(vec![Field::new("cost", DataType::Decimal128(38, 2), true)]);
        let list = DataType::List(Arc::new(Field::new("item", DataType::Struct(inner.clone()), true)));
        let table: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("pk", DataType::Utf8, true),
            Field::new("shipping", DataType::Struct(inner.clone()), true),
            Field::new("lines", list.clone(), true),
        ]));
        let rows = batch(
            vec![
                Field::new("pk", DataType::Utf8, true),
                Field::new("shipping", DataType::Null, true),
                Field::new("lines", DataType::Utf8, true),
            ],
            vec![
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(NullArray::new(2)),
                Arc::new(StringArray::from(vec![None::<&str>, None])),
            ],
        );
        let laid = lay_out(&rows, &table).unwrap();
        assert_eq!(laid.schema(), table);
        assert_eq!((laid.column(1).logical_null_count(), laid.column(2).logical_null_count()), (2, 2));
        assert!(laid.column(1).as_any().downcast_ref::<StructArray>().is_some());
        // One value among the nulls is a value: cast strictly, and refused when it cannot be.
        let one = batch(
            vec![Field::new("lines", DataType::Utf8, true)],
            vec![Arc::new(StringArray::from(vec![Some("x"), None]))],
        );
        assert!(lay_out(&one, &table).unwrap_err().contains("column `lines`"));
    }

    fn report(path: &str, rows: u64, bytes: u64) -> FileReport {
        FileReport { path: path.to_owned(), rows, row_groups: 1, bytes }
    }

    /// Which files are kept, rewritten, or take the run's rows: a file without changed keys in the
    /// table's schema is kept; the run's rows join the last file when it is rewritten anyway or
    /// small, and never one over the target size.
    #[test]
    fn files_without_changed_keys_are_kept_and_new_rows_join_the_last_file_when_it_is_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let (out, staged) = (dir.path().join("out"), dir.path().join("staged"));
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("pk", DataType::Utf8, true)]));
        let write = |at: &Path, rel: &str| {
            let path = at.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
                fs::File::create(&path).unwrap(),
                schema.clone(),
                None,
            )
            .unwrap();
            w.write(&batch(vec![Field::new("pk", DataType::Utf8, true)], vec![Arc::new(StringArray::from(vec!["k"]))]))
                .unwrap();
            w.close().unwrap();
        };
        for rel in ["t/part-00000.parquet", "t/part-00001.parquet"] {
            write(&out, rel);
        }
        write(&staged, "t/part-00000.parquet");
        let previous = [report("t/part-00000.parquet", 1, 1000), report("t/part-00001.parquet", 1, 1000)];
        let new_rows = [report("t/part-00000.parquet", 1, 100)];
        let changed_in = |rel: &str| {
            HashMap::from([(
                rel.to_owned(),
                LocatedFile { positions: vec![0], deleted: Default::default(), schema: schema.clone() },
            )])
        };
        let kinds = |changed: Option<&HashMap<String, LocatedFile>>, target: u64| {
            let t = Table {
                name: "t",
                schema: schema.clone(),
                previous: &previous,
                changed,
                staged: &new_rows,
                append_to_last: true,
            };
            let (jobs, replaced) = plan(&[t], &Home::Dir(out.clone()), &staged, target).unwrap();
            let kinds: Vec<String> = jobs[0]
                .iter()
                .map(|j| match j {
                    Job::Keep { part, .. } => format!("keep {part}"),
                    Job::Write { part, sources, .. } => format!("write {part} from {}", sources.len()),
                    Job::Staged { report } => format!("staged {}", report.path),
                })
                .collect();
            (kinds, replaced.len())
        };
        // The last file holds a changed key: rewritten, with the run's rows.
        let last = changed_in("t/part-00001.parquet");
        assert_eq!(kinds(Some(&last), 1 << 20), (vec!["keep 1".to_owned(), "write 2 from 2".to_owned()], 1));
        // The first does: the last is large (over a sixteenth of the target) and stays; the run's
        // file stays as it is.
        let first = changed_in("t/part-00000.parquet");
        let expected = vec!["staged t/part-00000.parquet".to_owned(), "write 1 from 1".to_owned(), "keep 2".to_owned()];
        assert_eq!(kinds(Some(&first), 10_000), (expected, 0));
        // A small last file takes the run's rows.
        assert_eq!(kinds(None, 1 << 20), (vec!["keep 1".to_owned(), "write 2 from 2".to_owned()], 1));
        // Never one at the target size or over it.
        let expected =
            vec!["staged t/part-00000.parquet".to_owned(), "write 1 from 1".to_owned(), "write 2 from 1".to_owned()];
        assert_eq!(
            kinds(Some(&HashMap::from([first.into_iter().next().unwrap(), last.into_iter().next().unwrap()])), 1000),
            (expected, 0)
        );
        // Schemas the search for changed keys read from the footers are not read again: a file
        // recorded in the table's schema is kept (its footer gone, which reading would fail on),
        // one recorded in another is rewritten.
        let recorded = |schema: SchemaRef| {
            HashMap::from([
                (
                    "t/part-00000.parquet".to_owned(),
                    LocatedFile { positions: vec![], deleted: Default::default(), schema: schema.clone() },
                ),
                (
                    "t/part-00001.parquet".to_owned(),
                    LocatedFile { positions: vec![], deleted: Default::default(), schema },
                ),
            ])
        };
        let footers = [out.join("t/part-00000.parquet"), out.join("t/part-00001.parquet")];
        let saved: Vec<Vec<u8>> = footers.iter().map(|f| fs::read(f).unwrap()).collect();
        for f in &footers {
            fs::write(f, b"not parquet").unwrap();
        }
        let expected = vec!["staged t/part-00000.parquet".to_owned(), "keep 1".to_owned(), "keep 2".to_owned()];
        assert_eq!(kinds(Some(&recorded(schema.clone())), 1000), (expected, 0));
        let other: SchemaRef = Arc::new(Schema::new(vec![Field::new("pk", DataType::LargeUtf8, true)]));
        let expected =
            vec!["staged t/part-00000.parquet".to_owned(), "write 1 from 1".to_owned(), "write 2 from 1".to_owned()];
        assert_eq!(kinds(Some(&recorded(other)), 1000), (expected, 0));
        for (f, bytes) in footers.iter().zip(saved) {
            fs::write(f, bytes).unwrap();
        }
    }
}

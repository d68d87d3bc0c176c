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
//!   table's new schema: a column the table gained is null in the rows that were there before.
//!   The row groups of local files are the workers' tasks ([`Tasks`]): each is read and encoded
//!   by any worker and appended to its new file in order, so one large file does not leave the
//!   other workers idle;
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
    /// By file of `previous`, the rows that hold a changed key (in `_rejects`, the rejects the run
    /// supersedes).
    pub changed: Option<&'a HashMap<String, LocatedFile>>,
    /// This run's staged files of the table (paths from the staged output).
    pub staged: &'a [FileReport],
    /// New rows may join the rewrite of the last file (not `_rejects`, whose files stay unless
    /// they hold rejects the run supersedes).
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
            Ok(Ok(unless_empty(writer.close()?, sink)?))
        }
    }
}

/// What a job came to: its file (none when it was left without a row), or why its rows do not fit
/// the table's schema.
pub type Outcome = Result<Option<FileReport>, String>;

/// A job (table, then job of [`plan`]'s) and what it came to.
pub type Ended = ((usize, usize), Outcome);

/// The jobs of [`plan`] as tasks for several workers. A job that reads local files only is one
/// task per row group it reads, so the row groups of one large file are rewritten on every
/// worker and appended to the new file in their order (the same file as one worker makes); a
/// job that reads a file of an object store (downloaded whole while it runs), keeps or takes a
/// file, is one task.
pub struct Tasks<'a> {
    jobs: &'a [Vec<Job>],
    /// Each task: its job, and the row group it reads.
    tasks: Vec<((usize, usize), Option<usize>)>,
    /// By job, the row groups it reads, when they are its tasks.
    assemblies: HashMap<(usize, usize), Assembly>,
    /// How many row groups of a job may wait to be appended, encoded ahead of the next one.
    ahead: usize,
}

/// A job made of row group tasks, and the file they make.
struct Assembly {
    groups: Vec<Piece>,
    state: std::sync::Mutex<Assembling>,
    /// Signalled whenever the next row group to append changes.
    moved: std::sync::Condvar,
}

/// A row group a job reads: of its source `source`.
struct Piece {
    source: usize,
    path: PathBuf,
    meta: ArrowReaderMetadata,
    row_group: usize,
    first_row: u64,
}

#[derive(Default)]
struct Assembling {
    file: Option<super::parquet::PartAssembler>,
    /// The next row group to append.
    next: usize,
    /// Row groups encoded before the next one, by their index.
    parked: std::collections::BTreeMap<usize, Result<Vec<super::parquet::EncodedGroup>, String>>,
    /// The first reason a row group gave: the job's outcome.
    reason: Option<String>,
    /// A task of the job failed (an error, a panic): the others stop waiting.
    broken: bool,
}

impl<'a> Tasks<'a> {
    /// `jobs` as tasks, the jobs in `order`, for `workers` workers. The files each job reads
    /// locally have their footers read here.
    pub fn new(jobs: &'a [Vec<Job>], order: &[(usize, usize)], out: &Home, workers: usize) -> Result<Self, SinkError> {
        let mut tasks = Vec::new();
        let mut assemblies = HashMap::new();
        for &(t, j) in order {
            match pieces(&jobs[t][j], out)? {
                Some(groups) => {
                    tasks.extend((0..groups.len()).map(|g| ((t, j), Some(g))));
                    let state = std::sync::Mutex::new(Assembling::default());
                    assemblies.insert((t, j), Assembly { groups, state, moved: std::sync::Condvar::new() });
                }
                None => tasks.push(((t, j), None)),
            }
        }
        Ok(Tasks { jobs, tasks, assemblies, ahead: 2 * workers.max(1) })
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Runs task `k` (onto the output `out`, a file of an object store downloaded into
    /// `scratch`): its job and the job's outcome when the task ended the job.
    pub fn run(&self, k: usize, sink: &dyn Sink, out: &Home, scratch: &Path) -> Result<Option<Ended>, SinkError> {
        let ((t, j), group) = self.tasks[k];
        let job = &self.jobs[t][j];
        let Some(g) = group else {
            return Ok(Some(((t, j), run(job, sink, out, scratch)?)));
        };
        let Job::Write { table, part, schema, sources, .. } = job else {
            return Ok(None);
        };
        let assembly = &self.assemblies[&(t, j)];
        // Marks the job broken unless this task ends normally, so no task waits on it forever.
        let mut guard = Broken { assembly, armed: true };
        let encoder = {
            let mut state = assembly.lock();
            while g >= state.next + self.ahead && !state.broken {
                state = assembly.moved.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if state.broken {
                guard.armed = false;
                return Ok(None);
            }
            if state.file.is_none() {
                state.file = Some(sink.part(table, *part, schema.clone())?.into_assembler()?);
            }
            let skip = state.reason.is_some();
            state.file.as_ref().map(|f| f.encoder()).filter(|_| !skip)
        };
        let encoded = match encoder {
            // The job failed already: its rows are not needed.
            None => Ok(Vec::new()),
            Some(encoder) => {
                let piece = &assembly.groups[g];
                let file = fs::File::open(&piece.path).map_err(SinkError::io("open", &piece.path))?;
                let group = Group { meta: &piece.meta, row_group: piece.row_group, first_row: piece.first_row };
                let mut encoding = encoder.start();
                let drop = &sources[piece.source].1;
                match copy_group(&file, &piece.path, &group, drop, schema, table, &mut |b| encoding.write(b))? {
                    Ok(()) => Ok(encoding.finish()?),
                    Err(reason) => Err(reason),
                }
            }
        };
        let mut locked = assembly.lock();
        let state = &mut *locked;
        state.parked.insert(g, encoded);
        while let Some(groups) = state.parked.remove(&state.next) {
            match groups {
                Ok(groups) if state.reason.is_none() => {
                    if let Some(file) = state.file.as_mut() {
                        file.append(groups)?;
                    }
                }
                Ok(_) => {}
                Err(reason) => {
                    state.reason.get_or_insert(reason);
                }
            }
            state.next += 1;
        }
        assembly.moved.notify_all();
        guard.armed = false;
        if state.next < assembly.groups.len() {
            return Ok(None);
        }
        let file = state.file.take();
        if let Some(reason) = state.reason.take() {
            return Ok(Some(((t, j), Err(reason))));
        }
        let Some(file) = file else { return Ok(None) };
        Ok(Some(((t, j), Ok(unless_empty(file.close()?, sink)?))))
    }
}

/// A job's finished file, or none when it was left without a row (the staged file removed).
fn unless_empty(report: FileReport, sink: &dyn Sink) -> Result<Option<FileReport>, SinkError> {
    if report.rows > 0 {
        return Ok(Some(report));
    }
    if let Some(dir) = sink.staged() {
        let path = dir.join(&report.path);
        fs::remove_file(&path).map_err(SinkError::io("remove", &path))?;
    }
    Ok(None)
}

impl Assembly {
    fn lock(&self) -> std::sync::MutexGuard<'_, Assembling> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Marks its job's assembly broken when dropped armed: a task that returned an error or
/// panicked before its row groups were parked.
struct Broken<'a> {
    assembly: &'a Assembly,
    armed: bool,
}

impl Drop for Broken<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.assembly.lock().broken = true;
            self.assembly.moved.notify_all();
        }
    }
}

/// The row groups `job` reads, when it writes a file from local files only; `None` for any
/// other job (and one with no row group to read), which runs whole.
fn pieces(job: &Job, out: &Home) -> Result<Option<Vec<Piece>>, SinkError> {
    let Job::Write { table, sources, .. } = job else { return Ok(None) };
    let mut groups = Vec::new();
    for (i, (source, _)) in sources.iter().enumerate() {
        let path = match (source, out) {
            (Source::Staged(p), _) => p.clone(),
            (Source::Output(rel), Home::Dir(d)) => d.join(rel),
            (Source::Output(_), Home::Object { .. }) => return Ok(None),
        };
        let file = fs::File::open(&path).map_err(SinkError::io("open", &path))?;
        let meta = load(&file, &path, table)?;
        let mut first_row = 0;
        for row_group in 0..meta.metadata().num_row_groups() {
            let piece = Piece { source: i, path: path.clone(), meta: meta.clone(), row_group, first_row };
            first_row += Group { meta: &piece.meta, row_group, first_row }.rows();
            groups.push(piece);
        }
    }
    Ok((!groups.is_empty()).then_some(groups))
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
    let file = fs::File::open(path).map_err(SinkError::io("open", path))?;
    let meta = load(&file, path, table)?;
    let mut first_row = 0u64;
    for rg in 0..meta.metadata().num_row_groups() {
        let group = Group { meta: &meta, row_group: rg, first_row };
        if let Err(reason) = copy_group(&file, path, &group, drop, schema, table, &mut |b| writer.write(b))? {
            return Ok(Err(reason));
        }
        writer.end_row_group()?;
        first_row += group.rows();
    }
    Ok(Ok(()))
}

/// One row group of a file read back.
struct Group<'a> {
    meta: &'a ArrowReaderMetadata,
    row_group: usize,
    /// The file's rows before it.
    first_row: u64,
}

impl Group<'_> {
    fn rows(&self) -> u64 {
        self.meta.metadata().row_group(self.row_group).num_rows().max(0) as u64
    }
}

/// The footer of the Parquet file `file` (at `path`).
fn load(file: &fs::File, path: &Path, table: &str) -> Result<ArrowReaderMetadata, SinkError> {
    ArrowReaderMetadata::load(file, Default::default()).map_err(|source| SinkError::Part {
        table: table.to_owned(),
        path: path.display().to_string(),
        source,
    })
}

/// The rows of `group` of the file `file` (at `path`) less those at `drop` (positions in the
/// file, ascending), laid out in `schema`, handed to `write` batch by batch.
fn copy_group(
    file: &fs::File,
    path: &Path,
    group: &Group<'_>,
    drop: &[u64],
    schema: &SchemaRef,
    table: &str,
    write: &mut dyn FnMut(&RecordBatch) -> Result<(), SinkError>,
) -> Result<Result<(), String>, SinkError> {
    let err = |source| SinkError::Part { table: table.to_owned(), path: path.display().to_string(), source };
    let (at, rows) = (group.first_row, group.rows());
    let end = at + rows;
    let dropped = &drop[drop.partition_point(|&p| p < at)..drop.partition_point(|&p| p < end)];
    let file = file.try_clone().map_err(SinkError::io("open", path))?;
    let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, group.meta.clone())
        .with_row_groups(vec![group.row_group])
        .with_batch_size(BATCH_ROWS);
    if let Some(kept) = kept_rows(dropped, at, rows) {
        builder = builder.with_row_selection(kept);
    }
    for batch in builder.build().map_err(err)? {
        let batch = batch.map_err(|e| err(e.into()))?;
        match lay_out(&batch, schema) {
            Ok(laid) => write(&laid)?,
            Err(reason) => return Ok(Err(reason)),
        }
    }
    Ok(Ok(()))
}

/// The rows `at..at + rows` of a file less those at `dropped` (positions in the file, ascending,
/// each inside those rows), as a selection of those rows; `None` when none is dropped. A reader
/// given it skips the dropped rows instead of decoding them for a filter to copy every other row
/// out.
pub(super) fn kept_rows(dropped: &[u64], at: u64, rows: u64) -> Option<RowSelection> {
    let mut kept = Vec::new();
    let mut from = 0usize;
    for &p in dropped {
        let p = (p - at) as usize;
        if p > from {
            kept.push(from..p);
        }
        from = from.max(p + 1);
    }
    if from == 0 {
        return None;
    }
    if (from as u64) < rows {
        kept.push(from..rows as usize);
    }
    Some(RowSelection::from_consecutive_ranges(kept.into_iter(), rows as usize))
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
    Ok(load(&file, path, table)?.schema().as_ref().clone())
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

    /// The selection of a file's rows less some of them keeps the runs between those dropped,
    /// and skips the dropped ones, at the start, in the middle and at the end; none dropped is
    /// no selection.
    #[test]
    fn kept_rows_select_the_runs_between_the_rows_dropped() {
        use datafusion::parquet::arrow::arrow_reader::RowSelector;
        let sel = |s: Vec<RowSelector>| Some(RowSelection::from(s));
        assert_eq!(kept_rows(&[], 10, 8), None);
        assert_eq!(
            kept_rows(&[12, 13, 15], 10, 8),
            sel(vec![
                RowSelector::select(2),
                RowSelector::skip(2),
                RowSelector::select(1),
                RowSelector::skip(1),
                RowSelector::select(2)
            ])
        );
        assert_eq!(
            kept_rows(&[10, 17], 10, 8),
            sel(vec![RowSelector::skip(1), RowSelector::select(6), RowSelector::skip(1)])
        );
        assert_eq!(kept_rows(&[0, 1], 0, 2), sel(vec![RowSelector::skip(2)]));
    }

    /// A job rewritten as row group tasks, taken by several workers in any order the pool can
    /// give them, makes the same file, byte for byte, as the job run whole by one worker: rows
    /// dropped in any row group (all of one), a row group over the row limit cut where the
    /// writer cuts it, staged rows laid out into the table's schema and appended last. A row
    /// that does not fit is the job's reason either way.
    #[test]
    fn a_file_rewritten_row_group_by_row_group_on_several_workers_is_the_file_one_worker_makes() {
        use datafusion::arrow::array::Int64Array;
        use std::sync::atomic::{AtomicUsize, Ordering};

        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let table: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("pk", DataType::Utf8, true),
            Field::new("n", DataType::Decimal128(38, 0), true),
            Field::new("added", DataType::Boolean, true),
        ]));
        let rows = |from: i64, to: i64| {
            batch(
                vec![Field::new("pk", DataType::Utf8, true), Field::new("n", DataType::Int64, true)],
                vec![
                    Arc::new(StringArray::from_iter_values((from..to).map(|i| format!("K#{:04}", i % 300)))),
                    Arc::new(Int64Array::from_iter((from..to).map(|i| (i % 7 != 0).then_some(i * 1_000_003)))),
                ],
            )
        };
        // The output's file: row groups of 400, 250 (all dropped), 500 and 30 rows, in the
        // output's old schema (`n` an `int64`).
        let old = rows(0, 1).schema();
        let props = super::super::parquet::writer_properties(1 << 20);
        let mut w = super::super::PartWriter::create(&out, "t", 0, old.clone(), &props).unwrap();
        let mut at = 0;
        for n in [400, 250, 500, 30] {
            w.write(&rows(at, at + n)).unwrap();
            w.end_row_group().unwrap();
            at += n;
        }
        w.close().unwrap();
        let mut drop: Vec<u64> = (0..1180).filter(|i| i % 13 == 5 || i % 97 == 0).collect();
        drop.extend(400..650);
        drop.sort_unstable();
        drop.dedup();
        // This run's rows, staged in a schema of their own.
        let staged = dir.path().join("staged.parquet");
        let mut w =
            datafusion::parquet::arrow::ArrowWriter::try_new(fs::File::create(&staged).unwrap(), old, None).unwrap();
        w.write(&rows(5000, 5120)).unwrap();
        w.close().unwrap();

        // Rows over the limit of 256 rows are cut there.
        let sink = super::super::local::LocalSink::create(
            &dir.path().join("new"),
            false,
            super::super::parquet::writer_properties(256),
        )
        .unwrap();
        let job = |part: usize, schema: &SchemaRef| Job::Write {
            table: "t".into(),
            part,
            schema: schema.clone(),
            sources: vec![
                (Source::Output("t/part-00000.parquet".into()), drop.clone()),
                (Source::Staged(staged.clone()), Vec::new()),
            ],
            bytes: 1,
        };
        let home = Home::Dir(out.clone());
        let scratch = dir.path().join("scratch");
        let whole = run(&job(0, &table), &sink, &home, &scratch).unwrap().unwrap().unwrap();
        assert_eq!(whole.rows, 1180 - drop.len() as u64 + 120);

        // On three workers, and on one taking the tasks in an order within its reach.
        let jobs = [vec![job(1, &table)], vec![job(2, &table)]];
        let tasks = Tasks::new(&jobs[..1], &[(0, 0)], &home, 3).unwrap();
        assert_eq!(tasks.len(), 5);
        let next = AtomicUsize::new(0);
        let ended: Vec<_> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..3)
                .map(|_| {
                    s.spawn(|| {
                        let mut ended = Vec::new();
                        loop {
                            let k = next.fetch_add(1, Ordering::Relaxed);
                            if k >= tasks.len() {
                                return ended;
                            }
                            ended.extend(tasks.run(k, &sink, &home, &scratch).unwrap());
                        }
                    })
                })
                .collect();
            workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
        });
        assert_eq!(ended.len(), 1);
        let pieces = ended[0].1.clone().unwrap().unwrap();
        let one = Tasks::new(&jobs[1..], &[(0, 0)], &home, 1).unwrap();
        let mut last = None;
        for k in [1, 0, 3, 2, 4] {
            last = one.run(k, &sink, &home, &scratch).unwrap().or(last);
        }
        let reordered = last.unwrap().1.unwrap().unwrap();
        let staging = sink.staged().unwrap().to_path_buf();
        let bytes = |r: &FileReport| fs::read(staging.join(&r.path)).unwrap();
        assert_eq!((pieces.rows, pieces.row_groups), (whole.rows, whole.row_groups));
        assert_eq!((reordered.rows, reordered.row_groups), (whole.rows, whole.row_groups));
        assert!(whole.row_groups > 4, "the limit cut a row group: {}", whole.row_groups);
        assert!(bytes(&pieces) == bytes(&whole), "row group tasks made another file");
        assert!(bytes(&reordered) == bytes(&whole), "row group tasks taken out of order made another file");

        // A table whose `n` cannot hold the rows: the same reason, from the row group that has it.
        let narrow: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("pk", DataType::Utf8, true),
            Field::new("n", DataType::Decimal128(5, 0), true),
        ]));
        let whole = run(&job(3, &narrow), &sink, &home, &scratch).unwrap().unwrap_err();
        let jobs = vec![vec![job(4, &narrow)]];
        let tasks = Tasks::new(&jobs, &[(0, 0)], &home, 2).unwrap();
        let ended: Vec<_> = (0..tasks.len()).filter_map(|k| tasks.run(k, &sink, &home, &scratch).unwrap()).collect();
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].1.clone().unwrap_err(), whole);

        // A task that fails (its file gone) is the error, and tasks of its job that would wait
        // for it do not: they end without an outcome.
        let jobs = vec![vec![job(5, &table)]];
        let tasks = Tasks::new(&jobs, &[(0, 0)], &home, 1).unwrap();
        let moved = dir.path().join("moved.parquet");
        fs::rename(out.join("t/part-00000.parquet"), &moved).unwrap();
        assert!(matches!(tasks.run(0, &sink, &home, &scratch), Err(SinkError::Io { .. })));
        assert!(tasks.run(3, &sink, &home, &scratch).unwrap().is_none());
        fs::rename(&moved, out.join("t/part-00000.parquet")).unwrap();
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

//! The copy-on-write MERGE of one Delta table (`--format delta`, incremental exports applied
//! onto a Delta output): the rows of the keys the new exports changed are replaced in ONE commit
//! that removes only the data files holding such a key (rewritten without them) and adds one
//! file of the changed keys' current rows, with the run's `txn`.
//!
//! The current rows come from the run's replay (the complete new table, staged as Parquet parts);
//! the changed keys are converted into the table's column types by etl's own [`BatchBuilder`],
//! so they match the rows exactly as etl wrote them. The table keeps its columns: a column the
//! replay no longer has stays (null in the new rows), a new one is added to the schema, an
//! `int64` column of the replay, or a `decimal` of a smaller scale, is cast exactly into the
//! table's `decimal` (a value that does not fit is a reason to replace the table). Anything else (a
//! wider or other type, a key attribute without a column) is not merged: [`prepare`] returns
//! [`Prepared::Replace`] with the reason, and the caller replaces the table in one commit.
//!
//! A table that takes deletion vectors ([`dv`], `--deletion-vectors`) is merged without
//! rewriting a file: the rows of changed keys found in each file (by position, less those its
//! vector already deletes) are marked in a new vector, and the file is removed and added back
//! with it in the same commit as the file of the changed keys' rows.
//! This module never replaces a table, never deletes a file, and never writes outside the table.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::ProjectionMask;
use datafusion::parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection};
use datafusion::parquet::file::properties::WriterProperties;
use deltalake::DeltaTable;
use deltalake::kernel::transaction::CommitBuilder;
use deltalake::kernel::{Action, Add, MetadataExt as _, Remove, StructType};
use deltalake::protocol::DeltaOperation;
use roaring::RoaringTreemap;

use super::{DeltaError, Home, add_action, delta_schema, dv, sync};
use crate::normalize::BatchBuilder;
use crate::schema::TableSchema;
use crate::sink::SinkError;
use crate::sink::manifest::{self, DeltaMerge, FileReport};

/// What [`commit`] committed (or, with nothing to change, the table's current `version`).
pub struct Merged {
    pub version: u64,
    pub report: DeltaMerge,
    pub files: Vec<FileReport>,
}

/// What [`prepare`] made of one table's merge.
pub enum Prepared {
    /// Its files are written and its actions listed: [`commit`] commits them.
    Ready(Box<Ready>),
    /// The table cannot be merged in place; replace it whole, for this reason.
    Replace(String),
}

/// A merge ready to commit: the table as it was read, and what its commit changes.
pub struct Ready {
    table_handle: DeltaTable,
    /// The table's schema with the added columns, when there are any.
    new_delta: Option<StructType>,
    /// The key columns the merge found the changed keys by.
    key_names: Vec<String>,
    actions: Vec<Action>,
    report: DeltaMerge,
    files: Vec<FileReport>,
}

/// What a merge of one table works with.
pub struct MergeInput<'a> {
    pub table: &'a str,
    /// Where the table is.
    pub home: &'a Home,
    /// A local folder for files on their way to or from an object store.
    pub scratch: &'a Path,
    pub table_handle: DeltaTable,
    /// The staged parts of the replay's complete new table.
    pub parts: Vec<PathBuf>,
    /// The schema the replay wrote the parts with.
    pub new_schema: SchemaRef,
    /// The table's contract from the replay (`None` for `_rejects`).
    pub contract: Option<&'a TableSchema>,
    pub key_attributes: &'a [String],
    /// The changed keys, DynamoDB JSON objects of the key attributes.
    pub keys: &'a [String],
    pub props: &'a WriterProperties,
    /// Names this run's files.
    pub tag: &'a str,
    /// The run asks for deletion vectors (`--deletion-vectors`): a table without them gets them
    /// (one commit setting `delta.enableDeletionVectors`) before it is merged.
    pub deletion_vectors: bool,
    /// Where the run's check found the changed keys ([`Search`]), used when it read the version
    /// this merge reads.
    pub located: Option<&'a Located>,
    /// Every row of `parts` is a changed key's (an apply in place stages nothing else).
    pub upserts_only: bool,
}

/// Where the changed keys are in the data files of one version of a table, as a [`Search`] found
/// them.
#[derive(Debug, Clone, Default)]
pub struct Located {
    pub version: u64,
    /// By data file (its path in the log).
    pub files: HashMap<String, LocatedFile>,
}

/// One data file as a [`Search`] found it.
#[derive(Debug, Clone)]
pub struct LocatedFile {
    /// The positions of its rows that hold a changed key, including those its vector deletes.
    pub positions: Vec<u64>,
    /// The rows its deletion vector deletes.
    pub deleted: RoaringTreemap,
    /// The Arrow schema it was written with, from the footer read to find the keys (so that a
    /// rewrite of the output need not read it again).
    pub schema: SchemaRef,
}

/// Rows per batch read back from a data file.
pub(super) const BATCH_ROWS: usize = 64 * 1024;

pub(super) fn delta_err(table: &str, path: &str) -> impl Fn(deltalake::DeltaTableError) -> SinkError + use<> {
    let (table, path) = (table.to_owned(), path.to_owned());
    move |source| {
        SinkError::from(DeltaError::Commit { table: table.clone(), path: path.clone(), source: Box::new(source) })
    }
}

pub(super) fn part_err(table: &str, path: &Path) -> impl Fn(datafusion::parquet::errors::ParquetError) -> SinkError {
    let (table, path) = (table.to_owned(), path.display().to_string());
    move |source| SinkError::Part { table: table.clone(), path: path.clone(), source }
}

pub(super) fn arrow_err(table: &str, path: &Path) -> impl Fn(datafusion::arrow::error::ArrowError) -> SinkError {
    let f = part_err(table, path);
    move |e| f(e.into())
}

/// How each column of the table is filled from the replay's rows.
enum Fill {
    /// The replay's column of that name, cast to `DataType` when it is given.
    Column(String, Option<DataType>),
    Null,
}

/// The schema of the file of upserted rows, how to fill it, the columns added, and the new
/// Delta schema when columns were added; `Err(reason)` when the table cannot be merged.
struct Plan {
    schema: SchemaRef,
    fills: Vec<Fill>,
    added: Vec<String>,
    new_delta: Option<StructType>,
}

/// Whether every value of Arrow type `from` goes exactly into `to` by a strict cast: the
/// same type, an `int64` into a `decimal` with room for 19 integer digits, a `decimal` into one
/// of a scale at least its own, nulls into anything, and the same inside lists, maps and structs
/// (the same fields in the same order): [`crate::schema::diff::extend`]'s rules, on the Arrow
/// types a table's files hold.
fn casts_exactly(from: &DataType, to: &DataType) -> bool {
    match (from, to) {
        _ if from == to => true,
        (DataType::Null, _) => true,
        (DataType::Int64, DataType::Decimal128(p, s)) => i16::from(*p) - i16::from(*s) >= 19,
        (DataType::Decimal128(_, s), DataType::Decimal128(_, t)) => t >= s,
        (DataType::List(x), DataType::List(y)) => casts_exactly(x.data_type(), y.data_type()),
        (DataType::Struct(x), DataType::Struct(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|(f, g)| f.name() == g.name() && casts_exactly(f.data_type(), g.data_type()))
        }
        (DataType::Map(x, _), DataType::Map(y, _)) => casts_exactly(x.data_type(), y.data_type()),
        _ => false,
    }
}

fn plan_schema(table: &str, current_delta: &StructType, current_arrow: &Schema, new: &Schema) -> Result<Plan, String> {
    let new_delta = delta_schema(table, new).map_err(|e| e.to_string())?;
    let mut fields = Vec::new();
    let mut fills = Vec::new();
    for cur in current_delta.fields() {
        let name = cur.name();
        let cur_arrow = current_arrow.field_with_name(name).map_err(|e| e.to_string())?;
        match (new_delta.field(name), new.field_with_name(name).ok()) {
            (Some(n), Some(na)) => {
                if n.nullable && !cur.nullable {
                    return Err(format!("column `{name}` may now be null, the table's may not"));
                }
                let only_nulls = na.metadata().get(crate::schema::META_DYNAMODB_TYPE).is_some_and(|t| t == "NULL");
                if n.data_type() == cur.data_type() {
                    fields.push(na.clone());
                    fills.push(Fill::Column(name.to_owned(), None));
                } else if only_nulls {
                    // A column of nulls (etl's `null` type): nulls of the table's type.
                    fields.push(cur_arrow.clone().with_nullable(true));
                    fills.push(Fill::Null);
                } else if casts_exactly(na.data_type(), cur_arrow.data_type()) {
                    // Cast value by value, strictly: a value the table's type cannot hold
                    // stops the merge ([`conform`]).
                    fields.push(na.clone().with_data_type(cur_arrow.data_type().clone()));
                    fills.push(Fill::Column(name.to_owned(), Some(cur_arrow.data_type().clone())));
                } else {
                    return Err(format!(
                        "column `{name}` is `{}` in the table and `{}` in this run",
                        cur_arrow.data_type(),
                        na.data_type()
                    ));
                }
            }
            _ if !cur.nullable => {
                return Err(format!("column `{name}` is gone from this run and the table's may not be null"));
            }
            _ => {
                fields.push(cur_arrow.clone().with_nullable(true));
                fills.push(Fill::Null);
            }
        }
    }
    let mut added = Vec::new();
    let mut delta_fields: Vec<_> = current_delta.fields().cloned().collect();
    for (n, na) in new_delta.fields().zip(new.fields()) {
        if current_delta.field(n.name()).is_none() {
            added.push(n.name().to_owned());
            fields.push(na.as_ref().clone().with_nullable(true));
            fills.push(Fill::Column(n.name().to_owned(), None));
            let mut f = n.clone();
            f.nullable = true;
            delta_fields.push(f);
        }
    }
    let new_delta =
        if added.is_empty() { None } else { Some(StructType::try_new(delta_fields).map_err(|e| e.to_string())?) };
    // The run's schema-level metadata (the entity) too, as every other file of the table has it.
    let schema = Arc::new(Schema::new_with_metadata(fields, new.metadata().clone()));
    Ok(Plan { schema, fills, added, new_delta })
}

/// The changed keys as rows of the key columns in the replay's types (`keys` in key-attribute
/// order); keys that no row of this table can hold (a value its key column cannot take) are left
/// out. `Err(reason)` when a key attribute has no column of its own in the table.
fn key_rows<'k>(contract: &TableSchema, key_attributes: &[String], keys: Keys<'k>) -> Result<KeySet<'k>, String> {
    let mut columns = Vec::with_capacity(key_attributes.len());
    for a in key_attributes {
        let mut found = contract.columns.iter().filter(|c| &c.source == a && contract.extra.as_ref() != Some(&c.name));
        match (found.next(), found.next()) {
            (Some(c), None) => columns.push(crate::schema::Column { nullable: true, ..c.clone() }),
            _ => return Err(format!("key attribute `{a}` has no column of its own")),
        }
    }
    let names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let only_keys = TableSchema { table: contract.table.clone(), entity: None, columns, extra: None };
    let schema = BatchBuilder::new(&only_keys).schema();
    let types: Vec<DataType> = schema.fields().iter().map(|f| f.data_type().clone()).collect();
    let converter =
        RowConverter::new(types.iter().map(|t| SortField::new(t.clone())).collect()).map_err(|e| e.to_string())?;
    let set = match keys {
        Keys::Decoded(k) => k.shared(&only_keys),
        Keys::Json(_) => SharedKeyRows::default(),
    };
    Ok(KeySet { names, types, converter, only_keys, keys, set })
}

/// The changed keys an apply looks for in every table, decoded once: `(index in the keys given,
/// the key's attributes)`, a key that is not a DynamoDB JSON object left out.
pub struct ChangedKeys<'k> {
    items: Vec<(u32, crate::decode::Item<'k>)>,
    /// The keys' rows, made once for all the tables whose key columns read the same attributes
    /// in the same types: the tables of an unmapped output all have `PK` and `SK` as strings,
    /// and each made its own copy of every changed key's row before.
    sets: std::sync::Mutex<Vec<(KeySignature, SharedKeyRows)>>,
}

/// What a table's [`KeyRows`] depend on: each key column's attribute and type, in order.
type KeySignature = Vec<(String, crate::schema::ColumnType)>;

/// A table's [`KeyRows`], made when first looked up, shared by the tables of one signature.
type SharedKeyRows = Arc<std::sync::OnceLock<Result<KeyRows, String>>>;

impl<'k> ChangedKeys<'k> {
    /// `keys`: DynamoDB JSON objects of the key attributes.
    pub fn decode(keys: &'k [String]) -> ChangedKeys<'k> {
        let items = keys
            .iter()
            .enumerate()
            .filter_map(|(i, k)| crate::decode::json::decode_item_object(k).ok().map(|item| (i as u32, item)))
            .collect();
        ChangedKeys { items, sets: std::sync::Mutex::new(Vec::new()) }
    }

    /// [`ChangedKeys::decode`] on `threads` workers, a run of keys each: a large incremental
    /// export's million changed keys took seconds of one core to decode.
    pub fn decode_on(keys: &'k [String], threads: usize) -> Result<ChangedKeys<'k>, SinkError> {
        const RUN: usize = 1 << 14;
        type Decoded<'k> = Vec<(u32, crate::decode::Item<'k>)>;
        let parts = crate::pipeline::pool::run(
            threads,
            keys.len().div_ceil(RUN),
            |_| Ok(Vec::new()),
            |out: &mut Vec<(usize, Decoded<'k>)>, r, _| {
                let start = r * RUN;
                let run = &keys[start..(start + RUN).min(keys.len())];
                let items = run.iter().enumerate().filter_map(|(i, k)| {
                    crate::decode::json::decode_item_object(k).ok().map(|item| ((start + i) as u32, item))
                });
                out.push((r, items.collect()));
                Ok::<(), SinkError>(())
            },
        )?;
        let mut parts: Vec<(usize, Decoded<'k>)> = parts.into_iter().flatten().collect();
        parts.sort_unstable_by_key(|(r, _)| *r);
        let items = parts.into_iter().flat_map(|(_, items)| items).collect();
        Ok(ChangedKeys { items, sets: std::sync::Mutex::new(Vec::new()) })
    }

    /// The rows of the tables whose key columns are `only_keys`'s (their names aside).
    fn shared(&self, only_keys: &TableSchema) -> SharedKeyRows {
        let signature: KeySignature = only_keys.columns.iter().map(|c| (c.source.clone(), c.ty.clone())).collect();
        // A worker that panicked while holding the lock left the list whole: it only pushes.
        let mut sets = self.sets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, set)) = sets.iter().find(|(s, _)| *s == signature) {
            return set.clone();
        }
        let set = SharedKeyRows::default();
        sets.push((signature, set.clone()));
        set
    }
}

/// The changed keys a [`KeySet`] is made of: decoded once for every table ([`Search`]), or by
/// the set itself when it needs them ([`prepare`]).
#[derive(Clone, Copy)]
enum Keys<'k> {
    Json(&'k [String]),
    Decoded(&'k ChangedKeys<'k>),
}

/// The hashes [`KeyRows::by_hash`] holds: DataFusion's vectorized row hashing, as its hash joins
/// use, with a fixed seed (the keys' and the files' columns are hashed by the same state).
fn hash_state() -> datafusion::common::hash_utils::RandomState {
    datafusion::common::hash_utils::RandomState::with_seed(0)
}

/// The rows of the key columns of `only_keys` that `keys` make, each with its index in `keys`
/// (keys that no row of the table can hold, a value its key column cannot take, are left out).
fn key_set(only_keys: &TableSchema, keys: Keys<'_>, converter: &RowConverter) -> Result<KeyRows, String> {
    let decoded;
    let keys = match keys {
        Keys::Decoded(k) => k,
        Keys::Json(json) => {
            decoded = ChangedKeys::decode(json);
            &decoded
        }
    };
    // A row the table cannot hold fails part-way and leaves its builder unusable. Until one
    // fails, each key goes straight into `builder`; after the first failure the builder is made
    // anew from the keys it took, and each further key is tried in `probe` first (made anew after
    // a failure), so that only a key it took goes into `builder`, where it cannot fail.
    let mut builder = BatchBuilder::new(only_keys);
    let mut probe: Option<BatchBuilder> = None;
    let mut taken: Vec<usize> = Vec::with_capacity(keys.items.len());
    for (at, (_, item)) in keys.items.iter().enumerate() {
        match &mut probe {
            None => {
                if builder.append(item).is_ok() {
                    taken.push(at);
                    continue;
                }
                builder = BatchBuilder::new(only_keys);
                for &t in &taken {
                    builder.append(&keys.items[t].1).map_err(|e| e.to_string())?;
                }
                probe = Some(BatchBuilder::new(only_keys));
            }
            Some(p) => {
                if p.append(item).is_ok() {
                    builder.append(item).map_err(|e| e.to_string())?;
                    taken.push(at);
                } else {
                    *p = BatchBuilder::new(only_keys);
                }
            }
        }
    }
    let batch = builder.finish().map_err(|e| e.to_string())?;
    let rows = converter.convert_columns(batch.columns()).map_err(|e| e.to_string())?;
    let mut hashes = vec![0u64; batch.num_rows()];
    datafusion::common::hash_utils::create_hashes(batch.columns(), &hash_state(), &mut hashes)
        .map_err(|e| e.to_string())?;
    // Chained by hash, the last row first: of two keys with the same row, the later is found.
    let mut by_hash: HashMap<u64, u32, foldhash::fast::RandomState> = HashMap::default();
    by_hash.reserve(hashes.len());
    let mut next = vec![NO_ROW; hashes.len()];
    for (at, &h) in hashes.iter().enumerate() {
        if let Some(first) = by_hash.insert(h, at as u32) {
            next[at] = first;
        }
    }
    Ok(KeyRows { rows, indexes: taken.iter().map(|&t| keys.items[t].0).collect(), by_hash, next })
}

/// The end of a chain of rows in [`KeyRows::next`].
const NO_ROW: u32 = u32::MAX;

/// Each changed key's row of key columns, with its index in the keys given, and the hash of
/// each. Every row of a table is looked up here: its hash first, computed column by column for
/// a whole batch, so that only the few rows whose hash is a changed key's are converted and
/// compared. The rows are one buffer, not an allocation each: a million changed keys took
/// seconds of one core to box and to free.
struct KeyRows {
    rows: datafusion::arrow::row::Rows,
    /// Per row, the index of its key in the keys given.
    indexes: Vec<u32>,
    /// By hash, the last row with it; foldhash (already built for DataFusion).
    by_hash: HashMap<u64, u32, foldhash::fast::RandomState>,
    /// Per row, the row before it with the same hash, or [`NO_ROW`].
    next: Vec<u32>,
}

impl KeyRows {
    /// The index of the key whose row is `row`, whose hash is `hash`.
    fn find(&self, hash: u64, row: &[u8]) -> Option<u32> {
        let mut at = *self.by_hash.get(&hash)?;
        loop {
            if self.rows.row(at as usize).as_ref() == row {
                return Some(self.indexes[at as usize]);
            }
            at = self.next[at as usize];
            if at == NO_ROW {
                return None;
            }
        }
    }
}

/// The changed keys of one table, as rows of its key columns. The rows are made when first
/// looked up: a merge that knows where the keys are ([`Located`]) and whose new rows are all
/// upserts never decodes them.
struct KeySet<'k> {
    names: Vec<String>,
    types: Vec<DataType>,
    converter: RowConverter,
    only_keys: TableSchema,
    keys: Keys<'k>,
    set: SharedKeyRows,
}

impl KeySet<'_> {
    fn set(&self) -> Result<&KeyRows, String> {
        self.set.get_or_init(|| key_set(&self.only_keys, self.keys, &self.converter)).as_ref().map_err(Clone::clone)
    }

    /// Which rows of `batch` hold a changed key; `None` when the batch lacks a key column.
    fn matches(&self, batch: &RecordBatch) -> Result<Option<BooleanArray>, String> {
        Ok(self.indexes(batch)?.map(|found| {
            let mut m = vec![false; batch.num_rows()];
            for (row, _) in found {
                m[row as usize] = true;
            }
            BooleanArray::from(m)
        }))
    }

    /// The rows of `batch` that hold a changed key, ascending, each with the index of the key
    /// it holds; `None` when the batch lacks a key column.
    fn indexes(&self, batch: &RecordBatch) -> Result<Option<Vec<(u32, u32)>>, String> {
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.names.len());
        for (name, ty) in self.names.iter().zip(&self.types) {
            let Some(c) = batch.column_by_name(name) else { return Ok(None) };
            let c = if c.data_type() == ty {
                c.clone()
            } else {
                cast_with_options(c, ty, &CastOptions::default()).map_err(|e| e.to_string())?
            };
            cols.push(c);
        }
        let set = self.set()?;
        let mut hashes = vec![0u64; batch.num_rows()];
        datafusion::common::hash_utils::create_hashes(&cols, &hash_state(), &mut hashes).map_err(|e| e.to_string())?;
        let candidates: Vec<u32> =
            (0..hashes.len() as u32).filter(|&i| set.by_hash.contains_key(&hashes[i as usize])).collect();
        if candidates.is_empty() {
            return Ok(Some(Vec::new()));
        }
        // Equal hashes are not equal keys: the candidates' rows are compared whole.
        let at = datafusion::arrow::array::UInt32Array::from(candidates);
        let taken = cols
            .iter()
            .map(|c| datafusion::arrow::compute::take(c, &at, None))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let rows = self.converter.convert_columns(&taken).map_err(|e| e.to_string())?;
        Ok(Some(
            at.values()
                .iter()
                .zip(rows.iter())
                .filter_map(|(&i, r)| set.find(hashes[i as usize], r.as_ref()).map(|k| (i, k)))
                .collect(),
        ))
    }
}

fn not(mask: &BooleanArray) -> BooleanArray {
    mask.iter().map(|b| Some(!b.unwrap_or(false))).collect()
}

/// The rows of `batch` laid out as `plan` says.
fn conform(batch: &RecordBatch, plan: &Plan) -> Result<RecordBatch, datafusion::arrow::error::ArrowError> {
    let strict = CastOptions { safe: false, ..Default::default() };
    let mut cols = Vec::with_capacity(plan.fills.len());
    for (fill, field) in plan.fills.iter().zip(plan.schema.fields()) {
        let col = match fill {
            Fill::Column(name, cast) => match (batch.column_by_name(name), cast) {
                (Some(c), Some(t)) => cast_with_options(c, t, &strict)?,
                (Some(c), None) => c.clone(),
                (None, _) => new_null_array(field.data_type(), batch.num_rows()),
            },
            Fill::Null => new_null_array(field.data_type(), batch.num_rows()),
        };
        cols.push(col);
    }
    RecordBatch::try_new(plan.schema.clone(), cols)
}

/// A data file written into the table's folder.
pub(super) struct NewFile {
    name: String,
    path: PathBuf,
    writer: ArrowWriter<fs::File>,
    rows: u64,
}

impl NewFile {
    pub(super) fn create(
        dir: &Path,
        name: String,
        schema: SchemaRef,
        props: &WriterProperties,
        table: &str,
    ) -> Result<NewFile, SinkError> {
        let path = dir.join(&name);
        let file = fs::File::create(&path).map_err(SinkError::io("create", &path))?;
        let writer = ArrowWriter::try_new(file, schema, Some(props.clone())).map_err(part_err(table, &path))?;
        Ok(NewFile { name, path, writer, rows: 0 })
    }

    pub(super) fn write(&mut self, batch: &RecordBatch, table: &str) -> Result<(), SinkError> {
        if batch.num_rows() > 0 {
            crate::sink::parquet::write_sliced(&mut self.writer, batch).map_err(part_err(table, &self.path))?;
            self.rows += batch.num_rows() as u64;
        }
        Ok(())
    }

    /// Closes the file; `None` (and the file removed) when it holds no row.
    pub(super) fn finish(self, table: &str) -> Result<Option<(Action, FileReport)>, SinkError> {
        let NewFile { name, path, writer, rows } = self;
        let meta = writer.close().map_err(part_err(table, &path))?;
        if rows == 0 {
            fs::remove_file(&path).map_err(SinkError::io("remove", &path))?;
            return Ok(None);
        }
        sync(&path)?;
        let add = add_action(name.clone(), &path, rows)?;
        let bytes = add.size as u64;
        let report = FileReport { path: format!("{table}/{name}"), rows, row_groups: meta.num_row_groups(), bytes };
        Ok(Some((Action::Add(add), report)))
    }

    /// Drops the file unfinished.
    pub(super) fn abandon(self) {
        let NewFile { path, writer, .. } = self;
        drop(writer);
        let _ = fs::remove_file(&path);
    }

    /// [`NewFile::finish`], then the file put into the table at `home` ([`Home::place`]).
    pub(super) fn finish_into(self, home: &Home, table: &str) -> Result<Option<(Action, FileReport)>, SinkError> {
        let (name, path) = (self.name.clone(), self.path.clone());
        let done = self.finish(table)?;
        if done.is_some() {
            home.place(&path, &name)?;
        }
        Ok(done)
    }
}

/// A data file of the version a merge reads: its path and size are the `add`'s, its deletion
/// vector the `remove`'s.
pub(super) struct Live {
    /// The action that removes it (with its deletion vector, if it has one).
    pub(super) remove: Remove,
    /// Its `add` action without a deletion vector.
    pub(super) add: Add,
}

/// The version `table` is at, and its data files there.
pub(super) fn live_files(table: &DeltaTable) -> Result<(u64, Vec<Live>), deltalake::DeltaTableError> {
    let snapshot = table.snapshot()?;
    let files = snapshot
        .log_data()
        .iter()
        .map(|f| Live {
            remove: f.remove_action(true),
            add: Add {
                path: f.path().into_owned(),
                partition_values: f.partition_values_map(),
                size: f.size(),
                modification_time: f.modification_time(),
                data_change: true,
                stats: f.stats(),
                ..Default::default()
            },
        })
        .collect();
    Ok((snapshot.version(), files))
}

/// The file of the changed keys' current rows (not yet finished), picked out of the replay's
/// complete table (`parts`) and laid out as `plan` says; `Ok(Err(reason))` when the table
/// cannot be merged. Each part's rows of changed keys are found by its key columns alone, then
/// only those rows are read whole (a row selection: the other rows are skipped, not decoded);
/// with `all` (parts holding nothing else), every row is read.
#[allow(clippy::too_many_arguments, reason = "each is one part of the file's making")]
fn upserted_rows(
    parts: &[PathBuf],
    keyset: &KeySet<'_>,
    plan: &Plan,
    dir: &Path,
    props: &WriterProperties,
    table: &str,
    tag: &str,
    all: bool,
) -> Result<Result<NewFile, String>, SinkError> {
    let mut upserts = NewFile::create(dir, format!("part-u00000-{tag}.parquet"), plan.schema.clone(), props, table)?;
    for part in parts {
        // Every row of the part is a changed key's, or only the rows its key columns say.
        let selection = if all {
            None
        } else {
            let count = match changed_rows(part, table, keyset)? {
                Ok(Some(count)) => count,
                Ok(None) => return Ok(Err("a part of this run lacks a key column".into())),
                Err(reason) => return Ok(Err(reason)),
            };
            if count.positions.is_empty() {
                continue;
            }
            let rows = count.positions.iter().map(|&p| p as usize..p as usize + 1);
            Some(RowSelection::from_consecutive_ranges(rows, count.rows as usize))
        };
        let file = fs::File::open(part).map_err(SinkError::io("open", part))?;
        let mut reader = ParquetRecordBatchReaderBuilder::try_new(file).map_err(part_err(table, part))?;
        if let Some(selection) = selection {
            reader = reader.with_row_selection(selection);
        }
        for batch in reader.with_batch_size(BATCH_ROWS).build().map_err(part_err(table, part))? {
            let picked = batch.map_err(arrow_err(table, part))?;
            match conform(&picked, plan) {
                Ok(laid) => upserts.write(&laid, table)?,
                Err(e) => return Ok(Err(not_fitting(e, upserts))),
            }
        }
    }
    Ok(Ok(upserts))
}

/// One table's search for the changed keys, file by file: made by [`Search::delta`] (a Delta
/// table's live files) or [`Search::files`] (a table of plain Parquet files); each file is read by
/// [`Search::read`] on any thread, in any order, so the files of one large table are read on every
/// worker; [`Search::finish`] puts the files' findings together.
pub struct Search<'k> {
    table: String,
    home: Home,
    keyset: KeySet<'k>,
    version: u64,
    /// Each file: its path from `home`, its deletion vector, its size in bytes.
    files: Vec<(String, Option<deltalake::kernel::DeletionVectorDescriptor>, u64)>,
}

/// What [`Search::read`] found in one file.
pub struct FileFound {
    file: LocatedFile,
    /// The indexes of the changed keys its live rows hold.
    keys: Vec<u32>,
}

impl<'k> Search<'k> {
    /// The search of the Delta table at `home` (its current version's live files);
    /// `Ok(Err(reason))` when its keys cannot be compared, or an earlier attempt of this apply
    /// (`txn_version`) merged the table already.
    pub fn delta(
        home: Home,
        table: &str,
        contract: &TableSchema,
        key_attributes: &[String],
        keys: &'k ChangedKeys<'k>,
        txn_version: Option<i64>,
    ) -> Result<Result<Self, String>, SinkError> {
        let fail = delta_err(table, &home.shown());
        let handle = crate::store::io_runtime().block_on(home.open(None)).map_err(&fail)?;
        let have = super::txn_version(&handle).map_err(&fail)?;
        if let (Some(have), Some(want)) = (have, txn_version)
            && have >= want
        {
            return Ok(Err("an earlier attempt of this apply merged it already".into()));
        }
        let keyset = match key_rows(contract, key_attributes, Keys::Decoded(keys)) {
            Ok(k) => k,
            Err(reason) => return Ok(Err(reason)),
        };
        let snapshot = handle.snapshot().map_err(&fail)?;
        let files = snapshot
            .log_data()
            .iter()
            .map(|f| (f.path().into_owned(), f.remove_action(true).deletion_vector, f.size().max(0).unsigned_abs()))
            .collect();
        Ok(Ok(Search { table: table.to_owned(), home, keyset, version: snapshot.version(), files }))
    }

    /// The search of a table of plain Parquet files (`files`: paths from `home`, and sizes), which
    /// has no log and no deletion vectors: every row of its files is live.
    pub fn files(
        home: Home,
        table: &str,
        files: &[(String, u64)],
        contract: &TableSchema,
        key_attributes: &[String],
        keys: &'k ChangedKeys<'k>,
    ) -> Result<Self, String> {
        let keyset = key_rows(contract, key_attributes, Keys::Decoded(keys))?;
        let files = files.iter().map(|(rel, bytes)| (rel.clone(), None, *bytes)).collect();
        Ok(Search { table: table.to_owned(), home, keyset, version: 0, files })
    }

    /// The sizes of the files to read, in bytes, in the order [`Search::read`] numbers them.
    pub fn file_sizes(&self) -> impl Iterator<Item = u64> + '_ {
        self.files.iter().map(|f| f.2)
    }

    /// Reads file `i`'s key columns (and deletion vector); `Ok(Err(reason))` when its keys cannot
    /// be compared or its vector read.
    pub fn read(&self, i: usize) -> Result<Result<FileFound, String>, SinkError> {
        let (rel, vector, _) = &self.files[i];
        let (count, deleted) = match file_keys(&self.home, &self.table, &self.keyset, rel, vector.as_ref())? {
            Ok(read) => read,
            Err(reason) => return Ok(Err(reason)),
        };
        let keys =
            count.positions.iter().zip(&count.keys).filter(|(p, _)| !deleted.contains(**p)).map(|(_, k)| *k).collect();
        Ok(Ok(FileFound { file: LocatedFile { positions: count.positions, deleted, schema: count.schema }, keys }))
    }

    /// The changed keys the table's live rows hold (indexes into the keys, file after file), and
    /// where; `found` holds what [`Search::read`] found in each file, in its order.
    pub fn finish(self, found: Vec<FileFound>) -> (Vec<u32>, Located) {
        let mut keys = Vec::new();
        let mut located = Located { version: self.version, files: HashMap::with_capacity(found.len()) };
        for ((rel, ..), f) in self.files.into_iter().zip(found) {
            keys.extend_from_slice(&f.keys);
            located.files.insert(rel, f.file);
        }
        (keys, located)
    }
}

/// The rows of data file `rel` that hold a changed key (its key columns read) and the rows its
/// deletion vector `vector` deletes; `Ok(Err(reason))` when its keys cannot be compared or its
/// vector read.
fn file_keys(
    home: &Home,
    table: &str,
    keyset: &KeySet<'_>,
    rel: &str,
    vector: Option<&deltalake::kernel::DeletionVectorDescriptor>,
) -> Result<Result<(KeyCount, RoaringTreemap), String>, SinkError> {
    let count = match changed_rows_at(FileAt::In(home, rel), table, keyset)? {
        Ok(Some(count)) => count,
        Ok(None) => return Ok(Err(format!("data file `{rel}` lacks a key column"))),
        Err(reason) => return Ok(Err(reason)),
    };
    let deleted = match vector {
        Some(d) => match dv::read(home, d)? {
            Ok(rows) => rows,
            Err(reason) => return Ok(Err(reason)),
        },
        None => RoaringTreemap::new(),
    };
    Ok(Ok((count, deleted)))
}

/// Why changed rows cannot be laid out in the table's columns (a value its type cannot hold
/// exactly); the file of upserted rows begun is abandoned.
fn not_fitting(e: datafusion::arrow::error::ArrowError, upserts: NewFile) -> String {
    upserts.abandon();
    format!("a changed row does not fit the table's columns: {e}")
}

/// Makes the merge of `input`'s changed keys into its Delta table ready to commit: the files
/// holding a changed key rewritten without those rows (or their rows marked in deletion
/// vectors) and the file of the changed keys' rows written, nothing committed but a table's
/// switch to deletion vectors. The merges of several tables can be prepared at once; each is
/// then committed by [`commit`].
pub fn prepare(input: MergeInput<'_>) -> Result<Prepared, SinkError> {
    let MergeInput {
        table,
        home,
        scratch,
        table_handle,
        parts,
        new_schema,
        contract,
        key_attributes,
        keys,
        props,
        tag,
        deletion_vectors,
        located,
        upserts_only,
    } = input;
    let fail = delta_err(table, &home.shown());
    let Some(contract) = contract else { return Ok(Prepared::Replace("the table has no key columns".into())) };
    let table_handle = if deletion_vectors { dv::enable(table_handle).map_err(&fail)? } else { table_handle };
    // Rows of changed keys are marked deleted in deletion vectors instead of files rewritten.
    let marking = dv::enabled(&table_handle);
    let snapshot = table_handle.snapshot().map_err(&fail)?;
    let current_delta = snapshot.schema();
    let current_arrow = snapshot.snapshot().arrow_schema();
    let plan = match plan_schema(table, &current_delta, &current_arrow, &new_schema) {
        Ok(p) => p,
        Err(reason) => return Ok(Prepared::Replace(reason)),
    };
    let keyset = match key_rows(contract, key_attributes, Keys::Json(keys)) {
        Ok(k) => k,
        Err(reason) => return Ok(Prepared::Replace(reason)),
    };
    let mut report = DeltaMerge {
        mode: manifest::MergeMode::Merge,
        changed_keys: keys.len() as u64,
        columns_added: plan.added.clone(),
        ..Default::default()
    };
    let mut actions = Vec::new();
    let mut files = Vec::new();

    // The files of the current version that hold a changed key (their key columns read): the
    // files the commit removes (or marks), and the rows of changed keys it removes with them.
    let (_, current) = live_files(&table_handle).map_err(&fail)?;
    let total = current.len();
    let mut holding = Vec::with_capacity(total);
    let mut marked: Vec<(Live, RoaringTreemap)> = Vec::new();
    // What the run's check found in the version this merge reads: the files are not read again.
    let found = located.filter(|l| l.version == snapshot.version());
    for live in current {
        if marking {
            let read;
            let file = match found.and_then(|l| l.files.get(&live.add.path)) {
                Some(file) => file,
                None => {
                    let vector = live.remove.deletion_vector.as_ref();
                    read = match file_keys(home, table, &keyset, &live.add.path, vector)? {
                        Ok((count, deleted)) => {
                            LocatedFile { positions: count.positions, deleted, schema: count.schema }
                        }
                        Err(reason) => return Ok(Prepared::Replace(reason)),
                    };
                    &read
                }
            };
            // Rows an earlier commit marked are gone already: only the live ones are removed.
            let fresh: RoaringTreemap = file.positions.iter().copied().filter(|p| !file.deleted.contains(*p)).collect();
            if !fresh.is_empty() {
                report.files_marked += 1;
                report.rows_removed += fresh.len();
                marked.push((live, file.deleted.clone() | fresh));
            }
            continue;
        }
        if live.remove.deletion_vector.is_some() {
            return Ok(Prepared::Replace(vector_not_taken(&live.add.path)));
        }
        // Where the run's check found the changed keys, a file holding none is not fetched.
        let located_rows = found.and_then(|l| l.files.get(&live.add.path)).map(|f| f.positions.as_slice());
        let changed = match located_rows {
            Some([]) => continue,
            Some(rows) => Some(rows.len()),
            None => None,
        };
        let path = home.local_copy(&live.add.path, scratch)?;
        let changed = match changed {
            Some(n) => n,
            None => match changed_rows(&path, table, &keyset)? {
                Ok(Some(count)) => count.positions.len(),
                Ok(None) => return Ok(Prepared::Replace(format!("data file `{}` lacks a key column", live.add.path))),
                Err(reason) => return Ok(Prepared::Replace(reason)),
            },
        };
        if changed == 0 {
            home.done_with(&path);
        } else {
            report.files_rewritten += 1;
            report.bytes_rewritten += live.add.size.max(0).unsigned_abs();
            report.rows_removed += changed as u64;
            holding.push((live.add.path, live.remove, path, located_rows));
        }
    }
    if marking {
        let upserts =
            match upserted_rows(&parts, &keyset, &plan, home.write_dir(scratch), props, table, tag, upserts_only)? {
                Ok(u) => u,
                Err(reason) => return Ok(Prepared::Replace(reason)),
            };
        report.rows_upserted = upserts.rows;
        if !marked.is_empty() {
            let vectors: Vec<RoaringTreemap> = marked.iter().map(|(_, rows)| rows.clone()).collect();
            let (descriptors, bytes) = dv::write(home, scratch, &vectors)?;
            report.deletion_vector_bytes = bytes;
            for ((live, _), descriptor) in marked.into_iter().zip(descriptors) {
                actions.push(Action::Remove(live.remove));
                actions.push(Action::Add(Add { deletion_vector: Some(descriptor), ..live.add }));
            }
        }
        if let Some((add, r)) = upserts.finish_into(home, table)? {
            actions.push(add);
            files.push(r);
        }
    } else if !upserts_only && total > 0 && holding.len() == total && plan.schema.fields() == new_schema.fields() {
        // Every file holds a changed key: rewriting each without those rows and adding the
        // changed keys' rows gives the replay's complete table, which the run has already written
        // in the table's layout when its columns are the table's (in order, then the added ones,
        // with the same types). Those parts are the commit's new files; nothing is read or
        // encoded again. (In place, the run's parts hold the changed keys' rows only.)
        let mut counts = Vec::with_capacity(parts.len());
        for part in &parts {
            match changed_rows(part, table, &keyset)? {
                Ok(Some(count)) => counts.push(count),
                Ok(None) => return Ok(Prepared::Replace("a part of this run lacks a key column".into())),
                Err(reason) => return Ok(Prepared::Replace(reason)),
            }
        }
        report.rows_upserted = counts.iter().map(|c| c.positions.len() as u64).sum();
        for (_, remove, path, _) in holding {
            home.done_with(&path);
            actions.push(Action::Remove(remove));
        }
        for (i, (part, count)) in parts.iter().zip(counts).enumerate() {
            if count.rows == 0 {
                continue;
            }
            let name = format!("part-{i:05}-{tag}.parquet");
            let add = add_action(name.clone(), part, count.rows)?;
            files.push(FileReport {
                path: format!("{table}/{name}"),
                rows: count.rows,
                row_groups: count.row_groups,
                bytes: add.size.max(0).unsigned_abs(),
            });
            actions.push(Action::Add(add));
            home.place(part, &name)?;
        }
    } else {
        // The changed keys' current rows, from the replay's complete table.
        let upserts =
            match upserted_rows(&parts, &keyset, &plan, home.write_dir(scratch), props, table, tag, upserts_only)? {
                Ok(u) => u,
                Err(reason) => return Ok(Prepared::Replace(reason)),
            };
        report.rows_upserted = upserts.rows;

        // The files holding a changed key, rewritten without those rows.
        for (rewritten, (rel, remove, path, located_rows)) in holding.into_iter().enumerate() {
            let file = fs::File::open(&path).map_err(SinkError::io("open", &path))?;
            let mut reader = ParquetRecordBatchReaderBuilder::try_new(file).map_err(part_err(table, &path))?;
            let file_schema = reader.schema().clone();
            // Where the run's check found the changed keys' rows, the reader skips them, and no
            // key is compared again; elsewhere each batch's keys are.
            let compare = match located_rows {
                Some(rows) => {
                    let total = reader.metadata().file_metadata().num_rows().max(0).unsigned_abs();
                    if let Some(kept) = crate::sink::rewrite::kept_rows(rows, 0, total) {
                        reader = reader.with_row_selection(kept);
                    }
                    None
                }
                None => Some(&keyset),
            };
            let mut out = NewFile::create(
                home.write_dir(scratch),
                format!("part-r{rewritten:05}-{tag}.parquet"),
                file_schema,
                props,
                table,
            )?;
            let batches = reader.with_batch_size(BATCH_ROWS).build().map_err(part_err(table, &path))?;
            if let Err(reason) = without_changed_rows(batches, compare, &rel, &path, table, &mut out)? {
                out.abandon();
                return Ok(Prepared::Replace(reason));
            }
            home.done_with(&path);
            actions.push(Action::Remove(remove));
            if let Some((add, r)) = out.finish_into(home, table)? {
                actions.push(add);
                files.push(r);
            }
        }
        if let Some((add, r)) = upserts.finish_into(home, table)? {
            actions.push(add);
            files.push(r);
        }
    }
    Ok(Prepared::Ready(Box::new(Ready {
        table_handle,
        new_delta: plan.new_delta,
        key_names: keyset.names.clone(),
        actions,
        report,
        files,
    })))
}

/// Why data file `rel`, which has a deletion vector, cannot be rewritten copy-on-write: the table
/// no longer takes vectors, and the rewrite would bring back the rows its vector deletes.
pub(super) fn vector_not_taken(rel: &str) -> String {
    format!(
        "data file `{rel}` has a deletion vector, and the table no longer takes them (`{}` is not `true`)",
        dv::ENABLE
    )
}

/// The rows of `batches` (data file `rel` of `table`, at `path`) that hold no changed key of
/// `keyset`, written into `out`; every row of them with no `keyset` (the reader skipped the rows
/// of changed keys). The file is read and filtered on a thread of its own while `out` encodes
/// (the larger part): a table of one large file is rewritten on two cores. `Ok(Err(reason))`
/// when its keys cannot be compared.
fn without_changed_rows(
    batches: datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReader,
    keyset: Option<&KeySet<'_>>,
    rel: &str,
    path: &Path,
    table: &str,
    out: &mut NewFile,
) -> Result<Result<(), String>, SinkError> {
    type Kept = Result<Result<RecordBatch, String>, SinkError>;
    std::thread::scope(|s| {
        // Two batches ahead at most: memory stays bounded by the batch size.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Kept>(2);
        s.spawn(move || {
            for batch in batches {
                let kept =
                    batch.map_err(arrow_err(table, path)).and_then(|batch| match keyset.map(|k| k.matches(&batch)) {
                        None => Ok(Ok(batch)),
                        Some(Ok(Some(m))) => {
                            filter_record_batch(&batch, &not(&m)).map(Ok).map_err(arrow_err(table, path))
                        }
                        Some(Ok(None)) => Ok(Err(format!("data file `{rel}` lacks a key column"))),
                        Some(Err(reason)) => Ok(Err(reason)),
                    });
                let last = !matches!(kept, Ok(Ok(_)));
                // The receiver is gone when the writer stopped: nothing more is wanted.
                if tx.send(kept).is_err() || last {
                    return;
                }
            }
        });
        for kept in rx {
            match kept? {
                Ok(batch) => out.write(&batch, table)?,
                Err(reason) => return Ok(Err(reason)),
            }
        }
        Ok(Ok(()))
    })
}

/// Commits the merge `ready` of `table` (at `home`) on the version it read: the added columns
/// (if any) and its actions, with the run's `txn` (`txn_version`); nothing when there is nothing
/// to change.
pub fn commit(table: &str, home: &Home, txn_version: Option<i64>, ready: Ready) -> Result<Merged, SinkError> {
    let Ready { table_handle, new_delta, key_names, mut actions, mut report, files } = ready;
    let fail = delta_err(table, &home.shown());
    let snapshot = table_handle.snapshot().map_err(&fail)?;
    let current_version = snapshot.version();
    report.files_added = files.len() as u64;
    report.bytes_added = files.iter().map(|f| f.bytes).sum();
    if actions.is_empty() && new_delta.is_none() {
        report.mode = manifest::MergeMode::Unchanged;
        return Ok(Merged { version: current_version, report, files });
    }
    home.settle()?;
    if let Some(schema) = &new_delta {
        let metadata = snapshot
            .metadata()
            .clone()
            .with_schema(schema)
            .map_err(|e| fail(deltalake::DeltaTableError::Generic(e.to_string())))?;
        actions.insert(0, Action::Metadata(metadata));
    }
    let props_commit = super::commit_properties(txn_version);
    let operation = DeltaOperation::Merge {
        predicate: None,
        merge_predicate: Some(format!("key columns {}", key_names.join(", "))),
        matched_predicates: Vec::new(),
        not_matched_predicates: Vec::new(),
        not_matched_by_source_predicates: Vec::new(),
    };
    let log_store = table_handle.log_store();
    let committed = crate::store::io_runtime()
        .block_on(async {
            CommitBuilder::from(props_commit).with_actions(actions).build(Some(snapshot), log_store, operation).await
        })
        .map_err(&fail)?;
    Ok(Merged { version: committed.version(), report, files })
}

/// What [`changed_rows`] counted in one data file.
struct KeyCount {
    /// Their positions in the file (from 0), ascending.
    positions: Vec<u64>,
    /// The index of the changed key each of them holds.
    keys: Vec<u32>,
    rows: u64,
    row_groups: usize,
    /// The file's Arrow schema.
    schema: SchemaRef,
}

/// How many rows of the data file at `path` hold a changed key (its key columns read only);
/// `Ok(None)` when it lacks a key column, `Err(reason)` when its keys cannot be compared (the
/// table is then replaced whole).
fn changed_rows(path: &Path, table: &str, keyset: &KeySet<'_>) -> Result<Result<Option<KeyCount>, String>, SinkError> {
    changed_rows_at(FileAt::Path(path), table, keyset)
}

/// [`changed_rows`] for a data file at `at` (an object's footer, then only its key columns'
/// chunks, fetched by range: never the whole file).
fn changed_rows_at(
    at: FileAt<'_>,
    table: &str,
    keyset: &KeySet<'_>,
) -> Result<Result<Option<KeyCount>, String>, SinkError> {
    let names: Vec<&str> = keyset.names.iter().map(String::as_str).collect();
    let mut scan = KeyScan::default();
    let read = read_columns(at, table, &names, &mut |batch| scan.add(batch, keyset))?;
    Ok(read.map(|r| r.map(|r| scan.finish(r))))
}

/// Where a data file is read from: a local path, or a file of a table's home (a path from it).
#[derive(Clone, Copy)]
pub(super) enum FileAt<'a> {
    Path(&'a Path),
    In(&'a Home, &'a str),
}

/// What [`read_columns`] read of a file besides its rows.
pub(super) struct ColumnsRead {
    /// The file's Arrow schema (all its columns).
    pub schema: SchemaRef,
    pub row_groups: usize,
}

/// Reads the columns `names` of the Parquet file at `at` (of table `table`), batch by batch into
/// `each`; from an object store, its footer and then only those columns' chunks, by range.
/// `Ok(None)` when the file lacks one of them, `Err(reason)` from `each`.
pub(super) fn read_columns(
    at: FileAt<'_>,
    table: &str,
    names: &[&str],
    each: &mut dyn FnMut(&RecordBatch) -> Result<(), String>,
) -> Result<Result<Option<ColumnsRead>, String>, SinkError> {
    let mask = |schema: &Schema, parquet: &datafusion::parquet::schema::types::SchemaDescriptor| {
        let indices: Option<Vec<usize>> = names.iter().map(|n| schema.index_of(n).ok()).collect();
        indices.map(|i| ProjectionMask::roots(parquet, i))
    };
    let joined;
    let path = match at {
        FileAt::Path(p) => p,
        FileAt::In(Home::Dir(d), rel) => {
            joined = d.join(rel);
            &joined
        }
        FileAt::In(Home::Object { store, url }, rel) => {
            #[allow(deprecated)] // Fetches the ranges the reader asks for, all this needs.
            use datafusion::parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
            use futures::TryStreamExt as _;
            let key = Home::key(url, rel);
            let shown = url.url_of(&key);
            let err = |source| SinkError::Part { table: table.to_owned(), path: shown.clone(), source };
            return crate::store::io_runtime().block_on(async {
                #[allow(deprecated)]
                let reader = ParquetObjectReader::new(store.clone(), object_store::path::Path::from(key.as_str()));
                let builder = ParquetRecordBatchStreamBuilder::new(reader).await.map_err(err)?;
                let (schema, row_groups) = (builder.schema().clone(), builder.metadata().num_row_groups());
                let Some(mask) = mask(&schema, builder.parquet_schema()) else { return Ok(Ok(None)) };
                let mut batches = builder.with_projection(mask).with_batch_size(BATCH_ROWS).build().map_err(err)?;
                while let Some(batch) = batches.try_next().await.map_err(err)? {
                    if let Err(reason) = each(&batch) {
                        return Ok(Err(reason));
                    }
                }
                Ok(Ok(Some(ColumnsRead { schema, row_groups })))
            });
        }
    };
    let file = fs::File::open(path).map_err(SinkError::io("open", path))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(part_err(table, path))?;
    let (schema, row_groups) = (builder.schema().clone(), builder.metadata().num_row_groups());
    let Some(mask) = mask(&schema, builder.parquet_schema()) else { return Ok(Ok(None)) };
    for batch in builder.with_projection(mask).with_batch_size(BATCH_ROWS).build().map_err(part_err(table, path))? {
        if let Err(reason) = each(&batch.map_err(arrow_err(table, path))?) {
            return Ok(Err(reason));
        }
    }
    Ok(Ok(Some(ColumnsRead { schema, row_groups })))
}

/// The changed keys of a file's key columns, counted batch by batch (a [`KeyCount`] once the
/// file is read).
#[derive(Default)]
struct KeyScan {
    positions: Vec<u64>,
    keys: Vec<u32>,
    rows: u64,
}

impl KeyScan {
    /// Counts the next batch of the key columns in.
    fn add(&mut self, batch: &RecordBatch, keyset: &KeySet<'_>) -> Result<(), String> {
        // `read_columns` projects exactly the key columns, or reads nothing.
        let Some(found) = keyset.indexes(batch)? else { return Err("a batch of the key columns lacks one".into()) };
        for (i, k) in found {
            self.positions.push(self.rows + u64::from(i));
            self.keys.push(k);
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    fn finish(self, read: ColumnsRead) -> KeyCount {
        let KeyScan { positions, keys, rows } = self;
        KeyCount { positions, keys, rows, row_groups: read.row_groups, schema: read.schema }
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::Field;

    use super::*;

    fn schema(fields: Vec<Field>) -> Schema {
        Schema::new(fields)
    }

    fn plan(current: &Schema, new: &Schema) -> Result<Plan, String> {
        let delta = delta_schema("t", current).unwrap();
        plan_schema("t", &delta, current, new)
    }

    fn key_contract() -> TableSchema {
        let col = |name: &str, ty| crate::schema::Column {
            name: name.into(),
            source: name.into(),
            ty,
            nullable: false,
            seen: Default::default(),
        };
        let columns = vec![
            col("PK", crate::schema::ColumnType::Utf8),
            col("SK", crate::schema::ColumnType::Int64),
            col("v", crate::schema::ColumnType::Utf8),
        ];
        TableSchema { table: "t".into(), entity: Some("T".into()), columns, extra: None }
    }

    #[test]
    fn tables_with_the_same_key_columns_share_one_set_of_key_rows() {
        let json: Vec<String> =
            [r#"{"PK":{"S":"A"},"SK":{"N":"1"}}"#, r#"{"PK":{"S":"B"},"SK":{"S":"x"}}"#].map(String::from).to_vec();
        let keys = ChangedKeys::decode(&json);
        let names = ["PK".to_owned(), "SK".to_owned()];
        // Another table, its key columns named otherwise: the same attributes in the same types.
        let mut renamed = key_contract();
        renamed.table = "u".into();
        renamed.columns[0].name = "pk".into();
        let mut text_sk = key_contract();
        text_sk.columns[1].ty = crate::schema::ColumnType::Utf8;
        let [a, b, c] = [key_contract(), renamed, text_sk].map(|t| key_rows(&t, &names, Keys::Decoded(&keys)).unwrap());
        assert!(Arc::ptr_eq(&a.set, &b.set));
        assert!(!Arc::ptr_eq(&a.set, &c.set));
        // Made once, by whichever looks first; each type keeps the keys it can hold: the number
        // in an `int64` key column, the string in a text one.
        let indexes = |k: &KeySet<'_>| k.set().unwrap().indexes.clone();
        assert_eq!(indexes(&b), [0]);
        assert_eq!(indexes(&a), [0]);
        assert_eq!(indexes(&c), [1]);
        // A set made from JSON is the table's own.
        let own = key_rows(&key_contract(), &names, Keys::Json(&json)).unwrap();
        assert!(!Arc::ptr_eq(&a.set, &own.set));
    }

    #[test]
    fn rows_of_changed_keys_are_found_by_hash_then_compared_whole() {
        let json: Vec<String> = [
            r#"{"PK":{"S":"A"},"SK":{"N":"1"}}"#,
            // A key this table cannot hold (its `SK` column is `int64`): left out, the others kept.
            r#"{"PK":{"S":"A"},"SK":{"S":"x"}}"#,
            r#"{"PK":{"S":"B"},"SK":{"N":"2"}}"#,
            r#"{"PK":{"S":"C"},"SK":{"N":"-7"}}"#,
        ]
        .map(String::from)
        .to_vec();
        let keys = ChangedKeys::decode(&json);
        let names = ["PK".to_owned(), "SK".to_owned()];
        for set in [
            key_rows(&key_contract(), &names, Keys::Decoded(&keys)),
            key_rows(&key_contract(), &names, Keys::Json(&json)),
        ] {
            let set = set.unwrap();
            let batch = RecordBatch::try_new(
                Arc::new(schema(vec![
                    Field::new("v", DataType::Utf8, true),
                    Field::new("SK", DataType::Int64, true),
                    Field::new("PK", DataType::Utf8, true),
                ])),
                vec![
                    Arc::new(datafusion::arrow::array::StringArray::from(vec!["a"; 7])),
                    Arc::new(datafusion::arrow::array::Int64Array::from(vec![
                        Some(1),
                        Some(2),
                        Some(2),
                        None,
                        Some(-7),
                        Some(1),
                        Some(3),
                    ])),
                    Arc::new(datafusion::arrow::array::StringArray::from(vec![
                        Some("A"),
                        Some("A"),
                        Some("B"),
                        Some("A"),
                        Some("C"),
                        Some("A"),
                        None,
                    ])),
                ],
            )
            .unwrap();
            // Rows 0, 2, 4 and 5 hold changed keys (0 and 5 the same one); (A, 2), (A, null) and
            // (null, 3) do not.
            assert_eq!(set.indexes(&batch).unwrap().unwrap(), [(0, 0), (2, 2), (4, 3), (5, 0)]);
            let m = set.matches(&batch).unwrap().unwrap();
            assert_eq!(m.iter().map(Option::unwrap).collect::<Vec<_>>(), [true, false, true, false, true, true, false]);
            let no_key = batch.project(&[0, 1]).unwrap();
            assert!(set.indexes(&no_key).unwrap().is_none(), "a batch without `PK` cannot say");
        }
    }

    /// A table's files are read in any order on any thread, and put together in file order: the
    /// keys each file's rows hold, file after file, and each file's positions.
    #[test]
    fn a_search_reads_files_on_several_threads_and_finishes_in_file_order() {
        let dir = tempfile::tempdir().unwrap();
        let file_schema = Arc::new(schema(vec![
            Field::new("PK", DataType::Utf8, true),
            Field::new("SK", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ]));
        // Three files; the changed keys (A, 1), (B, 2), (C, 3) are in files 0 and 2 only.
        let files: [&[(&str, i64)]; 3] = [&[("A", 1), ("Z", 9), ("B", 2)], &[("Y", 8)], &[("Z", 7), ("C", 3)]];
        let mut listed = Vec::new();
        for (i, rows) in files.iter().enumerate() {
            let rel = format!("t/part-{i}.parquet");
            std::fs::create_dir_all(dir.path().join("t")).unwrap();
            let out = std::fs::File::create(dir.path().join(&rel)).unwrap();
            let batch = RecordBatch::try_new(
                file_schema.clone(),
                vec![
                    Arc::new(datafusion::arrow::array::StringArray::from_iter_values(rows.iter().map(|r| r.0))),
                    Arc::new(datafusion::arrow::array::Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
                    Arc::new(datafusion::arrow::array::StringArray::from(vec!["v"; rows.len()])),
                ],
            )
            .unwrap();
            let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(out, file_schema.clone(), None).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            listed.push((rel, 100 - i as u64));
        }
        let json: Vec<String> = [
            r#"{"PK":{"S":"C"},"SK":{"N":"3"}}"#,
            r#"{"PK":{"S":"A"},"SK":{"N":"1"}}"#,
            r#"{"PK":{"S":"B"},"SK":{"N":"2"}}"#,
        ]
        .map(String::from)
        .to_vec();
        let keys = ChangedKeys::decode(&json);
        let names = ["PK".to_owned(), "SK".to_owned()];
        let home = Home::Dir(dir.path().to_owned());
        let search = Search::files(home, "t", &listed, &key_contract(), &names, &keys).unwrap();
        assert_eq!(search.file_sizes().collect::<Vec<_>>(), [100, 99, 98]);
        // The last file first, on one thread; the others on another.
        let (last, first_two) = std::thread::scope(|s| {
            let last = s.spawn(|| search.read(2).unwrap().unwrap());
            let first_two = s.spawn(|| [search.read(1).unwrap().unwrap(), search.read(0).unwrap().unwrap()]);
            (last.join().unwrap(), first_two.join().unwrap())
        });
        let [second, first] = first_two;
        let (held, located) = search.finish(vec![first, second, last]);
        assert_eq!(held, [1, 2, 0], "file 0 holds keys 1 and 2, file 2 key 0");
        let positions = |rel: &str| located.files[rel].positions.clone();
        assert_eq!(positions("t/part-0.parquet"), [0, 2]);
        assert!(positions("t/part-1.parquet").is_empty());
        assert_eq!(positions("t/part-2.parquet"), [1]);
        assert_eq!(*located.files["t/part-1.parquet"].schema, *file_schema);
    }

    #[test]
    fn a_table_keeps_its_columns_and_gains_new_ones() {
        let current = schema(vec![
            Field::new("pk", DataType::Utf8, false),
            Field::new("gone", DataType::Utf8, true),
            Field::new("n", DataType::Decimal128(38, 4), true),
        ]);
        let new = schema(vec![
            Field::new("pk", DataType::Utf8, false),
            Field::new("n", DataType::Int64, true),
            Field::new("added", DataType::Boolean, false),
        ]);
        let p = plan(&current, &new).unwrap();
        let names: Vec<&str> = p.schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["pk", "gone", "n", "added"]);
        assert!(matches!(&p.fills[1], Fill::Null));
        assert!(matches!(&p.fills[2], Fill::Column(c, Some(DataType::Decimal128(38, 4))) if c == "n"));
        assert_eq!(p.added, ["added"]);
        let evolved = p.new_delta.unwrap();
        assert!(evolved.field("added").unwrap().nullable, "an added column is nullable: old rows lack it");
        assert_eq!(evolved.fields().count(), 4);
        // The file of upserted rows names the entity, as the table's other files do.
        let entity = std::collections::HashMap::from([("etl.entity".to_owned(), "Order".to_owned())]);
        let named = plan(&current, &new.clone().with_metadata(entity.clone())).unwrap();
        assert_eq!(named.schema.metadata(), &entity);

        // Laid out: the int64 column cast exactly into the decimal, the gone column null.
        let batch = RecordBatch::try_new(
            Arc::new(new.clone()),
            vec![
                Arc::new(datafusion::arrow::array::StringArray::from(vec!["a"])),
                Arc::new(datafusion::arrow::array::Int64Array::from(vec![12])),
                Arc::new(BooleanArray::from(vec![true])),
            ],
        )
        .unwrap();
        let p = plan(&current, &new).unwrap();
        let laid = conform(&batch, &p).unwrap();
        assert!(laid.column(1).is_null(0));
        let n = laid.column(2).as_any().downcast_ref::<datafusion::arrow::array::Decimal128Array>().unwrap();
        assert_eq!(n.value_as_string(0), "12.0000");
    }

    #[test]
    fn a_decimal_of_a_smaller_scale_goes_into_the_tables_value_by_value() {
        let current = schema(vec![Field::new("n", DataType::Decimal128(38, 4), true)]);
        let new = schema(vec![Field::new("n", DataType::Decimal128(38, 1), true)]);
        let p = plan(&current, &new).unwrap();
        let values = |v: Vec<i128>| {
            let a = datafusion::arrow::array::Decimal128Array::from(v).with_precision_and_scale(38, 1).unwrap();
            RecordBatch::try_new(Arc::new(new.clone()), vec![Arc::new(a)]).unwrap()
        };
        let laid = conform(&values(vec![125]), &p).unwrap();
        let n = laid.column(0).as_any().downcast_ref::<datafusion::arrow::array::Decimal128Array>().unwrap();
        assert_eq!(n.value_as_string(0), "12.5000");
        // 37 integer digits do not fit 34: refused, never rounded or nulled.
        assert!(conform(&values(vec![10i128.pow(37)]), &p).is_err());
        let larger_scale = schema(vec![Field::new("n", DataType::Decimal128(38, 5), true)]);
        assert!(plan(&current, &larger_scale).is_err());
        // A column of nulls (its metadata says `NULL`) goes into any column as its nulls.
        let meta = std::collections::HashMap::from([(crate::schema::META_DYNAMODB_TYPE.to_owned(), "NULL".to_owned())]);
        let nulls = schema(vec![Field::new("n", DataType::Utf8, true).with_metadata(meta)]);
        let p = plan(&current, &nulls).unwrap();
        assert!(matches!(p.fills[0], Fill::Null));
        assert_eq!(p.schema.field(0).data_type(), &DataType::Decimal128(38, 4));
        assert!(plan(&current, &schema(vec![Field::new("n", DataType::Utf8, true)])).is_err());
    }

    /// Inside structs and lists the same rules hold: a smaller scale goes into the table's
    /// decimal, cast field by field and exactly; a larger scale, other fields or another type
    /// inside are not merged.
    #[test]
    fn nested_values_that_fit_go_into_the_tables_types() {
        use datafusion::arrow::array::{Array, Decimal128Array, ListArray, StructArray};
        use datafusion::arrow::datatypes::Fields;
        let shipping = |cost: DataType| {
            DataType::Struct(Fields::from(vec![
                Field::new("cost", cost, true),
                Field::new("method", DataType::Utf8, true),
            ]))
        };
        let lines = |qty: DataType| DataType::List(Arc::new(Field::new("item", qty, true)));
        let current = schema(vec![
            Field::new("ship", shipping(DataType::Decimal128(38, 2)), true),
            Field::new("qty", lines(DataType::Decimal128(38, 0)), true),
        ]);
        let new = schema(vec![
            Field::new("ship", shipping(DataType::Decimal128(38, 1)), true),
            Field::new("qty", lines(DataType::Int64), true),
        ]);
        let p = plan(&current, &new).unwrap();
        assert_eq!(p.schema.field(0).data_type(), current.field(0).data_type());
        let DataType::Struct(fields) = shipping(DataType::Decimal128(38, 1)) else { unreachable!() };
        let cost = Decimal128Array::from(vec![125]).with_precision_and_scale(38, 1).unwrap();
        let method = datafusion::arrow::array::StringArray::from(vec!["post"]);
        let ship = StructArray::new(fields, vec![Arc::new(cost), Arc::new(method)], None);
        let qty = ListArray::from_iter_primitive::<datafusion::arrow::datatypes::Int64Type, _, _>(vec![Some(vec![
            Some(3),
            None,
        ])]);
        let batch = RecordBatch::try_new(Arc::new(new.clone()), vec![Arc::new(ship), Arc::new(qty)]).unwrap();
        let laid = conform(&batch, &p).unwrap();
        assert_eq!(laid.schema().field(0).data_type(), current.field(0).data_type());
        let ship = laid.column(0).as_any().downcast_ref::<StructArray>().unwrap();
        let cost = ship.column(0).as_any().downcast_ref::<Decimal128Array>().unwrap();
        assert_eq!(cost.value_as_string(0), "12.50");
        let qty = laid.column(1).as_any().downcast_ref::<ListArray>().unwrap().value(0);
        let qty = qty.as_any().downcast_ref::<Decimal128Array>().unwrap();
        assert_eq!((qty.value_as_string(0), qty.is_null(1)), ("3".to_owned(), true));

        let refused = |ship: DataType| plan(&current, &schema(vec![Field::new("ship", ship, true)])).is_err();
        assert!(refused(shipping(DataType::Decimal128(38, 3))), "a larger scale inside");
        assert!(refused(shipping(DataType::Utf8)), "another type inside");
        let renamed = DataType::Struct(Fields::from(vec![
            Field::new("price", DataType::Decimal128(38, 2), true),
            Field::new("method", DataType::Utf8, true),
        ]));
        assert!(refused(renamed), "other fields");
    }

    #[test]
    fn a_wider_or_other_type_is_not_merged() {
        let current = schema(vec![Field::new("pk", DataType::Utf8, false), Field::new("n", DataType::Int64, true)]);
        let wider = schema(vec![Field::new("pk", DataType::Utf8, false), Field::new("n", DataType::Utf8, true)]);
        assert!(plan(&current, &wider).err().unwrap().contains("column `n`"));
        let narrow_decimal =
            schema(vec![Field::new("pk", DataType::Utf8, false), Field::new("n", DataType::Decimal128(10, 2), true)]);
        assert!(plan(&current, &narrow_decimal).is_err());
        // A non-null column the new rows would leave null.
        let no_pk = schema(vec![Field::new("n", DataType::Int64, true)]);
        assert!(plan(&current, &no_pk).err().unwrap().contains("`pk`"));
    }
}

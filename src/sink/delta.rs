//! Delta Lake output (`--format delta`, local folders): every table of a run becomes a Delta
//! table under `DIR/<table>/`, created or replaced by ONE Delta commit per table, whose data
//! files are exactly the Parquet parts the pipeline wrote through [`PartWriter`] (same bytes,
//! types and field metadata as the Parquet output); `_etl/run.json`, written last, records each
//! table's committed version.
//!
//! Parts are staged beside `DIR` (the local sink's [`Staging`], which also holds `DIR`'s lock and
//! refuses a second run), then renamed into `DIR/<table>/` under run-unique names and committed
//! with an `add` action each (and a `remove` for every file of the version replaced). A reader of
//! one table sees the previous version or the new one, never a mix; across tables, `etl sql` reads
//! the versions `_etl/run.json` names, so it sees one run's tables or the previous run's. Files a
//! replaced version removed stay on disk (Delta time travel reads them) until a vacuum, which is
//! not done here. This module never merges, never vacuums, and never writes an object store.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::parquet::file::properties::WriterProperties;
use deltalake::DeltaTableError;
use deltalake::kernel::engine::arrow_conversion::TryIntoKernel as _;
use deltalake::kernel::{Action, Add, StructType};
use deltalake::operations::create::CreateBuilder;
use deltalake::protocol::SaveMode;

use super::local::{RUN_REPORT, Staging};
use super::manifest::{self, RunManifest};
use super::{Committed, PartWriter, Sink, SinkError};
use crate::schema::TableSchema;

/// The folder of a Delta table's log, inside the table's folder.
pub const DELTA_LOG: &str = "_delta_log";

/// Why a Delta output cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    #[error(
        "`{path}` holds a Parquet etl output; `--format delta` writes into a new or empty folder or an earlier Delta output"
    )]
    ParquetOutput { path: String },
    #[error("`{path}` holds files that are not an etl output; `--format delta` never writes beside them")]
    NotEmpty { path: String },
    #[error("`--format delta` writes local folders only, not `{url}` yet")]
    ObjectStore { url: String },
    #[error("table `{table}` has no Delta schema: {source}")]
    Schema { table: String, source: ArrowError },
    #[error("committing Delta table `{table}` at `{path}`: {source}")]
    Commit { table: String, path: String, source: Box<DeltaTableError> },
    #[error("opening Delta table `{table}` at `{path}` (version {version}): {source}")]
    Open { table: String, path: String, version: u64, source: Box<DeltaTableError> },
}

impl DeltaError {
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            DeltaError::ParquetOutput { .. } | DeltaError::NotEmpty { .. } => Some(
                "choose another `--out` for the Delta tables, or drop `--format delta` to replace the output as Parquet",
            ),
            DeltaError::ObjectStore { .. } => Some(
                "write the Delta tables to a local `--out` folder, or drop `--format delta` to write Parquet to the object store",
            ),
            DeltaError::Schema { .. } => Some("this is a bug in etl; please report it with the run's input if you can"),
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
}

impl DeltaSink {
    /// Locks `target` and checks that it is absent, empty, or an earlier Delta output.
    pub fn create(target: &Path, props: WriterProperties) -> Result<DeltaSink, SinkError> {
        // Never `--overwrite` here: Delta tables are replaced by commits, never by deleting files.
        let staging = match Staging::create(target, false) {
            Err(SinkError::NotEtlOutput { path }) => return Err(DeltaError::NotEmpty { path }.into()),
            other => other?,
        };
        if target.join(RUN_REPORT).is_file() && !is_delta_output(&RunManifest::read(target)?) {
            return Err(DeltaError::ParquetOutput { path: target.display().to_string() }.into());
        }
        let scratch = super::scratch_dir(staging.path());
        fs::create_dir_all(&scratch).map_err(SinkError::io("create", &scratch))?;
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let tag = format!("{}-{nanos}", std::process::id());
        Ok(DeltaSink { target: target.to_owned(), staging, scratch, props, tag })
    }
}

/// Whether a run manifest is that of a Delta output (its tables record Delta versions).
pub fn is_delta_output(m: &RunManifest) -> bool {
    !m.tables.is_empty() && m.tables.iter().all(|t| t.delta_version.is_some())
}

/// Whether `dir` is a Delta table (it has a `_delta_log/` folder).
pub fn is_delta_table(dir: &Path) -> bool {
    dir.join(DELTA_LOG).is_dir()
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

fn sync(path: &Path) -> Result<(), SinkError> {
    fs::File::open(path).and_then(|f| f.sync_all()).map_err(SinkError::io("sync", path))
}

impl Sink for DeltaSink {
    fn scratch(&self) -> &Path {
        &self.scratch
    }

    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        PartWriter::create(self.staging.path(), table, part, schema, &self.props)
    }

    fn commit(
        self: Box<Self>,
        mut manifest: RunManifest,
        schemas: &[TableSchema],
    ) -> Result<(RunManifest, Committed), SinkError> {
        let DeltaSink { target, staging, scratch, props: _, tag } = *self;
        fs::remove_dir_all(&scratch).map_err(SinkError::io("remove", &scratch))?;
        let contracts: HashMap<&str, &TableSchema> = schemas.iter().map(|s| (s.table.as_str(), s)).collect();
        let mut files = 0;
        let mut bytes = 0;
        for table in &mut manifest.tables {
            let dir = target.join(&table.name);
            fs::create_dir_all(&dir).map_err(SinkError::io("create", &dir))?;
            let mut adds = Vec::with_capacity(table.files.len());
            let mut arrow_schema = None;
            for f in &mut table.files {
                let from = staging.path().join(&f.path);
                if arrow_schema.is_none() {
                    arrow_schema = Some(written_schema(&from, &table.name)?);
                }
                let file_name = Path::new(&f.path)
                    .file_stem()
                    .map(|s| format!("{}-{tag}.parquet", s.to_string_lossy()))
                    .unwrap_or_else(|| format!("part-{tag}.parquet"));
                let to = dir.join(&file_name);
                sync(&from)?;
                fs::rename(&from, &to).map_err(SinkError::io("move a data file into", &dir))?;
                adds.push(Action::Add(add_action(file_name.clone(), &to, f.rows)?));
                f.path = format!("{}/{file_name}", table.name);
                files += 1;
                bytes += f.bytes;
            }
            sync(&dir)?;
            let schema = match (arrow_schema, contracts.get(table.name.as_str())) {
                (Some(s), _) => s,
                (None, Some(c)) => c.arrow_schema(),
                (None, None) => (*crate::normalize::rejects_schema()).clone(),
            };
            let columns = delta_schema(&table.name, &schema)?;
            let version = commit_table(&dir, &table.name, columns, adds)?;
            tracing::info!(table = %table.name, version, "committed the Delta table");
            table.delta_version = Some(version);
        }
        // `_etl/run.json` last: written into the staging folder, then renamed over the previous.
        manifest::write(staging.path(), &manifest, schemas)
            .map_err(SinkError::io("write the run manifest in", staging.path()))?;
        let schema_dir = target.join(manifest::SCHEMA_DIR);
        fs::create_dir_all(&schema_dir).map_err(SinkError::io("create", &schema_dir))?;
        for s in schemas {
            let name = format!("{}.json", s.table);
            let from = staging.path().join(manifest::SCHEMA_DIR).join(&name);
            fs::rename(&from, schema_dir.join(&name)).map_err(SinkError::io("publish", &from))?;
        }
        let from = staging.path().join(RUN_REPORT);
        sync(&from)?;
        fs::rename(&from, target.join(RUN_REPORT)).map_err(SinkError::io("publish", &from))?;
        sync(&schema_dir)?;
        // Dropping the staging folder removes what is left of it, then releases the lock.
        drop(staging);
        Ok((manifest, Committed { run_id: None, files, bytes, deleted: 0 }))
    }
}

/// The Arrow schema a part file was written with (etl's types and field metadata).
fn written_schema(path: &Path, table: &str) -> Result<Schema, SinkError> {
    let file = fs::File::open(path).map_err(SinkError::io("open", path))?;
    let reader = datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|source| SinkError::Part { table: table.to_owned(), path: path.display().to_string(), source })?;
    Ok(reader.schema().as_ref().clone())
}

/// One commit that creates the table at `dir`, or replaces every file of its current version
/// with `adds` (and its schema with `columns`). Returns the committed version.
fn commit_table(dir: &Path, table: &str, columns: StructType, adds: Vec<Action>) -> Result<u64, SinkError> {
    let path = dir.display().to_string();
    let fail = |source: DeltaTableError| {
        SinkError::from(DeltaError::Commit { table: table.to_owned(), path: path.clone(), source: Box::new(source) })
    };
    let builder = CreateBuilder::new()
        .with_location(path.clone())
        .with_table_name(table)
        .with_columns(columns.fields().cloned())
        .with_save_mode(SaveMode::Overwrite)
        .with_actions(adds);
    let committed = crate::store::io_runtime().block_on(async { builder.await }).map_err(fail)?;
    committed.version().ok_or_else(|| fail(DeltaTableError::Generic("the commit returned no version".into())))
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

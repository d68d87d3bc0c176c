//! Pass two: once every schema is known, each table's spilled rows are read back in
//! (file, sequence) order, built into Arrow batches and written through the sink as Parquet
//! parts, rolled at the target size. A row group is built and handed to parquet in batches of
//! [`WRITE_SLICE_ROWS`] rows, so memory holds its encoded pages and one batch of Arrow arrays.
//! Parts are written in parallel, largest first.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use tracing::info_span;

use super::pool;
use super::read::{ChunkRef, ReadResult};
use super::spill;
use super::{UnwindError, UnwindSettings};
use crate::normalize::naming::{self, REJECTS_TABLE, UNTYPED_TABLE};
use crate::normalize::{BatchBuilder, MappedTables, RejectsBuilder, Slot, TableId, rejects_schema};
use crate::schema::{Demoted, Renamed, TableSchema, Widening};
use crate::sink::manifest::{FileReport, TableReport};
use crate::sink::parquet::{WRITE_SLICE_ROWS, plan_parts};
use crate::sink::{PartSink, SinkError};
use crate::source::Plan;

/// What pass two wrote (also what a shard of a sharded run records for the commit).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Written {
    pub tables: Vec<TableReport>,
    pub schemas: Vec<TableSchema>,
    pub widenings: Vec<Widening>,
    pub demoted: Vec<Demoted>,
    pub renamed: Vec<Renamed>,
    /// `(entity, table)` for type values too long to name their table in full.
    pub shortened: Vec<(String, String)>,
}

impl Written {
    /// Rows written for items: every table's but `_rejects`' and child tables' (whose rows are
    /// exploded from their parents' items, not items of their own).
    pub fn item_rows(&self) -> u64 {
        self.tables.iter().filter(|t| t.name != REJECTS_TABLE && t.child_of.is_none()).map(|t| t.rows).sum()
    }
}

enum TableKind {
    Items(Box<TableSchema>),
    Rejects,
}

struct TableJob {
    id: TableId,
    name: String,
    entity: Option<String>,
    kind: TableKind,
    schema: SchemaRef,
    /// Part files, each a list of chunks in (file, seq) order.
    parts: Vec<Vec<ChunkRef>>,
}

/// The inferred tables' names: unique, and never one a mapping declares.
fn inferred_names(read: &ReadResult, mapped: Option<&MappedTables>) -> std::collections::BTreeMap<String, String> {
    let entities: BTreeSet<String> = read.shapes.keys().map(|k| k.to_string()).collect();
    let mut names = naming::assign(&entities);
    if let Some(m) = mapped {
        let taken: BTreeSet<&str> = m.tables.iter().map(|t| t.table.as_str()).collect();
        for name in names.values_mut() {
            if taken.contains(name.as_str()) {
                let mut n = 2;
                while taken.contains(format!("{name}_{n}").as_str()) {
                    n += 1;
                }
                *name = format!("{name}_{n}");
            }
        }
    }
    names
}

/// Runs pass two.
pub fn write_all(
    plan: &Plan,
    settings: &UnwindSettings,
    mapped: Option<&MappedTables>,
    sink: &dyn PartSink,
    read: &ReadResult,
) -> Result<Written, UnwindError> {
    let names = inferred_names(read, mapped);
    let mut widenings = Vec::new();
    let mut demoted = Vec::new();
    let mut renamed = Vec::new();
    let mut jobs: Vec<TableJob> = Vec::new();
    let mut by_table: HashMap<TableId, Vec<ChunkRef>> = HashMap::new();
    for c in &read.chunks {
        by_table.entry(c.table.clone()).or_default().push(c.clone());
    }
    let mut add_job = |name: String, entity: Option<String>, kind: TableKind, id: TableId| {
        let schema = match &kind {
            TableKind::Items(s) => Arc::new(s.arrow_schema()),
            TableKind::Rejects => rejects_schema(),
        };
        let mut chunks = by_table.remove(&id).unwrap_or_default();
        chunks.sort_by_key(|c| (c.file, c.seq));
        let sizes: Vec<u64> = chunks.iter().map(|c| c.logical).collect();
        let parts = plan_parts(&sizes, settings.target_file_bytes).into_iter().map(|r| chunks[r].to_vec()).collect();
        jobs.push(TableJob { id, name, entity, kind, schema, parts });
    };
    if let Some(m) = mapped {
        for (i, t) in m.tables.iter().enumerate() {
            add_job(
                t.table.clone(),
                t.entity.clone(),
                TableKind::Items(Box::new(t.clone())),
                TableId::Mapped(i as u32),
            );
        }
    }
    let mut shortened = Vec::new();
    for (entity, shape) in &read.shapes {
        let table = names.get(entity.as_ref()).cloned().unwrap_or_else(|| naming::snake_case(entity));
        if naming::is_shortened(entity) {
            shortened.push((entity.to_string(), table.clone()));
        }
        let inferred = shape.schema(&table, Some(entity), &mut widenings);
        demoted.extend(inferred.demoted);
        renamed.extend(inferred.renamed);
        let kind = TableKind::Items(Box::new(inferred.schema));
        add_job(table, Some(entity.to_string()), kind, TableId::Entity(entity.clone()));
    }
    if let Some(shape) = &read.untyped {
        let inferred = shape.schema(UNTYPED_TABLE, None, &mut widenings);
        demoted.extend(inferred.demoted);
        renamed.extend(inferred.renamed);
        add_job(UNTYPED_TABLE.to_owned(), None, TableKind::Items(Box::new(inferred.schema)), TableId::Untyped);
    }
    add_job(REJECTS_TABLE.to_owned(), None, TableKind::Rejects, TableId::Rejects);
    jobs.sort_by(|a, b| a.name.cmp(&b.name));

    let spills: Vec<File> = read
        .spills
        .iter()
        .map(|p| {
            File::open(p).map_err(|source| UnwindError::Io { action: "open", path: p.display().to_string(), source })
        })
        .collect::<Result<_, _>>()?;
    // Tasks are (job, part), taken largest first so the longest part starts early.
    let tasks: Vec<(usize, usize)> =
        jobs.iter().enumerate().flat_map(|(j, job)| (0..job.parts.len()).map(move |p| (j, p))).collect();
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    let task_bytes = |t: &(usize, usize)| jobs[t.0].parts[t.1].iter().map(|c| c.logical).sum::<u64>();
    order.sort_by_key(|&i| std::cmp::Reverse(task_bytes(&tasks[i])));
    let done = pool::run(
        settings.threads,
        order.len(),
        |_| Ok(Vec::new()),
        |done: &mut Vec<(usize, FileReport)>, k, stop| {
            stop.check::<UnwindError>()?;
            let ti = order[k];
            let (j, p) = tasks[ti];
            done.push((ti, write_part(&jobs[j], p, sink, &spills, read, settings, plan)?));
            Ok::<(), UnwindError>(())
        },
    )?;
    let mut reports: Vec<Option<FileReport>> = vec![None; tasks.len()];
    for (ti, rep) in done.into_iter().flatten() {
        reports[ti] = Some(rep);
    }
    let mut tables = Vec::new();
    let mut schemas = Vec::new();
    let mut reports = reports.into_iter();
    for job in jobs {
        let mut files = Vec::with_capacity(job.parts.len());
        for _ in &job.parts {
            files.push(reports.next().flatten().ok_or_else(|| UnwindError::Internal {
                message: format!("a part of table `{}` was not written", job.name),
            })?);
        }
        let child_of = mapped.and_then(|m| {
            let i = m.tables.iter().position(|t| t.table == job.name)?;
            m.child_of[i].clone()
        });
        tables.push(TableReport {
            name: job.name.clone(),
            entity: job.entity.clone(),
            child_of,
            rows: files.iter().map(|f| f.rows).sum(),
            columns: job.schema.fields().len(),
            files,
            delta_version: None,
            delta_merge: None,
        });
        if let TableKind::Items(s) = job.kind {
            schemas.push(*s);
        }
    }
    Ok(Written { tables, schemas, widenings, demoted, renamed, shortened })
}

fn write_part(
    job: &TableJob,
    part: usize,
    sink: &dyn PartSink,
    spills: &[File],
    read: &ReadResult,
    settings: &UnwindSettings,
    plan: &Plan,
) -> Result<FileReport, UnwindError> {
    let _span = info_span!("table", table = %job.name, part).entered();
    let mut writer = sink.part(&job.name, part, job.schema.clone())?;
    let mut items = match &job.kind {
        TableKind::Items(s) => Some(BatchBuilder::new(s)),
        TableKind::Rejects => None,
    };
    let mut rejects = RejectsBuilder::default();
    let mut batch_bytes = 0usize;
    let mut group_rows = 0usize;
    let mut buf = Vec::new();
    let damaged = |e: spill::SpillError| UnwindError::Internal { message: format!("table `{}`: {e}", job.name) };
    let arrow = |source: datafusion::arrow::error::ArrowError| SinkError::Parquet {
        table: job.name.clone(),
        source: source.into(),
    };
    for c in &job.parts[part] {
        buf.resize(c.len as usize, 0);
        let spill =
            spills.get(c.worker).ok_or_else(|| UnwindError::Internal { message: "missing spill file".into() })?;
        spill.read_exact_at(&mut buf, c.offset).map_err(|source| UnwindError::Io {
            action: "read the spill of",
            path: job.name.clone(),
            source,
        })?;
        let mut r = spill::Reader::new(&buf);
        // What the slots of this chunk's worker stand for, and where each goes in the table.
        let names: &[Box<str>] = read.slot_names.get(&(c.worker, job.id.clone())).map_or(&[], Vec::as_slice);
        let places: Vec<Slot> = match &items {
            Some(b) => names.iter().map(|n| b.slot_of(n)).collect(),
            None => Vec::new(),
        };
        while !r.at_end() {
            let (rows, logical) = match &mut items {
                Some(b) => {
                    let logical = match r.append_row(names, &places, b) {
                        Ok(logical) => logical,
                        Err(spill::RowError::Spill(e)) => return Err(damaged(e)),
                        Err(spill::RowError::Normalize(e)) => return Err(e.into()),
                    };
                    (b.rows(), logical)
                }
                None => {
                    let before = r.pos;
                    let row = r.reject().map_err(damaged)?;
                    let file = plan.files.get(row.file as usize).map(|f| f.display.as_str()).unwrap_or("?");
                    rejects.append(file, &row);
                    (rejects.rows(), r.pos - before)
                }
            };
            batch_bytes += logical;
            group_rows += 1;
            // The builders hold one write slice at most: parquet encodes each slice as it is
            // built, so memory holds a row group compressed, not a row group of Arrow arrays.
            // The slices fall where `write_sliced` would cut the whole row group, so the file
            // is the same.
            let full = settings.row_groups.is_full(group_rows, batch_bytes);
            if full || rows >= WRITE_SLICE_ROWS {
                let batch = match &mut items {
                    Some(b) => b.finish()?,
                    None => rejects.finish().map_err(arrow)?,
                };
                writer.write(&batch)?;
                if full {
                    writer.end_row_group()?;
                    batch_bytes = 0;
                    group_rows = 0;
                }
            }
        }
    }
    let batch = match &mut items {
        Some(b) => b.finish()?,
        None => rejects.finish().map_err(arrow)?,
    };
    writer.write(&batch)?;
    Ok(writer.close()?)
}

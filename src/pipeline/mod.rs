//! Wiring the stages of `etl unwind` together.
//!
//! Two passes, both parallel and both bounded in memory:
//!
//! 1. **Read**: worker threads take data files in manifest order (one file per worker at a
//!    time), decompress, split lines, decode, route each item to its entity by the type
//!    attribute, fold it into that entity's inferred [`EntityShape`] and append it to a compact
//!    spill chunk ([`spill`]). Rejects are spilled the same way. Chunks are cut per
//!    (file, entity) at a fixed size, so their contents never depend on scheduling.
//! 2. **Write**: once every schema is known, each table's chunks are read back in
//!    (file, line) order and turned into Parquet part files, rolled at a target size, with one
//!    row group per bounded batch. Parts are written in parallel.
//!
//! Output is byte-identical whatever `--threads` is: row order is file order then line order,
//! shapes merge associatively, and part and row-group boundaries depend only on the data.
//! Everything is staged and published atomically by [`crate::sink::staging`].

pub mod each;
pub mod spill;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::errors::ParquetError;
use flate2::read::MultiGzDecoder;
use tracing::{info, info_span};

use crate::aws::AwsOptions;
use crate::aws::s3::S3Url;
use crate::decode::json::{decode_export_line, decode_item_object};
use crate::decode::scan::{ScanError, parse_scan_output};
use crate::decode::{DecodeError, Item, RejectReason, Value};
use crate::mapping::TableSchema;
use crate::mapping::apply;
use crate::mapping::infer::{EntityShape, Widening};
use crate::mapping::{Mapping, UnmatchedPolicy};
use crate::normalize::naming::{self, REJECTS_TABLE, UNTYPED_TABLE};
use crate::normalize::{BatchBuilder, NormalizeError, RejectsBuilder, rejects_schema};
use crate::sink::report::{EntityReport, MappingReport};
use crate::sink::report::{FileReport, InputReport, Reconciliation, ReportOptions, RunReport, TableReport, Timings};
use crate::sink::s3::PublishError;
use crate::sink::staging::{Staging, StagingError};
use crate::source::lines::{Line, LineReader};
use crate::source::{self, CheckStatus, DataFile, Layout, Location, Plan, SideFileCheck, SourceError};
use spill::RejectRow;

/// Settings of one `etl unwind` run.
#[derive(Debug, Clone)]
pub struct UnwindOptions {
    pub sources: Vec<String>,
    pub out: PathBuf,
    pub type_attribute: String,
    pub threads: usize,
    pub strict: bool,
    pub max_rejects: Option<u64>,
    pub overwrite: bool,
    pub max_line_bytes: usize,
    pub row_group_rows: usize,
    pub row_group_bytes: usize,
    pub target_file_bytes: u64,
    /// Where to publish the finished output when `--out` is an `s3://` URL; `out` is then a
    /// local scratch folder.
    pub publish_to: Option<S3Url>,
    /// Region, profile, endpoint for `s3://` and `dynamodb://`.
    pub aws: AwsOptions,
    /// Declared tables (`--mapping`); without one, every schema is inferred.
    pub mapping: Option<Arc<Mapping>>,
    /// How `dynamodb://TABLE` sources are scanned.
    pub scan: ScanSettings,
}

/// Live-scan settings for `dynamodb://TABLE` sources.
#[derive(Debug, Clone)]
pub struct ScanSettings {
    pub segments: u32,
    pub consistent_read: bool,
    pub max_rcu_per_second: Option<f64>,
}

impl Default for ScanSettings {
    fn default() -> Self {
        ScanSettings { segments: 1, consistent_read: false, max_rcu_per_second: None }
    }
}

impl UnwindOptions {
    pub fn new(sources: Vec<String>, out: PathBuf) -> Self {
        UnwindOptions {
            sources,
            out,
            type_attribute: "Type".into(),
            threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2),
            strict: false,
            max_rejects: None,
            overwrite: false,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            row_group_rows: DEFAULT_ROW_GROUP_ROWS,
            row_group_bytes: DEFAULT_ROW_GROUP_BYTES,
            target_file_bytes: DEFAULT_TARGET_FILE_BYTES,
            publish_to: None,
            aws: AwsOptions::default(),
            mapping: None,
            scan: ScanSettings::default(),
        }
    }

    /// Sets the output target: a local folder, or `s3://bucket/prefix` (staged in a scratch
    /// folder under the system temp dir, removed when the run ends).
    pub fn set_out(&mut self, out: &str) -> Result<(), SourceError> {
        match S3Url::parse(out) {
            None => {
                self.out = PathBuf::from(out);
                self.publish_to = None;
            }
            Some(Err(message)) => return Err(SourceError::BadUrl { url: out.to_owned(), message }),
            Some(Ok(url)) => {
                self.out = scratch_out_dir();
                self.publish_to = Some(url);
            }
        }
        Ok(())
    }
}

const SCRATCH_PREFIX: &str = "etl-s3-out-";

/// A fresh scratch folder for output bound for S3; removes those of dead processes.
fn scratch_out_dir() -> PathBuf {
    let tmp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid =
                name.strip_prefix(SCRATCH_PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && pid != std::process::id()
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    tmp.join(format!("{SCRATCH_PREFIX}{}-{nanos}", std::process::id())).join("out")
}

/// Removes the scratch folder of an S3-bound run when the run ends, however it ends.
struct ScratchGuard(Option<PathBuf>);

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take().and_then(|out| out.parent().map(Path::to_owned)) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Lines longer than this are rejected unread (a 400 KB item is at most a few MB of JSON).
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;
pub const DEFAULT_ROW_GROUP_ROWS: usize = 128 * 1024;
/// A row group is also cut after this many bytes of item data, bounding memory.
pub const DEFAULT_ROW_GROUP_BYTES: usize = 64 * 1024 * 1024;
/// Part files roll after this many bytes of item data.
pub const DEFAULT_TARGET_FILE_BYTES: u64 = 512 * 1024 * 1024;
/// Spill chunks are cut at this size.
const CHUNK_BYTES: usize = 1024 * 1024;

/// Live counters for progress display; the pipeline only ever adds to them.
#[derive(Debug, Default)]
pub struct Progress {
    pub total_bytes: AtomicU64,
    pub bytes: Arc<AtomicU64>,
    pub items: AtomicU64,
    pub rejects: AtomicU64,
    /// 0 resolving, 1 reading, 2 writing, 3 committing, 4 done.
    pub phase: AtomicU8,
}

pub const PHASE_READ: u8 = 1;
pub const PHASE_WRITE: u8 = 2;
pub const PHASE_COMMIT: u8 = 3;
pub const PHASE_DONE: u8 = 4;

/// What a committed run produced.
#[derive(Debug, Clone)]
pub struct UnwindSummary {
    pub report: RunReport,
    pub schemas: Vec<TableSchema>,
    /// Set when the output was committed but broke `--max-rejects`.
    pub too_many_rejects: Option<(u64, u64)>,
    /// The S3 run, when the output went to S3.
    pub published: Option<crate::sink::s3::Published>,
}

/// Why a run failed. Nothing was published when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Staging(#[from] StagingError),
    #[error(transparent)]
    Publish(#[from] PublishError),
    #[error(transparent)]
    Dynamo(#[from] crate::aws::dynamodb::DynamoError),
    #[error("`{file}`: {source}")]
    Scan { file: String, source: ScanError },
    #[error("`{file}` line {line}: scan output is not valid UTF-8")]
    ScanUtf8 { file: String, line: u64 },
    #[error("cannot {action} `{path}`: {source}")]
    Io { action: &'static str, path: String, source: std::io::Error },
    #[error("strict mode: {message}")]
    Strict { message: String },
    #[error("writing table `{table}`: {source}")]
    Parquet { table: String, source: ParquetError },
    #[error(transparent)]
    Normalize(#[from] NormalizeError),
    #[error("internal error: {message}")]
    Internal { message: String },
}

impl UnwindError {
    pub fn hint(&self) -> Option<String> {
        match self {
            UnwindError::Source(e) => e.hint(),
            UnwindError::Staging(e) => e.hint().map(str::to_owned),
            UnwindError::Publish(e) => e.hint(),
            UnwindError::Dynamo(e) => e.hint(),
            UnwindError::Scan { source, .. } => source.hint().map(str::to_owned),
            UnwindError::Strict { .. } => {
                Some("run without `--strict` to write rejects to the `_rejects` table and keep going".into())
            }
            UnwindError::Internal { .. } | UnwindError::Normalize(_) => {
                Some("this is a bug in etl; please report it with the run's input if you can".into())
            }
            _ => None,
        }
    }

    /// Policy failures (the data broke a rule the user asked for) exit with 1, others with 2.
    pub fn is_policy(&self) -> bool {
        matches!(self, UnwindError::Strict { .. })
    }
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> UnwindError + 'a {
    move |source| UnwindError::Io { action, path: path.display().to_string(), source }
}

/// Runs `etl unwind`: resolve, read, write, report, commit.
pub fn unwind(opts: &UnwindOptions, progress: &Progress) -> Result<UnwindSummary, UnwindError> {
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let _scratch = ScratchGuard(opts.publish_to.as_ref().map(|_| opts.out.clone()));
    let staging = Staging::create(&opts.out, opts.overwrite)?;
    let plan = resolve_sources(opts, staging.path())?;
    let mut warnings = Vec::new();
    check_exports(&plan, opts.strict, &mut warnings)?;
    progress.total_bytes.store(plan.total_bytes(), Ordering::Relaxed);
    let t_resolve = started.elapsed();

    let tmp = staging.path().join("_etl").join("tmp");
    std::fs::create_dir_all(&tmp).map_err(io_err("create", &tmp))?;

    progress.phase.store(PHASE_READ, Ordering::Relaxed);
    let t_read = Instant::now();
    let mapped_tables = opts.mapping.as_deref().map(MappedTables::new);
    let mapped = opts.mapping.as_deref().zip(mapped_tables.as_ref());
    let read = read_all(&plan, opts, mapped, &tmp, progress)?;
    let t_read = t_read.elapsed();

    progress.phase.store(PHASE_WRITE, Ordering::Relaxed);
    let t_write = Instant::now();
    let written = write_all(&plan, opts, mapped_tables.as_ref(), staging.path(), &read)?;
    let t_write = t_write.elapsed();
    std::fs::remove_dir_all(&tmp).map_err(io_err("remove", &tmp))?;
    let spool = staging.path().join(SCAN_SPOOL);
    if spool.exists() {
        std::fs::remove_dir_all(&spool).map_err(io_err("remove", &spool))?;
    }

    // Inputs and reconciliation.
    let mut inputs = Vec::with_capacity(plan.files.len());
    for (f, st) in plan.files.iter().zip(&read.files) {
        let item_count_check = match &f.expected {
            Some(e) if e.item_count == st.items => CheckStatus::Verified,
            Some(_) => CheckStatus::Mismatch,
            None => CheckStatus::NotListed,
        };
        let md5_check = match (&f.expected, &st.md5) {
            (Some(e), Some(a)) if e.md5_base64 == *a => CheckStatus::Verified,
            (Some(_), _) => CheckStatus::Mismatch,
            (None, _) => CheckStatus::NotListed,
        };
        if let Some(e) = &f.expected {
            if item_count_check == CheckStatus::Mismatch {
                warnings.push(format!("`{}`: manifest says {} items, read {}", f.display, e.item_count, st.items));
            }
            if md5_check == CheckStatus::Mismatch {
                warnings.push(format!(
                    "`{}`: MD5 of the compressed bytes is {}, the manifest says {}",
                    f.display,
                    st.md5.as_deref().unwrap_or("?"),
                    e.md5_base64
                ));
            }
        }
        inputs.push(InputReport {
            file: f.display.clone(),
            layout: match f.layout {
                Layout::ExportLines => "export_lines".into(),
                Layout::ScanOutput => "scan_output".into(),
            },
            gzip: f.gzip,
            bytes: st.bytes,
            lines: st.lines,
            items: st.items,
            rejects: st.rejects,
            expected_items: f.expected.as_ref().map(|e| e.item_count),
            item_count_check,
            md5_expected: f.expected.as_ref().map(|e| e.md5_base64.clone()),
            md5_actual: st.md5.clone(),
            md5_check,
        });
    }
    warnings.extend(read.warnings.iter().cloned());
    let items_read: u64 = read.files.iter().map(|s| s.items).sum();
    let rejects: u64 = read.reject_counts.values().sum();
    // Child tables hold rows exploded from their parents' items: not items of their own.
    let rows_written: u64 =
        written.tables.iter().filter(|t| t.name != REJECTS_TABLE && t.child_of.is_none()).map(|t| t.rows).sum();
    let rejects_rows: u64 = written.tables.iter().filter(|t| t.name == REJECTS_TABLE).map(|t| t.rows).sum();
    let manifest_item_count = if !plan.files.is_empty() && plan.files.iter().all(|f| f.expected.is_some()) {
        Some(plan.files.iter().filter_map(|f| f.expected.as_ref()).map(|e| e.item_count).sum())
    } else {
        None
    };
    let reconciliation = Reconciliation {
        items_read,
        rows_written,
        rejects,
        balanced: items_read == rows_written + rejects && rejects == rejects_rows,
        manifest_item_count,
        matches_manifest: manifest_item_count.map(|m| m == items_read),
        untyped_items: read.untyped_items,
    };
    if !reconciliation.balanced {
        return Err(UnwindError::Internal {
            message: format!(
                "items do not reconcile: read {items_read}, wrote {rows_written} rows and {rejects_rows} rejects (counted {rejects})"
            ),
        });
    }

    progress.phase.store(PHASE_COMMIT, Ordering::Relaxed);
    let report = RunReport {
        etl_version: env!("CARGO_PKG_VERSION").to_owned(),
        started_at,
        finished_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        options: ReportOptions {
            type_attribute: opts.type_attribute.clone(),
            threads: opts.threads,
            strict: opts.strict,
            max_rejects: opts.max_rejects,
            max_line_bytes: opts.max_line_bytes,
        },
        inputs,
        exports: plan.exports.clone(),
        reconciliation,
        tables: written.tables,
        rejects_by_reason: read.reject_counts.iter().map(|(r, n)| (r.code().to_owned(), *n)).collect(),
        widenings: written.widenings,
        mapping: opts
            .mapping
            .as_deref()
            .zip(mapped_tables.as_ref())
            .map(|(m, t)| mapping_report(m, t, &read.entity_stats)),
        warnings,
        timings_ms: Timings {
            resolve: t_resolve.as_millis() as u64,
            read_and_decode: t_read.as_millis() as u64,
            write: t_write.as_millis() as u64,
            total: started.elapsed().as_millis() as u64,
        },
    };
    crate::sink::report::write_reports(staging.path(), &report, &written.schemas)
        .map_err(io_err("write the run report in", staging.path()))?;
    staging.commit()?;
    let published = match &opts.publish_to {
        Some(url) => {
            let p = crate::sink::s3::publish(&opts.out, url, &opts.aws, opts.overwrite)?;
            tracing::info!(run_id = %p.run_id, files = p.files, bytes = p.bytes, deleted = p.deleted, "published to S3");
            Some(p)
        }
        None => None,
    };
    progress.phase.store(PHASE_DONE, Ordering::Relaxed);
    let too_many_rejects = opts.max_rejects.filter(|&max| rejects > max).map(|max| (rejects, max));
    Ok(UnwindSummary { report, schemas: written.schemas, too_many_rejects, published })
}

fn mapping_report(m: &Mapping, tables: &MappedTables, stats: &[EntityStats]) -> MappingReport {
    MappingReport {
        files: m.files.iter().map(|f| f.display().to_string()).collect(),
        type_attribute: m.type_attribute.clone(),
        entities: m
            .entities
            .iter()
            .zip(stats)
            .zip(&tables.entity_table)
            .map(|((e, st), (_, children))| EntityReport {
                entity: e.name.clone(),
                table: e.table.clone(),
                items: st.items,
                rows: st.rows,
                rejected: st.rejected,
                key_template_failures: st.failures.get("key_template").copied().unwrap_or(0),
                key_conflicts: st.failures.get("key_conflict").copied().unwrap_or(0),
                coercion_failures: st.failures.get("coercion").copied().unwrap_or(0),
                required_missing: st.failures.get("required").copied().unwrap_or(0),
                nulled_values: st.nulled,
                unmapped_attributes: st.unmapped.clone(),
                child_tables: children.iter().map(|&c| tables.tables[c as usize].table.clone()).collect(),
                child_rows: st.child_rows,
            })
            .collect(),
    }
}

/// Where live scans are spooled inside the staging folder (removed before publishing).
const SCAN_SPOOL: &str = "_etl/scan";

/// Resolves every source in order: `dynamodb://TABLE` is scanned into spool files first, the
/// rest are found by [`source::resolve`].
fn resolve_sources(opts: &UnwindOptions, staging: &Path) -> Result<Plan, UnwindError> {
    let mut plan = Plan::default();
    for (n, src) in opts.sources.iter().enumerate() {
        let Some(table) = src.strip_prefix("dynamodb://") else {
            let p = source::resolve(std::slice::from_ref(src), &opts.aws)?;
            plan.files.extend(p.files);
            plan.exports.extend(p.exports);
            continue;
        };
        let table = table.trim_end_matches('/');
        if table.is_empty() {
            return Err(SourceError::BadUrl { url: src.clone(), message: "names no table".into() }.into());
        }
        let dir = staging.join(SCAN_SPOOL).join(n.to_string());
        std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        let _span = info_span!("scan", table).entered();
        let scan = crate::aws::dynamodb::ScanOptions {
            table: table.to_owned(),
            segments: opts.scan.segments.max(1),
            consistent_read: opts.scan.consistent_read,
            max_rcu_per_second: opts.scan.max_rcu_per_second,
            page_size: None,
        };
        let files = crate::aws::s3::io_runtime().block_on(async {
            let sdk = opts.aws.sdk_config().await;
            let client = crate::aws::dynamodb::client(&sdk);
            crate::aws::dynamodb::scan_to_files(&client, &scan, &dir, |_| {})
                .await
                .map_err(|e| e.with_endpoint(crate::aws::dynamodb::endpoint_label(&sdk)))
        })?;
        for f in files {
            let size = std::fs::metadata(&f.path).map_err(io_err("read", &f.path))?.len();
            info!(segment = f.segment, items = f.items, pages = f.pages, rcu = f.consumed_rcu, "segment scanned");
            plan.files.push(DataFile {
                location: Location::Path(f.path),
                display: format!("dynamodb://{table}#segment-{:06}", f.segment),
                gzip: false,
                layout: Layout::ExportLines,
                size,
                expected: None,
            });
        }
    }
    Ok(plan)
}

/// Verifies what manifests say about themselves before any data is read.
fn check_exports(plan: &Plan, strict: bool, warnings: &mut Vec<String>) -> Result<(), UnwindError> {
    let mut problems = Vec::new();
    for e in &plan.exports {
        for check in [&e.summary_checksum, &e.files_checksum] {
            if let SideFileCheck::Mismatch { file, expected, actual } = check {
                problems.push(format!("`{}/{file}` says {expected} but the manifest's MD5 is {actual}", e.export_dir));
            }
        }
        if e.summary_item_count != e.manifest_files_item_count {
            problems.push(format!(
                "export `{}`: `manifest-summary.json` says {} items, `manifest-files.json` lists {}",
                e.export_dir, e.summary_item_count, e.manifest_files_item_count
            ));
        }
    }
    if strict && let Some(first) = problems.first() {
        return Err(UnwindError::Strict { message: first.clone() });
    }
    warnings.extend(problems);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Pass one: read, decode, route, infer, spill.

/// Where a spilled row goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Dest {
    /// A mapped table, by index into [`MappedTables::tables`].
    Mapped(u32),
    Entity(Arc<str>),
    Untyped,
    Rejects,
}

/// A run of spilled rows of one destination from one input file.
#[derive(Debug, Clone)]
struct ChunkRef {
    dest: Dest,
    file: u32,
    seq: u32,
    worker: usize,
    offset: u64,
    len: u64,
}

#[derive(Default)]
struct ChunkBuf {
    bytes: Vec<u8>,
    seq: u32,
}

#[derive(Debug, Clone, Default)]
struct FileStats {
    bytes: u64,
    lines: u64,
    items: u64,
    rejects: u64,
    md5: Option<String>,
}

struct ReadResult {
    /// Per mapping entity, in mapping order.
    entity_stats: Vec<EntityStats>,
    files: Vec<FileStats>,
    shapes: BTreeMap<Arc<str>, EntityShape>,
    untyped: Option<EntityShape>,
    untyped_items: u64,
    chunks: Vec<ChunkRef>,
    spills: Vec<PathBuf>,
    reject_counts: BTreeMap<RejectReason, u64>,
    warnings: Vec<String>,
}

/// The tables a mapping declares: each entity's table, then its child tables.
struct MappedTables {
    tables: Vec<TableSchema>,
    /// Per table: the parent table's name for child tables.
    child_of: Vec<Option<String>>,
    /// Per entity: its table's index, and its children's indexes.
    entity_table: Vec<(u32, Vec<u32>)>,
}

impl MappedTables {
    fn new(m: &Mapping) -> MappedTables {
        let mut out = MappedTables { tables: Vec::new(), child_of: Vec::new(), entity_table: Vec::new() };
        for e in &m.entities {
            let t = out.tables.len() as u32;
            out.tables.push(apply::entity_schema(e));
            out.child_of.push(None);
            let mut children = Vec::new();
            for c in &e.children {
                children.push(out.tables.len() as u32);
                out.tables.push(apply::child_schema(e, c));
                out.child_of.push(Some(e.table.clone()));
            }
            out.entity_table.push((t, children));
        }
        out
    }
}

/// What a mapping entity saw, for the run report.
#[derive(Debug, Clone, Default)]
struct EntityStats {
    items: u64,
    rows: u64,
    rejected: u64,
    failures: BTreeMap<&'static str, u64>,
    nulled: u64,
    unmapped: BTreeMap<String, u64>,
    child_rows: u64,
}

impl EntityStats {
    fn merge(&mut self, o: &EntityStats) {
        self.items += o.items;
        self.rows += o.rows;
        self.rejected += o.rejected;
        self.nulled += o.nulled;
        self.child_rows += o.child_rows;
        for (k, n) in &o.failures {
            *self.failures.entry(k).or_default() += n;
        }
        for (k, n) in &o.unmapped {
            *self.unmapped.entry(k.clone()).or_default() += n;
        }
    }
}

fn failure_label(k: apply::FailureKind) -> &'static str {
    match k {
        apply::FailureKind::KeyTemplate => "key_template",
        apply::FailureKind::KeyConflict => "key_conflict",
        apply::FailureKind::Coercion => "coercion",
        apply::FailureKind::Required => "required",
        apply::FailureKind::Unmapped => "unmapped_attribute",
    }
}

/// One worker's state: its spill file, the shapes it inferred, its finished chunks.
struct Router<'a> {
    worker: usize,
    opts: &'a UnwindOptions,
    mapped: Option<(&'a Mapping, &'a MappedTables)>,
    mapped_bufs: BTreeMap<u32, ChunkBuf>,
    entity_stats: Vec<EntityStats>,
    spill: BufWriter<File>,
    spill_path: PathBuf,
    spill_pos: u64,
    shapes: HashMap<Arc<str>, EntityShape>,
    untyped: EntityShape,
    chunks: Vec<ChunkRef>,
    reject_counts: BTreeMap<RejectReason, u64>,
    // Per current file:
    file: u32,
    file_display: String,
    bufs: HashMap<Arc<str>, ChunkBuf>,
    untyped_buf: ChunkBuf,
    rejects_buf: ChunkBuf,
    stats: FileStats,
    warnings: Vec<String>,
}

impl<'a> Router<'a> {
    fn new(
        worker: usize,
        opts: &'a UnwindOptions,
        mapped: Option<(&'a Mapping, &'a MappedTables)>,
        tmp: &Path,
    ) -> Result<Self, UnwindError> {
        let spill_path = tmp.join(format!("spill-{worker}.bin"));
        let f = File::create(&spill_path).map_err(io_err("create", &spill_path))?;
        Ok(Router {
            worker,
            opts,
            mapped,
            mapped_bufs: BTreeMap::new(),
            entity_stats: mapped.map(|(m, _)| vec![EntityStats::default(); m.entities.len()]).unwrap_or_default(),
            spill: BufWriter::with_capacity(1 << 20, f),
            spill_path,
            spill_pos: 0,
            shapes: HashMap::new(),
            untyped: EntityShape::default(),
            chunks: Vec::new(),
            reject_counts: BTreeMap::new(),
            file: 0,
            file_display: String::new(),
            bufs: HashMap::new(),
            untyped_buf: ChunkBuf::default(),
            rejects_buf: ChunkBuf::default(),
            stats: FileStats::default(),
            warnings: Vec::new(),
        })
    }

    fn start_file(&mut self, file: u32, display: &str) {
        self.file = file;
        self.file_display = display.to_owned();
        self.stats = FileStats::default();
    }

    fn write_chunk(&mut self, dest: Dest, buf: &mut ChunkBuf) -> Result<(), UnwindError> {
        if buf.bytes.is_empty() {
            return Ok(());
        }
        self.spill.write_all(&buf.bytes).map_err(io_err("write", &self.spill_path))?;
        self.chunks.push(ChunkRef {
            dest,
            file: self.file,
            seq: buf.seq,
            worker: self.worker,
            offset: self.spill_pos,
            len: buf.bytes.len() as u64,
        });
        self.spill_pos += buf.bytes.len() as u64;
        buf.bytes.clear();
        buf.seq += 1;
        Ok(())
    }

    fn spill_mapped(&mut self, table: u32, row: &Item<'_>) -> Result<(), UnwindError> {
        let buf = self.mapped_bufs.entry(table).or_default();
        spill::encode_item(row, &mut buf.bytes);
        if buf.bytes.len() >= CHUNK_BYTES {
            let mut b = std::mem::take(buf);
            self.write_chunk(Dest::Mapped(table), &mut b)?;
            self.mapped_bufs.insert(table, b);
        }
        Ok(())
    }

    /// Routes an item through the mapping; `false` when no entity takes it (then it is
    /// inferred as without a mapping).
    fn mapped_item(&mut self, item: &Item<'_>, line: u64, offset: u64, raw: &[u8]) -> Result<bool, UnwindError> {
        let Some((mapping, tables)) = self.mapped else { return Ok(false) };
        let ei = match apply::route(mapping, item) {
            apply::Route::Entity(i) => i,
            apply::Route::Unmatched(t) if mapping.unmatched == UnmatchedPolicy::Reject => {
                let message = format!(
                    "no entity of the mapping matches `{}` = `{t}` (`unmatched = \"reject\"`)",
                    mapping.type_attribute
                );
                self.reject(RejectRow {
                    file: self.file,
                    line,
                    offset,
                    reason: RejectReason::UnmatchedEntity,
                    attribute: &mapping.type_attribute,
                    message: &message,
                    raw,
                    truncated: false,
                })?;
                return Ok(true);
            }
            apply::Route::Unmatched(_) | apply::Route::NoType => return Ok(false),
        };
        let e = &mapping.entities[ei];
        self.entity_stats[ei].items += 1;
        match apply::apply(e, item, &mapping.type_attribute) {
            Ok(applied) => {
                let (table, children) = &tables.entity_table[ei];
                self.spill_mapped(*table, &applied.row)?;
                for (ci, row) in &applied.children {
                    self.spill_mapped(children[*ci], row)?;
                }
                let st = &mut self.entity_stats[ei];
                st.rows += 1;
                st.child_rows += applied.children.len() as u64;
                st.nulled += applied.nulled.len() as u64;
                for f in &applied.nulled {
                    *st.failures.entry(failure_label(f.kind)).or_default() += 1;
                }
                for a in applied.unmapped {
                    *st.unmapped.entry(a).or_default() += 1;
                }
            }
            Err(f) => {
                let st = &mut self.entity_stats[ei];
                st.rejected += 1;
                *st.failures.entry(failure_label(f.kind)).or_default() += 1;
                self.reject(RejectRow {
                    file: self.file,
                    line,
                    offset,
                    reason: f.kind.reason(),
                    attribute: &f.attribute,
                    message: &f.message,
                    raw,
                    truncated: false,
                })?;
            }
        }
        Ok(true)
    }

    fn item(&mut self, item: &Item<'_>, line: u64, offset: u64, raw: &[u8]) -> Result<(), UnwindError> {
        if self.mapped_item(item, line, offset, raw)? {
            return Ok(());
        }
        let entity = item.iter().find(|(k, _)| *k == self.opts.type_attribute.as_str()).and_then(|(_, v)| match v {
            Value::S(s) => Some(s.as_ref()),
            _ => None,
        });
        match entity {
            Some(name) => {
                let key: Arc<str> = match self.shapes.get_key_value(name) {
                    Some((k, _)) => k.clone(),
                    None => {
                        let k: Arc<str> = name.into();
                        self.shapes.insert(k.clone(), EntityShape::default());
                        k
                    }
                };
                if let Some(shape) = self.shapes.get_mut(&key) {
                    shape.observe(item, self.file, line);
                }
                let buf = self.bufs.entry(key.clone()).or_default();
                spill::encode_item(item, &mut buf.bytes);
                if buf.bytes.len() >= CHUNK_BYTES {
                    let mut b = std::mem::take(buf);
                    self.write_chunk(Dest::Entity(key.clone()), &mut b)?;
                    self.bufs.insert(key, b);
                }
            }
            None => {
                self.untyped.observe(item, self.file, line);
                spill::encode_item(item, &mut self.untyped_buf.bytes);
                if self.untyped_buf.bytes.len() >= CHUNK_BYTES {
                    let mut b = std::mem::take(&mut self.untyped_buf);
                    self.write_chunk(Dest::Untyped, &mut b)?;
                    self.untyped_buf = b;
                }
            }
        }
        Ok(())
    }

    fn reject(&mut self, row: RejectRow<'_>) -> Result<(), UnwindError> {
        if self.opts.strict {
            let at = if row.attribute.is_empty() { String::new() } else { format!(" (attribute `{}`)", row.attribute) };
            return Err(UnwindError::Strict {
                message: format!("`{}` line {}{at}: {} [{}]", self.file_display, row.line, row.message, row.reason),
            });
        }
        *self.reject_counts.entry(row.reason).or_default() += 1;
        self.stats.rejects += 1;
        spill::encode_reject(&row, &mut self.rejects_buf.bytes);
        if self.rejects_buf.bytes.len() >= CHUNK_BYTES {
            let mut b = std::mem::take(&mut self.rejects_buf);
            self.write_chunk(Dest::Rejects, &mut b)?;
            self.rejects_buf = b;
        }
        Ok(())
    }

    fn decode_error(&mut self, e: &DecodeError, line: u64, offset: u64, raw: &[u8]) -> Result<(), UnwindError> {
        self.reject(RejectRow {
            file: self.file,
            line,
            offset: offset + e.offset as u64,
            reason: e.reason,
            attribute: &e.attribute,
            message: &e.message,
            raw,
            truncated: false,
        })
    }

    /// Flushes this file's chunks and returns its statistics.
    fn end_file(&mut self) -> Result<FileStats, UnwindError> {
        for (t, mut b) in std::mem::take(&mut self.mapped_bufs) {
            self.write_chunk(Dest::Mapped(t), &mut b)?;
        }
        let mut keys: Vec<Arc<str>> = self.bufs.keys().cloned().collect();
        keys.sort();
        for k in keys {
            if let Some(mut b) = self.bufs.remove(&k) {
                self.write_chunk(Dest::Entity(k), &mut b)?;
            }
        }
        let mut b = std::mem::take(&mut self.untyped_buf);
        self.write_chunk(Dest::Untyped, &mut b)?;
        let mut b = std::mem::take(&mut self.rejects_buf);
        self.write_chunk(Dest::Rejects, &mut b)?;
        Ok(std::mem::take(&mut self.stats))
    }
}

fn read_all(
    plan: &Plan,
    opts: &UnwindOptions,
    mapped: Option<(&Mapping, &MappedTables)>,
    tmp: &Path,
    progress: &Progress,
) -> Result<ReadResult, UnwindError> {
    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let workers = opts.threads.max(1).min(plan.files.len().max(1));
    let results: Vec<Result<(Router<'_>, Vec<(usize, FileStats)>), UnwindError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (next, abort) = (&next, &abort);
                s.spawn(move || {
                    let r = read_worker(w, plan, opts, mapped, tmp, progress, next, abort);
                    if r.is_err() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| Err(UnwindError::Internal { message: "a reader thread panicked".into() }))
            })
            .collect()
    });
    let mut files = vec![FileStats::default(); plan.files.len()];
    let mut shapes: BTreeMap<Arc<str>, EntityShape> = BTreeMap::new();
    let mut untyped = EntityShape::default();
    let mut chunks = Vec::new();
    let mut spills = Vec::new();
    let mut reject_counts = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut first_error = None;
    let mut entity_stats = vec![EntityStats::default(); mapped.map(|(m, _)| m.entities.len()).unwrap_or(0)];
    for r in results {
        match r {
            Ok((router, stats)) => {
                for (total, s) in entity_stats.iter_mut().zip(&router.entity_stats) {
                    total.merge(s);
                }
                for (i, st) in stats {
                    files[i] = st;
                }
                for (k, s) in router.shapes {
                    shapes.entry(k).or_default().merge(&s);
                }
                untyped.merge(&router.untyped);
                chunks.extend(router.chunks);
                spills.push(router.spill_path);
                for (k, n) in router.reject_counts {
                    *reject_counts.entry(k).or_default() += n;
                }
                warnings.extend(router.warnings);
            }
            // Prefer the error that caused the abort over workers that merely stopped.
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some(e);
                }
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    warnings.sort();
    let untyped_items = untyped.items;
    Ok(ReadResult {
        entity_stats,
        files,
        shapes,
        untyped: (untyped.items > 0).then_some(untyped),
        untyped_items,
        chunks,
        spills,
        reject_counts,
        warnings,
    })
}

#[allow(clippy::too_many_arguments)]
fn read_worker<'a>(
    worker: usize,
    plan: &Plan,
    opts: &'a UnwindOptions,
    mapped: Option<(&'a Mapping, &'a MappedTables)>,
    tmp: &Path,
    progress: &Progress,
    next: &AtomicUsize,
    abort: &AtomicBool,
) -> Result<(Router<'a>, Vec<(usize, FileStats)>), UnwindError> {
    let mut router = Router::new(worker, opts, mapped, tmp)?;
    let mut done = Vec::new();
    loop {
        if abort.load(Ordering::Relaxed) {
            return Err(UnwindError::Internal { message: "stopped after another reader failed".into() });
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(f) = plan.files.get(i) else { break };
        let _span = info_span!("file", path = %f.display).entered();
        router.start_file(i as u32, &f.display);
        let md5 = match f.layout {
            Layout::ExportLines => read_export_file(f, &mut router, progress, abort)?,
            Layout::ScanOutput => read_scan_file(f, &mut router, progress)?,
        };
        let mut stats = router.end_file()?;
        stats.md5 = md5;
        if opts.strict
            && let Some(e) = &f.expected
        {
            if e.item_count != stats.items {
                return Err(UnwindError::Strict {
                    message: format!("`{}`: manifest says {} items, read {}", f.display, e.item_count, stats.items),
                });
            }
            if stats.md5.as_deref() != Some(e.md5_base64.as_str()) {
                return Err(UnwindError::Strict {
                    message: format!("`{}`: MD5 of the compressed bytes does not match the manifest", f.display),
                });
            }
        }
        info!(items = stats.items, rejects = stats.rejects, "file read");
        done.push((i, stats));
    }
    router.spill.flush().map_err(io_err("write", &router.spill_path))?;
    Ok((router, done))
}

/// Reads one JSON-lines data file; returns the base64 MD5 of its (compressed) bytes.
fn read_export_file(
    f: &DataFile,
    router: &mut Router<'_>,
    progress: &Progress,
    abort: &AtomicBool,
) -> Result<Option<String>, UnwindError> {
    if f.location == Location::Stdin {
        return Err(UnwindError::Internal { message: "export lines from stdin".into() });
    }
    let path = Path::new(&f.display);
    let file = source::open(f).map_err(io_err("open", path))?;
    let hashing = source::lines::HashingReader::new(file, progress.bytes.clone());
    let cap = router.opts.max_line_bytes;
    let hashing = if f.gzip {
        let mut br = BufReader::with_capacity(256 * 1024, MultiGzDecoder::new(hashing));
        read_lines(&mut br, cap, router, progress, abort)?;
        br.into_inner().into_inner()
    } else {
        let mut br = BufReader::with_capacity(256 * 1024, hashing);
        read_lines(&mut br, cap, router, progress, abort)?;
        br.into_inner()
    };
    let md5 = hashing.finish().map_err(io_err("read", path))?;
    router.stats.bytes = f.size;
    Ok(Some(md5))
}

fn read_lines<R: BufRead>(
    reader: R,
    cap: usize,
    router: &mut Router<'_>,
    progress: &Progress,
    abort: &AtomicBool,
) -> Result<(), UnwindError> {
    let mut lines = LineReader::new(reader, cap);
    let mut pending_items = 0u64;
    loop {
        let line = match lines.next_line() {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => {
                let (partial, number, offset) = lines.partial();
                router.stats.items += 1;
                router.stats.lines = number;
                let message = format!("the file cannot be read past this point: {e}");
                router.reject(RejectRow {
                    file: router.file,
                    line: number,
                    offset,
                    reason: RejectReason::CorruptFile,
                    attribute: "",
                    message: &message,
                    raw: &partial[..partial.len().min(crate::source::lines::TOO_LONG_PREFIX)],
                    truncated: true,
                })?;
                let file = router.file_display.clone();
                router.warnings.push(format!("`{file}` is corrupt or truncated after line {}: {e}", number - 1));
                break;
            }
        };
        match line {
            Line::TooLong { prefix, len, number, offset } => {
                router.stats.lines = number;
                router.stats.items += 1;
                let message = format!("line is {len} bytes, longer than the limit of {cap} (`--max-line-bytes`)");
                router.reject(RejectRow {
                    file: router.file,
                    line: number,
                    offset,
                    reason: RejectReason::LineTooLong,
                    attribute: "",
                    message: &message,
                    raw: prefix,
                    truncated: true,
                })?;
            }
            Line::Complete { bytes, number, offset } => {
                router.stats.lines = number;
                if bytes.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                router.stats.items += 1;
                // SIMD validation first; std only to locate the error.
                let text = match simdutf8::basic::from_utf8(bytes) {
                    Ok(t) => Ok(t),
                    Err(_) => std::str::from_utf8(bytes),
                };
                match text {
                    Err(e) => {
                        let err = DecodeError::new(
                            RejectReason::InvalidUtf8,
                            "",
                            e.valid_up_to(),
                            format!("invalid UTF-8 at byte {} of the line", e.valid_up_to()),
                        );
                        router.decode_error(&err, number, offset, bytes)?;
                    }
                    Ok(text) => match decode_export_line(text) {
                        Ok(item) => router.item(&item, number, offset, bytes)?,
                        Err(e) => router.decode_error(&e, number, offset, bytes)?,
                    },
                }
            }
        }
        pending_items += 1;
        if pending_items == 4096 {
            progress.items.fetch_add(pending_items, Ordering::Relaxed);
            pending_items = 0;
            if abort.load(Ordering::Relaxed) {
                return Err(UnwindError::Internal { message: "stopped after another reader failed".into() });
            }
        }
    }
    progress.items.fetch_add(pending_items, Ordering::Relaxed);
    progress.rejects.store(router.reject_counts.values().sum(), Ordering::Relaxed);
    Ok(())
}

fn read_scan_file(f: &DataFile, router: &mut Router<'_>, progress: &Progress) -> Result<Option<String>, UnwindError> {
    let mut bytes = Vec::new();
    source::open(f).and_then(|mut r| r.read_to_end(&mut bytes)).map_err(io_err("read", Path::new(&f.display)))?;
    progress.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    let md5 = source::md5_base64(&bytes);
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => t,
        Err(e) => {
            let line = 1 + memchr::memchr_iter(b'\n', &bytes[..e.valid_up_to()]).count() as u64;
            return Err(UnwindError::ScanUtf8 { file: f.display.clone(), line });
        }
    };
    let scan = parse_scan_output(text).map_err(|source| UnwindError::Scan { file: f.display.clone(), source })?;
    if let Some(marker) = scan.partial_marker {
        router.warnings.push(format!(
            "`{}` carries `{marker}`: this scan output is only part of the table (run `aws dynamodb scan` without `--max-items`/`--limit` to get all of it)",
            f.display
        ));
    }
    for it in &scan.items {
        router.stats.items += 1;
        match decode_item_object(it.text) {
            Ok(item) => router.item(&item, it.line, it.offset as u64, it.text.as_bytes())?,
            Err(e) => router.decode_error(&e, it.line, it.offset as u64, it.text.as_bytes())?,
        }
    }
    progress.items.fetch_add(scan.items.len() as u64, Ordering::Relaxed);
    router.stats.lines = 1 + memchr::memchr_iter(b'\n', text.trim_end().as_bytes()).count() as u64;
    router.stats.bytes = bytes.len() as u64;
    Ok(Some(md5))
}

// ---------------------------------------------------------------------------------------------
// Pass two: spilled rows to Parquet.

struct Written {
    tables: Vec<TableReport>,
    schemas: Vec<TableSchema>,
    widenings: Vec<Widening>,
}

enum TableKind {
    Items(Box<TableSchema>),
    Rejects,
}

struct TableJob {
    name: String,
    entity: Option<String>,
    kind: TableKind,
    schema: SchemaRef,
    /// Part files, each a list of chunks in (file, seq) order.
    parts: Vec<Vec<ChunkRef>>,
}

fn write_all(
    plan: &Plan,
    opts: &UnwindOptions,
    mapped: Option<&MappedTables>,
    out: &Path,
    read: &ReadResult,
) -> Result<Written, UnwindError> {
    let entities: BTreeSet<String> = read.shapes.keys().map(|k| k.to_string()).collect();
    let mut names = naming::assign(&entities);
    // Inferred tables of entities the mapping does not name must not take a mapped table's name.
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
    let mut widenings = Vec::new();
    let mut jobs: Vec<TableJob> = Vec::new();
    let mut by_dest: HashMap<Dest, Vec<ChunkRef>> = HashMap::new();
    for c in &read.chunks {
        by_dest.entry(c.dest.clone()).or_default().push(c.clone());
    }
    let mut add_job = |name: String, entity: Option<String>, kind: TableKind, dest: Dest| {
        let schema = match &kind {
            TableKind::Items(s) => Arc::new(s.arrow_schema()),
            TableKind::Rejects => rejects_schema(),
        };
        let mut chunks = by_dest.remove(&dest).unwrap_or_default();
        chunks.sort_by_key(|c| (c.file, c.seq));
        let mut parts: Vec<Vec<ChunkRef>> = vec![Vec::new()];
        let mut bytes = 0u64;
        for c in chunks {
            if bytes >= opts.target_file_bytes {
                parts.push(Vec::new());
                bytes = 0;
            }
            bytes += c.len;
            if let Some(p) = parts.last_mut() {
                p.push(c);
            }
        }
        jobs.push(TableJob { name, entity, kind, schema, parts });
    };
    if let Some(m) = mapped {
        for (i, t) in m.tables.iter().enumerate() {
            let entity = t.entity.clone();
            add_job(t.table.clone(), entity, TableKind::Items(Box::new(t.clone())), Dest::Mapped(i as u32));
        }
    }
    for (entity, shape) in &read.shapes {
        let table = names.get(entity.as_ref()).cloned().unwrap_or_else(|| naming::snake_case(entity));
        let schema = shape.schema(&table, Some(entity), &mut widenings);
        add_job(table, Some(entity.to_string()), TableKind::Items(Box::new(schema)), Dest::Entity(entity.clone()));
    }
    if let Some(shape) = &read.untyped {
        let schema = shape.schema(UNTYPED_TABLE, None, &mut widenings);
        add_job(UNTYPED_TABLE.to_owned(), None, TableKind::Items(Box::new(schema)), Dest::Untyped);
    }
    add_job(REJECTS_TABLE.to_owned(), None, TableKind::Rejects, Dest::Rejects);
    jobs.sort_by(|a, b| a.name.cmp(&b.name));

    let spills: Vec<File> =
        read.spills.iter().map(|p| File::open(p).map_err(io_err("open", p))).collect::<Result<_, _>>()?;
    // Worker index -> spill file: workers pushed their spill path in index order.
    let tasks: Vec<(usize, usize)> =
        jobs.iter().enumerate().flat_map(|(j, job)| (0..job.parts.len()).map(move |p| (j, p))).collect();
    let mut order: Vec<usize> = (0..tasks.len()).collect();
    let task_bytes = |t: &(usize, usize)| jobs[t.0].parts[t.1].iter().map(|c| c.len).sum::<u64>();
    order.sort_by_key(|&i| std::cmp::Reverse(task_bytes(&tasks[i])));
    let next = AtomicUsize::new(0);
    let abort = AtomicBool::new(false);
    let props = crate::sink::writer_properties(opts.row_group_rows);
    let results: Vec<Vec<(usize, Result<FileReport, UnwindError>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..opts.threads.max(1).min(tasks.len().max(1)))
            .map(|_| {
                let (next, abort, jobs, tasks, order, spills, props, plan) =
                    (&next, &abort, &jobs, &tasks, &order, &spills, &props, plan);
                s.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        if abort.load(Ordering::Relaxed) {
                            break;
                        }
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&ti) = order.get(k) else { break };
                        let (j, p) = tasks[ti];
                        let r = write_part(&jobs[j], p, out, spills, props, opts, plan);
                        if r.is_err() {
                            abort.store(true, Ordering::Relaxed);
                        }
                        done.push((ti, r));
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![(usize::MAX, Err(UnwindError::Internal { message: "a writer thread panicked".into() }))]
                })
            })
            .collect()
    });
    let mut reports: Vec<Option<FileReport>> = vec![None; tasks.len()];
    for (ti, r) in results.into_iter().flatten() {
        let rep = r?;
        if let Some(slot) = reports.get_mut(ti) {
            *slot = Some(rep);
        }
    }
    let mut tables = Vec::new();
    let mut schemas = Vec::new();
    let mut ti = 0;
    for job in &jobs {
        let mut files = Vec::new();
        for _ in &job.parts {
            files.push(
                reports[ti]
                    .take()
                    .ok_or_else(|| UnwindError::Internal { message: format!("part of `{}` not written", job.name) })?,
            );
            ti += 1;
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
        });
        if let TableKind::Items(s) = &job.kind {
            schemas.push((**s).clone());
        }
    }
    Ok(Written { tables, schemas, widenings })
}

fn write_part(
    job: &TableJob,
    part: usize,
    out: &Path,
    spills: &[File],
    props: &datafusion::parquet::file::properties::WriterProperties,
    opts: &UnwindOptions,
    plan: &Plan,
) -> Result<FileReport, UnwindError> {
    let _span = info_span!("table", table = %job.name, part).entered();
    let dir = out.join(&job.name);
    std::fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
    let rel = format!("{}/part-{part:05}.parquet", job.name);
    let path = out.join(&rel);
    let file = File::create(&path).map_err(io_err("create", &path))?;
    let parquet = |source| UnwindError::Parquet { table: job.name.clone(), source };
    let mut writer = ArrowWriter::try_new(file, job.schema.clone(), Some(props.clone())).map_err(parquet)?;
    let mut items = match &job.kind {
        TableKind::Items(s) => Some(BatchBuilder::new(s)),
        TableKind::Rejects => None,
    };
    let mut rejects = RejectsBuilder::default();
    let mut rows = 0u64;
    let mut row_groups = 0usize;
    let mut batch_bytes = 0usize;
    let mut buf = Vec::new();
    let damaged = |e: spill::SpillError| UnwindError::Internal { message: format!("table `{}`: {e}", job.name) };
    for c in &job.parts[part] {
        buf.resize(c.len as usize, 0);
        let spill =
            spills.get(c.worker).ok_or_else(|| UnwindError::Internal { message: "missing spill file".into() })?;
        spill.read_exact_at(&mut buf, c.offset).map_err(io_err("read spill of", &path))?;
        let mut r = spill::Reader::new(&buf);
        while !r.at_end() {
            let before = r.pos;
            let n = match &mut items {
                Some(b) => {
                    let item = r.item().map_err(damaged)?;
                    b.append(&item)?;
                    b.rows()
                }
                None => {
                    let row = r.reject().map_err(damaged)?;
                    let file = plan.files.get(row.file as usize).map(|f| f.display.as_str()).unwrap_or("?");
                    rejects.append(file, &row);
                    rejects.rows()
                }
            };
            batch_bytes += r.pos - before;
            if n >= opts.row_group_rows || batch_bytes >= opts.row_group_bytes {
                let batch = match &mut items {
                    Some(b) => b.finish()?,
                    None => rejects.finish().map_err(|e| parquet(e.into()))?,
                };
                rows += batch.num_rows() as u64;
                writer.write(&batch).map_err(parquet)?;
                writer.flush().map_err(parquet)?;
                row_groups += 1;
                batch_bytes = 0;
            }
        }
    }
    let batch = match &mut items {
        Some(b) => b.finish()?,
        None => rejects.finish().map_err(|e| parquet(e.into()))?,
    };
    if batch.num_rows() > 0 {
        rows += batch.num_rows() as u64;
        writer.write(&batch).map_err(parquet)?;
        row_groups += 1;
    }
    writer.close().map_err(parquet)?;
    let bytes = std::fs::metadata(&path).map_err(io_err("inspect", &path))?.len();
    Ok(FileReport { path: rel, rows, row_groups, bytes })
}

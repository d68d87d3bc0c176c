//! The run manifest (`_etl/run.json`): the commit record of an output and its run report, in
//! one typed value written and read by this module only, and the schema contracts
//! (`_etl/schema/<table>.json`).
//!
//! Readers (`etl sql`, the next run's publish step) use exactly the files a manifest lists, never
//! a folder listing; every listed path is checked to stay inside the output before it is used.
//! [`read_contracts`] reads a committed output's schema contracts the same way, for the drift
//! check of the run that replaces it and for `etl schema diff`.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use crate::schema::TableSchema;
use crate::schema::{Demoted, Renamed, Widening};
use crate::source::integrity::Mismatch;
use crate::source::{CheckStatus, ExportInfo};

/// Where the manifest lives inside an output.
pub const RUN_MANIFEST: &str = "_etl/run.json";
/// Where each table's schema contract lives: `_etl/schema/<table>.json`.
pub const SCHEMA_DIR: &str = "_etl/schema";

/// A run manifest that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("`{path}` is not a run manifest: {message}")]
    Invalid { path: String, message: String },
    #[error("`{path}` lists file `{file}` of table `{table}`, which is not inside the output")]
    Escapes { path: String, table: String, file: String },
    #[error("`{path}` is {size} bytes, more than a run manifest can be ({max} bytes)")]
    TooLarge { path: String, size: u64, max: u64 },
    #[error(
        "`{dir}` is missing because a run was killed while publishing it; the complete output is in `{copy}` (read it there), and the next `etl unwind --out {dir}` completes the publish"
    )]
    Interrupted { dir: String, copy: String },
}

/// The most bytes a run manifest is read from: far above any real one (a run of 100,000 files
/// lists about 20 MB), far below what would exhaust memory.
pub const MAX_MANIFEST_BYTES: u64 = 256 * 1024 * 1024;

/// `_etl/run.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunManifest {
    pub etl_version: String,
    pub started_at: String,
    pub finished_at: String,
    pub options: ReportOptions,
    pub inputs: Vec<InputReport>,
    pub exports: Vec<ExportInfo>,
    pub reconciliation: Reconciliation,
    pub tables: Vec<TableReport>,
    pub rejects_by_reason: BTreeMap<String, u64>,
    pub widenings: Vec<Widening>,
    /// Attributes inference kept out of a table's columns (entities with very many names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demoted_attributes: Vec<Demoted>,
    /// Columns named apart from their attributes, to be unique without regard to case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub renamed_columns: Vec<Renamed>,
    /// Per mapping entity, when `--mapping` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapping: Option<MappingReport>,
    /// What applying incremental exports did, when the run applied a chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainReport>,
    /// How the tables' contracts changed from the output this run replaced (`tables` empty: not
    /// at all); absent on a first run, when there was no output to compare with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<crate::schema::diff::Drift>,
    /// The exports the output holds (chain runs); also copied to `_etl/state.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<crate::state::RunState>,
    /// Delta outputs: every run that committed, oldest first, with each table's version after
    /// it; `etl sql --as-of` reads an earlier entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delta_history: Vec<OutputVersion>,
    /// Delta outputs: the tables take deletion vectors (`--deletion-vectors`, given to this run
    /// or an earlier one), tables later runs create too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deletion_vectors: bool,
    pub warnings: Vec<String>,
    pub timings_ms: Timings,
    /// Set by an object-store commit: the run's id, which its file names carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Set by an object-store commit: where the run was published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_to: Option<String>,
    /// Set by an object-store commit: the run this one replaced (`null` for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces_run_id: Option<Option<String>>,
}

/// A Delta output as one run left it: a consistent set of table versions, one per table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputVersion {
    /// 0 for the first run that committed Delta tables to the output, then one more per run.
    pub version: u64,
    /// When the run committed (RFC 3339, UTC).
    pub committed_at: String,
    /// The newest export the output held after the run, when the run recorded its exports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_id: Option<String>,
    /// Each table the output had after the run: its Delta version and row count.
    pub tables: BTreeMap<String, TableVersion>,
}

/// One Delta table of an [`OutputVersion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableVersion {
    pub version: u64,
    pub rows: u64,
}

/// Which state of a Delta output `etl sql --as-of` reads: an output version (a run, counted
/// from 0), or the last run committed at or before a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsOf {
    Version(u64),
    Time(chrono::DateTime<chrono::Utc>),
}

impl std::str::FromStr for AsOf {
    type Err = String;

    /// `3`, `2026-12-01T08:00:00Z`, `2026-12-01T08:00:00+01:00`, `2026-12-01 08:00:00` (UTC) or
    /// `2026-12-01` (the end of that day, UTC).
    fn from_str(s: &str) -> Result<AsOf, String> {
        let s = s.trim();
        if let Ok(v) = s.parse::<u64>() {
            return Ok(AsOf::Version(v));
        }
        if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
            return Ok(AsOf::Time(t.with_timezone(&chrono::Utc)));
        }
        for format in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"] {
            if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, format) {
                return Ok(AsOf::Time(t.and_utc()));
            }
        }
        if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            && let Some(t) = d.and_hms_milli_opt(23, 59, 59, 999)
        {
            return Ok(AsOf::Time(t.and_utc()));
        }
        Err(format!("`{s}` is neither an output version (`3`) nor a time (`2026-12-01T08:00:00Z`, `2026-12-01`)"))
    }
}

impl std::fmt::Display for AsOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AsOf::Version(v) => write!(f, "version {v}"),
            AsOf::Time(t) => write!(f, "{}", t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        }
    }
}

/// The entry of `history` that `as_of` names: the version itself, or the last one committed at
/// or before the time.
pub fn output_version(history: &[OutputVersion], as_of: AsOf) -> Option<&OutputVersion> {
    match as_of {
        AsOf::Version(v) => history.iter().find(|h| h.version == v),
        AsOf::Time(t) => history.iter().rev().find(|h| {
            chrono::DateTime::parse_from_rfc3339(&h.committed_at).is_ok_and(|c| c.with_timezone(&chrono::Utc) <= t)
        }),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReportOptions {
    pub type_attribute: String,
    pub threads: usize,
    pub strict: bool,
    pub max_rejects: Option<u64>,
    pub max_line_bytes: usize,
    /// `--allow-mismatch`: an output that does not reconcile with the manifests exits 0.
    #[serde(default)]
    pub allow_mismatch: bool,
    /// The rest of what decides the output's files; absent in the outputs of an earlier etl.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<FileLayout>,
}

impl ReportOptions {
    /// A run with the options `run` makes the same rows from the same input as the run whose
    /// options these are: the same type attribute, line limit and mapping. Never for an output
    /// of an earlier etl, which did not record its mapping here.
    pub fn same_rows(&self, run: &ReportOptions) -> bool {
        self.type_attribute == run.type_attribute
            && self.max_line_bytes == run.max_line_bytes
            && matches!((&self.layout, &run.layout), (Some(a), Some(b)) if a.mapping == b.mapping)
    }

    /// ... and writes them to the same files: [`ReportOptions::same_rows`], laid out the same.
    pub fn same_output(&self, run: &ReportOptions) -> bool {
        self.same_rows(run) && self.layout == run.layout
    }
}

/// What decides an output's files besides its input, its type attribute and its line limit
/// ([`ReportOptions::same_output`]); the options a sharded run's shards must agree on include it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileLayout {
    /// Base64 MD5 of the `--mapping` files, in order (`crate::state::mapping_hash`).
    pub mapping: Option<String>,
    pub row_group_rows: usize,
    pub row_group_bytes: usize,
    pub target_file_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct InputReport {
    pub file: String,
    pub layout: String,
    pub gzip: bool,
    pub bytes: u64,
    /// Lines read, blank lines included (scan output: lines of the document).
    pub lines: u64,
    /// Non-blank lines or scan items: what counts as an item read.
    pub items: u64,
    pub rejects: u64,
    pub expected_items: Option<u64>,
    pub item_count_check: CheckStatus,
    pub md5_expected: Option<String>,
    pub md5_actual: Option<String>,
    pub md5_check: CheckStatus,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reconciliation {
    pub items_read: u64,
    pub rows_written: u64,
    pub rejects: u64,
    /// `items_read == rows_written + rejects`.
    pub balanced: bool,
    /// Sum of `itemCount` in the manifests of the files read, when every file had one.
    pub manifest_item_count: Option<u64>,
    pub matches_manifest: Option<bool>,
    pub untyped_items: u64,
    /// A chain run: change records read from incremental exports (applied, not rows).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changes_applied: u64,
    /// A chain run: full-export items a change replaced or deleted (not rows).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub superseded_items: u64,
    /// A chain run: current images of changed items read back as rows (not in `items_read`);
    /// `items_read + current_images == rows_written + rejects + changes_applied + superseded_items`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub current_images: u64,
    /// Whether the output reconciles with the export's manifests, and every check that did not.
    #[serde(default)]
    pub integrity: Integrity,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What applying a chain (a full export and the incremental exports after it) did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChainReport {
    /// The full export's id and `exportTime`.
    pub full_export: String,
    pub export_time: Option<String>,
    /// The incremental exports in the order applied.
    pub windows: Vec<WindowReport>,
    /// Gaps between windows that `--allow-gap` let through.
    pub gaps: Vec<crate::source::chain::Gap>,
    pub key_attributes: Vec<String>,
    /// Change records read (valid ones).
    pub change_records: u64,
    /// Distinct keys changed.
    pub changed_keys: u64,
    /// Full-export items replaced or deleted.
    pub superseded_items: u64,
    /// Per output table.
    pub tables: BTreeMap<String, TableChanges>,
    /// Deletes of keys that neither the full export nor an earlier change had.
    pub unmatched_deletes: u64,
    /// Keys inserted by one incremental export and deleted by a later one.
    pub created_and_deleted: u64,
    /// Set when the exports were applied onto an existing output: the last export it held.
    /// `windows`, `tables`, `unmatched_deletes` and `created_and_deleted` then count relative
    /// to that previous output; the other counts are over the whole chain replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_export: Option<String>,
    /// Set when the exports were applied in place (a Delta output with deletion vectors, or a
    /// Parquet output with `--in-place`): the full export was not read again (its checks passed
    /// when the output was made; it is not among `inputs`), only the current rows of the keys the
    /// new exports changed were unwound, and each key's table was found in the output's tables.
    /// `superseded_items` is then 0, and the summary says "applied in place" instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub applied_in_place: bool,
    /// Applied in place: rows of the output's `_rejects` left out because the new exports
    /// changed the keys of their items (full-export items, or current images an earlier apply
    /// unwound), as a replay of the chain would not reject those items again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub superseded_rejects: u64,
}

/// One applied incremental export.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowReport {
    pub export: String,
    pub from_time: String,
    pub to_time: String,
    pub output_view: Option<String>,
    /// Change records applied from it.
    pub records: u64,
}

/// One table's changes in a chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableChanges {
    pub inserts: u64,
    pub updates: u64,
    pub deletes: u64,
    /// Deletes the mapping's key templates route here, of keys that were not there.
    pub unmatched_deletes: u64,
    /// Rows that came from another table because their type changed.
    pub moved_in: u64,
    /// Rows that went to another table because their type changed.
    pub moved_out: u64,
}

/// The integrity verdict of a run: what was read against what the manifests promise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Integrity {
    pub verdict: Verdict,
    /// Items the export summaries promise (their `itemCount`s), when an export was read.
    pub expected_items: Option<u64>,
    /// Items read from data files that a manifest lists.
    pub items_read: u64,
    /// Every check that did not verify, in the order found.
    pub mismatches: Vec<Mismatch>,
}

/// What a run's output is, against the manifests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No input had a manifest (bare data files, scan output, live tables).
    #[default]
    Unverified,
    /// Every item count, MD5 and checksum side file verified.
    Reconciled,
    /// Some check did not verify: the run exits 1 (after publishing).
    NotReconciled,
    /// Some check did not verify and `--allow-mismatch` accepted it: the run exits 0.
    Accepted,
}

impl Integrity {
    /// The verdict for `mismatches` among inputs that had manifests (`listed`).
    pub fn judge(
        listed: bool,
        expected_items: Option<u64>,
        items_read: u64,
        mismatches: Vec<Mismatch>,
        allow_mismatch: bool,
    ) -> Integrity {
        let verdict = match (listed || !mismatches.is_empty(), mismatches.is_empty(), allow_mismatch) {
            (false, _, _) => Verdict::Unverified,
            (true, true, _) => Verdict::Reconciled,
            (true, false, false) => Verdict::NotReconciled,
            (true, false, true) => Verdict::Accepted,
        };
        Integrity { verdict, expected_items, items_read, mismatches }
    }

    /// The data broke the integrity policy: the run exits 1.
    pub fn fails(&self) -> bool {
        self.verdict == Verdict::NotReconciled
    }
}

/// What the mapping did, entity by entity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MappingReport {
    pub files: Vec<String>,
    pub type_attribute: String,
    pub entities: Vec<EntityReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntityReport {
    pub entity: String,
    pub table: String,
    /// Items the entity matched.
    pub items: u64,
    /// Rows written to its table (items minus rejected).
    pub rows: u64,
    pub rejected: u64,
    pub key_template_failures: u64,
    pub key_conflicts: u64,
    pub coercion_failures: u64,
    pub required_missing: u64,
    /// Values left null under `on_error = "null"` (counted in the failures above too).
    pub nulled_values: u64,
    /// Attributes no column names, with how many items had each.
    pub unmapped_attributes: BTreeMap<String, u64>,
    pub child_tables: Vec<String>,
    pub child_rows: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableReport {
    pub name: String,
    pub entity: Option<String>,
    /// For a child table of a mapping: its parent table. Its rows are not items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child_of: Option<String>,
    pub rows: u64,
    pub columns: usize,
    pub files: Vec<FileReport>,
    /// The Delta table version this run committed (`--format delta` outputs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_version: Option<u64>,
    /// How this run's commit changed the Delta table, when it applied incremental exports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_merge: Option<DeltaMerge>,
}

/// What one table's Delta commit did in a run that applied incremental exports onto a Delta
/// output: the rows of the changed keys replaced in the files that held them (`merge`), the whole
/// table replaced (`replace`, with the reason), nothing because no changed key touched it
/// (`unchanged`), or nothing because the table's transaction already covered the exports
/// (`skipped`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaMerge {
    pub mode: MergeMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Keys the new exports changed (all tables).
    pub changed_keys: u64,
    /// Rows of changed keys written (updates, inserts, rows moved in).
    pub rows_upserted: u64,
    /// Rows of changed keys removed from the files that held them.
    pub rows_removed: u64,
    /// Data files of the previous version read again and rewritten without the changed keys.
    pub files_rewritten: u64,
    pub bytes_rewritten: u64,
    /// Data files this commit added (rewritten files and the file of upserted rows).
    pub files_added: u64,
    pub bytes_added: u64,
    /// Data files whose changed keys' rows this commit marked deleted in a deletion vector
    /// instead of rewriting them (`delta.enableDeletionVectors`), and the bytes of the one
    /// deletion-vector file it wrote for them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub files_marked: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deletion_vector_bytes: u64,
    /// Columns added to the table's schema by this commit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub columns_added: Vec<String>,
}

/// How a table's Delta commit applied a run's changes (see [`DeltaMerge`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeMode {
    /// The changed keys' rows replaced in the files that held them.
    #[default]
    Merge,
    /// No changed key touched the table: nothing committed.
    Unchanged,
    /// The table's transaction already covered the exports: nothing committed.
    Skipped,
    /// The whole table replaced in one commit (the reason is given).
    Replace,
    /// This run's rows appended (`_rejects`, when the apply did not replay the full export).
    Append,
}

impl TableReport {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileReport {
    pub path: String,
    pub rows: u64,
    pub row_groups: usize,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    pub resolve: u64,
    pub read_and_decode: u64,
    pub write: u64,
    /// Up to writing this report; publishing follows it.
    pub total: u64,
    /// Copying the exports read into `_etl/base/`, and writing a chain's incremental exports
    /// compacted into one there (part of `total`).
    #[serde(default)]
    pub keep_base: u64,
}

impl RunManifest {
    /// Whether the run lists the table named `table`.
    pub fn lists(&self, table: &str) -> bool {
        self.tables.iter().any(|t| t.name == table)
    }

    /// Whether a run lists `table` even with no row, as every run does `_rejects` and the tables
    /// its mapping declares (an entity's, a child table); an inferred table is listed only while
    /// it has rows, as a full export without such items gives no such table.
    pub fn lists_when_empty(&self, table: &TableReport) -> bool {
        table.name == crate::normalize::naming::REJECTS_TABLE
            || table.child_of.is_some()
            || self.mapping.as_ref().is_some_and(|m| m.entities.iter().any(|e| e.table == table.name))
    }

    /// Parses a manifest and checks that every file it lists stays inside the output.
    pub fn parse(path: &str, bytes: &[u8]) -> Result<RunManifest, ManifestError> {
        let m: RunManifest = serde_json::from_slice(bytes)
            .map_err(|e| ManifestError::Invalid { path: path.to_owned(), message: e.to_string() })?;
        for t in &m.tables {
            for f in &t.files {
                if !is_confined(&f.path) {
                    return Err(ManifestError::Escapes {
                        path: path.to_owned(),
                        table: t.name.clone(),
                        file: f.path.clone(),
                    });
                }
            }
        }
        Ok(m)
    }

    /// Reads `dir/_etl/run.json`.
    pub fn read(dir: &Path) -> Result<RunManifest, ManifestError> {
        let path = dir.join(RUN_MANIFEST);
        let display = path.display().to_string();
        let invalid = |e: std::io::Error| ManifestError::Invalid { path: display.clone(), message: e.to_string() };
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Readers never complete a publish themselves; they say where the output is.
                if let Some(copy) = super::local::interrupted_publish(dir) {
                    return Err(ManifestError::Interrupted {
                        dir: dir.display().to_string(),
                        copy: copy.display().to_string(),
                    });
                }
                return Err(invalid(e));
            }
            Err(e) => return Err(invalid(e)),
        };
        let size = file.metadata().map_err(invalid)?.len();
        if size > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge { path: display, size, max: MAX_MANIFEST_BYTES });
        }
        let mut bytes = Vec::with_capacity(size as usize);
        std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_MANIFEST_BYTES), &mut bytes).map_err(invalid)?;
        RunManifest::parse(&display, &bytes)
    }

    /// The manifest as written: pretty JSON with a final newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising plain data cannot fail; an empty object would only hide a bug.
        let mut text = serde_json::to_vec_pretty(self).unwrap_or_else(|_| b"{}".to_vec());
        text.push(b'\n');
        text
    }
}

/// A relative `/`-separated path of plain names: what an output's manifest may list.
fn is_confined(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.contains('\\')
        && !rel.contains("//")
        && Path::new(rel).components().all(|c| matches!(c, Component::Normal(_)))
}

/// Writes `_etl/run.json` and `_etl/schema/<table>.json` into `dir`, a staging folder: the
/// contracts among `schemas` of the tables `manifest` lists, and no others (a contract an earlier
/// write staged for a table no longer listed, one a Delta MERGE emptied, is removed), so that what
/// is published from `dir` holds those of the listed tables only.
pub fn write(dir: &Path, manifest: &RunManifest, schemas: &[TableSchema]) -> std::io::Result<()> {
    let schema_dir = dir.join(SCHEMA_DIR);
    std::fs::create_dir_all(&schema_dir)?;
    remove_unlisted_contracts(&schema_dir, |t| manifest.lists(t))?;
    for s in schemas.iter().filter(|s| manifest.lists(&s.table)) {
        let text = serde_json::to_string_pretty(s).map_err(std::io::Error::other)?;
        std::fs::write(schema_dir.join(format!("{}.json", s.table)), text + "\n")?;
    }
    if let Some(state) = &manifest.state {
        let text = serde_json::to_string_pretty(state).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(crate::state::STATE_FILE), text + "\n")?;
    }
    std::fs::write(dir.join(RUN_MANIFEST), manifest.to_bytes())
}

/// The run manifest (`_etl/run.json`) of the output committed at `target`; `None` when it holds
/// none. For a process that writes no output of its own (a shard that finds the output holding
/// its run): a run reads it through its sink ([`super::Sink::previous`]).
pub fn read_committed(
    target: &crate::store::Target,
    aws: &crate::aws::AwsOptions,
) -> Result<Option<RunManifest>, super::SinkError> {
    use crate::store::Target;
    match target {
        Target::Path(dir) => local_committed(dir),
        Target::Object(url) => crate::store::io_runtime().block_on(async {
            let store = crate::store::open(url, aws).await?;
            object_committed(&store, url).await
        }),
    }
}

/// The committed run manifest of the output folder `dir` (after a publish interrupted between
/// its two renames, the one it committed), if it holds one.
pub(super) fn local_committed(dir: &Path) -> Result<Option<RunManifest>, super::SinkError> {
    if !dir.join(RUN_MANIFEST).is_file() && super::local::interrupted_publish(dir).is_none() {
        return Ok(None);
    }
    Ok(Some(RunManifest::read(dir)?))
}

/// The committed run manifest under the object-store prefix `url`, if it holds one.
pub(super) async fn object_committed(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    url: &crate::store::ObjectUrl,
) -> Result<Option<RunManifest>, super::SinkError> {
    let Some((shown, bytes)) = get(store, url, format!("{}{RUN_MANIFEST}", url.dir_prefix())).await? else {
        return Ok(None);
    };
    Ok(Some(RunManifest::parse(&shown, &bytes)?))
}

/// The schema contracts of the output committed at `target`, one per table its run manifest
/// lists that has one (`_rejects` has none); `None` when `target` holds no committed output (no
/// `_etl/run.json`). Local: `_etl/schema/<table>.json`. Object stores: the committed run's own
/// copies, `_etl/runs/<run-id>/schema/<table>.json` (the `_etl/schema/` copies are written after
/// the commit and may lag behind it).
pub fn read_contracts(
    target: &crate::store::Target,
    aws: &crate::aws::AwsOptions,
) -> Result<Option<Vec<TableSchema>>, super::SinkError> {
    use crate::store::Target;
    match target {
        Target::Path(dir) => {
            let Some(manifest) = local_committed(dir)? else { return Ok(None) };
            Ok(Some(local_contracts(dir, &manifest)?))
        }
        Target::Object(url) => crate::store::io_runtime().block_on(read_object_contracts(url, aws)),
    }
}

/// [`read_contracts`] of an object-store prefix, for callers already in an async context.
pub async fn read_object_contracts(
    url: &crate::store::ObjectUrl,
    aws: &crate::aws::AwsOptions,
) -> Result<Option<Vec<TableSchema>>, super::SinkError> {
    let store = crate::store::open(url, aws).await?;
    let Some(manifest) = object_committed(&store, url).await? else { return Ok(None) };
    Ok(Some(object_contracts(&store, url, &manifest).await?))
}

/// The contracts of the tables `manifest` lists, `manifest` being the run committed at `target`
/// (read by the caller already): [`read_contracts`] without reading `_etl/run.json` again.
pub async fn contracts_of(
    target: &crate::store::Target,
    aws: &crate::aws::AwsOptions,
    manifest: &RunManifest,
) -> Result<Vec<TableSchema>, super::SinkError> {
    use crate::store::Target;
    match target {
        Target::Path(dir) => local_contracts(dir, manifest),
        Target::Object(url) => object_contracts(&crate::store::open(url, aws).await?, url, manifest).await,
    }
}

/// The contracts in the output folder `dir` of the tables `manifest` lists.
fn local_contracts(dir: &Path, manifest: &RunManifest) -> Result<Vec<TableSchema>, super::SinkError> {
    let mut out = Vec::new();
    for name in contract_names(manifest) {
        let path = dir.join(SCHEMA_DIR).join(format!("{name}.json"));
        let display = path.display().to_string();
        let bytes = match std::fs::File::open(&path) {
            Ok(f) => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_MANIFEST_BYTES), &mut bytes)
                    .map_err(|e| ManifestError::Invalid { path: display.clone(), message: e.to_string() })?;
                bytes
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ManifestError::Invalid { path: display, message: e.to_string() }.into()),
        };
        out.push(parse_contract(&display, &bytes)?);
    }
    Ok(out)
}

/// The contracts under the object-store prefix `url` of the tables `manifest` (its committed run)
/// lists: the run's own copies.
async fn object_contracts(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    url: &crate::store::ObjectUrl,
    manifest: &RunManifest,
) -> Result<Vec<TableSchema>, super::SinkError> {
    let prefix = url.dir_prefix();
    let dir = match &manifest.run_id {
        Some(id) if is_confined(id) && !id.contains('/') => format!("{prefix}_etl/runs/{id}/schema"),
        _ => format!("{prefix}{SCHEMA_DIR}"),
    };
    let mut out = Vec::new();
    for name in contract_names(manifest) {
        if let Some((shown, bytes)) = get(store, url, format!("{dir}/{name}.json")).await? {
            out.push(parse_contract(&shown, &bytes)?);
        }
    }
    Ok(out)
}

/// Whether `file`, the name of a file in `_etl/schema/`, is the contract of a table `lists` says
/// a run does not list ([`RunManifest::lists`]). [`write`] stages none; a publish that does not
/// replace the whole output (a Delta output; any output on an object store) removes such a file
/// once it has committed, so that `_etl/schema/` holds the contracts of the tables the output
/// lists and no others, as a swapped Parquet folder does.
pub(super) fn unlisted_contract(lists: impl Fn(&str) -> bool, file: &str) -> bool {
    file.strip_suffix(".json").is_some_and(|table| !lists(table))
}

/// Removes from the folder `schema_dir` every file that is the contract of a table `lists` says
/// a run does not list ([`unlisted_contract`]; `|t| manifest.lists(t)`). Tries every file and
/// returns the first error.
pub(super) fn remove_unlisted_contracts(schema_dir: &Path, lists: impl Fn(&str) -> bool) -> std::io::Result<()> {
    let mut first = None;
    for e in std::fs::read_dir(schema_dir)? {
        let removed = e.and_then(|e| {
            let unlisted =
                e.file_type()?.is_file() && e.file_name().to_str().is_some_and(|file| unlisted_contract(&lists, file));
            if unlisted { std::fs::remove_file(e.path()) } else { Ok(()) }
        });
        if let Err(err) = removed {
            first.get_or_insert(err);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The bytes of `key` under `url`'s bucket, `None` when it does not exist; bounded like a manifest.
async fn get(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    url: &crate::store::ObjectUrl,
    key: String,
) -> Result<Option<(String, Vec<u8>)>, super::SinkError> {
    use object_store::ObjectStoreExt as _;

    use crate::store::StoreError;
    let shown = url.url_of(&key);
    match store.get(&object_store::path::Path::from(key.as_str())).await {
        Ok(r) => {
            if r.meta.size > MAX_MANIFEST_BYTES {
                return Err(ManifestError::TooLarge { path: shown, size: r.meta.size, max: MAX_MANIFEST_BYTES }.into());
            }
            let bytes = r.bytes().await.map_err(|e| StoreError::object("read", &shown, &e))?;
            Ok(Some((shown, bytes.to_vec())))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(StoreError::object("read", &shown, &e).into()),
    }
}

/// The tables of `manifest` whose names can name a contract file inside `_etl/schema/`.
fn contract_names(manifest: &RunManifest) -> Vec<&str> {
    let mut names: Vec<&str> =
        manifest.tables.iter().map(|t| t.name.as_str()).filter(|n| is_confined(n) && !n.contains('/')).collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn parse_contract(path: &str, bytes: &[u8]) -> Result<TableSchema, ManifestError> {
    serde_json::from_slice(bytes).map_err(|e| ManifestError::Invalid {
        path: path.to_owned(),
        message: format!("not a table schema contract: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_files_must_stay_inside_the_output() {
        for ok in ["user/part-00000.parquet", "a/b/c.parquet"] {
            assert!(is_confined(ok), "{ok}");
        }
        for bad in ["/etc/passwd", "../x.parquet", "user/../../x", "", "a//b", "./a", "a\\..\\b"] {
            assert!(!is_confined(bad), "{bad}");
        }
    }

    #[test]
    fn a_contract_is_unlisted_when_no_listed_table_has_its_name() {
        let listed = ["_rejects", "user", "order_item"];
        let unlisted = |file| unlisted_contract(|t| listed.contains(&t), file);
        assert!(!unlisted("user.json"));
        assert!(!unlisted("order_item.json"));
        assert!(unlisted("order.json"), "a table no longer listed");
        assert!(unlisted("users.json") && unlisted("use.json"), "names compare whole");
        assert!(!unlisted("user.json.tmp") && !unlisted("notes.txt"), "not a contract's name");
        assert!(unlisted_contract(|_| false, "user.json"));
    }

    #[test]
    fn only_unlisted_contracts_are_removed_from_a_schema_folder() {
        let dir = tempfile::tempdir().unwrap();
        let schema = dir.path();
        for file in ["user.json", "order.json", "product.json", "notes.txt", "user.json.tmp"] {
            std::fs::write(schema.join(file), "{}").unwrap();
        }
        std::fs::create_dir(schema.join("review.json")).unwrap();
        let listed = ["_rejects", "user", "product"];
        remove_unlisted_contracts(schema, |t| listed.contains(&t)).unwrap();
        let mut left: Vec<String> =
            std::fs::read_dir(schema).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        // `order.json` is the one unlisted contract; a folder, however named, is not a contract.
        assert_eq!(left, ["notes.txt", "product.json", "review.json", "user.json", "user.json.tmp"]);
        assert!(remove_unlisted_contracts(&schema.join("missing"), |_| true).is_err());
    }

    #[test]
    fn as_of_names_a_version_or_the_last_run_committed_by_a_time() {
        let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&chrono::Utc);
        assert_eq!("3".parse::<AsOf>(), Ok(AsOf::Version(3)));
        assert_eq!("2026-12-01T08:00:00+01:00".parse::<AsOf>(), Ok(AsOf::Time(t("2026-12-01T07:00:00Z"))));
        assert_eq!("2026-12-01 08:00:00".parse::<AsOf>(), Ok(AsOf::Time(t("2026-12-01T08:00:00Z"))));
        assert_eq!("2026-12-01".parse::<AsOf>(), Ok(AsOf::Time(t("2026-12-01T23:59:59.999Z"))));
        for bad in ["", "-1", "yesterday", "2026-13-01"] {
            assert!(bad.parse::<AsOf>().is_err(), "{bad}");
        }
        let run = |version, at: &str| OutputVersion {
            version,
            committed_at: at.into(),
            export_id: None,
            tables: BTreeMap::from([("user".to_owned(), TableVersion { version, rows: 1 })]),
        };
        let history = [run(0, "2026-12-01T08:00:00Z"), run(1, "2026-12-01T09:00:00Z"), run(2, "2026-12-02T09:00:00Z")];
        let pick = |a: AsOf| output_version(&history, a).map(|h| h.version);
        assert_eq!(pick(AsOf::Version(1)), Some(1));
        assert_eq!(pick(AsOf::Version(3)), None);
        assert_eq!(pick(AsOf::Time(t("2026-12-01T07:59:59Z"))), None);
        assert_eq!(pick(AsOf::Time(t("2026-12-01T09:00:00Z"))), Some(1));
        assert_eq!(pick("2026-12-01".parse().unwrap()), Some(1));
        assert_eq!(pick(AsOf::Time(t("2027-01-01T00:00:00Z"))), Some(2));
    }
}

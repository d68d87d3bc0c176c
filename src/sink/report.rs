//! The run report (`_etl/run.json`) and the schema contracts (`_etl/schema/<table>.json`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::mapping::TableSchema;
use crate::mapping::infer::Widening;
use crate::source::{CheckStatus, ExportInfo};

#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
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
    /// Per mapping entity, when `--mapping` was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapping: Option<MappingReport>,
    pub warnings: Vec<String>,
    pub timings_ms: Timings,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReportOptions {
    pub type_attribute: String,
    pub threads: usize,
    pub strict: bool,
    pub max_rejects: Option<u64>,
    pub max_line_bytes: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
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

#[derive(Debug, Clone, Serialize)]
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
}

/// What the mapping did, entity by entity.
#[derive(Debug, Clone, Serialize)]
pub struct MappingReport {
    pub files: Vec<String>,
    pub type_attribute: String,
    pub entities: Vec<EntityReport>,
}

#[derive(Debug, Clone, Serialize)]
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

#[derive(Debug, Clone, Serialize)]
pub struct TableReport {
    pub name: String,
    pub entity: Option<String>,
    /// For a child table of a mapping: its parent table. Its rows are not items.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child_of: Option<String>,
    pub rows: u64,
    pub columns: usize,
    pub files: Vec<FileReport>,
}

impl TableReport {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    pub path: String,
    pub rows: u64,
    pub row_groups: usize,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Timings {
    pub resolve: u64,
    pub read_and_decode: u64,
    pub write: u64,
    /// Up to writing this report; publishing follows it.
    pub total: u64,
}

/// Writes `_etl/run.json` and `_etl/schema/<table>.json` into `dir`.
pub fn write_reports(dir: &Path, report: &RunReport, schemas: &[TableSchema]) -> std::io::Result<()> {
    let etl = dir.join("_etl");
    let schema_dir = etl.join("schema");
    std::fs::create_dir_all(&schema_dir)?;
    for s in schemas {
        let text = serde_json::to_string_pretty(s).map_err(std::io::Error::other)?;
        std::fs::write(schema_dir.join(format!("{}.json", s.table)), text + "\n")?;
    }
    let text = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(etl.join("run.json"), text + "\n")
}

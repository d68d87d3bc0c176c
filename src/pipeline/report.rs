//! Assembling the run manifest: inputs with their checksum and count checks, the integrity
//! verdict against the export's manifests, the reconciliation of items read against rows and
//! rejects written, and the mapping's counts.

use std::collections::BTreeMap;

use super::UnwindError;
use super::read::ReadResult;
use super::write::Written;
use crate::mapping::Mapping;
use crate::normalize::naming::REJECTS_TABLE;
use crate::normalize::{EntityStats, MappedTables};
use crate::sink::manifest::{EntityReport, InputReport, Integrity, MappingReport, Reconciliation};
use crate::source::integrity::{self, preview};
use crate::source::{CheckStatus, Layout, Plan};

/// Each input with what was read of it and its checks.
pub fn inputs(plan: &Plan, read: &ReadResult) -> Vec<InputReport> {
    let mut inputs = Vec::with_capacity(plan.files.len());
    for (_, (f, st)) in plan.files.iter().zip(&read.files).enumerate().filter(|(i, _)| !read.unread.contains(i)) {
        let d = &st.digest;
        let item_count_check = match &f.expected {
            Some(e) if e.item_count == d.units => CheckStatus::Verified,
            Some(_) => CheckStatus::Mismatch,
            None => CheckStatus::NotListed,
        };
        let md5_check = match &f.expected {
            Some(e) if e.md5_base64 == d.md5_base64 => CheckStatus::Verified,
            Some(_) => CheckStatus::Mismatch,
            None => CheckStatus::NotListed,
        };
        inputs.push(InputReport {
            file: f.display.clone(),
            layout: match f.layout {
                Layout::ExportLines => "export_lines".into(),
                Layout::ScanOutput => "scan_output".into(),
                Layout::IonLines => "ion_lines".into(),
            },
            gzip: f.gzip,
            bytes: d.bytes,
            lines: d.lines,
            items: d.units,
            rejects: st.rejects,
            expected_items: f.expected.as_ref().map(|e| e.item_count),
            item_count_check,
            md5_expected: f.expected.as_ref().map(|e| preview(&e.md5_base64)),
            md5_actual: Some(d.md5_base64.clone()),
            md5_check,
        });
    }
    inputs
}

/// The integrity verdict: every check of the manifests and of each data file read against
/// them, judged under `--allow-mismatch`. Item sums cannot overflow: resolution refused plans
/// whose counts do not fit. An export whose data files were left unread (`read.unread`) counts
/// in neither the items expected nor those read.
pub fn integrity(plan: &Plan, read: &ReadResult, allow_mismatch: bool) -> Integrity {
    let mut mismatches = integrity::manifest_mismatches(plan);
    let was_read = |i: &usize| !read.unread.contains(i);
    for (_, (f, st)) in plan.files.iter().zip(&read.files).enumerate().filter(|(i, _)| was_read(i)) {
        mismatches.extend(integrity::file_mismatches(f, &st.digest));
    }
    let listed = !plan.exports.is_empty() || plan.files.iter().any(|f| f.expected.is_some());
    let unread_export =
        |e: &crate::source::ExportInfo| !e.files.is_empty() && e.files.clone().all(|i| read.unread.contains(&i));
    let expected_items = (!plan.exports.is_empty())
        .then(|| plan.exports.iter().filter(|e| !unread_export(e)).map(|e| e.summary_item_count).sum::<u64>());
    let items_read = plan
        .files
        .iter()
        .zip(&read.files)
        .enumerate()
        .filter(|(i, (f, _))| f.expected.is_some() && was_read(i))
        .map(|(_, (_, st))| st.digest.units)
        .sum();
    Integrity::judge(listed, expected_items, items_read, mismatches, allow_mismatch)
}

/// Items read against rows and rejects written, with the integrity verdict. A run that does
/// not balance is a bug in etl.
///
/// In a chain run, `current` is the plan index of the file of current images: its units are
/// counted apart from the items read, and change records and superseded items balance too.
pub fn reconcile(
    plan: &Plan,
    read: &ReadResult,
    written: &Written,
    integrity: Integrity,
    current: Option<usize>,
) -> Result<Reconciliation, UnwindError> {
    let units = |i: usize| read.files.get(i).map_or(0, |s| s.digest.units);
    let current_images = current.map_or(0, units);
    let items_read: u64 = read.files.iter().map(|s| s.digest.units).sum::<u64>() - current_images;
    let changes_applied = read.chain.changes;
    let superseded_items = read.chain.superseded;
    let rejects: u64 = read.reject_counts.values().sum();
    let rows_written = written.item_rows();
    let rejects_rows: u64 = written.tables.iter().filter(|t| t.name == REJECTS_TABLE).map(|t| t.rows).sum();
    let listed = |(i, _): &(usize, &crate::source::DataFile)| Some(*i) != current && !read.unread.contains(i);
    let manifest_item_count =
        if !plan.files.is_empty() && plan.files.iter().enumerate().filter(listed).all(|(_, f)| f.expected.is_some()) {
            Some(
                plan.files
                    .iter()
                    .enumerate()
                    .filter(listed)
                    .filter_map(|(_, f)| f.expected.as_ref())
                    .map(|e| e.item_count)
                    .sum(),
            )
        } else {
            None
        };
    let rec = Reconciliation {
        items_read,
        rows_written,
        rejects,
        balanced: items_read + current_images == rows_written + rejects + changes_applied + superseded_items
            && rejects == rejects_rows,
        manifest_item_count,
        matches_manifest: manifest_item_count.map(|m| m == items_read),
        untyped_items: read.untyped.as_ref().map_or(0, |u| u.items),
        changes_applied,
        superseded_items,
        current_images,
        integrity,
    };
    if !rec.balanced {
        return Err(UnwindError::Internal {
            message: format!(
                "items do not reconcile: read {items_read} (and {current_images} current images), wrote {rows_written} rows and {rejects_rows} rejects (counted {rejects}), applied {changes_applied} changes superseding {superseded_items} items"
            ),
        });
    }
    Ok(rec)
}

/// The mapping's counts, entity by entity.
pub fn mapping(m: &Mapping, tables: &MappedTables, stats: &[EntityStats]) -> MappingReport {
    let count = |st: &EntityStats, k: &str| st.failures.get(k).copied().unwrap_or(0);
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
                key_template_failures: count(st, "key_template"),
                key_conflicts: count(st, "key_conflict"),
                coercion_failures: count(st, "coercion"),
                required_missing: count(st, "required"),
                nulled_values: st.nulled,
                unmapped_attributes: st.unmapped.clone(),
                child_tables: children.iter().map(|&c| tables.tables[c as usize].table.clone()).collect(),
                child_rows: st.child_rows,
            })
            .collect(),
    }
}

/// Warnings about table shapes a reader should know of: long type values with shortened table
/// names, attributes kept out of columns, columns renamed to be unique without regard to case.
pub fn schema_warnings(written: &Written) -> Vec<String> {
    let mut out = Vec::new();
    for (entity, table) in &written.shortened {
        let shown: String = entity.chars().take(40).collect();
        out.push(format!(
            "entity `{shown}…` ({} bytes) is too long for a table name: its table is `{table}`",
            entity.len()
        ));
    }
    for d in &written.demoted {
        out.push(format!(
            "table `{}`: {} attributes are kept in column `{}` as DynamoDB JSON, not as columns ({})",
            d.table, d.attributes, d.column, d.reason
        ));
    }
    for r in &written.renamed {
        out.push(format!("table `{}`: attribute `{}` is column `{}`: {}", r.table, r.attribute, r.column, r.reason));
    }
    out
}

/// Reject counts by reason code.
pub fn rejects_by_reason(read: &ReadResult) -> BTreeMap<String, u64> {
    read.reject_counts.iter().map(|(r, n)| (r.code().to_owned(), *n)).collect()
}

//! Run state for scheduled jobs: which exports an output holds, as [`RunState`], recorded in the
//! commit record (`_etl/run.json`, written last and, on S3, conditionally) and copied to
//! `_etl/state.json` for people and scripts.
//!
//! A run that applies a chain of exports compares its exports with the state of the output it
//! replaces ([`compare`]): the same exports again are a no-op, exports older than those applied
//! are refused. This module reads the previous state and compares; it never decides what a run
//! does with the answer, and it writes nothing itself (the sink publishes the state with the
//! output).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::source::ExportInfo;
use crate::source::chain::{Chain, export_id};

/// Where the readable copy of the state lives inside an output.
pub const STATE_FILE: &str = "_etl/state.json";
/// The most bytes a state file is read from.
const MAX_STATE_BYTES: u64 = 64 * 1024 * 1024;

/// What an output holds: the table, its key, the mapping used, and every export applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    pub version: u32,
    pub table_arn: Option<String>,
    /// The table's key attribute names, from the change records' `Keys`.
    pub key_attributes: Vec<String>,
    /// Base64 MD5 of the mapping files' bytes, in order; `None` without a mapping.
    pub mapping_hash: Option<String>,
    /// The full export, then the incremental exports in the order applied.
    pub applied: Vec<AppliedExport>,
    /// Delta outputs: each table's version after the run that recorded this state.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub delta_versions: std::collections::BTreeMap<String, u64>,
}

/// One export an output holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedExport {
    pub export_id: String,
    pub incremental: bool,
    /// A full export's `exportTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_time: Option<String>,
    /// An incremental export's window and view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_view: Option<String>,
    /// The summary's `itemCount` (items, or change records).
    pub item_count: u64,
    /// Base64 MD5 of its `manifest-summary.json`.
    pub manifest_md5: String,
}

impl AppliedExport {
    pub fn of(e: &ExportInfo) -> AppliedExport {
        AppliedExport {
            export_id: export_id(e),
            incremental: e.window.is_some(),
            export_time: e.export_time.clone(),
            from_time: e.window.as_ref().map(|w| w.from_time.clone()),
            to_time: e.window.as_ref().map(|w| w.to_time.clone()),
            output_view: e.window.as_ref().and_then(|w| w.output_view.clone()),
            item_count: e.summary_item_count,
            manifest_md5: e.summary_md5.clone(),
        }
    }

    /// Up to when the export covers the table: its window's end, or its `exportTime`.
    pub fn covers_until(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        let t = self.to_time.as_deref().or(self.export_time.as_deref())?;
        chrono::DateTime::parse_from_rfc3339(t).ok().map(|t| t.with_timezone(&chrono::Utc))
    }
}

/// Why a state cannot be used, or a run cannot go on from it.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read `{path}`: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("`{path}` is not an etl run state: {message}")]
    Invalid { path: String, message: String },
    #[error(
        "`{out}` was made with {was}, but this run has {now}; applying changes with another mapping would mix two schemas"
    )]
    MappingChanged { out: String, was: String, now: String },
    #[error(
        "the exports named end at {named}, before the exports `{out}` already holds (up to {applied}, export `{last}`); applying them would undo newer changes"
    )]
    Older { out: String, named: String, applied: String, last: String },
}

impl StateError {
    pub fn hint(&self) -> Option<String> {
        match self {
            StateError::Older { .. } => Some(
                "name the exports taken after the last one applied (see `_etl/state.json`), or write to another `--out`".into(),
            ),
            StateError::MappingChanged { .. } => Some(
                "pass the same `--mapping` files the output was made with, or unwind the full export and all incremental exports into a new `--out` with the new mapping".into(),
            ),
            StateError::Invalid { .. } => Some("the file was edited or damaged; remove the output and unwind again".into()),
            StateError::Io { .. } => None,
        }
    }
}

/// The state of an output made from `chain` of `exports`.
pub fn of_chain(
    exports: &[ExportInfo],
    chain: &Chain,
    key_attributes: &[String],
    mapping_hash: Option<String>,
) -> RunState {
    let full = &exports[chain.full];
    let mut applied = vec![AppliedExport::of(full)];
    applied.extend(chain.incrementals.iter().map(|&i| AppliedExport::of(&exports[i])));
    RunState {
        version: 1,
        table_arn: full.table_arn.clone(),
        key_attributes: key_attributes.to_vec(),
        mapping_hash,
        applied,
        delta_versions: Default::default(),
    }
}

/// How the id of an incremental export etl wrote itself starts: the final changes of the
/// incremental exports an output applied, kept in `_etl/base/` in their place
/// (`pipeline::compact`).
pub const COMPACTED_PREFIX: &str = "etl-compacted-";

/// The state a run onto an output holding `prev` publishes, from the state of the exports it
/// read (`next`): an export etl compacted stands for the exports `prev` applied, so those are
/// listed in its place, in the order applied, then the exports new to the output.
pub fn with_held(next: RunState, prev: &RunState) -> RunState {
    let same = |a: &AppliedExport, b: &AppliedExport| a.export_id == b.export_id && a.manifest_md5 == b.manifest_md5;
    let mut applied: Vec<AppliedExport> = next.applied.iter().filter(|a| !a.incremental).cloned().collect();
    applied.extend(prev.applied.iter().filter(|a| a.incremental).cloned());
    for a in next.applied.iter().filter(|a| a.incremental && !a.export_id.starts_with(COMPACTED_PREFIX)) {
        if !applied.iter().any(|b| same(a, b)) {
            applied.push(a.clone());
        }
    }
    RunState { applied, ..next }
}

/// The state of an output holding `exports` (a full export and the incremental exports
/// applied to it), when it recorded none itself (an output made from a full export alone).
pub fn of_exports(exports: &[ExportInfo], key_attributes: &[String], mapping_hash: Option<String>) -> RunState {
    let mut applied: Vec<AppliedExport> = exports.iter().map(AppliedExport::of).collect();
    applied.sort_by_key(|a| (a.incremental, a.from_time.clone(), a.to_time.clone(), a.export_id.clone()));
    RunState {
        version: 1,
        table_arn: exports.iter().find(|e| e.window.is_none()).and_then(|e| e.table_arn.clone()),
        key_attributes: key_attributes.to_vec(),
        mapping_hash,
        applied,
        delta_versions: Default::default(),
    }
}

/// What incremental exports `named` are to an output holding `prev` (at `out`): refused when one
/// ends before what the output covers (applying it would undo newer changes), a no-op when
/// every one is already applied, else something to apply.
pub fn compare_named(prev: &RunState, named: &[AppliedExport], out: &str) -> Result<Compared, StateError> {
    let fmt = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    if let Some((p, last)) = latest(prev) {
        for n in named {
            if let Some(t) = n.covers_until()
                && t < p
            {
                return Err(StateError::Older {
                    out: out.to_owned(),
                    named: fmt(t),
                    applied: fmt(p),
                    last: last.export_id.clone(),
                });
            }
        }
    }
    let held =
        |a: &AppliedExport| prev.applied.iter().any(|p| p.export_id == a.export_id && p.manifest_md5 == a.manifest_md5);
    Ok(if named.iter().all(held) { Compared::AlreadyApplied } else { Compared::New })
}

/// The export of `s` that covers the table the latest.
pub fn last_applied(s: &RunState) -> Option<&AppliedExport> {
    latest(s).map(|(_, a)| a)
}

/// Refuses to go on from `prev` with another mapping than the one it was made with.
pub fn check_mapping(prev: &RunState, next: &RunState, out: &str) -> Result<(), StateError> {
    if prev.mapping_hash == next.mapping_hash {
        return Ok(());
    }
    let name = |h: &Option<String>| match h {
        Some(h) => format!("the mapping whose hash is `{h}`"),
        None => "no mapping".to_owned(),
    };
    Err(StateError::MappingChanged {
        out: out.to_owned(),
        was: name(&prev.mapping_hash),
        now: name(&next.mapping_hash),
    })
}

/// The state of the local output `out`, `None` when it has none.
pub fn read_local(out: &Path) -> Result<Option<RunState>, StateError> {
    use std::io::Read as _;
    let path = out.join(STATE_FILE);
    let display = path.display().to_string();
    let mut bytes = Vec::new();
    match std::fs::File::open(&path) {
        Ok(f) => f
            .take(MAX_STATE_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|source| StateError::Io { path: display.clone(), source })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StateError::Io { path: display, source }),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| StateError::Invalid { path: display, message: e.to_string() })
}

/// What a run's exports are to an output's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compared {
    /// Something to apply.
    New,
    /// Every export named is already applied: nothing to do.
    AlreadyApplied,
}

/// Compares the state a run would publish (`next`) with the output's (`prev`, at `out`).
pub fn compare(prev: &RunState, next: &RunState, out: &str) -> Result<Compared, StateError> {
    if prev.table_arn != next.table_arn {
        return Ok(Compared::New);
    }
    let held =
        |a: &AppliedExport| prev.applied.iter().any(|p| p.export_id == a.export_id && p.manifest_md5 == a.manifest_md5);
    if next.applied.iter().all(held) {
        return Ok(Compared::AlreadyApplied);
    }
    let until = latest;
    if let (Some((p, last)), Some((n, _))) = (until(prev), until(next))
        && n < p
    {
        let fmt = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        return Err(StateError::Older {
            out: out.to_owned(),
            named: fmt(n),
            applied: fmt(p),
            last: last.export_id.clone(),
        });
    }
    Ok(Compared::New)
}

/// The export of `s` that covers the table the latest, and until when.
fn latest(s: &RunState) -> Option<(chrono::DateTime<chrono::Utc>, &AppliedExport)> {
    s.applied.iter().filter_map(|a| a.covers_until().map(|t| (t, a))).max_by_key(|(t, _)| *t)
}

/// Base64 MD5 over the mapping files' bytes, in order; `None` when one cannot be read.
pub fn mapping_hash(files: &[std::path::PathBuf]) -> Option<String> {
    let texts = files.iter().map(std::fs::read).collect::<Result<Vec<_>, _>>().ok()?;
    Some(mapping_hash_of(texts.iter().map(Vec::as_slice)))
}

/// [`mapping_hash`] of the mapping files' bytes, in load order.
pub fn mapping_hash_of<'a>(texts: impl IntoIterator<Item = &'a [u8]>) -> String {
    use md5::Digest as _;
    let mut h = md5::Md5::new();
    for t in texts {
        h.update(t);
    }
    crate::source::md5_base64_digest(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn applied(id: &str, to: &str) -> AppliedExport {
        AppliedExport {
            export_id: id.into(),
            incremental: true,
            export_time: None,
            from_time: Some("2026-01-14T10:00:00Z".into()),
            to_time: Some(to.into()),
            output_view: None,
            item_count: 1,
            manifest_md5: format!("md5-{id}"),
        }
    }

    fn state(a: Vec<AppliedExport>) -> RunState {
        RunState {
            version: 1,
            table_arn: Some("t".into()),
            key_attributes: vec![],
            mapping_hash: None,
            applied: a,
            delta_versions: Default::default(),
        }
    }

    #[test]
    fn a_compacted_export_stands_for_the_exports_the_output_applied() {
        let full =
            AppliedExport { incremental: false, from_time: None, export_time: Some("t0".into()), ..applied("f", "") };
        let prev =
            state(vec![full.clone(), applied("a", "2026-01-14T10:30:00Z"), applied("b", "2026-01-14T11:00:00Z")]);
        let compacted = applied(&format!("{COMPACTED_PREFIX}1-x"), "2026-01-14T11:00:00Z");
        // Read: the full export, the compacted one, then `c` (and `b` again, named after a crash).
        let next = state(vec![
            full.clone(),
            compacted,
            applied("b", "2026-01-14T11:00:00Z"),
            applied("c", "2026-01-14T12:00:00Z"),
        ]);
        let ids: Vec<String> = with_held(next, &prev).applied.into_iter().map(|a| a.export_id).collect();
        assert_eq!(ids, ["f", "a", "b", "c"]);
    }

    #[test]
    fn same_exports_are_a_no_op_and_older_ones_are_refused() {
        let prev = state(vec![applied("a", "2026-01-14T10:30:00Z"), applied("b", "2026-01-14T11:00:00Z")]);
        assert_eq!(compare(&prev, &prev.clone(), "o").unwrap(), Compared::AlreadyApplied);
        let newer = state(vec![applied("a", "2026-01-14T10:30:00Z"), applied("c", "2026-01-14T12:00:00Z")]);
        assert_eq!(compare(&prev, &newer, "o").unwrap(), Compared::New);
        let older = state(vec![applied("z", "2026-01-14T10:45:00Z")]);
        let e = compare(&prev, &older, "o").unwrap_err();
        assert!(matches!(e, StateError::Older { .. }) && e.to_string().contains("export `b`"), "{e}");
        // An export with the same id but other manifest bytes is not the one applied.
        let mut edited = prev.clone();
        edited.applied[1].manifest_md5 = "other".into();
        assert_eq!(compare(&prev, &edited, "o").unwrap(), Compared::New);
        let json = serde_json::to_string(&prev).unwrap();
        assert_eq!(serde_json::from_str::<RunState>(&json).unwrap(), prev);
    }

    #[test]
    fn named_exports_onto_an_output() {
        let prev = state(vec![applied("a", "2026-01-14T10:30:00Z"), applied("b", "2026-01-14T11:00:00Z")]);
        // The last export again: a no-op; with a new one: something to apply.
        assert_eq!(
            compare_named(&prev, &[applied("b", "2026-01-14T11:00:00Z")], "o").unwrap(),
            Compared::AlreadyApplied
        );
        let c = applied("c", "2026-01-14T12:00:00Z");
        assert_eq!(compare_named(&prev, &[applied("b", "2026-01-14T11:00:00Z"), c], "o").unwrap(), Compared::New);
        // An export applied before the last one is older than the output, applied or not.
        let e = compare_named(&prev, &[applied("a", "2026-01-14T10:30:00Z")], "o").unwrap_err();
        assert!(matches!(e, StateError::Older { .. }) && e.to_string().contains("export `b`"), "{e}");
        assert_eq!(last_applied(&prev).map(|a| a.export_id.as_str()), Some("b"));
        // Another mapping, or none where there was one, is refused with a hint.
        let mapped = RunState { mapping_hash: Some("h1".into()), ..prev.clone() };
        assert!(check_mapping(&mapped, &mapped.clone(), "o").is_ok());
        for other in [None, Some("h2".to_owned())] {
            let e = check_mapping(&mapped, &RunState { mapping_hash: other, ..prev.clone() }, "o").unwrap_err();
            assert!(matches!(e, StateError::MappingChanged { .. }) && e.hint().is_some(), "{e}");
        }
    }
}

//! Applying incremental exports onto an existing output (`etl unwind INC… --out DIR`), and
//! keeping in every output what such a later apply needs.
//!
//! Every local output made from DynamoDB exports keeps them under `_etl/base/`, byte for byte in
//! DynamoDB's own layout (`AWSDynamoDB/<ExportId>/manifest-*` and the data files at their
//! manifest keys), so anything that reads an export can read it, and their checksums are
//! verified again on every later read. An apply is then the ordinary chain run over the exports
//! of `DIR/_etl/base` and the exports named ([`prepare`]): the same checks (one table, no gap,
//! `--allow-gap`), the same reduction, the same bytes as the whole chain unwound in one run,
//! published through the same staged commit under the same lock. What is new is only the
//! comparison with the output's state (no-op, older refused, same mapping) and a report counted
//! relative to the previous output ([`super::chain::Onto`]).
//!
//! This module decides which exports a run reads and copies files through the sink; it never
//! reads a data file's content, and never writes outside the sink's staged output.

use std::path::Path;
use std::time::Instant;

use super::UnwindError;
use super::chain::Onto;
use crate::sink::{Sink, SinkError};
use crate::source::chain::{Chain, ChainError, export_id};
use crate::source::{Input, Plan, SourceError};
use crate::state::{self, AppliedExport, Compared};
use crate::store::{Location, Target};

/// Where an output keeps the exports it was made from.
pub const BASE_DIR: &str = "_etl/base";

/// The side files of an export folder, copied when present.
const EXPORT_FILES: [&str; 7] = [
    "manifest-summary.json",
    "manifest-summary.md5",
    "manifest-summary.checksum",
    "manifest-files.json",
    "manifest-files.md5",
    "manifest-files.checksum",
    "_started",
];

/// Why incremental exports cannot be applied onto an output.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "`{out}` holds no `_etl/base/` (it was made by an older etl, or not from a DynamoDB export), so there is nothing to apply incremental exports to"
    )]
    NoBase { out: String },
}

impl ApplyError {
    pub fn hint(&self) -> Option<String> {
        match self {
            ApplyError::NoBase { .. } => Some(
                "unwind the full export with the incremental exports in one run (`etl unwind FULL INC1 INC2 … --out DIR`); the output then keeps `_etl/base/` and later exports can be applied to it alone".into(),
            ),
        }
    }
}

/// When `plan` holds incremental exports only and the local target is an etl output, the plan
/// of the output's kept exports followed by the exports named that it does not hold yet, and
/// what the output held. Otherwise `plan` unchanged and `None`.
pub fn prepare(plan: Plan, target: &Target, spool: &Path, settings: &super::UnwindSettings) -> ApplyPlan {
    let Target::Path(out) = target else { return Ok((plan, None)) };
    if !plan.only_exports() || plan.exports.iter().any(|e| e.window.is_none()) {
        return Ok((plan, None));
    }
    if !out.join(crate::sink::local::RUN_REPORT).is_file() {
        // Not an output: the chain check refuses incremental exports without a full one.
        return Ok((plan, None));
    }
    let out_text = out.display().to_string();
    let base_root = out.join(BASE_DIR);
    if !base_root.join("AWSDynamoDB").is_dir() {
        return Err(ApplyError::NoBase { out: out_text }.into());
    }
    let base = crate::source::resolve(&[Location::Path(base_root)], &settings.aws, &settings.scan, spool)?;
    let recorded = state::read_local(out)?;
    if let Some(prev) = &recorded {
        let hash = settings.mapping.as_deref().and_then(|m| state::mapping_hash(&m.files));
        let next = state::RunState { mapping_hash: hash, ..prev.clone() };
        state::check_mapping(prev, &next, &out_text)?;
    }
    let prev = recorded.unwrap_or_else(|| state::of_exports(&base.exports, &[], None));
    let named: Vec<AppliedExport> = plan.exports.iter().map(AppliedExport::of).collect();
    if state::compare_named(&prev, &named, &out_text)? == Compared::AlreadyApplied {
        let ids = named.iter().map(|a| format!("`{}`", a.export_id)).collect::<Vec<_>>();
        return Err(UnwindError::UpToDate {
            out: out_text,
            exports: format!("export{} {}", if ids.len() == 1 { "" } else { "s" }, ids.join(", ")),
        });
    }
    let held: Vec<(String, String)> = base.exports.iter().map(|e| (export_id(e), e.summary_md5.clone())).collect();
    let named = plan.retain_exports(|e| !held.iter().any(|(id, md5)| *id == export_id(e) && *md5 == e.summary_md5));
    let previous_export = state::last_applied(&prev).map(|a| a.export_id.clone());
    let mut merged = base;
    let first_new = merged.exports.len();
    merged.append(named);
    let new_exports = (first_new..merged.exports.len()).collect();
    Ok((merged, Some(Onto { new_exports, previous_export })))
}

/// Orders the chain a run applies. Onto an existing output, gaps before the exports it already
/// held were refused or allowed (and reported) when they were applied: only gaps before the new
/// exports are checked and reported again.
pub fn order(plan: &Plan, onto: Option<&Onto>, allow_gap: bool) -> Result<Option<Chain>, ChainError> {
    let Some(o) = onto else { return crate::source::chain::order(plan, allow_gap) };
    let Some(mut c) = crate::source::chain::order(plan, true)? else { return Ok(None) };
    let new_ids: Vec<String> = o.new_exports.iter().map(|&i| export_id(&plan.exports[i])).collect();
    c.gaps.retain(|g| new_ids.contains(&g.before));
    if !allow_gap && let Some(g) = c.gaps.first() {
        return Err(ChainError::Gap(g.clone()));
    }
    Ok(Some(c))
}

/// The plan a run reads, and what the output it is applied onto held.
pub type ApplyPlan = Result<(Plan, Option<Onto>), UnwindError>;

/// What [`keep_base`] kept.
#[derive(Debug, Clone, Copy, Default)]
pub struct Kept {
    pub files: u64,
    pub bytes: u64,
    pub millis: u64,
}

/// Copies every export of `plan` into the output's `_etl/base/` through `sink`, unchanged, before
/// anything is read, and points each data file's input at its kept copy: the bytes the run
/// reads and verifies against the manifests are the bytes kept. The files of exports read from
/// the previous output's own `_etl/base/` (at `out`) are hard-linked, the others copied. `None`
/// (nothing kept, nothing changed) when the plan is not made of local exports only, or the sink
/// keeps no files. A data file gone before it was kept fails as it would have failed reading.
pub fn keep_base(plan: &mut Plan, sink: &dyn Sink, out: Option<&Path>) -> Result<Option<Kept>, UnwindError> {
    let local = plan.files.iter().all(|f| matches!(f.input, Input::Path(_)));
    if !plan.only_exports() || !local {
        return Ok(None);
    }
    let started = Instant::now();
    let previous = out.map(|o| o.join(BASE_DIR));
    let mut kept = Kept::default();
    for e in 0..plan.exports.len() {
        let dir = Path::new(&plan.exports[e].export_dir).to_owned();
        let Some(root) = dir.parent().and_then(Path::parent).map(Path::to_owned) else { return Ok(None) };
        let Ok(dir_rel) = dir.strip_prefix(&root) else { return Ok(None) };
        let link = previous.as_deref().is_some_and(|p| dir.starts_with(p));
        let mut keep = |rel: &Path, from: &Path| -> Result<Option<std::path::PathBuf>, SinkError> {
            let rel = rel.to_string_lossy().replace('\\', "/");
            let to = sink.keep(&format!("{BASE_DIR}/{rel}"), from, link)?;
            if to.is_some() {
                kept.files += 1;
                kept.bytes += std::fs::metadata(from).map(|m| m.len()).unwrap_or(0);
            }
            Ok(to)
        };
        for name in EXPORT_FILES {
            let from = dir.join(name);
            if from.is_file() && keep(&dir_rel.join(name), &from)?.is_none() {
                return Ok(None);
            }
        }
        for i in plan.exports[e].files.clone() {
            let f = &plan.files[i];
            let (Input::Path(from), Ok(rel)) = (&f.input, Path::new(&f.display).strip_prefix(&root)) else {
                return Err(UnwindError::Internal {
                    message: format!("data file `{}` is not under its export's root `{}`", f.display, root.display()),
                });
            };
            let to = match keep(rel, from) {
                Ok(Some(to)) => to,
                Ok(None) => return Ok(None),
                Err(SinkError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    return Err(SourceError::VanishedDataFile { path: f.display.clone() }.into());
                }
                Err(e) => return Err(e.into()),
            };
            plan.files[i].input = Input::Path(to);
        }
    }
    kept.millis = started.elapsed().as_millis() as u64;
    Ok(Some(kept))
}

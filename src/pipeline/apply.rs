//! Applying incremental exports onto an existing output (`etl unwind INC… --out DIR`), and
//! keeping in every output what such a later apply needs.
//!
//! Every output made from DynamoDB exports (local exports into a local output; local or
//! `s3://` exports into an `s3://` output) keeps them under `_etl/base/` in DynamoDB's own layout
//! (`AWSDynamoDB/<ExportId>/manifest-*` and the data files at their manifest keys), so anything
//! that reads an export can read it, and their checksums are verified again on every later read:
//! the full export byte for byte, and a chain's incremental exports compacted into one export
//! etl writes ([`keep_compacted`], [`super::compact`]). An apply is then the ordinary chain run over the exports
//! the output holds and the exports named ([`prepare`]): the same checks (one table, no gap,
//! `--allow-gap`), the same reduction, the same bytes as the whole chain unwound in one run,
//! published through the same commit (staged under a lock locally; on an object store, the
//! conditional PUT of `run.json` on the head read when the run started). What is new is only
//! the comparison with the output's state (no-op, older refused, same mapping) and a report
//! counted relative to the previous output ([`super::chain::Onto`]).
//!
//! On an object store, `_etl/base/` is shared by the runs (S3 renames nothing): exports are
//! copied there before they are read (server-side within the bucket), a run that loses its
//! commit leaves its copies, and an apply reads only the exports the committed `run.json` lists
//! (`exports`), each from its folder, never by listing `_etl/base/`.
//!
//! This module decides which exports a run reads and copies files through the sink; it never
//! reads a data file's content, and never writes outside the sink's staged output.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use object_store::ObjectStoreExt as _;
use object_store::path::Path as ObjPath;

use super::UnwindError;
use super::chain::Onto;
use super::pool;
use crate::aws::AwsOptions;
use crate::normalize::identity::IdentityKeys;
use crate::sink::manifest::FileLayout;
use crate::sink::{RunManifest, Sink, SinkError};
use crate::source::chain::{Chain, ChainError, export_id, same_export};
use crate::source::object::ObjectRef;
use crate::source::{DataFile, Input, Plan, SourceError};
use crate::state::{self, AppliedExport, Compared, RunState};
use crate::store::{Location, ObjectUrl, Target};

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
    /// The kept copy of an export is not the export the committed run was made from (another
    /// export of the same folder name was kept over it).
    #[error(
        "`{out}` was made from export `{export}`, but `{kept}` holds another export (its `manifest-summary.json` differs), so the exports the output holds cannot be read again"
    )]
    BaseChanged { out: String, export: String, kept: String },
    /// Another run committed the object-store output after this one read its head: the
    /// compacted export the head listed went with that commit.
    #[error(
        "`{out}` was published by another run while this run was starting (the compacted export `{export}` the output kept went with that commit); this run changed nothing"
    )]
    Replaced { out: String, export: String },
}

impl ApplyError {
    /// Another run changed the output first.
    pub fn is_concurrent_run(&self) -> bool {
        matches!(self, ApplyError::Replaced { .. })
    }

    pub fn hint(&self) -> Option<String> {
        match self {
            ApplyError::Replaced { .. } => {
                Some("run it again: it applies onto the output the other run published (or finds nothing to apply)".into())
            }
            ApplyError::NoBase { .. } | ApplyError::BaseChanged { .. } => Some(
                "unwind the full export with the incremental exports in one run (`etl unwind FULL INC1 INC2 … --out DIR`); the output then keeps `_etl/base/` and later exports can be applied to it alone".into(),
            ),
        }
    }
}

/// [`UnwindError::UpToDate`]: the output `out`, which `sink` writes, already holds the exports
/// `ids`. What killed runs left in it is removed first ([`Sink::tidy`]), as the run would have.
fn up_to_date<'a>(sink: &dyn Sink, out: String, ids: impl ExactSizeIterator<Item = &'a str>) -> UnwindError {
    match sink.tidy() {
        Ok(0) => {}
        Ok(n) => tracing::info!(objects = n, "removed what killed runs left"),
        Err(e) => tracing::warn!(error = %e, "cannot remove what killed runs left; the next run will"),
    }
    UnwindError::up_to_date(out, ids)
}

/// Refuses with [`UnwindError::UpToDate`] (exit 0, nothing done) when the output of `settings`
/// already holds every export of the chain state `next`, and the run may skip it
/// ([`super::may_skip`]: the same options for its files, the output within this run's
/// policies); an older chain is refused as [`state::compare`] says. Otherwise the run writes
/// the output again.
pub fn refuse_up_to_date(
    settings: &super::UnwindSettings,
    layout: &FileLayout,
    sink: &dyn Sink,
    next: &RunState,
) -> Result<(), UnwindError> {
    let out = settings.target.to_string();
    let Some(previous) = previous_manifest(&settings.target, sink)? else { return Ok(()) };
    if holds_chain(&previous, settings, layout, next)? {
        return Err(up_to_date(sink, out, next.applied.iter().map(|a| a.export_id.as_str())));
    }
    Ok(())
}

/// `previous` (the committed run of the output of `settings`) already holds every export of
/// the chain state `next`, and a run with `settings` may skip it ([`super::may_skip`]); an
/// older chain is refused as [`state::compare`] says.
pub fn holds_chain(
    previous: &RunManifest,
    settings: &super::UnwindSettings,
    layout: &FileLayout,
    next: &RunState,
) -> Result<bool, UnwindError> {
    let out = settings.target.to_string();
    Ok(match &previous.state {
        Some(prev) => {
            state::compare(prev, next, &out)? == Compared::AlreadyApplied && super::may_skip(previous, settings, layout)
        }
        None => false,
    })
}

/// Refuses with [`UnwindError::UpToDate`] (exit 0, nothing done) a run of a full export alone
/// (`plan`) onto an output that committed that same export alone (its id and summary checksum,
/// and data files of the same names, sizes and promised MD5s, wherever it is read from: a data
/// file replaced or cut since, or a manifest edited, is read again and checked), when the run
/// may skip it ([`super::may_skip`]): a re-run writes nothing.
pub fn refuse_same_export(
    plan: &Plan,
    settings: &super::UnwindSettings,
    layout: &FileLayout,
    sink: &dyn Sink,
) -> Result<(), UnwindError> {
    let Some(previous) = previous_manifest(&settings.target, sink)? else { return Ok(()) };
    if holds_export(plan, &previous, settings, layout) {
        let [export] = plan.exports.as_slice() else { return Ok(()) };
        return Err(up_to_date(sink, settings.target.to_string(), std::iter::once(export_id(export).as_str())));
    }
    Ok(())
}

/// `previous` (the committed run of the output of `settings`) was made from the full export
/// `plan` holds alone, as [`refuse_same_export`] compares them, and a run with `settings` may
/// skip it ([`super::may_skip`]).
pub fn holds_export(
    plan: &Plan,
    previous: &RunManifest,
    settings: &super::UnwindSettings,
    layout: &FileLayout,
) -> bool {
    let [export] = plan.exports.as_slice() else { return false };
    if export.window.is_some() || !plan.only_exports() {
        return false;
    }
    // Each data file by name, size and the MD5 its manifest promises (as the report shows it),
    // wherever the export is now (moved, or downloaded from S3).
    let name = |display: &str| display.rsplit(['/', '\\']).next().unwrap_or(display).to_owned();
    let files = plan.files.iter().map(|f| {
        let md5 = f.expected.as_ref().map(|e| crate::source::integrity::preview(&e.md5_base64));
        (name(&f.display), f.size, md5)
    });
    matches!(previous.exports.as_slice(), [e] if same_export(e, export))
        && previous.state.as_ref().is_none_or(|s| s.applied.len() == 1)
        && files.eq(previous.inputs.iter().map(|i| (name(&i.file), i.bytes, i.md5_expected.clone())))
        && super::may_skip(previous, settings, layout)
}

/// The committed `_etl/run.json` of the output at `target`, if it has one (for an object-store
/// output, as the sink read it when it was opened: the head its commit is conditional on). The
/// output's state is its `state`, never `_etl/state.json`, the copy for people and scripts: a
/// Delta output publishes that copy, and `_etl/base/`, just before `_etl/run.json`, so after a
/// crash between the two they are ahead of what the output committed.
pub(crate) fn previous_manifest(target: &Target, sink: &dyn Sink) -> Result<Option<RunManifest>, UnwindError> {
    match target {
        Target::Path(out) => {
            if !out.join(crate::sink::local::RUN_REPORT).is_file() {
                return Ok(None);
            }
            Ok(Some(RunManifest::read(out).map_err(SinkError::from)?))
        }
        Target::Object(_) => Ok(sink.previous().cloned()),
    }
}

/// When `plan` holds incremental exports only and the target is an etl output, the plan of the
/// output's kept exports followed by the exports named that it does not hold yet, and what the
/// output held. Otherwise `plan` unchanged and `None`.
pub fn prepare(
    plan: Plan,
    target: &Target,
    spool: &Path,
    settings: &super::UnwindSettings,
    layout: &FileLayout,
    sink: &dyn Sink,
) -> ApplyPlan {
    if !plan.only_exports() || plan.exports.iter().any(|e| e.window.is_none()) {
        return Ok((plan, None));
    }
    // Not an output: the chain check refuses incremental exports without a full one.
    let out_text = target.to_string();
    let base = match target {
        Target::Path(out) => {
            if !out.join(crate::sink::local::RUN_REPORT).is_file() {
                return Ok((plan, None));
            }
            let base_root = out.join(BASE_DIR);
            if !base_root.join("AWSDynamoDB").is_dir() {
                return Err(ApplyError::NoBase { out: out_text }.into());
            }
            crate::source::resolve(&[Location::Path(base_root)], &settings.aws, &settings.scan, spool)?
        }
        Target::Object(url) => {
            let Some(head) = sink.previous() else { return Ok((plan, None)) };
            object_base(url, head, settings, spool)?
        }
    };
    let committed = previous_manifest(target, sink)?;
    let recorded = committed.as_ref().and_then(|m| m.state.clone());
    if let Some(prev) = &recorded {
        let next = state::RunState { mapping_hash: layout.mapping.clone(), ..prev.clone() };
        state::check_mapping(prev, &next, &out_text)?;
    }
    // An output that recorded no state (made from a full export alone) holds the exports its
    // commit lists; `_etl/base/` may hold more after a crash (see `previous_manifest`).
    let prev = recorded.unwrap_or_else(|| match &committed {
        Some(m) => state::of_exports(&m.exports, &[], None),
        None => state::of_exports(&base.exports, &[], None),
    });
    let named: Vec<AppliedExport> = plan.exports.iter().map(AppliedExport::of).collect();
    // Exports the output holds, named again: nothing to do when they were applied with the
    // options of this run, else the output is written again with this run's.
    if state::compare_named(&prev, &named, &out_text)? == Compared::AlreadyApplied
        && committed.as_ref().is_some_and(|m| super::may_skip(m, settings, layout))
    {
        return Err(up_to_date(sink, out_text, named.iter().map(|a| a.export_id.as_str())));
    }
    let named = plan.retain_exports(|e| !base.exports.iter().any(|k| same_export(k, e)));
    let previous_export = state::last_applied(&prev).map(|a| a.export_id.clone());
    let mut merged = base;
    merged.append(named);
    // New: every export the output's commit does not hold, kept ahead in `_etl/base/` or named.
    // An export etl compacted stands for exports the output applied when its commit lists it.
    let listed = |e: &crate::source::ExportInfo| {
        committed
            .as_ref()
            .is_some_and(|m| m.exports.iter().any(|k| super::compact::is_compacted(k) && same_export(k, e)))
    };
    let applied = |e: &crate::source::ExportInfo| {
        prev.applied.iter().any(|a| a.export_id == export_id(e) && a.manifest_md5 == e.summary_md5) || listed(e)
    };
    let new_exports = (0..merged.exports.len()).filter(|&i| !applied(&merged.exports[i])).collect();
    Ok((merged, Some(Onto { new_exports, previous_export, held: prev, in_place: false })))
}

/// The folder of export `e` relative to its export root (`AWSDynamoDB/<ExportId>`), where an
/// output keeps it under `_etl/base/`; `None` when its folder has no such two last segments.
fn base_folder(e: &crate::source::ExportInfo) -> Option<String> {
    let mut parts = e.export_dir.trim_end_matches(['/', '\\']).rsplit(['/', '\\']);
    let (id, parent) = (parts.next()?, parts.next()?);
    let plain = |s: &str| !s.is_empty() && s != "." && s != "..";
    (plain(id) && plain(parent)).then(|| format!("{parent}/{id}"))
}

/// The exports the committed run of the object-store output at `url` lists, each resolved from
/// its kept copy under `_etl/base/`; refused as [`ApplyError::NoBase`] when one is not there.
fn object_base(
    url: &ObjectUrl,
    head: &RunManifest,
    settings: &super::UnwindSettings,
    spool: &Path,
) -> Result<Plan, UnwindError> {
    let no_base = || UnwindError::from(ApplyError::NoBase { out: url.to_string() });
    if head.exports.is_empty() {
        return Err(no_base());
    }
    let mut base = Plan::default();
    for e in &head.exports {
        let folder = base_folder(e).ok_or_else(no_base)?;
        let key = format!("{}{BASE_DIR}/{folder}/manifest-summary.json", url.dir_prefix());
        let at = Location::Object(ObjectUrl { key, ..url.clone() });
        match crate::source::resolve(&[at], &settings.aws, &settings.scan, spool) {
            Ok(p) if p.exports.iter().all(|k| k.summary_md5 == e.summary_md5) => base.append(p),
            Ok(_) => {
                return Err(ApplyError::BaseChanged {
                    out: url.to_string(),
                    export: export_id(e),
                    kept: url.url_of(&format!("{}{BASE_DIR}/{folder}/", url.dir_prefix())),
                }
                .into());
            }
            Err(SourceError::NotFound { .. }) if super::compact::is_compacted(e) && head_moved(url, head, settings) => {
                return Err(ApplyError::Replaced { out: url.to_string(), export: export_id(e) }.into());
            }
            Err(SourceError::NotFound { .. }) => return Err(no_base()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(base)
}

/// Whether the committed `_etl/run.json` of the object-store output at `url` is no longer
/// `head` (another run committed since it was read).
fn head_moved(url: &ObjectUrl, head: &RunManifest, settings: &super::UnwindSettings) -> bool {
    let key = format!("{}{}", url.dir_prefix(), crate::sink::local::RUN_REPORT);
    let rt = crate::store::io_runtime();
    let now = rt.block_on(async {
        let store = crate::store::open(url, &settings.aws).await.ok()?;
        crate::store::get_if_exists(store.as_ref(), &ObjPath::from(key.as_str())).await.ok()?
    });
    match now.and_then(|b| serde_json::from_slice::<RunManifest>(&b).ok()) {
        Some(m) => m.run_id != head.run_id,
        None => true,
    }
}

/// Orders the chain a run applies. Onto an existing output, gaps and overlaps before the exports
/// it already held were refused or allowed (and reported) when they were applied: only those
/// before the new exports are checked and reported again.
pub fn order(plan: &Plan, onto: Option<&Onto>, allow_gap: bool) -> Result<Option<Chain>, ChainError> {
    let Some(o) = onto else { return crate::source::chain::order(plan, allow_gap) };
    let Some(mut c) = crate::source::chain::order(plan, true)? else { return Ok(None) };
    let new_ids: Vec<String> = o.new_exports.iter().map(|&i| export_id(&plan.exports[i])).collect();
    c.gaps.retain(|g| new_ids.contains(&g.before));
    c.overlaps.retain(|v| new_ids.contains(&v.later));
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

/// What [`keep_base`] did: the exports kept, or why they were not when the run must say so.
#[derive(Debug, Clone, Default)]
pub struct Keeping {
    pub kept: Option<Kept>,
    /// A warning for the run report: the exports could not be kept.
    pub warning: Option<String>,
    /// The data files pass one copies as it reads them (`copy_when_read`).
    pub when_read: Arc<WhenRead>,
}

/// Data files [`keep_base`] left for pass one to copy into the output, each by the worker that
/// reads it, just before it reads the copy ([`WhenRead::copy`]). Copied up front instead, one
/// after the other before anything was read, they kept a core idle for 30-150 ms on a 2M-item
/// export; spread over the read, the copies run beside the decoding. What is read is still what
/// is kept.
#[derive(Debug, Default)]
pub struct WhenRead {
    /// By data file (its index in the plan): its path inside the output (`_etl/base/…`).
    files: HashMap<usize, String>,
    /// Time spent copying, summed over workers.
    nanos: AtomicU64,
}

impl WhenRead {
    /// Keeps data file `i` (`f`) through `sink` if it is one of those left for pass one, and
    /// returns the kept copy to read in its place; `None` for any other file.
    pub fn copy(&self, sink: &dyn Sink, i: usize, f: &DataFile) -> Result<Option<DataFile>, UnwindError> {
        let Some(rel) = self.files.get(&i) else { return Ok(None) };
        let started = Instant::now();
        let Some(to) = sink.keep_input(rel, &f.input, None, false).map_err(|e| keep_failed(e, f))? else {
            return Err(UnwindError::Internal {
                message: format!("the output kept its export's manifests but not the data file `{}`", f.display),
            });
        };
        self.nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(Some(DataFile { input: to, ..f.clone() }))
    }

    /// Milliseconds spent copying, summed over workers.
    pub fn millis(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed) / 1_000_000
    }
}

/// Copies every export of `plan` into the output's `_etl/base/` through `sink`, unchanged, before
/// anything is read, and points each data file's input at its kept copy: the bytes the run
/// reads and verifies against the manifests are the bytes kept. Into a local output: the files of
/// exports read from the previous output's own `_etl/base/` are hard-linked, the other local
/// ones copied, object-store ones downloaded. Into an object-store output, from local exports (uploaded) or
/// object-store ones (copied server-side within the bucket; exports the output already keeps
/// are left as they are). `None` (nothing kept, nothing changed) when the plan is not made of
/// exports only, or of exports this sink cannot keep. A data file gone before it was kept fails
/// as it would have failed reading.
///
/// With `incrementals` false (a chain run, which keeps its incremental exports compacted into
/// one, see [`super::compact`]), only the full export is kept; the incremental exports are read
/// where they are.
///
/// With `copy_when_read` (a run whose pass one reads every data file next), a local export's
/// data files copied into a local output are left to pass one ([`Keeping::when_read`]); its
/// manifests are kept now. Otherwise the files are copied now, by up to `threads` threads.
pub fn keep_base(
    plan: &mut Plan,
    sink: &dyn Sink,
    target: &Target,
    aws: &AwsOptions,
    incrementals: bool,
    threads: usize,
    copy_when_read: bool,
) -> Result<Keeping, UnwindError> {
    let readable = plan.files.iter().all(|f| matches!(f.input, Input::Path(_) | Input::Object(_)));
    let out_url = match target {
        Target::Object(u) => Some(u),
        Target::Path(_) => None,
    };
    if !plan.only_exports() || !readable {
        return Ok(Keeping::default());
    }
    // Every export is checked before anything is kept, so a run keeps all or nothing.
    if plan.exports.iter().any(|e| base_folder(e).is_none()) {
        return Ok(Keeping::default());
    }
    // On an object store, `_etl/base/` outlives runs: a folder of the same name holding another
    // export (a different `manifest-summary.json`) is never written over.
    if let Some(url) = out_url
        && let Some(clash) = base_clash(plan, url, aws)?
    {
        return Ok(Keeping {
            kept: None,
            when_read: Arc::default(),
            warning: Some(format!(
                "the exports read were not kept: `{clash}` holds another export of the same name; incremental exports cannot be applied onto this output (unwind them with the full export in one run into a new `--out`)"
            )),
        });
    }
    let started = Instant::now();
    let previous = match target {
        Target::Path(o) => Some(o.join(BASE_DIR)),
        Target::Object(_) => None,
    };
    let mut kept = Kept::default();
    // Only a local output keeps a local copy that pass one can read.
    let mut when_read = (copy_when_read && previous.is_some()).then(WhenRead::default);
    for e in 0..plan.exports.len() {
        if !incrementals && plan.exports[e].window.is_some() {
            continue;
        }
        let k = match ObjectUrl::parse(&plan.exports[e].export_dir) {
            Some(Ok(url)) => keep_object_export(plan, e, &url, sink, aws)?,
            Some(Err(_)) => None,
            None => keep_local_export(plan, e, sink, previous.as_deref(), threads, when_read.as_mut())?,
        };
        let Some(k) = k else { return Ok(Keeping::default()) };
        kept.files += k.files;
        kept.bytes += k.bytes;
    }
    kept.millis = started.elapsed().as_millis() as u64;
    Ok(Keeping { kept: Some(kept), warning: None, when_read: Arc::new(when_read.unwrap_or_default()) })
}

/// The kept folder of the object-store output at `url` that holds another export than the one of
/// `plan` of the same folder name, if one does.
fn base_clash(plan: &Plan, url: &ObjectUrl, aws: &AwsOptions) -> Result<Option<String>, UnwindError> {
    let rt = crate::store::io_runtime();
    let store = rt.block_on(crate::store::open(url, aws)).map_err(SourceError::from)?;
    for e in &plan.exports {
        let Some(folder) = base_folder(e) else { continue };
        let key = format!("{}{BASE_DIR}/{folder}/manifest-summary.json", url.dir_prefix());
        let shown = url.url_of(&key);
        let got = rt.block_on(crate::store::get_if_exists(store.as_ref(), &ObjPath::from(key.as_str())));
        match got {
            Ok(Some(bytes)) if crate::source::md5_base64(&bytes) != e.summary_md5 => {
                return Ok(Some(url.url_of(&format!("{}{BASE_DIR}/{folder}/", url.dir_prefix()))));
            }
            Ok(_) => {}
            Err(e) => return Err(crate::source::object::describe_error(&shown, &e).into()),
        }
    }
    Ok(None)
}

/// A file kept: where to read it now, and its size.
type KeptFile = (Input, u64);

/// Where a local export's file goes in the output: `rel` (its path under the exports' root)
/// under `_etl/base/`, with `/` separators.
fn base_path(rel: &Path) -> String {
    format!("{BASE_DIR}/{}", rel.to_string_lossy().replace('\\', "/"))
}

/// The sink could not keep the local data file `f`: gone since the run was planned, the export
/// changed under the run (as reading it would have said); anything else is the sink's failure.
fn keep_failed(e: SinkError, f: &DataFile) -> UnwindError {
    match e {
        SinkError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            SourceError::VanishedDataFile { path: f.display.clone() }.into()
        }
        e => e.into(),
    }
}

/// Keeps export `e` of `plan`, a local folder; `None` when the sink keeps no such file. With
/// `when_read`, data files that are not linked are left there for pass one to copy. Otherwise
/// the data files are copied by up to `threads` threads at once: a copy is the kernel's memory
/// copy, so it takes half the time on two cores, and nothing else runs yet. A failure is the
/// first in the export's file order, whichever thread met it first.
fn keep_local_export(
    plan: &mut Plan,
    e: usize,
    sink: &dyn Sink,
    previous: Option<&Path>,
    threads: usize,
    when_read: Option<&mut WhenRead>,
) -> Result<Option<Kept>, UnwindError> {
    let mut kept = Kept::default();
    let dir = Path::new(&plan.exports[e].export_dir).to_owned();
    let Some(root) = dir.parent().and_then(Path::parent).map(Path::to_owned) else { return Ok(None) };
    let Ok(dir_rel) = dir.strip_prefix(&root) else { return Ok(None) };
    let link = previous.is_some_and(|p| dir.starts_with(p));
    let keep = |rel: &Path, from: &Path| -> Result<Option<KeptFile>, SinkError> {
        let to = sink.keep_input(&base_path(rel), &Input::Path(from.to_owned()), None, link)?;
        Ok(to.map(|to| (to, std::fs::metadata(from).map(|m| m.len()).unwrap_or(0))))
    };
    for name in EXPORT_FILES {
        let from = dir.join(name);
        if !from.is_file() {
            continue;
        }
        let Some((_, bytes)) = keep(&dir_rel.join(name), &from)? else { return Ok(None) };
        kept.files += 1;
        kept.bytes += bytes;
    }
    let mut files = Vec::with_capacity(plan.exports[e].files.len());
    for i in plan.exports[e].files.clone() {
        let f = &plan.files[i];
        let (Input::Path(from), Ok(rel)) = (&f.input, Path::new(&f.display).strip_prefix(&root)) else {
            return Err(UnwindError::Internal {
                message: format!("data file `{}` is not under its export's root `{}`", f.display, root.display()),
            });
        };
        files.push((i, rel.to_owned(), from.clone()));
    }
    // Files linked from the previous output cost nothing now; copies are left to pass one.
    if let Some(w) = when_read.filter(|_| !link) {
        for (i, rel, from) in files {
            // Gone already: pass one's copy says so, as it would have said it here.
            kept.bytes += std::fs::metadata(&from).map(|m| m.len()).unwrap_or(0);
            kept.files += 1;
            w.files.insert(i, base_path(&rel));
        }
        return Ok(Some(kept));
    }
    // Every copy is tried and its result kept, so the failure reported is the first in file
    // order, not the first in time.
    let done = pool::run(
        threads,
        files.len(),
        |_| Ok::<_, UnwindError>(Vec::new()),
        |done, k, _| {
            let (i, rel, from) = &files[k];
            done.push((*i, keep(rel, from)));
            Ok(())
        },
    )?;
    let mut results: Vec<(usize, Result<Option<KeptFile>, SinkError>)> = done.into_iter().flatten().collect();
    results.sort_by_key(|(i, _)| *i);
    for (i, result) in results {
        let Some((to, bytes)) = result.map_err(|e| keep_failed(e, &plan.files[i]))? else { return Ok(None) };
        kept.files += 1;
        kept.bytes += bytes;
        plan.files[i].input = to;
    }
    Ok(Some(kept))
}

/// Keeps export `e` of `plan`, in an object store at `url` (its `AWSDynamoDB/<ExportId>`
/// folder); `None` when the sink keeps no such object.
fn keep_object_export(
    plan: &mut Plan,
    e: usize,
    url: &ObjectUrl,
    sink: &dyn Sink,
    aws: &AwsOptions,
) -> Result<Option<Kept>, UnwindError> {
    let mut kept = Kept::default();
    let dir = url.key.trim_end_matches('/').to_owned();
    let Some(folder) = base_folder(&plan.exports[e]) else { return Ok(None) };
    let root = dir.strip_suffix(&folder).unwrap_or_default().to_owned();
    let root_url = url.url_of(&root);
    let store = crate::store::io_runtime().block_on(crate::store::open(url, aws)).map_err(SourceError::from)?;
    for name in EXPORT_FILES {
        let key = format!("{dir}/{name}");
        let shown = url.url_of(&key);
        let p = ObjPath::from(key.as_str());
        let size = match crate::store::io_runtime().block_on(store.head(&p)) {
            Ok(m) => m.size,
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(crate::source::object::describe_error(&shown, &e).into()),
        };
        let from = Input::Object(ObjectRef { store: store.clone(), key: p });
        let from_url = ObjectUrl { key, ..url.clone() };
        if sink.keep_input(&format!("{BASE_DIR}/{folder}/{name}"), &from, Some(&from_url), false)?.is_none() {
            return Ok(None);
        }
        kept.files += 1;
        kept.bytes += size;
    }
    for i in plan.exports[e].files.clone() {
        let f = &plan.files[i];
        let rel = f.display.strip_prefix(&root_url).filter(|r| !r.is_empty() && !r.starts_with('/'));
        let (Some(rel), Some(Ok(from_url))) = (rel, ObjectUrl::parse(&f.display)) else {
            return Err(UnwindError::Internal {
                message: format!("data file `{}` is not under its export's root `{root_url}`", f.display),
            });
        };
        let to = match sink.keep_input(&format!("{BASE_DIR}/{rel}"), &f.input, Some(&from_url), false) {
            Ok(Some(to)) => to,
            Ok(None) => return Ok(None),
            Err(SinkError::Store(s)) if s.kind == crate::store::ObjectErrorKind::NotFound => {
                return Err(SourceError::VanishedDataFile { path: f.display.clone() }.into());
            }
            Err(e) => return Err(e.into()),
        };
        kept.files += 1;
        kept.bytes += f.size;
        plan.files[i].input = to;
    }
    Ok(Some(kept))
}

/// Keeps the chain `applier` read compacted into one incremental export ([`super::compact`]),
/// written under `scratch` and put into the output's `_etl/base/` through `sink`, and returns
/// it as the run's manifest lists it (its folder relative to the output). `None` when the
/// chain had no final change to keep and no incremental export.
pub fn keep_compacted(
    applier: &super::chain::Applier,
    plan: &Plan,
    read: &super::chain::ChainRead,
    sink: &dyn Sink,
    settings: &super::UnwindSettings,
    scratch: &Path,
) -> Result<Option<KeptCompacted>, UnwindError> {
    let started = Instant::now();
    let Some(covers) = applier.covers(plan) else { return Ok(None) };
    let root = scratch.join("compacted");
    let c = super::compact::write(&root, &covers, &applier.compacted(read), settings.threads)?;
    for rel in &c.files {
        let kept = sink.keep_input(&format!("{BASE_DIR}/{rel}"), &Input::Path(root.join(rel)), None, false)?;
        if kept.is_none() {
            return Err(UnwindError::Internal { message: format!("the output did not keep `{BASE_DIR}/{rel}`") });
        }
    }
    let dir = super::compact::export_dir(&root, &c);
    let mut resolved =
        crate::source::resolve(&[Location::Path(dir)], &settings.aws, &settings.scan, &root.join("spool"))?;
    let Some(mut e) = resolved.exports.pop() else {
        return Err(UnwindError::Internal { message: format!("the compacted export `{}` did not resolve", c.id) });
    };
    // Where the output keeps it, relative to the output (the same in every output of the chain).
    e.export_dir = format!("{BASE_DIR}/AWSDynamoDB/{}", c.id);
    e.files = 0..0;
    let millis = started.elapsed().as_millis() as u64;
    tracing::info!(export = %c.id, records = c.records, ms = millis, "kept the incremental exports compacted into one");
    Ok(Some(KeptCompacted { export: e, millis }))
}

/// The keys the new exports changed as each mapped table finds its rows
/// ([`crate::normalize::identity::changed_keys`]), worked out on `threads` workers a run of keys
/// each and put back together in order: the same result as one call over every key. Each key is
/// decoded and matched against every entity's key templates, which took about 70 ms of one core
/// for the 24K keys of a 1% apply of 2M items while the other core waited.
pub fn changed_identities(
    mapping: &crate::mapping::Mapping,
    key_names: &[String],
    keys: &[String],
    threads: usize,
) -> Result<std::collections::BTreeMap<String, Result<IdentityKeys, String>>, UnwindError> {
    use crate::normalize::identity::changed_keys;
    /// Keys per task: a few tasks per worker, each large enough to outweigh its start.
    const RUN: usize = 2048;
    let runs: Vec<&[String]> = keys.chunks(RUN).collect();
    if runs.len() <= 1 || threads <= 1 {
        return Ok(changed_keys(mapping, key_names, keys));
    }
    let parts = pool::run::<_, UnwindError>(
        threads,
        runs.len(),
        |_| Ok(Vec::new()),
        |out, i, _| {
            out.push((i, changed_keys(mapping, key_names, runs[i])));
            Ok(())
        },
    )?;
    let mut parts: Vec<_> = parts.into_iter().flatten().collect();
    parts.sort_by_key(|(i, _)| *i);
    let mut all = std::collections::BTreeMap::new();
    for (_, part) in parts {
        for (table, found) in part {
            match all.entry(table) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(found);
                }
                // A table's columns, or its reason for having none, depend on the mapping only.
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    if let (Ok(held), Ok(more)) = (o.get_mut(), found) {
                        held.keys.extend(more.keys);
                    }
                }
            }
        }
    }
    Ok(all)
}

/// The compacted export a run kept ([`keep_compacted`]).
#[derive(Debug)]
pub struct KeptCompacted {
    /// As the run's manifest lists it.
    pub export: crate::source::ExportInfo,
    /// Writing and keeping it (part of the run's `timings_ms.keep_base`).
    pub millis: u64,
}

/// The compacted export the committed run of an object-store output lists, if any: the one a
/// run that commits after it replaces ([`drop_replaced_compacted`]).
pub fn listed_compacted(target: &Target, sink: &dyn Sink) -> Option<crate::source::ExportInfo> {
    match target {
        Target::Object(_) => sink.previous()?.exports.iter().find(|e| super::compact::is_compacted(e)).cloned(),
        Target::Path(_) => None,
    }
}

/// After a run onto the object-store output at `target` committed listing `now` (its exports),
/// deletes the compacted export `replaced` the previous commit listed, unless `now` lists it
/// too. A folder output replaced its `_etl/base/` with the commit; on an object store
/// `_etl/base/` is shared by runs, and the compacted export is the one kept file that grows with
/// the chain, so each apply would otherwise leave a copy. A run still reading it started from
/// the replaced commit, so its own conditional commit fails anyway. A failed delete is a
/// warning: the files are only unread.
pub fn drop_replaced_compacted(
    target: &Target,
    replaced: Option<&crate::source::ExportInfo>,
    now: &[crate::source::ExportInfo],
    aws: &AwsOptions,
) {
    let (Target::Object(url), Some(old)) = (target, replaced) else { return };
    let id = export_id(old);
    if now.iter().any(|e| export_id(e) == id) || !super::compact::is_compacted(old) {
        return;
    }
    let prefix = format!("{}{BASE_DIR}/AWSDynamoDB/", url.dir_prefix());
    let mut keys: Vec<String> = super::compact::MANIFEST_FILES.iter().map(|n| format!("{prefix}{id}/{n}")).collect();
    let rt = crate::store::io_runtime();
    let result: Result<(), String> = rt.block_on(async {
        use futures::TryStreamExt as _;
        let store = crate::store::open(url, aws).await.map_err(|e| e.to_string())?;
        // Its data files, `data/<id>-<n>.json.gz`, then the manifests, so a failed delete leaves
        // an export whose manifests still name what it holds.
        let data = ObjPath::from(format!("{prefix}data/").as_str());
        let listed: Vec<object_store::ObjectMeta> =
            store.list(Some(&data)).try_collect().await.map_err(|e| e.to_string())?;
        let mut all: Vec<String> = listed
            .into_iter()
            .map(|m| m.location.to_string())
            .filter(|k| k.strip_prefix(&format!("{prefix}data/{id}-")).is_some_and(|n| n.ends_with(".json.gz")))
            .collect();
        all.append(&mut keys);
        for k in &all {
            match store.delete(&ObjPath::from(k.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(format!("`{}`: {e}", url.url_of(k))),
            }
        }
        Ok(())
    });
    match result {
        Ok(()) => tracing::info!(export = %id, "removed the compacted export the previous run kept"),
        Err(e) => tracing::warn!(export = %id, error = %e, "cannot remove the compacted export the previous run kept"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::local::LocalSink;
    use crate::source::Layout;

    fn data_file(path: &Path) -> DataFile {
        DataFile {
            input: Input::Path(path.to_owned()),
            display: path.display().to_string(),
            gzip: true,
            layout: Layout::ExportLines,
            size: 0,
            expected: None,
        }
    }

    #[test]
    fn pass_one_copies_only_the_files_left_to_it_and_reads_the_copy() {
        let tmp = tempfile::tempdir().unwrap();
        let sink =
            LocalSink::create(&tmp.path().join("out"), false, crate::sink::parquet::writer_properties(1024)).unwrap();
        let (a, b) = (tmp.path().join("a.json.gz"), tmp.path().join("b.json.gz"));
        std::fs::write(&a, b"the bytes of a").unwrap();
        std::fs::write(&b, b"the bytes of b").unwrap();
        let mut when = WhenRead::default();
        when.files.insert(0, format!("{BASE_DIR}/AWSDynamoDB/01/data/a.json.gz"));
        when.files.insert(2, format!("{BASE_DIR}/AWSDynamoDB/01/data/gone.json.gz"));

        // Listed: copied into the staged output, and the copy is what is read.
        let kept = when.copy(&sink, 0, &data_file(&a)).unwrap().expect("file 0 is left to pass one");
        let Input::Path(copy) = &kept.input else { panic!("a local copy: {:?}", kept.input) };
        assert_ne!(copy, &a);
        assert!(copy.ends_with("_etl/base/AWSDynamoDB/01/data/a.json.gz"), "{}", copy.display());
        assert_eq!(std::fs::read(copy).unwrap(), b"the bytes of a");
        assert_eq!(kept.display, a.display().to_string(), "reports still name the export's file");

        // Not listed (linked up front, or not kept at all): read where it is.
        assert!(when.copy(&sink, 1, &data_file(&b)).unwrap().is_none());

        // Listed but gone before its turn: the export changed under the run.
        let gone = tmp.path().join("gone.json.gz");
        match when.copy(&sink, 2, &data_file(&gone)) {
            Err(UnwindError::Source(SourceError::VanishedDataFile { path })) => {
                assert_eq!(path, gone.display().to_string())
            }
            other => panic!("expected a vanished data file, got {other:?}"),
        }
    }

    #[test]
    fn identities_worked_out_on_several_workers_are_those_of_one_pass() {
        let mapping =
            crate::mapping::parse_str(Path::new("ecommerce.toml"), include_str!("../../mappings/ecommerce.toml"))
                .unwrap_or_else(|e| panic!("{e}"));
        let key = |pk: String, sk: String| format!(r#"{{"PK":{{"S":"{pk}"}},"SK":{{"S":"{sk}"}}}}"#);
        // Enough keys for several runs of them, of every entity, with keys no table holds.
        let keys: Vec<String> = (0..7000)
            .map(|i| match i % 6 {
                0 => key(format!("USER#u{i}@example.com"), "PROFILE".into()),
                1 => key(format!("USER#u{i}@example.com"), format!("ORDER#17500{i:05}#ORD-{i}")),
                2 => key(format!("ORDER#ORD-{i}"), format!("ITEM#SKU-{i}")),
                3 => key(format!("PRODUCT#SKU-{i}"), "METADATA".into()),
                4 => key(format!("PRODUCT#SKU-{i}"), format!("REVIEW#17500{i:05}#r{i}@example.com")),
                _ => format!("not a key {i}"),
            })
            .collect();
        let names = vec!["PK".to_owned(), "SK".to_owned()];
        let one = crate::normalize::identity::changed_keys(&mapping, &names, &keys);
        assert!(one.values().all(|t| t.as_ref().is_ok_and(|k| k.keys.len() == keys.len())));
        assert!(one["orders"].as_ref().is_ok_and(|k| k.keys.iter().filter(|r| !r.is_empty()).count() > 1000));
        for threads in [1, 2, 3] {
            assert_eq!(changed_identities(&mapping, &names, &keys, threads).unwrap(), one, "{threads} workers");
        }
        let none = crate::normalize::identity::changed_keys(&mapping, &names, &[]);
        assert_eq!(changed_identities(&mapping, &names, &[], 2).unwrap(), none);
    }
}

//! Sharded runs: one unwind split over N processes on any number of machines (a job array),
//! published by one `etl commit`.
//!
//! ```text
//! etl unwind SRC --out OUT --shard I/N --phase infer   (N processes) -> _etl/shards/infer-I-of-N.json
//! etl unwind SRC --out OUT --shard I/N                 (N processes) -> _etl/shards/shard-I-of-N/
//! etl commit OUT                                       (once)        -> OUT, as one run would write it
//! ```
//!
//! How the shards agree on the tables' types: the first phase reads each shard's files and
//! records what it saw of every entity (its [`EntityShape`]s, which merge associatively, with
//! first-seen positions in the plan's global file order). The second phase reads the shard's
//! files again, checks that they give the shapes its first phase recorded, merges the N shape
//! files in shard order (the same merge one run does over its workers) and writes its rows with
//! the merged, final schemas. No file is ever rewritten to widen a type, and every shard writes
//! with exactly the schemas one run over every file would infer. The price is reading the input
//! twice.
//!
//! The commit re-resolves the sources (manifests only) and checks that every shard of one run
//! is there once, from the same export and options; then it links the shards' part files into a
//! staged output in shard order, renumbered, and publishes it with one report, as one run
//! would: the plain layout with `run.json` last, or one Delta commit per table. Shards are
//! contiguous runs of the plan's files, so the rows are those of one run, in the same order;
//! only the cuts between part files (and so between row groups) differ, at shard boundaries.
//!
//! A shard whose output already holds what its run would write (as a re-run of one process finds
//! it, [`apply::holds_export`], [`apply::holds_chain`]) reads nothing and leaves a note
//! (`held-I-of-N.json`); the commit of such notes checks again and is a no-op.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::chain::{Applier, ChainRead, TableLabel};
use super::read::{FileStats, ReadResult};
use super::write::Written;
use super::{Assembly, Progress, UnwindError, UnwindSettings, UnwindSummary, apply, read, report, write};
use crate::aws::AwsOptions;
use crate::mapping::infer::EntityShape;
use crate::normalize::{MappedTables, RejectReason};
use crate::schema::diff::OnDrift;
use crate::sink::manifest::FileLayout;
use crate::sink::manifest::{EntityReport, FileReport, MappingReport, TableReport, Timings};
use crate::sink::parquet::{part_path, writer_properties};
use crate::sink::shard::{ShardArea, ShardPlace};
use crate::sink::{self, Format, SinkError, SinkSettings};
use crate::source::chain::{Chain, ChainError};
use crate::source::shard::Shard;
use crate::source::{self, Plan, SourceError};
use crate::store::{Location, Target};

/// The layout version of shard files; a commit refuses others.
const SHARD_FORMAT: u32 = 1;

/// Which half of a sharded run a process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardPhase {
    /// Read the shard's files and record what every entity looks like.
    Infer,
    /// Read them again and write their rows with the schemas all shards agreed on.
    Write,
}

/// `--shard I/N [--phase …]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardRun {
    pub shard: Shard,
    pub phase: ShardPhase,
}

/// Why a sharded run or a commit refused to go on. Nothing was published.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("`--shard` splits exports and data files; `{source_name}` cannot be split between machines")]
    NotFiles { source_name: String },
    #[error(
        "`--shard` splits a full export, alone or with its incremental exports; incremental exports alone are applied onto an output by one process"
    )]
    Chain,
    #[error("shard {shard} cannot write yet: the shape files of shard{} {missing} of {count} are missing from `{dir}`", if .missing.contains(',') { "s" } else { "" })]
    MissingInfer { shard: Shard, missing: String, count: u32, dir: String },
    #[error("`{path}` was written for another run (another export, shard count or options) than shard {shard}")]
    ForeignInfer { shard: Shard, path: String },
    #[error(
        "shard {shard} read different data than its `--phase infer` did (`{path}`): the export changed between the two phases"
    )]
    InputChanged { shard: Shard, path: String },
    #[error("`{out}` holds files that are not an etl output; `etl commit` never publishes shards there")]
    NotEtlOutput { out: String },
    #[error("`{out}` holds no finished shard to commit")]
    NoShards { out: String },
    #[error("`{out}` holds shards of {runs} different runs: {list}")]
    SeveralRuns { out: String, runs: usize, list: String },
    #[error("cannot commit `{out}`: shard{} {missing} of {count} {} not finished", if .missing.contains(',') { "s" } else { "" }, if .missing.contains(',') { "are" } else { "is" })]
    Missing { out: String, missing: String, count: u32 },
    #[error("cannot commit `{out}`: {reason}")]
    Inconsistent { out: String, reason: String },
    #[error("`{path}` is not a shard file etl can read: {message}")]
    Damaged { path: String, message: String },
    #[error(
        "cannot commit `{out}`: its shards found it holding what they would write and wrote nothing, but it no longer holds it"
    )]
    NoLongerHeld { out: String },
}

impl ShardError {
    pub fn hint(&self) -> Option<String> {
        Some(match self {
            ShardError::NotFiles { .. } => "run the unwind in one process, without `--shard`".into(),
            ShardError::Chain => {
                "shard the full export with its incremental exports (`etl unwind FULL INC… --shard I/N`), or apply the incremental exports onto the output with one `etl unwind INC… --out DIR`".into()
            }
            ShardError::MissingInfer { count, .. } => format!(
                "run `etl unwind … --shard I/{count} --phase infer` for every shard first; the write phase needs all of their shapes"
            ),
            ShardError::ForeignInfer { .. } | ShardError::SeveralRuns { .. } => {
                "run every shard with the same sources, options and shard count; remove the other run's files from `_etl/shards/` or run its shards again".into()
            }
            ShardError::InputChanged { .. } => {
                "run every shard's `--phase infer` again, then the write phase, over an export nobody changes".into()
            }
            ShardError::NotEtlOutput { .. } => {
                "choose a new or empty `--out`, or an etl output, for the shards (`--overwrite` replaces an output only in a run of one process)".into()
            }
            ShardError::NoShards { .. } => {
                "run `etl unwind … --out DIR --shard I/N` for every shard (after their `--phase infer`), then commit".into()
            }
            ShardError::Missing { .. } => {
                "run the missing shards (a re-run replaces a shard's earlier attempt), then commit again".into()
            }
            ShardError::Inconsistent { .. } | ShardError::Damaged { .. } | ShardError::NoLongerHeld { .. } => {
                "run the shards again (both phases); a re-run of a shard replaces its earlier attempt".into()
            }
        })
    }

    /// Refusals of what is on disk (exit 1); usage errors exit 2.
    pub fn is_policy(&self) -> bool {
        !matches!(self, ShardError::NotFiles { .. } | ShardError::Chain | ShardError::NotEtlOutput { .. })
    }
}

/// What makes shards part of one run: the same files with the same promises, the same exports,
/// the same options that decide the output. Every shard records it; the commit checks it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunKey {
    pub shards: u32,
    pub sources: Vec<String>,
    /// `(name, bytes, items the manifest promises, MD5 it promises)` per file, in plan order.
    pub files: Vec<(String, u64, Option<u64>, Option<String>)>,
    pub exports: Vec<String>,
    pub type_attribute: String,
    pub max_line_bytes: usize,
    #[serde(flatten)]
    pub layout: FileLayout,
    pub delta: bool,
    /// `--deletion-vectors` (absent when not given, so earlier keys stay the same).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deletion_vectors: bool,
    pub strict: bool,
    pub allow_mismatch: bool,
    pub max_rejects: Option<u64>,
    pub on_drift_fail: bool,
    /// The sources form a chain (a full export and incremental exports): the plan ends with the
    /// file of current images every shard reduces the same way.
    #[serde(default)]
    pub chain: bool,
    #[serde(default)]
    pub allow_gap: bool,
}

impl RunKey {
    fn of(plan: &Plan, settings: &UnwindSettings, shards: u32, chain: bool) -> RunKey {
        RunKey {
            shards,
            sources: settings.sources.iter().map(ToString::to_string).collect(),
            files: files_key(plan),
            exports: plan
                .exports
                .iter()
                .map(|e| e.export_arn.clone().unwrap_or_else(|| e.export_dir.clone()))
                .collect(),
            type_attribute: settings.type_attribute.clone(),
            max_line_bytes: settings.max_line_bytes,
            layout: super::file_layout(settings),
            delta: settings.format == Format::Delta,
            deletion_vectors: settings.deletion_vectors,
            strict: settings.strict,
            allow_mismatch: settings.allow_mismatch,
            max_rejects: settings.max_rejects,
            on_drift_fail: settings.on_drift == OnDrift::Fail,
            chain,
            allow_gap: settings.allow_gap,
        }
    }

    /// The settings of a run with this key (its sources parsed again), writing to `target`.
    fn settings(&self, target: &Target) -> Result<UnwindSettings, crate::store::LocationError> {
        let sources = self.sources.iter().map(|s| Location::parse(s)).collect::<Result<Vec<_>, _>>()?;
        let mut s = UnwindSettings::new(sources, target.clone());
        s.type_attribute = self.type_attribute.clone();
        s.strict = self.strict;
        s.allow_mismatch = self.allow_mismatch;
        s.max_rejects = self.max_rejects;
        s.max_line_bytes = self.max_line_bytes;
        s.row_groups = sink::RowGroups { rows: self.layout.row_group_rows, bytes: self.layout.row_group_bytes };
        s.target_file_bytes = self.layout.target_file_bytes;
        s.on_drift = if self.on_drift_fail { OnDrift::Fail } else { OnDrift::Allow };
        s.format = if self.delta { Format::Delta } else { Format::Parquet };
        s.deletion_vectors = self.deletion_vectors;
        s.allow_gap = self.allow_gap;
        Ok(s)
    }

    /// A short digest naming the run.
    pub fn fingerprint(&self) -> String {
        use md5::Digest as _;
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        hex(&md5::Md5::digest(bytes))
    }
}

fn files_key(plan: &Plan) -> Vec<(String, u64, Option<u64>, Option<String>)> {
    plan.files
        .iter()
        .map(|f| {
            let e = f.expected.as_ref();
            (f.display.clone(), f.size, e.map(|e| e.item_count), e.map(|e| e.md5_base64.clone()))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A shard's `--phase infer` result.
#[derive(Debug, Serialize, Deserialize)]
struct InferFile {
    format: u32,
    shard: Shard,
    fingerprint: String,
    files: Range<usize>,
    shapes: BTreeMap<String, EntityShape>,
    untyped: Option<EntityShape>,
}

/// What a shard writes instead of reading anything when the output already holds what its run
/// would write (as a re-run of one process finds it): the commit checks that again and is then
/// a no-op.
#[derive(Debug, Serialize, Deserialize)]
struct HeldFile {
    format: u32,
    shard: Shard,
    key: RunKey,
}

/// A shard's finished write phase: what it read, what it wrote, and what one run's report needs
/// of it. Written last into the shard's folder.
#[derive(Debug, Serialize, Deserialize)]
pub struct ShardManifest {
    pub format: u32,
    pub shard: Shard,
    /// What makes the shard part of its run (its fingerprint names the run).
    pub key: RunKey,
    pub started_at: String,
    pub threads: usize,
    pub files: Range<usize>,
    pub file_stats: Vec<FileStats>,
    pub reject_counts: BTreeMap<RejectReason, u64>,
    pub warnings: Vec<String>,
    pub mapping: Option<MappingReport>,
    /// The shard's tables (its part files) and the schemas every shard of the run shares.
    pub written: Written,
    pub timings: Timings,
    /// What the shard's files showed of the chain's changes (chain runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<ChainSeen>,
    /// A chain run's mapping files (path, text), in load order: the commit routes the chain's
    /// changes with the mapping the shards used (the run key holds its hash).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mapping_files: Vec<(std::path::PathBuf, String)>,
}

/// The texts of a mapping's files, for a chain run's commit.
fn mapping_texts(settings: &UnwindSettings) -> Result<Vec<(std::path::PathBuf, String)>, UnwindError> {
    let Some(m) = settings.mapping.as_deref() else { return Ok(Vec::new()) };
    m.files
        .iter()
        .map(|p| {
            std::fs::read_to_string(p).map(|t| (p.clone(), t)).map_err(|source| UnwindError::Io {
                action: "read",
                path: p.display().to_string(),
                source,
            })
        })
        .collect()
}

/// The mapping the shards of a chain run used, compiled again from the texts they recorded, if
/// it is the one their run key names.
fn recorded_mapping(files: &[(std::path::PathBuf, String)], hash: &str) -> Result<crate::mapping::Mapping, String> {
    if crate::state::mapping_hash_of(files.iter().map(|(_, t)| t.as_bytes())) != hash {
        return Err("the mapping files the shards recorded are not the mapping their run names".into());
    }
    let texts = files.iter().map(|(path, text)| crate::mapping::MappingText { path: path.clone(), text: text.clone() });
    crate::mapping::compile(texts.collect(), Vec::new())
        .map_err(|e| format!("the shards' mapping does not compile: {e}"))
}

/// [`ChainRead`] as a shard records it: the final changes (by their index in the reduce every
/// shard and the commit do alike) whose key a full-export item of the shard's files had.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChainSeen {
    pub matched: Vec<(u32, Label)>,
    pub changes: u64,
    pub superseded: u64,
}

/// A [`TableLabel`] in a shard manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Label {
    Mapped(String),
    Entity(String),
    Untyped,
}

impl ChainSeen {
    fn of(r: &ChainRead) -> ChainSeen {
        let label = |l: &TableLabel| match l {
            TableLabel::Mapped(t) => Label::Mapped(t.clone()),
            TableLabel::Entity(e) => Label::Entity(e.to_string()),
            TableLabel::Untyped => Label::Untyped,
        };
        ChainSeen {
            matched: r.matched.iter().map(|(i, l)| (*i, label(l))).collect(),
            changes: r.changes,
            superseded: r.superseded,
        }
    }

    fn read(&self) -> ChainRead {
        let label = |l: &Label| match l {
            Label::Mapped(t) => TableLabel::Mapped(t.clone()),
            Label::Entity(e) => TableLabel::Entity(Arc::from(e.as_str())),
            Label::Untyped => TableLabel::Untyped,
        };
        ChainRead {
            matched: self.matched.iter().map(|(i, l)| (*i, label(l))).collect(),
            changes: self.changes,
            superseded: self.superseded,
        }
    }
}

/// The chain the plan's exports form, if they form one; incremental exports alone are not
/// sharded.
fn chain_of(plan: &Plan, settings: &UnwindSettings) -> Result<Option<Chain>, UnwindError> {
    match source::chain::order(plan, settings.allow_gap) {
        Err(ChainError::NoFullExport { .. }) => Err(ShardError::Chain.into()),
        c => Ok(c.map_err(SourceError::from)?),
    }
}

/// `chain` reduced as one run reduces it (every shard and the commit read every incremental
/// export): appends the file of current images to `plan`.
fn reduce_chain(
    chain: Option<Chain>,
    plan: &mut Plan,
    settings: &UnwindSettings,
    scratch: &std::path::Path,
) -> Result<Option<Applier>, UnwindError> {
    chain.map(|c| Applier::reduce(c, plan, settings, scratch, None)).transpose()
}

/// What one shard process did.
#[derive(Debug, Clone)]
pub struct ShardSummary {
    pub run: ShardRun,
    /// Files of the plan this shard read, and of the plan in all.
    pub files: Range<usize>,
    pub plan_files: usize,
    pub bytes: u64,
    pub items: u64,
    pub rows: u64,
    pub rejects: u64,
    /// The shape file or the shard's folder (or key prefix), as shown to the user.
    pub wrote: String,
    pub millis: u64,
    /// The output already held what the run would write: the shard read nothing and `wrote`
    /// is the file that tells the commit so.
    pub held: bool,
}

fn damaged(path: &str) -> impl FnOnce(String) -> ShardError + '_ {
    move |message| ShardError::Damaged { path: path.to_owned(), message }
}

fn parse_json<T: for<'de> Deserialize<'de>>(bytes: &[u8], shown: &str) -> Result<T, UnwindError> {
    let value: T = serde_json::from_slice(bytes).map_err(|e| damaged(shown)(e.to_string()))?;
    Ok(value)
}

fn to_json<T: Serialize>(value: &T, shown: &str) -> Result<Vec<u8>, UnwindError> {
    serde_json::to_vec_pretty(value).map_err(|e| UnwindError::Io {
        action: "write",
        path: shown.to_owned(),
        source: std::io::Error::other(e),
    })
}

fn list_shards(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// A shard's refusal of an output its commit could not publish into: what is not an etl
/// output is [`ShardError::NotEtlOutput`], whose hint does not offer `--overwrite` (the commit
/// never replaces anything).
fn uncommittable(e: SinkError) -> UnwindError {
    match e {
        SinkError::NotEtlOutput { path: out } | SinkError::NotEtlPrefix { url: out } => {
            ShardError::NotEtlOutput { out }.into()
        }
        e => e.into(),
    }
}

/// Runs one phase of one shard.
pub fn run(settings: &UnwindSettings, run: ShardRun, progress: &Progress) -> Result<ShardSummary, UnwindError> {
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    if let Some(l) = settings.sources.iter().find(|l| matches!(l, Location::Stdin | Location::DynamoDb { .. })) {
        return Err(ShardError::NotFiles { source_name: l.to_string() }.into());
    }
    // What the commit would refuse is refused before any shard reads a file.
    let area = ShardArea::open(&settings.target, &settings.aws)
        .and_then(|a| a.refuse_uncommittable(settings.format).map(|()| a))
        .map_err(uncommittable)?;
    // Nothing is created in the output until the run is known to be possible: the sources
    // resolved, the chain checked and, for the write phase, every shard's shapes there. (No
    // source of a shard spools: standard input and live tables are refused above.)
    let mut plan = source::resolve(&settings.sources, &settings.aws, &settings.scan, &std::env::temp_dir())?;
    if settings.strict
        && let Some(first) = source::integrity::manifest_mismatches(&plan).into_iter().next()
    {
        return Err(UnwindError::StrictMismatch(first));
    }
    let chain = chain_of(&plan, settings)?;
    let key = RunKey::of(&plan, settings, run.shard.count, chain.is_some());
    let fingerprint = key.fingerprint();
    // An output that already holds what this run would write, as a re-run of one process finds
    // it: nothing to read (a job array run again over the same export takes seconds), and the
    // commit, told so, checks it again and does nothing.
    if output_holds(&plan, chain.as_ref(), settings, &key)? {
        let shown = area.held_shown(run.shard);
        let file = HeldFile { format: SHARD_FORMAT, shard: run.shard, key };
        area.write_held(run.shard, &to_json(&file, &shown)?)?;
        progress.set_phase(super::Phase::Done);
        return Ok(ShardSummary {
            run,
            files: run.shard.files(&plan),
            plan_files: plan.files.len(),
            bytes: 0,
            items: 0,
            rows: 0,
            rejects: 0,
            wrote: shown,
            millis: started.elapsed().as_millis() as u64,
            held: true,
        });
    }
    // The write phase needs every shard's shapes: refused before a file is read.
    let agreed = match run.phase {
        ShardPhase::Write => Some(agreed_shapes(&area, run.shard, &fingerprint)?),
        ShardPhase::Infer => None,
    };
    let folder = area.attempt(run.shard, writer_properties(settings.row_groups.rows))?;
    let scratch = folder.scratch().to_owned();
    // A chain: every shard reduces the incremental exports alike, and the last shard's files
    // end with the current images, as one run reads them last.
    let applier = reduce_chain(chain, &mut plan, settings, &scratch)?;
    let files = run.shard.files(&plan);
    let bytes: u64 = plan.files[files.clone()].iter().map(|f| f.size).sum();
    progress.total_bytes.store(bytes, std::sync::atomic::Ordering::Relaxed);
    let t_resolve = started.elapsed();

    progress.set_phase(super::Phase::Reading);
    let t_read = Instant::now();
    let mapped_tables = settings.mapping.as_deref().map(MappedTables::new);
    let mapped = settings.mapping.as_deref().zip(mapped_tables.as_ref());
    // The infer phase keeps no rows: it only counts and observes shapes.
    let scope = read::Scope { files: files.clone(), spill: run.phase == ShardPhase::Write, unread: 0..0 };
    let mut read = read::read_all(&plan, scope, settings, mapped, applier.as_ref(), &scratch, None, progress)?;
    let t_read = t_read.elapsed();
    let items: u64 = read.files.iter().map(|f| f.digest.units).sum();
    let rejects: u64 = read.reject_counts.values().sum();
    let shapes: BTreeMap<String, EntityShape> = read.shapes.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    let summary = |wrote: String, rows: u64| ShardSummary {
        run,
        files: files.clone(),
        plan_files: plan.files.len(),
        bytes,
        items,
        rows,
        rejects,
        wrote,
        millis: started.elapsed().as_millis() as u64,
        held: false,
    };

    let infer_path = area.infer_shown(run.shard);
    // The write phase read every shard's shapes above; the infer phase records this shard's.
    let Some((all, mine)) = agreed else {
        let file = InferFile {
            format: SHARD_FORMAT,
            shard: run.shard,
            fingerprint,
            files: files.clone(),
            shapes,
            untyped: read.untyped.clone(),
        };
        area.write_infer(run.shard, &to_json(&file, &infer_path)?)?;
        progress.set_phase(super::Phase::Done);
        return Ok(summary(infer_path, 0));
    };

    // The write phase: this shard's shapes must be the ones its first phase recorded.
    if mine.shapes != shapes || mine.untyped != read.untyped || mine.files != files {
        return Err(ShardError::InputChanged { shard: run.shard, path: infer_path }.into());
    }
    read.shapes = all.shapes.into_iter().map(|(k, v)| (Arc::<str>::from(k), v)).collect();
    read.untyped = all.untyped;

    progress.set_phase(super::Phase::Writing);
    let t_write = Instant::now();
    let mut written = write::write_all(&plan, settings, mapped_tables.as_ref(), &folder, &read)?;
    // On an object store, the manifest names the attempt's files.
    let prefix = folder.path_prefix();
    for f in written.tables.iter_mut().flat_map(|t| t.files.iter_mut()) {
        f.path = format!("{prefix}{}", f.path);
    }
    let t_write = t_write.elapsed();
    let rows = written.item_rows();
    let manifest = ShardManifest {
        format: SHARD_FORMAT,
        shard: run.shard,
        key,
        started_at,
        threads: settings.threads,
        files: files.clone(),
        file_stats: read.files[files.clone()].to_vec(),
        reject_counts: read.reject_counts.clone(),
        warnings: read.warnings.clone(),
        mapping: settings
            .mapping
            .as_deref()
            .zip(mapped_tables.as_ref())
            .map(|(m, t)| report::mapping(m, t, &read.entity_stats)),
        written,
        timings: Timings {
            resolve: t_resolve.as_millis() as u64,
            read_and_decode: t_read.as_millis() as u64,
            write: t_write.as_millis() as u64,
            total: started.elapsed().as_millis() as u64,
            keep_base: 0,
        },
        chain: applier.as_ref().map(|_| ChainSeen::of(&read.chain)),
        mapping_files: if applier.is_some() { mapping_texts(settings)? } else { Vec::new() },
    };
    let dir = folder.publish(&to_json(&manifest, "shard.json")?)?;
    progress.set_phase(super::Phase::Done);
    Ok(summary(dir, rows))
}

/// The committed output at `settings.target` already holds what a run of `plan` (and `chain`)
/// with `settings` would write, as a re-run of one process finds it: the same export or chain,
/// options that make the same files, the same format.
fn output_holds(
    plan: &Plan,
    chain: Option<&Chain>,
    settings: &UnwindSettings,
    key: &RunKey,
) -> Result<bool, UnwindError> {
    let Some(previous) = crate::sink::manifest::read_committed(&settings.target, &settings.aws)? else {
        return Ok(false);
    };
    if crate::sink::delta::is_delta_output(&previous) != key.delta {
        return Ok(false);
    }
    match chain {
        Some(c) => {
            let next = crate::state::of_chain(&plan.exports, c, &[], key.layout.mapping.clone());
            apply::holds_chain(&previous, settings, &key.layout, &next)
        }
        None => Ok(apply::holds_export(plan, &previous, settings, &key.layout)),
    }
}

/// What a commit works from: the settings the shards of a run ran with, the output's sink, the
/// plan of their sources and its chain.
struct Reopened {
    settings: UnwindSettings,
    sink: Box<dyn sink::Sink>,
    plan: Plan,
    chain: Option<Chain>,
    chain_state: Option<crate::state::RunState>,
}

/// Opens the output under `area` for the commit of the shards of run `key`, with their sources
/// resolved again (manifests only) and checked to be the files and the chain they read.
/// `Err(UpToDate)` when the output already holds what the shards wrote (an export or a chain
/// it holds, with options that make the same files): the commit is a no-op, as one run's re-run
/// is, and the shards (of a run whose result is already published) are removed.
fn reopen(key: &RunKey, area: &ShardArea, target: &Target, aws: &AwsOptions) -> Result<Reopened, UnwindError> {
    let inconsistent = |reason: String| UnwindError::from(ShardError::Inconsistent { out: area.shown(), reason });
    let mut settings =
        key.settings(target).map_err(|e| inconsistent(format!("a recorded source does not parse: {e}")))?;
    settings.aws = aws.clone();
    let sink = sink::open(
        target,
        &SinkSettings {
            format: settings.format,
            overwrite: false,
            row_group_rows: settings.row_groups.rows,
            aws: aws.clone(),
        },
    )?;
    // The export must still be the one the shards read (the base kept is read from it).
    let plan = source::resolve(&settings.sources, aws, &settings.scan, &sink.scratch().join(super::SCAN_SPOOL))?;
    if files_key(&plan) != key.files {
        return Err(inconsistent("the sources no longer resolve to the files the shards read".into()));
    }
    let chain = chain_of(&plan, &settings)?;
    if chain.is_some() != key.chain {
        return Err(inconsistent("the sources no longer form the chain the shards read".into()));
    }
    let chain_state = chain.as_ref().map(|c| crate::state::of_chain(&plan.exports, c, &[], key.layout.mapping.clone()));
    let held = match &chain_state {
        Some(next) => apply::refuse_up_to_date(&settings, &key.layout, sink.as_ref(), next),
        None => apply::refuse_same_export(&plan, &settings, &key.layout, sink.as_ref()),
    };
    match held {
        Err(e @ UnwindError::UpToDate { .. }) => {
            drop(sink);
            if let Err(e) = area.remove_all() {
                tracing::warn!(path = %area.root_shown(), error = %e, "cannot remove the shards");
            }
            Err(e)
        }
        Err(e) => Err(e),
        Ok(()) => Ok(Reopened { settings, sink, plan, chain, chain_state }),
    }
}

/// The commit of shards that all found the output holding what their run would write (and
/// read nothing): a no-op when it still does, the shards removed; refused when it no longer
/// does (the shards must run again).
fn commit_held(
    area: &ShardArea,
    listing: &crate::sink::shard::Listing,
    target: &Target,
    aws: &AwsOptions,
) -> Result<UnwindSummary, UnwindError> {
    let shown = area.shown();
    let mut held = Vec::with_capacity(listing.held.len());
    for (s, _) in &listing.held {
        let path = area.held_shown(*s);
        let Some(bytes) = area.read_held(*s)? else { continue };
        let f: HeldFile = parse_json(&bytes, &path)?;
        if f.format != SHARD_FORMAT || f.shard != *s {
            return Err(damaged(&path)(format!("layout version {} of shard {}", f.format, f.shard)).into());
        }
        held.push(f);
    }
    let ran: Vec<(String, Shard)> = held.iter().map(|f| (f.key.fingerprint(), f.shard)).collect();
    let (count, missing) = one_run(&shown, &ran)?;
    if !missing.is_empty() {
        return Err(ShardError::Missing { out: shown, missing: list_shards(&missing), count }.into());
    }
    let Some(first) = held.first() else { return Err(ShardError::NoShards { out: shown }.into()) };
    reopen(&first.key, area, target, aws)?;
    Err(ShardError::NoLongerHeld { out: shown }.into())
}

/// The shard count of the one run that `shards` (each with its run's fingerprint) are of, and
/// the indexes of that run's shards missing from them; refused when they are of several runs (or
/// none).
fn one_run(out: &str, shards: &[(String, Shard)]) -> Result<(u32, Vec<u32>), ShardError> {
    let mut runs: BTreeMap<(&str, u32), Vec<u32>> = BTreeMap::new();
    for (fingerprint, s) in shards {
        runs.entry((fingerprint.as_str(), s.count)).or_default().push(s.index);
    }
    if runs.len() > 1 {
        let list = runs
            .iter()
            .map(|((f, n), ix)| format!("run `{}` of {n} shards (shards {})", &f[..f.len().min(12)], list_shards(ix)))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(ShardError::SeveralRuns { out: out.to_owned(), runs: runs.len(), list });
    }
    let Some(((_, count), indexes)) = runs.pop_first() else {
        return Err(ShardError::NoShards { out: out.to_owned() });
    };
    Ok((count, (0..count).filter(|i| !indexes.contains(i)).collect()))
}

/// Every shard's shapes, merged in shard order, and `shard`'s own shape file.
struct Agreed {
    shapes: BTreeMap<String, EntityShape>,
    untyped: Option<EntityShape>,
}

fn agreed_shapes(area: &ShardArea, shard: Shard, fingerprint: &str) -> Result<(Agreed, InferFile), UnwindError> {
    let mut merged: BTreeMap<String, EntityShape> = BTreeMap::new();
    let mut untyped = EntityShape::default();
    let mut mine = None;
    let mut missing = Vec::new();
    for index in 0..shard.count {
        let s = Shard { index, count: shard.count };
        let path = area.infer_shown(s);
        let Some(bytes) = area.read_infer(s)? else {
            missing.push(index);
            continue;
        };
        let f: InferFile = parse_json(&bytes, &path)?;
        if f.format != SHARD_FORMAT || f.shard != s || f.fingerprint != fingerprint {
            return Err(ShardError::ForeignInfer { shard, path }.into());
        }
        for (k, v) in &f.shapes {
            merged.entry(k.clone()).or_default().merge(v);
        }
        if let Some(u) = &f.untyped {
            untyped.merge(u);
        }
        if s == shard {
            mine = Some(f);
        }
    }
    match mine {
        Some(m) if missing.is_empty() => {
            Ok((Agreed { shapes: merged, untyped: (untyped.items > 0).then_some(untyped) }, m))
        }
        _ => Err(ShardError::MissingInfer {
            shard,
            missing: list_shards(&missing),
            count: shard.count,
            dir: area.root_shown(),
        }
        .into()),
    }
}

/// Publishes the shards of one run under `target` as one output, as one run over every file
/// would have written it. `aws` is for sources on object stores; the report records the thread
/// count shard 0 ran with (the commit itself moves no data).
pub fn commit(target: &Target, aws: &AwsOptions, progress: &Progress) -> Result<UnwindSummary, UnwindError> {
    let started = Instant::now();
    let area = ShardArea::open(target, aws)?;
    let shown = area.shown();
    let listing = area.list()?;
    if listing.shards.is_empty() {
        if listing.held.is_empty() {
            return Err(ShardError::NoShards { out: shown }.into());
        }
        return commit_held(&area, &listing, target, aws);
    }
    let mut manifests: Vec<(ShardPlace, ShardManifest)> = Vec::with_capacity(listing.shards.len());
    for (_, place) in &listing.shards {
        let path = area.manifest_shown(place);
        let m: ShardManifest = parse_json(&area.read_manifest(place)?, &path)?;
        if m.format != SHARD_FORMAT {
            return Err(damaged(&path)(format!("layout version {} (this etl reads {SHARD_FORMAT})", m.format)).into());
        }
        manifests.push((place.clone(), m));
    }
    let ran: Vec<(String, Shard)> = manifests.iter().map(|(_, m)| (m.key.fingerprint(), m.shard)).collect();
    let (count, missing) = one_run(&shown, &ran)?;
    let held: Vec<u32> = missing
        .iter()
        .copied()
        .filter(|i| listing.held.iter().any(|(s, _)| s.index == *i && s.count == count))
        .collect();
    if !held.is_empty() {
        let reason = format!(
            "shard{} {} found it holding what the run would write and wrote nothing, while the others wrote theirs: it changed between them",
            if held.len() == 1 { "" } else { "s" },
            list_shards(&held)
        );
        return Err(ShardError::Inconsistent { out: shown, reason }.into());
    }
    if !missing.is_empty() {
        return Err(ShardError::Missing { out: shown, missing: list_shards(&missing), count }.into());
    }
    let inconsistent = |reason: String| UnwindError::from(ShardError::Inconsistent { out: shown.clone(), reason });
    let first = &manifests[0].1;
    let key = first.key.clone();
    // Everything but the part files derives from the merged shapes: the same in every shard.
    let shared = |m: &ShardManifest| serde_json::to_value(Written { tables: Vec::new(), ..m.written.clone() }).ok();
    let first_shared = shared(first);
    // The shards' files must tile the plan, in order.
    let mut next = 0;
    for (_, m) in &manifests {
        if m.files.start != next || m.file_stats.len() != m.files.len() {
            return Err(inconsistent(format!("shard {} read files {:?}, not from file {next}", m.shard, m.files)));
        }
        next = m.files.end;
        if shared(m) != first_shared || m.written.tables.len() != first.written.tables.len() {
            return Err(inconsistent(format!("shards {} and {} wrote different schemas", first.shard, m.shard)));
        }
        if let Some(t) = m.written.tables.iter().zip(&first.written.tables).find(|(a, b)| a.name != b.name) {
            return Err(inconsistent(format!(
                "shard {} wrote table `{}` where shard {} wrote `{}`",
                m.shard, t.0.name, first.shard, t.1.name
            )));
        }
    }
    // A chain's plan ends with the file of current images.
    let plan_files = key.files.len() + usize::from(key.chain);
    if next != plan_files {
        return Err(inconsistent(format!("the shards read {next} of the plan's {plan_files} files")));
    }

    // The settings the shards ran with, and the output (already holding what the shards wrote:
    // a no-op, the shards removed).
    let Reopened { mut settings, mut sink, mut plan, chain, chain_state } = reopen(&key, &area, target, aws)?;
    settings.threads = first.threads;
    // A chain's changes are routed with the shards' mapping.
    if let (true, Some(hash)) = (key.chain, &key.layout.mapping) {
        settings.mapping = Some(Arc::new(recorded_mapping(&first.mapping_files, hash).map_err(&inconsistent)?));
    }
    let keeping = apply::keep_base(&mut plan, sink.as_ref(), target, aws, chain.is_none(), settings.threads, false)?;
    let scratch = sink.scratch().to_owned();
    let applier = reduce_chain(chain, &mut plan, &settings, &scratch)?;
    if plan.files.len() != plan_files {
        return Err(inconsistent("the sources no longer form the chain the shards read".into()));
    }
    let state = chain_state.zip(applier.as_ref()).map(|(mut st, a)| {
        st.key_attributes = a.key_names.clone();
        st
    });
    let t_resolve = started.elapsed();

    // The shards' parts, in shard order, renumbered as one run numbers them.
    let t_write = Instant::now();
    let mut tables = Vec::with_capacity(first.written.tables.len());
    for (ti, t0) in first.written.tables.iter().enumerate() {
        let mut files: Vec<FileReport> = Vec::new();
        for (place, m) in &manifests {
            for f in m.written.tables[ti].files.iter().filter(|f| f.rows > 0) {
                files.push(link(&area, sink.as_ref(), place, &t0.name, files.len(), f)?);
            }
        }
        // A table no shard has rows of is one empty part, as one run writes it.
        if files.is_empty()
            && let Some(f) = t0.files.first()
        {
            files.push(link(&area, sink.as_ref(), &manifests[0].0, &t0.name, 0, f)?);
        }
        tables.push(TableReport { rows: files.iter().map(|f| f.rows).sum(), files, ..t0.clone() });
    }
    let t_write = t_write.elapsed();

    // One run's pass-one result, from the shards'.
    let mut stats = vec![FileStats::default(); plan.files.len()];
    let mut reject_counts: BTreeMap<RejectReason, u64> = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut mapping: Option<MappingReport> = None;
    let mut read_ms = 0;
    let mut chain_read = ChainRead::default();
    for (_, m) in &manifests {
        if let Some(c) = &m.chain {
            chain_read.merge(c.read());
        }
        for (i, st) in m.files.clone().zip(&m.file_stats) {
            stats[i] = st.clone();
        }
        for (r, n) in &m.reject_counts {
            *reject_counts.entry(*r).or_default() += n;
        }
        warnings.extend(m.warnings.iter().cloned());
        mapping = match (mapping, &m.mapping) {
            (None, m) => m.clone(),
            (Some(mut a), Some(b)) => {
                merge_mapping(&mut a, b);
                Some(a)
            }
            (Some(a), None) => Some(a),
        };
        read_ms = read_ms.max(m.timings.read_and_decode + m.timings.write);
    }
    warnings.sort();
    chain_read.matched.sort();
    let (shapes, untyped) = {
        let (agreed, _) = agreed_shapes(&area, first.shard, &key.fingerprint())?;
        (agreed.shapes.into_iter().map(|(k, v)| (Arc::<str>::from(k), v)).collect(), agreed.untyped)
    };
    let read = ReadResult {
        entity_stats: Vec::new(),
        files: stats,
        shapes,
        untyped,
        chunks: Vec::new(),
        spills: Vec::new(),
        slot_names: Default::default(),
        reject_counts,
        warnings,
        chain: chain_read,
        unread: 0..0,
    };
    // The chain's incremental exports are kept compacted, as one run keeps them.
    let compacted = match (&applier, keeping.kept) {
        (Some(a), Some(_)) => apply::keep_compacted(a, &plan, &read.chain, sink.as_ref(), &settings, &scratch)?,
        _ => None,
    };
    let written = Written { tables, ..first.written.clone() };
    let started_at = manifests.iter().map(|(_, m)| m.started_at.clone()).min().unwrap_or_default();
    let (mut manifest, schemas) = super::assemble(Assembly {
        plan: &plan,
        settings: &settings,
        read: &read,
        written,
        chain: applier.as_ref(),
        state,
        keeping: keeping.clone(),
        mapping,
        layout: key.layout.clone(),
        started,
        started_at,
        timings: Timings {
            resolve: t_resolve.as_millis() as u64,
            // The slowest shard's reading and writing; the commit's own linking is `write`.
            read_and_decode: read_ms,
            write: t_write.as_millis() as u64,
            total: 0,
            keep_base: keeping.kept.map_or(0, |k| k.millis) + compacted.as_ref().map_or(0, |c| c.millis),
        },
    })?;
    super::list_compacted(&mut manifest, compacted);
    if settings.format == Format::Delta {
        let txn_version = super::delta_txn_version(manifest.state.as_ref(), &plan);
        let deletion_vectors = settings.deletion_vectors;
        sink.delta_run(sink::delta::DeltaRun {
            txn_version,
            merge: None,
            deletion_vectors,
            in_place: false,
            located: Default::default(),
        });
    }
    progress.set_phase(super::Phase::Committing);
    let summary = super::publish(sink, manifest, schemas, &settings, progress)?;
    // A local Parquet commit replaced the folder, shards and all; a Delta commit adds to it,
    // and on an object store the part files were copied.
    if let Err(e) = area.remove_all() {
        tracing::warn!(path = %area.root_shown(), error = %e, "cannot remove the committed shards");
    }
    Ok(summary)
}

/// Puts a shard's part file into the staged output as part `part` of `table`.
fn link(
    area: &ShardArea,
    sink: &dyn sink::Sink,
    place: &str,
    table: &str,
    part: usize,
    f: &FileReport,
) -> Result<FileReport, UnwindError> {
    let rel = part_path(table, part);
    if !area.keep_part(sink, place, &f.path, &rel)? {
        return Err(UnwindError::Internal {
            message: format!("the output's sink cannot take the shard file `{}` of `{place}`", f.path),
        });
    }
    Ok(FileReport { path: rel, ..f.clone() })
}

/// Adds `b`'s counts to `a`'s, entity by entity (shards of one run share one mapping).
fn merge_mapping(a: &mut MappingReport, b: &MappingReport) {
    for (x, y) in a.entities.iter_mut().zip(&b.entities) {
        let EntityReport {
            entity: _,
            table: _,
            items,
            rows,
            rejected,
            key_template_failures,
            key_conflicts,
            coercion_failures,
            required_missing,
            nulled_values,
            unmapped_attributes,
            child_tables: _,
            child_rows,
        } = y;
        x.items += items;
        x.rows += rows;
        x.rejected += rejected;
        x.key_template_failures += key_template_failures;
        x.key_conflicts += key_conflicts;
        x.coercion_failures += coercion_failures;
        x.required_missing += required_missing;
        x.nulled_values += nulled_values;
        x.child_rows += child_rows;
        for (k, n) in unmapped_attributes {
            *x.unmapped_attributes.entry(k.clone()).or_default() += n;
        }
    }
}

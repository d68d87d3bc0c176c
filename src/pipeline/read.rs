//! Pass one: every data file framed, decoded and normalized; rows of inferred tables folded into
//! their entity's shape; every row and reject spilled in compact chunks for pass two.
//!
//! Workers take whole files, the largest first, so that no worker is left reading a large file
//! alone at the end. Chunks are cut per (file, table) at a fixed size, so their contents never
//! depend on scheduling; pass two reads them back in (file, sequence) order, and each shape keeps
//! where the input first has an attribute whatever order its files came in: output is identical
//! whatever the thread count.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tracing::{info, info_span};

use super::apply::WhenRead;
use super::chain::{Applier, ChainRead, Role};
use super::pool::{self, Stop};
use super::progress::Progress;
use super::spill;
use super::walk::{Unit, corrupt_warning, unit};
use super::{UnwindError, UnwindSettings};
use crate::decode::{Item, Record};
use crate::mapping::Mapping;
use crate::mapping::infer::EntityShape;
use crate::normalize::{EntityStats, MappedTables, Normalized, Normalizer, Reject, RejectReason, RejectRow, TableId};
use crate::sink::Sink;
use crate::source::frame::{FileDigest, Frame, Framer};
use crate::source::{DataFile, Plan};

/// Spill chunks are cut at this size.
const CHUNK_BYTES: u64 = 1024 * 1024;
/// Progress counters and the stop flag are looked at once per this many units.
const CHECK_EVERY: u64 = 4096;

/// A run of spilled rows of one table from one input file.
#[derive(Debug, Clone)]
pub struct ChunkRef {
    pub table: TableId,
    pub file: u32,
    pub seq: u32,
    pub worker: usize,
    pub offset: u64,
    pub len: u64,
    /// Its [logical size](spill#logical-size), by which parts are planned.
    pub logical: u64,
}

#[derive(Default)]
struct ChunkBuf {
    bytes: Vec<u8>,
    seq: u32,
    /// The [logical size](spill#logical-size) of what `bytes` holds.
    logical: u64,
}

impl ChunkBuf {
    fn is_full(&self) -> bool {
        self.logical >= CHUNK_BYTES
    }
}

/// What one file gave.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct FileStats {
    pub digest: FileDigest,
    pub rejects: u64,
}

/// Everything pass one learned.
pub struct ReadResult {
    /// Per mapping entity, in mapping order.
    pub entity_stats: Vec<EntityStats>,
    /// Per plan file.
    pub files: Vec<FileStats>,
    pub shapes: BTreeMap<Arc<str>, EntityShape>,
    pub untyped: Option<EntityShape>,
    pub chunks: Vec<ChunkRef>,
    /// Per worker, its spill file.
    pub spills: Vec<PathBuf>,
    /// Per worker and table (inferred or declared), the attribute names its spilled items'
    /// slots stand for ([`spill::Key::Slot`]). A declared table's are its column names, the
    /// same in every worker.
    pub slot_names: HashMap<(usize, TableId), Vec<Box<str>>>,
    pub reject_counts: BTreeMap<RejectReason, u64>,
    pub warnings: Vec<String>,
    /// What a chain run saw of its changes (empty otherwise).
    pub chain: ChainRead,
    /// Plan files left unread ([`Scope::unread`]): their stats are empty and count nowhere.
    pub unread: std::ops::Range<usize>,
}

/// An inferred table's state in one worker.
#[derive(Default)]
struct Inferred {
    shape: EntityShape,
    buf: ChunkBuf,
    /// The slots of the item being spilled, reused.
    slots: Vec<u32>,
}

impl Inferred {
    /// Observes one item, and spills it when `spill`; `true` when the chunk is full.
    fn add(&mut self, item: &Item<'_>, file: u32, line: u64, spill: bool) -> bool {
        if !spill {
            self.shape.observe(item, file, line);
            return false;
        }
        self.slots.clear();
        let slots = &mut self.slots;
        self.shape.observe_slots(item, file, line, |s| slots.push(s));
        self.buf.logical += spill::encode_item_slots(item, &self.slots, &mut self.buf.bytes);
        self.buf.is_full()
    }
}

/// What pass one reads, and whether it keeps the rows.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The plan files to read (every file, but for a shard).
    pub files: std::ops::Range<usize>,
    /// Spill rows and rejects for pass two; `false` counts and infers only (a shard's
    /// `--phase infer`).
    pub spill: bool,
    /// Plan files inside `files` not to read: a full export an apply in place leaves unread
    /// (its checks passed when the output was made).
    pub unread: std::ops::Range<usize>,
}

impl Scope {
    /// Every file of `plan`, rows kept.
    pub fn all(plan: &Plan) -> Scope {
        Scope { files: 0..plan.files.len(), spill: true, unread: 0..0 }
    }
}

/// One worker's state: its spill file, the shapes it inferred, its finished chunks.
struct Worker<'a> {
    worker: usize,
    settings: &'a UnwindSettings,
    normalizer: Normalizer<'a>,
    spill: BufWriter<File>,
    spill_path: PathBuf,
    /// Rows and rejects are spilled (see [`Scope::spill`]).
    keep_rows: bool,
    spill_pos: u64,
    chunks: Vec<ChunkRef>,
    entities: HashMap<Arc<str>, Inferred>,
    untyped: Inferred,
    mapped: Vec<ChunkBuf>,
    /// Per declared table, its column names, borrowed from the mapping: the strings its rows
    /// are named with ([`crate::normalize::apply::row_names`]), for [`spill::column_slots`]. A
    /// declared row's attributes are spilled by their column's index, the same slots in every
    /// worker.
    row_names: Vec<Vec<&'a str>>,
    /// The slots of the declared row being spilled, reused.
    mapped_slots: Vec<u32>,
    rejects: ChunkBuf,
    reject_counts: BTreeMap<RejectReason, u64>,
    files: Vec<(usize, FileStats)>,
    warnings: Vec<String>,
    /// The chain being applied, if any, and what this worker saw of it.
    chain: Option<&'a Applier>,
    chain_read: ChainRead,
    role: Role,
    // The file being read.
    file: u32,
    file_rejects: u64,
}

fn io_err<'p>(action: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> UnwindError + 'p {
    move |source| UnwindError::Io { action, path: path.display().to_string(), source }
}

impl<'a> Worker<'a> {
    fn new(
        worker: usize,
        settings: &'a UnwindSettings,
        mapped: Option<(&'a Mapping, &'a MappedTables)>,
        chain: Option<&'a Applier>,
        scratch: &Path,
        keep_rows: bool,
    ) -> Result<Self, UnwindError> {
        let spill_path = scratch.join(format!("spill-{worker}.bin"));
        let f = File::create(&spill_path).map_err(io_err("create", &spill_path))?;
        let tables = mapped.map_or(0, |(_, t)| t.tables.len());
        Ok(Worker {
            worker,
            settings,
            normalizer: Normalizer::new(&settings.type_attribute, mapped),
            spill: BufWriter::with_capacity(1 << 20, f),
            spill_path,
            keep_rows,
            spill_pos: 0,
            chunks: Vec::new(),
            entities: HashMap::new(),
            untyped: Inferred::default(),
            mapped: (0..tables).map(|_| ChunkBuf::default()).collect(),
            row_names: mapped.map_or_else(Vec::new, |(m, _)| crate::normalize::apply::row_names(m)),
            mapped_slots: Vec::new(),
            rejects: ChunkBuf::default(),
            reject_counts: BTreeMap::new(),
            files: Vec::new(),
            warnings: Vec::new(),
            chain,
            chain_read: ChainRead::default(),
            role: Role::Plain,
            file: 0,
            file_rejects: 0,
        })
    }

    fn write_chunk(&mut self, table: TableId, buf: &mut ChunkBuf) -> Result<(), UnwindError> {
        if buf.bytes.is_empty() {
            return Ok(());
        }
        self.spill.write_all(&buf.bytes).map_err(io_err("write", &self.spill_path))?;
        self.chunks.push(ChunkRef {
            table,
            file: self.file,
            seq: buf.seq,
            worker: self.worker,
            offset: self.spill_pos,
            len: buf.bytes.len() as u64,
            logical: buf.logical,
        });
        self.spill_pos += buf.bytes.len() as u64;
        buf.bytes.clear();
        buf.logical = 0;
        buf.seq += 1;
        Ok(())
    }

    /// Reads one data file.
    fn read_file(&mut self, index: usize, f: &DataFile, progress: &Progress, stop: &Stop) -> Result<(), UnwindError> {
        let _span = info_span!("file", path = %f.display).entered();
        self.file = index as u32;
        self.file_rejects = 0;
        self.role = self.chain.map_or(Role::Plain, |c| c.role(index));
        // A current image is read whole: its change record's line was within the limit.
        let max_line = if self.role == Role::Current { usize::MAX } else { self.settings.max_line_bytes };
        let mut framer = Framer::open(f, max_line, progress.bytes.clone())?;
        let format = framer.format();
        let mut pending = 0u64;
        while let Some(frame) = framer.next_frame() {
            if let Frame::Corrupt { line, error, .. } = &frame {
                self.warnings.push(corrupt_warning(&f.display, *line, error));
            }
            match unit(format, frame, max_line) {
                Unit::Record { record, line, offset, raw } => self.record(&record, line, offset, raw, f)?,
                Unit::Reject { reject, line, offset, raw, truncated } => {
                    self.reject(&reject, line, offset, raw, truncated, f)?;
                }
            }
            pending += 1;
            if pending == CHECK_EVERY {
                progress.items.fetch_add(pending, Ordering::Relaxed);
                pending = 0;
                stop.check::<UnwindError>()?;
            }
        }
        progress.items.fetch_add(pending, Ordering::Relaxed);
        let digest = framer.finish(&f.display)?;
        self.end_file()?;
        self.warnings.extend(digest.warnings.iter().cloned());
        let stats = FileStats { digest, rejects: self.file_rejects };
        progress.rejects.store(self.reject_counts.values().sum(), Ordering::Relaxed);
        if self.settings.strict {
            strict_file_check(f, &stats.digest)?;
        }
        info!(items = stats.digest.units, rejects = stats.rejects, "file read");
        self.files.push((index, stats));
        Ok(())
    }

    fn record(
        &mut self,
        record: &Record<'_>,
        line: u64,
        offset: u64,
        raw: &[u8],
        f: &DataFile,
    ) -> Result<(), UnwindError> {
        if let Some(chain) = self.chain {
            match (self.role, record) {
                // Applied before pass one.
                (Role::Incremental, Record::Change(_)) => {
                    self.chain_read.changes += 1;
                    return Ok(());
                }
                (Role::Incremental, Record::Put(_)) => {
                    return self.reject(&super::chain::item_in_incremental(), line, offset, raw, false, f);
                }
                (Role::Base, Record::Put(item)) => {
                    if let Some(i) = chain.lookup(item) {
                        self.chain_read.matched.push((i, chain.label(item)));
                        self.chain_read.superseded += 1;
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
        match self.normalizer.normalize(record) {
            Normalized::Inferred { entity: Some(name), item } => {
                let (file, keep) = (self.file, self.keep_rows);
                let full = match self.entities.get_mut(name) {
                    Some(state) => state.add(item, file, line, keep),
                    None => {
                        let mut state = Inferred::default();
                        let full = state.add(item, file, line, keep);
                        self.entities.insert(Arc::from(name), state);
                        full
                    }
                };
                if full && let Some(key) = self.entities.get_key_value(name).map(|(k, _)| k.clone()) {
                    let mut b = self.entities.get_mut(name).map(|s| std::mem::take(&mut s.buf)).unwrap_or_default();
                    self.write_chunk(TableId::Entity(key), &mut b)?;
                    if let Some(s) = self.entities.get_mut(name) {
                        s.buf = b;
                    }
                }
            }
            Normalized::Inferred { entity: None, item } => {
                if self.untyped.add(item, self.file, line, self.keep_rows) {
                    let mut b = std::mem::take(&mut self.untyped.buf);
                    self.write_chunk(TableId::Untyped, &mut b)?;
                    self.untyped.buf = b;
                }
            }
            Normalized::Mapped { rows } => {
                for (table, row) in &rows {
                    self.spill_mapped(*table, row)?;
                }
            }
            Normalized::Rejected(reject) => self.reject(&reject, line, offset, raw, false, f)?,
        }
        Ok(())
    }

    fn spill_mapped(&mut self, table: u32, row: &Item<'_>) -> Result<(), UnwindError> {
        let Some(buf) = self.mapped.get_mut(table as usize) else {
            return Err(UnwindError::Internal { message: format!("mapped table {table} does not exist") });
        };
        if !self.keep_rows {
            return Ok(());
        }
        let names = self.row_names.get(table as usize).map_or(&[][..], Vec::as_slice);
        spill::column_slots(names, row, &mut self.mapped_slots);
        buf.logical += spill::encode_item_slots(row, &self.mapped_slots, &mut buf.bytes);
        if buf.is_full() {
            let mut b = std::mem::take(buf);
            self.write_chunk(TableId::Mapped(table), &mut b)?;
            self.mapped[table as usize] = b;
        }
        Ok(())
    }

    fn reject(
        &mut self,
        r: &Reject,
        line: u64,
        offset: u64,
        raw: &[u8],
        truncated: bool,
        f: &DataFile,
    ) -> Result<(), UnwindError> {
        // A current image is a line of the run's own scratch file: its reject is placed at the
        // change record it is the new image of (the start of that record's line).
        let (mut file, mut line, mut offset, mut shown) = (self.file, line, offset, f.display.as_str());
        let traced;
        let mut message = r.message.as_str();
        if let Some(chain) = self.chain.filter(|_| self.role == Role::Current)
            && let Some(origin) = chain.image_origin(line)
            && let Some(origin_shown) = chain.shown(origin.file)
        {
            (file, line, offset, shown) = (origin.file, origin.line, origin.offset, origin_shown);
            traced = format!("{message} (in the change record's new image)");
            message = traced.as_str();
        }
        if self.settings.strict {
            let at = if r.attribute.is_empty() { String::new() } else { format!(" (attribute `{}`)", r.attribute) };
            return Err(UnwindError::Strict {
                message: format!("`{shown}` line {line}{at}: {message} [{}]", r.reason),
            });
        }
        *self.reject_counts.entry(r.reason).or_default() += 1;
        self.file_rejects += 1;
        let row = RejectRow { file, line, offset, reason: r.reason, attribute: &r.attribute, message, raw, truncated };
        if !self.keep_rows {
            return Ok(());
        }
        let before = self.rejects.bytes.len();
        spill::encode_reject(&row, &mut self.rejects.bytes);
        self.rejects.logical += (self.rejects.bytes.len() - before) as u64;
        if self.rejects.is_full() {
            let mut b = std::mem::take(&mut self.rejects);
            self.write_chunk(TableId::Rejects, &mut b)?;
            self.rejects = b;
        }
        Ok(())
    }

    /// Flushes the file's chunks.
    fn end_file(&mut self) -> Result<(), UnwindError> {
        for t in 0..self.mapped.len() {
            let mut b = std::mem::take(&mut self.mapped[t]);
            self.write_chunk(TableId::Mapped(t as u32), &mut b)?;
            // Sequence numbers restart per file.
            self.mapped[t] = ChunkBuf { bytes: b.bytes, seq: 0, logical: 0 };
        }
        let mut keys: Vec<Arc<str>> = self.entities.keys().cloned().collect();
        keys.sort();
        for k in keys {
            let mut b = self.entities.get_mut(&k).map(|s| std::mem::take(&mut s.buf)).unwrap_or_default();
            self.write_chunk(TableId::Entity(k.clone()), &mut b)?;
            if let Some(s) = self.entities.get_mut(&k) {
                s.buf = ChunkBuf { bytes: b.bytes, seq: 0, logical: 0 };
            }
        }
        let mut b = std::mem::take(&mut self.untyped.buf);
        self.write_chunk(TableId::Untyped, &mut b)?;
        self.untyped.buf = ChunkBuf { bytes: b.bytes, seq: 0, logical: 0 };
        let mut b = std::mem::take(&mut self.rejects);
        self.write_chunk(TableId::Rejects, &mut b)?;
        self.rejects = ChunkBuf { bytes: b.bytes, seq: 0, logical: 0 };
        Ok(())
    }
}

/// `--strict`: a file whose item count or MD5 differs from its manifest entry stops the run.
fn strict_file_check(f: &DataFile, d: &FileDigest) -> Result<(), UnwindError> {
    match crate::source::integrity::file_mismatches(f, d).into_iter().next() {
        Some(m) => Err(UnwindError::StrictMismatch(m)),
        None => Ok(()),
    }
}

/// The plan files `files`, the largest first (by `size`, the compressed size), ties in plan order.
/// A gzip file cannot be split between workers, so a large file taken last would leave the other
/// workers idle while one reads it.
fn largest_first(files: impl Iterator<Item = usize>, size: impl Fn(usize) -> u64) -> Vec<usize> {
    let mut order: Vec<usize> = files.collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(size(i)), i));
    order
}

/// Runs pass one over the files `scope` names (every file, but for a shard); the other files'
/// stats stay empty, and their global indexes keep rows, shapes and rejects where one run over
/// every file would put them. A file `keep` lists is first copied into the output through its
/// sink, by the worker about to read it, and the copy is read.
#[allow(clippy::too_many_arguments, reason = "each is one stage's input; a struct of them would only be built here")]
pub fn read_all(
    plan: &Plan,
    scope: Scope,
    settings: &UnwindSettings,
    mapped: Option<(&Mapping, &MappedTables)>,
    chain: Option<&Applier>,
    scratch: &Path,
    keep: Option<(&WhenRead, &dyn Sink)>,
    progress: &Progress,
) -> Result<ReadResult, UnwindError> {
    let unread = scope.unread.clone();
    let order = largest_first(scope.files.clone().filter(|i| !unread.contains(i)), |i| plan.files[i].size);
    let workers = pool::run(
        settings.threads,
        order.len(),
        |w| Worker::new(w, settings, mapped, chain, scratch, scope.spill),
        |worker, k, stop| {
            let i = order[k];
            // A file `keep_base` left to pass one is copied into the output first and read there.
            match keep.map(|(w, sink)| w.copy(sink, i, &plan.files[i])).transpose()?.flatten() {
                Some(kept) => worker.read_file(i, &kept, progress, stop),
                None => worker.read_file(i, &plan.files[i], progress, stop),
            }
        },
    )?;
    let mut files = vec![FileStats::default(); plan.files.len()];
    let mut shapes: BTreeMap<Arc<str>, EntityShape> = BTreeMap::new();
    let mut untyped = EntityShape::default();
    let mut chunks = Vec::new();
    let mut spills = Vec::new();
    let mut slot_names = HashMap::new();
    let mut reject_counts = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut chain_read = ChainRead::default();
    let mut entity_stats = vec![EntityStats::default(); mapped.map(|(m, _)| m.entities.len()).unwrap_or(0)];
    for mut w in workers {
        w.spill.flush().map_err(io_err("write", &w.spill_path))?;
        for (total, s) in entity_stats.iter_mut().zip(&w.normalizer.entity_stats) {
            total.merge(s);
        }
        for (i, st) in w.files {
            files[i] = st;
        }
        for (k, s) in w.entities {
            slot_names.insert((w.worker, TableId::Entity(k.clone())), s.shape.names());
            shapes.entry(k).or_default().merge(&s.shape);
        }
        slot_names.insert((w.worker, TableId::Untyped), w.untyped.shape.names());
        for (t, names) in w.row_names.iter().enumerate() {
            slot_names.insert((w.worker, TableId::Mapped(t as u32)), names.iter().map(|n| Box::from(*n)).collect());
        }
        untyped.merge(&w.untyped.shape);
        chunks.extend(w.chunks);
        spills.push(w.spill_path);
        for (k, n) in w.reject_counts {
            *reject_counts.entry(k).or_default() += n;
        }
        warnings.extend(w.warnings);
        chain_read.merge(w.chain_read);
    }
    warnings.sort();
    chain_read.matched.sort();
    Ok(ReadResult {
        entity_stats,
        files,
        shapes,
        untyped: (untyped.items > 0).then_some(untyped),
        chunks,
        spills,
        slot_names,
        reject_counts,
        warnings,
        chain: chain_read,
        unread: scope.unread,
    })
}

#[cfg(test)]
mod tests {
    use super::largest_first;

    #[test]
    fn files_are_taken_largest_first_ties_in_plan_order() {
        let sizes = [5u64, 9, 1, 9, 7, 0];
        assert_eq!(largest_first(1..6, |i| sizes[i]), [1, 3, 4, 2, 5]);
        assert_eq!(largest_first(0..0, |i| sizes[i]), Vec::<usize>::new());
    }
}

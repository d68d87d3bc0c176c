//! Applying a chain of exports in one run: the current state of a table from its full export and
//! the incremental exports after it, as if a full export had been taken at the last window's end.
//!
//! Before pass one, the incremental exports are reduced into one final change per key
//! ([`Applier::reduce`]): the last write wins, by `WriteTimestampMicros` and then by the order of
//! the windows (an overlap repeats the same write). Memory is bounded by the keys changed, not by
//! the table. The surviving new images are written, ordered by key, to one scratch file of
//! `{"Item":…}` lines that pass one reads last, like any data file. In pass one, a full-export
//! item whose key has a final change is superseded (not written, counted with its table), and
//! change records are counted as applied. What happened per table (inserts, updates, deletes,
//! rows that moved table because their type changed, deletes of keys that were not there) is
//! assembled after pass one ([`Applier::report`]). Routing a key-only delete never guesses: its
//! table is the table of the item it deletes, or, when no item has the key, the mapping's key
//! templates say it or nobody does. This module wires stages; it parses no wire format itself.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use super::UnwindError;
use super::walk::{Unit, unit};
use crate::decode::{Item, Record, Value, write_item_json};
use crate::mapping::Mapping;
use crate::normalize::apply::{self, Route};
use crate::normalize::naming::UNTYPED_TABLE;
use crate::normalize::{Reject, RejectReason};
use crate::sink::manifest::{ChainReport, TableChanges, TableReport, WindowReport};
use crate::source::chain::{Chain, export_id};
use crate::source::frame::{Frame, Framer};
use crate::source::{DataFile, Input, Layout, Plan};

/// What a plan file is to the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not part of a chain (an ordinary run).
    Plain,
    /// A data file of the full export: its items may be superseded.
    Base,
    /// A data file of an incremental export: its change records were applied before pass one.
    Incremental,
    /// The scratch file of current images written by [`Applier::reduce`].
    Current,
}

/// The table a row goes to, as routing decides before tables are named.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableLabel {
    /// A mapped entity's table.
    Mapped(String),
    /// An inferred table, by type value.
    Entity(Arc<str>),
    Untyped,
}

/// One key's final change.
#[derive(Debug)]
struct Final {
    write_time: i64,
    /// Position of the export in the chain's application order.
    export: usize,
    /// The `{"Item":…}` line of the new image; `None` for a delete.
    line: Option<String>,
    /// The key attributes as a DynamoDB JSON object (of the key's first change record).
    keys: Box<str>,
    new_table: Option<TableLabel>,
    /// For a delete: the table the mapping's key templates give the keys, if any.
    keys_table: Option<TableLabel>,
    /// An earlier change of this key in the chain had a new image.
    had_image: bool,
    /// When applying onto an existing output: the key's last change among the exports that
    /// output already held (write time, position, its table; `None` table for a delete).
    prev: Option<(i64, usize, Option<TableLabel>)>,
    /// When applying onto an existing output: an export new to it changed this key.
    touched_by_new: bool,
    /// An export new to the output had a new image for this key.
    new_had_image: bool,
    /// The change record `line` is the image of.
    from: Origin,
}

/// Where a change record is: its plan file, line, and the byte offset of the line's start in the
/// (decompressed) file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    pub file: u32,
    pub line: u64,
    pub offset: u64,
}

/// The chain reduced to final changes, and what pass one needs to apply them.
pub struct Applier {
    pub chain: Chain,
    /// Key attribute names, sorted, from the change records' `Keys`.
    pub key_names: Vec<String>,
    /// Every key changed, by [`key_bytes`]. Pass one looks up every full-export item here, so it
    /// hashes with foldhash (already built for DataFusion) rather than SipHash.
    index: HashMap<Box<[u8]>, u32, foldhash::fast::RandomState>,
    finals: Vec<Final>,
    roles: Vec<Role>,
    type_attribute: String,
    mapping: Option<Arc<Mapping>>,
    /// Valid change records read.
    pub change_records: u64,
    /// Per export in application order: change records read.
    per_export: Vec<u64>,
    /// When applying onto an existing output: per position in application order, whether the
    /// export is new to that output (the report then counts relative to the previous output).
    new_exports: Option<Vec<bool>>,
    /// The last export the previous output held, when applying onto one.
    previous_export: Option<String>,
    /// When applying onto an existing output: the keys the new exports changed, each once, as
    /// DynamoDB JSON objects of the key attributes (what a Delta MERGE matches on).
    pub new_keys: Vec<String>,
    /// The final change of each of `new_keys`.
    new_finals: Vec<u32>,
    /// Applied onto the output in place ([`Onto::in_place`]): the full export is not read.
    in_place: bool,
    /// The plan's files as they are shown, for [`Applier::image_origin`].
    shown: Vec<String>,
    /// Per line of the file of current images, its change record.
    current_from: Vec<Origin>,
    pub warnings: Vec<String>,
}

/// What the output a chain is applied onto already held, for a report relative to it.
#[derive(Debug, Clone)]
pub struct Onto {
    /// Indexes into [`Plan::exports`] of the exports new to the output.
    pub new_exports: Vec<usize>,
    /// The last export the output held.
    pub previous_export: Option<String>,
    /// The output's state: every export it applied (its commit's, or what it was made from).
    pub held: crate::state::RunState,
    /// The full export is not read again (a Delta output with deletion vectors): only the
    /// current images of the keys the new exports changed are unwound, and where each key was is
    /// found in the output's tables ([`Applier::matched_in_place`]).
    pub in_place: bool,
}

/// What pass one saw of the chain, merged over workers.
#[derive(Debug, Default, Clone)]
pub struct ChainRead {
    /// Final changes whose key a full-export item had, with that item's table.
    pub matched: Vec<(u32, TableLabel)>,
    /// Change records read in pass one.
    pub changes: u64,
    /// Full-export items replaced or deleted by a change.
    pub superseded: u64,
}

impl ChainRead {
    pub fn merge(&mut self, o: ChainRead) {
        self.matched.extend(o.matched);
        self.changes += o.changes;
        self.superseded += o.superseded;
    }
}

/// The key of an item as map key: each key attribute's name, type and exact value (numbers in
/// canonical form), length-prefixed; `None` when the item lacks a key attribute or a key is not
/// of a key type.
pub fn key_bytes(names: &[String], item: &Item<'_>) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(32);
    key_bytes_into(names, item, &mut out).then_some(out)
}

/// [`key_bytes`] into `out` (cleared first), for callers that reuse one buffer; `false` where
/// `key_bytes` gives `None`.
fn key_bytes_into(names: &[String], item: &Item<'_>, out: &mut Vec<u8>) -> bool {
    out.clear();
    for name in names {
        let Some((_, v)) = item.iter().find(|(k, _)| k == name.as_str()) else { return false };
        let bytes: &[u8] = match v {
            Value::S(s) => s.as_bytes(),
            Value::N(n) => n.as_str().as_bytes(),
            Value::B(b) => b,
            _ => return false,
        };
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(v.tag().key().as_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    true
}

/// The table an item goes to, decided as the normalizer routes it.
pub fn route_label(type_attribute: &str, mapping: Option<&Mapping>, item: &Item<'_>) -> TableLabel {
    if let Some(m) = mapping
        && let Route::Entity(ei) = apply::route(m, item)
    {
        return TableLabel::Mapped(m.entities[ei].table.clone());
    }
    match item.iter().find(|(k, _)| k == type_attribute).map(|(_, v)| v) {
        Some(Value::S(s)) => TableLabel::Entity(Arc::from(s.as_ref())),
        _ => TableLabel::Untyped,
    }
}

/// The reject for an `{"Item":…}` line inside an incremental export.
pub fn item_in_incremental() -> Reject {
    Reject {
        reason: RejectReason::NotAnItem,
        attribute: String::new(),
        message: "an `Item` line in an incremental export, where change records are expected".into(),
        offset: 0,
    }
}

/// One change record of an incremental export, parsed for [`Applier::reduce`].
struct Parsed {
    /// Its key attribute names, sorted.
    names: Vec<String>,
    /// [`key_bytes`] by `names`; `None` when a key is not a string, number or binary.
    key: Option<Vec<u8>>,
    write_time: i64,
    /// The `{"Item":…}` line of the new image; `None` for a delete.
    line_text: Option<String>,
    /// The key attributes as a DynamoDB JSON object.
    keys_json: String,
    new_table: Option<TableLabel>,
    /// For a delete: the table the mapping's key templates give the keys, if any.
    keys_table: Option<TableLabel>,
    line: u64,
    /// The line's start in the (decompressed) file.
    offset: u64,
}

/// The change records of one incremental data file, in line order. Rejected lines are skipped:
/// pass one reads the same file and records them, with the file's checks and warnings.
fn parse_file(
    f: &DataFile,
    type_attribute: &str,
    mapping: Option<&Mapping>,
    max_line_bytes: usize,
    progress: &Arc<AtomicU64>,
) -> Result<Vec<Parsed>, UnwindError> {
    let mut framer = Framer::open(f, max_line_bytes, progress.clone())?;
    let format = framer.format();
    let mut out = Vec::new();
    while let Some(frame) = framer.next_frame() {
        let corrupt = matches!(frame, Frame::Corrupt { .. });
        if let Unit::Record { record: Record::Change(c), line, offset, .. } = unit(format, frame, max_line_bytes) {
            let mut names: Vec<String> = c.keys.iter().map(|(k, _)| k.to_string()).collect();
            names.sort();
            let key = key_bytes(&names, &c.keys);
            let new_table = c.new.as_ref().map(|n| route_label(type_attribute, mapping, n));
            let keys_table = match (&c.new, mapping) {
                (None, Some(m)) => match apply::route(m, &c.keys) {
                    Route::Entity(ei) => Some(TableLabel::Mapped(m.entities[ei].table.clone())),
                    _ => None,
                },
                _ => None,
            };
            let line_text = c.new.as_ref().map(|n| {
                let mut s = String::with_capacity(256);
                s.push_str("{\"Item\":");
                write_item_json(n, &mut s);
                s.push('}');
                s
            });
            let mut keys_json = String::with_capacity(64);
            write_item_json(&c.keys, &mut keys_json);
            out.push(Parsed {
                names,
                key,
                write_time: c.write_time_micros,
                line_text,
                keys_json,
                new_table,
                keys_table,
                line,
                offset,
            });
        }
        if corrupt {
            break;
        }
    }
    let _ = framer.finish(&f.display);
    Ok(out)
}

/// A window of incremental data files parsed before it is reduced takes files up to this many
/// bytes (as stored, gzip) past its first `threads * 2`.
const WINDOW_BYTES: u64 = 8 << 20;

/// `tasks` (export position, plan file) cut into consecutive windows: each takes at least
/// `min_files` files, and then more while the window's files (`size` of a plan file) stay within
/// [`WINDOW_BYTES`].
fn windows(tasks: &[(usize, usize)], size: impl Fn(usize) -> u64, min_files: usize) -> Vec<&[(usize, usize)]> {
    let mut out = Vec::new();
    let mut rest = tasks;
    while !rest.is_empty() {
        let (mut n, mut bytes) = (0, 0u64);
        while n < rest.len() && (n < min_files.max(1) || bytes + size(rest[n].1) <= WINDOW_BYTES) {
            bytes += size(rest[n].1);
            n += 1;
        }
        let (window, next) = rest.split_at(n);
        out.push(window);
        rest = next;
    }
    out
}

/// `keys` sorted by their bytes, as `sort_unstable` sorts them. Each key is compared 16 bytes at
/// a time, the 16 held beside it as an integer: the keys of a large chain are scattered over the
/// heap, and a sort that compares them whole misses the cache at every comparison (`memcmp` was
/// three quarters of writing the current images of 1.2M changed keys, 2.7 s of one core).
fn sorted_by_bytes(keys: Vec<(&[u8], u32)>) -> Vec<(&[u8], u32)> {
    let mut v: Vec<(u128, &[u8], u32)> = keys.into_iter().map(|(k, i)| (0, k, i)).collect();
    sort_from(&mut v, 0);
    v.into_iter().map(|(_, k, i)| (k, i)).collect()
}

/// Sorts `v`, whose keys all have the same first `at` bytes, by the bytes from `at` on.
fn sort_from(v: &mut [(u128, &[u8], u32)], at: usize) {
    if v.len() < 2 {
        return;
    }
    // Bytes `at..at + 16`, big-endian, zeros past the key's end: a key that ends there sorts
    // before any longer key with the same bytes, as it does compared whole.
    for e in v.iter_mut() {
        let rest = e.1.get(at..).unwrap_or_default();
        let mut chunk = [0u8; 16];
        let n = rest.len().min(16);
        chunk[..n].copy_from_slice(&rest[..n]);
        e.0 = u128::from_be_bytes(chunk);
    }
    v.sort_unstable_by_key(|e| e.0);
    for run in v.chunk_by_mut(|a, b| a.0 == b.0) {
        if run.len() < 2 {
            continue;
        }
        if run.iter().all(|e| e.1.len() <= at + 16) {
            // Every key ends within these bytes: only their lengths can still differ.
            run.sort_unstable_by(|a, b| a.1.cmp(b.1));
        } else {
            sort_from(run, at + 16);
        }
    }
}

/// Where the current images are written inside the scratch folder.
const CURRENT_FILE: &str = "chain-current.jsonl";

/// How the file of current images is named in the run report (and, by earlier builds, in the
/// `source_file` of `_rejects`' rows of current images).
pub const CURRENT_IMAGES: &str = "<current images from ";

/// The file of current images [`Applier::write_current`] wrote.
pub struct CurrentImages {
    path: PathBuf,
    size: u64,
    images: u64,
    /// Per line, its change record.
    from: Vec<Origin>,
}

impl Applier {
    /// Reads every incremental export of `chain` in order, reduces its change records to one
    /// final change per key, and appends the file of current images to `plan`. Rejected lines are
    /// skipped here; pass one reads the same files and records them.
    pub fn reduce(
        chain: Chain,
        plan: &mut Plan,
        settings: &super::UnwindSettings,
        scratch: &Path,
        onto: Option<&Onto>,
    ) -> Result<Applier, UnwindError> {
        let mut a = Self::reduce_changes(chain, plan, settings, onto)?;
        let current = a.write_current(scratch)?;
        a.add_current(plan, current);
        Ok(a)
    }

    /// [`Applier::reduce`] but for the file of current images, which the caller writes
    /// ([`Applier::write_current`], which only reads the applier: on a thread of its own while
    /// other work is done) and appends to `plan` ([`Applier::add_current`]) before pass one.
    pub fn reduce_changes(
        chain: Chain,
        plan: &mut Plan,
        settings: &super::UnwindSettings,
        onto: Option<&Onto>,
    ) -> Result<Applier, UnwindError> {
        let (type_attribute, mapping) = (settings.type_attribute.as_str(), settings.mapping.clone());
        let (max_line_bytes, threads) = (settings.max_line_bytes, settings.threads);
        let new_exports =
            onto.map(|o| chain.incrementals.iter().map(|i| o.new_exports.contains(i)).collect::<Vec<bool>>());
        let mut a = Applier {
            new_exports,
            previous_export: onto.and_then(|o| o.previous_export.clone()),
            key_names: Vec::new(),
            index: HashMap::default(),
            finals: Vec::new(),
            roles: vec![Role::Plain; plan.files.len()],
            type_attribute: type_attribute.to_owned(),
            mapping,
            change_records: 0,
            per_export: vec![0; chain.incrementals.len()],
            new_keys: Vec::new(),
            new_finals: Vec::new(),
            in_place: onto.is_some_and(|o| o.in_place),
            warnings: Vec::new(),
            shown: plan.files.iter().map(|f| f.display.clone()).collect(),
            current_from: Vec::new(),
            chain,
        };
        for i in plan.exports[a.chain.full].files.clone() {
            a.roles[i] = Role::Base;
        }
        // The incremental exports' data files in application order, parsed on `threads`
        // workers a window of files at a time (memory holds a window's records, not the
        // chain's) and reduced in order, so the result is the same whatever `threads` is.
        // A window is `threads * 2` files, or more while they add up to less than
        // `WINDOW_BYTES`: the workers wait while a window is reduced, and the small files of a
        // 1% export were reduced four at a time.
        let tasks: Vec<(usize, usize)> = (0..a.chain.incrementals.len())
            .flat_map(|pos| plan.exports[a.chain.incrementals[pos]].files.clone().map(move |i| (pos, i)))
            .collect();
        for &(_, i) in &tasks {
            a.roles[i] = Role::Incremental;
        }
        let progress = Arc::new(AtomicU64::new(0));
        let (type_attribute, mapping) = (a.type_attribute.clone(), a.mapping.clone());
        let files = &plan.files;
        let threads = threads.max(1);
        let parse = |window: &[(usize, usize)]| -> Result<Vec<Vec<Parsed>>, UnwindError> {
            let parsed = super::pool::run::<_, UnwindError>(
                threads,
                window.len(),
                |_| Ok(Vec::new()),
                |out: &mut Vec<(usize, Vec<Parsed>)>, t, stop| {
                    stop.check::<UnwindError>()?;
                    let f = &files[window[t].1];
                    out.push((t, parse_file(f, &type_attribute, mapping.as_deref(), max_line_bytes, &progress)?));
                    Ok(())
                },
            )?;
            let mut slots: Vec<Vec<Parsed>> = (0..window.len()).map(|_| Vec::new()).collect();
            for (t, records) in parsed.into_iter().flatten() {
                slots[t] = records;
            }
            Ok(slots)
        };
        // The next window is parsed while this one is reduced (on this thread, one core, in
        // order): memory holds two windows' records.
        let windows = windows(&tasks, |i| files[i].size, threads * 2);
        std::thread::scope(|s| {
            let mut next = windows.first().map(|&w| s.spawn(move || parse(w)));
            for k in 0..windows.len() {
                let Some(parsing) = next.take() else { break };
                let slots = super::joined(parsing, "parsing the incremental exports")?;
                next = windows.get(k + 1).map(|&w| s.spawn(move || parse(w)));
                for (&(pos, i), records) in windows[k].iter().zip(slots) {
                    for p in records {
                        a.change(pos, p, i as u32);
                    }
                }
            }
            Ok::<(), UnwindError>(())
        })?;
        Ok(a)
    }

    fn change(&mut self, pos: usize, p: Parsed, index: u32) {
        let (line, offset, file) = (p.line, p.offset, &self.shown[index as usize]);
        if self.key_names.is_empty() {
            self.key_names = p.names;
        } else if p.names != self.key_names {
            self.warnings.push(format!(
                "`{file}` line {line}: the change record's key attributes ({}) are not the table's ({}); it was not applied",
                p.names.join(", "),
                self.key_names.join(", ")
            ));
            return;
        }
        let Some(key) = p.key else {
            self.warnings.push(format!("`{file}` line {line}: a key attribute is not a string, number or binary; the change record was not applied"));
            return;
        };
        self.change_records += 1;
        self.per_export[pos] += 1;
        let (new_table, keys_table, line_text) = (p.new_table, p.keys_table, p.line_text);
        let is_new = self.new_exports.as_ref().and_then(|n| n.get(pos).copied());
        let prev = (is_new == Some(false)).then(|| (p.write_time, pos, new_table.clone()));
        let has_image = line_text.is_some();
        // One hash of the key, which is long (every key attribute's name and value): a new key
        // takes the index's next final now, pushed below.
        let (at, known) = match self.index.entry(key.into_boxed_slice()) {
            std::collections::hash_map::Entry::Occupied(e) => (*e.get(), true),
            std::collections::hash_map::Entry::Vacant(e) => (*e.insert(self.finals.len() as u32), false),
        };
        let known = known.then_some(at);
        let next = Final {
            write_time: p.write_time,
            export: pos,
            line: line_text,
            keys: match known {
                Some(i) => std::mem::take(&mut self.finals[i as usize].keys),
                None => p.keys_json.into_boxed_str(),
            },
            new_table,
            keys_table,
            had_image: false,
            prev,
            touched_by_new: is_new == Some(true),
            new_had_image: is_new == Some(true) && has_image,
            from: Origin { file: index, line, offset },
        };
        match known {
            Some(i) => {
                let old = &mut self.finals[i as usize];
                if next.touched_by_new && !old.touched_by_new {
                    self.new_keys.push(next.keys.to_string());
                    self.new_finals.push(i);
                }
                // What the previous output held of this key: the last write among its exports.
                let prev = match (&old.prev, &next.prev) {
                    (Some(o), Some(n)) if (n.0, n.1) < (o.0, o.1) => Some(o.clone()),
                    (o, None) => o.clone(),
                    (_, n) => n.clone(),
                };
                let touched_by_new = old.touched_by_new || next.touched_by_new;
                let new_had_image = old.new_had_image || next.new_had_image;
                // Last write wins; the same write seen twice (overlapping windows): the later window.
                if (next.write_time, next.export) >= (old.write_time, old.export) {
                    let had_image = old.had_image || old.line.is_some();
                    *old = Final { had_image, ..next };
                } else {
                    old.keys = next.keys;
                    if has_image {
                        old.had_image = true;
                    }
                }
                old.prev = prev;
                old.touched_by_new = touched_by_new;
                old.new_had_image = new_had_image;
            }
            None => {
                if next.touched_by_new {
                    self.new_keys.push(next.keys.to_string());
                    self.new_finals.push(self.finals.len() as u32);
                }
                self.finals.push(next);
            }
        }
    }

    /// Writes the file of current images into `scratch`: each key's final image, in key order
    /// (in place, only the keys the new exports changed).
    pub fn write_current(&self, scratch: &Path) -> Result<CurrentImages, UnwindError> {
        let path = scratch.join(CURRENT_FILE);
        let io = |action: &'static str| {
            let p = path.display().to_string();
            move |source| UnwindError::Io { action, path: p, source }
        };
        let keys = sorted_by_bytes(self.index.iter().map(|(k, &i)| (k.as_ref(), i)).collect());
        let mut w = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io("create"))?);
        let mut images = 0u64;
        let mut from = Vec::new();
        for (_, i) in keys {
            let f = &self.finals[i as usize];
            // In place, the output's tables already hold every other key's current row.
            if self.in_place && !f.touched_by_new {
                continue;
            }
            if let Some(line) = &f.line {
                w.write_all(line.as_bytes()).and_then(|_| w.write_all(b"\n")).map_err(io("write"))?;
                images += 1;
                from.push(f.from);
            }
        }
        w.flush().map_err(io("write"))?;
        drop(w);
        let size = std::fs::metadata(&path).map_err(io("read"))?.len();
        Ok(CurrentImages { path, size, images, from })
    }

    /// Appends the file of current images [`Applier::write_current`] wrote to `plan`, for pass one.
    pub fn add_current(&mut self, plan: &mut Plan, current: CurrentImages) {
        self.roles.push(Role::Current);
        self.current_from = current.from;
        let n = self.chain.incrementals.len();
        plan.files.push(DataFile {
            input: Input::Path(current.path),
            display: format!(
                "{CURRENT_IMAGES}{n} incremental export{}: {}>",
                if n == 1 { "" } else { "s" },
                current.images
            ),
            gzip: false,
            layout: Layout::ExportLines,
            size: current.size,
            expected: None,
        });
    }

    /// Where line `line` of the file of current images comes from: the change record whose new
    /// image it is, in a data file of an incremental export.
    pub fn image_origin(&self, line: u64) -> Option<Origin> {
        self.current_from.get(usize::try_from(line.checked_sub(1)?).ok()?).copied()
    }

    /// Plan file `file` as it is shown.
    pub fn shown(&self, file: u32) -> Option<&str> {
        self.shown.get(file as usize).map(String::as_str)
    }

    /// Whether an export the output already held changed the key of final change `i` (so its
    /// full-export item, if any, was superseded when that export was applied).
    pub fn held_changed(&self, i: u32) -> bool {
        self.finals.get(i as usize).is_some_and(|f| f.prev.is_some())
    }

    /// What plan file `i` is to the chain.
    pub fn role(&self, i: usize) -> Role {
        self.roles.get(i).copied().unwrap_or(Role::Plain)
    }

    /// The plan index of the file of current images.
    pub fn current_file(&self) -> usize {
        self.roles.len() - 1
    }

    /// What an output keeps of the chain's incremental exports ([`super::compact`]): in key
    /// order, every key's final change, except the deletes of keys no full-export item had
    /// (`read.matched` says which had one).
    ///
    /// In place, `read.matched` says which keys the output's tables held, not the full export:
    /// a key an export the output held changed may be in the full export and not in the tables
    /// (deleted since), so its delete is kept too (a delete of a key that is not there is
    /// counted, never an error, when the kept exports are read again).
    pub fn compacted<'s>(&'s self, read: &ChainRead) -> Vec<super::compact::FinalChange<'s>> {
        let mut in_base: Vec<bool> = self.finals.iter().map(|f| self.in_place && f.prev.is_some()).collect();
        for (i, _) in &read.matched {
            if let Some(b) = in_base.get_mut(*i as usize) {
                *b = true;
            }
        }
        let keys = sorted_by_bytes(self.index.iter().map(|(k, &i)| (k.as_ref(), i)).collect());
        keys.into_iter()
            .filter(|&(_, i)| self.finals[i as usize].line.is_some() || in_base[i as usize])
            .map(|(_, i)| {
                let f = &self.finals[i as usize];
                super::compact::FinalChange {
                    write_time_micros: f.write_time,
                    keys: &f.keys,
                    // `{"Item":` … `}` around the image.
                    image: f.line.as_deref().map(|l| &l[8..l.len() - 1]),
                }
            })
            .collect()
    }

    /// What the chain covers: its table, the first window's start, the last window's end.
    pub fn covers<'p>(&self, plan: &'p Plan) -> Option<super::compact::Covers<'p>> {
        let first = plan.exports.get(*self.chain.incrementals.first()?)?.window.as_ref()?;
        let last =
            self.chain.incrementals.iter().filter_map(|&i| plan.exports.get(i)?.window.as_ref()).max_by(|a, b| {
                let t = |w: &crate::source::manifest::Window| chrono::DateTime::parse_from_rfc3339(&w.to_time).ok();
                t(a).cmp(&t(b))
            })?;
        Some(super::compact::Covers {
            table_arn: plan.exports.get(self.chain.full)?.table_arn.as_deref(),
            from_time: &first.from_time,
            to_time: &last.to_time,
        })
    }

    /// Whether the full export is left unread ([`Onto::in_place`]).
    pub fn in_place(&self) -> bool {
        self.in_place
    }

    /// In place: `found` (an index into `new_keys`, the output's table that holds that key) as
    /// pass one's [`ChainRead::matched`] would have it from the full export. For a key the
    /// exports the output held never changed, the table that holds it now is the table of its
    /// full-export item; the report takes the others' from those exports ([`Applier::report`]).
    pub fn matched_in_place(&self, found: &[(u32, TableLabel)]) -> Vec<(u32, TableLabel)> {
        let mut out: Vec<(u32, TableLabel)> =
            found.iter().filter_map(|(k, l)| Some((*self.new_finals.get(*k as usize)?, l.clone()))).collect();
        out.sort();
        out
    }

    /// The final change of a full-export item's key, if it has one.
    pub fn lookup(&self, item: &Item<'_>) -> Option<u32> {
        if self.index.is_empty() {
            return None;
        }
        thread_local! {
            // One buffer per read worker: the key of every full-export item, built and dropped.
            static KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        KEY.with_borrow_mut(|key| {
            if key_bytes_into(&self.key_names, item, key) { self.index.get(key.as_slice()).copied() } else { None }
        })
    }

    /// The final change of the key of `item` (a full-export item or a current image an earlier
    /// run unwound) when the new exports of an apply in place changed it: a replay would not
    /// unwind the item any more.
    pub fn changed_now(&self, item: &Item<'_>) -> Option<u32> {
        self.lookup(item).filter(|&i| self.finals[i as usize].touched_by_new)
    }

    /// The table a full-export item is routed to.
    pub fn label(&self, item: &Item<'_>) -> TableLabel {
        route_label(&self.type_attribute, self.mapping.as_deref(), item)
    }

    /// The chain's part of the run report.
    pub fn report(&self, plan: &Plan, read: &ChainRead, tables: &[TableReport]) -> ChainReport {
        let name = |l: &TableLabel| match l {
            TableLabel::Mapped(t) => t.clone(),
            TableLabel::Untyped => UNTYPED_TABLE.to_owned(),
            TableLabel::Entity(e) => tables
                .iter()
                .find(|t| t.child_of.is_none() && t.entity.as_deref() == Some(e.as_ref()))
                .map(|t| t.name.clone())
                .unwrap_or_else(|| crate::normalize::naming::snake_case(e)),
        };
        let mut base: Vec<Option<&TableLabel>> = vec![None; self.finals.len()];
        for (i, l) in &read.matched {
            if let Some(b) = base.get_mut(*i as usize) {
                *b = Some(l);
            }
        }
        let mut per: BTreeMap<String, TableChanges> = BTreeMap::new();
        let mut unmatched = 0;
        let mut transient = 0;
        let onto = self.new_exports.is_some();
        for (f, b) in self.finals.iter().zip(base) {
            // Onto an existing output: only keys the new exports changed, from what it held.
            let (b, had_image) = match (onto, &f.prev) {
                (false, _) => (b, f.had_image),
                (true, _) if !f.touched_by_new => continue,
                (true, Some((_, _, held))) => (held.as_ref(), f.new_had_image),
                (true, None) => (b, f.new_had_image),
            };
            match (b, &f.new_table) {
                (Some(b), Some(n)) if b == n => per.entry(name(b)).or_default().updates += 1,
                (Some(b), Some(n)) => {
                    per.entry(name(b)).or_default().moved_out += 1;
                    per.entry(name(n)).or_default().moved_in += 1;
                }
                (Some(b), None) => per.entry(name(b)).or_default().deletes += 1,
                (None, Some(n)) => per.entry(name(n)).or_default().inserts += 1,
                (None, None) if had_image => transient += 1,
                (None, None) => {
                    unmatched += 1;
                    if let Some(t) = &f.keys_table {
                        per.entry(name(t)).or_default().unmatched_deletes += 1;
                    }
                }
            }
        }
        let full = &plan.exports[self.chain.full];
        ChainReport {
            full_export: export_id(full),
            export_time: full.export_time.clone(),
            windows: self
                .chain
                .incrementals
                .iter()
                .zip(&self.per_export)
                .enumerate()
                .filter(|(pos, _)| self.new_exports.as_ref().is_none_or(|n| n.get(*pos).copied().unwrap_or(true)))
                .map(|(_, (&i, &records))| {
                    let e = &plan.exports[i];
                    let w = e.window.clone().unwrap_or_else(|| crate::source::manifest::Window {
                        from_time: String::new(),
                        to_time: String::new(),
                        output_view: None,
                    });
                    WindowReport {
                        export: export_id(e),
                        from_time: w.from_time,
                        to_time: w.to_time,
                        output_view: w.output_view,
                        records,
                    }
                })
                .collect(),
            gaps: self.chain.gaps.clone(),
            key_attributes: self.key_names.clone(),
            change_records: self.change_records,
            changed_keys: self.finals.len() as u64,
            superseded_items: read.superseded,
            tables: per,
            unmatched_deletes: unmatched,
            created_and_deleted: transient,
            previous_export: self.previous_export.clone(),
            applied_in_place: self.in_place,
            superseded_rejects: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::json::put_line;

    proptest::proptest! {
        #[test]
        fn keys_sort_as_their_bytes_compared_whole(
            keys in proptest::collection::hash_set(
                // Few distinct bytes, zeros among them, long shared starts: the cases the
                // 16-byte chunks must order as a whole comparison does.
                proptest::strategy::Strategy::prop_map(
                    proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(0u8), 1u8..3], 0..40),
                    |tail| [b"\x02\0\0\0PKS".to_vec(), tail].concat(),
                ),
                0..200,
            )
        ) {
            let keys: Vec<Vec<u8>> = keys.into_iter().collect();
            let given: Vec<(&[u8], u32)> = keys.iter().enumerate().map(|(i, k)| (k.as_slice(), i as u32)).collect();
            let mut want = given.clone();
            want.sort_unstable();
            proptest::prop_assert_eq!(sorted_by_bytes(given), want);
        }
    }

    #[test]
    fn windows_take_small_files_together_and_large_ones_a_few_at_a_time() {
        let tasks: Vec<(usize, usize)> = (0..10).map(|i| (0, i)).collect();
        let cut = |size: &dyn Fn(usize) -> u64, min: usize| -> Vec<usize> {
            windows(&tasks, size, min).iter().map(|w| w.len()).collect()
        };
        // Small files: one window, whatever the minimum.
        assert_eq!(cut(&|_| 200_000, 4), vec![10]);
        // Files larger than the bound: `min_files` at a time, the last window the rest.
        assert_eq!(cut(&|_| WINDOW_BYTES, 4), vec![4, 4, 2]);
        // Files of a quarter of the bound: the minimum, then as many as fit.
        assert_eq!(cut(&|_| WINDOW_BYTES / 4, 2), vec![4, 4, 2]);
        // A large file among small ones ends the window it would overflow, and starts the next.
        assert_eq!(cut(&|i| if i == 5 { WINDOW_BYTES } else { 1000 }, 2), vec![5, 2, 3]);
        // Every file in order, each once, and a minimum of 0 still makes progress.
        let all: Vec<(usize, usize)> = windows(&tasks, |_| WINDOW_BYTES * 2, 0).concat();
        assert_eq!(all, tasks);
        assert!(windows(&[], |_| 1, 4).is_empty());
    }

    #[test]
    fn keys_are_exact_and_canonical() {
        let names = vec!["PK".to_owned(), "SK".to_owned()];
        let a = put_line(r#"{"Item":{"SK":{"N":"1.50"},"PK":{"S":"a"},"x":{"S":"1"}}}"#);
        let b = put_line(r#"{"Item":{"PK":{"S":"a"},"SK":{"N":"1.5"}}}"#);
        let c = put_line(r#"{"Item":{"PK":{"S":"a"},"SK":{"S":"1.5"}}}"#);
        let d = put_line(r#"{"Item":{"PK":{"S":"a"}}}"#);
        assert_eq!(key_bytes(&names, &a), key_bytes(&names, &b));
        assert_ne!(key_bytes(&names, &b), key_bytes(&names, &c));
        assert_eq!(key_bytes(&names, &d), None);
    }
}

//! Incremental exports after the sample's full export (`etl sample --incrementals N`), and the
//! table's state at the end of the last one written as a full export of its own (the oracle of
//! the chain).
//!
//! The table changes along one timeline of write events, drawn from the seed: each window
//! changes about `change_percent` of the items (chosen by a hash of the seed, the window and the
//! key, so selection needs no table in memory), by updates (a new `status`, `updated_at`,
//! `revision`), attribute removals, type changes (`Type` `Order` becomes `ArchivedOrder`: the
//! row moves table), deletes and re-inserts of deleted keys, and inserts new users; some new
//! users are inserted and deleted inside one window. Events happen after the full export's
//! `exportTime`, inside the part of each window no earlier window covered, never in a gap. Each
//! export is then what DynamoDB writes: every key changed in its window once, compacted to its
//! net change (`OldImage` the state at `exportFromTime`, `NewImage` the state at `exportToTime`,
//! the last write's time), nothing for a key inserted and deleted inside the window, `OldImage`
//! only in `NEW_AND_OLD_IMAGES`; an overlap repeats the events it covers. Overlaps are not
//! harmless in one case, which the generator therefore never writes: a key absent when the next
//! window starts, written inside the overlap and deleted later in the next window. The next
//! export compacts that to nothing while the earlier one holds the write, so the chain would keep
//! an item the table no longer has; re-inserts (and inserted-then-deleted items) are drawn
//! before the next window starts. The layout is AWS's:
//! each export's manifests in `AWSDynamoDB/<ExportId>/`, its data files in the shared
//! `AWSDynamoDB/data/`, one of them empty. Memory is bounded by the keys changed. Like the rest
//! of the sample it never reads exports and never uses the pipeline's decoders or writers.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::export::{self, ExportNames, ManifestFileLine, Partitions, iso_millis, write_gzip};
use super::item::{Av, ChangeLine, Item, n, s};
use super::rng::{Rng, TAG_CHANGE, TAG_FINAL_EXPORT, TAG_INCREMENTAL_EXPORT, TAG_WINDOW, mix};
use super::shop::{Kind, Shop};
use super::words::{FIRST_NAMES, LAST_NAMES};
use super::{SampleError, SampleFormat, SampleOptions};

/// The `outputView` of the incremental exports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum View {
    #[default]
    NewAndOldImages,
    /// Updates carry only the new image, deletes only `Keys`.
    NewImage,
}

impl View {
    pub fn output_view(self) -> &'static str {
        match self {
            View::NewAndOldImages => "NEW_AND_OLD_IMAGES",
            View::NewImage => "NEW_IMAGE",
        }
    }
}

/// The incremental exports to write after the full export of [`SampleOptions`].
#[derive(Debug, Clone)]
pub struct IncrementalOptions {
    /// How many incremental exports (windows), at least 1.
    pub count: usize,
    /// Share of the table's items each window changes, in percent (0 to 100); inserts and
    /// insert-then-deletes come on top (a fifth and a twentieth of the changed items, at least 1).
    pub change_percent: f64,
    pub view: View,
    /// Seconds between what the exports before the last one cover and the start of the last
    /// window (with one window: after the full export's `exportTime`); 0 for none.
    pub gap_seconds: u64,
    /// Seconds each window after the first starts before the previous one ends (below 900, the
    /// shortest window).
    pub overlap_seconds: u64,
    /// Where to write the final state as a full export and `changes.json`; `None` writes neither.
    pub final_out: Option<PathBuf>,
}

/// One incremental export written.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WindowSummary {
    pub export_id: String,
    pub export_dir: PathBuf,
    pub from_time: String,
    pub to_time: String,
    pub output_view: &'static str,
    /// Change records in the export (its `itemCount`).
    pub records: u64,
    /// Write events drawn in the window's own time (an overlap's records are counted where the
    /// events were drawn).
    pub inserts: u64,
    pub updates: u64,
    pub attribute_removals: u64,
    pub type_changes: u64,
    pub deletes: u64,
    pub inserted_and_deleted: u64,
}

/// The chain's effect per key, as applying it must count it: the key's last record (by write
/// time, then window) against its item in the full export.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct NetChanges {
    /// Keys changed by at least one record.
    pub changed_keys: u64,
    pub change_records: u64,
    pub inserts: u64,
    pub updates: u64,
    pub deletes: u64,
    /// Items whose `Type` changed: out of one table, into another.
    pub moved: u64,
    /// Keys not in the full export, inserted by one record and deleted by a later one.
    pub created_and_deleted: u64,
    /// Deletes of keys never seen with an image in the chain.
    pub unmatched_deletes: u64,
}

/// What [`generate_incrementals`] wrote.
#[derive(Debug, Clone, Serialize)]
pub struct IncrementalSummary {
    pub windows: Vec<WindowSummary>,
    pub net: NetChanges,
    /// `PK`s of the items inserted and deleted inside one window: in no export, nor in the
    /// final state.
    pub absent_keys: Vec<String>,
    /// The final state's export folder (`…/AWSDynamoDB/<ExportId>`), its `exportTime` and items.
    pub final_export: Option<PathBuf>,
    pub final_export_time: String,
    pub final_items: u64,
}

type Key = (String, String);

/// What each window changes of the full export, and the histories of those keys.
type Selection = (Vec<Vec<Key>>, BTreeMap<Key, History>);

/// One key's records across the chain: write time, window, new image.
type KeyRecords<'a> = Vec<(u64, usize, Option<&'a Item>)>;

#[derive(Debug)]
struct Event {
    micros: u64,
    image: Option<Item>,
}

/// A changed key: its item in the full export, its kind, and its write events in time order.
#[derive(Debug)]
struct History {
    base: Option<Item>,
    kind: Kind,
    events: Vec<Event>,
}

impl History {
    fn current(&self) -> Option<&Item> {
        match self.events.last() {
            Some(e) => e.image.as_ref(),
            None => self.base.as_ref(),
        }
    }

    /// The item just before `micros`.
    fn before(&self, micros: u64) -> Option<&Item> {
        match self.events.iter().rev().find(|e| e.micros < micros) {
            Some(e) => e.image.as_ref(),
            None => self.base.as_ref(),
        }
    }
}

struct Window {
    from_ms: u64,
    to_ms: u64,
    /// Where this window's own events start: the end of what earlier windows cover.
    events_from_ms: u64,
    /// Where the next window starts, if inside this one (an overlap), else `to_ms`.
    next_from_ms: u64,
    /// Where the last later window that starts inside this one starts, else `to_ms`: every
    /// later window that sees any of this one's time from here on sees all of it. With windows
    /// shorter than twice the overlap, the window after next overlaps this one too.
    tail_from_ms: u64,
}

fn key_of(item: &Item) -> Option<Key> {
    match (item.get("PK"), item.get("SK")) {
        (Some(Av::S(pk)), Some(Av::S(sk))) => Some((pk.clone(), sk.clone())),
        _ => None,
    }
}

fn key_hash(key: &Key) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in key.0.bytes().chain([0]).chain(key.1.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix(h)
}

fn keys_item(key: &Key) -> Item {
    let mut k = Item::default();
    k.put("PK", s(key.0.as_str())).put("SK", s(key.1.as_str()));
    k
}

fn type_of(item: &Item) -> Option<&str> {
    match item.get("Type") {
        Some(Av::S(t)) => Some(t),
        _ => None,
    }
}

/// Writes `inc.count` incremental exports of the table [`super::generate`] wrote with `opts`
/// (call it first), under the same `opts.out`, and the final state if asked.
pub fn generate_incrementals(
    opts: &SampleOptions,
    inc: &IncrementalOptions,
) -> Result<IncrementalSummary, SampleError> {
    if inc.count == 0 {
        return Err(SampleError::NoIncrementals);
    }
    if !(0.0..=100.0).contains(&inc.change_percent) {
        return Err(SampleError::BadChangePercent { percent: inc.change_percent });
    }
    if inc.overlap_seconds >= 900 {
        return Err(SampleError::OverlapTooLong { seconds: inc.overlap_seconds });
    }
    let shop = Shop::new(opts.seed, opts.users, opts.files)?;
    let full = ExportNames::new(opts.seed, opts.files);
    let windows = windows(opts.seed, full.start_ms, inc);

    let (selected, mut histories) = select(&shop, opts.seed, windows.len(), inc.change_percent)?;

    let mut summaries = Vec::with_capacity(windows.len());
    let mut absent_keys = Vec::new();
    for (w, window) in windows.iter().enumerate() {
        let mut stats = draw_events(opts.seed, w, window, &selected[w], &mut histories, &mut absent_keys);
        let (export_id, export_dir, records) = write_window(opts, inc, w, window, &histories)?;
        stats.export_id = export_id;
        stats.export_dir = export_dir;
        stats.records = records;
        stats.from_time = iso_millis(window.from_ms);
        stats.to_time = iso_millis(window.to_ms);
        stats.output_view = inc.view.output_view();
        summaries.push(stats);
    }
    let net = net_changes(&windows, &histories);

    let last_to = windows.last().map_or(full.start_ms, |w| w.to_ms);
    let mut summary = IncrementalSummary {
        windows: summaries,
        net,
        absent_keys,
        final_export: None,
        final_export_time: iso_millis(last_to),
        final_items: 0,
    };
    if let Some(final_out) = &inc.final_out {
        let names = ExportNames::later(opts.seed, TAG_FINAL_EXPORT, 0, last_to, opts.files);
        let state = FinalState::new(&shop, &histories);
        let written = export::write_full(&state, &names, final_out, opts.format)?;
        summary.final_items = written.counts.iter().sum();
        summary.final_export = Some(written.export_dir);
        let path = final_out.join("changes.json");
        let bytes =
            serde_json::to_vec_pretty(&summary).map_err(|source| SampleError::Encode { path: path.clone(), source })?;
        fs::write(&path, bytes).map_err(|source| SampleError::Write { path, source })?;
    }
    Ok(summary)
}

/// Which full-export items each of `windows` windows changes, by a hash of the seed, the window
/// and the key (one pass over the table), and their histories, with no events yet.
fn select(shop: &Shop, seed: u64, windows: usize, change_percent: f64) -> Result<Selection, SampleError> {
    let threshold = (change_percent * 10_000.0).round() as u64;
    let mut histories: BTreeMap<Key, History> = BTreeMap::new();
    let mut selected: Vec<Vec<Key>> = vec![Vec::new(); windows];
    shop.for_each_item(None, |kind, item| {
        let Some(key) = key_of(item) else { return Ok::<(), SampleError>(()) };
        let h = key_hash(&key);
        for (w, chosen) in selected.iter_mut().enumerate() {
            let draw = mix(seed ^ mix(h ^ (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            if draw % 1_000_000 < threshold {
                chosen.push(key.clone());
                histories.entry(key.clone()).or_insert_with(|| History {
                    base: Some(item.clone()),
                    kind,
                    events: Vec::new(),
                });
            }
        }
        Ok(())
    })?;
    Ok((selected, histories))
}

/// The windows: the first starts at the minute of the full export's `exportTime` (or `gap`
/// after it), each next one `overlap` before the previous one ends (the last one `gap` after
/// it), each 15 to 60 minutes long.
fn windows(seed: u64, export_ms: u64, inc: &IncrementalOptions) -> Vec<Window> {
    let mut covered = export_ms;
    let mut out = Vec::with_capacity(inc.count);
    for w in 0..inc.count {
        let mut r = Rng::stream(seed, TAG_WINDOW, w as u64);
        let from_ms = if w + 1 == inc.count && inc.gap_seconds > 0 {
            covered + inc.gap_seconds * 1000
        } else if w == 0 {
            export_ms - export_ms % 60_000
        } else {
            covered - inc.overlap_seconds * 1000
        };
        let to_ms = from_ms + r.range(15, 60) * 60_000;
        if let Some(prev) = out.last_mut() {
            let prev: &mut Window = prev;
            prev.next_from_ms = from_ms.min(prev.to_ms);
        }
        // Later windows start later: the latest one starting inside an earlier window is this.
        for earlier in out.iter_mut().filter(|e| from_ms < e.to_ms) {
            earlier.tail_from_ms = from_ms;
        }
        out.push(Window {
            from_ms,
            to_ms,
            events_from_ms: covered.max(from_ms),
            next_from_ms: to_ms,
            tail_from_ms: to_ms,
        });
        covered = to_ms;
    }
    out
}

/// Draws window `w`'s write events into `histories`.
fn draw_events(
    seed: u64,
    w: usize,
    window: &Window,
    selected: &[Key],
    histories: &mut BTreeMap<Key, History>,
    absent_keys: &mut Vec<String>,
) -> WindowSummary {
    let mut r = Rng::stream(seed, TAG_CHANGE, w as u64);
    let (lo, hi) = (window.events_from_ms * 1000, window.to_ms * 1000);
    let mut stats = WindowSummary {
        export_id: String::new(),
        export_dir: PathBuf::new(),
        from_time: String::new(),
        to_time: String::new(),
        output_view: "",
        records: 0,
        inserts: 0,
        updates: 0,
        attribute_removals: 0,
        type_changes: 0,
        deletes: 0,
        inserted_and_deleted: 0,
    };
    let revision = n(w + 1);
    for key in selected {
        let Some(h) = histories.get_mut(key) else { continue };
        let mut micros = r.range(lo, hi - 1);
        let image = match h.current() {
            // Deleted by an earlier window: written again, before the next window starts (see
            // the module documentation).
            None => {
                let split = (window.next_from_ms * 1000).clamp(lo, hi);
                if micros >= split {
                    if split == lo {
                        continue;
                    }
                    micros = r.range(lo, split - 1);
                }
                let secs = n(micros / 1_000_000);
                stats.inserts += 1;
                h.base.clone().map(|mut item| {
                    item.set("restored_at", secs);
                    item
                })
            }
            Some(current) => {
                let secs = n(micros / 1_000_000);
                let mut item = current.clone();
                let roll = r.below(100);
                let removable: Vec<&'static str> =
                    item.attrs().iter().map(|(k, _)| *k).filter(|k| !matches!(*k, "PK" | "SK" | "Type")).collect();
                let archivable = type_of(&item).is_some_and(|t| !t.starts_with("Archived"));
                if roll >= 75 {
                    stats.deletes += 1;
                    None
                } else if (45..65).contains(&roll) && !removable.is_empty() {
                    stats.attribute_removals += 1;
                    let name = *r.pick::<&str>(&removable);
                    item.remove(name);
                    Some(item)
                } else if (65..75).contains(&roll) && archivable {
                    stats.type_changes += 1;
                    let archived = format!("Archived{}", type_of(&item).unwrap_or_default());
                    item.set("Type", s(archived)).set("archived_at", secs);
                    Some(item)
                } else {
                    stats.updates += 1;
                    if matches!(item.get("status"), Some(Av::S(_))) {
                        item.set("status", s(*r.pick(&["active", "suspended", "shipped", "returned"])));
                    }
                    item.set("updated_at", secs).set("revision", revision.clone());
                    Some(item)
                }
            }
        };
        h.events.push(Event { micros, image });
    }
    let changed = selected.len() as u64;
    for i in 0..changed / 5 + 1 {
        let email = format!("new-{w}-{i}@example.com");
        let pk = format!("USER#{email}");
        let micros = r.range(lo, hi - 1);
        let item = new_user(&mut r, &email, &pk, micros / 1_000_000);
        let events = vec![Event { micros, image: Some(item) }];
        histories.insert((pk, "PROFILE".to_owned()), History { base: None, kind: Kind::User, events });
        stats.inserts += 1;
    }
    for i in 0..changed / 20 + 1 {
        let email = format!("gone-{w}-{i}@example.com");
        let pk = format!("USER#{email}");
        // Both writes before the next window starts or where every later window overlapping
        // this one sees them both, so that no export sees one without the other (an overlap
        // seeing only the delete would export it).
        let split = (window.next_from_ms * 1000).clamp(lo, hi);
        let tail = (window.tail_from_ms * 1000).clamp(split, hi);
        let (a, b) = if split - lo >= 2 && (hi - tail < 2 || r.chance(50)) { (lo, split) } else { (tail, hi) };
        let inserted = r.range(a, b - 2);
        let deleted = r.range(inserted + 1, b - 1);
        let item = new_user(&mut r, &email, &pk, inserted / 1_000_000);
        let events = vec![Event { micros: inserted, image: Some(item) }, Event { micros: deleted, image: None }];
        absent_keys.push(pk.clone());
        histories.insert((pk, "PROFILE".to_owned()), History { base: None, kind: Kind::User, events });
        stats.inserted_and_deleted += 1;
    }
    stats
}

fn new_user(r: &mut Rng, email: &str, pk: &str, signup_at: u64) -> Item {
    let mut it = Item::default();
    it.put("PK", s(pk))
        .put("SK", s("PROFILE"))
        .put("Type", s("User"))
        .put("email", s(email))
        .put("name", s(format!("{} {}", r.pick(FIRST_NAMES), r.pick(LAST_NAMES))))
        .put("signup_at", n(signup_at))
        .put("status", s("active"))
        .put("StatusIndexPK", s("STATUS#active"))
        .put("verified", Av::Bool(false))
        .put("login_count", n(0))
        .put("lifetime_points", n(0))
        .put("credit_balance", n(0));
    it
}

/// One key's record in one export.
struct Record<'a> {
    key: &'a Key,
    micros: u64,
    old: Option<&'a Item>,
    new: Option<&'a Item>,
}

/// Every key's net change over `window`: nothing for a key without an event in it, or inserted
/// and deleted inside it.
fn records<'a>(window: &Window, histories: &'a BTreeMap<Key, History>) -> Vec<Record<'a>> {
    let (from, to) = (window.from_ms * 1000, window.to_ms * 1000);
    let mut out = Vec::new();
    for (key, h) in histories {
        let Some(last) = h.events.iter().rev().find(|e| e.micros >= from && e.micros < to) else { continue };
        let (old, new) = (h.before(from), h.before(to));
        if old.is_none() && new.is_none() {
            continue;
        }
        out.push(Record { key, micros: last.micros, old, new });
    }
    out
}

/// Writes window `w`'s export; returns its id, folder and record count.
fn write_window(
    opts: &SampleOptions,
    inc: &IncrementalOptions,
    w: usize,
    window: &Window,
    histories: &BTreeMap<Key, History>,
) -> Result<(String, PathBuf, u64), SampleError> {
    let names = ExportNames::later(opts.seed, TAG_INCREMENTAL_EXPORT, w as u64, window.to_ms, opts.files);
    let aws = opts.out.join("AWSDynamoDB");
    let export_dir = aws.join(&names.id);
    if export_dir.exists() {
        return Err(SampleError::ExportExists { path: export_dir });
    }
    let data_dir = aws.join("data");
    for dir in [&export_dir, &data_dir] {
        fs::create_dir_all(dir).map_err(|source| SampleError::CreateDir { path: dir.clone(), source })?;
    }
    fs::write(export_dir.join("_started"), b"")
        .map_err(|source| SampleError::Write { path: export_dir.join("_started"), source })?;

    // Records spread over the non-empty files by key; slot `empty_slot` stays empty.
    let files = opts.files;
    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); files];
    let mut counts = vec![0u64; files];
    let mut line = String::new();
    let records = records(window, histories);
    for rec in &records {
        let f = (key_hash(rec.key) % files as u64) as usize;
        let keys = keys_item(rec.key);
        let old = if inc.view == View::NewAndOldImages { rec.old } else { None };
        let change = ChangeLine { write_micros: rec.micros, keys: &keys, old, new: rec.new };
        match opts.format {
            SampleFormat::DynamodbJson => {
                serde_json::to_writer(&mut bufs[f], &change)
                    .map_err(|source| SampleError::Encode { path: export_dir.clone(), source })?;
                bufs[f].push(b'\n');
            }
            SampleFormat::Ion => {
                line.clear();
                super::ion::write_change_line(&mut line, &change);
                bufs[f].extend_from_slice(line.as_bytes());
            }
        }
        counts[f] += 1;
    }
    let ext = opts.format.extension();
    let mut lines = Vec::with_capacity(files + 1);
    let mut raw_bytes = 0;
    let mut partition = 0;
    for (slot, name) in names.file_names.iter().enumerate() {
        let key = format!("AWSDynamoDB/data/{name}{ext}");
        let path = opts.out.join(&key);
        if path.exists() {
            return Err(SampleError::ExportExists { path });
        }
        let (raw, count): (&[u8], u64) = if slot == names.empty_slot {
            (&[], 0)
        } else {
            partition += 1;
            (&bufs[partition - 1], counts[partition - 1])
        };
        let (md5, _) = write_gzip(&path, raw)?;
        raw_bytes += raw.len() as u64;
        lines.push(ManifestFileLine::new(count, md5, key));
    }
    let total = records.len() as u64;
    let summary = names.incremental_summary(
        total,
        raw_bytes,
        opts.format,
        (window.from_ms, window.to_ms),
        inc.view.output_view(),
    );
    export::write_manifests(&export_dir, &lines, &summary)?;
    Ok((names.id, export_dir, total))
}

/// The chain's net effect per key, from the records the exports hold.
fn net_changes(windows: &[Window], histories: &BTreeMap<Key, History>) -> NetChanges {
    let per_window: Vec<Vec<Record<'_>>> = windows.iter().map(|w| records(w, histories)).collect();
    // Per key: (write time, window, new image) of each record, in window order.
    let mut by_key: BTreeMap<&Key, KeyRecords<'_>> = BTreeMap::new();
    let mut net = NetChanges::default();
    for (w, recs) in per_window.iter().enumerate() {
        for r in recs {
            by_key.entry(r.key).or_default().push((r.micros, w, r.new));
            net.change_records += 1;
        }
    }
    for (key, recs) in &by_key {
        net.changed_keys += 1;
        let Some(last) = recs.iter().max_by_key(|(micros, w, _)| (*micros, *w)) else { continue };
        let base = histories.get(*key).and_then(|h| h.base.as_ref());
        match (base, last.2) {
            (Some(b), Some(new)) if type_of(b) == type_of(new) => net.updates += 1,
            (Some(_), Some(_)) => net.moved += 1,
            (Some(_), None) => net.deletes += 1,
            (None, Some(_)) => net.inserts += 1,
            (None, None) if recs.iter().any(|r| r.2.is_some()) => net.created_and_deleted += 1,
            (None, None) => net.unmatched_deletes += 1,
        }
    }
    net
}

/// The table at the end of the last window, by data file: the full export's items as changed,
/// then the inserted items that are still there.
struct FinalState<'a> {
    shop: &'a Shop,
    histories: &'a BTreeMap<Key, History>,
    inserted: Vec<Vec<&'a History>>,
}

impl<'a> FinalState<'a> {
    fn new(shop: &'a Shop, histories: &'a BTreeMap<Key, History>) -> Self {
        let files = shop.files();
        let mut inserted = vec![Vec::new(); files];
        for (key, h) in histories {
            if h.base.is_none() && h.current().is_some() {
                inserted[(key_hash(key) % files as u64) as usize].push(h);
            }
        }
        FinalState { shop, histories, inserted }
    }
}

impl Partitions for FinalState<'_> {
    fn files(&self) -> usize {
        self.shop.files()
    }

    fn for_each_in(
        &self,
        partition: usize,
        emit: &mut dyn FnMut(Kind, &Item) -> Result<(), SampleError>,
    ) -> Result<(), SampleError> {
        self.shop.for_each_item(Some(partition), |kind, item| {
            match key_of(item).and_then(|k| self.histories.get(&k)) {
                Some(h) => match h.current() {
                    Some(current) => emit(kind, current),
                    None => Ok(()),
                },
                None => emit(kind, item),
            }
        })?;
        for h in &self.inserted[partition] {
            if let Some(current) = h.current() {
                emit(h.kind, current)?;
            }
        }
        Ok(())
    }
}

/// Where [`generate_incrementals`] puts the final state unless told otherwise: `final/` in `out`.
pub fn default_final_out(out: &Path) -> PathBuf {
    out.join("final")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The table as a map by key, from `emit`-style iteration.
    fn table(each: impl FnOnce(&mut dyn FnMut(Kind, &Item) -> Result<(), SampleError>)) -> BTreeMap<Key, Item> {
        let mut t = BTreeMap::new();
        each(&mut |_, item| {
            let key = key_of(item).expect("every sample item has `PK` and `SK`");
            assert!(t.insert(key, item.clone()).is_none(), "a key twice");
            Ok(())
        });
        t
    }

    /// Applies the exports' records to the full export the way DynamoDB's documentation says (the
    /// last write per key wins; a new image replaces, none deletes) and returns the result.
    fn applied(shop: &Shop, windows: &[Window], histories: &BTreeMap<Key, History>) -> BTreeMap<Key, Item> {
        let mut t = table(|emit| shop.for_each_item(None, |k, i| emit(k, i)).unwrap());
        let mut all: Vec<(u64, usize, &Key, Option<&Item>)> = Vec::new(); // time, window, key, image
        for (w, window) in windows.iter().enumerate() {
            for r in records(window, histories) {
                all.push((r.micros, w, r.key, r.new));
            }
        }
        all.sort_by_key(|(micros, w, _, _)| (*micros, *w));
        for (_, _, key, new) in all {
            match new {
                Some(item) => t.insert(key.clone(), item.clone()),
                None => t.remove(key),
            };
        }
        t
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// The exports lead to the final state the generator writes, whatever the seed, share,
        /// number of windows and overlap; inserted-and-deleted keys are in no export.
        #[test]
        fn the_exports_lead_to_the_final_state(
            seed in 0u64..1_000,
            users in 3u64..40,
            count in 1usize..4,
            percent in 0.0f64..60.0,
            overlap in prop_oneof![Just(0u64), 1u64..899],
        ) {
            let shop = Shop::new(seed, users, 2).unwrap();
            let inc = IncrementalOptions {
                count,
                change_percent: percent,
                view: View::NewImage,
                gap_seconds: 0,
                overlap_seconds: overlap,
                final_out: None,
            };
            let full = ExportNames::new(seed, 2);
            let windows = windows(seed, full.start_ms, &inc);
            for pair in windows.windows(2) {
                prop_assert_eq!(pair[1].from_ms + overlap * 1000, pair[0].to_ms);
            }
            prop_assert!(windows[0].from_ms <= full.start_ms);
            let (selected, mut histories) = select(&shop, seed, count, percent).unwrap();
            let mut absent = Vec::new();
            for (w, window) in windows.iter().enumerate() {
                draw_events(seed, w, window, &selected[w], &mut histories, &mut absent);
            }
            let state = FinalState::new(&shop, &histories);
            let final_state = table(|emit| {
                for p in 0..2 {
                    state.for_each_in(p, emit).unwrap();
                }
            });
            prop_assert_eq!(applied(&shop, &windows, &histories), final_state);
            prop_assert!(absent.len() >= count);
            for w in &windows {
                for r in records(w, &histories) {
                    prop_assert!(!absent.contains(&r.key.0), "{} is in an export", r.key.0);
                    prop_assert!(r.micros >= w.from_ms * 1000 && r.micros < w.to_ms * 1000);
                }
            }
        }
    }
}

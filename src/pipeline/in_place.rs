//! Applying incremental exports in place: onto a Delta output, or with `--in-place` onto a
//! Parquet output (local or on S3), an apply does not replay the full export it keeps.
//!
//! An ordinary apply ([`super::apply`]) unwinds the whole chain again (the full export, the
//! exports the output already applied, the new ones) and merges the keys the new exports changed
//! out of that replay: as much work as a full unwind, whatever the size of the change. In place,
//! pass one reads the incremental exports (with their checks and rejects, as always) and the
//! current images of the keys the new exports changed, and skips the full export's data files
//! (their checksums and counts were verified when the output was made, and the output keeps
//! them). What the replay gave besides the changed rows comes from the output itself:
//!
//! - where each changed key was (the report's inserts, updates, deletes, moves; which deletes of
//!   the kept exports to keep when they are compacted): its live row in the output's tables,
//!   found by their key columns ([`locate`]): an inferred table's key attributes, a mapped
//!   table's key template columns ([`crate::normalize::identity`]), and for a mapped child table
//!   its parent's, whose rows of changed keys go with the parent's;
//! - each table's contract: the output's, extended with the columns only the changed rows have
//!   (and, for a Parquet output, widened where the changed rows need it: an `int64` column into
//!   their `decimal`, a `decimal` into one of a larger scale) ([`complete`],
//!   [`crate::schema::diff::extend`]); the Delta MERGE then marks the changed
//!   keys' rows in deletion vectors (without them, rewrites each file holding one without
//!   those rows) and adds their new rows, and `_rejects` takes this run's
//!   rejects by an append; a Parquet output's tables are made of its files, those holding changed
//!   keys rewritten without them, and the run's rows ([`rewrite`], [`crate::sink::rewrite`]);
//! - the rejects a replay would no longer make: the output's rejects of items whose keys the new
//!   exports changed, found by reading their raw lines back ([`crate::sink::delta::rejects`]),
//!   are left out of `_rejects` like changed keys' rows (in a deletion vector, or a rewrite of
//!   the files holding them).
//!
//! Anything that would need the replay (a changed row that does not fit its table's contract
//! without rewriting it, a table without a contract, an earlier attempt of the same apply that
//! merged some tables and stopped) is a reason, and the run replays instead: the same output,
//! the slower way, said in the report's warnings.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::UnwindError;
use super::chain::{Applier, TableLabel};
use super::write::Written;
use crate::normalize::identity::IdentityKeys;
use crate::normalize::naming::{REJECTS_TABLE, UNTYPED_TABLE};
use crate::schema::TableSchema;
use crate::sink::delta::Home;
use crate::sink::manifest::{FileReport, TableReport};
use crate::sink::{Format, RunManifest, Sink};

/// What an apply in place works from: the output, as its committed run left it.
pub struct InPlace {
    /// The output's folder or prefix.
    pub home: Home,
    /// Its committed `_etl/run.json`.
    pub previous: RunManifest,
    /// Its tables' contracts (`_etl/schema/`).
    pub contracts: Vec<TableSchema>,
}

/// An apply in place onto the output `sink` writes, when this run can be one: incremental
/// exports applied onto a Delta output or, with
/// `--in-place`, onto a Parquet output (a folder or an object-store prefix), whose rows the
/// options of this run make. `None` for any other run, which replays as before.
pub fn candidate(
    settings: &super::UnwindSettings,
    layout: &crate::sink::manifest::FileLayout,
    sink: &dyn Sink,
) -> Result<Option<InPlace>, UnwindError> {
    if settings.shard.is_some() {
        return Ok(None);
    }
    let home = match (settings.format, &settings.target) {
        (Format::Delta, _) => sink.delta_home(),
        (Format::Parquet, _) if !settings.in_place || sink.staged().is_none() => None,
        (Format::Parquet, crate::store::Target::Path(dir)) => Some(Home::Dir(dir.clone())),
        (Format::Parquet, crate::store::Target::Object(_)) => sink.object_home(),
    };
    let Some(home) = home else { return Ok(None) };
    let Some(previous) = super::apply::previous_manifest(&settings.target, sink)? else { return Ok(None) };
    let delta = crate::sink::delta::is_delta_output(&previous);
    let applies = match settings.format {
        Format::Parquet => !delta,
        Format::Delta => delta,
    };
    // Only onto an output whose rows this run's options make (the same type attribute, line
    // limit, mapping): with others, the output is written again whole.
    let applies = applies && super::same_rows(&previous, settings, layout);
    if !applies {
        return Ok(None);
    }
    let contracts = crate::sink::manifest::read_contracts(&settings.target, &settings.aws)?.unwrap_or_default();
    Ok(Some(InPlace { home, previous, contracts }))
}

/// Where the keys `applier`'s new exports changed are live in the output's tables, as pass one's
/// [`super::chain::ChainRead::matched`] would have them from the full export, the tables' files
/// read on up to `threads` threads; `Ok(Err(reason))` when a table cannot say (the run then
/// replays).
///
/// Three passes on the pool: the changed keys decoded (once for every inferred table, as rows of
/// its identity columns for each mapped table), each table's search made (a Delta table's log
/// read), then every table's files searched, the largest first, so that the files of one large
/// table are read on every thread.
pub fn locate(
    ip: &InPlace,
    applier: &Applier,
    identities: &BTreeMap<String, Result<IdentityKeys, String>>,
    txn_version: Option<i64>,
    threads: usize,
) -> Result<Result<Located, String>, UnwindError> {
    use crate::sink::delta::merge::{ChangedKeys, FileFound, Search};
    let started = std::time::Instant::now();
    let mut mapped = BTreeMap::new();
    for (table, found) in identities {
        if let Ok(k) = found {
            mapped.insert(table.as_str(), (k.columns.as_slice(), k.keys.as_slice()));
        }
    }
    // Each table's label (none for a child table, whose rows are its parent's keys' too),
    // contract and keys, the largest table first.
    let mut tables = Vec::new();
    for t in &ip.previous.tables {
        if t.name == REJECTS_TABLE {
            continue;
        }
        if let Some(Err(reason)) = identities.get(&t.name) {
            return Ok(Err(format!("table `{}`: {reason}", t.name)));
        }
        let (names, keys) = match mapped.get(t.name.as_str()) {
            Some((names, keys)) => (*names, Some(*keys)),
            None => (applier.key_names.as_slice(), None),
        };
        let label = match (&t.entity, &t.child_of) {
            (_, Some(_)) if mapped.contains_key(t.name.as_str()) => None,
            (_, Some(_)) => return Ok(Err(format!("table `{}` is a child table", t.name))),
            (Some(_), None) if mapped.contains_key(t.name.as_str()) => Some(TableLabel::Mapped(t.name.clone())),
            (Some(e), None) => Some(TableLabel::Entity(Arc::from(e.as_str()))),
            (None, None) if t.name == UNTYPED_TABLE => Some(TableLabel::Untyped),
            (None, None) => return Ok(Err(format!("table `{}` has no entity", t.name))),
        };
        let Some(contract) = ip.contracts.iter().find(|c| c.table == t.name) else {
            return Ok(Err(format!("table `{}` has no contract in `_etl/schema/`", t.name)));
        };
        tables.push((t, label, contract, names, keys));
    }
    tables.sort_by_key(|(t, ..)| std::cmp::Reverse(t.rows));

    // The changed keys decoded: as rows of the key attributes on every worker, when a table
    // finds them so, and by table as rows of a mapped table's identity columns.
    let all_keys = if tables.iter().any(|t| t.4.is_none()) {
        ChangedKeys::decode_on(&applier.new_keys, threads)?
    } else {
        ChangedKeys::decode(&[])
    };
    let decoded = in_order(super::pool::run::<_, UnwindError>(
        threads,
        tables.len(),
        |_| Ok(Vec::new()),
        |out, i, _| {
            out.push((i, tables[i].4.map(ChangedKeys::decode)));
            Ok(())
        },
    )?);
    let keys_of = |i: usize| decoded[i].as_ref().unwrap_or(&all_keys);
    let delta = crate::sink::delta::is_delta_output(&ip.previous);
    let searches = in_order(super::pool::run::<_, UnwindError>(
        threads,
        tables.len(),
        |_| Ok(Vec::new()),
        |out, i, stop| {
            stop.check::<UnwindError>()?;
            let (t, _, contract, names, _) = &tables[i];
            let search = if delta {
                Search::delta(ip.home.join(&t.name), &t.name, contract, names, keys_of(i), txn_version)?
            } else {
                let files: Vec<(String, u64)> = t.files.iter().map(|f| (f.path.clone(), f.bytes)).collect();
                Search::files(ip.home.clone(), &t.name, &files, contract, names, keys_of(i))
            };
            out.push((i, search));
            Ok(())
        },
    )?);
    // Every file of every table that can be searched (table, file, bytes), the largest first.
    let mut reads: Vec<(usize, usize, u64)> = Vec::new();
    for (i, search) in searches.iter().enumerate() {
        if let Ok(s) = search {
            reads.extend(s.file_sizes().enumerate().map(|(f, bytes)| (i, f, bytes)));
        }
    }
    reads.sort_by_key(|&(i, f, bytes)| (std::cmp::Reverse(bytes), i, f));
    let mut results: Vec<((usize, usize), Result<FileFound, String>)> = super::pool::run::<_, UnwindError>(
        threads,
        reads.len(),
        |_| Ok(Vec::new()),
        |out, k, stop| {
            stop.check::<UnwindError>()?;
            let (i, f, _) = reads[k];
            if let Ok(search) = &searches[i] {
                out.push(((i, f), search.read(f)?));
            }
            Ok(())
        },
    )?
    .into_iter()
    .flatten()
    .collect();
    results.sort_by_key(|(at, _)| *at);
    tracing::info!(
        tables = tables.len(),
        files = reads.len(),
        ms = started.elapsed().as_millis() as u64,
        "found the changed keys in the output's tables"
    );
    let mut results = results.into_iter().peekable();
    let mut found = Vec::new();
    let mut files = BTreeMap::new();
    for (i, search) in searches.into_iter().enumerate() {
        let (t, label, ..) = &tables[i];
        let search = match search {
            Ok(s) => s,
            Err(reason) => return Ok(Err(format!("table `{}`: {reason}", t.name))),
        };
        let mut in_files = Vec::new();
        while let Some((_, file)) = results.next_if(|((j, _), _)| *j == i) {
            match file {
                Ok(file) => in_files.push(file),
                Err(reason) => return Ok(Err(format!("table `{}`: {reason}", t.name))),
            }
        }
        let (held, where_) = search.finish(in_files);
        if let Some(label) = label {
            found.extend(held.into_iter().map(|k| (k, label.clone())));
        }
        files.insert(t.name.clone(), where_);
    }
    let mut matched = applier.matched_in_place(&found);
    if let Some(rejects) = ip.previous.tables.iter().find(|t| t.name == REJECTS_TABLE && t.rows > 0) {
        let at = ip.home.join(REJECTS_TABLE);
        let listed: Option<Vec<String>> = (!crate::sink::delta::is_delta_output(&ip.previous))
            .then(|| rejects.files.iter().map(|f| f.path.clone()).collect());
        // The files of a plain Parquet output are listed by their paths in the output.
        let home = if listed.is_some() { &ip.home } else { &at };
        // A full-export item rejected is where a replay finds its key, as pass one's `matched`.
        let of_base = std::cell::RefCell::new(Vec::new());
        let stale = |r: &crate::sink::delta::rejects::RejectRow<'_>| -> Result<bool, String> {
            Ok(match superseded(applier, r)? {
                Some((i, Some(label))) => {
                    of_base.borrow_mut().push((i, label));
                    true
                }
                Some((_, None)) => true,
                None => false,
            })
        };
        match crate::sink::delta::rejects::locate(home, listed.as_deref(), &stale)? {
            Ok(l) => {
                files.insert(REJECTS_TABLE.to_owned(), l);
            }
            Err(reason) => return Ok(Err(format!("table `{REJECTS_TABLE}`: {reason}"))),
        }
        matched.extend(of_base.into_inner());
        matched.sort();
    }
    Ok(Ok(Located { matched, files }))
}

/// The results of a pass of [`super::pool::run`] whose workers each collected `(task, result)`
/// pairs, in task order.
fn in_order<T>(workers: Vec<Vec<(usize, T)>>) -> Vec<T> {
    let mut all: Vec<(usize, T)> = workers.into_iter().flatten().collect();
    all.sort_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, t)| t).collect()
}

/// How many rows of the output's `_rejects` [`locate`] found superseded (those a deletion
/// vector deletes already aside).
pub fn superseded_rejects(located: &BTreeMap<String, crate::sink::delta::merge::Located>) -> u64 {
    let Some(l) = located.get(REJECTS_TABLE) else { return 0 };
    l.files.values().map(|f| f.positions.iter().filter(|&&p| !f.deleted.contains(p)).count() as u64).sum()
}

/// Whether reject `r` of an earlier run is of an item whose key `applier`'s new exports changed:
/// a full-export item or a current image (a line its decoder reads as an item, not an `Item`
/// line of an incremental export), which a replay would no longer unwind. `Some` with the key's
/// final change, and for a full-export item the table it is routed to.
///
/// Which of the two it is follows from the chain: when an export the output already held changed
/// the key, applying that export superseded the key's full-export item (a replay never reads it,
/// an apply in place left its reject out), so the reject is of a current image that export made.
/// `Err(reason)` for a reject of a current image that an earlier build cut short and named by
/// the file of current images: its key cannot be read.
fn superseded(
    applier: &Applier,
    r: &crate::sink::delta::rejects::RejectRow<'_>,
) -> Result<Option<(u32, Option<TableLabel>)>, String> {
    use crate::decode::{Format, Record};
    if r.raw_truncated {
        // Current images are read whole; only an earlier build cut one short.
        if r.source_file.starts_with(super::chain::CURRENT_IMAGES) {
            return Err(format!("a reject of `{}` holds only the start of its line", r.source_file));
        }
        return Ok(None);
    }
    // An `Item` line of an incremental export is rejected as such whatever its key.
    if r.reason == crate::normalize::RejectReason::NotAnItem.code() {
        return Ok(None);
    }
    let format = if r.raw.trim_start().starts_with("$ion_1_0") { Format::ExportIon } else { Format::ExportJson };
    let Ok(Record::Put(item)) = crate::decode::decode(format, r.raw.as_bytes()) else { return Ok(None) };
    Ok(applier.changed_now(&item).map(|i| (i, (!applier.held_changed(i)).then(|| applier.label(&item)))))
}

/// What [`locate`] found.
pub struct Located {
    /// As pass one's [`super::chain::ChainRead::matched`].
    pub matched: Vec<(u32, TableLabel)>,
    /// By table, where in its data files (for its MERGE).
    pub files: BTreeMap<String, crate::sink::delta::merge::Located>,
}

/// Completes the tables this run wrote (the changed keys' rows, this run's rejects) into the
/// output's: a table the output has takes its contract extended with the rows' new columns,
/// and every table of the output this run wrote no row for is listed with its contract and no
/// staged row (its MERGE may still remove rows). The rows of every table the output has are
/// then this run's only; the Delta sink counts them into the table's ([`DeltaRun::in_place`]).
/// `Err(reason)` when a table's changed rows do not fit its contract.
///
/// [`DeltaRun::in_place`]: crate::sink::delta::DeltaRun::in_place
pub fn complete(ip: &InPlace, written: &mut Written) -> Result<(), String> {
    let contract = |name: &str| ip.contracts.iter().find(|c| c.table == name);
    for t in &mut written.tables {
        if t.name == REJECTS_TABLE {
            continue;
        }
        if !ip.previous.tables.iter().any(|p| p.name == t.name) {
            // A new table, unless the output names its entity otherwise.
            if let Some(p) = ip.previous.tables.iter().find(|p| p.entity.is_some() && p.entity == t.entity) {
                return Err(format!("the rows of table `{}` are in table `{}` in the output", t.name, p.name));
            }
            continue;
        }
        let Some(before) = contract(&t.name) else {
            return Err(format!("table `{}` has no contract in `_etl/schema/`", t.name));
        };
        let Some(schema) = written.schemas.iter_mut().find(|s| s.table == t.name) else {
            return Err(format!("table `{}` was written without a contract", t.name));
        };
        if before.entity != schema.entity {
            return Err(format!("table `{}` holds another entity in the output", t.name));
        }
        // The Parquet rewrite lays every file out in the table's new schema, so its columns may
        // widen; a Delta MERGE writes the changed rows in the table's own types.
        let widen = !crate::sink::delta::is_delta_output(&ip.previous);
        *schema = crate::schema::diff::extend(before, schema, widen).map_err(|r| format!("table `{}`: {r}", t.name))?;
        t.columns = schema.columns.len();
    }
    for p in &ip.previous.tables {
        if written.tables.iter().any(|t| t.name == p.name) {
            continue;
        }
        if p.name != REJECTS_TABLE {
            let Some(c) = contract(&p.name) else {
                return Err(format!("table `{}` has no contract in `_etl/schema/`", p.name));
            };
            written.schemas.push(c.clone());
        }
        written.tables.push(TableReport {
            name: p.name.clone(),
            entity: p.entity.clone(),
            child_of: p.child_of.clone(),
            rows: 0,
            columns: p.columns,
            files: Vec::new(),
            delta_version: None,
            delta_merge: None,
        });
    }
    written.tables.sort_by(|a, b| a.name.cmp(&b.name));
    written.schemas.sort_by(|a, b| a.table.cmp(&b.table));
    Ok(())
}

/// Makes each table of a Parquet output in place ([`crate::sink::rewrite`]): its files that
/// hold no changed key kept, the others rewritten without those rows, and this run's rows
/// (staged by pass two) added, on up to `threads` threads. `manifest` (reconciled already, with
/// this run's rows only) then lists each table's files and rows. A table left without a row is
/// listed as a replay lists it: `_rejects` and a table the mapping declares with one empty file,
/// an inferred table not at all (nor its contract in `schemas`), as a full export of the table's
/// current state has no item of it. `Ok(Err(reason))` when a table's rows cannot be laid out in
/// its schema (the run then replays).
pub fn rewrite(
    ip: &InPlace,
    located: &BTreeMap<String, crate::sink::delta::merge::Located>,
    manifest: &mut RunManifest,
    schemas: &mut Vec<TableSchema>,
    sink: &dyn Sink,
    settings: &super::UnwindSettings,
) -> Result<Result<(), String>, UnwindError> {
    use crate::sink::rewrite;
    let started = std::time::Instant::now();
    let Some(staged) = sink.staged() else {
        return Ok(Err("the run is not staged in a local folder".into()));
    };
    // Where files of an object store are downloaded while they are rewritten.
    let fetched = sink.scratch().join("in-place-rewrite");
    std::fs::create_dir_all(&fetched).map_err(|source| UnwindError::Io {
        action: "create",
        path: fetched.display().to_string(),
        source,
    })?;
    let mut tables = Vec::with_capacity(manifest.tables.len());
    for t in &manifest.tables {
        let schema = if t.name == REJECTS_TABLE {
            crate::normalize::rejects_schema()
        } else {
            match schemas.iter().find(|s| s.table == t.name) {
                Some(s) => Arc::new(s.arrow_schema()),
                None => return Ok(Err(format!("table `{}` has no contract", t.name))),
            }
        };
        tables.push(rewrite::Table {
            name: &t.name,
            schema,
            previous: ip.previous.tables.iter().find(|p| p.name == t.name).map_or(&[], |p| p.files.as_slice()),
            changed: located.get(&t.name).map(|l| &l.files),
            staged: &t.files,
            append_to_last: t.name != REJECTS_TABLE,
        });
    }
    let (jobs, replaced) = rewrite::plan(&tables, &ip.home, staged, settings.target_file_bytes)?;
    let mut order: Vec<(usize, usize)> =
        jobs.iter().enumerate().flat_map(|(t, js)| (0..js.len()).map(move |j| (t, j))).collect();
    order.sort_by_key(|&(t, j)| std::cmp::Reverse(jobs[t][j].bytes()));
    // The jobs' row groups are the tasks, so a table of one large file is rewritten on every
    // worker too.
    let tasks = rewrite::Tasks::new(&jobs, &order, &ip.home, settings.threads)?;
    let workers = super::pool::run::<_, UnwindError>(
        settings.threads,
        tasks.len(),
        |_| Ok(Vec::<rewrite::Ended>::new()),
        |done, k, stop| {
            stop.check::<UnwindError>()?;
            done.extend(tasks.run(k, sink, &ip.home, &fetched)?);
            Ok(())
        },
    )?;
    let mut results: Vec<rewrite::Ended> = workers.into_iter().flatten().collect();
    results.sort_by_key(|(at, _)| *at);
    let mut files: Vec<Vec<FileReport>> = vec![Vec::new(); tables.len()];
    for ((t, _), result) in results {
        match result {
            Ok(Some(f)) => files[t].push(f),
            Ok(None) => {}
            Err(reason) => return Ok(Err(format!("table `{}`: {reason}", tables[t].name))),
        }
    }
    for path in &replaced {
        std::fs::remove_file(path).map_err(|source| UnwindError::Io {
            action: "remove",
            path: path.display().to_string(),
            source,
        })?;
    }
    let arrow: Vec<_> = tables.iter().map(|t| t.schema.clone()).collect();
    let parts: Vec<usize> = tables.iter().map(rewrite::Table::spare_part).collect();
    let lists_when_empty: Vec<bool> = manifest.tables.iter().map(|t| manifest.lists_when_empty(t)).collect();
    let mut emptied = Vec::new();
    for ((((t, files), schema), part), listed) in
        manifest.tables.iter_mut().zip(files).zip(arrow).zip(parts).zip(lists_when_empty)
    {
        t.files = files;
        if t.files.is_empty() {
            if !listed {
                emptied.push(t.name.clone());
                continue;
            }
            // `_rejects` and a declared table keep one empty file, as a run that writes none has.
            t.files.push(sink.part(&t.name, part, schema)?.close()?);
        }
        t.rows = t.files.iter().map(|f| f.rows).sum();
    }
    manifest.tables.retain(|t| !emptied.contains(&t.name));
    schemas.retain(|s| !emptied.contains(&s.table));
    // Its rewrite staged no file, but may have made its folder.
    for name in &emptied {
        let dir = staged.join(name);
        match std::fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(UnwindError::Io { action: "remove", path: dir.display().to_string(), source }),
        }
    }
    let ms = started.elapsed().as_millis() as u64;
    manifest.timings_ms.write += ms;
    manifest.timings_ms.total += ms;
    Ok(Ok(()))
}

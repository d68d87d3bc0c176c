//! The local commit: a staged output folder published with one atomic directory exchange, or,
//! where the file system has none, with two renames that a journal makes recoverable.
//!
//! Beside `--out DIR`, in DIR's parent:
//!
//! | name | what |
//! |---|---|
//! | `.DIR.etl-lock` | the lock file: a run holds an exclusive `flock` on it from start to end. A second run for the same DIR fails (exit 1) naming the holder. Every other name below is stale exactly when nobody holds the lock, on every host that shares the folder. Kept between runs. |
//! | `.DIR.etl-staging-TAG` | the output being written, never read; after an exchange, the previous output on its way out |
//! | `.DIR.etl-new-TAG` | (fallback) the complete, synced new output about to be published |
//! | `.DIR.etl-old-TAG` | (fallback) the previous output, parked while the new one moves in |
//! | `.DIR.etl-commit` | (fallback) the journal naming the two folders above: once it is on disk the publish is decided |
//!
//! Each Parquet part and each kept file starts its writeback when it is finished
//! ([`super::start_writeback`]), so the disk works while the run does. Commit: every staged file
//! and folder is synced, then `renameat2(RENAME_EXCHANGE)` swaps the
//! staging folder with DIR (a plain rename when there is no DIR yet) and the previous output is
//! removed. Readers see the previous complete output or the new one, never a mix.
//!
//! Where the exchange is refused (`EINVAL`/`ENOSYS`: NFS, SMB, many FUSE file systems) the
//! fallback renames the staging folder to `etl-new`, writes and syncs the journal, renames DIR to
//! `etl-old`, renames `etl-new` to DIR, then removes the journal and `etl-old`. Between the two
//! renames DIR is briefly absent (readers then find no output, never a partial one). A run
//! killed at any step leaves a state that the next run, holding the lock, completes before
//! anything else ([`recover`]): with the journal present it finishes the publish (or, if the new
//! folder is gone, puts the old one back); it deletes a folder only when a complete output is in
//! place at DIR, and refuses (deleting nothing) when the folders contradict the journal.
//! `etl sql --data DIR` never writes: on a DIR left mid-publish it names the complete copy and
//! says that the next `etl unwind --out DIR` completes the publish (see [`interrupted_publish`]).

use std::fs;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::file::properties::WriterProperties;
use serde::{Deserialize, Serialize};

use super::lock::{self, Acquire, Holder, Lock};
use super::{Committed, PartWriter, RunManifest, Sink, SinkError, faults};
use crate::schema::TableSchema;
use crate::source::object::ObjectRef;

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SinkError + 'a {
    SinkError::io(action, path)
}

/// The sink for a local `--out` folder.
pub struct LocalSink {
    staging: Staging,
    scratch: PathBuf,
    props: WriterProperties,
}

impl LocalSink {
    pub fn create(target: &Path, overwrite: bool, props: WriterProperties) -> Result<LocalSink, SinkError> {
        let staging = Staging::create(target, overwrite)?;
        let scratch = super::scratch_dir(staging.path());
        fs::create_dir_all(&scratch).map_err(io("create", &scratch))?;
        Ok(LocalSink { staging, scratch, props })
    }

    /// Writes the manifest and schemas into the staged folder, with the scratch folder removed:
    /// the folder is then exactly the output to publish. What the start of the run recovered is
    /// added to the manifest's warnings.
    pub(crate) fn finish(self, manifest: &mut RunManifest, schemas: &[TableSchema]) -> Result<Staging, SinkError> {
        fs::remove_dir_all(&self.scratch).map_err(io("remove", &self.scratch))?;
        manifest.warnings.extend(self.staging.notes.iter().cloned());
        super::manifest::write(self.staging.path(), manifest, schemas)
            .map_err(io("write the run manifest in", self.staging.path()))?;
        Ok(self.staging)
    }
}

impl super::PartSink for LocalSink {
    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        PartWriter::create(self.staging.path(), table, part, schema, &self.props)
    }
}

impl Sink for LocalSink {
    fn scratch(&self) -> &Path {
        &self.scratch
    }

    fn keep(&self, rel: &str, from: &Path, link: bool) -> Result<Option<PathBuf>, SinkError> {
        keep_in(self.staging.path(), rel, from, link, None)
    }

    fn staged(&self) -> Option<&Path> {
        Some(self.staging.path())
    }

    fn keep_object(&self, rel: &str, from: &ObjectRef, shown: &str) -> Result<Option<PathBuf>, SinkError> {
        keep_object_in(self.staging.path(), rel, from, shown)
    }

    fn commit(
        self: Box<Self>,
        mut manifest: RunManifest,
        schemas: &[TableSchema],
    ) -> Result<(RunManifest, Committed), SinkError> {
        let staging = self.finish(&mut manifest, schemas)?;
        let warnings = staging.commit()?;
        manifest.warnings.extend(warnings);
        Ok((manifest, Committed { run_id: None, files: 0, bytes: 0, deleted: 0 }))
    }
}

/// Keeps the input file `from` as `rel` inside the staging folder `staging`: a hard link when
/// `link` and the file system allows it, else a copy. With `published` (the output folder, for a
/// sink that replaces `_etl/base/` in place), a file the output already keeps at `rel` is linked
/// first, if it is `from` or holds the same bytes: another export's file under the same name
/// (an export id reused, a re-written export) is never taken for it. `rel` must be a relative
/// path of plain names.
pub(in crate::sink) fn keep_in(
    staging: &Path,
    rel: &str,
    from: &Path,
    link: bool,
    published: Option<&Path>,
) -> Result<Option<PathBuf>, SinkError> {
    let Some(to) = keep_place(staging, rel)? else { return Ok(Some(staging.join(rel))) };
    let kept = published.map(|p| p.join(rel)).filter(|p| p.is_file() && same_bytes(p, from));
    if kept.is_some_and(|p| fs::hard_link(&p, &to).is_ok()) || (link && fs::hard_link(from, &to).is_ok()) {
        return Ok(Some(to));
    }
    if let Err(e) = fs::copy(from, &to) {
        // A source that is gone is the input's fault; anything else is where it was copied to.
        let at = if fs::symlink_metadata(from).is_err() { from } else { to.as_path() };
        return Err(io("copy", at)(e));
    }
    super::start_writeback(&to);
    Ok(Some(to))
}

/// [`keep_in`] for an object of an object store (`shown` is its URL): downloaded into `staging`
/// at `rel`, unchanged.
pub(in crate::sink) fn keep_object_in(
    staging: &Path,
    rel: &str,
    from: &crate::source::object::ObjectRef,
    shown: &str,
) -> Result<Option<PathBuf>, SinkError> {
    let Some(to) = keep_place(staging, rel)? else { return Ok(Some(staging.join(rel))) };
    super::object::download_blocking(&from.store, &from.key, &to, shown)?;
    Ok(Some(to))
}

/// Where `rel` is kept in `staging` (its folder created), or `None` when it is kept already.
fn keep_place(staging: &Path, rel: &str) -> Result<Option<PathBuf>, SinkError> {
    let plain = !rel.is_empty()
        && rel.split('/').all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains('\\'))
        && Path::new(rel).components().all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain {
        return Err(SinkError::Io {
            action: "keep",
            path: rel.to_owned(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a relative path of plain names"),
        });
    }
    let to = staging.join(rel);
    if let Some(dir) = to.parent() {
        fs::create_dir_all(dir).map_err(io("create", dir))?;
    }
    // Kept already: the same file listed by two exports (the shared incremental data folder), or
    // by the output's own `_etl/base/`. Never written over: it may be a link to the previous
    // output's file.
    if fs::symlink_metadata(&to).is_ok() {
        return Ok(None);
    }
    Ok(Some(to))
}

/// Whether the files `a` and `b` hold the same bytes: one file (the same inode), or equal lengths
/// and equal contents. Unreadable is not the same.
fn same_bytes(a: &Path, b: &Path) -> bool {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt as _;
    let (Ok(ma), Ok(mb)) = (fs::metadata(a), fs::metadata(b)) else { return false };
    if (ma.dev(), ma.ino()) == (mb.dev(), mb.ino()) {
        return true;
    }
    if ma.len() != mb.len() {
        return false;
    }
    let (Ok(mut fa), Ok(mut fb)) = (fs::File::open(a), fs::File::open(b)) else { return false };
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = match fa.read(&mut ba) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if n == 0 {
            return true;
        }
        if fb.read_exact(&mut bb[..n]).is_err() || ba[..n] != bb[..n] {
            return false;
        }
    }
}

/// Marks a folder as etl output.
pub const RUN_REPORT: &str = super::manifest::RUN_MANIFEST;

/// The names of one target's siblings.
#[derive(Debug, Clone)]
struct Names {
    parent: PathBuf,
    /// The target's file name.
    name: String,
}

impl Names {
    fn of(target: &Path) -> Names {
        let parent = parent_of(target);
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
        Names { parent, name }
    }

    fn sibling(&self, kind: &str) -> PathBuf {
        self.parent.join(format!(".{}.etl-{kind}", self.name))
    }

    fn tagged(&self, kind: &str, tag: &str) -> PathBuf {
        self.sibling(&format!("{kind}-{tag}"))
    }

    fn lock(&self) -> PathBuf {
        self.sibling("lock")
    }

    fn journal(&self) -> PathBuf {
        self.sibling("commit")
    }

    /// `(kind, tag)` of a sibling's file name, for `staging`, `new` and `old` folders only.
    fn parse<'a>(&self, file_name: &'a str) -> Option<(&'a str, &'a str)> {
        let rest = file_name.strip_prefix('.')?.strip_prefix(self.name.as_str())?.strip_prefix(".etl-")?;
        let (kind, tag) = rest.split_once('-')?;
        (matches!(kind, "staging" | "new" | "old") && is_tag(tag)).then_some((kind, tag))
    }
}

/// `<pid>-<nanos>`: what names a run's folders.
fn is_tag(tag: &str) -> bool {
    let Some((pid, nanos)) = tag.split_once('-') else { return false };
    [pid, nanos].iter().all(|p| !p.is_empty() && p.len() <= 40 && p.bytes().all(|b| b.is_ascii_digit()))
}

fn new_tag() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{}-{nanos}", std::process::id())
}

/// A staging folder, with the target's lock held; removed on drop unless committed.
#[derive(Debug)]
pub struct Staging {
    target: PathBuf,
    names: Names,
    tag: String,
    dir: PathBuf,
    done: bool,
    /// What the start of the run found and did (a completed publish, folders kept), for the
    /// run report.
    notes: Vec<String>,
    // Dropped after `Drop::drop` removed the folder: the lock is released last.
    _lock: Option<Lock>,
}

impl Staging {
    /// Locks the target, completes a publish a killed run left half done, removes stale
    /// folders, checks the target, and creates a fresh staging folder beside it.
    pub fn create(target: &Path, overwrite: bool) -> Result<Staging, SinkError> {
        let names = Names::of(target);
        fs::create_dir_all(&names.parent).map_err(io("create", &names.parent))?;
        let tag = new_tag();
        let mut notes = Vec::new();
        let lock_path = names.lock();
        let lock = match lock::try_acquire(&lock_path, &Holder::this_process(&tag)).map_err(io("lock", &lock_path))? {
            Acquire::Acquired(l) => Some(l),
            Acquire::Held(holder) => {
                return Err(SinkError::Locked {
                    path: target.display().to_string(),
                    lock: lock_path.display().to_string(),
                    holder: holder.map(|h| h.to_string()).unwrap_or_else(|| "holder unknown".into()),
                });
            }
            Acquire::Unsupported(e) => {
                let note = format!(
                    "cannot lock `{}` ({e}): runs writing `{}` at the same time are not detected on this file system",
                    lock_path.display(),
                    target.display()
                );
                tracing::warn!("{note}");
                notes.push(note);
                None
            }
        };
        notes.extend(recover(&names, target)?);

        match fs::symlink_metadata(target) {
            Ok(m) if !m.is_dir() => return Err(SinkError::NotADirectory { path: target.display().to_string() }),
            Ok(_) => {
                let is_etl = target.join(RUN_REPORT).is_file();
                // A new output whose shards have run holds only their `_etl/shards/`.
                let empty = fs::read_dir(target).map_err(io("read", target))?.next().is_none()
                    || super::shard::holds_only_shards(target).map_err(io("read", target))?;
                if !is_etl && !empty && !overwrite {
                    return Err(SinkError::NotEtlOutput { path: target.display().to_string() });
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("inspect", target)(e)),
        }
        notes.extend(remove_stale(&names, target));
        let dir = names.tagged("staging", &tag);
        fs::create_dir(&dir).map_err(io("create", &dir))?;
        Ok(Staging { target: target.to_owned(), names, tag, dir, done: false, notes, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Publishes the staged folder as the target. Returns warnings about clean-up that failed
    /// after the publish (the next run finishes it).
    pub fn commit(mut self) -> Result<Vec<String>, SinkError> {
        sync_tree(&self.dir)?;
        faults::point("staged");
        let parent = self.names.parent.clone();
        if !exists(&self.target)? {
            fs::rename(&self.dir, &self.target).map_err(io("publish", &self.target))?;
            self.done = true;
            faults::point("published");
            sync_dir(&parent)?;
            return Ok(Vec::new());
        }
        match exchange(&self.dir, &self.target) {
            Ok(()) => {
                // The previous output now sits at the staging path.
                self.done = true;
                faults::point("exchanged");
                sync_dir(&parent)?;
                Ok(remove_or_warn(&self.dir, "the previous output"))
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) => {
                tracing::info!(target = %self.target.display(), error = %e, "no RENAME_EXCHANGE here; publishing with two journaled renames");
                self.two_renames()
            }
            Err(e) => Err(io("publish", &self.target)(e)),
        }
    }

    /// The fallback publish: new folder named, journal synced, target parked, new folder moved in.
    fn two_renames(&mut self) -> Result<Vec<String>, SinkError> {
        let parent = self.names.parent.clone();
        let new = self.names.tagged("new", &self.tag);
        let old = self.names.tagged("old", &self.tag);
        fs::rename(&self.dir, &new).map_err(io("rename the staged output to", &new))?;
        self.dir = new.clone();
        sync_dir(&parent)?;
        faults::point("fallback-named");

        let journal = Journal::new(&self.names, &self.tag);
        journal.write(&self.names)?;
        // From here the publish is decided: a crash is completed by the next run, not undone.
        self.done = true;
        faults::point("fallback-journaled");

        if let Err(e) = fs::rename(&self.target, &old) {
            // Nothing moved: undo the decision, and let drop remove the new folder.
            self.done = remove_journal(&self.names).is_err();
            return Err(io("move the previous output aside to", &old)(e));
        }
        faults::point("fallback-parked");
        if let Err(e) = fs::rename(&new, &self.target) {
            if fs::rename(&old, &self.target).is_ok() && remove_journal(&self.names).is_ok() {
                self.done = false;
            }
            // Otherwise the journal stays and the next run completes the publish.
            return Err(io("publish", &self.target)(e));
        }
        faults::point("fallback-published");
        sync_dir(&parent)?;
        let mut warnings = Vec::new();
        if let Err(e) = remove_journal(&self.names) {
            warnings.push(format!("published, but the journal could not be removed ({e}); the next run removes it"));
        }
        faults::point("fallback-unjournaled");
        warnings.extend(remove_or_warn(&old, "the previous output"));
        Ok(warnings)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn parent_of(target: &Path) -> PathBuf {
    match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn exists(p: &Path) -> Result<bool, SinkError> {
    match fs::symlink_metadata(p) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io("inspect", p)(e)),
    }
}

fn remove_or_warn(dir: &Path, what: &str) -> Vec<String> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Vec::new(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            let w = format!(
                "published, but {what} at `{}` could not be removed ({e}); the next run removes it",
                dir.display()
            );
            tracing::warn!("{w}");
            vec![w]
        }
    }
}

/// `.DIR.etl-commit`: the two folders of a fallback publish, written before the first rename.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    version: u32,
    tag: String,
    /// The complete new output (file name beside the target).
    new: String,
    /// Where the previous output is parked (file name beside the target).
    old: String,
    host: String,
    pid: u32,
}

/// The most bytes of a journal that are read.
const MAX_JOURNAL_BYTES: u64 = 4096;

impl Journal {
    fn new(names: &Names, tag: &str) -> Journal {
        let file = |p: PathBuf| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Journal {
            version: 1,
            tag: tag.to_owned(),
            new: file(names.tagged("new", tag)),
            old: file(names.tagged("old", tag)),
            host: lock::hostname(),
            pid: std::process::id(),
        }
    }

    /// Written to a temporary name, synced, renamed into place, and the folder synced.
    fn write(&self, names: &Names) -> Result<(), SinkError> {
        let path = names.journal();
        let tmp = names.sibling("commit.tmp");
        let text = serde_json::to_vec_pretty(self).map_err(|e| io("write", &tmp)(io::Error::other(e)))?;
        let mut f = fs::File::create(&tmp).map_err(io("create", &tmp))?;
        f.write_all(&text).and_then(|()| f.sync_all()).map_err(io("write", &tmp))?;
        fs::rename(&tmp, &path).map_err(io("write", &path))?;
        sync_dir(&names.parent)
    }

    /// Reads the journal, if any; `Err` when it exists but cannot be trusted.
    fn read(names: &Names) -> Result<Option<Journal>, SinkError> {
        let path = names.journal();
        let mut file = match fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("read", &path)(e)),
        };
        let mut bytes = Vec::new();
        (&mut file).take(MAX_JOURNAL_BYTES).read_to_end(&mut bytes).map_err(io("read", &path))?;
        let unrecoverable = |reason: String| SinkError::Unrecoverable {
            path: names.parent.join(&names.name).display().to_string(),
            journal: path.display().to_string(),
            reason,
        };
        let j: Journal =
            serde_json::from_slice(&bytes).map_err(|e| unrecoverable(format!("the journal is unreadable: {e}")))?;
        // The names must be the ones this tag gives: a journal cannot point anywhere else.
        let expected = Journal::new(names, &j.tag);
        if !is_tag(&j.tag) || j.new != expected.new || j.old != expected.old {
            return Err(unrecoverable(format!(
                "the journal names `{}` and `{}`, which are not this output's folders",
                j.new, j.old
            )));
        }
        Ok(Some(j))
    }
}

fn remove_journal(names: &Names) -> Result<(), SinkError> {
    let path = names.journal();
    match fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("remove", &path)(e)),
    }
    sync_dir(&names.parent)
}

/// Completes a fallback publish that a killed run left half done; call with the lock held.
///
/// With the journal on disk the publish was decided, so it is completed: the new folder moves
/// in (after parking the target, if it is still there). Only when the new folder is gone and
/// the target is missing is the old one put back. A folder is deleted only once a complete
/// output is at the target; folders that contradict the journal stop the run, deleting nothing.
fn recover(names: &Names, target: &Path) -> Result<Vec<String>, SinkError> {
    let Some(j) = Journal::read(names)? else { return Ok(Vec::new()) };
    let new = names.parent.join(&j.new);
    let old = names.parent.join(&j.old);
    let (t, w, o) = (exists(target)?, exists(&new)?, exists(&old)?);
    let done = match (t, w, o) {
        (true, true, true) => {
            return Err(SinkError::Unrecoverable {
                path: target.display().to_string(),
                journal: names.journal().display().to_string(),
                reason: format!(
                    "`{}`, `{}` and `{}` all exist, which no step of a publish leaves",
                    target.display(),
                    new.display(),
                    old.display()
                ),
            });
        }
        (true, true, false) => {
            fs::rename(target, &old).map_err(io("move the previous output aside to", &old))?;
            fs::rename(&new, target).map_err(io("publish", target))?;
            "completed it"
        }
        (false, true, _) => {
            fs::rename(&new, target).map_err(io("publish", target))?;
            "completed it"
        }
        (true, false, _) => "it had been published",
        (false, false, true) => {
            fs::rename(&old, target).map_err(io("restore", target))?;
            "the new output was gone, so the previous one was put back"
        }
        (false, false, false) => "neither folder was left, and there is no output",
    };
    sync_dir(&names.parent)?;
    remove_journal(names)?;
    let mut notes = vec![format!(
        "found the publish of `{}` by run `{}` (pid {} on `{}`) interrupted between its two renames: {done}",
        target.display(),
        j.tag,
        j.pid,
        j.host
    )];
    tracing::warn!("{}", notes[0]);
    if exists(target)? {
        notes.extend(remove_or_warn(&old, "the parked previous output"));
    }
    Ok(notes)
}

/// Removes the folders of dead runs; call with the lock held and the journal handled. Staging
/// folders are never the only copy of an output; `new` and `old` folders (of a fallback whose
/// journal was lost) are removed only when a complete output is at the target.
fn remove_stale(names: &Names, target: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    // When in doubt, keep: a folder kept is removed by a later run.
    let target_exists = exists(target).unwrap_or(false);
    let _ = fs::remove_file(names.sibling("commit.tmp"));
    let Ok(entries) = fs::read_dir(&names.parent) else { return notes };
    for e in entries.flatten() {
        let file_name = e.file_name().to_string_lossy().into_owned();
        let Some((kind, _)) = names.parse(&file_name) else { continue };
        if kind != "staging" && !target_exists {
            let note = format!(
                "kept `{}`: it may be the only copy of an output, and `{}` does not exist",
                e.path().display(),
                target.display()
            );
            tracing::warn!("{note}");
            notes.push(note);
            continue;
        }
        tracing::info!(path = %e.path().display(), "removing a stale folder of a dead run");
        let _ = fs::remove_dir_all(e.path());
    }
    notes
}

/// When `dir` is missing because a run was killed between the two renames of a fallback
/// publish: the folder holding the complete output. Never changes anything (readers call it).
pub fn interrupted_publish(dir: &Path) -> Option<PathBuf> {
    if dir.exists() {
        return None;
    }
    let names = Names::of(dir);
    let j = Journal::read(&names).ok()??;
    let new = names.parent.join(&j.new);
    let old = names.parent.join(&j.old);
    [new, old].into_iter().find(|p| p.join(RUN_REPORT).is_file())
}

#[cfg(target_os = "linux")]
pub(in crate::sink) fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    if faults::no_rename_exchange() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let ca = CString::new(a.as_os_str().as_bytes())?;
    let cb = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call; renameat2
    // reads them and touches no other memory.
    let rc =
        unsafe { libc::renameat2(libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), libc::RENAME_EXCHANGE) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(not(target_os = "linux"))]
pub(in crate::sink) fn exchange(_a: &Path, _b: &Path) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    fs::File::open(dir).and_then(|f| f.sync_all()).map_err(io("sync", dir))
}

/// Flushes every file and folder of the staged tree to disk before it is published.
fn sync_tree(dir: &Path) -> Result<(), SinkError> {
    for e in fs::read_dir(dir).map_err(io("read", dir))? {
        let e = e.map_err(io("read", dir))?;
        let p = e.path();
        if e.file_type().map_err(io("inspect", &p))?.is_dir() {
            sync_tree(&p)?;
        } else {
            fs::File::open(&p).and_then(|f| f.sync_all()).map_err(io("sync", &p))?;
        }
    }
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_kept_file_is_reused_only_when_it_holds_the_same_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let (published, staging) = (tmp.path().join("out"), tmp.path().join("stage"));
        let rel = "_etl/base/AWSDynamoDB/01/data/f.json.gz";
        fs::create_dir_all(published.join("_etl/base/AWSDynamoDB/01/data")).unwrap();
        fs::write(published.join(rel), b"old export").unwrap();
        // The same name, other bytes (same length too): the input's own file is kept.
        let input = tmp.path().join("in.json.gz");
        fs::write(&input, b"new export").unwrap();
        let kept = super::keep_in(&staging, rel, &input, false, Some(&published)).unwrap().unwrap();
        assert_eq!(fs::read(&kept).unwrap(), b"new export");
        // The same bytes: the published copy is linked (one inode with it).
        let staging2 = tmp.path().join("stage2");
        let same = tmp.path().join("same.json.gz");
        fs::write(&same, b"old export").unwrap();
        let kept = super::keep_in(&staging2, rel, &same, false, Some(&published)).unwrap().unwrap();
        use std::os::unix::fs::MetadataExt as _;
        assert_eq!(fs::metadata(&kept).unwrap().ino(), fs::metadata(published.join(rel)).unwrap().ino());
        assert!(super::same_bytes(&kept, &same) && !super::same_bytes(&kept, &input));
    }

    use super::*;

    fn stage(out: &Path, content: &str) -> Staging {
        let s = Staging::create(out, false).unwrap();
        fs::create_dir_all(s.path().join("_etl")).unwrap();
        fs::write(s.path().join(RUN_REPORT), content).unwrap();
        s
    }

    fn siblings(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into()).collect();
        v.sort();
        v
    }

    #[test]
    fn publish_replace_and_refuse() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        stage(&out, "1").commit().unwrap();
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "1");

        stage(&out, "2").commit().unwrap();
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "2");
        assert_eq!(siblings(tmp.path()), [".out.etl-lock", "out"]);

        // A dropped (failed) run leaves the previous output alone.
        let s = Staging::create(&out, false).unwrap();
        fs::write(s.path().join("junk"), "x").unwrap();
        drop(s);
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "2");
        assert_eq!(siblings(tmp.path()), [".out.etl-lock", "out"]);

        let other = tmp.path().join("other");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("precious.txt"), "x").unwrap();
        assert!(matches!(Staging::create(&other, false), Err(SinkError::NotEtlOutput { .. })));
        assert!(Staging::create(&other, true).is_ok());
    }

    #[test]
    fn a_second_run_on_the_same_output_is_refused_while_the_first_lives() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let first = stage(&out, "1");
        match Staging::create(&out, false) {
            Err(e @ SinkError::Locked { .. }) => {
                let text = e.to_string();
                assert!(text.contains(&format!("pid {}", std::process::id())), "{text}");
                assert!(text.contains(&first.tag), "names the holder's run: {text}");
                assert!(e.is_concurrent_run());
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        first.commit().unwrap();
        // Released with the first run: the next one goes ahead.
        stage(&out, "2").commit().unwrap();
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "2");
    }

    #[test]
    fn staging_folders_of_dead_runs_are_removed_whatever_their_pid() {
        let tmp = tempfile::tempdir().unwrap();
        // A live pid (ours) does not keep a folder alive: only the lock does, and it is free.
        let stale = tmp.path().join(format!(".out.etl-staging-{}-1", std::process::id()));
        fs::create_dir(&stale).unwrap();
        // Another output's folders and look-alikes are left alone.
        let foreign = tmp.path().join(".out2.etl-staging-1-1");
        let odd = tmp.path().join(".out.etl-staging-notatag");
        fs::create_dir(&foreign).unwrap();
        fs::create_dir(&odd).unwrap();
        let _s = Staging::create(&tmp.path().join("out"), false).unwrap();
        assert!(!stale.exists());
        assert!(foreign.exists() && odd.exists());
    }

    /// A fallback publish stopped after each step (as `kill -9` would leave it) is completed by
    /// the next run, never losing a complete output.
    #[test]
    fn fallback_recovery_from_every_step() {
        for step in 0..=4 {
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join("out");
            stage(&out, "old").commit().unwrap();
            let names = Names::of(&out);
            let tag = "4242-7";
            let new = names.tagged("new", tag);
            let old = names.tagged("old", tag);
            // Replay the fallback by hand up to `step`.
            fs::create_dir_all(new.join("_etl")).unwrap();
            fs::write(new.join(RUN_REPORT), "new").unwrap();
            if step >= 1 {
                Journal::new(&names, tag).write(&names).unwrap();
            }
            if step >= 2 {
                fs::rename(&out, &old).unwrap();
                assert_eq!(interrupted_publish(&out), Some(new.clone()), "readers are told where the output is");
            }
            if step >= 3 {
                fs::rename(&new, &out).unwrap();
            }
            if step >= 4 {
                remove_journal(&names).unwrap();
            }
            let s = Staging::create(&out, false).unwrap();
            let want = if step == 0 { "old" } else { "new" };
            assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), want, "step {step}");
            assert_eq!(s.notes.len(), usize::from((1..=3).contains(&step)), "step {step}: {:?}", s.notes);
            drop(s);
            assert_eq!(siblings(tmp.path()), [".out.etl-lock", "out"], "step {step}");
        }
    }

    #[test]
    fn recovery_puts_the_old_output_back_when_the_new_one_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        stage(&out, "old").commit().unwrap();
        let names = Names::of(&out);
        Journal::new(&names, "1-1").write(&names).unwrap();
        fs::rename(&out, names.tagged("old", "1-1")).unwrap();
        let s = Staging::create(&out, false).unwrap();
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "old");
        assert!(s.notes[0].contains("put back"), "{:?}", s.notes);
    }

    #[test]
    fn contradictory_or_foreign_journals_stop_the_run_and_delete_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        stage(&out, "old").commit().unwrap();
        let names = Names::of(&out);
        {
            let (new, old) = (names.tagged("new", "1-1"), names.tagged("old", "1-1"));
            fs::create_dir(&new).unwrap();
            fs::create_dir(&old).unwrap();
        }
        Journal::new(&names, "1-1").write(&names).unwrap();
        assert!(matches!(Staging::create(&out, false), Err(SinkError::Unrecoverable { .. })));
        assert_eq!(siblings(tmp.path()).len(), 5, "{:?}", siblings(tmp.path()));

        let mut j = Journal::new(&names, "1-1");
        j.new = "../../etc".into();
        fs::write(names.journal(), serde_json::to_vec(&j).unwrap()).unwrap();
        let e = Staging::create(&out, false).unwrap_err();
        assert!(e.to_string().contains("not this output's folders"), "{e}");
        assert!(e.hint().is_some());
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "old");
    }

    #[test]
    fn without_a_journal_new_and_old_folders_are_kept_when_there_is_no_output() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let names = Names::of(&out);
        let old = names.tagged("old", "1-1");
        fs::create_dir(&old).unwrap();
        let s = Staging::create(&out, false).unwrap();
        assert!(old.exists());
        assert!(s.notes[0].contains("only copy"), "{:?}", s.notes);
        drop(s);
        fs::create_dir(&out).unwrap();
        drop(Staging::create(&out, false).unwrap());
        assert!(!old.exists(), "removed once an output is in place");
    }
}

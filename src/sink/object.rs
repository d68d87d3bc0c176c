//! The object-store commit (`--out s3://bucket/prefix`, or `memory://…`).
//!
//! S3 has no atomic folder rename, so the commit record is the run report itself, written with
//! a conditional PUT:
//!
//! 1. When the sink is opened, the current `_etl/run.json` (the head) is read with its ETag
//!    (a prefix holding objects but no head, and objects etl does not write, is refused). The
//!    run builds on it: an apply of incremental exports reads the output's state and kept
//!    exports from it ([`Sink::previous`]).
//! 2. The output is written and checked locally, exactly as for a local `--out`, in a scratch
//!    folder that a lock file beside it marks live ([`super::lock`]). Exports the output keeps
//!    (`_etl/base/`, [`Sink::keep_input`]) are copied first, server-side within the bucket, and
//!    read from their kept copies.
//! 3. The run declares itself: `_etl/runs/<run-id>/started.json` names the head it builds on.
//! 4. Each data file is uploaded under a name unique to the run
//!    (`<table>/part-00000-<run-id>.parquet`), the schemas and a copy of the report under
//!    `_etl/runs/<run-id>/`.
//! 5. `_etl/run.json`, listing every file of the run, is written last, with `If-Match` on the
//!    head's ETag read at step 1 (`If-None-Match: *` for a new output). One PUT of one object is
//!    atomic, so readers (`etl sql --data s3://…`) see the previous run or this one, never a
//!    mix. When another run committed since this one opened the output, the PUT fails with 412:
//!    this run removes what it uploaded and fails ([`SinkError::Conflict`], exit 1), and the
//!    winner's output is intact. Copies of exports kept in `_etl/base/` are left: they are the
//!    export's own bytes, the same for every run, and only the exports a committed `run.json`
//!    lists are ever read from there.
//!    When the PUT's outcome is unknown (a reset connection, a retried request), the head is
//!    read again: the commit happened exactly when it names this run.
//! 6. Then, if this run is still the head, objects of runs that no committed `run.json` can
//!    reference any more are deleted: runs other than the head and the run it replaced (kept
//!    one more run so that queries already reading them can finish), except runs that declared
//!    the head as their base, which may still commit. Only objects named the way etl names them
//!    are ever deleted (never anything under `_etl/base/`). A run that finds nothing to do (the
//!    output already holds its input) does the same clean-up with the head as the run
//!    ([`Sink::tidy`]).
//!
//! This requires a store that honours conditional PUTs: S3 (since 2024), MinIO, R2, moto, and
//! `object_store`'s in-memory store do; a store that ignores `If-Match` cannot tell two
//! overlapping runs apart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::file::properties::WriterProperties;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};

use super::local::LocalSink;
use super::lock::{self, Acquire, Holder, Lock};
use super::manifest::{RUN_MANIFEST, RunManifest};
use super::{Committed, PartWriter, Sink, SinkError, faults};
use crate::aws::AwsOptions;
use crate::schema::TableSchema;
use crate::source::Input;
use crate::source::object::ObjectRef;
use crate::store::{self, ObjectUrl, StoreError, io_runtime};

/// Uploads in flight at once.
const CONCURRENT_UPLOADS: usize = 4;
/// Server-side copies in flight at once (a sharded commit's part files): no bytes go through
/// this machine, so more of them than uploads.
const CONCURRENT_COPIES: usize = 32;
/// Files larger than this are sent as multipart uploads.
const MULTIPART_BYTES: u64 = 16 * 1024 * 1024;
/// The largest object one `CopyObject` request copies (S3's limit, 5 GiB). A larger one is
/// streamed through this machine instead: a `GET` sent on as a multipart upload.
const COPY_OBJECT_MAX_BYTES: u64 = 5 * 1024 * 1024 * 1024;
/// Where runs keep their own objects: `_etl/runs/<run-id>/…`.
const RUNS_DIR: &str = "_etl/runs/";
/// A run's declaration, written before its first upload.
const STARTED: &str = "started.json";
/// The most bytes of a declaration that are read.
const MAX_STARTED_BYTES: usize = 64 * 1024;

/// The sink for an object-store `--out`: the run is built and checked in a local scratch folder
/// (under the system temp folder, removed however the run ends), then published.
pub struct ObjectSink {
    local: LocalSink,
    url: ObjectUrl,
    overwrite: bool,
    root: ScratchRoot,
    store: Arc<dyn ObjectStore>,
    /// The head when the sink was opened: the commit is conditional on it.
    head: Option<Head>,
    /// Data files already in the store ([`Sink::keep_stored`]): relative path in the output,
    /// the key they are copied from when the run publishes.
    stored: std::sync::Mutex<BTreeMap<String, String>>,
}

/// The scratch root of an object-store run, with its lock held; removed however the run ends
/// (a killed run's is removed by a later run, which finds its lock free).
pub(in crate::sink) struct ScratchRoot {
    pub(in crate::sink) dir: PathBuf,
    lock: Option<Lock>,
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some(l) = self.lock.take() {
            l.remove();
        }
    }
}

const SCRATCH_PREFIX: &str = "etl-out-";

impl ObjectSink {
    pub fn create(
        url: ObjectUrl,
        aws: AwsOptions,
        overwrite: bool,
        props: WriterProperties,
    ) -> Result<ObjectSink, SinkError> {
        let (store, head) = io_runtime().block_on(async {
            let store: Arc<dyn ObjectStore> = store::open(&url, &aws).await?;
            let head = read_head(&store, &url, &format!("{}{RUN_MANIFEST}", url.dir_prefix())).await?;
            if head.is_none() && !overwrite {
                refuse_foreign(&store, &url).await?;
            }
            // Parquet files and a `run.json` of them beside Delta tables would orphan the tables.
            if let Some(m) = head.as_ref().and_then(|h| h.manifest.as_deref())
                && !overwrite
            {
                super::delta::refuse_other_format(m, false, &url.to_string())?;
            }
            Ok::<_, SinkError>((store, head))
        })?;
        faults::point("s3-opened");
        let root = scratch_root()?;
        let local = LocalSink::create(&root.dir.join("out"), false, props)?;
        Ok(ObjectSink { local, url, overwrite, root, store, head, stored: Default::default() })
    }
}

impl super::PartSink for ObjectSink {
    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        super::PartSink::part(&self.local, table, part, schema)
    }
}

impl Sink for ObjectSink {
    fn scratch(&self) -> &Path {
        self.local.scratch()
    }

    fn keep_input(
        &self,
        rel: &str,
        from: &Input,
        from_url: Option<&ObjectUrl>,
        _link: bool,
    ) -> Result<Option<Input>, SinkError> {
        keep_object_input(&self.store, &self.url, rel, from, from_url)
    }

    fn keep_stored(&self, rel: &str, key: &str) -> Result<bool, SinkError> {
        self.stored.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(rel.to_owned(), key.to_owned());
        Ok(true)
    }

    fn previous(&self) -> Option<&RunManifest> {
        self.head.as_ref().and_then(|h| h.manifest.as_deref())
    }

    fn staged(&self) -> Option<&Path> {
        self.local.staged()
    }

    fn object_home(&self) -> Option<super::delta::Home> {
        Some(super::delta::Home::Object { store: self.store.clone(), url: self.url.clone() })
    }

    fn tidy(&self) -> Result<usize, SinkError> {
        // The clean-up of a commit (step 6), with the head as the run that committed.
        let Some(current) = self.head.as_ref().and_then(|h| h.run_id.as_deref()) else { return Ok(0) };
        let prefix = self.url.dir_prefix();
        let run_key = format!("{prefix}{RUN_MANIFEST}");
        io_runtime().block_on(cleanup(&self.store, &self.url, &prefix, &run_key, current))
    }

    fn commit(
        self: Box<Self>,
        mut manifest: RunManifest,
        schemas: &[TableSchema],
    ) -> Result<(RunManifest, Committed), SinkError> {
        let ObjectSink { local, url, overwrite, root, store, head, stored } = *self;
        let stored = stored.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let staging = local.finish(&mut manifest, schemas)?;
        let result = io_runtime().block_on(publish(staging.path(), manifest, &url, store, head, overwrite, &stored));
        drop(staging);
        drop(root);
        let p = result?;
        tracing::info!(run_id = %p.run_id, files = p.files, bytes = p.bytes, deleted = p.deleted, "published");
        Ok((p.manifest, Committed { run_id: Some(p.run_id), files: p.files, bytes: p.bytes, deleted: p.deleted }))
    }
}

/// [`Sink::keep_input`] for an object-store output at `url`: `from` put at `rel` under it
/// (uploaded, copied server-side within the bucket, or streamed from another store).
pub(in crate::sink) fn keep_object_input(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
    rel: &str,
    from: &Input,
    from_url: Option<&ObjectUrl>,
) -> Result<Option<Input>, SinkError> {
    let key = format!("{}{rel}", url.dir_prefix());
    let to = ObjPath::from(key.as_str());
    io_runtime().block_on(async {
        match from {
            Input::Path(p) => upload(store, p, &key, url).await?,
            Input::Object(o) if from_url.is_some_and(|u| u.scheme == url.scheme && u.bucket == url.bucket) => {
                // The output's own kept copy (an apply reads the exports it holds) stays.
                if o.key != to
                    && let Err(e) = store.copy(&o.key, &to).await
                {
                    // The input's size is not known before: asked only when the copy failed.
                    match store.head(&o.key).await {
                        Ok(meta) if meta.size > COPY_OBJECT_MAX_BYTES => transfer(o, from_url, store, &to, url).await?,
                        _ => return Err(obj_err("copy to", url, &key)(e)),
                    }
                }
            }
            Input::Object(o) => transfer(o, from_url, store, &to, url).await?,
            Input::Stdin => return Ok(None),
        }
        Ok(Some(Input::Object(ObjectRef { store: store.clone(), key: to })))
    })
}

/// A fresh, locked scratch root under the system temp folder; removes those of dead runs (whose
/// lock file is free, or missing: a lock is taken before its folder is made).
pub(in crate::sink) fn scratch_root() -> Result<ScratchRoot, SinkError> {
    let tmp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(tag) = name.strip_prefix(SCRATCH_PREFIX) else { continue };
            let tag = tag.strip_suffix(".lock").unwrap_or(tag);
            if tag.is_empty() || !tag.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
                continue;
            }
            let dir = tmp.join(format!("{SCRATCH_PREFIX}{tag}"));
            let lock_path = tmp.join(format!("{SCRATCH_PREFIX}{tag}.lock"));
            match lock::probe(&lock_path) {
                Ok(Some(Acquire::Acquired(l))) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    l.remove();
                }
                Ok(None) => {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                _ => {}
            }
        }
    }
    // The lock is taken before the folder is made, so a folder without a lock file is dead. A
    // cleaner probing the new lock file between its creation and our `flock` may hold it for a
    // moment, or remove it: then take a fresh name.
    for _ in 0..8 {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let tag = format!("{}-{nanos}", std::process::id());
        let dir = tmp.join(format!("{SCRATCH_PREFIX}{tag}"));
        let lock_path = tmp.join(format!("{SCRATCH_PREFIX}{tag}.lock"));
        match lock::try_acquire(&lock_path, &Holder::this_process(&tag)).map_err(SinkError::io("lock", &lock_path))? {
            Acquire::Acquired(l) if l.is_linked() => return Ok(ScratchRoot { dir, lock: Some(l) }),
            Acquire::Acquired(_) | Acquire::Held(_) => continue,
            // No locks on this file system: nothing can be told apart, go on without.
            Acquire::Unsupported(_) => return Ok(ScratchRoot { dir, lock: None }),
        }
    }
    Err(SinkError::Io {
        action: "lock a scratch folder in",
        path: tmp.display().to_string(),
        source: std::io::Error::from(std::io::ErrorKind::WouldBlock),
    })
}

/// What a publish did.
#[derive(Debug, Clone)]
struct Published {
    manifest: RunManifest,
    run_id: String,
    files: usize,
    bytes: u64,
    deleted: usize,
}

/// A run id: UTC time to the nanosecond, then the process id, so ids sort by time and two runs
/// never share one. Within a process the time is made strictly increasing (a clock that ticks
/// coarser than two calls, or steps back, still gives ids in call order).
pub fn new_run_id() -> String {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LAST: AtomicI64 = AtomicI64::new(i64::MIN);
    let now = chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX - 1);
    let mut prev = LAST.load(Ordering::Relaxed);
    let nanos = loop {
        let next = now.max(prev.saturating_add(1));
        match LAST.compare_exchange_weak(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(seen) => prev = seen,
        }
    };
    let at = chrono::DateTime::from_timestamp_nanos(nanos);
    format!("{}-{:x}", at.format("%Y%m%dT%H%M%S%9fZ"), std::process::id())
}

/// The run id in an etl-written name, `part-00000-<run-id>.parquet`, if it is one.
fn run_id_of_data_file(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".parquet")?;
    let rest = stem.strip_prefix("part-")?;
    let (digits, id) = rest.split_once('-')?;
    (digits.len() == 5 && digits.bytes().all(|b| b.is_ascii_digit()) && id.len() > 16 && id.contains('T')).then_some(id)
}

/// The run an etl-written key belongs to (`key` relative to the output prefix).
fn run_id_of_key(rel: &str) -> Option<&str> {
    if let Some(rest) = rel.strip_prefix(RUNS_DIR) {
        return rest.split_once('/').map(|(id, _)| id).filter(|id| !id.is_empty());
    }
    rel.rsplit('/').next().and_then(run_id_of_data_file)
}

/// Whether an object under the output prefix is one etl writes (so a prefix holding only such
/// objects is an etl output, perhaps without a commit yet).
fn is_etl_key(rel: &str) -> bool {
    rel.starts_with("_etl/") || run_id_of_key(rel).is_some()
}

pub(in crate::sink) fn obj_err(
    action: &'static str,
    url: &ObjectUrl,
    key: &str,
) -> impl FnOnce(object_store::Error) -> SinkError {
    let url = url.url_of(key);
    move |e| SinkError::Store(StoreError::object(action, &url, &e))
}

/// `_etl/runs/<run-id>/started.json`: a run's declaration, written before its first upload.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Started {
    run_id: String,
    /// The head's run id when the run started (`null`: a new output, or a head without one).
    base_run_id: Option<String>,
    host: String,
    pid: u32,
    started_at: String,
}

/// The committed `run.json`: its version for a conditional PUT, the run it names, and the
/// report itself when it parses.
pub(in crate::sink) struct Head {
    version: UpdateVersion,
    run_id: Option<String>,
    replaces: Option<String>,
    pub(in crate::sink) manifest: Option<Box<RunManifest>>,
}

pub(in crate::sink) async fn read_head(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
    key: &str,
) -> Result<Option<Head>, SinkError> {
    match store.get(&ObjPath::from(key)).await {
        Ok(r) => {
            let version = UpdateVersion { e_tag: r.meta.e_tag.clone(), version: r.meta.version.clone() };
            let bytes = r.bytes().await.map_err(obj_err("read", url, key))?;
            let manifest = RunManifest::parse(&url.url_of(key), &bytes).ok();
            Ok(Some(Head {
                version,
                run_id: manifest.as_ref().and_then(|m| m.run_id.clone()),
                replaces: manifest.as_ref().and_then(|m| m.replaces_run_id.clone().flatten()),
                manifest: manifest.map(Box::new),
            }))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(obj_err("read", url, key)(e)),
    }
}

/// Refuses a prefix that holds objects etl does not write (called when it has no head).
pub(super) async fn refuse_foreign(store: &Arc<dyn ObjectStore>, url: &ObjectUrl) -> Result<(), SinkError> {
    refuse_foreign_but(store, url, |_| false).await
}

/// Refuses a prefix that holds objects neither etl's own nor `also` allows.
pub(in crate::sink) async fn refuse_foreign_but(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
    also: fn(&str) -> bool,
) -> Result<(), SinkError> {
    let prefix = url.dir_prefix();
    let p = ObjPath::from(prefix.as_str());
    let mut listing = store.list(Some(&p));
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(obj_err("list", url, &prefix))?;
        let key = meta.location.to_string();
        let rel = key.strip_prefix(&prefix).unwrap_or(&key);
        if !is_etl_key(rel) && !also(rel) {
            return Err(SinkError::NotEtlPrefix { url: url.to_string() });
        }
    }
    Ok(())
}

/// Copies object `from` (at `from_url`) of another bucket or store to `to`, streamed.
async fn transfer(
    from: &ObjectRef,
    from_url: Option<&ObjectUrl>,
    store: &Arc<dyn ObjectStore>,
    to: &ObjPath,
    url: &ObjectUrl,
) -> Result<(), SinkError> {
    use tokio::io::AsyncWriteExt as _;
    let shown = url.url_of(to.as_ref());
    let io = |e: std::io::Error| SinkError::Io { action: "copy to", path: shown.clone(), source: e };
    let source = from_url.map_or_else(|| from.key.to_string(), ToString::to_string);
    let got = from.store.get(&from.key).await.map_err(|e| SinkError::Store(StoreError::object("read", &source, &e)))?;
    let mut stream = got.into_stream();
    let mut writer = object_store::buffered::BufWriter::new(store.clone(), to.clone());
    let mut copied: Result<(), std::io::Error> = Ok(());
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => {
                if let Err(e) = writer.write_all(&bytes).await {
                    copied = Err(e);
                    break;
                }
            }
            Err(e) => {
                copied = Err(std::io::Error::other(e));
                break;
            }
        }
    }
    match copied {
        Ok(()) => writer.shutdown().await.map_err(io),
        Err(e) => {
            let _ = writer.abort().await;
            Err(io(e))
        }
    }
}

/// Uploads the finished output in `local` to `url`; `_etl/run.json` last, conditionally on
/// `head`, the head read when the sink was opened.
async fn publish(
    local: &Path,
    mut report: RunManifest,
    url: &ObjectUrl,
    store: Arc<dyn ObjectStore>,
    head: Option<Head>,
    overwrite: bool,
    stored: &BTreeMap<String, String>,
) -> Result<Published, SinkError> {
    let mut run = Publish::begin_on(store, url, overwrite, head).await?;
    let (files, bytes) = run.upload(local, &mut report, stored).await?;
    run.commit(&mut report).await?;
    let deleted = match run.cleanup().await {
        Ok(n) => n,
        Err(e) => {
            let w = format!("published; removing objects of older runs failed ({e}); the next run removes them");
            tracing::warn!("{w}");
            report.warnings.push(w);
            0
        }
    };
    Ok(Published { manifest: report, run_id: run.run_id, files, bytes, deleted })
}

/// One run's publish, step by step: [`Publish::begin`], [`Publish::upload`],
/// [`Publish::commit`], [`Publish::cleanup`].
pub(in crate::sink) struct Publish<'a> {
    store: Arc<dyn ObjectStore>,
    url: &'a ObjectUrl,
    prefix: String,
    run_key: String,
    head: Option<Head>,
    pub(in crate::sink) run_id: String,
    /// Every key this run wrote before its commit, to remove if it loses.
    written: Vec<String>,
    /// Informational copies made once committed (`_etl/schema/`, `_etl/state.json`): local
    /// file, key.
    schemas: Vec<(PathBuf, String)>,
}

impl<'a> Publish<'a> {
    /// Reads the head, then [`Publish::begin_on`] it.
    #[cfg(test)]
    async fn begin(store: Arc<dyn ObjectStore>, url: &'a ObjectUrl, overwrite: bool) -> Result<Publish<'a>, SinkError> {
        let head = read_head(&store, url, &format!("{}{RUN_MANIFEST}", url.dir_prefix())).await?;
        Publish::begin_on(store, url, overwrite, head).await
    }

    /// Checks that the prefix is an etl output (or empty) and declares the run, built on `head`.
    pub(in crate::sink) async fn begin_on(
        store: Arc<dyn ObjectStore>,
        url: &'a ObjectUrl,
        overwrite: bool,
        head: Option<Head>,
    ) -> Result<Publish<'a>, SinkError> {
        let prefix = url.dir_prefix();
        let run_key = format!("{prefix}{RUN_MANIFEST}");
        if head.is_none() && !overwrite {
            refuse_foreign(&store, url).await?;
        }
        let run_id = new_run_id();
        let started = Started {
            run_id: run_id.clone(),
            base_run_id: head.as_ref().and_then(|h| h.run_id.clone()),
            host: lock::hostname(),
            pid: std::process::id(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        };
        let started_key = format!("{prefix}{RUNS_DIR}{run_id}/{STARTED}");
        let text = serde_json::to_vec_pretty(&started).map_err(|e| SinkError::Io {
            action: "encode",
            path: url.url_of(&started_key),
            source: std::io::Error::other(e),
        })?;
        store.put(&ObjPath::from(started_key.as_str()), PutPayload::from(text)).await.map_err(obj_err(
            "write",
            url,
            &started_key,
        ))?;
        faults::point("s3-declared");
        Ok(Publish { store, url, prefix, run_key, head, run_id, written: vec![started_key], schemas: Vec::new() })
    }

    /// Uploads the data files `report` lists (renaming them with the run id in `report`) and the
    /// schemas under the run; the files in `stored` (relative path, key) are copied server-side
    /// from their keys instead. Returns the files and bytes written. On failure, removes them.
    async fn upload(
        &mut self,
        local: &Path,
        report: &mut RunManifest,
        stored: &BTreeMap<String, String>,
    ) -> Result<(usize, u64), SinkError> {
        let (prefix, run_id) = (&self.prefix, &self.run_id);
        let mut uploads: Vec<(PathBuf, String)> = Vec::new();
        let mut server_copies: Vec<ObjectCopy> = Vec::new();
        let mut copied_bytes = 0;
        for t in &mut report.tables {
            for f in &mut t.files {
                let renamed = match f.path.strip_suffix(".parquet") {
                    Some(stem) => format!("{stem}-{run_id}.parquet"),
                    None => format!("{}-{run_id}", f.path),
                };
                match stored.get(&f.path) {
                    Some(from) => {
                        server_copies.push(ObjectCopy {
                            from: from.clone(),
                            to: format!("{prefix}{renamed}"),
                            bytes: f.bytes,
                        });
                        copied_bytes += f.bytes;
                    }
                    None => uploads.push((local.join(&f.path), format!("{prefix}{renamed}"))),
                }
                f.path = renamed;
            }
        }
        uploads.extend(self.copies(local));
        let copied = server_copies.len();
        self.copy(server_copies).await?;
        let (files, bytes) = self.send(uploads).await?;
        Ok((files + copied, bytes + copied_bytes))
    }

    /// Copies objects of the store server-side (from, to), a few at once. On failure, removes
    /// what this run wrote.
    async fn copy(&mut self, copies: Vec<ObjectCopy>) -> Result<(), SinkError> {
        self.written.extend(copies.iter().map(|c| c.to.clone()));
        if let Err(e) = copy_all(&self.store, self.url, &copies).await {
            remove_keys(&self.store, &self.written).await;
            return Err(e);
        }
        Ok(())
    }

    /// The schemas of the output staged in `local`, to upload under the run now, and their
    /// informational copies (and the state's) to write once committed.
    pub(in crate::sink) fn copies(&mut self, local: &Path) -> Vec<(PathBuf, String)> {
        let (prefix, run_id) = (&self.prefix, &self.run_id);
        let mut uploads = Vec::new();
        let schema_dir = local.join(super::manifest::SCHEMA_DIR);
        if let Ok(entries) = std::fs::read_dir(&schema_dir) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                uploads.push((e.path(), format!("{prefix}{RUNS_DIR}{run_id}/schema/{name}")));
                self.schemas.push((e.path(), format!("{prefix}{}/{name}", super::manifest::SCHEMA_DIR)));
            }
        }
        let state = local.join(crate::state::STATE_FILE);
        if state.is_file() {
            self.schemas.push((state, format!("{prefix}{}", crate::state::STATE_FILE)));
        }
        uploads
    }

    /// Uploads local files to keys, a few at once. Returns the files and bytes uploaded. On
    /// failure, removes what this run wrote.
    pub(in crate::sink) async fn send(&mut self, uploads: Vec<(PathBuf, String)>) -> Result<(usize, u64), SinkError> {
        let url = self.url;
        let bytes: u64 = uploads.iter().filter_map(|(p, _)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
        let files = uploads.len();
        self.written.extend(uploads.iter().map(|(_, k)| k.clone()));
        if let Err(e) = upload_all(&self.store, url, &uploads).await {
            // Nothing references them: remove what this run wrote (a later commit would too).
            remove_keys(&self.store, &self.written).await;
            return Err(e);
        }
        faults::point("s3-uploaded");
        Ok((files, bytes))
    }

    /// Writes a copy of the report under the run, then `_etl/run.json` conditionally on the
    /// head read at the start. Loses with [`SinkError::Conflict`] (having removed this run's
    /// objects) when another run committed in between.
    pub(in crate::sink) async fn commit(&mut self, report: &mut RunManifest) -> Result<(), SinkError> {
        let (url, run_id) = (self.url, self.run_id.clone());
        report.run_id = Some(run_id.clone());
        report.published_to = Some(url.to_string());
        report.replaces_run_id = Some(self.head.as_ref().and_then(|h| h.run_id.clone()));
        let text = report.to_bytes();
        let copy = format!("{}{RUNS_DIR}{run_id}/run.json", self.prefix);
        self.written.push(copy.clone());
        if let Err(e) = self.store.put(&ObjPath::from(copy.as_str()), PutPayload::from(text.clone())).await {
            remove_keys(&self.store, &self.written).await;
            return Err(obj_err("write", url, &copy)(e));
        }
        let mode = match &self.head {
            Some(h) => PutMode::Update(h.version.clone()),
            None => PutMode::Create,
        };
        let key = ObjPath::from(self.run_key.as_str());
        let put = self.store.put_opts(&key, PutPayload::from(text), PutOptions { mode, ..Default::default() }).await;
        if let Err(e) = put {
            // A retried request may have landed before its answer was lost: the head says.
            let now = read_head(&self.store, url, &self.run_key).await;
            let ours = matches!(&now, Ok(Some(h)) if h.run_id.as_deref() == Some(run_id.as_str()));
            if !ours {
                let lost =
                    matches!(e, object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. });
                if !lost {
                    // Unknown outcome: keep the files (a late commit may still name them); a
                    // later run's clean-up removes them if it did not.
                    return Err(obj_err("commit", url, &self.run_key)(e));
                }
                remove_keys(&self.store, &self.written).await;
                let winner = match now {
                    Ok(Some(Head { run_id: Some(id), .. })) => format!("run `{id}`"),
                    _ => "run unknown".to_owned(),
                };
                return Err(SinkError::Conflict { url: url.to_string(), run_id, winner });
            }
        }
        tracing::info!(run_id = %run_id, url = %url, "committed");
        faults::point("s3-committed");
        // Informational copies at the local layout's places (readers use `_etl/run.json`); a
        // state copy of an earlier run that this one does not replace would mislead.
        let copies = std::mem::take(&mut self.schemas);
        let state_key = format!("{}{}", self.prefix, crate::state::STATE_FILE);
        if !copies.iter().any(|(_, k)| *k == state_key) {
            remove_keys(&self.store, &[state_key]).await;
        }
        for (path, key) in copies {
            if let Err(e) = upload(&self.store, &path, &key, url).await {
                let w = format!("published; the informational copy `{key}` could not be written ({e})");
                tracing::warn!("{w}");
                report.warnings.push(w);
            }
        }
        Ok(())
    }

    pub(in crate::sink) async fn cleanup(&self) -> Result<usize, SinkError> {
        cleanup(&self.store, self.url, &self.prefix, &self.run_key, &self.run_id).await
    }
}

/// Uploads local files to keys (`(file, key)`), a few at once.
pub(in crate::sink) async fn upload_all(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
    uploads: &[(PathBuf, String)],
) -> Result<(), SinkError> {
    at_most(CONCURRENT_UPLOADS, uploads.iter().map(|(path, key)| upload(store, path, key, url))).await
}

/// One object of a store copied to another key of it.
#[derive(Debug, Clone)]
pub(in crate::sink) struct ObjectCopy {
    pub from: String,
    pub to: String,
    /// The object's size: one larger than S3 copies in one request is streamed instead.
    pub bytes: u64,
}

/// Copies objects of `store`, a few dozen at once: server-side (no bytes go through this
/// machine), except an object larger than one `CopyObject` request takes, which is streamed.
pub(in crate::sink) async fn copy_all(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
    copies: &[ObjectCopy],
) -> Result<(), SinkError> {
    copy_all_within(store, url, copies, COPY_OBJECT_MAX_BYTES).await
}

/// [`copy_all`], objects larger than `server_side_max` streamed.
async fn copy_all_within(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
    copies: &[ObjectCopy],
    server_side_max: u64,
) -> Result<(), SinkError> {
    at_most(
        CONCURRENT_COPIES,
        copies.iter().map(|c| async move {
            let (from, to) = (ObjPath::from(c.from.as_str()), ObjPath::from(c.to.as_str()));
            if c.bytes > server_side_max {
                transfer(&ObjectRef { store: store.clone(), key: from }, None, store, &to, url).await
            } else {
                store.copy(&from, &to).await.map_err(obj_err("copy", url, &c.from))
            }
        }),
    )
    .await
}

/// Runs `requests`, at most `limit` at once; the first error stops the rest.
async fn at_most<F>(limit: usize, requests: impl Iterator<Item = F>) -> Result<(), SinkError>
where
    F: std::future::Future<Output = Result<(), SinkError>>,
{
    futures::stream::iter(requests).buffer_unordered(limit).try_collect::<()>().await
}

pub(in crate::sink) async fn upload(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    key: &str,
    url: &ObjectUrl,
) -> Result<(), SinkError> {
    let local_err = |e: std::io::Error| SinkError::Io { action: "read", path: path.display().to_string(), source: e };
    let size = tokio::fs::metadata(path).await.map_err(local_err)?.len();
    let target = ObjPath::from(key);
    if size <= MULTIPART_BYTES {
        let data = tokio::fs::read(path).await.map_err(local_err)?;
        store.put(&target, PutPayload::from(data)).await.map_err(obj_err("write", url, key))?;
        return Ok(());
    }
    let mut writer = object_store::buffered::BufWriter::new(store.clone(), target);
    let mut file = tokio::fs::File::open(path).await.map_err(local_err)?;
    let copied = tokio::io::copy(&mut file, &mut writer).await;
    let done = match copied {
        Ok(_) => tokio::io::AsyncWriteExt::shutdown(&mut writer).await,
        Err(e) => {
            let _ = writer.abort().await;
            Err(e)
        }
    };
    done.map_err(|e| SinkError::Io { action: "upload", path: url.url_of(key), source: e })
}

/// Streams the object `key` of `store` (`shown`: its URL) into the new local file `to`.
pub(in crate::sink) async fn download(
    store: &Arc<dyn ObjectStore>,
    key: &ObjPath,
    to: &Path,
    shown: &str,
) -> Result<(), SinkError> {
    use tokio::io::AsyncWriteExt as _;
    let got = store.get(key).await.map_err(|e| SinkError::Store(StoreError::object("read", shown, &e)))?;
    let mut stream = got.into_stream();
    let mut file = tokio::fs::File::create(to).await.map_err(SinkError::io("create", to))?;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| SinkError::Store(StoreError::object("read", shown, &e)))?;
        file.write_all(&chunk).await.map_err(SinkError::io("write", to))?;
    }
    file.flush().await.map_err(SinkError::io("write", to))
}

/// [`download`] from synchronous code (never from the I/O runtime's own threads).
pub(in crate::sink) fn download_blocking(
    store: &Arc<dyn ObjectStore>,
    key: &ObjPath,
    to: &Path,
    shown: &str,
) -> Result<(), SinkError> {
    io_runtime().block_on(download(store, key, to, shown))
}

/// Deletes `keys`, best effort: what is left is removed by a later run's clean-up.
pub(in crate::sink) async fn remove_keys(store: &Arc<dyn ObjectStore>, keys: &[String]) {
    for k in keys {
        if let Err(e) = store.delete(&ObjPath::from(k.as_str())).await
            && !matches!(e, object_store::Error::NotFound { .. })
        {
            tracing::warn!(key = %k, error = %e, "could not remove an object of this run");
        }
    }
}

/// Deletes etl-named objects of runs no committed `run.json` can reference any more, if
/// `current` is still the head: runs other than the head and the one it replaced, except runs
/// that declared the head as their base (they may still commit). Also the `_etl/schema/` copies
/// of tables the head no longer lists.
async fn cleanup(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
    prefix: &str,
    run_key: &str,
    current: &str,
) -> Result<usize, SinkError> {
    // Read again: a later commit owns the clean-up from here on.
    let Some(head) = read_head(store, url, run_key).await? else { return Ok(0) };
    if head.run_id.as_deref() != Some(current) {
        tracing::info!(run_id = current, "another run committed after this one; leaving the clean-up to it");
        return Ok(0);
    }
    let keep: BTreeSet<&str> = [Some(current), head.replaces.as_deref()].into_iter().flatten().collect();
    let mut runs: BTreeMap<String, Vec<ObjPath>> = BTreeMap::new();
    // The informational contracts of tables the committed run no longer lists (their copies
    // were written by older runs): `_etl/schema/` lists the output's tables, as in a folder.
    let contracts = format!("{}/", super::manifest::SCHEMA_DIR);
    let mut stale = Vec::new();
    let p = ObjPath::from(prefix);
    let mut listing = store.list(Some(&p));
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(obj_err("list", url, prefix))?;
        let key = meta.location.to_string();
        let rel = key.strip_prefix(prefix).unwrap_or(&key);
        if let Some(id) = run_id_of_key(rel)
            && !keep.contains(id)
        {
            runs.entry(id.to_owned()).or_default().push(meta.location);
        } else if let (Some(file), Some(committed)) = (rel.strip_prefix(contracts.as_str()), &head.manifest)
            && !file.contains('/')
            && super::manifest::unlisted_contract(|t| committed.lists(t), file)
        {
            stale.push(meta.location);
        }
    }
    let mut n = 0;
    for key in stale {
        match store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => n += 1,
            Err(e) => return Err(obj_err("delete", url, key.as_ref())(e)),
        }
    }
    for (id, mut keys) in runs {
        let started_key = format!("{prefix}{RUNS_DIR}{id}/{STARTED}");
        let live = match store.get(&ObjPath::from(started_key.as_str())).await {
            Ok(r) => {
                let bytes = r.bytes().await.map_err(obj_err("read", url, &started_key))?;
                let started: Option<Started> =
                    (bytes.len() <= MAX_STARTED_BYTES).then(|| serde_json::from_slice(&bytes).ok()).flatten();
                started.is_some_and(|s| s.base_run_id.as_deref() == Some(current))
            }
            Err(object_store::Error::NotFound { .. }) => false,
            Err(e) => return Err(obj_err("read", url, &started_key)(e)),
        };
        if live {
            continue;
        }
        // The declaration last, so an interrupted clean-up still sees the run's base.
        keys.sort_by_key(|k| k.as_ref().ends_with(STARTED));
        for key in keys {
            match store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => n += 1,
                Err(e) => return Err(obj_err("delete", url, key.as_ref())(e)),
            }
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_in_names() {
        let id = new_run_id();
        let name = format!("part-00003-{id}.parquet");
        assert_eq!(run_id_of_data_file(&name), Some(id.as_str()));
        assert_eq!(run_id_of_data_file("part-00003.parquet"), None);
        assert_eq!(run_id_of_data_file("notes.parquet"), None);
        assert_eq!(run_id_of_data_file("part-3-x.parquet"), None);
        let mut ids: Vec<String> = (0..1000).map(|_| new_run_id()).collect();
        ids.insert(0, id.clone());
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "run ids sort by time, and one process never repeats one");
        assert_eq!(run_id_of_key(&format!("{RUNS_DIR}{id}/run.json")), Some(id.as_str()));
        assert_eq!(run_id_of_key(&format!("user/part-00000-{id}.parquet")), Some(id.as_str()));
        assert_eq!(run_id_of_key("_etl/run.json"), None);
        assert!(is_etl_key("_etl/schema/user.json") && !is_etl_key("notes.txt"));
    }

    /// The output prefix `out/` of a memory bucket, and a local folder holding one staged file.
    struct Fixture {
        url: ObjectUrl,
        store: Arc<dyn ObjectStore>,
        tmp: tempfile::TempDir,
    }

    impl Fixture {
        fn new(bucket: &str) -> Fixture {
            let url = ObjectUrl { scheme: store::Scheme::Memory, bucket: bucket.into(), key: "out".into() };
            Fixture { url, store: store::memory::store(bucket), tmp: tempfile::tempdir().unwrap() }
        }

        /// A staged output of one table `t` with one file holding `content`, and its report.
        fn staged(&self, content: &str) -> (PathBuf, RunManifest) {
            let dir = self.tmp.path().join(content);
            std::fs::create_dir_all(dir.join("t")).unwrap();
            std::fs::write(dir.join("t/part-00000.parquet"), content).unwrap();
            let report: RunManifest = serde_json::from_value(serde_json::json!({
                "etl_version": "0", "started_at": "", "finished_at": "",
                "options": {"type_attribute": "type", "threads": 1, "strict": false, "max_rejects": null, "max_line_bytes": 1},
                "inputs": [], "exports": [],
                "reconciliation": {"items_read": 1, "rows_written": 1, "rejects": 0, "balanced": true,
                    "manifest_item_count": null, "matches_manifest": null, "untyped_items": 0},
                "tables": [{"name": "t", "entity": null, "rows": 1, "columns": 1,
                    "files": [{"path": "t/part-00000.parquet", "rows": 1, "row_groups": 1, "bytes": content.len()}]}],
                "rejects_by_reason": {}, "widenings": [], "warnings": [],
                "timings_ms": {"resolve": 0, "read_and_decode": 0, "write": 0, "total": 0}
            }))
            .unwrap();
            (dir, report)
        }

        fn begin(&self) -> Result<Publish<'_>, SinkError> {
            io_runtime().block_on(Publish::begin(self.store.clone(), &self.url, false))
        }

        /// Begins and uploads a run whose one file holds `content`.
        fn start(&self, content: &str) -> (Publish<'_>, RunManifest) {
            let (dir, mut report) = self.staged(content);
            let mut run = self.begin().unwrap();
            io_runtime().block_on(run.upload(&dir, &mut report, &BTreeMap::new())).unwrap();
            (run, report)
        }

        fn commit(&self, run: &mut Publish<'_>, report: &mut RunManifest) -> Result<(), SinkError> {
            io_runtime().block_on(run.commit(report))
        }

        fn keys(&self) -> BTreeSet<String> {
            io_runtime().block_on(async {
                self.store.list(Some(&ObjPath::from("out"))).map(|m| m.unwrap().location.to_string()).collect().await
            })
        }

        fn get(&self, key: &str) -> Option<Vec<u8>> {
            io_runtime().block_on(async {
                match self.store.get(&ObjPath::from(key)).await {
                    Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
                    Err(object_store::Error::NotFound { .. }) => None,
                    Err(e) => panic!("{e}"),
                }
            })
        }

        /// What a reader sees: the committed run id and the content of every file it lists,
        /// each of which must exist.
        fn read(&self) -> (String, Vec<String>) {
            let m =
                RunManifest::parse("run.json", &self.get("out/_etl/run.json").expect("a committed output")).unwrap();
            let files = m.tables[0]
                .files
                .iter()
                .map(|f| {
                    let bytes = self.get(&format!("out/{}", f.path));
                    String::from_utf8(bytes.unwrap_or_else(|| panic!("run.json lists {}, which is gone", f.path)))
                        .unwrap()
                })
                .collect();
            (m.run_id.unwrap(), files)
        }

        fn objects_of(&self, run_id: &str) -> Vec<String> {
            self.keys().into_iter().filter(|k| k.contains(run_id)).collect()
        }
    }

    #[test]
    fn overlapping_runs_one_wins_and_the_output_stays_whole() {
        let f = Fixture::new("sink-object-race");
        let (mut first, mut report) = f.start("v0");
        f.commit(&mut first, &mut report).unwrap();
        assert_eq!(f.read(), (first.run_id.clone(), vec!["v0".to_owned()]));

        // A and B both start from v0; A commits first and cleans up while B still uploads.
        let (mut a, mut ra) = f.start("a");
        let (mut b, mut rb) = f.start("b");
        f.commit(&mut a, &mut ra).unwrap();
        io_runtime().block_on(a.cleanup()).unwrap();
        match f.commit(&mut b, &mut rb) {
            Err(e @ SinkError::Conflict { .. }) => {
                assert!(e.is_concurrent_run());
                let text = e.to_string();
                assert!(text.contains(&a.run_id) && text.contains(&b.run_id), "names both runs: {text}");
            }
            other => panic!("B must lose: {other:?}"),
        }
        assert_eq!(f.read(), (a.run_id.clone(), vec!["a".to_owned()]));
        assert!(f.objects_of(&b.run_id).is_empty(), "the loser's objects: {:?}", f.objects_of(&b.run_id));
        assert!(!f.objects_of(&first.run_id).is_empty(), "the replaced run is kept for readers in flight");

        // C starts after A's commit (its base is A); D too. A's clean-up keeps them (they may
        // still commit). C wins; D loses; C's clean-up removes v0 and keeps A.
        let (mut c, mut rc) = f.start("c");
        let (mut d, mut rd) = f.start("d");
        io_runtime().block_on(a.cleanup()).unwrap();
        assert!(!f.objects_of(&c.run_id).is_empty() && !f.objects_of(&d.run_id).is_empty());
        f.commit(&mut c, &mut rc).unwrap();
        // v0's data file, declaration and report; D's declaration and data file (D builds on A,
        // which is no longer the head, so it can never commit).
        assert_eq!(io_runtime().block_on(c.cleanup()).unwrap(), 5);
        assert!(matches!(f.commit(&mut d, &mut rd), Err(SinkError::Conflict { .. })));
        assert_eq!(f.read(), (c.run_id.clone(), vec!["c".to_owned()]));
        assert!(f.objects_of(&first.run_id).is_empty());
        assert!(!f.objects_of(&a.run_id).is_empty());
        assert!(f.objects_of(&d.run_id).is_empty());

        // A late clean-up by a run that is no longer the head deletes nothing.
        let before = f.keys();
        assert_eq!(io_runtime().block_on(a.cleanup()).unwrap(), 0);
        assert_eq!(f.keys(), before);
    }

    #[test]
    fn two_first_runs_on_a_new_output_one_wins() {
        let f = Fixture::new("sink-object-new");
        let (mut a, mut ra) = f.start("a");
        // B sees only A's objects under the prefix: an etl output without a commit, not foreign.
        let (mut b, mut rb) = f.start("b");
        f.commit(&mut b, &mut rb).unwrap();
        assert!(matches!(f.commit(&mut a, &mut ra), Err(SinkError::Conflict { .. })));
        assert_eq!(f.read(), (b.run_id.clone(), vec!["b".to_owned()]));
        assert!(f.objects_of(&a.run_id).is_empty());
    }

    #[test]
    fn crashed_runs_are_removed_by_the_next_commit_and_foreign_objects_refused() {
        let f = Fixture::new("sink-object-crash");
        let (mut first, mut r) = f.start("v0");
        f.commit(&mut first, &mut r).unwrap();
        // A run that uploaded and died (dropped without commit), based on the head.
        let (crashed, _) = f.start("crashed");
        let crashed_id = crashed.run_id.clone();
        drop(crashed);
        let (mut next, mut rn) = f.start("next");
        f.commit(&mut next, &mut rn).unwrap();
        io_runtime().block_on(next.cleanup()).unwrap();
        assert!(f.objects_of(&crashed_id).is_empty(), "{:?}", f.objects_of(&crashed_id));
        assert_eq!(f.read(), (next.run_id.clone(), vec!["next".to_owned()]));

        let g = Fixture::new("sink-object-foreign");
        io_runtime().block_on(g.store.put(&ObjPath::from("out/notes.txt"), PutPayload::from("mine"))).unwrap();
        assert!(matches!(g.begin(), Err(SinkError::NotEtlPrefix { .. })));
    }

    #[test]
    fn objects_larger_than_one_copy_request_are_streamed_the_same_bytes() {
        use std::os::unix::fs::MetadataExt as _;
        let f = Fixture::new("sink-object-copy");
        // A folder as the store: its server-side copy is a hard link (the same inode), so the
        // test sees which way each object went.
        let store: Arc<dyn ObjectStore> =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(f.tmp.path()).unwrap());
        // Larger than one multipart part, so the streamed copy is a multipart upload.
        let big: Vec<u8> = (0..(MULTIPART_BYTES as usize + 12_345)).map(|i| (i % 251) as u8).collect();
        std::fs::create_dir_all(f.tmp.path().join("in")).unwrap();
        std::fs::write(f.tmp.path().join("in/small"), b"small").unwrap();
        std::fs::write(f.tmp.path().join("in/big"), &big).unwrap();
        let copy =
            |from: &str, to: &str, bytes: usize| ObjectCopy { from: from.into(), to: to.into(), bytes: bytes as u64 };
        let copies = [copy("in/small", "out/small", 5), copy("in/big", "out/big", big.len())];
        // Server-side up to 16 bytes here (5 GiB for real): the small object is copied, the big
        // one streamed; both arrive whole.
        io_runtime().block_on(copy_all_within(&store, &f.url, &copies, 16)).unwrap();
        let inode = |rel: &str| std::fs::metadata(f.tmp.path().join(rel)).unwrap().ino();
        assert_eq!(inode("out/small"), inode("in/small"), "copied server-side");
        assert_ne!(inode("out/big"), inode("in/big"), "streamed");
        assert_eq!(std::fs::read(f.tmp.path().join("out/small")).unwrap(), b"small");
        assert_eq!(std::fs::read(f.tmp.path().join("out/big")).unwrap(), big);
        // A copy of an object that is not there fails, whichever way it goes.
        for bytes in [5, big.len()] {
            let missing = [copy("in/none", "out/none", bytes)];
            assert!(io_runtime().block_on(copy_all_within(&store, &f.url, &missing, 16)).is_err());
        }
    }
}

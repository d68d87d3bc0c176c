//! Where the shards of a sharded run put their work before `etl commit` publishes it:
//! `OUT/_etl/shards/` inside the output, a folder or an `s3://` prefix, which no reader looks
//! at (readers read only what `_etl/run.json` lists, and a new output has none until the
//! commit).
//!
//! ```text
//! OUT/_etl/shards/
//!   infer-00002-of-00004.json     shard 2's shapes (`--phase infer`)
//!   held-00002-of-00004.json      shard 2 found the output holding what it would write, and
//!                                 read nothing (either phase)
//!   shard-00002-of-00004/         shard 2's part files and, written last, `shard.json`
//!   .attempt-00002-of-00004-<pid>-<nanos>/   an attempt still running, or one that crashed
//! ```
//!
//! In a folder, an attempt writes into its own hidden folder and becomes `shard-I-of-N/` by a
//! rename once its manifest is in it, replacing the folder of any earlier attempt of the same
//! shard: a shard's folder is always one complete attempt, and a crashed attempt never reaches
//! a commit. The commit publishes the output without `_etl/shards/` (its staging folder never
//! had it), so the shards go with the output they were committed into.
//!
//! On an object store there is no rename: an attempt uploads its part files under
//! `shard-I-of-N/attempt-<id>/`, then writes `shard-I-of-N/shard.json` (one PUT, atomic), whose
//! file paths name that attempt. A later attempt's manifest replaces it, so the commit reads
//! exactly one complete attempt per shard and a crashed attempt's files are never named. The
//! files of replaced or crashed attempts stay until the commit, which copies the named part
//! files server-side into the output and then removes `_etl/shards/` whole. (An attempt does not
//! delete other attempts' files itself: an attempt of the same shard still running elsewhere,
//! a job runner's retry, would lose files its manifest is about to name.)

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::file::properties::WriterProperties;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};

use super::delta::refuse_other_format;
use super::object::{ScratchRoot, obj_err, scratch_root};
use super::{Format, PartSink, PartWriter, RunManifest, Sink, SinkError};
use crate::aws::AwsOptions;
use crate::source::shard::Shard;
use crate::store::{self, ObjectUrl, Target, io_runtime};

/// The shards' folder inside an output.
pub const SHARDS_DIR: &str = "_etl/shards";
/// A shard's manifest, inside its folder, written last.
pub const SHARD_MANIFEST: &str = "shard.json";

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> SinkError + 'a {
    SinkError::io(action, path)
}

fn tag(shard: Shard) -> String {
    format!("{:05}-of-{:05}", shard.index, shard.count)
}

/// `OUT/_etl/shards`.
pub fn root(out: &Path) -> PathBuf {
    out.join(SHARDS_DIR)
}

/// Where shard `shard`'s shapes go (`--phase infer`).
pub fn infer_path(out: &Path, shard: Shard) -> PathBuf {
    root(out).join(infer_name(shard))
}

/// `infer-IIIII-of-NNNNN.json`.
fn infer_name(shard: Shard) -> String {
    format!("infer-{}.json", tag(shard))
}

/// `held-IIIII-of-NNNNN.json`.
fn held_name(shard: Shard) -> String {
    format!("held-{}.json", tag(shard))
}

/// Where shard `shard`'s committed attempt is.
pub fn shard_dir(out: &Path, shard: Shard) -> PathBuf {
    root(out).join(format!("shard-{}", tag(shard)))
}

/// `(I, N)` of `prefix-IIIII-of-NNNNN` + `suffix`.
fn parse_name(name: &str, prefix: &str, suffix: &str) -> Option<Shard> {
    let rest = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    let (i, n) = rest.split_once("-of-")?;
    format!("{i}/{n}").parse().ok().filter(|s: &Shard| tag(*s) == rest)
}

/// What `OUT/_etl/shards/` holds: finished shards (their folders or key prefixes) and shape
/// files, in shard order.
#[derive(Debug, Default)]
pub struct Listing {
    pub shards: Vec<(Shard, ShardPlace)>,
    pub infer: Vec<(Shard, String)>,
    /// Shards that found the output holding what they would write, and wrote nothing else.
    pub held: Vec<(Shard, String)>,
    /// Attempts still running or crashed (hidden folders), and names etl did not write.
    pub other: Vec<PathBuf>,
}

/// Lists `OUT/_etl/shards/` (empty when it does not exist).
pub fn list(out: &Path) -> Result<Listing, SinkError> {
    let dir = root(out);
    let mut l = Listing::default();
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(l),
        Err(e) => return Err(io("list", &dir)(e)),
    };
    for e in entries {
        let e = e.map_err(io("list", &dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if let Some(s) = parse_name(&name, "shard-", "") {
            if path.join(SHARD_MANIFEST).is_file() {
                l.shards.push((s, path.display().to_string()));
            } else {
                l.other.push(path);
            }
        } else if let Some(s) = parse_name(&name, "infer-", ".json") {
            l.infer.push((s, path.display().to_string()));
        } else if let Some(s) = parse_name(&name, "held-", ".json") {
            l.held.push((s, path.display().to_string()));
        } else {
            l.other.push(path);
        }
    }
    l.shards.sort();
    l.infer.sort();
    l.held.sort();
    l.other.sort();
    Ok(l)
}

/// `true` when `out` holds nothing but `_etl/shards/` (a new output whose shards have run), or
/// an empty `_etl/`: what a shard that starts at the same time has made of it so far (it creates
/// `out/_etl/shards/` one folder after the other), which must not make its siblings refuse `out`.
pub fn holds_only_shards(out: &Path) -> io::Result<bool> {
    let names = |d: &Path| -> io::Result<Vec<String>> {
        fs::read_dir(d)?.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned())).collect()
    };
    if names(out)? != ["_etl"] {
        return Ok(false);
    }
    let etl = names(&out.join("_etl"))?;
    Ok(etl.is_empty() || etl == ["shards"])
}

/// Writes `bytes` to `path` through a temporary name and a rename, synced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), SinkError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(io("create", parent))?;
    let tmp = parent.join(format!(
        ".{}.tmp-{}",
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let mut f = fs::File::create(&tmp).map_err(io("create", &tmp))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(io("write", &tmp))?;
    fs::rename(&tmp, path).map_err(io("write", path))
}

/// The shards' area of one output: `OUT/_etl/shards/` in a folder, or under an object-store
/// prefix. Every phase of a sharded run and the commit reach it through this.
pub enum ShardArea {
    Folder(PathBuf),
    Prefix { store: Arc<dyn ObjectStore>, url: ObjectUrl },
}

/// Where a finished shard is: its folder, or its key prefix (ending in `/`).
pub type ShardPlace = String;

impl ShardArea {
    /// The shards' area of `target`. An object-store prefix must be empty or etl's own (Parquet
    /// or Delta).
    pub fn open(target: &Target, aws: &AwsOptions) -> Result<ShardArea, SinkError> {
        match target {
            Target::Path(p) => Ok(ShardArea::Folder(p.clone())),
            Target::Object(url) => io_runtime().block_on(async {
                let store = store::open(url, aws).await?;
                // etl's Parquet objects, or its Delta tables.
                super::object::refuse_foreign_but(&store, url, super::delta::object::is_delta_key).await?;
                Ok(ShardArea::Prefix { store, url: url.clone() })
            }),
        }
    }

    /// Refuses, before a shard reads a file, an output that the commit of a run of `format`
    /// would refuse. The commit opens the output's sink as a run without `--overwrite` does
    /// (`pipeline::shard`), so what that refuses is refused here, before the shards spend
    /// their time: a Delta output for a Parquet run ([`DeltaError::DeltaOutput`]), a Parquet
    /// output for a Delta run ([`DeltaError::ParquetOutput`]), and what is not an etl output
    /// ([`SinkError::NotEtlOutput`] in a folder, [`SinkError::NotEtlPrefix`] under a prefix).
    /// The shards' own `_etl/shards/` is allowed.
    pub fn refuse_uncommittable(&self, format: Format) -> Result<(), SinkError> {
        let delta = format == Format::Delta;
        let refuse =
            |m: &RunManifest, shown: &str| -> Result<(), SinkError> { Ok(refuse_other_format(m, delta, shown)?) };
        match self {
            ShardArea::Folder(out) => {
                if let Some(m) = super::manifest::local_committed(out)? {
                    return refuse(&m, &out.display().to_string());
                }
                // What `local::Staging::create` checks: a folder that is empty or holds only
                // the shards' area.
                let foreign = match fs::symlink_metadata(out) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                    Err(e) => return Err(io("inspect", out)(e)),
                    Ok(m) if !m.is_dir() => {
                        return Err(SinkError::NotADirectory { path: out.display().to_string() });
                    }
                    Ok(_) => {
                        fs::read_dir(out).map_err(io("read", out))?.next().is_some()
                            && !holds_only_shards(out).map_err(io("read", out))?
                    }
                };
                if foreign { Err(SinkError::NotEtlOutput { path: out.display().to_string() }) } else { Ok(()) }
            }
            ShardArea::Prefix { store, url } => io_runtime().block_on(async {
                match super::manifest::object_committed(store, url).await? {
                    Some(m) => refuse(&m, &url.to_string()),
                    // [`ShardArea::open`] allowed Delta tables beside etl's objects (a Delta
                    // run that stopped before its head): a Delta commit goes on from them, a
                    // Parquet one refuses them, as `object::ObjectSink::create` does.
                    None if !delta => super::object::refuse_foreign(store, url).await,
                    None => Ok(()),
                }
            }),
        }
    }

    /// The output, as the user named it.
    pub fn shown(&self) -> String {
        match self {
            ShardArea::Folder(p) => p.display().to_string(),
            ShardArea::Prefix { url, .. } => url.to_string(),
        }
    }

    fn key(url: &ObjectUrl, rel: &str) -> String {
        format!("{}{SHARDS_DIR}/{rel}", url.dir_prefix())
    }

    /// Where shard `shard`'s shapes go, as shown to the user.
    pub fn infer_shown(&self, shard: Shard) -> String {
        match self {
            ShardArea::Folder(out) => infer_path(out, shard).display().to_string(),
            ShardArea::Prefix { url, .. } => url.url_of(&Self::key(url, &infer_name(shard))),
        }
    }

    /// The shards' area, as shown to the user.
    pub fn root_shown(&self) -> String {
        match self {
            ShardArea::Folder(out) => root(out).display().to_string(),
            ShardArea::Prefix { url, .. } => url.url_of(&Self::key(url, "")),
        }
    }

    /// Writes shard `shard`'s shapes, replacing an earlier attempt's, in one step.
    pub fn write_infer(&self, shard: Shard, bytes: &[u8]) -> Result<(), SinkError> {
        self.write_file(&infer_name(shard), bytes)
    }

    /// Shard `shard`'s shapes, if its `--phase infer` has finished.
    pub fn read_infer(&self, shard: Shard) -> Result<Option<Vec<u8>>, SinkError> {
        self.read_file(&infer_name(shard))
    }

    /// Where shard `shard` says it found the output holding its run, as shown to the user.
    pub fn held_shown(&self, shard: Shard) -> String {
        match self {
            ShardArea::Folder(out) => root(out).join(held_name(shard)).display().to_string(),
            ShardArea::Prefix { url, .. } => url.url_of(&Self::key(url, &held_name(shard))),
        }
    }

    /// Writes that shard `shard` found the output holding its run, in one step.
    pub fn write_held(&self, shard: Shard, bytes: &[u8]) -> Result<(), SinkError> {
        self.write_file(&held_name(shard), bytes)
    }

    /// What shard `shard` wrote when it found the output holding its run, if it did.
    pub fn read_held(&self, shard: Shard) -> Result<Option<Vec<u8>>, SinkError> {
        self.read_file(&held_name(shard))
    }

    /// Writes the area's file `name`, replacing it in one step.
    fn write_file(&self, name: &str, bytes: &[u8]) -> Result<(), SinkError> {
        match self {
            ShardArea::Folder(out) => write_atomically(&root(out).join(name), bytes),
            ShardArea::Prefix { store, url } => {
                let key = Self::key(url, name);
                io_runtime()
                    .block_on(async { store.put(&ObjPath::from(key.as_str()), PutPayload::from(bytes.to_vec())).await })
                    .map(|_| ())
                    .map_err(obj_err("write", url, &key))
            }
        }
    }

    /// The area's file `name`, if it is there.
    fn read_file(&self, name: &str) -> Result<Option<Vec<u8>>, SinkError> {
        match self {
            ShardArea::Folder(out) => read_if_there(&root(out).join(name)),
            ShardArea::Prefix { store, url } => get_if_there(store, url, &Self::key(url, name)),
        }
    }

    /// The manifest of the finished shard at `place`.
    pub fn read_manifest(&self, place: &str) -> Result<Vec<u8>, SinkError> {
        let missing = |shown: String| SinkError::Io {
            action: "read",
            path: shown,
            source: io::Error::from(io::ErrorKind::NotFound),
        };
        match self {
            ShardArea::Folder(_) => {
                let path = Path::new(place).join(SHARD_MANIFEST);
                read_if_there(&path)?.ok_or_else(|| missing(path.display().to_string()))
            }
            ShardArea::Prefix { store, url } => {
                let key = format!("{place}{SHARD_MANIFEST}");
                get_if_there(store, url, &key)?.ok_or_else(|| missing(url.url_of(&key)))
            }
        }
    }

    /// The manifest at `place`, as shown to the user.
    pub fn manifest_shown(&self, place: &str) -> String {
        match self {
            ShardArea::Folder(_) => Path::new(place).join(SHARD_MANIFEST).display().to_string(),
            ShardArea::Prefix { url, .. } => url.url_of(&format!("{place}{SHARD_MANIFEST}")),
        }
    }

    /// What the area holds: finished shards and shape files, in shard order.
    pub fn list(&self) -> Result<Listing, SinkError> {
        match self {
            ShardArea::Folder(out) => list(out),
            ShardArea::Prefix { store, url } => {
                let prefix = Self::key(url, "");
                let keys: Vec<String> = io_runtime()
                    .block_on(async {
                        store
                            .list(Some(&ObjPath::from(prefix.as_str())))
                            .map_ok(|m| m.location.to_string())
                            .try_collect()
                            .await
                    })
                    .map_err(obj_err("list", url, &prefix))?;
                let mut l = Listing::default();
                for key in keys {
                    let rel = key.strip_prefix(&prefix).unwrap_or(&key);
                    if let Some((name, SHARD_MANIFEST)) = rel.split_once('/')
                        && let Some(s) = parse_name(name, "shard-", "")
                    {
                        l.shards.push((s, format!("{prefix}{name}/")));
                    } else if let Some(s) = parse_name(rel, "infer-", ".json") {
                        l.infer.push((s, key.clone()));
                    } else if let Some(s) = parse_name(rel, "held-", ".json") {
                        l.held.push((s, key.clone()));
                    }
                }
                l.shards.sort();
                l.infer.sort();
                l.held.sort();
                Ok(l)
            }
        }
    }

    /// Starts an attempt of `shard`; `props` for its part files.
    pub fn attempt(&self, shard: Shard, props: WriterProperties) -> Result<ShardFolder, SinkError> {
        match self {
            ShardArea::Folder(out) => ShardFolder::create(out, shard, props),
            ShardArea::Prefix { store, url } => {
                let root = scratch_root()?;
                let dir = root.dir.join("attempt");
                let scratch = super::scratch_dir(&dir);
                fs::create_dir_all(&scratch).map_err(io("create", &scratch))?;
                let attempt = format!("attempt-{}", super::object::new_run_id());
                Ok(ShardFolder {
                    dir,
                    target: PathBuf::new(),
                    scratch,
                    props,
                    published: false,
                    upload: Some(Upload {
                        store: store.clone(),
                        url: url.clone(),
                        shard_key: Self::key(url, &format!("shard-{}/", tag(shard))),
                        attempt,
                        _root: root,
                    }),
                })
            }
        }
    }

    /// Puts the part file `path` (relative to the shard) of the finished shard at `place` into
    /// the output `sink` at `rel`. `false` when the sink cannot take it.
    pub fn keep_part(&self, sink: &dyn Sink, place: &str, path: &str, rel: &str) -> Result<bool, SinkError> {
        match self {
            ShardArea::Folder(_) => Ok(sink.keep(rel, &Path::new(place).join(path), true)?.is_some()),
            ShardArea::Prefix { .. } => sink.keep_stored(rel, &format!("{place}{path}")),
        }
    }

    /// Removes the whole area (after a commit). Best effort for objects.
    pub fn remove_all(&self) -> Result<(), SinkError> {
        match self {
            ShardArea::Folder(out) => {
                let dir = root(out);
                match fs::remove_dir_all(&dir) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io("remove", &dir)(e)),
                    _ => Ok(()),
                }
            }
            ShardArea::Prefix { store, url } => {
                let prefix = Self::key(url, "");
                io_runtime()
                    .block_on(async {
                        let keys = store.list(Some(&ObjPath::from(prefix.as_str()))).map_ok(|m| m.location);
                        store.delete_stream(keys.boxed()).try_collect::<Vec<_>>().await
                    })
                    .map(|_| ())
                    .map_err(obj_err("remove", url, &prefix))
            }
        }
    }
}

fn read_if_there(path: &Path) -> Result<Option<Vec<u8>>, SinkError> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("read", path)(e)),
    }
}

fn get_if_there(store: &Arc<dyn ObjectStore>, url: &ObjectUrl, key: &str) -> Result<Option<Vec<u8>>, SinkError> {
    io_runtime()
        .block_on(store::get_if_exists(store.as_ref(), &ObjPath::from(key)))
        .map(|b| b.map(|b| b.to_vec()))
        .map_err(obj_err("read", url, key))
}

/// Where an object-store attempt goes once its part files are written locally.
struct Upload {
    store: Arc<dyn ObjectStore>,
    url: ObjectUrl,
    /// `PREFIX/_etl/shards/shard-I-of-N/`.
    shard_key: String,
    /// `attempt-<id>`, unique to this attempt.
    attempt: String,
    /// The local folder the attempt is written in, locked while it lives.
    _root: ScratchRoot,
}

/// One attempt of one shard: part files written into a hidden folder, published as the shard's
/// folder by [`ShardFolder::publish`]. Dropped unpublished, the attempt's folder is removed.
pub struct ShardFolder {
    dir: PathBuf,
    target: PathBuf,
    scratch: PathBuf,
    props: WriterProperties,
    published: bool,
    /// Object-store attempts: where the finished attempt is uploaded.
    upload: Option<Upload>,
}

impl ShardFolder {
    /// Starts an attempt of `shard` of the output `out` (created if missing).
    pub fn create(out: &Path, shard: Shard, props: WriterProperties) -> Result<ShardFolder, SinkError> {
        if let Ok(m) = fs::symlink_metadata(out)
            && !m.is_dir()
        {
            return Err(SinkError::NotADirectory { path: out.display().to_string() });
        }
        let root = root(out);
        fs::create_dir_all(&root).map_err(io("create", &root))?;
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = root.join(format!(".attempt-{}-{}-{nanos}", tag(shard), std::process::id()));
        fs::create_dir(&dir).map_err(io("create", &dir))?;
        let scratch = super::scratch_dir(&dir);
        fs::create_dir_all(&scratch).map_err(io("create", &scratch))?;
        Ok(ShardFolder { target: shard_dir(out, shard), dir, scratch, props, published: false, upload: None })
    }

    /// The attempt's scratch folder (spill), removed before it is published.
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// What the paths of the shard's manifest start with: the attempt's folder on an object
    /// store (`attempt-<id>/`), nothing in a folder.
    pub fn path_prefix(&self) -> String {
        self.upload.as_ref().map(|u| format!("{}/", u.attempt)).unwrap_or_default()
    }

    /// Writes `manifest` into the attempt's folder and renames the folder into the shard's
    /// place, replacing an earlier attempt (on an object store: uploads the attempt's files,
    /// then the manifest). Returns where the shard is, as shown to the user.
    pub fn publish(mut self, manifest: &[u8]) -> Result<String, SinkError> {
        fs::remove_dir_all(&self.scratch).map_err(io("remove", &self.scratch))?;
        // `_etl/` is empty once the scratch folder is gone.
        let etl = self.dir.join("_etl");
        if etl.is_dir() {
            fs::remove_dir(&etl).map_err(io("remove", &etl))?;
        }
        if let Some(u) = &self.upload {
            let mut files = Vec::new();
            walk(&self.dir, &mut files).map_err(io("list", &self.dir))?;
            let uploads: Vec<(PathBuf, String)> = files
                .into_iter()
                .map(|f| {
                    let rel = f.strip_prefix(&self.dir).unwrap_or(&f).to_string_lossy().replace('\\', "/");
                    (f, format!("{}{}/{rel}", u.shard_key, u.attempt))
                })
                .collect();
            let key = format!("{}{SHARD_MANIFEST}", u.shard_key);
            io_runtime().block_on(async {
                super::object::upload_all(&u.store, &u.url, &uploads).await?;
                super::faults::point("shard-uploaded");
                u.store
                    .put(&ObjPath::from(key.as_str()), PutPayload::from(manifest.to_vec()))
                    .await
                    .map_err(obj_err("write", &u.url, &key))
            })?;
            self.published = true;
            return Ok(u.url.url_of(&u.shard_key));
        }
        write_atomically(&self.dir.join(SHARD_MANIFEST), manifest)?;
        if self.target.exists() {
            let old = self.dir.with_extension("replaced");
            fs::rename(&self.target, &old).map_err(io("move aside", &self.target))?;
            fs::rename(&self.dir, &self.target).map_err(io("publish", &self.target))?;
            self.published = true;
            fs::remove_dir_all(&old).map_err(io("remove", &old))?;
        } else {
            fs::rename(&self.dir, &self.target).map_err(io("publish", &self.target))?;
            self.published = true;
        }
        Ok(self.target.display().to_string())
    }
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            walk(&e.path(), out)?;
        } else {
            out.push(e.path());
        }
    }
    Ok(())
}

impl PartSink for ShardFolder {
    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        PartWriter::create(&self.dir, table, part, schema, &self.props)
    }
}

impl Drop for ShardFolder {
    fn drop(&mut self) {
        // An object-store attempt's local folder goes with its scratch root.
        if !self.published && self.upload.is_none() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let s = Shard { index: 2, count: 4 };
        let out = Path::new("/o");
        assert_eq!(infer_path(out, s), Path::new("/o/_etl/shards/infer-00002-of-00004.json"));
        assert_eq!(shard_dir(out, s), Path::new("/o/_etl/shards/shard-00002-of-00004"));
        assert_eq!(parse_name("shard-00002-of-00004", "shard-", ""), Some(s));
        assert_eq!(parse_name("infer-00002-of-00004.json", "infer-", ".json"), Some(s));
        for bad in ["shard-2-of-4", "shard-00004-of-00004", "shard-00002-of-00004x", ".attempt-00002-of-00004-1-2"] {
            assert_eq!(parse_name(bad, "shard-", ""), None, "{bad}");
        }
    }

    /// Shards started at once into a new folder: each may find what another has created of
    /// `_etl/shards/` so far, and none of those states is a foreign folder (the Kubernetes recipe's
    /// test, `shard.rs`, once failed on an empty `_etl/`).
    #[test]
    fn a_folder_a_starting_shard_is_creating_is_not_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let area = ShardArea::Folder(out.clone());
        let refused = |area: &ShardArea| {
            matches!(area.refuse_uncommittable(Format::Parquet), Err(SinkError::NotEtlOutput { .. }))
        };
        assert!(!refused(&area), "no folder yet");
        for dir in ["", "_etl", "_etl/shards"] {
            fs::create_dir_all(out.join(dir)).unwrap();
            assert!(!refused(&area), "`{dir}` made so far");
        }
        assert!(holds_only_shards(&out).unwrap());
        fs::write(out.join("_etl/notes"), "x").unwrap();
        assert!(!holds_only_shards(&out).unwrap() && refused(&area), "a file of its own beside the shards");
        fs::remove_file(out.join("_etl/notes")).unwrap();
        fs::remove_dir(out.join("_etl/shards")).unwrap();
        fs::write(out.join("notes"), "x").unwrap();
        assert!(!holds_only_shards(&out).unwrap() && refused(&area), "a file beside `_etl/`");
    }

    #[test]
    fn an_attempt_replaces_the_previous_one_and_a_dropped_one_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let s = Shard { index: 0, count: 2 };
        let props = super::super::parquet::writer_properties(1024);
        let a = ShardFolder::create(&out, s, props.clone()).unwrap();
        fs::write(a.dir.join("first"), "1").unwrap();
        let dir = PathBuf::from(a.publish(b"{}").unwrap());
        assert!(dir.join("first").is_file() && dir.join(SHARD_MANIFEST).is_file());
        assert!(holds_only_shards(&out).unwrap());

        let b = ShardFolder::create(&out, s, props.clone()).unwrap();
        fs::write(b.dir.join("second"), "2").unwrap();
        b.publish(b"{}").unwrap();
        assert!(!dir.join("first").exists() && dir.join("second").is_file());

        let c = ShardFolder::create(&out, s, props).unwrap();
        drop(c);
        let l = list(&out).unwrap();
        assert_eq!(l.shards, vec![(s, dir.display().to_string())]);
        assert!(l.other.is_empty(), "{:?}", l.other);
    }

    #[test]
    fn a_prefix_holds_the_shards_whose_manifests_were_written_and_nothing_after_a_commit() {
        let url = ObjectUrl::parse("memory://shard-area/out").unwrap().unwrap();
        let area = ShardArea::open(&Target::Object(url), &AwsOptions::default()).unwrap();
        let ShardArea::Prefix { store, .. } = &area else { panic!("a prefix") };
        let (s0, s1) = (Shard { index: 0, count: 2 }, Shard { index: 1, count: 2 });
        area.write_infer(s0, b"{\"a\":1}").unwrap();
        assert_eq!(area.read_infer(s0).unwrap().as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(area.read_infer(s1).unwrap(), None);

        let a = area.attempt(s0, super::super::parquet::writer_properties(1024)).unwrap();
        fs::create_dir_all(a.dir.join("user")).unwrap();
        fs::write(a.dir.join("user/part-00000.parquet"), "rows").unwrap();
        let prefix = a.path_prefix();
        assert!(prefix.starts_with("attempt-") && prefix.ends_with('/'), "{prefix}");
        let local = a.dir.clone();
        assert_eq!(a.publish(b"{}").unwrap(), "memory://shard-area/out/_etl/shards/shard-00000-of-00002/");
        assert!(!local.exists(), "the local attempt goes once uploaded");
        // Shard 1's attempt uploaded its files but crashed before its manifest.
        let crashed = ObjPath::from("out/_etl/shards/shard-00001-of-00002/attempt-x/user/part-00000.parquet");
        let get = |k: &str| io_runtime().block_on(async { store.get(&ObjPath::from(k)).await?.bytes().await });
        io_runtime().block_on(store.put(&crashed, PutPayload::from_static(b"half"))).unwrap();

        let l = area.list().unwrap();
        assert_eq!(l.shards, vec![(s0, "out/_etl/shards/shard-00000-of-00002/".to_owned())]);
        assert_eq!(l.infer.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![s0]);
        assert_eq!(area.read_manifest(&l.shards[0].1).unwrap(), b"{}");
        let part = format!("out/_etl/shards/shard-00000-of-00002/{prefix}user/part-00000.parquet");
        assert_eq!(&get(&part).unwrap()[..], b"rows");

        area.remove_all().unwrap();
        let left = area.list().unwrap();
        assert!(left.shards.is_empty() && left.infer.is_empty());
        assert!(get(&part).is_err() && get(crashed.as_ref()).is_err());
    }
}

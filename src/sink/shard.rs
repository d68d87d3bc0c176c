//! Where the shards of a sharded run put their work before `etl commit` publishes it:
//! `OUT/_etl/shards/` inside the output folder, which no reader looks at (readers read only
//! what `_etl/run.json` lists, and a new output has none until the commit).
//!
//! ```text
//! OUT/_etl/shards/
//!   infer-00002-of-00004.json     shard 2's shapes (`--phase infer`)
//!   shard-00002-of-00004/         shard 2's part files and, written last, `shard.json`
//!   .attempt-00002-of-00004-<pid>-<nanos>/   an attempt still running, or one that crashed
//! ```
//!
//! An attempt writes into its own hidden folder and becomes `shard-I-of-N/` by a rename once
//! its manifest is in it, replacing the folder of any earlier attempt of the same shard: a
//! shard's folder is always one complete attempt, and a crashed attempt never reaches a commit.
//! The commit publishes the output without `_etl/shards/` (its staging folder never had it),
//! so the shards go with the output they were committed into.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::file::properties::WriterProperties;

use super::{PartSink, PartWriter, SinkError};
use crate::source::shard::Shard;

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
    root(out).join(format!("infer-{}.json", tag(shard)))
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

/// What `OUT/_etl/shards/` holds: finished shard folders and shape files, in shard order.
#[derive(Debug, Default)]
pub struct Listing {
    pub shards: Vec<(Shard, PathBuf)>,
    pub infer: Vec<(Shard, PathBuf)>,
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
                l.shards.push((s, path));
            } else {
                l.other.push(path);
            }
        } else if let Some(s) = parse_name(&name, "infer-", ".json") {
            l.infer.push((s, path));
        } else {
            l.other.push(path);
        }
    }
    l.shards.sort();
    l.infer.sort();
    l.other.sort();
    Ok(l)
}

/// `true` when `out` holds nothing but `_etl/shards/` (a new output whose shards have run).
pub fn holds_only_shards(out: &Path) -> io::Result<bool> {
    let names = |d: &Path| -> io::Result<Vec<String>> {
        fs::read_dir(d)?.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned())).collect()
    };
    Ok(names(out)? == ["_etl"] && names(&out.join("_etl"))? == ["shards"])
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

/// One attempt of one shard: part files written into a hidden folder, published as the shard's
/// folder by [`ShardFolder::publish`]. Dropped unpublished, the attempt's folder is removed.
pub struct ShardFolder {
    dir: PathBuf,
    target: PathBuf,
    scratch: PathBuf,
    props: WriterProperties,
    published: bool,
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
        Ok(ShardFolder { target: shard_dir(out, shard), dir, scratch, props, published: false })
    }

    /// The attempt's scratch folder (spill), removed before it is published.
    pub fn scratch(&self) -> &Path {
        &self.scratch
    }

    /// Writes `manifest` into the attempt's folder and renames the folder into the shard's
    /// place, replacing an earlier attempt. Returns the shard's folder.
    pub fn publish(mut self, manifest: &[u8]) -> Result<PathBuf, SinkError> {
        fs::remove_dir_all(&self.scratch).map_err(io("remove", &self.scratch))?;
        // `_etl/` is empty once the scratch folder is gone.
        let etl = self.dir.join("_etl");
        if etl.is_dir() {
            fs::remove_dir(&etl).map_err(io("remove", &etl))?;
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
        Ok(self.target.clone())
    }
}

impl PartSink for ShardFolder {
    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        PartWriter::create(&self.dir, table, part, schema, &self.props)
    }
}

impl Drop for ShardFolder {
    fn drop(&mut self) {
        if !self.published {
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

    #[test]
    fn an_attempt_replaces_the_previous_one_and_a_dropped_one_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let s = Shard { index: 0, count: 2 };
        let props = super::super::parquet::writer_properties(1024);
        let a = ShardFolder::create(&out, s, props.clone()).unwrap();
        fs::write(a.dir.join("first"), "1").unwrap();
        let dir = a.publish(b"{}").unwrap();
        assert!(dir.join("first").is_file() && dir.join(SHARD_MANIFEST).is_file());
        assert!(holds_only_shards(&out).unwrap());

        let b = ShardFolder::create(&out, s, props.clone()).unwrap();
        fs::write(b.dir.join("second"), "2").unwrap();
        b.publish(b"{}").unwrap();
        assert!(!dir.join("first").exists() && dir.join("second").is_file());

        let c = ShardFolder::create(&out, s, props).unwrap();
        drop(c);
        let l = list(&out).unwrap();
        assert_eq!(l.shards, vec![(s, dir)]);
        assert!(l.other.is_empty(), "{:?}", l.other);
    }
}

//! The local commit: a staged output folder published with one atomic directory exchange.
//!
//! A run writes into `.<name>.etl-staging-<pid>-<nanos>` beside the target. Commit swaps the
//! staging folder with the target in one `renameat2(RENAME_EXCHANGE)` (or a plain rename when
//! there is no target yet), then deletes the old output. A crash at any moment leaves either the
//! previous complete output or nothing at the target; stale staging folders of dead processes
//! are removed by the next run.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::file::properties::WriterProperties;

use super::{Committed, PartWriter, RunManifest, Sink, SinkError};
use crate::schema::TableSchema;

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
    /// the folder is then exactly the output to publish.
    pub(crate) fn finish(self, manifest: &RunManifest, schemas: &[TableSchema]) -> Result<Staging, SinkError> {
        fs::remove_dir_all(&self.scratch).map_err(io("remove", &self.scratch))?;
        super::manifest::write(self.staging.path(), manifest, schemas)
            .map_err(io("write the run manifest in", self.staging.path()))?;
        Ok(self.staging)
    }
}

impl Sink for LocalSink {
    fn scratch(&self) -> &Path {
        &self.scratch
    }

    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        PartWriter::create(self.staging.path(), table, part, schema, &self.props)
    }

    fn commit(
        self: Box<Self>,
        manifest: RunManifest,
        schemas: &[TableSchema],
    ) -> Result<(RunManifest, Committed), SinkError> {
        self.finish(&manifest, schemas)?.commit()?;
        Ok((manifest, Committed { run_id: None, files: 0, bytes: 0, deleted: 0 }))
    }
}

/// A staging folder; removed on drop unless committed.
#[derive(Debug)]
pub struct Staging {
    target: PathBuf,
    dir: PathBuf,
    done: bool,
}

/// Marks a folder as etl output.
pub const RUN_REPORT: &str = super::manifest::RUN_MANIFEST;

impl Staging {
    /// Checks the target and creates a fresh staging folder beside it.
    pub fn create(target: &Path, overwrite: bool) -> Result<Staging, SinkError> {
        match fs::symlink_metadata(target) {
            Ok(m) if !m.is_dir() => return Err(SinkError::NotADirectory { path: target.display().to_string() }),
            Ok(_) => {
                let is_etl = target.join(RUN_REPORT).is_file();
                let empty = fs::read_dir(target).map_err(io("read", target))?.next().is_none();
                if !is_etl && !empty && !overwrite {
                    return Err(SinkError::NotEtlOutput { path: target.display().to_string() });
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("inspect", target)(e)),
        }
        let parent = parent_of(target);
        fs::create_dir_all(&parent).map_err(io("create", &parent))?;
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
        remove_stale(&parent, &name);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let dir = parent.join(format!(".{name}.etl-staging-{}-{nanos}", std::process::id()));
        fs::create_dir(&dir).map_err(io("create", &dir))?;
        Ok(Staging { target: target.to_owned(), dir, done: false })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Publishes the staged folder as the target.
    pub fn commit(mut self) -> Result<(), SinkError> {
        sync_tree(&self.dir)?;
        let parent = parent_of(&self.target);
        if fs::symlink_metadata(&self.target).is_ok() {
            exchange(&self.dir, &self.target).map_err(io("publish", &self.target))?;
            // The old output now sits at the staging path.
            sync_dir(&parent)?;
            self.done = true;
            fs::remove_dir_all(&self.dir).map_err(io("remove the previous output at", &self.dir))?;
        } else {
            fs::rename(&self.dir, &self.target).map_err(io("publish", &self.target))?;
            self.done = true;
            sync_dir(&parent)?;
        }
        Ok(())
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

/// Removes `.<name>.etl-staging-<pid>-*` folders whose process is gone.
fn remove_stale(parent: &Path, name: &str) {
    let prefix = format!(".{name}.etl-staging-");
    let Ok(entries) = fs::read_dir(parent) else { return };
    for e in entries.flatten() {
        let file_name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = file_name.strip_prefix(&prefix) else { continue };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        let alive = pid.is_some_and(|p| Path::new(&format!("/proc/{p}")).exists() && p != std::process::id());
        if !alive {
            tracing::info!(path = %e.path().display(), "removing stale staging folder");
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ca = CString::new(a.as_os_str().as_bytes())?;
    let cb = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both pointers are valid NUL-terminated strings that outlive the call; renameat2
    // reads them and touches no other memory.
    let rc =
        unsafe { libc::renameat2(libc::AT_FDCWD, ca.as_ptr(), libc::AT_FDCWD, cb.as_ptr(), libc::RENAME_EXCHANGE) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    // Filesystems without RENAME_EXCHANGE: fall back to two renames (a short window without output).
    if matches!(err.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
        return exchange_fallback(a, b);
    }
    Err(err)
}

#[cfg(not(target_os = "linux"))]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    exchange_fallback(a, b)
}

fn exchange_fallback(staged: &Path, target: &Path) -> io::Result<()> {
    let mut old = staged.as_os_str().to_owned();
    old.push(".old");
    let old = PathBuf::from(old);
    fs::rename(target, &old)?;
    fs::rename(staged, target)?;
    fs::rename(&old, staged)
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
    use super::*;

    #[test]
    fn publish_replace_and_refuse() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let s = Staging::create(&out, false).unwrap();
        fs::create_dir_all(s.path().join("_etl")).unwrap();
        fs::write(s.path().join(RUN_REPORT), "1").unwrap();
        s.commit().unwrap();
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "1");

        let s = Staging::create(&out, false).unwrap();
        fs::create_dir_all(s.path().join("_etl")).unwrap();
        fs::write(s.path().join(RUN_REPORT), "2").unwrap();
        s.commit().unwrap();
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "2");
        let leftovers: Vec<_> = fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");

        // A dropped (failed) run leaves the previous output alone.
        let s = Staging::create(&out, false).unwrap();
        fs::write(s.path().join("junk"), "x").unwrap();
        drop(s);
        assert_eq!(fs::read_to_string(out.join(RUN_REPORT)).unwrap(), "2");

        let other = tmp.path().join("other");
        fs::create_dir(&other).unwrap();
        fs::write(other.join("precious.txt"), "x").unwrap();
        assert!(matches!(Staging::create(&other, false), Err(SinkError::NotEtlOutput { .. })));
        assert!(Staging::create(&other, true).is_ok());
    }

    #[test]
    fn stale_staging_of_dead_processes_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let stale = tmp.path().join(".out.etl-staging-999999999-1");
        fs::create_dir(&stale).unwrap();
        let _s = Staging::create(&tmp.path().join("out"), false).unwrap();
        assert!(!stale.exists());
    }
}

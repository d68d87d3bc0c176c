//! The object-store commit (`--out s3://bucket/prefix`, or `memory://…`).
//!
//! S3 has no atomic folder rename, so the commit record is the run report itself:
//!
//! 1. The output is first written and checked locally, exactly as for a local `--out`.
//! 2. Each data file is uploaded under a name unique to the run
//!    (`<table>/part-00000-<run-id>.parquet`), and the schemas and a copy of the report under
//!    `_etl/runs/<run-id>/`.
//! 3. `_etl/run.json`, listing every file of the run, is written last. One PUT of one object is
//!    atomic in S3, so readers (`etl sql --data s3://…`) see the previous run or this one, never a
//!    mix, and files of a run that crashed before this step are never read.
//! 4. Then objects that belong to neither this run nor the one it replaced are deleted: files
//!    of crashed runs and of older runs. The replaced run's files are kept for one more run so
//!    that queries already reading them can finish. Only objects named the way etl names them
//!    are ever deleted.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::file::properties::WriterProperties;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};

use super::local::LocalSink;
use super::manifest::{RUN_MANIFEST, RunManifest};
use super::{Committed, PartWriter, Sink, SinkError};
use crate::aws::AwsOptions;
use crate::schema::TableSchema;
use crate::store::{self, ObjectUrl, StoreError, io_runtime};

/// Uploads in flight at once.
const CONCURRENT_UPLOADS: usize = 4;
/// Files larger than this are sent as multipart uploads.
const MULTIPART_BYTES: u64 = 16 * 1024 * 1024;

/// The sink for an object-store `--out`: the run is built and checked in a local scratch folder
/// (under the system temp folder, removed however the run ends), then published.
pub struct ObjectSink {
    local: LocalSink,
    url: ObjectUrl,
    aws: AwsOptions,
    overwrite: bool,
    root: ScratchRoot,
}

/// The scratch root of an object-store run, removed however the run ends.
struct ScratchRoot(PathBuf);

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
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
        let root = ScratchRoot(scratch_root());
        let local = LocalSink::create(&root.0.join("out"), false, props)?;
        Ok(ObjectSink { local, url, aws, overwrite, root })
    }
}

impl Sink for ObjectSink {
    fn scratch(&self) -> &Path {
        self.local.scratch()
    }

    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        self.local.part(table, part, schema)
    }

    fn commit(
        self: Box<Self>,
        manifest: RunManifest,
        schemas: &[TableSchema],
    ) -> Result<(RunManifest, Committed), SinkError> {
        let ObjectSink { local, url, aws, overwrite, root } = *self;
        let staging = local.finish(&manifest, schemas)?;
        let result = io_runtime().block_on(publish(staging.path(), manifest, &url, &aws, overwrite));
        drop(staging);
        drop(root);
        let p = result?;
        tracing::info!(run_id = %p.run_id, files = p.files, bytes = p.bytes, deleted = p.deleted, "published");
        Ok((p.manifest, Committed { run_id: Some(p.run_id), files: p.files, bytes: p.bytes, deleted: p.deleted }))
    }
}

/// A fresh scratch root under the system temp folder; removes those of dead processes.
fn scratch_root() -> PathBuf {
    let tmp = std::env::temp_dir();
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid =
                name.strip_prefix(SCRATCH_PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && pid != std::process::id()
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    tmp.join(format!("{SCRATCH_PREFIX}{}-{nanos}", std::process::id()))
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

/// A run id: UTC time to the millisecond, then the process id and a few clock bits, so ids
/// sort by time and two runs never share one.
pub fn new_run_id() -> String {
    let now = chrono::Utc::now();
    let nanos = now.timestamp_subsec_nanos();
    format!("{}-{:x}{:05x}", now.format("%Y%m%dT%H%M%S%3fZ"), std::process::id(), nanos & 0xfffff)
}

/// The run id in an etl-written name, `part-00000-<run-id>.parquet`, if it is one.
fn run_id_of_data_file(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".parquet")?;
    let rest = stem.strip_prefix("part-")?;
    let (digits, id) = rest.split_once('-')?;
    (digits.len() == 5 && digits.bytes().all(|b| b.is_ascii_digit()) && id.len() > 16 && id.contains('T')).then_some(id)
}

fn obj_err(action: &'static str, url: &ObjectUrl, key: &str) -> impl FnOnce(object_store::Error) -> SinkError {
    let url = url.url_of(key);
    move |e| SinkError::Store(StoreError::object(action, &url, &e))
}

/// Uploads the finished output in `local` to `url`; `_etl/run.json` last.
async fn publish(
    local: &Path,
    mut report: RunManifest,
    url: &ObjectUrl,
    aws: &AwsOptions,
    overwrite: bool,
) -> Result<Published, SinkError> {
    let store: Arc<dyn ObjectStore> = store::open(url, aws).await?;
    let prefix = url.dir_prefix();
    let run_key = format!("{prefix}{RUN_MANIFEST}");

    // The run being replaced, if any.
    let previous: Option<RunManifest> = match store.get(&ObjPath::from(run_key.as_str())).await {
        Ok(r) => {
            let bytes = r.bytes().await.map_err(obj_err("read", url, &run_key))?;
            RunManifest::parse(&url.url_of(&run_key), &bytes).ok()
        }
        Err(object_store::Error::NotFound { .. }) => {
            if !overwrite {
                let p = ObjPath::from(prefix.as_str());
                let mut listing = store.list(Some(&p));
                if let Some(first) = listing.next().await {
                    first.map_err(obj_err("list", url, &prefix))?;
                    return Err(SinkError::NotEtlPrefix { url: url.to_string() });
                }
            }
            None
        }
        Err(e) => return Err(obj_err("read", url, &run_key)(e)),
    };
    let previous_id = previous.and_then(|m| m.run_id);

    let run_id = new_run_id();

    // Data files: renamed with the run id, uploaded concurrently.
    let mut uploads: Vec<(PathBuf, String)> = Vec::new();
    for t in &mut report.tables {
        for f in &mut t.files {
            let renamed = match f.path.strip_suffix(".parquet") {
                Some(stem) => format!("{stem}-{run_id}.parquet"),
                None => format!("{}-{run_id}", f.path),
            };
            uploads.push((local.join(&f.path), format!("{prefix}{renamed}")));
            f.path = renamed;
        }
    }
    let schema_dir = local.join("_etl/schema");
    let mut schemas = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&schema_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            uploads.push((e.path(), format!("{prefix}_etl/runs/{run_id}/schema/{name}")));
            schemas.push((e.path(), name));
        }
    }
    let bytes: u64 = uploads.iter().filter_map(|(p, _)| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    let files = uploads.len();
    futures::stream::iter(uploads.into_iter().map(|(path, key)| {
        let store = store.clone();
        async move { upload(&store, &path, &key, url).await }
    }))
    .buffer_unordered(CONCURRENT_UPLOADS)
    .try_collect::<Vec<()>>()
    .await?;

    // The commit record: a copy under the run, then `_etl/run.json`, last.
    report.run_id = Some(run_id.clone());
    report.published_to = Some(url.to_string());
    report.replaces_run_id = Some(previous_id.clone());
    let text = report.to_bytes();
    let copy = format!("{prefix}_etl/runs/{run_id}/run.json");
    store
        .put(&ObjPath::from(copy.as_str()), PutPayload::from(text.clone()))
        .await
        .map_err(obj_err("write", url, &copy))?;
    store
        .put(&ObjPath::from(run_key.as_str()), PutPayload::from(text))
        .await
        .map_err(obj_err("commit", url, &run_key))?;
    tracing::info!(run_id = %run_id, url = %url, "committed");

    // Informational copies at the local layout's places (readers use `_etl/run.json`).
    for (path, name) in schemas {
        let key = format!("{prefix}_etl/schema/{name}");
        upload(&store, &path, &key, url).await?;
    }

    let deleted = cleanup(&store, url, &prefix, &run_id, previous_id.as_deref()).await?;
    Ok(Published { manifest: report, run_id, files, bytes, deleted })
}

async fn upload(store: &Arc<dyn ObjectStore>, path: &Path, key: &str, url: &ObjectUrl) -> Result<(), SinkError> {
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

/// Deletes etl-named objects of runs other than `current` and `previous`.
async fn cleanup(
    store: &Arc<dyn ObjectStore>,
    url: &ObjectUrl,
    prefix: &str,
    current: &str,
    previous: Option<&str>,
) -> Result<usize, SinkError> {
    let p = ObjPath::from(prefix);
    let keep = |id: &str| id == current || Some(id) == previous;
    let runs_prefix = format!("{prefix}_etl/runs/");
    let mut doomed = Vec::new();
    let mut listing = store.list(Some(&p));
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(obj_err("list", url, prefix))?;
        let key = meta.location.to_string();
        let stale = if let Some(rest) = key.strip_prefix(&runs_prefix) {
            rest.split('/').next().is_some_and(|id| !keep(id))
        } else {
            meta.location.filename().and_then(run_id_of_data_file).is_some_and(|id| !keep(id))
        };
        if stale {
            doomed.push(meta.location);
        }
    }
    let n = doomed.len();
    for key in doomed {
        match store.delete(&key).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(obj_err("delete", url, key.as_ref())(e)),
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
        let later = new_run_id();
        assert!(later >= id, "run ids sort by time");
    }
}

//! Publishing a finished output to S3 (`--out s3://bucket/prefix`).
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

use futures::{StreamExt as _, TryStreamExt as _};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload};
use serde_json::Value;

use crate::aws::AwsOptions;
use crate::aws::s3::{self, S3Url, io_runtime};
use crate::source::object::error_text;

/// Uploads in flight at once.
const CONCURRENT_UPLOADS: usize = 4;
/// Files larger than this are sent as multipart uploads.
const MULTIPART_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("cannot {action} `{url}`: {message}")]
    Object { action: &'static str, url: String, message: String },
    #[error("`{url}` holds objects but no `_etl/run.json`: it is not an etl output")]
    NotEtlOutput { url: String },
    #[error("`{path}`: {message}")]
    Local { path: String, message: String },
}

impl PublishError {
    pub fn hint(&self) -> Option<String> {
        match self {
            PublishError::Object { message, .. } => Some(crate::source::object_hint(message)),
            PublishError::NotEtlOutput { .. } => Some(
                "choose an empty prefix, or pass `--overwrite` to write beside what is there (etl never deletes objects it did not write)".into(),
            ),
            PublishError::Local { .. } => None,
        }
    }
}

/// What a publish did.
#[derive(Debug, Clone)]
pub struct Published {
    pub run_id: String,
    pub files: usize,
    pub bytes: u64,
    pub deleted: usize,
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

fn obj_err(action: &'static str, url: &S3Url, key: &str) -> impl FnOnce(object_store::Error) -> PublishError {
    let url = url.url_of(key);
    move |e| PublishError::Object { action, url, message: error_text(&e) }
}

/// Uploads the finished output in `local` to `url`; `_etl/run.json` last.
pub fn publish(local: &Path, url: &S3Url, aws: &AwsOptions, overwrite: bool) -> Result<Published, PublishError> {
    io_runtime().block_on(publish_async(local, url, aws, overwrite))
}

async fn publish_async(
    local: &Path,
    url: &S3Url,
    aws: &AwsOptions,
    overwrite: bool,
) -> Result<Published, PublishError> {
    let store: Arc<dyn ObjectStore> = s3::store(&url.bucket, aws).await.map_err(|message| PublishError::Object {
        action: "connect to",
        url: url.to_string(),
        message,
    })?;
    let prefix = url.dir_prefix();
    let run_key = format!("{prefix}_etl/run.json");

    // The run being replaced, if any.
    let previous: Option<Value> = match store.get(&ObjPath::from(run_key.as_str())).await {
        Ok(r) => {
            let bytes = r.bytes().await.map_err(obj_err("read", url, &run_key))?;
            serde_json::from_slice(&bytes).ok()
        }
        Err(object_store::Error::NotFound { .. }) => {
            if !overwrite {
                let p = ObjPath::from(prefix.as_str());
                let mut listing = store.list(Some(&p));
                if let Some(first) = listing.next().await {
                    first.map_err(obj_err("list", url, &prefix))?;
                    return Err(PublishError::NotEtlOutput { url: url.to_string() });
                }
            }
            None
        }
        Err(e) => return Err(obj_err("read", url, &run_key)(e)),
    };
    let previous_id = previous.as_ref().and_then(|v| v.get("run_id")).and_then(Value::as_str).map(str::to_owned);

    let local_err = |p: &Path| {
        let path = p.display().to_string();
        move |e: std::io::Error| PublishError::Local { path, message: e.to_string() }
    };
    let run_path = local.join("_etl/run.json");
    let mut report: Value = serde_json::from_slice(&std::fs::read(&run_path).map_err(local_err(&run_path))?)
        .map_err(|e| PublishError::Local { path: run_path.display().to_string(), message: e.to_string() })?;
    let run_id = new_run_id();

    // Data files: renamed with the run id, uploaded concurrently.
    let mut uploads: Vec<(PathBuf, String)> = Vec::new();
    if let Some(tables) = report.get_mut("tables").and_then(Value::as_array_mut) {
        for t in tables {
            for f in t.get_mut("files").and_then(Value::as_array_mut).into_iter().flatten() {
                let Some(rel) = f.get("path").and_then(Value::as_str).map(str::to_owned) else { continue };
                let renamed = match rel.strip_suffix(".parquet") {
                    Some(stem) => format!("{stem}-{run_id}.parquet"),
                    None => format!("{rel}-{run_id}"),
                };
                uploads.push((local.join(&rel), format!("{prefix}{renamed}")));
                f["path"] = Value::String(renamed);
            }
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
    if let Some(o) = report.as_object_mut() {
        o.insert("run_id".into(), Value::String(run_id.clone()));
        o.insert("published_to".into(), Value::String(url.to_string()));
        o.insert("replaces_run_id".into(), previous_id.clone().map(Value::String).unwrap_or(Value::Null));
    }
    let text = serde_json::to_vec_pretty(&report).unwrap_or_default();
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
    Ok(Published { run_id, files, bytes, deleted })
}

async fn upload(store: &Arc<dyn ObjectStore>, path: &Path, key: &str, url: &S3Url) -> Result<(), PublishError> {
    let local_err =
        |e: std::io::Error| PublishError::Local { path: path.display().to_string(), message: e.to_string() };
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
    done.map_err(|e| PublishError::Object { action: "write", url: url.url_of(key), message: e.to_string() })
}

/// Deletes etl-named objects of runs other than `current` and `previous`.
async fn cleanup(
    store: &Arc<dyn ObjectStore>,
    url: &S3Url,
    prefix: &str,
    current: &str,
    previous: Option<&str>,
) -> Result<usize, PublishError> {
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

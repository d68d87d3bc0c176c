//! Where a Delta output's tables are: a local folder, or a prefix of an object store (`s3://`,
//! `memory://`). One type for the writer ([`super::DeltaSink`], [`super::object`]) and the reader
//! (`etl sql`), so both open a table the same way.
//!
//! On an object store a table is opened through deltalake with etl's own store for the bucket
//! (credentials from `aws-config`, retries, the endpoint), never deltalake's. Its commits go
//! through deltalake's default log store, which writes `_delta_log/<version>.json` with a
//! conditional PUT (`If-None-Match: *`): two writers of one version cannot both win, with no lock
//! table (S3 honours it since 2024, as do MinIO, R2, moto and the in-memory store).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

use datafusion::arrow::datatypes::Schema;
use deltalake::logstore::{LogStore, LogStoreFactory, LogStoreRef, ObjectStoreRef, StorageConfig, default_logstore};
use deltalake::{DeltaResult, DeltaTable, DeltaTableBuilder, DeltaTableError};
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt as _};

use super::DELTA_LOG;
use crate::sink::SinkError;
use crate::store::{ObjectUrl, StoreError};

/// A Delta output's folder or prefix, or one table's.
#[derive(Clone)]
pub enum Home {
    Dir(PathBuf),
    Object { store: Arc<dyn ObjectStore>, url: ObjectUrl },
}

impl std::fmt::Debug for Home {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

/// deltalake's default log store for `s3://` tables too: commits are conditional PUTs.
struct ConditionalPutLogStore;

impl LogStoreFactory for ConditionalPutLogStore {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &url::Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(prefixed_store, root_store, location, options))
    }
}

/// Registers the log store for `s3://` (deltalake registers `file://` and `memory://` itself).
fn register_log_stores() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Ok(s3) = url::Url::parse("s3://") {
            deltalake::logstore::logstore_factories().insert(s3, Arc::new(ConditionalPutLogStore));
        }
    });
}

impl Home {
    /// The table `name` of this output.
    pub fn join(&self, name: &str) -> Home {
        match self {
            Home::Dir(d) => Home::Dir(d.join(name)),
            Home::Object { store, url } => Home::Object {
                store: store.clone(),
                url: ObjectUrl { key: format!("{}{name}", url.dir_prefix()), ..url.clone() },
            },
        }
    }

    /// As a user names it: the folder, or the URL.
    pub fn shown(&self) -> String {
        match self {
            Home::Dir(d) => d.display().to_string(),
            Home::Object { url, .. } => url.to_string(),
        }
    }

    /// The key of `rel` inside this prefix (object stores).
    pub(in crate::sink) fn key(url: &ObjectUrl, rel: &str) -> String {
        format!("{}{rel}", url.dir_prefix())
    }

    /// The table's URL as deltalake takes it (a folder: `file:///…/`, a prefix: `s3://b/p/`).
    pub fn table_url(&self) -> Result<url::Url, DeltaTableError> {
        match self {
            Home::Dir(d) => {
                let abs = std::fs::canonicalize(d).map_err(|e| DeltaTableError::Generic(e.to_string()))?;
                url::Url::from_directory_path(&abs)
                    .map_err(|()| DeltaTableError::Generic(format!("`{}` has no file URL", abs.display())))
            }
            Home::Object { url, .. } => {
                let text = format!("{}{}/{}", url.scheme.prefix(), url.bucket, url.dir_prefix());
                url::Url::parse(&text).map_err(|e| DeltaTableError::Generic(format!("`{text}`: {e}")))
            }
        }
    }

    fn builder(&self) -> Result<DeltaTableBuilder, DeltaTableError> {
        let url = self.table_url()?;
        let builder = DeltaTableBuilder::from_url(url.clone())?;
        Ok(match self {
            Home::Dir(_) => builder,
            Home::Object { store, .. } => {
                register_log_stores();
                builder.with_storage_backend(store.clone(), url)
            }
        })
    }

    /// Whether a Delta table is here: its `_delta_log/` holds a commit or a checkpoint. A log
    /// with neither is the first commit of a table killed before it landed (the folder made, a
    /// temporary commit file written, nothing in place): no table yet, which the next run
    /// creates (deltalake refuses to open it). A local log that cannot be read counts as a
    /// table, so that opening it says why.
    pub async fn is_table(&self) -> Result<bool, StoreError> {
        match self {
            Home::Dir(d) => Ok(match std::fs::read_dir(d.join(DELTA_LOG)) {
                Ok(entries) => entries.flatten().any(|e| is_log_entry(&e.file_name().to_string_lossy())),
                Err(e) => e.kind() != std::io::ErrorKind::NotFound,
            }),
            Home::Object { store, url } => {
                use futures::StreamExt as _;
                let key = Home::key(url, &format!("{DELTA_LOG}/"));
                // Listed in key order: a table's first commit or checkpoint comes first.
                let mut listed = store.list(Some(&ObjPath::from(key.as_str())));
                while let Some(entry) = listed.next().await {
                    match entry {
                        Ok(meta) if meta.location.filename().is_some_and(is_log_entry) => return Ok(true),
                        Ok(_) => {}
                        Err(e) => return Err(StoreError::object("list", &url.url_of(&key), &e)),
                    }
                }
                Ok(false)
            }
        }
    }

    /// The table here at `version`, or at its latest version.
    pub async fn open(&self, version: Option<u64>) -> Result<DeltaTable, DeltaTableError> {
        let mut builder = self.builder()?;
        if let Some(v) = version {
            builder = builder.with_version(v as _);
        }
        builder.load().await
    }

    /// The log store of the table here (created by the first commit), for a commit.
    pub fn log_store(&self) -> Result<LogStoreRef, DeltaTableError> {
        self.builder()?.build_storage()
    }

    /// The bytes of `rel`, a file of the table (`_delta_log/…` or a data file); `None` when absent.
    pub async fn read(&self, rel: &str) -> Result<Option<bytes::Bytes>, SinkError> {
        match self {
            Home::Dir(d) => {
                let path = d.join(rel);
                match tokio::fs::read(&path).await {
                    Ok(b) => Ok(Some(b.into())),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(SinkError::io("read", &path)(e)),
                }
            }
            Home::Object { store, url } => {
                let key = Home::key(url, rel);
                crate::store::get_if_exists(store.as_ref(), &ObjPath::from(key.as_str()))
                    .await
                    .map_err(|e| SinkError::Store(StoreError::object("read", &url.url_of(&key), &e)))
            }
        }
    }

    /// A local file holding the table's data file `rel`: the file itself in a folder, else a copy
    /// downloaded into `scratch` (the caller removes it with [`Home::done_with`]).
    pub fn local_copy(&self, rel: &str, scratch: &Path) -> Result<PathBuf, SinkError> {
        match self {
            Home::Dir(d) => Ok(d.join(rel)),
            Home::Object { store, url } => {
                let key = Home::key(url, rel);
                let to = scratch.join(format!("fetched-{}", rel.replace('/', "_")));
                let shown = url.url_of(&key);
                crate::sink::object::download_blocking(store, &ObjPath::from(key.as_str()), &to, &shown)?;
                Ok(to)
            }
        }
    }

    /// Removes a copy [`Home::local_copy`] made (never the table's own file).
    pub fn done_with(&self, copy: &Path) {
        if matches!(self, Home::Object { .. }) {
            let _ = std::fs::remove_file(copy);
        }
    }

    /// Where new data files of this table are written before [`Home::place`]: the table's folder
    /// itself, or `scratch` for an object store.
    pub fn write_dir<'a>(&'a self, scratch: &'a Path) -> &'a Path {
        match self {
            Home::Dir(d) => d,
            Home::Object { .. } => scratch,
        }
    }

    /// Puts the finished local file `from` into the table as `name`: renamed into the folder
    /// (synced first; the caller syncs the folder), or uploaded and the local file removed.
    pub fn place(&self, from: &Path, name: &str) -> Result<(), SinkError> {
        match self {
            Home::Dir(d) => {
                let to = d.join(name);
                // A file written in place was synced when it was closed.
                if from != to {
                    super::sync(from)?;
                    std::fs::rename(from, &to).map_err(SinkError::io("move a data file into", d))?;
                }
                Ok(())
            }
            Home::Object { store, url } => {
                let key = Home::key(url, name);
                crate::store::io_runtime().block_on(crate::sink::object::upload(store, from, &key, url))?;
                let _ = std::fs::remove_file(from);
                Ok(())
            }
        }
    }

    /// The Arrow schema in the footer of the object `key` (a key of the output's own store: a
    /// sharded run's part file). Only object stores hold such files.
    #[allow(deprecated)] // `ParquetObjectReader` reads only the footer, all this needs.
    pub fn stored_schema(&self, key: &str, table: &str) -> Result<Schema, SinkError> {
        use datafusion::parquet::arrow::async_reader::{ParquetObjectReader, ParquetRecordBatchStreamBuilder};
        let (store, url) = self.stored_store()?;
        crate::store::io_runtime().block_on(async {
            let reader = ParquetObjectReader::new(store.clone(), ObjPath::from(key));
            let builder = ParquetRecordBatchStreamBuilder::new(reader).await.map_err(|source| SinkError::Part {
                table: table.to_owned(),
                path: url.url_of(key),
                source,
            })?;
            Ok(builder.schema().as_ref().clone())
        })
    }

    /// Copies the objects `files` (`(from, name, bytes)`: a key of the output's own store, the
    /// file's name in the table, its size) into the table, server-side.
    pub fn place_stored(&self, files: &[(String, String, u64)]) -> Result<(), SinkError> {
        if files.is_empty() {
            return Ok(());
        }
        let (store, url) = self.stored_store()?;
        let copies: Vec<crate::sink::object::ObjectCopy> = files
            .iter()
            .map(|(from, name, bytes)| crate::sink::object::ObjectCopy {
                from: from.clone(),
                to: Home::key(url, name),
                bytes: *bytes,
            })
            .collect();
        crate::store::io_runtime().block_on(crate::sink::object::copy_all(store, url, &copies))
    }

    /// The store that holds stored files: only an object store does.
    fn stored_store(&self) -> Result<(&Arc<dyn ObjectStore>, &ObjectUrl), SinkError> {
        match self {
            Home::Object { store, url } => Ok((store, url)),
            Home::Dir(_) => Err(SinkError::Io {
                action: "copy into",
                path: self.shown(),
                source: std::io::Error::other("a folder holds no stored files"),
            }),
        }
    }

    /// Makes the placed files durable before a commit names them (a folder's entries; an
    /// object store's PUTs already are).
    pub fn settle(&self) -> Result<(), SinkError> {
        match self {
            Home::Dir(d) => super::sync(d),
            Home::Object { .. } => Ok(()),
        }
    }

    /// Removes the table's data files named with `tag` (one run's) that `listed` (the files of
    /// its latest version) does not hold.
    pub async fn remove_unlisted(
        &self,
        tag: &str,
        listed: &std::collections::HashSet<String>,
    ) -> Result<(), SinkError> {
        let ours = |name: &str| name.ends_with(&format!("-{tag}.parquet")) && !listed.contains(name);
        match self {
            Home::Dir(d) => {
                for e in std::fs::read_dir(d).map_err(SinkError::io("list", d))?.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if ours(&name) {
                        std::fs::remove_file(e.path()).map_err(SinkError::io("remove", &e.path()))?;
                    }
                }
                Ok(())
            }
            Home::Object { store, url } => {
                use futures::TryStreamExt as _;
                let prefix = url.dir_prefix();
                let metas: Vec<object_store::ObjectMeta> = store
                    .list(Some(&ObjPath::from(prefix.as_str())))
                    .try_collect()
                    .await
                    .map_err(|e| SinkError::Store(StoreError::object("list", &url.to_string(), &e)))?;
                for meta in metas {
                    let key = meta.location.to_string();
                    let name = key.strip_prefix(&prefix).unwrap_or(&key);
                    if !name.contains('/') && ours(name) {
                        store
                            .delete(&meta.location)
                            .await
                            .map_err(|e| SinkError::Store(StoreError::object("delete", &url.url_of(&key), &e)))?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Creates the table's folder (object stores have none).
    pub fn create(&self) -> Result<(), SinkError> {
        match self {
            Home::Dir(d) => std::fs::create_dir_all(d).map_err(SinkError::io("create", d)),
            Home::Object { .. } => Ok(()),
        }
    }
}

/// A file of `_delta_log/` that makes a table: a commit (`<20 digits>.json`), a checkpoint
/// (`<20 digits>.checkpoint….parquet`) or `_last_checkpoint`.
fn is_log_entry(name: &str) -> bool {
    let version = name.bytes().take_while(u8::is_ascii_digit).count() == 20;
    name == "_last_checkpoint" || (version && (name.ends_with(".json") || name[20..].starts_with(".checkpoint")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Scheme;

    #[test]
    fn a_log_without_a_commit_or_checkpoint_is_no_table() {
        for name in [
            "00000000000000000000.json",
            "00000000000000000012.json",
            "00000000000000000010.checkpoint.parquet",
            "00000000000000000010.checkpoint.0000000001.0000000002.parquet",
            "_last_checkpoint",
        ] {
            assert!(is_log_entry(name), "{name}");
        }
        for name in
            ["_commit_5b7c.json.tmp", ".00000000000000000000.json.tmp", "0000.json", "00000000000000000000.crc", ""]
        {
            assert!(!is_log_entry(name), "{name}");
        }
        let dir = tempfile::tempdir().unwrap();
        let home = Home::Dir(dir.path().to_owned());
        let rt = crate::store::io_runtime();
        assert!(!rt.block_on(home.is_table()).unwrap(), "no `_delta_log/`");
        std::fs::create_dir(dir.path().join(DELTA_LOG)).unwrap();
        assert!(!rt.block_on(home.is_table()).unwrap(), "an empty `_delta_log/`");
        std::fs::write(dir.path().join(DELTA_LOG).join("_commit_5b7c.json.tmp"), b"{}").unwrap();
        assert!(!rt.block_on(home.is_table()).unwrap(), "a temporary commit file only");
        std::fs::write(dir.path().join(DELTA_LOG).join("00000000000000000000.json"), b"{}").unwrap();
        assert!(rt.block_on(home.is_table()).unwrap(), "a commit");
        // The same on an object store, where a temporary commit object sorts after the commits.
        let store = crate::store::memory::store("is-table");
        let url = ObjectUrl { scheme: Scheme::Memory, bucket: "is-table".into(), key: "out/".into() };
        let table = Home::Object { store: store.clone(), url }.join("user");
        assert!(!rt.block_on(table.is_table()).unwrap(), "nothing there");
        let put = |key: &str| {
            let payload = object_store::PutPayload::from_static(b"{}");
            rt.block_on(store.put(&ObjPath::from(key), payload)).unwrap();
        };
        put("out/user/_delta_log/_commit_5b7c.json.tmp");
        assert!(!rt.block_on(table.is_table()).unwrap(), "a temporary commit object only");
        put("out/user/_delta_log/00000000000000000000.json");
        assert!(rt.block_on(table.is_table()).unwrap(), "a commit");
    }

    #[test]
    fn tables_of_an_object_output_are_prefixes_of_it() {
        let out = Home::Object {
            store: crate::store::memory::store("home-join"),
            url: ObjectUrl { scheme: Scheme::Memory, bucket: "home-join".into(), key: "lake/shop/".into() },
        };
        let user = out.join("user");
        assert_eq!(user.shown(), "memory://home-join/lake/shop/user");
        assert_eq!(user.table_url().unwrap().as_str(), "memory://home-join/lake/shop/user/");
        let root = Home::Object {
            store: crate::store::memory::store("home-join"),
            url: ObjectUrl { scheme: Scheme::S3, bucket: "b".into(), key: String::new() },
        };
        assert_eq!(root.join("t").table_url().unwrap().as_str(), "s3://b/t/");
    }
}

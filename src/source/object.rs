//! Inputs in object storage (`s3://bucket/prefix`, `memory://…`), read through `object_store`.
//!
//! Accepts the same forms as local paths: a prefix holding `AWSDynamoDB/`, an
//! `AWSDynamoDB/<ExportId>/` prefix, a `manifest-summary.json` key, a prefix of bare data files,
//! or one data file's key. Manifests are followed exactly as for local folders (the shared
//! [`super::resolve_export`]); the export's data prefix is listed once for object sizes, and only
//! keys the manifest names are read. Data files are streamed by [`ObjectReader`]: a task on the
//! I/O runtime fetches the object and hands chunks to the decoder thread through a bounded
//! channel, resuming from the last byte received (pinned to the object's ETag) when a stream
//! breaks mid-way.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use object_store::path::Path as ObjPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt as _};

use super::manifest::{Tree, resolve_export};
use super::{DataFile, Input, Layout, Plan, SourceError, sniff_bytes};
use crate::aws::AwsOptions;
use crate::store::{self, ObjectUrl, StoreError, io_runtime};

/// A data file in an object store.
#[derive(Clone)]
pub struct ObjectRef {
    pub store: Arc<dyn ObjectStore>,
    pub key: ObjPath,
}

impl std::fmt::Debug for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectRef({}/{})", self.store, self.key)
    }
}

impl PartialEq for ObjectRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.store, &other.store) && self.key == other.key
    }
}
impl Eq for ObjectRef {}

/// A clear error for a failed object-store call: a missing object is [`SourceError::NotFound`].
pub fn describe_error(url: &str, e: &object_store::Error) -> SourceError {
    match e {
        object_store::Error::NotFound { .. } => SourceError::NotFound { path: url.to_owned() },
        other => SourceError::Store(StoreError::object("read", url, other)),
    }
}

struct ObjTree {
    store: Arc<dyn ObjectStore>,
    url: ObjectUrl,
    /// Sizes of objects under listed prefixes.
    sizes: RefCell<BTreeMap<String, u64>>,
    listed: RefCell<BTreeSet<String>>,
}

impl ObjTree {
    fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        io_runtime().block_on(f)
    }

    fn list_all(&self, prefix: &str) -> Result<Vec<object_store::ObjectMeta>, SourceError> {
        let p = ObjPath::from(prefix);
        self.block(async {
            let mut out = Vec::new();
            let mut stream = self.store.list(Some(&p));
            while let Some(m) = stream.next().await {
                out.push(m.map_err(|e| describe_error(&self.url.url_of(prefix), &e))?);
            }
            Ok(out)
        })
    }

    fn input(&self, p: &str) -> Input {
        Input::Object(ObjectRef { store: self.store.clone(), key: ObjPath::from(p) })
    }

    fn head(&self, key: &str) -> Result<Option<u64>, SourceError> {
        let p = ObjPath::from(key);
        match self.block(self.store.head(&p)) {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(describe_error(&self.url.url_of(key), &e)),
        }
    }
}

impl Tree for ObjTree {
    type P = String;
    fn join(&self, base: &String, rel: &str) -> String {
        if base.is_empty() { rel.to_owned() } else { format!("{}/{rel}", base.trim_end_matches('/')) }
    }
    fn parent(&self, p: &String) -> String {
        p.trim_end_matches('/').rsplit_once('/').map(|(a, _)| a.to_owned()).unwrap_or_default()
    }
    fn file_name(&self, p: &String) -> String {
        p.rsplit('/').next().unwrap_or_default().to_owned()
    }
    fn read(&self, p: &String, max: u64) -> Result<Vec<u8>, SourceError> {
        let key = ObjPath::from(p.as_str());
        let url = self.url.url_of(p);
        self.block(async {
            let r = self.store.get(&key).await.map_err(|e| describe_error(&url, &e))?;
            if r.meta.size > max {
                return Err(SourceError::ManifestTooLarge { path: url.clone(), size: r.meta.size, max });
            }
            r.bytes().await.map_err(|e| describe_error(&url, &e))
        })
        .map(|b| b.to_vec())
    }
    fn read_head(&self, p: &String, max: usize) -> Result<Option<(Vec<u8>, u64)>, SourceError> {
        let key = ObjPath::from(p.as_str());
        let url = self.url.url_of(p);
        self.block(async {
            let r = match self.store.get(&key).await {
                Ok(r) => r,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(describe_error(&url, &e)),
            };
            let size = r.meta.size;
            // Stream only the first chunks; dropping the stream ends the download.
            let mut head = Vec::new();
            let mut stream = r.into_stream();
            while head.len() < max {
                match stream.next().await {
                    Some(chunk) => {
                        let chunk = chunk.map_err(|e| describe_error(&url, &e))?;
                        head.extend_from_slice(&chunk[..chunk.len().min(max - head.len())]);
                    }
                    None => break,
                }
            }
            Ok(Some((head, size)))
        })
    }
    fn locate(&self, p: &String) -> Result<Option<(Input, u64)>, SourceError> {
        let dir = self.parent(p);
        // The shared `AWSDynamoDB/data/` folder of incremental exports holds every incremental
        // export's files: never list it, ask for each file the manifest names.
        if self.file_name(&dir) == "data" && self.file_name(&self.parent(&dir)) == "AWSDynamoDB" {
            return Ok(self.head(p)?.map(|size| (self.input(p), size)));
        }
        // List each export's folder once instead of one HEAD request per data file.
        if self.listed.borrow_mut().insert(dir.clone()) {
            let metas = self.list_all(&format!("{dir}/"))?;
            let mut sizes = self.sizes.borrow_mut();
            for m in metas {
                sizes.insert(m.location.to_string(), m.size);
            }
        }
        Ok(self.sizes.borrow().get(p).copied().map(|size| (self.input(p), size)))
    }
    fn display(&self, p: &String) -> String {
        self.url.url_of(p)
    }
}

/// Resolves one object-store source into `plan`.
pub fn resolve_object(url: &ObjectUrl, aws: &AwsOptions, plan: &mut Plan) -> Result<(), SourceError> {
    let source = url.to_string();
    let store = io_runtime().block_on(store::open(url, aws))?;
    let tree = ObjTree { store, url: url.clone(), sizes: Default::default(), listed: Default::default() };
    let key = url.key.clone();

    // One object named exactly: a manifest summary or a data file.
    if !key.is_empty()
        && !key.ends_with('/')
        && let Some(size) = tree.head(&key)?
    {
        if tree.file_name(&key) == "manifest-summary.json" {
            return resolve_export(&tree, &key, plan);
        }
        plan.files.push(object_file(&tree, &key, size)?);
        return Ok(());
    }
    let dir = url.dir_prefix();
    let summary = format!("{dir}manifest-summary.json");
    if tree.head(&summary)?.is_some() {
        return resolve_export(&tree, &summary, plan);
    }
    let objects = tree.list_all(&dir)?;
    if objects.is_empty() {
        return Err(SourceError::NotFound { path: source.clone() });
    }
    let aws_dir = format!("{dir}AWSDynamoDB/");
    let summaries: Vec<String> = objects
        .iter()
        .map(|m| m.location.to_string())
        .filter(|k| {
            k.strip_prefix(&aws_dir)
                .and_then(|r| r.split_once('/'))
                .is_some_and(|(id, rest)| !id.is_empty() && rest == "manifest-summary.json")
        })
        .collect();
    match summaries.len() {
        0 => {} // moto's export and bare folders of data files: take the data files listed.
        _ => {
            let first = plan.exports.len();
            for s in &summaries {
                resolve_export(&tree, s, plan)?;
            }
            let id = |e: &super::ExportInfo| e.export_dir.rsplit('/').next().map(|n| format!("`{n}`"));
            return super::several_full_exports(source.clone(), &plan.exports[first..], id);
        }
    }
    let mut found = Vec::new();
    for m in &objects {
        let k = m.location.to_string();
        let below = k.strip_prefix(&dir).unwrap_or(&k);
        if below.split('/').rev().skip(1).any(|folder| super::NOT_DATA_FOLDERS.contains(&folder)) {
            continue;
        }
        if super::is_data_file_name(&tree.file_name(&k)) {
            found.push((k, m.size));
        }
    }
    if found.is_empty() {
        return Err(SourceError::NoDataFiles { path: source.clone() });
    }
    found.sort();
    for (k, size) in found {
        plan.files.push(object_file(&tree, &k, size)?);
    }
    Ok(())
}

fn object_file(tree: &ObjTree, key: &str, size: u64) -> Result<DataFile, SourceError> {
    let key = key.to_owned();
    let display = tree.display(&key);
    let name = tree.file_name(&key);
    let gzip = name.ends_with(".gz");
    let layout = if let Some(layout) = Layout::from_name(&name) {
        layout
    } else if size == 0 {
        Layout::ExportLines
    } else {
        let p = ObjPath::from(key.as_str());
        let head = tree.block(tree.store.get_range(&p, 0..size.min(4096))).map_err(|e| describe_error(&display, &e))?;
        sniff_bytes(&head).map_err(|why| match why {
            super::Sniff::Incremental => SourceError::IncrementalData { path: display.clone() },
            super::Sniff::Unknown(why) => SourceError::UnknownContent { path: display.clone(), why },
        })?
    };
    Ok(DataFile { input: tree.input(&key), display, gzip, layout, size, expected: None })
}

/// How many chunks may wait between the fetching task and the decoder.
const CHANNEL_CHUNKS: usize = 8;
/// Times a broken stream is resumed before the read fails.
const RESUMES: u32 = 3;

/// A blocking reader over one object, fed by a task on the I/O runtime.
pub struct ObjectReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
    current: Bytes,
    task: tokio::task::JoinHandle<()>,
}

impl ObjectReader {
    pub fn open(obj: &ObjectRef, display: &str) -> ObjectReader {
        let (tx, rx) = tokio::sync::mpsc::channel(CHANNEL_CHUNKS);
        let store = obj.store.clone();
        let key = obj.key.clone();
        let display = display.to_owned();
        let task = io_runtime().spawn(async move {
            let mut offset = 0u64;
            let mut etag: Option<String> = None;
            let mut resumes = 0;
            loop {
                let opts = GetOptions {
                    range: (offset > 0).then_some(GetRange::Offset(offset)),
                    if_match: etag.clone(),
                    ..Default::default()
                };
                let result = match store.get_opts(&key, opts).await {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = tx.send(Err(std::io::Error::other(describe_error(&display, &e)))).await;
                        return;
                    }
                };
                if etag.is_none() {
                    etag = result.meta.e_tag.clone();
                }
                let mut stream = result.into_stream();
                let mut broken = None;
                while let Some(chunk) = stream.next().await {
                    match chunk {
                        Ok(b) => {
                            offset += b.len() as u64;
                            if tx.send(Ok(b)).await.is_err() {
                                return; // the reader is gone
                            }
                        }
                        Err(e) => {
                            broken = Some(e);
                            break;
                        }
                    }
                }
                match broken {
                    None => return,
                    Some(e) if resumes >= RESUMES => {
                        let _ = tx.send(Err(std::io::Error::other(describe_error(&display, &e)))).await;
                        return;
                    }
                    Some(e) => {
                        resumes += 1;
                        let file = display.as_str();
                        tracing::warn!(file, offset, error = %e, "stream broke; resuming");
                        tokio::time::sleep(Duration::from_millis(200 << resumes)).await;
                    }
                }
            }
        });
        ObjectReader { rx, current: Bytes::new(), task }
    }
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

impl Drop for ObjectReader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    //! The manifest checks through an object store (`memory://`): side files are read only as
    //! far as a digest goes, hex digests verify, and a repeated manifest line is refused.

    use md5::Digest as _;
    use object_store::PutPayload;

    use super::*;
    use crate::source::manifest::MAX_SUMMARY_BYTES;
    use crate::source::{SideFileCheck, integrity};
    use crate::store::Scheme;

    fn put(bucket: &str, key: &str, bytes: Vec<u8>) {
        let store = crate::store::memory::store(bucket);
        io_runtime().block_on(store.put(&ObjPath::from(key), PutPayload::from(bytes))).unwrap();
    }

    fn upload_sample(bucket: &str) -> String {
        let tmp = tempfile::tempdir().unwrap();
        let s = crate::sample::generate(&crate::sample::SampleOptions {
            out: tmp.path().join("e"),
            users: 5,
            files: 2,
            seed: 3,
            scan_json: None,
            format: crate::sample::SampleFormat::DynamodbJson,
        })
        .unwrap();
        let id = s.export_dir.file_name().unwrap().to_string_lossy().into_owned();
        let mut stack = vec![tmp.path().join("e")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(tmp.path().join("e")).unwrap().to_string_lossy().into_owned();
                    put(bucket, &format!("x/{rel}"), std::fs::read(&p).unwrap());
                }
            }
        }
        format!("x/AWSDynamoDB/{id}")
    }

    fn resolve(bucket: &str, key: &str) -> Result<Plan, SourceError> {
        let url = ObjectUrl { scheme: Scheme::Memory, bucket: bucket.into(), key: key.into() };
        let mut plan = Plan::default();
        resolve_object(&url, &AwsOptions::default(), &mut plan).map(|()| plan)
    }

    fn get(bucket: &str, key: &str) -> Vec<u8> {
        let store = crate::store::memory::store(bucket);
        io_runtime().block_on(async { store.get(&ObjPath::from(key)).await.unwrap().bytes().await.unwrap().to_vec() })
    }

    #[test]
    fn a_listing_of_data_files_skips_etl_outputs_inside_it() {
        let bucket = "source-object-listing";
        let line = br#"{"Item":{"PK":{"S":"a"}}}"#.to_vec();
        for key in ["d/a.json", "d/more/_etl_x/b.json", "d/out/_etl/run.json", "d/out/t/_delta_log/0.json"] {
            put(bucket, key, line.clone());
        }
        put(bucket, "d/out/_etl/base/AWSDynamoDB/1/data/c.json.gz", vec![0x1f, 0x8b]);
        let plan = resolve(bucket, "d/").unwrap();
        let keys: Vec<&str> = plan.files.iter().map(|f| f.display.rsplit_once("/d/").unwrap().1).collect();
        assert_eq!(keys, ["a.json", "more/_etl_x/b.json"]);
    }

    #[test]
    fn side_files_and_duplicates_in_an_object_store() {
        let bucket = "source-object-integrity";
        let export = upload_sample(bucket);
        let plan = resolve(bucket, &format!("{export}/")).unwrap();
        assert!(matches!(plan.exports[0].files_checksum, SideFileCheck::Verified { .. }));

        // A hex digest verifies; a 5 MiB side object is a mismatch echoed as a short preview.
        let files = get(bucket, &format!("{export}/manifest-files.json"));
        let hex: String = md5::Md5::digest(&files).iter().map(|b| format!("{b:02x}")).collect();
        put(bucket, &format!("{export}/manifest-files.md5"), format!("{hex}\n").into_bytes());
        put(bucket, &format!("{export}/manifest-summary.md5"), vec![b'A'; 5 << 20]);
        let plan = resolve(bucket, &format!("{export}/manifest-summary.json")).unwrap();
        assert!(matches!(plan.exports[0].files_checksum, SideFileCheck::Verified { .. }));
        let SideFileCheck::Mismatch { expected, .. } = &plan.exports[0].summary_checksum else {
            panic!("{:?}", plan.exports[0].summary_checksum)
        };
        assert_eq!(expected.chars().count(), integrity::PREVIEW_CHARS + 1, "{expected}");

        // A summary larger than any manifest is refused unread.
        let summary = get(bucket, &format!("{export}/manifest-summary.json"));
        let mut big = summary.clone();
        big.resize(MAX_SUMMARY_BYTES as usize + 1, b' ');
        put(bucket, &format!("{export}/manifest-summary.json"), big);
        assert!(matches!(resolve(bucket, &format!("{export}/")), Err(SourceError::ManifestTooLarge { .. })));
        put(bucket, &format!("{export}/manifest-summary.json"), summary);

        // The same line twice: refused before reading, naming both lines.
        let first = files.split(|&b| b == b'\n').next().unwrap().to_vec();
        let mut twice = files.clone();
        twice.extend_from_slice(&first);
        twice.push(b'\n');
        put(bucket, &format!("{export}/manifest-files.json"), twice);
        let e = resolve(bucket, &format!("{export}/")).unwrap_err();
        assert!(matches!(e, SourceError::DuplicateDataFile { first_line: 1, .. }), "{e}");
        assert!(e.is_integrity());
    }
}

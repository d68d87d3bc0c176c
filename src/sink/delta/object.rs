//! Delta tables on an object store (`--out s3://bucket/prefix --format delta`, or `memory://`).
//!
//! The same commits as a local Delta output ([`super::commit_tables`]), with the object-store
//! commit's head ([`crate::sink::object`]) around them:
//!
//! 1. When the sink is opened, `_etl/run.json` (the head) is read with its ETag. An apply of
//!    incremental exports builds on it ([`Sink::previous`]); the exports the output keeps are
//!    copied under `_etl/base/` server-side within the bucket ([`Sink::keep_input`]).
//! 2. The run is built and checked in a local scratch folder, exactly as for a local output.
//! 3. Each table is committed by deltalake with its log's conditional PUT (`If-None-Match: *` on
//!    `_delta_log/<version>.json`): the data files are uploaded under run-unique names, then one
//!    commit adds them (a replace, or the copy-on-write MERGE of incremental exports, whose
//!    rewritten files are built locally from downloaded copies and uploaded). Every commit carries
//!    the run's `txn`. When another run committed a table first, the commit fails; if that run's
//!    `txn` is this run's (it applied the same exports) the table is already what this run would
//!    make and is kept as it is, never merged twice; otherwise this run stops
//!    ([`DeltaError::Conflict`], exit 1).
//! 4. `_etl/run.json`, naming each table's version, is written last with `If-Match` on the head's
//!    ETag. Of two runs that started from one head, the second to get there fails (exit 1), and
//!    the output readers see is the winner's; its tables hold every export's rows exactly once.
//!
//! A reader that opens tables through `_etl/run.json` (`etl sql`) sees one run's versions. A
//! Delta reader of one table sees its latest commit, as with a local output.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::file::properties::WriterProperties;
use object_store::ObjectStore;

use super::{DeltaError, DeltaRun, Home, TablesCommit, commit_tables, record_versions, refuse_other_format};
use crate::aws::AwsOptions;
use crate::schema::TableSchema;
use crate::sink::local::LocalSink;
use crate::sink::manifest::RUN_MANIFEST;
use crate::sink::object::{Head, Publish, ScratchRoot, keep_object_input, read_head, refuse_foreign_but, scratch_root};
use crate::sink::{Committed, PartWriter, RunManifest, Sink, SinkError, faults, manifest};
use crate::source::Input;
use crate::store::{self, ObjectUrl, io_runtime};

/// The sink for `--out s3://… --format delta`.
pub struct DeltaObjectSink {
    local: LocalSink,
    url: ObjectUrl,
    root: ScratchRoot,
    store: Arc<dyn ObjectStore>,
    head: Option<Head>,
    props: WriterProperties,
    tag: String,
    run: DeltaRun,
    /// Part files already in the store ([`Sink::keep_stored`]): path, key.
    stored: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

/// Whether `rel` (a key under the output prefix) is one a Delta output of etl writes: a table's
/// log, or a data file of a table.
pub(in crate::sink) fn is_delta_key(rel: &str) -> bool {
    let mut parts = rel.split('/');
    match (parts.next(), parts.next()) {
        (Some(table), Some(second)) if !table.is_empty() => {
            second == super::DELTA_LOG
                || (parts.next().is_none() && second.starts_with("part-") && second.ends_with(".parquet"))
        }
        _ => false,
    }
}

impl DeltaObjectSink {
    /// Reads the head and checks that the prefix is empty or an earlier Delta output of etl.
    pub fn create(url: ObjectUrl, aws: AwsOptions, props: WriterProperties) -> Result<DeltaObjectSink, SinkError> {
        let (store, head) = io_runtime().block_on(async {
            let store: Arc<dyn ObjectStore> = store::open(&url, &aws).await?;
            let head = read_head(&store, &url, &format!("{}{RUN_MANIFEST}", url.dir_prefix())).await?;
            match head.as_ref().and_then(|h| h.manifest.as_deref()) {
                Some(m) => refuse_other_format(m, true, &url.to_string())?,
                // A run that stopped after its first table commits left tables but no head.
                None => refuse_foreign_but(&store, &url, is_delta_key).await.map_err(|e| match e {
                    SinkError::NotEtlPrefix { url } => SinkError::from(DeltaError::NotEmpty { path: url }),
                    other => other,
                })?,
            }
            Ok::<_, SinkError>((store, head))
        })?;
        faults::point("s3-opened");
        let root = scratch_root()?;
        let local = LocalSink::create(&root.dir.join("out"), false, props.clone())?;
        let tag = super::run_tag();
        Ok(DeltaObjectSink {
            local,
            url,
            root,
            store,
            head,
            props,
            tag,
            run: DeltaRun::default(),
            stored: Default::default(),
        })
    }
}

impl crate::sink::PartSink for DeltaObjectSink {
    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError> {
        crate::sink::PartSink::part(&self.local, table, part, schema)
    }
}

impl Sink for DeltaObjectSink {
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

    fn delta_run(&mut self, run: DeltaRun) {
        self.run = run;
    }

    fn delta_home(&self) -> Option<Home> {
        Some(Home::Object { store: self.store.clone(), url: self.url.clone() })
    }

    fn commit(
        self: Box<Self>,
        mut manifest: RunManifest,
        schemas: &[TableSchema],
    ) -> Result<(RunManifest, Committed), SinkError> {
        let DeltaObjectSink { local, url, root, store, head, props, tag, run, stored } = *self;
        let stored = stored.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
        let previous = head.as_ref().and_then(|h| h.manifest.as_deref()).cloned();
        let staging = local.finish(&mut manifest, schemas)?;
        let scratch: PathBuf = root.dir.join("delta");
        std::fs::create_dir_all(&scratch).map_err(SinkError::io("create", &scratch))?;
        let home = Home::Object { store: store.clone(), url: url.clone() };
        let result = (|| {
            let mut publish = io_runtime().block_on(Publish::begin_on(store.clone(), &url, true, head))?;
            let tables = TablesCommit {
                home: &home,
                staging: staging.path(),
                scratch: &scratch,
                props: &props,
                tag: &tag,
                run: &run,
                previous: previous.as_ref(),
                stored: &stored,
            };
            let placed = commit_tables(&tables, &mut manifest, schemas)?;
            record_versions(&mut manifest, previous.as_ref(), placed.versions);
            // The staged schemas and state again, now with the versions.
            manifest::write(staging.path(), &manifest, schemas)
                .map_err(SinkError::io("write the run manifest in", staging.path()))?;
            io_runtime().block_on(async {
                let copies = publish.copies(staging.path());
                publish.send(copies).await?;
                publish.commit(&mut manifest).await.map_err(|e| match e {
                    SinkError::Conflict { url, winner, .. } => {
                        SinkError::from(DeltaError::OutputConflict { url, winner })
                    }
                    other => other,
                })?;
                let deleted = match publish.cleanup().await {
                    Ok(n) => n,
                    Err(e) => {
                        let w = format!(
                            "published; removing objects of older runs failed ({e}); the next run removes them"
                        );
                        tracing::warn!("{w}");
                        manifest.warnings.push(w);
                        0
                    }
                };
                Ok::<_, SinkError>((publish.run_id.clone(), placed.files, placed.bytes, deleted))
            })
        })();
        drop(staging);
        drop(root);
        let (run_id, files, bytes, deleted) = result?;
        tracing::info!(run_id = %run_id, files, bytes, "published the Delta tables");
        Ok((manifest, Committed { run_id: Some(run_id), files, bytes, deleted }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delta_keys_are_logs_and_data_files_of_tables() {
        assert!(is_delta_key("user/_delta_log/00000000000000000000.json"));
        assert!(is_delta_key("user/part-00000-12-34.parquet"));
        assert!(!is_delta_key("user/notes/part-00000.parquet"));
        assert!(!is_delta_key("precious.csv"));
        assert!(!is_delta_key("/_delta_log/x"));
    }
}

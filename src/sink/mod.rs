//! Where tables go: the [`Sink`] contract, Parquet part files ([`parquet`]), the staged local
//! commit ([`local`]), the object-store commit with `run.json` last ([`object`]), the run
//! manifest every reader uses ([`manifest`]), lock files ([`lock`]) and the test-only fault
//! points of the commits ([`faults`]), and Delta tables made of the same parts ([`delta`]).
//!
//! Everything here knows Arrow and files and nothing of DynamoDB. Readers see the previous
//! complete output or the new one, never a mix: parts are staged, and one atomic step publishes
//! them (a directory exchange locally, one conditional PUT of `run.json` on an object store).
//! Two runs writing the same output never both win: locally the second is refused by a lock,
//! on an object store the one whose conditional commit loses fails and removes its files.

pub mod delta;
pub mod faults;
pub mod local;
pub mod lock;
pub mod manifest;
pub mod object;
pub mod parquet;
pub mod rewrite;
pub mod shard;

use std::path::{Path, PathBuf};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::errors::ParquetError;

pub use manifest::{FileReport, ManifestError, RunManifest};
pub use parquet::{PartWriter, RowGroups};

use crate::aws::AwsOptions;
use crate::schema::TableSchema;
use crate::source::Input;
use crate::store::{ObjectUrl, StoreError, Target};

/// Why output cannot be staged or published. Nothing was published when a sink returns one.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("`{path}` exists and is not an etl output (it has no `_etl/run.json`)")]
    NotEtlOutput { path: String },
    #[error("`{path}` exists and is not a folder")]
    NotADirectory { path: String },
    #[error("cannot {action} `{path}`: {source}")]
    Io { action: &'static str, path: String, source: std::io::Error },
    #[error("writing table `{table}`: {source}")]
    Parquet { table: String, source: ParquetError },
    /// Writing one part file failed (a full disk, a file-size limit, an I/O error).
    #[error("writing table `{table}` to `{path}`: {source}")]
    Part { table: String, path: String, source: ParquetError },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("`{url}` holds objects but no `_etl/run.json`: it is not an etl output")]
    NotEtlPrefix { url: String },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Delta(#[from] delta::DeltaError),
    /// Another live run holds the output's lock (local outputs).
    #[error("`{path}` is being written by another etl run ({holder}); this run wrote nothing")]
    Locked { path: String, lock: String, holder: String },
    /// Another run committed the output while this one was writing (object stores).
    #[error(
        "`{url}` was published by another run ({winner}) while this run (`{run_id}`) was writing it; this run published nothing and removed the files it had uploaded"
    )]
    Conflict { url: String, run_id: String, winner: String },
    /// A publish a killed run left half done cannot be completed safely.
    #[error("cannot complete the interrupted publish of `{path}` recorded in `{journal}`: {reason}")]
    Unrecoverable { path: String, journal: String, reason: String },
    /// A worker of a parallel step stopped because another failed (never reported).
    #[error("stopped: another worker failed")]
    Cancelled,
    /// A bug: a worker of a parallel step panicked.
    #[error("internal error: {message}")]
    Internal { message: String },
}

impl crate::pipeline::pool::PoolError for SinkError {
    fn cancelled() -> Self {
        SinkError::Cancelled
    }

    fn is_cancelled(&self) -> bool {
        matches!(self, SinkError::Cancelled)
    }

    fn panicked(message: String) -> Self {
        SinkError::Internal { message: format!("a worker panicked: {message}") }
    }
}

impl SinkError {
    pub fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> SinkError + 'a {
        move |source| SinkError::Io { action, path: path.display().to_string(), source }
    }

    pub fn hint(&self) -> Option<&'static str> {
        match self {
            SinkError::NotEtlOutput { .. } => {
                Some("choose another `--out`, or pass `--overwrite` to replace the folder's contents")
            }
            SinkError::NotADirectory { .. } => Some("`--out` names a folder that etl creates"),
            SinkError::NotEtlPrefix { .. } => Some(
                "choose an empty prefix, or pass `--overwrite` to write beside what is there (etl never deletes objects it did not write)",
            ),
            SinkError::Store(e) => Some(e.hint()),
            SinkError::Delta(e) => e.hint(),
            SinkError::Locked { .. } => Some(
                "runs writing the same `--out` must not overlap: wait for that run to end (its lock goes with it, however it ends), or choose another `--out`",
            ),
            SinkError::Conflict { .. } => Some(
                "runs writing the same `--out` must not overlap; the other run's output is intact, run this one again once it has finished",
            ),
            SinkError::Unrecoverable { .. } => Some(
                "etl deleted nothing: beside the output, `.NAME.etl-new-*` holds the complete new output and `.NAME.etl-old-*` the previous one; move the one you want to the output's name and remove the journal `.NAME.etl-commit`",
            ),
            SinkError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => Some(
                "etl writes a lock file and a staging folder beside `--out` and renames the staging folder into place: the folder holding `--out` must be writable",
            ),
            _ => None,
        }
    }

    /// Another run wrote, or is writing, the same output: the run lost, nothing of it was
    /// published, and the output is the other run's. A policy failure (exit 1), not a bug.
    pub fn is_concurrent_run(&self) -> bool {
        matches!(
            self,
            SinkError::Locked { .. }
                | SinkError::Conflict { .. }
                | SinkError::Delta(
                    delta::DeltaError::Conflict { .. }
                        | delta::DeltaError::OutputConflict { .. }
                        | delta::DeltaError::MaintainConflict { .. }
                )
        )
    }
}

/// What a commit published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The object-store run id, when the output went to an object store.
    pub run_id: Option<String>,
    /// Files uploaded (object stores).
    pub files: usize,
    /// Bytes uploaded (object stores).
    pub bytes: u64,
    /// Objects of older or crashed runs deleted after the commit (object stores).
    pub deleted: usize,
}

/// The output side of a run.
///
/// Call order: [`open`] creates the sink and its staging area; [`Sink::part`] is then called any
/// number of times, from any threads, and each [`PartWriter`] is closed; [`Sink::commit`] is
/// called once, last, with the manifest that lists every part. An error from `part` or from a
/// writer means the run must stop; an error from `commit` means nothing was published. A sink
/// dropped without a commit removes everything it staged, and the previous output stays as it
/// was.
pub trait Sink: PartSink + Send + Sync {
    /// A folder for the run's own scratch files (spill, live-scan spool) on the same file
    /// system as the staged output; never published.
    fn scratch(&self) -> &Path;

    /// Puts the bytes of the local file `from` into the output at `rel` (a relative
    /// `/`-separated path of plain names), unchanged; hard-linked when `link` and the file
    /// system allows it (only for files nobody rewrites). May be called from any thread before
    /// [`Sink::commit`]. Returns where the kept copy can be read until the commit, or `None`
    /// when this sink keeps no such files (object stores).
    fn keep(&self, rel: &str, from: &Path, link: bool) -> Result<Option<PathBuf>, SinkError> {
        let _ = (rel, from, link);
        Ok(None)
    }

    /// Puts the object `key` of the output's own store (a key from its bucket's root) into the
    /// output at `rel`, unchanged: copied server-side when the run publishes. `false` when this
    /// sink keeps no such objects (local outputs).
    fn keep_stored(&self, rel: &str, key: &str) -> Result<bool, SinkError> {
        let _ = (rel, key);
        Ok(false)
    }

    /// Puts the bytes of `from` (a local file, or an object whose URL is `from_url`) into the
    /// output at `rel`, unchanged, as [`Sink::keep`] does, and returns where the kept copy can
    /// be read. An object-store output copies an object of its own bucket server-side, and
    /// keeps nothing new for an object already at `rel`; the copy is made before the commit and
    /// outside any run's own names, so it must only ever be given bytes that are the same for
    /// every run writing `rel` (an export's files, at their export's place). `None` when this
    /// sink keeps no such input.
    fn keep_input(
        &self,
        rel: &str,
        from: &Input,
        from_url: Option<&ObjectUrl>,
        link: bool,
    ) -> Result<Option<Input>, SinkError> {
        match from {
            Input::Path(p) => Ok(self.keep(rel, p, link)?.map(Input::Path)),
            Input::Object(o) => {
                let shown = from_url.map_or_else(|| o.key.to_string(), ToString::to_string);
                Ok(self.keep_object(rel, o, &shown)?.map(Input::Path))
            }
            Input::Stdin => Ok(None),
        }
    }

    /// [`Sink::keep`] for an object (`shown` is its URL): downloaded, unchanged. `None` when
    /// this sink keeps no such file.
    fn keep_object(
        &self,
        rel: &str,
        from: &crate::source::object::ObjectRef,
        shown: &str,
    ) -> Result<Option<PathBuf>, SinkError> {
        let _ = (rel, from, shown);
        Ok(None)
    }

    /// The committed report of the output this run replaces, when the sink read it when it was
    /// opened (object stores: the head its commit is conditional on, so a run that builds on it
    /// commits only if no other run committed since). `None` for local outputs, which are read
    /// from disk under their lock.
    fn previous(&self) -> Option<&RunManifest> {
        None
    }

    /// Tells a Delta sink how this run commits its tables (the `txn`, and the changed keys when
    /// incremental exports are applied onto an output); other sinks ignore it. Called once,
    /// before [`Sink::commit`].
    fn delta_run(&mut self, run: delta::DeltaRun) {
        let _ = run;
    }

    /// Where a Delta sink's output is (its folder or prefix); `None` for other sinks.
    fn delta_home(&self) -> Option<delta::Home> {
        None
    }

    /// The local folder that becomes the output at the commit, or is published as it, for a
    /// sink that stages its whole output in one (a Parquet output, local or on an object
    /// store); `None` for other sinks.
    fn staged(&self) -> Option<&Path> {
        None
    }

    /// For a run that found nothing to do (the output already holds its input): removes what
    /// runs killed before it left behind, as a run that commits does, and returns how many
    /// objects went. Nothing to do for sinks that remove leftovers when they are opened (a local
    /// output's staging folders) or leave them to maintenance (a Delta table's files).
    fn tidy(&self) -> Result<usize, SinkError> {
        Ok(0)
    }

    /// The object-store prefix a Parquet output is published to, to read its committed files
    /// from (an apply in place); `None` for other sinks.
    fn object_home(&self) -> Option<delta::Home> {
        None
    }

    /// Publishes every part with `manifest` and the schema contracts, atomically. Returns the
    /// manifest as published (an object-store commit names files by run) and what it did.
    fn commit(
        self: Box<Self>,
        manifest: RunManifest,
        schemas: &[TableSchema],
    ) -> Result<(RunManifest, Committed), SinkError>;
}

/// Where pass two writes part files: a [`Sink`]'s staging, or a shard's folder
/// ([`shard::ShardFolder`]), which `etl commit` publishes later.
pub trait PartSink: Send + Sync {
    /// Creates part `part` of `table` (named by [`parquet::part_path`]).
    fn part(&self, table: &str, part: usize, schema: SchemaRef) -> Result<PartWriter, SinkError>;
}

/// What an output's tables are: plain Parquet parts, or Delta tables of those parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    #[default]
    Parquet,
    Delta,
}

/// Settings of a sink.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    pub format: Format,
    /// Replace a target that is not an etl output.
    pub overwrite: bool,
    pub row_group_rows: usize,
    pub aws: AwsOptions,
}

/// Opens the sink for `target`: a staged folder beside a local target, or a local scratch
/// folder for an object-store target.
pub fn open(target: &Target, settings: &SinkSettings) -> Result<Box<dyn Sink>, SinkError> {
    let props = parquet::writer_properties(settings.row_group_rows);
    match target {
        Target::Path(dir) if settings.format == Format::Delta => Ok(Box::new(delta::DeltaSink::create(dir, props)?)),
        Target::Path(dir) => {
            let sink = local::LocalSink::create(dir, settings.overwrite, props)?;
            // Parquet files and a `run.json` of them in place of Delta tables would drop the
            // tables' logs and history, as on an object store they would orphan them: refused
            // alike (a scheduled apply that left out `--format delta`).
            if !settings.overwrite && dir.join(local::RUN_REPORT).is_file() {
                delta::refuse_other_format(&RunManifest::read(dir)?, false, &dir.display().to_string())?;
            }
            Ok(Box::new(sink))
        }
        Target::Object(url) if settings.format == Format::Delta => {
            Ok(Box::new(delta::object::DeltaObjectSink::create(url.clone(), settings.aws.clone(), props)?))
        }
        Target::Object(url) => {
            Ok(Box::new(object::ObjectSink::create(url.clone(), settings.aws.clone(), settings.overwrite, props)?))
        }
    }
}

/// The scratch folder inside a staged output.
pub(crate) fn scratch_dir(staged: &Path) -> PathBuf {
    staged.join("_etl").join("tmp")
}

/// Starts writing the complete file at `path` to disk, without waiting for it.
///
/// A local commit syncs every staged file before it publishes ([`local`]), and that sync waits
/// for whatever the page cache still holds: on the 2M-item bench export, 130 MB of Parquet parts
/// and kept exports took 70 ms after everything else was done, on one thread. Started as each
/// file is finished, the writing overlaps the run's work and the sync finds little left. Only a
/// hint: errors are ignored, and the sync at the commit is what makes the files durable. A
/// staged file that is uploaded instead (an object-store output) is written to disk once more
/// than it would have been, which costs the disk's time, not the run's.
pub(crate) fn start_writeback(path: &Path) {
    #[cfg(target_os = "linux")]
    if let Ok(f) = std::fs::File::open(path) {
        use std::os::fd::AsRawFd as _;
        // SAFETY: `f` is an open descriptor for the whole call; the call reads no memory of ours.
        unsafe {
            libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

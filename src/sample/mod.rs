//! Deterministic synthetic exports of a fake e-commerce single table (`etl sample`).
//!
//! This module owns the made-up `shop` table (users, orders, order items, products, reviews), how
//! its items spread over data files, and writing them as a DynamoDB full export in
//! `DYNAMODB_JSON` or `ION` (`_started`, manifests, `.md5` side files, gzip data files, one of
//! them empty) and, on request, as `aws dynamodb scan` output. The same options always give the same bytes:
//! every random choice comes from a seeded splitmix64 stream keyed by the entity it describes, so
//! the data files can be written in parallel without sharing state. It never reads exports and
//! must not depend on the pipeline modules (`pipeline`, `source`, `decode`, `normalize`, `sink`):
//! tests and benchmarks use it as an independent source of truth, with its own writer and its
//! own random numbers.
//!
//! - [`rng`]: the seeded random streams;
//! - [`item`]: attribute values and their DynamoDB JSON;
//! - [`ion`]: the same values as Amazon Ion text lines;
//! - [`shop`] (with the vocabulary in [`words`]): the entity model, which draws every item;
//! - [`export`]: the export writer, with manifests, checksums and the empty data file;
//! - [`incremental`]: incremental exports after the full one, and the final state they lead to;
//! - [`scan`]: the `aws dynamodb scan` output writer.

mod export;
mod incremental;
mod ion;
mod item;
mod rng;
mod scan;
mod shop;
#[cfg(test)]
mod tests;
mod words;

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

pub use incremental::{
    IncrementalOptions, IncrementalSummary, NetChanges, View, WindowSummary, default_final_out, generate_incrementals,
};
pub use shop::users_for_items;
use shop::{Kind, Shop};

/// What to generate and where.
#[derive(Debug, Clone)]
pub struct SampleOptions {
    /// Folder to create; the export goes to `out/AWSDynamoDB/<ExportId>/…`.
    pub out: PathBuf,
    /// Scale knob; every other count derives from it (see [`users_for_items`]).
    pub users: u64,
    /// Number of non-empty data files (at least 1); one extra empty data file is always added.
    pub files: usize,
    pub seed: u64,
    /// If set, also write the same items as `aws dynamodb scan` (CLI v1) output to this file.
    pub scan_json: Option<PathBuf>,
    /// The export's `outputFormat`: DynamoDB JSON (`.json.gz`) or Amazon Ion text (`.ion.gz`).
    pub format: SampleFormat,
}

/// The data-file format of a sample export, as DynamoDB's Export to S3 offers it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SampleFormat {
    #[default]
    DynamodbJson,
    Ion,
}

impl SampleFormat {
    /// The manifest's `outputFormat`.
    pub fn output_format(self) -> &'static str {
        match self {
            SampleFormat::DynamodbJson => "DYNAMODB_JSON",
            SampleFormat::Ion => "ION",
        }
    }

    /// The data files' extension.
    pub fn extension(self) -> &'static str {
        match self {
            SampleFormat::DynamodbJson => ".json.gz",
            SampleFormat::Ion => ".ion.gz",
        }
    }
}

/// What [`generate`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleSummary {
    /// `out/AWSDynamoDB/<ExportId>`: the folder holding `manifest-summary.json`.
    pub export_dir: PathBuf,
    pub items: u64,
    /// Item count per `Type` value (`Order`, `OrderItem`, `Product`, `Review`, `User`).
    pub items_by_type: BTreeMap<String, u64>,
    /// Data files written, the empty one included (`files + 1`).
    pub data_files: usize,
    /// Total size of the `.json.gz` (or `.ion.gz`) data files.
    pub compressed_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SampleError {
    #[error("a sample needs at least 1 user, got 0")]
    NoUsers,
    #[error("a sample needs at least 1 non-empty data file, got 0")]
    NoFiles,
    #[error("incremental exports were asked for, but 0 of them")]
    NoIncrementals,
    #[error("a change percent is between 0 and 100, got {percent}")]
    BadChangePercent { percent: f64 },
    #[error("an overlap of {seconds} s is not shorter than the shortest window (900 s); hint: ask for less than 900")]
    OverlapTooLong { seconds: u64 },
    #[error("cannot fill {files} data files with {keys} partition keys; hint: ask for fewer files or more items")]
    TooManyFiles { files: usize, keys: u64 },
    #[error("export folder `{path}` already exists; hint: remove it or choose another output folder")]
    ExportExists { path: PathBuf },
    #[error("cannot create folder `{path}`: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot write `{path}`: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot encode an item for `{path}`: {source}")]
    Encode { path: PathBuf, source: serde_json::Error },
    /// A writer stopped because another failed; never reported (the pool returns the cause).
    #[error("stopped because another data file failed")]
    Cancelled,
    /// A writer thread panicked: a bug in etl.
    #[error("internal error while writing the sample: {0}; hint: this is a bug in etl, please report it")]
    Internal(String),
}

impl crate::pipeline::pool::PoolError for SampleError {
    fn cancelled() -> Self {
        SampleError::Cancelled
    }

    fn is_cancelled(&self) -> bool {
        matches!(self, SampleError::Cancelled)
    }

    fn panicked(message: String) -> Self {
        SampleError::Internal(message)
    }
}

/// Generates the export described by `opts`; see the module documentation.
pub fn generate(opts: &SampleOptions) -> Result<SampleSummary, SampleError> {
    if opts.users == 0 {
        return Err(SampleError::NoUsers);
    }
    if opts.files == 0 {
        return Err(SampleError::NoFiles);
    }
    let shop = Shop::new(opts.seed, opts.users, opts.files)?;
    let written = export::write(&shop, &opts.out, opts.format)?;
    if let Some(path) = &opts.scan_json {
        scan::write(&shop, path)?;
    }
    Ok(SampleSummary {
        export_dir: written.export_dir,
        items: written.counts.iter().sum(),
        items_by_type: Kind::ALL.iter().map(|k| (k.name().to_owned(), written.counts[*k as usize])).collect(),
        data_files: opts.files + 1,
        compressed_bytes: written.compressed_bytes,
    })
}

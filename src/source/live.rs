//! Live tables (`dynamodb://TABLE`): a parallel scan spooled into export-format data files, so
//! the rest of a run reads them exactly like an export's.

use std::path::Path;

use tracing::{info, info_span};

use super::{DataFile, Input, Layout, SourceError};
use crate::aws::AwsOptions;
use crate::aws::dynamodb::{self, ScanOptions};
use crate::store::io_runtime;

/// How `dynamodb://TABLE` sources are scanned.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanSettings {
    pub segments: u32,
    pub consistent_read: bool,
    pub max_rcu_per_second: Option<f64>,
}

impl Default for ScanSettings {
    fn default() -> Self {
        ScanSettings { segments: 1, consistent_read: false, max_rcu_per_second: None }
    }
}

/// Scans `table` into one spool file per segment under `dir` and returns them as data files.
pub fn scan(table: &str, settings: &ScanSettings, aws: &AwsOptions, dir: &Path) -> Result<Vec<DataFile>, SourceError> {
    std::fs::create_dir_all(dir).map_err(|source| SourceError::Io { path: dir.display().to_string(), source })?;
    let _span = info_span!("scan", table).entered();
    let opts = ScanOptions {
        table: table.to_owned(),
        segments: settings.segments.max(1),
        consistent_read: settings.consistent_read,
        max_rcu_per_second: settings.max_rcu_per_second,
        page_size: None,
    };
    let files = io_runtime().block_on(async {
        let sdk = aws.sdk_config().await;
        let client = dynamodb::client(&sdk);
        dynamodb::scan_to_files(&client, &opts, dir, |_| {})
            .await
            .map_err(|e| e.with_endpoint(dynamodb::endpoint_label(&sdk)))
    })?;
    let mut out = Vec::with_capacity(files.len());
    for f in files {
        let size = std::fs::metadata(&f.path)
            .map_err(|source| SourceError::Io { path: f.path.display().to_string(), source })?
            .len();
        info!(segment = f.segment, items = f.items, pages = f.pages, rcu = f.consumed_rcu, "segment scanned");
        out.push(DataFile {
            input: Input::Path(f.path),
            display: format!("dynamodb://{table}#segment-{:06}", f.segment),
            gzip: false,
            layout: Layout::ExportLines,
            size,
            expected: None,
        });
    }
    Ok(out)
}

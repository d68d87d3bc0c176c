//! Writing committed output: Parquet writer settings, the staged output folder and its atomic
//! publication, and the run report.
//!
//! Everything here knows Arrow and files and nothing of DynamoDB. Output is staged in a hidden
//! folder beside the target and published with one atomic directory exchange, so readers see
//! the previous complete output or the new one, never a mix.

pub mod report;
pub mod s3;
pub mod staging;

use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};

/// zstd level for every Parquet file etl writes.
pub const ZSTD_LEVEL: i32 = 1;

/// The one place that decides how Parquet files are written. Row groups are cut by the caller
/// (one per flushed batch), so the writer's own row limit is only a backstop.
pub fn writer_properties(max_row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_1_0)
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).unwrap_or_default()))
        .set_max_row_group_row_count(Some(max_row_group_rows.max(1)))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_created_by(format!("etl {}", env!("CARGO_PKG_VERSION")))
        .build()
}

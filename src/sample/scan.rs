//! Writes the shop as `aws dynamodb scan` output, byte for byte as the AWS CLI v1 prints a merged
//! scan (indent 4, non-ASCII kept raw), so the scan reader has a twin of the export to agree
//! with.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::Path;

use serde::Serialize;

use super::SampleError;
use super::shop::Shop;

/// Writes every item as the AWS CLI v1 prints a merged `scan`: indent 4, non-ASCII kept raw.
pub(super) fn write(shop: &Shop, path: &Path) -> Result<(), SampleError> {
    let io_err = |source| SampleError::Write { path: path.to_owned(), source };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|source| SampleError::CreateDir { path: parent.to_owned(), source })?;
    }
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io_err)?);
    out.write_all(b"{\n    \"Items\": [").map_err(io_err)?;
    let mut count = 0u64;
    let mut pretty = Vec::new();
    shop.for_each_item(None, |_, item| {
        pretty.clear();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut pretty, formatter);
        item.serialize(&mut ser).map_err(|source| SampleError::Encode { path: path.to_owned(), source })?;
        out.write_all(if count == 0 { b"\n" } else { b",\n" }).map_err(io_err)?;
        // Each item sits two levels deep; JSON strings never hold a raw newline, so indenting
        // after every newline is safe.
        for (i, line) in pretty.split(|&b| b == b'\n').enumerate() {
            if i > 0 {
                out.write_all(b"\n").map_err(io_err)?;
            }
            out.write_all(b"        ").map_err(io_err)?;
            out.write_all(line).map_err(io_err)?;
        }
        count += 1;
        Ok(())
    })?;
    let tail = format!(
        "\n    ],\n    \"Count\": {count},\n    \"ScannedCount\": {count},\n    \"ConsumedCapacity\": null\n}}\n"
    );
    out.write_all(tail.as_bytes()).map_err(io_err)?;
    out.into_inner().map_err(|e| io_err(e.into_error()))?.sync_all().map_err(io_err)
}

//! Printing query results: table, csv, tsv, json, ndjson or parquet.

use std::io::Write;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use super::QueryResult;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Table,
    Csv,
    Tsv,
    Json,
    Ndjson,
    Parquet,
}

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("formatting results: {0}")]
    Arrow(#[from] ArrowError),
    #[error("writing parquet: {0}")]
    Parquet(#[from] datafusion::parquet::errors::ParquetError),
    #[error("writing results: {0}")]
    Io(#[from] std::io::Error),
}

/// Every column rendered as text (for csv/tsv, which cannot hold nested values).
fn as_text(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let opts = FormatOptions::default().with_null("");
    let fields: Vec<Field> =
        batch.schema().fields().iter().map(|f| Field::new(f.name(), DataType::Utf8, true)).collect();
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for col in batch.columns() {
        let fmt = ArrayFormatter::try_new(col.as_ref(), &opts)?;
        let mut b = StringBuilder::new();
        for i in 0..col.len() {
            if col.is_null(i) {
                b.append_null();
            } else {
                b.append_value(fmt.value(i).to_string());
            }
        }
        cols.push(Arc::new(b.finish()));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
}

/// Writes `result` to `out` in `format`.
pub fn write_result(
    result: &QueryResult,
    format: OutputFormat,
    out: &mut (dyn Write + Send),
) -> Result<(), FormatError> {
    // A statement without a result set (`SET`, `CREATE VIEW`, … under `--allow-write`) prints
    // nothing: there is no table to print, not even an empty one.
    if result.schema.fields().is_empty() {
        return Ok(());
    }
    let empty;
    let batches: &[RecordBatch] = if result.batches.is_empty() {
        empty = [RecordBatch::new_empty(result.schema.clone())];
        &empty
    } else {
        &result.batches
    };
    match format {
        OutputFormat::Table => {
            let text = datafusion::arrow::util::pretty::pretty_format_batches(batches)?;
            writeln!(out, "{text}")?;
        }
        OutputFormat::Csv | OutputFormat::Tsv => {
            let delim = if format == OutputFormat::Tsv { b'\t' } else { b',' };
            let mut w =
                datafusion::arrow::csv::WriterBuilder::new().with_header(true).with_delimiter(delim).build(&mut *out);
            for b in batches {
                w.write(&as_text(b)?)?;
            }
        }
        OutputFormat::Json => {
            let mut w = datafusion::arrow::json::ArrayWriter::new(&mut *out);
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
            writeln!(out)?;
        }
        OutputFormat::Ndjson => {
            let mut w = datafusion::arrow::json::LineDelimitedWriter::new(&mut *out);
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
        OutputFormat::Parquet => {
            let props = crate::sink::parquet::writer_properties(1 << 20);
            let mut w =
                datafusion::parquet::arrow::ArrowWriter::try_new(&mut *out, result.schema.clone(), Some(props))?;
            for b in batches {
                w.write(b)?;
            }
            w.close()?;
        }
    }
    Ok(())
}

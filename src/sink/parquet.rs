//! Parquet part files: the one place that decides how Parquet is written (writer properties),
//! how part files are named, where a table rolls to its next part, and where row groups are cut.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves,
};
use datafusion::parquet::basic::{Compression, ZstdLevel};
use datafusion::parquet::file::properties::{EnabledStatistics, WriterProperties, WriterVersion};
use datafusion::parquet::file::writer::SerializedFileWriter;

use super::SinkError;
use super::manifest::FileReport;

/// zstd level for every Parquet file etl writes.
pub const ZSTD_LEVEL: i32 = 1;

/// Writer settings for every Parquet file etl writes. Row groups are cut by the caller
/// ([`PartWriter::end_row_group`], where [`RowGroups`] says), so the writer's own row limit is
/// only a backstop.
///
/// A column chunk's dictionary stops at [`DICTIONARY_PAGE_BYTES`] (parquet's default is 1 MiB),
/// after which the chunk's later pages are plain. Keys, ids and timestamps are near-unique:
/// parquet interned 1 MiB of their values in every row group before giving up, which cost CPU
/// and memory and made the files larger than plain pages do.
pub fn writer_properties(max_row_group_rows: usize) -> WriterProperties {
    WriterProperties::builder()
        .set_writer_version(WriterVersion::PARQUET_1_0)
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(ZSTD_LEVEL).unwrap_or_default()))
        .set_max_row_group_row_count(Some(max_row_group_rows.max(1)))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
        .set_created_by(format!("etl {}", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The largest dictionary page of a column chunk. Against 1 MiB, on the 2M-item bench export
/// (2 cores, runs alternating): unwind CPU 0.94 (0.97 with the mapping), peak RSS 94 MiB
/// against 110, the tables 7% smaller; columns of 30K-60K distinct values a row group (`sku`)
/// lose their dictionary and grow by about a quarter, and the queries of `sql/` read the
/// output in the same time (bench/README.md, "Dictionary pages").
pub const DICTIONARY_PAGE_BYTES: usize = 256 * 1024;

/// Rows handed to parquet's writer in one call. For a decimal column, parquet copies a call's
/// values into one buffer and cuts the values from it; the column chunk's min and max
/// statistics keep two of those values, and with them the whole buffer, until the file closes.
/// A row group passed whole kept about 1.3 MB a row group alive (peak RSS 340 MiB at 8M items
/// against 187 MiB at 1M); in slices of this many rows the buffers kept are 16 times smaller.
pub const WRITE_SLICE_ROWS: usize = 8192;

/// Writes `batch` into `writer`'s current row group in slices of [`WRITE_SLICE_ROWS`] rows
/// (zero-copy views of the batch).
pub fn write_sliced<W: std::io::Write + Send>(
    writer: &mut ArrowWriter<W>,
    batch: &RecordBatch,
) -> Result<(), datafusion::parquet::errors::ParquetError> {
    let rows = batch.num_rows();
    let mut start = 0;
    while start < rows {
        let len = WRITE_SLICE_ROWS.min(rows - start);
        writer.write(&batch.slice(start, len))?;
        start += len;
    }
    Ok(())
}

/// Where row groups are cut: after this many rows or this many bytes of row data, whichever
/// comes first. The byte bound keeps a writer's memory bounded whatever the row width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowGroups {
    pub rows: usize,
    pub bytes: usize,
}

impl RowGroups {
    pub fn is_full(&self, rows: usize, bytes: usize) -> bool {
        rows >= self.rows || bytes >= self.bytes
    }
}

/// The path of part `part` of `table`, relative to the output: `table/part-00000.parquet`.
pub fn part_path(table: &str, part: usize) -> String {
    format!("{table}/part-{part:05}.parquet")
}

/// Splits a table's row data, given as the sizes of its pieces in order, into parts that roll
/// after `target_bytes`: each part is a range of pieces. Decided before anything is written, so
/// parts can be written in parallel and their boundaries depend only on the data. A table with
/// no pieces still gets one (empty) part.
pub fn plan_parts(sizes: &[u64], target_bytes: u64) -> Vec<Range<usize>> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    for (i, &n) in sizes.iter().enumerate() {
        if bytes >= target_bytes && i > start {
            parts.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes += n;
    }
    parts.push(start..sizes.len());
    parts
}

/// One Parquet part file being written.
pub struct PartWriter {
    table: String,
    rel: String,
    path: PathBuf,
    writer: ArrowWriter<File>,
    schema: SchemaRef,
    rows: u64,
    /// Rows of the row group being written (encoded by parquet, not yet flushed).
    group_rows: u64,
}

impl PartWriter {
    /// Creates `dir/<part_path>` for `table`.
    pub fn create(
        dir: &Path,
        table: &str,
        part: usize,
        schema: SchemaRef,
        props: &WriterProperties,
    ) -> Result<PartWriter, SinkError> {
        let rel = part_path(table, part);
        let path = dir.join(&rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(SinkError::io("create", parent))?;
        }
        let file = File::create(&path).map_err(SinkError::io("create", &path))?;
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props.clone()))
            .map_err(|source| SinkError::Part { table: table.to_owned(), path: path.display().to_string(), source })?;
        Ok(PartWriter { table: table.to_owned(), rel, path, writer, schema, rows: 0, group_rows: 0 })
    }

    /// Appends `batch` to the row group being written: parquet encodes and compresses it now,
    /// so the caller can build the next rows in a small batch instead of holding the whole row
    /// group in Arrow builders. An empty batch writes nothing.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        write_sliced(&mut self.writer, batch).map_err(|source| self.error(source))?;
        self.rows += batch.num_rows() as u64;
        self.group_rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Ends the row group being written (nothing when it holds no row).
    pub fn end_row_group(&mut self) -> Result<(), SinkError> {
        if self.group_rows == 0 {
            return Ok(());
        }
        self.writer.flush().map_err(|source| self.error(source))?;
        self.group_rows = 0;
        Ok(())
    }

    fn error(&self, source: datafusion::parquet::errors::ParquetError) -> SinkError {
        SinkError::Part { table: self.table.clone(), path: self.path.display().to_string(), source }
    }

    /// Ends the last row group, finishes the file (footer included) and says what it holds.
    pub fn close(mut self) -> Result<FileReport, SinkError> {
        self.end_row_group()?;
        let closed = self.writer.close();
        closed_part(self.table, self.rel, &self.path, self.rows, closed)
    }

    /// This file, with no row written yet, to be made of row groups encoded elsewhere.
    pub fn into_assembler(self) -> Result<PartAssembler, SinkError> {
        let (table, rel, path) = (self.table, self.rel, self.path);
        let err = |source| SinkError::Part { table: table.clone(), path: path.display().to_string(), source };
        if self.rows > 0 {
            return Err(err(datafusion::parquet::errors::ParquetError::General(
                "a part file with rows cannot take row groups encoded elsewhere".into(),
            )));
        }
        let (writer, factory) = self.writer.into_serialized_writer().map_err(err)?;
        let max_rows = writer.properties().max_row_group_row_count().unwrap_or(usize::MAX).max(1);
        let encoder = Arc::new(GroupEncoder {
            factory,
            schema: self.schema,
            max_rows,
            table: table.clone(),
            path: path.display().to_string(),
        });
        Ok(PartAssembler { table, rel, path, writer, encoder, rows: 0 })
    }
}

/// What a finished part file holds, once its writer closed (`closed`): its rows, its own count
/// of row groups (the writer also cuts one at its row limit), its bytes; its writing to disk
/// started.
fn closed_part(
    table: String,
    rel: String,
    path: &Path,
    rows: u64,
    closed: Result<datafusion::parquet::file::metadata::ParquetMetaData, datafusion::parquet::errors::ParquetError>,
) -> Result<FileReport, SinkError> {
    let row_groups =
        closed.map_err(|source| SinkError::Part { table, path: path.display().to_string(), source })?.num_row_groups();
    super::start_writeback(path);
    let bytes = std::fs::metadata(path).map_err(SinkError::io("inspect", path))?.len();
    Ok(FileReport { path: rel, rows, row_groups, bytes })
}

/// A part file made of row groups encoded away from it, on any thread ([`GroupEncoder`]), and
/// appended in order: the same file, byte for byte, as a [`PartWriter`] given the same rows and
/// the same row group ends. It lets the row groups of one file be encoded on several workers.
pub struct PartAssembler {
    table: String,
    rel: String,
    path: PathBuf,
    writer: SerializedFileWriter<File>,
    encoder: Arc<GroupEncoder>,
    rows: u64,
}

impl PartAssembler {
    /// What encodes this file's row groups (shared by the workers).
    pub fn encoder(&self) -> Arc<GroupEncoder> {
        self.encoder.clone()
    }

    /// Appends row groups an [`Encoding`] of this file's encoder made, in their order.
    pub fn append(&mut self, groups: Vec<EncodedGroup>) -> Result<(), SinkError> {
        for g in groups {
            let (table, path) = (&self.table, &self.path);
            let err = |source| SinkError::Part { table: table.clone(), path: path.display().to_string(), source };
            let mut row_group = self.writer.next_row_group().map_err(err)?;
            for chunk in g.chunks {
                chunk.append_to_row_group(&mut row_group).map_err(err)?;
            }
            row_group.close().map_err(err)?;
            self.rows += g.rows;
        }
        Ok(())
    }

    /// Finishes the file (footer included) and says what it holds, as [`PartWriter::close`].
    pub fn close(self) -> Result<FileReport, SinkError> {
        let closed = self.writer.close();
        closed_part(self.table, self.rel, &self.path, self.rows, closed)
    }
}

/// Encodes the row groups of one [`PartAssembler`]'s file, on whichever thread calls it.
pub struct GroupEncoder {
    factory: ArrowRowGroupWriterFactory,
    /// The file's Arrow schema: a batch's columns are encoded as its fields.
    schema: SchemaRef,
    /// The writer properties' row limit: a row group is cut there, as [`ArrowWriter`] cuts it.
    max_rows: usize,
    /// The file's table and path, for errors.
    table: String,
    path: String,
}

impl GroupEncoder {
    fn error(&self, source: datafusion::parquet::errors::ParquetError) -> SinkError {
        SinkError::Part { table: self.table.clone(), path: self.path.clone(), source }
    }

    /// Starts encoding the rows between two row group ends of a [`PartWriter`].
    pub fn start(&self) -> Encoding<'_> {
        Encoding { encoder: self, open: None, done: Vec::new() }
    }
}

/// One row group, encoded and compressed, waiting to be appended to its file.
pub struct EncodedGroup {
    chunks: Vec<ArrowColumnChunk>,
    rows: u64,
}

/// The rows [`GroupEncoder::start`] began: what a [`PartWriter`] writes between two calls of
/// [`PartWriter::end_row_group`], as the row groups it would have made.
pub struct Encoding<'a> {
    encoder: &'a GroupEncoder,
    /// The row group being encoded: its column writers and rows.
    open: Option<(Vec<ArrowColumnWriter>, usize)>,
    done: Vec<EncodedGroup>,
}

impl Encoding<'_> {
    /// As [`PartWriter::write`]: in slices of [`WRITE_SLICE_ROWS`] rows, each cut where the row
    /// limit falls.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), SinkError> {
        let rows = batch.num_rows();
        let mut start = 0;
        while start < rows {
            let len = WRITE_SLICE_ROWS.min(rows - start);
            self.write_slice(&batch.slice(start, len)).map_err(|e| self.encoder.error(e))?;
            start += len;
        }
        Ok(())
    }

    fn write_slice(&mut self, batch: &RecordBatch) -> Result<(), datafusion::parquet::errors::ParquetError> {
        let mut batch = batch.clone();
        while batch.num_rows() > 0 {
            let (writers, buffered) = match &mut self.open {
                Some(open) => open,
                // The index only matters to encryption, which etl does not use.
                open => open.insert((self.encoder.factory.create_column_writers(0)?, 0)),
            };
            let take = batch.num_rows().min(self.encoder.max_rows - *buffered);
            let part = batch.slice(0, take);
            let mut leaves = writers.iter_mut();
            for (field, column) in self.encoder.schema.fields().iter().zip(part.columns()) {
                for leaf in compute_leaves(field.as_ref(), column)? {
                    let Some(writer) = leaves.next() else {
                        return Err(datafusion::parquet::errors::ParquetError::General(
                            "more columns than the file's schema".into(),
                        ));
                    };
                    writer.write(&leaf)?;
                }
            }
            *buffered += take;
            if *buffered >= self.encoder.max_rows {
                self.cut()?;
            }
            batch = batch.slice(take, batch.num_rows() - take);
        }
        Ok(())
    }

    fn cut(&mut self) -> Result<(), datafusion::parquet::errors::ParquetError> {
        if let Some((writers, rows)) = self.open.take() {
            let chunks = writers.into_iter().map(ArrowColumnWriter::close).collect::<Result<Vec<_>, _>>()?;
            self.done.push(EncodedGroup { chunks, rows: rows as u64 });
        }
        Ok(())
    }

    /// The row groups, the last one ended here (none when no row was written).
    pub fn finish(mut self) -> Result<Vec<EncodedGroup>, SinkError> {
        self.cut().map_err(|e| self.encoder.error(e))?;
        Ok(self.done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_roll_after_the_target() {
        assert_eq!(plan_parts(&[], 10), vec![0..0]);
        assert_eq!(plan_parts(&[5, 5, 5], 100), vec![0..3]);
        assert_eq!(plan_parts(&[5, 5, 5, 5], 10), vec![0..2, 2..4]);
        // A piece larger than the target is a part of its own, never split.
        assert_eq!(plan_parts(&[50, 1, 1], 10), vec![0..1, 1..3]);
        assert_eq!(part_path("user", 3), "user/part-00003.parquet");
    }

    /// A row group larger than a write slice is one row group of every row, values and types
    /// exact, and the chunk's statistics are the extremes of all slices.
    #[test]
    fn a_row_group_written_in_slices_is_one_row_group_of_every_row() {
        use datafusion::arrow::array::{Array, Decimal128Array, StringArray};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use datafusion::parquet::file::statistics::Statistics;
        use std::sync::Arc;

        let rows = 2 * WRITE_SLICE_ROWS + 123;
        let schema = Arc::new(Schema::new(vec![
            Field::new("price", DataType::Decimal128(38, 2), true),
            Field::new("sku", DataType::Utf8, false),
        ]));
        // The extremes sit in the first and the last slice.
        let prices: Decimal128Array = (0..rows)
            .map(|i| if i % 7 == 0 { None } else { Some((i as i128 * 7_919) % 100_003 - 50_000) })
            .chain([Some(-10i128.pow(37)), Some(10i128.pow(37))])
            .collect::<Decimal128Array>()
            .with_precision_and_scale(38, 2)
            .unwrap();
        let skus = StringArray::from_iter_values((0..rows + 2).map(|i| format!("SKU-{i:06}")));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(prices), Arc::new(skus)]).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let mut part = PartWriter::create(tmp.path(), "t", 0, schema, &writer_properties(1 << 20)).unwrap();
        part.write(&batch).unwrap();
        let report = part.close().unwrap();
        assert_eq!((report.rows, report.row_groups), ((rows + 2) as u64, 1));

        let file = File::open(tmp.path().join(&report.path)).unwrap();
        let reader = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        let meta = reader.metadata().clone();
        assert_eq!(meta.num_row_groups(), 1);
        match meta.row_group(0).column(0).statistics() {
            Some(Statistics::FixedLenByteArray(v)) => {
                let be = |x: i128| x.to_be_bytes().to_vec();
                assert_eq!(v.min_opt().map(|m| m.data().to_vec()), Some(be(-10i128.pow(37))));
                assert_eq!(v.max_opt().map(|m| m.data().to_vec()), Some(be(10i128.pow(37))));
                assert_eq!(v.null_count_opt(), Some(rows.div_ceil(7) as u64));
            }
            other => panic!("decimal statistics: {other:?}"),
        }
        let read: Vec<RecordBatch> = reader.build().unwrap().collect::<Result<_, _>>().unwrap();
        let read = datafusion::arrow::compute::concat_batches(&read[0].schema(), &read).unwrap();
        assert_eq!(read, batch);
        assert_eq!(read.column(0).null_count(), rows.div_ceil(7));
    }

    /// What pass two does: a row group handed over in batches of [`WRITE_SLICE_ROWS`] rows as
    /// they are built gives the same file, byte for byte, as the row group built whole and
    /// written at once; row groups end where `end_row_group` says.
    #[test]
    fn a_row_group_written_batch_by_batch_is_the_same_file_as_written_whole() {
        use datafusion::arrow::array::{Decimal128Array, Int64Array, StringArray};
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use std::sync::Arc;

        let schema = Arc::new(Schema::new(vec![
            Field::new("price", DataType::Decimal128(38, 2), true),
            Field::new("qty", DataType::Int64, true),
            Field::new("sku", DataType::Utf8, false),
        ]));
        let batch = |rows: usize, seed: i64| {
            let prices: Decimal128Array = (0..rows as i64)
                .map(|i| if i % 5 == 0 { None } else { Some(((i * 7_919 + seed) % 100_003) as i128) })
                .collect::<Decimal128Array>()
                .with_precision_and_scale(38, 2)
                .unwrap();
            let qty: Int64Array = (0..rows as i64).map(|i| (i % 3 != 0).then_some(i * seed)).collect();
            let skus = StringArray::from_iter_values((0..rows).map(|i| format!("SKU-{:06}", i % 4_000)));
            RecordBatch::try_new(schema.clone(), vec![Arc::new(prices), Arc::new(qty), Arc::new(skus)]).unwrap()
        };
        let groups = [batch(2 * WRITE_SLICE_ROWS + 123, 1), batch(WRITE_SLICE_ROWS - 1, 2)];
        let tmp = tempfile::tempdir().unwrap();
        let props = writer_properties(1 << 20);

        let mut whole = PartWriter::create(&tmp.path().join("whole"), "t", 0, schema.clone(), &props).unwrap();
        for g in &groups {
            whole.write(g).unwrap();
            whole.end_row_group().unwrap();
        }
        let whole = whole.close().unwrap();

        let mut pieces = PartWriter::create(&tmp.path().join("pieces"), "t", 0, schema.clone(), &props).unwrap();
        for g in &groups {
            let mut start = 0;
            while start < g.num_rows() {
                let len = WRITE_SLICE_ROWS.min(g.num_rows() - start);
                // A batch of its own, as a builder would finish it, not a view of the group.
                let copy = datafusion::arrow::compute::concat_batches(&schema, [&g.slice(start, len)]).unwrap();
                pieces.write(&copy).unwrap();
                start += len;
            }
            pieces.end_row_group().unwrap();
            pieces.end_row_group().unwrap(); // an empty row group is not one
        }
        let pieces = pieces.close().unwrap();

        let rows = groups.iter().map(|g| g.num_rows() as u64).sum::<u64>();
        assert_eq!((whole.rows, whole.row_groups), (rows, 2));
        assert_eq!((pieces.rows, pieces.row_groups), (rows, 2));
        let read = |dir: &str, r: &FileReport| std::fs::read(tmp.path().join(dir).join(&r.path)).unwrap();
        assert!(read("pieces", &pieces) == read("whole", &whole), "the two files differ");
    }

    /// A near-unique column's dictionary stops at [`DICTIONARY_PAGE_BYTES`] (its 50,000 values,
    /// 1.45 MB as a plain dictionary page, would fill parquet's default 1 MiB); a column of few values keeps its dictionary
    /// for the whole chunk.
    #[test]
    fn dictionaries_stop_at_the_page_limit() {
        use datafusion::arrow::array::StringArray;
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        use datafusion::parquet::column::page::Page;
        use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
        use std::sync::Arc;

        let rows = 50_000;
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("status", DataType::Utf8, false),
        ]));
        let ids = StringArray::from_iter_values((0..rows).map(|i| format!("ORDER#{i:010}#{:08x}", i * 7_919)));
        let status = StringArray::from_iter_values((0..rows).map(|i| ["paid", "shipped", "cancelled"][i % 3]));
        let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(status)]).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let mut part = PartWriter::create(tmp.path(), "t", 0, schema, &writer_properties(1 << 20)).unwrap();
        part.write(&batch).unwrap();
        let report = part.close().unwrap();

        let reader = SerializedFileReader::new(File::open(tmp.path().join(&report.path)).unwrap()).unwrap();
        let group = reader.get_row_group(0).unwrap();
        let dictionary = |column: usize| {
            let mut pages = group.get_column_page_reader(column).unwrap();
            match pages.get_next_page().unwrap() {
                Some(Page::DictionaryPage { buf, num_values, .. }) => (buf.len(), num_values as usize),
                other => panic!("column {column} starts with {other:?}, not a dictionary page"),
            }
        };
        let (bytes, values) = dictionary(0);
        assert!(bytes <= DICTIONARY_PAGE_BYTES + 64, "a dictionary page of {bytes} bytes");
        assert!(values < rows / 4, "{values} of {rows} values went into the dictionary");
        assert_eq!(dictionary(1).1, 3);
    }

    #[test]
    fn row_groups_cut_by_rows_or_bytes() {
        let g = RowGroups { rows: 10, bytes: 100 };
        assert!(!g.is_full(9, 99));
        assert!(g.is_full(10, 0));
        assert!(g.is_full(1, 100));
    }
}

//! Writes the shop as a DynamoDB full export: `_started`, gzip data files (one empty, as AWS
//! writes), `manifest-files.json`, `manifest-summary.json` and their `.md5` side files, with
//! names and times drawn from the seed, in DynamoDB JSON or Amazon Ion text ([`super::ion`]).
//! Data files are written in parallel, one thread per file.
//! Owns its own gzip and MD5 writing; never uses the pipeline's readers or writers.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use flate2::{Compression, GzBuilder};
use md5::{Digest, Md5};
use serde::Serialize;

use super::item::{ExportLine, Item};
use super::rng::{Rng, TAG_EXPORT};
use super::shop::{DAY, KINDS, Kind, Shop, T_EXPORT};
use super::{SampleError, SampleFormat};

/// What [`write`] wrote.
pub(super) struct Written {
    /// `out/AWSDynamoDB/<ExportId>`.
    pub export_dir: PathBuf,
    /// Items per [`super::shop::Kind`].
    pub counts: [u64; KINDS],
    /// Total size of the data files, the empty one included.
    pub compressed_bytes: u64,
}

/// Writes the export of `shop` under `out/AWSDynamoDB/<ExportId>/`; refuses an existing folder.
pub(super) fn write(shop: &Shop, out: &Path, format: SampleFormat) -> Result<Written, SampleError> {
    write_full(shop, &ExportNames::new(shop.seed(), shop.files()), out, format)
}

/// What a full export's data files are drawn from: items by partition (data file).
pub(super) trait Partitions: Sync {
    /// Non-empty data files.
    fn files(&self) -> usize;
    /// Calls `emit` for every item of `partition`, in a fixed order.
    fn for_each_in(
        &self,
        partition: usize,
        emit: &mut dyn FnMut(Kind, &Item) -> Result<(), SampleError>,
    ) -> Result<(), SampleError>;
}

impl Partitions for Shop {
    fn files(&self) -> usize {
        Shop::files(self)
    }

    fn for_each_in(
        &self,
        partition: usize,
        emit: &mut dyn FnMut(Kind, &Item) -> Result<(), SampleError>,
    ) -> Result<(), SampleError> {
        self.for_each_item(Some(partition), |kind, item| emit(kind, item))
    }
}

/// Writes a full export named `export` of `items` under `out/AWSDynamoDB/<ExportId>/`; refuses an
/// existing folder.
pub(super) fn write_full<P: Partitions>(
    items: &P,
    export: &ExportNames,
    out: &Path,
    format: SampleFormat,
) -> Result<Written, SampleError> {
    let files = items.files();

    let export_dir = out.join("AWSDynamoDB").join(&export.id);
    if export_dir.exists() {
        return Err(SampleError::ExportExists { path: export_dir });
    }
    let data_dir = export_dir.join("data");
    fs::create_dir_all(&data_dir).map_err(|source| SampleError::CreateDir { path: data_dir.clone(), source })?;
    write_file(&export_dir.join("_started"), b"")?;

    // Slot `export.empty_slot` holds the empty file; the others hold partitions 0..files in order.
    let slots: Vec<Option<usize>> = (0..=files)
        .map(|slot| match slot.cmp(&export.empty_slot) {
            std::cmp::Ordering::Less => Some(slot),
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(slot - 1),
        })
        .collect();
    let ext = format.extension();
    let paths: Vec<PathBuf> = export.file_names.iter().map(|name| data_dir.join(format!("{name}{ext}"))).collect();
    let mut partition_paths = vec![PathBuf::new(); files];
    for (slot, partition) in slots.iter().enumerate() {
        if let Some(p) = partition {
            partition_paths[*p] = paths[slot].clone();
        }
    }

    let stats = write_partitions(items, &partition_paths, format)?;
    write_file(&paths[export.empty_slot], &EMPTY_GZIP)?;
    let empty = FileStats {
        counts: [0; KINDS],
        raw_bytes: 0,
        compressed_bytes: EMPTY_GZIP.len() as u64,
        md5: Md5::digest(EMPTY_GZIP).into(),
    };

    let mut manifest_files = Vec::new();
    for (slot, partition) in slots.iter().enumerate() {
        let s = match partition {
            Some(p) => &stats[*p],
            None => &empty,
        };
        manifest_files.push(ManifestFileLine::new(
            s.items(),
            s.md5,
            format!("AWSDynamoDB/{}/data/{}{ext}", export.id, export.file_names[slot]),
        ));
    }

    let mut counts = [0u64; KINDS];
    let mut raw_bytes = 0;
    let mut compressed_bytes = empty.compressed_bytes;
    for s in &stats {
        for (total, n) in counts.iter_mut().zip(s.counts) {
            *total += n;
        }
        raw_bytes += s.raw_bytes;
        compressed_bytes += s.compressed_bytes;
    }
    let items: u64 = counts.iter().sum();
    write_manifests(&export_dir, &manifest_files, &export.summary(items, raw_bytes, format))?;
    Ok(Written { export_dir, counts, compressed_bytes })
}

/// Writes `manifest-files.json`, `manifest-summary.json` and their `.md5` side files.
pub(super) fn write_manifests(
    export_dir: &Path,
    lines: &[ManifestFileLine],
    summary: &ManifestSummary,
) -> Result<(), SampleError> {
    let files_path = export_dir.join("manifest-files.json");
    let mut manifest_files = Vec::new();
    for line in lines {
        serde_json::to_writer(&mut manifest_files, line)
            .map_err(|source| SampleError::Encode { path: files_path.clone(), source })?;
        manifest_files.push(b'\n');
    }
    write_file(&files_path, &manifest_files)?;
    write_file(&export_dir.join("manifest-files.md5"), STANDARD.encode(Md5::digest(&manifest_files)).as_bytes())?;

    let summary_path = export_dir.join("manifest-summary.json");
    let summary_bytes =
        serde_json::to_vec(summary).map_err(|source| SampleError::Encode { path: summary_path.clone(), source })?;
    write_file(&summary_path, &summary_bytes)?;
    write_file(&export_dir.join("manifest-summary.md5"), STANDARD.encode(Md5::digest(&summary_bytes)).as_bytes())
}

/// Writes `raw` gzip-compressed to `path`; returns the MD5 and size of the compressed bytes.
pub(super) fn write_gzip(path: &Path, raw: &[u8]) -> Result<([u8; 16], u64), SampleError> {
    if raw.is_empty() {
        write_file(path, &EMPTY_GZIP)?;
        return Ok((Md5::digest(EMPTY_GZIP).into(), EMPTY_GZIP.len() as u64));
    }
    let io_err = |source| SampleError::Write { path: path.to_owned(), source };
    let file = File::create(path).map_err(io_err)?;
    let hashing = Md5Writer { inner: BufWriter::new(file), md5: Md5::new(), len: 0 };
    let mut gz = GzBuilder::new().write(hashing, Compression::default());
    gz.write_all(raw).map_err(io_err)?;
    let Md5Writer { inner, md5, len } = gz.finish().map_err(io_err)?;
    inner.into_inner().map_err(|e| io_err(e.into_error()))?.sync_all().map_err(io_err)?;
    Ok((md5.finalize().into(), len))
}

/// The 20-byte gzip of nothing that AWS writes for an empty partition: header with mtime 0,
/// XFL 0, OS 255, one empty final fixed-Huffman block, CRC-32 0, size 0.
pub(super) const EMPTY_GZIP: [u8; 20] = [
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00,
];

pub(super) const BUCKET: &str = "etl-sample-exports";
const REGION: &str = "eu-west-1";
const ACCOUNT: &str = "111122223333";
const TABLE: &str = "shop";

/// Names and times of the export, all drawn from the seed.
pub(super) struct ExportNames {
    pub(super) id: String,
    pub(super) start_ms: u64,
    pub(super) end_ms: u64,
    /// The full export's `exportTime`: its start for the sample, a chosen time for the final state.
    pub(super) export_time_ms: u64,
    pub(super) table_id: String,
    pub(super) file_names: Vec<String>,
    pub(super) empty_slot: usize,
}

impl ExportNames {
    pub(super) fn new(seed: u64, files: usize) -> Self {
        let mut r = Rng::stream(seed, TAG_EXPORT, 0);
        let start_ms = T_EXPORT * 1000 + r.below(DAY * 1000);
        Self::draw(&mut r, start_ms, files)
    }

    /// Another export of the same table, started after `after_ms`, drawn from stream `(tag, n)`.
    pub(super) fn later(seed: u64, tag: u64, n: u64, after_ms: u64, files: usize) -> Self {
        let table_id = Self::new(seed, 0).table_id;
        let mut r = Rng::stream(seed, tag, n);
        let start_ms = after_ms + r.range(60_000, 10 * 60_000);
        ExportNames { table_id, export_time_ms: after_ms, ..Self::draw(&mut r, start_ms, files) }
    }

    fn draw(r: &mut Rng, start_ms: u64, files: usize) -> Self {
        let end_ms = start_ms + r.range(5 * 60_000, 15 * 60_000);
        let id = format!("{start_ms:014}-{:08x}", r.below(1 << 32));
        let u = [r.next_u64(), r.next_u64()];
        let table_id = format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            u[0] >> 32,
            (u[0] >> 16) & 0xffff,
            u[0] & 0x0fff,
            0x8000 | ((u[1] >> 48) & 0x3fff),
            u[1] & 0xffff_ffff_ffff,
        );
        const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
        let mut file_names: Vec<String> = Vec::with_capacity(files + 1);
        while file_names.len() < files + 1 {
            let name: String = (0..26).map(|_| char::from(ALPHABET[r.below(32) as usize])).collect();
            if !file_names.contains(&name) {
                file_names.push(name);
            }
        }
        let empty_slot = r.below(files as u64 + 1) as usize;
        ExportNames { id, start_ms, end_ms, export_time_ms: start_ms, table_id, file_names, empty_slot }
    }

    /// The summary of a full export taken at `export_time_ms` (its start, for the sample).
    pub(super) fn summary(&self, items: u64, raw_bytes: u64, format: SampleFormat) -> ManifestSummary {
        self.full_summary(items, raw_bytes, format, self.export_time_ms)
    }

    pub(super) fn full_summary(
        &self,
        items: u64,
        raw_bytes: u64,
        format: SampleFormat,
        export_time_ms: u64,
    ) -> ManifestSummary {
        let table_arn = format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}");
        ManifestSummary {
            version: "2020-06-30",
            export_arn: format!("{table_arn}/export/{}", self.id),
            start_time: iso_millis(self.start_ms),
            end_time: iso_millis(self.end_ms),
            table_arn,
            table_id: self.table_id.clone(),
            export_time: Some(iso_millis(export_time_ms)),
            export_from_time: None,
            export_to_time: None,
            s3_bucket: BUCKET,
            s3_prefix: None,
            s3_sse_algorithm: "AES256",
            s3_sse_kms_key_id: None,
            manifest_files_s3_key: format!("AWSDynamoDB/{}/manifest-files.json", self.id),
            billed_size_bytes: raw_bytes,
            item_count: items,
            output_format: format.output_format(),
            output_view: None,
            export_type: None,
        }
    }

    /// The summary of an incremental export of the window `from_ms..to_ms` in `view`.
    pub(super) fn incremental_summary(
        &self,
        records: u64,
        raw_bytes: u64,
        format: SampleFormat,
        window: (u64, u64),
        view: &'static str,
    ) -> ManifestSummary {
        ManifestSummary {
            version: "2023-08-01",
            export_time: None,
            export_from_time: Some(iso_millis(window.0)),
            export_to_time: Some(iso_millis(window.1)),
            output_view: Some(view),
            export_type: Some("INCREMENTAL_EXPORT"),
            ..self.full_summary(records, raw_bytes, format, 0)
        }
    }
}

/// `manifest-summary.json`; a full export has `exportTime`, an incremental one its window, view
/// and type, in the order AWS writes them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ManifestSummary {
    version: &'static str,
    export_arn: String,
    start_time: String,
    end_time: String,
    table_arn: String,
    table_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    export_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    export_from_time: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    export_to_time: Option<String>,
    s3_bucket: &'static str,
    s3_prefix: Option<&'static str>,
    s3_sse_algorithm: &'static str,
    s3_sse_kms_key_id: Option<&'static str>,
    manifest_files_s3_key: String,
    billed_size_bytes: u64,
    item_count: u64,
    output_format: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_view: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    export_type: Option<&'static str>,
}

/// One line of `manifest-files.json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ManifestFileLine {
    item_count: u64,
    md5_checksum: String,
    etag: String,
    data_file_s3_key: String,
}

impl ManifestFileLine {
    /// A data file's line: its items, the MD5 of its bytes, and its key from the bucket prefix.
    pub(super) fn new(item_count: u64, md5: [u8; 16], data_file_s3_key: String) -> Self {
        ManifestFileLine {
            item_count,
            md5_checksum: STANDARD.encode(md5),
            etag: format!("{}-1", hex(&Md5::digest(md5))),
            data_file_s3_key,
        }
    }
}

/// `2026-01-14T10:18:50.622Z` from epoch milliseconds (proleptic Gregorian, UTC).
pub(super) fn iso_millis(ms: u64) -> String {
    let (secs, millis) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / DAY, secs % DAY);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (never negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), SampleError> {
    fs::write(path, bytes).map_err(|source| SampleError::Write { path: path.to_owned(), source })
}

#[derive(Debug, Clone)]
struct FileStats {
    counts: [u64; KINDS],
    raw_bytes: u64,
    compressed_bytes: u64,
    md5: [u8; 16],
}

impl FileStats {
    fn items(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Passes bytes through to `inner` while hashing and counting them.
struct Md5Writer<W> {
    inner: W,
    md5: Md5,
    len: u64,
}

impl<W: Write> Write for Md5Writer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.md5.update(&buf[..written]);
        self.len += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes partition `i` to `paths[i]` for every `i`, on the pipeline's worker pool (one task per
/// file, at most `available_parallelism` threads; the first failure stops the others).
fn write_partitions<P: Partitions>(
    shop: &P,
    paths: &[PathBuf],
    format: SampleFormat,
) -> Result<Vec<FileStats>, SampleError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let done = crate::pipeline::pool::run(
        threads,
        paths.len(),
        |_| Ok(Vec::new()),
        |done: &mut Vec<(usize, FileStats)>, i, stop| {
            stop.check()?;
            done.push((i, write_partition(shop, i, &paths[i], format)?));
            Ok(())
        },
    )?;
    let mut stats: Vec<Option<FileStats>> = vec![None; paths.len()];
    for (i, s) in done.into_iter().flatten() {
        stats[i] = Some(s);
    }
    // The pool ran every task exactly once, and none failed.
    Ok(stats.into_iter().flatten().collect())
}

fn write_partition<P: Partitions>(
    shop: &P,
    partition: usize,
    path: &Path,
    format: SampleFormat,
) -> Result<FileStats, SampleError> {
    const CHUNK: usize = 1 << 20;
    let io_err = |source| SampleError::Write { path: path.to_owned(), source };
    let file = File::create(path).map_err(io_err)?;
    let hashing = Md5Writer { inner: BufWriter::with_capacity(CHUNK, file), md5: Md5::new(), len: 0 };
    let mut gz = GzBuilder::new().write(hashing, Compression::default());
    let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + 64 * 1024);
    let mut ion = String::new();
    let mut counts = [0u64; KINDS];
    let mut raw_bytes = 0u64;
    shop.for_each_in(partition, &mut |kind, item| {
        match format {
            SampleFormat::DynamodbJson => {
                serde_json::to_writer(&mut buf, &ExportLine(item))
                    .map_err(|source| SampleError::Encode { path: path.to_owned(), source })?;
                buf.push(b'\n');
            }
            SampleFormat::Ion => {
                ion.clear();
                super::ion::write_line(&mut ion, item);
                buf.extend_from_slice(ion.as_bytes());
            }
        }
        counts[kind as usize] += 1;
        if buf.len() >= CHUNK {
            raw_bytes += buf.len() as u64;
            gz.write_all(&buf).map_err(io_err)?;
            buf.clear();
        }
        Ok(())
    })?;
    raw_bytes += buf.len() as u64;
    gz.write_all(&buf).map_err(io_err)?;
    let hashing = gz.finish().map_err(io_err)?;
    let Md5Writer { inner, md5, len } = hashing;
    inner.into_inner().map_err(|e| io_err(e.into_error()))?.sync_all().map_err(io_err)?;
    Ok(FileStats { counts, raw_bytes, compressed_bytes: len, md5: md5.finalize().into() })
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use flate2::read::MultiGzDecoder;

    use super::*;

    #[test]
    fn times_are_canonical() {
        assert_eq!(iso_millis(1_768_385_930_622), "2026-01-14T10:18:50.622Z");
        assert_eq!(iso_millis(T_EXPORT * 1000), "2026-06-01T00:00:00.000Z");
        assert_eq!(iso_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn gzip_of_nothing_matches_aws_and_decodes_empty() {
        assert_eq!(STANDARD.encode(Md5::digest(EMPTY_GZIP)), "FjvgqIxwymKf1RbbqtrZag==");
        let mut out = Vec::new();
        MultiGzDecoder::new(&EMPTY_GZIP[..]).read_to_end(&mut out).unwrap();
        assert!(out.is_empty());
        // flate2 happens to write the same bytes today; the constant keeps that true tomorrow.
        let flate2_empty = GzBuilder::new().write(Vec::new(), Compression::default()).finish().unwrap();
        assert_eq!(flate2_empty, EMPTY_GZIP);
    }

    #[test]
    fn a_file_that_cannot_be_written_is_the_error_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let shop = Shop::new(5, 40, 4).unwrap();
        let bad = tmp.path().join("missing/part-1.json.gz");
        let paths: Vec<PathBuf> =
            (0..4).map(|i| if i == 1 { bad.clone() } else { tmp.path().join(format!("part-{i}.json.gz")) }).collect();
        match write_partitions(&shop, &paths, SampleFormat::DynamodbJson) {
            Err(SampleError::Write { path, .. }) => assert_eq!(path, bad),
            other => panic!("expected the write error of {}, got {other:?}", bad.display()),
        }
        // With every path writable, each file is written once, in order.
        let paths: Vec<PathBuf> = (0..4).map(|i| tmp.path().join(format!("ok-{i}.json.gz"))).collect();
        let stats = write_partitions(&shop, &paths, SampleFormat::DynamodbJson).unwrap();
        assert_eq!(stats.len(), 4);
        assert!(paths.iter().all(|p| p.is_file()));
    }
}

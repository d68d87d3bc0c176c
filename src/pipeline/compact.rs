//! Compacting the incremental exports an output keeps in `_etl/base/` into one.
//!
//! An apply reads again what the output keeps ([`super::apply`]): the full export and the
//! incremental exports applied since. Kept as they came, the incremental exports would grow with
//! every scheduled run, and so would the reduce of every later apply (a year of hourly exports is
//! 8,760 of them, every one read again each hour). So a chain run keeps the full export and, in
//! place of its incremental exports, one incremental export etl writes itself: the chain's final
//! change per key, with the `WriteTimestampMicros` of the write that won, in DynamoDB's own layout
//! and format (an `INCREMENTAL_EXPORT` of `NEW_IMAGE` view in DynamoDB JSON, gzip data files of
//! [`RECORDS_PER_FILE`] records in the shared `AWSDynamoDB/data/` folder, `manifest-files.json`
//! with their MD5s and item counts, `.md5` side files), covering from the first window's start to
//! the last window's end.
//!
//! Reducing it with later exports gives the final changes that reducing every export it replaces
//! gives (the last write wins, and it holds each key's last write), so an apply onto a compacted
//! output writes the same tables, byte for byte. It leaves out the deletes of keys the full export
//! does not hold: they change nothing the next run reads. So what an output keeps, and what an
//! apply reads again, is bounded by the table and the keys changed, not by the number of exports
//! applied. The export's id is `etl-compacted-<last window's end, epoch ms>-<MD5 of its data>`,
//! so a name is only ever given the same bytes (an object-store output's `_etl/base/` is shared by
//! its runs).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use md5::{Digest as _, Md5};

use super::UnwindError;
use crate::source::ExportInfo;
use crate::source::chain::export_id;

pub use crate::state::COMPACTED_PREFIX;

/// An export written by [`write`] (as its id says).
pub fn is_compacted(e: &ExportInfo) -> bool {
    export_id(e).starts_with(COMPACTED_PREFIX)
}

/// One key's final change, as the compacted export holds it.
#[derive(Debug, Clone, Copy)]
pub struct FinalChange<'a> {
    pub write_time_micros: i64,
    /// The key attributes, as a DynamoDB JSON object.
    pub keys: &'a str,
    /// The new image, as a DynamoDB JSON object; `None` for a delete.
    pub image: Option<&'a str>,
}

/// What the chain a compacted export replaces covers.
#[derive(Debug, Clone)]
pub struct Covers<'a> {
    pub table_arn: Option<&'a str>,
    /// The first window's `exportFromTime`.
    pub from_time: &'a str,
    /// The last window's `exportToTime`.
    pub to_time: &'a str,
}

/// A compacted export written under `root` (which holds its `AWSDynamoDB/`).
#[derive(Debug, Clone)]
pub struct Compacted {
    pub id: String,
    /// Its files, relative to `root`, `/`-separated: the manifests and side files, then the data
    /// files in order.
    pub files: Vec<String>,
    /// Change records written.
    pub records: u64,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> UnwindError + '_ {
    move |source| UnwindError::Io { action: "write", path: path.display().to_string(), source }
}

/// Change records per data file of a compacted export: its files are parsed in parallel by the
/// next apply's reduce, and written in parallel here.
pub const RECORDS_PER_FILE: usize = 131_072;

/// The manifests of a compacted export, in its folder (its data files are in the shared
/// `AWSDynamoDB/data/`), in the order [`write`] lists them.
pub const MANIFEST_FILES: [&str; 4] =
    ["manifest-files.json", "manifest-files.md5", "manifest-summary.json", "manifest-summary.md5"];

/// Writes `changes` (in the order given) as one incremental export under `root`, its data files
/// of [`RECORDS_PER_FILE`] records each written on `threads` workers. The bytes depend only on
/// `changes` and `covers`.
pub fn write(
    root: &Path,
    covers: &Covers<'_>,
    changes: &[FinalChange<'_>],
    threads: usize,
) -> Result<Compacted, UnwindError> {
    let data_dir = root.join("AWSDynamoDB").join("data");
    std::fs::create_dir_all(&data_dir).map_err(io(&data_dir))?;
    let parts: Vec<&[FinalChange<'_>]> =
        if changes.is_empty() { vec![&[]] } else { changes.chunks(RECORDS_PER_FILE).collect() };
    let staged = |n: usize| data_dir.join(format!(".compacting-{n}.json.gz"));
    let written = super::pool::run::<_, UnwindError>(
        threads,
        parts.len(),
        |_| Ok(Vec::new()),
        |out: &mut Vec<(usize, [u8; 16])>, n, stop| {
            stop.check::<UnwindError>()?;
            out.push((n, write_part(&staged(n), parts[n])?));
            Ok(())
        },
    )?;
    let mut digests = vec![[0u8; 16]; parts.len()];
    for (n, d) in written.into_iter().flatten() {
        digests[n] = d;
    }
    // The id names the data: the MD5 of the data files' MD5s, in order.
    let mut all = Md5::new();
    digests.iter().for_each(|d| all.update(d));
    let hex: String = all.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect();
    let end_ms = chrono::DateTime::parse_from_rfc3339(covers.to_time).map(|t| t.timestamp_millis()).unwrap_or(0);
    let id = format!("{COMPACTED_PREFIX}{end_ms:014}-{hex}");
    let mut files_bytes = Vec::new();
    let mut data_keys = Vec::new();
    for (n, (part, digest)) in parts.iter().zip(&digests).enumerate() {
        let data_key = format!("AWSDynamoDB/data/{id}-{n}.json.gz");
        let data_path = root.join(&data_key);
        std::fs::rename(staged(n), &data_path).map_err(io(&data_path))?;
        let line = serde_json::json!({
            "itemCount": part.len(),
            "md5Checksum": crate::source::md5_base64_digest(digest),
            "dataFileS3Key": data_key,
        });
        files_bytes.extend_from_slice(format!("{line}\n").as_bytes());
        data_keys.push(data_key);
    }
    let records = changes.len() as u64;

    let export_rel = format!("AWSDynamoDB/{id}");
    let export_dir = root.join(&export_rel);
    std::fs::create_dir_all(&export_dir).map_err(io(&export_dir))?;
    let export_arn = match covers.table_arn {
        Some(t) => format!("{t}/export/{id}"),
        None => format!("export/{id}"),
    };
    // What etl reads of a summary, in the order AWS writes it; no wall-clock time, so the same
    // chain always gives the same bytes.
    let summary = serde_json::json!({
        "version": "2023-08-01",
        "exportArn": export_arn,
        "tableArn": covers.table_arn,
        "exportFromTime": covers.from_time,
        "exportToTime": covers.to_time,
        "manifestFilesS3Key": format!("{export_rel}/manifest-files.json"),
        "itemCount": records,
        "outputFormat": "DYNAMODB_JSON",
        "outputView": "NEW_IMAGE",
        "exportType": "INCREMENTAL_EXPORT",
        // No version either: the same id must always name the same bytes.
        "writtenBy": "etl: the final change per key of the incremental exports an output applied",
    });
    let summary_bytes = serde_json::to_vec(&summary)
        .map_err(|e| UnwindError::Internal { message: format!("cannot encode a compacted export's summary: {e}") })?;
    let mut files = Vec::new();
    let files_md5 = crate::source::md5_base64(&files_bytes).into_bytes();
    let summary_md5 = crate::source::md5_base64(&summary_bytes).into_bytes();
    for (name, bytes) in MANIFEST_FILES.into_iter().zip([files_bytes, files_md5, summary_bytes, summary_md5]) {
        let p = export_dir.join(name);
        std::fs::write(&p, bytes).map_err(io(&p))?;
        files.push(format!("{export_rel}/{name}"));
    }
    files.extend(data_keys);
    Ok(Compacted { id, files, records })
}

/// Writes one data file of change records at `path`; returns the MD5 of its bytes.
fn write_part(path: &Path, changes: &[FinalChange<'_>]) -> Result<[u8; 16], UnwindError> {
    let file = std::fs::File::create(path).map_err(io(path))?;
    let hashing = HashingWriter { inner: std::io::BufWriter::new(file), md5: Md5::new() };
    let mut gz = flate2::write::GzEncoder::new(hashing, flate2::Compression::fast());
    let mut line = String::with_capacity(512);
    for c in changes {
        line.clear();
        line.push_str("{\"Metadata\":{\"WriteTimestampMicros\":{\"N\":\"");
        line.push_str(&c.write_time_micros.to_string());
        line.push_str("\"}},\"Keys\":");
        line.push_str(c.keys);
        if let Some(image) = c.image {
            line.push_str(",\"NewImage\":");
            line.push_str(image);
        }
        line.push_str("}\n");
        gz.write_all(line.as_bytes()).map_err(io(path))?;
    }
    let mut hashing = gz.finish().map_err(io(path))?;
    hashing.inner.flush().map_err(io(path))?;
    let HashingWriter { inner, md5 } = hashing;
    drop(inner);
    Ok(md5.finalize().into())
}

/// Computes the MD5 of what goes through it.
struct HashingWriter<W> {
    inner: W,
    md5: Md5,
}

impl<W: std::io::Write> std::io::Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.md5.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The folder under `root` of the compacted export `c`.
pub fn export_dir(root: &Path, c: &Compacted) -> PathBuf {
    root.join("AWSDynamoDB").join(&c.id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::AwsOptions;
    use crate::source::live::ScanSettings;
    use crate::store::Location;

    /// The text of a gzip data file.
    fn gunzip(path: &Path) -> String {
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap()),
            &mut text,
        )
        .unwrap();
        text
    }

    #[test]
    fn a_compacted_export_is_an_incremental_export_etl_reads_and_verifies() {
        let tmp = tempfile::tempdir().unwrap();
        let covers = Covers {
            table_arn: Some("arn:aws:dynamodb:eu-west-1:123456789012:table/shop"),
            from_time: "2026-01-14T10:20:00.000Z",
            to_time: "2026-01-14T12:20:00.000Z",
        };
        let changes = [
            FinalChange {
                write_time_micros: 1_768_386_096_366_933,
                keys: r#"{"PK":{"S":"a"},"SK":{"N":"1"}}"#,
                image: Some(r#"{"PK":{"S":"a"},"SK":{"N":"1"},"n":{"N":"12345678901234567890123456789012345678"}}"#),
            },
            FinalChange {
                write_time_micros: 1_768_386_096_366_934,
                keys: r#"{"PK":{"S":"b"},"SK":{"N":"2"}}"#,
                image: None,
            },
        ];
        let c = write(tmp.path(), &covers, &changes, 2).unwrap();
        assert!(c.id.starts_with("etl-compacted-01768393200000-"), "{}", c.id);
        assert_eq!(c.records, 2);
        // Same changes, same bytes and name.
        let again = tempfile::tempdir().unwrap();
        let c2 = write(again.path(), &covers, &changes, 1).unwrap();
        assert_eq!(c2.id, c.id);
        for f in &c.files {
            assert_eq!(std::fs::read(tmp.path().join(f)).unwrap(), std::fs::read(again.path().join(f)).unwrap(), "{f}");
        }

        let spool = tmp.path().join("spool");
        let plan = crate::source::resolve(
            &[Location::Path(export_dir(tmp.path(), &c))],
            &AwsOptions::default(),
            &ScanSettings::default(),
            &spool,
        )
        .unwrap();
        let e = &plan.exports[0];
        assert!(is_compacted(e));
        assert_eq!(export_id(e), c.id);
        assert_eq!(e.table_arn.as_deref(), covers.table_arn);
        let w = e.window.as_ref().unwrap();
        assert_eq!((w.from_time.as_str(), w.to_time.as_str()), (covers.from_time, covers.to_time));
        assert_eq!(w.output_view.as_deref(), Some("NEW_IMAGE"));
        assert_eq!(e.summary_item_count, 2);
        assert_eq!(e.manifest_files_item_count, 2);
        assert!(matches!(e.summary_checksum, crate::source::manifest::SideFileCheck::Verified { .. }));
        assert!(matches!(e.files_checksum, crate::source::manifest::SideFileCheck::Verified { .. }));
        assert_eq!(plan.files.len(), 1);

        // The lines decode as the change records written, numbers exact.
        let text = gunzip(&tmp.path().join(&c.files[4]));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let first = crate::decode::json::decode_export_line(lines[0]).unwrap();
        let crate::decode::Record::Change(ch) = first else { panic!("{first:?}") };
        assert_eq!(ch.write_time_micros, 1_768_386_096_366_933);
        let new = ch.new.unwrap();
        let mut json = String::new();
        crate::decode::write_item_json(&new, &mut json);
        assert!(json.contains(r#""n":{"N":"12345678901234567890123456789012345678"}"#), "{json}");
        let second = crate::decode::json::decode_export_line(lines[1]).unwrap();
        let crate::decode::Record::Change(ch) = second else { panic!("{second:?}") };
        assert!(ch.new.is_none());
    }

    #[test]
    fn a_large_compacted_export_is_cut_into_files_read_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let covers =
            Covers { table_arn: None, from_time: "2026-01-14T10:20:00.000Z", to_time: "2026-01-14T10:40:00.000Z" };
        let keys: Vec<String> = (0..RECORDS_PER_FILE + 2).map(|i| format!(r#"{{"PK":{{"S":"k{i:07}"}}}}"#)).collect();
        let changes: Vec<FinalChange<'_>> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| FinalChange { write_time_micros: i as i64, keys: k, image: None })
            .collect();
        let c = write(tmp.path(), &covers, &changes, 2).unwrap();
        assert_eq!(
            c.files[4..],
            [format!("AWSDynamoDB/data/{}-0.json.gz", c.id), format!("AWSDynamoDB/data/{}-1.json.gz", c.id)]
        );
        let one = tempfile::tempdir().unwrap();
        assert_eq!(write(one.path(), &covers, &changes, 1).unwrap().id, c.id, "the same bytes on one worker");
        let plan = crate::source::resolve(
            &[Location::Path(export_dir(tmp.path(), &c))],
            &AwsOptions::default(),
            &ScanSettings::default(),
            &tmp.path().join("spool"),
        )
        .unwrap();
        assert_eq!(plan.exports[0].manifest_files_item_count, RECORDS_PER_FILE as u64 + 2);
        assert_eq!(plan.files.len(), 2);
        // The second file starts where the first ends.
        let text = gunzip(&tmp.path().join(&c.files[5]));
        assert_eq!(text.lines().count(), 2);
        assert!(
            text.starts_with(&format!(
                r#"{{"Metadata":{{"WriteTimestampMicros":{{"N":"{RECORDS_PER_FILE}"}}}},"Keys":{{"PK""#
            )),
            "{text}"
        );
    }
}

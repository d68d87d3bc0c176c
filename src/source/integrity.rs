//! Integrity checks of an export against its own manifests: what the manifests promise (item
//! counts, MD5s, checksum side files, the summary's total) compared with what was read, as typed
//! [`Mismatch`]es that the run report records and the exit code is decided from.
//!
//! This module only compares; it never decides what a mismatch means for the run (the pipeline
//! applies `--strict` and `--allow-mismatch`) and never reads data. Everything it echoes from an
//! input (side-file contents, manifest keys) goes through [`preview`], bounded and escaped.

use std::fmt;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::frame::FileDigest;
use super::{DataFile, Plan, SideFileCheck};

/// The most bytes read of a checksum side file: a digest is 24 (base64) or 32 (hex) characters.
pub const MAX_SIDE_FILE_BYTES: usize = 256;
/// The most characters of an input's content echoed in a message or the run report.
pub const PREVIEW_CHARS: usize = 64;
/// The most characters of a manifest key echoed (S3 keys are at most 1,024 bytes).
pub const KEY_CHARS: usize = 1024;

/// One way what was read does not reconcile with the export's manifests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum Mismatch {
    /// A data file holds more or fewer items than its `manifest-files.json` entry says.
    ItemCount { file: String, expected: u64, read: u64 },
    /// The MD5 of a data file's stored (compressed) bytes differs from its manifest entry.
    DataMd5 { file: String, expected: String, actual: String },
    /// A checksum side file (`.md5`, `.checksum`) does not hold its manifest's MD5. `says` is a
    /// bounded preview of what it holds.
    SideFile { export: String, file: String, says: String, actual: String },
    /// `manifest-summary.json`'s `itemCount` differs from the sum over `manifest-files.json`.
    SummaryCount { export: String, summary_items: u64, listed_items: u64 },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::ItemCount { file, expected, read } => {
                write!(f, "`{file}`: manifest says {expected} items, read {read} (item count check)")
            }
            Mismatch::DataMd5 { file, expected, actual } => {
                write!(f, "`{file}`: MD5 of the compressed bytes is {actual}, the manifest says {expected} (MD5 check)")
            }
            Mismatch::SideFile { export, file, says, actual } => write!(
                f,
                "`{export}/{file}` says `{says}` but the manifest's MD5 is {actual} (hex {}) (checksum side file check)",
                base64_to_hex(actual)
            ),
            Mismatch::SummaryCount { export, summary_items, listed_items } => write!(
                f,
                "export `{export}`: `manifest-summary.json` says {summary_items} items, `manifest-files.json` lists {listed_items} (summary item count check)"
            ),
        }
    }
}

/// Checks of the manifests themselves, known before any data is read: checksum side files and
/// the summary's item count against `manifest-files.json`.
pub fn manifest_mismatches(plan: &Plan) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for e in &plan.exports {
        for check in [&e.summary_checksum, &e.files_checksum] {
            if let SideFileCheck::Mismatch { file, expected, actual } = check {
                out.push(Mismatch::SideFile {
                    export: e.export_dir.clone(),
                    file: file.clone(),
                    says: expected.clone(),
                    actual: actual.clone(),
                });
            }
        }
        if e.summary_item_count != e.manifest_files_item_count {
            out.push(Mismatch::SummaryCount {
                export: e.export_dir.clone(),
                summary_items: e.summary_item_count,
                listed_items: e.manifest_files_item_count,
            });
        }
    }
    out
}

/// Checks of one data file once it is read to the end: its item count, then its MD5.
pub fn file_mismatches(f: &DataFile, d: &FileDigest) -> Vec<Mismatch> {
    let Some(e) = &f.expected else { return Vec::new() };
    let mut out = Vec::new();
    if e.item_count != d.units {
        out.push(Mismatch::ItemCount { file: f.display.clone(), expected: e.item_count, read: d.units });
    }
    if e.md5_base64 != d.md5_base64 {
        out.push(Mismatch::DataMd5 {
            file: f.display.clone(),
            expected: preview(&e.md5_base64),
            actual: d.md5_base64.clone(),
        });
    }
    out
}

/// Whether a checksum side file holds `digest`: its hex (either case) or its standard base64,
/// surrounding whitespace allowed. `content` is at most [`MAX_SIDE_FILE_BYTES`] of the file and
/// `size` the file's whole size; anything longer than a digest with whitespace is a mismatch.
pub fn side_file_matches(content: &[u8], size: u64, digest: &[u8]) -> bool {
    if size > content.len() as u64 {
        return false;
    }
    let Ok(text) = std::str::from_utf8(content) else { return false };
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if t.len() == 2 * digest.len() && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return hex_decode(t).is_some_and(|d| d == digest);
    }
    base64::engine::general_purpose::STANDARD.decode(t).is_ok_and(|d| d == digest)
}

fn hex_decode(t: &str) -> Option<Vec<u8>> {
    let nibble = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    t.as_bytes().chunks(2).map(|p| Some(nibble(p[0])? << 4 | nibble(*p.get(1)?)?)).collect()
}

/// The hex form of a base64 digest, for messages (empty when it is not base64).
pub fn base64_to_hex(b64: &str) -> String {
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map(|d| d.iter().map(|b| format!("{b:02x}")).collect())
        .unwrap_or_default()
}

/// At most [`PREVIEW_CHARS`] characters of `s`, control characters escaped, `…` when cut.
pub fn preview(s: &str) -> String {
    bounded(s, PREVIEW_CHARS)
}

/// A manifest key for a message: at most [`KEY_CHARS`] characters, control characters escaped.
pub fn preview_key(s: &str) -> String {
    bounded(s, KEY_CHARS)
}

fn bounded(s: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for (n, c) in s.chars().enumerate() {
        if n == max_chars {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// A bounded preview of the start of a file of `size` bytes whose first bytes are `head`.
pub fn preview_bytes(head: &[u8], size: u64) -> String {
    let text = preview(&String::from_utf8_lossy(head));
    if size > head.len() as u64 && !text.ends_with('…') { format!("{text}…") } else { text }
}

#[cfg(test)]
mod tests {
    use md5::{Digest as _, Md5};

    use super::*;

    #[test]
    fn side_files_hold_hex_or_base64_of_the_digest() {
        let digest = Md5::digest(b"manifest");
        let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        for ok in [b64.clone(), hex.clone(), hex.to_uppercase(), format!("  {b64}\n"), format!("{hex}\r\n")] {
            assert!(side_file_matches(ok.as_bytes(), ok.len() as u64, &digest), "{ok:?}");
        }
        let other = Md5::digest(b"other");
        let other_hex: String = other.iter().map(|b| format!("{b:02x}")).collect();
        for bad in [
            String::new(),
            "\n".into(),
            other_hex,
            base64::engine::general_purpose::STANDARD.encode(other),
            format!("{hex} {hex}"),
            format!("{b64}x"),
            hex[..31].to_owned(),
            format!("{hex}  extra"),
            base64::engine::general_purpose::URL_SAFE.encode(b"0123456789abcdef"),
            "0".repeat(MAX_SIDE_FILE_BYTES),
        ] {
            assert!(!side_file_matches(bad.as_bytes(), bad.len() as u64, &digest), "{bad:?}");
        }
        // Only the first bytes of a larger file were read: a mismatch whatever they are.
        assert!(!side_file_matches(b64.as_bytes(), 200 << 20, &digest));
        assert!(!side_file_matches(&[0xff, 0xfe], 2, &digest));
    }

    #[test]
    fn previews_are_bounded_and_escaped() {
        assert_eq!(preview("abc"), "abc");
        let long = "x".repeat(1000);
        let p = preview(&long);
        assert_eq!(p.chars().count(), PREVIEW_CHARS + 1);
        assert!(p.ends_with('…'));
        assert_eq!(preview("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
        assert_eq!(preview_bytes(&[0u8; 10], 200 << 20), format!("{}…", "\\0".repeat(10)));
        assert_eq!(preview_bytes(b"abc", 3), "abc");
        assert_eq!(base64_to_hex("LOAyv57eEVIk9d4CSOK0iQ=="), "2ce032bf9ede115224f5de0248e2b489");
    }
}

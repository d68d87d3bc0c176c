//! Export manifests: `manifest-summary.json`, `manifest-files.json` and their checksum side
//! files, resolved into the export's data files with what the manifests promise about each.
//!
//! Manifests are the source of truth: `data/` folders are never listed, manifest keys that
//! would leave the export root are refused, and locally every file opened on the export's word is
//! resolved and confined to the export root ([`LocalTree`]). Manifests and side files are read
//! with bounds. The same code resolves an export in a local folder and under an object-store
//! prefix, through [`Tree`].

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::path::{Component, Path, PathBuf};

use md5::{Digest as _, Md5};
use serde::{Deserialize, Serialize};

use super::integrity::{MAX_SIDE_FILE_BYTES, preview, preview_bytes, preview_key, side_file_matches};
use super::{DataFile, Expected, Input, Layout, Plan, SourceError, io_err, md5_base64};

/// The outcome of comparing a checksum side file with its manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SideFileCheck {
    Verified { file: String },
    Mismatch { file: String, expected: String, actual: String },
    Absent,
}

/// A full export found through its `manifest-summary.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExportInfo {
    pub export_dir: String,
    pub export_arn: Option<String>,
    pub export_time: Option<String>,
    pub output_format: String,
    pub summary_item_count: u64,
    /// Sum of `itemCount` over `manifest-files.json`.
    pub manifest_files_item_count: u64,
    pub data_files: usize,
    pub summary_checksum: SideFileCheck,
    pub files_checksum: SideFileCheck,
    /// An incremental export's window and view; `None` for a full export.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// `tableArn`: the table the export was taken of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_arn: Option<String>,
    /// Base64 MD5 of the `manifest-summary.json` bytes read.
    #[serde(default)]
    pub summary_md5: String,
    /// The export's data files: these indexes of [`super::Plan::files`].
    #[serde(skip)]
    pub files: std::ops::Range<usize>,
}

/// What an incremental export covers: changes from `exportFromTime` (inclusive) to
/// `exportToTime` (exclusive), with `outputView`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub from_time: String,
    pub to_time: String,
    /// `NEW_AND_OLD_IMAGES` or `NEW_IMAGE`.
    pub output_view: Option<String>,
}

/// `manifest-summary.json`, the fields etl uses.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestSummary {
    export_arn: Option<String>,
    export_time: Option<String>,
    #[serde(default)]
    export_type: Option<String>,
    output_format: Option<String>,
    item_count: Option<u64>,
    manifest_files_s3_key: Option<String>,
    s3_prefix: Option<String>,
    table_arn: Option<String>,
    export_from_time: Option<String>,
    export_to_time: Option<String>,
    output_view: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestFileLine {
    item_count: u64,
    md5_checksum: String,
    data_file_s3_key: String,
}

/// The most bytes of a `manifest-summary.json`: a real one is under 1 KB.
pub const MAX_SUMMARY_BYTES: u64 = 1024 * 1024;
/// The most bytes of a `manifest-files.json`: about a million data files.
pub const MAX_FILES_MANIFEST_BYTES: u64 = 256 * 1024 * 1024;

/// What export resolution needs of where an export lives: a local folder or an S3 prefix.
pub(crate) trait Tree {
    /// A location in the tree (a local path, an S3 key).
    type P: Clone;
    /// `base` joined with a relative `/`-separated path.
    fn join(&self, base: &Self::P, rel: &str) -> Self::P;
    fn parent(&self, p: &Self::P) -> Self::P;
    fn file_name(&self, p: &Self::P) -> String;
    /// A manifest, whole: more than `max` bytes is [`SourceError::ManifestTooLarge`].
    fn read(&self, p: &Self::P, max: u64) -> Result<Vec<u8>, SourceError>;
    /// At most the first `max` bytes of a small file (a checksum side file) and its whole size;
    /// `None` when it does not exist. Never reads more than `max` bytes.
    fn read_head(&self, p: &Self::P, max: usize) -> Result<Option<(Vec<u8>, u64)>, SourceError>;
    /// Where a data file's bytes are read from, and its size; `None` when it does not exist.
    fn locate(&self, p: &Self::P) -> Result<Option<(Input, u64)>, SourceError>;
    fn display(&self, p: &Self::P) -> String;
}

/// Which local path the user named for an export: links on that path are the user's choice,
/// links inside the export are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    /// The folder holding `AWSDynamoDB/` (the export root).
    Root,
    /// The `AWSDynamoDB/<ExportId>` folder.
    ExportDir,
    /// The `manifest-summary.json` file.
    Summary,
}

/// A local export folder, read with `std::fs`, every file confined to the export root.
///
/// Manifest keys are confined by their text ([`root_relative_key`]); links are confined here:
/// every file opened on the export's word (the summary when it was found rather than named,
/// `manifest-files.json`, side files, data files) is resolved to its real path, which must lie
/// inside the real export root (or inside the export folder or summary the user named, when
/// those are links themselves). Links that stay inside the root are followed; data files are
/// then opened by their real path, the one that was checked.
pub(crate) struct LocalTree {
    /// Real paths that files may resolve into.
    anchors: Vec<PathBuf>,
    /// The export root as named, for messages.
    root: PathBuf,
}

/// `p`'s parent folder, `.` for a bare name (so it can be resolved).
fn dir_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

impl LocalTree {
    /// The tree of the export whose summary is at `summary`, found from what the user `named`.
    pub(crate) fn new(summary: &Path, named: Named) -> Result<Self, SourceError> {
        let export = dir_of(summary);
        let root = dir_of(&dir_of(&export));
        let real = |p: &Path| std::fs::canonicalize(p).map_err(io_err(p));
        let mut anchors = vec![real(&root)?];
        if named != Named::Root {
            anchors.push(real(&export)?);
        }
        if named == Named::Summary {
            anchors.push(real(summary)?);
        }
        Ok(LocalTree { anchors, root })
    }

    /// The real path of `p`, `None` when it does not exist; an error when it resolves outside
    /// the export root.
    fn confine(&self, p: &Path) -> Result<Option<PathBuf>, SourceError> {
        let real = match std::fs::canonicalize(p) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
                return Ok(None);
            }
            Err(e) => return Err(io_err(p)(e)),
        };
        if self.anchors.iter().any(|a| real.starts_with(a)) {
            Ok(Some(real))
        } else {
            Err(SourceError::LinkEscapesRoot {
                path: p.display().to_string(),
                target: real.display().to_string(),
                root: self.root.display().to_string(),
            })
        }
    }

    /// The real path and size of a regular file inside the root, `None` when it does not exist.
    fn regular_file(&self, p: &Path) -> Result<Option<(PathBuf, u64)>, SourceError> {
        let Some(real) = self.confine(p)? else { return Ok(None) };
        let meta = std::fs::metadata(&real).map_err(io_err(p))?;
        if !meta.is_file() {
            return Err(SourceError::NotAFile { path: p.display().to_string() });
        }
        Ok(Some((real, meta.len())))
    }
}

/// Reads at most `max` bytes of `path`.
fn read_at_most(path: &Path, max: u64, display: &Path) -> Result<Vec<u8>, SourceError> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path).and_then(|f| f.take(max).read_to_end(&mut bytes)).map_err(io_err(display))?;
    Ok(bytes)
}

impl Tree for LocalTree {
    type P = PathBuf;
    fn join(&self, base: &PathBuf, rel: &str) -> PathBuf {
        base.join(rel)
    }
    fn parent(&self, p: &PathBuf) -> PathBuf {
        p.parent().unwrap_or(Path::new(".")).to_owned()
    }
    fn file_name(&self, p: &PathBuf) -> String {
        p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
    fn read(&self, p: &PathBuf, max: u64) -> Result<Vec<u8>, SourceError> {
        let Some((real, size)) = self.regular_file(p)? else {
            return Err(SourceError::NotFound { path: p.display().to_string() });
        };
        if size > max {
            return Err(SourceError::ManifestTooLarge { path: p.display().to_string(), size, max });
        }
        let bytes = read_at_most(&real, max + 1, p)?;
        if bytes.len() as u64 > max {
            return Err(SourceError::ManifestTooLarge { path: p.display().to_string(), size: bytes.len() as u64, max });
        }
        Ok(bytes)
    }
    fn read_head(&self, p: &PathBuf, max: usize) -> Result<Option<(Vec<u8>, u64)>, SourceError> {
        let Some((real, size)) = self.regular_file(p)? else { return Ok(None) };
        Ok(Some((read_at_most(&real, max as u64, p)?, size)))
    }
    fn locate(&self, p: &PathBuf) -> Result<Option<(Input, u64)>, SourceError> {
        Ok(self.regular_file(p)?.map(|(real, size)| (Input::Path(real), size)))
    }
    fn display(&self, p: &PathBuf) -> String {
        p.display().to_string()
    }
}

/// Checks `<manifest>.md5` or `<manifest>.checksum` against the manifest's bytes: a hex or
/// base64 MD5 of them, read at most [`MAX_SIDE_FILE_BYTES`] and echoed at most as a preview.
fn check_side_file<T: Tree>(tree: &T, manifest: &T::P, bytes: &[u8]) -> Result<SideFileCheck, SourceError> {
    let name = tree.file_name(manifest);
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    let dir = tree.parent(manifest);
    for ext in ["md5", "checksum"] {
        let file = format!("{stem}.{ext}");
        if let Some((head, size)) = tree.read_head(&tree.join(&dir, &file), MAX_SIDE_FILE_BYTES)? {
            let digest = Md5::digest(bytes);
            return Ok(if side_file_matches(&head, size, &digest) {
                SideFileCheck::Verified { file }
            } else {
                SideFileCheck::Mismatch { file, expected: preview_bytes(&head, size), actual: md5_base64(bytes) }
            });
        }
    }
    Ok(SideFileCheck::Absent)
}

/// Maps an S3 key from a manifest to a path relative to the export's root (the folder or prefix
/// holding `AWSDynamoDB/`), refusing keys that would leave it. `line` is the manifest line the
/// key is on (`None` for the summary's `manifestFilesS3Key`).
pub(crate) fn root_relative_key<'k>(
    key: &'k str,
    prefix: Option<&str>,
    manifest: &str,
    line: Option<usize>,
) -> Result<&'k str, SourceError> {
    let escape = || SourceError::KeyEscapesRoot { manifest: manifest.to_owned(), line, key: preview_key(key) };
    let mut rel = key;
    if let Some(prefix) = prefix.filter(|p| !p.is_empty()) {
        let prefix = prefix.trim_end_matches('/');
        if let Some(stripped) = rel.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) {
            rel = stripped;
        }
    }
    // Keys that still carry a prefix we could not strip: start at `AWSDynamoDB/`.
    if !rel.starts_with("AWSDynamoDB/") {
        match rel.find("/AWSDynamoDB/") {
            Some(i) => rel = &rel[i + 1..],
            None => return Err(escape()),
        }
    }
    // Plain names only: `std::path` would skip a `.` in the middle, so segments are checked as
    // text too (two spellings of one key would defeat the duplicate check).
    if Path::new(rel).components().any(|c| !matches!(c, Component::Normal(_)))
        || rel.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..")
        || rel.contains('\\')
        || rel.chars().any(char::is_control)
    {
        return Err(escape());
    }
    Ok(rel)
}

/// Resolves a full export from its `manifest-summary.json` in `tree`.
///
/// Refused before any data is read: a data file listed twice (by key, or the same bytes under
/// two keys by MD5 and size), a listed data file that is missing, item counts whose sum
/// overflows, keys or links that leave the export root, and summaries of exports etl does not
/// read. Checksum side files and the summary's item count are checked and recorded in the
/// returned [`ExportInfo`]; what a mismatch means is the caller's policy.
pub(crate) fn resolve_export<T: Tree>(tree: &T, summary_path: &T::P, plan: &mut Plan) -> Result<(), SourceError> {
    let export_dir = tree.parent(summary_path);
    let export_name = tree.display(&export_dir);
    // The folder that holds `AWSDynamoDB/`.
    let root = tree.parent(&tree.parent(&export_dir));
    let summary_bytes = tree.read(summary_path, MAX_SUMMARY_BYTES)?;
    let summary_display = tree.display(summary_path);
    let summary: ManifestSummary = serde_json::from_slice(&summary_bytes)
        .map_err(|e| SourceError::BadManifest { path: summary_display.clone(), message: e.to_string() })?;
    let unknown = |field: &'static str, value: &str, expected: &'static str| SourceError::UnknownSummaryValue {
        path: summary_display.clone(),
        field,
        value: preview(value),
        expected,
    };
    let window = match summary.export_type.as_deref() {
        None | Some("FULL_EXPORT") => None,
        Some("INCREMENTAL_EXPORT") => {
            let missing =
                |field: &'static str| SourceError::MissingSummaryField { path: summary_display.clone(), field };
            let output_view = match summary.output_view.as_deref() {
                None => None,
                Some(v @ ("NEW_AND_OLD_IMAGES" | "NEW_IMAGE")) => Some(v.to_owned()),
                Some(other) => return Err(unknown("outputView", other, "`NEW_AND_OLD_IMAGES` or `NEW_IMAGE`")),
            };
            Some(Window {
                from_time: summary.export_from_time.clone().ok_or_else(|| missing("exportFromTime"))?,
                to_time: summary.export_to_time.clone().ok_or_else(|| missing("exportToTime"))?,
                output_view,
            })
        }
        Some(other) => return Err(unknown("exportType", other, "`FULL_EXPORT` or `INCREMENTAL_EXPORT`")),
    };
    let output_format = match summary.output_format.as_deref() {
        None | Some("DYNAMODB_JSON") => "DYNAMODB_JSON".to_owned(),
        Some("ION") => "ION".to_owned(),
        Some(other) => return Err(unknown("outputFormat", other, "`DYNAMODB_JSON` or `ION`")),
    };
    let summary_checksum = check_side_file(tree, summary_path, &summary_bytes)?;
    let default_files = tree.join(&export_dir, "manifest-files.json");
    let files_path = match &summary.manifest_files_s3_key {
        Some(key) => {
            let rel = root_relative_key(key, summary.s3_prefix.as_deref(), &summary_display, None)?;
            let p = tree.join(&root, rel);
            if tree.locate(&p)?.is_some() { p } else { default_files }
        }
        None => default_files,
    };
    let files_bytes = tree.read(&files_path, MAX_FILES_MANIFEST_BYTES)?;
    let files_checksum = check_side_file(tree, &files_path, &files_bytes)?;
    let files_display = tree.display(&files_path);
    let text = std::str::from_utf8(&files_bytes)
        .map_err(|e| SourceError::BadManifest { path: files_display.clone(), message: e.to_string() })?;
    let mut total = 0u64;
    let mut count = 0usize;
    let first_file = plan.files.len();
    // Root-relative key -> line, and (MD5, size) -> (line, key, items): a data file listed twice
    // would be read twice.
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut by_content: HashMap<(String, u64), (usize, String, u64)> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let entry: ManifestFileLine = serde_json::from_str(line).map_err(|e| SourceError::BadManifestLine {
            path: files_display.clone(),
            line: n,
            message: e.to_string(),
        })?;
        let key = &entry.data_file_s3_key;
        let rel = root_relative_key(key, summary.s3_prefix.as_deref(), &files_display, Some(n))?;
        if let Some(&first_line) = by_key.get(rel) {
            return Err(SourceError::DuplicateDataFile {
                manifest: files_display.clone(),
                first_line,
                line: n,
                key: preview_key(key),
            });
        }
        by_key.insert(rel.to_owned(), n);
        total = total
            .checked_add(entry.item_count)
            .ok_or_else(|| SourceError::ItemCountOverflow { manifest: files_display.clone(), line: n })?;
        let path = tree.join(&root, rel);
        let display = tree.display(&path);
        let Some((input, size)) = tree.locate(&path)? else {
            return Err(SourceError::MissingDataFile { manifest: files_display.clone(), line: n, path: display });
        };
        // The format is the summary's; a data file named for the other one was mixed in.
        let (layout, extension) =
            if output_format == "ION" { (Layout::IonLines, ".ion.gz") } else { (Layout::ExportLines, ".json.gz") };
        if Layout::from_name(&display).is_some_and(|l| l != layout) {
            return Err(SourceError::FormatMismatch {
                manifest: files_display.clone(),
                line: n,
                path: display,
                format: output_format,
                extension,
            });
        }
        // AWS writes many identical empty files (the 20-byte gzip of nothing): the same bytes
        // twice are only harmless when both entries promise no items.
        match by_content.entry((entry.md5_checksum.clone(), size)) {
            Entry::Occupied(o) => {
                let (first_line, first_key, first_items) = o.get();
                if *first_items > 0 || entry.item_count > 0 {
                    return Err(SourceError::DuplicateContent {
                        manifest: files_display.clone(),
                        first_line: *first_line,
                        first_key: first_key.clone(),
                        line: n,
                        key: preview_key(key),
                        md5: preview(&entry.md5_checksum),
                        size,
                    });
                }
            }
            Entry::Vacant(v) => {
                v.insert((n, preview_key(key), entry.item_count));
            }
        }
        count += 1;
        plan.files.push(DataFile {
            gzip: display.ends_with(".gz"),
            display,
            input,
            layout,
            size,
            expected: Some(Expected { item_count: entry.item_count, md5_base64: entry.md5_checksum }),
        });
    }
    plan.exports.push(ExportInfo {
        export_dir: export_name,
        export_arn: summary.export_arn,
        export_time: summary.export_time,
        output_format,
        summary_item_count: summary.item_count.unwrap_or(total),
        manifest_files_item_count: total,
        data_files: count,
        summary_checksum,
        files_checksum,
        window,
        table_arn: summary.table_arn,
        summary_md5: md5_base64(&summary_bytes),
        files: first_file..plan.files.len(),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_confined_to_the_root() {
        let ok = root_relative_key("nightly/AWSDynamoDB/1-a/data/x.json.gz", Some("nightly"), "m", None).unwrap();
        assert_eq!(ok, "AWSDynamoDB/1-a/data/x.json.gz");
        assert!(root_relative_key("AWSDynamoDB/1-a/data/x.json.gz", None, "m", Some(1)).is_ok());
        for bad in [
            "AWSDynamoDB/../../etc/passwd",
            "/etc/passwd",
            "AWSDynamoDB/1-a/../../../x",
            "elsewhere/file.json.gz",
            "AWSDynamoDB/1-a//data/x.json.gz",
            "AWSDynamoDB/1-a/./data/x.json.gz",
            "AWSDynamoDB\\..\\..\\etc\\passwd",
            "AWSDynamoDB/1-a/data\\..\\..\\x",
            "AWSDynamoDB/1-a/data/x\0.json.gz",
            "AWSDynamoDB/1-a/data/",
            "AWSDynamoDB/1-a/data/x.json.gz/.",
            "",
        ] {
            assert!(
                matches!(root_relative_key(bad, None, "m", Some(3)), Err(SourceError::KeyEscapesRoot { .. })),
                "{bad}"
            );
        }
    }
}

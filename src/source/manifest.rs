//! Export manifests: `manifest-summary.json`, `manifest-files.json` and their checksum side
//! files, resolved into the export's data files with what the manifests promise about each.
//!
//! Manifests are the source of truth: `data/` folders are never listed, and manifest keys that
//! would leave the export root are refused. The same code resolves an export in a local folder
//! and under an object-store prefix, through [`Tree`].

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

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
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestFileLine {
    item_count: u64,
    md5_checksum: String,
    data_file_s3_key: String,
}

/// What export resolution needs of where an export lives: a local folder or an S3 prefix.
pub(crate) trait Tree {
    /// A location in the tree (a local path, an S3 key).
    type P: Clone;
    /// `base` joined with a relative `/`-separated path.
    fn join(&self, base: &Self::P, rel: &str) -> Self::P;
    fn parent(&self, p: &Self::P) -> Self::P;
    fn file_name(&self, p: &Self::P) -> String;
    fn read(&self, p: &Self::P) -> Result<Vec<u8>, SourceError>;
    /// The size of a data file, `None` when it does not exist.
    fn data_size(&self, p: &Self::P) -> Result<Option<u64>, SourceError>;
    fn display(&self, p: &Self::P) -> String;
    fn input(&self, p: &Self::P) -> Input;
}

/// Local folders, read with `std::fs`.
pub(crate) struct LocalTree;

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
    fn read(&self, p: &PathBuf) -> Result<Vec<u8>, SourceError> {
        std::fs::read(p).map_err(io_err(p))
    }
    fn data_size(&self, p: &PathBuf) -> Result<Option<u64>, SourceError> {
        Ok(match std::fs::metadata(p) {
            Ok(m) if m.is_file() => Some(m.len()),
            _ => None,
        })
    }
    fn display(&self, p: &PathBuf) -> String {
        p.display().to_string()
    }
    fn input(&self, p: &PathBuf) -> Input {
        Input::Path(p.clone())
    }
}

/// Checks `<manifest>.md5` or `<manifest>.checksum` against the manifest's bytes.
fn check_side_file<T: Tree>(tree: &T, manifest: &T::P, bytes: &[u8]) -> SideFileCheck {
    let name = tree.file_name(manifest);
    let stem = name.strip_suffix(".json").unwrap_or(&name);
    let dir = tree.parent(manifest);
    for ext in ["md5", "checksum"] {
        let file = format!("{stem}.{ext}");
        if let Ok(expected) = tree.read(&tree.join(&dir, &file)) {
            let expected = String::from_utf8_lossy(&expected).trim().to_owned();
            let actual = md5_base64(bytes);
            return if expected == actual {
                SideFileCheck::Verified { file }
            } else {
                SideFileCheck::Mismatch { file, expected, actual }
            };
        }
    }
    SideFileCheck::Absent
}

/// Maps an S3 key from a manifest to a path relative to the export's root (the folder or prefix
/// holding `AWSDynamoDB/`), refusing keys that would leave it.
pub(crate) fn root_relative_key<'k>(
    key: &'k str,
    prefix: Option<&str>,
    manifest: &str,
) -> Result<&'k str, SourceError> {
    let escape = || SourceError::KeyEscapesRoot { manifest: manifest.to_owned(), key: key.to_owned() };
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
    if Path::new(rel).components().any(|c| !matches!(c, Component::Normal(_))) || rel.contains("//") {
        return Err(escape());
    }
    Ok(rel)
}

/// Resolves a full export from its `manifest-summary.json` in `tree`.
pub(crate) fn resolve_export<T: Tree>(tree: &T, summary_path: &T::P, plan: &mut Plan) -> Result<(), SourceError> {
    let export_dir = tree.parent(summary_path);
    let export_name = tree.display(&export_dir);
    // The folder that holds `AWSDynamoDB/`.
    let root = tree.parent(&tree.parent(&export_dir));
    let summary_bytes = tree.read(summary_path)?;
    let summary_display = tree.display(summary_path);
    let summary: ManifestSummary = serde_json::from_slice(&summary_bytes)
        .map_err(|e| SourceError::BadManifest { path: summary_display.clone(), message: e.to_string() })?;
    if summary.export_type.as_deref() == Some("INCREMENTAL_EXPORT") {
        return Err(SourceError::IncrementalNotSupported { export: export_name });
    }
    let output_format = summary.output_format.clone().unwrap_or_else(|| "DYNAMODB_JSON".into());
    if output_format == "ION" {
        return Err(SourceError::IonNotSupported { export: export_name });
    }
    let summary_checksum = check_side_file(tree, summary_path, &summary_bytes);
    let default_files = tree.join(&export_dir, "manifest-files.json");
    let files_path = match &summary.manifest_files_s3_key {
        Some(key) => {
            let p = tree.join(&root, root_relative_key(key, summary.s3_prefix.as_deref(), &summary_display)?);
            if tree.data_size(&p)?.is_some() { p } else { default_files }
        }
        None => default_files,
    };
    let files_bytes = tree.read(&files_path)?;
    let files_checksum = check_side_file(tree, &files_path, &files_bytes);
    let files_display = tree.display(&files_path);
    let text = std::str::from_utf8(&files_bytes)
        .map_err(|e| SourceError::BadManifest { path: files_display.clone(), message: e.to_string() })?;
    let mut total = 0u64;
    let mut count = 0usize;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let entry: ManifestFileLine = serde_json::from_str(line).map_err(|e| SourceError::BadManifestLine {
            path: files_display.clone(),
            line: i + 1,
            message: e.to_string(),
        })?;
        let rel = root_relative_key(&entry.data_file_s3_key, summary.s3_prefix.as_deref(), &files_display)?;
        let path = tree.join(&root, rel);
        let display = tree.display(&path);
        let Some(size) = tree.data_size(&path)? else {
            return Err(SourceError::MissingDataFile { manifest: files_display.clone(), line: i + 1, path: display });
        };
        if display.ends_with(".ion.gz") {
            return Err(SourceError::IonNotSupported { export: export_name });
        }
        total += entry.item_count;
        count += 1;
        plan.files.push(DataFile {
            gzip: display.ends_with(".gz"),
            display,
            input: tree.input(&path),
            layout: Layout::ExportLines,
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
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_confined_to_the_root() {
        let ok = root_relative_key("nightly/AWSDynamoDB/1-a/data/x.json.gz", Some("nightly"), "m").unwrap();
        assert_eq!(ok, "AWSDynamoDB/1-a/data/x.json.gz");
        assert!(root_relative_key("AWSDynamoDB/1-a/data/x.json.gz", None, "m").is_ok());
        for bad in
            ["AWSDynamoDB/../../etc/passwd", "/etc/passwd", "AWSDynamoDB/1-a/../../../x", "elsewhere/file.json.gz"]
        {
            assert!(matches!(root_relative_key(bad, None, "m"), Err(SourceError::KeyEscapesRoot { .. })), "{bad}");
        }
    }
}

//! Finding inputs: DynamoDB export folders and their manifests, bare data files, and scan output.
//!
//! Resolves what the user named into an ordered list of [`DataFile`]s with what the manifests
//! promise about each (item count, MD5 of the compressed bytes). Manifests are the source of
//! truth: `data/` folders of exports are never listed, and manifest keys that would leave the
//! export root are refused. This module reads manifests and file metadata only; reading data
//! files is the pipeline's job, through [`lines`]. It knows nothing of Arrow or mappings.

pub mod lines;
pub mod object;

use std::fmt;
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};

/// Where a data file's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Path(PathBuf),
    Stdin,
    Object(object::ObjectRef),
}

/// Opens a data file for streaming (stdin is read by the scan reader itself).
pub fn open(f: &DataFile) -> std::io::Result<Box<dyn std::io::Read + Send>> {
    match &f.location {
        Location::Path(p) => Ok(Box::new(std::fs::File::open(p)?)),
        Location::Stdin => Ok(Box::new(std::io::stdin())),
        Location::Object(o) => Ok(Box::new(object::ObjectReader::open(o, &f.display))),
    }
}

/// How a data file's content is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// JSON Lines of `{"Item":{...}}`, gzip-compressed or not.
    ExportLines,
    /// `aws dynamodb scan` output, one or more JSON documents.
    ScanOutput,
}

/// What a manifest promises about one data file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Expected {
    pub item_count: u64,
    pub md5_base64: String,
}

/// One input file, in processing order.
#[derive(Debug, Clone)]
pub struct DataFile {
    pub location: Location,
    /// The name used in reports and the rejects table.
    pub display: String,
    pub gzip: bool,
    pub layout: Layout,
    /// Size on disk in bytes (compressed), 0 for stdin.
    pub size: u64,
    pub expected: Option<Expected>,
}

/// The outcome of comparing a checksum side file with its manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SideFileCheck {
    Verified { file: String },
    Mismatch { file: String, expected: String, actual: String },
    Absent,
}

/// A full export found through its `manifest-summary.json`.
#[derive(Debug, Clone, Serialize)]
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

/// Everything the pipeline needs to read.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub files: Vec<DataFile>,
    pub exports: Vec<ExportInfo>,
}

impl Plan {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }
}

/// Why the named inputs cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read `{path}`: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("`{path}` does not exist")]
    NotFound { path: String },
    #[error("`{path}` is not valid JSON: {message}")]
    BadManifest { path: String, message: String },
    #[error("`{path}` line {line} is not a valid manifest entry: {message}")]
    BadManifestLine { path: String, line: usize, message: String },
    #[error("manifest key `{key}` in `{manifest}` leaves the export root")]
    KeyEscapesRoot { manifest: String, key: String },
    #[error("data file `{path}` listed in `{manifest}` line {line} is missing")]
    MissingDataFile { manifest: String, line: usize, path: String },
    #[error("export `{export}` is an incremental export; incremental exports are not supported yet")]
    IncrementalNotSupported { export: String },
    #[error("export `{export}` is in Amazon Ion format; Ion exports are not supported yet")]
    IonNotSupported { export: String },
    #[error("`{path}` holds {count} exports ({list}); unwind one at a time")]
    SeveralExports { path: String, count: usize, list: String },
    #[error("no data files found under `{path}`")]
    NoDataFiles { path: String },
    #[error(
        "`{path}` holds incremental export records (`{{\"Metadata\":…,\"Keys\":…}}`); incremental exports are not supported yet"
    )]
    IncrementalData { path: String },
    #[error("`{path}` is an Ion data file; Ion exports are not supported yet")]
    IonData { path: String },
    #[error("`{path}` does not look like DynamoDB data: {why}")]
    UnknownContent { path: String, why: String },
    #[error("`{url}` is not a valid S3 URL: {message}")]
    BadUrl { url: String, message: String },
    #[error("cannot read `{url}`: {message}")]
    Object { url: String, message: String },
}

impl SourceError {
    pub fn hint(&self) -> Option<String> {
        match self {
            SourceError::KeyEscapesRoot { .. } => Some("the manifest may have been edited; regenerate the export or fix the key".into()),
            SourceError::MissingDataFile { .. } => Some(
                "copy the whole export folder, including every file named in `manifest-files.json` (for example with `aws s3 sync`)".into(),
            ),
            SourceError::SeveralExports { .. } => Some("pass one export's folder (`…/AWSDynamoDB/<ExportId>`) or its `manifest-summary.json`".into()),
            SourceError::IncrementalNotSupported { .. } | SourceError::IncrementalData { .. } => {
                Some("unwind the full export on its own by passing its folder `…/AWSDynamoDB/<ExportId>`".into())
            }
            SourceError::IonNotSupported { .. } | SourceError::IonData { .. } => {
                Some("export again with `--export-format DYNAMODB_JSON`".into())
            }
            SourceError::NoDataFiles { .. } => {
                Some("point at an export folder (holding `AWSDynamoDB/`), a `manifest-summary.json`, or `.json.gz` / `.json` data files".into())
            }
            SourceError::BadUrl { .. } => Some("write S3 sources as `s3://bucket/prefix`".into()),
            SourceError::Object { message, .. } => Some(object_hint(message)),
            SourceError::UnknownContent { .. } => Some(
                "etl reads DynamoDB export data files (`{\"Item\":…}` lines) and `aws dynamodb scan --output json` output".into(),
            ),
            _ => None,
        }
    }
}

/// A hint for an S3 failure, from what the service said.
pub fn object_hint(message: &str) -> String {
    if message.contains("NoSuchBucket") || message.contains("bucket does not exist") {
        "the bucket does not exist: check the bucket name and `--region`".into()
    } else if message.contains("AccessDenied") || message.contains("Forbidden") || message.contains("403") {
        "access denied: check the credentials etl uses (`AWS_PROFILE`, `aws sts get-caller-identity`) and the bucket policy".into()
    } else if message.contains("InvalidAccessKeyId")
        || message.contains("SignatureDoesNotMatch")
        || message.contains("credentials")
    {
        "check your AWS credentials (`AWS_PROFILE`, `aws sso login`, or `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`)"
            .into()
    } else if message.contains("error sending request") || message.contains("connect") || message.contains("timed out")
    {
        "the endpoint did not answer: check `--endpoint-url`/`AWS_ENDPOINT_URL`, `--region` and your network".into()
    } else {
        "check the URL, `--region` and `--endpoint-url`".into()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SourceError + '_ {
    move |source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            SourceError::NotFound { path: path.display().to_string() }
        } else {
            SourceError::Io { path: path.display().to_string(), source }
        }
    }
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

/// Base64 of the MD5 digest, the form export manifests use.
pub fn md5_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Md5::digest(bytes))
}

/// Resolves every named source, in order, into one plan.
pub fn resolve(sources: &[String], aws: &crate::aws::AwsOptions) -> Result<Plan, SourceError> {
    let mut plan = Plan::default();
    for source in sources {
        if source == "-" {
            plan.files.push(DataFile {
                location: Location::Stdin,
                display: "<stdin>".into(),
                gzip: false,
                layout: Layout::ScanOutput,
                size: 0,
                expected: None,
            });
            continue;
        }
        if source.starts_with("s3://") {
            object::resolve_s3(source, aws, &mut plan)?;
            continue;
        }
        resolve_path(Path::new(source), &mut plan)?;
    }
    Ok(plan)
}

fn resolve_path(path: &Path, plan: &mut Plan) -> Result<(), SourceError> {
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    if meta.is_file() {
        if path.file_name().is_some_and(|n| n == "manifest-summary.json") {
            return resolve_export(&LocalTree, &path.to_owned(), plan);
        }
        plan.files.push(data_file(path, path.display().to_string())?);
        return Ok(());
    }
    let summary = path.join("manifest-summary.json");
    if summary.is_file() {
        return resolve_export(&LocalTree, &summary, plan);
    }
    let aws = path.join("AWSDynamoDB");
    if aws.is_dir() {
        let mut summaries = Vec::new();
        for entry in std::fs::read_dir(&aws).map_err(io_err(&aws))? {
            let entry = entry.map_err(io_err(&aws))?;
            let candidate = entry.path().join("manifest-summary.json");
            if candidate.is_file() {
                summaries.push(candidate);
            }
        }
        summaries.sort();
        match summaries.len() {
            0 => {} // e.g. moto's export: data files without manifests; fall through to a listing.
            1 => return resolve_export(&LocalTree, &summaries[0], plan),
            n => {
                let list = summaries
                    .iter()
                    .filter_map(|s| s.parent()?.file_name().map(|n| format!("`{}`", n.to_string_lossy())))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(SourceError::SeveralExports { path: path.display().to_string(), count: n, list });
            }
        }
    }
    let mut found = Vec::new();
    collect_data_files(path, &mut found)?;
    if found.is_empty() {
        return Err(SourceError::NoDataFiles { path: path.display().to_string() });
    }
    found.sort();
    for f in found {
        let display = f.display().to_string();
        plan.files.push(data_file(&f, display)?);
    }
    Ok(())
}

fn collect_data_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), SourceError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let p = entry.path();
        let ft = entry.file_type().map_err(io_err(&p))?;
        if ft.is_dir() {
            collect_data_files(&p, out)?;
        } else if let Some(name) = p.file_name().and_then(|n| n.to_str()) {
            if name.ends_with(".ion.gz") || name.ends_with(".ion") {
                return Err(SourceError::IonData { path: p.display().to_string() });
            }
            let is_data = (name.ends_with(".json.gz") || name.ends_with(".gz") || name.ends_with(".json"))
                && !name.starts_with("manifest-");
            if is_data {
                out.push(p);
            }
        }
    }
    Ok(())
}

fn data_file(path: &Path, display: String) -> Result<DataFile, SourceError> {
    let size = std::fs::metadata(path).map_err(io_err(path))?.len();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name.ends_with(".ion.gz") || name.ends_with(".ion") {
        return Err(SourceError::IonData { path: display });
    }
    let gzip = name.ends_with(".gz");
    // Uncompressed files may be export lines or scan output; gzip files are export data.
    let layout = if gzip { Layout::ExportLines } else { sniff_layout(path, &display)? };
    Ok(DataFile { location: Location::Path(path.to_owned()), display, gzip, layout, size, expected: None })
}

/// Reads the first field name of an uncompressed JSON file to tell export lines from scan output.
fn sniff_layout(path: &Path, display: &str) -> Result<Layout, SourceError> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path).and_then(|f| f.take(4096).read_to_end(&mut head)).map_err(io_err(path))?;
    sniff_bytes(&head).map_err(|why| match why {
        Sniff::Incremental => SourceError::IncrementalData { path: display.to_owned() },
        Sniff::Unknown(why) => SourceError::UnknownContent { path: display.to_owned(), why },
    })
}

pub(crate) enum Sniff {
    Incremental,
    Unknown(String),
}

pub(crate) fn sniff_bytes(head: &[u8]) -> Result<Layout, Sniff> {
    let text = String::from_utf8_lossy(head);
    let t = text.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '\u{feff}');
    if t.is_empty() {
        return Ok(Layout::ExportLines); // an empty file holds no items either way
    }
    let Some(rest) = t.strip_prefix('{') else {
        // Not a JSON object: let the scan reader refuse it with its hint about output formats.
        return Ok(Layout::ScanOutput);
    };
    let rest = rest.trim_start();
    let key: String = rest.strip_prefix('"').map(|r| r.chars().take_while(|&c| c != '"').collect()).unwrap_or_default();
    match key.as_str() {
        "Item" => Ok(Layout::ExportLines),
        "Items" | "Count" | "ScannedCount" | "ConsumedCapacity" | "LastEvaluatedKey" | "NextToken" => {
            Ok(Layout::ScanOutput)
        }
        "Metadata" | "Keys" | "NewImage" | "OldImage" => Err(Sniff::Incremental),
        "" => Err(Sniff::Unknown("it does not start with a JSON object field".into())),
        other => Err(Sniff::Unknown(format!("its first field is `{other}`, not `Item` or `Items`"))),
    }
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
    fn location(&self, p: &Self::P) -> Location;
}

/// Local folders, read with `std::fs`.
struct LocalTree;

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
    fn location(&self, p: &PathBuf) -> Location {
        Location::Path(p.clone())
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
            location: tree.location(&path),
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

/// Per-file verification results, filled while reading.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileCheck {
    /// `verified`, `mismatch` or `not_listed` (no manifest entry).
    pub md5: CheckStatus,
    pub md5_actual: Option<String>,
    pub item_count: CheckStatus,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Verified,
    Mismatch,
    #[default]
    NotListed,
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckStatus::Verified => "verified",
            CheckStatus::Mismatch => "mismatch",
            CheckStatus::NotListed => "not listed",
        })
    }
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

    #[test]
    fn sniffing() {
        assert_eq!(sniff_bytes(b"{\"Item\":{}}").ok(), Some(Layout::ExportLines));
        assert_eq!(sniff_bytes(b"{\n    \"Items\": [").ok(), Some(Layout::ScanOutput));
        assert_eq!(sniff_bytes(b"ITEMS\t1").ok(), Some(Layout::ScanOutput));
        assert!(matches!(sniff_bytes(b"{\"Metadata\":{}}"), Err(Sniff::Incremental)));
        assert!(matches!(sniff_bytes(b"{\"foo\":1}"), Err(Sniff::Unknown(_))));
    }
}

/// Base64 of an MD5 digest already computed.
pub fn md5_base64_digest(digest: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(digest)
}

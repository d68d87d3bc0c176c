//! What to read and in what order: DynamoDB export folders and their manifests, bare data
//! files, scan output and live tables, resolved into a [`Plan`] of [`DataFile`]s; and framing
//! ([`frame`]): every data file read as a sequence of units, the same way for every command.
//!
//! Resolution turns what the user named (a [`Location`]) into data files in processing order,
//! each with what the manifests promise about it (item count, MD5 of the compressed bytes).
//! Manifests are the source of truth ([`manifest`]): `data/` folders of exports are never
//! listed, manifest keys and links that would leave the export root are refused, and so is a
//! data file listed twice. What was read is compared with what the manifests promise in
//! [`integrity`], as typed mismatches; the pipeline decides what they mean. Live tables
//! (`dynamodb://TABLE`) are scanned into spool files first ([`live`]). This module knows nothing
//! of Arrow or mappings.

pub mod chain;
pub mod frame;
pub mod integrity;
pub mod live;
pub mod manifest;
pub mod object;
pub mod shard;

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use md5::{Digest, Md5};
use serde::Serialize;

pub use manifest::{ExportInfo, SideFileCheck};

use crate::aws::AwsOptions;
use crate::decode::Format;
use crate::decode::scan::ScanError;
use crate::store::{Location, StoreError};

/// Where a data file's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Path(PathBuf),
    Stdin,
    Object(object::ObjectRef),
}

/// Opens a data file for streaming.
pub fn open(f: &DataFile) -> std::io::Result<Box<dyn std::io::Read + Send>> {
    match &f.input {
        Input::Path(p) => Ok(Box::new(std::fs::File::open(p)?)),
        Input::Stdin => Ok(Box::new(std::io::stdin())),
        Input::Object(o) => Ok(Box::new(object::ObjectReader::open(o, &f.display))),
    }
}

/// How a data file's content is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// JSON Lines of `{"Item":{...}}` (or change records), gzip-compressed or not.
    ExportLines,
    /// `aws dynamodb scan` output, one or more JSON documents.
    ScanOutput,
    /// Amazon Ion text lines of `$ion_1_0 {Item:{...}}` (or change records), gzip-compressed or
    /// not: the data files of an `ION` export.
    IonLines,
}

impl Layout {
    /// The layout of a data file named `name` (`.ion.gz` and `.ion` are Ion), when the name says.
    pub fn from_name(name: &str) -> Option<Layout> {
        if name.ends_with(".ion.gz") || name.ends_with(".ion") {
            Some(Layout::IonLines)
        } else if name.ends_with(".gz") {
            Some(Layout::ExportLines)
        } else {
            None
        }
    }
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
    pub input: Input,
    /// The name used in reports and the rejects table.
    pub display: String,
    pub gzip: bool,
    pub layout: Layout,
    /// Size on disk in bytes (compressed), 0 for stdin.
    pub size: u64,
    pub expected: Option<Expected>,
}

impl DataFile {
    /// The wire format of the file's units.
    pub fn format(&self) -> Format {
        match self.layout {
            Layout::ExportLines => Format::ExportJson,
            Layout::ScanOutput => Format::ScanItemJson,
            Layout::IonLines => Format::ExportIon,
        }
    }
}

/// Everything a run needs to read.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub files: Vec<DataFile>,
    pub exports: Vec<ExportInfo>,
}

impl Plan {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Every data file belongs to one of the plan's exports (no bare data file, scan or stdin).
    pub fn only_exports(&self) -> bool {
        let owned: usize = self.exports.iter().map(|e| e.files.len()).sum();
        !self.exports.is_empty() && owned == self.files.len()
    }

    /// Appends `other`'s exports and files after this plan's, each export keeping its files.
    pub fn append(&mut self, other: Plan) {
        let offset = self.files.len();
        self.files.extend(other.files);
        self.exports.extend(other.exports.into_iter().map(|mut e| {
            e.files = e.files.start + offset..e.files.end + offset;
            e
        }));
    }

    /// The plan of the exports `keep` accepts, with their files (files of no export are dropped).
    pub fn retain_exports(self, keep: impl Fn(&ExportInfo) -> bool) -> Plan {
        let mut out = Plan::default();
        let mut files: Vec<Option<DataFile>> = self.files.into_iter().map(Some).collect();
        for mut e in self.exports.into_iter().filter(|e| keep(e)) {
            let start = out.files.len();
            out.files.extend(e.files.clone().filter_map(|i| files.get_mut(i).and_then(Option::take)));
            e.files = start..out.files.len();
            out.exports.push(e);
        }
        out
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
    #[error("manifest key `{key}` in `{manifest}`{} leaves the export root", at_line(.line))]
    KeyEscapesRoot { manifest: String, line: Option<usize>, key: String },
    #[error("`{path}` resolves to `{target}`, outside the export root `{root}`")]
    LinkEscapesRoot { path: String, target: String, root: String },
    #[error("`{path}` is not a regular file")]
    NotAFile { path: String },
    #[error("`{path}` is {size} bytes, more than a manifest can be ({max} bytes)")]
    ManifestTooLarge { path: String, size: u64, max: u64 },
    #[error("`{path}` has `{field}: \"{value}\"`; expected {expected}")]
    UnknownSummaryValue { path: String, field: &'static str, value: String, expected: &'static str },
    #[error("`{path}` has no `{field}`, which an incremental export's summary has")]
    MissingSummaryField { path: String, field: &'static str },
    #[error("data file `{path}` listed in `{manifest}` line {line} is missing (integrity check)")]
    MissingDataFile { manifest: String, line: usize, path: String },
    #[error(
        "data file `{path}`, listed in the export's manifest, disappeared while etl was reading the export (integrity check)"
    )]
    VanishedDataFile { path: String },
    #[error("`{manifest}` lists data file `{key}` twice, on lines {first_line} and {line} (duplicate check)")]
    DuplicateDataFile { manifest: String, first_line: usize, line: usize, key: String },
    #[error(
        "`{manifest}` lists the same bytes twice: line {first_line} `{first_key}` and line {line} `{key}` have the same MD5 `{md5}` and size ({size} bytes) (duplicate check)"
    )]
    DuplicateContent {
        manifest: String,
        first_line: usize,
        first_key: String,
        line: usize,
        key: String,
        md5: String,
        size: u64,
    },
    #[error("`{manifest}` line {line}: the sum of `itemCount` overflows (more than {} items)", u64::MAX)]
    ItemCountOverflow { manifest: String, line: usize },
    #[error("the item counts of all sources together overflow (more than {} items, at `{manifest}`)", u64::MAX)]
    TotalItemCountOverflow { manifest: String },
    #[error(
        "`{manifest}` line {line} lists `{path}`, but the export's `outputFormat` is `{format}`, whose data files end in `{extension}`"
    )]
    FormatMismatch { manifest: String, line: usize, path: String, format: String, extension: &'static str },
    #[error("`{path}` holds {count} exports ({list}); unwind one at a time")]
    SeveralExports { path: String, count: usize, list: String },
    #[error("no data files found under `{path}`")]
    NoDataFiles { path: String },
    #[error(
        "`{path}` holds incremental export records (`{{\"Metadata\":…,\"Keys\":…}}`), which are read only through their export's manifests"
    )]
    IncrementalData { path: String },
    #[error("`{path}` does not look like DynamoDB data: {why}")]
    UnknownContent { path: String, why: String },
    #[error("`{path}`: {source}")]
    Scan { path: String, source: ScanError },
    #[error("`{path}` line {line}: scan output is not valid UTF-8")]
    ScanUtf8 { path: String, line: u64 },
    #[error(transparent)]
    Chain(#[from] chain::ChainError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Dynamo(#[from] crate::aws::dynamodb::DynamoError),
}

impl SourceError {
    pub fn hint(&self) -> Option<String> {
        match self {
            SourceError::KeyEscapesRoot { .. } => Some("the manifest may have been edited; regenerate the export or fix the key".into()),
            SourceError::LinkEscapesRoot { .. } => Some(
                "links inside an export may point only within it; copy the files into the export folder, or pass the data files themselves (`etl unwind DIR/data/`) to read them without the manifests".into(),
            ),
            SourceError::DuplicateDataFile { .. } | SourceError::DuplicateContent { .. } => Some(
                "a data file listed twice would be read twice; the manifest was edited or damaged: copy the export again".into(),
            ),
            SourceError::ItemCountOverflow { .. } | SourceError::TotalItemCountOverflow { .. } => {
                Some("no table holds that many items; the manifest was edited or damaged: copy the export again".into())
            }
            SourceError::ManifestTooLarge { .. }
            | SourceError::NotAFile { .. }
            | SourceError::UnknownSummaryValue { .. }
            | SourceError::MissingSummaryField { .. } => {
                Some("this is not a manifest AWS writes; copy the export again".into())
            }
            SourceError::VanishedDataFile { .. } => Some(
                "something removed or replaced the export while etl read it; let the copy finish, then run again".into(),
            ),
            SourceError::MissingDataFile { .. } => Some(
                "copy the whole export folder, including every file named in `manifest-files.json` (for example with `aws s3 sync`)".into(),
            ),
            SourceError::SeveralExports { .. } => Some("pass one export's folder (`…/AWSDynamoDB/<ExportId>`) or its `manifest-summary.json`; a folder may hold one full export with the incremental exports that follow it".into()),
            SourceError::IncrementalData { .. } => Some(
                "name the incremental export's folder (`…/AWSDynamoDB/<ExportId>`) with its full export, or the folder holding `AWSDynamoDB/`".into(),
            ),
            SourceError::Chain(e) => e.hint(),
            SourceError::FormatMismatch { .. } => {
                Some("the manifest or the data files were edited or mixed up; copy the export again".into())
            }
            SourceError::NoDataFiles { .. } => {
                Some("point at an export folder (holding `AWSDynamoDB/`), a `manifest-summary.json`, or `.json.gz` / `.json` / `.ion.gz` / `.ion` data files".into())
            }
            SourceError::Store(e) => Some(e.hint().to_owned()),
            SourceError::Dynamo(e) => e.hint(),
            SourceError::Scan { source, .. } => source.hint().map(str::to_owned),
            SourceError::UnknownContent { .. } => Some(
                "etl reads DynamoDB export data files (`{\"Item\":…}` lines) and `aws dynamodb scan --output json` output".into(),
            ),
            _ => None,
        }
    }
}

impl SourceError {
    /// The export does not match its own manifests (a listed data file missing, a data file
    /// listed twice): the data broke the integrity policy, exit status 1.
    pub fn is_integrity(&self) -> bool {
        matches!(
            self,
            SourceError::MissingDataFile { .. }
                | SourceError::VanishedDataFile { .. }
                | SourceError::DuplicateDataFile { .. }
                | SourceError::DuplicateContent { .. }
        ) || matches!(self, SourceError::Chain(e) if e.is_policy())
    }
}

fn at_line(line: &Option<usize>) -> String {
    line.map(|n| format!(" line {n}")).unwrap_or_default()
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SourceError + '_ {
    move |source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            SourceError::NotFound { path: path.display().to_string() }
        } else {
            SourceError::Io { path: path.display().to_string(), source }
        }
    }
}

/// Base64 of the MD5 digest, the form export manifests use.
pub fn md5_base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Md5::digest(bytes))
}

/// Resolves every named source, in order, into one plan. Live tables are scanned into
/// `spool` (a folder the caller owns and removes).
pub fn resolve(
    sources: &[Location],
    aws: &AwsOptions,
    scan: &live::ScanSettings,
    spool: &Path,
) -> Result<Plan, SourceError> {
    let mut plan = Plan::default();
    for (n, source) in sources.iter().enumerate() {
        match source {
            Location::Stdin => plan.files.push(DataFile {
                input: Input::Stdin,
                display: "<stdin>".into(),
                gzip: false,
                layout: Layout::ScanOutput,
                size: 0,
                expected: None,
            }),
            Location::Object(url) => object::resolve_object(url, aws, &mut plan)?,
            Location::Path(p) => resolve_path(p, &mut plan)?,
            Location::DynamoDb { table } => {
                plan.files.extend(live::scan(table, scan, aws, &spool.join(n.to_string()))?);
            }
        }
    }
    check_item_totals(&plan)?;
    Ok(plan)
}

/// Every sum of item counts the run makes fits: over the summaries, and over the data files.
fn check_item_totals(plan: &Plan) -> Result<(), SourceError> {
    let mut summaries = 0u64;
    for e in &plan.exports {
        summaries = summaries
            .checked_add(e.summary_item_count)
            .ok_or_else(|| SourceError::TotalItemCountOverflow { manifest: e.export_dir.clone() })?;
    }
    let mut files = 0u64;
    for f in &plan.files {
        if let Some(e) = &f.expected {
            files = files
                .checked_add(e.item_count)
                .ok_or_else(|| SourceError::TotalItemCountOverflow { manifest: f.display.clone() })?;
        }
    }
    Ok(())
}

fn resolve_path(path: &Path, plan: &mut Plan) -> Result<(), SourceError> {
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    if meta.is_file() {
        if path.file_name().is_some_and(|n| n == "manifest-summary.json") {
            let tree = manifest::LocalTree::new(path, manifest::Named::Summary)?;
            return manifest::resolve_export(&tree, &path.to_owned(), plan);
        }
        plan.files.push(data_file(path, path.display().to_string())?);
        return Ok(());
    }
    let summary = path.join("manifest-summary.json");
    if summary.is_file() {
        let tree = manifest::LocalTree::new(&summary, manifest::Named::ExportDir)?;
        return manifest::resolve_export(&tree, &summary, plan);
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
            _ => {
                // One full export and the incremental exports after it form a chain; two full
                // exports do not.
                let first = plan.exports.len();
                for s in &summaries {
                    let tree = manifest::LocalTree::new(s, manifest::Named::Root)?;
                    manifest::resolve_export(&tree, s, plan)?;
                }
                let ids = |e: &ExportInfo| e.export_dir.rsplit(['/', '\\']).next().map(|n| format!("`{n}`"));
                return several_full_exports(path.display().to_string(), &plan.exports[first..], ids);
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

/// Refuses a folder whose exports (`exports`) hold more than one full export.
pub(crate) fn several_full_exports(
    path: String,
    exports: &[ExportInfo],
    id: impl Fn(&ExportInfo) -> Option<String>,
) -> Result<(), SourceError> {
    let full = exports.iter().filter(|e| e.window.is_none()).count();
    if full > 1 {
        let list = exports.iter().filter_map(id).collect::<Vec<_>>().join(", ");
        return Err(SourceError::SeveralExports { path, count: exports.len(), list });
    }
    Ok(())
}

/// Folders a listing of data files never enters: etl's own run files (`_etl/`: run reports,
/// contracts, kept exports, a run's staged parts) and Delta logs (`_delta_log/`), whose JSON files
/// are not DynamoDB data. An output written inside a folder of data files is thus not read back
/// as input by the next run over that folder (its tables' Parquet files are not data files).
pub(crate) const NOT_DATA_FOLDERS: [&str; 2] = ["_etl", "_delta_log"];

/// Whether a file named `name`, in a listing of data files, is one (`*.gz`, `*.json`, `*.ion`,
/// not a manifest).
pub(crate) fn is_data_file_name(name: &str) -> bool {
    (name.ends_with(".gz") || name.ends_with(".json") || name.ends_with(".ion")) && !name.starts_with("manifest-")
}

fn collect_data_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), SourceError> {
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let p = entry.path();
        let ft = entry.file_type().map_err(io_err(&p))?;
        if ft.is_dir() {
            if NOT_DATA_FOLDERS.iter().any(|n| entry.file_name() == *n) {
                continue;
            }
            collect_data_files(&p, out)?;
        } else if p.file_name().and_then(|n| n.to_str()).is_some_and(is_data_file_name) {
            out.push(p);
        }
    }
    Ok(())
}

fn data_file(path: &Path, display: String) -> Result<DataFile, SourceError> {
    let size = std::fs::metadata(path).map_err(io_err(path))?.len();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let gzip = name.ends_with(".gz");
    // Uncompressed JSON files may be export lines or scan output; gzip files are export data.
    let layout = match Layout::from_name(&name) {
        Some(layout) => layout,
        None => sniff_layout(path, &display)?,
    };
    Ok(DataFile { input: Input::Path(path.to_owned()), display, gzip, layout, size, expected: None })
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

/// Per-file verification results, filled while reading.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileCheck {
    /// `verified`, `mismatch` or `not_listed` (no manifest entry).
    pub md5: CheckStatus,
    pub md5_actual: Option<String>,
    pub item_count: CheckStatus,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
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

/// Base64 of an MD5 digest already computed.
pub fn md5_base64_digest(digest: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffing() {
        assert_eq!(sniff_bytes(b"{\"Item\":{}}").ok(), Some(Layout::ExportLines));
        assert_eq!(sniff_bytes(b"{\n    \"Items\": [").ok(), Some(Layout::ScanOutput));
        assert_eq!(sniff_bytes(b"ITEMS\t1").ok(), Some(Layout::ScanOutput));
        assert!(matches!(sniff_bytes(b"{\"Metadata\":{}}"), Err(Sniff::Incremental)));
        assert!(matches!(sniff_bytes(b"{\"foo\":1}"), Err(Sniff::Unknown(_))));
    }

    #[test]
    fn a_folder_of_data_files_skips_etl_outputs_inside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let line = br#"{"Item":{"PK":{"S":"a"}}}"#;
        for rel in ["a.json", "more/_etl_x/b.json", "out/_etl/run.json", "out/t/_delta_log/0.json"] {
            let p = tmp.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, line).unwrap();
        }
        let mut plan = Plan::default();
        resolve_path(tmp.path(), &mut plan).unwrap();
        let files: Vec<String> = plan
            .files
            .iter()
            .map(|f| f.display.strip_prefix(&*tmp.path().to_string_lossy()).unwrap().replace('\\', "/"))
            .collect();
        assert_eq!(files, ["/a.json", "/more/_etl_x/b.json"]);
    }
}

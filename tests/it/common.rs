//! Helpers: running the binary, building exports, reading Parquet back as canonical rows.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use base64::Engine as _;
use datafusion::arrow::array::{
    Array, AsArray, BinaryArray, BooleanArray, Decimal128Array, Int64Array, ListArray, RecordBatch, StringArray,
    StructArray,
};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{Value as Json, json};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn sample_export() -> PathBuf {
    root().join("sample-exports/shop")
}

/// The real AWS export, read from `../shared` when it is there (never copied into the project).
/// `None` (skip) when it is not, unless `ETL_REQUIRE_REAL_EXPORT=1` (`scripts/test` sets it
/// unless told `ETL_REQUIRE_REAL_EXPORT=0`), which turns its absence into a failure.
pub fn real_export() -> Option<PathBuf> {
    let p = root().join("../shared/fixtures/aws-real-export");
    let present = p.join("AWSDynamoDB").is_dir();
    let required = std::env::var_os("ETL_REQUIRE_REAL_EXPORT").is_some_and(|v| v == "1");
    assert!(present || !required, "ETL_REQUIRE_REAL_EXPORT=1 but {} is missing", p.display());
    present.then_some(p)
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn etl<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = Command::new(env!("CARGO_BIN_EXE_etl")).args(args).env("NO_COLOR", "1").output().expect("run etl");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `etl sql --data DATA --format csv ARGS…` (a query or `-f FILE`, and options), which must
/// succeed: the CSV it prints.
pub fn sql_csv(data: &str, args: &[&str]) -> String {
    let mut all = vec!["sql", "--data", data, "--format", "csv"];
    all.extend_from_slice(args);
    let r = etl(&all);
    assert_eq!(r.code, 0, "etl {all:?}\nstderr:\n{}", r.stderr);
    r.stdout
}

/// `etl unwind sample-exports/shop --out DIR`, once for the whole test binary.
pub fn sample_out() -> &'static Path {
    static OUT: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    let (_, out) = OUT.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        unwind(&[&sample_export()], &out, &[], 0);
        (tmp, out)
    });
    out
}

/// Runs `etl unwind SOURCES --out OUT EXTRA...` and insists on `code`.
pub fn unwind(sources: &[&Path], out: &Path, extra: &[&str], code: i32) -> Run {
    let mut args: Vec<std::ffi::OsString> = vec!["unwind".into()];
    args.extend(sources.iter().map(|p| p.as_os_str().to_owned()));
    args.push("--out".into());
    args.push(out.as_os_str().to_owned());
    args.extend(extra.iter().map(Into::into));
    let r = etl(&args);
    assert_eq!(r.code, code, "etl {args:?}\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r
}

/// The full export and the incremental exports, in window order, that `etl sample --out DIR
/// --incrementals N` wrote (as its `final/changes.json` lists them).
pub fn sample_chain(dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let changes: Json = serde_json::from_slice(&std::fs::read(dir.join("final/changes.json")).unwrap()).unwrap();
    let incs: Vec<PathBuf> = changes["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| PathBuf::from(w["export_dir"].as_str().unwrap()))
        .collect();
    let full = std::fs::read_dir(dir.join("AWSDynamoDB"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("manifest-summary.json").is_file() && !incs.contains(p))
        .unwrap();
    (full, incs)
}

/// `etl sample --out DIR` in DynamoDB JSON, `[users, files, seed, incrementals, percent]`: that
/// many users in that many data files from that seed, and that many incremental exports each
/// changing that percent of the items. Returns the full export and the incremental exports in
/// order.
pub fn json_chain(dir: &Path, knobs: [u32; 5]) -> (PathBuf, Vec<PathBuf>) {
    chain_as(dir, knobs, "dynamodb-json")
}

/// [`json_chain`] in the data-file format `format` (`dynamodb-json` or `ion`).
pub fn chain_as(dir: &Path, knobs: [u32; 5], format: &str) -> (PathBuf, Vec<PathBuf>) {
    let names = ["--users", "--files", "--seed", "--incrementals", "--change-percent"];
    let mut args = vec!["sample".to_owned(), "--out".to_owned(), dir.to_str().unwrap().to_owned()];
    for (name, n) in names.iter().zip(knobs) {
        args.extend([(*name).to_owned(), n.to_string()]);
    }
    args.extend(["--format".to_owned(), format.to_owned()]);
    let r = etl(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    sample_chain(dir)
}

pub fn run_report(out: &Path) -> Json {
    serde_json::from_str(&std::fs::read_to_string(out.join("_etl/run.json")).expect("run.json"))
        .expect("run.json is JSON")
}

/// Appends `line` to the first data file of the export at `export` (generated under `root`), as
/// a gzip member of its own: the file no longer matches its manifest (`--allow-mismatch`).
pub fn append_line(root: &Path, export: &Path, line: &str) {
    let listing = std::fs::read_to_string(export.join("manifest-files.json")).unwrap();
    let first =
        listing.lines().map(|l| serde_json::from_str::<Json>(l).unwrap()).find(|f| f["itemCount"] != 0).unwrap();
    let path = root.join(first["dataFileS3Key"].as_str().unwrap());
    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&gzip(format!("{line}\n").as_bytes())).unwrap();
}

/// The text of the gzip file at `path` (every member).
pub fn gunzip(path: &Path) -> String {
    use std::io::Read as _;
    let mut s = String::new();
    flate2::read::MultiGzDecoder::new(&std::fs::read(path).unwrap()[..]).read_to_string(&mut s).unwrap();
    s
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

pub fn md5_b64(bytes: &[u8]) -> String {
    use md5::Digest as _;
    base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(bytes))
}

/// Writes a full export in the real layout: one data file per entry of `files` (raw file bytes,
/// already gzipped or not), manifests with correct checksums and counts, `.md5` side files.
/// Returns the export folder `dir/AWSDynamoDB/<id>`.
pub fn write_export(dir: &Path, files: &[Vec<u8>], counts: &[u64]) -> PathBuf {
    write_export_as(dir, files, counts, "DYNAMODB_JSON")
}

/// [`write_export`] with the summary's `outputFormat` `format` (`DYNAMODB_JSON` or `ION`) and
/// data files named for it (`.json.gz` or `.ion.gz`).
pub fn write_export_as(dir: &Path, files: &[Vec<u8>], counts: &[u64], format: &str) -> PathBuf {
    write_export_id(dir, files, counts, format, "01790000000000-0a1b2c3d")
}

/// [`write_export_as`] with the export id `id` (AWS never reuses one: two exports of other
/// contents need two ids).
pub fn write_export_id(dir: &Path, files: &[Vec<u8>], counts: &[u64], format: &str, id: &str) -> PathBuf {
    let ext = if format == "ION" { "ion.gz" } else { "json.gz" };
    let export = dir.join("AWSDynamoDB").join(id);
    std::fs::create_dir_all(export.join("data")).unwrap();
    let mut manifest = String::new();
    for (i, bytes) in files.iter().enumerate() {
        let key = format!("AWSDynamoDB/{id}/data/file{i:02}abcdefghijklmnopqrs.{ext}");
        std::fs::write(dir.join(&key), bytes).unwrap();
        manifest.push_str(
            &json!({"itemCount": counts[i], "md5Checksum": md5_b64(bytes), "etag": "0-1", "dataFileS3Key": key})
                .to_string(),
        );
        manifest.push('\n');
    }
    std::fs::write(export.join("manifest-files.json"), &manifest).unwrap();
    std::fs::write(export.join("manifest-files.md5"), md5_b64(manifest.as_bytes())).unwrap();
    let summary = json!({
        "version": "2020-06-30", "exportArn": format!("arn:aws:dynamodb:eu-west-1:111122223333:table/t/export/{id}"),
        "startTime": "2026-09-01T08:00:00.000Z", "endTime": "2026-09-01T08:06:12.345Z", "tableArn": "arn:aws:dynamodb:eu-west-1:111122223333:table/t",
        "tableId": "00000000-1111-2222-3333-444444444444", "exportTime": "2026-09-01T08:00:00.000Z", "s3Bucket": "b", "s3Prefix": null,
        "s3SseAlgorithm": "AES256", "s3SseKmsKeyId": null, "manifestFilesS3Key": format!("AWSDynamoDB/{id}/manifest-files.json"),
        "billedSizeBytes": 0, "itemCount": counts.iter().sum::<u64>(), "outputFormat": format
    })
    .to_string();
    std::fs::write(export.join("manifest-summary.json"), &summary).unwrap();
    std::fs::write(export.join("manifest-summary.md5"), md5_b64(summary.as_bytes())).unwrap();
    std::fs::write(export.join("_started"), "").unwrap();
    export
}

/// Every batch of a table folder, part files in name order.
pub fn read_table(dir: &Path) -> (SchemaRef, Vec<RecordBatch>) {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    parts.sort();
    assert!(!parts.is_empty(), "no parquet files in {}", dir.display());
    let mut schema = None;
    let mut batches = Vec::new();
    for p in parts {
        let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&p).unwrap()).unwrap();
        schema = Some(b.schema().clone());
        for batch in b.build().unwrap() {
            batches.push(batch.unwrap());
        }
    }
    (schema.unwrap(), batches)
}

pub fn count_rows(dir: &Path) -> usize {
    read_table(dir).1.iter().map(RecordBatch::num_rows).sum()
}

fn canonical_decimal(v: i128, scale: i8) -> String {
    let neg = v < 0;
    let digits = v.unsigned_abs().to_string();
    let scale = scale.max(0) as usize;
    let s = if scale == 0 {
        digits
    } else if digits.len() > scale {
        format!("{}.{}", &digits[..digits.len() - scale], &digits[digits.len() - scale..])
    } else {
        format!("0.{}{}", "0".repeat(scale - digits.len()), digits)
    };
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_owned() } else { s };
    if neg && s != "0" { format!("-{s}") } else { s }
}

/// One cell as canonical JSON: numbers as exact decimal text, binary as base64, nulls as `None`.
pub fn cell(array: &dyn Array, i: usize) -> Option<Json> {
    if array.is_null(i) {
        return None;
    }
    Some(match array.data_type() {
        DataType::Int64 => Json::String(array.as_any().downcast_ref::<Int64Array>().unwrap().value(i).to_string()),
        DataType::Decimal128(_, s) => {
            Json::String(canonical_decimal(array.as_any().downcast_ref::<Decimal128Array>().unwrap().value(i), *s))
        }
        DataType::Utf8 => Json::String(array.as_any().downcast_ref::<StringArray>().unwrap().value(i).to_owned()),
        DataType::Binary => Json::String(
            base64::engine::general_purpose::STANDARD
                .encode(array.as_any().downcast_ref::<BinaryArray>().unwrap().value(i)),
        ),
        DataType::Boolean => Json::Bool(array.as_any().downcast_ref::<BooleanArray>().unwrap().value(i)),
        DataType::List(_) => {
            let l = array.as_any().downcast_ref::<ListArray>().unwrap();
            let v = l.value(i);
            Json::Array((0..v.len()).map(|j| cell(v.as_ref(), j).unwrap_or(Json::Null)).collect())
        }
        DataType::Struct(fields) => {
            let s = array.as_any().downcast_ref::<StructArray>().unwrap();
            let mut m = serde_json::Map::new();
            for (f, col) in fields.iter().zip(s.columns()) {
                if let Some(v) = cell(col.as_ref(), i) {
                    m.insert(f.name().clone(), v);
                }
            }
            Json::Object(m)
        }
        DataType::Int32 => {
            Json::String(array.as_primitive::<datafusion::arrow::datatypes::Int32Type>().value(i).to_string())
        }
        // A mapping's types: an instant as microseconds since the epoch, whatever unit it is kept
        // in; a date as days since the epoch; a double as Rust writes it.
        DataType::Timestamp(..) => {
            let micros = DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None);
            let c = datafusion::arrow::compute::cast(&array.slice(i, 1), &micros).unwrap();
            Json::String(
                c.as_primitive::<datafusion::arrow::datatypes::TimestampMicrosecondType>().value(0).to_string(),
            )
        }
        DataType::Date32 => {
            Json::String(array.as_primitive::<datafusion::arrow::datatypes::Date32Type>().value(i).to_string())
        }
        DataType::Float64 => {
            Json::String(array.as_primitive::<datafusion::arrow::datatypes::Float64Type>().value(i).to_string())
        }
        other => panic!("unexpected type {other}"),
    })
}

/// Every table folder of an output but `_rejects`, with its canonical rows ([`canonical_rows`]).
pub fn table_rows(out: &Path) -> BTreeMap<String, Vec<String>> {
    let mut t = BTreeMap::new();
    for e in std::fs::read_dir(out).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_dir() && name != "_etl" && name != "_rejects" {
            t.insert(name, canonical_rows(&p));
        }
    }
    t
}

/// Rows of a table as canonical JSON objects (null cells left out), sorted.
pub fn canonical_rows(dir: &Path) -> Vec<String> {
    let mut rows = rows_in_order(&read_table(dir).1);
    rows.sort();
    rows
}

/// The rows of `batches` as canonical JSON objects (null cells left out), in their order.
pub fn rows_in_order(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let mut m = BTreeMap::new();
            for (f, col) in b.schema().fields().iter().zip(b.columns()) {
                if let Some(v) = cell(col.as_ref(), i) {
                    m.insert(f.name().clone(), v);
                }
            }
            rows.push(serde_json::to_string(&m).unwrap());
        }
    }
    rows
}

/// What etl should have written for one DynamoDB-JSON value in a column of type `field`.
pub fn expected_cell(v: &Json, field: &Field) -> Option<Json> {
    let meta = field.metadata().get("dynamodb.type").cloned().unwrap_or_default();
    if meta.contains("encoding=dynamodb-json") {
        let wrapped = json!({ "x": v }).to_string();
        let item = etl::decode::json::decode_item_object(&wrapped).expect("valid value");
        let mut s = String::new();
        item[0].1.write_dynamodb_json(&mut s);
        return Some(Json::String(s));
    }
    let (tag, payload) = v.as_object().and_then(|o| o.iter().next()).expect("typed value");
    let num = |t: &Json| Json::String(etl::decode::Number::parse(t.as_str().unwrap()).unwrap().as_str().to_owned());
    let b64 = |t: &Json| {
        let raw = base64::engine::general_purpose::STANDARD.decode(t.as_str().unwrap()).unwrap();
        Json::String(base64::engine::general_purpose::STANDARD.encode(raw))
    };
    Some(match tag.as_str() {
        "NULL" => return None,
        "S" | "BOOL" => payload.clone(),
        "N" => num(payload),
        "B" => b64(payload),
        "SS" => payload.clone(),
        "NS" => Json::Array(payload.as_array().unwrap().iter().map(num).collect()),
        "BS" => Json::Array(payload.as_array().unwrap().iter().map(b64).collect()),
        "L" => {
            let DataType::List(el) = field.data_type() else { panic!("L in {}", field.data_type()) };
            Json::Array(
                payload.as_array().unwrap().iter().map(|e| expected_cell(e, el).unwrap_or(Json::Null)).collect(),
            )
        }
        "M" => {
            let DataType::Struct(fields) = field.data_type() else { panic!("M in {}", field.data_type()) };
            let mut m = serde_json::Map::new();
            for (k, e) in payload.as_object().unwrap() {
                let f = fields.iter().find(|f| f.name() == k).expect("struct field");
                if let Some(x) = expected_cell(e, f) {
                    m.insert(k.clone(), x);
                }
            }
            Json::Object(m)
        }
        other => panic!("unknown type {other}"),
    })
}

/// Expected canonical rows of a table from the source items routed to it.
pub fn expected_rows(items: &[Json], schema: &SchemaRef) -> Vec<String> {
    let mut rows: Vec<String> = items
        .iter()
        .map(|item| {
            let mut m = BTreeMap::new();
            for (k, v) in item.as_object().unwrap() {
                let field = schema.field_with_name(k).unwrap_or_else(|_| panic!("no column `{k}`"));
                if let Some(x) = expected_cell(v, field) {
                    m.insert(k.clone(), x);
                }
            }
            serde_json::to_string(&m).unwrap()
        })
        .collect();
    rows.sort();
    rows
}

/// Every file below `dir`, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Items of a sample-layout export, read straight from its data files with serde_json.
pub fn export_items(export_root: &Path) -> Vec<Json> {
    let mut out = Vec::new();
    let files: Vec<PathBuf> =
        files_under(export_root).into_iter().filter(|p| p.to_string_lossy().ends_with(".json.gz")).collect();
    for f in files {
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::MultiGzDecoder::new(std::fs::File::open(&f).unwrap()),
            &mut text,
        )
        .unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: Json = serde_json::from_str(line).unwrap();
            out.push(v["Item"].clone());
        }
    }
    out
}

/// Groups items by their `Type` value.
pub fn by_type(items: &[Json]) -> BTreeMap<String, Vec<Json>> {
    let mut m: BTreeMap<String, Vec<Json>> = BTreeMap::new();
    for it in items {
        let t = it["Type"]["S"].as_str().unwrap_or("").to_owned();
        m.entry(t).or_default().push(it.clone());
    }
    m
}

/// What became of a child whose stdout reader left early.
pub struct ClosedRun {
    pub code: i32,
    /// The stdout lines read before closing the pipe.
    pub read: Vec<String>,
    pub stderr: String,
}

/// Runs `cmd` with `stdin` fed to it, reads `lines` lines of its stdout (none: the pipe is closed
/// before it can write anything) and closes the pipe, as `| head -N` does; then waits for it.
pub fn run_closing_stdout(mut cmd: Command, stdin: &[u8], lines: usize) -> ClosedRun {
    use std::io::{BufRead as _, Read as _};
    use std::process::Stdio;
    cmd.env("NO_COLOR", "1").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run etl");
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_vec();
    // The child may quit before it reads everything: a write error here is its business.
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&stdin);
    });
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut read = Vec::new();
    for _ in 0..lines {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        read.push(line);
    }
    drop(stdout);
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    feeder.join().unwrap();
    ClosedRun { code: status.code().unwrap_or(-1), read, stderr }
}

/// `etl ARGS` as a command, without running it.
pub fn etl_command<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_etl"));
    cmd.args(args);
    cmd
}

/// Waits for `child`, started at `start`; kills it and fails the test once `limit` has passed.
/// `what` names it in that failure.
pub fn wait_or_kill(child: &mut Child, start: Instant, limit: Duration, what: &str) -> ExitStatus {
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running after {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every file under `dir` (relative path -> MD5 of its bytes).
pub fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, md5_b64(&std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// A small random generator (xorshift) for the tests that kill runs at random points, seeded
/// from `ETL_FAULT_SEED` or the clock; the seed is printed so a failure can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("ETL_FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
        });
        eprintln!("{test}: ETL_FAULT_SEED={seed}");
        Rng(seed | 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

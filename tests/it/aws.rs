//! etl against a local AWS stand-in (moto's server, started by scripts/test): S3 sources and
//! outputs, live DynamoDB scans, `etl export`, and the errors a user meets on the way.
//!
//! Each test reads the endpoint from `ETL_MOTO_ENDPOINT`; without it the tests skip, or fail when
//! `ETL_REQUIRE_MOTO=1`. Child processes get dummy credentials and config paths that do not exist,
//! so the developer's own AWS setup never leaks in. Buckets and tables get names unique to the
//! test and the process, so tests run in parallel and against a long-lived server.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use datafusion::arrow::datatypes::{DataType, Field};
use serde_json::Value as Json;

use crate::common::*;

/// How long one child process may run before the test kills it and fails.
pub(crate) const CHILD_LIMIT: Duration = Duration::from_secs(180);

pub(crate) struct Moto {
    pub(crate) endpoint: String,
    pub(crate) python: String,
    aws: String,
    /// The working folder of every etl child; holds the nonexistent config and credentials
    /// paths given to every child.
    home: tempfile::TempDir,
}

/// The moto server of this run, or `None` (skip) when there is none and it is not required.
pub(crate) fn moto() -> Option<&'static Moto> {
    static MOTO: OnceLock<Option<Moto>> = OnceLock::new();
    MOTO.get_or_init(|| {
        let required = std::env::var_os("ETL_REQUIRE_MOTO").is_some_and(|v| v == "1");
        let Ok(endpoint) = std::env::var("ETL_MOTO_ENDPOINT") else {
            assert!(!required, "ETL_REQUIRE_MOTO=1 but ETL_MOTO_ENDPOINT is not set; run the suite with scripts/test");
            eprintln!("skipping AWS test: ETL_MOTO_ENDPOINT is not set (scripts/test starts moto and sets it)");
            return None;
        };
        let python = std::env::var("ETL_TEST_PYTHON")
            .expect("ETL_MOTO_ENDPOINT is set but ETL_TEST_PYTHON is not; run the suite with scripts/test");
        let aws = std::env::var("ETL_TEST_AWS")
            .unwrap_or_else(|_| Path::new(&python).with_file_name("aws").to_string_lossy().into_owned());
        Some(Moto {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            python,
            aws,
            home: tempfile::tempdir().unwrap(),
        })
    })
    .as_ref()
}

/// A bucket or table name no other test or run uses: lowercase, digits and dashes.
pub(crate) fn unique(tag: &str) -> String {
    static STAMP: OnceLock<u128> = OnceLock::new();
    static N: AtomicUsize = AtomicUsize::new(0);
    let stamp = STAMP.get_or_init(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() % 1_000_000
    });
    format!("etl-it-{tag}-{}-{stamp}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Whether a child talks to moto through `AWS_ENDPOINT_URL` or must be given the endpoint itself.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Endpoint {
    Env,
    NotInEnv,
}

/// The environment of every child: no inherited `AWS_*` variable, dummy credentials, a region,
/// config files that do not exist, no instance metadata lookups.
pub(crate) fn aws_env(m: &Moto, cmd: &mut Command, endpoint: Endpoint) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("AWS_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", m.home.path().join("no-such-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", m.home.path().join("no-such-credentials"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_PAGER", "")
        .env("NO_COLOR", "1");
    if endpoint == Endpoint::Env {
        cmd.env("AWS_ENDPOINT_URL", &m.endpoint);
    }
}

/// Runs `cmd` to the end with its output captured; kills it and fails after `limit`.
pub(crate) fn run_limited(mut cmd: Command, limit: Duration) -> (Run, Duration) {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let status = wait_or_kill(&mut child, start, limit, &format!("{cmd:?}"));
    let elapsed = start.elapsed();
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
    };
    (run, elapsed)
}

pub(crate) fn etl_cmd(m: &Moto, args: &[&str], endpoint: Endpoint, extra_env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_etl"));
    // In a scratch folder, so an `s3://` argument mistaken for a local path litters nothing.
    cmd.args(args).current_dir(m.home.path());
    aws_env(m, &mut cmd, endpoint);
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    cmd
}

/// `etl ARGS` with `AWS_ENDPOINT_URL` pointing at moto; insists on exit status `code`.
pub(crate) fn etl_aws(m: &Moto, args: &[&str], code: i32) -> Run {
    let (r, _) = run_limited(etl_cmd(m, args, Endpoint::Env, &[]), CHILD_LIMIT);
    assert_eq!(r.code, code, "etl {args:?}\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r
}

/// A helper from tests/aws/ with the endpoint as its first argument; returns its stdout.
pub(crate) fn py(m: &Moto, script: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(&m.python);
    cmd.arg(root().join("tests/aws").join(script)).arg(&m.endpoint).args(args);
    aws_env(m, &mut cmd, Endpoint::Env);
    let (r, _) = run_limited(cmd, CHILD_LIMIT);
    assert_eq!(r.code, 0, "{script} {args:?} failed\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r.stdout
}

pub(crate) fn s3_keys(m: &Moto, bucket: &str, prefix: &str) -> BTreeSet<String> {
    py(m, "s3.py", &["list", bucket, prefix]).lines().map(str::to_owned).collect()
}

pub(crate) fn s3_get(m: &Moto, bucket: &str, key: &str) -> Vec<u8> {
    let mut cmd = Command::new(&m.python);
    cmd.arg(root().join("tests/aws/s3.py")).args([&m.endpoint, "get", bucket, key]);
    aws_env(m, &mut cmd, Endpoint::Env);
    let out = cmd.stderr(Stdio::inherit()).output().unwrap();
    assert!(out.status.success(), "get s3://{bucket}/{key} failed");
    out.stdout
}

pub(crate) fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

// --- Shared fixtures -------------------------------------------------------------------------

/// The sample export uploaded unchanged to `s3://BUCKET/exports/shop/`, once.
pub(crate) fn shop_bucket(m: &Moto) -> &'static str {
    static BUCKET: OnceLock<String> = OnceLock::new();
    BUCKET.get_or_init(|| {
        let bucket = unique("shop");
        py(m, "upload.py", &[s(&sample_export()), &bucket, "exports/shop"]);
        bucket
    })
}

/// A table holding every item of the sample export, with point-in-time recovery on, once.
pub(crate) fn shop_table(m: &Moto) -> &'static str {
    static TABLE: OnceLock<String> = OnceLock::new();
    TABLE.get_or_init(|| {
        let table = unique("shop");
        let n = py(m, "load_table.py", &[&table, s(&sample_export()), "--pitr"]);
        assert_eq!(n.trim(), "3245", "items loaded");
        table
    })
}

/// The sample's export folder name, `AWSDynamoDB/<ExportId>`.
fn sample_export_id() -> String {
    let dir = sample_export().join("AWSDynamoDB");
    let mut ids: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(ids.len(), 1);
    ids.pop().unwrap()
}

// --- Comparing outputs -----------------------------------------------------------------------

fn table_names(out: &Path) -> BTreeSet<String> {
    std::fs::read_dir(out)
        .unwrap_or_else(|e| panic!("read {}: {e}", out.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "_etl" && !n.starts_with('.'))
        .collect()
}

/// A field as text, with struct members sorted by name at every level: column order follows the
/// order items arrive in, which differs between sources (an export's files, a parallel scan's
/// segments), so only names, types, nullability and metadata are compared.
fn field_text(f: &Field) -> String {
    let meta: BTreeMap<&String, &String> = f.metadata().iter().collect();
    format!("{}: {} null={} {meta:?}", f.name(), type_text(f.data_type()), f.is_nullable())
}

fn type_text(t: &DataType) -> String {
    match t {
        DataType::Struct(fields) => {
            let mut members: Vec<String> = fields.iter().map(|f| field_text(f)).collect();
            members.sort();
            format!("Struct({})", members.join(", "))
        }
        DataType::List(f) => format!("List({})", field_text(f)),
        other => other.to_string(),
    }
}

fn schema_text(dir: &Path) -> BTreeMap<String, String> {
    let (schema, _) = read_table(dir);
    schema.fields().iter().map(|f| (f.name().clone(), field_text(f))).collect()
}

/// The same set of tables, and per table the same columns (names, types, metadata) and the same
/// multiset of rows (order may differ between sources). `_etl/run.json` may differ.
pub(crate) fn assert_same_tables(want: &Path, got: &Path, what: &str) {
    assert_eq!(table_names(got), table_names(want), "{what}: table names");
    for t in table_names(want) {
        assert_eq!(schema_text(&got.join(&t)), schema_text(&want.join(&t)), "{what}: schema of {t}");
        let (w, g) = (canonical_rows(&want.join(&t)), canonical_rows(&got.join(&t)));
        assert_eq!(g.len(), w.len(), "{what}: rows of {t}");
        assert!(g == w, "{what}: values of {t} differ");
    }
}

/// What a run's report says about the checks of its inputs, independent of where they were read
/// from: per data file (items, expected and actual MD5, check results), sorted; then the export's
/// manifest checksum statuses.
fn input_checks(report: &Json) -> (Vec<String>, Vec<String>) {
    let mut files: Vec<String> = report["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|i| {
            format!(
                "items={} md5_expected={} md5_actual={} md5_check={} item_count_check={}",
                i["items"], i["md5_expected"], i["md5_actual"], i["md5_check"], i["item_count_check"]
            )
        })
        .collect();
    files.sort();
    let exports = report["exports"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| format!("summary={} files={}", e["summary_checksum"]["status"], e["files_checksum"]["status"]))
                .collect()
        })
        .unwrap_or_default();
    (files, exports)
}

/// A committed S3 output's `_etl/run.json`.
pub(crate) fn s3_report(m: &Moto, bucket: &str, prefix: &str) -> Json {
    let bytes = s3_get(m, bucket, &format!("{prefix}_etl/run.json"));
    serde_json::from_slice(&bytes).expect("run.json is JSON")
}

/// Every data file a report lists, per table, as keys in `bucket` (paths relative to the output
/// prefix, or full `s3://` URLs).
pub(crate) fn listed_keys(report: &Json, bucket: &str, prefix: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for t in report["tables"].as_array().expect("tables") {
        let name = t["name"].as_str().expect("table name").to_owned();
        let keys = t["files"]
            .as_array()
            .expect("files")
            .iter()
            .map(|f| {
                let p = f["path"].as_str().expect("file path");
                match p.strip_prefix("s3://") {
                    Some(rest) => {
                        let (b, key) = rest.split_once('/').expect("s3 URL with a key");
                        assert_eq!(b, bucket, "file {p} outside the output bucket");
                        key.to_owned()
                    }
                    None => format!("{prefix}{}", p.trim_start_matches('/')),
                }
            })
            .collect();
        out.insert(name, keys);
    }
    out
}

/// Downloads the files a committed S3 output lists into `dir/<table>/part-NNNNN.parquet`.
fn download_tables(m: &Moto, bucket: &str, prefix: &str, dir: &Path) {
    let report = s3_report(m, bucket, prefix);
    for (table, keys) in listed_keys(&report, bucket, prefix) {
        let tdir = dir.join(&table);
        std::fs::create_dir_all(&tdir).unwrap();
        for (i, key) in keys.iter().enumerate() {
            std::fs::write(tdir.join(format!("part-{i:05}.parquet")), s3_get(m, bucket, key)).unwrap();
        }
    }
}

// --- The independent oracle ------------------------------------------------------------------

/// How many items the sample export holds, as `tests/aws/oracle.py` counts them from its files.
pub(crate) fn sample_items(python: &str) -> u64 {
    static N: OnceLock<u64> = OnceLock::new();
    *N.get_or_init(|| {
        let src = format!("files:{}", s(&sample_export()));
        let report = oracle_json(python, &["count", &src]);
        report["items"].as_u64().expect("items")
    })
}

/// Runs `tests/aws/oracle.py ENDPOINT ARGS` (the endpoint is used only by `table:` and `s3:`
/// sources) and parses its JSON report; fails with its stderr when it finds differences.
fn oracle_json(python: &str, args: &[&str]) -> Json {
    let endpoint = moto().map(|m| m.endpoint.clone()).unwrap_or_else(|| "http://127.0.0.1:9".to_owned());
    let mut cmd = Command::new(python);
    cmd.arg(root().join("tests/aws/oracle.py")).arg(endpoint).args(args);
    if let Some(m) = moto() {
        aws_env(m, &mut cmd, Endpoint::Env);
    }
    let (r, _) = run_limited(cmd, CHILD_LIMIT);
    assert_eq!(r.code, 0, "oracle.py {args:?} found differences\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    serde_json::from_str(&r.stdout).expect("oracle.py prints JSON")
}

/// The tables etl wrote to `out`, as pyarrow and DuckDB read them, against the tables the items
/// of `source` give by the README's rules, computed by `tests/aws/oracle.py` without etl's code
/// (`table:T`, `s3:BUCKET/PREFIX`, `scan-json:FILE`, `files:DIR`). `items`: how many there are.
pub(crate) fn assert_oracle_tables(python: &str, source: &str, out: &Path, items: u64) {
    let report = oracle_json(python, &["tables", source, s(out)]);
    assert_eq!(report["items"], items, "items the oracle read from {source}: {report}");
    for reader in ["pyarrow", "duckdb"] {
        let r = &report[reader];
        assert_eq!(r["rows"], items, "{reader} rows of {}: {report}", out.display());
        assert!(r["cells"].as_u64() > Some(items), "{reader} compared too few cells: {report}");
        assert_eq!(r["differences"], 0, "{report}");
    }
    assert!(report["pyarrow"]["types"].as_u64() > Some(0), "no column type checked: {report}");
}

/// An `s3://BUCKET/PREFIX` location (a folder, or a `manifest-summary.json`) as the oracle's
/// `s3:BUCKET/PREFIX` source of the data files under it.
fn s3_source(location: &str) -> String {
    let rest = location.strip_prefix("s3://").expect("an s3:// location");
    let folder = rest.strip_suffix("manifest-summary.json").unwrap_or(rest);
    format!("s3:{folder}")
}

// --- The tests -------------------------------------------------------------------------------

#[test]
fn s3_export_equals_local() {
    let Some(m) = moto() else { return };
    let bucket = shop_bucket(m);
    let id = sample_export_id();
    let tmp = tempfile::tempdir().unwrap();
    let local = sample_out();
    let local_checks = input_checks(&run_report(local));
    assert!(local_checks.0.iter().all(|c| c.contains("md5_check=\"verified\"")), "{local_checks:?}");

    let forms = [
        format!("s3://{bucket}/exports/shop/"),
        format!("s3://{bucket}/exports/shop/AWSDynamoDB/{id}/"),
        format!("s3://{bucket}/exports/shop/AWSDynamoDB/{id}/manifest-summary.json"),
    ];
    for (i, src) in forms.iter().enumerate() {
        let out = tmp.path().join(format!("s3-{i}"));
        etl_aws(m, &["unwind", src, "--out", s(&out)], 0);
        assert_same_tables(local, &out, src);
        assert_oracle_tables(&m.python, &format!("s3:{bucket}/exports/shop/"), &out, sample_items(&m.python));
        assert_eq!(input_checks(&run_report(&out)), local_checks, "checksum results of {src}");
        let inputs = run_report(&out)["inputs"].to_string();
        assert!(inputs.contains(bucket), "run.json names the S3 inputs: {inputs}");
    }

    // As AWS writes it: manifests with full keys from the bucket root under `s3Prefix`. Here the
    // endpoint and region come from flags instead of the environment.
    let real = unique("real");
    py(m, "upload.py", &[s(&sample_export()), &real, "nightly/shop", "--as-export"]);
    let out = tmp.path().join("as-export");
    let src = format!("s3://{real}/nightly/shop/AWSDynamoDB/{id}/manifest-summary.json");
    let args = ["unwind", &src, "--out", s(&out), "--endpoint-url", &m.endpoint, "--region", "us-east-1"];
    let (r, _) = run_limited(etl_cmd(m, &args, Endpoint::NotInEnv, &[]), CHILD_LIMIT);
    assert_eq!(r.code, 0, "etl {args:?}\n{}", r.stderr);
    assert_same_tables(local, &out, &src);
    assert_eq!(input_checks(&run_report(&out)), local_checks, "checksum results of {src}");
    assert_oracle_tables(&m.python, &format!("s3:{real}/nightly/shop/"), &out, sample_items(&m.python));
}

#[test]
fn moto_export_roundtrip() {
    let Some(m) = moto() else { return };
    let table = shop_table(m);
    let bucket = unique("motoexp");
    let location = py(m, "export.py", &[table, &bucket, "moto/shop"]);
    let location = location.trim();
    assert!(location.starts_with(&format!("s3://{bucket}/moto/shop/AWSDynamoDB/")), "{location}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    etl_aws(m, &["unwind", location, "--out", s(&out)], 0);
    assert_same_tables(sample_out(), &out, location);
    assert_oracle_tables(&m.python, &s3_source(location), &out, sample_items(&m.python));
    let report = run_report(&out);
    assert_eq!(report["reconciliation"]["items_read"], sample_items(&m.python), "{}", report["reconciliation"]);
}

#[test]
fn aws_cli_scan_roundtrip() {
    let Some(m) = moto() else { return };
    let table = shop_table(m);
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&m.aws);
    cmd.args(["dynamodb", "scan", "--table-name", table, "--output", "json", "--endpoint-url", &m.endpoint]);
    aws_env(m, &mut cmd, Endpoint::Env);
    let (r, _) = run_limited(cmd, CHILD_LIMIT);
    assert_eq!(r.code, 0, "aws dynamodb scan failed:\n{}", r.stderr);
    let scan: Json = serde_json::from_str(&r.stdout).expect("scan output is one JSON document");
    assert_eq!(scan["Items"].as_array().map(Vec::len), Some(3245));
    let file = tmp.path().join("scan.json");
    std::fs::write(&file, &r.stdout).unwrap();
    let out = tmp.path().join("out");
    unwind(&[&file], &out, &[], 0);
    assert_same_tables(sample_out(), &out, "aws dynamodb scan output");
    let items = sample_items(&m.python);
    assert_oracle_tables(&m.python, &format!("scan-json:{}", s(&file)), &out, items);
    assert_oracle_tables(&m.python, &format!("table:{table}"), &out, items);
}

#[test]
fn live_scan_segments() {
    let Some(m) = moto() else { return };
    let table = shop_table(m);
    let src = format!("dynamodb://{table}");
    let tmp = tempfile::tempdir().unwrap();
    for (name, extra) in [
        ("segments-4", &["--segments", "4"][..]),
        ("segments-1", &["--segments", "1"][..]),
        ("rcu-limit", &["--segments", "2", "--max-rcu-per-second", "1000"][..]),
    ] {
        let out = tmp.path().join(name);
        let mut args = vec!["unwind", src.as_str(), "--out", s(&out)];
        args.extend_from_slice(extra);
        etl_aws(m, &args, 0);
        assert_same_tables(sample_out(), &out, &format!("{src} {extra:?}"));
        assert_oracle_tables(&m.python, &format!("table:{table}"), &out, sample_items(&m.python));
    }
}

#[test]
fn s3_out_and_sql() {
    let Some(m) = moto() else { return };
    let bucket = unique("out");
    py(m, "s3.py", &["mb", &bucket]);
    let out_url = format!("s3://{bucket}/out/");
    etl_aws(m, &["unwind", s(&sample_export()), "--out", &out_url], 0);
    assert!(!m.home.path().join("s3:").exists(), "wrote a local folder `s3:` instead of to S3");

    // Layout: run.json lists every data file, and each listed file exists.
    let report = s3_report(m, &bucket, "out/");
    let first = listed_keys(&report, &bucket, "out/");
    let tables: BTreeSet<&String> = first.keys().collect();
    assert_eq!(tables, table_names(sample_out()).iter().collect(), "tables in run.json");
    let keys = s3_keys(m, &bucket, "out/");
    let listed: BTreeSet<String> = first.values().flatten().cloned().collect();
    for k in &listed {
        assert!(keys.contains(k), "run.json lists {k}, which is not in the bucket: {keys:?}");
    }
    let parquet: BTreeSet<String> = keys.iter().filter(|k| k.ends_with(".parquet")).cloned().collect();
    assert_eq!(parquet, listed, "every Parquet object is listed by run.json");

    // The tables themselves.
    let tmp = tempfile::tempdir().unwrap();
    let down = tmp.path().join("down");
    download_tables(m, &bucket, "out/", &down);
    assert_same_tables(sample_out(), &down, &out_url);
    let items_src = format!("files:{}", s(&sample_export()));
    assert_oracle_tables(&m.python, &items_src, &down, sample_items(&m.python));

    // SQL over S3 prints what SQL over the local output prints, and the answers are those
    // `oracle.py sql` computes from the items in plain Python.
    let local = sample_out().to_str().unwrap().to_owned();
    let mut answers = Vec::new();
    for q in ["revenue_by_month", "top_customers_by_lifetime_value", "revenue_by_category", "products_never_ordered"] {
        let file = root().join("sql").join(format!("{q}.sql"));
        let want = sql_csv(&local, &["-f", s(&file)]);
        let got = etl_aws(m, &["sql", "--data", &out_url, "-f", s(&file), "--format", "csv"], 0);
        assert_eq!(got.stdout, want, "{q} over S3");
        let json = etl_aws(m, &["sql", "--data", &out_url, "-f", s(&file), "--format", "json"], 0);
        let path = tmp.path().join(format!("{q}.json"));
        std::fs::write(&path, json.stdout).unwrap();
        answers.push(format!("{q}={}", s(&path)));
    }
    let mut args = vec!["sql", items_src.as_str()];
    args.extend(answers.iter().map(String::as_str));
    let checked = oracle_json(&m.python, &args);
    assert!(checked["revenue_by_month"].as_u64() > Some(0), "{checked}");
    assert_eq!(checked["top_customers_by_lifetime_value"], 10, "{checked}");

    // The same run again is a no-op: no object written or deleted.
    let r = etl_aws(m, &["unwind", s(&sample_export()), "--out", &out_url], 0);
    assert!(r.stderr.contains("nothing to apply, nothing rewritten"), "{}", r.stderr);
    assert_eq!(s3_keys(m, &bucket, "out/"), keys);
    // A second run (with another row-group size, so not a no-op) writes under names of its own
    // (the run id is in the path), and still reads.
    etl_aws(m, &["unwind", s(&sample_export()), "--out", &out_url, "--row-group-rows", "50000"], 0);
    let second: BTreeSet<String> =
        listed_keys(&s3_report(m, &bucket, "out/"), &bucket, "out/").into_values().flatten().collect();
    assert!(
        listed.is_disjoint(&second),
        "runs share file names: {:?}",
        listed.intersection(&second).collect::<Vec<_>>()
    );
    let q = r#"select count(*) as n from "order""#;
    let got = etl_aws(m, &["sql", "--data", &out_url, q, "--format", "csv"], 0);
    assert_eq!(got.stdout, sql_csv(&local, &[q]));
}

#[test]
fn aws_errors_are_clear() {
    let Some(m) = moto() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let out_s = s(&out);

    // (a) A bucket that does not exist, as a source and as SQL data.
    let missing = unique("nobucket");
    let src = format!("s3://{missing}/x/");
    for args in [["unwind", src.as_str(), "--out", out_s], ["sql", "--data", src.as_str(), "select 1"]] {
        let r = etl_aws(m, &args, 2);
        let e = r.stderr.to_lowercase();
        assert!(r.stderr.contains(&missing), "names the bucket: {}", r.stderr);
        assert!(e.contains("not found") || e.contains("does not exist"), "{}", r.stderr);
        assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    }
    assert!(!out.exists());

    // (b) A data file listed in manifest-files.json is missing.
    let bucket = unique("gone");
    py(m, "upload.py", &[s(&sample_export()), &bucket, "exports/shop"]);
    let id = sample_export_id();
    let manifest =
        String::from_utf8(s3_get(m, &bucket, &format!("exports/shop/AWSDynamoDB/{id}/manifest-files.json"))).unwrap();
    let victim = manifest
        .lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap())
        .find(|f| f["itemCount"].as_u64() > Some(0))
        .expect("a non-empty data file")["dataFileS3Key"]
        .as_str()
        .unwrap()
        .to_owned();
    let victim_key = format!("exports/shop/{victim}");
    py(m, "s3.py", &["delete", &bucket, &victim_key]);
    let src = format!("s3://{bucket}/exports/shop/AWSDynamoDB/{id}/manifest-summary.json");
    // An integrity failure (the export does not match its manifest): exit 1, nothing read.
    let r = etl_aws(m, &["unwind", &src, "--out", out_s], 1);
    let file_name = victim.rsplit('/').next().unwrap();
    assert!(r.stderr.contains(file_name), "names the missing key {victim_key}: {}", r.stderr);
    assert!(!out.exists());

    // (c) A table that does not exist.
    let table = "no_such_table_".to_owned() + &unique("t").replace('-', "_");
    let src = format!("dynamodb://{table}");
    let r = etl_aws(m, &["unwind", &src, "--out", out_s], 2);
    assert!(r.stderr.contains(&table), "names the table: {}", r.stderr);

    // (d) Nothing listens at the endpoint: a clear error, quickly (retries must not take minutes).
    for src in [format!("s3://{}/exports/shop/", shop_bucket(m)), format!("dynamodb://{}", shop_table(m))] {
        let args = ["unwind", &src, "--out", out_s, "--endpoint-url", "http://127.0.0.1:1"];
        let (r, took) = run_limited(etl_cmd(m, &args, Endpoint::Env, &[]), CHILD_LIMIT);
        assert_eq!(r.code, 2, "etl {args:?}\n{}", r.stderr);
        assert!(took < Duration::from_secs(60), "gave up only after {took:?}");
        let e = r.stderr.to_lowercase();
        assert!(e.contains("127.0.0.1:1") || e.contains("connect"), "says it could not connect: {}", r.stderr);
    }

    // (e) Secrets never reach the output, even at -vv, on success and on failure.
    let secrets = [("AWS_SECRET_ACCESS_KEY", "etl-test-secret-9f8e7d"), ("AWS_SESSION_TOKEN", "etl-test-token-1a2b3c")];
    let ok_out = tmp.path().join("ok");
    let good = format!("s3://{}/exports/shop/", shop_bucket(m));
    let bad = format!("s3://{missing}/x/");
    for (args, code) in [
        (["-vv", "unwind", good.as_str(), "--out", s(&ok_out)], 0),
        (["-vv", "unwind", bad.as_str(), "--out", out_s], 2),
        (["-vv", "sql", "--data", bad.as_str(), "select 1"], 2),
    ] {
        let (r, _) = run_limited(etl_cmd(m, &args, Endpoint::Env, &secrets), CHILD_LIMIT);
        assert_eq!(r.code, code, "etl {args:?}\n{}", r.stderr);
        for (name, secret) in secrets {
            assert!(!r.stdout.contains(secret), "{name} on stdout of {args:?}");
            assert!(!r.stderr.contains(secret), "{name} on stderr of {args:?}");
        }
    }
}

#[test]
fn export_start_wait_list() {
    let Some(m) = moto() else { return };
    let table = shop_table(m);
    let bucket = unique("exp");
    py(m, "s3.py", &["mb", &bucket]);
    let r = etl_aws(m, &["export", "start", "--table", table, "--bucket", &bucket, "--prefix", "p", "--wait"], 0);
    let location = r
        .stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("s3://"))
        .unwrap_or_else(|| panic!("no s3:// location on stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr))
        .to_owned();
    assert!(location.starts_with(&format!("s3://{bucket}/p")), "{location}");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    etl_aws(m, &["unwind", &location, "--out", s(&out)], 0);
    assert_same_tables(sample_out(), &out, &location);
    assert_oracle_tables(&m.python, &s3_source(&location), &out, sample_items(&m.python));

    // `export list` shows it.
    let exports: Json = serde_json::from_str(&py(m, "list_exports.py", &[table])).unwrap();
    let arns: Vec<String> =
        exports.as_array().unwrap().iter().map(|e| e["ExportArn"].as_str().unwrap().to_owned()).collect();
    assert!(!arns.is_empty());
    let listed = etl_aws(m, &["export", "list", "--table", table], 0);
    assert!(
        arns.iter()
            .any(|a| listed.stdout.contains(a.as_str()) || listed.stdout.contains(a.rsplit('/').next().unwrap())),
        "export list names none of {arns:?}:\n{}",
        listed.stdout
    );
    // `--format json`: an array with one object per export, the fields boto3 sees.
    let listed = etl_aws(m, &["export", "list", "--table", table, "--format", "json"], 0);
    let listed: Json = serde_json::from_str(&listed.stdout).expect("export list --format json prints JSON");
    let listed = listed.as_array().expect("a JSON array");
    assert!(listed.len() >= arns.len(), "{listed:?}");
    for e in exports.as_array().unwrap() {
        let arn = e["ExportArn"].as_str().unwrap();
        let mine = listed.iter().find(|l| l["arn"] == arn).unwrap_or_else(|| panic!("{arn} not listed: {listed:?}"));
        assert_eq!(mine["status"], e["ExportStatus"], "{mine}");
        assert_eq!(mine["export_type"].as_str(), e["ExportType"].as_str(), "{mine}");
        let keys: BTreeSet<&str> = mine.as_object().unwrap().keys().map(String::as_str).collect();
        let want: BTreeSet<&str> =
            ["arn", "status", "export_type", "start_time", "end_time", "manifest_url"].into_iter().collect();
        assert_eq!(keys, want, "{mine}");
    }
    // A table without exports: an empty array, exit 0.
    let none = unique("noexports");
    py(m, "load_table.py", &[&none]);
    let r = etl_aws(m, &["export", "list", "--table", &none, "--format", "json"], 0);
    assert_eq!(serde_json::from_str::<Json>(&r.stdout).unwrap(), serde_json::json!([]), "{}", r.stdout);

    // A table without point-in-time recovery.
    let plain = unique("nopitr");
    py(m, "load_table.py", &[&plain]);
    let r = etl_aws(m, &["export", "start", "--table", &plain, "--bucket", &bucket, "--prefix", "p2", "--wait"], 2);
    let e = r.stderr.to_lowercase();
    assert!(e.contains("hint:"), "{}", r.stderr);
    assert!(e.contains("point-in-time recovery") || e.contains("point in time recovery"), "{}", r.stderr);

    // A bucket that does not exist: moto accepts the export and it ends FAILED (S3NoSuchBucket),
    // an export that failed: exit 1 (README), every time.
    for _ in 0..2 {
        let missing = unique("nobucket");
        let args = ["export", "start", "--table", table, "--bucket", &missing, "--prefix", "p", "--wait"];
        let r = etl_aws(m, &args, 1);
        assert!(r.stderr.contains("S3NoSuchBucket"), "names the failure code: {}", r.stderr);
        assert!(r.stderr.contains("hint: create the bucket or check `--bucket`"), "{}", r.stderr);
        assert!(r.stdout.is_empty(), "no location on stdout: {}", r.stdout);
    }
}

/// The sample export and its scan twin (`sample-exports/shop-scan.json`) unwound locally: every
/// table as pyarrow and DuckDB read it equals what the items give, by `tests/aws/oracle.py`.
#[test]
fn sample_and_scan_twin_rows_equal_their_items() {
    let Some(python) = crate::interop::python() else { return };
    let items = sample_items(&python);
    assert_oracle_tables(&python, &format!("files:{}", s(&sample_export())), sample_out(), items);
    let twin = root().join("sample-exports/shop-scan.json");
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    unwind(&[&twin], &out, &[], 0);
    assert_oracle_tables(&python, &format!("scan-json:{}", s(&twin)), &out, items);
}

/// `--profile` through a credentials and a config file in a temp folder (no credentials in the
/// environment), `--region` over the profile's region, and a profile that is not defined.
#[test]
fn profile_region_and_credentials_files() {
    let Some(m) = moto() else { return };
    let table = shop_table(m);
    let bucket = shop_bucket(m);
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("config");
    let credentials = tmp.path().join("credentials");
    std::fs::write(
        &credentials,
        "[etltest]\naws_access_key_id = AKIAETLTESTPROFILE01\naws_secret_access_key = etl-profile-secret\n",
    )
    .unwrap();
    std::fs::write(
        &config,
        "[profile etltest]\nregion = us-east-1\n\n[profile elsewhere]\nregion = eu-west-2\n\
         aws_access_key_id = AKIAETLTESTPROFILE02\naws_secret_access_key = etl-profile-secret2\n",
    )
    .unwrap();
    let run = |args: &[&str], env_credentials: bool| {
        let mut cmd = etl_cmd(m, args, Endpoint::Env, &[]);
        cmd.env("AWS_CONFIG_FILE", &config).env("AWS_SHARED_CREDENTIALS_FILE", &credentials);
        cmd.env_remove("AWS_REGION").env_remove("AWS_DEFAULT_REGION");
        if !env_credentials {
            cmd.env_remove("AWS_ACCESS_KEY_ID").env_remove("AWS_SECRET_ACCESS_KEY");
        }
        run_limited(cmd, CHILD_LIMIT).0
    };
    let items = sample_items(&m.python);
    let live = format!("dynamodb://{table}");
    let s3 = format!("s3://{bucket}/exports/shop/");

    // Credentials and region from the profile: a live table and an S3 source.
    let sources = [(&live, format!("table:{table}")), (&s3, format!("s3:{bucket}/exports/shop/"))];
    for (i, (src, items_src)) in sources.iter().enumerate() {
        let out = tmp.path().join(format!("profile-{i}"));
        let r = run(&["unwind", src, "--out", s(&out), "--profile", "etltest"], false);
        assert_eq!(r.code, 0, "{src}\n{}", r.stderr);
        assert_oracle_tables(&m.python, items_src, &out, items);
    }
    // The same without the profile: no credentials anywhere.
    let out = tmp.path().join("none");
    let r = run(&["unwind", &live, "--out", s(&out), "--region", "us-east-1"], false);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("no AWS credentials"), "{}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    assert!(!out.exists());

    // The profile's region is used (moto keeps tables per region): not found in eu-west-2 ...
    let r = run(&["unwind", &live, "--out", s(&out), "--profile", "elsewhere"], false);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains(&format!("table `{table}` not found in region `eu-west-2`")), "{}", r.stderr);
    // ... and `--region` overrides it.
    let r = run(&["unwind", &live, "--out", s(&out), "--profile", "elsewhere", "--region", "us-east-1"], false);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_oracle_tables(&m.python, &format!("table:{table}"), &out, items);
    // `--region` alone, over `AWS_REGION`, with credentials from the environment.
    let other = tmp.path().join("region");
    let mut cmd = etl_cmd(m, &["unwind", &live, "--out", s(&other), "--region", "eu-west-2"], Endpoint::Env, &[]);
    cmd.env("AWS_REGION", "us-east-1");
    let (r, _) = run_limited(cmd, CHILD_LIMIT);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("not found in region `eu-west-2`"), "{}", r.stderr);

    // A profile neither file defines: a clear error naming it and the files, before any call,
    // also when the environment holds credentials that would otherwise be used instead.
    for (args, env_credentials) in [
        (vec!["unwind", live.as_str(), "--out", s(&other), "--profile", "nosuch"], false),
        (vec!["unwind", s3.as_str(), "--out", s(&other), "--profile", "nosuch"], true),
        (vec!["sql", "--data", s3.as_str(), "select 1", "--profile", "nosuch"], true),
        (vec!["export", "list", "--table", table, "--profile", "nosuch"], true),
    ] {
        let r = run(&args, env_credentials);
        assert_eq!(r.code, 2, "{args:?}\n{}", r.stderr);
        assert!(r.stderr.contains("AWS profile `nosuch` is not defined"), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(s(&config)) && r.stderr.contains(s(&credentials)), "names the files: {}", r.stderr);
        assert!(r.stderr.contains("hint:"), "{}", r.stderr);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
    }
    assert!(!other.exists());
}

/// `--consistent-read` reaches every `Scan` request (seen by the fault proxy, forwarding all),
/// and the tables equal the items; without it every scan asks for eventually consistent reads.
#[test]
fn consistent_read_reaches_every_scan() {
    let Some(m) = moto() else { return };
    let table = shop_table(m);
    let src = format!("dynamodb://{table}");
    let tmp = tempfile::tempdir().unwrap();
    for (name, flag, want) in [("consistent", Some("--consistent-read"), "true"), ("eventual", None, "false")] {
        let p = crate::fault::Proxy::start(m, serde_json::json!([]));
        let out = tmp.path().join(name);
        let mut args = vec!["unwind", "-q", src.as_str(), "--out", s(&out), "--segments", "3"];
        args.extend(flag);
        let r = crate::fault::etl_via(m, &p, &args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let scans: Vec<String> =
            p.requests().into_iter().filter(|l| l.contains("target=DynamoDB_20120810.Scan ")).collect();
        assert!(scans.len() >= 3, "one scan per segment at least: {scans:?}");
        let odd: Vec<&String> = scans.iter().filter(|l| !l.ends_with(&format!(" consistent={want}"))).collect();
        assert!(odd.is_empty(), "{name}: scans without ConsistentRead={want}: {odd:?}");
        assert_oracle_tables(&m.python, &format!("table:{table}"), &out, sample_items(&m.python));
    }
}

/// The run ids an S3 output's objects belong to: `_etl/runs/<id>/…` and `…-<id>.parquet`.
fn objects_by_run(m: &Moto, bucket: &str, prefix: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for key in s3_keys(m, bucket, prefix) {
        let rel = &key[prefix.len()..];
        let id = if let Some(rest) = rel.strip_prefix("_etl/runs/") {
            rest.split('/').next().map(str::to_owned)
        } else if rel.ends_with(".parquet") && !rel.starts_with("_etl/") {
            let stem = rel.rsplit('/').next().unwrap().trim_end_matches(".parquet");
            stem.splitn(3, '-').nth(2).map(str::to_owned)
        } else {
            None
        };
        if let Some(id) = id {
            out.entry(id).or_default().insert(key);
        }
    }
    out
}

/// Spawns `etl unwind SRC --out URL` that pauses at `point` until `go` exists (the process
/// creates `go.reached` there); returns once it is paused.
pub(crate) fn paused_unwind(m: &Moto, src: &str, url: &str, point: &str, go: &Path) -> std::process::Child {
    paused_unwind_with(m, &[src, "--out", url], point, go)
}

/// `etl unwind -q ARGS…` paused at the fault point `point` until `go` exists.
pub(crate) fn paused_unwind_with(m: &Moto, args: &[&str], point: &str, go: &Path) -> std::process::Child {
    let env = [("ETL_TEST_PAUSE_AT", point), ("ETL_TEST_PAUSE_FILE", s(go))];
    let mut all = vec!["unwind", "-q"];
    all.extend_from_slice(args);
    let child = etl_cmd(m, &all, Endpoint::Env, &env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reached = go.as_os_str().to_owned();
    reached.push(".reached");
    let start = Instant::now();
    while !Path::new(&reached).exists() {
        assert!(start.elapsed() < CHILD_LIMIT, "the run never reached `{point}`");
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn finish_ok(mut child: std::process::Child, what: &str) {
    let mut err = String::new();
    let status = wait_or_kill(&mut child, Instant::now(), CHILD_LIMIT, what);
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.success(), "{what}: {status:?}\n{err}");
}

/// S3 retention against moto: each commit keeps its own run and the run it replaced, deletes
/// older runs, and never deletes a run that is still uploading on top of it (declared with the
/// committing run as its base), which then commits.
#[test]
fn s3_retention_keeps_the_replaced_run_and_running_uploads() {
    let Some(m) = moto() else { return };
    let bucket = unique("retain");
    py(m, "s3.py", &["mb", &bucket]);
    let url = format!("s3://{bucket}/o/");
    let src = sample_export();
    let head = || {
        let r = s3_report(m, &bucket, "o/");
        (r["run_id"].as_str().unwrap().to_owned(), r["replaces_run_id"].as_str().map(str::to_owned))
    };

    // Each run with a row-group size of its own: the same options again would be a no-op.
    let rows = |i: usize| (50_000 + i).to_string();
    let mut ids = Vec::new();
    for i in 0..3 {
        etl_aws(m, &["unwind", "-q", s(&src), "--out", &url, "--row-group-rows", &rows(i)], 0);
        let (id, replaces) = head();
        assert_eq!(replaces.as_ref(), ids.last(), "run {i} names the run it replaced");
        ids.push(id);
        let runs = objects_by_run(m, &bucket, "o/");
        let kept: Vec<&String> = runs.keys().collect();
        // The head and the run it replaced; nothing older.
        let want: Vec<&String> = ids.iter().rev().take(2).rev().collect();
        assert_eq!(kept, want, "after run {i}");
    }
    let before = objects_by_run(m, &bucket, "o/");
    let (r2, r3) = (&ids[1], &ids[2]);
    // Every object of the head is one its run.json lists, or the run's own `_etl/runs/` files.
    let listed: BTreeSet<String> =
        listed_keys(&s3_report(m, &bucket, "o/"), &bucket, "o/").into_values().flatten().collect();
    let head_parquet: BTreeSet<String> = before[r3].iter().filter(|k| k.ends_with(".parquet")).cloned().collect();
    assert_eq!(head_parquet, listed);

    // Y commits, then pauses before its clean-up; X starts on top of Y and pauses after its
    // uploads. Y's clean-up deletes R2 (older than the run Y replaced) but not X, which may
    // still commit; X then commits and its clean-up deletes R3.
    let tmp = tempfile::tempdir().unwrap();
    let (go_y, go_x) = (tmp.path().join("go-y"), tmp.path().join("go-x"));
    let y = paused_unwind_with(m, &[s(&src), "--out", &url, "--row-group-rows", &rows(3)], "s3-committed", &go_y);
    let (y_id, replaced) = head();
    assert_eq!(replaced.as_ref(), Some(r3));
    let x = paused_unwind_with(m, &[s(&src), "--out", &url, "--row-group-rows", &rows(4)], "s3-uploaded", &go_x);
    let uploading = objects_by_run(m, &bucket, "o/");
    let x_id = uploading.keys().find(|id| !before.contains_key(*id) && **id != y_id).expect("X's objects").clone();
    let x_objects = uploading[&x_id].clone();
    assert!(x_objects.iter().any(|k| k.ends_with(".parquet")), "X uploaded its data files: {x_objects:?}");
    std::fs::write(&go_y, "").unwrap();
    finish_ok(y, "run Y");
    let after_y = objects_by_run(m, &bucket, "o/");
    assert_eq!(after_y.get(&x_id), Some(&x_objects), "Y's clean-up left the uploading run X whole");
    assert!(!after_y.contains_key(r2), "R2 deleted: {:?}", after_y.keys());
    assert_eq!(after_y.get(r3), before.get(r3), "R3, the run Y replaced, kept whole");
    std::fs::write(&go_x, "").unwrap();
    finish_ok(x, "run X");
    let (now, replaced) = head();
    assert_eq!((&now, replaced.as_ref()), (&x_id, Some(&y_id)), "X committed on top of Y");
    let kept: BTreeSet<String> = objects_by_run(m, &bucket, "o/").into_keys().collect();
    assert_eq!(kept, [x_id.clone(), y_id.clone()].into_iter().collect(), "X and the run it replaced, nothing else");
    // Still one whole output that answers queries.
    let q = r#"select count(*) as n from "order""#;
    let got = etl_aws(m, &["sql", "--data", &url, q, "--format", "csv"], 0);
    assert_eq!(got.stdout, sql_csv(s(sample_out()), &[q]));
}

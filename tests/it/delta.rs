//! `etl unwind --format delta`: every table a Delta table of the Parquet output's rows, types and
//! field metadata, replaced in one commit per table, read by `etl sql` through deltalake (the
//! query library's answers unchanged), by the Python `deltalake` package and by DuckDB.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::Array as _;
use serde_json::Value as Json;

use crate::common::*;

const TABLES: [&str; 6] = ["_rejects", "order", "order_item", "product", "review", "user"];

/// `etl unwind sample-exports/shop --out DIR --format delta`, once for the whole test binary.
fn delta_out() -> &'static Path {
    static OUT: std::sync::OnceLock<(tempfile::TempDir, PathBuf)> = std::sync::OnceLock::new();
    let (_, out) = OUT.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        unwind(&[&sample_export()], &out, &["--format", "delta"], 0);
        (tmp, out)
    });
    out
}

/// The actions of one commit of a table's Delta log, as JSON objects.
fn log_actions(table: &Path, version: u64) -> Vec<Json> {
    let path = table.join(format!("_delta_log/{version:020}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn actions<'a>(log: &'a [Json], kind: &str) -> Vec<&'a Json> {
    log.iter().filter_map(|a| a.get(kind)).collect()
}

/// The canonical rows of the files a table's entry in `_etl/run.json` lists.
fn listed_rows(out: &Path, table: &Json) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    for f in table["files"].as_array().unwrap() {
        let rel = f["path"].as_str().unwrap();
        let name = Path::new(rel).file_name().unwrap();
        std::fs::hard_link(out.join(rel), tmp.path().join(name)).unwrap();
    }
    canonical_rows(tmp.path())
}

fn session(out: &Path) -> (tokio::runtime::Runtime, Arc<etl::sql::Session>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let session = rt
        .block_on(etl::sql::Session::open(
            etl::sql::SqlOptions::new(etl::store::Target::Path(out.to_owned())),
            &Default::default(),
        ))
        .unwrap();
    (rt, Arc::new(session))
}

fn count(rt: &tokio::runtime::Runtime, session: &etl::sql::Session, table: &str) -> i64 {
    let r = rt.block_on(session.run(&format!("SELECT count(*) FROM \"{table}\""))).unwrap();
    let col = r[0].batches[0].column(0).clone();
    col.as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().unwrap().value(0)
}

#[test]
fn every_table_is_a_delta_table_of_the_parquet_outputs_rows_types_and_metadata() {
    let out = delta_out();
    let parquet = sample_out();
    let report = run_report(out);
    let tables = report["tables"].as_array().unwrap();
    let names: Vec<&str> = tables.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TABLES);
    let parquet_report = run_report(parquet);
    for (t, p) in tables.iter().zip(parquet_report["tables"].as_array().unwrap()) {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["delta_version"], 0, "{name}: a first run creates version 0");
        assert_eq!(t["rows"], p["rows"], "{name}");
        let dir = out.join(name);
        // One commit: protocol, metadata and one `add` per file run.json lists, nothing removed.
        let log = log_actions(&dir, 0);
        assert_eq!(actions(&log, "protocol").len(), 1, "{name}");
        assert!(actions(&log, "remove").is_empty(), "{name}");
        let mut added: Vec<String> =
            actions(&log, "add").iter().map(|a| format!("{name}/{}", a["path"].as_str().unwrap())).collect();
        let mut listed: Vec<String> =
            t["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_owned()).collect();
        added.sort();
        listed.sort();
        assert_eq!(added, listed, "{name}");
        let rows: u64 = actions(&log, "add")
            .iter()
            .map(|a| {
                serde_json::from_str::<Json>(a["stats"].as_str().unwrap()).unwrap()["numRecords"].as_u64().unwrap()
            })
            .sum();
        assert_eq!(Json::from(rows), t["rows"], "{name}: the log's row counts");
        // The same rows, and files with the same Arrow schema (field metadata included).
        assert_eq!(listed_rows(out, t), canonical_rows(&parquet.join(name)), "{name}");
        assert_eq!(read_table(&dir).0, read_table(&parquet.join(name)).0, "{name}");
    }
    // etl's field metadata is in the Delta schema too.
    let log = log_actions(&out.join("user"), 0);
    let meta = actions(&log, "metaData");
    let schema: Json = serde_json::from_str(meta[0]["schemaString"].as_str().unwrap()).unwrap();
    let tags = schema["fields"].as_array().unwrap().iter().find(|f| f["name"] == "tags").unwrap();
    assert_eq!(tags["metadata"]["dynamodb.type"], "SS");
    // The schema contracts are those of the Parquet output.
    for name in TABLES.iter().filter(|n| !n.starts_with('_')) {
        let contract = |o: &Path| std::fs::read_to_string(o.join(format!("_etl/schema/{name}.json"))).unwrap();
        assert_eq!(contract(out), contract(parquet), "{name}");
    }
}

#[test]
fn a_rerun_replaces_every_table_in_one_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    unwind(&[&sample_export()], &out, &["--format", "delta"], 0);
    let first = run_report(&out);
    unwind(&[&sample_export()], &out, &["--format", "delta"], 0);
    let second = run_report(&out);
    let (rt, session) = session(&out);
    for (a, b) in first["tables"].as_array().unwrap().iter().zip(second["tables"].as_array().unwrap()) {
        let name = b["name"].as_str().unwrap();
        assert_eq!(b["delta_version"], 1, "{name}");
        let log = log_actions(&out.join(name), 1);
        let paths = |v: Vec<&Json>| {
            let mut p: Vec<String> = v.iter().map(|a| format!("{name}/{}", a["path"].as_str().unwrap())).collect();
            p.sort();
            p
        };
        let files = |t: &Json| {
            let mut p: Vec<String> =
                t["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap().to_owned()).collect();
            p.sort();
            p
        };
        // Version 1 removes exactly the first run's files and adds exactly the second's.
        assert_eq!(paths(actions(&log, "remove")), files(a), "{name}");
        assert_eq!(paths(actions(&log, "add")), files(b), "{name}");
        assert!(files(a).iter().all(|f| !files(b).contains(f)), "{name}: new files are new names");
        assert_eq!(listed_rows(&out, b), listed_rows(&out, a), "{name}");
        // `etl sql` reads the version run.json names: the second run's rows only.
        assert_eq!(Json::from(count(&rt, &session, name)), b["rows"], "{name}");
    }
    assert!(!tmp.path().read_dir().unwrap().any(|e| e.unwrap().file_name().to_string_lossy().contains("staging")));
}

#[test]
fn what_delta_cannot_do_yet_is_refused_before_any_write() {
    let tmp = tempfile::tempdir().unwrap();
    // A Parquet output is not turned into Delta tables beside its files.
    let out = tmp.path().join("parquet");
    unwind(&[&sample_export()], &out, &[], 0);
    let before = run_report(&out);
    let r = unwind(&[&sample_export()], &out, &["--format", "delta"], 2);
    assert!(r.stderr.contains("holds a Parquet etl output"), "{}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    assert_eq!(run_report(&out)["started_at"], before["started_at"]);
    assert!(!out.join("user/_delta_log").exists());
    // Object stores: not yet.
    let r = etl(["unwind", sample_export().to_str().unwrap(), "--out", "s3://bucket/lake", "--format", "delta"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("local folders only"), "{}", r.stderr);
    // Incremental exports: not yet (they need a MERGE).
    if let Some(root) = real_export() {
        let out = tmp.path().join("chain");
        let r = unwind(&[&root], &out, &["--format", "delta", "--allow-gap", "--allow-mismatch"], 2);
        assert!(r.stderr.contains("full exports only"), "{}", r.stderr);
        assert!(r.stderr.contains("hint:"), "{}", r.stderr);
        assert!(!out.exists(), "nothing was written");
    }
}

/// The query library (`tests/sql/*.slt`) gives the same answers over the Delta output as over the
/// Parquet output.
#[test]
fn the_sql_library_answers_the_same_over_delta_tables() {
    let (rt, session) = session(delta_out());
    let names: Vec<&str> = session.tables().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, TABLES);
    for slt in crate::sql::slt_files() {
        let db = session.clone();
        let mut runner = sqllogictest::Runner::new(move || {
            let session = db.clone();
            async move { Ok::<_, etl::sql::SqlError>(crate::sql::EtlDb { session }) }
        });
        runner.with_column_validator(sqllogictest::strict_column_validator);
        if let Err(e) = rt.block_on(runner.run_file_async(&slt)) {
            panic!("{} over Delta tables: {}", slt.display(), e.display(false));
        }
    }
}

/// The Python `deltalake` package reads every table with the values and types pyarrow reads from
/// the Parquet output; DuckDB reads the files the Delta log lists with the same values.
#[test]
fn deltalake_and_duckdb_read_the_delta_tables_exactly() {
    let Some(py) = crate::interop::python() else { return };
    let run = |script: &str, out: &Path| -> Json {
        let r = std::process::Command::new(&py)
            .arg(root().join("tests/interop").join(script))
            .arg(out)
            .args(TABLES)
            .output()
            .expect("run python");
        assert!(r.status.success(), "{script} failed: {}", String::from_utf8_lossy(&r.stderr));
        serde_json::from_slice(&r.stdout).unwrap()
    };
    let delta = run("delta_read.py", delta_out());
    let parquet = run("read_back.py", sample_out());
    let report = run_report(delta_out());
    for (t, entry) in TABLES.iter().zip(report["tables"].as_array().unwrap()) {
        let (d, p) = (&delta[*t], &parquet[*t]);
        assert_eq!(d["version"], entry["delta_version"], "{t}");
        assert!(!p["pyarrow_rows"].as_array().unwrap().is_empty() || *t == "_rejects", "{t}");
        assert_eq!(d["delta_rows"], p["pyarrow_rows"], "deltalake values of {t}");
        assert_eq!(d["duckdb_rows"], p["pyarrow_rows"], "duckdb values of {t}");
        // The same types; Delta's schema names a list's element `element` where etl's Arrow
        // schema says `item` (Delta has no name for it), which is all that differs.
        let delta_types: serde_json::Map<String, Json> = d["delta_types"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), Json::from(v.as_str().unwrap().replace("list<element: ", "list<item: "))))
            .collect();
        assert_eq!(Json::Object(delta_types), p["pyarrow_types"], "deltalake types of {t}");
        let listed: Vec<String> = entry["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| delta_out().join(f["path"].as_str().unwrap()).canonicalize().unwrap().display().to_string())
            .collect();
        let mut listed = listed;
        listed.sort();
        assert_eq!(d["files"], Json::from(listed), "{t}: the Delta log lists run.json's files");
    }
    assert_eq!(delta["user"]["delta_meta"]["tags"]["dynamodb.type"], "SS");
}

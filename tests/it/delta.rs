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

pub(crate) fn session(out: &Path) -> (tokio::runtime::Runtime, Arc<etl::sql::Session>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let session = rt
        .block_on(etl::sql::Session::open(
            etl::sql::SqlOptions::new(etl::store::Target::Path(out.to_owned())),
            &Default::default(),
        ))
        .unwrap();
    (rt, Arc::new(session))
}

/// A session over `out` as `etl sql --as-of AS_OF` opens it.
fn session_as_of(out: &Path, as_of: &str) -> Result<(tokio::runtime::Runtime, etl::sql::Session), etl::sql::SqlError> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut opts = etl::sql::SqlOptions::new(etl::store::Target::Path(out.to_owned()));
    opts.as_of = Some(as_of.parse().unwrap());
    let session = rt.block_on(etl::sql::Session::open(opts, &Default::default()))?;
    Ok((rt, session))
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
fn a_rerun_with_other_options_replaces_every_table_in_one_commit() {
    // (The same export with the same options is a no-op: `sample::a_re_run_of_the_same_export…`.)
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    unwind(&[&sample_export()], &out, &["--format", "delta"], 0);
    let first = run_report(&out);
    unwind(&[&sample_export()], &out, &["--format", "delta", "--row-group-rows", "4096"], 0);
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
fn a_parquet_output_is_not_turned_into_delta_tables() {
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
}

/// A bug's fixture: a scheduled apply that left out `--format delta` wrote a local Delta output
/// again as plain Parquet (its logs and history gone), where an `s3://` one was refused. Now a
/// Parquet run refuses a local Delta output too, full export or incremental, and leaves it as it
/// was.
#[test]
fn a_delta_output_is_not_turned_into_a_parquet_output() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("chain"));
    let out = tmp.path().join("out");
    unwind(&[&full], &out, &["--format", "delta"], 0);
    let before = run_report(&out);
    for input in [&incs[0], &full] {
        let r = unwind(&[input], &out, &["-q"], 2);
        assert!(r.stderr.contains("holds Delta tables"), "{}", r.stderr);
        assert!(r.stderr.contains("hint: pass `--format delta`"), "{}", r.stderr);
        assert_eq!(run_report(&out), before, "{}", input.display());
    }
    assert_eq!(versions(&out).values().copied().collect::<Vec<_>>(), vec![0; versions(&out).len()]);
    // With `--format delta`, the apply merges into the tables.
    unwind(&[&incs[0]], &out, &["-q", "--format", "delta"], 0);
    assert!(versions(&out).values().any(|&v| v == 1), "{:?}", versions(&out));
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

// ---- Incremental exports merged into Delta tables ----

/// The `add` actions of a table's Delta version `version`, by path, replayed from its log (in
/// each commit the removes first: a file marked with a deletion vector is removed and added back).
fn version_adds(table: &Path, version: u64) -> std::collections::BTreeMap<String, Json> {
    let mut live = std::collections::BTreeMap::new();
    for v in 0..=version {
        let path = table.join(format!("_delta_log/{v:020}.json"));
        if !path.exists() {
            continue;
        }
        let log = log_actions(table, v);
        for rm in actions(&log, "remove") {
            live.remove(rm["path"].as_str().unwrap());
        }
        for add in actions(&log, "add") {
            live.insert(add["path"].as_str().unwrap().to_owned(), add.clone());
        }
    }
    live
}

/// The files of a table's Delta version `version`, replayed from its log (`add` minus `remove`).
fn version_files(table: &Path, version: u64) -> Vec<PathBuf> {
    version_adds(table, version).into_keys().map(|p| table.join(p)).collect()
}

/// The canonical rows of a table's Delta version, read from the files its log lists, less the
/// rows their deletion vectors delete (read with etl's reader of them, which is the kernel's).
fn version_rows(table: &Path, version: u64) -> Vec<String> {
    let home = etl::sink::delta::Home::Dir(table.to_owned());
    let mut rows = Vec::new();
    for (rel, add) in version_adds(table, version) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::hard_link(table.join(&rel), tmp.path().join(&rel)).unwrap();
        let in_order = rows_in_order(&read_table(tmp.path()).1);
        match add.get("deletionVector").filter(|d| !d.is_null()) {
            Some(d) => {
                let d: deltalake::kernel::DeletionVectorDescriptor = serde_json::from_value(d.clone()).unwrap();
                let deleted = etl::sink::delta::dv::read(&home, &d).unwrap().unwrap();
                assert!(
                    deleted.max().is_none_or(|m| m < in_order.len() as u64),
                    "{rel}: a vector past the file's rows"
                );
                rows.extend(
                    in_order.into_iter().enumerate().filter(|(i, _)| !deleted.contains(*i as u64)).map(|(_, r)| r),
                );
            }
            None => rows.extend(in_order),
        }
    }
    rows.sort();
    rows
}

/// Each table `_etl/run.json` lists, with its Delta version.
fn versions(out: &Path) -> std::collections::BTreeMap<String, u64> {
    run_report(out)["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_owned(), t["delta_version"].as_u64().unwrap()))
        .collect()
}

/// The number of commits in the Delta log of each table in `out` (listed in its report or not).
fn log_lengths(out: &Path) -> std::collections::BTreeMap<String, usize> {
    std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("_delta_log").is_dir())
        .map(|table| {
            let n = std::fs::read_dir(table.join("_delta_log"))
                .unwrap()
                .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".json"))
                .count();
            (table.file_name().unwrap().to_string_lossy().into_owned(), n)
        })
        .collect()
}

/// The `txn` versions a table's Delta log records, one per commit that carried one.
fn txns(table: &Path) -> Vec<i64> {
    let mut out = Vec::new();
    for v in 0.. {
        let path = table.join(format!("_delta_log/{v:020}.json"));
        if !path.exists() {
            break;
        }
        for a in log_actions(table, v) {
            if let Some(t) = a.get("txn") {
                assert_eq!(t["appId"], "etl");
                out.push(t["version"].as_i64().unwrap());
            }
        }
    }
    out
}

/// A generated chain (`etl sample --incrementals 3`): the full export and its incrementals, in order.
fn generated_chain(dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let s = dir.to_str().unwrap();
    let args = ["sample", "--out", s, "--users", "60", "--files", "3", "--seed", "11", "--incrementals", "3"];
    let r = etl(args.iter().copied().chain(["--change-percent", "20", "--format", "dynamodb-json"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let changes: Json = serde_json::from_slice(&std::fs::read(dir.join("final/changes.json")).unwrap()).unwrap();
    assert!(changes["net"]["moved"].as_u64().unwrap() > 0, "the chain moves rows between tables");
    crate::common::sample_chain(dir)
}

/// One apply onto tables of several files (`--target-file-bytes 1`: one file per input file), 3%
/// of the items changed, one MERGE commit per table, counts that add up to the rows of the new
/// version, and exactly the rows of the Parquet chain. A MERGE without deletion vectors removes
/// and rewrites only the files holding a changed key; the files no changed key is in stay as
/// they are. Applied in place (the default onto a Delta output), the rewritten files are each
/// file without those rows and one file of the changed keys' rows, even when every file holds one.
#[test]
fn a_merge_in_place_rewrites_only_files_holding_changed_keys() {
    merge_rewrites_only_files_holding_changed_keys(&[], true);
}

/// A replay (here forced by another line limit than the output's, which no line reaches) merges
/// the same way, but a table whose every file holds a changed key takes the replay's own files of
/// the complete table: nothing is read or encoded again.
#[test]
fn a_replayed_merge_uses_the_runs_files_when_every_file_holds_a_changed_key() {
    merge_rewrites_only_files_holding_changed_keys(&["--max-line-bytes", "1000000"], false);
}

fn merge_rewrites_only_files_holding_changed_keys(apply_flags: &[&str], in_place: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (full, incs) = json_chain(&dir, [60, 8, 11, 1, 3]);
    let out = tmp.path().join("delta");
    let small = ["--format", "delta", "--target-file-bytes", "1"];
    unwind(&[&full], &out, &small, 0);
    let before = versions(&out);
    unwind(&[&incs[0]], &out, &[&small[..], apply_flags].concat(), 0);
    let report = run_report(&out);
    assert_eq!(report["chain"]["applied_in_place"] == true, in_place, "{}", report["warnings"]);
    let reference = tmp.path().join("parquet");
    unwind(&[&full, &incs[0]], &reference, &[], 0);
    let expected = table_rows(&reference);

    let (mut some_kept, mut every_file) = (0, 0);
    for t in report["tables"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let table = out.join(name);
        let version = t["delta_version"].as_u64().unwrap();
        if let Some(rows) = expected.get(name) {
            assert_eq!(&version_rows(&table, version), rows, "`{name}`");
        }
        let m = &t["delta_merge"];
        if m["mode"] != "merge" {
            continue;
        }
        assert_eq!(version, before[name] + 1, "`{name}`: one commit");
        let log = log_actions(&table, version);
        assert_eq!(actions(&log, "commitInfo")[0]["operation"], "MERGE", "`{name}`");
        assert_eq!(actions(&log, "remove").len() as u64, m["files_rewritten"].as_u64().unwrap(), "`{name}`");
        let removed: u64 = actions(&log, "remove").iter().map(|r| r["size"].as_u64().unwrap()).sum();
        assert_eq!(removed, m["bytes_rewritten"].as_u64().unwrap(), "`{name}`");
        // The counts are exact: the old rows, less those of changed keys, plus their new rows.
        let old = version_rows(&table, before[name]).len() as u64;
        let new = version_rows(&table, version).len() as u64;
        let (removed_rows, upserted) = (m["rows_removed"].as_u64().unwrap(), m["rows_upserted"].as_u64().unwrap());
        assert_eq!(old - removed_rows + upserted, new, "`{name}`: {m}");
        let had: std::collections::BTreeSet<PathBuf> = version_files(&table, before[name]).into_iter().collect();
        let has = version_files(&table, version);
        let added: Vec<String> = actions(&log, "add").iter().map(|a| a["path"].as_str().unwrap().to_owned()).collect();
        let rewritten = |p: &String| p.starts_with("part-r") || p.starts_with("part-u");
        if m["files_rewritten"].as_u64().unwrap() < had.len() as u64 {
            some_kept += 1;
            let kept = has.iter().filter(|f| had.contains(*f)).count() as u64;
            assert_eq!(kept, had.len() as u64 - m["files_rewritten"].as_u64().unwrap(), "`{name}`");
            assert!(added.iter().all(rewritten), "`{name}`: {added:?}");
        } else {
            every_file += 1;
            assert!(has.iter().all(|f| !had.contains(f)), "`{name}`");
            assert!(!added.is_empty(), "`{name}`");
            // In place, each file rewritten and the changed keys' rows; in a replay, its files.
            assert_eq!(added.iter().all(rewritten), in_place, "`{name}`: {added:?}");
            assert!(in_place || !added.iter().any(rewritten), "`{name}`: {added:?}");
            assert_eq!(m["files_added"].as_u64().unwrap(), added.len() as u64, "`{name}`");
        }
    }
    assert!(some_kept > 0, "a table keeps files no changed key is in");
    assert!(every_file > 0, "a table has a changed key in every file");
}

/// The rows of each table of `out` at its version in `at`, as `delta_read.py` reads them with the
/// Python `deltalake` package (`delta_rows`) and DuckDB (`duckdb_rows`), by table name.
fn delta_read_at(py: &str, out: &Path, at: &std::collections::BTreeMap<String, u64>, names: &[String]) -> Json {
    let args: Vec<String> = names.iter().map(|n| format!("{n}@{}", at[n])).collect();
    let r = std::process::Command::new(py)
        .arg(root().join("tests/interop/delta_read.py"))
        .arg(out)
        .args(&args)
        .output()
        .expect("run python");
    assert!(r.status.success(), "delta_read.py: {}", String::from_utf8_lossy(&r.stderr));
    let read: Json = serde_json::from_slice(&r.stdout).unwrap();
    names.iter().zip(&args).map(|(n, a)| (n.clone(), read[a].clone())).collect::<serde_json::Map<_, _>>().into()
}

/// `--deletion-vectors`: the tables take them (reader 3 / writer 7, `delta.enableDeletionVectors`),
/// and each apply of a generated chain (three exports changing 20% of the items each, so keys
/// change again in files an earlier apply marked) marks the rows of changed keys deleted instead
/// of rewriting a file: its MERGE removes and adds back each marked file with its new vector,
/// adds one file of the changed keys' rows, and its counts add up to the table's rows. The later
/// applies are run without the flag: a table keeps its vectors. After each apply `etl sql`, the
/// Python `deltalake` package and DuckDB (the files, less the rows the vectors delete) read
/// exactly the Parquet chain's rows. `etl delta optimize` then rewrites the marked files without
/// those rows: the same rows, and no vector left.
#[test]
fn deletion_vectors_mark_the_rows_of_changed_keys_instead_of_rewriting_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("s"));
    let out = tmp.path().join("delta");
    unwind(&[&full], &out, &["--format", "delta", "--deletion-vectors", "--target-file-bytes", "1"], 0);
    for name in versions(&out).keys() {
        let log = log_actions(&out.join(name), 0);
        let protocol = actions(&log, "protocol")[0];
        assert_eq!(protocol["minReaderVersion"], 3, "`{name}`: {protocol}");
        assert_eq!(protocol["minWriterVersion"], 7, "`{name}`: {protocol}");
        assert_eq!(protocol["readerFeatures"], serde_json::json!(["deletionVectors"]), "`{name}`");
        assert!(protocol["writerFeatures"].as_array().unwrap().contains(&Json::from("deletionVectors")), "`{name}`");
        assert_eq!(actions(&log, "metaData")[0]["configuration"]["delta.enableDeletionVectors"], "true", "`{name}`");
    }
    let py = crate::interop::python();
    let (mut marked, mut marked_again, mut in_place_steps) = (0, 0, 0);
    // The same exports applied one at a time onto a Parquet output: a replay of the full export
    // each time, which the in-place applies' reports must equal.
    let replayed = tmp.path().join("parquet-applied");
    unwind(&[&full], &replayed, &[], 0);
    for k in 0..incs.len() {
        let before = versions(&out);
        let rows_before: std::collections::BTreeMap<String, u64> = run_report(&out)["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_owned(), t["rows"].as_u64().unwrap()))
            .collect();
        unwind(&[&incs[k]], &out, &["--format", "delta"], 0);
        unwind(&[&incs[k]], &replayed, &[], 0);
        // Applied in place (the full export not read again), unless a changed row does not fit
        // its table without a rewrite (said in the warnings); either way the report says what the
        // replay says (each table's inserts, updates, deletes and moves, and its rows).
        let (report, replay) = (run_report(&out), run_report(&replayed));
        if report["chain"]["applied_in_place"] == true {
            in_place_steps += 1;
        } else {
            let warnings = report["warnings"].as_array().unwrap();
            assert!(
                warnings.iter().any(|w| w.as_str().unwrap().contains("by replaying the full export, not in place")),
                "step {k}: {warnings:?}"
            );
        }
        assert!(replay["chain"].get("applied_in_place").is_none(), "step {k}: a Parquet apply replays");
        for key in ["tables", "unmatched_deletes", "created_and_deleted", "changed_keys", "change_records", "windows"] {
            assert_eq!(report["chain"][key], replay["chain"][key], "step {k}: `chain.{key}`");
        }
        let full_id = report["chain"]["full_export"].as_str().unwrap();
        let of_full = |r: &Json| {
            let inputs = r["inputs"].as_array().unwrap().iter();
            inputs.filter(|i| i["file"].as_str().unwrap().contains(full_id)).count()
        };
        if report["chain"]["applied_in_place"] == true {
            assert_eq!(of_full(&report), 0, "step {k}: the full export is not among the inputs read");
        }
        assert!(of_full(&replay) > 0, "step {k}: a replay reads it");
        let rows = |r: &Json| -> std::collections::BTreeMap<String, u64> {
            let tables = r["tables"].as_array().unwrap().iter();
            tables.map(|t| (t["name"].as_str().unwrap().to_owned(), t["rows"].as_u64().unwrap())).collect()
        };
        let (in_place_rows, replay_rows) = (rows(&report), rows(&replay));
        for (name, n) in &in_place_rows {
            assert_eq!(replay_rows.get(name).copied().unwrap_or(0), *n, "step {k}: rows of `{name}`");
        }
        assert!(replay_rows.keys().all(|n| in_place_rows.contains_key(n)), "step {k}: {replay_rows:?}");
        assert_eq!(report["reconciliation"]["balanced"], true, "step {k}");
        let reference = tmp.path().join(format!("parquet-{k}"));
        let chain: Vec<&Path> =
            std::iter::once(full.as_path()).chain(incs[..=k].iter().map(PathBuf::as_path)).collect();
        unwind(&chain, &reference, &[], 0);
        let expected = table_rows(&reference);

        for t in run_report(&out)["tables"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            let m = &t["delta_merge"];
            if m["mode"] != "merge" {
                continue;
            }
            let version = t["delta_version"].as_u64().unwrap();
            assert_eq!(version, before[name] + 1, "`{name}`: one commit");
            assert_eq!(version_rows(&out.join(name), version), expected[name], "step {k}: `{name}`, vectors applied");
            assert_eq!(m["files_rewritten"], 0, "`{name}`: {m}");
            assert_eq!(m["bytes_rewritten"], 0, "`{name}`: {m}");
            let log = log_actions(&out.join(name), version);
            let removed: Vec<&str> = actions(&log, "remove").iter().map(|r| r["path"].as_str().unwrap()).collect();
            let adds = actions(&log, "add");
            let (with_vector, plain): (Vec<&&Json>, Vec<&&Json>) =
                adds.iter().partition(|a| a.get("deletionVector").is_some_and(|d| !d.is_null()));
            assert_eq!(removed.len() as u64, m["files_marked"].as_u64().unwrap_or(0), "`{name}`: {m}");
            assert_eq!(with_vector.len(), removed.len(), "`{name}`: each marked file is added back with its vector");
            for a in &with_vector {
                assert!(removed.contains(&a["path"].as_str().unwrap()), "`{name}`: {a}");
                assert_eq!(a["deletionVector"]["storageType"], "u", "`{name}`");
            }
            assert!(plain.iter().all(|a| a["path"].as_str().unwrap().starts_with("part-u")), "`{name}`: {plain:?}");
            if m["files_marked"].as_u64().unwrap_or(0) > 0 {
                assert!(m["deletion_vector_bytes"].as_u64().unwrap() > 0, "`{name}`: {m}");
            }
            marked += m["files_marked"].as_u64().unwrap_or(0);
            marked_again += actions(&log, "remove").iter().filter(|r| !r["deletionVector"].is_null()).count();
            let (removed_rows, upserted) = (m["rows_removed"].as_u64().unwrap(), m["rows_upserted"].as_u64().unwrap());
            assert_eq!(rows_before[name] - removed_rows + upserted, t["rows"].as_u64().unwrap(), "`{name}`: {m}");
        }
        // `etl sql` reads the tables with their vectors applied.
        let (rt, applied) = session(&out);
        for (name, rows) in &expected {
            assert_eq!(count(&rt, &applied, name), rows.len() as i64, "step {k}: `etl sql` rows of `{name}`");
        }
        if let Some(py) = &py {
            let names: Vec<String> = expected.keys().cloned().collect();
            let delta = delta_read_at(py, &out, &versions(&out), &names);
            let tables: Vec<&str> = names.iter().map(String::as_str).collect();
            let parquet = crate::interop::read_back(py, &reference, &tables);
            for n in &names {
                assert_eq!(delta[n]["reader"], "datafusion", "`{n}`");
                assert_eq!(delta[n]["delta_rows"], parquet[n]["pyarrow_rows"], "step {k}: deltalake rows of `{n}`");
                assert_eq!(delta[n]["duckdb_rows"], parquet[n]["pyarrow_rows"], "step {k}: duckdb rows of `{n}`");
            }
        }
    }
    assert!(marked > 0, "the applies marked files");
    assert!(marked_again > 0, "an apply marked a file an earlier apply had marked");
    // Every apply is made in place: the third too, whose export gives a struct field a narrower
    // number type than the table's (cast into the table's field by field, exactly).
    assert_eq!(in_place_steps, 3, "every apply is made in place");

    // A vacuum keeps the vector files the current version's files name.
    let r = etl(["delta", "vacuum", out.to_str().unwrap(), "--retain", "0s", "--allow-short-retention"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let vectors_left = std::fs::read_dir(out.join("order"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("deletion_vector_"))
        .count();
    assert!(vectors_left > 0, "the current version's vectors are kept");
    let last = tmp.path().join(format!("parquet-{}", incs.len() - 1));
    let (rt, vacuumed) = session(&out);
    for (name, rows) in &table_rows(&last) {
        assert_eq!(count(&rt, &vacuumed, name), rows.len() as i64, "`etl sql` rows of `{name}` after a vacuum");
    }

    // Optimize rewrites the marked files without the rows their vectors delete.
    let r = etl(["delta", "optimize", out.to_str().unwrap(), "--target-size", "1G"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let expected = table_rows(&last);
    let step = versions(&out);
    for name in expected.keys() {
        let table = out.join(name);
        let adds = version_adds(&table, step[name]);
        assert!(adds.values().all(|a| a["deletionVector"].is_null()), "`{name}`: a vector left after optimize");
        assert_eq!(version_rows(&table, step[name]), expected[name], "`{name}` after optimize");
    }
    let (rt, optimized) = session(&out);
    for (name, rows) in &expected {
        assert_eq!(count(&rt, &optimized, name), rows.len() as i64, "`etl sql` rows of `{name}` after optimize");
    }
}

/// A mapped output merges its tables by the columns their key templates fill (`email`;
/// `user_email`, `ordered_at`, `order_id`; …), as an inferred one does by `PK` and `SK`: with
/// and without deletion vectors, each apply of a generated chain is made in place, every mapped
/// table by one MERGE. A child table that names its parent by only part of its key
/// (`order_lines` without `ordered_at` in its `parent_columns`) cannot be merged: the apply
/// replays, and the replay's MERGE merges every other mapped table and replaces that one whole,
/// saying why. Either way every table holds, at its new version, exactly the rows of the same
/// chain unwound in one run with the mapping.
#[test]
fn mapped_tables_merge_by_the_columns_their_key_templates_fill() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("s"));
    let sample = crate::common::root().join("mappings/ecommerce.toml");
    let partial = crate::apply::partial_parent_key_mapping(tmp.path());
    let mapped = ["users", "orders", "order_lines", "order_items", "products", "reviews"];
    for (mapping, vectors) in [(&sample, true), (&sample, false), (&partial, false)] {
        let whole_keys = mapping == &sample;
        let m = ["--mapping", mapping.to_str().unwrap()];
        let out = tmp.path().join(format!("delta-{vectors}-{whole_keys}"));
        let mut first = vec!["--format", "delta", "--target-file-bytes", "1", m[0], m[1]];
        if vectors {
            first.push("--deletion-vectors");
        }
        unwind(&[&full], &out, &first, 0);
        let mut merged = std::collections::BTreeSet::new();
        for k in 0..incs.len() {
            let before = versions(&out);
            unwind(&[&incs[k]], &out, &["--format", "delta", m[0], m[1]], 0);
            let report = run_report(&out);
            let in_place = report["chain"]["applied_in_place"] == true;
            assert_eq!(in_place, whole_keys, "step {k}: {}", report["warnings"]);
            let reference = tmp.path().join(format!("parquet-{vectors}-{whole_keys}-{k}"));
            let chain: Vec<&Path> =
                std::iter::once(full.as_path()).chain(incs[..=k].iter().map(PathBuf::as_path)).collect();
            unwind(&chain, &reference, &m, 0);
            let expected = table_rows(&reference);
            for t in report["tables"].as_array().unwrap() {
                let name = t["name"].as_str().unwrap();
                if !mapped.contains(&name) {
                    continue;
                }
                let merge = &t["delta_merge"];
                let version = t["delta_version"].as_u64().unwrap();
                if merge["mode"] == "unchanged" {
                    assert_eq!(version, before[name], "step {k}: `{name}`: {merge}");
                } else if !whole_keys && name == "order_lines" {
                    assert_eq!(merge["mode"], "replace", "step {k}: `{name}`: {merge}");
                    let reason = merge["reason"].as_str().unwrap();
                    assert!(reason.contains("`parent_columns` lack `ordered_at`"), "step {k}: {reason}");
                } else {
                    assert_eq!(merge["mode"], "merge", "step {k}: `{name}`: {merge}");
                    assert_eq!(version, before[name] + 1, "step {k}: `{name}`: one commit");
                    if merge["rows_removed"].as_u64().unwrap() > 0 {
                        merged.insert(name.to_owned());
                    }
                }
                let rows = version_rows(&out.join(name), version);
                assert_eq!(rows, expected[name], "step {k}: rows of `{name}`");
            }
        }
        // Rows of changed keys were found and removed in the parent and the child tables alike.
        for name in ["users", "orders", "order_items"] {
            assert!(merged.contains(name), "vectors {vectors}: `{name}` never had a changed key's rows removed");
        }
        assert_eq!(merged.contains("order_lines"), whole_keys, "{merged:?}");
    }
}

/// An apply in place keeps the rejects of the runs before it and appends its own: `_rejects`
/// takes them by an append commit, and holds what a replay of the same exports gives.
#[test]
fn an_apply_in_place_appends_its_rejects_to_those_before() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (full, incs) = generated_chain(&dir);
    append_line(&dir, &full, r#"{"Item":{"PK":{"Q":"no such type"}}}"#);
    append_line(&dir, &incs[0], r#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"NewImage":{"PK":{"S":"x"}}}"#);
    let out = tmp.path().join("delta");
    unwind(&[&full], &out, &["--format", "delta", "--deletion-vectors", "--allow-mismatch"], 0);
    let replayed = tmp.path().join("parquet");
    unwind(&[&full], &replayed, &["--allow-mismatch"], 0);
    let before = versions(&out)["_rejects"];
    unwind(&[&incs[0]], &out, &["--format", "delta", "--allow-mismatch"], 0);
    unwind(&[&incs[0]], &replayed, &["--allow-mismatch"], 0);
    let report = run_report(&out);
    assert_eq!(report["chain"]["applied_in_place"], true, "{}", report["warnings"]);
    let rejects = report["tables"].as_array().unwrap().iter().find(|t| t["name"] == "_rejects").unwrap();
    assert_eq!(rejects["rows"], 2, "{rejects}");
    assert_eq!(rejects["delta_merge"]["mode"], "append", "{rejects}");
    assert_eq!(rejects["delta_version"], before + 1, "one commit");
    assert_eq!(report["rejects_by_reason"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum::<u64>(), 1);
    let log = log_actions(&out.join("_rejects"), before + 1);
    assert!(actions(&log, "remove").is_empty(), "nothing removed: {log:?}");
    // The same rejects as the replay's (the kept files are named from each output's own folder).
    let query = "SELECT reason, line, attribute, message, raw FROM _rejects ORDER BY reason, line";
    let rows = |data: &Path| {
        let r = etl(["sql", "--data", data.to_str().unwrap(), "--format", "ndjson", query]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    assert_eq!(rows(&out), rows(&replayed));
    assert_eq!(rows(&out).lines().count(), 2, "{}", rows(&out));
}

/// A full-export item's reject superseded by an apply in place is marked deleted in `_rejects`'
/// deletion vector, in the commit that appends the run's rejects.
#[test]
fn an_apply_in_place_marks_the_rejects_it_supersedes_deleted() {
    let (_tmp, out, report) = crate::apply::a_superseded_reject_is_left_out(
        &["--format", "delta", "--deletion-vectors"],
        &["--format", "delta"],
    );
    let rejects = report["tables"].as_array().unwrap().iter().find(|t| t["name"] == "_rejects").unwrap();
    let merge = &rejects["delta_merge"];
    assert_eq!((merge["mode"].as_str(), merge["rows_removed"].as_u64()), (Some("append"), Some(1)), "{rejects}");
    assert_eq!(merge["files_marked"], 1, "{rejects}");
    let version = rejects["delta_version"].as_u64().unwrap();
    let log = log_actions(&out.join("_rejects"), version);
    let added = actions(&log, "add");
    assert!(added.iter().any(|a| a["deletionVector"].is_object()), "a file added back with its vector: {log:?}");
    assert_eq!(actions(&log, "remove").len(), 1, "{log:?}");
}

/// Without deletion vectors, the file of `_rejects` holding a reject the apply in place
/// supersedes is rewritten without it, in the commit that appends the run's rejects.
#[test]
fn an_apply_in_place_without_vectors_rewrites_the_rejects_it_supersedes() {
    let (_tmp, out, report) =
        crate::apply::a_superseded_reject_is_left_out(&["--format", "delta"], &["--format", "delta"]);
    let rejects = report["tables"].as_array().unwrap().iter().find(|t| t["name"] == "_rejects").unwrap();
    let merge = &rejects["delta_merge"];
    assert_eq!((merge["mode"].as_str(), merge["rows_removed"].as_u64()), (Some("append"), Some(1)), "{rejects}");
    assert_eq!(merge["files_rewritten"], 1, "{rejects}");
    assert!(merge.get("files_marked").is_none(), "{rejects}");
    let version = rejects["delta_version"].as_u64().unwrap();
    let log = log_actions(&out.join("_rejects"), version);
    let (removed, added) = (actions(&log, "remove"), actions(&log, "add"));
    assert_eq!(removed.len(), 1, "{log:?}");
    assert_eq!(removed[0]["size"], merge["bytes_rewritten"], "{log:?}");
    assert!(added.iter().all(|a| a["deletionVector"].is_null()), "no vector: {log:?}");
    assert_eq!(added.len() as u64, merge["files_added"].as_u64().unwrap(), "{log:?}");
    // The file written again without the reject, unless the reject was all it held.
    let before = version_files(&out.join("_rejects"), version - 1);
    assert_eq!(before.len(), 1, "{before:?}");
    let held = version_rows(&out.join("_rejects"), version - 1).len();
    let rewritten = added.iter().filter(|a| a["path"].as_str().unwrap().starts_with("part-r")).count();
    assert_eq!(rewritten, usize::from(held > 1), "{held} rejects before: {log:?}");
    assert_eq!(version_rows(&out.join("_rejects"), version).len() as u64, rejects["rows"].as_u64().unwrap());
}

/// `--deletion-vectors` given to an apply onto an output made without it: each merged table
/// takes them by one `SET TBLPROPERTIES` commit, then its MERGE marks rows instead of rewriting
/// files, and the output keeps the setting.
#[test]
fn an_apply_asking_for_deletion_vectors_turns_them_on_for_an_existing_output() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("s"));
    let out = tmp.path().join("delta");
    unwind(&[&full], &out, &["--format", "delta"], 0);
    let before = versions(&out);
    assert!(run_report(&out).get("deletion_vectors").is_none(), "not asked for yet");
    unwind(&[&incs[0]], &out, &["--format", "delta", "--deletion-vectors"], 0);
    let report = run_report(&out);
    assert_eq!(report["deletion_vectors"], true);
    let reference = tmp.path().join("parquet");
    unwind(&[&full, &incs[0]], &reference, &[], 0);
    let expected = table_rows(&reference);
    let mut merged = 0;
    for t in report["tables"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let m = &t["delta_merge"];
        if m["mode"] != "merge" || m["files_marked"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        merged += 1;
        let version = t["delta_version"].as_u64().unwrap();
        assert_eq!(version, before[name] + 2, "`{name}`: the property's commit, then the MERGE");
        let table = out.join(name);
        let set = log_actions(&table, version - 1);
        assert_eq!(actions(&set, "commitInfo")[0]["operation"], "SET TBLPROPERTIES", "`{name}`");
        assert_eq!(actions(&set, "protocol")[0]["minReaderVersion"], 3, "`{name}`");
        assert_eq!(m["files_rewritten"], 0, "`{name}`: {m}");
        assert_eq!(version_rows(&table, version), expected[name], "`{name}`");
    }
    assert!(merged > 0, "a table was merged with vectors");
}

/// A bug's fixture: `\d TABLE` showed the columns of the first file the run report lists, so
/// after a MERGE added a column, `\d` lacked it when that file was written without it (a file
/// the MERGE rewrote keeps its columns), though every query sees it. It now shows the version's
/// columns, each with the type and DynamoDB origin etl wrote, and `--as-of` an earlier version
/// shows that version's.
#[test]
fn describe_shows_a_column_a_merge_added_though_the_first_file_lacks_it() {
    use crate::chain::{TABLE, change, incremental, item, n, s};
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("bucket");
    let a = item("W#a", "X", serde_json::json!({ "Type": s("W"), "n": n("1") }));
    let b = item("W#b", "X", serde_json::json!({ "Type": s("W"), "n": n("2") }));
    let c = item("W#c", "X", serde_json::json!({ "Type": s("W"), "n": n("3") }));
    let lines = |items: &[&Json]| {
        let text: String = items.iter().map(|i| serde_json::json!({ "Item": i }).to_string() + "\n").collect();
        gzip(text.as_bytes())
    };
    let files = [lines(&[&a]), lines(&[&b, &c])];
    let full = write_export_id(&root, &files, &[1, 2], "DYNAMODB_JSON", "01788249600000-aaaaaaaa");
    let b2 = item("W#b", "X", serde_json::json!({ "Type": s("W"), "n": n("2"), "note": s("hi") }));
    let window = ("2026-09-01T07:55:00.000Z", "2026-09-01T08:15:00.000Z");
    let inc = incremental(
        &root,
        "01788250500000-bbbbbbbb",
        TABLE,
        window,
        "NEW_AND_OLD_IMAGES",
        &[change(1, &b, Some(&b), Some(&b2))],
    );

    let out = tmp.path().join("delta");
    let small = ["--format", "delta", "--target-file-bytes", "1"];
    unwind(&[&full], &out, &small, 0);
    unwind(&[&inc], &out, &small, 0);
    let reference = tmp.path().join("parquet");
    unwind(&[&full, &inc], &reference, &[], 0);

    let report = run_report(&out);
    let w = report["tables"].as_array().unwrap().iter().find(|t| t["name"] == "w").unwrap();
    assert_eq!(w["delta_merge"]["mode"], "merge", "{w}");
    assert_eq!(w["delta_merge"]["files_rewritten"], 1, "the file of `a` is kept: {w}");
    // The file the run report lists first is the rewrite of the file of `b` and `c`, which keeps
    // that file's columns: `c` never had a `note`.
    let first = out.join(w["files"][0]["path"].as_str().unwrap());
    let first_schema = datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(&first).unwrap(),
    )
    .unwrap()
    .schema()
    .clone();
    assert!(first_schema.field_with_name("note").is_err(), "the first listed file has no `note`");

    let sorted = |mut c: Vec<etl::sql::ColumnInfo>| {
        c.sort_by(|x, y| x.name.cmp(&y.name));
        c
    };
    let (_, delta) = session(&out);
    let (_, parquet) = session(&reference);
    let shown = sorted(delta.table("w").unwrap().columns());
    assert!(shown.iter().any(|c| c.name == "note" && c.type_name == "string" && c.origin == "S"), "{shown:?}");
    assert_eq!(shown, sorted(parquet.table("w").unwrap().columns()), "`\\d w` over Delta and over the Parquet chain");
    let (_, v0) = session_as_of(&out, "0").unwrap();
    let then: Vec<String> = v0.table("w").unwrap().columns().into_iter().map(|c| c.name).collect();
    assert!(!then.contains(&"note".to_owned()) && then.contains(&"n".to_owned()), "as of version 0: {then:?}");
}

/// A full export, then 3 incremental exports applied one at a time as Delta MERGEs: after each,
/// every table's new version holds exactly the rows the Parquet chain of as many exports holds,
/// each commit rewrote only files holding changed keys, and every earlier version still reads
/// as the state after that many exports (etl's reading of the log, and Python `deltalake`).
#[test]
fn a_generated_chain_merged_one_export_at_a_time_equals_the_parquet_chain_at_every_version() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("s"));
    let out = tmp.path().join("delta");
    unwind(&[&full], &out, &["--format", "delta"], 0);
    let mut steps = vec![versions(&out)];
    let mut references = Vec::new();
    for k in 0..=incs.len() {
        let reference = tmp.path().join(format!("parquet-{k}"));
        let mut sources: Vec<&Path> = vec![&full];
        sources.extend(incs[..k].iter().map(PathBuf::as_path));
        unwind(&sources, &reference, &[], 0);
        references.push(reference);
    }
    let mut merged_tables = 0;
    for (k, inc) in incs.iter().enumerate() {
        let before = log_lengths(&out);
        unwind(&[inc], &out, &["--format", "delta"], 0);
        let report = run_report(&out);
        let state: Json = serde_json::from_slice(&std::fs::read(out.join("_etl/state.json")).unwrap()).unwrap();
        assert_eq!(state["applied"].as_array().unwrap().len(), k + 2);
        for t in report["tables"].as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            let m = &t["delta_merge"];
            let version = t["delta_version"].as_u64().unwrap();
            assert_eq!(state["delta_versions"][name], version, "{name}: the state records the version");
            // One commit per table at most, carrying this run's `txn`.
            let grew = log_lengths(&out)[name] - before.get(name).copied().unwrap_or(0);
            assert!(grew <= 1, "{name}: {grew} commits in one run");
            if m["mode"] == "merge" {
                merged_tables += 1;
                let log = log_actions(&out.join(name), version);
                assert_eq!(actions(&log, "remove").len() as u64, m["files_rewritten"].as_u64().unwrap(), "{name}");
                assert_eq!(actions(&log, "add").len() as u64, m["files_added"].as_u64().unwrap(), "{name}");
                let removed: u64 = actions(&log, "remove").iter().map(|r| r["size"].as_u64().unwrap()).sum();
                assert_eq!(removed, m["bytes_rewritten"].as_u64().unwrap(), "{name}");
                assert_eq!(actions(&log, "txn").len(), 1, "{name}");
                // Only files holding a changed key were rewritten: fewer than the version had.
                let had = version_files(&out.join(name), version - 1).len() as u64;
                assert!(m["files_rewritten"].as_u64().unwrap() <= had, "{name}");
            }
        }
        steps.push(versions(&out));
    }
    assert!(merged_tables >= incs.len(), "most tables are merged, not replaced: {merged_tables}");
    // Every step's versions read as that step's Parquet chain output.
    for (k, (step, reference)) in steps.iter().zip(&references).enumerate() {
        let expected = table_rows(reference);
        for (name, rows) in &expected {
            let v = step.get(name).unwrap_or_else(|| panic!("step {k}: no table `{name}`"));
            assert_eq!(&version_rows(&out.join(name), *v), rows, "step {k}: `{name}` at version {v}");
        }
    }
    // The last step through `etl sql`, which reads the versions run.json names.
    let (rt, session) = session(&out);
    for (name, rows) in table_rows(references.last().unwrap()) {
        assert_eq!(count(&rt, &session, &name) as usize, rows.len(), "{name}");
    }
    // Moved rows: an `archived_` table exists only because rows moved into it.
    assert!(steps.last().unwrap().keys().any(|t| t.starts_with("archived_")), "{steps:?}");

    // `etl sql --as-of K` reads every table as the first K + 1 exports left it: the versions of
    // step K, exactly the files each version lists, the rows of the Parquet chain of K + 1
    // exports; a run's commit time names the same state.
    let history = run_report(&out)["delta_history"].as_array().unwrap().clone();
    assert_eq!(history.len(), steps.len(), "one output version per run");
    for (k, (step, reference)) in steps.iter().zip(&references).enumerate() {
        assert_eq!(history[k]["version"], k as u64);
        let expected = table_rows(reference);
        let (rt, at) = session_as_of(&out, &k.to_string()).unwrap();
        for name in expected.keys() {
            assert!(at.tables().iter().any(|t| &t.name == name), "as of {k}: no `{name}`");
        }
        for t in at.tables() {
            let rows = expected.get(&t.name).map_or(0, Vec::len);
            let delta = t.delta.as_ref().unwrap();
            assert_eq!(delta.version, step[&t.name], "as of {k}: `{}`", t.name);
            assert!(delta.committed_at.is_some() && delta.operation.is_some(), "{delta:?}");
            let mut listed: Vec<PathBuf> = t
                .files
                .iter()
                .map(|u| {
                    // deltalake lists a local table's files as paths (or `file://` URLs).
                    let p =
                        url::Url::parse(u).ok().and_then(|u| u.to_file_path().ok()).unwrap_or_else(|| PathBuf::from(u));
                    std::fs::canonicalize(p).unwrap()
                })
                .collect();
            let mut want: Vec<PathBuf> = version_files(&out.join(&t.name), delta.version)
                .iter()
                .map(|p| std::fs::canonicalize(p).unwrap())
                .collect();
            listed.sort();
            want.sort();
            assert_eq!(listed, want, "as of {k}: the files of `{}`", t.name);
            assert_eq!(count(&rt, &at, &t.name) as usize, rows, "as of {k}: `{}`", t.name);
            assert_eq!(t.rows as usize, rows, "as of {k}: `{}`", t.name);
        }
        let (_, by_time) = session_as_of(&out, history[k]["committed_at"].as_str().unwrap()).unwrap();
        let versions: Vec<(String, u64)> =
            by_time.tables().iter().map(|t| (t.name.clone(), t.delta.as_ref().unwrap().version)).collect();
        let want: Vec<(String, u64)> =
            at.tables().iter().map(|t| (t.name.clone(), t.delta.as_ref().unwrap().version)).collect();
        assert_eq!(versions, want, "as of run {k}'s commit time");
    }
    // Before the first run, after the last version, or over a Parquet output: refused, with a hint.
    for (dir, as_of) in [(&out, "2001-01-01"), (&out, "99"), (&references[0], "0")] {
        let e = session_as_of(dir, as_of).err().unwrap_or_else(|| panic!("--as-of {as_of} opened"));
        assert!(
            matches!(e, etl::sql::SqlError::AsOfOutOfRange { .. } | etl::sql::SqlError::AsOfNotDelta { .. }),
            "{e}"
        );
        assert!(e.hint().is_some(), "{e}");
    }
    // The shell's `\d` shows each table's version, and `\d TABLE` its commit.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_etl"))
        .args(["sql", "--as-of", "1", "--data"])
        .arg(&out)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), b"\\d\n\\d user\n\\q\n").unwrap();
    let r = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let header = stdout.lines().next().unwrap();
    assert!(header.contains("version"), "{stdout}");
    let user = format!("Delta table at version {}, committed ", steps[1]["user"]);
    assert!(stdout.contains(&user), "{stdout}");

    // Python `deltalake` (and DuckDB over the files each version lists) at every version.
    let Some(py) = crate::interop::python() else { return };
    for (k, (step, reference)) in steps.iter().zip(&references).enumerate() {
        let names: Vec<String> = table_rows(reference).into_keys().collect();
        let delta = delta_read_at(&py, &out, step, &names);
        let tables: Vec<&str> = names.iter().map(String::as_str).collect();
        let parquet = crate::interop::read_back(&py, reference, &tables);
        for n in &names {
            assert_eq!(delta[n]["version"], step[n], "{n}");
            assert_eq!(
                delta[n]["delta_rows"], parquet[n]["pyarrow_rows"],
                "step {k}: deltalake rows of {n}@{}",
                step[n]
            );
            assert_eq!(delta[n]["duckdb_rows"], parquet[n]["pyarrow_rows"], "step {k}: duckdb rows of {n}@{}", step[n]);
        }
    }
}

/// Applying an export the Delta output already holds moves no table version; a stop right after
/// the first table's commit, then a re-run, gives the chain's state with every table applied once.
#[test]
fn a_repeated_apply_is_a_no_op_and_a_crash_between_table_commits_completes_on_rerun() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("s"));
    let reference = tmp.path().join("parquet");
    unwind(&[&full, &incs[0]], &reference, &[], 0);
    let out = tmp.path().join("delta");
    unwind(&[&full], &out, &["--format", "delta"], 0);
    let after_full = log_lengths(&out);

    // Killed right after the first table's commit (a table this apply creates, or merges).
    let args = ["unwind", incs[0].to_str().unwrap(), "--out", out.to_str().unwrap(), "--format", "delta"];
    let killed = std::process::Command::new(env!("CARGO_BIN_EXE_etl"))
        .args(args)
        .env("ETL_TEST_KILL_AT", "delta-table-committed")
        .output()
        .unwrap();
    assert!(!killed.status.success(), "the run was killed");
    let partial = log_lengths(&out);
    let moved: Vec<&String> =
        partial.keys().filter(|t| partial[*t] != after_full.get(*t).copied().unwrap_or(0)).collect();
    assert_eq!(moved.len(), 1, "one table committed before the kill: {moved:?}");
    // The run's report is the previous one: nothing else was published.
    assert_eq!(versions(&out).values().copied().max(), Some(0));

    // The re-run skips the table already committed and merges the others.
    unwind(&[&incs[0]], &out, &["--format", "delta"], 0);
    let report = run_report(&out);
    let committed = &report["tables"].as_array().unwrap().iter().find(|t| &t["name"] == moved[0]).unwrap();
    assert_eq!(committed["delta_merge"]["mode"], "skipped", "{committed}");
    let done = log_lengths(&out);
    for (name, n) in &done {
        let grew = n - after_full.get(name).copied().unwrap_or(0);
        assert!(grew <= 1, "{name}: applied {grew} times");
        let t = txns(&out.join(name));
        let mut unique = t.clone();
        unique.dedup();
        assert_eq!(t, unique, "{name}: no export applied twice: {t:?}");
    }
    let step = versions(&out);
    for (name, rows) in table_rows(&reference) {
        assert_eq!(version_rows(&out.join(&name), step[&name]), rows, "{name}: no doubled or lost rows");
    }

    // The same export again: a no-op, no version moves, nothing written.
    let before = tree(&out);
    let r = unwind(&[&incs[0]], &out, &["--format", "delta"], 0);
    assert!(r.stderr.contains("nothing to apply"), "{}", r.stderr);
    assert_eq!(tree(&out), before);
    assert_eq!(log_lengths(&out), done);
}

/// A table whose first commit was killed before it landed leaves a `_delta_log/` with no commit
/// (the folder, or a temporary commit file in it; what `kill -9` left in a CI run): readers see
/// no table, and the next run creates it (it failed with "not a Delta table").
#[test]
fn a_table_whose_first_commit_never_landed_is_created_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("s"));
    let (out, reference) = (tmp.path().join("out"), tmp.path().join("reference"));
    unwind(&[&full], &out, &["--format", "delta"], 0);
    unwind(&[&full, &incs[0]], &reference, &[], 0);
    let after = crate::common::table_rows(&reference);
    let before: Vec<String> =
        run_report(&out)["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
    let new: Vec<&String> = after.keys().filter(|t| !before.contains(t)).collect();
    assert!(!new.is_empty(), "the apply creates tables (rows move to `archived_*` types)");
    for (i, t) in new.iter().enumerate() {
        let log = out.join(t).join("_delta_log");
        std::fs::create_dir_all(&log).unwrap();
        if i % 2 == 0 {
            std::fs::write(log.join("_commit_0f3a.json.tmp"), b"{\"commitInfo\":{}}\n").unwrap();
        }
    }
    unwind(&[&incs[0]], &out, &["--format", "delta"], 0);
    for t in new {
        assert_eq!(version_rows(&out.join(t), 0), after[t], "`{t}` at version 0");
    }
}

/// `kill -9` at random times while an incremental export merges into a Delta output: every
/// table's latest version reads as the table before the apply or after it, never a mix; `etl sql`
/// still opens the output; a re-run completes with the export applied once to every table.
#[test]
fn kill_9_at_random_points_of_a_merge_keeps_every_table_whole() {
    kill_9_during_merges("kill_9_at_random_points_of_a_merge_keeps_every_table_whole", &["--format", "delta"]);
}

/// The same with deletion vectors: a vector file written but not committed is never read.
#[test]
fn kill_9_at_random_points_of_a_merge_with_deletion_vectors_keeps_every_table_whole() {
    kill_9_during_merges(
        "kill_9_at_random_points_of_a_merge_with_deletion_vectors_keeps_every_table_whole",
        &["--format", "delta", "--deletion-vectors"],
    );
}

/// Kills during applies onto outputs made with `flags` (`name` seeds the random times).
fn kill_9_during_merges(name: &str, flags: &[&str]) {
    use std::os::unix::process::ExitStatusExt as _;
    use std::time::{Duration, Instant};
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("s"));
    let (before_ref, after_ref) = (tmp.path().join("p0"), tmp.path().join("p1"));
    unwind(&[&full], &before_ref, &[], 0);
    unwind(&[&full, &incs[0]], &after_ref, &[], 0);
    let (before, after) = (table_rows(&before_ref), table_rows(&after_ref));
    let apply_at = |out: &Path, kill_at: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_etl"))
            .args(["unwind", "-q", "--format", "delta", "--out"])
            .arg(out)
            .arg(&incs[0])
            .env("ETL_TEST_KILL_AT", kill_at)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let apply = |out: &Path| apply_at(out, "");
    // One whole apply, timed, so the kills land inside an apply's span.
    let timed = tmp.path().join("timed");
    unwind(&[&full], &timed, flags, 0);
    let start = Instant::now();
    let status = wait_or_kill(&mut apply(&timed), start, Duration::from_secs(120), "etl");
    assert!(status.success());
    let span = start.elapsed();
    let mut rng = Rng::new(name);
    let (mut landed, mut mixed_runs) = (0, 0);
    // Kills at the commit's steps (the first table committed; every table committed and
    // `_etl/base/` swapped; `_etl/state.json` copied, `_etl/run.json` not yet), then at random
    // times.
    let points = ["delta-table-committed", "delta-base-kept", "delta-state-copied"];
    for n in 0..points.len() + 8 {
        let out = tmp.path().join(format!("out-{n}"));
        unwind(&[&full], &out, flags, 0);
        let after_full = log_lengths(&out);
        let mut child = apply_at(&out, points.get(n).copied().unwrap_or(""));
        if n >= points.len() {
            std::thread::sleep(span.mul_f64(rng.unit()));
            let _ = child.kill();
        }
        let status = wait_or_kill(&mut child, Instant::now(), Duration::from_secs(120), "etl");
        let at = format!("case {n}: {status:?}");
        if status.signal() == Some(libc::SIGKILL) {
            landed += 1;
        } else {
            assert!(status.success(), "{at}");
        }
        // Each Delta table's latest version: the rows before the apply or after it.
        let (mut old, mut new) = (0, 0);
        for e in std::fs::read_dir(&out).unwrap() {
            let dir = e.unwrap().path();
            let log = dir.join("_delta_log");
            if !log.is_dir() {
                continue;
            }
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let commits = std::fs::read_dir(&log)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".json"))
                .count() as u64;
            // A table whose first commit was killed before it landed has no version yet (its log
            // is empty: readers see no table, and the re-run creates it): no rows.
            let rows = commits.checked_sub(1).map(|v| version_rows(&dir, v)).unwrap_or_default();
            let (b, a) =
                (before.get(&name).cloned().unwrap_or_default(), after.get(&name).cloned().unwrap_or_default());
            assert!(rows == b || rows == a, "{at}: `{name}` with {commits} commits is neither state");
            if rows == a && a != b {
                new += 1;
            } else if a != b {
                old += 1;
            }
        }
        if old > 0 && new > 0 {
            mixed_runs += 1;
        }
        // `etl sql` opens what `_etl/run.json` names, before or after the apply.
        let (rt, session) = session(&out);
        for t in session.tables() {
            let n = count(&rt, &session, &t.name) as usize;
            let (b, a) = (before.get(&t.name).map_or(0, Vec::len), after.get(&t.name).map_or(0, Vec::len));
            assert!(n == b || n == a, "{at}: `etl sql` counts {n} rows of `{}`", t.name);
        }
        drop(session);
        drop(rt);
        // The re-run completes the apply; no table holds the export twice.
        let status = wait_or_kill(&mut apply(&out), Instant::now(), Duration::from_secs(120), "etl");
        assert!(status.success(), "{at}: the re-run failed");
        let report = run_report(&out);
        assert_eq!(report["state"]["applied"].as_array().map(Vec::len), Some(2), "{at}: the commit holds both exports");
        let step = versions(&out);
        for (name, rows) in &after {
            assert_eq!(&version_rows(&out.join(name), step[name]), rows, "{at}: `{name}` after the re-run");
        }
        for (name, n) in log_lengths(&out) {
            let grew = n - after_full.get(&name).copied().unwrap_or(0);
            assert!(grew <= 1, "{at}: `{name}` applied {grew} times");
        }
    }
    eprintln!("{name}: {landed} of {} kills landed, {mixed_runs} between two table commits", points.len() + 8);
    assert!(landed > points.len(), "the kills at commit steps all land, and one at a random time");
}

/// The data files of a table's folder, as names.
fn files_on_disk(table: &Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(table)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect()
}

/// `etl delta optimize` compacts the small files a chain of merges left, in one commit per table
/// that changes no row, type or field metadata, and moves `_etl/run.json` to the new versions (a
/// second optimize commits nothing); `etl delta vacuum` refuses a short retention unless told,
/// lists without deleting on `--dry-run`, then deletes exactly the files no longer needed: every
/// table's folder holds its latest version's files, which still read the same rows.
#[test]
fn optimize_compacts_small_files_and_vacuum_deletes_what_no_version_needs() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("s"));
    let out = tmp.path().join("delta");
    // One file per table and input file: tables of several small files.
    let small = ["--format", "delta", "--target-file-bytes", "1"];
    unwind(&[&full], &out, &small, 0);
    for inc in &incs {
        unwind(&[inc], &out, &small, 0);
    }
    let before = versions(&out);
    let rows: std::collections::BTreeMap<String, Vec<String>> =
        before.iter().map(|(t, v)| (t.clone(), version_rows(&out.join(t), *v))).collect();
    let (rt, sess) = session(&out);
    let schemas: std::collections::BTreeMap<String, _> =
        sess.tables().iter().map(|t| (t.name.clone(), t.schema.clone())).collect();
    drop(sess);
    drop(rt);
    let history = run_report(&out)["delta_history"].as_array().unwrap().len();
    let out_s = out.to_str().unwrap();

    let r = etl(["delta", "optimize", out_s, "--target-size", "1G"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let after = versions(&out);
    let mut compacted = 0;
    for (t, v) in &after {
        assert_eq!(&version_rows(&out.join(t), *v), &rows[t], "`{t}`: optimize changed rows");
        let had = version_files(&out.join(t), before[t]).len();
        let has = version_files(&out.join(t), *v).len();
        assert!(has <= had, "`{t}`: {had} files became {has}");
        if *v != before[t] {
            compacted += 1;
            assert_eq!(*v, before[t] + 1, "`{t}`: one commit");
            let log = log_actions(&out.join(t), *v);
            assert_eq!(actions(&log, "commitInfo")[0]["operation"], "OPTIMIZE", "`{t}`");
            for a in actions(&log, "add").into_iter().chain(actions(&log, "remove")) {
                assert_eq!(a["dataChange"], false, "`{t}`: {a}");
            }
            assert!(has < had, "`{t}`: a commit that compacted nothing");
        }
    }
    assert!(compacted > 0, "the runs left tables of several small files: {before:?}");
    let report = run_report(&out);
    assert_eq!(report["delta_history"].as_array().unwrap().len(), history + 1, "optimize adds one output version");
    let (rt, sess) = session(&out);
    for t in sess.tables() {
        assert_eq!(t.delta.as_ref().unwrap().version, after[&t.name], "`etl sql` reads the compacted version");
        assert_eq!(count(&rt, &sess, &t.name) as usize, rows[&t.name].len(), "`{}`", t.name);
        assert_eq!(t.schema, schemas[&t.name], "`{}`: types and field metadata kept", t.name);
    }
    drop(sess);
    drop(rt);
    let r = etl(["delta", "optimize", out_s, "--target-size", "1G"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(versions(&out), after, "a second optimize has nothing to compact");

    // Vacuum: a retention below the tables' one week is refused, with a hint.
    let r = etl(["delta", "vacuum", out_s, "--retain", "0s"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("hint:") && r.stderr.contains("--allow-short-retention"), "{}", r.stderr);
    let on_disk: std::collections::BTreeMap<String, _> =
        after.keys().map(|t| (t.clone(), files_on_disk(&out.join(t)))).collect();
    let r = etl(["delta", "vacuum", out_s, "--retain", "0s", "--allow-short-retention", "--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let listed = r.stdout.lines().skip(2).count();
    assert!(listed > 0, "the merges and the optimize left files to delete: {}", r.stdout);
    for t in after.keys() {
        assert_eq!(files_on_disk(&out.join(t)), on_disk[t], "`{t}`: a dry run deletes nothing");
    }
    let logs = log_lengths(&out);
    let r = etl(["delta", "vacuum", out_s, "--retain", "0s", "--allow-short-retention"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().skip(2).count(), listed, "the dry run listed what vacuum deleted");
    // One commit per table that had files to delete, a `VACUUM END` with their count.
    let mut vacuumed = 0;
    for (t, n) in log_lengths(&out) {
        match n - logs[&t] {
            0 => {}
            1 => {
                let log = log_actions(&out.join(&t), n as u64 - 1);
                let info = actions(&log, "commitInfo");
                assert_eq!(info[0]["operation"], "VACUUM END", "`{t}`: {log:?}");
                assert!(info[0]["operationMetrics"]["numDeletedFiles"].as_u64().unwrap() > 0, "`{t}`: {log:?}");
                assert!(actions(&log, "add").is_empty() && actions(&log, "remove").is_empty());
                vacuumed += 1;
            }
            more => panic!("`{t}`: vacuum made {more} commits"),
        }
    }
    assert!(vacuumed > 0);
    for (t, v) in &after {
        let live: std::collections::BTreeSet<String> = version_files(&out.join(t), *v)
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files_on_disk(&out.join(t)), live, "`{t}`: only the latest version's files are left");
        assert_eq!(&version_rows(&out.join(t), *v), &rows[t], "`{t}`");
    }
    let (rt, sess) = session(&out);
    for t in sess.tables() {
        assert_eq!(count(&rt, &sess, &t.name) as usize, rows[&t.name].len(), "`{}` after vacuum", t.name);
    }
    // A version whose files were vacuumed is refused with the file named, not a panic.
    let r = etl(["sql", "--data", out_s, "--as-of", "0", "SELECT count(*) FROM \"user\""]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains(".parquet"), "{}", r.stderr);
}

/// The real fixture (full export and its 2 incremental exports) applied one export at a time as
/// Delta: the 8 items of the fixture, value by value, as the Parquet output has them. Both applies
/// are made in place (the full export is not read again), the key-only deletes of its `NEW_IMAGE`
/// export found in the table itself, and the files holding changed keys rewritten.
#[test]
fn the_real_fixture_merged_into_delta_holds_the_eight_items() {
    real_fixture_into_delta(&[]);
}

/// The same with deletion vectors: the rows of changed keys marked deleted instead.
#[test]
fn the_real_fixture_applied_in_place_holds_the_eight_items() {
    real_fixture_into_delta(&["--deletion-vectors"]);
}

fn real_fixture_into_delta(flags: &[&str]) {
    let Some(root) = real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let export = |id: &str| root.join("AWSDynamoDB").join(id);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("delta");
    let first = [&["--format", "delta", "--allow-mismatch"], flags].concat();
    unwind(&[&export("01768385930622-efd1a093")], &out, &first, 0);
    let extra = ["--format", "delta", "--allow-mismatch", "--allow-gap"];
    for inc in ["01768386924000-d339e52d", "01768388186000-4a2fc3ff"] {
        unwind(&[&export(inc)], &out, &extra, 0);
        let report = run_report(&out);
        assert_eq!(report["chain"]["applied_in_place"], true, "{inc}: {}", report["warnings"]);
    }
    let v = versions(&out);
    assert_eq!(v["_untyped"], 2, "one commit per export");
    let rows = version_rows(&out.join("_untyped"), v["_untyped"]);
    assert_eq!(rows, crate::real_export::final_state());
    let report = run_report(&out);
    let untyped = report["tables"].as_array().unwrap().iter().find(|t| t["name"] == "_untyped").unwrap();
    assert_eq!(untyped["delta_merge"]["mode"], "merge", "{untyped}");
    let (rt, session) = session(&out);
    assert_eq!(count(&rt, &session, "_untyped"), 8);
}

//! Delta tables on `s3://` (moto): a full export and its incremental exports applied one at a
//! time into `--out s3://… --format delta` give, at every output version, the rows of the same
//! chain unwound locally; the Python `deltalake` package reads them from S3 with the same values;
//! a repeated apply is a no-op; and of two applies racing from one head, one publishes and the
//! other fails (exit 1) without a row landing twice, even when both reach the same table's commit.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value as Json;

use crate::apply_s3::{Case, sql_rows, sql_rows_with};
use crate::aws::{Endpoint, Moto, aws_env, etl_aws, moto, paused_unwind_with, s, s3_get, s3_keys, s3_report};
use crate::common::*;

/// `tests/interop/delta_read.py` over `s3://BUCKET/PREFIX` with moto's endpoint.
fn delta_read(m: &Moto, out: &str, tables: &[String]) -> Json {
    let mut cmd = Command::new(&m.python);
    cmd.arg(root().join("tests/interop/delta_read.py")).arg(out).args(tables);
    aws_env(m, &mut cmd, Endpoint::Env);
    let r = cmd.output().expect("run python");
    assert!(r.status.success(), "delta_read.py failed: {}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice(&r.stdout).unwrap()
}

/// Each table's Delta version as `_etl/run.json` records it.
fn versions(report: &Json) -> BTreeMap<String, u64> {
    report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap().to_owned(), t["delta_version"].as_u64().unwrap()))
        .collect()
}

/// The tables of the reference output, `_rejects` aside when it has none.
fn tables_of(reference: &Path) -> Vec<String> {
    run_report(reference)["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn a_chain_applied_onto_s3_delta_tables_equals_the_local_chain_at_every_version() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "delta-s3");
    let out = c.out_url("lake/");
    let delta = ["--format", "delta"];

    // The full export alone, unwound locally: the state at output version 0.
    let full_only = c._tmp.path().join("full-only");
    unwind(&[&c.local.join("AWSDynamoDB").join(&c.full)], &full_only, &[], 0);

    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out, delta[0], delta[1]], 0);
    let v0 = versions(&s3_report(m, &c.bucket, "lake/"));
    assert!(v0.values().all(|v| *v == 0), "{v0:?}");
    let keys = s3_keys(m, &c.bucket, "lake/");
    assert!(keys.iter().any(|k| k.starts_with("lake/user/_delta_log/")), "{keys:?}");
    assert!(keys.iter().any(|k| k.starts_with("lake/_etl/base/AWSDynamoDB/")), "the export is kept: {keys:?}");

    etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &out, delta[0], delta[1]], 0);
    etl_aws(m, &["unwind", &c.export_url(&c.incs[1]), "--out", &out, delta[0], delta[1]], 0);
    let report = s3_report(m, &c.bucket, "lake/");
    let applied: Vec<&str> =
        report["state"]["applied"].as_array().unwrap().iter().map(|a| a["export_id"].as_str().unwrap()).collect();
    assert_eq!(applied, [c.full.as_str(), c.incs[0].as_str(), c.incs[1].as_str()]);
    assert_eq!(report["delta_history"].as_array().unwrap().len(), 3, "{}", report["delta_history"]);
    let merged: Vec<&str> = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["delta_merge"]["mode"].as_str())
        .filter(|m| *m == "merge")
        .collect();
    assert!(!merged.is_empty(), "some table is merged in place: {}", report["tables"]);

    // `etl sql` over S3: the latest versions are the whole chain's state, version 0 the full export's.
    let tables = tables_of(&c.reference);
    assert!(tables.len() > 2, "{tables:?}");
    let want = sql_rows(m, s(&c.reference), &tables);
    assert!(want.values().any(|rows| rows.len() > 10), "{want:?}");
    assert_eq!(sql_rows(m, &out, &tables), want);
    let first: Vec<String> = tables_of(&full_only);
    assert_eq!(sql_rows_with(m, &out, &first, &["--as-of", "0"]), sql_rows(m, s(&full_only), &first));
    assert_ne!(sql_rows(m, s(&full_only), &first), sql_rows(m, s(&c.reference), &first), "the chain changes rows");

    // The Python `deltalake` package reads each table from S3 with the values pyarrow reads from
    // the local chain's Parquet files; pyarrow reads the same from the files the Delta log lists.
    let delta = delta_read(m, &out, &tables);
    let names: Vec<&str> = tables.iter().map(String::as_str).collect();
    let parquet = crate::interop::read_back(&m.python, &c.reference, &names);
    for t in &tables {
        assert_eq!(
            delta[t]["version"],
            report["tables"].as_array().unwrap().iter().find(|x| x["name"] == *t).unwrap()["delta_version"],
            "{t}"
        );
        assert_eq!(delta[t]["delta_rows"], parquet[t]["pyarrow_rows"], "deltalake values of {t}");
        assert_eq!(delta[t]["file_rows"], parquet[t]["pyarrow_rows"], "values of {t}'s listed files");
    }

    // Again: nothing to apply, and nothing written.
    let (keys, head) = (s3_keys(m, &c.bucket, "lake/"), s3_get(m, &c.bucket, "lake/_etl/run.json"));
    let r = etl_aws(m, &["unwind", &c.export_url(&c.incs[1]), "--out", &out, "--format", "delta"], 0);
    assert!(r.stderr.contains("nothing to apply"), "{}", r.stderr);
    assert_eq!((s3_keys(m, &c.bucket, "lake/"), s3_get(m, &c.bucket, "lake/_etl/run.json")), (keys, head));

    // A Parquet run onto the Delta tables is refused; a Delta run onto a Parquet output too.
    let r = etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out], 2);
    assert!(r.stderr.contains("holds Delta tables"), "{}", r.stderr);
    let plain = c.out_url("plain/");
    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &plain], 0);
    let r = etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &plain, "--format", "delta"], 2);
    assert!(r.stderr.contains("holds a Parquet etl output"), "{}", r.stderr);
    // Maintenance is local only, and says so.
    let r = etl_aws(m, &["delta", "vacuum", &out], 2);
    assert!(r.stderr.contains("maintain local Delta outputs"), "{}", r.stderr);
}

/// Two applies of the same export start from one head. The first publishes; the second, paused
/// after it read the first table but before committing it, resumes: its commit of that table
/// loses (the version is taken), it finds the winner's `txn` is its own and keeps the table as
/// the winner left it, skips the others, and its `run.json` loses (exit 1). No table gained a
/// commit from the loser, and every row is there once.
#[test]
fn two_delta_applies_racing_on_s3_write_every_row_once() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "delta-race");
    let out = c.out_url("race/");
    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out, "--format", "delta"], 0);
    etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &out, "--format", "delta"], 0);

    let tmp = tempfile::tempdir().unwrap();
    let go = tmp.path().join("go");
    let inc2 = c.export_url(&c.incs[1]);
    let a = paused_unwind_with(m, &[&inc2, "--out", &out, "--format", "delta"], "delta-table-read", &go);
    etl_aws(m, &["unwind", "-q", &inc2, "--out", &out, "--format", "delta"], 0);
    let winner = (s3_keys(m, &c.bucket, "race/"), s3_get(m, &c.bucket, "race/_etl/run.json"));
    std::fs::write(&go, "").unwrap();
    let output = a.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("was published by another run"), "{stderr}");
    let after = s3_keys(m, &c.bucket, "race/");
    let added: Vec<&String> = after.difference(&winner.0).collect();
    let removed: Vec<&String> = winner.0.difference(&after).collect();
    assert!(added.is_empty() && removed.is_empty(), "the loser left {added:?} and removed {removed:?}");
    assert!(s3_get(m, &c.bucket, "race/_etl/run.json") == winner.1, "`_etl/run.json` is the winner's");

    let report = s3_report(m, &c.bucket, "race/");
    let tables = tables_of(&c.reference);
    // Every table is at the version the winner recorded: the loser committed nothing on top.
    let latest = delta_read(m, &out, &tables);
    for (t, v) in versions(&report) {
        assert_eq!(latest[&t]["version"], v, "{t}");
    }
    assert_eq!(sql_rows(m, &out, &tables), sql_rows(m, s(&c.reference), &tables));
}

/// `kill -9` of an apply onto S3 Delta tables after its first table commit: readers through
/// `_etl/run.json` still see the previous run's versions, whole; the re-run skips the committed
/// table (its `txn` covers the run), merges the others, and the output is the chain's state.
#[test]
fn kill_9_between_s3_delta_table_commits_completes_on_rerun() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "delta-kill");
    let out = c.out_url("k/");
    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out, "--format", "delta"], 0);
    etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &out, "--format", "delta"], 0);
    let before = s3_get(m, &c.bucket, "k/_etl/run.json");
    let tables = tables_of(&c.reference);
    let rows_before = sql_rows(m, &out, &tables);

    let inc2 = c.export_url(&c.incs[1]);
    let kill = [("ETL_TEST_KILL_AT", "delta-table-committed")];
    let (r, _) = crate::aws::run_limited(
        crate::aws::etl_cmd(m, &["unwind", "-q", &inc2, "--out", &out, "--format", "delta"], Endpoint::Env, &kill),
        std::time::Duration::from_secs(300),
    );
    assert_ne!(r.code, 0, "the run was killed: {}", r.stderr);
    assert!(s3_get(m, &c.bucket, "k/_etl/run.json") == before, "nothing was published");
    assert_eq!(sql_rows(m, &out, &tables), rows_before, "readers see the previous run, whole");

    etl_aws(m, &["unwind", &inc2, "--out", &out, "--format", "delta"], 0);
    let report = s3_report(m, &c.bucket, "k/");
    let modes: Vec<&str> =
        report["tables"].as_array().unwrap().iter().filter_map(|t| t["delta_merge"]["mode"].as_str()).collect();
    assert!(modes.contains(&"skipped"), "the table committed before the kill is skipped: {modes:?}");
    assert_eq!(sql_rows(m, &out, &tables), sql_rows(m, s(&c.reference), &tables));
}

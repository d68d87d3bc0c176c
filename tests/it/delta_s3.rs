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
pub(crate) fn delta_read(m: &Moto, out: &str, tables: &[String]) -> Json {
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

/// The sample chain on moto, its full export and first incremental export applied one at a time
/// into `s3://BUCKET/PREFIX` as Delta tables; returns the case and the output's URL.
fn delta_after_first_increment(m: &Moto, tag: &str, prefix: &str) -> (Case, String) {
    let c = Case::new(m, tag);
    let out = c.out_url(prefix);
    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out, "--format", "delta"], 0);
    etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &out, "--format", "delta"], 0);
    (c, out)
}

/// An apply of `export` onto the Delta tables at `out`, killed (`kill -9`) right after its
/// first table commit.
fn apply_killed_after_first_commit(m: &Moto, export: &str, out: &str) {
    let kill = [("ETL_TEST_KILL_AT", "delta-table-committed")];
    let (r, _) = crate::aws::run_limited(
        crate::aws::etl_cmd(m, &["unwind", "-q", export, "--out", out, "--format", "delta"], Endpoint::Env, &kill),
        std::time::Duration::from_secs(300),
    );
    assert_ne!(r.code, 0, "the run was killed: {}", r.stderr);
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
    // `_etl/base/` keeps the two incremental exports compacted into one export (its 4 manifest
    // and side files and its data file); the first apply's went with the second's commit.
    let compacted: Vec<String> =
        s3_keys(m, &c.bucket, "lake/_etl/base/").into_iter().filter(|k| k.contains("etl-compacted-")).collect();
    assert_eq!(compacted.len(), 5, "{compacted:?}");
    let listed = report["exports"][1]["export_dir"].as_str().unwrap().rsplit('/').next().unwrap().to_owned();
    assert!(compacted.iter().all(|k| k.contains(&listed)), "{listed}: {compacted:?}");
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
    // Maintenance of a prefix that holds no Delta output is refused.
    let r = etl_aws(m, &["delta", "vacuum", &plain], 2);
    assert!(r.stderr.contains("is not a Delta output of etl"), "{}", r.stderr);
}

/// `etl delta optimize` and `etl delta vacuum` on `s3://`. A table with a commit `_etl/run.json`
/// does not name (an apply killed after its commit) is not maintained until the apply is
/// completed. Optimize then compacts the merges' small files in one commit per table, changes no
/// row, and moves `_etl/run.json` (one more output version; `etl sql` and `deltalake` read the
/// new versions). Vacuum refuses a short retention unless told, lists on `--dry-run` without
/// deleting, then deletes exactly the files the latest versions do not list, an orphan `part-`
/// file of a killed writer included, with one `VACUUM END` commit per table; rows stay the same.
#[test]
fn optimize_and_vacuum_maintain_s3_delta_tables() {
    let Some(m) = moto() else { return };
    let (c, out) = delta_after_first_increment(m, "delta-maint", "m/");
    let inc2 = c.export_url(&c.incs[1]);
    apply_killed_after_first_commit(m, &inc2, &out);
    let keys = s3_keys(m, &c.bucket, "m/");
    let r = etl_aws(m, &["delta", "optimize", &out], 2);
    assert!(r.stderr.contains("has a commit after the version") && r.stderr.contains("hint:"), "{}", r.stderr);
    let r = etl_aws(m, &["delta", "vacuum", &out, "--retain", "0s", "--allow-short-retention"], 2);
    assert!(r.stderr.contains("has a commit after the version"), "{}", r.stderr);
    assert_eq!(s3_keys(m, &c.bucket, "m/"), keys, "a refused maintenance writes nothing");
    etl_aws(m, &["unwind", &inc2, "--out", &out, "--format", "delta"], 0);

    let tables = tables_of(&c.reference);
    let rows = sql_rows(m, &out, &tables);
    assert_eq!(rows, sql_rows(m, s(&c.reference), &tables));
    let report = s3_report(m, &c.bucket, "m/");
    let before = versions(&report);
    let read = delta_read(m, &out, &before.iter().map(|(t, v)| format!("{t}@{v}")).collect::<Vec<_>>());
    let files_before: BTreeMap<String, Json> =
        before.iter().map(|(t, v)| (t.clone(), read[format!("{t}@{v}")].clone())).collect();
    let history = report["delta_history"].as_array().unwrap().len();

    let r = etl_aws(m, &["delta", "optimize", &out, "--target-size", "1G"], 0);
    let report = s3_report(m, &c.bucket, "m/");
    let after = versions(&report);
    let read = delta_read(m, &out, &tables);
    let mut compacted = 0;
    for (t, v) in &after {
        let (had, has) =
            (files_before[t]["files"].as_array().unwrap().len(), read[t]["files"].as_array().unwrap().len());
        assert_eq!(read[t]["version"], *v, "`{t}`: `deltalake` reads the version `_etl/run.json` names");
        assert_eq!(read[t]["delta_rows"], files_before[t]["delta_rows"], "`{t}`: optimize changed rows");
        if *v != before[t] {
            assert_eq!(*v, before[t] + 1, "`{t}`: one commit");
            assert!(has < had, "`{t}`: {had} files became {has}");
            compacted += 1;
        } else {
            assert_eq!(has, had, "`{t}`");
        }
    }
    assert!(compacted > 0, "the merges left tables of several small files: {}\n{}", r.stdout, r.stderr);
    assert_eq!(report["delta_history"].as_array().unwrap().len(), history + 1, "optimize adds one output version");
    assert_eq!(sql_rows(m, &out, &tables), rows, "`etl sql` reads the compacted versions");
    etl_aws(m, &["delta", "optimize", &out, "--target-size", "1G"], 0);
    assert_eq!(versions(&s3_report(m, &c.bucket, "m/")), after, "a second optimize has nothing to compact");

    // Vacuum: a short retention is refused with a hint; a dry run lists and deletes nothing.
    let r = etl_aws(m, &["delta", "vacuum", &out, "--retain", "0s"], 2);
    assert!(r.stderr.contains("hint:") && r.stderr.contains("--allow-short-retention"), "{}", r.stderr);
    let orphan_file = c._tmp.path().join("orphan.parquet");
    std::fs::write(&orphan_file, b"PAR1 a killed writer's upload").unwrap();
    let table = &tables[0];
    let orphan = format!("m/{table}/part-00000-00000000-0000-0000-0000-000000000000-c000.zstd.parquet");
    crate::aws::py(m, "s3.py", &["put", &c.bucket, &orphan, s(&orphan_file)]);
    let keys = s3_keys(m, &c.bucket, "m/");
    let r = etl_aws(m, &["delta", "vacuum", &out, "--retain", "0s", "--allow-short-retention", "--dry-run"], 0);
    let listed: Vec<&str> = r.stdout.lines().skip(2).collect();
    assert!(listed.len() > 1, "the merges and the optimize left files to delete: {}", r.stdout);
    assert!(listed.iter().any(|l| l.starts_with(table.as_str()) && l.contains("000000000000-c000")), "{}", r.stdout);
    assert_eq!(s3_keys(m, &c.bucket, "m/"), keys, "a dry run deletes nothing");

    let r = etl_aws(m, &["delta", "vacuum", &out, "--retain", "0s", "--allow-short-retention"], 0);
    assert_eq!(r.stdout.lines().skip(2).count(), listed.len(), "the dry run listed what vacuum deleted");
    let left = s3_keys(m, &c.bucket, "m/");
    let read = delta_read(m, &out, &tables);
    for t in &tables {
        let prefix = format!("m/{t}/");
        let data: std::collections::BTreeSet<&str> = left
            .iter()
            .filter(|k| k.starts_with(&prefix) && !k[prefix.len()..].starts_with("_delta_log/"))
            .map(|k| &k[prefix.len()..])
            .collect();
        let live: std::collections::BTreeSet<&str> = read[t]["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().rsplit('/').next().unwrap())
            .collect();
        assert_eq!(data, live, "`{t}`: only the latest version's files are left");
        assert_eq!(read[t]["delta_rows"], files_before[t]["delta_rows"], "`{t}` after vacuum");
    }
    let vacuumed = left.difference(&keys).filter(|k| k.contains("/_delta_log/")).count();
    assert!(vacuumed > 0, "vacuum commits a `VACUUM END` to the tables it cleaned");
    assert_eq!(sql_rows(m, &out, &tables), rows);
}

/// Two applies of the same export start from one head. The first publishes; the second, paused
/// after it read the first table but before committing it, resumes: its commit of that table
/// loses (the version is taken), it finds the winner's `txn` is its own and keeps the table as
/// the winner left it, skips the others, and its `run.json` loses (exit 1). No table gained a
/// commit from the loser, and every row is there once.
#[test]
fn two_delta_applies_racing_on_s3_write_every_row_once() {
    let Some(m) = moto() else { return };
    let (c, out) = delta_after_first_increment(m, "delta-race", "race/");

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
    let (c, out) = delta_after_first_increment(m, "delta-kill", "k/");
    let before = s3_get(m, &c.bucket, "k/_etl/run.json");
    let tables = tables_of(&c.reference);
    let rows_before = sql_rows(m, &out, &tables);

    let inc2 = c.export_url(&c.incs[1]);
    apply_killed_after_first_commit(m, &inc2, &out);
    assert!(s3_get(m, &c.bucket, "k/_etl/run.json") == before, "nothing was published");
    assert_eq!(sql_rows(m, &out, &tables), rows_before, "readers see the previous run, whole");

    etl_aws(m, &["unwind", &inc2, "--out", &out, "--format", "delta"], 0);
    let report = s3_report(m, &c.bucket, "k/");
    let modes: Vec<&str> =
        report["tables"].as_array().unwrap().iter().filter_map(|t| t["delta_merge"]["mode"].as_str()).collect();
    assert!(modes.contains(&"skipped"), "the table committed before the kill is skipped: {modes:?}");
    assert_eq!(sql_rows(m, &out, &tables), sql_rows(m, s(&c.reference), &tables));
}

/// `--deletion-vectors` on `s3://`: the chain's applies are made in place (the full export kept
/// on S3 is not read again) and mark rows instead of rewriting files (the vector files uploaded
/// beside the tables' data files, read back from S3 by the next apply),
/// `etl sql` and the Python `deltalake` package read the local chain's rows, and `etl delta
/// optimize` rewrites the marked files without the rows their vectors delete.
#[test]
fn deletion_vectors_on_s3_delta_tables_give_the_chains_rows() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "delta-s3-dv");
    let out = c.out_url("lake/");
    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out, "--format", "delta", "--deletion-vectors"], 0);
    let (mut marked, mut marked_again) = (0, 0);
    for inc in &c.incs {
        etl_aws(m, &["unwind", &c.export_url(inc), "--out", &out, "--format", "delta"], 0);
        let report = s3_report(m, &c.bucket, "lake/");
        assert_eq!(report["deletion_vectors"], true, "the output keeps them");
        // In place: the full export kept on S3 is not read again.
        assert_eq!(report["chain"]["applied_in_place"], true, "{}", report["warnings"]);
        let full_id = report["chain"]["full_export"].as_str().unwrap();
        assert!(report["inputs"].as_array().unwrap().iter().all(|i| !i["file"].as_str().unwrap().contains(full_id)));
        for t in report["tables"].as_array().unwrap() {
            let merge = &t["delta_merge"];
            if merge["mode"] == "merge" {
                assert_eq!(merge["files_rewritten"], 0, "{}: {merge}", t["name"]);
                marked += merge["files_marked"].as_u64().unwrap_or(0);
                let name = t["name"].as_str().unwrap();
                let log = s3_get(
                    m,
                    &c.bucket,
                    &format!("lake/{name}/_delta_log/{:020}.json", t["delta_version"].as_u64().unwrap()),
                );
                let text = String::from_utf8(log).unwrap();
                marked_again +=
                    text.lines().filter(|l| l.contains("\"remove\"") && l.contains("\"deletionVector\":{")).count();
            }
        }
    }
    assert!(marked > 0, "the applies marked files");
    assert!(marked_again > 0, "the second apply marked a file the first had marked, reading its vector from S3");
    assert!(s3_keys(m, &c.bucket, "lake/").iter().any(|k| k.contains("/deletion_vector_")), "vector files on S3");

    let tables = tables_of(&c.reference);
    let want = sql_rows(m, s(&c.reference), &tables);
    assert_eq!(sql_rows(m, &out, &tables), want);
    let delta = delta_read(m, &out, &tables);
    let names: Vec<&str> = tables.iter().map(String::as_str).collect();
    let parquet = crate::interop::read_back(&m.python, &c.reference, &names);
    for t in &tables {
        assert_eq!(delta[t]["reader"], "datafusion", "{t}");
        assert_eq!(delta[t]["delta_rows"], parquet[t]["pyarrow_rows"], "deltalake values of {t}");
    }

    etl_aws(m, &["delta", "optimize", &out, "--target-size", "1G"], 0);
    assert_eq!(sql_rows(m, &out, &tables), want, "optimize changes no row");
    let report = s3_report(m, &c.bucket, "lake/");
    for t in report["tables"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let log =
            s3_get(m, &c.bucket, &format!("lake/{name}/_delta_log/{:020}.json", t["delta_version"].as_u64().unwrap()));
        let text = String::from_utf8(log).unwrap();
        if text.contains("\"OPTIMIZE\"") {
            assert!(
                text.lines().filter(|l| l.contains("\"add\"")).all(|l| !l.contains("\"deletionVector\":{")),
                "{name}: the compacted files have no vector"
            );
        }
    }
}

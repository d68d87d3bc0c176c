//! Sharded runs onto an `s3://` output (moto): shards upload their attempts under
//! `_etl/shards/`, a crashed attempt is never committed, a retried shard replaces its earlier
//! attempt, and `etl commit s3://…` publishes by server-side copies the same files, byte for byte,
//! as the same shards committed into a folder, with rows equal to one run's.

use std::collections::BTreeSet;

use crate::apply_s3::{chain_ids, local_table_bytes, s3_table_bytes, sql_rows};
use crate::aws::{Endpoint, etl_aws, etl_cmd, moto, py, run_limited, s, s3_get, s3_keys, s3_report, unique};
use crate::common::*;

/// `etl unwind EXPORT --out OUT --shard I/N --phase PHASE` against moto.
fn shard_s3(m: &crate::aws::Moto, export: &str, out: &str, i: u32, n: u32, phase: &str) {
    let spec = format!("{i}/{n}");
    etl_aws(m, &["unwind", export, "--out", out, "--shard", &spec, "--phase", phase], 0);
}

/// The attempt folders of shard `index` of 2 under `prefix`.
fn attempts(keys: &BTreeSet<String>, prefix: &str, index: u32) -> BTreeSet<String> {
    let dir = format!("{prefix}_etl/shards/shard-{index:05}-of-00002/");
    keys.iter()
        .filter_map(|k| k.strip_prefix(&dir)?.split_once('/').map(|(a, _)| a.to_owned()))
        .filter(|a| a.starts_with("attempt-"))
        .collect()
}

#[test]
fn shards_on_s3_commit_the_files_shards_in_a_folder_commit() {
    let Some(m) = moto() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("export");
    let r = etl(["sample", "--out", s(&local), "--users", "80", "--files", "4", "--seed", "11"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (id, _) = chain_ids(&local);
    let bucket = unique("shard");
    py(m, "upload.py", &[s(&local), &bucket, "exports/shop", "--as-export"]);
    let export = format!("s3://{bucket}/exports/shop/AWSDynamoDB/{id}/");
    let out = format!("s3://{bucket}/out/");
    let folder = tmp.path().join("folder");

    // Both phases of both shards, into the prefix and into a folder, from the same export.
    for phase in ["infer", "write"] {
        for i in 0..2 {
            shard_s3(m, &export, &out, i, 2, phase);
            shard_s3(m, &export, s(&folder), i, 2, phase);
        }
    }
    let keys = s3_keys(m, &bucket, "out/");
    assert!(keys.iter().all(|k| k.starts_with("out/_etl/shards/")), "only shards before the commit: {keys:?}");
    assert!(keys.contains("out/_etl/shards/shard-00001-of-00002/shard.json"), "{keys:?}");
    assert_eq!(attempts(&keys, "out/", 1).len(), 1);
    let manifest = |m: &crate::aws::Moto| s3_get(m, &bucket, "out/_etl/shards/shard-00001-of-00002/shard.json");
    let first = manifest(m);

    // An attempt killed after its uploads, before its manifest: the shard is still the first one.
    let args = ["unwind", &export, "--out", &out, "--shard", "1/2"];
    let cmd = etl_cmd(m, &args, Endpoint::Env, &[("ETL_TEST_KILL_AT", "shard-uploaded")]);
    let (r, _) = run_limited(cmd, std::time::Duration::from_secs(120));
    assert_ne!(r.code, 0, "the attempt was to be killed\n{}", r.stderr);
    assert_eq!(attempts(&s3_keys(m, &bucket, "out/"), "out/", 1).len(), 2, "the killed attempt uploaded its files");
    assert_eq!(manifest(m), first, "a crashed attempt never replaces the shard's manifest");
    // A retry replaces it: its manifest names its own attempt.
    shard_s3(m, &export, &out, 1, 2, "write");
    let second = manifest(m);
    assert_ne!(second, first);
    let named: serde_json::Value = serde_json::from_slice(&second).unwrap();
    let paths: Vec<&str> = named["written"]["tables"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()))
        .collect();
    let newest = attempts(&s3_keys(m, &bucket, "out/"), "out/", 1);
    assert_eq!(newest.len(), 3);
    let own = paths[0].split('/').next().unwrap().to_owned();
    assert!(paths.iter().all(|p| p.starts_with(&format!("{own}/"))), "{paths:?}");

    // The commits.
    let r = etl_aws(m, &["commit", &out], 0);
    assert!(r.stderr.contains("every item accounted for"), "{}", r.stderr);
    etl_aws(m, &["commit", s(&folder)], 0);
    let keys = s3_keys(m, &bucket, "out/");
    assert!(!keys.iter().any(|k| k.starts_with("out/_etl/shards/")), "the shards go with the commit: {keys:?}");
    let report = s3_report(m, &bucket, "out/");
    let want = run_report(&folder);
    for key in ["reconciliation", "inputs", "exports", "rejects_by_reason", "widenings", "mapping", "drift"] {
        assert_eq!(report[key], want[key], "run.json `{key}`");
    }
    assert_eq!(s3_table_bytes(m, &bucket, "out/", &report), local_table_bytes(&folder));

    // The same shards again: each finds the prefix holding their run and writes only its note;
    // the commit checks again and publishes nothing, the notes removed.
    let before = s3_get(m, &bucket, "out/_etl/run.json");
    for phase in ["infer", "write"] {
        for i in 0..2 {
            shard_s3(m, &export, &out, i, 2, phase);
        }
    }
    let shards: Vec<String> = s3_keys(m, &bucket, "out/_etl/shards/").into_iter().collect();
    assert_eq!(shards, ["out/_etl/shards/held-00000-of-00002.json", "out/_etl/shards/held-00001-of-00002.json"]);
    let r = etl_aws(m, &["commit", &out], 0);
    assert!(r.stderr.contains("nothing to apply, nothing rewritten"), "{}", r.stderr);
    assert_eq!(s3_get(m, &bucket, "out/_etl/run.json"), before, "nothing was published");
    assert!(s3_keys(m, &bucket, "out/_etl/shards/").is_empty());

    // Rows as `etl sql` reads them equal one run's over the local export.
    let single = tmp.path().join("single");
    unwind(&[&local], &single, &[], 0);
    let tables: Vec<String> =
        want["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect();
    assert!(tables.len() > 2, "{tables:?}");
    assert_eq!(sql_rows(m, &out, &tables), sql_rows(m, s(&single), &tables));

    // Delta tables on S3: the shards' files copied into the tables, one commit each.
    let delta = format!("s3://{bucket}/delta/");
    for phase in ["infer", "write"] {
        for i in 0..2 {
            let spec = format!("{i}/2");
            etl_aws(
                m,
                &["unwind", &export, "--out", &delta, "--shard", &spec, "--phase", phase, "--format", "delta"],
                0,
            );
        }
    }
    etl_aws(m, &["commit", &delta], 0);
    let keys = s3_keys(m, &bucket, "delta/");
    assert!(!keys.iter().any(|k| k.starts_with("delta/_etl/shards/")), "{keys:?}");
    for t in &tables {
        let log = format!("delta/{t}/_delta_log/00000000000000000000.json");
        assert!(keys.contains(&log), "`{t}` is a Delta table of one commit: {keys:?}");
    }
    assert_eq!(sql_rows(m, &delta, &tables), sql_rows(m, s(&single), &tables));
    let report = s3_report(m, &bucket, "delta/");
    assert_eq!(report["reconciliation"], want["reconciliation"]);
    // The Python `deltalake` package reads each table with the values pyarrow reads from one
    // run's Parquet files, and pyarrow the same from the files the Delta log lists.
    let read = crate::delta_s3::delta_read(m, &delta, &tables);
    let names: Vec<&str> = tables.iter().map(String::as_str).collect();
    let parquet = crate::interop::read_back(&m.python, &single, &names);
    for t in &tables {
        assert_eq!(read[t]["version"], 0, "{t}");
        assert_eq!(read[t]["delta_rows"], parquet[t]["pyarrow_rows"], "deltalake values of {t}");
        assert_eq!(read[t]["file_rows"], parquet[t]["pyarrow_rows"], "values of {t}'s listed files");
    }

    // A missing shard is refused and nothing is published.
    let out2 = format!("s3://{bucket}/out2/");
    shard_s3(m, &export, &out2, 0, 2, "infer");
    shard_s3(m, &export, &out2, 1, 2, "infer");
    shard_s3(m, &export, &out2, 0, 2, "write");
    let r = etl_aws(m, &["commit", &out2], 1);
    assert!(r.stderr.contains("shard 1 of 2 is not finished") && r.stderr.contains("hint:"), "{}", r.stderr);
    assert!(!s3_keys(m, &bucket, "out2/").contains("out2/_etl/run.json"));
}

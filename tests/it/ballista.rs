//! `etl sql --ballista`: every query of the `sql/` library gives, on a Ballista cluster, exactly
//! the answer it gives locally, over a plain output and over a Delta output at its latest and an
//! earlier version.
//!
//! The cluster is real: `scripts/test` starts one `etl ballista scheduler` and two
//! `etl ballista executor`s on 127.0.0.1 (stopped by PID) and names the scheduler in
//! `ETL_TEST_BALLISTA`; with `ETL_REQUIRE_BALLISTA=1` a missing cluster fails the test instead
//! of skipping it. Without the `ballista` feature, `--ballista` is refused with a hint.

#[cfg(feature = "ballista")]
use std::path::Path;

use crate::common::*;

#[cfg(feature = "ballista")]
fn cluster() -> Option<String> {
    let required = std::env::var_os("ETL_REQUIRE_BALLISTA").is_some_and(|v| v == "1");
    match std::env::var("ETL_TEST_BALLISTA") {
        Ok(url) => Some(url),
        Err(_) => {
            assert!(
                !required,
                "ETL_REQUIRE_BALLISTA=1 but ETL_TEST_BALLISTA is not set; run the suite with scripts/test"
            );
            eprintln!(
                "skipping Ballista test: ETL_TEST_BALLISTA is not set (scripts/test starts a cluster and sets it)"
            );
            None
        }
    }
}

#[cfg(feature = "ballista")]
use crate::sql::library;

/// `etl sql --data OUT -f QUERY --format csv EXTRA…`, which must succeed.
#[cfg(feature = "ballista")]
fn query(out: &Path, file: &Path, extra: &[&str]) -> String {
    let mut args = vec!["-f", file.to_str().unwrap()];
    args.extend_from_slice(extra);
    sql_csv(out.to_str().unwrap(), &args)
}

/// Each library query over `out`, locally and on the cluster at `url`: the same CSV, byte for byte.
#[cfg(feature = "ballista")]
fn same_answers(out: &Path, url: &str, extra: &[&str]) {
    for file in library() {
        let local = query(out, &file, extra);
        assert!(local.lines().count() > 1, "{} answers rows over the sample", file.display());
        let mut remote_args = vec!["--ballista", url];
        remote_args.extend_from_slice(extra);
        let remote = query(out, &file, &remote_args);
        assert_eq!(remote, local, "{} {extra:?} on {url}", file.display());
    }
}

#[cfg(feature = "ballista")]
#[test]
fn every_library_query_answers_the_same_on_the_cluster() {
    let Some(url) = cluster() else { return };
    let out = sample_out();
    same_answers(out, &url, &[]);

    // The plan really ran on the cluster: the scheduler's stages, joined by shuffles.
    let explain = r#"EXPLAIN SELECT status, count(*) FROM "order" GROUP BY status"#;
    let r = etl(["sql", "--data", out.to_str().unwrap(), "--ballista", &url, "--format", "csv", explain]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("distributed_plan") && r.stdout.contains("ShuffleWriterExec"), "{}", r.stdout);
    let r = etl(["sql", "--data", out.to_str().unwrap(), "--format", "csv", explain]);
    assert!(!r.stdout.contains("distributed_plan"), "a local session plans locally: {}", r.stdout);

    // Read-only there as here: refused before anything is sent.
    let r = etl(["sql", "--data", out.to_str().unwrap(), "--ballista", &url, r#"DROP TABLE "user""#]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("read-only"), "{}", r.stderr);
}

#[cfg(feature = "ballista")]
#[test]
fn delta_tables_at_every_version_answer_the_same_on_the_cluster() {
    let Some(url) = cluster() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("chain");
    let s = dir.to_str().unwrap();
    let r = etl(["sample", "--out", s, "--users", "60", "--files", "3", "--seed", "17", "--incrementals", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (full, incs) = sample_chain(&dir);
    let out = tmp.path().join("lake");
    unwind(&[&full], &out, &["--format", "delta"], 0);
    for inc in &incs {
        unwind(&[inc], &out, &["--format", "delta"], 0);
    }
    // The latest version, and the full export alone (output version 0), which differ.
    same_answers(&out, &url, &[]);
    same_answers(&out, &url, &["--as-of", "0"]);
    let orders = root().join("sql/revenue_by_month.sql");
    assert_ne!(query(&out, &orders, &[]), query(&out, &orders, &["--as-of", "0"]), "the incrementals changed orders");
}

/// An output on S3 (moto): the session sends the cluster where S3 is (`s3.endpoint`,
/// `s3.region`), and the scheduler and executors sign with their own credentials (`scripts/test`
/// starts them with moto's dummy keys).
#[cfg(feature = "ballista")]
#[test]
fn an_s3_output_answers_the_same_on_the_cluster() {
    s3_output_answers_the_same("ballista", &[]);
}

/// Delta tables on `s3://` (moto) answer every query of the library the same on the cluster:
/// each table is the version's `s3://` files, which the executors read with their own S3 settings.
#[cfg(feature = "ballista")]
#[test]
fn an_s3_delta_output_answers_the_same_on_the_cluster() {
    s3_output_answers_the_same("ballista-delta", &["--format", "delta"]);
}

/// The sample unwound (with `unwind_args`) into a new moto bucket: every library query gives the
/// same CSV on the cluster as locally.
#[cfg(feature = "ballista")]
fn s3_output_answers_the_same(tag: &str, unwind_args: &[&str]) {
    use crate::aws::{etl_aws, moto, py, unique};
    let Some(url) = cluster() else { return };
    let Some(m) = moto() else { return };
    let bucket = unique(tag);
    py(m, "s3.py", &["mb", &bucket]);
    let data = format!("s3://{bucket}/shop");
    let export = sample_export();
    let mut args = vec!["unwind", export.to_str().unwrap(), "--out", &data];
    args.extend_from_slice(unwind_args);
    etl_aws(m, &args, 0);
    for file in library() {
        let f = file.to_str().unwrap();
        let local = etl_aws(m, &["sql", "--data", &data, "-f", f, "--format", "csv"], 0).stdout;
        assert!(local.lines().count() > 1, "{f} answers rows over the sample");
        let remote = etl_aws(m, &["sql", "--data", &data, "-f", f, "--format", "csv", "--ballista", &url], 0).stdout;
        assert_eq!(remote, local, "{f} over {data} on {url}");
    }
}

#[cfg(feature = "ballista")]
#[test]
fn an_unreachable_scheduler_is_a_clear_error() {
    // Port 1 on loopback: nothing listens there.
    let out = sample_out();
    let r = etl(["sql", "--data", out.to_str().unwrap(), "--ballista", "df://127.0.0.1:1", "SELECT 1"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("error:"), "{}", r.stderr);
}

#[cfg(not(feature = "ballista"))]
#[test]
fn without_the_feature_ballista_is_refused_with_a_hint() {
    let out = sample_out();
    let r = etl(["sql", "--data", out.to_str().unwrap(), "--ballista", "df://127.0.0.1:50050", "SELECT 1"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`ballista` feature"), "{}", r.stderr);
    assert!(r.stderr.contains("hint: build it with `cargo build --release --features ballista`"), "{}", r.stderr);
    let r = etl(["ballista", "scheduler"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`ballista` feature"), "{}", r.stderr);
}

#[test]
fn bad_scheduler_urls_are_refused_at_the_edge() {
    let out = sample_out();
    let r = etl(["sql", "--data", out.to_str().unwrap(), "--ballista", "http://127.0.0.1:50050", "SELECT 1"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("does not start with `df://`"), "{}", r.stderr);
    let r = etl(["sql", "--data", out.to_str().unwrap(), "--ballista", "df://h:1", "--memory-limit", "1G", "SELECT 1"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--memory-limit"), "{}", r.stderr);
}

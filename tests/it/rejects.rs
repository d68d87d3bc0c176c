//! `--max-rejects N` above zero, on a local input made here: with exactly N rejects the run
//! succeeds; with N + 1 it exits 1 (the data broke a policy) and still publishes, so the rejects
//! and the report can be read. The counts are those the test wrote into the input.

use crate::common::*;

/// Good items and the three unreadable lines written into `data.json`.
const GOOD: usize = 5;
const BAD: usize = 3;

fn input(dir: &std::path::Path) -> std::path::PathBuf {
    let mut lines: Vec<String> = (0..GOOD)
        .map(|i| {
            format!(
                r#"{{"Item":{{"PK":{{"S":"THING#{i}"}},"SK":{{"S":"A"}},"Type":{{"S":"Thing"}},"n":{{"N":"{i}"}}}}}}"#
            )
        })
        .collect();
    // Cut JSON, a number DynamoDB cannot hold, and a line that is not JSON.
    lines.insert(1, r#"{"Item":{"PK":{"S":"THING#cut"}"#.to_owned());
    lines.insert(3, r#"{"Item":{"PK":{"S":"THING#big"},"n":{"N":"1e999"}}}"#.to_owned());
    lines.push("not json".to_owned());
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("data.json");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    file
}

fn rows(dir: &std::path::Path) -> usize {
    read_table(dir).1.iter().map(|b| b.num_rows()).sum()
}

#[test]
fn max_rejects_above_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let src = input(&tmp.path().join("in"));

    // Exactly N rejects: exit 0, every reject and every good item written.
    let out = tmp.path().join("n");
    let n = BAD.to_string();
    unwind(&[&src], &out, &["--max-rejects", &n], 0);
    assert_eq!(rows(&out.join("_rejects")), BAD);
    assert_eq!(rows(&out.join("thing")), GOOD);

    // N + 1 allowed is also fine; N - 1: exit 1, published, and the message names the limit.
    unwind(&[&src], &tmp.path().join("more"), &["--max-rejects", &(BAD + 1).to_string()], 0);
    let out = tmp.path().join("fewer");
    let limit = (BAD - 1).to_string();
    let r = unwind(&[&src], &out, &["--max-rejects", &limit], 1);
    assert!(
        r.stderr.contains(&format!("{BAD} items were rejected, more than `--max-rejects {limit}`")),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("hint: the output was published"), "{}", r.stderr);
    assert_eq!(rows(&out.join("_rejects")), BAD, "published with its rejects");
    assert_eq!(rows(&out.join("thing")), GOOD);
    let report = run_report(&out);
    assert_eq!(report["reconciliation"]["rejects"], BAD, "{}", report["reconciliation"]);
    assert_eq!(report["reconciliation"]["integrity"]["verdict"], "unverified");
}

//! The real AWS export in `../shared/fixtures/aws-real-export` (read in place, never copied).

use crate::common::*;

#[test]
fn real_full_export_unwinds_and_verifies() {
    let Some(root) = real_export() else {
        // The fixture may be read from `../shared` when it is there; it is never copied here.
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let export = root.join("AWSDynamoDB/01768385930622-efd1a093");
    let out = tmp.path().join("out");
    // The publisher anonymised the summary, so its .md5 no longer matches: the output is
    // published but does not reconcile (exit 1), and the verdict is the summary's last line.
    let run = unwind(&[&export], &out, &[], 1);
    assert!(run.stderr.contains("manifest-summary.md5"), "{}", run.stderr);
    let last = run.stderr.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with("error: NOT RECONCILED: 3 of 3 items read from export")
            && last.contains("`manifest-summary.md5`")
            && last.contains("--allow-mismatch"),
        "{last}"
    );
    assert!(run.stderr.contains("3 items had no `Type` attribute"), "{}", run.stderr);

    let report = run_report(&out);
    let inputs = report["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 4);
    assert!(inputs.iter().all(|i| i["md5_check"] == "verified" && i["item_count_check"] == "verified"));
    assert_eq!(inputs.iter().filter(|i| i["items"] == 0).count(), 3);
    assert_eq!(report["reconciliation"]["items_read"], 3);
    assert_eq!(report["reconciliation"]["matches_manifest"], true);
    assert_eq!(report["exports"][0]["files_checksum"]["status"], "verified");
    assert_eq!(report["exports"][0]["summary_checksum"]["status"], "mismatch");
    assert_eq!(report["reconciliation"]["integrity"]["verdict"], "not_reconciled");
    assert_eq!(report["reconciliation"]["integrity"]["mismatches"][0]["check"], "side_file");

    let rows = canonical_rows(&out.join("_untyped"));
    assert_eq!(
        rows,
        [
            r#"{"pk":"1","sk":"1","test":"test"}"#,
            r#"{"pk":"1","sk":"2","test":"test2"}"#,
            r#"{"pk":"1","sk":"3","test1":"1","test2":"2"}"#,
        ]
    );
    // The same export through its manifest-summary.json, the known mismatch accepted.
    let out2 = tmp.path().join("out2");
    unwind(&[&export.join("manifest-summary.json")], &out2, &["--allow-mismatch"], 0);
    assert_eq!(canonical_rows(&out2.join("_untyped")), rows);
    assert_eq!(run_report(&out2)["reconciliation"]["integrity"]["verdict"], "accepted");
    // --strict refuses the anonymised summary checksum.
    unwind(&[&export], &tmp.path().join("strict"), &["--strict"], 1);
}

#[test]
fn real_export_root_with_incrementals_is_refused_with_a_hint() {
    let Some(root) = real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let run = unwind(&[&root], &tmp.path().join("out"), &[], 2);
    assert!(run.stderr.contains("holds 3 exports"), "{}", run.stderr);
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    // Pointing at an incremental export names it.
    let run = unwind(&[&root.join("AWSDynamoDB/01768386924000-d339e52d")], &tmp.path().join("out"), &[], 2);
    assert!(run.stderr.contains("incremental exports are not supported yet"), "{}", run.stderr);
}

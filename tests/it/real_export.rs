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

/// The fixture's final state (`NOTICE.md`, `dynamodb-formats.md` §2.5), value by value: binary
/// values as base64 of their bytes, numbers as decimal text, sets and lists as arrays, the map as a
/// struct; the `NULL` attribute `null` is a null cell, left out.
pub(crate) fn final_state() -> Vec<String> {
    let every = |pk: &str, sk: &str, number: bool| {
        let n = if number { r#","number":"12""# } else { "" };
        format!(
            r#"{{"b":"0000","bset":["0000","1111"],"list":["test","1"],"mapp":{{"test":"test"}},"nset":["1","2"]{n},"pk":"{pk}","sk":"{sk}","sset":["test","test2"],"string":"test"}}"#
        )
    };
    let mut rows = vec![
        r#"{"pk":"1","sk":"2","test":"test2"}"#.to_owned(),
        r#"{"bin_update":["0000","0001"],"pk":"1","sk":"3","test1":"1","test2":"2"}"#.to_owned(),
        r#"{"pk":"2","sk":"1","test":"test2"}"#.to_owned(),
        r#"{"pk":"2","sk":"2","test":"test"}"#.to_owned(),
        every("3", "1", true),
        every("3", "2", false),
        every("3", "3", true),
        r#"{"b":"0000","bset":["0000","1111"],"number":"12","pk":"4","sk":"2","sset":["test","test2"],"string":"test"}"#.to_owned(),
    ];
    rows.sort();
    rows
}

#[test]
fn real_chain_gives_the_notice_final_state() {
    let Some(root) = real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // The real 69-second gap between the full export (10:18:50.622) and the first window (10:20).
    let run = unwind(&[&root], &tmp.path().join("out"), &[], 1);
    for needle in [
        "`01768385930622-efd1a093` covers up to 2026-01-14T10:18:50.622Z",
        "`01768386924000-d339e52d` starts at 2026-01-14T10:20:00.000Z (69.378 s later)",
        "--allow-gap",
    ] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    // Allowed: applied, the gap reported; the anonymised summary checksums still do not verify.
    let out = tmp.path().join("out");
    let run = unwind(&[&root], &out, &["--allow-gap", "--allow-mismatch"], 0);
    assert!(run.stderr.contains("gap of 69.378 s allowed by `--allow-gap`"), "{}", run.stderr);
    let rows = canonical_rows(&out.join("_untyped"));
    assert_eq!(rows, final_state());
    let report = run_report(&out);
    let c = &report["chain"];
    assert_eq!(c["gaps"][0]["seconds"], 69.378);
    assert_eq!(c["key_attributes"], serde_json::json!(["pk", "sk"]));
    let records: Vec<u64> = c["windows"].as_array().unwrap().iter().map(|w| w["records"].as_u64().unwrap()).collect();
    assert_eq!(records, [6, 5]);
    let t = &c["tables"]["_untyped"];
    // Inserts (2,1) (2,2) (3,1) (3,2) (3,3) (4,2); (1,3) updated; (1,1) deleted; (2,3) inserted
    // by the first window and deleted by the second.
    assert_eq!((t["inserts"].as_u64(), t["updates"].as_u64(), t["deletes"].as_u64()), (Some(6), Some(1), Some(1)));
    assert_eq!((c["created_and_deleted"].as_u64(), c["unmatched_deletes"].as_u64()), (Some(1), Some(0)));
    let rec = &report["reconciliation"];
    assert_eq!((rec["items_read"].as_u64(), rec["rows_written"].as_u64()), (Some(14), Some(8)));
    assert_eq!(rec["balanced"], true);
    // Every data file of the three exports verified against its manifest entry.
    let inputs = report["inputs"].as_array().unwrap();
    let listed: Vec<_> = inputs.iter().filter(|i| i["expected_items"].is_u64()).collect();
    assert_eq!(listed.len(), 12);
    assert!(listed.iter().all(|i| i["md5_check"] == "verified" && i["item_count_check"] == "verified"));

    // The three exports named one by one, newest first.
    let a = |id: &str| root.join("AWSDynamoDB").join(id);
    let named = [a("01768388186000-4a2fc3ff"), a("01768386924000-d339e52d"), a("01768385930622-efd1a093")];
    let out2 = tmp.path().join("out2");
    unwind(&named.iter().map(|p| p.as_path()).collect::<Vec<_>>(), &out2, &["--allow-gap", "--allow-mismatch"], 0);
    assert_eq!(canonical_rows(&out2.join("_untyped")), rows);

    // An incremental export alone names what is missing.
    let run = unwind(&[&a("01768386924000-d339e52d")], &tmp.path().join("o3"), &[], 2);
    assert!(run.stderr.contains("have no full export to apply them to"), "{}", run.stderr);
}

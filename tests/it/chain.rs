//! A full export and the incremental exports after it, applied in one run: the result must equal
//! unwinding a full export of the final state (built here from the test's own model of the
//! table), and the chain's checks (gaps, other tables, lone incrementals) refuse what they must.

use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use crate::common::*;

pub(crate) const TABLE: &str = "arn:aws:dynamodb:eu-west-1:111122223333:table/t";
const T0: &str = "2026-09-01T08:00:00.000Z";

fn summary(id: &str, table: &str, items: u64, extra: Json) -> String {
    let mut s = json!({
        "version": "2020-06-30", "exportArn": format!("{table}/export/{id}"),
        "startTime": "2026-09-01T08:00:00.000Z", "endTime": "2026-09-01T08:06:12.345Z", "tableArn": table,
        "tableId": "00000000-1111-2222-3333-444444444444", "s3Bucket": "b", "s3Prefix": null,
        "s3SseAlgorithm": "AES256", "s3SseKmsKeyId": null, "manifestFilesS3Key": format!("AWSDynamoDB/{id}/manifest-files.json"),
        "billedSizeBytes": 0, "itemCount": items, "outputFormat": "DYNAMODB_JSON"
    });
    for (k, v) in extra.as_object().unwrap() {
        s[k] = v.clone();
    }
    s.to_string()
}

/// Writes one export under `root`: its lines in one data file (plus an empty one, as AWS does),
/// in `AWSDynamoDB/<id>/data/` for a full export and in the shared `AWSDynamoDB/data/` for an
/// incremental one.
fn write(root: &Path, id: &str, table: &str, lines: &[String], extra: Json) -> PathBuf {
    let export = root.join("AWSDynamoDB").join(id);
    let incremental = extra.get("exportType").is_some();
    let data = if incremental { root.join("AWSDynamoDB/data") } else { export.join("data") };
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&export).unwrap();
    let prefix = if incremental { "AWSDynamoDB/data".to_owned() } else { format!("AWSDynamoDB/{id}/data") };
    let mut text = String::new();
    for l in lines {
        text.push_str(l);
        text.push('\n');
    }
    let mut manifest = String::new();
    let tag = id.rsplit('-').next().unwrap();
    for (n, (bytes, count)) in [(gzip(text.as_bytes()), lines.len()), (gzip(b""), 0)].into_iter().enumerate() {
        let key = format!("{prefix}/{tag}{n}abcdefghijklmnopq.json.gz");
        std::fs::write(root.join(&key), &bytes).unwrap();
        manifest.push_str(
            &json!({"itemCount": count, "md5Checksum": md5_b64(&bytes), "etag": "0-1", "dataFileS3Key": key})
                .to_string(),
        );
        manifest.push('\n');
    }
    std::fs::write(export.join("manifest-files.json"), &manifest).unwrap();
    std::fs::write(export.join("manifest-files.md5"), md5_b64(manifest.as_bytes())).unwrap();
    let s = summary(id, table, lines.len() as u64, extra);
    std::fs::write(export.join("manifest-summary.json"), &s).unwrap();
    std::fs::write(export.join("manifest-summary.md5"), md5_b64(s.as_bytes())).unwrap();
    std::fs::write(export.join("_started"), "").unwrap();
    export
}

fn full(root: &Path, id: &str, items: &[Json]) -> PathBuf {
    let lines: Vec<String> = items.iter().map(|i| json!({ "Item": i }).to_string()).collect();
    write(root, id, TABLE, &lines, json!({ "exportTime": T0 }))
}

pub(crate) fn incremental(
    root: &Path,
    id: &str,
    table: &str,
    window: (&str, &str),
    view: &str,
    lines: &[String],
) -> PathBuf {
    let extra = json!({
        "version": "2023-08-01", "exportFromTime": window.0, "exportToTime": window.1,
        "outputView": view, "exportType": "INCREMENTAL_EXPORT"
    });
    write(root, id, table, lines, extra)
}

pub(crate) fn item(pk: &str, sk: &str, attrs: Json) -> Json {
    let mut i = json!({ "PK": { "S": pk }, "SK": { "S": sk } });
    for (k, v) in attrs.as_object().unwrap() {
        i[k] = v.clone();
    }
    i
}

fn keys(i: &Json) -> Json {
    json!({ "PK": i["PK"], "SK": i["SK"] })
}

fn wt(n: u64) -> Json {
    json!({ "WriteTimestampMicros": { "N": (1_788_249_600_000_000u64 + n).to_string() } })
}

/// A change record: `old` only in `NEW_AND_OLD_IMAGES` exports; `new` absent for a delete.
pub(crate) fn change(t: u64, k: &Json, old: Option<&Json>, new: Option<&Json>) -> String {
    let mut c = json!({ "Metadata": wt(t), "Keys": keys(k) });
    if let Some(o) = old {
        c["OldImage"] = o.clone();
    }
    if let Some(n) = new {
        c["NewImage"] = n.clone();
    }
    c.to_string()
}

pub(crate) fn s(v: &str) -> Json {
    json!({ "S": v })
}
pub(crate) fn n(v: &str) -> Json {
    json!({ "N": v })
}

#[test]
fn a_chain_equals_a_full_export_of_the_final_state() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("bucket");
    let u = |id: &str, extra: Json| item(&format!("USER#{id}"), "PROFILE", extra);
    let u1 = u("1", json!({ "Type": s("User"), "name": s("a"), "age": n("1") }));
    let u2 = u("2", json!({ "Type": s("User"), "name": s("b") }));
    let u3 = u("3", json!({ "Type": s("User"), "name": s("c") }));
    let o1 = item("ORDER#1", "X", json!({ "Type": s("Order"), "total": n("5") }));
    let o2 = item("ORDER#2", "X", json!({ "Type": s("Order"), "total": n("7.5"), "note": s("gift") }));
    let n1 = item("THING#1", "X", json!({ "what": s("untyped") }));
    full(&root, "01788249600000-aaaaaaaa", &[u1.clone(), u2.clone(), u3.clone(), o1.clone(), o2.clone(), n1.clone()]);

    // Window 1 starts before the full export (an overlap), with both images.
    let u1b = u("1", json!({ "Type": s("User"), "name": s("a2"), "age": n("1") }));
    let u4 = u("4", json!({ "Type": s("User"), "name": s("d"), "age": n("40") }));
    let u5 = u("5", json!({ "Type": s("User"), "name": s("e") }));
    let o2b = item("ORDER#2", "X", json!({ "Type": s("Order"), "total": n("7.50") }));
    let u3b = u("3", json!({ "Type": s("Admin"), "name": s("c"), "level": n("9") }));
    incremental(
        &root,
        "01788249300000-bbbbbbbb",
        TABLE,
        ("2026-09-01T07:55:00.000Z", "2026-09-01T08:15:00.000Z"),
        "NEW_AND_OLD_IMAGES",
        &[
            change(100, &u1, Some(&u1), Some(&u1b)),
            change(110, &u4, None, Some(&u4)),
            change(120, &u5, None, Some(&u5)),
            change(130, &o2, Some(&o2), Some(&o2b)),
            change(140, &u3, Some(&u3), Some(&u3b)),
        ],
    );
    // Window 2: NEW_IMAGE, deletes carry only keys; one deletes a key that never was.
    let u1c = u("1", json!({ "Type": s("User"), "name": s("a3") }));
    let u4b = u("4", json!({ "Type": s("User"), "name": s("d"), "age": n("41") }));
    let ghost = u("404", json!({}));
    incremental(
        &root,
        "01788250500000-cccccccc",
        TABLE,
        ("2026-09-01T08:15:00.000Z", "2026-09-01T08:30:00.000Z"),
        "NEW_IMAGE",
        &[
            change(200, &o1, None, None),
            change(210, &u5, None, None),
            change(220, &ghost, None, None),
            change(230, &u1, None, Some(&u1c)),
            change(240, &u4, None, Some(&u4b)),
        ],
    );
    // Window 3 overlaps window 2: it repeats a write, changes one more item, and holds three
    // change records no export could hold.
    let u2b = u("2", json!({ "Type": s("User"), "name": s("b2"), "tags": { "SS": ["x", "y"] } }));
    incremental(
        &root,
        "01788251400000-dddddddd",
        TABLE,
        ("2026-09-01T08:20:00.000Z", "2026-09-01T08:45:00.000Z"),
        "NEW_IMAGE",
        &[
            change(230, &u1, None, Some(&u1c)),
            change(300, &u2, None, Some(&u2b)),
            json!({ "Metadata": wt(301), "Keys": {}, "NewImage": u2b }).to_string(),
            json!({ "Metadata": wt(302), "Keys": keys(&u2), "NewImage": u4b }).to_string(),
            json!({ "Metadata": { "WriteTimestampMicros": { "S": "soon" } }, "Keys": keys(&u2) }).to_string(),
        ],
    );

    let out = tmp.path().join("out");
    let run = unwind(&[&root], &out, &[], 0);
    assert!(
        run.stderr.contains("applied 3 incremental exports to full export `01788249600000-aaaaaaaa`"),
        "{}",
        run.stderr
    );

    // The final state, from the test's own model, unwound as a full export.
    let want = [u1c, u2b, u3b, o2b, n1, u4b];
    let reference = tmp.path().join("reference");
    full(&reference, "01788252300000-eeeeeeee", &want);
    let ref_out = tmp.path().join("ref_out");
    unwind(&[&reference], &ref_out, &[], 0);
    let got = table_rows(&out);
    assert_eq!(got, table_rows(&ref_out));
    assert_eq!(got.keys().cloned().collect::<Vec<_>>(), ["_untyped", "admin", "order", "user"]);
    assert_eq!(got["user"].len(), 3);

    let report = run_report(&out);
    let c = &report["chain"];
    assert_eq!(c["full_export"], "01788249600000-aaaaaaaa");
    let windows: Vec<&str> = c["windows"].as_array().unwrap().iter().map(|w| w["export"].as_str().unwrap()).collect();
    assert_eq!(windows, ["01788249300000-bbbbbbbb", "01788250500000-cccccccc", "01788251400000-dddddddd"]);
    assert_eq!(c["windows"][1]["output_view"], "NEW_IMAGE");
    assert_eq!(c["key_attributes"], json!(["PK", "SK"]));
    assert_eq!((c["change_records"].as_u64(), c["changed_keys"].as_u64()), (Some(12), Some(8)));
    assert_eq!(c["superseded_items"], 5);
    let changes = |t: &str| {
        let x = &c["tables"][t];
        ["inserts", "updates", "deletes", "moved_in", "moved_out"].map(|k| x[k].as_u64().unwrap())
    };
    assert_eq!(changes("user"), [1, 2, 0, 0, 1]);
    assert_eq!(changes("admin"), [0, 0, 0, 1, 0]);
    assert_eq!(changes("order"), [0, 1, 1, 0, 0]);
    assert_eq!((c["unmatched_deletes"].as_u64(), c["created_and_deleted"].as_u64()), (Some(1), Some(1)));
    assert!(c["gaps"].as_array().unwrap().is_empty());
    let rec = &report["reconciliation"];
    assert_eq!(rec["balanced"], true);
    assert_eq!(rec["integrity"]["verdict"], "reconciled");
    assert_eq!((rec["items_read"].as_u64(), rec["changes_applied"].as_u64()), (Some(21), Some(12)));
    assert_eq!(rec["superseded_items"], 5);
    assert_eq!(rec["current_images"], 5);
    assert_eq!(report["rejects_by_reason"], json!({ "bad_write_time": 1, "keys_mismatch": 1, "no_keys": 1 }));
    assert_eq!(count_rows(&out.join("_rejects")), 3);

    // The same exports named one by one, in any order, give the same tables; so do more threads.
    let ids =
        ["01788251400000-dddddddd", "01788249600000-aaaaaaaa", "01788250500000-cccccccc", "01788249300000-bbbbbbbb"];
    let named: Vec<PathBuf> = ids.iter().map(|id| root.join("AWSDynamoDB").join(id)).collect();
    let out2 = tmp.path().join("out2");
    unwind(&named.iter().map(PathBuf::as_path).collect::<Vec<_>>(), &out2, &["--threads", "3"], 0);
    assert_eq!(table_rows(&out2), got);
    for t in got.keys() {
        let files = |o: &Path| {
            let mut f: Vec<Vec<u8>> = files_under(&o.join(t)).iter().map(|p| std::fs::read(p).unwrap()).collect();
            f.sort();
            f
        };
        assert_eq!(files(&out), files(&out2), "table `{t}` is not byte-identical");
    }
}

#[test]
fn gaps_other_tables_and_lone_incrementals_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("bucket");
    let a = item("A", "1", json!({ "v": n("1") }));
    full(&root, "01788249600000-aaaaaaaa", std::slice::from_ref(&a));
    let a2 = item("A", "1", json!({ "v": n("2") }));
    incremental(
        &root,
        "01788249660000-bbbbbbbb",
        TABLE,
        ("2026-09-01T08:01:00.000Z", "2026-09-01T08:20:00.000Z"),
        "NEW_AND_OLD_IMAGES",
        &[change(1, &a, Some(&a), Some(&a2))],
    );
    let out = tmp.path().join("out");
    let run = unwind(&[&root], &out, &[], 1);
    for needle in [
        "gap in the chain",
        "`01788249600000-aaaaaaaa` covers up to 2026-09-01T08:00:00.000Z",
        "`01788249660000-bbbbbbbb` starts at 2026-09-01T08:01:00.000Z (60.000 s later)",
        "hint:",
        "--allow-gap",
    ] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    assert!(!out.exists());
    let run = unwind(&[&root], &out, &["--allow-gap"], 0);
    assert!(run.stderr.contains("gap of 60.000 s allowed by `--allow-gap`"), "{}", run.stderr);
    let report = run_report(&out);
    assert_eq!(report["chain"]["gaps"][0]["seconds"], 60.0);
    assert_eq!(canonical_rows(&out.join("_untyped")), [r#"{"PK":"A","SK":"1","v":"2"}"#]);

    // An incremental export of another table.
    let other = tmp.path().join("other");
    let inc = incremental(
        &other,
        "01788249500000-cccccccc",
        "arn:aws:dynamodb:eu-west-1:111122223333:table/other",
        ("2026-09-01T07:59:00.000Z", "2026-09-01T08:20:00.000Z"),
        "NEW_IMAGE",
        &[change(1, &a, None, None)],
    );
    let full_dir = root.join("AWSDynamoDB/01788249600000-aaaaaaaa");
    let run = unwind(&[&full_dir, &inc], &tmp.path().join("o2"), &[], 2);
    assert!(run.stderr.contains("is of table `arn:aws:dynamodb:eu-west-1:111122223333:table/other`"), "{}", run.stderr);
    // An incremental export alone.
    let run = unwind(&[&inc], &tmp.path().join("o3"), &[], 2);
    assert!(run.stderr.contains("have no full export to apply them to"), "{}", run.stderr);
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
}

#[test]
fn state_makes_a_rerun_a_no_op_and_refuses_older_exports() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("bucket");
    let a = item("A", "1", json!({ "v": n("1") }));
    let b = item("B", "1", json!({ "v": n("1") }));
    let dir = |id: &str| root.join("AWSDynamoDB").join(id);
    full(&root, "01788249600000-aaaaaaaa", std::slice::from_ref(&a));
    let w1 = ("2026-09-01T07:59:00.000Z", "2026-09-01T08:20:00.000Z");
    let w2 = ("2026-09-01T08:20:00.000Z", "2026-09-01T08:40:00.000Z");
    incremental(&root, "01788249540000-bbbbbbbb", TABLE, w1, "NEW_IMAGE", &[change(1, &b, None, Some(&b))]);
    incremental(&root, "01788250800000-cccccccc", TABLE, w2, "NEW_IMAGE", &[change(2, &a, None, None)]);
    let out = tmp.path().join("out");
    unwind(&[&root], &out, &[], 0);
    let state: Json = serde_json::from_slice(&std::fs::read(out.join("_etl/state.json")).unwrap()).unwrap();
    assert_eq!(state["table_arn"], TABLE);
    assert_eq!(state["key_attributes"], json!(["PK", "SK"]));
    let applied: Vec<(&str, bool)> = state["applied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["export_id"].as_str().unwrap(), e["incremental"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        applied,
        [("01788249600000-aaaaaaaa", false), ("01788249540000-bbbbbbbb", true), ("01788250800000-cccccccc", true)]
    );
    assert_eq!(state["applied"][2]["to_time"], w2.1);
    assert_eq!(run_report(&out)["state"], state);
    assert_eq!(canonical_rows(&out.join("_untyped")), [r#"{"PK":"B","SK":"1","v":"1"}"#]);

    // The same exports again: nothing to do, nothing rewritten.
    let before = std::fs::read(out.join("_etl/run.json")).unwrap();
    let run = unwind(&[&root], &out, &[], 0);
    assert!(run.stderr.contains("already holds exports `01788249600000-aaaaaaaa`"), "{}", run.stderr);
    assert!(run.stderr.contains("nothing to apply, nothing rewritten"), "{}", run.stderr);
    assert_eq!(std::fs::read(out.join("_etl/run.json")).unwrap(), before);

    // Some of the exports applied, named again: nothing to do either.
    let run = unwind(&[&dir("01788249600000-aaaaaaaa"), &dir("01788249540000-bbbbbbbb")], &out, &[], 0);
    assert!(run.stderr.contains("nothing to apply, nothing rewritten"), "{}", run.stderr);
    // An export not applied that ends before those applied: refused, the output untouched.
    let older = tmp.path().join("older");
    let inc = incremental(&older, "01788249550000-eeeeeeee", TABLE, w1, "NEW_IMAGE", &[change(1, &b, None, Some(&b))]);
    let run = unwind(&[&dir("01788249600000-aaaaaaaa"), &inc], &out, &[], 1);
    assert!(run.stderr.contains("before the exports"), "{}", run.stderr);
    assert!(run.stderr.contains("export `01788250800000-cccccccc`"), "{}", run.stderr);
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    assert_eq!(std::fs::read(out.join("_etl/run.json")).unwrap(), before);

    // A newer export is applied.
    let w3 = ("2026-09-01T08:40:00.000Z", "2026-09-01T09:00:00.000Z");
    let c = item("C", "1", json!({ "v": n("3") }));
    incremental(&root, "01788252000000-dddddddd", TABLE, w3, "NEW_IMAGE", &[change(3, &c, None, Some(&c))]);
    unwind(&[&root], &out, &[], 0);
    assert_eq!(run_report(&out)["state"]["applied"].as_array().unwrap().len(), 4);
    let rows = [r#"{"PK":"B","SK":"1","v":"1"}"#, r#"{"PK":"C","SK":"1","v":"3"}"#];
    assert_eq!(canonical_rows(&out.join("_untyped")), rows);

    // The same exports with another option that decides the output: not a no-op, the output is
    // written again with it; the same exports and options again: a no-op.
    let before = std::fs::read(out.join("_etl/run.json")).unwrap();
    let run = unwind(&[&root], &out, &["--row-group-rows", "1000"], 0);
    assert!(!run.stderr.contains("nothing to apply"), "{}", run.stderr);
    let report = run_report(&out);
    assert_eq!(report["options"]["layout"]["row_group_rows"], 1000);
    assert_eq!(report["state"]["applied"].as_array().unwrap().len(), 4);
    assert_ne!(std::fs::read(out.join("_etl/run.json")).unwrap(), before);
    assert_eq!(canonical_rows(&out.join("_untyped")), rows);
    let before = std::fs::read(out.join("_etl/run.json")).unwrap();
    let run = unwind(&[&root], &out, &["--row-group-rows", "1000"], 0);
    assert!(run.stderr.contains("nothing to apply, nothing rewritten"), "{}", run.stderr);
    assert_eq!(std::fs::read(out.join("_etl/run.json")).unwrap(), before);
    for other in [["--type-attribute", "v"], ["--target-file-bytes", "1000000"], ["--max-line-bytes", "4096"]] {
        let run = unwind(&[&root], &out, &["--row-group-rows", "1000", other[0], other[1]], 0);
        assert!(!run.stderr.contains("nothing to apply"), "{other:?}: {}", run.stderr);
        assert_ne!(std::fs::read(out.join("_etl/run.json")).unwrap(), before, "{other:?}");
        unwind(&[&root], &out, &["--row-group-rows", "1000"], 0);
    }
    // The last incremental export alone, named with another option: the output's exports are
    // written again, and the summary says no export was new (it said "applied 0 incremental
    // exports").
    let run = unwind(&[&dir("01788252000000-dddddddd")], &out, &["--row-group-rows", "500"], 0);
    assert!(
        run.stderr.contains(
            "no new incremental export: the output's exports up to `01788252000000-dddddddd` \
             (full export `01788249600000-aaaaaaaa`) written again with this run's options: "
        ),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("applied 0"), "{}", run.stderr);
    assert_eq!(run_report(&out)["options"]["layout"]["row_group_rows"], 500);
    assert_eq!(canonical_rows(&out.join("_untyped")), rows);
}

/// A full export of one `user` and one `order` under `root`, and an incremental export deleting
/// the `order`.
pub(crate) fn the_only_order_deleted(root: &Path) -> (PathBuf, PathBuf) {
    let a = item("A", "1", json!({ "Type": s("user") }));
    let b = item("B", "1", json!({ "Type": s("order") }));
    let full_dir = full(root, "01788249600000-aaaaaaaa", &[a, b.clone()]);
    let w1 = ("2026-09-01T07:59:00.000Z", "2026-09-01T08:20:00.000Z");
    let inc = incremental(root, "01788249540000-bbbbbbbb", TABLE, w1, "NEW_IMAGE", &[change(1, &b, None, None)]);
    (full_dir, inc)
}

#[test]
fn a_delta_table_whose_rows_all_left_is_emptied_by_one_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let (full_dir, inc) = the_only_order_deleted(&tmp.path().join("bucket"));
    let out = tmp.path().join("out");
    unwind(&[&full_dir], &out, &["--format", "delta"], 0);
    assert!(out.join("order/_delta_log").is_dir());
    unwind(&[&inc], &out, &["--format", "delta"], 0);
    let report = run_report(&out);
    let tables: Vec<&str> = report["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(tables.contains(&"user") && !tables.contains(&"order"), "{tables:?}");
    // A Delta reader of `order` sees its true current state: the latest commit removes every
    // file of the previous version and adds none.
    let mut commits: Vec<PathBuf> = std::fs::read_dir(out.join("order/_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    commits.sort();
    assert_eq!(commits.len(), 2, "{commits:?}");
    let first = std::fs::read_to_string(&commits[0]).unwrap();
    let last = std::fs::read_to_string(&commits[1]).unwrap();
    let actions = |text: &str, kind: &str| -> usize {
        text.lines().filter(|l| serde_json::from_str::<Json>(l).unwrap().get(kind).is_some()).count()
    };
    assert_eq!(actions(&first, "add"), 1, "{first}");
    assert_eq!((actions(&last, "remove"), actions(&last, "add")), (1, 0), "{last}");
}

/// Every row of a table deleted: the output lists its tables as a full export of the final state
/// (which has no such item) would, whether the chain is unwound in one run, applied by a replay,
/// or applied in place (Parquet `--in-place`, Delta): an inferred table is gone; `_rejects` and a
/// table the mapping declares stay listed with no row, as in any run that writes none.
#[test]
fn a_table_whose_rows_all_left_is_listed_as_in_a_full_export() {
    let tmp = tempfile::tempdir().unwrap();
    let (full_dir, inc) = the_only_order_deleted(&tmp.path().join("bucket"));
    let mapping = tmp.path().join("order.toml");
    let toml = "[settings]\ntype_attribute = \"Type\"\n\n[entity.order]\ntable = \"order\"\n\
                keys = { PK = \"{pk}\", SK = \"{sk}\" }\ncolumns = [{ name = \"pk\" }, { name = \"sk\" }]\n";
    std::fs::write(&mapping, toml).unwrap();
    let mapped = ["--mapping", mapping.to_str().unwrap()];
    let tables = |out: &Path| -> Vec<(String, u64)> {
        let report = run_report(out);
        let tables = report["tables"].as_array().unwrap().iter();
        tables.map(|t| (t["name"].as_str().unwrap().to_owned(), t["rows"].as_u64().unwrap())).collect()
    };
    let mut n = 0;
    let mut parquet_columns = std::collections::BTreeMap::new();
    for (format, applies) in [("parquet", &[&[][..], &["--in-place"][..]][..]), ("delta", &[&[][..]][..])] {
        for options in [&[][..], &mapped[..]] {
            let case = format!("{format} {options:?}");
            let opts: Vec<&str> = ["--format", format].iter().chain(options).copied().collect();
            let chain = tmp.path().join(format!("chain{n}"));
            unwind(&[&full_dir, &inc], &chain, &opts, 0);
            let want = if options.is_empty() {
                vec![("_rejects".to_owned(), 0), ("user".to_owned(), 1)]
            } else {
                vec![("_rejects".to_owned(), 0), ("order".to_owned(), 0), ("user".to_owned(), 1)]
            };
            assert_eq!(tables(&chain), want, "{case}: the chain in one run");
            for how in applies {
                n += 1;
                let case = format!("{case} {how:?}");
                let out = tmp.path().join(format!("out{n}"));
                unwind(&[&full_dir], &out, &opts, 0);
                assert!(out.join("order").is_dir(), "{case}");
                let apply: Vec<&str> = opts.iter().chain(*how).copied().collect();
                unwind(&[&inc], &out, &apply, 0);
                let report = run_report(&out);
                let in_place = format == "delta" || !how.is_empty();
                assert_eq!(report["chain"]["applied_in_place"] == true, in_place, "{case}: {}", report["warnings"]);
                assert_eq!(tables(&out), want, "{case}");
                assert_eq!(report["reconciliation"]["balanced"], true, "{case}");
                // `\d` shows each table's columns as written, with their origin: for a Delta table
                // left without a file, its contract's (not the Delta provider's bare columns).
                let columns = |out: &Path| {
                    let (_rt, session) = crate::delta::session(out);
                    let mut shown: Vec<String> = session
                        .tables()
                        .iter()
                        .flat_map(|t| {
                            t.columns()
                                .into_iter()
                                .map(|c| format!("{}.{} {} {}", t.name, c.name, c.type_name, c.origin))
                        })
                        .collect();
                    shown.sort();
                    shown
                };
                assert_eq!(columns(&out), columns(&chain), "{case}");
                // And as over the Parquet chain, whose every table has a file.
                let reference = parquet_columns.entry(options.is_empty()).or_insert_with(|| columns(&chain));
                assert_eq!(&columns(&out), reference, "{case}: against the Parquet chain");
                // The contract goes with the table: `_etl/schema/` holds those of the tables
                // listed (all but `_rejects`), as the chain's does, in either format.
                let contracts = |out: &Path| -> Vec<String> {
                    let mut names: Vec<String> = std::fs::read_dir(out.join("_etl/schema"))
                        .unwrap()
                        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                        .collect();
                    names.sort();
                    names
                };
                let listed: Vec<String> =
                    want.iter().filter(|(t, _)| t != "_rejects").map(|(t, _)| format!("{t}.json")).collect();
                assert_eq!(contracts(&out), listed, "{case}");
                assert_eq!(contracts(&chain), listed, "{case}: the chain");
                if format == "parquet" {
                    // And so does the folder.
                    assert_eq!(out.join("order").exists(), !options.is_empty(), "{case}");
                    assert_eq!(table_rows(&out), table_rows(&chain), "{case}");
                }
            }
        }
    }
}

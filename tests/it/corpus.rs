//! A corpus of bad input: every kind gives a reject or a clear error, never a panic, and nothing
//! else is lost.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, BooleanArray, Int64Array, StringArray};

use crate::common::*;

fn good(i: usize) -> String {
    format!(
        r#"{{"Item":{{"PK":{{"S":"USER#{i}"}},"SK":{{"S":"PROFILE"}},"Type":{{"S":"User"}},"n":{{"N":"{i}.5"}}}}}}"#
    )
}

/// (line, expected reason) pairs: each line is something DynamoDB could never have exported.
fn bad_lines() -> Vec<(Vec<u8>, &'static str)> {
    let nested = {
        let mut v = r#"{"S":"leaf"}"#.to_owned();
        for _ in 1..33 {
            v = format!(r#"{{"L":[{v}]}}"#);
        }
        format!(r#"{{"Item":{{"PK":{{"S":"deep"}},"deep":{v}}}}}"#)
    };
    let huge_item = format!(r#"{{"Item":{{"PK":{{"S":"big"}},"blob":{{"S":"{}"}}}}}}"#, "x".repeat(420 * 1024));
    let mut invalid_utf8 = br#"{"Item":{"PK":{"S":"bad "#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe]);
    invalid_utf8.extend_from_slice(br#""}}}"#);
    vec![
        (br#"{"Item":{"PK":{"S":"trunc"},"n":{"N":"1"#.to_vec(), "invalid_json"),
        (br#"{"Item":{"PK":{"S":"two"},"a":{"S":"x","N":"1"}}}"#.to_vec(), "two_type_keys"),
        (br#"{"Item":{"PK":{"S":"unk"},"a":{"X":"1"}}}"#.to_vec(), "unknown_type_key"),
        (br#"{"Item":{"PK":{"S":"num"},"a":{"N":"1.2.3"}}}"#.to_vec(), "invalid_number"),
        (
            br#"{"Item":{"PK":{"S":"d39"},"a":{"N":"123456789012345678901234567890123456789"}}}"#.to_vec(),
            "too_many_digits",
        ),
        (br#"{"Item":{"PK":{"S":"rng"},"a":{"N":"1E+126"}}}"#.to_vec(), "number_out_of_range"),
        (br#"{"Item":{"PK":{"S":"b64"},"a":{"B":"not base64!"}}}"#.to_vec(), "invalid_base64"),
        (br#"{"Item":{"PK":{"S":"set"},"a":{"SS":[]}}}"#.to_vec(), "empty_set"),
        (br#"{"Item":{"PK":{"S":"dup"},"a":{"NS":["1","1.0"]}}}"#.to_vec(), "duplicate_set_member"),
        (nested.into_bytes(), "too_deep"),
        (invalid_utf8, "invalid_utf8"),
        (br#"{"Item":{"PK":{"S":"x"},"PK":{"S":"y"}}}"#.to_vec(), "duplicate_attribute"),
        (br#"{"Item":{}}"#.to_vec(), "empty_item"),
        (br#"{"Foo":{"PK":{"S":"x"}}}"#.to_vec(), "not_an_item"),
        (br#"{"Item":{"PK":{"S":"nul"},"a":{"NULL":false}}}"#.to_vec(), "wrong_value_shape"),
        (br#"{"Metadata":{"WriteTimestampMicros":{"N":"1"}},"Keys":{"PK":{"S":"x"}}}"#.to_vec(), "incremental_record"),
        (huge_item.into_bytes(), "item_too_large"),
        (vec![b'{'; 1_500_000], "line_too_long"),
    ]
}

#[test]
fn every_bad_line_becomes_a_reject_and_nothing_else_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = bad_lines();
    let mut data = Vec::new();
    let mut good_count = 0;
    for (i, (line, _)) in bad.iter().enumerate() {
        data.extend_from_slice(good(i).as_bytes());
        data.push(b'\n');
        good_count += 1;
        data.extend_from_slice(line);
        data.push(b'\n');
    }
    data.extend_from_slice(b"\n   \n"); // blank lines are not items
    let items = (good_count + bad.len()) as u64;
    let export = write_export(tmp.path(), &[gzip(&data)], &[items]);
    let out = tmp.path().join("out");
    let run = unwind(&[&export], &out, &["--max-line-bytes", "1000000"], 0);
    assert!(run.stderr.contains("every item accounted for"), "{}", run.stderr);

    assert_eq!(count_rows(&out.join("user")), good_count);
    let (_, batches) = read_table(&out.join("_rejects"));
    let b = &batches[0];
    let col = |n: &str| b.column_by_name(n).unwrap().clone();
    let reasons = col("reason");
    let reasons = reasons.as_any().downcast_ref::<StringArray>().unwrap();
    let lines = col("line");
    let lines = lines.as_any().downcast_ref::<Int64Array>().unwrap();
    let files = col("source_file");
    let files = files.as_any().downcast_ref::<StringArray>().unwrap();
    let truncated = col("raw_truncated");
    let truncated = truncated.as_any().downcast_ref::<BooleanArray>().unwrap();
    assert_eq!(b.num_rows(), bad.len());
    for (i, (_, reason)) in bad.iter().enumerate() {
        assert_eq!(reasons.value(i), *reason, "reject {i}");
        assert_eq!(lines.value(i), 2 * i as i64 + 2, "line of reject {i}");
        assert!(files.value(i).ends_with(".json.gz"));
        assert_eq!(truncated.value(i), *reason == "line_too_long");
    }
    let messages = col("message");
    let messages = messages.as_any().downcast_ref::<StringArray>().unwrap();
    assert!(messages.value(3).contains("attribute `a`"), "{}", messages.value(3));
    let attrs = col("attribute");
    assert_eq!(
        attrs.as_any().downcast_ref::<StringArray>().unwrap().value(9),
        "deep[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]"
    );
    let raw = col("raw");
    let raw = raw.as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(raw.value(1), std::str::from_utf8(&bad[1].0).unwrap());
    assert!(raw.value(17).len() <= 1024, "over-long lines keep only a prefix");

    let report = run_report(&out);
    let by_reason: BTreeMap<String, u64> = serde_json::from_value(report["rejects_by_reason"].clone()).unwrap();
    assert_eq!(by_reason.values().sum::<u64>(), bad.len() as u64);
    assert_eq!(report["reconciliation"]["items_read"].as_u64(), Some(items));
    assert_eq!(report["reconciliation"]["matches_manifest"], true);
    assert!(report["warnings"].as_array().unwrap().is_empty());
}

#[test]
fn strict_mode_fails_on_the_first_reject_and_publishes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = format!("{}\n{}\n", good(1), r#"{"Item":{"PK":{"S":"x"},"price":{"N":"12,5"}}}"#);
    let export = write_export(tmp.path(), &[gzip(data.as_bytes())], &[2]);
    let out = tmp.path().join("out");
    let run = unwind(&[&export], &out, &["--strict"], 1);
    assert!(run.stderr.contains("line 2"), "{}", run.stderr);
    assert!(run.stderr.contains("attribute `price`"), "{}", run.stderr);
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    assert!(!out.exists());
    // Without --strict the same input succeeds; --max-rejects 0 then exits 1 but publishes.
    unwind(&[&export], &out, &[], 0);
    let run = unwind(&[&export], &out, &["--max-rejects", "0"], 1);
    assert!(run.stderr.contains("--max-rejects 0"), "{}", run.stderr);
    assert_eq!(count_rows(&out.join("_rejects")), 1);
}

#[test]
fn truncated_gzip_is_a_reject_and_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let lines: String = (0..2000).map(|i| good(i) + "\n").collect();
    let full = gzip(lines.as_bytes());
    let cut = full[..full.len() / 2].to_vec();
    let cut_copy = cut.clone();
    let other = gzip(format!("{}\n", good(9999)).as_bytes());
    let export = write_export(tmp.path(), &[cut, other], &[2000, 1]);
    let out = tmp.path().join("out");
    // Published, so the rejects can be read, but the output does not reconcile: exit 1.
    let run = unwind(&[&export], &out, &[], 1);
    assert!(run.stderr.contains("corrupt or truncated"), "{}", run.stderr);
    let last = run.stderr.trim_end().lines().last().unwrap();
    assert!(last.starts_with("error: NOT RECONCILED: ") && last.contains("of 2,001 items read"), "{last}");
    let report = run_report(&out);
    assert_eq!(report["reconciliation"]["integrity"]["verdict"], "not_reconciled");
    assert_eq!(report["rejects_by_reason"]["corrupt_file"], 1);
    assert_eq!(report["reconciliation"]["balanced"], true);
    assert_eq!(report["reconciliation"]["matches_manifest"], false);
    assert_eq!(report["inputs"][0]["item_count_check"], "mismatch");
    assert_eq!(report["inputs"][1]["item_count_check"], "verified");
    // Exactly the lines complete before the cut, and the other file's one: what a gunzip of the
    // cut bytes recovers (the partial line after them is the one `corrupt_file` reject).
    let mut recovered = Vec::new();
    let _ = std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&cut_copy[..]), &mut recovered);
    let complete = recovered.iter().filter(|&&b| b == b'\n').count();
    assert!(complete > 0 && complete < 2000, "{complete} lines survive the cut");
    assert_eq!(count_rows(&out.join("user")), complete + 1);
    // Accepted knowingly: exit 0, still reported.
    let run = unwind(&[&export], &out, &["--allow-mismatch"], 0);
    assert!(run.stderr.trim_end().lines().last().unwrap().starts_with("warning: NOT RECONCILED"), "{}", run.stderr);
    assert_eq!(run_report(&out)["reconciliation"]["integrity"]["verdict"], "accepted");
}

#[test]
fn checksum_and_count_mismatches_exit_1_or_fail_in_strict_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let data = gzip(format!("{}\n{}\n", good(1), good(2)).as_bytes());
    let export = write_export(tmp.path(), std::slice::from_ref(&data), &[2]);
    // Corrupt the manifest's checksum and count (and refresh its .md5 so only these differ).
    let mf = export.join("manifest-files.json");
    let text = std::fs::read_to_string(&mf)
        .unwrap()
        .replace(&md5_b64(&data), "AAAAAAAAAAAAAAAAAAAAAA==")
        .replace("\"itemCount\":2", "\"itemCount\":3");
    std::fs::write(&mf, &text).unwrap();
    std::fs::write(export.join("manifest-files.md5"), md5_b64(text.as_bytes())).unwrap();
    let out = tmp.path().join("out");
    let run = unwind(&[&export], &out, &[], 1);
    assert!(run.stderr.contains("MD5"), "{}", run.stderr);
    assert!(run.stderr.contains("manifest says 3 items, read 2"), "{}", run.stderr);
    let report = run_report(&out);
    assert_eq!(report["inputs"][0]["md5_check"], "mismatch");
    assert_eq!(report["inputs"][0]["item_count_check"], "mismatch");
    let strict_out = tmp.path().join("strict");
    let run = unwind(&[&export], &strict_out, &["--strict"], 1);
    assert!(run.stderr.contains("strict mode"), "{}", run.stderr);
    assert!(!strict_out.exists());
}

#[test]
fn broken_exports_give_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let data = gzip(format!("{}\n", good(1)).as_bytes());

    // A data file listed in the manifest is missing.
    let a = tmp.path().join("missing");
    let export = write_export(&a, std::slice::from_ref(&data), &[1]);
    let key = std::fs::read_dir(export.join("data")).unwrap().next().unwrap().unwrap().path();
    std::fs::remove_file(&key).unwrap();
    // The export does not match its manifest: an integrity failure, refused before reading.
    let run = unwind(&[&export], &tmp.path().join("o1"), &[], 1);
    assert!(
        run.stderr.contains("is missing")
            && run.stderr.contains("manifest-files.json")
            && run.stderr.contains("line 1"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);

    // A key that escapes the export root.
    let b = tmp.path().join("escape");
    let export = write_export(&b, std::slice::from_ref(&data), &[1]);
    let mf = export.join("manifest-files.json");
    let text = std::fs::read_to_string(&mf).unwrap();
    let evil = text.replace("AWSDynamoDB/01790000000000-0a1b2c3d/data/", "AWSDynamoDB/../../../etc/");
    std::fs::write(&mf, evil).unwrap();
    let run = unwind(&[&export], &tmp.path().join("o2"), &[], 2);
    assert!(run.stderr.contains("leaves the export root"), "{}", run.stderr);

    // An incremental export is refused by name; an Ion summary over `.json.gz` files is refused as
    // a mismatch (Ion exports themselves are read: tests/it/ion.rs).
    let c = tmp.path().join("incr");
    let export = write_export(&c, std::slice::from_ref(&data), &[1]);
    let sp = export.join("manifest-summary.json");
    let s = std::fs::read_to_string(&sp)
        .unwrap()
        .replace("\"outputFormat\"", "\"exportType\":\"INCREMENTAL_EXPORT\",\"outputFormat\"");
    std::fs::write(&sp, s).unwrap();
    let run = unwind(&[&export], &tmp.path().join("o3"), &[], 2);
    assert!(
        run.stderr.contains("has no `exportFromTime`, which an incremental export's summary has"),
        "{}",
        run.stderr
    );
    let d = tmp.path().join("ion");
    let export = write_export(&d, std::slice::from_ref(&data), &[1]);
    let sp = export.join("manifest-summary.json");
    let s = std::fs::read_to_string(&sp).unwrap().replace("DYNAMODB_JSON", "ION");
    std::fs::write(&sp, s).unwrap();
    let run = unwind(&[&export], &tmp.path().join("o4"), &[], 2);
    assert!(run.stderr.contains("`outputFormat` is `ION`, whose data files end in `.ion.gz`"), "{}", run.stderr);

    // Scan output in text, table or yaml format.
    for (name, text) in [
        ("text.txt", "ITEMS\tUSER#1\n"),
        ("table.json", "-------------\n|   Scan    |\n"),
        ("yaml.json", "Items:\n- PK:\n    S: x\n"),
    ] {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        let run = unwind(&[&p], &tmp.path().join("o5"), &[], 2);
        assert!(run.stderr.contains("--output json"), "{name}: {}", run.stderr);
    }

    // A scan document cut short names its line.
    let p = tmp.path().join("cut.json");
    std::fs::write(&p, "{\n    \"Items\": [\n        {\"PK\": {\"S\": \"x\"}},\n        {\"PK\": ").unwrap();
    let run = unwind(&[&p], &tmp.path().join("o6"), &[], 2);
    assert!(run.stderr.contains("line 4"), "{}", run.stderr);

    // An existing folder that is not etl output is refused.
    let precious = tmp.path().join("precious");
    std::fs::create_dir(&precious).unwrap();
    std::fs::write(precious.join("notes.txt"), "keep me").unwrap();
    let run = unwind(&[&export_dir_with_good_data(tmp.path())], &precious, &[], 2);
    assert!(run.stderr.contains("not an etl output") && run.stderr.contains("--overwrite"), "{}", run.stderr);
    assert!(precious.join("notes.txt").exists());
}

fn export_dir_with_good_data(base: &std::path::Path) -> std::path::PathBuf {
    let dir = base.join("good");
    write_export(&dir, &[gzip(format!("{}\n", good(1)).as_bytes())], &[1])
}

#[test]
fn partial_scan_output_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("page.json");
    std::fs::write(
        &p,
        r#"{"Items":[{"PK":{"S":"a"},"Type":{"S":"User"}}],"Count":1,"ScannedCount":1,"LastEvaluatedKey":{"PK":{"S":"a"}}}"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let run = unwind(&[&p], &out, &[], 0);
    assert!(run.stderr.contains("LastEvaluatedKey") && run.stderr.contains("only part of the table"), "{}", run.stderr);
    assert_eq!(count_rows(&out.join("user")), 1);
}

#[test]
fn multi_member_gzip_checksum_side_files_and_another_type_attribute() {
    let tmp = tempfile::tempdir().unwrap();
    let line = |i: usize, kind: &str| format!(r#"{{"Item":{{"PK":{{"S":"K#{i}"}},"kind":{{"S":"{kind}"}}}}}}"#) + "\n";
    // Two gzip members in one file, as `cat a.gz b.gz` makes.
    let mut data = gzip((line(1, "Cat") + &line(2, "Dog")).as_bytes());
    data.extend(gzip((line(3, "Cat") + "\n").as_bytes()));
    let export = write_export(tmp.path(), &[data, gzip(b"")], &[3, 0]);
    // `.checksum` instead of `.md5` side files, as the AWS documentation names them.
    for m in ["manifest-files", "manifest-summary"] {
        std::fs::rename(export.join(format!("{m}.md5")), export.join(format!("{m}.checksum"))).unwrap();
    }
    let out = tmp.path().join("out");
    unwind(&[&export], &out, &["--type-attribute", "kind", "--strict"], 0);
    assert_eq!(count_rows(&out.join("cat")), 2);
    assert_eq!(count_rows(&out.join("dog")), 1);
    let report = run_report(&out);
    assert_eq!(report["exports"][0]["files_checksum"]["file"], "manifest-files.checksum");
    assert_eq!(report["exports"][0]["summary_checksum"]["status"], "verified");
    assert_eq!(report["options"]["type_attribute"], "kind");
    // With the default `Type`, the same items have no type attribute: `_untyped`, counted.
    let out2 = tmp.path().join("out2");
    unwind(&[&export], &out2, &[], 0);
    assert_eq!(count_rows(&out2.join("_untyped")), 3);
    assert_eq!(run_report(&out2)["reconciliation"]["untyped_items"], 3);
}

/// `etl unwind`, `etl mapping check` and `etl mapping infer` read through one framer: the lines
/// unwind rejects before any mapping applies (bad JSON, over-long lines, a truncated gzip) are
/// exactly the lines check counts as not valid items, and infer reads the same files to the end.
#[test]
fn every_command_sees_the_same_frames_and_rejects() {
    let tmp = tempfile::tempdir().unwrap();
    let mut data = Vec::new();
    for (i, (line, _)) in bad_lines().iter().enumerate() {
        data.extend_from_slice(good(i).as_bytes());
        data.push(b'\n');
        data.extend_from_slice(line);
        data.push(b'\n');
    }
    let bad = bad_lines().len() as u64;
    let lines: String = (0..2000).map(|i| good(i) + "\n").collect();
    let full = gzip(lines.as_bytes());
    let truncated = full[..full.len() / 2].to_vec();
    let export = write_export(tmp.path(), &[gzip(&data), truncated], &[2 * bad, 2000]);

    let out = tmp.path().join("out");
    // The truncated file does not reconcile with its manifest entry: published, exit 1.
    unwind(&[&export], &out, &["--max-line-bytes", "1000000"], 1);
    let report = run_report(&out);
    let rejects = report["reconciliation"]["rejects"].as_u64().unwrap();
    // Every bad line and the truncated file's last, unreadable line.
    assert_eq!(rejects, bad + 1, "{}", report["rejects_by_reason"]);

    let mapping = tmp.path().join("m.toml");
    std::fs::write(&mapping, "[entity.User]\ntable = \"users\"\n").unwrap();
    let check =
        etl(["mapping".as_ref(), "check".as_ref(), "--mapping".as_ref(), mapping.as_os_str(), export.as_os_str()]);
    assert_eq!(check.code, 1, "{}\n{}", check.stdout, check.stderr);
    // `mapping check` reads with the default line cap (16 MiB): the 1.5 MB line fits there and
    // is rejected as invalid JSON instead, so the count is the same.
    assert!(check.stdout.contains(&format!("\n{rejects} lines are not valid items:")), "{}", check.stdout);
    assert!(check.stderr.contains("corrupt or truncated"), "{}", check.stderr);
    let users_read = report["inputs"].as_array().unwrap().iter().map(|i| i["items"].as_u64().unwrap()).sum::<u64>();
    assert!(check.stdout.contains(&format!("\n{users_read} items checked")), "{}", check.stdout);

    let infer = etl(["mapping".as_ref(), "infer".as_ref(), export.as_os_str()]);
    assert_eq!(infer.code, 0, "{}", infer.stderr);
    assert!(infer.stdout.contains("[entity.User]"), "{}", infer.stdout);
    assert!(infer.stderr.contains("corrupt or truncated"), "{}", infer.stderr);
}

/// With several files and threads, a `--strict` failure found in one reader thread is what the
/// run reports (exit 1, the file named), never the other readers' cancellation as a bug.
#[test]
fn strict_failures_in_reader_threads_are_policy_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut counts = Vec::new();
    for f in 0..8 {
        let mut text: String = (0..3000).map(|i| good(f * 10_000 + i) + "\n").collect();
        if f == 5 {
            text.push_str("{\"Item\":{\"PK\":{\"S\":\"x\"},\"n\":{\"N\":\"1.2.3\"}}}\n");
        }
        counts.push(if f == 5 { 3001 } else { 3000 });
        files.push(gzip(text.as_bytes()));
    }
    let export = write_export(tmp.path(), &files, &counts);
    for threads in ["2", "4", "8"] {
        let out = tmp.path().join(format!("out{threads}"));
        let run = unwind(&[&export], &out, &["--strict", "--threads", threads], 1);
        assert!(run.stderr.contains("strict mode") && run.stderr.contains("file05"), "{}", run.stderr);
        assert!(!run.stderr.contains("internal error") && !run.stderr.contains("bug in etl"), "{}", run.stderr);
        assert!(!out.exists());
    }
    // The same with a checksum that does not verify, found after a whole file is read.
    let clean: Vec<Vec<u8>> =
        (0..8).map(|f| gzip((0..3000).map(|i| good(f * 10_000 + i) + "\n").collect::<String>().as_bytes())).collect();
    let export = write_export(&tmp.path().join("md5"), &clean, &[3000; 8]);
    let mf = export.join("manifest-files.json");
    let text = std::fs::read_to_string(&mf).unwrap().replace(&md5_b64(&clean[3]), "AAAAAAAAAAAAAAAAAAAAAA==");
    std::fs::write(&mf, &text).unwrap();
    std::fs::write(export.join("manifest-files.md5"), md5_b64(text.as_bytes())).unwrap();
    let run = unwind(&[&export], &tmp.path().join("o"), &["--strict", "--threads", "4"], 1);
    assert!(run.stderr.contains("strict mode") && run.stderr.contains("file03"), "{}", run.stderr);
    assert!(!run.stderr.contains("internal error"), "{}", run.stderr);
}

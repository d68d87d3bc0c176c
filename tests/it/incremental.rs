//! The generator's incremental exports (`etl sample --incrementals`) applied as one chain: the
//! result must be the generator's own final state (`final/`, a full export written from its
//! model of the table, never from etl's reading of the exports). Checked three ways: the oracle
//! `tests/interop/unmapped.py` computes every table, type and cell from `final/`'s data files with
//! no etl code and compares them with what pyarrow and DuckDB read from the chain's output (the
//! independent check); the chain's output equals etl's unwind of `final/` row by row (same code on
//! both sides, so it checks the chain against the full-export path only); and the run report's
//! counts equal the generator's `changes.json`. Also: both views, gaps refused and allowed,
//! overlaps applied but warned about (they are not harmless: an item written inside an overlap
//! and deleted later in the later window is kept by the chain; the generator never writes that
//! case, so its chains with overlaps still give the final state), inserts deleted inside a window
//! absent, Ion and JSON chains byte-identical, and `amazon.ion` reading an Ion incremental data
//! file as the JSON one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use etl::decode::{self, Change, Format, Record};
use serde_json::Value as Json;

use crate::common::*;
use crate::interop::python;
use crate::unmapped::oracle;

/// `etl sample --out DIR --users 60 --files 3 --seed SEED --incrementals N EXTRA…`; insists on
/// success and returns `changes.json`.
fn sample(dir: &Path, seed: &str, incrementals: &str, extra: &[&str]) -> Json {
    let mut args = vec!["sample", "--out", dir.to_str().unwrap(), "--users", "60", "--files", "3", "--seed", seed];
    args.extend(["--incrementals", incrementals]);
    args.extend(extra);
    let r = etl(&args);
    assert_eq!(r.code, 0, "etl {args:?}\n{}", r.stderr);
    serde_json::from_slice(&std::fs::read(dir.join("final/changes.json")).unwrap()).unwrap()
}

fn final_export(changes: &Json) -> PathBuf {
    PathBuf::from(changes["final_export"].as_str().unwrap())
}

/// The bytes of an output's Parquet files and `_etl/schema/` contracts, by path.
fn published(out: &Path) -> BTreeMap<String, Vec<u8>> {
    files_under(out)
        .into_iter()
        .map(|p| (p.strip_prefix(out).unwrap().to_string_lossy().into_owned(), p))
        .filter(|(rel, _)| rel.ends_with(".parquet") || rel.starts_with("_etl/schema"))
        .map(|(rel, p)| (rel, std::fs::read(p).unwrap()))
        .collect()
}

/// The data files of an export folder, from its `manifest-files.json`.
fn data_files(export: &Path) -> Vec<PathBuf> {
    let root = export.parent().unwrap().parent().unwrap();
    std::fs::read_to_string(export.join("manifest-files.json"))
        .unwrap()
        .lines()
        .map(|l| root.join(serde_json::from_str::<Json>(l).unwrap()["dataFileS3Key"].as_str().unwrap()))
        .collect()
}

/// Decodes every line of DynamoDB JSON text as a change record.
fn change_records(text: &str) -> Vec<Change<'_>> {
    text.lines()
        .map(|l| match decode::decode(Format::ExportJson, l.as_bytes()) {
            Ok(Record::Change(c)) => c,
            other => panic!("not a change record: {other:?}\n{l}"),
        })
        .collect()
}

/// The chain report's counts summed over tables.
fn totals(chain: &Json) -> BTreeMap<&'static str, u64> {
    let mut t = BTreeMap::new();
    for k in ["inserts", "updates", "deletes", "moved_in", "moved_out"] {
        let sum = chain["tables"].as_object().unwrap().values().map(|x| x[k].as_u64().unwrap()).sum();
        t.insert(k, sum);
    }
    t
}

/// The chain unwound in one run is the generator's final state, for one view.
fn chain_equals_final_state(view: &str, seed: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let changes = sample(
        &dir,
        seed,
        "3",
        &["--change-percent", "20", "--view", view, "--overlap", "300", "--format", "dynamodb-json"],
    );
    let windows = changes["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 3);
    let expected_view = if view == "new-image" { "NEW_IMAGE" } else { "NEW_AND_OLD_IMAGES" };

    // The layout: each incremental export's manifests in its folder, its data files in the shared
    // `AWSDynamoDB/data/`, counts and MD5s right (etl checks them: the run reconciles).
    for w in windows {
        let export = PathBuf::from(w["export_dir"].as_str().unwrap());
        let summary: Json =
            serde_json::from_slice(&std::fs::read(export.join("manifest-summary.json")).unwrap()).unwrap();
        assert_eq!(summary["exportType"], "INCREMENTAL_EXPORT");
        assert_eq!(summary["outputView"], expected_view);
        assert_eq!(summary["exportFromTime"], w["from_time"]);
        assert_eq!(summary["itemCount"], w["records"]);
        assert!(summary.get("exportTime").is_none(), "{summary}");
        assert!(!export.join("data").exists());
        let files = data_files(&export);
        assert!(files.iter().all(|f| f.parent().unwrap() == dir.join("AWSDynamoDB/data")), "{files:?}");
        // The view: `OldImage` only with both images; a delete without images has only `Keys`.
        let lines: Vec<Json> = files
            .iter()
            .flat_map(|f| gunzip(f).lines().map(|l| serde_json::from_str(l).unwrap()).collect::<Vec<Json>>())
            .collect();
        assert_eq!(lines.len() as u64, w["records"].as_u64().unwrap());
        let olds = lines.iter().filter(|l| l.get("OldImage").is_some()).count();
        let deletes = lines.iter().filter(|l| l.get("NewImage").is_none()).count();
        assert!(deletes > 0, "window {w} has no delete");
        if view == "new-image" {
            assert_eq!(olds, 0);
            let key_only = lines.iter().filter(|l| l.as_object().unwrap().len() == 2).count();
            assert_eq!(key_only, deletes);
        } else {
            assert!(olds >= deletes, "{olds} old images, {deletes} deletes");
        }
        // Inserted and deleted inside a window: in no export.
        for key in changes["absent_keys"].as_array().unwrap() {
            assert!(!lines.iter().any(|l| l["Keys"]["PK"]["S"] == *key), "{key} is in {}", export.display());
        }
    }
    let net = &changes["net"];
    assert!(net["moved"].as_u64().unwrap() > 0, "{net}");
    assert!(!changes["absent_keys"].as_array().unwrap().is_empty());

    let out = tmp.path().join("out");
    unwind(&[&dir], &out, &[], 0);
    let report = run_report(&out);
    assert_eq!(report["reconciliation"]["balanced"], true, "{}", report["reconciliation"]);
    assert_eq!(report["reconciliation"]["integrity"]["verdict"], "reconciled");
    let chain = &report["chain"];
    assert_eq!(chain["windows"].as_array().unwrap().len(), 3);
    assert_eq!(chain["change_records"], net["change_records"]);
    assert_eq!(chain["changed_keys"], net["changed_keys"]);
    let t = totals(chain);
    assert_eq!(t["inserts"], net["inserts"].as_u64().unwrap());
    assert_eq!(t["updates"], net["updates"].as_u64().unwrap());
    assert_eq!(t["deletes"], net["deletes"].as_u64().unwrap());
    assert_eq!(t["moved_out"], net["moved"].as_u64().unwrap());
    assert_eq!(t["moved_in"], net["moved"].as_u64().unwrap());
    assert_eq!(chain["created_and_deleted"], net["created_and_deleted"]);
    assert_eq!(chain["unmatched_deletes"], net["unmatched_deletes"]);
    assert!(chain["gaps"].as_array().unwrap().is_empty());

    // Against etl's own unwind of the final state (the same code on both sides).
    let final_dir = final_export(&changes);
    let ref_out = tmp.path().join("ref");
    unwind(&[&final_dir], &ref_out, &[], 0);
    let got = table_rows(&out);
    assert_eq!(got, table_rows(&ref_out));
    let rows: usize = got.values().map(Vec::len).sum();
    assert_eq!(rows as u64, changes["final_items"].as_u64().unwrap());
    assert!(got.keys().any(|t| t.starts_with("archived_")), "{:?}", got.keys());
    for key in changes["absent_keys"].as_array().unwrap() {
        let needle = format!("\"PK\":{key}");
        assert!(got["user"].iter().all(|r| !r.contains(&needle)), "{key} is in the output");
    }

    // The independent check: the oracle's tables from `final/`'s data files, through pyarrow and
    // DuckDB, types and cells.
    let Some(py) = python() else { return };
    let r = &oracle(&py, &[(&out, &final_dir)], &["--by-key", "PK,SK"])[0];
    assert_eq!(r["items"], changes["final_items"]);
    let cells: u64 = r["tables"].as_object().unwrap().values().map(|t| t["cells"].as_u64().unwrap()).sum();
    assert!(cells > 10_000, "{r}");
}

#[test]
fn a_generated_chain_with_both_images_unwinds_to_the_final_state() {
    chain_equals_final_state("new-and-old-images", "7");
}

#[test]
fn a_generated_chain_with_new_images_unwinds_to_the_final_state() {
    chain_equals_final_state("new-image", "8");
}

#[test]
fn a_gap_is_refused_and_allowed_on_request() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let changes = sample(&dir, "9", "2", &["--gap", "300", "--view", "new-image"]);
    let w = changes["windows"].as_array().unwrap();
    let out = tmp.path().join("out");
    let run = unwind(&[&dir], &out, &[], 1);
    let first = w[0]["export_id"].as_str().unwrap();
    let last = w[1]["export_id"].as_str().unwrap();
    for needle in ["gap in the chain", first, last, "(300.000 s later)", "--allow-gap"] {
        assert!(run.stderr.contains(needle), "{needle}: {}", run.stderr);
    }
    assert!(!out.exists());
    // Nothing was written during the gap, so with it allowed the chain is still the final state.
    unwind(&[&dir], &out, &["--allow-gap"], 0);
    assert_eq!(run_report(&out)["chain"]["gaps"][0]["seconds"], 300.0);
    let ref_out = tmp.path().join("ref");
    unwind(&[&final_export(&changes)], &ref_out, &[], 0);
    assert_eq!(table_rows(&out), table_rows(&ref_out));
}

/// Overlapping windows are applied, and each overlap is warned about on stderr and in the run
/// report's `warnings`, naming both exports and its length as the manifests' times give it.
#[test]
fn overlapping_windows_are_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let changes = sample(&dir, "12", "3", &["--overlap", "120"]);
    let summary = |id: &str| -> Json {
        serde_json::from_slice(&std::fs::read(dir.join("AWSDynamoDB").join(id).join("manifest-summary.json")).unwrap())
            .unwrap()
    };
    let time = |v: &Json| chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap();
    let (full, incs) = crate::apply_s3::chain_ids(&dir);
    let mut covered = (time(&summary(&full)["exportTime"]), full.clone());
    let mut want = Vec::new();
    for id in &incs {
        let s = summary(id);
        let (from, to) = (time(&s["exportFromTime"]), time(&s["exportToTime"]));
        if from < covered.0 {
            let seconds = (covered.0 - from).num_microseconds().unwrap() as f64 / 1e6;
            let starts = s["exportFromTime"].as_str().unwrap();
            want.push(format!(
                "`{id}` starts at {starts}, {seconds:.3} s before the end of what `{}` covers",
                covered.1
            ));
        }
        if to > covered.0 {
            covered = (to, id.clone());
        }
    }
    assert!(want.len() >= 2, "three windows overlapping by 120 s: {want:?}");
    assert!(want.iter().filter(|w| w.contains(" 120.000 s ")).count() >= 2, "{want:?}");
    let out = tmp.path().join("out");
    let run = unwind(&[&dir], &out, &[], 0);
    let warnings: Vec<String> = run_report(&out)["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .filter(|w| w.contains("overlapping windows"))
        .collect();
    assert_eq!(warnings.len(), want.len(), "{warnings:#?}");
    for w in &want {
        assert!(run.stderr.contains(w.as_str()), "{w}: {}", run.stderr);
        assert!(warnings.iter().any(|x| x.contains(w.as_str()) && x.contains("the chain keeps an item")), "{w}");
    }
    // The generator writes no item that an overlap would keep: the chain is still the final state.
    let ref_out = tmp.path().join("ref");
    unwind(&[&final_export(&changes)], &ref_out, &[], 0);
    assert_eq!(table_rows(&out), table_rows(&ref_out));
}

#[test]
fn the_same_chain_in_ion_is_byte_identical_to_json() {
    let tmp = tempfile::tempdir().unwrap();
    let (json_dir, ion_dir) = (tmp.path().join("json"), tmp.path().join("ion"));
    let a = sample(&json_dir, "11", "2", &["--change-percent", "25", "--overlap", "60"]);
    let b = sample(&ion_dir, "11", "2", &["--change-percent", "25", "--overlap", "60", "--format", "ion"]);
    assert_eq!(a["net"], b["net"]);
    let ion_files = files_under(&ion_dir.join("AWSDynamoDB/data"));
    assert!(!ion_files.is_empty() && ion_files.iter().all(|p| p.to_string_lossy().ends_with(".ion.gz")));

    let (out_json, out_ion) = (tmp.path().join("out-json"), tmp.path().join("out-ion"));
    unwind(&[&json_dir], &out_json, &[], 0);
    unwind(&[&ion_dir], &out_ion, &[], 0);
    let (pj, pi) = (published(&out_json), published(&out_ion));
    assert!(pj.keys().any(|k| k.starts_with("_etl/schema/")), "{:?}", pj.keys());
    assert_eq!(pj.keys().collect::<Vec<_>>(), pi.keys().collect::<Vec<_>>());
    for (k, v) in &pj {
        assert!(pi[k] == *v, "`{k}` differs between the JSON and the Ion chain");
    }
    assert_eq!(run_report(&out_ion)["chain"]["change_records"], a["net"]["change_records"]);

    // `amazon.ion` reads an Ion incremental data file as the same change records as the JSON
    // file of the same seed.
    let Some(py) = python() else { return };
    let window = |c: &Json| PathBuf::from(c["windows"][1]["export_dir"].as_str().unwrap());
    let pick = |export: &Path| data_files(export).into_iter().max_by_key(|f| std::fs::metadata(f).unwrap().len());
    let ion_file = pick(&window(&b)).unwrap();
    let json_file = pick(&window(&a)).unwrap();
    let script = root().join("tests/interop/ion_xcheck.py");
    let r = std::process::Command::new(&py).arg(&script).arg("read").arg(&ion_file).output().unwrap();
    assert!(r.status.success(), "ion_xcheck.py read: {}", String::from_utf8_lossy(&r.stderr));
    let theirs = String::from_utf8(r.stdout).unwrap();
    let ours = gunzip(&json_file);
    let ours = change_records(&ours);
    assert!(ours.len() > 5, "{}", ours.len());
    assert_eq!(change_records(&theirs), ours);
}

#[test]
fn the_generator_is_deterministic_and_refuses_bad_options() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    sample(&a, "5", "2", &["--view", "new-image"]);
    sample(&b, "5", "2", &["--view", "new-image"]);
    let rel = |d: &Path| -> BTreeMap<String, Vec<u8>> {
        files_under(d)
            .into_iter()
            .map(|p| (p.strip_prefix(d).unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
            .filter(|(k, _)| !k.ends_with("changes.json"))
            .collect()
    };
    assert_eq!(rel(&a), rel(&b));
    for (flag, value, needle) in
        [("--overlap", "900", "not shorter than the shortest window"), ("--change-percent", "120", "between 0 and 100")]
    {
        let c = tmp.path().join(flag);
        let r = etl(["sample", "--out", c.to_str().unwrap(), "--users", "20", "--incrementals", "1", flag, value]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains(needle), "{}", r.stderr);
    }
    let r = etl(["sample", "--out", tmp.path().join("c").to_str().unwrap(), "--view", "new-image"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--incrementals"), "{}", r.stderr);
}

/// An output whose `_etl/state.json` says it holds `table` up to `held_until` (what a full export
/// unwound at that time records).
fn output_holding(dir: &Path, table_arn: &str, held_until: chrono::DateTime<chrono::Utc>) {
    let time = held_until.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let state = serde_json::json!({
        "version": 1, "table_arn": table_arn, "key_attributes": ["PK", "SK"], "mapping_hash": null,
        "applied": [{ "export_id": "01780310754114-ef51d439", "incremental": false, "export_time": time,
                      "item_count": 3245, "manifest_md5": "x" }]
    });
    std::fs::create_dir_all(dir.join("_etl")).unwrap();
    std::fs::write(dir.join("_etl/state.json"), state.to_string()).unwrap();
}

/// `etl export start --incremental --since DIR` against moto: the window starts where DIR's
/// state ends, is cut at 24 hours, and is refused under 15 minutes; `--since` may be `s3://`.
/// moto 5.2.5 accepts `ExportType=INCREMENTAL_EXPORT`, ignores `IncrementalExportSpecification`
/// and writes a full dump without manifests, so what reaches it is checked by the export's type.
#[test]
fn export_start_incremental_since_an_output() {
    use crate::aws::{etl_aws, moto, py, s, shop_table, unique};
    let Some(m) = moto() else { return };
    let table = shop_table(m);
    let arn = format!("arn:aws:dynamodb:us-east-1:123456789012:table/{table}");
    let bucket = unique("inc");
    py(m, "s3.py", &["mb", &bucket]);
    let tmp = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now();
    let start = |since: &str, view: &str, code: i32| {
        let args = [
            "export",
            "start",
            "--table",
            table,
            "--bucket",
            &bucket,
            "--prefix",
            "inc",
            "--incremental",
            "--since",
            since,
            "--view",
            view,
            "--wait",
            "--poll-interval",
            "1s",
        ];
        etl_aws(m, &args, code)
    };

    // An hour ago: the window is that hour (whole seconds), and the export is incremental.
    let out = tmp.path().join("hour");
    let held = now - chrono::Duration::hours(1);
    output_holding(&out, &arn, held);
    let r = start(s(&out), "new-image", 0);
    let from = held.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    assert!(r.stderr.contains("started incremental export"), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("({from} to ")), "{}", r.stderr);
    assert!(r.stderr.contains("NEW_IMAGE"), "{}", r.stderr);
    assert!(r.stdout.trim().starts_with(&format!("s3://{bucket}/inc")), "{}", r.stdout);
    // The table is shared with tests running at the same time: count this test's bucket only.
    let exports_here = || -> Vec<Json> {
        let listed = py(m, "list_exports.py", &[table, "--bucket", &bucket]);
        serde_json::from_str::<Json>(&listed).unwrap().as_array().unwrap().clone()
    };
    let exports = exports_here();
    assert_eq!(exports.len(), 1, "{exports:?}");
    assert_eq!(exports[0]["ExportType"], "INCREMENTAL_EXPORT", "{exports:?}");

    // An output etl made from a full export alone (no chain, so no `_etl/state.json`): the
    // window starts at the export's `exportTime`, read from the committed `_etl/run.json`, which
    // wins over a `state.json` that is ahead of it (a run killed between the two).
    let made = tmp.path().join("made");
    let export = crate::common::write_export(&made.join("src"), &[crate::common::gzip(b"")], &[0]);
    let held = now - chrono::Duration::hours(2);
    let from = held.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let summary = std::fs::read_to_string(export.join("manifest-summary.json")).unwrap();
    let mut summary: Json = serde_json::from_str(&summary).unwrap();
    summary["tableArn"] = Json::String(arn.clone());
    summary["exportTime"] = Json::String(from.clone());
    let summary = summary.to_string();
    std::fs::write(export.join("manifest-summary.json"), &summary).unwrap();
    std::fs::write(export.join("manifest-summary.md5"), crate::common::md5_b64(summary.as_bytes())).unwrap();
    let out = made.join("out");
    crate::common::unwind(&[&export], &out, &[], 0);
    assert!(!out.join("_etl/state.json").exists());
    let ahead = tmp.path().join("ahead");
    output_holding(&ahead, &arn, now - chrono::Duration::minutes(1));
    std::fs::copy(ahead.join("_etl/state.json"), out.join("_etl/state.json")).unwrap();
    let r = start(s(&out), "new-image", 0);
    assert!(r.stderr.contains(&format!("({from} to ")), "{}", r.stderr);

    // Three days ago: cut at 24 hours. The same state read from `s3://`.
    let out = tmp.path().join("days");
    let held = now - chrono::Duration::days(3);
    output_holding(&out, &arn, held);
    py(m, "upload.py", &[s(&out), &bucket, "outputs/days"]);
    let r = start(&format!("s3://{bucket}/outputs/days"), "new-and-old-images", 0);
    let to = (held + chrono::Duration::hours(24)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    assert!(r.stderr.contains(&format!(" to {to}, NEW_AND_OLD_IMAGES)")), "{}", r.stderr);

    // Five minutes ago: too soon, nothing started, exit 1, and when to come back.
    let before = exports_here().len();
    let out = tmp.path().join("soon");
    output_holding(&out, &arn, now - chrono::Duration::minutes(5));
    let r = start(s(&out), "new-image", 1);
    assert!(r.stderr.contains("at least 15 minutes"), "{}", r.stderr);
    assert!(r.stderr.contains("hint: run again at or after"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert_eq!(exports_here().len(), before, "an export was started although the window was too short");

    // Another table's output, and a folder without state: exit 2 with a hint.
    let out = tmp.path().join("other");
    output_holding(&out, "arn:aws:dynamodb:us-east-1:123456789012:table/other", now - chrono::Duration::hours(2));
    let r = start(s(&out), "new-image", 2);
    assert!(r.stderr.contains("holds table `arn:aws:dynamodb:us-east-1:123456789012:table/other`"), "{}", r.stderr);
    let r = start(s(tmp.path()), "new-image", 2);
    assert!(r.stderr.contains("has no `_etl/state.json`"), "{}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
}

/// A chain uploaded to S3 (moto) as AWS writes it (`--as-export`: the manifests' keys from the
/// bucket root, the incremental exports' data files in the shared `AWSDynamoDB/data/`), read from
/// `s3://` in DynamoDB JSON and in Ion: the same tables, byte for byte, as its local copy.
#[test]
fn a_chain_in_s3_unwinds_like_its_local_copy_in_json_and_ion() {
    use crate::aws::{etl_aws, moto, py, s, unique};
    let Some(m) = moto() else { return };
    for format in ["dynamodb-json", "ion"] {
        let tmp = tempfile::tempdir().unwrap();
        let local = tmp.path().join("chain");
        let fin = tmp.path().join("final");
        let mut args = vec!["sample", "--out", s(&local), "--final", s(&fin), "--format", format];
        args.extend("--users 60 --files 3 --seed 5 --incrementals 2 --change-percent 20".split(' '));
        let r = etl(&args);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let changes: Json = serde_json::from_slice(&std::fs::read(fin.join("changes.json")).unwrap()).unwrap();
        assert!(changes["net"]["change_records"].as_u64().unwrap() > 10, "{}", changes["net"]);
        let bucket = unique("chain");
        py(m, "upload.py", &[s(&local), &bucket, "exports/shop", "--as-export"]);
        let (a, b) = (tmp.path().join("out-local"), tmp.path().join("out-s3"));
        unwind(&[&local], &a, &[], 0);
        etl_aws(m, &["unwind", &format!("s3://{bucket}/exports/shop/"), "--out", s(&b)], 0);
        let (pa, pb) = (published(&a), published(&b));
        assert!(pa.keys().any(|k| k.ends_with(".parquet")), "{format}: {:?}", pa.keys());
        assert_eq!(pa.keys().collect::<Vec<_>>(), pb.keys().collect::<Vec<_>>(), "{format}");
        for (k, v) in &pa {
            assert!(pb[k] == *v, "{format}: `{k}` differs between the local and the S3 chain");
        }
        let (ra, rb) = (run_report(&a), run_report(&b));
        assert_eq!(ra["chain"]["change_records"], rb["chain"]["change_records"], "{format}");
        assert_eq!(rb["chain"]["windows"].as_array().map(Vec::len), Some(2), "{format}: {}", rb["chain"]);
        assert_eq!(rb["reconciliation"]["matches_manifest"], true, "{format}: {}", rb["reconciliation"]);
    }
}

//! Incremental exports applied onto an `s3://` output (moto), one at a time: the full export
//! unwound into `--out s3://…` keeps it under `_etl/base/` byte for byte; each incremental export
//! (from `s3://`, or a local copy) applied onto it gives the same tables, byte for byte and as
//! `etl sql --data s3://…` reads them, as the whole chain unwound locally in one run. A re-apply is
//! a no-op, an older export is refused, and of two applies that both start from one output, the
//! one that commits second fails (exit 1) and changes nothing readers see.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::aws::{Moto, etl_aws, moto, paused_unwind, py, s, s3_get, s3_keys, s3_report, unique};
use crate::common::*;

/// The exports of a generated chain in `dir`: the full export's id, then the incremental ones' in
/// window order.
pub(crate) fn chain_ids(dir: &Path) -> (String, Vec<String>) {
    let mut full = None;
    let mut incs = Vec::new();
    for e in std::fs::read_dir(dir.join("AWSDynamoDB")).unwrap() {
        let p = e.unwrap().path();
        let Ok(text) = std::fs::read(p.join("manifest-summary.json")) else { continue };
        let summary: Json = serde_json::from_slice(&text).unwrap();
        let id = p.file_name().unwrap().to_string_lossy().into_owned();
        match summary["exportType"].as_str() {
            Some("INCREMENTAL_EXPORT") => incs.push((summary["exportFromTime"].to_string(), id)),
            _ => full = Some(id),
        }
    }
    incs.sort();
    (full.expect("a full export"), incs.into_iter().map(|(_, id)| id).collect())
}

/// The bytes of every table file `report` lists, per table, in order (object-store outputs name
/// files by run, local ones do not: the table and the order are what compare).
pub(crate) fn s3_table_bytes(m: &Moto, bucket: &str, prefix: &str, report: &Json) -> BTreeMap<String, Vec<Vec<u8>>> {
    report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let files = t["files"].as_array().unwrap();
            let bytes = files.iter().map(|f| s3_get(m, bucket, &format!("{prefix}{}", f["path"].as_str().unwrap())));
            (t["name"].as_str().unwrap().to_owned(), bytes.collect())
        })
        .collect()
}

pub(crate) fn local_table_bytes(out: &Path) -> BTreeMap<String, Vec<Vec<u8>>> {
    let report = run_report(out);
    report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let files = t["files"].as_array().unwrap();
            let bytes = files.iter().map(|f| std::fs::read(out.join(f["path"].as_str().unwrap())).unwrap());
            (t["name"].as_str().unwrap().to_owned(), bytes.collect())
        })
        .collect()
}

/// Every row of every table as `etl sql --data DATA` prints it (one JSON object a line), sorted.
pub(crate) fn sql_rows(m: &Moto, data: &str, tables: &[String]) -> BTreeMap<String, Vec<String>> {
    sql_rows_with(m, data, tables, &[])
}

/// [`sql_rows`] with more `etl sql` arguments (`--as-of`).
pub(crate) fn sql_rows_with(m: &Moto, data: &str, tables: &[String], extra: &[&str]) -> BTreeMap<String, Vec<String>> {
    tables
        .iter()
        .map(|t| {
            let query = format!("SELECT * FROM \"{t}\"");
            let mut args = vec!["sql", "--data", data, "--format", "ndjson"];
            args.extend_from_slice(extra);
            args.push(&query);
            let r = etl_aws(m, &args, 0);
            let mut rows: Vec<String> = r.stdout.lines().map(str::to_owned).collect();
            rows.sort();
            (t.clone(), rows)
        })
        .collect()
}

/// `etl sample --incrementals 2` uploaded to moto as AWS writes it: the local chain, its bucket,
/// the exports' ids, and the whole chain unwound locally in one run (the reference).
pub(crate) struct Case {
    pub(crate) _tmp: tempfile::TempDir,
    pub(crate) local: PathBuf,
    pub(crate) bucket: String,
    pub(crate) full: String,
    pub(crate) incs: Vec<String>,
    pub(crate) reference: PathBuf,
}

impl Case {
    pub(crate) fn new(m: &Moto, tag: &str) -> Case {
        let tmp = tempfile::tempdir().unwrap();
        let local = tmp.path().join("chain");
        let args = ["sample", "--out", s(&local), "--no-final", "--users", "60", "--files", "3", "--seed", "7"];
        let r = etl(args.iter().chain(&["--incrementals", "2", "--change-percent", "20"]));
        assert_eq!(r.code, 0, "{}", r.stderr);
        let (full, incs) = chain_ids(&local);
        assert_eq!(incs.len(), 2);
        let bucket = unique(tag);
        py(m, "upload.py", &[s(&local), &bucket, "exports/shop", "--as-export"]);
        let reference = tmp.path().join("one-run");
        unwind(&[&local], &reference, &[], 0);
        Case { _tmp: tmp, local, bucket, full, incs, reference }
    }

    pub(crate) fn export_url(&self, id: &str) -> String {
        format!("s3://{}/exports/shop/AWSDynamoDB/{id}/", self.bucket)
    }

    pub(crate) fn out_url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }
}

#[test]
fn incremental_exports_applied_onto_an_s3_output_one_at_a_time() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "apply");
    let out = c.out_url("out/");

    // The full export: its files kept under `_etl/base/`, byte for byte as the source has them.
    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out], 0);
    let source = s3_keys(m, &c.bucket, &format!("exports/shop/AWSDynamoDB/{}/", c.full));
    assert!(source.iter().any(|k| k.contains("/data/")), "{source:?}");
    for k in &source {
        let kept = k.replacen("exports/shop/", "out/_etl/base/", 1);
        assert!(s3_get(m, &c.bucket, &kept) == s3_get(m, &c.bucket, k), "`{kept}` is not `{k}` byte for byte");
    }

    // Incremental export 1 from `s3://`, then 2 from its local copy.
    etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &out], 0);
    let inc2 = c.local.join("AWSDynamoDB").join(&c.incs[1]);
    etl_aws(m, &["unwind", s(&inc2), "--out", &out], 0);
    let report = s3_report(m, &c.bucket, "out/");
    assert_eq!(report["chain"]["previous_export"], c.incs[0].as_str(), "{}", report["chain"]);
    let applied: Vec<&str> =
        report["state"]["applied"].as_array().unwrap().iter().map(|a| a["export_id"].as_str().unwrap()).collect();
    assert_eq!(applied, [c.full.as_str(), c.incs[0].as_str(), c.incs[1].as_str()]);
    let state: Json = serde_json::from_slice(&s3_get(m, &c.bucket, "out/_etl/state.json")).unwrap();
    assert_eq!(state, report["state"], "`_etl/state.json` is the committed state's copy");

    // The same tables as the whole chain in one local run: byte for byte, and as `etl sql` reads them.
    assert_eq!(s3_table_bytes(m, &c.bucket, "out/", &report), local_table_bytes(&c.reference));
    let tables: Vec<String> = local_table_bytes(&c.reference).into_keys().collect();
    assert!(tables.len() > 2, "{tables:?}");
    let want = sql_rows(m, s(&c.reference), &tables);
    assert!(want.values().any(|rows| rows.len() > 10), "{want:?}");
    assert_eq!(sql_rows(m, &out, &tables), want);

    // Again: a no-op that rewrites nothing; an export older than the last one applied: refused.
    let keys = s3_keys(m, &c.bucket, "out/");
    let head = s3_get(m, &c.bucket, "out/_etl/run.json");
    let r = etl_aws(m, &["unwind", s(&inc2), "--out", &out], 0);
    assert!(r.stderr.contains("nothing to apply"), "{}", r.stderr);
    let r = etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &out], 1);
    assert!(r.stderr.contains("would undo newer changes"), "{}", r.stderr);
    assert_eq!((s3_keys(m, &c.bucket, "out/"), s3_get(m, &c.bucket, "out/_etl/run.json")), (keys, head));
}

/// An `s3://` output made without `_etl/base/` (by an older etl) is refused with the hint.
#[test]
fn an_s3_output_without_a_base_is_refused() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "nobase");
    let out = c.out_url("out/");
    // An output made from one bare data file: no export to keep.
    let listed =
        std::fs::read_to_string(c.local.join("AWSDynamoDB").join(&c.full).join("manifest-files.json")).unwrap();
    let entry = listed.lines().map(|l| serde_json::from_str::<Json>(l).unwrap()).find(|f| f["itemCount"] != 0).unwrap();
    let data = c.local.join(entry["dataFileS3Key"].as_str().unwrap());
    etl_aws(m, &["unwind", s(&data), "--out", &out], 0);
    let r = etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &out], 2);
    assert!(r.stderr.contains("holds no `_etl/base/`"), "{}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
}

/// Two applies of the same export start from one output; the second to commit loses even though
/// it opened the output before the first committed (its commit is conditional on the head it
/// read then), fails with exit 1, and leaves the winner's output as it was.
#[test]
fn two_applies_onto_one_s3_output_one_commits() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "apply-race");
    let out = c.out_url("race/");
    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out], 0);
    etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", &out], 0);

    let tmp = tempfile::tempdir().unwrap();
    let go = tmp.path().join("go");
    let inc2 = c.export_url(&c.incs[1]);
    let a = paused_unwind(m, &inc2, &out, "s3-opened", &go);
    etl_aws(m, &["unwind", "-q", &inc2, "--out", &out], 0);
    let winner = (s3_keys(m, &c.bucket, "race/"), s3_get(m, &c.bucket, "race/_etl/run.json"));
    std::fs::write(&go, "").unwrap();
    let output = a.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("was published by another run"), "{stderr}");
    assert_eq!((s3_keys(m, &c.bucket, "race/"), s3_get(m, &c.bucket, "race/_etl/run.json")), winner);
    let report = s3_report(m, &c.bucket, "race/");
    assert_eq!(s3_table_bytes(m, &c.bucket, "race/", &report), local_table_bytes(&c.reference));
    // Run again, the loser finds the export applied.
    let r = etl_aws(m, &["unwind", &inc2, "--out", &out], 0);
    assert!(r.stderr.contains("nothing to apply"), "{}", r.stderr);
}

/// Exports in another bucket than the output's are streamed into its `_etl/base/` (no
/// server-side copy across buckets), byte for byte, and applied as from the output's own bucket;
/// the incremental exports are kept compacted into one, and each apply's commit removes the one
/// the run before it kept.
#[test]
fn exports_in_another_bucket_are_kept_and_applied() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "apply-src");
    let other = unique("apply-dst");
    py(m, "s3.py", &["mb", &other]);
    let out = format!("s3://{other}/out/");
    etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", &out], 0);
    for inc in &c.incs {
        etl_aws(m, &["unwind", &c.export_url(inc), "--out", &out], 0);
    }
    // The full export's folder, and its data files wherever its manifest puts them.
    let folder = format!("exports/shop/AWSDynamoDB/{}/", c.full);
    let mut source = s3_keys(m, &c.bucket, &folder);
    let listed = s3_get(m, &c.bucket, &format!("{folder}manifest-files.json"));
    for l in String::from_utf8(listed).unwrap().lines() {
        source.insert(serde_json::from_str::<Json>(l).unwrap()["dataFileS3Key"].as_str().unwrap().to_owned());
    }
    for k in &source {
        let kept = k.replacen("exports/shop/", "out/_etl/base/", 1);
        assert!(s3_get(m, &other, &kept) == s3_get(m, &c.bucket, k), "`{kept}` is not `{k}` byte for byte");
    }
    // The incremental exports are kept compacted into one export etl wrote, which the last
    // commit lists; none of them is kept as it came.
    let report = s3_report(m, &other, "out/");
    let exports: Vec<&str> =
        report["exports"].as_array().unwrap().iter().map(|e| e["export_dir"].as_str().unwrap()).collect();
    assert_eq!(exports.len(), 2, "{exports:?}");
    let compacted = exports[1].rsplit('/').next().unwrap();
    assert!(compacted.starts_with("etl-compacted-"), "{exports:?}");
    assert_eq!(exports[1], format!("_etl/base/AWSDynamoDB/{compacted}"));
    let base = s3_keys(m, &other, "out/_etl/base/");
    assert!(base.contains(&format!("out/_etl/base/AWSDynamoDB/data/{compacted}-0.json.gz")), "{base:?}");
    for inc in &c.incs {
        assert!(!base.iter().any(|k| k.contains(inc.as_str())), "{inc} kept: {base:?}");
    }
    // The first apply's compacted export went with the second apply's commit: one is kept.
    let kept: Vec<&String> = base.iter().filter(|k| k.contains("etl-compacted-")).collect();
    assert_eq!(kept.len(), 5, "{kept:?}");
    assert!(kept.iter().all(|k| k.contains(compacted)), "{kept:?}");
    assert_eq!(report["state"]["applied"].as_array().map(Vec::len), Some(3), "{}", report["state"]);
    assert_eq!(s3_table_bytes(m, &other, "out/", &report), local_table_bytes(&c.reference));
}

/// Exports read from `s3://` into a local `--out` are kept under its `_etl/base/` (downloaded,
/// byte for byte), so the incremental exports, also read from `s3://`, apply onto it one at a
/// time and give the whole chain's tables byte for byte; a Delta output too.
#[test]
fn incremental_exports_from_s3_apply_onto_a_local_output() {
    let Some(m) = moto() else { return };
    let c = Case::new(m, "apply-local");
    let tmp = tempfile::tempdir().unwrap();
    for format in ["parquet", "delta"] {
        let out = tmp.path().join(format);
        etl_aws(m, &["unwind", &c.export_url(&c.full), "--out", s(&out), "--format", format], 0);
        let source = s3_keys(m, &c.bucket, &format!("exports/shop/AWSDynamoDB/{}/", c.full));
        assert!(source.iter().any(|k| k.contains("/data/")), "{source:?}");
        for k in &source {
            let kept = out.join(k.replacen("exports/shop/", "_etl/base/", 1));
            assert!(std::fs::read(&kept).unwrap() == s3_get(m, &c.bucket, k), "`{}` is not `{k}`", kept.display());
        }
        etl_aws(m, &["unwind", &c.export_url(&c.incs[0]), "--out", s(&out), "--format", format], 0);
        etl_aws(m, &["unwind", &c.export_url(&c.incs[1]), "--out", s(&out), "--format", format], 0);
        let report = run_report(&out);
        let applied: Vec<&str> =
            report["state"]["applied"].as_array().unwrap().iter().map(|a| a["export_id"].as_str().unwrap()).collect();
        assert_eq!(applied, [c.full.as_str(), c.incs[0].as_str(), c.incs[1].as_str()], "{format}");
        if format == "parquet" {
            assert_eq!(local_table_bytes(&out), local_table_bytes(&c.reference));
        } else {
            let tables: Vec<String> = local_table_bytes(&c.reference).into_keys().collect();
            assert_eq!(sql_rows(m, s(&out), &tables), sql_rows(m, s(&c.reference), &tables), "{format}");
        }
    }
}

/// The `s3://` output under `out/` of `bucket` downloaded into `into` (emptied first): its
/// committed report, and every table's rows as [`canonical_rows`] reads the files it lists.
/// Every file of a table has the table's one schema.
fn mirror(m: &Moto, bucket: &str, into: &Path) -> (Json, BTreeMap<String, Vec<String>>) {
    let _ = std::fs::remove_dir_all(into);
    py(m, "s3.py", &["download", bucket, "out/", s(&into.join("out"))]);
    let report = run_report(&into.join("out"));
    let mut rows = BTreeMap::new();
    for t in report["tables"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let dir = into.join("rows").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut schemas = BTreeSet::new();
        for f in t["files"].as_array().unwrap() {
            let path = f["path"].as_str().unwrap();
            let to = dir.join(path.rsplit('/').next().unwrap());
            std::fs::copy(into.join("out").join(path), &to).unwrap();
            let file = std::fs::File::open(&to).unwrap();
            let b = datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
            schemas.insert(format!("{:?}", b.schema()));
        }
        assert!(schemas.len() <= 1, "`{name}` has {} schemas", schemas.len());
        rows.insert(name.to_owned(), canonical_rows(&dir));
    }
    (report, rows)
}

/// `--in-place` onto an `s3://` Parquet output: each apply of a generated chain (read from
/// `s3://`) reads no file of the full export, keeps the files that hold no changed key (copied
/// server-side: the same bytes under the run's name) and rewrites the others, and gives what an
/// apply that replays the full export onto a local output gives: the report's chain counts and
/// every table's rows, value by value, `_rejects` included. A re-apply is a no-op.
#[test]
fn incremental_exports_applied_in_place_onto_an_s3_output_give_the_replays_tables() {
    in_place_onto_s3_gives_the_replays_tables(&[]);
}

/// The same with the sample mapping, whose rejects are current images': those of an earlier
/// apply whose keys a later one changes again are read back from S3 and left out, as a replay
/// leaves them out. The rejects are compared by reason and raw line (a current image's reject
/// names the change record its run read the image from: a replay reads those of the exports the
/// output held from its compacted export).
#[test]
fn mapped_applies_in_place_onto_an_s3_output_give_the_replays_tables_and_rejects() {
    let mapping = root().join("mappings/ecommerce.toml");
    in_place_onto_s3_gives_the_replays_tables(&["--mapping", mapping.to_str().unwrap()]);
}

fn in_place_onto_s3_gives_the_replays_tables(options: &[&str]) {
    let Some(m) = moto() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("chain");
    let args = ["sample", "--out", s(&local), "--no-final", "--users", "60", "--files", "8", "--seed", "11"];
    let r = etl(args.iter().chain(&["--incrementals", "3", "--change-percent", "4", "--format", "dynamodb-json"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (full, incs) = chain_ids(&local);
    let bucket = unique("inplace");
    py(m, "upload.py", &[s(&local), &bucket, "exports/shop", "--as-export"]);
    let export = |id: &str| format!("s3://{bucket}/exports/shop/AWSDynamoDB/{id}/");
    let at = |id: &str| local.join("AWSDynamoDB").join(id);
    // One file per input file (`--target-file-bytes 1`), so that some hold no changed key.
    let (out, replayed) = (format!("s3://{bucket}/out/"), tmp.path().join("replayed"));
    let small: Vec<&str> = ["--target-file-bytes", "1"].iter().chain(options).copied().collect();
    let aws = |args: &[&str]| etl_aws(m, &[args, &small[..]].concat(), 0);
    aws(&["unwind", &export(&full), "--out", &out]);
    unwind(&[&at(&full)], &replayed, &small, 0);
    let mirrored = tmp.path().join("mirror");
    mirror(m, &bucket, &mirrored);
    let (mut in_place_steps, mut kept, mut written, mut superseded) = (0, 0, 0, 0);
    for (k, inc) in incs.iter().enumerate() {
        let before: BTreeSet<Vec<u8>> = local_table_bytes(&mirrored.join("out")).into_values().flatten().collect();
        let r = aws(&["unwind", &export(inc), "--out", &out, "--in-place"]);
        unwind(&[&at(inc)], &replayed, &small, 0);
        let (report, mut got) = mirror(m, &bucket, &mirrored);
        let replay = run_report(&replayed);
        if report["chain"]["applied_in_place"] == true {
            in_place_steps += 1;
            let inputs = report["inputs"].as_array().unwrap().iter();
            assert_eq!(
                inputs.filter(|i| i["file"].as_str().unwrap().contains(&full)).count(),
                0,
                "step {k}: the full export is not among the inputs read"
            );
            let now = local_table_bytes(&mirrored.join("out"));
            let same = now.values().flatten().filter(|b| before.contains(*b)).count();
            kept += same;
            written += now.values().map(Vec::len).sum::<usize>() - same;
        } else {
            assert!(r.stderr.contains("not in place"), "step {k}: {}", r.stderr);
        }
        for key in ["tables", "unmatched_deletes", "created_and_deleted", "changed_keys", "change_records", "windows"] {
            assert_eq!(report["chain"][key], replay["chain"][key], "step {k}: `chain.{key}`");
        }
        assert_eq!(report["reconciliation"]["balanced"], true, "step {k}");
        // A replay rejects again the current images earlier applies rejected; in place, a run
        // counts its own rejects (the table holds both: compared below).
        if options.is_empty() {
            assert_eq!(report["reconciliation"]["rejects"], replay["reconciliation"]["rejects"], "step {k}");
        }
        superseded += report["chain"]["superseded_rejects"].as_u64().unwrap_or(0);
        let rejects = |rows: Vec<String>| -> Vec<String> {
            let mut rows: Vec<String> = if options.is_empty() {
                rows
            } else {
                let row = |r: String| serde_json::from_str::<Json>(&r).unwrap();
                rows.into_iter().map(row).map(|r| format!("{} {}", r["reason"], r["raw"])).collect()
            };
            rows.sort();
            rows
        };
        let expected_rejects = rejects(canonical_rows(&replayed.join("_rejects")));
        let got_rejects = rejects(got.remove("_rejects").unwrap_or_default());
        assert_eq!(got_rejects, expected_rejects, "step {k}: `_rejects`");
        got.retain(|_, rows| !rows.is_empty());
        let mut expected = table_rows(&replayed);
        expected.retain(|_, rows| !rows.is_empty());
        assert_eq!(got, expected, "step {k}: every table's rows");
    }
    eprintln!(
        "in place onto s3: {in_place_steps} of {} applies in place, {kept} files kept, {written} written",
        incs.len()
    );
    // Every apply, the one whose changed rows need a column of a larger decimal scale too (the
    // table's files rewritten in it).
    assert_eq!(in_place_steps, incs.len(), "{in_place_steps} of {} applies in place", incs.len());
    assert!(kept > 0 && written > 0, "{kept} files kept, {written} written");
    assert_eq!(superseded > 0, !options.is_empty(), "{superseded} rejects superseded");

    // The last export again (with the options the output was made with): nothing to apply,
    // nothing rewritten.
    let keys = s3_keys(m, &bucket, "out/");
    let r = aws(&["unwind", &export(incs.last().unwrap()), "--out", &out, "--in-place"]);
    assert!(r.stderr.contains("nothing to apply"), "{}", r.stderr);
    assert_eq!(s3_keys(m, &bucket, "out/"), keys);
}

/// An apply that deletes every row of an inferred table takes its contract with it on `s3://`
/// too: the `_etl/schema/` copies are those of the tables the output lists (in a folder the same
/// holds, `chain.rs`), whether the apply replays, rewrites Parquet in place or merges Delta.
#[test]
fn a_table_an_apply_empties_on_s3_leaves_no_contract() {
    let Some(m) = moto() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("bucket");
    let (full_dir, inc) = crate::chain::the_only_order_deleted(&root);
    let bucket = unique("emptied");
    py(m, "upload.py", &[s(&root), &bucket, "exports/t", "--as-export"]);
    let export =
        |dir: &Path| format!("s3://{bucket}/exports/t/AWSDynamoDB/{}/", dir.file_name().unwrap().to_string_lossy());
    for (n, flags) in [&["--format", "parquet"][..], &["--format", "parquet", "--in-place"], &["--format", "delta"]]
        .into_iter()
        .enumerate()
    {
        let prefix = format!("out{n}/");
        let out = format!("s3://{bucket}/{prefix}");
        let args = |export: String| -> Vec<String> {
            ["unwind".to_owned(), export, "--out".to_owned(), out.clone()]
                .into_iter()
                .chain(flags.iter().map(|f| f.to_string()))
                .collect()
        };
        let run = |args: Vec<String>| etl_aws(m, &args.iter().map(String::as_str).collect::<Vec<_>>(), 0);
        let contracts = || s3_keys(m, &bucket, &format!("{prefix}_etl/schema/"));
        run(args(export(&full_dir)));
        let both: BTreeSet<String> =
            ["order", "user"].iter().map(|t| format!("{prefix}_etl/schema/{t}.json")).collect();
        assert_eq!(contracts(), both, "{flags:?}: the full export");
        run(args(export(&inc)));
        let report = s3_report(m, &bucket, &prefix);
        let tables: Vec<&str> =
            report["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(tables, ["_rejects", "user"], "{flags:?}");
        let user = BTreeSet::from([format!("{prefix}_etl/schema/user.json")]);
        assert_eq!(contracts(), user, "{flags:?}: after the apply");
        // And the run's own copies, the ones readers use, are those of the listed tables.
        let run_id = report["run_id"].as_str().unwrap();
        let own = s3_keys(m, &bucket, &format!("{prefix}_etl/runs/{run_id}/schema/"));
        assert_eq!(own, BTreeSet::from([format!("{prefix}_etl/runs/{run_id}/schema/user.json")]), "{flags:?}");
    }
}

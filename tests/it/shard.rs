//! Sharded runs (`--shard I/N`, `etl commit`): the committed output equals one run's, shards
//! agree on types no shard alone would infer, and what is not one complete run is refused.

use std::path::{Path, PathBuf};
use std::process::Command;

use datafusion::arrow::compute::concat_batches;
use serde_json::{Value as Json, json};

use crate::common::{etl, gzip, read_table, run_report, unwind, write_export};

/// An export of 6 files whose shards disagree when alone: `n` is an integer in the first files
/// and a decimal only in the last; `late` first appears in file 3; `Review` items only in the
/// last file; a rejected line in file 2.
fn disagreeing_export(dir: &Path) -> PathBuf {
    let mut files = Vec::new();
    let mut counts = Vec::new();
    for f in 0..6u64 {
        let mut text = String::new();
        let mut n = 0;
        for i in 0..40u64 {
            let id = f * 100 + i;
            let mut item = json!({
                "PK": {"S": format!("USER#{id}")}, "SK": {"S": "PROFILE"}, "Type": {"S": "User"},
                "n": {"N": id.to_string()}, "tags": {"SS": [format!("t{}", id % 3), "all"]},
            });
            if f == 5 && i == 7 {
                item["n"] = json!({"N": "12.75"});
            }
            if f >= 3 && i % 5 == 0 {
                item["late"] = json!({"B": "AAEC"});
            }
            text.push_str(&json!({ "Item": item }).to_string());
            text.push('\n');
            n += 1;
            if f == 5 && i % 10 == 0 {
                let r = json!({"Item": {"PK": {"S": format!("USER#{id}")}, "SK": {"S": format!("REVIEW#{i}")}, "Type": {"S": "Review"}, "stars": {"N": "4"}}});
                text.push_str(&r.to_string());
                text.push('\n');
                n += 1;
            }
        }
        if f == 2 {
            text.push_str("{\"Item\": not json}\n");
            n += 1;
        }
        files.push(gzip(text.as_bytes()));
        counts.push(n);
    }
    write_export(dir, &files, &counts)
}

/// Every table of an output as one batch (part files in order), with its schema and metadata.
fn tables(out: &Path) -> Vec<(String, datafusion::arrow::array::RecordBatch)> {
    let report = run_report(out);
    report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap().to_owned();
            let (schema, batches) = read_table(&out.join(&name));
            (name, concat_batches(&schema, &batches).unwrap())
        })
        .collect()
}

/// The committed output equals one run's: the same tables with the same schemas (field
/// metadata included) and the same rows in the same order, and the same report but for timings,
/// thread counts and file cuts.
fn assert_same_output(sharded: &Path, single: &Path) {
    let (a, b) = (tables(sharded), tables(single));
    assert_eq!(a.len(), b.len());
    for ((na, ba), (nb, bb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        assert_eq!(ba.schema(), bb.schema(), "table `{na}`");
        assert_eq!(ba, bb, "table `{na}`");
    }
    let (ra, rb) = (run_report(sharded), run_report(single));
    for key in ["reconciliation", "inputs", "exports", "rejects_by_reason", "widenings", "mapping", "drift"] {
        assert_eq!(ra[key], rb[key], "run.json `{key}`");
    }
    let rows = |r: &Json| -> Vec<(String, u64)> {
        r["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().into(), t["rows"].as_u64().unwrap()))
            .collect()
    };
    assert_eq!(rows(&ra), rows(&rb));
    for t in std::fs::read_dir(single.join("_etl/schema")).unwrap() {
        let t = t.unwrap().path();
        let name = t.file_name().unwrap();
        assert_eq!(std::fs::read(&t).unwrap(), std::fs::read(sharded.join("_etl/schema").join(name)).unwrap());
    }
    assert!(!sharded.join("_etl/shards").exists(), "the shards are gone with the commit");
}

fn shard(export: &Path, out: &Path, i: u32, n: u32, phase: &str, code: i32) -> crate::common::Run {
    let spec = format!("{i}/{n}");
    unwind(&[export], out, &["--shard", &spec, "--phase", phase], code)
}

#[test]
fn shards_agree_on_types_and_the_commit_equals_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    let export = disagreeing_export(&tmp.path().join("src"));
    let single = tmp.path().join("single");
    unwind(&[&export], &single, &["--threads", "2"], 0);
    let out = tmp.path().join("sharded");
    for i in 0..3 {
        let r = shard(&export, &out, i, 3, "infer", 0);
        assert!(r.stderr.contains(&format!("shard {i}/3: read ")), "{}", r.stderr);
    }
    // The write phase of a shard before the commit: nothing is visible to readers.
    for i in 0..3 {
        shard(&export, &out, i, 3, "write", 0);
    }
    assert!(!out.join("_etl/run.json").exists());
    let r = etl(["sql", "--data", out.to_str().unwrap(), "SELECT 1"]);
    assert_ne!(r.code, 0, "an output is not readable before its commit");

    let r = etl(["commit", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_same_output(&out, &single);
    // Shard 0 alone saw only integers in `n`: the committed table has the agreed decimal.
    let user = tables(&out).into_iter().find(|(n, _)| n == "user").unwrap().1;
    assert_eq!(user.schema().field_with_name("n").unwrap().data_type().to_string(), "Decimal128(38, 2)");
    // Every shard's rows are in a part of its own, in shard order.
    let files =
        run_report(&out)["tables"].as_array().unwrap().iter().find(|t| t["name"] == "user").unwrap()["files"].clone();
    assert_eq!(files.as_array().unwrap().len(), 3, "{files}");
    // A second commit has nothing to commit and changes nothing.
    let before = crate::common::tree(&out);
    let r = etl(["commit", out.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("holds no finished shard"), "{}", r.stderr);
    assert_eq!(crate::common::tree(&out), before);
}

/// The same export sharded again onto the output that holds it: every shard finds that, as a
/// re-run of one process does, reads nothing and says so in a small file; the commit checks
/// again and is a no-op. When the output changes between the shards and the commit, or between
/// shards, the commit refuses and publishes nothing.
#[test]
fn shards_of_a_run_the_output_holds_read_nothing_and_the_commit_is_a_no_op() {
    let tmp = tempfile::tempdir().unwrap();
    let export = disagreeing_export(&tmp.path().join("src"));
    let out = tmp.path().join("sharded");
    shard_and_commit(&[&export], &out, 3, &[]);
    let before = crate::common::tree(&out);
    for phase in ["infer", "write"] {
        for i in 0..3 {
            let r = shard(&export, &out, i, 3, phase, 0);
            assert!(r.stderr.contains("already holds what this run would write; nothing read"), "{}", r.stderr);
            assert!(!r.stderr.contains(&format!("shard {i}/3: read ")), "{}", r.stderr);
        }
    }
    // Only the shards' notes are new, and nothing but them is in the shards' area.
    let shards: Vec<String> = std::fs::read_dir(out.join("_etl/shards"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(shards, ["held-00000-of-00003.json", "held-00001-of-00003.json", "held-00002-of-00003.json"]);
    let r = etl(["commit", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("nothing to apply, nothing rewritten"), "{}", r.stderr);
    assert!(!out.join("_etl/shards").exists(), "the shards' notes are gone");
    assert_eq!(crate::common::tree(&out), before, "nothing was published");
    // One process of the same export: a no-op too. The shards found what it finds.
    let r = unwind(&[&export], &out, &[], 0);
    assert!(r.stderr.contains("nothing to apply, nothing rewritten"), "{}", r.stderr);

    // A Delta output keeps the shards' area while other runs commit into its tables (a folder
    // of Parquet tables is swapped whole, the area with it). The shards find the output holding
    // their run, then it changes (a run with other options that decide the files): the commit
    // refuses, publishes nothing, and says to run them again.
    let delta = tmp.path().join("delta");
    let d = ["--format", "delta"];
    shard_and_commit(&[&export], &delta, 3, &d);
    let layout = run_report(&delta)["options"]["layout"].clone();
    for phase in ["infer", "write"] {
        for i in 0..3 {
            let spec = format!("{i}/3");
            let r = unwind(&[&export], &delta, &["--shard", &spec, "--phase", phase, d[0], d[1]], 0);
            assert!(r.stderr.contains("already holds what this run would write"), "{}", r.stderr);
        }
    }
    unwind(&[&export], &delta, &[d[0], d[1], "--row-group-rows", "1000"], 0);
    let changed = crate::common::tree(&delta);
    let r = etl(["commit", delta.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("no longer holds it") && r.stderr.contains("hint:"), "{}", r.stderr);
    assert_eq!(crate::common::tree(&delta), changed, "nothing was published");
    // Run again, the shards read the export and the commit publishes their run.
    std::fs::remove_dir_all(delta.join("_etl/shards")).unwrap();
    let r = shard_and_commit(&[&export], &delta, 3, &d);
    assert!(!r.stderr.contains("nothing to apply"), "{}", r.stderr);
    assert_eq!(run_report(&delta)["options"]["layout"], layout);

    // Shards 1 and 2 write theirs, the output then comes to hold their run, and shard 0 finds
    // it holding it: one run's shards disagree, and the commit refuses.
    let other = [d[0], d[1], "--row-group-rows", "500"];
    for phase in ["infer", "write"] {
        for i in (0..3).filter(|&i| phase == "infer" || i > 0) {
            let spec = format!("{i}/3");
            let mut args = vec!["--shard", spec.as_str(), "--phase", phase];
            args.extend_from_slice(&other);
            unwind(&[&export], &delta, &args, 0);
        }
    }
    unwind(&[&export], &delta, &other, 0);
    let mut args = vec!["--shard", "0/3", "--phase", "write"];
    args.extend_from_slice(&other);
    let r = unwind(&[&export], &delta, &args, 0);
    assert!(r.stderr.contains("already holds what this run would write"), "{}", r.stderr);
    let held = crate::common::tree(&delta);
    let r = etl(["commit", delta.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("shard 0 found it holding what the run would write"), "{}", r.stderr);
    assert_eq!(crate::common::tree(&delta), held, "nothing was published");
}

#[test]
fn what_is_not_one_complete_run_is_refused_and_nothing_is_published() {
    let tmp = tempfile::tempdir().unwrap();
    let export = disagreeing_export(&tmp.path().join("src"));
    let out = tmp.path().join("out");
    // The write phase needs every shard's shapes.
    shard(&export, &out, 0, 2, "infer", 0);
    let r = shard(&export, &out, 0, 2, "write", 1);
    assert!(r.stderr.contains("shape files of shard 1 of 2 are missing"), "{}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    shard(&export, &out, 1, 2, "infer", 0);
    shard(&export, &out, 0, 2, "write", 0);
    // A missing shard.
    let r = etl(["commit", out.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("shard 1 of 2 is not finished"), "{}", r.stderr);
    assert!(!out.join("_etl/run.json").exists());
    // A crashed attempt (its hidden folder) never counts as a shard.
    std::fs::create_dir_all(out.join("_etl/shards/.attempt-00001-of-00002-1-2/user")).unwrap();
    let r = etl(["commit", out.to_str().unwrap()]);
    assert!(r.stderr.contains("shard 1 of 2 is not finished"), "{}", r.stderr);
    // A shard of another run (another shard count) beside them.
    shard(&export, &out, 0, 1, "infer", 0);
    shard(&export, &out, 0, 1, "write", 0);
    shard(&export, &out, 1, 2, "write", 0);
    let r = etl(["commit", out.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("shards of 2 different runs"), "{}", r.stderr);
    assert!(!out.join("_etl/run.json").exists());
    std::fs::remove_dir_all(out.join("_etl/shards/shard-00000-of-00001")).unwrap();
    // A re-run of a shard replaces its earlier attempt; the commit then publishes.
    shard(&export, &out, 1, 2, "write", 0);
    let r = etl(["commit", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let single = tmp.path().join("single");
    unwind(&[&export], &single, &[], 0);
    assert_same_output(&out, &single);
    // `--shard` of an index beyond the count is a usage error.
    let never = tmp.path().join("never");
    let r = etl(["unwind", export.to_str().unwrap(), "--out", never.to_str().unwrap(), "--shard", "2/2"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    // A write phase before the infer phases is refused before a file is read, and leaves
    // nothing behind.
    let r = etl(["unwind", export.to_str().unwrap(), "--out", never.to_str().unwrap(), "--shard", "0/2"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("--phase infer") && r.stderr.contains("hint:"), "{}", r.stderr);
    assert!(!never.exists(), "a refused shard created `{}`", never.display());
}

/// What the commit would refuse to publish into is refused by the shards, before they read a
/// file: a Delta output for a Parquet run, a Parquet output for a Delta run, a folder of other
/// files (whose hint does not offer `--overwrite`: the commit never replaces anything). Before,
/// every shard ran both phases and only `etl commit` refused. The outputs are left untouched.
#[test]
fn shards_refuse_an_output_their_commit_could_not_publish_into() {
    let tmp = tempfile::tempdir().unwrap();
    let export = disagreeing_export(&tmp.path().join("src"));
    let refused = |out: &Path, extra: &[&str], says: &str| {
        let before = crate::common::tree(out);
        for phase in ["infer", "write"] {
            let mut args = vec!["--shard", "0/2", "--phase", phase];
            args.extend_from_slice(extra);
            let r = unwind(&[&export], out, &args, 2);
            assert!(r.stderr.contains(says) && r.stderr.contains("hint:"), "{}", r.stderr);
            assert!(!r.stderr.contains("shard 0/2: read"), "{}", r.stderr);
            assert!(!out.join("_etl/shards").exists(), "a refused shard wrote into `{}`", out.display());
            assert_eq!(crate::common::tree(out), before);
        }
    };
    let delta = tmp.path().join("delta");
    unwind(&[&export], &delta, &["--format", "delta"], 0);
    refused(&delta, &[], "holds Delta tables (`--format delta`)");
    // `--overwrite` does not reach the commit, so it lets nothing through here.
    refused(&delta, &["--overwrite"], "holds Delta tables (`--format delta`)");
    let parquet = tmp.path().join("parquet");
    unwind(&[&export], &parquet, &[], 0);
    refused(&parquet, &["--format", "delta"], "holds a Parquet etl output");
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "keep").unwrap();
    refused(&other, &[], "holds files that are not an etl output");
    let r = unwind(&[&export], &other, &["--shard", "0/2", "--phase", "infer"], 2);
    assert!(!r.stderr.contains("--overwrite` to replace"), "{}", r.stderr);
    // The same formats shard and commit as before.
    shard_and_commit(&[&export], &delta, 2, &["--format", "delta"]);
    shard_and_commit(&[&export], &parquet, 2, &[]);
}

#[test]
fn a_sharded_delta_commit_is_one_commit_per_table_with_one_runs_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let export = disagreeing_export(&tmp.path().join("src"));
    let single = tmp.path().join("single");
    unwind(&[&export], &single, &["--format", "delta"], 0);
    let out = tmp.path().join("out");
    shard_and_commit(&[&export], &out, 2, &["--format", "delta"]);
    let (ra, rb) = (run_report(&out), run_report(&single));
    assert_eq!(ra["reconciliation"], rb["reconciliation"]);
    for (a, b) in ra["tables"].as_array().unwrap().iter().zip(rb["tables"].as_array().unwrap()) {
        assert_eq!((&a["name"], &a["rows"], &a["delta_version"]), (&b["name"], &b["rows"], &b["delta_version"]));
        assert_eq!(a["delta_version"], json!(0), "one commit per table");
        // The rows the Delta log lists, in order.
        let rows = |out: &Path, t: &Json| -> Vec<datafusion::arrow::array::RecordBatch> {
            t["files"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|f| {
                    let p = out.join(f["path"].as_str().unwrap());
                    let b = datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                        std::fs::File::open(&p).unwrap(),
                    )
                    .unwrap();
                    b.build().unwrap().map(Result::unwrap).collect::<Vec<_>>()
                })
                .collect()
        };
        let (xa, xb) = (rows(&out, a), rows(&single, b));
        let schema = xb[0].schema();
        assert_eq!(concat_batches(&schema, &xa).unwrap(), concat_batches(&schema, &xb).unwrap(), "{}", a["name"]);
    }
    assert!(!out.join("_etl/shards").exists());
}

/// The `args` of each Job in `deploy/kubernetes/sharded-unwind.yaml`, in order.
fn kubernetes_commands() -> Vec<String> {
    let yaml = std::fs::read_to_string(crate::common::root().join("deploy/kubernetes/sharded-unwind.yaml")).unwrap();
    let mut out = Vec::new();
    let mut in_args = false;
    for line in yaml.lines() {
        let t = line.trim();
        if t == "args:" {
            in_args = true;
            continue;
        }
        if in_args {
            out.push(t.strip_prefix("- ").expect("one command per Job, as `- COMMAND`").to_owned());
            in_args = false;
        }
    }
    out
}

#[test]
fn the_kubernetes_recipe_run_as_local_processes_equals_one_run() {
    let commands = kubernetes_commands();
    assert_eq!(commands.len(), 3, "{commands:?}");
    let tmp = tempfile::tempdir().unwrap();
    let export = disagreeing_export(&tmp.path().join("src"));
    let out = tmp.path().join("out");
    let bin = Path::new(env!("CARGO_BIN_EXE_etl")).parent().unwrap().to_owned();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let shards = 4;
    for command in &commands {
        // An Indexed Job runs `completions` pods at once, each with its `JOB_COMPLETION_INDEX`.
        let indexed = command.contains("$JOB_COMPLETION_INDEX");
        let pods: Vec<_> = (0..if indexed { shards } else { 1 })
            .map(|i| {
                Command::new("/bin/sh")
                    .arg("-c")
                    .arg(command)
                    .env("PATH", &path)
                    .env("SOURCE", &export)
                    .env("OUT", &out)
                    .env("SHARDS", shards.to_string())
                    .env("JOB_COMPLETION_INDEX", i.to_string())
                    .env("NO_COLOR", "1")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for p in pods {
            let p = p.wait_with_output().unwrap();
            assert!(p.status.success(), "{command}: {}", String::from_utf8_lossy(&p.stderr));
        }
    }
    let single = tmp.path().join("single");
    unwind(&[&export], &single, &[], 0);
    assert_same_output(&out, &single);
}

/// `etl sample --incrementals 2 --change-percent 20` of `users` users in 5 files into `dir`: the
/// full export and the incremental ones, in window order.
fn generated_chain(dir: &Path, users: &str, seed: &str, extra: &[&str]) -> (PathBuf, Vec<PathBuf>) {
    let mut args = vec!["sample", "--out", dir.to_str().unwrap(), "--users", users, "--files", "5", "--seed", seed];
    args.extend_from_slice(&["--incrementals", "2", "--change-percent", "20"]);
    args.extend_from_slice(extra);
    let r = etl(args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    crate::common::sample_chain(dir)
}

/// A sharded output keeps its export in `_etl/base/` as one run does, so incremental exports
/// apply onto it: the result equals the same chain applied onto one run's output.
#[test]
fn incremental_exports_apply_onto_a_committed_sharded_output() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("chain"), "60", "7", &["--format", "dynamodb-json"]);
    let inc_refs: Vec<&Path> = incs.iter().map(PathBuf::as_path).collect();

    let single = tmp.path().join("single");
    unwind(&[&full], &single, &[], 0);
    unwind(&inc_refs, &single, &[], 0);
    let out = tmp.path().join("sharded");
    shard_and_commit(&[&full], &out, 3, &[]);
    unwind(&inc_refs, &out, &[], 0);

    let (a, b) = (tables(&out), tables(&single));
    assert_eq!(a.len(), b.len());
    for ((na, ba), (nb, bb)) in a.iter().zip(&b) {
        assert_eq!((na, ba), (nb, bb));
    }
    let (ra, rb) = (run_report(&out), run_report(&single));
    assert_eq!(ra["reconciliation"], rb["reconciliation"]);
    assert_eq!(ra["state"]["applied"], rb["state"]["applied"]);
    assert_eq!(ra["state"]["applied"].as_array().unwrap().len(), 3, "the full export and two incrementals");
}

/// Every phase of `n` shards of `sources` into `out`, with `extra` arguments, then the commit,
/// which must succeed.
fn shard_and_commit(sources: &[&Path], out: &Path, n: u32, extra: &[&str]) -> crate::common::Run {
    for phase in ["infer", "write"] {
        for i in 0..n {
            let spec = format!("{i}/{n}");
            let mut args = vec!["--shard", spec.as_str(), "--phase", phase];
            args.extend_from_slice(extra);
            unwind(sources, out, &args, 0);
        }
    }
    let r = etl(["commit", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r
}

/// A full export with its incremental exports shards too: every shard reduces the incremental
/// exports as one run does, its files supersede what the changes replaced, the last shard reads
/// the current images, and the commit equals one run of the whole chain, the chain's report and
/// the run state included.
#[test]
fn a_chain_shards_and_its_commit_equals_one_run_of_the_chain() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = generated_chain(&tmp.path().join("chain"), "80", "9", &[]);
    let mut sources: Vec<&Path> = vec![&full];
    sources.extend(incs.iter().map(PathBuf::as_path));
    let single = tmp.path().join("single");
    unwind(&sources, &single, &[], 0);
    let rb = run_report(&single);
    let changes = &rb["chain"]["tables"];
    assert!(changes.as_object().is_some_and(|t| !t.is_empty()), "the chain changes tables: {}", rb["chain"]);
    for n in [2, 4] {
        let out = tmp.path().join(format!("sharded-{n}"));
        shard_and_commit(&sources, &out, n, &[]);
        assert_same_output(&out, &single);
        let ra = run_report(&out);
        assert_eq!(ra["chain"], rb["chain"], "{n} shards");
        assert_eq!(ra["state"], rb["state"], "{n} shards");
    }
    // The same chain sharded again onto its output: the commit is a no-op, as a re-run is.
    let out = tmp.path().join("sharded-2");
    let before = std::fs::read(out.join("_etl/run.json")).unwrap();
    let r = shard_and_commit(&sources, &out, 2, &[]);
    assert!(r.stderr.contains("already"), "{}", r.stderr);
    assert_eq!(std::fs::read(out.join("_etl/run.json")).unwrap(), before, "nothing was published");
    assert!(!out.join("_etl/shards").exists(), "the shards of the no-op run are gone");
    // With a mapping: the commit routes the changes with the mapping the shards recorded.
    let mapping = crate::common::root().join("mappings/ecommerce.toml");
    let args = ["--mapping", mapping.to_str().unwrap()];
    let mapped_single = tmp.path().join("mapped-single");
    unwind(&sources, &mapped_single, &args, 0);
    let mapped = tmp.path().join("mapped-sharded");
    shard_and_commit(&sources, &mapped, 3, &args);
    assert_same_output(&mapped, &mapped_single);
    let (ra, rb) = (run_report(&mapped), run_report(&mapped_single));
    assert_eq!((&ra["chain"], &ra["state"]), (&rb["chain"], &rb["state"]));
    assert!(rb["state"]["mapping_hash"].is_string(), "{}", rb["state"]);
    assert_ne!(rb["chain"], run_report(&single)["chain"], "the mapping names other tables");
    // Delta tables: one commit per table, the same rows.
    let delta = tmp.path().join("delta");
    let one_delta = tmp.path().join("one-delta");
    shard_and_commit(&sources, &delta, 3, &["--format", "delta"]);
    unwind(&sources, &one_delta, &["--format", "delta"], 0);
    let (ra, rb) = (run_report(&delta), run_report(&one_delta));
    assert_eq!((&ra["chain"], &ra["reconciliation"]), (&rb["chain"], &rb["reconciliation"]));
    assert_eq!(ra["state"]["applied"], rb["state"]["applied"]);
    // Incremental exports alone are applied onto an output by one process.
    let never = tmp.path().join("never");
    let r = etl(["unwind", incs[0].to_str().unwrap(), "--out", never.to_str().unwrap(), "--shard", "0/2"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("incremental exports alone") && r.stderr.contains("hint:"), "{}", r.stderr);
    assert!(!never.exists(), "a refused shard created `{}`", never.display());
}

/// The real AWS chain (one full export, two incremental ones, fewer data files than shards)
/// sharded three ways commits what one run of it writes.
#[test]
fn the_real_chain_sharded_equals_one_run() {
    let Some(root) = crate::common::real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let args = ["--allow-gap", "--allow-mismatch"];
    let single = tmp.path().join("single");
    unwind(&[&root], &single, &args, 0);
    let out = tmp.path().join("sharded");
    shard_and_commit(&[&root], &out, 3, &args);
    assert_same_output(&out, &single);
    let (ra, rb) = (run_report(&out), run_report(&single));
    assert_eq!((&ra["chain"], &ra["state"]), (&rb["chain"], &rb["state"]));
}

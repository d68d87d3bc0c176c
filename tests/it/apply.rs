//! Incremental exports applied onto an existing output (`etl unwind INC… --out DIR`), one at a
//! time: the real fixture gives the same tables, byte for byte, as the whole chain in one run;
//! the output's state makes a re-apply a no-op and refuses older exports; a `kill -9` while
//! applying leaves the previous output whole; two applies on one output never both commit.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};

use crate::common::*;

const FULL: &str = "01768385930622-efd1a093";
const INC1: &str = "01768386924000-d339e52d";
const INC2: &str = "01768388186000-4a2fc3ff";
/// The fixture's summaries were anonymised (their `.md5` no longer match): every run allows it.
const MISMATCH: &str = "--allow-mismatch";

fn export(root: &Path, id: &str) -> PathBuf {
    root.join("AWSDynamoDB").join(id)
}

/// Every file below `dir`: relative path -> (inode, modification time in ns).
fn stamps(dir: &Path) -> BTreeMap<String, (u64, i64)> {
    files_under(dir)
        .into_iter()
        .map(|p| {
            let m = std::fs::metadata(&p).unwrap();
            (
                p.strip_prefix(dir).unwrap().to_string_lossy().into_owned(),
                (m.ino(), m.mtime() * 1_000_000_000 + m.mtime_nsec()),
            )
        })
        .collect()
}

/// The bytes of each table's part files (not `_etl`).
fn table_bytes(out: &Path) -> BTreeMap<String, Vec<u8>> {
    tree(out)
        .into_keys()
        .filter(|k| !k.starts_with("_etl/"))
        .map(|k| {
            let bytes = std::fs::read(out.join(&k)).unwrap();
            (k, bytes)
        })
        .collect()
}

/// The whole chain unwound in one run: the reference.
fn one_run(root: &Path, dir: &Path) -> PathBuf {
    let out = dir.join("one-run");
    unwind(&[root], &out, &["--allow-gap", MISMATCH], 0);
    out
}

/// `DIR` made from the full export, then inc 1 applied onto it.
fn full_then_inc1(root: &Path, out: &Path) {
    unwind(&[&export(root, FULL)], out, &[MISMATCH], 0);
    unwind(&[&export(root, INC1)], out, &["--allow-gap", MISMATCH], 0);
}

#[test]
fn the_real_fixture_applied_one_export_at_a_time() {
    let Some(root) = real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let reference = one_run(&root, tmp.path());
    let out = tmp.path().join("out");

    // The full export alone: its output keeps it in `_etl/base/`, byte for byte.
    unwind(&[&export(&root, FULL)], &out, &[MISMATCH], 0);
    let fixture = tree(&root);
    let base = tree(&out.join("_etl/base"));
    assert!(base.keys().any(|k| k.ends_with("manifest-files.json")), "{base:?}");
    for (k, md5) in &base {
        assert!(k.starts_with(&format!("AWSDynamoDB/{FULL}/")), "only the full export is kept: {k}");
        assert_eq!(fixture.get(k), Some(md5), "`{k}` is not the fixture's bytes");
    }
    assert_eq!(base.len(), fixture.keys().filter(|k| k.starts_with(&format!("AWSDynamoDB/{FULL}/"))).count());
    assert_eq!(canonical_rows(&out.join("_untyped")).len(), 3);

    // Inc 1: the real 69 s gap after the full export is refused, naming both, the output untouched.
    let before = tree(&out);
    let run = unwind(&[&export(&root, INC1)], &out, &[MISMATCH], 1);
    for needle in [
        format!("`{FULL}` covers up to 2026-01-14T10:18:50.622Z"),
        format!("`{INC1}` starts at 2026-01-14T10:20:00.000Z (69.378 s later)"),
        "--allow-gap".to_owned(),
    ] {
        assert!(run.stderr.contains(&needle), "{needle}: {}", run.stderr);
    }
    assert_eq!(tree(&out), before);
    // Allowed: applied and reported, relative to the previous output.
    let run = unwind(&[&export(&root, INC1)], &out, &["--allow-gap", MISMATCH], 0);
    assert!(run.stderr.contains("gap of 69.378 s allowed by `--allow-gap`"), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("onto the output holding exports up to `{FULL}`")), "{}", run.stderr);
    let c = run_report(&out)["chain"].clone();
    assert_eq!(c["previous_export"], FULL);
    assert_eq!(c["gaps"][0]["seconds"], 69.378);
    let windows = |c: &Json| -> Vec<String> {
        c["windows"].as_array().unwrap().iter().map(|w| w["export"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(windows(&c), [INC1]);
    let counts = |c: &Json| {
        let t = &c["tables"]["_untyped"];
        ["inserts", "updates", "deletes", "moved_in", "moved_out", "unmatched_deletes"].map(|k| t[k].as_u64().unwrap())
    };
    // (2,1) (2,2) (2,3) (3,1) (3,2) (3,3) inserted.
    assert_eq!(counts(&c), [6, 0, 0, 0, 0, 0]);
    assert_eq!(canonical_rows(&out.join("_untyped")).len(), 9);

    // Inc 2: the gap before inc 1 was allowed when inc 1 was applied; it is not asked again.
    let run = unwind(&[&export(&root, INC2)], &out, &[MISMATCH], 0);
    assert!(!run.stderr.contains("gap"), "{}", run.stderr);
    let report = run_report(&out);
    let c = &report["chain"];
    assert_eq!((c["previous_export"].as_str(), windows(c)), (Some(INC1), vec![INC2.to_owned()]));
    assert!(c["gaps"].as_array().unwrap().is_empty());
    // Relative to the previous output: (4,2) inserted; (3,2) and (1,3) updated; (1,1) and
    // (2,3) (inserted by inc 1) deleted.
    assert_eq!(counts(c), [1, 2, 2, 0, 0, 0]);
    assert_eq!((c["created_and_deleted"].as_u64(), c["unmatched_deletes"].as_u64()), (Some(0), Some(0)));
    assert_eq!(report["reconciliation"]["balanced"], true);
    // The 8 items of the NOTICE, value by value, and the same bytes as the chain in one run.
    assert_eq!(canonical_rows(&out.join("_untyped")), crate::real_export::final_state());
    assert_eq!(table_bytes(&out), table_bytes(&reference));
    assert!(!table_bytes(&out).is_empty());
    let state: Json = serde_json::from_slice(&std::fs::read(out.join("_etl/state.json")).unwrap()).unwrap();
    let applied: Vec<&str> =
        state["applied"].as_array().unwrap().iter().map(|a| a["export_id"].as_str().unwrap()).collect();
    assert_eq!(applied, [FULL, INC1, INC2]);
    assert_eq!(state["key_attributes"], json!(["pk", "sk"]));
    // The base holds the full export, still the fixture's bytes, and in place of the two
    // incremental exports one etl wrote: their final change per key, in DynamoDB's layout.
    let base = tree(&out.join("_etl/base"));
    let (kept, written): (Vec<&String>, Vec<&String>) = base.keys().partition(|k| fixture.contains_key(*k));
    for k in &kept {
        assert!(k.starts_with(&format!("AWSDynamoDB/{FULL}/")), "only the full export is kept as it came: {k}");
        assert_eq!(fixture.get(*k), base.get(*k), "`{k}`");
    }
    assert_eq!(kept.len(), fixture.keys().filter(|k| k.starts_with(&format!("AWSDynamoDB/{FULL}/"))).count());
    let id = written
        .iter()
        .find_map(|k| k.strip_suffix("/manifest-summary.json"))
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    assert!(id.starts_with("etl-compacted-"), "{written:?}");
    let mut names: Vec<String> = written.iter().map(|k| k.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            format!("AWSDynamoDB/data/{id}-0.json.gz"),
            format!("AWSDynamoDB/{id}/manifest-files.json"),
            format!("AWSDynamoDB/{id}/manifest-files.md5"),
            format!("AWSDynamoDB/{id}/manifest-summary.json"),
            format!("AWSDynamoDB/{id}/manifest-summary.md5"),
        ]
    );
    let summary: Json = serde_json::from_slice(
        &std::fs::read(out.join(format!("_etl/base/AWSDynamoDB/{id}/manifest-summary.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["exportType"], "INCREMENTAL_EXPORT");
    assert_eq!(summary["outputView"], "NEW_IMAGE");
    assert_eq!(summary["exportFromTime"], "2026-01-14T10:20:00.000Z");
    let inc2_summary: Json =
        serde_json::from_slice(&std::fs::read(export(&root, INC2).join("manifest-summary.json")).unwrap()).unwrap();
    assert_eq!(summary["exportToTime"], inc2_summary["exportToTime"]);
    // The final changes of the 9 keys the two exports changed, less the delete of (2,3), which
    // inc 1 inserted and the full export never held.
    assert_eq!(summary["itemCount"], 8);
    let listed: Vec<String> = report["exports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["export_dir"].as_str().unwrap().rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(listed, [FULL.to_owned(), id.clone()]);
    // What the output keeps is its current state as a chain: unwound alone, the same tables.
    let again = tmp.path().join("from-base");
    unwind(&[&out.join("_etl/base")], &again, &["--allow-gap", MISMATCH], 0);
    assert_eq!(table_bytes(&again), table_bytes(&reference));

    // Inc 2 again: a no-op, no file rewritten.
    let before = stamps(&out);
    let run = unwind(&[&export(&root, INC2)], &out, &[MISMATCH], 0);
    assert!(run.stderr.contains("nothing to apply, nothing rewritten"), "{}", run.stderr);
    assert_eq!(stamps(&out), before);
    // Inc 1 after inc 2: refused (exit 1), nothing rewritten.
    let run = unwind(&[&export(&root, INC1)], &out, &["--allow-gap", MISMATCH], 1);
    assert!(run.stderr.contains("before the exports"), "{}", run.stderr);
    assert!(run.stderr.contains(&format!("export `{INC2}`")), "{}", run.stderr);
    assert!(run.stderr.contains("hint:"), "{}", run.stderr);
    assert_eq!(stamps(&out), before);
    // Both incrementals onto the full export's output in one apply: the same bytes again.
    let out2 = tmp.path().join("out2");
    unwind(&[&export(&root, FULL)], &out2, &[MISMATCH], 0);
    unwind(&[&export(&root, INC2), &export(&root, INC1)], &out2, &["--allow-gap", MISMATCH], 0);
    assert_eq!(table_bytes(&out2), table_bytes(&reference));
    assert_eq!(windows(&run_report(&out2)["chain"]), [INC1, INC2]);
}

#[test]
fn an_output_without_a_base_is_refused_with_a_hint() {
    let Some(root) = real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // An output made from bare data lines (as from a scan): nothing to apply changes to.
    let lines = tmp.path().join("items.json");
    std::fs::write(&lines, "{\"Item\":{\"pk\":{\"N\":\"1\"},\"sk\":{\"N\":\"1\"}}}\n").unwrap();
    let out = tmp.path().join("out");
    unwind(&[&lines], &out, &[], 0);
    assert!(!out.join("_etl/base").exists());
    let before = tree(&out);
    let run = unwind(&[&export(&root, INC1)], &out, &["--allow-gap", MISMATCH], 2);
    assert!(run.stderr.contains("holds no `_etl/base/`"), "{}", run.stderr);
    assert!(run.stderr.contains("hint:") && run.stderr.contains("etl unwind FULL INC1 INC2"), "{}", run.stderr);
    assert_eq!(tree(&out), before);
}

fn spawn_apply(inc: &Path, out: &Path, env: &[(&str, &str)]) -> Child {
    spawn_apply_with(inc, out, env, &[])
}

fn spawn_apply_with(inc: &Path, out: &Path, env: &[(&str, &str)], extra: &[&str]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_etl"));
    cmd.args(["unwind", "-q", "--allow-gap", MISMATCH, "--out"]).arg(out).arg(inc).args(extra).env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

fn wait(mut child: Child) -> (std::process::ExitStatus, String) {
    use std::io::Read as _;
    let mut err = child.stderr.take().unwrap();
    let status = wait_or_kill(&mut child, Instant::now(), Duration::from_secs(120), "etl");
    let mut text = String::new();
    err.read_to_string(&mut text).unwrap();
    (status, text)
}

/// Waits for `child`, killed with SIGKILL after `delay` when one is given: whether it was
/// killed (anything else must be a success), and `case` with the time since `start` for messages.
fn killed_or_done(mut child: Child, delay: Option<Duration>, start: Instant, case: &str) -> (bool, String) {
    use std::os::unix::process::ExitStatusExt as _;
    if let Some(d) = delay {
        std::thread::sleep(d);
        let _ = child.kill();
    }
    let (status, stderr) = wait(child);
    let at = format!("{case}, {:?})", start.elapsed());
    let killed = status.signal() == Some(libc::SIGKILL);
    assert!(killed || status.success(), "{at}: {status:?}\n{stderr}");
    (killed, at)
}

#[test]
fn kill_9_while_applying_keeps_the_previous_output() {
    let Some(root) = real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let reference = one_run(&root, tmp.path());
    // What a complete apply of inc 2 gives (without its run report, which records times).
    let complete = tmp.path().join("complete");
    full_then_inc1(&root, &complete);
    unwind(&[&export(&root, INC2)], &complete, &[MISMATCH], 0);
    let mut complete = tree(&complete);
    complete.remove("_etl/run.json");

    let mut rng = Rng::new("kill_9_while_applying_keeps_the_previous_output");
    // Kills at exact commit steps (both publish paths), then at random times.
    let mut cases: Vec<(Vec<(&str, &str)>, f64)> = vec![
        (vec![("ETL_TEST_KILL_AT", "staged")], 0.0),
        (vec![("ETL_TEST_KILL_AT", "exchanged")], 0.0),
        (vec![("ETL_TEST_KILL_AT", "fallback-named"), ("ETL_TEST_NO_RENAME_EXCHANGE", "1")], 0.0),
        (vec![("ETL_TEST_KILL_AT", "fallback-journaled"), ("ETL_TEST_NO_RENAME_EXCHANGE", "1")], 0.0),
        (vec![("ETL_TEST_KILL_AT", "fallback-published"), ("ETL_TEST_NO_RENAME_EXCHANGE", "1")], 0.0),
    ];
    for _ in 0..12 {
        cases.push((vec![], rng.unit()));
    }
    let (mut landed, mut published) = (0, 0);
    for (n, (env, when)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("out-{n}"));
        full_then_inc1(&root, &out);
        let previous = tree(&out);
        // A timed run first, so the random kill lands inside a run's own span.
        let start = Instant::now();
        let child = spawn_apply(&export(&root, INC2), &out, env);
        let delay = env.is_empty().then(|| Duration::from_millis(10).mul_f64(1.0 + 30.0 * when));
        let (killed, at) = killed_or_done(child, delay, start, &format!("case {n} ({env:?}"));
        landed += usize::from(killed);
        if out.exists() {
            let now = tree(&out);
            if now != previous {
                let mut data = now;
                data.remove("_etl/run.json");
                assert_eq!(data, complete, "{at}: the output is neither the previous one nor the complete one");
                published += 1;
            }
        } else {
            assert!(env.iter().any(|(k, _)| *k == "ETL_TEST_NO_RENAME_EXCHANGE"), "{at}: no output");
        }
        // A re-run gives the right state, whatever the kill left.
        let (status, stderr) = wait(spawn_apply(&export(&root, INC2), &out, &[]));
        assert!(status.success(), "{at}: the re-run failed\n{stderr}");
        assert_eq!(canonical_rows(&out.join("_untyped")), crate::real_export::final_state(), "{at}");
        assert_eq!(table_bytes(&out), table_bytes(&reference), "{at}");
        let leftovers: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.starts_with(&format!(".out-{n}.etl-")) && !f.ends_with("etl-lock"))
            .collect();
        assert!(leftovers.is_empty(), "{at}: {leftovers:?}");
    }
    eprintln!("kill_9_while_applying_keeps_the_previous_output: {landed} kills landed, {published} published before");
    assert!(landed >= 5, "the kills at commit steps all land");
}

#[test]
fn two_applies_on_one_output_one_commits_the_other_changes_nothing() {
    let Some(root) = real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    full_then_inc1(&root, &out);
    let previous = tree(&out);
    let go = tmp.path().join("go");
    let first = spawn_apply(
        &export(&root, INC2),
        &out,
        &[("ETL_TEST_PAUSE_AT", "staged"), ("ETL_TEST_PAUSE_FILE", go.to_str().unwrap())],
    );
    let first_pid = first.id();
    let reached = go.with_file_name("go.reached");
    let start = Instant::now();
    while !reached.exists() {
        assert!(start.elapsed() < Duration::from_secs(120), "the first apply never got to its commit");
        std::thread::sleep(Duration::from_millis(10));
    }
    let second = etl(["unwind", "-q", MISMATCH, "--out", out.to_str().unwrap(), export(&root, INC2).to_str().unwrap()]);
    assert_eq!(second.code, 1, "{}", second.stderr);
    assert!(second.stderr.contains("being written by another etl run"), "{}", second.stderr);
    assert!(second.stderr.contains(&format!("pid {first_pid}")), "{}", second.stderr);
    assert_eq!(tree(&out), previous, "the losing apply changed the output");
    std::fs::write(&go, "").unwrap();
    let (status, stderr) = wait(first);
    assert!(status.success(), "{stderr}");
    assert_eq!(canonical_rows(&out.join("_untyped")), crate::real_export::final_state());
    let state: Json = serde_json::from_slice(&std::fs::read(out.join("_etl/state.json")).unwrap()).unwrap();
    assert_eq!(state["applied"].as_array().unwrap().len(), 3);
}

/// A scheduled job's output keeps what a later apply needs and no more. After each of four
/// generated incremental exports (`NEW_IMAGE` view: deletes carry keys only) applied one at a
/// time, `_etl/base/` holds the full export and one export etl compacted the incremental ones
/// into; the apply read the full export, that compacted export and the new export, none of the
/// earlier incremental exports; the tables are the whole chain's in one run, byte for byte; and
/// `_etl/state.json` lists every export applied.
#[test]
fn applies_keep_the_incremental_exports_compacted_into_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let args = ["sample", "--out", dir.to_str().unwrap(), "--users", "60", "--files", "3", "--seed", "21"];
    let r = etl(args.iter().copied().chain(["--incrementals", "4", "--change-percent", "20", "--view", "new-image"]));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (full, incs) = sample_chain(&dir);
    let id = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let data_names = |export: &Path| -> Vec<String> {
        std::fs::read_to_string(export.join("manifest-files.json"))
            .unwrap()
            .lines()
            .map(|l| {
                let key = serde_json::from_str::<Json>(l).unwrap()["dataFileS3Key"].as_str().unwrap().to_owned();
                key.rsplit('/').next().unwrap().to_owned()
            })
            .collect()
    };
    let out = tmp.path().join("out");
    unwind(&[&full], &out, &[], 0);
    let mut compacted_before: Option<String> = None;
    for k in 0..incs.len() {
        unwind(&[&incs[k]], &out, &[], 0);
        let at = format!("after {} incremental exports", k + 1);
        let reference = tmp.path().join(format!("chain-{k}"));
        let mut sources: Vec<&Path> = vec![&full];
        sources.extend(incs[..=k].iter().map(PathBuf::as_path));
        unwind(&sources, &reference, &[], 0);
        assert_eq!(table_bytes(&out), table_bytes(&reference), "{at}");

        let kept: Vec<String> = std::fs::read_dir(out.join("_etl/base/AWSDynamoDB"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "data")
            .collect();
        let compacted = kept.iter().find(|n| n.starts_with("etl-compacted-")).cloned().unwrap_or_default();
        assert_eq!(kept.len(), 2, "{at}: {kept:?}");
        assert!(kept.contains(&id(&full)) && !compacted.is_empty(), "{at}: {kept:?}");
        let shared: Vec<String> = std::fs::read_dir(out.join("_etl/base/AWSDynamoDB/data"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(shared, [format!("{compacted}-0.json.gz")], "{at}");

        let report = run_report(&out);
        let read: Vec<String> =
            report["inputs"].as_array().unwrap().iter().map(|i| i["file"].as_str().unwrap().to_owned()).collect();
        for earlier in &incs[..k] {
            for name in data_names(earlier) {
                assert!(!read.iter().any(|f| f.ends_with(&name)), "{at}: `{name}` of an applied export was read again");
            }
        }
        for name in data_names(&incs[k]) {
            assert!(read.iter().any(|f| f.ends_with(&name)), "{at}: the new export's `{name}` was not read: {read:?}");
        }
        if let Some(before) = &compacted_before {
            let name = format!("_etl/base/AWSDynamoDB/data/{before}-0.json.gz");
            assert!(read.iter().any(|f| f.ends_with(&name)), "{at}: the compacted export was not read: {read:?}");
        }
        let summary: Json = serde_json::from_slice(
            &std::fs::read(out.join(format!("_etl/base/AWSDynamoDB/{compacted}/manifest-summary.json"))).unwrap(),
        )
        .unwrap();
        let records = summary["itemCount"].as_u64().unwrap();
        assert!(records > 0 && records <= report["chain"]["changed_keys"].as_u64().unwrap(), "{at}: {records}");
        let state: Json = serde_json::from_slice(&std::fs::read(out.join("_etl/state.json")).unwrap()).unwrap();
        let applied: Vec<String> =
            state["applied"].as_array().unwrap().iter().map(|a| a["export_id"].as_str().unwrap().to_owned()).collect();
        let mut want = vec![id(&full)];
        want.extend(incs[..=k].iter().map(|p| id(p)));
        assert_eq!(applied, want, "{at}");
        compacted_before = Some(compacted);
    }
    // The whole chain in one run on one thread keeps the same bytes in `_etl/base/`: compacting
    // one export at a time or all at once, reducing on one worker or two, gives one export.
    let one = tmp.path().join("one-thread");
    let mut sources: Vec<&Path> = vec![&full];
    sources.extend(incs.iter().map(PathBuf::as_path));
    unwind(&sources, &one, &["--threads", "1"], 0);
    assert_eq!(tree(&one.join("_etl/base")), tree(&out.join("_etl/base")));
    assert_eq!(table_bytes(&one), table_bytes(&out));
    // The last export again: a no-op that rewrites nothing, the compacted export included.
    let before = stamps(&out);
    let run = unwind(&[&incs[3]], &out, &[], 0);
    assert!(run.stderr.contains("nothing to apply, nothing rewritten"), "{}", run.stderr);
    assert_eq!(stamps(&out), before);
}

/// Each data file listed for `out`'s tables: its path from `out` and inode.
fn listed_inodes(out: &Path) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for t in run_report(out)["tables"].as_array().unwrap() {
        for f in t["files"].as_array().unwrap() {
            let p = f["path"].as_str().unwrap().to_owned();
            m.insert(p.clone(), std::fs::metadata(out.join(&p)).unwrap().ino());
        }
    }
    m
}

/// `--in-place` onto a Parquet output: each apply of a generated chain (three exports, rows
/// moving between tables, attributes added, removed and changing type) reads no file of the full
/// export, keeps the files that hold no changed key (the previous output's own, hard-linked),
/// and gives what an apply that replays the full export gives: the report's counts (per table
/// inserts, updates, deletes, moves; rows; rejects) and every table's rows, value by value. Every
/// file of a table has the table's one schema, and the folder holds exactly the files listed.
#[test]
fn in_place_applies_onto_parquet_give_the_replays_tables() {
    in_place_gives_the_replays_tables(&[]);
}

/// The same with the sample mapping, whose tables' key columns say their keys back and whose
/// child table names its parent by the parent's whole key: each changed key's rows are found by
/// the key template's columns (`email`; `user_email`, `ordered_at`, `order_id`; …), the child
/// rows of a changed order by their parent columns, and every apply is made in place.
#[test]
fn in_place_applies_onto_a_mapped_parquet_output_give_the_replays_tables() {
    let mapping = root().join("mappings/ecommerce.toml");
    in_place_gives_the_replays_tables(&["--mapping", mapping.to_str().unwrap()]);
}

/// `mappings/ecommerce.toml` with `order_lines` naming its parent by only part of the order's key
/// (`ordered_at` left out of its `parent_columns`), written under `dir`.
pub fn partial_parent_key_mapping(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("mappings/ecommerce.toml")).unwrap();
    let from = r#"parent_columns = ["order_id", "user_email", "ordered_at"]"#;
    assert!(text.contains(from), "the sample mapping's child table names its parent by {from}");
    let path = dir.join("partial-parent-key.toml");
    std::fs::write(&path, text.replace(from, r#"parent_columns = ["order_id", "user_email"]"#)).unwrap();
    path
}

fn in_place_gives_the_replays_tables(options: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (full, incs) = json_chain(&dir, [60, 8, 11, 3, 4]);
    let changes: Json = serde_json::from_slice(&std::fs::read(dir.join("final/changes.json")).unwrap()).unwrap();
    assert!(changes["net"]["moved"].as_u64().unwrap() > 0, "the chain moves rows between tables: {changes}");
    // One file per input file (`--target-file-bytes 1`), so that some hold no changed key.
    let (out, replayed) = (tmp.path().join("in-place"), tmp.path().join("replayed"));
    let small: Vec<&str> = ["--target-file-bytes", "1"].iter().chain(options).copied().collect();
    let in_place: Vec<&str> = std::iter::once("--in-place").chain(small.iter().copied()).collect();
    unwind(&[&full], &out, &small, 0);
    unwind(&[&full], &replayed, &small, 0);
    let (mut in_place_steps, mut linked, mut rewritten) = (0, 0, 0);
    let mut rejects_before = count_rows(&out.join("_rejects"));
    let (mut superseded_rejects, mut traced_images) = (0, 0);
    for (k, inc) in incs.iter().enumerate() {
        let before = listed_inodes(&out);
        unwind(&[inc], &out, &in_place, 0);
        unwind(&[inc], &replayed, &small, 0);
        let (report, replay) = (run_report(&out), run_report(&replayed));
        let full_id = report["chain"]["full_export"].as_str().unwrap().to_owned();
        let of_full = |r: &Json| {
            let inputs = r["inputs"].as_array().unwrap().iter();
            inputs.filter(|i| i["file"].as_str().unwrap().contains(&full_id)).count()
        };
        if report["chain"]["applied_in_place"] == true {
            in_place_steps += 1;
            assert_eq!(of_full(&report), 0, "step {k}: the full export is not among the inputs read");
        } else {
            let warnings = report["warnings"].as_array().unwrap();
            assert!(
                warnings.iter().any(|w| w.as_str().unwrap().contains("by replaying the full export, not in place")),
                "step {k}: {warnings:?}"
            );
        }
        assert!(of_full(&replay) > 0, "step {k}: a replay reads it");
        for key in ["tables", "unmatched_deletes", "created_and_deleted", "changed_keys", "change_records", "windows"] {
            assert_eq!(report["chain"][key], replay["chain"][key], "step {k}: `chain.{key}`");
        }
        assert_eq!(report["reconciliation"]["balanced"], true, "step {k}");
        // `_rejects` keeps the rejects of earlier runs, less those of items whose keys this apply
        // changed (a replay drops them with the superseded items), and takes this apply's own:
        // the replay's rejects. The rows of current images name the change record the run that
        // read them took the image from (a replay takes those of exports the output held from its
        // compacted export again), so with a mapping (whose rejects are those of current images)
        // the rows are compared by reason and raw line.
        let rejects = |out: &Path| -> Vec<(String, String)> {
            let rows = canonical_rows(&out.join("_rejects")).into_iter();
            let mut v: Vec<(String, String)> = rows
                .map(|r| serde_json::from_str::<Json>(&r).unwrap())
                .map(|r| (r["reason"].as_str().unwrap().to_owned(), r["raw"].as_str().unwrap().to_owned()))
                .collect();
            v.sort();
            v
        };
        let (mine, replays) = (rejects(&out), rejects(&replayed));
        let this_run = report["reconciliation"]["rejects"].as_u64().unwrap() as usize;
        let removed = report["chain"]["superseded_rejects"].as_u64().unwrap_or(0) as usize;
        assert_eq!(mine.len(), rejects_before + this_run - removed, "step {k}: the run's rejects appended");
        rejects_before = mine.len();
        superseded_rejects += removed;
        assert_eq!(mine, replays, "step {k}: `_rejects` by reason and raw line");
        traced_images += rejects_name_their_lines(&out);
        if options.is_empty() {
            assert_eq!(report["reconciliation"]["rejects"], replay["reconciliation"]["rejects"], "step {k}");
            assert_eq!(canonical_rows(&out.join("_rejects")), canonical_rows(&replayed.join("_rejects")), "step {k}");
        }
        let rows = |r: &Json| -> BTreeMap<String, u64> {
            let tables = r["tables"].as_array().unwrap().iter();
            tables
                .filter(|t| t["rows"].as_u64().unwrap() > 0 && t["name"] != "_rejects")
                .map(|t| (t["name"].as_str().unwrap().to_owned(), t["rows"].as_u64().unwrap()))
                .collect()
        };
        assert_eq!(rows(&report), rows(&replay), "step {k}: rows per table (`_rejects` above)");
        let expected = table_rows(&replayed);
        let got = table_rows(&out);
        for (name, rows) in &expected {
            assert_eq!(got.get(name).map_or(&[][..], Vec::as_slice), rows.as_slice(), "step {k}: rows of `{name}`");
        }
        assert!(got.iter().all(|(n, r)| r.is_empty() || expected.contains_key(n)), "step {k}: {:?}", got.keys());
        // The same tables listed, an emptied one too (gone, or kept empty where a replay keeps it).
        let names = |r: &Json| -> Vec<String> {
            r["tables"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
        };
        assert_eq!(names(&report), names(&replay), "step {k}: the tables listed");

        // The folder holds the files listed, each table's files one schema.
        let listed = listed_inodes(&out);
        let on_disk: Vec<String> = tree(&out).into_keys().filter(|p| !p.starts_with("_etl/")).collect();
        assert_eq!(on_disk, listed.keys().cloned().collect::<Vec<_>>(), "step {k}");
        for t in report["tables"].as_array().unwrap() {
            let schemas: std::collections::BTreeSet<String> = t["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    let file = std::fs::File::open(out.join(f["path"].as_str().unwrap())).unwrap();
                    let b = datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file);
                    format!("{:?}", b.unwrap().schema())
                })
                .collect();
            assert!(schemas.len() <= 1, "step {k}: `{}` has {} schemas", t["name"], schemas.len());
        }
        // Files kept are the previous output's own (the same inode); the others were rewritten.
        if report["chain"]["applied_in_place"] == true {
            let had: std::collections::BTreeSet<u64> = before.values().copied().collect();
            let kept = listed.values().filter(|i| had.contains(i)).count();
            linked += kept;
            rewritten += listed.len() - kept;
        }
    }
    // Every apply, the one whose changed rows need a column of a larger decimal scale too (the
    // table's files rewritten in it).
    assert_eq!(in_place_steps, incs.len(), "{in_place_steps} of {} applies in place", incs.len());
    assert!(linked > 0 && rewritten > 0, "{linked} files kept, {rewritten} written");
    // With the mapping, an apply changes again a key whose current image an earlier one rejected.
    if !options.is_empty() {
        assert!(superseded_rejects > 0, "no reject of an earlier apply was superseded");
        assert!(traced_images > 0, "no reject of a current image");
    }
}

/// Checks that every reject in the output `out` names a line of its input: the rejected line
/// itself (its start, when it was cut short), or for a current image the change record it is the
/// new image of (of the image's key, its `NewImage` the image), at the offset where that record's
/// line starts. Returns how many rejects of current images it checked.
fn rejects_name_their_lines(out: &Path) -> usize {
    use etl::decode::{Format, Record, decode};
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    let mut checked = 0;
    for row in canonical_rows(&out.join("_rejects")) {
        let r: Json = serde_json::from_str(&row).unwrap();
        let file = r["source_file"].as_str().unwrap();
        let text = texts.entry(file.to_owned()).or_insert_with(|| {
            if file.ends_with(".gz") {
                gunzip(Path::new(file))
            } else {
                std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{row}: {e}"))
            }
        });
        // Canonical rows hold 64-bit integers as text.
        let int =
            |c: &str| r[c].as_str().and_then(|v| v.parse::<usize>().ok()).unwrap_or_else(|| panic!("{row}: `{c}`"));
        let n = int("line");
        let start: usize = text.split_inclusive('\n').take(n - 1).map(str::len).sum();
        let line = text[start..].lines().next().unwrap_or_else(|| panic!("{row}: no line {n}"));
        let (raw, offset) = (r["raw"].as_str().unwrap(), int("byte_offset"));
        if line == raw || (r["raw_truncated"] == true && line.starts_with(raw)) {
            assert!((start..=start + line.len()).contains(&offset), "{row}: offset {offset} outside its line");
            continue;
        }
        // Read as DynamoDB values: the image is written again in canonical DynamoDB JSON (a
        // number's text without trailing zeros).
        let Ok(Record::Change(change)) = decode(Format::ExportJson, line.as_bytes()) else {
            panic!("{row}: line {n} is not a change record: `{line}`")
        };
        let Ok(Record::Put(item)) = decode(Format::ExportJson, raw.as_bytes()) else { panic!("{row}: not an item") };
        for key in &change.keys {
            assert!(item.contains(key), "{row}: the image lacks the change record's key `{}`", key.0);
        }
        assert_eq!(change.new.as_ref(), Some(&item), "{row}");
        assert_eq!(offset, start, "{row}: the change record's line starts at {start}");
        assert!(r["message"].as_str().unwrap().ends_with(" (in the change record's new image)"), "{row}");
        checked += 1;
    }
    checked
}

/// `--strict` stops at the first current image a mapping rejects, naming the change record it is
/// the new image of (the incremental export's data file and line), not the run's scratch file.
#[test]
fn a_strict_run_stops_at_the_change_record_of_a_rejected_image() {
    let tmp = tempfile::tempdir().unwrap();
    let (full, incs) = json_chain(&tmp.path().join("s"), [60, 8, 11, 3, 4]);
    let mapping = root().join("mappings/ecommerce.toml");
    let sources: Vec<&Path> = std::iter::once(full.as_path()).chain(incs.iter().map(PathBuf::as_path)).collect();
    let run = unwind(&sources, &tmp.path().join("out"), &["--mapping", mapping.to_str().unwrap(), "--strict"], 1);
    let message = run.stderr.lines().next().unwrap();
    assert!(message.ends_with("(in the change record's new image) [required]"), "{message}");
    let (file, rest) =
        message.strip_prefix("error: strict mode: `").and_then(|m| m.split_once("` line ")).expect(message);
    let n: usize = rest.split(' ').next().unwrap().parse().expect(message);
    let change: Json = serde_json::from_str(gunzip(Path::new(file)).lines().nth(n - 1).unwrap()).unwrap();
    assert!(change["Keys"].is_object() && change["NewImage"].is_object(), "{message}: {change}");
    assert!(!tmp.path().join("out").exists(), "a strict run that stops publishes nothing");
}

/// A current image is read whole whatever `--max-line-bytes` is: its change record's line was
/// within the limit, though the image written again as DynamoDB JSON is longer (an Ion number is
/// shorter than its `{"N":…}` form). Before, it was cut short and rejected as too long.
#[test]
fn a_current_image_longer_than_the_line_limit_is_unwound_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (full, incs) = chain_as(&dir, [60, 3, 11, 1, 4], "ion");
    let ion: String = (0..150).map(|i| format!(",n{i}:{i}")).collect();
    let change = format!(
        r#"$ion_1_0 {{Metadata:{{WriteTimestampMicros:1780000000000000.}},Keys:{{PK:"WIDGET#1",SK:"WIDGET"}},NewImage:{{PK:"WIDGET#1",SK:"WIDGET",Type:"Widget"{ion}}}}}"#
    );
    let json: String = (0..150).map(|i| format!(r#","n{i}":{{"N":"{i}"}}"#)).collect();
    let image =
        format!(r#"{{"Item":{{"PK":{{"S":"WIDGET#1"}},"SK":{{"S":"WIDGET"}},"Type":{{"S":"Widget"}}{json}}}}}"#);
    let limit = 2200;
    assert!(change.len() < limit && image.len() > limit, "{} and {} bytes", change.len(), image.len());
    append_line(&dir, &incs[0], &change);
    let out = tmp.path().join("out");
    unwind(&[&full, &incs[0]], &out, &["--max-line-bytes", &limit.to_string(), MISMATCH], 0);
    let sql = |query: &str| sql_csv(out.to_str().unwrap(), &[query]);
    assert_eq!(sql("SELECT n0, n149 FROM widget"), "n0,n149\n0,149\n");
    assert_eq!(sql("SELECT count(*) AS n FROM _rejects WHERE raw LIKE '%WIDGET#1%'"), "n\n0\n");
}

/// A mapped output whose full export had an item the mapping rejects (`name` missing), then an
/// apply in place (`first` the full unwind's options, `apply` the apply's) of an export that
/// updates that key with an item that fits: the reject is left out of `_rejects` (counted in
/// `chain.superseded_rejects`), the key counts as an update, and the output holds the replay's
/// rows and rejects. Returns the output (in the temporary folder) and its report.
pub fn a_superseded_reject_is_left_out(first: &[&str], apply: &[&str]) -> (tempfile::TempDir, PathBuf, Json) {
    superseded_reject_in(first, apply, "dynamodb-json")
}

/// [`a_superseded_reject_is_left_out`] with exports in the data-file format `format`
/// (`dynamodb-json` or `ion`).
fn superseded_reject_in(first: &[&str], apply: &[&str], format: &str) -> (tempfile::TempDir, PathBuf, Json) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (full, incs) = chain_as(&dir, [60, 3, 11, 1, 4], format);
    let (item, change) = if format == "ion" {
        let user = |name: &str| {
            format!(
                r#"{{PK:"USER#zed@example.com",SK:"PROFILE",Type:"User",email:"zed@example.com",{name}signup_at:1648459319.,status:"active"}}"#
            )
        };
        let keys = r#"{PK:"USER#zed@example.com",SK:"PROFILE"}"#;
        let image = user(r#"name:"Zed","#);
        let change =
            format!(r#"$ion_1_0 {{Metadata:{{WriteTimestampMicros:1780000000000000.}},Keys:{keys},NewImage:{image}}}"#);
        (format!("$ion_1_0 {{Item:{}}}", user("")), change)
    } else {
        let user = |name: &str| {
            format!(
                r#"{{"PK":{{"S":"USER#zed@example.com"}},"SK":{{"S":"PROFILE"}},"Type":{{"S":"User"}},"email":{{"S":"zed@example.com"}},{name}"signup_at":{{"N":"1648459319"}},"status":{{"S":"active"}}}}"#
            )
        };
        let keys = r#"{"PK":{"S":"USER#zed@example.com"},"SK":{"S":"PROFILE"}}"#;
        let image = user(r#""name":{"S":"Zed"},"#);
        let change = format!(
            r#"{{"Metadata":{{"WriteTimestampMicros":{{"N":"1780000000000000"}}}},"Keys":{keys},"NewImage":{image}}}"#
        );
        (format!(r#"{{"Item":{}}}"#, user("")), change)
    };
    append_line(&dir, &full, &item);
    append_line(&dir, &incs[0], &change);
    let mapping = root().join("mappings/ecommerce.toml");
    let common = ["--mapping", mapping.to_str().unwrap(), MISMATCH];
    let (out, replayed) = (tmp.path().join("out"), tmp.path().join("replayed"));
    unwind(&[&full], &out, &[&common[..], first].concat(), 0);
    unwind(&[&full], &replayed, &common, 0);
    let sql = |data: &Path, query: &str| {
        let r = etl(["sql", "--data", data.to_str().unwrap(), "--format", "ndjson", query]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        r.stdout
    };
    let zed = "SELECT reason FROM _rejects WHERE raw LIKE '%zed@example.com%'";
    assert_eq!(sql(&out, zed).trim(), r#"{"reason":"required"}"#, "the full export's item is rejected");

    unwind(&[&incs[0]], &out, &[&common[..], apply].concat(), 0);
    unwind(&[&incs[0]], &replayed, &common, 0);
    let (report, replay) = (run_report(&out), run_report(&replayed));
    assert_eq!(report["chain"]["applied_in_place"], true, "{}", report["warnings"]);
    assert_eq!(report["chain"]["superseded_rejects"], 1, "{}", report["chain"]);
    assert_eq!(report["chain"]["tables"], replay["chain"]["tables"], "the key counts as the replay counts it");
    assert!(report["chain"]["tables"]["users"]["updates"].as_u64().unwrap() > 0, "{}", report["chain"]);
    assert_eq!(sql(&out, zed), "", "its reject is left out");
    let name = "SELECT name FROM users WHERE email = 'zed@example.com'";
    assert_eq!(sql(&out, name).trim(), r#"{"name":"Zed"}"#);
    for query in ["SELECT reason, raw FROM _rejects ORDER BY reason, raw", "SELECT count(*) AS n FROM users"] {
        assert_eq!(sql(&out, query), sql(&replayed, query), "{query}");
    }
    let rejects = report["tables"].as_array().unwrap().iter().find(|t| t["name"] == "_rejects").unwrap();
    let replays = replay["tables"].as_array().unwrap().iter().find(|t| t["name"] == "_rejects").unwrap();
    assert_eq!(rejects["rows"], replays["rows"], "{rejects}");
    (tmp, out, report)
}

#[test]
fn an_apply_in_place_leaves_out_the_rejects_it_supersedes() {
    let (_tmp, out, report) = a_superseded_reject_is_left_out(&[], &["--in-place"]);
    // The file of `_rejects` that held the reject was written again without it.
    let rejects = report["tables"].as_array().unwrap().iter().find(|t| t["name"] == "_rejects").unwrap();
    let listed = rejects["files"].as_array().unwrap();
    assert!(!listed.is_empty(), "{rejects}");
    assert_eq!(listed.iter().map(|f| f["rows"].as_u64().unwrap()).sum::<u64>(), rejects["rows"].as_u64().unwrap());
    assert_eq!(count_rows(&out.join("_rejects")) as u64, rejects["rows"].as_u64().unwrap());
}

/// The same from Ion exports: the full export's reject holds its Ion line, read back as Ion.
#[test]
fn an_apply_in_place_leaves_out_the_ion_rejects_it_supersedes() {
    let (_tmp, _, report) = superseded_reject_in(&[], &["--in-place"], "ion");
    assert_eq!(report["chain"]["superseded_rejects"], 1, "{}", report["chain"]);
}

/// `--in-place` where an apply cannot be made in place (a mapped output whose child table names
/// its parent by only part of its key: two orders could share its rows' parent columns) replays,
/// says why, and gives the replay's output, byte for byte.
#[test]
fn in_place_onto_a_mapped_output_replays_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (full, incs) = json_chain(&dir, [20, 2, 5, 1, 10]);
    let mapping = partial_parent_key_mapping(tmp.path());
    let m = ["--mapping", mapping.to_str().unwrap()];
    let (out, replayed) = (tmp.path().join("in-place"), tmp.path().join("replayed"));
    unwind(&[&full], &out, &m, 0);
    unwind(&[&full], &replayed, &m, 0);
    let run = unwind(&[&incs[0]], &out, &[m[0], m[1], "--in-place"], 0);
    unwind(&[&incs[0]], &replayed, &m, 0);
    let report = run_report(&out);
    assert!(report["chain"].get("applied_in_place").is_none(), "{}", report["chain"]);
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains(
            "not in place: table `order_lines`: its `parent_columns` lack `ordered_at`, of the key columns of `orders`"
        ),
        "{warnings}"
    );
    assert!(run.stderr.contains("not in place"), "{}", run.stderr);
    assert_eq!(table_bytes(&out), table_bytes(&replayed));
}

/// An apply decides by the options that decide the output's files too: an export the output
/// holds, named again with another of them, writes the output again (not a no-op). `--in-place`
/// with another file layout applies in place; with another line limit (rows the output's were
/// not made by) it replays and says why. Each gives the tables of the same chain unwound in one
/// run with those options.
#[test]
fn applies_with_other_options_write_the_output_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (full, incs) = json_chain(&dir, [30, 2, 8, 3, 10]);
    let out = tmp.path().join("out");
    unwind(&[&full], &out, &[], 0);
    unwind(&[&incs[0]], &out, &[], 0);
    let one_run = |exports: &[&Path], name: &str, extra: &[&str]| {
        let o = tmp.path().join(name);
        unwind(exports, &o, extra, 0);
        table_rows(&o)
    };

    let other = ["--row-group-rows", "1000"];
    let run = unwind(&[&incs[0]], &out, &other, 0);
    assert!(!run.stderr.contains("nothing rewritten"), "{}", run.stderr);
    assert_eq!(run_report(&out)["options"]["layout"]["row_group_rows"], 1000);
    assert_eq!(table_rows(&out), one_run(&[&full, &incs[0]], "one-a", &other));
    let run = unwind(&[&incs[0]], &out, &other, 0);
    assert!(run.stderr.contains("nothing to apply, nothing rewritten"), "{}", run.stderr);

    unwind(&[&incs[1]], &out, &["--in-place", "--row-group-rows", "2000"], 0);
    let report = run_report(&out);
    assert_eq!(report["chain"]["applied_in_place"], true, "{}", report["chain"]);
    assert_eq!(report["options"]["layout"]["row_group_rows"], 2000);
    assert_eq!(table_rows(&out), one_run(&[&full, &incs[0], &incs[1]], "one-b", &[]));

    let limit = ["--max-line-bytes", "100000"];
    let run = unwind(&[&incs[2]], &out, &["--in-place", limit[0], limit[1]], 0);
    let report = run_report(&out);
    assert!(report["chain"].get("applied_in_place").is_none(), "{}", report["chain"]);
    assert!(
        run.stderr.contains("with the `--type-attribute`, `--max-line-bytes` and mapping it was made with"),
        "{}",
        run.stderr
    );
    assert_eq!(report["options"]["max_line_bytes"], 100_000);
    assert_eq!(table_rows(&out), one_run(&[&full, &incs[0], &incs[1], &incs[2]], "one-c", &limit));
}

/// The real fixture applied with `--in-place`, one export at a time: both applies are made in
/// place (the `NEW_IMAGE` deletes, which carry only keys, found in the output's table by its key
/// columns), and the table holds the eight items of the NOTICE, value by value.
#[test]
fn the_real_fixture_applied_in_place_onto_parquet_holds_the_eight_items() {
    let Some(root) = real_export() else {
        eprintln!("skipping: ../shared/fixtures/aws-real-export is not present");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    unwind(&[&export(&root, FULL)], &out, &[MISMATCH], 0);
    for inc in [INC1, INC2] {
        unwind(&[&export(&root, inc)], &out, &["--allow-gap", MISMATCH, "--in-place"], 0);
        let report = run_report(&out);
        assert_eq!(report["chain"]["applied_in_place"], true, "{inc}: {}", report["warnings"]);
        assert_eq!(report["reconciliation"]["balanced"], true);
    }
    assert_eq!(canonical_rows(&out.join("_untyped")), crate::real_export::final_state());
    let c = &run_report(&out)["chain"];
    let t = &c["tables"]["_untyped"];
    let counts =
        ["inserts", "updates", "deletes", "moved_in", "moved_out", "unmatched_deletes"].map(|k| t[k].as_u64().unwrap());
    assert_eq!(counts, [1, 2, 2, 0, 0, 0]);
}

/// `kill -9` during an apply with `--in-place` (at the commit steps, then at random times, most of
/// them while tables are rewritten): the previous output, whose files the staged output
/// hard-links, stays byte for byte what it was, or the complete apply is published; a re-run
/// gives the complete apply's tables.
#[test]
fn kill_9_during_an_in_place_apply_keeps_the_previous_output() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s");
    let (full, incs) = json_chain(&dir, [1500, 4, 3, 1, 5]);
    let made = tmp.path().join("made");
    unwind(&[&full], &made, &["--target-file-bytes", "1"], 0);
    let copy = |to: &Path| {
        let r = Command::new("cp").arg("-a").arg(&made).arg(to).status().unwrap();
        assert!(r.success());
    };
    // What a complete apply gives (without its run report, which records times).
    let complete_dir = tmp.path().join("complete");
    copy(&complete_dir);
    let (status, stderr) = wait(spawn_apply_with(&incs[0], &complete_dir, &[], &["--in-place"]));
    assert!(status.success(), "{stderr}");
    assert_eq!(run_report(&complete_dir)["chain"]["applied_in_place"], true);
    let mut complete = tree(&complete_dir);
    complete.remove("_etl/run.json");
    let previous = tree(&made);

    let mut rng = Rng::new("kill_9_during_an_in_place_apply_keeps_the_previous_output");
    let mut cases: Vec<(Vec<(&str, &str)>, f64)> =
        vec![(vec![("ETL_TEST_KILL_AT", "staged")], 0.0), (vec![("ETL_TEST_KILL_AT", "exchanged")], 0.0)];
    for _ in 0..10 {
        cases.push((vec![], rng.unit()));
    }
    let mut landed = 0;
    for (n, (env, when)) in cases.iter().enumerate() {
        let out = tmp.path().join(format!("out-{n}"));
        copy(&out);
        let start = Instant::now();
        let child = spawn_apply_with(&incs[0], &out, env, &["--in-place"]);
        // The apply takes about 90 ms on 2 cores, 45 of them making the tables.
        let delay = env.is_empty().then(|| Duration::from_millis(2).mul_f64(1.0 + 45.0 * when));
        let (killed, at) = killed_or_done(child, delay, start, &format!("case {n} ({env:?}"));
        landed += usize::from(killed);
        let now = tree(&out);
        if now != previous {
            let mut data = now;
            data.remove("_etl/run.json");
            assert_eq!(data, complete, "{at}: the output is neither the previous one nor the complete one");
        }
        let (status, stderr) = wait(spawn_apply_with(&incs[0], &out, &[], &["--in-place"]));
        assert!(status.success(), "{at}: the re-run failed\n{stderr}");
        let mut data = tree(&out);
        data.remove("_etl/run.json");
        assert_eq!(data, complete, "{at}: the re-run");
    }
    eprintln!("kill_9_during_an_in_place_apply_keeps_the_previous_output: {landed} kills landed");
    assert!(landed >= 2, "the kills at commit steps land");
}

//! Readers never see half an output: a run killed at any moment leaves the previous output.

use std::time::Duration;

use crate::common::*;

#[test]
fn kill_9_mid_run_leaves_the_previous_output_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let export = tmp.path().join("big");
    let r = etl([
        "sample".as_ref(),
        "--out".as_ref(),
        export.as_os_str(),
        "--users".as_ref(),
        "20000".as_ref(),
        "--files".as_ref(),
        "4".as_ref(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let out = tmp.path().join("out");
    unwind(&[&sample_export()], &out, &[], 0);
    let before = canonical_rows(&out.join("order"));
    let report_before = std::fs::read(out.join("_etl/run.json")).unwrap();

    for delay_ms in [20u64, 150, 400, 900] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_etl"))
            .args(["unwind", "-q", "--threads", "2", "--out"])
            .arg(&out)
            .arg(&export)
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let finished = child.try_wait().unwrap().is_some();
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        if finished {
            break; // the machine was faster than the delay; the output below is then the new run's
        }
        assert_eq!(std::fs::read(out.join("_etl/run.json")).unwrap(), report_before, "killed after {delay_ms} ms");
        assert_eq!(canonical_rows(&out.join("order")), before);
    }
    // The next run cleans up the killed runs' staging folders and publishes.
    unwind(&[&export], &out, &[], 0);
    let leftovers: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("etl-staging"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(count_rows(&out.join("order")) > before.len());
}

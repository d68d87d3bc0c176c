//! The fault suite: `kill -9` at random points of a run and at every step of a commit, locally
//! (with the directory exchange and with the two-rename fallback) and against moto's S3; two
//! runs on one output; injected I/O failures (a full disk, `EACCES`, a data file that
//! disappears, an S3 endpoint that resets connections or answers 5xx for a while). Each must end
//! in a clear error or a successful retry: the previous output stays intact and byte-identical,
//! no reader ever sees a partial folder or object set, and a re-run matches a clean run.
//!
//! Loopback only; bounded in time (a few minutes on two cores, most of it in the S3 part). Faults
//! are injected from outside (`SIGKILL`, a tmpfs, permissions, a proxy) or through etl's
//! test-only switches (`ETL_TEST_*`, see `src/sink/faults.rs`): `ETL_TEST_NO_RENAME_EXCHANGE=1`
//! stands in for a file system without `RENAME_EXCHANGE`, `ETL_TEST_KILL_AT` and
//! `ETL_TEST_PAUSE_AT` put a kill or a pause at an exact step. Random points come from a seed
//! printed by each test (`ETL_FAULT_SEED=N` replays it).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use crate::aws::{
    CHILD_LIMIT, Endpoint, Moto, etl_aws, etl_cmd, moto, paused_unwind_with, py, run_limited, s, s3_get, unique,
};
use crate::common::*;

// --- Helpers ---------------------------------------------------------------------------------

/// `etl sample` into `dir`: `users` users in `files` data files.
fn make_sample(dir: &Path, users: u32, files: u32, seed: u32) {
    let r = etl([
        "sample",
        "-q",
        "--out",
        s(dir),
        "--users",
        &users.to_string(),
        "--files",
        &files.to_string(),
        "--seed",
        &seed.to_string(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

/// A bigger export than the sample (a run takes about a second here), made once.
fn big_export() -> &'static Path {
    static BIG: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, p) = BIG.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("big");
        make_sample(&p, 12000, 6, 7);
        (tmp, p)
    });
    p
}

/// The tree without `_etl/run.json` (which records times): equal for two runs of one input.
fn data_tree(dir: &Path) -> BTreeMap<String, String> {
    let mut t = tree(dir);
    assert!(t.remove("_etl/run.json").is_some(), "{} has no run.json", dir.display());
    t
}

/// A tree without `_etl/base/`: what an output read from `s3://` shares with one read from a
/// local copy (only local exports are kept in `_etl/base/`).
fn without_base(mut t: BTreeMap<String, String>) -> BTreeMap<String, String> {
    t.retain(|k, _| !k.starts_with("_etl/base/"));
    t
}

/// The reference output of `src`, from a clean run into a fresh folder.
fn clean_run(src: &Path, dir: &Path) -> BTreeMap<String, String> {
    unwind(&[src], dir, &["-q"], 0);
    data_tree(dir)
}

/// Names in `dir` other than `keep`.
fn leftovers(dir: &Path, keep: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !keep.contains(&n.as_str()))
        .collect();
    v.sort();
    v
}

fn spawn_unwind(src: &Path, out: &Path, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_etl"));
    cmd.args(["unwind", "-q", "--threads", "2", "--out"]).arg(out).arg(src).env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Waits for `child` (killing it after `limit`); returns its status and stderr.
fn finish(mut child: Child, limit: Duration) -> (ExitStatus, String) {
    let mut err = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut text);
        }
        text
    });
    let status = wait_or_kill(&mut child, Instant::now(), limit, "etl");
    (status, reader.join().unwrap())
}

fn killed(status: &ExitStatus) -> bool {
    status.signal() == Some(libc::SIGKILL)
}

/// How long a complete local run of `src` takes.
fn time_run(src: &Path, dir: &Path) -> Duration {
    let start = Instant::now();
    unwind(&[src], dir, &["-q", "--threads", "2"], 0);
    start.elapsed()
}

const FALLBACK: (&str, &str) = ("ETL_TEST_NO_RENAME_EXCHANGE", "1");

/// A reader that reads `out` over and over while runs publish: each time it finds either no
/// folder or a complete output (a `run.json` whose every listed file exists with its listed
/// size, all in the one folder it opened). A folder without `run.json`, or with a listed file
/// missing or of another size, while it is still the folder at `out`, is a violation.
struct Reader {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<ReaderStats>,
}

#[derive(Debug, Default)]
struct ReaderStats {
    complete: usize,
    absent: usize,
    /// The folder was swapped away while being read (it was then the old output on its way out).
    raced: usize,
    violations: Vec<String>,
}

impl Reader {
    fn start(out: &Path) -> Reader {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let out = out.to_owned();
        let handle = std::thread::spawn(move || {
            let mut st = ReaderStats::default();
            while !flag.load(Ordering::Relaxed) {
                read_once(&out, &mut st);
            }
            st
        });
        Reader { stop, handle }
    }

    fn stop(self) -> ReaderStats {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

fn read_once(out: &Path, st: &mut ReaderStats) {
    let dir = match std::fs::File::open(out) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            st.absent += 1;
            return;
        }
        Err(e) => panic!("open {}: {e}", out.display()),
    };
    let meta = dir.metadata().unwrap();
    // Paths through the open folder's descriptor: a swap cannot mix two folders in one read.
    use std::os::fd::AsRawFd as _;
    let base = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    let still_current = || std::fs::metadata(out).is_ok_and(|m| m.ino() == meta.ino() && m.dev() == meta.dev());
    let text = match std::fs::read(base.join("_etl/run.json")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if still_current() {
                st.violations.push(format!("{} exists without _etl/run.json", out.display()));
            } else {
                st.raced += 1;
            }
            return;
        }
        Err(e) => panic!("read run.json: {e}"),
    };
    let report: Json = match serde_json::from_slice(&text) {
        Ok(r) => r,
        Err(e) => {
            st.violations.push(format!("run.json is not JSON ({e})"));
            return;
        }
    };
    for t in report["tables"].as_array().into_iter().flatten() {
        for f in t["files"].as_array().into_iter().flatten() {
            let rel = f["path"].as_str().unwrap_or_default();
            match std::fs::metadata(base.join(rel)) {
                Ok(m) if Some(m.len()) == f["bytes"].as_u64() => {}
                Ok(m) => {
                    st.violations.push(format!("{rel} has {} bytes, run.json says {}", m.len(), f["bytes"]));
                    return;
                }
                Err(_) if !still_current() => {
                    st.raced += 1;
                    return;
                }
                Err(e) => {
                    st.violations.push(format!("run.json lists {rel}, which cannot be read: {e}"));
                    return;
                }
            }
        }
    }
    st.complete += 1;
}

/// The complete copies a fallback publish killed between its renames left beside `out`, from
/// its journal: the new output (if still there) and the parked previous one (if still there).
fn journaled_copies(out: &Path) -> (Option<PathBuf>, Option<PathBuf>) {
    let name = out.file_name().unwrap().to_string_lossy();
    let journal = out.with_file_name(format!(".{name}.etl-commit"));
    let j: Json =
        serde_json::from_slice(&std::fs::read(&journal).unwrap_or_else(|e| {
            panic!("{} is missing and so is its journal {}: {e}", out.display(), journal.display())
        }))
        .unwrap();
    let at = |k: &str| Some(out.with_file_name(j[k].as_str().unwrap())).filter(|p| p.exists());
    (at("new"), at("old"))
}

// --- Local kills -----------------------------------------------------------------------------

/// `kill -9` at random points of local runs (alternating the exchange and the two-rename
/// fallback, alternating two inputs), with a reader reading throughout: after each kill the
/// output is the previous one byte for byte, or the killed run's complete output (it got to its
/// commit), or, only between the fallback's renames, absent with both complete copies journaled.
#[test]
fn local_kill_9_at_random_points() {
    let tmp = tempfile::tempdir().unwrap();
    let inputs = [sample_export(), big_export().to_owned()];
    let clean: Vec<BTreeMap<String, String>> =
        inputs.iter().enumerate().map(|(i, src)| clean_run(src, &tmp.path().join(format!("clean-{i}")))).collect();
    let full: Vec<Duration> =
        inputs.iter().enumerate().map(|(i, src)| time_run(src, &tmp.path().join(format!("timing-{i}")))).collect();
    let out = tmp.path().join("out");
    unwind(&[&inputs[0]], &out, &["-q"], 0);
    let mut previous = tree(&out);

    let reader = Reader::start(&out);
    let mut rng = Rng::new("local_kill_9_at_random_points");
    let (mut landed, mut attempts, mut published, mut interrupted) = (0, 0, 0, 0);
    while landed < 30 {
        attempts += 1;
        assert!(attempts <= 80, "only {landed} of {attempts} kills landed while a run was running");
        let input = attempts % 2;
        let fallback = (attempts / 2) % 2 == 1;
        let env: &[(&str, &str)] = if fallback { &[FALLBACK] } else { &[] };
        let delay = full[input].mul_f64(rng.unit() * 1.1);
        let child = spawn_unwind(&inputs[input], &out, env);
        std::thread::sleep(delay);
        let mut child = child;
        let _ = child.kill(); // SIGKILL
        let (status, stderr) = finish(child, CHILD_LIMIT);
        let at = format!("attempt {attempts} (input {input}, fallback {fallback}, killed after {delay:?})");
        if killed(&status) {
            landed += 1;
        } else {
            assert!(status.success(), "{at}: {status:?}\n{stderr}");
        }
        if out.exists() {
            let now = tree(&out);
            if now != previous {
                let mut data = now.clone();
                data.remove("_etl/run.json");
                // Some run got to its commit: this one, or an earlier one whose interrupted
                // publish this one completed.
                assert!(clean.contains(&data), "{at}: the output is neither the previous one nor a complete one");
                previous = now;
                published += 1;
            }
        } else {
            assert!(fallback || interrupted > 0, "{at}: no output, without a fallback publish");
            let (new, old) = journaled_copies(&out);
            assert!(new.is_some() || old.is_some(), "{at}: no complete copy is left");
            if let Some(new) = new {
                assert!(clean.contains(&data_tree(&new)), "{at}: the journaled new output is not complete");
            }
            if let Some(old) = old {
                assert_eq!(tree(&old), previous, "{at}: the parked previous output changed");
            }
            interrupted += 1;
        }
    }
    let stats = reader.stop();
    eprintln!(
        "local_kill_9_at_random_points: {landed} kills landed in {attempts} runs; {published} outputs published, {interrupted} checks found a publish between its renames; reader: {stats:?}"
    );
    assert!(stats.violations.is_empty(), "a reader saw a partial output: {:?}", stats.violations);
    assert!(stats.complete > 0);

    // A re-run succeeds, matches a clean run, and leaves nothing of the killed runs behind.
    unwind(&[&inputs[1]], &out, &["-q"], 0);
    assert_eq!(data_tree(&out), clean[1]);
    assert_eq!(leftovers(tmp.path(), &["out", ".out.etl-lock"]).iter().filter(|n| n.contains("out.etl")).count(), 0);
}

/// What `out` holds after a kill at a commit step.
#[derive(Debug, PartialEq, Clone, Copy)]
enum After {
    Previous,
    /// Absent, with the publish journaled (between the fallback's renames).
    Between,
    New,
}

/// `kill -9` at every step of a commit, with the exchange and with the fallback. After each, a
/// reader sees the previous or the new output (or, between the fallback's renames, is told where
/// the complete copy is); the next run, even one that fails, completes or keeps the publish and
/// deletes no complete copy; a re-run matches a clean run.
#[test]
fn kill_9_at_every_commit_step() {
    let tmp = tempfile::tempdir().unwrap();
    let big = big_export();
    let clean_big = clean_run(big, &tmp.path().join("clean"));
    let steps: &[(bool, &str, After)] = &[
        (false, "staged", After::Previous),
        (false, "exchanged", After::New),
        (true, "staged", After::Previous),
        (true, "fallback-named", After::Previous),
        (true, "fallback-journaled", After::Previous),
        (true, "fallback-parked", After::Between),
        (true, "fallback-published", After::New),
        (true, "fallback-unjournaled", After::New),
    ];
    let empty = tmp.path().join("no-data");
    std::fs::create_dir(&empty).unwrap();
    for &(fallback, step, after) in steps {
        let dir = tmp.path().join(format!("{step}-{fallback}"));
        let out = dir.join("out");
        unwind(&[&sample_export()], &out, &["-q"], 0);
        let previous = tree(&out);
        let mut env = vec![("ETL_TEST_KILL_AT", step)];
        if fallback {
            env.push(FALLBACK);
        }
        let (status, stderr) = finish(spawn_unwind(big, &out, &env), CHILD_LIMIT);
        let at = format!("killed at `{step}` (fallback {fallback})");
        assert!(killed(&status), "{at}: the step was never reached: {status:?}\n{stderr}");
        match after {
            After::Previous => assert_eq!(tree(&out), previous, "{at}"),
            After::New => assert_eq!(data_tree(&out), clean_big, "{at}"),
            After::Between => {
                assert!(!out.exists(), "{at}");
                let (new, old) = journaled_copies(&out);
                assert_eq!(data_tree(new.as_ref().unwrap()), clean_big, "{at}");
                assert_eq!(tree(old.as_ref().unwrap()), previous, "{at}");
                // A reader never writes: it is told where the complete output is.
                let r = etl(["sql", "--data", s(&out), "select 1"]);
                assert_eq!(r.code, 2, "{at}: {}", r.stderr);
                assert!(r.stderr.contains("killed while publishing"), "{at}: {}", r.stderr);
                assert!(r.stderr.contains(s(new.as_ref().unwrap())), "{at}: names the copy: {}", r.stderr);
            }
        }
        // The next run fails (its input has no data), yet first completes the publish, if it
        // was decided, and deletes no complete copy.
        let r = etl(["unwind", "-q", s(&empty), "--out", s(&out)]);
        assert_eq!(r.code, 2, "{at}: a run over an empty folder must fail\n{}", r.stderr);
        let decided = fallback && !matches!(step, "staged" | "fallback-named") || after == After::New;
        if decided {
            assert_eq!(data_tree(&out), clean_big, "{at}: after a failing run");
        } else {
            assert_eq!(tree(&out), previous, "{at}: after a failing run");
        }
        assert_eq!(leftovers(&dir, &["out", ".out.etl-lock"]), Vec::<String>::new(), "{at}");
        // And a re-run matches a clean run.
        unwind(&[big], &out, &["-q"], 0);
        assert_eq!(data_tree(&out), clean_big, "{at}: re-run");
    }
}

/// Two runs writing one local output at once: the second fails at once (exit 1) naming the
/// first, which goes on and publishes.
#[test]
fn a_second_local_run_on_the_same_output_fails_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let clean_big = clean_run(big_export(), &tmp.path().join("clean"));
    unwind(&[&sample_export()], &out, &["-q"], 0);
    let go = tmp.path().join("go");
    let first = spawn_unwind(big_export(), &out, &[("ETL_TEST_PAUSE_AT", "staged"), ("ETL_TEST_PAUSE_FILE", s(&go))]);
    let first_pid = first.id();
    let reached = go.with_file_name("go.reached");
    let start = Instant::now();
    while !reached.exists() {
        assert!(start.elapsed() < CHILD_LIMIT, "the first run never got to its commit");
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = etl(["unwind", "-q", s(&sample_export()), "--out", s(&out)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("being written by another etl run"), "{}", r.stderr);
    assert!(r.stderr.contains(&format!("pid {first_pid}")), "names the holder: {}", r.stderr);
    assert!(r.stderr.contains("hint:"), "{}", r.stderr);
    std::fs::write(&go, "").unwrap();
    let (status, stderr) = finish(first, CHILD_LIMIT);
    assert!(status.success(), "{stderr}");
    assert_eq!(data_tree(&out), clean_big);
}

/// Readers during many exchanges (both publish paths) always see one whole output.
#[test]
fn readers_during_publishes_see_whole_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let inputs = [sample_export(), big_export().to_owned()];
    unwind(&[&inputs[0]], &out, &["-q"], 0);
    let reader = Reader::start(&out);
    for i in 0..8 {
        let env: &[(&str, &str)] = if i % 4 >= 2 { &[FALLBACK] } else { &[] };
        let (status, stderr) = finish(spawn_unwind(&inputs[i % 2], &out, env), CHILD_LIMIT);
        assert!(status.success(), "{stderr}");
    }
    let stats = reader.stop();
    eprintln!("readers_during_publishes_see_whole_outputs: {stats:?}");
    assert!(stats.violations.is_empty(), "{:?}", stats.violations);
    assert!(stats.complete > 0);
}

// --- Local I/O failures ----------------------------------------------------------------------

/// Whether this process may mount a tmpfs in a private mount namespace (root with `unshare`).
fn can_mount_tmpfs() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return false;
    }
    Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A full disk under the staging folder: a small tmpfs holding the previous output (mounted in
/// a private mount namespace, gone with it), or, where mounting is not allowed, a file-size
/// limit (`RLIMIT_FSIZE`, with `SIGXFSZ` ignored so writes fail with `EFBIG`).
#[test]
fn a_full_disk_fails_clearly_and_keeps_the_previous_output() {
    let tmp = tempfile::tempdir().unwrap();
    let prev = tmp.path().join("prev");
    unwind(&[&sample_export()], &prev, &["-q"], 0);
    let previous = tree(&prev);
    let prev_bytes: u64 = walk_sizes(&prev);
    let big = big_export();
    if can_mount_tmpfs() {
        eprintln!("a_full_disk: a {} KiB tmpfs in a private mount namespace", (prev_bytes + 256 * 1024) / 1024);
        let mnt = tmp.path().join("mnt");
        let host = tmp.path().join("host");
        std::fs::create_dir_all(host.join("after")).unwrap();
        std::fs::create_dir(&mnt).unwrap();
        let script = r#"set -e
mount -t tmpfs -o "size=$SIZE" tmpfs "$MNT"
cp -a "$PREV" "$MNT/out"
set +e
"$ETL" unwind -q --threads 2 "$SRC" --out "$MNT/out" 2>"$HOST/stderr"
echo $? >"$HOST/rc"
cp -a "$MNT/." "$HOST/after/"
"#;
        let status = Command::new("unshare")
            .args(["-m", "sh", "-c", script])
            .env("SIZE", (prev_bytes + 256 * 1024).to_string())
            .env("MNT", &mnt)
            .env("PREV", &prev)
            .env("ETL", env!("CARGO_BIN_EXE_etl"))
            .env("SRC", big)
            .env("HOST", &host)
            .env("NO_COLOR", "1")
            .status()
            .unwrap();
        assert!(status.success());
        let rc = std::fs::read_to_string(host.join("rc")).unwrap();
        let stderr = std::fs::read_to_string(host.join("stderr")).unwrap();
        assert_eq!(rc.trim(), "2", "{stderr}");
        assert!(stderr.contains("No space left on device"), "{stderr}");
        assert!(stderr.contains(s(&mnt)), "names where it failed: {stderr}");
        let after = host.join("after");
        assert_eq!(tree(&after.join("out")), previous);
        assert_eq!(leftovers(&after, &["out", ".out.etl-lock"]), Vec::<String>::new());
    } else {
        eprintln!("a_full_disk: no tmpfs allowed here; a file-size limit (RLIMIT_FSIZE) instead");
        let out = tmp.path().join("out");
        std::process::Command::new("cp").arg("-a").arg(&prev).arg(&out).status().unwrap();
        let limit = 64 * 1024;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_etl"));
        cmd.args(["unwind", "-q", "--threads", "2", "--out"]).arg(&out).arg(big).env("NO_COLOR", "1");
        // SAFETY: between fork and exec only async-signal-safe calls (setrlimit, signal).
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                Ok(())
            });
        }
        let (status, stderr) = finish(cmd.stderr(Stdio::piped()).spawn().unwrap(), CHILD_LIMIT);
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("File too large"), "{stderr}");
        assert_eq!(tree(&out), previous);
        assert_eq!(leftovers(tmp.path(), &["out", ".out.etl-lock", "prev", ".prev.etl-lock"]), Vec::<String>::new());
    }
}

fn walk_sizes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() { walk_sizes(&e.path()) } else { e.metadata().unwrap().len() }
        })
        .sum()
}

/// `EACCES` on the output's parent: a clear error naming the folder, with a hint; the previous
/// output stays. As root (who bypasses permissions) the run is made as `nobody`.
#[test]
fn eacces_on_the_output_parent_fails_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let parent = tmp.path().join("locked");
    let out = parent.join("out");
    unwind(&[&sample_export()], &out, &["-q"], 0);
    let previous = tree(&out);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // `nobody` may not reach the build folder (under root's home): a copy of the binary and of
    // the export it can read and run.
    let (bin, src) = if root {
        let bin = tmp.path().join("etl");
        std::fs::copy(env!("CARGO_BIN_EXE_etl"), &bin).unwrap();
        let src = tmp.path().join("src");
        assert!(Command::new("cp").arg("-a").arg(sample_export()).arg(&src).status().unwrap().success());
        assert!(Command::new("chmod").args(["-R", "a+rX"]).arg(&src).arg(&bin).status().unwrap().success());
        (bin, src)
    } else {
        (PathBuf::from(env!("CARGO_BIN_EXE_etl")), sample_export())
    };
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o555)).unwrap();
    for target in [out.clone(), parent.join("new")] {
        let mut cmd = Command::new(&bin);
        cmd.args(["unwind", "-q", "--out"]).arg(&target).arg(&src).env("NO_COLOR", "1");
        cmd.current_dir("/");
        if root {
            // SAFETY: between fork and exec only async-signal-safe calls (setgroups, setgid, setuid).
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let (status, stderr) = finish(cmd.stderr(Stdio::piped()).spawn().unwrap(), CHILD_LIMIT);
        assert_eq!(status.code(), Some(2), "{}: {stderr}", target.display());
        assert!(stderr.contains("Permission denied"), "{stderr}");
        assert!(stderr.contains(s(&parent)), "names the folder: {stderr}");
        assert!(stderr.contains("hint:") && stderr.contains("writable"), "{stderr}");
    }
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(tree(&out), previous);
    assert_eq!(leftovers(&parent, &["out", ".out.etl-lock"]), Vec::<String>::new());
}

/// A data file deleted while a run reads its export: the run either read it in time (and its
/// output matches a clean run) or fails naming the file, leaving the previous output.
#[test]
fn a_data_file_that_disappears_mid_run() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    make_sample(&src, 12000, 6, 11);
    let clean = clean_run(&src, &tmp.path().join("clean"));
    let full = time_run(&src, &tmp.path().join("timing"));
    let out = tmp.path().join("out");
    unwind(&[&sample_export()], &out, &["-q"], 0);
    let mut previous = tree(&out);
    let manifest = std::fs::read_dir(src.join("AWSDynamoDB")).unwrap().next().unwrap().unwrap().path();
    let keys: Vec<String> = std::fs::read_to_string(manifest.join("manifest-files.json"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Json>(l).unwrap()["dataFileS3Key"].as_str().unwrap().to_owned())
        .collect();
    let (mut failed, mut read_in_time) = (0, 0);
    // etl keeps local exports in `_etl/base/` before reading them and reads the kept copies, so a
    // file deleted after the run started is no longer missed; one deleted before it still is.
    let copy = tmp.path().join("copy-before");
    assert!(Command::new("cp").arg("-a").arg(&src).arg(&copy).status().unwrap().success());
    let victim = copy.join(keys.last().unwrap());
    std::fs::remove_file(&victim).unwrap();
    let (status, stderr) = finish(spawn_unwind(&copy, &out, &[]), CHILD_LIMIT);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("integrity check"), "{stderr}");
    assert!(stderr.contains(victim.file_name().unwrap().to_string_lossy().as_ref()), "{stderr}");
    assert_eq!(tree(&out), previous);
    for (i, fraction) in [0.02, 0.1, 0.25, 0.5, 0.75].into_iter().enumerate() {
        let copy = tmp.path().join(format!("copy-{i}"));
        assert!(Command::new("cp").arg("-a").arg(&src).arg(&copy).status().unwrap().success());
        // The last file of the manifest, read last.
        let victim = copy.join(keys.last().unwrap());
        let child = spawn_unwind(&copy, &out, &[]);
        std::thread::sleep(full.mul_f64(fraction));
        std::fs::remove_file(&victim).unwrap();
        let (status, stderr) = finish(child, CHILD_LIMIT);
        if status.success() {
            read_in_time += 1;
            assert_eq!(data_tree(&out), clean, "deleted at {fraction} of a run, after it was read");
            previous = tree(&out);
        } else {
            failed += 1;
            // Gone before planning (a missing file) or before its turn (vanished): both are the
            // export failing its manifest, exit 1.
            assert_eq!(status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("integrity check"), "{stderr}");
            let name = victim.file_name().unwrap().to_string_lossy();
            assert!(stderr.contains(name.as_ref()), "names the missing file {name}: {stderr}");
            assert_eq!(tree(&out), previous, "deleted at {fraction} of a run");
        }
    }
    // A deletion after the kept copy is made is harmless by design, so every mid-run case may have
    // read it in time; the deletion before the run above is the one that must fail.
    eprintln!("a_data_file_that_disappears_mid_run: {failed} runs failed clearly, {read_in_time} had read it in time");
}

// --- S3 --------------------------------------------------------------------------------------

/// One query whose answer changes with every table of the sample's schema.
const COUNTS: &str = r#"select (select count(*) from "user") as users, (select count(*) from "order") as orders, (select count(*) from order_item) as items, (select count(*) from product) as products, (select count(*) from review) as reviews"#;

/// What a reader of an S3 output sees: its `run.json` bytes, after checking that every file it
/// lists exists with its listed size.
fn s3_whole(m: &Moto, bucket: &str, prefix: &str) -> Vec<u8> {
    let report = s3_get(m, bucket, &format!("{prefix}_etl/run.json"));
    let json: Json = serde_json::from_slice(&report).expect("run.json is JSON");
    let sizes: BTreeMap<String, u64> =
        serde_json::from_str::<Vec<(String, u64)>>(&py(m, "s3.py", &["list", bucket, prefix, "--json"]))
            .unwrap()
            .into_iter()
            .collect();
    for t in json["tables"].as_array().unwrap() {
        for f in t["files"].as_array().unwrap() {
            let key = format!("{prefix}{}", f["path"].as_str().unwrap());
            assert_eq!(sizes.get(&key).copied(), f["bytes"].as_u64(), "run.json lists {key}: missing or another size");
        }
    }
    report
}

/// The answers of [`COUNTS`] over an output.
fn counts(m: &Moto, out: &str) -> String {
    etl_aws(m, &["sql", "--data", out, COUNTS, "--format", "csv"], 0).stdout
}

/// Objects of runs that are not the committed one nor the one it replaced (the exports kept in
/// `_etl/base/` belong to no run).
fn stale_objects(m: &Moto, bucket: &str, prefix: &str) -> Vec<String> {
    let report: Json = serde_json::from_slice(&s3_get(m, bucket, &format!("{prefix}_etl/run.json"))).unwrap();
    let keep: Vec<&str> =
        [report["run_id"].as_str(), report["replaces_run_id"].as_str()].into_iter().flatten().collect();
    let keys: Vec<(String, u64)> = serde_json::from_str(&py(m, "s3.py", &["list", bucket, prefix, "--json"])).unwrap();
    keys.into_iter()
        .map(|(k, _)| k)
        .filter(|k| !k.ends_with("_etl/run.json") && !k.contains("_etl/schema/") && !k.contains("_etl/base/"))
        .filter(|k| !keep.iter().any(|id| k.contains(id)))
        .collect()
}

struct S3Case {
    bucket: String,
    out_url: String,
    /// The COUNTS answers of the medium input, from a local run.
    want: String,
    medium: PathBuf,
    _tmp: tempfile::TempDir,
}

/// A bucket with a committed output of the sample at `o/`, and a medium input to publish over it.
fn s3_case(m: &Moto, tag: &str) -> S3Case {
    let tmp = tempfile::tempdir().unwrap();
    let medium = tmp.path().join("medium");
    make_sample(&medium, 5000, 4, 3);
    let local = tmp.path().join("local");
    unwind(&[&medium], &local, &["-q"], 0);
    let want = sql_csv(s(&local), &[COUNTS]);
    let bucket = unique(tag);
    py(m, "s3.py", &["mb", &bucket]);
    let out_url = format!("s3://{bucket}/o/");
    etl_aws(m, &["unwind", "-q", s(&sample_export()), "--out", &out_url], 0);
    S3Case { bucket, out_url, want, medium, _tmp: tmp }
}

/// `kill -9` at random points of S3 publishes (at least 10 landed) and at each publish step,
/// with a reader querying throughout: readers see the previous output or a new complete one,
/// never a mix; a re-run succeeds, matches a clean run and removes the killed runs' objects.
#[test]
fn s3_kill_9_at_random_points_and_steps() {
    let Some(m) = moto() else { return };
    let c = s3_case(m, "kill");
    let answers_a = counts(m, &c.out_url);
    assert_ne!(answers_a, c.want);
    let timing = format!("s3://{}/timing/", c.bucket);
    let (r, full) =
        run_limited(etl_cmd(m, &["unwind", "-q", s(&c.medium), "--out", &timing], Endpoint::Env, &[]), CHILD_LIMIT);
    assert_eq!(r.code, 0, "{}", r.stderr);

    // A reader querying the output all along: each answer is the old or the new one.
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let (stop, seen, url) = (stop.clone(), seen.clone(), c.out_url.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (r, _) = run_limited(
                    etl_cmd(m, &["sql", "--data", &url, COUNTS, "--format", "csv"], Endpoint::Env, &[]),
                    CHILD_LIMIT,
                );
                seen.lock().unwrap().push(if r.code == 0 {
                    r.stdout
                } else {
                    format!("exit {}: {}", r.code, r.stderr)
                });
            }
        })
    };

    let mut rng = Rng::new("s3_kill_9_at_random_points_and_steps");
    let mut previous = s3_whole(m, &c.bucket, "o/");
    let (mut landed, mut attempts) = (0, 0);
    let steps = ["s3-declared", "s3-uploaded", "s3-committed"];
    while landed < 10 + steps.len() {
        attempts += 1;
        assert!(attempts <= 30, "only {landed} of {attempts} kills landed while a run was running");
        let step = steps.get(landed.saturating_sub(10)).filter(|_| landed >= 10);
        let env: Vec<(&str, &str)> = step.map(|p| vec![("ETL_TEST_KILL_AT", *p)]).unwrap_or_default();
        // A row-group size of its own for each run: a run of what the output holds with the
        // same options would be a no-op, with nothing to kill.
        let rows = (50_000 + attempts).to_string();
        let args = ["unwind", "-q", s(&c.medium), "--out", &c.out_url, "--row-group-rows", &rows];
        let mut cmd = etl_cmd(m, &args, Endpoint::Env, &env);
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let delay = full.mul_f64(rng.unit() * 1.05);
        if step.is_none() {
            std::thread::sleep(delay);
            let _ = child.kill();
        }
        let (status, stderr) = finish(child, CHILD_LIMIT);
        let at = match step {
            Some(p) => format!("killed at `{p}`"),
            None => format!("killed after {delay:?} of {full:?}"),
        };
        if killed(&status) {
            landed += 1;
        } else {
            assert!(step.is_none() && status.success(), "{at}: {status:?}\n{stderr}");
        }
        let now = s3_whole(m, &c.bucket, "o/");
        if let Some(p) = step {
            assert_eq!(now != previous, *p == "s3-committed", "{at}: run.json changed only if the commit was made");
        }
        previous = now;
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    let seen = seen.lock().unwrap();
    let odd: Vec<&String> = seen.iter().filter(|a| **a != answers_a && **a != c.want).collect();
    eprintln!("s3_kill_9: {landed} kills landed in {attempts} runs; the reader queried {} times", seen.len());
    assert!(odd.is_empty(), "a reader saw neither the old nor the new output: {odd:?}");
    assert!(!seen.is_empty());

    // The next complete run succeeds, publishes the new data and removes the killed runs' files.
    etl_aws(m, &["unwind", "-q", s(&c.medium), "--out", &c.out_url, "--row-group-rows", "49999"], 0);
    assert_eq!(counts(m, &c.out_url), c.want);
    s3_whole(m, &c.bucket, "o/");
    assert_eq!(stale_objects(m, &c.bucket, "o/"), Vec::<String>::new());
}

/// Two runs publishing to one S3 output: the one whose commit comes second fails (exit 1) with a
/// clear message and removes its files; the winner's output stays whole and queryable.
#[test]
fn s3_two_runs_on_one_output() {
    let Some(m) = moto() else { return };
    let c = s3_case(m, "race");
    let tmp = tempfile::tempdir().unwrap();

    // Ordered: A pauses after its uploads; B runs start to end; A then tries to commit.
    let go = tmp.path().join("go");
    // (A runs what the output holds, with another row-group size: not a no-op.)
    let a = paused_unwind_with(
        m,
        &[s(&sample_export()), "--out", &c.out_url, "--row-group-rows", "50000"],
        "s3-uploaded",
        &go,
    );
    etl_aws(m, &["unwind", "-q", s(&c.medium), "--out", &c.out_url], 0);
    let winner = s3_whole(m, &c.bucket, "o/");
    std::fs::write(&go, "").unwrap();
    let (status, stderr) = finish(a, CHILD_LIMIT);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("was published by another run"), "{stderr}");
    assert!(stderr.contains("hint:"), "{stderr}");
    assert_eq!(s3_whole(m, &c.bucket, "o/"), winner, "the winner's output is intact");
    assert_eq!(counts(m, &c.out_url), c.want);

    // Started together, three times: never both fail, never a broken output.
    for round in 0..3 {
        // Each run with a row-group size of its own, so that neither is a no-op.
        let spawn = |src: &Path, rows: usize| {
            let rows = rows.to_string();
            etl_cmd(m, &["unwind", "-q", s(src), "--out", &c.out_url, "--row-group-rows", &rows], Endpoint::Env, &[])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (x, y) = (spawn(&c.medium, 50_001 + 2 * round), spawn(&c.medium, 50_002 + 2 * round));
        let ((sx, ex), (sy, ey)) = (finish(x, CHILD_LIMIT), finish(y, CHILD_LIMIT));
        let codes = [sx.code(), sy.code()];
        assert!(
            codes == [Some(0), Some(0)] || codes == [Some(0), Some(1)] || codes == [Some(1), Some(0)],
            "round {round}: {codes:?}\n{ex}\n{ey}"
        );
        for (code, err) in [(sx.code(), &ex), (sy.code(), &ey)] {
            if code == Some(1) {
                assert!(err.contains("was published by another run"), "{err}");
            }
        }
        s3_whole(m, &c.bucket, "o/");
        assert_eq!(counts(m, &c.out_url), c.want, "round {round}");
    }
}

/// A proxy in front of moto that injects faults (tests/aws/faultproxy.py), stopped by PID.
pub(crate) struct Proxy {
    child: Child,
    endpoint: String,
    log: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Proxy {
    pub(crate) fn start(m: &Moto, rules: Json) -> Proxy {
        let tmp = tempfile::tempdir().unwrap();
        let log = tmp.path().join("faults.log");
        let mut child = Command::new(&m.python)
            .arg(root().join("tests/aws/faultproxy.py"))
            .arg(&m.endpoint)
            .arg(&log)
            .arg(rules.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut port = String::new();
        let mut out = child.stdout.take().unwrap();
        let mut byte = [0u8; 1];
        while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            port.push(byte[0] as char);
        }
        assert!(!port.is_empty(), "the proxy did not start");
        Proxy { child, endpoint: format!("http://127.0.0.1:{}", port.trim()), log, _tmp: tmp }
    }

    /// The faults injected so far, one line each.
    pub(crate) fn injected(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    /// Every request the proxy received so far (faulted or not), one line each:
    /// `METHOD PATH target=… range=… if-match=… consistent=…`.
    pub(crate) fn requests(&self) -> Vec<String> {
        let mut log = self.log.clone().into_os_string();
        log.push(".requests");
        std::fs::read_to_string(log).unwrap_or_default().lines().map(str::to_owned).collect()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `etl ARGS` through the proxy.
pub(crate) fn etl_via(m: &Moto, p: &Proxy, args: &[&str]) -> Run {
    let mut cmd = etl_cmd(m, args, Endpoint::Env, &[]);
    cmd.env("AWS_ENDPOINT_URL", &p.endpoint);
    run_limited(cmd, CHILD_LIMIT).0
}

/// An S3 endpoint that answers 503 for a while, resets connections mid-body, drops the answer
/// to the commit, or fails the commit for good: each run retries to success or fails clearly,
/// and the output is always whole.
#[test]
fn s3_endpoint_faults() {
    let Some(m) = moto() else { return };
    let c = s3_case(m, "proxy");
    let b = &c.bucket;
    let run_json = format!("/{b}/o/_etl/run.json");
    let medium_url = format!("s3://{b}/in/");
    py(m, "upload.py", &[s(&c.medium), b, "in"]);
    let local_out = c._tmp.path().join("local");
    let want_local = data_tree(&local_out);
    let mut previous = s3_whole(m, b, "o/");

    // (1) Every request answered 503 for 1.5 s: retried with backoff, then published.
    let p = Proxy::start(m, serde_json::json!([{"method": "*", "path": "", "action": "status:503", "seconds": 1.5}]));
    let r = etl_via(m, &p, &["unwind", "-q", s(&c.medium), "--out", &c.out_url]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(p.injected().len() >= 2, "{:?}", p.injected());
    drop(p);
    let now = s3_whole(m, b, "o/");
    assert_ne!(now, previous);
    assert_eq!(counts(m, &c.out_url), c.want);
    previous = now;

    // (2) Data files of an S3 source cut off mid-body twice: read again, same output as local.
    let p = Proxy::start(
        m,
        serde_json::json!([{"method": "GET", "path": "/in/.*/data/", "action": "reset-mid-body", "times": 2}]),
    );
    let dir = c._tmp.path().join("from-s3");
    let r = etl_via(m, &p, &["unwind", "-q", &medium_url, "--out", s(&dir)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(p.injected().len(), 2, "{:?}", p.injected());
    drop(p);
    assert_eq!(without_base(data_tree(&dir)), without_base(want_local));

    // (3) Uploads reset before any answer, twice: retried, published.
    let p =
        Proxy::start(m, serde_json::json!([{"method": "PUT", "path": "\\.parquet", "action": "reset", "times": 2}]));
    let r = etl_via(m, &p, &["unwind", "-q", s(&sample_export()), "--out", &c.out_url]);
    assert!(p.injected().len() == 2, "{:?}", p.injected());
    drop(p);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let now = s3_whole(m, b, "o/");
    assert_ne!(now, previous);
    previous = now;

    // (4) The commit applied but its answer lost: the run reads the head back and succeeds.
    let p = Proxy::start(
        m,
        serde_json::json!([{"method": "PUT", "path": format!("^{run_json}$"), "action": "drop-response", "times": 1}]),
    );
    let r = etl_via(m, &p, &["unwind", "-q", s(&c.medium), "--out", &c.out_url]);
    assert_eq!(p.injected().len(), 1, "{:?}", p.injected());
    drop(p);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let now = s3_whole(m, b, "o/");
    assert_ne!(now, previous);
    assert_eq!(counts(m, &c.out_url), c.want);
    previous = now;

    // (5) The commit refused for good (500): a clear error, nothing published.
    let p = Proxy::start(
        m,
        serde_json::json!([{"method": "PUT", "path": format!("^{run_json}$"), "action": "status:500", "times": -1}]),
    );
    let r = etl_via(m, &p, &["unwind", "-q", s(&sample_export()), "--out", &c.out_url]);
    assert!(!p.injected().is_empty());
    drop(p);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("_etl/run.json"), "names what failed: {}", r.stderr);
    assert_eq!(s3_whole(m, b, "o/"), previous, "nothing was published");
    assert_eq!(counts(m, &c.out_url), c.want);

    // The next clean run removes what the failed one left (a run with other options: the same
    // ones would be a no-op, which leaves the runs that declared the head as their base).
    etl_aws(m, &["unwind", "-q", s(&c.medium), "--out", &c.out_url, "--row-group-rows", "50000"], 0);
    assert_eq!(stale_objects(m, b, "o/"), Vec::<String>::new());
}

/// DynamoDB throttling (`ProvisionedThroughputExceededException`, `ThrottlingException`)
/// answered by the proxy to some `Scan` calls of a live-table unwind: the run retries with
/// backoff and writes exactly the files an unthrottled run writes; every `Scan` after the first
/// carries the same request. Throttled for good, the run stops after `MAX_ATTEMPTS` (10) tries of
/// the one request with a clear error (exit 2), and publishes nothing.
#[test]
fn dynamodb_throttling_is_retried_then_fails_clearly() {
    let Some(m) = moto() else { return };
    // A small table of its own (moto scans slowly): a generated export loaded with boto3.
    let tmp = tempfile::tempdir().unwrap();
    let export = tmp.path().join("export");
    make_sample(&export, 8, 1, 5);
    let table = unique("throttle");
    let items: u64 = py(m, "load_table.py", &[&table, s(&export)]).trim().parse().unwrap();
    let src = format!("dynamodb://{table}");
    let scans = |p: &Proxy| p.requests().iter().filter(|l| l.contains("target=DynamoDB_20120810.Scan ")).count();

    // Unthrottled, through the proxy: the reference files and the number of Scan calls.
    let p = Proxy::start(m, serde_json::json!([]));
    let clean = tmp.path().join("clean");
    let r = etl_via(m, &p, &["unwind", "-q", &src, "--out", s(&clean), "--segments", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let pages = scans(&p);
    assert!(pages >= 2, "{:?}", p.requests());
    drop(p);
    crate::aws::assert_oracle_tables(&m.python, &format!("table:{table}"), &clean, items);

    let scan = "^DynamoDB_20120810\\.Scan$";
    let p = Proxy::start(
        m,
        serde_json::json!([
            {"method": "POST", "target": scan, "action": "dynamodb:ProvisionedThroughputExceededException", "times": 2},
            {"method": "POST", "target": scan, "action": "dynamodb:ThrottlingException", "times": 1},
        ]),
    );
    let out = tmp.path().join("throttled");
    let r = etl_via(m, &p, &["unwind", "-q", &src, "--out", s(&out), "--segments", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let injected = p.injected();
    assert_eq!(injected.len(), 3, "{injected:?}");
    assert_eq!(injected.iter().filter(|l| l.starts_with("dynamodb:ThrottlingException")).count(), 1, "{injected:?}");
    // The same pages as the clean run, plus one retry per injected fault.
    assert_eq!(scans(&p), pages + 3, "every throttled Scan was retried once: {:?}", p.requests());
    drop(p);
    assert_eq!(data_tree(&out), data_tree(&clean), "the throttled run wrote other files");

    // Throttled for good: MAX_ATTEMPTS tries, then a clear error naming the operation and a hint.
    let p = Proxy::start(
        m,
        serde_json::json!([{"method": "POST", "target": scan, "action": "dynamodb:ProvisionedThroughputExceededException", "times": -1}]),
    );
    let out = tmp.path().join("exhausted");
    let start = Instant::now();
    let r = etl_via(m, &p, &["unwind", "-q", &src, "--out", s(&out)]);
    let took = start.elapsed();
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(p.injected().len(), 10, "MAX_ATTEMPTS tries of the one Scan: {:?}", p.injected());
    assert!(r.stderr.contains("`Scan` was still throttled after 10 attempts"), "{}", r.stderr);
    assert!(r.stderr.contains("ProvisionedThroughputExceededException"), "{}", r.stderr);
    assert!(r.stderr.contains("hint: lower `--segments`"), "{}", r.stderr);
    assert!(!out.exists(), "nothing published");
    // Nine backoff pauses of standard mode (1 s base, doubling to 20 s, full jitter) are not
    // all near zero.
    assert!(took > Duration::from_secs(2), "ten tries took only {took:?}: no backoff");
    eprintln!("dynamodb throttling: 10 attempts took {took:?}");
}

/// S3 `503 SlowDown` answered to reads of an S3 source's data files: retried with backoff, the
/// output is the same as from local files; answered to every read, a clear error (exit 2) that
/// names the file, and nothing published.
#[test]
fn s3_slowdown_is_retried_then_fails_clearly() {
    let Some(m) = moto() else { return };
    let bucket = unique("slowdown");
    py(m, "upload.py", &[s(&sample_export()), &bucket, "in"]);
    let src = format!("s3://{bucket}/in/");
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    let want = clean_run(&sample_export(), &local);

    let data = format!("^/{bucket}/in/AWSDynamoDB/.*/data/.*\\.json\\.gz");
    let p =
        Proxy::start(m, serde_json::json!([{"method": "GET", "path": data, "action": "s3:503:SlowDown", "times": 3}]));
    let out = tmp.path().join("out");
    let r = etl_via(m, &p, &["unwind", "-q", &src, "--out", s(&out)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let injected = p.injected();
    assert_eq!(injected.len(), 3, "{injected:?}");
    // Each faulted GET was sent again: per key, the GETs number the successful ones plus faults.
    let data_get = |l: &String| {
        l.starts_with(&format!("GET /{bucket}/in/AWSDynamoDB/")) && l.contains("/data/") && l.contains(".json.gz ")
    };
    let gets: Vec<String> = p.requests().into_iter().filter(data_get).collect();
    assert!(gets.len() >= injected.len() + 4, "3 retries and 4 non-empty data files read: {gets:?}");
    drop(p);
    assert_eq!(without_base(data_tree(&out)), without_base(want.clone()), "the output differs from a local run's");

    let p =
        Proxy::start(m, serde_json::json!([{"method": "GET", "path": data, "action": "s3:503:SlowDown", "times": -1}]));
    let out = tmp.path().join("exhausted");
    let r = etl_via(m, &p, &["unwind", "-q", &src, "--out", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(p.injected().len() > 10, "retried before giving up: {:?}", p.injected());
    drop(p);
    assert!(r.stderr.contains(".json.gz"), "names the file: {}", r.stderr);
    assert!(r.stderr.contains("503") && r.stderr.contains("SlowDown"), "says why: {}", r.stderr);
    assert!(!r.stderr.contains("NOT RECONCILED") && !r.stderr.contains("corrupt"), "not a data problem: {}", r.stderr);
    assert!(!out.exists(), "nothing published");
}

/// Streams of an S3 source's data files cut mid-body (the proxy resets the connection after half
/// the body): each is read on from the bytes received (a ranged GET to the object's end;
/// `object_store` checks the object's ETag did not change) and the output is a local run's; cut
/// every time, the read gives up after its retries with a clear error naming the file (exit 2),
/// and nothing is published.
#[test]
fn s3_streams_resume_from_their_last_byte() {
    let Some(m) = moto() else { return };
    let bucket = unique("resume");
    py(m, "upload.py", &[s(&sample_export()), &bucket, "in"]);
    let src = format!("s3://{bucket}/in/");
    let tmp = tempfile::tempdir().unwrap();
    let want = clean_run(&sample_export(), &tmp.path().join("local"));
    let data = format!("^/{bucket}/in/AWSDynamoDB/.*/data/.*\\.json\\.gz");

    // Whole-object reads (no Range header: not the 4 KiB sniff of each file) cut twice.
    let p = Proxy::start(
        m,
        serde_json::json!([{"method": "GET", "path": data, "range": "^$", "action": "reset-mid-body", "times": 2}]),
    );
    let out = tmp.path().join("out");
    let r = etl_via(m, &p, &["unwind", "-q", &src, "--out", s(&out)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let injected = p.injected();
    assert_eq!(injected.len(), 2, "{injected:?}");
    // Each cut stream was read on with one ranged GET up to the object's end (its start is
    // the bytes received; for the sample's non-empty files half the body arrives first).
    let requests = p.requests();
    let mut starts = Vec::new();
    for cut in &injected {
        let path = cut.split(' ').nth(2).expect("the cut request's path");
        let whole = format!("GET {path} target= range= ");
        let at = requests.iter().position(|l| l.starts_with(&whole)).expect("the cut request in the log");
        let resumed: Vec<&String> = requests[at + 1..]
            .iter()
            .filter(|l| l.starts_with(&format!("GET {path} ")) && l.contains(" range=bytes="))
            .collect();
        assert_eq!(resumed.len(), 1, "{path} resumed once: {requests:?}");
        let range = resumed[0].split("range=bytes=").nth(1).unwrap().split(' ').next().unwrap();
        starts.push(range.split('-').next().unwrap().parse::<u64>().unwrap());
    }
    assert!(starts.iter().any(|&n| n > 0), "no read resumed past its first byte: {starts:?}\n{requests:?}");
    drop(p);
    assert_eq!(without_base(data_tree(&out)), without_base(want.clone()), "the output differs from a local run's");

    // Cut every time: a clear error after the resumes, nothing published.
    let p =
        Proxy::start(m, serde_json::json!([{"method": "GET", "path": data, "action": "reset-mid-body", "times": -1}]));
    let out = tmp.path().join("exhausted");
    let r = etl_via(m, &p, &["unwind", "-q", &src, "--out", s(&out)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(p.injected().len() >= 4, "resumed before giving up: {:?}", p.injected());
    drop(p);
    assert!(r.stderr.contains(".json.gz"), "names the file: {}", r.stderr);
    assert!(!out.exists(), "nothing published");
}

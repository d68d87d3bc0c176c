//! stdout and stderr as a pipeline sees them: a reader that leaves early (`| head`) is success,
//! and an unwritable stderr (closed, or a full device) never turns a run into a crash.

use std::process::Stdio;

use crate::common::*;

/// The marks of a crash or of a reported write failure, which a closed pipe must not leave.
fn assert_quiet_success(r: &ClosedRun, what: &str) {
    assert_eq!(r.code, 0, "{what}: exit {}\n{}", r.code, r.stderr);
    assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
    assert!(!r.stderr.contains("error"), "{what}: {}", r.stderr);
}

fn sql_args(query: &str) -> Vec<String> {
    vec!["sql".into(), "--data".into(), sample_out().to_string_lossy().into_owned(), query.into()]
}

#[test]
fn a_reader_that_leaves_early_is_success() {
    let sample = sample_export();
    let infer = || etl_command(["mapping".as_ref(), "infer".as_ref(), sample.as_os_str()]);
    // `etl mapping infer … | head -1`: the draft is smaller than a pipe's buffer, so close the
    // pipe before etl writes, or it would never notice.
    for lines in [0, 1] {
        let r = run_closing_stdout(infer(), b"", lines);
        assert_quiet_success(&r, &format!("mapping infer, {lines} lines read"));
        if lines == 1 {
            assert!(r.read[0].starts_with('#'), "the draft begins with its comment: {:?}", r.read);
        }
    }
    // `etl sql … | head -1` on a result much larger than a pipe's buffer: etl is mid-write when
    // the reader leaves.
    let big = r#"SELECT o.*, i.* FROM "order" o JOIN order_item i ON o.order_id = i.order_id"#;
    for format in ["csv", "table", "json", "ndjson"] {
        let mut args = sql_args(big);
        args.extend(["--format".into(), format.into()]);
        // `json` is one array on one line: reading its first line reads all of it.
        let reads: &[usize] = if format == "json" { &[0] } else { &[0, 1] };
        for &lines in reads {
            let r = run_closing_stdout(etl_command(&args), b"", lines);
            assert_quiet_success(&r, &format!("sql --format {format}, {lines} lines read"));
            assert!(
                !r.stderr.contains("rows in"),
                "sql --format {format}, {lines} lines read: stops at the closed pipe: {}",
                r.stderr
            );
        }
    }
    // The shell, on piped input: the first result is cut short and the shell ends there.
    let out = sample_out().to_string_lossy().into_owned();
    let shell = || etl_command(["sql", "--data", out.as_str()]);
    let input = format!("\\d\n{big};\nSELECT 1;\n");
    for lines in [0, 3] {
        let r = run_closing_stdout(shell(), input.as_bytes(), lines);
        assert_quiet_success(&r, &format!("the shell, {lines} lines read"));
    }
}

#[test]
fn a_failing_stdout_is_an_error() {
    // Not a closed pipe but a full device: the data is lost, which must not pass for success.
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let out =
        etl_command(sql_args(r#"SELECT * FROM order_item"#)).stdout(full).stderr(Stdio::piped()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error:") && !stderr.contains("panicked"), "{stderr}");
}

/// Runs `etl ARGS` with stderr unwritable in each way, and returns each exit status.
fn with_unwritable_stderr(args: &[&str]) -> Vec<(&'static str, Option<i32>)> {
    let mut codes = Vec::new();
    for how in ["/dev/full", "closed pipe"] {
        let mut cmd = etl_command(args);
        cmd.env("NO_COLOR", "1").stdin(Stdio::null()).stdout(Stdio::null());
        let status = if how == "/dev/full" {
            let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
            cmd.stderr(full).status().unwrap()
        } else {
            let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
            drop(child.stderr.take());
            child.wait().unwrap()
        };
        codes.push((how, status.code()));
    }
    codes
}

#[test]
fn an_unwritable_stderr_is_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let sample = sample_export();
    for (i, extra) in [&[][..], &["-v"][..]].iter().enumerate() {
        // A run that publishes, with its summary (and with -v its logs) going nowhere.
        let out = tmp.path().join(format!("out{i}"));
        let mut args = vec!["unwind", sample.to_str().unwrap(), "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        for (how, code) in with_unwritable_stderr(&args) {
            assert_eq!(code, Some(0), "unwind {extra:?} with stderr on {how}");
            assert!(out.join("_etl/run.json").is_file(), "published with stderr on {how}");
        }
    }
    // A run that fails keeps its exit status (2), not a panic's (101), when its error cannot be
    // shown; so does a policy failure (1).
    let missing = tmp.path().join("missing");
    let nowhere = tmp.path().join("x");
    for (how, code) in
        with_unwritable_stderr(&["unwind", missing.to_str().unwrap(), "--out", nowhere.to_str().unwrap()])
    {
        assert_eq!(code, Some(2), "a failing unwind with stderr on {how}");
    }
    let data = sample_out().to_str().unwrap().to_owned();
    // (A bare count of a cross join is answered from the files' statistics: filter on values.)
    let cross = "SELECT count(*) FROM order_item a, order_item b, order_item c WHERE a.quantity + b.quantity + c.quantity > 100";
    for (how, code) in with_unwritable_stderr(&["sql", "--data", &data, cross, "--timeout", "100ms"]) {
        assert_eq!(code, Some(1), "a timed-out query with stderr on {how}");
    }
    for (how, code) in with_unwritable_stderr(&["sql", "--data", &data, "SELECT 1"]) {
        assert_eq!(code, Some(0), "sql with its timing line lost on {how}");
    }
}

/// With `ETL_LOG=trace` the AWS SDK logs the credentials it signs with; the access key id must
/// reach stderr masked, whether it has the AWS shape (`AKIA…`) or is any configured id (an
/// S3-compatible store's, say). The endpoint refuses connections, so the requests are signed
/// (and logged) but go nowhere.
#[test]
fn logs_never_show_the_access_key_id() {
    let home = tempfile::tempdir().unwrap();
    let secret = "etl-test-secret-5d4c3b";
    for (key_id, masked) in [("AKIAFAKEFAKEFAKE1234", "AKIA****************"), ("my-store-key-42", "***************")] {
        let mut cmd = etl_command(["export", "list", "--table", "T", "--endpoint-url", "http://127.0.0.1:1"]);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(&k);
            }
        }
        cmd.env("AWS_ACCESS_KEY_ID", key_id)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_CONFIG_FILE", home.path().join("no-such-config"))
            .env("AWS_SHARED_CREDENTIALS_FILE", home.path().join("no-such-credentials"))
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("ETL_LOG", "trace")
            .env("NO_COLOR", "1");
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "nothing listens at the endpoint: {stderr}");
        // The log is there, and it is where the id would have been: in the signing credentials.
        assert!(stderr.len() > 10_000, "a trace log of the request: {} bytes", stderr.len());
        assert!(stderr.contains(&format!("access_key_id: \"{masked}\"")), "{key_id} masked in:\n{stderr}");
        for text in [&stdout, &stderr] {
            assert!(!text.contains(key_id), "{key_id} shown");
            assert!(!text.contains(secret), "the secret shown");
        }
    }
}

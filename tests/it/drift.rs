//! Schema drift across runs: a run that replaces an output lists how its tables' contracts
//! changed (`drift` in `_etl/run.json`, and the summary), `--on-drift fail` refuses any change
//! and leaves the previous output as it was (local and S3, with a mapping whose declared columns
//! change as without one), and `etl schema diff OLD NEW` prints the differences of two outputs
//! (as text, or `--format json`), exiting like diff(1).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};

use crate::common::*;
use crate::interop::python;

/// A full-export line of an item of entity `ty` with attributes `attrs` (raw DynamoDB JSON values).
fn line(ty: &str, pk: &str, attrs: &[(&str, &str)]) -> String {
    let mut body = vec![format!(r#""PK":{{"S":"{pk}"}}"#), format!(r#""Type":{{"S":"{ty}"}}"#)];
    body.extend(attrs.iter().map(|(k, v)| format!("{}:{v}", Json::String((*k).to_owned()))));
    format!("{{\"Item\":{{{}}}}}", body.join(","))
}

/// An export of `lines` (one data file) in `dir`.
fn export_of(dir: &Path, lines: &[String]) -> PathBuf {
    write_export(dir, &[gzip((lines.join("\n") + "\n").as_bytes())], &[lines.len() as u64])
}

/// The items of the four inputs of one table `w` whose column `n` widens run after run:
/// `int64`, then `decimal(38,2)` (and a new attribute `note`), then decimal text (a number of
/// 101 digits), then DynamoDB JSON text (a string among the numbers).
fn inputs() -> [Vec<String>; 4] {
    let n = |v: &str| format!(r#"{{"N":"{v}"}}"#);
    let base = vec![line("W", "a", &[("n", &n("1"))]), line("W", "b", &[("n", &n("-20"))])];
    let mut decimal = base.clone();
    decimal.push(line("W", "c", &[("n", &n("2.25")), ("note", r#"{"S":"hi"}"#)]));
    let mut text = decimal.clone();
    text.push(line("W", "d", &[("n", &n("1E+100"))]));
    let mut json = text.clone();
    json.push(line("W", "e", &[("n", r#"{"S":"many"}"#)]));
    [base, decimal, text, json]
}

/// Every file of an output by path relative to it, with its bytes.
fn snapshot(out: &Path) -> BTreeMap<String, Vec<u8>> {
    files_under(out)
        .into_iter()
        .map(|p| (p.strip_prefix(out).unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect()
}

/// pyarrow's and DuckDB's rows and types of table `w` in `out` (`tests/interop/read_back.py`).
fn read_back(py: &str, out: &Path) -> Json {
    let r = std::process::Command::new(py)
        .arg(root().join("tests/interop/read_back.py"))
        .arg(out)
        .arg("w")
        .output()
        .expect("run python");
    assert!(r.status.success(), "read_back.py failed: {}", String::from_utf8_lossy(&r.stderr));
    serde_json::from_slice::<Json>(&r.stdout).unwrap()["w"].clone()
}

fn row(pk: &str, n: &str, note: Option<&str>) -> String {
    let mut m = BTreeMap::from([("PK", pk.to_owned()), ("Type", "W".to_owned()), ("n", n.to_owned())]);
    if let Some(x) = note {
        m.insert("note", x.to_owned());
    }
    serde_json::to_string(&m).unwrap()
}

/// Four runs into one output: the first reports no drift (nothing to compare with), each next
/// one lists the column it widened (and the attribute it added), and the column holds every value
/// exactly at its new type, as etl, pyarrow and DuckDB read it.
#[test]
fn each_run_lists_its_drift_and_the_widened_column_is_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let py = python();
    let hundred = format!("1{}", "0".repeat(100));
    let json_of = |v: &str| format!(r#"{{"N":"{v}"}}"#);
    // Per run: the drift's changes, the summary lines, `n`'s type as pyarrow shows it, the rows.
    type Want = (Option<Json>, &'static [&'static str], &'static str, Vec<String>);
    let wants: [Want; 4] = [
        (None, &[], "int64", vec![row("a", "1", None), row("b", "-20", None)]),
        (
            Some(json!([
                {"change": "type", "column": "n", "kind": "widened", "from": "int64", "to": "decimal(38,2)"},
                {"change": "column_added", "column": "note", "ty": "string"},
            ])),
            &[
                "schema drift from the previous output: 1 column added, 1 column widened",
                "  table `w`:",
                "    column `n` widened: int64 -> decimal(38,2)",
                "    column `note` added: string",
            ],
            "decimal128(38, 2)",
            vec![row("a", "1", None), row("b", "-20", None), row("c", "2.25", Some("hi"))],
        ),
        (
            Some(json!([
                {"change": "type", "column": "n", "kind": "widened", "from": "decimal(38,2)", "to": "decimal-text"},
                {"change": "metadata", "column": "n", "path": "", "key": "dynamodb.type", "from": "N", "to": "N; encoding=decimal-text"},
            ])),
            &[
                "schema drift from the previous output: 1 column widened, 1 metadata change",
                "    column `n` widened: decimal(38,2) -> decimal-text",
                "    column `n` metadata `dynamodb.type`: `N` -> `N; encoding=decimal-text`",
            ],
            "string",
            vec![row("a", "1", None), row("b", "-20", None), row("c", "2.25", Some("hi")), row("d", &hundred, None)],
        ),
        (
            Some(json!([
                {"change": "type", "column": "n", "kind": "widened", "from": "decimal-text", "to": "json"},
                {"change": "metadata", "column": "n", "path": "", "key": "dynamodb.type", "from": "N; encoding=decimal-text", "to": "N|S; encoding=dynamodb-json"},
            ])),
            &["    column `n` widened: decimal-text -> json"],
            "string",
            vec![
                row("a", &json_of("1"), None),
                row("b", &json_of("-20"), None),
                row("c", &json_of("2.25"), Some("hi")),
                row("d", &json_of(&hundred), None),
                row("e", r#"{"S":"many"}"#, None),
            ],
        ),
    ];
    for (i, (lines, (changes, summary, pyarrow_type, rows))) in inputs().iter().zip(wants).enumerate() {
        let export = export_of(&tmp.path().join(format!("in{i}")), lines);
        let r = unwind(&[&export], &out, &[], 0);
        let report = run_report(&out);
        match changes {
            None => {
                assert!(report.get("drift").is_none(), "run {i}: a first run reports no drift: {}", report["drift"]);
                assert!(!r.stderr.contains("schema drift"), "run {i}: {}", r.stderr);
            }
            Some(c) => assert_eq!(report["drift"], json!({"tables": [{"table": "w", "changes": c}]}), "run {i}"),
        }
        for l in summary {
            assert!(r.stderr.lines().any(|x| x == *l), "run {i}: no line {l:?} in the summary:\n{}", r.stderr);
        }
        // The new output holds every value exactly at the new type.
        assert_eq!(canonical_rows(&out.join("w")), rows, "run {i}");
        if let Some(py) = &py {
            let got = read_back(py, &out);
            assert_eq!(got["pyarrow_types"]["n"], pyarrow_type, "run {i}");
            let want: Vec<Json> = rows.iter().cloned().map(Json::String).collect();
            assert_eq!(got["pyarrow_rows"].as_array().unwrap(), &want, "pyarrow, run {i}");
            assert_eq!(got["duckdb_rows"].as_array().unwrap(), &want, "duckdb, run {i}");
        }
    }
    // The same input again: a no-op; with another row-group size, written again, compared, and
    // nothing changed.
    let export = export_of(&tmp.path().join("again"), &inputs()[3]);
    let r = unwind(&[&export], &out, &[], 0);
    assert!(r.stderr.contains("nothing rewritten"), "{}", r.stderr);
    let r = unwind(&[&export], &out, &["--row-group-rows", "5000"], 0);
    assert_eq!(run_report(&out)["drift"], json!({"tables": []}));
    assert!(!r.stderr.contains("schema drift"), "{}", r.stderr);
}

/// `--on-drift fail`: a first run and a run without drift publish; a run with drift exits 1 with
/// the differences on stderr, publishes nothing and leaves every byte of the previous output.
#[test]
fn on_drift_fail_refuses_and_leaves_the_previous_output() {
    let tmp = tempfile::tempdir().unwrap();
    let parent = tmp.path().join("lake");
    std::fs::create_dir_all(&parent).unwrap();
    let out = parent.join("out");
    let [base, decimal, _, _] = inputs();
    let base = export_of(&tmp.path().join("base"), &base);
    let decimal = export_of(&tmp.path().join("decimal"), &decimal);
    unwind(&[&base], &out, &["--on-drift", "fail"], 0);
    // (Another row-group size: the same options would be a no-op, compared with nothing.)
    unwind(&[&base], &out, &["--on-drift", "fail", "--row-group-rows", "5000"], 0);
    assert_eq!(run_report(&out)["drift"], json!({"tables": []}));
    let before = snapshot(&out);
    let siblings = || {
        let mut v = std::fs::read_dir(&parent).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>();
        v.sort();
        v
    };
    let beside = siblings();
    let r = unwind(&[&decimal], &out, &["--on-drift", "fail"], 1);
    for l in [
        "schema drift (1 column added, 1 column widened):",
        "table `w`:",
        "  column `n` widened: int64 -> decimal(38,2)",
        "  column `note` added: string",
    ] {
        assert!(r.stderr.lines().any(|x| x == l), "no line {l:?} in:\n{}", r.stderr);
    }
    assert!(r.stderr.contains("`--on-drift fail` refuses it: nothing was published"), "{}", r.stderr);
    assert!(r.stderr.contains("hint: "), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(snapshot(&out) == before, "the previous output changed");
    assert_eq!(siblings(), beside, "a refused run left files beside the output");
    // Allowed (the default), the same run publishes and lists the drift.
    unwind(&[&decimal], &out, &[], 0);
    assert_eq!(run_report(&out)["drift"]["tables"][0]["table"], "w");
}

/// `--on-drift fail` on a Delta output (`--format delta`): the drifting run exits 1 with the
/// differences, commits no version of any table and leaves every byte (logs, data files,
/// `_etl/`); allowed, the same run commits the widened column as a new version of `w`, and
/// `--as-of 0` still reads the first.
#[test]
fn on_drift_fail_refuses_a_delta_output_and_commits_no_version() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lake");
    let [base, decimal, _, _] = inputs();
    let base = export_of(&tmp.path().join("base"), &base);
    // A later export of other contents has its own id (a Delta output keeps the exports it read,
    // by id, in `_etl/base/`).
    let decimal = write_export_id(
        &tmp.path().join("decimal"),
        &[gzip((decimal.join("\n") + "\n").as_bytes())],
        &[decimal.len() as u64],
        "DYNAMODB_JSON",
        "01790000000001-1b2c3d4e",
    );
    unwind(&[&base], &out, &["--format", "delta", "--on-drift", "fail"], 0);
    let log = out.join("w/_delta_log");
    let versions = || {
        let mut v: Vec<String> = std::fs::read_dir(&log)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        v.sort();
        v
    };
    assert_eq!(versions(), ["00000000000000000000.json"]);
    let before = snapshot(&out);
    let r = unwind(&[&decimal], &out, &["--format", "delta", "--on-drift", "fail"], 1);
    for l in ["table `w`:", "  column `n` widened: int64 -> decimal(38,2)", "  column `note` added: string"] {
        assert!(r.stderr.lines().any(|x| x == l), "no line {l:?} in:\n{}", r.stderr);
    }
    assert!(r.stderr.contains("`--on-drift fail` refuses it: nothing was published"), "{}", r.stderr);
    assert!(snapshot(&out) == before, "a refused run changed the Delta output");

    unwind(&[&decimal], &out, &["--format", "delta"], 0);
    assert_eq!(versions().len(), 2, "the allowed run is one new version of `w`");
    assert_eq!(run_report(&out)["drift"]["tables"][0]["changes"][0]["to"], "decimal(38,2)");
    let data = out.to_str().unwrap();
    let query = r#"SELECT "PK", CAST(n AS VARCHAR) AS n, note FROM w ORDER BY "PK""#;
    assert_eq!(sql_csv(data, &[query]), "PK,n,note\na,1.00,\nb,-20.00,\nc,2.25,hi\n");
    let first = sql_csv(data, &["--as-of", "0", r#"SELECT "PK", n FROM w ORDER BY "PK""#]);
    assert_eq!(first, "PK,n\na,1\nb,-20\n");
}

/// A bug's fixture: a Delta output keeps the exports it read in `_etl/base/`, by export id, and
/// took the kept file for a new export's file of the same name, so a second export under a
/// reused id (other contents) was read as the first: MD5 and count mismatches, and the old rows
/// published again. Now the kept copy is used only when it holds the same bytes.
#[test]
fn a_reused_export_id_on_a_delta_output_reads_the_new_export() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("lake");
    let [base, decimal, _, _] = inputs();
    let base = export_of(&tmp.path().join("base"), &base);
    let decimal = export_of(&tmp.path().join("decimal"), &decimal);
    assert_eq!(base.file_name(), decimal.file_name(), "one export id for both");
    unwind(&[&base], &out, &["--format", "delta"], 0);
    let r = unwind(&[&decimal], &out, &["--format", "delta"], 0);
    assert!(!r.stderr.contains("NOT RECONCILED"), "{}", r.stderr);
    let report = run_report(&out);
    assert_eq!(report["reconciliation"]["items_read"], 3, "{report}");
    assert_eq!(report["drift"]["tables"][0]["changes"][0]["to"], "decimal(38,2)", "{report}");
}

/// A mapping of entity `W` (table `w`, key `PK = "W#{id}"`) whose extra columns are `extra`.
fn mapping(dir: &Path, name: &str, extra: &str) -> PathBuf {
    let path = dir.join(name);
    let text = format!(
        "[settings]\ntype_attribute = \"Type\"\n\n[entity.W]\ntable = \"w\"\nkeys = {{ PK = \"W#{{id}}\" }}\ncolumns = [\n  {{ name = \"id\", required = true }},\n{extra}]\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// With `--mapping`: a re-run whose mapping adds a column and declares another type for one is
/// drift like any other; `--on-drift fail` refuses it (exit 1, the changes on stderr, every byte
/// of the output left), and allowed, the run publishes and lists the changes.
#[test]
fn a_mapping_that_changes_the_columns_is_drift() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let n = |v: &str| format!(r#"{{"N":"{v}"}}"#);
    let lines =
        vec![line("W", "W#a", &[("n", &n("1")), ("note", r#"{"S":"hi"}"#)]), line("W", "W#b", &[("n", &n("-20"))])];
    let export = export_of(&tmp.path().join("in"), &lines);
    let old = mapping(tmp.path(), "old.toml", "  { name = \"n\", type = \"int64\" },\n");
    let new = mapping(
        tmp.path(),
        "new.toml",
        "  { name = \"n\", type = \"decimal(38,2)\" },\n  { name = \"note\", type = \"string\" },\n",
    );
    let with = |m: &Path| ["--mapping".to_owned(), m.to_str().unwrap().to_owned()];
    let [a, b] = with(&old);
    unwind(&[&export], &out, &[&a, &b, "--on-drift", "fail"], 0);
    // (Another row-group size: the same options would be a no-op, compared with nothing.)
    unwind(&[&export], &out, &[&a, &b, "--on-drift", "fail", "--row-group-rows", "5000"], 0);
    assert_eq!(run_report(&out)["drift"], json!({"tables": []}));
    let before = snapshot(&out);
    let [a, b] = with(&new);
    let r = unwind(&[&export], &out, &[&a, &b, "--on-drift", "fail"], 1);
    for l in ["table `w`:", "  column `n` widened: int64 -> decimal(38,2)", "  column `note` added: string"] {
        assert!(r.stderr.lines().any(|x| x == l), "no line {l:?} in:\n{}", r.stderr);
    }
    assert!(r.stderr.contains("`--on-drift fail` refuses it: nothing was published"), "{}", r.stderr);
    assert!(snapshot(&out) == before, "the previous output changed");
    unwind(&[&export], &out, &[&a, &b], 0);
    let changes = &run_report(&out)["drift"]["tables"][0];
    assert_eq!(changes["table"], "w", "{changes}");
    let kinds: Vec<&str> = changes["changes"].as_array().unwrap().iter().filter_map(|c| c["column"].as_str()).collect();
    assert!(kinds.contains(&"n") && kinds.contains(&"note"), "{changes}");
}

/// `etl schema diff`: per table on stdout, exit 0 when equal, 1 when different, 2 when an
/// output cannot be read; a closed stdout is not an error.
#[test]
fn schema_diff_prints_per_table_and_exits_like_diff() {
    let tmp = tempfile::tempdir().unwrap();
    let [base, decimal, _, _] = inputs();
    let mut old = base.clone();
    old.push(line("X", "x1", &[("flag", r#"{"BOOL":true}"#)]));
    old.push(line("V", "v1", &[("name", r#"{"S":"v"}"#), ("tags", r#"{"SS":["a"]}"#)]));
    let mut new = decimal.clone();
    new.push(line("V", "v1", &[("name", r#"{"N":"7"}"#), ("tags", r#"{"SS":["a"]}"#)]));
    new.push(line("V", "v2", &[("tags", r#"{"NULL":true}"#)]));
    new.push(line("Y", "y1", &[("at", r#"{"N":"5"}"#)]));
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    unwind(&[&export_of(&tmp.path().join("in-a"), &old)], &a, &[], 0);
    unwind(&[&export_of(&tmp.path().join("in-b"), &new)], &b, &[], 0);
    let diff = |x: &Path, y: &Path| etl(["schema", "diff", x.to_str().unwrap(), y.to_str().unwrap()]);

    let r = diff(&a, &b);
    assert_eq!(r.code, 1, "{}", r.stderr);
    insta::assert_snapshot!("schema_diff_old_new", r.stdout);
    assert!(r.stderr.contains("in 4 of the tables"), "{}", r.stderr);
    let r = diff(&b, &a);
    assert_eq!(r.code, 1, "{}", r.stderr);
    insta::assert_snapshot!("schema_diff_new_old", r.stdout);

    let r = diff(&a, &a);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{}", r.stderr);
    assert!(r.stderr.contains("are the same"), "{}", r.stderr);

    let r = diff(&a, tmp.path());
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is not an etl output"), "{}", r.stderr);

    let closed = run_closing_stdout(etl_command(["schema", "diff", a.to_str().unwrap(), b.to_str().unwrap()]), b"", 0);
    assert_eq!(closed.code, 1, "{}", closed.stderr);
    assert!(!closed.stderr.contains("error"), "{}", closed.stderr);
}

/// `etl schema diff --format json`: the same facts as the text form, as one JSON object (the
/// `drift` of `_etl/run.json`), with the same exit statuses; `{"tables": []}` when the same.
#[test]
fn schema_diff_as_json() {
    let tmp = tempfile::tempdir().unwrap();
    let [base, decimal, _, _] = inputs();
    let mut new = decimal.clone();
    new.push(line("Y", "y1", &[("at", r#"{"N":"5"}"#)]));
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    unwind(&[&export_of(&tmp.path().join("in-a"), &base)], &a, &[], 0);
    unwind(&[&export_of(&tmp.path().join("in-b"), &new)], &b, &[], 0);
    let diff = |x: &Path, y: &Path, format: &str| {
        etl(["schema", "diff", x.to_str().unwrap(), y.to_str().unwrap(), "--format", format])
    };
    let r = diff(&a, &b, "json");
    assert_eq!(r.code, 1, "{}", r.stderr);
    insta::assert_snapshot!("schema_diff_json", r.stdout);
    let parsed: Json = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(parsed["tables"].as_array().map(Vec::len), Some(2), "{parsed}");
    // The run that replaces `a` with `b`'s input lists the same drift in its report.
    unwind(&[&export_of(&tmp.path().join("in-b2"), &new)], &a, &[], 0);
    assert_eq!(run_report(&a)["drift"], parsed);
    let text = diff(&b, &tmp.path().join("a"), "text");
    assert_eq!((text.code, text.stdout.as_str()), (0, ""), "{}", text.stderr);
    let same = diff(&a, &b, "json");
    assert_eq!(same.code, 0, "{}", same.stderr);
    assert_eq!(serde_json::from_str::<Json>(&same.stdout).unwrap(), json!({"tables": []}));
    let r = diff(&a, tmp.path(), "json");
    assert_eq!((r.code, r.stdout.as_str()), (2, ""), "{}", r.stderr);
}

/// The same on S3 (moto): `--on-drift fail` leaves every object of the previous run, the allowed
/// run lists the drift in its `run.json`, and `etl schema diff` compares a local output with an
/// `s3://` one.
#[test]
fn drift_on_s3() {
    use crate::aws::{etl_aws, moto, py, s, s3_keys, s3_report, unique};
    let Some(m) = moto() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let [base, decimal, _, _] = inputs();
    let base = export_of(&tmp.path().join("base"), &base);
    let decimal = export_of(&tmp.path().join("decimal"), &decimal);
    let bucket = unique("drift");
    py(m, "s3.py", &["mb", &bucket]);
    let out_url = format!("s3://{bucket}/out/");
    etl_aws(m, &["unwind", s(&base), "--out", &out_url, "--on-drift", "fail"], 0);
    assert!(s3_report(m, &bucket, "out/").get("drift").is_none());
    let before = s3_keys(m, &bucket, "out/");
    let head = crate::aws::s3_get(m, &bucket, "out/_etl/run.json");
    let r = etl_aws(m, &["unwind", s(&decimal), "--out", &out_url, "--on-drift", "fail"], 1);
    assert!(r.stderr.contains("  column `n` widened: int64 -> decimal(38,2)"), "{}", r.stderr);
    assert_eq!(s3_keys(m, &bucket, "out/"), before, "a refused run changed the objects");
    assert_eq!(crate::aws::s3_get(m, &bucket, "out/_etl/run.json"), head);

    // A local output of the same base: no difference with the S3 one.
    let local = tmp.path().join("local");
    unwind(&[&base], &local, &[], 0);
    let r = etl_aws(m, &["schema", "diff", s(&local), &out_url], 0);
    assert_eq!(r.stdout, "");

    etl_aws(m, &["unwind", s(&decimal), "--out", &out_url], 0);
    let drift = &s3_report(m, &bucket, "out/")["drift"];
    assert_eq!(drift["tables"][0]["changes"][0]["to"], "decimal(38,2)", "{drift}");
    let r = etl_aws(m, &["schema", "diff", s(&local), &out_url], 1);
    assert_eq!(r.stdout, "table `w`:\n  column `n` widened: int64 -> decimal(38,2)\n  column `note` added: string\n");
}

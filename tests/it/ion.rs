//! Amazon Ion exports: the same items as DynamoDB JSON and as Ion unwind to the same bytes; an
//! independent Ion implementation (`amazon.ion` in the test venv) reads our Ion and writes Ion we
//! read; every bad Ion line is one reject and nothing else is lost; random items written as Ion
//! decode to what their DynamoDB JSON decodes to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use datafusion::arrow::array::{Array, Int64Array, StringArray};
use etl::decode::{self, Format, Item, Record, Value};
use proptest::prelude::*;

use crate::common::*;
use crate::interop::python;

/// `etl sample --format FORMAT` into `dir`; returns the export folder.
fn sample(dir: &Path, format: &str, users: &str) -> PathBuf {
    let r = etl(["sample", "--out", dir.to_str().unwrap(), "--users", users, "--files", "3", "--format", format]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let root = dir.join("AWSDynamoDB");
    let mut ids: Vec<PathBuf> = std::fs::read_dir(&root).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(ids.len(), 1);
    ids.pop().unwrap()
}

fn data_files(export: &Path, ext: &str) -> Vec<PathBuf> {
    files_under(&export.join("data")).into_iter().filter(|p| p.to_string_lossy().ends_with(ext)).collect()
}

/// Every Parquet file and `_etl/schema*` file under `out`, by path relative to it.
fn published(out: &Path) -> BTreeMap<String, Vec<u8>> {
    files_under(out)
        .into_iter()
        .map(|p| (p.strip_prefix(out).unwrap().to_string_lossy().into_owned(), p))
        .filter(|(rel, _)| rel.ends_with(".parquet") || rel.starts_with("_etl/schema"))
        .map(|(rel, p)| {
            let bytes = std::fs::read(&p).unwrap();
            (rel, bytes)
        })
        .collect()
}

#[test]
fn json_and_ion_samples_unwind_to_byte_identical_tables() {
    let tmp = tempfile::tempdir().unwrap();
    let json = sample(&tmp.path().join("json"), "dynamodb-json", "120");
    let ion = sample(&tmp.path().join("ion"), "ion", "120");
    // The same export, told apart only by format.
    let summary = std::fs::read_to_string(ion.join("manifest-summary.json")).unwrap();
    assert!(summary.contains("\"outputFormat\":\"ION\""), "{summary}");
    let ion_files = data_files(&ion, ".ion.gz");
    assert_eq!(ion_files.len(), 4, "three data files and the empty one");
    assert!(data_files(&ion, ".json.gz").is_empty());
    let first = gzip_text(&ion_files.iter().map(|p| std::fs::read(p).unwrap()).find(|b| b.len() > 20).unwrap());
    assert!(first.starts_with("$ion_1_0 {Item:{"), "{}", &first[..80.min(first.len())]);

    let (a, b) = (tmp.path().join("out-json"), tmp.path().join("out-ion"));
    unwind(&[&json], &a, &[], 0);
    let run = unwind(&[&ion], &b, &[], 0);
    assert!(run.stderr.contains("every item accounted for"), "{}", run.stderr);
    let (ta, tb) = (published(&a), published(&b));
    assert!(ta.keys().any(|k| k.starts_with("_etl/schema")), "no schema in {:?}", ta.keys());
    assert!(ta.keys().filter(|k| k.ends_with(".parquet")).count() >= 5, "{:?}", ta.keys());
    assert_eq!(ta.keys().collect::<Vec<_>>(), tb.keys().collect::<Vec<_>>());
    for (rel, bytes) in &ta {
        assert!(bytes == &tb[rel], "`{rel}` differs between the JSON and the Ion export");
    }
    let report = run_report(&b);
    assert_eq!(report["reconciliation"]["matches_manifest"], true, "{}", report["reconciliation"]);
    let inputs = report["inputs"].as_array().unwrap();
    assert!(inputs.iter().all(|i| i["layout"] == "ion_lines" && i["md5_check"] == "verified"), "{inputs:?}");
}

fn gzip_text(bytes: &[u8]) -> String {
    use std::io::Read as _;
    let mut s = String::new();
    flate2::read::MultiGzDecoder::new(bytes).read_to_string(&mut s).unwrap();
    s
}

/// Decodes every line of DynamoDB JSON text into items.
fn json_items(text: &str) -> Vec<Item<'static>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match decode::decode(Format::ExportJson, l.as_bytes()) {
            Ok(Record::Put(item)) => item.into_iter().map(|(k, v)| (k.into_owned().into(), owned(v))).collect(),
            other => panic!("not an item: {other:?}\n{l}"),
        })
        .collect()
}

fn owned(v: Value<'_>) -> Value<'static> {
    match v {
        Value::S(s) => Value::S(s.into_owned().into()),
        Value::N(n) => Value::N(n.into_owned()),
        Value::B(b) => Value::B(b.into_owned().into()),
        Value::Bool(b) => Value::Bool(b),
        Value::Null => Value::Null,
        Value::SS(v) => Value::SS(v.into_iter().map(|s| s.into_owned().into()).collect()),
        Value::NS(v) => Value::NS(v.into_iter().map(|n| n.into_owned()).collect()),
        Value::BS(v) => Value::BS(v.into_iter().map(|b| b.into_owned().into()).collect()),
        Value::L(v) => Value::L(v.into_iter().map(owned).collect()),
        Value::M(v) => Value::M(v.into_iter().map(|(k, v)| (k.into_owned().into(), owned(v))).collect()),
    }
}

#[test]
fn amazon_ion_reads_our_ion_and_writes_ion_we_read() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let json = sample(&tmp.path().join("json"), "dynamodb-json", "40");
    let ion = sample(&tmp.path().join("ion"), "ion", "40");
    let script = root().join("tests/interop/ion_xcheck.py");

    // `amazon.ion` reads every line we wrote as the same items as the JSON export.
    let ion_files = data_files(&ion, ".ion.gz");
    let json_files = data_files(&json, ".json.gz");
    let r = std::process::Command::new(&py).arg(&script).arg("read").args(&ion_files).output().unwrap();
    assert!(r.status.success(), "ion_xcheck.py read: {}", String::from_utf8_lossy(&r.stderr));
    let theirs = json_items(std::str::from_utf8(&r.stdout).unwrap());
    let ours: Vec<Item<'static>> =
        json_files.iter().flat_map(|p| json_items(&gzip_text(&std::fs::read(p).unwrap()))).collect();
    assert!(ours.len() > 100, "{}", ours.len());
    assert_eq!(theirs, ours);

    // Ion written by `amazon.ion` (its own number and field-name forms) unwinds to the same tables.
    let written = tmp.path().join("by-amazon-ion");
    std::fs::create_dir_all(&written).unwrap();
    for (i, f) in json_files.iter().enumerate() {
        let dst = written.join(format!("part-{i}.ion.gz"));
        let r = std::process::Command::new(&py).arg(&script).arg("write").arg(f).arg(&dst).output().unwrap();
        assert!(r.status.success(), "ion_xcheck.py write: {}", String::from_utf8_lossy(&r.stderr));
    }
    let text = gzip_text(&std::fs::read(written.join("part-0.ion.gz")).unwrap());
    assert!(text.contains("d+") || text.contains("d0") || text.contains("d-"), "{}", &text[..200.min(text.len())]);
    let (a, b) = (tmp.path().join("out-json"), tmp.path().join("out-theirs"));
    unwind(&[&json.join("data")], &a, &[], 0);
    unwind(&[&written], &b, &[], 0);
    for t in ["user", "order", "order_item", "product", "review"] {
        assert_eq!(canonical_rows(&b.join(t)), canonical_rows(&a.join(t)), "table {t}");
    }
}

fn good(i: usize) -> String {
    format!(r#"$ion_1_0 {{Item:{{PK:"USER#{i}",SK:"PROFILE",Type:"User",n:{i}.5}}}}"#)
}

/// (line, expected reason): each line is something DynamoDB could never have exported as Ion.
fn bad_lines() -> Vec<(Vec<u8>, &'static str)> {
    let deep = {
        let mut v = r#""leaf""#.to_owned();
        for _ in 1..33 {
            v = format!("[{v}]");
        }
        format!(r#"{{Item:{{PK:"deep",deep:{v}}}}}"#)
    };
    let huge = format!(r#"{{Item:{{PK:"big",blob:"{}"}}}}"#, "x".repeat(420 * 1024));
    let mut invalid_utf8 = br#"$ion_1_0 {Item:{PK:"bad "#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe]);
    invalid_utf8.extend_from_slice(br#""}}"#);
    let line = |s: &str| s.as_bytes().to_vec();
    vec![
        (line(r#"$ion_1_0 {Item:{PK:"f",a:1.5e0}}"#), "unexported_ion_type"),
        (line(r#"$ion_1_0 {Item:{PK:"t",a:2026-12-01T10:00:00Z}}"#), "unexported_ion_type"),
        (line(r#"$ion_1_0 {Item:{PK:"sym",a:gold}}"#), "unexported_ion_type"),
        (line(r#"$ion_1_0 {Item:{PK:"clob",a:{{"text"}}}}"#), "unexported_ion_type"),
        (line(r#"$ion_1_0 {Item:{PK:"tnull",a:null.string}}"#), "unexported_ion_type"),
        (line(r#"$ion_1_0 {Item:{PK:"sexp",a:(+ 1 2)}}"#), "unexported_ion_type"),
        (line(r#"$ion_1_0 {Item:{PK:"ann",a:$dynamodb_XS::["a"]}}"#), "bad_annotation"),
        (line(r#"$ion_1_0 {Item:{PK:"nest",a:$dynamodb_SS::[$dynamodb_SS::["a"]]}}"#), "bad_annotation"),
        (line(r#"$ion_1_0 {Item:{PK:"mixed",a:$dynamodb_NS::[1.,"2"]}}"#), "wrong_value_shape"),
        (line(r#"$ion_1_0 {Item:{PK:"empty",a:$dynamodb_SS::[]}}"#), "empty_set"),
        (line(r#"$ion_1_0 {Item:{PK:"dupset",a:$dynamodb_NS::[1.,10d-1]}}"#), "duplicate_set_member"),
        (line(r#"$ion_1_0 {Item:{PK:"x",PK:"y"}}"#), "duplicate_attribute"),
        (line(deep.as_str()), "too_deep"),
        (line(huge.as_str()), "item_too_large"),
        (line(r#"$ion_1_0 {Item:{PK:"range",a:1d126}}"#), "number_out_of_range"),
        (line(r#"$ion_1_0 {Item:{PK:"d39",a:123456789012345678901234567890123456789.}}"#), "too_many_digits"),
        (line(r#"$ion_1_0 {Item:{PK:"trunc",n:1"#), "invalid_ion"),
        (line(r#"$ion_1_0 {Item:{PK:"tru"#), "invalid_ion"),
        (invalid_utf8, "invalid_utf8"),
        (line(r#"$ion_1_0 {Item:{}}"#), "empty_item"),
        (line(r#"$ion_1_0 {Foo:{PK:"x"}}"#), "not_an_item"),
        (line(r#"$ion_1_0 {Item:{PK:"a"}} {Item:{PK:"b"}}"#), "not_an_item"),
        (line(r#"$ion_1_0 {Metadata:{WriteTimestampMicros:1},Keys:{PK:"x"}}"#), "incremental_record"),
    ]
}

#[test]
fn every_bad_ion_line_becomes_one_reject_and_nothing_else_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = bad_lines();
    assert!(bad.len() >= 15);
    let mut data = Vec::new();
    for (i, (line, _)) in bad.iter().enumerate() {
        data.extend_from_slice(good(i).as_bytes());
        data.push(b'\n');
        data.extend_from_slice(line);
        data.push(b'\n');
    }
    let items = 2 * bad.len() as u64;
    let export = write_export_as(tmp.path(), &[gzip(&data)], &[items], "ION");
    let out = tmp.path().join("out");
    let run = unwind(&[&export], &out, &["--max-line-bytes", "1000000"], 0);
    assert!(run.stderr.contains("every item accounted for"), "{}", run.stderr);
    assert_eq!(count_rows(&out.join("user")), bad.len());

    let (_, batches) = read_table(&out.join("_rejects"));
    let b = &batches[0];
    assert_eq!(b.num_rows(), bad.len());
    let col = |n: &str| b.column_by_name(n).unwrap().clone();
    let reasons = col("reason");
    let reasons = reasons.as_any().downcast_ref::<StringArray>().unwrap();
    let lines = col("line");
    let lines = lines.as_any().downcast_ref::<Int64Array>().unwrap();
    let raw = col("raw");
    let raw = raw.as_any().downcast_ref::<StringArray>().unwrap();
    for (i, (line, reason)) in bad.iter().enumerate() {
        assert_eq!(reasons.value(i), *reason, "reject {i}: {}", String::from_utf8_lossy(&line[..line.len().min(80)]));
        assert_eq!(lines.value(i), 2 * i as i64 + 2, "line of reject {i}");
        if line.len() < 1000 && *reason != "invalid_utf8" {
            assert_eq!(raw.value(i), std::str::from_utf8(line).unwrap(), "raw line of reject {i}");
        }
    }
    let report = run_report(&out);
    assert_eq!(report["reconciliation"]["items_read"].as_u64(), Some(items));
    assert_eq!(report["reconciliation"]["matches_manifest"], true);
}

#[test]
fn format_and_file_names_must_agree() {
    let tmp = tempfile::tempdir().unwrap();
    let data = gzip(format!("{}\n", good(1)).as_bytes());
    // An Ion export whose data files are named `.json.gz`: one of the two was edited.
    let export = write_export_as(&tmp.path().join("a"), std::slice::from_ref(&data), &[1], "DYNAMODB_JSON");
    let sp = export.join("manifest-summary.json");
    let s = std::fs::read_to_string(&sp).unwrap().replace("DYNAMODB_JSON", "ION");
    std::fs::write(&sp, &s).unwrap();
    std::fs::write(export.join("manifest-summary.md5"), md5_b64(s.as_bytes())).unwrap();
    let run = unwind(&[&export], &tmp.path().join("o1"), &[], 2);
    assert!(run.stderr.contains("`outputFormat` is `ION`, whose data files end in `.ion.gz`"), "{}", run.stderr);
    // A bare `.ion.gz` file is read as Ion, a bare `.ion` file too.
    let bare = tmp.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::write(bare.join("x.ion.gz"), &data).unwrap();
    std::fs::write(bare.join("y.ion"), format!("{}\n", good(2))).unwrap();
    let out = tmp.path().join("o2");
    unwind(&[&bare], &out, &[], 0);
    assert_eq!(count_rows(&out.join("user")), 2);
}

// --- Property: random items written as Ion read back equal --------------------------------------

/// A canonical DynamoDB number.
fn number() -> impl Strategy<Value = String> {
    (any::<bool>(), "[1-9][0-9]{0,37}", -45i32..45).prop_map(|(neg, digits, exp)| {
        let raw = format!("{}{digits}E{exp}", if neg { "-" } else { "" });
        decode::Number::parse(&raw).map(|n| n.as_str().to_owned()).unwrap_or_else(|_| "0".to_owned())
    })
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof!["[a-zA-Z_][a-zA-Z0-9_]{0,5}", "[a-z '\"\\\\é✓$0-9.:{}]{1,6}", Just("null".to_owned())]
}

fn scalar() -> impl Strategy<Value = Value<'static>> {
    let bytes = || proptest::collection::vec(any::<u8>(), 0..10);
    prop_oneof![
        "[a-zA-Z0-9 \"'\\\\\n\t\u{1}é✓]{0,10}".prop_map(|s| Value::S(s.into())),
        number().prop_map(|n| Value::N(decode::Number::parse(&n).unwrap().into_owned())),
        bytes().prop_map(|b| Value::B(b.into())),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
        proptest::collection::btree_set("[a-z\"]{0,4}", 1..4)
            .prop_map(|s| Value::SS(s.into_iter().map(Into::into).collect())),
        proptest::collection::btree_set(number(), 1..4)
            .prop_map(|s| Value::NS(s.iter().map(|n| decode::Number::parse(n).unwrap().into_owned()).collect())),
        proptest::collection::btree_set(bytes(), 1..3).prop_map(|s| Value::BS(s.into_iter().map(Into::into).collect())),
    ]
}

fn value() -> impl Strategy<Value = Value<'static>> {
    scalar().prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::L),
            proptest::collection::btree_map(name(), inner, 0..4)
                .prop_map(|m| Value::M(m.into_iter().map(|(k, v)| (k.into(), v)).collect())),
        ]
    })
}

fn item() -> impl Strategy<Value = Item<'static>> {
    proptest::collection::btree_map(name(), value(), 1..6)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// A test-local Ion writer, independent of the sample's: numbers as `coefficient d exponent`,
/// every field name quoted.
fn write_ion(v: &Value<'_>, out: &mut String) {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let list = |out: &mut String, note: &str, items: Vec<String>| {
        out.push_str(note);
        out.push('[');
        out.push_str(&items.join(", "));
        out.push(']');
    };
    match v {
        Value::S(s) => out.push_str(&quote(s, '"')),
        Value::N(n) => out.push_str(&ion_decimal(n.as_str())),
        Value::B(b) => out.push_str(&format!("{{{{ {} }}}}", b64(b))),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Null => out.push_str("null.null"),
        Value::SS(v) => list(out, "$dynamodb_SS::", v.iter().map(|s| quote(s, '"')).collect()),
        Value::NS(v) => list(out, "'$dynamodb_NS'::", v.iter().map(|n| ion_decimal(n.as_str())).collect()),
        Value::BS(v) => list(out, "$dynamodb_BS::", v.iter().map(|b| format!("{{{{{}}}}}", b64(b))).collect()),
        Value::L(v) => list(
            out,
            "",
            v.iter()
                .map(|e| {
                    let mut s = String::new();
                    write_ion(e, &mut s);
                    s
                })
                .collect(),
        ),
        Value::M(m) => write_struct(m, out),
    }
}

fn write_struct(m: &[(std::borrow::Cow<'_, str>, Value<'_>)], out: &mut String) {
    out.push('{');
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&quote(k, '\''));
        out.push_str(": ");
        write_ion(v, out);
    }
    out.push('}');
}

fn quote(s: &str, q: char) -> String {
    let mut out = String::from(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

/// Canonical decimal text as `digitsdEXP` (`-1.25` is `-125d-2`, `600` is `600d0`).
fn ion_decimal(n: &str) -> String {
    let (sign, body) = n.strip_prefix('-').map_or(("", n), |b| ("-", b));
    match body.split_once('.') {
        None => format!("{sign}{body}d0"),
        Some((int, frac)) => {
            let digits = format!("{int}{frac}");
            let digits = digits.trim_start_matches('0');
            format!("{sign}{}d-{}", if digits.is_empty() { "0" } else { digits }, frac.len())
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_items_written_as_ion_read_back_equal(item in item()) {
        let mut line = String::from("$ion_1_0 {Item: ");
        write_struct(&item, &mut line);
        line.push('}');
        let got = decode::decode(Format::ExportIon, line.as_bytes());
        match got {
            Ok(Record::Put(got)) => prop_assert_eq!(&got, &item, "{}", line),
            other => {
                // Only what DynamoDB itself refuses may fail: duplicate names after quoting are
                // impossible (the map is keyed), so nothing should.
                prop_assert!(false, "{line}\n{other:?}");
            }
        }
        // The same item through the JSON path decodes to the same thing.
        let mut json = String::from("{\"Item\":");
        decode::write_item_json(&item, &mut json);
        json.push('}');
        match decode::decode(Format::ExportJson, json.as_bytes()) {
            Ok(Record::Put(j)) => prop_assert_eq!(j, item),
            other => prop_assert!(false, "{json}\n{other:?}"),
        }
    }
}

// --- moto ----------------------------------------------------------------------------------------

/// An Ion export in S3 reads like its local copy; and `etl export start --format ion` against moto.
/// moto 5.2.5 accepts `ExportFormat=ION` and reports it back, but writes DynamoDB JSON anyway
/// (one `data/<uuid>.gz` without manifests), so the second half checks the request and that its
/// output unwinds, not moto's Ion (it has none).
#[test]
fn ion_exports_in_s3_and_export_start_format_ion() {
    use crate::aws::{assert_same_tables, etl_aws, moto, py, s, s3_keys, shop_table, unique};
    let Some(m) = moto() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ion");
    sample(&local, "ion", "30");
    let bucket = unique("ionexp");
    py(m, "upload.py", &[s(&local), &bucket, "ion", "--as-export"]);
    let (a, b) = (tmp.path().join("out-local"), tmp.path().join("out-s3"));
    unwind(&[&local], &a, &[], 0);
    etl_aws(m, &["unwind", &format!("s3://{bucket}/ion/"), "--out", s(&b)], 0);
    assert_eq!(published(&a), published(&b));
    let report = run_report(&b);
    assert_eq!(report["reconciliation"]["matches_manifest"], true, "{}", report["reconciliation"]);

    let table = shop_table(m);
    py(m, "s3.py", &["mb", &bucket]);
    let r = etl_aws(
        m,
        &["export", "start", "--table", table, "--bucket", &bucket, "--prefix", "p", "--format", "ion", "--wait"],
        0,
    );
    let location = r.stdout.lines().map(str::trim).find(|l| l.starts_with("s3://")).unwrap().to_owned();
    let keys = s3_keys(m, &bucket, "p/");
    assert!(keys.iter().any(|k| k.ends_with(".gz")) && !keys.iter().any(|k| k.ends_with(".ion.gz")), "{keys:?}");
    let out = tmp.path().join("out-moto");
    etl_aws(m, &["unwind", &location, "--out", s(&out)], 0);
    assert_same_tables(sample_out(), &out, &location);
}
